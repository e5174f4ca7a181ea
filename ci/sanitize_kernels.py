"""Launch every blockattn kernel variant once on tiny shapes (run under compute-sanitizer).

Variants: rotary off / on with rotate_v True / False, forward and backward, bf16 / fp16 / fp32,
head_dim 64 / 128, block_size 64 plus 16 and 128 (other BLOCK constexprs), and the strided
(non-contiguous) q/k/v views of projection_rotary_attention. Lengths include an empty sequence,
a single token and partial last blocks, so the masked tail rows and column clamps are exercised.
Exit 0 when every launch finished with finite outputs; prints one line per variant.

`--sweep` adds each kernel the dispatcher can pick, forced by its environment variables: the
Gluon backward's one-chain, two-chain and lean kernels, the Hopper and portable paths, and the
fast precision mode's kernels (Gluon and portable), so a kernel that is not the default on this
GPU is checked too.

Used by ci/sanitize.sh: first without the sanitizer (fills the Triton cache: compiling under the
sanitizer is very slow), then under memcheck and racecheck; then once per planted memory bug
(`--root` a mutated copy of the package, blockattn.mutants.memory_bugs), which memcheck must
report.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

# The blockattn imported: --root DIR (a mutated copy), else this repository's.
sys.path.insert(
    0,
    str(
        Path(
            sys.argv[sys.argv.index("--root") + 1]
            if "--root" in sys.argv
            else Path(__file__).resolve().parents[1]
        ).resolve()
    ),
)

import torch

import blockattn
from blockattn.cases.generate import make_case

if not Path(blockattn.__file__).resolve().is_relative_to(sys.path[0]):
    raise SystemExit(f"imported {blockattn.__file__}, not the package under {sys.path[0]}")

LENGTHS = [0, 1, 70, 64, 33]  # 5 blocks: 1, 64, 6, 64, 33 tokens
H = 2


# The kernels the dispatcher picks by environment (blockattn/kernels/dispatch.py), for --sweep.
GLUON = {"BLOCKATTN_KERNEL_PATH": "prefer-gluon"}
KERNELS: dict[str, dict[str, str]] = {
    "gluon one chain": {**GLUON, "BLOCKATTN_GLUON_CHAINS": "1"},
    "gluon two chains": {**GLUON, "BLOCKATTN_GLUON_CHAINS": "2"},
    "gluon lean": {**GLUON, "BLOCKATTN_GLUON_CHAINS": "lean"},
    "hopper": {"BLOCKATTN_KERNEL_PATH": "prefer-hopper"},
    "portable": {"BLOCKATTN_KERNEL_PATH": "portable"},
}
ENV_KEYS = ("BLOCKATTN_KERNEL_PATH", "BLOCKATTN_GLUON_CHAINS")


def sweep() -> list[dict]:
    """16-bit variants under each forced kernel, and the fast precision mode."""
    kernels = [(name, env, "accurate") for name, env in KERNELS.items()] + [
        ("fast gluon", GLUON, "fast"),
        ("fast portable", KERNELS["portable"], "fast"),
    ]
    return [
        dict(
            dtype=dtype,
            D=D,
            rotary=rotary,
            rotate_v=True,
            bs=64,
            env=env,
            kernel=name,
            precision=precision,
        )
        for dtype in (torch.bfloat16, torch.float16)
        for D in (64, 128)
        for name, env, precision in kernels
        for rotary in (False, True)
    ]


def variants() -> list[dict]:
    out = []
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for D in (64, 128):
            for rotary, rotate_v in ((False, True), (True, True), (True, False)):
                out.append(dict(dtype=dtype, D=D, rotary=rotary, rotate_v=rotate_v, bs=64))
    for bs in (16, 128):
        out.append(dict(dtype=torch.bfloat16, D=64, rotary=False, rotate_v=True, bs=bs))
        out.append(dict(dtype=torch.bfloat16, D=64, rotary=True, rotate_v=True, bs=bs))
    return out


def _label(v: dict) -> dict:
    """The variant as printed: its dtype by name, its environment left out."""
    return {
        k: (str(x).removeprefix("torch.") if k == "dtype" else x)
        for k, x in v.items()
        if k != "env"
    }


def launch(v: dict) -> None:
    if v["dtype"] == torch.float32 and torch.cuda.get_device_capability()[0] >= 10:
        print(f"skip (fp32 rejected on sm_100+): {v}")
        return
    case = make_case(lengths=LENGTHS, H=H, D=v["D"], dtype=v["dtype"], device="cuda", seed=3)
    q, k, v_ = (t.clone().requires_grad_(True) for t in (case.q, case.k, case.v))
    sinu = case.sinu_pos if v["rotary"] else None
    saved = {key: os.environ.pop(key, None) for key in ENV_KEYS} if "env" in v else {}
    os.environ.update(v.get("env", {}))
    try:
        o = blockattn.block_attention(
            q,
            k,
            v_,
            case.offsets,
            block_size=v["bs"],
            sinu_pos=sinu,
            rotate_v=v["rotate_v"],
            precision=v.get("precision", "accurate"),
        )
        o.backward(case.grad_out)
        torch.cuda.synchronize()
    finally:
        for key, val in saved.items():
            os.environ.pop(key, None)
            if val is not None:
                os.environ[key] = val
    for name, t in (("O", o), ("dQ", q.grad), ("dK", k.grad), ("dV", v_.grad)):
        if not torch.isfinite(t).all():
            bad = (~torch.isfinite(t)).reshape(t.shape[0], -1).any(1).nonzero().flatten()
            raise ValueError(
                f"non-finite {name} in {bad.numel()} of {t.shape[0]} tokens "
                f"(first {bad[:8].tolist()}) for {_label(v)}"
            )
    label = _label(v)
    print(f"ok fwd+bwd {label}", flush=True)


def launch_projection() -> None:
    # q, k, v are strided views into one (T, 3*H*D) projection: token stride 3*H*D.
    case = make_case(lengths=LENGTHS, H=H, D=64, dtype=torch.bfloat16, device="cuda", seed=4)
    T = case.q.shape[0]
    g = torch.Generator(device="cuda").manual_seed(4)
    x = torch.randn(T, 32, generator=g, device="cuda", dtype=torch.bfloat16).requires_grad_(True)
    w = torch.randn(32, 3 * H * 64, generator=g, device="cuda", dtype=torch.bfloat16) * 0.2
    w.requires_grad_(True)
    o = blockattn.projection_rotary_attention(x, w, case.sinu_pos, case.offsets, qheads=H)
    o.backward(case.grad_out)
    torch.cuda.synchronize()
    if not (torch.isfinite(o).all() and torch.isfinite(x.grad).all()):
        raise SystemExit("non-finite projection outputs")
    print("ok fwd+bwd projection_rotary_attention (strided q/k/v views)", flush=True)


def plant(name: str, root: str) -> int:
    """A copy of the package with memory bug `name` (blockattn.mutants.memory_bugs) planted."""
    from blockattn.mutants.apply import make_copy
    from blockattn.mutants.memory_bugs import MEMORY

    m = {m.name: m for m in MEMORY}.get(name)
    if m is None:
        print(
            f"--plant: unknown memory bug {name!r}; known: {[m.name for m in MEMORY]}",
            file=sys.stderr,
        )
        return 2
    make_copy(Path(root), m)
    gpu = torch.cuda.is_available()
    if (m.needs_sm90 and not (gpu and torch.cuda.get_device_capability() == (9, 0))) or not gpu:
        print(
            f"{name}: not run (its code runs on {'sm_90' if m.needs_sm90 else 'a GPU'} only)",
            file=sys.stderr,
        )
        return 4
    print("\n".join(f"{k}={v}" for k, v in m.env))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="print the variants and exit")
    ap.add_argument("--shard", default="0/1", help="I/N: run variants I, I+N, ... (cache warm-up)")
    ap.add_argument("--sweep", action="store_true", help="also every forced kernel (see KERNELS)")
    ap.add_argument("--root", help="import blockattn from DIR (a mutated copy of the package)")
    ap.add_argument(
        "--plant",
        nargs=2,
        metavar=("NAME", "DIR"),
        help="copy the package to DIR with memory bug NAME planted, print its "
        "environment (KEY=VALUE lines) and exit (4: needs another GPU)",
    )
    ap.add_argument("--grep", help="only the variants whose printed label matches this regex")
    args = ap.parse_args()
    if args.plant:
        return plant(*args.plant)
    i, n = (int(x) for x in args.shard.split("/"))
    vs = (variants() + (sweep() if args.sweep else []))[i::n]
    if args.grep:
        vs = [v for v in vs if re.search(args.grep, str(_label(v)))]
    if args.list:
        print("\n".join(map(str, vs)))
        return 0
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    failed = 0
    for v in vs:  # a failure is printed and counted; the remaining variants still run
        try:
            launch(v)
        except (ValueError, RuntimeError) as exc:
            failed += 1
            print(f"FAIL {exc}", flush=True)
    if i == 0 and not args.grep:
        launch_projection()
        vs.append({})
    print(
        f"launched {len(vs)} variants (fwd + bwd each) on {torch.cuda.get_device_name()}, "
        f"{failed} failed"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
