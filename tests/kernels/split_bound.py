"""The FP64 judge of the Gluon kernel tests (test_gluon_path, test_gluon_rotary): elementwise
violations of the fp32-split-operands bound (tolerances v5) per output, plain or fused rotary,
backward and the fused-rotary forward. Imported as a sibling module (pytest puts this folder on
sys.path)."""

from __future__ import annotations

import torch


def _judge(q: torch.Tensor, off: torch.Tensor, bounds: dict, got: dict, refs: dict,
           model) -> dict[str, int]:
    from blockattn.bounds.elementwise import TokenMap, elementwise_metrics

    dt = "bfloat16" if q.dtype == torch.bfloat16 else "float16"
    tmap = TokenMap(off, q.shape[0], 64, q.device)
    out = {}
    for nm, y in got.items():
        assert bool(torch.isfinite(y).all()), f"{nm}: unwritten (NaN) or non-finite elements"
        m = elementwise_metrics(y, refs[nm], dt, bound=bounds[nm], c=model.c, tmap=tmap)
        out[nm] = m["bound"]["violations"]
    return out


def _bounds(q, k, v, off, do, sinu, rotate_v):
    """(the fp32-split-operands model, its bounds {"O"[, "dQ", "dK", "dV"]}) at block size 64."""
    from blockattn.bounds import models
    from blockattn.judge import tolerances
    from oracles import error_bound

    name = "fp32-split-operands"
    tol = tolerances.load(tolerances.default_tolerance_dir() / "v5.toml")
    model = models.parse(name, tol.data["models"][name], name)
    dt = "bfloat16" if q.dtype == torch.bfloat16 else "float16"
    (bnd,) = error_bound.attention_error_bounds(q, k, v, off, do, models=[model.resolve(dt)],
                                               sinu_pos=sinu, rotate_v=rotate_v, block_size=64)
    return model, bnd


def split_operand_violations(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             do: torch.Tensor, off: torch.Tensor,
                             got: tuple[torch.Tensor, ...], sinu: torch.Tensor | None = None,
                             rotate_v: bool = True) -> dict[str, int]:
    """{"dQ", "dK", "dV": elements beyond the bound} of `got` against the FP64 oracle (the rotary
    one when `sinu` is given), block size 64; every element must be finite (NaN: unwritten)."""
    import oracles

    if sinu is None:
        ref = oracles.block_attention_backward(q, k, v, off, do, block_size=64)
    else:
        ref = oracles.rotary_block_attention_backward(q, k, v, off, sinu, do, rotate_v=rotate_v)
    model, bnd = _bounds(q, k, v, off, do, sinu, rotate_v)
    names = ("dQ", "dK", "dV")
    return _judge(q, off, bnd, dict(zip(names, got, strict=True)),
                  dict(zip(names, ref, strict=True)), model)


def forward_violations(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, off: torch.Tensor,
                       got: torch.Tensor, sinu: torch.Tensor, rotate_v: bool = True) -> int:
    """Elements of the fused-rotary forward's O beyond the bound against the FP64 rotary oracle,
    block size 64; every element must be finite (NaN: unwritten)."""
    import oracles

    ref = oracles.rotary_block_attention(q, k, v, off, sinu, rotate_v=rotate_v)
    model, bnd = _bounds(q, k, v, off, None, sinu, rotate_v)
    return _judge(q, off, bnd, {"O": got}, {"O": ref}, model)["O"]
