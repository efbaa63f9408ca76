//! Host orchestration of a compiled CUDA program: the plan's control flow runs on the host
//! and enqueues every kernel of a call on the device's one stream, in program order,
//! and returns. Nothing in a call waits for the device, except where host control flow
//! reads a value the dataflow wrote (a sync point the plan names and
//! [`GpuProgram::sync_points`] counts). Completion is a [`Completion`]: wait on it to
//! learn whether the call failed (the device's error record, turned into the
//! interpreter's message).
//!
//! Arguments are [`DeviceArray`]s, checked once by [`GpuProgram::bind`]; the
//! [`GpuCall`] it returns is enqueued by [`GpuProgram::call_bound`] as often as a model
//! needs. Float symbols reach the kernels through a small device buffer, so a call that
//! changes only them (a time step `dt`, a coefficient) replays the graph captured before.
//!
//! Why one file of this size: the backend (build, cache, load), the program's binding
//! and the host walk of a call share the kernel table and the symbol environment of a
//! call; the device layer is `cuda/device/`, argument checks `args.rs`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sdflow_ir::interp::Bindings;
use sdflow_ir::symexpr::EvalError;
use sdflow_ir::{DType, DataDesc, Sdfg, SymExpr};

use super::array::{Buffer, DeviceArray};
use super::device::{DevPtr, Device, DeviceHandle, Event, GraphId, KernelArg, KernelId};
use super::emit::{CudaEmitOptions, CudaProgram, STATUS_PEEK, STATUS_READ, emit_cuda};
use super::exchange::Exchanges;
use super::nvrtc::{self, Arch, NvrtcOptions, Output};
use crate::CodegenError;
use crate::args::{
    CheckedArgs, PassedArray, Spans, byte_span, check_arguments, declared_order, declared_orders,
    static_ints,
};
use crate::cache::{Artifact, Cache, Origin};
use crate::cfamily::sites::RECORD_LEN;
use crate::plan::{CheckPolicy, Flow, Plan, StepKind};
use crate::program::CallError;

/// The status's first two words as `sdf_status_peek` writes them (the error flag and the
/// error record's `failed` word), nonzero once the program failed: what the host mirrors
/// after each call.
const ERROR_FLAG_BYTES: usize = 16;

/// Code generation, NVRTC compilation and caching for CUDA.
#[derive(Clone, Debug)]
pub struct CudaBackend {
    /// Printer options (block size).
    pub emit: CudaEmitOptions,
    /// NVRTC options beyond the fixed ones (`--fmad=false`, precise division and square
    /// root); the architecture is the device's.
    pub extra_options: Vec<String>,
    /// Where device images are cached (`None`: compile every time).
    pub cache: Option<Cache>,
}

impl Default for CudaBackend {
    fn default() -> Self {
        CudaBackend {
            emit: CudaEmitOptions::default(),
            extra_options: Vec::new(),
            cache: Some(Cache::from_env()),
        }
    }
}

impl CudaBackend {
    /// The CUDA program of `sdfg` (validated first).
    pub fn generate(&self, sdfg: &Sdfg) -> Result<CudaProgram, CodegenError> {
        if let Err(problems) = sdfg.validate() {
            return Err(CodegenError::Invalid(
                problems.iter().map(|p| p.to_string()).collect(),
            ));
        }
        emit_cuda(sdfg, &self.emit)
    }

    /// NVRTC's options for `arch`: `--device-int128` (the checked range arithmetic uses
    /// 128-bit integers) and the extra ones.
    pub fn nvrtc_options(&self, arch: Arch) -> NvrtcOptions {
        let mut extra = vec!["--device-int128".to_string()];
        extra.extend(self.extra_options.iter().cloned());
        NvrtcOptions { arch, extra }
    }

    /// Compiles `prog` for `arch` to a CUBIN (machine code for exactly that device, which
    /// any driver that runs the device loads; PTX from a newer NVRTC would be refused by
    /// an older driver), through the cache.
    pub fn compile(
        &self,
        prog: &CudaProgram,
        arch: Arch,
    ) -> Result<(Vec<u8>, Origin), CodegenError> {
        let opts = self.nvrtc_options(arch);
        let build = |src: &std::path::Path, out: &std::path::Path| {
            let c =
                nvrtc::compile(&prog.source, "program.cu", &opts, Output::Cubin).map_err(|e| {
                    match e {
                        CodegenError::Compiler { message, .. } => CodegenError::Compiler {
                            message,
                            source_file: Some(src.to_path_buf()),
                        },
                        other => other,
                    }
                })?;
            std::fs::write(out, &c.image)
                .map_err(|e| CodegenError::Cache(format!("{}: {e}", out.display())))
        };
        match &self.cache {
            Some(cache) => {
                let version = nvrtc::available().map(|i| i.to_string()).map_err(|e| {
                    CodegenError::Compiler {
                        message: e,
                        source_file: None,
                    }
                })?;
                let key = Cache::key(&[
                    &prog.source,
                    &opts.arguments(Output::Cubin).join(" "),
                    &version,
                    env!("CARGO_PKG_VERSION"),
                ]);
                let (path, origin) =
                    cache.get_or_build_artifact(&key, Artifact::CUDA_IMAGE, &prog.source, build)?;
                let image = std::fs::read(&path)
                    .map_err(|e| CodegenError::Cache(format!("{}: {e}", path.display())))?;
                Ok((image, origin))
            }
            None => {
                let c = nvrtc::compile(&prog.source, "program.cu", &opts, Output::Cubin)?;
                Ok((c.image, Origin::Built))
            }
        }
    }

    /// Generates, compiles (or finds in the cache) and loads `sdfg` on `device`.
    pub fn build(&self, sdfg: &Sdfg, device: &DeviceHandle) -> Result<GpuProgram, CodegenError> {
        let prog = self.generate(sdfg)?;
        let (image, origin) = self.image_for(&prog, device)?;
        GpuProgram::load(sdfg, prog, &image, device, origin)
    }

