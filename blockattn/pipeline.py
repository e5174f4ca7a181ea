"""The pipeline: cases -> run -> judge, one case at a time, streamed to results.jsonl.

`run_cases` is what `run`, `gate`, `replay`, the mutants' workers, `false-alarms` and the pytest
plugin call: each case is judged (`blockattn.judge.evaluate`), given a verdict when a tolerance
file is in force, written as it finishes (so an interrupted run loses nothing) and, when it
fails, given a reproducer and a printed `blockattn replay` command.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from blockattn.cases.spec import CaseSpec
from blockattn.judge import verdict as _verdict
from blockattn.judge.evaluate import Begun, begin_case, finish_case
from blockattn.run import isolated
from blockattn.run.results import ResultsWriter, check_results_file, load_records
from blockattn.run.session import provider_specs


def write_reproducer(
    out_dir: Path, rec: dict[str, Any], failures: list[str], tol_path: str | None
) -> str:
    """Write repro/<case_id>.json (spec + providers + why) and return the replay command."""
    rdir = out_dir / "repro"
    rdir.mkdir(parents=True, exist_ok=True)
    path = rdir / f"{rec['case_id']}.json"
    payload = {
        "case_id": rec["case_id"],
        "spec": rec["spec"],
        "under_test": rec["under_test"],
        "baseline": rec["baseline"],
        "providers": list(rec["providers"]),
        # Outside kernels by their --provider spec, so replay re-runs that same provider.
        "provider_specs": provider_specs(list(rec["providers"])),
        "cwd": str(Path.cwd()),
        "tolerances": tol_path,
        "failures": failures,
        "device": rec["device"],
    }
    path.write_text(json.dumps(payload, indent=2) + "\n")
    cmd = f"blockattn replay {shlex.quote(str(path))}"
    if tol_path:
        cmd += f" --tolerances {shlex.quote(str(tol_path))}"
    return cmd


class Progress:
    """Minimal stderr progress bar (no tqdm dependency); one line per case when not a TTY."""

    def __init__(self, total: int, enabled: bool = True) -> None:
        self.total, self.done, self.enabled = total, 0, enabled
        self.t0 = time.perf_counter()
        self.tty = sys.stderr.isatty()

    def step(self, label: str, status: str) -> None:
        self.done += 1
        if not self.enabled:
            return
        el = time.perf_counter() - self.t0
        eta = el / self.done * (self.total - self.done)
        w = 24
        fill = int(w * self.done / max(1, self.total))
        line = (
            f"[{'#' * fill}{'.' * (w - fill)}] {self.done}/{self.total} "
            f"{el:5.0f}s eta {eta:4.0f}s  {status:<5} {label}"
        )
        if self.tty:
            sys.stderr.write("\r" + line[:150].ljust(150))
            if self.done == self.total:
                sys.stderr.write("\n")
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def run_cases(
    specs: Iterable[CaseSpec],
    out_dir: str | Path,
    *,
    provider_names: list[str],
    under_test: str,
    baseline: str,
    resume: bool = False,
    tol=None,  # Tolerances | None
    progress: bool = True,
    on_record: Callable[[dict[str, Any], Any], None] | None = None,
) -> list[dict[str, Any]]:
    """Run every spec not already finished (with --resume) and stream records as they finish.

    Returns all records of the directory (old + new). If `tol` is given each new record gets a
    verdict; failures get a reproducer and a printed replay command.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    specs = list(specs)
    done: set[str] = set()
    if resume and (out / "results.jsonl").exists():
        done = {r["case_id"] for r in load_records(out)}
    elif not resume and (out / "results.jsonl").exists():
        raise ValueError(f"{out}/results.jsonl exists; pass --resume or a fresh --out")
    todo = [s for s in specs if s.case_id not in done]
    sb = isolated.active()
    if sb is not None:  # every kernel-role provider of the run is called in the worker
        sb.isolate(provider_names)
    bar = Progress(len(todo), progress)
    results_path = out / "results.jsonl"
    before = results_path.read_bytes() if results_path.exists() else b""
    written: list[str] = []
    # Isolated, the next case is sent to the worker before this one is judged: the worker runs
    # it while the judge computes this case's oracle and baselines (one case ahead, no more).
    ahead = 1 if sb is not None and not sb.in_process else 0
    begun: deque[Begun] = deque()
    with ResultsWriter(out) as w:

        def settle(b: Begun) -> None:
            """Finish a begun case: judge it, write its record, report it."""
            rec = finish_case(b, tol=tol)
            status = "done"
            if tol is not None:
                v = _verdict.evaluate(rec, tol, under_test)
                rec["verdict"] = {
                    "passed": v.passed,
                    "skipped": v.skipped,
                    "failures": v.failures,
                    "warnings": v.warnings,
                    "tolerances": f"v{tol.version}",
                }
                status = "skip" if v.skipped and v.passed else ("pass" if v.passed else "FAIL")
                if not v.passed:
                    cmd = write_reproducer(out, rec, v.failures, str(tol.path))
                    rec["verdict"]["replay"] = cmd
            w.write(rec)
            written.append(rec["case_id"])
            if on_record:
                on_record(rec, tol)
            bar.step(f"{b.spec.case_id} {b.spec.short()}", status)
            if tol is not None and not rec["verdict"]["passed"]:
                print(f"FAIL {b.spec.case_id}: {rec['verdict']['failures'][0]}", file=sys.stderr)
                print(f"  replay: {rec['verdict']['replay']}", file=sys.stderr)

        for k in range(len(todo)):
            for nxt in todo[k + len(begun): k + 1 + ahead]:  # this case and `ahead` beyond it
                try:
                    begun.append(begin_case(nxt, provider_names, under_test, baseline))
                except Exception:  # a bad spec (a usage error, exit 2): the cases
                    while begun:  # already in flight are judged and written first
                        settle(begun.popleft())
                    raise
            settle(begun.popleft())
    # The kernel ran beside this file: it must hold exactly what the judge wrote, or nothing
    # in it is evidence.
    tampered = check_results_file(out, before, written)
    if tampered:
        raise ValueError(f"{out}: {'; '.join(tampered)}: refused")
    return load_records(out)
