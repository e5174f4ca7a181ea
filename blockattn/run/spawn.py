"""Starting a worker process, torch-free: the command line starts its worker before the judge
imports torch, so the worker's imports and device start overlap the judge's own.

`early()` is called by the CLI for a command that will call a kernel; the run's `Sandbox` adopts
that process as its first worker (`take`). Without it, `Sandbox` starts one the same way.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

TOKEN_ENV = "BLOCKATTN_WORKER_TOKEN"  # every process the worker starts inherits it


@dataclass
class Started:
    proc: subprocess.Popen
    sock: socket.socket  # the judge's end of the socket pair
    token: str
    scratch: Path
    log: Path


def launch(scratch: Path, index: int, token: str | None = None) -> Started:
    """`python -m blockattn.run.worker FD` in its own session and process group, cwd `scratch`,
    output to `scratch/worker-<index>.log`."""
    token = token or secrets.token_hex(8)
    log = scratch / f"worker-{index}.log"
    ours, theirs = socket.socketpair()
    env = {**os.environ, TOKEN_ENV: token,
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # fmt: skip
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "blockattn.run.worker", str(theirs.fileno())],
            pass_fds=[theirs.fileno()], start_new_session=True, cwd=scratch,
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    theirs.close()
    return Started(proc, ours, token, scratch, log)


_EARLY: list[Started] = []


def early() -> None:
    """Start the first worker now, in a fresh scratch directory (adopted by `take`)."""
    if not _EARLY:
        _EARLY.append(launch(Path(tempfile.mkdtemp(prefix="blockattn-worker-")), 0))


def take() -> Started | None:
    """The worker `early` started, if any (once)."""
    return _EARLY.pop() if _EARLY else None


def end(st: Started) -> None:
    """Kill an early worker that no session adopted (an in-process run)."""
    import contextlib
    import shutil
    import signal

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(st.proc.pid, signal.SIGKILL)
    st.proc.wait()
    st.sock.close()
    shutil.rmtree(st.scratch, ignore_errors=True)
