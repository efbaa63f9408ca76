//! The printer both backends share: a plan's control flow, states and nodes as C-family
//! text — tasklets, copies, reductions, nested SDFGs (as functions taking the caller's
//! error record, inlined where a map calls them at every point), parallel and sequential
//! map loops, and the checked versions of nodes (`checked`) — with row-jamming where
//! the plan jams a map body (`jam`). The C backend drives it for one translation unit
//! with an OpenMP region (`cpu::emit`), the CUDA backend for kernels (`cuda::emit`);
//! each names its dialect (`Functions::dialect`, see `cfamily::dialect`), which spells
//! what the languages write differently and decides nothing.
//!
//! This file holds the options, a function's frame (`Frame`), nested SDFGs' functions
//! (`emit_function`) and the emitter;
//! the jobs are modules: `flow` (control flow, states, check policies), `maps` (map
//! bodies and loops), `nodes` (tasklets, stores, reductions), `copies`, `nested`
//! (nested SDFG calls), `scope` (names, symbols, subscripts), `analysis` (what a body
//! needs before it is printed), `checked` and `jam`.
//!
//! In the C unit every thread walks the control flow (conditions read symbols and host
//! scalars, the same for all threads); each top-level map is an `omp for` (`collapse`
//! over all but the innermost parameter, so the innermost loop is contiguous and
//! vectorizable), a map smaller than the threshold and every other state-level node run
//! as `omp single`; all of them are `nowait`, and a barrier is emitted only before a node
//! that depends on one since the last barrier (a path in the state's graph), and at the
//! end of a state.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use sdflow_ir::typing::{Binding, TaskletNames};
use sdflow_ir::{
    BinOp, DType, DataDesc, Dataflow, Dim, Edge, LibraryNode, MapScope, NestedSdfg, Node, NodeId,
    Reduce, Sdfg, Subset, SymExpr, Tasklet, Wcr,
};

use crate::cfamily::cexpr::{self, SymCheck, SymNames, combine_with, convert, ctype, literal};
use crate::cfamily::dialect::{Dialect, Team};
use crate::cfamily::sites::{LocPart, MAX_PARAMS, SiteKind, Sites};
use crate::plan::jam::Jam;
use crate::plan::rows::{RowCheck, Strip};
use crate::plan::{
    CheckPolicy, Flow, Lifetime, MapPart, Plan, StatePlan, Step, StepKind, Target, copy_loop_dims,
    copy_subsets,
};

mod analysis;
mod checked;
mod copies;
mod exchange;
mod flow;
mod jam;
mod lag;
mod maps;
mod nested;
mod nodes;
mod scope;

use crate::CodegenError;
use crate::abi::Signature;
use analysis::*;
pub(crate) use copies::*;
pub(crate) use exchange::{
    finalize_text as exchange_finalize_text, init_text as exchange_init_text,
    schedule_text as exchange_schedule_text, state_members as exchange_state_members, structured,
};
pub(crate) use nested::*;
pub(crate) use nodes::*;
pub(crate) use scope::*;

/// Options of the printer: how the C unit runs its parallel maps (the CUDA printer
/// takes the defaults).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EmitOptions {
    /// Maps with fewer points than this run on one thread (`omp single`).
    pub parallel_min_points: i64,
    /// How parallel maps divide their iterations among threads.
    pub schedule: OmpSchedule,
    /// Work that does not touch a halo exchange's fields runs between the exchange's
    /// start and its finish (`crate::plan::exchange`); off, each exchange finishes right
    /// after it starts.
    pub overlap_exchanges: bool,
    /// A lagged producer–consumer pair (`crate::plan::lag`) runs in chunks of about this
    /// many of the consumer's points per thread; 0 runs the two maps one after the
    /// other.
    pub lag_points: i64,
}

/// An OpenMP loop schedule (`schedule(...)` of every parallel map's `omp for`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OmpSchedule {
    /// Equal contiguous blocks, one per thread (the default: no scheduling cost, and a
    /// thread touches the same rows in every map, which keeps them in its caches).
    #[default]
    Static,
    /// Chunks handed out on demand (uneven work per iteration).
    Dynamic,
    /// Chunks of decreasing size handed out on demand.
    Guided,
}

