//! Copy forwarding: a map that only copies — each point reads one element of a container
//! X and writes it, unchanged, to a transient T at its own point — is a detour when X
//! does not change in the state. Its consumers read X where the copy would have read it,
//! and the map and T disappear. GT4Py lowers every field access through a neighbour
//! table or a fixed local index (`primal_normal_vert_v1[e, 2]`, `u[E2C2V[e, 2], k]`) to
//! such a map, often over the horizontal dimension alone, feeding maps over (horizontal,
//! K): forwarded, the copy costs nothing, and the 1-D map no longer stands between them.
//!
//! ```text
//! X ─► map A { T[i - s] = X[i - r, 2] } ─► T ─► map B { … T[i - s] … }
//!                           →
//! X ─► map B { … X[i - r, 2] … }
//! ```
//!
//! Legality: A's body is a chain of one-element copies (access nodes, body-local scalars
//! and tasklets `o = a` of one type) from X to `T[p + c]` (its parameters in order, each
//! plus an offset free of parameters), X is written nowhere in the state, and X's index
//! reads no container. T is private to the state (one access node, written by A alone,
//! not read by the control flow) and every reader of T is a map whose every read of T is
//! at `q + o + c` for one of its own parameters `q` (not bound again inside), at points
//! A wrote (`q + o` within A's range). The cost model has nothing to weigh: a forwarded
//! read moves one element, as the read of T did, and the copy's reads and writes go.

use std::collections::{BTreeMap, BTreeSet};

use sdflow_ir::{
    DataDesc, Dataflow, Dim, Expr, MapScope, Node, NodeId, Range, Sdfg, Subset, SymExpr,
};

use crate::pass::{Changes, Pass};
use crate::pattern::{
    DataUses, binds_any, chain_at, connect_map, data_uses, for_each_state_parallel, neighbours,
    reads_writes, remove_isolated,
};
use sdflow_ir::propagate::BoundaryMemo;

/// See the module documentation.
pub struct CopyForwarding;

impl Pass for CopyForwarding {
    fn name(&self) -> &'static str {
        "copy_forwarding"
    }

    fn run(&self, sdfg: &mut Sdfg) -> Changes {
        // Most programs have no copy map and no input-less tasklet: their uses are not
        // gathered.
        if !has_candidates(sdfg) {
            return Changes::default();
        }
        let uses = data_uses(sdfg);
        // States in parallel: a forwarded T is private to its state.
        let done = for_each_state_parallel(sdfg, 1, |shared, graph| {
            let mut memo = BoundaryMemo::default();
            let mut removed = Vec::new();
            while let Some(f) = find(shared, &uses, graph) {
                removed.push(apply(shared, graph, f, &mut memo));
            }
            removed
        });
        let mut ch = Changes::default();
        for (_, removed) in done {
            ch.add("copies_forwarded", removed.len());
            for t in &removed {
                sdfg.arrays.remove(t);
            }
        }
        let done = for_each_state_parallel(sdfg, 1, |shared, graph| {
            let mut memo = BoundaryMemo::default();
            let mut removed = Vec::new();
            while let Some(c) = find_constant(shared, &uses, graph) {
                removed.push(apply_constant(shared, graph, c, &mut memo));
            }
            removed
        });
        for (_, removed) in done {
            ch.add("constants_forwarded", removed.len());
            for t in &removed {
                sdfg.arrays.remove(t);
            }
        }
        ch
    }
}

/// Whether some state holds what either rule starts from: a map whose body is access
/// nodes and one-statement `o = a` tasklets, or a tasklet without inputs.
fn has_candidates(sdfg: &Sdfg) -> bool {
    let copy_body = |m: &MapScope| {
        m.body.graph.node_weights().all(|n| match n {
            Node::Access(_) => true,
            Node::Tasklet(t) => {
                matches!(t.code.as_slice(), [st] if matches!(st.value, Expr::Var(_)))
            }
            _ => false,
        })
    };
    sdfg.states.iter().any(|st| {
        let df = &st.graph;
        df.node_ids().into_iter().any(|n| match df.node(n) {
            Node::Map(m) => copy_body(m),
            Node::Tasklet(_) => df.in_degree(n) == 0,
            _ => false,
        })
    })
}

