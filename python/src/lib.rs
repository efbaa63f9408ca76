//! The `sdflow._sdflow` extension module: programs loaded from files, JSON text or DaCe
//! SDFG objects, optimized, drawn, printed, compiled and called with NumPy arrays
//! (`docs/python.md`). The pure-Python package `sdflow` re-exports it.
//!
//! Why one file of this size: the extension module's classes (`Program`,
//! `CompiledProgram`, `BoundProgram`) share one conversion of Python values into
//! arguments and one error mapping; the CUDA side is `device.rs`. Splitting the classes
//! apart would spread that conversion over files.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::sync::Arc;

use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyList, PyString};

use sdflow_codegen::cuda::exec::ForeignArray;
use sdflow_codegen::{Args, Backend, BoundCall, CompiledProgram as CpuProgram};
use sdflow_ir::{DType, DataDesc, Sdfg, SymExpr, Value};
use sdflow_orchestration::component::{Component, ProgramSpec, Programs};
use sdflow_orchestration::show::ShowOptions;
use sdflow_orchestration::workflow::Executable;

mod device;

// Calls convert and check their arguments in many small allocations; mimalloc's
// thread-local size classes make them markedly cheaper than the C library's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

create_exception!(
    sdflow._sdflow,
    SdflowError,
    PyException,
    "An error of sdflow: a program that cannot be read, optimized or compiled."
);
create_exception!(
    sdflow._sdflow,
    ValidationError,
    SdflowError,
    "A program that is not a valid SDFG; the message lists every problem and where."
);
create_exception!(
    sdflow._sdflow,
    CallError,
    SdflowError,
    "A call whose arguments do not fit the program, or a program that failed while running."
);

fn sdflow_err(e: impl Display) -> PyErr {
    SdflowError::new_err(e.to_string())
}

fn call_err(e: impl Display) -> PyErr {
    CallError::new_err(e.to_string())
}

/// The problems of an invalid program as one message, one per line.
fn invalid(name: &str, problems: &[sdflow_ir::validate::Problem]) -> PyErr {
    let mut msg = format!(
        "program '{name}' is not a valid SDFG ({} problem(s)):",
        problems.len()
    );
    for p in problems {
        msg.push_str("\n  ");
        msg.push_str(&p.to_string());
    }
    ValidationError::new_err(msg)
}

/// An SDFG: loaded with `sdflow.load`, or the result of `Program.optimize`.
#[pyclass(module = "sdflow._sdflow", name = "Program", frozen)]
struct Program {
    sdfg: Arc<Sdfg>,
    /// Where it came from (a path, `<json>`, a DaCe SDFG's name), for errors.
    origin: String,
    /// Made by `optimize()` and not changed since: `compile` then does not run the
    /// pipeline again unless its options ask for it.
    optimized: bool,
}

/// What `Program.optimize` did.
#[pyclass(module = "sdflow._sdflow", name = "Report", frozen)]
struct Report {
    text: String,
    #[pyo3(get)]
    rounds: usize,
    #[pyo3(get)]
    fixed_point: bool,
    #[pyo3(get)]
    total_ms: f64,
    #[pyo3(get)]
    validation_ms: f64,
    passes: Vec<PassLine>,
}

/// One pass of a report: name, runs, milliseconds, counters.
type PassLine = (String, usize, f64, Vec<(String, usize)>);

#[pymethods]
impl Report {
    /// Per pass: `{"name", "runs", "ms", "changes": {counter: n}}`, in pipeline order.
    #[getter]
    fn passes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for (name, runs, ms, changes) in &self.passes {
            let d = PyDict::new(py);
            d.set_item("name", name)?;
            d.set_item("runs", runs)?;
            d.set_item("ms", ms)?;
            let c = PyDict::new(py);
            for (k, n) in changes {
                c.set_item(k, n)?;
            }
            d.set_item("changes", c)?;
            list.append(d)?;
        }
        Ok(list)
    }

    fn __str__(&self) -> String {
        self.text.clone()
    }

    fn __repr__(&self) -> String {
        format!(
            "<sdflow.Report: {} round(s), {:.3} ms>",
            self.rounds, self.total_ms
        )
    }
}

/// Reads a program: a path (`str` or `os.PathLike`), sdflow or DaCe JSON text, bytes,
/// or a `dace.SDFG` (through its `to_json()`; DaCe is not imported otherwise).
#[pyfunction]
fn load(py: Python<'_>, source: &Bound<'_, PyAny>) -> PyResult<Program> {
    let (bytes, origin): (Vec<u8>, String) = if let Ok(b) = source.cast::<PyBytes>() {
        (b.as_bytes().to_vec(), "<bytes>".into())
    } else if let Ok(s) = source.cast::<PyString>() {
        let s = s.to_str()?;
        if looks_like_text(s) {
            (s.as_bytes().to_vec(), "<json>".into())
        } else {
            read_file(s)?
        }
    } else if source.hasattr("to_json")? && source.hasattr("arrays")? {
        // A DaCe SDFG object.
        let json = source.call_method0("to_json")?;
        let text: String = py
            .import("json")?
            .call_method1("dumps", (json,))?
            .extract()?;
        let name: String = source
            .getattr("name")
            .and_then(|n| n.extract())
            .unwrap_or_else(|_| "?".into());
        (text.into_bytes(), format!("<dace.SDFG '{name}'>"))
    } else if source.hasattr("__fspath__")? {
        let p: String = py
            .import("os")?
            .call_method1("fspath", (source,))?
            .extract()?;
        read_file(&p)?
    } else {
        return Err(PyTypeError::new_err(format!(
            "sdflow.load: expected a path, JSON text, bytes or a dace.SDFG, not {}",
            source.get_type().name()?
        )));
    };
    let sdfg = sdflow_orchestration::load::read_bytes(&bytes, &origin).map_err(sdflow_err)?;
    Ok(Program {
        sdfg: Arc::new(sdfg),
        origin,
        optimized: false,
    })
}

/// Whether a string given to `load` is a document rather than a path: it starts (after
/// white space) with `{` or `[` (JSON), holds a line break or a NUL, or is longer than
/// any path (4096 bytes, Linux's `PATH_MAX`).
fn looks_like_text(s: &str) -> bool {
    let t = s.trim_start();
    t.starts_with('{') || t.starts_with('[') || s.contains(['\n', '\0']) || s.len() > 4096
}

/// `s` for an error message: whole when short, else its start and its length.
fn shortened(s: &str) -> String {
    const KEEP: usize = 80;
    if s.chars().count() <= KEEP {
        return s.to_string();
    }
    let head: String = s.chars().take(KEEP).collect();
    format!("{head}… ({} characters)", s.chars().count())
}

