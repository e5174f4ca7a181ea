"""Static SASS instruction counts per source line of one `blockattn compile-check` variant,
built on CPU (no GPU): where a kernel's instructions come from, before any device time.

    python benchmarks/sass_lines.py VARIANT [--target sm_90] [--top 30] [--sass FILE]

Compiles VARIANT as compile-check does (its Result: registers, spills), disassembles the cubin
with the nvdisasm that ships with triton (`-g`: source-line comments) and counts instructions
per (file, line), with each line's five commonest opcodes. Counts are static: a line on a
branch taken rarely (partial tiles) counts in full, and loop bodies once. `--sass FILE` keeps
the annotated disassembly.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variant")
    ap.add_argument("--target", default="sm_90")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--sass", type=Path, default=None)
    args = ap.parse_args()
    os.environ.pop("TRITON_INTERPRET", None)
    os.environ["TRITON_DUMP_PTXAS_LOG"] = "1"  # compile_check reads ptxas' -v log
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="sass_lines_")
    import triton

    from blockattn.kernels import compile_check as cc

    built = {}
    build = cc._build

    def keep(src, arch, options, res):  # the compiled kernel, for its cubin
        built["kernel"] = build(src, arch, options, res)
        return built["kernel"]

    cc._build = keep
    try:
        variants = cc.select_variants(args.variant)
    except ValueError as exc:  # no variant matches
        print(f"sass_lines: {exc}", file=sys.stderr)
        return 2
    if len(variants) != 1:
        print(f"sass_lines: {args.variant!r} names {len(variants)} variants, not 1",
              file=sys.stderr)
        return 2
    res = cc._compile_one(variants[0], args.target)
    if res.error or "kernel" not in built:
        print(f"sass_lines: build failed: {res.error}", file=sys.stderr)
        return 1
    nvdisasm = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(built["kernel"].asm["cubin"])
        f.flush()
        text = subprocess.run([str(nvdisasm), "-g", "-c", f.name], capture_output=True,
                              text=True, check=True).stdout
    if args.sass:
        args.sass.write_text(text)
    where = None
    counts: collections.Counter = collections.Counter()
    ops: dict = collections.defaultdict(collections.Counter)
    for line in text.splitlines():
        m = re.search(r'//## File "([^"]+)", line (\d+)', line)
        if m:
            where = (Path(m.group(1)).name, int(m.group(2)))
            continue
        m = re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)", line)
        if m and where:
            counts[where] += 1
            ops[where][m.group(1).split(".")[0]] += 1
    print(f"{res.variant} {args.target}: {res.registers} registers, spills "
          f"{res.spill_stores}/{res.spill_loads} B, {sum(counts.values())} instructions "
          "with a source line\n")
    print("| instructions | source line | commonest opcodes |\n|---:|---|---|")
    for (name, ln), c in counts.most_common(args.top):
        common = " ".join(f"{o} {n}" for o, n in ops[(name, ln)].most_common(5))
        print(f"| {c} | {name}:{ln} | {common} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
