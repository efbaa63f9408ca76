//! The dataflow form of move-into-if (part of the `move_into_if` pass): a conditional
//! inside dataflow is a nested SDFG whose body is an `if`. A map or tasklet whose only
//! result is a transient read by nothing but that nested SDFG, which uses it only inside
//! one branch, moves into the nested SDFG, into a new state at the start of that branch.
//!
//! ```text
//! u ─► map A ─► tmp ─► nested { if c: out = f(tmp) else: out = 0 } ─► out
//!                                      →
//! u ─────────────────► nested { if c: [u ─► map A ─► tmp]; out = f(tmp) else: … } ─► out
//! ```
//!
//! Inside, the transient keeps its descriptor; the node's inputs become new connectors
//! (whole arrays); the caller symbols the node and those descriptors use are passed
//! through by name. The connector that carried the transient disappears.
//!
//! Legality: besides what the state form needs (inputs final when the node runs, the
//! transient private to the state and read by nothing but the callee, in one branch, not
//! by its condition), the node must write the whole transient with a plain write
//! (`pattern::writes_whole`): inside, it becomes a callee transient, fresh on every call,
//! while the caller's kept its value from one run of the state to the next (a loop
//! around it); a whole write means no value the callee reads was written by an earlier
//! call, so the lifetime of every value read is unchanged.

use std::collections::{BTreeMap, BTreeSet};

use sdflow_ir::{
    Block, DataDesc, Dataflow, Memlet, Node, NodeId, Sdfg, StateId, Subset, SymExpr, Symbol,
};

use crate::pattern::{
    DataUses, chain_at, control_names, data_uses, fresh_name, is_full, remove_isolated,
    rename_data, writes_whole,
};

/// Finds and applies one move; returns whether it did.
pub(crate) fn move_one(sdfg: &mut Sdfg) -> bool {
    let uses = data_uses(sdfg);
    for s in sdfg.body.states() {
        let df = &sdfg.states[s.index()].graph;
        for n in df.node_ids() {
            if let Some(m) = find(sdfg, &uses, df, s.index(), n) {
                apply(sdfg, s.index(), m);
                return true;
            }
        }
    }
    false
}

/// A move: node `m` writing `t_node` (container `t`), read by nested node `nested`
/// through connector `conn`, into branch `then` (or else).
struct Move {
    m: NodeId,
    t_node: NodeId,
    nested: NodeId,
    conn: String,
    then: bool,
}

/// The nested SDFG's `if`: its body is an `if`, or a sequence of exactly one.
fn inner_if(inner: &Sdfg) -> Option<&sdflow_ir::If> {
    match &inner.body {
        Block::If(i) => Some(i),
        Block::Seq(v) => match v.as_slice() {
            [Block::If(i)] => Some(i),
            _ => None,
        },
        _ => None,
    }
}

fn collect_names(node: &Node, out: &mut BTreeSet<String>) {
    match node {
        Node::Tasklet(t) => {
            for st in &t.code {
                out.extend(st.value.vars());
            }
        }
        Node::Map(m) => {
            for r in &m.ranges {
                for e in [&r.start, &r.end, &r.step] {
                    out.extend(e.free_symbols());
                }
            }
            for e in m.body.edge_ids() {
                out.extend(m.body.edge(e).memlet.subset.free_symbols());
            }
            for b in m.body.node_ids() {
                collect_names(m.body.node(b), out);
            }
        }
        _ => {}
    }
}

