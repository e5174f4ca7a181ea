"""The judge's own files, watched while a kernel runs beside them.

The worker runs as the judge's user, so a kernel can write wherever the judge can: the
package's sources and tolerance files, the bytecode the judge (or a later CI step) imports, the
start-up hooks every later Python runs (`*.pth`, `sitecustomize`, `usercustomize` on the path),
a baseline the gate compares with. Before the worker imports any kernel (isolated.Sandbox),
`import_judge()` imports every module of the judge, so nothing it runs later is loaded from a
file the kernel could have written (a planted `.pyc` was imported by a gate that imported its
rules lazily: tests/redteam/test_judge_files.py), and `snapshot()` hashes the files. After the
last call (`Sandbox.end_worker`, before any verdict is written) `changes()` names every
difference, and the run fails on it. Bytecode is held to its source: a cached module written
during the run (by the judge's own imports, or another process's) must be the compilation of
its source, whoever wrote it. Torch-free itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import marshal
import site
import sys
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # blockattn/
ORACLES = PACKAGE.parent / "oracles"  # the FP64 oracles, installed beside it
ROOTS = tuple(d for d in (PACKAGE, ORACLES) if d.is_dir())
NOT_IMPORTED = ("blockattn.__main__", "blockattn.pytest_plugin")  # a command, pytest's plugin
HOOKS = ("sitecustomize.py", "usercustomize.py", "sitecustomize.pyc", "usercustomize.pyc")
ABSENT = "absent"


@dataclass
class Snapshot:
    files: dict[str, str] = field(default_factory=dict)  # path -> sha256, or ABSENT
    pycs: dict[str, tuple[int, int]] = field(default_factory=dict)  # path -> (size, mtime_ns)
    hook_dirs: list[str] = field(default_factory=list)


def _sha(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ABSENT


def _hook_dirs() -> list[Path]:
    """Every directory whose start-up hooks a later Python may run: the path, the site dirs
    (the user's too, which a kernel could create)."""
    dirs = [Path(p) for p in sys.path if p]
    with contextlib.suppress(AttributeError):  # a virtualenv's old site module
        dirs += [Path(p) for p in site.getsitepackages()] + [Path(site.getusersitepackages())]
    unique = dict.fromkeys(d.resolve() for d in dirs)  # in path order, once each
    return [d for d in unique if d not in ROOTS]


def _hook_files(d: Path) -> list[Path]:
    found = [p for p in d.glob("*.pth")] if d.is_dir() else []
    return found + [d / n for n in HOOKS]


def import_judge() -> None:
    """Import every module of blockattn and the oracles now (a module whose optional
    dependency is missing is left out: it fails wherever it is imported)."""
    import importlib
    import pkgutil

    for root in ROOTS:
        for m in pkgutil.walk_packages([str(root)], f"{root.name}."):
            if m.name in NOT_IMPORTED or m.name in sys.modules:
                continue
            with contextlib.suppress(Exception):
                importlib.import_module(m.name)


def _package_files() -> list[Path]:
    return [p for r in ROOTS for p in r.rglob("*") if p.is_file() and "__pycache__" not in p.parts]


def _pycs() -> dict[str, tuple[int, int]]:
    out = {}
    for p in (p for r in ROOTS for p in r.rglob("__pycache__/*.pyc")):
        try:
            st = p.stat()
        except OSError:
            continue
        out[str(p)] = (st.st_size, st.st_mtime_ns)
    return out


def snapshot(extra: list[str | Path] | tuple = ()) -> Snapshot:
    """The judge's files now: the package's, the start-up hooks on the path, and `extra` (files
    a run reads, e.g. a gate's baseline)."""
    snap = Snapshot(pycs=_pycs())
    for p in _package_files():
        snap.files[str(p)] = _sha(p)
    for d in _hook_dirs():
        snap.hook_dirs.append(str(d))
        for p in _hook_files(d):
            snap.files[str(p)] = _sha(p)
    for e in extra:
        if e:
            p = Path(e).resolve()
            snap.files[str(p)] = _sha(p)
    return snap


def _pyc_is_its_source(pyc: Path) -> bool:
    """Whether a cached module is the compilation of its source (the code objects compared: a
    header that matches the source's size and time is all the import system checks)."""
    name, _, rest = pyc.name.partition(".")
    tag = sys.implementation.cache_tag
    if not rest.startswith(tag):
        return True  # another interpreter's cache: never imported by this one
    opt = rest[len(tag):].removesuffix(".pyc")  # "" or ".opt-1" / ".opt-2"
    src = pyc.parent.parent / f"{name}.py"
    try:
        data = pyc.read_bytes()
        code = marshal.loads(data[16:])
        text = importlib.util.decode_source(src.read_bytes())
        ref = compile(text, str(src), "exec", dont_inherit=True,
                      optimize=int(opt[-1]) if opt else 0)  # fmt: skip
    except (OSError, ValueError, EOFError, TypeError, SyntaxError):
        return False
    return code == ref


def _rel(path: str) -> str:
    p = Path(path)
    try:
        return str(p.relative_to(PACKAGE.parent))
    except ValueError:
        return str(p)


def changes(before: Snapshot) -> list[str]:
    """Each of the judge's files that differs from `before`: changed, removed or added, and
    cached bytecode that is not its source's compilation."""
    now = {p: _sha(Path(p)) for p in before.files}
    for p in _package_files():
        now.setdefault(str(p), _sha(p))
    for d in before.hook_dirs:
        for p in _hook_files(Path(d)):
            now.setdefault(str(p), _sha(p))
    out = []
    for p, h in sorted(now.items()):
        was = before.files.get(p, ABSENT)
        if h == was:
            continue
        what = "added" if was == ABSENT else ("removed" if h == ABSENT else "changed")
        out.append(f"{_rel(p)} ({what})")
    for p, stamp in sorted(_pycs().items()):
        if before.pycs.get(p) != stamp and not _pyc_is_its_source(Path(p)):
            out.append(f"{_rel(p)} (bytecode that is not its source's)")
    return out


def lines(before: Snapshot | None) -> list[str]:
    """The run's failure line for `changes`, or none."""
    found = changes(before) if before is not None else []
    if not found:
        return []
    return [f"the judge's own files changed while the kernel ran (its code, rules or start-up "
            f"hooks; nothing else should write them): {', '.join(found[:8])}"
            + (f" and {len(found) - 8} more" if len(found) > 8 else "")]  # fmt: skip
