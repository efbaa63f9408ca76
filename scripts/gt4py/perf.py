"""Performance harness over the GT4Py corpus (`tests/gt4py/`) at a realistic grid size.

Every program of the corpus runs on a grid of N copies (default 2000) of ICON4Py's simple
grid side by side (fields tiled along their horizontal dimension, neighbour tables offset
per copy, index scalars scaled), through

  (a) sdflow on the lowered SDFG: `sdflow.load(P.simple.dace.lowered.sdfgz).optimize()`,
      compiled for "cpu";
  (b) sdflow on GT4Py's final SDFG: `sdflow.load(P.simple.dace.final.sdfgz)` compiled as
      it is, with the `optimize` option off (the SDFG GT4Py's `dace` backend compiles,
      already auto-optimized by DaCe); and the same optimized once more by sdflow;
  and, with `--gt4py`, GT4Py's own gtfn and DaCe CPU backends through GT4Py's Python call.

Each is called through a pre-bound call; the first call's outputs (from the initial
inputs) are checked: (a) and (b) bit for bit against each other, and against the npz's
outputs tiled N times where the tiled grid reproduces the simple grid's run exactly.
A markdown table of the medians ends the run; exit status 1 when a check failed.

Run with the Python that has sdflow installed (`scripts/test-python.sh` installs it into
`target/pyenv`; for `--gt4py`, the GT4Py environment of scripts/gt4py/README.md):

    target/pyenv/bin/python scripts/gt4py/perf.py [--copies N] [--levels K] [--reps R]
        [--warmup W] [--only NAME]... [--json OUT] [--gt4py]

See scripts/gt4py/perf.md.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import importlib
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "gt4py"

NLEV = 10  # the levels of the corpus' runs (generate.py's NLEV)
HORIZONTAL = ("Cell", "Edge", "Vertex")
# A neighbour table's target dimension is named by the last letter of its offset
# ("E2C2V" -> Vertex), or by the one before an "O" ("C2E2CO": the cell itself included).
TARGET = {"C": "Cell", "E": "Edge", "V": "Vertex"}
# Where GT4Py's embedded and gtfn backends disagree, the allowed distance to the reference,
# relative to the reference's largest magnitude (as `TOLERANCE` in tests/gt4py_corpus.rs).
TOLERANCE = 1e-14

# The integer scalars of the corpus, and how each one bounds an index range:
# (kind, dimension), kind "start" (inclusive lower bound) or "end" (exclusive upper bound),
# dimension None for the dimension of the program's first output field (GT4Py's
# horizontal_start/end are the output domain's). Scalars not listed here that are integers
# are refused (see `scale_scalars`), so that a new program cannot slip through unscaled.
INDEX_SCALARS = {
    "horizontal_start": ("start", None),
    "horizontal_end": ("end", None),
    "vertical_start": ("start", "K"),
    "vertical_end": ("end", "K"),
    # apply_diffusion_to_w_…: the cell range [interior_idx, halo_idx) (GTIR `concat_where`).
    "interior_idx": ("start", "Cell"),
    "halo_idx": ("end", "Cell"),
    # apply_diffusion_to_vn: the edges [start_2nd_nudge_line_idx_e, inf) take another branch.
    "start_2nd_nudge_line_idx_e": ("start", "Edge"),
    # apply_diffusion_to_w_…: the levels [-inf, nrdmax) take another branch.
    "nrdmax": ("end", "K"),
}
# Integer scalars that are switches, not indices: passed unchanged.
SWITCHES = {"type_shear"}
# Integer fields holding vertical offsets, kept inside the column when the levels change
# as generate.py draws them (k + offset and k + offset + 1 in [0, levels)).
VERTICAL_OFFSETS = {"zd_vertoffset"}


def log(msg: str) -> None:
    print(msg, flush=True)


# ---------------------------------------------------------------------------------------------
# The large grid
# ---------------------------------------------------------------------------------------------


@dataclass
class Grid:
    copies: int
    levels: int
    sizes: dict[str, int]  # Cell, Edge, Vertex of one copy (the simple grid)


def field_dims(type_str: str) -> list[str] | None:
    """The dimensions of a GT4Py field type string (`Field[[Edge, K], float64]`), or None
    for a scalar type."""
    m = re.fullmatch(r"Field\[\[([^\]]*)\], \w+\]", type_str)
    if m is None:
        return None
    return [d.strip() for d in m.group(1).split(",") if d.strip()]


def tile_field(name: str, a: np.ndarray, dims: list[str], grid: Grid) -> np.ndarray:
    """`a` on the large grid: repeated `copies` times along its horizontal dimension and,
    for levels other than NLEV, extended along K by repeating the levels (level k holds
    level k mod NLEV)."""
    if len(dims) != a.ndim:
        raise ValueError(f"field '{name}': type has dimensions {dims}, array has shape {a.shape}")
    for axis, d in enumerate(dims):
        if d in HORIZONTAL:
            if a.shape[axis] != grid.sizes[d]:
                raise ValueError(
                    f"field '{name}': {a.shape[axis]} points along {d}, the simple grid has {grid.sizes[d]}"
                )
            reps = [1] * a.ndim
            reps[axis] = grid.copies
            a = np.tile(a, reps)
        elif d == "K" and a.shape[axis] != NLEV:
            raise ValueError(f"field '{name}': {a.shape[axis]} levels, the corpus has {NLEV}")
        elif d == "K" and grid.levels != NLEV:
            a = np.take(a, np.arange(grid.levels) % a.shape[axis], axis=axis)
            if name in VERTICAL_OFFSETS:
                # Level k's offset came from level k mod NLEV: clip it into the new column.
                k = np.arange(grid.levels).reshape([-1 if x == axis else 1 for x in range(a.ndim)])
                a = np.clip(a, -k, grid.levels - 2 - k).astype(a.dtype)
    return np.ascontiguousarray(a)


def table_dims(offset: str) -> tuple[str, str]:
    """The origin and target dimensions of a neighbour table (`E2C2V`: Edge -> Vertex)."""
    target = offset[:-1] if offset.endswith("O") else offset
    try:
        return TARGET[offset[0]], TARGET[target[-1]]
    except KeyError:
        raise ValueError(
            f"neighbour table '{offset}': cannot tell its origin and target dimensions"
        ) from None


def tile_table(offset: str, table: np.ndarray, grid: Grid) -> np.ndarray:
    """Neighbour table `offset` on the large grid: copy c's rows point into copy c, i.e.
    every index is offset by c x (size of the target dimension); skip values (-1) stay."""
    origin, target = table_dims(offset)
    n = grid.sizes[target]
    if table.shape[0] != grid.sizes[origin] or table.max() >= n:
        raise ValueError(
            f"neighbour table '{offset}' ({origin} -> {target}): shape {table.shape} and largest "
            f"index {table.max()} do not fit the simple grid ({origin} {grid.sizes[origin]}, {target} {n})"
        )
    shift = (np.arange(grid.copies, dtype=table.dtype) * n).reshape(-1, 1, 1)
    tiled = np.where(table[None] < 0, table[None], table[None] + shift)
    return np.ascontiguousarray(tiled.reshape(-1, table.shape[1]).astype(table.dtype))


def fixed_extents(path: Path, meta: dict) -> list[str]:
    """The transient arrays of an SDFG whose leading extent holds the simple grid's size of a
    horizontal dimension as a literal ("gtir_tmp_9: 27 (Edge)"). GT4Py infers the domain of a
    temporary reached through a neighbour table from the tables it was given when it has no
    symbolic sizes, so such an SDFG only runs on the simple grid. Sizes that are also
    neighbour counts (Vertex 9 = C2E2C2E's 9) are ambiguous and not looked for."""
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    local = {n for d, n in meta["sizes"].items() if d not in HORIZONTAL}
    wanted = {n: d for d in HORIZONTAL if (n := meta["sizes"][d]) not in local}
    found = []

    def walk(node):
        if isinstance(node, dict):
            arrays = (
                node.get("attributes", {}).get("_arrays")
                if isinstance(node.get("attributes"), dict)
                else None
            )
            for name, desc in (arrays or {}).items():
                a = desc.get("attributes", {})
                if desc.get("type") == "Array" and a.get("transient") and a.get("shape"):
                    literals = {int(x) for x in re.findall(r"(?<![\w$.])\d+(?![\w.])", str(a["shape"][0]))}
                    found.extend(f"{name}: {n} ({wanted[n]})" for n in sorted(literals & wanted.keys()))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(doc)
    return sorted(set(found), key=lambda x: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", x)])


def scale_scalars(
    program: str, meta: dict, values: dict[str, np.ndarray], grid: Grid
) -> tuple[dict, list[str]]:
    """The index scalars on the large grid, and the reasons (empty when none) why the tiled
    simple-grid outputs are not an exact reference.

    A range [0, n) of a horizontal dimension of size n becomes [0, N n); other bounds keep
    their start and move their end to (N - 1) n + end (the last copy ends where the first
    did), and then copies 1.. compute points that copy 0 did not, so the tiled outputs are
    not the reference. On K, an end at NLEV moves to the new number of levels and other
    bounds stay (clamped to the column)."""
    params = meta["params"]
    out_dim = next(
        (field_dims(params[o])[0] for o in params if o in meta["outputs"] and field_dims(params[o])),
        None,
    )
    scaled = dict(values)
    inexact = []
    if grid.levels != NLEV:
        inexact.append(f"{grid.levels} levels (the npz has {NLEV})")
    for name, t in params.items():
        if field_dims(t) is not None or t not in ("int32", "int64"):
            continue
        if name in SWITCHES:
            continue
        if name not in INDEX_SCALARS:
            raise ValueError(
                f"{program}: integer scalar '{name}' has no scaling rule: add it to INDEX_SCALARS "
                f"or SWITCHES in {Path(__file__).name}"
            )
        kind, dim = INDEX_SCALARS[name]
        dim = dim or out_dim
        if dim is None:
            raise ValueError(f"{program}: '{name}' bounds the output domain, but no output field was found")
        v = int(values[name])
        if dim == "K":
            new = grid.levels if (kind == "end" and v == NLEV) else min(v, grid.levels)
        else:
            n = grid.sizes[dim]
            full = v == (0 if kind == "start" else n)
            if kind == "end":
                new = grid.copies * n if full else (grid.copies - 1) * n + v
            else:
                new = v
            if not full and grid.copies > 1:
                inexact.append(f"{name} = {v} is not the full {dim} range [0, {n})")
        scaled[name] = np.array(new, dtype=values[name].dtype)
    return scaled, inexact


# ---------------------------------------------------------------------------------------------
# A program's inputs and references
# ---------------------------------------------------------------------------------------------


@dataclass
class Case:
    name: str
    meta: dict
    grid: Grid
    inputs: dict[str, np.ndarray]  # by parameter; scalars 0-d
    tables: dict[str, np.ndarray]  # by offset (E2C2V …)
    outputs: list[str]
    # field -> (backend, tolerance, tiled reference); empty when `no_reference` says why
    references: dict[str, tuple[str, float, np.ndarray]] = field(default_factory=dict)
    no_reference: list[str] = field(default_factory=list)


def load_case(name: str, copies: int, levels: int) -> Case:
    """Program `name`'s inputs, tables and references on the grid of `copies` copies of
    the simple grid with `levels` levels."""
    path = CORPUS / f"{name}.simple.npz"
    with np.load(path) as npz:
        meta = json.loads(str(npz["meta_json"]))
        grid = Grid(copies, levels, {d: meta["sizes"][d] for d in HORIZONTAL})
        inputs = {}
        for key in npz.files:
            if not key.startswith("in__"):
                continue
            p = key[len("in__") :]
            if p not in meta["params"]:
                raise ValueError(f"{path.name}: '{key}' is not a parameter of {name} (meta_json.params)")
            dims = field_dims(meta["params"][p])
            inputs[p] = tile_field(p, npz[key], dims, grid) if dims is not None else npz[key]
        inputs, inexact = scale_scalars(name, meta, inputs, grid)
        tables = {
            k[len("conn__") :]: tile_table(k[len("conn__") :], npz[k], grid)
            for k in npz.files
            if k.startswith("conn__")
        }
        case = Case(name, meta, grid, inputs, tables, meta["outputs"], no_reference=inexact)
        if not inexact:
            for f in case.outputs:
                backend, tol = reference(npz, f)
                want = npz[f"out__{backend}__{f}"]
                case.references[f] = (backend, tol, tile_field(f, want, field_dims(meta["params"][f]), grid))
    return case


def reference(npz, field_name: str) -> tuple[str, float]:
    """The backend whose output is `field_name`'s reference and the tolerance, as
    `references()` in tests/gt4py_corpus.rs: GT4Py's embedded run where it ran (gtfn, then
    dace_noopt, where it did not); bitwise unless embedded and gtfn both ran and differ."""
    have = set(npz.files)
    key = lambda b: f"out__{b}__{field_name}"
    backend = next((b for b in ("embedded", "gtfn", "dace_noopt") if key(b) in have), None)
    if backend is None:
        raise ValueError(f"no output of GT4Py for '{field_name}' in the npz")
    exact = True
    if key("embedded") in have and key("gtfn") in have:
        exact = bits_equal(npz[key("embedded")], npz[key("gtfn")])
    return backend, 0.0 if exact else TOLERANCE


def bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def difference(got: np.ndarray, want: np.ndarray) -> float:
    """0.0 when `got` equals `want` bit for bit; else the largest |got - want| over the
    elements whose bits differ, relative to `want`'s largest magnitude (at least the
    smallest normal number, so a difference is never 0; inf where a NaN is involved)."""
    if got.shape != want.shape:
        return math.inf
    if bits_equal(got, want):
        return 0.0
    tiny = np.finfo(np.float64).tiny
    g = got.astype(np.float64).ravel()
    w = want.astype(np.float64).ravel()
    differ = got.ravel().view(f"u{got.itemsize}") != want.ravel().view(f"u{want.itemsize}")
    scale = max(float(np.nanmax(np.abs(w))) if w.size else 0.0, tiny)
    d = np.abs(g[differ] - w[differ]) / scale
    return max(float(np.nan_to_num(d, nan=math.inf).max()), tiny)


# ---------------------------------------------------------------------------------------------
# Running and timing
# ---------------------------------------------------------------------------------------------


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


def time_calls(call, warmup: int, reps: int, on_first=None) -> list[float]:
    """Calls `call` warmup + reps times and returns the last `reps` times in seconds.
    `on_first` runs after the first call (it reads the outputs of the initial inputs)."""
    samples = []
    for k in range(warmup + reps):
        t0 = time.perf_counter()
        call()
        t = time.perf_counter() - t0
        if k == 0 and on_first is not None:
            on_first()
        if k >= warmup:
            samples.append(t)
    return samples


def sdflow_arguments(prog, case: Case) -> dict:
    """The call's arguments as GT4Py passes them (as python/tests' `gt4py_arguments`):
    fields and scalars, the neighbour tables `gt_conn_<OFFSET>`, GT4Py's instrumentation
    buffer zeroed. Arrays are copies, so every stage starts from the same values; sizes,
    strides and `__<field>_<Dim>_range_0/1` are inferred by sdflow from the shapes."""
    args = {}
    for name in prog.arguments:
        if name.startswith("gt_conn_"):
            args[name] = case.tables[name[len("gt_conn_") :]]  # read only: shared
        elif name == "gt_compute_time":
            args[name] = np.zeros(1)
        elif name in case.inputs:
            v = case.inputs[name]
            args[name] = v.item() if v.ndim == 0 and name in prog.symbols else v.copy()
    for name in prog.symbols:
        if name not in args and name in case.inputs:
            args[name] = case.inputs[name].item()
    if "gt_metrics_level" in prog.symbols:
        args["gt_metrics_level"] = 0
    return args


@dataclass
class Stage:
    """One way of running a program: its median time, the outputs of its first call, what
    preparing it took; or the error that stopped it, or why it was not run."""

    label: str
    samples: list[float] = field(default_factory=list)
    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    prepare_s: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    skipped: str | None = None
    # The bound call, kept until the paired timing (`--paired`) has run; for sdflow's
    # stages also the compiled program's `bind` and the arguments bound.
    call: object = None
    bind: object = None
    args: dict = field(default_factory=dict)

    @property
    def ms(self) -> float | None:
        return median_ms(self.samples) if self.samples else None

    @property
    def ran(self) -> bool:
        return self.error is None and self.skipped is None


def run_sdflow(
    case: Case,
    variant: str,
    optimize: bool,
    threads: int,
    warmup: int,
    reps: int,
    relowered: dict[str, Path] | None = None,
) -> Stage:
    """One sdflow stage. `relowered`: the program's SDFGs translated by GT4Py for this grid
    (`GT4Py.translate`), used instead of the corpus' simple-grid ones."""
    import sdflow

    # The final SDFG optimized once more by sdflow's pipeline is its own stage: the
    # pipeline must never make an optimized program slower.
    label = f"{variant}+sdflow" if optimize == (variant == "lowered") else f"{variant}+opt+sdflow"
    stage = Stage(label)
    path = (relowered or {}).get(variant) or CORPUS / f"{case.name}.simple.dace.{variant}.sdfgz"
    step = "load"
    try:
        if case.grid.copies > 1 and not relowered:
            fixed = fixed_extents(path, case.meta)
            if fixed:
                more = f" and {len(fixed) - 3} more" if len(fixed) > 3 else ""
                stage.skipped = (
                    f"{path.name} has the simple grid's sizes as fixed extents "
                    f"({', '.join(fixed[:3])}{more}): it runs on the simple grid only "
                    "(--gt4py translates it for this grid)"
                )
                return stage
        t0 = time.perf_counter()
        prog = sdflow.load(path)
        stage.prepare_s["load"] = time.perf_counter() - t0
        if optimize:
            step = "optimize"
            t0 = time.perf_counter()
            prog, _report = prog.optimize()
            stage.prepare_s["optimize"] = time.perf_counter() - t0
        step = "compile"
        t0 = time.perf_counter()
        # The stage's optimization is the `optimize()` above or none: `compile` would
        # run the backend's pipeline itself (the `optimize` option defaults to true).
        run = prog.compile("cpu", options={"threads": threads, "optimize": False})
        stage.prepare_s["compile"] = time.perf_counter() - t0
        step = "bind"
        args = sdflow_arguments(prog, case)
        bound = run.bind(**args)
        step = "call"
        first = lambda: stage.outputs.update({f: args[f].copy() for f in case.outputs})
        stage.samples = time_calls(bound, warmup, reps, on_first=first)
        stage.call, stage.bind, stage.args = bound, run.bind, args
    except Exception as e:
        stage.error = f"{path.name}: {step}: {type(e).__name__}: {e}"
    return stage


def gt4py_arguments(program, inputs: dict, allocator) -> tuple[dict, dict]:
    """A GT4Py program's arguments from NumPy values by parameter name: fields made with
    `allocator` (a copy of each value, in the allocator's layout), scalars of the
    parameter's type; and the fields alone."""
    import gt4py.next as gtx
    from gt4py.next.type_system import type_specifications as ts

    args, fields = {}, {}
    for p in program.past_stage.past_node.params:
        name = str(p.id)
        value = inputs[name]
        if isinstance(p.type, ts.FieldType):
            fields[name] = args[name] = gtx.as_field(p.type.dims, np.array(value), allocator=allocator)
        elif p.type.kind == ts.ScalarKind.INT32:
            args[name] = gtx.int32(value.item())
        elif p.type.kind == ts.ScalarKind.FLOAT64:
            args[name] = gtx.float64(value.item())
        else:
            args[name] = value.item()
    return args, fields


class GT4Py:
    """GT4Py's backends on the large grid: the programs imported from ICON4Py, fields made
    with `gtx.as_field`, and the simple grid's neighbour tables tiled as for sdflow."""

    BACKENDS = ("gtfn", "dace")

    def __init__(self, copies: int, levels: int):
        import gt4py.next as gtx
        from gt4py.next.program_processors.runners import dace as gtx_dace
        from icon4py.model.common.grid import simple

        self.gtx = gtx
        self.backends = {"gtfn": gtx.gtfn_cpu, "dace": gtx_dace.run_dace_cpu}
        self.simple = simple.simple_grid(num_levels=NLEV)
        sizes = {d.value: s for d, s in self.simple.size.items() if d.value in HORIZONTAL}
        grid = Grid(copies, levels, sizes)
        self.offset_provider = {
            name: gtx.as_connectivity(
                domain=list(conn.domain.dims),
                codomain=conn.codomain,
                data=tile_table(name, conn.asnumpy(), grid),
                skip_value=conn.skip_value,
            )
            for name, conn in self.simple.connectivities.items()
        }

    def translate(self, case: Case, work: Path) -> dict[str, Path]:
        """The program's lowered and final SDFGs as GT4Py's DaCe backend translates them for
        this grid (`work`/<program>.dace.<stage>.sdfgz, reused when present), for programs
        whose corpus SDFGs hold the simple grid's sizes (`fixed_extents`). GT4Py sizes a
        temporary reached through a neighbour table from the table it is given, so the
        large grid's tables give the large grid's sizes. A child process translates (see
        `translate_here`), with a build cache of its own: GT4Py skips the translation of a
        program whose build it finds in its persistent cache."""
        files = {v: work / f"{case.name}.dace.{v}.sdfgz" for v in ("lowered", "final")}
        if all(f.exists() for f in files.values()):
            return files
        work.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, GT4PY_BUILD_CACHE_LIFETIME="session")
        env.pop("GT4PY_BUILD_CACHE_DIR", None)
        command = [sys.executable, str(Path(__file__).resolve()), "--translate-to", str(work)]
        command += ["--only", case.name, "--copies", str(case.grid.copies), "--levels", str(case.grid.levels)]
        child = subprocess.run(command, env=env, capture_output=True, text=True)
        missing = [str(f) for f in files.values() if not f.exists()]
        if child.returncode != 0 or missing:
            raise RuntimeError(
                f"translating for this grid (exit status {child.returncode}"
                + (f"; no {', '.join(missing)}" if missing else "")
                + f"): {child.stderr.strip()[-2000:]}"
            )
        return files

    def check_grid(self, case: Case) -> None:
        """The npz's tables must be the simple grid's, so that both stages see one grid."""
        for offset, tiled in case.tables.items():
            if not np.array_equal(tiled, self.offset_provider[offset].asnumpy()):
                raise ValueError(
                    f"{case.name}: the npz's neighbour table '{offset}' is not ICON4Py's simple grid's"
                )

    def run(self, case: Case, backend_name: str, warmup: int, reps: int) -> Stage:
        stage = Stage(f"GT4Py {backend_name}")
        step = "import"
        try:
            program = getattr(importlib.import_module(case.meta["module"]), case.meta["program"])
            backend = self.backends[backend_name]
            step = "arguments"
            args, fields = gt4py_arguments(program, case.inputs, backend)
            prog = program.with_backend(backend)
            call = lambda: prog(**args, offset_provider=self.offset_provider)
            # The first call translates and compiles (up to minutes for gtfn): timed apart,
            # and counted as the first warm-up call.
            step = "compile and first call"
            t0 = time.perf_counter()
            call()
            stage.prepare_s["compile and first call"] = time.perf_counter() - t0
            stage.outputs = {f: fields[f].asnumpy().copy() for f in case.outputs}
            step = "call"
            stage.samples = time_calls(call, warmup - 1, reps)
            stage.call = call
        except Exception as e:
            stage.error = f"{case.name}: GT4Py {backend_name}: {step}: {type(e).__name__}: {e}"
        return stage


# ---------------------------------------------------------------------------------------------
# Checks and the report
# ---------------------------------------------------------------------------------------------


@dataclass
class Check:
    what: str
    ok: bool | None  # None: not made (n/a)
    detail: str

    def line(self) -> str:
        mark = {True: "ok", False: "FAIL", None: "n/a"}[self.ok]
        return f"  [{mark}] {self.what}: {self.detail}"


def compare(what: str, got: Stage, want: dict[str, np.ndarray], tol: dict[str, float]) -> Check:
    """`got`'s outputs against `want`'s, each within its tolerance (0: bitwise)."""
    parts, ok = [], True
    for f, w in want.items():
        d = difference(got.outputs[f], w)
        if d == 0.0:
            parts.append(f"'{f}' bitwise equal")
        else:
            passed = d <= tol[f]
            ok &= passed
            parts.append(f"'{f}' differs by {d:.3e} (max relative; allowed {tol[f]:g})")
    return Check(what, ok, "; ".join(parts))


def checks_for(case: Case, stages: list[Stage]) -> list[Check]:
    """(a) against (b) bitwise; both against the tiled npz outputs where those are exact;
    GT4Py's backends, which may evaluate in another order (gtfn) or contract multiply-adds
    (GT4Py builds DaCe's code with -O3 -march=native: GCC's default -ffp-contract=fast), within
    TOLERANCE of the tiled reference, else of an sdflow stage, else of the other backend."""
    lowered, final, final_opt, *gt4py = stages
    out = [Check(s.label, False, s.error) for s in stages if s.error]
    out += [Check(s.label, None, s.skipped) for s in stages if s.skipped]
    if lowered.ran and final.ran:
        out.append(
            compare("lowered+sdflow vs final+sdflow", lowered, final.outputs, {f: 0.0 for f in case.outputs})
        )
    if final_opt.ran and final.ran:
        out.append(
            compare("final+opt+sdflow vs final+sdflow", final_opt, final.outputs, {f: 0.0 for f in case.outputs})
        )
    reference = None
    if case.no_reference:
        out.append(Check("tiled npz reference", None, "not exact: " + "; ".join(case.no_reference)))
    else:
        reference = {f: r[2] for f, r in case.references.items()}
        tol = {f: r[1] for f, r in case.references.items()}
        how = ", ".join(
            f"{f}: {b}, {'bitwise' if t == 0 else f'{t:g} relative'}"
            for f, (b, t, _) in case.references.items()
        )
        for s in (lowered, final):
            if s.ran:
                out.append(compare(f"{s.label} vs tiled npz reference ({how})", s, reference, tol))
    # What each GT4Py backend is compared with: the first of these that exists.
    against = [("tiled npz reference", reference)] if reference else []
    against += [(s.label, s.outputs) for s in (lowered, final) if s.ran]
    for s in gt4py:
        if not s.ran:
            continue
        if against:
            label, want = against[0]
            out.append(compare(f"{s.label} vs {label}", s, want, {f: TOLERANCE for f in case.outputs}))
        against.append((s.label, s.outputs))
    return out


def fmt_ms(stage: Stage) -> str:
    if stage.skipped:
        return "n/a"
    ms = stage.ms
    return "error" if ms is None else f"{ms:.3f}" if ms < 10 else f"{ms:.1f}"


def paired_ratio(a, b, pairs: int) -> float:
    """The median over `pairs` pairs of calls of a's time over b's, the two called one
    right after the other, in alternating order (a b, b a, …): a slow phase of a noisy
    machine then slows both calls of a pair, and the ratio keeps what the two programs do
    differently."""
    ratios = []
    for k in range(pairs):
        times = {}
        for name, call in ((("a", a), ("b", b)) if k % 2 == 0 else (("b", b), ("a", a))):
            t0 = time.perf_counter()
            call()
            times[name] = time.perf_counter() - t0
        ratios.append(times["a"] / times["b"])
    return statistics.median(ratios)


def on_arrays_of(a: Stage, b: Stage):
    """Stage a's program bound to stage b's arrays (where a takes an argument of the same
    name), for a paired timing of two sdflow stages: each stage has copies of its own,
    and where those copies lie in memory (how their addresses fall on the cache's sets,
    page and 4 KiB offsets between fields) moves a call's time by several percent,
    the same program on two sets of copies included. On the same arrays the ratio keeps
    what the two programs do differently. a's own call (said in the log) where its
    arguments are not b's."""
    try:
        bound = a.bind(**{k: b.args.get(k, v) for k, v in a.args.items()})
        bound()
        return bound
    except Exception as e:
        log(f"  {a.label} not bound to {b.label}'s arrays ({type(e).__name__}: {e}); paired on its own")
        return a.call


def geomean(xs: list[float]) -> float | None:
    return math.exp(statistics.fmean(math.log(x) for x in xs)) if xs else None


def table(
    rows: list[tuple[str, list[Stage]]],
    gt4py: bool,
    paired: dict[str, float] | None = None,
    paired_again: dict[str, float] | None = None,
    paired_gt4py: dict[str, float] | None = None,
) -> tuple[str, float | None]:
    """The markdown table of the medians, and the geometric mean of lowered/final over the
    programs where both ran; with `paired` and `paired_again` (`--paired`), columns of
    the paired ratios lowered/final (and their geometric mean) and final+opt/final; with
    `paired_gt4py` (`--paired` and `--gt4py`), lowered+sdflow against GT4Py's faster
    backend in pairs of calls (and its geometric mean)."""
    head = ["program", "lowered+sdflow ms", "final+sdflow ms", "lowered/final"]
    if paired is not None:
        head += ["paired lowered/final"]
    head += ["final+opt+sdflow ms", "final+opt/final"]
    if paired_again is not None:
        head += ["paired final+opt/final"]
    if gt4py:
        head += ["GT4Py gtfn ms", "GT4Py dace ms"]
    if paired_gt4py is not None:
        head += ["paired lowered/GT4Py's faster"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    ratios = []
    for name, stages in rows:
        lowered, final = stages[0], stages[1]
        ratio = lowered.ms / final.ms if lowered.ms and final.ms else None
        if ratio is not None:
            ratios.append(ratio)
        cells = [name, fmt_ms(lowered), fmt_ms(final), "–" if ratio is None else f"{ratio:.3g}"]
        if paired is not None:
            cells += [f"{paired[name]:.3g}" if name in paired else "–"]
        final_opt = stages[2]
        again = final_opt.ms / final.ms if final_opt.ms and final.ms else None
        cells += [fmt_ms(final_opt), "–" if again is None else f"{again:.3g}"]
        if paired_again is not None:
            cells += [f"{paired_again[name]:.3g}" if name in paired_again else "–"]
        if gt4py:
            cells += [fmt_ms(s) for s in stages[3:5]]
        if paired_gt4py is not None:
            cells += [f"{paired_gt4py[name]:.3g}" if name in paired_gt4py else "–"]
        lines.append("| " + " | ".join(cells) + " |")
    geo = geomean(ratios)
    tail = [
        f"**geometric mean** ({len(ratios)} program{'' if len(ratios) == 1 else 's'})",
        "",
        "",
        "–" if geo is None else f"**{geo:.3g}**",
    ]
    if paired is not None:
        pg = geomean(list(paired.values()))
        tail += ["–" if pg is None else f"**{pg:.3g}**"]
    tail += [""] * (len(head) - len(tail))
    if paired_gt4py is not None:
        gg = geomean(list(paired_gt4py.values()))
        tail[-1] = "–" if gg is None else f"**{gg:.3g}**"
    lines.append("| " + " | ".join(tail) + " |")
    return "\n".join(lines), geo


def write_inputs(programs: list[str], copies: int, levels: int, out: Path) -> int:
    """Writes the arguments of every program's lowered and final SDFG on the large grid, as
    `sdflow bench --inputs` reads them: arrays by argument name, scalars as 0-d entries.
    The copies of the grid repeat, so the compressed files stay small."""
    import sdflow

    out.mkdir(parents=True, exist_ok=True)
    for name in programs:
        case = load_case(name, copies, levels)
        for variant in ("lowered", "final"):
            path = CORPUS / f"{case.name}.simple.dace.{variant}.sdfgz"
            fixed = fixed_extents(path, case.meta) if copies > 1 else []
            if fixed:
                # The SDFG GT4Py translated for this grid (`perf.py --gt4py` makes it).
                cache = os.environ.get("GT4PY_BUILD_CACHE_DIR") or ROOT / "target" / "gt4py" / f"copies{copies}-levels{levels}"
                path = Path(cache) / "sdfg" / f"{case.name}.dace.{variant}.sdfgz"
                if not path.exists():
                    log(f"{name} ({variant}): skipped, fixed extents {', '.join(fixed[:3])} (no {path}: run --gt4py)")
                    continue
                shutil.copyfile(path, out / f"{name}.{variant}.sdfgz")
            args = sdflow_arguments(sdflow.load(path), case)
            target = out / f"{name}.{variant}.npz"
            np.savez_compressed(target, **{k: np.asarray(v) for k, v in args.items()})
            log(f"{name} ({variant}): {target} ({target.stat().st_size / 1e6:.2f} MB)")
    return 0


def translate_here(name: str, copies: int, levels: int, out: Path) -> int:
    """`--translate-to OUT`: translates program `name` with GT4Py's DaCe backend for this
    grid and saves its lowered and final SDFGs to OUT/<name>.dace.<stage>.sdfgz, captured
    as generate.py captures them; stops before DaCe compiles."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from generate import Capture

    class Translated(Exception):
        pass

    capture = Capture()
    capture.install()
    capture.prefix = out / name
    save = capture.save

    def save_then_stop(sdfg, stage: str) -> None:
        save(sdfg, stage)
        if stage == "final":
            raise Translated()

    capture.save = save_then_stop
    stage = GT4Py(copies, levels).run(load_case(name, copies, levels), "dace", 1, 1)
    if stage.error and "Translated" not in stage.error:
        print(stage.error, file=sys.stderr)
        return 1
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--copies", type=int, default=2000, help="copies of the simple grid side by side (default 2000)"
    )
    ap.add_argument(
        "--levels", type=int, default=NLEV, help=f"vertical levels (default {NLEV}; others: no npz reference)"
    )
    ap.add_argument(
        "--reps",
        type=int,
        default=5,
        help="timed calls per program and stage; the median is reported (default 5)",
    )
    ap.add_argument(
        "--warmup",
        type=int,
        default=2,
        help="untimed calls first, the first one checked (default 2, at least 1)",
    )
    ap.add_argument(
        "--only", action="append", metavar="NAME", help="a program to run (repeatable; default: all)"
    )
    ap.add_argument("--json", type=Path, metavar="OUT", help="write the figures and checks to OUT")
    ap.add_argument("--gt4py", action="store_true", help="also time GT4Py's gtfn and DaCe CPU backends")
    ap.add_argument(
        "--write-inputs",
        type=Path,
        metavar="DIR",
        help="instead of timing, write each program's arguments on this grid to DIR/<program>.<lowered|final>.npz "
        "(compressed; for `sdflow bench --inputs`, as scripts/gpu-bundle.sh uses them); a program "
        "GT4Py translated for this grid (--gt4py) gets its SDFG beside them, DIR/<program>.<lowered|final>.sdfgz",
    )
    ap.add_argument(
        "--paired",
        type=int,
        default=0,
        metavar="N",
        help="also call lowered+sdflow and final+sdflow one right after the other N times, in "
        "alternating order, and report the median of the N ratios (robust on a noisy machine)",
    )
    ap.add_argument("--translate-to", type=Path, metavar="DIR", help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.copies < 1 or opts.levels < 2 or opts.reps < 1 or opts.warmup < 1:
        ap.error("--copies, --reps and --warmup must be at least 1, --levels at least 2")

    # One thread count for everything: OMP_NUM_THREADS, else every core. Set before GT4Py or
    # DaCe load an OpenMP runtime; sdflow is told explicitly.
    threads = int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    if opts.gt4py:
        # Keep GT4Py's gtfn/DaCe builds between runs (git-ignored, under target/), one cache
        # per grid size: GT4Py bakes the sizes of the tables into some programs.
        os.environ.setdefault("GT4PY_BUILD_CACHE_LIFETIME", "persistent")
        os.environ.setdefault(
            "GT4PY_BUILD_CACHE_DIR",
            str(ROOT / "target" / "gt4py" / f"copies{opts.copies}-levels{opts.levels}"),
        )
        # gtfn and DaCe build with CMake: the environment's `cmake` wheel must be on PATH.
        os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")

    programs = sorted(p.name[: -len(".simple.npz")] for p in CORPUS.glob("*.simple.npz"))
    if not programs:
        print(f"error: no programs (*.simple.npz) in {CORPUS}", file=sys.stderr)
        return 2
    if opts.only:
        unknown = [p for p in opts.only if p not in programs]
        if unknown:
            print(
                f"error: --only {', '.join(unknown)}: not in {CORPUS} (programs: {', '.join(programs)})",
                file=sys.stderr,
            )
            return 2
        programs = [p for p in programs if p in opts.only]

    try:
        gt4py = GT4Py(opts.copies, opts.levels) if opts.gt4py else None
    except ImportError as e:
        print(
            f"error: --gt4py: cannot import GT4Py and ICON4Py ({type(e).__name__}: {e}); run from the "
            "environment of scripts/gt4py/README.md (gt4py==1.2.1, icon4py 0.4.1, dace==2.0.0a10)",
            file=sys.stderr,
        )
        return 2
    date = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    log(
        f"{len(programs)} program(s); {opts.copies} copies of the simple grid, K {opts.levels}; "
        f"{threads} thread(s); median of {opts.reps} call(s) after {opts.warmup} warm-up call(s); "
        f"{platform.node()}, {os.cpu_count()} cores, {date}"
    )
    if opts.write_inputs:
        return write_inputs(programs, opts.copies, opts.levels, opts.write_inputs)
    if opts.translate_to:
        return max(translate_here(p, opts.copies, opts.levels, opts.translate_to) for p in programs)
    rows, results, failed = [], {}, []
    paired: dict[str, float] = {}
    paired_again: dict[str, float] = {}
    paired_gt4py: dict[str, float] = {}
    for name in programs:
        log(f"\n{name}")
        try:
            case = load_case(name, opts.copies, opts.levels)
            if gt4py is not None:
                gt4py.check_grid(case)
        except Exception as e:
            error = f"inputs: {type(e).__name__}: {e}"
            log(f"  [FAIL] {error}")
            failed.append(name)
            rows.append(
                (
                    name,
                    [
                        Stage(label, error=error)
                        for label in ("lowered+sdflow", "final+sdflow", "GT4Py gtfn", "GT4Py dace")
                    ],
                )
            )
            results[name] = {"error": error}
            continue
        relowered = None
        if gt4py is not None and opts.copies > 1 and any(
            fixed_extents(CORPUS / f"{name}.simple.dace.{v}.sdfgz", case.meta) for v in ("lowered", "final")
        ):
            work = Path(os.environ["GT4PY_BUILD_CACHE_DIR"]) / "sdfg"
            try:
                relowered = gt4py.translate(case, work)
                log(f"  translated by GT4Py for this grid: {work}/{name}.dace.{{lowered,final}}.sdfgz")
            except Exception as e:
                log(f"  [FAIL] {type(e).__name__}: {e}")
                failed.append(name)
        stages = [
            run_sdflow(case, "lowered", True, threads, opts.warmup, opts.reps, relowered),
            run_sdflow(case, "final", False, threads, opts.warmup, opts.reps, relowered),
            run_sdflow(case, "final", True, threads, opts.warmup, opts.reps, relowered),
        ]
        if opts.paired > 0 and stages[0].call is not None and stages[1].call is not None:
            paired[name] = paired_ratio(on_arrays_of(stages[0], stages[1]), stages[1].call, opts.paired)
            log(f"  paired lowered/final: {paired[name]:.3g} (median of {opts.paired} pairs)")
        if opts.paired > 0 and stages[2].call is not None and stages[1].call is not None:
            paired_again[name] = paired_ratio(on_arrays_of(stages[2], stages[1]), stages[1].call, opts.paired)
            log(f"  paired final+opt/final: {paired_again[name]:.3g} (median of {opts.paired} pairs)")
        if gt4py is not None:
            stages += [gt4py.run(case, b, opts.warmup, opts.reps) for b in GT4Py.BACKENDS]
            # lowered+sdflow against each of GT4Py's backends in pairs of calls; the
            # ratio against the faster backend is the larger one.
            pairs = [
                paired_ratio(stages[0].call, s.call, opts.paired)
                for s in stages[3:]
                if opts.paired > 0 and stages[0].call is not None and s.call is not None
            ]
            if len(pairs) == len(GT4Py.BACKENDS):
                paired_gt4py[name] = max(pairs)
                log(f"  paired lowered/GT4Py's faster backend: {paired_gt4py[name]:.3g} (median of {opts.paired} pairs each)")
        for s in stages:
            s.call, s.bind, s.args = None, None, {}  # the arrays go before the next program's are made
        for s in stages:
            if s.ran:
                prep = ", ".join(f"{k} {v:.3f} s" for k, v in s.prepare_s.items())
                log(f"  {s.label}: {fmt_ms(s)} ms ({prep})")
        checks = checks_for(case, stages)
        for c in checks:
            log(c.line())
        if any(c.ok is False for c in checks):
            failed.append(name)
        rows.append((name, stages))
        results[name] = {
            "stages": {
                s.label: {
                    "median_ms": s.ms,
                    "samples_s": s.samples,
                    "prepare_s": s.prepare_s,
                    "error": s.error,
                    "skipped": s.skipped,
                }
                for s in stages
            },
            "checks": [{"what": c.what, "ok": c.ok, "detail": c.detail} for c in checks],
        }

    text, geo = table(
        rows,
        gt4py is not None,
        paired if opts.paired > 0 else None,
        paired_again if opts.paired > 0 else None,
        paired_gt4py if opts.paired > 0 and gt4py is not None else None,
    )
    log(f"\n{text}\n")
    if failed:
        log(f"checks FAILED for {len(failed)} program(s): {', '.join(failed)}")
    if opts.json:
        opts.json.write_text(
            json.dumps(
                {
                    "date": date,
                    "machine": {
                        "node": platform.node(),
                        "cores": os.cpu_count(),
                        "platform": platform.platform(),
                    },
                    "copies": opts.copies,
                    "levels": opts.levels,
                    "threads": threads,
                    "warmup": opts.warmup,
                    "reps": opts.reps,
                    "geomean_lowered_over_final": geo,
                    "paired_lowered_over_final": paired if opts.paired > 0 else None,
                    "geomean_paired_lowered_over_final": geomean(list(paired.values())),
                    "paired_final_opt_over_final": paired_again if opts.paired > 0 else None,
                    "paired_lowered_over_gt4py_faster": paired_gt4py if opts.paired > 0 else None,
                    "table": text,
                    "programs": results,
                    "failed": failed,
                },
                indent=1,
            )
            + "\n"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
