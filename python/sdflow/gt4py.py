"""GT4Py backends that compile with sdflow.

    >>> import sdflow.gt4py
    >>> prog = my_program.with_backend(sdflow.gt4py.cpu)
    >>> prog(a, b, out=c, offset_provider=grid.connectivities)

A GT4Py program goes through GT4Py's own front end and its GTIR → SDFG lowering (the
translation step of GT4Py's DaCe workflow, without DaCe's optimizer, instrumentation or
compiler); sdflow optimizes the SDFG, builds it into its persistent, multi-process build
cache and calls it. How GT4Py's arguments reach the compiled program (fields with their
domains, tuples of fields, neighbour tables, scalars) is worked out once per compiled
variant, not per call. ``docs/gt4py.md`` in the repository has the whole story.

Needs GT4Py 1.2.x (``gt4py.next``) and DaCe 2.0 (the lowering builds DaCe SDFG objects);
importing ``sdflow`` alone imports neither.
"""

from __future__ import annotations

import dataclasses
import json
import operator
import pathlib
import threading
from typing import Any, Optional, Sequence

import dace
import numpy as np
from gt4py._core import definitions as core_defs, filecache
from gt4py.next import backend as gtx_backend
from gt4py.next import custom_layout_allocators as gtx_allocators
from gt4py.next.otf import stages, workflow
from gt4py.next.program_processors.runners.dace import sdfg_args as gtx_dace_args
from gt4py.next.program_processors.runners.dace.workflow.translation import DaCeTranslator
from gt4py.next.type_system import type_specifications as ts

from . import CallError, SdflowError, cache_dir, compose, load

__all__ = [
    "Orchestrated",
    "SdflowArtifact",
    "SdflowGT4PyProgram",
    "SdflowWorkflow",
    "cpu",
    "cpu_horizontal_first",
    "gpu",
    "row_major_layout_mapper",
    "make_backend",
    "orchestrate",
]

# The calls of sdflow programs made by the step being recorded on this thread
# (`orchestrate`), and whether they are only recorded (True) or also run.
_recording = threading.local()
# How many threads record a step now (a call checks this first: one global read).
_recorders = 0
_recorders_lock = threading.Lock()


@dataclasses.dataclass(frozen=True)
class Translation:
    """GT4Py's translation step as a plain GTIR → SDFG lowering: for the CPU (the GPU
    schedule is sdflow's), without DaCe's auto-optimizer, without stride or origin
    constants (sdflow specializes what it can prove), without the timing
    instrumentation and without the end-of-call synchronization. DaCe's source-line
    records are off while it runs: they cost half of the lowering's time (a Python stack
    inspection per node) and sdflow does not read them."""

    translator: DaCeTranslator = dataclasses.field(
        default_factory=lambda: DaCeTranslator(
            device_type=core_defs.DeviceType.CPU,
            auto_optimize=False,
            auto_optimize_args=None,
            async_sdfg_call=False,
            unstructured_horizontal_has_unit_stride=False,
            use_metrics=False,
        )
    )

    def __call__(self, inp: Any) -> stages.ProgramSource:
        with dace.config.temporary_config():
            dace.Config.set("compiler", "lineinfo", value="none")
            return self.translator(inp)


def _cached(translation: Translation) -> Any:
    """The translation, kept in sdflow's cache directory (``gt4py-translation``) by the
    fingerprint of the GTIR program and its compile-time arguments, as GT4Py's DaCe
    backend keeps its own: a fresh process with a warm cache skips GT4Py's lowering."""
    return workflow.CachedStep.persistent(
        translation,
        input_fingerprinter=stages.compilable_program_fingerprinter,
        cache=filecache.FileCache(pathlib.Path(cache_dir()) / "gt4py-translation"),
    )


# --- How GT4Py's canonical arguments map onto the SDFG's ------------------------------------


@dataclasses.dataclass(frozen=True)
class _Field:
    """A field parameter (or one element of a tuple parameter): the SDFG array of that
    name, and for each dimension the domain's start and stop symbols the SDFG reads."""

    array: str
    dims: tuple[Any, ...]
    ranges: tuple[tuple[int, Optional[str], Optional[str]], ...]


@dataclasses.dataclass(frozen=True)
class _Scalar:
    """A scalar parameter, or a zero-dimensional field passed as its value."""

    name: str
    field: bool
    float: bool


@dataclasses.dataclass(frozen=True)
class _Tuple:
    elements: tuple[Any, ...]


@dataclasses.dataclass(frozen=True)
class _Skip:
    """A parameter the SDFG does not take: a static argument compiled in, or one the
    program never reads."""


