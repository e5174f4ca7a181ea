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


def main(argv: list[str] | None = None) -> int:
    from blockattn.harness import env

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
    from blockattn.harness import tolerances, verdict
    from blockattn.harness.runner import evaluate_case
    from blockattn.harness.spec import CaseSpec

    plan = json.loads(args.plan.read_text())
    tol = tolerances.load(plan["tolerances"])
    cases = []
    t0 = time.perf_counter()
    for d in plan["specs"]:
        spec = CaseSpec.from_dict(d)
        rec = evaluate_case(spec, plan["providers"], plan["under_test"], plan["baseline"], device)
        v = verdict.evaluate(rec, tol, plan["under_test"])
        cases.append(
            {
                "case_id": spec.case_id,
                "name": spec.name or spec.short(),
                "passed": v.passed,
                "failures": v.failures,
            }
        )
        if not v.passed and not plan["keep_going"]:
            break
    res = {"device": device, "cases": cases, "seconds": time.perf_counter() - t0}
    args.out.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
