"""Benchmark providers: each turns a `BenchCase` into timed callables for fwd, bwd and fwd+bwd.

A provider's `prepare(case)` returns `Prepared`:
- `fwd()` -> O: the forward kernels alone (no autograd graph).
- `bwd()` -> (dQ, dK, dV): the backward kernels alone on inputs precomputed once (saved O/lse,
  rotated copies, ...), so the timing excludes autograd bookkeeping. Providers without a
  standalone backward (eager, flex, SDPA) replay `autograd.grad` on a retained graph.
- `fwdbwd()`: forward + backward through autograd, as a training step would run it.
It raises `Unsupported(reason)` when the provider cannot run here; the reason is recorded.

Baseline-favourable choices (the targets are ratios against these baselines):
- the unfused rotary gets its sin/cos halves already split, broadcast and cast to the input
  dtype (hoisted out of every timed call);
- FA2 gets cu_seqlens for the 64-token blocks precomputed (built once on the host).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from blockattn.bench.case import BLOCK, BenchCase


class Unsupported(Exception):
    """The provider cannot run this case on this machine; str(exc) says why."""


@dataclass
class Prepared:
    fwd: Callable[[], Tensor]
    bwd: Callable[[], tuple[Tensor, Tensor, Tensor]]
    fwdbwd: Callable[[], Any]
    rotary: bool
    notes: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Provider:
    name: str
    rotary: bool
    prepare: Callable[[BenchCase], Prepared]
    description: str


def _leaves(case: BenchCase) -> tuple[Tensor, Tensor, Tensor]:
    return tuple(t.detach().requires_grad_(True) for t in (case.q, case.k, case.v))  # type: ignore[return-value]


def _grad_fn(o: Tensor, leaves: tuple[Tensor, ...], do: Tensor, retain: bool) -> Callable:
    return lambda: torch.autograd.grad(o, leaves, do, retain_graph=retain)


# ----------------------------------------------------------------------------- blockattn


def _blockattn(rotary: bool) -> Callable[[BenchCase], Prepared]:
    def prepare(case: BenchCase) -> Prepared:
        from blockattn.kernels.attention import attention_bwd, attention_fwd
        from blockattn.kernels.tiles import build_tile_table
        from blockattn.ops import block_attention

        sinu = case.sinu if rotary else None
        # The tile table is built once here (the ops rebuild it per call, on device, no sync).
        table = build_tile_table(case.offsets, case.T, BLOCK, case.max_len)
        q, k, v, do, s = case.q, case.k, case.v, case.do, case.scale
        leaves = _leaves(case)

        def fwdbwd() -> Any:
            o = block_attention(*leaves, case.offsets, sinu_pos=sinu, max_seq_len=case.max_len)
            return torch.autograd.grad(o, leaves, do)

        return Prepared(
            fwd=lambda: attention_fwd(q, k, v, table, sinu, s, BLOCK, True),
            bwd=lambda: attention_bwd(q, k, v, do, table, sinu, s, BLOCK, True),
            fwdbwd=fwdbwd,
            rotary=rotary,
            notes={"fwd/bwd": "launchers with a precomputed tile table"},
        )

    return prepare


# ----------------------------------------------------------------------------- FA2 (aten)

# Argument names differ across torch versions (rng_state/unused were philox_seed/philox_offset).
_ALIASES = {"rng_state": ("philox_seed",), "unused": ("philox_offset",)}


def call_by_schema(op: Any, **named: Any) -> Any:
    """Call an aten op by keyword, mapping our names onto the installed schema's names.

    Keeps working if positional order or argument names shift between torch versions, and
    fails with the schema in the message if a required argument has no value.
    """
    schema = op.default._schema
    kwargs: dict[str, Any] = {}
    for arg in schema.arguments:
        for cand in (arg.name, *(k for k, alts in _ALIASES.items() if arg.name in alts)):
            if cand in named:
                kwargs[arg.name] = named[cand]
                break
        else:
            if not arg.has_default_value():
                raise Unsupported(f"no value for required argument {arg.name!r} of {schema}")
    return op(**kwargs)


def flash_info() -> dict[str, Any]:
    """Which flash implementation backs aten's op (FA3/FA4 can be swapped in on torch >= 2.9)."""
    import torch.nn.attention as attn

    info: dict[str, Any] = {}
    for key, fn_name in (
        ("current_impl", "current_flash_attention_impl"),
        ("available_impls", "list_flash_attention_impls"),
        ("flash_version", "_get_flash_version"),
    ):
        fn = getattr(attn, fn_name, None)
        try:
            info[key] = fn() if fn is not None else f"n/a (torch.nn.attention.{fn_name} absent)"
        except Exception as exc:  # recorded, never fatal
            info[key] = f"error: {exc}"
    for op_name in ("_flash_attention_forward", "_flash_attention_backward"):
        op = getattr(torch.ops.aten, op_name, None)
        info[f"{op_name}_schema"] = str(op.default._schema) if op is not None else "absent"
    return info


