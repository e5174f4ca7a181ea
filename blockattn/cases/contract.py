"""The contract battery's probes: small seeded cases that reach a kernel's own arguments with the
layouts, options, poisons and degenerate batches its contract promises to take.

Every probe's tensors are views of larger buffers whose memory past the view is NaN, so a kernel
that reads past an input's end shows it. Nothing here is cloned or made contiguous on the way to
the kernel: the probe hands the kernel exactly these views (`blockattn.judge.contract` runs them).

One head, about 130 tokens (`LENGTHS`: three sequences with empty ones between, the middle one
spanning two 64-token blocks), so the whole battery costs a few dozen small calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor

from blockattn.cases.generate import make_case, offsets_from_lengths

LENGTHS = (0, 37, 0, 66, 0, 27)  # 130 tokens; empty sequences first, between and last
SEQUENCES = {"first": 1, "middle": 3, "last": 5}  # index into LENGTHS of each poisoned sequence
# Block sizes judged for a provider that declares any: 1, a non-power of two, the default and
# MAX_BLOCK_SIZE (128), each cutting the sequences differently.
BLOCK_SIZES_ANY = (1, 24, 64, 128)
# name -> what the view is. "padded" (NaN past the end) is what every other probe uses too.
LAYOUTS = {
    "padded": "q, k, v, grad_out each a view of a larger buffer that is NaN past its end",
    "storage-offset": "q, k, v start at a non-zero storage offset of a NaN-filled buffer",
    "qkv-packed": "q, k, v sliced from one packed (T, 3H, D) tensor: token stride 3HD",
    "head-strided": "q, k, v every other head of a (T, 2H, D) buffer: head stride 2D",
    "grad-out-transposed": "grad_out stored (H, T, D) and viewed as (T, H, D): not contiguous",
    "sinu-strided": "sinu_pos the left half of a (T, 2D) buffer: row stride 2D (rotary)",
}
POISONS = (float("nan"), float("inf"), float("-inf"))
MSL_LENGTHS = (66, 65, 130)  # the max_seq_len probes' batch (see option_probes)
PAD = 128  # rows of NaN past every buffer's end: a whole block read past the end sees NaN


@dataclass
class Probe:
    """One call of the kernel: forward on (q, k, v), backward with grad_out."""

    name: str  # readable id, e.g. "containment-nan-q-last", "layout-qkv-packed"
    prop: str  # the property it checks: containment, layout, block-size, degenerate, ...
    q: Tensor
    k: Tensor
    v: Tensor
    grad_out: Tensor
    offsets: Tensor
    sinu_pos: Tensor | None
    block_size: int = 64
    scale: float = 0.125
    rotate_v: bool = True
    poisoned: tuple[int, int] | None = None  # token range [start, end) of the poisoned sequence
    buffers: dict[str, Tensor] = field(default_factory=dict)  # the views' base buffers
    max_seq_len: int | None = None  # passed as `max_seq_len=` only when set
    nested: bool = False  # q, k, v, grad_out handed over as torch.nested jagged tensors
    note: str = ""  # what the probe holds, for the report (e.g. where the poisons are)

    @property
    def T(self) -> int:
        return int(self.q.shape[0])


def _padded(t: Tensor, offset: int = 0) -> tuple[Tensor, Tensor]:
    """(view, buffer): t copied into a NaN buffer at `offset` rows, PAD rows of NaN after it."""
    buf = torch.full((offset + t.shape[0] + PAD, *t.shape[1:]), float("nan"), dtype=t.dtype,
                     device=t.device)  # fmt: skip
    buf[offset : offset + t.shape[0]] = t
    return buf[offset : offset + t.shape[0]], buf


def base(dtype: torch.dtype, D: int, device: str, seed: int = 0, lengths=LENGTHS,
         rotary: bool = False) -> dict[str, Any]:  # fmt: skip
    """Clean contiguous tensors of a probe case (H = 1), seeded, never all-zero."""
    c = make_case(lengths=list(lengths), H=1, D=D, dtype=dtype, device=device, seed=seed)
    offsets = offsets_from_lengths(list(lengths)).to(device)
    return {"q": c.q, "k": c.k, "v": c.v, "grad_out": c.grad_out, "offsets": offsets,
            "sinu_pos": c.sinu_pos if rotary else None, "scale": D**-0.5}  # fmt: skip


def layout_probe(t: dict[str, Any], layout: str) -> Probe:
    """The clean case `t` handed over in `layout` (values equal, memory arranged differently)."""
    q, k, v, do = t["q"], t["k"], t["v"], t["grad_out"]
    T, H, D = q.shape
    bufs: dict[str, Tensor] = {}
    sinu = t["sinu_pos"]
    if layout == "qkv-packed":
        packed = torch.full((T + PAD, 3 * H, D), float("nan"), dtype=q.dtype, device=q.device)
        for i, x in enumerate((q, k, v)):
            packed[:T, i * H : (i + 1) * H] = x
        qv, kv, vv = (packed[:T, i * H : (i + 1) * H] for i in range(3))
        bufs["qkv"] = packed
        dov, bufs["grad_out"] = _padded(do)
    elif layout == "head-strided":
        views = []
        for n, x in (("q", q), ("k", k), ("v", v)):
            buf = torch.full((T + PAD, 2 * H, D), float("nan"), dtype=x.dtype, device=x.device)
            buf[:T, ::2] = x
            views.append(buf[:T, ::2])
            bufs[n] = buf
        qv, kv, vv = views
        dov, bufs["grad_out"] = _padded(do)
    else:
        off = 3 if layout == "storage-offset" else 0
        (qv, bufs["q"]), (kv, bufs["k"]), (vv, bufs["v"]) = (_padded(x, off) for x in (q, k, v))
        if layout == "grad-out-transposed":
            buf = torch.full((H, T + PAD, D), float("nan"), dtype=do.dtype, device=do.device)
            buf[:, :T] = do.transpose(0, 1)
            dov, bufs["grad_out"] = buf[:, :T].transpose(0, 1), buf
        else:
            dov, bufs["grad_out"] = _padded(do)
    if sinu is not None:
        if layout == "sinu-strided":
            buf = torch.full((T + PAD, 2 * D), float("nan"), dtype=sinu.dtype, device=sinu.device)
            buf[:T, :D] = sinu
            sinu, bufs["sinu_pos"] = buf[:T, :D], buf
        else:
            sinu, bufs["sinu_pos"] = _padded(sinu)
    return Probe(f"layout-{layout}", "layout", qv, kv, vv, dov, t["offsets"], sinu,
                 scale=t["scale"], buffers=bufs)  # fmt: skip


_TAG = {"nan": "nan", "inf": "+inf", "-inf": "-inf"}
POISONED = ("q", "k", "v", "grad_out")


def poisoned(t: dict[str, Any], seq: str) -> Probe:
    """The clean padded case with one row each of q, k, v and grad_out in sequence `seq` set to
    NaN, +Inf or -Inf (rotating with the sequence, so across the three probes each tensor gets
    each value). The rows differ, so the poisons cannot cancel; outside the sequence nothing may
    change, so several poisons per call lose no attribution of a leak to its sequence."""
    p = layout_probe(t, "padded")
    si = list(SEQUENCES).index(seq)
    i = SEQUENCES[seq]
    start = sum(LENGTHS[:i])
    what = []
    for ti, name in enumerate(POISONED):
        value = POISONS[(si + ti) % 3]
        row = start + (ti + 1) * LENGTHS[i] // (len(POISONED) + 1)
        getattr(p, name)[row] = value  # a view: writes through to the probe's buffer
        what.append(f"{_TAG[repr(value)]} in {name} row {row}")
    return replace(p, name=f"containment-{seq}", prop="containment", note=", ".join(what),
                   poisoned=(start, start + LENGTHS[i]))  # fmt: skip


def containment_probes(t: dict[str, Any]) -> list[Probe]:
    """Poisons in the first, a middle and the last sequence, one call each."""
    return [poisoned(t, seq) for seq in SEQUENCES]


def degenerate_probes(dtype: torch.dtype, D: int, device: str) -> list[Probe]:
    """Batches at the edges: T = 0, every sequence empty, empty sequences first and last, a single
    token, one sequence much longer than a block."""
    cases = {
        "t0": (0,),
        "all-empty": (0, 0, 0),
        "empty-ends": (0, 0, 5, 0, 0),
        "single-token": (1,),
        "long-sequence": (200,),
    }
    out = []
    for name, lengths in cases.items():
        if sum(lengths) == 0:
            z = torch.zeros(0, 1, D, dtype=dtype, device=device)
            offs = offsets_from_lengths(list(lengths)).to(device)
            t = {"q": z, "k": z.clone(), "v": z.clone(), "grad_out": z.clone(), "offsets": offs,
                 "sinu_pos": None, "scale": D**-0.5}  # fmt: skip
        else:
            t = base(dtype, D, device, seed=7, lengths=lengths)
        out.append(replace(layout_probe(t, "padded"), name=f"degenerate-{name}",
                           prop="degenerate"))  # fmt: skip
    return out


def block_size_probes(t: dict[str, Any], sizes: tuple[int, ...]) -> list[Probe]:
    return [replace(layout_probe(t, "padded"), name=f"block-size-{bs}", prop="block-size",
                    block_size=bs) for bs in sizes]  # fmt: skip


def determinism_case(dtype: torch.dtype, D: int, device: str, sms: int = 0) -> Probe:
    """A case for repeat runs: the usual probe on a CPU; on a GPU, enough 64-token blocks (4 per
    SM, 2 heads) that every SM holds several tiles at once."""
    if sms <= 0:
        return replace(layout_probe(base(dtype, D, device), "padded"), name="determinism",
                       prop="determinism")  # fmt: skip
    lengths = tuple([64 * 4 + 17] * sms)
    c = make_case(lengths=list(lengths), H=2, D=D, dtype=dtype, device=device, seed=11)
    t = {"q": c.q, "k": c.k, "v": c.v, "grad_out": c.grad_out, "sinu_pos": None,
         "offsets": offsets_from_lengths(list(lengths)).to(device), "scale": D**-0.5}  # fmt: skip
    return replace(layout_probe(t, "padded"), name="determinism", prop="determinism")


def option_probes(t: dict[str, Any], offsets_dtypes: tuple[str, ...], max_seq_len: bool,
                  nested: bool) -> list[tuple[Probe, str | None]]:  # fmt: skip
    """(probe, why not declared) for each optional argument: offsets in int64 (the suite's
    default is int32), `max_seq_len` exact and larger than the longest sequence, nested jagged
    q, k, v. A probe with a reason is recorded "unsupported (declared)"."""
    p = layout_probe(t, "padded")
    out = []
    for dt in ("int32", "int64"):
        if dt == "int32":
            continue  # every other probe passes int32 offsets
        why = None if dt in offsets_dtypes else f"declared offsets dtypes {list(offsets_dtypes)}"
        out.append((replace(p, name=f"option-offsets-{dt}", prop="option",
                            offsets=p.offsets.to(getattr(torch, dt))), why))  # fmt: skip
    why = None if max_seq_len else "declared no max_seq_len argument"
    # Its own batch: no empty sequence and every one ending in a partial block, so a grid sized
    # from max_seq_len with one block too few (floor for ceil) has fewer tiles than blocks.
    q = t["q"]
    m = layout_probe(base(q.dtype, q.shape[2], str(q.device), seed=5, lengths=MSL_LENGTHS),
                     "padded")  # fmt: skip
    longest = max(MSL_LENGTHS)
    for tag, n in (("exact", longest), ("larger", 3 * longest + 5)):
        note = f"max_seq_len={n}, lengths {list(MSL_LENGTHS)}"
        out.append((replace(m, name=f"option-max-seq-len-{tag}", prop="option", max_seq_len=n,
                            note=note), why))  # fmt: skip
    why = None if nested else "declared no nested (torch.nested jagged) input"
    note = "q, k, v torch.nested jagged tensors, offsets None"
    out.append((replace(p, name="option-nested", prop="option", nested=True, note=note), why))
    return out
