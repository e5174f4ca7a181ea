"""Run cases: inputs, FP64 oracle, every provider, metrics; stream records to results.jsonl."""

from __future__ import annotations

import datetime as _dt
import json
import os
import shlex
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

from blockattn import providers
from blockattn.harness import metrics
from blockattn.harness.inputs import Inputs, build_inputs
from blockattn.harness.reference import oracle_bounds, oracle_outputs
from blockattn.harness.results import ResultsWriter, load_records
from blockattn.harness.spec import CaseSpec
from blockattn.providers import OUTPUT_KEYS, Unsupported


def device_info() -> dict[str, str]:
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        # Which physical GPU (uuid) and pin: multi-GPU CI shows that every GPU did work.
        return {
            "device": "cuda", "arch": f"sm_{major}{minor}", "gpu": torch.cuda.get_device_name(),
            "gpu_uuid": str(torch.cuda.get_device_properties(0).uuid),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"),
        }  # fmt: skip
    return {"device": "cpu", "arch": "cpu", "gpu": "none (cpu interpreter)"}


def default_providers(device: str) -> tuple[str, str, list[str]]:
    """(under_test, baseline, providers) for a device: GPU blockattn vs fa2, CPU vs eager."""
    if device == "cuda":
        return "blockattn", "fa2", ["blockattn", "fa2", "eager"]
    return "blockattn", "eager", ["blockattn", "eager"]


def git_commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _release_cuda_memory(exc: BaseException) -> None:
    """After a CUDA OOM, return the cached blocks so the next case starts from a clean pool
    (the failed case's tensors are already unreachable once its frames are gone)."""
    if isinstance(exc, torch.cuda.OutOfMemoryError) and torch.cuda.is_available():
        torch.cuda.empty_cache()


def _snapshot(inp: Inputs) -> dict[str, torch.Tensor]:
    names = ("q", "k", "v", "grad_out", "offsets", "sinu_pos", "x", "w", "bias")
    return {n: getattr(inp, n).clone() for n in names if getattr(inp, n) is not None}


def _bounds_for(prov: providers.Provider, inp: Inputs, tol) -> tuple[Any, dict | None]:
    """(model, {tensor: E}) of the provider's accuracy model in `tol`; (None, None) without one.

    The model is the one the tolerance file's rule for this provider names (the verdict checks
    that it is the one the provider declares)."""
    model = (
        tol.model_for(prov.name, prov.accuracy_model, prov.reference) if tol is not None else None
    )
    if model is None:
        return None, None
    (bounds,) = oracle_bounds(inp, [model.resolve(inp.spec.dtype)])
    return model, bounds


def _run_provider(
    prov: providers.Provider,
    inp: Inputs,
    variant: str,
    ref: dict[str, torch.Tensor],
    dtype: str,
    tol=None,  # Tolerances | None: supplies the accuracy model of the elementwise bound
    tmap=None,
) -> dict[str, Any]:
    info = device_info()
    why = prov.supports.refusal(inp.spec, inp.q.device.type, info["arch"])
    if why is not None:  # declared: recorded, never judged as a failure
        return {"status": "unsupported", "reason": f"{prov.name}: {why}", "declared": True,
                "time_s": 0.0, "provider": prov.describe()}  # fmt: skip
    before = _snapshot(inp)
    t0 = time.perf_counter()
    try:
        out = prov.run(inp, variant)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    except Unsupported as exc:
        return {"status": "unsupported", "reason": str(exc), "time_s": time.perf_counter() - t0,
                "provider": prov.describe()}  # fmt: skip
    except Exception as exc:  # a crashing provider (CUDA OOM included) is a result, not a crash
        tb = traceback.format_exc(limit=4)
        _release_cuda_memory(exc)
        return {
            "status": "error",
            "reason": f"{type(exc).__name__}: {exc}",
            "traceback": tb,
            "time_s": time.perf_counter() - t0,
            "provider": prov.describe(),
        }
    elapsed = time.perf_counter() - t0
    for n, t in before.items():
        if not torch.equal(getattr(inp, n), t):
            # Restore so later providers see the real inputs, then report the mutation.
            getattr(inp, n).copy_(t)
            return {
                "status": "error",
                "reason": f"provider modified its input {n!r} in place",
                "time_s": elapsed,
            }
    missing = [k for k in OUTPUT_KEYS[variant] if k not in out]
    if missing:
        return {"status": "error", "reason": f"missing outputs {missing}", "time_s": elapsed}
    tensors = {}
    try:
        model, bounds = _bounds_for(prov, inp, tol)
        for key in OUTPUT_KEYS[variant]:
            tensors[key] = metrics.tensor_metrics(
                out[key], ref[key], dtype, bound=None if bounds is None else bounds[key],
                model=model, tmap=tmap,
            )  # fmt: skip
        del bounds
    except ValueError as exc:
        return {"status": "error", "reason": str(exc), "time_s": elapsed}
    res = {"status": "ok", "reason": None, "time_s": elapsed, "tensors": tensors,
           "provider": prov.describe()}  # fmt: skip
    if prov.accuracy_model is not None:
        res["accuracy_model"] = prov.accuracy_model
    if prov.reference is not None:
        res["reference"] = prov.reference
    return res


