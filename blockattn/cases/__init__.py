"""Stage 1, cases: what to run. Case specs, the corpus and its files, fuzz strategies, the seeded
input generator and the plan that selects cases for a run.

Importing this package is torch-free (the CLI builds its parser before TRITON_INTERPRET is set);
the generator's public names (`blockattn.cases.make_case`, documented) load on first use.
"""

from __future__ import annotations

from typing import Any

_GENERATE = ("Case", "make_case", "make_case_from_params", "draw_lengths", "make_sinu_pos",
             "offsets_from_lengths", "lengths_from_offsets", "length_std_bound")  # fmt: skip


def __getattr__(name: str) -> Any:
    if name in _GENERATE:
        from blockattn.cases import generate

        return getattr(generate, name)
    raise AttributeError(f"module 'blockattn.cases' has no attribute {name!r}")
