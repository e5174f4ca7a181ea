"""The fused-rotary Gluon backward (blockattn.kernels.attention_gluon_rotary).

Gluon has no interpreter, so on CPU the kernel is built ahead of time for sm_90 (warpgroup
MMAs, no spills, two CTAs per SM) and only the dispatch is exercised; on an sm_90 GPU the kernel
itself is judged:
- dQ, dK, dV against the FP64 oracle with the fp32-split-operands bound (tolerances v5, c = 2):
  0 violations, on jagged inputs with partial blocks, an empty sequence and padding slots,
  NaN-poisoned outputs so an unwritten element shows; bf16 and fp16, D = 64 and 128, rotary on
  q, k and v and on q, k only;
- within 1 ulp + 2^-16 of the tensor's scale of the portable rotary kernel (other summation
  order: not bitwise, see the module docstring);
- inputs untouched, the same bits on a second call, and Inf/NaN in the rows after a partial
  block never reach its outputs.
The rest of the suite runs against it with BLOCKATTN_KERNEL_PATH=prefer-gluon on a GPU.
"""

from __future__ import annotations

import pytest
import torch

from blockattn.kernels import attention as A
from blockattn.kernels import attention_gluon_rotary as GR
from blockattn.kernels import compile_check, dispatch
from blockattn.kernels.tiles import build_tile_table

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ON_SM90 = DEVICE == "cuda" and torch.cuda.get_device_capability() == (9, 0)
gpu_only = pytest.mark.skipif(not ON_SM90, reason="the Gluon path runs on sm_90 GPUs only")


# ----------------------------------------------------------------------------- CPU: build, dispatch


def test_gluon_rotary_builds_for_sm90_without_spills() -> None:
    variants = compile_check.select_variants("bwd-*-rot*-gluon")
    assert {v.name for v in variants} == {f"bwd-{dt}-d{d}-{r}-gluon" for dt in ("bf16", "fp16")
                                          for d in (64, 128) for r in ("rot", "rot-qk")}
    results = compile_check.run_check(variants, ["sm_90"], jobs=2)
    for r in results:
        assert r.ok, f"{r.variant}: {r.error or r.failures}"
        assert r.spill_stores == 0 and r.spill_loads == 0, r.variant
        assert r.ctas_per_sm >= GR.CTAS_PER_SM, r.variant


def _meta(D: int = 128, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.empty(8, 2, D, dtype=dtype, device=DEVICE)


SIN = torch.empty(8, 128, device=DEVICE)


@pytest.mark.parametrize("why,kwargs", [
    ("centred", dict(centred=False)),
    ("float32", dict(q=_meta(dtype=torch.float32))),
    ("head dim 96", dict(q=_meta(D=96), sinu_pos=torch.empty(8, 96, device=DEVICE))),
    ("block_size=32", dict(block_size=32)),
    ("block_size=128", dict(block_size=128)),
], ids=["not-centred", "fp32", "d96", "bs32", "bs128"])
def test_gluon_rotary_dispatch_names_why_it_cannot_run(monkeypatch, why, kwargs) -> None:
    args = dict(q=_meta(), sinu_pos=SIN, block_size=64, centred=True)
    args.update(kwargs)
    q = args["q"]
    monkeypatch.setenv("BLOCKATTN_KERNEL_PATH", "gluon")
    with pytest.raises(RuntimeError, match=why):
        dispatch.gluon_bwd(q, args["sinu_pos"], args["block_size"], args["centred"], (q,))
    monkeypatch.setenv("BLOCKATTN_KERNEL_PATH", "prefer-gluon")  # never raises
    assert not dispatch.gluon_bwd(q, args["sinu_pos"], args["block_size"], args["centred"], (q,))


def test_gluon_rotary_dispatch_modes(monkeypatch) -> None:
    q = _meta()
    call = lambda t=q: dispatch.gluon_bwd(t, SIN, 64, True, (t,))
    for mode in ("portable", "hopper", "prefer-hopper"):
        monkeypatch.setenv("BLOCKATTN_KERNEL_PATH", mode)
        assert not call(), mode
    monkeypatch.setenv("BLOCKATTN_KERNEL_PATH", "prefer-gluon")
    assert call() == ON_SM90
    # no TMA: heads need not be packed (unit stride along D is all the loads ask)
    strided = torch.empty(8, 4, 128, dtype=torch.bfloat16, device=DEVICE)[:, ::2]
    assert call(strided) == ON_SM90
    monkeypatch.setenv("BLOCKATTN_KERNEL_PATH", "gluon")
    if ON_SM90:
        assert call()
    else:
        with pytest.raises(RuntimeError, match=r"interpreter|sm_90"):
            call()
    monkeypatch.delenv("BLOCKATTN_KERNEL_PATH")
    monkeypatch.setattr(GR, "GPU_CONFIGS", {})  # auto: no measured config, no Gluon path
    assert not call()
    monkeypatch.setattr(GR, "GPU_CONFIGS", {"no such GPU": (128,)})
    assert not call()
    if ON_SM90:
        monkeypatch.setattr(GR, "GPU_CONFIGS", {torch.cuda.get_device_name(): (128,)})
        assert call()


# ----------------------------------------------------------------------------- GPU: the kernel

# Partial blocks of 36, 37, 5, 17 rows; an empty sequence; sequences of several blocks.
LENGTHS = [100, 37, 0, 64, 5, 209]
H = 2


def _inputs(D: int, dtype: torch.dtype, lengths: list[int], seed: int):
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    off = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], device=DEVICE)
    T = int(off[-1])
    q, k, v, do = (torch.randn(T, H, D, device=DEVICE, generator=g).to(dtype) for _ in range(4))
    sinu = torch.rand(T, D, device=DEVICE, generator=g) * 2 - 1
    return q, k, v, do, sinu, off


