//! The graph plumbing passes share, so that each pass reads as its rule: who reads and
//! writes which container in the whole program (per state, `ir::uses`), renaming containers and
//! map parameters inside bodies, copying one graph into another, re-deriving a map node's
//! edges from its body, walking the control flow's sequences, and dropping unused states.
//!
//! Why one file of this size: the graph plumbing the passes share (renaming, copying
//! graphs, re-deriving map edges, walking sequences, compacting states); each helper is
//! small, and the uses rule lives in `ir::uses`.

use std::collections::{BTreeMap, BTreeSet};

use sdflow_ir::propagate::{BoundaryMemo, map_boundary_memo};
pub use sdflow_ir::uses::{
    Use, control_names, for_each_use, node_reads_writes, reads_writes, tables_read,
};
use sdflow_ir::{
    Block, DataDesc, Dataflow, Dim, EdgeId, Expr, Memlet, Node, NodeId, Sdfg, StateId, Subset,
    SymExpr, SymOp,
};

/// A producer → access node → consumers chain: the access node has exactly one
/// in-edge, from a node that is not an access node (a map, tasklet, nested SDFG or library
/// node), without write-conflict resolution anywhere on the write's path
/// ([`wcr_on_path`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    /// The writer.
    pub producer: NodeId,
    /// The access node it writes.
    pub access: NodeId,
    /// Nodes reading the access node, in edge order, without repeats.
    pub consumers: Vec<NodeId>,
}

/// The chain through access node `access`, if it is one.
pub fn chain_at(df: &Dataflow, access: NodeId) -> Option<Chain> {
    df.node(access).as_access()?;
    let ins = df.in_edges(access);
    let [w] = ins.as_slice() else { return None };
    let producer = df.endpoints(*w).0;
    let data = df.node(access).as_access()?;
    if df.node(producer).as_access().is_some() || wcr_on_path(df, producer, data) {
        return None;
    }
    let mut consumers: Vec<NodeId> = Vec::new();
    for e in df.out_edges(access) {
        let c = df.endpoints(e).1;
        if !consumers.contains(&c) {
            consumers.push(c);
        }
    }
    Some(Chain {
        producer,
        access,
        consumers,
    })
}

/// Where a container is used in the whole program.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DataUse {
    /// States with an access node of it (or a table read of it), by index, ascending.
    pub states: Vec<usize>,
    /// Access nodes of it, over all state-level graphs.
    pub access_nodes: usize,
    /// States that read it, ascending.
    pub read_in: Vec<usize>,
    /// States that write it, ascending.
    pub written_in: Vec<usize>,
    /// The control flow reads it (a host scalar in a condition).
    pub in_control: bool,
}

/// Adds state `i` to a list gathered state by state (repeats of the last one skipped;
/// sorted and deduplicated at the end).
fn note_state(list: &mut Vec<usize>, i: usize) {
    if list.last() != Some(&i) {
        list.push(i);
    }
}

/// [`DataUse`] by container name (looked up, never iterated: a hash map).
pub type DataUses = rustc_hash::FxHashMap<String, DataUse>;

/// [`DataUse`] of every container of the program, over the states the control flow runs.
pub fn data_uses(sdfg: &Sdfg) -> DataUses {
    // Gathered by borrowed name (programs have thousands of containers with long common
    // prefixes); owned names only for the result.
    let mut by_name: rustc_hash::FxHashMap<&str, DataUse> = rustc_hash::FxHashMap::default();
    for s in sdfg.body.states() {
        let Some(state) = sdfg.state(s) else { continue };
        let df = &state.graph;
        let i = s.index();
        for_each_use(df, |d, u| {
            let entry = by_name.entry(d).or_default();
            note_state(&mut entry.states, i);
            if u.access_node {
                entry.access_nodes += 1;
            }
            if u.read {
                note_state(&mut entry.read_in, i);
            }
            if u.written {
                note_state(&mut entry.written_in, i);
            }
        });
    }
    let control = control_names(&sdfg.body);
    for name in &control {
        if sdfg.arrays.contains_key(name) {
            by_name.entry(name.as_str()).or_default().in_control = true;
        }
    }
    by_name
        .into_iter()
        .map(|(k, mut v)| {
            for list in [&mut v.states, &mut v.read_in, &mut v.written_in] {
                if !list.is_sorted() {
                    list.sort_unstable();
                    list.dedup();
                }
            }
            (k.to_string(), v)
        })
        .collect()
}

/// Runs `f` on the graph of every state the control flow runs, in parallel (tasks of at
/// least `min_len` states), with the rest of the program shared read-only, and returns
/// the results in state order. The graphs are out of the program while `f` runs: `f`
/// looks at its own state's graph only. A pass whose rewrites of one state touch nothing
/// another state's rewrites read (what it adds or removes from the program is merged by
/// the caller, in state order) gets results that do not depend on the threads.
pub(crate) fn for_each_state_parallel<R: Send>(
    sdfg: &mut Sdfg,
    min_len: usize,
    f: impl Fn(&Sdfg, &mut Dataflow) -> R + Sync,
) -> Vec<(StateId, R)> {
    use rayon::prelude::*;
    let states = sdfg.body.states();
    let mut graphs: Vec<Dataflow> = states
        .iter()
        .map(|s| std::mem::take(&mut sdfg.states[s.index()].graph))
        .collect();
    let shared: &Sdfg = sdfg;
    let results: Vec<R> = graphs
        .par_iter_mut()
        .with_min_len(min_len.max(1))
        .map(|g| f(shared, g))
        .collect();
    for (s, g) in states.iter().zip(graphs) {
        sdfg.states[s.index()].graph = g;
    }
    states.into_iter().zip(results).collect()
}

