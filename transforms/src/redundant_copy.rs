//! Redundant copies: a transient written whole by one producer and then copied whole into
//! another container of the same type and shape, and used nowhere else, is a detour: the
//! producer writes the destination directly and the transient disappears. (Front ends
//! that translate `b[:] = a + c` produce exactly this; DaCe calls it a redundant array.)
//!
//! ```text
//! u ─► map f ─► tmp ──copy──► out          u ─► map f ─► out
//! ```
//!
//! Legality: the copy carries every element of `tmp`, so the producer must write every
//! element itself — judged from what its body writes over its ranges
//! (`pattern::writes_whole`), since a map's edge may over-approximate its body — and
//! plainly: a write-conflict resolution anywhere on its path (the body's edge included)
//! combines with the old value, which is `tmp`'s before and `out`'s after.

use sdflow_ir::{DataDesc, Dataflow, Dim, Memlet, Node, NodeId, Sdfg, Subset, SymExpr};

use crate::pass::{Changes, Pass};
use crate::pattern::{
    DataUses, data_uses, for_each_state_parallel, is_full, move_in_edges, node_reads_writes,
    rename_data, same_extent, writes_whole,
};

/// See the module documentation.
pub struct RedundantCopy;

impl Pass for RedundantCopy {
    fn name(&self) -> &'static str {
        "redundant_copy"
    }

    fn run(&self, sdfg: &mut Sdfg) -> Changes {
        let uses = data_uses(sdfg);
        // States in parallel: a removed copy's source is private to its state (one access
        // node), so the states' rewrites are independent; removals are merged in order.
        let done =
            for_each_state_parallel(sdfg, 1, |shared, graph| remove_copies(shared, &uses, graph));
        let mut ch = Changes::default();
        for (_, removed) in done {
            ch.add("copies_removed", removed.len());
            for from in &removed {
                sdfg.arrays.remove(from);
            }
        }
        ch
    }
}

/// Removes the redundant copies of one state's graph; returns the containers that
/// disappeared.
fn remove_copies(sdfg: &Sdfg, uses: &DataUses, graph: &mut Dataflow) -> Vec<String> {
    let mut removed = Vec::new();
    while let Some((t1, t2, producer, shift)) = find(sdfg, graph, uses) {
        let from = graph.node(t1).as_access().unwrap_or_default().to_string();
        let to = graph.node(t2).as_access().unwrap_or_default().to_string();
        let in_edge = graph.in_edges(t1)[0];
        if let Node::Map(m) = &mut graph.graph[producer] {
            match &shift {
                None => rename_data(&mut m.body, &from, &to),
                Some(s) => rename_data_shifted(&mut m.body, &from, &to, s),
            }
        }
        if graph.node(producer).as_access().is_none() {
            let m = &mut graph.graph[in_edge].memlet;
            m.data = to.clone();
            if let Some(s) = &shift {
                m.subset = shifted(&m.subset, s);
            }
        }
        for e in graph.out_edges(t1) {
            graph.graph.remove_edge(e);
        }
        move_in_edges(graph, t1, t2);
        graph.graph.remove_node(t1);
        removed.push(from);
    }
    removed
}

/// A copy to remove: `tmp`'s node, `out`'s node, the producer, and where `tmp`'s indices
/// land in `out` (`None`: the same indices).
type Found = (NodeId, NodeId, NodeId, Option<Vec<SymExpr>>);