/// A value computed once by a tasklet without inputs (`o = 4.0`, `o = rd_o_cvd`: GT4Py's
/// `get_value`) into a one-element transient that only map bodies' tasklets read.
struct Constant {
    tasklet: NodeId,
    t_node: NodeId,
    t: String,
    value: Expr,
}

fn find_constant(sdfg: &Sdfg, uses: &DataUses, df: &Dataflow) -> Option<Constant> {
    for t_node in df.node_ids() {
        let Some(t) = df.node(t_node).as_access() else {
            continue;
        };
        let Some(desc) = sdfg.arrays.get(t) else {
            continue;
        };
        let private = uses
            .get(t)
            .is_some_and(|u| u.access_nodes == 1 && u.states.len() == 1 && !u.in_control);
        let one = desc
            .shape()
            .iter()
            .all(|e| e.simplify().as_int() == Some(1));
        if !desc.transient() || !private || !one {
            continue;
        }
        let Some(chain) = chain_at(df, t_node) else {
            continue;
        };
        let Node::Tasklet(tk) = df.node(chain.producer) else {
            continue;
        };
        let [st] = tk.code.as_slice() else { continue };
        let dtype = desc.dtype();
        let symbol_type = |v: &str| sdfg.symbols.get(v).map(|s| s.dtype);
        let plain = tk.inputs.is_empty()
            && df.in_degree(chain.producer) == 0
            && df.out_degree(chain.producer) == 1
            && tk.outputs.get(&st.target) == Some(&dtype)
            && st.value.vars().iter().all(|v| sdfg.symbols.contains_key(v));
        let Ok(ty) = st.value.infer(&symbol_type) else {
            continue;
        };
        if !plain || chain.consumers.is_empty() {
            continue;
        }
        // The tasklet converts its value to the output's type as it stores it (GT4Py's
        // `__tlet_out = 1` into an `i32`): the forwarded value is that conversion.
        let value = if ty == dtype {
            st.value.clone()
        } else {
            Expr::Cast(dtype, Box::new(st.value.clone()))
        };
        let readable = chain.consumers.iter().all(|&b| match df.node(b) {
            Node::Map(mb) => reads_as_input(&mb.body, t, dtype, &value, &BTreeSet::new()),
            _ => false,
        });
        if readable {
            return Some(Constant {
                tasklet: chain.producer,
                t_node,
                t: t.to_string(),
                value,
            });
        }
    }
    None
}

/// Every use of `t` in `df` (inner maps too) is an edge from an access node of `t` with
/// no in-edges into a tasklet input of type `dtype`, where the value's names are not
/// shadowed (by the tasklet's own names or an enclosing map's parameters).
fn reads_as_input(
    df: &Dataflow,
    t: &str,
    dtype: sdflow_ir::DType,
    value: &Expr,
    params: &BTreeSet<String>,
) -> bool {
    let names = value.vars();
    for n in df.node_ids() {
        match df.node(n) {
            Node::Access(d) if d == t => {
                if df.in_degree(n) > 0 {
                    return false;
                }
                for e in df.out_edges(n) {
                    let Node::Tasklet(tk) = df.node(df.endpoints(e).1) else {
                        return false;
                    };
                    let conn = df.edge(e).dst_conn.as_deref().unwrap_or_default();
                    let own: BTreeSet<&str> = tk
                        .inputs
                        .keys()
                        .chain(tk.outputs.keys())
                        .map(String::as_str)
                        .chain(tk.code.iter().map(|s| s.target.as_str()))
                        .collect();
                    let shadowed = names
                        .iter()
                        .any(|v| own.contains(v.as_str()) || params.contains(v));
                    if tk.inputs.get(conn) != Some(&dtype) || shadowed {
                        return false;
                    }
                }
            }
            Node::Map(m) => {
                let mut inner = params.clone();
                inner.extend(m.params.iter().cloned());
                if !reads_as_input(&m.body, t, dtype, value, &inner) {
                    return false;
                }
            }
            Node::Nested(_)
                if df
                    .in_edges(n)
                    .into_iter()
                    .any(|e| df.edge(e).memlet.data == t) =>
            {
                return false;
            }
            _ => {}
        }
    }
    df.edge_ids().into_iter().all(|e| {
        let m = &df.edge(e).memlet;
        let (a, b) = df.endpoints(e);
        let touches = [a, b].iter().any(|&x| df.node(x).as_access() == Some(t));
        !m.subset.tables().contains(&t) && (m.data == t || !touches)
    })
}