    /// What `device` loads for `prog`: the CUBIN for its architecture ([`Self::compile`]),
    /// or, for the emulated device, the host library built from the CUDA text
    /// ([`super::device::build_library`]); both through the cache, and without holding
    /// the device, so that builds for one device run in parallel.
    pub fn image_for(
        &self,
        prog: &CudaProgram,
        device: &DeviceHandle,
    ) -> Result<(Vec<u8>, Origin), CodegenError> {
        let ((major, minor), host_library) = {
            let d = device.lock();
            (d.arch(), d.host_library())
        };
        if host_library {
            let mut names: Vec<String> = prog.kernels.iter().map(|k| k.name.clone()).collect();
            names.push(STATUS_READ.into());
            names.push(STATUS_PEEK.into());
            return super::device::build_library(&prog.source, &names, self.cache.as_ref());
        }
        self.compile(prog, Arch { major, minor })
    }
}

/// A program compiled for and loaded on a device, its transients allocated once.
pub struct GpuProgram {
    prog: CudaProgram,
    device: DeviceHandle,
    /// Tells bound calls apart from other programs'.
    id: u64,
    kernels: Vec<KernelId>,
    /// Per state (in plan order) and step: its kernels' positions in `kernels`.
    step_kernels: Vec<Vec<StepKernels>>,
    read: KernelId,
    /// The kernel that copies the error flags to `status` without clearing them.
    peek: KernelId,
    /// Device storage of the persistent transients, in `params.arrays` order after the
    /// arguments.
    transients: Vec<DevPtr>,
    transient_descs: Vec<DataDesc>,
    /// The bytes of each of `transients`.
    transient_bytes: Vec<usize>,
    /// The runtime symbol values the transients are allocated for.
    allocated_for: Option<Vec<i64>>,
    /// The float symbols' values, read by every kernel (absent without float symbols).
    floats_buffer: Option<DevPtr>,
    /// The bits last copied into `floats_buffer`.
    floats_written: Option<Vec<u64>>,
    /// Replay captured graphs.
    graphs: bool,
    graph_cache: BTreeMap<GraphKey, GraphId>,
    status: DevPtr,
    statics: BTreeMap<String, i64>,
    /// Element types of host scalars control flow reads.
    scalar_types: BTreeMap<String, DType>,
    /// The program's name.
    pub name: String,
    /// Whether this load compiled the image or found it in the cache.
    pub origin: Origin,
    /// The halo exchanges' host side (programs that exchange halos).
    exchanges: Option<Exchanges>,
}

/// The kernels of one step (positions in `CudaProgram::kernels`): the unchecked ones,
/// launched in order (`parts` of them from `first`: one, or a grid per copy of a step
/// of several copies); where the map body's callees skip their checks under a bind-time
/// condition, the unchecked kernel whose callees check themselves; and, where the
/// in-bounds condition may fail, the checked one.
#[derive(Clone, Copy, Debug, Default)]
struct StepKernels {
    first: Option<usize>,
    parts: usize,
    own: Option<usize>,
    checked: Option<usize>,
}

impl StepKernels {
    /// The kernels to launch, in order: the unchecked ones when `bound.map` (or when
    /// there is no checked one), else the checked one; of the unchecked ones, the one
    /// whose callees check themselves where `bound.callees` is false.
    fn launches(&self, bound: Bound) -> std::ops::Range<usize> {
        match (bound.map, self.checked, self.first) {
            (false, Some(c), _) => c..c + 1,
            (_, _, Some(f)) => match self.own {
                Some(o) if !bound.callees => o..o + 1,
                _ => f..f + self.parts,
            },
            (_, Some(c), None) => c..c + 1,
            (_, None, None) => 0..0,
        }
    }
}

/// What decides which of a step's kernels runs: whether its in-bounds condition holds
/// (the unchecked kernels run), and whether its callee condition does (their callees
/// skip their checks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Bound {
    map: bool,
    callees: bool,
}

/// Captured graphs kept per program; past this the cache starts again.
const MAX_GRAPHS: usize = 64;

/// What a captured call depends on: its launches' parameters and grids are baked into
/// the graph. Float symbols are not: kernels read them from the program's buffer.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct GraphKey {
    arrays: Vec<DevPtr>,
    ints: Vec<i64>,
}

/// Per state of the plan (program order) and per step, whether the step's bind-time
/// conditions ([`CheckPolicy::AtBind`]: its in-bounds condition, its callee condition)
/// hold for a call's integer symbols: evaluated once when the call is bound, read at
/// every launch of the step (`false` for the conditions of other policies, which are
/// not read).
#[derive(Clone, Debug, Default)]
struct BindResults(Vec<Vec<Bound>>);

impl BindResults {
    /// The results for `plan` with the symbol values `env`.
    fn of(plan: &Plan, env: &BTreeMap<String, i64>) -> BindResults {
        BindResults(
            plan.body
                .states()
                .iter()
                .map(|sp| {
                    sp.steps
                        .iter()
                        .map(|st| {
                            let at_bind = |p: &CheckPolicy| {
                                matches!(p, CheckPolicy::AtBind(_)) && p.unchecked_with(env)
                            };
                            Bound {
                                map: at_bind(&st.check),
                                callees: at_bind(&st.callees),
                            }
                        })
                        .collect()
                })
                .collect(),
        )
    }
}

/// The end of an enqueued call: wait on it to learn its outcome.
#[derive(Debug)]
pub struct Completion {
    event: Event,
}

impl Completion {
    /// Whether the call's work is done, without waiting.
    pub fn is_done(&self) -> bool {
        self.event.is_done()
    }
}

/// An array another library allocated on the device, as [`GpuProgram::call_foreign`]
/// takes it.
#[derive(Clone, Copy, Debug)]
pub struct ForeignArray<'a> {
    /// The argument's name.
    pub name: &'a str,
    /// The address of element `[0, 0, …]`.
    pub ptr: DevPtr,
    /// Its element type.
    pub dtype: DType,
    /// Its extents.
    pub extents: &'a [usize],
    /// Its strides, in elements.
    pub strides: &'a [isize],
}

impl ForeignArray<'_> {
    /// The byte range its elements span (empty for an array without elements).
    fn span(&self) -> (u64, u64) {
        byte_span(self.ptr, self.dtype, self.extents, self.strides)
    }
}

