"""GT4Py's vertical scans through sdflow's GT4Py backend against GT4Py's own backends.

Two programs of the shape ICON4Py's vertical solvers have: a `scan_operator` carrying one
value upwards (`state * b + a`), and a tridiagonal solve (a sweep upwards carrying two
values, then one downwards: the Thomas algorithm). Each runs on CELLS cells of LEVELS
levels through GT4Py's call with the gtfn, dace and sdflow (`sdflow.gt4py.cpu`) backends;
median of REPS calls after one untimed call; the results are compared with gtfn's (bit for
bit, or the largest difference printed).

    OMP_NUM_THREADS=2 python -O scripts/gt4py/scan_perf.py [--cells 200000] [--levels 65]
        [--reps 11] [--backends gtfn dace sdflow]

Run in the GT4Py environment (scripts/gt4py/env.sh) with the sdflow package installed.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import gt4py.next as gtx
from icon4py.model.common import dimension as dims

C, K = dims.CellDim, dims.KDim


@gtx.scan_operator(axis=K, forward=True, init=0.0)
def recurrence(state: float, a: float, b: float) -> float:
    return state * b + a


@gtx.scan_operator(axis=K, forward=True, init=(0.0, 0.0))
def thomas_forward(state: tuple[float, float], a: float, b: float, c: float, d: float) -> tuple[float, float]:
    cp, dp = state
    denominator = b - a * cp
    return c / denominator, (d - a * dp) / denominator


@gtx.scan_operator(axis=K, forward=False, init=0.0)
def thomas_backward(state: float, cp: float, dp: float) -> float:
    return dp - cp * state


@gtx.field_operator
def tridiagonal(
    a: gtx.Field[[C, K], float], b: gtx.Field[[C, K], float], c: gtx.Field[[C, K], float], d: gtx.Field[[C, K], float]
) -> gtx.Field[[C, K], float]:
    cp, dp = thomas_forward(a, b, c, d)
    return thomas_backward(cp, dp)


@gtx.program
def recurrence_program(a: gtx.Field[[C, K], float], b: gtx.Field[[C, K], float], out: gtx.Field[[C, K], float]):
    recurrence(a, b, out=out)


@gtx.program
def tridiagonal_program(
    a: gtx.Field[[C, K], float],
    b: gtx.Field[[C, K], float],
    c: gtx.Field[[C, K], float],
    d: gtx.Field[[C, K], float],
    x: gtx.Field[[C, K], float],
):
    tridiagonal(a, b, c, d, out=x)


def backend(name: str):
    if name == "gtfn":
        return gtx.gtfn_cpu
    if name == "dace":
        from gt4py.next.program_processors.runners import dace as dace_runners

        return dace_runners.run_dace_cpu
    import sdflow.gt4py

    return getattr(sdflow.gt4py, "cpu" if name == "sdflow" else name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=200_000)
    ap.add_argument("--levels", type=int, default=65)
    ap.add_argument("--reps", type=int, default=11)
    ap.add_argument("--backends", nargs="+", default=["gtfn", "dace", "sdflow"])
    args = ap.parse_args()
    n, k = args.cells, args.levels
    rng = np.random.default_rng(1)
    a, b, c, d = (rng.uniform(0.5, 1.5, (n, k)) for _ in range(4))
    b = b + 3.0
    results = {}
    print(f"{n} cells x {k} levels, median of {args.reps} calls")
    for name in args.backends:
        be = backend(name)
        f = lambda v: gtx.as_field([C, K], v, allocator=be)  # noqa: E731
        fa, fb, fb2, fc, fd = f(a), f(b * 0.5), f(b), f(c), f(d)
        out, x = f(np.zeros((n, k))), f(np.zeros((n, k)))
        p1 = recurrence_program.with_backend(be)
        p2 = tridiagonal_program.with_backend(be)
        p1(fa, fb, out, offset_provider={})
        p2(fa, fb2, fc, fd, x, offset_provider={})
        t1, t2 = [], []
        for _ in range(args.reps):
            t = time.perf_counter()
            p1(fa, fb, out, offset_provider={})
            t1.append(time.perf_counter() - t)
            t = time.perf_counter()
            p2(fa, fb2, fc, fd, x, offset_provider={})
            t2.append(time.perf_counter() - t)
        results[name] = (out.asnumpy(), x.asnumpy())
        print(f"{name:8s} recurrence {np.median(t1) * 1e3:9.3f} ms   tridiagonal {np.median(t2) * 1e3:9.3f} ms", flush=True)
    ref = results.get("gtfn")
    if ref is not None:
        for name, got in results.items():
            same = [np.array_equal(g, r) for g, r in zip(got, ref)]
            diff = [float(np.abs(g - r).max()) for g, r in zip(got, ref)]
            print(f"{name:8s} equal to gtfn: recurrence {same[0]} ({diff[0]:.3g}), tridiagonal {same[1]} ({diff[1]:.3g})")


if __name__ == "__main__":
    main()
