//! The printer both backends share: a plan's control flow, states and nodes as C-family
//! text — tasklets, copies, reductions, nested SDFGs (as functions taking the caller's
//! error record, inlined where a map calls them at every point), parallel and sequential
//! map loops, and the checked versions of nodes ([`checked`]) — with row-jamming of
//! tiled producer–consumer pairs ([`jam`], CPU only). The C backend drives it for one
//! translation unit with an OpenMP region (`cpu::emit`), the CUDA backend for kernels
//! (`cuda::emit`), which set the `device` flag of [`Functions`].
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
    BinOp, DType, DataDesc, Dataflow, Dim, Edge, Expr, LibraryNode, MapScope, Memlet, NestedSdfg,
    Node, NodeId, Reduce, Sdfg, Subset, SymExpr, Tasklet, Wcr,
};

use crate::cfamily::cexpr::{self, SymCheck, SymNames, combine_with, convert, ctype, literal};
use crate::cfamily::sites::{LocPart, MAX_PARAMS, SiteKind, Sites};
use crate::plan::{CheckPolicy, Flow, Lifetime, Plan, StatePlan, Step, StepKind};

mod checked;
mod jam;
use crate::CodegenError;
use crate::abi::Signature;

/// Options of the printer: how the C unit runs its parallel maps (the CUDA printer
/// takes the defaults).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EmitOptions {
    /// Maps with fewer points than this run on one thread (`omp single`).
    pub parallel_min_points: i64,
    /// How parallel maps divide their iterations among threads.
    pub schedule: OmpSchedule,
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
        }
    }
}

/// The nested SDFGs' static functions emitted so far, in order, and the name of each by
/// what determines its text: the nested SDFG (by address: it lives in the program being
/// emitted) and the location path and parameter depth of its call. A node's unchecked and
/// checked versions, and a map's parallel and single-thread loops, call the same function:
/// emitting it once per call text would double the code at every level of nesting.
#[derive(Default)]
pub(crate) struct Functions {
    /// Printing device code (CUDA): functions are `__device__`, write-conflict
    /// resolutions in parallel maps use atomic compare-and-swap.
    pub(crate) device: bool,
    pub(crate) texts: Vec<String>,
    pub(crate) by_call: BTreeMap<(usize, String, usize), String>,
}

/// Whether a map body keeps its loop scalar: it holds an inner map, a library node or a
/// nested SDFG call, or reads through an index table. A body whose table entries were
/// checked per row (`rows_checked`: its gathers are plain loads; no gather of it goes
/// through an index computed in the body, which stays checked per point) and that calls float
/// min or max at least once per table read vectorizes instead: a min or max with its
/// NaN and signed-zero rules is six instructions per value in scalar code and the same
/// six per vector, while gathers over the few levels of a column gain little from
/// vectors (measured on GT4Py's programs, `docs/perf.md`).
fn stays_scalar(sdfg: &Sdfg, df: &Dataflow, rows_checked: bool) -> bool {
    if df.node_ids().into_iter().any(|n| {
        matches!(
            df.node(n),
            Node::Map(_) | Node::Library(_) | Node::Nested(_)
        )
    }) {
        return true;
    }
    let tables: Vec<Vec<&str>> = df
        .edge_ids()
        .into_iter()
        .map(|e| df.edge(e).memlet.subset.tables())
        .filter(|t| !t.is_empty())
        .collect();
    let computed = tables
        .iter()
        .flatten()
        .any(|t| matches!(sdfg.arrays.get(*t), Some(DataDesc::Scalar { .. })));
    let gathers = tables.len();
    gathers > 0 && !(rows_checked && !computed && min_max_calls(df) >= gathers)
}

/// Whether output connector `c` of tasklet `n` goes only to transient scalars whose value
/// only tasklets read (directly, or through copies into other such scalars), without a
/// write-conflict resolution. Its NaN need not be canonical then: every reader's
/// arithmetic gives a NaN whatever the payload of a NaN operand, and no operation
/// (comparison, conversion to an integer, min, max, select) looks at the payload, so what
/// reaches an array (a tasklet output stored there, canonicalized) has the same bits
/// either way. The interpreter canonicalizes every tasklet output.
fn only_tasklets_read(sdfg: &Sdfg, df: &Dataflow, n: NodeId, c: &str) -> bool {
    let outs: Vec<_> = df
        .out_edges(n)
        .into_iter()
        .filter(|&e| df.edge(e).src_conn.as_deref() == Some(c))
        .collect();
    !outs.is_empty()
        && outs.iter().all(|&e| {
            let dst = df.endpoints(e).1;
            df.edge(e).memlet.wcr.is_none()
                && df
                    .node(dst)
                    .as_access()
                    .is_some_and(|d| scalar_only_computed_with(sdfg, df, d, 0))
        })
}

/// Whether transient scalar `d` of map body `df` is read only by tasklets, or copied only
/// into transient scalars for which this holds (at most a few copies deep), and is no
/// index table.
fn scalar_only_computed_with(sdfg: &Sdfg, df: &Dataflow, d: &str, depth: usize) -> bool {
    let scalar = matches!(
        sdfg.arrays.get(d),
        Some(DataDesc::Scalar {
            transient: true,
            ..
        })
    );
    scalar
        && depth < 4
        && df
            .edge_ids()
            .into_iter()
            .all(|r| !df.edge(r).memlet.subset.tables().contains(&d))
        && df.node_ids().into_iter().all(|x| {
            df.node(x).as_access() != Some(d)
                || df.out_edges(x).into_iter().all(|r| {
                    let edge = df.edge(r);
                    let to = df.endpoints(r).1;
                    edge.memlet.wcr.is_none()
                        && match df.node(to) {
                            Node::Tasklet(_) => true,
                            Node::Access(t) => {
                                t != d && scalar_only_computed_with(sdfg, df, t, depth + 1)
                            }
                            _ => false,
                        }
                })
        })
}

/// Float min and max calls in the tasklets of `df`.
fn min_max_calls(df: &Dataflow) -> usize {
    fn count(e: &Expr) -> usize {
        match e {
            Expr::Call(f, args) => {
                usize::from(matches!(f, sdflow_ir::MathFn::Min | sdflow_ir::MathFn::Max))
                    + args.iter().map(count).sum::<usize>()
            }
            Expr::Unary(_, a) | Expr::Cast(_, a) => count(a),
            Expr::Binary(_, a, b) => count(a) + count(b),
            Expr::Select(c, a, b) => count(c) + count(a) + count(b),
            _ => 0,
        }
    }
    df.node_ids()
        .into_iter()
        .map(|n| match df.node(n) {
            Node::Tasklet(t) => t.code.iter().map(|st| count(&st.value)).sum(),
            _ => 0,
        })
        .sum()
}

/// One index-table read of a map body checked per point of the map's outer loops: the
/// dimension, the extent its value must lie in, and the inner-map parameters (constant
/// ranges) its table index uses.
struct RowCheck {
    dim: Dim,
    extent: SymExpr,
    inner: Vec<(String, sdflow_ir::Range)>,
}

/// The row checks of `m`'s body when every index-table read there can be checked per
/// point of the first `outer` parameters: its table index uses those, program symbols
/// and parameters of inner maps of constant ranges only; and the body writes no table.
/// `None` otherwise. A scalar table (an index the body computes at each point, GT4Py's
/// dynamic vertical offsets) has no row check: its reads stay checked at each point, in
/// the same gather whose other dimensions come from a table checked with its row.
fn row_checks(sdfg: &Sdfg, m: &MapScope, outer: usize) -> Option<Vec<RowCheck>> {
    fn walk(
        sdfg: &Sdfg,
        df: &Dataflow,
        allowed: &BTreeSet<String>,
        inner: &BTreeMap<String, sdflow_ir::Range>,
        out: &mut Vec<RowCheck>,
    ) -> Option<()> {
        for e in df.edge_ids() {
            let memlet = &df.edge(e).memlet;
            if memlet
                .other_subset
                .as_ref()
                .is_some_and(|o| !o.tables().is_empty())
            {
                return None;
            }
            for (k, d) in memlet.subset.0.iter().enumerate() {
                let Dim::Indirect { table, index, .. } = d else {
                    continue;
                };
                let shape = sdfg.arrays.get(&memlet.data)?.as_array()?.shape.clone();
                match sdfg.arrays.get(table)? {
                    DataDesc::Scalar { .. } => continue,
                    DataDesc::Array(_) => {}
                }
                let mut used = Vec::new();
                for x in index.iter().flat_map(SymExpr::free_symbols) {
                    if let Some(r) = inner.get(&x) {
                        if !used
                            .iter()
                            .any(|(p, _): &(String, sdflow_ir::Range)| *p == x)
                        {
                            used.push((x.clone(), r.clone()));
                        }
                    } else if !allowed.contains(&x) && !sdfg.symbols.contains_key(&x) {
                        return None;
                    }
                }
                out.push(RowCheck {
                    dim: d.clone(),
                    extent: shape.get(k)?.clone(),
                    inner: used,
                });
            }
        }
        for n in df.node_ids() {
            match df.node(n) {
                Node::Map(im) => {
                    let mut inner = inner.clone();
                    for (p, r) in im.params.iter().zip(&im.ranges) {
                        let constant = r.start.as_int().is_some()
                            && r.end.as_int().is_some()
                            && r.step.as_int() == Some(1);
                        if constant {
                            inner.insert(p.clone(), r.clone());
                        }
                    }
                    walk(sdfg, &im.body, allowed, &inner, out)?;
                }
                // A callee that gathers through no table (GT4Py's `if` at a point) reads
                // nothing a row check would cover.
                Node::Nested(ns) if !gathers_anywhere(&ns.sdfg) => {}
                Node::Nested(_) => return None,
                _ => {}
            }
        }
        Some(())
    }
    /// Containers written anywhere in `df`.
    fn written(df: &Dataflow, out: &mut BTreeSet<String>) {
        for n in df.node_ids() {
            match df.node(n) {
                Node::Access(a) if df.in_degree(n) > 0 => {
                    out.insert(a.clone());
                }
                Node::Map(im) => written(&im.body, out),
                _ => {}
            }
        }
    }
    let allowed: BTreeSet<String> = m.params[..outer].iter().cloned().collect();
    let mut out = Vec::new();
    walk(sdfg, &m.body, &allowed, &BTreeMap::new(), &mut out)?;
    let mut writes = BTreeSet::new();
    written(&m.body, &mut writes);
    let writes_a_table = out
        .iter()
        .any(|c| matches!(&c.dim, Dim::Indirect { table, .. } if writes.contains(table)));
    (!writes_a_table).then_some(out)
}

/// Whether any memlet of `sdfg` (its states, map bodies and callees) reads through an
/// index table.
fn gathers_anywhere(sdfg: &Sdfg) -> bool {
    fn df_gathers(df: &Dataflow) -> bool {
        df.edge_ids().into_iter().any(|e| {
            let m = &df.edge(e).memlet;
            !m.subset.tables().is_empty()
                || m.other_subset
                    .as_ref()
                    .is_some_and(|o| !o.tables().is_empty())
        }) || df.node_ids().into_iter().any(|n| match df.node(n) {
            Node::Map(m) => df_gathers(&m.body),
            Node::Nested(ns) => gathers_anywhere(&ns.sdfg),
            _ => false,
        })
    }
    sdfg.states.iter().any(|st| df_gathers(&st.graph))
}