fn read_file(path: &str) -> PyResult<(Vec<u8>, String)> {
    let bytes = std::fs::read(path).map_err(|e| {
        let msg = format!("{}: {e}", shortened(path));
        match e.kind() {
            std::io::ErrorKind::NotFound => pyo3::exceptions::PyFileNotFoundError::new_err(msg),
            std::io::ErrorKind::PermissionDenied => {
                pyo3::exceptions::PyPermissionError::new_err(msg)
            }
            _ => pyo3::exceptions::PyOSError::new_err(msg),
        }
    })?;
    Ok((bytes, path.to_string()))
}

/// A Python value as an IR value of type `ty` (a static value or a variant).
fn value_of(v: &Bound<'_, PyAny>, ty: DType, what: &str) -> PyResult<Value> {
    let bad = || {
        PyTypeError::new_err(format!(
            "{what}: expected a {ty} value, got {}",
            v.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    };
    Ok(if ty == DType::Bool {
        Value::Bool(
            v.extract::<bool>()
                .or_else(|_| v.extract::<i64>().map(|i| i != 0))
                .map_err(|_| bad())?,
        )
    } else if ty.is_int() {
        if v.is_instance_of::<PyBool>() {
            Value::I64(v.extract::<bool>()? as i64)
        } else {
            Value::I64(v.extract::<i64>().map_err(|_| bad())?)
        }
        .cast(ty)
    } else {
        Value::F64(v.extract::<f64>().map_err(|_| bad())?).cast(ty)
    })
}

fn symbol_type(sdfg: &Sdfg, name: &str) -> PyResult<DType> {
    sdfg.symbols.get(name).map(|s| s.dtype).ok_or_else(|| {
        SdflowError::new_err(format!(
            "program '{}' has no symbol '{name}' (symbols: {})",
            sdfg.name,
            sdfg.symbols.keys().cloned().collect::<Vec<_>>().join(", ")
        ))
    })
}

#[pymethods]
impl Program {
    /// The program's name.
    #[getter]
    fn name(&self) -> String {
        self.sdfg.name.clone()
    }

    /// Whether `optimize()` made this program: `compile` then does not run the
    /// pipeline again unless `options` set `optimize`.
    #[getter]
    fn optimized(&self) -> bool {
        self.optimized
    }

    /// Its array and scalar arguments, in calling order.
    #[getter]
    fn arguments(&self) -> Vec<String> {
        self.sdfg.arguments()
    }

    /// Its symbols and their types (`{"N": "i64", "alpha": "f64"}`).
    #[getter]
    fn symbols(&self) -> BTreeMap<String, String> {
        self.sdfg
            .symbols
            .iter()
            .map(|(k, s)| (k.clone(), s.dtype.to_string()))
            .collect()
    }

    /// The problems validation finds, one text per problem (empty when valid).
    fn problems(&self) -> Vec<String> {
        match self.sdfg.validate() {
            Ok(()) => Vec::new(),
            Err(ps) => ps.iter().map(|p| p.to_string()).collect(),
        }
    }

    /// Raises `ValidationError` listing every problem, or returns None.
    fn validate(&self) -> PyResult<()> {
        self.sdfg
            .validate()
            .map_err(|ps| invalid(&self.sdfg.name, &ps))
    }

    /// Runs the optimizer: `pipeline` is `"cpu"` or `"gpu"`, or `passes` a list of pass
    /// names; `fast_math` lets the e-graph pass reassociate. Returns `(Program, Report)`.
    #[pyo3(signature = (pipeline = "cpu", passes = None, fast_math = false))]
    fn optimize(
        &self,
        pipeline: &str,
        passes: Option<Vec<String>>,
        fast_math: bool,
    ) -> PyResult<(Program, Report)> {
        // The pipeline every entry point builds from options (`Options::pipeline`).
        let backend = match pipeline {
            "cpu" => sdflow_codegen::Backend::Cpu,
            "gpu" => sdflow_codegen::Backend::Gpu,
            other => {
                return Err(SdflowError::new_err(format!(
                    "pipeline '{other}': expected 'cpu' or 'gpu'"
                )));
            }
        };
        let mut options = sdflow_orchestration::config::Options::defaults(backend);
        options.passes = passes;
        options.fast_math = fast_math;
        let p = options.pipeline().map_err(|e| match e {
            e @ sdflow_transforms::TransformError::FastMathWithoutEGraph { .. } => {
                SdflowError::new_err(format!("fast_math: {e}"))
            }
            other => sdflow_err(other),
        })?;
        let mut sdfg = (*self.sdfg).clone();
        let r = p.run(&mut sdfg).map_err(|e| match e {
            sdflow_transforms::TransformError::InvalidInput(ps) => {
                ValidationError::new_err(format!(
                    "program '{}' is not a valid SDFG ({} problem(s)):\n  {}",
                    self.sdfg.name,
                    ps.len(),
                    ps.join("\n  ")
                ))
            }
            other => sdflow_err(other),
        })?;
        let report = Report {
            text: r.to_string(),
            rounds: r.rounds,
            fixed_point: r.fixed_point,
            total_ms: r.time.as_secs_f64() * 1e3,
            validation_ms: r.validation.as_secs_f64() * 1e3,
            passes: r
                .passes
                .iter()
                .map(|p| {
                    (
                        p.name.to_string(),
                        p.runs,
                        p.time.as_secs_f64() * 1e3,
                        p.changes
                            .counts
                            .iter()
                            .map(|(k, n)| (k.to_string(), *n))
                            .collect(),
                    )
                })
                .collect(),
        };
        Ok((
            Program {
                sdfg: Arc::new(sdfg),
                origin: self.origin.clone(),
                optimized: true,
            },
            report,
        ))
    }

    /// The program specialized for arguments passed in one layout: `order` `"C"`
    /// (row-major) or `"F"` (column-major) for every argument whose strides the program
    /// leaves to the caller (GT4Py's fields), or `arrays`, a dict of the arrays that
    /// will be passed (each specialized for the dimension it is contiguous in). That
    /// dimension's stride becomes a static 1, so that the optimizer can put the
    /// contiguous dimension innermost, and when most fields are column-major the
    /// program's transients become column-major too; a call with an array laid out
    /// otherwise is refused, naming it. Returns `(Program, dict)`: the dict lists
    /// `strides_specialized`, `column_major`, `transients_relaid` and
    /// `transients_kept`.
    #[pyo3(signature = (order = None, arrays = None))]
    fn specialize_layout<'py>(
        &self,
        py: Python<'py>,
        order: Option<&str>,
        arrays: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<(Program, Bound<'py, PyDict>)> {
        let unit = match (order, arrays) {
            (Some(o), None) => {
                let order: sdflow_transforms::Order = o.parse().map_err(SdflowError::new_err)?;
                sdflow_transforms::unit_dims_in_order(&self.sdfg, order)
            }
            (None, Some(d)) => {
                let mut parts: Vec<(String, Vec<usize>, Vec<isize>)> = Vec::new();
                for (k, v) in d.iter() {
                    let name: String = k.extract()?;
                    let a = v.cast::<PyUntypedArray>().map_err(|_| {
                        SdflowError::new_err(format!(
                            "specialize_layout: '{name}' is not a NumPy array"
                        ))
                    })?;
                    let strides = elem_strides(a).map_err(|e| {
                        SdflowError::new_err(format!("specialize_layout: '{name}': {e}"))
                    })?;
                    parts.push((name, a.shape().to_vec(), strides));
                }
                sdflow_transforms::unit_dims_of(
                    parts
                        .iter()
                        .map(|(n, e, s)| (n.as_str(), e.as_slice(), s.as_slice())),
                )
            }
            _ => {
                return Err(SdflowError::new_err(
                    "specialize_layout: give either order ('C' or 'F') or arrays",
                ));
            }
        };
        let mut sdfg = (*self.sdfg).clone();
        let r = sdflow_transforms::specialize_unit_strides(&mut sdfg, &unit)
            .map_err(|e| SdflowError::new_err(format!("specialize_layout: {e}")))?;
        let out = PyDict::new(py);
        out.set_item("strides_specialized", r.strides_specialized)?;
        out.set_item("column_major", r.column_major)?;
        out.set_item("transients_relaid", r.transients_relaid)?;
        out.set_item("transients_kept", r.transients_kept)?;
        // Known strides change what the pipeline decides (loop order, strips): a
        // specialized program is optimized again when compiled.
        Ok((
            Program {
                sdfg: Arc::new(sdfg),
                origin: self.origin.clone(),
                optimized: false,
            },
            out,
        ))
    }

    /// The program as sdflow JSON.
    fn to_json(&self) -> String {
        sdflow_ir::format::to_json(&self.sdfg)
    }

    /// The program as a Graphviz DOT drawing: at `level` `"control"`, `"states"`,
    /// `"full"` or `"auto"` (the level that stays readable for its size); or one state
    /// (`state`: its name or `"#index"`) or one map's body (`map`: its label); with
    /// `against` (the program before optimization) what the optimizer did is marked.
    #[pyo3(signature = (level = "auto", state = None, map = None, against = None))]
    fn to_dot(
        &self,
        level: &str,
        state: Option<String>,
        map: Option<String>,
        against: Option<PyRef<'_, Program>>,
    ) -> PyResult<String> {
        use sdflow_ir::dot::{Detail, DotOptions, diff_marks, to_dot_with};
        let detail = match level {
            "auto" => None,
            other => Some(Detail::from_name(other).ok_or_else(|| {
                SdflowError::new_err(format!(
                    "level '{other}': expected 'control', 'states', 'full' or 'auto'"
                ))
            })?),
        };
        let opts = DotOptions {
            detail,
            state,
            map,
            marks: against.map(|before| diff_marks(&before.sdfg, &self.sdfg)),
        };
        to_dot_with(&self.sdfg, &opts).map_err(sdflow_err)
    }

    /// An intermediate of the workflow: `"c"`, `"cuda"`, `"plan"`, `"sdfg"`, `"dot"`,
    /// `"optimized"` or `"report"` (as `sdflow show --emit`), after specialization to
    /// `static` and, with `optimize`, the optimize step.
    #[pyo3(signature = (kind = "c", optimize = false, backend = None, r#static = None))]
    fn show(
        &self,
        kind: &str,
        optimize: bool,
        backend: Option<&str>,
        r#static: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<String> {
        self.validate()?;
        let backend = backend
            .map(|b| {
                Backend::from_tag(b).ok_or_else(|| {
                    SdflowError::new_err(format!(
                        "backend '{b}': expected 'cpu', 'cuda' or 'interp'"
                    ))
                })
            })
            .transpose()?;
        let mut statics = Vec::new();
        if let Some(d) = r#static {
            for (k, v) in d.iter() {
                statics.push((k.extract::<String>()?, v.str()?.to_string()));
            }
        }
        let o = ShowOptions {
            emit: kind.to_string(),
            opt: optimize,
            backend,
            statics,
            ..ShowOptions::default()
        };
        sdflow_orchestration::show::show((*self.sdfg).clone(), &self.origin, &o).map_err(sdflow_err)
    }

    /// Counts of states, nodes, maps, tasklets, edges and transients.
    fn stats(&self) -> BTreeMap<&'static str, usize> {
        let s = self.sdfg.stats();
        BTreeMap::from([
            ("states", s.states),
            ("nodes", s.nodes),
            ("maps", s.maps),
            ("tasklets", s.tasklets),
            ("nested", s.nested),
            ("library", s.library),
            ("edges", s.edges),
            ("transients", s.transients),
        ])
    }

    /// Compiles the program for `backend` (`"cpu"`, `"cuda"` or `"interp"`): `static`
    /// symbol values are compiled in; `variants` precompiles one version per listed
    /// value of a flag (the call passes the flag and runs that version); `bound`
    /// arguments (arrays or values) are given once, calls pass the rest; `options` are
    /// backend options by key (values as TOML text or Python values).
    #[pyo3(signature = (backend = "cpu", r#static = None, variants = None, bound = None, options = None, compile_on_demand = false))]
    #[allow(clippy::too_many_arguments)]
    fn compile(
        &self,
        py: Python<'_>,
        backend: &str,
        r#static: Option<&Bound<'_, PyDict>>,
        variants: Option<&Bound<'_, PyDict>>,
        bound: Option<&Bound<'_, PyDict>>,
        options: Option<&Bound<'_, PyDict>>,
        compile_on_demand: bool,
    ) -> PyResult<CompiledProgram> {
        self.validate()?;
        let tag = Backend::from_tag(backend).ok_or_else(|| {
            SdflowError::new_err(format!(
                "backend '{backend}': expected 'cpu', 'cuda' or 'interp'"
            ))
        })?;
        let sdfg = &self.sdfg;
        let mut spec = ProgramSpec::new(self.sdfg.clone()).compile_on_demand(compile_on_demand);
        if let Some(d) = r#static {
            for (k, v) in d.iter() {
                let k: String = k.extract()?;
                let ty = symbol_type(sdfg, &k)?;
                spec = spec.static_value(&k, value_of(&v, ty, &format!("static '{k}'"))?);
            }
        }
        if let Some(d) = variants {
            for (k, v) in d.iter() {
                let k: String = k.extract()?;
                let ty = symbol_type(sdfg, &k)?;
                let mut values = Vec::new();
                for x in v.try_iter()? {
                    values.push(value_of(&x?, ty, &format!("variant of '{k}'"))?);
                }
                spec = spec.variants(&k, values);
            }
        }
        // A program `optimize()` made is compiled as it is unless the options say
        // otherwise: running the pipeline again would redo its work, or undo a choice of
        // passes.
        let optimize_given = options.is_some_and(|d| d.contains("optimize").unwrap_or(false));
        if self.optimized && !optimize_given {
            spec = spec.option("optimize", "false");
        }
        if let Some(d) = options {
            for (k, v) in d.iter() {
                let k: String = k.extract()?;
                let text = if let Ok(s) = v.cast::<PyString>() {
                    // TOML text, or a plain word taken as a string.
                    let s = s.to_str()?;
                    if s.parse::<f64>().is_ok() || s == "true" || s == "false" || s.starts_with('"')
                    {
                        s.to_string()
                    } else {
                        format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
                    }
                } else if v.is_instance_of::<PyBool>() {
                    v.extract::<bool>()?.to_string()
                } else {
                    v.str()?.to_string()
                };
                spec = spec.option(&k, &text);
            }
        }
        // The bound arguments are checked before anything compiles, as the component
        // checks its own (a name static and bound, an array of another element type or
        // of extents the static values contradict); the values stay here.
        let mut held = BoundArgs::default();
        if let Some(d) = bound {
            for (k, v) in d.iter() {
                held.push(py, sdfg, &k.extract::<String>()?, &v)?;
            }
        }
        for (k, h) in &held.items {
            match h {
                Held::Array { dtype, shape, .. } => spec.check_bound_array(k, *dtype, shape),
                Held::Scalar { dtype, .. } => spec.check_bound_array(k, *dtype, &[]),
                Held::Int(_) => spec.check_bound_symbol(k, false),
                Held::Float(_) => spec.check_bound_symbol(k, true),
            }
            .map_err(sdflow_err)?;
        }
        let statics: Vec<String> = r#static
            .map(|d| d.keys().iter().map(|k| k.extract()).collect())
            .transpose()?
            .unwrap_or_default();
        let mut component = Component::new(tag);
        if tag == Backend::Gpu {
            component = component.device(device::device()?);
        }
        let programs = component.with_program(spec).build().map_err(sdflow_err)?;
        Ok(CompiledProgram {
            programs: Arc::new(programs),
            name: sdfg.name.clone(),
            sdfg: sdfg.clone(),
            backend: tag,
            bound: held,
            statics,
        })
    }

    fn __repr__(&self) -> String {
        let s = self.sdfg.stats();
        format!(
            "<sdflow.Program '{}': {} states, {} maps, {} tasklets>",
            self.sdfg.name, s.states, s.maps, s.tasklets
        )
    }
}

