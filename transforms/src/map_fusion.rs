//! Producer–consumer map fusion. A map A writes a transient T that a map B reads:
//!
//! - **same point** (same ranges, B reads T where A wrote it in the same iteration): the
//!   two bodies become one; T's value passes through a scalar local to the body when
//!   nothing else reads T (T disappears), else through T itself;
//! - **recomputation** (B reads T at offsets, or over a smaller range — a stencil after a
//!   stencil): B computes each T value it needs with its own copy of A's body, shifted to
//!   the point needed, when nothing else uses T and the cost model agrees: the extra
//!   flops per point, `flops(A) · (r − 1)` for `r` distinct offsets, must not exceed
//!   `balance` times the bytes per point no longer moved through T (`(r + 1) · size`).
//!   Each decision is a note in the report.
//!
//! ```text
//! u ─► map A ─► T ─► map B ─► out        u ─► map A+B ─► out
//!      T[i,j] = f(u[i,j])            →        body: t = f(u[i,j]); out[i,j] = g(t)
//!      out[i,j] = g(T[i,j])
//! ```
//!
//! Legality: A is T's only writer (one access node, one in-edge); no other path leads
//! from A to B; B writes nothing A reads or writes, and reads nothing else A writes;
//! both have the same schedule. Across states, state fusion puts producer and consumer
//! in one graph first.
//!
//! Why one file of this size: the rule, its legality and its cost decision
//! (recomputation against a buffer) share one description of the producer–consumer
//! pair; the tiled form is `tiled_fusion.rs`, the containers a fusion declares
//! `scratch.rs`.

use std::collections::{BTreeMap, BTreeSet};

use sdflow_ir::{
    DataDesc, Dataflow, Descriptors as _, Dim, MapScope, Node, NodeId, Sdfg, Subset, SymExpr,
};

use crate::pass::{Changes, Pass};
use crate::pattern::{
    DataUses, binds_any, chain_at, code_mentions, copy_into, data_uses, flops,
    for_each_state_parallel, fresh_name, move_into, neighbours, node_reads_writes, renamed_body,
    replace_map, same_ranges, scalar_memlet, substitute_params, tables_read,
};
use crate::scratch::Scratch;
use crate::tiled_fusion::{Tiled, fuse_tiled};
use sdflow_ir::propagate::BoundaryMemo;

/// See the module documentation.
pub struct MapFusion {
    /// Flops one may recompute per byte of memory traffic saved (the machine balance the
    /// cost model assumes). Default 1.0.
    pub balance: f64,
    /// Rows of the consumer per tile when fusing through a tile buffer (see
    /// `tiled_fusion.rs`); 0 never tiles. Default 16.
    pub tile_rows: i64,
}

impl Default for MapFusion {
    fn default() -> Self {
        MapFusion {
            balance: 1.0,
            tile_rows: 16,
        }
    }
}

/// Cost-model decisions spelled out per run (the rest are counted).
const MAX_NOTES: usize = 16;

/// A fusion found in a state.
struct Candidate {
    a: NodeId,
    t_node: NodeId,
    b: NodeId,
    t: String,
    private: bool,
    /// Distinct offsets B reads T at (in B's parameters), `None` for same-point fusion.
    offsets: Option<Vec<Vec<i64>>>,
    /// Fuse through a tile buffer instead of recomputing.
    tiled: bool,
    /// Where A writes T: at its point plus these offsets ([`identity_write`]).
    base: Vec<SymExpr>,
    /// T holds a slab per point (dimensions of its own beyond the map's).
    slab: Option<Slab>,
    /// B's parameters T's dimensions follow, in order (all of B's unless A is promoted).
    sel: Vec<String>,
    /// A's other outputs that B reads at the same point, fused through at once.
    also: Vec<Also>,
}

/// One more transient a same-point fusion goes through: A writes it (at its point, an
/// element or a slab) and B reads it (at the same point), through its own access node.
struct Also {
    t: String,
    node: NodeId,
    private: bool,
    /// A writes a slab of it per point.
    slab: Option<Slab>,
}

/// How A writes T one slab per point: T's dimensions are the map's parameters (each at
/// `p + base`) and dimensions of T's own, written whole.
#[derive(Clone, Debug)]
struct Slab {
    /// Per dimension of T: the index of the parameter it follows, or `None` for one of
    /// T's own dimensions.
    dims: Vec<Option<usize>>,
    /// Per parameter: the offset of T's index from it.
    base: Vec<SymExpr>,
}

