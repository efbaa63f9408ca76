//! Redundant copies: a transient written whole by one producer and then copied whole into
//! another container of the same type and shape, and used nowhere else, is a detour: the
//! producer writes the destination directly and the transient disappears. (Front ends
//! that translate `b[:] = a + c` produce exactly this; DaCe calls it a redundant array.)
//!
//! ```text
//! u ─► map f ─► tmp ──copy──► out          u ─► map f ─► out
//! ```
//!
//! Legality: the copy carries every element of `tmp`, so the producer must write every
//! element itself — judged from what its body writes over its ranges
//! (`pattern::writes_whole`), since a map's edge may over-approximate its body — and
//! plainly: a write-conflict resolution anywhere on its path (the body's edge included)
//! combines with the old value, which is `tmp`'s before and `out`'s after.
//!
//! Across states ([`merge_into_destinations`]): a transient assembled over several states
//! (GT4Py's `concat_where`: one piece per state) and then copied whole into another
//! transient that nothing touched before is that transient under another name.
//!
//! Why one file of this size: the two forms of the rule (within a state, and in place
//! across two states) share the proof that the copy is redundant.

use sdflow_ir::{DataDesc, Dataflow, Dim, Memlet, Node, NodeId, Sdfg, Subset, SymExpr};

use crate::pass::{Changes, Pass};

mod write_back;
mod zoned;
use crate::pattern::{
    DataUses, data_uses, for_each_state_parallel, is_full, move_in_edges, node_reads_writes,
    rename_data, same_extent, writes_whole,
};

/// See the module documentation.
pub struct RedundantCopy;

impl Pass for RedundantCopy {
    fn name(&self) -> &'static str {
        "redundant_copy"
    }

    fn run(&self, sdfg: &mut Sdfg) -> Changes {
        let uses = data_uses(sdfg);
        // States in parallel: a removed copy's source is private to its state (one access
        // node), so the states' rewrites are independent; removals are merged in order.
        let done =
            for_each_state_parallel(sdfg, 1, |shared, graph| remove_copies(shared, &uses, graph));
        let mut ch = Changes::default();
        for (_, removed) in done {
            ch.add("copies_removed", removed.len());
            let through = removed.iter().filter(|(_, t)| *t).count();
            ch.add("copies_removed_through_callees", through);
            for (from, _) in &removed {
                sdfg.arrays.remove(from);
            }
        }
        let in_place = remove_in_place(sdfg);
        ch.add("copies_removed_in_place", in_place.len());
        for from in &in_place {
            sdfg.arrays.remove(from);
        }
        ch.add("transients_merged", merge_into_destinations(sdfg));
        ch.add("write_backs_merged", write_back::merge_write_backs(sdfg));
        ch.add(
            "zoned_write_backs_merged",
            zoned::merge_zoned_write_backs(sdfg),
        );
        ch
    }
}

