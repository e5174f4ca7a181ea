"""Provider registry: every public module here is one provider (adding one = adding one module).

A provider module defines
    NAME: str                 # registry key, e.g. "fa2"
    ROLE: str                 # "kernel" (code under test) or "baseline"
    ACCURACY_MODEL: str       # optional: the accuracy model it implements, by its name in the
                              # tolerance file's [models] (blockattn/bounds/ERROR_ANALYSIS.md)
    def run(inputs: Inputs, variant: str) -> dict[str, Tensor]
returning {"O", "dQ", "dK", "dV"} (projection: {"O", "dX", "dW", "dbias"}), or raising
`Unsupported(reason)` (recorded as "unsupported", not as an error).
Tests and plug-ins may also `register()` a callable at runtime (e.g. a planted-bug provider).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass

import torch

OUTPUT_KEYS: dict[str, tuple[str, ...]] = {
    "plain": ("O", "dQ", "dK", "dV"),
    "rotary": ("O", "dQ", "dK", "dV"),
    "projection": ("O", "dX", "dW", "dbias"),
}


class Unsupported(Exception):
    """The provider cannot run this case (dtype, head dim, device ...); not a failure by itself."""


RunFn = Callable[..., dict[str, torch.Tensor]]


@dataclass(frozen=True)
class Provider:
    name: str
    role: str
    run: RunFn
    accuracy_model: str | None = None


_EXTRA: dict[str, Provider] = {}


def register(
    name: str, run: RunFn, role: str = "kernel", accuracy_model: str | None = None
) -> None:
    _EXTRA[name] = Provider(name, role, run, accuracy_model)


def unregister(name: str) -> None:
    _EXTRA.pop(name, None)


def _discover() -> dict[str, Provider]:
    found: dict[str, Provider] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        found[mod.NAME] = Provider(
            mod.NAME, mod.ROLE, mod.run, getattr(mod, "ACCURACY_MODEL", None)
        )
    return found


def all_providers() -> dict[str, Provider]:
    return {**_discover(), **_EXTRA}


def get(name: str) -> Provider:
    provs = all_providers()
    if name not in provs:
        raise ValueError(f"unknown provider {name!r}; known: {sorted(provs)}")
    return provs[name]
