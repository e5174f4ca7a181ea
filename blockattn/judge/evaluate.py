"""Judge one case: build its inputs, the FP64 oracle's outputs and bounds, run every provider
(`blockattn.run.execute`) and measure each output element against the oracle (`metrics`)."""

from __future__ import annotations

import datetime as _dt
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from blockattn import providers
from blockattn.bounds.elementwise import TokenMap
from blockattn.cases.inputs import Inputs, build_inputs
from blockattn.cases.spec import CaseSpec
from blockattn.judge import metrics
from blockattn.providers import OUTPUT_KEYS
from blockattn.run.execute import (
    call_provider,
    device_info,
    release_cuda_memory,
    send_ahead,
)
from blockattn.run.oracle import oracle_bounds, oracle_outputs


def _bounds_for(prov: providers.Provider, inp: Inputs, tol) -> tuple[Any, dict | None]:
    """(model, {tensor: E}) of the provider's accuracy model in `tol`; (None, None) without one.

    The model is the one the tolerance file's rule for this provider names (the verdict checks
    that it is the one the provider declares)."""
    model = (
        tol.model_for(prov.name, prov.accuracy_model, prov.reference) if tol is not None else None
    )
    if model is None:
        return None, None
    (bounds,) = oracle_bounds(inp, [model.resolve(inp.spec.dtype)])
    return model, bounds


def _judge_provider(
    prov: providers.Provider,
    inp: Inputs,
    variant: str,
    ref: dict[str, torch.Tensor],
    dtype: str,
    tol=None,  # Tolerances | None: supplies the accuracy model of the elementwise bound
    tmap=None,
    ahead: Any = None,  # the collector of a call sent ahead (run.execute.send_ahead)
) -> dict[str, Any]:
    out, res = call_provider(prov, inp, variant, ahead)
    if out is None:
        return res
    elapsed, isolation = res["time_s"], res.get("isolation")
    tensors = {}
    try:
        model, bounds = _bounds_for(prov, inp, tol)
        for key in OUTPUT_KEYS[variant]:
            tensors[key] = metrics.tensor_metrics(
                out[key], ref[key], dtype, bound=None if bounds is None else bounds[key],
                model=model, tmap=tmap,
            )  # fmt: skip
        del bounds
    except ValueError as exc:
        return {"status": "error", "reason": str(exc), "time_s": elapsed,
                "isolation": isolation}
    res = {"status": "ok", "reason": None, "time_s": elapsed, "tensors": tensors,
           "provider": prov.describe(), "isolation": isolation}  # fmt: skip
    if prov.accuracy_model is not None:
        res["accuracy_model"] = prov.accuracy_model
    if prov.reference is not None:
        res["reference"] = prov.reference
    return res


@dataclass
class Begun:
    """A case whose inputs are built and whose isolated call is on its way (`begin_case`); its
    oracle, the other providers and the judging follow in `finish_case`."""

    spec: CaseSpec
    rec: dict[str, Any]
    provider_names: list[str]
    inp: Inputs | None = None  # None: building the inputs failed (rec says why)
    ahead: dict[str, Any] = field(default_factory=dict)
    prep_s: float = 0.0


