"""The bench refuses a time below the physical floor (the bytes a pass must move over the
device's peak memory bandwidth): a side stream the timer never waited for reported 169.6 % of
the copy ceiling on an H200 before this rule. blockattn's own measured shape-P forward is not
refused."""

from __future__ import annotations

from blockattn.bench.measure import impossible

# shape P, bf16, D=128: 1,428,674 tokens x 4 heads x 128 x 2 bytes per (T, H, D) tensor
TENSOR = 1_428_674 * 4 * 128 * 2
H200_PEAK = 2 * 3_201e6 * 6144 / 8 / 1e12  # memory clock 3201 MHz, 6144-bit bus: ~4.9 TB/s


def test_side_stream_time_is_refused() -> None:
    # the measured side-stream forward: 0.803 ms for q, k, v read and O written
    why = impossible(0.803, 4 * TENSOR, H200_PEAK)
    assert why is not None and "impossible" in why and "side stream" in why


def test_blockattn_forward_is_not_refused() -> None:
    # results/h200_2026-11-27d/fa4_bench_e82f199: blockattn D128 forward 1.371 ms (98.8 %)
    assert impossible(1.371, 4 * TENSOR, H200_PEAK) is None
    # and the backward, 2.734 ms for 7 tensors moved
    assert impossible(2.734, 7 * TENSOR, H200_PEAK) is None


def test_no_device_no_floor() -> None:
    assert impossible(0.001, 4 * TENSOR, None) is None
