"""`blockattn` command line: one subcommand per module in `blockattn.commands`.

Each command module defines `HELP: str`, `add_arguments(parser)` and `main(args) -> int`.
Exit codes: 0 success, 1 numeric failure, 2 usage or configuration error.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from blockattn import commands as _commands


def _command_modules() -> dict[str, object]:
    mods = {}
    for info in sorted(pkgutil.iter_modules(_commands.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        mods[info.name.replace("_", "-")] = importlib.import_module(
            f"blockattn.commands.{info.name}"
        )
    return mods


def version_string() -> str:
    """Package version, commit and the torch/triton it runs with (what a bug report needs)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        ver = version("blockattn")
    except PackageNotFoundError:
        ver = "unknown (not installed)"
    from blockattn.run.execute import git_commit

    parts = [f"blockattn {ver}", f"commit {git_commit()}"]
    for mod in ("torch", "triton"):
        try:
            parts.append(f"{mod} {importlib.import_module(mod).__version__}")
        except ImportError:
            parts.append(f"{mod} missing")
    return ", ".join(parts)


class _VersionAction(argparse.Action):
    """`--version`, computed only when asked: it imports torch, which must wait for configure()."""

    def __init__(self, option_strings: list[str], dest: str, **kw: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print versions and exit")

    def __call__(self, parser, namespace, values, option_string=None) -> None:  # type: ignore[override]
        print(version_string())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="blockattn", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, mod in _command_modules().items():
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_main=mod.main)
    return parser


def _after_the_kernel(args: argparse.Namespace, rc: int) -> int:
    """Every command that hosted a kernel ends its worker here and fails (exit 1) when the
    kernel left processes behind or wrote the judge's files: `run`, `gate`, `contract` and
    `bench` have put that in their reports already; `replay` says it here. (`audit` hosts no
    worker: its kernels run in its own process, and its reports say NOT ISOLATED.)"""
    from blockattn.commands._options import say_isolation_failures
    from blockattn.run import isolated

    late = isolated.end_worker()
    if late and rc == 0:
        say_isolation_failures(args.command, late)
        return 1
    return rc


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # argparse exits 2 on usage errors
    args._argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if not hasattr(args, "call_timeout"):
            return int(args._main(args) or 0)
        from blockattn.commands._options import isolation, starts_worker

        if starts_worker(args):  # before torch is imported here: the two start side by side
            from blockattn.run import spawn

            spawn.early()
        with isolation(args):  # the kernel under test runs in a worker (blockattn.run.isolated)
            rc = int(args._main(args) or 0)
            return _after_the_kernel(args, rc)
    except (ValueError, TypeError, OSError) as exc:  # OSError: --out is a file, no access...
        print(f"blockattn {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # anywhere else: one line, the shell's code for SIGINT
        print(f"\nblockattn {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
