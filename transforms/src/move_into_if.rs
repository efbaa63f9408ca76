//! Move dataflow into if: a node of the state right before a conditional, all of whose
//! results are transients read only inside one branch (and nowhere else in the program),
//! moves into a new state at the start of that branch, so it runs only when the branch
//! does. The same for the dataflow form of a conditional, a nested SDFG whose body is an
//! `if` (see `move_into_nested_if.rs`). Repeated until nothing moves.
//!
//! ```text
//! state: u ─► map A ─► t                     if flag != 0:
//! if flag != 0:                                  state: u ─► map A ─► t
//!     state: t ─► map B ─► out         →         state: t ─► map B ─► out
//! ```
//!
//! Legality: the node's inputs are not written in its state except before it (by its
//! ancestors), so reading them later, at the start of the branch, reads the same values;
//! the condition cannot depend on the results (they are transients the control flow does
//! not read). When the state and the `if` are inside a loop, a transient keeps its value
//! from one iteration to the next, so the branch could read what the node wrote on an
//! iteration that did not take it: there the node must write each of its transients
//! whole, without conflict resolution (`pattern::writes_whole`), so that every value the
//! branch reads was written at the start of the same iteration's branch.
//!
//! Termination: every move takes one dataflow node from a state at control-flow depth
//! `d` into a new state at depth `d + 1` (inside the branch), and nothing moves a node
//! up. The sum over nodes of (deepest possible depth − depth) is a natural number that
//! every move decreases, so the pass stops after at most (nodes × depth of the control
//! flow) moves, whatever the input. (`tests/` check this on random programs.)

use std::collections::{BTreeMap, BTreeSet};

use sdflow_ir::{Block, DataDesc, Dataflow, NodeId, Sdfg, StateId};

use crate::pass::{Changes, Pass};
use crate::pattern::{
    DataUses, data_uses, find_in_seqs_looped, remove_isolated_access_nodes, writes_whole,
};

/// See the module documentation.
pub struct MoveIntoIf;

impl Pass for MoveIntoIf {
    fn name(&self) -> &'static str {
        "move_into_if"
    }

    fn run(&self, sdfg: &mut Sdfg) -> Changes {
        let mut ch = Changes::default();
        loop {
            let uses = data_uses(sdfg);
            let transients: BTreeSet<String> = sdfg
                .arrays
                .iter()
                .filter(|(_, d)| d.transient())
                .map(|(k, _)| k.clone())
                .collect();
            let states = &mut sdfg.states;
            let arrays = &sdfg.arrays;
            let found = find_in_seqs_looped(&mut sdfg.body, false, &mut |items, in_loop| {
                for i in 0..items.len().saturating_sub(1) {
                    let (Block::State(s), Block::If(cond)) = (&items[i], &items[i + 1]) else {
                        continue;
                    };
                    let s = s.index();
                    let then_states: BTreeSet<usize> =
                        cond.then.states().iter().map(|x| x.index()).collect();
                    let else_states: BTreeSet<usize> =
                        cond.otherwise.states().iter().map(|x| x.index()).collect();
                    let df = &states[s].graph;
                    for n in df.node_ids() {
                        let here = Here {
                            uses: &uses,
                            transients: &transients,
                            arrays,
                            in_loop,
                        };
                        let Some(then_branch) =
                            movable(&here, df, n, s, &then_states, &else_states)
                        else {
                            continue;
                        };
                        let graph = take_node(&mut states[s].graph, n);
                        let Block::If(cond) = &mut items[i + 1] else {
                            unreachable!()
                        };
                        let id = StateId(states.len() as u32);
                        states.push(sdflow_ir::State {
                            name: format!("{}_moved", states[s].name),
                            graph,
                        });
                        let branch = if then_branch {
                            &mut cond.then
                        } else {
                            &mut cond.otherwise
                        };
                        branch.prepend(Block::State(id));
                        return true;
                    }
                }
                false
            });
            if found || crate::move_into_nested_if::move_one(sdfg) {
                ch.add("nodes_moved", 1);
            } else {
                break;
            }
        }
        ch
    }
}