/// Replaces the reads of `t` in `df` by the value in the reading tasklets' code.
fn inline_constant(df: &mut Dataflow, t: &str, value: &Expr) {
    for n in df.node_ids() {
        if let Node::Map(m) = &mut df.graph[n] {
            inline_constant(&mut m.body, t, value);
        }
    }
    for n in df.node_ids() {
        if df.node(n).as_access() != Some(t) {
            continue;
        }
        for e in df.out_edges(n) {
            let dst = df.endpoints(e).1;
            let conn = df.edge(e).dst_conn.clone().unwrap_or_default();
            if let Node::Tasklet(tk) = &mut df.graph[dst] {
                for st in &mut tk.code {
                    st.value = st
                        .value
                        .replace_vars(&|v| (v == conn).then(|| value.clone()));
                }
                tk.inputs.remove(&conn);
            }
            df.graph.remove_edge(e);
        }
        df.graph.remove_node(n);
    }
}

/// Forwards the value into every reader; returns T.
fn apply_constant(sdfg: &Sdfg, df: &mut Dataflow, c: Constant, memo: &mut BoundaryMemo) -> String {
    let readers: Vec<NodeId> = df
        .out_edges(c.t_node)
        .into_iter()
        .map(|e| df.endpoints(e).1)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    for b in readers {
        let Node::Map(mb) = &mut df.graph[b] else {
            continue;
        };
        inline_constant(&mut mb.body, &c.t, &c.value);
        let (mut sources, dests) = neighbours(df, b);
        sources.remove(&c.t);
        connect_map(&sdfg.arrays, df, b, &sources, &dests, memo);
    }
    df.graph.remove_node(c.tasklet);
    df.graph.remove_node(c.t_node);
    c.t
}

/// A copy map to forward.
struct Forward {
    a: NodeId,
    t_node: NodeId,
    t: String,
    /// The container copied from, and the element read, in A's parameters.
    x: String,
    x_subset: Subset,
    /// A's parameters and ranges.
    params: Vec<String>,
    ranges: Vec<Range>,
    /// T's index minus A's parameter, per dimension.
    base: Vec<SymExpr>,
}

fn find(sdfg: &Sdfg, uses: &DataUses, df: &Dataflow) -> Option<Forward> {
    // What the state writes, gathered at the first candidate only.
    let mut written: Option<BTreeSet<String>> = None;
    for t_node in df.node_ids() {
        let Some(t) = df.node(t_node).as_access() else {
            continue;
        };
        let Some(DataDesc::Array(arr)) = sdfg.arrays.get(t) else {
            continue;
        };
        let private = uses
            .get(t)
            .is_some_and(|u| u.access_nodes == 1 && u.states.len() == 1 && !u.in_control);
        if !arr.transient || !private {
            continue;
        }
        let Some(chain) = chain_at(df, t_node) else {
            continue;
        };
        let Node::Map(ma) = df.node(chain.producer) else {
            continue;
        };
        if chain.consumers.is_empty() || df.out_degree(chain.producer) != 1 {
            continue;
        }
        let Some((x, x_subset, base)) = copy_body(sdfg, ma, t) else {
            continue;
        };
        let written = written.get_or_insert_with(|| reads_writes(df).1);
        if written.contains(&x) || x == t {
            continue;
        }
        let f = Forward {
            a: chain.producer,
            t_node,
            t: t.to_string(),
            x,
            x_subset,
            params: ma.params.clone(),
            ranges: ma.ranges.clone(),
            base,
        };
        let readable = chain.consumers.iter().all(|&b| match df.node(b) {
            Node::Map(mb) => !binds_any(&mb.body, &mb.params) && forwardable(&mb.body, mb, &f),
            _ => false,
        });
        if readable {
            return Some(f);
        }
    }
    None
}

