"""The red-team catalog: every published reward-hack pattern that applies to a Python/Triton
attention kernel, and each attack measured on blockattn before isolation, run through the real
commands as an outside kernel. Each must fail (or be refused) with a line naming what it did;
the honest control must pass. GPU-only patterns (CUDA faults, side streams, timing) are marked
`gpu`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import adversaries  # noqa: E402  (the kernels live beside this file)

TIMEOUT = "120"


def _blockattn(args: list[str], tmp: Path, note: Path | None = None, timeout: int = 600
               ) -> subprocess.CompletedProcess:  # fmt: skip
    env = {**os.environ, "REDTEAM_NOTE": str(note or tmp / "note.txt")}
    return subprocess.run([sys.executable, "-m", "blockattn", *args], cwd=HERE, env=env,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def _records(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines() if x]


def test_catalog_each_adversary_fails_by_name(tmp_path: Path) -> None:
    """One `blockattn run` over a small corpus case with the honest control and every CPU
    adversary as providers (each that kills its worker is followed by a fresh worker). Those
    that answer are judged here, as the gate would judge each as the kernel under test, from
    the judge's metrics in the records (no kernel is called again). A crashing adversary comes
    first: its call is the one sent ahead, and its crash must not be blamed on the control."""
    from blockattn.judge import tolerances, verdict

    out, note = tmp_path / "run", tmp_path / "note.txt"
    order = ("segfault", "honest", *(n for n in adversaries.CPU_CATALOG if n != "segfault"))
    provs = [f"--provider={n}=adversaries:{n}" for n in order]
    r = _blockattn(["run", *provs, "--out", str(out), "--max-cases", "1", "--fuzz", "0",
                    "--no-contract", "--no-selfcheck", "--no-progress", "--call-timeout",
                    TIMEOUT], tmp_path, note)  # fmt: skip
    log = r.stdout[-2000:] + r.stderr[-2000:]
    assert r.returncode == 1, log
    (rec,) = _records(out)
    tol = tolerances.load(tolerances.latest_released(tolerances.default_tolerance_dir(),
                                                     device=rec["device"]))  # fmt: skip
    honest = rec["providers"]["honest"]
    assert honest["status"] == "ok" and honest["isolation"] == "worker", (honest, log)
    # the run failed for the adversaries; nothing of it is about the honest control's numbers
    own = [f for f in verdict.evaluate(rec, tol, "honest").failures if f.startswith("honest")]
    assert not own, own
    missed = {}
    for name, (_, words) in adversaries.CPU_CATALOG.items():
        p = rec["providers"][name]
        assert p.get("isolation") == "worker", (name, p)
        if p["status"] == "ok":  # it answered: its numbers are judged
            v = verdict.evaluate(rec, tol, name)
            text = " ".join(f for f in v.failures if f.startswith(name))
        else:
            text = str(p.get("reason"))
        if not any(w in text.lower() for w in words):
            missed[name] = text[:300]
    assert not missed, missed
    # the heap search found no oracle result in the worker
    lines = [x for x in note.read_text().splitlines() if x.startswith("oracle_search")]
    assert lines and all(x.endswith(" 0") for x in lines), lines


def test_hang_fails_its_case_and_the_run_goes_on(tmp_path: Path) -> None:
    """A kernel that deadlocks on its first call: that case fails by the watchdog within the
    timeout, a fresh worker judges the next case (and passes it)."""
    out = tmp_path / "g"
    # the fresh worker's first call loads every kernel it needs, inside the watchdog: on a GPU
    # tier's loaded host (a dozen test workers) that alone has taken over 10 s
    limit = 30 if torch.cuda.is_available() else 10
    if torch.cuda.is_available():  # the same cases honestly first: the Triton builds the fresh
        # worker needs are then in the on-disk cache (a cold build on a host busy with a GPU
        # tier's workers is what the watchdog must not be measuring)
        _blockattn(["gate", "--provider", "honest=adversaries:honest", "--out",
                    str(tmp_path / "warm"), "--max-cases", "2", "--fuzz", "0", "--no-contract",
                    "--no-progress"], tmp_path)  # fmt: skip
    r = _blockattn(["gate", "--provider", "hang_once=adversaries:hang_once", "--out", str(out),
                    "--max-cases", "2", "--fuzz", "0", "--no-contract", "--no-progress",
                    "--call-timeout", str(limit)], tmp_path, timeout=150 + 2 * limit)  # fmt: skip
    assert r.returncode == 1, r.stderr[-2000:]
    recs = _records(out)
    assert len(recs) == 2
    first, second = (x["providers"]["hang_once"] for x in recs)
    assert "watchdog" in first["reason"] and f"{limit} s" in first["reason"], first
    assert second["status"] == "ok" and recs[1]["verdict"]["passed"], second
    assert "watchdog" in (out / "gate.md").read_text()


def _second_call_dies(tmp_path: Path, spec: str, note: Path | None = None) -> Path:
    """A 3-case gate of a kernel that dies on its second call: case 2 fails by SIGSEGV alone,
    cases 1 and 3 are judged and pass. The run directory."""
    out = tmp_path / "g"
    r = _blockattn(["gate", "--provider", f"s={spec}", "--out", str(out), "--max-cases", "3",
                    "--fuzz", "0", "--no-contract", "--no-progress"], tmp_path, note)  # fmt: skip
    assert r.returncode == 1, r.stderr[-2000:]
    recs = _records(out)
    assert len(recs) == 3, r.stderr[-2000:]
    got = [x["providers"]["s"] for x in recs]
    assert got[1]["status"] == "error" and "SIGSEGV" in got[1]["reason"], got[1]
    for i in (0, 2):
        assert got[i]["status"] == "ok" and recs[i]["verdict"]["passed"], (i, got[i])
    return out


def test_a_crash_fails_its_own_case_only(tmp_path: Path) -> None:
    """The worker runs a case while the judge judges the one before: a kernel that dies on its
    second call fails case 2 alone; case 1 (answered before) and case 3 (in flight when the
    worker died, so sent again to a fresh worker) are judged and pass."""
    _second_call_dies(tmp_path, "adversaries:segfault_second")


def test_a_worker_that_hangs_up_before_dying_fails_its_own_case_only(tmp_path: Path) -> None:
    """As on a GPU, where a dying worker's socket closes well before its process is reaped (the
    H200's tier failed the test above so): usually the judge's next send finds the line dead
    while the worker still runs (on a loaded machine the judge may find it dead instead: the
    sandbox-level tests below take each way for sure). The call it died in fails by name; the
    case never delivered goes to a fresh worker and passes (it was marked lost and the crash was
    blamed on it). The process it left behind is killed and named."""
    note = tmp_path / "note.txt"
    out = _second_call_dies(tmp_path, "adversaries:hangs_up_second", note)
    # the process it left behind was killed with it, and is named (not only the living
    # worker's strays at the end of the run)
    (pid,) = [int(x.split()[-1]) for x in note.read_text().splitlines() if x.startswith("grand")]
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text(
    ).split()[2], f"grandchild {pid} outlived the run"  # fmt: skip
    assert "process(es) running outside its worker" in (out / "gate.md").read_text()


def _second_probe_dies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: str,
                       ready: Callable[[Any, Path], bool]) -> None:
    """Probe 1 honest, probe 2 kills the worker; once `ready(worker, note)` holds, probe 3 is
    sent: the call the worker died in fails by SIGSEGV, probe 3 is answered by a fresh worker."""
    import time

    from blockattn import providers
    from blockattn.cases import contract as C
    from blockattn.run import isolated
    from blockattn.run.process import CallFailed

    note = tmp_path / "note.txt"
    monkeypatch.setenv("REDTEAM_NOTE", str(note))
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    p = C.determinism_case(torch.bfloat16, 64, dev)
    with isolated.session() as sb:
        (name,) = sb.load_specs([f"s={spec}"])
        prov = providers.get(name)
        sb.send_probe(prov, p)()  # call 1: honest
        second = sb.send_probe(prov, p)  # call 2: the worker dies in it
        w, end = sb.worker, time.monotonic() + 120
        while not ready(w, note):
            assert time.monotonic() < end, f"{spec}: not ready within 120 s"
            time.sleep(0.05)
        third = sb.send_probe(prov, p)
        with pytest.raises(CallFailed, match="SIGSEGV"):
            second()
        assert set(third()[0]) == {"O", "dQ", "dK", "dV"}
        assert sb.worker is not w


def test_a_worker_found_dead_is_read_before_it_is_replaced(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The judge's next send finds the worker already dead and reaped (on a CPU the usual
    case; on a GPU the driver's teardown usually outlasts the judge, which then meets the closed
    line instead: the test waits for the death, so both devices take this path). What the dead
    worker answered is read first: the call it died in fails by name, not as lost (sent again
    to a fresh worker it would pass), and the next call is judged by a fresh worker."""
    _second_probe_dies(tmp_path, monkeypatch, "adversaries:segfault_second",
                       lambda w, note: not w.alive())


