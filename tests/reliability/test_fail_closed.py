"""Evidence that fails closed (issue 41, item 5): a partial or torn run is refused by the gate,
a refused run touches nothing, a directory in use is locked, run.json records what ran.

The runs are real, on the CPU interpreter: one in-process run of 3 corpus cases (module fixture)
and one subprocess run killed by SIGKILL after its first case.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from blockattn import cli
from blockattn.run import session
from blockattn.run.results import RESULTS

ROOT = Path(__file__).resolve().parents[2]
RUN = ["--fuzz", "0", "--no-selfcheck", "--no-contract", "--no-progress", "--tolerances", "v4"]
GATE = ["gate", "--tolerances", "v4", "--no-contract", "--report"]


def _env() -> dict[str, str]:
    env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


@pytest.fixture(scope="module")
def done(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A complete run of 3 corpus cases (run.json, results.jsonl, report.json, summary.md)."""
    out = tmp_path_factory.mktemp("fc") / "run"
    assert cli.main(["run", "--out", str(out), "--max-cases", "3", *RUN]) == 0
    session.release_dir(out)
    return out


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(session.LOCK))
    return dst


def _snapshot(d: Path) -> dict[str, tuple[int, bytes]]:
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(d.iterdir())
            if p.is_file()}  # fmt: skip


def _cli(argv: list[str], capsys) -> tuple[int, str]:
    rc = cli.main(argv)
    cap = capsys.readouterr()
    return rc, cap.out + cap.err


def test_run_json_plans_the_cases_and_records_identity(done: Path) -> None:
    run = json.loads((done / session.RUN_OPTIONS).read_text())
    recs = [json.loads(x) for x in (done / RESULTS).read_text().splitlines()]
    assert run[session.PLANNED] == [r["case_id"] for r in recs] and len(recs) == 3
    ident = run[session.IDENTITY]
    assert ident["device"]["device"] == recs[0]["device"] in ("cpu", "cuda")  # the run's own
    assert {"torch", "triton", "cuda", "driver"} <= set(ident["versions"])
    assert ident["versions"]["torch"] == __import__("torch").__version__
    bk = ident["providers"]["blockattn"]
    assert bk["module"] == "blockattn.providers.blockattn_kernel" and len(bk["module_sha256"]) == 64


def test_gate_passes_the_complete_run(done: Path, tmp_path: Path, capsys) -> None:
    d = _copy(done, tmp_path / "d")
    rc, text = _cli([*GATE, str(d)], capsys)
    assert rc == 0, text[-2000:]


@pytest.mark.parametrize("planned", [True, False])
def test_gate_refuses_a_torn_line(planned: bool, done: Path, tmp_path: Path, capsys) -> None:
    d = _copy(done, tmp_path / "d")
    (d / "report.json").unlink()  # results.jsonl is what is gated
    if not planned:  # an older run.json, without the plan: the torn line alone refuses
        run = json.loads((d / session.RUN_OPTIONS).read_text())
        del run[session.PLANNED]
        (d / session.RUN_OPTIONS).write_text(json.dumps(run))
    lines = (d / RESULTS).read_text().splitlines()
    (d / RESULTS).write_text("\n".join([lines[0], lines[1][:57], *lines[2:]]) + "\n")
    rc, text = _cli([*GATE, str(d)], capsys)
    assert rc == 2 and "torn" in text and "line(s) 2" in text, text[-2000:]
    assert ("2 of 3 planned cases recorded" in text) == planned, text[-2000:]
    assert not (d / "gate.md").exists()


def test_gate_refuses_a_sigkilled_run_naming_the_missing_cases(tmp_path: Path, capsys) -> None:
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "blockattn", "run", "--out", str(out), "--max-cases", "3", *RUN]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    t0 = time.monotonic()
    while not ((out / RESULTS).exists() and (out / RESULTS).read_bytes().count(b"\n") >= 1):
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.monotonic() - t0 < 180, "no finished case in 180 s"
        time.sleep(0.05)
    # While it runs, the directory is in use: every reader and a second run are refused.
    for argv in (["report", str(out)], [*GATE, str(out)],
                 ["run", "--out", str(out), "--max-cases", "3", *RUN, "--resume"]):  # fmt: skip
        if proc.poll() is None:
            rc, text = _cli(argv, capsys)
            assert rc == 2 and "in use" in text, (argv, text[-1500:])
    proc.kill()  # SIGKILL: no handler runs; the kernel drops the flock with the process
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    planned = json.loads((out / session.RUN_OPTIONS).read_text())[session.PLANNED]
    have = {json.loads(x)["case_id"] for x in (out / RESULTS).read_text().splitlines()}
    missing = [c for c in planned if c not in have]
    assert len(planned) == 3 and missing, "the run finished before the kill"
    rc, text = _cli([*GATE, str(out)], capsys)
    assert rc == 2, text[-2000:]
    assert f"{len(have)} of 3 planned cases recorded" in text and missing[0] in text, text
    assert not (out / "gate.md").exists()
    # report renders it (partial runs ok) and says what is missing, in its output and report.md
    rc, text = _cli(["report", str(out)], capsys)
    assert rc == 0 and "incomplete run" in text and missing[0] in text, text[-2000:]
    assert "INCOMPLETE" in (out / "report.md").read_text()


