"""What a provider is: `Provider` (a name, a role, `run`, what it `Supports`, how it is judged,
and how it is timed) and `Unsupported`. The registry (`blockattn.providers`) and the outside-kernel
wrapper (`external`) both build on this module."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

OUTPUT_KEYS: dict[str, tuple[str, ...]] = {
    "plain": ("O", "dQ", "dK", "dV"),
    "rotary": ("O", "dQ", "dK", "dV"),
    "projection": ("O", "dX", "dW", "dbias"),
}
ALL_DTYPES = ("bfloat16", "float16", "float32")


SCALE_SIGNS = ("positive", "zero", "negative")


def scale_sign(scale: float | None) -> str:
    """"positive" for None (the default 1/sqrt(D)); else the sign of `scale`."""
    if scale is None or scale > 0:
        return "positive"
    return "zero" if scale == 0 else "negative"


class Unsupported(Exception):
    """The provider cannot run this case (dtype, head dim, device ...); not a failure by itself."""


RunFn = Callable[..., dict[str, torch.Tensor]]


@dataclass(frozen=True)
class Supports:
    """What a provider declares it can run; `None` means any value."""

    dtypes: tuple[str, ...] = ALL_DTYPES
    head_dims: tuple[int, ...] | None = None
    block_sizes: tuple[int, ...] | None = None
    rotary: bool = True
    rotate_v: tuple[bool, ...] = (True, False)
    projection: bool = True
    gqa: bool = False
    devices: tuple[str, ...] = ("cpu", "cuda")
    archs: tuple[str, ...] | None = None  # e.g. ("sm_100",): GPU architectures it runs on
    # Forward and backward bitwise repeatable (and so non-finite values contained bitwise):
    # the contract battery requires it of a provider that declares it, and measures the others.
    deterministic: bool = False
    # Memory layouts of q, k, v, grad_out, sinu_pos it takes (None: any view with unit stride
    # along D; names in blockattn.cases.contract.LAYOUTS); others are "unsupported (declared)".
    layouts: tuple[str, ...] | None = None
    # Optional arguments of the kernel callable beyond the required signature (the contract
    # battery probes each declared one): offsets dtypes it takes, a `max_seq_len=` keyword
    # (exact or larger than the longest sequence), torch.nested jagged q, k, v with offsets None.
    offsets_dtypes: tuple[str, ...] = ("int32",)
    max_seq_len: bool = False
    nested: bool = False
    # Signs of `scale` it computes (None, the default 1/sqrt(D), is positive): a kernel whose
    # masking multiplies -inf by the scale (FA v2's) gives NaN at 0, so it declares which.
    scales: tuple[str, ...] = SCALE_SIGNS
    # The largest block_size it takes float32 inputs at on a GPU (None: any).
    fp32_gpu_max_block_size: int | None = None
    # Why the provider cannot run in this environment at all (e.g. its package is not
    # installed): every case is then "unsupported (declared)" with this reason.
    unavailable: str | None = None

    def __post_init__(self) -> None:
        bad = set(self.dtypes) - set(ALL_DTYPES)
        if bad:
            raise ValueError(f"Supports.dtypes: unknown {sorted(bad)} (known {ALL_DTYPES})")
        if set(self.offsets_dtypes) - {"int32", "int64"} or not self.offsets_dtypes:
            raise ValueError(f"Supports.offsets_dtypes: int32 and/or int64, got "
                             f"{self.offsets_dtypes}")  # fmt: skip
        if set(self.scales) - set(SCALE_SIGNS) or not self.scales:
            raise ValueError(f"Supports.scales: some of {SCALE_SIGNS}, got {self.scales}")
        if set(self.devices) - {"cpu", "cuda"}:
            raise ValueError(f"Supports.devices: only 'cpu' and 'cuda', got {self.devices}")

    def refusal(self, spec: Any, device: str, arch: str, block_size: int = 64) -> str | None:
        """Why this provider declared it does not run `spec` here (None: it declared it does)."""
        if self.unavailable is not None:
            return self.unavailable
        if device not in self.devices:
            return f"declared devices {list(self.devices)}, this is {device}"
        if self.archs is not None and arch not in self.archs:
            return f"declared GPU architectures {list(self.archs)}, this is {arch}"
        if spec.dtype not in self.dtypes:
            return f"declared dtypes {list(self.dtypes)}, case is {spec.dtype}"
        if self.head_dims is not None and spec.D not in self.head_dims:
            return f"declared head dims {list(self.head_dims)}, case has D={spec.D}"
        if self.block_sizes is not None and block_size not in self.block_sizes:
            return f"declared block sizes {list(self.block_sizes)}, case uses {block_size}"
        cap = self.fp32_gpu_max_block_size
        if cap is not None and device == "cuda" and spec.dtype == "float32" and block_size > cap:
            return f"declared float32 block sizes up to {cap} on a GPU, case uses {block_size}"
        odt = getattr(spec, "offsets_dtype", "int32")
        if odt not in self.offsets_dtypes:
            return f"declared offsets dtypes {list(self.offsets_dtypes)}, case uses {odt}"
        if getattr(spec, "max_seq_len", "omitted") != "omitted" and not self.max_seq_len:
            return "declared no max_seq_len argument"
        sign = scale_sign(getattr(spec, "scale", None))
        if sign not in self.scales:
            return f"declared scales {list(self.scales)}, case has a {sign} scale"
        if spec.variant in ("rotary", "projection") and not self.rotary:
            return "declared no rotary"
        if spec.variant in ("rotary", "projection") and spec.rotate_v not in self.rotate_v:
            return f"declared rotate_v in {list(self.rotate_v)}, case has {spec.rotate_v}"
        if spec.variant == "projection":
            if not self.projection:
                return "declared no projection callable"
            if (spec.kvheads or spec.H) != spec.H and not self.gqa:
                return f"declared no GQA (kvheads={spec.kvheads} != H={spec.H})"
        return None

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class Provider:
    name: str
    role: str
    run: RunFn
    accuracy_model: str | None = None
    supports: Supports = field(default_factory=Supports)
    reference: str | None = None  # judged by this provider's rule when it declares no model
    origin: str = "builtin"  # "builtin" | "MODULE:CALLABLE" | "entry point ..." | "register()"
    spec: str | None = None  # the --provider spec that re-creates it (replay, xdist workers)
    kernel: Callable[..., torch.Tensor] | None = None  # attention callable (bench timing)
    projection: Callable[..., torch.Tensor] | None = None
    description: str = ""
    # How the bench times it (`_timing.Timing` entries); an outside kernel is timed through
    # `kernel` instead (`providers.timings_of`).
    timings: tuple[Any, ...] = ()
    # The isolated judge's handle (`blockattn.run.isolated.Sandbox`) when this is its proxy of a
    # provider that runs in a worker process: every call goes there, none runs here.
    worker: Any = None

    def describe(self) -> dict[str, Any]:
        """JSON-able identity recorded with every result (which kernel, how judged, from where)."""
        return {
            "origin": self.origin,
            "spec": self.spec,
            "role": self.role,
            "accuracy_model": self.accuracy_model,
            "reference": self.reference,
            "supports": self.supports.to_dict(),
        }
