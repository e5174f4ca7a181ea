"""ci/racecheck_triage.py: racecheck's reports sorted into Triton's warp-specialize dispatch
(ordered by named barrier 1, reported by racecheck all the same) and everything else, which
fails ci/sanitize.sh. The synthetic reports use the kernels' current line numbers, in both
formats racecheck prints (race summaries, single hazards), as the H200 printed them."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("rt", REPO / "ci" / "racecheck_triage.py")
rt = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rt)

SITES = rt._dispatch_sites()
FILE, DEF = next(k for k, v in SITES.items() if v == "def")
TAIL = max(n for (f, n), v in SITES.items() if v == "tail" and f == FILE)
BODY = DEF + 30  # a line of the kernel's own body (its shared-memory traffic)


def _race(read: int, write: int) -> str:
    return (f"========= Error: Race reported between Read access at k+0x130 in {FILE}:{read}\n"
            f"=========     and Write access at k+0xb950 in {FILE}:{write} [4 hazards]\n")


def _hazard(read: int, write: int) -> str:
    return ("========= Error: Potential RAW hazard detected at __shared__ 0x38552 in block "
            "(0,0,0) :\n"
            f"=========     Write Thread (31,0,0) at k+0xb950 in {FILE}:{write}\n"
            f"=========     Read Thread (192,0,0) at k+0x130 in {FILE}:{read}\n")


def test_the_warp_specialized_kernel_and_its_dispatch_lines_are_found() -> None:
    assert FILE == "attention_gluon.py"
    src = (REPO / "blockattn" / "kernels" / FILE).read_text().splitlines()
    assert src[DEF - 1].startswith("def _bwd_kernel_chains(")
    assert all(src[n - 1].startswith("    ") for (f, n), v in SITES.items() if v == "tail")


def test_dispatch_races_are_sorted_out() -> None:
    log = "========= COMPUTE-SANITIZER\n" + _race(DEF, DEF) + _race(DEF, TAIL) + _hazard(DEF, DEF)
    dispatch, other = rt.triage(log + "========= RACECHECK SUMMARY: 3 hazards displayed\n")
    assert (len(dispatch), other) == (3, [])


def test_a_race_in_the_kernels_own_code_is_unexplained() -> None:
    for log in (_race(BODY, DEF), _race(DEF, BODY), _hazard(BODY, BODY), _race(DEF, DEF)
                .replace(FILE, "attention_gluon_rotary.py")):
        dispatch, other = rt.triage(log)
        assert (dispatch, len(other)) == ([], 1), log


def test_any_other_error_is_unexplained(tmp_path: Path) -> None:
    log = tmp_path / "racecheck.log"
    log.write_text(_race(DEF, DEF) + "========= Error: Barrier error detected. Missing wait.\n")
    r = subprocess.run([sys.executable, str(REPO / "ci" / "racecheck_triage.py"), str(log)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "1 reported races" in r.stdout and "UNEXPLAINED" in r.stdout
    log.write_text(_race(DEF, TAIL))
    r = subprocess.run([sys.executable, str(REPO / "ci" / "racecheck_triage.py"), str(log)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout
