"""Ahead-of-time build of every kernel variant for Hopper (sm_90a) and Blackwell (sm_100a), on CPU.

`triton.compile(ASTSource(...), target=GPUTarget("cuda", arch, 32))` needs no GPU: it lowers the
kernel to PTX and runs the ptxas that triton ships. For each variant this module checks:
- tensor-core MMAs are in the PTX (`tcgen05.mma` on sm_100, `wgmma.mma_async` on sm_90). fp32
  variants are exempt: they call tl.dot(input_precision="ieee") (no tf32), which Triton lowers to
  FMA loops because no tensor core multiplies full fp32; they are recorded "no MMA (fp32 ieee)";
- ptxas reports no register spills beyond the launch config's `accepted_spill_bytes` (local-memory
  traffic inside a memory-bound kernel); fp32 variants are exempt and their spills recorded: fp32
  is the exact-input reference path, whose ieee dots are FMA loops that never fit registers;
- the shared memory Triton requests fits one CTA on the target.
It also records registers, shared/tensor memory and an estimate of resident CTAs per SM.
fp32 variants are not built for sm_100: blockattn rejects fp32 inputs on sm_100+ at run time.
The opt-in Hopper TMA path (blockattn.kernels.attention_hopper, names ending "-hopper") is built
for sm_90 only, in bf16/fp16: it must build, use tensor cores and issue TMA loads
(`cp.async.bulk.tensor`); its spills are recorded, not gated, because no launch takes that path
by default (its CONFIGS are empty: it was measured slower everywhere). The Gluon backward
(blockattn.kernels.attention_gluon, names ending "-gluon": plain bwd, bf16/fp16) is built for
sm_90 only, through GluonASTSource; it is a default path, so its spills are gated at 0 B, and the
CTAs per SM its launch puts must fit. Its two-chain kernel (names ending "-gluon2": two warpgroups,
the default at D = 128 on the H200) is gated the same way, at 1 CTA of 8 warps per SM. The Gluon
fused-rotary backward (attention_gluon_rotary, "-rot-gluon" and "-rot-qk-gluon": one chain, the
16-bit default) must build with MMAs, TMA and the CTAs per SM its launch puts (PROGRAMS_PER_SM,
under its register cap MAX_REGISTERS), and spill no more than its measured budget
(attention_gluon_rotary.ACCEPTED_SPILL_BYTES; 0 B where it has none). The Gluon
fused-rotary forward (attention_gluon_rotary_fwd, "fwd-*-rot*-gluon", the 16-bit default on
sm_90) is gated the same way at 0 B, built with its launch's register cap (MAX_REGISTERS) and
held to the CTAs per SM its launch puts (PROGRAMS_PER_SM). The fast precision mode's Gluon
kernels (attention_gluon_rotary_fast, names ending "-gfast": the rotary forward, the rotary and
plain backward, the sm_90 default of precision="fast") are gated the same way at 0 B, with the
caps and CTAs per SM of their CONFIGS.

The build must not see TRITON_INTERPRET=1: under it `@triton.jit` returns interpreter functions
and `attention.INTERPRET` turns on the CPU shims. So the compiles always run in fresh worker
processes (`python -m blockattn.kernels.compile_check --worker`) whose environment drops
TRITON_INTERPRET; this also works from pytest, where the conftest sets it. Workers use a private
Triton cache and TRITON_ALWAYS_COMPILE so every run really compiles and ptxas' -v log is always
produced.
"""

from __future__ import annotations

import contextlib
import fnmatch
import io
import json
import math
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

