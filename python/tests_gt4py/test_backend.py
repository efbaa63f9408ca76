"""sdflow as a GT4Py backend (`sdflow.gt4py`), run in the GT4Py environment
(`scripts/gt4py/env.sh`: GT4Py 1.2.1, ICON4Py's diffusion 0.4.1, DaCe 2.0.0a10).

Every ICON4Py diffusion program of `tests/gt4py` runs through `sdflow.gt4py.cpu`
from GT4Py's own call (`program.with_backend(...)(…, offset_provider=…)`) and is compared
with the outputs GT4Py's gtfn and embedded backends computed when the corpus was made.
"""

from __future__ import annotations

import importlib
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import gt4py.next as gtx
from gt4py.next import common as gtx_common
from gt4py.next.type_system import type_specifications as ts
from icon4py.model.common import dimension as dims
from icon4py.model.common.grid import simple

import sdflow
import sdflow.gt4py

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "gt4py"
PROGRAMS = sorted(p.name[: -len(".simple.npz")] for p in CORPUS.glob("*.simple.npz"))


@pytest.fixture(scope="module")
def grid():
    return simple.simple_grid(num_levels=10)


def corpus(name):
    npz = np.load(CORPUS / f"{name}.simple.npz")
    meta = json.loads(str(npz["meta_json"]))
    program = getattr(importlib.import_module(meta["module"]), meta["program"])
    return program, npz, meta


def gt4py_arguments(program, npz, backend=sdflow.gt4py.cpu):
    """The program's arguments as GT4Py fields and scalars, from the corpus's inputs."""
    args, fields = {}, {}
    for p in program.past_stage.past_node.params:
        name = str(p.id)
        value = np.array(npz["in__" + name])
        if isinstance(p.type, ts.FieldType):
            fields[name] = args[name] = gtx.as_field(p.type.dims, value, allocator=backend)
        elif p.type.kind == ts.ScalarKind.INT32:
            args[name] = gtx.int32(value.item())
        elif p.type.kind == ts.ScalarKind.FLOAT64:
            args[name] = gtx.float64(value.item())
        else:
            args[name] = value.item()
    return args, fields


def assert_equals_references(fields, npz, meta):
    for field in meta["outputs"]:
        ref = "gtfn" if f"out__gtfn__{field}" in npz.files else "embedded"
        want = npz[f"out__{ref}__{field}"]
        got = fields[field].asnumpy()
        if meta.get("embedded_vs_gtfn", {}).get(field, {}).get("bitwise", False):
            assert np.array_equal(got, want), field
        else:
            scale = max(np.abs(want).max(), np.finfo(float).tiny)
            assert np.abs(got - want).max() / scale <= 1e-12, field


def test_the_corpus_grid_is_icon4pys_simple_grid(grid):
    # The references were computed on these neighbour tables; the tests pass the grid's own.
    for name in PROGRAMS:
        npz = np.load(CORPUS / f"{name}.simple.npz")
        for key in (k for k in npz.files if k.startswith("conn__")):
            table = grid.connectivities[key[len("conn__") :]].asnumpy()
            assert np.array_equal(table, npz[key]), (name, key)


@pytest.mark.parametrize("name", PROGRAMS)
def test_every_diffusion_program_equals_gt4pys_outputs(name, grid):
    program, npz, meta = corpus(name)
    args, fields = gt4py_arguments(program, npz)
    program.with_backend(sdflow.gt4py.cpu)(**args, offset_provider=grid.connectivities)
    assert_equals_references(fields, npz, meta)


def compiled_variants(prog):
    """The sdflow programs GT4Py's pool holds for a program (one per static variant), the
    builds running in GT4Py's worker processes finished."""
    pool = prog._compiled_programs
    for key in list(pool._compilation_jobs):
        pool._finish_compilation_job(key)
    return list(pool.compiled_programs.values())


