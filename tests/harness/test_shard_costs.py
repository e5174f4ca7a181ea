"""Gate/run shards balanced by measured case cost (issue 44 item 4): longest-processing-time
assignment from a cost table (a stored report.json, results.jsonl or JSON mapping), disjoint
shards covering the plan, better balance than round-robin on skewed costs, the CLI option and
merge's refusal of shards split by different tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from blockattn import cli, providers
from blockattn.cases import plan, shard_costs
from blockattn.cases.plan import Selection
from blockattn.judge import tolerances

REPO = Path(__file__).resolve().parents[2]
GPU_BASELINE = REPO / "ci" / "baselines" / "h200" / "report.json"
TOL = str(tolerances.latest_released(tolerances.default_tolerance_dir(), "cpu"))


def _plan(**kw) -> list:
    base = dict(profile="ci", under_test_supports=providers.get("blockattn").supports, fuzz=12,
                seed=3)  # fmt: skip
    return plan.plan_specs("cpu", **{**base, **kw})


def test_lpt_assignment() -> None:
    # The classic instance: LPT puts 7+3 | 6+4 | 5+5 (round-robin would give 7+4 | 6+3 | 5+5 = 11).
    where = shard_costs.lpt_assign([7, 6, 5, 5, 4, 3], 3)
    loads = [sum(c for c, w in zip([7, 6, 5, 5, 4, 3], where, strict=True) if w == i)
             for i in range(3)]  # fmt: skip
    assert loads == [10, 10, 10]
    assert shard_costs.lpt_assign([1.0, 1.0], 3) == [0, 1]  # ties: the lower shard first


def test_cost_tables_load_from_reports_results_and_mappings(tmp_path: Path) -> None:
    base = shard_costs.load_costs(GPU_BASELINE)
    assert len(base) == 24 and all(v > 0 for v in base.values())
    rows = json.loads(GPU_BASELINE.read_text())["cases"][:3]
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "results.jsonl").write_text(
        "".join(json.dumps({"case_id": r["case_id"], "wall_s": r["wall_s"]}) + "\n" for r in rows))
    assert shard_costs.load_costs(tmp_path / "r") == {r["case_id"]: r["wall_s"] for r in rows}
    # A report directory (e.g. a previous campaign's merged one): its file's digest.
    assert shard_costs.digest(tmp_path / "r") == shard_costs.digest(tmp_path / "r/results.jsonl")
    (tmp_path / "t.json").write_text(json.dumps({"costs": {"a": 1.5, "b": 2}}))
    assert shard_costs.load_costs(tmp_path / "t.json") == {"a": 1.5, "b": 2.0}
    (tmp_path / "empty.json").write_text("{}")
    with pytest.raises(ValueError, match="no case with a wall_s"):
        shard_costs.load_costs(tmp_path / "empty.json")


@pytest.mark.parametrize("n", [2, 3, 5])
def test_cost_shards_are_disjoint_cover_the_plan_and_beat_round_robin(tmp_path: Path,
                                                                      n: int) -> None:  # fmt: skip
    every = _plan()
    # Skewed measured costs: the first few cases are 20x the rest; fuzz cases stay unknown.
    table = {s.case_id: (20.0 if i < n else 1.0) for i, s in enumerate(every) if s.source != "fuzz"}
    path = tmp_path / "costs.json"
    path.write_text(json.dumps(table))
    sel = dict(shard_costs=str(path), shard_costs_sha256=shard_costs.digest(path))
    parts = [_plan(selection=Selection(shard=(i, n), **sel)) for i in range(1, n + 1)]
    ids = [s.case_id for p in parts for s in p]
    assert sorted(ids) == sorted(s.case_id for s in every) and len(set(ids)) == len(ids)
    order = {s.case_id: i for i, s in enumerate(every)}
    assert all([order[s.case_id] for s in p] == sorted(order[s.case_id] for s in p) for p in parts)
    costs = dict(zip((s.case_id for s in every), shard_costs.case_costs(every, table),
                     strict=True))  # fmt: skip
    lpt = max(sum(costs[s.case_id] for s in p) for p in parts)
    rr = max(sum(costs[s.case_id] for s in every[i::n]) for i in range(n))
    assert lpt <= rr and lpt <= sum(costs.values()) / n + max(costs.values())
    assert lpt == pytest.approx(max(shard_costs.shard_loads(every, n, table)))
    # An unknown case is estimated from its size, within the measured range (x2).
    fuzz = [s for s in every if s.source == "fuzz"]
    assert all(1.0 <= costs[s.case_id] <= 40.0 for s in fuzz)
    path.write_text(json.dumps({**table, "x": 1}))  # the table changed under the plan
    with pytest.raises(ValueError, match="changed since it was read"):
        _plan(selection=Selection(shard=(1, n), **sel))


def test_cli_records_the_table_and_merge_refuses_another(tmp_path: Path, capsys) -> None:
    from blockattn.commands._options import selection_from

    parser = cli.build_parser()
    args = parser.parse_args(["gate", "--shard", "1/2", "--shard-costs", str(GPU_BASELINE)])
    sel = selection_from(args)
    assert sel.shard == (1, 2) and sel.shard_costs == str(GPU_BASELINE)
    assert sel.shard_costs_sha256 == shard_costs.digest(GPU_BASELINE)
    assert cli.main(["run", "--shard-costs", str(GPU_BASELINE), "--out", str(tmp_path / "x")]) == 2
    assert "give --shard too" in capsys.readouterr().err
    # Two shards split by different tables do not belong together (merge reads run.json first).
    for i, sha in ((1, "a" * 64), (2, "b" * 64)):
        d = tmp_path / f"s{i}"
        d.mkdir()
        run = {"selection": {**sel.to_dict(), "shard": [i, 2], "shard_costs_sha256": sha}}
        (d / "run.json").write_text(json.dumps(run))
    capsys.readouterr()
    assert cli.main(["merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out",
                     str(tmp_path / "m")]) == 2  # fmt: skip
    assert "other options" in capsys.readouterr().err


@pytest.mark.slow
def test_cost_shards_run_and_merge(tmp_path: Path) -> None:
    """End to end on the interpreter (~15 s): two shards split by a table, merged."""
    cases = ["near-constant-fp16", "negative-rows-bf16", "heavy-tailed-fp16"]  # 9 s | 1 + 1 s
    table = tmp_path / "costs.json"
    table.write_text(json.dumps({"plai-floa-2003374fbb": 9.0, "plai-bflo-e5992c8cec": 1.0,
                                 "plai-floa-cc01214375": 1.0}))  # near-constant: alone
    common = ["--corpus-only", "--no-selfcheck", "--no-progress", "--tolerances", TOL,
              "--no-contract", "--in-process", "--shard-costs", str(table)]  # fmt: skip
    for c in cases:
        common += ["--case", c]
    d1, d2 = tmp_path / "s1", tmp_path / "s2"
    assert cli.main(["run", "--out", str(d1), "--shard", "1/2", *common]) == 0
    assert cli.main(["run", "--out", str(d2), "--shard", "2/2", *common]) == 0
    ran = [[json.loads(x)["spec"]["name"] for x in (d / "results.jsonl").read_text().splitlines()]
           for d in (d1, d2)]  # fmt: skip
    assert [sorted(r) for r in ran] == [["near-constant-fp16"],
                                        ["heavy-tailed-fp16", "negative-rows-bf16"]]
    assert cli.main(["merge", str(d1), str(d2), "--out", str(tmp_path / "m")]) == 0
    merged = json.loads((tmp_path / "m" / "report.json").read_text())
    assert sorted(c["spec"]["name"] for c in merged["cases"]) == sorted(cases)