/// The copies a state makes of transients the state before it computed, into containers
/// their producers update in place (GT4Py's `theta_v = f(theta_v)`: the program computes
/// the new values into a transient, a later state copies them over the field): the
/// producer writes the field itself. Returns the transients that disappeared.
///
/// ```text
/// state 1: theta_v ─► map A ─► tmp        state 1: theta_v ─► map A ─► theta_v
/// state 2: tmp ──copy──► theta_v     →    state 2: (nothing)
/// ```
///
/// Legality, besides the in-state rule's (the copy carries the whole transient, written
/// whole and plainly by a map, into a box of the field): the transient lives in these
/// two states only and nothing in the first reads it; in the first state nothing but
/// the producer touches the field; the producer reads the field only at the point it
/// writes (`tmp[p + c]` against `field[p + c + shift]`), before it writes it — so a
/// point's write changes no other point's read, and its own read sees the old value.
fn remove_in_place(sdfg: &mut Sdfg) -> Vec<String> {
    let mut pairs: Vec<(usize, usize)> = Vec::new();
    crate::pattern::find_in_seqs(&mut sdfg.body, &mut |items| {
        for w in items.windows(2) {
            if let [sdflow_ir::Block::State(a), sdflow_ir::Block::State(b)] = w
                && a != b
            {
                pairs.push((a.index(), b.index()));
            }
        }
        false
    });
    // Candidates: the second state copies a transient T into D, and in the first a map
    // that reads D writes T. The program's uses are gathered once, and only if one is.
    pairs.retain(|&(s1, s2)| {
        let (g1, g2) = (&sdfg.states[s1].graph, &sdfg.states[s2].graph);
        g2.edge_ids().into_iter().any(|e| {
            let (a, b) = g2.endpoints(e);
            let (Some(t), Some(d)) = (g2.node(a).as_access(), g2.node(b).as_access()) else {
                return false;
            };
            g2.in_degree(a) == 0
                && sdfg.arrays.get(t).is_some_and(DataDesc::transient)
                && g1.access_nodes(t).into_iter().any(|t1| {
                    g1.in_edges(t1).into_iter().any(|w| {
                        let producer = g1.endpoints(w).0;
                        matches!(g1.node(producer), Node::Map(_))
                            && g1
                                .in_edges(producer)
                                .into_iter()
                                .any(|r| g1.edge(r).memlet.data == d)
                    })
                })
        })
    });
    if pairs.is_empty() {
        return Vec::new();
    }
    let uses = data_uses(sdfg);
    let mut removed = Vec::new();
    for (s1, s2) in pairs {
        while let Some(f) = find_in_place(sdfg, &uses, s1, s2) {
            let InPlace {
                t,
                d,
                dtype,
                old,
                body,
                shift,
                producer,
                t1,
                copy_src,
                copy_dst,
            } = f;
            if body.accessed_data_refs().contains(old.as_str()) {
                sdfg.arrays.insert(
                    old,
                    DataDesc::Scalar {
                        dtype,
                        transient: true,
                    },
                );
            }
            let g1 = &mut sdfg.states[s1].graph;
            if let Node::Map(m) = &mut g1.graph[producer] {
                m.body = body;
            }
            for e in g1.in_edges(t1) {
                let m = &mut g1.graph[e].memlet;
                m.data = d.clone();
                m.subset = shifted(&m.subset, &shift);
            }
            g1.graph[t1] = Node::Access(d.clone());
            let g2 = &mut sdfg.states[s2].graph;
            g2.graph.remove_node(copy_src);
            if g2.in_degree(copy_dst) == 0 && g2.out_degree(copy_dst) == 0 {
                g2.graph.remove_node(copy_dst);
            }
            removed.push(t);
        }
    }
    removed
}

/// An in-place rewrite found by [`find_in_place`].
struct InPlace {
    t: String,
    d: String,
    dtype: sdflow_ir::DType,
    /// The body-local scalar holding the old value, and the producer's new body.
    old: String,
    body: Dataflow,
    shift: Vec<SymExpr>,
    producer: NodeId,
    t1: NodeId,
    copy_src: NodeId,
    copy_dst: NodeId,
}

