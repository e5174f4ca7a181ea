"""Known answers for the contract battery's judge: each witness kernel (`witness_kernels.py`,
plain torch, milliseconds on a CPU) breaks exactly one property for one tensor or position, and
the part of the battery that owns that property must FAIL it by name, where the break is, while
`faithful` passes the same part. The judge mutants of the catalog (`contract_bugs.JUDGE`) name
this file: each removes part of a property and one of these tests dies.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from blockattn import providers
from blockattn.cases import contract as C
from blockattn.judge import tolerances
from blockattn.judge.contract import Battery, failures

HERE = Path(__file__).resolve().parent
DEV = "cpu"  # plain-torch witnesses: the battery's judge, not a device, is under test


@pytest.fixture(scope="module")
def tol():
    return tolerances.load(
        tolerances.latest_released(tolerances.default_tolerance_dir(), device="cpu"))


@pytest.fixture(autouse=True)
def _path(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(HERE))
    yield
    for n, p in list(providers.all_providers().items()):
        if p.origin.startswith("witness_kernels:"):
            providers.unregister(n)


def _b(name: str, tol) -> Battery:
    return Battery(providers.load_spec(f"witness_kernels:{name}"), tol, DEV)


def _t(rotary: bool = False):
    return C.base(torch.bfloat16, 64, DEV, rotary=rotary)


def _fails(b: Battery, prop: str | None = None) -> dict[str, str]:
    return {c.probe: c.detail for c in failures(b.checks) if prop is None or c.prop == prop}


def _containment(name: str, tol, rotary: bool = False) -> Battery:
    b = _b(name, tol)
    b.containment(_t(), rotary_t=_t(rotary=True) if rotary else None)
    return b


def test_faithful_passes_every_part_the_witnesses_fail(tol) -> None:
    b = _containment("faithful", tol, rotary=True)
    ts = C.base(torch.bfloat16, 64, DEV, seed=6, lengths=C.SHORT_LENGTHS, rotary=True)
    t = {**ts, "sinu_pos": None}
    for layout in C.LAYOUT_KINDS:
        b.numeric(C.layout_probe(t if layout != "sinu-strided" else ts, layout))
    for rotary in (False, True):
        for p in C.scale_probes(torch.bfloat16, 64, DEV, rotary):
            b.numeric(p)
    b.determinism()
    assert not failures(b.checks), [(c.probe, c.detail) for c in failures(b.checks)]
    props = {c.prop for c in b.checks if c.status == "pass"}
    assert {"containment", "layout", "scale", "determinism", "inputs-untouched"} <= props
    assert len([c for c in b.checks if c.prop == "containment"]) == 4


# ----------------------------------------------------------------------------- containment


def test_a_leak_only_after_sequence_0_fails_containment_first(tol) -> None:
    bad = _fails(_containment("leak_after", tol), "containment")
    assert list(bad) == ["containment-first"], bad  # poisons elsewhere never reach sequence 0
    assert "after the poisoned sequence" in bad["containment-first"]
    assert "before the poisoned" not in bad["containment-first"]


def test_a_leak_only_before_the_last_sequence_fails_containment_last(tol) -> None:
    bad = _fails(_containment("leak_before", tol), "containment")
    assert list(bad) == ["containment-last"], bad
    assert "before the poisoned sequence" in bad["containment-last"]
    assert "after the poisoned" not in bad["containment-last"]


def test_a_leak_across_blocks_of_one_sequence_fails_containment_middle(tol) -> None:
    # the first and last sequences are one block each: only the middle one has another block
    bad = _fails(_containment("leak_across_blocks", tol), "containment")
    assert list(bad) == ["containment-middle"], bad
    assert "inside the poisoned sequence" in bad["containment-middle"]
    assert "O:" in bad["containment-middle"] and "after" not in bad["containment-middle"]


def test_a_leak_across_heads_fails_containment_at_every_position(tol) -> None:
    bad = _fails(_containment("leak_across_heads", tol), "containment")
    assert set(bad) == {"containment-first", "containment-middle", "containment-last"}, bad
    assert all("inside the poisoned sequence" in d for d in bad.values()), bad


def test_a_leak_only_from_grad_out_fails_containment_in_the_gradients(tol) -> None:
    bad = _fails(_containment("leak_from_grad_out", tol), "containment")
    assert set(bad) == {"containment-first", "containment-middle", "containment-last"}, bad
    for d in bad.values():
        assert "dQ:" in d and "dK:" in d and "dV:" in d and "O:" not in d, d


def test_a_leak_only_from_sinu_pos_fails_the_rotary_containment_probe(tol) -> None:
    bad = _fails(_containment("leak_from_sinu", tol, rotary=True), "containment")
    assert list(bad) == ["containment-middle-rotary"], bad
    assert "O:" in bad["containment-middle-rotary"]


# ----------------------------------------------------------------------------- layout


def _layouts(name: str, tol) -> dict[str, str]:
    """Every layout probe, on the battery's short batch (two heads, two sequences)."""
    b = _b(name, tol)
    ts = C.base(torch.bfloat16, 64, DEV, seed=6, lengths=C.SHORT_LENGTHS, rotary=True)
    t = {**ts, "sinu_pos": None}
    for layout in C.LAYOUT_KINDS:
        b.numeric(C.layout_probe(t if layout != "sinu-strided" else ts, layout))
    return _fails(b, "layout")


