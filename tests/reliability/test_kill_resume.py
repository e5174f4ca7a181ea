"""Nothing lost: kill `blockattn run` midway (SIGINT, SIGKILL), then report and resume.

The run is a real subprocess on the CPU interpreter (CUDA hidden, so timings and the corpus are
the same on a GPU host). The first corpus cases take ~2.4 s, ~1.1 s and ~7 s there, which is
what the polling below relies on: a signal sent right after line N appears lands in case N+1.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from blockattn import cli
from blockattn.run.results import RESULTS, load_records

ROOT = Path(__file__).resolve().parents[2]
RUN_ARGS = ["--fuzz", "0", "--no-selfcheck", "--no-progress", "--no-tolerances"]
START_TIMEOUT_S = 120.0  # generous: 2 shared cores, torch + triton import


def _env() -> dict[str, str]:
    env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    env.pop("PYTEST_XDIST_WORKER", None)  # no GPU pinning in the child
    return env


def _sigint_default() -> None:
    # A suite launched in the background (`cmd &` in a script, no job control) runs with SIGINT
    # ignored, children inherit that, and Python then installs no KeyboardInterrupt handler: the
    # child would finish and exit 0 under the signal (seen: a CI launched with `&` failed these
    # tests). Restore the default in the child so it meets SIGINT as a terminal user's would.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(out: Path, max_cases: int, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "blockattn", "run", "--out", str(out)]
    cmd += ["--max-cases", str(max_cases), *RUN_ARGS, *extra]
    return subprocess.Popen(
        cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=_sigint_default,
    )


def _n_lines(out: Path) -> int:
    p = out / RESULTS
    return p.read_bytes().count(b"\n") if p.exists() else 0


def _wait_for_lines(proc: subprocess.Popen, out: Path, n: int) -> None:
    t0 = time.monotonic()
    while _n_lines(out) < n:
        if proc.poll() is not None:
            pytest.fail(f"run exited early ({proc.returncode}): {proc.communicate()[1][-2000:]}")
        if time.monotonic() - t0 > START_TIMEOUT_S:
            proc.kill()
            pytest.fail(f"no {n} finished cases within {START_TIMEOUT_S} s")
        time.sleep(0.02)


def _valid_lines(out: Path) -> list[dict]:
    lines = (out / RESULTS).read_text().splitlines()
    recs = [json.loads(line) for line in lines]  # every line parses: nothing torn by a SIGINT
    assert len({r["case_id"] for r in recs}) == len(recs), "a case was written twice"
    return recs


def _report_renders(out: Path, capsys) -> tuple[str, str]:
    """(stdout, stderr) of `blockattn report OUT`, which must succeed and write its files."""
    assert cli.main(["report", str(out)]) == 0
    assert (out / "report.md").exists() and (out / "report.html").exists()
    cap = capsys.readouterr()
    return cap.out, cap.err


def test_sigint_keeps_finished_cases_and_resume_skips_them(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    proc = _start(out, 3)
    _wait_for_lines(proc, out, 2)
    proc.send_signal(signal.SIGINT)  # lands in case 3 (~7 s)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted" in err and "--resume" in err, err[-2000:]
    recs = _valid_lines(out)
    assert len(recs) == 2 and all(r["providers"]["blockattn"]["status"] == "ok" for r in recs)
    assert "2 cases (partial)" in _report_renders(out, capsys)[0]
    before = (out / RESULTS).read_bytes()
    # Resume over the finished cases: nothing is re-run, the file is untouched.
    proc = _start(out, 2, "--resume")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    assert "2 cases on" in err
    assert (out / RESULTS).read_bytes() == before, "resume re-ran or rewrote a finished case"


def test_sigkill_with_torn_line_then_report_and_resume(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    proc = _start(out, 2)
    _wait_for_lines(proc, out, 1)
    proc.kill()  # SIGKILL: no handler, no flush, no report.json
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    recs = _valid_lines(out)
    assert len(recs) >= 1 and not (out / "report.json").exists()
    first_line = (out / RESULTS).read_text().splitlines()[0]
    # A kill can land inside write(): simulate that torn tail (fsync'd lines before it are safe).
    with open(out / RESULTS, "a") as fh:
        fh.write('{"case_id": "rota-floa-torn", "spec": {"seed"')
    skipped: list[int] = []
    assert [r["case_id"] for r in load_records(out, skipped)] == [r["case_id"] for r in recs]
    assert skipped == [len(recs) + 1]
    err = _report_renders(out, capsys)[1]
    assert "torn line" in err, err
    # Resume: the finished case is skipped, the remaining one runs and starts on a fresh line.
    proc = _start(out, 2, "--resume")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    lines = (out / RESULTS).read_text().splitlines()
    assert lines[0] == first_line, "resume rewrote a finished case"
    final = load_records(out)
    assert len(final) == 2, [r["case_id"] for r in final]
    ids = [json.loads(x)["case_id"] for x in lines if not x.startswith('{"case_id": "rota-floa-t')]
    assert len(ids) == len(set(ids)) == 2, "a finished case was run again"
    assert (out / "report.json").exists()


def test_sigint_in_gate_is_one_line_and_its_resume_command_works(tmp_path: Path) -> None:
    # issue 21, items 12-13: Ctrl-C in a gate prints no traceback, exits 130 and names a
    # resume command that works as printed (the original options, --out, --resume).
    out = tmp_path / "gate"
    cmd = [sys.executable, "-m", "blockattn", "gate", "--tolerances", "v4", "--out", str(out),
           "--max-cases", "3", "--no-contract", "--no-progress"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=_sigint_default)  # fmt: skip
    _wait_for_lines(proc, out, 1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err, err[-3000:]
    line = next(x for x in err.splitlines() if "continue with:" in x)
    resume = line.split("continue with: ", 1)[1]
    assert resume.startswith("blockattn gate ") and resume.endswith(" --resume"), resume
    argv = __import__("shlex").split(resume)[1:]
    proc = subprocess.run([sys.executable, "-m", "blockattn", *argv], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(_valid_lines(out)) == 3
