"""Shared plumbing of the commands: device set-up, output dirs, report.json/summary.md writing."""

from __future__ import annotations

import datetime as _dt
import json
import os
import sys
from pathlib import Path
from typing import Any

from blockattn.run import env


class _DropIsFxTracingNotice:
    """torch logs "is_fx_tracing will return true for both fx.symbolic_trace and torch.export..."
    (a note to torch's own tracer authors) the first time anything calls
    `torch.nested.nested_tensor_from_jagged`, which blockattn does for its nested-input probes
    and ops: on every run. Only that record of that logger is dropped."""

    def filter(self, record: Any) -> bool:
        return not str(record.msg).startswith("is_fx_tracing will return true")


def quiet_is_fx_tracing_notice() -> None:
    """Install the filter (idempotent); at import here, and by any process that builds nested
    tensors (the isolation worker should call it too)."""
    import logging

    log = logging.getLogger("torch.fx._symbolic_trace")
    if not any(isinstance(f, _DropIsFxTracingNotice) for f in log.filters):
        log.addFilter(_DropIsFxTracingNotice())


quiet_is_fx_tracing_notice()


def setup_device() -> str:
    """Configure env (xdist GPU pin, TRITON_INTERPRET on CPU); re-exec if it is too late.

    `blockattn/__init__` imports the kernels, so when the CLI starts without TRITON_INTERPRET on a
    CPU-only machine the kernels are already compiled for a GPU. Restarting the process with the
    variable set is the only correct fix from here (only when running as the CLI, never in-process
    under pytest, where tests/conftest.py sets it first).
    """
    device = env.configure()
    if device == "cpu" and env.kernels_already_imported():
        from blockattn.kernels import tile_math

        if not getattr(tile_math, "INTERPRET", True):
            if os.environ.get("BLOCKATTN_REEXEC") != "1" and "pytest" not in sys.modules:
                os.environ["TRITON_INTERPRET"] = "1"
                os.environ["BLOCKATTN_REEXEC"] = "1"
                sys.stdout.flush()
                os.execv(sys.executable, [sys.executable, "-m", "blockattn", *sys.argv[1:]])
            raise ValueError(
                "no CUDA device and the kernels were imported without "
                "TRITON_INTERPRET=1; set it before importing blockattn"
            )
    return device


RUN_OPTIONS = "run.json"
RESUMABLE = {"max_cases"}
# run.json keys that are not options: the planned case ids (what a complete run records; with
# --max-cases, resumable, they may grow) and the identity of what ran (checked on its own).
PLANNED = "planned_case_ids"
IDENTITY = "identity"
NOT_OPTIONS = {PLANNED, IDENTITY}
LOCK = ".blockattn.lock"

# Locks this process holds: {resolved dir: fd}. flock is per open file description, so an
# earlier in-process command's lock (pytest calling cli.main twice) would refuse the next one:
# a new run releases those first; readers in this process skip the check.
_HELD: dict[str, int] = {}


def _key(d: Path) -> str:
    return str(Path(d).resolve())


def _holder(p: Path) -> str:
    try:
        pid = p.read_text().strip()
    except OSError:
        pid = ""
    return f"pid {pid}" if pid.isdigit() else "another process"


def check_not_in_use(d: str | Path, what: str) -> None:
    """Refuse (ValueError, exit 2) to read or write a directory a running blockattn holds.

    Read-only: opens an existing lock file, never creates one. A run holds an exclusive
    `flock` on DIR/.blockattn.lock for its lifetime; the kernel releases it when the process
    dies, however it dies, so a killed run never leaves a stale lock behind.
    """
    import fcntl

    p = Path(d) / LOCK
    if _key(d) in _HELD or not p.is_file():
        return
    try:
        fd = os.open(p, os.O_RDONLY)
    except OSError:
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(
                f"{d} is in use by a running blockattn ({_holder(p)} holds {p}): {what} "
                "refused; wait for it to finish, or stop it first"
            ) from None
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def lock_dir(d: str | Path, what: str = "run") -> int:
    """Take DIR's lock for the rest of this process's life (or until the next lock_dir)."""
    import fcntl

    for k in list(_HELD):  # an earlier command of this same process: finished
        os.close(_HELD.pop(k))
    p = Path(d) / LOCK
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ValueError(f"{d} is in use by a running blockattn ({_holder(p)} holds {p}): "
                         f"{what} refused; use another --out") from None  # fmt: skip
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    _HELD[_key(d)] = fd
    return fd


