"""Packed projection gradient: dq, dk, dv stored straight into one (T, 3 H D) buffer.

`projection_rotary_attention` takes the gradient of its projection as ONE packed buffer written
by the backward kernel (`blockattn::projection_attention_bwd`); the unfused path
(`_projection_rotary_attention(..., packed_grad=False)`) lets autograd zero-pad and sum three
separate dq, dk, dv. Both must give bitwise the same O, dx, dw and dbias. Every gradient buffer is
poisoned with NaN (through `blockattn.ops._grad_buffer`, the one allocation point of both
backward ops), so an element the kernel fails to write shows up as NaN.

CPU: the kernels run under the Triton interpreter (tests/conftest.py sets TRITON_INTERPRET=1).
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import blockattn
import oracles
from blockattn import ops
from blockattn.cases.generate import make_sinu_pos, offsets_from_lengths
from blockattn.kernels import attention as _attn

if not torch.cuda.is_available() and not _attn.INTERPRET:
    pytest.skip(
        "blockattn was imported without TRITON_INTERPRET=1 and there is no CUDA device",
        allow_module_level=True,
    )

DEVICE = "cpu" if _attn.INTERPRET else "cuda"
H, D, D_IN = 2, 64, 48
# Full and partial blocks, an empty sequence, a one-token sequence (its dS is exactly zero, so
# dq and dk rows are signed zeros), a short last sequence.
LENGTHS = (70, 0, 1, 30, 5)
T = sum(LENGTHS)


def _poison(shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    return torch.full(shape, float("nan"), dtype=like.dtype, device=like.device)


@pytest.fixture
def poisoned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ops, "_grad_buffer", _poison)


def _inputs(dtype: torch.dtype, bias: bool, seed: int) -> dict[str, torch.Tensor | None]:
    g = torch.Generator().manual_seed(seed)
    n = 3 * H * D
    # w scaled so that the projection has unit-order entries (softmax neither flat nor saturated).
    x = torch.randn(T, D_IN, generator=g)
    w = torch.randn(D_IN, n, generator=g) / D_IN**0.5
    b = torch.randn(n, generator=g) if bias else None
    do = torch.randn(T, H, D, generator=g)
    offsets = offsets_from_lengths(LENGTHS, torch.int64)
    return {
        "x": x.to(dtype).to(DEVICE),
        "w": w.to(dtype).to(DEVICE),
        "bias": None if b is None else b.to(dtype).to(DEVICE),
        "do": do.to(dtype).to(DEVICE),
        "offsets": offsets.to(DEVICE),
        "sinu": make_sinu_pos(offsets, D).to(DEVICE),
    }


def _fwd_bwd(inp: dict, packed: bool, **kw) -> tuple[torch.Tensor, ...]:
    """(O, dx, dw[, dbias]) through `_projection_rotary_attention(packed_grad=packed)`."""
    leaves = [inp["x"], inp["w"]] + ([inp["bias"]] if inp["bias"] is not None else [])
    leaves = [t.detach().requires_grad_(True) for t in leaves]
    bias = leaves[2] if len(leaves) == 3 else None
    out = ops._projection_rotary_attention(
        leaves[0], leaves[1], inp["sinu"], inp["offsets"], qheads=H, bias=bias,
        packed_grad=packed, **kw,
    )  # fmt: skip
    return (out.detach(), *torch.autograd.grad(out, leaves, inp["do"]))


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view({2: torch.int16, 4: torch.int32}[t.element_size()])


def _assert_bitwise(got: tuple[torch.Tensor, ...], want: tuple[torch.Tensor, ...]) -> None:
    assert len(got) == len(want)
    for name, a, e in zip(("out", "dx", "dw", "dbias"), got, want, strict=False):
        assert a.dtype == e.dtype and a.shape == e.shape, name
        assert bool(a.isfinite().all()), f"{name}: non-finite (an unwritten gradient element?)"
        # Bit patterns, not values: also catches -0.0 vs +0.0.
        assert torch.equal(_bits(a), _bits(e)), (
            f"{name} differs: max |diff| {(a.float() - e.float()).abs().max()}"
        )


_CASES = {
    "bf16-bias-rotate-v": (torch.bfloat16, True, True, 64),
    "bf16-nobias-rotate-qk": (torch.bfloat16, False, False, 64),
    "fp16-bias-rotate-v-block32": (torch.float16, True, True, 32),
}


@pytest.mark.usefixtures("poisoned")
@pytest.mark.parametrize("case", list(_CASES), ids=list(_CASES))
def test_packed_grad_bitwise_equals_unfused(case: str) -> None:
    dtype, bias, rotate_v, block_size = _CASES[case]
    inp = _inputs(dtype, bias, seed=len(case))
    kw = dict(rotate_v=rotate_v, block_size=block_size)
    got = _fwd_bwd(inp, packed=True, **kw)
    want = _fwd_bwd(inp, packed=False, **kw)
    assert len(got) == (4 if bias else 3)
    _assert_bitwise(got, want)


def _packed_vs_three(grad_out, proj, offsets, sinu) -> tuple[torch.Tensor, torch.Tensor]:
    """The packed op's dY, and the three separate dq | dk | dv of attention_bwd concatenated."""
    scale = D**-0.5
    d_proj = torch.ops.blockattn.projection_attention_bwd(
        grad_out, proj, offsets, sinu, H, H, 64, scale, True, None
    )
    q, k, v = ops._split_packed(proj, H, H)
    dq, dk, dv = torch.ops.blockattn.attention_bwd(
        grad_out, q, k, v, offsets, sinu, 64, scale, True, None
    )
    return d_proj, torch.cat([t.reshape(T, H * D) for t in (dq, dk, dv)], dim=1)


