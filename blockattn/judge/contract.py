"""The contract battery: what a kernel promises besides its numbers, judged on its own arguments.

For a provider with a kernel callable (`block_attention`'s signature: outside kernels, and the
built-in `blockattn`), each probe of `blockattn.cases.contract` is handed to the callable as it
is (no clone, no `.contiguous()`), forward and backward through autograd. The properties, each a
formula with its reason:

- inputs-untouched: every input buffer (the views and the NaN memory around them) is bitwise the
  same after the call. A kernel must never write to its caller's tensors.
- output-contract: O, dQ, dK, dV have the inputs' shape and dtype and share no memory with any
  input (an output aliasing an input is overwritten by the caller's next write).
- containment: with NaN, +Inf and -Inf in rows of q, k, v and grad_out (head 0 of one block of
  the first, a middle or the last sequence; sinu_pos too, on a rotary probe), every output
  element outside that block and head (every head, for sinu_pos) is bitwise equal to the clean
  run (deterministic providers; each block of each head is computed from its own rows only),
  else finite and equal to the clean run within torch.testing's default tolerance for the
  dtype. A leak is reported by where it lands: before, inside or after the poisoned sequence.
  Memory past each input's end is NaN in every probe, so a read past the end fails the numbers
  below too.
- layout, block-size, scale, option, degenerate: the outputs are judged against the FP64
  oracle, element by
  element, by the provider's accuracy model (the tolerance file's rule for it): NaN/Inf where the
  oracle is finite, or more bound violations than the rule allows, fails. A layout or block size
  the provider declares it does not take is "unsupported (declared)"; an exception on one it
  did not declare away fails.
- determinism: repeats of forward + backward are bitwise equal; required where the provider
  declares `Supports(deterministic=True)`, measured (reported, never failed) otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor

from blockattn.cases import contract as C
from blockattn.judge import metrics
from blockattn.run.calls import call_on_side_stream, call_probe

PROPERTIES = ("inputs-untouched", "output-contract", "containment", "layout", "block-size",
              "scale", "option", "degenerate", "streams", "determinism")  # fmt: skip
DTYPES = ("bfloat16", "float16", "float32")  # the battery's first declared one is its default
KEYS = ("O", "dQ", "dK", "dV")


@dataclass
class Check:
    prop: str
    probe: str
    status: str  # "pass" | "FAIL" | "unsupported" | "measured"
    detail: str = ""
    replay: str = ""  # the command re-running this probe alone (failing checks)

    def to_dict(self) -> dict[str, str]:
        d = {"property": self.prop, "probe": self.probe, "status": self.status,
             "detail": self.detail}  # fmt: skip
        return {**d, "replay": self.replay} if self.replay else d


_INTS = {2: torch.int16, 4: torch.int32, 8: torch.int64, 1: torch.uint8}


def _bits(t: Tensor) -> Tensor:
    """A bitwise-comparable copy (NaN == NaN of the same payload)."""
    return t.detach().clone().view(_INTS[t.element_size()])


def _as_bits(t: Tensor) -> Tensor:
    """`t`'s bits for a comparison, without a copy where `t` is dense."""
    return t.detach().contiguous().view(_INTS[t.element_size()])


def _inputs_of(p: C.Probe) -> dict[str, Tensor]:
    named = {**p.buffers, "offsets": p.offsets}
    if p.sinu_pos is not None and "sinu_pos" not in named:
        named["sinu_pos"] = p.sinu_pos
    return named


def _storages(p: C.Probe) -> list[tuple[int, int]]:
    spans = []
    for t in _inputs_of(p).values():
        st = t.untyped_storage()
        spans.append((st.data_ptr(), st.data_ptr() + st.nbytes()))
    return spans


