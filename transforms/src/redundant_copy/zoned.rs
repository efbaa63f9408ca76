//! Write-back buffers read back in zones: a transient `T` that a program assembles and
//! then hands to a container `D` zone by zone — copies of some zones, maps that compute
//! the others from `T` at the point they write — is `D` under another name. GT4Py lowers
//! two `concat_where`s in a row this way (`apply_diffusion_to_w_…`: `w` is `w_old`
//! diffused on an interior, then damped on a band of levels within it): the first result
//! is a grid-sized transient, the second copies it into the field zone by zone around
//! the band it changes.
//!
//! ```text
//! map f ─► T[a:n]                        map f ─► D[a:n]
//! D0[0:a] ─copy─► T[0:a]                 D0[0:a] ─copy─► D[0:a]
//! T[b:c] ─► map g ─► D[b:c]         →    D[b:c] ─► map g ─► D[b:c]   (in place)
//! T[0:b] ─copy─► D[0:b]                  (nothing)
//! T[c:n] ─copy─► D[c:n]                  (nothing)
//! ```
//!
//! Every access of `T` becomes one of `D` (element `x` of `T` is `x + shift` of `D`);
//! the copies become no-ops and go, the maps update `D` in place. Legality:
//!
//! - `T` is a transient array the control flow does not read, read as an index table
//!   nowhere, and no loop encloses a state that uses it; it is written in some states
//!   (the producers) and read in others (the consumers), never both, and every producer
//!   runs before every consumer;
//! - the consumers run together: below the block that holds them all there are only
//!   sequences (no conditional, no loop), and every producer lies in that block, so once
//!   a producer has run, every consumer runs after it;
//! - in a consumer's state, every reader of `T` is a plain copy of a box of `T` into the
//!   box of `D` moved by `shift`, or a map that reads `T` only at the point it writes `D`
//!   (moved by `shift`, one write, one distinct parameter per dimension, which every read
//!   of `T` in the body reaches, so the point's read precedes its write once both are
//!   `D`), reading no `D` and touching `T` and `D` only at its body's top level; nothing
//!   else in those states reads or writes `D`;
//! - the maps' boxes are disjoint from every other consumer's (a copy after a map over
//!   the same elements would have put `T`'s value back); the consumers together cover
//!   all of `T` ([`union_covers`]): an element none wrote kept `D`'s old value, and would
//!   now get `T`'s;
//! - the producers cover all of `T` on every path to the consumers, plainly (no write
//!   conflict resolution, which would combine with `D`'s old value): an element none
//!   wrote carried `T`'s initial value into `D`, and would now keep `D`'s; with a
//!   nonzero shift, no producer's copy names only its other end, one subset for both
//!   (the rename moves `T`'s side of a copy, which needs a subset of its own);
//! - `D` is an array of `T`'s type, rank and storage, used only by the consumers and in
//!   states that run before every producer or after every consumer: nothing sees `D`
//!   between the first write of `T` and the last consumer.

use sdflow_ir::propagate::{disjoint_proven, union_covers};
use sdflow_ir::{DataDesc, Dataflow, Dim, EdgeId, Node, NodeId, Sdfg, Subset, SymExpr};

use super::write_back::{Event, subset_box, unshifted, walk};
use super::{Order, Place, Step, copy_names_other_end, order, places, rename_data_shifted};
use crate::pattern::{data_uses, map_written_boxes, tables_read, wcr_on_path};

/// Merges transients read back in zones into their destinations; returns how many went.
pub(super) fn merge_zoned_write_backs(sdfg: &mut Sdfg) -> usize {
    super::one_at_a_time(sdfg, find, apply)
}

/// A merge found by [`find`].
struct Plan {
    t: String,
    d: String,
    shift: Vec<SymExpr>,
    /// The consumers' copy edges, by state.
    copies: Vec<(usize, EdgeId)>,
    /// States with an access of `T`.
    states: Vec<usize>,
}

