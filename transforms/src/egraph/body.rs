//! One straight-line map body through the e-graph: its tasklets merged into one
//! multi-output tasklet (each distinct memlet one input connector), the code added to an
//! e-graph, saturated, extracted, and written back as single-assignment locals.
//!
//! Why one file of this size: a body into the e-graph and back is one round trip whose
//! two halves must agree on the connectors and the order of effects.

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::FxHashMap as HashMap;

use egg::{EGraph, Id, Runner};
use sdflow_ir::typing::{Binding, TaskletNames};
use sdflow_ir::{
    BinOp, DType, DataDesc, Dataflow, Expr, Memlet, Node as IrNode, NodeId, Stmt, Tasklet, Value,
};

use super::extract::{Extraction, extract};
use super::lang::{Fold, Node, Op, const_value};
use super::{CappedScheduler, Limits, rules::Rule};

/// What optimizing one body did.
pub(crate) struct BodyOutcome {
    /// The new body.
    pub body: Dataflow,
    /// Tasklets merged into one (1 when the body had one).
    pub merged: usize,
    /// Copies from body-local values that became part of the merged tasklet.
    pub copies: usize,
    /// Cost of the code before and after (the extractor's cost model).
    pub cost_before: u64,
    pub cost_after: u64,
}

/// Why saturation of one body stopped, for the pass report.
pub(crate) type StopNote = String;

/// What saturating, extracting and emitting one built e-graph gave: why saturation
/// stopped, and the code with its cost (`None` when no plan could be made).
#[derive(Clone, Debug)]
pub(crate) struct Saturated {
    stop: StopNote,
    code: Option<(u64, Vec<Stmt>)>,
}

/// Everything saturation, extraction and emission of one body depend on ([`optimize`]):
/// the e-graph as built (each class's nodes, sorted; a class's analysis data follows
/// from its nodes), the roots, the leaves with their names, the prefix of new names, the
/// number of outputs, and the limits and number of rules. Compared structurally: no
/// text is formatted and no hash stands in for the key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct SaturationKey {
    classes: Vec<(Id, Vec<Node>)>,
    roots: Vec<Id>,
    leaves: Vec<(String, DType)>,
    leaf_name: Vec<String>,
    prefix: String,
    outputs: usize,
    limits: [usize; 4],
    rules: usize,
}

/// Results of saturation by built e-graph ([`optimize`]).
pub(crate) type SaturationMemo = HashMap<SaturationKey, Saturated>;

/// The context a body is in: the program's containers and symbols, the parameters of
/// the enclosing maps.
pub(crate) struct Context<'a> {
    pub arrays: &'a BTreeMap<String, DataDesc>,
    pub symbols: &'a BTreeMap<String, sdflow_ir::Symbol>,
    pub params: &'a [String],
}

/// The own cost of a node: flops 1, divisions and square roots 8, other special
/// functions 20, constants and names 0.
pub(crate) fn node_cost(n: &Node) -> u64 {
    op_cost(n.op)
}

fn op_cost(op: Op) -> u64 {
    use sdflow_ir::MathFn as F;
    match op {
        Op::Const(..) | Op::Leaf(..) => 0,
        Op::Bin(BinOp::Div | BinOp::FloorDiv | BinOp::Mod, _) | Op::Guarded(..) => 8,
        Op::Call(F::Sqrt, _) => 8,
        Op::Call(
            F::Abs | F::Min | F::Max | F::Floor | F::Ceil | F::Trunc | F::Round | F::Fma,
            _,
        ) => 1,
        Op::Call(..) | Op::Clock(_) => 20,
        Op::Un(..) | Op::Bin(..) | Op::Select(_) | Op::Cast(_) => 1,
    }
}

/// The cost of an elaborated expression tree, each node paid as often as it is written.
pub(crate) fn tree_cost(e: &Expr) -> u64 {
    let mut c = 0;
    e.visit(&mut |x| {
        c += match x {
            Expr::Const(_) | Expr::Var(_) => 0,
            Expr::Unary(..) | Expr::Select(..) | Expr::Cast(..) => 1,
            Expr::Binary(op, ..) => op_cost(Op::Bin(*op, DType::F64)),
            Expr::Call(f, _) => op_cost(Op::Call(*f, DType::F64)),
        }
    });
    c
}

