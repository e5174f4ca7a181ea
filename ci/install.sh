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
# Offline: each index is probed first (3 s). An unreachable one is said once, and pip then runs
#   with --retries 0 --timeout 5 (its local sources, find-links and file:// indexes, still work)
#   instead of retrying every connection for minutes; blockattn installs without build isolation.
# BLOCKATTN_INSTALL_DRY_RUN=1 prints the pip commands instead of running them.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TORCH_INDEX=${BLOCKATTN_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
PYPI_INDEX=${PIP_INDEX_URL:-https://pypi.org/simple}

pip_() {
  if [ "${BLOCKATTN_INSTALL_DRY_RUN:-0}" = 1 ]; then
    echo "ci/install.sh: would run: pip $*"
  else
    "$PY" -m pip "$@"
  fi
}

# 0 when URL answers within 3 s (any HTTP status counts: the host is there), else 1.
reachable() {
  "$PY" - "$1" <<'EOF'
import sys
import urllib.error
import urllib.request

try:
    urllib.request.urlopen(sys.argv[1], timeout=3).close()
except urllib.error.HTTPError:
    pass
except Exception:
    sys.exit(1)
EOF
}

OFFLINE=()  # extra pip options where an index is unreachable
note_offline() {  # $1: the index, $2: what happens instead
  echo "ci/install.sh: $1 is unreachable (no answer in 3 s): $2" >&2
  OFFLINE=(--retries 0 --timeout 5)
}

if ! "$PY" -c "import torch" 2>/dev/null; then
  if reachable "$TORCH_INDEX/"; then
    echo "ci/install.sh: no torch here: installing torch==2.13.0 (CPU) from $TORCH_INDEX" >&2
    pip_ install -q "torch==2.13.0+cpu" --index-url "$TORCH_INDEX"
  else
    note_offline "$TORCH_INDEX" "installing torch==2.13.0+cpu from pip's local sources only (find-links, file:// indexes), without retries; set BLOCKATTN_TORCH_INDEX to a mirror"
    pip_ install -q "torch==2.13.0+cpu" ${OFFLINE[@]+"${OFFLINE[@]}"}
  fi
fi
PYPI_OK=1
if ! reachable "$PYPI_INDEX/"; then
  PYPI_OK=0
  note_offline "$PYPI_INDEX" "pip uses its local sources only (find-links, file:// indexes), without retries (--retries 0 --timeout 5); blockattn installs without build isolation"
fi
if ! "$PY" -c "import triton" 2>/dev/null; then
  echo "ci/install.sh: no triton here: installing triton==3.6.0" >&2
  pip_ install -q triton==3.6.0 ${OFFLINE[@]+"${OFFLINE[@]}"}
elif ! "$PY" -c "import triton, sys; v = tuple(map(int, triton.__version__.split('.')[:2])); sys.exit(not (3, 6) <= v <= (3, 9))" 2>/dev/null; then
  echo "ci/install.sh: note: triton $("$PY" -c 'import triton; print(triton.__version__)') is outside the tested 3.6-3.9; keeping it" >&2
fi
if [ "$PYPI_OK" = 0 ]; then  # no build backend to download: the one installed here
  pip_ install -q --no-build-isolation -e ".[test]" ${OFFLINE[@]+"${OFFLINE[@]}"}
elif ! pip_ install -q -e ".[test]"; then
  echo "ci/install.sh: retrying without build isolation (offline? the build backend installed here is used)" >&2
  pip_ install -q --no-build-isolation -e ".[test]"
fi
