//! A model component's programs, compiled once at initialization and called with only
//! the arguments that change (`docs/components.md`).
//!
//! - **Static** values (domain bounds, vertical sizes, configuration flags) are
//!   specialized at compile time: the program no longer has those symbols.
//! - **Variants** precompile one specialization per listed value of a flag and dispatch
//!   on the value passed at call time, without compiling; a value with no variant is an
//!   error, or compiles then when the program allows it.
//! - **Bound** arguments (metric fields, constants) are given once; calls pass the rest.
//! - Options come from the backend tag, the code and the configuration file
//!   ([`crate::config`]), per program; all programs and variants build in parallel.
//!
//! Why one file of this size: a component's programs, variants, static values and bound
//! arguments are one object whose build and call paths share its argument table.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::{Arc, Mutex, RwLock};

use rayon::prelude::*;
use sdflow_codegen::cuda::device::DeviceHandle;
use sdflow_codegen::{Args, Backend, CallError, Origin};
use sdflow_ir::interp::HostArray;
use sdflow_ir::{DType, Sdfg, Value};

use crate::config::{Config, Resolved, host_arch};
use crate::workflow::{Executable, StepContext, Workflow, WorkflowError};

/// One program of a component and how to compile it.
#[derive(Clone)]
pub struct ProgramSpec {
    name: String,
    sdfg: Arc<Sdfg>,
    statics: BTreeMap<String, Value>,
    variants: Vec<(String, Vec<Value>)>,
    bound_arrays: Vec<(String, HostArray)>,
    bound_ints: BTreeMap<String, i64>,
    bound_floats: BTreeMap<String, f64>,
    options: Vec<(String, String)>,
    on_demand: bool,
}

impl ProgramSpec {
    /// A program, named as the SDFG is.
    pub fn new(sdfg: impl Into<Arc<Sdfg>>) -> ProgramSpec {
        let sdfg = sdfg.into();
        ProgramSpec {
            name: sdfg.name.clone(),
            sdfg,
            statics: BTreeMap::new(),
            variants: Vec::new(),
            bound_arrays: Vec::new(),
            bound_ints: BTreeMap::new(),
            bound_floats: BTreeMap::new(),
            options: Vec::new(),
            on_demand: false,
        }
    }

    /// Calls it `name` (the name configuration files and errors use).
    pub fn named(mut self, name: &str) -> ProgramSpec {
        self.name = name.to_string();
        self
    }

    /// Symbol `name` is static: compiled in as `value`.
    pub fn static_value(mut self, name: &str, value: impl Into<Value>) -> ProgramSpec {
        self.statics.insert(name.to_string(), value.into());
        self
    }

    /// Integer or boolean symbol `name` gets one precompiled variant per value; calls
    /// pass its value (`Args::int`) and run that variant.
    pub fn variants<V: Into<Value>>(
        mut self,
        name: &str,
        values: impl IntoIterator<Item = V>,
    ) -> ProgramSpec {
        self.variants.push((
            name.to_string(),
            values.into_iter().map(Into::into).collect(),
        ));
        self
    }

    /// Array argument `name` is bound to `array` once; calls do not pass it.
    pub fn bind_array(mut self, name: &str, array: HostArray) -> ProgramSpec {
        self.bound_arrays.push((name.to_string(), array));
        self
    }

    /// Integer symbol `name` is bound to `value` (at run time, not compiled in).
    pub fn bind_int(mut self, name: &str, value: i64) -> ProgramSpec {
        self.bound_ints.insert(name.to_string(), value);
        self
    }

    /// Float symbol `name` is bound to `value`.
    pub fn bind_float(mut self, name: &str, value: f64) -> ProgramSpec {
        self.bound_floats.insert(name.to_string(), value);
        self
    }

    /// Sets an option in code (`key`, value as TOML: `"8"`, `"\"dynamic\""`); the
    /// configuration file overrides it.
    pub fn option(mut self, key: &str, toml_value: &str) -> ProgramSpec {
        self.options.push((key.to_string(), toml_value.to_string()));
        self
    }

    /// A call with a variant value that was not precompiled compiles it then (instead
    /// of failing).
    pub fn compile_on_demand(mut self, yes: bool) -> ProgramSpec {
        self.on_demand = yes;
        self
    }
}

