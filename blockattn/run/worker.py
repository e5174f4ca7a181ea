"""The worker: the only process in which a kernel under test runs (`python -m blockattn.run.worker
FD`, started by `blockattn.run.isolated`).

It imports the providers it is told to, calls them on the tensors the judge sends, and answers
with their outputs as bytes. It holds no oracle result, bound or verdict: the judge never sends
one. Everything it answers is data the judge checks for itself; a kernel that rewrites this
module can forge its own answers, and gains nothing the judge does not measure (the judge compares
the outputs with its own oracle, times with its own clock, and owns every file of the run).

Requests (see `run.isolated`): hello (a tiny device check), load (import providers, answer their
declarations), run (a case through `Provider.run`), probe (a contract probe through the kernel
callable, answering the outputs and the input buffers after the call), bench (timed batches),
exit.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import traceback
from types import SimpleNamespace
from typing import Any

import torch

from blockattn.run import calls
from blockattn.run.wire import DTYPES, Channel, Closed

Handler = Any


def _device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def _fatal(exc: BaseException) -> bool:
    """A CUDA error leaves this process's context unusable: answer, then exit."""
    text = f"{type(exc).__name__}: {exc}"
    return type(exc).__name__ == "AcceleratorError" or "CUDA error" in text or (
        "device-side assert" in text)  # fmt: skip


INIT_ENV = "BLOCKATTN_WORKER_INIT"  # MODULE:FUNCTION called once in every fresh worker


def hello(msg: dict, tensors: list, provs: dict) -> tuple[dict, list]:
    from blockattn.run import session

    session.quiet_is_fx_tracing_notice()  # as in the judge: no torch notice per call
    init = os.environ.get(INIT_ENV)
    if init:  # the user's set-up (torch flags, seeds, ...), as the conftest did for pytest
        import importlib

        mod, _, fn = init.partition(":")
        getattr(importlib.import_module(mod), fn)()
    dev = _device()
    x = torch.arange(4, device=dev, dtype=torch.float32)
    check = float((x * 2).sum())  # 12.0 on a working device
    info = {"status": "ok", "pid": os.getpid(), "pgid": os.getpgid(0), "device": dev,
            "check": check, "torch": torch.__version__}  # fmt: skip
    if dev == "cuda":
        info["gpu"] = torch.cuda.get_device_name()
    return info, []


def load(msg: dict, tensors: list, provs: dict) -> tuple[dict, list]:
    """Import each provider: by --provider spec or built-in name, or a registered one by the
    import path of its run function (with the declaration the judge holds)."""
    import importlib

    from blockattn import providers

    if msg.get("cwd") and msg["cwd"] not in sys.path:
        sys.path.insert(0, msg["cwd"])  # an outside kernel lives in the user's repository
    sys.path += [p for p in msg.get("path") or () if p and p not in sys.path]
    decls = []
    for item in msg["items"]:
        if "spec" in item:
            prov = providers.load_spec(item["spec"])
        else:
            mod, _, qual = item["registered"].partition(":")
            fn: Any = importlib.import_module(mod)
            for part in qual.split("."):
                fn = getattr(fn, part)
            sup = {k: tuple(v) if isinstance(v, list) else v for k, v in item["supports"].items()}
            prov = providers.register(item["name"], fn, role=item["role"],
                                      accuracy_model=item["accuracy_model"],
                                      supports=providers.Supports(**sup),
                                      reference=item["reference"])  # fmt: skip
        provs[prov.name] = prov
        decls.append(calls.declaration(prov))
    return {"status": "ok", "providers": decls}, []


def _to_device(tensors: list[torch.Tensor], dev: str) -> list[torch.Tensor]:
    return [t.to(dev) if dev != "cpu" else t for t in tensors]


def run_case(msg: dict, tensors: list, provs: dict) -> tuple[dict, list]:
    """One case through `Provider.run`: the outputs as the caller saw them at return."""
    from blockattn.cases.inputs import Inputs
    from blockattn.cases.spec import CaseSpec
    from blockattn.providers import OUTPUT_KEYS, Unsupported

    prov = provs[msg["provider"]]
    variant = msg["variant"]
    named = dict(zip(msg["names"], _to_device(tensors, msg["device"]), strict=True))
    inp = Inputs(spec=CaseSpec.from_dict(msg["spec"]), **named)
    before = {n: calls.bits(t) for n, t in named.items()}
    threads = calls.threads()
    t0 = time.perf_counter()
    prep = t0 - msg["state"].get("received", t0)
    try:
        out = prov.run(inp, variant)
    except Unsupported as exc:
        return {"status": "unsupported", "reason": str(exc),
                "time_s": time.perf_counter() - t0}, []  # fmt: skip
    if not isinstance(out, dict):
        return {"status": "error", "reason": f"run returned {type(out).__name__}, not a dict "
                "of outputs"}, []  # fmt: skip
    keys = OUTPUT_KEYS[variant]
    missing = [k for k in keys if k not in out]
    if missing:
        return {"status": "error", "reason": f"missing outputs {missing}"}, []
    for k in keys:
        if (why := calls.output_problem(out[k], inp.q, k)) is not None:
            return {"status": "error", "reason": f"output refused: {why}"}, []
    outs = {k: out[k] for k in keys}
    snap = calls.snapshot(outs)
    flight = calls.in_flight(snap, outs, threads)
    elapsed = time.perf_counter() - t0
    if flight:
        return {"status": "error", "reason": f"output refused: {flight}", "time_s": elapsed}, []
    changed = [n for n, t in named.items() if not calls.same_bits(t, before[n])]
    if changed:
        return {"status": "error", "reason": f"provider modified its input(s) {changed} in "
                "place", "time_s": elapsed}, []  # fmt: skip
    return {"status": "ok", "time_s": elapsed, "keys": list(keys), "prep_s": prep}, [
        snap[k] for k in keys]


