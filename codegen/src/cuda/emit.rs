//! CUDA C for a whole program, printed from its [`Plan`]: one kernel per step of every
//! state (a parallel map is a grid of threads, one map point each, over the plan's
//! independent parameters; any other step is a one-thread kernel), and for a step whose
//! in-bounds condition may fail a second, checked one-thread kernel with the
//! interpreter's checks and messages. Node bodies, tasklets, copies, reductions, nested
//! SDFGs and checked versions are printed by the same code as the C backend's, with
//! `__device__` helpers (the C prelude's, rewritten for the device) and compare-and-swap
//! loops for write-conflict resolutions in parallel maps.
//!
//! Every kernel takes the same parameters: the array pointers ([`KernelParams::arrays`]:
//! the arguments, then the persistent transients), the integer symbols (the program's,
//! then the symbols its control flow assigns) and, where the program has float symbols,
//! a pointer to their values (as `double`, in a device buffer the host fills before a
//! call), so the host prepares one parameter list per call, only the loop variables
//! change, and a captured graph stays valid when only float symbols do.
//!
//! Why one file of this size: the kernel shapes (grid over a parallel map, copy,
//! reduction; one-thread and checked kernels) and the kernels' common parameters are
//! printed in one pass over the plan; the node bodies come from the shared printer
//! (`cfamily/emit`).

use std::cell::RefCell;
use std::fmt::Write as _;

use sdflow_ir::{DType, DataDesc, Dim, EdgeId, LibraryNode, MapScope, Node, Sdfg, SymExpr};

use crate::CodegenError;
use crate::cfamily::Dialect;
use crate::cfamily::cexpr::ctype;
use crate::cfamily::emit::*;
use crate::cfamily::sites::{LocPart, Sites};
use crate::cuda::Cuda;
use crate::plan::{CheckPolicy, Lifetime, copy_subsets};
use crate::plan::{MapPart, Plan, StepKind, Target};

/// Options of the CUDA printer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CudaEmitOptions {
    /// Threads per block of parallel-map kernels (a multiple of 32). Default 256.
    pub block_size: u32,
    /// A wrong kernel on purpose, for the tests that show the emulated device catches
    /// one ([`KernelFault`]); `None` (the default) otherwise.
    pub fault: Option<KernelFault>,
}

/// A mistake [`CudaEmitOptions::fault`] puts in every grid kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KernelFault {
    /// The grid is one point short (an off-by-one in its size): the last point of every
    /// grid kernel is not computed.
    LastPointSkipped,
}

impl Default for CudaEmitOptions {
    fn default() -> Self {
        CudaEmitOptions {
            block_size: 256,
            fault: None,
        }
    }
}

/// The parameters every kernel takes, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelParams {
    /// Array pointers: the program's array and scalar arguments, then its persistent
    /// transients.
    pub arrays: Vec<String>,
    /// 64-bit integer symbols: the program's, then those its control flow assigns.
    pub ints: Vec<String>,
    /// Float symbols, read as `double` from a device buffer the last parameter points
    /// to (absent when there are none).
    pub floats: Vec<String>,
}

/// One kernel of the program.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelSpec {
    /// Its name in the module.
    pub name: String,
    /// The state's position among the plan's states (program order).
    pub state: usize,
    /// The step's position in its state.
    pub step: usize,
    /// The checked one-thread version of the step.
    pub checked: bool,
    /// The unchecked version whose map body's callees check their own subscripts, beside
    /// the one whose callees skip them: launched instead of it when the step's callee
    /// condition, checked at bind ([`crate::plan::Step::callees`]), fails.
    pub own_checks: bool,
    /// For a parallel map: the sizes of the parameters the grid covers, outermost first
    /// (their product is the number of threads that do work).
    pub grid_sizes: Option<Vec<SymExpr>>,
    /// For the start or finish of a halo exchange: the exchange's number. The kernel packs
    /// (start) or unpacks (finish) the cells its neighbours need and takes, after the
    /// common parameters, the exchange's buffer (`char*`) and, for a structured exchange,
    /// the mask of directions with a neighbour (`int`), for an unstructured one its
    /// schedule and the lists it was made from (two `const int64_t*`).
    pub exchange: Option<usize>,
}

