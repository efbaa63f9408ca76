//! Nested SDFGs whose connectors alias one container.
//!
//! DaCe's nested-SDFG connectors are views of the caller's memory: a nested SDFG may read
//! `cp[i, j, 0:19]` through one connector while writing `cp[i, j, 1:20]` through another
//! and `cp[i, j, 0]` through a third, and each write is seen by later reads (a Thomas
//! sweep). sdflow's connectors are copied in and out, which would lose that. So the
//! connectors of one container become one connector over the union of their windows:
//! the inner accesses are shifted into the union's coordinates, and the connector is
//! copied in and out whole (copied in also where it is only written, so that what the
//! nested SDFG leaves alone keeps its value).

use std::collections::BTreeMap;

use sdflow_ir::{
    Array, DataDesc, Dataflow, Dim, Memlet, Node, NodeId, Sdfg, Subset, SymExpr, propagate,
};

use super::{ImportError, err};

/// How one dimension of the merged connector is reached from an old connector.
#[derive(Clone, Debug)]
enum Axis {
    /// The old connector's next dimension, shifted by the offset.
    Take(SymExpr),
    /// A fixed index (the old connector's window was a single index there).
    Fixed(SymExpr),
}

/// Merges the aliasing connectors of nested-SDFG node `n` of `df` (`outer`: the
/// caller's containers).
pub(super) fn merge_aliases(
    outer: &Sdfg,
    df: &mut Dataflow,
    n: NodeId,
    loc: &str,
) -> Result<(), ImportError> {
    // Connector edges by the caller's container.
    let mut groups: BTreeMap<String, Vec<(sdflow_ir::EdgeId, String, bool)>> = BTreeMap::new();
    for (e, input) in df.edges_both(n) {
        let edge = df.edge(e);
        let conn = if input {
            &edge.dst_conn
        } else {
            &edge.src_conn
        };
        let Some(conn) = conn.clone() else { continue };
        groups
            .entry(edge.memlet.data.clone())
            .or_default()
            .push((e, conn, input));
    }
    for (data, edges) in groups {
        let mut conns: Vec<String> = edges.iter().map(|(_, c, _)| c.clone()).collect();
        conns.sort();
        conns.dedup();
        // Connectors that only read may alias freely: copies in see the same values.
        if conns.len() < 2 || edges.iter().all(|(_, _, input)| *input) {
            continue;
        }
        // One node on each side: the merged connector's single edge keeps the order
        // the separate edges gave.
        let mut ends: Vec<(bool, NodeId)> = edges
            .iter()
            .map(|(e, _, input)| {
                let (a, b) = df.endpoints(*e);
                (*input, if *input { a } else { b })
            })
            .collect();
        ends.sort();
        ends.dedup();
        if ends.iter().filter(|(i, _)| *i).count() > 1
            || ends.iter().filter(|(i, _)| !*i).count() > 1
        {
            return Err(err(
                loc,
                format!(
                    "connectors {} of '{data}' alias it from different access nodes; merging them would lose the order between those nodes, so this nested SDFG is not supported yet",
                    conns.join(", ")
                ),
            ));
        }
        let shape = outer
            .arrays
            .get(&data)
            .map(|d| d.shape().to_vec())
            .unwrap_or_default();
        let subsets: BTreeMap<String, Subset> = edges
            .iter()
            .map(|(e, c, _)| (c.clone(), df.edge(*e).memlet.subset.clone()))
            .collect();
        let mut union: Option<Subset> = None;
        for s in subsets.values() {
            union = Some(match union {
                None => s.clone(),
                Some(u) => propagate::union(&u, s, &shape),
            });
        }
        let union = union.unwrap_or_default();
        let fail = |m: String| {
            Err(err(
                loc,
                format!("connectors {} of '{data}': {m}", conns.join(", ")),
            ))
        };
        // The merged connector's dimensions: the union's ranges.
        let dims: Vec<usize> = (0..union.rank())
            .filter(|&d| matches!(union.0[d], Dim::Range { .. }))
            .collect();
        let Some(Node::Nested(nested)) = df.graph.node_weight(n).cloned() else {
            return Ok(());
        };
        let mut inner = *nested.sdfg;
        let mut axes: BTreeMap<String, Vec<Axis>> = BTreeMap::new();
        for (c, s) in &subsets {
            let mut ax = Vec::new();
            for (d, u) in union.0.iter().enumerate() {
                match (u, &s.0[d]) {
                    (Dim::Index(a), Dim::Index(b)) if a == b => {}
                    (Dim::Range { start: u0, .. }, Dim::Range { start, step, .. })
                        if step.as_int() == Some(1) =>
                    {
                        ax.push(Axis::Take(start.sub(u0).simplify()));
                    }
                    (Dim::Range { start: u0, .. }, Dim::Index(i)) => {
                        ax.push(Axis::Fixed(i.sub(u0).simplify()));
                    }
                    (u, x) => {
                        return fail(format!(
                            "dimension {d}: window {x} does not fit the union {u}"
                        ));
                    }
                }
            }
            for a in &ax {
                let (Axis::Take(e) | Axis::Fixed(e)) = a;
                if e.as_int().is_none() {
                    return fail(format!(
                        "the windows' offset {e} is not a constant; merging them needs one"
                    ));
                }
            }
            let takes = ax.iter().filter(|a| matches!(a, Axis::Take(_))).count();
            let rank = inner.arrays.get(c).map_or(0, DataDesc::rank);
            if takes != rank {
                return fail(format!(
                    "'{c}' has rank {rank} but its window [{s}] has {takes} range(s)"
                ));
            }
            axes.insert(c.clone(), ax);
        }
        let mut extents = Vec::new();
        for &d in &dims {
            let Dim::Range { start, end, step } = &union.0[d] else {
                continue;
            };
            if step.as_int() != Some(1) {
                return fail("strided windows cannot be merged".into());
            }
            extents.push(end.sub(start).simplify());
        }
        if extents.iter().any(|e| e.as_int().is_none()) {
            return fail(format!(
                "the union [{union}] has a symbolic extent; merging needs constant ones"
            ));
        }
        let dtype = outer
            .arrays
            .get(&data)
            .map_or(sdflow_ir::DType::F64, DataDesc::dtype);
        let merged = sdflow_transforms::pattern::fresh_name(&inner, &data);
        for c in &conns {
            inner.arrays.remove(c);
        }
        inner
            .arrays
            .insert(merged.clone(), DataDesc::Array(Array::new(dtype, extents)));
        inner.arg_order.retain(|a| !conns.contains(a));
        inner.arg_order.push(merged.clone());
        for st in &mut inner.states {
            rename(&mut st.graph, &axes, &merged);
        }
        // The caller's edges: one in, one out, over the union.
        let src = edges
            .iter()
            .find(|(_, _, i)| *i)
            .map(|(e, _, _)| df.endpoints(*e).0);
        let dst = edges
            .iter()
            .find(|(_, _, i)| !*i)
            .map(|(e, _, _)| df.endpoints(*e).1);
        for (e, _, _) in &edges {
            df.graph.remove_edge(*e);
        }
        let src = src.unwrap_or_else(|| df.add_access(&data));
        df.add_edge(
            src,
            None,
            n,
            Some(&merged),
            Memlet::new(&data, union.clone()),
        );
        if let Some(dst) = dst {
            df.add_edge(
                n,
                Some(&merged),
                dst,
                None,
                Memlet::new(&data, union.clone()),
            );
        }
        df.graph[n] = Node::Nested(sdflow_ir::NestedSdfg {
            sdfg: Box::new(inner),
            symbol_mapping: nested.symbol_mapping.clone(),
        });
    }
    Ok(())
}

