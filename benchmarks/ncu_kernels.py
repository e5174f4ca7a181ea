"""Launch each blockattn kernel once at a mid-size shape, for Nsight Compute.

    ncu --set detailed -k regex:_bwd_kernel python benchmarks/ncu_kernels.py [--shape-p] [--plain]
        [--rotary] [--gluon-rotary [DIR]]

B=256, max_len=1024, sparsity 0.7 (~79 k tokens, ~1230 tiles of 64 x 4 heads: many waves on a
132-SM GPU, so per-kernel ratios are those of shape P) with H=4, D=128, bf16. --shape-p runs
shape P itself (B=1152, max_len=4096: the persistent Gluon kernels' steady state, ~700 tiles per
SM); --plain skips the rotary launches; --rotary runs only the portable rotary backward
(attention.launch_bwd: the default rotary path, whatever the GPU); --gluon-rotary runs only the
Gluon fused-rotary backward (attention_gluon_rotary, rotate_v), from DIR/attention_gluon_rotary.py
when a directory follows (another commit's module).
"""

from __future__ import annotations

import math
import sys

import torch

from blockattn.cases.generate import make_case
from blockattn.kernels import attention, dispatch
from blockattn.kernels.tiles import build_tile_table


def _module(rest: list[str]):
    """attention_gluon_rotary, or DIR/attention_gluon_rotary.py when rest starts with a DIR."""
    if not rest or rest[0].startswith("--"):
        from blockattn.kernels import attention_gluon_rotary
        return attention_gluon_rotary
    from ab_common import load_module  # a sibling (this folder is first on sys.path)

    return load_module(rest[0], "attention_gluon_rotary.py", "gluon_rotary_other")


def main() -> None:
    shape_p = "--shape-p" in sys.argv
    case = make_case(B=1152 if shape_p else 256, max_len=4096 if shape_p else 1024,
                     sparsity=0.7, H=4, D=128, dtype=torch.bfloat16, device="cuda", seed=3)
    table = build_tile_table(case.offsets, case.q.shape[0], 64)
    scale = 1 / math.sqrt(128)
    if "--gluon-rotary" in sys.argv:
        GR = _module(sys.argv[sys.argv.index("--gluon-rotary") + 1:])
        grads = tuple(torch.empty_like(case.q) for _ in range(3))
        GR.launch_bwd(case.q, case.k, case.v, case.grad_out, grads, table, case.sinu_pos, scale,
                      True)
        torch.cuda.synchronize()
        return
    if "--rotary" in sys.argv:
        grads = tuple(torch.empty_like(case.q) for _ in range(3))
        attention.launch_bwd(case.q, case.k, case.v, case.grad_out, table, case.sinu_pos, scale,
                             64, True, grads)
        torch.cuda.synchronize()
        return
    for sinu in (None,) if "--plain" in sys.argv else (None, case.sinu_pos):
        dispatch.attention_fwd(case.q, case.k, case.v, table, sinu, scale, 64, True)
        dispatch.attention_bwd(case.q, case.k, case.v, case.grad_out, table, sinu, scale, 64, True)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