/// The CUDA translation unit of a program and what the host needs to run it.
#[derive(Clone, Debug)]
pub struct CudaProgram {
    /// The CUDA C source.
    pub source: String,
    /// The plan it prints.
    pub plan: Plan,
    /// Every kernel.
    pub kernels: Vec<KernelSpec>,
    /// The kernels' common parameters.
    pub params: KernelParams,
    /// Error sites of the checked code.
    pub sites: Sites,
    /// Threads per block of parallel-map kernels.
    pub block_size: u32,
    /// For a program that exchanges halos: what its ranks must agree on, hashed, and
    /// said in words (as the C backend's `sdflow_init` checks it).
    pub identity: Option<(u64, String)>,
}

/// The name of the status kernel every module has: it copies `[error flag, error
/// record...]` to its argument and clears them, so an error stays until it is read (a
/// later call does not hide an earlier one's failure).
pub const STATUS_READ: &str = "sdf_status_read";
/// The kernel that copies the error flag and the record's failed word, unchanged, to
/// the first two words of its argument (for the host's mirror of them).
pub const STATUS_PEEK: &str = "sdf_status_peek";

const STATUS_KERNELS: &str =
    "/* The error flag and record: kept from the first failure until they are read. */
extern \"C\" __global__ void sdf_status_read(int64_t* out) {
    out[0] = sdf_error_flag; memcpy(out + 1, &sdf_err, sizeof sdf_err);
    sdf_error_flag = 0; memset(&sdf_err, 0, sizeof sdf_err);
    for (int k = 0; k < SDF_MAXP; k++) sdf_pv[k] = 0; }
extern \"C\" __global__ void sdf_status_peek(int64_t* out) {
    out[0] = sdf_error_flag; out[1] = sdf_err.failed; }

";

/// The header of a grid kernel of one step.
struct GridKernel<'a> {
    name: &'a str,
    head: &'a str,
    prologue: &'a str,
    state: &'a str,
    block_size: u32,
    fault: Option<KernelFault>,
}

/// Opens a grid kernel doing `what`: its header, the `setup` lines, and a grid-stride
/// loop of `sdf_t` over `0..total` (closed by [`close_grid_kernel`]).
fn open_grid_kernel(
    em: &mut Emitter<'_>,
    k: &GridKernel<'_>,
    what: &str,
    setup: &[String],
    total: &str,
) {
    let _ = writeln!(
        em.out,
        "/* state '{}', {} */\nextern \"C\" __global__ void __launch_bounds__({}) {}({}) {{\n{}",
        k.state.replace("*/", "* /"),
        what.replace("*/", "* /"),
        k.block_size,
        k.name,
        k.head,
        k.prologue
    );
    for l in setup {
        em.line(l);
    }
    match k.fault {
        None => em.line(&format!("const int64_t sdf_total = {total};")),
        Some(KernelFault::LastPointSkipped) => {
            em.line(&format!("const int64_t sdf_total = ({total}) - 1;"))
        }
    }
    em.line("for (int64_t sdf_t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; sdf_t < sdf_total; sdf_t += (int64_t)gridDim.x * blockDim.x) {");
    em.indent += 1;
}

