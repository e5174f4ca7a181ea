"""The jagged case generator: reproducibility, sparsity statistics, dtypes/devices, distributions.

Statistical bounds are 5 sigma of the estimator (two-sided normal tail 5.7e-7); every draw is
seeded, so a test is deterministic and a failure means the generator changed, not bad luck.
"""

from __future__ import annotations

import math

import pytest
import torch

from blockattn.cases.generate import (
    DISTRIBUTIONS,
    NEGATIVE_ROW_FRACTION,
    Case,
    draw_lengths,
    length_std_bound,
    lengths_from_offsets,
    make_case,
    make_case_from_params,
    make_sinu_pos,
    offsets_from_lengths,
)

torch.set_num_threads(1)  # tiny tensors; avoid thread contention under pytest-xdist

FIELDS = ("q", "k", "v", "grad_out", "offsets", "sinu_pos")
HAS_CUDA = torch.cuda.is_available()


def _tensors(c: Case) -> list[torch.Tensor]:
    return [getattr(c, f) for f in FIELDS]


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_same_seed_is_bit_identical_and_regenerates(distribution):
    a = make_case(distribution=distribution, seed=5)
    b = make_case(distribution=distribution, seed=5)
    for f, x, y in zip(FIELDS, _tensors(a), _tensors(b), strict=True):
        assert torch.equal(x, y), f
    # Regeneration from params (explicit lengths) reproduces every bit too.
    for f, x, y in zip(FIELDS, _tensors(a), _tensors(a.regenerate()), strict=True):
        assert torch.equal(x, y), f
    c = make_case(distribution=distribution, seed=6)
    assert not torch.equal(a.q, c.q) or not torch.equal(a.offsets, c.offsets)


def test_explicit_lengths_override():
    c = make_case(lengths=[0, 5, 64, 0], H=3, D=8, B=99, max_len=7, sparsity=0.9)
    assert c.offsets.tolist() == [0, 0, 5, 69, 69]
    assert c.offsets.dtype == torch.int32
    assert c.q.shape == (69, 3, 8) and c.sinu_pos.shape == (69, 8)
    assert c.params["B"] == 4 and c.params["lengths"] == [0, 5, 64, 0]
    empty = make_case(lengths=[0, 0], H=1, D=2)
    assert empty.q.shape == (0, 1, 2) and empty.offsets.tolist() == [0, 0, 0]


@pytest.mark.parametrize(
    "dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64], ids=str
)
def test_dtypes(dtype):
    c = make_case(dtype=dtype, sinu_dtype=torch.float64, H=1, D=4)
    assert all(t.dtype == dtype for t in (c.q, c.k, c.v, c.grad_out))
    assert c.sinu_pos.dtype == torch.float64 and c.offsets.dtype == torch.int32
    assert c.params["dtype"] == str(dtype).removeprefix("torch.")
    # Same draws, different rounding: the fp64 case rounded to dtype is this case.
    c64 = make_case(dtype=torch.float64, H=1, D=4)
    assert torch.equal(c64.q.float().to(dtype), c.q)


def test_meta_device_shapes():
    c, ref = make_case(device="meta", H=2, D=8), make_case(H=2, D=8)
    for f, x, y in zip(FIELDS, _tensors(c), _tensors(ref), strict=True):
        assert x.device.type == "meta" and x.shape == y.shape and x.dtype == y.dtype, f
    assert c.params["device"] == "meta"


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")
def test_cuda_case_is_bit_identical_to_cpu():
    c, ref = make_case(device="cuda", seed=3), make_case(seed=3)
    for f, x, y in zip(FIELDS, _tensors(c), _tensors(ref), strict=True):
        assert x.is_cuda and torch.equal(x.cpu(), y), f


