"""Generate the GT4Py corpus: every ICON4Py diffusion program, lowered by GT4Py's DaCe backend.

For every GT4Py program in `icon4py.model.atmosphere.diffusion.stencils.*` this runs the program
once on ICON4Py's simple grid with each GT4Py backend (embedded, gtfn, dace, dace_noopt), captures
the SDFGs GT4Py's DaCe backend produces, and writes

    <out>/<program>.simple.dace.lowered.sdfgz      GTIR -> SDFG lowering, before any transformation
    <out>/<program>.simple.dace.final.sdfgz        what the `dace` backend compiles (auto-optimized,
                                                   sync and metrics instrumentation)
    <out>/<program>.simple.dace_noopt.final.sdfgz  what the `dace_noopt` backend compiles
    <out>/<program>.simple.gtir.txt                the GTIR program that was lowered
    <out>/<program>.simple.npz                     inputs, neighbour tables, every backend's outputs

The `dace_noopt` backend's lowered SDFG equals the `dace` one apart from DaCe's random guids and
is not stored. Results are written per (program, backend) unit into `<out>/.work/` as soon as the
unit finishes, and the npz is reassembled after every unit: an interrupted run keeps what it did,
and a rerun skips the units already done (`--force` redoes them).

Run it through `generate.sh`, which prepares the Python environment.
"""

from __future__ import annotations

import argparse
import gzip
import importlib
import json
import os
import pkgutil
import sys
import time
import traceback
from pathlib import Path

import numpy as np

# The SDFG capture below patches GT4Py's translation step in this process, so GT4Py must compile
# here too, not in its pool of worker processes; and the venv's `cmake` (a pip package) must be on
# PATH for DaCe's and gtfn's builds.
os.environ.setdefault("GT4PY_BUILD_JOBS_MODE", "serial")
os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")

BACKENDS = ("embedded", "dace", "dace_noopt", "gtfn")
GRID = "simple"
NLEV = 10
SEED = 42


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------------------------
# SDFG capture: GT4Py 1.2.1's DaCe translation step (`workflow/translation.py`) lowers GTIR with
# `gtx_dace_lowering.build_sdfg_from_gtir` and then transforms the SDFG in place
# (`DaCeTranslator._generate_sdfg_without_configuring_dace`), returning the final SDFG. We wrap
# both and save the SDFG at each stage, the lowered one before anything mutates it.
# ---------------------------------------------------------------------------------------------

class Capture:
    def __init__(self) -> None:
        self.stage_files: dict[str, Path] = {}
        self.prefix: Path | None = None
        self.gtir: str | None = None

    def install(self) -> None:
        from gt4py.next.program_processors.runners.dace.workflow import translation

        lowering = translation.gtx_dace_lowering
        original_lower = lowering.build_sdfg_from_gtir
        original_generate = translation.DaCeTranslator._generate_sdfg_without_configuring_dace
        capture = self

        def build_sdfg_from_gtir(ir, *args, **kwargs):
            sdfg = original_lower(ir, *args, **kwargs)
            capture.gtir = str(ir)
            capture.save(sdfg, "lowered")
            return sdfg

        def generate(translator, *args, **kwargs):
            capture.variant = "dace" if translator.auto_optimize else "dace_noopt"
            sdfg = original_generate(translator, *args, **kwargs)
            capture.save(sdfg, "final")
            return sdfg

        lowering.build_sdfg_from_gtir = build_sdfg_from_gtir
        translation.DaCeTranslator._generate_sdfg_without_configuring_dace = generate

    def save(self, sdfg, stage: str) -> None:
        if self.prefix is None:
            return
        path = Path(f"{self.prefix}.{self.variant}.{stage}.sdfgz")
        # Compact JSON, gzip-compressed, as `SDFG.save(..., compress=True)` writes it.
        sdfg.save(str(path), compress=True)
        self.stage_files[f"{self.variant}.{stage}"] = path


# ---------------------------------------------------------------------------------------------
# Programs and inputs
# ---------------------------------------------------------------------------------------------

