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
//! The cost of a parameter as the innermost is what the memlets of the map's body (inner
//! maps too) cost per point of that loop ([`Weights`]): nothing for an address that does
//! not vary with it, least for the parameter alone (`p + c`) in a dimension of constant
//! stride 1, more for a stride, most for a gather through an index table (its entry and
//! check at every point; with the levels innermost they are read once per column). The
//! cheapest parameter becomes the last one, the others keep their order; unless it is
//! strictly cheaper than the last, nothing moves. A map whose body
//! reads or writes an array without a dimension of constant stride 1 is left alone: that
//! array's layout is known only at call time (GT4Py passes each field's strides then),
//! and the contiguous dimension of some other array the map reads says nothing about it.
//!
//! Legality: the map is parallel (`CpuParallel` or `GpuDevice`: its iterations are
//! independent, in any order), nothing in its body (nested SDFGs too) resolves write
//! conflicts (a sum's rounding depends on the order) or calls a library node, and what the
//! map reads it does not write ([`node_reads_writes`]: its edges; the body's own scalars
//! and per-worker buffers are private to a point) — or reads only at the point it writes
//! (an update in place, `vn[i, k] = vn[i, k] + …`: each point reads and writes its own
//! element, [`pointwise`]). Only the order of the points changes, not which points
//! run or what each computes. Where a point fails, the error the interpreter reports
//! first may be another failing point's (`docs/transforms.md`, *Errors*).