class Battery:
    """Runs the probes on one provider's kernel callable and collects `Check`s."""

    def __init__(self, prov: Any, tol: Any, device: str, repeats: int | None = None,
                 only: str | None = None, caller: Any = None) -> None:  # fmt: skip
        self.prov, self.tol, self.device, self.only = prov, tol, device, only
        # How a probe reaches the kernel: `caller(p, streams=False) -> outputs`. In-process by
        # default; the isolated judge passes a worker's (blockattn.isolation), so the kernel
        # never runs in the process that judges it.
        self.caller = caller
        sup = prov.supports
        self.dtype_name = next((d for d in DTYPES if d in sup.dtypes), sup.dtypes[0])
        self.dtype = getattr(torch, self.dtype_name)
        self.D = 64 if sup.head_dims is None or 64 in sup.head_dims else sup.head_dims[0]
        # the declared dtypes and head dims besides the default: mixed layouts run at each
        self.other_dtypes = [getattr(torch, d) for d in DTYPES
                             if d in sup.dtypes and d != self.dtype_name]  # fmt: skip
        self.other_dims = [d for d in (sup.head_dims or (64, 128)) if d != self.D][:1]
        self.repeats = repeats or (20 if device == "cuda" else 3)
        self.checks: list[Check] = []
        self.model = None
        self.max_violations = 0
        if tol is not None:
            self.model = tol.model_for(prov.name, prov.accuracy_model, prov.reference)
            rule, _ = tol.rule_for(prov.name, prov.accuracy_model, prov.reference)
            if rule is not None:
                self.max_violations = int(rule.get("max_violations", 0))

    # ------------------------------------------------------------------ helpers

    def wanted(self, prop: str, name: str) -> bool:
        """`--only`: a property or a probe name (or its prefix); None runs every probe."""
        o = self.only
        return o is None or o == prop or name == o or name.startswith(o + "-") or o == "all"

    def call(self, p: C.Probe, streams: bool = False) -> dict[str, Tensor]:
        """Hand probe `p` to the kernel (forward and backward); its outputs."""
        if self.caller is not None:
            return self.caller(p, streams=streams)
        if self.prov.worker is not None:  # isolated: the kernel runs in the judge's worker
            return self.prov.worker.call_probe(self.prov, p, streams=streams)
        if streams:
            return call_on_side_stream(self.prov.kernel, p)
        return call_probe(self.prov.kernel, p)

    def send(self, p: C.Probe) -> Any:
        """Hand `p` to the kernel now; the returned function gives its outputs or raises. In a
        worker the call runs while the judge computes the probe's oracle; in-process (or
        through a `caller`) it has run before this returns."""
        if self.caller is None and self.prov.worker is not None:
            collect = self.prov.worker.send_probe(self.prov, p)
            return lambda: collect()[0]
        try:
            out = self.call(p)
        except Exception as exc:  # raised when its outputs are asked for, as from a worker
            return _raiser(exc)
        return lambda: out

    def repeat_calls(self, p: C.Probe, n: int) -> list[dict[str, Tensor]]:
        """`n` more calls on `p`: in a worker, one trip whose outputs all come back (sending the
        inputs once instead of n times is most of an isolated battery's cost on a GPU)."""
        if self.caller is None and self.prov.worker is not None:
            return self.prov.worker.call_repeats(self.prov, p, n) if n > 0 else []
        return [self.call(p) for _ in range(n)]

    def add(self, prop: str, probe: str, ok: bool | None, detail: str = "") -> None:
        status = "measured" if ok is None else ("pass" if ok else "FAIL")
        self.checks.append(Check(prop, probe, status, detail))

    def _refusal(self, p: C.Probe, layout: str | None = None) -> str | None:
        sup = self.prov.supports
        layout = layout or p.layout
        spec = SimpleNamespace(variant="rotary" if p.sinu_pos is not None else "plain",
                               dtype=_dtype_name(p.q.dtype), D=int(p.q.shape[2]),
                               H=int(p.q.shape[1]), kvheads=None, scale=p.scale,
                               rotate_v=p.rotate_v)  # fmt: skip
        arch = "cpu"
        if self.device == "cuda":
            major, minor = torch.cuda.get_device_capability()
            arch = f"sm_{major}{minor}"
        why = sup.refusal(spec, self.device, arch, p.block_size)
        if why is None and sup.layouts is not None and layout not in sup.layouts:
            why = f"declared layouts {list(sup.layouts)}, probe uses {layout}"
        return why

    def run_probe(self, p: C.Probe) -> dict[str, Tensor] | None:
        """Call the kernel on `p`; check inputs-untouched and output-contract on the way.
        None (and a FAIL check) when the call raised."""
        return self.finish_probe(p, *self.start_probe(p))

    def start_probe(self, p: C.Probe) -> tuple[dict[str, Tensor], Any]:
        """(the inputs' bits before the call, the call's collector): `finish_probe` ends it."""
        before = {n: _bits(t) for n, t in _inputs_of(p).items()}
        try:
            collect = self.send(p)
        except Exception as exc:
            collect = _raiser(exc)
        return before, collect

    def finish_probe(self, p: C.Probe, before: dict[str, Tensor],
                     collect: Any) -> dict[str, Tensor] | None:  # fmt: skip
        try:
            out = collect()
        except Exception as exc:  # any refusal the provider did not declare is a failure
            self.add(p.prop, p.name, False, f"raised {type(exc).__name__}: {str(exc)[:200]}")
            return None
        changed = [n for n, t in _inputs_of(p).items() if not torch.equal(_bits(t), before[n])]
        self.add("inputs-untouched", p.name, not changed,
                 f"the call wrote to its input(s) {changed}" if changed else "")  # fmt: skip
        bad = []
        spans = _storages(p)
        for key, t in out.items():
            if tuple(t.shape) != tuple(p.q.shape) or t.dtype != p.q.dtype:
                bad.append(f"{key} is {tuple(t.shape)} {t.dtype}, expected "
                           f"{tuple(p.q.shape)} {p.q.dtype}")  # fmt: skip
            elif t.numel():
                lo = t.untyped_storage().data_ptr()
                if any(a <= lo < b for a, b in spans):
                    bad.append(f"{key} aliases an input's memory")
        self.add("output-contract", p.name, not bad, "; ".join(bad))
        return out

    def reference(self, p: C.Probe) -> Any:
        """What `compare` judges outputs by: the oracle's outputs, the model's bounds and the
        token map of `p` (None for an empty probe). `p` holds the inputs as they were before the
        call (a kernel may have written to them)."""
        import oracles
        from blockattn.bounds.elementwise import TokenMap
        from oracles import error_bound

        if p.T == 0:
            return None
        q, k, v, do = (x.detach().contiguous() for x in (p.q, p.k, p.v, p.grad_out))
        kw = {"block_size": p.block_size, "scale": p.scale}
        if p.sinu_pos is None:
            o = oracles.block_attention(q, k, v, p.offsets, **kw)
            grads = oracles.block_attention_backward(q, k, v, p.offsets, do, **kw)
        else:
            s = p.sinu_pos.contiguous()
            o = oracles.rotary_block_attention(q, k, v, p.offsets, s, rotate_v=p.rotate_v, **kw)
            grads = oracles.rotary_block_attention_backward(q, k, v, p.offsets, s, do,
                                                            rotate_v=p.rotate_v, **kw)  # fmt: skip
        ref = dict(zip(KEYS, (o, *grads), strict=True))
        bounds = None
        dtype_name = _dtype_name(p.q.dtype)
        if self.model is not None:
            (bounds,) = error_bound.attention_error_bounds(
                q, k, v, p.offsets, do, sinu_pos=p.sinu_pos, rotate_v=p.rotate_v,
                models=[self.model.resolve(dtype_name)], **kw,
            )  # fmt: skip
        return ref, bounds, TokenMap(p.offsets, p.T, p.block_size, ref["O"].device), dtype_name

    def compare(self, reference: Any, out: dict[str, Tensor]) -> str:
        """'' when every output meets the oracle by the provider's model, else why not."""
        if reference is None:
            return ""
        ref, bounds, tmap, dtype_name = reference
        why = []
        for key in KEYS:
            m = metrics.tensor_metrics(out[key], ref[key], dtype_name, model=self.model,
                                       bound=None if bounds is None else bounds[key],
                                       tmap=tmap)  # fmt: skip
            if m.get("nonfinite_bad"):
                why.append(f"{key}: {m['nonfinite_bad']} NaN/Inf where the oracle is finite")
            b = m.get("bound")
            if b and b["violations"] > self.max_violations:
                worst = b.get("max_ratio")
                worst = "non-finite" if worst is None else f"{worst:.3g}"
                why.append(f"{key}: {b['violations']} elements beyond the {self.model.name} "
                           f"bound (max err/bound {worst})")  # fmt: skip
        return "; ".join(why)

    # ------------------------------------------------------------------ properties

    def numeric(self, p: C.Probe, layout: str | None = None, declared: str | None = None,
                force: bool = False) -> dict[str, Tensor] | None:  # fmt: skip
        """Judge `p` against the oracle; its outputs (None when not run). `force` runs it even
        when `--only` names another probe (it is that probe's clean run)."""
        if not (force or self.wanted(p.prop, p.name)):
            return None
        why = declared or self._refusal(p, layout)
        if why is not None:
            self.checks.append(Check(p.prop, p.name, "unsupported", why))
            return None
        pristine = replace(p, q=p.q.clone(), k=p.k.clone(), v=p.v.clone(),
                           grad_out=p.grad_out.clone(), offsets=p.offsets.clone(),
                           sinu_pos=None if p.sinu_pos is None else p.sinu_pos.clone())
        started = self.start_probe(p)
        reference = self.reference(pristine)  # while a worker runs the call
        out = self.finish_probe(p, *started)
        if out is not None:
            why = self.compare(reference, out)
            self.add(p.prop, p.name, not why, why or p.note)
        return out

    def containment(self, clean_t: dict[str, Any], clean: dict[str, Tensor] | None = None,
                    rotary_t: dict[str, Any] | None = None,
                    rotary_clean: dict[str, Tensor] | None = None) -> None:  # fmt: skip
        """The poisoned probes of `clean_t` (and, with `rotary_t`, one rotary probe whose
        sinu_pos is poisoned too) against their clean runs: `clean` / `rotary_clean` when the
        caller already has them (the padded layout probes: same values, same memory), else run
        here."""
        groups = [(C.containment_probes(clean_t), clean_t, clean)]
        if rotary_t is not None:
            groups.append(([C.poisoned(rotary_t, "middle", sinu=True)], rotary_t, rotary_clean))
        det = self.prov.supports.deterministic
        for probes, t, ref in groups:
            probes = [p for p in probes if self.wanted(p.prop, p.name)]
            if not probes:
                continue
            if self._refusal(probes[0]) is not None:
                self.checks.append(Check("containment", probes[0].name, "unsupported",
                                         self._refusal(probes[0]) or ""))  # fmt: skip
                continue
            if ref is None:
                clean_p = C.layout_probe(t, "padded")
                ref = self.run_probe(replace(clean_p, name="containment-clean" + (
                    "-rotary" if t["sinu_pos"] is not None else ""), prop="containment"))
            if ref is None:
                continue
            for p in probes:
                out = self.run_probe(p)
                if out is not None:
                    why = _leaks(p, out, ref, det)
                    self.add("containment", p.name, not why,
                             "; ".join(why) + f" [{p.note}]" if why else p.note)  # fmt: skip

    def streams(self, clean_t: dict[str, Any]) -> None:
        """GPU: the inputs are written on a side stream behind a sleep, and the kernel is called
        on that stream with no synchronisation first. A kernel that launches on another stream
        (or reads its inputs before the stream's earlier work is done) sees the stale NaN."""
        if self.device != "cuda" or not self.wanted("streams", "streams"):
            return
        clean = self.run_probe(replace(C.layout_probe(clean_t, "padded"), name="streams-clean",
                                       prop="streams"))  # fmt: skip
        if clean is None:
            return
        p = replace(C.layout_probe(clean_t, "padded"), name="streams", prop="streams",
                    offsets=clean_t["offsets"].clone())  # its own: zeroed by the caller
        try:
            out = self.call(p, streams=True)
        except Exception as exc:
            self.add("streams", p.name, False, f"raised {type(exc).__name__}: {exc}"[:200])
            return
        det = self.prov.supports.deterministic
        why = []
        for key in KEYS:
            if m := _mismatch(out[key], clean[key], det):
                why.append(f"{key}: {m} from the run on the default stream")
        self.add("streams", p.name, not why, "; ".join(why))

    def determinism(self, first: dict[str, Tensor] | None = None) -> None:
        """Repeats of forward + backward, bitwise. On a CPU the case is the padded layout
        probe's, so `first` (that probe's outputs, when the caller has them) saves a call."""
        if not self.wanted("determinism", "determinism"):
            return
        sms = 0
        if self.device == "cuda":
            sms = torch.cuda.get_device_properties(0).multi_processor_count
            first = None  # the GPU case is its own (several tiles per SM)
        p = C.determinism_case(self.dtype, self.D, self.device, sms)
        why = self._refusal(p)
        if why is not None:
            self.checks.append(Check("determinism", p.name, "unsupported", why))
            return
        if first is None:
            first = self.run_probe(p)
        if first is None:
            return
        differ, which = 0, []
        repeats = self.repeat_calls(p, self.repeats - 1)
        # the first call's bits, moved once to where the repeats arrived (the judge's memory)
        ref = {k: _as_bits(first[k]).to(repeats[0][k].device) for k in KEYS} if repeats else {}
        for again in repeats:
            d = [k for k in KEYS if not torch.equal(ref[k], _as_bits(again[k]))]
            differ += bool(d)
            which += [k for k in d if k not in which]
        name = f"{p.name}-x{self.repeats}"
        detail = (f"{differ} of {self.repeats - 1} repeats differ bitwise from the first"
                  + (f" (in {', '.join(which)})" if which else ""))  # fmt: skip
        declared = self.prov.supports.deterministic
        self.add("determinism", name, (differ == 0) if declared else None,
                 detail if differ or not declared else "")  # fmt: skip

    def run(self) -> list[Check]:
        if self.prov.kernel is None:
            self.checks.append(Check("all", "-", "unsupported",
                                     f"{self.prov.name} has no kernel callable to call directly"))
            return self.checks
        t = C.base(self.dtype, self.D, self.device)
        why = self._refusal(C.layout_probe(t, "padded"))
        if why is not None:  # not installed, another device or architecture: nothing to call
            self.checks.append(Check("all", "-", "unsupported", why))
            return self.checks
        sup = self.prov.supports
        # Layouts (H = 2): the padded probe's outputs are containment's clean run (same values,
        # same memory), so it costs no extra call.
        clean = self.numeric(C.layout_probe(t, "padded"))
        # the strided layouts on a batch of two blocks per head (half the calls' tiles)
        ts = C.base(self.dtype, self.D, self.device, seed=6, lengths=C.SHORT_LENGTHS,
                    rotary=sup.rotary)  # fmt: skip
        for layout in C.LAYOUT_KINDS:
            if layout not in ("padded", "sinu-strided"):
                self.numeric(C.layout_probe(replace_sinu(ts, None), layout))
        tr = rclean = None
        if sup.rotary:
            tr = C.base(self.dtype, self.D, self.device, rotary=True)
            rclean = self.numeric(replace(C.layout_probe(tr, "padded"),
                                          name="layout-rotary-padded"))  # fmt: skip
            self.numeric(C.layout_probe(ts, "sinu-strided"))
        # each other declared dtype and head dim: the mixed layouts (one call per dtype)
        for dt in self.other_dtypes:
            td = C.base(dt, self.D, self.device, seed=1, lengths=C.SHORT_LENGTHS)
            self.numeric(replace(C.layout_probe(td, "mixed-1"),
                                 name=f"layout-mixed-1-{_dtype_name(dt)}"))  # fmt: skip
        for D in self.other_dims:
            tD = C.base(self.dtype, D, self.device, seed=2, lengths=C.SHORT_LENGTHS)
            for layout in ("grad-out-transposed", "mixed-3"):
                self.numeric(replace(C.layout_probe(tD, layout), name=f"layout-{layout}-d{D}"))
        # Block sizes, options: one head (what they vary is not per head; half the cost). 64
        # is the "padded" layout probe above; sizes below 16 on the short batch.
        t1 = C.base(self.dtype, self.D, self.device, H=1)
        small = C.base(self.dtype, self.D, self.device, seed=4, lengths=C.SMALL_LENGTHS, H=1)
        sizes = [bs for bs in sup.block_sizes or C.BLOCK_SIZES_ANY if bs != 64]
        for p in C.block_size_probes(t1, tuple(sizes), small):
            self.numeric(p)
        for rotary in (False, True) if sup.rotary else (False,):
            for p in C.scale_probes(self.dtype, self.D, self.device, rotary):
                self.numeric(p)
        for p, why in C.option_probes(t1, sup.offsets_dtypes, sup.max_seq_len, sup.nested):
            self.numeric(p, declared=why)
        for p in C.degenerate_probes(self.dtype, self.D, self.device):
            self.numeric(p)
        self.containment(t, clean, tr, rclean)
        self.streams(t)
        self.determinism(clean)
        if self.only is not None and not self.checks:
            raise ValueError(f"--only {self.only!r} matches no probe or property of the battery "
                             f"(properties: {', '.join(PROPERTIES)})")  # fmt: skip
        return self.checks