/// One reader of `T` in a consumer state.
struct Consumer {
    state: usize,
    /// The copy's edge, or `None` for a map.
    copy: Option<EdgeId>,
    /// Where it writes, in `T`'s indices.
    write: Subset,
    /// `D`'s index minus `T`'s, per dimension.
    shift: Vec<SymExpr>,
}

fn find(sdfg: &Sdfg) -> Option<Plan> {
    let uses = data_uses(sdfg);
    let mut places_cache = None;
    for (t, desc) in &sdfg.arrays {
        let DataDesc::Array(dt) = desc else { continue };
        let Some(ut) = uses.get(t) else { continue };
        if !dt.transient
            || ut.in_control
            || ut.read_in.is_empty()
            || ut.written_in.is_empty()
            || ut.read_in.iter().any(|s| ut.written_in.contains(s))
        {
            continue;
        }
        // Cheap first: every reader of `T` ends at one other container's access node.
        let Some(d) = destination(sdfg, t, &ut.read_in) else {
            continue;
        };
        let Some(DataDesc::Array(dd)) = sdfg.arrays.get(&d) else {
            continue;
        };
        let Some(ud) = uses.get(&d) else { continue };
        if ud.in_control
            || dd.dtype != dt.dtype
            || dd.storage != dt.storage
            || dd.shape.len() != dt.shape.len()
        {
            continue;
        }
        let places = places_cache.get_or_insert_with(|| places(&sdfg.body));
        let place = |s: &usize| places.get(s).filter(|p| !p.in_loop);
        if ut.states.iter().any(|s| place(s).is_none()) {
            continue;
        }
        let consumers_place: Vec<&Place> = ut.read_in.iter().filter_map(place).collect();
        let producers: Vec<&Place> = ut.written_in.iter().filter_map(place).collect();
        if !run_together(&consumers_place, &producers) {
            continue;
        }
        // `D` outside the consumers: before every producer or after every consumer.
        let outside_ok = ud.states.iter().all(|s| {
            if ut.read_in.contains(s) {
                return true;
            }
            let Some(x) = places.get(s) else { return false };
            producers.iter().all(|p| order(x, p) == Order::Before)
                || consumers_place.iter().all(|c| order(x, c) == Order::After)
        });
        if !outside_ok {
            continue;
        }
        let mut consumers = Vec::new();
        if !ut
            .read_in
            .iter()
            .all(|&s| state_consumers(sdfg, s, t, &d, &mut consumers))
        {
            continue;
        }
        let Some(shift) = common_shift(&consumers) else {
            continue;
        };
        // A shifted rename moves `T`'s subsets; a producer's copy that names only its
        // other end, one subset for both, could not move `T`'s side alone.
        let unshifted = shift.iter().all(|x| x.simplify().as_int() == Some(0));
        if !unshifted
            && ut
                .written_in
                .iter()
                .any(|&s| copy_names_other_end(&sdfg.states[s].graph, t))
        {
            continue;
        }
        // The maps' boxes touch no other consumer's; together they cover `T`.
        let overlaps = consumers.iter().enumerate().any(|(i, a)| {
            a.copy.is_none()
                && consumers
                    .iter()
                    .enumerate()
                    .any(|(j, b)| i != j && !disjoint_proven(&a.write, &b.write))
        });
        if overlaps {
            continue;
        }
        let boxes: Option<Vec<_>> = consumers.iter().map(|c| subset_box(&c.write)).collect();
        if !boxes.is_some_and(|b| union_covers(&dt.shape, &b)) {
            continue;
        }
        if !producers_cover(sdfg, t, &dt.shape, &ut.read_in, places)
            || !no_assignment_before(sdfg, &ut.read_in)
        {
            continue;
        }
        return Some(Plan {
            t: t.clone(),
            d,
            shift,
            copies: consumers
                .iter()
                .filter_map(|c| c.copy.map(|e| (c.state, e)))
                .collect(),
            states: ut.states.clone(),
        });
    }
    None
}

