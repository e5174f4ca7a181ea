"""Render a report directory (results.jsonl, possibly partial) to summary.md, report.html, plots."""

from __future__ import annotations

import html
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from blockattn.harness.summarize import markdown_tables, status_counts


def _points(records: list[dict[str, Any]], provider: str, x_of) -> dict[str, list[tuple]]:
    pts: dict[str, list[tuple]] = defaultdict(list)
    for r in records:
        p = r["providers"].get(provider)
        if not p or p["status"] != "ok":
            continue
        x = x_of(r)
        if x is None:
            continue
        for t, m in p["tensors"].items():
            y = m["ratio_to_floor"]
            pts[t].append((x, y if y is not None else math.inf))
    return pts


def make_plots(records: list[dict[str, Any]], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pdir = out / "plots"
    pdir.mkdir(parents=True, exist_ok=True)
    provs = sorted({n for r in records for n in r["providers"]})
    files = []
    axes_spec = [
        (
            "sparsity",
            "requested sparsity",
            lambda r: r["spec"]["sparsity"] if r["spec"].get("lengths") is None else None,
        ),
        ("length", "max sequence length", lambda r: r.get("max_seq_len")),
        ("tokens", "total tokens T", lambda r: r.get("T")),
    ]
    for key, label, x_of in axes_spec:
        fig, axs = plt.subplots(1, len(provs), figsize=(5 * len(provs), 3.6), squeeze=False)
        for ax, prov in zip(axs[0], provs, strict=True):
            for t, pts in sorted(_points(records, prov, x_of).items()):
                xs = [p[0] for p in pts]
                ys = [min(p[1], 1e6) for p in pts]
                ax.scatter(xs, ys, s=12, label=t, alpha=0.7)
            ax.set_yscale("log")
            ax.set_xlabel(label)
            ax.set_ylabel("max abs err / rounding floor")
            ax.set_title(prov)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        fig.tight_layout()
        f = pdir / f"err_vs_{key}.png"
        fig.savefig(f, dpi=90)
        plt.close(fig)
        files.append(f)
    # Per dtype x tensor: box of err/floor per provider.
    groups: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        for n, p in r["providers"].items():
            if p["status"] == "ok":
                for t, m in p["tensors"].items():
                    y = m["ratio_to_floor"]
                    groups[(r["spec"]["dtype"], t)][n].append(min(y, 1e6) if y else 1e6)
    if groups:
        keys = sorted(groups)
        fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(keys) * len(provs)), 4))
        pos, labels, data = [], [], []
        for i, k in enumerate(keys):
            for j, prov in enumerate(provs):
                if groups[k].get(prov):
                    pos.append(i * (len(provs) + 1) + j)
                    data.append(groups[k][prov])
                    labels.append(f"{k[0][:4]} {k[1]}\n{prov}")
        ax.boxplot(data, positions=pos)
        ax.set_xticks(pos, labels, fontsize=6, rotation=60)
        ax.set_yscale("log")
        ax.set_ylabel("max abs err / rounding floor")
        ax.set_title("error per dtype x tensor x provider")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        f = pdir / "err_per_dtype_tensor.png"
        fig.savefig(f, dpi=90)
        plt.close(fig)
        files.append(f)
    return files


def _md_to_html_table(md: str) -> str:
    """Enough Markdown-table -> HTML for our own tables (no markdown dependency)."""
    outl, in_table = [], False
    for line in md.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if all(set(c) <= {"-", ":"} for c in cells):
                continue
            tag = "th" if not in_table else "td"
            if not in_table:
                outl.append("<table>")
                in_table = True
            outl.append(
                "<tr>" + "".join(f"<{tag}>{html.escape(c)}</{tag}>" for c in cells) + "</tr>"
            )
        else:
            if in_table:
                outl.append("</table>")
                in_table = False
            if line.strip():
                outl.append(f"<p>{html.escape(line)}</p>")
    if in_table:
        outl.append("</table>")
    return "\n".join(outl)


def render(records: list[dict[str, Any]], out: Path, *, partial: bool) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    plots = make_plots(records, out) if records else []
    failing = [r for r in records if r.get("verdict") and not r["verdict"]["passed"]]
    head = [
        "# blockattn verification report"
        + (" (partial: run still going or died)" if partial else ""),
        "",
        f"{len(records)} cases; "
        + ", ".join(
            f"{n}: " + "/".join(f"{k} {v}" for k, v in sorted(c.items()))
            for n, c in sorted(status_counts(records).items())
        ),
    ]
    if failing:
        head += ["", "## Failing cases", ""]
        for r in failing[:50]:
            head.append(f"- `{r['case_id']}` {r['verdict']['failures'][0]}")
            if r["verdict"].get("replay"):
                head.append(f"  - replay: `{r['verdict']['replay']}`")
    md = (
        "\n".join(head)
        + "\n\n"
        + markdown_tables(records)
        + "\n\n"
        + "\n".join(f"![{p.stem}](plots/{p.name})" for p in plots)
        + "\n"
    )
    (out / "summary.md").write_text(md)
    body = _md_to_html_table(md.split("![")[0])
    imgs = "\n".join(f'<h3>{html.escape(p.stem)}</h3><img src="plots/{p.name}">' for p in plots)
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>blockattn report</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 6px;font-size:12px}</style></head><body>"
        f"{body}\n{imgs}</body></html>\n"
    )
    (out / "report.html").write_text(page)
    return {
        "summary": out / "summary.md",
        "html": out / "report.html",
        **{p.stem: p for p in plots},
    }