def replace_sinu(t: dict[str, Any], sinu_pos: Tensor | None) -> dict[str, Any]:
    return {**t, "sinu_pos": sinu_pos}


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


REGIONS = ("before", "inside", "after")  # where a leak lands, relative to the poisoned sequence


def _leaks(p: C.Probe, out: dict[str, Tensor], ref: dict[str, Tensor], det: bool) -> list[str]:
    """Containment of probe `p`: every element of every output outside `p.affected` (the
    poisoned block's head, or every head where sinu_pos is poisoned) must equal the clean run
    `ref` (bitwise for a deterministic provider, else finite and close). Why not, per output,
    with where the changed elements lie: before, inside (another block or head) or after the
    poisoned sequence."""
    a, b = p.poisoned
    pos = torch.arange(p.T, device=p.q.device)
    where = {"before": pos < a, "inside": (pos >= a) & (pos < b), "after": pos >= b}
    checked = ~p.affected[:, :, None]  # (T, H, 1): the elements that must not change
    why = []
    for key in KEYS:
        x, y = out[key], ref[key]
        if det:
            changed = _bits(x) != _bits(y)
        else:
            changed = ~torch.isclose(x.float(), y.float(), **_tol(x.dtype))
        changed = changed & checked
        n = int(changed.sum())
        if n:
            nonfinite = int((~torch.isfinite(x) & checked).sum())
            at = ", ".join(f"{int(changed[m].sum())} {r}" for r, m in where.items()
                           if bool(changed[m].any()))  # fmt: skip
            why.append(f"{key}: {n} elements changed outside the poisoned block and head "
                       f"({nonfinite} NaN/Inf; {at} the poisoned sequence)")  # fmt: skip
    return why


