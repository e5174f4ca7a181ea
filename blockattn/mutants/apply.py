"""Apply a mutant to a temporary copy of the `blockattn` package, never to the source tree."""

from __future__ import annotations

import shutil
from pathlib import Path

from blockattn.mutants.mutant import Mutant

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the blockattn package being tested


def anchor_count(m: Mutant, package_dir: Path = PACKAGE_DIR) -> int:
    return (package_dir / m.file).read_text().count(m.anchor)


def check_anchor(m: Mutant, package_dir: Path = PACKAGE_DIR) -> None:
    n = anchor_count(m, package_dir)
    if n != 1:
        raise ValueError(
            f"mutant {m.name!r}: anchor occurs {n} times in blockattn/{m.file} (must be exactly "
            f"once; the source changed - update blockattn/mutants/catalog.py): {m.anchor!r}"
        )


def make_copy(root: Path, m: Mutant | None, package_dir: Path = PACKAGE_DIR) -> Path:
    """Copy the package to root/blockattn with mutant `m` applied (None: unmodified control).

    Returns root, the directory to put first on the worker's sys.path.
    """
    dst = root / "blockattn"
    shutil.copytree(package_dir, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    if m is not None:
        check_anchor(m, package_dir)
        target = dst / m.file
        src = target.read_text()
        target.write_text(src.replace(m.anchor, m.replacement, 1))
    return root
