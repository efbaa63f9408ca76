//! Row fusion: a map B that works row by row on what an earlier map A wrote runs inside
//! A, row by row. Both iterate the same rows (their first parameter, over the same
//! range); whatever one of them writes and the other touches, both touch only at the row
//! of their own point. One map over the rows then runs, per row, A's inner loops and then
//! B's: B's inner ranges may differ from A's (a band of levels, the interior of a row),
//! which the producer–consumer fusions cannot merge, and what B reads of A's results is
//! still in cache. B's state may sit further down the sequence, after states it commutes
//! with: their accesses and B's provably touch disjoint parts of every container that one
//! side writes (`min`/`max` reasoning over the memlets' bounds).
//!
//! ```text
//! state P: u ─► map A (i, k ∈ 0:K) ─► w        state P: u, v ─► map (i) ─► w
//! state S: w[0:1] = …      (rows apart)   →              body: map A (k ∈ 0:K) ─► w
//! state C: w, v ─► map B (i, k ∈ 1:r) ─► w                     w, v ─► map B (k ∈ 1:r) ─► w
//!                                                  state S: w[0:1] = …
//! ```
//!
//! GT4Py lowers ICON's "damping layer" updates (`w += … where k < nrdmax`) so: a map
//! writes a field over the interior, states copy the boundary zones, and a map updates a
//! band of levels of the interior in place.
//!
//! Legality. B is alone in its state (with its access nodes), both maps have the same
//! schedule, two parameters, and the same first range. Every container one of them
//! writes and the other touches is accessed by both only at their own row (a dimension
//! indexed by the first parameter plus an offset free of the parameters, the same
//! dimension and offset everywhere), and never through an index table. What B writes, A
//! does not read (within a row A runs first), and nothing else in P touches it but A's
//! write; what B writes and A writes, B reads first, within what A writes at B's point
//! (so the row's order is A's write, B's read, B's write). Every container B reads that
//! another node of P writes has one written access node in P, not downstream of A, which
//! A reads too if it reads the container at all: the fused map reads it there. The
//! states B moves across commute with it, and the control flow runs P and C at one place
//! each.
//!
//! Cost. None is added: each map's work is the same, and a row's values are reused from
//! cache rather than memory. The GPU pipeline leaves the pass out: a thread per row would
//! lose the parallelism of the inner dimensions.

use std::collections::{BTreeMap, BTreeSet};

use petgraph::algo::has_path_connecting;
use sdflow_ir::propagate::{BoundaryMemo, disjoint_proven};
use sdflow_ir::{Block, DataDesc, Dataflow, Dim, MapScope, Node, NodeId, StateId, Subset, SymExpr};

use crate::pass::{Changes, Pass};
use crate::pattern::{
    compact_states, connect_map, find_in_seqs, map_written_boxes, neighbours, node_reads_writes,
    reads_writes, replace_map, same_ranges, substitute_params, tables_read, written_node,
};

/// See the module documentation.
pub struct RowFusion;

impl Pass for RowFusion {
    fn name(&self) -> &'static str {
        "row_fusion"
    }

    /// Late: on the program the cleanups and the other fusions have settled (a write-back
    /// they would still merge keeps B apart from its producer's field until then).
    fn settled(&self) -> bool {
        true
    }

    fn run(&self, sdfg: &mut sdflow_ir::Sdfg) -> Changes {
        let mut ch = Changes::default();
        let (mut fused, mut moved) = (0, 0);
        let mut memo = BoundaryMemo::default();
        let symbols: BTreeSet<String> = sdfg.symbols.keys().cloned().collect();
        // States the control flow runs at one place only: a state run at two would
        // change at both.
        let mut runs = vec![0usize; sdfg.states.len()];
        for s in sdfg.body.states() {
            if let Some(r) = runs.get_mut(s.index()) {
                *r += 1;
            }
        }
        let arrays = &sdfg.arrays;
        let states = &mut sdfg.states;
        // Each state's accesses, computed once (a fusion changes the producer's).
        let mut prints: BTreeMap<StateId, Vec<Access>> = BTreeMap::new();
        find_in_seqs(&mut sdfg.body, &mut |seq| {
            // A sequence inside a sequence is part of it: B may move across its ends. The
            // flattened form replaces the sequence only where a fusion used it.
            let mut flat = flatten(seq.clone());
            let items = &mut flat;
            let before = fused;
            let mut j = 0;
            while j < items.len() {
                let Block::State(c) = items[j] else {
                    j += 1;
                    continue;
                };
                if lone_map(&states[c.index()].graph).is_none() {
                    j += 1;
                    continue;
                }
                let c_acc = prints
                    .entry(c)
                    .or_insert_with(|| footprint(&states[c.index()].graph))
                    .clone();
                // The first state up the sequence that B does not commute with.
                let mut i = j;
                let mut producer = None;
                while i > 0 {
                    i -= 1;
                    let Block::State(s) = items[i] else { break };
                    if s == c {
                        break;
                    }
                    let s_acc = prints
                        .entry(s)
                        .or_insert_with(|| footprint(&states[s.index()].graph));
                    if !commutes(s_acc, &c_acc) {
                        producer = Some(s);
                        break;
                    }
                }
                let Some(p) = producer.filter(|p| runs[p.index()] == 1 && runs[c.index()] == 1)
                else {
                    j += 1;
                    continue;
                };
                let (pi, ci) = (p.index(), c.index());
                let second = std::mem::take(&mut states[ci].graph);
                let mut pg = std::mem::take(&mut states[pi].graph);
                let done = fuse(arrays, &symbols, &mut pg, &second, &mut memo);
                states[pi].graph = pg;
                if done {
                    prints.remove(&p);
                    let name = format!("{}+{}", states[pi].name, states[ci].name);
                    if name.len() <= 64 {
                        states[pi].name = name;
                    }
                    fused += 1;
                    if i + 1 < j {
                        moved += 1;
                    }
                    items.remove(j);
                } else {
                    states[ci].graph = second;
                    j += 1;
                }
            }
            if fused > before {
                *seq = flat;
            }
            false
        });
        ch.add("maps_row_fused", fused);
        ch.add("states_moved_up", moved);
        compact_states(sdfg);
        ch
    }
}