def release_dir(d: str | Path) -> None:
    fd = _HELD.pop(_key(d), None)
    if fd is not None:
        os.close(fd)


def read_run_json(d: str | Path) -> dict[str, Any] | None:
    """DIR/run.json, or None where there is none; ValueError where it is not a JSON object."""
    p = Path(d) / RUN_OPTIONS
    if not p.is_file():
        return None
    try:
        data = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{p}: unreadable ({exc})") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{p}: not a run.json (a JSON object)")
    return data


def _identity_diff(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[str]:
    """What differs between two identities, one line each (dotted path: there, now)."""
    if new is None:
        return []
    if not isinstance(old, dict):
        return ["identity: none recorded there (a run by an older blockattn): cannot check that "
                "the same kernels, device and versions continue it"]  # fmt: skip
    out: list[str] = []

    def walk(a: Any, b: Any, path: str) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted({*a, *b} - {"module_file"}):  # where a checkout lies: not code
                walk(a.get(k), b.get(k), f"{path}.{k}" if path else k)
        elif a != b:
            out.append(f"{path}: {a!r} there, {b!r} now")

    walk(old, new, "")
    return out


def check_run_options(out: Path, options: dict[str, Any], resume: bool, *,
                      planned: list[str] | None = None,
                      identity: dict[str, Any] | None = None) -> None:  # fmt: skip
    """Record a run's options in DIR/run.json; `--resume` refuses a directory run with others.

    Every refusal (a directory in use, a --resume whose options or identity differ, a fresh run
    over earlier results) is decided before anything is written: a refused run touches nothing.
    Then DIR is locked for this process's lifetime and run.json written, with the `planned`
    case ids (so a reader can tell a complete run from a killed one) and the `identity` of the
    providers, device and versions (`run_identity`).
    """
    out = Path(out)
    p = out / RUN_OPTIONS
    check_not_in_use(out, "--resume" if resume else "a new run")
    if resume and (out / "results.jsonl").exists():
        if not p.exists():
            raise ValueError(f"--resume: {p} is missing (a run by an older blockattn?): its "
                             "options cannot be checked; start a fresh --out")  # fmt: skip
        old = read_run_json(out) or {}
        # max_cases only cuts the same ordered plan shorter or longer: resuming with another
        # is continuing the same run. Every other option changes which cases or how judged.
        diff = sorted(k for k in {*old, *options} - RESUMABLE - NOT_OPTIONS
                      if old.get(k) != options.get(k))  # fmt: skip
        if diff:
            raise ValueError(
                f"--resume: {out} was run with other options; differing: "
                + "; ".join(f"{k}: {old.get(k)!r} there, {options.get(k)!r} now" for k in diff)
            )
        changed = _identity_diff(old.get(IDENTITY), identity)
        if changed:
            raise ValueError(f"--resume: {out} was run by other kernels, device or versions; "
                             "differing: " + "; ".join(changed[:8]))  # fmt: skip
    elif (out / "results.jsonl").exists():
        raise ValueError(f"{out}/results.jsonl exists; pass --resume or a fresh --out")
    out.mkdir(parents=True, exist_ok=True)
    lock_dir(out, "--resume" if resume else "a new run")
    doc = dict(options)
    if planned is not None:
        doc[PLANNED] = list(planned)
    if identity is not None:
        doc[IDENTITY] = identity
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    tmp.replace(p)


def _sha256_file(path: Path) -> str | None:
    import hashlib

    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _sha256_tree(root: Path, limit: int = 5000) -> str | None:
    """One sha256 over a package's source files (relative path + bytes, sorted)."""
    import hashlib

    h = hashlib.sha256()
    files = sorted(f for f in root.rglob("*") if f.is_file() and "__pycache__" not in f.parts
                   and f.suffix not in (".pyc", ".pyo"))  # fmt: skip
    if len(files) > limit:
        return None
    for f in files:
        h.update(str(f.relative_to(root)).encode() + b"\0")
        try:
            h.update(f.read_bytes())
        except OSError:
            h.update(b"<unreadable>")
        h.update(b"\0")
    return h.hexdigest()


def _module_file(mod_name: str) -> tuple[Path | None, Path | None]:
    """(module file, top-level package dir or None) of a module, found on sys.path (the working
    directory first, as load_spec imports) without importing it: the kernel's code may run only
    in the isolation worker, never in the judge."""
    m = sys.modules.get(mod_name)
    parts = mod_name.split(".")
    if m is not None and getattr(m, "__file__", None):
        f = Path(m.__file__)
        top = sys.modules.get(parts[0])
        paths = list(getattr(top, "__path__", None) or []) if len(parts) > 1 else []
        return f, (Path(paths[0]) if paths else None)
    for base in (Path.cwd(), *(Path(x) for x in sys.path if x)):
        cand = base.joinpath(*parts)
        for f in (cand.with_suffix(".py"), cand / "__init__.py"):
            if f.is_file():
                pkg = base / parts[0]
                return f, (pkg if len(parts) > 1 and pkg.is_dir() else None)
    return None, None


def provider_identity(name: str) -> dict[str, Any]:
    """Which code a provider is: name, origin, module, callable, sha256 of the module file and
    (for an outside kernel in a package) of its package's files. Read from the provider's
    origin and the files, never from its (possibly worker-side) callables."""
    from blockattn import providers

    try:
        p = providers.get(name)
    except ValueError:
        return {"name": name, "origin": None}
    mod_name: str | None = None
    attr: str | None = None
    if p.origin == "builtin":  # the provider module (blockattn_kernel.py for blockattn)
        builtin = providers._discover().get(name)
        mod_name = getattr(builtin.run, "__module__", None) if builtin else None
        attr = "run"
    else:
        target = p.origin.removeprefix("entry point ").strip()
        if ":" in target and " " not in target:  # MODULE:CALLABLE (as given, or the entry point)
            mod_name, attr = target.split(":", 1)
    file, pkg = _module_file(mod_name) if mod_name else (None, None)
    ident: dict[str, Any] = {
        "name": name, "origin": p.origin, "spec": p.spec, "module": mod_name, "callable": attr,
        "module_file": str(file) if file else None,
        "module_sha256": _sha256_file(file) if file else None,
    }  # fmt: skip
    if p.origin != "builtin" and pkg is not None:
        ident["package"] = pkg.name
        ident["package_sha256"] = _sha256_tree(pkg)
    return ident


def run_identity(names: list[str], info: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a run's verdicts depend on besides its options: each provider's code, the device
    and the torch / triton / CUDA / driver versions. `--resume` refuses any change."""
    import torch

    if info is None:
        from blockattn.run.execute import device_info

        info = device_info()
    try:
        import triton

        triton_v = triton.__version__
    except ImportError:
        triton_v = None
    driver = None
    try:
        driver = Path("/proc/driver/nvidia/version").read_text().splitlines()[0].strip()
    except (OSError, IndexError):
        driver = None
    return {
        "providers": {n: provider_identity(n) for n in names},
        "device": {k: info.get(k) for k in ("device", "arch", "gpu")},
        "versions": {"torch": torch.__version__, "triton": triton_v, "cuda": torch.version.cuda,
                     "driver": driver, "python": sys.version.split()[0]},
    }  # fmt: skip


def completeness(d: str | Path, records: list[dict[str, Any]] | None = None,
                 torn: list[int] | None = None) -> list[str]:  # fmt: skip
    """Why DIR's results are not a complete run, one line each ([] where complete).

    Torn (unparseable) lines of results.jsonl, and the planned case ids of run.json that no
    record holds (run.json of this blockattn lists them before its first case). A directory
    without a planned list (an older run, or results written by `pipeline.run_cases` alone) is
    checked against report.json's case count where there is one.
    """
    from blockattn.run.results import RESULTS, load_records

    d = Path(d)
    if records is None:
        torn = [] if torn is None else torn
        records = load_records(d, torn) if (d / RESULTS).exists() else []
    why: list[str] = []
    run = read_run_json(d)
    planned = run.get(PLANNED) if run else None
    have = {r["case_id"] for r in records}
    missing = [c for c in planned if c not in have] if isinstance(planned, list) else None
    # A torn line hides whichever record it was: refused, unless every planned case has a
    # record all the same (the cut-off case was run again by --resume, which appends).
    if torn and missing != []:
        why.append(f"{d}/{RESULTS}: torn (unparseable) line(s) {', '.join(map(str, torn[:10]))}"
                   ": a record cut off by a killed run, or damaged")  # fmt: skip
    if missing:
        why.append(f"{len(have & set(planned))} of {len(planned)} planned cases recorded; "
                   f"missing {len(missing)}: {', '.join(missing[:10])}"
                   + (" ..." if len(missing) > 10 else ""))  # fmt: skip
    return why


def planned_of(d: str | Path) -> list[str] | None:
    run = read_run_json(d)
    planned = run.get(PLANNED) if run else None
    return list(planned) if isinstance(planned, list) else None


def command_line(args: Any) -> str:
    """The command as typed (cli.main keeps argv), for provenance and reproduction."""
    import shlex

    argv = getattr(args, "_argv", None)
    if argv is None:
        argv = sys.argv[1:]
    return shlex.join(["blockattn", *argv])


def resume_command(args: Any, out: Any) -> str:
    """The command that continues this run: as typed, with its --out and --resume (the options
    must match the run's run.json, so they are the original ones)."""
    import shlex

    argv = list(getattr(args, "_argv", None) or sys.argv[1:])
    argv = [a for a in argv if a != "--resume"]
    has_out = any(a == "--out" or a.startswith("--out=") for a in argv)
    return shlex.join(["blockattn", *argv, *([] if has_out else ["--out", str(out)]),
                       "--resume"])  # fmt: skip


def provider_specs(names: list[str]) -> dict[str, str]:
    """{name: '--provider' spec} of the outside providers among `names` (to re-create them)."""
    from blockattn import providers

    out = {}
    for n in names:
        try:
            p = providers.get(n)
        except ValueError:
            continue
        if p.spec:
            out[n] = p.spec
    return out


def timestamp() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y%m%d-%H%M%S")


def default_out(kind: str) -> Path:
    return Path("reports") / f"{kind}-{timestamp()}"


def after_cases_note(out: str | Path, records: list[dict[str, Any]], args: Any) -> str:
    """What Ctrl-C after every case was judged says: the verdicts so far, where the complete
    results are and the command that finishes the rest (the contract battery, the reports)."""
    vs = [r.get("verdict") for r in records if isinstance(r.get("verdict"), dict)]
    failed = sum(not v.get("passed", True) for v in vs)
    skipped = sum(bool(v.get("skipped")) and v.get("passed", True) for v in vs)
    counts = (f"{len(vs) - failed - skipped} passed, {failed} failed, {skipped} unsupported"
              if vs else "no verdicts (--no-tolerances)")  # fmt: skip
    return (f"\ninterrupted after every case was run: {len(records)} cases, {counts}; the "
            f"contract battery and the reports (report.json, summary.md) were not finished.\n"
            f"  results (complete): {out}/results.jsonl\n"
            f"  render them:        blockattn report {out}\n"
            f"  finish the run:     {resume_command(args, out)}")  # fmt: skip


_PREVIOUS_SIGINT: list[Any] = []


def say_on_interrupt(message: str | None) -> None:
    """From here on, Ctrl-C prints `message` before the KeyboardInterrupt it raises as usual;
    None restores the handler there was before. Main thread only (signals are delivered there)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    if message is None:
        if _PREVIOUS_SIGINT:
            signal.signal(signal.SIGINT, _PREVIOUS_SIGINT.pop())
        return
    prev = signal.getsignal(signal.SIGINT)
    if getattr(prev, "_blockattn_note", False):  # an earlier command's, never restored
        prev = _PREVIOUS_SIGINT.pop() if _PREVIOUS_SIGINT else signal.default_int_handler
    if prev is not signal.default_int_handler:  # ignored (a background job) or someone's own
        return

    def handler(signum: int, frame: Any) -> None:
        print(message, file=sys.stderr, flush=True)
        raise KeyboardInterrupt

    handler._blockattn_note = True  # type: ignore[attr-defined]
    _PREVIOUS_SIGINT.append(prev)
    signal.signal(signal.SIGINT, handler)
