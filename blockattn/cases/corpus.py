"""The fixed, versioned gate corpus (corpus_vN.toml next to this file)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from blockattn.cases.spec import CaseSpec

CORPUS_VERSION = 2
_DIR = Path(__file__).resolve().parent


def corpus_path(version: int = CORPUS_VERSION) -> Path:
    return _DIR / f"corpus_v{version}.toml"


def load_corpus(
    version: int = CORPUS_VERSION,
    *,
    tiers: tuple[str, ...] = ("cpu", "gpu"),
    path: str | Path | None = None,
) -> list[CaseSpec]:
    p = Path(path) if path else corpus_path(version)
    data = tomllib.loads(p.read_text())
    specs = []
    for entry in data["case"]:
        entry = dict(entry)
        tier = entry.pop("tier")
        if tier not in ("cpu", "gpu"):
            raise ValueError(f"{p}: tier must be cpu or gpu, got {tier!r}")
        if tier in tiers:
            specs.append(CaseSpec.from_dict({**entry, "source": "corpus"}))
    return specs


def corpus_for_device(device: str) -> list[CaseSpec]:
    return load_corpus(tiers=("cpu", "gpu") if device == "cuda" else ("cpu",))