fn find(sdfg: &Sdfg, uses: &DataUses, df: &Dataflow, s: usize, nested: NodeId) -> Option<Move> {
    let Node::Nested(ns) = df.node(nested) else {
        return None;
    };
    let inner = &ns.sdfg;
    let cond = inner_if(inner)?;
    let then_states: BTreeSet<StateId> = cond.then.states().into_iter().collect();
    let else_states: BTreeSet<StateId> = cond.otherwise.states().into_iter().collect();
    let inner_uses = data_uses(inner);
    for e in df.in_edges(nested) {
        let (t_node, _) = df.endpoints(e);
        let edge = df.edge(e);
        let (Some(t), Some(conn)) = (df.node(t_node).as_access(), edge.dst_conn.as_ref()) else {
            continue;
        };
        let (Some(DataDesc::Array(arr)), Some(u)) = (sdfg.arrays.get(t), uses.get(t)) else {
            continue;
        };
        let private = arr.transient
            && u.access_nodes == 1
            && u.states.len() == 1
            && u.states.contains(&s)
            && !u.in_control;
        let Some(chain) = chain_at(df, t_node) else {
            continue;
        };
        let m = chain.producer;
        let only_nested = chain.consumers == [nested];
        // Inside, the transient is the callee's: fresh on every call, where the caller's
        // kept its value between runs of the state (across loop iterations). The node
        // must kill every element the callee reads, on every call: a whole, plain write.
        if !private
            || !only_nested
            || df.out_degree(m) != 1
            || !matches!(df.node(m), Node::Map(_) | Node::Tasklet(_))
            || !is_full(&edge.memlet.subset, &arr.shape)
            || !writes_whole(df, m, t, &arr.shape)
        {
            continue;
        }
        // The connector holds the whole transient, in the same shape.
        let int_map: BTreeMap<String, SymExpr> = ns.symbol_mapping.clone();
        let same_shape = inner.arrays.get(conn).is_some_and(|d| {
            d.dtype() == arr.dtype
                && d.shape().len() == arr.shape.len()
                && d.shape()
                    .iter()
                    .zip(&arr.shape)
                    .all(|(x, y)| x.substitute(&int_map).simplify() == y.simplify())
        });
        // Read only, in one branch, not by the condition.
        let cu = inner_uses.get(conn.as_str());
        let branch = cu.and_then(|cu| {
            let in_then = cu
                .states
                .iter()
                .all(|x| then_states.contains(&StateId(*x as u32)));
            let in_else = cu
                .states
                .iter()
                .all(|x| else_states.contains(&StateId(*x as u32)));
            if !cu.written_in.is_empty() || cu.in_control || cu.states.is_empty() {
                None
            } else if in_then && !in_else {
                Some(true)
            } else if in_else && !in_then {
                Some(false)
            } else {
                None
            }
        });
        let (true, Some(then)) = (same_shape, branch) else {
            continue;
        };
        // The inputs are final when the node runs, and come from access nodes.
        let inputs_ok = df.in_edges(m).into_iter().all(|ie| {
            let src = df.endpoints(ie).0;
            let Some(d) = df.node(src).as_access() else {
                return false;
            };
            df.access_nodes(d)
                .into_iter()
                .all(|x| df.in_degree(x) == 0 || df.reaches(x, m))
        });
        // Caller symbols pass through by name: the callee must not use the name otherwise.
        let symbols_ok = used_symbols_of(sdfg, df, m).iter().all(|x| {
            match (inner.symbols.get(x), ns.symbol_mapping.get(x)) {
                (None, None) => !inner.arrays.contains_key(x),
                (Some(sym), Some(SymExpr::Sym(v))) => {
                    **v == **x && sym.dtype == sdfg.symbols[x].dtype
                }
                _ => false,
            }
        });
        let cond_free = !control_names(&inner.body).contains(conn.as_str());
        if inputs_ok && symbols_ok && cond_free {
            return Some(Move {
                m,
                t_node,
                nested,
                conn: conn.clone(),
                then,
            });
        }
    }
    None
}