def _mismatch(x: Tensor, y: Tensor, det: bool) -> str:
    """'' when x matches the reference run y, else how not: bitwise for a provider that
    declares determinism, within torch.testing's default tolerance for the others."""
    if det:
        n = int((_bits(x) != _bits(y)).sum())
        return f"{n} elements differ bitwise" if n else ""
    ok = torch.allclose(x.float(), y.float(), **_tol(x.dtype))
    return "" if ok else "differs beyond torch.testing's default tolerance"


def _tol(dtype: torch.dtype) -> dict[str, float]:
    # torch.testing.assert_close's defaults for the dtype
    return {torch.bfloat16: {"rtol": 1.6e-2, "atol": 1e-5}, torch.float16: {"rtol": 1e-3,
            "atol": 1e-5}}.get(dtype, {"rtol": 1.3e-6, "atol": 1e-5})  # fmt: skip


def run_battery(prov: Any, tol: Any, device: str, repeats: int | None = None,
                only: str | None = None, caller: Any = None) -> list[Check]:  # fmt: skip
    """Every check of the battery for `prov` (a `blockattn.providers.Provider`); `only` keeps
    one property or probe (the replay of a violation)."""
    return Battery(prov, tol, device, repeats, only, caller).run()


def failures(checks: list[Check]) -> list[Check]:
    return [c for c in checks if c.status == "FAIL"]