def test_static_arguments_and_compile_time_domains_specialize_the_program(grid):
    # As ICON4Py's `setup_program` does: compile ahead of time with the domain bounds and
    # a scalar static, then call without JIT.
    program, npz, meta = corpus("apply_nabla2_to_w")
    args, fields = gt4py_arguments(program, npz)
    prog = program.with_backend(sdflow.gt4py.cpu).with_compilation_options(enable_jit=False)
    statics = ("horizontal_start", "horizontal_end", "vertical_start", "vertical_end")
    prog.compile(
        **{k: [args[k]] for k in statics},
        diff_multfac_w=[args["diff_multfac_w"], gtx.float64(0.0)],
        offset_provider=grid.connectivities,
    )
    variants = compiled_variants(prog)
    assert len(variants) == 2
    for v in variants:
        assert isinstance(v, sdflow.gt4py.SdflowGT4PyProgram)
        # The static values are compiled in: the SDFG takes none of them.
        for k in (*statics, "diff_multfac_w"):
            assert k not in v.program.arguments and k not in v.program.symbols, k
    w0 = fields["w"].asnumpy().copy()
    prog(**args, offset_provider=grid.connectivities)
    assert_equals_references(fields, npz, meta)

    # The other variant: diff_multfac_w = 0 leaves w as it was.
    args2, fields2 = gt4py_arguments(program, npz)
    args2["diff_multfac_w"] = gtx.float64(0.0)
    prog(**args2, offset_provider=grid.connectivities)
    np.testing.assert_array_equal(fields2["w"].asnumpy(), w0)

    # A value that was not compiled is GT4Py's error, not a silent JIT.
    args2["vertical_end"] = gtx.int32(5)
    with pytest.raises(RuntimeError, match="No program compiled for this set of static arguments"):
        prog(**args2, offset_provider=grid.connectivities)


def test_a_compile_time_domain_smaller_than_the_fields_writes_only_inside_it(grid):
    program, npz, meta = corpus("apply_nabla2_to_w")
    args, fields = gt4py_arguments(program, npz)
    args["horizontal_start"], args["horizontal_end"] = gtx.int32(4), gtx.int32(11)
    args["vertical_start"], args["vertical_end"] = gtx.int32(2), gtx.int32(7)
    prog = program.with_backend(sdflow.gt4py.cpu).with_compilation_options(enable_jit=False)
    prog.compile(
        **{k: [args[k]] for k in ("horizontal_start", "horizontal_end", "vertical_start", "vertical_end")},
        offset_provider=grid.connectivities,
    )
    w0 = fields["w"].asnumpy().copy()
    prog(**args, offset_provider=grid.connectivities)
    want = w0.copy()
    full = npz["out__gtfn__w"]
    want[4:11, 2:7] = full[4:11, 2:7]
    np.testing.assert_array_equal(fields["w"].asnumpy(), want)


def test_fields_with_a_nonzero_origin_pass_their_domain(grid):
    # A field whose domain starts above 0 (a slice of a larger one, as GT4Py allows): the
    # domain's range symbols carry the origin, and the program indexes accordingly.
    program, npz, meta = corpus("apply_nabla2_to_w")
    args, fields = gt4py_arguments(program, npz)
    big = gtx.as_field(
        fields["z_nabla2_c"].domain.dims,
        np.pad(fields["z_nabla2_c"].asnumpy(), ((0, 0), (3, 0)), constant_values=np.nan),
        origin={fields["z_nabla2_c"].domain.dims[1]: 3},
        allocator=sdflow.gt4py.cpu,
    )
    assert big.domain.ranges[1].start == -3
    args["z_nabla2_c"] = big
    program.with_backend(sdflow.gt4py.cpu)(**args, offset_provider=grid.connectivities)
    assert_equals_references(fields, npz, meta)


# --- bad arguments ---------------------------------------------------------------------------


def compiled_once(program, args, grid):
    """The program called once through GT4Py, and the sdflow program GT4Py then holds, with
    the arguments as GT4Py passes them to it (in parameter order)."""
    prog = program.with_backend(sdflow.gt4py.cpu)
    prog(**args, offset_provider=grid.connectivities)
    (decorated,) = compiled_variants(prog)
    return decorated, [args[str(p.id)] for p in program.past_stage.past_node.params]


# GT4Py checks the argument types of every call in Python's debug mode (`__debug__`, as
# these tests run); under `python -O` it passes them to the compiled program unchecked, and
# sdflow's checks answer. Both are tested.


def test_a_field_of_the_wrong_element_type_is_a_clear_error(grid):
    program, npz, meta = corpus("apply_nabla2_to_w")
    args, _ = gt4py_arguments(program, npz)
    bad = gtx.as_field(args["area"].domain.dims, args["area"].asnumpy().astype(np.float32))
    assert __debug__
    with pytest.raises(gtx.errors.DSLError, match=r"'area' to be of type 'Field\[\[Cell\], float64\]', got 'Field\[\[Cell\], float32\]'"):
        program.with_backend(sdflow.gt4py.cpu)(**{**args, "area": bad}, offset_provider=grid.connectivities)
    decorated, arrays = compiled_once(program, args, grid)
    arrays[0] = bad
    with pytest.raises(sdflow.CallError, match="program 'apply_nabla2_to_w': 'area' is f32, the program needs f64"):
        decorated(*arrays, offset_provider=grid.connectivities)


