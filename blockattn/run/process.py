"""One worker process, as the judge sees it: started in its own group, asked with deadlines,
its answers read in order (each through its check), killed with everything it started.

`Worker` is the judge's handle of `python -m blockattn.run.worker`; `blockattn.run.isolated`'s
`Sandbox` owns the workers of a run and the providers they host. A failure of a call is a
`CallFailed` naming what happened (an exit, a signal, the watchdog, a malformed answer); a
request killed with its worker before it was read is `Lost` (it never ran).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import torch

from blockattn.run import spawn
from blockattn.run.wire import Channel, Closed, Timeout


class CallFailed(Exception):
    """The worker did not answer this call normally; the message says what happened."""


class Lost(CallFailed):
    """The worker ended while answering an earlier request: this one never ran (it is sent
    again to a fresh worker; its own call did nothing wrong)."""


class Box(dict):
    """Where a request sent ahead finds its answer (the check `send_ahead` is given): "header"
    and "outs" once read; "failed" (a CallFailed) when reading it failed; "lost" when its worker
    was killed before it was read."""

    def __call__(self, header: dict[str, Any], outs: list[torch.Tensor]) -> None:
        self.update(header=header, outs=outs)


def _prctl(option: int, arg: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, arg, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def harden_parent() -> dict[str, bool]:
    """Not dumpable (no ptrace or /proc/PID/mem reads by same-user processes), and a child
    subreaper (a worker's orphaned descendants become our children, so we can end them)."""
    return {"not_dumpable": _prctl(4, 0), "subreaper": _prctl(36, 1)}  # PR_SET_DUMPABLE, ...


def describe_exit(code: int | None) -> str:
    if code is None:
        return "the worker stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the worker died by {name}" + (" (a segfault)" if name == "SIGSEGV" else "")
    return f"the worker exited with code {code} during the call (the kernel called exit?)"


def _descendants_by_token(token: str) -> list[int]:
    """Processes that inherited this worker's token (its descendants, even those that left its
    process group); /proc/PID/environ is readable for our own user's processes."""
    found = []
    needle = f"{spawn.TOKEN_ENV}={token}".encode()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if needle in (d / "environ").read_bytes().split(b"\0"):
                found.append(int(d.name))
        except OSError:
            continue
    return found


class Worker:
    """One worker process: started, asked with deadlines, killed with its whole group."""

    def __init__(self, call_timeout: float, scratch: Path, index: int) -> None:
        self.call_timeout = call_timeout
        self.scratch = scratch
        self.index = index
        self.log = scratch / f"worker-{index}.log"
        self.token = secrets.token_hex(8)
        self.proc: subprocess.Popen | None = None
        self.ch: Channel | None = None
        self.info: dict[str, Any] = {}
        # (kind, {seconds the judge waited, the worker says the call took, the judge took to
        # send the request, to receive the answer's tensors, the worker took to unpack}) per answer
        self.costs: list[tuple[str, dict[str, float]]] = []
        # requests sent without waiting (hello, built-in loads, cases, probes), in order, each
        # with the check its answer must pass (a Box for a call): read in order, up to the one
        # a caller collects
        self.pending: list[tuple[str, Any, int]] = []
        # every process carrying its token that a kill() found outside its group (each kill,
        # however the worker ended: the session reports them all)
        self.killed_strays: list[int] = []

    def spawn(self, started: spawn.Started | None = None) -> None:
        """Start the process (or adopt one `spawn.early` started) and send its hello;
        `handshake` reads the answer (the imports and the device check run meanwhile, so a
        worker spawned early costs the judge nothing)."""
        st = started or spawn.launch(self.scratch, self.index, self.token)
        self.proc, self.token, self.log = st.proc, st.token, st.log
        self.ch = Channel(st.sock)
        self.send_ahead({"op": "hello"}, "start (imports, device check)", self._hello)

    def _hello(self, header: dict[str, Any], outs: list[torch.Tensor]) -> None:
        if header.get("check") != 12.0:
            self.kill()
            raise CallFailed(f"the worker's device check failed: {header!r:.200}")
        self.info = header

    def handshake(self) -> dict[str, Any]:
        """Wait for every answer sent ahead (the start's device check first)."""
        self.settle()
        return self.info

    def send_ahead(self, msg: dict[str, Any], what: str, check: Any,
                   tensors: list[torch.Tensor] = (), max_bytes: int = 0) -> None:  # fmt: skip
        """Send a request whose answer is read later, before the next request's (`settle`):
        the worker imports, or runs a case, while the judge builds cases and oracles."""
        if self.ch is None:
            raise CallFailed("the worker is gone (killed after an earlier failure)")
        try:
            self.ch.send_deadline = time.monotonic() + self.call_timeout
            self.ch.send_request(msg, list(tensors))
        except Timeout:
            self.kill()
            raise CallFailed(f"watchdog: the worker did not read the {what} within "
                             f"{self.call_timeout:g} s; its worker was killed") from None
        except (BrokenPipeError, ConnectionError, OSError) as exc:
            # It ended before reading this request. Its socket closes before the process is
            # reaped (on a GPU the driver's teardown keeps a dying worker alive a while), so
            # `alive()` said yes: the answers it gave first are intact in the socket, read them
            # so that the call it died in fails by name; this request never ran.
            code = self._wait()
            with contextlib.suppress(CallFailed):
                self.settle()
            self.kill()
            raise Lost(f"not delivered, the worker had ended: {describe_exit(code)}"
                       f"{self.log_tail()}") from exc  # fmt: skip
        self.pending.append((what, check, max_bytes))

    def settle(self, until: dict[str, Any] | None = None) -> None:
        """Read the answers sent ahead, in order, each through its check (under the watchdog
        from the moment the judge waits for it): every one, or `until` that box is filled (the
        answers after it stay unread: the worker may still be running them)."""
        while self.pending and (until is None or "header" not in until):
            what, check, max_bytes = self.pending.pop(0)
            try:
                header, outs = self._answer(None, (), max_bytes, what, None)
            except CallFailed as exc:
                if isinstance(check, Box):
                    check["failed"] = exc
                raise
            check(header, outs)

    def answer(self, box: Box, what: str) -> tuple[dict[str, Any], list]:
        """The answer of a `send_ahead` whose check was `box`, once the answers before it are
        read. CallFailed when the worker failed giving it (or a check before it failed, as the
        start's); Lost when the worker was killed before it reached this request."""
        try:
            self.settle(until=box)
        except CallFailed:
            if "failed" not in box and not box.get("lost"):
                raise  # a check before this answer failed (the start's device check)
        if "failed" in box:
            raise box["failed"]
        if "header" not in box:
            raise Lost(f"the worker ended before answering this {what}")
        return box["header"], box["outs"]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ask(self, msg: dict[str, Any] | None, tensors: list[torch.Tensor] = (),
            max_bytes: int = 0, what: str = "call",
            timeout: float | None = None) -> tuple[dict[str, Any], list[torch.Tensor]]:  # fmt: skip
        """Send a request, wait for its answer under the watchdog; CallFailed on anything else
        than an answer (the worker is then dead: killed with its group)."""
        self.settle()
        return self._answer(msg, tensors, max_bytes, what, timeout)

    def _answer(self, msg: dict[str, Any] | None, tensors: list[torch.Tensor], max_bytes: int,
                what: str, timeout: float | None) -> tuple[dict[str, Any], list[torch.Tensor]]:
        if self.ch is None:
            raise CallFailed("the worker is gone (killed after an earlier failure)")
        limit = self.call_timeout if timeout is None else timeout
        t0 = time.monotonic()
        deadline = t0 + limit
        try:
            if msg is not None:  # None: the answer to a request already sent (hello)
                self.ch.send_deadline = deadline
                self.ch.send_request(msg, list(tensors))
            sent = time.monotonic()
            header, outs = self.ch.recv_reply(deadline, max_bytes)
            header_at = self.ch.header_at  # (the channel is gone once a fatal answer kills)
        except Timeout:
            self.kill()
            raise CallFailed(f"watchdog: the {what} did not return within {limit:g} s (a hang "
                             "or deadlock?); its worker was killed") from None  # fmt: skip
        except (Closed, BrokenPipeError, ConnectionError) as exc:
            code = self._wait()
            self.kill()
            raise CallFailed(f"{describe_exit(code)}{self.log_tail()}") from exc
        except ValueError as exc:
            self.kill()
            raise CallFailed(f"malformed answer from the worker: {exc}") from exc
        if header.get("fatal"):
            self._wait()
            self.kill()
        end = time.monotonic()
        self.costs.append((what.split(" ")[0], {
            "waited_s": end - t0, "in_worker_s": float(header.get("time_s") or 0.0),
            "send_s": sent - t0, "receive_s": end - header_at,
            "worker_prep_s": float(header.get("prep_s") or 0.0)}))  # fmt: skip
        return header, outs

    def _wait(self) -> int | None:
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            return None

    def log_tail(self, n: int = 6) -> str:
        try:
            lines = self.log.read_text(errors="replace").strip().splitlines()[-n:]
        except OSError:
            return ""
        return ("; its last output: " + " | ".join(x[:200] for x in lines)) if lines else ""

    def kill(self) -> list[int]:
        """End the worker's process group and every process that carries its token."""
        for _, check, _ in self.pending:
            if isinstance(check, Box):
                check["lost"] = True
        self.pending = []
        if self.ch is not None:
            self.ch.close()
            self.ch = None
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=30)
        strays = _descendants_by_token(self.token)
        for pid in strays:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        self.killed_strays += strays
        self._reap()
        return strays

    def _reap(self) -> None:
        # as subreaper we inherit the strays: collect them so none stays a zombie
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
