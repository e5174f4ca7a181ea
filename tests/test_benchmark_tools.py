"""The benchmark scripts that claims rest on: bench_medians.py (medians of several bench runs,
known answers and its refusals), sass_lines.py (per-line SASS counts of a CPU build) and
ncu_sass_stalls.py --lines (Nsight Compute's stall samples summed per source line)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _bench(d: Path, ms: dict[tuple[str, str, str], float], tbps: float = 4.0,
           kind: str = "nvidia-h200", errors: list | None = None,
           status: str = "complete") -> Path:  # fmt: skip
    d.mkdir(parents=True)
    rows = [{"case": c, "provider": p, "pass": s, "ms": v, "bytes": 4_000_000_000,
             "status": "ok", "group": "main"} for (c, p, s), v in ms.items()]
    rows.append({"case": "len_256", "provider": "blockattn", "pass": "fwd", "ms": 9.0,
                 "bytes": 1, "status": "ok", "group": "sweep_len"})  # not a main shape
    meta = {"gpu": "NVIDIA H200", "gpu_kind": kind, "git": {"commit": "abc1234"}}
    (d / "bench.json").write_text(json.dumps({"meta": meta, "ceiling": {"tbps": tbps},
                                              "measurements": rows, "errors": errors or [],
                                              "status": status}))
    return d


def _medians(*dirs: Path | str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_medians.py"),
                           *map(str, dirs)], capture_output=True, text=True)


def test_bench_medians_known_answers(tmp_path: Path) -> None:
    plain, rot = ("P_D128", "blockattn", "bwd"), ("P_D128", "blockattn_rotary", "bwd")
    runs = [_bench(tmp_path / str(i), {plain: p, rot: r}, tbps=t)
            for i, (p, r, t) in enumerate([(2.0, 3.0, 4.0), (1.0, 3.3, 3.0), (4.0, 2.9, 5.0)])]
    out = _medians(*runs)
    assert out.returncode == 0, out.stderr
    # medians 2.0 and 3.0 ms; 4e9 B / 2 ms = 2 TB/s against the median ceiling 4 TB/s: 50 %
    assert "| P_D128 | blockattn | bwd | 2.000 / 1.000 / 4.000 | 2.000 | 50.0 |" in out.stdout
    rot_row = "| P_D128 | blockattn_rotary | bwd | 3.000 / 3.300 / 2.900 | 3.000 | 33.3 |"
    assert rot_row in out.stdout
    assert "P_D128 1.50x" in out.stdout and "len_256" not in out.stdout
    assert "| P_D128 | bwd | blockattn_rotary | 3.000 | 1.500 | 1.500 |" in out.stdout


def test_bench_medians_reads_fast_rotary_against_both_plain_kernels(tmp_path: Path) -> None:
    ms = {("P_D64", "blockattn", "fwd"): 1.0, ("P_D64", "blockattn_fast", "fwd"): 0.8,
          ("P_D64", "blockattn_rotary_fast", "fwd"): 1.2}  # fmt: skip
    out = _medians(_bench(tmp_path / "a", ms), _bench(tmp_path / "b", ms))
    assert out.returncode == 0, out.stderr
    # 1.2 / 1.0 against the plain kernel as it is, 1.2 / 0.8 against the fast plain kernel
    assert "| P_D64 | fwd | blockattn_rotary_fast | 1.200 | 1.200 | 1.500 |" in out.stdout


def test_bench_medians_refuses_what_it_cannot_take_a_median_of(tmp_path: Path) -> None:
    key = ("P_D64", "blockattn", "fwd")
    a = _bench(tmp_path / "a", {key: 1.0})
    assert "missing" in _medians(a, tmp_path / "none").stderr
    other = _bench(tmp_path / "b", {key: 1.0}, kind="nvidia-h100-80gb-hbm3")
    assert "different GPU kinds" in _medians(a, other).stderr
    failed = _bench(tmp_path / "c", {key: 1.0}, errors=[{"trace": "x"}])
    assert "with errors" in _medians(a, failed).stderr
    partial = _bench(tmp_path / "d", {("P_D64", "fa2", "fwd"): 2.0})
    out = _medians(a, partial)
    assert out.returncode == 1 and "measured in 1 of 2 runs" in out.stderr
    assert _medians(a).returncode == 2  # one run is no median


def test_bench_medians_of_the_cases_every_cut_run_finished(tmp_path: Path) -> None:
    done, late = ("P_D128", "blockattn", "fwd"), ("P_D64", "blockattn", "fwd")
    a = _bench(tmp_path / "a", {done: 1.0, late: 0.5}, status="interrupted (signal 15)")
    b = _bench(tmp_path / "b", {done: 3.0}, status="interrupted (signal 15)")
    assert "measured in 1 of 2 runs" in _medians(a, b).stderr  # P_D64: only in the first
    out = _medians(a, b, "--cases", "P_D128")
    assert out.returncode == 0, out.stderr
    assert "| P_D128 | blockattn | fwd | 1.000 / 3.000 | 2.000 |" in out.stdout
    assert "P_D64" not in out.stdout
    assert "cases P_D128 only; runs cut before the end: 1, 2" in out.stdout
    assert "measured in no run" in _medians(a, b, "--cases", "P_D32").stderr
    assert _medians(a, b, "--cases").returncode == 2


def test_sass_lines_counts_a_cpu_build() -> None:
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "sass_lines.py"),
                          "bwd-bf16-d64-off-gluon", "--top", "3"],
                         capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    head, *_ = out.stdout.splitlines()
    total = int(head.split("B, ")[1].split(" instructions")[0])
    assert total > 1000 and "spills 0/0 B" in head
    rows = [ln for ln in out.stdout.splitlines() if ln.startswith("| ") and ".py:" in ln]
    assert len(rows) == 3 and all(int(r.split("|")[1]) > 0 for r in rows)
    bad = subprocess.run([sys.executable, str(REPO / "benchmarks" / "sass_lines.py"), "nope-*"],
                         capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 2 and "no variant matches" in bad.stderr
    many = subprocess.run([sys.executable, str(REPO / "benchmarks" / "sass_lines.py"),
                           "bwd-*-gluon"], capture_output=True, text=True, cwd=REPO)
    assert many.returncode == 2 and "not 1" in many.stderr


_HDR = ["Address", "Source", "Warp Stall Sampling (All Samples)",
        "Warp Stall Sampling (Not-issued Samples)", "# Samples", "Instructions Executed",
        "stall_long_sb", "stall_wait", "stall_long_sb (Not Issued)"]


def _ncu_listing(path: Path, ins: list[tuple[str, int, int, int]]) -> Path:
    """An ncu source-page CSV: (SASS, samples, long_sb, wait) per instruction."""
    rows = [["Kernel Name", "k", ""], _HDR]
    rows += [[f"0x{16 * n:x}", f"      {src}", str(s), str(s), str(s), "100", str(lsb), str(w),
              "0"] for n, (src, s, lsb, w) in enumerate(ins)]
    path.write_text("\n".join(",".join(f'"{c}"' for c in r) for r in rows) + "\n")
    return path


def _disasm(path: Path, ins: list[tuple[str, str]]) -> Path:
    """An `nvdisasm -g` listing: (file:line, SASS) per instruction."""
    out, last = ["        .text.k:"], None
    for n, (where, src) in enumerate(ins):
        if where != last:
            f, ln = where.split(":")
            out.append(f'\t//## File "/x/{f}", line {ln}')
            last = where
        out.append(f"        /*{16 * n:04x}*/                   {src} ;")
    path.write_text("\n".join(out) + "\n")
    return path


def test_ncu_stalls_by_source_line_known_answer_and_refusals(tmp_path: Path) -> None:
    prof = _ncu_listing(tmp_path / "k.sass.csv", [
        ("LDG.E R2, desc[UR4][R4.64]", 10, 0, 10), ("FMUL R3, R2, R2", 50, 40, 10),
        ("@P0 FFMA R3, R3, R2, R1", 20, 0, 20), ("EXIT", 20, 0, 20)])
    sass = _disasm(tmp_path / "k.sass", [("a.py:7", "LDG.E R2, desc[UR4][R4.64]"),
                                          ("b.py:3", "FMUL R3, R2, R2.reuse"),
                                          ("b.py:3", "@P0 FFMA R3, R3, R2, R1"),
                                          ("a.py:9", "EXIT")])
    tool = [sys.executable, str(REPO / "benchmarks" / "ncu_sass_stalls.py")]
    out = subprocess.run([*tool, str(prof), "--lines", str(sass)], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    rows = [r for r in out.stdout.splitlines() if r.startswith("| ") and ".py:" in r]
    # b.py:3 holds 70 of 100 samples (40 long_sb + 30 wait), a.py:7 and a.py:9 10 and 20
    assert rows[0] == "| 70.0 | b.py:3 | long_sb 40.0 %, wait 30.0 % |"
    assert rows[1] == "| 20.0 | a.py:9 | wait 20.0 % |"
    assert rows[2] == "| 10.0 | a.py:7 | wait 10.0 % |"
    other = _disasm(tmp_path / "o.sass", [("a.py:7", "LDG.E R2, desc[UR4][R4.64]"),
                                           ("b.py:3", "FADD R3, R2, R2"),
                                           ("b.py:3", "@P0 FFMA R3, R3, R2, R1"),
                                           ("a.py:9", "EXIT")])
    bad = subprocess.run([*tool, str(prof), "--lines", str(other)], capture_output=True,
                         text=True)
    assert bad.returncode == 1 and "instruction 1" in bad.stderr and "another build" in bad.stderr
    short = _disasm(tmp_path / "s.sass", [("a.py:7", "LDG.E R2, desc[UR4][R4.64]")])
    bad = subprocess.run([*tool, str(prof), "--lines", str(short)], capture_output=True,
                         text=True)
    assert bad.returncode == 1 and "1 instructions" in bad.stderr


def test_gpu_session_steps_parse_and_name_only_existing_files() -> None:
    """benchmarks/gpu.py (the GPU session entry point that replaced the gpu_*.sh scripts): --help
    lists every step, and each step's commands, printed by --dry-run, name scripts that exist and
    `blockattn` commands whose options the CLI accepts."""
    import shlex

    from blockattn import cli

    tool = [sys.executable, str(REPO / "benchmarks" / "gpu.py")]
    helptext = subprocess.run([*tool, "--help"], capture_output=True, text=True, check=True).stdout
    steps = ["tier", "mutants", "false-alarms", "bench", "ab", "stages", "fa4", "bless", "gate",
             "contract", "elementwise", "session", "tune", "ncu", "gluon-tests", "ab-gluon-rotary"]
    for step in steps:
        assert f"\n  {step} " in helptext, step
    out = subprocess.run([*tool, *steps, "--out", "OUT", "--dry-run", "--baseline", "B.json"],
                         capture_output=True, text=True, check=True).stdout
    parser = cli.build_parser()
    for line in out.splitlines():
        argv = shlex.split(line.split(": timeout ", 1)[1].split(" > ")[0])[1:]
        if argv[1:3] == ["-m", "blockattn"]:
            parser.parse_args(argv[3:])
        for a in argv:
            if a.startswith(("benchmarks/", "tests/")):
                assert (REPO / a).exists(), a
    assert not list((REPO / "benchmarks").glob("gpu_*.sh")), "the session scripts retired"
    bad = subprocess.run([*tool, "nope", "--out", "OUT"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
