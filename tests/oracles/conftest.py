"""Shared settings for the oracle tests."""

import torch

# The oracle tests use tiny tensors: intra-op threads only add spin-wait contention when
# pytest-xdist runs one worker per core (observed ~6x slowdown with 2 workers x 2 threads).
torch.set_num_threads(1)
