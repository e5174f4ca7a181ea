"""Multi-GPU CI on one host: how many xdist workers, in which order the tests go, the cost table
they are ordered by, and the scaling table (issue 44 item 4).

- `workers`: as many pytest-xdist workers as the CPU, the host memory and the GPUs' memory allow
  (each worker is pinned to GPU `N mod n_gpus` by blockattn/run/env.py, so W workers put W/n on
  each GPU).
- Test order: with BLOCKATTN_TEST_COSTS=FILE (seconds per test node id; on a GPU by default
  ci/baselines/test_costs_gpu.json, set it empty for collection order), tests/conftest.py hands
  the collected items to `order_items`, which puts them longest first in units for xdist's
  `loadgroup` scheduler: a test is a unit, except tests sharing a fixture built once per module
  or class, which stay on one worker (else each worker that draws one of them builds it again:
  an H200 tier at d06df21 rebuilt `blockattn bench --smoke` four times, the last two past its
  limit). Each worker starts with two units (LPT's pairing of the 2W longest: longest with the
  2W-th, ...), then takes the next longest whenever it runs low (greedy list scheduling). A
  test the table does not know counts as the median known test. The order is a pure function
  of the collection and the table, so every worker collects the same list (xdist requires it).
- `costs DIR OUT`: the table, merged from a run's BLOCKATTN_WORKER_LOG files (each worker's
  per-test seconds, setup + call + teardown).
- `table`: the Markdown timing table of a scaling run and its verdict (N GPUs >= 0.8 N times as
  fast as one GPU of the same host at its best -n; a one-GPU run cut by its limit gives a
  lower bound).
- `top OUT`: where the time went in a ci/tier_scaling.sh run (sums, longest test, busiest GPU,
  the same tests' seconds in both runs, work done by equal elapsed times, CPU and GPU
  utilisation, failed tests, the costliest tests).
- `sample FILE`: CPU busy % and each GPU's utilisation every second, until killed.

Used by tests/conftest.py (loaded by path: no import of blockattn here) and ci/multi_gpu.sh,
ci/tier_scaling.sh.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

COSTS_ENV = "BLOCKATTN_TEST_COSTS"
# Sized from the H200 runs of 2026-11-27: one GPU with 16 cores ran the tier fastest at -n 12.
CORES_PER_WORKER = 4 / 3
HOST_GIB_PER_WORKER = 4.0  # torch + triton + the worker-process kernel host + FP64 oracles
GPU_GIB_PER_WORKER = 5.0  # a CUDA context (~0.6 GiB) + the largest test's tensors
SCALING_GOAL = 0.8  # N GPUs must be >= 0.8 N times as fast as one
SHARED_SCOPES = frozenset({"module", "class", "package"})  # fixtures built once per worker
GROUP_PREFIX = "blockattn-shared:"  # xdist_group names of tests kept on one worker


# ----------------------------------------------------------------------------- worker count


def _host_gib() -> float:
    """The memory this host lets us use: the cgroup limit where one is set, else MemTotal.
    (A lent multi-GPU VM's MemTotal starts small and grows as used: the cgroup limit, where
    numeric, is the real bound.)"""
    try:
        raw = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if raw.isdigit():
            return int(raw) / 2**30
    except OSError:
        pass
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 0.0


def _gpu_gib() -> list[float]:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,"
                              "nounits"], capture_output=True, text=True, timeout=30,
                             check=False).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return []
    return [int(x) / 1024 for x in out.split() if x.strip().isdigit()]


def worker_count(n_gpus: int, cores: int, host_gib: float, gpu_gib: float) -> int:
    """xdist workers for n_gpus GPUs: the fewest of what the cores, the host memory and each
    GPU's memory carry, rounded down to a multiple of n_gpus (every GPU the same share), at
    least one per GPU."""
    n_gpus = max(1, n_gpus)
    by_cpu = int(cores / CORES_PER_WORKER)
    by_host = int(host_gib / HOST_GIB_PER_WORKER) if host_gib else by_cpu
    by_gpu = n_gpus * int(gpu_gib / GPU_GIB_PER_WORKER) if gpu_gib else by_cpu
    w = min(by_cpu, by_host, by_gpu)
    return max(n_gpus, w - w % n_gpus)


# ----------------------------------------------------------------------------- test order


def load_test_costs(path: str | Path) -> dict[str, float]:
    data = json.loads(Path(path).read_text())
    table = data.get("tests", data) if isinstance(data, dict) else {}
    return {str(k): float(v) for k, v in table.items() if isinstance(v, int | float)}


def lpt_units(ids: list[str], costs: dict[str, float], workers: int,
              groups: dict[str, str] | None = None) -> list[list[str]]:  # fmt: skip
    """The ids as units of work, longest first. A test is its own unit unless `groups` names
    its group (tests sharing a fixture built once per module or class): a group's tests stay
    together in collection order, one unit (so the fixture is built once), cut into chunks of at
    most max(the longest test, total / 2W) seconds. The 2W longest units go out paired for
    xdist's first two per worker: worker k gets unit k and unit 2W - 1 - k."""
    known = [costs[i] for i in ids if i in costs]
    default = statistics.median(known) if known else 0.0
    cost = {i: costs.get(i, default) for i in ids}
    w = max(1, workers)
    cap = max([*cost.values(), sum(cost.values()) / (2 * w)], default=0.0)
    groups = groups or {}
    units: list[list[str]] = []
    open_: dict[str, list[str]] = {}  # each group's chunk being filled
    for i in ids:
        g = groups.get(i)
        if g is None:
            units.append([i])
            continue
        u = open_.get(g)
        if u is None or sum(cost[x] for x in u) + cost[i] > cap:
            u = open_[g] = []
            units.append(u)
        u.append(i)
    pos = {id(u): k for k, u in enumerate(units)}
    desc = sorted(units, key=lambda u: (-sum(cost[x] for x in u), pos[id(u)]))
    if len(desc) < 2 * w:
        return desc
    return desc[:w] + desc[w : 2 * w][::-1] + desc[2 * w :]