impl OmpSchedule {
    /// The name used in `schedule(...)` and in configuration files.
    pub fn name(self) -> &'static str {
        match self {
            OmpSchedule::Static => "static",
            OmpSchedule::Dynamic => "dynamic",
            OmpSchedule::Guided => "guided",
        }
    }

    /// Parses `static`, `dynamic` or `guided`.
    pub fn from_name(s: &str) -> Option<OmpSchedule> {
        match s {
            "static" => Some(OmpSchedule::Static),
            "dynamic" => Some(OmpSchedule::Dynamic),
            "guided" => Some(OmpSchedule::Guided),
            _ => None,
        }
    }
}

impl Default for EmitOptions {
    fn default() -> Self {
        EmitOptions {
            parallel_min_points: 4096,
            schedule: OmpSchedule::Static,
            overlap_exchanges: true,
            lag_points: 131072,
        }
    }
}

/// The nested SDFGs' static functions emitted so far, in order, and the name of each by
/// what determines its text: the nested SDFG (by address: it lives in the program being
/// emitted) and the location path and parameter depth of its call. A node's unchecked and
/// checked versions, and a map's parallel and single-thread loops, call the same function:
/// emitting it once per call text would double the code at every level of nesting.
pub(crate) struct Functions {
    /// How the dialect being printed spells functions, atomics and a team's work.
    pub(crate) dialect: &'static dyn Dialect,
    /// What the plans of nested SDFGs called inside map bodies are made for.
    pub(crate) target: Target,
    pub(crate) texts: Vec<String>,
    pub(crate) by_call: BTreeMap<(usize, String, usize), String>,
}

impl Functions {
    /// None emitted yet, in `dialect`, for plans made for `target`.
    pub(crate) fn new(dialect: &'static dyn Dialect, target: Target) -> Functions {
        Functions {
            dialect,
            target,
            texts: Vec::new(),
            by_call: BTreeMap::new(),
        }
    }
}

/// Where a function is emitted (the program's `run` or a nested SDFG's function): the
/// error sites, the location path and how many map parameters enclose it.
pub(crate) struct FnCtx<'s> {
    pub(crate) sites: &'s RefCell<Sites>,
    pub(crate) loc: Vec<LocPart>,
    pub(crate) depth: usize,
    /// Called at every point of a map: inlined into the caller.
    pub(crate) per_point: bool,
}

/// A function's frame: what its prologue declares — the arguments, the symbols, the
/// transients by the plan's lifetimes — and its body. The program's `run` (`cpu::emit`,
/// inside the OpenMP region) and a nested SDFG's function ([`emit_function`]) are
/// printed from one.
pub(crate) struct Frame<'a> {
    pub(crate) sdfg: &'a Sdfg,
    pub(crate) plan: &'a Plan,
    /// Transients allocated once by the frame (`init`, or a nested function's entry).
    pub(crate) transients: Vec<(&'a String, &'a DataDesc)>,
    /// Transients each worker of the parallel region allocates ([`Lifetime::PerWorker`]).
    pub(crate) thread_locals: Vec<(&'a String, &'a DataDesc)>,
    scope0: Scope<'a>,
}