/// Renames container `from` to `to` in every access node and memlet (data and index
/// tables) of `df` and of the bodies of its maps, and in the connectors of halo exchanges
/// (named after their fields). Nested SDFGs keep their own names; only their edges here
/// are renamed.
pub fn rename_data(df: &mut Dataflow, from: &str, to: &str) {
    for n in df.node_ids() {
        match &mut df.graph[n] {
            Node::Access(d) if d == from => *d = to.to_string(),
            Node::Map(m) => rename_data(&mut m.body, from, to),
            _ => {}
        }
    }
    for e in df.edge_ids() {
        // A halo exchange takes each field at the connector of its name.
        let (src, dst) = df.endpoints(e);
        let exchange = |n: NodeId| {
            matches!(
                df.node(n),
                Node::Library(sdflow_ir::LibraryNode::HaloExchange(_))
            )
        };
        let (at_src, at_dst) = (exchange(src), exchange(dst));
        let edge = &mut df.graph[e];
        for (conn, on) in [(&mut edge.src_conn, at_src), (&mut edge.dst_conn, at_dst)] {
            if on && conn.as_deref() == Some(from) {
                *conn = Some(to.to_string());
            }
        }
        let m = &mut edge.memlet;
        if m.data == from {
            m.data = to.to_string();
        }
        rename_tables(&mut m.subset, from, to);
        if let Some(o) = &mut m.other_subset {
            rename_tables(o, from, to);
        }
    }
}

fn rename_tables(s: &mut Subset, from: &str, to: &str) {
    for d in &mut s.0 {
        if let Dim::Indirect { table, .. } = d
            && table == from
        {
            *table = to.to_string();
        }
    }
}

/// Substitutes map parameters (or any integer names) in every memlet, nested map range and
/// nested-SDFG symbol mapping of `df`, recursively (inner parameters shadow), and renames
/// them in tasklet code where the value is a plain name. Tasklet code that reads a name
/// substituted by a non-name expression is left alone: callers that shift parameters
/// check [`code_mentions`] first.
pub fn substitute_params(df: &mut Dataflow, map: &BTreeMap<String, SymExpr>) {
    let f = |e: &SymExpr| e.substitute(map).simplify();
    let renames: BTreeMap<String, String> = map
        .iter()
        .filter_map(|(k, v)| match v {
            SymExpr::Sym(s) => Some((k.clone(), s.to_string())),
            _ => None,
        })
        .collect();
    for n in df.node_ids() {
        match &mut df.graph[n] {
            Node::Map(m) => {
                // Inner parameters shadow outer ones.
                let mut inner = map.clone();
                for p in &m.params {
                    inner.remove(p);
                }
                for r in &mut m.ranges {
                    r.start = f(&r.start);
                    r.end = f(&r.end);
                    r.step = f(&r.step);
                }
                substitute_params(&mut m.body, &inner);
            }
            Node::Tasklet(t) => {
                for st in &mut t.code {
                    st.value = st.value.rename(&renames);
                }
            }
            Node::Nested(ns) => {
                for v in ns.symbol_mapping.values_mut() {
                    *v = f(v);
                }
            }
            _ => {}
        }
    }
    for e in df.edge_ids() {
        let m = &mut df.graph[e].memlet;
        m.subset = m.subset.map_exprs(&f);
        if let Some(o) = &mut m.other_subset {
            *o = o.map_exprs(&f);
        }
    }
}

/// Substitutes `map` in every symbolic expression of the control flow (loop bounds and
/// updates, conditions, assigned values), simplified.
pub fn substitute_control(block: &mut Block, map: &BTreeMap<String, SymExpr>) {
    let f = |e: &SymExpr| e.substitute(map).simplify();
    match block {
        Block::Seq(items) => items.iter_mut().for_each(|b| substitute_control(b, map)),
        Block::Loop(l) => {
            l.init = f(&l.init);
            l.cond = f(&l.cond);
            l.update = f(&l.update);
            substitute_control(&mut l.body, map);
        }
        Block::If(i) => {
            i.cond = f(&i.cond);
            substitute_control(&mut i.then, map);
            substitute_control(&mut i.otherwise, map);
        }
        Block::Assign(a) => {
            for (_, e) in a {
                *e = f(e);
            }
        }
        Block::State(_) => {}
    }
}