def test_a_field_of_the_wrong_dimensions_is_a_clear_error(grid):
    program, npz, meta = corpus("apply_nabla2_to_w")
    args, _ = gt4py_arguments(program, npz)
    bad = gtx.as_field(args["area"].domain.dims, args["area"].asnumpy().copy())
    with pytest.raises(gtx.errors.DSLError, match=r"'w' to be of type 'Field\[\[Cell, K\], float64\]', got 'Field\[\[Cell\], float64\]'"):
        program.with_backend(sdflow.gt4py.cpu)(**{**args, "w": bad}, offset_provider=grid.connectivities)
    decorated, arrays = compiled_once(program, args, grid)
    arrays[3] = bad
    with pytest.raises(sdflow.CallError, match=r"argument 'w': expected a field over \(Cell, K\), got a field over \(Cell\)"):
        decorated(*arrays, offset_provider=grid.connectivities)
    # The same number of dimensions, other ones: a field over edges where cells are read.
    arrays[3] = gtx.as_field((dims.EdgeDim, dims.KDim), np.zeros((27, 10)))
    with pytest.raises(sdflow.CallError, match=r"argument 'w': expected a field over \(Cell, K\), got a field over \(Edge, K\)"):
        decorated(*arrays, offset_provider=grid.connectivities)


def test_a_missing_connectivity_is_a_clear_error(grid):
    program, npz, meta = corpus("apply_nabla2_to_w")
    args, _ = gt4py_arguments(program, npz)
    decorated, arrays = compiled_once(program, args, grid)
    without = {k: v for k, v in grid.connectivities.items() if k != "C2E2CO"}
    with pytest.raises(sdflow.CallError, match="the offset provider has no connectivity 'C2E2CO'"):
        decorated(*arrays, offset_provider=without)


def test_a_scalar_where_a_field_is_expected_is_a_clear_error(grid):
    program, npz, meta = corpus("apply_nabla2_to_w")
    args, _ = gt4py_arguments(program, npz)
    decorated, arrays = compiled_once(program, args, grid)
    arrays[0] = 1.0
    with pytest.raises(sdflow.CallError, match="argument 'area': expected a field, got a float"):
        decorated(*arrays, offset_provider=grid.connectivities)
    with pytest.raises(sdflow.CallError, match=r"2 argument\(s\) given, the program takes 9"):
        decorated(*arrays[:2], offset_provider=grid.connectivities)


# --- repeated calls: the bound arguments reused, rebound when they change -----------------------


def test_repeated_calls_reuse_the_bound_arguments_and_rebind_when_they_change(grid):
    program, npz, meta = corpus("apply_nabla2_to_w")
    args, fields = gt4py_arguments(program, npz)
    ref_args, ref_fields = gt4py_arguments(program, npz, backend=None)
    prog = program.with_backend(sdflow.gt4py.cpu)
    embedded = program.with_backend(None)
    conn = grid.connectivities

    def both(**changes):
        for a, k in ((args, "sdflow"), (ref_args, "embedded")):
            for name, value in changes.items():
                a[name] = value(a) if callable(value) else value
        prog(**args, offset_provider=conn)
        embedded(**ref_args, offset_provider=conn)
        np.testing.assert_allclose(fields["w"].asnumpy(), ref_fields["w"].asnumpy(), rtol=1e-14, atol=0)

    both()
    (decorated,) = compiled_variants(prog)
    (first,) = decorated._bindings
    both()  # the same fields again: w is updated a second time, from the bound arguments
    both(diff_multfac_w=gtx.float64(0.37))  # a float scalar: set on the bound program
    assert decorated._bindings == [first]
    # A new field object (other values): bound anew.
    old_z = args["z_nabla2_c"]
    z = gtx.as_field(args["z_nabla2_c"].domain.dims, npz["in__z_nabla2_c"][::-1].copy())
    args["z_nabla2_c"] = z
    both(z_nabla2_c=lambda a: a["z_nabla2_c"] if a is args else gtx.as_field(z.domain.dims, z.asnumpy().copy()))
    second = decorated._bindings[0]
    assert decorated._bindings == [second, first]
    both(horizontal_end=gtx.int32(9))  # an integer scalar: bound anew
    third = decorated._bindings[0]
    assert decorated._bindings == [third, second, first]
    # The first fields again (as a step calling the program on two sets of fields):
    # the first binding, reused and moved to the front.
    both(z_nabla2_c=lambda a: old_z if a is args else gtx.as_field(old_z.domain.dims, old_z.asnumpy().copy()), horizontal_end=gtx.int32(18))
    assert decorated._bindings == [first, third, second]
    # At most four kept: the least recently used goes.
    for end in (10, 11):
        both(horizontal_end=gtx.int32(end))
    assert len(decorated._bindings) == 4 and second not in decorated._bindings
    both(z_nabla2_c=lambda a: z if a is args else gtx.as_field(z.domain.dims, z.asnumpy().copy()), horizontal_end=gtx.int32(9))
    # The domain bound took effect: only cells below 9 changed in this last call.
    before = fields["w"].asnumpy().copy()
    both(horizontal_start=gtx.int32(12), horizontal_end=gtx.int32(14))
    after = fields["w"].asnumpy()
    assert np.array_equal(after[:12], before[:12]) and np.array_equal(after[14:], before[14:])
    assert not np.array_equal(after[12:14], before[12:14])


