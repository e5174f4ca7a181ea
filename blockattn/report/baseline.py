"""Is a `--baseline` report comparable with this run? (gate's regression check)

Errors measured on the CPU interpreter and on a GPU come from different pipelines: refused
(exit 2, naming both sides). Another GPU model, another tolerance version or another corpus
version is a warning: the case-by-case metrics still compare, but their reading changes. (A
baseline that shares no case with the run fails the gate: `judge.gate_rules`.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _meta_of(path: Path) -> dict[str, Any]:
    """report.json's meta of a report dir or file ({} where there is none)."""
    p = Path(path)
    if p.is_dir():
        p = p / "report.json"
    if p.suffix != ".json" or not p.is_file():
        return {}
    try:
        meta = json.loads(p.read_text()).get("meta")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return {}
    return meta if isinstance(meta, dict) else {}


def side(records: list[dict[str, Any]], meta: dict[str, Any] | None) -> dict[str, Any]:
    """What decides comparability, of one side: device kind, GPU, tolerance and corpus
    versions (None where not recorded)."""
    m = meta or {}
    devs = sorted({str(r.get("device")) for r in records if r.get("device")})
    tols = sorted({int(t["version"]) for r in records
                   if isinstance(t := r.get("tolerances"), dict)
                   and isinstance(t.get("version"), int)})  # fmt: skip
    return {
        "device": ", ".join(devs) or m.get("device"),
        "gpu": m.get("gpu"),
        "tolerances": tols or None,
        "corpus_version": m.get("corpus_version"),
    }


def check(
    baseline_path: Path,
    baseline_cases: dict[str, dict[str, Any]],
    here: dict[str, Any],
    case_ids: list[str] | None = None,  # kept for callers; overlap is gate_rules' to judge
) -> tuple[list[str], list[str]]:
    """(refusals, warnings) for comparing this run (`here`, see `side`) with the baseline."""
    there = side(list(baseline_cases.values()), _meta_of(baseline_path))
    refuse: list[str] = []
    warn: list[str] = []
    if here["device"] and there["device"] and here["device"] != there["device"]:
        refuse.append(f"the baseline ran on {there['device']} and this run on {here['device']}: "
                      "errors of the CPU interpreter and of a GPU come from different pipelines "
                      "and do not compare case by case")  # fmt: skip
    elif here.get("gpu") and there.get("gpu") and here["gpu"] != there["gpu"]:
        warn.append(f"the baseline ran on {there['gpu']} and this run on {here['gpu']}: another "
                    "GPU model, so a small drift may be the hardware's, not the kernel's")
    ht, tt = here.get("tolerances"), there.get("tolerances")
    if ht and tt and ht != tt:
        warn.append(f"the baseline was judged by tolerances {', '.join(f'v{v}' for v in tt)} "
                    f"and this run by {', '.join(f'v{v}' for v in ht)}: metrics compare, "
                    "verdicts do not")  # fmt: skip
    hc, tc = here.get("corpus_version"), there.get("corpus_version")
    if hc is not None and tc is not None and hc != tc:
        warn.append(f"the baseline ran corpus v{tc} and this run corpus v{hc}: only the cases "
                    "both hold are compared")  # fmt: skip
    return refuse, warn


def require_comparable(
    baseline_path: Path,
    baseline_cases: dict[str, dict[str, Any]],
    here: dict[str, Any],
    case_ids: list[str] | None = None,
) -> list[str]:
    """`check`, raising ValueError (exit 2) on a refusal; returns the warnings."""
    refuse, warn = check(baseline_path, baseline_cases, here, case_ids)
    if refuse:
        raise ValueError(f"--baseline {baseline_path}: not comparable with this run: "
                         + "; ".join(refuse))  # fmt: skip
    return warn
