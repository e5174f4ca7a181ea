"""Which kernel path runs a launch: the portable kernels (`attention.py`), the opt-in Hopper
TMA path (`attention_hopper.py`), the Gluon backward (`attention_gluon.py`; fused rotary:
`attention_gluon_rotary.py`) or the Gluon fused-rotary forward
(`attention_gluon_rotary_fwd.py`). It sits above
them, so no path imports another's launcher; ops, the bench and the tools launch through
`attention_fwd` / `attention_bwd` here."""

from __future__ import annotations

import os
import warnings

import torch
from torch import Tensor

from blockattn.kernels import attention as portable
from blockattn.kernels import attention_hopper as AH
from blockattn.kernels.tile_math import _SPLIT_DTYPES, INTERPRET, block_rows
from blockattn.kernels.tiles import TileTable

try:  # written against triton 3.6's Gluon Hopper API; another triton may lack it
    from blockattn.kernels import attention_gluon as G
    from blockattn.kernels import attention_gluon_rotary as GR
    from blockattn.kernels import attention_gluon_rotary_fast as GF
    from blockattn.kernels import attention_gluon_rotary_fwd as GRF
except ImportError as exc:
    G = GR = GRF = GF = None
    _NO_GLUON = f"this triton's Gluon lacks what the path uses ({exc})"


PATHS = ("auto", "portable", "hopper", "prefer-hopper", "gluon", "prefer-gluon")
# The declared precision modes: "accurate" (the default: split-operand MMAs, accuracy model
# fp32-split-operands) and "fast" (operands rounded once to the input dtype, as FA v2 rounds P
# and dS: model fp32-rounded-operands). The fast mode runs the portable kernels only, whatever
# BLOCKATTN_KERNEL_PATH says: the Gluon and Hopper kernels implement the accurate mode.
PRECISIONS = ("accurate", "fast")


def _fast(precision: str) -> bool:
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r}: expected one of {', '.join(PRECISIONS)}")
    return precision == "fast"


def gluon_fast(kernel: str, q: Tensor, sinu_pos: Tensor | None, block_size: int,
               tensors: tuple[Tensor, ...]) -> bool:
    """Whether the Gluon fast-mode kernels (attention_gluon_rotary_fast) run this fast-mode
    launch: as gluon_bwd, BLOCKATTN_KERNEL_PATH=gluon forces them (raising where they cannot
    run), prefer-gluon takes them wherever they can run, "auto" on sm_90 for the (kernel,
    rotary, head dim) in their CONFIGS; any other path runs the portable fast kernels."""
    want = _wanted()
    if want not in ("auto", "gluon", "prefer-gluon"):
        return False
    if want == "auto" and (INTERPRET or GF is None or (kernel, sinu_pos is not None,
                                                       q.shape[2]) not in GF.CONFIGS):
        return False
    why = _NO_GLUON if GF is None else GF.unsupported(q, sinu_pos, block_size)
    return _gluon_runs(why, want, f"fast {'rotary ' if sinu_pos is not None else ''}{kernel}",
                       q, tensors)


def _wanted() -> str:
    want = os.environ.get("BLOCKATTN_KERNEL_PATH", "auto")
    if want not in PATHS:
        raise ValueError(f"BLOCKATTN_KERNEL_PATH={want!r}: expected one of {', '.join(PATHS)}")
    return want


def _on_sm90(q: Tensor) -> bool:
    return q.device.type == "cuda" and torch.cuda.get_device_capability(q.device) == (9, 0)


def gluon_bwd(q: Tensor, sinu_pos: Tensor | None, block_size: int, centred: bool,
              tensors: tuple[Tensor, ...]) -> bool:
    """Whether the Gluon backward runs this launch.

    BLOCKATTN_KERNEL_PATH=gluon forces it (raising, with the reason, where it cannot run; the
    forward then takes its own default); prefer-gluon takes it wherever it can run (what runs
    the whole suite against it). Unset or "auto" takes it on sm_90 for the head dims in
    attention_gluon.configs() (CONFIGS and GPU_CONFIGS: entered where the device measured it
    faster) wherever it can run; attention_gluon.chains() and lean() then pick its one-chain,
    two-chain or one-stage kernel (BLOCKATTN_GLUON_CHAINS overrides). A fused-rotary backward
    goes to attention_gluon_rotary instead, by default for the dtypes and head dims in its
    CONFIGS.
    Gluon has no interpreter: under TRITON_INTERPRET=1 it never runs (forced: an error).
    """
    want = _wanted()
    if want not in ("auto", "gluon", "prefer-gluon"):
        return False
    if want == "auto" and (INTERPRET or G is None or q.shape[2] not in (
            G.configs(q.device) if sinu_pos is None else GR.CONFIGS.get(q.dtype, ()))):
        return False  # no measured config: skip the checks below on every launch
    if G is None:
        why = _NO_GLUON
    else:  # a fused-rotary backward goes to attention_gluon_rotary
        why = (G if sinu_pos is None else GR).unsupported(q, sinu_pos, block_size, centred)
    return _gluon_runs(why, want, "backward", q, tensors)


