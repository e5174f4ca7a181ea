"""Profile one harness case end to end (case build, providers, oracle, metrics) with cProfile.

    python benchmarks/profile_case.py --out DIR [--shape-p plain|rotary] [--providers blockattn,fa2]

Used to find where a large case spends its time in `blockattn run`. Writes DIR/profile.txt (top
functions by cumulative time) and DIR/results.jsonl (the case's record).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
from pathlib import Path

from blockattn.run import session


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--shape-p", choices=("plain", "rotary"), default="plain")
    ap.add_argument("--providers", default="blockattn,fa2")
    args = ap.parse_args()
    session.setup_device()
    from blockattn.cases.plan import shape_p_specs
    from blockattn.pipeline import run_cases

    spec = next(s for s in shape_p_specs() if s.variant == args.shape_p)
    provs = args.providers.split(",")
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    run_cases([spec], args.out, provider_names=provs, under_test=provs[0], baseline=provs[-1],
              progress=False)
    prof.disable()
    wall = time.perf_counter() - t0
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(40)
    text = f"{spec.short()}: {wall:.1f} s wall\n{buf.getvalue()}"
    (args.out / "profile.txt").write_text(text)
    print(text[:6000])


if __name__ == "__main__":
    main()
