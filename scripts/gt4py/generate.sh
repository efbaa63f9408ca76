#!/usr/bin/env bash
# Generate the GT4Py corpus (see README.md): prepare a virtual environment with GT4Py 1.2.1,
# ICON4Py's diffusion package 0.4.1 and DaCe 2.0.0a10, then run generate.py in it.
#
#   scripts/gt4py/generate.sh [--venv DIR] [generate.py options…]
#
# --venv DIR  use (or create) the virtual environment DIR (default: scripts/gt4py/.venv).
#             An existing environment is used as it is when it has the pinned packages.
# PYTHON=…    the interpreter to create the environment with (needs Python >= 3.12).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="$here/.venv"
if [[ "${1:-}" == "--venv" ]]; then
    venv="$2"
    shift 2
fi

packages=(
    "gt4py==1.2.1"
    "icon4py-atmosphere-diffusion==0.4.1"
    "icon4py-common==0.4.1"
    "dace==2.0.0a10"
    "xarray<2026.4"
)

# A Python >= 3.12: $PYTHON, else python3.13 / python3.12 / python3 on PATH, else pyenv's.
find_python() {
    local candidates=()
    if [[ -n "${PYTHON:-}" ]]; then
        candidates=("$PYTHON")
    else
        candidates=(python3.13 python3.12 python3)
        if command -v pyenv >/dev/null 2>&1; then
            candidates+=("$(pyenv root)"/versions/3.1[2-9]*/bin/python3)
        fi
        candidates+=("$HOME"/.pyenv/versions/3.1[2-9]*/bin/python3 /root/.pyenv/versions/3.1[2-9]*/bin/python3)
    fi
    for py in "${candidates[@]}"; do
        if command -v "$py" >/dev/null 2>&1 &&
            "$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
            command -v "$py"
            return 0
        fi
    done
    return 1
}

has_packages() {
    "$venv/bin/python" - "${packages[@]:0:4}" <<'PY'
import sys
from importlib.metadata import version, PackageNotFoundError
for spec in sys.argv[1:]:
    name, want = spec.split("==")
    try:
        if version(name) != want:
            sys.exit(1)
    except PackageNotFoundError:
        sys.exit(1)
PY
}

if [[ ! -x "$venv/bin/python" ]]; then
    if ! py="$(find_python)"; then
        echo "error: GT4Py 1.2.1 needs Python >= 3.12, and none was found" \
            "(tried \$PYTHON, python3.13, python3.12, python3 and pyenv's versions);" \
            "set PYTHON=/path/to/python3.12" >&2
        exit 1
    fi
    echo "creating $venv with $py ($("$py" --version))"
    "$py" -m venv "$venv"
fi
if ! has_packages; then
    echo "installing ${packages[*]} into $venv"
    "$venv/bin/python" -m pip install --upgrade pip
    "$venv/bin/python" -m pip install "${packages[@]}"
fi

cd "$root"
exec "$venv/bin/python" "$here/generate.py" "$@"