/// What [`movable`] knows about the program around the state.
struct Here<'a> {
    uses: &'a DataUses,
    transients: &'a BTreeSet<String>,
    arrays: &'a BTreeMap<String, DataDesc>,
    /// The state and the `if` run inside a loop.
    in_loop: bool,
}

/// `Some(true)` when node `n` of state `s` may move into the `then` branch, `Some(false)`
/// for the `else` branch.
fn movable(
    here: &Here<'_>,
    df: &Dataflow,
    n: NodeId,
    s: usize,
    then_states: &BTreeSet<usize>,
    else_states: &BTreeSet<usize>,
) -> Option<bool> {
    if df.node(n).as_access().is_some() {
        return None;
    }
    let outs = df.out_edges(n);
    if outs.is_empty() {
        return None;
    }
    let mut branch: Option<bool> = None;
    for e in &outs {
        let dst = df.endpoints(*e).1;
        let d = df.node(dst).as_access()?;
        if df.out_degree(dst) > 0 || df.in_degree(dst) != 1 {
            return None;
        }
        let u = here.uses.get(d)?;
        if u.in_control || !here.transients.contains(d) || df.access_nodes(d).len() != 1 {
            return None;
        }
        // Inside a loop the transient keeps its value across iterations: on an iteration
        // where the branch is not taken, the moved node would not write it, and a later
        // iteration's branch would read the older value. The node must then kill every
        // element the branch can read: write the whole transient, plainly.
        if here.in_loop && !writes_whole(df, n, d, here.arrays.get(d)?.shape()) {
            return None;
        }
        let elsewhere = |x: &usize| *x != s;
        let in_then = u
            .states
            .iter()
            .filter(|x| elsewhere(x))
            .all(|x| then_states.contains(x));
        let in_else = u
            .states
            .iter()
            .filter(|x| elsewhere(x))
            .all(|x| else_states.contains(x));
        let read_then = u.read_in.iter().any(|x| then_states.contains(x));
        let read_else = u.read_in.iter().any(|x| else_states.contains(x));
        let here = match (in_then && read_then, in_else && read_else) {
            (true, false) => true,
            (false, true) => false,
            _ => return None,
        };
        if branch.is_some_and(|b| b != here) {
            return None;
        }
        branch = Some(here);
    }
    let from_access = df
        .in_edges(n)
        .into_iter()
        .all(|e| df.node(df.endpoints(e).0).as_access().is_some());
    if !from_access {
        return None;
    }
    // The inputs are final when `n` runs: every write of them in this state comes before.
    let inputs: BTreeSet<String> = df
        .in_edges(n)
        .into_iter()
        .map(|e| df.edge(e).memlet.data.clone())
        .collect();
    for d in &inputs {
        for x in df.access_nodes(d) {
            if df.in_degree(x) > 0 && !df.reaches(x, n) {
                return None;
            }
        }
    }
    branch
}

/// Removes node `n` and its output access nodes from `df`, returning a graph of it with
/// fresh access nodes for its inputs and its outputs.
fn take_node(df: &mut Dataflow, n: NodeId) -> Dataflow {
    let mut g = Dataflow::new();
    let m = g.add_node(df.node(n).clone());
    let mut sources: BTreeMap<String, NodeId> = BTreeMap::new();
    for e in df.in_edges(n) {
        let edge = df.edge(e).clone();
        let src = *sources
            .entry(edge.memlet.data.clone())
            .or_insert_with(|| g.add_access(&edge.memlet.data));
        g.graph.add_edge(src, m, edge);
    }
    let mut outs = Vec::new();
    for e in df.out_edges(n) {
        let edge = df.edge(e).clone();
        let dst_old = df.endpoints(e).1;
        let dst = g.add_access(&edge.memlet.data);
        g.graph.add_edge(m, dst, edge);
        outs.push(dst_old);
    }
    df.graph.remove_node(n);
    for o in outs {
        df.graph.remove_node(o);
    }
    remove_isolated_access_nodes(df);
    g
}
