"""Timing a kernel that runs in the isolation worker, with a statistic it cannot reach.

The judge (here) times batches of calls with its own clock: it sends a batch (which input set
each call uses, drawn here per call from two sets of the same shapes and different data), waits
for the answer and stops its clock; it issues no GPU work meanwhile. The worker runs the batch
and ends it with a device-wide synchronise; its CUDA-event time comes back only as a
cross-check. Each batch also returns, gathered right after its calls on the caller's stream,
the rows of a few sequences drawn here for that batch from the last output of each input set;
the judge compares them with its own FP64 oracle. So a kernel that leaves work on a side stream,
returns a stale or cached buffer, or skips work fails the check or falls below the physical
floor (`measure.impossible`), and a patched timer in the worker changes nothing measured here.

`serve` is the worker's side (`blockattn.run.worker` calls it for "bench" requests).
"""

from __future__ import annotations

import contextlib
import math
import random
import statistics
import time
from typing import Any

import torch
from torch import Tensor

from blockattn.bench.case import GATED, BenchCase, check_bound, make_bench_case

KEYS = ("O", "dQ", "dK", "dV")
OUTPUT_KEYS = {"fwd": ("O",), "bwd": ("dQ", "dK", "dV"), "fwdbwd": ("dQ", "dK", "dV")}
DATA_SEED_2 = 7919  # the second input set: same lengths, other data
BATCHES = 5
BATCH_MS = 250.0  # each batch this long at least: the round trip stays well under 1 % of it
MAX_CALLS = 100_000  # a lookup of microseconds a call still fills a batch past its round trip


def case_params(case: BenchCase) -> dict[str, Any]:
    return {"name": case.name, "B": case.B, "max_len": case.max_len, "sparsity": case.sparsity,
            "H": case.H, "D": case.D, "dtype": str(case.dtype).removeprefix("torch."),
            "seed": case.seed, "sparsity_convention": case.sparsity_convention}  # fmt: skip


def _build(params: dict[str, Any], data_seed: int | None, device: Any) -> BenchCase:
    kw = {**params, "dtype": getattr(torch, params["dtype"])}
    name = kw.pop("name")
    return make_bench_case(name, device=device, data_seed=data_seed, **kw)


# ------------------------------------------------------------------ the judge's side


