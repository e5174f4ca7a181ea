"""The suite's vocabulary (variants, dtypes, input distributions), importable without torch.

The CLI builds its parser from these before `env.configure()` sets TRITON_INTERPRET: importing
torch (which imports triton) first would freeze triton in compiled mode on a CPU machine.
"""

from __future__ import annotations

VARIANTS: tuple[str, ...] = ("plain", "rotary", "projection")
DTYPE_NAMES: tuple[str, ...] = ("bfloat16", "float16", "float32")
# The isolation worker's watchdog per call (s): first-call JIT builds and the Triton
# interpreter on 2 loaded cores fit in it (`--call-timeout` overrides it).
CALL_TIMEOUT_S = 900.0
DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "half": "float16"}
DISTRIBUTIONS: tuple[str, ...] = (
    "normal",
    "scaled_logits",
    "heavy_tailed",
    "tiny",
    "near_constant",
    "negative_rows",
)
