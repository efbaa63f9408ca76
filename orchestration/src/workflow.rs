//! The toolchain as a workflow of typed steps: build or import (the caller's), then
//! **specialize** → **optimize** (SDFG to SDFG, a list of named [`SdfgStep`]s that can be
//! replaced or extended) → **generate** (a [`Generator`] per backend: C, CUDA, or the SDFG
//! itself for the interpreter) → **compile** → **load**.
//!
//! Every step is a pure function of its input and the program's [`Options`] and static
//! values, so each result is kept: in memory by the identity of the input (an `Arc`
//! already seen is not hashed again), then by content (the canonical JSON's hash, each
//! later step's key derived from its input's key and the options it reads), and compiled
//! artifacts persistently in the build cache. Every intermediate can be printed
//! (`sdflow show --emit sdfg|optimized|plan|c|cuda|report`).
//!
//! Why one file of this size: the steps, their content keys and memoization are one
//! mechanism; each step is short.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use sdflow_codegen::cuda::emit::{CudaEmitOptions, CudaProgram};
use sdflow_codegen::{
    Backend, Cache, CodegenError, CompiledProgram, CpuBackend, CpuUnit, EmitOptions, Origin,
};
use sdflow_ir::{Sdfg, Value, format};
use sdflow_transforms::{Pipeline, TransformError};

use crate::config::Options;

/// Why a workflow step failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum WorkflowError {
    /// Static values or options that do not fit the program.
    #[error("program '{program}': {message}")]
    Program {
        /// The program.
        program: String,
        /// What is wrong.
        message: String,
    },
    /// An SDFG step failed.
    #[error("program '{program}', step '{step}': {source}")]
    Transform {
        /// The program.
        program: String,
        /// The step.
        step: String,
        /// The error.
        source: TransformError,
    },
    /// Generating, compiling or loading failed.
    #[error("program '{program}': {source}")]
    Codegen {
        /// The program.
        program: String,
        /// The error.
        source: CodegenError,
    },
}

/// What a step sees besides its input.
#[derive(Clone, Copy, Debug)]
pub struct StepContext<'a> {
    /// The program's options.
    pub options: &'a Options,
    /// The static values (symbol name → value) the program is specialized for.
    pub statics: &'a BTreeMap<String, Value>,
}