/// True when tasklet code in `df` (or nested map bodies) reads one of `names` as a
/// variable that is not one of its own connectors or locals.
pub fn code_mentions(df: &Dataflow, names: &BTreeSet<String>) -> bool {
    df.node_ids().into_iter().any(|n| match df.node(n) {
        Node::Tasklet(t) => {
            let own: BTreeSet<&str> = t
                .inputs
                .keys()
                .chain(t.outputs.keys())
                .map(String::as_str)
                .chain(t.code.iter().map(|s| s.target.as_str()))
                .collect();
            t.code.iter().any(|s| {
                s.value
                    .vars()
                    .iter()
                    .any(|v| names.contains(v) && !own.contains(v.as_str()))
            })
        }
        Node::Map(m) => code_mentions(&m.body, names),
        Node::Nested(ns) => ns
            .symbol_mapping
            .values()
            .any(|e| e.free_symbols().iter().any(|s| names.contains(s))),
        _ => false,
    })
}

/// Copies every node and edge of `src` into `dst`; returns where each node went.
pub fn copy_into(dst: &mut Dataflow, src: &Dataflow) -> BTreeMap<NodeId, NodeId> {
    let mut ids = BTreeMap::new();
    for n in src.node_ids() {
        ids.insert(n, dst.add_node(src.node(n).clone()));
    }
    for e in src.edge_ids() {
        let (a, b) = src.endpoints(e);
        let edge = src.edge(e).clone();
        dst.graph.add_edge(ids[&a], ids[&b], edge);
    }
    ids
}

/// [`copy_into`] for a graph that is not needed afterwards: its nodes and edges move
/// instead of being cloned (map bodies included), with the same new ids in the same order.
pub fn move_into(dst: &mut Dataflow, src: Dataflow) -> BTreeMap<NodeId, NodeId> {
    // Taken apart whole (in index order), not removed one node and edge at a time.
    let (nodes, edges) = src.graph.into_nodes_edges_iters();
    let mut ids = BTreeMap::new();
    for n in nodes {
        ids.insert(n.index, dst.add_node(n.weight));
    }
    for e in edges {
        dst.graph.add_edge(ids[&e.source], ids[&e.target], e.weight);
    }
    ids
}

/// Moves every edge leaving `from` so that it leaves `to` instead (same memlet and
/// connectors).
pub fn move_out_edges(df: &mut Dataflow, from: NodeId, to: NodeId) {
    for e in df.out_edges(from) {
        let (_, dst) = df.endpoints(e);
        let edge = df.graph.remove_edge(e).expect("edge of the graph");
        df.graph.add_edge(to, dst, edge);
    }
}

/// Moves every edge entering `from` so that it enters `to` instead.
pub fn move_in_edges(df: &mut Dataflow, from: NodeId, to: NodeId) {
    for e in df.in_edges(from) {
        let (src, _) = df.endpoints(e);
        let edge = df.graph.remove_edge(e).expect("edge of the graph");
        df.graph.add_edge(src, to, edge);
    }
}

/// Replaces the edges of map node `map` with the memlets its body implies (as the builder
/// derives them): each read from `sources[data]`, each write to `dests[data]`, or from/to
/// a new access node where none is given. Returns true when it added access nodes.
/// `memo` keeps propagated memlets across calls (pass one per pass run, or a fresh one).
pub fn connect_map(
    sdfg_arrays: &(impl sdflow_ir::Descriptors + ?Sized),
    df: &mut Dataflow,
    map: NodeId,
    sources: &BTreeMap<String, NodeId>,
    dests: &BTreeMap<String, NodeId>,
    memo: &mut BoundaryMemo,
) -> bool {
    for e in df.in_edges(map).into_iter().chain(df.out_edges(map)) {
        df.graph.remove_edge(e);
    }
    let Node::Map(m) = df.node(map) else {
        return false;
    };
    let (reads, writes) = map_boundary_memo(sdfg_arrays, &m.body, &m.params, &m.ranges, memo);
    let mut created = false;
    for r in reads {
        let src = match sources.get(&r.data) {
            Some(&n) => n,
            None => {
                created = true;
                df.add_access(&r.data)
            }
        };
        df.add_edge(src, None, map, None, r);
    }
    for w in writes {
        let dst = match dests.get(&w.data) {
            Some(&n) => n,
            None => {
                created = true;
                df.add_access(&w.data)
            }
        };
        df.add_edge(map, None, dst, None, w);
    }
    created
}

/// The written access node of `d` in `df` (one with in-edges), when there is exactly one.
pub fn written_node(df: &Dataflow, d: &str) -> Option<NodeId> {
    let mut written = df
        .access_nodes(d)
        .into_iter()
        .filter(|&n| df.in_degree(n) > 0);
    match (written.next(), written.next()) {
        (Some(n), None) => Some(n),
        _ => None,
    }
}

/// Removes access nodes without edges.
pub fn remove_isolated_access_nodes(df: &mut Dataflow) -> usize {
    let isolated: Vec<NodeId> = df
        .graph
        .node_indices()
        .filter(|&id| {
            df.node(id).as_access().is_some() && df.in_degree(id) == 0 && df.out_degree(id) == 0
        })
        .collect();
    for &id in &isolated {
        df.graph.remove_node(id);
    }
    isolated.len()
}