def gluon_fwd(q: Tensor, sinu_pos: Tensor | None, block_size: int,
              tensors: tuple[Tensor, ...]) -> bool:
    """Whether the Gluon fused-rotary forward (attention_gluon_rotary_fwd) runs this launch: a
    plain forward never does (the portable forward is at the copy ceiling). As gluon_bwd:
    BLOCKATTN_KERNEL_PATH=gluon forces it (raising where it cannot run), prefer-gluon takes it
    wherever it can run, "auto" on sm_90 for the dtypes and head dims in its CONFIGS."""
    want = _wanted()
    if sinu_pos is None or want not in ("auto", "gluon", "prefer-gluon"):
        return False
    if want == "auto" and (INTERPRET or GRF is None
                           or q.shape[2] not in GRF.CONFIGS.get(q.dtype, ())):
        return False  # no measured config: skip the checks below on every launch
    why = _NO_GLUON if GRF is None else GRF.unsupported(q, sinu_pos, block_size)
    return _gluon_runs(why, want, "forward", q, tensors)


def _gluon_runs(why: str | None, want: str, kernel: str, q: Tensor,
                tensors: tuple[Tensor, ...]) -> bool:
    """Whether a Gluon kernel runs, given why its module says it cannot (or None): it also
    needs an sm_90 GPU (no interpreter) and tensors TMA can walk. Forced (want "gluon") and
    unable: an error naming the reason."""
    if why is None and INTERPRET:
        why = "Gluon kernels have no interpreter (TRITON_INTERPRET=1)"
    elif why is None and not _on_sm90(q):
        why = "it needs an sm_90 GPU"
    elif why is None and not AH.eligible(*tensors):
        why = "TMA needs 16-byte aligned, head-packed (T, H, D) tensors with unit stride along D"
    if why and want == "gluon":
        raise RuntimeError(f"BLOCKATTN_KERNEL_PATH=gluon cannot run this {kernel}: {why}")
    return why is None


def kernel_path(kernel: str, q: Tensor, sinu_pos: Tensor | None, loaded: tuple[Tensor, ...],
                block_size: int = 64) -> str:  # fmt: skip
    """"hopper" or "portable": which kernels run this launch.

    BLOCKATTN_KERNEL_PATH=portable|hopper forces one (hopper raises, with the reason, where it
    cannot run); "prefer-hopper" takes the Hopper path wherever it can run and the portable one
    elsewhere (fp32, inputs TMA cannot walk, a row tile it does not take: block_size > 64, see
    attention_hopper.unsupported_tile): what runs the whole suite against it.
    Unset or "auto" takes the Hopper path on sm_90 for 16-bit inputs whose (kernel, rotary,
    head dim) has a measured config in attention_hopper.CONFIGS (entered only where the device
    measured it faster) and whose loaded tensors TMA can read.
    """
    want = _wanted()
    if want in ("gluon", "prefer-gluon"):
        want = "auto"  # the Gluon choices are gluon_bwd's and gluon_fwd's; the rest: default
    if want == "portable" or (want == "auto" and INTERPRET):
        return "portable"
    if want == "auto" and (kernel, sinu_pos is not None, q.shape[2]) not in AH.CONFIGS:
        return "portable"  # no measured config: skip the checks below on every launch
    why = None
    # The interpreter runs the Hopper kernels' source too (tests, mutants on CPU).
    if not (INTERPRET or _on_sm90(q)):
        why = "it needs an sm_90 GPU"
    elif q.dtype not in _SPLIT_DTYPES:
        why = f"q.dtype={q.dtype} (it takes bfloat16 and float16)"
    elif not AH.eligible(*loaded):
        why = "TMA needs 16-byte aligned, head-packed (T, H, D) inputs with unit stride along D"
    else:
        why = AH.unsupported_tile(block_rows(block_size))
    if want == "hopper":
        if why:
            raise RuntimeError(f"BLOCKATTN_KERNEL_PATH=hopper cannot run: {why}")
        return "hopper"
    return "portable" if why else "hopper"  # prefer-hopper, or auto with a measured config


