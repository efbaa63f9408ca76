//! Branching callees in map bodies made straight-line: a nested SDFG called at every
//! point of a map whose body is an `if` on a one-element container (GT4Py lowers `if c
//! then a else b` at a point to such an `if_stmt` callee whose branches copy `a` or `b`
//! into the output) becomes both branches, one after the other, and a select of their
//! results. The straight-line form is then spliced into the map body as any other
//! straight-line callee (`inline_nested`, [`crate::inline_nested`]'s map callees), where
//! the whole body vectorizes: a call per point with a branch in it does not.
//!
//! ```text
//! nested { c = a > b; if c { t = 2a; o = t } else { o = a + b } }
//!                                      →
//! nested { c = a > b; t' = 2a; o' = t'; o'' = a + b; o = select(c, o', o'') }
//! ```
//!
//! Legality. Both branches now run at every point, so neither may fail where it would
//! not have run: every container a branch touches is one element (read in bounds
//! wherever the call runs), and no tasklet of a branch divides integers (the only
//! operation that can fail on one-element operands). Each container written in a
//! branch gets a fresh name there; one written in both becomes the select of the two
//! after the `if`; one written in one branch only must be that branch's own (a
//! transient read nowhere after the `if`, which the straight-line check then finds).
//! A branch may not write what was written before the `if` (its old value would be
//! needed where it does not run). Copies between one-element containers become
//! assignment tasklets, so the straight-line callee has tasklets alone.
//!
//! Cost. Running the branch that would not run costs its operations; a branch costing
//! more than [`SPECULATION_BUDGET`] (the optimizer's operation costs: a flop 1, a
//! division or square root 8, another special function 20) keeps the call. Copies and
//! the select cost nothing that the call's copies in and out did not.

use std::collections::{BTreeMap, BTreeSet};

use sdflow_ir::typing;
use sdflow_ir::{
    BinOp, Block, DType, DataDesc, Dataflow, Dim, Expr, Memlet, NestedSdfg, Node, Sdfg, State,
    StateId, Stmt, Subset, SymExpr, Tasklet, Value,
};

use crate::egraph::tree_cost as expr_cost;
use crate::inline_nested::{one_element, plain_states};
use crate::pattern::fresh_name;

/// The most a branch may cost (per point) to run where it would not have run.
pub(crate) const SPECULATION_BUDGET: u64 = 16;

