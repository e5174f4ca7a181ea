"""Test-session set-up shared by every test directory.

Order matters: `blockattn/__init__` imports the Triton kernels, and TRITON_INTERPRET is read when
they are defined, so the environment (xdist GPU pin, interpreter on CPU) is configured here by
loading blockattn/harness/env.py *by path* - importing it as `blockattn.harness.env` would run
`blockattn/__init__` first.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

_ENV_PY = Path(__file__).resolve().parents[1] / "blockattn" / "harness" / "env.py"
_spec = importlib.util.spec_from_file_location("_blockattn_env_bootstrap", _ENV_PY)
_env = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_env)
DEVICE = _env.configure()  # pins gwN -> one GPU, sets TRITON_INTERPRET=1 without CUDA

from hypothesis import settings  # noqa: E402  (after the environment is configured)

from blockattn.harness import strategies  # noqa: E402  (registers the ci/gpu/nightly profiles)

# --hypothesis-profile (Hypothesis' own pytest option) is applied after this and wins; the env
# var picks a profile for tools that cannot pass pytest options.
settings.load_profile(
    os.environ.get(strategies.PROFILE_ENV) or ("gpu" if DEVICE == "cuda" else "ci")
)


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [
        f"blockattn: device={DEVICE} TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET', '0')} "
        f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')} "
        f"hypothesis profile={settings.get_current_profile_name()}"
    ]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if DEVICE == "cuda":
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (running on CPU)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def device() -> str:
    """'cuda' or 'cpu' (the interpreter tier)."""
    return DEVICE
