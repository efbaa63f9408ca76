//! Row-jamming of a producer–consumer pair in one map body (the shape tiled fusion
//! leaves: `A' ─► buf ─► B'`, two row × column maps run one after the other by the
//! body's thread): whether a body can be jammed, and the jammed shape the C printer
//! spells (`cfamily::emit::jam`). Jammed, each row `i` of B' is computed in one column
//! loop with the row of A' it is the last to need (`i + dmax`): per column `j`, A' at
//! column `j + k` (`k`: the largest column offset at which B' reads that newest row),
//! then B' at `j`. Every element of A' is computed once, before any read of it, so the
//! values are those of the plain order, bit for bit; only the order of independent
//! points changes.
//!
//! When B' reads the newest row only at column offset `k` and writes each element at
//! most once per row, the column loop carries no dependence (`simd`). The leading row
//! of every container the pair reads or writes from outside is a [`Stream`], prefetched
//! [`AHEAD`] columns ahead of each block of [`BLOCK`] columns. Why and by how much this
//! pays is in `cfamily::emit::jam` and `docs/perf.md`.

use std::collections::{BTreeMap, BTreeSet};

use sdflow_ir::{
    DataDesc, Dataflow, Dim, EdgeId, MapScope, Node, NodeId, Range, Schedule, Sdfg, Subset, SymExpr,
};

/// A map body the jammed form applies to, and its shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Jam {
    /// A' (the map writing the buffer), a node of the body.
    pub producer: NodeId,
    /// B' (the map reading it), a node of the body.
    pub consumer: NodeId,
    /// Row offset of B's newest row of `buf` (B' row `i` needs A' rows up to `i + dmax`).
    pub dmax: i64,
    /// Column skew: A' at column `j + k` is computed in B's column `j`.
    pub k: i64,
    /// The column loop carries no dependence.
    pub simd: bool,
    /// What to prefetch ahead of each block of columns.
    pub streams: Vec<Stream>,
}

/// One container the pair accesses from outside, at its leading row.
#[derive(Clone, Debug, PartialEq)]
pub struct Stream {
    /// The container.
    pub data: String,
    /// The edge of the producer's body (`by_producer`) or the consumer's that accesses it.
    pub edge: EdgeId,
    /// Accessed by A' (at A's point), else by B'.
    pub by_producer: bool,
    /// The access writes.
    pub write: bool,
}

/// Columns per block of the jammed loop.
pub const BLOCK: i64 = 64;
/// Columns ahead of the block that are prefetched.
pub const AHEAD: i64 = 256;

/// The streams of a pair: per container accessed from outside the two bodies, the access
/// with the largest row (A's rows are `dmax` below B's).
fn streams<'d>(sdfg: &Sdfg, a: &'d MapScope, b: &'d MapScope, buf: &str, dmax: i64) -> Vec<Stream> {
    let mut lead: BTreeMap<&'d str, (i64, Stream)> = BTreeMap::new();
    for (m, by_a) in [(a, true), (b, false)] {
        let row = SymExpr::sym(&m.params[0]);
        for e in m.body.edge_ids() {
            let (s, d) = m.body.endpoints(e);
            let memlet = &m.body.edge(e).memlet;
            let (data, write) = match (m.body.node(s).as_access(), m.body.node(d).as_access()) {
                (Some(x), _) if m.body.in_degree(s) == 0 => (x, false),
                (_, Some(x)) => (x, true),
                _ => continue,
            };
            let is_array = matches!(sdfg.arrays.get(data), Some(DataDesc::Array(_)));
            let Some((r, _)) = indices(&memlet.subset) else {
                continue;
            };
            let Some(r) = offset(r, &row) else { continue };
            if data == buf || !is_array {
                continue;
            }
            let r = if by_a { r + dmax } else { r };
            let stream = Stream {
                data: data.to_string(),
                edge: e,
                by_producer: by_a,
                write,
            };
            match lead.get(data) {
                Some((best, _)) if *best >= r => {}
                _ => {
                    lead.insert(data, (r, stream));
                }
            }
        }
    }
    lead.into_values().map(|(_, s)| s).collect()
}

