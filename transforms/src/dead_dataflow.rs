//! Dead dataflow and dead transients: a transient that nothing reads is dead, and so is
//! every node whose outputs all go to dead transients; transients nothing mentions any
//! more are removed from the program; states left empty leave the control flow, and so
//! do conditionals with two empty branches.
//!
//! ```text
//! in ─► map A ─► tmp (never read)          in ─► map B ─► out
//! in ─► map B ─► out                  →
//! ```

use std::collections::BTreeSet;

use sdflow_ir::{Block, Dataflow, Node, Sdfg};

use crate::pass::{Changes, Pass};
use rustc_hash::FxHashSet;

use crate::pattern::{
    compact_states, control_names, for_each_state_parallel, for_each_use,
    remove_isolated_access_nodes,
};

/// See the module documentation.
pub struct DeadDataflow;

impl Pass for DeadDataflow {
    fn name(&self) -> &'static str {
        "dead_dataflow"
    }

    fn run(&self, sdfg: &mut Sdfg) -> Changes {
        let mut ch = Changes::default();
        let control = control_names(&sdfg.body);
        // The dead transients of the program as it is after the loop.
        let dead = loop {
            let read = read_names(sdfg, &control);
            let dead: FxHashSet<String> = sdfg
                .arrays
                .iter()
                .filter(|(name, d)| d.transient() && !read.contains(name.as_str()))
                .map(|(name, _)| name.clone())
                .collect();
            // States in parallel: each state's dead writers are its own.
            let (removed, reads_lost) =
                for_each_state_parallel(sdfg, 1, |_, graph| remove_dead_writers(graph, &dead))
                    .into_iter()
                    .fold((0, false), |(n, lost), (_, (k, l))| (n + k, lost || l));
            ch.add("nodes_removed", removed);
            // Only a removed node that read something can leave a container unread:
            // otherwise the program reads what it read before, and nothing more is dead.
            if removed == 0 || !reads_lost {
                break dead;
            }
        };
        // Containers nothing mentions: dead ones only (a container read is mentioned),
        // and among those, the ones no access node, map body or index table names.
        let unused: Vec<String> = if dead.is_empty() {
            Vec::new()
        } else {
            let mut mentioned: FxHashSet<&str> = FxHashSet::default();
            for s in sdfg.body.states() {
                sdfg.states[s.index()].graph.for_each_accessed(&mut |d| {
                    if dead.contains(d) {
                        mentioned.insert(d);
                    }
                });
            }
            sdfg.arrays
                .keys()
                .filter(|n| dead.contains(n.as_str()) && !mentioned.contains(n.as_str()))
                .cloned()
                .collect()
        };
        for n in &unused {
            sdfg.arrays.remove(n);
        }
        ch.add("transients_removed", unused.len());
        let states = sdfg
            .states
            .iter()
            .map(|s| s.graph.node_count() == 0)
            .collect::<Vec<_>>();
        ch.add("empty_states_removed", drop_empty(&mut sdfg.body, &states));
        compact_states(sdfg);
        ch
    }
}

/// The containers the program reads: in the states the control flow runs, what
/// [`for_each_use`] calls read, and the names the control flow reads.
fn read_names<'a>(sdfg: &'a Sdfg, control: &'a BTreeSet<String>) -> FxHashSet<&'a str> {
    let mut read: FxHashSet<&str> = control.iter().map(String::as_str).collect();
    for s in sdfg.body.states() {
        let Some(state) = sdfg.state(s) else { continue };
        for_each_use(&state.graph, |d, u| {
            if u.read {
                read.insert(d);
            }
        });
    }
    read
}

/// Removes nodes all of whose outputs are dead containers, and the access nodes of dead
/// containers that nothing reads and nothing kept writes (a kept writer — a map or
/// tasklet that also writes a live container — still needs the edge its body's write
/// leaves through; copies from access nodes into them go with them); returns how many
/// nodes went, and whether any of them had in-edges (reads that are now gone).
fn remove_dead_writers(df: &mut Dataflow, dead: &FxHashSet<String>) -> (usize, bool) {
    use petgraph::Direction::{Incoming, Outgoing};
    use petgraph::visit::EdgeRef;
    let is_dead_access = |df: &Dataflow, n| {
        df.node(n)
            .as_access()
            .is_some_and(|d| dead.contains(d) && df.out_degree(n) == 0)
    };
    let mut removed = 0;
    let mut reads_lost = false;
    // Most graphs have no access node of a dead container: nothing of theirs goes.
    let any_dead = df
        .graph
        .node_weights()
        .any(|n| n.as_access().is_some_and(|d| dead.contains(d)));
    if any_dead {
        let ids = df.node_ids();
        for &n in &ids {
            if matches!(df.node(n), Node::Access(_)) {
                continue;
            }
            let mut outs = df.graph.edges_directed(n, Outgoing).peekable();
            if outs.peek().is_some() && outs.all(|e| is_dead_access(df, e.target())) {
                reads_lost |= df.in_degree(n) > 0;
                df.graph.remove_node(n);
                removed += 1;
            }
        }
        for &n in &ids {
            if !df.graph.contains_node(n) {
                continue;
            }
            let copied_only = df
                .graph
                .edges_directed(n, Incoming)
                .all(|e| df.node(e.source()).as_access().is_some());
            if is_dead_access(df, n) && copied_only {
                reads_lost |= df.in_degree(n) > 0;
                df.graph.remove_node(n);
                removed += 1;
            }
        }
    }
    (removed + remove_isolated_access_nodes(df), reads_lost)
}

/// Drops empty states and conditionals with two empty branches from sequences.
fn drop_empty(block: &mut Block, empty_state: &[bool]) -> usize {
    let mut n = 0;
    match block {
        Block::Seq(items) => {
            for b in items.iter_mut() {
                n += drop_empty(b, empty_state);
            }
            let before = items.len();
            items.retain(|b| !is_nothing(b, empty_state));
            n += before - items.len();
        }
        Block::Loop(l) => n += drop_empty(&mut l.body, empty_state),
        Block::If(i) => {
            n += drop_empty(&mut i.then, empty_state) + drop_empty(&mut i.otherwise, empty_state);
        }
        Block::State(_) | Block::Assign(_) => {}
    }
    n
}

fn is_nothing(b: &Block, empty_state: &[bool]) -> bool {
    match b {
        Block::State(s) => empty_state.get(s.index()).copied().unwrap_or(false),
        Block::Seq(items) => items.iter().all(|x| is_nothing(x, empty_state)),
        Block::If(i) => is_nothing(&i.then, empty_state) && is_nothing(&i.otherwise, empty_state),
        Block::Loop(_) | Block::Assign(_) => false,
    }
}
