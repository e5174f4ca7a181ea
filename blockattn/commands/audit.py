"""`blockattn audit`: measure every claim of claims/claims.toml over N seeds and give verdicts.

A claim is measured on the kernel it names (`kernel` in the claims file) and only there: when
that kernel cannot run here (declared hardware, missing library, no CUDA for timings) the claim
is "not runnable here" with the reason. blockattn's standing on the same statement, for claims
about another kernel, is measured and reported on its own line, never as the claim's verdict.
Accuracy claims carry two measures (FP64 oracle: decides; FP32 reference with SNR and
rtol/atol: the claim authors' way) and a sensitivity line over the measure, the seeds and the
input distributions.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
from pathlib import Path
from typing import Any

from blockattn.names import DISTRIBUTIONS

HELP = (
    "audit the accuracy and speed claims (claims/claims.toml), each on the kernel it is about: "
    "confirmed / refuted / not runnable here over N seeds, with min/median/max, blockattn's "
    "standing on the same statement, and how sensitive each verdict is (JSON + Markdown); "
    "`--example-claims PATH` writes a claims file to start from for your own kernel"
)
# `blockattn audit --example-claims`: shipped inside the package, since examples/ is only in
# a clone (tests/harness/test_example_claims.py keeps it equal to examples/claims.toml).
EXAMPLE_CLAIMS = """\
# An example claims file for your own kernel, written by `blockattn audit --example-claims
# [PATH]`; run it with `blockattn audit --provider mine=mypkg.attn:block_attention --claims
# PATH`. The schema, every field with its meaning, is the docstring of blockattn/audit/claims.py.
# `kernel` names the provider a claim is about (here the one given as mine=...): only its
# measurement decides the claim. A threshold is the claim's statement, never a measured value.
schema_version = 2

[shapes.small]  # a shape of your own: B sequences up to max_len tokens, sparsity empty
B = 64
max_len = 1024
sparsity = 0.7
H = 4

[[claim]]
id = "mine-fwd-1.2x-fa2"
statement = "my kernel's forward is at least 1.2x FA v2 at the small shape, bf16, D128"
source = "our design doc"
kind = "speed"
metric = "speedup"
kernel = "mine"
reference = ["fa2"]
pass = "fwd"
shape = "small"
D = 128
dtype = "bfloat16"
comparison = ">="
threshold = 1.2
definition = "median do_bench ms of FA v2 varlen (cu_seqlens at every 64-token block) / my forward, same inputs"

