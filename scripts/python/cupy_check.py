"""Programs compiled for "cuda" called with CuPy arrays, on a machine with a GPU.

Checks, per example, that a call on CuPy arrays (by address, no copies) gives the
CPU backend's results on the same NumPy inputs, bit for bit, and the same through
DLPack alone (an object with only `__dlpack__`, over the same CuPy memory); then times, per call, how
long the host takes to enqueue it (the call returns without waiting), the call and its
wait, and a CuPy copy of the same arrays for scale. Prints one JSON line per example.

Usage (with the package installed, CuPy and a GPU): python scripts/python/cupy_check.py [N]
"""

import json
import pathlib
import sys
import time

import cupy as cp
import numpy as np

import sdflow

ROOT = pathlib.Path(__file__).resolve().parents[2]
N = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
CASES = {
    "laplace": dict(inputs=["u"], outputs=["out"], symbols={}),
    "hyperdiffusion": dict(inputs=["u"], outputs=["out"], symbols={"alpha": 0.05}),
}


class DLPackOnly:
    """A device array seen through DLPack alone (as JAX's arrays are)."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def median_time(f, reps):
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    ts.sort()
    return ts[len(ts) // 2]


def main():
    rng = np.random.default_rng(0)
    for name, case in CASES.items():
        prog = sdflow.load(ROOT / "examples" / f"{name}.sdfg.json")
        cpu = prog.compile(backend="cpu")
        gpu = prog.compile(backend="cuda")
        host = {k: rng.random((N, N)) for k in case["inputs"]}
        host.update({k: np.zeros((N, N)) for k in case["outputs"]})
        dev = {k: cp.asarray(v) for k, v in host.items()}
        cpu(**host, **case["symbols"])
        done = gpu(**dev, **case["symbols"])
        assert isinstance(done, sdflow.Completion)
        done.wait()
        diffs = {
            k: float(np.max(np.abs(cp.asnumpy(dev[k]) - host[k]))) for k in case["outputs"]
        }
        equal = all(np.array_equal(cp.asnumpy(dev[k]), host[k]) for k in case["outputs"])
        for k in case["outputs"]:
            dev[k].fill(0)
        gpu(**{k: DLPackOnly(v) for k, v in dev.items()}, **case["symbols"]).wait()
        equal_dlpack = all(
            np.array_equal(cp.asnumpy(dev[k]), host[k]) for k in case["outputs"]
        )

        def enqueue():
            gpu(**dev, **case["symbols"])

        def call_and_wait():
            gpu(**dev, **case["symbols"]).wait()

        for _ in range(5):
            call_and_wait()
        cp.cuda.Device().synchronize()
        enq = median_time(enqueue, 200)
        cp.cuda.Device().synchronize()
        full = median_time(call_and_wait, 50)
        src, dst = dev[case["inputs"][0]], cp.empty_like(dev[case["inputs"][0]])

        def copy():
            cp.copyto(dst, src)
            cp.cuda.get_current_stream().synchronize()

        cp_copy = median_time(copy, 50)
        print(
            json.dumps(
                dict(
                    program=name,
                    n=N,
                    device=cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                    equal_to_cpu=equal,
                    dlpack_equal_to_cpu=equal_dlpack,
                    max_abs_diff=diffs,
                    enqueue_us=enq * 1e6,
                    call_and_wait_ms=full * 1e3,
                    cupy_copy_ms=cp_copy * 1e3,
                )
            )
        )


if __name__ == "__main__":
    main()
