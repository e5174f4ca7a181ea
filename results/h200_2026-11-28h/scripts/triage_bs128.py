"""Session 28 triage: the bs-128 bf16 D64 rotary forward, non-finite under memcheck only.
  mode poison : caching allocator on, its free memory filled with NaN before each call (20 calls):
                an output row the kernel never writes shows as NaN; outputs compared bitwise.
  mode as-is | nocap | chunks1 : one call (run under memcheck), the config as shipped, without
                its register cap, or with the whole-tile (unchunked) rotary path."""
import dataclasses
import sys

import torch

import blockattn
from blockattn.cases.generate import make_case
from blockattn.kernels import attention as A

mode = sys.argv[1]
key = ("fwd", True, 64)
cfg = A.launch_config("fwd", True, 64, torch.bfloat16)
print("shipped config", cfg)
if mode == "nocap":
    A.CONFIGS[key] = dataclasses.replace(cfg, maxnreg=None)
    A.DTYPE_CONFIGS.pop(("fwd", True, 64, torch.bfloat16), None)
if mode == "chunks1":
    A.CONFIGS[key] = dataclasses.replace(cfg, chunks=1)
    A.DTYPE_CONFIGS.pop(("fwd", True, 64, torch.bfloat16), None)
print("config now", A.launch_config("fwd", True, 64, torch.bfloat16))
case = make_case(lengths=[0, 1, 70, 64, 33], H=2, D=64, dtype=torch.bfloat16, device="cuda", seed=3)
ref = None
n = 20 if mode == "poison" else 1
bad = 0
for i in range(n):
    if mode == "poison":
        # small-pool blocks (< 1 MB: where O's 43 KB comes from), NaN, then freed to the cache
        junk = [torch.full((32768,), float("nan"), device="cuda") for _ in range(32)]
        del junk
    o = blockattn.block_attention(case.q, case.k, case.v, case.offsets, block_size=128,
                                  sinu_pos=case.sinu_pos)
    torch.cuda.synchronize()
    rows = (~torch.isfinite(o)).reshape(o.shape[0], -1).any(1).nonzero().flatten()
    if rows.numel():
        bad += 1
        print(f"{mode} call {i}: non-finite rows {rows.numel()} first {rows[:8].tolist()}")
    if ref is None:
        ref = o.clone()
    elif not torch.equal(torch.nan_to_num(o), torch.nan_to_num(ref)):
        print(f"{mode} call {i}: differs from call 0")
print(f"{mode}: {n} calls, {bad} with non-finite rows")