def _require_fa2(case: BenchCase) -> None:
    if case.q.device.type != "cuda":
        raise Unsupported("aten flash attention has no CPU kernel (needs CUDA)")
    if case.dtype not in (torch.bfloat16, torch.float16):
        raise Unsupported(f"FA2 supports bf16/fp16 only, got {case.dtype}")
    impl = flash_info().get("current_impl")
    if impl not in (None, "n/a"):
        raise Unsupported(f"flash impl {impl!r} is active: aten's op is not FA2")


def block_cu_seqlens(offsets_cpu: Tensor, device: torch.device) -> Tensor:
    """cu_seqlens cut at every 64-token block of every sequence (vectorised, host side)."""
    off = offsets_cpu.to(torch.int64)
    lens = off[1:] - off[:-1]
    nblk = (lens + BLOCK - 1) // BLOCK
    seq = torch.repeat_interleave(torch.arange(lens.numel()), nblk)
    j = torch.arange(int(nblk.sum())) - (torch.cumsum(nblk, 0) - nblk)[seq]
    ends = torch.minimum(off[:-1][seq] + (j + 1) * BLOCK, off[1:][seq])
    cu = torch.cat((torch.zeros(1, dtype=torch.int64), ends))
    return cu.to(torch.int32).to(device)


def _fa2_fwd(q: Tensor, k: Tensor, v: Tensor, cu: Tensor, scale: float) -> tuple:
    return call_by_schema(
        torch.ops.aten._flash_attention_forward,
        query=q,
        key=k,
        value=v,
        cum_seq_q=cu,
        cum_seq_k=cu,
        max_q=BLOCK,
        max_k=BLOCK,
        dropout_p=0.0,
        is_causal=False,
        return_debug_mask=False,
        scale=scale,
    )


def _fa2_bwd(do: Tensor, q: Tensor, k: Tensor, v: Tensor, fwd_out: tuple, cu: Tensor, scale: float):
    # fwd outputs by position: (out, logsumexp, rng_state|philox_seed, unused|philox_offset, dbg)
    return call_by_schema(
        torch.ops.aten._flash_attention_backward,
        grad_out=do,
        query=q,
        key=k,
        value=v,
        out=fwd_out[0],
        logsumexp=fwd_out[1],
        cum_seq_q=cu,
        cum_seq_k=cu,
        max_q=BLOCK,
        max_k=BLOCK,
        dropout_p=0.0,
        is_causal=False,
        rng_state=fwd_out[2],
        unused=fwd_out[3],
        scale=scale,
    )


class _FA2Fn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cu, scale):  # type: ignore[override]
        res = _fa2_fwd(q, k, v, cu, scale)
        ctx.save_for_backward(q, k, v, cu, *res[:4])
        ctx.scale = scale
        return res[0]

    @staticmethod
    def backward(ctx, do):  # type: ignore[override]
        q, k, v, cu, *res = ctx.saved_tensors
        dq, dk, dv = _fa2_bwd(do.contiguous(), q, k, v, tuple(res), cu, ctx.scale)
        return dq, dk, dv, None, None


# ----------------------------------------------------------------------------- rotary (unfused)


def _sin_cos(case: BenchCase) -> tuple[Tensor, Tensor]:
    half = case.D // 2
    sin = case.sinu[:, :half].to(case.dtype).unsqueeze(1).contiguous()  # (T, 1, D/2)
    cos = case.sinu[:, half:].to(case.dtype).unsqueeze(1).contiguous()
    return sin, cos