impl Pass for MapFusion {
    fn name(&self) -> &'static str {
        "map_fusion"
    }

    fn run(&self, sdfg: &mut Sdfg) -> Changes {
        let uses = data_uses(sdfg);
        let widths: BTreeMap<String, i64> = sdflow_ir::validate::halo_widths(sdfg)
            .into_iter()
            .map(|(f, (w, _))| (f.to_string(), w))
            .collect();
        // States are fused independently (a candidate's T is private to its state), in
        // parallel, against the program as it was; each state's new containers and
        // removed transients are merged afterwards in state order, so the result does not
        // depend on the threads. One memo of propagated memlets per thread of the pool
        // (the states of a program repeat the same iteration spaces and memlets; its
        // values are pure functions of their keys), taken by the state being fused.
        let memos: Vec<std::sync::Mutex<BoundaryMemo>> = (0..rayon::current_num_threads() + 1)
            .map(|_| Default::default())
            .collect();
        let outcomes = for_each_state_parallel(sdfg, 1, |shared, graph| {
            let k =
                rayon::current_thread_index().map_or(memos.len() - 1, |k| k.min(memos.len() - 2));
            let mut memo = memos[k]
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            self.run_state(shared, (&uses, &widths), graph, &mut memo)
        });
        let mut ch = Changes::default();
        for (s, o) in outcomes {
            for (name, desc) in o.added {
                // Names derive from a transient private to the state, so two states do
                // not pick the same one; should they, the later state renames its own.
                let name = if sdfg.arrays.contains_key(&name) {
                    let fresh = fresh_name(sdfg, &name);
                    crate::pattern::rename_data(&mut sdfg.states[s.index()].graph, &name, &fresh);
                    fresh
                } else {
                    name
                };
                sdfg.arrays.insert(name, desc);
            }
            for t in &o.removed {
                sdfg.arrays.remove(t);
            }
            ch.merge(&o.ch);
        }
        ch.notes.truncate(MAX_NOTES);
        ch
    }
}

/// What fusing one state gave.
struct Outcome {
    /// Containers the fusions declared, in order.
    added: Vec<(String, DataDesc)>,
    /// Transients that disappeared.
    removed: Vec<String>,
    ch: Changes,
}

impl MapFusion {
    /// Fuses what it can in one state's graph.
    fn run_state(
        &self,
        sdfg: &Sdfg,
        (uses, widths): (&DataUses, &BTreeMap<String, i64>),
        graph: &mut Dataflow,
        memo: &mut BoundaryMemo,
    ) -> Outcome {
        let mut ch = Changes::default();
        let mut scratch = Scratch {
            sdfg,
            added: Vec::new(),
        };
        let mut removed = Vec::new();
        // One scan in node order; fusions that become possible behind the scan are found
        // by the next round of the pipeline. Node positions in a topological order stay
        // valid through fusions (a fused map keeps a later position than everything it
        // reads), so most path checks cost nothing.
        let positions = |g: &Dataflow| -> Vec<Option<usize>> {
            use petgraph::visit::NodeIndexable as _;
            let mut at = vec![None; g.graph.node_bound()];
            for (i, n) in g
                .topological_order()
                .unwrap_or_default()
                .into_iter()
                .enumerate()
            {
                at[n.index()] = Some(i);
            }
            at
        };
        let mut topo = positions(graph);
        let mut from = 0;
        while let Some((c, at)) = self.find(&scratch, graph, (uses, widths), &topo, from, &mut ch) {
            from = at + 1;
            let created = match &c.offsets {
                None => {
                    ch.add("maps_fused", 1);
                    if !c.also.is_empty() {
                        ch.add("maps_fused_through_several", 1);
                        if c.slab.is_some() || c.also.iter().any(|x| x.slab.is_some()) {
                            ch.add("maps_fused_through_slabs_and_more", 1);
                        }
                    }
                    fuse_same_point(&mut scratch, graph, &c, memo)
                }
                Some(offsets) if c.tiled => {
                    ch.add("maps_fused_tiled", 1);
                    let (Node::Map(ma), Node::Map(mb)) =
                        (graph.node(c.a).clone(), graph.node(c.b).clone())
                    else {
                        continue;
                    };
                    let p = Tiled {
                        a: &ma,
                        b: &mb,
                        t: &c.t,
                        offsets,
                        rows: self.tile_rows,
                        base: &c.base,
                    };
                    fuse_tiled(&mut scratch, graph, (c.a, c.t_node, c.b), &p, memo)
                }
                Some(offsets) => {
                    ch.add("maps_fused_recompute", 1);
                    fuse_recompute(&mut scratch, graph, &c, offsets, memo)
                }
            };
            if created {
                topo = positions(graph);
            }
            // A private T has no access node left (it had one, in this state).
            for x in c.also.iter().filter(|x| x.private) {
                removed.push(x.t.clone());
                ch.add("transients_removed", 1);
            }
            if c.private {
                removed.push(c.t);
                ch.add("transients_removed", 1);
            }
        }
        Outcome {
            added: scratch.added,
            removed,
            ch,
        }
    }