/// The map parameters of grid point `sdf_t`, the first `g` of `m` (the last fastest).
/// The outermost takes the quotient left by the others, with no remainder (`sdf_t` is
/// below the product of the extents). When the grid has at most 2³¹ − 1 points — every
/// extent then fits too — the division and remainder are 32-bit: a 64-bit division is a
/// call of tens of instructions on a GPU, per point, and it made a stencil's kernel bound
/// by instructions rather than memory.
///
/// Consecutive threads should touch consecutive elements. Where the array the map writes
/// has strides that are symbols (GT4Py's fields), which parameter walks its stride-1
/// dimension is known only at the call: the kernel then reads the strides and makes that
/// parameter the fastest ([`runtime_innermost`]); otherwise the last one is (`loop_order`
/// put the stride-1 dimension last where the strides are constants).
fn grid_point(em: &mut Emitter<'_>, sc: &Scope<'_>, m: &MapScope, g: usize) {
    if g == 0 {
        return;
    }
    // `order`: the grid parameters, fastest first.
    let decompose = |em: &mut Emitter<'_>, ty: &str, cast: &str, order: &[usize]| {
        em.line(&format!("{ty} sdf_r = ({ty})sdf_t;"));
        for (k, &d) in order.iter().enumerate() {
            let (p, r) = (&m.params[d], &m.ranges[d]);
            let (start, step) = (sc.sub_sym(&r.start), sc.sub_sym(&r.step));
            if k + 1 == order.len() {
                em.line(&format!("s_{p} = ({start}) + (int64_t)sdf_r * ({step});"));
            } else {
                em.line(&format!(
                    "s_{p} = ({start}) + (int64_t)(sdf_r % {cast}sdf_n{d}) * ({step}); sdf_r /= {cast}sdf_n{d};"
                ));
            }
        }
    };
    let params: Vec<String> = m.params[..g].iter().map(|p| format!("s_{p}")).collect();
    em.line(&format!("int64_t {};", params.join(", ")));
    let normal: Vec<usize> = (0..g).rev().collect();
    if g == 1 {
        decompose(em, "int64_t", "", &normal);
        return;
    }
    let both = |em: &mut Emitter<'_>, order: &[usize]| {
        em.line("if (sdf_total <= (int64_t)INT32_MAX) {");
        em.indent += 1;
        decompose(em, "uint32_t", "(uint32_t)", order);
        em.indent -= 1;
        em.line("} else {");
        em.indent += 1;
        decompose(em, "int64_t", "", order);
        em.indent -= 1;
        em.line("}");
    };
    let strides = runtime_innermost(sc, m, g);
    if strides.is_empty() {
        both(em, &normal);
        return;
    }
    // The first parameter, from the last, whose stride is 1 in this call is the fastest.
    let last = &strides.last().expect("candidates").1;
    let mut cond = String::new();
    for (d, stride) in strides.iter().rev().skip(1) {
        let order: Vec<usize> = std::iter::once(*d)
            .chain(normal.iter().copied().filter(|x| x != d))
            .collect();
        let test = format!("({last}) != 1 && ({stride}) == 1");
        em.line(&format!("{cond}if ({test}) {{"));
        em.indent += 1;
        both(em, &order);
        em.indent -= 1;
        cond = "} else ".to_string();
    }
    em.line("} else {");
    em.indent += 1;
    both(em, &normal);
    em.indent -= 1;
    em.line("}");
}

/// For a grid over the first `g` parameters of `m`: when the first array of two or more
/// dimensions its body writes (an index, or a range's start, in each dimension) has strides
/// that are symbols, the grid parameters with such strides, each with its stride as C (the
/// last grid parameter among them last); empty when the order is fixed at build time.
fn runtime_innermost(sc: &Scope<'_>, m: &MapScope, g: usize) -> Vec<(usize, String)> {
    let grid = &m.params[..g];
    'edges: for e in m.body.edge_ids() {
        let (src, dst) = m.body.endpoints(e);
        let Some(written) = m.body.node(dst).as_access() else {
            continue;
        };
        let mem = &m.body.edge(e).memlet;
        // A copy's memlet names its source; the destination's part is `other_subset`.
        let subset = if mem.data == written {
            &mem.subset
        } else if m.body.node(src).as_access().is_some() {
            mem.other_subset.as_ref().unwrap_or(&mem.subset)
        } else {
            continue;
        };
        let Some(DataDesc::Array(a)) = sc.sdfg.arrays.get(written) else {
            continue;
        };
        if subset.0.len() != a.strides.len() || a.strides.len() < 2 {
            continue;
        }
        let mut per_param: Vec<Option<&SymExpr>> = vec![None; g];
        for (dim, stride) in subset.0.iter().zip(&a.strides) {
            // An index, or the start of a range (a copy of one element is `i:i+1`).
            let ix = match dim {
                Dim::Index(ix) | Dim::Range { start: ix, .. } => ix,
                Dim::Indirect { .. } => continue 'edges,
            };
            let used: Vec<usize> = (0..g).filter(|&d| ix.mentions(&grid[d])).collect();
            if let [d] = used.as_slice() {
                per_param[*d] = Some(stride);
            }
        }
        let symbolic: Vec<usize> = (0..g)
            .filter(|&d| per_param[d].is_some_and(|s| s.as_int().is_none()))
            .collect();
        // Runtime choice only between parameters whose strides are symbols, and only
        // when the last grid parameter is one of them (else `loop_order` decided).
        if symbolic.len() < 2 || symbolic.last() != Some(&(g - 1)) {
            return Vec::new();
        }
        return symbolic
            .into_iter()
            .map(|d| (d, sc.sym(per_param[d].expect("symbolic"))))
            .collect();
    }
    Vec::new()
}

