"""Call overhead of a compiled program from Python (docs/perf.md).

A tiny program with 30 arguments (15 one-element input arrays, 15 outputs: out_k = 2 in_k)
is compiled for the CPU; timed with timeit: the bound call (arguments checked and laid
out once, `CompiledProgram.bind`), the bound call that sets one float symbol, and the
unbound call with NumPy arrays by keyword. Also load + optimize + compile of a DaCe
file (fresh cache directory each run, so the C compiler runs).

Usage: python scripts/python/call_overhead.py [DACE_FILE]
"""

import json
import os
import sys
import tempfile
import timeit

import numpy as np

import sdflow

K = 15


def tiny_program():
    arrays = {}
    nodes, edges = [], []
    for k in range(K):
        arrays[f"in{k}"] = {"dtype": "f64", "shape": [1]}
        arrays[f"out{k}"] = {"dtype": "f64", "shape": [1]}
    for k in range(K):
        base = len(nodes)
        nodes += [
            {"access": f"in{k}"},
            {"tasklet": {"name": f"t{k}", "inputs": {"a": "f64"}, "outputs": {"b": "f64"},
                         "code": ["b = a * scale"]}},
            {"access": f"out{k}"},
        ]
        edges += [
            {"src": base, "dst": base + 1, "dst_conn": "a", "memlet": f"in{k}[0]"},
            {"src": base + 1, "dst": base + 2, "src_conn": "b", "memlet": f"out{k}[0]"},
        ]
    return json.dumps({
        "sdflow_format": 1,
        "name": "tiny30",
        "symbols": {"scale": {"dtype": "f64"}},
        "arrays": arrays,
        "arg_order": [f"in{k}" for k in range(K)] + [f"out{k}" for k in range(K)],
        "states": [{"name": "s", "nodes": nodes, "edges": edges}],
        "body": {"state": 0},
    })


def per_call_us(f, n=200_000, repeat=7):
    times = timeit.repeat(f, number=n, repeat=repeat)
    return [t / n * 1e6 for t in times]


def main():
    prog = sdflow.load(tiny_program())
    compiled = prog.compile("cpu")
    args = {f"in{k}": np.full(1, float(k)) for k in range(K)}
    args.update({f"out{k}": np.zeros(1) for k in range(K)})
    compiled(scale=2.0, **args)
    assert all(args[f"out{k}"][0] == 2.0 * k for k in range(K))
    bound = compiled.bind(scale=2.0, **args)
    bound()
    b = sorted(per_call_us(bound))
    s = sorted(per_call_us(lambda: bound(scale=3.0)))
    assert args["out1"][0] == 3.0
    u = sorted(per_call_us(lambda: compiled(scale=2.0, **args), n=20_000))
    print(f"bound call, 30 arguments:          median {b[len(b)//2]:.3f} us (min {b[0]:.3f})")
    print(f"bound call setting a float symbol: median {s[len(s)//2]:.3f} us (min {s[0]:.3f})")
    print(f"unbound call with NumPy arrays:    median {u[len(u)//2]:.3f} us (min {u[0]:.3f})")
    if len(sys.argv) > 1:
        import time
        path = sys.argv[1]
        with tempfile.TemporaryDirectory() as cache:
            os.environ["SDFLOW_CACHE_DIR"] = cache
            t0 = time.perf_counter()
            p = sdflow.load(path)
            t1 = time.perf_counter()
            o, _ = p.optimize()
            t2 = time.perf_counter()
            o.compile("cpu")
            t3 = time.perf_counter()
        print(f"{path}: load {1e3*(t1-t0):.1f} ms, optimize {1e3*(t2-t1):.1f} ms, compile {1e3*(t3-t2):.0f} ms")


if __name__ == "__main__":
    main()