/// The integer offset `e - base` when it is a constant.
fn offset(e: &SymExpr, base: &SymExpr) -> Option<i64> {
    e.const_diff(base)
}

/// The integer `(x - px) - (y - py)`: how far the element index `x` of a point at `px` is
/// from the index `y` of a point at `py` (both may hold the same symbolic shift).
fn relative(x: &SymExpr, px: &SymExpr, y: &SymExpr, py: &SymExpr) -> Option<i64> {
    x.sub(px).const_diff(&y.sub(py))
}

/// The subset's two dimensions as single indices.
fn indices(s: &Subset) -> Option<(&SymExpr, &SymExpr)> {
    match s.0.as_slice() {
        [Dim::Index(r), Dim::Index(c)] => Some((r, c)),
        _ => None,
    }
}

/// A body of tasklets and access nodes only, no write-conflict resolution.
fn plain_body(df: &Dataflow) -> bool {
    df.node_ids()
        .iter()
        .all(|&n| matches!(df.node(n), Node::Access(_) | Node::Tasklet(_)))
        && df
            .edge_ids()
            .iter()
            .all(|&e| df.edge(e).memlet.wcr.is_none())
}

/// Row and column ranges of a two-parameter map with unit steps.
pub fn rows_cols(m: &MapScope) -> Option<(&Range, &Range)> {
    match m.ranges.as_slice() {
        // The column range must not use the row (the printer evaluates the ranges outside
        // the loops).
        [r, c]
            if r.step.as_int() == Some(1)
                && c.step.as_int() == Some(1)
                && super::independent_depth(m) == 2 =>
        {
            Some((r, c))
        }
        _ => None,
    }
}

