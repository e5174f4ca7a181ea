"""`blockattn audit --example-claims` (issue 43, item 5): the example claims file ships inside
the package, so a user's own repository can start from it (examples/ exists only in a clone)."""

from __future__ import annotations

import contextlib
from pathlib import Path

from blockattn import cli
from blockattn.audit import claims as claims_mod
from blockattn.commands.audit import EXAMPLE_CLAIMS

REPO = Path(__file__).resolve().parents[2]


def _body(text: str) -> str:
    return text[text.index("schema_version"):]


def test_the_shipped_example_is_the_clones_example() -> None:
    assert _body(EXAMPLE_CLAIMS) == _body((REPO / "examples" / "claims.toml").read_text())


def test_example_claims_writes_a_loadable_file_from_any_directory(tmp_path: Path, monkeypatch,
                                                                  capsys) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)  # a user's own repository: no examples/ here
    assert cli.main(["audit", "--example-claims", "claims.toml"]) == 0
    assert "--claims claims.toml" in capsys.readouterr().err
    shapes, claims = claims_mod.load(tmp_path / "claims.toml")
    assert "small" in shapes and {c.kernel for c in claims} == {"mine"}
    assert cli.main(["audit", "--example-claims", "claims.toml"]) == 2  # never overwrites


def test_example_claims_prints_without_a_path(capsys) -> None:
    assert cli.main(["audit", "--example-claims"]) == 0
    assert capsys.readouterr().out == EXAMPLE_CLAIMS


def test_help_says_so(capsys) -> None:
    with contextlib.suppress(SystemExit):
        cli.main(["audit", "--help"])
    assert "--example-claims" in capsys.readouterr().out
