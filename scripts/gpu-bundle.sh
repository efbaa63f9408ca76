#!/usr/bin/env bash
# Builds sdflow's GPU tests and CUDA benchmark here and packs them, stripped, into a folder
# (default target/gpu-bundle) with run.sh, which runs them on a machine with an NVIDIA GPU
# and no Rust toolchain, from a copy of this repository (the tests read examples/ and
# tests/dace/ from it):
#
#   scripts/gpu-bundle.sh                      # here: build and pack (about 40 MB)
#   target/gpu-bundle/run.sh [OUTDIR]          # there, from the repository root
#
# run.sh writes the device's name, the tests' and the bench's output to OUTDIR (default
# target/gpu-bundle/results): the GPU results against the interpreter bit for bit
# (tests/cuda.rs gpu_*, codegen/tests/cuda_device.rs, the GT4Py corpus of
# tests/gt4py_corpus.rs against GT4Py's outputs, halo exchanges on 4 MPI ranks where
# Open MPI is installed), the timings of benches/cuda.rs,
# and `sdflow bench` of the fused hyperdiffusion and the Laplacian on the CPU at 1 to 16
# threads and on the GPU, each against the ceiling it measures in the same run (the CPU
# runs need a C compiler there; SKIP_CPU=1 leaves them out); and the GT4Py corpus at
# 2000 copies of the simple grid (inputs written here by scripts/gt4py/perf.py
# --write-inputs, from target/pyenv: run scripts/test-python.sh first): each program's
# lowered SDFG optimized by sdflow, GT4Py's final SDFG as it is and optimized once more,
# the lowered SDFG specialized for column-major fields (`--layout F`), on the GPU and on
# the CPU at 16 threads (gt4py_gpu.txt, gt4py_cpu16.txt; GT4PY_VARIANTS picks among
# "lowered: final:--no-opt final: lowered:--layout F"); and, where
# python3 there has CuPy, scripts/python/cupy_check.py with the Python package built here
# for Python 3.12 (PYTHON_GPU; cupy_check.txt); and, first, where the GT4Py environment
# exists here (scripts/gt4py/env.sh), scripts/gt4py/gpu_check.py with its packages
# carried (gt4py-site.tar.xz): `sdflow.gt4py.gpu` with CuPy fields on the GT4Py corpus and
# ICON4Py's diffusion granule (gt4py_check.txt; GT4PY_CHECK passes it options, e.g.
# "--copies 2000"), then the corpus through GT4Py's call at 2000 copies against GT4Py's
# own gtfn and DaCe GPU backends (gt4py_backends.txt; SKIP_GT4PY_BACKENDS=1 leaves it
# out, GT4PY_BACKENDS_COPIES sets the copies). NVRTC comes
# from SDFLOW_NVRTC, else the CUDA toolkit's lib64 there.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/gpu-bundle}
mkdir -p "$out/bin"

# The path of the executable cargo reports for one test or bench target.
executable() {
    grep -o 'Executable [^(]*(\([^)]*\))' | sed 's/.*(\(.*\))/\1/' | tail -1
}

