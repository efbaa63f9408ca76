//! Local unrolling: the neighbour loops GT4Py lowers a reduction over a local dimension
//! to become straight-line code in the body of the map over the grid, so that the
//! backend's loop over the grid's innermost dimension has a body without loops (the C
//! compiler vectorizes it; a GPU thread keeps the values in registers).
//!
//! ```text
//! map (e, k):                              map (e, k):
//!   map l in 0:2:  t[l] = f(u[c[e, l], k])   t_0 = f(u[c[e, 0], k])
//!   s = reduce(max, t[0:2])            →     t_1 = f(u[c[e, 1], k])
//!   out[e, k] = g(s)                         s = max(t_0, t_1)
//!                                            out[e, k] = g(s)
//! ```
//!
//! Three rewrites, each applied wherever it holds, in every dataflow graph of the program
//! (map bodies at any depth, and the programs of nested SDFG nodes):
//!
//! 1. **Unroll** a map inside a map body whose ranges are constants with at most
//!    [`MAX_POINTS`] points in all, whose body holds only tasklets and access nodes (no
//!    map, library node or nested SDFG), whose tasklet code does not read its parameters
//!    as values, and which resolves no write conflict: one copy of the body per point,
//!    in row-major order, with the parameters replaced by the point's values. The copies
//!    read from and write to the access nodes the map node was connected to; containers
//!    only the body uses get a name per copy, so the copies stay independent.
//! 2. **Reduce to a tasklet**: a `Reduce` of every axis of a subset of constant sizes
//!    with at most [`MAX_POINTS`] elements (at least two, or one with an identity), from
//!    `f64` to `f64`, becomes one tasklet folding the elements in row-major order from
//!    the identity (or the first element): the interpreter's order and rounding.
//! 3. **Scalarize** a transient array of constant shape with at most [`MAX_POINTS`]
//!    elements that every memlet of the program reads or writes one element at a time,
//!    at constant indices: one scalar per element. Copies of constant sizes from or into
//!    such an array are split into one copy per element first.
//!
//! Legality: the unrolled copies do what the map's points did, in the same order where
//! an order matters (no write-conflict resolution, no container read and written by the
//! body that the rest of the graph also uses); the tasklet's fold is the reduction's; a
//! scalar per element holds what the element held. Cost: the code grows by at most
//! [`MAX_POINTS`] copies of a loop body without loops, and every loop and index computed
//! per point of the neighbour loop is gone; no arithmetic is added or repeated.
//!
//! Why one file of this size: the rule, its legality and the rewrite of reads through
//! the unrolled index share one description of the neighbour loop.

use std::collections::{BTreeMap, BTreeSet};

use sdflow_ir::{
    BinOp, DType, DataDesc, Dataflow, Dim, Expr, LibraryNode, MapScope, MathFn, Memlet, Node,
    NodeId, Sdfg, Stmt, Subset, SymExpr, Tasklet, Value, Wcr,
};

use crate::pass::{Changes, Pass};
use crate::pattern::{
    code_mentions, control_names, fresh_name, move_in_edges, move_into, move_out_edges,
    rename_data, substitute_params,
};

/// The most points a map, reduction or array may have to be unrolled or scalarized.
pub const MAX_POINTS: i64 = 12;

/// See the module documentation.
pub struct LocalUnroll;

impl Pass for LocalUnroll {
    fn name(&self) -> &'static str {
        "local_unroll"
    }

    fn run(&self, sdfg: &mut Sdfg) -> Changes {
        let mut ch = Changes::default();
        run_on(sdfg, &mut ch);
        ch
    }
}

