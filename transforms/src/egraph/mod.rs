//! Equality saturation over fused map bodies ([`EGraphPass`], pass name `egraph`).
//!
//! After fusion a map body holds the expression trees of several stencils: recomputation
//! copies a producer's body once per offset, so `lap(lap(u))` reads the same neighbours
//! many times and repeats the same differences. This pass brings a straight-line body
//! (tasklets and access nodes only) into **one multi-output tasklet** — each distinct
//! memlet one input connector, so two reads of the same element are one value, and the
//! body-local scalars between the tasklets become locals — adds its code to an
//! [`egg`] e-graph (typed operations, [`lang`]), saturates it with the exact rules (or,
//! opted in, the fast-math ones, [`rules`]), extracts the cheapest equivalent DAG
//! (counting a shared value once, [`extract`]) and writes it back: one `let` local per
//! value used more than once, then one statement per output.
//!
//! Bounded and deterministic: iteration and node limits (no wall-clock limit, whose
//! outcome would depend on the machine's load), a per-rule match limit with back-off
//! and a per-class cap (no rule adds to a class that already has
//! [`Limits::class_cap`] nodes), in the spirit of cranelift's e-graph guard rails. The
//! stop reason of each body is counted in the report.
//!
//! Integer `/`, `//`, `%` (which can raise the error flag) and `wall_ns()` are never
//! merged, dropped or duplicated: each is its own operation, matched by no rule, and
//! always emitted (as a local, in its original order).

mod body;
mod extract;
mod lang;
mod rules;

use std::collections::BTreeMap;

use rustc_hash::FxHashMap as HashMap;
use std::sync::{Mutex, OnceLock};

use egg::{BackoffScheduler, EGraph, Rewrite, RewriteScheduler, SearchMatches};
use sdflow_ir::{Dataflow, Node as IrNode, Sdfg};

use crate::pass::{Changes, Pass};
use crate::pattern::for_each_state_parallel;

pub(crate) use body::tree_cost;
pub use lang::{Node as ENode, Op};

/// Saturation bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Rule-application iterations per body.
    pub iter_limit: usize,
    /// E-nodes per body (the runner stops after the iteration that passes it).
    pub node_limit: usize,
    /// A rule adds nothing to an e-class that already has this many nodes.
    pub class_cap: usize,
    /// Matches per rule per iteration before the rule is banned for a while (egg's
    /// back-off scheduler).
    pub match_limit: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            iter_limit: 8,
            node_limit: 20_000,
            class_cap: 16,
            match_limit: 2_000,
        }
    }
}

/// The pass; see the module documentation.
#[derive(Debug, Default)]
pub struct EGraphPass {
    /// Adds the fast-math rules (reassociation, distribution, multiplication by a
    /// constant's reciprocal): results change. Off by default.
    pub fast_math: bool,
    /// Saturation bounds.
    pub limits: Limits,
    /// Memos kept across runs (a pipeline runs the pass once per round), shared by the
    /// states optimized in parallel.
    memo: Memo,
}

/// Keys of single-tasklet bodies that came out unchanged ([`optimize_memo`]), with why
/// their saturation stopped, and saturation results by built e-graph
/// ([`body::optimize`]). Both are keyed by all the
/// pass's inputs that matter, including the rules and limits.
#[derive(Debug, Default)]
struct Memo {
    unchanged: Mutex<HashMap<TaskletKey, Option<body::StopNote>>>,
    saturated: Mutex<body::SaturationMemo>,
}

impl Clone for EGraphPass {
    fn clone(&self) -> EGraphPass {
        EGraphPass {
            fast_math: self.fast_math,
            limits: self.limits,
            memo: Memo::default(),
        }
    }
}

/// Entries of each memo before it is cleared.
const MEMO_CAP: usize = 1 << 14;

impl EGraphPass {
    /// The pass with fast-math rules.
    pub fn fast_math() -> EGraphPass {
        EGraphPass {
            fast_math: true,
            ..EGraphPass::default()
        }
    }

    /// The pass with the given bounds.
    pub fn with_limits(limits: Limits) -> EGraphPass {
        EGraphPass {
            limits,
            ..EGraphPass::default()
        }
    }

