//! Unordered writes of one container in one DaCe state, ordered by splitting the state.
//!
//! DaCe accepts a state in which two nodes write the same container with no path between
//! them; the program is correct when the written regions are disjoint at run time, which
//! GT4Py relies on for `concat_where` (one map writes `[0:max(hs, min(he, k)) - hs]`, another
//! `[max(hs, k) - hs:…]`: disjoint for every value of the symbols, but not provably so for
//! sdflow's symbolic bounds). sdflow's validation refuses such a pair, since it cannot tell
//! a race from disjoint writes. Running the one write before the other keeps DaCe's result
//! in every case where DaCe's program is well defined (disjoint regions give the same
//! values in either order), so the importer splits the state in two: the first holds the
//! first writer with everything it depends on, the second the rest. Passes and backends
//! respect the order by construction, as they respect any two states.

use std::collections::{BTreeMap, BTreeSet};

use sdflow_ir::propagate::disjoint;
use sdflow_ir::{Dataflow, Node, NodeId, Subset};

/// One write of a container: the writing node and the subset written.
struct Write<'a> {
    writer: NodeId,
    data: &'a str,
    subset: &'a Subset,
    wcr: bool,
}

/// `g` as a sequence of dataflow graphs, each free of pairs of unordered writes to one
/// container whose regions are not provably disjoint: `g` itself when it has none. A pair
/// whose first writer cannot be separated from the second (a path through a third node
/// forces them into one part) stays in one graph, for validation to report.
pub(super) fn split_unordered_writes(g: Dataflow) -> Vec<Dataflow> {
    let mut done = Vec::new();
    let mut todo = vec![g];
    while let Some(g) = todo.pop() {
        match split_once(&g) {
            Some((first, second)) => {
                // Work on `first` next, then `second`: the result stays in program order.
                todo.push(second);
                todo.push(first);
            }
            None => done.push(g),
        }
    }
    done
}

/// Splits `g` at its first unordered pair of writes (in node order), if it has one.
fn split_once(g: &Dataflow) -> Option<(Dataflow, Dataflow)> {
    let mut writes: Vec<Write<'_>> = Vec::new();
    for e in g.edge_ids() {
        let (s, d) = g.endpoints(e);
        let Some(data) = g.node(d).as_access() else {
            continue;
        };
        let m = &g.edge(e).memlet;
        let subset = if g.node(s).as_access().is_some() {
            m.other_subset.as_ref().unwrap_or(&m.subset)
        } else {
            &m.subset
        };
        writes.push(Write {
            writer: s,
            data,
            subset,
            wcr: m.wcr.is_some(),
        });
    }
    writes.sort_by_key(|w| (w.data, w.writer));
    let reach = g.reachability()?;
    for (i, a) in writes.iter().enumerate() {
        for b in &writes[i + 1..] {
            if a.data != b.data
                || a.writer == b.writer
                || (a.wcr && b.wcr)
                || disjoint(a.subset, b.subset)
                || reach.ordered(a.writer, b.writer)
            {
                continue;
            }
            let (x, y) = if a.writer <= b.writer {
                (a.writer, b.writer)
            } else {
                (b.writer, a.writer)
            };
            if let Some(parts) = split_before(g, x, y).or_else(|| split_before(g, y, x)) {
                return Some(parts);
            }
        }
    }
    None
}

/// `g` as two graphs, the first holding `first`, the writes of `first` and every node it
/// depends on, the second the rest, `second` among them; `None` when `second` cannot leave
/// the first part.
fn split_before(g: &Dataflow, first: NodeId, second: NodeId) -> Option<(Dataflow, Dataflow)> {
    // The first part: `full` nodes, closed under predecessors, and the access nodes they
    // write (`targets`: a write happens in the state of its writer). A target access node
    // may also be written by nodes of the second part (the other write of the pair) and
    // read there: it has an instance in each part.
    let mut full: BTreeSet<NodeId> = BTreeSet::new();
    let mut targets: BTreeSet<NodeId> = BTreeSet::new();
    let mut stack = vec![first];
    while let Some(n) = stack.pop() {
        if !full.insert(n) {
            continue;
        }
        targets.remove(&n);
        for e in g.in_edges(n) {
            stack.push(g.endpoints(e).0);
        }
        let copy_source = n == first;
        for e in g.out_edges(n) {
            let d = g.endpoints(e).1;
            match g.node(d) {
                Node::Access(_) if copy_source || g.node(n).as_access().is_none() => {
                    if !full.contains(&d) {
                        targets.insert(d);
                    }
                }
                Node::Access(_) => {}
                // Computation-to-computation edges (tasklet chains) stay together.
                _ => {
                    if g.node(n).as_access().is_none() {
                        stack.push(d);
                    }
                }
            }
        }
    }
    if full.contains(&second) || targets.contains(&second) {
        return None;
    }
    let mut one = Dataflow::new();
    let mut two = Dataflow::new();
    let mut one_of = BTreeMap::new();
    let mut two_of = BTreeMap::new();
    for n in g.node_ids() {
        if full.contains(&n) || targets.contains(&n) {
            one_of.insert(n, one.add_node(g.node(n).clone()));
        } else {
            two_of.insert(n, two.add_node(g.node(n).clone()));
        }
    }
    for e in g.edge_ids() {
        let (s, d) = g.endpoints(e);
        let edge = g.edge(e).clone();
        if let (Some(&s1), Some(&d1)) = (one_of.get(&s), one_of.get(&d))
            && !(targets.contains(&d) && !full.contains(&s) && g.node(s).as_access().is_some())
        {
            one.graph.add_edge(s1, d1, edge);
            continue;
        }
        // An edge of the second part; its ends from the first part are access nodes (read
        // after the first part, or written again), given an instance of their own.
        let mut second_of = |n: NodeId| -> Option<NodeId> {
            if let Some(&m) = two_of.get(&n) {
                return Some(m);
            }
            let data = g.node(n).as_access()?;
            let m = two.add_access(data);
            two_of.insert(n, m);
            Some(m)
        };
        let (s2, d2) = (second_of(s)?, second_of(d)?);
        two.graph.add_edge(s2, d2, edge);
    }
    Some((one, two))
}