/// Removes those of `nodes` that are access nodes without edges (after a rewrite that may
/// have left them so).
pub fn remove_isolated(df: &mut Dataflow, nodes: &[NodeId]) {
    for &n in nodes {
        let isolated = df
            .graph
            .node_weight(n)
            .is_some_and(|x| x.as_access().is_some())
            && df.in_degree(n) == 0
            && df.out_degree(n) == 0;
        if isolated {
            df.graph.remove_node(n);
        }
    }
}

/// Calls `f` on every sequence of blocks (top-level body included), innermost last, until
/// `f` returns true; returns whether it did. Sequences are visited in program order.
pub fn find_in_seqs(block: &mut Block, f: &mut dyn FnMut(&mut Vec<Block>) -> bool) -> bool {
    find_in_seqs_looped(block, false, &mut |items, _| f(items))
}

/// [`find_in_seqs`], telling `f` whether the sequence runs inside a loop (at any depth
/// under `block`, or `in_loop` already): there, a container keeps its value from one
/// iteration to the next.
pub fn find_in_seqs_looped(
    block: &mut Block,
    in_loop: bool,
    f: &mut dyn FnMut(&mut Vec<Block>, bool) -> bool,
) -> bool {
    match block {
        Block::Seq(items) => {
            if f(items, in_loop) {
                return true;
            }
            items.iter_mut().any(|b| find_in_seqs_looped(b, in_loop, f))
        }
        Block::Loop(l) => find_in_seqs_looped(&mut l.body, true, f),
        Block::If(i) => {
            find_in_seqs_looped(&mut i.then, in_loop, f)
                || find_in_seqs_looped(&mut i.otherwise, in_loop, f)
        }
        Block::State(_) | Block::Assign(_) => false,
    }
}

/// Drops states the control flow does not run and renumbers the rest in order, so that
/// state ids stay dense. Returns how many were dropped.
pub fn compact_states(sdfg: &mut Sdfg) -> usize {
    let mut used = vec![false; sdfg.states.len()];
    let mut count = 0;
    for s in sdfg.body.states() {
        if let Some(u) = used.get_mut(s.index())
            && !*u
        {
            *u = true;
            count += 1;
        }
    }
    if count == sdfg.states.len() {
        return 0;
    }
    // New index by old index (states the control flow names keep their order).
    let mut new_id = vec![StateId(0); used.len()];
    let old = std::mem::take(&mut sdfg.states);
    let dropped = old.len() - count;
    for (i, st) in old.into_iter().enumerate() {
        if used[i] {
            new_id[i] = StateId(sdfg.states.len() as u32);
            sdfg.states.push(st);
        }
    }
    renumber(&mut sdfg.body, &new_id);
    dropped
}

fn renumber(block: &mut Block, map: &[StateId]) {
    match block {
        Block::State(s) => *s = map[s.index()],
        Block::Seq(items) => items.iter_mut().for_each(|b| renumber(b, map)),
        Block::Loop(l) => renumber(&mut l.body, map),
        Block::If(i) => {
            renumber(&mut i.then, map);
            renumber(&mut i.otherwise, map);
        }
        Block::Assign(_) => {}
    }
}

/// Arithmetic operations of the tasklets in `df` and its map bodies: a flop count for
/// cost models (calls of math functions count 8).
pub fn flops(df: &Dataflow) -> usize {
    df.node_ids()
        .into_iter()
        .map(|n| match df.node(n) {
            Node::Tasklet(t) => t.code.iter().map(|s| expr_flops(&s.value)).sum(),
            Node::Map(m) => flops(&m.body),
            _ => 0,
        })
        .sum()
}

fn expr_flops(e: &Expr) -> usize {
    let mut n = 0;
    e.visit(&mut |x| {
        n += match x {
            Expr::Binary(..) | Expr::Unary(..) | Expr::Select(..) => 1,
            Expr::Call(..) => 8,
            _ => 0,
        }
    });
    n
}

/// The memlet of a whole scalar container (a body-local value).
pub fn scalar_memlet(data: &str) -> Memlet {
    Memlet::new(data, Subset::default())
}

/// True when two ranges are the same after simplification.
pub fn same_ranges(a: &[sdflow_ir::Range], b: &[sdflow_ir::Range]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.start.simplify() == y.start.simplify()
                && x.end.simplify() == y.end.simplify()
                && x.step.simplify() == y.step.simplify()
        })
}

/// A fresh container name `base`, `base_1`, `base_2`, … not yet declared.
pub fn fresh_name(sdfg: &Sdfg, base: &str) -> String {
    if !sdfg.arrays.contains_key(base) && !sdfg.symbols.contains_key(base) {
        return base.to_string();
    }
    (1..)
        .map(|i| format!("{base}_{i}"))
        .find(|n| !sdfg.arrays.contains_key(n) && !sdfg.symbols.contains_key(n))
        .expect("an unused name exists")
}

/// A copy of a map body with the parameters `from` renamed to `to` (position by
/// position), to merge it into a map whose parameters are `to`.
pub fn renamed_body(body: &Dataflow, from: &[String], to: &[String]) -> Dataflow {
    let mut b = body.clone();
    let renames: BTreeMap<String, SymExpr> = from
        .iter()
        .zip(to)
        .filter(|(q, p)| q != p)
        .map(|(q, p)| (q.clone(), SymExpr::sym(p)))
        .collect();
    if !renames.is_empty() {
        substitute_params(&mut b, &renames);
    }
    b
}

