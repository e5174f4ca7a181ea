"""`blockattn audit`: measure every claim of claims/claims.toml over N seeds and give verdicts."""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
from pathlib import Path
from typing import Any

HELP = (
    "audit the accuracy and speed claims (claims/claims.toml): measure each over N seeds and "
    "print confirmed / refuted / not runnable here, with min/median/max (JSON + Markdown)"
)
# CPU defaults for accuracy claims: the interpreter costs ~0.1 s per (64-token block, head), so a
# shape-P case (22 k blocks x 4 heads) is out of reach; B is scaled to a couple of sequences and
# max_len capped so one seed takes seconds. The verdict is then labelled "at reduced shape".
CPU_SHAPE = {"B": 4, "max_len": 256}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--claims", type=Path, help="claims TOML (default claims/claims.toml)")
    p.add_argument("--claim", action="append", help="only this claim id (repeatable)")
    p.add_argument("--seeds", type=int, default=5, help="seeds per claim (default 5)")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument(
        "--shape-scale",
        type=float,
        help="accuracy/oracle claims: scale the shape's B by this (default 1 on CUDA)",
    )
    p.add_argument("--max-len", type=int, help="accuracy/oracle claims: override max_len")
    p.add_argument("--kind", choices=("speed", "accuracy", "oracle_time"), action="append")
    p.add_argument("--quick", action="store_true", help="3 seeds, shorter timing reps")
    p.add_argument("--out", type=Path, help="report dir (audit.json, audit.md)")
    p.add_argument("--fail-on-refuted", action="store_true", help="exit 1 if a claim is refuted")


def _versions() -> dict[str, Any]:
    import torch
    import triton

    from blockattn.harness.runner import device_info, git_commit

    info = device_info()
    return {
        **info,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "commit": git_commit(),
    }


def _fmt(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:.4g}"


def _command(c, args: argparse.Namespace, seeds: int) -> str:
    cmd = f"blockattn audit --claim {c.id} --seeds {seeds}"
    if args.first_seed:
        cmd += f" --first-seed {args.first_seed}"
    if c.kind != "speed":
        if args.shape_scale is not None:
            cmd += f" --shape-scale {args.shape_scale:g}"
        if args.max_len is not None:
            cmd += f" --max-len {args.max_len}"
    if args.claims:
        cmd += f" --claims {args.claims}"
    return cmd