/// Whether a map runs at most 16 iterations, known at build time.
fn few_iterations(m: &MapScope) -> bool {
    let sizes: Vec<SymExpr> = m.ranges.iter().map(|r| r.size()).collect();
    constant_product(&sizes, 16).is_some()
}

/// The product of `sizes` (negative ones count as 0) when every one is a constant and the
/// product is at most `limit`.
fn constant_product(sizes: &[SymExpr], limit: i64) -> Option<i64> {
    sizes.iter().try_fold(1i64, |acc, e| {
        let n = e.simplify().as_int()?.max(0);
        acc.checked_mul(n).filter(|v| *v <= limit)
    })
}

/// Whether `df` calls a nested SDFG, directly or inside its maps.
fn calls_nested(df: &Dataflow) -> bool {
    df.node_ids().into_iter().any(|n| match df.node(n) {
        Node::Nested(_) => true,
        Node::Map(m) => calls_nested(&m.body),
        _ => false,
    })
}

/// Where a function is emitted: the program's `run` (`top`) or a nested SDFG's function,
/// the error sites, the location path and how many map parameters enclose it.
pub(crate) struct FnCtx<'s> {
    pub(crate) top: bool,
    pub(crate) sites: &'s RefCell<Sites>,
    pub(crate) loc: Vec<LocPart>,
    pub(crate) depth: usize,
    /// Called at every point of a map: inlined into the caller.
    pub(crate) per_point: bool,
}

/// Where a name used in symbolic expressions and code is defined.
#[derive(Clone)]
pub(crate) struct Scope<'a> {
    pub(crate) sdfg: &'a Sdfg,
    /// Map parameters in scope.
    pub(crate) params: BTreeSet<String>,
    /// Transient scalars declared as body locals.
    pub(crate) locals: BTreeSet<String>,
    /// Inside a parallel region (worksharing at state level).
    pub(crate) parallel: bool,
    /// Inside the body of a map that runs in parallel (wcr writes need atomics).
    pub(crate) in_parallel_map: bool,
    /// The checked version of a node: subscripts are checked one by one, symbolic
    /// arithmetic everywhere raises its errors, map loops record their parameters.
    pub(crate) checked: bool,
    /// Where failure jumps to in a checked body (a label after the checked loops).
    pub(crate) stop: Option<String>,
    /// The location path of what is emitted, as the interpreter writes it.
    pub(crate) loc: Vec<LocPart>,
    /// Map parameters recorded (`sdf_pv`) by the enclosing checked loops.
    pub(crate) depth: usize,
    /// The program's error sites.
    pub(crate) sites: &'a RefCell<Sites>,
    /// Every index-table entry the body reads was checked for its row before the inner
    /// loops ([`Emitter::row_checks`]): gathers index without a check.
    pub(crate) rows_checked: bool,
}

impl<'a> Scope<'a> {
    fn is_symbol(&self, n: &str) -> bool {
        self.params.contains(n) || self.sdfg.symbols.contains_key(n)
    }

    fn scalar_lvalue(&self, n: &str) -> Option<String> {
        match self.sdfg.arrays.get(n)? {
            DataDesc::Scalar { .. } if self.locals.contains(n) => Some(format!("a_{n}")),
            DataDesc::Scalar { .. } => Some(format!("a_{n}[0]")),
            DataDesc::Array(_) => None,
        }
    }

    /// The same scope with one more location step.
    pub(crate) fn at(&self, part: LocPart) -> Scope<'a> {
        let mut loc = self.loc.clone();
        loc.push(part);
        Scope {
            params: self.params.clone(),
            locals: self.locals.clone(),
            stop: self.stop.clone(),
            loc,
            ..*self
        }
    }

    /// Registers an error site at this scope's location.
    fn site(&self, kind: SiteKind) -> usize {
        self.sites.borrow_mut().add(&self.loc, kind)
    }

    /// A site whose failure names the map point it happened at also in unchecked loops
    /// (which record no parameters as they run): its number and the C arguments that
    /// pass the parameters, `first, count, p0, p1, p2, p3` (for `sdf_raise_at`). The
    /// parameters are those of the maps of the function being printed, at most four;
    /// with more, the failure names the unchecked maps without their points.
    fn site_at_point(&self, kind: SiteKind) -> (usize, String) {
        let mut first = None;
        let mut names = Vec::new();
        for part in self.loc.iter().rev() {
            match part {
                LocPart::Text(t) if t.starts_with("sdfg '") => break,
                LocPart::Map { params, depth, .. } | LocPart::Point { params, depth, .. } => {
                    first = Some(*depth);
                    names.splice(0..0, params.iter().map(|p| format!("s_{p}")));
                }
                LocPart::Text(_) => {}
            }
        }
        let has_point = self.loc.iter().any(|p| matches!(p, LocPart::Point { .. }));
        match first {
            Some(first) if has_point && !self.checked && names.len() <= 4 => {
                let count = names.len();
                names.resize(4, "0".to_string());
                let site = self.sites.borrow_mut().add_with(&self.loc, kind, true);
                (site, format!("{first}, {count}, {}", names.join(", ")))
            }
            _ => (self.site(kind), "0, 0, 0, 0, 0, 0".to_string()),
        }
    }

    /// C text of a symbolic expression whose overflow or division by zero raises the
    /// interpreter's error at this location.
    pub(crate) fn sym(&self, e: &SymExpr) -> String {
        let site = |x: &SymExpr, div: bool| {
            let expr = x.to_string();
            self.site(if div {
                SiteKind::DivZero { expr }
            } else {
                SiteKind::Overflow { expr }
            })
        };
        self.sym_with(e, SymCheck::Raise(&site))
    }

    /// C text of a subscript or map bound: plain C arithmetic in an unchecked node (its
    /// in-bounds condition held), checked in a checked one.
    pub(crate) fn sub_sym(&self, e: &SymExpr) -> String {
        if self.checked {
            self.sym(e)
        } else {
            self.sym_with(e, SymCheck::Plain)
        }
    }

    /// C text of a condition: overflow makes it not hold (sets `sdf_q`).
    fn quiet_sym(&self, e: &SymExpr) -> String {
        self.sym_with(e, SymCheck::Quiet)
    }

    fn sym_with(&self, e: &SymExpr, check: SymCheck<'_>) -> String {
        let names = SymNames {
            scalar: &|n| {
                let lv = self.scalar_lvalue(n)?;
                let float = self
                    .sdfg
                    .arrays
                    .get(n)
                    .is_some_and(|d| d.dtype().is_float());
                Some(if float {
                    format!("sdf_f2i64({lv})")
                } else {
                    lv
                })
            },
            is_symbol: &|n| self.is_symbol(n),
            check,
        };
        cexpr::sym(e, &names)
    }

    /// The C lvalue of one element of `data` at `subset` (ranges at their start).
    fn elem(&self, data: &str, subset: &Subset) -> String {
        let Some(desc) = self.sdfg.arrays.get(data) else {
            return format!("a_{data}[0]");
        };
        match desc {
            DataDesc::Scalar { .. } => self.scalar_lvalue(data).unwrap_or_default(),
            DataDesc::Array(a) => {
                let idx: Vec<String> = subset
                    .0
                    .iter()
                    .enumerate()
                    .map(|(k, d)| self.index_of(d, a.shape.get(k), Some((data, k))))
                    .collect();
                format!("a_{data}[{}]", self.flat(&idx, &a.strides))
            }
        }
    }

    /// The C index of one dimension; `extent` is the dimension's size, against which a
    /// value read from an index table is checked (a bad entry raises the error flag and
    /// reads index 0 instead of memory outside the array).
    fn index(&self, d: &Dim, extent: Option<&SymExpr>) -> String {
        self.index_of(d, extent, None)
    }

    /// [`Scope::index`] of dimension `dim` of `data` when `of` names them: a bad
    /// table entry then raises at a site of its own, whose message is the interpreter's
    /// (the index, the dimension, the array and its extent).
    fn index_of(&self, d: &Dim, extent: Option<&SymExpr>, of: Option<(&str, usize)>) -> String {
        match d {
            Dim::Index(e) => self.sub_sym(e),
            Dim::Range { start, .. } => self.sub_sym(start),
            Dim::Indirect {
                table,
                index,
                offset,
            } => {
                let idx: Vec<String> = index.iter().map(|e| self.sub_sym(e)).collect();
                let strides = self
                    .sdfg
                    .arrays
                    .get(table)
                    .and_then(|d| d.as_array())
                    .map(|a| a.strides.clone())
                    .unwrap_or_default();
                // A scalar table (a per-iteration index computed in a map body) is read
                // as the scalar it is.
                let value = match self.sdfg.arrays.get(table) {
                    Some(DataDesc::Scalar { .. }) => {
                        format!("(int64_t){}", self.scalar_lvalue(table).unwrap_or_default())
                    }
                    _ => format!("(int64_t)a_{table}[{}]", self.flat(&idx, &strides)),
                };
                // An array table's entries were checked with their row; a scalar table
                // (an index computed at the point) is checked here.
                let row_checked = self.rows_checked
                    && matches!(self.sdfg.arrays.get(table), Some(DataDesc::Array(_)));
                let value = match offset.as_int() {
                    Some(0) => value,
                    // Checked with its row: in range, so the sum cannot overflow.
                    _ if row_checked && extent.is_some() => {
                        format!("({value} + ({}))", self.sub_sym(offset))
                    }
                    _ => format!("sdf_add64({value}, {})", self.sub_sym(offset)),
                };
                match (extent, of) {
                    (Some(_), Some(_)) if row_checked => format!("({value})"),
                    (Some(n), Some((data, dim))) => {
                        let (site, at) = self.site_at_point(SiteKind::Index {
                            data: data.to_string(),
                            dim,
                        });
                        let n = self.sym_with(n, SymCheck::Plain);
                        format!("sdf_inds({value}, {n}, {site}, {at})")
                    }
                    (Some(n), None) => {
                        format!("sdf_ind({value}, {})", self.sym_with(n, SymCheck::Plain))
                    }
                    (None, _) => format!("({value})"),
                }
            }
        }
    }

    fn flat(&self, idx: &[String], strides: &[SymExpr]) -> String {
        if idx.is_empty() {
            return "0".to_string();
        }
        idx.iter()
            .zip(strides)
            .map(|(i, s)| match s.as_int() {
                Some(1) => format!("({i})"),
                _ => format!("({i}) * ({})", self.sym_with(s, SymCheck::Plain)),
            })
            .collect::<Vec<_>>()
            .join(" + ")
    }
}