/// One argument held for calls: an array (kept alive by the reference) or a scalar
/// value in a buffer of its own.
enum Held {
    Array {
        obj: Py<PyAny>,
        ptr: *mut u8,
        dtype: DType,
        shape: Vec<usize>,
        strides: Vec<isize>,
    },
    /// A scalar container passed by value: the program reads it through a pointer.
    Scalar {
        buf: Box<u64>,
        dtype: DType,
    },
    Int(i64),
    Float(f64),
}

/// Arguments by name, converted once from Python values.
#[derive(Default)]
struct BoundArgs {
    items: Vec<(String, Held)>,
}

// SAFETY: the raw pointers point into NumPy arrays this value keeps alive (`obj`) or into
// its own boxes; they are only dereferenced by a program call, which holds the GIL.
unsafe impl Send for BoundArgs {}
unsafe impl Sync for BoundArgs {}

fn dtype_of(a: &Bound<'_, PyUntypedArray>) -> Option<DType> {
    // By kind and size (no dtype objects made per argument), native byte order only.
    let d = a.dtype();
    if d.is_native_byteorder() == Some(false) {
        return None;
    }
    match (d.kind(), d.itemsize()) {
        (b'f', 8) => Some(DType::F64),
        (b'f', 4) => Some(DType::F32),
        (b'i', 8) => Some(DType::I64),
        (b'i', 4) => Some(DType::I32),
        (b'b', 1) => Some(DType::Bool),
        _ => None,
    }
}

