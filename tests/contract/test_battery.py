"""The contract battery in both directions: a faithful kernel passes every property, and each
scratch kernel that breaks one promise fails with a line naming that property.

The scratch kernels (`scratch_kernels.py`) are outside kernels: thin wrappers of
blockattn.block_attention, faithful on clean default inputs.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from blockattn import cli, providers
from blockattn.cases import contract as C
from blockattn.judge import tolerances
from blockattn.judge.contract import Battery, failures, markdown, run_battery

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def tol():
    return tolerances.load(
        tolerances.latest_released(tolerances.default_tolerance_dir(), device=DEV))


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copy(HERE / "scratch_kernels.py", tmp_path / "scratch_kernels.py")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _load(name: str):
    prov = providers.load_spec(f"scratch_kernels:{name}")
    return prov


@pytest.fixture(autouse=True)
def _unregister():
    yield
    for n in list(providers.all_providers()):
        if providers.all_providers()[n].origin.startswith("scratch_kernels:"):
            providers.unregister(n)


DEV = "cuda" if __import__("torch").cuda.is_available() else "cpu"  # the probes' device


def _battery(name: str, tol) -> Battery:
    return Battery(_load(name), tol, DEV)


def _t():
    import torch

    return C.base(torch.bfloat16, 64, DEV)


def _t1():
    """One head, as the battery runs its block-size and option probes (what they vary is not
    per head; half the interpreter's cost of `_t`)."""
    import torch

    return C.base(torch.bfloat16, 64, DEV, H=1)


def _fails(b: Battery, prop: str) -> list[str]:
    return [f"{c.probe}: {c.detail}" for c in failures(b.checks) if c.prop == prop]


# One test per kernel (each a whole battery, ~50 s under the interpreter): xdist runs them side
# by side instead of one 100 s test at the tail of a worker.
@pytest.mark.parametrize("name", ["faithful", "blockattn"])
def test_the_faithful_kernel_and_blockattn_pass_every_property(scratch: Path, tol,
                                                               name: str) -> None:
    prov = _load("faithful") if name == "faithful" else providers.get("blockattn")
    checks = run_battery(prov, tol, DEV)
    assert not failures(checks), markdown(checks, prov.name)
    props = {c.prop for c in checks if c.status in ("pass", "measured")}
    want = {"inputs-untouched", "output-contract", "containment", "layout", "block-size",
            "scale", "degenerate", "determinism"} | ({"streams"} if DEV == "cuda" else set())
    # blockattn declares int64 offsets, max_seq_len and nested input; faithful none of them
    assert props == want | ({"option"} if prov.name == "blockattn" else set()), props
    if prov.name == "blockattn":  # blockattn declares determinism: required, and it holds
        det = [c for c in checks if c.prop == "determinism"]
        assert [c.status for c in det] == ["pass"]


def test_a_leak_across_sequences_fails_containment(scratch: Path, tol) -> None:
    b = _battery("leaky", tol)
    b.containment(_t())
    bad = _fails(b, "containment")
    assert bad and any("changed outside the poisoned block and head" in x for x in bad), bad
    assert any(x.startswith("containment-last") for x in bad)
    md = markdown(b.checks, "leaky")
    assert "contract violated: containment" in md


def test_an_ignored_block_size_fails_block_size(scratch: Path, tol) -> None:
    b = _battery("fixed_block", tol)
    for p in C.block_size_probes(_t1(), (24, 128)):
        b.numeric(p)
    bad = _fails(b, "block-size")
    assert len(bad) == 2 and all("beyond the" in x for x in bad), bad
    good = _battery("faithful", tol)
    for p in C.block_size_probes(_t1(), (24, 128)):
        good.numeric(p)
    assert not failures(good.checks)


def test_assuming_contiguous_inputs_fails_the_strided_layouts(scratch: Path, tol) -> None:
    b = _battery("assumes_contiguous", tol)
    t = _t()
    for layout in ("padded", "qkv-packed", "head-strided"):
        b.numeric(C.layout_probe(t, layout), layout)
    bad = _fails(b, "layout")
    assert {x.split(":")[0] for x in bad} == {"layout-qkv-packed", "layout-head-strided"}, bad


def test_nondeterminism_fails_only_where_declared(scratch: Path, tol) -> None:
    b = _battery("flaky", tol)
    b.determinism()
    assert [c.status for c in b.checks if c.prop == "determinism"] == ["FAIL"]
    assert "repeats differ bitwise" in _fails(b, "determinism")[0]
    u = _battery("flaky_undeclared", tol)
    u.determinism()
    det = [c for c in u.checks if c.prop == "determinism"]
    assert [c.status for c in det] == ["measured"] and "differ bitwise" in det[0].detail


def test_writing_the_callers_input_fails_inputs_untouched(scratch: Path, tol) -> None:
    b = _battery("scribbler", tol)
    b.numeric(C.layout_probe(_t(), "padded"))
    bad = _fails(b, "inputs-untouched")
    assert bad and "wrote to its input(s) ['q']" in bad[0], bad
    assert not _fails(b, "layout"), "judged against the inputs as they were before the call"


def test_an_output_in_an_inputs_memory_fails_the_output_contract(scratch: Path, tol) -> None:
    b = _battery("aliasing", tol)
    b.run_probe(C.layout_probe(_t(), "padded"))
    bad = _fails(b, "output-contract")
    assert bad and "O aliases an input's memory" in bad[0], bad


def test_a_crash_on_a_degenerate_batch_fails_degenerate(scratch: Path, tol) -> None:
    import torch

    b = _battery("empty_crash", tol)
    for p in C.degenerate_probes(torch.bfloat16, 64, DEV):
        b.numeric(p)
    bad = _fails(b, "degenerate")
    assert {x.split(":")[0] for x in bad} == {"degenerate-t0", "degenerate-all-empty"}, bad
    assert all("raised RuntimeError: no tokens" in x for x in bad)


def test_declared_refusals_are_unsupported_not_failed(scratch: Path, tol) -> None:
    checks = run_battery(_load("declares_refusals"), tol, DEV)
    assert not failures(checks), markdown(checks, "declares_refusals")
    unsupported = {c.probe for c in checks if c.status == "unsupported"}
    assert {"layout-qkv-packed", "layout-head-strided", "layout-sinu-strided"} <= unsupported
    # it declares block size 64 only: judged at 64 (every other probe), no other size drawn
    assert not [c for c in checks if c.prop == "block-size"]


@pytest.mark.parametrize("kernel,promise", [
    ("faithful", None),
    ("leaky", "containment"),
    ("fixed_block", "block-size"),
    ("assumes_contiguous", "layout"),
    ("flaky", "determinism"),
    ("scribbler", "inputs-untouched"),
])  # fmt: skip
def test_gate_fails_each_broken_promise_and_passes_the_faithful_kernel(
    scratch: Path, kernel: str, promise: str | None, capsys: pytest.CaptureFixture
) -> None:
    # Two corpus cases, no fuzz: the battery is what catches each witness (CI time; the gate's
    # fuzz default is tested in tests/harness).
    rc = cli.main(["gate", "--tolerances", "v4", "--provider", f"scratch_kernels:{kernel}",
                   "--max-cases", "2", "--fuzz", "0", "--no-progress",
                   "--out", str(scratch / "gate")])  # fmt: skip
    out = capsys.readouterr().out
    if promise is None:
        assert rc == 0, out[-3000:]
        assert "Contract battery for `faithful`: ✅ 0 violation(s)" in out
    else:
        assert rc == 1, out[-3000:]
        assert f"contract violated: {promise} (" in out
        # each violation names its own replay: the battery for this kernel, that probe only
        assert f"replay: blockattn contract --provider faithful=scratch_kernels:{kernel}" \
            not in out  # the replay keeps the kernel's own name
        assert f"replay: blockattn contract --provider {kernel}=scratch_kernels:{kernel}" in out
        assert " --only " in out


def _options(name: str, tol) -> list:
    b = _battery(name, tol)
    for p, why in C.option_probes(_t1(), b.prov.supports.offsets_dtypes,
                                  b.prov.supports.max_seq_len, b.prov.supports.nested):
        b.numeric(p, declared=why)
    return b.checks


def test_declared_options_are_probed_and_undeclared_ones_are_unsupported(scratch, tol) -> None:
    checks = [c for c in _options("with_options", tol) if c.prop == "option"]
    assert {c.probe: c.status for c in checks} == {
        "option-offsets-int64": "pass", "option-max-seq-len-exact": "pass",
        "option-max-seq-len-larger": "pass", "option-nested": "pass"}, checks
    checks = [c for c in _options("faithful", tol) if c.prop == "option"]
    assert {c.status for c in checks} == {"unsupported"}
    assert any("declared no max_seq_len" in c.detail for c in checks)


def test_a_grid_sized_by_max_seq_len_floor_fails_the_option(scratch, tol) -> None:
    bad = {c.probe: c.detail for c in failures(_options("floors_max_seq_len", tol))}
    assert "option-max-seq-len-exact" in bad, bad  # 66 // 64: the partial block is lost
    assert "beyond the" in bad["option-max-seq-len-exact"]
    assert "option-nested" not in bad and "option-offsets-int64" not in bad


def test_int64_offsets_read_as_int32_fail_the_option(scratch, tol) -> None:
    bad = {c.probe: c.detail for c in failures(_options("int32_only", tol))}
    assert list(bad) == ["option-offsets-int64"], bad


def test_only_runs_one_probe_and_refuses_an_unknown_name(scratch, tol) -> None:
    checks = run_battery(_load("leaky"), tol, DEV, only="containment-last")
    assert {c.probe for c in checks} == {"containment-clean", "containment-last"}
    assert [c.prop for c in failures(checks)] == ["containment"]
    with pytest.raises(ValueError, match="matches no probe"):
        run_battery(_load("leaky"), tol, DEV, only="no-such-probe")


@pytest.mark.skipif(DEV != "cuda", reason="streams are a GPU property")
def test_a_kernel_on_its_own_stream_fails_streams(scratch, tol) -> None:
    b = _battery("own_stream", tol)
    b.streams(_t())
    assert _fails(b, "streams"), b.checks
    b = _battery("faithful", tol)
    b.streams(_t())
    assert not failures(b.checks) and [c.prop for c in b.checks if c.status == "pass"]


def test_the_kernel_gets_the_probes_own_memory(scratch, tol) -> None:
    # No clone or .contiguous() between a probe and the callable: inside the call, q, k, v and
    # offsets are the probe's own views (same data_ptr, strides and storage offset).
    import scratch_kernels as sk

    b = _battery("recorder", tol)
    for layout in ("storage-offset", "qkv-packed", "head-strided"):
        p = C.layout_probe(_t(), layout)
        sk.SEEN.clear()
        b.numeric(p, layout)
        want = [(t.data_ptr(), t.stride(), t.storage_offset()) for t in (p.q, p.k, p.v)]
        assert [*want, (p.offsets.data_ptr(), p.offsets.stride(), 0)] == sk.SEEN, layout
    assert not failures(b.checks)
