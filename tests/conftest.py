"""Test-session set-up shared by every test directory.

Order matters: `blockattn/__init__` imports the Triton kernels, and TRITON_INTERPRET is read when
they are defined, so the environment (xdist GPU pin, interpreter on CPU) is configured here by
loading blockattn/run/env.py *by path* - importing it as `blockattn.run.env` would run
`blockattn/__init__` first.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

_ENV_PY = Path(__file__).resolve().parents[1] / "blockattn" / "run" / "env.py"
_spec = importlib.util.spec_from_file_location("_blockattn_env_bootstrap", _ENV_PY)
_env = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_env)
DEVICE = _env.configure()  # pins gwN -> one GPU, sets TRITON_INTERPRET=1 without CUDA
# Multi-GPU CI (ci/xdist_plan.py, loaded by path): tests longest first from a cost table.
_PLAN_PY = Path(__file__).resolve().parents[1] / "ci" / "xdist_plan.py"
_plan_spec = importlib.util.spec_from_file_location("_blockattn_xdist_plan", _PLAN_PY)
_xdist_plan = importlib.util.module_from_spec(_plan_spec)
_plan_spec.loader.exec_module(_xdist_plan)
_GPU_COSTS = Path(__file__).resolve().parents[1] / "ci" / "baselines" / "test_costs_gpu.json"

from hypothesis import settings  # noqa: E402  (after the environment is configured)

from blockattn.cases import strategies  # noqa: E402  (registers the ci/gpu/nightly profiles)

# --hypothesis-profile (Hypothesis' own pytest option) is applied after this and wins; the env
# var picks a profile for tools that cannot pass pytest options.
settings.load_profile(
    os.environ.get(strategies.PROFILE_ENV) or ("gpu" if DEVICE == "cuda" else "ci")
)


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [
        f"blockattn: device={DEVICE} TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET', '0')} "
        f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')} "
        f"hypothesis profile={settings.get_current_profile_name()}"
    ]


# CI's budget (`bash .ci/run` <= 15 min on 2 cores): under the interpreter these run in the slow
# tier (`-m slow`), on a GPU in the quick one. Each has a quick sibling that covers its property:
# the chunk tests keep one plain and one rotate-qk case, the battery's witness gates keep the
# contiguous-layout kernel (every property has its own battery unit test; blockattn's battery
# passes in test_the_faithful_kernel_and_blockattn_pass_every_property[blockattn], and a thin
# outside wrapper of block_attention like `faithful` passes every property in
# tests/plugin/test_pytest_plugin.py::test_clean_kernel_passes_with_readable_ids),
# compile-check keeps the Gluon builds' spill gate.
CPU_SLOW = {
    "tests/kernels/test_attention.py::test_rotary_chunks_match_whole_tile[fp16-rotate-v]",
    "tests/kernels/test_attention.py::test_rotary_chunks_match_whole_tile[bf16-rotate-qk]",
    *(f"tests/kernels/test_attention.py::test_rotary_fwd_chunks_match_whole_tile[{dt}-{rv}-{d}]"
      for dt in ("bf16", "fp16") for rv in ("rotate-v", "rotate-qk") for d in (128, 64)
      if (dt, rv, d) not in {("bf16", "rotate-v", 128), ("fp16", "rotate-qk", 64)}),
    *(f"tests/contract/test_battery.py::test_gate_fails_each_broken_promise_and_passes_the_"
      f"faithful_kernel[{k}]"
      for k in ("flaky-determinism", "fixed_block-block-size", "scribbler-inputs-untouched",
                "faithful-None",  # faithful: its battery passes in the plugin's clean test
                "leaky-containment")),  # the gate: assumes_contiguous-layout; containment:
    # test_a_leak_across_sequences_fails_containment (the battery's own verdict and markdown)
    *(f"tests/contract/test_battery.py::test_the_faithful_kernel_and_blockattn_pass_every_"
      f"property[{k}]" for k in ("faithful", "blockattn")),
    # faithful: the plugin's clean kernel (bf16/fp16, D 64/128, no options) covers it;
    # blockattn: the quick mutants test's control is a gate with blockattn's whole battery and
    # must pass, and each property's witness test fails if that property is skipped
    "tests/kernels/test_compile_check.py::test_subset_builds_with_tensor_cores",
    "tests/kernels/test_compile_check.py::test_placed_d64_rotary_variants_spill_free",
}


def _costs() -> str | None:
    """The cost table the tests go by, longest first: BLOCKATTN_TEST_COSTS, on a GPU by default
    the GPU tier's measured table; set empty: collection order. In collection order a one-GPU
    tier's last long tests formed its tail (an H200 at 32e609d: 338 s, most workers idle after
    168-257 s; `xdist_plan.simulate` of the same tests longest first: 193 s)."""
    return _xdist_plan.costs_path(
        default=_GPU_COSTS if DEVICE == "cuda" and _GPU_COSTS.is_file() else None)


def pytest_configure(config: pytest.Config) -> None:
    # Longest first goes one unit a send under xdist's loadgroup scheduler: its `load` scheduler
    # first hands each worker N/4W consecutive tests (the first would get all the longest) and
    # cannot keep the tests of a module-scoped fixture on one worker (ci/xdist_plan.py). A
    # worker parses the command line again (no --dist there): the controller's choice is sent.
    worker_input = getattr(config, "workerinput", None)
    if worker_input is not None:
        config.option.loadgroup = bool(worker_input.get("blockattn_loadgroup"))
    elif _costs() and getattr(config.option, "dist", "no") == "load":
        config.option.dist = "loadgroup"
        config.option.loadscopereorder = False  # keep our order, not xdist's by unit size


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: object) -> None:  # xdist's, on the controller
    node.workerinput["blockattn_loadgroup"] = node.config.option.dist == "loadgroup"


@pytest.hookimpl(tryfirst=True)  # before -m deselects and xdist's group ids: marks here count
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    groups = _xdist_plan.order_items(items, _costs())
    for item in items:
        if groups and item.nodeid in groups:
            item.add_marker(pytest.mark.xdist_group(groups[item.nodeid]))
    if DEVICE == "cuda":
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (running on CPU)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
        if item.nodeid in CPU_SLOW:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def device() -> str:
    """'cuda' or 'cpu' (the interpreter tier)."""
    return DEVICE


GPU_CACHE_KEEP = 1 << 30  # bytes of freed GPU memory a worker may keep cached between tests


@pytest.fixture(autouse=True)
def _give_back_gpu_memory() -> object:
    """On a GPU, a worker hands its allocator's cache back after a test that left more than
    GPU_CACHE_KEEP reserved: 16 workers keeping 7-8 GiB each left the shape-P tests' own
    processes out of memory (the tier at ccfbba7 on an H200: 3 tests failed so)."""
    yield
    if DEVICE == "cuda":
        import torch

        if torch.cuda.is_initialized() and torch.cuda.memory_reserved() > GPU_CACHE_KEEP:
            torch.cuda.empty_cache()


# ---- multi-GPU CI evidence (ci/multi_gpu.sh): which GPU each xdist worker ran its tests on ----
_RAN: list[str] = []
_SECONDS: dict[str, float] = {}  # per test, setup + call + teardown: the next run's cost table
_FAILED: set[str] = set()  # tests with a failed phase: named in the per-test lines


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    nodeid = _xdist_plan.base_nodeid(report.nodeid)  # without loadgroup's @group
    if report.when == "call" and not report.skipped:
        _RAN.append(nodeid)
    _SECONDS[nodeid] = _SECONDS.get(nodeid, 0.0) + report.duration
    if report.failed:
        _FAILED.add(nodeid)
    log_dir = os.environ.get("BLOCKATTN_WORKER_LOG")
    if log_dir and report.when == "teardown" and os.environ.get("PYTEST_XDIST_WORKER"):
        # One line per test as it ends (its seconds, when it ended, whether it failed): a run
        # killed by its time limit still leaves its times, its progress and its failures.
        _xdist_plan.append_duration(log_dir, os.environ["PYTEST_XDIST_WORKER"], nodeid,
                                    _SECONDS[nodeid], failed=nodeid in _FAILED)  # fmt: skip


def pytest_sessionfinish(session: pytest.Session) -> None:
    """With BLOCKATTN_WORKER_LOG=DIR, each process writes DIR/<worker>.json: its GPU pin, the
    GPU's uuid, the tests it ran and the CUDA memory it used (proof the GPU did the work)."""
    log_dir = os.environ.get("BLOCKATTN_WORKER_LOG")
    if not log_dir:
        return
    import json

    import torch

    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    info = {"worker": worker, "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "tests_run": len(_RAN), "device": DEVICE,
            "durations": {k: round(v, 4) for k, v in _SECONDS.items()}}  # fmt: skip
    if DEVICE == "cuda" and torch.cuda.is_initialized():
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, gpu_uuid=str(props.uuid),
                    max_memory_allocated_mib=torch.cuda.max_memory_allocated() / 2**20)  # fmt: skip
    Path(log_dir).mkdir(parents=True, exist_ok=True)
    (Path(log_dir) / f"{worker}.json").write_text(json.dumps(info, indent=1) + "\n")
