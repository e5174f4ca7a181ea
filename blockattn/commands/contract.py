"""`blockattn contract`: the contract battery alone, for one provider (the replay of a violation).

`run` and `gate` run the same battery for the provider under test; a violation there prints this
command to reproduce it.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
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
    from blockattn.commands._options import add_unreleased_option

    add_unreleased_option(p)
    from blockattn.commands._options import add_isolation_options

    add_isolation_options(p)
    p.add_argument("--repeats", type=int_at_least(2), default=None,
                   help="determinism repeats (default 20 on a GPU, 3 on the CPU interpreter)")
    p.add_argument("--only", default=None, metavar="PROPERTY|PROBE",
                   help="run one property (containment, layout, ...) or one probe "
                        "(containment-last, layout-qkv-packed, ...): the replay of a violation")
    p.add_argument("--out", type=Path, default=None, help="write contract.json and contract.md")


def replay_command(provider_spec: str | None, name: str, tol_path: str | None,
                   only: str | None = None) -> str:  # fmt: skip
    """The command that re-runs the battery (or one probe of it) for this provider alone."""
    parts = ["blockattn", "contract"]
    parts += ["--provider", provider_spec or name]
    if tol_path:
        parts += ["--tolerances", str(tol_path)]
    if only:
        parts += ["--only", only]
    return shlex.join(parts)


def run_for(name: str, tol, device: str, tol_path: str | None, repeats: int | None = None,
            only: str | None = None):  # fmt: skip
    """(checks, markdown, replay) of the battery for the registered provider `name`; every
    failing check gets its own replay command (`Check.replay`)."""
    from blockattn import providers
    from blockattn.judge.contract import markdown, run_battery

    prov = providers.get(name)
    checks = run_battery(prov, tol, device, repeats, only)
    for c in checks:
        if c.status == "FAIL":
            c.replay = replay_command(prov.spec, prov.name, tol_path, c.probe.split(" ")[0])
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
    from blockattn.commands._options import isolate

    isolate([name])  # the battery calls the kernel in the worker, never in the judge
    checks, md, replay = run_for(name, tol, device, str(tol.path))
    bad = [f"contract violated: {c.prop} ({c.probe}): {c.detail}  [replay: {c.replay}]"
           for c in failures(checks)]  # fmt: skip
    if len(bad) > 10:
        bad = [*bad[:10], f"... {len(bad) - 10} more; the whole battery: {replay}"]
    return [c.to_dict() for c in checks], md, bad


def add_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-contract", action="store_true",
                   help="skip the contract battery of the provider under test")  # fmt: skip


def main(args: argparse.Namespace) -> int:
    from blockattn import providers
    from blockattn.commands._options import load_tolerances
    from blockattn.judge.contract import failures, judged
    from blockattn.run import session

    device = session.setup_device()
    from blockattn.commands._options import isolate, load_provider_specs, say_isolation_failures

    outside = load_provider_specs(args.provider)
    name = args.under_test or (outside[0] if outside else "blockattn")
    providers.get(name)  # unknown -> ValueError naming it (exit 2)
    isolate([name])
    tol = load_tolerances(args, device)
    checks, md, _ = run_for(name, tol, device, str(tol.path), args.repeats, args.only)
    # The worker ends before the report is written: what the kernel did beyond its calls (the
    # judge's files changed, processes left running) is a failing check in it, not only stderr
    from blockattn.judge.contract import Check
    from blockattn.run import isolated

    late = [Check("isolation", "the kernel's worker, ended", "FAIL", line)
            for line in isolated.end_worker()]  # fmt: skip
    checks = [*checks, *late]
    md = "\n".join([md, *(f"**FAIL: {c.detail}**" for c in late)])
    print(md)
    say_isolation_failures("contract", [c.detail for c in late])  # also in its report
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "contract.json").write_text(
            json.dumps([c.to_dict() for c in checks], indent=1) + "\n")
        (args.out / "contract.md").write_text(md + "\n")
    if failures(checks):
        return 1
    if not judged(checks):  # fail closed: a battery that called nothing vouches for nothing
        print(f"error: the contract battery judged nothing for {name!r} here", file=sys.stderr)
        return 1
    return 0
