"""Per-GPU evidence of a ci/multi_gpu.sh run: which GPU ran which tests and gate shards.

Reads OUT/gpus.csv, OUT/workers/*.json (pytest workers), OUT/shard-*/report.json (gate shards)
and OUT/gpu_samples.csv (nvidia-smi samples), prints a Markdown table per physical GPU, and exits
1 when some GPU ran no test, no shard, or never showed utilisation: a multi-GPU run where one GPU
idled has not shown what it claims.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path


def summarise(out: Path) -> tuple[str, bool]:
    gpus = {}  # uuid -> (index, name)
    for line in (out / "gpus.csv").read_text().splitlines():
        idx, uuid, name = (x.strip() for x in line.split(",", 2))
        gpus[uuid.removeprefix("GPU-")] = (idx, name)
    tests: dict[str, int] = defaultdict(int)
    workers: dict[str, list[str]] = defaultdict(list)
    for f in sorted((out / "workers").glob("*.json")):
        w = json.loads(f.read_text())
        u = str(w.get("gpu_uuid", "")).removeprefix("GPU-")
        tests[u] += w["tests_run"]
        workers[u].append(w["worker"])
    cases: dict[str, int] = defaultdict(int)
    shards: dict[str, list[str]] = defaultdict(list)
    for f in sorted(out.glob("shard-*/report.json")):
        meta = json.loads(f.read_text())["meta"]
        u = str(meta.get("gpu_uuid", "")).removeprefix("GPU-")
        cases[u] += meta["n_cases"]
        shards[u].append(f.parent.name)
    peak: dict[str, int] = defaultdict(int)
    samples = out / "gpu_samples.csv"
    by_index = {idx: u for u, (idx, _) in gpus.items()}
    if samples.exists():
        for line in samples.read_text().splitlines():
            parts = [x.strip() for x in line.split(",")]
            if len(parts) >= 3 and parts[1] in by_index and parts[2].split()[0].isdigit():
                u = by_index[parts[1]]
                peak[u] = max(peak[u], int(parts[2].split()[0]))
    rows = ["| GPU | name | pytest workers | tests run | gate shards | gate cases | peak util % |",
            "|---|---|---|---:|---|---:|---:|"]  # fmt: skip
    ok = bool(gpus)
    for u, (idx, name) in sorted(gpus.items(), key=lambda kv: kv[1][0]):
        rows.append(f"| {idx} ({u[:8]}) | {name} | {', '.join(workers[u]) or '-'} | {tests[u]} | "
                    f"{', '.join(shards[u]) or '-'} | {cases[u]} | {peak[u]} |")  # fmt: skip
        ok = ok and tests[u] > 0 and cases[u] > 0 and peak[u] > 0
    verdict = "every GPU did work" if ok else "NOT every GPU did work"
    return "\n".join([f"## Multi-GPU run: {verdict} ({len(gpus)} GPUs)", "", *rows]), ok


if __name__ == "__main__":
    text, ok = summarise(Path(sys.argv[1]))
    print(text)
    sys.exit(0 if ok else 1)