/// The blocks of a sequence with the sequences among them spliced in (the same program).
fn flatten(items: Vec<Block>) -> Vec<Block> {
    let mut out = Vec::with_capacity(items.len());
    for b in items {
        match b {
            Block::Seq(inner) => out.extend(flatten(inner)),
            other => out.push(other),
        }
    }
    out
}

/// The map node of a state that holds one map and the access nodes of its edges.
fn lone_map(df: &Dataflow) -> Option<NodeId> {
    let mut map = None;
    for n in df.node_ids() {
        match df.node(n) {
            Node::Access(_) => {}
            Node::Map(_) if map.is_none() => map = Some(n),
            _ => return None,
        }
    }
    let m = map?;
    df.edge_ids()
        .into_iter()
        .all(|e| {
            let (u, v) = df.endpoints(e);
            u == m || v == m
        })
        .then_some(m)
}

/// One access of a state: the container, the part touched (`None`: unknown, the whole),
/// whether it is written.
type Access = (String, Option<Subset>, bool);

/// Every access of a state's graph, by its edges' memlets: an edge into an access node
/// writes it, one out of an access node reads it, and a memlet's index tables are read
/// whole.
fn footprint(df: &Dataflow) -> Vec<Access> {
    let mut out = Vec::new();
    for e in df.edge_ids() {
        let (u, v) = df.endpoints(e);
        let m = &df.edge(e).memlet;
        // The subset of container `d` an edge with access node `d` at one end moves.
        let side = |d: &str| {
            if m.data == d {
                Some(m.subset.clone())
            } else {
                m.other_subset.clone()
            }
        };
        let (from, to) = (df.node(u).as_access(), df.node(v).as_access());
        if let (Some(a), Some(b)) = (from, to)
            && a == b
        {
            // A copy within one container: either subset may be either end.
            for sub in [Some(m.subset.clone()), m.other_subset.clone()] {
                out.push((a.to_string(), sub.clone(), true));
                out.push((a.to_string(), sub, false));
            }
        } else {
            if let Some(d) = to {
                out.push((d.to_string(), side(d), true));
            }
            if let Some(d) = from {
                out.push((d.to_string(), side(d), false));
            }
        }
        for s in std::iter::once(&m.subset).chain(&m.other_subset) {
            for t in s.tables() {
                out.push((t.to_string(), None, false));
            }
        }
    }
    out
}

/// True when the two states' accesses may run in either order: every container one
/// writes and the other touches, they touch in provably disjoint parts.
fn commutes(a: &[Access], b: &[Access]) -> bool {
    a.iter().all(|(d, x, xw)| {
        b.iter()
            .filter(|(e, _, yw)| e == d && (*xw || *yw))
            .all(|(_, y, _)| matches!((x, y), (Some(x), Some(y)) if disjoint_proven(x, y)))
    })
}