impl BoundArgs {
    /// Converts `value` for argument `name` of `sdfg` and keeps it (names come from a
    /// Python dict: each once).
    fn push(
        &mut self,
        _py: Python<'_>,
        sdfg: &Sdfg,
        name: &str,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let held = held_of(sdfg, name, value)?;
        self.items.push((name.to_string(), held));
        Ok(())
    }

    /// Adds every argument to `args`.
    ///
    /// # Safety
    /// The returned arguments point into the held arrays and buffers: `self` must
    /// outlive every use of them.
    unsafe fn add_to<'a>(&self, mut args: Args<'a>) -> Args<'a> {
        for (name, h) in &self.items {
            args = match h {
                Held::Array {
                    ptr,
                    dtype,
                    shape,
                    strides,
                    ..
                } => unsafe { args.raw(name, *ptr, *dtype, shape, strides) },
                Held::Scalar { buf, dtype } => {
                    let p = (&**buf as *const u64).cast_mut().cast::<u8>();
                    unsafe { args.raw(name, p, *dtype, &[], &[]) }
                }
                Held::Int(v) => args.int(name, *v),
                Held::Float(v) => args.float(name, *v),
            };
        }
        args
    }
}

/// The bytes of `v` as a value of `dtype`, in a buffer of eight.
fn scalar_bits(v: Value, dtype: DType) -> u64 {
    let mut b = [0u8; 8];
    match v.cast(dtype) {
        Value::Bool(x) => b[0] = x as u8,
        Value::I32(x) => b[..4].copy_from_slice(&x.to_ne_bytes()),
        Value::I64(x) => b.copy_from_slice(&x.to_ne_bytes()),
        Value::F32(x) => b[..4].copy_from_slice(&x.to_ne_bytes()),
        Value::F64(x) => b.copy_from_slice(&x.to_ne_bytes()),
    }
    u64::from_ne_bytes(b)
}

/// The data pointer and element type of array argument `name`, its strides (in
/// elements) in `strides`: checked to be writeable, of a supported type and with strides
/// that are whole elements.
fn array_parts(
    sdfg: &Sdfg,
    name: &str,
    a: &Bound<'_, PyUntypedArray>,
    strides: &mut Vec<isize>,
) -> PyResult<(*mut u8, DType)> {
    let what = |m: String| call_err(format!("program '{}': argument '{name}': {m}", sdfg.name));
    let dtype = dtype_of(a).ok_or_else(|| {
        what(format!(
            "element type {} is not supported (float64, float32, int64, int32, bool in native byte order)",
            a.dtype()
        ))
    })?;
    // SAFETY: `a` is a live NumPy array; its header is read, not written.
    let (ptr, writeable) = unsafe {
        let raw = a.as_array_ptr();
        (
            (*raw).fields.data.cast::<u8>(),
            (*raw).fields.flags & numpy::npyffi::flags::NPY_ARRAY_WRITEABLE != 0,
        )
    };
    if !writeable {
        return Err(what(
            "the array is read-only; pass a writeable array".into(),
        ));
    }
    *strides = elem_strides(a).map_err(what)?;
    Ok((ptr, dtype))
}