def test_a_failed_bind_keeps_nothing_to_reuse(grid):
    program, npz, meta = corpus("apply_nabla2_to_w")
    args, fields = gt4py_arguments(program, npz)
    decorated, arrays = compiled_once(program, args, grid)
    bad = list(arrays)
    bad[0] = gtx.as_field(args["area"].domain.dims, args["area"].asnumpy().astype(np.float32))
    kept = list(decorated._bindings)
    with pytest.raises(sdflow.CallError, match="'area' is f32"):
        decorated(*bad, offset_provider=grid.connectivities)
    assert decorated._bindings == kept
    w0 = fields["w"].asnumpy().copy()
    decorated(*arrays, offset_provider=grid.connectivities)
    assert not np.array_equal(fields["w"].asnumpy(), w0)


# --- the GPU backend on the emulated device ---------------------------------------------------

EMULATED = r'''
import ctypes, sys, types
import numpy as np
import gt4py.next as gtx
from gt4py.next import custom_layout_allocators as allocators
from icon4py.model.common.grid import simple
import sdflow, sdflow.gt4py
from sdflow import _sdflow
sys.path.insert(0, sys.argv[1])
import test_backend as tb


def main():
    grid = simple.simple_grid(num_levels=10)
    # NumPy fields: each call copies them to the device and back.
    gpu = sdflow.gt4py.make_backend("gpu", allocator=allocators.StandardCPUFieldBufferAllocator())
    assert gpu.name == "sdflow_gpu"
    for name in ("apply_nabla2_to_w", "calculate_nabla4", "apply_diffusion_to_vn"):
        program, npz, meta = tb.corpus(name)
        args, fields = tb.gt4py_arguments(program, npz, backend=gpu)
        program.with_backend(gpu)(**args, offset_provider=grid.connectivities)
        tb.assert_equals_references(fields, npz, meta)

    # Fields on the device (as CuPy's are: an array with __cuda_array_interface__ and a
    # stream): the call returns once enqueued; wait() waits for it.
    program, npz, meta = tb.corpus("apply_nabla2_to_w")
    args, fields = tb.gt4py_arguments(program, npz, backend=gpu)
    prog = program.with_backend(gpu)
    prog(**args, offset_provider=grid.connectivities)
    (decorated,) = tb.compiled_variants(prog)

    class Dev:
        def __init__(self, a):
            self.ptr = _sdflow._device_alloc(a.nbytes)
            self.shape, self.dtype = a.shape, a.dtype
            self.view()[...] = a
            self.__cuda_array_interface__ = dict(
                shape=a.shape, typestr=a.dtype.str, data=(self.ptr, False),
                strides=None, version=3, stream=7)

        def view(self):
            # Memory of the emulated device is host memory.
            buf = (ctypes.c_byte * (int(np.prod(self.shape)) * self.dtype.itemsize)).from_address(self.ptr)
            return np.frombuffer(buf, dtype=self.dtype).reshape(self.shape)

    def on_device(f):
        return types.SimpleNamespace(ndarray=Dev(f.asnumpy()), domain=f.domain)

    args, fields = tb.gt4py_arguments(program, npz)
    dev = {k: on_device(v) if k in fields else v for k, v in args.items()}
    tables = {k: types.SimpleNamespace(ndarray=Dev(v.asnumpy())) for k, v in grid.connectivities.items()}
    positional = [dev[str(p.id)] for p in program.past_stage.past_node.params]
    assert decorated(*positional, offset_provider=tables) is None
    assert len(decorated._pending) == 1
    decorated.wait()
    assert decorated._pending == []
    got = dev["w"].ndarray.view()
    assert np.array_equal(got, npz["out__gtfn__w"]), np.abs(got - npz["out__gtfn__w"]).max()

    # A neighbour-table entry out of range fails on the device. Nothing waits for it:
    # once the call is done, its failure is read from the flags it left on the host, and
    # the next call raises it (the finished call is not waited for).
    bad = {k: types.SimpleNamespace(ndarray=Dev(v.asnumpy())) for k, v in grid.connectivities.items()}
    bad["C2E2CO"].ndarray.view()[3, 1] = 10**6
    decorated(*positional, offset_provider=bad)
    (failing,) = decorated._pending
    assert failing.done and failing.failed
    try:
        decorated(*positional, offset_provider=tables)
    except sdflow.CallError as e:
        assert "index 1000000 out of bounds for dimension 0 of 'z_nabla2_c'" in str(e), str(e)
    else:
        raise AssertionError("the failure was not raised")
    # Raised and cleared: the next call and its wait succeed.
    decorated(*positional, offset_provider=tables)
    decorated.wait()

    # A step of two programs on device fields composed into one program (orchestrate),
    # z_nabla2_c a scratch field: bit for bit the step run program by program.
    p1, npz1, _ = tb.corpus("calculate_nabla2_for_w")
    p2, npz2, _ = tb.corpus("apply_nabla2_to_w")
    q1, q2 = p1.with_backend(gpu), p2.with_backend(gpu)
    a1, _ = tb.gt4py_arguments(p1, npz1, backend=gpu)
    a2, _ = tb.gt4py_arguments(p2, npz2, backend=gpu)
    q1(**a1, offset_provider=grid.connectivities)
    q2(**a2, offset_provider=grid.connectivities)
    (d1,) = tb.compiled_variants(q1)
    (d2,) = tb.compiled_variants(q2)

    def device_args(program, a, fields):
        # The two programs share their fields of one name, as a granule's calls do.
        out = []
        for prm in program.past_stage.past_node.params:
            v = a[str(prm.id)]
            if hasattr(v, "ndarray"):
                v = fields.setdefault(str(prm.id), on_device(v))
            out.append(v)
        return out

    ref, comp = {}, {}
    r1, r2 = device_args(p1, a1, ref), device_args(p2, a2, ref)
    c1, c2 = device_args(p1, a1, comp), device_args(p2, a2, comp)
    k = [str(prm.id) for prm in p2.past_stage.past_node.params].index("diff_multfac_w")

    def step(x1, x2, factor):
        d1(*x1, offset_provider=tables)
        d2(*x2[:k], gtx.float64(factor), *x2[k + 1:], offset_provider=tables)

    orchestrated = sdflow.gt4py.orchestrate(step, scratch=[comp["z_nabla2_c"]])
    for i in range(4):
        step(r1, r2, 0.1 * (i + 1))
        orchestrated(c1, c2, 0.1 * (i + 1))
        assert orchestrated.why_not is None, orchestrated.why_not
        assert orchestrated.steps_composed == i  # the first call records, program by program
    d1.wait()
    d2.wait()
    orchestrated.wait()
    assert orchestrated.composed.compiled.backend == "cuda"
    assert orchestrated.composed.scratch == ["z_nabla2_c"]
    got, want = comp["w"].ndarray.view(), ref["w"].ndarray.view()
    assert np.array_equal(got, want), np.abs(got - want).max()
    assert not np.array_equal(want, npz2["in__w"])

    # Replayed: the same arguments run the composed step without calling the function.
    replayed = sdflow.gt4py.orchestrate(step, scratch=[comp["z_nabla2_c"]], replay=True)
    for i in range(3):
        step(r1, r2, 0.5)
        replayed(c1, c2, 0.5)
    replayed.wait()
    d1.wait()
    d2.wait()
    assert (replayed.steps_composed, replayed.steps_replayed) == (2, 2)
    got, want = comp["w"].ndarray.view(), ref["w"].ndarray.view()
    assert np.array_equal(got, want), np.abs(got - want).max()

    # Host fields do not compose on the GPU backend: the step runs program by program.
    h = sdflow.gt4py.orchestrate(lambda: q1(**a1, offset_provider=grid.connectivities), name="host")
    h()
    assert h.composed is None
    assert h.why_not.endswith("is not a device array (a step on the GPU backend composes device arrays)"), h.why_not
    print("OK")


if __name__ == "__main__":
    main()
'''


