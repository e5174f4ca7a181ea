"""`blockattn replay`: re-run one case from a reproducer JSON (or inline JSON) and print metrics."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from blockattn.judge.tolerances import resolve_path as _tol_path

HELP = "re-run one failing case from its reproducer (repro/<case_id>.json) and show its metrics"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("repro", help="reproducer JSON file, or an inline JSON case spec")
    p.add_argument("--tolerances", type=_tol_path, help="judge with this tolerance file")
    from blockattn.commands._options import add_unreleased_option

    add_unreleased_option(p)
    from blockattn.commands._options import add_isolation_options

    add_isolation_options(p)
    p.add_argument("--providers", help="comma list (default: those of the reproducer)")
    p.add_argument("--json", action="store_true", help="print the full record as JSON")
    from blockattn.commands._options import add_provider_option

    add_provider_option(p)


def main(args: argparse.Namespace) -> int:
    from blockattn.cases.spec import CaseSpec
    from blockattn.judge import tolerances, verdict
    from blockattn.judge.evaluate import evaluate_case
    from blockattn.run import session
    from blockattn.run.execute import default_providers

    src = Path(args.repro)
    try:
        if src.is_file():
            payload = json.loads(src.read_text())
        elif args.repro.lstrip().startswith("{"):
            payload = json.loads(args.repro)
        else:
            raise FileNotFoundError(f"no reproducer at {args.repro}")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"repro {args.repro!r}: not valid JSON ({exc})") from exc
    spec_d = payload.get("spec", payload) if isinstance(payload, dict) else None
    if not isinstance(spec_d, dict):
        raise ValueError(f"repro {args.repro!r}: must be a JSON object with a 'spec' object")
    spec = CaseSpec.from_dict(spec_d)
    device = session.setup_device()
    from blockattn import providers

    # The outside kernels of the failing run, by the spec they were loaded with (--provider
    # on this command overrides one of the same name); imported relative to the run's cwd.
    specs = dict(payload.get("provider_specs") or {}) if isinstance(payload, dict) else {}
    for s_ in args.provider or []:
        if providers.is_bare(s_):
            continue  # a known provider by name: nothing to re-create
        name, _mod, attr = providers.parse_spec(s_)
        specs[name or attr.rsplit(".", 1)[-1]] = s_
    run_cwd = payload.get("cwd") if isinstance(payload, dict) else None
    if specs and run_cwd and run_cwd not in sys.path and Path(run_cwd).is_dir():
        sys.path.append(run_cwd)
    from blockattn.commands._options import isolate, load_provider_specs

    load_provider_specs(list(specs.values()))
    ut0, bl0, provs0 = default_providers(device)
    ut = payload.get("under_test", ut0)
    bl = bl0 if payload.get("device") != device else payload.get("baseline", bl0)
    # The providers of the failing run (same device), else the device defaults.
    recorded = payload.get("providers") if payload.get("device") == device else None
    provs = [s for s in (args.providers or "").split(",") if s] or list(
        dict.fromkeys([ut, bl, *(recorded or provs0)])
    )
    tol_path = args.tolerances or payload.get("tolerances")
    tol = tolerances.load(tolerances.resolve_path(tol_path)) if tol_path else None
    if tol is not None:
        tolerances.require_released(tol, args.allow_unreleased_tolerances)
    isolate(provs)
    rec = evaluate_case(spec, provs, ut, bl, tol=tol)
    print(f"case {rec['case_id']}: {spec.short()}  (T={rec['T']}, device {rec['device']})")
    if rec["oracle_error"]:
        print(f"oracle error: {rec['oracle_error']}")
    for name, p in rec["providers"].items():
        if p["status"] != "ok":
            print(f"  {name}: {p['status']}: {p.get('reason')}")
            continue
        for t, m in p["tensors"].items():
            w = m.get("worst") or {}
            where = ",".join(
                f"{k}={w[k]}" for k in ("token", "head", "dim", "row", "col") if k in w
            )
            print(
                f"  {name:>10} {t:>5}: max_abs {_g(m['max_abs'])}  err/floor "
                f"{_g(m['ratio_to_floor'])}  snr {_g(m['snr_db'])} dB  nan/inf "
                f"{m['nonfinite_bad']}  worst [{where}] got {w.get('value')} want "
                f"{_g(w.get('oracle'))}"
            )
            u, b = m.get("ulp") or {}, m.get("bound")
            if u:
                q = u["quantiles"]
                line = (
                    f"  {'':>10} {'':>5}  correctly rounded {u['pct_correctly_rounded']:.3f}%  "
                    f"faithful {u['pct_faithful']:.3f}%  p99.99 {_g(q['p99.99'])} ulp  max "
                    f"{_g(q['max'])} ulp"
                )
                if b:
                    line += f"  violations {b['violations']} ({b['model']})"
                print(line)
    if args.json:
        print(json.dumps(rec, indent=1))
    if tol_path:
        v = verdict.evaluate(rec, tol, ut)
        print("PASS" if v.passed else "FAIL")
        for f in v.failures:
            print(f"  - {f}")
        return 0 if v.passed else 1
    bad = any(p["status"] == "error" for p in rec["providers"].values()) or rec["oracle_error"]
    return 1 if bad else 0


def _g(x: float | None) -> str:
    return "inf/nan" if x is None else f"{x:.4g}"