/// A step from SDFG to SDFG.
pub trait SdfgStep: Send + Sync {
    /// The step's name (`specialize`, `optimize`, or a custom one).
    fn name(&self) -> &str;
    /// Everything of the context the result depends on, as text (part of the cache key).
    fn key(&self, cx: &StepContext<'_>) -> String;
    /// Runs the step: the new program and a log (a pass report, or nothing).
    fn run(&self, sdfg: &Sdfg, cx: &StepContext<'_>) -> Result<(Sdfg, String), WorkflowError>;
}

/// Static values become symbol values, then the `specialize` pass folds them: shapes,
/// ranges, conditions and tasklet code see constants.
pub struct SpecializeStep;

impl SdfgStep for SpecializeStep {
    fn name(&self) -> &str {
        "specialize"
    }

    fn key(&self, cx: &StepContext<'_>) -> String {
        let v: Vec<String> = cx
            .statics
            .iter()
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect();
        v.join(",")
    }

    fn run(&self, sdfg: &Sdfg, cx: &StepContext<'_>) -> Result<(Sdfg, String), WorkflowError> {
        let mut out = specialized(sdfg, cx.statics)?;
        if cx.statics.is_empty() {
            return Ok((out, String::new()));
        }
        let report = Pipeline::from_names(&["specialize"])
            .and_then(|p| p.run(&mut out))
            .map_err(|source| WorkflowError::Transform {
                program: sdfg.name.clone(),
                step: "specialize".into(),
                source,
            })?;
        Ok((out, report.to_string()))
    }
}

/// `sdfg` with the static values given to its symbols (checked: each names a symbol,
/// and the value has the symbol's kind).
pub fn specialized(sdfg: &Sdfg, statics: &BTreeMap<String, Value>) -> Result<Sdfg, WorkflowError> {
    let mut out = sdfg.clone();
    for (k, v) in statics {
        let Some(sym) = out.symbols.get_mut(k) else {
            let names: Vec<&str> = sdfg.symbols.keys().map(String::as_str).collect();
            return Err(WorkflowError::Program {
                program: sdfg.name.clone(),
                message: format!(
                    "static '{k}' is not a symbol of the program (its symbols: {})",
                    if names.is_empty() {
                        "none".into()
                    } else {
                        names.join(", ")
                    }
                ),
            });
        };
        let fits = match (sym.dtype.is_float(), v) {
            (true, _) => true,
            (false, Value::F32(_) | Value::F64(_)) => false,
            (false, _) => true,
        };
        if !fits {
            return Err(WorkflowError::Program {
                program: sdfg.name.clone(),
                message: format!("static '{k}': a {} symbol cannot take {v:?}", sym.dtype),
            });
        }
        sym.value = Some(v.cast(sym.dtype));
        // A static symbol is no longer an argument.
        out.arg_order.retain(|a| a != k);
    }
    // An extent the static values fix must not be negative (as the interpreter and the
    // compiled programs' argument check have it for values passed at run time).
    let ints: BTreeMap<String, i64> = out
        .symbols
        .iter()
        .filter(|(_, s)| !s.dtype.is_float())
        .filter_map(|(k, s)| Some((k.clone(), s.value?.as_i64())))
        .collect();
    for (name, desc) in &out.arrays {
        for e in desc.shape() {
            let used: Vec<String> = e
                .free_symbols()
                .into_iter()
                .filter(|x| statics.contains_key(x) && ints.contains_key(x))
                .collect();
            if used.is_empty() {
                continue;
            }
            if let Ok(v) = e.eval_map(&ints)
                && v < 0
            {
                let given: Vec<String> =
                    used.iter().map(|x| format!("{x} = {}", ints[x])).collect();
                return Err(WorkflowError::Program {
                    program: sdfg.name.clone(),
                    message: format!(
                        "static {}: extent '{e}' of '{name}' evaluates to {v}; an extent cannot be negative",
                        given.join(", ")
                    ),
                });
            }
        }
    }
    Ok(out)
}

/// The optimization pipeline the options choose: the backend's (CPU or GPU), or the
/// passes listed, less the ones disabled, with map fusion's cost model and the e-graph's
/// fast-math rules as set.
pub struct OptimizeStep;

impl SdfgStep for OptimizeStep {
    fn name(&self) -> &str {
        "optimize"
    }

    fn key(&self, cx: &StepContext<'_>) -> String {
        let o = cx.options;
        if !o.optimize {
            return "off".into();
        }
        format!(
            "{:?} {:?} {:?} {} {} {}",
            o.backend == Backend::Gpu,
            o.passes,
            o.disable,
            o.fast_math,
            o.fusion_balance,
            o.tile_rows
        )
    }

    fn run(&self, sdfg: &Sdfg, cx: &StepContext<'_>) -> Result<(Sdfg, String), WorkflowError> {
        let mut out = sdfg.clone();
        if !cx.options.optimize {
            return Ok((out, "optimization off\n".into()));
        }
        let terr = |source| WorkflowError::Transform {
            program: sdfg.name.clone(),
            step: "optimize".into(),
            source,
        };
        let report = cx
            .options
            .pipeline()
            .and_then(|p| p.run(&mut out))
            .map_err(terr)?;
        Ok((out, report.to_string()))
    }
}

/// Generated code (or, for the interpreter, the program itself) with what loading it
/// needs.
#[derive(Clone, Debug)]
pub enum Generated {
    /// The reference interpreter runs the SDFG.
    Interp(Arc<Sdfg>),
    /// A C translation unit.
    C(Box<CpuUnit>),
    /// A CUDA translation unit and the program it came from (its host side walks it).
    Cuda(Arc<Sdfg>, Box<CudaProgram>),
}

impl Generated {
    /// The generated text (C or CUDA; the SDFG as JSON for the interpreter).
    pub fn text(&self) -> String {
        match self {
            Generated::Interp(s) => format::to_json(s),
            Generated::C(u) => u.source.clone(),
            Generated::Cuda(_, p) => p.source.clone(),
        }
    }
}

/// The code generator of a backend.
pub trait Generator: Send + Sync {
    /// Its name (`c`, `cuda`, `interp`, or a custom one).
    fn name(&self) -> &str;
    /// Everything of the options its output depends on, as text.
    fn key(&self, options: &Options) -> String;
    /// Generates code for an optimized program.
    fn generate(&self, sdfg: &Arc<Sdfg>, options: &Options) -> Result<Generated, CodegenError>;
}

/// C with OpenMP ([`CpuBackend`]).
pub struct CGenerator;

impl Generator for CGenerator {
    fn name(&self) -> &str {
        "c"
    }
    fn key(&self, o: &Options) -> String {
        format!(
            "{} {} {} {}",
            o.schedule.name(),
            o.parallel_min_points,
            o.overlap_exchanges,
            o.lag_points
        )
    }
    fn generate(&self, sdfg: &Arc<Sdfg>, o: &Options) -> Result<Generated, CodegenError> {
        cpu_backend(o)
            .translate(sdfg)
            .map(|u| Generated::C(Box::new(u)))
    }
}

/// CUDA ([`sdflow_codegen::cuda::exec::CudaBackend`]).
pub struct CudaGenerator;

impl Generator for CudaGenerator {
    fn name(&self) -> &str {
        "cuda"
    }
    fn key(&self, o: &Options) -> String {
        o.block_size.to_string()
    }
    fn generate(&self, sdfg: &Arc<Sdfg>, o: &Options) -> Result<Generated, CodegenError> {
        let p = cuda_backend(o).generate(sdfg)?;
        Ok(Generated::Cuda(sdfg.clone(), Box::new(p)))
    }
}

/// The interpreter: no code.
pub struct InterpGenerator;

impl Generator for InterpGenerator {
    fn name(&self) -> &str {
        "interp"
    }
    fn key(&self, _: &Options) -> String {
        String::new()
    }
    fn generate(&self, sdfg: &Arc<Sdfg>, _: &Options) -> Result<Generated, CodegenError> {
        if let Err(problems) = sdfg.validate() {
            return Err(CodegenError::Invalid(
                problems.iter().map(|p| p.to_string()).collect(),
            ));
        }
        Ok(Generated::Interp(sdfg.clone()))
    }
}

fn cpu_backend(o: &Options) -> CpuBackend {
    CpuBackend {
        emit: EmitOptions {
            parallel_min_points: o.parallel_min_points,
            schedule: o.schedule,
            overlap_exchanges: o.overlap_exchanges,
            lag_points: o.lag_points,
        },
        ..CpuBackend::default()
    }
}

fn cuda_backend(o: &Options) -> sdflow_codegen::cuda::exec::CudaBackend {
    sdflow_codegen::cuda::exec::CudaBackend {
        emit: CudaEmitOptions {
            block_size: o.block_size,
            ..CudaEmitOptions::default()
        },
        ..Default::default()
    }
}

/// A loaded program, ready to call.
#[derive(Clone)]
pub enum Executable {
    /// Runs on the reference interpreter.
    Interp(Arc<Sdfg>),
    /// A compiled C library.
    Cpu(Arc<CompiledProgram>),
    /// A CUDA program on a device.
    Gpu(Arc<Mutex<sdflow_codegen::cuda::exec::GpuProgram>>),
}

impl Executable {
    /// Whether loading compiled it (`Built`) or found it in the persistent cache.
    pub fn origin(&self) -> Option<Origin> {
        match self {
            Executable::Interp(_) => None,
            Executable::Cpu(p) => Some(p.origin),
            Executable::Gpu(p) => Some(p.lock().unwrap_or_else(|e| e.into_inner()).origin),
        }
    }
}

/// One SDFG step's result.
#[derive(Clone, Debug)]
pub struct Stage {
    /// The step.
    pub step: String,
    /// The program after it.
    pub sdfg: Arc<Sdfg>,
    /// Its log (a pass report).
    pub log: String,
    /// Its content key.
    pub key: String,
}

#[derive(Default)]
struct Memo {
    /// Inputs seen, by address, with their content keys (the `Arc` is kept so the
    /// address is not reused).
    identity: HashMap<usize, (Arc<Sdfg>, String)>,
    stages: HashMap<String, Stage>,
    generated: HashMap<String, Arc<Generated>>,
    loaded: HashMap<String, Executable>,
}

/// The workflow: its SDFG steps in order, a generator per backend, and the memo of
/// everything computed.
pub struct Workflow {
    /// Where compiled artifacts are kept (default: `Cache::from_env()`).
    cache: Option<Cache>,
    steps: Vec<Arc<dyn SdfgStep>>,
    generators: BTreeMap<&'static str, Arc<dyn Generator>>,
    memo: Mutex<Memo>,
}

impl Default for Workflow {
    fn default() -> Self {
        Workflow::new()
    }
}

fn backend_key(b: Backend) -> &'static str {
    crate::config::tag(b)
}

impl Workflow {
    /// `specialize` then `optimize`; C for `cpu`, CUDA for `gpu`, the SDFG for `interp`.
    pub fn new() -> Workflow {
        let mut generators: BTreeMap<&'static str, Arc<dyn Generator>> = BTreeMap::new();
        generators.insert("cpu", Arc::new(CGenerator));
        generators.insert("gpu", Arc::new(CudaGenerator));
        generators.insert("interp", Arc::new(InterpGenerator));
        Workflow {
            cache: Some(Cache::from_env()),
            steps: vec![Arc::new(SpecializeStep), Arc::new(OptimizeStep)],
            generators,
            memo: Mutex::new(Memo::default()),
        }
    }

