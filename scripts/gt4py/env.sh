# The GT4Py environment, sourced by generate.sh and scripts/test-gt4py.sh: makes sure the
# virtual environment "$venv" (default: scripts/gt4py/.venv, git-ignored) exists with the
# pinned packages, creating it and installing them when it does not.
#
# PYTHON=…    the interpreter to create the environment with (needs Python >= 3.12).

: "${venv:=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/.venv}"

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

