"""ci/install.sh, with pip mocked (no download): the CPU torch only when none is there, from the
CPU-only index or the one BLOCKATTN_TORCH_INDEX names; an installed torch or triton is never
replaced; offline, the editable install falls back to no build isolation (issue 21, 5-7)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

FAKE = '''#!/usr/bin/env bash
# a stand-in python: "import X" succeeds only for modules in $HAVE; pip calls are logged
if [ "$1" = "-c" ]; then
  for m in $HAVE; do case "$2" in *"import $m"*) exit 0;; esac; done
  exit 1
fi
echo "$*" >> "$LOG"
if [ -n "${PIP_FAILS_ONCE:-}" ] && [ ! -e "$LOG.failed" ] && [[ "$*" == *"-e .[test]"* ]]; then
  touch "$LOG.failed"; exit 1
fi
exit 0
'''


def _install(tmp_path: Path, have: str, **env: str) -> list[str]:
    py = tmp_path / "python"
    py.write_text(FAKE)
    py.chmod(0o755)
    log = tmp_path / "pip.log"
    e = {**os.environ, "PYTHON": str(py), "HAVE": have, "LOG": str(log), **env}
    e.pop("BLOCKATTN_TORCH_INDEX", None) if "BLOCKATTN_TORCH_INDEX" not in env else None
    r = subprocess.run(["bash", str(REPO / "ci" / "install.sh")], env=e, capture_output=True,
                       text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    # the pip calls only (the stand-in also logs the index probes: "- URL", answered as reachable)
    lines = log.read_text().splitlines() if log.exists() else []
    return [c for c in lines if not c.startswith("- ")]


def test_no_torch_gets_the_cpu_build_from_the_cpu_index(tmp_path: Path) -> None:
    calls = _install(tmp_path, have="triton")
    torch = [c for c in calls if "torch" in c]
    assert torch == ["-m pip install -q torch==2.13.0+cpu --index-url "
                     "https://download.pytorch.org/whl/cpu"], calls
    assert not any("triton" in c for c in calls)  # an installed triton is kept


def test_the_index_can_be_overridden(tmp_path: Path) -> None:
    calls = _install(tmp_path, have="triton", BLOCKATTN_TORCH_INDEX="file:///mirror/cpu")
    assert any(c.endswith("--index-url file:///mirror/cpu") for c in calls), calls


def test_an_installed_torch_and_triton_are_left_alone(tmp_path: Path) -> None:
    calls = _install(tmp_path, have="torch triton")
    assert calls == ["-m pip install -q -e .[test]"], calls


def test_no_triton_gets_the_tested_one(tmp_path: Path) -> None:
    calls = _install(tmp_path, have="torch")
    assert "-m pip install -q triton==3.6.0" in calls, calls


def test_offline_falls_back_to_no_build_isolation(tmp_path: Path) -> None:
    calls = _install(tmp_path, have="torch triton", PIP_FAILS_ONCE="1")
    assert calls == ["-m pip install -q -e .[test]",
                     "-m pip install -q --no-build-isolation -e .[test]"], calls
