"""`flex` (optional): torch FlexAttention with a same-64-token-block mask over the jagged sequence.

CUDA only: on CPU flex_attention falls back to an unfused math path that is neither a fair
baseline nor fast enough for the interpreter tier.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from blockattn.providers._base import Supports, Unsupported
from blockattn.providers._common import BLOCK, block_layout, run_autograd
from blockattn.providers._timing import Prepared, Timing, grad_leaves, replayed

NAME = "flex"
ROLE = "baseline"
SUPPORTS = Supports(devices=("cuda",), gqa=True)  # CPU flex is an unfused math path
_compiled = None


def _attention(q, k, v, offsets, scale, block: int = BLOCK):
    global _compiled
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    T = q.shape[0]
    if T == 0:
        return q * 0
    slot, _ = block_layout(offsets, T, block)
    blk = slot // block  # global block id of each token

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


# ----------------------------------------------------------------------------- bench timing

_FLEX: dict[str, Callable] = {}  # the bench's compiled flex_attention


def _timed(case: Any) -> Prepared:
    """FlexAttention over the whole jagged sequence, BLOCK_SIZE=64, block-sparse mask.

    The BlockMask is built directly (BlockMask.from_kv_blocks): q tile i only visits the 1-3 kv
    tiles its tokens' blocks overlap (blocks restart at sequence starts, so they are not 64-aligned
    in the flat sequence); mask_mod keeps the same-block pairs. create_block_mask would evaluate
    the T x T mask (T ~ 1.4 M).
    """
    if case.q.device.type != "cuda":
        raise Unsupported("flex baseline runs on CUDA only (CPU flex is an unfused math path)")
    try:
        from torch.nn.attention.flex_attention import BlockMask, flex_attention

        dev = case.q.device
        off = case.offsets_cpu.to(torch.int64)
        lens = off[1:] - off[:-1]
        T = case.T
        seq = torch.repeat_interleave(torch.arange(lens.numel()), lens)
        pos = torch.arange(T) - off[:-1][seq]
        bstart = off[:-1][seq] + (pos // BLOCK) * BLOCK  # first token of the token's block
        bend = torch.minimum(bstart + BLOCK, off[1:][seq])
        nq = (T + BLOCK - 1) // BLOCK
        # mask_mod is also evaluated at the padded positions T..nq*64 of the last tile: pad the
        # id table so those reads stay in bounds (they are masked by seq_lengths anyway).
        blk_id = torch.full((nq * BLOCK,), -1, dtype=torch.int32)
        blk_id[:T] = torch.cumsum((pos % BLOCK == 0).to(torch.int64), 0).to(torch.int32)
        blk_id = blk_id.to(dev)
        first_tok = torch.arange(nq) * BLOCK
        last_tok = torch.clamp(first_tok + BLOCK - 1, max=T - 1)
        lo = bstart[first_tok] // BLOCK
        hi = (bend[last_tok] - 1) // BLOCK
        num = (hi - lo + 1).to(torch.int32)
        # kv_indices must be nq wide (from_kv_blocks densifies rows to compute the q-side
        # indices for the backward): only the first `num` entries of a row are read.
        idx = torch.zeros((nq, nq), dtype=torch.int32, device=dev)
        idx[:, :3] = (lo[:, None] + torch.arange(3)[None, :]).clamp(max=nq - 1).to(dev)

        def same_block(b, h, qi, ki):
            return blk_id[qi] == blk_id[ki]

        mask = BlockMask.from_kv_blocks(
            num.view(1, 1, nq).to(dev),
            idx.view(1, 1, nq, nq),
            BLOCK_SIZE=BLOCK,
            mask_mod=same_block,
            seq_lengths=(T, T),
        )
        if "fn" not in _FLEX:
            _FLEX["fn"] = torch.compile(flex_attention, dynamic=False)
        fn = _FLEX["fn"]
        opts: dict[str, int] | None = None

        def attn(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
            q4, k4, v4 = (t.transpose(0, 1).unsqueeze(0) for t in (q, k, v))
            o = fn(q4, k4, v4, block_mask=mask, scale=case.scale, kernel_options=opts)
            return o.squeeze(0).transpose(0, 1)

        leaves = grad_leaves(case)
        notes = {"BLOCK_SIZE": str(BLOCK), "bwd": "autograd.grad on a retained graph"}
        try:
            o_graph = attn(*leaves)
            torch.autograd.grad(o_graph, leaves, case.do, retain_graph=True)
        except Exception as exc:
            # Default tiles (128) must divide the mask's BLOCK_SIZE; record why, retry with 64.
            notes["default kernel_options failed"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            # bwd tiles as in the usual D=128 Hopper config, each dividing 64.
            opts = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_M1": 32, "BLOCK_N1": 64}
            opts.update({"BLOCK_M2": 64, "BLOCK_N2": 32})
            notes["kernel_options"] = str(opts)
            o_graph = attn(*leaves)
            torch.autograd.grad(o_graph, leaves, case.do, retain_graph=True)
    except Exception as exc:
        first = notes.get("default kernel_options failed") if "notes" in locals() else None
        prior = f" (before that, with default kernel_options: {first})" if first else ""
        raise Unsupported(f"FlexAttention failed: {type(exc).__name__}: {exc}{prior}") from exc

    return replayed(case, attn, leaves, o_graph, notes)


TIMINGS = (Timing("flex", False, _timed, "FlexAttention, BLOCK_SIZE=64 block-sparse mask"),)
