"""The contract battery's probes: small seeded cases that reach a kernel's own arguments with the
layouts, options, poisons, scales and degenerate batches its contract promises to take.

Every probe's tensors are views of larger buffers whose memory past the view is NaN, so a kernel
that reads past an input's end shows it. Nothing here is cloned or made contiguous on the way to
the kernel: the probe hands the kernel exactly these views (`blockattn.judge.contract` runs them).

Two heads (`HEADS`): at H = 1 a head stride is never used and a tensor stored (H, T, D) has the
memory of a contiguous one, so a kernel that ignores either passes. About 130 tokens (`LENGTHS`:
three sequences, the first at index 0, empty ones between and after, the middle one spanning two
64-token blocks). Each probe states what it makes differ from the clean contiguous case
(`Probe.kinds`), and `departures` checks that the views really do, in a dimension of size > 1.
Probes that cannot interfere share a call (several tensors strided at once; NaN, +Inf and -Inf
in q, k, v and grad_out of one (block, head) cell), so the battery stays a few dozen small calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor

from blockattn.cases.generate import make_case, offsets_from_lengths

HEADS = 2  # >= 2: head strides and (H, T, D) storage matter only with more than one head
LENGTHS = (37, 0, 66, 0, 27, 0)  # 130 tokens; the first sequence non-empty, empty ones between
SEQUENCES = {"first": 0, "middle": 2, "last": 4}  # index into LENGTHS of each poisoned sequence
# Short batches for the probes whose cost (a tile per block and head under the interpreter)
# buys nothing more on the long one: block size 1 (a tile per token) on SMALL_LENGTHS (a 1-token
# sequence, an empty one); the scale edges and the strided layouts other than "padded" (whose
# outputs are containment's clean run) on SHORT_LENGTHS: two sequences, an empty one between.
SMALL_LENGTHS = (5, 0, 6, 1)
SHORT_LENGTHS = (37, 0, 27)
# Block sizes judged for a provider that declares any: one per row-tile class of the kernels
# (tiles of 16, 32, 64 and 128 rows: block_rows rounds the size up to a power of two, >= 16):
# 1, a non-power of two, the default and MAX_BLOCK_SIZE (128), each cutting the sequences
# differently.
BLOCK_SIZES_ANY = (1, 24, 64, 128)
# How one (T, H, D) input departs from a contiguous tensor (`KINDS`), and what `departures`
# must find in its view for that: a difference in a dimension of size > 1 only.
KINDS = {
    "contiguous": "a contiguous view of a buffer that is NaN past its end",
    "offset": "a contiguous view at a non-zero storage offset of a NaN-filled buffer",
    "token-strided": "sliced from a packed (T, 3H, D) buffer: token stride 3HD",
    "head-strided": "every other head of a (T, 2H, D) buffer: head stride 2D, token stride 4HD",
    "transposed": "stored (H, T, D) and viewed (T, H, D): token stride D, head stride (T+PAD)D",
}
EXPECTED = {"contiguous": set(), "offset": {"offset"}, "token-strided": {"token-stride"},
            "head-strided": {"token-stride", "head-stride"},
            "transposed": {"token-stride", "head-stride"}}  # fmt: skip
SINU_KINDS = {"contiguous": set(), "row-strided": {"offset", "token-stride"}}
_C = "contiguous"
# Layout probe -> the kind of (q, k, v, grad_out). Each input takes each kind in some probe, and
# the mixed ones give q, k, v and grad_out different layouts in one call (a kernel that reads
# one tensor's strides for another fails them). "qkv-packed" slices q, k, v from ONE buffer.
LAYOUT_KINDS: dict[str, tuple[str, str, str, str]] = {
    "padded": (_C, _C, _C, _C),
    "storage-offset": ("offset",) * 4,
    "qkv-packed": ("token-strided",) * 3 + (_C,),
    "head-strided": ("head-strided",) * 4,
    "grad-out-transposed": (_C, _C, _C, "transposed"),
    "mixed-1": (_C, "head-strided", "transposed", "token-strided"),
    "mixed-2": ("head-strided", "transposed", "token-strided", "offset"),
    "mixed-3": ("transposed", "token-strided", _C, "head-strided"),
    # rotary: sinu_pos the left half of a (T, 2D) buffer at an offset, and the fourth rotation
    "sinu-strided": ("token-strided", "offset", "head-strided", "transposed"),
}
LAYOUTS = {
    "padded": "q, k, v, grad_out each a view of a larger buffer that is NaN past its end",
    "storage-offset": "q, k, v, grad_out start at a non-zero storage offset of a NaN buffer",
    "qkv-packed": "q, k, v sliced from one packed (T, 3H, D) tensor: token stride 3HD",
    "head-strided": "q, k, v, grad_out every other head of a (T, 2H, D) buffer: head stride 2D",
    "grad-out-transposed": "grad_out stored (H, T, D) and viewed as (T, H, D): not contiguous",
    "mixed-1": "q contiguous, k head-strided, v stored (H, T, D), grad_out token-strided",
    "mixed-2": "q head-strided, k stored (H, T, D), v token-strided, grad_out at an offset",
    "mixed-3": "q stored (H, T, D), k token-strided, v contiguous, grad_out head-strided",
    "sinu-strided": "sinu_pos the left half of a (T, 2D) buffer at an offset: row stride 2D "
                    "(rotary, rotate_v=False); q token-strided, k at an offset, v head-strided, "
                    "grad_out stored (H, T, D)",
}
NAMES = ("q", "k", "v", "grad_out")
POISONS = (float("nan"), float("inf"), float("-inf"))
MSL_LENGTHS = (66, 65, 130)  # the max_seq_len probes' batch (see option_probes)
PAD = 128  # rows of NaN past every buffer's end: a whole block read past the end sees NaN
OFFSET_ROWS = 3  # the storage offset of the "offset" kind, in rows


def default_scale(D: int) -> float:
    return D**-0.5


# Scale edges (`scale_probes`): each a valid `scale`. 0 makes every row the mean of its block's
# V; a negative one reverses the scores' order; a tiny one is nearly 0 but must not be treated
# as 0 or as "unset"; a large one saturates the softmax (scores of std ~ 8 * sqrt(D) ~ 64).
SCALES = {"zero": lambda D: 0.0, "negative": lambda D: -default_scale(D),
          "tiny": lambda D: 1e-6, "large": lambda D: 8.0}  # fmt: skip


@dataclass
class Probe:
    """One call of the kernel: forward on (q, k, v), backward with grad_out."""

    name: str  # readable id, e.g. "containment-first", "layout-mixed-1"
    prop: str  # the property it checks: containment, layout, block-size, scale, ...
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
    # input name -> its KINDS / SINU_KINDS entry: how its view departs from contiguous memory
    kinds: dict[str, str] = field(default_factory=dict)
    # (T, H) True where an output may differ from the clean run (the poisoned cells' blocks
    # and heads); containment probes only
    affected: Tensor | None = None
    layout: str = "padded"  # the LAYOUT_KINDS entry (what a provider declares it takes)

    @property
    def T(self) -> int:
        return int(self.q.shape[0])


def _nan(shape, like: Tensor) -> Tensor:
    return torch.full(shape, float("nan"), dtype=like.dtype, device=like.device)


def _padded(t: Tensor, offset: int = 0) -> tuple[Tensor, Tensor]:
    """(view, buffer): t copied into a NaN buffer at `offset` rows, PAD rows of NaN after it."""
    buf = _nan((offset + t.shape[0] + PAD, *t.shape[1:]), t)
    buf[offset : offset + t.shape[0]] = t
    return buf[offset : offset + t.shape[0]], buf


def _as_kind(x: Tensor, kind: str) -> tuple[Tensor, Tensor]:
    """(view, buffer): x (T, H, D) held in memory of KINDS[kind], values equal."""
    T, H, D = x.shape
    if kind == "contiguous":
        return _padded(x)
    if kind == "offset":
        return _padded(x, OFFSET_ROWS)
    if kind == "token-strided":  # the middle third of a packed (T, 3H, D) buffer
        buf = _nan((T + PAD, 3 * H, D), x)
        buf[:T, H : 2 * H] = x
        return buf[:T, H : 2 * H], buf
    if kind == "head-strided":
        buf = _nan((T + PAD, 2 * H, D), x)
        buf[:T, ::2] = x
        return buf[:T, ::2], buf
    if kind == "transposed":
        buf = _nan((H, T + PAD, D), x)
        buf[:, :T] = x.transpose(0, 1)
        return buf[:, :T].transpose(0, 1), buf
    raise ValueError(f"unknown layout kind {kind!r}; known: {sorted(KINDS)}")


def departures(t: Tensor) -> set[str]:
    """How the view `t` departs from a contiguous tensor of its shape, counting only strides of
    dimensions of size > 1 (a stride of a size-1 dimension is never used): "offset" (non-zero
    storage offset), "token-stride", "head-stride", "d-stride" (a (T, D) table: "token-stride"
    for its rows)."""
    out = {"offset"} if t.storage_offset() else set()
    want = torch.empty(t.shape).stride() if t.dim() else ()
    names = ("token-stride", "head-stride", "d-stride") if t.dim() == 3 else ("token-stride",
                                                                              "d-stride")
    for name, n, s, w in zip(names, t.shape, t.stride(), want, strict=False):
        if n > 1 and s != w:
            out.add(name)
    return out


def base(dtype: torch.dtype, D: int, device: str, seed: int = 0, lengths=LENGTHS,
         rotary: bool = False, H: int = HEADS) -> dict[str, Any]:  # fmt: skip
    """Clean contiguous tensors of a probe case (H heads), seeded, never all-zero."""
    c = make_case(lengths=list(lengths), H=H, D=D, dtype=dtype, device=device, seed=seed)
    offsets = offsets_from_lengths(list(lengths)).to(device)
    return {"q": c.q, "k": c.k, "v": c.v, "grad_out": c.grad_out, "offsets": offsets,
            "sinu_pos": c.sinu_pos if rotary else None, "scale": default_scale(D),
            "lengths": tuple(lengths)}  # fmt: skip


def layout_probe(t: dict[str, Any], layout: str, rotate_v: bool = True) -> Probe:
    """The clean case `t` handed over in `layout` (a LAYOUT_KINDS entry: values equal, memory
    arranged differently). sinu_pos (rotary cases) is strided only in "sinu-strided"."""
    kinds = dict(zip(NAMES, LAYOUT_KINDS[layout], strict=True))
    bufs: dict[str, Tensor] = {}
    views: dict[str, Tensor] = {}
    if layout == "qkv-packed":  # q, k, v from ONE packed buffer
        q = t["q"]
        T, H, D = q.shape
        packed = _nan((T + PAD, 3 * H, D), q)
        for i, n in enumerate(NAMES[:3]):
            packed[:T, i * H : (i + 1) * H] = t[n]
            views[n] = packed[:T, i * H : (i + 1) * H]
        bufs["qkv"] = packed
        views["grad_out"], bufs["grad_out"] = _as_kind(t["grad_out"], kinds["grad_out"])
    else:
        for n in NAMES:
            views[n], bufs[n] = _as_kind(t[n], kinds[n])
    sinu = t["sinu_pos"]
    if sinu is not None:
        T, D = sinu.shape
        if layout == "sinu-strided":
            buf = _nan((OFFSET_ROWS + T + PAD, 2 * D), sinu)
            buf[OFFSET_ROWS : OFFSET_ROWS + T, :D] = sinu
            sinu, bufs["sinu_pos"] = buf[OFFSET_ROWS : OFFSET_ROWS + T, :D], buf
            kinds["sinu_pos"] = "row-strided"
            rotate_v = False  # the other rotary probes run rotate_v=True
        else:
            sinu, bufs["sinu_pos"] = _padded(sinu)
            kinds["sinu_pos"] = "contiguous"
    return Probe(f"layout-{layout}", "layout", views["q"], views["k"], views["v"],
                 views["grad_out"], t["offsets"], sinu, scale=t["scale"], buffers=bufs,
                 kinds=kinds, layout=layout, rotate_v=rotate_v)  # fmt: skip


_TAG = {"nan": "NaN", "inf": "+Inf", "-inf": "-Inf"}
POISONED = ("q", "k", "v", "grad_out")


def _blocks(lengths, block_size: int) -> list[tuple[int, int]]:
    """[start, end) of every block of every sequence."""
    out, start = [], 0
    for n in lengths:
        out += [(start + j, min(start + j + block_size, start + n))
                for j in range(0, n, block_size)]  # fmt: skip
        start += n
    return out


def poisoned(t: dict[str, Any], seq: str, sinu: bool = False) -> Probe:
    """The clean padded case with NaN, +Inf and -Inf each in one row of q, k, v and grad_out
    (3 rows per tensor, all in head 0 of the first block of sequence `seq`; with `sinu`, also in
    3 rows of sinu_pos, which every head reads). Outputs may change only in that block (head 0;
    every head where sinu_pos is poisoned): `affected`. The judge checks everything else: rows
    before, inside (another block or head) and after the poisoned sequence."""
    lengths = t.get("lengths", LENGTHS)
    p = layout_probe(t, "padded")
    i = SEQUENCES[seq]
    start = sum(lengths[:i])
    n = lengths[i]
    end = start + min(n, p.block_size)  # the sequence's first block
    H = p.q.shape[1]
    affected = torch.zeros(p.T, H, dtype=torch.bool, device=p.q.device)
    affected[start:end, 0] = True
    what = []
    targets = [*POISONED, *(("sinu_pos",) if sinu else ())]
    for ti, name in enumerate(targets):
        rows = []
        for vi in range(len(POISONS)):
            # distinct rows per tensor and value: the poisons cannot cancel
            row = start + (ti * len(POISONS) + vi + 1) * (end - start) // (
                len(targets) * len(POISONS) + 1)
            x = getattr(p, name)
            value = POISONS[(vi + ti + SEQUENCES[seq]) % 3]
            if name == "sinu_pos":
                x[row, (vi * 5) % x.shape[1]] = value
                affected[start:end, :] = True
            else:
                x[row, 0, (vi * 7) % x.shape[2]] = value  # a view: writes through to the buffer
            rows.append(f"{_TAG[repr(value)]} row {row}")
        what.append(f"{name} " + ", ".join(rows) + ("" if name == "sinu_pos" else " (head 0)"))
    tag = f"containment-{seq}" + ("-rotary" if sinu else "")
    return replace(p, name=tag, prop="containment", note="; ".join(what),
                   poisoned=(start, start + n), affected=affected)  # fmt: skip


def containment_probes(t: dict[str, Any]) -> list[Probe]:
    """Poisons in the first (index 0), a middle and the last sequence, one call each."""
    return [poisoned(t, seq) for seq in SEQUENCES]


def scale_probes(dtype: torch.dtype, D: int, device: str, rotary: bool) -> list[Probe]:
    """One probe per SCALES edge on the short batch; rotary ones alternate rotate_v."""
    t = base(dtype, D, device, seed=3, lengths=SHORT_LENGTHS, rotary=rotary, H=1)
    out = []
    for i, (tag, f) in enumerate(SCALES.items()):
        rv = bool(i % 2) if rotary else True
        p = layout_probe(t, "padded", rotate_v=rv)
        name = f"scale-{tag}" + (f"-rotary-rotate-v-{str(rv).lower()}" if rotary else "")
        out.append(replace(p, name=name, prop="scale", scale=f(D), note=f"scale={f(D):g}"))
    return out


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
            t = base(dtype, D, device, seed=7, lengths=lengths, H=1)
        out.append(replace(layout_probe(t, "padded"), name=f"degenerate-{name}",
                           prop="degenerate"))  # fmt: skip
    return out


def block_size_probes(t: dict[str, Any], sizes: tuple[int, ...],
                      small: dict[str, Any] | None = None) -> list[Probe]:  # fmt: skip
    """One probe per block size on `t`; sizes below 16 (one tile per token or so: the costly
    ones under the interpreter) on the short batch `small` when given."""
    return [replace(layout_probe(small if small is not None and bs < 16 else t, "padded"),
                    name=f"block-size-{bs}", prop="block-size", block_size=bs)
            for bs in sizes]  # fmt: skip


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
    m = layout_probe(base(q.dtype, q.shape[2], str(q.device), seed=5, lengths=MSL_LENGTHS,
                          H=q.shape[1]), "padded")  # fmt: skip
    longest = max(MSL_LENGTHS)
    for tag, n in (("exact", longest), ("larger", 3 * longest + 5)):
        note = f"max_seq_len={n}, lengths {list(MSL_LENGTHS)}"
        out.append((replace(m, name=f"option-max-seq-len-{tag}", prop="option", max_seq_len=n,
                            note=note), why))  # fmt: skip
    why = None if nested else "declared no nested (torch.nested jagged) input"
    note = "q, k, v torch.nested jagged tensors, offsets None"
    out.append((replace(p, name="option-nested", prop="option", nested=True, note=note), why))
    return out