def rotary_fwd3(q: Tensor, k: Tensor, v: Tensor, sin: Tensor, cos: Tensor) -> tuple:
    """Rotate interleaved pairs of q, k, v: (x0, x1) -> (x0 c - x1 s, x1 c + x0 s)."""

    def rot(x: Tensor) -> Tensor:
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x0 * cos - x1 * sin, x1 * cos + x0 * sin), dim=-1).flatten(-2)

    return rot(q), rot(k), rot(v)


def rotary_bwd3(gq: Tensor, gk: Tensor, gv: Tensor, sin: Tensor, cos: Tensor) -> tuple:
    """Transpose rotation: (g0, g1) -> (g0 c + g1 s, g1 c - g0 s)."""

    def rot_t(g: Tensor) -> Tensor:
        g0, g1 = g[..., 0::2], g[..., 1::2]
        return torch.stack((g0 * cos + g1 * sin, g1 * cos - g0 * sin), dim=-1).flatten(-2)

    return rot_t(gq), rot_t(gk), rot_t(gv)


class _RotaryFn(torch.autograd.Function):
    """Rotary of (q, k, v) with an explicit transpose-rotation backward (fwd/bwd fns given)."""

    @staticmethod
    def forward(ctx, q, k, v, sin, cos, fwd_fn, bwd_fn):  # type: ignore[override]
        ctx.save_for_backward(sin, cos)
        ctx.bwd_fn = bwd_fn
        return fwd_fn(q, k, v, sin, cos)

    @staticmethod
    def backward(ctx, gq, gk, gv):  # type: ignore[override]
        sin, cos = ctx.saved_tensors
        return (*ctx.bwd_fn(gq, gk, gv, sin, cos), None, None, None, None)


_COMPILED: dict[str, Callable] = {}


def _compiled_rotary() -> tuple[Callable, Callable]:
    if not _COMPILED:
        _COMPILED["fwd"] = torch.compile(rotary_fwd3, dynamic=False)
        _COMPILED["bwd"] = torch.compile(rotary_bwd3, dynamic=False)
    return _COMPILED["fwd"], _COMPILED["bwd"]


def _fa2(rotary: str | None) -> Callable[[BenchCase], Prepared]:
    """FA2 varlen on 64-token blocks; rotary None | "eager" | "compiled" done outside."""

    def prepare(case: BenchCase) -> Prepared:
        _require_fa2(case)
        cu = block_cu_seqlens(case.offsets_cpu, case.q.device)
        q, k, v, do, s = case.q, case.k, case.v, case.do, case.scale
        notes = {"max_q=max_k": str(BLOCK), "n_blocks": str(cu.numel() - 1)}
        if rotary is None:
            saved = _fa2_fwd(q, k, v, cu, s)
            leaves = _leaves(case)

            def fwdbwd_plain() -> Any:
                o = _FA2Fn.apply(*leaves, cu, s)
                return torch.autograd.grad(o, leaves, do)

            return Prepared(
                fwd=lambda: _fa2_fwd(q, k, v, cu, s)[0],
                bwd=lambda: _fa2_bwd(do, q, k, v, saved, cu, s),
                fwdbwd=fwdbwd_plain,
                rotary=False,
                notes=notes,
            )
        rf, rb = (rotary_fwd3, rotary_bwd3) if rotary == "eager" else _compiled_rotary()
        sin, cos = _sin_cos(case)
        rq, rk, rv = (t.contiguous() for t in rf(q, k, v, sin, cos))
        saved = _fa2_fwd(rq, rk, rv, cu, s)
        leaves = _leaves(case)

        def fwd() -> Tensor:
            a, b, c = rf(q, k, v, sin, cos)
            return _fa2_fwd(a.contiguous(), b.contiguous(), c.contiguous(), cu, s)[0]

        def bwd() -> tuple[Tensor, Tensor, Tensor]:
            gq, gk, gv = _fa2_bwd(do, rq, rk, rv, saved, cu, s)
            return rb(gq, gk, gv, sin, cos)

        def fwdbwd() -> Any:
            a, b, c = _RotaryFn.apply(*leaves, sin, cos, rf, rb)
            o = _FA2Fn.apply(a.contiguous(), b.contiguous(), c.contiguous(), cu, s)
            return torch.autograd.grad(o, leaves, do)

        notes["rotary"] = f"{rotary} PyTorch, in {case.dtype}, sin/cos pre-split and pre-cast"
        return Prepared(fwd=fwd, bwd=bwd, fwdbwd=fwdbwd, rotary=True, notes=notes)

    return prepare