class IsolatedBench:
    """One bench entry of a provider hosted by the worker, on one bench case."""

    def __init__(self, sandbox: Any, provider: str, timing: str, case: BenchCase,
                 rotary: bool, n_seqs: int) -> None:  # fmt: skip
        self.sb, self.provider, self.timing = sandbox, provider, timing
        self.cases = [case, None]  # the judge's own copies of both input sets (2nd on demand)
        self.rotary, self.n_seqs = rotary, n_seqs
        self.rng = random.Random()  # not seeded from anything the worker sees
        self.notes: dict[str, str] = {}

    def _ask(self, msg: dict[str, Any], tensors: list[Tensor] = (), max_bytes: int = 1 << 34
             ) -> tuple[dict[str, Any], list[Tensor]]:  # fmt: skip
        header, outs = self.sb.ask({"op": "bench", **msg}, list(tensors), max_bytes,
                                   f"bench {self.timing}")  # fmt: skip
        if header.get("status") == "unsupported":
            from blockattn.providers import Unsupported

            raise Unsupported(str(header.get("reason")))
        if header.get("status") != "ok":
            raise RuntimeError(f"worker: {header.get('reason')}")
        return header, outs

    def prepare(self) -> None:
        header, _ = self._ask({"sub": "prepare", "provider": self.provider,
                               "timing": self.timing, "case": case_params(self.cases[0]),
                               "data_seeds": [None, DATA_SEED_2]})  # fmt: skip
        self.notes = {str(k): str(v) for k, v in (header.get("notes") or {}).items()}
        self.notes["timing"] = ("the judge's clock over batches in the worker (input sets "
                                "rotated per call, outputs spot-checked)")  # fmt: skip

    def case(self, i: int) -> BenchCase:
        if self.cases[i] is None:
            c0 = self.cases[0]
            self.cases[i] = _build(case_params(c0), DATA_SEED_2, c0.q.device)
        return self.cases[i]

    def _sample(self) -> tuple[Tensor, Tensor]:
        """Token rows and offsets of a few random non-empty sequences, drawn here."""
        from blockattn.cases.generate import offsets_from_lengths

        c = self.cases[0]
        off = c.offsets_cpu.to(torch.int64)
        lens = off[1:] - off[:-1]
        nz = [i for i in range(lens.numel()) if lens[i] > 0]
        pick = sorted(self.rng.sample(nz, min(self.n_seqs, len(nz))))
        idx = torch.cat([torch.arange(int(off[b]), int(off[b + 1])) for b in pick])
        return idx, offsets_from_lengths(lens[pick]).to(c.q.device)

    def _check(self, rows: dict[str, Tensor], s: int, idx: Tensor, off: Tensor) -> dict[str, Any]:
        import oracles

        c = self.case(s)
        dev = c.q.device
        i = idx.to(dev)
        q, k, v, do = (t.index_select(0, i) for t in (c.q, c.k, c.v, c.do))
        if self.rotary:
            sn = c.sinu.index_select(0, i)
            ref = {"O": oracles.rotary_block_attention(q, k, v, off, sn, scale=c.scale)}
            g = oracles.rotary_block_attention_backward(q, k, v, off, sn, do, scale=c.scale)
        else:
            ref = {"O": oracles.block_attention(q, k, v, off, scale=c.scale)}
            g = oracles.block_attention_backward(q, k, v, off, do, scale=c.scale)
        ref.update(zip(("dQ", "dK", "dV"), g, strict=True))
        res: dict[str, Any] = {"n_check_tokens": int(idx.numel())}
        ok = True
        for name, x in rows.items():
            r = ref[name]
            err = float(torch.linalg.vector_norm(x.to(dev, torch.float64) - r)) / max(
                float(torch.linalg.vector_norm(r)), 1e-300)  # fmt: skip
            res[f"relerr_{name}"] = err
            res[f"bound_{name}"] = check_bound(name, c.dtype)
            if name in GATED and not (math.isfinite(err) and err <= check_bound(name, c.dtype)):
                ok = False
        res["check"] = "pass" if ok else "fail"
        return res

    def check(self) -> dict[str, Any]:
        """Forward and backward once on each input set, checked on drawn sequences."""
        worst: dict[str, Any] = {"check": "pass"}
        for s in (0, 1):
            idx, off = self._sample()
            _, outs = self._ask({"sub": "outputs", "set": s}, [idx])
            res = self._check(dict(zip(KEYS, outs, strict=True)), s, idx, off)
            if res["check"] != "pass" or s == 0:
                worst = res
            if res["check"] != "pass":
                break
        return worst

    def time(self, pas: str, rep_ms: float, batches: int = BATCHES, smoke: bool = False
             ) -> tuple[float, dict[str, Any]]:  # fmt: skip
        """Median ms per call over `batches` batches on the judge's clock, and the batches'
        spot checks (a failing one names itself). `smoke` (the CPU structure run, whose
        numbers mean nothing): no warm-up or size estimate, two calls a batch."""
        n = 2
        if not smoke:
            idx, off = self._sample()
            self._ask({"sub": "time", "pass": pas, "seq": [0, 1]}, [idx])  # warm-up (JIT builds)
            n = self._calls_per_batch(pas, max(rep_ms, BATCH_MS))
        per_call, events = [], []
        info: dict[str, Any] = {"check": "pass"}
        for _ in range(batches):
            seq = [self.rng.randrange(2) for _ in range(n)]
            seq[self.rng.randrange(n)] = 1 - seq[0]  # both sets in every batch
            idx, off = self._sample()
            t0 = time.perf_counter()
            header, _ = self._ask({"sub": "time", "pass": pas, "seq": seq}, [idx])
            per_call.append((time.perf_counter() - t0) * 1e3 / n)
            # the rows were gathered before the batch's synchronise; fetched off the clock
            _, rows = self._ask({"sub": "rows"})
            if header.get("event_ms") is not None:
                events.append(float(header["event_ms"]) / n)
            keys = OUTPUT_KEYS[pas]
            for j, s in enumerate(header.get("sets") or []):
                part = dict(zip(keys, rows[j * len(keys):(j + 1) * len(keys)], strict=True))
                res = self._check(part, int(s), idx, off)
                if res["check"] != "pass":
                    info = {**res, "check": "fail", "timed_check": "the outputs of timed calls "
                            "differ from the oracle (work in flight, stale or cached output)"}
        ms = statistics.median(per_call)
        info["calls_per_batch"] = n
        if events:
            info["worker_event_ms"] = statistics.median(events)
        return ms, info

    def _calls_per_batch(self, pas: str, batch_ms: float) -> int:
        """Calls a batch needs to last `batch_ms` on the judge's clock, grown from 4 until one
        batch does. Estimating it from one short batch would count the round trip (tens of ms
        on a loaded host) as call time: a replayed or skipped call of microseconds would get a
        few calls a batch and a per-call time above the physical floor."""
        n = 4
        while True:
            idx, _ = self._sample()
            t0 = time.perf_counter()
            self._ask({"sub": "time", "pass": pas, "seq": [i % 2 for i in range(n)]}, [idx])
            took = (time.perf_counter() - t0) * 1e3
            if took >= batch_ms or n >= MAX_CALLS:
                return n
            n = min(MAX_CALLS, max(math.ceil(n * 1.25), math.ceil(n * batch_ms * 1.1 / took)))

    def release(self) -> None:
        with contextlib.suppress(Exception):  # the worker may be gone: nothing to release
            self._ask({"sub": "release"})


