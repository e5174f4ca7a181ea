"""Measurements behind the claims, reusing the harness (accuracy) and the bench (timings).

Accuracy: one seeded harness case (`CaseSpec` -> `build_inputs`, the generator every harness run
uses); the FP64 oracle (`harness.reference.oracle_outputs`) and every provider
(`harness.providers`) see the very same inputs. Errors are reduced on the device (at shape P a
tensor has 720 M elements: copying it to the host for `harness.metrics.tensor_metrics` would
dominate the run), with the README's definitions:
    err(provider, t)   = max |provider_t - oracle_t|
    rounding floor(t)  = max |round_to_dtype(oracle_t) - oracle_t|   (harness.metrics)
Timing: `blockattn.bench` providers and `bench.measure.time_ms` (median of do_bench).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import torch

from blockattn.audit.claims import Claim


class NotRunnable(Exception):
    """The claim cannot be measured on this machine; str(exc) says why."""


def config_key(c: Claim, shape: dict[str, Any]) -> tuple:
    return (c.variant, c.D, c.dtype, shape["B"], shape["max_len"], shape["sparsity"], shape["H"])


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def accuracy_config(
    key: tuple, providers: set[str], seed: int, device: str, want_oracle_time: bool
) -> dict[str, Any]:
    """{"floor": {t: x}, "err": {provider: {t: x} | NotRunnable}, "oracle_s": s} for one seed."""
    from blockattn import providers as registry
    from blockattn.harness import metrics
    from blockattn.harness.inputs import build_inputs
    from blockattn.harness.reference import oracle_outputs
    from blockattn.harness.spec import CaseSpec

    variant, D, dtype, B, max_len, sparsity, H = key
    spec = CaseSpec(
        seed=seed,
        variant=variant,
        B=B,
        max_len=max_len,
        sparsity=sparsity,
        H=H,
        D=D,
        dtype=dtype,
        source="adhoc",
        name="audit",
    )
    inp = build_inputs(spec, device)
    _sync()
    t0 = time.perf_counter()
    ref = oracle_outputs(inp)
    _sync()
    res: dict[str, Any] = {"T": inp.T, "oracle_s": time.perf_counter() - t0, "err": {}}
    res["floor"] = {t: metrics.rounding_floor(r, spec.torch_dtype) for t, r in ref.items()}
    for name in sorted(providers):
        try:
            out = registry.get(name).run(dataclasses.replace(inp), variant)
        except registry.Unsupported as exc:
            res["err"][name] = NotRunnable(f"{name}: {exc}")
            continue
        res["err"][name] = {
            t: float((out[t].detach().to(torch.float64) - ref[t]).abs().max()) for t in ref
        }
        del out
    del ref, inp
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return res


def accuracy_value(c: Claim, m: dict[str, Any]) -> float:
    def errs(name: str) -> dict[str, float]:
        e = m["err"][name]
        if isinstance(e, NotRunnable):
            raise e
        return e

    mine = errs(c.provider)
    if c.metric == "ratio_to_rounding_floor":
        return max(mine[t] / m["floor"][t] for t in c.tensors)
    base = errs(c.reference[0])
    return max(mine[t] / base[t] for t in c.tensors)


class SpeedSession:
    """Timings for one (D, dtype, shape, seed) bench case; providers prepared once each."""

    def __init__(self, key: tuple, seed: int, warmup_ms: float, rep_ms: float) -> None:
        from blockattn.bench.case import make_bench_case

        _variant, D, dtype, B, max_len, sparsity, H = key
        self.case = make_bench_case(
            "audit",
            B=B,
            max_len=max_len,
            sparsity=sparsity,
            H=H,
            D=D,
            dtype=getattr(torch, dtype),
            device=torch.device("cuda"),
            seed=seed,
        )
        self.warmup_ms, self.rep_ms = warmup_ms, rep_ms
        self.prepared: dict[str, Any] = {}
        self.ms: dict[tuple[str, str], float | NotRunnable] = {}

    def time(self, provider: str, pas: str) -> float:
        from blockattn.bench import measure
        from blockattn.bench.providers import PROVIDERS, Unsupported

        if (provider, pas) not in self.ms:
            if provider not in PROVIDERS:
                raise ValueError(f"unknown bench provider {provider!r}; known {sorted(PROVIDERS)}")
            if provider not in self.prepared:
                try:
                    self.prepared[provider] = PROVIDERS[provider].prepare(self.case)
                except Unsupported as exc:
                    self.prepared[provider] = NotRunnable(f"{provider}: {exc}")
            prep = self.prepared[provider]
            if isinstance(prep, NotRunnable):
                self.ms[(provider, pas)] = prep
            else:
                fn = getattr(prep, pas)
                self.ms[(provider, pas)] = measure.time_ms(fn, self.warmup_ms, self.rep_ms)
        v = self.ms[(provider, pas)]
        if isinstance(v, NotRunnable):
            raise v
        return v

    def close(self) -> None:
        self.prepared.clear()
        del self.case
        torch.cuda.empty_cache()


def speed_value(c: Claim, s: SpeedSession, ceiling_tbps: float | None) -> float:
    from blockattn.bench.providers import PROVIDERS
    from blockattn.bench.runner import pass_bytes

    ms = s.time(c.provider, c.pass_)
    if c.metric == "speedup":
        # Fastest reference: the comparison most favourable to the baseline.
        return min(s.time(r, c.pass_) for r in c.reference) / ms
    assert ceiling_tbps is not None
    nbytes = pass_bytes(s.case, c.pass_, PROVIDERS[c.provider].rotary)
    return 100.0 * nbytes / (ms * 1e-3) / (ceiling_tbps * 1e12)
