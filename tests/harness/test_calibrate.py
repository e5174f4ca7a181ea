"""calibrate: the formulas on synthetic records, TOML round trip, loosening needs a reason."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from harness_helpers import minimal_doc, write_doc

from blockattn import cli
from blockattn.judge import calibrate, tolerances


def _rec(i: int, ratio: float, snr: float, vb: float, dist: str = "normal") -> dict:
    m = {
        "ratio_to_floor": ratio,
        "snr_db": snr,
        "ref_max_abs": 1.0,
        "pct_over_tol": 0.0,
        "max_abs": ratio * 1e-3,
        "floor_eff": 1e-3,
    }
    return {
        "case_id": f"c{i}",
        "under_test": "blockattn",
        "baseline": "eager",
        "device": "cpu",
        "arch": "cpu",
        "spec": {"dtype": "bfloat16", "distribution": dist, "source": "fuzz"},
        "providers": {"blockattn": {"status": "ok", "tensors": {"O": m}}},
        "vs_baseline": {"O": vb},
    }


def test_sig2_up() -> None:
    assert calibrate.sig2_up(1.234) == 1.3
    assert calibrate.sig2_up(12.01) == 13.0
    assert calibrate.sig2_up(0.5) == 0.5
    assert calibrate.sig2_up(5.3000001) == 5.4


def test_rules_follow_the_documented_formulas() -> None:
    recs = [_rec(i, ratio=1.0 + i / 10, snr=50.0 - i, vb=0.5 + i / 100) for i in range(10)]
    recs.append(_rec(10, ratio=9.0, snr=20.0, vb=0.9, dist="near_constant"))
    rules, counts = calibrate.propose_rules(recs, "blockattn", margin=2.0, quantile=99.9)
    r = rules["blockattn"]["bfloat16"]["O"]
    # base: well-conditioned only. max ratio 1.9 -> 2 * 1.9 = 3.8
    assert r["max_ratio_to_floor"] == 3.8
    assert r["max_ratio_to_baseline"] == max(1.0, calibrate.sig2_up(2 * 0.59))  # 1.2
    assert r["min_snr_db"] == math.floor(41.0 - 20 * math.log10(2))  # 34
    assert r["max_pct_over_tol"] == calibrate.MIN_PCT_OVER_TOL
    # the ill-conditioned distribution gets only the fields it needs loosened
    assert r["dist"]["near_constant"] == {
        "max_ratio_to_floor": 18.0,  # 2 * 9
        "max_ratio_to_baseline": 1.8,  # 2 * 0.9 > base 1.2
        "min_snr_db": 13.0,  # floor(20 - 6.02)
    }
    assert counts == {"fuzz": 11}


def test_never_below_two_roundings() -> None:
    recs = [_rec(i, ratio=0.1, snr=60.0, vb=0.1) for i in range(5)]
    rules, _ = calibrate.propose_rules(recs, "blockattn", margin=2.0, quantile=99.9)
    assert rules["blockattn"]["bfloat16"]["O"]["max_ratio_to_floor"] == 2.0
    assert rules["blockattn"]["bfloat16"]["O"]["max_ratio_to_baseline"] == 1.0


def test_non_finite_results_refuse_calibration() -> None:
    rec = _rec(0, 1.0, 50.0, 1.0)
    rec["providers"]["blockattn"]["tensors"]["O"]["ratio_to_floor"] = None
    with pytest.raises(ValueError, match="non-finite"):
        calibrate.propose_rules([rec], "blockattn", margin=2.0, quantile=99.9)


def test_document_round_trips_through_the_validator(tmp_path: Path) -> None:
    recs = [_rec(i, 1.0 + i, 50.0, 0.8) for i in range(4)]
    doc = calibrate.build_document(
        recs,
        version=5,
        under_test="blockattn",
        baseline="eager",
        margin=2.0,
        quantile=99.9,
        generator="test",
        commit="x",
        device="cpu",
        gpu="none",
        loosening=[],
        status="proposed",
    )
    tol = tolerances.load(write_doc(tmp_path / "v5.toml", doc))
    assert tol.rule("blockattn", "bfloat16", "O", None)["max_ratio_to_floor"] == 8.0


def _results_dir(tmp_path: Path, ratio: float) -> Path:
    import json

    d = tmp_path / f"run-{ratio}"
    d.mkdir()
    with open(d / "results.jsonl", "w") as fh:
        for i in range(3):
            fh.write(json.dumps(_rec(i, ratio, 50.0, 0.5)) + "\n")
    return d


def test_cli_loosening_requires_reason_and_released_files_are_immutable(
    tmp_path: Path, capsys
) -> None:
    prev = write_doc(tmp_path / "v1.toml", {**minimal_doc(), "version": 1})
    run = _results_dir(tmp_path, ratio=5.0)  # 2 * 5 = 10 > previous 4.0: looser
    out = tmp_path / "v2.toml"
    args = ["calibrate", str(run), "--out", str(out), "--previous", str(prev)]
    assert cli.main(args) == 2 and not out.exists()
    assert "loosened" in capsys.readouterr().out
    assert cli.main([*args, "--reason", "new accumulation order", "--release"]) == 0
    tol = tolerances.load(out)
    assert tol.data["provenance"]["loosening"] == ["new accumulation order"]
    assert tol.data["status"] == "released" and "v2.toml" in tolerances.read_manifest(tmp_path)
    assert cli.main([*args, "--reason", "again"]) == 2  # v2 is released now
    assert cli.main(["calibrate", str(run), "--out", str(tmp_path / "bad.toml")]) == 2


def test_snr_and_pct_below_the_absolute_floor_do_not_calibrate() -> None:
    """verdict skips SNR/pct when max_abs <= ATOL_FLOOR: a ~1e-9 dQ (saturated softmax) with
    SNR 3 dB must not drag every case's min_snr_db down."""
    recs = [_rec(i, ratio=1.0, snr=60.0, vb=0.5) for i in range(5)]
    tiny = _rec(5, ratio=0.002, snr=3.0, vb=0.5)
    tiny["providers"]["blockattn"]["tensors"]["O"].update(max_abs=2e-9, pct_over_tol=12.6)
    rules, _ = calibrate.propose_rules([*recs, tiny], "blockattn", margin=2.0, quantile=99.9)
    r = rules["blockattn"]["bfloat16"]["O"]
    assert r["min_snr_db"] == math.floor(60.0 - 20 * math.log10(2))
    assert r["max_pct_over_tol"] == calibrate.MIN_PCT_OVER_TOL


def test_scaled_logits_get_an_override_not_the_base_rule() -> None:
    recs = [_rec(i, ratio=1.0, snr=60.0, vb=0.5) for i in range(5)]
    recs.append(_rec(5, ratio=10.0, snr=45.0, vb=0.5, dist="scaled_logits"))
    rules, _ = calibrate.propose_rules(recs, "blockattn", margin=2.0, quantile=99.9)
    r = rules["blockattn"]["bfloat16"]["O"]
    assert r["max_ratio_to_floor"] == 2.0
    assert r["dist"]["scaled_logits"]["max_ratio_to_floor"] == 20.0
