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
    for (e, input) in df
        .in_edges(n)
        .into_iter()
        .map(|e| (e, true))
        .chain(df.out_edges(n).into_iter().map(|e| (e, false)))
    {
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
