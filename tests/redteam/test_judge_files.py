"""A kernel that writes the judge's own files: its code (an agent editing the evaluator), cached
bytecode the import system would load in its place, a start-up hook every later Python runs.
The worker runs as the judge's user, so it can; the judge hashes its files before the worker
imports any kernel and fails the run naming each change (blockattn/run/judge_files.py). Each
run here judges from a throwaway copy of the package: the adversaries refuse to touch anything
else (`adversaries._judge_copy`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import blockattn
from blockattn.run import judge_files

HERE = Path(__file__).resolve().parent
PACKAGE = Path(blockattn.__file__).resolve().parent  # the one imported (a mutant's copy too)
LINE = "the judge's own files changed while the kernel ran"


def _judge_copy(tmp: Path) -> tuple[Path, dict[str, str]]:
    root = tmp / "judge"
    shutil.copytree(PACKAGE, root / "blockattn",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    path = [str(root), str(HERE), *filter(None, [env.get("PYTHONPATH")])]
    env.update(PYTHONPATH=os.pathsep.join(path),
               REDTEAM_JUDGE_COPY=str(root), REDTEAM_NOTE=str(tmp / "note.txt"))  # fmt: skip
    return root, env


def _gate(env: dict[str, str], spec: str, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "blockattn", "gate", "--provider", spec,
                           "--out", str(out), "--max-cases", "1", "--fuzz", "0",
                           "--no-contract", "--no-progress"], cwd=HERE, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip


def test_a_kernel_that_writes_the_judges_files_fails_naming_each(tmp_path: Path) -> None:
    """Each attack from its own copy (a rewritten judge would judge the next run)."""
    before = {p: p.read_bytes() for p in (PACKAGE / "judge").glob("*.py")}
    for spec, wrote in (("r=adversaries:rewrite_judge", "blockattn/judge/verdict.py (changed)"),
                        ("b=adversaries:plant_bytecode", "gate_rules.cpython"),
                        ("s=adversaries:startup_hook", "sitecustomize.py (added)")):
        _, env = _judge_copy(tmp_path / spec[0])
        env["REDTEAM_NOTE"] = str(tmp_path / "note.txt")
        out = tmp_path / spec[0] / "out"
        r = _gate(env, spec, out)
        gate_md = (out / "gate.md").read_text() if (out / "gate.md").is_file() else ""
        log = r.stdout[-1500:] + r.stderr[-1500:] + gate_md[-1500:]
        assert r.returncode == 1, log
        assert LINE in gate_md and wrote in gate_md, log
    note = (tmp_path / "note.txt").read_text()
    assert all(w in note for w in ("rewrite_judge", "plant_bytecode", "startup_hook")), note
    # the real package was never touched
    assert before == {p: p.read_bytes() for p in (PACKAGE / "judge").glob("*.py")}


def test_an_honest_kernel_and_the_judges_own_bytecode_pass(tmp_path: Path) -> None:
    """The control: the same copy, writing its own bytecode as it imports (the judge's and the
    worker's), judges an honest kernel without the line."""
    root, env = _judge_copy(tmp_path)
    r = _gate(env, "h=adversaries:honest", tmp_path / "g")
    gate_md = (tmp_path / "g" / "gate.md").read_text()
    assert r.returncode == 0, r.stderr[-2000:] + gate_md[-2000:]
    assert LINE not in gate_md
    assert list(root.rglob("__pycache__/*.pyc")), "no bytecode written: the check was not tried"


def test_bytecode_is_held_to_its_source(tmp_path: Path) -> None:
    """Known answers for the bytecode check, in-process: the compilation of the source passes,
    other code behind a matching header does not, another interpreter's cache is not ours."""
    import importlib.util
    import marshal
    import py_compile

    src = tmp_path / "m.py"
    src.write_text("X = 1\n")
    cache = Path(py_compile.compile(str(src), doraise=True))
    assert judge_files._pyc_is_its_source(cache)
    st = src.stat()
    header = cache.read_bytes()[:16]
    cache.write_bytes(header + marshal.dumps(compile("X = 2\n", str(src), "exec")))
    assert not judge_files._pyc_is_its_source(cache)
    other = cache.with_name("m.cpython-299.pyc")
    other.write_bytes(b"junk")
    assert judge_files._pyc_is_its_source(other)
    assert importlib.util.cache_from_source(str(src)) == str(cache) and st.st_size == 6


def test_the_pytest_plugin_fails_the_case_of_a_kernel_that_writes_the_judges_files(
        tmp_path: Path) -> None:  # fmt: skip
    """The plugin's session keeps one worker between tests: each case and the battery check the
    judge's files, so the test that ran the kernel fails (under xdist too)."""
    _, env = _judge_copy(tmp_path)
    user = tmp_path / "user_repo"
    user.mkdir()
    (user / "pytest.ini").write_text("[pytest]\n")
    env = {k: v for k, v in env.items()
           if k != "TRITON_INTERPRET" and not k.startswith(("PYTEST_", "BLOCKATTN_"))}  # fmt: skip
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o",
                        "addopts=", "-v", "--blockattn-provider", "adversaries:rewrite_judge",
                        "--blockattn-corpus-only", "--blockattn-variant", "plain",
                        "--blockattn-case", "edge-lengths-plain-bf16", "-k", "test_blockattn["],
                       cwd=user, env=env, capture_output=True, text=True,
                       timeout=600)  # fmt: skip
    log = r.stdout[-3000:] + r.stderr[-1500:]
    assert r.returncode == 1, log
    assert "test_blockattn[edge-lengths-plain-bf16] FAILED" in r.stdout, log
    assert LINE in r.stdout and "blockattn/judge/verdict.py (changed)" in r.stdout, log


