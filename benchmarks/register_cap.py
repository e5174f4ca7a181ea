"""Registers, spills and CTAs per SM of Gluon `blockattn compile-check` variants built under a
forced ptxas register cap (maxnreg), on CPU: does a kernel fit N CTAs per SM, and at what spill?

    python benchmarks/register_cap.py CAP VARIANT [VARIANT ...]   (e.g. 168 bwd-bf16-d128-rot-gluon)

Builds as compile-check does (its Result, sm_90), with the launch's own cap replaced by CAP.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    os.environ["TRITON_DUMP_PTXAS_LOG"] = "1"  # compile_check reads ptxas' -v log
    os.environ["TRITON_ALWAYS_COMPILE"] = "1"
    os.environ.pop("TRITON_INTERPRET", None)  # a real build, not the interpreter
    from blockattn.kernels import compile_check as cc

    cap = int(argv[0])
    by_name = {v.name: v for v in cc.all_variants()}
    print("| variant | cap | registers | spill st/ld B | smem B | CTAs/SM |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in argv[1:]:
        if name not in by_name or not name.endswith(("-gluon", "-gluon2")):
            print(f"register_cap: {name} is not a Gluon compile-check variant", file=sys.stderr)
            return 2
        res, _ = cc.compile_variant(by_name[name], "sm_90", maxnreg=cap)
        print(f"| {name} | {cap} | {res.registers} | {res.spill_stores}/{res.spill_loads} | "
              f"{res.smem} | {res.ctas_per_sm} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
