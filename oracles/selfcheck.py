"""Self-verification of the FP64 oracles: relations that must hold, with measured discrepancy.

`run_selfchecks(device)` returns one dict per check with keys
name, value (measured discrepancy), bound, passed, detail; `format_markdown` renders them.
Inputs are generated here from a seeded torch.Generator (this package imports nothing from
`blockattn`, including its case generator).

Bounds. All comparisons are FP64 against FP64. Relative error is max|a - b| / max|b|. The two
sides evaluate the same real-valued expression with different association/summation order, so
they differ by O(n * eps) with n the longest reduction (<= 2 * D = 64 here, eps = 2.2e-16),
i.e. ~1e-14 at worst; REL_BOUND = 1e-12 leaves ~100x margin and is still ~10^4 times tighter
than any bf16/fp32 kernel error, so a real bug cannot hide under it.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from oracles.attention import block_attention, block_attention_backward, rotary_block_attention
from oracles.attention import rotary_block_attention_backward as rba_backward
from oracles.projection import (
    projection_rotary_block_attention,
    projection_rotary_block_attention_backward,
)
from oracles.rotary import rotary, rotary_backward

F64 = torch.float64
REL_BOUND = 1e-12  # see module docstring

# Lengths exercising: empty sequences, a single token, and every block-boundary case.
EDGE_LENGTHS = (0, 1, 63, 64, 65, 0, 127, 128, 129)


def rel_err(a: Tensor, b: Tensor) -> float:
    """max|a - b| / max|b| (0 when both are empty or b is all zero and a == b)."""
    if b.numel() == 0:
        return 0.0
    den = b.abs().max().item()
    num = (a - b).abs().max().item()
    return num / den if den > 0 else num


def offsets_of(lengths: tuple[int, ...] | list[int], device: str | torch.device) -> Tensor:
    lens = torch.tensor([0, *lengths], dtype=torch.int64)
    return torch.cumsum(lens, 0).to(torch.int32).to(device)


def random_inputs(
    lengths: tuple[int, ...] | list[int],
    H: int,
    D: int,
    *,
    seed: int,
    device: str | torch.device = "cpu",
    n: int = 4,
) -> tuple[Tensor, list[Tensor], Tensor]:
    """(offsets, n FP64 (T, H, D) N(0,1) tensors, unit-circle (T, D) [sin | cos] table)."""
    g = torch.Generator().manual_seed(seed)
    offsets = offsets_of(lengths, device)
    T = int(sum(lengths))
    xs = [torch.randn(T, H, D, generator=g, dtype=F64).to(device) for _ in range(n)]
    ang = 3.0 * torch.randn(T, D // 2, generator=g, dtype=F64)
    sinu = torch.cat((torch.sin(ang), torch.cos(ang)), 1).to(device)
    return offsets, xs, sinu


def dense_block_attention(
    q: Tensor, k: Tensor, v: Tensor, offsets: Tensor, block_size: int, scale: float | None = None
) -> Tensor:
    """Second formulation: dense attention over each whole sequence with a block-diagonal mask.

    A Python loop over sequences (fine for a reference); differentiable, so its autograd gives
    an independent backward.
    """
    _T, H, D = q.shape
    sc = 1.0 / math.sqrt(D) if scale is None else scale
    outs = []
    off = offsets.tolist()
    for s, e in itertools.pairwise(off):
        if e == s:
            continue
        i = torch.arange(e - s, device=q.device)
        same_block = (i[:, None] // block_size) == (i[None, :] // block_size)
        scores = sc * torch.einsum("thd,shd->hts", q[s:e].double(), k[s:e].double())
        p = torch.softmax(scores.masked_fill(~same_block, float("-inf")), dim=-1)
        outs.append(torch.einsum("hts,shd->thd", p, v[s:e].double()))
    return torch.cat(outs) if outs else q.new_zeros(0, H, D, dtype=F64)


def _result(name: str, value: float, bound: float, detail: str) -> dict[str, Any]:
    return {
        "name": name,
        "value": float(value),
        "bound": float(bound),
        "passed": bool(value <= bound),
        "detail": detail,
    }


def _autograd_grads(fn: Callable[..., Tensor], inputs: list[Tensor], grad: Tensor) -> list[Tensor]:
    leaves = [x.detach().clone().requires_grad_(True) for x in inputs]
    fn(*leaves).backward(grad)
    return [x.grad for x in leaves]


def check_backward_vs_autograd(device: str) -> dict[str, Any]:
    off, (q, k, v, g), _ = random_inputs(EDGE_LENGTHS, 2, 16, seed=1, device=device)
    ref = _autograd_grads(lambda a, b, c: block_attention(a, b, c, off), [q, k, v], g)
    got = block_attention_backward(q, k, v, off, g)
    err = max(rel_err(a, b) for a, b in zip(got, ref, strict=True))
    return _result(
        "attention backward (closed form) vs autograd", err, REL_BOUND, "max over dq, dk, dv"
    )


def check_rotary_backward_vs_autograd(device: str) -> dict[str, Any]:
    off, (q, k, v, g), sinu = random_inputs(EDGE_LENGTHS, 2, 16, seed=2, device=device)
    # A table with sin^2 + cos^2 != 1: the backward must not assume a rotation.
    sinu = 1.3 * sinu
    errs = []
    for rv in (True, False):
        ref = _autograd_grads(
            lambda a, b, c, rv=rv: rotary_block_attention(a, b, c, off, sinu, rotate_v=rv),
            [q, k, v],
            g,
        )
        got = rba_backward(q, k, v, off, sinu, g, rotate_v=rv)
        errs += [rel_err(a, b) for a, b in zip(got, ref, strict=True)]
    return _result(
        "rotary attention backward vs autograd",
        max(errs),
        REL_BOUND,
        "rotate_v in {True, False}; non-unit table (1.3 x [sin|cos])",
    )


def check_projection_backward_vs_autograd(device: str) -> dict[str, Any]:
    g0 = torch.Generator().manual_seed(3)
    lengths, qh, kvh, D, d_in = (5, 0, 70, 3), 4, 2, 8, 12
    off = offsets_of(lengths, device)
    T = sum(lengths)
    x = torch.randn(T, d_in, generator=g0, dtype=F64).to(device)
    w = torch.randn(d_in, (qh + 2 * kvh) * D, generator=g0, dtype=F64).to(device) / 3
    b = torch.randn((qh + 2 * kvh) * D, generator=g0, dtype=F64).to(device)
    go = torch.randn(T, qh, D, generator=g0, dtype=F64).to(device)
    ang = torch.randn(T, D // 2, generator=g0, dtype=F64).to(device)
    sinu = torch.cat((torch.sin(ang), torch.cos(ang)), 1)
    kw = {"block_size": 32}
    ref = _autograd_grads(
        lambda a, c, e: projection_rotary_block_attention(a, c, e, sinu, off, qh, kvh, **kw),
        [x, w, b],
        go,
    )
    got = projection_rotary_block_attention_backward(x, w, b, sinu, off, qh, kvh, go, **kw)
    err = max(rel_err(a, c) for a, c in zip(got, ref, strict=True))
    return _result(
        "projection backward vs autograd", err, REL_BOUND, "GQA 4 q / 2 kv heads, with bias"
    )


def check_forward_vs_dense(device: str) -> dict[str, Any]:
    off, (q, k, v), _ = random_inputs(EDGE_LENGTHS, 2, 16, seed=4, device=device, n=3)
    errs = []
    for bs in (64, 5, 129):  # 129 >= max length: plain dense per-sequence attention
        errs.append(
            rel_err(
                block_attention(q, k, v, off, block_size=bs),
                dense_block_attention(q, k, v, off, bs),
            )
        )
    return _result(
        "forward vs dense block-diagonal-mask formulation",
        max(errs),
        REL_BOUND,
        "block_size in {64, 5, 129}",
    )


def check_block_locality(device: str) -> dict[str, Any]:
    off, (q, k, v, q2), _ = random_inputs(EDGE_LENGTHS, 2, 16, seed=5, device=device, n=4)
    # Replace q, k, v of one whole block: the 64-long sequence (exactly one full block).
    s = int(off[3])
    blk = slice(s, s + 64)
    q_b, k_b, v_b = q.clone(), k.clone(), v.clone()
    q_b[blk], k_b[blk], v_b[blk] = q2[blk], q2[blk].flip(0), -q2[blk]
    o1 = block_attention(q, k, v, off)
    o2 = block_attention(q_b, k_b, v_b, off)
    outside = torch.ones(o1.shape[0], dtype=torch.bool, device=o1.device)
    outside[blk] = False
    n_diff = int((o1[outside] != o2[outside]).sum())
    changed = bool((o1[blk] != o2[blk]).any())
    return _result(
        "changing one block leaves all other outputs bit-identical",
        n_diff + (0 if changed else 1),  # the changed block itself must move
        0,
        f"elements differing outside the block: {n_diff}; block output changed: {changed}",
    )


def check_permutation(device: str) -> dict[str, Any]:
    off, (q, k, v), _ = random_inputs(EDGE_LENGTHS, 2, 16, seed=6, device=device, n=3)
    g = torch.Generator().manual_seed(60)
    # A permutation that stays inside every block of block_size 64.
    T = q.shape[0]
    perm = torch.arange(T)
    lens = (off[1:] - off[:-1]).tolist()
    for b, n in enumerate(lens):
        for j in range(0, n, 64):
            s = int(off[b]) + j
            m = min(64, n - j)
            perm[s : s + m] = s + torch.randperm(m, generator=g)
    perm = perm.to(q.device)
    o = block_attention(q, k, v, off)
    op = block_attention(q[perm], k[perm], v[perm], off)
    return _result(
        "permuting tokens inside blocks permutes the output",
        rel_err(op, o[perm]),
        REL_BOUND,
        "random permutation within every block",
    )


def check_key_shift(device: str) -> dict[str, Any]:
    off, (q, k, v, w), _ = random_inputs(EDGE_LENGTHS, 2, 16, seed=7, device=device, n=4)
    # k_j -> k_j + u for every key shifts every score of row i by scale * q_i.u: a per-row
    # constant, which the softmax ignores.
    u = w[:1]  # (1, H, D), broadcast over tokens
    err = rel_err(block_attention(q, k + u, v, off), block_attention(q, k, v, off))
    return _result(
        "per-row score shift (k -> k + u) leaves the output unchanged",
        err,
        REL_BOUND,
        "u ~ N(0, 1) per head",
    )


def check_chunking(device: str) -> dict[str, Any]:
    off, (q, k, v, g), sinu = random_inputs(EDGE_LENGTHS, 2, 16, seed=8, device=device)
    a = rba_backward(q, k, v, off, sinu, g)
    b = rba_backward(q, k, v, off, sinu, g, max_blocks_per_chunk=1)
    c = rba_backward(q, k, v, off, sinu, g, max_blocks_per_chunk=3)
    err = max(rel_err(x, y) for x, y in zip((*b, *c), (*a, *a), strict=True))
    return _result(
        "chunk size does not change results",
        err,
        REL_BOUND,
        "max_blocks_per_chunk in {default, 1, 3}, rotary backward",
    )


def check_rotary(device: str) -> dict[str, Any]:
    _off, (x,), sinu = random_inputs(EDGE_LENGTHS, 3, 16, seed=9, device=device, n=1)
    y = rotary(x, sinu)
    pair_norm = lambda t: t[..., 0::2].square() + t[..., 1::2].square()
    e_norm = rel_err(pair_norm(y), pair_norm(x))
    e_inv = rel_err(rotary_backward(y, sinu), x)
    return _result(
        "rotary: pair norms preserved, backward(rotary(x)) == x",
        max(e_norm, e_inv),
        REL_BOUND,
        f"pair-norm {e_norm:.1e}, inverse {e_inv:.1e} (unit-circle table)",
    )


def check_extreme_finite(device: str) -> dict[str, Any]:
    off, (q, k, v, g), _ = random_inputs(EDGE_LENGTHS, 2, 16, seed=10, device=device)
    # Scores with std 1e3 (saturated / hugely negative rows): a naive exp over/underflows.
    q = 1000.0 * q
    o = block_attention(q, k, v, off)
    grads = block_attention_backward(q, k, v, off, g)
    n_bad = int((~torch.isfinite(o)).sum()) + sum(int((~torch.isfinite(t)).sum()) for t in grads)
    return _result(
        "huge scores (std 1e3): outputs and gradients finite",
        n_bad,
        0,
        "non-finite elements in out, dq, dk, dv",
    )


EXTREME_LENGTHS = (0, 1, 65, 0, 63)  # partial blocks (padding keys) and a full one
EXP_UNDERFLOW = -745.2  # FP64's exp(x) is 0 below about this (exp(-745.13) ~ 5e-324)


def _aimed(q: Tensor, k: Tensor, rows: Tensor, target: float, scale: float) -> tuple[Tensor,
                                                                                   Tensor]:
    """k = 64 mu_h + z, z ~ N(0, 1) (mu_h a unit vector per head) and, on `rows`, q = t mu_h:
    those rows' scores are scale * t * (64 + mu.z), within ~6% of target (|mu.z| < 4) for
    t = target / (64 scale)."""
    mu = k[:1] / k[:1].norm(dim=-1, keepdim=True)
    k = k + 64.0 * mu
    q = q.clone()
    q[rows] = (target / (64.0 * scale)) * mu.expand(int(rows.sum()), -1, -1)
    return q, k


def check_extreme_ranges(device: str) -> dict[str, Any]:
    """The closed forms against the dense formulation (forward) and its autograd (backward),
    on rows whose every score lies below FP64's exp underflow (~-745; a softmax without the
    max subtraction, or with the max taken over padding keys, gives 0/0 there), rows far above
    zero (+1000: exp overflows), |q| scaled by 1e6 and 1e-6, and heads of very different
    scales (1e3 and 1e-3 in one call). Partial blocks (EXTREME_LENGTHS)."""
    off, (q0, k0, v, g), _ = random_inputs(EXTREME_LENGTHS, 2, 16, seed=11, device=device)
    sc = 16**-0.5
    T = q0.shape[0]
    rows = torch.arange(T, device=q0.device) % 3 == 0
    head = torch.tensor([1e3, 1e-3], dtype=F64, device=q0.device).view(1, 2, 1)
    cases = {
        "below exp underflow": _aimed(q0, k0, rows, -1000.0, sc),
        "far above zero": _aimed(q0, k0, rows, 1000.0, sc),
        "|q| x 1e6": (1e6 * q0, k0),
        "|q| x 1e-6": (1e-6 * q0, k0),
        "heads x 1e3 and x 1e-3": (head * q0, k0),
    }
    worst, where, n_bad = 0.0, "", 0
    for name, (q, k) in cases.items():
        o = block_attention(q, k, v, off, block_size=64, scale=sc)
        grads = block_attention_backward(q, k, v, off, g, block_size=64, scale=sc)
        ref_o = dense_block_attention(q, k, v, off, 64, sc)
        ref_g = _autograd_grads(lambda a, b, c: dense_block_attention(a, b, c, off, 64, sc),
                                [q, k, v], g)  # fmt: skip
        n_bad += sum(int((~torch.isfinite(t)).sum()) for t in (o, *grads))
        for got, ref in zip((o, *grads), (ref_o, *ref_g), strict=True):
            e = rel_err(got, ref)
            if not e <= worst:  # NaN counts as the worst
                worst, where = (math.inf if math.isnan(e) else e), name
    if cases["below exp underflow"][0][rows].numel():  # the construction reaches the range
        q, k = cases["below exp underflow"]
        s = sc * torch.einsum("thd,thd->th", q[rows], k[rows])
        assert float(s.max()) < EXP_UNDERFLOW, float(s.max())
    return _result(
        "extreme score ranges: closed forms match the dense formulation",
        worst + (math.inf if n_bad else 0.0),
        REL_BOUND,
        f"worst {worst:.1e} ({where or '-'}); non-finite {n_bad}; cases: {', '.join(cases)}",
    )


CHECKS: tuple[Callable[[str], dict[str, Any]], ...] = (
    check_backward_vs_autograd,
    check_rotary_backward_vs_autograd,
    check_projection_backward_vs_autograd,
    check_forward_vs_dense,
    check_block_locality,
    check_permutation,
    check_key_shift,
    check_chunking,
    check_rotary,
    check_extreme_finite,
    check_extreme_ranges,
)


def run_selfchecks(device: str = "cpu") -> list[dict[str, Any]]:
    """Run every check on `device`; each result has name, value, bound, passed, detail."""
    results = []
    for check in CHECKS:
        t0 = time.perf_counter()
        try:
            r = check(device)
        except Exception as exc:  # a crashing check is a failed check, reported, not raised
            r = _result(check.__name__, math.inf, 0.0, f"raised {type(exc).__name__}: {exc}")
            r["passed"] = False
        r["seconds"] = time.perf_counter() - t0
        results.append(r)
    return results


def format_markdown(results: list[dict[str, Any]], title: str = "Oracle self-check") -> str:
    lines = [
        f"## {title}",
        "",
        "| check | measured | bound | result | detail |",
        "|---|---:|---:|---|---|",
    ]
    cell = lambda s: str(s).replace("|", "\\|")  # keep table cells intact
    for r in results:
        lines.append(
            f"| {cell(r['name'])} | {r['value']:.3g} | {r['bound']:.3g} | "
            f"{'PASS' if r['passed'] else 'FAIL'} | {cell(r['detail'])} |"
        )
    n_pass = sum(r["passed"] for r in results)
    lines += ["", f"{n_pass}/{len(results)} checks passed."]
    return "\n".join(lines)
