"""The house rules, checked on the source: imports point only down the layers (no cycles, no
import from a lower layer into a higher one), no source file over 700 lines, and no result data
among the code files.

The layers, lowest first, in the order the data flows (README "How it is built"). A module may
import its own layer (without a cycle) and any layer below it. Module-level and function-level
imports count alike, `if TYPE_CHECKING:` ones too: a lazy import is still an arrow.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("blockattn", "oracles")

# (layer, module prefixes); a module belongs to the layer of its longest matching prefix. The
# package itself ("blockattn") matches only itself: a new top-level module needs a layer here.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ground", ("oracles", "blockattn.names", "blockattn.dtypes", "blockattn.validation",
                "blockattn.bounds")),
    ("kernels", ("blockattn.kernels",)),
    ("ops", ("blockattn.ops", "blockattn")),  # the package itself is the public API (lazy)
    ("providers", ("blockattn.providers",)),
    ("cases", ("blockattn.cases",)),
    ("run", ("blockattn.run",)),
    ("judge", ("blockattn.judge",)),
    ("report", ("blockattn.report",)),
    ("pipeline", ("blockattn.pipeline",)),
    ("tools", ("blockattn.bench", "blockattn.audit", "blockattn.mutants")),
    ("commands", ("blockattn.commands",)),
    # the worker process's main: it hosts the kernel under test and serves every request kind
    ("entry", ("blockattn.cli", "blockattn.__main__", "blockattn.pytest_plugin",
               "blockattn.run.worker")),
)  # fmt: skip
MAX_LINES = 700
# Result data (measurements, logs, plots) lives under results/, never beside code.
DATA_SUFFIXES = (".json", ".jsonl", ".csv", ".log", ".png", ".txt")
CODE_DIRS = ("blockattn", "oracles", "benchmarks", "ci", "examples", "claims")
DATA_ALLOWED = ("ci/baselines/",)  # gate inputs, not results


def modules(root: Path = ROOT) -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for p in sorted((root / pkg).rglob("*.py")):
            rel = p.relative_to(root).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = p
    return out


def _targets(mod: str, path: Path, node: ast.AST, known: dict[str, Path]) -> list[str]:
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            pkg = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
            pkg = pkg[: len(pkg) - node.level + 1]
            base = ".".join(pkg + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    out = []
    for n in names:
        while n and n not in known:
            n = n.rpartition(".")[0]
        if n and n != mod:
            out.append(n)
    return out


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    known = modules(root)
    graph: dict[str, set[str]] = {m: set() for m in known}
    for mod, path in known.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            graph[mod].update(_targets(mod, path, node, known))
    return graph


def layer_of(mod: str) -> int:
    best, rank = -1, None
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            inside = mod.startswith(p + ".") and p != "blockattn"
            if (mod == p or inside) and len(p) > best:
                best, rank = len(p), i
    if rank is None:
        raise AssertionError(f"{mod}: in no layer; add it to LAYERS")
    return rank


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for a, targets in sorted(graph.items()):
        for b in sorted(targets):
            la, lb = layer_of(a), layer_of(b)
            if lb > la:
                bad.append(f"{a} ({LAYERS[la][0]}) imports {b} ({LAYERS[lb][0]})")
    return bad


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_module_has_a_layer() -> None:
    for mod in modules():
        layer_of(mod)


def test_imports_only_point_down() -> None:
    bad = upward_imports(import_graph())
    assert not bad, "imports from a lower layer into a higher one:\n" + "\n".join(bad)


def test_no_import_cycles() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_no_source_file_over_the_limit() -> None:
    long = [f"{p.relative_to(ROOT)}: {n} lines" for p in modules().values()
            if (n := len(p.read_text().splitlines())) > MAX_LINES]  # fmt: skip
    scripts = [p for d in ("benchmarks", "ci", "examples") for p in (ROOT / d).rglob("*.py")]
    long += [f"{p.relative_to(ROOT)}: {n} lines" for p in scripts
             if (n := len(p.read_text().splitlines())) > MAX_LINES]  # fmt: skip
    assert not long, f"source files over {MAX_LINES} lines: {long}"


def test_no_result_data_among_the_code() -> None:
    # The files on disk, not git's index: a device copy may carry a stale .git.
    data = [str(p.relative_to(ROOT)) for d in CODE_DIRS for p in (ROOT / d).rglob("*")
            if p.suffix in DATA_SUFFIXES and "__pycache__" not in p.parts
            and not str(p.relative_to(ROOT)).startswith(DATA_ALLOWED)]  # fmt: skip
    assert not data, f"result data among the code files (move it under results/): {data[:10]}"


# The checker is code too: pin it on small trees with known answers.


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    """A package tree with these files (and an empty __init__.py in every folder)."""
    for rel, text in files.items():
        p = tmp_path / rel
        for d in p.relative_to(tmp_path).parents:
            (tmp_path / d).mkdir(parents=True, exist_ok=True)
            if d != Path("."):
                (tmp_path / d / "__init__.py").touch()
        p.write_text(text)
    return tmp_path


def test_checker_finds_an_upward_function_level_import(tmp_path: Path) -> None:
    spec, verdict = "blockattn.cases.spec", "blockattn.judge.verdict"
    lazy = "def f():\n    from blockattn.judge import verdict\n"  # a function-level import
    root = _tree(tmp_path, {"blockattn/cases/spec.py": lazy,
                            "blockattn/judge/verdict.py": f"from {spec} import f\n"})  # fmt: skip
    assert upward_imports(import_graph(root)) == [f"{spec} (cases) imports {verdict} (judge)"]
    assert cycles(import_graph(root)) == [[spec, verdict]]


def test_checker_wants_a_layer_for_every_new_module() -> None:
    with pytest.raises(AssertionError, match="in no layer"):
        layer_of("blockattn.harness.runner")
    assert LAYERS[layer_of("blockattn")][0] == "ops"
    assert LAYERS[layer_of("blockattn.kernels.dispatch")][0] == "kernels"


def test_checker_finds_a_cycle_inside_one_layer_and_passes_a_clean_tree(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"blockattn/kernels/a.py": "from . import b\n", "oracles/x.py": "",
                            "blockattn/kernels/b.py": "from blockattn.kernels.a import x\n",
                            "blockattn/ops.py": "from blockattn.kernels import a\n"})  # fmt: skip
    g = import_graph(root)
    assert upward_imports(g) == []
    assert cycles(g) == [["blockattn.kernels.a", "blockattn.kernels.b"]]
    (root / "blockattn/kernels/b.py").write_text("x = 1\n")
    assert cycles(import_graph(root)) == [] and upward_imports(import_graph(root)) == []
