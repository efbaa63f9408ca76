//! Write-back buffers: a transient a program assembles over several states — pieces
//! computed, pieces copied over from the container itself, in the arms of conditionals —
//! and then copies whole into a box of another container `D` is `D` under another name.
//! GT4Py builds every `concat_where` and every in-place update (`vn = f(vn)` on a domain
//! split in zones) this way: the program assembles the new field in a transient, then
//! copies all of it back.
//!
//! ```text
//! if c:  D[0:a]  ─copy─► T[0:a]          if c:  (nothing)
//!        map f(D) ──────► T[a:n]    →           map f(D) ─► D[a:n]
//! else:  map g ─────────► T[0:n]         else:  map g ────► D[0:n]
//! T ──copy (whole)──► D[box]             (nothing)
//! ```
//!
//! Every access of `T` becomes one of `D` (element `x` of `T` is `x + shift` of `D`);
//! the pieces `T` took from `D` at the same elements become no-ops and go, and so does the
//! copy back. Legality, on every path of the control flow from the program's start to the
//! copy (no loop encloses the copy or any access of `T`, and the copy runs whenever an
//! access of `T` ran: no `if` around the copy that does not also hold the access):
//!
//! - `T` is only written before the copy (never read), by copies and by maps whose body
//!   writes it plainly; the copy's state holds one node of each, the destination written
//!   by the copy alone; nothing before the copy writes `D` inside the box the copy
//!   writes (other pieces of a destination assembled itself stay), nor uses `D` as an
//!   index table;
//! - a write into `T` that is not a piece of `D` at the same elements changes `D` once
//!   merged: no read of `D` that may run after it (or at the same time, in one state) may
//!   overlap it — reads by maps and copies, the same-element pieces, and producers reading
//!   `D` at the point they write (GT4Py's in-place updates, which then read the old value
//!   into a scalar before writing, as [`super::remove_in_place`] does). Overlap is
//!   disproven with `min`/`max` reasoning ([`sdflow_ir::propagate::disjoint_proven`]);
//! - the writes cover all of `T` on every path ([`sdflow_ir::propagate::union_covers`]):
//!   an element no piece wrote would have carried `T`'s initial value into `D`, and now
//!   keeps `D`'s;
//! - no symbol is assigned before the copy (the boxes are compared as written), and the
//!   control flow reads neither container.

use sdflow_ir::propagate::{disjoint_proven, union_covers};
use sdflow_ir::{Block, DataDesc, Dataflow, Dim, Node, NodeId, Sdfg, Subset, SymExpr};

use super::{always_after, in_place_body, places, rename_data_shifted, shifted};
use crate::pattern::{data_uses, map_written_boxes, tables_read, wcr_on_path};

/// Paths through the conditionals before a copy that one analysis follows at most.
const MAX_PATHS: usize = 64;

/// Merges write-back buffers into their destinations; returns how many went.
pub(super) fn merge_write_backs(sdfg: &mut Sdfg) -> usize {
    super::one_at_a_time(sdfg, find, apply)
}

/// A merge found by [`find`].
struct Plan {
    t: String,
    d: String,
    shift: Vec<SymExpr>,
    /// The copy's state, its source and destination nodes.
    state: usize,
    src: NodeId,
    dst: NodeId,
    /// Producers reading `D` at their own point: state, node, new body, and the scalar
    /// holding the old value.
    in_place: Vec<(usize, NodeId, Dataflow, String)>,
    /// Pieces of `D` at the same elements: state, source node, `T`'s node.
    identity: Vec<(usize, NodeId, NodeId)>,
    /// States with an access of `T`.
    states: Vec<usize>,
}

/// What one node does to `T` and `D` before the copy.
#[derive(Clone)]
pub(super) struct Event {
    pub(super) state: usize,
    /// The node it starts at and the one it ends at (a copy: its source and `T`'s node).
    pub(super) start: NodeId,
    pub(super) end: NodeId,
    /// Where it writes `T` (in `T`'s indices; the summary memlet, possibly larger), and
    /// the boxes it surely writes whole; `changes`: whether the write changes `D` once
    /// merged (a piece of `D` at the same elements does not).
    pub(super) write: Option<Subset>,
    pub(super) exact: Vec<Vec<(SymExpr, SymExpr)>>,
    pub(super) changes: bool,
    /// Where it reads `D`, in `T`'s indices.
    pub(super) read: Option<Subset>,
}