[[claim]]
id = "mine-dq-no-worse-than-fa2"
statement = "my kernel's max dQ error is no larger than FA v2's (ratio <= 1.0)"
source = "our design doc"
kind = "accuracy"
metric = "err_ratio_vs_reference"
kernel = "mine"
reference = "fa2"
tensors = ["dQ"]
shape = "small"
D = 128
dtype = "bfloat16"
comparison = "<="
threshold = 1.0
definition = "max |dQ - dQ_fp64| of my kernel / the same for FA v2, same inputs, worst seed"
"""  # noqa: E501 - TOML lines as the example has them

# CPU defaults for accuracy claims: the interpreter costs ~0.1 s per (64-token block, head), so a
# shape-P case (22 k blocks x 4 heads) is out of reach; B and max_len are capped at these so one
# seed takes seconds (smaller shapes, e.g. a test's, run as given). The verdict is then labelled
# "at reduced shape".
CPU_SHAPE = {"B": 4, "max_len": 256}
# The distribution sweep of accuracy claims on CUDA runs at B scaled by this (the verdict keeps
# the claim's shape): at shape P one case costs ~30 s of host-side input generation.
SWEEP_SCALE_CUDA = 0.125
STANDING = "blockattn"  # whose standing on the same statement is reported beside other kernels'


def _distributions(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
    bad = [n for n in names if n not in DISTRIBUTIONS]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated subset of {', '.join(DISTRIBUTIONS)}, got {text!r}"
        )
    return names


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--claims", type=Path,
                   help="claims TOML (default claims/claims.toml, in a clone); for your own "
                   "kernel start from `blockattn audit --example-claims claims.toml`")  # fmt: skip
    p.add_argument("--example-claims", nargs="?", const="-", metavar="PATH",
                   help="write an example claims file for your own kernel to PATH (or print it "
                   "with no PATH) and exit: it ships inside the package, so it works from "
                   "your own repository")  # fmt: skip
    p.add_argument("--claim", action="append", help="only this claim id (repeatable)")
    p.add_argument("--seeds", type=int, help="seeds per claim (default 5, or 3 with --quick)")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument(
        "--shape-scale",
        type=float,
        help="accuracy/oracle claims: scale the shape's B by this (default 1 on CUDA)",
    )
    p.add_argument("--max-len", type=int, help="accuracy/oracle claims: override max_len")
    p.add_argument("--kind", choices=("speed", "accuracy", "oracle_time"), action="append")
    p.add_argument(
        "--distributions",
        type=_distributions,
        metavar="D1,D2",
        help="accuracy claims: input distributions of the sensitivity sweep (default all six: "
        f"{','.join(DISTRIBUTIONS)}); the claim's own distribution is always measured and "
        "alone decides the verdict",
    )
    p.add_argument(
        "--sweep-shape-scale",
        type=float,
        help="accuracy claims: the distribution sweep runs at the measured shape with B scaled "
        f"by this (default {SWEEP_SCALE_CUDA} on CUDA, 1 on CPU); the verdict is not affected",
    )
    p.add_argument("--quick", action="store_true", help="3 seeds (unless --seeds), shorter reps")
    p.add_argument("--out", type=Path, help="report dir (audit.json, audit.md)")
    p.add_argument("--fail-on-refuted", action="store_true", help="exit 1 if a claim is refuted")
    from blockattn.commands._options import add_provider_option

    add_provider_option(p)


def _versions() -> dict[str, Any]:
    import torch
    import triton

    from blockattn.run.execute import device_info, git_commit
    from blockattn.run.isolated import NOT_ISOLATED

    info = device_info()
    return {
        **info,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "commit": git_commit(),
        # The audit calls the kernels it measures in this process, beside its verdicts: unlike
        # run, gate, contract and bench it has no worker yet (docs/known-limits.md)
        "isolation": f"{NOT_ISOLATED}: the audited kernels run in the audit's own process",
    }


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    if not math.isfinite(x):
        return "inf" if x > 0 else ("-inf" if x < 0 else "nan")
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
    if c.kind == "accuracy" and args.distributions:
        cmd += f" --distributions {','.join(args.distributions)}"
    if c.kind == "accuracy" and args.sweep_shape_scale is not None:
        cmd += f" --sweep-shape-scale {args.sweep_shape_scale:g}"
    for spec in args.provider or []:
        cmd += f" --provider {spec}"
    if args.claims:
        cmd += f" --claims {args.claims}"
    return cmd


def _entry(key: tuple) -> dict[str, Any]:
    return {"key": key, "values": [], "fp32": [], "why": None, "error": None, "T": None}


def _summary(c, e: dict[str, Any], n_seeds: int) -> dict[str, Any]:
    """Verdict of one measured entry: holds / fails with min/median/max, or why not."""
    if e["why"]:
        return {"status": "not runnable here", "reason": e["why"]}
    vals = e["values"]
    if e["error"] or len(vals) != n_seeds:
        return {"status": "error", "reason": e["error"] or "missing seeds"}
    x, ok = c.decide(vals)
    return {"status": "holds" if ok else "fails", "value": x, "min": min(vals),
            "median": statistics.median(vals), "max": max(vals)}  # fmt: skip


def main(args: argparse.Namespace) -> int:
    from blockattn import providers as registry
    from blockattn.audit import claims as claims_mod
    from blockattn.audit import measure
    from blockattn.run import session
    from blockattn.run.execute import device_info

    if args.example_claims is not None:
        if args.example_claims == "-":
            print(EXAMPLE_CLAIMS, end="")
        else:
            dst = Path(args.example_claims)
            if dst.exists():
                raise ValueError(f"--example-claims {dst}: exists; give a new path")
            dst.write_text(EXAMPLE_CLAIMS)
            print(f"wrote {dst}; run: blockattn audit --provider mine=MODULE:CALLABLE "
                  f"--claims {dst}", file=sys.stderr)  # fmt: skip
        return 0
    if args.seeds is not None and args.seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {args.seeds}")
    if args.shape_scale is not None and not 0 < args.shape_scale <= 1:
        raise ValueError(f"--shape-scale must be in (0, 1], got {args.shape_scale}")
    if args.max_len is not None and args.max_len < 1:
        raise ValueError(f"--max-len must be >= 1, got {args.max_len}")
    if args.sweep_shape_scale is not None and not 0 < args.sweep_shape_scale <= 1:
        raise ValueError(f"--sweep-shape-scale must be in (0, 1], got {args.sweep_shape_scale}")
    registry.load_specs(args.provider)
    shapes, claims = claims_mod.load(args.claims or claims_mod.DEFAULT_CLAIMS)
    if args.claim:
        unknown = set(args.claim) - {c.id for c in claims}
        if unknown:
            raise ValueError(f"--claim: unknown id(s) {sorted(unknown)}")
        claims = [c for c in claims if c.id in args.claim]
    if args.kind:
        claims = [c for c in claims if c.kind in args.kind]
    for c in claims:  # every named kernel must be a provider here (an outside one: --provider)
        if c.kernel == claims_mod.ORACLE:
            continue
        try:
            registry.get(c.kernel)
        except ValueError as exc:
            raise ValueError(f"claims file: claim {c.id!r}: kernel {c.kernel!r}: {exc}") from None
    device = session.setup_device()
    cuda = device == "cuda"
    arch = device_info()["arch"]
    n_seeds = args.seeds or (3 if args.quick else 5)
    seeds = list(range(args.first_seed, args.first_seed + n_seeds))
    warmup_ms, rep_ms = (10.0, 40.0) if args.quick else (25.0, 100.0)
    sweep = args.distributions or DISTRIBUTIONS
    ver = _versions()

    def acc_shape(c) -> tuple[dict[str, Any], bool]:
        """(shape measured, reduced?) for accuracy/oracle claims."""
        s = dict(shapes[c.shape])
        if not cuda and args.shape_scale is None and args.max_len is None:
            s.update({k: min(s[k], v) for k, v in CPU_SHAPE.items()})
        if args.shape_scale is not None:
            s["B"] = max(1, round(s["B"] * args.shape_scale))
        if args.max_len is not None:
            s["max_len"] = args.max_len
        return s, s != shapes[c.shape]

    sweep_scale = args.sweep_shape_scale
    if sweep_scale is None:
        sweep_scale = SWEEP_SCALE_CUDA if cuda else 1.0

    def sweep_shape(c) -> dict[str, Any]:
        """Shape of the distribution sweep: the measured shape with B scaled (input generation
        on the host dominates at shape P: ~30 s a case)."""
        s = acc_shape(c)[0]
        return {**s, "B": max(1, round(s["B"] * sweep_scale))}

    # ---- plan. Subjects of a claim: "claim" (its own kernel: decides) and, for a claim about
    # another kernel, "standing" (blockattn on the same statement, reported apart). Entries:
    # results[id][subject] = {"main": entry (decides), "sweep": {distribution: entry}}; each
    # entry knows its configuration key. Inputs, oracle and provider runs of one configuration
    # and seed are shared by every claim and subject that needs them.
    results: dict[str, dict[str, dict[str, Any]]] = {}
    subjects: dict[str, dict[str, str]] = {}
    acc_needs: dict[tuple, set[str]] = {}
    acc_tols: dict[tuple, set] = {}
    speed_keys: list[tuple] = []
    for c in claims:
        subj = {"claim": c.kernel}
        if c.kernel not in (STANDING, claims_mod.ORACLE):
            subj["standing"] = STANDING
        subjects[c.id] = subj
        results[c.id] = {}
        for role, kern in subj.items():
            if c.kind == "speed":
                main = _entry(measure.speed_key(c, shapes[c.shape]))
            else:
                main = _entry(measure.config_key(c, acc_shape(c)[0]))
            sw = {}
            if role == "claim" and c.kind == "accuracy":
                sw = {d: _entry(measure.config_key(c, sweep_shape(c), d)) for d in sweep}
            results[c.id][role] = {"main": main, "sweep": sw}
            entries = [main, *sw.values()]
            why = []
            if c.kind != "accuracy" and not cuda:
                why.append("needs CUDA (interpreter timings mean nothing)" if c.kind == "speed"
                           else "needs CUDA (the claim is a GPU wall time)")  # fmt: skip
            if kern != claims_mod.ORACLE:
                refused = measure.refusal(kern, c, device, arch)
                if refused:
                    why.append(refused)
            if why:
                for e in entries:
                    e["why"] = "; ".join(why)
                continue
            if c.kind == "speed":
                if main["key"] not in speed_keys:
                    speed_keys.append(main["key"])
                continue
            for key in (e["key"] for e in entries):
                want = {kern, *c.reference} if c.kind == "accuracy" else set()
                acc_needs.setdefault(key, set()).update(want)
                if c.kind == "accuracy":
                    acc_tols.setdefault(key, set()).add(measure.tols(c))
    ceiling = None
    if cuda and speed_keys and any(c.metric == "pct_of_copy_ceiling" for c in claims):
        from blockattn.bench.measure import copy_ceiling

        ceiling = copy_ceiling(2 << 30, warmup_ms, rep_ms, False)["tbps"]

    def record(e: dict[str, Any], fn) -> None:
        if e["why"] or e["error"]:
            return
        try:
            v = fn()
            if isinstance(v, tuple):
                e["values"].append(v[0])
                e["fp32"].append(v[1])
            else:
                e["values"].append(v)
        except measure.NotRunnable as exc:
            e["why"] = str(exc)
        except Exception as exc:
            e["error"] = f"{type(exc).__name__}: {exc}"

    for seed in seeds:
        for key, provs in acc_needs.items():
            print(f"audit: seed {seed} accuracy {key}", file=sys.stderr)
            try:
                m = measure.accuracy_config(key, provs, seed, device, acc_tols.get(key))
            except Exception as exc:  # recorded per claim, never fatal
                m = {"error": f"{type(exc).__name__}: {exc}"}
            for c in claims:
                if c.kind == "speed":
                    continue
                for role, kern in subjects[c.id].items():
                    r = results[c.id][role]
                    for e in (r["main"], *r["sweep"].values()):
                        if e["key"] != key:
                            continue
                        e["T"] = m.get("T")

                        def value(c=c, kern=kern, role=role, m=m):
                            if "error" in m:
                                raise RuntimeError(m["error"])
                            if c.kind == "oracle_time":
                                return m["oracle_s"]
                            v = measure.accuracy_value(c, m, kernel=kern)
                            return (v, measure.fp32_measures(c, m)) if role == "claim" else v

                        record(e, value)
        for key in speed_keys:
            print(f"audit: seed {seed} speed {key}", file=sys.stderr)
            try:
                s, err = measure.SpeedSession(key, seed, warmup_ms, rep_ms), None
            except Exception as exc:
                s, err = None, f"{type(exc).__name__}: {exc}"
            for c in claims:
                if c.kind != "speed" or measure.speed_key(c, shapes[c.shape]) != key:
                    continue
                for role, kern in subjects[c.id].items():
                    for e in (results[c.id][role]["main"],):

                        def value(c=c, kern=kern, e=e, s=s, err=err):
                            if s is None:
                                raise RuntimeError(err)
                            e["T"] = s.case.T
                            return measure.speed_value(c, s, ceiling, kernel=kern)

                        record(e, value)
            if s is not None:
                s.close()
    # ---- verdicts
    rows = [_row(c, results[c.id], subjects[c.id], shapes, acc_shape, seeds, ver, args)
            for c in claims]  # fmt: skip
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


def _row(c, res, subj, shapes, acc_shape, seeds, ver, args) -> dict[str, Any]:
    e = res["claim"]["main"]
    vals = e["values"]
    shape = dict(shapes[c.shape]) if c.kind == "speed" else acc_shape(c)[0]
    reduced = c.kind != "speed" and acc_shape(c)[1]
    row: dict[str, Any] = {
        "id": c.id,
        "kernel": c.kernel,
        "statement": c.statement,
        "source": c.source,
        "definition": c.definition,
        "kind": c.kind,
        "metric": c.metric,
        "comparison": c.comparison,
        "threshold": c.threshold,
        "statistic": c.statistic,
        "distribution": c.distribution,
        "seeds": seeds,
        "values": vals,
        "shape_claimed": {"name": c.shape, **shapes[c.shape]},
        "shape_measured": {**shape, "T": e.get("T")},
        "reduced_shape": reduced,
        "made_for": c.made_for,
        "measured_on": ver["gpu"],
        "command": _command(c, args, len(seeds)),
    }
    summ = _summary(c, e, len(seeds))
    if summ["status"] in ("not runnable here", "error"):
        row["verdict"], row["reason"] = summ["status"], summ["reason"]
    else:
        row["verdict"] = "confirmed" if summ["status"] == "holds" else "refuted"
        row["deciding_value"] = summ["value"]
        row.update({k: summ[k] for k in ("min", "median", "max")})
        notes = []
        if c.made_for and c.made_for != ver["gpu"]:
            notes.append(f"measured on {ver['gpu']}; the claim was made for {c.made_for}")
        if reduced:
            notes.append(
                f"at reduced shape B={shape['B']} max_len={shape['max_len']}, not shape {c.shape}"
            )
        row["reason"] = "; ".join(notes) or None
        if c.kind == "accuracy":
            row["fp32_reference"] = _fp32_summary(c, e["fp32"])
            sw = res["claim"]["sweep"]
            row["distributions"] = {d: _summary(c, de, len(seeds)) for d, de in sw.items()}
            if sw:
                k = next(iter(sw.values()))["key"]
                row["sweep_shape"] = {"B": k[3], "max_len": k[4], "sparsity": k[5], "H": k[6],
                                      "T": next(iter(sw.values()))["T"]}  # fmt: skip
            row["sensitivity"] = _sensitivity(c, row)
    if "standing" in subj:
        st = _summary(c, res["standing"]["main"], len(seeds))
        row["standing"] = {"kernel": subj["standing"], **st}
    return row


def _fp32_summary(c, per_seed: list[dict[str, Any]]) -> dict[str, Any]:
    from blockattn.audit.measure import tols

    vals = [m["value"] for m in per_seed]
    x, ok = c.decide(vals)
    rtol, atol = tols(c)
    out = {
        "values": vals,
        "deciding_value": x,
        "holds": ok,
        "snr_db_min": min(m["snr_db"] for m in per_seed),
        "rtol": rtol,
        "atol": atol,
        "tolerances": "claim's" if c.rtol is not None else "torch.testing defaults",
        "allclose_ratio_max": max(m["allclose_ratio"] for m in per_seed),
        "mismatch_pct_max": max(m["mismatch_pct"] for m in per_seed),
        "ref32_err_over_floor_max": max(m["ref32_err_over_floor"] for m in per_seed),
        "per_seed": per_seed,
    }
    out["allclose_pass"] = out["allclose_ratio_max"] <= 1.0
    if c.reference:
        out["snr_db_min_reference"] = min(m["snr_db_reference"] for m in per_seed)
        out["allclose_ratio_max_reference"] = max(m["allclose_ratio_reference"] for m in per_seed)
    return out


def _sensitivity(c, row: dict[str, Any]) -> dict[str, Any]:
    """Does the verdict move with the measure, the seed or the input distribution?"""
    holds = row["verdict"] == "confirmed"
    f32 = row["fp32_reference"]
    per_seed = [c.decide([v])[1] for v in row["values"]]
    dist_ok = {d: s["status"] == "holds" for d, s in row["distributions"].items()
               if s["status"] in ("holds", "fails")}  # fmt: skip
    return {
        "measure_flips": f32["holds"] != holds,
        "seeds_disagree": len(set(per_seed)) > 1,
        "distributions_flipping": sorted(d for d, ok in dist_ok.items() if ok != holds),
    }


def _sensitivity_line(r: dict[str, Any]) -> str:
    f = r["fp32_reference"]
    word = {True: "holds", False: "fails"}
    snr = f"SNR {_fmt(f['snr_db_min'])} dB"
    if "snr_db_min_reference" in f:
        snr += f" (reference {_fmt(f['snr_db_min_reference'])} dB)"
    ac = (f"allclose rtol={f['rtol']:g} atol={f['atol']:g} "
          f"{'pass' if f['allclose_pass'] else 'fail'} (worst {_fmt(f['allclose_ratio_max'])}x "
          f"the tolerance, {_fmt(f['mismatch_pct_max'])} % elements over)")  # fmt: skip
    ours = word[r["verdict"] == "confirmed"]
    measure = (f"measure: FP64 oracle {_fmt(r['deciding_value'])} ({ours}), FP32 reference "
               f"{_fmt(f['deciding_value'])} ({word[f['holds']]}), {snr}, {ac}")  # fmt: skip
    s = r["sensitivity"]
    agree = "verdict differs between seeds" if s["seeds_disagree"] else "same verdict every seed"
    seeds = f"seeds: {_fmt(r['min'])}-{_fmt(r['max'])} ({agree})"
    ds = []
    for d, x in r["distributions"].items():
        if x["status"] in ("holds", "fails"):
            ds.append(f"{d} {_fmt(x['value'])} {'✓' if x['status'] == 'holds' else '✗'}")
        else:
            ds.append(f"{d} {x['status']}")
    flips = s["distributions_flipping"]
    sh = r.get("sweep_shape") or {}
    at = f" at B={sh.get('B')} max_len={sh.get('max_len')}" if sh else ""
    dist = f"distributions{at}: " + ", ".join(ds)
    if flips:
        dist += f" (verdict flips on {', '.join(flips)})"
    return f"sensitivity: {measure}; {seeds}; {dist}"


def _standing_line(r: dict[str, Any]) -> str:
    st = r["standing"]
    lead = f"{st['kernel']} on the same statement (not this claim's verdict): "
    if st["status"] in ("holds", "fails"):
        return (lead + f"{_fmt(st['value'])} ({st['status']}; min {_fmt(st['min'])}, median "
                f"{_fmt(st['median'])}, max {_fmt(st['max'])})")  # fmt: skip
    return lead + f"{st['status']}: {st['reason']}"


def _markdown(rows: list[dict[str, Any]], ver: dict[str, Any]) -> str:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    lines = [
        f"## blockattn audit: {', '.join(f'{v} {k}' for k, v in counts.items())}",
        "",
        f"Measured on {ver['device']} ({ver['gpu']}, {ver['arch']}), commit {ver['commit']}, "
        f"torch {ver['torch']} (CUDA {ver['cuda']}), triton {ver['triton']}, Python "
        f"{ver['python']}. Each claim is measured on the kernel it names, and only there.",
        "",
        f"**{ver['isolation']}**: a kernel that patches the judge or writes its files is not "
        "caught here; `blockattn gate` and `contract` judge a kernel from a worker.",
        "",
        "| claim | kernel | verdict | decides | threshold | min | median | max | FP32 ref "
        "| seeds |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        f32 = r.get("fp32_reference")
        lines.append(
            f"| `{r['id']}` | {r['kernel']} | **{r['verdict']}** | "
            f"{r['statistic']} {_fmt(r.get('deciding_value'))} | {r['comparison']} "
            f"{r['threshold']:g} | {_fmt(r.get('min'))} | {_fmt(r.get('median'))} | "
            f"{_fmt(r.get('max'))} | {_fmt(f32['deciding_value']) if f32 else '-'} | "
            f"{len(r['values'])}/{len(r['seeds'])} |"
        )
    lines += ["", "### Details", ""]
    for r in rows:
        lines.append(f"- `{r['id']}` about {r['kernel']}: {r['statement']} ({r['source']})")
        if r.get("reason"):
            lines.append(f"  - {r['verdict']}: {r['reason']}")
        if r.get("sensitivity"):
            lines.append(f"  - {_sensitivity_line(r)}")
        if r.get("standing"):
            lines.append(f"  - {_standing_line(r)}")
        lines.append(f"  - reproduce: `{r['command']}`")
    return "\n".join(lines) + "\n"
