"""Verification harness: providers, FP64 metrics, case corpus/fuzzing, tolerances, gate, reports.

Importing this package is cheap and never imports the Triton kernels, so `env.configure()` can
still set TRITON_INTERPRET before they load.
"""