    /// The rule set, built once per process for each of the two choices (parsing the
    /// patterns costs more than saturating a typical stencil body).
    fn rules(&self) -> &'static [rules::Rule] {
        static EXACT: OnceLock<Vec<rules::Rule>> = OnceLock::new();
        static FAST: OnceLock<Vec<rules::Rule>> = OnceLock::new();
        if self.fast_math {
            FAST.get_or_init(|| {
                let mut r = rules::exact();
                r.extend(rules::fast_math());
                r
            })
        } else {
            EXACT.get_or_init(rules::exact)
        }
    }
}

impl Pass for EGraphPass {
    fn name(&self) -> &'static str {
        if self.fast_math {
            "egraph_fast_math"
        } else {
            "egraph"
        }
    }

    fn prepare(&self) {
        self.rules();
    }

    fn run(&self, sdfg: &mut Sdfg) -> Changes {
        let rules = self.rules();
        if let Ok(mut m) = self.memo.unchanged.lock()
            && m.len() > MEMO_CAP
        {
            m.clear();
        }
        if let Ok(mut m) = self.memo.saturated.lock()
            && m.len() > MEMO_CAP
        {
            m.clear();
        }
        // The states are optimized in parallel (a body's outcome depends only on the
        // body and the program's declarations, and the memo's entries are pure), and
        // their reports added up in state order.
        let parts = for_each_state_parallel(sdfg, PARALLEL_MIN_STATES, |shared, graph| {
            let decls = Decls {
                arrays: &shared.arrays,
                symbols: &shared.symbols,
            };
            let mut cx = RunCx::new(rules, &self.limits, &self.memo);
            with_mock_clock(|| run_graph(&mut cx, decls, graph, &[]));
            cx.tally
        });
        let mut total = Tally::default();
        for (_, t) in parts {
            total.add(t);
        }
        if total.changes.get("bodies_optimized") > 0 {
            let stops: Vec<String> = total
                .stops
                .iter()
                .map(|(k, n)| format!("{k} x{n}"))
                .collect();
            total.changes.notes.push(format!(
                "cost per point {} -> {} (flops 1, divisions and sqrt 8, other functions 20); saturation: {}",
                total.cost_before,
                total.cost_after,
                stops.join(", ")
            ));
        }
        total.changes
    }
}

/// States per parallel task of the pass (a body that hits the memo is a few
/// microseconds).
const PARALLEL_MIN_STATES: usize = 8;

/// Runs `f` with egg on a mock clock. egg times its rebuilds and iterations with
/// `quanta`, whose default clock calibrates itself on first use by spinning for half a
/// millisecond or more; the pass sets no time limit (saturation is bounded by iterations
/// and nodes, so results do not depend on the machine's speed), so nothing reads the
/// times. The override is per thread.
fn with_mock_clock<T>(f: impl FnOnce() -> T) -> T {
    let (clock, _mock) = quanta::Clock::mock();
    quanta::with_clock(&clock, f)
}

/// [`body::optimize`], skipping single-tasklet bodies whose code (with the same
/// connector types and enclosing parameters) already came out unchanged in this run:
/// the outcome depends on nothing else, and generated programs repeat the same stencil
/// body many times.
fn optimize_memo(
    cx: &mut RunCx<'_>,
    bcx: &body::Context<'_>,
    df: &Dataflow,
    stop: &mut Option<body::StopNote>,
) -> Option<body::BodyOutcome> {
    let key = single_tasklet_key(df, bcx);
    if let Some(k) = &key
        && let Some(note) = cx
            .memo
            .unchanged
            .lock()
            .ok()
            .and_then(|m| m.get(k).cloned())
    {
        // The same note as the first time, whichever thread saw the body first.
        *stop = note;
        return None;
    }
    let out = body::optimize(bcx, df, cx.rules, cx.limits, stop, &cx.memo.saturated);
    if out.is_none()
        && let Some(k) = key
        && let Ok(mut m) = cx.memo.unchanged.lock()
    {
        m.insert(k, stop.clone());
    }
    out
}