fn find_in_place(sdfg: &Sdfg, uses: &DataUses, s1: usize, s2: usize) -> Option<InPlace> {
    let (g1, g2) = (&sdfg.states[s1].graph, &sdfg.states[s2].graph);
    for copy_src in g2.node_ids() {
        let Some(t) = g2.node(copy_src).as_access() else {
            continue;
        };
        let (Some(DataDesc::Array(dt)), Some(u)) = (sdfg.arrays.get(t), uses.get(t)) else {
            continue;
        };
        let outs = g2.out_edges(copy_src);
        let [copy] = outs.as_slice() else { continue };
        let copy_dst = g2.endpoints(*copy).1;
        let Some(d) = g2.node(copy_dst).as_access() else {
            continue;
        };
        let Some(DataDesc::Array(dd)) = sdfg.arrays.get(d) else {
            continue;
        };
        if !dt.transient
            || t == d
            || g2.in_degree(copy_src) != 0
            || g2.in_degree(copy_dst) != 1
            || u.access_nodes != 2
            || u.states != [s1.min(s2), s1.max(s2)]
            || u.in_control
            || dt.dtype != dd.dtype
            || dt.shape.len() != dd.shape.len()
        {
            continue;
        }
        let cm = &g2.edge(*copy).memlet;
        if cm.data != t || cm.wcr.is_some() || !is_full(&cm.subset, &dt.shape) {
            continue;
        }
        let shift = match destination_box(cm.other_subset.as_ref(), &dt.shape, &dd.shape)? {
            Some(s) => s,
            None => vec![SymExpr::Int(0); dt.shape.len()],
        };
        // In the first state: T written once, by a map, read by nothing.
        let [t1] = g1.access_nodes(t)[..] else {
            continue;
        };
        let ins = g1.in_edges(t1);
        let [w] = ins.as_slice() else { continue };
        let producer = g1.endpoints(*w).0;
        let Node::Map(m) = g1.node(producer) else {
            continue;
        };
        if g1.out_degree(t1) != 0 || !writes_whole(g1, producer, t, &dt.shape) {
            continue;
        }
        // Nothing else in the first state touches D, nor reads it as a table.
        let others_touch = g1.access_nodes(d).into_iter().any(|n| {
            g1.in_degree(n) > 0
                || g1
                    .out_edges(n)
                    .into_iter()
                    .any(|e| g1.endpoints(e).1 != producer)
        });
        if others_touch
            || crate::pattern::tables_read(g1).contains(d)
            || node_reads_writes(g1, producer).1.contains(d)
            || copy_names_other_end(&m.body, t)
        {
            continue;
        }
        let old = crate::pattern::fresh_name(sdfg, &format!("{d}_old"));
        if let Some(body) = in_place_body(m, t, d, &shift, (&old, dd.dtype)) {
            return Some(InPlace {
                t: t.to_string(),
                d: d.to_string(),
                dtype: dd.dtype,
                old,
                body,
                shift,
                producer,
                t1,
                copy_src,
                copy_dst,
            });
        }
    }
    None
}

/// Map `m`'s body writing `d` in place of `t` (`t[x]` is `d[x + shift]`), or `None` when
/// it does not read `d` (the in-state rule's case) or when writing in place would change
/// what it reads: every memlet of `d` in the body must read one
/// element at the written point, at the body's top level; those reads then come from one
/// read of the old value into the body-local scalar `old` (of `d`'s type) made before
/// the write (the read must reach the write through the body's dataflow: a read of the
/// old value after the write would see the new one).
fn in_place_body(
    m: &sdflow_ir::MapScope,
    t: &str,
    d: &str,
    shift: &[SymExpr],
    old: (&str, sdflow_ir::DType),
) -> Option<Dataflow> {
    let (old, dtype) = old;
    let mut body = m.body.clone();
    let writes: Vec<_> = body
        .node_ids()
        .into_iter()
        .filter(|&n| body.node(n).as_access() == Some(t) && body.in_degree(n) > 0)
        .collect();
    let [t_node] = writes.as_slice() else {
        return None;
    };
    let ins = body.in_edges(*t_node);
    let [w] = ins.as_slice() else { return None };
    let wm = &body.edge(*w).memlet;
    let at = if wm.data == t {
        &wm.subset
    } else {
        wm.other_subset.as_ref()?
    };
    let expected = shifted(at, shift);
    let same_point = |s: &Subset| {
        s.rank() == expected.rank()
            && s.0.iter().zip(&expected.0).all(|(x, y)| match (x, y) {
                (Dim::Index(x), Dim::Index(y)) => x.const_diff(y) == Some(0),
                _ => false,
            })
    };
    // Reads of `d`: top-level access nodes, each edge out of them one element at the
    // written point; nothing else names `d`.
    let mut readers = Vec::new();
    for n in body.node_ids() {
        match body.node(n) {
            Node::Access(x) if x == d => {
                if body.in_degree(n) > 0 {
                    return None;
                }
                readers.push(n);
            }
            Node::Map(inner) if inner.body.accessed_data_refs().contains(d) => return None,
            Node::Nested(_)
                if body
                    .in_edges(n)
                    .into_iter()
                    .any(|e| body.edge(e).memlet.data == d) =>
            {
                return None;
            }
            _ => {}
        }
    }
    for e in body.edge_ids() {
        let m = &body.edge(e).memlet;
        let (a, b) = body.endpoints(e);
        let touches = [a, b].iter().any(|&x| body.node(x).as_access() == Some(d));
        if m.subset.tables().contains(&d)
            || (m.data != d && touches)
            || (m.data == d && !same_point(&m.subset))
        {
            return None;
        }
    }
    // A producer that does not read the field is left to the rule within one state
    // (state fusion brings the copy to it, and fusion may look through the transient).
    if readers.is_empty() {
        return None;
    }
    {
        // One read of the old value (a tasklet `o = a`, which the e-graph pass sees
        // through), read by every former reader.
        let src = body.add_access(d);
        let scalar = body.add_access(old);
        let read = body.add_node(Node::Tasklet(sdflow_ir::Tasklet {
            name: format!("{d}_old"),
            inputs: [("a".to_string(), dtype)].into(),
            outputs: [("o".to_string(), dtype)].into(),
            code: vec![sdflow_ir::Stmt::parse("o = a").ok()?],
        }));
        body.add_edge(src, None, read, Some("a"), Memlet::new(d, expected.clone()));
        body.add_edge(
            read,
            Some("o"),
            scalar,
            None,
            Memlet::new(old, Subset::default()),
        );
        for n in readers {
            for e in body.out_edges(n) {
                let dst = body.endpoints(e).1;
                let mut edge = body.graph.remove_edge(e).expect("edge of the body");
                edge.memlet.data = old.to_string();
                edge.memlet.subset = Subset::default();
                body.graph.add_edge(scalar, dst, edge);
            }
            body.graph.remove_node(n);
        }
        if !body.reaches(scalar, *t_node) {
            return None;
        }
    }
    rename_data_shifted(&mut body, t, d, shift);
    Some(body)
}

