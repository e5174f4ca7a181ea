"""For each case in RESULTS (results.jsonl) where a provider's bound has violations, rebuild
the inputs, rerun that provider, and print what its outputs, the oracle and the bound hold.

    python3 fa2_diag.py RESULTS
"""

import json
import sys

import torch

from blockattn import providers
from blockattn.bounds.elementwise import store_bound
from blockattn.cases.inputs import build_inputs
from blockattn.cases.spec import CaseSpec
from blockattn.judge import tolerances as T
from blockattn.run.oracle import oracle_bounds, oracle_outputs

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def stats(name: str, t: torch.Tensor) -> str:
    t = t.double()
    fin = torch.isfinite(t)
    a = t[fin].abs()
    mx = f"{a.max().item():.3g}" if a.numel() else "n/a"
    mn = f"{a[a > 0].min().item():.3g}" if (a > 0).any() else "n/a"
    return (f"{name}: nonfinite {int((~fin).sum())} (nan {int(torch.isnan(t).sum())}), "
            f"zeros {int((t == 0).sum())}/{t.numel()}, |.| max {mx} min>0 {mn}")


def main(path: str) -> None:
    with open(path) as fh:
        rows = [json.loads(line) for line in fh]
    tol = T.load(T.latest_released(T.default_tolerance_dir(), device=DEV))
    for r in rows:
        for pname, pr in r["providers"].items():
            bad = {k: v["bound"] for k, v in (pr.get("tensors") or {}).items()
                   if v.get("bound") and v["bound"].get("violations")}
            if not bad:
                continue
            print("=" * 80)
            print(r["case_id"], pname, json.dumps(r["spec"]))
            for k, b in bad.items():
                print(f"  {k}: violations {b['violations']} ({b['pct_violations']:.3g} %) "
                      f"max_ratio {b['max_ratio']} worst {b.get('worst')}")
            spec = CaseSpec.from_dict(r["spec"])
            inp = build_inputs(spec, DEV)
            prov = providers.get(pname)
            out, ref = prov.run(inp, spec.variant), oracle_outputs(inp)
            for name in ("q", "k", "v", "grad_out", "x", "w", "sinu_pos"):
                t = getattr(inp, name, None)
                if t is not None:
                    print("   in", stats(name, t))
            model = tol.model_for(prov.name, prov.accuracy_model, prov.reference)
            (bnd,) = oracle_bounds(inp, [model.resolve(spec.dtype)])
            for k in bad:
                print("   out", stats(k, out[k]))
                print("   ref", stats(k, ref[k]))
                print("   bnd", stats(k, bnd[k]))
                err = (out[k].double() - ref[k]).abs()
                ratio = err / store_bound(ref[k].double(), 2.0 * bnd[k].double(), spec.dtype)
                print(f"   ratio: nonfinite {int((~torch.isfinite(ratio)).sum())}, "
                      f">1 {int((ratio > 1).sum())}")
                for i in torch.nonzero(~(ratio <= 1))[:5].tolist():
                    ii = tuple(i)
                    print(f"     at {ii}: out {out[k][ii].item()!r} ref {ref[k][ii].item()!r} "
                          f"bound {bnd[k][ii].item()!r}")


if __name__ == "__main__":
    main(sys.argv[1])
