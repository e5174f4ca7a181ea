"""Multi-GPU CI planning (ci/xdist_plan.py, issue 44 item 4): the worker count from cores and
memory, the longest-first order handed to xdist, the cost table merged from the worker logs,
and the scaling table's verdict (N GPUs >= 0.8 N times one GPU at its best -n)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("xdist_plan", REPO / "ci" / "xdist_plan.py")
xp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(xp)


def test_worker_count_follows_cores_then_memory() -> None:
    assert xp.worker_count(1, 16, 128, 140) == 12  # one H200 host: the measured best -n 12
    assert xp.worker_count(2, 32, 256, 80) == 24  # 2x H100: 12 a GPU
    assert xp.worker_count(4, 64, 512, 80) == 48
    assert xp.worker_count(1, 32, 256, 80) == 16  # one 80 GB GPU holds 16 workers' contexts
    assert xp.worker_count(2, 32, 40, 80) == 10  # host memory: 10 workers of 4 GiB
    assert xp.worker_count(4, 4, 512, 80) == 4  # at least one worker a GPU
    assert xp.worker_count(3, 32, 256, 80) == 24  # a multiple of the GPU count


def test_longest_first_with_the_first_two_per_worker_paired() -> None:
    costs = {f"t{i}": float(c) for i, c in enumerate([1, 9, 2, 8, 3, 7, 4, 6, 5, 1])}
    ids = list(costs)
    order = xp.lpt_order(ids, costs, workers=2)
    # The 4 longest go out as 9, 8 (one a worker), then 6, 7: worker 1 gets (9, 6), worker 2
    # (8, 7); then 5, 4, 3, 2, 1, 1.
    assert [costs[i] for i in order] == [9, 8, 6, 7, 5, 4, 3, 2, 1, 1]
    assert order[-2:] == ["t0", "t9"]  # ties keep the collection order
    assert sorted(order) == sorted(ids)
    # An unknown test counts as the median known one.
    assert xp.lpt_order(["a", "b", "new"], {"a": 1.0, "b": 3.0}, 1)[1] == "new"
    # On skewed costs the greedy makespan beats the collection order's.
    skew = {f"s{i}": (30.0 if i >= 18 else 1.0) for i in range(24)}  # 6 long ones last
    ids = list(skew)
    assert xp.simulate(xp.lpt_order(ids, skew, 4), skew, 4) < xp.simulate(ids, skew, 4)


def test_a_shared_fixture_keeps_its_tests_in_one_unit_cut_by_the_cap() -> None:
    costs = {"m::a": 30.0, "m::b": 0.1, "x": 50.0, "m::c": 0.1, "y": 5.0, "m::d": 30.0}
    ids = list(costs)
    groups = {i: "m" for i in ids if i.startswith("m::")}
    # four workers: the cap is the longest test (50 s), so m splits where d would pass it
    units = xp.lpt_units(ids, costs, 4, groups)
    assert units == [["x"], ["m::a", "m::b", "m::c"], ["m::d"], ["y"]]
    assert xp.simulate(units, costs, 2) == 60.2  # (x, y) beside (a, b, c, d)
    # one worker: the cap is half the total (67.6 s): the group is one unit
    assert xp.lpt_units(ids, {**costs, "x": 70.0}, 1, groups)[1] == ["m::a", "m::b", "m::c",
                                                                      "m::d"]  # fmt: skip
    assert sorted(xp.lpt_order(ids, costs, 4, groups)) == sorted(ids)
    assert xp.base_nodeid(f"t.py::f[1]@{xp.GROUP_PREFIX}t.py#3") == "t.py::f[1]"
    assert xp.base_nodeid("t.py::f[a@b]") == "t.py::f[a@b]"


def test_order_items_only_with_a_table(tmp_path: Path) -> None:
    class Fixture:
        def __init__(self, scope: str) -> None:
            self.scope = scope

    class Info:
        def __init__(self, scope: str) -> None:
            self.name2fixturedefs = {"f": (Fixture(scope),)}

    class Item:
        def __init__(self, nodeid: str, scope: str = "function") -> None:
            self.nodeid = nodeid
            self._fixtureinfo = Info(scope)

    items = [Item(n) for n in ("a", "b", "c")]
    assert xp.order_items(items, xp.costs_path(env={})) is None
    (tmp_path / "c.json").write_text(json.dumps({"tests": {"a": 1, "b": 2, "c": 3}}))
    env = {xp.COSTS_ENV: str(tmp_path / "c.json"), "PYTEST_XDIST_WORKER_COUNT": "1"}
    assert xp.order_items(items, xp.costs_path(env=env), env=env) == {}
    assert [i.nodeid for i in items] == ["c", "b", "a"]
    # a and c share a module-scoped fixture: one unit of 4 s (after b's 5 s), on one worker
    items = [Item("m.py::a", "module"), Item("b"), Item("m.py::c", "module")]
    (tmp_path / "c.json").write_text(json.dumps({"tests": {"m.py::a": 1, "b": 5, "m.py::c": 3}}))
    groups = xp.order_items(items, xp.costs_path(env=env), env=env)
    assert [i.nodeid for i in items] == ["b", "m.py::a", "m.py::c"]
    assert groups == {"m.py::a": f"{xp.GROUP_PREFIX}m.py#0", "m.py::c": f"{xp.GROUP_PREFIX}m.py#0"}
    # a default table (the GPU tier's, on a GPU) unless the variable names another or is empty
    table = tmp_path / "c.json"
    assert xp.costs_path(env={}, default=table) == str(table)
    assert xp.costs_path(env={xp.COSTS_ENV: "other.json"}, default=table) == "other.json"
    assert xp.costs_path(env={xp.COSTS_ENV: ""}, default=table) is None


def _probe_run(tmp_path: Path, costs: str) -> set[str]:
    """The workers that ran the four probe tests below, in a session of 2 xdist workers."""
    seen = tmp_path / ("seen" + str(bool(costs)))
    seen.mkdir()
    env = {**os.environ, xp.COSTS_ENV: costs, "XDIST_PROBE": str(seen)}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
                        "tests/ci/test_xdist_plan.py", "-k", "probe"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0 and "4 passed" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
    return {f.read_text() for f in seen.iterdir()}


def test_longest_first_keeps_a_module_fixture_on_one_worker(tmp_path: Path) -> None:
    """With a cost table, conftest runs xdist's loadgroup scheduler and keeps the tests of a
    module-scoped fixture on one worker (xdist's load scheduler spreads them: the control)."""
    (tmp_path / "c.json").write_text(json.dumps({"tests": {}}))
    assert len(_probe_run(tmp_path, str(tmp_path / "c.json"))) == 1
    assert len(_probe_run(tmp_path, "")) == 2  # collection order, `load`: the fixture built twice


@pytest.fixture(scope="module")
def _probe_fixture(request: pytest.FixtureRequest) -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


@pytest.mark.skipif(not os.environ.get("XDIST_PROBE"), reason="run by the test above")
@pytest.mark.parametrize("k", range(4))
def test_probe_the_worker_of_a_module_fixture(k: int, _probe_fixture: str,
                                             request: pytest.FixtureRequest) -> None:  # fmt: skip
    assert request.config.option.loadgroup is bool(os.environ[xp.COSTS_ENV])
    (Path(os.environ["XDIST_PROBE"]) / str(k)).write_text(_probe_fixture)


def test_cost_table_from_worker_logs_and_conftest_orders_by_it(tmp_path: Path) -> None:
    logs = tmp_path / "workers"
    logs.mkdir()
    here = "tests/ci/test_xdist_plan.py::"
    names = ["test_worker_count_follows_cores_then_memory", "test_scaling_verdict"]
    (logs / "gw0.json").write_text(json.dumps({"durations": {here + names[0]: 0.5}}))
    (logs / "gw1.json").write_text(json.dumps({"durations": {here + names[1]: 9.0}}))
    assert xp.main(["costs", str(logs), str(tmp_path / "costs.json")]) == 0
    table = json.loads((tmp_path / "costs.json").read_text())
    assert table["tests"] == {here + names[0]: 0.5, here + names[1]: 9.0}
    assert table["total_s"] == 9.5
    # A run killed by its limit leaves the lines of the tests that ended (a cut line skipped).
    xp.append_duration(logs, "gw2", "tests/x.py::t", 1.25)
    with (logs / "gw2.durations.jsonl").open("a") as f:
        f.write('{"test": "tests/x.py::cut", "s"')
    assert xp.merge_durations(logs)["tests"]["tests/x.py::t"] == 1.25
    assert "tests/x.py::cut" not in xp.merge_durations(logs)["tests"]
    env = {**os.environ, xp.COSTS_ENV: str(tmp_path / "costs.json"), "CUDA_VISIBLE_DEVICES": ""}
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                          "-p", "no:cacheprovider", "tests/ci/test_xdist_plan.py"], cwd=REPO,
                         env=env, capture_output=True, text=True, timeout=120).stdout  # fmt: skip
    ids = [x for x in out.splitlines() if x.startswith(here) and "probe" not in x]
    assert ids[0] == here + names[1]  # the 9 s test first; the unknown ones count 4.75 s
    assert ids[-1] == here + names[0]