/// The strides of `a` in elements; an error when one is not a multiple of the element
/// size.
fn elem_strides(a: &Bound<'_, PyUntypedArray>) -> Result<Vec<isize>, String> {
    let size = a.dtype().itemsize().max(1) as isize;
    a.strides()
        .iter()
        .map(|&s| {
            (s % size == 0).then_some(s / size).ok_or_else(|| {
                format!(
                    "strides {:?} (bytes) are not multiples of the element size {size}",
                    a.strides()
                )
            })
        })
        .collect()
}

fn held_of(sdfg: &Sdfg, name: &str, value: &Bound<'_, PyAny>) -> PyResult<Held> {
    let what = |m: String| call_err(format!("program '{}': argument '{name}': {m}", sdfg.name));
    if let Ok(a) = value.cast::<PyUntypedArray>() {
        let mut strides = Vec::with_capacity(a.ndim());
        let (ptr, dtype) = array_parts(sdfg, name, a, &mut strides)?;
        return Ok(Held::Array {
            obj: value.clone().unbind(),
            ptr,
            dtype,
            shape: a.shape().to_vec(),
            strides,
        });
    }
    match sdfg.arrays.get(name) {
        Some(DataDesc::Scalar { dtype, .. }) => {
            let v = value_of(value, *dtype, &format!("argument '{name}'"))
                .map_err(|e| call_err(e.to_string()))?;
            Ok(Held::Scalar {
                buf: Box::new(scalar_bits(v, *dtype)),
                dtype: *dtype,
            })
        }
        Some(_) => Err(what(format!(
            "expected a NumPy array, got {}",
            value.get_type().name()?
        ))),
        None => match sdfg.symbols.get(name) {
            Some(s) if s.dtype.is_float() => {
                Ok(Held::Float(value.extract::<f64>().map_err(|_| {
                    what(format!(
                        "expected a number, got {}",
                        value
                            .get_type()
                            .name()
                            .map(|n| n.to_string())
                            .unwrap_or_default()
                    ))
                })?))
            }
            Some(s) => Ok(Held::Int(
                value_of(value, s.dtype, &format!("argument '{name}'"))
                    .map_err(|e| call_err(e.to_string()))?
                    .as_i64(),
            )),
            None => Err(what(format!(
                "no such argument or symbol (arguments: {}; symbols: {})",
                sdfg.arguments().join(", "),
                sdfg.symbols.keys().cloned().collect::<Vec<_>>().join(", ")
            ))),
        },
    }
}

/// Integer symbols neither given in `sets` nor static whose values the arrays' extents
/// imply ([`sdflow_ir::bind::infer_symbols`]), and with `strides` their strides too (the
/// interpreter, which reads the arrays as they are); two arrays implying different values
/// is an error naming both.
fn infer_sizes(
    sdfg: &Sdfg,
    sets: &[&BoundArgs],
    statics: &[String],
    strides: bool,
) -> Result<Vec<(String, i64)>, sdflow_ir::bind::BindError> {
    let items = || sets.iter().flat_map(|s| s.items.iter());
    let mut known: BTreeMap<String, i64> = items()
        .filter_map(|(n, h)| match h {
            Held::Int(v) => Some((n.clone(), *v)),
            _ => None,
        })
        .collect();
    let layouts: Vec<sdflow_ir::bind::ArgLayout<'_>> = items()
        .filter_map(|(name, h)| {
            let Held::Array {
                shape,
                strides: elem,
                ..
            } = h
            else {
                return None;
            };
            let desc = sdfg.arrays.get(name)?;
            let declared: &[SymExpr] = match desc {
                DataDesc::Array(a) if strides => &a.strides,
                _ => &[],
            };
            Some(sdflow_ir::bind::ArgLayout {
                name,
                shape: desc.shape(),
                strides: declared,
                extents: shape,
                elem_strides: strides.then_some(&elem[..]),
            })
        })
        .collect();
    let given = |k: &str| statics.iter().any(|s| s == k) || items().any(|(n, _)| n == k);
    let inferable = |k: &str| {
        !given(k)
            && sdfg
                .symbols
                .get(k)
                .is_some_and(|x| x.dtype.is_int() && x.value.is_none())
    };
    let before: Vec<String> = known.keys().cloned().collect();
    sdflow_ir::bind::infer_symbols(
        &layouts,
        &inferable,
        &|s| sdfg.symbol_default(s),
        &mut known,
    )?;
    Ok(known
        .into_iter()
        .filter(|(k, _)| !before.contains(k))
        .collect())
}

/// A value moved into a section that runs without the GIL.
struct Unlocked<T>(T);

// SAFETY: the program call runs on the calling thread while it has released the GIL; the
// arrays it points into are kept alive by references the caller holds for the call (the
// keyword dict, the bound arguments), and nothing else of ours touches the value then.
unsafe impl<T> Send for Unlocked<T> {}

impl<T> Unlocked<T> {
    /// The value (a method, so that a closure captures the wrapper whole).
    fn into_inner(self) -> T {
        self.0
    }
}

/// Runs a program call with the GIL released, so that other Python threads run meanwhile.
fn without_gil<T>(
    py: Python<'_>,
    value: T,
    f: impl FnOnce(T) -> Result<(), sdflow_codegen::CallError>,
) -> PyResult<()> {
    let v = Unlocked((value, f));
    py.detach(move || {
        let (value, f) = v.into_inner();
        f(value)
    })
    .map_err(call_err)
}

/// A compiled program: call it with keyword arguments (NumPy arrays are passed in
/// place), or `bind` them once.
#[pyclass(module = "sdflow._sdflow", name = "CompiledProgram", frozen)]
struct CompiledProgram {
    programs: Arc<Programs>,
    name: String,
    sdfg: Arc<Sdfg>,
    backend: Backend,
    bound: BoundArgs,
    /// The symbols compiled in (never inferred from the arrays' shapes).
    statics: Vec<String>,
}

