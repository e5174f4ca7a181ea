"""Subprocess entry: run the quick tier on the (possibly mutated) package copy first on sys.path.

    python -m blockattn.mutants.worker --plan PLAN.json --out RESULT.json

Started by `blockattn.mutants.runner` with cwd and PYTHONPATH set to the copy's root and
BLOCKATTN_MUTANT_ROOT naming it; refuses to run (exit 3) if the imported kernels are not the copy,
so a mutant can never be judged against the unmodified source by accident.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def _judge_tests(tests: list[str], root: Path) -> list[str] | None:
    """Run the repository's tests `tests` on this copy (first on sys.path); the failing node
    ids as failure lines ([] when all pass), None when the tests are not there."""
    import subprocess

    if not all((root / t.split("::", 1)[0]).is_file() for t in tests):
        print(f"worker: tests {tests} not found under {root} (run from a checkout)",
              file=sys.stderr)
        return None
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["COLUMNS"] = "400"  # the summary lines keep their messages (80 columns cut them off)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(root),
         "--tb=short", *[str(root / t) for t in tests]],
        cwd=os.getcwd(), env=env, capture_output=True, text=True,
    )
    if proc.returncode == 0:
        return []
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    if not lines:
        return [f"tests: pytest exit {proc.returncode}: {proc.stdout[-300:]}"]
    # the output's tail on the first line too: a control that fails must say why
    tail = " | ".join(proc.stdout[-1200:].splitlines()[-12:])
    return [f"tests: {lines[0]} [output: {tail}]"] + [f"tests: {ln}" for ln in lines[1:]]


def main(argv: list[str] | None = None) -> int:
    from blockattn.run import env

    device = env.configure()  # before any kernel import: TRITON_INTERPRET on CPU
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    import blockattn.kernels.attention as attention

    root = Path(os.environ.get("BLOCKATTN_MUTANT_ROOT", "/nonexistent")).resolve()
    if not Path(attention.__file__).resolve().is_relative_to(root):
        print(
            f"worker: kernels imported from {attention.__file__}, not from the copy {root}",
            file=sys.stderr,
        )
        return 3
    from blockattn.cases.spec import CaseSpec
    from blockattn.judge import tolerances, verdict
    from blockattn.judge.evaluate import evaluate_case

    plan = json.loads(args.plan.read_text())
    tol = tolerances.load(plan["tolerances"])
    cases = []
    t0 = time.perf_counter()
    # The judge's known-answer tests first: a mutant of the suite that loosens it is killed here.
    from blockattn.judge.selftest import run_selftest

    problems = run_selftest(tol, plan["under_test"], device)
    if problems:
        cases.append({"case_id": "selftest", "name": "judge self-test", "passed": False,
                      "failures": problems})
    elif plan.get("tests"):
        failed = _judge_tests(plan["tests"], Path(plan["tests_root"]))
        if failed is None:
            return 4  # the tests are not there: neither killed nor survived
        if failed:
            problems = failed
            cases.append({"case_id": "tests", "name": "judge tests", "passed": False,
                          "failures": failed})
    # Judged as `blockattn gate` judges: per-case verdicts, then the run-level decision
    # (zero cases, regressions vs the plan's baseline report when it names one).
    from blockattn.judge.gate_rules import decide
    from blockattn.run import results

    base = None
    if plan.get("baseline_report"):
        base = {r["case_id"]: r for r in results.load_report_cases(plan["baseline_report"])}
    records, verdicts = [], []
    for d in plan["specs"] if not problems else []:
        spec = CaseSpec.from_dict(d)
        rec = evaluate_case(
            spec, plan["providers"], plan["under_test"], plan["baseline"], device, tol=tol
        )
        v = verdict.evaluate(rec, tol, plan["under_test"])
        fails = list(v.failures)
        if base is not None and spec.case_id in base:
            fails += verdict.regressions(rec, base[spec.case_id], tol, plan["under_test"])
        records.append(rec)
        verdicts.append(v)
        cases.append({"case_id": spec.case_id, "name": spec.name or spec.short(),
                      "passed": not fails, "failures": fails})
        if fails and not plan["keep_going"]:
            break
    if not problems:
        dec = decide(records, verdicts, base, tol, plan["under_test"])
        if dec.failed and all(c["passed"] for c in cases):
            cases.append({"case_id": "gate", "name": "gate decision", "passed": False,
                          "failures": dec.reasons})
    # The contract battery, as the gate runs it after the cases (only where nothing failed yet,
    # unless --keep-going: a mutant already killed need not pay for it).
    if not problems and (plan["keep_going"] or all(c["passed"] for c in cases)):
        from blockattn import providers
        from blockattn.judge.contract import failures, run_battery

        bad = failures(run_battery(providers.get(plan["under_test"]), tol, device))
        cases.append({"case_id": "contract", "name": "contract battery", "passed": not bad,
                      "failures": [f"contract violated: {c.prop} ({c.probe}): {c.detail}"
                                   for c in bad]})  # fmt: skip
    res = {"device": device, "cases": cases, "seconds": time.perf_counter() - t0}
    args.out.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
