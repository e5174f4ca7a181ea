"""`tlx` (optional): ads_model_kernel_library's TLX kernels, when that library is importable."""

from __future__ import annotations

import importlib.util

import torch

from blockattn.providers import Supports, Unsupported

NAME = "tlx"
ROLE = "baseline"
# The TLX kernels target Blackwell (sm_100) only.
SUPPORTS = Supports(dtypes=("bfloat16", "float16"), devices=("cuda",), archs=("sm_100",))


def run(inputs, variant: str) -> dict[str, torch.Tensor]:
    if importlib.util.find_spec("ads_model_kernel_library") is None:
        raise Unsupported("ads_model_kernel_library is not importable")
    # The library is importable but its jagged-block entry point is not pinned down anywhere we
    # can check; refusing is better than a guessed adapter producing misleading numbers.
    raise Unsupported("tlx adapter not implemented for this library version")
