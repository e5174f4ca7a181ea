"""blockattn: fixed-block (block-diagonal, jagged) self-attention kernels and their
FP64 verification suite."""

from blockattn.ops import block_attention, projection_rotary_attention

__all__ = ["block_attention", "projection_rotary_attention"]
__version__ = "0.1.0"
