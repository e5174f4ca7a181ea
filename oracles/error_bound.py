"""First-order rounding-error bounds of block attention for a declared accuracy model, in FP64.

Running error analysis (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed.,
ch. 3): every quantity x of the exact FP64 computation carries E_x >= |x_hat - x|, the first-order
bound on what an implementation that follows the model can have lost up to that point. The rules
(derivation, constants and the model of each provider: blockattn/bounds/ERROR_ANALYSIS.md):

* a rounding of x with unit roundoff u (fl(x) = x(1 + d), |d| <= u, Higham (2.4)), where x may
  land in the subnormal range: + u |x| + eta [x != 0];
* a matrix product C = A B with inner length n and accumulation unit roundoff u_acc
  (|C - C_hat| <= gamma_n |A||B|, Higham (3.13)): E_A |B| + |A| E_B + n u_acc |A||B|;
* softmax P = softmax(S): E_P = P (E_S + sum_k P_k E_S_k) + (elementwise roundings) P;
* rotation y = R x per pair: E_y = |R| E_x + u |R||x|;
* FP32 results below the smallest normal may be flushed to zero (ftz): eta of classes `acc`
  (per accumulated term) and `softmax` (per elementwise op) is that absolute error;
* beyond first order (ERROR_ANALYSIS.md §4): the constant c = 2 covers a step's higher-order
  remainder up to the size of its first-order terms; where a remainder can be larger (the
  softmax of logits whose bound is not small next to 1, a product of two factors that both
  carry an error larger than themselves) only that excess is added to E;
* a rounding after the softmax scale (ERROR_ANALYSIS.md §4): a model whose implementation rounds
  scale * dS once more (eager's autograd) declares it (`after_scale`); in units of dS that
  rounding's subnormal floor is eta / |scale|.

The model is a dict {"u": {class: unit roundoff}, "eta": {class: absolute floor}} over the
rounding classes in CLASSES; a class missing from a model is an error (nothing defaults to 0).
An optional "after_scale" lists the classes (of AFTER_SCALE) rounded once more as scale * x.
Every model is evaluated in one pass (leading dim M); the first-order terms are linear in the
(u, eta), the excess terms above are 0 unless an error bound is not small next to 1. The
bound E is returned in float32: it needs three significant digits, not 16.
This module imports nothing from `blockattn`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from oracles import _validate as val
from oracles.attention import _Tiles, block_layout, masked_softmax, max_blocks_per_chunk
from oracles.rotary import _interleave, _rotate, _split_sinu

F64 = torch.float64

# Rounding classes: where an implementation of block attention may round (ERROR_ANALYSIS.md §2).
CLASSES: tuple[str, ...] = (
    "rot",  # rotated q/k/v as GEMM operands (rotation arithmetic + operand rounding)
    "S",  # logits S = scale q k^T after the GEMM (scale multiply, storage)
    "softmax",  # exp, row sum, division of the softmax (per element, relative)
    "P_gemm",  # P as an operand of P V and P^T dO
    "P_bwd",  # the P used in Di = rowsum(P dP) and dS = P (dP - Di)
    "V_dP",  # V as operand of dP = dO V^T, possibly minus a row vector m of its block (exact
    # identity: rows of P sum to 1), rounded relative to |V_j - m| <= |V_j| + max_k |V_k|
    "dP",  # dP = dO V^T stored before use
    "Di_from_O",  # Di = rowsum(dO * O) from O stored in the input dtype (FA v2), else 0
    "dS_gemm",  # dS as an operand of dS K and dS^T Q
    "grad_rot",  # gradients of rotated inputs rotated back (and stored before that)
    "io",  # projection: q/k/v and dq/dk/dv stored between the GEMMs and the attention
    "acc",  # one addition of a GEMM accumulation (times the inner length n)
)
# Classes a model may declare rounded once more after the softmax scale multiply ("after_scale").
AFTER_SCALE: tuple[str, ...] = ("dS_gemm",)


def _model_tensors(models: Sequence[Mapping], device: torch.device) -> dict[str, Tensor]:
    """{"u.<class>" | "eta.<class>": (M, 1, 1, 1, 1) FP64} from the model dicts."""
    if not models:
        raise ValueError("models must name at least one accuracy model")
    out = {}
    for part in ("u", "eta"):
        for cls in CLASSES:
            vals = []
            for i, m in enumerate(models):
                table = m.get(part) if isinstance(m, Mapping) else None
                if not isinstance(table, Mapping) or cls not in table:
                    raise ValueError(f"models[{i}]: missing {part}.{cls}")
                x = table[cls]
                if isinstance(x, bool) or not isinstance(x, int | float) or not x >= 0:
                    raise ValueError(f"models[{i}]: {part}.{cls} must be a number >= 0, got {x!r}")
                vals.append(float(x))
            out[f"{part}.{cls}"] = torch.tensor(vals, dtype=F64, device=device).view(-1, 1, 1, 1, 1)
    for i, m in enumerate(models):
        extra = m.get("after_scale", ())
        if isinstance(extra, str) or not set(extra) <= set(AFTER_SCALE):
            raise ValueError(f"models[{i}]: after_scale must list classes of {AFTER_SCALE}, "
                             f"got {extra!r}")
    for cls in AFTER_SCALE:
        flags = [float(cls in m.get("after_scale", ())) for m in models]
        out[f"after_scale.{cls}"] = torch.tensor(flags, dtype=F64, device=device).view(-1, 1, 1,
                                                                                      1, 1)
    return out


def _abs_rotate(a: Tensor, sin: Tensor, cos: Tensor) -> Tensor:
    """|R| a for a >= 0: the rotation with every entry in absolute value (|R^T| = |R|)."""
    a0, a1 = a[..., 0::2], a[..., 1::2]
    s, c = sin.abs(), cos.abs()
    return _interleave(a0 * c + a1 * s, a1 * c + a0 * s)


def _rounding(x: Tensor, m: dict[str, Tensor], cls: str) -> Tensor:
    """u |x| + eta [x != 0]: one rounding of x in class `cls`, for every model."""
    return m[f"u.{cls}"] * x.abs() + m[f"eta.{cls}"] * (x != 0)


def _after_scale(x: Tensor, m: dict[str, Tensor], cls: str, scale: float) -> Tensor:
    """E, in units of x, of rounding scale * x_hat once more in class `cls`, for the models that
    declare it (after_scale.<cls> = 1; 0 for the others, so their bound is unchanged bit for bit).

    One rounding to nearest of y errs by at most u |y| where |y| is at least the smallest normal
    eta / u, and by at most eta below it (ERROR_ANALYSIS.md §4). The relative part is 0 when
    |scale| is a power of two (the product is exact in the normal range); the floor is charged as
    min(eta, (2 eta - u |y|)+): eta up to the smallest normal, 0 from twice it, and it moves by at
    most u |y_hat - y| (u E, left to c as for every rounding). Divided by |scale|: units of x.
    0 where x = 0 or scale = 0 (an exact product).
    """
    asc = abs(scale)
    if asc == 0.0:
        return torch.zeros_like(x)
    u, eta = m[f"u.{cls}"], m[f"eta.{cls}"]
    y = asc * x.abs()
    rel = 0.0 if math.frexp(asc)[0] == 0.5 else u * y  # |scale| = 2^k: exact above the normals
    floor = torch.minimum(eta, (2.0 * eta - u * y).clamp_min(0.0))
    return m[f"after_scale.{cls}"] * (rel + floor) * (x != 0) / asc


def _mm(a: Tensor, b: Tensor) -> Tensor:
    """a @ b with a model dim in front of either operand (broadcasts)."""
    return torch.matmul(a, b)


def _excess(e: Tensor, a: Tensor) -> Tensor:
    """(E - |x|)+ for E >= |x_hat - x|, a >= |x|: the part of an error bound larger than the value.

    A product of two inexact factors errs by at most E_a |b| + |a| E_b + E_a E_b, and
    E_a E_b <= E_a |b| + |a| E_b + (E_a - |a|)+ (E_b - |b|)+ (ERROR_ANALYSIS.md §4): c = 2 covers
    the cross term up to the first-order pair, the product of the two excesses is carried in E.
    It is 0 unless both factors carry an error larger than themselves.
    """
    return (e - a).clamp_min(0.0)


def _softmax_excess(p: Tensor, e: Tensor, first: Tensor) -> Tensor:
    """(R - 2 first)+: R the worst |softmax(S + d)_j - P_j| over |d_k| <= e_k, `first` its
    first-order part P (e + rowsum(P e)) (ERROR_ANALYSIS.md §4).

    softmax(S + d)_j / P_j = exp(d_j) / sum_k P_k exp(d_k) lies in [exp(-e_j) / C, exp(e_j) / B]
    with B = sum_k P_k exp(-e_k), C = sum_k P_k exp(e_k); a softmax lies in [0, 1], so R is also
    at most max(P, 1 - P). c = 2 covers R up to 2 first; only the excess is added. In FP64 with
    expm1 / log1p, so the excess is exactly 0 where e is small next to 1.
    """
    pos = p > 0
    sm = torch.where(pos, p * torch.expm1(-e), 0.0).sum(-1, keepdim=True)  # B - 1, in (-1, 0]
    sp = torch.where(pos, p * torch.expm1(e), 0.0).sum(-1, keepdim=True)  # C - 1 >= 0
    direct = torch.where(pos, p * torch.exp(-e), 0.0).sum(-1, keepdim=True)
    log_b = torch.where(sm > -0.5, torch.log1p(sm), torch.log(direct))
    hi = torch.expm1(e - log_b)  # exp(e_j) / B - 1
    lo = -torch.expm1(-e - torch.log1p(sp))  # 1 - exp(-e_j) / C
    r = torch.where(pos, p * torch.maximum(hi, lo), 0.0)
    r = torch.minimum(r, torch.maximum(p, 1.0 - p))
    return (r - 2.0 * first).clamp_min(0.0)


class _Chain:
    """Error bounds of one chunk of (n, H, bs, D) tiles through the attention."""

    def __init__(self, m: dict[str, Tensor], scale: float, n_keys: int) -> None:
        self.m, self.scale, self.bs = m, scale, n_keys

    def operand(self, x: Tensor, e_in: Tensor | None, sin: Tensor | None, cos: Tensor | None,
                rotate: bool) -> tuple[Tensor, Tensor, Tensor]:
        """(value, |value| bound, E) of a q/k/v tile entering the GEMMs, rotated if `rotate`."""
        m = self.m
        e = torch.zeros_like(x)[None] if e_in is None else e_in
        if not rotate:
            return x, x.abs(), e
        y = _rotate(x, sin, cos)
        ax = _abs_rotate(x.abs(), sin, cos)
        ey = _abs_rotate(e, sin, cos) + m["u.rot"] * ax + m["eta.rot"]
        return y, ax, ey

    def forward(self, q, aq, eq, k, ak, ek, v, av, ev, key_valid):
        m, sc, D = self.m, self.scale, q.shape[-1]
        asc = abs(sc)  # magnitudes and errors scale with |scale| (a negative scale is valid)
        s = sc * (q @ k.transpose(-1, -2))
        a_qk = asc * (aq @ ak.transpose(-1, -2))
        e_s = asc * (_mm(eq, ak.transpose(-1, -2)) + _mm(aq, ek.transpose(-1, -2)))
        e_s = e_s + D * (m["u.acc"] * a_qk + m["eta.acc"]) + _rounding(s, m, "S")
        e_s = e_s + asc * _mm(_excess(eq, aq), _excess(ek, ak).transpose(-1, -2))
        p = masked_softmax(s, key_valid)
        e_s = e_s.masked_fill(~key_valid, 0.0)
        # Max subtraction s - m is rounded once more: u |s - max| in the exponent.
        s_max = s.masked_fill(~key_valid, float("-inf")).amax(-1, keepdim=True)
        shift = (s - s_max).masked_fill(~key_valid, 0.0).abs()
        e_arg = e_s + m["u.softmax"] * shift
        e_p = p * (e_arg + (p * e_arg).sum(-1, keepdim=True))
        e_p = e_p + _softmax_excess(p, e_arg, e_p)  # the exponential beyond first order
        e_p = e_p + (4 * m["u.softmax"] + self.bs * m["u.acc"]) * p  # exp, sum, divide
        e_p = e_p + m["eta.softmax"] * key_valid  # exp2 results below FP32's normals flushed
        e_pg = e_p + _rounding(p, m, "P_gemm")
        o = p @ v
        e_o = _mm(e_pg, av) + _mm(p, ev) + self.bs * (m["u.acc"] * (p @ av) + m["eta.acc"])
        e_o = e_o + _mm(_excess(e_pg, p), _excess(ev, av))
        e_o = e_o + m["u.softmax"] * o.abs()  # a final normalisation or scale, if any
        self.saved = (s, p, e_p, e_pg, o, e_o)
        return o, e_o

    def backward(self, q, aq, eq, k, ak, ek, v, av, ev, do):
        m, sc, D, bs = self.m, self.scale, q.shape[-1], self.bs
        asc = abs(sc)
        _s, p, e_p, e_pg, o, e_o = self.saved
        ado = do.abs()
        dv = p.transpose(-1, -2) @ do
        e_dv = _mm(e_pg.transpose(-1, -2), ado)
        e_dv = e_dv + bs * (m["u.acc"] * (p.transpose(-1, -2) @ ado) + m["eta.acc"])
        dp = do @ v.transpose(-1, -2)
        # An implementation may form dP from V - m, m a row vector of the block (its mean or one
        # row): the sums and the operand rounding then scale with |V_j - m| <= |V_j| + max |V|.
        av_c = av + av.amax(dim=-2, keepdim=True)
        e_dp = _mm(ado, ev.transpose(-1, -2))
        e_dp = e_dp + _mm(ado, (m["u.V_dP"] * av_c + m["eta.V_dP"]).transpose(-1, -2))
        e_dp = e_dp + D * (m["u.acc"] * (ado @ av_c.transpose(-1, -2)) + m["eta.acc"])
        e_dp = e_dp + _rounding(dp, m, "dP")
        di = (p * dp).sum(-1, keepdim=True)
        e_pb = e_p + _rounding(p, m, "P_bwd")
        # Di = rowsum(P dP); an implementation that forms it as rowsum(dO * O) from the stored O
        # (Di_from_O) adds the error of O and its rounding, times |dO|.
        e_di = (e_pb * dp.abs() + p * e_dp).sum(-1, keepdim=True)
        e_di = e_di + (_excess(e_pb, p) * _excess(e_dp, dp.abs())).sum(-1, keepdim=True)
        e_di = e_di + bs * (m["u.acc"] * (p * dp.abs()).sum(-1, keepdim=True) + m["eta.acc"])
        o_err = e_o + _rounding(o, m, "Di_from_O")
        e_di = e_di + (m["u.Di_from_O"] > 0) * (
            (ado * o_err).sum(-1, keepdim=True) + D * m["u.acc"] * (ado * o.abs()).sum(-1, True)
        )
        d = dp - di
        ds = p * d
        e_ds = e_pb * d.abs() + p * (e_dp + e_di) + 2 * m["u.softmax"] * ds.abs()
        e_ds = e_ds + _excess(e_pb, p) * _excess(e_dp + e_di, d.abs())
        e_ds = e_ds + 2 * m["eta.softmax"]  # the subtraction and the product, flushed
        e_dsg = e_ds + _rounding(ds, m, "dS_gemm")
        e_dsg = e_dsg + _after_scale(ds, m, "dS_gemm", sc)  # eager: scale * dS rounded again
        ads = ds.abs()
        dq = sc * (ds @ k)
        e_dq = asc * (_mm(e_dsg, ak) + _mm(ads, ek) + bs * (m["u.acc"] * (ads @ ak) + m["eta.acc"]))
        x_ds = _excess(e_dsg, ads)
        e_dq = e_dq + asc * _mm(x_ds, _excess(ek, ak))
        dk = sc * (ds.transpose(-1, -2) @ q)
        e_dk = asc * (
            _mm(e_dsg.transpose(-1, -2), aq)
            + _mm(ads.transpose(-1, -2), eq)
            + bs * (m["u.acc"] * (ads.transpose(-1, -2) @ aq) + m["eta.acc"])
            + _mm(x_ds.transpose(-1, -2), _excess(eq, aq))
        )
        e_dq = e_dq + m["u.softmax"] * dq.abs() + m["eta.softmax"]  # the scale multiply
        e_dk = e_dk + m["u.softmax"] * dk.abs() + m["eta.softmax"]
        return (dq, e_dq), (dk, e_dk), (dv, e_dv)

    def rotate_back(self, g: Tensor, e: Tensor, sin: Tensor, cos: Tensor) -> Tensor:
        """E of R^T g: |R| E + one rounding (class grad_rot) of |R||g|."""
        ag = _abs_rotate(g.abs(), sin, cos)
        return _abs_rotate(e, sin, cos) + self.m["u.grad_rot"] * ag + self.m["eta.grad_rot"]


def attention_error_bounds(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    offsets: Tensor,
    grad_out: Tensor | None,
    *,
    models: Sequence[Mapping],
    sinu_pos: Tensor | None = None,
    rotate_v: bool = True,
    block_size: int = 64,
    scale: float | None = None,
    input_errors: tuple[Tensor, Tensor, Tensor] | None = None,
    max_blocks_per_chunk_: int | None = None,
) -> list[dict[str, Tensor]]:
    """One dict per model: {"O"[, "dQ", "dK", "dV"]} -> (T, H, D) float32 bounds E >= |y - r|
    on the error of an implementation of `models[i]` before its final store.

    `input_errors` (each (M, T, H, D)) are bounds on errors already in q, k, v (projection).
    """
    q, k, v = val.check_qkv(q, k, v)
    T, H, D = q.shape
    if grad_out is not None:
        val.check_float_tensor(grad_out, "grad_out", 3)
    if sinu_pos is not None:
        val.check_sinu_pos(sinu_pos, T, D)
    device = val.check_same_device(q=q, k=k, v=v, offsets=offsets, grad_out=grad_out,
                                   sinu_pos=sinu_pos)
    bs = val.check_block_size(block_size)
    sc = val.check_scale(scale, D)
    off = val.check_offsets(offsets, T)
    m = _model_tensors(models, device)
    M = len(models)
    budget = max_blocks_per_chunk_ or max(1, max_blocks_per_chunk(H, D, bs, 1 << 30) // (3 * M))
    start, n_valid = block_layout(off, bs)
    names = ("O",) if grad_out is None else ("O", "dQ", "dK", "dV")
    outs = {n: torch.zeros(M, T, H, D, dtype=torch.float32, device=device) for n in names}
    for c0 in range(0, start.numel(), budget):
        tiles = _Tiles(start[c0 : c0 + budget], n_valid[c0 : c0 + budget], bs, device)
        qt, kt, vt = tiles.gather(q), tiles.gather(k), tiles.gather(v)
        errs = [None, None, None]
        if input_errors is not None:
            errs = [torch.stack([tiles.gather(e_m) for e_m in e]) for e in input_errors]
        sin = cos = None
        if sinu_pos is not None:
            sin, cos = _split_sinu(tiles.gather_sinu(sinu_pos))
        rot = sinu_pos is not None
        chain = _Chain(m, sc, bs)
        qr = chain.operand(qt, errs[0], sin, cos, rot)
        kr = chain.operand(kt, errs[1], sin, cos, rot)
        vr = chain.operand(vt, errs[2], sin, cos, rot and rotate_v)
        key_valid = tiles.valid[:, None, None, :]
        _o, e_o = chain.forward(*qr, *kr, *vr, key_valid)
        results = {"O": e_o}
        if grad_out is not None:
            dot = tiles.gather(grad_out)
            (_dq, e_dq), (_dk, e_dk), (_dv, e_dv) = chain.backward(*qr, *kr, *vr, dot)
            if rot:
                e_dq = chain.rotate_back(_dq, e_dq, sin, cos)
                e_dk = chain.rotate_back(_dk, e_dk, sin, cos)
                if rotate_v:
                    e_dv = chain.rotate_back(_dv, e_dv, sin, cos)
            results.update(dQ=e_dq, dK=e_dk, dV=e_dv)
        for name, e in results.items():
            for i in range(M):
                tiles.scatter(outs[name][i], e[i].to(torch.float32))
    return [{n: outs[n][i] for n in names} for i in range(M)]


def projection_error_bounds(
    x: Tensor,
    w: Tensor,
    bias: Tensor | None,
    sinu_pos: Tensor,
    offsets: Tensor,
    qheads: int,
    kvheads: int,
    grad_out: Tensor,
    *,
    models: Sequence[Mapping],
    rotate_v: bool = True,
    block_size: int = 64,
    scale: float | None = None,
) -> list[dict[str, Tensor]]:
    """Bounds for x @ w (+ bias) -> q | k | v -> rotary attention -> (O, dX, dW, dbias).

    q, k, v and dq, dk, dv are rounded once each in class `io` (they are tensors in memory between
    the projection GEMMs and the attention kernels); the GEMMs accumulate in class `acc`.
    """
    from oracles.attention import rotary_block_attention_backward
    from oracles.projection import _project

    q, k, v, group = _project(x, w, bias, sinu_pos, offsets, qheads, kvheads)
    T, D, d_in = x.shape[0], q.shape[-1], x.shape[1]
    device = x.device
    m = _model_tensors(models, device)
    M = len(models)
    xa, wa = x.double().abs(), w.double().abs()
    proj_abs = xa @ wa + (bias.double().abs() if bias is not None else 0.0)
    u_io, eta_io, u_acc = (m[k_].view(M, 1, 1) for k_ in ("u.io", "eta.io", "u.acc"))
    proj = torch.cat(
        (q.reshape(T, -1), k[:, ::group].reshape(T, -1), v[:, ::group].reshape(T, -1)), dim=1
    ) if T else x.new_zeros((0, w.shape[1]), dtype=F64)
    eta_acc = m["eta.acc"].view(M, 1, 1)
    e_proj = (d_in + 1) * (u_acc * proj_abs + eta_acc) + u_io * proj.abs() + eta_io * (proj != 0)
    nq, nkv = qheads * D, (w.shape[1] - qheads * D) // 2
    kvh = nkv // D

    def heads(e: Tensor, lo: int, hi: int, n_heads: int) -> Tensor:
        t = e[:, :, lo:hi].reshape(M, T, n_heads, D)
        return t if n_heads == qheads else t.repeat_interleave(group, dim=2)

    e_in = (heads(e_proj, 0, nq, qheads), heads(e_proj, nq, nq + nkv, kvh),
            heads(e_proj, nq + nkv, nq + 2 * nkv, kvh))
    bounds = attention_error_bounds(
        q, k, v, offsets, grad_out, models=models, sinu_pos=sinu_pos, rotate_v=rotate_v,
        block_size=block_size, scale=scale, input_errors=e_in,
    )
    dq, dk, dv = rotary_block_attention_backward(
        q, k, v, offsets, sinu_pos, grad_out, rotate_v=rotate_v, block_size=block_size,
        scale=scale,
    )
    dk = dk.reshape(T, kvh, group, D)
    dv = dv.reshape(T, kvh, group, D)
    dproj_abs = torch.cat(
        (dq.abs().reshape(T, nq), dk.abs().sum(2).reshape(T, nkv), dv.abs().sum(2).reshape(T, nkv)),
        dim=1,
    )
    dproj = torch.cat((dq.reshape(T, nq), dk.sum(2).reshape(T, nkv), dv.sum(2).reshape(T, nkv)), 1)
    out = []
    for i, b in enumerate(bounds):
        e_dk = b["dK"].double().reshape(T, kvh, group, D).sum(2).reshape(T, nkv)
        e_dv = b["dV"].double().reshape(T, kvh, group, D).sum(2).reshape(T, nkv)
        e_dp = torch.cat((b["dQ"].double().reshape(T, nq), e_dk, e_dv), dim=1)
        e_dp = e_dp + group * m["u.acc"][i].view(()) * dproj_abs  # GQA group sum
        e_dp = e_dp + m["u.io"][i].view(()) * dproj.abs() + m["eta.io"][i].view(()) * (dproj != 0)
        ua = m["u.acc"][i].view(())
        g_abs = dproj.abs()
        ea = m["eta.acc"][i].view(())
        e_dx = e_dp @ wa.T + w.shape[1] * (ua * (g_abs @ wa.T) + ea)
        e_dw = xa.T @ e_dp + T * (ua * (xa.T @ g_abs) + ea)
        res = {"O": b["O"], "dX": e_dx.float(), "dW": e_dw.float()}
        if bias is not None:
            res["dbias"] = (e_dp.sum(0) + T * (ua * g_abs.sum(0) + ea)).float()
        out.append(res)
    return out
