"""Ctrl-C after every case was judged (issue 43, item 5): not a bare "interrupted", but the
verdicts so far, where the complete results are and the command that finishes the run; and that
command works (it runs no case again and writes the summary)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


def _sigint_default() -> None:  # see test_kill_resume: a background CI ignores SIGINT
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_in_the_battery_names_the_results_and_the_finishing_command(tmp_path: Path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "blockattn", "run", "--out", str(out), "--max-cases", "1",
           "--fuzz", "0", "--no-selfcheck", "--no-progress", "--tolerances", "v4"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_sigint_default)
    res = out / "results.jsonl"
    t0 = time.monotonic()
    while not (res.exists() and res.read_bytes().count(b"\n") >= 1):
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.monotonic() - t0 < 180, "no finished case in 180 s"
        time.sleep(0.05)
    time.sleep(2.0)  # the contract battery (about 15 s on 2 cores) is running now
    assert proc.poll() is None, "the run ended before the signal: nothing to test"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted after every case was run: 1 cases, 1 passed, 0 failed" in err, err
    assert f"results (complete): {out}/results.jsonl" in err
    assert f"blockattn report {out}" in err
    finish = err.split("finish the run:", 1)[1].strip().splitlines()[0]
    assert "--resume" in finish and str(out) in finish
    assert not (out / "summary.md").exists()
    # the printed command finishes the run: no case again, the summary written
    argv = shlex.split(finish)
    assert argv[0] == "blockattn"
    done = subprocess.run([sys.executable, "-m", "blockattn", *argv[1:], "--no-contract"],
                          cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (out / "summary.md").read_text().startswith("# blockattn run: ✅ PASS")
    assert len(res.read_text().splitlines()) == 1
    assert json.loads((out / "report.json").read_text())["meta"]["n_cases"] == 1
