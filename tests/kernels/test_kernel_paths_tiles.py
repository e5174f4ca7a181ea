"""Every kernel path runs or refuses cleanly at every row-tile class (issue 42, item 4).

CPU: the dispatch decision per tile class (the Hopper path takes row tiles of 16..64 and
refuses 128 with its reason: forced, a RuntimeError naming it; prefer-hopper, the portable
kernels), and the launch-time fallback when a build does not fit the GPU (Triton's
OutOfResources). GPU (`gpu`, skipped on CPU): each BLOCKATTN_KERNEL_PATH value x block size
(row tiles 16, 32, 64, 128 and the Gluon range's edges 33 and 64) x dtype x head dim x
plain/rotary, forward and backward: inside the bound of blockattn's model, or a refusal whose
message names the path and why. Never a crash (OutOfResources, a compile error).
"""

from __future__ import annotations

import pytest
import torch

from blockattn.kernels import attention_hopper as AH
from blockattn.kernels import dispatch
from blockattn.kernels.tile_math import INTERPRET, block_rows
from blockattn.validation import FP32_GPU_MAX_BLOCK_SIZE

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# one block size per row-tile class, plus the Gluon range's edges (33..64: 64-row tiles)
BLOCK_SIZES = (16, 32, 33, 64, 128)


def test_the_block_sizes_cover_every_row_tile_class() -> None:
    assert {block_rows(bs) for bs in BLOCK_SIZES} == {16, 32, 64, 128}


@pytest.mark.skipif(DEVICE != "cpu" or not INTERPRET, reason="the interpreter's dispatch")
@pytest.mark.parametrize("bs", BLOCK_SIZES)
def test_the_hopper_path_refuses_128_row_tiles_with_its_reason(bs, monkeypatch) -> None:
    q = torch.zeros(4, 2, 64, dtype=torch.bfloat16)
    too_big = block_rows(bs) > AH.MAX_TILE_ROWS
    monkeypatch.setenv("BLOCKATTN_KERNEL_PATH", "prefer-hopper")
    for kernel in ("fwd", "bwd"):
        got = dispatch.kernel_path(kernel, q, None, (q,), block_size=bs)
        assert got == ("portable" if too_big else "hopper"), (bs, kernel)
    monkeypatch.setenv("BLOCKATTN_KERNEL_PATH", "hopper")
    if too_big:
        with pytest.raises(RuntimeError, match=r"hopper cannot run: 128-row tiles .*shared mem"):
            dispatch.kernel_path("bwd", q, None, (q,), block_size=bs)
    else:
        assert dispatch.kernel_path("bwd", q, None, (q,), block_size=bs) == "hopper"


def test_float32_at_128_row_tiles_is_refused_on_a_gpu_by_name() -> None:
    """fp32's FMA-loop dots at a 128-row tile spill ~170 KB per thread and build for minutes on
    sm_90 (the H200 tier's fp32 block-size-128 tests failed or never finished): the op refuses
    them on a GPU naming block_size, blockattn declares it (the battery and the gate record
    "unsupported (declared)"), and the interpreter still runs them."""
    from types import SimpleNamespace

    from blockattn import providers
    from blockattn.validation import fp32_gpu_block_refusal

    assert fp32_gpu_block_refusal(torch.float32, True, 65).startswith("block_size=65 with float32")
    for dtype, gpu, bs in ((torch.float32, True, 64), (torch.float32, False, 128),
                           (torch.bfloat16, True, 128), (torch.float16, True, 128)):  # fmt: skip
        assert fp32_gpu_block_refusal(dtype, gpu, bs) is None, (dtype, gpu, bs)
    sup = providers.get("blockattn").supports
    spec = SimpleNamespace(dtype="float32", D=64, variant="plain", scale=None, rotate_v=True)
    assert "float32 block sizes up to 64 on a GPU" in sup.refusal(spec, "cuda", "sm_90", 128)
    assert sup.refusal(spec, "cuda", "sm_90", 64) is None
    assert sup.refusal(spec, "cpu", "cpu", 128) is None
    assert sup.refusal(SimpleNamespace(**{**vars(spec), "dtype": "bfloat16"}), "cuda", "sm_90",
                       128) is None  # fmt: skip


