//! State fusion: two states that follow each other in a sequence become one when their
//! accesses do not conflict — the second writes nothing the first reads or writes — and
//! every container the first writes and the second reads has one written access node in
//! the first, which the second's readers then read from. Producer and consumer then sit in
//! one dataflow graph, where map fusion can see them.
//!
//! ```text
//! state A: u ─► map f ─► t           state A+B: u ─► map f ─► t ─► map g ─► v
//! state B: t ─► map g ─► v      →
//! ```

use std::collections::{BTreeMap, BTreeSet};

use sdflow_ir::{Block, Dataflow, NodeId, Sdfg};

use crate::pass::{Changes, Pass};
use crate::pattern::{
    compact_states, find_in_seqs, move_into, move_out_edges, reads_writes, tables_read,
    written_node,
};

/// See the module documentation.
pub struct StateFusion;

impl Pass for StateFusion {
    fn name(&self) -> &'static str {
        "state_fusion"
    }

    fn run(&self, sdfg: &mut Sdfg) -> Changes {
        let mut ch = Changes::default();
        let mut fused = 0;
        let states = &mut sdfg.states;
        find_in_seqs(&mut sdfg.body, &mut |items| {
            // Each block either joins the state kept last (when both are states that
            // fuse) or is kept; the sequence is rebuilt once, not shifted per fusion.
            let mut kept: Vec<Block> = Vec::with_capacity(items.len());
            // What the state kept last reads and writes, once known: a merge adds the
            // second state's reads and writes to it, so it is not gathered again.
            let mut last: Option<Access> = None;
            for item in std::mem::take(items) {
                if let (Some(Block::State(a)), Block::State(b)) = (kept.last(), &item)
                    && a != b
                {
                    let (a, b) = (a.index(), b.index());
                    let first = last.get_or_insert_with(|| reads_writes(&states[a].graph));
                    let second = reads_writes(&states[b].graph);
                    if let Some(links) = fusable(&states[a].graph, first, &states[b].graph, &second)
                    {
                        first.0.extend(second.0);
                        first.1.extend(second.1);
                        let second = std::mem::take(&mut states[b].graph);
                        merge(&mut states[a].graph, second, &links);
                        let name = format!("{}+{}", states[a].name, states[b].name);
                        if name.len() <= 64 {
                            states[a].name = name;
                        }
                        fused += 1;
                        continue;
                    }
                }
                last = None;
                kept.push(item);
            }
            *items = kept;
            false
        });
        ch.add("states_fused", fused);
        compact_states(sdfg);
        ch
    }
}

/// The containers a state reads and writes ([`reads_writes`]).
type Access = (BTreeSet<String>, BTreeSet<String>);

/// For each container the first state writes and the second reads: the first state's
/// written access node of it. `None` when the states conflict. `first_rw` and
/// `second_rw` are the states' [`reads_writes`].
fn fusable(
    first: &Dataflow,
    first_rw: &Access,
    second: &Dataflow,
    second_rw: &Access,
) -> Option<BTreeMap<String, NodeId>> {
    let (r1, w1) = first_rw;
    let (r2, w2) = second_rw;
    if w2.iter().any(|d| r1.contains(d) || w1.contains(d)) {
        return None;
    }
    // A table the second state reads through a memlet has no access node to link to the
    // first state's write: keep the states apart.
    if tables_read(second).iter().any(|t| w1.contains(t)) {
        return None;
    }
    let mut links = BTreeMap::new();
    for d in w1.intersection(r2) {
        links.insert(d.clone(), written_node(first, d)?);
    }
    Some(links)
}

/// Copies `second` into `first`, its reads of linked containers coming from the linked
/// access nodes.
fn merge(first: &mut Dataflow, second: Dataflow, links: &BTreeMap<String, NodeId>) {
    let ids = move_into(first, second);
    for (_, &n) in ids.iter() {
        let Some(d) = first.node(n).as_access() else {
            continue;
        };
        if let Some(&target) = links.get(d)
            && first.in_degree(n) == 0
        {
            move_out_edges(first, n, target);
            first.graph.remove_node(n);
        }
    }
}