@pytest.mark.parametrize("sparsity", [0.0, 0.2, 0.5, 0.7, 0.95])
def test_sparsity_mean_within_5_sigma(sparsity):
    B, max_len = 20000, 4096
    lens = draw_lengths(B, max_len, sparsity, torch.Generator().manual_seed(7))
    assert lens.min() >= 0 and lens.max() <= max_len
    m = (1 - sparsity) * max_len
    # Std of the sample mean is sigma / sqrt(B) with sigma <= sqrt(h^2/3 + 1/4).
    bound = 5 * length_std_bound(max_len, sparsity) / math.sqrt(B)
    assert abs(lens.double().mean().item() - m) <= bound + 1e-9
    # Empty fraction of the padded grid, as defined.
    empty = 1 - lens.sum().item() / (B * max_len)
    assert abs(empty - sparsity) <= bound / max_len + 1e-12


def test_sparsity_in_make_case_and_production_shape():
    c = make_case(B=400, max_len=64, sparsity=0.7, H=1, D=2, seed=8)
    lens = lengths_from_offsets(c.offsets)
    bound = 5 * length_std_bound(64, 0.7) / math.sqrt(400)
    assert abs(lens.double().mean().item() - 0.3 * 64) <= bound
    # Production P: B=1152, max_len=4096, sparsity 0.7 -> mean 1228.8, ~1.4M tokens.
    p = draw_lengths(1152, 4096, 0.7, torch.Generator().manual_seed(0))
    assert abs(p.double().mean().item() - 1228.8) <= 5 * length_std_bound(4096, 0.7) / 1152**0.5


def test_bad_arguments():
    with pytest.raises(ValueError, match="distribution"):
        make_case(distribution="uniform")
    with pytest.raises(ValueError, match="sparsity"):
        make_case(sparsity=1.0)
    with pytest.raises(ValueError, match="D must be even"):
        make_case(D=5)
    with pytest.raises(ValueError, match="lengths"):
        make_case(lengths=[3, -1])
    with pytest.raises(TypeError, match="dtype"):
        offsets_from_lengths([1, 2], dtype=torch.float32)


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_never_all_zero(distribution, seed):
    # Even when sparsity is so high that every drawn length is 0, one token is kept.
    for c in (
        make_case(distribution=distribution, seed=seed, H=1, D=4),
        make_case(distribution=distribution, seed=seed, B=2, max_len=4, sparsity=0.99, D=4),
    ):
        assert c.offsets[-1] >= 1
        for t in (c.q, c.k, c.v, c.grad_out):
            assert (t != 0).any() and torch.isfinite(t).all()


def _block_case(distribution: str, n_blocks: int = 64, D: int = 64) -> tuple[Case, torch.Tensor]:
    """Sequences of exactly one full 64-token block; returns (case, scores (B, H, 64, 64))."""
    c = make_case(lengths=[64] * n_blocks, H=2, D=D, dtype=torch.float32, distribution=distribution)
    q = c.q.double().reshape(n_blocks, 64, 2, D).transpose(1, 2)
    k = c.k.double().reshape(n_blocks, 64, 2, D).transpose(1, 2)
    return c, q @ k.transpose(-1, -2) / math.sqrt(D)


def test_normal_moments():
    c = make_case(lengths=[2000], H=4, D=16, dtype=torch.float32)
    x = c.q.double().flatten()
    n = x.numel()
    # 5 sigma: sd(mean) = 1/sqrt(n); sd(sample variance) = sqrt(2/n) for N(0, 1).
    assert abs(x.mean().item()) <= 5 / math.sqrt(n)
    assert abs(x.var().item() - 1) <= 5 * math.sqrt(2 / n)


def test_scaled_logits_saturate_softmax():
    _, s = _block_case("scaled_logits")
    _, s_normal = _block_case("normal")
    pmax = torch.softmax(s, -1).amax(-1)
    # Scores have std ~64 (8*8): the top key almost always wins outright.
    assert pmax.median() > 0.99
    assert torch.softmax(s_normal, -1).amax(-1).median() < 0.5  # control: normal is not