fn run_on(sdfg: &mut Sdfg, ch: &mut Changes) {
    // Nested programs first, each on its own containers.
    for s in sdfg.body.states() {
        let graph = &mut sdfg.states[s.index()].graph;
        for_each_nested(graph, &mut |inner| run_on(inner, ch));
    }
    // Most programs have no map or reduction inside a map body: nothing to count then.
    let work = sdfg.body.states().into_iter().any(|s| {
        sdfg.state(s)
            .is_some_and(|st| bodies_hold_loops(&st.graph, false))
    });
    if !work {
        scalarize(sdfg, ch);
        return;
    }
    let mut mentions = Mentions::of(sdfg);
    for s in sdfg.body.states() {
        let mut graph = std::mem::take(&mut sdfg.states[s.index()].graph);
        unroll_in_bodies(sdfg, &mut graph, &mut mentions, ch);
        reduce_to_tasklets(sdfg, &mut graph, ch);
        sdfg.states[s.index()].graph = graph;
    }
    scalarize(sdfg, ch);
}

/// Whether a map body of `df` (`in_body`: `df` is one) holds a map or a library node.
fn bodies_hold_loops(df: &Dataflow, in_body: bool) -> bool {
    df.node_ids().into_iter().any(|n| match df.node(n) {
        Node::Map(m) => in_body || bodies_hold_loops(&m.body, true),
        Node::Library(_) => in_body,
        _ => false,
    })
}

/// Calls `f` on the program of every nested SDFG node of `df`, at any depth of maps.
fn for_each_nested(df: &mut Dataflow, f: &mut dyn FnMut(&mut Sdfg)) {
    for n in df.node_ids() {
        match &mut df.graph[n] {
            Node::Map(m) => for_each_nested(&mut m.body, f),
            Node::Nested(ns) => f(&mut ns.sdfg),
            _ => {}
        }
    }
}

/// How many times each container is mentioned in the program (access nodes, memlets,
/// index tables, the control flow), and which mentions lie inside a given graph.
#[derive(Default)]
struct Mentions(BTreeMap<String, usize>);

impl Mentions {
    fn of(sdfg: &Sdfg) -> Mentions {
        let mut m = Mentions::default();
        for s in sdfg.body.states() {
            if let Some(st) = sdfg.state(s) {
                m.count(&st.graph, 1);
            }
        }
        for name in control_names(&sdfg.body) {
            *m.0.entry(name).or_default() += 1;
        }
        m
    }

    /// Adds (`sign` 1) or removes (`sign` -1) the mentions of `df`, recursively.
    fn count(&mut self, df: &Dataflow, sign: isize) {
        for n in df.node_ids() {
            if let Node::Map(m) = df.node(n) {
                self.count(&m.body, sign);
            }
        }
        let mut add = |name: &str| {
            let c = self.0.entry(name.to_string()).or_default();
            *c = c.saturating_add_signed(sign);
        };
        for n in df.node_ids() {
            if let Node::Access(d) = df.node(n) {
                add(d);
            }
        }
        for e in df.edge_ids() {
            let m = &df.edge(e).memlet;
            add(&m.data);
            for t in m.subset.tables() {
                add(t);
            }
            if let Some(o) = &m.other_subset {
                for t in o.tables() {
                    add(t);
                }
            }
        }
    }

    /// Containers every mention of which lies in `df`.
    fn only_in(&self, df: &Dataflow) -> BTreeSet<String> {
        let mut here = Mentions::default();
        here.count(df, 1);
        here.0
            .into_iter()
            .filter(|(k, v)| self.0.get(k) == Some(v))
            .map(|(k, _)| k)
            .collect()
    }
}

/// The constant value of `e`, simplified.
fn constant(e: &SymExpr) -> Option<i64> {
    e.simplify().as_int()
}

/// The points of constant ranges, row-major, when there are at most [`MAX_POINTS`].
fn constant_points(m: &MapScope) -> Option<Vec<Vec<i64>>> {
    let mut axes: Vec<Vec<i64>> = Vec::new();
    let mut total: i64 = 1;
    for r in &m.ranges {
        let (s, e, t) = (constant(&r.start)?, constant(&r.end)?, constant(&r.step)?);
        if t <= 0 {
            return None;
        }
        let vals: Vec<i64> = (s..e).step_by(usize::try_from(t).ok()?).collect();
        total = total.checked_mul(vals.len() as i64)?;
        if total > MAX_POINTS {
            return None;
        }
        axes.push(vals);
    }
    Some(row_major(&axes))
}