def test_a_worker_that_hung_up_is_read_before_it_is_replaced(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The other way a dying worker is found (a GPU's usual one): the judge's next send meets
    the closed line while the worker still runs. The test sends only once the worker has hung
    up (it dies HANGUP_S later), so this path is taken whatever the two processes' speeds: the
    call it died in fails by name, the undelivered call is judged by a fresh worker."""

    def hung_up_alive(w: Any, note: Path) -> bool:
        if "hung up" not in (note.read_text() if note.exists() else ""):
            return False
        assert w.alive(), "the worker died before the judge's send"
        return True

    _second_probe_dies(tmp_path, monkeypatch, "adversaries:hangs_up_second", hung_up_alive)


def test_each_repeat_answers_its_own_call() -> None:
    """The determinism probe's repeats go to the worker in one request: every call's own
    outputs must come back, not the first call's again (a kernel whose output changes from
    call to call would pass determinism)."""
    import torch

    from blockattn import providers
    from blockattn.cases import contract as C
    from blockattn.run import isolated

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    with isolated.session() as sb:
        (name,) = sb.load_specs(["counting=adversaries:counting"])
        p = C.determinism_case(torch.bfloat16, 64, dev)
        outs = sb.call_repeats(providers.get(name), p, 3)
    marks = [float(o["O"].reshape(-1)[0]) for o in outs]
    assert len(marks) == 3 and marks[1] == marks[0] + 1 and marks[2] == marks[0] + 2, marks


def test_exit_zero_fails_the_gate(tmp_path: Path) -> None:
    r = _blockattn(["gate", "--provider", "x=adversaries:exit_zero", "--out",
                    str(tmp_path / "g"), "--max-cases", "1", "--fuzz", "0", "--no-contract",
                    "--no-progress"], tmp_path)  # fmt: skip
    assert r.returncode == 1, r.stderr[-2000:]
    assert "exited with code 0" in (tmp_path / "g" / "gate.md").read_text()


def test_forged_results_line_is_refused(tmp_path: Path) -> None:
    """Three cases: the worker runs each case while the judge judges the one before, so the
    third call is the first to find a record it can copy."""
    note = tmp_path / "note.txt"
    out = tmp_path / "g"
    r = _blockattn(["run", "--provider", "w=adversaries:write_results", "--out", str(out),
                    "--max-cases", "3", "--fuzz", "0", "--no-contract", "--no-selfcheck",
                    "--no-progress"], tmp_path, note)  # fmt: skip
    assert "write_results appended" in note.read_text(), note.read_text()
    assert r.returncode != 0
    assert "something else wrote to it" in r.stderr, r.stderr[-2000:]


def test_grandchild_is_killed_and_named(tmp_path: Path) -> None:
    note = tmp_path / "note.txt"
    r = _blockattn(["gate", "--provider", "g=adversaries:grandchild", "--out",
                    str(tmp_path / "g"), "--max-cases", "1", "--fuzz", "0", "--no-contract",
                    "--no-progress"], tmp_path, note)  # fmt: skip
    pids = [int(x.split()[-1]) for x in note.read_text().splitlines() if x.startswith("grand")]
    assert pids
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text(
        ).split()[2], f"grandchild {pid} outlived the run"  # fmt: skip
    assert r.returncode == 1
    assert "process(es) running outside its worker" in (tmp_path / "g" / "gate.md").read_text()


def test_corpus_answer_table_fails_on_fuzz(tmp_path: Path) -> None:
    """A kernel that knows the public corpus' answers passes the corpus alone and fails the
    fuzz cases the gate draws by default."""
    r = _blockattn(["gate", "--provider", "t=adversaries:corpus_table", "--out",
                    str(tmp_path / "g"), "--fuzz-only", "--fuzz", "2", "--no-contract",
                    "--no-progress"], tmp_path)  # fmt: skip
    assert r.returncode == 1, r.stderr[-2000:]
    assert "fuzz seed" in r.stderr  # drawn at run time, printed
    # the control: on a corpus case the table holds, it passes (so the fuzz is what caught it)
    r = _blockattn(["gate", "--provider", "t=adversaries:corpus_table", "--out",
                    str(tmp_path / "c"), "--max-cases", "1", "--fuzz", "0", "--no-contract",
                    "--no-progress"], tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]


def test_parent_memory_is_not_readable(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("as root, PR_SET_DUMPABLE does not stop /proc reads (docs/isolation.md)")
    note = tmp_path / "note.txt"
    _blockattn(["run", "--provider", "m=adversaries:read_parent_memory", "--out",
                str(tmp_path / "g"), "--max-cases", "1", "--fuzz", "0", "--no-contract",
                "--no-selfcheck", "--no-progress"], tmp_path, note)  # fmt: skip
    text = note.read_text()
    assert "environ denied" in text and "mem denied" in text, text


def test_gate_refuses_records_of_an_in_process_run(tmp_path: Path) -> None:
    """A run made with --in-process (the kernel in the judge's process) is stamped NOT ISOLATED
    and `gate --report` over it fails, naming it."""
    out = tmp_path / "r"
    r = _blockattn(["run", "--in-process", "--provider", "h=adversaries:honest", "--out",
                    str(out), "--max-cases", "1", "--fuzz", "0", "--no-contract",
                    "--no-selfcheck", "--no-progress"], tmp_path)  # fmt: skip
    assert "NOT ISOLATED" in r.stderr, r.stderr[-2000:]
    g = _blockattn(["gate", "--report", str(out), "--no-contract"], tmp_path)
    assert g.returncode == 1, g.stdout[-2000:] + g.stderr[-2000:]
    assert "NOT ISOLATED" in g.stdout + g.stderr


def test_in_process_is_refused_by_the_gate(tmp_path: Path) -> None:
    r = _blockattn(["gate", "--in-process", "--out", str(tmp_path / "g"), "--max-cases", "1"],
                   tmp_path)  # fmt: skip
    assert r.returncode == 2 and "--in-process" in r.stderr


def test_a_killed_judge_leaves_no_worker(tmp_path: Path) -> None:
    """CI's job timeout SIGKILLs the judge while its worker is stuck in a kernel: the worker
    dies with it (PR_SET_PDEATHSIG), not left running in its own session."""
    code = (f"import sys, time; sys.path.insert(0, {str(HERE)!r})\n"
            "from blockattn.run import isolated\n"
            "sb = isolated.Sandbox(600)\n"
            "sb.load_specs(['h=adversaries:hang'])\n"
            "print(sb.worker.proc.pid, flush=True)\n"
            "time.sleep(600)\n")  # fmt: skip
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    judge = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             env=env)  # fmt: skip
    worker = int(judge.stdout.readline())
    assert Path(f"/proc/{worker}").exists()
    judge.kill()
    judge.wait()
    def alive() -> bool:  # a zombie (reparented to a subreaper that has not reaped it) is dead
        try:
            return Path(f"/proc/{worker}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return False

    for _ in range(100):
        if not alive():
            break
        __import__("time").sleep(0.1)
    assert not alive(), "the worker outlived its judge"