/// Removes the redundant copies of one state's graph; returns the containers that
/// disappeared.
/// The transients removed, each with whether its producer wrote it through a callee
/// ([`crate::pattern::map_callee_writes_whole`]).
fn remove_copies(sdfg: &Sdfg, uses: &DataUses, graph: &mut Dataflow) -> Vec<(String, bool)> {
    let mut removed = Vec::new();
    while let Some((t1, t2, producer, shift, through)) = find(sdfg, graph, uses) {
        let from = graph.node(t1).as_access().unwrap_or_default().to_string();
        let to = graph.node(t2).as_access().unwrap_or_default().to_string();
        let in_edge = graph.in_edges(t1)[0];
        if let Node::Map(m) = &mut graph.graph[producer] {
            match &shift {
                None => rename_data(&mut m.body, &from, &to),
                Some(s) => rename_data_shifted(&mut m.body, &from, &to, s),
            }
        }
        if graph.node(producer).as_access().is_none() {
            let m = &mut graph.graph[in_edge].memlet;
            m.data = to.clone();
            if let Some(s) = &shift {
                m.subset = shifted(&m.subset, s);
            }
        }
        for e in graph.out_edges(t1) {
            graph.graph.remove_edge(e);
        }
        move_in_edges(graph, t1, t2);
        graph.graph.remove_node(t1);
        removed.push((from, through));
    }
    removed
}

/// A copy to remove: `tmp`'s node, `out`'s node, the producer, where `tmp`'s indices
/// land in `out` (`None`: the same indices), and whether the producer writes `tmp`
/// through the callee its body calls.
type Found = (NodeId, NodeId, NodeId, Option<Vec<SymExpr>>, bool);

