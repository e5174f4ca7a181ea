"""`eager`: same-precision PyTorch reference (input-dtype math, padded-block softmax, autograd).

Runs anywhere, so it is the CPU tier's baseline. Shares no code with `oracles` or the kernels.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from blockattn.providers._base import Supports
from blockattn.providers._common import BLOCK, eager_block_attention, kernel_from, run_autograd
from blockattn.providers._timing import Prepared, Timing, grad_leaves, replayed

NAME = "eager"
ROLE = "baseline"
# every op's output rounded to the input dtype (softmax internally in FP32)
ACCURACY_MODEL = "eager-input-dtype"
# plain PyTorch: any dtype, head dim, device and offsets dtype; GQA by repeat
SUPPORTS = Supports(gqa=True, offsets_dtypes=("int32", "int64"), max_seq_len=True)


def run(inputs, variant: str) -> dict[str, torch.Tensor]:
    return run_autograd(inputs, variant, eager_block_attention)


KERNEL = kernel_from(eager_block_attention)  # the same math on the caller's tensors


# ----------------------------------------------------------------------------- bench timing


def _timed(case: Any) -> Prepared:
    """Padded (n_blocks, H, 64, D) batched matmuls + masked softmax in the input dtype."""
    off = case.offsets_cpu.to(torch.int64)
    lens = off[1:] - off[:-1]
    nblk = (lens + BLOCK - 1) // BLOCK
    nb = int(nblk.sum())
    seq = torch.repeat_interleave(torch.arange(lens.numel()), lens)
    pos = torch.arange(case.T) - off[:-1][seq]
    first = (torch.cumsum(nblk, 0) - nblk)[seq]
    slot = ((first + pos // BLOCK) * BLOCK + pos % BLOCK).to(case.q.device)
    valid = torch.zeros(nb * BLOCK, dtype=torch.bool, device=case.q.device)
    valid[slot] = True
    keymask = valid.view(nb, 1, 1, BLOCK)
    H, D, s = case.H, case.D, case.scale

    def attn(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        def pad(t: Tensor) -> Tensor:
            z = t.new_zeros(nb * BLOCK, H, D).index_copy(0, slot, t)
            return z.view(nb, BLOCK, H, D).transpose(1, 2)

        sc = torch.matmul(pad(q), pad(k).transpose(-1, -2)) * s
        p = torch.softmax(sc.masked_fill(~keymask, float("-inf")), dim=-1)
        o = torch.matmul(p, pad(v))
        return o.transpose(1, 2).reshape(nb * BLOCK, H, D).index_select(0, slot)

    leaves = grad_leaves(case)
    o_graph = attn(*leaves)

    notes = {"bwd": "autograd.grad on a retained graph (no standalone eager backward)"}
    return replayed(case, attn, leaves, o_graph, notes)


TIMINGS = (Timing("eager", False, _timed, "eager PyTorch padded-block attention"),)
