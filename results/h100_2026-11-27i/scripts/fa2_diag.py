"""For each case in RESULTS (results.jsonl) where a provider's bound has violations, rebuild
the inputs, rerun that provider, and print what its outputs, the oracle and the bound hold."""
import json, sys, torch
from blockattn import providers
from blockattn.cases.spec import CaseSpec
from blockattn.cases.inputs import build_inputs
from blockattn.run.oracle import oracle_outputs, oracle_bounds
from blockattn.judge import tolerances as T

def stats(name, t):
    t = t.double()
    fin = torch.isfinite(t)
    a = t[fin].abs()
    return (f"{name}: nonfinite {int((~fin).sum())} (nan {int(torch.isnan(t).sum())}), "
            f"zeros {int((t == 0).sum())}/{t.numel()}, |.| max {a.max().item() if a.numel() else 'n/a':.3g} "
            f"min>0 {a[a > 0].min().item() if (a > 0).any() else 'n/a'}")

DEV = "cuda" if torch.cuda.is_available() else "cpu"
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    for pname, pr in r["providers"].items():
        bad = {k: v["bound"] for k, v in (pr.get("tensors") or {}).items()
               if v.get("bound") and v["bound"].get("violations")}
        if not bad:
            continue
        print("=" * 80); print(r["case_id"], pname, json.dumps(r["spec"]))
        for k, b in bad.items():
            print(f"  {k}: violations {b['violations']} ({b['pct_violations']:.3g} %) max_ratio {b['max_ratio']} worst {b.get('worst')}")
        spec = CaseSpec.from_dict(r["spec"])
        inp = build_inputs(spec, DEV)
        prov = providers.get(pname)
        out = prov.run(inp, spec.variant)
        ref = oracle_outputs(inp)
        for name in ("q", "k", "v", "grad_out", "x", "w", "sinu_pos"):
            t = getattr(inp, name, None)
            if t is not None:
                print("   in", stats(name, t))
        tol = T.load(T.latest_released(T.default_tolerance_dir(), device=DEV))
        model = tol.model_for(prov.name, prov.accuracy_model, prov.reference)
        (bnd,) = oracle_bounds(inp, [model.resolve(spec.dtype)])
        for k in bad:
            print("   out", stats(k, out[k])); print("   ref", stats(k, ref[k])); print("   bnd", stats(k, bnd[k]))
            from blockattn.bounds.elementwise import store_bound
            err = (out[k].double() - ref[k]).abs()
            c = float(model.resolve(spec.dtype).get("c", 1.0)) if isinstance(model.resolve(spec.dtype), dict) else 2.0
            ratio = err / store_bound(ref[k].double(), c * bnd[k].double(), spec.dtype)
            print(f"   ratio: nonfinite {int((~torch.isfinite(ratio)).sum())}, >1 {int((ratio > 1).sum())}")
            idx = torch.nonzero(~(ratio <= 1))[:5]
            for i in idx.tolist():
                ii = tuple(i)
                print(f"     at {ii}: out {out[k][ii].item()!r} ref {ref[k][ii].item()!r} bound {bnd[k][ii].item()!r}")