/// Every combination of one value per axis, row-major (the last axis fastest).
fn row_major<T: Clone>(axes: &[Vec<T>]) -> Vec<Vec<T>> {
    let mut out: Vec<Vec<T>> = vec![Vec::new()];
    for values in axes {
        out = out
            .into_iter()
            .flat_map(|p| {
                values.iter().map(move |v| {
                    let mut q = p.clone();
                    q.push(v.clone());
                    q
                })
            })
            .collect();
    }
    out
}

/// Unrolls every unrollable map inside the map bodies of `df` (a state's graph), deepest
/// first.
fn unroll_in_bodies(sdfg: &mut Sdfg, df: &mut Dataflow, mentions: &mut Mentions, ch: &mut Changes) {
    for n in df.node_ids() {
        if let Node::Map(m) = &mut df.graph[n] {
            let mut body = std::mem::take(&mut m.body);
            unroll_in_bodies(sdfg, &mut body, mentions, ch);
            unroll_here(sdfg, &mut body, mentions, ch);
            if let Node::Map(m) = &mut df.graph[n] {
                m.body = body;
            }
        }
    }
}

/// Unrolls the unrollable maps of the map body `df`.
fn unroll_here(sdfg: &mut Sdfg, df: &mut Dataflow, mentions: &mut Mentions, ch: &mut Changes) {
    for n in df.node_ids() {
        let Node::Map(m) = df.node(n) else { continue };
        let Some(points) = unrollable(df, n, m) else {
            continue;
        };
        let m = m.clone();
        let local = mentions.only_in(&m.body);
        let Some(bounds) = boundary(sdfg, df, n, &m, &local) else {
            continue;
        };
        mentions.count(df, -1);
        unroll(sdfg, df, n, &m, &points, &local, bounds);
        mentions.count(df, 1);
        ch.add("local_maps_unrolled", 1);
    }
}

/// The points of map node `n` when it can be unrolled (see the module documentation).
fn unrollable(df: &Dataflow, n: NodeId, m: &MapScope) -> Option<Vec<Vec<i64>>> {
    let points = constant_points(m)?;
    if points.is_empty() {
        return None;
    }
    let plain = m
        .body
        .node_ids()
        .into_iter()
        .all(|x| matches!(m.body.node(x), Node::Access(_) | Node::Tasklet(_)));
    let params: BTreeSet<String> = m.params.iter().cloned().collect();
    let wcr = m
        .body
        .edge_ids()
        .into_iter()
        .any(|e| m.body.edge(e).memlet.wcr.is_some())
        || df
            .in_edges(n)
            .into_iter()
            .chain(df.out_edges(n))
            .any(|e| df.edge(e).memlet.wcr.is_some());
    (plain && !wcr && !code_mentions(&m.body, &params)).then_some(points)
}

/// The access nodes the copies of the body of map node `n` read from (`.0`) and write
/// to (`.1`), by container: those of the map node's edges; for a container private to
/// map bodies (a transient scalar or a `local` array, which map edges do not carry), the
/// one access node of the surrounding graph that writes it (for a read) or reads it
/// without writing (for a write), or a new one for a write nothing around reads. `None`
/// when some container the body shares with the rest of the program is both read and
/// written there, has no such node, or is a table the surrounding graph writes.
type Boundary = (BTreeMap<String, NodeId>, BTreeMap<String, Option<NodeId>>);