    /// Keeps compiled artifacts in `cache` (`None`: compile into a scratch directory
    /// every time).
    pub fn with_cache(mut self, cache: Option<Cache>) -> Workflow {
        self.cache = cache;
        self
    }

    /// The SDFG steps' names, in order.
    pub fn step_names(&self) -> Vec<String> {
        self.steps.iter().map(|s| s.name().to_string()).collect()
    }

    /// Replaces the SDFG step called `name` (a custom pass list, say).
    pub fn replace_step(mut self, name: &str, step: Arc<dyn SdfgStep>) -> Result<Workflow, String> {
        let k = self.position(name)?;
        self.steps[k] = step;
        Ok(self)
    }

    /// Inserts `step` after the SDFG step called `name`.
    pub fn insert_after(mut self, name: &str, step: Arc<dyn SdfgStep>) -> Result<Workflow, String> {
        let k = self.position(name)?;
        self.steps.insert(k + 1, step);
        Ok(self)
    }

    /// Uses `generator` for `backend`.
    pub fn with_generator(mut self, backend: Backend, generator: Arc<dyn Generator>) -> Workflow {
        self.generators.insert(backend_key(backend), generator);
        self
    }

    fn position(&self, name: &str) -> Result<usize, String> {
        self.steps
            .iter()
            .position(|s| s.name() == name)
            .ok_or_else(|| {
                format!(
                    "no workflow step '{name}' (steps: {})",
                    self.step_names().join(", ")
                )
            })
    }

