"""Sort compute-sanitizer racecheck's reported races into the kernels' own and Triton's
warp-specialization dispatch (ci/sanitize.sh).

A warp-specialized Gluon kernel (`gl.warp_specialize`) starts its worker warps in a dispatch
loop that Triton generates: the default warps store each worker warp's partition index to a
shared-memory byte, all warps meet at named barrier 1 (every thread of the CTA), and the worker
warps then load their byte. Racecheck reports that store and load as a RAW hazard (the H200 run
of session 28: `STS [state]` then `BAR.SYNC 0x1` in the default warps, `BAR.SYNC 0x1` then
`LDS.U8 [state + warp]` in the workers); the barrier orders them. Both accesses carry the
kernel's `def` line, where Triton puts the code it generates. A race is "dispatch" only when
every access it names is at the `def` line of a kernel that calls `gl.warp_specialize`; any
other race, in any kernel, is unexplained and fails the run.

    python3 ci/racecheck_triage.py RACECHECK_LOG     (exit 0: no unexplained race)
"""

from __future__ import annotations

import itertools
import re
import sys
from pathlib import Path

KERNELS = Path(__file__).resolve().parents[1] / "blockattn" / "kernels"
# "Read access at K+0x130 in f.py:499" (race summaries), "Read Thread (160,0,0) at K+0x130 in
# f.py:499" (hazard reports): the access kind and its source line
ACCESS = re.compile(
    r"(Read|Write) (?:access|Thread \([\d,]+\)) at \w+\+0x[0-9a-f]+ in ([\w.]+):(\d+)"
)


def _dispatch_sites() -> dict[tuple[str, int], str]:
    """{(file, line): "def" | "tail"} of each kernel that calls gl.warp_specialize: its `def`
    line (Triton's dispatch code) and the lines after the call (the exit state it stores)."""
    out: dict[tuple[str, int], str] = {}
    for path in KERNELS.glob("*.py"):
        lines = path.read_text().splitlines()
        defs = [i for i, s in enumerate(lines) if s.startswith("def ")] + [len(lines)]
        for a, b in itertools.pairwise(defs):
            call = [i for i in range(a, b) if "gl.warp_specialize(" in lines[i]]
            if not call:
                continue
            out[(path.name, a + 1)] = "def"
            end = next(i for i in range(call[0], b) if lines[i].rstrip().endswith("])"))
            stop = next((i for i in range(end + 1, b) if lines[i][:1] not in ("", " ")), b)
            while stop > end + 1 and not lines[stop - 1].strip():
                stop -= 1
            out.update({(path.name, i + 1): "tail" for i in range(end + 1, stop)})
    return out


def triage(log: str) -> tuple[list[str], list[str]]:
    """(dispatch races, unexplained races), each as its report's text."""
    sites = _dispatch_sites()
    blocks = re.split(r"(?m)^========= (?:Error|Warning): ", log)[1:]
    dispatch, other = [], []
    for block in blocks:
        if not block.startswith(("Race reported", "Potential")):
            other.append(block.strip())
            continue
        accesses = ACCESS.findall(block)
        reads = [sites.get((f, int(n))) for kind, f, n in accesses if kind == "Read"]
        writes = [sites.get((f, int(n))) for kind, f, n in accesses if kind == "Write"]
        if reads and writes and set(reads) == {"def"} and set(writes) <= {"def", "tail"}:
            dispatch.append(block.strip())
        else:
            other.append(block.strip())
    return dispatch, other


def main() -> int:
    log = Path(sys.argv[1]).read_text(errors="replace")
    dispatch, other = triage(log)
    print(
        f"racecheck: {len(dispatch)} reported races in Triton's warp-specialize dispatch "
        f"(ordered by named barrier 1), {len(other)} unexplained"
    )
    for block in other:
        print("UNEXPLAINED:", block.splitlines()[0])
    return 1 if other else 0


if __name__ == "__main__":
    sys.exit(main())
