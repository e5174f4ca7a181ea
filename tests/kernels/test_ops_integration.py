"""Integration of the blockattn custom ops with PyTorch: opcheck, torch.compile, torch.nested,
non-contiguous inputs, and the projection wrapper's argument checks.

On a CPU-only machine the kernels run under the Triton interpreter (TRITON_INTERPRET=1, set by
tests/conftest.py before blockattn is imported). Shapes are small (T <= 100, H = 2, D = 64) to
keep the interpreter's cost down. Consistency checks are bitwise (same kernels, same inputs);
accuracy is checked only against the FP64 oracles, never against another blockattn path.
"""

from __future__ import annotations

import os

import pytest
import torch

# Module-level guard in case this file is collected without the conftest: the interpreter must be
# on before blockattn is first imported (attention.INTERPRET is read at import time).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import blockattn
import blockattn.ops  # registers the torch.ops.blockattn custom ops (imported lazily otherwise)
import oracles
from blockattn.kernels import attention as _attn

if not torch.cuda.is_available() and not _attn.INTERPRET:
    pytest.skip(
        "blockattn was imported without TRITON_INTERPRET=1 and there is no CUDA device",
        allow_module_level=True,
    )

DEVICE = "cpu" if _attn.INTERPRET else "cuda"
H, D = 2, 64
LENGTHS = (70, 30)  # one sequence with a full and a partial block, one with a partial block
T = sum(LENGTHS)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# CI time (.ci/run <= 15 min on 2 cores): under the interpreter each opcheck / torch.compile case
# costs 20-60 s, so the CPU tier keeps one of each kind (bf16, the fuller variant) and the rest
# run in the slow tier there; on a GPU every case stays in the quick tier.
_ON_CPU_SLOW = [pytest.mark.slow] if DEVICE == "cpu" else []


def _cpu_keeps(first: dict, *keep: str) -> list:
    """params of `first` (id -> value); ids not in `keep` are slow on CPU."""
    return [pytest.param(v, id=k, marks=() if k in keep else _ON_CPU_SLOW)
            for k, v in first.items()]


def _offsets(dtype: torch.dtype = torch.int64) -> torch.Tensor:
    off = torch.tensor([0, *LENGTHS], dtype=torch.int64).cumsum(0)
    return off.to(dtype=dtype, device=DEVICE)


def _qkv(dtype: torch.dtype, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(T, H, D, generator=g).to(dtype).to(DEVICE) for _ in range(3)]


