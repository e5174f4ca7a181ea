"""`blockattn merge`: join the report directories of `--shard I/N` runs into one, for one verdict.

A CI matrix runs `blockattn run|gate --shard I/N --out DIR_I` on N runners; `merge` checks that
the shards belong together (same options apart from the shard, same tolerance file, every shard
1..N present exactly once, no case in two shards) and writes one directory that `blockattn gate
--report MERGED` judges and `blockattn report MERGED` renders. It fails closed: a missing shard
is a usage error (exit 2), never a smaller run that passes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HELP = "join the report dirs of --shard I/N runs into one (checks they cover 1..N exactly once)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dirs", nargs="+", type=Path, help="shard report directories (run or gate)")
    p.add_argument("--out", type=Path, required=True, help="merged report directory (new)")


def _options(d: Path) -> dict:
    from blockattn.run.session import RUN_OPTIONS

    p = d / RUN_OPTIONS
    if not p.is_file():
        raise ValueError(f"{d}: no {RUN_OPTIONS} (not a run/gate directory of this blockattn)")
    return json.loads(p.read_text())


def main(args: argparse.Namespace) -> int:
    from blockattn.report import report_json
    from blockattn.run import session
    from blockattn.run.results import ResultsWriter, load_records

    if args.out.exists() and any(args.out.iterdir()):
        raise ValueError(f"--out {args.out}: exists and is not empty")
    for d in args.dirs:
        session.check_not_in_use(d, "merge")
    opts = {d: _options(d) for d in args.dirs}
    shards = {d: tuple(o["selection"].get("shard") or (1, 1)) for d, o in opts.items()}
    counts = {n for _, n in shards.values()}
    if len(counts) != 1:
        raise ValueError(f"shards of different splits: {sorted(set(shards.values()))}")
    (n,) = counts
    seen: dict[int, Path] = {}
    for d, (i, _) in shards.items():
        if i in seen:
            raise ValueError(f"shard {i}/{n} given twice: {seen[i]} and {d}")
        seen[i] = d
    missing = sorted(set(range(1, n + 1)) - set(seen))
    if missing:
        raise ValueError(f"missing shard(s) {', '.join(f'{i}/{n}' for i in missing)}: a merge of "
                         "part of the cases would pass on less than was asked")  # fmt: skip
    first = next(iter(opts.values()))

    def strip(o: dict) -> dict:
        o = {k: v for k, v in o.items() if k not in session.NOT_OPTIONS}
        return {**o, "selection": {**o["selection"], "shard": None}}

    def software(o: dict) -> dict:  # shards may run on several GPUs of one kind
        ident = o.get(session.IDENTITY) or {}
        return {k: ident.get(k) for k in ("providers", "device", "versions")}

    for d, o in opts.items():
        diff = sorted(k for k in {*o, *first} if strip(o).get(k) != strip(first).get(k))
        if diff:
            raise ValueError(f"{d}: run with other options than {args.dirs[0]}: {diff}")
        changed = session._identity_diff(software(first), software(o))
        if changed:
            raise ValueError(f"{d}: run by other kernels, device or versions than "
                             f"{args.dirs[0]}: {'; '.join(changed[:6])}")  # fmt: skip
    records, where = [], {}
    for d in args.dirs:
        torn: list[int] = []
        for r in load_records(d, torn):
            if r["case_id"] in where:
                raise ValueError(f"case {r['case_id']} in two shards: {where[r['case_id']]}, {d}")
            where[r["case_id"]] = d
            records.append(r)
        if torn:
            raise ValueError(f"{d}/results.jsonl has {len(torn)} torn line(s): a shard died; "
                             "resume it (run --resume) before merging")  # fmt: skip
        incomplete = session.completeness(d, [r for r in records if where[r["case_id"]] == d])
        if incomplete:
            raise ValueError(f"{d}: an incomplete shard ({'; '.join(incomplete)}); resume it "
                             "(its command with --resume) before merging")  # fmt: skip
    if not records:
        raise ValueError("the shards hold no case")
    metas = []
    for d in args.dirs:  # report.json is written when a run ends: without it, it did not
        rj = d / "report.json"
        if not rj.is_file():
            raise ValueError(f"{d}: no report.json: the shard is still running or died; "
                             "finish it (run --resume) before merging")  # fmt: skip
        metas.append(json.loads(rj.read_text()).get("meta", {}))
        n_rec = sum(1 for r in records if where[r["case_id"]] == d)
        if metas[-1].get("n_cases") != n_rec:
            raise ValueError(f"{d}: report.json counts {metas[-1].get('n_cases')} cases, "
                             f"results.jsonl holds {n_rec}")  # fmt: skip
    with ResultsWriter(args.out) as w:  # the same fsynced, NaN-free lines a run writes
        for r in records:
            w.write(r)
    meta = {
        **metas[0],
        "merged_from": [str(d) for d in args.dirs],
        "shards": {f"{i}/{n}": str(seen[i]) for i in sorted(seen)},
        "gpus": sorted({m.get("gpu", "?") for m in metas}),
        "n_cases": len(records),
        "command": session.command_line(args),
        "finished": session.timestamp(),
    }
    merged_opts = {**strip(first), session.IDENTITY: first.get(session.IDENTITY)}
    if all(isinstance(o.get(session.PLANNED), list) for o in opts.values()):
        merged_opts[session.PLANNED] = [c for i in sorted(seen)
                                        for c in opts[seen[i]][session.PLANNED]]  # fmt: skip
    (args.out / session.RUN_OPTIONS).write_text(json.dumps(merged_opts, indent=1) + "\n")
    report_json.write_report_json(args.out, records, meta)
    print(f"merged {len(records)} cases from {n} shards into {args.out}; judge with "
          f"`blockattn gate --report {args.out} --tolerances ...`")  # fmt: skip
    return 0