/// Closes what [`open_grid_kernel`] opened.
fn close_grid_kernel(em: &mut Emitter<'_>) {
    em.indent -= 1;
    em.line("}");
    em.out.push_str("}\n\n");
}

/// The parameters of every kernel of `plan`.
fn kernel_params(plan: &Plan) -> KernelParams {
    let sig = &plan.signature;
    let mut arrays: Vec<String> = sig.arrays.iter().map(|a| a.name.clone()).collect();
    arrays.extend(
        plan.with_lifetime(Lifetime::Persistent)
            .map(|a| a.name.clone()),
    );
    let mut ints = sig.ints.clone();
    ints.extend(plan.flow_symbols.iter().cloned());
    KernelParams {
        arrays,
        ints,
        floats: sig.floats.clone(),
    }
}

/// Prints the CUDA translation unit of `sdfg` (validated by the caller) from its plan.
pub fn emit_cuda(sdfg: &Sdfg, opts: &CudaEmitOptions) -> Result<CudaProgram, CodegenError> {
    emit_cuda_plan(sdfg, Plan::of(sdfg, Target::Grid)?, opts)
}

/// [`emit_cuda`] printing `plan`, a plan of `sdfg` ([`Plan::of`] for [`Target::Grid`]):
/// the text is a function of the program and the plan, which decides what the printer
/// does.
pub fn emit_cuda_plan(
    sdfg: &Sdfg,
    plan: Plan,
    opts: &CudaEmitOptions,
) -> Result<CudaProgram, CodegenError> {
    if plan.target != Target::Grid {
        return Err(CodegenError::Unsupported(format!(
            "the plan of '{}' is made for a team of threads, not for a grid of them (make it with `Target::Grid`)",
            plan.name
        )));
    }
    let identity =
        (!plan.exchanges().is_empty()).then(|| crate::cpu::emit::distributed_identity(sdfg, &plan));
    if opts.block_size == 0 || !opts.block_size.is_multiple_of(32) || opts.block_size > 1024 {
        return Err(CodegenError::Unsupported(format!(
            "block size {} is not a multiple of 32 between 32 and 1024",
            opts.block_size
        )));
    }
    let params = kernel_params(&plan);
    let head = kernel_head(sdfg, &params);
    let prologue = kernel_prologue(sdfg, &params, &thread_arrays(sdfg, &plan)?);
    let emit_opts = EmitOptions::default();
    let mut fns = Functions::new(&Cuda, Target::Grid);
    let mut counter = 0;
    let sites = RefCell::new(Sites::default());
    let mut kernels = Vec::new();
    let mut text = String::new();
    let top_loc = vec![LocPart::Text(format!("sdfg '{}'", sdfg.name))];
    for (si, sp) in plan.body.states().into_iter().enumerate() {
        let st = &sdfg.states[sp.id.index()];
        let df = &st.graph;
        let mut loc = top_loc.clone();
        loc.push(LocPart::Text(format!("state '{}'", st.name)));
        for (k, step) in sp.steps.iter().enumerate() {
            let name = format!("sdf_k{si}_{k}");
            let mut em = Emitter::new(&emit_opts, &mut fns, &mut counter, 1);
            let sc = Scope::new(sdfg, &plan, &sites, loc.clone(), 0);
            // What every grid kernel's header names.
            let kernel = GridKernel {
                name: &name,
                head: &head,
                prologue: &prologue,
                state: &st.name,
                block_size: opts.block_size,
                fault: opts.fault,
            };
            if let StepKind::ExchangeStart(x) | StepKind::ExchangeFinish(x) = &step.kind {
                let send = matches!(step.kind, StepKind::ExchangeStart(_));
                // Structured: the directions with a neighbour; unstructured: the schedule
                // and the lists it was made from.
                let extra = if crate::cfamily::emit::structured(x).is_some() {
                    "char* __restrict__ sdf_xb, const int sdf_xnb"
                } else {
                    "char* __restrict__ sdf_xb, const int64_t* __restrict__ sdf_xs, const int64_t* __restrict__ sdf_xl"
                };
                let sep = if head.is_empty() { "" } else { ", " };
                let _ = writeln!(
                    em.out,
                    "/* state '{}', halo exchange #{} ({}) */\nextern \"C\" __global__ void __launch_bounds__({}) {name}({head}{sep}{extra}) {{\n{prologue}",
                    st.name.replace("*/", "* /"),
                    x.id,
                    if send { "pack" } else { "unpack" },
                    opts.block_size,
                );
                em.indent = 1;
                em.exchange_kernel(&sc, x, send);
                em.out.push_str("}\n\n");
                text.push_str(&em.out);
                kernels.push(KernelSpec {
                    name: name.clone(),
                    state: si,
                    step: k,
                    checked: false,
                    own_checks: false,
                    grid_sizes: None,
                    exchange: Some(x.id),
                });
                continue;
            }
            match (&step.part, df.node(step.node), &step.grid) {
                // Part of a map's points (a halo exchange's interior or rim): a grid per
                // box, launched in order.
                (Some(part), Node::Map(m), Some(sizes)) => {
                    let boxes: Vec<Vec<sdflow_ir::Range>> = match part {
                        MapPart::Interior(b) => vec![b.clone()],
                        MapPart::Rim(bs) => bs.clone(),
                    };
                    for (j, ranges) in boxes.into_iter().enumerate() {
                        let pname = format!("{name}_{j}");
                        let kernel = GridKernel {
                            name: &pname,
                            ..kernel
                        };
                        let part = MapScope {
                            ranges,
                            ..m.clone()
                        };
                        let psizes: Vec<SymExpr> = part.ranges[..sizes.len()]
                            .iter()
                            .map(|r| r.size())
                            .collect();
                        // The callee condition covers the whole map, so every part; one
                        // kernel per part, so its callees check themselves unless the
                        // condition holds statically.
                        let psc = match callee_scope(&sc, step) {
                            (psc, false) => psc,
                            (_, true) => sc.clone(),
                        };
                        grid_map_kernel(&mut em, &psc, &part, &psizes, &kernel)?;
                        kernels.push(KernelSpec {
                            name: pname,
                            state: si,
                            step: k,
                            checked: false,
                            own_checks: false,
                            grid_sizes: Some(psizes),
                            exchange: None,
                        });
                    }
                }
                (Some(_), _, _) => {
                    return Err(CodegenError::Unsupported(format!(
                        "step {k} of state '{}' runs part of a map's points, but it is not a parallel map on a grid",
                        st.name
                    )));
                }
                _ => match grid_parts(df, step) {
                    // Several copies: a grid each, launched in order.
                    Some(edges) => {
                        for (j, e) in edges.into_iter().enumerate() {
                            let part = format!("{name}_{j}");
                            let kernel = GridKernel {
                                name: &part,
                                ..kernel
                            };
                            let sizes = copy_grid_kernel(&mut em, &sc, df, step, &kernel, e)?;
                            kernels.push(KernelSpec {
                                name: part,
                                state: si,
                                step: k,
                                checked: false,
                                own_checks: false,
                                grid_sizes: Some(sizes),
                                exchange: None,
                            });
                        }
                    }
                    None => {
                        // Under a bind-time callee condition, a second kernel whose
                        // callees check themselves runs where it fails.
                        let (first, own) = callee_scope(&sc, step);
                        let grid_sizes = step_kernel(&mut em, &first, df, step, &kernel)?;
                        kernels.push(KernelSpec {
                            name: name.clone(),
                            state: si,
                            step: k,
                            checked: false,
                            own_checks: false,
                            grid_sizes,
                            exchange: None,
                        });
                        if own {
                            let oname = format!("{name}_own");
                            let kernel = GridKernel {
                                name: &oname,
                                ..kernel
                            };
                            let grid_sizes = step_kernel(&mut em, &sc, df, step, &kernel)?;
                            kernels.push(KernelSpec {
                                name: oname,
                                state: si,
                                step: k,
                                checked: false,
                                own_checks: true,
                                grid_sizes,
                                exchange: None,
                            });
                        }
                    }
                },
            }
            text.push_str(&em.out);
            if step.check != CheckPolicy::Never {
                let cname = format!("{name}_checked");
                let mut em = Emitter::new(&emit_opts, &mut fns, &mut counter, 1);
                let _ = writeln!(
                    em.out,
                    "/* state '{}', step {k} (checked) */\nextern \"C\" __global__ void {cname}({head}) {{\n{prologue}    if (blockIdx.x != 0 || threadIdx.x != 0) return;",
                    st.name.replace("*/", "* /"),
                );
                if matches!(step.part, Some(MapPart::Interior(_))) {
                    // Checked, the whole map runs in its rim's step, after the exchange
                    // finished.
                    em.out.push_str("\n    /* checked: in the rim's step */\n");
                } else {
                    // One thread, in stream order: nothing runs beside it.
                    em.checked_node(&sc, df, step.node, false)?;
                }
                em.out.push_str("}\n\n");
                text.push_str(&em.out);
                kernels.push(KernelSpec {
                    name: cname,
                    state: si,
                    step: k,
                    checked: true,
                    own_checks: false,
                    grid_sizes: None,
                    exchange: None,
                });
            }
        }
    }
    let mut source = format!(
        "/* Generated by sdflow from SDFG '{}' for CUDA. Do not edit. */\n",
        sdfg.name
    );
    source.push_str(&Cuda.prelude());
    source.push('\n');
    for f in &fns.texts {
        source.push_str(f);
        source.push('\n');
    }
    source.push_str(&text);
    source.push_str(STATUS_KERNELS);
    Ok(CudaProgram {
        source,
        plan,
        kernels,
        params,
        sites: sites.into_inner(),
        block_size: opts.block_size,
        identity,
    })
}

