"""The judge's side of isolation: every kernel under test runs in a worker process, never here.

A `Sandbox` (one per run, or per pytest session) starts one warm worker (`blockattn.run.worker`)
in its own process group and session, with a scratch working directory, and loads into it every
provider the run puts under test: built-ins by name (`blockattn`, `fa4`, ...), outside kernels by
their `--provider` spec (their module is imported there, never in the judge), registered ones by
the import path of their run function. The judge keeps a proxy `Provider` of each (its declared
`Supports`, model, name), whose calls go to the worker with a deadline.

What the judge owns: case generation, the FP64 oracle, the bounds, the verdicts, the reports and
the exit code. The worker is sent inputs only (copied into its own memory) and answers outputs as
bytes, which the judge lays out in tensors of its own before judging. Whatever the worker does is
a result of the one call: exit (any code), a signal, a CUDA fault, a hang past the watchdog
(`--call-timeout`), a malformed answer: the call fails with what happened, the worker's process
group is killed, and the next call starts a fresh worker (whose first act is a tiny device check:
if it fails, every later call is NOT JUDGED). Trusted baselines (role "baseline": fa2, eager, ...)
and the oracle stay in the judge.

`in_process=True` (`--in-process`, for debugging a kernel with a debugger) calls everything here
and stamps every result NOT ISOLATED; the gate refuses such runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from blockattn import providers
from blockattn.names import CALL_TIMEOUT_S
from blockattn.providers import OUTPUT_KEYS, Provider, Supports, Timing
from blockattn.run import calls, judge_files, probes, spawn
from blockattn.run.process import Box, CallFailed, Lost, Worker, harden_parent

DEFAULT_CALL_TIMEOUT = CALL_TIMEOUT_S
NOT_ISOLATED = "NOT ISOLATED"
_ACTIVE: list[Sandbox] = []


def _importable(fn: Any) -> str | None:
    """'module:qualname' of a function a fresh process can import (None: a closure, lambda)."""
    mod, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not mod or "<" in qual or mod == "__main__":
        return None
    try:
        obj: Any = importlib.import_module(mod)
        for part in qual.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return None
    return f"{mod}:{qual}" if obj is fn else None


def _supports_from(d: dict[str, Any]) -> Supports:
    names = {f.name for f in dataclasses.fields(Supports)}
    return Supports(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()
                       if k in names})  # fmt: skip


class Sandbox:
    """A run's isolation: the worker, the providers it hosts, and the judge's proxies of them."""

    def __init__(self, call_timeout: float | None = None, in_process: bool = False,
                 prestart: bool = False, watch: tuple = ()) -> None:  # fmt: skip
        # before the worker imports any kernel: all of the judge's code loaded, its files as
        # they were (judge_files)
        judge_files.import_judge()
        self.files = judge_files.snapshot(watch)
        self.call_timeout = call_timeout or DEFAULT_CALL_TIMEOUT
        self.in_process = in_process
        self.scratch = Path(tempfile.mkdtemp(prefix="blockattn-worker-"))
        self.loads: dict[str, dict[str, Any]] = {}  # name -> how the worker re-creates it
        self.shadowed: dict[str, Provider | None] = {}
        self.worker: Worker | None = None
        self.started = 0
        self.unusable: str | None = None  # why the device cannot judge any more
        self.hardening = {} if in_process else harden_parent()
        self.strays: list[int] = []
        self.probe_deaths = 0  # consecutive probe calls that ended their worker
        self.spare: Worker | None = None
        self.finished: list[Worker] = []  # ended workers (their costs)
        self.ending_s = 0.0  # seconds spent ending workers (end_worker, close)
        early = spawn.take()
        if early is not None and (in_process or not prestart):
            spawn.end(early)
            early = None
        if early is not None:  # started by the command line before torch was imported here
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = early.scratch
        if prestart and not in_process:  # spawned now: its imports overlap the judge's start-up
            self.spare = Worker(self.call_timeout, self.scratch, 0)
            self.spare.spawn(early)

    # ------------------------------------------------------------------ providers

    def mode(self) -> str:
        return NOT_ISOLATED if self.in_process else "worker"

    def load_specs(self, specs: list[str] | None) -> list[str]:
        """`--provider` specs: loaded in the worker (their module never imported here)."""
        if self.in_process:
            return providers.load_specs(specs)
        names: list[str] = []
        for s in specs or []:
            decl = self._declare({"spec": s})
            if decl["name"] in names:
                raise ValueError(f"--provider: name {decl['name']!r} given twice")
            names.append(decl["name"])
        return names

    def isolate(self, names: list[str]) -> None:
        """Put the kernel-role providers among `names` (built-in, registered) in the worker."""
        if self.in_process:
            return
        for n in names:
            if n in self.loads:
                continue
            prov = providers.get(n)
            if prov.role != "kernel" or prov.worker is not None:
                continue  # trusted baselines stay in the judge
            if prov.origin == "builtin":
                self._declare_ahead(prov)
            elif prov.origin.startswith("entry point"):
                self._declare({"spec": n})
            elif prov.spec:
                self._declare({"spec": prov.spec})
            elif (target := _importable(prov.run)) is not None:
                self._declare({"registered": target, "name": n, "role": prov.role,
                               "accuracy_model": prov.accuracy_model,
                               "reference": prov.reference,
                               "supports": prov.supports.to_dict()})  # fmt: skip
            # else: a closure cannot be re-created in another process: it runs here, stamped

    def _declare(self, how: dict[str, Any]) -> dict[str, Any]:
        w = self._worker()
        header, _ = w.ask({"op": "load", "items": [how], "cwd": str(Path.cwd()),
                           "path": list(sys.path)}, what="import of the provider")  # fmt: skip
        if header.get("status") != "ok":
            raise ValueError(f"provider {how.get('spec') or how.get('name')}: "
                             f"{header.get('reason')}")  # fmt: skip
        decl = header["providers"][0]
        self.loads[decl["name"]] = how
        self._install(decl)
        return decl

    def _declare_ahead(self, prov: Provider) -> None:
        """A built-in provider: its proxy from the judge's own declaration at once; the worker's
        import runs meanwhile, and its declaration must match when its answer is read."""
        how = {"spec": prov.name}
        mine = calls.declaration(prov)

        def same(header: dict[str, Any], outs: list[torch.Tensor]) -> None:
            theirs = (header.get("providers") or [{}])[0] if header.get("status") == "ok" else {}
            if header.get("status") != "ok":
                raise CallFailed(f"provider {prov.name}: {header.get('reason')}")
            keys = ("name", "role", "accuracy_model", "reference", "supports", "has_kernel",
                    "timings")  # fmt: skip
            differ = [k for k in keys if json.dumps(theirs.get(k), sort_keys=True, default=str)
                      != json.dumps(mine.get(k), sort_keys=True, default=str)]  # fmt: skip
            if differ:
                raise CallFailed(f"provider {prov.name}: the worker declares other {differ} "
                                 "than the judge's built-in")  # fmt: skip

        self._worker(settle=False).send_ahead(
            {"op": "load", "items": [how], "cwd": str(Path.cwd()), "path": list(sys.path)},
            "import of the provider", same)  # fmt: skip
        self.loads[prov.name] = how
        self._install(mine)

    def _install(self, d: dict[str, Any]) -> None:
        name = str(d["name"])
        try:
            old = providers.get(name)
        except ValueError:
            old = None
        if name not in self.shadowed:
            self.shadowed[name] = old if old is not None and old.worker is None else None
        proxy = Provider(
            name=name, role=str(d.get("role") or "kernel"), run=_not_here,
            accuracy_model=d.get("accuracy_model"), supports=_supports_from(d["supports"]),
            reference=d.get("reference"), origin=str(d.get("origin")), spec=d.get("spec"),
            kernel=_not_here if d.get("has_kernel") else None, projection=None,
            description=str(d.get("description") or ""),
            timings=tuple(Timing(str(t["name"]), bool(t["rotary"]), _not_here,
                                 str(t.get("description") or ""), worker=self, provider=name)
                          for t in d.get("timings") or ()),
            worker=self,
        )  # fmt: skip
        providers.register(proxy)

    # ------------------------------------------------------------------ the worker

    def _worker(self, settle: bool = True) -> Worker:
        """The live worker (a fresh one after a failure). `settle=False`: the first worker may
        still be starting (its answers are read with the next request's)."""
        if self.unusable is not None:
            raise CallFailed(f"NOT JUDGED: {self.unusable}")
        if self.worker is not None and self.worker.alive() and self.worker.ch is not None:
            return self.worker
        if self.worker is not None:
            with contextlib.suppress(CallFailed):  # its answers, and the failure, of calls sent
                self.worker.settle()
            self._kill(self.worker)
            self.finished.append(self.worker)
        self.started += 1
        # The first worker is the one spawned with the session; after a failure a fresh one, so
        # that its device check runs after the failure.
        w, self.spare = (self.spare, None) if self.started == 1 and self.spare else (
            Worker(self.call_timeout, self.scratch, self.started), None)  # fmt: skip
        try:
            if w.ch is None:
                w.spawn()
            if settle or self.started > 1:  # after a failure: the device check before anything
                w.handshake()
        except CallFailed as exc:
            if self.started > 1:  # a fresh worker after a failure cannot use the device
                self.unusable = f"after the previous failure a fresh worker failed to start: {exc}"
                raise CallFailed(f"NOT JUDGED: {self.unusable}") from exc
            raise
        self.worker = w
        if self.loads:  # a fresh worker: the same providers again
            header, _ = w.ask({"op": "load", "items": list(self.loads.values()),
                               "cwd": str(Path.cwd()), "path": list(sys.path)},
                              what="import of the providers")  # fmt: skip
            if header.get("status") != "ok":
                raise CallFailed(f"re-loading providers in a fresh worker: {header.get('reason')}")
        return w

    def ask(self, msg: dict[str, Any], tensors: list[torch.Tensor], max_bytes: int,
            what: str) -> tuple[dict[str, Any], list[torch.Tensor]]:  # fmt: skip
        return self._worker().ask(msg, tensors, max_bytes, what)

    # ------------------------------------------------------------------ calls

    def run_case(self, prov: Provider, inp: Any, variant: str
                 ) -> tuple[dict[str, torch.Tensor] | None, dict[str, Any]]:  # fmt: skip
        """`call_provider` for a proxy: the case's inputs to the worker, its outputs back."""
        return self.send_case(prov, inp, variant)()

    def send_case(self, prov: Provider, inp: Any, variant: str, resent: bool = False) -> Any:
        """Send a case to the worker now; the returned function waits for its answer and gives
        (outputs, result) as `run_case`. The judge computes the case's oracle meanwhile."""
        names = [n for n in ("q", "k", "v", "grad_out", "offsets", "sinu_pos", "x", "w", "bias")
                 if getattr(inp, n) is not None]  # fmt: skip
        like = _expected(inp, variant)
        budget = sum(t.numel() * t.element_size() for t in like.values()) + 1024
        base = {"time_s": 0.0, "provider": prov.describe(), "isolation": "worker"}
        t0 = time.perf_counter()
        box = Box()

        def failed(exc: CallFailed) -> tuple[None, dict[str, Any]]:
            status = "not-judged" if str(exc).startswith("NOT JUDGED") else "error"
            return None, {**base, "status": status, "reason": str(exc),
                          "time_s": time.perf_counter() - t0}  # fmt: skip

        try:  # the first worker's start is read with this answer (its imports run meanwhile)
            w = self._worker(settle=False)
            w.send_ahead({"op": "run", "provider": prov.name, "variant": variant,
                          "spec": inp.spec.to_dict(), "names": names,
                          "device": inp.q.device.type}, f"call of {prov.name}", box,
                         [getattr(inp, n) for n in names], budget)  # fmt: skip
        except Lost as exc:  # never delivered: a fresh worker takes it (once)
            if resent:
                early = failed(exc)
                return lambda: early
            return self.send_case(prov, inp, variant, resent=True)
        except CallFailed as exc:
            early = failed(exc)
            return lambda: early

        def collect() -> tuple[dict[str, torch.Tensor] | None, dict[str, Any]]:
            try:
                header, outs = w.answer(box, "call")
            except Lost as exc:
                if resent:  # a fresh worker ended before this call, too
                    return failed(exc)
                return self.send_case(prov, inp, variant, resent=True)()
            except CallFailed as exc:
                return failed(exc)
            return self._case_result(header, outs, like, base, variant, t0)

        return collect

    def _case_result(self, header: dict[str, Any], outs: list[torch.Tensor],
                     like: dict[str, torch.Tensor], base: dict[str, Any], variant: str,
                     t0: float) -> tuple[dict[str, torch.Tensor] | None, dict[str, Any]]:
        """The worker's answer to a case, checked: (outputs in the judge's memory, result)."""
        res = {**base, "status": header.get("status", "error"), "reason": header.get("reason"),
               "time_s": float(header.get("time_s") or time.perf_counter() - t0)}  # fmt: skip
        if header.get("traceback"):
            res["traceback"] = str(header["traceback"])
        if res["status"] != "ok":
            if res["status"] not in ("unsupported", "error"):
                res["status"] = "error"
            res["reason"] = str(res["reason"] or "the worker gave no reason")
            return None, res
        keys = header.get("keys")
        if keys != list(OUTPUT_KEYS[variant]) or len(outs) != len(keys):
            return None, {**res, "status": "error", "reason": f"the worker answered outputs "
                          f"{keys!r:.100}, expected {list(OUTPUT_KEYS[variant])}"}  # fmt: skip
        got = {}
        for k, t in zip(keys, outs, strict=True):
            want = like[k]
            if t.dtype != want.dtype or t.shape != want.shape:
                return None, {**res, "status": "error", "reason": f"{k} is {tuple(t.shape)} "
                              f"{t.dtype}, expected {tuple(want.shape)} {want.dtype}"}  # fmt: skip
            got[k] = t.to(want.device)
        return got, res

    def call_probe(self, prov: Provider, p: Any, streams: bool = False) -> dict[str, torch.Tensor]:
        """The battery's call of `prov`'s kernel on probe `p`, in the worker. Afterwards p's
        buffers hold what the worker's copies held after the call (inputs-untouched reads
        them); a refused output raises, naming why."""
        return self.send_probe(prov, p, streams)()[0]

    def call_repeats(self, prov: Provider, p: Any, repeats: int) -> list[dict[str, torch.Tensor]]:
        """`repeats` calls of the kernel on probe `p` in one trip (the worker restores the inputs
        it was sent before each): the outputs of each, judged here, in host memory (compared
        bitwise where they arrived: no trip back to the device)."""
        return self.send_probe(prov, p, repeats=repeats, on_host=True)()

    def send_probe(self, prov: Provider, p: Any, streams: bool = False, repeats: int = 1,
                   resent: bool = False, on_host: bool = False) -> Any:  # fmt: skip
        """Send probe `p` now; the returned function waits for the answer and gives the outputs
        of each call (the judge computes the probe's oracle meanwhile). p's tensors are not
        touched until then: the worker has copies."""
        if self.probe_deaths >= 3:  # a kernel that kills every worker: fail the rest at once
            raise CallFailed(f"not called: the last {self.probe_deaths} probes each ended their "
                             "worker")  # fmt: skip
        packed = probes.pack(p, repeats)
        box = Box()
        try:
            w = self._worker()
            w.send_ahead({**packed.msg, "provider": prov.name, "streams": streams},
                         f"probe {p.name}", box, packed.storages, packed.budget)  # fmt: skip
        except Lost:  # never delivered: a fresh worker takes it (once)
            if resent:
                self.probe_deaths += 1
                raise
            return self.send_probe(prov, p, streams, repeats, resent=True, on_host=on_host)
        except CallFailed:
            self.probe_deaths += 1
            raise

        def collect() -> list[dict[str, torch.Tensor]]:
            try:
                header, outs = w.answer(box, "probe")
            except CallFailed:
                self.probe_deaths += 1
                raise
            self.probe_deaths = 0
            return probes.unpack(header, outs, packed, on_host)

        return collect

    # ------------------------------------------------------------------ end

    def cost_summary(self) -> dict[str, dict[str, float]]:
        """Where the isolation's time went, per kind of request (start, import, call, probe,
        bench): answers, seconds the judge waited for them, seconds inside the worker's calls.
        `BLOCKATTN_ISOLATION_COSTS=FILE` writes it at the end of the session."""
        out: dict[str, dict[str, float]] = {}
        for w in [*self.finished, self.worker, self.spare]:
            for what, cost in (w.costs if w is not None else ()):
                row = out.setdefault(what, {"answers": 0})
                row["answers"] += 1
                for k, v in cost.items():
                    row[k] = row.get(k, 0.0) + v
        if self.ending_s:
            out["end"] = {"answers": 1, "waited_s": self.ending_s}
        return out

    def end_worker(self) -> list[str]:
        """End the worker and everything it started, before any verdict is written; lines
        naming what had to be killed beyond the worker itself (a kernel's stray processes)."""
        t0 = time.monotonic()
        try:
            return self._end_worker()
        finally:
            self.ending_s += time.monotonic() - t0

    def _kill(self, w: Worker) -> None:
        """End `w` and keep every stray any of its kills found (a worker that died mid-call was
        killed, and its strays found, before the session replaced it)."""
        w.kill()
        self.strays += [pid for pid in w.killed_strays if pid not in self.strays]

    def _end_worker(self) -> list[str]:
        if self.spare is not None:
            self._kill(self.spare)
            self.spare = None
        if self.worker is not None:
            self._kill(self.worker)
            self.finished.append(self.worker)
            self.worker = None
        stray = [f"the kernel left {len(self.strays)} process(es) running outside its worker "
                 f"(pids {self.strays[:5]}); killed"] if self.strays else []  # fmt: skip
        return stray + judge_files.lines(self.files)

    def close(self) -> None:
        t0 = time.monotonic()
        self._close_worker()
        self.ending_s += time.monotonic() - t0
        if (path := os.environ.get("BLOCKATTN_ISOLATION_COSTS")) and not self.in_process:
            with contextlib.suppress(OSError):
                Path(path).write_text(json.dumps(self.cost_summary(), indent=1) + "\n")
        for name, old in self.shadowed.items():
            providers.unregister(name)
            if old is not None and old.origin != "builtin":
                providers.register(old)
        shutil.rmtree(self.scratch, ignore_errors=True)

    def _close_worker(self) -> None:
        if self.spare is not None:
            self._kill(self.spare)
        if self.worker is not None:
            if self.worker.ch is not None and self.worker.alive():
                with contextlib.suppress(Exception):
                    self.worker.ch.send_deadline = time.monotonic() + 5
                    self.worker.ch.send_request({"op": "exit"})
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.worker.proc.wait(timeout=5)
            self._kill(self.worker)


def _not_here(*a: Any, **k: Any) -> Any:
    raise RuntimeError("an isolated provider is called in its worker, never in the judge")


def _expected(inp: Any, variant: str) -> dict[str, torch.Tensor]:
    if variant == "projection":
        return {"O": inp.q, "dX": inp.x, "dW": inp.w, "dbias": inp.bias}
    return {"O": inp.q, "dQ": inp.q, "dK": inp.k, "dV": inp.v}


def end_worker() -> list[str]:
    """`Sandbox.end_worker` of the active session ([] when none)."""
    sb = active()
    return sb.end_worker() if sb is not None else []


def active() -> Sandbox | None:
    return _ACTIVE[-1] if _ACTIVE else None


def open_session(call_timeout: float | None = None, in_process: bool = False,
                 prestart: bool = False) -> Sandbox:  # fmt: skip
    """A session that stays active until `close_session` (the pytest plugin's lifetime)."""
    sb = Sandbox(call_timeout, in_process, prestart)
    _ACTIVE.append(sb)
    return sb


def close_session(sb: Sandbox) -> None:
    if sb in _ACTIVE:
        _ACTIVE.remove(sb)
    sb.close()


@contextlib.contextmanager
def session(call_timeout: float | None = None, in_process: bool = False,
            prestart: bool = False, watch: tuple = ()) -> Iterator[Sandbox]:  # fmt: skip
    """The isolation of one run: `with session(...) as sb: names = sb.load_specs(...)`;
    `prestart` spawns the worker at once (a run that will call a kernel); `watch`: files the run
    reads besides the package's (a baseline), checked with them when the worker ends."""
    sb = Sandbox(call_timeout, in_process, prestart, watch)
    _ACTIVE.append(sb)
    try:
        yield sb
    finally:
        _ACTIVE.remove(sb)
        sb.close()