fn boundary(
    sdfg: &Sdfg,
    df: &Dataflow,
    n: NodeId,
    m: &MapScope,
    local: &BTreeSet<String>,
) -> Option<Boundary> {
    let mut sources: BTreeMap<String, NodeId> = BTreeMap::new();
    for e in df.in_edges(n) {
        sources
            .entry(df.edge(e).memlet.data.clone())
            .or_insert(df.endpoints(e).0);
    }
    let mut dests: BTreeMap<String, Option<NodeId>> = BTreeMap::new();
    for e in df.out_edges(n) {
        dests
            .entry(df.edge(e).memlet.data.clone())
            .or_insert(Some(df.endpoints(e).1));
    }
    let (mut read, mut written) = (BTreeSet::new(), BTreeSet::new());
    for x in m.body.node_ids() {
        let Some(d) = m.body.node(x).as_access() else {
            continue;
        };
        if local.contains(d) {
            continue;
        }
        if m.body.out_degree(x) > 0 {
            read.insert(d.to_string());
        }
        if m.body.in_degree(x) > 0 {
            written.insert(d.to_string());
        }
    }
    if !read.is_disjoint(&written) {
        return None;
    }
    let private = |d: &str| sdfg.arrays.get(d).is_some_and(DataDesc::is_body_local);
    let around = |d: &str, written: bool| -> Vec<NodeId> {
        df.node_ids()
            .into_iter()
            .filter(|&x| x != n && df.node(x).as_access() == Some(d))
            .filter(|&x| (df.in_degree(x) > 0) == written)
            .collect()
    };
    for d in &read {
        if sources.contains_key(d) {
            continue;
        }
        match around(d, true).as_slice() {
            [w] if private(d) => {
                sources.insert(d.clone(), *w);
            }
            _ => return None,
        }
    }
    for d in &written {
        if dests.contains_key(d) {
            continue;
        }
        if !private(d) {
            return None;
        }
        match around(d, false).as_slice() {
            [r] => {
                dests.insert(d.clone(), Some(*r));
            }
            [] if around(d, true).is_empty() => {
                dests.insert(d.clone(), None);
            }
            _ => return None,
        }
    }
    // Tables are read where the copies run: nothing in the surrounding graph may write
    // them.
    let mut tables = BTreeSet::new();
    for e in m.body.edge_ids() {
        tables.extend(m.body.edge(e).memlet.subset.tables());
    }
    let tables_ok = tables
        .iter()
        .all(|t| local.contains(*t) || (!written.contains(*t) && around(t, true).is_empty()));
    tables_ok.then_some((sources, dests))
}

fn unroll(
    sdfg: &mut Sdfg,
    df: &mut Dataflow,
    n: NodeId,
    m: &MapScope,
    points: &[Vec<i64>],
    local: &BTreeSet<String>,
    (sources, mut dests): Boundary,
) {
    // A write nothing around reads goes to one new access node for all copies.
    for (d, node) in &mut dests {
        if node.is_none() {
            *node = Some(df.add_access(d));
        }
    }
    // Body containers are renamed per copy only where they are the body's own.
    let own: Vec<String> = {
        let mut names = BTreeSet::new();
        for x in m.body.node_ids() {
            if let Some(d) = m.body.node(x).as_access()
                && local.contains(d)
            {
                names.insert(d.to_string());
            }
        }
        names.into_iter().collect()
    };
    for (k, point) in points.iter().enumerate() {
        let mut body = m.body.clone();
        let values: BTreeMap<String, SymExpr> = m
            .params
            .iter()
            .zip(point)
            .map(|(p, v)| (p.clone(), SymExpr::Int(*v)))
            .collect();
        substitute_params(&mut body, &values);
        if k > 0 {
            for name in &own {
                let Some(desc) = sdfg.arrays.get(name).cloned() else {
                    continue;
                };
                let fresh = fresh_name(sdfg, &format!("{name}_u{k}"));
                sdfg.arrays.insert(fresh.clone(), desc);
                rename_data(&mut body, name, &fresh);
            }
        }
        let ids = move_into(df, body);
        for &x in ids.values() {
            let Some(d) = df.node(x).as_access().map(str::to_string) else {
                continue;
            };
            if local.contains(&d) {
                continue;
            }
            if df.in_degree(x) == 0
                && let Some(&src) = sources.get(&d)
            {
                move_out_edges(df, x, src);
                df.graph.remove_node(x);
            } else if df.out_degree(x) == 0
                && let Some(&Some(dst)) = dests.get(&d)
            {
                move_in_edges(df, x, dst);
                df.graph.remove_node(x);
            }
        }
    }
    df.graph.remove_node(n);
    // A source only the map read is left without edges.
    for (_, x) in sources {
        if df.graph.contains_node(x) && df.in_degree(x) == 0 && df.out_degree(x) == 0 {
            df.graph.remove_node(x);
        }
    }
}

