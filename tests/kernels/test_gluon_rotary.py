"""The Gluon fused-rotary backward (blockattn.kernels.attention_gluon_rotary) and forward
(attention_gluon_rotary_fwd).

Gluon has no interpreter, so on CPU the kernels are built ahead of time for sm_90 (warpgroup
MMAs, TMA, the CTAs per SM their launch puts); on an sm_90 GPU they are judged:
- dQ, dK, dV (O) against the FP64 rotary oracle with the fp32-split-operands bound (tolerances v5):
  0 violations, on jagged inputs with partial blocks, an empty sequence, padding slots and more
  tiles than programs, NaN-poisoned outputs; bf16 and fp16, D = 64 and 128, rotate_v on and off;
- within 1 ulp (+ 2^-16 of the largest magnitude) of the portable rotary kernel, which forms
  the same products (the rotation's fp32 FMAs may fuse differently);
- Inf/NaN in the rows a partial block's TMA box reads past its end never reach its outputs;
  inputs left untouched; the same bits on a second call.
"""

from __future__ import annotations

import pytest
import torch
from split_bound import forward_violations, split_operand_violations

from blockattn.bounds.elementwise import elements_apart
from blockattn.cases.generate import make_sinu_pos
from blockattn.kernels import attention as A
from blockattn.kernels import attention_gluon_rotary as GR
from blockattn.kernels import attention_gluon_rotary_fwd as GRF
from blockattn.kernels import compile_check
from blockattn.kernels.tiles import build_tile_table

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ON_SM90 = DEVICE == "cuda" and torch.cuda.get_device_capability() == (9, 0)
gpu_only = pytest.mark.skipif(not ON_SM90, reason="the Gluon path runs on sm_90 GPUs only")


# A subset of test_compile_check.test_gluon_builds_spill_free (same builds, same checks):
# slow tier only, so CI does not compile them twice.
@pytest.mark.slow
def test_gluon_rotary_builds_for_sm90() -> None:
    variants = compile_check.select_variants("*-d64-rot*-gluon,*-fp16-d128-rot-gluon")
    results = compile_check.run_check(variants, ["sm_90"], jobs=2)
    for r in results:
        assert r.ok, f"{r.variant}: {r.error or r.failures}"
        assert r.mma_counts[compile_check.TMA_OPCODE] > 0, r.variant
        assert r.ctas_per_sm >= 1, r.variant


# ----------------------------------------------------------------------------- GPU: the kernel

LENGTHS = [100, 37, 0, 64, 5, 209]  # partial blocks of 36, 37, 5, 17 rows; an empty sequence
H = 2
ROTATE_V = pytest.mark.parametrize("rotate_v", [True, False], ids=["rot-v", "rot-qk"])
DTYPE_D = pytest.mark.parametrize("dtype,D", [(torch.bfloat16, 128), (torch.bfloat16, 64),
                                              (torch.float16, 128), (torch.float16, 64)],
                                  ids=["bf16-d128", "bf16-d64", "fp16-d128", "fp16-d64"])


def _inputs(D: int, dtype: torch.dtype, lengths: list[int], seed: int):
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    off = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], device=DEVICE)
    T = int(off[-1])
    q, k, v, do = (torch.randn(T, H, D, device=DEVICE, generator=g).to(dtype) for _ in range(4))
    return q, k, v, do, off, make_sinu_pos(off, D)


def _gluon(q, k, v, do, off, sinu, rotate_v) -> tuple[torch.Tensor, ...]:
    grads = tuple(torch.full_like(q, float("nan")) for _ in range(3))
    table = build_tile_table(off, q.shape[0], 64)
    return GR.launch_bwd(q, k, v, do, grads, table, sinu, q.shape[2] ** -0.5, rotate_v)


@gpu_only
@DTYPE_D
@ROTATE_V
def test_gluon_rotary_inside_the_bound_and_near_portable(dtype, D, rotate_v) -> None:
    q, k, v, do, off, sinu = _inputs(D, dtype, LENGTHS, seed=11)
    before = [t.clone() for t in (q, k, v, do, sinu)]
    got = _gluon(q, k, v, do, off, sinu, rotate_v)
    assert split_operand_violations(q, k, v, do, off, got, sinu, rotate_v) == dict.fromkeys(
        ("dQ", "dK", "dV"), 0)
    ref = tuple(torch.full_like(q, float("nan")) for _ in range(3))
    A.launch_bwd(q, k, v, do, build_tile_table(off, q.shape[0], 64), sinu, D ** -0.5, 64,
                 rotate_v, ref)
    for name, a, b in zip(("dQ", "dK", "dV"), got, ref, strict=True):
        assert elements_apart(a, b) == 0, f"{name}: beyond 1 ulp of the portable rotary kernel"
    for a, b in zip((q, k, v, do, sinu), before, strict=True):
        assert torch.equal(a, b), "an input was modified"
    again = _gluon(q, k, v, do, off, sinu, rotate_v)
    for a, b in zip(got, again, strict=True):
        assert torch.equal(a, b), "not bitwise repeatable"


