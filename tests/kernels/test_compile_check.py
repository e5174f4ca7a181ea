"""AOT builds of the kernels for sm_90a / sm_100a on CPU (blockattn.kernels.compile_check).

The quick tier builds one representative pair (bf16, D=128, rotary incl. v; fwd and bwd) on both
targets and two variants of the opt-in Hopper path on sm_90; the full matrix (36 portable
variants x 2 targets, 24 Hopper variants on sm_90) is `slow`. Builds run in worker processes without
TRITON_INTERPRET, so these tests also show the check works under the conftest's interpreter env.
"""

from __future__ import annotations

import os

import pytest
import torch

from blockattn.kernels import compile_check as cc

_SUBSET = "fwd-bf16-d128-off,fwd-bf16-d128-rot,bwd-bf16-d128-off,bwd-bf16-d128-rot"

_PTXAS_LOG = """\
ptxas info    : 11 bytes gmem
ptxas info    : Compiling entry function '_fwd_kernel' for 'sm_90a'
ptxas info    : Function properties for _fwd_kernel
    280 bytes stack frame, 276 bytes spill stores, 284 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 280 bytes cumulative stack size
"""


def test_variant_matrix_is_complete() -> None:
    names = [v.name for v in cc.all_variants()]
    # portable: kernel x dtype x head dim x rotary; Hopper path: the same without fp32; Gluon
    # path (one and two chains): the plain backward in bf16 and fp16 at both head dims; its
    # fused-rotary kernels (one chain, backward and forward) with and without rotate_v
    assert len(names) == len(set(names)) == (2 * 3 * 2 * 3 + 2 * 2 * 2 * 3 + 2 * 2 * 2
                                             + 2 * 2 * 2 * 2
                                             + 2 * 2 * 2 + 2 * 2 * 3  # gfast: fast mode
                                             + 2 * 2  # gluon-lean: the one-stage plain bwd
                                             + 2 * 2 * 2 * 3)  # portable 16-bit, 128-row tiles
    assert "fwd-bf16-d128-rot-gfast" in names and "fwd-bf16-d128-off-gfast" not in names
    assert "fwd-bf16-d128-rot-gluon" in names and "fwd-bf16-d128-rot-gluon2" not in names
    assert "bwd-fp32-d64-rot-qk" in names
    assert "bwd-bf16-d128-rot-hopper" in names and "fwd-fp32-d64-off-hopper" not in names
    assert "bwd-fp16-d64-off-gluon" in names and "fwd-bf16-d64-off-gluon" not in names
    assert "bwd-bf16-d64-rot-gluon" in names and "bwd-bf16-d64-rot-gluon2" not in names
    assert "bwd-bf16-d128-off-gluon2" in names and "bwd-bf16-d128-rot-qk-gluon" in names
    assert "bwd-bf16-d64-off-gluon-lean" in names and "bwd-bf16-d64-rot-gluon-lean" not in names
    assert "fwd-bf16-d64-rot-bs128" in names and "fwd-fp32-d64-rot-bs128" not in names


def test_hopper_variants_build_with_tma_on_sm90_only() -> None:
    """The opt-in TMA path must build for sm_90 with tensor cores and TMA loads (a break there is
    invisible to the interpreter, which runs its source on CPU); it is never built for sm_100."""
    pair = "fwd-bf16-d128-off-hopper,bwd-bf16-d64-off-hopper"
    results = cc.run_check(cc.select_variants(pair), jobs=2)
    assert [(r.variant, r.target) for r in results] == [(v, "sm_90") for v in pair.split(",")]
    for r in results:
        assert r.ok and r.error is None, f"{r.variant}: {r.error or r.failures}"
        assert r.mma_counts[cc.MMA_OPCODE[90]] > 0 and r.mma_counts[cc.TMA_OPCODE] > 0, r


def test_select_variants_globs() -> None:
    assert [v.name for v in cc.select_variants(_SUBSET)] == _SUBSET.split(",")
    assert len(cc.select_variants("fwd-*-d64-off")) == 3
    with pytest.raises(ValueError, match="no variant matches"):
        cc.select_variants("fwd-bf8-*")


def test_parse_ptxas_log() -> None:
    stats = cc.parse_ptxas_log(_PTXAS_LOG)
    assert stats == {
        "registers": 255,
        "spill_stores": 276,
        "spill_loads": 284,
        "stack_frame": 280,
        "static_smem": 0,
    }