/// A read of the body from outside: one input connector of the merged tasklet.
struct Input {
    memlet: Memlet,
    source: NodeId,
    dtype: DType,
    /// Its index in the leaf table.
    leaf: usize,
}

/// A write of the body to outside: one output connector.
struct Output {
    memlet: Memlet,
    target: NodeId,
    dtype: DType,
    value: Id,
}

struct Builder<'a> {
    cx: &'a Context<'a>,
    eg: EGraph<Node, Fold>,
    /// Leaf names by index (input connectors first are named later).
    leaves: Vec<(String, DType)>,
    named: HashMap<String, Id>,
    impure: Vec<Id>,
    sites: u32,
    /// How many lazy positions (a `select`'s branches, the right operand of `&&` and
    /// `||`) enclose the expression being added.
    lazy: u32,
}

impl Builder<'_> {
    fn leaf(&mut self, name: &str, ty: DType) -> Id {
        if let Some(id) = self.named.get(name) {
            return *id;
        }
        let k = self.leaves.len() as u32;
        self.leaves.push((name.to_string(), ty));
        let id = self.eg.add(Node::new(Op::Leaf(k, ty), vec![]));
        self.named.insert(name.to_string(), id);
        id
    }

    fn ty(&self, id: Id) -> DType {
        self.eg[id].data.ty
    }

    fn cast(&mut self, id: Id, to: DType) -> Id {
        if self.ty(id) == to {
            id
        } else {
            self.eg.add(Node::new(Op::Cast(to), vec![id]))
        }
    }

    /// Adds an elaborated expression; `var` gives the class of a name.
    fn add(&mut self, e: &Expr, var: &mut dyn FnMut(&mut Self, &str) -> Option<Id>) -> Option<Id> {
        Some(match e {
            Expr::Const(v) => self.eg.add(Node::constant(*v)),
            Expr::Var(n) => var(self, n)?,
            Expr::Unary(op, a) => {
                let a = self.add(a, var)?;
                let t = self.ty(a);
                self.eg.add(Node::new(Op::Un(*op, t), vec![a]))
            }
            Expr::Binary(op, a, b) if op.is_logical() => {
                let a = self.add(a, var)?;
                let b = self.lazily(|s| s.add(b, var))?;
                self.eg
                    .add(Node::new(Op::Bin(*op, DType::Bool), vec![a, b]))
            }
            Expr::Binary(op, a, b) => {
                let (a, b) = (self.add(a, var)?, self.add(b, var)?);
                let t = self.ty(a);
                let guarded = t.is_int() && matches!(op, BinOp::Div | BinOp::FloorDiv | BinOp::Mod);
                if guarded {
                    self.sites += 1;
                    let id = self
                        .eg
                        .add(Node::new(Op::Guarded(self.sites, *op, t), vec![a, b]));
                    if self.lazy == 0 {
                        self.impure.push(id);
                    }
                    id
                } else {
                    self.eg.add(Node::new(Op::Bin(*op, t), vec![a, b]))
                }
            }
            Expr::Select(c, a, b) => {
                let c = self.add(c, var)?;
                let a = self.lazily(|s| s.add(a, var))?;
                let b = self.lazily(|s| s.add(b, var))?;
                let t = self.ty(a);
                self.eg.add(Node::new(Op::Select(t), vec![c, a, b]))
            }
            Expr::Call(sdflow_ir::MathFn::WallNs, _) => {
                self.sites += 1;
                let id = self.eg.add(Node::new(Op::Clock(self.sites), vec![]));
                if self.lazy == 0 {
                    self.impure.push(id);
                }
                id
            }
            Expr::Call(f, args) => {
                let ids = args
                    .iter()
                    .map(|a| self.add(a, var))
                    .collect::<Option<Vec<_>>>()?;
                let t = self.ty(*ids.first()?);
                self.eg.add(Node::new(Op::Call(*f, t), ids))
            }
            Expr::Cast(t, a) => {
                let a = self.add(a, var)?;
                self.cast(a, *t)
            }
        })
    }

    /// Adds what `f` adds in a lazy position: an impure operation there is evaluated only
    /// when its branch is taken, so it is no root of its own.
    fn lazily<T>(&mut self, f: impl FnOnce(&mut Self) -> Option<T>) -> Option<T> {
        self.lazy += 1;
        let r = f(self);
        self.lazy -= 1;
        r
    }

    /// The class of a map parameter or symbol (a symbol with a static value is that
    /// constant).
    fn outer_name(&mut self, name: &str, binding: Binding, ty: DType) -> Id {
        if binding == Binding::Symbol
            && let Some(v) = self.cx.symbols.get(name).and_then(|s| s.value)
        {
            return self.eg.add(Node::constant(v.cast(ty)));
        }
        self.leaf(name, ty)
    }
}