/// Widens the windows of nested-SDFG node `n`'s read-only connectors to what the callee
/// can address (`loc`: for errors).
///
/// A DaCe connector is a pointer into the caller's memory at the start of the memlet's
/// subset; the inner array's own shape says how far the callee may read from there, and
/// the memlet's subset is only DaCe's propagated summary of what it reads, which may
/// under-approximate it (GT4Py's `gt_auto_optimize` passes `geofac_n2s_c[0:i - r0 + 1]`
/// to a nested SDFG whose array has all the cells and that reads it through a neighbour
/// table). sdflow copies a connector in over its window, so the window of each range
/// dimension becomes `[start, start + inner extent)`: the inner array's element `x` then
/// holds the caller's `start + x`, exactly what DaCe's pointer shows, whatever the callee
/// reads (the inner array is filled whole, so the copy's size always matches it). A caller
/// array too small for that window is an out-of-bounds error of the copy when run, naming
/// the array (the interpreter's check; compiled code raises its error flag), never a read
/// outside it. The window's range dimensions are matched with the inner array's in order;
/// where their number differs from the inner rank, or a range is strided, or the inner
/// shape uses a symbol the mapping does not give, the window stays as it is (and a size
/// mismatch is refused by the copy when run, naming the connector).
///
/// Only containers the nested SDFG does not write are widened: a written connector is
/// copied out over its window, and a widened copy-out would write back elements the callee
/// never wrote, which races with other writers (parallel iterations of an enclosing map
/// among them). A written connector whose window provably has another number of elements
/// than its inner array is refused here, naming it; where the sizes are symbolic and differ
/// when run, the copy's size check refuses it then.
pub(super) fn widen_read_windows(
    df: &mut Dataflow,
    n: NodeId,
    loc: &str,
) -> Result<(), ImportError> {
    let Some(Node::Nested(nested)) = df.graph.node_weight(n) else {
        return Ok(());
    };
    let inner = &nested.sdfg;
    // The inner shapes in the caller's symbols: the symbol mapping, and the inner
    // symbols with fixed values.
    let mut to_outer: BTreeMap<String, SymExpr> = nested.symbol_mapping.clone();
    for (k, s) in &inner.symbols {
        if let Some(v) = s.value
            && v.dtype().is_int()
        {
            to_outer
                .entry(k.clone())
                .or_insert(SymExpr::Int(v.as_i64()));
        }
    }
    let extents = |conn: &str| -> Option<Vec<SymExpr>> {
        let desc = inner.arrays.get(conn)?;
        if !matches!(desc, DataDesc::Array(_)) {
            return None;
        }
        desc.shape()
            .iter()
            .map(|e| {
                e.free_symbols()
                    .iter()
                    .all(|s| to_outer.contains_key(s))
                    .then(|| e.substitute(&to_outer).simplify())
            })
            .collect()
    };
    // The range dimensions of a window (the inner array's dimensions), with their starts
    // and extents; None where a range is strided.
    let ranges = |s: &Subset| -> Option<Vec<(usize, SymExpr, SymExpr)>> {
        s.0.iter()
            .enumerate()
            .filter_map(|(d, x)| match x {
                Dim::Range { start, end, step } => Some(
                    (step.as_int() == Some(1))
                        .then(|| (d, start.clone(), end.sub(start).simplify())),
                ),
                _ => None,
            })
            .collect()
    };
    let written: std::collections::BTreeSet<String> = df
        .out_edges(n)
        .into_iter()
        .map(|e| df.edge(e).memlet.data.clone())
        .collect();
    let mut widened = Vec::new();
    for e in df.in_edges(n) {
        let edge = df.edge(e);
        let Some(conn) = edge.dst_conn.as_deref() else {
            continue;
        };
        if written.contains(&edge.memlet.data) {
            continue;
        }
        let (Some(ext), Some(rs)) = (extents(conn), ranges(&edge.memlet.subset)) else {
            continue;
        };
        if ext.len() != rs.len() || rs.iter().zip(&ext).all(|((_, _, w), x)| w == x) {
            continue;
        }
        let mut subset = edge.memlet.subset.clone();
        for ((d, start, _), x) in rs.iter().zip(&ext) {
            subset.0[*d] = Dim::Range {
                start: start.clone(),
                end: start.add(x).simplify(),
                step: SymExpr::Int(1),
            };
        }
        widened.push((e, subset));
    }
    for e in df.out_edges(n) {
        let edge = df.edge(e);
        let Some(conn) = edge.src_conn.as_deref() else {
            continue;
        };
        let Some(ext) = extents(conn) else {
            continue;
        };
        let volume = |v: Vec<SymExpr>| v.iter().fold(SymExpr::Int(1), |p, x| p.mul(x)).simplify();
        let (w, x) = (volume(edge.memlet.subset.sizes()), volume(ext));
        if let Some(diff) = x.sub(&w).simplify().as_int()
            && diff != 0
        {
            return Err(err(
                loc,
                format!(
                    "connector '{conn}' is written over {}, {w} element(s), but the inner array has {x}; a nested SDFG that writes through a connector of another size than its window is not supported",
                    edge.memlet
                ),
            ));
        }
    }
    for (e, subset) in widened {
        df.graph[e].memlet.subset = subset;
    }
    Ok(())
}

