#!/usr/bin/env python3
"""The size of each kernel of a CUDA file as NVRTC compiles it: PTX instructions and
virtual 64-bit registers per kernel, with the CUDA backend's NVRTC options.

A static measure for machines without a GPU: it says what the generated code asks the
GPU to execute, not how long it takes. Usage:

    sdflow show FILE --opt --emit cuda > k.cu
    SDFLOW_NVRTC=... python3 scripts/ptx-size.py k.cu [--arch compute_90] [NAME...]

`SDFLOW_NVRTC` is the folder of `libnvrtc.so*` (`scripts/install-nvrtc.sh` prints it);
NAMEs keep only the kernels whose name contains one of them.
"""

import argparse
import ctypes
import glob
import os
import re
import sys


def load_nvrtc():
    where = os.environ.get("SDFLOW_NVRTC")
    if not where:
        sys.exit("SDFLOW_NVRTC is not set (scripts/install-nvrtc.sh prints it)")
    libs = [where] if os.path.isfile(where) else sorted(glob.glob(os.path.join(where, "libnvrtc.so*")))
    libs = [p for p in libs if "builtins" not in p]
    if not libs:
        sys.exit(f"no libnvrtc.so* in {where}")
    folder = os.path.dirname(libs[0])
    # NVRTC opens its builtins library by name, from the same folder.
    for b in sorted(glob.glob(os.path.join(folder, "libnvrtc-builtins.so*"))):
        ctypes.CDLL(b, mode=ctypes.RTLD_GLOBAL)
    return ctypes.CDLL(libs[0])


def ptx_of(lib, source, arch):
    prog = ctypes.c_void_p()
    if lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"kernels.cu", 0, None, None):
        sys.exit("nvrtcCreateProgram failed")
    # The CUDA backend's options (codegen/src/cuda/nvrtc.rs, exec.rs).
    opts = [b"--fmad=false", b"--prec-div=true", b"--prec-sqrt=true",
            f"--gpu-architecture={arch}".encode(), b"--device-int128"]
    if lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts)):
        n = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
        log = ctypes.create_string_buffer(n.value)
        lib.nvrtcGetProgramLog(prog, log)
        sys.exit(log.value.decode(errors="replace"))
    n = ctypes.c_size_t()
    lib.nvrtcGetPTXSize(prog, ctypes.byref(n))
    ptx = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetPTX(prog, ptx)
    return ptx.value.decode()


def kernels(ptx):
    """(name, instructions, 64-bit virtual registers) per `.entry`."""
    for m in re.finditer(r"\.entry (\w+)\((.*?)\n\}\n", ptx, re.S):
        body = m.group(2)
        instructions = sum(
            1
            for line in body.split("\n")
            if line.strip().endswith(";") and not line.strip().startswith((".", "//"))
        )
        regs = re.search(r"\.reg \.b64\s+%rd<(\d+)>", body)
        yield m.group(1), instructions, int(regs.group(1)) if regs else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file")
    ap.add_argument("names", nargs="*")
    ap.add_argument("--arch", default="compute_90")
    a = ap.parse_args()
    ptx = ptx_of(load_nvrtc(), open(a.file).read(), a.arch)
    print(f"{'kernel':<40} {'instructions':>12} {'b64 registers':>14}")
    for name, ins, regs in kernels(ptx):
        if not a.names or any(n in name for n in a.names):
            print(f"{name:<40} {ins:>12} {regs:>14}")


if __name__ == "__main__":
    main()