def _with(tensor: str, kinds: set[str]) -> set[str]:
    i = C.NAMES.index(tensor)
    return {f"layout-{n}" for n, ks in C.LAYOUT_KINDS.items() if ks[i] in kinds}


def test_grad_out_read_as_contiguous_fails_every_probe_with_a_strided_grad_out(tol) -> None:
    bad = _layouts("grad_out_as_contiguous", tol)
    want = _with("grad_out", {"token-strided", "head-strided", "transposed"})
    assert set(bad) == want, (bad, want)
    assert all("dQ:" in d and "O:" not in d for d in bad.values()), bad


def test_k_read_as_contiguous_fails_every_probe_with_a_strided_k(tol) -> None:
    bad = _layouts("k_as_contiguous", tol)
    assert set(bad) == _with("k", {"token-strided", "head-strided", "transposed"}), bad


def test_heads_taken_as_packed_fail_only_where_q_heads_are_not(tol) -> None:
    bad = _layouts("heads_packed", tol)
    assert set(bad) == _with("q", {"head-strided", "transposed"}), bad


def test_q_strides_used_for_k_and_v_fail_only_the_mixed_layouts(tol) -> None:
    bad = _layouts("q_strides_for_all", tol)
    # "offset" has a contiguous tensor's strides: the same strides as "contiguous"
    strides = {"offset": "contiguous"}
    mixed = {f"layout-{n}" for n, ks in C.LAYOUT_KINDS.items()
             if len({strides.get(x, x) for x in ks[:3]}) > 1}  # fmt: skip
    assert set(bad) == mixed and len(mixed) >= 4, (bad, mixed)


def test_sinu_pos_read_as_contiguous_fails_the_sinu_strided_probe(tol) -> None:
    assert set(_layouts("sinu_as_contiguous", tol)) == {"layout-sinu-strided"}


# ----------------------------------------------------------------------------- scale


def _scales(name: str, tol) -> dict[str, str]:
    b = _b(name, tol)
    for rotary in (False, True):
        for p in C.scale_probes(torch.bfloat16, 64, DEV, rotary):
            b.numeric(p)
    assert {c.prop for c in b.checks} >= {"scale"}
    return _fails(b, "scale")


def test_scale_zero_taken_as_default_fails_the_zero_scale_probes(tol) -> None:
    assert set(_scales("zero_scale_is_default", tol)) == {
        "scale-zero", "scale-zero-rotary-rotate-v-false"}


def test_a_plain_path_that_ignores_scale_fails_every_plain_scale_probe(tol) -> None:
    assert set(_scales("plain_ignores_scale", tol)) == {
        "scale-zero", "scale-negative", "scale-tiny", "scale-large"}


def test_a_negative_scale_taken_as_its_magnitude_fails_the_negative_probes(tol) -> None:
    assert set(_scales("abs_scale", tol)) == {"scale-negative",
                                              "scale-negative-rotary-rotate-v-true"}


# ----------------------------------------------------------------------------- others


def test_one_gradient_nondeterministic_fails_determinism_naming_it(tol) -> None:
    b = _b("dv_nondeterministic", tol)
    b.determinism()
    bad = _fails(b, "determinism")
    assert len(bad) == 1 and "(in dV)" in next(iter(bad.values())), bad


def test_a_backward_writing_grad_out_fails_inputs_untouched(tol) -> None:
    b = _b("writes_grad_out", tol)
    b.numeric(C.layout_probe(_t(), "padded"))
    bad = _fails(b)
    assert list(bad) == ["layout-padded"] and "['grad_out']" in bad["layout-padded"], bad
    assert [c.prop for c in failures(b.checks)] == ["inputs-untouched"]
