"""Render a report directory (results.jsonl, possibly partial; report.json meta) to report.html,
report.md and plots."""

from __future__ import annotations

import hashlib
import html
import math
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from blockattn.harness.summarize import (
    _pct,
    _tensor_rows,
    bound_rows,
    dtype_short,
    elementwise_markdown,
    errored,
    loc_summary,
    markdown_tables,
    status_counts,
    verdict_counts,
    violating_cases,
    worst_where,
)

# Every PNG is at most MAX_W_IN * DPI = 990 px wide, so it fits a page without scaling.
DPI = 90
MAX_W_IN = 11.0


# log-scale floor of the ratio plots: max err/bound is 0 for a correctly rounded tensor
Y_LO, Y_HI = 2.0**-8, 1e6


def _case_value(m: dict[str, Any], use_bound: bool) -> float | None:
    """One tensor's plotted value: max err/bound (schema 2, None = inf) when `use_bound`, else
    max err/rounding floor; None where the tensor has no such number."""
    if use_bound:
        b = m.get("bound")
        if not b:
            return None
        x = b.get("max_ratio")
        return math.inf if x is None and m.get("numel", 1) > 0 else float(x or 0.0)
    y = m.get("ratio_to_floor")
    return math.inf if y is None else float(y)


def _clip(y: float) -> float:
    return min(max(y, Y_LO), Y_HI)


def _uses_bound(records: list[dict[str, Any]]) -> bool:
    return any(
        m.get("bound")
        for r in records
        for p in r.get("providers", {}).values()
        if p.get("status") == "ok"
        for m in (p.get("tensors") or {}).values()
    )


def _points(
    records: list[dict[str, Any]], provider: str, x_of, use_bound: bool
) -> dict[str, list[tuple[float, float]]]:
    pts: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in records:
        p = r["providers"].get(provider)
        if not p or p["status"] != "ok":
            continue
        x = x_of(r)
        if x is None:
            continue
        for t, m in p["tensors"].items():
            y = _case_value(m, use_bound)
            if y is not None:
                pts[t].append((x, y))
    return pts


def _pyplot():
    """matplotlib.pyplot on the Agg backend, or None where matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _limit_line(ax, use_bound: bool) -> None:
    """The line a reader judges the points against: the elementwise bound (err/bound = 1,
    above = violation) or, for records without a bound, the rounding floor (best possible)."""
    if use_bound:
        ax.axhline(1.0, color="#b2182b", ls="--", lw=1.2, label="bound (above: violation)")
    else:
        ax.axhline(1.0, color="#444", ls="--", lw=1.2, label="rounding floor (best possible)")


def _ylabel(use_bound: bool) -> str:
    return (
        "max err / bound per case (0 drawn at 1/256)"
        if use_bound
        else "max |err| / rounding floor per case"
    )


def _ratio_axis(ax, ys: list[float]) -> None:
    """log2 y axis with ticks at powers of 2 that always include 1 (the limit line), <= ~9."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

    ax.set_yscale("log", base=2)
    e0 = math.floor(math.log2(min([*ys, 1.0])))
    e1 = math.ceil(math.log2(max([*ys, 1.0])))
    step = max(1, math.ceil((e1 - e0) / 8))
    ticks = [2.0 ** (k * step) for k in range(math.floor(e0 / step), math.ceil(e1 / step) + 1)]
    ax.set_ylim(2.0**e0 / 1.5, 2.0**e1 * 1.5)
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _p: _ratio_text(math.log2(y))))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_minor_formatter(NullFormatter())