def test_a_build_that_does_not_fit_falls_back_or_refuses_by_name(monkeypatch) -> None:
    from triton.runtime.errors import OutOfResources

    exc = OutOfResources(360516, 232448, "shared memory")
    monkeypatch.setenv("BLOCKATTN_KERNEL_PATH", "prefer-hopper")
    with pytest.warns(RuntimeWarning, match="falls back to the portable kernels.*shared memory"):
        dispatch._hopper_falls_back("bwd", exc)
    monkeypatch.setenv("BLOCKATTN_KERNEL_PATH", "hopper")
    with pytest.raises(RuntimeError, match="hopper cannot run: bwd build does not fit"):
        dispatch._hopper_falls_back("bwd", exc)
    with pytest.raises(ValueError, match="a real bug"):  # anything else is not a fallback
        dispatch._hopper_falls_back("bwd", ValueError("a real bug"))


@pytest.mark.skipif(DEVICE != "cpu" or not INTERPRET, reason="the interpreter runs the path")
def test_prefer_hopper_at_block_size_128_runs_inside_the_bound_on_the_interpreter(
    monkeypatch,
) -> None:
    monkeypatch.setenv("BLOCKATTN_KERNEL_PATH", "prefer-hopper")
    _judged("prefer-hopper", 128, torch.bfloat16, 64, rotary=False, lengths=(133, 0, 3))


def _judged(path: str, bs: int, dtype: torch.dtype, D: int, rotary: bool,
            lengths: tuple[int, ...] | None = None) -> None:  # fmt: skip
    """Forward + backward of blockattn (BLOCKATTN_KERNEL_PATH already `path`) on a 2-head case
    with a partial block: inside the bound of blockattn's model, or (forced paths only) a
    refusal naming why."""
    from blockattn import providers
    from blockattn.cases import contract as C
    from blockattn.judge import tolerances
    from blockattn.judge.contract import Battery

    tol = tolerances.load(tolerances.latest_released(tolerances.default_tolerance_dir(),
                                                     device=DEVICE))  # fmt: skip
    prov = providers.get("blockattn")
    b = Battery(prov, tol, DEVICE)
    lengths = lengths or (2 * bs + 5, 0, bs - 1 or 1)  # full blocks and partial ones
    t = C.base(dtype, D, DEVICE, seed=bs, lengths=lengths, rotary=rotary)
    p = C.layout_probe(t, "padded")
    p.block_size = bs
    b.numeric(p)
    (check,) = [c for c in b.checks if c.prop == "layout"]
    if DEVICE == "cuda" and dtype == torch.float32 and bs > FP32_GPU_MAX_BLOCK_SIZE:
        # declared: the battery records it unsupported, and the op refuses it by name
        assert check.status == "unsupported" and "float32" in check.detail, check
        with pytest.raises(ValueError, match=r"block_size=\d+ with float32 inputs on a GPU"):
            prov.kernel(p.q, p.k, p.v, p.offsets, block_size=bs, scale=None,
                        sinu_pos=p.sinu_pos, rotate_v=True)  # fmt: skip
        return
    if check.status == "FAIL" and path in ("hopper", "gluon"):
        assert check.detail.startswith(f"raised RuntimeError: BLOCKATTN_KERNEL_PATH={path} "
                                       "cannot run"), check.detail  # fmt: skip
        return
    assert check.status == "pass", (path, bs, dtype, D, rotary, check.detail)
    assert all(c.status == "pass" for c in b.checks), [(c.prop, c.detail) for c in b.checks]


@pytest.mark.gpu
@pytest.mark.parametrize("rotary", [False, True], ids=["plain", "rotary"])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32],
                         ids=["bf16", "fp16", "fp32"])  # fmt: skip
@pytest.mark.parametrize("bs", BLOCK_SIZES)
@pytest.mark.parametrize("path", dispatch.PATHS)
def test_every_path_runs_or_refuses_at_every_tile_class(path, bs, dtype, D, rotary,
                                                        monkeypatch) -> None:  # fmt: skip
    monkeypatch.setenv("BLOCKATTN_KERNEL_PATH", path)  # restored after the test
    _judged(path, bs, dtype, D, rotary)
