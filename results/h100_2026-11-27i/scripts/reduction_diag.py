"""FA2 baseline on a recorded case, with torch's default (16-bit split-K reductions allowed)
and with the baselines' FP32 reductions: bound violations per output."""
import contextlib, json, sys, torch
from blockattn import providers
from blockattn.providers import _common
from blockattn.cases.spec import CaseSpec
from blockattn.cases.inputs import build_inputs
from blockattn.run.oracle import oracle_outputs, oracle_bounds
from blockattn.judge import metrics, tolerances as T
from blockattn.bounds.elementwise import TokenMap

rec = json.loads(open(sys.argv[1]).readline())
spec = CaseSpec.from_dict(rec["spec"])
DEV = "cuda" if torch.cuda.is_available() else "cpu"
inp = build_inputs(spec, DEV)
prov = providers.get(sys.argv[2] if len(sys.argv) > 2 else "fa2")
tol = T.load(T.latest_released(T.default_tolerance_dir(), device=DEV))
model = tol.model_for(prov.name, prov.accuracy_model, prov.reference)
ref = oracle_outputs(inp)
(bnd,) = oracle_bounds(inp, [model.resolve(spec.dtype)])
keys = list(ref)
real = _common.fp32_reductions
for label in ("torch default (reduced-precision reductions allowed)", "fp32 reductions (the fix)"):
    if label.startswith("torch"):
        _common.fp32_reductions = contextlib.nullcontext
    else:
        _common.fp32_reductions = real
    m = torch.backends.cuda.matmul
    print(label, "flags now", m.allow_bf16_reduced_precision_reduction, m.allow_fp16_reduced_precision_reduction)
    out = prov.run(inp, spec.variant)
    res = {}
    for k in keys:
        tm = metrics.tensor_metrics(out[k], ref[k], spec.dtype, model=model, bound=bnd[k],
                                    tmap=TokenMap(inp.offsets, inp.T, spec.block_size, ref[k].device) if ref[k].dim() == 3 else None)
        res[k] = (tm["bound"]["violations"], tm["bound"]["max_ratio"])
    print("  ", res)
