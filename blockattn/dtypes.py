"""The suite's dtype names as torch dtypes (ground floor: the names live in `blockattn.names`,
which stays torch-free for the CLI's parser)."""

from __future__ import annotations

import torch

DTYPES: dict[str, torch.dtype] = {
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float32": torch.float32,
}
