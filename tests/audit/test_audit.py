"""`blockattn audit`: the shipped claims file is valid, every claim names its kernel, and a claim
is only ever decided by a measurement of that kernel. On CPU the timing claims are "not runnable
here (needs CUDA)", a claim about a kernel that cannot run here (tlx) is "not runnable here" with
the reason and blockattn's standing as a separate line, a claim about an outside kernel given
with --provider runs on it, accuracy claims carry the FP32-reference measure beside the FP64
one, and a claim that is mathematically false is refuted. Tiny [shapes.tiny] keep each audit at
a few seconds under the interpreter."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from blockattn import cli, providers
from blockattn.audit import claims

SEED_CLAIMS = ("seed-fwd-1.85x", "seed-bwd-2.50x", "seed-rotary-bwd-3.5x", "seed-dq-53pct-lower")

HEAD = """schema_version = 2

[shapes.tiny]  # test-only: a couple of 64-token blocks, one head
B = 2
max_len = 70
sparsity = 0.0
H = 1
"""


def _claim(cid: str, kernel: str, **kw: object) -> str:
    fields = {
        "id": cid, "statement": f"{cid} statement", "source": "test", "kind": "accuracy",
        "metric": "ratio_to_rounding_floor", "kernel": kernel, "tensors": ["O", "dQ", "dK", "dV"],
        "shape": "tiny", "D": 64, "dtype": "bfloat16", "comparison": "<=", "threshold": 1.5,
        "definition": "test",
    }  # fmt: skip
    fields.update(kw)
    return "\n[[claim]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in fields.items())


def _write(tmp_path: Path, *blocks: str) -> Path:
    p = tmp_path / "claims.toml"
    p.write_text(HEAD + "".join(blocks))
    return p


def _audit(tmp_path: Path, path: Path, *extra: str, seeds: int = 1) -> tuple[int, dict]:
    out = tmp_path / "out"
    argv = ["audit", "--claims", str(path), "--seeds", str(seeds), "--distributions", "normal"]
    rc = cli.main([*argv, "--out", str(out), *extra])
    return rc, {c["id"]: c for c in json.loads((out / "audit.json").read_text())["claims"]}


def _cpu_only(device: str) -> None:
    if device == "cuda":
        pytest.skip("CPU behaviour (timing claims and tlx not runnable)")


# ----------------------------------------------------------------------------- claims file


def test_shipped_claims_file_is_valid_and_complete() -> None:
    shapes, cs = claims.load(claims.DEFAULT_CLAIMS)
    ids = {c.id for c in cs}
    assert set(SEED_CLAIMS) <= ids
    assert any(c.id.startswith("readme-") and c.kind == "accuracy" for c in cs)
    assert any(c.id.startswith("readme-") and c.kind == "speed" for c in cs)
    # The seed's claims are about the TLX kernel on a B200; the README's about blockattn.
    for c in cs:
        if c.id in SEED_CLAIMS:
            assert c.kernel == "tlx" and c.made_for == "NVIDIA B200", c.id
        elif c.kind == "oracle_time":
            assert c.kernel == claims.ORACLE
        else:
            assert c.id.startswith("readme-") and c.kernel == "blockattn", c.id
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


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda t: t.replace('kernel = "blockattn"\n', ""), "missing ['kernel']"),
        (lambda t: t.replace('kernel = "blockattn"', 'kernel = "no such"'), "kernel must be"),
        (lambda t: t.replace('kernel = "blockattn"', 'provider = "blockattn"'), "`provider`"),
        (lambda t: t.replace('comparison = "<="', 'comparison = "=="'), "comparison"),
        (lambda t: t.replace("schema_version = 2", "schema_version = 1"), "schema_version"),
        (lambda t: t + 'distribution = "uniform"\n', "distribution"),
        (lambda t: t + "rtol = 0.1\n", "rtol and atol"),
        (lambda t: t.replace('kernel = "blockattn"', 'kernel = "oracle"'), "oracle_time"),
    ],
)
def test_malformed_claim_is_exit_2_naming_it(tmp_path: Path, capsys, edit, needle) -> None:
    p = _write(tmp_path, _claim("floor", "blockattn"))
    p.write_text(edit(p.read_text()))
    assert cli.main(["audit", "--claims", str(p)]) == 2
    err = capsys.readouterr().err
    assert needle in err and ("floor" in err or "schema_version" in needle)


def test_unknown_kernel_is_exit_2_pointing_at_provider(tmp_path: Path, capsys) -> None:
    p = _write(tmp_path, _claim("mine-floor", "not_registered_kernel"))
    assert cli.main(["audit", "--claims", str(p)]) == 2
    err = capsys.readouterr().err
    assert "mine-floor" in err and "--provider" in err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["audit", "--seeds", "0"], "--seeds"),
        (["audit", "--claim", "no-such-claim"], "--claim"),
        (["audit", "--shape-scale", "2"], "--shape-scale"),
        (["audit", "--claims", "/nonexistent/claims.toml"], "--claims"),
        (["audit", "--provider", "no_colon"], "--provider"),
    ],
)
def test_bad_input_is_exit_2_naming_the_argument(argv, needle, capsys) -> None:
    assert cli.main(argv) == 2
    assert needle in capsys.readouterr().err


def test_bad_distribution_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["audit", "--distributions", "normal,uniform"])
    assert exc.value.code == 2 and "--distributions" in capsys.readouterr().err


# ----------------------------------------------------------------------------- audits on CPU


def test_false_claim_is_refuted_and_speed_needs_cuda(tmp_path: Path, device: str) -> None:
    _cpu_only(device)
    # Output rounded to bf16: |y - r| >= |round(r) - r| elementwise, so the ratio is >= 1 and a
    # threshold below 1 must be refuted whatever the kernel does.
    speed = _claim("speed", "blockattn", kind="speed", metric="speedup", reference=["fa2"],
                   threshold=1.0, comparison=">=", **{"pass": "fwd"})  # fmt: skip
    p = _write(tmp_path, _claim("floor", "blockattn", threshold=0.5), speed)
    rc, rows = _audit(tmp_path, p, "--fail-on-refuted", seeds=2)
    floor = rows["floor"]
    assert floor["verdict"] == "refuted" and rc == 1
    assert floor["kernel"] == "blockattn" and "standing" not in floor
    assert len(floor["values"]) == 2 and all(v >= 1.0 for v in floor["values"])
    assert not floor["reduced_shape"] and floor["shape_measured"]["B"] == 2
    assert floor["min"] <= floor["median"] <= floor["max"]
    assert "--claim floor --seeds 2" in floor["command"]
    assert rows["speed"]["verdict"] == "not runnable here"
    assert "needs CUDA" in rows["speed"]["reason"]


def test_claim_about_a_kernel_that_cannot_run_here(tmp_path: Path, device: str) -> None:
    _cpu_only(device)
    speed = _claim("tlx-speed", "tlx", kind="speed", metric="speedup", reference=["fa2"],
                   comparison=">=", threshold=1.0, **{"pass": "fwd"})  # fmt: skip
    p = _write(tmp_path, _claim("tlx-floor", "tlx"), speed)
    out = tmp_path / "out"
    rc, rows = _audit(tmp_path, p)
    r = rows["tlx-floor"]
    # Never blockattn's measurement in place of the claim's verdict.
    assert r["verdict"] == "not runnable here" and rc == 0
    assert r["values"] == [] and "deciding_value" not in r
    assert "needs sm_100 and the tlx kernel" in r["reason"] and "this is cpu" in r["reason"]
    if "ads_model_kernel_library" not in sys.modules:
        assert "ads_model_kernel_library" in r["reason"]
    # blockattn's standing on the same statement: measured, labelled, separate.
    st = r["standing"]
    assert st["kernel"] == "blockattn" and st["status"] == "holds" and st["value"] >= 1.0
    md = (out / "audit.md").read_text()
    line = next(x for x in md.splitlines() if "blockattn on the same statement" in x)
    assert "not this claim's verdict" in line and "(holds" in line
    assert "| `tlx-floor` | tlx | **not runnable here** |" in md
    s = rows["tlx-speed"]
    assert s["verdict"] == "not runnable here" and "needs CUDA" in s["reason"]
    assert s["standing"]["status"] == "not runnable here"


def test_claim_about_an_outside_provider_runs_on_it(tmp_path: Path, device: str,
                                                    monkeypatch) -> None:  # fmt: skip
    _cpu_only(device)
    mod = tmp_path / "audit_outside_kernel.py"
    mod.write_text(
        "import blockattn\n"
        "CALLS = []\n"
        "def attn(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):\n"
        "    CALLS.append(q.shape)\n"
        "    return blockattn.block_attention(q, k, v, offsets, block_size=block_size,\n"
        "                                     scale=scale, sinu_pos=sinu_pos, rotate_v=rotate_v)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    p = _write(tmp_path, _claim("mine-floor", "mine"))
    try:
        rc, rows = _audit(tmp_path, p, "--provider", "mine=audit_outside_kernel:attn")
    finally:
        providers.unregister("mine")
    import audit_outside_kernel

    r = rows["mine-floor"]
    assert rc == 0 and r["kernel"] == "mine" and r["verdict"] == "confirmed"
    assert audit_outside_kernel.CALLS, "the claim was not run on the outside kernel"
    assert r["standing"]["kernel"] == "blockattn" and r["standing"]["status"] == "holds"
    assert "--provider mine=audit_outside_kernel:attn" in r["command"]
    # the kernel ran in the audit's own process (above): both reports say so
    out = tmp_path / "out"
    assert json.loads((out / "audit.json").read_text())["meta"]["isolation"].startswith(
        "NOT ISOLATED")
    assert "**NOT ISOLATED: the audited kernels run in the audit's own process**" in (
        out / "audit.md").read_text()


def test_fp32_reference_measure_beside_the_fp64_one(tmp_path: Path, device: str,
                                                     monkeypatch) -> None:  # fmt: skip
    _cpu_only(device)
    import torch

    from blockattn.audit import measure

    # The FP32 reference must not be the kernel under test: it must not call blockattn at all.
    calls = []
    real = measure.fp32_reference

    def spy(inp, variant):
        import blockattn.ops as ops

        with monkeypatch.context() as m:
            m.setattr(ops, "block_attention", lambda *a, **k: calls.append(1))
            out = real(inp, variant)
        assert all(t.dtype == torch.float32 for t in out.values())
        return out

    monkeypatch.setattr(measure, "fp32_reference", spy)
    err = _claim("dq-vs-eager", "blockattn", metric="err_ratio_vs_reference",
                 reference=["eager"], tensors=["dQ"], threshold=1.0)  # fmt: skip
    p = _write(tmp_path, _claim("floor", "blockattn"), err)
    rc, rows = _audit(tmp_path, p, "--distributions", "normal,near_constant", seeds=2)
    assert rc == 0 and not calls
    for r in rows.values():
        f = r["fp32_reference"]
        assert len(f["values"]) == 2 and f["tolerances"] == "torch.testing defaults"
        assert (f["rtol"], f["atol"]) == (1.6e-2, 1e-5)  # assert_close's bf16 defaults
        assert 20 < f["snr_db_min"] < 200 and f["allclose_ratio_max"] > 0
        # FP32 is not exact: its own error is nonzero but far below the bf16 rounding floor.
        assert 0 < f["ref32_err_over_floor_max"] < 0.05
        assert set(r["distributions"]) == {"normal", "near_constant"}
        s = r["sensitivity"]
        assert set(s) == {"measure_flips", "seeds_disagree", "distributions_flipping"}
    # Where blockattn is correctly rounded, both references see exactly the rounding floor (1.0);
    # an error ratio against eager moves with the reference (the two measures differ).
    assert rows["floor"]["values"] == rows["floor"]["fp32_reference"]["values"] == [1.0, 1.0]
    assert rows["dq-vs-eager"]["values"] != rows["dq-vs-eager"]["fp32_reference"]["values"]
    # eager rounds every op to bf16: its dQ error is well above blockattn's on both measures,
    # and the FP32 reference sees its lower SNR too.
    f = rows["dq-vs-eager"]["fp32_reference"]
    assert rows["dq-vs-eager"]["verdict"] == "confirmed" and f["holds"]
    assert f["snr_db_min"] > f["snr_db_min_reference"]
    md = (tmp_path / "out" / "audit.md").read_text()
    sens = [x for x in md.splitlines() if "sensitivity:" in x]
    assert len(sens) == 2
    assert all("FP64 oracle" in x and "FP32 reference" in x and "near_constant" in x for x in sens)


def test_claims_own_tolerances_are_used(tmp_path: Path, device: str) -> None:
    _cpu_only(device)
    p = _write(tmp_path, _claim("floor", "blockattn", rtol=0.0, atol=0.0))
    _, rows = _audit(tmp_path, p, "--sweep-shape-scale", "0.5")
    # the distribution sweep runs at its own (labelled) shape; the verdict keeps the claim's
    assert rows["floor"]["sweep_shape"]["B"] == 1 and rows["floor"]["shape_measured"]["B"] == 2
    assert "--sweep-shape-scale 0.5" in rows["floor"]["command"]
    f = rows["floor"]["fp32_reference"]
    assert f["tolerances"] == "claim's" and (f["rtol"], f["atol"]) == (0.0, 0.0)
    # zero tolerance against an FP32 reference: a bf16 output cannot pass
    assert not f["allclose_pass"] and f["mismatch_pct_max"] > 50