/// The one container every reader of `t` in `states` writes: the far end of a copy, or
/// what a map reading `t` writes; `None` when there are several or `t` feeds anything
/// else.
fn destination(sdfg: &Sdfg, t: &str, states: &[usize]) -> Option<String> {
    let mut d: Option<&str> = None;
    for &s in states {
        let df = &sdfg.states[s].graph;
        for n in df.access_nodes(t) {
            for e in df.out_edges(n) {
                let r = df.endpoints(e).1;
                let written: Vec<&str> = match df.node(r) {
                    Node::Access(x) => vec![x.as_str()],
                    Node::Map(_) => df
                        .out_edges(r)
                        .into_iter()
                        .filter_map(|o| df.node(df.endpoints(o).1).as_access())
                        .collect(),
                    _ => return None,
                };
                for x in written {
                    if x == t || d.is_some_and(|d| d != x) {
                        return None;
                    }
                    d = Some(x);
                }
            }
        }
    }
    d.map(str::to_string)
}

/// Whether the consumers run together and after the producers: below the steps all
/// consumers share, each goes down through sequences only, and each producer's steps
/// start with the shared ones and run before every consumer.
fn run_together(consumers: &[&Place], producers: &[&Place]) -> bool {
    let Some(first) = consumers.first() else {
        return false;
    };
    let common = consumers.iter().fold(first.steps.len(), |k, c| {
        first
            .steps
            .iter()
            .zip(&c.steps)
            .take(k)
            .take_while(|(a, b)| a == b)
            .count()
    });
    let shared = &first.steps[..common];
    consumers.iter().all(|c| {
        c.steps[common..]
            .iter()
            .all(|s| matches!(s, Step::Child(_)))
    }) && producers.iter().all(|p| {
        p.steps.starts_with(shared) && consumers.iter().all(|c| order(p, c) == Order::Before)
    })
}

/// Gathers the readers of `t` in state `s` as [`Consumer`]s; false where one is not a
/// zone copy or an in-place map into `d`, or something else in the state touches `d`.
fn state_consumers(sdfg: &Sdfg, s: usize, t: &str, d: &str, out: &mut Vec<Consumer>) -> bool {
    let df = &sdfg.states[s].graph;
    let tables = tables_read(df);
    if tables.contains(t) || tables.contains(d) {
        return false;
    }
    let mut consumer_ends: Vec<NodeId> = Vec::new();
    for n in df.access_nodes(t) {
        if df.in_degree(n) > 0 {
            return false;
        }
        for e in df.out_edges(n) {
            let r = df.endpoints(e).1;
            let consumer = match df.node(r) {
                Node::Access(_) => zone_copy(df, e, t, s),
                Node::Map(_) => in_place_map(df, r, t, d, s),
                _ => None,
            };
            let Some(c) = consumer else { return false };
            consumer_ends.push(if c.copy.is_some() { n } else { r });
            out.push(c);
        }
    }
    // `D` here: written by the consumers alone, read by nothing.
    df.access_nodes(d).into_iter().all(|n| {
        df.out_degree(n) == 0
            && df.in_edges(n).into_iter().all(|e| {
                let w = df.endpoints(e).0;
                consumer_ends.contains(&w)
            })
    })
}

/// A plain copy along edge `e` from `t` into a box of another container, as a
/// [`Consumer`].
fn zone_copy(df: &Dataflow, e: EdgeId, t: &str, s: usize) -> Option<Consumer> {
    let m = &df.edge(e).memlet;
    if m.wcr.is_some() {
        return None;
    }
    let (t_side, d_side) = if m.data == t {
        (
            m.subset.clone(),
            m.other_subset.clone().unwrap_or(m.subset.clone()),
        )
    } else {
        (
            m.other_subset.clone().unwrap_or(m.subset.clone()),
            m.subset.clone(),
        )
    };
    let (tb, db) = (subset_box(&t_side)?, subset_box(&d_side)?);
    if tb.len() != db.len() {
        return None;
    }
    let mut shift = Vec::new();
    for ((tl, th), (dl, dh)) in tb.iter().zip(&db) {
        let k = dl.sub(tl).simplify();
        // The same extent on both sides: the ends differ by the starts' difference.
        if dh.sub(th).simplify().const_diff(&k) != Some(0) {
            return None;
        }
        shift.push(k);
    }
    Some(Consumer {
        state: s,
        copy: Some(e),
        write: t_side,
        shift,
    })
}