fn find(sdfg: &Sdfg) -> Option<Plan> {
    let places = places(&sdfg.body);
    let mut uses = None;
    for c in super::whole_copies(sdfg, &places) {
        let (s, place, t, d, src, dst) = (c.state, c.place, c.from, c.to, c.src, c.dst);
        let (Some(DataDesc::Array(dt)), shift) = (sdfg.arrays.get(t), &c.shift) else {
            continue;
        };
        let uses = uses.get_or_insert_with(|| data_uses(sdfg));
        let (Some(ut), Some(ud)) = (uses.get(t), uses.get(d)) else {
            continue;
        };
        let before = |x: &usize| {
            *x == s
                || places
                    .get(x)
                    .is_some_and(|p| !p.in_loop && always_after(p, place))
        };
        if ut.in_control || ud.in_control || !ut.states.iter().all(before) {
            continue;
        }
        let copy = Copy {
            t,
            d,
            shift,
            shape: &dt.shape,
            state: s,
            src,
            dst,
        };
        if let Some((in_place, identity)) = check(sdfg, &copy) {
            return Some(Plan {
                t: t.to_string(),
                d: d.to_string(),
                shift: shift.clone(),
                state: s,
                src,
                dst,
                in_place,
                identity,
                states: ut.states.clone(),
            });
        }
    }
    None
}

/// The copy a merge would remove.
struct Copy<'a> {
    t: &'a str,
    d: &'a str,
    shift: &'a [SymExpr],
    shape: &'a [SymExpr],
    state: usize,
    src: NodeId,
    dst: NodeId,
}

type Found = (
    Vec<(usize, NodeId, Dataflow, String)>,
    Vec<(usize, NodeId, NodeId)>,
);

/// The proof of the module documentation for one copy: the in-place producers' new
/// bodies and the same-element pieces, or `None`.
fn check(sdfg: &Sdfg, c: &Copy<'_>) -> Option<Found> {
    let mut in_place = Vec::new();
    let mut identity = Vec::new();
    let paths = walk(&sdfg.body, vec![Vec::new()], c.state, &mut |s| {
        state_events(sdfg, s, c, &mut in_place, &mut identity)
    })?
    .0;
    let mut reach: rustc_hash::FxHashMap<usize, sdflow_ir::Reachability> = Default::default();
    for s in paths.iter().flatten().map(|e| e.state) {
        if let std::collections::hash_map::Entry::Vacant(v) = reach.entry(s) {
            v.insert(sdfg.states[s].graph.reachability()?);
        }
    }
    let strictly_before = |x: &Event, y: &Event| {
        if x.state != y.state {
            // On one path, states run one after the other in the path's order.
            return None;
        }
        Some(x.end != y.start && reach[&x.state].reaches(x.end, y.start))
    };
    for path in &paths {
        for (i, x) in path.iter().enumerate() {
            let Some(w) = x.write.as_ref().filter(|_| x.changes) else {
                continue;
            };
            for (j, y) in path.iter().enumerate() {
                let Some(r) = &y.read else { continue };
                // `y` before `x` for sure: its read sees `D` as it was.
                let y_first = match strictly_before(y, x) {
                    None => j < i,
                    Some(b) => b,
                };
                let same = i == j;
                if y_first || (same && y.write.is_some() && is_in_place(y)) {
                    continue;
                }
                if !disjoint_proven(w, r) {
                    return None;
                }
            }
        }
        let exact: Vec<_> = path.iter().flat_map(|e| e.exact.iter().cloned()).collect();
        if !union_covers(c.shape, &exact) {
            return None;
        }
    }
    Some((in_place, identity))
}

/// A producer reading `D` only at the point it writes (its `read` is its write box).
fn is_in_place(e: &Event) -> bool {
    e.read.is_some() && e.read == e.write && e.start == e.end
}

/// The events of the states on every path from `b`'s start to state `stop` (the copy's),
/// appended to `paths`; whether `stop` was reached. `None` where the rule gives up.
pub(super) fn walk(
    b: &Block,
    paths: Vec<Vec<Event>>,
    stop: usize,
    events: &mut dyn FnMut(usize) -> Option<Vec<Event>>,
) -> Option<(Vec<Vec<Event>>, bool)> {
    match b {
        Block::State(s) => {
            let s = s.index();
            let ev = events(s)?;
            let paths = paths
                .into_iter()
                .map(|mut p| {
                    p.extend(ev.iter().cloned());
                    p
                })
                .collect();
            Some((paths, s == stop))
        }
        Block::Seq(items) => {
            let mut paths = paths;
            for item in items {
                let (next, reached) = walk(item, paths, stop, events)?;
                paths = next;
                if reached {
                    return Some((paths, true));
                }
            }
            Some((paths, false))
        }
        Block::If(i) => {
            let contains = |b: &Block| b.states().into_iter().any(|s| s.index() == stop);
            if contains(&i.then) {
                return walk(&i.then, paths, stop, events);
            }
            if contains(&i.otherwise) {
                return walk(&i.otherwise, paths, stop, events);
            }
            let (mut a, _) = walk(&i.then, paths.clone(), stop, events)?;
            let (b, _) = walk(&i.otherwise, paths, stop, events)?;
            a.extend(b);
            (a.len() <= MAX_PATHS).then_some((a, false))
        }
        Block::Loop(l) => {
            // Reads of `D` only (the copy's state and `T` are outside loops): in any
            // order, any number of times, all before what follows.
            let mut paths = paths;
            for s in l.body.states() {
                let ev = events(s.index())?;
                if ev.iter().any(|e| e.write.is_some()) {
                    return None;
                }
                for p in &mut paths {
                    p.extend(ev.iter().cloned());
                }
            }
            Some((paths, false))
        }
        Block::Assign(_) => None,
    }
}

