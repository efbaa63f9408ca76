"""What a diffusion step of ICON4Py's granule asks of the device on sdflow's GPU backend,
without a GPU: the step's calls on the recording device (`SDFLOW_CUDA_DEVICE=recording`,
which logs every driver call and runs nothing), its fields and neighbour tables given as
device arrays (objects with `__cuda_array_interface__` over the recording device's
memory, one per host buffer, as CuPy fields would be).

    SDFLOW_CUDA_DEVICE=recording python -O scripts/gt4py/device_calls.py [--copies 200] [--steps 3]

Prints, per step, how many of each driver call the step made (allocations, frees, graph
captures, replays, launches) and, for the first step, every kernel launched with its
grid (a one-thread kernel marked: a tasklet's, or a step left on one thread); and exits
with 1 when a step after the first allocates, frees or captures. A steady step replays
one graph per program call and does nothing else.
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import re
import sys
import types

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "gt4py"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=200, help="copies of the simple grid (1: the simple grid)")
    ap.add_argument("--steps", type=int, default=3)
    opts = ap.parse_args()

    from gt4py.next import custom_layout_allocators as allocators

    import granule as G
    import sdflow
    import sdflow.gt4py
    from sdflow import _sdflow

    try:
        _sdflow._device_log()
    except sdflow.SdflowError as e:
        print(f"{e}: run with SDFLOW_CUDA_DEVICE=recording")
        return 2

    # The granule's fields are made on the host; each host buffer gets one device array.
    gpu = sdflow.gt4py.make_backend("gpu", allocator=allocators.StandardCPUFieldBufferAllocator())
    devices: dict[tuple, object] = {}

    class DeviceArray:
        def __init__(self, a) -> None:  # noqa: ANN001
            span = sum((n - 1) * s for n, s in zip(a.shape, a.strides)) + a.itemsize if a.size else 1
            ptr = _sdflow._device_alloc(max(span, a.nbytes, 1))
            self.__cuda_array_interface__ = dict(
                shape=a.shape, typestr=a.dtype.str, data=(ptr, False), strides=a.strides, version=3, stream=1
            )

    def on_device(a):  # noqa: ANN001, ANN202
        key = sdflow.gt4py._buffer_key(a)
        if key not in devices:
            devices[key] = DeviceArray(a)
        return devices[key]

    def convert(x):  # noqa: ANN001, ANN202
        if isinstance(x, tuple):
            return tuple(convert(e) for e in x)
        nd = getattr(x, "ndarray", None)
        if nd is not None and hasattr(nd, "__array_interface__"):
            return types.SimpleNamespace(ndarray=on_device(nd), domain=x.domain)
        return x

    cls = sdflow.gt4py.SdflowGT4PyProgram
    plain = cls._run
    called: list[str] = []

    def run(self, args, offset_provider):  # noqa: ANN001, ANN202
        called.append(self.name)
        tables = {
            k: types.SimpleNamespace(ndarray=on_device(v.ndarray))
            for k, v in offset_provider.items()
            if hasattr(getattr(v, "ndarray", None), "__array_interface__")
        }
        plain(self, tuple(convert(a) for a in args), tables)

    grid = G.make_grid("large", num_levels=10, copies=opts.copies) if opts.copies > 1 else G.make_grid("simple")
    print(f"{grid.num_cells} cells, {grid.num_edges} edges x {grid.num_levels} levels")
    g = G.make_granule(grid, gpu, 42)
    cls._run = run
    problems: list[str] = []
    launch = re.compile(r'kernel: "(\w+)", grid: (\[[^]]*\]), block: (\[[^]]*\])')
    try:
        for step in range(opts.steps):
            n0, c0 = len(_sdflow._device_log()), len(called)
            G.run_steps(g, 1)
            log = _sdflow._device_log()[n0:]
            kinds = collections.Counter(re.match(r"\w+", line).group(0) for line in log)
            print(f"step {step}: {len(called) - c0} program calls; " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
            if step == 0:
                for line in log:
                    m = launch.search(line)
                    if m and m.group(1) != "sdf_status_peek":
                        one = "  <- one thread" if m.group(3) == "[1, 1, 1]" else ""
                        print(f"    {m.group(1)} grid {m.group(2)} block {m.group(3)}{one}")
            elif any(kinds[k] for k in ("Alloc", "Free", "BeginCapture")):
                problems.append(f"step {step} allocates, frees or captures")
    finally:
        cls._run = plain
    print("\n".join(problems) if problems else "steady: every step after the first replays its graphs only")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
