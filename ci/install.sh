#!/usr/bin/env bash
# Installs what blockattn needs without ever replacing an existing torch.
# On a machine with no torch, take the pinned CPU wheel first: an unpinned spec would pull
# several GB of CUDA packages. triton==3.6.0 is what the GPU image's torch 2.11 pins.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" 2>/dev/null; then
  "$PY" -m pip install -q torch==2.13.0
fi
if ! "$PY" -c "import triton, sys; sys.exit(triton.__version__ != '3.6.0')" 2>/dev/null; then
  "$PY" -m pip install -q triton==3.6.0
fi
"$PY" -m pip install -q -e ".[test]"