/// The straight-line form of a branching callee (see the module documentation); the
/// reason when there is none.
pub(crate) fn flatten(ns: &NestedSdfg) -> Result<NestedSdfg, String> {
    let inner = &*ns.sdfg;
    let mut items = Vec::new();
    if !items_of(&inner.body, &mut items) {
        return Err("its control flow is more than states and `if`s of states".into());
    }
    if !items.iter().any(|i| matches!(i, Item::If(..))) {
        return Err("it has no `if`".into());
    }
    let mut out = Sdfg {
        states: Vec::new(),
        body: Block::empty(),
        ..inner.clone()
    };
    let mut order = Vec::new();
    let mut written: BTreeSet<String> = BTreeSet::new();
    for item in items {
        match item {
            Item::State(s) => {
                let graph = assignments(inner, &inner.states[s.index()].graph, &BTreeMap::new())?;
                written.extend(writes(&graph));
                order.push(push_state(&mut out, &inner.states[s.index()].name, graph));
            }
            Item::If(cond, then, otherwise) => {
                let (c, negated) = condition(inner, cond, &written)?;
                let mut arms: Vec<BTreeMap<String, String>> = Vec::new();
                for arm in [then, otherwise] {
                    let mut arm_writes = BTreeSet::new();
                    for &s in &arm {
                        arm_writes.extend(writes(&inner.states[s.index()].graph));
                    }
                    if let Some(x) = arm_writes.iter().find(|x| written.contains(*x)) {
                        return Err(format!("a branch writes '{x}', written before the `if`"));
                    }
                    let mut cost = 0;
                    for &s in &arm {
                        cost += speculation_cost(inner, &inner.states[s.index()].graph)?;
                    }
                    if cost > SPECULATION_BUDGET {
                        return Err(format!(
                            "a branch costs {cost} per point, more than {SPECULATION_BUDGET}"
                        ));
                    }
                    let mut renames: BTreeMap<String, String> = BTreeMap::new();
                    for x in arm_writes {
                        let Some(desc) = inner.arrays.get(&x) else {
                            return Err(format!("a branch writes '{x}', which is not declared"));
                        };
                        let fresh = fresh_name(&out, &format!("{x}_{}", arms.len()));
                        let scalar = DataDesc::Scalar {
                            dtype: desc.dtype(),
                            transient: true,
                        };
                        out.arrays.insert(fresh.clone(), scalar);
                        renames.insert(x, fresh);
                    }
                    for &s in &arm {
                        let st = &inner.states[s.index()];
                        let graph = assignments(inner, &st.graph, &renames)?;
                        order.push(push_state(&mut out, &st.name, graph));
                    }
                    arms.push(renames);
                }
                let merge = select_state(inner, &c, negated, &arms[0], &arms[1])?;
                written.extend(writes(&merge));
                order.push(push_state(&mut out, "select", merge));
            }
        }
    }
    out.body = Block::Seq(order.into_iter().map(Block::State).collect());
    Ok(NestedSdfg {
        sdfg: Box::new(out),
        symbol_mapping: ns.symbol_mapping.clone(),
    })
}

/// A step of the callee's body: a state, or an `if` (condition, then, otherwise) whose
/// branches are plain sequences of states.
enum Item<'a> {
    State(StateId),
    If(&'a SymExpr, Vec<StateId>, Vec<StateId>),
}

fn items_of<'a>(b: &'a Block, out: &mut Vec<Item<'a>>) -> bool {
    match b {
        Block::State(s) => {
            out.push(Item::State(*s));
            true
        }
        Block::Seq(v) => v.iter().all(|b| items_of(b, out)),
        Block::If(i) => {
            let (mut then, mut otherwise) = (Vec::new(), Vec::new());
            let plain =
                plain_states(&i.then, &mut then) && plain_states(&i.otherwise, &mut otherwise);
            if plain {
                out.push(Item::If(&i.cond, then, otherwise));
            }
            plain
        }
        _ => false,
    }
}

fn push_state(out: &mut Sdfg, name: &str, graph: Dataflow) -> StateId {
    out.states.push(State {
        name: name.to_string(),
        graph,
    });
    StateId((out.states.len() - 1) as u32)
}

/// Containers written in `g` (access nodes with in-edges).
fn writes(g: &Dataflow) -> BTreeSet<String> {
    g.node_ids()
        .into_iter()
        .filter(|&n| g.in_degree(n) > 0)
        .filter_map(|n| g.node(n).as_access().map(str::to_string))
        .collect()
}

/// The `if`'s condition as a one-element container of the callee that holds its value
/// by the time the `if` runs (an input, or written before), and whether it is negated.
fn condition(
    inner: &Sdfg,
    cond: &SymExpr,
    written: &BTreeSet<String>,
) -> Result<(String, bool), String> {
    let (name, negated) = match cond {
        SymExpr::Sym(n) => (n.to_string(), false),
        SymExpr::Not(x) => match &**x {
            SymExpr::Sym(n) => (n.to_string(), true),
            _ => return Err(format!("its condition '{cond}' is not a container")),
        },
        _ => return Err(format!("its condition '{cond}' is not a container")),
    };
    let Some(desc) = inner.arrays.get(&name) else {
        return Err(format!("its condition '{cond}' is not a container"));
    };
    if !one_element(desc) || !matches!(desc.dtype(), DType::Bool | DType::I32 | DType::I64) {
        return Err(format!(
            "its condition '{name}' is not one boolean or integer"
        ));
    }
    if desc.transient() && !written.contains(&name) {
        return Err(format!(
            "its condition '{name}' is not written before the `if`"
        ));
    }
    Ok((name, negated))
}

