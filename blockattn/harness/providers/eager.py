"""`eager`: same-precision PyTorch reference (input-dtype math, padded-block softmax, autograd).

Runs anywhere, so it is the CPU tier's baseline. Shares no code with `oracles` or the kernels.
"""

from __future__ import annotations

import torch

from blockattn.harness.providers._common import eager_block_attention, run_autograd

NAME = "eager"
ROLE = "baseline"
# every op's output rounded to the input dtype (softmax internally in FP32)
ACCURACY_MODEL = "eager-input-dtype"


def run(inputs, variant: str) -> dict[str, torch.Tensor]:
    return run_autograd(inputs, variant, eager_block_attention)
