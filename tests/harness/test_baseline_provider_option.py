"""`--baseline` names a report directory (gate, mutants, CI); the baseline *provider* of `run`
is `--baseline-provider` (plugin: `--blockattn-baseline-provider`); the old spelling on `run`
still works, warns and names the new one (issue 43, item 5)."""

from __future__ import annotations

import pytest

from blockattn import cli, pytest_plugin


def _parse(argv: list[str]):
    return cli.build_parser().parse_args(argv)


def test_run_takes_baseline_provider_silently(capsys) -> None:
    args = _parse(["run", "--baseline-provider", "eager"])
    assert args.baseline == "eager"
    assert "warning" not in capsys.readouterr().err


def test_run_old_baseline_spelling_warns_and_still_works(capsys) -> None:
    args = _parse(["run", "--baseline", "eager"])
    assert args.baseline == "eager"
    err = capsys.readouterr().err
    assert "`--baseline eager` is now `--baseline-provider eager`" in err, err


def test_run_help_shows_only_the_new_spelling(capsys) -> None:
    with pytest.raises(SystemExit):
        _parse(["run", "--help"])
    out = capsys.readouterr().out
    assert "--baseline-provider" in out and "--baseline " not in out.replace(
        "--baseline-provider", "")  # fmt: skip


def test_gate_baseline_is_still_a_report_directory() -> None:
    args = _parse(["gate", "--baseline", "some/dir"])
    assert str(args.baseline) == "some/dir"


def test_plugin_old_spelling_warns() -> None:
    with pytest.warns(DeprecationWarning, match="--blockattn-baseline-provider eager"):
        assert pytest_plugin._old_baseline("eager") == "eager"
    assert pytest_plugin._old_baseline(None) is None


def test_plugin_registers_the_new_option(pytestconfig: pytest.Config) -> None:
    assert pytestconfig.getoption("blockattn_baseline") is None  # --blockattn-baseline-provider
    assert pytestconfig.getoption("blockattn_baseline_old") is None