/// Optimizes one map body, or `None` when it is not straight-line dataflow of tasklets
/// and access nodes, when saturation cannot be trusted with it, or when nothing would
/// change. `stop` receives why saturation ended.
pub(crate) fn optimize(
    cx: &Context<'_>,
    body: &Dataflow,
    rules: &[Rule],
    limits: &Limits,
    stop: &mut Option<StopNote>,
    memo: &std::sync::Mutex<SaturationMemo>,
) -> Option<BodyOutcome> {
    let shape = StraightLine::of(cx, body)?;
    let mut built = build(cx, body, &shape)?;
    let mut roots: Vec<Id> = built.b.impure.clone();
    roots.extend(built.outputs.iter().map(|o| o.value));
    let prefix = fresh_prefix(cx)?;
    let in_name = |k: usize| format!("{prefix}in{k}");
    let out_name = |k: usize| format!("{prefix}out{k}");
    let mut leaf_name: Vec<String> = built.b.leaves.iter().map(|(n, _)| n.clone()).collect();
    for (k, inp) in built.inputs.iter().enumerate() {
        leaf_name[inp.leaf] = in_name(k);
    }
    let sat = saturate(&mut built, &roots, &leaf_name, &prefix, rules, limits, memo);
    *stop = Some(sat.stop);
    let (cost_after, code) = sat.code?;
    let tasklets = &shape.tasklets;
    if tasklets.len() < 2 && cost_after >= built.cost_before {
        return None;
    }
    let name = match tasklets.as_slice() {
        [one] => match body.node(*one) {
            IrNode::Tasklet(t) => t.name.clone(),
            _ => return None,
        },
        [first, ..] => match body.node(*first) {
            IrNode::Tasklet(t) => format!("{}+{}", t.name, tasklets.len() - 1),
            _ => return None,
        },
        [] => return None,
    };
    let merged = Tasklet {
        name,
        inputs: built
            .inputs
            .iter()
            .enumerate()
            .map(|(k, i)| (in_name(k), i.dtype))
            .collect(),
        outputs: built
            .outputs
            .iter()
            .enumerate()
            .map(|(k, o)| (out_name(k), o.dtype))
            .collect(),
        code,
    };
    Some(BodyOutcome {
        body: rewrite(body, &shape, &built, merged, &in_name, &out_name),
        merged: tasklets.len(),
        copies: shape.copies,
        cost_before: built.cost_before,
        cost_after,
    })
}

/// A straight-line body: its nodes in topological order, its tasklets among them, and
/// the containers that hold values local to it.
struct StraightLine<'b> {
    order: Vec<NodeId>,
    tasklets: Vec<NodeId>,
    /// Copy edges (from a local to a local or to one element outside).
    copies: usize,
    /// Transient scalars written once and read from the same access node (and not read
    /// through a subset): their values become e-graph classes, not containers.
    locals: BTreeSet<&'b str>,
}