def _binding(name: str, type_: ts.TypeSpec, arguments: set[str], symbols: set[str]) -> Any:
    if isinstance(type_, ts.TupleType):
        return _Tuple(
            tuple(
                _binding(f"{name}_{i}", t, arguments, symbols) for i, t in enumerate(type_.types)
            )
        )
    if isinstance(type_, ts.FieldType):
        if len(type_.dims) == 0:
            return _Scalar(name, True, False) if name in arguments else _Skip()
        if name not in arguments:
            return _Skip()
        ranges = []
        for i, dim in enumerate(type_.dims):
            start = gtx_dace_args.range_start_symbol(name, dim).name
            stop = gtx_dace_args.range_stop_symbol(name, dim).name
            ranges.append(
                (i, start if start in symbols else None, stop if stop in symbols else None)
            )
        return _Field(name, tuple(type_.dims), tuple(r for r in ranges if r[1] or r[2]))
    if isinstance(type_, ts.ScalarType):
        floating = type_.kind in (ts.ScalarKind.FLOAT32, ts.ScalarKind.FLOAT64)
        return _Scalar(name, False, floating) if name in arguments else _Skip()
    raise SdflowError(f"parameter '{name}': type {type_} is not supported by sdflow's GT4Py backend")


def _describe(arg: Any) -> str:
    t = type(arg).__name__
    dims = getattr(getattr(arg, "domain", None), "dims", None)
    if dims is not None:
        return f"a field over ({', '.join(d.value for d in dims)})"
    return f"a {t}"


def _put(kw: dict, binding: Any, arg: Any, param: str) -> None:
    """Adds what one argument gives to the call's keyword arguments."""
    if isinstance(binding, _Field):
        try:
            kw[binding.array] = arg.ndarray
            domain = arg.domain
        except AttributeError:
            raise CallError(f"argument '{param}': expected a field, got {_describe(arg)}") from None
        if domain.dims != binding.dims:
            dims = ", ".join(d.value for d in binding.dims)
            raise CallError(
                f"argument '{param}': expected a field over ({dims}), got {_describe(arg)}"
            )
        ranges = domain.ranges
        for i, start, stop in binding.ranges:
            r = ranges[i]
            if start:
                kw[start] = r.start
            if stop:
                kw[stop] = r.stop
    elif isinstance(binding, _Scalar):
        if binding.field:
            kw[binding.name] = arg.as_scalar() if hasattr(arg, "as_scalar") else arg
        else:
            kw[binding.name] = arg
    elif isinstance(binding, _Tuple):
        if not isinstance(arg, tuple) or len(arg) != len(binding.elements):
            n = len(binding.elements)
            raise CallError(f"argument '{param}': expected a tuple of {n}, got {_describe(arg)}")
        for i, (b, a) in enumerate(zip(binding.elements, arg)):
            _put(kw, b, a, f"{param}[{i}]")


def _tuple_getter(positions: Sequence[Any]) -> Any:
    """A function of the call's arguments giving the values at ``positions`` (a parameter
    index, or a path into a tuple parameter) as a tuple, at C speed where it can."""
    if not positions:
        return lambda args: ()
    if all(isinstance(p, int) for p in positions):
        if len(positions) == 1:
            (i,) = positions
            return lambda args: (args[i],)
        return operator.itemgetter(*positions)

    def get(args: Sequence[Any]) -> tuple[Any, ...]:
        out = []
        for p in positions:
            v = args[p[0]]
            for j in p[1:]:
                v = v[j]
            out.append(v)
        return tuple(out)

    return get


class _Reuse:
    """What decides whether a call may reuse bound arguments of an earlier call: the
    same field objects (GT4Py fields are immutable: the same object has the same buffer
    and domain), the same integer and boolean scalars, the same neighbour tables. Float
    scalars change freely: they are set on the bound program at each call."""

    def __init__(self, parameters: Sequence[tuple[str, Any]], tables: Sequence[tuple[str, str]]):
        fields: list[Any] = []
        ints: list[Any] = []
        floats: list[tuple[str, Any]] = []

        def walk(binding: Any, path: tuple[int, ...]) -> bool:
            pos = path[0] if len(path) == 1 else path
            if isinstance(binding, _Tuple):
                return all(walk(b, (*path, j)) for j, b in enumerate(binding.elements))
            if isinstance(binding, _Field):
                fields.append(pos)
            elif isinstance(binding, _Scalar):
                if binding.field:
                    return False  # a zero-dimensional field's value is read at each call
                if binding.float:
                    floats.append((binding.name, pos))
                else:
                    ints.append(pos)
            return True

        self.possible = all(walk(b, (i,)) for i, (_, b) in enumerate(parameters))
        self.fields = _tuple_getter(fields)
        self.ints = _tuple_getter(ints)
        self.float_names = tuple(str(n) for n, _ in floats)
        self.floats = _tuple_getter([p for _, p in floats])
        self.offsets = tuple(o for _, o in tables)

    def tables(self, offset_provider: Any) -> Optional[tuple[Any, ...]]:
        try:
            return tuple(offset_provider[o] for o in self.offsets)
        except (KeyError, TypeError):
            return None


#: How many bindings (sets of arguments) a program keeps for reuse.
_KEPT_BINDINGS = 4


@dataclasses.dataclass(eq=False)
class _Binding:
    """One set of arguments checked and bound: the field objects, integer scalars and
    tables it was bound for (compared by identity), the float scalars last set, the
    bound program (which keeps the arrays alive)."""

    fields: tuple[Any, ...]
    ints: tuple[Any, ...]
    provider: Any
    tables: Optional[tuple[Any, ...]]
    floats: tuple[Any, ...]
    bound: Any


