"""The Gluon backward (blockattn.kernels.attention_gluon).

Gluon has no interpreter, so on CPU the kernel is built ahead of time for sm_90 (it must use
warpgroup MMAs and TMA, spill nothing and fit its launch's CTAs per SM) and only the dispatch is
exercised; on an sm_90 GPU the kernel itself is judged:
- dQ, dK, dV bitwise equal to the portable kernel's (the same operations in the same order),
  and against the FP64 oracle with the fp32-split-operands bound (tolerances v5, c = 2):
  0 violations, on jagged inputs with partial blocks, an empty sequence, padding slots and more
  tiles than programs (the persistent loop's two stages), NaN-poisoned outputs so an unwritten
  element shows; bf16 and fp16, D = 64 and 128;
- Inf/NaN in the rows a partial block's TMA box reads past its end never reach its outputs, and
  the inputs are left untouched;
- the same bits on a second call (the path declares no atomics: bitwise repeatable).
The rest of the suite runs against it with BLOCKATTN_KERNEL_PATH=prefer-gluon on a GPU.
"""

from __future__ import annotations

import pytest
import torch
from split_bound import split_operand_violations

from blockattn.kernels import attention as A
from blockattn.kernels import attention_gluon as G
from blockattn.kernels import attention_gluon_rotary as GR
from blockattn.kernels import attention_gluon_rotary_fwd as GRF
from blockattn.kernels import compile_check, dispatch
from blockattn.kernels.tiles import build_tile_table

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ON_SM90 = DEVICE == "cuda" and torch.cuda.get_device_capability() == (9, 0)
gpu_only = pytest.mark.skipif(not ON_SM90, reason="the Gluon path runs on sm_90 GPUs only")


# ----------------------------------------------------------------------------- CPU: build, dispatch


# A subset of test_compile_check.test_gluon_builds_spill_free (same builds, same checks):
# slow tier only, so CI does not compile them twice.
@pytest.mark.slow
def test_gluon_builds_for_sm90_without_spills() -> None:
    variants = compile_check.select_variants("bwd-*-off-gluon,bwd-*-off-gluon2,"
                                             "bwd-*-off-gluon-lean")
    assert {v.name for v in variants} == {f"bwd-{dt}-d{d}-off-gluon{c}" for dt in ("bf16", "fp16")
                                          for d in (64, 128) for c in ("", "2", "-lean")}
    results = compile_check.run_check(variants, ["sm_90"], jobs=2)
    for r in results:
        assert r.ok, f"{r.variant}: {r.error or r.failures}"
        assert r.spill_stores == 0 and r.spill_loads == 0, r.variant
        assert r.mma_counts[compile_check.TMA_OPCODE] > 0, r.variant
        d = int(r.variant.split("-d")[1].split("-")[0])
        want = (1 if r.variant.endswith("2") else G.LEAN_CONFIGS[d][0]
                if r.variant.endswith("-lean") else G.PROGRAMS_PER_SM[d])
        assert r.ctas_per_sm >= want, r.variant


def test_gluon_chains_knob(monkeypatch) -> None:
    cpu = torch.device("cpu")
    monkeypatch.delenv("BLOCKATTN_GLUON_CHAINS", raising=False)
    assert G.chains(cpu) == {}  # off a GPU: no measured default
    assert G.lean(cpu) == ()
    for n in (1, 2):
        monkeypatch.setenv("BLOCKATTN_GLUON_CHAINS", str(n))
        assert G.chains(cpu) == dict.fromkeys(G.HEAD_DIMS, n)
        assert G.lean(cpu) == ()
    monkeypatch.setenv("BLOCKATTN_GLUON_CHAINS", "lean")  # one chain, one stage: every head dim
    assert G.chains(cpu) == dict.fromkeys(G.HEAD_DIMS, 1) and G.lean(cpu) == G.HEAD_DIMS
    monkeypatch.setenv("BLOCKATTN_GLUON_CHAINS", "3")
    for knob in (G.chains, G.lean):
        with pytest.raises(ValueError, match="BLOCKATTN_GLUON_CHAINS='3'"):
            knob(cpu)
    # the launcher's own choice is checked before anything is launched (no GPU needed)
    with pytest.raises(ValueError, match="n_chains=3: expected 1, 2 or 'lean'"):
        G.launch_bwd(*(torch.zeros(1, 1, 64),) * 4, (), None, 1.0, n_chains=3)