def test_the_gpu_backend_runs_on_the_emulated_device(tmp_path):
    script = tmp_path / "emulated.py"
    script.write_text(EMULATED)
    env = dict(os.environ, SDFLOW_CUDA_DEVICE="emulated")
    r = subprocess.run(
        [sys.executable, "-W", "ignore", str(script), str(pathlib.Path(__file__).parent)],
        env=env, capture_output=True, text=True, timeout=900,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().splitlines()[-1] == "OK", r.stdout + r.stderr


# --- layout ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "backend, unit, other",
    [("cpu", "K", "horizontal_first"), ("cpu_horizontal_first", "Edge", "row_major")],
)
def test_the_program_is_specialized_for_the_allocators_layout_and_takes_others_too(grid, backend, unit, other):
    # `sdflow.gt4py.cpu` allocates row-major fields (the levels of an edge side by side),
    # `cpu_horizontal_first` as GT4Py's standard allocator does (the edges side by side):
    # each compiles its programs with those strides static. Fields laid out otherwise
    # run the program compiled for any layout.
    backend = getattr(sdflow.gt4py, backend)
    program, npz, meta = corpus("apply_diffusion_to_vn")
    args, fields = gt4py_arguments(program, npz, backend)
    vn = fields["vn"].ndarray
    assert vn.strides[list(fields["vn"].domain.dims).index(getattr(dims, f"{unit}Dim"))] == 8
    prog = program.with_backend(backend)
    prog(**args, offset_provider=grid.connectivities)
    (decorated,) = compiled_variants(prog)
    # A static stride is no argument any more (the lowering declares every one).
    static, runtime = (f"__vn_{unit}_stride", "__vn_Edge_stride" if unit == "K" else "__vn_K_stride")
    assert static not in decorated.program.arguments
    assert runtime in decorated.program.arguments
    # One-dimensional fields' strides are static too (both layouts: contiguous).
    assert "__area_edge_Edge_stride" not in decorated.program.arguments
    assert decorated._generic is None
    assert_equals_references(fields, npz, meta)

    other_backend = sdflow.gt4py.make_backend("cpu", layout=other)
    args2, fields2 = gt4py_arguments(program, npz, other_backend)
    assert fields2["vn"].ndarray.strides != vn.strides
    prog(**args2, offset_provider=grid.connectivities)
    assert decorated._generic is not None
    assert_equals_references(fields2, npz, meta)


