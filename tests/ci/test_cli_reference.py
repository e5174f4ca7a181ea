"""docs/cli.md is generated from the argparse definitions (docs/gen_cli.py) and cannot drift:
the committed page must equal what the generator writes now."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_cli", REPO / "docs" / "gen_cli.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_committed_cli_reference_is_what_the_generator_writes() -> None:
    committed = (REPO / "docs" / "cli.md").read_text()
    assert committed == _generator().render(), (
        "docs/cli.md is stale: run `python3 docs/gen_cli.py` and commit docs/cli.md")


def test_cli_reference_covers_every_command_and_option() -> None:
    import argparse

    from blockattn import cli

    text = (REPO / "docs" / "cli.md").read_text()
    parser = cli.build_parser()
    (subs,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, sub in subs.choices.items():
        assert f"## `blockattn {name}`" in text
        for action in sub._actions:
            if action.help == argparse.SUPPRESS:  # hidden on purpose (an old spelling)
                continue
            for opt in action.option_strings:
                if opt not in ("-h", "--help"):
                    assert f"`{opt}" in text, f"{name} {opt} missing from docs/cli.md"