/// Emits the program's `run` (top level) or a nested SDFG's static function; nested
/// functions needed along the way are appended to `fns`.
pub(crate) fn emit_function(
    sdfg: &Sdfg,
    plan: Option<&Plan>,
    opts: &EmitOptions,
    ctx: &FnCtx<'_>,
    fns: &mut Functions,
    counter: &mut usize,
) -> Result<String, CodegenError> {
    let top = ctx.top;
    let key = (
        sdfg as *const Sdfg as usize,
        format!("{:?}", ctx.loc),
        ctx.depth,
    );
    if !top && let Some(name) = fns.by_call.get(&key) {
        return Ok(name.clone());
    }
    let own_plan;
    let plan = match plan {
        Some(p) => p,
        None => {
            own_plan = Plan::nested(sdfg)?;
            &own_plan
        }
    };
    let sig = &plan.signature;
    let flow = &plan.flow_symbols;
    // The plan's lifetimes: per-worker arrays are allocated by each thread of the parallel
    // region; body-local scalars are declared in every map iteration that uses them
    // (`body_scope`); every other transient is allocated once, in `init` (a nested
    // function's on entry).
    let alloc = |pred: &dyn Fn(Lifetime) -> bool| -> Vec<(&String, &DataDesc)> {
        plan.allocations
            .iter()
            .filter(|a| pred(a.lifetime))
            .filter_map(|a| sdfg.arrays.get_key_value(&a.name))
            .collect()
    };
    let transients = alloc(&|l| !matches!(l, Lifetime::PerWorker | Lifetime::BodyLocal));
    let thread_locals = alloc(&|l| l == Lifetime::PerWorker);
    let mut out = String::new();
    let mut own_name = String::new();
    let scope0 = Scope {
        sdfg,
        params: BTreeSet::new(),
        locals: BTreeSet::new(),
        parallel: false,
        in_parallel_map: false,
        checked: false,
        stop: None,
        loc: ctx.loc.clone(),
        depth: ctx.depth,
        sites: ctx.sites,
        rows_checked: false,
    };
    let symbol_decls = |out: &mut String, ind: &str| {
        for (k, n) in sig.ints.iter().enumerate() {
            let _ = writeln!(out, "{ind}const int64_t s_{n} = ints[{k}];");
        }
        for (k, n) in sig.floats.iter().enumerate() {
            let t = ctype(sdfg.symbols[n].dtype);
            let _ = writeln!(out, "{ind}const {t} s_{n} = ({t})floats[{k}];");
        }
        static_symbol_decls(out, sdfg, ind);
    };
    let size_of = |d: &DataDesc| -> String {
        match d {
            DataDesc::Scalar { .. } => "1".to_string(),
            DataDesc::Array(a) => {
                // 1 + Σ (shape_d − 1) · stride_d elements, 0 when a dimension is empty.
                let mut empty = Vec::new();
                let mut terms = vec!["1".to_string()];
                for (n, s) in a.shape.iter().zip(&a.strides) {
                    let n = scope0.sym_with(n, SymCheck::Plain);
                    empty.push(format!("({n}) <= 0"));
                    terms.push(format!(
                        "(({n}) - 1) * ({})",
                        scope0.sym_with(s, SymCheck::Plain)
                    ));
                }
                if empty.is_empty() {
                    "1".to_string()
                } else {
                    format!("(({}) ? 0 : ({}))", empty.join(" || "), terms.join(" + "))
                }
            }
        }
    };
    let arg_decls = |out: &mut String| {
        for (k, a) in sig.arrays.iter().enumerate() {
            let t = ctype(a.dtype);
            let _ = writeln!(out, "    {t}* restrict a_{} = ({t}*)args[{k}];", a.name);
        }
    };
    if top {
        out.push_str("typedef struct {\n");
        for (n, d) in &transients {
            let _ = writeln!(out, "    {}* t_{n};", ctype(d.dtype()));
        }
        out.push_str("    sdf_err_t err;\n} sdflow_state;\n\n");
        out.push_str(
            "/* The first checked error of the last run: [failed, site, v0, v1, map parameters...]. */\n\
             void sdflow_error(void* handle, int64_t* out) {\n    sdflow_state* st = (sdflow_state*)handle;\n    memcpy(out, &st->err, sizeof st->err);\n}\n\n",
        );
        out.push_str("void sdflow_finalize(void* handle) {\n    sdflow_state* st = (sdflow_state*)handle;\n    if (!st) return;\n");
        for (n, _) in &transients {
            let _ = writeln!(out, "    free(st->t_{n});");
        }
        out.push_str("    free(st);\n}\n\n");
        out.push_str(
            "void* sdflow_init(const int64_t* ints, const double* floats) {\n    (void)floats;\n",
        );
        symbol_decls(&mut out, "    ");
        out.push_str("    sdflow_state* st = (sdflow_state*)calloc(1, sizeof(sdflow_state));\n    if (!st) return NULL;\n");
        for (n, d) in &transients {
            let _ = writeln!(
                out,
                "    {{ int64_t n = {}; st->t_{n} = ({}*)calloc((size_t)(n > 0 ? n : 1), sizeof({})); if (!st->t_{n}) {{ sdflow_finalize(st); return NULL; }} }}",
                size_of(d),
                ctype(d.dtype()),
                ctype(d.dtype())
            );
        }
        out.push_str("    return st;\n}\n\n");
        out.push_str("int sdflow_run(void* handle, void* const* args, const int64_t* ints, const double* floats) {\n    sdflow_state* st = (sdflow_state*)handle;\n    (void)ints; (void)floats; (void)args; (void)st;\n");
        let _ = writeln!(
            out,
            "    const int64_t* sdf_ok = ints + {};\n    (void)sdf_ok;",
            sig.ints.len()
        );
        out.push_str(
            "    int sdf_status = 0;\n    int64_t sdf_abort = 0;\n    memset(&st->err, 0, sizeof st->err);\n#pragma omp parallel num_threads(sdf_threads())\n    {\n        sdf_error_flag = 0;\n        sdf_err_t* sdf_e = SDF_ERR_PTR();\n        memset(sdf_e, 0, sizeof *sdf_e);\n        int64_t sdf_seq = 0;\n",
        );
        // The pointers are declared inside the parallel region, so that the function the
        // compiler outlines for it holds them as `restrict` locals.
        arg_decls(&mut out);
        for (n, d) in &transients {
            let t = ctype(d.dtype());
            let _ = writeln!(out, "    {t}* restrict a_{n} = st->t_{n};");
        }
        symbol_decls(&mut out, "        ");
        for (n, d) in &thread_locals {
            let t = ctype(d.dtype());
            let _ = writeln!(
                out,
                "        const int64_t n_{n} = {}; {t}* restrict a_{n} = ({t}*)calloc((size_t)(n_{n} > 0 ? n_{n} : 1), sizeof({t})); if (!a_{n}) sdf_fail();",
                size_of(d)
            );
        }
    } else {
        *counter += 1;
        let name = format!("sdf_nested_{}", *counter);
        own_name = name.clone();
        let _ = writeln!(
            out,
            "/* nested SDFG '{}' */\nstatic {}{}int {name}(void* const* args, const int64_t* ints, const double* floats, sdf_err_t* sdf_e) {{\n    (void)ints; (void)floats; (void)args;",
            sdfg.name,
            if fns.device { "__device__ " } else { "" },
            // Called at every point of a map: inlined, so its few-element containers
            // become registers and the call's argument arrays disappear.
            match (ctx.per_point, fns.device) {
                (true, true) => "__forceinline__ ",
                (true, false) => "inline __attribute__((always_inline)) ",
                (false, _) => "",
            }
        );
        arg_decls(&mut out);
        symbol_decls(&mut out, "    ");
        // A transient of a few elements known at build time lives on the stack: a
        // callee called at every point of a map would otherwise allocate at every point
        // (on a GPU, from a device heap of a few megabytes that a large grid exhausts).
        // A larger one is allocated, and a failed allocation raises the error flag
        // before the body runs.
        for (n, d) in &transients {
            let t = ctype(d.dtype());
            let _ = match small_len(d.shape()) {
                Some(len) => writeln!(out, "    {t} a_{n}[{len}] = {{0}};"),
                None => writeln!(
                    out,
                    "    int64_t n_{n} = {}; {t}* restrict a_{n} = ({t}*)calloc((size_t)(n_{n} > 0 ? n_{n} : 1), sizeof({t})); if (!a_{n}) sdf_fail();",
                    size_of(d)
                ),
            };
        }
        out.push_str("    {\n");
    }
    for v in flow {
        let _ = writeln!(out, "        int64_t s_{v} = 0;");
    }
    if !top
        && transients
            .iter()
            .any(|(_, d)| small_len(d.shape()).is_none())
    {
        out.push_str("        if (sdf_e->failed) goto sdf_end;\n");
    }
    let scope = Scope {
        parallel: top,
        ..scope0
    };
    let _ = &scope.sites;
    let text = {
        let mut em = Emitter {
            opts,
            fns: &mut *fns,
            counter: &mut *counter,
            out: String::new(),
            indent: 2,
            labels: 0,
            deferred: None,
            blend_canon: false,
        };
        em.block(&scope, &plan.body)?;
        em.out
    };
    out.push_str(&text);
    out.push_str("        goto sdf_end;\n    sdf_end:;\n");
    if top {
        for (n, _) in &thread_locals {
            let _ = writeln!(out, "        free(a_{n});");
        }
        out.push_str(concat!(
            "        if (sdf_error_flag) {\n#pragma omp atomic write\n            sdf_status = 2;\n        }\n",
            "        if (sdf_e->failed) {\n#pragma omp critical(sdf_err)\n",
            "            if (!st->err.failed || sdf_err_before(sdf_e, &st->err)) st->err = *sdf_e;\n        }\n",
            "    }\n    (void)sdf_abort;\n    if (st->err.failed) sdf_status = 3;\n    return sdf_status;\n}\n"
        ));
    } else {
        out.push_str("    }\n");
        for (n, d) in &transients {
            if small_len(d.shape()).is_none() {
                let _ = writeln!(out, "    free(a_{n});");
            }
        }
        out.push_str("    return sdf_e->failed ? 3 : 0;\n}\n");
        fns.texts.push(out);
        fns.by_call.insert(key, own_name.clone());
        return Ok(own_name);
    }
    Ok(out)
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

/// When a state-level node runs unchecked.
enum Cond {
    /// Always (its condition holds for any symbol values).
    Always,
    /// Never (it cannot be stated, or it fails whatever the values).
    Never,
    /// When bind-time condition number `k` held (`sdf_ok[k]`).
    Bind(usize),
    /// When this condition holds at the node (it reads loop variables or host scalars).
    Runtime(SymExpr),
}

impl Emitter<'_> {
    pub(crate) fn line(&mut self, s: &str) {
        for _ in 0..self.indent {
            self.out.push_str("    ");
        }
        self.out.push_str(s);
        self.out.push('\n');
    }

    fn block(&mut self, sc: &Scope<'_>, b: &Flow) -> Result<(), CodegenError> {
        match b {
            Flow::State(sp) => {
                let st = &sc.sdfg.states[sp.id.index()];
                self.line(&format!("/* state '{}' */", st.name.replace("*/", "* /")));
                self.state(
                    &sc.at(LocPart::Text(format!("state '{}'", st.name))),
                    &st.graph,
                    sp,
                )?;
            }
            Flow::Seq(items) => {
                for i in items {
                    self.block(sc, i)?;
                }
            }
            Flow::Loop {
                var: v,
                init,
                cond,
                update,
                body,
                host_reads,
            } => {
                // Every thread evaluates the condition; when it reads a host scalar that
                // the body writes, all must have read it before anyone writes it.
                let host = sc.parallel && !host_reads.is_empty();
                // Every thread evaluates the same values, so a symbolic error ends the
                // run on all of them alike.
                let here = sc.at(LocPart::Text(format!("loop over '{v}'")));
                let u = self.fresh();
                self.line(&format!("s_{v} = {};", here.sym(init)));
                self.line("if (sdf_e->failed) goto sdf_end;");
                self.line("for (;;) {");
                self.indent += 1;
                self.line(&format!("const int64_t sdf_c{u} = {};", here.sym(cond)));
                self.line("if (sdf_e->failed) goto sdf_end;");
                self.line(&format!("if (sdf_c{u} == 0) break;"));
                if host {
                    self.line("#pragma omp barrier");
                }
                self.block(sc, body)?;
                self.line(&format!("s_{v} = {};", here.sym(update)));
                self.line("if (sdf_e->failed) goto sdf_end;");
                self.indent -= 1;
                self.line("}");
                if host {
                    self.line("#pragma omp barrier");
                }
            }
            Flow::If {
                cond,
                then,
                otherwise,
                host_reads,
            } => {
                let host = sc.parallel && !host_reads.is_empty();
                let here = sc.at(LocPart::Text("if condition".into()));
                let u = self.fresh();
                self.line(&format!("const int64_t sdf_c{u} = {};", here.sym(cond)));
                self.line("if (sdf_e->failed) goto sdf_end;");
                self.line(&format!("if (sdf_c{u} != 0) {{"));
                self.indent += 1;
                if host {
                    self.line("#pragma omp barrier");
                }
                self.block(sc, then)?;
                self.indent -= 1;
                self.line("} else {");
                self.indent += 1;
                if host {
                    self.line("#pragma omp barrier");
                }
                self.block(sc, otherwise)?;
                self.indent -= 1;
                self.line("}");
            }
            Flow::Assign {
                assignments: a,
                host_reads,
            } => {
                self.line("{");
                self.indent += 1;
                for (k, (n, e)) in a.iter().enumerate() {
                    let here = sc.at(LocPart::Text(format!("assignment to '{n}'")));
                    self.line(&format!("const int64_t sdf_tmp{k} = {};", here.sym(e)));
                }
                self.line("if (sdf_e->failed) goto sdf_end;");
                for (k, (n, _)) in a.iter().enumerate() {
                    self.line(&format!("s_{n} = sdf_tmp{k};"));
                }
                if sc.parallel && !host_reads.is_empty() {
                    self.line("#pragma omp barrier");
                }
                self.indent -= 1;
                self.line("}");
            }
        }
        Ok(())
    }

    /// A state-level graph: in a parallel region with worksharing and barriers where
    /// dependences need them; elsewhere plain sequential code.
    fn state(&mut self, sc: &Scope<'_>, df: &Dataflow, sp: &StatePlan) -> Result<(), CodegenError> {
        // Steps run `nowait`; a barrier goes before a step that waits for one that ran
        // since the last barrier.
        let mut pending: Vec<usize> = Vec::new();
        for (k, step) in sp.steps.iter().enumerate() {
            let n = step.node;
            if sc.parallel {
                let depends = pending.iter().any(|p| step.waits.contains(p));
                if depends {
                    self.line("#pragma omp barrier");
                    pending.clear();
                }
            }
            let cond = self.condition(sc, step);
            let u = self.fresh();
            self.line("{");
            self.indent += 1;
            match &cond {
                Cond::Always | Cond::Never => self.line(&format!("const int sdf_c{u} = 1;")),
                Cond::Bind(k) => self.line(&format!("const int sdf_c{u} = sdf_ok[{k}] != 0;")),
                Cond::Runtime(c) => self.line(&format!(
                    "int sdf_q = 0; const int sdf_c{u} = ({}) != 0 && !sdf_q;",
                    sc.quiet_sym(c)
                )),
            }
            if !matches!(cond, Cond::Never) {
                self.line(&format!("if (sdf_c{u}) {{"));
                self.indent += 1;
                self.unchecked_node(sc, df, step)?;
                self.indent -= 1;
                self.line("} else {");
            } else {
                self.line(&format!("(void)sdf_c{u}; {{"));
            }
            if !matches!(cond, Cond::Always) {
                self.indent += 1;
                if sc.parallel {
                    self.line("#pragma omp single nowait");
                }
                self.checked_node(sc, df, n)?;
                self.indent -= 1;
            }
            self.line("}");
            if sc.parallel {
                self.line("if (sdf_e->failed) {\n#pragma omp atomic write");
                self.line("    sdf_abort = sdf_seq + 1;");
                self.line("}");
            } else {
                self.line("if (sdf_e->failed) goto sdf_end;");
            }
            self.indent -= 1;
            self.line("}");
            pending.push(k);
        }
        if sc.parallel && !pending.is_empty() {
            // Errors end the run after the state, on every thread at once: `sdf_abort`
            // holds the number of the state that failed, so a thread still reading it
            // after an earlier state's barrier does not see a later state's error.
            self.line("#pragma omp barrier");
            self.line("sdf_seq++;");
            self.line("{ int64_t sdf_a;\n#pragma omp atomic read");
            self.line("  sdf_a = sdf_abort;");
            self.line("  if (sdf_a != 0 && sdf_a <= sdf_seq) goto sdf_end; }");
        }
        Ok(())
    }

    /// A state-level node as it runs when its in-bounds condition holds.
    fn unchecked_node(
        &mut self,
        sc: &Scope<'_>,
        df: &Dataflow,
        step: &Step,
    ) -> Result<(), CodegenError> {
        let n = step.node;
        match (&step.kind, df.node(n)) {
            (&StepKind::ParallelMap { collapse, coarse }, Node::Map(m)) if sc.parallel => {
                self.parallel_map(sc, m, collapse, coarse)?;
            }
            (_, Node::Access(dst)) if sc.parallel && self.shared_copies(sc, df, n, dst) => {}
            (_, node) => {
                if sc.parallel {
                    self.line("#pragma omp single nowait");
                }
                self.line("{");
                self.indent += 1;
                // A `single nowait` block may run beside other nodes of the state:
                // its write-conflict resolutions are atomic.
                let inner = Scope {
                    parallel: false,
                    params: sc.params.clone(),
                    locals: sc.locals.clone(),
                    in_parallel_map: sc.in_parallel_map || sc.parallel,
                    stop: None,
                    loc: sc.loc.clone(),
                    ..*sc
                };
                let inner = match node {
                    Node::Map(_) => inner,
                    other => inner.at(LocPart::Text(other.describe())),
                };
                self.node(&inner, df, n)?;
                self.indent -= 1;
                self.line("}");
            }
        }
        Ok(())
    }

    /// The copies into access node `n` (container `dst`) of a state in a parallel region,
    /// shared among the threads when each is a loop nest ([`Emitter::copy_loops`]) between
    /// two containers without a write-conflict resolution. Copies into one node run in
    /// edge order: a barrier separates two of them. Returns false, printing nothing, when
    /// one of them is not such a copy.
    fn shared_copies(&mut self, sc: &Scope<'_>, df: &Dataflow, n: NodeId, dst: &str) -> bool {
        let edges = df.in_edges(n);
        let copies: Vec<(&str, &Edge)> = edges
            .iter()
            .filter_map(|&e| Some((df.node(df.endpoints(e).0).as_access()?, df.edge(e))))
            .collect();
        let shareable = !copies.is_empty()
            && copies.iter().all(|&(src, edge)| {
                let (s_sub, d_sub) = copy_subsets(sc.sdfg, src, dst, &edge.memlet);
                src != dst
                    && edge.memlet.wcr.is_none()
                    && copy_loop_dims(sc.sdfg, src, &s_sub, dst, &d_sub).is_some()
            });
        if !shareable {
            return false;
        }
        let inner = Scope {
            parallel: false,
            params: sc.params.clone(),
            locals: sc.locals.clone(),
            in_parallel_map: true,
            stop: None,
            loc: sc.loc.clone(),
            ..*sc
        };
        let inner = inner.at(LocPart::Text(df.node(n).describe()));
        for (k, &(src, edge)) in copies.iter().enumerate() {
            if k > 0 {
                self.line("#pragma omp barrier");
            }
            self.line(&format!(
                "{{ /* copy {} */",
                edge.memlet.to_string().replace("*/", "* /")
            ));
            self.indent += 1;
            let looped = self.copy_loops(&inner, src, dst, edge, true);
            debug_assert!(looped, "a shareable copy is a loop nest");
            self.indent -= 1;
            self.line("}");
        }
        true
    }

    /// When a step runs unchecked, as the plan decided ([`CheckPolicy`]): a bind-time
    /// condition is numbered among those `bind` evaluates.
    fn condition(&mut self, sc: &Scope<'_>, step: &Step) -> Cond {
        match &step.check {
            CheckPolicy::Never => Cond::Always,
            CheckPolicy::Always => Cond::Never,
            CheckPolicy::AtBind(c) => {
                let mut sites = sc.sites.borrow_mut();
                sites.bind_checks.push(c.clone());
                Cond::Bind(sites.bind_checks.len() - 1)
            }
            CheckPolicy::AtRun(c) => Cond::Runtime(c.clone()),
        }
    }

    /// A fresh number for labels and temporaries.
    fn fresh(&mut self) -> usize {
        self.labels += 1;
        self.labels
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
        }
        Ok(())
    }

    /// The graph of a map body, in topological order, by the current thread.
    pub(crate) fn body(&mut self, sc: &Scope<'_>, df: &Dataflow) -> Result<(), CodegenError> {
        // Producer–consumer pairs are printed row-jammed (`jam.rs`) in the CPU's loops,
        // not in device code (kernels, and nested functions printed for them).
        if !self.fns.device
            && !sc.checked
            && let Some(pair) = jam::Jam::of(sc.sdfg, df)
        {
            return self.jammed(sc, &pair);
        }
        let order = df
            .topological_order()
            .map_err(|_| CodegenError::Unsupported("a map body has a cycle".into()))?;
        for n in order {
            match df.node(n) {
                Node::Map(_) => self.node(sc, df, n)?,
                other => self.node(&sc.at(LocPart::Text(other.describe())), df, n)?,
            }
        }
        Ok(())
    }

    pub(crate) fn loop_header(&self, sc: &Scope<'_>, m: &MapScope, k: usize) -> String {
        let (p, r) = (&m.params[k], &m.ranges[k]);
        // The condition proved the step positive; a non-unit step stops instead of
        // stepping past the largest integer.
        let step = match r.step.as_int() {
            Some(1) => format!("s_{p}++"),
            _ => {
                let st = sc.sub_sym(&r.step);
                format!("s_{p} = (s_{p} > INT64_MAX - ({st})) ? INT64_MAX : s_{p} + ({st})")
            }
        };
        format!(
            "for (int64_t s_{p} = {}; s_{p} < {}; {step}) {{",
            sc.sub_sym(&r.start),
            sc.sub_sym(&r.end)
        )
    }

    /// Body-local scalars of a map body, declared at the top of an iteration.
    pub(crate) fn body_scope<'s>(
        &mut self,
        sc: &Scope<'s>,
        m: &MapScope,
        in_parallel_map: bool,
    ) -> Scope<'s> {
        let mut inner = Scope {
            sdfg: sc.sdfg,
            params: sc.params.clone(),
            locals: sc.locals.clone(),
            parallel: false,
            in_parallel_map: sc.in_parallel_map || in_parallel_map,
            checked: sc.checked,
            stop: sc.stop.clone(),
            loc: sc.loc.clone(),
            depth: sc.depth,
            sites: sc.sites,
            rows_checked: sc.rows_checked,
        };
        inner.params.extend(m.params.iter().cloned());
        // Checked loops record their parameters for messages (between the loops, in
        // `checked_map`). Unchecked loops record them only around nested-SDFG calls,
        // whose functions report errors with the interpreter's `map 'm' at i=…` path;
        // a tight loop without calls stores nothing per point. Recording here, at the top
        // of the innermost body, keeps collapsed loop nests perfectly nested.
        if sc.checked || calls_nested(&m.body) {
            if !sc.checked {
                for (k, p) in m.params.iter().enumerate() {
                    if sc.depth + k < MAX_PARAMS {
                        self.line(&format!("sdf_pv[{}] = s_{p};", sc.depth + k));
                    }
                }
            }
            inner.loc.push(LocPart::Map {
                label: m.label.clone(),
                params: m.params.clone(),
                depth: sc.depth,
            });
            inner.depth += m.params.len();
        } else {
            inner.loc.push(LocPart::Point {
                label: m.label.clone(),
                params: m.params.clone(),
                depth: sc.depth,
            });
            inner.depth += m.params.len();
        }
        for d in m.body.accessed_data() {
            if let Some(DataDesc::Scalar {
                dtype,
                transient: true,
            }) = sc.sdfg.arrays.get(&d)
                && !inner.locals.contains(&d)
            {
                self.line(&format!("{} a_{d} = 0;", ctype(*dtype)));
                inner.locals.insert(d);
            }
        }
        inner
    }

    fn sequential_map(&mut self, sc: &Scope<'_>, m: &MapScope) -> Result<(), CodegenError> {
        self.line(&format!("/* map '{}' */", m.label.replace("*/", "* /")));
        self.map_loops(sc, m, false)
    }

    fn parallel_map(
        &mut self,
        sc: &Scope<'_>,
        m: &MapScope,
        collapse: usize,
        coarse: bool,
    ) -> Result<(), CodegenError> {
        let sizes: Vec<String> = m
            .ranges
            .iter()
            .map(|r| {
                let size = r.size();
                format!("sdf_max64({}, 0)", sc.sym(&size))
            })
            .collect();
        let points = if sizes.is_empty() {
            "1".to_string()
        } else {
            sizes.join(" * ")
        };
        // The plan collapses all but the innermost loop (when the inner bounds do not use
        // outer parameters), so the innermost loop stays contiguous.
        self.line(&format!("/* map '{}' */", m.label.replace("*/", "* /")));
        // A map whose body holds maps (tiles, scan columns) does much more than one point
        // of work per iteration: it runs in parallel whenever it has two iterations.
        let threshold = if coarse { "2" } else { "SDF_PAR_MIN" };
        self.line(&format!("if ({points} >= {threshold}) {{"));
        self.indent += 1;
        let schedule = self.opts.schedule.name();
        if collapse > 1 {
            self.line(&format!(
                "#pragma omp for collapse({collapse}) schedule({schedule}) nowait"
            ));
        } else {
            self.line(&format!("#pragma omp for schedule({schedule}) nowait"));
        }
        self.map_loops_from(sc, m, true, collapse.max(1))?;
        self.indent -= 1;
        self.line("} else {");
        self.indent += 1;
        self.line("#pragma omp single nowait");
        self.line("{");
        self.indent += 1;
        // Beside other nodes of the state: write-conflict resolutions stay atomic.
        self.map_loops(sc, m, true)?;
        self.indent -= 1;
        self.line("}");
        self.indent -= 1;
        self.line("}");
        Ok(())
    }

    /// The NaN canonicalization the loop being printed wants ([`Emitter::blend_canon`]).
    fn canon(&self) -> fn(&str, DType) -> String {
        if self.blend_canon {
            cexpr::canon_blend
        } else {
            cexpr::canon
        }
    }

    /// [`combine`], canonicalizing as the loop being printed wants.
    fn combine(&self, w: Wcr, old: &str, new: &str, t: DType) -> String {
        combine_with(w, old, new, t, self.canon())
    }

    /// The map's loop nest and body, in the scope `sc` (the loops themselves are the
    /// caller's to schedule); `parallel`: the body runs in a parallel map's iterations.
    fn map_loops(
        &mut self,
        sc: &Scope<'_>,
        m: &MapScope,
        parallel: bool,
    ) -> Result<(), CodegenError> {
        self.map_loops_from(sc, m, parallel, 0)
    }

    /// [`Self::map_loops`]; with `outer` > 0, the index-table entries the body reads for
    /// one point of the first `outer` loops — GT4Py's neighbour tables, read at a
    /// horizontal point for every level — are checked once there, before the inner
    /// loops, which then gather without a check (a bad entry runs them checked, as
    /// before). The check per level kept the level loop from vectorizing.
    fn map_loops_from(
        &mut self,
        sc: &Scope<'_>,
        m: &MapScope,
        parallel: bool,
        outer: usize,
    ) -> Result<(), CodegenError> {
        let checks = if outer > 0 && outer < m.params.len() && !sc.checked && !sc.rows_checked {
            row_checks(sc.sdfg, m, outer)
        } else {
            None
        };
        let Some(checks) = checks.filter(|c| !c.is_empty()) else {
            return self.map_loops_inner(sc, m, parallel, 0);
        };
        self.open_loops(sc, m, 0..outer);
        let mut at = sc.clone();
        at.params.extend(m.params[..outer].iter().cloned());
        // Only where the inner loops run: the body reads the tables only then.
        let nonempty: Vec<String> = m.ranges[outer..]
            .iter()
            .map(|r| format!("({}) < ({})", at.sub_sym(&r.start), at.sub_sym(&r.end)))
            .collect();
        self.line("int sdf_rok = 1;");
        self.line(&format!("if ({}) {{", nonempty.join(" && ")));
        self.indent += 1;
        for c in &checks {
            for (p, r) in &c.inner {
                self.line(&format!(
                    "for (int64_t s_{p} = {}; s_{p} < {}; s_{p}++) {{",
                    r.start, r.end
                ));
                self.indent += 1;
            }
            let mut here = at.clone();
            here.params.extend(c.inner.iter().map(|(p, _)| p.clone()));
            let value = here.index_of(&c.dim, None, None);
            let ext = here.sym_with(&c.extent, SymCheck::Plain);
            self.line(&format!(
                "{{ const int64_t sdf_rv = {value}; if (sdf_rv < 0 || sdf_rv >= ({ext})) sdf_rok = 0; }}"
            ));
            for _ in &c.inner {
                self.indent -= 1;
                self.line("}");
            }
        }
        self.indent -= 1;
        self.line("}");
        self.line("if (sdf_rok) {");
        self.indent += 1;
        let mut proven = sc.clone();
        proven.rows_checked = true;
        self.map_loops_inner(&proven, m, parallel, outer)?;
        self.indent -= 1;
        self.line("} else {");
        self.indent += 1;
        self.map_loops_inner(sc, m, parallel, outer)?;
        self.indent -= 1;
        self.line("}");
        self.close_loops(outer);
        Ok(())
    }

    /// Opens the loops of `m`'s parameters `ks`.
    fn open_loops(&mut self, sc: &Scope<'_>, m: &MapScope, ks: std::ops::Range<usize>) {
        for k in ks {
            let h = self.loop_header(sc, m, k);
            self.line(&h);
            self.indent += 1;
        }
    }

    /// Closes `n` loops.
    fn close_loops(&mut self, n: usize) {
        for _ in 0..n {
            self.indent -= 1;
            self.line("}");
        }
    }

    /// The loops of `m` from parameter `from` on, and the body.
    fn map_loops_inner(
        &mut self,
        sc: &Scope<'_>,
        m: &MapScope,
        parallel: bool,
        from: usize,
    ) -> Result<(), CodegenError> {
        self.open_loops(sc, m, from..m.params.len());
        let inner = self.body_scope(sc, m, parallel);
        // A loop of a few iterations inside a scalar loop (a neighbour loop) is unrolled
        // into it and stays scalar too; any other inner loop (a tile's rows) decides
        // for itself.
        let scalar = stays_scalar(sc.sdfg, &m.body, sc.rows_checked)
            || (self.blend_canon && few_iterations(m));
        let blend = std::mem::replace(&mut self.blend_canon, scalar);
        let done = self.body(&inner, &m.body);
        self.blend_canon = blend;
        done?;
        self.close_loops(m.params.len() - from);
        Ok(())
    }

    fn tasklet(
        &mut self,
        sc: &Scope<'_>,
        df: &Dataflow,
        n: NodeId,
        t: &Tasklet,
    ) -> Result<(), CodegenError> {
        self.line(&format!(
            "{{ /* tasklet '{}' */",
            t.name.replace("*/", "* /")
        ));
        self.indent += 1;
        // Inputs the code reads only under a lazy condition are read where it evaluates
        // them (one expression, checked ones too), every other one here.
        let lazy_names = t.lazy_inputs();
        let mut lazy: BTreeMap<&str, String> = BTreeMap::new();
        for e in df.in_edges(n) {
            let edge = df.edge(e);
            let Some(c) = &edge.dst_conn else { continue };
            let Some(&ct) = t.inputs.get(c) else { continue };
            let dt = sc
                .sdfg
                .arrays
                .get(&edge.memlet.data)
                .map_or(ct, DataDesc::dtype);
            if lazy_names.contains(c.as_str()) {
                let read = if sc.checked {
                    let v = self.checked_read_expr(sc, &edge.memlet.data, &edge.memlet.subset);
                    convert(&v, dt, ct)
                } else {
                    convert(&sc.elem(&edge.memlet.data, &edge.memlet.subset), dt, ct)
                };
                lazy.insert(c.as_str(), format!("({read})"));
                continue;
            }
            let v = if sc.checked {
                self.checked_elem(sc, &edge.memlet.data, &edge.memlet.subset)
            } else {
                sc.elem(&edge.memlet.data, &edge.memlet.subset)
            };
            self.line(&format!(
                "const {} v_{c} = {};",
                ctype(ct),
                convert(&v, dt, ct)
            ));
        }
        if let (true, Some(stop)) = (sc.checked, &sc.stop) {
            self.line(&format!("if (sdf_e->failed) goto {stop};"));
        }
        for (c, ct) in &t.outputs {
            self.line(&format!("{} v_{c} = 0;", ctype(*ct)));
        }
        let mut names = TaskletNames::new(t);
        for st in &t.code {
            let var = |name: &str| -> (String, DType) {
                let is_param = |p: &str| sc.params.contains(p);
                let symbol = |s: &str| sc.sdfg.symbols.get(s).map(|s| s.dtype);
                match names.resolve(name, &is_param, &symbol) {
                    Some((Binding::Input, ty)) if lazy.contains_key(name) => {
                        (lazy[name].clone(), ty)
                    }
                    Some((Binding::Input | Binding::Local | Binding::Output, ty)) => {
                        (format!("v_{name}"), ty)
                    }
                    Some((Binding::Symbol, ty)) if !ty.is_float() => {
                        (format!("(({})s_{name})", ctype(ty)), ty)
                    }
                    Some((_, ty)) => (format!("s_{name}"), ty),
                    None => (format!("s_{name}"), DType::I64),
                }
            };
            // Integer division raises at a site of its own: the message names the
            // statement and the operands, as the interpreter's does.
            let mut site = |op: BinOp| {
                Some(sc.site_at_point(SiteKind::TaskletDivZero {
                    op: op.symbol().to_string(),
                    stmt: st.to_string(),
                }))
            };
            let (x, ty) = cexpr::expr_sited(&st.value, &var, &mut site);
            match names.assign(&st.target, ty) {
                (Binding::Output, out_t) if only_tasklets_read(sc.sdfg, df, n, &st.target) => {
                    self.line(&format!("v_{} = {};", st.target, convert(&x, ty, out_t)));
                }
                (Binding::Output, out_t) => self.line(&format!(
                    "v_{} = {};",
                    st.target,
                    self.canon()(&convert(&x, ty, out_t), out_t)
                )),
                _ => self.line(&format!("{} v_{} = {x};", ctype(ty), st.target)),
            }
        }
        for e in df.out_edges(n) {
            let edge = df.edge(e);
            let Some(c) = &edge.src_conn else { continue };
            let Some(&ct) = t.outputs.get(c) else {
                continue;
            };
            let data = &edge.memlet.data;
            let dt = sc.sdfg.arrays.get(data).map_or(ct, DataDesc::dtype);
            let lv = if sc.checked {
                let lv = self.checked_elem(sc, data, &edge.memlet.subset);
                if let Some(stop) = &sc.stop {
                    self.line(&format!("if (sdf_e->failed) goto {stop};"));
                }
                lv
            } else {
                sc.elem(data, &edge.memlet.subset)
            };
            self.store(
                sc,
                &lv,
                &convert(&format!("v_{c}"), ct, dt),
                dt,
                edge.memlet.wcr,
            );
        }
        self.indent -= 1;
        self.line("}");
        Ok(())
    }

    /// `lv = value`, or combined under `wcr` (atomically inside parallel maps).
    fn store(&mut self, sc: &Scope<'_>, lv: &str, value: &str, dt: DType, wcr: Option<Wcr>) {
        let Some(w) = wcr else {
            self.line(&format!("{lv} = {value};"));
            return;
        };
        let combined = self.combine(w, lv, value, dt);
        if sc.in_parallel_map && self.fns.device {
            // One compare-and-swap loop per resolution and type (`sdf_atomic_*`).
            self.line(&format!(
                "sdf_atomic_{}_{}(&{lv}, {value});",
                w.name(),
                dt.name()
            ));
        } else if sc.in_parallel_map {
            match (w, dt) {
                (Wcr::Sum, t) if t.is_float() => {
                    self.line("#pragma omp atomic update");
                    self.line(&format!("{lv} += {value};"));
                }
                _ => {
                    self.line("#pragma omp critical(sdf_wcr)");
                    self.line(&format!("{{ {lv} = {combined}; }}"));
                }
            }
        } else {
            self.line(&format!("{lv} = {combined};"));
        }
    }

    /// Copies `edge`'s source subset of `src` to its destination subset of `dst`, element
    /// by element in row-major order (within one container, which may overlap itself, all
    /// reads before the writes).
    fn copy(
        &mut self,
        sc: &Scope<'_>,
        src: &str,
        dst: &str,
        edge: &Edge,
    ) -> Result<(), CodegenError> {
        let m = &edge.memlet;
        let sdfg = sc.sdfg;
        let (s_sub, d_sub) = copy_subsets(sdfg, src, dst, m);
        let st = sdfg.arrays.get(src).map_or(DType::F64, DataDesc::dtype);
        let dt = sdfg.arrays.get(dst).map_or(DType::F64, DataDesc::dtype);
        self.line(&format!(
            "{{ /* copy {} */",
            m.to_string().replace("*/", "* /")
        ));
        self.indent += 1;
        if src != dst && self.copy_loops(sc, src, dst, edge, false) {
            self.indent -= 1;
            self.line("}");
            return Ok(());
        }
        let vol = subset_volume(sc, &s_sub);
        self.line(&format!("const int64_t sdf_n = {vol};"));
        if src != dst {
            // Two containers never overlap: element by element, without a buffer.
            self.line("for (int64_t sdf_q = 0; sdf_q < sdf_n; sdf_q++) {");
            self.indent += 1;
            self.copy_element(sc, src, dst, edge, "sdf_q");
            self.indent -= 1;
            self.line("}");
            self.indent -= 1;
            self.line("}");
            return Ok(());
        }
        self.line(&format!(
            "{}* sdf_buf = ({}*)malloc((size_t)(sdf_n > 0 ? sdf_n : 1) * sizeof({}));",
            ctype(st),
            ctype(st),
            ctype(st)
        ));
        self.line("if (sdf_buf) {");
        self.indent += 1;
        self.line("for (int64_t sdf_q = 0; sdf_q < sdf_n; sdf_q++) {");
        self.indent += 1;
        let s_el = self.decompose(sc, src, &s_sub, "sdf_q", "sdf_s");
        self.line(&format!("sdf_buf[sdf_q] = {s_el};"));
        self.indent -= 1;
        self.line("}");
        self.line("for (int64_t sdf_q = 0; sdf_q < sdf_n; sdf_q++) {");
        self.indent += 1;
        let d_el = self.decompose(sc, dst, &d_sub, "sdf_q", "sdf_d");
        self.store(sc, &d_el, &convert("sdf_buf[sdf_q]", st, dt), dt, m.wcr);
        self.indent -= 1;
        self.line("}");
        self.line("free(sdf_buf);");
        self.indent -= 1;
        self.line("} else { sdf_fail(); }");
        self.indent -= 1;
        self.line("}");
        Ok(())
    }

    /// A copy between two different containers whose subsets have the same sizes once
    /// the dimensions of size 1 are left out, as one loop per remaining dimension in
    /// row-major order (column-major where the destination is: its first dimension
    /// contiguous): the elements the flat order of [`Emitter::copy`] reaches, without a
    /// division per element. `shared`: the loops are shared among the team's threads
    /// (`omp for ... nowait`; the caller is in a parallel region, outside any map).
    /// Returns false, printing nothing, when the shapes differ.
    fn copy_loops(
        &mut self,
        sc: &Scope<'_>,
        src: &str,
        dst: &str,
        edge: &Edge,
        shared: bool,
    ) -> bool {
        let m = &edge.memlet;
        let (s_sub, d_sub) = copy_subsets(sc.sdfg, src, dst, m);
        let Some((sk, dk)) = copy_loop_dims(sc.sdfg, src, &s_sub, dst, &d_sub) else {
            return false;
        };
        let u = self.fresh();
        for (j, &k) in sk.iter().enumerate() {
            let size = sc.sym(&s_sub.0[k].size());
            self.line(&format!("const int64_t sdf_n{u}_{j} = {size};"));
        }
        let s_el = self.copy_loop_elem(sc, src, &s_sub, &sk, u, "s");
        let d_el = self.copy_loop_elem(sc, dst, &d_sub, &dk, u, "d");
        let st = sc.sdfg.arrays.get(src).map_or(DType::F64, DataDesc::dtype);
        let dt = sc.sdfg.arrays.get(dst).map_or(DType::F64, DataDesc::dtype);
        if shared {
            if sk.is_empty() {
                self.line("#pragma omp single nowait");
            } else if sk.len() > 1 {
                self.line(&format!(
                    "#pragma omp for collapse({}) schedule(static) nowait",
                    sk.len()
                ));
            } else {
                self.line("#pragma omp for schedule(static) nowait");
            }
        }
        // The loop over the destination's contiguous dimension innermost: the last
        // looped dimension, unless the first has stride 1 and the last does not (a
        // column-major container). A resolved write keeps the row-major order (a sum's
        // rounding follows it).
        let unit = |data: &str, k: Option<&usize>| {
            k.and_then(|&k| sc.sdfg.arrays.get(data)?.as_array()?.strides.get(k))
                .and_then(SymExpr::as_int)
                == Some(1)
        };
        let column_major =
            m.wcr.is_none() && sk.len() > 1 && unit(dst, dk.first()) && !unit(dst, dk.last());
        let order: Vec<usize> = if column_major {
            (0..sk.len()).rev().collect()
        } else {
            (0..sk.len()).collect()
        };
        for j in order {
            self.line(&format!(
                "for (int64_t sdf_i{u}_{j} = 0; sdf_i{u}_{j} < sdf_n{u}_{j}; sdf_i{u}_{j}++)"
            ));
        }
        self.line("{");
        self.indent += 1;
        self.store(sc, &d_el, &convert(&s_el, st, dt), dt, m.wcr);
        self.indent -= 1;
        self.line("}");
        true
    }

    /// The element of `data` that [`Emitter::copy_loops`] reaches: a dimension looped
    /// over (`looped`, in order) at `start + i * step`, the others at their one index,
    /// each computed once before the loops.
    fn copy_loop_elem(
        &mut self,
        sc: &Scope<'_>,
        data: &str,
        subset: &Subset,
        looped: &[usize],
        u: usize,
        side: &str,
    ) -> String {
        let desc = sc.sdfg.arrays.get(data);
        if subset.rank() == 0 || desc.is_none_or(|d| d.rank() == 0) {
            return sc.elem(data, subset);
        }
        let mut idx = Vec::with_capacity(subset.rank());
        for (k, d) in subset.0.iter().enumerate() {
            let first = match d {
                Dim::Range { start, .. } => sc.sym(start),
                other => sc.index(other, desc.and_then(|d| d.shape().get(k))),
            };
            self.line(&format!("const int64_t sdf_{side}{u}_{k} = {first};"));
            idx.push(match (looped.iter().position(|&x| x == k), d) {
                (Some(j), Dim::Range { step, .. }) if step.as_int() != Some(1) => {
                    let step = sc.sym(step);
                    self.line(&format!("const int64_t sdf_{side}t{u}_{k} = {step};"));
                    format!("sdf_{side}{u}_{k} + sdf_i{u}_{j} * sdf_{side}t{u}_{k}")
                }
                (Some(j), _) => format!("sdf_{side}{u}_{k} + sdf_i{u}_{j}"),
                (None, _) => format!("sdf_{side}{u}_{k}"),
            });
        }
        let strides = desc
            .and_then(|d| d.as_array())
            .map(|a| a.strides.clone())
            .unwrap_or_default();
        format!("a_{data}[{}]", sc.flat(&idx, &strides))
    }

    /// Element number `q` (row-major in the source subset) of a copy between two
    /// different containers, by the current thread: the CUDA printer's grid covers a
    /// copy's elements this way (the containers do not overlap, so no buffer is needed).
    pub(crate) fn copy_element(
        &mut self,
        sc: &Scope<'_>,
        src: &str,
        dst: &str,
        edge: &Edge,
        q: &str,
    ) {
        let m = &edge.memlet;
        let (s_sub, d_sub) = copy_subsets(sc.sdfg, src, dst, m);
        let st = sc.sdfg.arrays.get(src).map_or(DType::F64, DataDesc::dtype);
        let dt = sc.sdfg.arrays.get(dst).map_or(DType::F64, DataDesc::dtype);
        let s_el = self.decompose(sc, src, &s_sub, q, "sdf_s");
        let d_el = self.decompose(sc, dst, &d_sub, q, "sdf_d");
        self.store(sc, &d_el, &convert(&s_el, st, dt), dt, m.wcr);
    }

    /// Declares the multi-index of element number `q` (row-major) of `subset` and returns
    /// the element's lvalue.
    fn decompose(
        &mut self,
        sc: &Scope<'_>,
        data: &str,
        subset: &Subset,
        q: &str,
        prefix: &str,
    ) -> String {
        let rank = subset.rank();
        let desc = sc.sdfg.arrays.get(data);
        if rank == 0 || desc.is_none_or(|d| d.rank() == 0) {
            return sc.elem(data, subset);
        }
        self.line(&format!("int64_t {prefix}_r = {q};"));
        let mut idx = vec![String::new(); rank];
        for k in (0..rank).rev() {
            let d = &subset.0[k];
            let size = sc.sym(&d.size());
            let (start, step) = match d {
                Dim::Range { start, step, .. } => (sc.sym(start), sc.sym(step)),
                other => (
                    sc.index(other, desc.and_then(|d| d.shape().get(k))),
                    "1".to_string(),
                ),
            };
            self.line(&format!(
                "const int64_t {prefix}{k} = ({start}) + ({prefix}_r % ({size})) * ({step}); {prefix}_r /= ({size});"
            ));
            idx[k] = format!("{prefix}{k}");
        }
        let strides = desc
            .and_then(|d| d.as_array())
            .map(|a| a.strides.clone())
            .unwrap_or_default();
        format!("a_{data}[{}]", sc.flat(&idx, &strides))
    }

    fn reduce(
        &mut self,
        sc: &Scope<'_>,
        df: &Dataflow,
        n: NodeId,
        r: &Reduce,
    ) -> Result<(), CodegenError> {
        let parts = ReduceParts::of(sc, df, n, r)?;
        self.line("{ /* reduce */");
        self.indent += 1;
        self.line(&format!(
            "const int64_t sdf_nk = {}, sdf_nr = {};",
            parts.count(sc, &parts.kept),
            parts.count(sc, &parts.red)
        ));
        self.line("for (int64_t sdf_o = 0; sdf_o < sdf_nk; sdf_o++) {");
        self.indent += 1;
        self.reduce_point(sc, &parts);
        self.indent -= 1;
        self.line("}");
        self.indent -= 1;
        self.line("}");
        Ok(())
    }

    /// Output element number `sdf_o` (row-major over the kept axes) of a reduction: its
    /// inputs combined in row-major order over the reduced axes (`sdf_nr` of them), then
    /// stored. Each output element is one sequential sum, so a grid over the outputs (the
    /// CUDA printer's) combines in the interpreter's order.
    pub(crate) fn reduce_point(&mut self, sc: &Scope<'_>, parts: &ReduceParts<'_>) {
        let ReduceParts {
            r,
            idata,
            odata,
            it,
            ot,
            isub,
            osub,
            wcr,
            ..
        } = parts;
        let (r, it, ot) = (*r, *it, *ot);
        let sdfg = sc.sdfg;
        let rank = isub.rank();
        let sizes: Vec<String> = isub.0.iter().map(|d| sc.sym(&d.size())).collect();
        let t = ctype(it);
        match r.identity {
            Some(v) => self.line(&format!(
                "{t} sdf_acc = {};",
                convert(&literal(v), v.dtype(), it)
            )),
            None => self.line(&format!("{t} sdf_acc = 0;")),
        }
        self.line("for (int64_t sdf_i = 0; sdf_i < sdf_nr; sdf_i++) {");
        self.indent += 1;
        // Multi-index: kept axes from sdf_o, reduced axes from sdf_i (row-major each).
        self.line("int64_t sdf_ko = sdf_o, sdf_ri = sdf_i;");
        let mut idx = vec![String::new(); rank];
        for k in (0..rank).rev() {
            let (var, src) = if parts.red.contains(&k) {
                ("sdf_ri", "r")
            } else {
                ("sdf_ko", "k")
            };
            let d = &isub.0[k];
            let (start, step) = match d {
                Dim::Range { start, step, .. } => (sc.sym(start), sc.sym(step)),
                other => (
                    sc.index(
                        other,
                        sdfg.arrays.get(*idata).and_then(|d| d.shape().get(k)),
                    ),
                    "1".to_string(),
                ),
            };
            self.line(&format!(
                "const int64_t sdf_{src}{k} = ({start}) + ({var} % ({})) * ({step}); {var} /= ({});",
                sizes[k], sizes[k]
            ));
            idx[k] = format!("sdf_{src}{k}");
        }
        let strides = sdfg
            .arrays
            .get(*idata)
            .and_then(|d| d.as_array())
            .map(|a| a.strides.clone())
            .unwrap_or_default();
        let x = format!("a_{idata}[{}]", sc.flat(&idx, &strides));
        if r.identity.is_some() {
            self.line(&format!(
                "sdf_acc = {};",
                self.combine(r.op, "sdf_acc", &x, it)
            ));
        } else {
            self.line(&format!(
                "sdf_acc = (sdf_i == 0) ? {x} : {};",
                self.combine(r.op, "sdf_acc", &x, it)
            ));
        }
        self.indent -= 1;
        self.line("}");
        let d_el = self.decompose(sc, odata, osub, "sdf_o", "sdf_w");
        self.store(sc, &d_el, &convert("sdf_acc", it, ot), ot, *wcr);
    }

    /// A nested SDFG: inner arrays filled from the caller's subsets, the callee run as a
    /// static function, outputs written back.
    fn nested(
        &mut self,
        sc: &Scope<'_>,
        df: &Dataflow,
        n: NodeId,
        ns: &NestedSdfg,
    ) -> Result<(), CodegenError> {
        let inner = &ns.sdfg;
        let mut loc = sc.loc.clone();
        loc.push(LocPart::Text(format!("sdfg '{}'", inner.name)));
        let ctx = FnCtx {
            top: false,
            sites: sc.sites,
            loc,
            depth: sc.depth,
            per_point: !sc.params.is_empty(),
        };
        let fname = emit_function(inner, None, self.opts, &ctx, self.fns, self.counter)?;
        let isig = Signature::of(inner);
        self.line(&format!(
            "{{ /* nested SDFG '{}' */",
            inner.name.replace("*/", "* /")
        ));
        self.indent += 1;
        // Inner symbol values, then inner shapes in terms of them.
        let mut ints = Vec::new();
        for s in &isig.ints {
            let v = ns
                .symbol_mapping
                .get(s)
                .map_or("0".to_string(), |e| sc.sym(e));
            self.line(&format!("const int64_t sdf_is_{s} = {v};"));
            ints.push(format!("sdf_is_{s}"));
        }
        let mut floats = Vec::new();
        for s in &isig.floats {
            let v = match ns.symbol_mapping.get(s) {
                Some(SymExpr::Sym(x)) => format!("(double)s_{x}"),
                _ => "0.0".to_string(),
            };
            floats.push(v);
        }
        self.line(&format!(
            "const int64_t sdf_ints[{}] = {{ {} }};",
            ints.len().max(1),
            if ints.is_empty() {
                "0".to_string()
            } else {
                ints.join(", ")
            }
        ));
        self.line(&format!(
            "const double sdf_floats[{}] = {{ {} }};",
            floats.len().max(1),
            if floats.is_empty() {
                "0.0".to_string()
            } else {
                floats.join(", ")
            }
        ));
        let inner_sym: BTreeMap<String, SymExpr> = isig
            .ints
            .iter()
            .map(|s| (s.clone(), SymExpr::sym(&format!("sdf_is_{s}"))))
            .chain(inner.symbols.iter().filter_map(|(k, s)| {
                s.value
                    .filter(|v| !v.dtype().is_float())
                    .map(|v| (k.clone(), SymExpr::Int(v.as_i64())))
            }))
            .collect();
        let in_edges: Vec<&Edge> = df.in_edges(n).into_iter().map(|e| df.edge(e)).collect();
        let out_edges: Vec<&Edge> = df.out_edges(n).into_iter().map(|e| df.edge(e)).collect();
        let shim = Scope {
            sdfg: sc.sdfg,
            params: {
                let mut p = sc.params.clone();
                p.extend(isig.ints.iter().map(|s| format!("sdf_is_{s}")));
                p
            },
            locals: sc.locals.clone(),
            parallel: false,
            in_parallel_map: sc.in_parallel_map,
            checked: sc.checked,
            stop: sc.stop.clone(),
            loc: sc.loc.clone(),
            depth: sc.depth,
            sites: sc.sites,
            rows_checked: sc.rows_checked,
        };
        let mut ptrs = Vec::new();
        // Connectors the callee only reads, bound to a whole caller array laid out as the
        // callee declares it, get the caller's pointer (`plan::passed_by_reference`).
        let by_ref: BTreeSet<&str> = isig
            .arrays
            .iter()
            .filter(|a| crate::plan::passed_by_reference(sc.sdfg, df, n, &a.name))
            .map(|a| a.name.as_str())
            .collect();
        for a in &isig.arrays {
            if by_ref.contains(a.name.as_str()) {
                let data = in_edges
                    .iter()
                    .find(|e| e.dst_conn.as_deref() == Some(&a.name))
                    .map_or(a.name.as_str(), |e| e.memlet.data.as_str());
                ptrs.push(format!("(void*)a_{data}"));
                continue;
            }
            let t = ctype(a.dtype);
            let size: Vec<String> = a
                .shape
                .iter()
                .map(|e| {
                    format!(
                        "sdf_max64({}, 0)",
                        strip_s(&shim.sym(&e.substitute(&inner_sym)))
                    )
                })
                .collect();
            let size = if size.is_empty() {
                "1".to_string()
            } else {
                size.join(" * ")
            };
            self.line(&format!("const int64_t sdf_len_{} = {size};", a.name));
            // A callee container of a few elements known at build time (a scalar: the
            // `if` a map's point calls) lives on the stack, zero-filled, not on the heap:
            // a call per point would otherwise allocate per point.
            match small_len(&a.shape) {
                Some(len) => self.line(&format!("{t} sdf_c_{}[{len}] = {{0}};", a.name)),
                None => self.line(&format!(
                    "{t}* sdf_c_{} = ({t}*)calloc((size_t)({size} > 0 ? {size} : 1), sizeof({t}));",
                    a.name
                )),
            }
            ptrs.push(format!("(void*)sdf_c_{}", a.name));
            // Filled from the caller: an input, or an output that is not an input and
            // has no wcr.
            let src = in_edges
                .iter()
                .find(|e| e.dst_conn.as_deref() == Some(&a.name))
                .or_else(|| {
                    out_edges
                        .iter()
                        .find(|e| e.src_conn.as_deref() == Some(&a.name) && e.memlet.wcr.is_none())
                });
            if let Some(e) = src {
                let el = |em: &mut Self, sub_el: &str, dt: DType| {
                    em.line(&format!(
                        "sdf_c_{}[sdf_q] = {};",
                        a.name,
                        convert(sub_el, dt, a.dtype)
                    ));
                };
                let len = format!("sdf_len_{}", a.name);
                self.element_loop(sc, &e.memlet.data, &e.memlet.subset, &len, "sdf_s", &el);
            } else if let Some(w) = out_edges
                .iter()
                .find(|e| e.src_conn.as_deref() == Some(&a.name))
                .and_then(|e| e.memlet.wcr)
            {
                // An output combined under a wcr starts from the operation's identity.
                let id = sdflow_ir::interp::value::wcr_identity(w, a.dtype);
                self.line(&format!(
                    "for (int64_t sdf_q = 0; sdf_q < ({size}); sdf_q++) sdf_c_{}[sdf_q] = {};",
                    a.name,
                    literal(id)
                ));
            }
        }
        self.line(&format!(
            "void* sdf_args[{}] = {{ {} }};",
            ptrs.len().max(1),
            if ptrs.is_empty() {
                "0".to_string()
            } else {
                ptrs.join(", ")
            }
        ));
        // The caller's error record goes along: a callee at every point of a map would
        // otherwise look up its thread's record (a thread-local access) at every call.
        self.line(&format!("{fname}(sdf_args, sdf_ints, sdf_floats, sdf_e);"));
        // A callee that failed writes nothing back, as in the interpreter.
        self.line("if (!sdf_e->failed) {");
        self.indent += 1;
        for e in &out_edges {
            let Some(c) = &e.src_conn else { continue };
            let Some(a) = isig.arrays.iter().find(|a| a.name == *c) else {
                continue;
            };
            let wcr = e.memlet.wcr;
            let st = |em: &mut Self, el: &str, dt: DType| {
                let v = convert(&format!("sdf_c_{c}[sdf_q]"), a.dtype, dt);
                em.store(sc, el, &v, dt, wcr);
            };
            let len = format!("sdf_len_{c}");
            self.element_loop(sc, &e.memlet.data, &e.memlet.subset, &len, "sdf_d", &st);
        }
        self.indent -= 1;
        self.line("}");
        for a in isig
            .arrays
            .iter()
            .filter(|a| small_len(&a.shape).is_none() && !by_ref.contains(a.name.as_str()))
        {
            self.line(&format!("free(sdf_c_{});", a.name));
        }
        self.indent -= 1;
        self.line("}");
        Ok(())
    }
}

