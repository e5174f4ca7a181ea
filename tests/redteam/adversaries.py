"""Adversarial kernels: the published reward hacks of kernel benchmarks (KernelArena's field
guide, GPU MODE reference-kernels #162, KernelHacks) and the attacks measured on blockattn, each
as a small kernel with `block_attention`'s signature. Each is honest in shape and dtype and
cheats in one way; the red-team tests show each one fails by name.

REDTEAM_NOTE (env): a file where a kernel writes what it found (the tests read it back).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
import time

import torch

import blockattn
from blockattn.providers import Supports, kernel


def _honest(q, k, v, offsets, **kw):
    return blockattn.block_attention(q, k, v, offsets, **kw)


def _note(text: str) -> None:
    path = os.environ.get("REDTEAM_NOTE")
    if path:
        with open(path, "a") as fh:
            fh.write(text + "\n")


def honest(q, k, v, offsets, **kw):
    """Control: blockattn itself, through the public API."""
    return _honest(q, k, v, offsets, **kw)


@kernel(supports=Supports(max_seq_len=True))
def honest_msl(q, k, v, offsets, **kw):
    """Control: blockattn through the public API, declaring the sync-free `max_seq_len=`."""
    return _honest(q, k, v, offsets, **kw)


def exit_zero(q, k, v, offsets, **kw):
    """Ends the process with a success code before any verdict exists."""
    os._exit(0)


def sys_exit(q, k, v, offsets, **kw):
    raise SystemExit(0)


def segfault(q, k, v, offsets, **kw):
    import ctypes

    ctypes.string_at(0)


def sigkill(q, k, v, offsets, **kw):
    os.kill(os.getpid(), 9)


def hang(q, k, v, offsets, **kw):
    """A deadlock: never returns."""
    time.sleep(10**6)


_CALLS = {"n": 0}


def hang_once(q, k, v, offsets, **kw):
    """Hangs on its first call only: the run must go on and judge the later cases."""
    _CALLS["n"] += 1
    if _CALLS["n"] == 1 and not os.environ.get("REDTEAM_HUNG"):
        os.environ["REDTEAM_HUNG"] = "1"  # inherited by nothing: a fresh worker calls honestly
        marker = os.environ.get("REDTEAM_NOTE", "") + ".hung"
        if not os.path.exists(marker):
            open(marker, "w").close()
            time.sleep(10**6)
    return _honest(q, k, v, offsets, **kw)


@kernel(supports=Supports(dtypes=("bfloat16",), head_dims=(64,), deterministic=True))
def counting(q, k, v, offsets, **kw):
    """Honest but for one element: O's first holds the number of this call (the test that each
    repeat of a probe answers its own call)."""
    _CALLS["n"] += 1
    o = _honest(q, k, v, offsets, **kw).clone()
    with torch.no_grad():
        o.view(-1)[0] = float(_CALLS["n"])
    return o


def segfault_second(q, k, v, offsets, **kw):
    """Dies on the second call of the run (the first worker's), honest otherwise: while it
    dies the judge has the next case in flight, which must be judged, not blamed."""
    _CALLS["n"] += 1
    marker = os.environ.get("REDTEAM_NOTE", "") + ".crashed"
    if _CALLS["n"] == 2 and not os.path.exists(marker):
        open(marker, "w").close()
        segfault(q, k, v, offsets)
    return _honest(q, k, v, offsets, **kw)


HANGUP_S = 5.0  # from its socket closing to its death: the judge waits 10 s for an exit, and a
# GPU process dies slowly (the driver's teardown); the judge sends within a second of the close


def hangs_up_second(q, k, v, offsets, **kw):
    """Dies on the second call as a GPU worker does: its socket to the judge closes first (the
    driver's teardown keeps a dying process alive a while), the process dies later. The judge's
    next send finds the line dead while the worker still runs. It leaves a process behind."""
    import socket

    _CALLS["n"] += 1
    marker = os.environ.get("REDTEAM_NOTE", "") + ".hungup"
    if _CALLS["n"] == 2 and not os.path.exists(marker):
        open(marker, "w").close()
        # a process outside its group, to outlive it; started before any work, so the line is
        # closed well before the judge, judging the case before, sends the next one
        _start_grandchild()
        line = socket.socket(fileno=os.dup(int(sys.argv[1])))  # the worker's end (its argv)
        line.shutdown(socket.SHUT_RDWR)
        line.close()
        _note("hung up")
        time.sleep(HANGUP_S)
        segfault(q, k, v, offsets)
    return _honest(q, k, v, offsets, **kw)


def patch_judge(q, k, v, offsets, **kw):
    """Replaces the judge's verdict, self-test and metrics with ones that approve, then returns
    zeros. In a shared process this passed; here it patches the worker's own copies."""
    import blockattn.judge.metrics as metrics
    import blockattn.judge.verdict as verdict

    class Approve:
        passed, skipped, failures, warnings, case_id = True, False, [], [], ""

    verdict.evaluate = lambda *a, **k: Approve()
    metrics.tensor_metrics = lambda *a, **k: {}
    try:
        import blockattn.judge.selftest as selftest

        selftest.run_selftest = lambda *a, **k: []
    except ImportError:
        pass
    return torch.zeros_like(q).requires_grad_(True)


def _judge_copy() -> str | None:
    """The judge's package root, only when a test made it a throwaway copy (REDTEAM_JUDGE_COPY):
    the attacks on the judge's files never touch a real checkout."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(blockattn.__file__)))
    if os.environ.get("REDTEAM_JUDGE_COPY") != root:
        _note("judge files: not a throwaway copy, left alone")
        return None
    return root


def rewrite_judge(q, k, v, offsets, **kw):
    """Rewrites the judge's verdict module on disk so that every later process approves (an
    agent editing the evaluator), and computes honestly."""
    root = _judge_copy()
    if root:
        with open(os.path.join(root, "blockattn", "judge", "verdict.py"), "a") as fh:
            fh.write("\nclass _Approve:\n    passed, skipped, failures, warnings = True, False, "
                     "[], []\n\n\ndef evaluate(*a, **k):\n    return _Approve()\n")
        _note("rewrite_judge wrote verdict.py")
    return _honest(q, k, v, offsets, **kw)


def plant_bytecode(q, k, v, offsets, **kw):
    """Plants cached bytecode for a judge module, its header matching the source's size and
    time (all the import system checks), its code not the source's; computes honestly."""
    import importlib.util
    import marshal

    root = _judge_copy()
    if root:
        src = os.path.join(root, "blockattn", "judge", "gate_rules.py")
        st = os.stat(src)
        code = compile("def baseline_failures(*a, **k):\n    return []\n", src, "exec")
        data = (importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little")
                + (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
                + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little") + marshal.dumps(code))
        cache = importlib.util.cache_from_source(src)
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        with open(cache, "wb") as fh:
            fh.write(data)
        _note("plant_bytecode wrote " + os.path.basename(cache))
    return _honest(q, k, v, offsets, **kw)


def startup_hook(q, k, v, offsets, **kw):
    """Drops a sitecustomize.py on the judge's path: every later Python (the next CI step)
    runs it at start; computes honestly."""
    root = _judge_copy()
    if root:
        with open(os.path.join(root, "sitecustomize.py"), "w") as fh:
            fh.write("import os\nos.environ['APPROVE'] = '1'\n")
        _note("startup_hook wrote sitecustomize.py")
    return _honest(q, k, v, offsets, **kw)


def oracle_search(q, k, v, offsets, **kw):
    """Searches the heap for the FP64 oracle's result (a float64 tensor of the output's shape)
    and returns it rounded; zeros when there is none."""
    found = [o for o in gc.get_objects() if isinstance(o, torch.Tensor)
             and o.dtype == torch.float64 and tuple(o.shape) == tuple(q.shape)]  # fmt: skip
    _note(f"oracle_search found {len(found)}")
    out = found[0].to(q.dtype) if found else torch.zeros_like(q)
    return out.detach().requires_grad_(True) * 1.0


class Lazy(torch.Tensor):
    """A tensor subclass standing in for a lazy output whose work is deferred into the check."""


def lazy_output(q, k, v, offsets, **kw):
    return _honest(q, k, v, offsets, **kw).as_subclass(Lazy)


def late_thread(q, k, v, offsets, **kw):
    """Returns its output zeroed; a background thread writes the values after the call."""
    out = _honest(q, k, v, offsets, **kw)
    final = out.detach().clone()
    raw = out.detach()
    raw.zero_()

    def fill() -> None:
        time.sleep(4.0)  # long after forward and backward returned
        raw.copy_(final)

    threading.Thread(target=fill, daemon=True).start()
    return out


def input_copy(q, k, v, offsets, **kw):
    """Identity: returns (a copy of) an input."""
    return (v * 1.0).contiguous()


def lower_precision(q, k, v, offsets, **kw):
    """Computes from fp8-rounded inputs."""
    r = [(t.to(torch.float8_e4m3fn).to(t.dtype) - t).detach() + t for t in (q, k, v)]
    return _honest(*r, offsets, **kw)


def write_results(q, k, v, offsets, **kw):
    """Appends a forged passing record to the run's results.jsonl (found through the judge's
    command line) and computes honestly."""
    try:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
        out = argv[argv.index(b"--out") + 1].decode()
        path = os.path.join(out, "results.jsonl")
        with open(path) as fh:
            lines = fh.read().splitlines()
        if lines:
            with open(path, "a") as fh:
                fh.write(lines[-1] + "\n")
            _note("write_results appended")
    except (OSError, ValueError, IndexError) as exc:
        _note(f"write_results failed: {exc}")
    return _honest(q, k, v, offsets, **kw)


def _start_grandchild() -> None:
    """A process in a new session (outside the worker's process group), noted by its pid."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                         start_new_session=True)  # fmt: skip
    _note(f"grandchild {p.pid}")


def grandchild(q, k, v, offsets, **kw):
    """Starts a process in a new session (outside the worker's process group) that outlives it."""
    _start_grandchild()
    return _honest(q, k, v, offsets, **kw)


def read_parent_memory(q, k, v, offsets, **kw):
    """Tries to read the judge's memory through /proc (its environment and its mem file)."""
    ppid = os.getppid()
    for what in ("environ", "mem"):
        try:
            with open(f"/proc/{ppid}/{what}", "rb") as fh:
                fh.read(16)
            _note(f"read_parent_memory {what} readable")
        except OSError as exc:
            _note(f"read_parent_memory {what} denied: {type(exc).__name__}")
    return _honest(q, k, v, offsets, **kw)


_TABLE: dict[int, int] = {}


def _table_key(q, offsets) -> tuple:
    return tuple(q.shape), str(q.dtype), tuple(offsets.tolist())


def corpus_table(q, k, v, offsets, **kw):
    """Knows the answers of the public corpus (by its shapes, dtype and sequence offsets) and
    nothing else. (Keyed on the token count alone, a fuzz case of the same count passed.)"""
    if not _TABLE:
        from blockattn.cases.corpus import load_corpus
        from blockattn.cases.inputs import build_inputs

        for s in load_corpus(tiers=("cpu",)):
            inp = build_inputs(s)
            _TABLE[_table_key(inp.q, inp.offsets)] = 1
    if _table_key(q, offsets) in _TABLE:
        return _honest(q, k, v, offsets, **kw)
    return torch.zeros_like(q).requires_grad_(True) * 1.0


# ---- GPU only ------------------------------------------------------------------------------


def cuda_fault(q, k, v, offsets, **kw):
    """An out-of-bounds gather on its first call: a device-side assert kills the CUDA context."""
    idx = torch.full((4,), 10**9, device=q.device, dtype=torch.int64)
    torch.index_select(q.reshape(-1), 0, idx).sum().item()
    return _honest(q, k, v, offsets, **kw)


def cuda_fault_once(q, k, v, offsets, **kw):
    """Faults the CUDA context on its first call (a marker file remembers), honest after."""
    marker = os.environ.get("REDTEAM_NOTE", "/tmp/redteam") + ".faulted"
    if not os.path.exists(marker):
        open(marker, "w").close()
        return cuda_fault(q, k, v, offsets, **kw)
    return _honest(q, k, v, offsets, **kw)


def side_stream(q, k, v, offsets, **kw):
    """Runs its work on a side stream the caller never waits for."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.cuda._sleep(20_000_000)
        out = _honest(q, k, v, offsets, **kw)
    return out


_REPLAYS: dict[tuple, torch.Tensor] = {}


def replay_cache(q, k, v, offsets, **kw):
    """Replays its answer for inputs it has seen (keyed by where they live and their shape;
    forward-only calls): a benchmark that calls it again on the same inputs times a lookup."""
    if torch.is_grad_enabled():
        return _honest(q, k, v, offsets, **kw)
    key = (q.data_ptr(), k.data_ptr(), v.data_ptr(), offsets.data_ptr(), tuple(q.shape))
    if key not in _REPLAYS:
        _REPLAYS[key] = _honest(q, k, v, offsets, **kw)
    return _REPLAYS[key]


# name -> (kernel, what a FAIL line must say: any of these substrings, lower case)
CPU_CATALOG = {
    "exit_zero": (exit_zero, ["exited with code 0"]),
    "sys_exit": (sys_exit, ["systemexit"]),
    "segfault": (segfault, ["sigsegv"]),
    "sigkill": (sigkill, ["sigkill"]),
    "patch_judge": (patch_judge, ["beyond", "nan/inf", "violations"]),
    "oracle_search": (oracle_search, ["beyond", "nan/inf", "violations"]),
    "lazy_output": (lazy_output, ["tensor subclass"]),
    "late_thread": (late_thread, ["in flight"]),
    "input_copy": (input_copy, ["beyond", "violations"]),
    "lower_precision": (lower_precision, ["beyond", "violations"]),
}