    /// The first fusion at or after node index `from`, with the index of its T node.
    fn find(
        &self,
        arrays: &Scratch<'_>,
        df: &Dataflow,
        (uses, widths): (&DataUses, &BTreeMap<String, i64>),
        topo: &[Option<usize>],
        from: usize,
        ch: &mut Changes,
    ) -> Option<(Candidate, usize)> {
        use petgraph::visit::NodeIndexable as _;
        for i in from..df.graph.node_bound() {
            let t_node = NodeId::new(i);
            let Some(t) = df.graph.node_weight(t_node).and_then(Node::as_access) else {
                continue;
            };
            let Some(DataDesc::Array(arr)) = arrays.desc(t) else {
                continue;
            };
            let Some(chain) = chain_at(df, t_node).filter(|_| arr.transient) else {
                continue;
            };
            let a = chain.producer;
            let Node::Map(ma) = df.node(a) else { continue };
            let u = uses.get(t);
            let private =
                u.is_some_and(|u| u.access_nodes == 1 && u.states.len() == 1 && !u.in_control);
            let consumers = &chain.consumers;
            for &b in consumers {
                let Node::Map(mb) = df.node(b) else { continue };
                // A private T must be read by B alone.
                let only_b = consumers.iter().all(|&c| c == b);
                // A's other outputs B reads (GT4Py's fused producers write several fields
                // one consumer reads): all go through at once, or none.
                let also = also_read(df, a, b, t_node);
                if b == a
                    || ma.schedule != mb.schedule
                    || !legal(df, a, b, (t_node, t), &also, topo)
                    || shares_locals(arrays, ma, mb)
                    || binds_any(&mb.body, &ma.params)
                    || tables_read(&mb.body).contains(t)
                {
                    continue;
                }
                // A slab per point (T has dimensions beyond the map's, written whole at
                // each point: GT4Py's neighbour values), read by B at the same point.
                if let Some(slab) = slab_write(ma, t, &arr.shape)
                    && same_ranges(&ma.ranges, &mb.ranges)
                    && reads_own_slab(mb, t, &slab)
                {
                    let Some(also) = same_point_also(arrays, df, uses, (ma, mb), b, &also) else {
                        continue;
                    };
                    let c = Candidate {
                        a,
                        t_node,
                        b,
                        t: t.to_string(),
                        private: private && only_b,
                        offsets: None,
                        tiled: false,
                        base: slab.base.clone(),
                        slab: Some(slab),
                        sel: mb.params.clone(),
                        also,
                    };
                    return Some((c, t_node.index()));
                }
                let Some(write) = identity_write(ma, t) else {
                    continue;
                };
                // B's parameters that T's dimensions follow: all of B's when A has as
                // many, else the one each read of T names (A over fewer dimensions than B,
                // a horizontal map feeding a (horizontal, K) one: promoted, recomputed).
                let promoted = ma.params.len() < mb.params.len();
                let sel = if promoted {
                    promoted_params(mb, t, &write)
                } else {
                    Some(mb.params.clone())
                };
                let Some(sel) = sel else { continue };
                let Some(offsets) = read_offsets(mb, t, &write, &sel) else {
                    continue;
                };
                let sel_ranges: Vec<sdflow_ir::Range> = sel
                    .iter()
                    .filter_map(|q| mb.params.iter().position(|p| p == q))
                    .map(|k| mb.ranges[k].clone())
                    .collect();
                let all_zero = offsets.iter().all(|o| o.iter().all(|&x| x == 0));
                if all_zero
                    && !promoted
                    && same_ranges(&ma.ranges, &mb.ranges)
                    && write.len() == mb.params.len()
                {
                    let Some(also) = same_point_also(arrays, df, uses, (ma, mb), b, &also) else {
                        continue;
                    };
                    let c = Candidate {
                        a,
                        t_node,
                        b,
                        t: t.to_string(),
                        private: private && only_b,
                        offsets: None,
                        tiled: false,
                        base: write.clone(),
                        slab: None,
                        sel: sel.clone(),
                        also,
                    };
                    return Some((c, t_node.index()));
                }
                if !(also.is_empty()
                    && private
                    && only_b
                    && recomputable(ma, &sel_ranges, &offsets))
                {
                    continue;
                }
                let r = offsets.len();
                let span = offsets.iter().map(|o| o[0]).max().unwrap_or(0)
                    - offsets.iter().map(|o| o[0]).min().unwrap_or(0);
                if self.tile_rows > 0
                    && !promoted
                    && r >= 2
                    && mb.params.len() >= 2
                    && span <= self.tile_rows / 2
                {
                    if ch.notes.len() < MAX_NOTES {
                        ch.notes.push(format!(
                            "'{}' into '{}' through a tile buffer of {} + {span} rows: {r} reads per point from the buffer instead of {r} recomputations",
                            ma.label, mb.label, self.tile_rows
                        ));
                    }
                    let c = Candidate {
                        a,
                        t_node,
                        b,
                        t: t.to_string(),
                        private: true,
                        offsets: Some(offsets),
                        tiled: true,
                        base: write.clone(),
                        slab: None,
                        sel: sel.clone(),
                        also: Vec::new(),
                    };
                    return Some((c, t_node.index()));
                }
                // A's reads move with B's offsets: they must stay within the halo an
                // exchange fills.
                if !within_halos(ma, &offsets, widths) {
                    continue;
                }
                // Promoted, A's own map no longer runs, but its value is computed at
                // every point of B (K times as often): r computations per point, r reads
                // of T saved.
                let (extra, bytes) = if promoted {
                    (flops(&ma.body) * r, r * arr.dtype.size_bytes())
                } else {
                    (flops(&ma.body) * (r - 1), (r + 1) * arr.dtype.size_bytes())
                };
                let fuse = extra as f64 <= self.balance * bytes as f64;
                if ch.notes.len() < MAX_NOTES {
                    ch.notes.push(format!(
                        "'{}' into '{}' by recomputation at {r} point(s): {extra} flop(s) more, {bytes} B less per point -> {} (limit {} flop/B)",
                        ma.label,
                        mb.label,
                        if fuse { "fused" } else { "kept" },
                        self.balance
                    ));
                }
                if fuse {
                    let c = Candidate {
                        a,
                        t_node,
                        b,
                        t: t.to_string(),
                        private: true,
                        offsets: Some(offsets),
                        tiled: false,
                        base: write.clone(),
                        slab: None,
                        sel: sel.clone(),
                        also: Vec::new(),
                    };
                    return Some((c, t_node.index()));
                }
            }
        }
        None
    }
}