    fn memo(&self) -> std::sync::MutexGuard<'_, Memo> {
        self.memo.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The content key of an input program: by identity when this `Arc` was seen,
    /// else the hash of its canonical JSON.
    pub fn input_key(&self, sdfg: &Arc<Sdfg>) -> String {
        let addr = Arc::as_ptr(sdfg) as usize;
        if let Some((_, k)) = self.memo().identity.get(&addr) {
            return k.clone();
        }
        let k = Cache::key(&["sdfg", &format::to_json(sdfg)]);
        self.memo().identity.insert(addr, (sdfg.clone(), k.clone()));
        k
    }

    /// Runs the SDFG steps (each result from the memo when computed before): the input
    /// first (step `input`), then one stage per step.
    pub fn stages(
        &self,
        sdfg: &Arc<Sdfg>,
        cx: &StepContext<'_>,
    ) -> Result<Vec<Stage>, WorkflowError> {
        let mut key = self.input_key(sdfg);
        let mut out = vec![Stage {
            step: "input".into(),
            sdfg: sdfg.clone(),
            log: String::new(),
            key: key.clone(),
        }];
        for step in &self.steps {
            key = Cache::key(&[&key, step.name(), &step.key(cx)]);
            let hit = self.memo().stages.get(&key).cloned();
            let stage = match hit {
                Some(s) => s,
                None => {
                    let prev = &out.last().expect("the input is a stage").sdfg;
                    let (next, log) = step.run(prev, cx)?;
                    let s = Stage {
                        step: step.name().to_string(),
                        sdfg: Arc::new(next),
                        log,
                        key: key.clone(),
                    };
                    self.memo().stages.insert(key.clone(), s.clone());
                    s
                }
            };
            out.push(stage);
        }
        Ok(out)
    }