def test_a_refused_run_touches_nothing(done: Path, tmp_path: Path, capsys) -> None:
    d = _copy(done, tmp_path / "d")
    before = _snapshot(d)
    time.sleep(0.01)
    refusals = [
        (["run", "--out", str(d), "--max-cases", "3", *RUN], "--resume"),  # results exist
        (["run", "--out", str(d), "--max-cases", "3", *RUN, "--seed", "5", "--resume"], "seed"),
        (["run", "--out", str(d), "--max-cases", "3", *RUN, "--dtype", "float16", "--resume"],
         "selection"),
    ]  # fmt: skip
    for argv, word in refusals:
        rc, text = _cli(argv, capsys)
        assert rc == 2 and word in text, (argv, text[-1500:])
        assert _snapshot(d) == before, f"{argv} changed the directory"
    assert not (d / session.LOCK).exists()  # not even a lock file


def test_resume_refuses_another_identity(done: Path, tmp_path: Path, capsys) -> None:
    d = _copy(done, tmp_path / "d")
    run = json.loads((d / session.RUN_OPTIONS).read_text())
    run[session.IDENTITY]["versions"]["torch"] = "1.0.0"
    run[session.IDENTITY]["providers"]["blockattn"]["module_sha256"] = "0" * 64
    (d / session.RUN_OPTIONS).write_text(json.dumps(run))
    before = _snapshot(d)
    rc, text = _cli(["run", "--out", str(d), "--max-cases", "3", *RUN, "--resume"], capsys)
    assert rc == 2, text[-1500:]
    assert "versions.torch: '1.0.0' there" in text
    assert "providers.blockattn.module_sha256" in text
    assert _snapshot(d) == before


def test_outside_kernel_identity_hashes_its_package(tmp_path: Path, monkeypatch) -> None:
    from blockattn import providers

    pkg = tmp_path / "fcpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "helper.py").write_text("SCALE = 1.0\n")
    (pkg / "attn.py").write_text(
        "import blockattn\n\n"
        "def fn(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):\n"
        "    return blockattn.block_attention(q, k, v, offsets, block_size=block_size,\n"
        "                                     scale=scale, sinu_pos=sinu_pos, rotate_v=rotate_v)\n"
    )  # fmt: skip
    monkeypatch.chdir(tmp_path)
    name = providers.load_spec("fcmine=fcpkg.attn:fn").name
    try:
        a = session.provider_identity(name)
        assert (a["module"], a["callable"], a["package"]) == ("fcpkg.attn", "fn", "fcpkg")
        assert len(a["module_sha256"]) == 64 and len(a["package_sha256"]) == 64
        (pkg / "helper.py").write_text("SCALE = 2.0\n")  # a file the module imports changes
        b = session.provider_identity(name)
        assert b["module_sha256"] == a["module_sha256"]
        assert b["package_sha256"] != a["package_sha256"]
        assert session._identity_diff({"providers": {name: a}}, {"providers": {name: b}}) == [
            f"providers.{name}.package_sha256: {a['package_sha256']!r} there, "
            f"{b['package_sha256']!r} now"
        ]
    finally:
        providers.unregister(name)
        sys.modules.pop("fcpkg.attn", None)
        sys.modules.pop("fcpkg", None)


def test_a_locked_directory_refuses_readers_and_merge_until_its_holder_dies(
    done: Path, tmp_path: Path, capsys
) -> None:
    d = _copy(done, tmp_path / "d")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from blockattn.run import session; "
         "session.lock_dir(sys.argv[1]); print('locked', flush=True); time.sleep(600)", str(d)],
        cwd=ROOT, env=_env(), stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "locked"
        before = _snapshot(d)
        for argv in (["report", str(d)], [*GATE, str(d)],
                     ["merge", str(d), "--out", str(tmp_path / "m")],
                     ["run", "--out", str(d), "--max-cases", "3", *RUN, "--resume"]):  # fmt: skip
            rc, text = _cli(argv, capsys)
            assert rc == 2 and "in use" in text and f"pid {holder.pid}" in text, (argv, text)
        assert _snapshot(d) == before
    finally:
        holder.kill()
        holder.wait(timeout=30)
    rc, text = _cli(["report", str(d)], capsys)  # released with the process: no stale lock
    assert rc == 0, text[-1500:]