/// Where a whole copy of a container of shape `from` lands in one of shape `to` through
/// `other`: `Some(None)` at the same indices (the whole of `to`, same shape), `Some(Some(
/// starts))` in a unit-step box of `to` with `from`'s extents, else `None`.
fn destination_box(
    other: Option<&Subset>,
    from: &[SymExpr],
    to: &[SymExpr],
) -> Option<Option<Vec<SymExpr>>> {
    let same_shape = from
        .iter()
        .zip(to)
        .all(|(x, y)| x.simplify() == y.simplify());
    match other {
        None if same_shape => Some(None),
        Some(o) if same_shape && is_full(o, to) => Some(None),
        Some(o) if o.rank() == from.len() => {
            let starts =
                o.0.iter()
                    .zip(from)
                    .map(|(d, n)| match d {
                        Dim::Range { start, end, step }
                            if step.as_int() == Some(1) && same_extent(&end.sub(start), n) =>
                        {
                            Some(start.clone())
                        }
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>()?;
            Some(Some(starts))
        }
        _ => None,
    }
}

fn find(sdfg: &Sdfg, df: &Dataflow, uses: &DataUses) -> Option<Found> {
    for t1 in df.node_ids() {
        let Some(a) = df.node(t1).as_access() else {
            continue;
        };
        let (Some(DataDesc::Array(da)), Some(u)) = (sdfg.arrays.get(a), uses.get(a)) else {
            continue;
        };
        let (outs, ins) = (df.out_edges(t1), df.in_edges(t1));
        let ([copy], [write]) = (outs.as_slice(), ins.as_slice()) else {
            continue;
        };
        let t2 = df.endpoints(*copy).1;
        let Some(b) = df.node(t2).as_access() else {
            continue;
        };
        let Some(DataDesc::Array(db)) = sdfg.arrays.get(b) else {
            continue;
        };
        // Cheapest conditions first: most candidates fail on use counts or types.
        if !da.transient || a == b || u.access_nodes != 1 || u.in_control || df.in_degree(t2) != 1 {
            continue;
        }
        let cm: &Memlet = &df.edge(*copy).memlet;
        if da.dtype != db.dtype
            || da.shape.len() != db.shape.len()
            || cm.data != a
            || cm.wcr.is_some()
            || !is_full(&cm.subset, &da.shape)
        {
            continue;
        }
        // Where the copy puts `tmp`'s first element in `out`: the whole of `out` (same
        // shape), or a box of it with `tmp`'s extents.
        let Some(shift) = destination_box(cm.other_subset.as_ref(), &da.shape, &db.shape) else {
            continue;
        };
        let producer = df.endpoints(*write).0;
        if matches!(df.node(producer), Node::Nested(_) | Node::Library(_)) {
            continue;
        }
        let (reads, writes) = node_reads_writes(df, producer);
        if reads.contains(b) || writes.contains(b) {
            continue;
        }
        // What the producer really writes (its body over its ranges, not its summary
        // memlet, which may over-approximate), as a plain write.
        // A shifted rename moves the subsets of `tmp`'s memlets, not second subsets or
        // index tables.
        if shift.is_some()
            && let Node::Map(m) = df.node(producer)
            && (crate::pattern::tables_read(&m.body).contains(a)
                || copy_names_other_end(&m.body, a))
        {
            continue;
        }
        // Or, unshifted, through the callee it calls at every point (a scan's columns).
        let through_callee = || {
            shift
                .as_ref()
                .is_none_or(|s| s.iter().all(|x| x.simplify().as_int() == Some(0)))
                && matches!(df.node(producer), Node::Map(m)
                    if crate::pattern::map_callee_writes_whole(m, a, &da.shape))
                && !crate::pattern::wcr_on_path(df, producer, a)
        };
        if writes_whole(df, producer, a, &da.shape) {
            return Some((t1, t2, producer, shift, false));
        }
        if through_callee() {
            return Some((t1, t2, producer, None, true));
        }
    }
    None
}

/// Applies the merges `find` finds, one at a time (each changes the uses the next is
/// judged on; each removes a container, so this ends); returns how many.
fn one_at_a_time<P>(
    sdfg: &mut Sdfg,
    find: impl Fn(&Sdfg) -> Option<P>,
    apply: impl Fn(&mut Sdfg, P),
) -> usize {
    let mut merged = 0;
    while let Some(plan) = find(sdfg) {
        apply(sdfg, plan);
        merged += 1;
    }
    merged
}

/// `s` with each dimension moved by `shift` (its indices and ranges, not tables).
fn shifted(s: &Subset, shift: &[SymExpr]) -> Subset {
    if s.0.is_empty() {
        return s.clone();
    }
    Subset(
        s.0.iter()
            .zip(shift)
            .map(|(d, c)| crate::pattern::shift_dim(d, c))
            .collect(),
    )
}

/// [`rename_data`] where element `x` of `from` is element `x + shift` of `to`: the
/// producer's writes land in the box of `to` the copy wrote.
fn rename_data_shifted(df: &mut Dataflow, from: &str, to: &str, shift: &[SymExpr]) {
    for e in df.edge_ids() {
        // A copy's second subset is its other end's: shifted when that end is `from`.
        let (a, b) = df.endpoints(e);
        let touches = [a, b].iter().any(|&x| df.node(x).as_access() == Some(from));
        let m = &mut df.graph[e].memlet;
        if m.data == from {
            m.data = to.to_string();
            m.subset = shifted(&m.subset, shift);
        } else if touches && let Some(o) = &m.other_subset {
            m.other_subset = Some(shifted(o, shift));
        }
    }
    for n in df.node_ids() {
        match &mut df.graph[n] {
            Node::Access(d) if d == from => *d = to.to_string(),
            Node::Map(m) => rename_data_shifted(&mut m.body, from, to, shift),
            _ => {}
        }
    }
}

/// True when a copy touching `data` in `df` (inner maps too) names only its other end,
/// one subset for both: a shifted rename could not move `data`'s side alone.
fn copy_names_other_end(df: &Dataflow, data: &str) -> bool {
    df.edge_ids().into_iter().any(|e| {
        let (a, b) = df.endpoints(e);
        let m = &df.edge(e).memlet;
        m.data != data
            && m.other_subset.is_none()
            && [a, b].iter().any(|&x| df.node(x).as_access() == Some(data))
    }) || df.graph.node_weights().any(|n| match n {
        Node::Map(m) => copy_names_other_end(&m.body, data),
        _ => false,
    })
}

/// Where a state runs in the control flow: the steps from the program's body down to it
/// (a child of a sequence by position, or an arm of a conditional), and whether a loop
/// encloses it.
struct Place {
    steps: Vec<Step>,
    in_loop: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Step {
    Child(usize),
    Then,
    Otherwise,
    Body,
}

/// How a state's runs relate to another's in one run of the program.
#[derive(PartialEq, Eq, Debug)]
enum Order {
    Same,
    Before,
    After,
    /// Arms of one conditional: never both in one pass through it.
    Exclusive,
    /// Anything else (one encloses the other in a loop, …): no order to rely on.
    Unknown,
}

fn places(body: &sdflow_ir::Block) -> rustc_hash::FxHashMap<usize, Place> {
    fn walk(
        b: &sdflow_ir::Block,
        steps: &mut Vec<Step>,
        in_loop: bool,
        out: &mut rustc_hash::FxHashMap<usize, Place>,
    ) {
        use sdflow_ir::Block;
        match b {
            Block::State(s) => {
                out.insert(
                    s.index(),
                    Place {
                        steps: steps.clone(),
                        in_loop,
                    },
                );
            }
            Block::Seq(items) => {
                for (i, item) in items.iter().enumerate() {
                    steps.push(Step::Child(i));
                    walk(item, steps, in_loop, out);
                    steps.pop();
                }
            }
            Block::Loop(l) => {
                steps.push(Step::Body);
                walk(&l.body, steps, true, out);
                steps.pop();
            }
            Block::If(i) => {
                steps.push(Step::Then);
                walk(&i.then, steps, in_loop, out);
                steps.pop();
                steps.push(Step::Otherwise);
                walk(&i.otherwise, steps, in_loop, out);
                steps.pop();
            }
            Block::Assign(_) => {}
        }
    }
    let mut out = rustc_hash::FxHashMap::default();
    walk(body, &mut Vec::new(), false, &mut out);
    out
}

/// How many steps from the top of the control flow the places of `x` and `s` share.
fn shared_steps(x: &Place, s: &Place) -> usize {
    x.steps
        .iter()
        .zip(&s.steps)
        .take_while(|(a, b)| a == b)
        .count()
}

/// When `x` runs relative to `s`, for a state `s` no loop encloses.
fn order(x: &Place, s: &Place) -> Order {
    let common = shared_steps(x, s);
    match (x.steps.get(common), s.steps.get(common)) {
        (None, None) => Order::Same,
        (Some(Step::Child(i)), Some(Step::Child(j))) if i < j => Order::Before,
        (Some(Step::Child(_)), Some(Step::Child(_))) => Order::After,
        (Some(Step::Then), Some(Step::Otherwise)) | (Some(Step::Otherwise), Some(Step::Then)) => {
            Order::Exclusive
        }
        _ => Order::Unknown,
    }
}

/// Whether the state at `s` runs after the one at `x` whenever that ran: `x` comes first
/// in a sequence that holds both, and `s` is in no arm of a conditional inside that
/// sequence (an `if` around `s` alone may skip it after `x` ran, even one testing the
/// condition an earlier `if` around `x` tested).
fn always_after(x: &Place, s: &Place) -> bool {
    order(x, s) == Order::Before
        && s.steps[shared_steps(x, s) + 1..]
            .iter()
            .all(|st| matches!(st, Step::Child(_)))
}

/// A plain copy of all of a transient array `from` into a box of an array `to` of the
/// same element type, rank and storage, in a state no loop encloses: an edge between two
/// access nodes, each its container's only one in the state, the source read by the
/// copy alone and the destination written by it alone, neither read as an index table
/// there. `shift`: where `from`'s element 0 lands in `to`.
struct WholeCopy<'a> {
    state: usize,
    place: &'a Place,
    src: NodeId,
    dst: NodeId,
    from: &'a str,
    to: &'a str,
    shift: Vec<SymExpr>,
}

/// Every [`WholeCopy`] of the program, state by state in the control flow's order.
fn whole_copies<'a>(
    sdfg: &'a Sdfg,
    places: &'a rustc_hash::FxHashMap<usize, Place>,
) -> Vec<WholeCopy<'a>> {
    let mut out = Vec::new();
    for sid in sdfg.body.states() {
        let s = sid.index();
        let Some(place) = places.get(&s).filter(|p| !p.in_loop) else {
            continue;
        };
        let df = &sdfg.states[s].graph;
        // The state's index tables, found once for its candidates.
        let mut tables = None;
        for e in df.edge_ids() {
            let (src, dst) = df.endpoints(e);
            let (Some(a), Some(b)) = (df.node(src).as_access(), df.node(dst).as_access()) else {
                continue;
            };
            let (Some(DataDesc::Array(da)), Some(DataDesc::Array(db))) =
                (sdfg.arrays.get(a), sdfg.arrays.get(b))
            else {
                continue;
            };
            if a == b
                || !da.transient
                || da.dtype != db.dtype
                || da.storage != db.storage
                || da.shape.len() != db.shape.len()
                || df.out_degree(src) != 1
                || df.in_degree(dst) != 1
            {
                continue;
            }
            // All of `from`, into a box of `to`; the memlet names either end.
            let cm = &df.edge(e).memlet;
            let (a_side, b_side) = if cm.data == a {
                (&cm.subset, cm.other_subset.as_ref())
            } else if cm.data == b {
                match &cm.other_subset {
                    Some(o) => (o, Some(&cm.subset)),
                    None => (&cm.subset, Some(&cm.subset)),
                }
            } else {
                continue;
            };
            if cm.wcr.is_some() || !is_full(a_side, &da.shape) {
                continue;
            }
            let shift = match destination_box(b_side, &da.shape, &db.shape) {
                Some(Some(starts)) => starts,
                Some(None) => vec![SymExpr::Int(0); da.shape.len()],
                None => continue,
            };
            if df.access_nodes(a).len() != 1 || df.access_nodes(b).len() != 1 {
                continue;
            }
            let tables = tables.get_or_insert_with(|| crate::pattern::tables_read(df));
            if tables.contains(a) || tables.contains(b) {
                continue;
            }
            out.push(WholeCopy {
                state: s,
                place,
                src,
                dst,
                from: a,
                to: b,
                shift,
            });
        }
    }
    out
}