def test_the_backends_build_in_gt4pys_worker_processes():
    # GT4Py ships the executor to its compilation workers by pickling it; one that does
    # not pickle is built in the calling thread, one program at a time.
    import pickle

    for b in (sdflow.gt4py.cpu, sdflow.gt4py.cpu_horizontal_first):
        again = pickle.loads(pickle.dumps(b.executor))
        assert again.layout_mapper is b.executor.layout_mapper
    with pytest.raises(sdflow.SdflowError, match="layout 'column': expected one of row_major, horizontal_first"):
        sdflow.gt4py.make_backend("cpu", layout="column")


# --- a step as one program (orchestrate) -------------------------------------------------------


def two_program_step(backend):
    """calculate_nabla2_for_w then apply_nabla2_to_w on shared fields (z_nabla2_c flows
    from the first to the second), as a granule calls them."""
    p1, npz1, _ = corpus("calculate_nabla2_for_w")
    p2, npz2, _ = corpus("apply_nabla2_to_w")
    a1, _ = gt4py_arguments(p1, npz1, backend)
    a2, _ = gt4py_arguments(p2, npz2, backend)
    for shared in ("z_nabla2_c", "w", "geofac_n2s"):
        a2[shared] = a1[shared]
    return p1.with_backend(backend), p2.with_backend(backend), a1, a2


def test_an_orchestrated_step_equals_the_program_by_program_step(grid):
    conn = grid.connectivities

    def step(q1, q2, a1, a2, factor):
        q1(**a1, offset_provider=conn)
        q2(**{**a2, "diff_multfac_w": gtx.float64(factor)}, offset_provider=conn)

    e1, e2, r1, r2 = two_program_step(None)
    s1, s2, a1, a2 = two_program_step(sdflow.gt4py.cpu)
    orchestrated = sdflow.gt4py.orchestrate(step)
    for k in range(4):
        step(e1, e2, r1, r2, 0.1 * (k + 1))  # GT4Py's embedded backend, program by program
        orchestrated(s1, s2, a1, a2, 0.1 * (k + 1))
        assert orchestrated.why_not is None
        assert orchestrated.steps_composed == k  # the first call records, program by program
        for f in ("w", "z_nabla2_c"):
            np.testing.assert_allclose(a2[f].asnumpy(), r2[f].asnumpy(), rtol=1e-14, atol=0)
    # One program: the two callees inlined and fused (GT4Py lowers them to 14 maps).
    optimized, report = orchestrated.composed.program.optimize()
    assert optimized.stats()["nested"] == 0 and optimized.stats()["maps"] == 2, optimized.stats()
    assert "nested_inlined=2" in str(report)

    # Another field: that call runs program by program and is composed too.
    first = orchestrated.composed
    z0, zr0 = a1["z_nabla2_c"], r1["z_nabla2_c"]
    z = gtx.as_field(z0.domain.dims, np.zeros(z0.shape), allocator=sdflow.gt4py.cpu)
    zr = gtx.as_field(z.domain.dims, np.zeros(z.shape))
    a1["z_nabla2_c"] = a2["z_nabla2_c"] = z
    r1["z_nabla2_c"] = r2["z_nabla2_c"] = zr
    for k in range(2):
        step(e1, e2, r1, r2, 0.5)
        orchestrated(s1, s2, a1, a2, 0.5)
        assert orchestrated.steps_composed == 3 + k
        np.testing.assert_allclose(a2["w"].asnumpy(), r2["w"].asnumpy(), rtol=1e-14, atol=0)
    # Both are kept: steps alternating between the two fields (a model swapping two
    # states) each run composed.
    second = orchestrated.composed
    assert second is not first
    for k in range(4):
        zk, zrk = (z0, zr0) if k % 2 == 0 else (z, zr)
        a1["z_nabla2_c"] = a2["z_nabla2_c"] = zk
        r1["z_nabla2_c"] = r2["z_nabla2_c"] = zrk
        step(e1, e2, r1, r2, 0.2)
        orchestrated(s1, s2, a1, a2, 0.2)
        assert orchestrated.steps_composed == 5 + k
        assert orchestrated.composed is (first if k % 2 == 0 else second)
        np.testing.assert_allclose(a2["w"].asnumpy(), r2["w"].asnumpy(), rtol=1e-14, atol=0)
    assert len(orchestrated._steps) == 2