/// The subset of the one element of `desc`.
fn element(desc: &DataDesc) -> Subset {
    Subset(vec![Dim::Index(SymExpr::Int(0)); desc.shape().len()])
}

/// A copy of state `g` with containers renamed and every copy between one-element
/// containers an assignment tasklet.
fn assignments(
    inner: &Sdfg,
    g: &Dataflow,
    renames: &BTreeMap<String, String>,
) -> Result<Dataflow, String> {
    let name = |x: &str| renames.get(x).cloned().unwrap_or_else(|| x.to_string());
    // A renamed container is a scalar of its own: its one element has no index.
    let at = |x: &str, desc: &DataDesc| {
        if renames.contains_key(x) {
            Subset(Vec::new())
        } else {
            element(desc)
        }
    };
    let mut out = Dataflow::new();
    let mut map = BTreeMap::new();
    for n in g.node_ids() {
        let node = match g.node(n) {
            Node::Access(a) => Node::Access(name(a)),
            other => other.clone(),
        };
        map.insert(n, out.add_node(node));
    }
    for e in g.edge_ids() {
        let (src, dst) = g.endpoints(e);
        let edge = g.edge(e);
        match (g.node(src).as_access(), g.node(dst).as_access()) {
            (Some(a), Some(b)) => {
                let (Some(da), Some(db)) = (inner.arrays.get(a), inner.arrays.get(b)) else {
                    return Err(format!(
                        "a copy '{a}' -> '{b}' names an undeclared container"
                    ));
                };
                if !one_element(da) || !one_element(db) || edge.memlet.wcr.is_some() {
                    return Err(format!("the copy '{a}' -> '{b}' is not of one element"));
                }
                let t = out.add_node(Node::Tasklet(Tasklet {
                    name: format!("assign_{b}"),
                    inputs: BTreeMap::from([("a".to_string(), da.dtype())]),
                    outputs: BTreeMap::from([("o".to_string(), db.dtype())]),
                    code: vec![Stmt {
                        target: "o".into(),
                        value: Expr::Var("a".into()),
                    }],
                }));
                out.add_edge(
                    map[&src],
                    None,
                    t,
                    Some("a"),
                    Memlet::new(&name(a), at(a, da)),
                );
                out.add_edge(
                    t,
                    Some("o"),
                    map[&dst],
                    None,
                    Memlet::new(&name(b), at(b, db)),
                );
            }
            _ => {
                let data = &edge.memlet.data;
                let memlet = if renames.contains_key(data) {
                    Memlet {
                        data: name(data),
                        subset: Subset(Vec::new()),
                        other_subset: None,
                        wcr: edge.memlet.wcr,
                    }
                } else {
                    edge.memlet.clone()
                };
                out.add_edge(
                    map[&src],
                    edge.src_conn.as_deref(),
                    map[&dst],
                    edge.dst_conn.as_deref(),
                    memlet,
                );
            }
        }
    }
    Ok(out)
}

/// What running state `g` of a branch costs where the branch would not have run; an
/// error when it could fail there (an integer division, a node other than tasklets and
/// one-element containers).
fn speculation_cost(inner: &Sdfg, g: &Dataflow) -> Result<u64, String> {
    let mut cost = 0;
    for n in g.node_ids() {
        match g.node(n) {
            Node::Access(a) => {
                if !inner.arrays.get(a).is_some_and(one_element) {
                    return Err(format!("a branch touches '{a}', more than one element"));
                }
            }
            Node::Tasklet(t) => {
                let mut locals: BTreeMap<&str, DType> = BTreeMap::new();
                for st in &t.code {
                    let ty = |v: &str| {
                        locals
                            .get(v)
                            .or_else(|| t.inputs.get(v))
                            .copied()
                            .or_else(|| inner.symbols.get(v).map(|s| s.dtype))
                    };
                    if divides_integers(&st.value, &ty) {
                        return Err(format!("tasklet '{}' divides integers", t.name));
                    }
                    cost += expr_cost(&st.value);
                    let vt = sdflow_ir::interp::eval::type_of(&st.value, &ty)
                        .map_err(|e| format!("tasklet '{}': {e}", t.name))?;
                    locals.insert(&st.target, vt);
                }
            }
            other => {
                return Err(format!("a branch holds {}", other.describe()));
            }
        }
    }
    Ok(cost)
}