@pytest.mark.usefixtures("poisoned")
def test_packed_buffer_is_the_three_gradients() -> None:
    """dY itself, bitwise: every element of the packed buffer is written with dq | dk | dv."""
    inp = _inputs(torch.bfloat16, True, seed=7)
    proj = torch.addmm(inp["bias"], inp["x"], inp["w"])
    d_proj, three = _packed_vs_three(inp["do"], proj, inp["offsets"], inp["sinu"])
    assert d_proj.shape == proj.shape and d_proj.is_contiguous()
    assert bool(d_proj.isfinite().all())
    assert torch.equal(_bits(d_proj), _bits(three))


@pytest.mark.usefixtures("poisoned")
def test_poison_catches_an_unwritten_sequence(monkeypatch: pytest.MonkeyPatch) -> None:
    """The NaN poison is live: a backward that skips the last sequence leaves NaN rows."""
    real = ops.build_tile_table

    def drop_last_sequence(offsets, T_, block_size, max_seq_len):
        return real(offsets[:-1], int(offsets[-2]), block_size, max_seq_len)

    monkeypatch.setattr(ops, "build_tile_table", drop_last_sequence)
    inp = _inputs(torch.bfloat16, False, seed=8)
    proj = inp["x"] @ inp["w"]
    d_proj, _ = _packed_vs_three(inp["do"], proj, inp["offsets"], inp["sinu"])
    nan_rows = d_proj.isnan().any(dim=1)
    assert bool(nan_rows[-LENGTHS[-1] :].all()) and not bool(nan_rows[: -LENGTHS[-1]].any())


def test_packed_grad_matches_oracle() -> None:
    """Anchors the bitwise checks: the packed gradient is also close to the FP64 oracle."""
    inp = _inputs(torch.bfloat16, True, seed=9)
    _, dx, dw, db = _fwd_bwd(inp, packed=True)
    ref = oracles.projection_rotary_block_attention_backward(
        inp["x"], inp["w"], inp["bias"], inp["sinu"], inp["offsets"], H, H, inp["do"]
    )
    for name, a, r in zip(("dx", "dw", "dbias"), (dx, dw, db), ref, strict=True):
        # bf16 inputs to the GEMMs (dY rounded to bf16) dominate: relative error ~2^-8 per term.
        err = float((a.double() - r).norm() / r.norm())
        assert err < 2e-2, f"{name}: relative error {err:.2e}"


def test_packed_path_is_the_default() -> None:
    inp = _inputs(torch.bfloat16, False, seed=10)
    x = inp["x"].detach().requires_grad_(True)
    out = blockattn.projection_rotary_attention(x, inp["w"], inp["sinu"], inp["offsets"], qheads=H)
    assert "projection_attention_fwd" in type(out.grad_fn).__name__
