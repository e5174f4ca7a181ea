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

_LINE = re.compile(r'//## File "([^"]+)", line (\d+)')
_INSTRUCTION = re.compile(r"\s+/\*[0-9a-f]{4,}\*/\s+(.*?);")


def opcode(src: str) -> str:
    """The opcode of one SASS instruction's text, without predicate and modifiers."""
    words = src.split()
    if not words:
        return "?"
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return op.split(".")[0]


def source_lines(text: str) -> list[tuple[str, str | None]]:
    """(opcode, "file:line") per instruction of an `nvdisasm -g` listing, in order; None before
    the first source-line comment. benchmarks/ncu_sass_stalls.py --lines reads it too."""
    where = None
    out = []
    for line in text.splitlines():
        m = _LINE.search(line)
        if m:
            where = f"{Path(m.group(1)).name}:{m.group(2)}"
            continue
        m = _INSTRUCTION.match(line)
        if m:
            out.append((opcode(m.group(1)), where))
    return out


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

    try:
        variants = cc.select_variants(args.variant)
    except ValueError as exc:  # no variant matches
        print(f"sass_lines: {exc}", file=sys.stderr)
        return 2
    if len(variants) != 1:
        print(f"sass_lines: {args.variant!r} names {len(variants)} variants, not 1",
              file=sys.stderr)
        return 2
    res, kernel = cc.compile_variant(variants[0], args.target)
    nvdisasm = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        text = subprocess.run([str(nvdisasm), "-g", "-c", f.name], capture_output=True,
                              text=True, check=True).stdout
    if args.sass:
        args.sass.write_text(text)
    counts: collections.Counter = collections.Counter()
    ops: dict = collections.defaultdict(collections.Counter)
    for op, where in source_lines(text):
        if where:
            counts[where] += 1
            ops[where][op] += 1
    print(f"{res.variant} {args.target}: {res.registers} registers, spills "
          f"{res.spill_stores}/{res.spill_loads} B, {sum(counts.values())} instructions "
          "with a source line\n")
    print("| instructions | source line | commonest opcodes |\n|---:|---|---|")
    for where, c in counts.most_common(args.top):
        common = " ".join(f"{o} {n}" for o, n in ops[where].most_common(5))
        print(f"| {c} | {where} | {common} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