/// Why a component could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ComponentError {
    /// A program's specification does not fit it.
    #[error("program '{program}': {message}")]
    Spec {
        /// The program.
        program: String,
        /// What is wrong.
        message: String,
    },
    /// Two programs share a name.
    #[error("two programs are called '{0}'")]
    Duplicate(String),
    /// A program's options could not be resolved.
    #[error("{0}")]
    Options(String),
    /// A workflow step failed.
    #[error(transparent)]
    Workflow(#[from] WorkflowError),
}

/// The programs of a model component, their backend tag, configuration and workflow.
pub struct Component {
    backend: Backend,
    config: Config,
    workflow: Arc<Workflow>,
    device: Option<DeviceHandle>,
    programs: Vec<ProgramSpec>,
}

/// What building one program variant did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildRecord {
    /// The program.
    pub program: String,
    /// The variant's values (`flag=1`), empty without variants.
    pub variant: String,
    /// Compiled now (`Built`) or loaded from the persistent cache; none for the
    /// interpreter.
    pub origin: Option<Origin>,
}

impl Component {
    /// A component whose programs run on `backend` (unless the configuration picks
    /// another for a program), with no configuration file.
    pub fn new(backend: Backend) -> Component {
        Component {
            backend,
            config: Config::empty(),
            workflow: Arc::new(Workflow::new()),
            device: None,
            programs: Vec::new(),
        }
    }

    /// Uses this configuration.
    pub fn config(mut self, config: Config) -> Component {
        self.config = config;
        self
    }

    /// Uses this workflow (custom steps or generators); it also keeps what it computed.
    pub fn workflow(mut self, workflow: Arc<Workflow>) -> Component {
        self.workflow = workflow;
        self
    }

    /// The GPU programs run on this device.
    pub fn device(mut self, device: DeviceHandle) -> Component {
        self.device = Some(device);
        self
    }

    /// Adds a program.
    pub fn with_program(mut self, spec: ProgramSpec) -> Component {
        self.programs.push(spec);
        self
    }

    /// The options each program gets, with their sources, without building.
    pub fn resolve(&self) -> Result<BTreeMap<String, Resolved>, ComponentError> {
        self.programs
            .iter()
            .map(|p| Ok((p.name.clone(), self.resolve_one(p)?)))
            .collect()
    }

    fn resolve_one(&self, p: &ProgramSpec) -> Result<Resolved, ComponentError> {
        let device = self.device.clone();
        let arch_of = move |b: Backend| match b {
            Backend::Gpu => match &device {
                Some(d) => {
                    let (major, minor) = d.lock().arch();
                    format!("sm_{major}{minor}")
                }
                None => "no device".to_string(),
            },
            _ => host_arch().to_string(),
        };
        self.config
            .resolve(&p.name, self.backend, &arch_of, &p.options)
            .map_err(ComponentError::Options)
    }