/// Whether `e` divides (or takes a modulo of) integers anywhere, or could not be typed.
fn divides_integers(e: &Expr, ty: &dyn Fn(&str) -> Option<DType>) -> bool {
    let mut found = false;
    e.visit(&mut |x| {
        if let Expr::Binary(op @ (BinOp::Div | BinOp::FloorDiv | BinOp::Mod), a, b) = x {
            let t = |y: &Expr| sdflow_ir::interp::eval::type_of(y, ty).ok();
            found |= match (t(a), t(b)) {
                (Some(ta), Some(tb)) => typing::binary(*op, ta, tb)
                    .map_or(true, |r| !matches!(r.operands, DType::F32 | DType::F64)),
                _ => true,
            };
        }
    });
    found
}

/// The state after an `if`: each container written in both branches (renamed `then`
/// and `otherwise`) the select of the two on condition `c`.
fn select_state(
    inner: &Sdfg,
    c: &str,
    negated: bool,
    then: &BTreeMap<String, String>,
    otherwise: &BTreeMap<String, String>,
) -> Result<Dataflow, String> {
    let mut g = Dataflow::new();
    let cdesc = &inner.arrays[c];
    let mut cond_node = None;
    let truth = match cdesc.dtype() {
        DType::Bool => Expr::Var("c".into()),
        t => Expr::Binary(
            BinOp::Ne,
            Box::new(Expr::Var("c".into())),
            Box::new(Expr::Const(Value::zero(t))),
        ),
    };
    for (x, t_name) in then {
        let Some(e_name) = otherwise.get(x) else {
            continue;
        };
        let desc = &inner.arrays[x];
        let (a, b) = if negated {
            (e_name, t_name)
        } else {
            (t_name, e_name)
        };
        let dt = desc.dtype();
        let task = g.add_node(Node::Tasklet(Tasklet {
            name: format!("select_{x}"),
            inputs: BTreeMap::from([
                ("c".to_string(), cdesc.dtype()),
                ("t".to_string(), dt),
                ("e".to_string(), dt),
            ]),
            outputs: BTreeMap::from([("o".to_string(), dt)]),
            code: vec![Stmt {
                target: "o".into(),
                value: Expr::Select(
                    Box::new(truth.clone()),
                    Box::new(Expr::Var("t".into())),
                    Box::new(Expr::Var("e".into())),
                ),
            }],
        }));
        let cn = *cond_node.get_or_insert_with(|| g.add_access(c));
        g.add_edge(cn, None, task, Some("c"), Memlet::new(c, element(cdesc)));
        for (conn, name) in [("t", a), ("e", b)] {
            let src = g.add_access(name);
            g.add_edge(
                src,
                None,
                task,
                Some(conn),
                Memlet::new(name, Subset(Vec::new())),
            );
        }
        let dst = g.add_access(x);
        g.add_edge(task, Some("o"), dst, None, Memlet::new(x, element(desc)));
    }
    for x in then.keys().chain(otherwise.keys()) {
        let one = then.contains_key(x) != otherwise.contains_key(x);
        if one && !inner.arrays[x].transient() {
            return Err(format!("'{x}' is written in one branch only"));
        }
    }
    Ok(g)
}