/// The elements of `subset` (row-major) when every dimension has a constant size and
/// there are at most `limit` elements: each as the subset of one element.
fn elements(subset: &Subset, limit: i64) -> Option<Vec<Subset>> {
    let mut per_dim: Vec<Vec<Dim>> = Vec::new();
    let mut total: i64 = 1;
    for d in &subset.0 {
        let options = match d {
            Dim::Index(_) | Dim::Indirect { .. } => vec![d.clone()],
            Dim::Range { start, step, .. } => {
                let size = constant(&d.size())?.max(0);
                (0..size)
                    .map(|i| Dim::Index(start.add(&step.mul(&SymExpr::Int(i))).simplify()))
                    .collect()
            }
        };
        total = total.checked_mul(options.len() as i64)?;
        if total > limit {
            return None;
        }
        per_dim.push(options);
    }
    Some(row_major(&per_dim).into_iter().map(Subset).collect())
}

/// Replaces the small full reductions of `df` and its map bodies by tasklets.
fn reduce_to_tasklets(sdfg: &Sdfg, df: &mut Dataflow, ch: &mut Changes) {
    for n in df.node_ids() {
        if let Node::Map(m) = &mut df.graph[n] {
            reduce_to_tasklets(sdfg, &mut m.body, ch);
        }
    }
    for n in df.node_ids() {
        let Node::Library(LibraryNode::Reduce(r)) = df.node(n) else {
            continue;
        };
        let r = r.clone();
        let ins = df.in_edges(n);
        let outs = df.out_edges(n);
        let ([i], [o]) = (ins.as_slice(), outs.as_slice()) else {
            continue;
        };
        let (i, o) = (*i, *o);
        let (im, om) = (df.edge(i).memlet.clone(), df.edge(o).memlet.clone());
        let src = df.endpoints(i).0;
        let f64_data = |d: &str| sdfg.arrays.get(d).map(DataDesc::dtype) == Some(DType::F64);
        let full = r
            .axes
            .as_ref()
            .is_none_or(|a| (0..im.subset.rank()).all(|k| a.contains(&k)));
        let Some(elems) = elements(&im.subset, MAX_POINTS) else {
            continue;
        };
        let enough = elems.len() >= 2 || (r.identity.is_some() && !elems.is_empty());
        if df.node(src).as_access() != Some(im.data.as_str())
            || df.edge(i).dst_conn.as_deref() != Some("in")
            || df.edge(o).src_conn.as_deref() != Some("out")
            || im.other_subset.is_some()
            || im.wcr.is_some()
            || im.subset.0.is_empty()
            || !full
            || !enough
            || !f64_data(&im.data)
            || !f64_data(&om.data)
            || constant(&om.subset.volume()) != Some(1)
            || r.identity
                .is_some_and(|v| !matches!(v.cast(DType::F64), Value::F64(_)))
        {
            continue;
        }
        let combine = |a: Expr, b: Expr| match r.op {
            Wcr::Sum => Expr::bin(BinOp::Add, a, b),
            Wcr::Prod => Expr::bin(BinOp::Mul, a, b),
            Wcr::Min => Expr::Call(MathFn::Min, vec![a, b]),
            Wcr::Max => Expr::Call(MathFn::Max, vec![a, b]),
        };
        let mut acc = r.identity.map(|v| Expr::Const(v.cast(DType::F64)));
        let mut inputs = BTreeMap::new();
        for k in 0..elems.len() {
            let c = format!("c{k}");
            inputs.insert(c.clone(), DType::F64);
            acc = Some(match acc {
                None => Expr::var(&c),
                Some(a) => combine(a, Expr::var(&c)),
            });
        }
        let t = Tasklet {
            name: format!("reduce_{}", r.op.name()),
            inputs,
            outputs: BTreeMap::from([("o".to_string(), DType::F64)]),
            code: vec![Stmt {
                target: "o".to_string(),
                value: acc.expect("at least one element"),
            }],
        };
        let dst = df.endpoints(o).1;
        let tn = df.add_node(Node::Tasklet(t));
        for (k, e) in elems.into_iter().enumerate() {
            let c = format!("c{k}");
            df.add_edge(src, None, tn, Some(&c), Memlet::new(&im.data, e));
        }
        df.add_edge(tn, Some("o"), dst, None, om);
        df.graph.remove_node(n);
        ch.add("reductions_unrolled", 1);
    }
}

