"""`run_benchmark(config)`: the copy and read-mostly ceilings, then every (case, provider, pass)
under a time budget.

Order (most important first, so a budget cut or a timeout drops the least useful points):
ceiling -> shape P D=128 (core providers) -> P D=64 -> the same two under tritonbench's "fill"
sparsity convention -> projection fwd+bwd, packed vs unfused gradient (D=128, D=64) ->
max_len and sparsity sweeps -> extra providers at P D=128 (eager, SDPA/cuDNN, FlexAttention:
slow to compile or to run).

Every case and result row names its `sparsity_convention` ("empty" = ours, "fill" =
tritonbench's; see blockattn.bench.case) and the run's `gpu_kind`.
Outputs are rewritten after every measurement (see `blockattn.bench.report`).
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import signal
import subprocess
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from blockattn.bench import measure, projection, report
from blockattn.bench.case import SPARSITY_CONVENTIONS, BenchCase, make_bench_case
from blockattn.bench.entries import entry
from blockattn.bench.measure import top_kernels
from blockattn.providers import Unsupported
from blockattn.providers.fa2 import flash_info
from blockattn.run import isolated

PASSES = ("fwd", "bwd", "fwdbwd")
CORE = ("blockattn", "blockattn_rotary", "fa2", "fa2_rotary_eager", "fa2_rotary_compiled", "fa4")
SWEEP = ("blockattn", "blockattn_rotary", "fa2", "fa2_rotary_eager")
# Extras and the remaining budget (s) each needs before it is started (compile time dominates).
EXTRAS = {"eager": 15.0, "sdpa_cudnn": 15.0, "flex": 75.0}
PROJECTION = tuple(projection.ENTRIES)
# Named "blockattn_*" so that a failed bitwise check fails `blockattn bench` like our kernels' do.
CHECK_NAME = "blockattn_projection"
# Sweep cases target this many tokens (E[T]) so every point costs about the same.
SWEEP_TOKENS = 1 << 18


@dataclass
class CaseSpec:
    name: str
    group: str  # main | sweep_len | sweep_sparsity | extra
    B: int
    max_len: int
    sparsity: float
    H: int
    D: int
    providers: tuple[str, ...]
    sparsity_convention: str = "empty"  # how `sparsity` is read (blockattn.bench.case)


@dataclass
class BenchConfig:
    out: str = "bench_out"
    quick: bool = False
    smoke: bool = False  # tiny CPU/interpreter run: structure only, numbers meaningless
    time_budget_s: float = 420.0
    seed: int = 0
    ceiling_bytes: int = 2 << 30
    check_seqs: int = 32  # sequences sampled for the FP64 check of every provider
    sweeps: bool = True
    extras: bool = True
    warmup_ms: float = 25.0
    rep_ms: float = 100.0
    sweep_rep_ms: float = 50.0
    dtype: str = "bfloat16"
    providers: tuple[str, ...] | None = None  # restrict to these (None: all)
    cases: tuple[str, ...] | None = None  # restrict to the cases of these names (None: all)
    # Free text naming the machine kind (e.g. "nvidia-h100-x1"); None: measure.default_gpu_kind.
    # Recorded in meta and every row; the report refuses to compare rows of different kinds.
    gpu_kind: str | None = None
    projection: bool = True  # the projection packed-vs-unfused entries (not filtered by providers)
    outside: tuple[str, ...] = ()  # bench entries of --provider kernels (main shapes, sweeps)
    extra_meta: dict[str, Any] = field(default_factory=dict)


def plan(cfg: BenchConfig) -> list[CaseSpec]:
    """The ordered list of cases (see module docstring)."""
    if cfg.smoke:  # then the same filters as a real run (--providers, --provider ...)
        specs = [
            # Interpreter speed is ~0.1 s per tile: a handful of tiles per case.
            CaseSpec("P_smoke", "main", 2, 100, 0.3, 1, 64, CORE),
            CaseSpec("P_smoke_fill", "main", 2, 100, 0.3, 1, 64, CORE, "fill"),
            CaseSpec("proj_P_smoke", "projection", 2, 100, 0.3, 1, 64, PROJECTION),
            CaseSpec("len_32", "sweep_len", 1, 32, 0.0, 1, 64, ("blockattn", "fa2")),
            CaseSpec("len_64", "sweep_len", 1, 64, 0.0, 1, 64, ("blockattn", "fa2")),
            CaseSpec("sparsity_0", "sweep_sparsity", 1, 64, 0.0, 1, 64, ("blockattn", "fa2")),
            CaseSpec("sparsity_0.5", "sweep_sparsity", 1, 64, 0.5, 1, 64, ("blockattn", "fa2")),
            CaseSpec("P_smoke", "extra", 2, 100, 0.3, 1, 64, tuple(EXTRAS)),
        ]
    else:
        specs = [
            CaseSpec("P_D128", "main", 1152, 4096, 0.7, 4, 128, CORE),
            CaseSpec("P_D64", "main", 1152, 4096, 0.7, 4, 64, CORE),
            # Shape P as tritonbench would build it: 0.7 read as the FILLED fraction (T ~ 3.3 M).
            CaseSpec("P_D128_fill", "main", 1152, 4096, 0.7, 4, 128, CORE, "fill"),
            CaseSpec("P_D64_fill", "main", 1152, 4096, 0.7, 4, 64, CORE, "fill"),
            CaseSpec("proj_P_D128", "projection", 1152, 4096, 0.7, 4, 128, PROJECTION),
            CaseSpec("proj_P_D64", "projection", 1152, 4096, 0.7, 4, 64, PROJECTION),
        ]
        if cfg.sweeps:
            lens = (256, 1024, 4096) if cfg.quick else (256, 512, 1024, 2048, 4096)
            for L in lens:
                B = max(1, round(SWEEP_TOKENS / (0.3 * L)))
                specs.append(CaseSpec(f"len_{L}", "sweep_len", B, L, 0.7, 4, 128, SWEEP))
            sps = (0.0, 0.7, 0.95) if cfg.quick else (0.0, 0.3, 0.5, 0.7, 0.9, 0.95)
            for s in sps:
                B = max(1, round(SWEEP_TOKENS / ((1 - s) * 1024)))
                specs.append(
                    CaseSpec(f"sparsity_{s:g}", "sweep_sparsity", B, 1024, s, 4, 128, SWEEP)
                )
        if cfg.extras:
            specs.append(CaseSpec("P_D128", "extra", 1152, 4096, 0.7, 4, 128, tuple(EXTRAS)))
    if not cfg.projection:
        specs = [s for s in specs if s.group != "projection"]
    for s in specs:  # outside kernels: at the main shapes and along the sweeps (every plot)
        if s.group in ("main", "sweep_len", "sweep_sparsity"):
            s.providers = (*s.providers, *(o for o in cfg.outside if o not in s.providers))
    if cfg.providers is not None:
        for s in specs:
            if s.group != "projection":  # its entries are not providers (see cfg.projection)
                s.providers = tuple(p for p in s.providers if p in cfg.providers)
    if cfg.cases is not None:
        unknown = sorted(set(cfg.cases) - {s.name for s in specs})
        if unknown:
            raise ValueError(f"--cases: unknown {unknown}; this run's cases: "
                             f"{sorted({s.name for s in specs})}")  # fmt: skip
        specs = [s for s in specs if s.name in cfg.cases]
    assert all(s.sparsity_convention in SPARSITY_CONVENTIONS for s in specs)
    return [s for s in specs if s.providers]


def _git() -> dict[str, Any]:
    root = Path(__file__).resolve().parents[2]

    def git(*a: str) -> str:
        try:
            r = subprocess.run(["git", *a], cwd=root, capture_output=True, text=True, timeout=10)
            return r.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    from blockattn.run.execute import git_commit

    commit = git_commit(short=False)  # the package's own checkout only, or the env stamp
    if not re.fullmatch(r"[0-9a-f]{7,40}", commit):
        commit = "unknown (no git checkout of blockattn; set BLOCKATTN_GIT_COMMIT)"
    dirty = commit[0] != "u" and not os.environ.get("BLOCKATTN_GIT_COMMIT")
    return {"commit": commit, "dirty": dirty and bool(git("status", "-s"))}


def _meta(cfg: BenchConfig) -> dict[str, Any]:
    import triton

    dev = "cpu"
    props: dict[str, Any] = {}
    if measure.cuda():
        p = torch.cuda.get_device_properties(0)
        dev = p.name
        props = {
            "sm_count": p.multi_processor_count,
            "capability": f"sm_{p.major}{p.minor}",
            "total_memory_gb": round(p.total_memory / 1e9, 1),
        }
    return {
        "gpu": dev,
        "gpu_kind": cfg.gpu_kind,
        "gpu_props": props,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "git": _git(),
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "triton_interpret": os.environ.get("TRITON_INTERPRET", "0"),
        "flash": flash_info(),
        "config": asdict(cfg),
    }


class _Budget:
    def __init__(self, seconds: float) -> None:
        self.t0 = time.monotonic()
        self.seconds = seconds

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        return self.seconds - self.elapsed


def _row(case: BenchCase, spec: CaseSpec, prov: str, pas: str, **kw: Any) -> dict[str, Any]:
    row = {**case.describe(), "group": spec.group, "provider": prov, "pass": pas}
    # Projection entries are not providers: they always run the fused rotary path.
    row["rotary"] = entry(prov).rotary if spec.group != "projection" else True
    row.update(kw)
    return row


def pass_bytes(case: BenchCase, pas: str, rotary: bool) -> int:
    """Minimum traffic: fwd reads q, k, v, writes O (4 passes); bwd reads q, k, v, dO and writes
    dq, dk, dv (7 passes); each also reads sinu_pos once with rotary. fwd+bwd = the sum."""
    extra = case.sinu_bytes() if rotary else 0
    fwd = 4 * case.tensor_bytes() + extra
    bwd = 7 * case.tensor_bytes() + extra
    return {"fwd": fwd, "bwd": bwd, "fwdbwd": fwd + bwd}[pas]


def _run_provider(
    cfg: BenchConfig, case: BenchCase, spec: CaseSpec, name: str, state: report.State, b: _Budget
) -> None:
    prov = entry(name)
    rep_ms = cfg.rep_ms if spec.group in ("main", "extra") else cfg.sweep_rep_ms
    need = EXTRAS.get(name, 0.0)
    if b.left() <= need:
        msg = f"{spec.name}/{name}: skipped, time budget ({cfg.time_budget_s:.0f} s) exhausted"
        state.skipped.append(msg)
        for pas in PASSES:
            state.add(_row(case, spec, name, pas, status="skipped_budget", note=msg))
        return
    t0 = time.monotonic()
    if prov.worker is not None:  # hosted by the isolation worker: timed on the judge's clock
        _run_isolated(cfg, case, spec, name, state, rep_ms)
        state.provider_seconds.append({"case": spec.name, "provider": name,
                                       "s": time.monotonic() - t0})  # fmt: skip
        return
    try:
        prepared = prov.prepare(case)
    except Unsupported as exc:
        for pas in PASSES:
            state.add(_row(case, spec, name, pas, status="unsupported", note=str(exc)))
        return
    except Exception as exc:
        note = f"prepare failed: {type(exc).__name__}: {exc}"
        state.errors.append({"case": spec.name, "provider": name, "trace": traceback.format_exc()})
        for pas in PASSES:
            state.add(_row(case, spec, name, pas, status="error", note=note))
        return
    try:
        outs = {"O": prepared.fwd()}
        outs.update(zip(("dQ", "dK", "dV"), prepared.bwd(), strict=True))
        chk = case.check(outs, prov.rotary, cfg.check_seqs)
        del outs
    except Exception as exc:
        chk = {"check": "error", "check_error": f"{type(exc).__name__}: {exc}"}
        state.errors.append({"case": spec.name, "provider": name, "trace": traceback.format_exc()})
    state.checks.append({"case": spec.name, "group": spec.group, "provider": name, **chk})
    if measure.cuda():
        try:
            prepared.notes["fwd kernels"] = top_kernels(prepared.fwd)
            prepared.notes["bwd kernels"] = top_kernels(prepared.bwd)
        except Exception as exc:  # provenance only
            prepared.notes["kernels"] = f"profiler failed: {type(exc).__name__}"
    state.checks[-1]["notes"] = dict(prepared.notes)
    notes = "; ".join(f"{k}: {v}" for k, v in prepared.notes.items() if "kernels" not in k)
    for pas in PASSES:
        fn = getattr(prepared, pas)
        if b.left() <= 0:
            msg = f"{spec.name}/{name}/{pas}: skipped, time budget exhausted"
            state.skipped.append(msg)
            state.add(_row(case, spec, name, pas, status="skipped_budget", note=msg))
            continue
        try:
            ms = measure.time_ms(fn, cfg.warmup_ms, rep_ms, cfg.smoke)
            mem = measure.peak_memory_mb(fn)
            status = "ok" if chk["check"] == "pass" else f"check_{chk['check']}"
            nbytes = pass_bytes(case, pas, prov.rotary)
            peak = measure.peak_tbps((state.ceiling or {}).get("tbps"))
            if (why := measure.impossible(ms, nbytes, peak)) is not None:
                status = "refused_impossible"
                state.errors.append({"case": spec.name, "provider": name, "trace": why})
            state.add(
                _row(
                    case,
                    spec,
                    name,
                    pas,
                    status=status,
                    ms=ms,
                    bytes=nbytes,
                    peak_mem_mb=mem,
                    check=chk["check"],
                    relerr_O=chk.get("relerr_O"),
                    relerr_dQ=chk.get("relerr_dQ"),
                    note=notes if status != "refused_impossible" else f"{why}; {notes}",
                )
            )
        except Exception as exc:
            _pass_failed(state, case, spec, name, pas, exc)
    del prepared
    state.provider_seconds.append({"case": spec.name, "provider": name, "s": time.monotonic() - t0})


def _run_isolated(cfg: BenchConfig, case: BenchCase, spec: CaseSpec, name: str,
                  state: report.State, rep_ms: float) -> None:  # fmt: skip
    """An entry whose kernel runs in the worker (`blockattn.bench.isolated`): prepared there on
    two input sets, checked, then each pass timed on the judge's clock, its outputs
    spot-checked, and a time below the physical floor refused."""
    from blockattn.bench.isolated import BATCHES, IsolatedBench

    prov = entry(name)
    ib = IsolatedBench(prov.worker, str(prov.provider), name, case, prov.rotary, cfg.check_seqs)
    try:
        ib.prepare()
        chk = ib.check()
    except Unsupported as exc:
        for pas in PASSES:
            state.add(_row(case, spec, name, pas, status="unsupported", note=str(exc)))
        return
    except Exception as exc:
        note = f"prepare failed: {type(exc).__name__}: {exc}"
        state.errors.append({"case": spec.name, "provider": name, "trace": traceback.format_exc()})
        for pas in PASSES:
            state.add(_row(case, spec, name, pas, status="error", note=note))
        return
    state.checks.append({"case": spec.name, "group": spec.group, "provider": name, **chk,
                         "notes": dict(ib.notes)})  # fmt: skip
    notes = "; ".join(f"{k}: {v}" for k, v in ib.notes.items())
    peak = measure.peak_tbps((state.ceiling or {}).get("tbps"))
    for pas in PASSES:
        try:
            ms, info = ib.time(pas, rep_ms, 1 if cfg.smoke else BATCHES, cfg.smoke)
        except Exception as exc:
            _pass_failed(state, case, spec, name, pas, exc)
            continue
        status = "ok" if chk["check"] == "pass" else f"check_{chk['check']}"
        note = notes
        if info["check"] != "pass":
            status, note = "check_fail", f"{info['timed_check']}; {notes}"
            state.checks.append({"case": spec.name, "group": spec.group, "provider": name,
                                 "pass": pas, **info})  # fmt: skip
        nbytes = pass_bytes(case, pas, prov.rotary)
        if (why := measure.impossible(ms, nbytes, peak)) is not None:
            status, note = "refused_impossible", f"{why}; {note}"
            state.errors.append({"case": spec.name, "provider": name, "trace": why})
        state.add(_row(case, spec, name, pas, status=status, ms=ms, bytes=nbytes, check=chk[
            "check"], relerr_O=chk.get("relerr_O"), relerr_dQ=chk.get("relerr_dQ"), note=note,
            worker_event_ms=info.get("worker_event_ms")))  # fmt: skip
    ib.release()


def _pass_failed(
    state: report.State, case: BenchCase, spec: CaseSpec, name: str, pas: str, exc: Exception
) -> None:
    """A timed pass raised: keep its traceback and an error row, and go on with the next."""
    state.errors.append({"case": spec.name, "provider": name, "trace": traceback.format_exc()})
    note = f"{pas} failed: {type(exc).__name__}: {exc}"
    state.add(_row(case, spec, name, pas, status="error", note=note))


def _run_projection(
    cfg: BenchConfig, case: BenchCase, spec: CaseSpec, state: report.State, b: _Budget
) -> None:
    """Projection fwd+bwd, packed vs unfused gradient (blockattn.bench.projection)."""
    t0 = time.monotonic()
    try:
        inputs = projection.make_inputs(case)
        chk = projection.check_bitwise(case, inputs)
    except Exception as exc:
        note = f"projection check failed: {type(exc).__name__}: {exc}"
        state.errors.append(
            {"case": spec.name, "provider": CHECK_NAME, "trace": traceback.format_exc()}
        )
        chk = {"check": "error", "check_error": note}
        state.checks.append({"case": spec.name, "group": spec.group, "provider": CHECK_NAME, **chk})
        for name in spec.providers:
            for pas in projection.PASSES:
                state.add(_row(case, spec, name, pas, status="error", note=note))
        return
    state.checks.append({"case": spec.name, "group": spec.group, "provider": CHECK_NAME, **chk})
    status = "ok" if chk["check"] == "pass" else f"check_{chk['check']}"
    for name in spec.providers:
        prepared = None
        for pas in projection.PASSES:
            if b.left() <= 0:
                msg = f"{spec.name}/{name}/{pas}: skipped, time budget exhausted"
                state.skipped.append(msg)
                state.add(_row(case, spec, name, pas, status="skipped_budget", note=msg))
                continue
            try:
                if prepared is None:
                    prepared = projection.prepare(case, inputs, projection.ENTRIES[name])
                fn = getattr(prepared, pas)
                ms = measure.time_ms(fn, cfg.warmup_ms, cfg.rep_ms, cfg.smoke)
                mem = measure.peak_memory_mb(fn)
                notes = "; ".join(f"{k}: {v}" for k, v in prepared.notes.items())
                row = _row(case, spec, name, pas, status=status, ms=ms, peak_mem_mb=mem)
                state.add({**row, "check": chk["check"], "note": notes})
            except Exception as exc:
                _pass_failed(state, case, spec, name, pas, exc)
        del prepared
        _cleanup()
    state.provider_seconds.append(
        {"case": spec.name, "provider": CHECK_NAME, "s": time.monotonic() - t0}
    )


def _cleanup() -> None:
    if measure.cuda():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def run_benchmark(config: BenchConfig | dict[str, Any] | None = None) -> dict[str, Any]:
    """Run the benchmark; returns the bench.json content (also written to `config.out`)."""
    cfg = config if isinstance(config, BenchConfig) else BenchConfig(**(config or {}))
    if cfg.smoke:
        cfg.ceiling_bytes = min(cfg.ceiling_bytes, 1 << 24)
        cfg.check_seqs = min(cfg.check_seqs, 4)
    b = _Budget(cfg.time_budget_s)
    device = torch.device("cuda" if measure.cuda() else "cpu")
    if device.type == "cpu":
        from blockattn.kernels.attention import INTERPRET

        if not INTERPRET:
            raise ValueError(
                "no CUDA device: the CPU run needs TRITON_INTERPRET=1 set before blockattn is "
                "imported (use `blockattn bench --smoke`, which sets it)"
            )
    dtype = getattr(torch, cfg.dtype)
    cfg.gpu_kind = (cfg.gpu_kind or "").strip() or measure.default_gpu_kind()
    state = report.State(Path(cfg.out), _meta(cfg))
    state.write()

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    old = signal.signal(signal.SIGTERM, on_term) if _main_thread() else None
    try:
        ceiling = measure.copy_ceiling(cfg.ceiling_bytes, cfg.warmup_ms, cfg.rep_ms, cfg.smoke)
        state.ceiling = {**ceiling, "gpu_kind": cfg.gpu_kind}
        rm = measure.read_mostly_ceiling(cfg.ceiling_bytes, cfg.warmup_ms, cfg.rep_ms, cfg.smoke)
        state.read_mostly = {**rm, "gpu_kind": cfg.gpu_kind}
        state.write()
        for spec in plan(cfg):
            if b.left() <= 0:
                msg = f"case {spec.name} ({spec.group}): skipped, time budget exhausted"
                state.skipped.append(msg)
                continue
            case = make_bench_case(
                spec.name,
                B=spec.B,
                max_len=spec.max_len,
                sparsity=spec.sparsity,
                H=spec.H,
                D=spec.D,
                dtype=dtype,
                device=device,
                seed=cfg.seed,
                sparsity_convention=spec.sparsity_convention,
            )
            state.cases.append({**case.describe(), "group": spec.group})
            broken = None
            if spec.group == "projection":
                try:
                    _run_projection(cfg, case, spec, state, b)
                    _cleanup()
                except Exception as exc:
                    broken = f"CUDA context lost after {spec.name}: {type(exc).__name__}"
            for name in spec.providers if spec.group != "projection" else ():
                _run_provider(cfg, case, spec, name, state, b)
                try:
                    _cleanup()
                except Exception as exc:
                    # A device-side assert poisons the CUDA context: nothing after it can run.
                    broken = f"CUDA context lost after {spec.name}/{name}: {type(exc).__name__}"
                    break
            del case
            if broken:
                state.status = f"aborted ({broken})"
                break
            _cleanup()
        else:
            state.status = "complete" if not state.skipped else "budget_exhausted"
    except KeyboardInterrupt as exc:
        state.status = f"interrupted ({exc})"
        raise
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)
        state.elapsed_s = b.elapsed
        # the kernel's worker ends before the last write, so what the kernel did beyond its
        # calls is in bench.json and the summary, not only on stderr
        state.isolation = isolated.end_worker()
        state.write(final=True)
    return state.to_json()


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
