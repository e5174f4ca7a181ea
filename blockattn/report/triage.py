"""Which failure to read first (issue 43, item 5): a kernel that is numerically wrong on the
clean cases fails every layout probe of the contract battery too, and ten "contract violated:
layout (...)" lines would send its author after a layout bug it does not have.

The judged cases are the clean ones (contiguous inputs): when they fail, that is said first.
A layout probe's violation is a layout bug only where the clean layout ("padded": views of a
larger buffer, the layout closest to the cases) passed; where the clean layout fails too, the
layout lines fold into one that points at the numbers.
"""

from __future__ import annotations

from typing import Any

CLEAN_LAYOUT = "layout-padded"


def clean_cases_line(verdicts: list[Any]) -> str | None:
    """The first reason when the kernel fails clean (judged) cases, else None."""
    judged = [v for v in verdicts if not v.skipped]
    failed = [v for v in judged if not v.passed]
    if not failed:
        return None
    return (f"the kernel fails the clean cases: {len(failed)} of {len(judged)} judged case(s) "
            "are numerically wrong (see Failures); fix these first, the contract lines below "
            "may be the same bug")  # fmt: skip


def contract_lines(contract: list[dict[str, Any]] | None, bad: list[str]) -> list[str]:
    """`bad` (the battery's failure lines, `contract violated: PROP (PROBE): ...`) with the
    layout violations folded into one line where the clean layout fails as well."""
    checks = contract or []
    clean = [c for c in checks if c.get("property") == "layout" and c.get("probe") == CLEAN_LAYOUT]
    if not clean or clean[0].get("status") != "FAIL":
        return bad  # the clean layout passed (or was not run): a layout violation is a layout bug
    fails = [c for c in checks if c.get("status") == "FAIL"]
    layout = [c for c in fails if c.get("property") == "layout"]
    others = [f"contract violated: {c.get('property')} ({c.get('probe')}): {c.get('detail')}"
              + (f"  [replay: {c['replay']}]" if c.get("replay") else "")
              for c in fails if c.get("property") != "layout"]  # fmt: skip
    whole = [b.split("the whole battery: ", 1)[1] for b in bad if "the whole battery: " in b]
    if len(others) > 10:
        others = [*others[:10], f"... {len(others) - 10} more"
                  + (f"; the whole battery: {whole[0]}" if whole else "")]  # fmt: skip
    probes = ", ".join(str(c.get("probe")) for c in layout[:6])
    more = f" and {len(layout) - 6} more" if len(layout) > 6 else ""
    line = (f"contract: {len(layout)} layout probe(s) fail ({probes}{more}), the clean "
            f"layout ({CLEAN_LAYOUT}) among them: the kernel's numbers are wrong whatever the "
            "layout, not a layout bug: " + str(clean[0].get("detail") or "")[:300])  # fmt: skip
    return [line, *others]
