"""`blockattn audit`: the shipped claims file is valid and covers the seed and README claims; on
CPU the timing claims are "not runnable here" with the reason, accuracy claims run at a reduced
shape, and a claim that is mathematically false is refuted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from blockattn import cli
from blockattn.audit import claims

SEED_CLAIMS = ("seed-fwd-1.85x", "seed-bwd-2.50x", "seed-rotary-bwd-3.5x", "seed-dq-53pct-lower")


def test_shipped_claims_file_is_valid_and_complete() -> None:
    shapes, cs = claims.load(claims.DEFAULT_CLAIMS)
    ids = {c.id for c in cs}
    assert set(SEED_CLAIMS) <= ids
    assert any(c.id.startswith("readme-") and c.kind == "accuracy" for c in cs)
    assert any(c.id.startswith("readme-") and c.kind == "speed" for c in cs)
    # The seed's speed statements were made for a B200: the audit must say so when run elsewhere.
    assert all(c.made_for == "NVIDIA B200" for c in cs if c.id in SEED_CLAIMS[:3])
    assert shapes["P"] == {"B": 1152, "max_len": 4096, "sparsity": 0.7, "H": 4}


@pytest.mark.parametrize(
    ("values", "comparison", "statistic", "expect"),
    [
        ([0.40, 0.50, 0.45], "<=", "worst", (0.50, False)),  # one bad seed refutes
        ([0.40, 0.50, 0.45], "<=", "median", (0.45, True)),
        ([2.0, 1.7, 2.2], ">=", "worst", (1.7, False)),
        ([2.0, 1.7, 2.2], ">=", "median", (2.0, True)),
    ],
)
def test_decision_rule(values, comparison, statistic, expect) -> None:
    c = claims.Claim(
        id="x", statement="s", source="t", kind="accuracy", metric="ratio_to_rounding_floor",
        shape="P", D=64, dtype="bfloat16", comparison=comparison, threshold=1.8 if comparison
        == ">=" else 0.47, definition="d", statistic=statistic,
    )  # fmt: skip
    assert c.decide(values) == expect


def _claims_file(tmp_path: Path, threshold: float) -> Path:
    text = claims.DEFAULT_CLAIMS.read_text().split("# ------")[0]  # header + [shapes.P]
    text += f"""
[[claim]]
id = "floor"
statement = "blockattn on the rounding floor"
source = "test"
kind = "accuracy"
metric = "ratio_to_rounding_floor"
provider = "blockattn"
tensors = ["O", "dQ", "dK", "dV"]
shape = "P"
D = 64
dtype = "bfloat16"
comparison = "<="
threshold = {threshold}
definition = "test"

[[claim]]
id = "speed"
statement = "fast"
source = "test"
kind = "speed"
metric = "speedup"
reference = ["fa2"]
pass = "fwd"
shape = "P"
D = 64
dtype = "bfloat16"
comparison = ">="
threshold = 1.0
definition = "test"
"""
    p = tmp_path / "claims.toml"
    p.write_text(text)
    return p


def _audit(tmp_path: Path, threshold: float, *extra: str) -> tuple[int, dict]:
    out = tmp_path / "out"
    argv = ["audit", "--claims", str(_claims_file(tmp_path, threshold)), "--seeds", "2"]
    argv += ["--shape-scale", str(3 / 1152), "--max-len", "130", "--out", str(out), *extra]
    rc = cli.main(argv)
    return rc, {c["id"]: c for c in json.loads((out / "audit.json").read_text())["claims"]}


def test_audit_measures_and_refutes_on_cpu(tmp_path: Path, device: str) -> None:
    if device == "cuda":
        pytest.skip("CPU behaviour (timing claims not runnable)")
    # Output rounded to bf16: |y - r| >= |round(r) - r| elementwise, so the ratio is >= 1 and a
    # threshold below 1 must be refuted whatever the kernel does.
    rc, rows = _audit(tmp_path, 0.5, "--fail-on-refuted")
    floor = rows["floor"]
    assert floor["verdict"] == "refuted" and rc == 1
    assert len(floor["values"]) == 2 and all(v >= 1.0 for v in floor["values"])
    assert floor["reduced_shape"] and floor["shape_measured"]["B"] == 3
    assert "reduced shape" in floor["reason"]
    assert floor["min"] <= floor["median"] <= floor["max"]
    assert "--claim floor --seeds 2" in floor["command"]
    speed = rows["speed"]
    assert speed["verdict"] == "not runnable here" and "CUDA" in speed["reason"]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["audit", "--seeds", "0"], "--seeds"),
        (["audit", "--claim", "no-such-claim"], "--claim"),
        (["audit", "--shape-scale", "2"], "--shape-scale"),
        (["audit", "--claims", "/nonexistent/claims.toml"], "--claims"),
    ],
)
def test_bad_input_is_exit_2_naming_the_argument(argv, needle, capsys) -> None:
    assert cli.main(argv) == 2
    assert needle in capsys.readouterr().err


def test_malformed_claim_names_the_claim(tmp_path: Path, capsys) -> None:
    p = _claims_file(tmp_path, 1.0)
    p.write_text(p.read_text().replace('comparison = "<="', 'comparison = "=="', 1))
    assert cli.main(["audit", "--claims", str(p)]) == 2
    assert "floor" in capsys.readouterr().err