    /// The last stage's program (specialized and optimized).
    pub fn optimized(
        &self,
        sdfg: &Arc<Sdfg>,
        cx: &StepContext<'_>,
    ) -> Result<Stage, WorkflowError> {
        Ok(self.stages(sdfg, cx)?.pop().expect("the input is a stage"))
    }

    /// The generate step: code for the options' backend, from the optimized program.
    pub fn generate(
        &self,
        sdfg: &Arc<Sdfg>,
        cx: &StepContext<'_>,
    ) -> Result<(Stage, Arc<Generated>, String), WorkflowError> {
        let stage = self.optimized(sdfg, cx)?;
        let gen_ = self
            .generators
            .get(backend_key(cx.options.backend))
            .cloned()
            .ok_or_else(|| WorkflowError::Program {
                program: sdfg.name.clone(),
                message: format!(
                    "no generator for the {} backend",
                    backend_key(cx.options.backend)
                ),
            })?;
        let key = Cache::key(&[&stage.key, gen_.name(), &gen_.key(cx.options)]);
        if let Some(g) = self.memo().generated.get(&key).cloned() {
            return Ok((stage, g, key));
        }
        let g = Arc::new(gen_.generate(&stage.sdfg, cx.options).map_err(|source| {
            WorkflowError::Codegen {
                program: sdfg.name.clone(),
                source,
            }
        })?);
        self.memo().generated.insert(key.clone(), g.clone());
        Ok((stage, g, key))
    }

    /// Compile and load: the program ready to call (compiled through the persistent
    /// cache; a GPU program needs `device`).
    pub fn load(
        &self,
        sdfg: &Arc<Sdfg>,
        cx: &StepContext<'_>,
        device: Option<&sdflow_codegen::cuda::device::DeviceHandle>,
    ) -> Result<Executable, WorkflowError> {
        let (_, generated, key) = self.generate(sdfg, cx)?;
        let o = cx.options;
        let key = format!("{key} threads={} graphs={}", o.threads, o.graphs);
        if let Some(e) = self.memo().loaded.get(&key).cloned() {
            return Ok(e);
        }
        let cerr = |source| WorkflowError::Codegen {
            program: sdfg.name.clone(),
            source,
        };
        let exe = match &*generated {
            Generated::Interp(s) => Executable::Interp(s.clone()),
            Generated::C(unit) => {
                let backend = CpuBackend {
                    cache: self.cache.clone(),
                    ..cpu_backend(o)
                };
                let (lib, origin) = backend.compile_unit(unit).map_err(cerr)?;
                let p = unit.load(&lib, origin).map_err(cerr)?;
                if o.threads > 0 {
                    p.set_threads(o.threads);
                }
                Executable::Cpu(Arc::new(p))
            }
            Generated::Cuda(s, prog) => {
                let Some(device) = device else {
                    return Err(WorkflowError::Program {
                        program: sdfg.name.clone(),
                        message: "the gpu backend needs a device (none was given)".into(),
                    });
                };
                let cb = sdflow_codegen::cuda::exec::CudaBackend {
                    cache: self.cache.clone(),
                    ..cuda_backend(o)
                };
                let (image, origin) = cb.image_for(prog, device).map_err(cerr)?;
                let mut p = sdflow_codegen::cuda::exec::GpuProgram::load(
                    s,
                    (**prog).clone(),
                    &image,
                    device,
                    origin,
                )
                .map_err(cerr)?;
                p.set_graphs(o.graphs);
                Executable::Gpu(Arc::new(Mutex::new(p)))
            }
        };
        self.memo().loaded.insert(key, exe.clone());
        Ok(exe)
    }

    /// Forgets everything computed (the persistent build cache stays).
    pub fn clear(&self) {
        *self.memo() = Memo::default();
    }
}
