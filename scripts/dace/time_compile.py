#!/usr/bin/env python
"""DaCe 1.0.2's load + simplify + compile of an SDFG file, in this (fresh) process, into a
fresh build folder (docs/perf.md: sdflow from Python against DaCe, same run).

Usage: venv/bin/python time_compile.py FILE
Prints one JSON line: load_s, simplify_s, compile_s (wall time around each call).
"""
import json
import os
import sys
import tempfile
import time


def main():
    path = sys.argv[1]
    import dace

    with tempfile.TemporaryDirectory() as build:
        dace.Config.set("default_build_folder", value=build)
        t0 = time.perf_counter()
        sdfg = dace.SDFG.from_file(path)
        t1 = time.perf_counter()
        sdfg.simplify()
        t2 = time.perf_counter()
        sdfg.compile()
        t3 = time.perf_counter()
    print(json.dumps({"file": os.path.basename(path), "dace": dace.__version__,
                      "load_s": t1 - t0, "simplify_s": t2 - t1, "compile_s": t3 - t2}))


if __name__ == "__main__":
    main()