fn apply(sdfg: &mut Sdfg, s: usize, mv: Move) {
    let outer_symbols: BTreeMap<String, Symbol> = sdfg.symbols.clone();
    let arrays = sdfg.arrays.clone();
    let needed = used_symbols_of(sdfg, &sdfg.states[s].graph, mv.m);
    let df = &mut sdfg.states[s].graph;
    let t = df
        .node(mv.t_node)
        .as_access()
        .unwrap_or_default()
        .to_string();
    // Inputs of the moved node: (outer access node, container).
    let mut inputs: Vec<(NodeId, String)> = Vec::new();
    for e in df.in_edges(mv.m) {
        let src = df.endpoints(e).0;
        let d = df.edge(e).memlet.data.clone();
        if !inputs.iter().any(|(_, x)| *x == d) {
            inputs.push((src, d));
        }
    }
    let mut node = df.node(mv.m).clone();
    let out_edge = df.edge(df.out_edges(mv.m)[0]).clone();
    let in_edges: Vec<_> = df
        .in_edges(mv.m)
        .into_iter()
        .map(|e| df.edge(e).clone())
        .collect();
    let Node::Nested(ns) = &mut df.graph[mv.nested] else {
        return;
    };
    let inner = ns.sdfg.as_mut();
    // Names inside: the transient, then each input.
    let mut renames: BTreeMap<String, String> = BTreeMap::new();
    let t_in = fresh_name(inner, &t);
    renames.insert(t.clone(), t_in.clone());
    for (_, d) in &inputs {
        let name = fresh_name(inner, d);
        let mut desc = arrays[d].clone();
        match &mut desc {
            DataDesc::Array(a) => a.transient = false,
            DataDesc::Scalar { transient, .. } => *transient = false,
        }
        inner.arrays.insert(name.clone(), desc);
        renames.insert(d.clone(), name);
    }
    let mut t_desc = arrays[&t].clone();
    if let DataDesc::Array(a) = &mut t_desc {
        a.transient = true;
    }
    inner.arrays.insert(t_in.clone(), t_desc);
    for x in &needed {
        if !inner.symbols.contains_key(x) {
            inner
                .symbols
                .insert(x.clone(), Symbol::new(outer_symbols[x].dtype));
            ns.symbol_mapping.insert(x.clone(), SymExpr::sym(x));
        }
    }
    // The new inner state: inputs ─► node ─► transient.
    let mut g = Dataflow::new();
    if let Node::Map(m) = &mut node {
        for (from, to) in &renames {
            rename_data(&mut m.body, from, to);
        }
    }
    let id = g.add_node(node);
    let mut srcs: BTreeMap<String, NodeId> = BTreeMap::new();
    for mut e in in_edges {
        let d = renames[&e.memlet.data].clone();
        let src = *srcs.entry(d.clone()).or_insert_with(|| g.add_access(&d));
        e.memlet.data = d;
        g.graph.add_edge(src, id, e);
    }
    let mut oe = out_edge;
    oe.memlet.data = t_in.clone();
    let dst = g.add_access(&t_in);
    g.graph.add_edge(id, dst, oe);
    let new_state = StateId(inner.states.len() as u32);
    inner.states.push(sdflow_ir::State {
        name: "moved".to_string(),
        graph: g,
    });
    // The connector's container becomes the inner transient.
    inner.arrays.remove(&mv.conn);
    for st in &mut inner.states {
        rename_data(&mut st.graph, &mv.conn, &t_in);
    }
    let cond = match &mut inner.body {
        Block::If(i) => i,
        Block::Seq(v) => match v.as_mut_slice() {
            [Block::If(i)] => i,
            _ => return,
        },
        _ => return,
    };
    let branch = if mv.then {
        &mut cond.then
    } else {
        &mut cond.otherwise
    };
    branch.prepend(Block::State(new_state));
    // Outside: the node and the transient go; the inputs feed the nested SDFG.
    let touched: Vec<NodeId> = inputs.iter().map(|(n, _)| *n).collect();
    df.graph.remove_node(mv.m);
    df.graph.remove_node(mv.t_node);
    for (src, d) in &inputs {
        let shape = arrays[d].shape().to_vec();
        let memlet = Memlet::new(d, Subset::full(&shape));
        df.add_edge(*src, None, mv.nested, Some(&renames[d]), memlet);
    }
    remove_isolated(df, &touched);
    sdfg.arrays.remove(&t);
}

/// Names the node's code and memlets use that are symbols of the caller, and those the
/// shapes and strides of the containers it touches use (their descriptors move into the
/// callee with it).
fn used_symbols_of(sdfg: &Sdfg, df: &Dataflow, n: NodeId) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for e in df.in_edges(n).into_iter().chain(df.out_edges(n)) {
        let m = &df.edge(e).memlet;
        names.extend(m.subset.free_symbols());
        if let Some(DataDesc::Array(a)) = sdfg.arrays.get(&m.data) {
            for x in a.shape.iter().chain(&a.strides) {
                names.extend(x.free_symbols());
            }
        }
    }
    collect_names(df.node(n), &mut names);
    names.retain(|x| sdfg.symbols.contains_key(x));
    names
}
