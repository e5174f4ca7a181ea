"""Process environment set-up that must happen before torch initialises CUDA or Triton kernels load.

Kept free of torch/blockattn imports at module level: conftest.py and the CLI call into it first.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys


def _visible_gpu_ids() -> list[str]:
    """GPU ids this process may use, read without initialising CUDA (so they can be re-mapped)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d.strip() for d in env.split(",") if d.strip() and d.strip() != "-1"]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def pin_xdist_worker_gpu() -> str | None:
    """Give each pytest-xdist worker (gwN) its own GPU: CUDA_VISIBLE_DEVICES = ids[N % n_gpus].

    Must run before CUDA is initialised in this process. Returns the chosen id (None if no-op).
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    m = re.fullmatch(r"gw(\d+)", worker)
    if not m:
        return None
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return None  # too late to re-map; leave as is rather than lie
    ids = _visible_gpu_ids()
    if not ids:
        return None
    chosen = ids[int(m.group(1)) % len(ids)]
    os.environ["CUDA_VISIBLE_DEVICES"] = chosen
    return chosen


def configure() -> str:
    """Pin the xdist GPU, then select the Triton interpreter when no CUDA device exists.

    TRITON_INTERPRET is read when a @triton.jit function is *defined*, so this must run before
    anything imports blockattn's kernels. Returns "cuda" or "cpu".
    """
    pin_xdist_worker_gpu()
    import torch

    if torch.cuda.is_available():
        return "cuda"
    os.environ.setdefault("TRITON_INTERPRET", "1")
    quiet_interpreter_nan_warnings()
    return "cpu"


# The interpreter runs tiles through numpy, which warns on every NaN it meets. The suite feeds
# NaN on purpose (poisoned memory past each input, the containment probes) and the masked loads
# read it, so on a CPU run these say nothing. Only these messages from these modules are
# silenced: any other RuntimeWarning, and these from anywhere else, still show.
_NAN_MESSAGES = r"invalid value encountered in (matmul|subtract|multiply|add|reduce|exp2|divide)"
_NAN_MODULES = (r"triton\.runtime\.interpreter", r"numpy\._core\.fromnumeric")


def quiet_interpreter_nan_warnings() -> None:
    import warnings

    for module in _NAN_MODULES:
        warnings.filterwarnings("ignore", message=_NAN_MESSAGES, category=RuntimeWarning,
                                module=module)  # fmt: skip


def kernels_already_imported() -> bool:
    return any(name.startswith("blockattn.kernels") for name in sys.modules)
