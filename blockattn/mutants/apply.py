"""Apply a mutant to a temporary copy of the `blockattn` package, never to the source tree."""

from __future__ import annotations

import shutil
from pathlib import Path

from blockattn.mutants.mutant import Mutant

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the blockattn package being tested


def oracles_dir() -> Path:
    """The `oracles` package (the FP64 oracles and bounds): beside blockattn in a checkout, else
    wherever it is installed."""
    beside = PACKAGE_DIR.parent / "oracles"
    if beside.is_dir():
        return beside
    import oracles

    return Path(oracles.__file__).resolve().parent


def _source(m: Mutant, package_dir: Path) -> Path:
    """The file `m` plants its bug in: relative to the blockattn package ("../oracles/x.py" is
    the oracles package beside it)."""
    if m.file.startswith("../oracles/"):
        return oracles_dir() / m.file.removeprefix("../oracles/")
    return package_dir / m.file


def anchor_count(m: Mutant, package_dir: Path = PACKAGE_DIR) -> int:
    return _source(m, package_dir).read_text().count(m.anchor)


def check_anchor(m: Mutant, package_dir: Path = PACKAGE_DIR) -> None:
    n = anchor_count(m, package_dir)
    if n != 1:
        raise ValueError(
            f"mutant {m.name!r}: anchor occurs {n} times in {_source(m, package_dir)} (must be "
            f"exactly once; the source changed - update blockattn/mutants/catalog.py): {m.anchor!r}"
        )


def make_copy(root: Path, m: Mutant | None, package_dir: Path = PACKAGE_DIR) -> Path:
    """Copy the package and `oracles` to root/ with mutant `m` applied (None: unmodified
    control).

    Returns root, the directory to put first on the worker's sys.path.
    """
    dst = root / "blockattn"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(package_dir, dst, ignore=ignore)
    shutil.copytree(oracles_dir(), root / "oracles", ignore=ignore)
    if m is not None:
        check_anchor(m, package_dir)
        target = (dst / m.file).resolve()
        src = target.read_text()
        target.write_text(src.replace(m.anchor, m.replacement, 1))
    return root
