//! Lagged producer–consumer pairs: a parallel map `A` that writes a transient `T` row by
//! row, and the next step, a parallel map `B` that reads `T` at rows an index table (or
//! an expression of its own first parameter) names — GT4Py's neighbour reads of a field
//! computed just before, such as a Laplacian read at the neighbours of each cell. Map
//! fusion cannot merge them (a point of `B` needs `A` at other points); run one after
//! the other, `B` reads back from memory everything `A` read and wrote once the grid
//! outgrows the caches.
//!
//! On a team the C backend then runs the pair in chunks of `B`'s first parameter: for
//! each chunk, every thread scans the chunk's table entries for the furthest row of `T`
//! it reads, the team runs `A` up to that row (what it has not run yet), waits, and runs
//! `B` on the chunk. The rows `A` runs and the chunk `B` runs are in the caches when the
//! other needs them. Any table is correct — a chunk whose neighbours lie far ahead makes
//! `A` run further ahead, and in the worst case all of `A` runs before the first chunk,
//! as without the lag. The plan records the pair ([`Lag`]) on `B`'s step;
//! `docs/backend-cpu.md` ("Lagged pairs") says what the printer prints.
//!
//! When: both steps are parallel maps of a team, adjacent, `B` waiting for `A`, with
//! unit steps in their first parameters; `A` writes only `T`, a transient array the
//! program keeps, each write at row `p + c` of its first parameter `p` (`c` free of
//! parameters), and never reads it; `B` reads `T` only in tasklets, at rows given by an
//! index table read at its first parameter and program symbols plus an offset, or by
//! an expression of those; `B` writes nothing `A` reads or writes, nor the tables.

use std::collections::BTreeSet;

use sdflow_ir::uses::node_reads_writes;
use sdflow_ir::{DataDesc, Dataflow, Dim, Memlet, Node, NodeId, Sdfg, Storage, SymExpr};

use super::{Step, StepKind};

/// The row of `T` one read of the consumer names, as a function of the consumer's first
/// parameter.
#[derive(Clone, Debug, PartialEq)]
pub enum LagRead {
    /// `T[e, …]`, `e` an expression of the parameter and program symbols.
    Row(SymExpr),
    /// `T[table[index] + offset, …]`.
    Table {
        /// The index table (an integer array the pair does not write).
        table: String,
        /// Where it is read: expressions of the parameter and program symbols.
        index: Vec<SymExpr>,
        /// Added to the entry.
        offset: SymExpr,
    },
}

/// A consumer step that runs lagged behind the step before it (its producer).
#[derive(Clone, Debug, PartialEq)]
pub struct Lag {
    /// The producer's state-level node (the step just before this one).
    pub producer: sdflow_ir::NodeId,
    /// The transient the producer writes and the consumer reads.
    pub transient: String,
    /// The producer's point `p` writes row `p + shift` of the transient.
    pub shift: SymExpr,
    /// The rows the consumer reads at its point.
    pub reads: Vec<LagRead>,
}

/// Marks each consumer of `steps` (a team's top-level state `df`) that can run lagged
/// behind the step before it.
pub fn mark(sdfg: &Sdfg, df: &Dataflow, steps: &mut [Step]) {
    for b in 1..steps.len() {
        let lag = of(sdfg, df, &steps[b - 1], &steps[b], b - 1);
        steps[b].lag = lag;
    }
}

fn parallel_map(step: &Step) -> bool {
    matches!(step.kind, StepKind::ParallelMap { .. }) && step.part.is_none() && step.jam.is_none()
}

fn of(sdfg: &Sdfg, df: &Dataflow, a: &Step, b: &Step, ka: usize) -> Option<Lag> {
    if !parallel_map(a) || !parallel_map(b) || !b.waits.contains(&ka) {
        return None;
    }
    let (Node::Map(ma), Node::Map(mb)) = (df.node(a.node), df.node(b.node)) else {
        return None;
    };
    let (pa, pb) = (ma.params.first()?, mb.params.first()?);
    if ma.ranges[0].step.as_int() != Some(1) || mb.ranges[0].step.as_int() != Some(1) {
        return None;
    }
    let [w] = a.writes.as_slice() else {
        return None;
    };
    if w.wcr.is_some() || w.atomic {
        return None;
    }
    let t = w.data.clone();
    match sdfg.arrays.get(&t) {
        Some(DataDesc::Array(arr)) if arr.transient && arr.storage == Storage::Host => {}
        _ => return None,
    }
    let (reads_a, writes_a) = node_reads_writes(df, a.node);
    let (_, writes_b) = node_reads_writes(df, b.node);
    if writes_a.len() != 1 || reads_a.contains(&t) || writes_b.contains(&t) {
        return None;
    }
    if writes_b.iter().any(|x| reads_a.contains(x)) {
        return None;
    }
    let params: BTreeSet<String> = ma.params.iter().cloned().collect();
    let mut shifts = Vec::new();
    if !producer_writes(&ma.body, &t, pa, &params, &mut shifts) {
        return None;
    }
    let shift = shifts.first()?.clone();
    if shifts.iter().any(|c| *c != shift) {
        return None;
    }
    let mut reads = Vec::new();
    consumer_reads(sdfg, &mb.body, &t, pb, &mut reads)?;
    if reads.is_empty() {
        return None;
    }
    for r in &reads {
        if let LagRead::Table { table, .. } = r
            && (writes_b.contains(table) || *table == t)
        {
            return None;
        }
    }
    Some(Lag {
        producer: a.node,
        transient: t,
        shift,
        reads,
    })
}