/// The constant indices of a one-element subset.
fn constant_element(s: &Subset) -> Option<Vec<i64>> {
    s.0.iter()
        .map(|d| match d {
            Dim::Index(e) => constant(e),
            Dim::Range { start, .. } if constant(&d.size()) == Some(1) => constant(start),
            _ => None,
        })
        .collect()
}

/// Small transient arrays of constant shape: their shape.
fn candidates(sdfg: &Sdfg) -> BTreeMap<String, Vec<i64>> {
    let control = control_names(&sdfg.body);
    sdfg.arrays
        .iter()
        .filter_map(|(name, d)| {
            let DataDesc::Array(a) = d else { return None };
            if !a.transient || control.contains(name) {
                return None;
            }
            let shape: Vec<i64> = a.shape.iter().map(constant).collect::<Option<_>>()?;
            let total = shape
                .iter()
                .try_fold(1i64, |acc, &n| acc.checked_mul(n.max(0)))?;
            (total <= MAX_POINTS && !shape.is_empty()).then(|| (name.clone(), shape))
        })
        .collect()
}

/// Splits the copies of constant sizes from or into a candidate into one copy per
/// element, in `df` and its map bodies.
fn split_copies(
    df: &mut Dataflow,
    arrays: &BTreeMap<String, DataDesc>,
    cands: &BTreeMap<String, Vec<i64>>,
) {
    for n in df.node_ids() {
        if let Node::Map(m) = &mut df.graph[n] {
            split_copies(&mut m.body, arrays, cands);
        }
    }
    let full = |d: &str| arrays.get(d).map(|x| Subset::full(x.shape()));
    for e in df.edge_ids() {
        let (a, b) = df.endpoints(e);
        let (Some(sa), Some(sb)) = (df.node(a).as_access(), df.node(b).as_access()) else {
            continue;
        };
        if !cands.contains_key(sa) && !cands.contains_key(sb) {
            continue;
        }
        let m = df.edge(e).memlet.clone();
        if m.data != sa || m.wcr.is_some() {
            continue;
        }
        // The codegen's reading of a copy's subsets: an empty one is the whole container.
        let src_sub = if m.subset.0.is_empty() {
            full(sa)
        } else {
            Some(m.subset.clone())
        };
        let dst_sub = match &m.other_subset {
            Some(o) if !o.0.is_empty() => Some(o.clone()),
            Some(_) => full(sb),
            None if m.subset.0.is_empty() => full(sb),
            None => Some(m.subset.clone()),
        };
        let (Some(src_sub), Some(dst_sub)) = (src_sub, dst_sub) else {
            continue;
        };
        let (Some(se), Some(de)) = (
            elements(&src_sub, MAX_POINTS),
            elements(&dst_sub, MAX_POINTS),
        ) else {
            continue;
        };
        if se.len() != de.len() || se.len() < 2 || !same_sizes(&src_sub, &dst_sub) {
            continue;
        }
        df.graph.remove_edge(e);
        for (s, d) in se.into_iter().zip(de) {
            df.add_edge(
                a,
                None,
                b,
                None,
                Memlet {
                    data: m.data.clone(),
                    subset: s,
                    other_subset: Some(d),
                    wcr: None,
                },
            );
        }
    }
}

