"""Independent FP64 reference implementations ("oracles") for blockattn.

This package imports nothing from `blockattn` on purpose: a reference that shares code with the
kernels it judges can share their bugs. All results are float64 on the input's device.
"""

from oracles.attention import (
    block_attention,
    block_attention_backward,
    block_layout,
    masked_softmax,
    max_blocks_per_chunk,
    rotary_block_attention,
    rotary_block_attention_backward,
)
from oracles.projection import (
    projection_rotary_block_attention,
    projection_rotary_block_attention_backward,
)
from oracles.rotary import rotary, rotary_backward

__all__ = [
    "block_attention",
    "block_attention_backward",
    "block_layout",
    "masked_softmax",
    "max_blocks_per_chunk",
    "projection_rotary_block_attention",
    "projection_rotary_block_attention_backward",
    "rotary",
    "rotary_backward",
    "rotary_block_attention",
    "rotary_block_attention_backward",
]