/// `s` (in an old connector's coordinates) in the merged connector's.
fn shift(s: &Subset, axes: &[Axis]) -> Subset {
    let mut it = s.0.iter();
    Subset(
        axes.iter()
            .map(|a| match a {
                Axis::Fixed(i) => Dim::Index(i.clone()),
                Axis::Take(off) => match it.next() {
                    Some(Dim::Index(i)) => Dim::Index(i.add(off).simplify()),
                    Some(Dim::Range { start, end, step }) => Dim::Range {
                        start: start.add(off).simplify(),
                        end: end.add(off).simplify(),
                        step: step.clone(),
                    },
                    Some(Dim::Indirect {
                        table,
                        index,
                        offset,
                    }) => Dim::Indirect {
                        table: table.clone(),
                        index: index.clone(),
                        offset: offset.add(off).simplify(),
                    },
                    None => Dim::Index(off.clone()),
                },
            })
            .collect(),
    )
}

/// Renames the old connectors to `merged` in `g` (and its map bodies), shifting subsets.
fn rename(g: &mut Dataflow, axes: &BTreeMap<String, Vec<Axis>>, merged: &str) {
    let node_data = |g: &Dataflow, x: NodeId| g.node(x).as_access().map(str::to_string);
    for e in g.edge_ids() {
        let (a, b) = g.endpoints(e);
        let (sa, sb) = (node_data(g, a), node_data(g, b));
        let m = &mut g.graph[e].memlet;
        let copy = sa.is_some() && sb.is_some();
        if copy
            && let Some(ax) = sb.as_ref().and_then(|d| axes.get(d))
            && m.data != *sb.as_deref().unwrap_or_default()
        {
            // A copy into an old connector: its destination subset.
            let o = m.other_subset.clone().unwrap_or_else(|| m.subset.clone());
            m.other_subset = Some(shift(&o, ax));
        }
        if let Some(ax) = axes.get(&m.data) {
            if copy && m.other_subset.is_none() {
                // The destination was addressed like the source: keep its subset.
                m.other_subset = Some(m.subset.clone());
            }
            m.subset = shift(&m.subset, ax);
            m.data = merged.to_string();
        }
    }
    for x in g.node_ids() {
        match &mut g.graph[x] {
            Node::Access(d) if axes.contains_key(d.as_str()) => *d = merged.to_string(),
            Node::Map(m) => rename(&mut m.body, axes, merged),
            _ => {}
        }
    }
}