# ----------------------------------------------------------------------------- eager PyTorch


def _eager(case: BenchCase) -> Prepared:
    """Padded (n_blocks, H, 64, D) batched matmuls + masked softmax in the input dtype."""
    off = case.offsets_cpu.to(torch.int64)
    lens = off[1:] - off[:-1]
    nblk = (lens + BLOCK - 1) // BLOCK
    nb = int(nblk.sum())
    seq = torch.repeat_interleave(torch.arange(lens.numel()), lens)
    pos = torch.arange(case.T) - off[:-1][seq]
    first = (torch.cumsum(nblk, 0) - nblk)[seq]
    slot = ((first + pos // BLOCK) * BLOCK + pos % BLOCK).to(case.q.device)
    valid = torch.zeros(nb * BLOCK, dtype=torch.bool, device=case.q.device)
    valid[slot] = True
    keymask = valid.view(nb, 1, 1, BLOCK)
    H, D, s = case.H, case.D, case.scale

    def attn(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        def pad(t: Tensor) -> Tensor:
            z = t.new_zeros(nb * BLOCK, H, D).index_copy(0, slot, t)
            return z.view(nb, BLOCK, H, D).transpose(1, 2)

        sc = torch.matmul(pad(q), pad(k).transpose(-1, -2)) * s
        p = torch.softmax(sc.masked_fill(~keymask, float("-inf")), dim=-1)
        o = torch.matmul(p, pad(v))
        return o.transpose(1, 2).reshape(nb * BLOCK, H, D).index_select(0, slot)

    leaves = _leaves(case)
    o_graph = attn(*leaves)

    def fwdbwd() -> Any:
        return torch.autograd.grad(attn(*leaves), leaves, case.do)

    return Prepared(
        fwd=lambda: attn(case.q, case.k, case.v),
        bwd=_grad_fn(o_graph, leaves, case.do, retain=True),
        fwdbwd=fwdbwd,
        rotary=False,
        notes={"bwd": "autograd.grad on a retained graph (no standalone eager backward)"},
    )


# ----------------------------------------------------------------------------- SDPA / cuDNN


def _sdpa_cudnn(case: BenchCase) -> Prepared:
    """SDPA restricted to the cuDNN backend on a jagged nested tensor of the 64-token blocks."""
    if case.q.device.type != "cuda":
        raise Unsupported("cuDNN attention needs CUDA")
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    cu = block_cu_seqlens(case.offsets_cpu, case.q.device).to(torch.int64)

    def nt(t: Tensor) -> Tensor:
        return torch.nested.nested_tensor_from_jagged(t, cu, max_seqlen=BLOCK).transpose(1, 2)

    def attn(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            o = F.scaled_dot_product_attention(nt(q), nt(k), nt(v), scale=case.scale)
        return o.transpose(1, 2).values()

    try:
        leaves = _leaves(case)
        o_graph = attn(*leaves)
        torch.autograd.grad(o_graph, leaves, case.do, retain_graph=True)
    except Exception as exc:
        raise Unsupported(
            f"SDPA cuDNN backend on a jagged NJT (varlen) failed: {type(exc).__name__}: {exc}"
        ) from exc

    def fwdbwd() -> Any:
        return torch.autograd.grad(attn(*leaves), leaves, case.do)

    return Prepared(
        fwd=lambda: attn(case.q, case.k, case.v),
        bwd=_grad_fn(o_graph, leaves, case.do, retain=True),
        fwdbwd=fwdbwd,
        rotary=False,
        notes={"bwd": "autograd.grad on a retained graph", "path": "NJT + sdpa_kernel(CUDNN)"},
    )


# ----------------------------------------------------------------------------- FlexAttention

_FLEX: dict[str, Callable] = {}


def _flex(case: BenchCase) -> Prepared:
    """FlexAttention over the whole jagged sequence, BLOCK_SIZE=64, block-sparse mask.

    The BlockMask is built directly (BlockMask.from_kv_blocks): q tile i only visits the 1-3 kv
    tiles its tokens' blocks overlap (blocks restart at sequence starts, so they are not 64-aligned
    in the flat sequence); mask_mod keeps the same-block pairs. create_block_mask would evaluate
    the T x T mask (T ~ 1.4 M).
    """
    if case.q.device.type != "cuda":
        raise Unsupported("flex baseline runs on CUDA only (CPU flex is an unfused math path)")
    try:
        from torch.nn.attention.flex_attention import BlockMask, flex_attention

        dev = case.q.device
        off = case.offsets_cpu.to(torch.int64)
        lens = off[1:] - off[:-1]
        T = case.T
        seq = torch.repeat_interleave(torch.arange(lens.numel()), lens)
        pos = torch.arange(T) - off[:-1][seq]
        bstart = off[:-1][seq] + (pos // BLOCK) * BLOCK  # first token of the token's block
        bend = torch.minimum(bstart + BLOCK, off[1:][seq])
        nq = (T + BLOCK - 1) // BLOCK
        # mask_mod is also evaluated at the padded positions T..nq*64 of the last tile: pad the
        # id table so those reads stay in bounds (they are masked by seq_lengths anyway).
        blk_id = torch.full((nq * BLOCK,), -1, dtype=torch.int32)
        blk_id[:T] = torch.cumsum((pos % BLOCK == 0).to(torch.int64), 0).to(torch.int32)
        blk_id = blk_id.to(dev)
        first_tok = torch.arange(nq) * BLOCK
        last_tok = torch.clamp(first_tok + BLOCK - 1, max=T - 1)
        lo = bstart[first_tok] // BLOCK
        hi = (bend[last_tok] - 1) // BLOCK
        num = (hi - lo + 1).to(torch.int32)
        # kv_indices must be nq wide (from_kv_blocks densifies rows to compute the q-side
        # indices for the backward): only the first `num` entries of a row are read.
        idx = torch.zeros((nq, nq), dtype=torch.int32, device=dev)
        idx[:, :3] = (lo[:, None] + torch.arange(3)[None, :]).clamp(max=nq - 1).to(dev)

        def same_block(b, h, qi, ki):
            return blk_id[qi] == blk_id[ki]

        mask = BlockMask.from_kv_blocks(
            num.view(1, 1, nq).to(dev),
            idx.view(1, 1, nq, nq),
            BLOCK_SIZE=BLOCK,
            mask_mod=same_block,
            seq_lengths=(T, T),
        )
        if "fn" not in _FLEX:
            _FLEX["fn"] = torch.compile(flex_attention, dynamic=False)
        fn = _FLEX["fn"]
        opts: dict[str, int] | None = None

        def attn(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
            q4, k4, v4 = (t.transpose(0, 1).unsqueeze(0) for t in (q, k, v))
            o = fn(q4, k4, v4, block_mask=mask, scale=case.scale, kernel_options=opts)
            return o.squeeze(0).transpose(0, 1)

        leaves = _leaves(case)
        notes = {"BLOCK_SIZE": str(BLOCK), "bwd": "autograd.grad on a retained graph"}
        try:
            o_graph = attn(*leaves)
            torch.autograd.grad(o_graph, leaves, case.do, retain_graph=True)
        except Exception as exc:
            # Default tiles (128) must divide the mask's BLOCK_SIZE; record why, retry with 64.
            notes["default kernel_options failed"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            # bwd tiles as in the usual D=128 Hopper config, each dividing 64.
            opts = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_M1": 32, "BLOCK_N1": 64}
            opts.update({"BLOCK_M2": 64, "BLOCK_N2": 32})
            notes["kernel_options"] = str(opts)
            o_graph = attn(*leaves)
            torch.autograd.grad(o_graph, leaves, case.do, retain_graph=True)
    except Exception as exc:
        first = notes.get("default kernel_options failed") if "notes" in locals() else None
        prior = f" (before that, with default kernel_options: {first})" if first else ""
        raise Unsupported(f"FlexAttention failed: {type(exc).__name__}: {exc}{prior}") from exc

    def fwdbwd() -> Any:
        return torch.autograd.grad(attn(*leaves), leaves, case.do)

    return Prepared(
        fwd=lambda: attn(case.q, case.k, case.v),
        bwd=_grad_fn(o_graph, leaves, case.do, retain=True),
        fwdbwd=fwdbwd,
        rotary=False,
        notes=notes,
    )


def top_kernels(fn: Callable[[], Any], n: int = 3) -> str:
    """Names of the n GPU kernels taking the most time in one call (which backend really ran)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    evs = [e for e in prof.key_averages() if getattr(e, "device_time_total", 0) > 0]
    evs.sort(key=lambda e: e.device_time_total, reverse=True)
    return " | ".join(e.key[:90] for e in evs[:n])


PROVIDERS: dict[str, Provider] = {
    p.name: p
    for p in (
        Provider("blockattn", False, _blockattn(False), "blockattn Triton kernels, no rotary"),
        Provider("blockattn_rotary", True, _blockattn(True), "blockattn, rotary fused in-kernel"),
        Provider("fa2", False, _fa2(None), "aten FA2 varlen, cu_seqlens at every 64-token block"),
        Provider("fa2_rotary_eager", True, _fa2("eager"), "FA2 + eager PyTorch rotary"),
        Provider("fa2_rotary_compiled", True, _fa2("compiled"), "FA2 + torch.compile'd rotary"),
        Provider("sdpa_cudnn", False, _sdpa_cudnn, "SDPA cuDNN backend on a jagged NJT"),
        Provider("flex", False, _flex, "FlexAttention, BLOCK_SIZE=64 block-sparse mask"),
        Provider("eager", False, _eager, "eager PyTorch padded-block attention"),
    )
}


# ----------------------------------------------------------------------------- outside kernels


def from_provider(prov: Any, rotary: bool) -> Provider:
    """Bench entry of a `blockattn.providers.Provider` with a kernel callable (an outside kernel,
    `--provider`): the same object the correctness suite judges is timed, no second definition.

    fwd: the callable without autograd; bwd: `autograd.grad` replayed on a retained graph (the
    kernel's own backward, plus autograd's bookkeeping, as for eager/flex); fwdbwd: both.
    """
    fn = prov.kernel
    if fn is None:
        raise ValueError(f"provider {prov.name!r} has no kernel callable to time")

    def prepare(case: BenchCase) -> Prepared:
        why = prov.supports.refusal(_spec_of(case, rotary), case.q.device.type, _arch())
        if why is not None:
            raise Unsupported(f"{prov.name}: {why}")
        sinu = case.sinu if rotary else None  # FP32 [sin | cos], as the suite passes it

        def call(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
            return fn(q, k, v, case.offsets, block_size=BLOCK, scale=case.scale, sinu_pos=sinu,
                      rotate_v=True)  # fmt: skip

        leaves = _leaves(case)
        o_graph = call(*leaves)

        def fwd() -> Tensor:
            with torch.no_grad():
                return call(case.q, case.k, case.v)

        def fwdbwd() -> Any:
            return torch.autograd.grad(call(*leaves), leaves, case.do)

        return Prepared(
            fwd=fwd,
            bwd=_grad_fn(o_graph, leaves, case.do, retain=True),
            fwdbwd=fwdbwd,
            rotary=rotary,
            notes={"origin": prov.origin, "bwd": "autograd.grad on a retained graph"},
        )

    name = f"{prov.name}_rotary" if rotary else prov.name
    return Provider(name, rotary, prepare, f"outside kernel {prov.origin}")


def add_outside(prov: Any) -> tuple[str, ...]:
    """Register the plain and fused-rotary bench entries of an outside provider; their names."""
    entries = [from_provider(prov, False)]
    if prov.supports.rotary:
        entries.append(from_provider(prov, True))
    for e in entries:
        if e.name in PROVIDERS and not PROVIDERS[e.name].description.startswith("outside"):
            raise ValueError(f"--provider {prov.name!r}: bench entry {e.name!r} is a built-in")
        PROVIDERS[e.name] = e
    return tuple(e.name for e in entries)


def _spec_of(case: BenchCase, rotary: bool) -> Any:
    from blockattn.harness.spec import CaseSpec

    dtype = str(case.dtype).removeprefix("torch.")
    return CaseSpec(variant="rotary" if rotary else "plain", lengths=(1,), H=case.H, D=case.D,
                    dtype=dtype)  # fmt: skip


def _arch() -> str:
    if not torch.cuda.is_available():
        return "cpu"
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"
