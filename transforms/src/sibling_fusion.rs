//! Sibling map fusion: maps of one state over the same ranges, with the same schedule,
//! that read a common input and do not depend on each other (no path between them, no
//! container one writes and the other accesses) become one map, whose body reads each
//! shared input once. Candidates are grouped by their ranges first, so the pass is not
//! quadratic in the number of maps of a state.
//!
//! ```text
//!        ┌─► map A ─► x               u ─► map A+B ─► x
//! u ─────┤                      →                 └──► y
//!        └─► map B ─► y                 body: one read of u[i, j], both tasklets
//! ```

use std::collections::BTreeMap;

use sdflow_ir::{Dataflow, MapScope, Node, NodeId, Sdfg};

use crate::map_fusion::shares_locals;
use crate::pass::{Changes, Pass};
use crate::pattern::{
    binds_any, move_into, move_out_edges, neighbours, node_reads_writes, renamed_body, replace_map,
    same_ranges,
};

/// See the module documentation.
pub struct SiblingFusion;

impl Pass for SiblingFusion {
    fn name(&self) -> &'static str {
        "sibling_fusion"
    }

    fn run(&self, sdfg: &mut Sdfg) -> Changes {
        let mut ch = Changes::default();
        for s in sdfg.body.states() {
            let mut graph = std::mem::take(&mut sdfg.states[s.index()].graph);
            while let Some((a, b)) = find(sdfg, &graph) {
                fuse(sdfg, &mut graph, a, b);
                ch.add("maps_fused", 1);
            }
            sdfg.states[s.index()].graph = graph;
        }
        ch
    }
}

fn find(sdfg: &Sdfg, df: &Dataflow) -> Option<(NodeId, NodeId)> {
    let mut groups: BTreeMap<String, Vec<NodeId>> = BTreeMap::new();
    for n in df.node_ids() {
        if let Node::Map(m) = df.node(n) {
            let key = format!(
                "{:?}|{}",
                m.schedule,
                m.ranges
                    .iter()
                    .map(|r| r.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            );
            groups.entry(key).or_default().push(n);
        }
    }
    if groups.values().all(|g| g.len() < 2) {
        return None;
    }
    let reach = df.reachability()?;
    for group in groups.values().filter(|g| g.len() > 1) {
        for (i, &a) in group.iter().enumerate() {
            let (ra, wa) = node_reads_writes(df, a);
            for &b in &group[i + 1..] {
                let (Node::Map(ma), Node::Map(mb)) = (df.node(a), df.node(b)) else {
                    continue;
                };
                if reach.ordered(a, b) || !same_ranges(&ma.ranges, &mb.ranges) {
                    continue;
                }
                let (rb, wb) = node_reads_writes(df, b);
                let shares_input = ra.iter().any(|d| rb.contains(d));
                let conflict = wa.iter().any(|d| rb.contains(d) || wb.contains(d))
                    || wb.iter().any(|d| ra.contains(d));
                if shares_input
                    && !conflict
                    && !shares_locals(&sdfg.arrays, ma, mb)
                    && !binds_any(&mb.body, &ma.params)
                {
                    return Some((a, b));
                }
            }
        }
    }
    None
}

fn fuse(sdfg: &Sdfg, df: &mut Dataflow, a: NodeId, b: NodeId) {
    let (Node::Map(ma), Node::Map(mb)) = (df.node(a).clone(), df.node(b).clone()) else {
        return;
    };
    let b_body = renamed_body(&mb.body, &mb.params, &ma.params);
    let mut body = ma.body.clone();
    let mut a_sources: BTreeMap<String, NodeId> = BTreeMap::new();
    for n in body.node_ids() {
        if let Some(d) = body.node(n).as_access()
            && body.in_degree(n) == 0
        {
            a_sources.entry(d.to_string()).or_insert(n);
        }
    }
    let ids = move_into(&mut body, b_body);
    for &n in ids.values() {
        if let Some(d) = body.node(n).as_access()
            && body.in_degree(n) == 0
            && let Some(&keep) = a_sources.get(d)
        {
            move_out_edges(&mut body, n, keep);
            body.graph.remove_node(n);
        }
    }
    let (mut sources, mut dests) = neighbours(df, a);
    let (sb, db) = neighbours(df, b);
    for (k, v) in sb {
        sources.entry(k).or_insert(v);
    }
    for (k, v) in db {
        dests.entry(k).or_insert(v);
    }
    let label = format!("{}+{}", ma.label, mb.label);
    let scope = MapScope { label, body, ..ma };
    replace_map(
        &sdfg.arrays,
        df,
        a,
        scope,
        &[b],
        (&sources, &dests),
        &mut sdflow_ir::propagate::BoundaryMemo::default(),
    );
}