/// The scope of a step's unchecked kernel: its map body's callees skip their checks
/// where the step's callee condition holds ([`crate::plan::Step::callees`]), statically
/// or at bind — `true` for the latter, where a second kernel, in `sc`, must run when it
/// fails.
fn callee_scope<'a>(sc: &Scope<'a>, step: &crate::plan::Step) -> (Scope<'a>, bool) {
    let pre = || Scope {
        callee_pre: Pre::Yes,
        ..sc.clone()
    };
    match step.callees {
        CheckPolicy::Never => (pre(), false),
        CheckPolicy::AtBind(_) => (pre(), true),
        _ => (sc.clone(), false),
    }
}

/// The per-thread arrays of the kernels: the plan's per-worker transients, each of a size
/// known when the program is compiled (at most 4096 elements).
fn thread_arrays(sdfg: &Sdfg, plan: &Plan) -> Result<Vec<(String, DType, i64)>, CodegenError> {
    let statics = crate::args::static_ints(sdfg);
    let mut out = Vec::new();
    for a in plan.with_lifetime(Lifetime::PerWorker) {
        let mut n: i64 = 1;
        for e in &a.shape {
            match e.eval(&|x| statics.get(x).copied()) {
                Ok(v) => n = n.saturating_mul(v.max(0)),
                Err(_) => {
                    return Err(CodegenError::Unsupported(format!(
                        "transient '{}' has local (per-thread) storage of shape [{}], which is not known when the program is compiled; \
                         the CUDA backend gives each thread a fixed-size array (specialize the symbols, or optimize with the GPU pipeline, which does not tile)",
                        a.name,
                        a.shape
                            .iter()
                            .map(|e| e.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                }
            }
        }
        if n > 4096 {
            return Err(CodegenError::Unsupported(format!(
                "transient '{}' has local (per-thread) storage of {n} elements; the CUDA backend gives each thread at most 4096",
                a.name
            )));
        }
        out.push((a.name.clone(), a.dtype, n.max(1)));
    }
    Ok(out)
}

/// The parameter list every kernel takes ([`KernelParams`]), as CUDA C.
fn kernel_head(sdfg: &Sdfg, params: &KernelParams) -> String {
    let mut h = String::new();
    for a in &params.arrays {
        let d = &sdfg.arrays[a];
        let _ = write!(h, "{}* __restrict__ a_{a}, ", ctype(d.dtype()));
    }
    for n in &params.ints {
        let _ = write!(h, "const int64_t s_{n}, ");
    }
    if !params.floats.is_empty() {
        h.push_str("const double* __restrict__ sdf_f, ");
    }
    h.trim_end_matches(", ").to_string()
}

/// What every kernel declares first: the error record, the per-thread arrays, the float
/// symbols read from their buffer, the static symbols.
fn kernel_prologue(
    sdfg: &Sdfg,
    params: &KernelParams,
    thread_arrays: &[(String, DType, i64)],
) -> String {
    let mut prologue = String::from("    sdf_err_t* sdf_e = SDF_ERR_PTR(); (void)sdf_e;\n");
    for (n, t, len) in thread_arrays {
        let _ = writeln!(prologue, "    {} a_{n}[{len}] = {{0}};", ctype(*t));
    }
    for (k, n) in params.floats.iter().enumerate() {
        let t = ctype(sdfg.symbols[n].dtype);
        let _ = writeln!(prologue, "    const {t} s_{n} = ({t})sdf_f[{k}];");
    }
    static_symbol_decls(&mut prologue, sdfg, "    ");
    prologue
}

/// The unchecked kernel of `step` (a node of `df`) in scope `sc`: a grid over what the
/// plan's grid covers — a parallel map's independent parameters, a copy's elements, a
/// reduction's output elements — or one thread. Returns the grid's sizes.
fn step_kernel(
    em: &mut Emitter<'_>,
    sc: &Scope<'_>,
    df: &sdflow_ir::Dataflow,
    step: &crate::plan::Step,
    kernel: &GridKernel<'_>,
) -> Result<Option<Vec<SymExpr>>, CodegenError> {
    let n = step.node;
    Ok(match (&step.kind, df.node(n), &step.grid) {
        (StepKind::ParallelMap { .. }, Node::Map(m), Some(sizes)) => {
            grid_map_kernel(em, sc, m, sizes, kernel)?;
            Some(sizes.clone())
        }
        (StepKind::Copy { .. }, Node::Access(dst), Some(sizes)) => {
            // A copy between two containers: a grid over its elements.
            let Some(e) = crate::plan::grid_copy(df, n) else {
                return Err(CodegenError::Unsupported(format!(
                    "the plan gives copy '{dst}' a grid, but it is not one copy from another container"
                )));
            };
            let got = copy_grid_kernel(em, sc, df, step, kernel, e)?;
            debug_assert_eq!(&got, sizes, "the plan's grid");
            Some(sizes.clone())
        }
        (StepKind::Reduce, Node::Library(LibraryNode::Reduce(r)), Some(sizes)) => {
            // A grid over the output elements; each thread combines its inputs in the
            // interpreter's order.
            let parts = ReduceParts::of(sc, df, n, r)?;
            let setup = [format!(
                "const int64_t sdf_nk = {}, sdf_nr = {};",
                parts.count(sc, &parts.kept),
                parts.count(sc, &parts.red)
            )];
            open_grid_kernel(em, kernel, "reduce", &setup, "sdf_nk");
            em.line("const int64_t sdf_o = sdf_t;");
            let mut esc = sc.clone();
            esc.in_parallel_map = step.atomic_writes();
            em.reduce_point(&esc, &parts);
            close_grid_kernel(em);
            debug_assert_eq!(&parts.sizes(&parts.kept), sizes, "the plan's grid");
            Some(sizes.clone())
        }
        (_, node, _) => {
            let _ = writeln!(
                em.out,
                "/* state '{}', {} */\nextern \"C\" __global__ void {}({}) {{\n{}    if (blockIdx.x != 0 || threadIdx.x != 0) return;",
                kernel.state.replace("*/", "* /"),
                node.describe().replace("*/", "* /"),
                kernel.name,
                kernel.head,
                kernel.prologue,
            );
            let inner = match node {
                Node::Map(_) => sc.clone(),
                other => sc.at(LocPart::Text(other.describe())).calling(other, step),
            };
            em.node(&inner, df, n)?;
            em.out.push_str("}\n\n");
            None
        }
    })
}

/// The copies of a step the plan runs as one grid each ([`StepKind::Copy`] `shared`
/// on a grid), in order; `None` for any other step.
fn grid_parts(df: &sdflow_ir::Dataflow, step: &crate::plan::Step) -> Option<Vec<EdgeId>> {
    match step.kind {
        StepKind::Copy { shared: true } if step.grid.is_none() => {
            crate::plan::grid_copies(df, step.node)
        }
        _ => None,
    }
}

/// A grid kernel over the elements of copy `e` into the step's access node (from another
/// container); returns its grid's sizes (the source subset's extents).
fn copy_grid_kernel(
    em: &mut Emitter<'_>,
    sc: &Scope<'_>,
    df: &sdflow_ir::Dataflow,
    step: &crate::plan::Step,
    kernel: &GridKernel<'_>,
    e: EdgeId,
) -> Result<Vec<SymExpr>, CodegenError> {
    let (a, b) = df.endpoints(e);
    let (Some(src), Some(dst)) = (df.node(a).as_access(), df.node(b).as_access()) else {
        return Err(CodegenError::Unsupported(format!(
            "copy {} is not between two containers",
            df.edge(e).memlet
        )));
    };
    let edge = df.edge(e);
    let (s_sub, _) = copy_subsets(sc.sdfg, src, dst, &edge.memlet);
    let what = format!("copy {}", edge.memlet);
    open_grid_kernel(em, kernel, &what, &[], &subset_volume(sc, &s_sub));
    // Write-conflict resolutions of the copy are atomic, as the plan says.
    let mut esc = sc.clone();
    esc.in_parallel_map = step.atomic_writes();
    em.copy_element(&esc, src, dst, edge, "sdf_t");
    close_grid_kernel(em);
    Ok(s_sub.0.iter().map(|d| d.size()).collect())
}

/// A grid kernel over the first `sizes.len()` parameters of parallel map `m`, the other
/// parameters looped over in each thread.
fn grid_map_kernel(
    em: &mut Emitter<'_>,
    sc: &Scope<'_>,
    m: &MapScope,
    sizes: &[SymExpr],
    kernel: &GridKernel<'_>,
) -> Result<(), CodegenError> {
    let g = sizes.len();
    let setup: Vec<String> = sizes
        .iter()
        .enumerate()
        .map(|(d, size)| format!("const int64_t sdf_n{d} = sdf_max64({}, 0);", sc.sym(size)))
        .collect();
    let total = if g == 0 {
        "1".to_string()
    } else {
        (0..g)
            .map(|d| format!("sdf_n{d}"))
            .collect::<Vec<_>>()
            .join(" * ")
    };
    let what = format!("map '{}'", m.label);
    open_grid_kernel(em, kernel, &what, &setup, &total);
    grid_point(em, sc, m, g);
    let mut inner_sc = sc.clone();
    inner_sc.params.extend(m.params[..g].iter().cloned());
    for d in g..m.params.len() {
        let h = em.loop_header(&inner_sc, m, d);
        em.line(&h);
        em.indent += 1;
        inner_sc.params.insert(m.params[d].clone());
    }
    let inner = em.body_scope(&inner_sc, m, true);
    em.body(&inner, &m.body)?;
    for _ in g..m.params.len() {
        em.indent -= 1;
        em.line("}");
    }
    close_grid_kernel(em);
    Ok(())
}