/// Arguments of a call on device arrays, by name: arrays and symbol values (integer
/// symbols a shape names need not be given).
#[derive(Default)]
pub struct DeviceArgs<'a> {
    arrays: Vec<(String, &'a DeviceArray)>,
    ints: BTreeMap<String, i64>,
    floats: BTreeMap<String, f64>,
}

impl<'a> DeviceArgs<'a> {
    /// No arguments yet.
    pub fn new() -> Self {
        DeviceArgs::default()
    }

    /// An array (or scalar) argument.
    pub fn array(mut self, name: &str, a: &'a DeviceArray) -> Self {
        self.arrays.push((name.to_string(), a));
        self
    }

    /// An integer symbol's value.
    pub fn int(mut self, name: &str, v: i64) -> Self {
        self.ints.insert(name.to_string(), v);
        self
    }

    /// A float symbol's value.
    pub fn float(mut self, name: &str, v: f64) -> Self {
        self.floats.insert(name.to_string(), v);
        self
    }
}

/// A call checked against its program once ([`GpuProgram::bind`]) and enqueued by
/// [`GpuProgram::call_bound`] as often as needed. It keeps its arrays' memory alive.
/// Float symbols may change between calls ([`GpuCall::set_float`]) without a new graph.
pub struct GpuCall {
    program: u64,
    program_name: String,
    key: GraphKey,
    bound: BindResults,
    float_names: Vec<String>,
    floats: Vec<f64>,
    _arrays: Vec<Arc<Buffer>>,
}

impl GpuCall {
    /// Sets a float symbol for the next calls.
    pub fn set_float(&mut self, name: &str, v: f64) -> Result<(), CallError> {
        match self.float_names.iter().position(|n| n == name) {
            Some(k) => {
                self.floats[k] = v;
                Ok(())
            }
            None => Err(CallError::Bind {
                program: self.program_name.clone(),
                message: format!("it has no float symbol '{name}'"),
            }),
        }
    }

    /// The integer symbols' values, in the signature's order.
    pub fn ints(&self) -> &[i64] {
        &self.key.ints
    }

    /// The float symbols' values, in the signature's order.
    pub fn floats(&self) -> &[f64] {
        &self.floats
    }
}

/// Distinct ids of loaded programs.
static NEXT_PROGRAM: AtomicU64 = AtomicU64::new(1);

fn load_err(e: impl std::fmt::Display) -> CodegenError {
    CodegenError::Load(e.to_string())
}