/// No other dependence between A and B forbids putting them in one map.
fn legal(
    df: &Dataflow,
    a: NodeId,
    b: NodeId,
    (t_node, t): (NodeId, &str),
    also: &[(String, NodeId)],
    topo: &[Option<usize>],
) -> bool {
    let (ra, wa) = node_reads_writes(df, a);
    let (rb, wb) = node_reads_writes(df, b);
    if wb.iter().any(|d| ra.contains(d) || wa.contains(d)) {
        return false;
    }
    if wa
        .iter()
        .any(|d| d != t && rb.contains(d) && !also.iter().any(|(x, _)| x == d))
    {
        return false;
    }
    // No path from A to B except through T (a node earlier than A in a topological order
    // cannot be reached from it).
    let pos = |x: NodeId| topo.get(x.index()).copied().flatten();
    let before_a = |x: NodeId| matches!((pos(x), pos(a)), (Some(i), Some(j)) if i < j);
    df.in_edges(b).into_iter().all(|e| {
        let x = df.endpoints(e).0;
        x == t_node
            || also.iter().any(|(_, n)| *n == x)
            || df.in_degree(x) == 0
            || before_a(x)
            || !df.reaches(a, x)
    })
}

/// The access nodes other than `t_node` that B reads and A alone writes: A's other
/// outputs B reads, with their containers.
fn also_read(df: &Dataflow, a: NodeId, b: NodeId, t_node: NodeId) -> Vec<(String, NodeId)> {
    let mut out: Vec<(String, NodeId)> = Vec::new();
    for e in df.in_edges(b) {
        let x = df.endpoints(e).0;
        if x == t_node || out.iter().any(|(_, n)| *n == x) {
            continue;
        }
        let Some(d) = df.node(x).as_access() else {
            continue;
        };
        if chain_at(df, x).is_some_and(|c| c.producer == a) {
            out.push((d.to_string(), x));
        }
    }
    out
}

/// A same-point fusion through T goes through each of `also` too when A writes it at its
/// point (a transient array: once, by a tasklet or a one-element copy; or a slab per
/// point, [`slab_write`]) and B reads it at that same point, not as an index table;
/// `None` when one of them does not qualify.
fn same_point_also(
    arrays: &Scratch<'_>,
    df: &Dataflow,
    uses: &DataUses,
    (ma, mb): (&MapScope, &MapScope),
    b: NodeId,
    also: &[(String, NodeId)],
) -> Option<Vec<Also>> {
    let tables = tables_read(&mb.body);
    also.iter()
        .map(|(t, node)| {
            let Some(DataDesc::Array(arr)) = arrays.desc(t) else {
                return None;
            };
            if !arr.transient || tables.contains(t) {
                return None;
            }
            let slab = match identity_write(ma, t) {
                Some(write) => {
                    if write.len() != mb.params.len() {
                        return None;
                    }
                    let offsets = read_offsets(mb, t, &write, &mb.params)?;
                    if !offsets.iter().all(|o| o.iter().all(|&x| x == 0)) {
                        return None;
                    }
                    None
                }
                None => {
                    let slab = slab_write(ma, t, &arr.shape)?;
                    reads_own_slab(mb, t, &slab).then_some(Some(slab))?
                }
            };
            let chain = chain_at(df, *node)?;
            let private = uses
                .get(t)
                .is_some_and(|u| u.access_nodes == 1 && u.states.len() == 1 && !u.in_control)
                && chain.consumers.iter().all(|&c| c == b);
            Some(Also {
                t: t.clone(),
                node: *node,
                private,
                slab,
            })
        })
        .collect()
}

/// True when both bodies use one of the program's transient scalars (body locals): one
/// body would overwrite the other's value.
pub(crate) fn shares_locals(
    arrays: &(impl sdflow_ir::Descriptors + ?Sized),
    a: &MapScope,
    b: &MapScope,
) -> bool {
    let da = a.body.accessed_data_refs();
    b.body.accessed_data_refs().iter().any(|d| {
        da.contains(d)
            && matches!(
                arrays.desc(d),
                Some(DataDesc::Scalar {
                    transient: true,
                    ..
                })
            )
    })
}

/// A's body writes T exactly once, by a tasklet, a nested SDFG or a copy of one element, at
/// `T[p0 + c0, p1 + c1, …]` (its parameters in order,
/// each plus an offset `c` free of parameters: GT4Py indexes a transient from the start
/// of its domain, `T[i - horizontal_start, k - vertical_start]`); returns the offsets.
fn identity_write(m: &MapScope, t: &str) -> Option<Vec<SymExpr>> {
    let body = &m.body;
    let params: Vec<&str> = m.params.iter().map(String::as_str).collect();
    let mut found = None;
    for e in body.edge_ids() {
        let (src, dst) = body.endpoints(e);
        if body.node(dst).as_access() != Some(t) {
            continue;
        }
        let memlet = &body.edge(e).memlet;
        // A tasklet's or a nested SDFG's output (GT4Py's `if` at a point), or a copy of
        // one element (GT4Py copies a reduction's scalar result into the field:
        // `gtir_tmp_2 -> gtir_tmp_3[i, k]`).
        let writer = match body.node(src) {
            Node::Tasklet(_) | Node::Nested(_) => true,
            Node::Access(_) => memlet.data == t || memlet.other_subset.is_some(),
            _ => false,
        };
        let subset = written_subset(memlet, t);
        let base: Option<Vec<SymExpr>> =
            (writer && memlet.wcr.is_none() && subset.rank() == m.params.len())
                .then(|| {
                    subset
                        .0
                        .iter()
                        .zip(&m.params)
                        .map(|(d, p)| {
                            let Dim::Index(e) = d else { return None };
                            let (coeffs, rest) = e.affine_in(&params)?;
                            (coeffs.len() == 1 && coeffs.get(p) == Some(&1)).then_some(rest)
                        })
                        .collect()
                })
                .flatten();
        if base.is_none() || found.is_some() {
            return None;
        }
        found = base.map(|b| (b, dst, subset.clone()));
    }
    // T is not also read inside A, except the value just written, from the node written
    // (a producer fused before reads it on: GT4Py's fields used twice in one map).
    let (base, write, subset) = found?;
    let reads_t = body.node_ids().into_iter().any(|n| {
        body.node(n).as_access() == Some(t)
            && body.out_edges(n).into_iter().any(|e| {
                let m = &body.edge(e).memlet;
                n != write || m.data != t || m.subset != subset
            })
    });
    (!reads_t).then_some(base)
}

