"""GPU session steps: one device call runs several named steps, each timed and logged, none able
to stop the others. This replaces the one-off `benchmarks/gpu_*.sh` session scripts (retired
2026-11-27; `git show d1787bf:benchmarks/gpu_verify.sh` shows one as it ran).

    python3 benchmarks/gpu.py --help                          # the steps
    python3 benchmarks/gpu.py tier bench --out OUT --commit C  # after a kernel change
    python3 benchmarks/gpu.py mutants false-alarms --out OUT   # every planted bug, false alarms
    python3 benchmarks/gpu.py tier bench --out OUT --dry-run   # print the commands, run nothing

Every step writes OUT/<step>.log (and its outputs under OUT/<step>...), OUT/steps.log gets one
line per command with its exit status and seconds, OUT/env.log the GPU, torch, triton and date.
The exit status is 1 if any command failed, 0 otherwise. Before the steps the package is
installed editable without dependencies (`--no-install` skips that), and BLOCKATTN_GIT_COMMIT is
set to `--commit` (a device copy of the tree has no usable .git). `--tar` archives OUT after every
step to OUT.tgz, so a call cut short by its time limit still returns the logs of what finished.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable or "python3"
GLUON_TESTS = ["tests/kernels/test_gluon_path.py", "tests/kernels/test_gluon_rotary.py"]


def _blockattn(*args: str) -> list[str]:
    return [PY, "-m", "blockattn", *args]


def _bench_runs(a: argparse.Namespace, providers: str, name: str,
                extra: tuple[str, ...] = ()) -> list[tuple]:  # fmt: skip
    cmds = []
    for i in range(1, a.runs + 1):
        cmds.append((f"{name}_{i}", _blockattn(
            "bench", "--providers", providers, *extra, "--out", f"{a.out}/{name}_{i}",
            "--no-sweeps", "--no-projection", "--time-budget-s", "130"), 150))
    dirs = [f"{a.out}/{name}_{i}" for i in range(1, a.runs + 1)]
    cmds.append((f"{name}_medians", [PY, "benchmarks/bench_medians.py", *dirs], 60,
                 f"{a.out}/{name}_medians.md"))
    return cmds


def _baseline(a: argparse.Namespace) -> str:
    if a.baseline:
        return a.baseline
    name = _gpu_name()
    for kind in ("h200", "h100"):
        if kind.upper() in name.upper():
            return f"ci/baselines/{kind}/report.json"
    return "ci/baselines/h100/report.json" if a.dry_run else _fail(
        f"no stored gate baseline for GPU {name!r}: pass --baseline REPORT_JSON")


def _fail(msg: str) -> str:
    raise SystemExit(f"gpu.py: {msg}")


def _gpu_name() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30).stdout.splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return "none"


# step name -> (what it does, function of the options returning its commands). A command is
# (log name, argv, timeout s[, file its stdout goes to]).
def _tier(a):
    return [("tier", [PY, "-m", "pytest", "-n", str(a.workers), "-m", "not slow", "-q",
                      "-p", "no:cacheprovider"], 420)]


def _gluon_tests(a):
    return [("gluon_tests", [PY, "-m", "pytest", "-q", "-n", "4", "-p", "no:cacheprovider",
                             *GLUON_TESTS], 240)]


def _mutants(a):
    only = []
    if a.mutants_in:  # the catalog's mutants planted in that file only
        from blockattn.mutants import catalog

        only = [x for m in catalog.MUTANTS if m.file.endswith(a.mutants_in)
                for x in ("--mutant", m.name)]
        if not only:
            _fail(f"no mutant of the catalog is planted in a file ending {a.mutants_in!r}")
    return [("mutants", _blockattn("mutants", *only, "--jobs", str(a.jobs), "--tolerances",
                                   a.tolerances, "--baseline", _baseline(a), "--out",
                                   f"{a.out}/mutants"), 420)]


def _false_alarms(a):
    return [("false_alarms", _blockattn(
        "false-alarms", "--tolerances", a.tolerances, "--seeds", str(a.seeds), "--fuzz", "2",
        "--every-distribution", "--profile", "gpu", "--out", f"{a.out}/false_alarms",
        "--no-progress"), 230)]


def _bench(a):
    fast = ("--provider", "blockattn_fast", "--cases", "P_D128,P_D64")  # the fast mode's entries
    return _bench_runs(a, "blockattn,blockattn_rotary,fa2", "bench", fast)


def _ab(a):
    return [("ab", [PY, "benchmarks/ab_kernels.py", "--a", a.ab, "--out", f"{a.out}/ab",
                    "--rounds", "3", "--rep-ms", "100", "--dtypes", a.dtypes, "--rotary", "both",
                    "--rotate-v", "both", "--precision", a.precision], 280)]


def _ab_gluon_rotary(a):
    return [("ab_gluon_rotary", [PY, "benchmarks/ab_gluon_rotary.py", "--out",
                                 f"{a.out}/ab_gluon_rotary", "--rounds", "3", "--rep-ms", "100",
                                 "--portable"], 240)]


def _stages(a):
    return [("stages", [PY, "benchmarks/stage_profile.py", "--out", f"{a.out}/stages",
                        "--head-dims", "128,64"], 150)]


def _bless(a):
    return [("bless", _blockattn("run", "--providers", "blockattn,fa2,eager", "--corpus-only",
                                 "--tolerances", a.tolerances, "--out", f"{a.out}/baseline",
                                 "--no-progress", "--no-contract"), 150)]


def _gate(a):
    return [("gate", _blockattn("gate", "--tolerances", a.tolerances, "--baseline", _baseline(a),
                                "--out", f"{a.out}/gate", "--no-progress"), 200)]


def _contract(a):
    return [(f"contract_{p}", _blockattn("contract", "--provider", p, "--tolerances",
                                         a.tolerances, "--out", f"{a.out}/contract_{p}"), 150)
            for p in a.contract_providers.split(",")]


def _elementwise(a):
    return [("elementwise", [PY, "benchmarks/elementwise_table.py", "--out",
                             f"{a.out}/elementwise", "--providers", "blockattn,fa2,eager",
                             "--tolerances", a.tolerances], 300)]


def _session(a):
    return [("session", [PY, "benchmarks/gpu_session.py", "--out", f"{a.out}/session"], 400)]


def _tune(a):
    return [("tune", [PY, "benchmarks/tune.py", "--out", f"{a.out}/tune"], 500)]


def _fa4(a):
    return _bench_runs(a, "blockattn,fa2,fa4", "fa4_bench")


def _ncu(a):
    ncu = os.environ.get("NCU", "ncu")
    sections = []
    for s in ("SpeedOfLight", "ComputeWorkloadAnalysis", "WarpStateStats", "SchedulerStats",
              "Occupancy", "LaunchStats", "SourceCounters"):
        sections += ["--section", s]
    rep = f"{a.out}/ncu"
    return [
        ("ncu", [ncu, "--clock-control", "none", "-k", f"regex:{a.ncu_kernel}", "--launch-count",
                 "1", *sections, "--export", rep, PY, "benchmarks/ncu_kernels.py",
                 *shlex.split(a.ncu_args)], 200),
        ("ncu_raw", [ncu, "--import", f"{rep}.ncu-rep", "--page", "raw", "--csv"], 60,
         f"{rep}.raw.csv"),
        ("ncu_sass", [ncu, "--import", f"{rep}.ncu-rep", "--page", "source", "--csv",
                      "--print-source", "sass"], 60, f"{rep}.sass.csv"),
    ]


STEPS = {
    "tier": ("the whole not-slow GPU test tier (pytest -n WORKERS -m 'not slow')", _tier),
    "gluon-tests": ("the Gluon kernels' own GPU tests (plain and fused-rotary backward)",
                    _gluon_tests),
    "mutants": ("every planted bug (blockattn mutants) against --baseline, journaled in "
                "OUT/mutants (rerun with the same OUT to resume)", _mutants),
    "false-alarms": ("the gate on unmodified code: SEEDS seeds x 2 fuzz cases, every input "
                     "distribution", _false_alarms),
    "bench": ("blockattn bench RUNS times (blockattn, fused rotary, the fast mode, FA v2; P_D128 "
              "and P_D64), then "
              "their medians (benchmarks/bench_medians.py: OUT/bench_medians.md)", _bench),
    "ab": ("same-run A/B of the working tree's kernels against --ab (a saved blockattn/kernels "
           "folder; benchmarks/ab_kernels.py), plain and rotary, fwd and bwd", _ab),
    "ab-gluon-rotary": ("the Gluon fused-rotary backward against the portable one "
                        "(benchmarks/ab_gluon_rotary.py --portable)", _ab_gluon_rotary),
    "stages": ("stage profile: full, compute-only, memory-only (benchmarks/stage_profile.py)",
               _stages),
    "bless": ("a gate baseline over the corpus (what ci/baselines/*/report.json are): "
              "OUT/baseline/report.json", _bless),
    "gate": ("blockattn gate against --baseline, contract battery included", _gate),
    "contract": ("the contract battery on each of --contract-providers", _contract),
    "elementwise": ("the elementwise accuracy table, blockattn vs FA v2 vs eager "
                    "(benchmarks/elementwise_table.py)", _elementwise),
    "session": ("accuracy at shape P against the FP64 oracle and FA v2 "
                "(benchmarks/gpu_session.py)", _session),
    "tune": ("launch-config sweep (benchmarks/tune.py)", _tune),
    "fa4": ("FA4 beside blockattn and FA v2: RUNS benches and their medians; needs "
            "flash-attn-4 importable (pip install 'blockattn[fa4]', or --fa4-wheels DIR)", _fa4),
    "ncu": ("Nsight Compute of one kernel (--ncu-kernel, --ncu-args for "
            "benchmarks/ncu_kernels.py): raw metrics and per-SASS stall samples as CSV, for "
            "benchmarks/ncu_sass_stalls.py", _ncu),
}


def build_parser() -> argparse.ArgumentParser:
    steps = "\n".join(f"  {name:16} {what}" for name, (what, _) in STEPS.items())
    ap = argparse.ArgumentParser(
        prog="benchmarks/gpu.py", description=__doc__.split("\n\n")[0],
        epilog=f"steps, run in the order given:\n{steps}",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("steps", nargs="+", metavar="STEP", choices=list(STEPS),
                    help="one or more of the steps below")
    ap.add_argument("--out", required=True, help="output folder (created)")
    ap.add_argument("--commit", default="unknown", help="commit of the tree (BLOCKATTN_GIT_COMMIT)")
    ap.add_argument("--baseline", help="gate baseline report.json (default: ci/baselines/"
                    "h200 or h100 by the GPU's name)")
    ap.add_argument("--tolerances", default="v7", help="tolerance file (default v7)")
    ap.add_argument("--workers", type=int, default=12, help="pytest workers for tier")
    ap.add_argument("--jobs", type=int, default=14, help="mutant jobs")
    ap.add_argument("--mutants-in", metavar="FILE", help="mutants: only those planted in a file "
                    "whose path ends so (e.g. attention_gluon_rotary.py)")
    ap.add_argument("--seeds", type=int, default=8, help="false-alarms seeds")
    ap.add_argument("--runs", type=int, default=3, help="bench and fa4 runs (medians of these)")
    ap.add_argument("--ab", default=".ab/a", help="saved kernels folder for ab (git archive HEAD "
                    "blockattn/kernels | tar -x -C .ab/a --strip-components 2; carry .ab)")
    ap.add_argument("--dtypes", default="bf16", help="dtypes for ab (bf16,fp16)")
    ap.add_argument("--precision", default="accurate", choices=("accurate", "fast"),
                    help="the kernels' precision mode for ab")
    ap.add_argument("--contract-providers", default="blockattn,fa2,eager")
    ap.add_argument("--fa4-wheels", help="folder of wheels installed with --target into "
                    "OUT/site for the fa4 step (a wheel split in parts NAME.whl.part-*, joined "
                    "first; SHA256SUMS, if present, checked)")
    ap.add_argument("--ncu-kernel", default="^_bwd_rot_kernel$", help="kernel regex for ncu")
    ap.add_argument("--ncu-args", default="--gluon-rotary", help="ncu_kernels.py arguments")
    ap.add_argument("--timeout", type=int, help="seconds per command (default: per step)")
    ap.add_argument("--kernel-path", help="BLOCKATTN_KERNEL_PATH for every step "
                    "(portable, prefer-gluon, prefer-hopper, ...)")
    ap.add_argument("--no-install", action="store_true", help="skip the editable install")
    ap.add_argument("--tar", action="store_true", help="archive OUT to OUT.tgz after each step")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    return ap


def _fa4_site(a: argparse.Namespace, env: dict) -> list[tuple]:
    """Join split wheels, check SHA256SUMS, install into OUT/site; PYTHONPATH for the benches."""
    site = Path(a.out) / "site"
    env["PYTHONPATH"] = os.pathsep.join(
        [str(site), str(site / "nvidia_cutlass_dsl" / "dsl_packages"), env.get("PYTHONPATH", "")])
    script = "\n".join([
        'set -e; d=$1; s=$2; mkdir -p "$s/wheels"',
        'cp "$d"/*.whl "$s/wheels/" 2>/dev/null || true',
        'for p in "$d"/*.whl.part-aa; do',
        '  [ -e "$p" ] || continue',
        '  cat "${p%-aa}"-* > "$s/wheels/$(basename "${p%.part-aa}")"',
        'done',
        'if [ -f "$d/SHA256SUMS" ]; then (cd "$s/wheels" && sha256sum -c "$d/SHA256SUMS"); fi',
        f'{shlex.quote(PY)} -m pip install -q --no-deps --target "$s" "$s"/wheels/*.whl'])
    return [("fa4_install", ["bash", "-c", script, "fa4", str(Path(a.fa4_wheels).resolve()),
                             str(site)], 300),
            ("fa4_import", [PY, "-c", "import importlib.metadata as m, flash_attn.cute; "
                            "print('flash-attn-4', m.version('flash-attn-4'))"], 120)]


def plan(a: argparse.Namespace, env: dict) -> list[tuple]:
    cmds: list[tuple] = []
    if not a.no_install:
        cmds.append(("install", [PY, "-m", "pip", "install", "-q", "--no-deps",
                                 "--no-build-isolation", "-e", "."], 300))
    for name in a.steps:
        if name == "fa4" and a.fa4_wheels:
            cmds += _fa4_site(a, env)
        cmds += [(*c[:2], a.timeout or c[2], *c[3:]) for c in STEPS[name][1](a)]
    return cmds


def _env_log(out: Path) -> None:
    lines = [_gpu_name(), time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())]
    probe = "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
    r = subprocess.run([PY, "-c", probe], capture_output=True, text=True)
    lines.append((r.stdout or r.stderr).strip())
    (out / "env.log").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    env = dict(os.environ, PYTHONUNBUFFERED="1", BLOCKATTN_GIT_COMMIT=a.commit)
    if a.kernel_path:
        env["BLOCKATTN_KERNEL_PATH"] = a.kernel_path
    cmds = plan(a, env)
    if a.dry_run:
        for name, argv_, timeout, *to in cmds:
            redirect = f" > {to[0]}" if to else ""
            print(f"{name}: timeout {timeout} {shlex.join(argv_)}{redirect}")
        return 0
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    _env_log(out)
    failed = False
    for name, argv_, timeout, *to in cmds:
        t0 = time.monotonic()
        with open(out / f"{name}.log", "w") as log:
            try:
                rc = subprocess.run(argv_, cwd=REPO, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, timeout=timeout).returncode
            except subprocess.TimeoutExpired:
                rc = 124
            except OSError as exc:
                log.write(f"{exc}\n")
                rc = 127
        if to:
            Path(to[0]).write_text((out / f"{name}.log").read_text())
        line = f"== {name}: exit {rc} in {time.monotonic() - t0:.0f} s: {shlex.join(argv_)}"
        with open(out / "steps.log", "a") as f:
            f.write(line + "\n")
        print(line, flush=True)
        print("".join((out / f"{name}.log").read_text().splitlines(True)[-4:]), end="", flush=True)
        failed |= rc != 0
        if a.tar:
            with tarfile.open(f"{out}.tgz", "w:gz") as tar:
                tar.add(out, arcname=out.name)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