def _run(launch, q, k, v, do, sinu, off, rotate_v: bool) -> tuple[torch.Tensor, ...]:
    grads = tuple(torch.full_like(q, float("nan")) for _ in range(3))
    table = build_tile_table(off, q.shape[0], 64)
    if launch == "gluon":
        return GR.launch_bwd(q, k, v, do, table, sinu, q.shape[2] ** -0.5, rotate_v, grads)
    return A.launch_bwd(q, k, v, do, table, sinu, q.shape[2] ** -0.5, 64, rotate_v, grads)


def _violations(q, k, v, do, sinu, off, rotate_v, got) -> dict[str, int]:
    import oracles
    from blockattn.bounds import models
    from blockattn.bounds.elementwise import TokenMap, elementwise_metrics
    from blockattn.judge import tolerances
    from oracles import error_bound

    name = "fp32-split-operands"
    tol = tolerances.load(tolerances.default_tolerance_dir() / "v5.toml")
    model = models.parse(name, tol.data["models"][name], name)
    dt = "bfloat16" if q.dtype == torch.bfloat16 else "float16"
    ref = oracles.rotary_block_attention_backward(q, k, v, off, sinu, do, rotate_v=rotate_v,
                                                  block_size=64)
    (bnd,) = error_bound.attention_error_bounds(q, k, v, off, do, models=[model.resolve(dt)],
                                               sinu_pos=sinu, rotate_v=rotate_v, block_size=64)
    tmap = TokenMap(off, q.shape[0], 64, q.device)
    out = {}
    for nm, y, r in zip(("dQ", "dK", "dV"), got, ref, strict=True):
        assert bool(torch.isfinite(y).all()), f"{nm}: unwritten (NaN) or non-finite elements"
        m = elementwise_metrics(y, r, dt, bound=bnd[nm], c=model.c, tmap=tmap)
        out[nm] = m["bound"]["violations"]
    return out


def _close_at_scale(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Within one ulp of the stored dtype plus 2^-16 of the tensor's largest magnitude: two fp32
    summation orders differ by ~n 2^-24 of the terms where an output is a near-cancelling sum
    (tests/kernels/test_hopper_path.py measured it); a wrong or unwritten tile is off by O(max)."""
    fa, fb = a.double(), b.double()
    ulp = torch.finfo(a.dtype).eps * torch.maximum(fa.abs(), fb.abs())
    tol = ulp + 2.0**-16 * float(fb.abs().max())
    return bool(torch.isfinite(fa).all() and ((fa - fb).abs() <= tol).all())


CASES = pytest.mark.parametrize("dtype,D", [(torch.bfloat16, 128), (torch.bfloat16, 64),
                                            (torch.float16, 128), (torch.float16, 64)],
                                ids=["bf16-d128", "bf16-d64", "fp16-d128", "fp16-d64"])
ROTATE_V = pytest.mark.parametrize("rotate_v", [True, False], ids=["rot", "rot-qk"])


@gpu_only
@CASES
@ROTATE_V
def test_gluon_rotary_inside_the_bound_and_close_to_portable(dtype, D, rotate_v) -> None:
    q, k, v, do, sinu, off = _inputs(D, dtype, LENGTHS, seed=11)
    before = [t.clone() for t in (q, k, v, do, sinu)]
    got = _run("gluon", q, k, v, do, sinu, off, rotate_v)
    assert _violations(q, k, v, do, sinu, off, rotate_v, got) == {"dQ": 0, "dK": 0, "dV": 0}
    ref = _run("portable", q, k, v, do, sinu, off, rotate_v)
    for name, a, b in zip(("dQ", "dK", "dV"), got, ref, strict=True):
        assert _close_at_scale(a, b), f"{name}: beyond 1 ulp + 2^-16 max from the portable"
    for a, b in zip((q, k, v, do, sinu), before, strict=True):
        assert torch.equal(a, b), "an input was modified"
    again = _run("gluon", q, k, v, do, sinu, off, rotate_v)
    for a, b in zip(got, again, strict=True):
        assert torch.equal(a, b), "not bitwise repeatable"


@gpu_only
@pytest.mark.parametrize("D", [64, 128])
def test_gluon_rotary_many_tiles(D) -> None:
    g = torch.Generator().manual_seed(7)
    lengths = torch.randint(0, 700, (128,), generator=g).tolist()
    q, k, v, do, sinu, off = _inputs(D, torch.bfloat16, lengths, seed=12)
    got = _run("gluon", q, k, v, do, sinu, off, True)
    assert _violations(q, k, v, do, sinu, off, True, got) == {"dQ": 0, "dK": 0, "dV": 0}


@gpu_only
def test_gluon_rotary_rows_after_a_partial_block_are_contained() -> None:
    q, k, v, do, sinu, off = _inputs(128, torch.bfloat16, LENGTHS, seed=5)
    clean = _run("gluon", q, k, v, do, sinu, off, True)
    # Sequence 2 starts at token 137, right after sequence 1's only block (100..136, n = 37).
    for t in (q, k, v, do, sinu):
        t[137:, ..., :64] = float("inf")
        t[137:, ..., 64:] = float("nan")
    dirty = _run("gluon", q, k, v, do, sinu, off, True)
    for name, a, b in zip(("dQ", "dK", "dV"), dirty, clean, strict=True):
        assert torch.equal(a[:137], b[:137]), f"{name}: poison after a partial block leaked in"