@gpu_only
@pytest.mark.parametrize("D", [64, 128])
def test_gluon_rotary_persistent_loop_many_tiles(D) -> None:
    g = torch.Generator().manual_seed(7)
    lengths = torch.randint(0, 700, (128,), generator=g).tolist()
    q, k, v, do, off, sinu = _inputs(D, torch.bfloat16, lengths, seed=12)
    got = _gluon(q, k, v, do, off, sinu, True)
    assert split_operand_violations(q, k, v, do, off, got, sinu, True) == dict.fromkeys(
        ("dQ", "dK", "dV"), 0)


@gpu_only
def test_gluon_rotary_rows_read_past_a_partial_block_are_contained() -> None:
    q, k, v, do, off, sinu = _inputs(128, torch.bfloat16, LENGTHS, seed=5)
    clean = _gluon(q, k, v, do, off, sinu, True)
    # Sequence 2 starts at token 137: sequence 1's only block (100..136, n = 37) reads its rows.
    for t in (q, k, v, do, sinu):
        t[137:, ..., :64] = float("inf")
        t[137:, ..., 64:] = float("nan")
    dirty = _gluon(q, k, v, do, off, sinu, True)
    for name, a, b in zip(("dQ", "dK", "dV"), dirty, clean, strict=True):
        assert torch.equal(a[:137], b[:137]), f"{name}: poison past a partial block leaked in"


# ----------------------------------------------------------------------------- GPU: the forward


def _gluon_fwd(q, k, v, off, sinu, rotate_v) -> torch.Tensor:
    o = torch.full_like(q, float("nan"))
    table = build_tile_table(off, q.shape[0], 64)
    return GRF.launch_fwd(q, k, v, o, table, sinu, q.shape[2] ** -0.5, rotate_v)


@gpu_only
@DTYPE_D
@ROTATE_V
def test_gluon_rotary_fwd_inside_the_bound_and_near_portable(dtype, D, rotate_v) -> None:
    q, k, v, _, off, sinu = _inputs(D, dtype, LENGTHS, seed=21)
    before = [t.clone() for t in (q, k, v, sinu)]
    got = _gluon_fwd(q, k, v, off, sinu, rotate_v)
    assert forward_violations(q, k, v, off, got, sinu, rotate_v) == 0
    ref = torch.full_like(q, float("nan"))
    A.launch_fwd(q, k, v, build_tile_table(off, q.shape[0], 64), sinu, D ** -0.5, 64, rotate_v,
                 ref)
    assert elements_apart(got, ref) == 0, "O: beyond 1 ulp of the portable rotary kernel"
    for a, b in zip((q, k, v, sinu), before, strict=True):
        assert torch.equal(a, b), "an input was modified"
    assert torch.equal(got, _gluon_fwd(q, k, v, off, sinu, rotate_v)), "not bitwise repeatable"


@gpu_only
@pytest.mark.parametrize("D", [64, 128])
def test_gluon_rotary_fwd_persistent_loop_many_tiles(D) -> None:
    g = torch.Generator().manual_seed(8)
    lengths = torch.randint(0, 700, (160,), generator=g).tolist()
    q, k, v, _, off, sinu = _inputs(D, torch.bfloat16, lengths, seed=13)
    assert forward_violations(q, k, v, off, _gluon_fwd(q, k, v, off, sinu, True), sinu) == 0


@gpu_only
@ROTATE_V
def test_gluon_rotary_fwd_rows_read_past_a_partial_block_are_contained(rotate_v) -> None:
    q, k, v, _, off, sinu = _inputs(128, torch.bfloat16, LENGTHS, seed=6)
    clean = _gluon_fwd(q, k, v, off, sinu, rotate_v)
    # Sequence 2 starts at token 137: sequence 1's only block (100..136, n = 37) reads its rows.
    for t in (q, k, v, sinu):
        t[137:, ..., :64] = float("inf")
        t[137:, ..., 64:] = float("nan")
    dirty = _gluon_fwd(q, k, v, off, sinu, rotate_v)
    assert torch.equal(dirty[:137], clean[:137]), "poison past a partial block leaked in"
