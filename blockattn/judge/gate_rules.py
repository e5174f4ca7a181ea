"""The gate's decision over a whole run: fail closed on anything that is not positive evidence.

`decide` turns per-case verdicts (+ regressions vs a baseline) into pass/fail with reasons:
* zero cases judged fails (a gate that looked at nothing has shown nothing);
* any failing case fails;
* with a baseline: a baseline that shares no case with the run fails (nothing was compared);
  a case missing from the baseline is counted and reported; each regression fails.
* a baseline provider (any provider of a record other than the one under test) whose result
  is beyond its own declared model's bound (more violations than its rule allows) fails the
  run, with a line naming that baseline and the case: the numbers the kernel is compared with
  are themselves wrong (or the model it declares is), which no verdict of the kernel can show.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def baseline_failures(records: list[dict[str, Any]], verdicts: list,
                      under_test: str | None = None) -> list[tuple[str, str]]:  # fmt: skip
    """(case id, line) for each case where the run's baseline provider is beyond its own
    declared model's bound: the gate fails on each, and `false-alarms` counts each."""
    out = []
    for r, v in zip(records, verdicts, strict=False):
        ut = under_test or r.get("under_test")
        case = r["case_id"] if "case_id" in r else getattr(v, "case_id", None)
        for c in getattr(v, "checks", None) or []:
            prov, n, allowed = c.get("provider"), c.get("violations"), c.get("bound")
            # the run's baseline only: other kernels run beside it are not the reference
            if prov is None or prov == ut or prov != r.get("baseline") or n is None or (
                    allowed is None or n <= allowed):  # fmt: skip
                continue
            out.append((case, f"baseline {prov} beyond its own {c.get('model')} bound on "
                        f"{case}: {c.get('tensor')} {n} elements (allowed {allowed}) [the "
                        f"baseline's result, not the kernel under test ({ut})]"))  # fmt: skip
    return out


@dataclass
class Decision:
    failed: bool = False
    reasons: list[str] = field(default_factory=list)
    regressions: list[tuple[str, str]] = field(default_factory=list)
    missing_in_baseline: int = 0

    def fail(self, why: str) -> None:
        self.failed = True
        self.reasons.append(why)


def decide(
    records: list[dict[str, Any]],
    verdicts: list,  # list[verdict.Verdict], one per record
    baseline: dict[str, dict[str, Any]] | None,
    tol=None,
    under_test: str | None = None,
) -> Decision:
    from blockattn.judge import verdict as _verdict

    d = Decision()
    judged = [v for v in verdicts if not v.skipped]
    if not records or not judged:
        d.fail(f"zero cases judged ({len(records)} run, {len(verdicts) - len(judged)} skipped)")
    n_bad = sum(not v.passed for v in verdicts)
    if n_bad:
        d.fail(f"{n_bad} of {len(verdicts)} cases failed")
    for _, why in baseline_failures(records, verdicts, under_test):
        d.fail(why)
    if baseline is not None:
        shared = 0
        for r in records:
            old = baseline.get(r["case_id"])
            if old is None:
                d.missing_in_baseline += 1
                continue
            shared += 1
            if tol is not None:
                ut = under_test or r.get("under_test")
                d.regressions += [
                    (r["case_id"], m) for m in _verdict.regressions(r, old, tol, ut)
                ]
        if records and shared == 0:
            d.fail("the baseline shares no case with this run: nothing was compared")
        if d.regressions:
            d.fail(f"{len(d.regressions)} regressions vs the baseline")
    return d
