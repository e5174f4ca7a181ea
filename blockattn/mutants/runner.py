"""Run the quick tier against the unmodified copy (control) and every mutant, in subprocesses.

Quick tier = the cpu-tier gate corpus (edge lengths, partial blocks, both dtypes, all variants,
D 64 and 128, strided projection views) + `fuzz` seeded draws from the `ci` fuzz space, judged
with the device's tolerance file exactly as `blockattn gate` judges a run. A mutant is killed when
that verdict fails; by default a worker stops at its first failing case (`keep_going` runs all).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blockattn.mutants.apply import PACKAGE_DIR, make_copy
from blockattn.mutants.mutant import Mutant

# A failure that says the mutated copy's kernels do not compile: the mutant is broken, an error
# (never a kill), whichever case it surfaced in.
BROKEN_MUTANT = re.compile(r"\b(CompilationError|NameError|SyntaxError)\b")

CONTROL_KEY = "<control>"  # the control's entry among a resumed run's outcomes

# A worker that runs longer than this is reported as "timeout" (counted as not killed): the
# whole quick tier takes ~15 s under the interpreter and seconds on a GPU.
WORKER_TIMEOUT_S = 900.0


def quick_tier_specs(fuzz: int, seed: int) -> list:
    from blockattn.cases import strategies
    from blockattn.cases.corpus import load_corpus

    return load_corpus(tiers=("cpu",)) + strategies.sample_specs(
        strategies.SPACES["ci"], fuzz, seed
    )


def failing_metric(failure: str) -> str:
    """Short name of what failed, from a verdict line ("blockattn dQ: max_abs/floor ...")."""
    head, _, msg = failure.partition(": ")
    tensor = head.split(" ", 1)[1] if " " in head else ""
    if tensor == "" and msg.startswith(("error", "unsupported")):
        return f"crash ({msg.split(':', 1)[0]})"
    if failure.startswith("selftest"):
        return "judge self-test"
    if failure.startswith("tests: "):
        return "judge tests"
    if failure.startswith("contract violated: "):
        return "contract: " + failure.removeprefix("contract violated: ").split(" (", 1)[0]
    for pat, name in (
        (r"beyond the \S+ bound", "bound violations"),
        (r"not correctly rounded|ulp error|bound violations \d+ ->", "elementwise regression"),
        (r"max_abs/floor", "max_abs/floor"),
        (r"error/baseline", "error/baseline"),
        (r"SNR", "SNR"),
        (r"NaN/Inf", "NaN/Inf"),
        (r"N-ulp band", "pct_over_tol"),
    ):
        if re.search(pat, msg):
            return f"{tensor} {name}".strip()
    return failure[:60]


@dataclass
class Outcome:
    name: str
    group: str
    description: str
    # killed | survived | error | timeout | not run (needs an sm_90 GPU); control: passed | ...
    status: str
    kind: str | None = None  # killed: "numeric", "crash" (the kernel raised) or "tests"
    metric: str | None = None
    failure: str | None = None
    case: str | None = None
    cases_run: int = 0
    seconds: float = 0.0
    detail: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _env_text(env: tuple[tuple[str, str], ...]) -> str:
    return " ".join(f"{k}={v}" for k, v in env)


def tests_dir() -> Path:
    """The repository's tests, which judge mutants with `tests` (a checkout only)."""
    return PACKAGE_DIR.parent / "tests"


