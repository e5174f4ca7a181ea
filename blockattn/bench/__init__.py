"""`blockattn bench`: memory-roofline benchmark of the blockattn kernels against FA2 & co.

Entry point: `run_benchmark(config) -> dict` (see `blockattn.bench.runner`); the CLI front end is
`blockattn.commands.bench`. benchmarks/README.md describes the outputs.
"""

from blockattn.bench.runner import BenchConfig, run_benchmark

__all__ = ["BenchConfig", "run_benchmark"]