def make_plots(records: list[dict[str, Any]], out: Path) -> list[Path]:
    """Per-case error plots: vs case shape (a panel per provider) and per dtype x tensor x
    provider, on the elementwise bound's scale when the records carry one; [] without
    matplotlib. Every PNG is <= MAX_W_IN * DPI px wide and draws the limit it is judged by."""
    plt = _pyplot()
    if plt is None:
        return []
    pdir = out / "plots"
    pdir.mkdir(parents=True, exist_ok=True)
    provs = _provider_order(records)
    use_bound = _uses_bound(records)
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
    tensors = sorted(
        {t for r in records for p in r["providers"].values() for t in p.get("tensors") or {}}
    )
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    tcol = {t: colors[i % len(colors)] for i, t in enumerate(tensors)}
    for key, label, x_of in axes_spec:
        pts = {prov: _points(records, prov, x_of, use_bound) for prov in provs}
        shown = [prov for prov in provs if pts[prov]]
        all_y = [_clip(y) for by_t in pts.values() for tp in by_t.values() for _, y in tp]
        if not shown:  # e.g. every case has explicit lengths: no sparsity to plot against
            continue
        # <= 3 panels a row: the PNG stays <= MAX_W_IN wide with readable labels.
        ncol = min(3, len(shown))
        nrow = math.ceil(len(shown) / ncol)
        fig, axs = plt.subplots(
            nrow, ncol, figsize=(MAX_W_IN, 0.6 + 3.4 * nrow), squeeze=False, sharey=True
        )
        for ax in axs.flat[len(shown) :]:
            ax.set_visible(False)
        for ax, prov in zip(axs.flat, shown, strict=False):
            for t, tp in sorted(pts[prov].items()):
                ax.scatter(
                    [p[0] for p in tp], [_clip(p[1]) for p in tp], s=14, label=t, alpha=0.75,
                    color=tcol[t],
                )  # fmt: skip
            _limit_line(ax, use_bound)
            _ratio_axis(ax, all_y)
            ax.set_xlabel(label)
            ax.set_title(prov, fontsize=10)
            ax.grid(alpha=0.3)
        for ax in axs[:, 0]:
            ax.set_ylabel(_ylabel(use_bound), fontsize=9)
        h, lbl = axs.flat[0].get_legend_handles_labels()
        fig.legend(h, lbl, loc="upper center", ncol=min(8, len(lbl)), fontsize=8, frameon=False)
        fig.tight_layout(rect=(0.0, 0.0, 1.0, 1.0 - 0.35 / (0.6 + 3.4 * nrow)))
        f = pdir / f"err_vs_{key}.png"
        fig.savefig(f, dpi=DPI)
        plt.close(fig)
        files.append(f)
    f = _plot_per_dtype(records, provs, tensors, use_bound, pdir, plt)
    if f is not None:
        files.append(f)
    return files