/// Callee containers of at most this many elements, their shape known at build time,
/// are stack arrays.
const STACK_ELEMENTS: i64 = 64;

/// The number of elements of a shape of constants up to [`STACK_ELEMENTS`] (1 for a
/// scalar's empty shape).
fn small_len(shape: &[SymExpr]) -> Option<i64> {
    constant_product(shape, STACK_ELEMENTS).map(|n| n.max(1))
}

impl Emitter<'_> {
    /// A loop over the elements of `data[subset]` (the whole container for an empty
    /// subset) in row-major order, with counter `sdf_q`; `body` gets each element's
    /// lvalue and the container's type. `len` (C) is the number of elements of the inner
    /// array it fills or empties: a window of another size, or one outside the container,
    /// raises the error flag and copies nothing (the interpreter refuses both, naming the
    /// connector or the array).
    fn element_loop(
        &mut self,
        sc: &Scope<'_>,
        data: &str,
        subset: &Subset,
        len: &str,
        prefix: &str,
        body: &dyn Fn(&mut Self, &str, DType),
    ) {
        let desc = sc.sdfg.arrays.get(data);
        let dt = desc.map_or(DType::F64, DataDesc::dtype);
        let sub = if subset.0.is_empty() {
            Subset::full(desc.map(|x| x.shape()).unwrap_or(&[]))
        } else {
            subset.clone()
        };
        self.line("{");
        self.indent += 1;
        self.line(&format!(
            "const int64_t sdf_n = {};",
            subset_volume(sc, &sub)
        ));
        // The window must lie inside the container (a nested SDFG's window may be wider
        // than what the caller's memlets were checked for, e.g. an imported DaCe
        // connector widened to its inner array): outside, the error flag is raised and
        // nothing is copied.
        let shape = desc.map(|x| x.shape().to_vec()).unwrap_or_default();
        let mut outside = Vec::new();
        for (d, ext) in sub.0.iter().zip(&shape) {
            let (lo, hi) = match d {
                Dim::Index(i) => (i.clone(), i.clone()),
                Dim::Range { start, step, .. } => (
                    start.clone(),
                    start
                        .add(&d.size().sub(&SymExpr::Int(1)).mul(step))
                        .simplify(),
                ),
                Dim::Indirect { .. } => continue,
            };
            outside.push(format!(
                "({}) < 0 || ({}) >= ({})",
                sc.sym(&lo),
                sc.sym(&hi),
                sc.sym(ext)
            ));
        }
        let outside = if outside.is_empty() {
            String::new()
        } else {
            format!(" || (sdf_n > 0 && ({}))", outside.join(" || "))
        };
        self.line(&format!("if (sdf_n != {len}{outside}) sdf_fail(); else"));
        self.line("for (int64_t sdf_q = 0; sdf_q < sdf_n; sdf_q++) {");
        self.indent += 1;
        let el = self.decompose(sc, data, &sub, "sdf_q", prefix);
        body(self, &el, dt);
        self.indent -= 1;
        self.line("}");
        self.indent -= 1;
        self.line("}");
    }
}