/// The in-edge sources and out-edge destinations of a state node, by container (the
/// first of each).
pub fn neighbours(
    df: &Dataflow,
    n: NodeId,
) -> (BTreeMap<String, NodeId>, BTreeMap<String, NodeId>) {
    let mut src = BTreeMap::new();
    let mut dst = BTreeMap::new();
    for e in df.in_edges(n) {
        src.entry(df.edge(e).memlet.data.clone())
            .or_insert(df.endpoints(e).0);
    }
    for e in df.out_edges(n) {
        dst.entry(df.edge(e).memlet.data.clone())
            .or_insert(df.endpoints(e).1);
    }
    (src, dst)
}

/// Puts `scope` in place of map node `keep`, removes the nodes `gone` (the maps merged
/// into it, a transient that disappeared), reconnects `keep` from `ends` = (sources,
/// dests) as [`neighbours`] gives them ([`connect_map`]) and drops access nodes left
/// without edges. Returns true when access nodes were added.
pub fn replace_map(
    arrays: &(impl sdflow_ir::Descriptors + ?Sized),
    df: &mut Dataflow,
    keep: NodeId,
    scope: sdflow_ir::MapScope,
    gone: &[NodeId],
    ends: (&BTreeMap<String, NodeId>, &BTreeMap<String, NodeId>),
    memo: &mut BoundaryMemo,
) -> bool {
    let (sources, dests) = ends;
    df.graph[keep] = Node::Map(scope);
    for &n in gone {
        df.graph.remove_node(n);
    }
    let touched: Vec<NodeId> = sources.values().chain(dests.values()).copied().collect();
    let created = connect_map(arrays, df, keep, sources, dests, memo);
    remove_isolated(df, &touched);
    created
}

/// Dimension `d` moved by `by`: an index or a range's ends shifted, an indirect
/// dimension's offset added to (the element a copy or a caller sees at `by` further on).
pub fn shift_dim(d: &Dim, by: &SymExpr) -> Dim {
    match d {
        Dim::Index(x) => Dim::Index(x.add(by).simplify()),
        Dim::Range { start, end, step } => Dim::Range {
            start: start.add(by).simplify(),
            end: end.add(by).simplify(),
            step: step.clone(),
        },
        Dim::Indirect {
            table,
            index,
            offset,
        } => Dim::Indirect {
            table: table.clone(),
            index: index.clone(),
            offset: offset.add(by).simplify(),
        },
    }
}

/// True when `s` covers the whole of a container of this shape (`0:n` in every
/// dimension with step 1, or the empty subset, which means the whole container).
pub fn is_full(s: &Subset, shape: &[SymExpr]) -> bool {
    s.0.is_empty()
        || (s.rank() == shape.len()
            && s.0.iter().zip(shape).all(|(d, n)| {
                matches!(d, Dim::Range { start, end, step }
                    if start.as_int() == Some(0)
                        && step.as_int() == Some(1)
                        && same_extent(end, n))
            }))
}

/// True when a range of `size` indices covers an extent of `extent`: equal after
/// simplification, where an extent `max(0, e)` (GT4Py's transient shapes) matches a size
/// `e` (a range whose end is below its start covers the empty extent).
pub fn same_extent(size: &SymExpr, extent: &SymExpr) -> bool {
    let strip = |e: &SymExpr| {
        let e = e.simplify();
        match &e {
            SymExpr::Bin(sdflow_ir::SymOp::Max, a, b) if a.as_int() == Some(0) => b.simplify(),
            SymExpr::Bin(sdflow_ir::SymOp::Max, a, b) if b.as_int() == Some(0) => a.simplify(),
            _ => e,
        }
    };
    let (extent, size) = (strip(extent), size.simplify());
    // `max(a, b, c) - max(a, b)` (how GT4Py writes the size of a piece clipped to a
    // domain) is `max(0, c - max(a, b))`: when the arguments of the subtracted max are
    // among those of the first, the rest of the first's arguments minus the subtracted
    // term, clamped at 0.
    let clipped = || {
        use sdflow_ir::SymOp::{Add, Max, Mul, Sub};
        let negated = |e: &SymExpr| match e {
            SymExpr::Neg(y) => Some((**y).clone()),
            SymExpr::Bin(Mul, c, y) if c.as_int() == Some(-1) => Some((**y).clone()),
            SymExpr::Bin(Mul, y, c) if c.as_int() == Some(-1) => Some((**y).clone()),
            _ => None,
        };
        let (x, y) = match &size {
            SymExpr::Bin(Sub, x, y) => ((**x).clone(), (**y).clone()),
            SymExpr::Bin(Add, x, n) if negated(n).is_some() => ((**x).clone(), negated(n)?),
            SymExpr::Bin(Add, n, x) if negated(n).is_some() => ((**x).clone(), negated(n)?),
            _ => return None,
        };
        fn args(e: &SymExpr, out: &mut Vec<SymExpr>) {
            match e {
                SymExpr::Bin(Max, a, b) => {
                    args(a, out);
                    args(b, out);
                }
                _ => out.push(e.simplify()),
            }
        }
        let (mut all, mut sub) = (Vec::new(), Vec::new());
        args(&x, &mut all);
        args(&y, &mut sub);
        let mut rest = all.clone();
        for a in &sub {
            let i = rest.iter().position(|r| r == a)?;
            rest.remove(i);
        }
        let first = rest.first()?.clone();
        let rest = rest[1..].iter().fold(first, |m, r| SymExpr::max(&m, r));
        Some(rest.sub(&y))
    };
    strip(&size) == extent || clipped().is_some_and(|d| strip(&d) == extent)
}