impl<'b> StraightLine<'b> {
    /// `body`'s shape, or `None` when it is not straight-line dataflow of tasklets and
    /// access nodes with connectors on every edge, or a container outside it is both
    /// read and written, or written by more than one edge.
    fn of(cx: &Context<'_>, body: &'b Dataflow) -> Option<StraightLine<'b>> {
        let order = body.topological_order().ok()?;
        let mut tasklets = Vec::new();
        for n in &order {
            match body.node(*n) {
                IrNode::Tasklet(_) => tasklets.push(*n),
                IrNode::Access(_) => {}
                _ => return None,
            }
        }
        if tasklets.is_empty() {
            return None;
        }
        // Edges: reads access → tasklet, writes tasklet → access, both with connectors;
        // and copies access → access, which must be between locals (checked below).
        let mut copies = Vec::new();
        for e in body.edge_ids() {
            let (s, d) = body.endpoints(e);
            let edge = body.edge(e);
            match (body.node(s), body.node(d)) {
                (IrNode::Access(_), IrNode::Tasklet(_)) if edge.dst_conn.is_some() => {}
                (IrNode::Tasklet(_), IrNode::Access(_)) if edge.src_conn.is_some() => {}
                (IrNode::Access(a), IrNode::Access(b)) if edge.memlet.wcr.is_none() => {
                    copy_target(&edge.memlet, a, b)?;
                    copies.push((a.as_str(), b.as_str()));
                    continue;
                }
                _ => return None,
            }
            if edge.memlet.other_subset.is_some() {
                return None;
            }
        }
        // Containers: a transient scalar written once and read from the same access node
        // is a local; anything else is outside, and may be read or written, not both, and
        // written by one edge at most.
        let mut writes: BTreeMap<&str, usize> = BTreeMap::new();
        let mut reads: BTreeSet<&str> = BTreeSet::new();
        let mut nodes_of: BTreeMap<&str, usize> = BTreeMap::new();
        for n in &order {
            if let IrNode::Access(d) = body.node(*n) {
                *nodes_of.entry(d).or_default() += 1;
                *writes.entry(d).or_default() += body.in_degree(*n);
            }
        }
        // What the body reads, by the one rule (`ir::uses`): a container read through a
        // memlet's subset (an index table, or a scalar index as GT4Py's dynamic offsets read
        // it) is read too, and is no local value.
        let mut tables: BTreeSet<&str> = BTreeSet::new();
        sdflow_ir::uses::for_each_use(body, |d, u| {
            if u.read {
                reads.insert(d);
            }
            if !u.access_node {
                tables.insert(d);
            }
        });
        let is_local = |d: &str| -> bool {
            !tables.contains(d)
                && matches!(
                    cx.arrays.get(d),
                    Some(DataDesc::Scalar {
                        transient: true,
                        ..
                    })
                )
                && nodes_of.get(d) == Some(&1)
                && writes.get(d) == Some(&1)
        };
        for (d, w) in &writes {
            if !is_local(d) && (*w > 1 || (*w == 1 && reads.contains(d))) {
                return None;
            }
        }
        for e in body.edge_ids() {
            let (_, d) = body.endpoints(e);
            if let IrNode::Access(data) = body.node(d)
                && is_local(data)
                && body.edge(e).memlet.wcr.is_some()
            {
                return None;
            }
        }
        // A copy passes a local's value on, to another local (GT4Py's bodies copy a
        // neighbour value into a slab element, `local_unroll` makes both scalars) or to
        // one element outside (a reduction's result copied into its field).
        if copies.iter().any(|(a, _)| !is_local(a)) {
            return None;
        }
        let locals = nodes_of.keys().copied().filter(|d| is_local(d)).collect();
        Some(StraightLine {
            order,
            tasklets,
            copies: copies.len(),
            locals,
        })
    }

    fn local(&self, d: &str) -> bool {
        self.locals.contains(d)
    }
}

/// A body's e-graph as built from its tasklets, with the inputs (one leaf per distinct
/// read), the outputs (a class per write) and the cost of the code as written.
struct Built<'c> {
    b: Builder<'c>,
    inputs: Vec<Input>,
    outputs: Vec<Output>,
    cost_before: u64,
}

