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
use crate::pattern::{compact_states, control_names, data_uses, remove_isolated_access_nodes};

/// See the module documentation.
pub struct DeadDataflow;

impl Pass for DeadDataflow {
    fn name(&self) -> &'static str {
        "dead_dataflow"
    }

    fn run(&self, sdfg: &mut Sdfg) -> Changes {
        let mut ch = Changes::default();
        loop {
            let uses = data_uses(sdfg);
            let dead: BTreeSet<String> = sdfg
                .arrays
                .iter()
                .filter(|(name, d)| {
                    d.transient()
                        && uses
                            .get(*name)
                            .is_none_or(|u| u.read_in.is_empty() && !u.in_control)
                })
                .map(|(name, _)| name.clone())
                .collect();
            let mut removed = 0;
            for s in sdfg.body.states() {
                removed += remove_dead_writers(&mut sdfg.states[s.index()].graph, &dead);
            }
            ch.add("nodes_removed", removed);
            if removed == 0 {
                break;
            }
        }
        // Containers nothing mentions.
        let control = control_names(&sdfg.body);
        let mut mentioned: BTreeSet<&str> = control.iter().map(String::as_str).collect();
        for s in sdfg.body.states() {
            mentioned.extend(sdfg.states[s.index()].graph.accessed_data_refs());
        }
        let unused: Vec<String> = sdfg
            .arrays
            .iter()
            .filter(|(n, d)| d.transient() && !mentioned.contains(n.as_str()))
            .map(|(n, _)| n.clone())
            .collect();
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

/// Removes nodes all of whose outputs are dead containers, and the access nodes of dead
/// containers that nothing reads and nothing kept writes (a kept writer — a map or
/// tasklet that also writes a live container — still needs the edge its body's write
/// leaves through; copies from access nodes into them go with them); returns how many
/// nodes went.
fn remove_dead_writers(df: &mut Dataflow, dead: &BTreeSet<String>) -> usize {
    let is_dead_access = |df: &Dataflow, n| {
        df.node(n)
            .as_access()
            .is_some_and(|d| dead.contains(d) && df.out_degree(n) == 0)
    };
    let mut removed = 0;
    for n in df.node_ids() {
        if matches!(df.node(n), Node::Access(_)) {
            continue;
        }
        let outs = df.out_edges(n);
        if !outs.is_empty() && outs.iter().all(|&e| is_dead_access(df, df.endpoints(e).1)) {
            df.graph.remove_node(n);
            removed += 1;
        }
    }
    for n in df.node_ids() {
        let copied_only = df
            .in_edges(n)
            .into_iter()
            .all(|e| df.node(df.endpoints(e).0).as_access().is_some());
        if is_dead_access(df, n) && copied_only {
            df.graph.remove_node(n);
            removed += 1;
        }
    }
    removed + remove_isolated_access_nodes(df)
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