/// Where every access of `d` in `body` (at its top level) finds its row: the dimension
/// indexed by the first of `params` plus an offset free of them, the same dimension and offset for
/// all (`Some(None)` when the body does not access `d`). `None` when an access has no
/// such dimension, another one or another offset, or reads `d` as an index table.
fn row_dim(body: &Dataflow, d: &str, params: &[String]) -> Option<Option<(usize, SymExpr)>> {
    let p = params[0].as_str();
    let mut found: Option<(usize, SymExpr)> = None;
    for e in body.edge_ids() {
        let (u, v) = body.endpoints(e);
        let m = &body.edge(e).memlet;
        if std::iter::once(&m.subset)
            .chain(&m.other_subset)
            .any(|s| s.tables().contains(&d))
        {
            return None;
        }
        let ends = [u, v]
            .iter()
            .filter(|&&n| body.node(n).as_access() == Some(d))
            .count();
        if m.data != d && ends == 0 {
            continue;
        }
        // The subsets that name `d`: a copy within `d` moves both.
        let mut subsets = Vec::new();
        if m.data == d {
            subsets.push(&m.subset);
        }
        if m.data != d || ends == 2 {
            subsets.extend(m.other_subset.as_ref());
        }
        if m.data != d && subsets.is_empty() {
            return None;
        }
        for subset in subsets {
            let row = subset.0.iter().enumerate().find_map(|(r, x)| {
                let Dim::Index(i) = x else { return None };
                let (coeffs, c) = i.affine_in(&[p])?;
                let free = c.free_symbols();
                (coeffs.len() == 1
                    && coeffs.get(p) == Some(&1)
                    && params.iter().all(|q| !free.contains(q)))
                .then(|| (r, c.simplify()))
            })?;
            if found.as_ref().is_some_and(|f| *f != row) {
                return None;
            }
            found = Some(row);
        }
    }
    Some(found)
}

/// True when `inner` lies within the box `[lo, hi)` per dimension, whatever the symbols.
fn within(inner: &Subset, boxed: &[(SymExpr, SymExpr)]) -> bool {
    inner.rank() == boxed.len()
        && inner.0.iter().zip(boxed).all(|(x, (lo, hi))| {
            let Some((a, b)) = x.bounds() else {
                return false;
            };
            lo.provably_le(&a) && b.add(&SymExpr::Int(1)).provably_le(hi)
        })
}

