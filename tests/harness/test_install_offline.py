"""ci/install.sh offline (issue 43, item 5): an unreachable index is detected by a 3 s probe and
said once, and pip then runs without retries (--retries 0 --timeout 5) and blockattn installs
without build isolation, instead of ~50 "Retrying ... NewConnectionError" lines."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _install(**env: str) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    proc = subprocess.run(["bash", str(REPO / "ci" / "install.sh")], capture_output=True,
                          text=True, timeout=120, cwd=REPO,
                          env={**os.environ, "BLOCKATTN_INSTALL_DRY_RUN": "1", **env})  # fmt: skip
    return proc, time.monotonic() - t0


def test_an_unreachable_index_is_said_once_and_pip_does_not_retry() -> None:
    # port 9 (discard) on the loopback: refused at once, as an offline machine's DNS fails
    proc, took = _install(PIP_INDEX_URL="http://127.0.0.1:9/simple")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    assert out.count("is unreachable (no answer in 3 s)") == 1, out
    assert "pip uses its local sources only" in out
    line = next(x for x in out.splitlines() if "would run: pip install" in x and ".[test]" in x)
    assert "--no-build-isolation" in line and "--retries 0 --timeout 5" in line, line
    assert "Retrying" not in out and took < 60, took
