"""The battery's probes can fail: each differs from the clean contiguous case where it claims to,
at the probe's own sizes (a stride of a size-1 dimension is never used, so a view that is
contiguous but for size-1 dimensions is no probe), and every position, value and tensor the
properties name is reached. Pure construction: no kernel runs here."""

from __future__ import annotations

import pytest
import torch

from blockattn.cases import contract as C


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("layout", list(C.LAYOUT_KINDS))
def test_every_layout_probe_departs_from_contiguous_memory_where_it_claims(layout, D) -> None:
    t = C.base(torch.bfloat16, D, "cpu", rotary=True)
    p = C.layout_probe(t, layout)
    assert p.q.shape[1] >= 2, "head strides and (H, T, D) storage matter only at H >= 2"
    for name, kind in p.kinds.items():
        view = getattr(p, name)
        want = (C.SINU_KINDS if name == "sinu_pos" else C.EXPECTED)[kind]
        got = C.departures(view)
        assert want <= got and (want or not got), (layout, name, kind, view.stride(), got)
        assert torch.equal(view.float(), t[name].float()), "values equal, memory different"
        if kind != "contiguous" or name != "sinu_pos":
            assert view.untyped_storage().nbytes() > view.numel() * view.element_size(), \
                "a NaN margin past the view's end"


def test_the_departure_check_sees_through_size_1_dims() -> None:
    # At H = 1 a grad_out stored (H, T, D) has exactly a contiguous tensor's memory (the
    # battery's old blind spot): departures() must call it contiguous, so the test above fails
    # for a probe built at H = 1.
    t = C.base(torch.bfloat16, 64, "cpu", H=1)
    for layout in ("grad-out-transposed", "head-strided", "mixed-1"):
        p = C.layout_probe(t, layout)
        lost = [n for n, k in p.kinds.items()
                if not C.EXPECTED.get(k, set()) <= C.departures(getattr(p, n))]  # fmt: skip
        assert lost, layout


def test_each_input_takes_each_layout_and_the_mixed_probes_mix() -> None:
    for i, name in enumerate(C.NAMES):
        kinds = {ks[i] for ks in C.LAYOUT_KINDS.values()}
        assert kinds == set(C.KINDS), (name, kinds)
    mixed = [n for n, ks in C.LAYOUT_KINDS.items() if len(set(ks)) >= 3]
    assert len(mixed) >= 4, mixed
    # q contiguous beside strided k, v and grad_out
    assert any(ks[0] == "contiguous" and len(set(ks[1:]) - {"contiguous"}) == 3
               for ks in C.LAYOUT_KINDS.values())  # fmt: skip
    assert set(C.LAYOUTS) == set(C.LAYOUT_KINDS)
    p = C.layout_probe(C.base(torch.bfloat16, 64, "cpu", rotary=True), "sinu-strided")
    assert p.kinds["sinu_pos"] == "row-strided" and p.rotate_v is False


def test_containment_reaches_every_position_value_and_tensor() -> None:
    assert C.LENGTHS[C.SEQUENCES["first"]] > 0 and C.SEQUENCES["first"] == 0
    assert 0 in C.LENGTHS[1:-1] and C.LENGTHS[-1] == 0  # empty sequences between and after
    t = C.base(torch.bfloat16, 64, "cpu")
    clean = C.layout_probe(t, "padded")
    probes = C.containment_probes(t)
    assert [p.name for p in probes] == ["containment-first", "containment-middle",
                                        "containment-last"]  # fmt: skip
    for p in probes:
        a, b = p.poisoned
        assert b > a and p.affected.shape == (p.T, p.q.shape[1])
        for name in C.POISONED:
            x = getattr(p, name)
            bad = ~torch.isfinite(x)
            assert bool(bad.any()), (p.name, name)
            rows = bad.any(dim=(1, 2)).nonzero().flatten()
            assert all(a <= int(r) < b for r in rows), "poisons inside the poisoned sequence"
            assert not bool(bad[:, 1:].any()), "head 0 only: the other head is checked"
            vals = x[bad].float()
            assert bool(vals.isnan().any()) and bool((vals == float("inf")).any()) and \
                bool((vals == float("-inf")).any()), (p.name, name)
            assert bool(p.affected[bad.any(dim=2)].all()), "every poisoned cell is excused"
            assert torch.equal(x[~bad].float(), getattr(clean, name)[~bad].float())
        # and nothing else is excused: other head, other blocks, other sequences are checked
        assert not bool(p.affected[:, 1].any())
        assert int(p.affected.sum()) <= min(b - a, p.block_size)
    middle = probes[1]
    a, b = middle.poisoned
    assert bool((~middle.affected[a:b, 0]).any()), "the middle sequence has another block"
    r = C.poisoned(C.base(torch.bfloat16, 64, "cpu", rotary=True), "middle", sinu=True)
    bad = ~torch.isfinite(r.sinu_pos)
    assert int(bad.sum()) == 3 and bool(r.affected[bad.any(dim=1)].all())


def test_scale_probes_cover_each_edge_on_plain_and_rotary_with_both_rotate_v() -> None:
    plain = C.scale_probes(torch.bfloat16, 64, "cpu", rotary=False)
    rot = C.scale_probes(torch.bfloat16, 64, "cpu", rotary=True)
    for ps in (plain, rot):
        scales = [p.scale for p in ps]
        assert 0.0 in scales and min(scales) < 0 and any(0 < s < 1e-4 for s in scales)
        assert max(scales) >= 4.0
    assert all(p.sinu_pos is None for p in plain)
    assert all(p.sinu_pos is not None for p in rot) and {p.rotate_v for p in rot} == {True,
                                                                                     False}


def test_block_size_probes_cover_each_row_tile_class() -> None:
    from blockattn.kernels.tile_math import block_rows

    assert {block_rows(bs) for bs in C.BLOCK_SIZES_ANY} == {16, 32, 64, 128}