def _sinu() -> torch.Tensor:
    """(T, D) fp32 [sin | cos] table with per-sequence positions."""
    pos = torch.cat([torch.arange(n) for n in LENGTHS]).double()
    inv_freq = 10000.0 ** (-torch.arange(D // 2).double() / (D // 2))
    ang = pos[:, None] * inv_freq[None, :]
    return torch.cat([ang.sin(), ang.cos()], dim=1).float().to(DEVICE)


def _fwd_bwd(
    fn, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, grad_out: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    """Output and (dq, dk, dv) of fn(q, k, v) for fresh leaf copies of q, k, v."""
    leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
    out = fn(*leaves)
    return (out.detach(), *torch.autograd.grad(out, leaves, grad_out))


def _assert_bitwise(actual: tuple[torch.Tensor, ...], expected: tuple[torch.Tensor, ...]) -> None:
    for name, a, e in zip(("out", "dq", "dk", "dv"), actual, expected, strict=True):
        assert a.dtype == e.dtype and a.shape == e.shape, name
        assert torch.equal(a, e), (
            f"{name} differs: max |diff| {(a.float() - e.float()).abs().max()}"
        )


# ----------------------------------------------------------------------------- opcheck

# test_schema, test_autograd_registration, test_faketensor, test_aot_dispatch_dynamic: all four
# run on CPU (the ops dispatch through the Triton interpreter), so none is excluded.
_SINU = {"no-rotary": False, "rotary": True}


@pytest.mark.parametrize("rotary", _cpu_keeps(_SINU, "rotary"))
@pytest.mark.parametrize("dtype", _cpu_keeps(DTYPES, "bf16"))
def test_opcheck_attention_fwd(dtype: torch.dtype, rotary: bool) -> None:
    q, k, v = (t.requires_grad_(True) for t in _qkv(dtype))
    sinu = _sinu() if rotary else None
    # int32 offsets with rotary, int64 without: both dtypes reach the op's schema.
    offsets = _offsets(torch.int32 if rotary else torch.int64)
    args = (q, k, v, offsets, sinu, 64, D**-0.5, True, None)
    torch.library.opcheck(torch.ops.blockattn.attention_fwd.default, args)


@pytest.mark.parametrize("rotary", _cpu_keeps(_SINU, "rotary"))
@pytest.mark.parametrize("dtype", _cpu_keeps(DTYPES, "bf16"))
def test_opcheck_attention_bwd(dtype: torch.dtype, rotary: bool) -> None:
    q, k, v = _qkv(dtype)
    (grad_out,) = _qkv(dtype, seed=1)[:1]
    sinu = _sinu() if rotary else None
    args = (grad_out, q, k, v, _offsets(), sinu, 64, D**-0.5, False, T)
    torch.library.opcheck(torch.ops.blockattn.attention_bwd.default, args)


# ----------------------------------------------------------------------------- torch.compile


class _Attention(torch.nn.Module):
    def __init__(self, rotate_v: bool) -> None:
        super().__init__()
        self.rotate_v = rotate_v

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        offsets: torch.Tensor,
        sinu_pos: torch.Tensor,
    ) -> torch.Tensor:
        # Ops around the call make a real graph rather than a single opaque node.
        out = blockattn.block_attention(
            q * 2.0, k, v, offsets, sinu_pos=sinu_pos, rotate_v=self.rotate_v
        )
        return out.float().square().to(q.dtype)


@pytest.mark.parametrize("rotate_v", _cpu_keeps({"rotate-v": True, "rotate-qk": False},
                                                 "rotate-v"))  # fmt: skip
@pytest.mark.parametrize("dtype", _cpu_keeps(DTYPES, "bf16"))
def test_compile_fullgraph_matches_eager(dtype: torch.dtype, rotate_v: bool) -> None:
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    q, k, v = _qkv(dtype)
    (grad_out,) = _qkv(dtype, seed=1)[:1]
    offsets, sinu = _offsets(), _sinu()
    module = _Attention(rotate_v)
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(module, fullgraph=True, backend=counter)  # graph break -> raises

    got = _fwd_bwd(lambda *t: compiled(*t, offsets, sinu), q, k, v, grad_out)
    want = _fwd_bwd(lambda *t: module(*t, offsets, sinu), q, k, v, grad_out)
    assert counter.frame_count == 1, "module was not compiled into exactly one graph"
    _assert_bitwise(got, want)


def test_compiled_output_matches_oracle() -> None:
    """Anchors the bitwise checks: the compiled path is also close to the FP64 oracle."""
    q, k, v = _qkv(torch.bfloat16)
    offsets = _offsets()
    compiled = torch.compile(
        lambda q, k, v: blockattn.block_attention(q, k, v, offsets),
        fullgraph=True,
        backend="aot_eager",
    )
    out = compiled(q, k, v).double()
    ref = oracles.block_attention(q, k, v, offsets)
    # bf16 output rounding (2^-9 relative) dominates the kernel's error.
    torch.testing.assert_close(out, ref, atol=1e-2, rtol=1e-2)


# ----------------------------------------------------------------------------- torch.nested


@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
def test_nested_jagged_matches_flat(dtype: torch.dtype) -> None:
    q, k, v = _qkv(dtype)
    (grad_out,) = _qkv(dtype, seed=1)[:1]
    offsets, sinu = _offsets(), _sinu()

    values = [t.detach().requires_grad_(True) for t in (q, k, v)]
    nested = [torch.nested.nested_tensor_from_jagged(t, offsets) for t in values]
    out_nt = blockattn.block_attention(*nested, None, sinu_pos=sinu)
    assert out_nt.is_nested and out_nt.layout == torch.jagged
    assert torch.equal(out_nt.offsets(), offsets)
    out_nt.values().backward(grad_out)
    got = (out_nt.values().detach(), *(t.grad for t in values))

    want = _fwd_bwd(
        lambda q, k, v: blockattn.block_attention(q, k, v, offsets, sinu_pos=sinu),
        q,
        k,
        v,
        grad_out,
    )
    assert all(g is not None for g in got[1:]), "no gradient reached the nested values"
    _assert_bitwise(got, want)


# ----------------------------------------------------------------------------- strides


def _packed_qkv_views(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> list[torch.Tensor]:
    """(T, H, D) views of one (T, 3, H, D) buffer: token stride 3*H*D, unit stride along D."""
    packed = torch.stack([q, k, v], dim=1)
    return [packed[:, i] for i in range(3)]


def _last_dim_strided(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> list[torch.Tensor]:
    """(T, H, D) views with stride 2 along D (every other element of a (T, H, 2D) buffer)."""
    out = []
    for t in (q, k, v):
        wide = torch.zeros(T, H, 2 * D, dtype=t.dtype, device=t.device)
        wide[..., ::2] = t
        out.append(wide[..., ::2])
    return out


_LAYOUTS = {"packed-qkv": _packed_qkv_views, "last-dim-stride-2": _last_dim_strided}


@pytest.mark.parametrize("layout", list(_LAYOUTS), ids=list(_LAYOUTS))
def test_noncontiguous_matches_contiguous(layout: str) -> None:
    dtype = torch.bfloat16
    q, k, v = _qkv(dtype)
    (grad_out,) = _qkv(dtype, seed=1)[:1]
    offsets, sinu = _offsets(), _sinu()
    views = _LAYOUTS[layout](q, k, v)
    assert not any(t.is_contiguous() for t in views)
    assert all(torch.equal(a, b) for a, b in zip(views, (q, k, v), strict=True))

    def attn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return blockattn.block_attention(q, k, v, offsets, sinu_pos=sinu)

    # grad_out non-contiguous too: the backward op sees strided dO.
    grad_views = _LAYOUTS[layout](grad_out, grad_out, grad_out)[0]
    got = _fwd_bwd(attn, *views, grad_views)
    want = _fwd_bwd(attn, *(t.contiguous() for t in views), grad_out)
    _assert_bitwise(got, want)


# ----------------------------------------------------------------------------- projection


def test_projection_rejects_gqa() -> None:
    d_in, qheads, kvheads = 32, 2, 1
    x = torch.randn(T, d_in, device=DEVICE)
    w = torch.randn(d_in, (qheads + 2 * kvheads) * D, device=DEVICE)
    with pytest.raises(ValueError, match=r"kvheads=1 != qheads=2: GQA is not supported"):
        blockattn.projection_rotary_attention(
            x, w, _sinu(), _offsets(), qheads=qheads, kvheads=kvheads
        )


# ----------------------------------------------------------------------------- packed projection
# The projection wrapper's own op pair: q, k, v are views of one packed projection and the
# backward returns one packed (T, 3 H D) gradient (tests/kernels/test_packed_projection.py
# checks it bitwise against the unfused path).


def _projection_inputs(dtype: torch.dtype, bias: bool = True) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(3)
    d_in, n = 32, 3 * H * D
    x = torch.randn(T, d_in, generator=g).to(dtype).to(DEVICE)
    w = (torch.randn(d_in, n, generator=g) / d_in**0.5).to(dtype).to(DEVICE)
    b = torch.randn(n, generator=g).to(dtype).to(DEVICE) if bias else None
    return x, w, b


@pytest.mark.parametrize("dtype", _cpu_keeps(DTYPES, "bf16"))
def test_opcheck_projection_attention_fwd(dtype: torch.dtype) -> None:
    x, w, b = _projection_inputs(dtype)
    proj = torch.addmm(b, x, w).detach().requires_grad_(True)
    args = (proj, _offsets(), _sinu(), H, H, 64, D**-0.5, True, None)
    torch.library.opcheck(torch.ops.blockattn.projection_attention_fwd.default, args)


@pytest.mark.parametrize("rotate_v", _cpu_keeps({"rotate-v": True, "rotate-qk": False},
                                                 "rotate-v"))  # fmt: skip
def test_opcheck_projection_attention_bwd(rotate_v: bool) -> None:
    x, w, b = _projection_inputs(torch.bfloat16)
    (grad_out,) = _qkv(torch.bfloat16, seed=1)[:1]
    args = (grad_out, torch.addmm(b, x, w), _offsets(torch.int32), _sinu(), H, H, 64, D**-0.5,
            rotate_v, T)  # fmt: skip
    torch.library.opcheck(torch.ops.blockattn.projection_attention_bwd.default, args)


def test_projection_op_rejects_gqa_layout() -> None:
    x, w, b = _projection_inputs(torch.bfloat16)
    proj = torch.addmm(b, x, w)
    with pytest.raises(ValueError, match=r"kvheads=1 != qheads=4: GQA is not supported"):
        torch.ops.blockattn.projection_attention_fwd(
            proj, _offsets(), _sinu(), 4, 1, 64, D**-0.5, True, None
        )


@pytest.mark.parametrize("bias", _cpu_keeps({"bias": True, "no-bias": False}, "bias"))
def test_compile_projection_fullgraph_matches_eager(bias: bool) -> None:
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    x, w, b = _projection_inputs(torch.bfloat16, bias)
    (grad_out,) = _qkv(torch.bfloat16, seed=1)[:1]
    offsets, sinu = _offsets(), _sinu()

    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        out = blockattn.projection_rotary_attention(x * 2.0, w, sinu, offsets, qheads=H, bias=b)
        return out.float().square().to(x.dtype)

    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(fn, fullgraph=True, backend=counter)  # graph break -> raises

    def run(f) -> tuple[torch.Tensor, ...]:
        leaves = [t.detach().requires_grad_(True) for t in (x, w, b) if t is not None]
        out = f(*leaves, *([None] if b is None else []))
        return (out.detach(), *torch.autograd.grad(out, leaves, grad_out))

    got, want = run(compiled), run(fn)
    assert counter.frame_count == 1, "projection was not compiled into exactly one graph"
    assert len(got) == len(want) == (4 if bias else 3)
    for name, a, e in zip(("out", "dx", "dw", "dbias"), got, want, strict=False):
        assert torch.equal(a, e), f"{name} differs under torch.compile"