def _meta(D: int = 128, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.empty(8, 2, D, dtype=dtype, device=DEVICE)


@pytest.mark.parametrize("why,kwargs", [
    ("sinu_pos needs unit stride", dict(sinu_pos=torch.empty(128, 8).t())),
    ("centred", dict(centred=False)),
    ("float32", dict(q=_meta(dtype=torch.float32))),
    ("head dim 96", dict(q=_meta(D=96))),
    ("block_size=32", dict(block_size=32)),
    ("block_size=128", dict(block_size=128)),
], ids=["rotary-strided-table", "not-centred", "fp32", "d96", "bs32", "bs128"])
def test_gluon_dispatch_names_why_it_cannot_run(monkeypatch, why, kwargs) -> None:
    args = dict(q=_meta(), sinu_pos=None, block_size=64, centred=True)
    args.update(kwargs)
    q = args["q"]
    monkeypatch.setenv("BLOCKATTN_KERNEL_PATH", "gluon")
    with pytest.raises(RuntimeError, match=why):
        dispatch.gluon_bwd(args["q"], args["sinu_pos"], args["block_size"], args["centred"], (q,))
    monkeypatch.setenv("BLOCKATTN_KERNEL_PATH", "prefer-gluon")  # never raises
    assert not dispatch.gluon_bwd(args["q"], args["sinu_pos"], args["block_size"],
                                  args["centred"], (q,))


def test_gluon_dispatch_modes(monkeypatch) -> None:
    q = _meta()
    call = lambda t=q: dispatch.gluon_bwd(t, None, 64, True, (t,))
    monkeypatch.setenv("BLOCKATTN_KERNEL_PATH", "gluon-please")
    with pytest.raises(ValueError, match="BLOCKATTN_KERNEL_PATH='gluon-please'"):
        call()
    for mode in ("portable", "hopper", "prefer-hopper"):
        monkeypatch.setenv("BLOCKATTN_KERNEL_PATH", mode)
        assert not call(), mode
    monkeypatch.setenv("BLOCKATTN_KERNEL_PATH", "prefer-gluon")
    assert call() == ON_SM90
    strided = torch.empty(8, 4, 128, dtype=torch.bfloat16, device=DEVICE)[:, ::2]
    assert not call(strided)  # heads not packed: TMA cannot walk it
    monkeypatch.setenv("BLOCKATTN_KERNEL_PATH", "gluon")
    if ON_SM90:
        assert call()
        with pytest.raises(RuntimeError, match="TMA needs"):
            call(strided)
    else:
        with pytest.raises(RuntimeError, match=r"interpreter|sm_90"):
            call()
    # the plain forward has no Gluon path: a forced Gluon backward leaves it its default
    assert dispatch.kernel_path("fwd", q, None, (q,)) in ("portable", "hopper")
    monkeypatch.delenv("BLOCKATTN_KERNEL_PATH")
    monkeypatch.setattr(G, "CONFIGS", {})  # auto: no measured config, no Gluon path
    monkeypatch.setattr(G, "GPU_CONFIGS", {})
    assert not call()
    monkeypatch.setattr(G, "CONFIGS", {128: 1})
    assert call() == ON_SM90
    # a GPU's own entry adds head dims there only
    monkeypatch.setattr(G, "CONFIGS", {})
    monkeypatch.setattr(G, "GPU_CONFIGS", {"no such GPU": {128: 1}})
    assert not call()
    if ON_SM90:
        monkeypatch.setattr(G, "GPU_CONFIGS", {torch.cuda.get_device_name(): {128: 1}})
        assert call()
    # a fused-rotary backward: attention_gluon_rotary's head dims, whatever G's say
    sinu_pos = torch.empty(8, 128, device=DEVICE)
    rot = lambda: dispatch.gluon_bwd(q, sinu_pos, 64, True, (q,))
    assert rot() == ON_SM90
    half = _meta(dtype=torch.float16)
    assert dispatch.gluon_bwd(half, sinu_pos, 64, True, (half,)) == ON_SM90  # fp16 too (CONFIGS)
    monkeypatch.setattr(GR, "CONFIGS", {torch.bfloat16: (64, 128)})  # a dtype it does not name
    assert not dispatch.gluon_bwd(half, sinu_pos, 64, True, (half,))
    assert rot() == ON_SM90
    monkeypatch.setattr(GR, "CONFIGS", {})
    assert not rot()


def test_gluon_fwd_dispatch_modes(monkeypatch) -> None:
    q = _meta()
    sinu_pos = torch.empty(8, 128, device=DEVICE)
    fwd = lambda t=q, s=sinu_pos, bs=64: dispatch.gluon_fwd(t, s, bs, (t,))
    monkeypatch.setenv("BLOCKATTN_KERNEL_PATH", "prefer-gluon")
    assert fwd() == ON_SM90
    assert not fwd(q, None)  # a plain forward never takes it
    assert not fwd(q, sinu_pos, 32)
    strided = torch.empty(8, 4, 128, dtype=torch.bfloat16, device=DEVICE)[:, ::2]
    assert not fwd(strided)
    for mode in ("portable", "hopper", "prefer-hopper"):
        monkeypatch.setenv("BLOCKATTN_KERNEL_PATH", mode)
        assert not fwd(), mode
    monkeypatch.setenv("BLOCKATTN_KERNEL_PATH", "gluon")
    assert not fwd(q, None)  # forced Gluon: the plain forward keeps its default, no error
    with pytest.raises(RuntimeError, match="cannot run this forward: block_size=32"):
        fwd(q, sinu_pos, 32)
    if ON_SM90:
        assert fwd()
    else:
        with pytest.raises(RuntimeError, match=r"forward: .*(interpreter|sm_90)"):
            fwd()
    monkeypatch.delenv("BLOCKATTN_KERNEL_PATH")
    monkeypatch.setattr(GRF, "CONFIGS", {})  # auto: no measured config, no Gluon forward
    assert not fwd()
    monkeypatch.setattr(GRF, "CONFIGS", {torch.bfloat16: (128,)})
    assert fwd() == ON_SM90
    assert not fwd(_meta(D=64))


# ----------------------------------------------------------------------------- GPU: the kernel

# Partial blocks of 36, 37, 5, 17 rows; an empty sequence; the last box runs past T.
LENGTHS = [100, 37, 0, 64, 5, 209]
H = 2


def _inputs(D: int, dtype: torch.dtype, lengths: list[int], seed: int):
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    off = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], device=DEVICE)
    T = int(off[-1])
    q, k, v, do = (torch.randn(T, H, D, device=DEVICE, generator=g).to(dtype) for _ in range(4))
    return q, k, v, do, off


