#!/usr/bin/env bash
# Installs what blockattn needs without ever replacing an existing torch or triton.
#
# torch: only when none is importable, and then the CPU build, from PyTorch's CPU-only wheel
#   index (BLOCKATTN_TORCH_INDEX overrides it, e.g. a local mirror): a plain `pip install torch`
#   on the default index is the CUDA build and pulls several GB of nvidia packages. On a GPU
#   machine torch (and the triton it pins) is already there and is left as it is.
# triton: only when none is importable (CPU torch does not depend on it; the Triton interpreter
#   needs it): 3.6.0, the version the GPU image's torch 2.11 pins. An installed triton is never
#   replaced; tested: triton 3.6 (torch 2.11 GPU, torch 2.13 CPU) and triton 3.9 (torch 2.15).
# blockattn itself, editable with its test extras; offline (no build backend to download) it
#   falls back to the build backend already installed (--no-build-isolation).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TORCH_INDEX=${BLOCKATTN_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
if ! "$PY" -c "import torch" 2>/dev/null; then
  echo "ci/install.sh: no torch here: installing torch==2.13.0 (CPU) from $TORCH_INDEX" >&2
  "$PY" -m pip install -q "torch==2.13.0+cpu" --index-url "$TORCH_INDEX"
fi
if ! "$PY" -c "import triton" 2>/dev/null; then
  echo "ci/install.sh: no triton here: installing triton==3.6.0" >&2
  "$PY" -m pip install -q triton==3.6.0
elif ! "$PY" -c "import triton, sys; v = tuple(map(int, triton.__version__.split('.')[:2])); sys.exit(not (3, 6) <= v <= (3, 9))" 2>/dev/null; then
  echo "ci/install.sh: note: triton $("$PY" -c 'import triton; print(triton.__version__)') is outside the tested 3.6-3.9; keeping it" >&2
fi
if ! "$PY" -m pip install -q -e ".[test]"; then
  echo "ci/install.sh: retrying without build isolation (offline? the build backend installed here is used)" >&2
  "$PY" -m pip install -q --no-build-isolation -e ".[test]"
fi