def judged(checks: list[Check]) -> bool:
    """Whether the battery judged anything (a provider unavailable here has only unsupported)."""
    return any(c.status in ("pass", "FAIL") for c in checks)


def markdown(checks: list[Check], provider: str, replay: str | None = None) -> str:
    """The battery's section of a summary: one row per property, then every failing check."""
    fails = failures(checks)
    if not judged(checks):
        title = "⚠️ nothing judged (every check unsupported; see below)"
    else:
        title = f"{'❌' if fails else '✅'} {len(fails)} violation(s) in {len(checks)} checks"
    lines = [f"### Contract battery for `{provider}`: {title}", "",
             "| property | pass | FAIL | unsupported | measured |",
             "|---|---:|---:|---:|---:|"]  # fmt: skip
    for prop in (*PROPERTIES, "all"):
        mine = [c for c in checks if c.prop == prop]
        if mine:
            n = {s: sum(c.status == s for c in mine) for s in ("pass", "FAIL", "unsupported",
                                                                 "measured")}  # fmt: skip
            lines.append(f"| {prop} | {n['pass']} | {n['FAIL']} | {n['unsupported']} | "
                         f"{n['measured']} |")  # fmt: skip
    for c in fails[:40]:
        lines.append(f"- ❌ contract violated: {c.prop} ({c.probe}): {c.detail}")
        if c.replay:
            lines.append(f"  - replay: `{c.replay}`")
    for c in checks:
        if c.status in ("measured", "unsupported") and c.detail:
            lines.append(f"- {c.status}: {c.prop} ({c.probe}): {c.detail}")
    if fails and replay:
        lines.append(f"- the whole battery: `{replay}`")
    return "\n".join(lines)


def _raiser(exc: BaseException) -> Any:
    def again() -> Any:
        raise exc

    return again