/// Where a whole copy of a container of shape `from` lands in one of shape `to` through
/// `other`: `Some(None)` at the same indices (the whole of `to`, same shape), `Some(Some(
/// starts))` in a unit-step box of `to` with `from`'s extents, else `None`.
fn destination_box(
    other: Option<&Subset>,
    from: &[SymExpr],
    to: &[SymExpr],
) -> Option<Option<Vec<SymExpr>>> {
    let same_shape = from
        .iter()
        .zip(to)
        .all(|(x, y)| x.simplify() == y.simplify());
    match other {
        None if same_shape => Some(None),
        Some(o) if same_shape && is_full(o, to) => Some(None),
        Some(o) if o.rank() == from.len() => {
            let starts =
                o.0.iter()
                    .zip(from)
                    .map(|(d, n)| match d {
                        Dim::Range { start, end, step }
                            if step.as_int() == Some(1) && same_extent(&end.sub(start), n) =>
                        {
                            Some(start.clone())
                        }
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>()?;
            Some(Some(starts))
        }
        _ => None,
    }
}

fn find(sdfg: &Sdfg, df: &Dataflow, uses: &DataUses) -> Option<Found> {
    for t1 in df.node_ids() {
        let Some(a) = df.node(t1).as_access() else {
            continue;
        };
        let (Some(DataDesc::Array(da)), Some(u)) = (sdfg.arrays.get(a), uses.get(a)) else {
            continue;
        };
        let (outs, ins) = (df.out_edges(t1), df.in_edges(t1));
        let ([copy], [write]) = (outs.as_slice(), ins.as_slice()) else {
            continue;
        };
        let t2 = df.endpoints(*copy).1;
        let Some(b) = df.node(t2).as_access() else {
            continue;
        };
        let Some(DataDesc::Array(db)) = sdfg.arrays.get(b) else {
            continue;
        };
        // Cheapest conditions first: most candidates fail on use counts or types.
        if !da.transient || a == b || u.access_nodes != 1 || u.in_control || df.in_degree(t2) != 1 {
            continue;
        }
        let cm: &Memlet = &df.edge(*copy).memlet;
        if da.dtype != db.dtype
            || da.shape.len() != db.shape.len()
            || cm.data != a
            || cm.wcr.is_some()
            || !is_full(&cm.subset, &da.shape)
        {
            continue;
        }
        // Where the copy puts `tmp`'s first element in `out`: the whole of `out` (same
        // shape), or a box of it with `tmp`'s extents.
        let Some(shift) = destination_box(cm.other_subset.as_ref(), &da.shape, &db.shape) else {
            continue;
        };
        let producer = df.endpoints(*write).0;
        if matches!(df.node(producer), Node::Nested(_) | Node::Library(_)) {
            continue;
        }
        let (reads, writes) = node_reads_writes(df, producer);
        if reads.contains(b) || writes.contains(b) {
            continue;
        }
        // What the producer really writes (its body over its ranges, not its summary
        // memlet, which may over-approximate), as a plain write.
        // A shifted rename moves the subsets of `tmp`'s memlets, not second subsets or
        // index tables.
        if shift.is_some()
            && let Node::Map(m) = df.node(producer)
            && (crate::pattern::tables_read(&m.body).contains(a)
                || copy_names_other_end(&m.body, a))
        {
            continue;
        }
        if writes_whole(df, producer, a, &da.shape) {
            return Some((t1, t2, producer, shift));
        }
    }
    None
}

/// `s` with each dimension moved by `shift` (its indices and ranges, not tables).
fn shifted(s: &Subset, shift: &[SymExpr]) -> Subset {
    if s.0.is_empty() {
        return s.clone();
    }
    Subset(
        s.0.iter()
            .zip(shift)
            .map(|(d, c)| match d {
                Dim::Index(x) => Dim::Index(x.add(c).simplify()),
                Dim::Range { start, end, step } => Dim::Range {
                    start: start.add(c).simplify(),
                    end: end.add(c).simplify(),
                    step: step.clone(),
                },
                Dim::Indirect {
                    table,
                    index,
                    offset,
                } => Dim::Indirect {
                    table: table.clone(),
                    index: index.clone(),
                    offset: offset.add(c).simplify(),
                },
            })
            .collect(),
    )
}

/// [`rename_data`] where element `x` of `from` is element `x + shift` of `to`: the
/// producer's writes land in the box of `to` the copy wrote.
fn rename_data_shifted(df: &mut Dataflow, from: &str, to: &str, shift: &[SymExpr]) {
    for e in df.edge_ids() {
        // A copy's second subset is its other end's: shifted when that end is `from`.
        let (a, b) = df.endpoints(e);
        let touches = [a, b].iter().any(|&x| df.node(x).as_access() == Some(from));
        let m = &mut df.graph[e].memlet;
        if m.data == from {
            m.data = to.to_string();
            m.subset = shifted(&m.subset, shift);
        } else if touches && let Some(o) = &m.other_subset {
            m.other_subset = Some(shifted(o, shift));
        }
    }
    for n in df.node_ids() {
        match &mut df.graph[n] {
            Node::Access(d) if d == from => *d = to.to_string(),
            Node::Map(m) => rename_data_shifted(&mut m.body, from, to, shift),
            _ => {}
        }
    }
}

/// True when a copy touching `data` in `df` (inner maps too) names only its other end,
/// one subset for both: a shifted rename could not move `data`'s side alone.
fn copy_names_other_end(df: &Dataflow, data: &str) -> bool {
    df.edge_ids().into_iter().any(|e| {
        let (a, b) = df.endpoints(e);
        let m = &df.edge(e).memlet;
        m.data != data
            && m.other_subset.is_none()
            && [a, b].iter().any(|&x| df.node(x).as_access() == Some(data))
    }) || df.graph.node_weights().any(|n| match n {
        Node::Map(m) => copy_names_other_end(&m.body, data),
        _ => false,
    })
}
