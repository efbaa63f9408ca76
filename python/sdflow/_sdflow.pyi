"""Type stubs of the sdflow extension module."""

import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

class SdflowError(Exception):
    """An error of sdflow: a program that cannot be read, optimized or compiled."""

class ValidationError(SdflowError):
    """A program that is not a valid SDFG; the message lists every problem and where."""

class CallError(SdflowError):
    """A call whose arguments do not fit the program, or a failure while it ran."""

def load(source: Union[str, bytes, os.PathLike[str], Any]) -> Program:
    """Reads a program: a path, sdflow or DaCe JSON text, bytes, or a ``dace.SDFG``
    (through its ``to_json()``; DaCe is not imported otherwise)."""

def version() -> str:
    """The package version."""

def compose(
    name: str,
    data: list[tuple[str, str, int]],
    symbols: list[tuple[str, str]],
    calls: list[tuple["Program", dict[str, str], dict[str, Union[int, str]]]],
) -> "Program":
    """A sequence of program calls as one program: the step's containers
    ``(name, dtype, ndim)`` (extents and strides ``__<name>_size_<d>``,
    ``__<name>_stride_<d>``, from the arrays passed), its other symbols
    ``(name, dtype)``, and each call ``(program, {callee container: step container},
    {callee symbol: integer or expression})``. Raises ``SdflowError`` naming the call
    and what does not fit."""

def cache_dir() -> str:
    """The persistent build cache's directory (``SDFLOW_CACHE_DIR``, else ``sdflow`` in
    the user's cache directory)."""

class Report:
    """What ``Program.optimize`` did; ``str(report)`` is the text ``sdflow opt --report`` prints."""

    rounds: int
    fixed_point: bool
    total_ms: float
    validation_ms: float
    @property
    def passes(self) -> list[dict[str, Any]]:
        """Per pass, in order: ``{"name", "runs", "ms", "changes": {counter: n}}``."""

class Program:
    """An SDFG."""

    @property
    def name(self) -> str: ...
    @property
    def arguments(self) -> list[str]:
        """Array and scalar arguments, in calling order."""
    @property
    def symbols(self) -> dict[str, str]:
        """Symbols and their element types (``"i64"``, ``"f64"``...)."""
    def validate(self) -> None:
        """Raises ``ValidationError`` listing every problem."""
    def problems(self) -> list[str]:
        """Validation problems, one text each (empty when valid)."""
    @property
    def optimized(self) -> bool:
        """Whether ``optimize()`` made this program: ``compile`` then does not run the
        pipeline again unless ``options`` set ``optimize``."""
    def optimize(
        self,
        pipeline: str = "cpu",
        passes: Optional[Sequence[str]] = None,
        fast_math: bool = False,
    ) -> Tuple[Program, Report]:
        """Runs the optimizer (``"cpu"`` or ``"gpu"`` pipeline, or the named passes)."""
    def specialize_layout(
        self,
        order: Optional[str] = None,
        arrays: Optional[Mapping[str, Any]] = None,
    ) -> Tuple[Program, Dict[str, Any]]:
        """The program specialized for arguments passed ``"F"`` (column-major) or ``"C"``
        (row-major), or laid out as ``arrays`` are: each field's stride in its contiguous
        dimension a static 1, the transients column-major when the fields are."""
    def to_json(self) -> str:
        """The program as sdflow JSON."""
    def to_dot(
        self,
        level: str = "auto",
        state: Optional[str] = None,
        map: Optional[str] = None,
        against: Optional["Program"] = None,
    ) -> str:
        """A Graphviz DOT drawing: level "control", "states", "full" or "auto"; one state
        or one map's body; with ``against`` (the program before optimization) what the
        optimizer did is marked."""
    def show(
        self,
        kind: str = "c",
        optimize: bool = False,
        backend: Optional[str] = None,
        static: Optional[Mapping[str, Union[int, float, bool]]] = None,
    ) -> str:
        """``"c"``, ``"cuda"``, ``"plan"``, ``"sdfg"``, ``"dot"``, ``"optimized"`` or ``"report"``."""
    def stats(self) -> dict[str, int]:
        """Counts of states, nodes, maps, tasklets, edges and transients."""
    def compile(
        self,
        backend: str = "cpu",
        static: Optional[Mapping[str, Union[int, float, bool]]] = None,
        variants: Optional[Mapping[str, Sequence[Union[int, bool]]]] = None,
        bound: Optional[Mapping[str, Any]] = None,
        options: Optional[Mapping[str, Any]] = None,
        compile_on_demand: bool = False,
    ) -> CompiledProgram:
        """Compiles for ``"cpu"``, ``"cuda"`` or ``"interp"``."""

class CompiledProgram:
    """A compiled program; call it with keyword arguments."""

    @property
    def name(self) -> str: ...
    @property
    def backend(self) -> str: ...
    @property
    def options(self) -> str:
        """The options it was built with, and where each came from."""
    @property
    def compiled(self) -> int:
        """Variants this compile built (the rest came from the persistent cache)."""
    def __call__(self, **kwargs: Any) -> Optional[Completion]:
        """Runs once: NumPy arrays (passed in place) and values by name; the GIL is released while it runs.

        For a program compiled for ``"cuda"`` called with device arrays (anything with
        ``__cuda_array_interface__``, e.g. CuPy's), returns once the work is enqueued,
        with a ``Completion`` to wait on; otherwise returns ``None`` when done."""
    def bind(self, **kwargs: Any) -> BoundProgram:
        """Checks and lays out the arguments once."""

class Completion:
    """The end of a call on device arrays, enqueued without waiting for the device."""

    def wait(self) -> None:
        """Waits for the call's work; raises ``CallError`` if the program reported an error."""
    @property
    def done(self) -> bool:
        """Whether the work is done, without waiting."""
    @property
    def failed(self) -> bool:
        """Whether the work is done and the program reported an error meanwhile, without
        waiting; ``wait`` then raises it."""

def _device_alloc(nbytes: int) -> int:
    """Zeroed memory on the package's CUDA device (for tests of the device call path)."""

def _device_log() -> List[str]:
    """The recording device's calls (``SDFLOW_CUDA_DEVICE=recording``)."""

class BoundProgram:
    """A compiled program with its arguments bound."""

    def __call__(self, **kwargs: Union[int, float, bool]) -> None:
        """Runs; keyword arguments set new values of float symbols and scalar arguments."""