KERNELS = ("fwd", "bwd")
DTYPES = ("bf16", "fp16", "fp32")
HEAD_DIMS = (64, 128)
# "off": no sinu_pos; "rot": rotary on q, k and v (rotate_v=True); "rot-qk": rotate_v=False.
ROTARY_MODES = ("off", "rot", "rot-qk")
# hopper: the opt-in Triton TMA path, sm_90, 16-bit inputs only; gluon: the Gluon backward
# (attention_gluon), sm_90, 16-bit, plain, and the fused-rotary one
# (attention_gluon_rotary._bwd_rot_kernel), and the fused-rotary forward
# (attention_gluon_rotary_fwd); gluon2: the plain two-chain kernel (_bwd_kernel_chains); gfast: the
# fast precision mode's Gluon kernels (attention_gluon_rotary_fast: rotary forward, rotary and
# plain backward), the sm_90 default of precision="fast"; gluon-lean: the plain one-stage kernel
# (_bwd_kernel_chains, one chain) at its LEAN_CONFIGS' CTAs per SM and register cap
PATHS = ("portable", "hopper", "gluon", "gluon2", "gfast", "gluon-lean")
TMA_OPCODE = "cp.async.bulk.tensor"
TARGETS = {"sm_90": 90, "sm_100": 100}
MMA_OPCODE = {90: "wgmma.mma_async", 100: "tcgen05.mma"}
BLOCK_SIZE = 64
LARGE_BLOCK = 128  # a declared block size whose tiles are twice as tall (its own launch config)
N_HEADS = 4
# Shared memory one CTA may use (opt-in maximum), and per SM, on H100/H200 and B200: 227 KiB.
MAX_SMEM_PER_CTA = 232448
SMEM_PER_SM = 233472
REGS_PER_SM = 65536
MAX_THREADS_PER_SM = 2048

_PTR_ARGS = {"Q", "K", "V", "O", "DO", "DQ", "DK", "DV", "SIN", "tile_start", "tile_len"}
_FLOAT_ARGS = {"qk_scale", "sm_scale"}
# Runtime ints the JIT sees as multiples of 16 for contiguous (T, H, D) inputs (H*D, D): with
# 16-byte aligned pointers it specialises them with tt.divisibility=16, as we do here.
_STRIDE_PREFIX = "stride_"


@dataclass(frozen=True)
class Variant:
    kernel: str  # "fwd" | "bwd"
    dtype: str  # "bf16" | "fp16" | "fp32"
    head_dim: int
    rotary: str  # one of ROTARY_MODES
    path: str = "portable"  # one of PATHS
    block_size: int = BLOCK_SIZE  # the portable kernels also build 128-row tiles (LARGE_BLOCK)

    @property
    def name(self) -> str:
        suffix = "" if self.path == "portable" else f"-{self.path}"
        bs = "" if self.block_size == BLOCK_SIZE else f"-bs{self.block_size}"
        return f"{self.kernel}-{self.dtype}-d{self.head_dim}-{self.rotary}{suffix}{bs}"


@dataclass
class Result:
    variant: str
    target: str
    num_warps: int = 0
    mma: str = ""  # "tcgen05.mma x N" / "wgmma.mma_async x N" / "no MMA (fp32 ieee)" / "MISSING"
    mma_counts: dict[str, int] = field(default_factory=dict)
    registers: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    stack_frame: int | None = None
    smem: int | None = None  # bytes of dynamic shared memory Triton requests at launch
    static_smem: int = 0  # bytes ptxas reports as static smem (normally 0 for Triton kernels)
    tmem: int = 0  # tensor-memory columns (sm_100)
    ctas_per_sm: int | None = None  # estimate from registers, smem and threads
    accepted_spill_bytes: int = 0  # the launch config's measured-faster spill budget
    compile_s: float = 0.0
    failures: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return not self.failures and self.error is None