impl CompiledProgram {
    /// A call whose keyword arguments go straight into the call's arguments (no copy
    /// kept): the dict holds the arrays for the call's duration.
    fn call_direct(&self, py: Python<'_>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<()> {
        let mut bufs: Vec<Box<u64>> = Vec::new();
        let mut strides = Vec::new();
        // SAFETY: the bound arguments outlive the call.
        let mut args = unsafe { self.bound.add_to(Args::new()) };
        if let Some(d) = kwargs {
            for (k, v) in d.iter() {
                let k = k.cast_into::<PyString>()?;
                let k = k.to_str()?;
                if self.bound.items.iter().any(|(n, _)| n == k) {
                    return Err(call_err(format!(
                        "program '{}': '{k}' is bound; do not pass it",
                        self.name
                    )));
                }
                if let Ok(a) = v.cast::<PyUntypedArray>() {
                    let (ptr, dtype) = array_parts(&self.sdfg, k, a, &mut strides)?;
                    // SAFETY: the dict keeps the array alive until the call returns.
                    args = unsafe { args.raw(k, ptr, dtype, a.shape(), &strides) };
                    continue;
                }
                args = match held_of(&self.sdfg, k, &v)? {
                    Held::Scalar { buf, dtype } => {
                        let p = (&*buf as *const u64).cast_mut().cast::<u8>();
                        bufs.push(buf);
                        // SAFETY: the box lives in `bufs` (moving it keeps its address).
                        unsafe { args.raw(k, p, dtype, &[], &[]) }
                    }
                    Held::Int(i) => args.int(k, i),
                    Held::Float(x) => args.float(k, x),
                    Held::Array { .. } => unreachable!("arrays are handled above"),
                };
            }
        }
        let callable = self.callable()?;
        without_gil(py, args, |args| callable.call(args))
    }

    /// A call on device arrays (see `__call__`), or `None` when no argument is one.
    fn call_device(
        &self,
        py: Python<'_>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Option<device::Completion>> {
        let Some(d) = kwargs else { return Ok(None) };
        let mut on_device = Vec::new();
        let mut others = Vec::new();
        let mut capsules = Vec::new();
        for (k, v) in d.iter() {
            let k: String = k.extract()?;
            match device::device_arg(&self.name, &k, &v, &mut capsules)? {
                Some(a) => on_device.push((a, v.unbind())),
                None => others.push((k, v)),
            }
        }
        if on_device.is_empty() {
            return Ok(None);
        }
        let program = &self.name;
        let mut args = Args::new();
        for (k, v) in others {
            if self.bound.items.iter().any(|(n, _)| *n == k) {
                return Err(call_err(format!(
                    "program '{program}': '{k}' is bound; do not pass it"
                )));
            }
            if let Some(sym) = self.sdfg.symbols.get(&k) {
                let value = value_of(&v, sym.dtype, &format!("program '{program}': '{k}'"))?;
                args = match value {
                    Value::F64(x) => args.float(&k, x),
                    Value::F32(x) => args.float(&k, x as f64),
                    other => args.int(&k, other.as_i64()),
                };
            } else if self.sdfg.arrays.contains_key(&k) {
                return Err(call_err(format!(
                    "program '{program}': '{k}' is not on the device; a call on device arrays takes every array (and scalar container, as a one-element array) on the device"
                )));
            } else {
                return Err(call_err(format!(
                    "program '{program}': '{k}' is not an argument of the program"
                )));
            }
        }
        for (k, h) in &self.bound.items {
            args = match h {
                Held::Int(i) => args.int(k, *i),
                Held::Float(x) => args.float(k, *x),
                _ => {
                    return Err(call_err(format!(
                        "program '{program}': '{k}' is bound as a host array; a call on device arrays takes every array on the device"
                    )));
                }
            };
        }
        let arrays: Vec<ForeignArray<'_>> = on_device
            .iter()
            .map(|(a, _)| ForeignArray {
                name: &a.name,
                ptr: a.ptr,
                dtype: a.dtype,
                extents: &a.shape,
                strides: &a.strides,
            })
            .collect();
        let mut streams: Vec<u64> = on_device.iter().filter_map(|(a, _)| a.stream).collect();
        streams.sort_unstable();
        streams.dedup();
        let callable = self.callable()?;
        let work = Unlocked((args, arrays, streams));
        let (gpu, done) = py
            .detach(move || {
                let (args, arrays, streams) = work.into_inner();
                // SAFETY: each array's interface describes memory its owner keeps (the
                // objects are held by the completion until it is waited on or dropped);
                // the call is ordered after the producers' streams and they after it.
                unsafe { callable.call_foreign(args, &arrays, &streams) }
            })
            .map_err(call_err)?;
        let keep = on_device
            .into_iter()
            .map(|(_, obj)| obj)
            .chain(capsules)
            .collect();
        Ok(Some(device::Completion::new(
            gpu,
            self.name.clone(),
            done,
            keep,
        )))
    }

    fn callable(&self) -> PyResult<&sdflow_orchestration::component::Callable> {
        self.programs.program(&self.name).map_err(call_err)
    }

    fn args_of(&self, py: Python<'_>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<BoundArgs> {
        let mut held = BoundArgs::default();
        if let Some(d) = kwargs {
            for (k, v) in d.iter() {
                let k: String = k.extract()?;
                if self.bound.items.iter().any(|(n, _)| *n == k) {
                    return Err(call_err(format!(
                        "program '{}': '{k}' is bound; do not pass it",
                        self.name
                    )));
                }
                held.push(py, &self.sdfg, &k, &v)?;
            }
        }
        Ok(held)
    }
}

#[pymethods]
impl CompiledProgram {
    /// Runs the program once: arrays and values by name.
    /// With device arrays (anything with `__cuda_array_interface__`, e.g. CuPy's) for
    /// a program compiled for `"cuda"`, the call returns once its work is enqueued, with
    /// a `Completion` to wait on; otherwise it returns when the program is done.
    #[pyo3(signature = (**kwargs))]
    fn __call__(
        &self,
        py: Python<'_>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Option<device::Completion>> {
        if self.backend == Backend::Cpu {
            return self.call_direct(py, kwargs).map(|()| None);
        }
        if self.backend == Backend::Gpu
            && let Some(done) = self.call_device(py, kwargs)?
        {
            return Ok(Some(done));
        }
        let mut held = self.args_of(py, kwargs)?;
        {
            // The compiled CPU program infers sizes from the arrays' shapes; for the
            // others, a dimension that is a bare symbol gives its value here.
            let inferred = infer_sizes(
                &self.sdfg,
                &[&held, &self.bound],
                &self.statics,
                self.backend == Backend::Interp,
            )
            .map_err(|e| call_err(format!("program '{}': {e}", self.sdfg.name)))?;
            held.items
                .extend(inferred.into_iter().map(|(k, v)| (k, Held::Int(v))));
        }
        // SAFETY: `held` and `self.bound` outlive the call.
        let args = unsafe { held.add_to(self.bound.add_to(Args::new())) };
        let callable = self.callable()?;
        without_gil(py, args, |args| callable.call(args)).map(|()| None)
    }