/// The edges of `df` that write `t` into one of its access nodes (`write`) or read it
/// from one (else), each as the node at its other end and its memlet; `None` where an
/// edge accesses `t` the other way, or names `t` between two other nodes.
fn one_way<'a>(df: &'a Dataflow, t: &str, write: bool) -> Option<Vec<(NodeId, &'a Memlet)>> {
    let mut out = Vec::new();
    for e in df.edge_ids() {
        let (s, d) = df.endpoints(e);
        let (near, far) = if write { (d, s) } else { (s, d) };
        let memlet = &df.edge(e).memlet;
        if df.node(far).as_access() == Some(t) {
            return None;
        }
        if df.node(near).as_access() == Some(t) {
            out.push((far, memlet));
        } else if memlet.data == t {
            return None;
        }
    }
    Some(out)
}

/// Collects into `shifts` the `c` of each write of `t` in the producer's body `df`
/// (`t[p + c, …]`, `c` free of `params`); false where `t` is read, or written other
/// than by a tasklet at such a row.
fn producer_writes(
    df: &Dataflow,
    t: &str,
    p: &str,
    params: &BTreeSet<String>,
    shifts: &mut Vec<SymExpr>,
) -> bool {
    let Some(writes) = one_way(df, t, true) else {
        return false;
    };
    for (s, memlet) in writes {
        match df.node(s) {
            Node::Tasklet(_)
                if memlet.data == t && memlet.wcr.is_none() && memlet.other_subset.is_none() =>
            {
                let Some(Dim::Index(x)) = memlet.subset.0.first() else {
                    return false;
                };
                let c = x.sub(&SymExpr::sym(p)).simplify();
                if c.free_symbols().iter().any(|s| params.contains(s)) {
                    return false;
                }
                shifts.push(c);
            }
            Node::Map(_) => {}
            _ => return false,
        }
    }
    df.node_ids().into_iter().all(|n| match df.node(n) {
        Node::Map(m) => {
            let mut inner = params.clone();
            inner.extend(m.params.iter().cloned());
            producer_writes(&m.body, t, p, &inner, shifts)
        }
        _ => true,
    })
}

/// The rows of `t` the consumer's body `df` reads (`Some(())`), each from an access node
/// of `t` into a tasklet; `None` where `t` is written, read otherwise, or at a row that
/// is not a [`LagRead`] of parameter `p` and program symbols.
fn consumer_reads(
    sdfg: &Sdfg,
    df: &Dataflow,
    t: &str,
    p: &str,
    out: &mut Vec<LagRead>,
) -> Option<()> {
    let allowed = |e: &SymExpr| {
        e.free_symbols()
            .iter()
            .all(|s| s == p || sdfg.symbols.contains_key(s.as_str()))
    };
    for (d, memlet) in one_way(df, t, false)? {
        match df.node(d) {
            Node::Tasklet(_) if memlet.data == t && memlet.other_subset.is_none() => {
                let read = match memlet.subset.0.first()? {
                    Dim::Index(x) if allowed(x) => LagRead::Row(x.clone()),
                    Dim::Indirect {
                        table,
                        index,
                        offset,
                    } if index.iter().all(allowed) && allowed(offset) => {
                        match sdfg.arrays.get(table) {
                            Some(DataDesc::Array(a)) if a.dtype.is_int() => {}
                            _ => return None,
                        }
                        LagRead::Table {
                            table: table.clone(),
                            index: index.clone(),
                            offset: offset.clone(),
                        }
                    }
                    _ => return None,
                };
                if !out.contains(&read) {
                    out.push(read);
                }
            }
            Node::Map(_) => {}
            _ => return None,
        }
    }
    for n in df.node_ids() {
        if let Node::Map(m) = df.node(n) {
            consumer_reads(sdfg, &m.body, t, p, out)?;
        }
    }
    Some(())
}