impl<'a> Frame<'a> {
    /// The frame of `sdfg` printed from `plan`. The plan's lifetimes: per-worker arrays
    /// are allocated by each thread of the parallel region; body-local scalars are
    /// declared in every map iteration that uses them (`body_scope`); every other
    /// transient is allocated once, in `init` (a nested function's on entry).
    pub(crate) fn new(sdfg: &'a Sdfg, plan: &'a Plan, ctx: &'a FnCtx<'a>) -> Frame<'a> {
        let alloc = |pred: &dyn Fn(Lifetime) -> bool| -> Vec<(&'a String, &'a DataDesc)> {
            plan.allocations
                .iter()
                .filter(|a| pred(a.lifetime))
                .filter_map(|a| sdfg.arrays.get_key_value(&a.name))
                .collect()
        };
        Frame {
            sdfg,
            plan,
            transients: alloc(&|l| !matches!(l, Lifetime::PerWorker | Lifetime::BodyLocal)),
            thread_locals: alloc(&|l| l == Lifetime::PerWorker),
            scope0: Scope::new(sdfg, plan, ctx.sites, ctx.loc.clone(), ctx.depth),
        }
    }

    /// The symbols' declarations: the integer and float arguments, then the static ones.
    pub(crate) fn symbol_decls(&self, out: &mut String, ind: &str) {
        let sig = &self.plan.signature;
        for (k, n) in sig.ints.iter().enumerate() {
            let _ = writeln!(out, "{ind}const int64_t s_{n} = ints[{k}];");
        }
        for (k, n) in sig.floats.iter().enumerate() {
            let t = ctype(self.sdfg.symbols[n].dtype);
            let _ = writeln!(out, "{ind}const {t} s_{n} = ({t})floats[{k}];");
        }
        static_symbol_decls(out, self.sdfg, ind);
    }

    /// C text of a symbolic expression of the program's symbols, unchecked.
    pub(crate) fn plain(&self, e: &SymExpr) -> String {
        self.scope0.sym_with(e, SymCheck::Plain)
    }

    /// The number of elements of `d`'s storage, as C.
    pub(crate) fn size_of(&self, d: &DataDesc) -> String {
        match d {
            DataDesc::Scalar { .. } => "1".to_string(),
            DataDesc::Array(a) => {
                // 1 + Σ (shape_d − 1) · stride_d elements, 0 when a dimension is empty.
                let mut empty = Vec::new();
                let mut terms = vec!["1".to_string()];
                for (n, s) in a.shape.iter().zip(&a.strides) {
                    let n = self.scope0.sym_with(n, SymCheck::Plain);
                    empty.push(format!("({n}) <= 0"));
                    terms.push(format!(
                        "(({n}) - 1) * ({})",
                        self.scope0.sym_with(s, SymCheck::Plain)
                    ));
                }
                if empty.is_empty() {
                    "1".to_string()
                } else {
                    format!("(({}) ? 0 : ({}))", empty.join(" || "), terms.join(" + "))
                }
            }
        }
    }

    /// The argument pointers' declarations.
    pub(crate) fn arg_decls(&self, out: &mut String) {
        for (k, a) in self.plan.signature.arrays.iter().enumerate() {
            let t = ctype(a.dtype);
            let _ = writeln!(out, "    {t}* restrict a_{} = ({t}*)args[{k}];", a.name);
        }
    }

    /// The control flow's symbols, the body (`parallel`: run by a team that shares its
    /// steps) and the label every error jumps to.
    pub(crate) fn body(
        &self,
        out: &mut String,
        opts: &EmitOptions,
        fns: &mut Functions,
        counter: &mut usize,
        parallel: bool,
    ) -> Result<(), CodegenError> {
        for v in &self.plan.flow_symbols {
            let _ = writeln!(out, "        int64_t s_{v} = 0;");
        }
        if !parallel && self.transients.iter().any(|(_, d)| small_span(d).is_none()) {
            out.push_str("        if (sdf_e->failed) goto sdf_end;\n");
        }
        let scope = Scope {
            parallel,
            ..self.scope0.clone()
        };
        let mut em = Emitter::new(opts, fns, counter, 2);
        em.block(&scope, &self.plan.body)?;
        out.push_str(&em.out);
        out.push_str("        goto sdf_end;\n    sdf_end:;\n");
        Ok(())
    }
}

/// Emits a nested SDFG's static function (`plan`: its plan, made here when `None`), once
/// per call text; nested functions needed along the way are appended to `fns` before it.
/// Returns the function's name.
pub(crate) fn emit_function(
    sdfg: &Sdfg,
    plan: Option<&Plan>,
    opts: &EmitOptions,
    ctx: &FnCtx<'_>,
    fns: &mut Functions,
    counter: &mut usize,
) -> Result<String, CodegenError> {
    let key = (
        sdfg as *const Sdfg as usize,
        format!("{:?}", ctx.loc),
        ctx.depth,
    );
    if let Some(name) = fns.by_call.get(&key) {
        return Ok(name.clone());
    }
    let own_plan;
    let plan = match plan {
        Some(p) => p,
        None => {
            own_plan = Plan::nested(sdfg, fns.target)?;
            &own_plan
        }
    };
    let mut frame = Frame::new(sdfg, plan, ctx);
    frame.scope0.takes_pre = true;
    let mut out = String::new();
    *counter += 1;
    let name = format!("sdf_nested_{}", *counter);
    let _ = writeln!(
        out,
        "/* nested SDFG '{}' */\nstatic {}int {name}(void* const* args, const int64_t* ints, const double* floats, sdf_err_t* sdf_e, int sdf_pre) {{\n    (void)ints; (void)floats; (void)args; (void)sdf_pre;",
        sdfg.name,
        // Called at every point of a map: inlined, so its few-element containers
        // become registers and the call's argument arrays disappear.
        fns.dialect.function_qualifiers(ctx.per_point),
    );
    frame.arg_decls(&mut out);
    frame.symbol_decls(&mut out, "    ");
    // A transient of a few elements known at build time lives on the stack: a callee
    // called at every point of a map would otherwise allocate at every point (on a GPU,
    // from a device heap of a few megabytes that a large grid exhausts). A larger one is
    // allocated, and a failed allocation raises the error flag before the body runs.
    for (n, d) in &frame.transients {
        let t = ctype(d.dtype());
        let _ = match small_span(d) {
            Some(len) => writeln!(out, "    {t} a_{n}[{len}] = {{0}};"),
            None => writeln!(
                out,
                "    int64_t n_{n} = {}; {t}* restrict a_{n} = ({t}*)calloc((size_t)(n_{n} > 0 ? n_{n} : 1), sizeof({t})); if (!a_{n}) sdf_fail();",
                frame.size_of(d)
            ),
        };
    }
    out.push_str("    {\n");
    frame.body(&mut out, opts, fns, counter, false)?;
    out.push_str("    }\n");
    for (n, d) in &frame.transients {
        if small_span(d).is_none() {
            let _ = writeln!(out, "    free(a_{n});");
        }
    }
    out.push_str("    return sdf_e->failed ? 3 : 0;\n}\n");
    fns.texts.push(out);
    fns.by_call.insert(key, name.clone());
    Ok(name)
}