/// A's body as a chain of one-element copies from X to `T[p + c]`: X, X's element (in
/// A's parameters) and `c`.
fn copy_body(sdfg: &Sdfg, m: &MapScope, t: &str) -> Option<(String, Subset, Vec<SymExpr>)> {
    let body = &m.body;
    let params: Vec<&str> = m.params.iter().map(String::as_str).collect();
    let t_dtype = sdfg.arrays.get(t)?.dtype();
    // The write of T: one edge, plain, at `p + c`.
    let writes: Vec<_> = body
        .edge_ids()
        .into_iter()
        .filter(|&e| body.node(body.endpoints(e).1).as_access() == Some(t))
        .collect();
    let [w] = writes.as_slice() else { return None };
    let wm = &body.edge(*w).memlet;
    if wm.wcr.is_some() {
        return None;
    }
    let t_subset = if wm.data == t {
        &wm.subset
    } else {
        wm.other_subset.as_ref()?
    };
    if t_subset.rank() != params.len() {
        return None;
    }
    let mut base = Vec::new();
    for (d, p) in t_subset.0.iter().zip(&params) {
        let Dim::Index(e) = d else { return None };
        let (coeffs, rest) = e.affine_in(&params)?;
        if coeffs.len() != 1 || coeffs.get(*p) != Some(&1) {
            return None;
        }
        base.push(rest);
    }
    // Walk back from T's writer to the source X.
    let mut on_chain: BTreeSet<NodeId> = BTreeSet::from([body.endpoints(*w).1]);
    let mut node = body.endpoints(*w).0;
    let mut edge = *w;
    loop {
        on_chain.insert(node);
        match body.node(node) {
            Node::Access(d) if body.in_degree(node) == 0 => {
                // The source: the edge out of it names the element read.
                let m = &body.edge(edge).memlet;
                let sub = if m.data == *d {
                    m.subset.clone()
                } else {
                    m.other_subset.clone()?
                };
                let desc = sdfg.arrays.get(d)?;
                let names_data = sub
                    .free_symbols()
                    .iter()
                    .any(|s| sdfg.arrays.contains_key(s));
                if !sub.is_element() || desc.dtype() != t_dtype || names_data {
                    return None;
                }
                // Every other node only feeds unused tasklet inputs of the chain.
                let extra_ok = body.node_ids().into_iter().all(|n| {
                    on_chain.contains(&n)
                        || (body.node(n).as_access().is_some()
                            && body.in_degree(n) == 0
                            && body
                                .out_edges(n)
                                .into_iter()
                                .all(|e| on_chain.contains(&body.endpoints(e).1)))
                });
                return extra_ok.then(|| (d.clone(), sub, base));
            }
            Node::Access(d) => {
                // A body-local scalar of T's type, written once.
                let ok = matches!(
                    sdfg.arrays.get(d),
                    Some(DataDesc::Scalar { dtype, transient: true }) if *dtype == t_dtype
                );
                let ins = body.in_edges(node);
                if !ok || ins.len() != 1 || body.out_degree(node) != 1 {
                    return None;
                }
                edge = ins[0];
                node = body.endpoints(edge).0;
            }
            Node::Tasklet(tk) => {
                // `o = a`, one type throughout.
                let [st] = tk.code.as_slice() else {
                    return None;
                };
                let Expr::Var(a) = &st.value else { return None };
                if tk.outputs.len() != 1
                    || !tk.outputs.contains_key(&st.target)
                    || tk.outputs[&st.target] != t_dtype
                    || tk.inputs.get(a) != Some(&t_dtype)
                    || body.out_degree(node) != 1
                {
                    return None;
                }
                let ins: Vec<_> = body
                    .in_edges(node)
                    .into_iter()
                    .filter(|&e| body.edge(e).dst_conn.as_deref() == Some(a.as_str()))
                    .collect();
                let [e] = ins.as_slice() else { return None };
                edge = *e;
                node = body.endpoints(edge).0;
            }
            _ => return None,
        }
    }
}