    /// Checks every specification, then builds every program and variant in parallel
    /// (one progress bar on a terminal).
    pub fn build(self) -> Result<Programs, ComponentError> {
        let mut seen = std::collections::BTreeSet::new();
        let mut plans = Vec::new();
        for p in &self.programs {
            if !seen.insert(p.name.clone()) {
                return Err(ComponentError::Duplicate(p.name.clone()));
            }
            check_spec(p)?;
            let resolved = self.resolve_one(p)?;
            let combos = combinations(p);
            plans.push((p, resolved, combos));
        }
        let jobs: Vec<(usize, Vec<i64>)> = plans
            .iter()
            .enumerate()
            .flat_map(|(k, (_, _, combos))| combos.iter().map(move |c| (k, c.clone())))
            .collect();
        let bar = (std::io::stderr().is_terminal() && jobs.len() > 1).then(|| {
            let b = indicatif::ProgressBar::new(jobs.len() as u64);
            b.set_message("compiling");
            b
        });
        let built: Vec<Result<Executable, WorkflowError>> = jobs
            .par_iter()
            .map(|(k, combo)| {
                let (p, resolved, _) = &plans[*k];
                let r = load_variant(&self.workflow, p, resolved, combo, self.device.as_ref());
                if let Some(b) = &bar {
                    b.inc(1);
                }
                r
            })
            .collect();
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        let mut per_program: Vec<BTreeMap<Vec<i64>, Executable>> =
            plans.iter().map(|_| BTreeMap::new()).collect();
        let mut records = Vec::new();
        for ((k, combo), r) in jobs.into_iter().zip(built) {
            let exe = r?;
            let p = plans[k].0;
            records.push(BuildRecord {
                program: p.name.clone(),
                variant: variant_text(p, &combo),
                origin: exe.origin(),
            });
            per_program[k].insert(combo, exe);
        }
        let mut callables = BTreeMap::new();
        for ((p, resolved, _), variants) in plans.into_iter().zip(per_program) {
            let mut bound = p.bound_arrays.clone();
            let mut ints = p.bound_ints.clone();
            for (k, v) in &p.statics {
                if !v.dtype().is_float() {
                    ints.insert(k.clone(), v.as_i64());
                }
            }
            if let Some(Executable::Cpu(prog)) = variants.values().next() {
                for (name, a) in &mut bound {
                    prog.lay_out(name, a, &ints);
                }
            }
            let symbol_types = p
                .sdfg
                .symbols
                .iter()
                .map(|(k, s)| (k.clone(), s.dtype))
                .collect();
            callables.insert(
                p.name.clone(),
                Callable {
                    name: p.name.clone(),
                    spec: p.clone(),
                    resolved,
                    variants: RwLock::new(variants),
                    bound: Mutex::new(bound),
                    symbol_types,
                    workflow: self.workflow.clone(),
                    device: self.device.clone(),
                },
            );
        }
        Ok(Programs { callables, records })
    }
}

/// The programs of a built component.
pub struct Programs {
    callables: BTreeMap<String, Callable>,
    /// What each program variant's build did (compiled, or loaded from the cache).
    pub records: Vec<BuildRecord>,
}

impl Programs {
    /// The program called `name`.
    pub fn get(&self, name: &str) -> Option<&Callable> {
        self.callables.get(name)
    }

    /// The program called `name`, or an error naming the programs there are.
    pub fn program(&self, name: &str) -> Result<&Callable, CallError> {
        self.get(name).ok_or_else(|| CallError::Bind {
            program: name.to_string(),
            message: format!(
                "no such program in the component (programs: {})",
                self.callables
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })
    }

    /// The programs' names.
    pub fn names(&self) -> Vec<&str> {
        self.callables.keys().map(String::as_str).collect()
    }

    /// How many program variants this build compiled (the rest came from the cache).
    pub fn compiled(&self) -> usize {
        self.records
            .iter()
            .filter(|r| r.origin == Some(Origin::Built))
            .count()
    }
}

/// A program of a component: call it with the arguments that are neither static nor
/// bound, and the value of each variant flag.
pub struct Callable {
    name: String,
    spec: ProgramSpec,
    resolved: Resolved,
    variants: RwLock<BTreeMap<Vec<i64>, Executable>>,
    bound: Mutex<Vec<(String, HostArray)>>,
    symbol_types: BTreeMap<String, DType>,
    workflow: Arc<Workflow>,
    device: Option<DeviceHandle>,
}

impl Callable {
    /// The program's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The options it was built with and where each came from.
    pub fn options(&self) -> &Resolved {
        &self.resolved
    }

    /// The variant values compiled so far (one value per variant flag, in the order
    /// they were declared).
    pub fn compiled_variants(&self) -> Vec<Vec<i64>> {
        self.read_variants().keys().cloned().collect()
    }

