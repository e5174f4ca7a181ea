"""`eager`: same-precision PyTorch reference (input-dtype math, padded-block softmax, autograd).

Runs anywhere, so it is the CPU tier's baseline. Shares no code with `oracles` or the kernels.
"""

from __future__ import annotations

import torch

from blockattn.providers import Supports
from blockattn.providers._common import eager_block_attention, run_autograd

NAME = "eager"
ROLE = "baseline"
# every op's output rounded to the input dtype (softmax internally in FP32)
ACCURACY_MODEL = "eager-input-dtype"
SUPPORTS = Supports(gqa=True)  # plain PyTorch: any dtype, head dim and device; GQA by repeat


def run(inputs, variant: str) -> dict[str, torch.Tensor]:
    return run_autograd(inputs, variant, eager_block_attention)