/// True when a map inside `df` (at any depth) binds one of `names` as a parameter:
/// renaming a body's parameters to `names` would then be captured by that inner map.
pub fn binds_any(df: &Dataflow, names: &[String]) -> bool {
    df.node_ids().into_iter().any(|n| match df.node(n) {
        Node::Map(m) => m.params.iter().any(|p| names.contains(p)) || binds_any(&m.body, names),
        _ => false,
    })
}

/// True when some write of `data` by node `n` of `df` carries a write-conflict
/// resolution anywhere on its path: on `n`'s out-edge, or on an edge inside `n`'s map
/// body (at any depth). Validation lets the resolution sit on the body's edge alone (as
/// DaCe writes it), and the body's edge is what runs, so such a write combines with the
/// old value and is not a plain write.
pub fn wcr_on_path(df: &Dataflow, n: NodeId, data: &str) -> bool {
    let outer = df.out_edges(n).into_iter().any(|e| {
        df.edge(e).memlet.wcr.is_some() && df.node(df.endpoints(e).1).as_access() == Some(data)
    });
    outer || matches!(df.node(n), Node::Map(m) if body_writes_with_wcr(&m.body, data))
}

fn body_writes_with_wcr(body: &Dataflow, data: &str) -> bool {
    body.edge_ids().into_iter().any(|e| {
        let m = &body.edge(e).memlet;
        m.wcr.is_some() && body.node(body.endpoints(e).1).as_access() == Some(data)
    }) || body.node_ids().into_iter().any(|x| match body.node(x) {
        Node::Map(m) => body_writes_with_wcr(&m.body, data),
        _ => false,
    })
}

/// True when node `n` of `df`, each time it runs, writes every element of container
/// `data` (of shape `shape`) with a plain write — what its body actually does over its
/// ranges, not what its (possibly over-approximating) summary memlet says:
///
/// - a copy from an access node whose destination subset is the whole container;
/// - a tasklet whose memlet is the whole container;
/// - a map whose body (without nested maps) has a tasklet writing `data[p_k + c_k, …]`,
///   one distinct parameter per dimension, whose parameter ranges (step 1) shifted by
///   `c_k` are exactly `0:shape_k`.
///
/// No write of `data` by `n` may carry a write-conflict resolution ([`wcr_on_path`]).
/// Nested SDFGs and library nodes are never known to write whole.
pub fn writes_whole(df: &Dataflow, n: NodeId, data: &str, shape: &[SymExpr]) -> bool {
    if wcr_on_path(df, n, data) {
        return false;
    }
    let outs: Vec<_> = df
        .out_edges(n)
        .into_iter()
        .filter(|&e| df.node(df.endpoints(e).1).as_access() == Some(data))
        .collect();
    if outs.is_empty() {
        return false;
    }
    match df.node(n) {
        Node::Access(_) => outs.iter().any(|&e| {
            // A copy's memlet names either end; `other_subset` is the other end's.
            let m = &df.edge(e).memlet;
            match &m.other_subset {
                Some(o) if m.data != data => is_full(o, shape),
                _ => is_full(&m.subset, shape),
            }
        }),
        Node::Tasklet(_) => outs
            .iter()
            .any(|&e| is_full(&df.edge(e).memlet.subset, shape)),
        Node::Map(m) => map_writes_whole(m, data, shape),
        _ => false,
    }
}

fn map_writes_whole(m: &sdflow_ir::MapScope, data: &str, shape: &[SymExpr]) -> bool {
    map_written_boxes(m, data, shape.len()).iter().any(|b| {
        b.iter()
            .zip(shape)
            .all(|((lo, hi), extent)| lo.simplify().as_int() == Some(0) && same_extent(hi, extent))
    })
}