/// Declares every static symbol (`const` with its value; integers as `int64_t`) at
/// indentation `ind`.
pub(crate) fn static_symbol_decls(out: &mut String, sdfg: &Sdfg, ind: &str) {
    for (n, s) in &sdfg.symbols {
        if let Some(v) = s.value {
            let (t, v) = if s.dtype.is_float() {
                (ctype(s.dtype), v.cast(s.dtype))
            } else {
                ("int64_t", v.cast(DType::I64))
            };
            let _ = writeln!(out, "{ind}const {t} s_{n} = {};", literal(v));
        }
    }
}

/// `sdf_is_x` names were declared as symbols of the shim scope: the emitter prefixed them
/// with `s_`; undo that.
fn strip_s(text: &str) -> String {
    text.replace("s_sdf_is_", "sdf_is_")
}

fn has_copy_in(df: &Dataflow, n: NodeId) -> bool {
    df.in_edges(n)
        .into_iter()
        .any(|e| df.node(df.endpoints(e).0).as_access().is_some())
}

/// What printing a reduction needs: its input and output windows and which axes of the
/// input it reduces.
pub(crate) struct ReduceParts<'a> {
    r: &'a Reduce,
    idata: &'a str,
    odata: &'a str,
    it: DType,
    ot: DType,
    isub: Subset,
    osub: Subset,
    wcr: Option<Wcr>,
    /// Input axes kept (one output element per point of them) and reduced.
    pub(crate) kept: Vec<usize>,
    pub(crate) red: Vec<usize>,
}

