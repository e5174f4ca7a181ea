"""Shared helpers for harness tests (tolerance documents, planted-bug providers)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

from blockattn.judge.calibrate import to_toml
from blockattn.providers import _common, get

REPO = Path(__file__).resolve().parents[2]
TOL_DIR = REPO / "blockattn" / "tolerances"


def minimal_doc(**rule: float) -> dict[str, Any]:
    r = {"max_ratio_to_floor": 4.0, **rule}
    return {
        "schema_version": 1,
        "version": 7,
        "status": "proposed",
        "under_test": "blockattn",
        "baseline": "eager",
        "provenance": {
            "generator": "test",
            "commit": "abc",
            "device": "cpu",
            "gpu": "none",
            "date": "2026-01-01",
            "method": "hand-written for a test",
        },
        "rules": {"blockattn": {"bfloat16": {"O": r, "dQ": dict(r)}}},
    }


def write_doc(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(to_toml(doc))
    return path


def retarget(doc: dict[str, Any], provider: str, scale_floor: float = 1.0) -> dict[str, Any]:
    """Copy of a tolerance document whose rules for `provider` are those of the kernel."""
    d = copy.deepcopy(doc)
    d["rules"][provider] = copy.deepcopy(d["rules"][d["under_test"]])
    for by_t in d["rules"][provider].values():
        for rule in by_t.values():
            rule["max_ratio_to_floor"] *= scale_floor
    d["under_test"] = provider
    d["status"] = "proposed"
    return d


def dk_bug(inputs, variant: str) -> dict[str, torch.Tensor]:
    """Kernel with a realistic dK bug: head 0 of dK off by 1/64 relative (a wrong rescale,
    ~2 bf16 ulps at the largest element); everything else exact."""
    out = get("blockattn").run(inputs, variant)
    key = "dK" if "dK" in out else "dW"
    g = out[key].clone()
    if g.dim() == 3:
        g[:, 0, :] *= 1 + 2**-6
    else:
        g *= 1 + 2**-6
    out[key] = g
    return out


def _attention_without_partial_block_mask(q, k, v, offsets, scale, block=64):
    """The classic bug: padded keys of a partial block are not masked (they score 0)."""
    T, H, D = q.shape
    if T == 0:
        return q * 0
    slot, nb = _common.block_layout(offsets, T, block)

    def pad(t: torch.Tensor) -> torch.Tensor:
        z = t.new_zeros(nb * block, H, D)
        return z.index_copy(0, slot, t).view(nb, block, H, D).transpose(1, 2)

    p = torch.softmax(torch.matmul(pad(q), pad(k).transpose(-1, -2)) * scale, dim=-1)
    o = torch.matmul(p, pad(v))
    return o.transpose(1, 2).reshape(nb * block, H, D).index_select(0, slot)


def nomask_bug(inputs, variant: str) -> dict[str, torch.Tensor]:
    return _common.run_autograd(inputs, variant, _attention_without_partial_block_mask)


def nan_rows_bug(inputs, variant: str) -> dict[str, torch.Tensor]:
    """Kernel that never writes the last token of O (output buffer poisoned with NaN)."""
    out = get("blockattn").run(inputs, variant)
    o = out["O"].clone()
    if o.shape[0]:
        o[-1] = float("nan")
    out["O"] = o
    return out


def dump_toml(doc: dict[str, Any]) -> str:
    """Any nested tolerance document (schema 2 included) as TOML: scalars, then sub-tables."""
    import json

    def val(x: Any) -> str:
        if isinstance(x, bool):
            return "true" if x else "false"
        if isinstance(x, str):
            return json.dumps(x)
        if isinstance(x, list):
            return "[" + ", ".join(val(v) for v in x) + "]"
        return repr(x)

    lines: list[str] = []

    def table(prefix: str, d: dict[str, Any]) -> None:
        if prefix:
            lines.append(f"[{prefix}]")
        for k, v in d.items():
            if not isinstance(v, dict):
                lines.append(f"{k} = {val(v)}")
        for k, v in d.items():
            if isinstance(v, dict):
                table(f"{prefix}.{k}" if prefix else k, v)

    table("", doc)
    return "\n".join(lines) + "\n"


def page_text(page: str, skip: tuple[str, ...] = ("style", "script", "title")) -> list[str]:
    """The text chunks a browser shows of an HTML page (outside `skip` elements)."""
    from html.parser import HTMLParser

    class _Text(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.chunks: list[str] = []
            self._skip = 0

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            self._skip += tag in skip

        def handle_endtag(self, tag: str) -> None:
            self._skip -= tag in skip

        def handle_data(self, data: str) -> None:
            if not self._skip and data.strip():
                self.chunks.append(data)

    t = _Text()
    t.feed(page)
    return t.chunks
