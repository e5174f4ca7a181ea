"""Benchmark outputs: bench.json, bench.csv (rewritten after every measurement), PNG plots and
the Markdown summary.

Derived columns (recomputed on every write from the raw rows):
- tbps = bytes / time; pct_ceiling = tbps / copy-ceiling tbps (the targets' measuring stick);
  pct_read_mostly = tbps / read-mostly-ceiling tbps (3 buffers read : 1 written, the forward's
  mix, measured in the same run; `ceiling_checks` says whether it bounds the copy ceiling and
  every pass, as a physical limit must).
- speedup_vs_fa2 = fa2 ms / ms (same case and pass).
- speedup_vs_fa2_rotary (rotary providers) = best of fa2_rotary_eager / fa2_rotary_compiled ms / ms.

Every row carries `gpu_kind` (the run's, `blockattn bench --gpu-kind`) and `sparsity_convention`.
Ratios are only ever taken between rows of one gpu kind: `derive`, `compare_runs` and
`merge_runs` raise ValueError naming both kinds otherwise.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CSV_COLUMNS = (
    "case",
    "group",
    "gpu_kind",
    "B",
    "max_len",
    "sparsity",
    "sparsity_convention",
    "fill",
    "H",
    "D",
    "dtype",
    "T",
    "n_blocks",
    "provider",
    "rotary",
    "pass",
    "status",
    "ms",
    "bytes",
    "tbps",
    "pct_ceiling",
    "pct_read_mostly",
    "speedup_vs_fa2",
    "speedup_vs_fa2_rotary",
    "peak_mem_mb",
    "check",
    "relerr_O",
    "relerr_dQ",
    "note",
)
FA2_ROTARY = ("fa2_rotary_eager", "fa2_rotary_compiled")
TARGETS = {"fwd_pct": 95.0, "bwd_pct": 90.0, "rot_over_plain": 1.15, "unfused_over_fused": 4.0}


@dataclass
class State:
    out: Path
    meta: dict[str, Any]
    ceiling: dict[str, Any] | None = None
    read_mostly: dict[str, Any] | None = None  # the read-mostly ceiling (measure.py)
    cases: list[dict[str, Any]] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    provider_seconds: list[dict[str, Any]] = field(default_factory=list)
    status: str = "running"
    elapsed_s: float = 0.0
    plots: list[str] | str = field(default_factory=list)
    # What the kernel did beyond its calls, found when its worker ended (processes it left,
    # the judge's files it changed): each a failure of the run (blockattn.run.isolated)
    isolation: list[str] = field(default_factory=list)

    def add(self, row: dict[str, Any]) -> None:
        self.rows.append({"gpu_kind": self.meta.get("gpu_kind"), **row})
        self.write()

    def measurements(self) -> list[dict[str, Any]]:
        return derive(self.rows, self.ceiling, self.read_mostly)

    def to_json(self) -> dict[str, Any]:
        measurements = self.measurements()
        return {
            "meta": self.meta,
            "status": self.status,
            "elapsed_s": round(self.elapsed_s, 1),
            "ceiling": self.ceiling,
            "read_mostly_ceiling": self.read_mostly,
            "ceiling_checks": ceiling_checks(self.ceiling, self.read_mostly, measurements),
            "check_bounds": "relative Frobenius error on sampled sequences <= C * u, "
            "u = eps(dtype)/2; C = 8 for O, 16 for dQ/dK/dV; gated on O and dQ",
            "targets": TARGETS,
            "cases": self.cases,
            "checks": self.checks,
            "measurements": measurements,
            "skipped": self.skipped,
            "errors": self.errors,
            "provider_seconds": self.provider_seconds,
            "plots": self.plots,
            "isolation": self.isolation,
        }

    def write(self, final: bool = False) -> None:
        """Rewrite bench.json and bench.csv atomically (a killed run keeps the last good copy)."""
        self.out.mkdir(parents=True, exist_ok=True)
        data = self.to_json()
        _atomic(self.out / "bench.json", json.dumps(data, indent=1, default=str))
        tmp = self.out / "bench.csv.tmp"
        with tmp.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=CSV_COLUMNS, extrasaction="ignore")
            w.writeheader()
            for r in data["measurements"]:
                w.writerow({k: _fmt(r.get(k)) for k in CSV_COLUMNS})
        os.replace(tmp, self.out / "bench.csv")
        if final:
            try:
                self.plots = plot(data, self.out)
            except Exception as exc:  # plots are a convenience; never lose the data over them
                self.plots = f"plotting failed: {type(exc).__name__}: {exc}"
            data["plots"] = self.plots
            _atomic(self.out / "bench.json", json.dumps(data, indent=1, default=str))


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _fmt(x: Any) -> Any:
    if isinstance(x, float):
        return f"{x:.6g}"
    return "" if x is None else x


def check_same_gpu_kind(a: str | None, b: str | None, what: str = "results") -> None:
    """Refuse to compare or merge results measured on different kinds of GPU."""
    if a != b:
        raise ValueError(
            f"refusing to compare or merge {what} from different GPU kinds: {a!r} vs {b!r}"
        )


def run_gpu_kind(data: dict[str, Any]) -> str:
    """A bench.json's gpu kind; files written before --gpu-kind existed: a slug of meta.gpu."""
    meta = data["meta"]
    kind = meta.get("gpu_kind")
    if kind:
        return str(kind)
    return re.sub(r"[^a-z0-9]+", "-", str(meta.get("gpu", "unknown")).lower()).strip("-")