def all_variants() -> list[Variant]:
    return [
        Variant(k, dt, d, r, p)
        for p in PATHS
        for k in KERNELS
        for dt in DTYPES
        for d in HEAD_DIMS
        for r in ROTARY_MODES
        if not (p == "hopper" and dt == "fp32")  # the Hopper path takes 16-bit inputs only
        and not ((p.startswith("gluon") or p == "gfast") and dt == "fp32")
        and not (p == "gfast" and k == "fwd" and r == "off")  # the plain fast fwd: portable
        # the Gluon forward is the fused-rotary one only (attention_gluon_rotary_fwd)
        and not (p.startswith("gluon") and k == "fwd" and (p == "gluon2" or r == "off"))
        and not (p in ("gluon2", "gluon-lean") and (r != "off" or k == "fwd"))  # plain bwd only
    ] + [
        Variant(k, dt, d, r, "portable", LARGE_BLOCK)  # 16-bit: fp32 takes the default config
        for k in KERNELS
        for dt in ("bf16", "fp16")
        for d in HEAD_DIMS
        for r in ROTARY_MODES
    ]


def select_variants(patterns: str | list[str] | None) -> list[Variant]:
    """Variants whose name matches any of the comma-separated fnmatch globs (all if None)."""
    variants = all_variants()
    if not patterns:
        return variants
    if isinstance(patterns, str):
        patterns = [p.strip() for p in patterns.split(",") if p.strip()]
    chosen = [v for v in variants if any(fnmatch.fnmatchcase(v.name, p) for p in patterns)]
    if not chosen:
        names = ", ".join(v.name for v in variants[:3])
        raise ValueError(f"no variant matches {patterns!r} (names look like {names}, ...)")
    return chosen


def parse_ptxas_log(log: str) -> dict[str, int]:
    """Registers, spills, stack and static smem from `ptxas -v` output (one entry function)."""
    out: dict[str, int] = {}
    if m := re.search(r"Used (\d+) registers", log):
        out["registers"] = int(m.group(1))
    if m := re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log):
        out["spill_stores"], out["spill_loads"] = int(m.group(1)), int(m.group(2))
    if m := re.search(r"(\d+) bytes stack frame", log):
        out["stack_frame"] = int(m.group(1))
    m = re.search(r"(\d+) bytes smem", log)
    out["static_smem"] = int(m.group(1)) if m else 0
    return out


_TF32_MMA = re.compile(
    r"\b(?:tcgen05\.mma\S*kind::tf32|wgmma\.mma_async\S*\.tf32|mma\.sync\S*\.tf32)"
)


def count_mma(ptx: str) -> dict[str, int]:
    """Occurrences of each MMA opcode family in the PTX (mma.sync: pre-Hopper fallback; tf32:
    MMAs with tf32 operands, which an fp32 "ieee" variant must never contain)."""
    counts = {op: len(re.findall(rf"\b{re.escape(op)}\b", ptx)) for op in MMA_OPCODE.values()}
    counts["mma.sync"] = len(re.findall(r"\bmma\.sync\b", ptx))
    counts["tf32"] = len(_TF32_MMA.findall(ptx))
    return counts


