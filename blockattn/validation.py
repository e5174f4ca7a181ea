"""Input checks for the public kernel API. Every error names the offending argument."""

from __future__ import annotations

import math

import torch

SUPPORTED_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
SUPPORTED_HEAD_DIMS = (64, 128)
MAX_BLOCK_SIZE = 128  # one (block, D) tile of q, k, v, dO must fit in registers
# float32 inputs run as FMA-loop dots (exact products: the reference path, never a speed one). On
# a GPU a 128-row tile spills about 60 KB (forward) and 170 KB (backward) of registers per thread
# (sm_90 AOT build, D=64) and its build takes minutes: refused there; the interpreter (CPU) runs
# any block size.
FP32_GPU_MAX_BLOCK_SIZE = 64


def fp32_gpu_block_refusal(dtype: torch.dtype, on_gpu: bool, block_size: int) -> str | None:
    """Why the GPU kernels refuse float32 inputs at this block size (None: they take it)."""
    if dtype != torch.float32 or not on_gpu or block_size <= FP32_GPU_MAX_BLOCK_SIZE:
        return None
    return (f"block_size={block_size} with float32 inputs on a GPU: the kernels take float32 up "
            f"to block_size {FP32_GPU_MAX_BLOCK_SIZE} (a 128-row float32 tile spills about "
            "170 KB of registers per thread and takes minutes to build); use bfloat16 or "
            f"float16, or block_size <= {FP32_GPU_MAX_BLOCK_SIZE}")  # fmt: skip


def check_attention_inputs(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    offsets: torch.Tensor,
    *,
    block_size: int,
    scale: float | None,
    sinu_pos: torch.Tensor | None,
    max_seq_len: int | None,
    check_offset_values: bool,
) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 3:
            raise ValueError(
                f"{name} must be jagged (T, H, D), got {t.dim()} dims {tuple(t.shape)}"
            )
        if t.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"{name}.dtype must be one of {SUPPORTED_DTYPES}, got {t.dtype}")
    for name, t in (("k", k), ("v", v)):
        if t.shape != q.shape:
            raise ValueError(f"{name}.shape {tuple(t.shape)} must equal q.shape {tuple(q.shape)}")
        if t.dtype != q.dtype:
            raise TypeError(f"{name}.dtype {t.dtype} must equal q.dtype {q.dtype}")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}")
    T, _, D = q.shape
    if D not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"head_dim (q.shape[-1]) must be one of {SUPPORTED_HEAD_DIMS}, got {D}")
    if not isinstance(offsets, torch.Tensor):
        raise TypeError(f"offsets must be a torch.Tensor, got {type(offsets).__name__}")
    if offsets.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"offsets.dtype must be int32 or int64, got {offsets.dtype}")
    if offsets.dim() != 1 or offsets.numel() < 1:
        raise ValueError(f"offsets must be 1-D (B+1,), got shape {tuple(offsets.shape)}")
    if offsets.device != q.device:
        raise ValueError(f"offsets is on {offsets.device} but q is on {q.device}")
    if isinstance(block_size, bool) or not isinstance(block_size, int):
        raise TypeError(f"block_size must be an int, got {type(block_size).__name__}")
    if not 1 <= block_size <= MAX_BLOCK_SIZE:
        raise ValueError(f"block_size must be in [1, {MAX_BLOCK_SIZE}], got {block_size}")
    if (why := fp32_gpu_block_refusal(q.dtype, q.is_cuda, block_size)) is not None:
        raise ValueError(why)
    if scale is not None:
        if isinstance(scale, bool) or not isinstance(scale, (int, float)):
            raise TypeError(f"scale must be a float or None, got {type(scale).__name__}")
        if not math.isfinite(scale):
            raise ValueError(f"scale must be finite, got {scale}")
    if max_seq_len is not None and (
        isinstance(max_seq_len, bool) or not isinstance(max_seq_len, int) or max_seq_len < 0
    ):
        raise ValueError(f"max_seq_len must be a non-negative int or None, got {max_seq_len!r}")
    if sinu_pos is not None:
        if not isinstance(sinu_pos, torch.Tensor):
            raise TypeError(f"sinu_pos must be a torch.Tensor, got {type(sinu_pos).__name__}")
        if sinu_pos.shape != (T, D):
            raise ValueError(
                f"sinu_pos.shape must be (T, D) = {(T, D)}, got {tuple(sinu_pos.shape)}"
            )
        if not sinu_pos.is_floating_point():
            raise TypeError(f"sinu_pos.dtype must be floating point, got {sinu_pos.dtype}")
        if sinu_pos.device != q.device:
            raise ValueError(f"sinu_pos is on {sinu_pos.device} but q is on {q.device}")
    if check_offset_values:
        check_offsets_values(offsets, T, max_seq_len)


def check_offsets_values(offsets: torch.Tensor, T: int, max_seq_len: int | None) -> None:
    """Value checks on offsets. On CUDA this reads the tensor back: one host sync."""
    off = offsets.detach().to("cpu", torch.int64)
    if int(off[0]) != 0:
        raise ValueError(f"offsets[0] must be 0, got {int(off[0])}")
    if int(off[-1]) != T:
        raise ValueError(f"offsets[-1] must equal T = q.shape[0] = {T}, got {int(off[-1])}")
    lengths = off[1:] - off[:-1]
    if off.numel() > 1 and bool((lengths < 0).any()):
        i = int(torch.nonzero(lengths < 0)[0])
        raise ValueError(
            f"offsets must be non-decreasing: offsets[{i + 1}]={int(off[i + 1])} < "
            f"offsets[{i}]={int(off[i])}"
        )
    if max_seq_len is not None and off.numel() > 1 and int(lengths.max()) > max_seq_len:
        raise ValueError(
            f"max_seq_len={max_seq_len} is below the longest sequence ({int(lengths.max())})"
        )
