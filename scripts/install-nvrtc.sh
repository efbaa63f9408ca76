#!/usr/bin/env bash
# Installs NVRTC, the CUDA runtime compiler sdflow's CUDA backend compiles with, from the
# `nvidia-cuda-nvrtc` pip wheel into ${SDFLOW_NVRTC_HOME:-$HOME/.cache/sdflow/nvrtc}, and
# prints the line that points sdflow at it:
#
#     eval "$(scripts/install-nvrtc.sh)"
#
# Pinned to CUDA 13.0 (13.0.88) to match the driver of the GPU machines: PTX written by a
# newer NVRTC carries a newer PTX ISA, which an older driver refuses to load. No GPU and
# no CUDA toolkit are needed to compile. Messages go to stderr; only the export line goes
# to stdout.
set -euo pipefail

version=13.0.88
dest="${SDFLOW_NVRTC_HOME:-$HOME/.cache/sdflow/nvrtc}"
lib="$dest/nvidia/cu13/lib"

if [ -f "$lib/libnvrtc.so.13" ] && [ "$(cat "$dest/.sdflow-nvrtc-version" 2>/dev/null)" = "$version" ]; then
  echo "NVRTC $version is already installed in $dest" >&2
else
  python=""
  for candidate in python3 python; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -m pip --version >/dev/null 2>&1; then
      python="$candidate"
      break
    fi
  done
  if [ -z "$python" ]; then
    echo "install-nvrtc: no python with pip found; install python3-pip first" >&2
    exit 1
  fi
  echo "installing nvidia-cuda-nvrtc==$version into $dest" >&2
  mkdir -p "$dest"
  # --target installs into sdflow's own folder, never into the system's Python; a Python
  # marked externally managed (PEP 668) still refuses without the override.
  "$python" -m pip install --quiet --disable-pip-version-check --no-deps --upgrade \
    --target "$dest" "nvidia-cuda-nvrtc==$version" >&2 \
  || "$python" -m pip install --quiet --disable-pip-version-check --no-deps --upgrade \
    --break-system-packages --target "$dest" "nvidia-cuda-nvrtc==$version" >&2
  if [ ! -f "$lib/libnvrtc.so.13" ]; then
    echo "install-nvrtc: the wheel did not provide $lib/libnvrtc.so.13" >&2
    exit 1
  fi
  echo "$version" >"$dest/.sdflow-nvrtc-version"
fi

echo "export SDFLOW_NVRTC=$lib"
