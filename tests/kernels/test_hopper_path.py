"""The Hopper path (blockattn.kernels.attention_hopper) against the portable kernels.

The Hopper kernels run the portable tile bodies on tiles that TMA loads in whole BLOCK-row boxes,
so the rows past a partial block's n valid tokens are the next sequence's (or zeros past T): they
must be zeroed before any arithmetic. What is checked, on every path it can run on:
- outputs equal the portable kernels' bitwise (plain) or within one rounding of the stored dtype
  (rotary: the compiler may order the rotation's fp32 sums differently), with NaN-poisoned
  outputs so an unwritten element shows;
- Inf/NaN in the rows a partial block's box reads past its end never reach that block's outputs;
- `kernel_path` dispatch: a bad BLOCKATTN_KERNEL_PATH is named, a forced Hopper path that cannot
  run says why, prefer-hopper falls back where it cannot run, and auto never picks it without a
  measured config.
On CPU the kernel source runs under the interpreter, whose runtime loop bounds break under
numpy >= 2.4 (the portable path avoids its loop there): attention_hopper patches the
interpreter's scalar-to-index conversion on import, only under TRITON_INTERPRET=1.
"""

from __future__ import annotations

import pytest
import torch

from blockattn.bounds.elementwise import elements_apart
from blockattn.kernels import attention as A
from blockattn.kernels import attention_hopper as AH
from blockattn.kernels import dispatch
from blockattn.kernels.tiles import build_tile_table

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ON_SM90 = DEVICE == "cuda" and torch.cuda.get_device_capability() == (9, 0)
LENGTHS = [100, 37, 64, 5]  # partial blocks of 36, 37 and 5 rows; the last box runs past T
H = 2


@pytest.fixture
def _loop_bounds():
    """The interpreter's runtime loop bounds need attention_hopper's shim (installed on import
    under TRITON_INTERPRET=1); these tests are what exercise it."""
    if DEVICE == "cpu":
        import triton.runtime.interpreter as interp

        assert getattr(interp._patch_lang_tensor, "_blockattn_shim", False)


def _inputs(D: int, dtype: torch.dtype, rotary: bool, seed: int, lengths=LENGTHS):
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    off = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], device=DEVICE)
    T = int(off[-1])
    q, k, v, do = (torch.randn(T, H, D, device=DEVICE, generator=g).to(dtype) for _ in range(4))
    sinu = torch.rand(T, D, device=DEVICE, generator=g) * 2 - 1 if rotary else None
    return q, k, v, do, sinu, build_tile_table(off, T, 64)


def _run(path: str, q, k, v, do, sinu, table, rotate_v: bool = True):
    o = torch.full_like(q, float("nan"))
    grads = tuple(torch.full_like(q, float("nan")) for _ in range(3))
    if path == "hopper":
        AH.launch_fwd(q, k, v, o, table, sinu, q.shape[2] ** -0.5, 64, rotate_v)
        AH.launch_bwd(q, k, v, do, grads, table, sinu, q.shape[2] ** -0.5, 64, rotate_v)
    else:
        A.launch_fwd(q, k, v, table, sinu, q.shape[2] ** -0.5, 64, rotate_v, o)
        # The whole-tile body the Hopper path shares (the portable rotary D = 128 default forms
        # it in column chunks, whose S and dP sums run in another order).
        A.launch_bwd(q, k, v, do, table, sinu, q.shape[2] ** -0.5, 64, rotate_v, grads,
                     chunks=1)
    return (o, *grads)


def _ulp_close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Within one unit in the last place of the stored dtype, elementwise (both finite)."""
    fa, fb = a.double(), b.double()
    ulp = torch.finfo(a.dtype).eps * torch.maximum(fa.abs(), fb.abs()).clamp_min(
        torch.finfo(a.dtype).tiny)
    return bool(torch.isfinite(fa).all() and ((fa - fb).abs() <= ulp).all())


def _close_at_scale(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Within one ulp of the stored dtype plus 2^-16 of the tensor's largest magnitude, a
    finite (blockattn.bounds.elementwise.elements_apart).

    Why the second term: where an output is a near-cancelling sum (|O| far below its terms),
    two fp32 accumulation orders differ by ~n 2^-24 of the terms' magnitudes (n <= 128), which
    is many ulps of the small result. Over 600 tiles such elements occur (measured on an H200,
    benchmarks/diag_hopper_rot.py: both paths' errors against FP64 match, ~1000 of 3.2M O
    elements beyond 1 ulp of the exact value in each); a wrong or unwritten tile is off by
    O(max), far above 2^-16 of it.
    """
    return elements_apart(a, b) == 0


_ON_CPU_SLOW = [pytest.mark.slow] if DEVICE == "cpu" else []