/// What state `s` does to `T` and `D` before the copy (in the copy's state: what runs
/// before it). `None` where the rule gives up. Records the in-place producers' new bodies
/// and the same-element pieces.
fn state_events(
    sdfg: &Sdfg,
    s: usize,
    c: &Copy<'_>,
    in_place: &mut Vec<(usize, NodeId, Dataflow, String)>,
    identity: &mut Vec<(usize, NodeId, NodeId)>,
) -> Option<Vec<Event>> {
    let df = &sdfg.states[s].graph;
    let last = s == c.state;
    let tables = tables_read(df);
    if tables.contains(c.t) || tables.contains(c.d) {
        return None;
    }
    let back = |x: &Subset| unshifted(x, c.shift);
    let whole = Subset(
        c.shape
            .iter()
            .map(|n| Dim::range(SymExpr::Int(0), n.clone()))
            .collect(),
    );
    let mut out = Vec::new();
    for n in df.node_ids() {
        let Some(x) = df.node(n).as_access() else {
            continue;
        };
        if x == c.t {
            if last {
                if n != c.src {
                    return None;
                }
            } else if df.out_degree(n) > 0 {
                return None;
            }
            for e in df.in_edges(n) {
                let w = df.endpoints(e).0;
                let m = &df.edge(e).memlet;
                if m.wcr.is_some() {
                    return None;
                }
                match df.node(w) {
                    Node::Access(y) => {
                        // A copy; its memlet names either end.
                        let (t_side, y_side) = if m.data == c.t {
                            (m.subset.clone(), m.other_subset.clone())
                        } else {
                            let o = m.other_subset.clone();
                            if o.is_none()
                                && c.shift.iter().any(|x| x.simplify().as_int() != Some(0))
                            {
                                return None;
                            }
                            (
                                o.unwrap_or_else(|| m.subset.clone()),
                                Some(m.subset.clone()),
                            )
                        };
                        let exact = subset_box(&t_side).into_iter().collect();
                        // From `D`: a read of it, and at the same elements no change.
                        let read = (y == c.d).then(|| back(y_side.as_ref().unwrap_or(&t_side)));
                        let same = read.as_ref().is_some_and(|r| same_subset(r, &t_side));
                        if same {
                            identity.push((s, w, n));
                        }
                        out.push(Event {
                            state: s,
                            start: w,
                            end: n,
                            write: Some(t_side),
                            exact,
                            changes: !same,
                            read,
                        });
                    }
                    Node::Map(mp) => {
                        if m.data != c.t || wcr_on_path(df, w, c.t) {
                            return None;
                        }
                        // Shifted renames move `T`'s subsets, not tables or a copy's
                        // other end.
                        if tables_read(&mp.body).contains(c.t)
                            || super::copy_names_other_end(&mp.body, c.t)
                        {
                            return None;
                        }
                        let (reads, writes) = crate::pattern::node_reads_writes(df, w);
                        if writes.contains(c.d) {
                            return None;
                        }
                        let exact = map_written_boxes(mp, c.t, c.shape.len());
                        let read = if reads.contains(c.d) {
                            let Some(DataDesc::Array(dd)) = sdfg.arrays.get(c.d) else {
                                return None;
                            };
                            let old = crate::pattern::fresh_name(sdfg, &format!("{}_old", c.d));
                            let old = unique(old, in_place);
                            let body = in_place_body(mp, c.t, c.d, c.shift, (&old, dd.dtype))?;
                            in_place.push((s, w, body, old));
                            Some(m.subset.clone())
                        } else {
                            None
                        };
                        out.push(Event {
                            state: s,
                            start: w,
                            end: w,
                            write: Some(m.subset.clone()),
                            exact,
                            changes: true,
                            read,
                        });
                    }
                    _ => return None,
                }
            }
        } else if x == c.d {
            if last && n == c.dst {
                continue;
            }
            // Writes of `D` outside the box the copy writes (other pieces of a
            // destination assembled itself) stay as they are; none may reach into it.
            for e in df.in_edges(n) {
                let m = &df.edge(e).memlet;
                let d_side = if m.data == c.d {
                    m.subset.clone()
                } else {
                    m.other_subset.clone()?
                };
                if !disjoint_proven(&back(&d_side), &whole) {
                    return None;
                }
            }
            for e in df.out_edges(n) {
                let r = df.endpoints(e).1;
                let into_t = df.node(r).as_access() == Some(c.t);
                let producer = matches!(df.node(r), Node::Map(_))
                    && df
                        .out_edges(r)
                        .into_iter()
                        .any(|o| df.node(df.endpoints(o).1).as_access() == Some(c.t));
                if into_t || producer {
                    // Judged with `T`'s writers above.
                    continue;
                }
                let m = &df.edge(e).memlet;
                let d_side = if m.data == c.d {
                    m.subset.clone()
                } else {
                    m.other_subset.clone()?
                };
                out.push(Event {
                    state: s,
                    start: r,
                    end: r,
                    write: None,
                    exact: Vec::new(),
                    changes: false,
                    read: Some(back(&d_side)),
                });
            }
        }
    }
    Some(out)
}