/// A map reading `t` only at the point it writes `d`, as a [`Consumer`] (see the module
/// documentation).
fn in_place_map(df: &Dataflow, n: NodeId, t: &str, d: &str, s: usize) -> Option<Consumer> {
    let Node::Map(m) = df.node(n) else {
        return None;
    };
    if wcr_on_path(df, n, d) || copy_names_other_end(&m.body, t) {
        return None;
    }
    let body = &m.body;
    let tables = tables_read(body);
    if tables.contains(t) || tables.contains(d) {
        return None;
    }
    // `T` and `D` at the body's top level only.
    for x in body.node_ids() {
        match body.node(x) {
            Node::Map(inner) => {
                let refs = inner.body.accessed_data_refs();
                if refs.contains(t) || refs.contains(d) {
                    return None;
                }
            }
            Node::Nested(_) => {
                let touches = body.edges_both(x).into_iter().any(|(e, _)| {
                    let data = &body.edge(e).memlet.data;
                    data == t || data == d
                });
                if touches {
                    return None;
                }
            }
            _ => {}
        }
    }
    // One write of `D`, by a tasklet, at `p_k + c_k` with distinct parameters.
    let writes: Vec<NodeId> = body
        .node_ids()
        .into_iter()
        .filter(|&x| body.node(x).as_access() == Some(d))
        .collect();
    let [w] = writes.as_slice() else { return None };
    let ins = body.in_edges(*w);
    let [we] = ins.as_slice() else { return None };
    let wm = &body.edge(*we).memlet;
    if body.out_degree(*w) > 0
        || wm.data != d
        || wm.wcr.is_some()
        || !matches!(body.node(body.endpoints(*we).0), Node::Tasklet(_))
    {
        return None;
    }
    // One point per iteration: as many parameters as `D` has dimensions.
    if m.params.len() != wm.subset.rank() {
        return None;
    }
    let [boxed] = <[_; 1]>::try_from(map_written_boxes(m, d, wm.subset.rank())).ok()?;
    // Every read of `T`: one element at one point, reaching the write.
    let mut at: Option<Vec<SymExpr>> = None;
    for x in body.node_ids() {
        if body.node(x).as_access() != Some(t) {
            continue;
        }
        if body.in_degree(x) > 0 || !body.reaches(x, *w) {
            return None;
        }
        for e in body.out_edges(x) {
            let rm = &body.edge(e).memlet;
            if rm.data != t || rm.wcr.is_some() {
                return None;
            }
            let point: Option<Vec<SymExpr>> = rm
                .subset
                .0
                .iter()
                .map(|dim| match dim {
                    Dim::Index(i) => Some(i.clone()),
                    _ => None,
                })
                .collect();
            let point = point?;
            match &at {
                None => at = Some(point),
                Some(a) => {
                    let same = a.len() == point.len()
                        && a.iter()
                            .zip(&point)
                            .all(|(x, y)| x.const_diff(y) == Some(0));
                    if !same {
                        return None;
                    }
                }
            }
        }
    }
    let at = at?;
    if at.len() != wm.subset.rank() {
        return None;
    }
    // `D`'s index minus `T`'s, free of the map's parameters.
    let mut shift = Vec::new();
    for (dim, ti) in wm.subset.0.iter().zip(&at) {
        let Dim::Index(di) = dim else { return None };
        let k = di.sub(ti).simplify();
        if m.params.iter().any(|p| k.mentions(p)) {
            return None;
        }
        shift.push(k);
    }
    let write_d = Subset(
        boxed
            .iter()
            .map(|(lo, hi)| Dim::range(lo.clone(), hi.clone()))
            .collect(),
    );
    Some(Consumer {
        state: s,
        copy: None,
        write: unshifted(&write_d, &shift),
        shift,
    })
}