    fn read_variants(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<Vec<i64>, Executable>> {
        self.variants.read().unwrap_or_else(|e| e.into_inner())
    }

    fn err(&self, message: String) -> CallError {
        CallError::Bind {
            program: self.name.clone(),
            message,
        }
    }

    /// The executable of the variant the flags' values in `args` pick (taking them out
    /// of `args`), and `args` with the bound symbol values added; static values passed
    /// are errors. Bound arrays are not added (see [`Callable::call`]): this is for a
    /// caller that binds the executable's arguments once and calls it many times.
    pub fn select<'a>(&self, mut args: Args<'a>) -> Result<(Executable, Args<'a>), CallError> {
        for k in self.spec.statics.keys() {
            if args.has_symbol(k) || args.has_array(k) {
                return Err(self.err(format!(
                    "'{k}' is static (compiled in as {}); do not pass it",
                    self.spec.statics[k]
                )));
            }
        }
        let mut combo = Vec::with_capacity(self.spec.variants.len());
        for (name, values) in &self.spec.variants {
            let Some(v) = args.take_int(name) else {
                return Err(self.err(format!(
                    "missing the value of variant flag '{name}' (pass it as an int; variants: {})",
                    value_list(values)
                )));
            };
            let t = self.symbol_types.get(name).copied().unwrap_or(DType::I64);
            combo.push(Value::I64(v).cast(t).as_i64());
        }
        let exe = self.variant(&combo)?;
        for (k, v) in &self.spec.bound_ints {
            if args.has_symbol(k) {
                return Err(self.err(format!("'{k}' is bound; do not pass it")));
            }
            args = args.int(k, *v);
        }
        for (k, v) in &self.spec.bound_floats {
            if args.has_symbol(k) {
                return Err(self.err(format!("'{k}' is bound; do not pass it")));
            }
            args = args.float(k, *v);
        }
        Ok((exe, args))
    }

    /// Calls the program: picks the variant by the flags' values in `args`, adds the
    /// bound arguments, checks and runs.
    pub fn call(&self, args: Args<'_>) -> Result<(), CallError> {
        let (exe, args) = self.select(args)?;
        let mut bound = self.bound.lock().unwrap_or_else(|e| e.into_inner());
        // The bound arrays are borrowed for this call only.
        let mut call_args = shorten(args);
        for (k, a) in bound.iter_mut() {
            if call_args.has_array(k) {
                return Err(self.err(format!("'{k}' is bound; do not pass it")));
            }
            call_args = call_args.host(k, a);
        }
        let args = call_args;
        match &exe {
            Executable::Cpu(p) => p.bind(args)?.call(),
            Executable::Interp(sdfg) => args.run_copied(&self.symbol_types, |b| {
                // Every runtime symbol needs a value, as the compiled backends check it.
                sdflow_ir::bind::check_symbols(sdfg, &|k| b.symbols.contains_key(k))
                    .map_err(|e| self.err(e.0))?;
                sdflow_ir::interp::run(sdfg, b).map_err(|e| CallError::Run {
                    program: self.name.clone(),
                    message: e.to_string(),
                })
            }),
            Executable::Gpu(p) => args.run_copied(&self.symbol_types, |b| {
                p.lock().unwrap_or_else(|e| e.into_inner()).run_bindings(b)
            }),
        }
    }

    /// Calls the program on arrays another library allocated on the device (CuPy,
    /// `__cuda_array_interface__`), by address: picks the variant by the flags' values in
    /// `args` (symbol values only), adds the bound symbol
    /// values, checks the arrays ([`GpuProgram::call_foreign`]), orders the call after
    /// the streams `after`, and returns without waiting for the device: the
    /// program and the completion to wait on.
    ///
    /// # Safety
    ///
    /// As [`GpuProgram::call_foreign`]: the addresses describe device memory the caller
    /// owns, alive and left alone until the call completes.
    ///
    /// [`GpuProgram::call_foreign`]: sdflow_codegen::cuda::exec::GpuProgram::call_foreign
    pub unsafe fn call_foreign(
        &self,
        args: Args<'_>,
        arrays: &[sdflow_codegen::cuda::exec::ForeignArray<'_>],
        after: &[u64],
    ) -> Result<(GpuHandle, sdflow_codegen::cuda::exec::Completion), CallError> {
        let (exe, args) = self.select(args)?;
        let Executable::Gpu(p) = exe else {
            return Err(self.err(
                "device arrays need the cuda backend; this program was compiled for another".into(),
            ));
        };
        let bound = self.bound.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((k, _)) = bound.first() {
            return Err(self.err(format!(
                "'{k}' is bound as a host array; a call on device arrays takes every array on the device"
            )));
        }
        let (ints, floats) = args.symbols();
        let done = {
            let mut prog = p.lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: the caller's contract.
            unsafe { prog.call_foreign(arrays, ints, floats, after)? }
        };
        Ok((p, done))
    }

    /// The executable of a variant: precompiled, or compiled now when allowed.
    fn variant(&self, combo: &[i64]) -> Result<Executable, CallError> {
        if let Some(e) = self.read_variants().get(combo) {
            return Ok(e.clone());
        }
        if !self.spec.on_demand {
            let have: Vec<String> = self
                .read_variants()
                .keys()
                .map(|c| variant_text(&self.spec, c))
                .collect();
            return Err(self.err(format!(
                "no precompiled variant for {} (compiled: {}); list the value in variants or allow compile_on_demand",
                variant_text(&self.spec, combo),
                have.join("; ")
            )));
        }
        let exe = load_variant(
            &self.workflow,
            &self.spec,
            &self.resolved,
            combo,
            self.device.as_ref(),
        )
        .map_err(|e| {
            self.err(format!(
                "compiling {}: {e}",
                variant_text(&self.spec, combo)
            ))
        })?;
        self.variants
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(combo.to_vec(), exe.clone());
        Ok(exe)
    }
}

/// A program on a device, shared: [`Callable::call_foreign`] returns it with the
/// completion of the call, to wait on through it.
pub type GpuHandle = Arc<Mutex<sdflow_codegen::cuda::exec::GpuProgram>>;

/// The same arguments, borrowed for a shorter time.
fn shorten<'s, 'l: 's>(a: Args<'l>) -> Args<'s> {
    a
}