/// Every read of T in `df` (B's body, inner maps too) is at a point A wrote, `q + o + c`
/// for a parameter `q` of B; B neither writes T nor copies it nor reads it as a table.
fn forwardable(df: &Dataflow, mb: &MapScope, f: &Forward) -> bool {
    for n in df.node_ids() {
        match df.node(n) {
            Node::Access(d) if *d == f.t && df.in_degree(n) > 0 => return false,
            Node::Map(m) if !forwardable(&m.body, mb, f) => return false,
            Node::Nested(_)
                if df
                    .in_edges(n)
                    .into_iter()
                    .any(|e| df.edge(e).memlet.data == f.t) =>
            {
                return false;
            }
            _ => {}
        }
    }
    df.edge_ids().into_iter().all(|e| {
        let m = &df.edge(e).memlet;
        if m.subset.tables().contains(&f.t.as_str()) {
            return false;
        }
        let (a, b) = df.endpoints(e);
        let touches = [a, b].iter().any(|&x| df.node(x).as_access() == Some(&f.t));
        if m.data != f.t {
            // A copy touching T described from its other end.
            return !touches;
        }
        // A copy out of T moves one element (more would need T's layout); the other
        // end's subset stays.
        if !m.subset.is_element() {
            return false;
        }
        points(&m.subset, &mb.params, &mb.ranges, f).is_some()
    })
}

/// A's point for each dimension of a read of T, when every one is `q + o` for a parameter
/// `q` of B with B's range of `q + o` inside A's range.
fn points(s: &Subset, params: &[String], ranges: &[Range], f: &Forward) -> Option<Vec<SymExpr>> {
    if s.rank() != f.params.len() {
        return None;
    }
    let qs: Vec<&str> = params.iter().map(String::as_str).collect();
    s.0.iter()
        .zip(&f.base)
        .zip(&f.ranges)
        .map(|((d, c), ra)| {
            let Dim::Index(e) = d else { return None };
            let p = e.sub(c).simplify();
            let (coeffs, rest) = p.affine_in(&qs)?;
            let coeffs: Vec<(String, i64)> = coeffs.into_iter().collect();
            let [(q, 1)] = coeffs.as_slice() else {
                return None;
            };
            let o = rest.as_int()?;
            let k = params.iter().position(|x| x == q)?;
            let rb = &ranges[k];
            let lo = rb.start.add(&SymExpr::Int(o)).const_diff(&ra.start);
            let hi = ra.end.const_diff(&rb.end.add(&SymExpr::Int(o)));
            let inside = matches!((lo, hi), (Some(l), Some(h)) if l >= 0 && h >= 0)
                && rb.step.as_int() == Some(1)
                && ra.step.as_int() == Some(1);
            inside.then_some(p)
        })
        .collect()
}

/// Rewrites B's reads of T as reads of X (`params` and `ranges`: B's).
fn rewrite(df: &mut Dataflow, params: &[String], ranges: &[Range], f: &Forward) {
    for n in df.node_ids() {
        match &mut df.graph[n] {
            Node::Access(d) if *d == f.t => *d = f.x.clone(),
            Node::Map(m) => rewrite(&mut m.body, params, ranges, f),
            _ => {}
        }
    }
    for e in df.edge_ids() {
        let m = &mut df.graph[e].memlet;
        if m.data != f.t {
            continue;
        }
        let at = points(&m.subset, params, ranges, f).expect("checked by forwardable");
        let map: BTreeMap<String, SymExpr> = f.params.iter().cloned().zip(at).collect();
        m.data = f.x.clone();
        m.subset = f.x_subset.map_exprs(&|x| x.substitute(&map).simplify());
    }
}

/// Forwards the copy into every reader; returns T.
fn apply(sdfg: &Sdfg, df: &mut Dataflow, f: Forward, memo: &mut BoundaryMemo) -> String {
    let readers: Vec<NodeId> = df
        .out_edges(f.t_node)
        .into_iter()
        .map(|e| df.endpoints(e).1)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let (a_sources, _) = neighbours(df, f.a);
    let mut touched: Vec<NodeId> = a_sources.values().copied().collect();
    for b in readers {
        let Node::Map(mb) = &mut df.graph[b] else {
            continue;
        };
        let (params, ranges) = (mb.params.clone(), mb.ranges.clone());
        rewrite(&mut mb.body, &params, &ranges, &f);
        let (mut sources, dests) = neighbours(df, b);
        sources.remove(&f.t);
        for (k, v) in &a_sources {
            sources.entry(k.clone()).or_insert(*v);
        }
        touched.extend(sources.values().copied());
        connect_map(&sdfg.arrays, df, b, &sources, &dests, memo);
    }
    df.graph.remove_node(f.a);
    df.graph.remove_node(f.t_node);
    remove_isolated(df, &touched);
    f.t
}
