"""Screenshot of a failing `blockattn report` page in headless Chromium.

    python benchmarks/report_screenshot.py --png docs/report-failing.png [--out DIR]

Builds a small report directory with passing and failing cases (a planted masking bug from
tests/harness/harness_helpers.py, judged by tolerances v4 with the kernel's rule), renders it
with blockattn.report.html.render and screenshots report.html. Chromium: Debian's
`apt-get install chromium` (/usr/bin/chromium). tests/harness/test_report_browser.py uses the
same functions.
"""

from __future__ import annotations

import argparse
import copy
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")
UNDER_TEST = "bug-mask"


def find_chromium() -> str | None:
    return next((p for n in CHROMIUM_NAMES if (p := shutil.which(n))), None)


def _chromium(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    exe = find_chromium()
    if exe is None:
        raise FileNotFoundError("no chromium binary on PATH (apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        cmd = [
            exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", f"--user-data-dir={profile}", *args,
        ]  # fmt: skip
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True)


def screenshot(html: Path, png: Path, width: int = 1200, height: int = 1600) -> Path:
    """Render `html` at width x height CSS px and write the viewport to `png`."""
    png.parent.mkdir(parents=True, exist_ok=True)
    _chromium(
        [f"--screenshot={png.resolve()}", f"--window-size={width},{height}",
         html.resolve().as_uri()],
        timeout=120,
    )  # fmt: skip
    return png


def dump_dom(html: Path, width: int = 1200) -> str:
    """The DOM after Chromium ran the page (scripts included) at `width` CSS px."""
    return _chromium(
        ["--dump-dom", f"--window-size={width},1600", html.resolve().as_uri()], timeout=120
    ).stdout


def _env_for_kernels() -> None:
    """The kernels read TRITON_INTERPRET when blockattn is first imported: set it first on CPU."""
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


def build_failing_report(out: Path, command: str | None = None) -> dict[str, Any]:
    """A run directory at `out` whose provider under test has a partial-block masking bug:
    cases of full blocks pass, cases with a partial block fail. Returns render()'s files.

    blockattn and eager run beside it (within their bounds); report.json carries the meta a
    run writes and the real oracle self-check.
    """
    _env_for_kernels()
    sys.path.insert(0, str(REPO / "tests" / "harness"))
    from harness_helpers import TOL_DIR, dump_toml, nomask_bug

    from blockattn import providers
    from blockattn.cases.spec import CaseSpec
    from blockattn.judge import tolerances
    from blockattn.pipeline import run_cases
    from blockattn.report import report_json
    from blockattn.report.html import render
    from blockattn.run import session
    from blockattn.run.execute import device_info, git_commit

    def mask_bug(inputs, variant: str):
        """The kernel, except where a sequence ends in a partial block: there the padded keys
        are not masked (harness_helpers.nomask_bug), as a masking bug would."""
        lens = (inputs.offsets[1:] - inputs.offsets[:-1]).tolist()
        if all(n % 64 == 0 for n in lens):
            return providers.get("blockattn").run(inputs, variant)
        return nomask_bug(inputs, variant)

    out.mkdir(parents=True, exist_ok=True)
    doc = copy.deepcopy(tolerances.load(TOL_DIR / "v4.toml").data)
    doc["rules"][UNDER_TEST] = dict(doc["rules"]["blockattn"])  # judged as the kernel is
    doc["status"] = "proposed"
    tol_path = out / "tolerances" / "v4.toml"
    tol_path.parent.mkdir(exist_ok=True)
    tol_path.write_text(dump_toml(doc))
    tol = tolerances.load(tol_path)
    specs = [
        CaseSpec(seed=1, lengths=(64, 64), H=2, source="corpus", name="full-blocks-bf16"),
        CaseSpec(seed=2, lengths=(65, 3), H=2, source="corpus", name="partial-block-bf16"),
        CaseSpec(seed=3, variant="rotary", lengths=(64,), H=2, dtype="float16",
                 source="corpus", name="full-block-rotary-fp16"),
        CaseSpec(seed=4, variant="rotary", lengths=(30,), H=2, dtype="float16",
                 source="corpus", name="partial-block-rotary-fp16"),
    ]  # fmt: skip
    provs = [UNDER_TEST, "blockattn", "eager"]
    providers.register(UNDER_TEST, mask_bug, role="kernel", accuracy_model="fp32-split-operands")
    try:
        records = run_cases(specs, out, provider_names=provs, under_test=UNDER_TEST,
                            baseline="eager", tol=tol, progress=False)  # fmt: skip
    finally:
        providers.unregister(UNDER_TEST)
    try:
        from oracles.selfcheck import run_selfchecks

        checks = run_selfchecks(records[0]["device"])
    except ImportError:
        checks = None
    meta = {
        **device_info(),
        "commit": git_commit(),
        "profile": "ci",
        "under_test": UNDER_TEST,
        "baseline": "eager",
        "providers": provs,
        "tolerances": str(tol_path),
        "n_cases": len(records),
        "finished": session.timestamp(),
        "command": command or shlex.join(sys.argv),
    }
    report_json.write_report_json(out, records, meta, {"selfcheck": checks})
    return render(records, out, partial=False, meta=meta, selfcheck=checks)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--png", type=Path, default=REPO / "docs" / "report-failing.png")
    ap.add_argument("--out", type=Path, help="report directory (default: a temporary one)")
    ap.add_argument("--width", type=int, default=1200)
    ap.add_argument("--height", type=int, default=1600)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="blockattn-report-") as tmp:
        out = args.out or Path(tmp) / "run"
        files = build_failing_report(out)
        screenshot(files["html"], args.png, args.width, args.height)
    print(f"screenshot: {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