def test_ctas_per_sm_estimate() -> None:
    # 255 regs -> 8192 per warp; 4 warps -> 32768 per CTA -> 2 CTAs in a 64K register file.
    assert cc.ctas_per_sm(255, 4, 65536) == 2
    # 128 regs, 4 warps: 4 CTAs by registers; 3 by 64 KiB (+1 KiB reserved) of smem each.
    assert cc.ctas_per_sm(128, 4, 65536) == 3


@pytest.fixture(scope="module")
def subset_results() -> list[cc.Result]:
    # The conftest sets TRITON_INTERPRET=1 on CPU; the workers must not inherit it.
    assert os.environ.get("TRITON_INTERPRET") == "1" or "TRITON_INTERPRET" not in os.environ
    return cc.run_check(cc.select_variants(_SUBSET), jobs=2)


def test_subset_builds_with_tensor_cores(subset_results: list[cc.Result]) -> None:
    assert [(r.variant, r.target) for r in subset_results] == [
        (v, t) for v in _SUBSET.split(",") for t in ("sm_90", "sm_100")
    ]
    for r in subset_results:
        assert r.error is None, f"{r.variant} {r.target}: {r.error}"
        assert r.mma_counts[cc.MMA_OPCODE[cc.TARGETS[r.target]]] > 0, r
        assert r.registers and r.smem, r
        assert r.num_warps in (4, 8)


def _spills(results: list[cc.Result]) -> list[str]:
    """Spills beyond the launch config's accepted budget (nonzero only for register caps that
    were measured faster despite spilling; see attention.CONFIGS)."""
    return [
        f"{r.variant} {r.target}: {r.spill_stores} B spill stores / {r.spill_loads} B loads "
        f"(accepted {r.accepted_spill_bytes} B)"
        for r in results
        if max(r.spill_stores or 0, r.spill_loads or 0) > r.accepted_spill_bytes
    ]


def test_d128_spills_within_budget(subset_results: list[cc.Result]) -> None:
    """Every build within its config's accepted spill budget, and the D = 128 backward (plain
    and fused rotary) at 0 B: the rotary one spilled 36 B at sm_90 until its tables stopped
    being merged across the tile (_load_table). The one budget here, the bf16 rotary forward's
    40 B (52 B before the packed bf16 split, tile_math._split), is measured faster than its
    spill-free chunked form and than its least-spilling placement (attention.CONFIGS,
    attention.PLACEMENTS)."""
    assert all(r.accepted_spill_bytes == 0 for r in subset_results if r.variant.startswith("bwd"))
    bad = _spills(subset_results)
    assert not bad, "register spills:\n" + "\n".join(bad)


def test_placed_d64_rotary_variants_spill_free() -> None:
    """The rotary D = 64 variants whose table placement (attention.PLACEMENTS) was taken for
    0 B build spill-free on both targets, and their configs accept no spills: the bf16 and
    fp16 forwards and the fp16 backward (both rotate_v settings; fp16's forward since the Gluon
    rotary forward made it sm_100's default and sm_90's fallback only). A kernel edit that
    moves ptxas' register allocation back into spilling fails here, not only in the slow full
    matrix."""
    from blockattn.kernels import attention as A

    names = ("fwd-bf16-d64-rot,fwd-bf16-d64-rot-qk,fwd-fp16-d64-rot,fwd-fp16-d64-rot-qk,"
             "bwd-fp16-d64-rot,bwd-fp16-d64-rot-qk")
    results = cc.run_check(cc.select_variants(names), jobs=2)
    assert len(results) == 12
    for r in results:
        assert r.error is None, f"{r.variant} {r.target}: {r.error}"
        assert (r.spill_stores, r.spill_loads, r.accepted_spill_bytes) == (0, 0, 0), r
        assert r.ok, f"{r.variant}: {r.failures}"  # incl. the CTAs per SM its launch puts
    assert A.placement_flags("fwd", 64, torch.bfloat16, True, True)["V_LATE"]
    assert A.placement_flags("fwd", 64, torch.bfloat16, False, True) == dict(
        K_SITE=0, V_SITE=0, V_LATE=False, PACKED=True), "placements apply to fused rotary only"
    # the two forwards that the packed bf16 split made spill (8 and 12 B) keep the compiler's
    assert not A.placement_flags("fwd", 64, torch.bfloat16, True, True)["PACKED"]
    assert not A.placement_flags("fwd", 128, torch.bfloat16, True, False)["PACKED"]