fn value_list(values: &[Value]) -> String {
    let v: Vec<String> = values.iter().map(|v| v.to_string()).collect();
    v.join(", ")
}

fn variant_text(p: &ProgramSpec, combo: &[i64]) -> String {
    let v: Vec<String> = p
        .variants
        .iter()
        .zip(combo)
        .map(|((n, _), v)| format!("{n}={v}"))
        .collect();
    v.join(", ")
}

/// Every combination of variant values (as the symbols' integers), in declaration
/// order; one empty combination without variants.
fn combinations(p: &ProgramSpec) -> Vec<Vec<i64>> {
    let mut out = vec![Vec::new()];
    for (name, values) in &p.variants {
        let t = p.sdfg.symbols.get(name).map_or(DType::I64, |s| s.dtype);
        let mut vals: Vec<i64> = values.iter().map(|v| v.cast(t).as_i64()).collect();
        vals.dedup();
        out = out
            .into_iter()
            .flat_map(|c| {
                vals.iter().map(move |v| {
                    let mut c = c.clone();
                    c.push(*v);
                    c
                })
            })
            .collect();
    }
    out
}

fn check_spec(p: &ProgramSpec) -> Result<(), ComponentError> {
    let e = |message: String| ComponentError::Spec {
        program: p.name.clone(),
        message,
    };
    let sdfg = &p.sdfg;
    let symbols: Vec<&str> = sdfg.symbols.keys().map(String::as_str).collect();
    for (name, values) in &p.variants {
        let Some(s) = sdfg.symbols.get(name) else {
            return Err(e(format!(
                "variant flag '{name}' is not a symbol of the program (its symbols: {})",
                symbols.join(", ")
            )));
        };
        if s.dtype.is_float() {
            return Err(e(format!(
                "variant flag '{name}' is a {} symbol; variants take integer or boolean flags",
                s.dtype
            )));
        }
        if values.is_empty() {
            return Err(e(format!("variant flag '{name}' lists no values")));
        }
        if values.iter().any(|v| v.dtype().is_float()) {
            return Err(e(format!("variant flag '{name}' lists a float value")));
        }
        if p.statics.contains_key(name) {
            return Err(e(format!("'{name}' is both static and a variant flag")));
        }
    }
    for name in p.bound_ints.keys() {
        p.check_bound_symbol(name, false)?;
    }
    for name in p.bound_floats.keys() {
        p.check_bound_symbol(name, true)?;
    }
    for (name, a) in &p.bound_arrays {
        p.check_bound_array(name, a.dtype(), a.shape())?;
    }
    Ok(())
}

impl ProgramSpec {
    fn spec_err(&self, message: String) -> ComponentError {
        ComponentError::Spec {
            program: self.name.clone(),
            message,
        }
    }