impl<'a> ReduceParts<'a> {
    pub(crate) fn of(
        sc: &Scope<'a>,
        df: &'a Dataflow,
        n: NodeId,
        r: &'a Reduce,
    ) -> Result<ReduceParts<'a>, CodegenError> {
        let input = df
            .in_edges(n)
            .into_iter()
            .map(|e| df.edge(e))
            .find(|e| e.dst_conn.as_deref() == Some("in"))
            .ok_or_else(|| CodegenError::Unsupported("reduce without input".into()))?;
        let output = df
            .out_edges(n)
            .into_iter()
            .map(|e| df.edge(e))
            .find(|e| e.src_conn.as_deref() == Some("out"))
            .ok_or_else(|| CodegenError::Unsupported("reduce without output".into()))?;
        let sdfg = sc.sdfg;
        let idata = input.memlet.data.as_str();
        let odata = output.memlet.data.as_str();
        let full = |d: &str| Subset::full(sdfg.arrays.get(d).map(|x| x.shape()).unwrap_or(&[]));
        let isub = if input.memlet.subset.0.is_empty() {
            full(idata)
        } else {
            input.memlet.subset.clone()
        };
        let osub = if output.memlet.subset.0.is_empty() {
            full(odata)
        } else {
            output.memlet.subset.clone()
        };
        let rank = isub.rank();
        let axes: BTreeSet<usize> = match &r.axes {
            Some(a) => a.iter().copied().collect(),
            None => (0..rank).collect(),
        };
        Ok(ReduceParts {
            r,
            idata,
            odata,
            it: sdfg.arrays.get(idata).map_or(DType::F64, DataDesc::dtype),
            ot: sdfg.arrays.get(odata).map_or(DType::F64, DataDesc::dtype),
            kept: (0..rank).filter(|k| !axes.contains(k)).collect(),
            red: (0..rank).filter(|k| axes.contains(k)).collect(),
            isub,
            osub,
            wcr: output.memlet.wcr,
        })
    }

    /// The sizes of the input axes `ks`.
    pub(crate) fn sizes(&self, ks: &[usize]) -> Vec<SymExpr> {
        ks.iter().map(|k| self.isub.0[*k].size()).collect()
    }

    /// C text of the number of points of the input axes `ks`.
    pub(crate) fn count(&self, sc: &Scope<'_>, ks: &[usize]) -> String {
        if ks.is_empty() {
            return "1".to_string();
        }
        self.sizes(ks)
            .iter()
            .map(|z| format!("sdf_max64({}, 0)", sc.sym(z)))
            .collect::<Vec<_>>()
            .join(" * ")
    }
}

