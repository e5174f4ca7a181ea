"""The portable kernels at 128-row tiles under the configs of 33546d3, sm_90 (README)."""

import json
from pathlib import Path

from blockattn.kernels import compile_check as C

C.BLOCK_SIZE = 128
assert "oldtree" in C.__file__, C.__file__
vs = [v for v in C.all_variants() if v.path == "portable" and v.dtype != "fp32"]
out = {}
for v in vs:
    r, k = C.compile_variant(v, "sm_90")
    out[f"{v.name}-bs128"] = [r.num_warps, r.registers, r.spill_stores, r.spill_loads]
    print(v.name, out[f"{v.name}-bs128"], flush=True)
Path("old128.json").write_text(json.dumps(out, indent=0))