def test_scaling_verdict(tmp_path: Path) -> None:
    runs = [{"name": "1gpu-n12", "gpus": 1, "workers": 12, "wall_s": 200.0},
            {"name": "1gpu-n16", "gpus": 1, "workers": 16, "wall_s": 190.0},
            {"name": "2gpu-n24", "gpus": 2, "workers": 24, "wall_s": 110.0,
             "order": "cost"}]  # fmt: skip
    text, ok = xp.scaling_table(runs)
    assert ok is True and "**1.73x**" in text and "goal >= 1.60x" in text  # 190 s / 110 s
    text, ok = xp.scaling_table([*runs[:2], {**runs[2], "wall_s": 125.0}])
    assert ok is False and "**1.52x**" in text and "NOT met" in text
    runs[2]["wall_s"] = 118.75  # exactly 1.6x the best one-GPU run
    assert xp.scaling_table(runs)[1] is True
    assert xp.scaling_table(runs[:2])[1] is None
    (tmp_path / "runs.json").write_text(json.dumps(runs))
    assert xp.main(["table", str(tmp_path / "runs.json")]) == 0


def test_a_cut_one_gpu_run_bounds_the_speedup_from_below(tmp_path: Path) -> None:
    two = {"name": "2gpu_n24", "gpus": 2, "workers": 24, "wall_s": 100.0, "cache": "warm"}
    cut = {"name": "1gpu_n24", "gpus": 1, "workers": 24, "wall_s": 170.0, "ok": False,
           "exit": 124}  # fmt: skip
    text, ok = xp.scaling_table([two, cut])
    assert ok is True and "at least 1.70x" in text and "> 170.0 (cut)" in text
    text, ok = xp.scaling_table([two, {**cut, "wall_s": 150.0}])
    assert ok is None and "at least 1.50x" in text and "not settled" in text  # never 'NOT met'
    # A finished one-GPU run faster than the cut one is the exact figure.
    done = {"name": "1gpu_n12", "gpus": 1, "workers": 12, "wall_s": 140.0}
    text, ok = xp.scaling_table([two, cut, done])
    assert ok is False and "**1.40x**" in text and "NOT met" in text
    # A run that failed otherwise (exit 1) bounds nothing.
    assert xp.scaling_table([two, {**cut, "exit": 1}])[1] is None
    # `top`: sums, the longest test and the busiest GPU, per run, from the worker logs.
    (tmp_path / "runs.json").write_text(json.dumps([two, cut]))
    for k, s in enumerate([5.0, 1.0, 2.0, 4.0]):
        xp.append_duration(tmp_path / "2gpu_n24_workers", f"gw{k}", f"t{k}", s)
        xp.append_duration(tmp_path / "1gpu_n24_workers", f"gw{k}", f"t{k}", 2 * s)
    text = xp.run_costs(tmp_path)
    assert "| 2gpu_n24 | 4 | 12 | 0.5 | 5.0 | 7 | 100.0 |" in text  # GPU 0: gw0 + gw2
    assert "| `t0` | 10.0 | 5.0 |" in text.splitlines()[-4]
    assert "The 4 tests that ended in both 1gpu_n24 and 2gpu_n24: 24 s and 12 s" in text
    # Lines carry when each test ended and whether it failed: a cut run names its failures,
    # and with each run's start (t0) and a yardstick table, the work done by equal times shows.
    xp.append_duration(tmp_path / "2gpu_n24_workers", "gw9", "t9", 1.0, failed=True)
    line = json.loads((tmp_path / "2gpu_n24_workers" / "gw9.durations.jsonl").read_text())
    assert line["failed"] is True and line["end"] > 1.7e9
    (tmp_path / "test_costs.json").write_text(json.dumps({"tests": {"t9": 3.0}}))
    (tmp_path / "runs.json").write_text(json.dumps([{**two, "t0": line["end"] - 60}, cut]))
    text = xp.run_costs(tmp_path)
    assert "Failed in 2gpu_n24: `t9`" in text
    assert "| 25 s | 50 s | 75 s | 100 s |" in text and "| 2gpu_n24 | 0 | 0 | 3 | 3 |" in text


@pytest.mark.parametrize("ok", [True, False])
def test_a_failed_run_does_not_count(ok: bool) -> None:
    runs = [{"name": "1", "gpus": 1, "workers": 12, "wall_s": 200.0},
            {"name": "2", "gpus": 2, "workers": 24, "wall_s": 100.0, "ok": ok}]  # fmt: skip
    assert xp.scaling_table(runs)[1] is (True if ok else None)


def test_several_workers_a_gpu_share_the_gpus_evenly(monkeypatch: pytest.MonkeyPatch) -> None:
    """gwK -> GPU K mod n (blockattn/run/env.py): 24 workers on 2 GPUs put 12 on each."""
    from blockattn.run import env

    monkeypatch.setattr("torch.cuda.is_initialized", lambda: False)  # as in a fresh worker
    pinned = []
    for k in range(24):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{k}")
        pinned.append(env.pin_xdist_worker_gpu())
    assert pinned.count("0") == pinned.count("1") == 12