use std::collections::BTreeSet;

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

    /// Maps are reordered once fusion has settled: a reordered map no longer fuses with
    /// its neighbours, whose parameters are in the other order.
    fn settled(&self) -> bool {
        true
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
                    Node::Map(m) => {
                        innermost(sdfg, &state.graph, n, m).map(|(k, in_place)| (n, k, in_place))
                    }
                    _ => None,
                })
                .collect();
            let g = &mut sdfg.states[s.index()].graph;
            for (n, k, in_place) in moves {
                if in_place {
                    ch.add("loops_reordered_in_place", 1);
                }
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

/// The parameter of map `m` (node `n` of `df`) to move last, when one costs less than
/// the last one ([`costs`]) and reordering `m` is legal; with whether `m` updates a
/// container in place.
fn innermost(sdfg: &Sdfg, df: &Dataflow, n: NodeId, m: &MapScope) -> Option<(usize, bool)> {
    let last = m.params.len().checked_sub(1)?;
    if last == 0 || !matches!(m.schedule, Schedule::CpuParallel | Schedule::GpuDevice) {
        return None;
    }
    // What the map reads and writes, as every pass sees it (its edges: the body's own
    // scalars and per-worker buffers are private to a point).
    let (reads, writes) = node_reads_writes(df, n);
    if !reorderable(&m.body)
        || !reads
            .intersection(&writes)
            .all(|a| pointwise(&m.body, a, &m.params))
    {
        return None;
    }
    let mut cost = vec![0usize; m.params.len()];
    let w = if m.schedule == Schedule::GpuDevice {
        &GPU
    } else {
        &CPU
    };
    let tables = crate::pattern::tables_read(&m.body);
    if !costs(sdfg, &m.body, &m.params, w, &tables, &mut cost) {
        return None;
    }
    let (best, &low) = cost
        .iter()
        .enumerate()
        .min_by_key(|&(k, c)| (*c, std::cmp::Reverse(k)))?;
    (low < cost[last] && best != last).then_some((best, !reads.is_disjoint(&writes)))
}

/// Whether every point of a map with parameters `params` and body `df` reads and writes
/// only its own element of `data`, which both reads and writes: every memlet of `df`
/// naming `data` has the same subset, each dimension an index `p + c` of a distinct
/// parameter, every parameter used (distinct points, distinct elements); no copy and no
/// inner map touches it. An update in place (`vn[i, k] = vn[i, k] + …`) is such a map:
/// its points are independent, in any order.
fn pointwise(df: &Dataflow, data: &str, params: &[String]) -> bool {
    let names: Vec<&str> = params.iter().map(String::as_str).collect();
    let mut seen: Option<&sdflow_ir::Subset> = None;
    for e in df.edge_ids() {
        let (s, d) = df.endpoints(e);
        let memlet = &df.edge(e).memlet;
        let touches = |n| df.node(n).as_access() == Some(data);
        if memlet.data != data {
            if touches(s) || touches(d) {
                return false;
            }
            continue;
        }
        if memlet.other_subset.is_some() || touches(s) && touches(d) {
            return false;
        }
        match seen {
            Some(first) if *first != memlet.subset => return false,
            Some(_) => continue,
            None => seen = Some(&memlet.subset),
        }
        let mut used = vec![false; params.len()];
        for dim in &memlet.subset.0 {
            let Dim::Index(x) = dim else { return false };
            let Some((coeffs, _)) = x.affine_in(&names) else {
                return false;
            };
            let mut nonzero = coeffs.iter().filter(|(_, c)| **c != 0);
            match (nonzero.next(), nonzero.next()) {
                (None, _) => {}
                (Some((p, c)), None) if c.abs() == 1 => {
                    let Some(k) = params.iter().position(|q| q == p) else {
                        return false;
                    };
                    if std::mem::replace(&mut used[k], true) {
                        return false;
                    }
                }
                _ => return false,
            }
        }
        if !used.iter().all(|&u| u) {
            return false;
        }
    }
    df.node_ids().into_iter().all(|n| match df.node(n) {
        Node::Map(im) => !mentions(&im.body, data),
        _ => true,
    })
}

/// Whether a memlet of `df` (inner maps too) names `data`.
fn mentions(df: &Dataflow, data: &str) -> bool {
    df.edge_ids()
        .into_iter()
        .any(|e| df.edge(e).memlet.data == data)
        || df.node_ids().into_iter().any(|n| match df.node(n) {
            Node::Map(im) => mentions(&im.body, data),
            _ => false,
        })
}

/// Whether `df` (inner maps and nested SDFGs too) has no write-conflict resolution and no
/// library node. A nested SDFG (an `if` GT4Py keeps inside a map body) reads and writes
/// what its edges say, at its point.
fn reorderable(df: &Dataflow) -> bool {
    df.edge_ids()
        .into_iter()
        .all(|e| df.edge(e).memlet.wcr.is_none())
        && df.node_ids().into_iter().all(|n| match df.node(n) {
            Node::Library(_) => false,
            Node::Nested(ns) => ns.sdfg.states.iter().all(|st| reorderable(&st.graph)),
            Node::Map(im) => reorderable(&im.body),
            _ => true,
        })
}

/// What one access costs per point of the innermost loop (the GPU's fastest thread
/// index), by how its address varies with that loop's parameter.
struct Weights {
    /// It does not: on the CPU it is loaded once for the whole inner loop; on the GPU
    /// the threads of a warp read one address (one transaction).
    invariant: usize,
    /// The parameter alone (`±p + c`) in a dimension of stride 1: the CPU vectorizes it,
    /// a warp's loads coalesce.
    contiguous: usize,
    /// Strided or computed: a cache line (a transaction) per element.
    strided: usize,
    /// Through an index table: the table's entry, its check, and an element anywhere.
    gather: usize,
}

const CPU: Weights = Weights {
    invariant: 0,
    contiguous: 1,
    strided: 4,
    gather: 6,
};

const GPU: Weights = Weights {
    invariant: 1,
    contiguous: 1,
    strided: 32,
    gather: 32,
};

/// Adds to `cost[k]` what the accesses of `df` (inner maps too) cost per point were
/// `params[k]` the innermost parameter ([`Weights`]); false
/// when an array there has no dimension of constant stride 1 (its strides are symbols,
/// its layout known only at call time: any dimension may be the contiguous one) — unless
/// it is one of the map's index `tables`, read the same whatever the fields' layout
/// (GT4Py passes the neighbour tables' strides at the call where the fields' layout is
/// known): its own accesses then count as strided wherever they move.
fn costs(
    sdfg: &Sdfg,
    df: &Dataflow,
    params: &[String],
    w: &Weights,
    tables: &BTreeSet<String>,
    cost: &mut [usize],
) -> bool {
    let names: Vec<&str> = params.iter().map(String::as_str).collect();
    for e in df.edge_ids() {
        let memlet = &df.edge(e).memlet;
        let Some(DataDesc::Array(a)) = sdfg.arrays.get(&memlet.data) else {
            continue;
        };
        if !a.strides.iter().any(|s| s.as_int() == Some(1)) && !tables.contains(&memlet.data) {
            return false;
        }
        for (k, p) in params.iter().enumerate() {
            let mut varies = false;
            let mut contiguous = true;
            let mut gather = false;
            for (d, stride) in memlet.subset.0.iter().zip(&a.strides) {
                let unit = stride.as_int() == Some(1);
                match d {
                    Dim::Index(x) => {
                        let Some((coeffs, _)) = x.affine_in(&names) else {
                            if x.free_symbols().contains(p.as_str()) {
                                varies = true;
                                contiguous = false;
                            }
                            continue;
                        };
                        let c = coeffs.get(p.as_str()).copied().unwrap_or(0);
                        if c != 0 {
                            varies = true;
                            contiguous &= c.abs() == 1 && unit;
                        }
                    }
                    Dim::Range { start, end, step } => {
                        if [start, end, step]
                            .iter()
                            .any(|x| x.free_symbols().contains(p.as_str()))
                        {
                            varies = true;
                            contiguous = false;
                        }
                    }
                    // An index computed in the body (a scalar table: GT4Py's dynamic
                    // vertical offsets, `k + zd_vertoffset[c, n, k]`) may move with any
                    // parameter, through the values it is computed from.
                    Dim::Indirect {
                        table,
                        index,
                        offset,
                    } => {
                        let computed =
                            matches!(sdfg.arrays.get(table), Some(DataDesc::Scalar { .. }));
                        if computed
                            || index
                                .iter()
                                .chain(std::iter::once(offset))
                                .any(|x| x.free_symbols().contains(p.as_str()))
                        {
                            varies = true;
                            gather = true;
                        }
                    }
                }
            }
            cost[k] += match (varies, gather, contiguous) {
                (false, _, _) => w.invariant,
                (true, true, _) => w.gather,
                (true, false, true) => w.contiguous,
                (true, false, false) => w.strided,
            };
        }
    }
    df.node_ids().into_iter().all(|n| match df.node(n) {
        Node::Map(im) => costs(sdfg, &im.body, params, w, tables, cost),
        _ => true,
    })
}