def main(args: argparse.Namespace) -> int:
    from blockattn.audit import claims as claims_mod
    from blockattn.audit import measure
    from blockattn.harness import session

    if args.seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {args.seeds}")
    if args.shape_scale is not None and not 0 < args.shape_scale <= 1:
        raise ValueError(f"--shape-scale must be in (0, 1], got {args.shape_scale}")
    if args.max_len is not None and args.max_len < 1:
        raise ValueError(f"--max-len must be >= 1, got {args.max_len}")
    shapes, claims = claims_mod.load(args.claims or claims_mod.DEFAULT_CLAIMS)
    if args.claim:
        unknown = set(args.claim) - {c.id for c in claims}
        if unknown:
            raise ValueError(f"--claim: unknown id(s) {sorted(unknown)}")
        claims = [c for c in claims if c.id in args.claim]
    if args.kind:
        claims = [c for c in claims if c.kind in args.kind]
    device = session.setup_device()
    cuda = device == "cuda"
    seeds = list(range(args.first_seed, args.first_seed + (3 if args.quick else args.seeds)))
    warmup_ms, rep_ms = (10.0, 40.0) if args.quick else (25.0, 100.0)
    ver = _versions()

    def acc_shape(c) -> tuple[dict[str, Any], bool]:
        """(shape measured, reduced?) for accuracy/oracle claims."""
        s = dict(shapes[c.shape])
        if not cuda and args.shape_scale is None and args.max_len is None:
            s.update(CPU_SHAPE)
        if args.shape_scale is not None:
            s["B"] = max(1, round(s["B"] * args.shape_scale))
        if args.max_len is not None:
            s["max_len"] = args.max_len
        return s, s != shapes[c.shape]

    # ---- plan: which configs and providers each kind needs, so each seed's inputs, oracle and
    # provider runs are shared by every claim on the same configuration.
    results: dict[str, dict[str, Any]] = {c.id: {"values": [], "why": None} for c in claims}
    acc_needs: dict[tuple, set[str]] = {}
    speed_keys: list[tuple] = []
    for c in claims:
        if c.kind == "speed":
            if not cuda:
                results[c.id]["why"] = "needs CUDA (interpreter timings mean nothing)"
                continue
            key = measure.config_key(c, shapes[c.shape])
            if key not in speed_keys:
                speed_keys.append(key)
        elif c.kind == "oracle_time" and not cuda:
            results[c.id]["why"] = "needs CUDA (the claim is a GPU wall time)"
        else:
            key = measure.config_key(c, acc_shape(c)[0])
            want = {c.provider, *c.reference} if c.kind == "accuracy" else set()
            acc_needs.setdefault(key, set()).update(want)
    ceiling = None
    if cuda and any(c.metric == "pct_of_copy_ceiling" and not results[c.id]["why"] for c in claims):
        from blockattn.bench.measure import copy_ceiling

        ceiling = copy_ceiling(2 << 30, warmup_ms, rep_ms, False)["tbps"]
    for seed in seeds:
        for key, provs in acc_needs.items():
            print(f"audit: seed {seed} accuracy {key}", file=sys.stderr)
            try:
                m = measure.accuracy_config(key, provs, seed, device, True)
            except Exception as exc:  # recorded per claim, never fatal
                m = {"error": f"{type(exc).__name__}: {exc}"}
            for c in claims:
                if c.kind == "speed" or results[c.id]["why"]:
                    continue
                if measure.config_key(c, acc_shape(c)[0]) != key:
                    continue
                r = results[c.id]
                r["T"] = m.get("T")
                try:
                    if "error" in m:
                        raise RuntimeError(m["error"])
                    v = m["oracle_s"] if c.kind == "oracle_time" else measure.accuracy_value(c, m)
                    r["values"].append(v)
                except measure.NotRunnable as exc:
                    r["why"] = str(exc)
                except Exception as exc:
                    r["error"] = f"{type(exc).__name__}: {exc}"
        for key in speed_keys:
            print(f"audit: seed {seed} speed {key}", file=sys.stderr)
            try:
                s = measure.SpeedSession(key, seed, warmup_ms, rep_ms)
            except Exception as exc:
                s = None
                err = f"{type(exc).__name__}: {exc}"
            for c in claims:
                if c.kind != "speed" or measure.config_key(c, shapes[c.shape]) != key:
                    continue
                r = results[c.id]
                try:
                    if s is None:
                        raise RuntimeError(err)
                    r["T"] = s.case.T
                    r["values"].append(measure.speed_value(c, s, ceiling))
                except measure.NotRunnable as exc:
                    r["why"] = str(exc)
                except Exception as exc:
                    r["error"] = f"{type(exc).__name__}: {exc}"
            if s is not None:
                s.close()
    # ---- verdicts
    rows = []
    for c in claims:
        r = results[c.id]
        vals = r["values"]
        shape = dict(shapes[c.shape]) if c.kind == "speed" else acc_shape(c)[0]
        reduced = c.kind != "speed" and acc_shape(c)[1]
        row: dict[str, Any] = {
            "id": c.id,
            "statement": c.statement,
            "source": c.source,
            "definition": c.definition,
            "kind": c.kind,
            "metric": c.metric,
            "comparison": c.comparison,
            "threshold": c.threshold,
            "statistic": c.statistic,
            "seeds": seeds,
            "values": vals,
            "shape_claimed": {"name": c.shape, **shapes[c.shape]},
            "shape_measured": {**shape, "T": r.get("T")},
            "reduced_shape": reduced,
            "made_for": c.made_for,
            "measured_on": ver["gpu"],
            "command": _command(c, args, len(seeds)),
        }
        if r["why"]:
            row["verdict"], row["reason"] = "not runnable here", r["why"]
        elif r.get("error") or len(vals) != len(seeds):
            row["verdict"], row["reason"] = "error", r.get("error", "missing seeds")
        else:
            x, ok = c.decide(vals)
            row.update(verdict="confirmed" if ok else "refuted", deciding_value=x)
            row.update(min=min(vals), median=statistics.median(vals), max=max(vals))
            notes = []
            if c.made_for and c.made_for != ver["gpu"]:
                notes.append(f"measured on {ver['gpu']}; the claim was made for {c.made_for}")
            if reduced:
                notes.append(
                    f"at reduced shape B={shape['B']} max_len={shape['max_len']}, not "
                    f"shape {c.shape}"
                )
            row["reason"] = "; ".join(notes) or None
        rows.append(row)
    md = _markdown(rows, ver)
    print(md)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "audit.md").write_text(md)
        payload = {"meta": {**ver, "finished": session.timestamp()}, "claims": rows}
        (args.out / "audit.json").write_text(json.dumps(payload, indent=1, default=str))
    refuted = any(r["verdict"] == "refuted" for r in rows)
    errors = any(r["verdict"] == "error" for r in rows)
    return 1 if errors or (args.fail_on_refuted and refuted) else 0


def _markdown(rows: list[dict[str, Any]], ver: dict[str, Any]) -> str:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    lines = [
        f"## blockattn audit: {', '.join(f'{v} {k}' for k, v in counts.items())}",
        "",
        f"Measured on {ver['device']} ({ver['gpu']}), commit {ver['commit']}, torch "
        f"{ver['torch']} (CUDA {ver['cuda']}), triton {ver['triton']}, Python {ver['python']}.",
        "",
        "| claim | statement | verdict | decides | threshold | min | median | max | seeds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| `{r['id']}` | {r['statement']} | **{r['verdict']}** | "
            f"{r['statistic']} {_fmt(r.get('deciding_value'))} | {r['comparison']} "
            f"{r['threshold']:g} | {_fmt(r.get('min'))} | {_fmt(r.get('median'))} | "
            f"{_fmt(r.get('max'))} | {len(r['values'])}/{len(r['seeds'])} |"
        )
    lines += ["", "### Details", ""]
    for r in rows:
        lines.append(f"- `{r['id']}` ({r['source']}): {r['definition']}")
        if r.get("reason"):
            lines.append(f"  - {r['verdict']}: {r['reason']}")
        lines.append(f"  - reproduce: `{r['command']}`")
    return "\n".join(lines) + "\n"
