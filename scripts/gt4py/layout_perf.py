"""Column-major fields: the GT4Py corpus's lowered programs called with every field of two
or more dimensions laid out column-major (as a Fortran model passes them), optimized by
sdflow's CPU pipeline as they are and after `Program.specialize_layout("F")`.

Inputs are the archives `perf.py --write-inputs DIR` writes (the 2000-copy grid, and the
translated SDFGs of the four programs with fixed extents). Per program: the three
variants' outputs are checked bit for bit against the row-major call; then N pairs of
calls, column-major unspecialized and specialized, one right after the other in
alternating order, give the median of the N ratios (this machine's speed drifts between
runs; a pair shares its phase).

    OMP_NUM_THREADS=2 scripts/gt4py/.venv/bin/python scripts/gt4py/layout_perf.py DIR \\
        [--pairs N] [--only NAME]...
"""

import argparse
import glob
import os
import statistics
import time
from pathlib import Path

import numpy as np
import sdflow

CORPUS = Path(__file__).resolve().parents[2] / "tests" / "gt4py"


def arguments(archive: dict, order: str) -> dict:
    out = {}
    for k, v in archive.items():
        if v.ndim == 0:
            out[k] = int(v[()]) if v.dtype == bool else v[()]
        elif v.ndim >= 2 and order == "F":
            out[k] = np.asfortranarray(v)
        else:
            out[k] = v.copy()
    return out


def timed(call, archive: dict, order: str) -> float:
    a = arguments(archive, order)
    t0 = time.perf_counter()
    call(**a)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", help="a directory perf.py --write-inputs wrote")
    ap.add_argument("--pairs", type=int, default=15)
    ap.add_argument("--only", action="append", default=[])
    o = ap.parse_args()
    ratios, rows = [], []
    for f in sorted(glob.glob(f"{o.dir}/*.lowered.npz")):
        name = os.path.basename(f)[: -len(".lowered.npz")]
        if o.only and name not in o.only:
            continue
        src = Path(o.dir) / f"{name}.lowered.sdfgz"
        if not src.exists():
            src = CORPUS / f"{name}.simple.dace.lowered.sdfgz"
        archive = dict(np.load(f))
        prog = sdflow.load(str(src))
        spec, report = prog.specialize_layout("F")
        plain = prog.optimize()[0].compile("cpu")
        special = spec.optimize()[0].compile("cpu")
        outs = {}
        for label, call, order in [("C", plain, "C"), ("F", plain, "F"), ("F+layout", special, "F")]:
            a = arguments(archive, order)
            call(**a)
            outs[label] = a
        for k, v in outs["C"].items():
            if isinstance(v, np.ndarray):
                for label in ("F", "F+layout"):
                    if not np.array_equal(v, outs[label][k], equal_nan=True):
                        raise SystemExit(f"{name}: '{k}' differs ({label} against the row-major call)")
        pair, fs, ss, cs = [], [], [], []
        for i in range(o.pairs):
            if i % 2 == 0:
                a = timed(plain, archive, "F")
                b = timed(special, archive, "F")
            else:
                b = timed(special, archive, "F")
                a = timed(plain, archive, "F")
            cs.append(timed(plain, archive, "C"))
            fs.append(a)
            ss.append(b)
            pair.append(b / a)
        r = statistics.median(pair)
        ratios.append(r)
        rows.append((name, 1e3 * statistics.median(cs), 1e3 * statistics.median(fs), 1e3 * statistics.median(ss), r,
                     len(report["transients_relaid"])))
        print(f"{name}: row-major {rows[-1][1]:.3f} ms, column-major {rows[-1][2]:.3f} ms, "
              f"specialized {rows[-1][3]:.3f} ms, paired ratio {r:.2f}", flush=True)
    print()
    print("| program | row-major, not specialized | column-major, not specialized | column-major, specialized | paired ratio | transients relaid |")
    print("|---|---:|---:|---:|---:|---:|")
    for n, c, f, s, r, t in rows:
        print(f"| {n} | {c:.3f} | {f:.3f} | {s:.3f} | {r:.2f} | {t} |")
    if ratios:
        g = float(np.exp(np.mean(np.log(ratios))))
        print(f"\ngeometric mean of the paired ratios {g:.3f}; at most {max(ratios):.2f}")


if __name__ == "__main__":
    main()