def ctas_per_sm(registers: int, num_warps: int, smem: int) -> int:
    """Resident CTAs per SM (sm_90/sm_100 limits; registers allocated per warp in 256s)."""
    regs_per_warp = math.ceil(registers * 32 / 256) * 256
    limits = [
        REGS_PER_SM // max(regs_per_warp * num_warps, 1),
        MAX_THREADS_PER_SM // (32 * num_warps),
        32,
    ]
    if smem:
        limits.append(SMEM_PER_SM // (smem + 1024))  # 1 KiB per CTA is reserved by the driver
    return min(limits)


# ----------------------------------------------------------------------------- worker side


def _build(src: Any, arch: int, options: dict[str, Any], res: Result,
           overrides: dict[str, Any] | None = None) -> Any:
    """Compile `src` for sm_<arch> and record the build's time, ptxas' registers and spills,
    shared/tensor memory and CTAs per SM in `res` (whose num_warps is set). Returns the kernel.
    `overrides` replace the launch's options (compile_variant's maxnreg)."""
    import triton
    from triton.backends.compiler import GPUTarget

    options = {**options, **(overrides or {})}
    log = io.StringIO()
    t0 = time.perf_counter()
    # TRITON_DUMP_PTXAS_LOG (set by the parent) makes make_cubin print ptxas' -v log to stdout.
    with contextlib.redirect_stdout(log):
        kernel = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
    res.compile_s = round(time.perf_counter() - t0, 2)
    stats = parse_ptxas_log(log.getvalue())
    if "registers" not in stats:
        raise RuntimeError(f"no ptxas -v log captured; stdout was:\n{log.getvalue()[-2000:]}")
    for k, v in stats.items():
        setattr(res, k, v)
    res.smem = int(kernel.metadata.shared)
    res.tmem = int(getattr(kernel.metadata, "tmem_size", 0) or 0)
    res.ctas_per_sm = ctas_per_sm(res.registers or 0, res.num_warps, res.smem + res.static_smem)
    return kernel


def compile_variant(variant: Variant, target: str = "sm_90", *,
                    maxnreg: int | None = None) -> tuple[Result, Any]:
    """Build one variant in this process, as the check's workers do, and return its Result and
    the compiled kernel (`.asm["ptx"]`, `["cubin"]`): for tools that read a build's SASS or
    try it under another register cap (`maxnreg` replaces the launch's). Needs
    TRITON_DUMP_PTXAS_LOG=1 (ptxas' -v log) and TRITON_INTERPRET unset before triton's import."""
    built: list[Any] = []
    res = _compile_one(variant, target, {"maxnreg": maxnreg} if maxnreg else None, built)
    return res, built[0]


def _compile_one(variant: Variant, target: str, overrides: dict[str, Any] | None = None,
                 built: list[Any] | None = None) -> Result:
    """Compile one variant for one target; runs in a worker without TRITON_INTERPRET.
    `overrides` replace launch options; `built`, when given, receives the compiled kernel."""
    import torch
    from triton.compiler import ASTSource

    from blockattn.kernels import attention as A
    from blockattn.kernels import attention_hopper as AH

    if A.INTERPRET:
        raise RuntimeError("compile-check worker imported blockattn with TRITON_INTERPRET=1")
    arch = TARGETS[target]
    res = Result(variant=variant.name, target=target)
    if variant.path.startswith("gluon") or variant.path == "gfast":
        return _compile_gluon(variant, target, res, overrides, built)
    hopper = variant.path == "hopper"
    if hopper:
        fn = AH._fwd_kernel_tma if variant.kernel == "fwd" else AH._bwd_kernel_tma
    else:
        fn = A._fwd_kernel if variant.kernel == "fwd" else A._bwd_kernel
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[variant.dtype]
    tl_dtype = variant.dtype
    # Flags come from the launcher's own helper so the check builds what attention_fwd launches.
    q = torch.empty(0, dtype=dtype, device="meta")
    sinu = None if variant.rotary == "off" else torch.empty(0, device="meta")  # fp32 table
    flags = A._flags(q, sinu, rotate_v=variant.rotary == "rot")
    block = A.block_rows(variant.block_size)
    constexprs: dict[str, Any] = dict(H=N_HEADS, HEAD_DIM=variant.head_dim, BLOCK=block, **flags)
    if hopper:
        hcfg = AH.hopper_config(variant.kernel, variant.rotary != "off", variant.head_dim)
        cfg = A.LaunchConfig(hcfg.num_warps, hcfg.num_stages, hcfg.programs_per_sm, hcfg.maxnreg)
        constexprs["WARP_SPECIALIZE"] = hcfg.warp_specialize
    else:
        cfg = A.launch_config(variant.kernel, variant.rotary != "off", variant.head_dim, dtype,
                              block=block)
        constexprs["PERSISTENT"] = cfg.programs_per_sm > 0  # what a launch at shape P builds
        constexprs["CHUNKS"] = cfg.chunks  # column chunks of the fused rotary 16-bit kernels
        constexprs.update(A.placement_flags(variant.kernel, variant.head_dim, dtype,
                                            variant.rotary != "off", variant.rotary == "rot"))
    signature: dict[str, str] = {}
    attrs: dict[tuple[int, ...], list[list[Any]]] = {}
    for i, p in enumerate(fn.params):
        name = p.name
        if p.is_constexpr:
            if name not in constexprs:
                raise RuntimeError(f"{fn.__name__}: constexpr {name} unknown to compile-check")
            signature[name] = "constexpr"
        elif name.endswith("_desc"):  # Hopper path: a host TMA descriptor of (BLOCK, D) boxes
            signature[name] = f"tensordesc<{tl_dtype}[{block}, {variant.head_dim}]>"
        elif name in _PTR_ARGS:
            if name == "SIN":
                signature[name] = "*fp32" if sinu is not None else f"*{tl_dtype}"
            elif name == "tile_start":
                signature[name] = "*i64"
            elif name == "tile_len":
                signature[name] = "*i32"
            else:
                signature[name] = f"*{tl_dtype}"
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif name in _FLOAT_ARGS:
            signature[name] = "fp32"
        elif name.startswith(_STRIDE_PREFIX) or name in ("n_tiles", "n_programs"):
            signature[name] = "i32"
            if name.startswith(_STRIDE_PREFIX):
                attrs[(i,)] = [["tt.divisibility", 16]]
        elif name == "tiles_per_program":
            signature[name] = "i32"
        else:
            raise RuntimeError(f"{fn.__name__}: argument {name} unknown to compile-check")
    res.num_warps = cfg.num_warps
    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    kernel = _build(src, arch, {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages,
                                "maxnreg": cfg.maxnreg}, res, overrides)
    if built is not None:
        built.append(kernel)

    res.mma_counts = count_mma(kernel.asm["ptx"])
    if hopper:
        res.mma_counts[TMA_OPCODE] = kernel.asm["ptx"].count(TMA_OPCODE)
        if not res.mma_counts[TMA_OPCODE]:
            res.failures.append(f"no {TMA_OPCODE} (TMA load) in the Hopper path's PTX")
    n_mma = res.mma_counts[MMA_OPCODE[arch]]
    if variant.dtype == "fp32" and res.mma_counts["tf32"]:
        # input_precision="ieee" promises full fp32 products; tf32 keeps 10 mantissa bits.
        res.mma = f"{MMA_OPCODE[arch]} x{n_mma} (tf32!)"
        res.failures.append(f"{res.mma_counts['tf32']} tf32 MMAs in an fp32 ieee variant")
    elif n_mma:
        res.mma = f"{MMA_OPCODE[arch]} x{n_mma}"
    elif variant.dtype == "fp32":
        res.mma = "no MMA (fp32 ieee)"
    else:
        res.mma = "MISSING"
        res.failures.append(f"no {MMA_OPCODE[arch]} in the PTX")
    res.accepted_spill_bytes = cfg.accepted_spill_bytes
    spilled = max(res.spill_stores or 0, res.spill_loads or 0) > cfg.accepted_spill_bytes
    if spilled and variant.dtype == "fp32":
        # fp32 ieee dots are FMA loops over operand tiles that cannot fit registers: fp32 is the
        # exact-input reference path, checked for correctness, never a speed path.
        res.mma += f" (spills {res.spill_stores}/{res.spill_loads} B: fp32 exempt)"
    elif spilled and hopper:
        # Opt-in and measured slower everywhere: no default launch takes it (module docstring).
        res.mma += f" (spills {res.spill_stores}/{res.spill_loads} B: opt-in path, recorded)"
    elif spilled:
        res.failures.append(
            f"spills: {res.spill_stores} B stores, {res.spill_loads} B loads "
            f"({res.registers} registers; accepted: {cfg.accepted_spill_bytes} B)"
        )
    if res.smem + res.static_smem > MAX_SMEM_PER_CTA:
        res.failures.append(f"shared memory {res.smem} B > {MAX_SMEM_PER_CTA} B per CTA")
    return res


def _compile_gluon(variant: Variant, target: str, res: Result,
                   overrides: dict[str, Any] | None = None,
                   built: list[Any] | None = None) -> Result:
    """The Gluon kernels (the backward, plain and fused rotary; the fused-rotary forward):
    default paths where their CONFIGS name the head dim, so their spills are gated like the
    portable kernels' (accepted: 0 B unless a measured budget says otherwise)."""
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource

    from blockattn.kernels import attention_gluon as G
    from blockattn.kernels import attention_gluon_rotary as GR
    from blockattn.kernels import attention_gluon_rotary_fast as GF
    from blockattn.kernels import attention_gluon_rotary_fwd as GRF

    two = variant.path == "gluon2"
    fast = variant.path == "gfast"
    lean = variant.path == "gluon-lean"
    rotary = variant.rotary != "off"
    fwd = variant.kernel == "fwd"
    fn = (GF._fwd_fast_kernel if fast and fwd else GF._bwd_fast_kernel if fast
          else GRF._fwd_rot_kernel if fwd else GR._bwd_rot_kernel if rotary
          else G._bwd_kernel_chains if two or lean else G._bwd_kernel)
    gdt = {"bf16": gl.bfloat16, "fp16": gl.float16}[variant.dtype]
    lay = gl.NVMMASharedLayout.get_default_for([G.BLOCK, variant.head_dim], gdt)
    signature: dict[str, str] = {}
    attrs: dict[tuple[int, ...], list[list[Any]]] = {}
    for i, p in enumerate(fn.params):
        name = p.name
        if p.is_constexpr:
            signature[name] = "constexpr"
        elif name.endswith("_desc"):
            signature[name] = f"tensordesc<{variant.dtype}[{G.BLOCK}, {variant.head_dim}],{lay!r}>"
        elif name in ("V", "O", "DQ", "DK", "DV"):
            signature[name] = f"*{variant.dtype}"
            attrs[(i,)] = [["tt.divisibility", 16]]  # as the JIT specialises them (see above)
        elif name == "SIN":
            signature[name] = "*fp32"  # the bench's table; another dtype is read the same way
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif name in ("tile_start", "tile_len"):
            signature[name] = "*i64" if name == "tile_start" else "*i32"
        elif name.startswith(_STRIDE_PREFIX) or name == "n_tiles":
            signature[name] = "i32"
            if name.startswith(_STRIDE_PREFIX):
                attrs[(i,)] = [["tt.divisibility", 16]]
        elif name in _FLOAT_ARGS:
            signature[name] = "fp32"
        else:
            raise RuntimeError(f"{fn.__name__}: argument {name} unknown to compile-check")
    num_warps = 4
    constexprs: dict[str, Any] = dict(H=N_HEADS, num_warps=num_warps)
    if not fwd and not fast:
        constexprs["IS_BF16"] = variant.dtype == "bf16"
    if fast and not fwd:
        constexprs["ROTARY"] = rotary
        constexprs["ROTATE_V"] = variant.rotary == "rot"
    if two or lean:
        constexprs.update(CHAINS=2 if two else 1, WORKER_REGS=G.WORKER_REGS if two else 0)
    if rotary:
        constexprs["ROTATE_V"] = variant.rotary == "rot"
    src = GluonASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    res.num_warps = 2 * num_warps if two else num_warps  # the worker warpgroup counts too
    options: dict[str, Any] = {"num_warps": num_warps}
    fast_ctas, fast_cap = GF.CONFIGS.get((variant.kernel, rotary, variant.head_dim), (2, None))
    caps = ({variant.head_dim: fast_cap} if fast and fast_cap else {} if fast
            else GRF.MAX_REGISTERS if fwd else GR.MAX_REGISTERS if rotary
            else {d: cap for d, (_, cap) in G.LEAN_CONFIGS.items() if cap} if lean else {})
    if variant.head_dim in caps:  # the launch's register cap
        options["maxnreg"] = caps[variant.head_dim]
    kernel = _build(src, TARGETS[target], options, res, overrides)
    if built is not None:
        built.append(kernel)
    res.mma_counts = count_mma(kernel.asm["ptx"])
    res.mma_counts[TMA_OPCODE] = kernel.asm["ptx"].count(TMA_OPCODE)
    n_mma = res.mma_counts[MMA_OPCODE[90]]
    res.mma = f"{MMA_OPCODE[90]} x{n_mma}" if n_mma else "MISSING"
    if not n_mma:
        res.failures.append(f"no {MMA_OPCODE[90]} in the PTX")
    if not res.mma_counts[TMA_OPCODE]:
        res.failures.append(f"no {TMA_OPCODE} (TMA) in the Gluon path's PTX")
    if rotary and not fwd and not fast:  # its measured budget (GR.ACCEPTED_SPILL_BYTES), else 0
        key = (variant.dtype, variant.head_dim, variant.rotary == "rot")
        res.accepted_spill_bytes = GR.ACCEPTED_SPILL_BYTES.get(key, 0)
    if max(res.spill_stores or 0, res.spill_loads or 0) > res.accepted_spill_bytes:
        res.failures.append(f"spills: {res.spill_stores} B stores, {res.spill_loads} B loads "
                            f"({res.registers} registers; accepted: {res.accepted_spill_bytes} B)")
    if res.smem + res.static_smem > MAX_SMEM_PER_CTA:
        res.failures.append(f"shared memory {res.smem} B > {MAX_SMEM_PER_CTA} B per CTA")
    want = (fast_ctas if fast else 1 if two else G.LEAN_CONFIGS[variant.head_dim][0] if lean
            else GRF.PROGRAMS_PER_SM[variant.head_dim] if fwd
            else GR.PROGRAMS_PER_SM[variant.head_dim] if rotary
            else G.PROGRAMS_PER_SM[variant.head_dim])
    if res.ctas_per_sm < want:
        res.failures.append(f"{res.ctas_per_sm} CTAs fit per SM; its launch puts {want}")
    return res


def _worker_main() -> int:
    """Line protocol: one JSON task per stdin line -> one JSON result per line on the saved fd 1.

    fd 1 is then pointed at stderr so stray prints (triton, ptxas reproducers) cannot corrupt it.
    """
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    saved_err = os.dup(2)
    for line in sys.stdin:
        task = json.loads(line)
        variant = Variant(**task["variant"])
        # MLIR pass failures print their diagnostics to fd 2, not into the exception: capture.
        with tempfile.TemporaryFile("w+") as diag:
            os.dup2(diag.fileno(), 2)
            try:
                res = _compile_one(variant, task["target"])
            except Exception as exc:  # report, keep serving: one failure must not hide others
                res = Result(variant=variant.name, target=task["target"])
                sys.stderr.flush()
                diag.seek(0)
                notes = [ln for ln in diag.read().splitlines() if "error:" in ln or "note:" in ln]
                detail = "\n".join(notes[-4:])
                res.error = f"{type(exc).__name__}: {str(exc).splitlines()[-1]}\n{detail}"[-4000:]
            finally:
                os.dup2(saved_err, 2)
        proto.write(json.dumps(asdict(res)) + "\n")
    return 0


# ----------------------------------------------------------------------------- parent side


def _worker_env(cache_dir: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(
        TRITON_CACHE_DIR=cache_dir,  # private: never leaves cubin-less or stale entries around
        TRITON_ALWAYS_COMPILE="1",
        TRITON_DUMP_PTXAS_LOG="1",
    )
    # Make `-m blockattn.kernels.compile_check` importable even when blockattn is not pip-installed.
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _cost(task: tuple[Variant, str]) -> tuple[int, int, int]:
    v, _ = task
    return (v.kernel == "bwd", v.head_dim, v.rotary != "off")


def run_check(
    variants: list[Variant],
    targets: list[str] | None = None,
    jobs: int | None = None,
) -> list[Result]:
    """Compile every (variant, target) in `jobs` worker processes; results in input order."""
    targets = list(TARGETS) if targets is None else targets
    for t in targets:
        if t not in TARGETS:
            raise ValueError(f"unknown target {t!r}; choose from {', '.join(TARGETS)}")
    # fp32 is rejected at run time on sm_100+ (blockattn.ops: Triton 3.6 fails to compile its
    # rotary kernels there and lowers IEEE fp32 dots to tf32), so those builds ship nowhere.
    # The Hopper path is dispatched on sm_90 only.
    tasks = [
        (v, t) for v in variants for t in targets
        if not ((v.dtype == "fp32" or v.path != "portable") and t == "sm_100")
    ]
    order = {(v.name, t): i for i, (v, t) in enumerate(tasks)}
    todo: queue.Queue[tuple[Variant, str]] = queue.Queue()
    for task in sorted(tasks, key=_cost, reverse=True):  # longest first: better packing
        todo.put(task)
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(tasks)))
    results: list[Result] = []
    lock = threading.Lock()

    def serve(env: dict[str, str]) -> None:
        with tempfile.TemporaryFile("w+") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "blockattn.kernels.compile_check", "--worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env=env,
            )
            assert proc.stdin is not None and proc.stdout is not None
            try:
                while True:
                    try:
                        v, t = todo.get_nowait()
                    except queue.Empty:
                        break
                    proc.stdin.write(json.dumps({"variant": asdict(v), "target": t}) + "\n")
                    proc.stdin.flush()
                    line = proc.stdout.readline()
                    if not line:
                        err.seek(0)
                        tail = err.read()[-2000:]
                        res = Result(variant=v.name, target=t, error=f"worker died:\n{tail}")
                    else:
                        res = Result(**json.loads(line))
                    with lock:
                        results.append(res)
                    if not line:
                        break
            finally:
                proc.stdin.close()
                proc.wait()

    with tempfile.TemporaryDirectory(prefix="blockattn-compile-check-") as cache:
        env = _worker_env(cache)
        threads = [threading.Thread(target=serve, args=(env,)) for _ in range(jobs)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    done = {(r.variant, r.target) for r in results}
    for v, t in tasks:  # every worker died before reaching these
        if (v.name, t) not in done:
            results.append(Result(variant=v.name, target=t, error="not compiled: workers died"))
    return sorted(results, key=lambda r: order[(r.variant, r.target)])


def format_markdown(results: list[Result]) -> str:
    head = (
        "| variant | target | warps | MMA | regs | spill st/ld B | smem B | tmem cols "
        "| CTAs/SM | compile s | status |\n"
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|\n"
    )
    rows = []
    for r in results:
        if r.error:
            # First line plus the MLIR note naming the failing pass, if any.
            lines = r.error.splitlines()
            note = next((ln.split("note: ", 1)[1] for ln in lines if "note: " in ln), "")
            status = "ERROR: " + lines[0][:100] + (f" ({note[:140]})" if note else "")
        else:
            status = "ok" if r.ok else "FAIL: " + "; ".join(r.failures)
        smem = "" if r.smem is None else str(r.smem + r.static_smem)
        spills = "" if r.spill_stores is None else f"{r.spill_stores}/{r.spill_loads}"
        rows.append(
            f"| {r.variant} | {r.target} | {r.num_warps} | {r.mma} | {r.registers or ''} "
            f"| {spills} | {smem} | {r.tmem or ''} | {r.ctas_per_sm or ''} | {r.compile_s} "
            f"| {status} |"
        )
    n_bad = sum(not r.ok for r in results)
    summary = f"\n{len(results) - n_bad}/{len(results)} builds passed"
    return head + "\n".join(rows) + summary


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        sys.exit(_worker_main())
    sys.exit("usage: python -m blockattn.kernels.compile_check --worker "
             "(use `blockattn compile-check`)")