class _Pending:
    """The enqueued device calls of one program (their completions), kept until they are
    known to be done, so that a failure of the program on the device (an index-table
    entry out of range, say) is raised: by the first call after it finished, or by
    :meth:`wait`. Nothing here waits for the device: a finished call's error flags are
    read from the copy the call left on the host (``Completion.failed``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: list[Any] = []

    def track(self, done: Any) -> None:
        """Raises the error of the first finished call that failed; then keeps ``done``."""
        with self._lock:
            pending, self.calls = self.calls, []
        finished = 0
        try:
            # In enqueue order, which is the order they finish in (one stream): the first
            # that is not done ends the look, so calls enqueued far ahead of the device
            # cost one query each, not one per call in flight.
            for p in pending:
                if not p.done:
                    break
                finished += 1
                if p.failed:
                    p.wait()  # raises the program's error
                # else: finished without an error; its arrays are released
        finally:
            with self._lock:
                self.calls[:0] = pending[finished:]
                self.calls.append(done)

    def wait(self) -> None:
        """Waits for the enqueued calls; raises the first failure."""
        with self._lock:
            pending, self.calls = self.calls, []
        for p in pending:
            p.wait()


class SdflowGT4PyProgram:
    """A compiled sdflow program called with GT4Py's canonical arguments (what GT4Py's
    compiled-program pool passes: the program's parameters in order, the
    ``offset_provider``, and ``out`` for a field operator).

    How each parameter maps onto the SDFG — which array, which domain symbols, which
    tuple element, which neighbour tables — was decided when the program was loaded. A
    call with the same field objects, integer scalars and neighbour tables as the previous
    one (a model's time loop) reuses the arguments bound then and passes only the float
    scalars; any other call checks and binds its arguments anew.
    """

    def __init__(
        self,
        program: Any,
        compiled: Any,
        parameters: Sequence[tuple[str, Any]],
        tables: Sequence[tuple[str, str]],
        generic: Any = None,
    ) -> None:
        self.program = program
        """The lowered program (:class:`sdflow.Program`): ``show()`` prints its C, its plan,
        its optimized SDFG."""
        self._compiled = compiled
        self.name = compiled.name
        self._parameters = tuple(parameters)
        self._arity = len(self._parameters)
        self._tables = tuple(tables)
        reuse = _Reuse(self._parameters, self._tables)
        # Device calls go through the device-array path (enqueued, not bound).
        self._reuse = reuse if reuse.possible and compiled.backend != "cuda" else None
        # The latest bindings, most recent first (a step may call a program on several
        # sets of fields: ICON4Py's diffusion interpolates two fields with one program).
        self._bindings: list[_Binding] = []
        self._lock = threading.Lock()
        self._enqueued = _Pending()
        # The program for fields laid out otherwise than the allocator lays them out
        # (made with another allocator, or views): built when first needed.
        self._make_generic = generic
        self._generic: Any = None
        self._lock_generic = threading.Lock()

    @property
    def compiled(self) -> Any:
        """The underlying :class:`sdflow.CompiledProgram`."""
        return self._compiled

    def arguments(self, *args: Any, offset_provider: Any, out: Any = None) -> dict[str, Any]:
        """The keyword arguments of the compiled program for one GT4Py call."""
        if out is not None:
            args = (*args, out)
        if len(args) != len(self._parameters):
            raise CallError(
                f"program '{self.name}': {len(args)} argument(s) given, the program takes "
                f"{len(self._parameters)} ({', '.join(n for n, _ in self._parameters)})"
            )
        kw: dict[str, Any] = {}
        for (param, binding), arg in zip(self._parameters, args):
            _put(kw, binding, arg, param)
        for array, offset in self._tables:
            try:
                table = offset_provider[offset]
            except (KeyError, TypeError):
                have = ", ".join(sorted(offset_provider)) if hasattr(offset_provider, "keys") else "none"
                raise CallError(
                    f"program '{self.name}': the offset provider has no connectivity "
                    f"'{offset}', which the program reads (it has: {have})"
                ) from None
            try:
                kw[array] = table.ndarray
            except AttributeError:
                raise CallError(
                    f"program '{self.name}': offset '{offset}' is {_describe(table)}, "
                    "the program needs a neighbour table"
                ) from None
        return kw

    def __call__(self, *args: Any, offset_provider: Any, out: Any = None) -> None:
        if out is not None:
            args = (*args, out)
        if _recorders:  # some thread records a step: is it this one?
            recording = getattr(_recording, "calls", None)
            if recording is not None:
                recording.append((self, args, offset_provider))
                if _recording.deferred:
                    return
        self._run(args, offset_provider)

    def _run(self, args: Sequence[Any], offset_provider: Any) -> None:
        reuse = self._reuse
        if reuse is not None and len(args) == self._arity and self._lock.acquire(False):
            try:
                bindings = self._bindings
                if bindings:
                    fields, ints = reuse.fields(args), reuse.ints(args)
                    for i, b in enumerate(bindings):
                        if (
                            all(map(operator.is_, fields, b.fields))
                            and ints == b.ints
                            and (
                                offset_provider is b.provider
                                or (now := reuse.tables(offset_provider)) is not None
                                and all(map(operator.is_, now, b.tables))
                            )
                        ):
                            floats = reuse.floats(args)
                            if floats != b.floats:
                                b.bound(**dict(zip(reuse.float_names, floats)))
                                b.floats = floats
                            else:
                                b.bound()
                            if i:
                                bindings.insert(0, bindings.pop(i))
                            return
                self._bind(args, offset_provider)
            finally:
                self._lock.release()
            return
        # Another thread is calling this program (or the call cannot be reused): a call
        # that checks everything. A device call returns once its work is enqueued, ordered
        # on the arrays' stream; nothing here waits for it.
        kw = self.arguments(*args, offset_provider=offset_provider)
        try:
            done = self._compiled(**kw)
        except CallError as e:
            if not self._other_layout(e):
                raise
            done = self._generic_program()(**kw)
        if done is not None:
            self._enqueued.track(done)

    def _other_layout(self, e: CallError) -> bool:
        return self._make_generic is not None and "(its declared or specialized layout)" in str(e)

    def _generic_program(self) -> Any:
        with self._lock_generic:
            if self._generic is None:
                self._generic = self._make_generic()
            return self._generic

    def _bind(self, args: Sequence[Any], offset_provider: Any) -> None:
        """Checks and binds a call's arguments, calls, and keeps them for the next call."""
        reuse = self._reuse
        kw = self.arguments(*args, offset_provider=offset_provider)
        try:
            bound = self._compiled.bind(**kw)  # a failed bind keeps nothing
        except CallError as e:
            if not self._other_layout(e):
                raise
            bound = self._generic_program().bind(**kw)
        self._bindings.insert(
            0,
            _Binding(
                reuse.fields(args),
                reuse.ints(args),
                offset_provider,
                reuse.tables(offset_provider),
                reuse.floats(args),
                bound,
            ),
        )
        del self._bindings[_KEPT_BINDINGS:]
        bound()

    @property
    def _pending(self) -> list[Any]:
        """The completions of enqueued device calls not known to be done."""
        return self._enqueued.calls

    def wait(self) -> None:
        """Waits for this program's enqueued device calls; raises the first failure."""
        self._enqueued.wait()


# --- The workflow: translation, then sdflow's build ---------------------------------------


@dataclasses.dataclass(frozen=True)
class SdflowArtifact:
    """What a compilation produces: the lowered SDFG and how to build and call it.
    Picklable, so that GT4Py's process pool can build it in a worker; loading it builds
    the same program again, which the persistent build cache answers without compiling."""

    sdfg_json: str
    backend: str
    options: tuple[tuple[str, Any], ...]
    parameters: tuple[tuple[str, Any], ...]
    #: For each field the allocator lays out: (array, rank, the dimension it is contiguous in).
    layout: tuple[tuple[str, int, int], ...] = ()

    def program(self, layout: bool = True) -> Any:
        """The lowered program; with ``layout``, specialized for fields laid out as the
        backend's allocator lays them out (each field's stride in its contiguous
        dimension a static 1, the transients laid out alike: ``specialize_layout``)."""
        prog = load(self.sdfg_json)
        if layout and self.layout:
            arrays = {name: _laid_out(rank, unit) for name, rank, unit in self.layout}
            try:
                prog, _ = prog.specialize_layout(arrays=arrays)
            except SdflowError:
                # A program whose declared strides contradict the layout (GT4Py lowers a
                # field-to-field copy with the output's strides fixed): it is compiled
                # for any layout, as every call of it then is.
                pass
        return prog

    def compile(self, layout: bool = True) -> Any:
        options = dict(self.options) or None
        return self.program(layout).compile(self.backend, options=options)

    def load(self) -> SdflowGT4PyProgram:
        compiled = self.compile()
        prog = self.program()
        arguments = set(prog.arguments)
        symbols = set(prog.symbols)
        parameters = [
            (name, _binding(name, type_, arguments, symbols)) for name, type_ in self.parameters
        ]
        tables = []
        for a in prog.arguments:
            m = gtx_dace_args.CONNECTIVITY_INDENTIFIER_RE.match(a)
            if m is not None:
                tables.append((a, m[1]))
        generic = (lambda: self.compile(layout=False)) if self.layout else None
        return SdflowGT4PyProgram(prog, compiled, parameters, tables, generic)


def _laid_out(rank: int, unit: int) -> np.ndarray:
    """A small array of ``rank`` dimensions contiguous in dimension ``unit``."""
    return np.moveaxis(np.zeros((2,) * rank), rank - 1, unit)


def _layout(parameters: Sequence[tuple[str, Any]], mapper: Any) -> tuple[tuple[str, int, int], ...]:
    """For every field parameter (tuple elements included): the dimension the allocator's
    layout mapper makes contiguous. One-dimensional fields too: their stride is then a
    static 1 as well, which the CPU plan needs to know a gathering stencil's arrays are
    contiguous along its horizontal loop (`docs/backend-cpu.md`, *Strips*)."""
    if mapper is None:
        return ()
    out = []

    def walk(name: str, type_: Any) -> None:
        if isinstance(type_, ts.TupleType):
            for i, t in enumerate(type_.types):
                walk(f"{name}_{i}", t)
        elif isinstance(type_, ts.FieldType) and len(type_.dims) >= 1:
            layout = list(mapper(type_.dims))
            out.append((name, len(type_.dims), layout.index(max(layout))))

    for name, type_ in parameters:
        walk(name, type_)
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class SdflowWorkflow:
    """GT4Py's ``executor``: a compilable program (GTIR with its compile-time arguments)
    to an :class:`SdflowArtifact`, built."""

    translation: Any
    backend: str = "cpu"
    options: tuple[tuple[str, Any], ...] = ()
    #: The allocator's layout mapper (GT4Py's ``layout_mapper``: dimensions to a layout
    #: map whose largest entry is the contiguous dimension); the program is specialized
    #: for it. A module-level function, so that the workflow pickles for GT4Py's
    #: compilation workers.
    layout_mapper: Any = None

    def __call__(self, inp: Any) -> SdflowArtifact:
        source = self.translation(inp)
        text = source.source_code
        if not isinstance(text, str):
            text = json.dumps(text)
        parameters = tuple((p.name, p.type_) for p in source.entry_point.parameters)
        artifact = SdflowArtifact(
            sdfg_json=text,
            backend=self.backend,
            options=self.options,
            parameters=parameters,
            layout=_layout(parameters, self.layout_mapper),
        )
        artifact.compile()  # into the persistent cache, here (possibly a build worker)
        return artifact


def row_major_layout_mapper(dims: Sequence[Any]) -> tuple[int, ...]:
    """GT4Py layout map of row-major buffers: the dimensions in the order the field
    declares them, the last one contiguous (``(Cell, K)``: the levels of a cell side by
    side), as NumPy lays out arrays by default."""
    return tuple(range(len(dims)))


class RowMajorCPUFieldBufferAllocator(gtx_allocators.BaseFieldBufferAllocator):
    """GT4Py's CPU allocator with row-major buffers, rows unpadded."""

    def __init__(self) -> None:
        super().__init__(
            device_type=core_defs.DeviceType.CPU,
            array_utils=gtx_allocators.core_allocators.numpy_array_utils,
            layout_mapper=row_major_layout_mapper,
            # No padding: a row of 10 levels or of 3 neighbours padded to 64 bytes would
            # be a third to a half more memory to stream.
            byte_alignment=8,
        )


LAYOUTS = ("row_major", "horizontal_first")


def make_backend(
    device: str = "cpu",
    *,
    layout: Optional[str] = None,
    options: Optional[dict[str, Any]] = None,
    allocator: Any = None,
    name: Optional[str] = None,
) -> gtx_backend.Backend:
    """A GT4Py backend that compiles with sdflow.

    ``device``: ``"cpu"`` (C with OpenMP, NumPy fields) or ``"gpu"`` (CUDA, CuPy fields,
    calls that return once enqueued). ``layout``: how the backend's allocator lays out
    fields, and so what the programs are specialized for: ``"row_major"`` (the CPU's
    default: the last dimension contiguous, the levels of a column side by side) or
    ``"horizontal_first"`` (GT4Py's standard allocators, and the GPU's default: the
    horizontal dimension contiguous, as a Fortran model's ``(nproma, nlev)`` arrays).
    Fields laid out otherwise are taken too, by a program compiled for any layout.
    ``options``: sdflow's backend options (``docs/configuration.md``), e.g.
    ``{"threads": 8}``. ``allocator``: another allocator (``layout`` is then read off
    it); a host allocator with the ``gpu`` device runs on NumPy fields, copied to and
    from the device per call.
    """
    if layout is not None and layout not in LAYOUTS:
        raise SdflowError(f"layout '{layout}': expected one of {', '.join(LAYOUTS)}")
    if allocator is not None and layout is not None:
        raise SdflowError("give a layout or an allocator, not both")
    if device == "cpu":
        backend = "cpu"
        if allocator is None:
            if (layout or "row_major") == "row_major":
                allocator = RowMajorCPUFieldBufferAllocator()
            else:
                allocator = gtx_allocators.StandardCPUFieldBufferAllocator()
    elif device == "gpu":
        backend = "cuda"
        if layout == "row_major":
            raise SdflowError("the gpu device lays fields out horizontal_first")
        allocator = allocator or gtx_allocators.StandardGPUFieldBufferAllocator()
    else:
        raise SdflowError(f"device '{device}': expected 'cpu' or 'gpu'")
    opts = tuple(sorted((options or {}).items()))
    return gtx_backend.Backend(
        name=name or f"sdflow_{device}" + (f"_{layout}" if layout else ""),
        executor=SdflowWorkflow(
            translation=_cached(Translation()),
            backend=backend,
            options=opts,
            layout_mapper=(
                getattr(allocator, "layout_mapper", None)
                if getattr(allocator, "device_type", None) == core_defs.DeviceType.CPU
                else None
            ),
        ),
        allocator=allocator,
        transforms=gtx_backend.DEFAULT_TRANSFORMS,
    )


cpu = make_backend("cpu")
"""sdflow's CPU backend for GT4Py: C with OpenMP, row-major fields in host memory."""

cpu_horizontal_first = make_backend("cpu", layout="horizontal_first")
"""sdflow's CPU backend with GT4Py's standard CPU allocator (horizontal dimension
contiguous), the layout gtfn's and DaCe's CPU backends allocate."""


def __getattr__(attr: str) -> Any:
    # The GPU backend's allocator needs CuPy; it is made when first asked for.
    if attr == "gpu":
        value = make_backend("gpu")
        globals()["gpu"] = value
        return value
    raise AttributeError(f"module 'sdflow.gt4py' has no attribute '{attr}'")


# --- A model step as one program -------------------------------------------------------------


class _Unsupported(Exception):
    """A recorded step that cannot be composed into one program (the reason)."""


class _Composed:
    """A recorded step composed into one compiled program, bound to the step's arrays.

    The step's containers are the distinct buffers its calls pass (two fields over one
    buffer are one container); integer and boolean scalars and the fields' domains are
    compiled in as constants; each float scalar of each call is a symbol of the step,
    set when it changes. ``matches`` says whether a new recording is the same step: the
    same programs, the same field and table objects, the same integer scalars.

    On the CPU backend the step's arrays are bound once. On the GPU backend they are
    device arrays (``__cuda_array_interface__``: CuPy's), and each run enqueues the step
    on their stream and returns without waiting, as a program call does."""

    def __init__(
        self,
        name: str,
        calls: list,
        backend: str,
        options: Optional[dict],
        scratch: frozenset = frozenset(),
    ):
        self.signature = [self._signature(p, args, op) for p, args, op in calls]
        self.device = backend == "cuda"
        data: dict[tuple, tuple[str, Any]] = {}  # buffer key -> (container, ndarray)
        # The step's own containers (buffer keys in `scratch`): their extents and element
        # strides, constants of the step.
        own: dict[str, tuple[list[int], list[int]]] = {}
        names: set[str] = set()
        symbols: list[tuple[str, str]] = []
        self.float_symbols: list[str] = []
        composed_calls = []

        def container(arr: Any, hint: str) -> str:
            if self.device and not hasattr(arr, "__cuda_array_interface__"):
                raise _Unsupported(f"'{hint}' is not a device array (a step on the GPU backend composes device arrays)")
            if not self.device and not hasattr(arr, "__array_interface__"):
                raise _Unsupported(f"'{hint}' is not a host array (a step on the CPU backend composes host arrays)")
            key = _buffer_key(arr)
            if key not in data:
                n, k = hint, 1
                while n in names:
                    n, k = f"{hint}_{k}", k + 1
                names.add(n)
                data[key] = (n, arr)
                if key in scratch:
                    _, shape, strides, typestr = key
                    itemsize = int(typestr[2:])
                    own[n] = ([int(e) for e in shape], [int(s // itemsize) for s in strides])
            return data[key][0]

        for i, (prog, args, op) in enumerate(calls):
            sdfg_symbols = set(prog.program.symbols)
            bind: dict[str, str] = {}
            values: dict[str, Any] = {}
            containers: dict[str, tuple[str, tuple]] = {}  # callee array -> (step container, dim names)

            def put(binding: Any, arg: Any, param: str) -> None:
                if isinstance(binding, _Tuple):
                    for j, (b, a) in enumerate(zip(binding.elements, arg)):
                        put(b, a, f"{param}_{j}")
                elif isinstance(binding, _Field):
                    outer = container(arg.ndarray, binding.array)
                    bind[binding.array] = outer
                    containers[binding.array] = (outer, tuple(d.value for d in binding.dims))
                    for d, start, stop in binding.ranges:
                        r = arg.domain.ranges[d]
                        if start:
                            values[start] = int(r.start)
                        if stop:
                            values[stop] = int(r.stop)
                elif isinstance(binding, _Scalar):
                    if binding.field:
                        raise _Unsupported(f"call {i} ('{prog.name}'): zero-dimensional field '{param}'")
                    if binding.name not in sdfg_symbols:
                        raise _Unsupported(f"call {i} ('{prog.name}'): scalar '{param}' is a container")
                    if binding.float:
                        sym = f"{binding.name}__{i}"
                        symbols.append((sym, prog.program.symbols[binding.name]))
                        self.float_symbols.append(sym)
                        values[binding.name] = sym
                    else:
                        values[binding.name] = int(arg)

            for (param, binding), arg in zip(prog._parameters, args):
                put(binding, arg, param)
            for array, offset in prog._tables:
                outer = container(op[offset].ndarray, array)
                bind[array] = outer
                containers[array] = (outer, ("source", "neighbor"))
            # Extents and strides (GT4Py's `__<array>_<Dim>_size`, `…_stride`; a
            # table's dimensions are `source` and `neighbor`): the step's container's.
            extents = {
                f"__{array}_{dim}_{kind}": (
                    own[outer][kind == "stride"][d] if outer in own else f"__{outer}_{kind}_{d}"
                )
                for array, (outer, dims) in containers.items()
                for d, dim in enumerate(dims)
                for kind in ("size", "stride")
            }
            for sym in sorted(sdfg_symbols - set(values)):
                if sym not in extents:
                    raise _Unsupported(f"call {i} ('{prog.name}'): symbol '{sym}' has no value in the step")
                values[sym] = extents[sym]
            composed_calls.append((prog.program, bind, values))

        self.arrays = {n: arr for n, arr in data.values() if n not in own}
        self.scratch = sorted(str(n) for n in own)
        step = compose(
            name,
            [(n, _dtype_name(arr), len(_buffer_key(arr)[1])) for n, arr in data.values()],
            symbols,
            composed_calls,
            scratch=own,
        )
        self.program = step
        self.compiled = step.compile(backend, options=options)
        self.floats = tuple(self._floats(calls))
        # Device arrays go through the device-array path at each run (enqueued, not bound).
        self.bound = None if self.device else self.compiled.bind(**self.arrays, **dict(zip(self.float_symbols, self.floats)))

    @staticmethod
    def _signature(prog: Any, args: Sequence[Any], op: Any) -> tuple:
        reuse = _Reuse(prog._parameters, prog._tables)
        if not reuse.possible:
            raise _Unsupported(f"'{prog.name}' takes a zero-dimensional field")
        return (prog, reuse, reuse.fields(args), reuse.ints(args), reuse.tables(op))

    def _floats(self, calls: list) -> list[Any]:
        out: list[Any] = []
        for (prog, args, _), (_, reuse, *_rest) in zip(calls, self.signature):
            out.extend(reuse.floats(args))
        return out

    def matches(self, calls: list) -> bool:
        if len(calls) != len(self.signature):
            return False
        for (prog, args, op), (p, reuse, fields, ints, tables) in zip(calls, self.signature):
            if prog is not p or len(args) != len(prog._parameters):
                return False
            if not all(map(operator.is_, reuse.fields(args), fields)) or reuse.ints(args) != ints:
                return False
            now = reuse.tables(op)
            if now is None or not all(map(operator.is_, now, tables)):
                return False
        return True

    def run(self, calls: list) -> Any:
        """Runs the step with the float scalars of ``calls``; on the GPU backend, returns
        the enqueued call's completion."""
        return self.rerun(tuple(self._floats(calls)))

    def rerun(self, floats: Optional[tuple] = None) -> Any:
        """Runs the step with ``floats`` (None: those of the last run); on the GPU
        backend, returns the enqueued call's completion."""
        if floats is None:
            floats = self.floats
        if self.bound is None:
            self.floats = floats
            return self.compiled(**self.arrays, **dict(zip(self.float_symbols, floats)))
        if floats != self.floats:
            self.bound(**dict(zip(self.float_symbols, floats)))
            self.floats = floats
        else:
            self.bound()
        return None


def _buffer_key(arr: Any) -> tuple:
    """What identifies an array's elements: address, shape, strides (bytes), element type
    — of a host array (``__array_interface__``) or a device array
    (``__cuda_array_interface__``, whose strides may be left out for a dense array)."""
    ai = getattr(arr, "__cuda_array_interface__", None) or arr.__array_interface__
    shape, typestr = tuple(int(e) for e in ai["shape"]), ai["typestr"]
    strides = ai.get("strides")
    if strides is None:  # dense, row-major
        step, dense = int(typestr[2:]), []
        for e in reversed(shape):
            dense.append(step)
            step *= e
        strides = tuple(reversed(dense))
    return (ai["data"][0], shape, tuple(int(s) for s in strides), typestr)


def _dtype_name(arr: Any) -> str:
    names = {"f8": "f64", "f4": "f32", "i8": "i64", "i4": "i32", "b1": "bool"}
    typestr = _buffer_key(arr)[3]
    if typestr[1:] not in names:
        raise _Unsupported(f"arrays of element type '{typestr}' are not supported")
    return names[typestr[1:]]


# Composed steps an orchestrated function keeps (each holds a compiled program).
_KEPT_STEPS = 4


class Orchestrated:
    """A model step (a function that calls GT4Py programs on sdflow backends) run as one
    program. See :func:`orchestrate`."""

    def __init__(
        self,
        fn: Any,
        *,
        name: Optional[str] = None,
        options: Optional[dict] = None,
        scratch: Sequence[Any] = (),
        replay: bool = False,
    ):
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "step")
        self.options = options
        for f in scratch:
            nd = getattr(f, "ndarray", None)
            if not (hasattr(nd, "__array_interface__") or hasattr(nd, "__cuda_array_interface__")):
                raise TypeError(f"step '{self.name}': scratch must be fields, got {_describe(f)}")
        self.scratch = tuple(scratch)
        # The steps composed so far, the one run last first: a model that swaps two sets
        # of fields from step to step (the prognostic states `now` and `next`) runs two.
        self._steps: list[_Composed] = []
        self.replay = replay
        # With `replay`: the arguments and result of the last call that ran a composed
        # step, or recorded the step composed then.
        self._last: Optional[tuple] = None
        self.steps_replayed = 0
        """Calls that ran the composed step without calling the function (``replay``)."""
        self.why_not: Optional[str] = None
        """Why the last recorded step could not be composed (it then ran program by program)."""
        self.steps_composed = 0
        """Calls that ran as one program."""
        self._enqueued = _Pending()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if getattr(_recording, "calls", None) is not None:
            raise SdflowError(f"step '{self.name}': orchestrated steps do not nest")
        last = self._last
        if last is not None and _same_arguments(last[0], args) and _same_arguments(last[1], kwargs):
            done = self._steps[0].rerun()
            if done is not None:
                self._enqueued.track(done)
            self.steps_composed += 1
            self.steps_replayed += 1
            return last[2]
        self._last = None
        global _recorders
        deferred = bool(self._steps)
        calls: list = []
        _recording.calls, _recording.deferred = calls, deferred
        with _recorders_lock:
            _recorders += 1
        try:
            result = self.fn(*args, **kwargs)
        finally:
            _recording.calls = None
            with _recorders_lock:
                _recorders -= 1
        if deferred:
            for i, step in enumerate(self._steps):
                if step.matches(calls):
                    done = step.run(calls)
                    if done is not None:
                        self._enqueued.track(done)
                    if i:
                        self._steps.insert(0, self._steps.pop(i))
                    self.steps_composed += 1
                    if self.replay:
                        self._last = (args, kwargs, result)
                    return result
            # Another sequence (other fields, other integer values): program by program.
            for prog, a, op in calls:
                prog._run(a, op)
        if self._compose(calls) and self.replay:
            self._last = (args, kwargs, result)
        return result

    @property
    def composed(self) -> Optional[_Composed]:
        """The composed step run last (None before one was composed)."""
        return self._steps[0] if self._steps else None

    def wait(self) -> None:
        """Waits for the composed steps enqueued on the device (GPU backend); raises the
        first failure. (A step run program by program: each program's ``wait``.)"""
        self._enqueued.wait()

    def _compose(self, calls: list) -> bool:
        """Composes the recorded ``calls`` into a step kept first; whether it could."""
        if not calls:
            self.why_not = "the step called no sdflow program"
            return False
        backends = {p.compiled.backend for p, _, _ in calls}
        if len(backends) != 1:
            self.why_not = f"the step calls programs on several backends ({', '.join(sorted(backends))})"
            return False
        try:
            scratch = frozenset(_buffer_key(f.ndarray) for f in self.scratch)
            step = _Composed(_identifier(self.name), calls, backends.pop(), self.options, scratch)
            self._steps.insert(0, step)
            del self._steps[_KEPT_STEPS:]
            self.why_not = None
            return True
        except (_Unsupported, SdflowError) as e:
            self.why_not = str(e)
            return False


def _same_arguments(before: Any, now: Any) -> bool:
    """Whether a call's arguments are those of an earlier one: the same objects, or
    scalars (numbers, strings) of equal value and type (positional tuples or keyword
    dictionaries)."""
    if isinstance(now, dict):
        return before.keys() == now.keys() and _same_arguments(tuple(before.values()), tuple(now.values()))
    return len(before) == len(now) and all(
        a is b or (type(a) is type(b) and isinstance(a, _VALUES) and a == b) for a, b in zip(before, now)
    )


_VALUES = (int, float, complex, str, bytes, np.number, np.bool_)


def _identifier(name: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return out if out and not out[0].isdigit() else f"step_{out}"


def orchestrate(
    fn: Any = None,
    *,
    name: Optional[str] = None,
    options: Optional[dict] = None,
    scratch: Sequence[Any] = (),
    replay: bool = False,
) -> Any:
    """Runs a model step — a function that calls GT4Py programs compiled by sdflow, such as
    an ICON4Py granule's ``run`` — as one program.

    The first call runs the step program by program and records the calls: which
    program, which fields (by object), which scalars, which neighbour tables. sdflow then
    composes the sequence into one SDFG (a state per call, each callee inlined, the
    fields two calls share one container), optimizes it across the former program
    boundaries and compiles it. A later call runs the function again only to record: the
    programs are not run one by one; when the recording is the same step (the same
    programs on the same field objects, integer scalars and tables), the composed
    program runs once, with this call's float scalars. Any other sequence runs program
    by program and is composed too: the last four composed steps are kept, so a model
    that alternates two sets of fields (its `now` and `next` states) runs both composed.

    The function must not read field values between its program calls (they are run
    after it returns), and every program it calls must be on one sdflow backend: CPU
    (host fields), or GPU (device fields, e.g. CuPy's: the composed step is enqueued on
    their stream and returns without waiting; ``wait`` waits for it and raises a failure
    on the device). A step that cannot be composed runs program by program, and
    ``why_not`` says why.

    ``scratch`` names fields that live only within the step: every value the step reads
    from them it wrote earlier in the same step, and nothing reads them after it (an
    ICON4Py granule's work fields). In the composed program they are transients, which
    the optimizer may keep in registers or drop; the fields themselves keep the values of
    the last step run program by program.

        step = sdflow.gt4py.orchestrate(diffusion.run, scratch=[diffusion.z_nabla2_e, …])
        for _ in range(n):
            step(diagnostic_state, prognostic_state, dtime)

    ``replay=True`` goes further: a call with the same arguments as the last call that
    ran composed (the same objects; scalars of equal value) runs the composed step
    without calling the function at all, and returns that call's result — the step's
    cost is then one call of the compiled program. It is for functions whose program
    calls depend only on their arguments and on state that does not change between
    steps: the fields an argument refers to must not be reassigned (pass another object
    instead), and the function's other effects are not repeated.
    """
    if fn is None:
        return lambda f: Orchestrated(f, name=name, options=options, scratch=scratch, replay=replay)
    return Orchestrated(fn, name=name, options=options, scratch=scratch, replay=replay)
