"""Triton kernels (attention) and the tile table they iterate over."""
