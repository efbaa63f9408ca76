#!/usr/bin/env bash
# sdflow as a GT4Py backend (python/tests_gt4py): makes sure of the GT4Py environment
# (scripts/gt4py/env.sh: Python >= 3.12, GT4Py 1.2.1, ICON4Py's diffusion 0.4.1, DaCe
# 2.0.0a10), builds and installs the sdflow package into it, and runs pytest.
#
#   scripts/test-gt4py.sh [pytest options…]
#   venv=/path/to/env scripts/test-gt4py.sh     # another GT4Py environment
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/gt4py/env.sh
echo "[test-gt4py] GT4Py environment ready after ${SECONDS} s"
# maturin, called by the build hook, is found on the PATH.
export PATH="$venv/bin:$PATH"
"$venv/bin/python" -m pip install -q "maturin>=1.9,<2" "pytest>=7"
"$venv/bin/python" -m pip install -q --no-build-isolation --force-reinstall --no-deps ./python
echo "[test-gt4py] sdflow installed after ${SECONDS} s"
# GT4Py builds in worker processes (its default); the tests run in Python's debug mode, in
# which GT4Py also type-checks every call.
"$venv/bin/python" -m pytest -q python/tests_gt4py -W ignore::UserWarning "$@"