def _gluon(q, k, v, do, off, chains: int | str | None = None) -> tuple[torch.Tensor, ...]:
    grads = tuple(torch.full_like(q, float("nan")) for _ in range(3))
    table = build_tile_table(off, q.shape[0], 64)
    return G.launch_bwd(q, k, v, do, grads, table, q.shape[2] ** -0.5, n_chains=chains)


CHAINS = pytest.mark.parametrize("chains", [1, 2, "lean"], ids=["1-chain", "2-chains", "lean"])


@gpu_only
@pytest.mark.parametrize("dtype,D", [(torch.bfloat16, 128), (torch.bfloat16, 64),
                                     (torch.float16, 128), (torch.float16, 64)],
                         ids=["bf16-d128", "bf16-d64", "fp16-d128", "fp16-d64"])
@CHAINS
def test_gluon_inside_the_bound_and_equal_to_portable(dtype, D, chains) -> None:
    q, k, v, do, off = _inputs(D, dtype, LENGTHS, seed=11)
    before = [t.clone() for t in (q, k, v, do)]
    got = _gluon(q, k, v, do, off, chains)
    assert split_operand_violations(q, k, v, do, off, got) == {"dQ": 0, "dK": 0, "dV": 0}
    ref = tuple(torch.full_like(q, float("nan")) for _ in range(3))
    A.launch_bwd(q, k, v, do, build_tile_table(off, q.shape[0], 64), None, D ** -0.5, 64, True,
                 ref)
    for name, a, b in zip(("dQ", "dK", "dV"), got, ref, strict=True):
        # the same operations in the same order (module docstring): the same bits
        assert torch.equal(a, b), f"{name}: not bitwise the portable kernel's"
    for a, b in zip((q, k, v, do), before, strict=True):
        assert torch.equal(a, b), "an input was modified"
    again = _gluon(q, k, v, do, off, chains)
    for a, b in zip(got, again, strict=True):
        assert torch.equal(a, b), "not bitwise repeatable"


@gpu_only
@CHAINS
@pytest.mark.parametrize("D", [64, 128])
def test_gluon_persistent_loop_many_tiles(chains, D) -> None:
    # ~2,400 tiles over at most 2 x 132 programs (or chains): each walks its buffers many times
    g = torch.Generator().manual_seed(7)
    lengths = torch.randint(0, 700, (128,), generator=g).tolist()
    q, k, v, do, off = _inputs(D, torch.bfloat16, lengths, seed=12)
    got = _gluon(q, k, v, do, off, chains)
    assert split_operand_violations(q, k, v, do, off, got) == {"dQ": 0, "dK": 0, "dV": 0}


@gpu_only
@CHAINS
def test_gluon_rows_read_past_a_partial_block_are_contained(chains) -> None:
    q, k, v, do, off = _inputs(128, torch.bfloat16, LENGTHS, seed=5)
    clean = _gluon(q, k, v, do, off, chains)
    # Sequence 2 starts at token 137: sequence 1's only block (100..136, n = 37) reads its rows.
    for t in (q, k, v, do):
        t[137:, :, :64] = float("inf")
        t[137:, :, 64:] = float("nan")
    dirty = _gluon(q, k, v, do, off, chains)
    for name, a, b in zip(("dQ", "dK", "dV"), dirty, clean, strict=True):
        assert torch.equal(a[:137], b[:137]), f"{name}: poison past a partial block leaked in"
