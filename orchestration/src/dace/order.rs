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

#[cfg(test)]
mod tests {
    use super::*;
    use sdflow_ir::{DType, Memlet, Tasklet};

    fn tasklet(name: &str, code: &str) -> Node {
        Node::Tasklet(Tasklet {
            name: name.into(),
            inputs: [("a".to_string(), DType::F64)].into(),
            outputs: [("b".to_string(), DType::F64)].into(),
            code: vec![sdflow_ir::parse::parse_stmt(code).unwrap()],
        })
    }

    /// `A[i] -> t -> B[sub]` for each `(i, sub)`, every write through its own access node
    /// of B, and a copy of B into C after the second write.
    fn graph(writes: &[(&str, &str)]) -> Dataflow {
        let mut g = Dataflow::new();
        let a = g.add_access("A");
        let mut last = None;
        for (k, (i, sub)) in writes.iter().enumerate() {
            let t = g.add_node(tasklet(&format!("t{k}"), "b = a + 1.0"));
            let b = g.add_access("B");
            g.add_edge(a, None, t, Some("a"), Memlet::parse(&format!("A[{i}]")));
            g.add_edge(t, Some("b"), b, None, Memlet::parse(&format!("B[{sub}]")));
            last = Some(b);
        }
        let c = g.add_access("C");
        g.add_edge(last.unwrap(), None, c, None, Memlet::parse("B[0]"));
        g
    }

    #[test]
    fn writes_disjoint_only_at_run_time_are_ordered() {
        // B[0:min(k, 8)] and B[max(0, k):8]: not provably disjoint.
        let g = graph(&[("0", "0:min(k, 8)"), ("1", "max(0, k):8")]);
        let parts = split_unordered_writes(g);
        assert_eq!(parts.len(), 2);
        // The first part holds the first write; the second the other write and the copy
        // that reads B after it, and reads A through an access node of its own.
        let names = |g: &Dataflow| -> Vec<String> {
            g.node_ids().iter().map(|n| g.node(*n).describe()).collect()
        };
        assert_eq!(
            names(&parts[0]),
            ["access 'A'", "tasklet 't0'", "access 'B'"]
        );
        assert_eq!(
            names(&parts[1]),
            ["tasklet 't1'", "access 'B'", "access 'C'", "access 'A'"]
        );
        assert_eq!(parts[1].edge_ids().len(), 3);
    }

    #[test]
    fn provably_disjoint_writes_stay_in_one_state() {
        let g = graph(&[("0", "0:4"), ("1", "4:8")]);
        assert_eq!(split_unordered_writes(g).len(), 1);
    }
}
