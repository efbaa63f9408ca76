#!/usr/bin/env bash
# Builds the loop-structure study against the C that sdflow generates for the fused
# hyperdiffusion, then runs it: run.sh [N] [REPS] [variant-substring...]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
out="$root/target/stencil-loops"
mkdir -p "$out"
(cd "$root" && cargo run --release --quiet -- show examples/hyperdiffusion.sdfg.json --emit c --opt) > "$out/gen.c"
cc -O3 -march=native -fopenmp -ffp-contract=off -fno-math-errno \
  "$here/loops.c" "$out/gen.c" -o "$out/loops" -lm
N="${1:-4096}"; REPS="${2:-3}"; shift $(( $# > 2 ? 2 : $# ))
OMP_PROC_BIND="${OMP_PROC_BIND:-close}" "$out/loops" "$N" "$REPS" "$@"