/// Whether two subsets have the same sizes once the dimensions of size 1 are left out
/// (so that their row-major elements correspond).
fn same_sizes(a: &Subset, b: &Subset) -> bool {
    let sizes = |s: &Subset| -> Option<Vec<i64>> {
        s.0.iter()
            .map(|d| constant(&d.size()))
            .filter(|x| *x != Some(1))
            .collect()
    };
    matches!((sizes(a), sizes(b)), (Some(x), Some(y)) if x == y)
}

/// The element (constant indices) of `name` an edge into or out of an access node of
/// `name` moves, when it is one element at constant indices.
fn element_at_node(df: &Dataflow, e: sdflow_ir::EdgeId, name: &str) -> Option<Vec<i64>> {
    let m = &df.edge(e).memlet;
    if m.data == name {
        return (!m.subset.0.is_empty())
            .then(|| constant_element(&m.subset))
            .flatten();
    }
    // A copy into `name`: the destination subset.
    let (a, _) = df.endpoints(e);
    df.node(a).as_access()?;
    constant_element(m.other_subset.as_ref().unwrap_or(&m.subset))
}

/// Whether `name` can become one scalar per element: no state-level graph uses it (a
/// scalar in a map body is private to one iteration), and in the map bodies every
/// memlet moves one element at constant indices, no node but an access node of `name`
/// touches it, and every element an access node's out-edges read, its in-edges write
/// (each iteration reads what it wrote). The elements seen are added to `seen`.
fn scalar_uses(df: &Dataflow, name: &str, in_body: bool, seen: &mut BTreeSet<Vec<i64>>) -> bool {
    for n in df.node_ids() {
        if let Node::Map(m) = df.node(n)
            && !scalar_uses(&m.body, name, true, seen)
        {
            return false;
        }
    }
    for e in df.edge_ids() {
        let m = &df.edge(e).memlet;
        let (a, b) = df.endpoints(e);
        let at_node = df.node(a).as_access() == Some(name) || df.node(b).as_access() == Some(name);
        let tables = m.subset.tables().contains(&name)
            || m.other_subset
                .as_ref()
                .is_some_and(|o| o.tables().contains(&name));
        let self_copy =
            df.node(a).as_access() == Some(name) && df.node(b).as_access() == Some(name);
        let read_as_other = df.node(a).as_access() == Some(name) && m.data != name;
        if tables || self_copy || read_as_other || (m.data == name && !at_node) {
            return false;
        }
    }
    for n in df.node_ids() {
        if df.node(n).as_access() != Some(name) {
            continue;
        }
        if !in_body {
            return false;
        }
        let mut written = BTreeSet::new();
        for e in df.in_edges(n) {
            match element_at_node(df, e, name) {
                Some(ix) => {
                    written.insert(ix);
                }
                None => return false,
            }
        }
        for e in df.out_edges(n) {
            match element_at_node(df, e, name) {
                Some(ix) if written.contains(&ix) => {
                    seen.insert(ix);
                }
                _ => return false,
            }
        }
        seen.extend(written);
    }
    true
}