def test_a_replayed_step_runs_the_composed_program_without_calling_the_function(grid):
    conn = grid.connectivities

    def step(q1, q2, a1, a2, factor):
        q1(**a1, offset_provider=conn)
        q2(**{**a2, "diff_multfac_w": gtx.float64(factor)}, offset_provider=conn)
        return "done"

    calls = []

    def counted(*args):
        calls.append(args[-1])
        return step(*args)

    e1, e2, r1, r2 = two_program_step(None)
    s1, s2, a1, a2 = two_program_step(sdflow.gt4py.cpu)
    replayed = sdflow.gt4py.orchestrate(counted, replay=True)
    for factor in (0.1, 0.1, 0.1, 0.3, 0.3, 0.1):
        step(e1, e2, r1, r2, factor)  # GT4Py's embedded backend
        assert replayed(s1, s2, a1, a2, factor) == "done"
        np.testing.assert_allclose(a2["w"].asnumpy(), r2["w"].asnumpy(), rtol=1e-14, atol=0)
    # The function ran to record the first step and whenever an argument changed (the
    # float 0.3, then 0.1 again); the other three calls were replays.
    assert calls == [0.1, 0.3, 0.1]
    assert (replayed.steps_composed, replayed.steps_replayed) == (5, 3)
    # Another field object: recorded, and run program by program (the step differs).
    z = gtx.as_field(a1["z_nabla2_c"].domain.dims, np.zeros(a1["z_nabla2_c"].shape), allocator=sdflow.gt4py.cpu)
    zr = gtx.as_field(z.domain.dims, np.zeros(z.shape))
    a1, a2 = {**a1, "z_nabla2_c": z}, {**a2, "z_nabla2_c": z}
    r1, r2 = {**r1, "z_nabla2_c": zr}, {**r2, "z_nabla2_c": zr}
    step(e1, e2, r1, r2, 0.1)
    replayed(s1, s2, a1, a2, 0.1)
    np.testing.assert_allclose(a2["w"].asnumpy(), r2["w"].asnumpy(), rtol=1e-14, atol=0)
    assert calls == [0.1, 0.3, 0.1, 0.1] and replayed.steps_composed == 5


def test_a_step_that_cannot_be_composed_says_why_and_steps_do_not_nest(grid):
    conn = grid.connectivities
    s1, s2, a1, a2 = two_program_step(sdflow.gt4py.cpu)
    orchestrated = sdflow.gt4py.orchestrate(lambda: None, name="empty")
    orchestrated()
    assert orchestrated.composed is None
    assert orchestrated.why_not == "the step called no sdflow program"

    def step():
        s1(**a1, offset_provider=conn)
        s2(**a2, offset_provider=conn)

    with pytest.raises(TypeError, match="step 'step': scratch must be fields, got a int"):
        sdflow.gt4py.orchestrate(step, scratch=[3])

    inner = sdflow.gt4py.orchestrate(step)
    with pytest.raises(sdflow.SdflowError, match="step 'step': orchestrated steps do not nest"):
        sdflow.gt4py.orchestrate(lambda: inner())()


