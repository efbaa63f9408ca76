#!/usr/bin/env bash
# Generate the GT4Py corpus (see README.md): prepare a virtual environment with GT4Py 1.2.1,
# ICON4Py's diffusion package 0.4.1 and DaCe 2.0.0a10, then run generate.py in it.
#
#   scripts/gt4py/generate.sh [--venv DIR] [generate.py options…]
#
# --venv DIR  use (or create) the virtual environment DIR (default: scripts/gt4py/.venv).
#             An existing environment is used as it is when it has the pinned packages.
# PYTHON=…    the interpreter to create the environment with (needs Python >= 3.12; env.sh).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="$here/.venv"
if [[ "${1:-}" == "--venv" ]]; then
    venv="$2"
    shift 2
fi

source "$here/env.sh"

cd "$root"
exec "$venv/bin/python" "$here/generate.py" "$@"
