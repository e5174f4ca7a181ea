"""Shared plumbing of the commands: device set-up, output dirs, report.json/summary.md writing."""

from __future__ import annotations

import datetime as _dt
import json
import os
import sys
from pathlib import Path
from typing import Any

from blockattn.run import env


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


def check_run_options(out: Path, options: dict[str, Any], resume: bool) -> None:
    """Record a run's options in DIR/run.json; `--resume` refuses a directory run with others."""
    p = Path(out) / RUN_OPTIONS
    if resume and (Path(out) / "results.jsonl").exists():
        if not p.exists():
            raise ValueError(f"--resume: {p} is missing (a run by an older blockattn?): its "
                             "options cannot be checked; start a fresh --out")  # fmt: skip
        old = json.loads(p.read_text())
        # max_cases only cuts the same ordered plan shorter or longer: resuming with another
        # is continuing the same run. Every other option changes which cases or how judged.
        diff = sorted(k for k in {*old, *options} - RESUMABLE if old.get(k) != options.get(k))
        if diff:
            raise ValueError(
                f"--resume: {out} was run with other options; differing: "
                + "; ".join(f"{k}: {old.get(k)!r} there, {options.get(k)!r} now" for k in diff)
            )
        return
    Path(out).mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(options, indent=1, sort_keys=True) + "\n")
    tmp.replace(p)


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
