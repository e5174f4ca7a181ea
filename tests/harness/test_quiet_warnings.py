"""The interpreter's NaN warnings are silenced at their source, and only those (issue 21, 16)."""

import warnings

from blockattn.run.env import quiet_interpreter_nan_warnings


def _shown(message: str, module: str) -> bool:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_interpreter_nan_warnings()
        warnings.warn_explicit(message, RuntimeWarning, "x.py", 1, module=module)
    return bool(caught)


def test_only_the_known_nan_warnings_of_the_interpreter_are_silenced() -> None:
    nan = "invalid value encountered in matmul"
    assert not _shown(nan, "triton.runtime.interpreter")
    assert not _shown("invalid value encountered in reduce", "numpy._core.fromnumeric")
    assert _shown(nan, "mypkg.attn")  # the same message elsewhere still shows
    assert _shown("overflow encountered in exp", "triton.runtime.interpreter")


def test_a_single_head_is_said_not_drawn() -> None:
    # issue 21, item 15: by-head / by-block charts of one head or one block are degenerate
    from blockattn.report.elementwise import _strip_html

    assert _strip_html([3.5], "head") == "<p>one head: max err/bound 3.5</p>"
    assert "<table" in _strip_html([3.5, 0.5], "head")