/// The e-graph of the tasklets of `shape` (a body of `body`), or `None` when a
/// tasklet's code cannot be elaborated or a connector is missing.
fn build<'c>(cx: &'c Context<'c>, body: &Dataflow, shape: &StraightLine<'_>) -> Option<Built<'c>> {
    let local = |d: &str| shape.local(d);
    let mut b = Builder {
        cx,
        eg: EGraph::new(Fold),
        leaves: Vec::new(),
        named: HashMap::default(),
        impure: Vec::new(),
        sites: 0,
        lazy: 0,
    };
    let mut inputs: Vec<Input> = Vec::new();
    let mut input_of: HashMap<(&sdflow_ir::Memlet, usize), usize> = HashMap::default();
    let mut outputs: Vec<Output> = Vec::new();
    let mut local_value: HashMap<String, Id> = HashMap::default();
    let mut cost_before = 0;
    for &tn in &shape.order {
        let t = match body.node(tn) {
            IrNode::Tasklet(t) => t,
            // A copy from a local (`StraightLine::of`): the value passes on, to another
            // local or to an output.
            IrNode::Access(data) => {
                for e in body.in_edges(tn) {
                    let (src, _) = body.endpoints(e);
                    let IrNode::Access(from) = body.node(src) else {
                        continue;
                    };
                    let v = *local_value.get(from.as_str())?;
                    let dt = cx.arrays.get(data).map(DataDesc::dtype)?;
                    let v = b.cast(v, dt);
                    if local(data) {
                        local_value.insert(data.clone(), v);
                    } else {
                        outputs.push(Output {
                            memlet: copy_target(&body.edge(e).memlet, from, data)?,
                            target: tn,
                            dtype: dt,
                            value: v,
                        });
                    }
                }
                continue;
            }
            _ => continue,
        };
        // The class of each input connector, converted to the connector's type.
        let mut conn: HashMap<String, Id> = HashMap::default();
        for e in body.in_edges(tn) {
            let (src, _) = body.endpoints(e);
            let edge = body.edge(e);
            let c = edge.dst_conn.clone()?;
            let ct = *t.inputs.get(&c)?;
            let IrNode::Access(data) = body.node(src) else {
                return None;
            };
            let id = if local(data) {
                *local_value.get(data.as_str())?
            } else {
                let m = &edge.memlet;
                // Index-table reads are checked loads: each stays its own.
                let key = if m.subset.tables().is_empty() {
                    (m, usize::MAX)
                } else {
                    (m, inputs.len())
                };
                let k = match input_of.get(&key) {
                    Some(k) => *k,
                    None => {
                        let dtype = cx.arrays.get(data).map(DataDesc::dtype)?;
                        let name = format!("\0in{}", inputs.len());
                        let leaf = b.leaves.len();
                        b.leaf(&name, dtype);
                        inputs.push(Input {
                            memlet: m.clone(),
                            source: src,
                            dtype,
                            leaf,
                        });
                        input_of.insert(key, inputs.len() - 1);
                        inputs.len() - 1
                    }
                };
                let (name, dtype) = b.leaves[inputs[k].leaf].clone();
                b.leaf(&name, dtype)
            };
            let id = b.cast(id, ct);
            conn.insert(c, id);
        }
        let mut names = TaskletNames::new(t);
        let mut assigned: HashMap<String, Id> = HashMap::default();
        for st in &t.code {
            let is_param = |p: &str| cx.params.iter().any(|q| q == p);
            let symbol = |s: &str| cx.symbols.get(s).map(|s| s.dtype);
            let env = |v: &str| names.resolve(v, &is_param, &symbol).map(|(_, t)| t);
            let (value, ty) = st.value.elaborate(&env).ok()?;
            cost_before += tree_cost(&value);
            let id = b.add(
                &value,
                &mut |b, name| match names.resolve(name, &is_param, &symbol)? {
                    (Binding::Input, _) => conn.get(name).copied(),
                    (Binding::Local | Binding::Output, _) => assigned.get(name).copied(),
                    (binding, ty) => Some(b.outer_name(name, binding, ty)),
                },
            )?;
            let id = match names.assign(&st.target, ty) {
                (Binding::Output, out_t) => b.cast(id, out_t),
                _ => id,
            };
            assigned.insert(st.target.clone(), id);
        }
        for e in body.out_edges(tn) {
            let (_, dst) = body.endpoints(e);
            let edge = body.edge(e);
            let c = edge.src_conn.as_ref()?;
            let ct = *t.outputs.get(c)?;
            let value = *assigned.get(c)?;
            let IrNode::Access(data) = body.node(dst) else {
                return None;
            };
            if local(data) {
                let dt = cx.arrays.get(data).map(DataDesc::dtype)?;
                let v = b.cast(value, dt);
                local_value.insert(data.clone(), v);
            } else {
                outputs.push(Output {
                    memlet: edge.memlet.clone(),
                    target: dst,
                    dtype: ct,
                    value,
                });
            }
        }
    }
    Some(Built {
        b,
        inputs,
        outputs,
        cost_before,
    })
}