    /// Checks that symbol `name` may be bound (given once, for every call) to a value of
    /// the kind `float` says: a symbol of the program, of that kind, neither static nor a
    /// variant flag. [`Component::build`] checks [`ProgramSpec::bind_int`] and
    /// [`ProgramSpec::bind_float`] so; a caller that keeps bound values itself (the
    /// Python package's `bound`) checks them with this, for the same errors.
    pub fn check_bound_symbol(&self, name: &str, float: bool) -> Result<(), ComponentError> {
        let sdfg = &self.sdfg;
        let Some(s) = sdfg.symbols.get(name) else {
            let symbols: Vec<&str> = sdfg.symbols.keys().map(String::as_str).collect();
            return Err(self.spec_err(format!(
                "bound '{name}' is not a symbol of the program (its symbols: {})",
                symbols.join(", ")
            )));
        };
        if float != s.dtype.is_float() {
            return Err(self.spec_err(format!(
                "bound '{name}' is a {} symbol; bind it with bind_{}",
                s.dtype,
                if s.dtype.is_float() { "float" } else { "int" }
            )));
        }
        self.check_not_static(name)
    }

    /// `name` is neither static nor a variant flag (for a name that is bound).
    fn check_not_static(&self, name: &str) -> Result<(), ComponentError> {
        if let Some(v) = self.statics.get(name) {
            return Err(self.spec_err(format!(
                "'{name}' is bound and also static (= {v}); give it one way"
            )));
        }
        if self.variants.iter().any(|(n, _)| n == name) {
            return Err(self.spec_err(format!(
                "'{name}' is bound and also a variant flag; give it one way"
            )));
        }
        Ok(())
    }

    /// Checks that argument `name` may be bound to an array of element type `dtype` and
    /// extents `extents`: an argument of the program, of its declared element type, with
    /// its declared number of dimensions and the extents its static values give. As
    /// [`ProgramSpec::check_bound_symbol`], for [`ProgramSpec::bind_array`] and for
    /// callers that keep bound arrays themselves.
    pub fn check_bound_array(
        &self,
        name: &str,
        dtype: DType,
        extents: &[usize],
    ) -> Result<(), ComponentError> {
        let sdfg = &self.sdfg;
        let args = sdfg.arguments();
        if !args.iter().any(|a| a == name) || sdfg.symbols.contains_key(name) {
            return Err(self.spec_err(format!(
                "bound array '{name}' is not an argument of the program (its arguments: {})",
                args.join(", ")
            )));
        }
        self.check_not_static(name)?;
        let Some(desc) = sdfg.arrays.get(name) else {
            return Ok(());
        };
        if desc.dtype() != dtype {
            return Err(self.spec_err(format!(
                "bound array '{name}' has elements of type {dtype}, the program declares {}",
                desc.dtype()
            )));
        }
        let shape = desc.shape();
        if shape.is_empty() {
            // A scalar container: a one-element array of any shape is taken.
            return Ok(());
        }
        if shape.len() != extents.len() {
            return Err(self.spec_err(format!(
                "bound array '{name}' has {} dimension(s), the program declares {}",
                extents.len(),
                shape.len()
            )));
        }
        let ints: BTreeMap<String, i64> = sdfg
            .symbols
            .iter()
            .filter_map(|(k, s)| Some((k.clone(), s.value?)))
            .chain(self.statics.iter().map(|(k, v)| (k.clone(), *v)))
            .filter(|(_, v)| !v.dtype().is_float())
            .map(|(k, v)| (k, v.as_i64()))
            .collect();
        for (d, (e, &have)) in shape.iter().zip(extents).enumerate() {
            if let Ok(want) = e.eval_map(&ints)
                && want != have as i64
            {
                return Err(self.spec_err(format!(
                    "bound array '{name}' has extent {have} in dimension {d}, the program needs {want} ('{e}' with its static values)"
                )));
            }
        }
        Ok(())
    }
}

/// Specializes, optimizes, generates, compiles and loads one variant.
fn load_variant(
    workflow: &Workflow,
    p: &ProgramSpec,
    resolved: &Resolved,
    combo: &[i64],
    device: Option<&DeviceHandle>,
) -> Result<Executable, WorkflowError> {
    let mut statics = p.statics.clone();
    for ((name, _), v) in p.variants.iter().zip(combo) {
        statics.insert(name.clone(), Value::I64(*v));
    }
    let cx = StepContext {
        options: &resolved.options,
        statics: &statics,
    };
    let sdfg = if p.name != p.sdfg.name {
        let mut s = (*p.sdfg).clone();
        s.name = p.name.clone();
        Arc::new(s)
    } else {
        p.sdfg.clone()
    };
    workflow.load(&sdfg, &cx, device)
}