def derive(rows: list[dict[str, Any]], ceiling: dict[str, Any] | None,
           read_mostly: dict[str, Any] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    ceil_tbps = ceiling["tbps"] if ceiling else None
    rm_tbps = read_mostly["tbps"] if read_mostly else None
    timed = {(r["case"], r["provider"], r["pass"]): r for r in rows if _timed(r)}

    def ratio_to(r: dict[str, Any], other: dict[str, Any] | None) -> float | None:
        if other is None:
            return None
        check_same_gpu_kind(other.get("gpu_kind"), r.get("gpu_kind"), "bench rows")
        return other["ms"] / r["ms"]

    out = []
    for r in rows:
        r = dict(r)
        if _timed(r):
            r["tbps"] = r["pct_ceiling"] = r["pct_read_mostly"] = None  # projection: no floor
            if r.get("bytes"):
                r["tbps"] = r["bytes"] / (r["ms"] * 1e-3) / 1e12
                if ceil_tbps:
                    check_same_gpu_kind(ceiling.get("gpu_kind"), r.get("gpu_kind"), "ceiling/row")
                    r["pct_ceiling"] = 100.0 * r["tbps"] / ceil_tbps
                if rm_tbps:
                    check_same_gpu_kind(read_mostly.get("gpu_kind"), r.get("gpu_kind"),
                                        "read-mostly ceiling/row")  # fmt: skip
                    r["pct_read_mostly"] = 100.0 * r["tbps"] / rm_tbps
            r["speedup_vs_fa2"] = ratio_to(r, timed.get((r["case"], "fa2", r["pass"])))
            if r.get("rotary"):
                alts = [timed.get((r["case"], p, r["pass"])) for p in FA2_ROTARY]
                best = min((a for a in alts if a), key=lambda a: a["ms"], default=None)
                r["speedup_vs_fa2_rotary"] = ratio_to(r, best)
        out.append(r)
    return out


def ceiling_checks(copy: dict[str, Any] | None, read_mostly: dict[str, Any] | None,
                   ms: list[dict[str, Any]]) -> dict[str, Any] | None:  # fmt: skip
    """A physical ceiling bounds what it claims to: the read-mostly ceiling must be >= the copy
    ceiling and >= every timed pass's bandwidth. `ok` False (with the offending rows) means the
    ceiling is not the limit it is said to be, not that a kernel is too fast."""
    if not copy or not read_mostly:
        return None
    rm = read_mostly["tbps"]
    above = [{"case": r["case"], "provider": r["provider"], "pass": r["pass"],
              "tbps": r["tbps"], "pct_read_mostly": r.get("pct_read_mostly")}
             for r in ms if _timed(r) and r.get("tbps") and r["tbps"] > rm]  # fmt: skip
    best = max((r for r in ms if _timed(r) and r.get("tbps")), key=lambda r: r["tbps"],
               default=None)  # fmt: skip
    return {
        "read_mostly_over_copy": rm / copy["tbps"],
        "read_mostly_ge_copy": rm >= copy["tbps"],
        "max_pass_tbps": best and best["tbps"],
        "max_pass": best and f"{best['case']}/{best['provider']}/{best['pass']}",
        "passes_above_read_mostly": above,
        "ok": rm >= copy["tbps"] and not above,
    }


def _key(r: dict[str, Any]) -> tuple[str, str, str]:
    return (r["case"], r["provider"], r["pass"])


def merge_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Measurements of several bench.json runs in one list (each row keeps its run's meta
    index); all runs must share one gpu kind."""
    if not runs:
        raise ValueError("merge_runs needs at least one run")
    kind = run_gpu_kind(runs[0])
    rows = []
    for i, data in enumerate(runs):
        check_same_gpu_kind(kind, run_gpu_kind(data), "bench runs")
        rows += [{**r, "gpu_kind": kind, "run": i} for r in data["measurements"]]
    return {"gpu_kind": kind, "metas": [d["meta"] for d in runs], "measurements": rows}


def compare_runs(base: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    """new ms / base ms per (case, provider, pass) timed in both; same gpu kind only."""
    check_same_gpu_kind(run_gpu_kind(base), run_gpu_kind(new), "bench runs")
    old = {_key(r): r for r in base["measurements"] if _timed(r)}
    out = []
    for r in new["measurements"]:
        b = old.get(_key(r))
        if b is not None and _timed(r):
            row = {"case": r["case"], "provider": r["provider"], "pass": r["pass"]}
            out.append({**row, "base_ms": b["ms"], "new_ms": r["ms"], "ratio": r["ms"] / b["ms"]})
    return out


def _timed(r: dict[str, Any]) -> bool:
    return r.get("ms") is not None and r["ms"] > 0


def _lookup(ms: list[dict[str, Any]], case: str, prov: str, pas: str) -> dict[str, Any] | None:
    for r in ms:
        if r["case"] == case and r["provider"] == prov and r["pass"] == pas and _timed(r):
            return r
    return None


# ----------------------------------------------------------------------------- Markdown


def _n(x: float | None, spec: str = ".3f") -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def summary_markdown(data: dict[str, Any]) -> str:
    meta, ceil = data["meta"], data["ceiling"]
    ms = data["measurements"]
    lines = [
        f"## blockattn bench: {meta['gpu']} (gpu kind {run_gpu_kind(data)}) | torch "
        f"{meta['torch']} | triton {meta['triton']} "
        f"| {meta['git']['commit'][:10]}{' (dirty)' if meta['git']['dirty'] else ''}",
        "",
        "Sparsity column: `s empty` = ours, s is the expected EMPTY fraction of the padded "
        "B x max_len grid; `s fill` = tritonbench blocked_attention's convention, s is the FILLED "
        "fraction (for s >= 0.5 lengths uniform in [int((2s-1) max_len), max_len)). `fill` in "
        "brackets is the realised filled fraction T / (B max_len).",
        "",
        f"Status: {data['status']}, {data['elapsed_s']} s. Flash impl: "
        f"current={meta['flash'].get('current_impl')!r}, "
        f"version={meta['flash'].get('flash_version')!r}.",
    ]
    if ceil:
        lines.append(
            f"Copy ceiling: {ceil['tbps']:.3f} TB/s ({ceil['bytes_moved'] / 1e9:.2f} GB "
            f"read+written in {ceil['ms']:.3f} ms)."
        )
    lines += _read_mostly_lines(data)
    lines += [f"**FAIL: {line}**" for line in data.get("isolation") or ()]
    bad = [c for c in data["checks"] if c.get("check") != "pass"]
    for c in bad:
        lines.append(
            f"**CHECK {c.get('check', '?').upper()}**: {c['case']}/{c['provider']} "
            f"O={_n(c.get('relerr_O'), '.2e')} (<= {_n(c.get('bound_O'), '.2e')}), "
            f"dQ={_n(c.get('relerr_dQ'), '.2e')} (<= {_n(c.get('bound_dQ'), '.2e')}) "
            f"{c.get('check_error', '')}"
        )
    unsup = {}
    for r in ms:
        if r["status"] in ("unsupported", "error"):
            unsup.setdefault((r["provider"], r["status"]), r.get("note", ""))
    for (p, st), note in unsup.items():
        lines.append(f"- {p}: {st}: {str(note)[:300]}")
    if data["skipped"]:
        lines.append(f"- time budget: {len(data['skipped'])} item(s) skipped (see bench.json)")
    main_cases = list(dict.fromkeys(r["case"] for r in ms if r["group"] == "main"))
    # All providers at the main shapes (ms, median).
    lines += ["", "### All providers (median ms)", ""]
    lines += [
        "| case | sparsity | provider | check | fwd | bwd | fwd+bwd | fwd % ceil | bwd % ceil "
        "| fwd % RM | bwd % RM |"
    ]
    lines += ["|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for case in main_cases:
        provs = list(dict.fromkeys(r["provider"] for r in ms if r["case"] == case))
        for p in provs:
            rs = {r["pass"]: r for r in ms if r["case"] == case and r["provider"] == p}
            st = next(iter(rs.values()))
            chk = st.get("check") or st["status"]
            f, bw, fb = (_lookup(ms, case, p, x) for x in ("fwd", "bwd", "fwdbwd"))
            lines.append(
                f"| {case} | {_sparsity(st)} | {p} | {chk} | {_n(f and f['ms'])} | "
                f"{_n(bw and bw['ms'])} | "
                f"{_n(fb and fb['ms'])} | {_n(f and f['pct_ceiling'], '.1f')} | "
                f"{_n(bw and bw['pct_ceiling'], '.1f')} | "
                f"{_n(f and f.get('pct_read_mostly'), '.1f')} | "
                f"{_n(bw and bw.get('pct_read_mostly'), '.1f')} |"
            )
    # Side by side + targets: the last thing printed.
    lines += ["", "### Summary: blockattn vs FA v2 vs copy ceiling", ""]
    lines += [
        "| case | sparsity | pass | GB moved | ceiling ms | blockattn ms | % ceil | % RM | FA2 ms "
        "| % ceil | speedup vs FA2 | fused-rotary ms | best FA2+rotary ms | speedup |"
    ]
    lines += ["|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    ceil_tbps = ceil["tbps"] if ceil else None
    targets: list[str] = []
    for case in main_cases:
        for pas in ("fwd", "bwd", "fwdbwd"):
            a = _lookup(ms, case, "blockattn", pas)
            f = _lookup(ms, case, "fa2", pas)
            r = _lookup(ms, case, "blockattn_rotary", pas)
            alts = [_lookup(ms, case, p, pas) for p in FA2_ROTARY]
            best = min((x["ms"] for x in alts if x), default=None)
            nbytes = (a or f or r or {}).get("bytes")
            cms = nbytes / (ceil_tbps * 1e12) * 1e3 if nbytes and ceil_tbps else None
            first = next(r for r in ms if r["case"] == case)
            lines.append(
                f"| {case} | {_sparsity(first)} | {pas} | {_n(nbytes and nbytes / 1e9, '.2f')} | "
                f"{_n(cms)} | "
                f"{_n(a and a['ms'])} | {_n(a and a['pct_ceiling'], '.1f')} | "
                f"{_n(a and a.get('pct_read_mostly'), '.1f')} | "
                f"{_n(f and f['ms'])} | {_n(f and f['pct_ceiling'], '.1f')} | "
                f"{_n(a and a['speedup_vs_fa2'], '.2f')} | {_n(r and r['ms'])} | {_n(best)} | "
                f"{_n(r and best and best / r['ms'], '.2f')} |"
            )
        targets += _targets(ms, case, on_cpu=_on_cpu(data))
    lines += _outside_table(ms, _outside(data), main_cases)
    lines += _projection_table(ms)
    lines += ["", "### Targets", "", "| case | sparsity | target | value | goal | met |"]
    lines += ["|---|---|---|---:|---:|---|", *targets]
    return "\n".join(lines)


def _read_mostly_lines(data: dict[str, Any]) -> list[str]:
    """The read-mostly ceiling and whether it bounds the copy ceiling and every pass."""
    rm, chk = data.get("read_mostly_ceiling"), data.get("ceiling_checks")
    if not rm:
        return []
    lines = [f"Read-mostly ceiling ({rm['reads']} read : {rm['writes']} written, the forward's "
             f"mix; `% RM` columns): {rm['tbps']:.3f} TB/s ({rm['method']})."]  # fmt: skip
    if chk:
        verdict = "yes" if chk["ok"] else "**NO**"
        if _on_cpu(data) and not chk["ok"]:
            verdict = "no (CPU smoke: wall-clock timings, not a ceiling)"
        lines.append(
            f"It is {chk['read_mostly_over_copy']:.3f}x the copy ceiling; the fastest pass moves "
            f"{_n(chk['max_pass_tbps'])} TB/s ({chk['max_pass'] or '—'}); read-mostly ceiling "
            f">= copy ceiling and >= every pass: {verdict}. Targets stay against the copy "
            "ceiling."
        )
        for r in chk["passes_above_read_mostly"][:10]:
            lines.append(f"- above the read-mostly ceiling: {r['case']}/{r['provider']}/"
                         f"{r['pass']} {r['tbps']:.3f} TB/s")  # fmt: skip
    return lines


def _on_cpu(data: dict[str, Any]) -> bool:
    """A bench run on the CPU interpreter: blockattn's GPU targets do not apply there."""
    meta = data.get("meta") or {}
    return (str(meta.get("triton_interpret")) == "1" or run_gpu_kind(data) == "cpu"
            or str(meta.get("gpu", "")).lower() in ("cpu", "none"))  # fmt: skip


def _outside(data: dict[str, Any]) -> list[str]:
    """The bench entries of the user's --provider kernels (in bench.json's config)."""
    cfg = (data.get("meta") or {}).get("config") or {}
    return [str(x) for x in cfg.get("outside") or ()]


def _outside_table(ms: list[dict[str, Any]], outside: list[str], cases: list[str]) -> list[str]:
    """Your kernel(s) beside blockattn and FA v2 at the main shapes."""
    if not outside:
        return []
    lines = ["", "### Summary: your kernel(s) vs blockattn vs FA v2 (median ms)", "",
             "| case | sparsity | pass | provider | check | ms | % ceil | blockattn ms "
             "| FA2 ms | / blockattn | / FA2 |",
             "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for case in cases:
        first = next(r for r in ms if r["case"] == case)
        for prov in outside:
            for pas in ("fwd", "bwd", "fwdbwd"):
                o = _lookup(ms, case, prov, pas)
                row = o or next((r for r in ms if r["case"] == case and r["provider"] == prov),
                                None)  # fmt: skip
                if row is None:
                    continue
                a = _lookup(ms, case, "blockattn", pas)
                f = _lookup(ms, case, "fa2", pas)
                lines.append(
                    f"| {case} | {_sparsity(first)} | {pas} | {prov} | "
                    f"{row.get('check') or row['status']} | {_n(o and o['ms'])} | "
                    f"{_n(o and o.get('pct_ceiling'), '.1f')} | {_n(a and a['ms'])} | "
                    f"{_n(f and f['ms'])} | {_n(o and a and o['ms'] / a['ms'], '.2f')} | "
                    f"{_n(o and f and o['ms'] / f['ms'], '.2f')} |"
                )
    return lines


def _sparsity(row: dict[str, Any]) -> str:
    """'0.7 empty (fill 0.30)': the convention the case's sparsity was read under."""
    if row.get("sparsity") is None:
        return "—"
    conv = row.get("sparsity_convention") or "empty"  # rows from before the field: ours
    fill = row.get("fill")
    return f"{row['sparsity']:g} {conv}" + (f" (fill {fill:.2f})" if fill is not None else "")


def _projection_table(ms: list[dict[str, Any]]) -> list[str]:
    """Projection fwd+bwd: packed gradient vs the unfused one (blockattn.bench.projection)."""
    cases = list(dict.fromkeys(r["case"] for r in ms if r["group"] == "projection"))
    if not cases:
        return []
    lines = ["", "### Projection + fused rotary: packed vs unfused gradient (median ms)", ""]
    lines += [
        "| case | sparsity | pass | packed ms | unfused ms | unfused / packed | packed peak MiB "
        "| unfused peak MiB | check (bitwise) |"
    ]
    lines += ["|---|---|---|---:|---:|---:|---:|---:|---|"]
    for case in cases:
        first = next(r for r in ms if r["case"] == case)
        for pas in ("bwd", "fwdbwd"):
            p = _lookup(ms, case, "projection_packed", pas)
            u = _lookup(ms, case, "projection_unfused", pas)
            if p and u:
                check_same_gpu_kind(p.get("gpu_kind"), u.get("gpu_kind"), "projection rows")
            chk = (p or u or first).get("check") or first["status"]
            lines.append(
                f"| {case} | {_sparsity(first)} | {pas} | {_n(p and p['ms'])} | "
                f"{_n(u and u['ms'])} | {_n(p and u and u['ms'] / p['ms'], '.3f')} | "
                f"{_n(p and p.get('peak_mem_mb'), '.0f')} | "
                f"{_n(u and u.get('peak_mem_mb'), '.0f')} | {chk} |"
            )
    return lines


def _targets(ms: list[dict[str, Any]], case: str, on_cpu: bool = False) -> list[str]:
    def pct(p: str, pas: str) -> float | None:
        r = _lookup(ms, case, p, pas)
        return r["pct_ceiling"] if r else None

    def t(p: str) -> float | None:
        r = _lookup(ms, case, p, "bwd")
        return r["ms"] if r else None

    fused, plain, fa2b = t("blockattn_rotary"), t("blockattn"), t("fa2")
    first = next((r for r in ms if r["case"] == case), None)
    sp = _sparsity(first) if first else "—"
    # The unfused pair (FA2 bwd + rotary bwd of dq, dk, dv) is what the fa2_rotary_* bwd rows
    # time; take the faster of the eager and compiled rotary (checked rows only).
    pairs = [_rot_bwd(ms, case, p) for p in FA2_ROTARY]
    unfused = min((x for x in pairs if x is not None), default=None)
    extra_mb, allowed_mb = _peak_beyond_outputs(_lookup(ms, case, "blockattn", "fwdbwd"))
    rows = [
        ("blockattn fwd % of copy ceiling", pct("blockattn", "fwd"), ">= 95 %", "ge", 95.0),
        ("blockattn bwd % of copy ceiling", pct("blockattn", "bwd"), ">= 90 %", "ge", 90.0),
        (
            "fused rotary bwd / plain bwd",
            fused / plain if fused and plain else None,
            "<= 1.15x",
            "le",
            1.15,
        ),
        (
            "(FA2 bwd + best unfused rotary bwd) / fused rotary bwd",
            unfused / fused if unfused and fused else None,
            ">= 4x",
            "ge",
            4.0,
        ),
        (
            "blockattn fwd+bwd peak memory beyond inputs + outputs, MiB",
            extra_mb,
            f"<= {_n(allowed_mb, '.1f')}",
            "le",
            allowed_mb,
        ),
    ]
    out = []
    for name, val, goal, op, lim in rows:
        met = (
            "n/a on cpu"  # GPU targets: the interpreter's times say nothing about them
            if on_cpu
            else "n/a"
            if val is None
            else ("yes" if (val >= lim if op == "ge" else val <= lim) else "NO")
        )
        out.append(f"| {case} | {sp} | {name} | {_n(val, '.3f')} | {goal} | {met} |")
    if fa2b is not None and unfused is not None:
        out.append(
            f"| {case} | {sp} | (info) FA2 bwd alone, ms / unfused pair, ms | {_n(fa2b)} / "
            f"{_n(unfused)} | | |"
        )
    return out


_ELEMENT_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
_ALLOC_ROUND = 2 * 2**20  # the CUDA caching allocator rounds large blocks up to 2 MiB


def _peak_beyond_outputs(row: dict[str, Any] | None) -> tuple[float | None, float | None]:
    """(measured, allowed) MiB that one fwd+bwd allocates beyond its four (T, H, D) outputs.

    `peak_mem_mb` is the peak above what was live before the call (the inputs). Allowed: each
    output rounded up to the allocator's 2 MiB, plus 128 B per tile-table slot (start int64 +
    length int32 and the int64 temporaries that build it; slots <= n_blocks + B). A saved
    logsumexp (4 B x T x H = 1 KiB per 64-token block at H=4), an fp32 dQ buffer or a rotated
    copy of q/k/v (a whole (T, H, D) tensor) each exceeds it.
    """
    if not row or row.get("peak_mem_mb") is None or row["dtype"] not in _ELEMENT_BYTES:
        return None, None
    out_bytes = row["T"] * row["H"] * row["D"] * _ELEMENT_BYTES[row["dtype"]]
    outputs = 4 * out_bytes
    allowed = 4 * (-(-out_bytes // _ALLOC_ROUND) * _ALLOC_ROUND - out_bytes)
    allowed += 128 * (row["n_blocks"] + row["B"])
    return row["peak_mem_mb"] - outputs / 2**20, allowed / 2**20


def _rot_bwd(ms: list[dict[str, Any]], case: str, prov: str) -> float | None:
    r = _lookup(ms, case, prov, "bwd")
    return r["ms"] if r and r.get("check") == "pass" else None


# ----------------------------------------------------------------------------- plots


def plot(data: dict[str, Any], out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ms = [r for r in data["measurements"] if _timed(r)]
    written = []
    sweeps = (("sweep_len", "max_len", "time_vs_max_len.png"),)
    sweeps += (("sweep_sparsity", "sparsity", "time_vs_sparsity.png"),)
    for group, xkey, fname in sweeps:
        rows = [r for r in ms if r["group"] == group]
        if not rows:
            continue
        fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
        for ax, pas in zip(axes, ("fwd", "bwd", "fwdbwd"), strict=True):
            _lines(ax, [r for r in rows if r["pass"] == pas], xkey, "ms")
            ax.set_title(f"{pas}: median ms")
            ax.set_xlabel(xkey)
            if xkey == "max_len":
                ax.set_xscale("log", base=2)
        axes[0].legend(fontsize=8)
        only_main = [o for o in _outside(data) if all(r["provider"] != o for r in rows)]
        fig.suptitle(f"{data['meta']['gpu']}: time vs {xkey} (E[T] ~ const)"
                     + (f"; {', '.join(only_main)}: main shapes only (main_shapes.png)"
                        if only_main else ""))  # fmt: skip
        fig.tight_layout()
        fig.savefig(out / fname, dpi=110)
        plt.close(fig)
        written.append(fname)
    main = [r for r in ms if r["group"] == "main"]
    if main:  # every provider timed at the main shapes, --provider kernels included
        cases = list(dict.fromkeys(r["case"] for r in main))
        provs = list(dict.fromkeys(r["provider"] for r in main))
        fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
        width = 0.8 / max(1, len(provs))
        for ax, pas in zip(axes, ("fwd", "bwd", "fwdbwd"), strict=True):
            for i, prov in enumerate(provs):
                ys = [(_lookup(main, c, prov, pas) or {}).get("ms") for c in cases]
                xs = [j + i * width for j, y in enumerate(ys) if y is not None]
                ax.bar(xs, [y for y in ys if y is not None], width, label=prov)
            ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cases))], cases, fontsize=7,
                          rotation=20)  # fmt: skip
            ax.set_title(f"{pas}: median ms at the main shapes")
            ax.grid(alpha=0.3, axis="y")
        axes[0].legend(fontsize=7)
        fig.suptitle(f"{data['meta']['gpu']}: every provider at the main shapes")
        fig.tight_layout()
        fig.savefig(out / "main_shapes.png", dpi=110)
        plt.close(fig)
        written.append("main_shapes.png")
    rows = [r for r in ms if r["group"] in ("sweep_len", "sweep_sparsity")]
    if rows and data["ceiling"]:
        fig, axes = plt.subplots(2, 2, figsize=(11, 8))
        for i, (group, xkey) in enumerate(
            (("sweep_len", "max_len"), ("sweep_sparsity", "sparsity"))
        ):
            for j, pas in enumerate(("fwd", "bwd")):
                ax = axes[i][j]
                sel = [r for r in rows if r["group"] == group and r["pass"] == pas]
                _lines(ax, sel, xkey, "pct_ceiling")
                ax.axhline(TARGETS[f"{pas}_pct"], color="k", ls="--", lw=0.8)
                ax.set_title(f"{pas}: % of copy ceiling vs {xkey}")
                ax.set_xlabel(xkey)
                if xkey == "max_len":
                    ax.set_xscale("log", base=2)
        axes[0][0].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "pct_ceiling.png", dpi=110)
        plt.close(fig)
        written.append("pct_ceiling.png")
    return written


def _lines(ax: Any, rows: list[dict[str, Any]], xkey: str, ykey: str) -> None:
    for p in dict.fromkeys(r["provider"] for r in rows):
        pts = sorted((r[xkey], r[ykey]) for r in rows if r["provider"] == p and r[ykey] is not None)
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="o", label=p)
    ax.grid(alpha=0.3)