def discover_programs():
    from gt4py.next.ffront import decorator
    import icon4py.model.atmosphere.diffusion.stencils as stencils

    programs = []
    for info in sorted(pkgutil.iter_modules(stencils.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{stencils.__name__}.{info.name}")
        for name, obj in sorted(vars(module).items()):
            if not isinstance(obj, decorator.Program):
                continue
            # Only the programs defined in this module, not ones it imports.
            if getattr(obj.definition_stage.definition, "__module__", None) != module.__name__:
                continue
            programs.append((module.__name__, name, obj))
    return programs


def output_names(program) -> list[str]:
    """The parameters a program writes: every name under an `out=` argument of its calls."""
    from gt4py.next.ffront import program_ast as past

    names: list[str] = []

    def names_in(node):
        if isinstance(node, past.Name):
            yield node.id
        elif isinstance(node, past.TupleExpr):
            for e in node.elts:
                yield from names_in(e)
        elif isinstance(node, past.Subscript):
            yield from names_in(node.value)

    for stmt in program.past_stage.past_node.body:
        if isinstance(stmt, past.Call) and "out" in stmt.kwargs:
            for n in names_in(stmt.kwargs["out"]):
                if n not in names:
                    names.append(str(n))
    return names


# Values of the scalar parameters that are not the domain bounds, chosen inside the simple grid so
# that every branch of the programs is taken somewhere (Cell 18, Edge 27, Vertex 9, K 10).
SCALAR_VALUES = {
    "type_shear": 2,
    "nrdmax": 5,
    "interior_idx": 3,
    "halo_idx": 15,
    "start_2nd_nudge_line_idx_e": 10,
    "limited_area": True,
    "apply_zdiffusion_t": True,
}


# Domain bounds other than the full grid, where the program reads outside it otherwise (as ICON4Py
# calls it: `calculate_diagnostic_quantities_for_turbulence` interpolates with level k - 1).
DOMAIN_OVERRIDES = {
    "calculate_diagnostic_quantities_for_turbulence": {"vertical_start": 1},
}


def make_inputs(program, grid):
    """Inputs as numpy arrays, keyed by parameter name, plus each parameter's type string."""
    from gt4py.next.type_system import type_specifications as ts
    from icon4py.model.common import dimension as dims

    rng = np.random.default_rng(SEED)
    sizes = {d.value: s for d, s in grid.size.items()}
    params = program.past_stage.past_node.params
    outputs = output_names(program)
    out_dim = None
    for p in params:
        if str(p.id) in outputs and isinstance(p.type, ts.FieldType):
            out_dim = p.type.dims[0].value
            break
    values: dict[str, np.ndarray] = {}
    types: dict[str, str] = {}
    for p in params:
        name = str(p.id)
        types[name] = str(p.type)
        if isinstance(p.type, ts.FieldType):
            shape = []
            for d in p.type.dims:
                if d.value in sizes:
                    shape.append(sizes[d.value])
                else:  # a local dimension: the neighbour count of its connectivity
                    shape.append(grid.get_connectivity(d.value).shape[1])
            dtype = np.dtype(str(p.type.dtype))
            if dtype.kind == "f":
                v = rng.uniform(0.5, 1.5, size=shape).astype(dtype)
                if name == "zd_diffcoef":
                    # `where(zd_diffcoef != 0, …)` is taken both ways.
                    v[rng.uniform(size=shape) < 0.3] = 0.0
            elif dtype.kind in "iu":
                if name == "zd_vertoffset":
                    # A vertical offset: k + off and k + off + 1 stay inside [0, nlev).
                    k = np.arange(shape[-1])
                    v = rng.integers(-1, 2, size=shape)
                    v = np.clip(v, -k, shape[-1] - 2 - k).astype(dtype)
                else:
                    v = rng.integers(0, 3, size=shape).astype(dtype)
            elif dtype.kind == "b":
                v = rng.uniform(size=shape) < 0.5
            else:
                raise TypeError(f"{name}: unsupported field dtype {dtype}")
            values[name] = np.ascontiguousarray(v)
        else:
            dtype = np.dtype(str(p.type))
            override = DOMAIN_OVERRIDES.get(program.definition_stage.definition.__name__, {})
            if name in override:
                v = override[name]
            elif name == "horizontal_start" or name == "vertical_start":
                v = 0
            elif name == "horizontal_end":
                v = sizes[out_dim] if out_dim else sizes["Cell"]
            elif name == "vertical_end":
                v = NLEV
            elif name in SCALAR_VALUES:
                v = SCALAR_VALUES[name]
            elif dtype.kind == "f":
                v = rng.uniform(0.5, 1.5)
            else:
                raise TypeError(f"{name}: no value chosen for scalar parameter of type {dtype}")
            values[name] = np.array(v, dtype=dtype)
    return values, types, outputs


def backend_object(name):
    import gt4py.next as gtx
    from gt4py.next.program_processors.runners import dace as gtx_dace

    return {
        "embedded": None,
        "gtfn": gtx.gtfn_cpu,
        "dace": gtx_dace.run_dace_cpu,
        "dace_noopt": gtx_dace.run_dace_cpu_noopt,
    }[name]


def run_program(program, backend_name, values, grid):
    import gt4py.next as gtx
    from gt4py.next.type_system import type_specifications as ts

    backend = backend_object(backend_name)
    args = {}
    fields = {}
    for p in program.past_stage.past_node.params:
        name = str(p.id)
        if isinstance(p.type, ts.FieldType):
            dims_ = [gtx.Dimension(d.value, kind=d.kind) for d in p.type.dims]
            f = gtx.as_field(p.type.dims, values[name].copy(), allocator=backend)
            args[name] = f
            fields[name] = f
        else:
            args[name] = values[name][()].item()
            if p.type.kind == ts.ScalarKind.INT32:
                args[name] = gtx.int32(args[name])
            elif p.type.kind == ts.ScalarKind.FLOAT64:
                args[name] = gtx.float64(args[name])
    prog = program.with_backend(backend) if backend is not None else program.with_backend(None)
    prog(**args, offset_provider=grid.connectivities)
    return {name: np.asarray(f.asnumpy()) for name, f in fields.items()}


# ---------------------------------------------------------------------------------------------
# Units of work and the npz
# ---------------------------------------------------------------------------------------------

def assemble(out: Path, prog_name: str, module: str, grid) -> None:
    work = out / ".work" / prog_name
    inputs = np.load(work / "inputs.npz")
    meta = json.loads((work / "meta.json").read_text())
    arrays = {f"in__{k}": inputs[k] for k in inputs.files}
    backends_meta = {}
    for b in BACKENDS:
        status_file = work / f"{b}.json"
        if not status_file.exists():
            continue
        status = json.loads(status_file.read_text())
        backends_meta[b] = status
        if status["ok"]:
            res = np.load(work / f"{b}.npz")
            for name in meta["outputs"]:
                arrays[f"out__{b}__{name}"] = res[name]
    # Neighbour tables the program uses: those named by its SDFG, else every table of the grid.
    offsets = meta.get("offsets")
    if offsets is None:
        offsets = sorted(grid.connectivities.keys())
    for o in offsets:
        arrays[f"conn__{o}"] = np.ascontiguousarray(grid.get_connectivity(o).asnumpy().astype(np.int32))
    meta["offsets"] = offsets
    meta["backends"] = backends_meta
    # Which outputs agree bitwise between embedded and gtfn (the test's criterion for exactness).
    agree = {}
    for name in meta["outputs"]:
        a, b = arrays.get(f"out__embedded__{name}"), arrays.get(f"out__gtfn__{name}")
        if a is not None and b is not None:
            agree[name] = {
                "bitwise": bool(np.array_equal(a.view(np.uint8), b.view(np.uint8))),
                "max_abs": float(np.max(np.abs(a - b))) if a.dtype.kind == "f" else 0.0,
            }
    meta["embedded_vs_gtfn"] = agree
    arrays["meta_json"] = np.array(json.dumps(meta))
    tmp = out / f".{prog_name}.simple.npz.tmp.npz"
    np.savez(tmp, **arrays)
    os.replace(tmp, out / f"{prog_name}.simple.npz")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="output folder")
    ap.add_argument("--only", nargs="*", default=None, help="program names to do (default: all)")
    ap.add_argument("--backends", nargs="*", default=list(BACKENDS), choices=BACKENDS)
    ap.add_argument("--force", action="store_true", help="redo units already done")
    ap.add_argument("--list", action="store_true", help="list the programs and exit")
    opts = ap.parse_args()

    import gt4py
    import dace
    from icon4py.model.common.grid import simple

    programs = discover_programs()
    if opts.list:
        for module, name, _ in programs:
            print(f"{name}  ({module})")
        return 0
    if opts.only:
        programs = [p for p in programs if p[1] in opts.only]
    out: Path = opts.out
    out.mkdir(parents=True, exist_ok=True)
    grid = simple.simple_grid(num_levels=NLEV)
    capture = Capture()
    capture.install()

    # Backend-major order: the fast embedded runs and the SDFGs of every program come first.
    order = [b for b in BACKENDS if b in opts.backends]
    started = time.time()
    for backend_name in order:
        for module, prog_name, program in programs:
            work = out / ".work" / prog_name
            work.mkdir(parents=True, exist_ok=True)
            status_file = work / f"{backend_name}.json"
            if not (work / "meta.json").exists() or opts.force:
                values, types, outputs = make_inputs(program, grid)
                np.savez(work / "inputs.npz", **values)
                meta = {
                    "program": prog_name,
                    "module": module,
                    "grid": GRID,
                    "nlev": NLEV,
                    "sizes": {d.value: s for d, s in grid.size.items() if d.value != "K"},
                    "outputs": outputs,
                    "params": types,
                    "gt4py": gt4py.__version__,
                    "dace": dace.__version__,
                    "seed": SEED,
                    "note": "in__X = input value for param X (outputs also start from these values); "
                    "out__<backend>__<field> = field after one call; conn__<OFFSET> = neighbour table "
                    "[origin, neighbour_index] -> target index (int32, no skip values); "
                    "backends.<b> = whether it ran, its error and time",
                }
                (work / "meta.json").write_text(json.dumps(meta, indent=1))
            if status_file.exists() and not opts.force:
                continue
            meta = json.loads((work / "meta.json").read_text())
            inputs = np.load(work / "inputs.npz")
            values = {k: inputs[k] for k in inputs.files}
            log(f"{prog_name}: {backend_name} …")
            capture.prefix = out / f"{prog_name}.simple" if backend_name.startswith("dace") else None
            capture.stage_files = {}
            capture.gtir = None
            t0 = time.time()
            status = {"ok": False}
            try:
                res = run_program(program, backend_name, values, grid)
                np.savez(work / f"{backend_name}.npz", **{k: res[k] for k in meta["outputs"]})
                status["ok"] = True
            except Exception as e:  # a failure inside GT4Py: record it, keep going
                status["error"] = f"{type(e).__name__}: {e}"[:2000]
                status["traceback"] = traceback.format_exc()[-4000:]
                log(f"{prog_name}: {backend_name} failed: {status['error'][:300]}")
            status["seconds"] = round(time.time() - t0, 1)
            if backend_name.startswith("dace"):
                # The noopt lowering equals the dace one apart from guids: keep one copy.
                noopt_lowered = out / f"{prog_name}.simple.dace_noopt.lowered.sdfgz"
                if noopt_lowered.exists():
                    noopt_lowered.unlink()
                status["sdfgs"] = sorted(
                    p.name for k, p in capture.stage_files.items() if k != "dace_noopt.lowered"
                )
                if capture.gtir is not None:
                    (out / f"{prog_name}.simple.gtir.txt").write_text(capture.gtir + "\n")
                lowered = out / f"{prog_name}.simple.dace.lowered.sdfgz"
                if lowered.exists() and "offsets" not in meta:
                    sdfg_json = json.loads(gzip.decompress(lowered.read_bytes()))
                    meta["offsets"] = sorted(
                        n[len("gt_conn_"):] for n in sdfg_json["attributes"]["_arrays"] if n.startswith("gt_conn_")
                    )
                    (work / "meta.json").write_text(json.dumps(meta, indent=1))
            status_file.write_text(json.dumps(status, indent=1))
            assemble(out, prog_name, module, grid)
            log(f"{prog_name}: {backend_name} {'ok' if status['ok'] else 'FAILED'} in {status['seconds']} s")
    log(f"done in {time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
