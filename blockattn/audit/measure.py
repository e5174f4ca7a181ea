"""Measurements behind the claims, reusing the harness (accuracy) and the bench (timings).

A claim is measured on the kernel it names (`Claim.kernel`) and on nothing else: `refusal`
says why that kernel cannot run here (its declared `Supports` for this device and GPU
architecture, plus what the provider itself reports as `Unsupported`, e.g. a missing library).

Accuracy: one seeded harness case (`CaseSpec` -> `build_inputs`, the generator every harness run
uses) per (configuration, input distribution, seed); the FP64 oracle
(`run.oracle.oracle_outputs`), the FP32 reference and every provider see the very same
inputs. Two measures per provider and tensor t:
    FP64 (ours, decides the verdict), the README's definitions:
        err(p, t)          = max |p_t - oracle_t|
        rounding floor(t)  = max |round_to_dtype(oracle_t) - oracle_t|   (judge.metrics)
    FP32 reference (how the seed's own test measured): the same padded-block math as the eager
    baseline (`providers._common`, oracle- and kernel-independent) run in float32 on the inputs
    upcast to float32, TF32 off:
        err32(p, t)        = max |p_t - ref32_t|, floor32 from ref32 as above
        snr_db(p, t)       = 10 log10(sum ref32^2 / sum (p - ref32)^2)
        allclose(p, t)     = max |p - ref32| / (atol + rtol |ref32|)   (<= 1: torch.testing's
                             assert_close passes; rtol/atol: its defaults for the dtype, or the
                             claim's own)
Reductions run on the device in chunks (at shape P a tensor has 720 M elements).
Timing: `blockattn.bench` providers and `bench.measure.time_ms` (median of do_bench); an outside
kernel is timed through its `Provider.kernel` callable.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import torch

from blockattn.audit.claims import Claim

# torch.testing.assert_close defaults (rtol, atol) per dtype (its documented table).
TORCH_TESTING_TOLS = {
    "bfloat16": (1.6e-2, 1e-5),
    "float16": (1e-3, 1e-5),
    "float32": (1.3e-6, 1e-5),
}
_CHUNK = 1 << 25  # elements per reduction chunk


class NotRunnable(Exception):
    """The claim cannot be measured on this machine; str(exc) says why."""


def tols(c: Claim) -> tuple[float, float]:
    """(rtol, atol) of the FP32-reference allclose measure: the claim's, else torch.testing's."""
    if c.rtol is not None and c.atol is not None:
        return c.rtol, c.atol
    return TORCH_TESTING_TOLS[c.dtype]


def tol_key(t: tuple[float, float]) -> str:
    return f"rtol={t[0]:g},atol={t[1]:g}"


def config_key(c: Claim, shape: dict[str, Any], distribution: str | None = None) -> tuple:
    """Accuracy configuration: every claim on the same key shares inputs, oracle and runs."""
    return (c.variant, c.D, c.dtype, shape["B"], shape["max_len"], shape["sparsity"], shape["H"],
            distribution or c.distribution)  # fmt: skip


def speed_key(c: Claim, shape: dict[str, Any]) -> tuple:
    """Timing configuration (one bench case serves plain and rotary providers)."""
    return (c.D, c.dtype, shape["B"], shape["max_len"], shape["sparsity"], shape["H"])


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


# ----------------------------------------------------------------------------- can it run here?


def _probe(prov: Any, c: Claim) -> str | None:
    """What the provider itself says on a 1-token case (its Unsupported), or None."""
    from blockattn import providers as registry
    from blockattn.cases.inputs import build_inputs
    from blockattn.cases.spec import CaseSpec

    spec = CaseSpec(lengths=(1,), H=1, D=c.D, dtype=c.dtype, variant=c.variant, name="probe")
    try:
        prov.run(build_inputs(spec, "cpu"), c.variant)
    except registry.Unsupported as exc:
        return str(exc)
    except Exception:  # a crash on hardware it did not declare says nothing about the claim
        return None
    return None


def refusal(kernel: str, c: Claim, device: str, arch: str) -> str | None:
    """Why `kernel` cannot run claim `c` on this device (None: it declares it can).

    The provider's declared Supports decide; when they refuse, the provider's own Unsupported
    (e.g. "ads_model_kernel_library is not importable") is added to the reason."""
    from blockattn import providers as registry
    from blockattn.cases.spec import CaseSpec

    prov = registry.get(kernel)
    spec = CaseSpec(D=c.D, dtype=c.dtype, variant=c.variant, name="audit")
    why = prov.supports.refusal(spec, device, arch)
    if why is None:
        return None
    probe = _probe(prov, c)
    here = arch if device == "cuda" else "cpu"
    sup = prov.supports
    hardware = why.startswith(("declared devices", "declared GPU"))
    if hardware and (sup.archs or tuple(sup.devices) == ("cuda",)):
        need = "/".join(sup.archs) if sup.archs else "CUDA"
        lib = f" and the {kernel} kernel ({probe})" if probe else ""
        declared = why.split(", this is")[0].replace("declared", "declares", 1)
        return f"needs {need}{lib}; this is {here} ({kernel} {declared})"
    return f"{kernel} {why}" + (f"; {probe}" if probe else "")


# ----------------------------------------------------------------------------- accuracy


def fp32_reference(inp: Any, variant: str) -> dict[str, torch.Tensor]:
    """The claim authors' kind of reference: the eager padded-block math in float32.

    Built from `providers._common` (shares no code with the oracle or the kernels), on the
    case's inputs upcast to float32 (exact), TF32 off so the matmuls are IEEE fp32."""
    from blockattn.providers._common import eager_block_attention, run_autograd

    def up(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.to(torch.float32)

    inp32 = dataclasses.replace(
        inp, q=up(inp.q), k=up(inp.k), v=up(inp.v), grad_out=up(inp.grad_out),
        sinu_pos=up(inp.sinu_pos), x=up(inp.x), w=up(inp.w), bias=up(inp.bias),
    )  # fmt: skip
    prev = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        return run_autograd(inp32, variant, eager_block_attention)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = prev


def _chunks(*ts: torch.Tensor):
    flat = [t.detach().reshape(-1) for t in ts]
    n = flat[0].numel()
    for i in range(0, n, _CHUNK):
        yield [f[i : i + _CHUNK].to(torch.float64) for f in flat]


def _floor(ref: torch.Tensor, dtype: torch.dtype) -> float:
    m = 0.0
    for (r,) in _chunks(ref):
        m = max(m, float((r.to(dtype).to(torch.float64) - r).abs().max()))
    return m


def _compare(
    out: torch.Tensor, ref: torch.Tensor, ref32: torch.Tensor | None, tol_set: set
) -> dict[str, Any]:
    """FP64 max error; with ref32: FP32-reference max error, SNR dB and allclose ratios."""
    e64 = e32 = sig = noise = 0.0
    ac = {t: 0.0 for t in tol_set}
    bad = {t: 0 for t in tol_set}
    for chunk in _chunks(out, ref, *(() if ref32 is None else (ref32,))):
        y, r = chunk[0], chunk[1]
        e64 = max(e64, float((y - r).abs().max()))
        if ref32 is not None:
            r32 = chunk[2]
            d = (y - r32).abs()
            e32 = max(e32, float(d.max()))
            sig += float((r32 * r32).sum())
            noise += float((d * d).sum())
            for t in tol_set:
                lim = t[1] + t[0] * r32.abs()
                ratio = torch.where(d == 0, 0.0, d / lim)  # 0/0 (zero tolerance): no excess
                ac[t] = max(ac[t], float(ratio.max()))
                bad[t] += int((d > lim).sum())
    res: dict[str, Any] = {"err": e64}
    if ref32 is not None:
        n = max(1, out.numel())
        snr = math.inf if noise == 0 else (-math.inf if sig == 0 else 10 * math.log10(sig / noise))
        res.update(err32=e32, snr_db=snr)
        res["allclose"] = {tol_key(t): {"ratio": ac[t], "mismatch_pct": 100.0 * bad[t] / n}
                           for t in tol_set}  # fmt: skip
    return res


def accuracy_config(
    key: tuple, providers: set[str], seed: int, device: str, tol_set: set | None = None
) -> dict[str, Any]:
    """One seed of one configuration: {"T", "oracle_s", "floor": {t: x}, "err": {provider:
    {t: {"err", "err32", "snr_db", "allclose"}} | NotRunnable}, "floor32", "ref32_err"}.

    With `tol_set` (a set of (rtol, atol)) the FP32 reference is built and compared too."""
    from blockattn import providers as registry
    from blockattn.cases.inputs import build_inputs
    from blockattn.cases.spec import CaseSpec
    from blockattn.run.oracle import oracle_outputs

    variant, D, dtype, B, max_len, sparsity, H, dist = key
    spec = CaseSpec(
        seed=seed, variant=variant, B=B, max_len=max_len, sparsity=sparsity, H=H, D=D,
        dtype=dtype, distribution=dist, source="adhoc", name="audit",
    )  # fmt: skip
    inp = build_inputs(spec, device)
    _sync()
    t0 = time.perf_counter()
    ref = oracle_outputs(inp)
    _sync()
    res: dict[str, Any] = {"T": inp.T, "oracle_s": time.perf_counter() - t0, "err": {}}
    res["floor"] = {t: _floor(r, spec.torch_dtype) for t, r in ref.items()}
    ref32 = None
    if tol_set is not None:
        ref32 = fp32_reference(dataclasses.replace(inp), variant)
        res["floor32"] = {t: _floor(r, spec.torch_dtype) for t, r in ref32.items()}
        # The FP32 reference's own error against the FP64 oracle (it is not exact either).
        res["ref32_err"] = {t: _compare(ref32[t], ref[t], None, set())["err"] for t in ref}
    for name in sorted(providers):
        try:
            out = registry.get(name).run(dataclasses.replace(inp), variant)
        except registry.Unsupported as exc:
            res["err"][name] = NotRunnable(f"{name}: {exc}")
            continue
        res["err"][name] = {
            t: _compare(out[t], ref[t], None if ref32 is None else ref32[t], tol_set or set())
            for t in ref
        }
        del out
    del ref, ref32, inp
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return res


def _errs(m: dict[str, Any], name: str) -> dict[str, dict[str, Any]]:
    e = m["err"][name]
    if isinstance(e, NotRunnable):
        raise e
    return e


def accuracy_value(c: Claim, m: dict[str, Any], kernel: str | None = None,
                   fp32: bool = False) -> float:  # fmt: skip
    """The claim's metric on `kernel` (default: the claim's), against the FP64 oracle or, with
    fp32=True, against the FP32 reference (floor32 for the rounding-floor metric)."""
    field, floor = ("err32", m.get("floor32")) if fp32 else ("err", m["floor"])
    mine = _errs(m, kernel or c.kernel)
    if c.metric == "ratio_to_rounding_floor":
        return max(_ratio(mine[t][field], floor[t]) for t in c.tensors)
    base = _errs(m, c.reference[0])
    return max(_ratio(mine[t][field], base[t][field]) for t in c.tensors)


def _ratio(a: float, b: float) -> float:
    if b == 0:
        return 0.0 if a == 0 else math.inf
    return a / b


def fp32_measures(c: Claim, m: dict[str, Any]) -> dict[str, Any]:
    """The FP32-reference measure of claim `c` on its kernel (and its reference provider)."""
    tk = tol_key(tols(c))
    mine = _errs(m, c.kernel)
    out: dict[str, Any] = {
        "value": accuracy_value(c, m, fp32=True),
        "snr_db": min(mine[t]["snr_db"] for t in c.tensors),
        "allclose_ratio": max(mine[t]["allclose"][tk]["ratio"] for t in c.tensors),
        "mismatch_pct": max(mine[t]["allclose"][tk]["mismatch_pct"] for t in c.tensors),
        "ref32_err_over_floor": max(_ratio(m["ref32_err"][t], m["floor"][t]) for t in c.tensors),
    }
    if c.reference:
        base = _errs(m, c.reference[0])
        out["snr_db_reference"] = min(base[t]["snr_db"] for t in c.tensors)
        out["allclose_ratio_reference"] = max(base[t]["allclose"][tk]["ratio"] for t in c.tensors)
    return out


# ----------------------------------------------------------------------------- speed


def timing_provider(kernel: str, variant: str) -> str:
    """The timed callable of `kernel` for `variant`: a bench provider, or "kernel:NAME" for a
    provider that carries an attention callable (outside kernels)."""
    from blockattn import providers as registry
    from blockattn.bench.entries import builtin_entries

    rot = variant == "rotary"
    name = f"{kernel}_rotary" if rot else kernel
    known = builtin_entries()
    if name in known and known[name].rotary == rot:
        return name
    if registry.get(kernel).kernel is not None:
        return f"kernel:{kernel}" + ("@rotary" if rot else "")
    raise NotRunnable(f"{kernel}: no timed callable here (no bench provider {name!r} and no "
                      "kernel callable)")  # fmt: skip


class SpeedSession:
    """Timings for one (D, dtype, shape, seed) bench case; providers prepared once each."""

    def __init__(self, key: tuple, seed: int, warmup_ms: float, rep_ms: float) -> None:
        from blockattn.bench.case import make_bench_case

        D, dtype, B, max_len, sparsity, H = key
        self.case = make_bench_case(
            "audit", B=B, max_len=max_len, sparsity=sparsity, H=H, D=D,
            dtype=getattr(torch, dtype), device=torch.device("cuda"), seed=seed,
        )  # fmt: skip
        self.warmup_ms, self.rep_ms = warmup_ms, rep_ms
        self.prepared: dict[str, Any] = {}
        self.ms: dict[tuple[str, str], float | NotRunnable] = {}

    def _prepare(self, provider: str) -> Any:
        from blockattn import providers as registry
        from blockattn.bench.entries import builtin_entries
        from blockattn.providers._timing import kernel_timing

        try:
            if provider.startswith("kernel:"):
                name = provider.split(":", 1)[1]
                rotary = provider.endswith("@rotary")
                name = name.removesuffix("@rotary")
                # The bench's own adapter: timed exactly as `blockattn bench` times it.
                return kernel_timing(registry.get(name), rotary).prepare(self.case)
            known = builtin_entries()
            if provider not in known:
                raise ValueError(f"unknown bench provider {provider!r}; known {sorted(known)}")
            return known[provider].prepare(self.case)
        except registry.Unsupported as exc:
            return NotRunnable(f"{provider}: {exc}")

    def time(self, provider: str, pas: str) -> float:
        from blockattn.bench import measure

        if (provider, pas) not in self.ms:
            if provider not in self.prepared:
                self.prepared[provider] = self._prepare(provider)
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


def speed_value(c: Claim, s: SpeedSession, ceiling_tbps: float | None,
                kernel: str | None = None) -> float:  # fmt: skip
    """The claim's speed metric on `kernel` (default: the claim's)."""
    from blockattn.bench.runner import pass_bytes

    name = timing_provider(kernel or c.kernel, c.variant)
    if name.startswith("kernel:") and c.variant == "rotary":
        name += "@rotary"
    ms = s.time(name, c.pass_)
    if c.metric == "speedup":
        # Fastest reference: the comparison most favourable to the baseline.
        return min(s.time(r, c.pass_) for r in c.reference) / ms
    assert ceiling_tbps is not None
    nbytes = pass_bytes(s.case, c.pass_, c.variant == "rotary")
    return 100.0 * nbytes / (ms * 1e-3) / (ceiling_tbps * 1e12)