impl Jam {
    /// The jammed form of `df` (a map body of `sdfg`), when it is a pair
    /// `A' ─► buf ─► B'` that can be printed so.
    pub fn of(sdfg: &Sdfg, df: &Dataflow) -> Option<Jam> {
        let maps: Vec<NodeId> = df
            .node_ids()
            .into_iter()
            .filter(|&n| matches!(df.node(n), Node::Map(_)))
            .collect();
        let [x, y] = maps.as_slice() else {
            return None;
        };
        // Every other node is an access node; the one between the maps is `buf`.
        if df
            .node_ids()
            .iter()
            .any(|&n| !matches!(df.node(n), Node::Access(_) | Node::Map(_)))
        {
            return None;
        }
        let feeds = |from: NodeId, to: NodeId| -> Option<(NodeId, String)> {
            let outs = df.out_edges(from);
            let [e] = outs.as_slice() else { return None };
            let t = df.endpoints(*e).1;
            let buf = df.node(t).as_access()?.to_string();
            let reads = df.out_edges(t);
            (!reads.is_empty() && reads.iter().all(|&r| df.endpoints(r).1 == to))
                .then_some((t, buf))
        };
        let ((an, bn), (t, buf)) = match (feeds(*x, *y), feeds(*y, *x)) {
            (Some(f), None) => ((*x, *y), f),
            (None, Some(f)) => ((*y, *x), f),
            _ => return None,
        };
        if df.in_degree(t) != 1 {
            return None;
        }
        let (Node::Map(a), Node::Map(b)) = (df.node(an), df.node(bn)) else {
            return None;
        };
        let local = matches!(sdfg.arrays.get(&buf), Some(DataDesc::Array(arr)) if arr.transient);
        if !local
            || a.schedule != Schedule::Sequential
            || b.schedule != Schedule::Sequential
            || !plain_body(&a.body)
            || !plain_body(&b.body)
            || rows_cols(a).is_none()
            || rows_cols(b).is_none()
        {
            return None;
        }
        // Nothing B' writes is read by A', and nothing else is written between them: the
        // maps' other edges come from access nodes that nothing in the body writes.
        let written_by_b: BTreeSet<&str> = df
            .out_edges(bn)
            .iter()
            .filter_map(|&e| df.node(df.endpoints(e).1).as_access())
            .collect();
        if written_by_b.contains(buf.as_str()) {
            return None;
        }
        for &e in &df.in_edges(an) {
            let src = df.endpoints(e).0;
            let d = df.node(src).as_access()?;
            if written_by_b.contains(d) || df.in_degree(src) != 0 {
                return None;
            }
        }
        for &e in &df.in_edges(bn) {
            let src = df.endpoints(e).0;
            if src != t && (df.node(src).as_access().is_none() || df.in_degree(src) != 0) {
                return None;
            }
        }
        // A' writes buf at one element per point, at its parameters plus constants.
        let (pa_r, pa_c) = (SymExpr::sym(&a.params[0]), SymExpr::sym(&a.params[1]));
        let (pb_r, pb_c) = (SymExpr::sym(&b.params[0]), SymExpr::sym(&b.params[1]));
        let a_writes: Vec<&Subset> = a
            .body
            .edge_ids()
            .into_iter()
            .filter(|&e| a.body.node(a.body.endpoints(e).1).as_access() == Some(buf.as_str()))
            .map(|e| &a.body.edge(e).memlet.subset)
            .collect();
        let [w] = a_writes.as_slice() else {
            return None;
        };
        let (wr, wc) = indices(w)?;
        // B' reads buf at its parameters plus constants; in A's terms, the point of A'
        // that wrote it is B's point plus (d, c).
        let mut reads: Vec<(i64, i64)> = Vec::new();
        for e in b.body.edge_ids() {
            let (s, _) = b.body.endpoints(e);
            let m = &b.body.edge(e).memlet;
            if b.body.node(s).as_access() != Some(buf.as_str()) {
                if m.data == buf || m.subset.tables().contains(&buf.as_str()) {
                    return None;
                }
                continue;
            }
            let (rr, rc) = indices(&m.subset)?;
            reads.push((
                relative(rr, &pb_r, wr, &pa_r)?,
                relative(rc, &pb_c, wc, &pa_c)?,
            ));
        }
        let dmax = reads.iter().map(|r| r.0).max()?;
        let newest: Vec<i64> = reads.iter().filter(|r| r.0 == dmax).map(|r| r.1).collect();
        let k = *newest.iter().max()?;
        // A's columns cover B's shifted by k, so the loop computes A' at every j + k.
        let ((_, ac), (_, bc)) = (rows_cols(a)?, rows_cols(b)?);
        let front = bc.start.add(&SymExpr::Int(k)).const_diff(&ac.start)?;
        let back = ac.end.const_diff(&bc.end.add(&SymExpr::Int(k)))?;
        if front < 0 || back < 0 {
            return None;
        }
        // Each write of B' goes to its own element per column (its column parameter plus a
        // constant), so lanes never write the same element.
        let distinct_writes = b.body.edge_ids().into_iter().all(|e| {
            let (_, d) = b.body.endpoints(e);
            b.body.node(d).as_access().is_none_or(|data| {
                matches!(
                    sdfg.arrays.get(data),
                    Some(DataDesc::Scalar {
                        transient: true,
                        ..
                    })
                ) || indices(&b.body.edge(e).memlet.subset)
                    .is_some_and(|(_, c)| offset(c, &pb_c).is_some())
            })
        });
        // Lanes read before they write: a container B' both reads and writes (an update
        // in place, defined in the points' order) keeps the loop scalar.
        let in_place = df.in_edges(bn).iter().any(|&e| {
            df.node(df.endpoints(e).0)
                .as_access()
                .is_some_and(|d| written_by_b.contains(d))
        });
        let simd = newest.iter().all(|&c| c == k) && distinct_writes && !in_place;
        Some(Jam {
            producer: an,
            consumer: bn,
            dmax,
            k,
            simd,
            streams: streams(sdfg, a, b, &buf, dmax),
        })
    }
}