/// What the outcome of a body made of one tasklet and access nodes depends on: its
/// code and connector types, which of its reads are of the same element (and which go
/// through index tables) and the element types read, which writes go to body-local scalars and with what conflict
/// resolution, the enclosing map parameters and the symbols the code reads (with their
/// static values). `None` for other bodies.
fn single_tasklet_key(df: &Dataflow, bcx: &body::Context<'_>) -> Option<TaskletKey> {
    let mut tasklet = None;
    for n in df.node_ids() {
        match df.node(n) {
            IrNode::Tasklet(_) if tasklet.is_none() => tasklet = Some(n),
            IrNode::Access(_) => {}
            _ => return None,
        }
    }
    let n = tasklet?;
    let IrNode::Tasklet(t) = df.node(n) else {
        return None;
    };
    // Reads: connector, which reads are of the same element (by memlet), whether an
    // index table is read, and the element type.
    let mut seen: Vec<&sdflow_ir::Memlet> = Vec::new();
    let reads = df
        .in_edges(n)
        .into_iter()
        .map(|e| {
            let edge = df.edge(e);
            let m = &edge.memlet;
            let class = seen.iter().position(|x| *x == m).unwrap_or_else(|| {
                seen.push(m);
                seen.len() - 1
            });
            let tables = !m.subset.tables().is_empty();
            let dtype = bcx.arrays.get(&m.data).map(|d| d.dtype());
            (edge.dst_conn.clone(), class, tables, dtype)
        })
        .collect();
    let writes = df
        .out_edges(n)
        .into_iter()
        .map(|e| {
            let edge = df.edge(e);
            let local = matches!(
                bcx.arrays.get(&edge.memlet.data),
                Some(sdflow_ir::DataDesc::Scalar {
                    transient: true,
                    ..
                })
            );
            (edge.src_conn.clone(), local, edge.memlet.wcr)
        })
        .collect();
    let mut symbols = Vec::new();
    for st in &t.code {
        for v in st.value.vars() {
            if let Some(sym) = bcx.symbols.get(&v) {
                symbols.push((v, sym.clone()));
            }
        }
    }
    Some(TaskletKey {
        inputs: t.inputs.clone(),
        outputs: t.outputs.clone(),
        code: t.code.clone(),
        params: bcx.params.to_vec(),
        reads,
        writes,
        symbols,
    })
}

/// The key of [`single_tasklet_key`], compared structurally.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct TaskletKey {
    inputs: BTreeMap<String, sdflow_ir::DType>,
    outputs: BTreeMap<String, sdflow_ir::DType>,
    code: Vec<sdflow_ir::Stmt>,
    params: Vec<String>,
    /// Per read: connector, class of equal memlets, through a table, element type.
    reads: Vec<(Option<String>, usize, bool, Option<sdflow_ir::DType>)>,
    /// Per write: connector, to a body-local scalar, conflict resolution.
    writes: Vec<(Option<String>, bool, Option<sdflow_ir::Wcr>)>,
    /// The symbols the code reads, with their declarations.
    symbols: Vec<(String, sdflow_ir::Symbol)>,
}

/// Bound on re-optimizing a body whose written-back code extracts cheaper.
const MAX_REPEATS: usize = 8;

struct RunCx<'a> {
    rules: &'static [rules::Rule],
    limits: &'a Limits,
    memo: &'a Memo,
    tally: Tally,
}

impl<'a> RunCx<'a> {
    fn new(rules: &'static [rules::Rule], limits: &'a Limits, memo: &'a Memo) -> RunCx<'a> {
        RunCx {
            rules,
            limits,
            memo,
            tally: Tally::default(),
        }
    }
}

/// What a run did: changes, stop reasons and costs, added up over states.
#[derive(Default)]
struct Tally {
    changes: Changes,
    stops: BTreeMap<String, usize>,
    cost_before: u64,
    cost_after: u64,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.changes.merge(&other.changes);
        for (k, n) in other.stops {
            *self.stops.entry(k).or_default() += n;
        }
        self.cost_before += other.cost_before;
        self.cost_after += other.cost_after;
    }
}