/// Merges transients into the transients they are copied into, across states; returns
/// how many disappeared.
///
/// ```text
/// state 1: … ─► map f ─► A[0:n]            state 1: … ─► map f ─► B[0:n]
/// state 2: … ─► map g ─► A[n:N]       →    state 2: … ─► map g ─► B[n:N]
/// state 3: A ──copy (whole)──► B ─► …      state 3: B ─► …
/// ```
///
/// A transient `A` copied whole into a transient `B` of the same shape (or into a box of
/// `B` that starts at index 0 of every dimension, with `A`'s extents) becomes `B`: every
/// access of `A` then accesses the same elements of `B`, and the copy goes. Legality, in
/// one run of the program:
///
/// - no loop encloses the copy's state, and its copy edge is a plain one;
/// - `A` is used only in states that run before the copy's (earlier in a sequence), and
///   in the copy's state only by the copy's source node, which nothing but the copy
///   reads: after the copy nobody sees `A`, so nobody sees that it became `B`;
/// - `B` is used only in states that run after the copy's, or in the other arm of a
///   conditional, and in the copy's state only by the copy's destination node, written
///   by the copy alone. So before the copy `B` holds what every transient starts with,
///   as `A` did: where the pieces written into `A` do not cover it, the copy carried
///   `A`'s initial elements into `B`, which `B` holds already — no proof of coverage
///   is needed (GT4Py's pieces are bounded by `min`/`max` of the domain symbols);
/// - neither is read by the control flow, both live in the same storage.
pub fn merge_into_destinations(sdfg: &mut Sdfg) -> usize {
    let mut merged = 0;
    // One merge at a time: each changes the uses the next is judged on.
    while let Some(Merge {
        state,
        src,
        dst,
        from,
        to,
    }) = find_merge(sdfg)
    {
        let uses = data_uses(sdfg);
        for x in uses
            .get(&from)
            .map(|u| u.states.clone())
            .unwrap_or_default()
        {
            rename_data(&mut sdfg.states[x].graph, &from, &to);
        }
        // The copy is now `B ─► B` (renaming keeps the nodes): its source node's writers
        // write the destination node.
        let df = &mut sdfg.states[state].graph;
        for e in df.out_edges(src) {
            df.graph.remove_edge(e);
        }
        move_in_edges(df, src, dst);
        df.graph.remove_node(src);
        sdfg.arrays.remove(&from);
        merged += 1;
    }
    merged
}