# ------------------------------------------------------------------ the worker's side


def _flat(x: Any) -> list[Tensor]:
    if isinstance(x, Tensor):
        return [x]
    return [t for t in x if isinstance(t, Tensor)]


def serve(msg: dict[str, Any], tensors: list[Tensor], provs: dict[str, Any]
          ) -> tuple[dict[str, Any], list[Tensor]]:  # fmt: skip
    from blockattn.providers import Unsupported, timings_of

    state = msg["state"]
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    sub = msg["sub"]
    if sub == "prepare":
        state.pop("bench", None)
        prov = provs[msg["provider"]]
        timing = next((t for t in timings_of(prov) if t.name == msg["timing"]), None)
        if timing is None:
            return {"status": "error", "reason": f"no bench entry {msg['timing']!r}"}, []
        try:
            cases = [_build(msg["case"], s, dev) for s in msg["data_seeds"]]
            prepared = [timing.prepare(c) for c in cases]
        except Unsupported as exc:
            return {"status": "unsupported", "reason": str(exc)}, []
        state["bench"] = {"prepared": prepared, "cases": cases}
        return {"status": "ok", "notes": prepared[0].notes}, []
    if sub == "release":
        state.pop("bench", None)
        if dev == "cuda":
            torch.cuda.empty_cache()
        return {"status": "ok"}, []
    if sub == "rows":  # what the last "time" gathered, sent after the judge stopped its clock
        return {"status": "ok"}, state["bench"].pop("rows", [])
    prepared = state["bench"]["prepared"]
    idx = tensors[0].to(dev)
    if sub == "outputs":
        p = prepared[msg["set"]]
        outs = [p.fwd(), *p.bwd()]
        rows = [t.index_select(0, idx) for t in outs]
        sync()
        return {"status": "ok"}, rows
    # "time": the calls, the rows of each set's last output gathered on this stream right
    # after them, one device-wide synchronise
    fns = [getattr(p, msg["pass"]) for p in prepared]
    sync()
    ev = None
    if dev == "cuda":
        ev = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        ev[0].record()
    last: dict[int, Any] = {}
    for s in msg["seq"]:
        last[s] = fns[s]()
    if ev is not None:
        ev[1].record()
    sets = sorted(last)
    rows = [t.index_select(0, idx) for s in sets for t in _flat(last[s])]
    sync()
    state["bench"]["rows"] = rows
    header = {"status": "ok", "sets": sets,
              "event_ms": ev[0].elapsed_time(ev[1]) if ev is not None else None}  # fmt: skip
    return header, []
