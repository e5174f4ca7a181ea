"""The CI files are valid YAML and run only things that exist: every `blockattn <cmd>` is a real
subcommand that accepts its arguments, every script/file path exists, the gate uses the newest
released CUDA tolerance file, and the stored baseline covers the whole corpus."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

from blockattn import cli
from blockattn.cases.corpus import load_corpus
from blockattn.judge import tolerances

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((REPO / "ci" / "workflows").glob("*.yml"))
BASELINE = REPO / "ci" / "baselines" / "h100" / "report.json"
CPU_BASELINE = REPO / "ci" / "baselines" / "cpu" / "report.json"
SHELL_OPS = {"|", "||", "&&", ";", ">", ">>", "2>&1"}


def _scripts(doc: dict) -> list[str]:
    return [s["run"] for job in doc["jobs"].values() for s in job["steps"] if "run" in s]


def _blockattn_calls(script: str) -> list[list[str]]:
    """argv after `blockattn` for every `python3 -m blockattn ...` / `blockattn ...` call."""
    text = re.sub(r"\\\n", " ", script)
    calls = []
    for line in re.split(r"\n(?!\s)", text):  # folded (>) scalars are already joined
        toks = shlex.split(line.replace("\n", " "), comments=True)
        for i, t in enumerate(toks):
            if t == "blockattn" and (i == 0 or toks[i - 1] in ("-m", *SHELL_OPS)):
                argv = []
                for a in toks[i + 1 :]:
                    if a in SHELL_OPS:
                        break
                    argv.append(a)
                calls.append(argv)
    return calls


def test_both_workflows_exist_and_parse() -> None:
    assert {p.name for p in WORKFLOWS} == {"cpu.yml", "gpu.yml", "gpu-multi.yml",
                                           "fuzz-campaign.yml"}
    for p in WORKFLOWS:
        doc = yaml.safe_load(p.read_text())
        assert doc["jobs"] and all(job["steps"] for job in doc["jobs"].values())


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_blockattn_commands_exist_and_parse(path: Path) -> None:
    parser = cli.build_parser()
    for script in _scripts(yaml.safe_load(path.read_text())):
        for argv in _blockattn_calls(script):
            args = [re.sub(r"\$\{?\w+\}?", "1", a) for a in argv]  # shell vars: any value
            parser.parse_args(args)  # SystemExit on an unknown command or option


def test_gpu_workflow_runs_tests_gate_artifact_and_summary() -> None:
    doc = yaml.safe_load((REPO / "ci" / "workflows" / "gpu.yml").read_text())
    scripts = "\n".join(_scripts(doc))
    calls = [c[0] for s in _scripts(doc) for c in _blockattn_calls(s)]
    assert "gate" in calls and "mutants" in calls
    # the worker count for this host (ci/xdist_plan.py), not one worker per GPU (slow on one GPU)
    assert re.search(r'pytest -n "\$\(python3 ci/xdist_plan.py workers --gpus "\$N_GPUS"\)" '
                     r'-m "not slow"', scripts)  # fmt: skip
    assert "GITHUB_STEP_SUMMARY" in scripts
    uses = [s.get("uses", "") for j in doc["jobs"].values() for s in j["steps"]]
    assert any(u.startswith("actions/upload-artifact@") for u in uses)


def test_cpu_workflow_runs_dot_ci_run() -> None:
    doc = yaml.safe_load((REPO / "ci" / "workflows" / "cpu.yml").read_text())
    assert any(s.strip() == "bash .ci/run" for s in _scripts(doc))


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_repo_path_named_exists(path: Path) -> None:
    text = "\n".join(_scripts(yaml.safe_load(path.read_text())))
    named = set(re.findall(r"(?<![\w/$.-])((?:\.?ci|tolerances)/[\w./-]+)", text))
    assert named, "expected the workflow to name repo files"
    for rel in named:
        assert (REPO / rel).exists(), f"{path.name} names {rel}, which does not exist"


def test_gate_uses_the_newest_released_cuda_tolerances() -> None:
    text = (REPO / "ci" / "workflows" / "gpu.yml").read_text()
    used = re.findall(r"--tolerances (\S+)", text)
    newest = tolerances.latest_released(REPO / "blockattn" / "tolerances", device="cuda")
    assert newest is not None and used
    assert {REPO / u for u in used} == {newest}


def test_stored_baseline_covers_the_corpus_with_provenance() -> None:
    report = json.loads(BASELINE.read_text())
    assert report["meta"]["device"] == "cuda"
    ids = {c["case_id"] for c in report["cases"]}
    assert {s.case_id for s in load_corpus()} <= ids
    prov = (BASELINE.parent / "PROVENANCE.md").read_text()
    assert hashlib.sha256(BASELINE.read_bytes()).hexdigest() in prov
    for word in ("GPU", "commit", "command", report["meta"]["gpu"]):
        assert word in prov


@pytest.mark.parametrize("path", [BASELINE, CPU_BASELINE], ids=["h100", "cpu"])
def test_stored_baselines_carry_elementwise_metrics(path: Path) -> None:
    """Schema-2 regressions compare elementwise quantities: a baseline without them fails
    closed, so every stored baseline must carry them for the provider under test."""
    report = json.loads(path.read_text())
    for case in report["cases"]:
        res = case["providers"]["blockattn"]
        assert res["status"] == "ok", case["case_id"]
        for m in res["tensors"].values():
            assert m["ulp"] is not None and m["bound"]["violations"] == 0
    prov = (path.parent / "PROVENANCE.md").read_text()
    assert hashlib.sha256(path.read_bytes()).hexdigest() in prov


def test_multi_gpu_script_is_valid_and_its_commands_parse() -> None:
    import subprocess

    script = REPO / "ci" / "multi_gpu.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)  # syntax
    text = script.read_text()
    calls = _blockattn_calls(text)
    assert [c[0] for c in calls] == ["gate", "merge", "gate"]
    parser = cli.build_parser()
    for argv in calls:
        args = [re.sub(r"\$\{?[\w\[\]@\"]+\}?|\$\(\(.*?\)\)", "1", a) for a in argv]
        parser.parse_args(args)  # shell variables stand for any value ('1/1' for a shard)
    assert "BLOCKATTN_WORKER_LOG" in text and "--shard" in text
    doc = yaml.safe_load((REPO / "ci" / "workflows" / "gpu-multi.yml").read_text())
    assert any("bash ci/multi_gpu.sh" in s for s in _scripts(doc))


def _fake_multi_out(tmp: Path, idle_second: bool) -> Path:
    (tmp / "workers").mkdir(parents=True)
    (tmp / "gpus.csv").write_text("0, GPU-aaaa1111, NVIDIA H200\n1, GPU-bbbb2222, NVIDIA H200\n")
    for w, u, n in (("gw0", "aaaa1111", 300), ("gw1", "bbbb2222", 0 if idle_second else 290)):
        (tmp / "workers" / f"{w}.json").write_text(json.dumps(
            {"worker": w, "gpu_uuid": u, "tests_run": n, "device": "cuda"}))  # fmt: skip
    for i, u in ((1, "aaaa1111"), (2, "bbbb2222")):
        (tmp / f"shard-{i}").mkdir()
        (tmp / f"shard-{i}" / "report.json").write_text(json.dumps(
            {"meta": {"gpu_uuid": u, "n_cases": 9}}))  # fmt: skip
    util = "0" if idle_second else "87 %"
    (tmp / "gpu_samples.csv").write_text(f"t, 0, 95 %, 10 MiB\nt, 1, {util}, 10 MiB\n")
    return tmp


@pytest.mark.parametrize("idle_second", [False, True])
def test_gpu_work_summary_fails_when_a_gpu_idled(tmp_path: Path, idle_second: bool) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("gws", REPO / "ci" / "gpu_work_summary.py")
    gws = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gws)
    text, ok = gws.summarise(_fake_multi_out(tmp_path, idle_second))
    assert ok is (not idle_second)
    assert ("NOT every GPU" in text) is idle_second
    assert "| 1 (bbbb2222) | NVIDIA H200 | gw1 |" in text


def test_fuzz_campaign_is_a_matrix_of_cost_shards_merged_once() -> None:
    doc = yaml.safe_load((REPO / "ci" / "workflows" / "fuzz-campaign.yml").read_text())
    matrix = doc["jobs"]["shard"]["strategy"]["matrix"]["shard"]
    assert matrix == list(range(1, int(doc["env"]["SHARDS"]) + 1))
    assert doc["jobs"]["shard"]["strategy"]["fail-fast"] is False
    calls = [c for s in _scripts(doc) for c in _blockattn_calls(s)]
    assert [c[0] for c in calls] == ["run", "merge", "gate"]
    assert {"--shard", "--shard-costs", "--fuzz-only", "--no-contract"} <= set(calls[0])
    assert "--report" in calls[2] and "--no-contract" not in calls[2]  # the battery, once
    assert doc["jobs"]["merge"]["needs"] == "shard" and doc["jobs"]["merge"]["if"] == "always()"
