"""Charts of a report: error (or error / bound) per case and tensor, one PNG per dtype and
provider, with the limit line the verdict used (matplotlib, optional)."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from blockattn.report.summarize import (
    dtype_short,
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


def _provider_order(records: list[dict[str, Any]]) -> list[str]:
    """Providers under test first, then baselines, then the rest (sorted)."""
    ut = {r.get("under_test") for r in records}
    bl = {r.get("baseline") for r in records}
    names = {n for r in records for n in r.get("providers", {})}
    return sorted(names, key=lambda n: (n not in ut, n not in bl, n))


def _ratio_text(t: float) -> str:
    """log2 ratio -> '1/16', '1', '4'."""
    return f"1/{2.0**-t:g}" if t < 0 else f"{2.0**t:g}"