def _plot_per_dtype(
    records: list[dict[str, Any]],
    provs: list[str],
    tensors: list[str],
    use_bound: bool,
    pdir: Path,
    plt,
) -> Path | None:
    """A panel per dtype (full name in the title), tensors along x, a box + the case points
    per provider (colour = provider, in the legend: no per-box text to truncate)."""
    groups: dict[str, dict[tuple[str, str], list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        for n, p in r["providers"].items():
            if p["status"] != "ok":
                continue
            for t, m in p["tensors"].items():
                y = _case_value(m, use_bound)
                if y is not None:
                    groups[r["spec"]["dtype"]][(t, n)].append(_clip(y))
    if not groups:
        return None
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    pcol = {p: colors[i % len(colors)] for i, p in enumerate(provs)}
    n = len(groups)
    fig, axs = plt.subplots(n, 1, figsize=(MAX_W_IN, 0.7 + 3.0 * n), squeeze=False)
    width = 0.8 / max(1, len(provs))
    for ax, (dt, by) in zip(axs[:, 0], sorted(groups.items()), strict=True):
        ts = [t for t in tensors if any((t, p) in by for p in provs)]
        for j, prov in enumerate(provs):
            xs = [i + (j - (len(provs) - 1) / 2) * width for i, t in enumerate(ts)]
            data = [(x, by[(t, prov)]) for x, t in zip(xs, ts, strict=True) if (t, prov) in by]
            if not data:
                continue
            ax.boxplot(
                [d for _, d in data], positions=[x for x, _ in data], widths=width * 0.8,
                whis=(0, 100), showfliers=False, manage_ticks=False,
                medianprops={"color": pcol[prov]}, boxprops={"color": pcol[prov]},
                whiskerprops={"color": pcol[prov]}, capprops={"color": pcol[prov]},
            )  # fmt: skip
            for x, d in data:
                ax.scatter([x] * len(d), d, s=10, color=pcol[prov], alpha=0.7, zorder=3)
            ax.scatter([], [], color=pcol[prov], label=prov)  # one legend entry per provider
        _limit_line(ax, use_bound)
        _ratio_axis(ax, [y for ys in by.values() for y in ys])
        ax.set_xticks(range(len(ts)), ts, fontsize=10)
        ax.set_xlim(-0.6, len(ts) - 0.4)
        ax.set_ylabel(_ylabel(use_bound), fontsize=9)
        ax.set_title(f"{dt} ({dtype_short(dt)}): every case, per tensor and provider", fontsize=10)
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    f = pdir / "err_per_dtype_tensor.png"
    fig.savefig(f, dpi=DPI)
    plt.close(fig)
    return f


# ---------------------------------------------------------------------------------------------
# Elementwise views (blockattn/bounds/RECORD.md): ulp-error histograms per tensor, and for every
# provider x tensor with bound violations where they sit (row in block x head dim, head, block).
# Each has a PNG (matplotlib) and a plain-HTML fallback (tables, coloured cells) without it.

MAX_VIEWS = 24  # localisation views on one page (worst first); the Markdown lists the rest
_SLUG = re.compile(r"[^A-Za-z0-9_.-]+")


def _slug(*parts: Any) -> str:
    return _SLUG.sub("_", "_".join(str(p) for p in parts))


def _provider_order(records: list[dict[str, Any]]) -> list[str]:
    """Providers under test first, then baselines, then the rest (sorted)."""
    ut = {r.get("under_test") for r in records}
    bl = {r.get("baseline") for r in records}
    names = {n for r in records for n in r.get("providers", {})}
    return sorted(names, key=lambda n: (n not in ut, n not in bl, n))


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


def _ratio_text(t: float) -> str:
    """log2 ratio -> '1/16', '1', '4'."""
    return f"1/{2.0**-t:g}" if t < 0 else f"{2.0**t:g}"


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
        if vals:
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


# ---------------------------------------------------------------------------------------------
# The page: built from the records and report.json's meta / selfcheck (never from Markdown).

NOT_RECORDED = "not recorded"
_GATE_HEAD = re.compile(r"^##\s*blockattn gate:.*?\b(PASS|FAIL)\b", re.M)
_GATE_TOL = re.compile(r"^Tolerances `([^`]+)`", re.M)


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
    }


def banner(
    records: list[dict[str, Any]],
    selfcheck: list[dict[str, Any]] | None = None,
    gate: dict[str, Any] | None = None,
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
    "max err / floor", "NaN/Inf",
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
        "of what its accuracy model allows (&gt; 1 violates); <b>headroom</b> = bound / worst "
        "error, how many times the worst element could grow before violating. ulp columns: "
        "error in ulps of the exact value; p99.99 and max are the worst case's.</p>",
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
        "| % <= 0.5 ulp | % <= 1 ulp | p99.99 ulp | max ulp | max err/floor | NaN/Inf | result |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        model = ", ".join(r["bound_models"]) or "none"
        md.append(
            f"| {r['provider']} | {r['tensor']} | {r['variant']} {dtype_short(r['dtype'])} | "
            f"{r['n']} | {model} | {r['violations_text']} | "
            f"{_f(r['max_bound_ratio']) if r['n_bounded'] else '-'} | {r['headroom']} | "
            f"{_pct(r['pct_correctly_rounded'])} | {_pct(r['pct_faithful'])} | "
            f"{_f(r['p99_99_ulp'])} | {_f(r['max_ulp'])} | {_f(r['max_ratio_to_floor'])} | "
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
) -> dict[str, Path]:
    """Write report.html, report.md and plots/*.png for `records` into `out`.

    meta / selfcheck: report.json's (None where the directory has none); gate: read_gate_md's.
    Never writes summary.md or gate.md: those are the run's and the gate's own records.
    """
    out.mkdir(parents=True, exist_ok=True)
    plots = make_plots(records, out) if records else []
    ew_html, ew_pngs = elementwise_sections(records, out)
    b = banner(records, selfcheck, gate)
    prov = provenance(records, meta, gate)
    rows = bound_rows(records, under_test=(meta or {}).get("under_test"))
    images = [*ew_pngs.values(), *plots]
    md = report_markdown(records, b, prov, rows, selfcheck, partial, images)
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
        f"<div class='banner {word.replace(' ', '')}' id='banner'><h1>{word}</h1>"
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
            head, _failing_html(records), _bound_section_html(rows), prov_html,
            _selfcheck_html(selfcheck, meta is not None), _warnings_html(records), ew_html, imgs,
            "<h2 id='tables'>Tables</h2>" + _error_table_html(_tensor_rows(records)),
        ) if x
    )  # fmt: skip
    page = (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>blockattn report: {word}</title><style>{_CSS}</style></head><body>\n"
        f"{body}\n</body></html>\n"
    )
    (out / "report.html").write_text(page)
    return {
        "markdown": out / "report.md",
        "html": out / "report.html",
        **{p.stem: p for p in plots},
        **ew_pngs,
    }