pub(crate) struct Emitter<'o> {
    pub(crate) opts: &'o EmitOptions,
    pub(crate) fns: &'o mut Functions,
    pub(crate) counter: &'o mut usize,
    pub(crate) out: String,
    pub(crate) indent: usize,
    /// Labels and temporaries made so far (names are unique per function).
    pub(crate) labels: usize,
    /// While a checked read is written as one expression: its index steps.
    pub(crate) deferred: Option<Vec<(String, String)>>,
    /// Inside a loop that stays scalar (its body loops over neighbours, reduces, calls or
    /// reads through an index table): NaNs are canonicalized by a compare and blend
    /// (`sdf_canon_blend`), not the conditional a vectorized loop wants (`sdf_canon`),
    /// which a scalar loop compiles to a branch per value.
    pub(crate) blend_canon: bool,
}

impl<'o> Emitter<'o> {
    /// An emitter printing at `indent` levels, its nested functions into `fns`.
    pub(crate) fn new(
        opts: &'o EmitOptions,
        fns: &'o mut Functions,
        counter: &'o mut usize,
        indent: usize,
    ) -> Emitter<'o> {
        Emitter {
            opts,
            fns,
            counter,
            out: String::new(),
            indent,
            labels: 0,
            deferred: None,
            blend_canon: false,
        }
    }
}

impl Emitter<'_> {
    /// Prints the spelling `f` of the dialect's team ([`Dialect::team`]), where it has one.
    pub(crate) fn team_line(&mut self, f: impl FnOnce(&dyn Team) -> String) {
        if let Some(t) = self.fns.dialect.team() {
            let s = f(t);
            self.line(&s);
        }
    }

    pub(crate) fn line(&mut self, s: &str) {
        for _ in 0..self.indent {
            self.out.push_str("    ");
        }
        self.out.push_str(s);
        self.out.push('\n');
    }

    /// One node of a graph run by one thread (state level in `single`, or a map body).
    pub(crate) fn node(
        &mut self,
        sc: &Scope<'_>,
        df: &Dataflow,
        n: NodeId,
    ) -> Result<(), CodegenError> {
        match df.node(n) {
            Node::Access(_) => {
                for e in df.in_edges(n) {
                    let src = df.endpoints(e).0;
                    if let Some(s) = df.node(src).as_access() {
                        let dst = df.node(n).as_access().unwrap_or_default();
                        self.copy(sc, s, dst, df.edge(e))?;
                    }
                }
            }
            Node::Tasklet(t) => self.tasklet(sc, df, n, t)?,
            Node::Map(m) => self.sequential_map(sc, m)?,
            Node::Nested(ns) => self.nested(sc, df, n, ns)?,
            Node::Library(LibraryNode::Reduce(r)) => self.reduce(sc, df, n, r)?,
            Node::Library(LibraryNode::HaloExchange(_)) => {
                return Err(CodegenError::Unsupported(
                    "a halo exchange inside a nested SDFG: the backends lower the exchanges of the program's own states only (inline the nested SDFG)".into(),
                ));
            }
        }
        Ok(())
    }
}