def _views(msg: dict, storages: list[torch.Tensor]) -> dict[str, torch.Tensor | None]:
    out: dict[str, torch.Tensor | None] = {}
    for name, v in msg["views"].items():
        if v is None:
            out[name] = None
            continue
        st = storages[v["storage"]].untyped_storage()
        t = torch.empty(0, dtype=DTYPES[v["dtype"]], device=storages[v["storage"]].device)
        out[name] = t.set_(st, v["offset"], v["shape"], v["stride"])
    return out


def probe(msg: dict, tensors: list, provs: dict) -> tuple[dict, list]:
    """One contract probe on the kernel callable: the outputs, then every input storage as it
    is after the call (the judge compares them with what it sent: inputs-untouched)."""
    prov = provs[msg["provider"]]
    # the judge's bytes arrive in memory of this process's own (frames, a private mapping or
    # a device copy): the kernel gets them in place
    storages = _to_device(tensors, msg["device"])
    v = _views(msg, storages)
    buffers = {n: v[f"buffer:{n}"] for n in msg["buffer_names"]}
    p = SimpleNamespace(q=v["q"], k=v["k"], v=v["v"], grad_out=v["grad_out"],
                        offsets=v["offsets"], sinu_pos=v["sinu_pos"], buffers=buffers,
                        **msg["fields"])  # fmt: skip
    sent = [t.clone() for t in storages]  # to answer only the storages the call changed
    t0 = time.perf_counter()
    prep = t0 - msg["state"].get("received", t0)
    snaps, flights = [], []
    for r in range(int(msg.get("repeats", 1))):
        if r:  # each repeat on the inputs as the judge sent them
            for st, was in zip(storages, sent, strict=True):
                st.copy_(was)
        threads = calls.threads()
        if msg["streams"]:
            outs = calls.call_on_side_stream(prov.kernel, p)
            snap, flight = outs, ""
        else:
            outs = calls.call_probe(prov.kernel, p)
            snap = calls.snapshot(outs)
            flight = calls.in_flight(snap, outs, threads)
        snaps.append(snap)
        flights += [flight] if flight else []
    elapsed = time.perf_counter() - t0
    spans = [(s.untyped_storage().data_ptr(), s.untyped_storage().data_ptr() + s.numel())
             for s in storages]  # fmt: skip
    aliases = [k for k, t in outs.items() if t.numel()
               and any(a <= t.untyped_storage().data_ptr() < b for a, b in spans)]  # fmt: skip
    changed = [i for i, (a, b) in enumerate(zip(storages, sent, strict=True))
               if not calls.same_bits(a, b)]  # fmt: skip
    header = {"status": "ok", "time_s": elapsed, "keys": list(calls.KEYS), "aliases": aliases,
              "in_flight": "; ".join(flights), "prep_s": prep, "changed": changed}  # fmt: skip
    return header, [*(s[k] for s in snaps for k in calls.KEYS), *(storages[i] for i in changed)]


def bench(msg: dict, tensors: list, provs: dict) -> tuple[dict, list]:
    from blockattn.bench import isolated

    return isolated.serve(msg, tensors, provs)


HANDLERS: dict[str, Handler] = {"hello": hello, "load": load, "run": run_case, "probe": probe,
                                "bench": bench}  # fmt: skip


def serve(ch: Channel) -> int:
    provs: dict[str, Any] = {}
    state: dict[str, Any] = {}
    while True:
        try:
            msg, tensors = ch.recv_request()
        except Closed:
            return 0
        state["received"] = time.perf_counter()
        op = msg.get("op")
        if op == "exit":
            return 0
        fatal = False
        try:
            header, outs = HANDLERS[op]({**msg, "state": state}, tensors, provs)
        except BaseException as exc:  # SystemExit from a kernel is a result too
            fatal = _fatal(exc)
            header = {"status": "error", "reason": f"{type(exc).__name__}: {exc}"[:2000],
                      "traceback": traceback.format_exc(limit=6)[-4000:], "fatal": fatal}
            outs = []
        ch.send_reply(header, outs)
        if fatal:
            return 3


def _die_with_the_judge() -> None:
    """SIGKILL this process when the judge dies (PR_SET_DUMPABLE's sibling PR_SET_PDEATHSIG): a
    judge killed by CI's job timeout leaves no worker behind, even one stuck in a kernel."""
    import ctypes
    import signal

    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent or parent == 1:  # the judge died before the request took hold
        os._exit(0)


def main(argv: list[str]) -> int:
    _die_with_the_judge()
    if not torch.cuda.is_available():  # the kernels need the interpreter here (before triton)
        os.environ.setdefault("TRITON_INTERPRET", "1")
    sock = socket.socket(fileno=int(argv[1]))
    return serve(Channel(sock))


if __name__ == "__main__":
    os._exit(main(sys.argv))
