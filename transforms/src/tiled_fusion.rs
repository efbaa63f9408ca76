//! Producer–consumer fusion through a tile buffer (a strategy of `map_fusion`): when B
//! reads A's transient T at several offsets, recomputing A at each of them multiplies its
//! work; instead one map over tiles of B's outermost dimension computes, per tile, A on
//! the rows the tile needs (its rows plus the offsets' halo) into a small buffer private
//! to the iteration (`Storage::Local`), then B on the tile's rows from the buffer. T
//! disappears; the buffer stays in cache; A runs on `1 + halo / tile` times its points.
//!
//! ```text
//! u ─► map A (i, j) ─► T ─► map B (i, j)         u ─► map tiles (t)  ─► out
//!                                           →          body: map A' (rows of tile t ± halo) ─► buf
//!                                                            buf ─► map B' (rows of tile t)
//! ```

use std::collections::BTreeMap;

use sdflow_ir::{
    Array, DataDesc, Dataflow, Descriptors as _, Dim, MapScope, Memlet, Node, Range, Schedule,
    Storage, Subset, SymExpr, SymOp,
};

use crate::pattern::{connect_map, neighbours, replace_map};

/// What the fusion needs to know about the pair.
pub(crate) struct Tiled<'a> {
    pub a: &'a MapScope,
    pub b: &'a MapScope,
    pub t: &'a str,
    /// Offsets (in B's parameters) at which B reads T.
    pub offsets: &'a [Vec<i64>],
    /// Rows of B per tile.
    pub rows: i64,
    /// A writes T at its point plus these offsets (B reads it likewise).
    pub base: &'a [SymExpr],
}

/// Maps every `T` memlet of `body` to the buffer: `T[x0, x1, …]` becomes
/// `buf[x0 − shift0, x1 − shift1, …]`.
fn to_buffer(body: &mut Dataflow, t: &str, buf: &str, shift: &[SymExpr]) {
    for n in body.node_ids() {
        if body.node(n).as_access() == Some(t) {
            body.graph[n] = Node::Access(buf.to_string());
        }
    }
    for e in body.edge_ids() {
        let m = &mut body.graph[e].memlet;
        if m.data != t {
            continue;
        }
        m.data = buf.to_string();
        m.subset = Subset(
            m.subset
                .0
                .iter()
                .zip(shift)
                .map(|(d, s)| match d {
                    Dim::Index(x) => Dim::Index(x.sub(s).simplify()),
                    other => other.clone(),
                })
                .collect(),
        );
    }
}

fn min(a: SymExpr, b: SymExpr) -> SymExpr {
    SymExpr::bin(SymOp::Min, a, b).simplify()
}

fn max(a: SymExpr, b: SymExpr) -> SymExpr {
    SymExpr::bin(SymOp::Max, a, b).simplify()
}

