"""A battery probe on the wire: what the judge sends the worker for one probe (every storage
behind the probe's views, whole, with each view's place in it) and how it reads the answer
(the four outputs, then the storages the call changed, copied back over the judge's own so that
inputs-untouched sees what the kernel did)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from blockattn.run.calls import KEYS


@dataclass
class Packed:
    msg: dict[str, Any]  # the request, but for the provider's name and the streams flag
    storages: list[torch.Tensor]  # uint8 views of each distinct storage, shared with the probe
    budget: int  # the most bytes an honest answer takes
    like: torch.Tensor  # where the outputs go (the probe's q)


def pack(p: Any, repeats: int = 1) -> Packed:
    """Probe `p` as storages and views into them (aliasing between inputs survives the trip),
    called `repeats` times in a row on the same inputs (determinism: one trip, not one each)."""
    storages: list[torch.Tensor] = []
    views: dict[str, Any] = {}
    index: dict[int, int] = {}
    named = {"q": p.q, "k": p.k, "v": p.v, "grad_out": p.grad_out, "offsets": p.offsets,
             "sinu_pos": p.sinu_pos,
             **{f"buffer:{n}": b for n, b in p.buffers.items()}}  # fmt: skip
    for name, t in named.items():
        if t is None:
            views[name] = None
            continue
        st = t.untyped_storage()
        key = st.data_ptr()
        if key not in index:
            index[key] = len(storages)
            storages.append(torch.empty(0, dtype=torch.uint8, device=t.device)
                            .set_(st, 0, (st.nbytes(),), (1,)))  # fmt: skip
        views[name] = {"storage": index[key], "dtype": str(t.dtype).removeprefix("torch."),
                       "offset": t.storage_offset(), "shape": list(t.shape),
                       "stride": list(t.stride())}  # fmt: skip
    fields = {"name": p.name, "prop": p.prop, "block_size": p.block_size, "scale": p.scale,
              "rotate_v": p.rotate_v, "max_seq_len": p.max_seq_len, "nested": p.nested,
              "poisoned": p.poisoned}  # fmt: skip
    msg = {"op": "probe", "views": views, "fields": fields, "buffer_names": list(p.buffers),
           "device": p.q.device.type, "repeats": repeats}  # fmt: skip
    budget = repeats * 4 * 4 * max(1, p.q.numel()) * 8 + sum(s.numel() for s in storages) + 1024
    return Packed(msg, storages, budget, p.q)


def unpack(header: dict, outs: list, packed: Packed, on_host: bool = False
           ) -> list[dict[str, torch.Tensor]]:  # fmt: skip
    """The outputs of each call of the worker's answer, on the probe's device (`on_host`: where
    they arrived, the judge's memory); the changed storages written back into the probe's.
    Raises, naming why, on a refused or malformed answer."""
    storages, r = packed.storages, int(packed.msg["repeats"])
    if header.get("status") != "ok":
        raise RuntimeError(f"{header.get('reason')}")
    n = len(header.get("keys") or ())
    changed = header.get("changed")
    if (n != 4 or not isinstance(changed, list) or len(set(changed)) != len(changed)
            or not all(isinstance(i, int) and 0 <= i < len(storages) for i in changed)
            or len(outs) != 4 * r + len(changed)):
        raise RuntimeError("malformed answer from the worker (outputs or buffers missing)")
    # the storages the calls changed come back (inputs-untouched reads them); the others hold
    # what was sent
    for i, after in zip(changed, outs[4 * r:], strict=True):
        st = storages[i]
        if after.numel() == st.numel() and after.dtype == torch.uint8:
            st.copy_(after.to(st.device))
        else:
            raise RuntimeError(f"malformed answer from the worker (buffer {i} resized)")
    if header.get("in_flight"):
        raise RuntimeError(f"output refused: {header['in_flight']}")
    if header.get("aliases"):
        raise RuntimeError(f"output-contract: {header['aliases']} alias an input's memory")
    dev = torch.device("cpu") if on_host else packed.like.device
    return [{k: t.to(dev) for k, t in zip(KEYS, outs[4 * j:4 * j + 4], strict=True)}
            for j in range(r)]  # fmt: skip
