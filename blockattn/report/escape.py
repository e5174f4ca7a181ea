"""Kernel text made inert in the Markdown the suite writes (gate.md, summary.md), which CI posts
as comments: a kernel's exception message must not forge a heading, a table row or HTML."""

from __future__ import annotations

import re
from typing import Any

# ---------------------------------------------------------------------------------------------
# Text a kernel controls (exception messages, reasons, details, descriptions) is escaped where
# it enters gate.md and summary.md, which CI posts as comments: it must not start a line (a
# forged "## ✅ PASS" heading), open HTML, a link, a code span or a table cell.

_LINE_BREAKS = re.compile(r"\r\n|[\r\n\v\f\x1c-\x1e\x85\u2028\u2029]")
_MD_SPECIAL = re.compile(r"([\\`*\[\]<>|])")
_LINE_START = re.compile(r"^(\s*)([#>=+\-]|\d+[.)])")


def md_inline(text: Any) -> str:
    """`text` as inert inline Markdown: one line (each line break shown as ⏎), with backslash,
    backtick, *, [, ], <, > and | escaped, and a leading #, >, -, +, = or "1." escaped."""
    s = _LINE_BREAKS.sub(" ⏎ ", str(text))
    s = _MD_SPECIAL.sub(r"\\\1", s)
    return _LINE_START.sub(lambda m: m.group(1) + "\\" + m.group(2), s)


def safe_contract_markdown(contract: list[dict[str, Any]] | None, contract_md: str,
                           provider: str) -> str:  # fmt: skip
    """The contract battery's section with every check's detail (the kernel's own text: its
    exception messages) escaped: re-rendered from the checks' records. Lines before the
    battery's heading (the commands' own notes) are kept."""
    if not contract:
        return contract_md
    from blockattn.judge.contract import Check, markdown

    i = contract_md.find("### Contract battery for")
    prefix = contract_md[:i] if i > 0 else ""
    m = re.search(r"^- the whole battery: `([^`\n]*)`$", contract_md, re.M)
    checks = [Check(prop=str(c.get("property")), probe=str(c.get("probe")),
                    status=str(c.get("status")), detail=md_inline(c.get("detail") or ""),
                    replay=str(c.get("replay") or "")) for c in contract]  # fmt: skip
    return prefix + markdown(checks, provider, m.group(1) if m else None)
