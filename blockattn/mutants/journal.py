"""A mutation run's journal: each outcome appended as it lands, so an interrupted run (a device
call's time limit, Ctrl-C) keeps what it finished and `blockattn mutants --resume` runs only
the rest of the same plan.

One JSON object per line: the first is the plan's fingerprint, then {"control": bool,
"outcome": {...}} per outcome. A resume whose fingerprint differs (other device, mutants,
tolerances, baseline, cases or source) is refused with the fields that differ: outcomes of two
different plans are never mixed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from blockattn.mutants.apply import PACKAGE_DIR, oracles_dir
from blockattn.mutants.runner import CONTROL_KEY, Outcome

NAME = "mutants.journal.jsonl"
# Outcomes a resume runs again: they say nothing about the mutant (a worker that crashed or ran
# out of time may do better on a second try); kills, survivals and passes are deterministic.
RERUN = ("error", "timeout")


def source_digest() -> str:
    """sha256 over the blockattn and oracles sources (.py, by relative path): a code change
    between an interrupted run and its resume changes it."""
    h = hashlib.sha256()
    for root in (PACKAGE_DIR, oracles_dir()):
        for p in sorted(root.rglob("*.py")):
            h.update(f"{root.name}/{p.relative_to(root)}\0".encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def fingerprint(plan: dict[str, Any], info: dict[str, Any],
                mutants: list[str]) -> dict[str, Any]:
    """What must match for two runs' outcomes to belong to one report (the selection too: the
    control runs under every environment the selected mutants need)."""
    return {
        "device": info.get("device"),
        "gpu": info.get("gpu"),
        "mutants": mutants,
        "plan": plan,  # tolerances, baseline, cases (specs), keep_going
        "source_sha256": source_digest(),
    }


def start(out: Path, fp: dict[str, Any]) -> None:
    """A fresh journal (any earlier one is replaced)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / NAME).write_text(json.dumps({"fingerprint": fp}) + "\n")


def append(out: Path, outcome: Outcome, is_control: bool) -> None:
    with open(out / NAME, "a") as f:
        f.write(json.dumps({"control": is_control, "outcome": outcome.to_dict()}) + "\n")
        f.flush()


def load(out: Path, fp: dict[str, Any]) -> dict[str, Outcome]:
    """The outcomes recorded under `out` for this fingerprint, by mutant name (the control's
    under CONTROL_KEY). Raises ValueError if there is no journal or it is another plan's."""
    path = out / NAME
    if not path.is_file():
        raise ValueError(f"--resume: no journal {path} (run once with --out {out} first)")
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    if not lines or "fingerprint" not in lines[0]:
        raise ValueError(f"--resume: {path} does not start with a fingerprint")
    old = lines[0]["fingerprint"]
    differ = sorted(k for k in set(old) | set(fp) if old.get(k) != fp.get(k))
    if differ:
        raise ValueError(f"--resume: {path} was written by another run; differs in "
                         f"{', '.join(differ)}")
    done: dict[str, Outcome] = {}
    for rec in lines[1:]:
        o = Outcome(**rec["outcome"])
        if o.status not in RERUN:
            done[CONTROL_KEY if rec["control"] else o.name] = o
    return done