def test_a_program_whose_strides_contradict_the_layout_is_built_for_any_layout(grid):
    # ICON4Py's `copy_field` (GT4Py lowers the copy with the output's strides declared as
    # the input's): no layout specialization applies; the program takes any layout.
    from icon4py.model.atmosphere.diffusion.diffusion_utils import copy_field

    for backend in (sdflow.gt4py.cpu, sdflow.gt4py.cpu_horizontal_first):
        src = np.random.default_rng(3).random((18, 10))
        old = gtx.as_field((dims.CellDim, dims.KDim), src, allocator=backend)
        new = gtx.as_field((dims.CellDim, dims.KDim), np.zeros((18, 10)), allocator=backend)
        copy_field.with_backend(backend)(old, new, offset_provider={})
        assert np.array_equal(new.asnumpy(), src)


def test_sdflows_errors_cross_process_boundaries():
    # GT4Py's build workers send a failed build's exception back pickled.
    import pickle

    for cls in (sdflow.SdflowError, sdflow.ValidationError, sdflow.CallError):
        e = pickle.loads(pickle.dumps(cls("program 'p': what went wrong")))
        assert type(e) is cls and str(e) == "program 'p': what went wrong"


# --- vertical scans ----------------------------------------------------------------------------
# GT4Py lowers a `scan_operator` to a map over the horizontal dimension calling, at every
# point, a nested SDFG that loops over the levels and carries its state: sdflow bounds
# the loop's levels like a map's range (the callee skips its checks) and passes the
# point's columns in place.


@gtx.scan_operator(axis=dims.KDim, forward=True, init=0.0)
def _recurrence(state: float, a: float, b: float) -> float:
    return state * b + a


@gtx.scan_operator(axis=dims.KDim, forward=True, init=(0.0, 0.0))
def _thomas_forward(
    state: tuple[float, float], a: float, b: float, c: float, d: float
) -> tuple[float, float]:
    cp, dp = state
    denominator = b - a * cp
    return c / denominator, (d - a * dp) / denominator


@gtx.scan_operator(axis=dims.KDim, forward=False, init=0.0)
def _thomas_backward(state: float, cp: float, dp: float) -> float:
    return dp - cp * state


@gtx.field_operator
def _tridiagonal(
    a: gtx.Field[[dims.CellDim, dims.KDim], float],
    b: gtx.Field[[dims.CellDim, dims.KDim], float],
    c: gtx.Field[[dims.CellDim, dims.KDim], float],
    d: gtx.Field[[dims.CellDim, dims.KDim], float],
) -> gtx.Field[[dims.CellDim, dims.KDim], float]:
    cp, dp = _thomas_forward(a, b, c, d)
    return _thomas_backward(cp, dp)


@gtx.program
def _recurrence_program(
    a: gtx.Field[[dims.CellDim, dims.KDim], float],
    b: gtx.Field[[dims.CellDim, dims.KDim], float],
    out: gtx.Field[[dims.CellDim, dims.KDim], float],
):
    _recurrence(a, b, out=out)


@gtx.program
def _tridiagonal_program(
    a: gtx.Field[[dims.CellDim, dims.KDim], float],
    b: gtx.Field[[dims.CellDim, dims.KDim], float],
    c: gtx.Field[[dims.CellDim, dims.KDim], float],
    d: gtx.Field[[dims.CellDim, dims.KDim], float],
    x: gtx.Field[[dims.CellDim, dims.KDim], float],
):
    _tridiagonal(a, b, c, d, out=x)


@pytest.mark.parametrize("backend", ["cpu", "cpu_horizontal_first"])
def test_vertical_scans_equal_gt4pys_embedded_results(backend):
    # A scan carrying one value upwards, and a tridiagonal solve (ICON's vertical implicit
    # solver's shape: a sweep upwards carrying two values, then one downwards), on 50 cells
    # of 10 levels: bit for bit the embedded backend's (gtfn's are the same).
    be = getattr(sdflow.gt4py, backend)
    rng = np.random.default_rng(11)
    n, k = 50, 10
    a, b, c, d = (rng.uniform(0.5, 1.5, (n, k)) for _ in range(4))
    b = b + 3.0

    def run(backend_):
        f = lambda v: gtx.as_field((dims.CellDim, dims.KDim), v, allocator=backend_)  # noqa: E731
        out, x = f(np.zeros((n, k))), f(np.zeros((n, k)))
        _recurrence_program.with_backend(backend_)(f(a), f(b * 0.5), out, offset_provider={})
        _tridiagonal_program.with_backend(backend_)(f(a), f(b), f(c), f(d), x, offset_provider={})
        return out.asnumpy(), x.asnumpy()

    want = run(None)
    got = run(be)
    for g, w in zip(got, want):
        assert np.array_equal(g, w), np.abs(g - w).max()