/// A merge [`merge_into_destinations`] may make: the copy's state, its source and
/// destination nodes, `A` and `B`.
struct Merge {
    state: usize,
    src: NodeId,
    dst: NodeId,
    from: String,
    to: String,
}

/// The next merge [`merge_into_destinations`] may make.
fn find_merge(sdfg: &Sdfg) -> Option<Merge> {
    let places = places(&sdfg.body);
    let mut uses: Option<DataUses> = None;
    for c in whole_copies(sdfg, &places) {
        let (s, place, a, b) = (c.state, c.place, c.from, c.to);
        // Into a transient, at the same indices.
        let transient = matches!(sdfg.arrays.get(b), Some(DataDesc::Array(db)) if db.transient);
        if !transient || c.shift.iter().any(|x| x.simplify().as_int() != Some(0)) {
            continue;
        }
        let uses = uses.get_or_insert_with(|| data_uses(sdfg));
        let (Some(ua), Some(ub)) = (uses.get(a), uses.get(b)) else {
            continue;
        };
        if ua.in_control || ub.in_control {
            continue;
        }
        let when = |x: usize| match places.get(&x) {
            Some(p) => order(p, place),
            None => Order::Unknown,
        };
        let a_ok = ua
            .states
            .iter()
            .all(|&x| matches!(when(x), Order::Same | Order::Before));
        let b_ok = ub
            .states
            .iter()
            .all(|&x| matches!(when(x), Order::Same | Order::After | Order::Exclusive));
        if a_ok && b_ok {
            return Some(Merge {
                state: s,
                src: c.src,
                dst: c.dst,
                from: a.to_string(),
                to: b.to_string(),
            });
        }
    }
    None
}