def test_heavy_tailed_has_outliers():
    c = make_case(lengths=[4000], H=2, D=16, dtype=torch.float32, distribution="heavy_tailed")
    cn = make_case(lengths=[4000], H=2, D=16, dtype=torch.float32)
    frac = lambda t: (t.abs() > 5).double().mean().item()
    # Student-t(3): P(|t| > 5) = 0.0154; N(0,1): 5.7e-7. With n = 128k samples the 5-sigma
    # binomial band around 0.0154 is +-0.0017, so 0.005 separates the two cleanly.
    assert frac(c.q) > 0.005 and frac(c.k) > 0.005
    assert frac(cn.q) < 0.005
    assert c.q.abs().max() > 20


def test_tiny_magnitudes():
    c = make_case(distribution="tiny", lengths=[500], H=2, D=16)
    for t in (c.q, c.k, c.v):
        a = t.double().abs()
        # 1e-3 * N(0,1): |x| > 1e-2 needs a 10-sigma draw.
        assert 0 < a.max() < 1e-2
        assert 3e-4 < a.mean() < 1.2e-3  # E|z| * 1e-3 = 8e-4


def test_near_constant_softmax_is_uniform():
    _, s = _block_case("near_constant")
    p = torch.softmax(s, -1)
    # Rows are one shared vector + 1e-3 noise: scores differ by ~1e-2, so every weight is
    # within ~1% of 1/64.
    assert (p * 64 - 1).abs().max() < 0.05
    _, s_normal = _block_case("normal")
    assert (torch.softmax(s_normal, -1) * 64 - 1).abs().max() > 1  # control


def test_negative_rows_are_strongly_negative():
    _c, s = _block_case("negative_rows")
    rowmax = s.amax(-1)  # (B, H, 64)
    neg = rowmax[:, 0] < -100  # a row is selected for every head at once
    assert torch.equal(neg, rowmax[:, 1] < -100)
    n = neg.numel()
    # Binomial(n, 0.25) row selection: 5 sigma band.
    sigma = math.sqrt(NEGATIVE_ROW_FRACTION * (1 - NEGATIVE_ROW_FRACTION) / n)
    assert abs(neg.double().mean().item() - NEGATIVE_ROW_FRACTION) <= 5 * sigma
    assert (rowmax[:, 0][~neg] > -50).all()  # the other rows are ordinary


def test_make_sinu_pos_matches_loop():
    off = offsets_from_lengths([3, 0, 5], torch.int64)
    D, theta = 6, 500.0
    got = make_sinu_pos(off, D, theta=theta, dtype=torch.float64)
    rows = []
    for n in (3, 0, 5):
        for pos in range(n):  # position restarts in every sequence
            ang = [pos * theta ** (-2 * i / D) for i in range(D // 2)]
            rows.append([math.sin(a) for a in ang] + [math.cos(a) for a in ang])
    assert torch.allclose(got, torch.tensor(rows, dtype=torch.float64), rtol=0, atol=1e-15)
    assert make_sinu_pos(off, D).dtype == torch.float32
    assert make_sinu_pos(offsets_from_lengths([]), 4).shape == (0, 4)


def test_offsets_lengths_round_trip():
    lens = [0, 3, 64, 0, 1]
    for dt in (torch.int32, torch.int64):
        off = offsets_from_lengths(lens, dt)
        assert off.dtype == dt and off.tolist() == [0, 0, 3, 67, 67, 68]
        assert lengths_from_offsets(off).tolist() == lens


def test_describe_and_params():
    c = make_case(distribution="tiny", seed=3, H=2, D=8, dtype=torch.float16)
    d = c.describe()
    assert d.startswith("tiny-B4-") and "fp16" in d and d.endswith("seed3")
    assert d != make_case(distribution="tiny", seed=4, H=2, D=8).describe()
    p = c.params
    assert {
        "seed",
        "B",
        "max_len",
        "sparsity",
        "lengths",
        "H",
        "D",
        "dtype",
        "distribution",
    } <= set(p)
    again = make_case_from_params(p)
    assert torch.equal(again.q, c.q) and torch.equal(again.offsets, c.offsets)