def evaluate_case(
    spec: CaseSpec,
    provider_names: list[str],
    under_test: str,
    baseline: str,
    device: str | None = None,
    tol=None,  # Tolerances | None: its accuracy models give each provider's elementwise bound
) -> dict[str, Any]:
    from blockattn.bounds.elementwise import TokenMap

    info = device_info()
    dev = device or info["device"]
    rec: dict[str, Any] = {
        "case_id": spec.case_id,
        "spec": spec.to_dict(),
        "device": dev,
        "arch": info["arch"],
        "under_test": under_test,
        "baseline": baseline,
        "providers": {},
        "oracle_error": None,
    }
    t0 = time.perf_counter()
    try:
        inp = build_inputs(spec, dev)
    except RuntimeError as exc:  # CUDA/CPU OOM on a huge case: record it, go on with the next
        # (ValueError/TypeError are bad specs: usage errors, raised to the command -> exit 2)
        _release_cuda_memory(exc)
        rec["oracle_error"] = f"building inputs: {type(exc).__name__}: {exc}"
        rec["T"] = rec["max_seq_len"] = rec["n_seqs"] = rec["realized_sparsity"] = None
        rec["wall_s"] = time.perf_counter() - t0
        return rec
    lens = (inp.offsets[1:] - inp.offsets[:-1]).tolist() if inp.offsets.numel() > 1 else []
    rec["T"] = inp.T
    rec["max_seq_len"] = int(max(lens, default=0))
    rec["n_seqs"] = len(lens)
    rec["realized_sparsity"] = (
        1.0 - inp.T / (len(lens) * max(1, spec.max_len)) if spec.lengths is None and lens else None
    )
    try:
        # The oracle outputs stay on the case's device: metrics reduce them there, in chunks.
        ref = {k: v.detach() for k, v in oracle_outputs(inp).items()}
    except Exception as exc:
        _release_cuda_memory(exc)
        rec["oracle_error"] = f"{type(exc).__name__}: {exc}"
        rec["wall_s"] = time.perf_counter() - t0
        return rec
    rec["oracle_s"] = time.perf_counter() - t0
    tmap = TokenMap(inp.offsets, inp.T, 64, ref["O"].device)
    if tol is not None:
        rec["tolerances"] = {"version": tol.version, "sha256": tol.sha256}
    for name in provider_names:
        prov = providers.get(name)
        rec["providers"][name] = _run_provider(
            prov, inp, spec.variant, ref, spec.dtype, tol, tmap
        )
    ut, bl = rec["providers"].get(under_test), rec["providers"].get(baseline)
    if ut and bl and ut["status"] == "ok" and bl["status"] == "ok":
        rec["vs_baseline"] = {
            k: metrics.ratio(m["max_abs"], bl["tensors"][k]["max_abs"], m["floor_eff"])
            for k, m in ut["tensors"].items()
        }
    rec["wall_s"] = time.perf_counter() - t0
    rec["finished_at"] = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    return rec