/// The shift every consumer agrees on.
fn common_shift(consumers: &[Consumer]) -> Option<Vec<SymExpr>> {
    let first = &consumers.first()?.shift;
    consumers
        .iter()
        .all(|c| {
            c.shift.len() == first.len()
                && c.shift
                    .iter()
                    .zip(first)
                    .all(|(a, b)| a.const_diff(b) == Some(0))
        })
        .then(|| first.clone())
}

/// Whether the writes of `t` cover it whole, plainly, on every path from the program's
/// start to the first consumer.
fn producers_cover(
    sdfg: &Sdfg,
    t: &str,
    shape: &[SymExpr],
    consumers: &[usize],
    places: &rustc_hash::FxHashMap<usize, Place>,
) -> bool {
    // The consumers run in a sequence: the first is the one before all others.
    let Some(&first) = consumers.iter().find(|&&c| {
        consumers
            .iter()
            .all(|&o| o == c || order(&places[&c], &places[&o]) == Order::Before)
    }) else {
        return false;
    };
    let mut events = |s: usize| -> Option<Vec<Event>> {
        if consumers.contains(&s) {
            return Some(Vec::new());
        }
        let df = &sdfg.states[s].graph;
        let mut out = Vec::new();
        for n in df.access_nodes(t) {
            for e in df.in_edges(n) {
                let w = df.endpoints(e).0;
                let m = &df.edge(e).memlet;
                if m.wcr.is_some() {
                    return None;
                }
                let exact = match df.node(w) {
                    Node::Access(_) => {
                        let t_side = if m.data == t {
                            &m.subset
                        } else {
                            m.other_subset.as_ref().unwrap_or(&m.subset)
                        };
                        subset_box(t_side).into_iter().collect()
                    }
                    Node::Map(mp) => {
                        if wcr_on_path(df, w, t) {
                            return None;
                        }
                        map_written_boxes(mp, t, shape.len())
                    }
                    _ => return None,
                };
                out.push(Event {
                    state: s,
                    start: w,
                    end: n,
                    write: Some(m.subset.clone()),
                    exact,
                    changes: true,
                    read: None,
                });
            }
        }
        Some(out)
    };
    let Some((paths, true)) = walk(&sdfg.body, vec![Vec::new()], first, &mut events) else {
        return false;
    };
    paths.iter().all(|path| {
        let exact: Vec<_> = path.iter().flat_map(|e| e.exact.iter().cloned()).collect();
        union_covers(shape, &exact)
    })
}

/// Whether no symbol is assigned on any path from the program's start to the last of
/// `states` (the boxes are compared as written).
fn no_assignment_before(sdfg: &Sdfg, states: &[usize]) -> bool {
    states
        .iter()
        .all(|&s| walk(&sdfg.body, vec![Vec::new()], s, &mut |_| Some(Vec::new())).is_some())
}

fn apply(sdfg: &mut Sdfg, p: Plan) {
    // The copies first, by the edges found (renaming keeps the graph's ids).
    let mut touched = Vec::new();
    for &(s, e) in &p.copies {
        let df = &mut sdfg.states[s].graph;
        let (a, b) = df.endpoints(e);
        df.graph.remove_edge(e);
        touched.push((s, a));
        touched.push((s, b));
    }
    for (s, n) in touched {
        let df = &mut sdfg.states[s].graph;
        if df.graph.contains_node(n) && df.in_degree(n) == 0 && df.out_degree(n) == 0 {
            df.graph.remove_node(n);
        }
    }
    for &s in &p.states {
        rename_data_shifted(&mut sdfg.states[s].graph, &p.t, &p.d, &p.shift);
    }
    sdfg.arrays.remove(&p.t);
}
