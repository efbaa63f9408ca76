"""sdflow from Python: load SDFGs (sdflow or DaCe JSON, or a ``dace.SDFG``), optimize,
draw, print and compile them, and call the compiled programs with NumPy arrays.

    >>> import sdflow, numpy as np
    >>> prog = sdflow.load("examples/laplace.sdfg.json")
    >>> opt, report = prog.optimize()
    >>> run = opt.compile(backend="cpu")
    >>> run(u=u, out=out, N=64, M=64)

See ``docs/python.md`` in the repository for the whole API.
"""

from ._sdflow import (
    BoundProgram,
    CallError,
    CompiledProgram,
    Completion,
    Program,
    Report,
    SdflowError,
    ValidationError,
    cache_dir,
    compose,
    load,
    version,
)

__version__ = version()

__all__ = [
    "BoundProgram",
    "CallError",
    "CompiledProgram",
    "Completion",
    "Program",
    "Report",
    "SdflowError",
    "ValidationError",
    "cache_dir",
    "compose",
    "load",
    "version",
]
