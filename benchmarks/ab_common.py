"""What the same-run timing scripts under benchmarks/ share: the elementwise comparison of a
variant's output with the reference's (blockattn.bounds.elementwise.elements_apart, the rule the
kernel tests use too), the JSON they write (device, commit, copy ceiling, command, rows), and
loading another commit's copy of a kernel module. Imported as a sibling module
(`python benchmarks/<script>.py` puts this folder first on sys.path)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from blockattn.bounds.elementwise import elements_apart  # noqa: F401 (the scripts' import)


def write_rows(out: Path, script: str, ceiling: dict[str, Any], rows: list[dict]) -> Path:
    """out/<script>.json: {"meta": device, commit, ceiling, command; "rows": rows}."""
    from blockattn.run.execute import device_info, git_commit

    out.mkdir(parents=True, exist_ok=True)
    meta = {**device_info(), "commit": git_commit(), "ceiling": ceiling,
            "command": f"python benchmarks/{script}.py " + " ".join(sys.argv[1:])}
    path = out / f"{script}.json"
    path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return path


def load_module(folder: Path, file: str, name: str):
    """folder/file (e.g. another commit's attention_gluon_rotary.py) as module `name`; its own
    imports of blockattn resolve to this checkout's package."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(folder) / file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
