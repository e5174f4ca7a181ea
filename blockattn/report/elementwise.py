"""Elementwise views of a report (blockattn/bounds/RECORD.md): ulp-error histograms per tensor,
and for every provider x tensor with bound violations where they sit (row in block x head dim,
head, block). Each has a PNG (matplotlib) and a plain-HTML fallback without it."""

from __future__ import annotations

import html
import math
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from blockattn.report.charts import DPI, MAX_W_IN, _provider_order, _pyplot, _ratio_text
from blockattn.report.summarize import (
    loc_summary,
    violating_cases,
    worst_where,
)

MAX_VIEWS = 24  # localisation views on one page (worst first); the Markdown lists the rest
_SLUG = re.compile(r"[^A-Za-z0-9_.-]+")


def _slug(*parts: Any) -> str:
    return _SLUG.sub("_", "_".join(str(p) for p in parts))


def _add_hist(acc: dict[str, Any] | None, h: dict[str, Any]) -> dict[str, Any]:
    """Sum histogram `h` into `acc` (created on first use); a bin layout differing from acc's
    is re-binned by bin centre, the end bins keep everything beyond."""
    lo, step, counts = float(h["log2_lo"]), float(h["log2_step"]), list(h.get("counts") or [])
    if acc is None:
        acc = {"log2_lo": lo, "log2_step": step, "counts": [0] * len(counts)}
        acc.update(exact=0, nonfinite=0, cases=0)
    n = len(acc["counts"])
    same = (lo, step, len(counts)) == (acc["log2_lo"], acc["log2_step"], n)
    for i, c in enumerate(counts):
        j = i if same else int((lo + (i + 0.5) * step - acc["log2_lo"]) // acc["log2_step"])
        if n:
            acc["counts"][min(n - 1, max(0, j))] += int(c)
    acc["exact"] += int(h.get("exact") or 0)
    acc["nonfinite"] += int(h.get("nonfinite") or 0)
    acc["cases"] += 1
    return acc


def ulp_histograms(records: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """tensor -> dtype -> provider -> histogram of log2(ulp error) summed over the cases.

    Split by dtype: ulps are dtype-relative, but an fp32 accumulation error is many fp32 ulps
    while the same kernel's bf16 output is mostly correctly rounded; pooled, one hides the other.
    """
    out: dict[str, dict[str, dict[str, Any]]] = defaultdict(lambda: defaultdict(dict))
    for r in records:
        dt = r.get("spec", {}).get("dtype", "?")
        for name, p in r.get("providers", {}).items():
            if p.get("status") != "ok":
                continue
            for t, m in (p.get("tensors") or {}).items():
                h = (m.get("ulp") or {}).get("hist")
                if h and h.get("counts") and "log2_lo" in h and "log2_step" in h:
                    # one layout per tensor x dtype: every provider is re-binned to the first
                    ref = next(iter(out[t][dt].values()), None)
                    acc = out[t][dt].get(name)
                    if acc is None and ref is not None:
                        acc = {**ref, "counts": [0] * len(ref["counts"])}
                        acc.update(exact=0, nonfinite=0, cases=0)
                    out[t][dt][name] = _add_hist(acc, h)
    return {t: dict(by_dt) for t, by_dt in sorted(out.items())}


def violation_views(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One view per provider x tensor with bound violations (under test, then worst first):
    its violating cases, and the worst of them that has a `loc` map (the one plotted)."""
    views: dict[tuple[str, str], dict[str, Any]] = {}
    for v in violating_cases(records):
        key = (v["provider"], v["tensor"])
        view = views.setdefault(key, {"provider": key[0], "tensor": key[1], "cases": []})
        view["cases"].append(v)
    for view in views.values():
        view["shown"] = next((c for c in view["cases"] if c["loc"]), view["cases"][0])
    return list(views.values())


def _ulp_label(x: float, tex: bool = False) -> str:
    """log2(ulps) -> ulps: -2 -> '1/4', 0 -> '1', 3 -> '8', -0.75 -> '0.595'."""
    if float(x).is_integer():
        if tex and abs(x) > 14:  # 2^20, not 1.04858e+06: short and exact
            return f"$2^{{{int(x)}}}$"
        return f"1/{2**-x:g}" if x < 0 else f"{2**x:g}"
    return f"{2**x:.3g}"


def _nonempty_span(hs: list[dict[str, Any]]) -> tuple[int, int] | None:
    idx = [i for h in hs for i, c in enumerate(h["counts"]) if c]
    return (min(idx), max(idx)) if idx else None


def _pct_of(part: int, h: dict[str, Any]) -> str:
    total = sum(h["counts"]) + h["exact"] + h["nonfinite"]
    return f"{100.0 * part / total:.3g}%" if total else "-"


def plot_ulp_hist(
    tensor: str, by_dtype: dict[str, dict[str, Any]], provs: list[str], pdir: Path, plt
) -> Path:
    """One PNG per tensor: a panel per dtype, the providers' histograms overlaid."""
    n = len(by_dtype)
    fig, axs = plt.subplots(n, 1, figsize=(MAX_W_IN, 0.9 + 2.6 * n), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (dt, by_p) in zip(axs[:, 0], sorted(by_dtype.items()), strict=True):
        ref = next(iter(by_p.values()))
        lo, step = ref["log2_lo"], ref["log2_step"]
        span = _nonempty_span(list(by_p.values())) or (0, 0)
        for k, prov in enumerate(p for p in provs if p in by_p):
            h, c = by_p[prov], colors[k % len(colors)]
            edges = [lo + i * step for i in range(len(h["counts"]) + 1)]
            label = f"{prov}: {h['cases']} case(s), exact {_pct_of(h['exact'], h)}" + (
                f", NON-FINITE {h['nonfinite']}" if h["nonfinite"] else ""
            )
            if k == 0:  # the provider under test filled, the others as outlines on top
                ax.stairs(h["counts"], edges, fill=True, alpha=0.3, color=c)
            ls = ("-", "--", "-.", ":")[k % 4]
            ax.stairs(h["counts"], edges, color=c, lw=1.6 if k else 1.2, ls=ls, label=label)
        ax.axvline(-1.0, color="#444", lw=1.2, label="0.5 ulp: correctly rounded")
        ax.axvline(0.0, color="#b2182b", lw=1.2, label="1 ulp: faithful")
        x0 = min(lo + span[0] * step, -2.0) - step
        x1 = max(lo + (span[1] + 1) * step, 1.0) + step
        ax.set_xlim(x0, x1)
        # <= ~14 ticks whatever the span (a NaN-like error reaches 2^40 ulps); 1 ulp always one
        every = max(1, math.ceil((x1 - x0) / 14))
        ticks = [t for t in range(math.ceil(x0), math.floor(x1) + 1) if t % every == 0]
        ax.set_xticks(ticks, [_ulp_label(t, tex=True) for t in ticks], fontsize=8)
        if any(c for h in by_p.values() for c in h["counts"]):
            ax.set_yscale("log")
            ax.set_ylim(bottom=0.5)
        ax.set_ylabel("elements")
        ax.set_title(f"{tensor} · {dt}: |error| in ulps of the exact value", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    axs[-1, 0].set_xlabel(
        "error (ulps, log2 bins; the first/last bin also hold everything below/above)"
    )
    fig.tight_layout(rect=(0.0, 0.0, 0.78, 1.0))  # the right 22 % holds the legends
    f = pdir / f"ulp_hist_{_slug(tensor)}.png"
    fig.savefig(f, dpi=DPI)
    plt.close(fig)
    return f


def _finite_or(x: Any, cap: float) -> float:
    return cap if x is None or not math.isfinite(float(x)) else float(x)


def _log2_ratio(x: Any, lo: float = -6.0, hi: float = 8.0) -> float:
    """log2(e / bound) clipped to [lo, hi]; None (inf) -> hi, 0 -> lo."""
    if x is None or float(x) > 2.0**hi:
        return hi
    return max(lo, math.log2(float(x))) if float(x) > 0 else lo


# Shared by the PNG heatmap and the HTML fallback: white far inside the bound, pale blue at it,
# red beyond it (darkest at 16x). Anchors at log2(e/bound) = -6, 0, 0+, 4.
_CMAP_ANCHORS = ((255, 255, 255), (146, 197, 222), (244, 165, 130), (103, 0, 13))


def plot_localisation(view: dict[str, Any], pdir: Path, plt) -> Path:
    """Heatmap of max e/bound over (row in block, head dim), bars per head and per block, of
    the view's worst case: a row band = masking, one head = stride/head, odd/even dims =
    rotary pairs."""
    from matplotlib.colors import LinearSegmentedColormap, TwoSlopeNorm
    from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter

    v = view["shown"]
    loc = v["loc"] or {}
    fig = plt.figure(figsize=(10.5, 5.0))
    fig.subplots_adjust(left=0.07, right=0.98, top=0.86, bottom=0.1)
    gs = fig.add_gridspec(2, 2, width_ratios=(1.2, 1.0), hspace=0.6, wspace=0.4)
    ax_h = fig.add_subplot(gs[:, 0])
    rd = loc.get("row_dim") or []
    if rd and rd[0]:
        z = [[_log2_ratio(x) for x in row] for row in rd]
        zmax = max(1.0, math.ceil(max(max(row) for row in z)))
        a = [tuple(c / 255 for c in rgb) for rgb in _CMAP_ANCHORS]
        cmap = LinearSegmentedColormap.from_list(
            "err_over_bound", [(0.0, a[0]), (0.5, a[1]), (0.5001, a[2]), (1.0, a[3])]
        )
        im = ax_h.imshow(
            z,
            aspect="auto",
            interpolation="nearest",
            cmap=cmap,
            norm=TwoSlopeNorm(vmin=-6.0, vcenter=0.0, vmax=zmax),
        )
        ticks = [t for t in range(-6, int(zmax) + 1) if t % 2 == 0 or t == 1]
        cb = fig.colorbar(im, ax=ax_h, fraction=0.06, pad=0.02, ticks=ticks)
        cb.ax.set_yticklabels([_ratio_text(t) for t in ticks], fontsize=7)
        cb.set_label("max err / bound (red: violates)", fontsize=8)
        ax_h.set_xlabel("head dim")
        ax_h.set_ylabel("row in block")
    else:
        ax_h.text(0.5, 0.5, "no row x dim map", ha="center", va="center")
        ax_h.set_axis_off()
    ax_h.set_title("by (row in block, head dim)", fontsize=9)

    def bars(ax, vals: list[Any], k: int, xlabel: str, title: str) -> None:
        finite = [float(x) for x in vals if x is not None and math.isfinite(float(x)) and x > 0]
        cap = max([*finite, 2.0]) * 4
        ys = [max(_finite_or(x, cap), min([*finite, 1.0]) / 4) for x in vals]
        xs = [i * k for i in range(len(vals))]
        cols = ["#b2182b" if _finite_or(x, cap) > 1.0 else "#6a8fb5" for x in vals]
        if len(vals) <= 64:
            ax.bar(xs, ys, width=0.8 * k, color=cols)
        else:
            ax.plot(xs, ys, color="#555", lw=0.8)
            ax.scatter(xs, ys, c=cols, s=6, zorder=3)
        ax.axhline(1.0, color="#b2182b", ls="--", lw=1, label="bound")
        ax.set_yscale("log")
        e0, e1 = math.floor(math.log2(min([*ys, 1.0]))), math.ceil(math.log2(max([*ys, 1.0])))
        step = max(1, math.ceil((e1 - e0) / 6))
        ax.set_yticks([2.0**e for e in range(e0, e1 + 1, step)])
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _pos: _ratio_text(math.log2(y))))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.xaxis.set_major_locator(MaxNLocator(nbins=12, integer=True))
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel("max err / bound", fontsize=8)
        ax.set_title(title, fontsize=9)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")

    for pos, key, xlabel, title in (
        (gs[0, 1], "by_head", "head", "by head"),
        (gs[1, 1], "by_block", "block (all sequences' blocks in order)", "by block"),
    ):
        ax = fig.add_subplot(pos)
        vals = loc.get(key) or []
        k = max(1, int(loc.get("block_bucket") or 1)) if key == "by_block" else 1
        if len(vals) == 1:  # one bar says nothing a number does not: say it plainly
            what = "one head" if key == "by_head" else "one block"
            ax.text(0.5, 0.5, f"{what}: max err / bound {_f(vals[0])}", ha="center",
                    va="center", fontsize=9)  # fmt: skip
            ax.set_title(title, fontsize=9)
            ax.set_axis_off()
        elif vals:
            bars(ax, vals, k, xlabel + (f" (buckets of {k})" if k > 1 else ""), title)
        else:
            ax.text(0.5, 0.5, f"no {key} map", ha="center", va="center")
            ax.set_axis_off()
    fig.suptitle(
        f"{v['provider']} · {v['tensor']} · case {v['case_id']} ({v['variant']} {v['dtype']})\n"
        f"{v['violations']} violations, max err/bound {_f(v['max_ratio'])}; "
        f"where: {loc_summary(v['loc'])}",
        fontsize=9,
    )
    f = pdir / f"loc_{_slug(v['provider'], v['tensor'])}.png"
    fig.savefig(f, dpi=DPI)
    plt.close(fig)
    return f


def _f(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return "inf" if math.isinf(x) else f"{x:.3g}"
    return str(x)


def _ratio_colour(x: Any) -> str:
    """Cell colour of e/bound: white (far inside) -> pale blue (at the bound) -> dark red (16x
    over and beyond)."""
    t = _log2_ratio(x)
    w, lo, hi, dark = _CMAP_ANCHORS
    f, a, b = ((t + 6.0) / 6.0, w, lo) if t <= 0.0 else (min(1.0, t / 4.0), hi, dark)
    return "#" + "".join(f"{round(p + (q - p) * f):02x}" for p, q in zip(a, b, strict=True))


_COLOUR_KEY = (
    "<p class='key'>cell colour = max err / bound: "
    + "".join(
        f"<span style='background:{_ratio_colour(x)}'>{lbl}</span>"
        for x, lbl in ((1 / 64, "1/64"), (1 / 8, "1/8"), (1.0, "1"), (2.0, "2"), (16.0, "16+"))
    )
    + " (red: violates)</p>"
)


def _hist_html(by_dtype: dict[str, dict[str, Any]], provs: list[str]) -> str:
    """Fallback histogram: one table per dtype, a row per bin, a count + log-length bar per
    provider; the 0.5 and 1 ulp edges are marked."""
    parts = []
    for dt, by_p in sorted(by_dtype.items()):
        ps = [p for p in provs if p in by_p]
        ref = by_p[ps[0]]
        lo, step, nb = ref["log2_lo"], ref["log2_step"], len(ref["counts"])
        span = _nonempty_span([by_p[p] for p in ps])
        top = max([1, *(c for p in ps for c in by_p[p]["counts"])])
        rows = [
            f"<tr><th>{html.escape(dt)}: error (ulps)</th>"
            + "".join(f"<th>{html.escape(p)} ({by_p[p]['cases']} cases)</th>" for p in ps)
            + "</tr>",
            "<tr><td>exact (0)</td>"
            + "".join(f"<td>{by_p[p]['exact']}</td>" for p in ps)
            + "</tr>",
        ]
        if span is not None:
            i0 = min(span[0], max(0, round((-1.0 - lo) / step)))
            i1 = max(span[1], min(nb - 1, round((0.0 - lo) / step)))
            for i in range(i0, i1 + 1):
                a, b = lo + i * step, lo + (i + 1) * step
                lbl = (
                    f"&lt; {_ulp_label(b)}"
                    if i == 0
                    else f"&ge; {_ulp_label(a)}"
                    if i == nb - 1
                    else f"{_ulp_label(a)} - {_ulp_label(b)}"
                )
                mark = {
                    -1.0: " (not correctly rounded from here)",
                    0.0: " (not faithful from here)",
                }.get(a, "")
                cells = []
                for p in ps:
                    c = by_p[p]["counts"][i]
                    w = round(160 * math.log1p(c) / math.log1p(top))
                    cells.append(f"<td class='hb'><span style='width:{w}px'></span>{c}</td>")
                cls = " class='edge'" if mark else ""
                rows.append(f"<tr{cls}><td>{lbl}{mark}</td>{''.join(cells)}</tr>")
        rows.append(
            "<tr><td>non-finite</td>"
            + "".join(f"<td>{by_p[p]['nonfinite']}</td>" for p in ps)
            + "</tr>"
        )
        parts.append("<table class='hist'>" + "\n".join(rows) + "</table>")
    return "\n".join(parts)


def _qclass(x: Any) -> str:
    """CSS class of a heatmap cell: log2(e/bound) quantised to halves (keeps pages small)."""
    return f"q{round((_log2_ratio(x) + 6.0) * 2)}"


# One rule per quantised level, -6 .. 8 in steps of 1/2.
_Q_CSS = "".join(f"td.q{i}{{background:{_ratio_colour(2.0 ** (i / 2 - 6.0))}}}" for i in range(29))


def _heatmap_html(rd: list[list[Any]]) -> str:
    """Fallback heatmap: a coloured cell per (row in block, head dim); violating cells carry
    their value as a tooltip."""
    D = len(rd[0])
    head = "<tr><th></th>" + "".join(
        f"<th colspan='{min(8, D - d)}'>{d}</th>" for d in range(0, D, 8)
    )
    rows = [head + "</tr>"]
    for r, row in enumerate(rd):
        cells = "".join(
            f"<td class={_qclass(x)}"
            + (f" title='row {r} dim {d}: {_f(x)}'" if x is None or x > 1.0 else "")
            + "></td>"
            for d, x in enumerate(row)
        )
        rows.append(f"<tr><th>{r if r % 8 == 0 else ''}</th>{cells}</tr>")
    return (
        "<p>max err/bound by row in block (down) x head dim (across)</p>"
        "<table class='hm'>" + "\n".join(rows) + "</table>"
    )


def _strip_html(vals: list[Any], label: str, k: int = 1) -> str:
    """Fallback bar: one coloured cell per head / block bucket, values shown when few."""
    if len(vals) == 1:  # a single head or block: a number, not a chart
        return f"<p>one {label}: max err/bound {_f(vals[0])}</p>"
    show = len(vals) <= 32
    idx = "".join(f"<th>{i * k}</th>" for i in range(len(vals))) if show else ""
    cells = "".join(
        f"<td class={_qclass(x)} title='{label} {i * k}: {_f(x)}'>"
        + (_f(x) if show else "")
        + "</td>"
        for i, x in enumerate(vals)
    )
    cls = "strip" if show else "strip hm"
    return (
        f"<p>max err/bound by {label}" + (f" (buckets of {k} blocks)" if k > 1 else "") + "</p>"
        f"<table class='{cls}'>" + (f"<tr>{idx}</tr>" if idx else "") + f"<tr>{cells}</tr></table>"
    )


def _loc_html(view: dict[str, Any], png: Path | None) -> str:
    v = view["shown"]
    w = v["worst"] or {}

    def num(k: str, x: Any) -> str:  # value / oracle with enough digits to tell them apart
        return f"{x:.8g}" if isinstance(x, float) and k in ("value", "oracle") else _f(x)

    err = " ".join(
        f"{k} {num(k, w[k])}" for k in ("value", "oracle", "err", "bound") if w.get(k) is not None
    )
    out = [
        f"<h3 id='loc-{_slug(view['provider'], view['tensor'])}'>"
        f"{html.escape(str(view['provider']))} · {html.escape(str(view['tensor']))}: "
        f"{len(view['cases'])} violating case(s)</h3>",
        f"<p>Shown: case <code>{html.escape(str(v['case_id']))}</code> "
        + (f"{html.escape(v['name'])} " if v["name"] else "")
        + f"({v['variant']} {v['dtype']}): {v['violations']} violations "
        f"({_f(v['pct_violations'])}%), max err/bound {_f(v['max_ratio'])}; worst element "
        f"{html.escape(worst_where(w))} ({html.escape(err)}).</p>",
        f"<p><b>where:</b> {html.escape(loc_summary(v['loc']))}</p>",
    ]
    loc = v["loc"] or {}
    if png is not None:
        out.append(f'<img src="plots/{png.name}" alt="{html.escape(png.stem)}">')
    elif loc:
        out.append(_COLOUR_KEY)
        if loc.get("row_dim") and loc["row_dim"][0]:
            out.append(_heatmap_html(loc["row_dim"]))
        if loc.get("by_head"):
            out.append(_strip_html(loc["by_head"], "head"))
        if loc.get("by_block"):
            k = max(1, int(loc.get("block_bucket") or 1))
            out.append(_strip_html(loc["by_block"], "block", k))
    else:
        out.append("<p>(no localisation map in this record)</p>")
    rows = [
        "<tr><th>case</th><th>variant</th><th>dtype</th><th>violations</th>"
        "<th>max err/bound</th><th>worst element</th><th>where</th></tr>"
    ]
    for c in view["cases"][:50]:
        rows.append(
            f"<tr><td><code>{html.escape(str(c['case_id']))}</code> {html.escape(c['name'])}"
            f"</td><td>{c['variant']}</td><td>{c['dtype']}</td><td>{c['violations']} "
            f"({_f(c['pct_violations'])}%)</td><td>{_f(c['max_ratio'])}</td>"
            f"<td>{html.escape(worst_where(c['worst']))}</td>"
            f"<td>{html.escape(loc_summary(c['loc']))}</td></tr>"
        )
    if len(view["cases"]) > 50:
        rows.append(f"<tr><td colspan='7'>... and {len(view['cases']) - 50} more</td></tr>")
    out.append("<table>" + "\n".join(rows) + "</table>")
    return "\n".join(out)


def elementwise_sections(records: list[dict[str, Any]], out: Path) -> tuple[str, dict[str, Path]]:
    """HTML of the ulp-histogram and violation-localisation sections ("" for records without
    elementwise fields) and the PNGs written for them (none without matplotlib)."""
    hists = ulp_histograms(records)
    views = violation_views(records)
    if not hists and not views:
        return "", {}
    plt = _pyplot()
    pngs: dict[str, Path] = {}
    pdir = out / "plots"
    if plt is not None:
        pdir.mkdir(parents=True, exist_ok=True)
    provs = _provider_order(records)
    parts = []
    if hists:
        parts.append(
            "<h2 id='ulp-histograms'>ulp error histograms</h2>"
            "<p>|error| of every element in ulps of the exact (FP64) value in the case dtype, "
            "summed over the cases; &le; 0.5 ulp is correctly rounded, &le; 1 ulp faithful.</p>"
        )
        for t, by_dt in hists.items():
            parts.append(f"<h3 id='hist-{_slug(t)}'>{html.escape(t)}</h3>")
            if plt is not None:
                f = plot_ulp_hist(t, by_dt, provs, pdir, plt)
                pngs[f.stem] = f
                parts.append(f'<img src="plots/{f.name}" alt="{html.escape(f.stem)}">')
            else:
                parts.append(_hist_html(by_dt, provs))
    if views:
        parts.append(
            "<h2 id='violation-localisation'>Bound violations: where they sit</h2>"
            "<p>A row band points at masking, one head at strides/head indexing, alternating "
            "dims at rotary pairs.</p>"
        )
        for view in views[:MAX_VIEWS]:
            png = None
            if plt is not None:
                png = plot_localisation(view, pdir, plt)
                pngs[png.stem] = png
            parts.append(_loc_html(view, png))
        if len(views) > MAX_VIEWS:
            parts.append(f"<p>... and {len(views) - MAX_VIEWS} more provider x tensor views</p>")
    return "\n".join(parts), pngs

