"""The tier stays quiet about the NaN it poisons on purpose (issue 43: the interpreter's numpy
RuntimeWarnings came back in the test tier, 25-31 of them): pyproject's pytest filters drop
exactly those, by module and message, and let every other RuntimeWarning through."""

from __future__ import annotations

import warnings

import pytest


@pytest.mark.parametrize(("message", "module"), [
    ("invalid value encountered in matmul", "triton.runtime.interpreter"),
    ("invalid value encountered in subtract", "triton.runtime.interpreter"),
    ("All-NaN slice encountered", "triton.runtime.interpreter"),
    ("invalid value encountered in reduce", "numpy._core.fromnumeric"),
])  # fmt: skip
def test_the_interpreters_nan_warnings_are_filtered(message: str, module: str) -> None:
    with warnings.catch_warnings(record=True) as got:  # the filters pytest applied stay on
        warnings.warn_explicit(message, RuntimeWarning, "interpreter.py", 1, module=module)
    assert not got, [str(w.message) for w in got]


def test_other_runtime_warnings_still_show() -> None:
    with warnings.catch_warnings(record=True) as got:
        warnings.warn_explicit("invalid value encountered in matmul", RuntimeWarning,
                               "attention.py", 1, module="blockattn.kernels.attention")
        warnings.warn_explicit("overflow encountered", RuntimeWarning, "interpreter.py", 1,
                               module="triton.runtime.interpreter")
    assert len(got) == 2
