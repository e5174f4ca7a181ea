"""Providers: the kernels the suite judges and the baselines it compares them with. One concept.

A provider is a `Provider`: a name, a role ("kernel" under test, or "baseline"), `run(inputs,
variant) -> {tensor name: Tensor}` for correctness, what it supports (`Supports`), and how it is
judged (`accuracy_model`, a model name of the tolerance file's [models], or `reference`, another
provider whose rule it must meet). The same object serves `run`, `gate`, `replay`, `audit`, the
pytest plugin and `bench`: a built-in declares its bench entries (`TIMINGS`, see `_timing`), an
outside kernel is timed through its attention callable (`timings_of`).

Where providers come from:
* built-ins: every public module of this package (NAME, ROLE, run, optional ACCURACY_MODEL,
  SUPPORTS): `blockattn`, `fa2`, `eager`, `flex`, `tlx`;
* `--provider NAME` on every command puts a known provider under test (`--provider fa4`);
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
from dataclasses import replace
from pathlib import Path
from typing import Any

from blockattn.providers._base import (
    OUTPUT_KEYS,
    Provider,
    RunFn,
    Supports,
    Unsupported,
)
from blockattn.providers._timing import Prepared, Timing, kernel_timings

ENTRY_POINT_GROUP = "blockattn.providers"


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
            timings=getattr(mod, "TIMINGS", ()),
            kernel=getattr(mod, "KERNEL", None),
        )
    return found


def timings_of(prov: Provider) -> tuple[Timing, ...]:
    """How the bench times `prov`: the timings it declares, else its kernel callable's (an
    outside kernel: plain, and fused rotary when it declares rotary), else none."""
    if prov.timings or prov.kernel is None:
        return prov.timings
    return kernel_timings(prov)


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


def is_bare(spec: str) -> bool:
    """A `--provider` value that names a known provider (`fa4`, `fa2`) rather than a callable."""
    return ":" not in spec and "=" not in spec


def load_spec(spec: str) -> Provider:
    """Import `[NAME=]MODULE:CALLABLE`, wrap it as a provider and register it (by NAME); a bare
    name (`--provider fa4`) is the built-in, registered or entry-point provider of that name."""
    if is_bare(spec):
        try:
            return get(spec)
        except ValueError:
            known = sorted({**all_providers(), **entry_points()})
            hint = _did_you_mean(spec, known)
            raise ValueError(f"--provider {spec!r}: not a known provider{hint} "
                             f"({', '.join(known)}); "
                             "an outside kernel: expected [NAME=]MODULE:CALLABLE") from None
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
            names = [n for n in dir(obj) if not n.startswith("_")
                     and callable(getattr(obj, n, None))]  # fmt: skip
            raise ValueError(f"--provider {spec!r}: {mod_name!r} has no attribute {attr!r}"
                             + _did_you_mean(part, names))  # fmt: skip
        obj = getattr(obj, part)
    prov = _from_object(obj, name, f"{mod_name}:{attr}", spec)
    if prov.name in _discover():
        raise ValueError(f"--provider {spec!r}: name {prov.name!r} is a built-in provider; "
                         "give it another NAME= prefix")  # fmt: skip
    _check_name(prov.name, f"--provider {spec!r}")
    prov = replace(prov, spec=f"{prov.name}={mod_name}:{attr}")
    _EXTRA[prov.name] = prov
    return prov


def _did_you_mean(word: str, choices: list[str]) -> str:
    """'; did you mean `x`?' for a near miss (difflib), else ''."""
    import difflib

    close = difflib.get_close_matches(word, choices, n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


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
    "Prepared",
    "Provider",
    "Supports",
    "Timing",
    "Unsupported",
    "all_providers",
    "entry_points",
    "get",
    "is_bare",
    "kernel",
    "load_spec",
    "load_specs",
    "parse_spec",
    "register",
    "timings_of",
    "unregister",
]