/// Fuses the lone map of state graph `second` into a map of `first` (see the module
/// documentation); false, with `first` unchanged, when no map of `first` qualifies.
fn fuse(
    arrays: &BTreeMap<String, DataDesc>,
    symbols: &BTreeSet<String>,
    first: &mut Dataflow,
    second: &Dataflow,
    memo: &mut BoundaryMemo,
) -> bool {
    let Some(b_node) = lone_map(second) else {
        return false;
    };
    let Node::Map(mb) = second.node(b_node) else {
        return false;
    };
    let (b_reads, b_writes) = node_reads_writes(second, b_node);
    let (p_reads, p_writes) = reads_writes(first);
    let p_tables = tables_read(first);
    // A table B reads may not be written before it in `first`, and what B writes nothing
    // in `first` reads.
    if tables_read(second).iter().any(|t| p_writes.contains(t))
        || b_writes
            .iter()
            .any(|d| p_reads.contains(d) || p_tables.contains(d))
    {
        return false;
    }
    // The maps of `first` writing something B touches, in node order.
    let candidates: Vec<NodeId> = first
        .node_ids()
        .into_iter()
        .filter(|&n| matches!(first.node(n), Node::Map(_)))
        .filter(|&n| {
            let (_, w) = node_reads_writes(first, n);
            w.iter()
                .any(|d| b_reads.contains(d) || b_writes.contains(d))
        })
        .collect();
    for a_node in candidates {
        let Node::Map(ma) = first.node(a_node) else {
            continue;
        };
        let (a_reads, a_writes) = node_reads_writes(first, a_node);
        // Two parameters each: a map over three shares its two outer loops among the
        // threads, which one over rows would give up.
        if ma.params.len() != 2
            || mb.params.len() != 2
            || ma.schedule != mb.schedule
            || !same_ranges(&ma.ranges[..1], &mb.ranges[..1])
        {
            continue;
        }
        let (pa, pb) = (&ma.params[0], &mb.params[0]);
        // B's first parameter takes A's name: it must not capture a symbol or an inner
        // parameter of B.
        if pa != pb && (symbols.contains(pa) || mb.params[1..].contains(pa)) {
            continue;
        }
        // What B writes: A does not read it, nothing else in `first` writes it.
        if b_writes.iter().any(|d| {
            a_reads.contains(d)
                || first
                    .access_nodes(d)
                    .into_iter()
                    .flat_map(|n| first.in_edges(n))
                    .any(|e| first.endpoints(e).0 != a_node)
        }) {
            continue;
        }
        // Rows: what one writes and the other touches, both touch at their own row only.
        let touched_b: BTreeSet<&String> = b_reads.iter().chain(&b_writes).collect();
        let touched_a: BTreeSet<&String> = a_reads.iter().chain(&a_writes).collect();
        let conflicts: BTreeSet<&String> = a_writes
            .iter()
            .filter(|d| touched_b.contains(d))
            .chain(b_writes.iter().filter(|d| touched_a.contains(d)))
            .collect();
        let rows_ok = conflicts.iter().all(|d| {
            match (
                row_dim(&ma.body, d, &ma.params),
                row_dim(&mb.body, d, &mb.params),
            ) {
                (Some(Some(x)), Some(Some(y))) => x == y,
                (Some(x), Some(y)) => x.or(y).is_some(),
                _ => false,
            }
        });
        if !rows_ok {
            continue;
        }
        // What both write, B reads first (its read orders its write after A's); what A
        // writes and B reads, B reads within what A writes.
        if a_writes
            .iter()
            .any(|d| b_writes.contains(d) && !b_reads.contains(d))
        {
            continue;
        }
        let inside = a_writes.iter().filter(|d| b_reads.contains(*d)).all(|d| {
            let Some(rank) = arrays.get(d).map(|x| x.shape().len()) else {
                return false;
            };
            let boxes = map_written_boxes(ma, d, rank);
            second
                .in_edges(b_node)
                .into_iter()
                .map(|e| &second.edge(e).memlet)
                .filter(|m| &m.data == d)
                .all(|m| boxes.iter().any(|bx| within(&m.subset, bx)))
        });
        if !inside {
            continue;
        }
        // The other containers B reads that `first` writes: one written node each, not
        // downstream of A.
        // Where A reads one of them too, it reads the same node: the fused map reads
        // each container at one node, and A and B must see the same value.
        let (a_sources, _) = neighbours(first, a_node);
        let mut links = BTreeMap::new();
        let mut linked = true;
        for d in b_reads.iter().filter(|d| p_writes.contains(*d)) {
            if a_writes.contains(d) {
                continue;
            }
            match written_node(first, d) {
                Some(n)
                    if !has_path_connecting(&first.graph, a_node, n, None)
                        && a_sources.get(d).is_none_or(|&s| s == n) =>
                {
                    links.insert(d.clone(), n);
                }
                _ => linked = false,
            }
        }
        if !linked {
            continue;
        }
        let mut b_body = mb.body.clone();
        if pa != pb {
            substitute_params(
                &mut b_body,
                &BTreeMap::from([(pb.clone(), SymExpr::sym(pa))]),
            );
        }
        let inner = |m: &MapScope, body: Dataflow| MapScope {
            label: m.label.clone(),
            params: m.params[1..].to_vec(),
            ranges: m.ranges[1..].to_vec(),
            // Independent points, as the map's were: the inner loop vectorizes.
            schedule: m.schedule,
            body,
        };
        let a_inner = inner(ma, ma.body.clone());
        let b_inner = inner(mb, b_body);
        // The row's body: A's inner map, then B's, reading what A wrote from A's nodes.
        let mut body = Dataflow::new();
        let an = body.add_node(Node::Map(a_inner));
        connect_map(
            arrays,
            &mut body,
            an,
            &BTreeMap::new(),
            &BTreeMap::new(),
            memo,
        );
        let (_, a_out) = neighbours(&body, an);
        let from_a: BTreeMap<String, NodeId> = a_out
            .into_iter()
            .filter(|(d, _)| b_reads.contains(d))
            .collect();
        let bn = body.add_node(Node::Map(b_inner));
        connect_map(arrays, &mut body, bn, &from_a, &BTreeMap::new(), memo);
        let label = format!("{}+{}", ma.label, mb.label);
        let scope = MapScope {
            label: if label.len() <= 160 {
                label
            } else {
                ma.label.clone()
            },
            params: vec![pa.clone()],
            ranges: ma.ranges[..1].to_vec(),
            schedule: ma.schedule,
            body,
        };
        let (mut sources, mut dests) = neighbours(first, a_node);
        for (d, n) in links {
            sources.entry(d).or_insert(n);
        }
        for d in &b_reads {
            if !sources.contains_key(d) && !a_writes.contains(d) {
                let n = first.add_access(d);
                sources.insert(d.clone(), n);
            }
        }
        for d in &b_writes {
            if !dests.contains_key(d) {
                let n = first.add_access(d);
                dests.insert(d.clone(), n);
            }
        }
        replace_map(arrays, first, a_node, scope, &[], (&sources, &dests), memo);
        return true;
    }
    false
}