def _run_one(m: Mutant | None, plan: dict[str, Any], timeout_s: float,
             control_env: tuple[tuple[str, str], ...] = ()) -> Outcome:
    extra_env = m.env if m else control_env
    if m is not None:
        plan = {**plan, "tests": list(m.tests)}
    if m:
        name = m.name
    else:
        name = f"control (unmodified, {_env_text(control_env)})" if control_env else (
            "control (unmodified)")
    out = Outcome(name, m.group if m else "-", m.description if m else "no mutation", "error")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="blockattn-mutant-") as tmp:
        root = make_copy(Path(tmp), m)
        plan_p, res_p = Path(tmp, "plan.json"), Path(tmp, "result.json")
        plan_p.write_text(json.dumps(plan))
        env = dict(os.environ)
        # The copy first (its blockattn and oracles win), then the source checkout.
        src_root = str(PACKAGE_DIR.parent)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(root), src_root, *filter(None, [env.get("PYTHONPATH")])]
        )
        env["BLOCKATTN_MUTANT_ROOT"] = str(root)
        env.update(dict(extra_env))
        env.setdefault("OMP_NUM_THREADS", "1")  # workers run side by side
        cmd = [sys.executable, "-m", "blockattn.mutants.worker", "--plan", str(plan_p)]
        try:
            proc = subprocess.run(
                [*cmd, "--out", str(res_p)],
                cwd=root,  # sys.path[0] = the copy, never the source checkout
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired:
            out.status, out.seconds = "timeout", time.perf_counter() - t0
            return out
        out.seconds = time.perf_counter() - t0
        if proc.returncode != 0 or not res_p.exists():
            out.detail = f"worker exit {proc.returncode}: {proc.stderr[-2000:]}"
            return out
        res = json.loads(res_p.read_text())
    out.cases_run = len(res["cases"])
    failed = [c for c in res["cases"] if not c["passed"]]
    if not failed:
        out.status = "survived" if m is not None else "passed"
        return out
    first = failed[0]
    if m is not None and BROKEN_MUTANT.search(first["failures"][0]):
        # the mutated kernel does not compile (e.g. it names a variable its function lacks):
        # the planted bug never ran, so nothing was shown about the suite
        out.detail = f"the mutated source does not compile: {first['failures'][0][:300]}"
        return out
    out.status, out.case = "killed", first["name"]
    out.failure = first["failures"][0]
    out.metric = failing_metric(out.failure)
    out.kind = ("crash" if out.metric.startswith("crash") else
                "tests" if out.metric == "judge tests" else "numeric")
    return out


def make_plan(device: str, tol_path: str, fuzz: int, seed: int, keep_going: bool) -> dict:
    from blockattn.run.execute import default_providers

    ut, bl, provs = default_providers(device)
    return {
        "tests_root": str(PACKAGE_DIR.parent),
        "tolerances": tol_path,
        "providers": provs,
        "under_test": ut,
        "baseline": bl,
        "keep_going": keep_going,
        "specs": [s.to_dict() for s in quick_tier_specs(fuzz, seed)],
    }


def run_mutants(
    mutants: list[Mutant],
    plan: dict[str, Any],
    jobs: int,
    timeout_s: float = WORKER_TIMEOUT_S,
    control: bool = True,
    done: dict[str, Outcome] | None = None,
    on_outcome: Callable[[Outcome, bool], None] | None = None,
) -> tuple[Outcome | None, list[Outcome]]:
    """(control outcome, one outcome per mutant in the given order). A mutant whose code runs
    only on an sm_90 GPU (or only on a GPU) is reported "not run" anywhere else (never counted
    as killed).

    `done` holds outcomes of an interrupted run of the same plan, by mutant name (the control's
    under CONTROL_KEY): those are not run again. `on_outcome(outcome, is_control)` is called as
    each new outcome lands, so a caller can record it before the run ends."""
    done = done or {}
    here = on_sm90()
    gpu = on_gpu()
    runnable = [m for m in mutants if (here or not m.needs_sm90) and (gpu or not m.needs_gpu)]
    ctrl = None
    prior = done.get(CONTROL_KEY)
    if control and runnable and prior is not None and prior.status == "passed":
        ctrl = prior
    elif control and runnable:
        # The control runs every case: any failure there makes every "kill" meaningless. It
        # runs again under each environment a selected mutant needs (the Hopper path's), and
        # the first that fails is the one reported.
        envs = sorted({(), *(m.env for m in runnable)})
        # ... and runs every test a selected mutant relies on (they must pass unmodified), once:
        # they judge the judge, whatever the kernel path. The environments run side by side
        # (in series, six cold-cache runs of the tier outlasted a 330 s GPU call: H200,
        # results/h200_2026-11-26f/bench_fp16ab_08dbf7c); "first" is in `envs` order.
        tests = sorted({t for m in runnable for t in m.tests})
        with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(envs)))) as ex:
            ctrls = list(ex.map(lambda env: _run_one(
                None, {**plan, "keep_going": True, "tests": [] if env else tests}, timeout_s,
                env), envs))
        ctrl = next((c for c in ctrls if c.status != "passed"), ctrls[0])
        if ctrl.status == "passed" and len(envs) > 1:  # one outcome that names every env
            extra = "; ".join(_env_text(e) for e in envs[1:])
            ctrl.name = f"control (unmodified, by default and under {extra})"
            ctrl.seconds = max(c.seconds for c in ctrls)
        if on_outcome is not None and ctrl is not None:
            on_outcome(ctrl, True)
    ran = {m.name: done[m.name] for m in runnable if m.name in done}
    todo = [m for m in runnable if m.name not in ran]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
        futures = {ex.submit(_run_one, m, plan, timeout_s): m.name for m in todo}
        for fut in as_completed(futures):
            ran[futures[fut]] = fut.result()
            if on_outcome is not None:
                on_outcome(ran[futures[fut]], False)
    outs = [ran[m.name] if m.name in ran else
            Outcome(m.name, m.group, m.description, "not run",
                    detail="its code runs only on an sm_90 GPU (Gluon has no interpreter)"
                    if m.needs_sm90 else "its code runs only on a GPU (inline PTX)")
            for m in mutants]
    return ctrl, outs


def on_sm90() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def on_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def package_dir() -> Path:
    return PACKAGE_DIR