/// The memlet writing the copy `memlet`'s element of `to` (copied from `from`): its
/// subset when it names `to`, its other subset when it names `from`; `None` for a copy
/// of more than one element, or between containers it does not name.
fn copy_target(memlet: &sdflow_ir::Memlet, from: &str, to: &str) -> Option<sdflow_ir::Memlet> {
    let subset = if memlet.data == to {
        memlet.subset.clone()
    } else if memlet.data == from {
        memlet.other_subset.clone()?
    } else {
        return None;
    };
    subset
        .0
        .iter()
        .all(|d| matches!(d, sdflow_ir::Dim::Index(_)))
        .then(|| sdflow_ir::Memlet::new(to, subset))
}

/// A prefix for the new connectors and locals that no symbol or map parameter starts
/// with (the symbols are sorted, so the first at or after a prefix is the one to check).
fn fresh_prefix(cx: &Context<'_>) -> Option<String> {
    let taken = |p: &str| {
        cx.symbols
            .range::<str, _>((std::ops::Bound::Included(p), std::ops::Bound::Unbounded))
            .next()
            .is_some_and(|(k, _)| k.starts_with(p))
            || cx.params.iter().any(|q| q.starts_with(p))
    };
    (0..)
        .map(|k| {
            if k == 0 {
                "_".to_string()
            } else {
                format!("_{k}_")
            }
        })
        .find(|p| !taken(p))
}

/// Saturates, extracts and writes the code of `built`'s e-graph for `roots`, or takes
/// the result of an earlier body that built the same e-graph (`memo`).
fn saturate(
    built: &mut Built<'_>,
    roots: &[Id],
    leaf_name: &[String],
    prefix: &str,
    rules: &[Rule],
    limits: &Limits,
    memo: &std::sync::Mutex<SaturationMemo>,
) -> Saturated {
    let b = &mut built.b;
    let outputs = &built.outputs;
    let out_name = |k: usize| format!("{prefix}out{k}");
    // The key below is taken before rebuilding (on a memo miss only, for the runner):
    // the classes as built, their nodes' operands canonical, determine the rebuilt graph.
    //
    // Saturation, extraction and emission depend only on the e-graph as built (its
    // leaves are the inputs by position, not by container), the roots, the names given
    // to leaves and new values, and the rules and limits: a body that builds the same
    // e-graph as an earlier one (generated programs repeat one stencil body over many
    // containers) takes the earlier result.
    let key = {
        let mut classes: Vec<(Id, Vec<Node>)> =
            b.eg.classes()
                .map(|c| {
                    let mut nodes: Vec<Node> = c
                        .nodes
                        .iter()
                        .map(|n| {
                            let mut n = n.clone();
                            for a in &mut n.args {
                                *a = b.eg.find(*a);
                            }
                            n
                        })
                        .collect();
                    nodes.sort_unstable();
                    (c.id, nodes)
                })
                .collect();
        classes.sort_unstable_by_key(|(id, _)| *id);
        SaturationKey {
            classes,
            roots: roots.iter().map(|r| b.eg.find(*r)).collect(),
            leaves: b.leaves.clone(),
            leaf_name: leaf_name.to_vec(),
            prefix: prefix.to_string(),
            outputs: outputs.len(),
            limits: [
                limits.iter_limit,
                limits.node_limit,
                limits.class_cap,
                limits.match_limit,
            ],
            rules: rules.len(),
        }
    };
    let hit = memo.lock().ok().and_then(|m| m.get(&key).cloned());
    match hit {
        Some(sat) => sat,
        None => {
            b.eg.rebuild();
            let runner = Runner::default()
                .with_egraph(std::mem::replace(&mut b.eg, EGraph::new(Fold)))
                .with_iter_limit(limits.iter_limit)
                .with_node_limit(limits.node_limit)
                .with_time_limit(std::time::Duration::from_secs(365 * 24 * 3600))
                .with_scheduler(CappedScheduler::new(limits))
                .run(rules);
            let stop = match &runner.stop_reason {
                Some(egg::StopReason::Saturated) => "saturated".to_string(),
                Some(egg::StopReason::IterationLimit(n)) => format!("iteration limit ({n})"),
                Some(egg::StopReason::NodeLimit(n)) => format!("node limit ({n})"),
                Some(other) => format!("{other:?}"),
                None => "not run".to_string(),
            };
            let eg = runner.egraph;
            let ex = extract(&eg, &node_cost);
            let code = Emission::plan(&eg, &ex, roots).map(|plan| {
                let code = plan.statements(
                    &eg,
                    &ex,
                    leaf_name,
                    prefix,
                    &outputs.iter().map(|o| o.value).collect::<Vec<_>>(),
                    &out_name,
                );
                // The cost of the code as written: a value shared only under conditions
                // is written (and paid) once per use, as `cost_before` counts it.
                let cost: u64 = code.iter().map(|s| tree_cost(&s.value)).sum();
                (cost, code)
            });
            let sat = Saturated { stop, code };
            if let Ok(mut m) = memo.lock() {
                m.insert(key, sat.clone());
            }
            sat
        }
    }
}