/// Replaces maps `a` and `b` (and T's access node) of `df` by the tiled map; returns
/// whether access nodes were added.
pub(crate) fn fuse_tiled(
    arrays: &mut crate::scratch::Scratch<'_>,
    df: &mut Dataflow,
    nodes: (sdflow_ir::NodeId, sdflow_ir::NodeId, sdflow_ir::NodeId),
    p: &Tiled<'_>,
    memo: &mut sdflow_ir::propagate::BoundaryMemo,
) -> bool {
    let (a_node, t_node, b_node) = nodes;
    let (ma, mb) = (p.a, p.b);
    let dmin = p.offsets.iter().map(|o| o[0]).min().unwrap_or(0);
    let dmax = p.offsets.iter().map(|o| o[0]).max().unwrap_or(0);
    let rows = SymExpr::Int(p.rows);
    // The tile parameter: a fresh name.
    let mut tp = "tile".to_string();
    let mut k = 0;
    while arrays.sdfg.symbols.contains_key(&tp)
        || arrays.desc(&tp).is_some()
        || ma.params.contains(&tp)
        || mb.params.contains(&tp)
    {
        k += 1;
        tp = format!("tile_{k}");
    }
    let tile = SymExpr::sym(&tp);
    let (rb0, ra0) = (&mb.ranges[0], &ma.ranges[0]);
    let row0 = rb0.start.add(&tile.mul(&rows)).simplify();
    let row_end = min(rb0.end.clone(), row0.add(&rows));
    let base0 = row0.add(&SymExpr::Int(dmin)).simplify();
    // The buffer: the tile's rows plus the halo, A's extent in the other dimensions.
    let dtype = arrays.desc(p.t).expect("T is declared").dtype();
    let mut shape = vec![SymExpr::Int(p.rows + dmax - dmin)];
    // A's extent in the other dimensions, never negative: a range whose end is below its
    // start (`1:N-1` at `N = 1`) runs no points, and its buffer has no elements.
    for r in &ma.ranges[1..] {
        shape.push(max(SymExpr::Int(0), r.end.sub(&r.start).simplify()));
    }
    let buf = arrays.fresh(&format!("{}_tile", p.t));
    let mut arr = Array::new(dtype, shape);
    arr.transient = true;
    arr.storage = Storage::Local;
    let whole = Memlet::new(&buf, Subset::full(arr.shape.as_slice()));
    arrays.declare(buf.clone(), DataDesc::Array(arr));
    // T's index of the buffer's first element, per dimension.
    let mut shift = vec![base0.clone()];
    shift.extend(ma.ranges[1..].iter().map(|r| r.start.clone()));
    let shift: Vec<SymExpr> = shift
        .iter()
        .zip(p.base)
        .map(|(s, c)| s.add(c).simplify())
        .collect();
    // A' over the rows the tile needs.
    let mut a_ranges = ma.ranges.clone();
    a_ranges[0] = Range {
        start: max(ra0.start.clone(), base0.clone()),
        end: min(ra0.end.clone(), row_end.add(&SymExpr::Int(dmax))),
        step: SymExpr::Int(1),
    };
    let mut a_body = ma.body.clone();
    to_buffer(&mut a_body, p.t, &buf, &shift);
    let a_inner = MapScope {
        label: ma.label.clone(),
        params: ma.params.clone(),
        ranges: a_ranges,
        schedule: Schedule::Sequential,
        body: a_body,
    };
    // B' over the tile's rows.
    let mut b_ranges = mb.ranges.clone();
    b_ranges[0] = Range {
        start: row0,
        end: row_end,
        step: SymExpr::Int(1),
    };
    let mut b_body = mb.body.clone();
    to_buffer(&mut b_body, p.t, &buf, &shift);
    let b_inner = MapScope {
        label: mb.label.clone(),
        params: mb.params.clone(),
        ranges: b_ranges,
        schedule: Schedule::Sequential,
        body: b_body,
    };
    // The tile map's body: A' ─► buf ─► B'.
    let mut body = Dataflow::new();
    let an = body.add_node(Node::Map(a_inner));
    connect_map(
        &*arrays,
        &mut body,
        an,
        &BTreeMap::new(),
        &BTreeMap::new(),
        memo,
    );
    let bn = body.add_node(Node::Map(b_inner));
    connect_map(
        &*arrays,
        &mut body,
        bn,
        &BTreeMap::new(),
        &BTreeMap::new(),
        memo,
    );
    let bnode = body.add_access(&buf);
    body.add_edge(an, None, bnode, None, whole.clone());
    body.add_edge(bnode, None, bn, None, whole);
    let tiles = rb0.end.sub(&rb0.start).add(&SymExpr::Int(p.rows - 1));
    let scope = MapScope {
        label: format!("{}+{}", ma.label, mb.label),
        params: vec![tp],
        ranges: vec![Range::new(
            0,
            SymExpr::bin(SymOp::FloorDiv, tiles, rows).simplify(),
        )],
        schedule: mb.schedule,
        body,
    };
    let (mut sources, dests) = neighbours(df, b_node);
    sources.remove(p.t);
    let (sa, _) = neighbours(df, a_node);
    for (k, v) in sa {
        sources.entry(k).or_insert(v);
    }
    replace_map(
        &*arrays,
        df,
        b_node,
        scope,
        &[a_node, t_node],
        (&sources, &dests),
        memo,
    )
}