/// `name`, or a variant no earlier in-place producer of this merge took.
fn unique(name: String, taken: &[(usize, NodeId, Dataflow, String)]) -> String {
    let mut k = 0;
    let mut out = name.clone();
    while taken.iter().any(|(_, _, _, o)| *o == out) {
        k += 1;
        out = format!("{name}_{k}");
    }
    out
}

/// `s` moved back by `shift` (`D`'s indices to `T`'s).
pub(super) fn unshifted(s: &Subset, shift: &[SymExpr]) -> Subset {
    let back: Vec<SymExpr> = shift.iter().map(|x| SymExpr::Int(0).sub(x)).collect();
    shifted(s, &back)
}

/// Whether two subsets name the same elements, dimension by dimension.
fn same_subset(a: &Subset, b: &Subset) -> bool {
    let same = |x: &SymExpr, y: &SymExpr| x.const_diff(y) == Some(0);
    a.rank() == b.rank()
        && a.0.iter().zip(&b.0).all(|(x, y)| match (x, y) {
            (Dim::Index(x), Dim::Index(y)) => same(x, y),
            (
                Dim::Range {
                    start: s1,
                    end: e1,
                    step: k1,
                },
                Dim::Range {
                    start: s2,
                    end: e2,
                    step: k2,
                },
            ) => same(s1, s2) && same(e1, e2) && same(k1, k2),
            _ => false,
        })
}

/// A unit-step subset as the box `[lo, hi)` per dimension.
pub(super) fn subset_box(s: &Subset) -> Option<Vec<(SymExpr, SymExpr)>> {
    s.0.iter()
        .map(|d| match d {
            Dim::Index(x) => Some((x.clone(), x.add(&SymExpr::Int(1)))),
            Dim::Range { start, end, step } if step.as_int() == Some(1) => {
                Some((start.clone(), end.clone()))
            }
            _ => None,
        })
        .collect()
}

fn apply(sdfg: &mut Sdfg, p: Plan) {
    for (s, n, body, old) in p.in_place {
        if body.accessed_data_refs().contains(old.as_str())
            && let Some(DataDesc::Array(dd)) = sdfg.arrays.get(&p.d)
        {
            let dtype = dd.dtype;
            sdfg.arrays.insert(
                old,
                DataDesc::Scalar {
                    dtype,
                    transient: true,
                },
            );
        }
        if let Node::Map(m) = &mut sdfg.states[s].graph.graph[n] {
            m.body = body;
        }
    }
    for &s in &p.states {
        rename_data_shifted(&mut sdfg.states[s].graph, &p.t, &p.d, &p.shift);
    }
    // The same-element pieces: `D ─► D` at the same elements now.
    for &(s, src, dst) in &p.identity {
        let df = &mut sdfg.states[s].graph;
        for e in df.out_edges(src) {
            if df.endpoints(e).1 != dst {
                continue;
            }
            df.graph.remove_edge(e);
        }
        for n in [src, dst] {
            if df.graph.contains_node(n) && df.in_degree(n) == 0 && df.out_degree(n) == 0 {
                df.graph.remove_node(n);
            }
        }
    }
    // The copy back: its readers now read what the writers of `T`'s node wrote.
    let df = &mut sdfg.states[p.state].graph;
    for e in df.out_edges(p.src) {
        if df.endpoints(e).1 != p.dst {
            continue;
        }
        df.graph.remove_edge(e);
    }
    for e in df.out_edges(p.dst) {
        let r = df.endpoints(e).1;
        let edge = df.graph.remove_edge(e).expect("edge of the graph");
        df.graph.add_edge(p.src, r, edge);
    }
    df.graph.remove_node(p.dst);
    if df.in_degree(p.src) == 0 && df.out_degree(p.src) == 0 {
        df.graph.remove_node(p.src);
    }
    sdfg.arrays.remove(&p.t);
}