/// T's subset on a body edge that writes it: the memlet's own subset when it names T,
/// else the copy's destination subset.
fn written_subset<'m>(m: &'m sdflow_ir::Memlet, t: &str) -> &'m Subset {
    if m.data == t {
        &m.subset
    } else {
        m.other_subset.as_ref().unwrap_or(&m.subset)
    }
}

/// A's body writes T a whole slab per point, into one access node: in one write, by a
/// tasklet or a copy from a container of the body, at `T[…, p + c, …, 0:n, …]` (every
/// parameter once, in order, and at least one dimension of T's own, else
/// [`identity_write`] applies); or element by element (GT4Py's neighbour values once
/// [`local_unroll`](crate::local_unroll) has split the slab's buffer), each element of
/// T's own dimensions written once at a constant index. T is read in A only from that
/// node, at A's own point (a consumer fused before reads the slab on).
fn slab_write(m: &MapScope, t: &str, shape: &[SymExpr]) -> Option<Slab> {
    let body = &m.body;
    let params: Vec<&str> = m.params.iter().map(String::as_str).collect();
    let m_params = &m.params;
    let writes: Vec<_> = body
        .edge_ids()
        .into_iter()
        .filter(|&e| body.node(body.endpoints(e).1).as_access() == Some(t))
        .collect();
    let node = body.endpoints(*writes.first()?).1;
    let mut slab: Option<Slab> = None;
    // Per write, T's own dimensions: `None` for the whole extent, else the constant index.
    let mut elements: Vec<Vec<Option<i64>>> = Vec::new();
    for &e in &writes {
        let (src, dst) = body.endpoints(e);
        let memlet = &body.edge(e).memlet;
        if dst != node
            || !matches!(body.node(src), Node::Tasklet(_) | Node::Access(_))
            || memlet.wcr.is_some()
            || (memlet.data != t && memlet.other_subset.is_none())
        {
            return None;
        }
        let subset = written_subset(memlet, t);
        if subset.rank() != shape.len() {
            return None;
        }
        let mut dims = Vec::new();
        let mut base = Vec::new();
        let mut own = Vec::new();
        for (d, extent) in subset.0.iter().zip(shape) {
            match d {
                Dim::Index(x) if x.as_int().is_some() => {
                    let c = x.as_int().expect("checked");
                    if !(0..extent.as_int()?).contains(&c) {
                        return None;
                    }
                    dims.push(None);
                    own.push(Some(c));
                }
                Dim::Index(x) => {
                    let (coeffs, rest) = x.affine_in(&params)?;
                    let p = params.get(base.len())?;
                    if coeffs.len() != 1 || coeffs.get(*p) != Some(&1) {
                        return None;
                    }
                    dims.push(Some(base.len()));
                    base.push(rest);
                }
                Dim::Range { start, end, step }
                    if start.as_int() == Some(0)
                        && step.as_int() == Some(1)
                        && crate::pattern::same_extent(end, extent) =>
                {
                    dims.push(None);
                    own.push(None);
                }
                _ => return None,
            }
        }
        if base.len() != params.len() || own.is_empty() {
            return None;
        }
        match &slab {
            None => slab = Some(Slab { dims, base }),
            Some(s) if s.dims == dims && s.base == base => {}
            Some(_) => return None,
        }
        elements.push(own);
    }
    let slab = slab?;
    // The whole slab in one write, or every element once.
    let whole = elements.len() == 1 && elements[0].iter().all(Option::is_none);
    if !whole {
        let count: Option<i64> = shape
            .iter()
            .zip(&slab.dims)
            .filter(|(_, k)| k.is_none())
            .try_fold(1i64, |n, (x, _)| x.as_int().map(|x| n * x));
        let mut distinct: Vec<Vec<i64>> = elements
            .iter()
            .map(|o| o.iter().copied().collect::<Option<Vec<i64>>>())
            .collect::<Option<_>>()?;
        distinct.sort_unstable();
        distinct.dedup();
        if count != Some(distinct.len() as i64) || distinct.len() != elements.len() {
            return None;
        }
    }
    // Reads of T in A: from the written node only, at A's point, by tasklets and copies.
    let reads_ok = body.node_ids().into_iter().all(|n| {
        body.node(n).as_access() != Some(t)
            || body.out_edges(n).into_iter().all(|e| {
                let m = &body.edge(e).memlet;
                let dst = body.endpoints(e).1;
                n == node
                    && m.data == t
                    && matches!(body.node(dst), Node::Tasklet(_) | Node::Access(_))
                    && !m.subset.tables().contains(&t)
                    && at_own_point(&m.subset, &slab, m_params)
            })
    });
    reads_ok.then_some(slab)
}