/// `body` with the tasklets of `shape` and its local containers replaced by `merged`,
/// which reads `built`'s inputs and writes its outputs (access nodes left without edges
/// are removed).
fn rewrite(
    body: &Dataflow,
    shape: &StraightLine<'_>,
    built: &Built<'_>,
    merged: Tasklet,
    in_name: &dyn Fn(usize) -> String,
    out_name: &dyn Fn(usize) -> String,
) -> Dataflow {
    let (order, inputs, outputs) = (&shape.order, &built.inputs, &built.outputs);
    let local = |d: &str| shape.local(d);
    let mut nb = body.clone();
    let gone: BTreeSet<NodeId> = order
        .iter()
        .copied()
        .filter(|n| match body.node(*n) {
            IrNode::Tasklet(_) => true,
            IrNode::Access(d) => local(d),
            _ => false,
        })
        .collect();
    let kept_sources: BTreeSet<NodeId> = inputs.iter().map(|i| i.source).collect();
    let kept_targets: BTreeSet<NodeId> = outputs.iter().map(|o| o.target).collect();
    for n in order {
        let isolated_after = match body.node(*n) {
            IrNode::Access(_) if !gone.contains(n) => {
                !kept_sources.contains(n)
                    && !kept_targets.contains(n)
                    && (body.in_degree(*n) > 0 || body.out_degree(*n) > 0)
            }
            _ => false,
        };
        if gone.contains(n) || isolated_after {
            nb.graph.remove_node(*n);
        }
    }
    let tn = nb.add_node(IrNode::Tasklet(merged));
    for (k, i) in inputs.iter().enumerate() {
        nb.add_edge(i.source, None, tn, Some(&in_name(k)), i.memlet.clone());
    }
    for (k, o) in outputs.iter().enumerate() {
        nb.add_edge(tn, Some(&out_name(k)), o.target, None, o.memlet.clone());
    }
    nb
}

/// The extracted DAG in emission order: which classes become locals.
struct Emission {
    /// Reachable classes in post order (operands first).
    order: Vec<Id>,
    /// Uses of each class by other chosen nodes and by the roots.
    uses: HashMap<Id, usize>,
    impure: BTreeSet<Id>,
    /// Classes the code always evaluates: reached from a root through no lazy position
    /// (a `select`'s branch, the right operand of `&&`/`||`). Only these may become
    /// locals, which are evaluated before the outputs: a value needed only under a
    /// condition stays inside it, so an operation that can fail (an integer division, a
    /// read the condition guards) never runs where the original did not run it.
    strict: BTreeSet<Id>,
}

