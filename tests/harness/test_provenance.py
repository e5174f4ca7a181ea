"""Provenance names blockattn's own commit, and `run --resume` refuses a directory with no run
(issue 21, items 2 and 3)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from blockattn import cli
from blockattn.run.execute import git_commit

REPO = Path(__file__).resolve().parents[2]


def _git(cwd: Path, *a: str) -> str:
    return subprocess.run(["git", *a], cwd=cwd, capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip


def test_a_copy_inside_another_repository_does_not_report_its_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BLOCKATTN_GIT_COMMIT", raising=False)
    other = tmp_path / "project"
    (other / "vendor").mkdir(parents=True)
    shutil.copytree(REPO / "blockattn", other / "vendor" / "blockattn",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    _git(other, "init", "-q")
    _git(other, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "--allow-empty",
         "-m", "someone else's project")  # fmt: skip
    theirs = _git(other, "rev-parse", "--short", "HEAD")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from blockattn.run.execute import "
            "git_commit; print(git_commit())")  # fmt: skip
    got = subprocess.run([sys.executable, "-c", code, str(other / "vendor")], capture_output=True,
                         text=True, cwd=tmp_path, check=True).stdout.strip()  # fmt: skip
    assert got == "unknown" and got != theirs


def test_a_checkout_reports_its_own_head_and_the_stamp_wins(monkeypatch) -> None:
    monkeypatch.delenv("BLOCKATTN_GIT_COMMIT", raising=False)
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    assert git_commit() == _git(REPO, "rev-parse", "--short", "HEAD")
    monkeypatch.setenv("BLOCKATTN_GIT_COMMIT", "0123456789abcdef0123456789abcdef01234567")
    assert git_commit() == "0123456789"


def test_resume_of_a_missing_directory_is_an_error_naming_it(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "no-such-run"
    rc = cli.main(["run", "--out", str(missing), "--resume", "--max-cases", "1"])
    assert rc == 2
    assert str(missing) in capsys.readouterr().err
    assert not missing.exists()
