"""`blockattn contract`: the contract battery alone, for one provider (the replay of a violation).

`run` and `gate` run the same battery for the provider under test; a violation there prints this
command to reproduce it.
"""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

from blockattn.commands._options import add_provider_option, int_at_least
from blockattn.judge.tolerances import resolve_path as _tol_path

HELP = ("Run the contract battery (inputs untouched, no aliasing, non-finite containment, "
        "layouts, block sizes, degenerate batches, determinism) on one provider.")  # fmt: skip


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_provider_option(p)
    p.add_argument("--under-test", help="provider to check (default: the first --provider, "
                   "else blockattn)")  # fmt: skip
    p.add_argument("--tolerances", type=_tol_path, default=None,
                   help="tolerance file judging the numbers (default: newest released for "
                        "this device)")  # fmt: skip
    p.add_argument("--repeats", type=int_at_least(2), default=None,
                   help="determinism repeats (default 20 on a GPU, 3 on the CPU interpreter)")
    p.add_argument("--out", type=Path, default=None, help="write contract.json and contract.md")


def replay_command(provider_spec: str | None, name: str, tol_path: str | None) -> str:
    """The command that re-runs the battery for this provider alone."""
    parts = ["blockattn", "contract"]
    parts += ["--provider", provider_spec] if provider_spec else ["--under-test", name]
    if tol_path:
        parts += ["--tolerances", str(tol_path)]
    return shlex.join(parts)


def run_for(name: str, tol, device: str, tol_path: str | None, repeats: int | None = None):
    """(checks, markdown, replay) of the battery for the registered provider `name`."""
    from blockattn import providers
    from blockattn.judge.contract import markdown, run_battery

    prov = providers.get(name)
    checks = run_battery(prov, tol, device, repeats)
    replay = replay_command(prov.spec, prov.name, tol_path)
    return checks, markdown(checks, prov.name, replay), replay


def section(name: str | None, tol, device: str, skip: bool = False
            ) -> tuple[list[dict] | None, str, list[str]]:
    """For `run` and `gate`: (checks as dicts or None, Markdown section, failure lines) of the
    battery for the provider under test; skipped with a line saying why when it cannot run."""
    from blockattn import providers
    from blockattn.judge.contract import failures

    if skip:
        return None, "### Contract battery: not run (--no-contract)", []
    if tol is None:
        return None, "### Contract battery: not run (no tolerance file judges its numbers)", []
    try:
        providers.get(name or "")
    except ValueError:
        return None, (f"### Contract battery: not run (provider {name!r} is not loaded here: "
                      "pass it with --provider)"), []  # fmt: skip
    checks, md, replay = run_for(name, tol, device, str(tol.path))
    bad = [f"contract violated: {c.prop} ({c.probe}): {c.detail}" for c in failures(checks)]
    if bad:
        bad = [*bad[:10], f"contract replay: {replay}"]
    return [c.to_dict() for c in checks], md, bad


def add_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-contract", action="store_true",
                   help="skip the contract battery of the provider under test")  # fmt: skip


def main(args: argparse.Namespace) -> int:
    from blockattn import providers
    from blockattn.commands._options import load_tolerances
    from blockattn.judge.contract import failures
    from blockattn.run import session

    device = session.setup_device()
    outside = providers.load_specs(args.provider)
    name = args.under_test or (outside[0] if outside else "blockattn")
    providers.get(name)  # unknown -> ValueError naming it (exit 2)
    tol = load_tolerances(args, device)
    checks, md, _ = run_for(name, tol, device, str(tol.path), args.repeats)
    print(md)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "contract.json").write_text(
            json.dumps([c.to_dict() for c in checks], indent=1) + "\n")
        (args.out / "contract.md").write_text(md + "\n")
    return 1 if failures(checks) else 0
