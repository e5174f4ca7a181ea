"""torch's "is_fx_tracing will return true ..." notice (logged the first time anything builds a
nested jagged tensor, which blockattn does on every run) is dropped at its logger, and only that
record (issue 43, item 5)."""

from __future__ import annotations

import subprocess
import sys

SNIPPET = """
import logging, torch
{imp}
x = torch.randn(10, 2, 4, generator=torch.Generator().manual_seed(3))
torch.nested.nested_tensor_from_jagged(x, torch.tensor([0, 4, 10]))
logging.getLogger("torch.fx._symbolic_trace").warning("another record of that logger")
"""


def _stderr(imp: str) -> str:
    return subprocess.run([sys.executable, "-c", SNIPPET.format(imp=imp)], capture_output=True,
                          text=True, timeout=120, check=True).stderr  # fmt: skip


def test_the_notice_is_dropped_and_nothing_else() -> None:
    assert "is_fx_tracing will return true" in _stderr("")  # torch's own behaviour
    err = _stderr("import blockattn.run.session")
    assert "is_fx_tracing" not in err, err
    assert "another record of that logger" in err