    /// Checks and lays out the arguments once: the returned callable runs the program
    /// with them, taking only new values of float symbols and of scalar arguments.
    #[pyo3(signature = (**kwargs))]
    fn bind(&self, py: Python<'_>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<BoundProgram> {
        let held = self.args_of(py, kwargs)?;
        // The compile-time bound arguments, shared (arrays) or copied (scalar buffers):
        // the bound call points into this copy, which moves into the result with `held`.
        let bound_from = BoundArgs {
            items: self
                .bound
                .items
                .iter()
                .map(|(n, h)| (n.clone(), h.clone_ref(py)))
                .collect(),
        };
        // SAFETY: `held` and `bound_from` move into the result, which keeps them (and
        // through them the arrays) for as long as the bound call lives; moving them
        // moves no array or buffer.
        let args = unsafe { held.add_to(bound_from.add_to(Args::new())) };
        let (exe, args) = self.callable()?.select(args).map_err(call_err)?;
        let floats: Vec<String> = self
            .sdfg
            .symbols
            .iter()
            .filter(|(_, s)| s.dtype.is_float())
            .map(|(k, _)| k.clone())
            .collect();
        let mut bound_scalars = Vec::new();
        for (n, h) in held.items.iter().chain(bound_from.items.iter()) {
            if let Held::Scalar { buf, dtype } = h {
                bound_scalars.push((n.clone(), (&**buf as *const u64).cast_mut(), *dtype));
            }
        }
        let call = match &exe {
            Executable::Cpu(p) => {
                let program: Arc<CpuProgram> = p.clone();
                // SAFETY: the program is kept alive by `program` below, which the bound
                // call is dropped before (field order), and the arrays by `held`.
                let prog_ref: &'static CpuProgram = unsafe { &*Arc::as_ptr(&program) };
                let bc = prog_ref.bind(args).map_err(call_err)?;
                Some((bc, program))
            }
            _ => None,
        };
        let (call, program) = match call {
            Some((c, p)) => (Some(c), Some(p)),
            None => (None, None),
        };
        Ok(BoundProgram {
            call,
            _program: program,
            compiled: CompiledRef {
                programs: self.programs.clone(),
                name: self.name.clone(),
                sdfg: self.sdfg.clone(),
            },
            held,
            own_bound: self.bound.items.iter().map(|(n, _)| n.clone()).collect(),
            bound_from,
            floats,
            scalars: bound_scalars,
        })
    }

    /// The program's name.
    #[getter]
    fn name(&self) -> String {
        self.name.clone()
    }

    /// The backend it runs on: `"cpu"`, `"cuda"` or `"interp"`.
    #[getter]
    fn backend(&self) -> &'static str {
        match self.backend {
            Backend::Cpu => "cpu",
            Backend::Gpu => "cuda",
            Backend::Interp => "interp",
        }
    }

    /// The options it was built with, and where each came from.
    #[getter]
    fn options(&self) -> PyResult<String> {
        Ok(self.callable()?.options().to_text())
    }

    /// How many program variants this compile built (the rest came from the
    /// persistent cache).
    #[getter]
    fn compiled(&self) -> usize {
        self.programs.compiled()
    }

    fn __repr__(&self) -> String {
        format!(
            "<sdflow.CompiledProgram '{}' ({})>",
            self.name,
            self.backend()
        )
    }
}

impl Held {
    fn clone_ref(&self, py: Python<'_>) -> Held {
        match self {
            Held::Array {
                obj,
                ptr,
                dtype,
                shape,
                strides,
            } => Held::Array {
                obj: obj.clone_ref(py),
                ptr: *ptr,
                dtype: *dtype,
                shape: shape.clone(),
                strides: strides.clone(),
            },
            Held::Scalar { buf, dtype } => Held::Scalar {
                buf: buf.clone(),
                dtype: *dtype,
            },
            Held::Int(v) => Held::Int(*v),
            Held::Float(v) => Held::Float(*v),
        }
    }
}

struct CompiledRef {
    programs: Arc<Programs>,
    name: String,
    sdfg: Arc<Sdfg>,
}

/// A program with its arguments bound (`CompiledProgram.bind`).
#[pyclass(module = "sdflow._sdflow", name = "BoundProgram")]
struct BoundProgram {
    /// The CPU program's bound call; dropped before the program it borrows.
    call: Option<BoundCall<'static>>,
    _program: Option<Arc<CpuProgram>>,
    compiled: CompiledRef,
    /// The arguments given to `bind` (the arrays stay alive through them).
    held: BoundArgs,
    own_bound: Vec<String>,
    /// The arguments bound at compile time, as the bound call uses them (arrays shared
    /// with the compiled program, scalar buffers its own).
    bound_from: BoundArgs,
    floats: Vec<String>,
    /// Scalar arguments passed by value: name, buffer the bound call reads, type.
    scalars: Vec<(String, *mut u64, DType)>,
}

#[pymethods]
impl BoundProgram {
    /// Runs the program with the bound arguments; keyword arguments set new values of
    /// float symbols and of scalar arguments first (they stay set for later calls).
    #[pyo3(signature = (**kwargs))]
    fn __call__(&mut self, py: Python<'_>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<()> {
        if let Some(d) = kwargs {
            for (k, v) in d.iter() {
                let k: String = k.extract()?;
                self.set(py, &k, &v)?;
            }
        }
        match &mut self.call {
            Some(c) => without_gil(py, c, |c| c.call()),
            None => {
                let callable = self
                    .compiled
                    .programs
                    .program(&self.compiled.name)
                    .map_err(call_err)?;
                // SAFETY: both argument sets live in `self` for the call.
                let args = unsafe { self.held.add_to(self.bound_from.add_to(Args::new())) };
                without_gil(py, args, |args| callable.call(args))
            }
        }
    }
}

// SAFETY: the raw pointers of the bound call and of `scalars` point into memory this
// value owns (boxes in `held` and `bound_from`, the call's state) or keeps alive (the NumPy
// arrays through `held`, the compiled library through `_program`); none of it belongs to
// a thread. Python calls take the value mutably (pyo3 refuses a second borrow while one
// call runs), so it is used by one thread at a time, whichever; it has no method that
// takes it shared, so sharing a reference lets no thread read what another writes.
unsafe impl Send for BoundProgram {}
unsafe impl Sync for BoundProgram {}