/// The declarations a body is optimized against.
#[derive(Clone, Copy)]
struct Decls<'a> {
    arrays: &'a BTreeMap<String, sdflow_ir::DataDesc>,
    symbols: &'a BTreeMap<String, sdflow_ir::Symbol>,
}

/// The states of a nested SDFG, one after the other.
fn run_sdfg(cx: &mut RunCx<'_>, sdfg: &mut Sdfg) {
    for s in sdfg.body.states() {
        let mut graph = std::mem::take(&mut sdfg.states[s.index()].graph);
        let decls = Decls {
            arrays: &sdfg.arrays,
            symbols: &sdfg.symbols,
        };
        run_graph(cx, decls, &mut graph, &[]);
        sdfg.states[s.index()].graph = graph;
    }
}

/// Visits the maps of `df` (inside `params`' maps): a map whose body is straight-line
/// is optimized, any other map's body is visited; nested SDFGs are visited as programs.
fn run_graph(cx: &mut RunCx<'_>, decls: Decls<'_>, df: &mut Dataflow, params: &[String]) {
    for n in df.node_ids() {
        match &mut df.graph[n] {
            IrNode::Map(m) => {
                let mut inner: Vec<String> = params.to_vec();
                inner.extend(m.params.iter().cloned());
                let bcx = body::Context {
                    arrays: decls.arrays,
                    symbols: decls.symbols,
                    params: &inner,
                };
                let mut stop = None;
                match optimize_memo(cx, &bcx, &m.body, &mut stop) {
                    Some(mut out) => {
                        // Greedy extraction is a heuristic: the written-back code, saturated
                        // again, can extract cheaper. Repeat while it does (bounded), so the
                        // pass is at its own fixed point.
                        for _ in 0..MAX_REPEATS {
                            let mut again = None;
                            match optimize_memo(cx, &bcx, &out.body, &mut again) {
                                Some(next) if next.cost_after < out.cost_after => {
                                    out.body = next.body;
                                    out.cost_after = next.cost_after;
                                }
                                _ => break,
                            }
                        }
                        m.body = out.body;
                        cx.tally.changes.add("bodies_optimized", 1);
                        cx.tally
                            .changes
                            .add("tasklets_merged", out.merged.saturating_sub(1));
                        if out.copies > 0 {
                            cx.tally.changes.add("copies_merged", out.copies);
                        }
                        cx.tally.cost_before += out.cost_before;
                        cx.tally.cost_after += out.cost_after;
                    }
                    None => {
                        let mut body = std::mem::take(&mut m.body);
                        run_graph(cx, decls, &mut body, &inner);
                        if let IrNode::Map(m) = &mut df.graph[n] {
                            m.body = body;
                        }
                    }
                }
                if let Some(s) = stop {
                    *cx.tally.stops.entry(s).or_default() += 1;
                }
            }
            IrNode::Nested(ns) => run_sdfg(cx, &mut ns.sdfg),
            _ => {}
        }
    }
}

/// egg's back-off scheduler (a per-rule match limit) with a per-class cap: matches in an
/// e-class that already holds `class_cap` nodes are dropped.
pub(crate) struct CappedScheduler {
    inner: BackoffScheduler,
    class_cap: usize,
}

impl CappedScheduler {
    pub(crate) fn new(limits: &Limits) -> CappedScheduler {
        CappedScheduler {
            inner: BackoffScheduler::default().with_initial_match_limit(limits.match_limit),
            class_cap: limits.class_cap,
        }
    }
}

impl RewriteScheduler<ENode, lang::Fold> for CappedScheduler {
    fn can_stop(&mut self, iteration: usize) -> bool {
        <BackoffScheduler as RewriteScheduler<ENode, lang::Fold>>::can_stop(
            &mut self.inner,
            iteration,
        )
    }

    fn search_rewrite<'a>(
        &mut self,
        iteration: usize,
        egraph: &EGraph<ENode, lang::Fold>,
        rewrite: &'a Rewrite<ENode, lang::Fold>,
    ) -> Vec<SearchMatches<'a, ENode>> {
        let mut m = self.inner.search_rewrite(iteration, egraph, rewrite);
        m.retain(|sm| egraph[sm.eclass].nodes.len() < self.class_cap);
        m
    }
}
