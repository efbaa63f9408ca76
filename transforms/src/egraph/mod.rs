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

use std::collections::{BTreeMap, HashSet};
use std::sync::{Mutex, OnceLock};

use egg::{BackoffScheduler, EGraph, Rewrite, RewriteScheduler, SearchMatches};
use sdflow_ir::{Dataflow, Node as IrNode, Sdfg};

use crate::pass::{Changes, Pass};

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
    /// Memos kept across runs (a pipeline runs the pass once per round).
    memo: Mutex<Memo>,
}

/// Keys of single-tasklet bodies that came out unchanged ([`optimize_memo`]), and
/// saturation results by built e-graph ([`body::optimize`]). Both are keyed by all the
/// pass's inputs that matter, including the rules and limits.
#[derive(Debug, Default)]
struct Memo {
    unchanged: HashSet<String>,
    saturated: body::SaturationMemo,
}

impl Clone for EGraphPass {
    fn clone(&self) -> EGraphPass {
        EGraphPass {
            fast_math: self.fast_math,
            limits: self.limits,
            memo: Mutex::default(),
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

    fn run(&self, sdfg: &mut Sdfg) -> Changes {
        let rules = self.rules();
        let mut memo = self
            .memo
            .lock()
            .map(|mut m| std::mem::take(&mut *m))
            .unwrap_or_default();
        if memo.unchanged.len() > MEMO_CAP {
            memo.unchanged.clear();
        }
        if memo.saturated.len() > MEMO_CAP {
            memo.saturated.clear();
        }
        let mut cx = RunCx {
            rules,
            limits: &self.limits,
            changes: Changes::default(),
            stops: BTreeMap::new(),
            cost_before: 0,
            cost_after: 0,
            memo,
        };
        run_sdfg(&mut cx, sdfg);
        if let Ok(mut m) = self.memo.lock() {
            *m = std::mem::take(&mut cx.memo);
        }
        if cx.changes.get("bodies_optimized") > 0 {
            let stops: Vec<String> = cx.stops.iter().map(|(k, n)| format!("{k} x{n}")).collect();
            cx.changes.notes.push(format!(
                "cost per point {} -> {} (flops 1, divisions and sqrt 8, other functions 20); saturation: {}",
                cx.cost_before,
                cx.cost_after,
                stops.join(", ")
            ));
        }
        cx.changes
    }
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
    if key.as_ref().is_some_and(|k| cx.memo.unchanged.contains(k)) {
        return None;
    }
    let out = body::optimize(bcx, df, cx.rules, cx.limits, stop, &mut cx.memo.saturated);
    if out.is_none()
        && let Some(k) = key
    {
        cx.memo.unchanged.insert(k);
    }
    out
}

/// What the outcome of a body made of one tasklet and access nodes depends on: its
/// code and connector types, which of its reads are of the same element (and which go
/// through index tables) and the element types read, which writes go to body-local scalars and with what conflict
/// resolution, the enclosing map parameters and the symbols the code reads (with their
/// static values). `None` for other bodies.
fn single_tasklet_key(df: &Dataflow, bcx: &body::Context<'_>) -> Option<String> {
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
    use std::fmt::Write as _;
    let mut key = String::with_capacity(256);
    let _ = write!(key, "{:?}|{:?}|", t.inputs, t.outputs);
    for st in &t.code {
        let _ = write!(key, "{st};");
    }
    let _ = write!(key, "|{}|", bcx.params.join(","));
    // Reads: connector, which reads are of the same element (by memlet), whether an
    // index table is read, and the element type.
    let mut seen: Vec<&sdflow_ir::Memlet> = Vec::new();
    for e in df.in_edges(n) {
        let edge = df.edge(e);
        let m = &edge.memlet;
        let class = seen.iter().position(|x| *x == m).unwrap_or_else(|| {
            seen.push(m);
            seen.len() - 1
        });
        let tables = !edge.memlet.subset.tables().is_empty();
        let dtype = bcx.arrays.get(&edge.memlet.data).map(|d| d.dtype());
        let _ = write!(
            key,
            "({:?},{class},{tables},{dtype:?})",
            edge.dst_conn.as_deref().unwrap_or_default()
        );
    }
    key.push('|');
    for e in df.out_edges(n) {
        let edge = df.edge(e);
        let local = matches!(
            bcx.arrays.get(&edge.memlet.data),
            Some(sdflow_ir::DataDesc::Scalar {
                transient: true,
                ..
            })
        );
        let _ = write!(key, "{:?}/{local}/{:?},", edge.src_conn, edge.memlet.wcr);
    }
    key.push('|');
    for st in &t.code {
        for v in st.value.vars() {
            if let Some(sym) = bcx.symbols.get(&v) {
                let _ = write!(key, "{v}:{sym:?},");
            }
        }
    }
    Some(key)
}

/// Bound on re-optimizing a body whose written-back code extracts cheaper.
const MAX_REPEATS: usize = 8;

struct RunCx<'a> {
    rules: &'static [rules::Rule],
    limits: &'a Limits,
    changes: Changes,
    stops: BTreeMap<String, usize>,
    cost_before: u64,
    cost_after: u64,
    memo: Memo,
}

fn run_sdfg(cx: &mut RunCx<'_>, sdfg: &mut Sdfg) {
    for s in sdfg.body.states() {
        let mut graph = std::mem::take(&mut sdfg.states[s.index()].graph);
        run_graph(cx, sdfg, &mut graph, &[]);
        sdfg.states[s.index()].graph = graph;
    }
}

/// Visits the maps of `df` (inside `params`' maps): a map whose body is straight-line
/// is optimized, any other map's body is visited; nested SDFGs are visited as programs.
fn run_graph(cx: &mut RunCx<'_>, sdfg: &Sdfg, df: &mut Dataflow, params: &[String]) {
    for n in df.node_ids() {
        match &mut df.graph[n] {
            IrNode::Map(m) => {
                let mut inner: Vec<String> = params.to_vec();
                inner.extend(m.params.iter().cloned());
                let bcx = body::Context {
                    arrays: &sdfg.arrays,
                    symbols: &sdfg.symbols,
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
                        cx.changes.add("bodies_optimized", 1);
                        cx.changes
                            .add("tasklets_merged", out.merged.saturating_sub(1));
                        cx.cost_before += out.cost_before;
                        cx.cost_after += out.cost_after;
                    }
                    None => {
                        let mut body = std::mem::take(&mut m.body);
                        run_graph(cx, sdfg, &mut body, &inner);
                        if let IrNode::Map(m) = &mut df.graph[n] {
                            m.body = body;
                        }
                    }
                }
                if let Some(s) = stop {
                    *cx.stops.entry(s).or_default() += 1;
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
