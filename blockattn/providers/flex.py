"""`flex` (optional): torch FlexAttention with a same-64-token-block mask over the jagged sequence.

CUDA only: on CPU flex_attention falls back to an unfused math path that is neither a fair
baseline nor fast enough for the interpreter tier.
"""

from __future__ import annotations

import torch

from blockattn.providers import Supports, Unsupported
from blockattn.providers._common import BLOCK, block_layout, run_autograd

NAME = "flex"
ROLE = "baseline"
SUPPORTS = Supports(devices=("cuda",), gqa=True)  # CPU flex is an unfused math path
_compiled = None


def _attention(q, k, v, offsets, scale):
    global _compiled
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    T = q.shape[0]
    if T == 0:
        return q * 0
    slot, _ = block_layout(offsets, T)
    blk = slot // BLOCK  # global block id of each token

    def same_block(b, h, qi, ki):
        return blk[qi] == blk[ki]

    mask = create_block_mask(same_block, None, None, T, T, device=q.device)
    if _compiled is None:
        _compiled = torch.compile(flex_attention, dynamic=True)
    o = _compiled(
        q.transpose(0, 1).unsqueeze(0),
        k.transpose(0, 1).unsqueeze(0),
        v.transpose(0, 1).unsqueeze(0),
        block_mask=mask,
        scale=scale,
    )
    return o.squeeze(0).transpose(0, 1)


def run(inputs, variant: str) -> dict[str, torch.Tensor]:
    if not torch.cuda.is_available() or inputs.q.device.type != "cuda":
        raise Unsupported("flex baseline runs on CUDA only (CPU flex is an unfused math path)")
    try:
        return run_autograd(inputs, variant, _attention)
    except Exception as exc:  # compile/tiling limits surface as assorted errors
        raise Unsupported(f"flex_attention could not run this case: {exc}") from exc