def test_a_runs_baseline_and_tolerance_files_are_watched(tmp_path: Path) -> None:
    """Known answers, in-process: the files a run names (a baseline directory's report.json, a
    tolerance file by path) are in the snapshot, and a change to one is named."""
    import argparse

    from blockattn.commands._options import isolation

    base = tmp_path / "base"
    base.mkdir()
    (base / "report.json").write_text("{}")
    tol = tmp_path / "t.toml"
    tol.write_text("x = 1\n")
    args = argparse.Namespace(baseline=str(base), tolerances=str(tol), call_timeout=None)
    with isolation(args) as sb:
        assert str((base / "report.json").resolve()) in sb.files.files
        assert str(tol.resolve()) in sb.files.files
        assert judge_files.lines(sb.files) == []
        (base / "report.json").write_text('{"forged": 1}')
        (line,) = judge_files.lines(sb.files)
        assert LINE in line and "report.json (changed)" in line, line


def test_every_command_that_hosts_a_kernel_fails_on_it(tmp_path: Path) -> None:
    """`contract` (like `bench`, `replay`) writes no gate verdict: it exits 1 naming the change,
    on stderr and in its own report."""
    _, env = _judge_copy(tmp_path)
    r = subprocess.run([sys.executable, "-m", "blockattn", "contract", "--provider",
                        "r=adversaries:rewrite_judge", "--only", "determinism",
                        "--out", str(tmp_path / "c")], cwd=HERE, env=env,
                       capture_output=True, text=True, timeout=600)  # fmt: skip
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    assert f"blockattn contract: FAIL: {LINE}" in r.stderr, r.stderr[-2000:]
    assert "blockattn/judge/verdict.py (changed)" in r.stderr
    # and in its report: a failing check of its own in contract.json and contract.md
    import json

    rows = json.loads((tmp_path / "c" / "contract.json").read_text())
    assert any(x["property"] == "isolation" and x["status"] == "FAIL" and LINE in x["detail"]
               for x in rows), rows[-3:]  # fmt: skip
    assert f"**FAIL: {LINE}" in (tmp_path / "c" / "contract.md").read_text()


def test_bench_says_it_in_its_report_too(tmp_path: Path) -> None:
    """`bench` writes a report (bench.json, the summary it prints): the kernel's change to the
    judge's files is in both, not only in its exit code and on stderr."""
    import json

    _, env = _judge_copy(tmp_path)
    out = tmp_path / "b"
    r = subprocess.run([sys.executable, "-m", "blockattn", "bench", "--smoke", "--provider",
                        "r=adversaries:rewrite_judge", "--providers", "blockattn", "--cases",
                        "len_32", "--no-sweeps", "--no-extras", "--no-projection", "--out",
                        str(out)], cwd=HERE, env=env, capture_output=True, text=True,
                       timeout=600)  # fmt: skip
    log = r.stdout[-2000:] + r.stderr[-2000:]
    assert r.returncode == 1, log
    assert f"blockattn bench: FAIL: {LINE}" in r.stderr, log
    isolation = json.loads((out / "bench.json").read_text())["isolation"]
    assert any(LINE in x and "blockattn/judge/verdict.py (changed)" in x for x in isolation), log
    assert f"**FAIL: {LINE}" in r.stdout, log
