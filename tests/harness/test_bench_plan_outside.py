"""`bench --provider` kernels are timed at the main shapes and along both sweeps, so every plot
shows them beside blockattn and FA v2 (issue 43, item 5: they were left out of every PNG)."""

from __future__ import annotations

from blockattn.bench.runner import BenchConfig, plan


def test_outside_kernels_are_in_every_plotted_group() -> None:
    specs = plan(BenchConfig(outside=("mine", "mine_rotary")))
    groups = {s.group for s in specs if "mine" in s.providers}
    assert {"main", "sweep_len", "sweep_sparsity"} <= groups, groups
    assert all("mine" not in s.providers for s in specs if s.group in ("extra", "projection"))


def test_no_sweeps_keeps_them_at_the_main_shapes() -> None:
    specs = plan(BenchConfig(outside=("mine",), sweeps=False))
    assert {s.group for s in specs if "mine" in s.providers} == {"main"}