/// `s` names T at the point `params + base` in the dimensions that follow the parameters.
fn at_own_point(s: &Subset, slab: &Slab, params: &[String]) -> bool {
    s.rank() == slab.dims.len()
        && s.0.iter().zip(&slab.dims).all(|(d, k)| match (d, k) {
            (Dim::Index(x), Some(k)) => {
                x.const_diff(&SymExpr::sym(&params[*k]).add(&slab.base[*k])) == Some(0)
            }
            (_, None) => true,
            _ => false,
        })
}

/// Every memlet of T in B's body (inner maps too) is at B's own point in the dimensions
/// that follow the parameters, and B never writes T.
fn reads_own_slab(mb: &MapScope, t: &str, slab: &Slab) -> bool {
    fn walk(df: &Dataflow, t: &str, slab: &Slab, params: &[String]) -> bool {
        for n in df.node_ids() {
            let ok = match df.node(n) {
                Node::Access(d) if d == t => df.in_degree(n) == 0,
                Node::Map(m) => walk(&m.body, t, slab, params),
                Node::Nested(_) => df
                    .in_edges(n)
                    .into_iter()
                    .all(|e| df.edge(e).memlet.data != t),
                _ => true,
            };
            if !ok {
                return false;
            }
        }
        // Reads of T at B's point; a copy touching T that names only its other end is
        // refused.
        df.edge_ids().into_iter().all(|e| {
            let m = &df.edge(e).memlet;
            if m.subset.tables().contains(&t) {
                return false;
            }
            if m.data != t {
                // A copy touching T described from its other end.
                let (a, b) = df.endpoints(e);
                return [a, b].iter().all(|&x| df.node(x).as_access() != Some(t));
            }
            // (A copy of T's elements into another container keeps that container's
            // second subset.)
            at_own_point(&m.subset, slab, params)
        })
    }
    walk(&mb.body, t, slab, &mb.params)
}

/// Moves T's memlets and access nodes in `df` (inner maps too) to `local`, dropping the
/// dimensions that follow the map's parameters.
fn to_local_slab(df: &mut Dataflow, t: &str, local: &str, slab: &Slab) {
    for n in df.node_ids() {
        match &mut df.graph[n] {
            Node::Access(d) if d == t => *d = local.to_string(),
            Node::Map(m) => to_local_slab(&mut m.body, t, local, slab),
            _ => {}
        }
    }
    let drop = |s: &Subset| {
        Subset(
            s.0.iter()
                .zip(&slab.dims)
                .filter(|(_, k)| k.is_none())
                .map(|(d, _)| d.clone())
                .collect(),
        )
    };
    for e in df.edge_ids() {
        let (a, b) = df.endpoints(e);
        let other_is_t = [a, b]
            .iter()
            .any(|&x| df.node(x).as_access() == Some(local))
            && df.graph[e].memlet.data != t;
        let m = &mut df.graph[e].memlet;
        if m.data == t {
            m.data = local.to_string();
            m.subset = drop(&m.subset);
        } else if other_is_t && let Some(o) = &m.other_subset {
            m.other_subset = Some(drop(o));
        }
    }
}

/// The distinct offsets (in B's parameters) at which B's body reads T, each read an edge
/// from a body source access node of T to a tasklet or a nested SDFG with index
/// `q_d + o_d` per dimension.
fn read_offsets(
    m: &MapScope,
    t: &str,
    base: &[SymExpr],
    params: &[String],
) -> Option<Vec<Vec<i64>>> {
    let body = &m.body;
    let mut out: Vec<Vec<i64>> = Vec::new();
    for n in body.node_ids() {
        if body.node(n).as_access() != Some(t) {
            continue;
        }
        if body.in_degree(n) > 0 {
            return None;
        }
        for e in body.out_edges(n) {
            let (_, dst) = body.endpoints(e);
            if !matches!(body.node(dst), Node::Tasklet(_) | Node::Nested(_)) {
                return None;
            }
            out.push(offset_of(&body.edge(e).memlet.subset, params, base)?);
        }
    }
    if out.is_empty() {
        return None;
    }
    out.sort();
    out.dedup();
    Some(out)
}

/// The constant offset of `s` from the point `params + base` (one per dimension).
fn offset_of(s: &Subset, params: &[String], base: &[SymExpr]) -> Option<Vec<i64>> {
    if s.rank() != params.len() || base.len() != params.len() {
        return None;
    }
    s.0.iter()
        .zip(params)
        .zip(base)
        .map(|((d, p), c)| match d {
            Dim::Index(e) => e.const_diff(&SymExpr::sym(p).add(c)),
            _ => None,
        })
        .collect()
}

