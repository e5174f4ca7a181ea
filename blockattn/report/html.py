"""Render a report directory (results.jsonl, possibly partial; report.json meta) to report.html,
report.md and plots."""

from __future__ import annotations

import hashlib
import html
import re
from pathlib import Path
from typing import Any

from blockattn.report.charts import _uses_bound, make_plots
from blockattn.report.elementwise import _Q_CSS, _f, elementwise_sections
from blockattn.report.summarize import (
    _pct,
    _tensor_rows,
    bound_rows,
    dtype_short,
    elementwise_markdown,
    errored,
    markdown_tables,
    status_counts,
    verdict_counts,
)

# ---------------------------------------------------------------------------------------------
# The page: built from the records and report.json's meta / selfcheck (never from Markdown).

NOT_RECORDED = "not recorded"
_GATE_HEAD = re.compile(r"^##\s*blockattn gate:.*?\b(PASS|FAIL)\b", re.M)
_GATE_TOL = re.compile(r"^Tolerances `([^`]+)`", re.M)
_GATE_UNRELEASED = re.compile(r"^> ⚠️ UNRELEASED tolerance file", re.M)


def read_gate_md(path: Path) -> dict[str, Any] | None:
    """The decision ("PASS"/"FAIL") and tolerance path of a gate.md, None where there is none.
    The gate's decision also covers what no single record carries (regressions vs a baseline,
    the judge's self-test), so the banner honours it."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return None
    head, tol = _GATE_HEAD.search(text), _GATE_TOL.search(text)
    return {
        "decision": head.group(1) if head else None,
        "tolerances": tol.group(1) if tol else None,
        "unreleased": _GATE_UNRELEASED.search(text) is not None,
    }


def unreleased_note(meta: dict[str, Any] | None, gate: dict[str, Any] | None) -> str | None:
    """The UNRELEASED line where the verdicts come from a tolerance file that is not a released
    one (report.json's `tolerances_released: false`, or a gate.md that says so)."""
    if (meta or {}).get("tolerances_released") is False or (gate or {}).get("unreleased"):
        sha = (meta or {}).get("tolerances_sha256")
        return ("UNRELEASED tolerance file" + (f" (sha256 {sha})" if sha else "")
                + ": its verdicts are vouched for by nobody but whoever wrote it")  # fmt: skip
    return None


def banner(
    records: list[dict[str, Any]],
    selfcheck: list[dict[str, Any]] | None = None,
    gate: dict[str, Any] | None = None,
    contract: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """{"word": PASS | FAIL | NOT JUDGED, "counts": verdict_counts, "reasons": [...]}.

    PASS needs at least one judged case and nothing failed, errored, or failed in the oracle
    self-check or the gate's own decision; no verdict at all is NOT JUDGED, never PASS."""
    c = verdict_counts(records)
    reasons = []
    if c["failed"]:
        reasons.append(f"{c['failed']} of {c['judged']} judged case(s) failed")
    if c["errored"]:
        reasons.append(f"{c['errored']} case(s) errored (oracle or provider under test)")
    bad = [ch for ch in selfcheck or [] if not ch.get("passed", True)]
    if bad:
        reasons.append(f"oracle self-check: {len(bad)} of {len(selfcheck or [])} check(s) failed")
    if gate and gate.get("decision") == "FAIL":
        reasons.append("the gate's decision (gate.md) is FAIL")
    broken = [c for c in contract or [] if c.get("status") == "FAIL"]
    if broken:
        reasons.append(f"contract battery: {len(broken)} of {len(contract or [])} check(s) "
                       f"violated ({', '.join(sorted({c['property'] for c in broken}))})")
    word = "FAIL" if reasons else "NOT JUDGED" if not c["judged"] else "PASS"
    if word == "NOT JUDGED":
        reasons.append("no record carries a verdict (run without a tolerance file)")
    elif word == "PASS" and c["not_judged"]:
        reasons.append(f"{c['not_judged']} case(s) carry no verdict")
    return {"word": word, "counts": c, "reasons": reasons}


def _counts_line(c: dict[str, int]) -> str:
    line = (
        f"{c['judged']} cases judged: {c['passed']} passed, {c['failed']} failed, "
        f"{c['skipped']} skipped (unsupported), {c['errored']} errored"
    )
    return line + (f"; {c['not_judged']} of {c['cases']} not judged" if c["not_judged"] else "")


def _status_line(records: list[dict[str, Any]]) -> str:
    return "; ".join(
        f"{n}: " + ", ".join(f"{k} {v}" for k, v in sorted(cnt.items()))
        for n, cnt in sorted(status_counts(records).items())
    )


def _sha_of(path: str) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def provenance(
    records: list[dict[str, Any]], meta: dict[str, Any] | None, gate: dict[str, Any] | None
) -> list[tuple[str, str]]:
    """(label, value) rows: what ran, where, judged by which tolerance file (path, version,
    sha256 as recorded, and whether the file at that path still has that sha256)."""
    m = meta or {}

    def rec_set(key: str) -> str:
        vals = sorted({str(r.get(key)) for r in records if r.get(key) is not None})
        return ", ".join(vals) if vals else NOT_RECORDED

    tols = sorted(
        {(str(t.get("version")), str(t.get("sha256")))
         for r in records if isinstance(t := r.get("tolerances"), dict)}
    )  # fmt: skip
    path = m.get("tolerances") or (gate or {}).get("tolerances")
    rows = [
        ("command", str(m["command"]) if m.get("command") else NOT_RECORDED),
        ("commit", str(m.get("commit") or NOT_RECORDED)),
        ("device", str(m.get("device") or rec_set("device"))),
        (
            "GPU",
            str(m.get("gpu") or NOT_RECORDED)
            + (f" ({m['arch']})" if m.get("arch") not in (None, "", m.get("device")) else ""),
        ),
        ("under test / baseline",
         f"{m.get('under_test') or rec_set('under_test')} / "
         f"{m.get('baseline') or rec_set('baseline')}"),
        ("tolerance file", str(path) if path else ("none" if meta and not tols else NOT_RECORDED)),
    ]  # fmt: skip
    for ver, sha in tols:
        rows.append((f"tolerances v{ver} sha256", sha))
    if path and tols:
        now = _sha_of(str(path))
        rows.append(
            ("tolerance file check",
             "not readable from here" if now is None
             else "matches the recorded sha256" if now in {sha for _, sha in tols}
             else f"DIFFERS: the file now has sha256 {now}")
        )  # fmt: skip
    for key, label in (("profile", "profile"), ("providers", "providers"),
                       ("finished", "finished")):  # fmt: skip
        if m.get(key):
            v = m[key]
            rows.append((label, ", ".join(map(str, v)) if isinstance(v, list) else str(v)))
    return rows


def _case_label(r: dict[str, Any]) -> str:
    s = r.get("spec", {})
    shape = (
        f"lengths {list(s['lengths'])}" if s.get("lengths") is not None
        else f"B={s.get('B')} max_len={s.get('max_len')} sparsity={s.get('sparsity')}"
    )  # fmt: skip
    return f"{s.get('variant')} {dtype_short(s.get('dtype'))} H={s.get('H')} D={s.get('D')} {shape}"


def failing_cases(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records whose verdict failed (errored ones first), or that errored without a verdict."""
    bad = [
        r for r in records
        if (isinstance(r.get("verdict"), dict) and not r["verdict"].get("passed", True))
        or errored(r)
    ]  # fmt: skip
    return sorted(bad, key=lambda r: (not errored(r), str(r.get("case_id"))))


def _why(r: dict[str, Any]) -> list[str]:
    v = r.get("verdict") or {}
    if v.get("failures"):
        return list(v["failures"])
    if r.get("oracle_error"):
        return [f"oracle failed: {r['oracle_error']}"]
    p = r.get("providers", {}).get(r.get("under_test")) or {}
    return [f"{r.get('under_test')}: {p.get('status')}: {p.get('reason')}"]


def _esc(x: Any) -> str:
    return html.escape(str(x))


def _table(
    headers: list[str], rows: list[list[str]], classes: list[str] | None = None, cls: str = ""
) -> str:
    """An HTML table of already-escaped cells, in a div that scrolls sideways rather than
    overflowing the page."""
    head = "<tr>" + "".join(f"<th>{h}</th>" for h in headers) + "</tr>"
    body = "\n".join(
        f"<tr{f' class={c!r}' if c else ''}>" + "".join(f"<td>{x}</td>" for x in row) + "</tr>"
        for row, c in zip(rows, classes or [""] * len(rows), strict=True)
    )
    return f"<div class='scroll'><table class='{cls}'>{head}\n{body}</table></div>"


_BOUND_HEADERS = [
    "provider", "tensor", "case set", "cases", "bound (accuracy model)", "violations",
    "max err / bound", "headroom", "% &le; 0.5 ulp", "% &le; 1 ulp", "p99.99 ulp", "max ulp",
    "max ulp, not tiny", "max err / floor", "NaN/Inf",
]  # fmt: skip


def _bound_cells(row: dict[str, Any]) -> list[str]:
    model = ", ".join(row["bound_models"]) or "none"
    if row["n_bounded"] and row["n_bounded"] < row["n"]:
        model += f" ({row['n_bounded']}/{row['n']} cases)"
    return [
        _esc(row["provider"]), f"<b>{_esc(row['tensor'])}</b>",
        _esc(f"{row['variant']} {dtype_short(row['dtype'])}"), str(row["n"]), _esc(model),
        _esc(row["violations_text"]),
        _esc(_f(row["max_bound_ratio"]) if row["n_bounded"] else "-"),
        f"<b>{_esc(row['headroom'])}</b>",
        _esc(_pct(row["pct_correctly_rounded"])), _esc(_pct(row["pct_faithful"])),
        _esc(_f(row["p99_99_ulp"])), _esc(_f(row["max_ulp"])),
        _esc(_f(row.get("max_ulp_not_tiny"))),
        _esc(_f(row["max_ratio_to_floor"])), str(row["nonfinite_bad"]),
    ]  # fmt: skip


def _bound_section_html(rows: list[dict[str, Any]]) -> str:
    shown = [r for r in rows if r["failing"] or r["under_test"]]
    folded = [r for r in rows if not (r["failing"] or r["under_test"])]
    n_fail = sum(r["failing"] for r in rows)
    out = [
        f"<h2 id='bounds'>Accuracy per provider x tensor: {n_fail} of {len(rows)} row(s) fail</h2>",
        "<p class='note'>Failing rows first (red: an element beyond its bound, or NaN/Inf where "
        "the oracle is finite). <b>max err / bound</b> is the worst element's error as a share "
        "of what its accuracy model allows, measured on the pre-store error the stored value "
        "implies "
        "(e &minus; ulp/2; &gt; 1 violates); <b>headroom</b> = min over elements of bound / error: "
        "the factor by which the worst element's stored error could grow before it violates. ulp "
        "columns: error in ulps of the exact value; p99.99 and max are the worst case's, and "
        "reach 1e12 where the exact value is near 0 (a tiny ulp) while the element is within its "
        "bound; <b>not tiny</b> repeats max over the elements whose exact value is at least "
        "2^-10 of the tensor's largest.</p>",
    ]
    if shown:
        cls = ["fail" if r["failing"] else "pass" for r in shown]
        out.append(_table(_BOUND_HEADERS, [_bound_cells(r) for r in shown], cls, "bounds"))
    if folded:
        names = ", ".join(sorted({str(r["provider"]) for r in folded}))
        out.append(
            f"<details><summary>{len(folded)} more row(s) within their bounds ({_esc(names)})"
            "</summary>"
            + _table(_BOUND_HEADERS, [_bound_cells(r) for r in folded], None, "bounds")
            + "</details>"
        )
    return "\n".join(out)


def _contract_html(contract: list[dict[str, Any]] | None, have_meta: bool) -> str:
    """The contract battery of the provider under test: one row per check, violations first."""
    head = "<h2 id='contract'>Contract battery</h2>"
    if contract is None:
        return head + ("<p>not run (--no-contract, no tolerance file, or an older run)</p>"
                       if have_meta else "")  # fmt: skip
    order = {"FAIL": 0, "unsupported": 1, "measured": 2, "pass": 3}
    rows = sorted(contract, key=lambda c: order.get(c.get("status"), 4))
    n_bad = sum(c.get("status") == "FAIL" for c in contract)
    cls = ["fail" if c.get("status") == "FAIL" else "pass" for c in rows]
    cells = [[_esc(c.get(k) or "") for k in ("property", "probe", "status", "detail")]
             for c in rows]  # fmt: skip
    return (head + f"<p>{len(contract) - n_bad} of {len(contract)} check(s) hold; "
            f"{n_bad} violated. <code>blockattn contract</code> re-runs it.</p>"
            + _table(["property", "probe", "status", "detail"], cells, cls, "contract"))


def _selfcheck_html(selfcheck: list[dict[str, Any]] | None, have_meta: bool) -> str:
    head = "<h2 id='selfcheck'>Oracle self-check</h2>"
    if selfcheck is None:
        why = "not run (--no-selfcheck, or no oracles)" if have_meta else (
            "not recorded (no report.json)")  # fmt: skip
        return head + f"<p>{why}</p>"
    rows = [
        [_esc(c.get("name")), _esc(_f(c.get("value"))), _esc(_f(c.get("bound"))),
         "<b>pass</b>" if c.get("passed") else "<b>FAIL</b>", _esc(c.get("detail") or "")]
        for c in selfcheck
    ]  # fmt: skip
    cls = ["pass" if c.get("passed") else "fail" for c in selfcheck]
    n_bad = cls.count("fail")
    return (
        head
        + f"<p>{len(selfcheck) - n_bad} of {len(selfcheck)} check(s) pass.</p>"
        + _table(["check", "value", "bound", "result", "detail"], rows, cls, "selfcheck")
    )


def _failing_html(records: list[dict[str, Any]], max_list: int = 50) -> str:
    bad = failing_cases(records)
    if not bad:
        return ""
    rows = []
    for r in bad[:max_list]:
        why = _why(r)
        items = "".join(f"<li>{_esc(w)}</li>" for w in why[:2])
        more = f"<li>... and {len(why) - 2} more</li>" if len(why) > 2 else ""
        replay = (r.get("verdict") or {}).get("replay")
        rows.append([
            f"<code>{_esc(r.get('case_id'))}</code><br>{_esc(r.get('spec', {}).get('name') or '')}",
            _esc(_case_label(r)),
            f"<ul>{items}{more}</ul>",
            f"<code class='cmd'>{_esc(replay)}</code>" if replay else "-",
        ])  # fmt: skip
    tail = f"<p>... and {len(bad) - max_list} more</p>" if len(bad) > max_list else ""
    return (
        f"<h2 id='failing'>Failing cases: {len(bad)}</h2>"
        + _table(["case", "what", "why", "replay"], rows, ["fail"] * len(rows), "cases")
        + tail
    )


def _warnings_html(records: list[dict[str, Any]], max_list: int = 50) -> str:
    warns = [(r.get("case_id"), w) for r in records for w in (r.get("verdict") or {}).get(
        "warnings") or []]  # fmt: skip
    if not warns:
        return ""
    items = "".join(f"<li><code>{_esc(c)}</code>: {_esc(w)}</li>" for c, w in warns[:max_list])
    return f"<details><summary>{len(warns)} warning(s)</summary><ul>{items}</ul></details>"


_ERR_HEADERS = [
    "provider", "variant", "dtype", "tensor", "cases", "max err / floor", "p50 err / floor",
    "max abs err", "min SNR dB", "max err / baseline", "NaN/Inf",
]  # fmt: skip


def _error_table_html(rows: list[dict[str, Any]]) -> str:
    cells = [
        [_esc(r["provider"]), _esc(r["variant"]), _esc(r["dtype"]), _esc(r["tensor"]),
         str(r["n"]), _esc(_f(r["max_ratio_to_floor"])), _esc(_f(r["p50_ratio_to_floor"])),
         _esc(_f(r["max_abs"])), _esc(_f(r["min_snr_db"])), _esc(_f(r["max_vs_baseline"])),
         str(r["nonfinite_bad"])]
        for r in sorted(rows, key=lambda r: (str(r["provider"]), str(r["variant"]),
                                             str(r["dtype"]), str(r["tensor"])))
    ]  # fmt: skip
    return (
        "<details><summary>Whole-tensor error table (max |err| against the FP64 oracle, in "
        "rounding floors: 1 is as good as the dtype allows)</summary>"
        + _table(_ERR_HEADERS, cells, cls="errors")
        + "</details>"
    )


def _md_escape(x: Any) -> str:
    return str(x).replace("|", "\\|")


def report_markdown(
    records: list[dict[str, Any]],
    b: dict[str, Any],
    prov: list[tuple[str, str]],
    rows: list[dict[str, Any]],
    selfcheck: list[dict[str, Any]] | None,
    partial: bool,
    images: list[Path],
) -> str:
    """The same report as Markdown (report.md): for CI comments and terminals."""
    c = b["counts"]
    md = [
        f"# blockattn verification report: {b['word']}"
        + (" (UNRELEASED tolerances)" if b.get("unreleased") else "")
        + (" (partial: run still going or died)" if partial else ""),
        "",
        f"**{_counts_line(c)}**",
        *[f"- {x}" for x in b["reasons"]],
        "",
        f"Provider run status (did it run; not the verdict): {_status_line(records)}",
        "",
        "## Provenance",
        "",
        "| | |",
        "|---|---|",
        *[f"| {k} | {_md_escape(v)} |" for k, v in prov],
    ]
    bad = failing_cases(records)
    if bad:
        md += ["", f"## Failing cases: {len(bad)}", ""]
        for r in bad[:50]:
            md.append(f"- `{r.get('case_id')}` {_case_label(r)}: " + "; ".join(_why(r)[:3]))
            replay = (r.get("verdict") or {}).get("replay")
            if replay:
                md.append(f"  - replay: `{replay}`")
    n_fail = sum(r["failing"] for r in rows)
    md += [
        "",
        f"## Accuracy per provider x tensor: {n_fail} of {len(rows)} row(s) fail",
        "",
        "| provider | tensor | case set | cases | bound | violations | max err/bound | headroom "
        "| % <= 0.5 ulp | % <= 1 ulp | p99.99 ulp | max ulp | max ulp, not tiny | max err/floor "
        "| NaN/Inf | result |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        model = ", ".join(r["bound_models"]) or "none"
        md.append(
            f"| {r['provider']} | {r['tensor']} | {r['variant']} {dtype_short(r['dtype'])} | "
            f"{r['n']} | {model} | {r['violations_text']} | "
            f"{_f(r['max_bound_ratio']) if r['n_bounded'] else '-'} | {r['headroom']} | "
            f"{_pct(r['pct_correctly_rounded'])} | {_pct(r['pct_faithful'])} | "
            f"{_f(r['p99_99_ulp'])} | {_f(r['max_ulp'])} | {_f(r.get('max_ulp_not_tiny'))} | "
            f"{_f(r['max_ratio_to_floor'])} | "
            f"{r['nonfinite_bad']} | {'FAIL' if r['failing'] else 'ok'} |"
        )
    md += ["", "## Oracle self-check", ""]
    if selfcheck is None:
        md.append(NOT_RECORDED)
    else:
        md += ["| check | value | bound | passed | detail |", "|---|---|---|---|---|"]
        md += [
            f"| {_md_escape(ch.get('name'))} | {_f(ch.get('value'))} | {_f(ch.get('bound'))} | "
            f"{ch.get('passed')} | {_md_escape(ch.get('detail') or '')} |"
            for ch in selfcheck
        ]
    ew = elementwise_markdown(records)
    if ew:
        md += ["", ew]
    md += ["", "## Whole-tensor error table", "", markdown_tables(records)]
    md += ["", *(f"![{p.stem}](plots/{p.name})" for p in images)]
    return "\n".join(md) + "\n"


_CSS = (
    "body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1040px;padding:0 1em;"
    "color:#111}"
    "h2{margin-top:1.6em;border-bottom:1px solid #ddd}"
    "div.scroll{overflow-x:auto;max-width:100%}"
    "table{border-collapse:collapse;margin:0.5em 0}"
    "td,th{border:1px solid #ccc;padding:2px 6px;font-size:12px;vertical-align:top}"
    "th{background:#f3f3f3}"
    "tr.fail td{background:#fde0dc}tr.pass td{background:#fff}"
    "table.bounds td:first-child{white-space:nowrap}"
    "table.cases ul{margin:0;padding-left:1.1em}table.cases td{max-width:460px;"
    "overflow-wrap:anywhere}"
    "code.cmd{font-size:11px;overflow-wrap:anywhere}"
    "table.prov th{text-align:left;white-space:nowrap}table.prov td{overflow-wrap:anywhere}"
    "div.banner{padding:0.7em 1em;border-radius:6px;margin:0.5em 0 1em;color:#fff}"
    "div.banner h1{margin:0;font-size:28px}div.banner p{margin:0.3em 0 0;font-size:15px}"
    "div.banner ul{margin:0.3em 0 0;font-size:14px}div.banner p.sub{font-size:13px;opacity:0.9}"
    "div.FAIL{background:#b2182b}div.PASS{background:#1a7f37}div.NOTJUDGED{background:#8a6d00}"
    "p.note{font-size:12px;color:#444}p.status{font-size:13px;color:#333}"
    "img{max-width:100%;height:auto}"
    "table.hm td,table.hm th{width:6px;height:6px;padding:0;border:0;font-size:8px}"
    "table.strip td{min-width:14px;text-align:center;font-size:10px}"
    "td.hb span{display:inline-block;height:9px;background:#6a8fb5;margin-right:4px}"
    "tr.edge td{border-top:2px solid #000}p.key span{padding:0 6px;margin:0 1px}" + _Q_CSS
)


def render(
    records: list[dict[str, Any]],
    out: Path,
    *,
    partial: bool,
    meta: dict[str, Any] | None = None,
    selfcheck: list[dict[str, Any]] | None = None,
    gate: dict[str, Any] | None = None,
    contract: list[dict[str, Any]] | None = None,
    incomplete: list[str] | None = None,
) -> dict[str, Path]:
    """Write report.html, report.md and plots/*.png for `records` into `out`.

    meta / selfcheck: report.json's (None where the directory has none); gate: read_gate_md's.
    incomplete: why the directory is not a complete run (`session.completeness`), said at the
    top. Never writes summary.md or gate.md: those are the run's and the gate's own records.
    """
    out.mkdir(parents=True, exist_ok=True)
    plots = make_plots(records, out) if records else []
    ew_html, ew_pngs = elementwise_sections(records, out)
    b = banner(records, selfcheck, gate, contract)
    if incomplete:
        partial = True
        b["reasons"] = [f"INCOMPLETE: {x}" for x in incomplete] + b["reasons"]
    unreleased = unreleased_note(meta, gate)
    if unreleased:
        b["reasons"] = [unreleased, *b["reasons"]]
        b["unreleased"] = True
    prov = provenance(records, meta, gate)
    rows = bound_rows(records, under_test=(meta or {}).get("under_test"))
    images = [*ew_pngs.values(), *plots]
    md = report_markdown(records, b, prov, rows, selfcheck, partial, images)
    if contract is not None:
        bad = [c for c in contract if c.get("status") == "FAIL"]
        md += (f"\n## Contract battery\n\n{len(contract) - len(bad)} of {len(contract)} "
               "check(s) hold.\n" + "".join(f"- contract violated: {c['property']} "
                                            f"({c['probe']}): {c['detail']}\n" for c in bad))
    (out / "report.md").write_text(md)

    word = b["word"]
    part = (
        "<p><b>Partial</b>: no report.json or gate.md yet, so the run is still going or died; "
        "the cases below are those finished.</p>" if partial else ""
    )  # fmt: skip
    reasons = "".join(f"<li>{_esc(x)}</li>" for x in b["reasons"])
    ut = (meta or {}).get("under_test") or ", ".join(
        sorted({str(r["under_test"]) for r in records if r.get("under_test")})
    )
    tv = [v for k, v in prov if k.startswith("tolerances v")]
    judged_by = (f"under test: {ut}" if ut else "") + (
        f" · tolerances {', '.join(k.split()[1] for k, _ in prov if k.startswith('tolerances v'))}"
        f" (sha256 {', '.join(x[:12] for x in tv)})"
        if tv
        else ""
    )
    head = (
        f"<div class='banner {word.replace(' ', '')}' id='banner'><h1>{word}"
        + (" (UNRELEASED tolerances)" if b.get("unreleased") else "") + "</h1>"
        f"<p>{_esc(_counts_line(b['counts']))}</p>"
        + (f"<p class='sub'>{_esc(judged_by)}</p>" if judged_by else "")
        + (f"<ul>{reasons}</ul>" if reasons else "")
        + f"{part}</div>"
        f"<p class='status'>Provider run status (did it run; not the verdict): "
        f"{_esc(_status_line(records)) or 'no cases'}</p>"
    )
    code = ("command", "tolerance file")  # and the sha256 rows: monospace, copyable
    prov_html = (
        "<h2 id='provenance'>Provenance</h2><div class='scroll'><table class='prov'>"
        + "".join(
            f"<tr><th>{_esc(k)}</th><td>"
            + (f"<code>{_esc(v)}</code>" if k in code or "sha256" in k else _esc(v))
            + "</td></tr>"
            for k, v in prov
        )
        + "</table></div>"
    )
    imgs = "\n".join(f'<img src="plots/{p.name}" alt="{_esc(p.stem)}">' for p in plots)
    if imgs:
        imgs = (
            "<h2 id='error-vs-shape'>Error per case</h2><p class='note'>"
            + ("max err / bound per case and tensor (dashed red line: the bound)"
               if _uses_bound(records)
               else "max |err| / rounding floor per case (dashed line: the floor)")
            + "</p>\n" + imgs
        )  # fmt: skip
    body = "\n".join(
        x for x in (
            head, _failing_html(records), _contract_html(contract, meta is not None),
            _bound_section_html(rows), prov_html,
            _selfcheck_html(selfcheck, meta is not None), _warnings_html(records), ew_html, imgs,
            "<h2 id='tables'>Tables</h2>" + _error_table_html(_tensor_rows(records)),
        ) if x
    )  # fmt: skip
    page = (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>blockattn report: {word}{' UNRELEASED' if b.get('unreleased') else ''}"
        f"</title><style>{_CSS}</style></head><body>\n"
        f"{body}\n</body></html>\n"
    )
    (out / "report.html").write_text(page)
    return {
        "markdown": out / "report.md",
        "html": out / "report.html",
        **{p.stem: p for p in plots},
        **ew_pngs,
    }
