"""A provider (default fa2) on a recorded case, with torch's default GEMM reductions (16-bit
split-K partial sums allowed) and with the baselines' FP32 reductions: bound violations per
output.

    python3 reduction_diag.py RECORD.jsonl [PROVIDER]
"""

import contextlib
import json
import sys

import torch

from blockattn import providers
from blockattn.bounds.elementwise import TokenMap
from blockattn.cases.inputs import build_inputs
from blockattn.cases.spec import CaseSpec
from blockattn.judge import metrics
from blockattn.judge import tolerances as T
from blockattn.providers import _common
from blockattn.run.oracle import oracle_bounds, oracle_outputs

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def main(path: str, name: str) -> None:
    with open(path) as fh:
        rec = json.loads(fh.readline())
    spec = CaseSpec.from_dict(rec["spec"])
    inp = build_inputs(spec, DEV)
    prov = providers.get(name)
    tol = T.load(T.latest_released(T.default_tolerance_dir(), device=DEV))
    model = tol.model_for(prov.name, prov.accuracy_model, prov.reference)
    ref = oracle_outputs(inp)
    (bnd,) = oracle_bounds(inp, [model.resolve(spec.dtype)])
    real = _common.fp32_reductions
    for label, ctx in (("torch default (reduced-precision reductions allowed)",
                        contextlib.nullcontext), ("fp32 reductions (the fix)", real)):
        _common.fp32_reductions = ctx
        out = prov.run(inp, spec.variant)
        res = {}
        for k in ref:
            tmap = (TokenMap(inp.offsets, inp.T, spec.block_size, ref[k].device)
                    if ref[k].dim() == 3 else None)
            tm = metrics.tensor_metrics(out[k], ref[k], spec.dtype, model=model, bound=bnd[k],
                                        tmap=tmap)
            res[k] = (tm["bound"]["violations"], tm["bound"]["max_ratio"])
        print(label)
        print("  ", res)
    _common.fp32_reductions = real


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "fa2")
