"""Run one case's providers: device facts, and each provider called safely on the inputs.

A provider that refuses, crashes or writes to its inputs is a result, never a crash of the run;
the outputs go to the judge (`blockattn.judge.evaluate`), which owns every metric.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from blockattn import providers
from blockattn.cases.inputs import Inputs
from blockattn.providers import OUTPUT_KEYS, Unsupported

NOT_ISOLATED = "NOT ISOLATED"  # a kernel called in the judge's own process (debug mode)


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


def git_commit(short: bool = True) -> str:
    """The commit of blockattn's own source, else "unknown".

    `BLOCKATTN_GIT_COMMIT` when set (a copy without its .git, e.g. on a device machine); else
    HEAD of the git checkout whose top level is the package's own parent directory. A package
    installed or copied inside another repository (site-packages in a project's venv, a vendored
    copy) is not that repository's commit: "unknown".
    """
    env = os.environ.get("BLOCKATTN_GIT_COMMIT", "").strip()
    if env and env != "unknown":
        return env[:10] if short and re.fullmatch(r"[0-9a-f]{40}", env) else env
    root = Path(__file__).resolve().parents[2]  # blockattn/run/execute.py -> the checkout

    def git(*a: str) -> str:
        return subprocess.run(["git", *a], capture_output=True, text=True, check=True,
                              cwd=root, timeout=10).stdout.strip()  # fmt: skip

    try:
        if Path(git("rev-parse", "--show-toplevel")).resolve() != root:
            return "unknown"
        return git("rev-parse", *(["--short"] if short else []), "HEAD")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def release_cuda_memory(exc: BaseException) -> None:
    """After a CUDA OOM, return the cached blocks so the next case starts from a clean pool
    (the failed case's tensors are already unreachable once its frames are gone)."""
    if isinstance(exc, torch.cuda.OutOfMemoryError) and torch.cuda.is_available():
        torch.cuda.empty_cache()


def _snapshot(inp: Inputs) -> dict[str, torch.Tensor]:
    names = ("q", "k", "v", "grad_out", "offsets", "sinu_pos", "x", "w", "bias")
    return {n: getattr(inp, n).clone() for n in names if getattr(inp, n) is not None}


def _declared_refusal(prov: providers.Provider, inp: Inputs) -> dict[str, Any] | None:
    info = device_info()
    why = prov.supports.refusal(inp.spec, inp.q.device.type, info["arch"], inp.spec.block_size)
    if why is None:
        return None
    return {"status": "unsupported", "reason": f"{prov.name}: {why}", "declared": True,
            "time_s": 0.0, "provider": prov.describe()}  # fmt: skip


def send_ahead(prov: providers.Provider, inp: Inputs, variant: str) -> Any:
    """An isolated provider's call of this case, sent to its worker now (it runs while the
    judge computes the oracle); `call_provider(..., ahead=...)` collects it. None: nothing to
    send (a declared refusal, a provider of the judge's own process)."""
    if prov.worker is None or _declared_refusal(prov, inp) is not None:
        return None
    return prov.worker.send_case(prov, inp, variant)


def call_provider(prov: providers.Provider, inp: Inputs, variant: str, ahead: Any = None
                  ) -> tuple[dict[str, torch.Tensor] | None, dict[str, Any]]:  # fmt: skip
    """Run one provider on a case's inputs: (outputs, result) where result is the record's
    status entry; outputs is None when the provider was not run (declared unsupported), refused,
    crashed, wrote to its inputs or returned too few outputs (result says which). `ahead`: the
    collector `send_ahead` returned for this provider and case."""
    if ahead is not None:
        return ahead()
    refused = _declared_refusal(prov, inp)
    if refused is not None:  # declared: recorded, never judged as a failure
        return None, refused
    if prov.worker is not None:  # isolated: the call runs in the worker, the judge stays here
        return prov.worker.run_case(prov, inp, variant)
    before = _snapshot(inp)
    t0 = time.perf_counter()
    try:
        out = prov.run(inp, variant)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    except Unsupported as exc:
        return None, {"status": "unsupported", "reason": str(exc),
                      "time_s": time.perf_counter() - t0, "provider": prov.describe()}  # fmt: skip
    except Exception as exc:  # a crashing provider (CUDA OOM included) is a result, not a crash
        tb = traceback.format_exc(limit=4)
        release_cuda_memory(exc)
        return None, {
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
            return None, {
                "status": "error",
                "reason": f"provider modified its input {n!r} in place",
                "time_s": elapsed,
            }
    missing = [k for k in OUTPUT_KEYS[variant] if k not in out]
    if missing:
        return None, {"status": "error", "reason": f"missing outputs {missing}",
                      "time_s": elapsed}  # fmt: skip
    return out, {"status": "ok", "reason": None, "time_s": elapsed,
                 "isolation": "trusted" if prov.role == "baseline" else NOT_ISOLATED}
