"""CaseSpec: the JSON-able description of one case (enough to rebuild it bit-exactly)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

import torch

from blockattn.dtypes import DTYPES
from blockattn.names import VARIANTS

BLOCK_SIZE = 64  # the default; a spec with another leaves its id as before only at this one
MAX_BLOCK_SIZE = 128  # blockattn.validation.MAX_BLOCK_SIZE: the operator's range is 1..128
# Projection cases: x is (T, PROJ_IN) - fixed so one seed rebuilds the same x, w, bias.
PROJ_IN = 64
OFFSETS_DTYPES = ("int32", "int64")
MAX_SEQ_LEN = ("omitted", "exact", "larger")
# Fields left out of the case id while they hold their default: ids of earlier releases (corpus
# v1, stored baselines) stay valid as the judged space grows.
DEFAULTS_OUT_OF_ID = {"block_size": BLOCK_SIZE, "offsets_dtype": "int32", "max_seq_len": "omitted"}


@dataclass(frozen=True)
class CaseSpec:
    seed: int = 0
    variant: str = "plain"
    B: int = 4
    max_len: int = 256
    sparsity: float = 0.5
    lengths: tuple[int, ...] | None = None  # explicit lengths override B/max_len/sparsity
    H: int = 2
    D: int = 64
    dtype: str = "bfloat16"
    distribution: str = "normal"
    scale: float | None = None  # None -> 1/sqrt(D)
    rotate_v: bool = True
    kvheads: int | None = None  # projection only; None -> H (no GQA)
    block_size: int = BLOCK_SIZE  # tokens per block, cut from each sequence's start
    offsets_dtype: str = "int32"  # of the offsets tensor the kernel gets ("int32" | "int64")
    # `max_seq_len=` given to kernels that declare it: "omitted", "exact" (the longest
    # sequence), "larger" (well above it). Baselines ignore it.
    max_seq_len: str = "omitted"
    source: str = field(default="adhoc", compare=False)  # "corpus" | "fuzz" | "adhoc"
    name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {self.variant!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {tuple(DTYPES)}, got {self.dtype!r}")
        # Specs come from JSON reproducers and TOML files: type-check every field a tampered
        # file could get wrong, so the error names it instead of failing deep in a case.
        for name in ("seed", "B", "max_len", "H", "D"):
            if not _is_int(getattr(self, name)):
                raise TypeError(f"{name} must be an int, got {getattr(self, name)!r}")
        if not _is_real(self.sparsity) or not 0.0 <= self.sparsity <= 1.0:
            raise ValueError(f"sparsity must be in [0, 1], got {self.sparsity!r}")
        if self.scale is not None and not (_is_real(self.scale) and math.isfinite(self.scale)):
            raise ValueError(f"scale must be a finite number or None, got {self.scale!r}")
        if self.kvheads is not None and not (_is_int(self.kvheads) and self.kvheads >= 1):
            raise ValueError(f"kvheads must be an int >= 1 or None, got {self.kvheads!r}")
        if not (_is_int(self.block_size) and 1 <= self.block_size <= MAX_BLOCK_SIZE):
            raise ValueError(f"block_size must be an int in [1, {MAX_BLOCK_SIZE}], got "
                             f"{self.block_size!r}")  # fmt: skip
        if self.offsets_dtype not in OFFSETS_DTYPES:
            raise ValueError(f"offsets_dtype must be one of {OFFSETS_DTYPES}, got "
                             f"{self.offsets_dtype!r}")  # fmt: skip
        if self.max_seq_len not in MAX_SEQ_LEN:
            raise ValueError(f"max_seq_len must be one of {MAX_SEQ_LEN}, got "
                             f"{self.max_seq_len!r}")  # fmt: skip
        if not isinstance(self.rotate_v, bool):
            raise TypeError(f"rotate_v must be a bool, got {self.rotate_v!r}")
        if self.lengths is not None:
            if isinstance(self.lengths, (str, bytes)) or not all(map(_is_int, self.lengths)):
                raise TypeError(f"lengths must be a list of ints, got {self.lengths!r}")
            object.__setattr__(self, "lengths", tuple(int(n) for n in self.lengths))
            if any(n < 0 for n in self.lengths):
                raise ValueError("lengths must be >= 0")

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def effective_scale(self) -> float:
        return self.scale if self.scale is not None else self.D**-0.5

    def identity(self) -> dict[str, Any]:
        """Fields that determine the numbers (name/source excluded)."""
        d = dataclasses.asdict(self)
        d.pop("source")
        d.pop("name")
        for key, default in DEFAULTS_OUT_OF_ID.items():
            if d[key] == default:  # absent at its default: earlier ids stay valid
                d.pop(key)
        if d["lengths"] is not None:
            d["lengths"] = list(d["lengths"])
        return d

    @property
    def case_id(self) -> str:
        """Stable id: hash of the identity fields, so resume and baseline diffs match by value."""
        blob = json.dumps(self.identity(), sort_keys=True).encode()
        return f"{self.variant[:4]}-{self.dtype[:4]}-{hashlib.sha256(blob).hexdigest()[:10]}"

    def to_dict(self) -> dict[str, Any]:
        d = self.identity()
        d["source"] = self.source
        d["name"] = self.name
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CaseSpec:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known - {"case_id"}
        if unknown:
            raise ValueError(f"unknown case fields: {sorted(unknown)}")
        kw = {k: v for k, v in d.items() if k in known}
        if kw.get("lengths") is not None:
            kw["lengths"] = tuple(kw["lengths"])
        return cls(**kw)

    def max_seq_len_value(self, lengths: list[int]) -> int | None:
        """The `max_seq_len=` argument for a case of these lengths (None: omitted)."""
        longest = max(lengths, default=0)
        return {"omitted": None, "exact": longest, "larger": 2 * longest + 7}[self.max_seq_len]

    def short(self) -> str:
        shape = (
            f"lengths={list(self.lengths)}"
            if self.lengths is not None
            else (f"B={self.B} max_len={self.max_len} sparsity={self.sparsity:g}")
        )
        extra = "" if self.scale is None else f" scale={self.scale:g}"
        if self.block_size != BLOCK_SIZE:
            extra += f" block_size={self.block_size}"
        if self.offsets_dtype != "int32":
            extra += f" offsets={self.offsets_dtype}"
        if self.max_seq_len != "omitted":
            extra += f" max_seq_len={self.max_seq_len}"
        return (
            f"{self.variant} {self.dtype} {shape} H={self.H} D={self.D} "
            f"dist={self.distribution} seed={self.seed}{extra}"
        )


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_real(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)