/// A's body can be copied to other points: only access nodes and tasklets, no code that
/// reads its parameters, T its only output; and every point B needs lies in A's range.
/// B's parameter each dimension of T follows at B's first read of T (`q + o + c`, `c`
/// A's offset), for an A over fewer parameters than B; `None` unless each is one of B's,
/// each once.
fn promoted_params(mb: &MapScope, t: &str, base: &[SymExpr]) -> Option<Vec<String>> {
    let body = &mb.body;
    let qs: Vec<&str> = mb.params.iter().map(String::as_str).collect();
    let e = body
        .edge_ids()
        .into_iter()
        .find(|&e| body.edge(e).memlet.data == t)?;
    let s = &body.edge(e).memlet.subset;
    if s.rank() != base.len() {
        return None;
    }
    let mut sel: Vec<String> = Vec::new();
    for (d, c) in s.0.iter().zip(base) {
        let Dim::Index(x) = d else { return None };
        let (coeffs, _) = x.sub(c).simplify().affine_in(&qs)?;
        let coeffs: Vec<(String, i64)> = coeffs.into_iter().collect();
        let [(q, 1)] = coeffs.as_slice() else {
            return None;
        };
        if sel.contains(q) {
            return None;
        }
        sel.push(q.clone());
    }
    Some(sel)
}

fn recomputable(ma: &MapScope, b_ranges: &[sdflow_ir::Range], offsets: &[Vec<i64>]) -> bool {
    let simple = ma
        .body
        .node_ids()
        .into_iter()
        .all(|n| matches!(ma.body.node(n), Node::Access(_) | Node::Tasklet(_)));
    let params: BTreeSet<String> = ma.params.iter().cloned().collect();
    let writes: BTreeSet<&str> = ma
        .body
        .node_ids()
        .into_iter()
        .filter(|&n| ma.body.in_degree(n) > 0)
        .filter_map(|n| ma.body.node(n).as_access())
        .collect();
    let steps_one = ma
        .ranges
        .iter()
        .chain(b_ranges)
        .all(|r| r.step.as_int() == Some(1));
    if !simple || code_mentions(&ma.body, &params) || writes.len() != 1 || !steps_one {
        return false;
    }
    if ma.params.len() != b_ranges.len() {
        return false;
    }
    offsets.iter().all(|o| {
        ma.ranges
            .iter()
            .zip(b_ranges)
            .zip(o)
            .all(|((ra, rb), &off)| {
                let lo = rb.start.add(&SymExpr::Int(off)).const_diff(&ra.start);
                let hi = ra.end.const_diff(&rb.end.add(&SymExpr::Int(off)));
                matches!((lo, hi), (Some(l), Some(h)) if l >= 0 && h >= 0)
            })
    })
}

/// A's reads of fields a structured halo exchange fills stay within the exchange's width
/// once A's body is copied to B's points at `offsets` (a read `f[p_k + c]` becomes
/// `f[q_k + o_k + c]`), as validation requires of every map (`halo_widths`).
fn within_halos(ma: &MapScope, offsets: &[Vec<i64>], widths: &BTreeMap<String, i64>) -> bool {
    if widths.is_empty() {
        return true;
    }
    let body = &ma.body;
    body.edge_ids().into_iter().all(|e| {
        let m = &body.edge(e).memlet;
        let Some(&w) = widths.get(m.data.as_str()) else {
            return true;
        };
        sdflow_ir::validate::halo_offsets(&m.subset, &ma.params)
            .into_iter()
            .all(|(_, p, c)| {
                let k = ma.params.iter().position(|q| q == p);
                offsets.iter().all(|o| {
                    k.and_then(|k| o.get(k))
                        .is_some_and(|&ok| (c + ok).abs() <= w)
                })
            })
    })
}

/// Declares a transient scalar for T's value inside a fused body.
fn local_scalar(arrays: &mut Scratch<'_>, t: &str) -> String {
    let dtype = arrays.desc(t).expect("T is declared").dtype();
    let name = arrays.fresh(&format!("{t}_v"));
    arrays.declare(
        name.clone(),
        DataDesc::Scalar {
            dtype,
            transient: true,
        },
    );
    name
}

/// Declares an array private to each worker for one slab of T inside a fused body: T's
/// own dimensions.
fn local_slab(arrays: &mut Scratch<'_>, t: &str, slab: &Slab) -> String {
    let desc = arrays.desc(t).expect("T is declared");
    let shape: Vec<SymExpr> = desc
        .shape()
        .iter()
        .zip(&slab.dims)
        .filter(|(_, k)| k.is_none())
        .map(|(n, _)| n.clone())
        .collect();
    let mut arr = sdflow_ir::Array::new(desc.dtype(), shape);
    arr.transient = true;
    arr.storage = sdflow_ir::Storage::Local;
    let name = arrays.fresh(&format!("{t}_slab"));
    arrays.declare(name.clone(), DataDesc::Array(arr));
    name
}

/// Makes body node `n` (written once by a tasklet, a nested SDFG or a copy of one element) a local
/// scalar, with its edges. A copy keeps naming its source (a copy's memlet names the
/// source container) and writes the whole scalar.
fn make_local(body: &mut Dataflow, n: NodeId, scalar: &str) {
    body.graph[n] = Node::Access(scalar.to_string());
    for e in body.in_edges(n) {
        let from_access = body.node(body.endpoints(e).0).as_access().is_some();
        let memlet = &mut body.graph[e].memlet;
        if from_access {
            memlet.other_subset = Some(Subset::default());
        } else {
            *memlet = scalar_memlet(scalar);
        }
    }
    for e in body.out_edges(n) {
        body.graph[e].memlet = scalar_memlet(scalar);
    }
}