/// The dimensions a copy from `s_sub` of `src` to `d_sub` of `dst` loops over, on each
/// side: those whose size is not the constant 1, when both sides have as many and their
/// sizes are equal in order. `None` otherwise (a copy that reshapes, or a container
/// without dimensions whose subset has some), which the flat order handles.
fn copy_loop_dims(
    sdfg: &Sdfg,
    src: &str,
    s_sub: &Subset,
    dst: &str,
    d_sub: &Subset,
) -> Option<(Vec<usize>, Vec<usize>)> {
    let dims = |data: &str, subset: &Subset| {
        let rank = sdfg.arrays.get(data).map_or(0, DataDesc::rank);
        if (rank == 0) != (subset.rank() == 0) {
            return None;
        }
        Some(
            (0..subset.rank())
                .filter(|&k| subset.0[k].size().simplify().as_int() != Some(1))
                .collect::<Vec<_>>(),
        )
    };
    let (sk, dk) = (dims(src, s_sub)?, dims(dst, d_sub)?);
    let same = sk.len() == dk.len()
        && sk.iter().zip(&dk).all(|(&a, &b)| {
            s_sub.0[a]
                .size()
                .sub(&d_sub.0[b].size())
                .simplify()
                .as_int()
                == Some(0)
        });
    same.then_some((sk, dk))
}

/// The source and destination subsets of a copy from `src` to `dst` (an empty subset is
/// the whole container).
pub(crate) fn copy_subsets(sdfg: &Sdfg, src: &str, dst: &str, m: &Memlet) -> (Subset, Subset) {
    let full = |d: &str| Subset::full(sdfg.arrays.get(d).map(|x| x.shape()).unwrap_or(&[]));
    let s_sub = if m.subset.0.is_empty() {
        full(src)
    } else {
        m.subset.clone()
    };
    let d_sub = match &m.other_subset {
        Some(o) if !o.0.is_empty() => o.clone(),
        Some(_) => full(dst),
        None if m.subset.0.is_empty() => full(dst),
        None => m.subset.clone(),
    };
    (s_sub, d_sub)
}

pub(crate) fn subset_volume(sc: &Scope<'_>, s: &Subset) -> String {
    if s.0.is_empty() {
        return "1".to_string();
    }
    s.0.iter()
        .map(|d| format!("sdf_max64({}, 0)", sc.sym(&d.size())))
        .collect::<Vec<_>>()
        .join(" * ")
}