@pytest.mark.skipif(DEVICE == "cuda" and not ON_SM90, reason="the Hopper path needs sm_90")
@pytest.mark.parametrize("dtype,D,rotary,rotate_v", [
    pytest.param(torch.bfloat16, 64, False, True, id="bf16-d64-plain"),
    # CI time: under the interpreter (30-70 s each) these two run in the slow tier on CPU
    pytest.param(torch.float16, 128, False, True, id="fp16-d128-plain", marks=_ON_CPU_SLOW),
    pytest.param(torch.bfloat16, 64, True, True, id="bf16-d64-rotary"),
    # The variant whose two-stage config does not fit shared memory (attention_hopper.FITS).
    # On a GPU it needs more tiles than programs (2 per SM), or the JIT specialises
    # tiles_per_program = 1, there is no loop to pipeline and any config fits.
    pytest.param(torch.bfloat16, 128, True, False, id="bf16-d128-rotary-qk", marks=_ON_CPU_SLOW),
])
def test_hopper_matches_portable(_loop_bounds, dtype, D, rotary, rotate_v) -> None:
    many = DEVICE == "cuda" and not rotate_v
    q, k, v, do, sinu, table = _inputs(D, dtype, rotary, seed=3,
                                       lengths=LENGTHS * (60 if many else 1))
    assert not many or table.n_slots * H > 2 * torch.cuda.get_device_properties(
        DEVICE).multi_processor_count
    ref = _run("portable", q, k, v, do, sinu, table, rotate_v)
    out = _run("hopper", q, k, v, do, sinu, table, rotate_v)
    for name, a, b in zip(("O", "dQ", "dK", "dV"), out, ref, strict=True):
        assert bool(torch.isfinite(a).all()), f"{name}: unwritten (NaN) or non-finite elements"
        if many:
            assert _close_at_scale(a, b), f"{name}: beyond 1 ulp + 2^-16 max from the portable"
        elif rotary:
            assert _ulp_close(a, b), f"{name}: more than 1 ulp from the portable kernel"
        else:
            assert torch.equal(a, b), f"{name}: not bitwise equal to the portable kernel"


@pytest.mark.skipif(DEVICE == "cuda" and not ON_SM90, reason="the Hopper path needs sm_90")
@pytest.mark.parametrize("rotary", [False, True], ids=["plain", "rotary"])
def test_rows_read_past_a_partial_block_are_contained(_loop_bounds, rotary: bool) -> None:
    q, k, v, do, sinu, table = _inputs(64, torch.bfloat16, rotary, seed=5)
    clean = _run("hopper", q, k, v, do, sinu, table)
    # Sequence 2 starts at token 137: sequence 1's only block (100..136, n = 37) reads its rows.
    for t in (q, k, v, do):
        t[137:, :, :32] = float("inf")
        t[137:, :, 32:] = float("nan")
    dirty = _run("hopper", q, k, v, do, sinu, table)
    for name, a, b in zip(("O", "dQ", "dK", "dV"), dirty, clean, strict=True):
        assert torch.equal(a[:137], b[:137]), f"{name}: poison past a partial block leaked in"


def test_kernel_path_dispatch(monkeypatch) -> None:
    q = torch.zeros(4, 1, 64, dtype=torch.bfloat16, device=DEVICE)
    monkeypatch.setenv("BLOCKATTN_KERNEL_PATH", "fast")
    with pytest.raises(ValueError, match="BLOCKATTN_KERNEL_PATH='fast'"):
        dispatch.kernel_path("fwd", q, None, (q,))
    monkeypatch.setenv("BLOCKATTN_KERNEL_PATH", "portable")
    assert dispatch.kernel_path("fwd", q, None, (q,)) == "portable"
    monkeypatch.setenv("BLOCKATTN_KERNEL_PATH", "hopper")
    runs_here = ON_SM90 or DEVICE == "cpu"  # the interpreter runs the Hopper source too
    if not runs_here:
        with pytest.raises(RuntimeError, match="needs an sm_90 GPU"):
            dispatch.kernel_path("fwd", q, None, (q,))
    strided = torch.zeros(4, 64, 2, dtype=torch.bfloat16, device=DEVICE).transpose(1, 2)
    if runs_here:
        assert dispatch.kernel_path("fwd", q, None, (q,)) == "hopper"
        with pytest.raises(RuntimeError, match="head-packed"):
            dispatch.kernel_path("fwd", strided, None, (strided,))
        q32 = q.float()
        with pytest.raises(RuntimeError, match="float32"):
            dispatch.kernel_path("fwd", q32, None, (q32,))
    monkeypatch.setenv("BLOCKATTN_KERNEL_PATH", "prefer-hopper")  # never raises
    assert dispatch.kernel_path("fwd", strided, None, (strided,)) == "portable"
    assert dispatch.kernel_path("fwd", q, None, (q,)) == ("hopper" if runs_here else "portable")
    monkeypatch.delenv("BLOCKATTN_KERNEL_PATH")
    monkeypatch.setattr(AH, "CONFIGS", {})  # auto: no measured config, no Hopper path
    assert dispatch.kernel_path("fwd", q, None, (q,)) == "portable"