def begin_case(
    spec: CaseSpec,
    provider_names: list[str],
    under_test: str,
    baseline: str,
    device: str | None = None,
) -> Begun:
    """Build the case's inputs and send them to the first isolated provider's worker, which
    runs the call while the judge computes oracles (of this case, or of the one before it)."""
    info = device_info()
    dev = device or info["device"]
    rec: dict[str, Any] = {
        "case_id": spec.case_id,
        "spec": spec.to_dict(),
        "device": dev,
        "arch": info["arch"],
        "under_test": under_test,
        "baseline": baseline,
        "providers": {},
        "oracle_error": None,
    }
    t0 = time.perf_counter()
    try:
        inp = build_inputs(spec, dev)
    except RuntimeError as exc:  # CUDA/CPU OOM on a huge case: record it, go on with the next
        # (ValueError/TypeError are bad specs: usage errors, raised to the command -> exit 2)
        release_cuda_memory(exc)
        rec["oracle_error"] = f"building inputs: {type(exc).__name__}: {exc}"
        rec["T"] = rec["max_seq_len"] = rec["n_seqs"] = rec["realized_sparsity"] = None
        rec["wall_s"] = time.perf_counter() - t0
        return Begun(spec, rec, provider_names)
    lens = (inp.offsets[1:] - inp.offsets[:-1]).tolist() if inp.offsets.numel() > 1 else []
    rec["T"] = inp.T
    rec["max_seq_len"] = int(max(lens, default=0))
    rec["n_seqs"] = len(lens)
    rec["realized_sparsity"] = (
        1.0 - inp.T / (len(lens) * max(1, spec.max_len)) if spec.lengths is None and lens else None
    )
    # The first isolated provider's call runs in its worker while the oracle is computed here
    # (the worker is sent the inputs only; the oracle's result never leaves this process).
    ahead: dict[str, Any] = {}
    for name in provider_names:
        if (collect := send_ahead(providers.get(name), inp, spec.variant)) is not None:
            ahead[name] = collect
            break
    return Begun(spec, rec, provider_names, inp, ahead, time.perf_counter() - t0)


def finish_case(b: Begun, tol=None) -> dict[str, Any]:
    """The oracle, every provider's outputs (the call sent ahead collected) and their metrics:
    the case's record. `tol`: its accuracy models give each provider's elementwise bound."""
    rec, inp, spec = b.rec, b.inp, b.spec
    if inp is None:
        return rec
    t0 = time.perf_counter() - b.prep_s  # the case's own time: its preparation, then this
    try:
        # The oracle outputs stay on the case's device: metrics reduce them there, in chunks.
        ref = {k: v.detach() for k, v in oracle_outputs(inp).items()}
    except Exception as exc:
        release_cuda_memory(exc)
        rec["oracle_error"] = f"{type(exc).__name__}: {exc}"
        rec["wall_s"] = time.perf_counter() - t0
        return rec
    rec["oracle_s"] = time.perf_counter() - t0
    tmap = TokenMap(inp.offsets, inp.T, spec.block_size, ref["O"].device)
    if tol is not None:
        rec["tolerances"] = {"version": tol.version, "sha256": tol.sha256}
    # The judge's own providers (the trusted baselines) first, then the isolated ones in their
    # order (the call sent ahead is the first of them): the worker runs on while the judge does
    # its own work. The record keeps the declared order.
    judged = {}
    for name in sorted(b.provider_names, key=lambda n: providers.get(n).worker is not None):
        judged[name] = _judge_provider(providers.get(name), inp, spec.variant, ref, spec.dtype,
                                       tol, tmap, b.ahead.pop(name, None))  # fmt: skip
    rec["providers"].update((name, judged[name]) for name in b.provider_names)
    ut, bl = rec["providers"].get(rec["under_test"]), rec["providers"].get(rec["baseline"])
    if ut and bl and ut["status"] == "ok" and bl["status"] == "ok":
        rec["vs_baseline"] = {
            k: metrics.ratio(m["max_abs"], bl["tensors"][k]["max_abs"], m["floor_eff"])
            for k, m in ut["tensors"].items()
        }
    rec["wall_s"] = time.perf_counter() - t0
    rec["finished_at"] = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    return rec


def evaluate_case(
    spec: CaseSpec,
    provider_names: list[str],
    under_test: str,
    baseline: str,
    device: str | None = None,
    tol=None,  # Tolerances | None: its accuracy models give each provider's elementwise bound
) -> dict[str, Any]:
    """One case, start to end (`begin_case`, then `finish_case`)."""
    return finish_case(begin_case(spec, provider_names, under_test, baseline, device), tol)