impl Emission {
    /// Walks the chosen nodes from the roots (in order); `None` on a cycle.
    fn plan(eg: &EGraph<Node, Fold>, ex: &Extraction, roots: &[Id]) -> Option<Emission> {
        let mut order = Vec::new();
        let mut state: HashMap<Id, bool> = HashMap::default(); // false: on stack, true: done
        let mut uses: HashMap<Id, usize> = HashMap::default();
        let mut impure = BTreeSet::new();
        for r in roots {
            let r = eg.find(*r);
            *uses.entry(r).or_default() += 1;
            let mut stack: Vec<(Id, usize)> = vec![(r, 0)];
            if state.contains_key(&r) {
                continue;
            }
            state.insert(r, false);
            while let Some((c, i)) = stack.pop() {
                let node = ex.node(eg, c)?;
                if i == 0 {
                    if matches!(node.op, Op::Guarded(..) | Op::Clock(_)) {
                        impure.insert(c);
                    }
                    for a in &node.args {
                        *uses.entry(eg.find(*a)).or_default() += 1;
                    }
                }
                if let Some(a) = node.args.get(i) {
                    let a = eg.find(*a);
                    stack.push((c, i + 1));
                    match state.get(&a) {
                        Some(false) => return None,
                        Some(true) => {}
                        None => {
                            state.insert(a, false);
                            stack.push((a, 0));
                        }
                    }
                } else {
                    state.insert(c, true);
                    order.push(c);
                }
            }
        }
        let mut strict = BTreeSet::new();
        let mut stack: Vec<Id> = roots.iter().map(|r| eg.find(*r)).collect();
        while let Some(c) = stack.pop() {
            if !strict.insert(c) {
                continue;
            }
            let node = ex.node(eg, c)?;
            let eager = match node.op {
                Op::Select(_) => 1,
                Op::Bin(op, _) if op.is_logical() => 1,
                _ => node.args.len(),
            };
            stack.extend(node.args[..eager].iter().map(|a| eg.find(*a)));
        }
        Some(Emission {
            order,
            uses,
            impure,
            strict,
        })
    }

    /// The tasklet code: a local per shared or impure class (in post order), then one
    /// statement per output.
    fn statements(
        &self,
        eg: &EGraph<Node, Fold>,
        ex: &Extraction,
        leaf_name: &[String],
        prefix: &str,
        outputs: &[Id],
        out_name: &dyn Fn(usize) -> String,
    ) -> Vec<Stmt> {
        let mut local: HashMap<Id, String> = HashMap::default();
        let mut code = Vec::new();
        for c in &self.order {
            let Some(node) = ex.node(eg, *c) else {
                continue;
            };
            let trivial = matches!(node.op, Op::Const(..) | Op::Leaf(..));
            let shared = self.uses.get(c).copied().unwrap_or(0) >= 2;
            if self.strict.contains(c) && (self.impure.contains(c) || (shared && !trivial)) {
                let value = self.expr(eg, ex, *c, leaf_name, &local, true);
                let name = format!("{prefix}t{}", local.len());
                code.push(Stmt {
                    target: name.clone(),
                    value,
                });
                local.insert(*c, name);
            }
        }
        for (k, o) in outputs.iter().enumerate() {
            let value = self.expr(eg, ex, eg.find(*o), leaf_name, &local, false);
            code.push(Stmt {
                target: out_name(k),
                value,
            });
        }
        code
    }

    /// The expression of a class: its local's name, or its chosen node over its
    /// operands' expressions (`top`: the class being defined itself).
    fn expr(
        &self,
        eg: &EGraph<Node, Fold>,
        ex: &Extraction,
        c: Id,
        leaf_name: &[String],
        local: &HashMap<Id, String>,
        top: bool,
    ) -> Expr {
        let c = eg.find(c);
        if !top && let Some(n) = local.get(&c) {
            return Expr::Var(n.clone());
        }
        let Some(node) = ex.node(eg, c) else {
            return Expr::Const(Value::Bool(false));
        };
        let arg = |k: usize| Box::new(self.expr(eg, ex, node.args[k], leaf_name, local, false));
        match node.op {
            Op::Const(t, bits) => Expr::Const(const_value(t, bits)),
            Op::Leaf(k, _) => Expr::Var(leaf_name[k as usize].clone()),
            Op::Un(op, _) => Expr::Unary(op, arg(0)),
            Op::Bin(op, _) | Op::Guarded(_, op, _) => Expr::Binary(op, arg(0), arg(1)),
            Op::Select(_) => Expr::Select(arg(0), arg(1), arg(2)),
            Op::Call(f, _) => Expr::Call(f, (0..node.args.len()).map(|k| *arg(k)).collect()),
            Op::Cast(t) => Expr::Cast(t, arg(0)),
            Op::Clock(_) => Expr::Call(sdflow_ir::MathFn::WallNs, vec![]),
        }
    }
}