/// Whether map `m` writes every element of `data` (of extents `shape`) through a nested
/// SDFG its body calls at every point, as GT4Py's vertical scans do (a column `t[i, 0:K]`
/// at each horizontal point): the body's only write of `data` is that call's out-edge,
/// without a write-conflict resolution, whose subset is `p + c` in one distinct map
/// parameter (step 1) or a range free of them in each dimension, together exactly
/// `0:shape`; the call reads nothing of `data` (a connector written whole starts from no
/// caller value); its connector's array has the subset's extents under the symbol
/// mapping; and the callee writes every element of that array ([`callee_writes_whole`]).
/// The copy-out of a call writes its whole window, so the map then writes `data` whole
/// with values the callee computed, whatever `data` held before.
pub fn map_callee_writes_whole(m: &sdflow_ir::MapScope, data: &str, shape: &[SymExpr]) -> bool {
    let body = &m.body;
    let writers: Vec<EdgeId> = body
        .edge_ids()
        .into_iter()
        .filter(|&e| body.node(body.endpoints(e).1).as_access() == Some(data))
        .collect();
    let [e] = writers.as_slice() else {
        return false;
    };
    let (n, _) = body.endpoints(*e);
    let Node::Nested(ns) = body.node(n) else {
        return false;
    };
    let edge = body.edge(*e);
    let (Some(conn), None) = (edge.src_conn.as_deref(), edge.memlet.wcr) else {
        return false;
    };
    let nested_maps_write = body.node_ids().into_iter().any(|x| match body.node(x) {
        Node::Map(inner) => inner
            .body
            .node_ids()
            .into_iter()
            .any(|y| inner.body.node(y).as_access() == Some(data)),
        _ => false,
    });
    let reads_data = body.in_edges(n).into_iter().any(|i| {
        body.edge(i).memlet.data == data || body.edge(i).dst_conn.as_deref() == Some(conn)
    });
    if nested_maps_write || reads_data || edge.memlet.subset.rank() != shape.len() {
        return false;
    }
    let Some(DataDesc::Array(inner)) = ns.sdfg.arrays.get(conn) else {
        return false;
    };
    let params: Vec<&str> = m.params.iter().map(String::as_str).collect();
    let mut used = BTreeSet::new();
    let mut extents = Vec::new();
    for (d, extent) in edge.memlet.subset.0.iter().zip(shape) {
        let (lo, hi) = match d {
            Dim::Index(x) => {
                let Some((coeffs, c)) = x.affine_in(&params) else {
                    return false;
                };
                let Some((k, _)) = m
                    .params
                    .iter()
                    .enumerate()
                    .find(|(_, p)| coeffs.len() == 1 && coeffs.get(*p) == Some(&1))
                else {
                    return false;
                };
                let r = &m.ranges[k];
                if !used.insert(k) || r.step.as_int() != Some(1) {
                    return false;
                }
                (r.start.add(&c), r.end.add(&c))
            }
            Dim::Range { start, end, step }
                if step.as_int() == Some(1)
                    && !params.iter().any(|p| start.mentions(p) || end.mentions(p)) =>
            {
                extents.push(end.sub(start));
                (start.clone(), end.clone())
            }
            _ => return false,
        };
        if lo.simplify().as_int() != Some(0) || !same_extent(&hi, extent) {
            return false;
        }
    }
    let count = |e: &SymExpr| SymExpr::max(&SymExpr::Int(0), e);
    let mapped = |e: &SymExpr| e.substitute(&ns.symbol_mapping).simplify();
    extents.len() == inner.shape.len()
        && extents
            .iter()
            .zip(&inner.shape)
            .all(|(x, n)| count(x) == count(&mapped(n)))
        && callee_writes_whole(&ns.sdfg, conn)
}

/// Whether SDFG `sdfg` writes every element of its one-dimensional array `conn` whenever
/// it runs to its end: a counted loop of its top-level sequence (under no condition) steps
/// its variable `v` by one from `init` over exactly the values `0 - c` to `n - 1 - c` (`v <
/// e` or `v <= e` counting up, `v >= e` or `v > e` counting down; `init` and `e` free of
/// symbols the SDFG assigns), and a state of the loop body's top-level sequence writes
/// `conn[v + c]` from a tasklet (which writes its outputs every time it runs) or by a
/// copy of one element, without a write-conflict resolution; and nothing in it reads
/// `conn` (its elements start as the caller's). GT4Py's scans write their column so.
pub fn callee_writes_whole(sdfg: &Sdfg, conn: &str) -> bool {
    let Some(DataDesc::Array(a)) = sdfg.arrays.get(conn) else {
        return false;
    };
    let [n] = a.shape.as_slice() else {
        return false;
    };
    // The array starts as the caller's copy: a callee that reads it could see what the
    // caller's container held, which the rename changes.
    fn reads(df: &Dataflow, conn: &str) -> bool {
        df.node_ids().into_iter().any(|x| match df.node(x) {
            Node::Access(a) => a == conn && df.out_degree(x) > 0,
            Node::Map(m) => reads(&m.body, conn),
            _ => false,
        })
    }
    if sdfg.states.iter().any(|st| reads(&st.graph, conn)) {
        return false;
    }
    let assigned = sdfg.loop_and_assigned_symbols();
    let top: &[Block] = match &sdfg.body {
        Block::Seq(items) => items,
        other => std::slice::from_ref(other),
    };
    top.iter().any(|b| {
        let Block::Loop(l) = b else { return false };
        let v = l.var.as_str();
        let step = l.update.sub(&SymExpr::sym(v)).simplify().as_int();
        let SymExpr::Bin(op, x, e) = &l.cond else {
            return false;
        };
        let (op, e) = match (x.as_ref(), e.as_ref()) {
            (SymExpr::Sym(s), e) if &**s == v => (*op, e.clone()),
            _ => return false,
        };
        let free = l.init.free_symbols().into_iter().chain(e.free_symbols());
        if l.init.mentions(v)
            || e.mentions(v)
            || free.into_iter().any(|s| assigned.contains(s.as_str()))
        {
            return false;
        }
        let one = SymExpr::Int(1);
        // The first and the last value the loop gives `v`.
        let (first, last) = match (step, op) {
            (Some(1), SymOp::Lt) => (l.init.clone(), e.sub(&one)),
            (Some(1), SymOp::Le) => (l.init.clone(), e),
            (Some(-1), SymOp::Ge) => (e, l.init.clone()),
            (Some(-1), SymOp::Gt) => (e.add(&one), l.init.clone()),
            _ => return false,
        };
        let items: &[Block] = match l.body.as_ref() {
            Block::Seq(items) => items,
            other => std::slice::from_ref(other),
        };
        items.iter().any(|b| {
            let Block::State(id) = b else { return false };
            let Some(st) = sdfg.states.get(id.index()) else {
                return false;
            };
            let g = &st.graph;
            g.edge_ids().into_iter().any(|w| {
                let (src, dst) = g.endpoints(w);
                let m = &g.edge(w).memlet;
                // A tasklet's write, or a copy of one element (a scalar the iteration
                // computed), whose memlet may name either end.
                let at = match g.node(src) {
                    Node::Tasklet(_) if m.data == conn => &m.subset,
                    Node::Access(x) if m.data == conn && x != conn => &m.subset,
                    Node::Access(x) if m.data == *x && x != conn => match &m.other_subset {
                        Some(o) if m.subset.0.is_empty() || m.subset.is_element() => o,
                        _ => return false,
                    },
                    _ => return false,
                };
                let [Dim::Index(at)] = at.0.as_slice() else {
                    return false;
                };
                let Some((coeffs, c)) = at.affine_in(&[v]) else {
                    return false;
                };
                g.node(dst).as_access() == Some(conn)
                    && m.wcr.is_none()
                    && coeffs.len() == 1
                    && coeffs.get(v) == Some(&1)
                    && first.add(&c).simplify().as_int() == Some(0)
                    && same_extent(&last.add(&c).add(&one), n)
            })
        })
    })
}

