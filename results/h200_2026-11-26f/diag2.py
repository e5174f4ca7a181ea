"""Which configs give NaN in the portable fp16 rotary backward at block_size 128 (GPU)."""
import dataclasses

import torch

from blockattn.cases.spec import CaseSpec
from blockattn.judge.evaluate import evaluate_case
from blockattn.kernels import attention as A

BASE = {"seed": 0, "variant": "rotary", "B": 4, "max_len": 256, "sparsity": 0.5, "lengths": [63],
        "H": 1, "D": 128, "dtype": "float16", "distribution": "normal", "scale": None,
        "rotate_v": True, "kvheads": None, "block_size": 128, "source": "fuzz", "name": ""}

def nan_counts(**kw):
    d = dict(BASE, **kw)
    rec = evaluate_case(CaseSpec.from_dict(d), ["blockattn", "eager"], "blockattn", "eager")
    p = rec["providers"]["blockattn"]
    if p["status"] != "ok":
        return p["status"], str(p.get("reason"))[:200]
    return {t: p["tensors"][t]["nonfinite_bad"] for t in ("dQ", "dK", "dV")}

cases = [dict(), dict(rotate_v=False), dict(dtype="bfloat16"), dict(block_size=64),
         dict(D=64), dict(lengths=[200]), dict(lengths=[128])]
for kw in cases:
    try:
        print("case", kw, nan_counts(**kw), flush=True)
    except Exception as e:
        print("case", kw, "ERROR", type(e).__name__, str(e)[:300], flush=True)
key = ("bwd", True, 128)
A.CONFIGS[key] = dataclasses.replace(A.CONFIGS[key], chunks=1)
print("chunks=1", A.launch_config("bwd", True, 128, torch.float16))
for kw in [dict(), dict(dtype="bfloat16")]:
    try:
        print("case chunks=1", kw, nan_counts(**kw), flush=True)
    except Exception as e:
        print("case chunks=1", kw, "ERROR", type(e).__name__, str(e)[:300], flush=True)
