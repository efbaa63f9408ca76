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

use sdflow_ir::{DataDesc, Dataflow, Memlet, Node, NodeId, Sdfg};

use crate::pass::{Changes, Pass};
use crate::pattern::{
    DataUses, data_uses, for_each_state_parallel, is_full, move_in_edges, node_reads_writes,
    rename_data, writes_whole,
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
    while let Some((t1, t2, producer)) = find(sdfg, graph, uses) {
        let from = graph.node(t1).as_access().unwrap_or_default().to_string();
        let to = graph.node(t2).as_access().unwrap_or_default().to_string();
        let in_edge = graph.in_edges(t1)[0];
        if let Node::Map(m) = &mut graph.graph[producer] {
            rename_data(&mut m.body, &from, &to);
        }
        if graph.node(producer).as_access().is_none() {
            graph.graph[in_edge].memlet.data = to.clone();
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

fn find(sdfg: &Sdfg, df: &Dataflow, uses: &DataUses) -> Option<(NodeId, NodeId, NodeId)> {
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
        let same_type = da.dtype == db.dtype
            && da.shape.len() == db.shape.len()
            && da
                .shape
                .iter()
                .zip(&db.shape)
                .all(|(x, y)| x.simplify() == y.simplify());
        let cm: &Memlet = &df.edge(*copy).memlet;
        let copies_all = same_type
            && cm.data == a
            && cm.wcr.is_none()
            && is_full(&cm.subset, &da.shape)
            && cm
                .other_subset
                .as_ref()
                .is_none_or(|o| is_full(o, &db.shape));
        if !copies_all {
            continue;
        }
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
        if writes_whole(df, producer, a, &da.shape) {
            return Some((t1, t2, producer));
        }
    }
    None
}
