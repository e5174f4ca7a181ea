"""An outside kernel plugged into blockattn's suite: copy this file into your repo and run

    blockattn run  --provider outside_kernel:clean               # corpus + fuzz, judged, exit 0
    blockattn gate --provider bug=outside_kernel:buggy --tolerances v5   # exit 1 + replay lines
    blockattn bench --provider outside_kernel:clean               # timed beside blockattn, FA v2
    pytest --blockattn-provider outside_kernel:clean              # the same cases as pytest tests

A kernel is any callable with `blockattn.block_attention`'s signature that autograd can
differentiate. `@kernel` declares what it supports (other configurations are recorded as
unsupported, never as failures) and the accuracy model it is judged by (a model of the tolerance
file, blockattn/bounds/ERROR_ANALYSIS.md). Here both wrap blockattn itself; `buggy` has a planted
1 % softmax-scale error that the suite must catch.
"""

import blockattn
from blockattn.providers import Supports, kernel

SUPPORTS = Supports(dtypes=("bfloat16", "float16"), head_dims=(64, 128))


def _attention(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v):
    return blockattn.block_attention(q, k, v, offsets, block_size=block_size, scale=scale,
                                     sinu_pos=sinu_pos, rotate_v=rotate_v)  # fmt: skip


@kernel(supports=SUPPORTS, accuracy_model="fp32-split-operands")
def clean(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    return _attention(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v)


@kernel(supports=SUPPORTS, accuracy_model="fp32-split-operands")
def buggy(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    return _attention(q, k, v, offsets, block_size, scale * 1.01, sinu_pos, rotate_v)