impl BoundProgram {
    fn set(&mut self, _py: Python<'_>, name: &str, v: &Bound<'_, PyAny>) -> PyResult<()> {
        let program = &self.compiled.sdfg.name;
        if let Some((_, buf, dtype)) = self.scalars.iter().find(|(n, _, _)| n == name) {
            let val = value_of(v, *dtype, &format!("argument '{name}'"))
                .map_err(|e| call_err(e.to_string()))?;
            // SAFETY: the buffer is a box held in `self.held` or `self.bound_from`.
            unsafe { **buf = scalar_bits(val, *dtype) };
            return Ok(());
        }
        if self.floats.iter().any(|f| f == name) && !self.own_bound.iter().any(|b| b == name) {
            let x: f64 = v.extract().map_err(|_| {
                call_err(format!(
                    "program '{program}': '{name}' is a float symbol; pass a number"
                ))
            })?;
            return match &mut self.call {
                Some(c) => c.set_float(name, x).map_err(call_err),
                None => {
                    for (n, h) in &mut self.held.items {
                        if n == name {
                            *h = Held::Float(x);
                            return Ok(());
                        }
                    }
                    self.held.items.push((name.to_string(), Held::Float(x)));
                    Ok(())
                }
            };
        }
        Err(call_err(format!(
            "program '{program}': '{name}' cannot change in a bound call (only float symbols and scalar arguments given as numbers can); bind again"
        )))
    }
}

/// The version of the package.
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// One call of a step as Python gives it: the program, its containers' bindings, its
/// symbols' values.
/// A scratch container's extents and element strides.
type Layout = (Vec<i64>, Vec<i64>);

type StepCallArgs<'py> = (
    Py<Program>,
    BTreeMap<String, String>,
    BTreeMap<String, Bound<'py, PyAny>>,
);

/// A sequence of program calls as one program (`sdflow_orchestration::compose`): `data`
/// lists the step's containers `(name, dtype, ndim)` (each array's extents and strides
/// become the symbols `__<name>_size_<d>` and `__<name>_stride_<d>`, given by the arrays
/// passed), `symbols` its other symbols `(name, dtype)`, `calls` each call
/// `(program, {callee container: step container}, {callee symbol: value})`, a value being
/// an expression over the step's symbols (text) or an integer. `scratch` names containers
/// of `data` that are the step's own (`{name: (extents, element strides)}`): transients
/// of those constant extents and strides, not arguments of the step.
#[pyfunction]
#[pyo3(signature = (name, data, symbols, calls, scratch = None))]
fn compose(
    name: &str,
    data: Vec<(String, String, usize)>,
    symbols: Vec<(String, String)>,
    calls: Vec<StepCallArgs<'_>>,
    scratch: Option<BTreeMap<String, Layout>>,
) -> PyResult<Program> {
    use sdflow_orchestration::compose::{Step, StepCall};
    let dtype = |what: &str, t: &str| {
        DType::from_name(t).ok_or_else(|| {
            SdflowError::new_err(format!("step '{name}': {what}: unknown element type '{t}'"))
        })
    };
    let mut step = Step {
        name: name.to_string(),
        ..Step::default()
    };
    let scratch = scratch.unwrap_or_default();
    if let Some(n) = scratch
        .keys()
        .find(|n| !data.iter().any(|(d, _, _)| d == *n))
    {
        return Err(SdflowError::new_err(format!(
            "step '{name}': scratch container '{n}' is not one of the step's containers"
        )));
    }
    for (n, t, ndim) in &data {
        let dt = dtype(&format!("container '{n}'"), t)?;
        let desc = if let Some((extents, strides)) = scratch.get(n) {
            if extents.len() != *ndim || strides.len() != *ndim {
                return Err(SdflowError::new_err(format!(
                    "step '{name}': scratch container '{n}' has {ndim} dimension(s), given {} extent(s) and {} stride(s)",
                    extents.len(),
                    strides.len()
                )));
            }
            let mut a =
                sdflow_ir::Array::new(dt, extents.iter().map(|e| SymExpr::from(*e)).collect());
            a.strides = strides.iter().map(|e| SymExpr::from(*e)).collect();
            a.transient = true;
            DataDesc::Array(a)
        } else if *ndim == 0 {
            DataDesc::Scalar {
                dtype: dt,
                transient: false,
            }
        } else {
            let shape: Vec<SymExpr> = (0..*ndim)
                .map(|d| SymExpr::sym(&format!("__{n}_size_{d}")))
                .collect();
            let strides: Vec<SymExpr> = (0..*ndim)
                .map(|d| SymExpr::sym(&format!("__{n}_stride_{d}")))
                .collect();
            for d in 0..*ndim {
                step.symbols.push((format!("__{n}_size_{d}"), DType::I64));
                step.symbols.push((format!("__{n}_stride_{d}"), DType::I64));
            }
            let mut a = sdflow_ir::Array::new(dt, shape);
            a.strides = strides;
            DataDesc::Array(a)
        };
        step.data.push((n.clone(), desc));
    }
    for (n, t) in &symbols {
        step.symbols
            .push((n.clone(), dtype(&format!("symbol '{n}'"), t)?));
    }
    for (i, (prog, bindings, values)) in calls.iter().enumerate() {
        let mut mapping = BTreeMap::new();
        for (k, v) in values {
            let text = if let Ok(i) = v.extract::<i64>() {
                i.to_string()
            } else {
                v.extract::<String>().map_err(|_| {
                    SdflowError::new_err(format!(
                        "step '{name}', call {i}: the value of symbol '{k}' must be an integer or an expression (text)"
                    ))
                })?
            };
            let e = SymExpr::parse(&text).map_err(|e| {
                SdflowError::new_err(format!(
                    "step '{name}', call {i}: symbol '{k}' = '{text}': {e}"
                ))
            })?;
            mapping.insert(k.clone(), e);
        }
        step.calls.push(StepCall {
            sdfg: (*prog.get().sdfg).clone(),
            data: bindings.clone(),
            symbols: mapping,
        });
    }
    let sdfg = sdflow_orchestration::compose::compose(&step).map_err(sdflow_err)?;
    Ok(Program {
        sdfg: Arc::new(sdfg),
        origin: format!("<step '{name}'>"),
        optimized: false,
    })
}

/// The persistent build cache's directory: `SDFLOW_CACHE_DIR`, else `sdflow` in the
/// user's cache directory (as every sdflow build uses it).
#[pyfunction]
fn cache_dir() -> String {
    sdflow_codegen::Cache::from_env()
        .dir()
        .to_string_lossy()
        .into_owned()
}

#[pymodule]
fn _sdflow(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add_function(wrap_pyfunction!(cache_dir, m)?)?;
    m.add_function(wrap_pyfunction!(compose, m)?)?;
    m.add_class::<Program>()?;
    m.add_class::<Report>()?;
    m.add_class::<CompiledProgram>()?;
    m.add_class::<BoundProgram>()?;
    m.add_class::<device::Completion>()?;
    m.add_function(wrap_pyfunction!(device::_device_alloc, m)?)?;
    m.add_function(wrap_pyfunction!(device::_device_log, m)?)?;
    m.add("SdflowError", py.get_type::<SdflowError>())?;
    m.add("ValidationError", py.get_type::<ValidationError>())?;
    m.add("CallError", py.get_type::<CallError>())?;
    Ok(())
}