fn fuse_same_point(
    arrays: &mut Scratch<'_>,
    df: &mut Dataflow,
    c: &Candidate,
    memo: &mut BoundaryMemo,
) -> bool {
    let (Node::Map(ma), Node::Map(mb)) = (df.node(c.a), df.node(c.b)) else {
        return false;
    };
    let b_body = renamed_body(&mb.body, &mb.params, &ma.params);
    let label = format!("{}+{}", ma.label, mb.label);
    // A's node is replaced below: take its scope instead of copying it.
    let Node::Map(ma) = std::mem::replace(&mut df.graph[c.a], Node::Access(String::new())) else {
        return false;
    };
    let mut body = ma.body;
    // T and the others fused through with it: (container, access node, private, slab).
    let through: Vec<(&str, NodeId, bool, Option<&Slab>)> =
        std::iter::once((c.t.as_str(), c.t_node, c.private, c.slab.as_ref()))
            .chain(
                c.also
                    .iter()
                    .map(|x| (x.t.as_str(), x.node, x.private, x.slab.as_ref())),
            )
            .collect();
    let writes: Vec<NodeId> = through
        .iter()
        .map(|(t, _, _, _)| {
            body.node_ids()
                .into_iter()
                .find(|&n| body.node(n).as_access() == Some(*t) && body.in_degree(n) > 0)
                .expect("A writes T")
        })
        .collect();
    let ids = move_into(&mut body, b_body);
    for (&(t, _, _, _), &write) in through.iter().zip(&writes) {
        for &n in ids.values() {
            if body.graph.node_weight(n).and_then(Node::as_access) == Some(t) {
                crate::pattern::move_out_edges(&mut body, n, write);
                body.graph.remove_node(n);
            }
        }
    }
    for (&(t, _, private, slab), &write) in through.iter().zip(&writes) {
        if !private {
            continue;
        }
        match slab {
            Some(slab) => {
                let local = local_slab(arrays, t, slab);
                to_local_slab(&mut body, t, &local, slab);
            }
            None => {
                let scalar = local_scalar(arrays, t);
                make_local(&mut body, write, &scalar);
            }
        }
    }
    let (mut sources, mut dests) = neighbours(df, c.a);
    let (sb, db) = neighbours(df, c.b);
    for (k, v) in sb {
        if through.iter().all(|(_, n, _, _)| *n != v) {
            sources.entry(k).or_insert(v);
        }
    }
    for (k, v) in db {
        dests.entry(k).or_insert(v);
    }
    let mut gone = vec![c.b];
    for &(t, node, private, _) in &through {
        if private {
            dests.remove(t);
            gone.push(node);
        }
    }
    let scope = MapScope {
        label,
        body,
        params: ma.params,
        ranges: ma.ranges,
        schedule: ma.schedule,
    };
    replace_map(&*arrays, df, c.a, scope, &gone, (&sources, &dests), memo)
}

fn fuse_recompute(
    arrays: &mut Scratch<'_>,
    df: &mut Dataflow,
    c: &Candidate,
    offsets: &[Vec<i64>],
    memo: &mut BoundaryMemo,
) -> bool {
    let (Node::Map(ma), Node::Map(mb)) = (df.node(c.a).clone(), df.node(c.b).clone()) else {
        return false;
    };
    let mut body = mb.body.clone();
    // One copy of A's body per offset, writing a local scalar.
    let mut value_of: BTreeMap<Vec<i64>, (NodeId, String)> = BTreeMap::new();
    for o in offsets {
        let shift: BTreeMap<String, SymExpr> = ma
            .params
            .iter()
            .zip(&c.sel)
            .zip(o)
            .map(|((p, q), &off)| (p.clone(), SymExpr::sym(q).add(&SymExpr::Int(off))))
            .collect();
        let mut copy = ma.body.clone();
        substitute_params(&mut copy, &shift);
        let ids = copy_into(&mut body, &copy);
        let write = ids
            .values()
            .copied()
            .find(|&n| body.node(n).as_access() == Some(c.t.as_str()) && body.in_degree(n) > 0)
            .expect("A writes T");
        let scalar = local_scalar(arrays, &c.t);
        make_local(&mut body, write, &scalar);
        value_of.insert(o.clone(), (write, scalar));
    }
    // B's reads of T come from those scalars.
    for n in body.node_ids() {
        if body.node(n).as_access() != Some(c.t.as_str()) || body.in_degree(n) > 0 {
            continue;
        }
        for e in body.out_edges(n) {
            let o = offset_of(&body.edge(e).memlet.subset, &c.sel, &c.base).expect("checked");
            let (from, scalar) = &value_of[&o];
            let (_, dst) = body.endpoints(e);
            let mut edge = body.graph.remove_edge(e).expect("edge of the body");
            edge.memlet = scalar_memlet(scalar);
            body.graph.add_edge(*from, dst, edge);
        }
        body.graph.remove_node(n);
    }
    let (mut sources, dests) = neighbours(df, c.b);
    sources.remove(&c.t);
    let (sa, _) = neighbours(df, c.a);
    for (k, v) in sa {
        sources.entry(k).or_insert(v);
    }
    let label = format!("{}+{}", ma.label, mb.label);
    let scope = MapScope { label, body, ..mb };
    replace_map(
        &*arrays,
        df,
        c.b,
        scope,
        &[c.a, c.t_node],
        (&sources, &dests),
        memo,
    )
}