impl GpuProgram {
    /// Loads the compiled `image` of `prog` (printed from `sdfg`) on `device`. Persistent
    /// transients are allocated once: at load when their shapes are static, else at the
    /// first call, and again only when a call's symbol values need more storage.
    pub fn load(
        sdfg: &Sdfg,
        prog: CudaProgram,
        image: &[u8],
        device: &DeviceHandle,
        origin: Origin,
    ) -> Result<GpuProgram, CodegenError> {
        let mut names: Vec<String> = prog.kernels.iter().map(|k| k.name.clone()).collect();
        names.push(STATUS_READ.into());
        names.push(STATUS_PEEK.into());
        let statics = static_ints(sdfg);
        let nargs = prog.plan.signature.arrays.len();
        let transient_descs: Vec<DataDesc> = prog.params.arrays[nargs..]
            .iter()
            .map(|n| sdfg.arrays[n].clone())
            .collect();
        let (ids, status, floats_buffer) = {
            let mut dev = device.lock();
            let ids = dev.load_module(image, &names).map_err(load_err)?;
            let status = dev.alloc_zeroed((1 + RECORD_LEN) * 8).map_err(load_err)?;
            if let Err(e) = dev.mirror(status, ERROR_FLAG_BYTES) {
                dev.free(status);
                return Err(load_err(e));
            }
            let floats = prog.params.floats.len();
            let floats_buffer = if floats > 0 {
                match dev.alloc_zeroed(floats * 8) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        dev.free(status);
                        return Err(load_err(e));
                    }
                }
            } else {
                None
            };
            (ids, status, floats_buffer)
        };
        let scalar_types = sdfg
            .arrays
            .iter()
            .filter(|(_, d)| matches!(d, DataDesc::Scalar { .. }))
            .map(|(n, d)| (n.clone(), d.dtype()))
            .collect();
        let k = prog.kernels.len();
        let mut step_kernels: Vec<Vec<StepKernels>> = prog
            .plan
            .body
            .states()
            .iter()
            .map(|sp| vec![StepKernels::default(); sp.steps.len()])
            .collect();
        for (i, spec) in prog.kernels.iter().enumerate() {
            let slot = &mut step_kernels[spec.state][spec.step];
            if spec.checked {
                slot.checked = Some(i);
            } else if spec.own_checks {
                slot.own = Some(i);
            } else {
                // A step's unchecked kernels are consecutive.
                slot.first.get_or_insert(i);
                slot.parts += 1;
            }
        }
        let mut p = GpuProgram {
            kernels: ids[..k].to_vec(),
            step_kernels,
            read: ids[k],
            peek: ids[k + 1],
            transients: Vec::new(),
            transient_descs,
            transient_bytes: Vec::new(),
            floats_buffer,
            floats_written: None,
            graphs: true,
            graph_cache: BTreeMap::new(),
            allocated_for: None,
            status,
            statics,
            scalar_types,
            name: sdfg.name.clone(),
            origin,
            prog,
            device: device.clone(),
            id: NEXT_PROGRAM.fetch_add(1, Ordering::Relaxed),
            exchanges: None,
        };
        // MPI contexts, after every rank checked that all run this program.
        p.exchanges = Exchanges::open(sdfg, &p.prog)?;
        // Transients whose shapes need no runtime symbol are allocated now; the others at
        // the first call (again only when the symbol values change).
        if p.prog.plan.signature.ints.is_empty() {
            let dev = p.device.clone();
            p.allocate(&mut **dev.lock(), &[])
                .map_err(|e| CodegenError::Load(e.to_string()))?;
        }
        Ok(p)
    }

    /// Allocates the transients for the runtime symbol values `ints`, unless they are
    /// allocated for those values already.
    fn allocate(&mut self, device: &mut dyn Device, ints: &[i64]) -> Result<(), CallError> {
        if self.allocated_for.as_deref() == Some(ints) {
            return Ok(());
        }
        let env = self.symbol_env(ints);
        let names = &self.prog.params.arrays[self.prog.plan.signature.arrays.len()..];
        let mut need = Vec::with_capacity(names.len());
        for (name, d) in names.iter().zip(&self.transient_descs) {
            let elems =
                elements(d, &env).map_err(|e| self.run_err(format!("transient '{name}': {e}")))?;
            need.push((elems.max(1) as usize) * d.dtype().size_bytes());
        }
        // Storage large enough stays: a program called in turn with other symbol values
        // (one program on fields of two sizes in each model step) neither frees nor
        // allocates, and keeps the graphs captured for each.
        if self.transients.len() == need.len()
            && self
                .transient_bytes
                .iter()
                .zip(&need)
                .all(|(have, n)| have >= n)
        {
            self.allocated_for = Some(ints.to_vec());
            return Ok(());
        }
        for p in self.transients.drain(..) {
            device.free(p);
        }
        // Captured graphs hold the old pointers.
        self.graph_cache.clear();
        self.allocated_for = None;
        // At least what was there: sizes only grow, so alternating values settle.
        let grown: Vec<usize> = need
            .iter()
            .enumerate()
            .map(|(k, &n)| n.max(self.transient_bytes.get(k).copied().unwrap_or(0)))
            .collect();
        self.transient_bytes.clear();
        for (name, &bytes) in names.iter().zip(&grown) {
            let p = device
                .alloc_zeroed(bytes)
                .map_err(|e| self.run_err(format!("transient '{name}': {e}")))?;
            self.transients.push(p);
            self.transient_bytes.push(bytes);
        }
        self.allocated_for = Some(ints.to_vec());
        Ok(())
    }

    /// The generated program (source, plan, kernels).
    pub fn program(&self) -> &CudaProgram {
        &self.prog
    }

    /// MPI, for a program that exchanges halos (rank, size, barrier, gather, abort);
    /// `None` for the others.
    pub fn mpi(&self) -> Option<crate::mpi::Mpi> {
        self.exchanges.as_ref().map(|x| x.mpi())
    }

    /// The device it runs on; arrays for its calls are allocated there.
    pub fn device(&self) -> &DeviceHandle {
        &self.device
    }

    /// The plan's sync points: places where host control flow waits for a device value.
    pub fn sync_points(&self) -> usize {
        self.prog.plan.sync_points()
    }

    fn run_err(&self, message: String) -> CallError {
        CallError::Run {
            program: self.name.clone(),
            message,
        }
    }

    fn bind_err(&self, message: String) -> CallError {
        CallError::Bind {
            program: self.name.clone(),
            message,
        }
    }

    /// A copy of `a` on the program's device, laid out as the program declares argument
    /// `name` (row-major where the declared strides do not say, or need symbols that
    /// `a` alone does not give).
    pub fn upload(
        &self,
        name: &str,
        a: &sdflow_ir::interp::HostArray,
    ) -> Result<DeviceArray, CallError> {
        let sig = &self.prog.plan.signature;
        let spec = sig
            .arrays
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| self.bind_err(format!("it has no array argument '{name}'")))?;
        let mut values = self.statics.clone();
        let layout = sdflow_ir::bind::ArgLayout {
            name,
            shape: &spec.shape,
            strides: &spec.strides,
            extents: a.shape(),
            elem_strides: None,
        };
        sdflow_ir::bind::infer_symbols(
            &[layout],
            &|s| sig.is_int(s),
            &|s| sig.default_of(s),
            &mut values,
        )
        .map_err(|e| self.bind_err(e.0))?;
        let order = declared_order(spec, a.shape(), &values);
        DeviceArray::from_host_in(&self.device, a, &order)
            .map_err(|e| self.run_err(format!("'{name}': {e}")))
    }

    /// Checks `args` against the program once: names, element types, shapes, strides,
    /// the device they live on, no array passed twice; symbol values given or implied
    /// by the arrays.
    pub fn bind(&self, args: DeviceArgs<'_>) -> Result<GpuCall, CallError> {
        self.bind_inner(args).map_err(|e| self.fail(e))
    }

    /// An error of a program that exchanges halos, running on several ranks, stops every
    /// rank: the others would wait for this one at its next exchange. Its message goes
    /// to standard error, led by the rank, and MPI aborts the run (as the C backend's
    /// `CompiledProgram` does). Elsewhere `e` is returned.
    fn fail(&self, e: CallError) -> CallError {
        if let Some(m) = self.mpi()
            && let Ok((rank, size)) = m.world()
            && size > 1
        {
            m.abort_with(rank, &e);
        }
        e
    }

    fn bind_inner(&self, args: DeviceArgs<'_>) -> Result<GpuCall, CallError> {
        let sig = &self.prog.plan.signature;
        let passed: Vec<PassedArray<'_>> = args
            .arrays
            .iter()
            .map(|(name, a)| PassedArray {
                name,
                dtype: a.dtype(),
                shape: a.extents(),
                strides: a.strides(),
            })
            .collect();
        let CheckedArgs {
            ints,
            floats,
            arrays,
            ..
        } = check_arguments(sig, &self.statics, &passed, &args.ints, &args.floats)
            .map_err(|m| self.bind_err(m))?;
        let mut ptrs = Vec::new();
        let mut keep = Vec::new();
        for (spec, (k, _, _)) in sig.arrays.iter().zip(&arrays) {
            let (_, a) = &args.arrays[*k];
            if !a.device().same(&self.device) {
                return Err(self.bind_err(format!(
                    "'{}' lives on another device than the program",
                    spec.name
                )));
            }
            if let Some(j) = ptrs.iter().position(|p| *p == a.ptr()) {
                return Err(self.bind_err(format!(
                    "'{}' and '{}' are the same device array; pass distinct arrays",
                    sig.arrays[j].name, spec.name
                )));
            }
            ptrs.push(a.ptr());
            keep.push(a.buf.clone());
        }
        let bound = self.bind_results(&ints);
        Ok(GpuCall {
            program: self.id,
            program_name: self.name.clone(),
            bound,
            key: GraphKey { arrays: ptrs, ints },
            float_names: sig.floats.clone(),
            floats,
            _arrays: keep,
        })
    }

    /// Binds and enqueues one call (see [`GpuProgram::bind`]).
    pub fn call(&mut self, args: DeviceArgs<'_>) -> Result<Completion, CallError> {
        let c = self.bind(args)?;
        self.call_bound(&c)
    }

    /// Enqueues a bound call and returns without waiting for the device.
    pub fn call_bound(&mut self, c: &GpuCall) -> Result<Completion, CallError> {
        if c.program != self.id {
            return Err(self.bind_err(format!(
                "the call was bound for another program ('{}')",
                c.program_name
            )));
        }
        self.enqueue_call(&c.key, &c.floats, &c.bound)
            .map_err(|e| self.fail(e))
    }

    /// Checks arrays that another library allocated on the device (CuPy, anything with
    /// `__cuda_array_interface__` or DLPack), given by address, element type, extents and
    /// strides (in elements), as [`GpuProgram::bind`] checks [`DeviceArray`]s: names,
    /// element types, shapes, strides, symbol values; that each lies in memory of this
    /// program's device; that no two overlap. Then makes the program's stream wait for
    /// the work enqueued so far on each stream of `after` (the streams the arrays were
    /// produced on), enqueues the call, makes those streams wait for it (their later
    /// work, and their allocator's reuse of the arrays' memory, comes after the call) and
    /// returns without waiting for the device.
    ///
    /// # Safety
    ///
    /// Each address with its extents and strides must describe memory the caller owns,
    /// alive and not used by other work until the call completes (wait on the returned
    /// [`Completion`], or order later work after it).
    pub unsafe fn call_foreign(
        &mut self,
        arrays: &[ForeignArray<'_>],
        ints: &BTreeMap<String, i64>,
        floats: &BTreeMap<String, f64>,
        after: &[u64],
    ) -> Result<Completion, CallError> {
        let sig = &self.prog.plan.signature;
        let passed: Vec<PassedArray<'_>> = arrays
            .iter()
            .map(|a| PassedArray {
                name: a.name,
                dtype: a.dtype,
                shape: a.extents,
                strides: a.strides,
            })
            .collect();
        let CheckedArgs {
            ints,
            floats,
            arrays: order,
            ..
        } = check_arguments(sig, &self.statics, &passed, ints, floats)
            .map_err(|m| self.bind_err(m))?;
        let mut ptrs = Vec::with_capacity(order.len());
        let mut spans = Spans::default();
        {
            let handle = self.device.clone();
            let mut dev = handle.lock();
            for (spec, (k, _, _)) in sig.arrays.iter().zip(&order) {
                let a = &arrays[*k];
                let (lo, hi) = a.span();
                if lo < hi {
                    dev.check_memory(lo, (hi - lo) as usize)
                        .map_err(|e| self.bind_err(format!("'{}': {e}", spec.name)))?;
                }
                spans
                    .claim((lo, hi), &spec.name)
                    .map_err(|m| self.bind_err(m))?;
                ptrs.push(a.ptr);
            }
            for &s in after {
                dev.wait_for_stream(s)
                    .map_err(|e| self.run_err(e.to_string()))?;
            }
        }
        let bound = self.bind_results(&ints);
        let key = GraphKey { arrays: ptrs, ints };
        let done = self.enqueue_call(&key, &floats, &bound)?;
        let handle = self.device.clone();
        let mut dev = handle.lock();
        for &s in after {
            dev.signal_stream(s)
                .map_err(|e| self.run_err(e.to_string()))?;
        }
        Ok(done)
    }

    /// Enqueues one call on raw device addresses (`arrays`: the signature's arrays in
    /// order; `ints`, `floats`: the signature's symbol values) and returns without
    /// waiting for the device.
    ///
    /// # Safety
    ///
    /// Every address must be an allocation on this program's device, large enough for
    /// the array's declared shape with these symbol values and in its declared layout,
    /// alive until the call completes, and distinct from the others. [`GpuProgram::bind`]
    /// checks all of that for [`DeviceArray`]s.
    pub unsafe fn call_raw(
        &mut self,
        arrays: &[DevPtr],
        ints: &[i64],
        floats: &[f64],
    ) -> Result<Completion, CallError> {
        let sig = &self.prog.plan.signature;
        if arrays.len() != sig.arrays.len()
            || ints.len() != sig.ints.len()
            || floats.len() != sig.floats.len()
        {
            return Err(self.bind_err(format!(
                "expected {} arrays, {} integer and {} float symbols; got {}, {} and {}",
                sig.arrays.len(),
                sig.ints.len(),
                sig.floats.len(),
                arrays.len(),
                ints.len(),
                floats.len()
            )));
        }
        let key = GraphKey {
            arrays: arrays.to_vec(),
            ints: ints.to_vec(),
        };
        let bound = self.bind_results(ints);
        self.enqueue_call(&key, floats, &bound)
    }

    /// The static symbols' values and the signature's integer symbols' values `ints`.
    fn symbol_env(&self, ints: &[i64]) -> BTreeMap<String, i64> {
        symbol_env(&self.statics, &self.prog.plan.signature.ints, ints)
    }

    /// The bind-time conditions' results for the integer symbols `ints` (the signature's).
    fn bind_results(&self, ints: &[i64]) -> BindResults {
        let env = self.symbol_env(ints);
        BindResults::of(&self.prog.plan, &env)
    }

    fn enqueue_call(
        &mut self,
        key: &GraphKey,
        floats: &[f64],
        bound: &BindResults,
    ) -> Result<Completion, CallError> {
        let handle = self.device.clone();
        let mut dev = handle.lock();
        let dev: &mut dyn Device = &mut **dev;
        self.allocate(dev, &key.ints)?;
        // The float symbols go to the device buffer the kernels read, in stream order,
        // before the call's work; unchanged values need no copy.
        if let Some(buf) = self.floats_buffer {
            let same = self
                .floats_written
                .as_ref()
                .is_some_and(|w| w.iter().copied().eq(floats.iter().map(|f| f.to_bits())));
            if !same {
                let bytes: Vec<u8> = floats.iter().flat_map(|f| f.to_le_bytes()).collect();
                self.floats_written = None;
                dev.copy_h2d(buf, &bytes).map_err(|e| self.run_err(e.0))?;
                self.floats_written = Some(floats.iter().map(|f| f.to_bits()).collect());
            }
        }
        // A call whose control flow needs no device value is one CUDA graph, captured the
        // first time these arrays and integer values are seen and replayed after.
        // With halo exchanges: their buffers are made large enough first (a capture
        // cannot allocate; graphs holding buffers that were replaced are dropped), and
        // their host functions, which post and wait for the messages, replay with the
        // graph. Not with an unstructured exchange, whose schedule the ranks agree on at
        // every call.
        if let Some(x) = &mut self.exchanges {
            let (statics, names) = (&self.statics, &self.prog.plan.signature.ints);
            let env = || symbol_env(statics, names, &key.ints);
            if x.reserve(dev, &key.ints, env).map_err(|m| CallError::Run {
                program: self.name.clone(),
                message: m,
            })? {
                self.graph_cache.clear();
            }
        }
        let graphs = self.graphs
            && self.prog.plan.sync_points() == 0
            && self.exchanges.as_ref().is_none_or(|x| x.replayable());
        if graphs {
            if let Some(g) = self.graph_cache.get(key) {
                let g = *g;
                dev.replay(g).map_err(|e| self.run_err(e.0))?;
                let event = dev.record_event().map_err(|e| self.run_err(e.0))?;
                return Ok(Completion { event });
            }
            dev.begin_capture().map_err(|e| self.run_err(e.0))?;
        }
        let enqueued = self.enqueue(dev, key, bound);
        if graphs {
            let g = dev.end_capture().map_err(|e| self.run_err(e.0));
            enqueued?;
            let g = g?;
            if self.graph_cache.len() >= MAX_GRAPHS {
                self.graph_cache.clear();
            }
            self.graph_cache.insert(key.clone(), g);
            dev.replay(g).map_err(|e| self.run_err(e.0))?;
        } else {
            enqueued?;
        }
        let event = dev.record_event().map_err(|e| self.run_err(e.0))?;
        Ok(Completion { event })
    }

    /// Enqueues every step of the control flow, in order.
    fn enqueue(
        &mut self,
        device: &mut dyn Device,
        key: &GraphKey,
        bound: &BindResults,
    ) -> Result<(), CallError> {
        let sig = &self.prog.plan.signature;
        let mut env: BTreeMap<String, i64> = self.statics.clone();
        for (n, v) in sig.ints.iter().zip(&key.ints) {
            env.insert(n.clone(), *v);
        }
        for n in &self.prog.plan.flow_symbols {
            env.entry(n.clone()).or_insert(0);
        }
        let mut args: Vec<KernelArg> = key
            .arrays
            .iter()
            .chain(&self.transients)
            .map(|p| KernelArg::Ptr(*p))
            .collect();
        let int_base = args.len();
        args.extend(self.prog.params.ints.iter().map(|_| KernelArg::I64(0)));
        args.extend(self.floats_buffer.map(KernelArg::Ptr));
        let mut run = Run {
            prog: &self.prog,
            device,
            kernels: &self.kernels,
            step_kernels: &self.step_kernels,
            transients: &self.transients,
            scalar_types: &self.scalar_types,
            name: &self.name,
            env,
            args,
            int_base,
            arrays: &key.arrays,
            bound,
            state_no: 0,
            exchanges: self.exchanges.as_mut(),
        };
        run.flow(&self.prog.plan.body)?;
        // The error flags to the host after the call's work (in the graph, when captured):
        // `failed` reads them without waiting for later calls.
        self.mirror_flags(device)
    }

    /// Enqueues the copy of the error flags to the host (through `status`).
    fn mirror_flags(&self, device: &mut dyn Device) -> Result<(), CallError> {
        device
            .launch(
                self.peek,
                [1, 1, 1],
                [1, 1, 1],
                &[KernelArg::Ptr(self.status)],
            )
            .and_then(|()| device.mirror(self.status, ERROR_FLAG_BYTES))
            .map_err(|e| self.run_err(e.0))
    }

    /// Whether the device reported an error in work that has finished, read without
    /// waiting (from the error flags the calls copy to the host after their work): `true`
    /// means [`GpuProgram::wait`] on a completion returns the error; `false` that none
    /// was seen yet (an error in work not done yet shows later). After a `wait` that
    /// returned an error, this may stay `true` until the next call's flags land.
    pub fn failed(&self) -> bool {
        let mut flags = [0u8; ERROR_FLAG_BYTES];
        self.device.lock().read_mirror(self.status, &mut flags);
        flags.iter().any(|&b| b != 0) || self.exchanges.as_ref().is_some_and(|x| x.failed())
    }

    /// Turns replay of captured CUDA graphs on or off (on by default). Off, every call
    /// launches its kernels one by one.
    pub fn set_graphs(&mut self, on: bool) {
        self.graphs = on;
    }

    /// Waits for `c` and reports the outcome: the first error the device met since the
    /// last `wait` (in this call or in one enqueued earlier and not waited for), with the
    /// interpreter's message. Reading the device's error record waits for all work
    /// enqueued so far, and clears the record.
    pub fn wait(&mut self, c: Completion) -> Result<(), CallError> {
        self.wait_inner(c).map_err(|e| self.fail(e))
    }

    fn wait_inner(&mut self, c: Completion) -> Result<(), CallError> {
        c.event.wait().map_err(|e| self.run_err(e.0))?;
        let mut bytes = vec![0u8; (1 + RECORD_LEN) * 8];
        {
            let mut dev = self.device.lock();
            dev.launch(
                self.read,
                [1, 1, 1],
                [1, 1, 1],
                &[KernelArg::Ptr(self.status)],
            )
            .map_err(|e| self.run_err(e.0))?;
            dev.copy_d2h_sync(&mut bytes, self.status)
                .map_err(|e| self.run_err(e.0))?;
            // The record is cleared: so will its mirror be, once this copy lands.
            dev.memset_zero(self.status, ERROR_FLAG_BYTES)
                .and_then(|()| dev.mirror(self.status, ERROR_FLAG_BYTES))
                .map_err(|e| self.run_err(e.0))?;
        }
        let words: Vec<i64> = bytes
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect();
        let mut rec = [0i64; RECORD_LEN];
        rec.copy_from_slice(&words[1..]);
        // A failed exchange first: the halo it left alone may be why later work failed.
        if let Some(m) = self.exchanges.as_ref().and_then(|x| x.take_error()) {
            return Err(self.run_err(m));
        }
        if rec[0] != 0 {
            return Err(self.run_err(self.prog.sites.message(&rec)));
        }
        if words[0] != 0 {
            return Err(self.run_err(
                "integer division by zero, an index-table entry out of bounds, a nested SDFG's window outside its array or not the size of its connector, or an allocation failure, in the program"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Runs on interpreter-style bindings: arrays copied to the device, one call, results
    /// copied back (for tests and `sdflow run --backend cuda`; a model keeps its arrays
    /// on the device: [`GpuProgram::upload`], [`GpuProgram::bind`]).
    pub fn run_bindings(&mut self, b: &mut Bindings) -> Result<(), CallError> {
        let sig = self.prog.plan.signature.clone();
        let mut floats = BTreeMap::new();
        let mut ints = BTreeMap::new();
        for (k, v) in &b.symbols {
            if sig.floats.contains(k) {
                floats.insert(k.clone(), v.as_f64());
            } else if sig.ints.contains(k) {
                ints.insert(k.clone(), v.as_i64());
            }
        }
        for spec in &sig.arrays {
            if !b.arrays.contains_key(&spec.name) {
                return Err(self.bind_err(format!("missing argument '{}'", spec.name)));
            }
        }
        // Each argument in the layout its declared strides describe with the symbol
        // values the bindings give.
        let orders = declared_orders(&sig, &self.statics, b).map_err(|m| self.bind_err(m))?;
        let mut device_arrays = Vec::new();
        for spec in &sig.arrays {
            let d =
                DeviceArray::from_host_in(&self.device, &b.arrays[&spec.name], &orders[&spec.name])
                    .map_err(|e| self.run_err(format!("'{}': {e}", spec.name)))?;
            device_arrays.push(d);
        }
        let mut args = DeviceArgs::new();
        for (spec, d) in sig.arrays.iter().zip(&device_arrays) {
            args = args.array(&spec.name, d);
        }
        for (k, v) in &ints {
            args = args.int(k, *v);
        }
        for (k, v) in &floats {
            args = args.float(k, *v);
        }
        let call = self.bind(args)?;
        let done = self.call_bound(&call)?;
        self.wait(done)?;
        for (spec, d) in sig.arrays.iter().zip(&device_arrays) {
            let a = b.arrays.get_mut(&spec.name).expect("checked above");
            d.copy_to_host(a)
                .map_err(|e| self.run_err(format!("'{}': {e}", spec.name)))?;
        }
        Ok(())
    }
}

/// `statics` with the integer symbols `names` set to `ints`.
fn symbol_env(
    statics: &BTreeMap<String, i64>,
    names: &[String],
    ints: &[i64],
) -> BTreeMap<String, i64> {
    let mut env = statics.clone();
    for (n, v) in names.iter().zip(ints) {
        env.insert(n.clone(), *v);
    }
    env
}

/// The number of elements a container spans for the symbol values `env`: 1 + Σ (n_d − 1) ·
/// |s_d| over its extents n_d and strides s_d (0 when a dimension is empty), which is more
/// than the product of the extents where the strides leave gaps (a transient laid out
/// like a padded field: a composed step's scratch field keeps its allocator's strides).
fn elements(d: &DataDesc, env: &BTreeMap<String, i64>) -> Result<i64, String> {
    let DataDesc::Array(a) = d else {
        return Ok(1);
    };
    let mut failed = None;
    let n = a.span_by(|e| match e.eval_map(env) {
        Ok(v) => Some(v),
        Err(e) => {
            failed = Some(e.to_string());
            None
        }
    });
    match (n, failed) {
        (_, Some(e)) => Err(e),
        (None, None) => Err("more than 2^63 elements".to_string()),
        (Some(n), None) if n > 1 << 40 => Err(format!("{n} elements")),
        (Some(n), None) => Ok(n),
    }
}

/// One call's walk over the plan's control flow (borrowing the program's parts, so the
/// plan is read in place while the device is driven).
struct Run<'p> {
    prog: &'p CudaProgram,
    device: &'p mut dyn Device,
    kernels: &'p [KernelId],
    step_kernels: &'p [Vec<StepKernels>],
    transients: &'p [DevPtr],
    scalar_types: &'p BTreeMap<String, DType>,
    name: &'p str,
    env: BTreeMap<String, i64>,
    args: Vec<KernelArg>,
    int_base: usize,
    arrays: &'p [DevPtr],
    bound: &'p BindResults,
    state_no: usize,
    exchanges: Option<&'p mut Exchanges>,
}

impl Run<'_> {
    fn err(&self, message: String) -> CallError {
        CallError::Run {
            program: self.name.to_string(),
            message,
        }
    }

    /// Evaluates a control-flow expression; scalars it reads are fetched from the device
    /// first (the plan's sync point).
    fn eval(&mut self, e: &SymExpr, host_reads: &[String], what: &str) -> Result<i64, CallError> {
        let free = e.free_symbols();
        for n in host_reads.iter().filter(|n| free.contains(*n)) {
            let v = self.fetch_scalar(n)?;
            self.env.insert(n.clone(), v);
        }
        e.eval_map(&self.env).map_err(|err| match err {
            EvalError::Unbound(n) => self.err(format!("{what}: '{n}' has no value")),
            other => self.err(format!("{what}: {other}")),
        })
    }

    /// The value of a scalar container, read from the device (a sync point).
    fn fetch_scalar(&mut self, n: &str) -> Result<i64, CallError> {
        let ptr = self.pointer(n).ok_or_else(|| {
            self.err(format!(
                "control flow reads '{n}', which is not a container"
            ))
        })?;
        let t = self.scalar_types.get(n).copied().unwrap_or(DType::I64);
        let mut b = vec![0u8; t.size_bytes()];
        self.device
            .copy_d2h_sync(&mut b, ptr)
            .map_err(|e| self.err(e.0))?;
        let mut w = [0u8; 8];
        w[..b.len()].copy_from_slice(&b);
        Ok(match t {
            DType::Bool => i64::from(b[0] != 0),
            DType::I32 => i32::from_le_bytes([w[0], w[1], w[2], w[3]]) as i64,
            DType::I64 => i64::from_le_bytes(w),
            // Saturating, NaN to 0, as the interpreter converts.
            DType::F32 => f32::from_le_bytes([w[0], w[1], w[2], w[3]]) as i64,
            DType::F64 => f64::from_le_bytes(w) as i64,
        })
    }

    fn pointer(&self, n: &str) -> Option<DevPtr> {
        let k = self.prog.params.arrays.iter().position(|a| a == n)?;
        let nargs = self.arrays.len();
        Some(if k < nargs {
            self.arrays[k]
        } else {
            self.transients[k - nargs]
        })
    }

    fn flow(&mut self, f: &Flow) -> Result<(), CallError> {
        match f {
            Flow::State(sp) => {
                let si = self.state_no;
                self.state_no += 1;
                for k in 0..sp.steps.len() {
                    self.step(si, k, sp)?;
                }
            }
            Flow::Seq(items) => {
                for i in items {
                    self.flow(i)?;
                }
            }
            Flow::Loop {
                var,
                init,
                cond,
                update,
                body,
                host_reads,
            } => {
                let first = self.state_no;
                let what = format!("loop over '{var}'");
                let v = self.eval(init, host_reads, &what)?;
                self.env.insert(var.clone(), v);
                loop {
                    if self.eval(cond, host_reads, &what)? == 0 {
                        break;
                    }
                    self.state_no = first;
                    self.flow(body)?;
                    let v = self.eval(update, host_reads, &what)?;
                    self.env.insert(var.clone(), v);
                }
                self.state_no = first + body.state_count();
            }
            Flow::If {
                cond,
                then,
                otherwise,
                host_reads,
            } => {
                let first = self.state_no;
                let c = self.eval(cond, host_reads, "if condition")?;
                let n_then = then.state_count();
                if c != 0 {
                    self.flow(then)?;
                } else {
                    self.state_no = first + n_then;
                    self.flow(otherwise)?;
                }
                self.state_no = first + n_then + otherwise.state_count();
            }
            Flow::Assign {
                assignments,
                host_reads,
            } => {
                let mut vals = Vec::new();
                for (n, e) in assignments {
                    vals.push((
                        n.clone(),
                        self.eval(e, host_reads, &format!("assignment to '{n}'"))?,
                    ));
                }
                self.env.extend(vals);
            }
        }
        Ok(())
    }

    fn step(&mut self, si: usize, k: usize, sp: &crate::plan::StatePlan) -> Result<(), CallError> {
        let step = &sp.steps[k];
        // Unchecked when the in-bounds condition holds: a bind-time one as evaluated when
        // the call was bound, any other for the current symbol values (one that reads a
        // scalar runs checked rather than waiting for the device).
        let at_bind = self
            .bound
            .0
            .get(si)
            .and_then(|s| s.get(k))
            .copied()
            .unwrap_or_default();
        let map = match &step.check {
            CheckPolicy::AtBind(_) => at_bind.map,
            other => other.unchecked_with(&self.env),
        };
        let launches = self.step_kernels[si][k].launches(Bound {
            map,
            callees: at_bind.callees,
        });
        if launches.is_empty() {
            return Err(self.err(format!("no kernel for step {k} of state '{}'", sp.name)));
        }
        for (j, n) in self.prog.params.ints.iter().enumerate() {
            self.args[self.int_base + j] = KernelArg::I64(self.env.get(n).copied().unwrap_or(0));
        }
        let bs = self.prog.block_size;
        for kernel in launches {
            let spec = &self.prog.kernels[kernel];
            if let Some(x) = spec.exchange {
                let id = self.kernels[kernel];
                let Some(ex) = self.exchanges.as_deref_mut() else {
                    return Err(self.err(format!("halo exchange #{x} without MPI contexts")));
                };
                let at = format!(
                    "sdfg '{}' / state '{}' / halo exchange #{x}",
                    self.name, sp.name
                );
                let r = match step.kind {
                    StepKind::ExchangeStart(_) => {
                        ex.start(x, at, &mut *self.device, &self.env, &self.args, id, bs)
                    }
                    _ => ex.finish(x, at, &mut *self.device, &self.args, id, bs),
                };
                r.map_err(|m| self.err(m))?;
                continue;
            }
            let (grid, block) = match (&spec.grid_sizes, spec.checked) {
                (Some(sizes), false) => {
                    let mut total: i64 = 1;
                    for s in sizes {
                        let v = s
                            .eval_map(&self.env)
                            .map_err(|e| self.err(format!("map '{}': {e}", step.label)))?;
                        total = total.saturating_mul(v.max(0));
                    }
                    if total == 0 {
                        continue;
                    }
                    let blocks = (total as u64).div_ceil(bs as u64).min(i32::MAX as u64) as u32;
                    ([blocks, 1, 1], [bs, 1, 1])
                }
                _ => ([1, 1, 1], [1, 1, 1]),
            };
            let id = self.kernels[kernel];
            self.device
                .launch(id, grid, block, &self.args)
                .map_err(|e| self.err(e.0))?;
        }
        Ok(())
    }
}

impl Drop for GpuProgram {
    fn drop(&mut self) {
        // `free_later`: dropping a program while holding its device's guard must not
        // deadlock.
        for p in self.transients.drain(..) {
            self.device.free_later(p);
        }
        self.device.free_later(self.status);
        if let Some(p) = self.floats_buffer.take() {
            self.device.free_later(p);
        }
        if let Some(x) = &mut self.exchanges {
            x.release(&self.device);
        }
    }
}
