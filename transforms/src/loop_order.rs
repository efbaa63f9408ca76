//! Loop order: the innermost loop of a map runs over the dimension its arrays store
//! contiguously. A map's parameters nest in the order they are listed (the first
//! outermost), and the CPU backend's innermost loop — the GPU's fastest thread index —
//! is the last one. A map listed as `(j, i)` over row-major arrays read at `[i, j]`, or
//! `(i, j)` over column-major ones, walks memory with a stride at every step: its last
//! parameter moves to where the stride is 1.
//!
//! ```text
//! map (j, i) { out[i, j] = u[i, j] }   u, out row-major (strides M, 1)
//!                       →
//! map (i, j) { out[i, j] = u[i, j] }
//! ```
//!
//! The score of a parameter is the number of memlets in the map's body (inner maps too)
//! that index, with that parameter alone (`p + c`, `c` free of the map's parameters), a
//! dimension whose stride is the constant 1. The parameter with the highest score becomes
//! the last one, the others keep their order; on a tie nothing moves. A map whose body
//! reads or writes an array without a dimension of constant stride 1 is left alone: that
//! array's layout is known only at call time (GT4Py passes each field's strides then),
//! and the contiguous dimension of some other array the map reads says nothing about it.
//!
//! Legality: the map is parallel (`CpuParallel` or `GpuDevice`: its iterations are
//! independent, in any order), nothing in its body resolves write conflicts (a sum's
//! rounding depends on the order), calls a nested SDFG or a library node, and the map
//! reads nothing it writes ([`node_reads_writes`]: its edges; the body's own scalars and
//! per-worker buffers are private to a point). Only the order of the points changes, not which points
//! run or what each computes. Where a point fails, the error the interpreter reports
//! first may be another failing point's (`docs/transforms.md`, *Errors*).

use sdflow_ir::{DataDesc, Dataflow, Dim, MapScope, Node, NodeId, Schedule, Sdfg};

use crate::pass::{Changes, Pass};
use crate::pattern::node_reads_writes;

/// The most decisions a run spells out in its report.
const MAX_NOTES: usize = 16;

/// See the module documentation.
pub struct LoopOrder;

impl Pass for LoopOrder {
    fn name(&self) -> &'static str {
        "loop_order"
    }

    fn run(&self, sdfg: &mut Sdfg) -> Changes {
        let mut ch = Changes::default();
        for s in sdfg.body.states() {
            let Some(state) = sdfg.states.get(s.index()) else {
                continue;
            };
            let moves: Vec<_> = state
                .graph
                .node_ids()
                .into_iter()
                .filter_map(|n| match state.graph.node(n) {
                    Node::Map(m) => innermost(sdfg, &state.graph, n, m).map(|k| (n, k)),
                    _ => None,
                })
                .collect();
            let g = &mut sdfg.states[s.index()].graph;
            for (n, k) in moves {
                if let Node::Map(m) = &mut g.graph[n] {
                    let p = m.params.remove(k);
                    let r = m.ranges.remove(k);
                    if ch.notes.len() < MAX_NOTES {
                        ch.notes.push(format!(
                            "'{}': '{p}' innermost (the dimension its arrays store contiguously)",
                            m.label
                        ));
                    }
                    m.params.push(p);
                    m.ranges.push(r);
                    ch.add("loops_reordered", 1);
                }
            }
        }
        ch
    }
}

/// The parameter of map `m` (node `n` of `df`) to move last, when one scores higher than
/// the last one and reordering `m` is legal.
fn innermost(sdfg: &Sdfg, df: &Dataflow, n: NodeId, m: &MapScope) -> Option<usize> {
    let last = m.params.len().checked_sub(1)?;
    if last == 0 || !matches!(m.schedule, Schedule::CpuParallel | Schedule::GpuDevice) {
        return None;
    }
    // What the map reads and writes, as every pass sees it (its edges: the body's own
    // scalars and per-worker buffers are private to a point).
    let (reads, writes) = node_reads_writes(df, n);
    if !reorderable(&m.body) || !reads.is_disjoint(&writes) {
        return None;
    }
    let mut score = vec![0usize; m.params.len()];
    if !count(sdfg, &m.body, &m.params, &mut score) {
        return None;
    }
    let (best, &high) = score
        .iter()
        .enumerate()
        .max_by_key(|&(k, s)| (*s, std::cmp::Reverse(k)))?;
    (high > score[last] && best != last).then_some(best)
}

/// Whether `df` (inner maps too) has no write-conflict resolution, nested SDFG or library
/// node.
fn reorderable(df: &Dataflow) -> bool {
    df.edge_ids()
        .into_iter()
        .all(|e| df.edge(e).memlet.wcr.is_none())
        && df.node_ids().into_iter().all(|n| match df.node(n) {
            Node::Nested(_) | Node::Library(_) => false,
            Node::Map(im) => reorderable(&im.body),
            _ => true,
        })
}

/// Adds to each parameter's score the memlets of `df` (inner maps too) that index a
/// dimension of stride 1 with it alone; false when an array there has no dimension of
/// constant stride 1 (its strides are symbols, its layout known only at call time: any
/// dimension may be the contiguous one).
fn count(sdfg: &Sdfg, df: &Dataflow, params: &[String], score: &mut [usize]) -> bool {
    let names: Vec<&str> = params.iter().map(String::as_str).collect();
    for e in df.edge_ids() {
        let memlet = &df.edge(e).memlet;
        let Some(DataDesc::Array(a)) = sdfg.arrays.get(&memlet.data) else {
            continue;
        };
        if !a.strides.iter().any(|s| s.as_int() == Some(1)) {
            return false;
        }
        for (d, stride) in memlet.subset.0.iter().zip(&a.strides) {
            let Dim::Index(x) = d else { continue };
            if stride.as_int() != Some(1) {
                continue;
            }
            let Some((coeffs, _)) = x.affine_in(&names) else {
                continue;
            };
            let mut used = coeffs.iter().filter(|(_, c)| **c != 0);
            if let (Some((p, c)), None) = (used.next(), used.next())
                && c.abs() == 1
                && let Some(k) = params.iter().position(|q| q == p)
            {
                score[k] += 1;
            }
        }
    }
    df.node_ids().into_iter().all(|n| match df.node(n) {
        Node::Map(im) => count(sdfg, &im.body, params, score),
        _ => true,
    })
}
