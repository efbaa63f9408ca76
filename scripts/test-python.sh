#!/usr/bin/env bash
# The Python package's tests (python/tests): builds and installs the package from
# python/ into a virtual environment (target/pyenv, made on first use) and runs pytest;
# then sdflow as a GT4Py backend (python/tests_gt4py) in the GT4Py environment
# (scripts/test-gt4py.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/pyenv
# maturin, called by the build hook, is found on the PATH.
export PATH="$PWD/$venv/bin:$PATH"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --upgrade "maturin>=1.9,<2" "numpy>=1.21" "pytest>=7"
"$venv/bin/python" -m pip install -q --no-build-isolation --force-reinstall --no-deps ./python
"$venv/bin/python" -m pytest -q python/tests "$@"
echo "[test-python] python/tests done after ${SECONDS} s"
scripts/test-gt4py.sh
