"""Providers: the kernels the suite judges and the baselines it compares them with. One concept.

A provider is a `Provider`: a name, a role ("kernel" under test, or "baseline"), `run(inputs,
variant) -> {tensor name: Tensor}` for correctness, what it supports (`Supports`), and how it is
judged (`accuracy_model`, a model name of the tolerance file's [models], or `reference`, another
provider whose rule it must meet). The same object serves `run`, `gate`, `replay`, `audit`, the
pytest plugin and `bench` (an outside kernel gets its timed callables from `kernel`, see
`blockattn.bench.providers.from_provider`).

Where providers come from:
* built-ins: every public module of this package (NAME, ROLE, run, optional ACCURACY_MODEL,
  SUPPORTS): `blockattn`, `fa2`, `eager`, `flex`, `tlx`;
* outside kernels: `--provider [NAME=]MODULE:CALLABLE` on every command (`load_spec`), the
  entry-point group `blockattn.providers` of installed packages (loaded by name, on demand),
  or `register()` at runtime. The callable has `blockattn.block_attention`'s signature,
  `fn(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v) -> Tensor`, differentiable
  through autograd; decorate it with `@blockattn.providers.kernel(...)` to declare what it
  supports, its accuracy model and an optional projection callable (`external.py`).

A configuration outside a provider's declared `Supports` is recorded "unsupported" (declared)
and is never a failure; a provider that refuses a configuration it declared is judged for it.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

OUTPUT_KEYS: dict[str, tuple[str, ...]] = {
    "plain": ("O", "dQ", "dK", "dV"),
    "rotary": ("O", "dQ", "dK", "dV"),
    "projection": ("O", "dX", "dW", "dbias"),
}
ENTRY_POINT_GROUP = "blockattn.providers"
ALL_DTYPES = ("bfloat16", "float16", "float32")


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

    def __post_init__(self) -> None:
        bad = set(self.dtypes) - set(ALL_DTYPES)
        if bad:
            raise ValueError(f"Supports.dtypes: unknown {sorted(bad)} (known {ALL_DTYPES})")
        if set(self.devices) - {"cpu", "cuda"}:
            raise ValueError(f"Supports.devices: only 'cpu' and 'cuda', got {self.devices}")

    def refusal(self, spec: Any, device: str, arch: str, block_size: int = 64) -> str | None:
        """Why this provider declared it does not run `spec` here (None: it declared it does)."""
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


_EXTRA: dict[str, Provider] = {}


def register(
    name: str | Provider,
    run: RunFn | None = None,
    role: str = "kernel",
    accuracy_model: str | None = None,
    supports: Supports | None = None,
    reference: str | None = None,
) -> Provider:
    """Add a provider for this process (a `Provider`, or a name and a `run` function)."""
    if isinstance(name, Provider):
        prov = name
    else:
        if run is None:
            raise TypeError("register(name, run): run is required")
        prov = Provider(name, role, run, accuracy_model, supports or Supports(),
                        reference, origin="register()")  # fmt: skip
    _check_name(prov.name, "register")
    _EXTRA[prov.name] = prov
    return prov


def unregister(name: str) -> None:
    _EXTRA.pop(name, None)


def _check_name(name: str, where: str) -> None:
    if not name or not all(c.isalnum() or c in "_-." for c in name):
        raise ValueError(f"{where}: provider name {name!r} must be non-empty [A-Za-z0-9_.-]")


def _discover() -> dict[str, Provider]:
    found: dict[str, Provider] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_") or info.name == "external":
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        found[mod.NAME] = Provider(
            mod.NAME,
            mod.ROLE,
            mod.run,
            getattr(mod, "ACCURACY_MODEL", None),
            getattr(mod, "SUPPORTS", Supports()),
            description=(mod.__doc__ or "").strip().splitlines()[0],
        )
    return found


def entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    """Installed packages' providers (group `blockattn.providers`), not loaded yet."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def all_providers() -> dict[str, Provider]:
    """Built-ins and registered providers (entry points: `entry_points()`, loaded by `get`)."""
    return {**_discover(), **_EXTRA}