/// The boxes (`[lo, hi)` per dimension, of a container of rank `rank`) map `m` writes
/// every element of, each time it runs: one per write of its body (without nested maps,
/// which must not write `data`) by a tasklet, or a copy of one element, at
/// `data[p_k + c_k, …]`, one distinct parameter per dimension with step 1 — the box is
/// the parameters' ranges moved by `c_k`. Empty when a nested map or SDFG writes `data`
/// or no write has that form. What the body does, not the map's summary memlet (which
/// may over-approximate).
pub fn map_written_boxes(
    m: &sdflow_ir::MapScope,
    data: &str,
    rank: usize,
) -> Vec<Vec<(SymExpr, SymExpr)>> {
    let body = &m.body;
    // Inner maps (a neighbour loop) may be there, as long as they do not write `data`.
    fn inner_writes(df: &Dataflow, data: &str) -> bool {
        df.node_ids().into_iter().any(|x| match df.node(x) {
            Node::Map(m) => {
                let b = &m.body;
                b.node_ids()
                    .into_iter()
                    .any(|y| b.node(y).as_access() == Some(data) && b.in_degree(y) > 0)
                    || inner_writes(b, data)
            }
            // A nested SDFG writes through its out-edges only.
            Node::Nested(_) => df
                .out_edges(x)
                .into_iter()
                .any(|e| df.node(df.endpoints(e).1).as_access() == Some(data)),
            _ => false,
        })
    }
    if inner_writes(body, data) {
        return Vec::new();
    }
    let params: Vec<&str> = m.params.iter().map(String::as_str).collect();
    body.edge_ids()
        .into_iter()
        .filter_map(|e| {
            let (src, dst) = body.endpoints(e);
            let memlet = &body.edge(e).memlet;
            // A tasklet's write, or a copy of one element (a reduction's result) into
            // `data`, whose memlet may name either end.
            let subset = match body.node(src) {
                Node::Tasklet(_) => &memlet.subset,
                Node::Access(_) if memlet.data == data => &memlet.subset,
                Node::Access(_) => match &memlet.other_subset {
                    Some(o) if memlet.subset.is_element() => o,
                    _ => return None,
                },
                _ => return None,
            };
            if body.node(dst).as_access() != Some(data) || subset.rank() != rank {
                return None;
            }
            let mut used = BTreeSet::new();
            subset
                .0
                .iter()
                .map(|d| {
                    // `p + c`, `c` free of parameters.
                    let Dim::Index(x) = d else { return None };
                    let (coeffs, c) = x.affine_in(&params)?;
                    let (k, _) = m
                        .params
                        .iter()
                        .enumerate()
                        .find(|(_, p)| coeffs.len() == 1 && coeffs.get(*p) == Some(&1))?;
                    let r = &m.ranges[k];
                    (used.insert(k) && r.step.as_int() == Some(1))
                        .then(|| (r.start.add(&c), r.end.add(&c)))
                })
                .collect::<Option<Vec<_>>>()
        })
        .collect()
}