test_bin=$(cargo test --no-run --test cuda 2>&1 | executable)
device_bin=$(cargo test --no-run -p sdflow-codegen --test cuda_device 2>&1 | executable)
corpus_bin=$(cargo test --no-run --test gt4py_corpus 2>&1 | executable)
bench_bin=$(cargo bench --no-run --bench cuda 2>&1 | executable)
cargo build --release --bin sdflow >/dev/null 2>&1
cli_bin=$(pwd)/target/release/sdflow
for pair in "cuda:$test_bin" "cuda_device:$device_bin" "gt4py_corpus:$corpus_bin" "bench_cuda:$bench_bin" "sdflow:$cli_bin"; do
    name=${pair%%:*}
    path=${pair#*:}
    if [ -z "$path" ] || [ ! -x "$path" ]; then
        echo "gpu-bundle: no executable for $name" >&2
        exit 1
    fi
    cp "$path" "$out/bin/$name"
    strip "$out/bin/$name" 2>/dev/null || true
done
# Compressed (about a quarter of their size): the bundle and the repository travel
# together under a size limit; run.sh unpacks them.
rm -f "$out/bin.tar.xz"
tar -C "$out" -cf - bin | xz -T0 -6 > "$out/bin.tar.xz"
rm -rf "$out/bin"

# The GT4Py corpus' arguments on the large grid (compressed: the copies repeat).
if [ -x target/pyenv/bin/python ] && target/pyenv/bin/python -c "import sdflow" 2>/dev/null; then
    rm -rf "$out/gt4py-inputs"
    target/pyenv/bin/python scripts/gt4py/perf.py --write-inputs "$out/gt4py-inputs" >/dev/null
else
    echo "gpu-bundle: target/pyenv has no sdflow (scripts/test-python.sh): no GT4Py corpus inputs" >&2
fi

# The Python package for the GPU machine's Python (PYTHON_GPU, default python3.12), built
# with target/pyenv's maturin, for scripts/python/cupy_check.py there.
rm -rf "$out/whl"
if [ -x target/pyenv/bin/maturin ] && command -v "${PYTHON_GPU:-python3.12}" >/dev/null; then
    target/pyenv/bin/maturin build -q --release -m python/Cargo.toml \
        -i "${PYTHON_GPU:-python3.12}" -o "$out/whl" >/dev/null 2>&1 ||
        echo "gpu-bundle: the Python package did not build: no CuPy check" >&2
else
    echo "gpu-bundle: no maturin in target/pyenv or no ${PYTHON_GPU:-python3.12}: no CuPy check" >&2
fi

# The GT4Py environment's packages (scripts/gt4py/.venv, made by scripts/gt4py/env.sh) for
# scripts/gt4py/gpu_check.py there, less those the GPU machine's Python has (NumPy, pandas,
# pytest, the build tools) and sdflow (the wheel above); nanobind stays (GT4Py's gtfn
# builds its bindings with it), cmake (86 MB) does not: GT4Py's own GPU backends build
# there only where the machine has a cmake.
rm -f "$out/gt4py-site.tar.xz"
venv_site=scripts/gt4py/.venv/lib/python3.12/site-packages
if [ -d "$venv_site/gt4py" ] && [ -d "$venv_site/icon4py" ]; then
    (cd "$venv_site" && ls | grep -v -E '^(cmake|pip|setuptools|pandas|numpy|_pytest|pytest|py\.py|pygments|ninja|pybind11|maturin|skbuild|scikit_build|sdflow|__pycache__|_distutils_hack|distutils-precedence\.pth|wheel|iniconfig|pluggy)' |
        tar -cf - --exclude=__pycache__ --exclude='*/tests' -T - | xz -T0 -6) > "$out/gt4py-site.tar.xz"
else
    echo "gpu-bundle: no GT4Py environment in scripts/gt4py/.venv (scripts/gt4py/env.sh): no GT4Py GPU check" >&2
fi

cat > "$out/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs the prebuilt GPU tests and the CUDA benchmark; see scripts/gpu-bundle.sh.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
results=${1:-$here/results}
mkdir -p "$results"
if [ ! -d "$here/bin" ]; then
    xz -dc "$here/bin.tar.xz" | tar -xf - -C "$here" || exit 1
fi
export SDFLOW_ROOT=${SDFLOW_ROOT:-$(pwd)}
if [ -z "${SDFLOW_NVRTC:-}" ]; then
    for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu; do
        if ls "$d"/libnvrtc.so* >/dev/null 2>&1; then
            export SDFLOW_NVRTC=$d
            break
        fi
    done
fi
export SDFLOW_CACHE_DIR=${SDFLOW_CACHE_DIR:-$here/cache}
(nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv) \
    > "$results/device.txt" 2>&1
status=0
# sdflow.gt4py.gpu with CuPy fields: the GT4Py corpus, the host time per call, ICON4Py's
# diffusion granule (GT4PY_CHECK: gpu_check.py's options).
if [ -e "$here/gt4py-site.tar.xz" ] && ls "$here"/whl/*.whl >/dev/null 2>&1 &&
    python3 -c "import cupy" 2>/dev/null; then
    gsite=$(mktemp -d)
    xz -dc "$here/gt4py-site.tar.xz" | tar -xf - -C "$gsite" &&
        python3 -m pip install -q --no-index --no-deps --no-compile --target "$gsite" "$here"/whl/*.whl &&
        PYTHONPATH=$gsite PYTHONUNBUFFERED=1 timeout "${GT4PY_TIMEOUT:-300}" \
            python3 -O -W ignore scripts/gt4py/gpu_check.py ${GT4PY_CHECK:-} > "$results/gt4py_check.txt" 2>&1 ||
        status=1
    # The corpus through GT4Py's call on 2000 copies of the simple grid: sdflow.gt4py.gpu
    # against GT4Py's own gtfn and DaCe GPU backends (built here: the bundle's cmake and
    # compilers), timed in rounds (SKIP_GT4PY_BACKENDS=1 leaves it out).
    if [ -z "${SKIP_GT4PY_BACKENDS:-}" ]; then
        echo "cmake: $(command -v cmake || echo none)" > "$results/gt4py_backends.txt"
        PATH="$gsite/bin:$PATH" PYTHONPATH=$gsite PYTHONUNBUFFERED=1 timeout "${GT4PY_BACKENDS_TIMEOUT:-400}" \
            python3 -O -W ignore scripts/gt4py/gpu_check.py --parts backends \
            --copies "${GT4PY_BACKENDS_COPIES:-2000}" >> "$results/gt4py_backends.txt" 2>&1 || status=1
    fi
fi
"$here/bin/cuda_device" --test-threads=1 --nocapture > "$results/cuda_device.txt" 2>&1 || status=1
"$here/bin/cuda" --test-threads=1 --nocapture gpu_ > "$results/cuda_tests.txt" 2>&1 || status=1
# The GT4Py corpus, row-major and specialized for column-major fields, against GT4Py's
# stored outputs on the emulated device and the GPU.
"$here/bin/gt4py_corpus" --test-threads=1 --nocapture on_the_emulated_device \
    > "$results/gt4py_corpus.txt" 2>&1 || status=1
# Halo exchanges on the GPU (where Open MPI is installed): the fixture on 4 MPI ranks,
# each on this GPU, bit for bit against the interpreter's simulated ranks.
if command -v mpirun >/dev/null 2>&1 && command -v mpicc >/dev/null 2>&1; then
    xd=$(mktemp -d)
    fx=tests/distributed/halo_stencil.sdfg.json
    {
        "$here/bin/sdflow" run $fx --ranks 4 -s NI=256 -s NJ=256 --outputs "$xd/want.{rank}.npz" >/dev/null &&
            mpirun --allow-run-as-root --oversubscribe -n 4 "$here/bin/sdflow" run $fx --ranks 4 \
                -s NI=256 -s NJ=256 --backend cuda --outputs "$xd/got.{rank}.npz" &&
            python3 -c "
import numpy as np, sys
bad = [r for r in range(4) if not np.array_equal(np.load('$xd/want.%d.npz' % r)['out'].view(np.uint64), np.load('$xd/got.%d.npz' % r)['out'].view(np.uint64))]
print('halo exchange on GPU ranks:', 'bit for bit' if not bad else 'ranks %s differ' % bad)
sys.exit(1 if bad else 0)"
    } > "$results/mpi_gpu.txt" 2>&1 || status=1
else
    echo "no mpirun/mpicc: the GPU's halo exchanges not run" > "$results/mpi_gpu.txt"
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
    "$here/bin/bench_cuda" --bench --noplot > "$results/bench_cuda.txt" 2>&1 || status=1
fi
# Memory-bound stencils against the machine's own ceiling: the copy (and triad) on the
# CPU per thread count, the device-to-device copy on the GPU.
benches() {
    local backend=$1 threads=$2
    for f in "hyperdiffusion -s N=4096 -s alpha=0.05" "laplace -s N=4096"; do
        set -- $f
        local name=$1
        shift
        echo "== $name, $backend, threads $threads"
        "$here/bin/sdflow" bench "examples/$name.sdfg.json" --backend "$backend" \
            --threads "$threads" --reps 20 "$@" 2>&1
    done
}
if [ "${SKIP_CPU:-0}" != 1 ]; then
    for t in 1 2 4 8 16; do benches cpu "$t"; done > "$results/cpu_bench.txt" 2>&1 || status=1
fi
benches cuda 0 > "$results/gpu_bench.txt" 2>&1 || status=1
# The GT4Py corpus on its own inputs: lowered + sdflow's pipeline, final as it is, final
# optimized once more (the pipeline must never make it slower), and lowered with its
# fields passed column-major, the program specialized for that layout (`--layout F`:
# whether the loop order's GPU weights give column-major kernels the row-major speed).
# The programs with fixed extents run from the SDFGs perf.py translated for the grid.
corpus() {
    local backend=$1 threads=$2
    for inputs in "$here"/gt4py-inputs/*.lowered.npz; do
        [ -e "$inputs" ] || continue
        local p
        p=$(basename "$inputs" .lowered.npz)
        for v in ${GT4PY_VARIANTS:-"lowered:" "final:--no-opt" "final:" "lowered:--layout F"}; do
            local variant=${v%%:*} flag=${v#*:} file
            file="tests/gt4py/$p.simple.dace.$variant.sdfgz"
            [ -e "$here/gt4py-inputs/$p.$variant.sdfgz" ] && file="$here/gt4py-inputs/$p.$variant.sdfgz"
            echo "== $p, $variant ${flag:-(optimized)}, $backend, threads $threads"
            "$here/bin/sdflow" bench "$file" $flag \
                --inputs "$here/gt4py-inputs/$p.$variant.npz" --backend "$backend" \
                --threads "$threads" --reps 20 2>&1 | grep -E "time per call|back to back|error"
        done
    done
}
corpus cuda 0 > "$results/gt4py_gpu.txt" 2>&1 || status=1
if [ "${SKIP_CPU:-0}" != 1 ]; then
    corpus cpu 16 > "$results/gt4py_cpu16.txt" 2>&1 || status=1
fi
# Device arrays from Python: CuPy arrays (and the same memory through DLPack alone)
# against the CPU backend, and the host time to enqueue a call.
if ls "$here"/whl/*.whl >/dev/null 2>&1 && python3 -c "import cupy" 2>/dev/null; then
    site=$(mktemp -d)
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$here"/whl/*.whl &&
        PYTHONPATH=$site python3 scripts/python/cupy_check.py 4096 > "$results/cupy_check.txt" 2>&1 ||
        status=1
fi
grep -h "test result\|panicked\|skipped" "$results"/cuda_device.txt "$results"/cuda_tests.txt \
    "$results"/gt4py_corpus.txt
tail -1 "$results/mpi_gpu.txt"
exit $status
RUN
chmod +x "$out/run.sh"
du -sh "$out"/*