def _hopper_falls_back(kernel: str, exc: Exception) -> None:
    """A Hopper build that raised Triton's OutOfResources at launch (it never ran, so nothing
    was written): prefer-hopper / auto fall back to the portable kernels with a warning naming
    the reason; forced (hopper), a RuntimeError naming it. Anything else propagates."""
    if type(exc).__name__ != "OutOfResources":
        raise exc
    why = f"{kernel} build does not fit this GPU: {exc}"
    if _wanted() == "hopper":
        raise RuntimeError(f"BLOCKATTN_KERNEL_PATH=hopper cannot run: {why}") from exc
    warnings.warn(f"blockattn: Hopper path falls back to the portable kernels ({why})",
                  RuntimeWarning, stacklevel=3)  # fmt: skip


def attention_fwd(q: Tensor, k: Tensor, v: Tensor, table: TileTable, sinu_pos: Tensor | None,
                  scale: float, block_size: int, rotate_v: bool,
                  out: Tensor | None = None, precision: str = "accurate") -> Tensor:
    """Forward launch on validated inputs (unit stride along D). Returns O (T, H, D)."""
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device) if out is None else out
    if _fast(precision):
        if sinu_pos is not None and gluon_fast("fwd", q, sinu_pos, block_size, (q, k, v, o)):
            return GF.launch_fwd(q, k, v, o, table, sinu_pos, scale, rotate_v)
        return portable.launch_fwd(q, k, v, table, sinu_pos, scale, block_size, rotate_v, o,
                                   fast=True)
    if gluon_fwd(q, sinu_pos, block_size, (q, k, v, o)):
        return GRF.launch_fwd(q, k, v, o, table, sinu_pos, scale, rotate_v)
    if kernel_path("fwd", q, sinu_pos, (q, k, v), block_size) == "hopper":
        try:
            return AH.launch_fwd(q, k, v, o, table, sinu_pos, scale, block_size, rotate_v)
        except Exception as exc:  # a build that does not fit this GPU: nothing was written
            _hopper_falls_back("fwd", exc)
    return portable.launch_fwd(q, k, v, table, sinu_pos, scale, block_size, rotate_v, o)


def attention_bwd(q: Tensor, k: Tensor, v: Tensor, grad_out: Tensor, table: TileTable,
                  sinu_pos: Tensor | None, scale: float, block_size: int, rotate_v: bool,
                  grads: tuple[Tensor, Tensor, Tensor] | None = None,
                  centred: bool = True,
                  precision: str = "accurate") -> tuple[Tensor, Tensor, Tensor]:
    """Backward launch. Returns (dq, dk, dv) w.r.t. the un-rotated q, k, v.

    centred=False runs the previous dS numerics (uncentred dP, one-pass Di, unscaled fp16 dS
    split), kept for comparison; the default is the centred path (see _bwd_tile).
    precision="fast": the fast mode (PRECISIONS), on the portable kernels.
    """
    if grads is None:
        grads = tuple(torch.empty(q.shape, dtype=q.dtype, device=q.device) for _ in range(3))
    if _fast(precision):
        if gluon_fast("bwd", q, sinu_pos, block_size, (q, k, v, grad_out, *grads)):
            return GF.launch_bwd(q, k, v, grad_out, grads, table, sinu_pos, scale, rotate_v)
        return portable.launch_bwd(q, k, v, grad_out, table, sinu_pos, scale, block_size,
                                   rotate_v, grads, fast=True)
    if gluon_bwd(q, sinu_pos, block_size, centred, (q, k, v, grad_out, *grads)):
        if sinu_pos is not None:
            return GR.launch_bwd(q, k, v, grad_out, grads, table, sinu_pos, scale, rotate_v)
        return G.launch_bwd(q, k, v, grad_out, grads, table, scale)
    if kernel_path("bwd", q, sinu_pos, (q, k, v, grad_out), block_size) == "hopper":
        try:
            return AH.launch_bwd(q, k, v, grad_out, grads, table, sinu_pos, scale, block_size,
                                 rotate_v, centred)
        except Exception as exc:  # a build that does not fit this GPU: nothing was written
            _hopper_falls_back("bwd", exc)
    return portable.launch_bwd(q, k, v, grad_out, table, sinu_pos, scale, block_size, rotate_v,
                               grads, centred)