def test_128_row_tiles_take_their_own_config_and_spill_within_it() -> None:
    """A 128-row tile (block_size 128) holds twice the scores per thread: the 64-row configs'
    register caps made 22 of 24 sm_90 builds spill 1.3-13 KB a thread. Its config is 8 warps,
    no cap, the whole tile; the rotary D = 64 forward (the build compute-sanitizer flagged at its
    cap) spills 0 B on both targets."""
    from blockattn.kernels import attention as A

    for kernel in ("fwd", "bwd"):
        for rotary in (False, True):
            for d in (64, 128):
                for dt in (torch.bfloat16, torch.float16):
                    cfg = A.launch_config(kernel, rotary, d, dt, block=128)
                    assert (cfg.num_warps, cfg.maxnreg, cfg.chunks) == (8, None, 1), cfg
                    assert A.launch_config(kernel, rotary, d, dt, block=64) != cfg
    assert A.launch_config("fwd", True, 64, torch.float32, block=128).num_warps == 4  # fp32
    results = cc.run_check(cc.select_variants("fwd-bf16-d64-rot-bs128"), jobs=2)
    assert len(results) == 2
    for r in results:
        assert r.error is None and r.num_warps == 8, r
        assert (r.spill_stores, r.spill_loads, r.accepted_spill_bytes) == (0, 0, 0), r
        assert r.ok, f"{r.variant} {r.target}: {r.failures}"


@pytest.mark.slow
def test_full_matrix_passes() -> None:
    results = cc.run_check(cc.all_variants(), jobs=os.cpu_count())
    # portable: fp32's 12 variants are not built for sm_100; Hopper path: 24 variants, sm_90 only;
    # Gluon path: 4 plain variants per kernel (one chain, two chains, one stage) and 8
    # fused-rotary one-chain ones per kernel (bwd, fwd); the fast mode's 20; all sm_90 only;
    # the portable 16-bit kernels at 128-row tiles: 24 variants on both targets
    assert len(results) == 72 - 12 + 24 + 3 * 4 + 2 * 8 + 20 + 48
    bad = [f"{r.variant} {r.target}: {r.error or '; '.join(r.failures)}" for r in results
           if not r.ok]
    assert not bad, "\n".join(bad)


def test_gluon_builds_spill_free() -> None:
    """Every Gluon build (the backward: plain one and two chains and one stage, fused rotary
    with and without rotate_v; the fused-rotary forward; bf16 and fp16, D = 64 and 128) spills
    0 B on sm_90 with no budget, and fits the CTAs per SM its launch puts: the rotary backward's
    D = 128 builds spilled 4-40 B until their hoisted row offsets and dV's rotate-back were
    moved (attention_gluon_rotary.ACCEPTED_SPILL_BYTES). A kernel edit that brings spills back
    fails here on CPU, before a GPU run."""
    from blockattn.kernels import attention_gluon_rotary as GR

    assert GR.ACCEPTED_SPILL_BYTES == {}
    results = cc.run_check(cc.select_variants("*-gluon*"), targets=["sm_90"], jobs=2)
    assert len(results) == 28
    for r in results:
        assert r.error is None, f"{r.variant}: {r.error}"
        assert (r.spill_stores, r.spill_loads, r.accepted_spill_bytes) == (0, 0, 0), r
        assert r.ok, f"{r.variant}: {r.failures}"  # incl. the CTAs per SM its launch puts
        assert r.mma_counts.get(cc.TMA_OPCODE, 0) > 0, f"{r.variant}: no TMA load"


_CAPPED_BUILD = """
import json, sys
from blockattn.kernels import compile_check as cc
v = cc.select_variants(sys.argv[1])[0]
out = {}
for cap in (None, int(sys.argv[2])):
    res, kernel = cc.compile_variant(v, "sm_90", maxnreg=cap)
    out[str(cap)] = [res.registers, res.spill_stores, len(kernel.asm["cubin"])]
print(json.dumps(out))
"""


def test_compile_variant_applies_a_register_cap(tmp_path) -> None:
    """compile_variant, the seam benchmarks/register_cap.py and sass_lines.py build through,
    builds in-process (here a subprocess without the conftest's TRITON_INTERPRET) under the
    launch's register cap, or under maxnreg in its place: the D64 rotary forward takes 168
    registers by default, and obeys a cap of 128; both builds return their cubin."""
    import json
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(TRITON_DUMP_PTXAS_LOG="1", TRITON_ALWAYS_COMPILE="1", TRITON_CACHE_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", _CAPPED_BUILD, "fwd-bf16-d64-rot-gluon", "128"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    (default_regs, _, default_cubin), (capped_regs, _, capped_cubin) = got["None"], got["128"]
    assert default_regs > 128, got  # the test means something only if the cap binds
    assert capped_regs <= 128, got
    assert default_cubin > 0 and capped_cubin > 0, got