def write_reproducer(
    out_dir: Path, rec: dict[str, Any], failures: list[str], tol_path: str | None
) -> str:
    """Write repro/<case_id>.json (spec + providers + why) and return the replay command."""
    rdir = out_dir / "repro"
    rdir.mkdir(parents=True, exist_ok=True)
    path = rdir / f"{rec['case_id']}.json"
    from blockattn.harness.session import provider_specs

    payload = {
        "case_id": rec["case_id"],
        "spec": rec["spec"],
        "under_test": rec["under_test"],
        "baseline": rec["baseline"],
        "providers": list(rec["providers"]),
        # Outside kernels by their --provider spec, so replay re-runs that same provider.
        "provider_specs": provider_specs(list(rec["providers"])),
        "cwd": str(Path.cwd()),
        "tolerances": tol_path,
        "failures": failures,
        "device": rec["device"],
    }
    path.write_text(json.dumps(payload, indent=2) + "\n")
    cmd = f"blockattn replay {shlex.quote(str(path))}"
    if tol_path:
        cmd += f" --tolerances {shlex.quote(str(tol_path))}"
    return cmd


class Progress:
    """Minimal stderr progress bar (no tqdm dependency); one line per case when not a TTY."""

    def __init__(self, total: int, enabled: bool = True) -> None:
        self.total, self.done, self.enabled = total, 0, enabled
        self.t0 = time.perf_counter()
        self.tty = sys.stderr.isatty()

    def step(self, label: str, status: str) -> None:
        self.done += 1
        if not self.enabled:
            return
        el = time.perf_counter() - self.t0
        eta = el / self.done * (self.total - self.done)
        w = 24
        fill = int(w * self.done / max(1, self.total))
        line = (
            f"[{'#' * fill}{'.' * (w - fill)}] {self.done}/{self.total} "
            f"{el:5.0f}s eta {eta:4.0f}s  {status:<5} {label}"
        )
        if self.tty:
            sys.stderr.write("\r" + line[:150].ljust(150))
            if self.done == self.total:
                sys.stderr.write("\n")
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def run_cases(
    specs: Iterable[CaseSpec],
    out_dir: str | Path,
    *,
    provider_names: list[str],
    under_test: str,
    baseline: str,
    resume: bool = False,
    tol=None,  # Tolerances | None
    progress: bool = True,
    on_record: Callable[[dict[str, Any], Any], None] | None = None,
) -> list[dict[str, Any]]:
    """Run every spec not already finished (with --resume) and stream records as they finish.

    Returns all records of the directory (old + new). If `tol` is given each new record gets a
    verdict; failures get a reproducer and a printed replay command.
    """
    from blockattn.harness import verdict as _verdict

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    specs = list(specs)
    done: set[str] = set()
    if resume and (out / "results.jsonl").exists():
        done = {r["case_id"] for r in load_records(out)}
    elif not resume and (out / "results.jsonl").exists():
        raise ValueError(f"{out}/results.jsonl exists; pass --resume or a fresh --out")
    todo = [s for s in specs if s.case_id not in done]
    bar = Progress(len(todo), progress)
    with ResultsWriter(out) as w:
        for spec in todo:
            rec = evaluate_case(spec, provider_names, under_test, baseline, tol=tol)
            status = "done"
            if tol is not None:
                v = _verdict.evaluate(rec, tol, under_test)
                rec["verdict"] = {
                    "passed": v.passed,
                    "skipped": v.skipped,
                    "failures": v.failures,
                    "warnings": v.warnings,
                    "tolerances": f"v{tol.version}",
                }
                status = "skip" if v.skipped and v.passed else ("pass" if v.passed else "FAIL")
                if not v.passed:
                    cmd = write_reproducer(out, rec, v.failures, str(tol.path))
                    rec["verdict"]["replay"] = cmd
            w.write(rec)
            if on_record:
                on_record(rec, tol)
            bar.step(f"{spec.case_id} {spec.short()}", status)
            if tol is not None and not rec["verdict"]["passed"]:
                print(f"FAIL {spec.case_id}: {rec['verdict']['failures'][0]}", file=sys.stderr)
                print(f"  replay: {rec['verdict']['replay']}", file=sys.stderr)
    return load_records(out)
