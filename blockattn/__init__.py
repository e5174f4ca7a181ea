"""blockattn: fixed-block (block-diagonal, jagged) self-attention kernels and their
FP64 verification suite.

The kernels are imported lazily: whether they run compiled or under the Triton interpreter is
decided by TRITON_INTERPRET when `blockattn.kernels.attention` is first imported, so tools
(the CLI, the test conftest) can import `blockattn.*` helpers and set the environment first.
"""

from __future__ import annotations

from typing import Any

__all__ = ["block_attention", "projection_rotary_attention"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in __all__:
        from blockattn import ops

        return getattr(ops, name)
    raise AttributeError(f"module 'blockattn' has no attribute {name!r}")
