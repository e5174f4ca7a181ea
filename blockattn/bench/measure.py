"""Timing, the device copy and read-mostly ceilings and peak-memory measurement."""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch


def cuda() -> bool:
    return torch.cuda.is_available()


def default_gpu_kind() -> str:
    """A slug of torch.cuda.get_device_name() ("NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3"),
    or "cpu". `blockattn bench --gpu-kind` overrides it (e.g. with the lent machine's kind)."""
    if not cuda():
        return "cpu"
    return re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name(0).lower()).strip("-") or "cuda"


def sync() -> None:
    if cuda():
        torch.cuda.synchronize()


def time_ms(fn: Callable[[], Any], warmup_ms: float, rep_ms: float, smoke: bool = False) -> float:
    """Median milliseconds per call.

    CUDA: `triton.testing.do_bench` (CUDA events, L2 flushed between calls). Smoke/CPU: a plain
    wall-clock median of a few calls, since do_bench needs a GPU.
    """
    if smoke or not cuda():
        # Smoke: the FP64 check already ran (and warmed) every callable; one timed call.
        times = []
        for _ in range(1 if smoke else 3):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))


def peak_memory_mb(fn: Callable[[], Any]) -> float | None:
    """Peak allocated bytes during one call above what was live before it (inputs included)."""
    if not cuda():
        return None
    sync()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    sync()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return peak / 2**20


def copy_ceiling(n_bytes: int, warmup_ms: float, rep_ms: float, smoke: bool) -> dict[str, Any]:
    """Device-to-device copy bandwidth: bytes read + bytes written per second.

    The buffer (default 2 GiB each way) is far larger than L2, so this is the HBM roofline a
    memory-bound kernel can approach.
    """
    dev = "cuda" if cuda() else "cpu"
    n = n_bytes // 2
    bufs = [torch.empty(n, device=dev, dtype=torch.bfloat16).normal_() for _ in range(2)]
    ms = time_ms(lambda: bufs[1].copy_(bufs[0]), warmup_ms, rep_ms, smoke)
    moved = 2 * n * 2
    bufs.clear()
    if cuda():
        torch.cuda.empty_cache()
    return {
        "buffer_bytes": n * 2,
        "bytes_moved": moved,
        "ms": ms,
        "tbps": moved / (ms * 1e-3) / 1e12,
        "method": "dst.copy_(src) bf16, median" + (" wall clock" if smoke else " do_bench"),
    }


READ_MOSTLY_MIX = (3, 1)  # (buffers read, buffers written): the forward's q, k, v -> O
# Triton launch shapes tried for the 3r:1w stream (BLOCK, num_warps); the fastest counts.
STREAM_SHAPES = ((2048, 4), (4096, 8), (8192, 8))


def read_mostly_ceiling(n_bytes: int, warmup_ms: float, rep_ms: float,
                        smoke: bool) -> dict[str, Any]:  # fmt: skip
    """Bandwidth of the forward's read:write mix (3 buffers read, 1 written), bytes read +
    written per second, the fastest of: torch.addcmul(a, b, c, out=d) and a Triton stream
    (d = a + b + c) at a few launch shapes. Each buffer is n_bytes / 2 (1 GiB by default, near the
    size of a shape-P q at D = 128, 1.4 GB, far beyond L2), measured in the same run as the copy
    ceiling. Reads cost the memory less than writes (no write-to-read turnarounds), so this is
    the ceiling a read-mostly pass can reach where the 1:1 copy is not; `ceiling_checks` says
    whether it bounds the copy and every pass (it must)."""
    dev = "cuda" if cuda() else "cpu"
    n = max(1, n_bytes // 4)  # elements per buffer (bf16: n_bytes / 2 bytes each)
    reads, writes = READ_MOSTLY_MIX
    methods = _time_streams(
        [torch.empty(n, device=dev, dtype=torch.bfloat16).normal_() for _ in range(4)],
        warmup_ms, rep_ms, smoke)  # fmt: skip
    if cuda():
        torch.cuda.empty_cache()
    moved = (reads + writes) * n * 2
    best = min(methods, key=methods.__getitem__)
    ms = methods[best]
    return {
        "reads": reads,
        "writes": writes,
        "buffer_bytes": n * 2,
        "bytes_moved": moved,
        "ms": ms,
        "tbps": moved / (ms * 1e-3) / 1e12,
        "method": f"{best} (fastest of {len(methods)}), bf16, median"
        + (" wall clock" if smoke or not cuda() else " do_bench"),
        "methods_tbps": {k: moved / (v * 1e-3) / 1e12 for k, v in methods.items()},
    }


def _time_streams(bufs: list[torch.Tensor], warmup_ms: float, rep_ms: float,
                  smoke: bool) -> dict[str, float]:  # fmt: skip
    """Median ms of each 3r:1w method over the buffers a, b, c (read) and d (written)."""
    a, b, c, d = bufs
    bufs.clear()
    methods = {"torch.addcmul": time_ms(lambda: torch.addcmul(a, b, c, out=d), warmup_ms, rep_ms,
                                        smoke)}  # fmt: skip
    if cuda():
        from blockattn.bench.streams import stream_3r1w

        for block, warps in STREAM_SHAPES:
            ms = time_ms(lambda bl=block, w=warps: stream_3r1w(a, b, c, d, bl, w), warmup_ms,
                         rep_ms, smoke)  # fmt: skip
            methods[f"triton stream BLOCK={block} warps={warps}"] = ms
    return methods


def top_kernels(fn: Callable[[], Any], n: int = 3) -> str:
    """Names of the n GPU kernels taking the most time in one call (which backend really ran)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    evs = [e for e in prof.key_averages() if getattr(e, "device_time_total", 0) > 0]
    evs.sort(key=lambda e: e.device_time_total, reverse=True)
    return " | ".join(e.key[:90] for e in evs[:n])


def peak_tbps(ceiling_tbps: float | None) -> float | None:
    """The device's peak memory bandwidth (bytes read + written per second, in TB/s): from its
    memory clock and bus width (DDR: two transfers a clock); where torch does not report them,
    1.25x the same run's copy ceiling. No honest kernel moves its bytes faster than this."""
    if not cuda():
        return None
    p = torch.cuda.get_device_properties(0)
    clock_khz, bus_bits = getattr(p, "memory_clock_rate", 0), getattr(p, "memory_bus_width", 0)
    if clock_khz and bus_bits:
        return 2 * clock_khz * 1e3 * bus_bits / 8 / 1e12
    return None if ceiling_tbps is None else 1.25 * ceiling_tbps


def impossible(ms: float, nbytes: int, peak: float | None) -> str | None:
    """Why a measured time is below the physical floor (None: it is not): the bytes the pass
    must move over the device's peak bandwidth. A side stream the timer never waited for,
    cached or skipped work and a patched timer all show as such times."""
    if peak is None or ms <= 0 or not nbytes:
        return None
    floor_ms = nbytes / (peak * 1e12) * 1e3
    if ms < floor_ms:
        return (f"refused as impossible: {ms:.4g} ms is below the physical floor {floor_ms:.4g} ms "
                f"({nbytes / 1e9:.3g} GB at the device's peak {peak:.3g} TB/s): work not waited "
                "for (a side stream), cached or skipped, or a patched timer")
    return None