def lpt_order(ids: list[str], costs: dict[str, float], workers: int,
              groups: dict[str, str] | None = None) -> list[str]:  # fmt: skip
    """The ids in `lpt_units` order, flattened."""
    return [i for u in lpt_units(ids, costs, workers, groups) for i in u]


def costs_path(env: dict[str, str] | None = None,
               default: str | Path | None = None) -> str | None:  # fmt: skip
    """The cost table tests go by: BLOCKATTN_TEST_COSTS, else `default` (tests/conftest.py: the
    GPU tier's table on a GPU); the variable set empty: none (collection order)."""
    env = os.environ if env is None else env
    path = env.get(COSTS_ENV, default)
    return str(path) if path else None


def shared_fixture_file(item: Any) -> str | None:
    """The test file of a pytest item that uses a fixture built once per module, class or
    package (each worker that runs any of its tests builds it again), else None."""
    info = getattr(item, "_fixtureinfo", None)
    for defs in getattr(info, "name2fixturedefs", {}).values():
        if defs and getattr(defs[-1], "scope", "function") in SHARED_SCOPES:
            return item.nodeid.split("::")[0]
    return None


def order_items(items: list[Any], path: str | None,
                env: dict[str, str] | None = None) -> dict[str, str] | None:  # fmt: skip
    """Reorder pytest items in place, longest first by the cost table at `path` (no-op and None
    for no table). Returns the xdist group of each test that must share a worker with others
    (its group's chunk, `lpt_units`): tests/conftest.py marks them `xdist_group` and runs xdist's
    `loadgroup` scheduler, which sends one unit at a time in this order."""
    if not path:
        return None
    env = os.environ if env is None else env
    costs = load_test_costs(path)
    workers = int(env.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    files = {it.nodeid: f for it in items if (f := shared_fixture_file(it))}
    units = lpt_units([it.nodeid for it in items], costs, workers, files)
    by_id = {it.nodeid: it for it in items}
    items[:] = [by_id[i] for u in units for i in u]
    names: dict[str, str] = {}
    chunks: dict[str, int] = {}  # a group's chunks so far
    for u in units:
        if (f := files.get(u[0])) is not None:
            chunks[f] = chunks.get(f, -1) + 1
            names.update((i, f"{GROUP_PREFIX}{f}#{chunks[f]}") for i in u)
    return names


def base_nodeid(nodeid: str) -> str:
    """A node id without the `@group` suffix xdist's loadgroup adds to grouped tests (the cost
    table and the worker logs key tests by their plain ids)."""
    head, sep, tail = nodeid.rpartition("@")
    return head if sep and tail.startswith(GROUP_PREFIX) else nodeid


def append_duration(log_dir: str | Path, worker: str, nodeid: str, seconds: float,
                    failed: bool = False) -> None:  # fmt: skip
    """One line of DIR/<worker>.durations.jsonl as each test ends (conftest's teardown hook):
    its seconds, the wall clock when it ended (progress at equal elapsed time across runs) and
    whether a phase failed (a run cut before its summary still names its failures)."""
    Path(log_dir).mkdir(parents=True, exist_ok=True)
    row: dict[str, Any] = {"test": nodeid, "s": round(seconds, 4), "end": round(time.time(), 2)}
    if failed:
        row["failed"] = True
    with (Path(log_dir) / f"{worker}.durations.jsonl").open("a") as f:
        f.write(json.dumps(row) + "\n")


def merge_durations(worker_dir: str | Path) -> dict[str, Any]:
    """The cost table of a run: every worker's per-test seconds (BLOCKATTN_WORKER_LOG files:
    the lines written as tests end, then the session-end files where the run finished)."""
    tests: dict[str, float] = {}
    for f in sorted(Path(worker_dir).glob("*.durations.jsonl")):
        for line in f.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:  # a line cut by a kill
                continue
            tests[row["test"]] = float(row["s"])
    for f in sorted(Path(worker_dir).glob("*.json")):
        tests.update(json.loads(f.read_text()).get("durations", {}))
    return {"unit": "seconds per test node id (setup + call + teardown)",
            "total_s": round(sum(tests.values()), 2),
            "tests": dict(sorted(tests.items()))}  # fmt: skip


def simulate(order: list[str] | list[list[str]], costs: dict[str, float],
             workers: int) -> float:  # fmt: skip
    """Makespan of greedy list scheduling of `order` (tests, or units of tests that run on one
    worker, as `lpt_units` gives) on `workers` workers."""
    load = [0.0] * max(1, workers)
    for u in order:
        k = min(range(len(load)), key=load.__getitem__)
        load[k] += sum(costs.get(i, 0.0) for i in ([u] if isinstance(u, str) else u))
    return max(load)


# ----------------------------------------------------------------------------- scaling table


def scaling_table(rows: list[dict[str, Any]]) -> tuple[str, bool | None]:
    """Markdown table of timed tier runs (gpus, workers, order, wall_s, passed) and the verdict:
    the fastest run on N > 1 GPUs against the fastest on one GPU (its best -n among those
    timed): speedup >= 0.8 N. A one-GPU run cut by its limit (ok False, exit 124) took at least
    its wall time, so it bounds the speedup from below: enough to say 'met' when that bound
    already reaches the goal, never 'NOT met'. None when either side is missing or unsettled."""
    lines = ["| run | GPUs | xdist workers | per GPU | order | cache | wall s | result |",
             "|---|---:|---:|---:|---|---|---:|---|"]  # fmt: skip
    for r in rows:
        cut = not r.get("ok", True) and r.get("exit") == 124
        wall = f"> {r['wall_s']:.1f} (cut)" if cut else f"{r['wall_s']:.1f}"
        lines.append(f"| {r['name']} | {r['gpus']} | {r['workers']} | "
                     f"{r['workers'] / r['gpus']:g} | {r.get('order', 'collection')} | "
                     f"{r.get('cache', 'cold')} | {wall} | {r.get('result', '')} |")  # fmt: skip
    one = [r for r in rows if r["gpus"] == 1 and r.get("ok", True)]
    one_cut = [r for r in rows if r["gpus"] == 1 and not r.get("ok", True) and r.get("exit") == 124]
    many = [r for r in rows if r["gpus"] > 1 and r.get("ok", True)]
    if not many or not (one or one_cut):
        return "\n".join(lines), None
    bestn = min(many, key=lambda r: r["wall_s"])
    n = bestn["gpus"]
    goal = SCALING_GOAL * n
    best1 = min(one + one_cut, key=lambda r: r["wall_s"])
    speedup = best1["wall_s"] / bestn["wall_s"]
    if best1.get("ok", True):  # exact: the fastest one-GPU run finished
        ok: bool | None = speedup >= goal
        verdict = f"**{speedup:.2f}x**; goal >= {goal:.2f}x ({SCALING_GOAL} N): " \
                  f"**{'met' if ok else 'NOT met'}**."  # fmt: skip
    else:  # the fastest one-GPU figure is a cut run's: a lower bound
        ok = True if speedup >= goal else None
        verdict = (f"**at least {speedup:.2f}x** ({best1['name']} was cut at its limit); goal >= "
                   f"{goal:.2f}x ({SCALING_GOAL} N): "
                   f"**{'met' if ok else 'not settled by this run'}**.")  # fmt: skip
    lines += ["", f"{n} GPUs ({bestn['name']}) vs one GPU at its best -n among those timed "
              f"({best1['name']}): {verdict}"]  # fmt: skip
    return "\n".join(lines), ok


def run_costs(out_dir: str | Path) -> str:
    """Where the time went, per timed run of ci/tier_scaling.sh OUT: the sum of test seconds,
    that sum over the workers (the makespan if the work split perfectly), the longest test (no
    split beats it), and the busiest GPU's share (worker gwK on GPU K mod n); then the tests
    that cost most in the one-GPU and the N-GPU runs."""
    out = Path(out_dir)
    runs = json.loads((out / "runs.json").read_text())
    lines = [
        "| run | tests ended | sum of test s | sum / workers | longest test s | "
        "busiest GPU: sum of test s | wall s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    tables: dict[str, dict[str, float]] = {}
    for r in runs:
        wdir = out / f"{r['name']}_workers"
        tests = merge_durations(wdir)["tests"]
        tables[r["name"]] = tests
        per_gpu = [0.0] * max(1, r["gpus"])
        for f in wdir.glob("*.durations.jsonl"):
            k = int(f.name.split(".")[0].removeprefix("gw") or 0) % len(per_gpu)
            for line in f.read_text().splitlines():
                try:
                    per_gpu[k] += float(json.loads(line)["s"])
                except (json.JSONDecodeError, KeyError):
                    continue
        total = sum(tests.values())
        lines.append(f"| {r['name']} | {len(tests)} | {total:.0f} | {total / r['workers']:.1f} | "
                     f"{max(tests.values(), default=0):.1f} | {max(per_gpu):.0f} | "
                     f"{r['wall_s']:.1f} |")  # fmt: skip
    one = [r["name"] for r in runs if r["gpus"] == 1]
    many = [r["name"] for r in runs if r["gpus"] > 1]
    cols = one[:1] + many[:1]
    lines += _extra_sections(out, runs, tables, cols)
    if cols:
        ref = tables[cols[0]]
        lines += ["", f"Top 25 tests by seconds in {cols[0]}:", "",
                  "| test | " + " | ".join(f"{c} s" for c in cols) + " |",
                  "|---|" + "---:|" * len(cols)]  # fmt: skip
        for t in sorted(ref, key=ref.__getitem__, reverse=True)[:25]:
            vals = " | ".join(f"{tables[c].get(t, float('nan')):.1f}" for c in cols)
            lines.append(f"| `{t}` | {vals} |")
    return "\n".join(lines)


def _lines(wdir: Path) -> list[dict[str, Any]]:
    rows = []
    for f in sorted(wdir.glob("*.durations.jsonl")):
        for line in f.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def _extra_sections(out: Path, runs: list[dict[str, Any]], tables: dict[str, dict[str, float]],
                    cols: list[str]) -> list[str]:  # fmt: skip
    """run_costs' comparisons: the same tests' seconds in the one-GPU and the N-GPU run; the
    work done by equal elapsed times (in the warm-up's seconds, a yardstick common to both);
    mean CPU and GPU utilisation per run (util.tsv from `sample`); the failed tests."""
    lines: list[str] = []
    if len(cols) == 2:
        a, b = (tables[c] for c in cols)
        common = set(a) & set(b)
        sa, sb = sum(a[t] for t in common), sum(b[t] for t in common)
        lines += ["", f"The {len(common)} tests that ended in both {cols[0]} and {cols[1]}: "
                  f"{sa:.0f} s and {sb:.0f} s of test time ({sa / sb if sb else float('nan'):.2f}x;"
                  " with the same workers and order, the makespans go as this ratio)."]  # fmt: skip
    yard_path = out / "test_costs.json"
    timed = [r for r in runs if r.get("t0")]
    if yard_path.exists() and timed:
        yard = load_test_costs(yard_path)
        span = min(r["wall_s"] for r in timed)
        marks = [round(span * f) for f in (0.25, 0.5, 0.75, 1.0)]
        lines += ["", "Work done by elapsed time (sum of the ended tests' seconds in "
                  "test_costs.json, the yardstick both runs share):", "",
                  "| run | " + " | ".join(f"{m} s" for m in marks) + " |",
                  "|---|" + "---:|" * len(marks)]  # fmt: skip
        for r in timed:
            ends = [(x.get("end", 0) - r["t0"], yard.get(x["test"], 0.0))
                    for x in _lines(out / f"{r['name']}_workers")]  # fmt: skip
            vals = " | ".join(f"{sum(c for e, c in ends if e <= m):.0f}" for m in marks)
            lines.append(f"| {r['name']} | {vals} |")
    util = out / "util.tsv"
    if util.exists() and timed:
        rows = []
        for line in util.read_text().splitlines():
            try:
                rows.append([float(x) for x in line.split()])
            except ValueError:
                continue
        lines += ["", "| run | mean CPU busy % (all cores) | mean GPU utilisation % per GPU |",
                  "|---|---:|---|"]  # fmt: skip
        for r in timed:
            sel = [x for x in rows if r["t0"] <= x[0] <= r["t0"] + r["wall_s"]]
            if not sel:
                continue
            cpu = statistics.mean(x[1] for x in sel)
            gpus = [statistics.mean(x[k] for x in sel) for k in range(2, len(sel[0]))]
            lines.append(f"| {r['name']} | {cpu:.0f} | {', '.join(f'{g:.0f}' for g in gpus)} |")
    for r in runs:
        failed = sorted({x["test"] for x in _lines(out / f"{r['name']}_workers")
                         if x.get("failed")})  # fmt: skip
        if failed:
            lines += ["", f"Failed in {r['name']}: " + ", ".join(f"`{t}`" for t in failed)]
    return lines


def sample(path: str | Path, every_s: float = 1.0) -> None:
    """Until killed: a line every `every_s` of 'epoch cpu-busy-% gpu0-util-% gpu1-util-% ...'
    (/proc/stat over the interval, nvidia-smi utilization.gpu)."""

    def cpu_times() -> tuple[int, int]:
        f = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        idle = f[3] + (f[4] if len(f) > 4 else 0)
        return sum(f), idle

    last = cpu_times()
    with Path(path).open("a") as out:
        while True:
            time.sleep(every_s)
            now = cpu_times()
            tot, idle = now[0] - last[0], now[1] - last[1]
            last = now
            busy = 100.0 * (tot - idle) / tot if tot else 0.0
            try:
                smi = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu",
                                      "--format=csv,noheader,nounits"], capture_output=True,
                                     text=True, timeout=10, check=False).stdout.split()  # fmt: skip
            except (OSError, subprocess.SubprocessError):
                smi = []
            out.write(f"{time.time():.1f} {busy:.1f} {' '.join(smi)}\n")
            out.flush()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("workers", help="print the xdist worker count for this host")
    w.add_argument("--gpus", type=int, default=None)
    c = sub.add_parser("costs", help="merge BLOCKATTN_WORKER_LOG files into a cost table")
    c.add_argument("worker_dir")
    c.add_argument("out")
    c.add_argument("--fill", help="a cost table for the tests the worker logs do not hold")
    t = sub.add_parser("table", help="timing table from a JSON list of runs")
    t.add_argument("runs_json")
    k = sub.add_parser("top", help="where the time went in a ci/tier_scaling.sh OUT folder")
    k.add_argument("out_dir")
    m = sub.add_parser("sample", help="CPU and GPU utilisation every second, until killed")
    m.add_argument("out_file")
    a = p.parse_args(argv)
    if a.cmd == "workers":
        gib = _gpu_gib()
        n = a.gpus if a.gpus is not None else len(gib)
        cores = len(os.sched_getaffinity(0))
        print(worker_count(n, cores, _host_gib(), min(gib) if gib else 0.0))
    elif a.cmd == "costs":
        table = merge_durations(a.worker_dir)
        if a.fill and Path(a.fill).exists() and table["tests"]:
            fill = {k: v for k, v in load_test_costs(a.fill).items() if k not in table["tests"]}
            table["tests"] = dict(sorted({**table["tests"], **fill}.items()))
            table["filled_from"] = f"{a.fill}: {len(fill)} tests"
        Path(a.out).write_text(json.dumps(table, indent=1) + "\n")
        print(
            f"{len(table['tests'])} tests, {table['total_s']:.0f} s measured in all "
            f"({table.get('filled_from', 'none filled')}) -> {a.out}"
        )
        return 0 if table["tests"] else 1
    elif a.cmd == "top":
        print(run_costs(a.out_dir))
    elif a.cmd == "sample":
        sample(a.out_file)
    else:
        text, ok = scaling_table(json.loads(Path(a.runs_json).read_text()))
        print(text)
        return 0 if ok is not False else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