def get(name: str) -> Provider:
    provs = all_providers()
    if name in provs:
        return provs[name]
    eps = entry_points()
    if name in eps:
        prov = _from_object(eps[name].load(), name, f"entry point {eps[name].value}", None)
        _EXTRA[name] = prov
        return prov
    raise ValueError(
        f"unknown provider {name!r}; known: {sorted(provs)}"
        + (f", entry points: {sorted(eps)}" if eps else "")
        + " (an outside kernel: --provider NAME=MODULE:CALLABLE)"
    )


def parse_spec(spec: str) -> tuple[str | None, str, str]:
    """'[NAME=]MODULE:CALLABLE' -> (NAME or None, MODULE, CALLABLE)."""
    name, _, target = spec.rpartition("=") if "=" in spec else (None, "", spec)
    mod, sep, attr = target.partition(":")
    if not sep or not mod or not attr:
        raise ValueError(f"--provider {spec!r}: expected [NAME=]MODULE:CALLABLE")
    return (name or None), mod, attr


def load_spec(spec: str) -> Provider:
    """Import `[NAME=]MODULE:CALLABLE`, wrap it as a provider and register it (by NAME)."""
    name, mod_name, attr = parse_spec(spec)
    # An outside kernel usually lives in the user's own repo: import it from the working dir.
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        mod = importlib.import_module(mod_name)
    except Exception as exc:  # ImportError, or the module itself raising at import
        raise ValueError(f"--provider {spec!r}: cannot import {mod_name!r}: "
                         f"{type(exc).__name__}: {exc}") from exc  # fmt: skip
    obj: Any = mod
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"--provider {spec!r}: {mod_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    prov = _from_object(obj, name, f"{mod_name}:{attr}", spec)
    if prov.name in _discover():
        raise ValueError(f"--provider {spec!r}: name {prov.name!r} is a built-in provider; "
                         "give it another NAME= prefix")  # fmt: skip
    _check_name(prov.name, f"--provider {spec!r}")
    prov = replace(prov, spec=f"{prov.name}={mod_name}:{attr}")
    _EXTRA[prov.name] = prov
    return prov


def load_specs(specs: list[str] | None) -> list[str]:
    """Load every `--provider` spec; returns their names in order (duplicates refused)."""
    names: list[str] = []
    for s in specs or []:
        p = load_spec(s)
        if p.name in names:
            raise ValueError(f"--provider: name {p.name!r} given twice")
        names.append(p.name)
    return names


def _from_object(obj: Any, name: str | None, origin: str, spec: str | None) -> Provider:
    from blockattn.providers.external import from_callable

    if isinstance(obj, Provider):
        return replace(obj, name=name or obj.name, origin=origin, spec=spec)
    if callable(obj):
        return from_callable(obj, name=name, origin=origin, spec=spec)
    raise ValueError(f"provider {origin}: {type(obj).__name__} is neither a Provider nor callable")


def kernel(
    fn: Callable | None = None,
    *,
    name: str | None = None,
    supports: Supports | None = None,
    accuracy_model: str | None = None,
    reference: str | None = None,
    projection: Callable | None = None,
    description: str = "",
) -> Any:
    """Decorator declaring an outside kernel (see `external.py` for what each field means)."""
    from blockattn.providers.external import Declaration

    def wrap(f: Callable) -> Callable:
        f.__blockattn__ = Declaration(  # type: ignore[attr-defined]
            name=name, supports=supports or Supports(), accuracy_model=accuracy_model,
            reference=reference, projection=projection, description=description,
        )  # fmt: skip
        return f

    return wrap(fn) if fn is not None else wrap


__all__ = [
    "ENTRY_POINT_GROUP",
    "OUTPUT_KEYS",
    "Provider",
    "Supports",
    "Unsupported",
    "all_providers",
    "entry_points",
    "get",
    "kernel",
    "load_spec",
    "load_specs",
    "parse_spec",
    "register",
    "unregister",
]