/// Replaces the references to `name` by the scalars of `names` (by index tuple): each
/// access node of `name` becomes one access node per element its edges touch.
fn replace_with_scalars(df: &mut Dataflow, name: &str, names: &BTreeMap<Vec<i64>, String>) {
    for n in df.node_ids() {
        if let Node::Map(m) = &mut df.graph[n] {
            replace_with_scalars(&mut m.body, name, names);
        }
    }
    for n in df.node_ids() {
        if df.node(n).as_access() != Some(name) {
            continue;
        }
        let mut split: BTreeMap<String, NodeId> = BTreeMap::new();
        let mut node_for = |df: &mut Dataflow, s: &str| {
            *split
                .entry(s.to_string())
                .or_insert_with(|| df.add_access(s))
        };
        for e in df.in_edges(n) {
            let (src, _) = df.endpoints(e);
            let mut edge = df.graph.remove_edge(e).expect("edge of the graph");
            let ix = if edge.memlet.data == name {
                constant_element(&edge.memlet.subset)
            } else {
                constant_element(
                    edge.memlet
                        .other_subset
                        .as_ref()
                        .unwrap_or(&edge.memlet.subset),
                )
            };
            let Some(scalar) = ix.and_then(|ix| names.get(&ix)) else {
                unreachable!("checked by scalar_uses");
            };
            if edge.memlet.data == name {
                edge.memlet.data = scalar.clone();
                edge.memlet.subset = Subset::default();
            } else {
                edge.memlet.other_subset = Some(Subset::default());
            }
            let to = node_for(df, scalar);
            df.graph.add_edge(src, to, edge);
        }
        for e in df.out_edges(n) {
            let (_, dst) = df.endpoints(e);
            let mut edge = df.graph.remove_edge(e).expect("edge of the graph");
            let Some(scalar) = constant_element(&edge.memlet.subset).and_then(|ix| names.get(&ix))
            else {
                unreachable!("checked by scalar_uses");
            };
            edge.memlet.data = scalar.clone();
            edge.memlet.subset = Subset::default();
            let from = node_for(df, scalar);
            df.graph.add_edge(from, dst, edge);
        }
        df.graph.remove_node(n);
    }
}

/// Scalarizes the small transient arrays that are only used element by element.
fn scalarize(sdfg: &mut Sdfg, ch: &mut Changes) {
    let cands = candidates(sdfg);
    if cands.is_empty() {
        return;
    }
    for (name, shape) in cands {
        // The copies of this array split on copies of the graphs that use it, kept only
        // if it is scalarized: an array that stays keeps its whole copies (map fusion
        // recognizes a neighbour slab by its one copy).
        let one = BTreeMap::from([(name.clone(), shape.clone())]);
        let mut split: Vec<(usize, Dataflow)> = Vec::new();
        let mut seen = BTreeSet::new();
        let mut ok = true;
        for s in sdfg.body.states() {
            let Some(st) = sdfg.state(s) else { continue };
            if !st.graph.accessed_data_refs().contains(name.as_str()) {
                continue;
            }
            // Most graphs need no split: checked as they are first.
            let mut here = BTreeSet::new();
            if scalar_uses(&st.graph, &name, false, &mut here) {
                seen.extend(here);
                continue;
            }
            let mut graph = st.graph.clone();
            split_copies(&mut graph, &sdfg.arrays, &one);
            ok = ok && scalar_uses(&graph, &name, false, &mut seen);
            split.push((s.index(), graph));
        }
        let in_bounds = seen.iter().all(|ix| {
            ix.len() == shape.len() && ix.iter().zip(&shape).all(|(i, n)| *i >= 0 && i < n)
        });
        if !ok || seen.is_empty() || !in_bounds {
            continue;
        }
        for (i, graph) in split {
            sdfg.states[i].graph = graph;
        }
        let dtype = sdfg.arrays[&name].dtype();
        let mut names = BTreeMap::new();
        for ix in &seen {
            let suffix: Vec<String> = ix.iter().map(i64::to_string).collect();
            let fresh = fresh_name(sdfg, &format!("{name}_{}", suffix.join("_")));
            sdfg.arrays.insert(
                fresh.clone(),
                DataDesc::Scalar {
                    dtype,
                    transient: true,
                },
            );
            names.insert(ix.clone(), fresh);
        }
        for s in sdfg.body.states() {
            replace_with_scalars(&mut sdfg.states[s.index()].graph, &name, &names);
        }
        sdfg.arrays.remove(&name);
        ch.add("buffers_scalarized", 1);
    }
}
