#!/usr/bin/env python3
"""Cost against grid size: the GT4Py corpus timed at two grid sizes with `sdflow bench`.

The inputs are two folders written by `perf.py --write-inputs` at two sizes (for example
2000 and 20,000 copies of the simple grid); every program present in both is timed through
`sdflow bench --inputs`, lowered (optimized) and final (as GT4Py left it, `--no-opt`), the
two sizes alternated within each round so that a slow phase of the machine meets both. The
ratio of a program is the median over the rounds of (time at the larger size / time at the
smaller); the larger size's share of the machine's triad bandwidth (measured by `sdflow
bench` in the same run) says whether a program streams at the memory's ceiling there.

    python3 scripts/gt4py/scaling.py --small DIR2000 --big DIR20000 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MEDIAN = re.compile(r"median ([0-9.]+) ms")
TRIAD = re.compile(r"triad ([0-9.]+) GB/s")
SHARE = re.compile(r"([0-9.]+)% of triad")


def bench(sdflow: Path, program: Path, npz: Path, final: bool, reps: int, threads: int, layout: str, cold: bool):
    """(median ms, triad GB/s, % of triad) of one `sdflow bench` run; raises with its output on
    failure."""
    cmd = [str(sdflow), "bench", str(program), "--layout", layout, "--inputs", str(npz)]
    cmd += ["--threads", str(threads), "--reps", str(reps)]
    if final:
        cmd.append("--no-opt")
    if cold:
        cmd.append("--cold")
    out = subprocess.run(cmd, capture_output=True, text=True)
    text = out.stdout + out.stderr
    m = MEDIAN.search(text)
    if out.returncode != 0 or not m:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {out.returncode}):\n{text}")
    t, s = TRIAD.search(text), SHARE.search(text)
    nan = float("nan")
    return float(m.group(1)), float(t.group(1)) if t else nan, float(s.group(1)) if s else nan


def program_file(folder: Path, name: str, version: str) -> Path:
    """The folder's own SDFG where `perf.py --gt4py` translated the program for its grid."""
    own = folder / f"{name}.{version}.sdfgz"
    return own if own.exists() else ROOT / "tests" / "gt4py" / f"{name}.simple.dace.{version}.sdfgz"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", type=Path, required=True, help="inputs at the smaller size (perf.py --write-inputs)")
    ap.add_argument("--big", type=Path, required=True, help="inputs at the larger size")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, both sizes in each (default 3)")
    ap.add_argument("--reps-small", type=int, default=60, help="timed calls at the smaller size (default 60)")
    ap.add_argument("--reps-big", type=int, default=12, help="timed calls at the larger size (default 12)")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "2")))
    ap.add_argument("--layout", default="C", choices=["C", "F"], help="the fields' layout (default C)")
    ap.add_argument(
        "--cold",
        action="store_true",
        help="time each call with cold caches (`sdflow bench --cold`): both sizes from memory",
    )
    ap.add_argument("--only", action="append", metavar="NAME", help="a program (repeatable; default: all)")
    ap.add_argument("--sdflow", type=Path, default=ROOT / "target" / "release" / "sdflow")
    opts = ap.parse_args()
    if not opts.sdflow.exists():
        print(f"error: {opts.sdflow} not found: build it with `cargo build --release`", file=sys.stderr)
        return 2
    names = sorted(
        p.name[: -len(".lowered.npz")]
        for p in opts.small.glob("*.lowered.npz")
        if (opts.big / p.name).exists() and (not opts.only or p.name[: -len(".lowered.npz")] in opts.only)
    )
    if not names:
        print(f"error: no program has inputs in both {opts.small} and {opts.big}", file=sys.stderr)
        return 2
    print(
        "| program | version | small ms | big ms | big/small (rounds) | small: % of triad "
        "| big: % of triad | big/small at the triad's pace |"
    )
    print("|---|---|---:|---:|---|---:|---:|---:|")
    worst = worst_paced = 0.0
    for name in names:
        for version in ("lowered", "final"):
            small, big = [], []
            # Per size: the triad ceiling (GB/s) and the program's share of it (%).
            ceiling = {opts.small: [], opts.big: []}
            share = {opts.small: [], opts.big: []}
            for _ in range(opts.rounds):
                for folder, reps, into in ((opts.small, opts.reps_small, small), (opts.big, opts.reps_big, big)):
                    npz = folder / f"{name}.{version}.npz"
                    ms, gbs, pct = bench(
                        opts.sdflow,
                        program_file(folder, name, version),
                        npz,
                        version == "final",
                        reps,
                        opts.threads,
                        opts.layout,
                        opts.cold,
                    )
                    into.append(ms)
                    ceiling[folder].append(gbs)
                    share[folder].append(pct)
            ratios = [b / s for s, b in zip(small, big)]
            r = statistics.median(ratios)
            # The time ratio scaled by the ratio of the ceilings: what it would be if the
            # memory moved data as fast at the larger size as at the smaller.
            c_small, c_big = (statistics.median(ceiling[f]) for f in (opts.small, opts.big))
            paced = r * c_big / c_small
            worst, worst_paced = max(worst, r), max(worst_paced, paced)
            each = " ".join(f"{x:.1f}" for x in ratios)
            s_small, s_big = (statistics.median(share[f]) for f in (opts.small, opts.big))
            print(
                f"| {name} | {version} | {statistics.median(small):.3f} | {statistics.median(big):.2f} "
                f"| **{r:.1f}** ({each}) | {s_small:.0f} | {s_big:.0f} | {paced:.1f} |",
                flush=True,
            )
    print(f"\nlargest ratio: {worst:.1f}; at the triad's pace: {worst_paced:.1f}")
    print(
        f"triad ceiling (median of the runs): {c_small:.1f} GB/s at the smaller size, "
        f"{c_big:.1f} GB/s at the larger (last program)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
