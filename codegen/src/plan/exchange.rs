//! Halo exchanges in a plan: each exchange node of the program is split into a *start*
//! step (pack the cells the neighbours need, post the nonblocking receives and sends) at
//! the node's place, and a *finish* step (wait, unpack into the halo) placed as late as
//! the program allows — just before the first later step that reads or writes one of the
//! exchanged fields, before control flow that could (a loop or a branch), or at the end
//! of the block. Every step between the two is work that does not touch the fields, which
//! then runs while the messages travel. Without overlap ([`place_finishes`] with
//! `overlap: false`) the finish follows the start at once.
//!
//! A parallel map that reads the fields of one open structured exchange at offsets
//! from its parameters (a stencil), and writes none of them, is split instead: its
//! *interior* — the points whose reads stay within the cells this rank owns, which the
//! start has packed and the finish does not write — runs before the finish, and its
//! *rim* (up to four boxes around the interior) after it ([`MapPart`]). So the stencil
//! that needs the halo computes most of its points while the halo travels.

use std::collections::BTreeSet;

use sdflow_ir::{Dataflow, Decomposition, Dim, Node, NodeId, Range, Sdfg, SymExpr};

use super::{CheckPolicy, Flow, MapPart, StatePlan, Step, StepKind};

/// One exchange of a program, as both of its steps carry it.
#[derive(Clone, Debug, PartialEq)]
pub struct Exchange {
    /// Its number in the program, in the order the starts appear in the control flow
    /// (messages of different exchanges are told apart by it).
    pub id: usize,
    /// The fields it updates, in name order.
    pub fields: Vec<String>,
    /// Over which ranks, and where the halo is.
    pub decomposition: Decomposition,
}

/// The fields an exchange node updates (the data of its in-edges), in name order.
pub(crate) fn exchanged_fields(df: &Dataflow, n: NodeId) -> Vec<String> {
    let set: BTreeSet<String> = df
        .in_edges(n)
        .into_iter()
        .map(|e| df.edge(e).memlet.data.clone())
        .collect();
    set.into_iter().collect()
}

/// The containers a step's node reads or writes (the data of its edges; an access node's
/// own container).
fn touched(df: &Dataflow, n: NodeId) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = df
        .in_edges(n)
        .into_iter()
        .chain(df.out_edges(n))
        .map(|e| df.edge(e).memlet.data.clone())
        .collect();
    if let Node::Access(a) = df.node(n) {
        out.insert(a.to_string());
    }
    out
}

/// The finish step of `x`, waiting for the steps `waits` of its state.
fn finish(x: &Exchange, node: NodeId, waits: Vec<usize>) -> Step {
    Step {
        node,
        label: "halo exchange".into(),
        kind: StepKind::ExchangeFinish(x.clone()),
        waits,
        writes: x
            .fields
            .iter()
            .map(|f| super::Write {
                data: f.clone(),
                wcr: None,
                atomic: false,
            })
            .collect(),
        check: CheckPolicy::Never,
        grid: None,
        jam: None,
        part: None,
        lag: None,
        callees: CheckPolicy::Always,
    }
}

/// An exchange started and not finished yet: it, and its start step when that is in the
/// state being placed (its index there).
struct Open {
    x: Exchange,
    node: NodeId,
    start: Option<usize>,
}

/// Numbers the program's exchanges and places their finish steps (see the module
/// documentation); `overlap: false` finishes every exchange right after its start.
pub(crate) fn place_finishes(sdfg: &Sdfg, flow: &mut Flow, overlap: bool) {
    let mut next = 0;
    place(sdfg, flow, overlap, &mut next);
}

fn place(sdfg: &Sdfg, flow: &mut Flow, overlap: bool, next: &mut usize) {
    match flow {
        Flow::State(sp) => {
            let mut open = Vec::new();
            in_state(sdfg, sp, &mut open, overlap, next);
            close(sp, &mut open);
        }
        Flow::Seq(items) => {
            let mut open: Vec<Open> = Vec::new();
            let mut last: Option<usize> = None;
            for k in 0..items.len() {
                if let Flow::State(sp) = &mut items[k] {
                    in_state(sdfg, sp, &mut open, overlap, next);
                    last = Some(k);
                    continue;
                }
                if matches!(items[k], Flow::Assign { .. }) {
                    // Symbol assignments touch no field.
                    continue;
                }
                if let Some(Flow::State(sp)) = last.map(|l| &mut items[l]) {
                    close(sp, &mut open);
                }
                place(sdfg, &mut items[k], overlap, next);
            }
            if let Some(Flow::State(sp)) = last.map(|l| &mut items[l]) {
                close(sp, &mut open);
            }
        }
        Flow::Loop { body, .. } => place(sdfg, body, overlap, next),
        Flow::If {
            then, otherwise, ..
        } => {
            place(sdfg, then, overlap, next);
            place(sdfg, otherwise, overlap, next);
        }
        Flow::Assign { .. } => {}
    }
}

/// Finishes every open exchange at the end of `sp` (which is where they were started or
/// later in the same block).
fn close(sp: &mut StatePlan, open: &mut Vec<Open>) {
    for o in open.drain(..) {
        let waits = o.start.into_iter().collect();
        sp.steps.push(finish(&o.x, o.node, waits));
    }
}

/// Rewrites one state's steps: numbers its starts, and puts the finish of an open
/// exchange before the first step that touches one of its fields (that step waits for
/// it). Waits are renumbered for the inserted steps.
fn in_state(
    sdfg: &Sdfg,
    sp: &mut StatePlan,
    open: &mut Vec<Open>,
    overlap: bool,
    next: &mut usize,
) {
    let df = &sdfg.states[sp.id.index()].graph;
    let old = std::mem::take(&mut sp.steps);
    // Each old step's new indices (two where a map was split).
    let mut index: Vec<Vec<usize>> = vec![Vec::new(); old.len()];
    let mut out: Vec<Step> = Vec::with_capacity(old.len());
    // Open exchanges carried in from earlier states have no start here.
    for o in open.iter_mut() {
        o.start = None;
    }
    for (k, mut step) in old.into_iter().enumerate() {
        let t = if matches!(step.kind, StepKind::ExchangeStart(_)) {
            BTreeSet::new()
        } else {
            touched(df, step.node)
        };
        let mut waits: Vec<usize> = step
            .waits
            .iter()
            .flat_map(|w| index[*w].iter().copied())
            .collect();
        let due: Vec<usize> = (0..open.len())
            .filter(|&j| open[j].x.fields.iter().any(|f| t.contains(f)))
            .collect();
        // One exchange due and a stencil over its fields: the interior first.
        if let [j] = due.as_slice()
            && let Some((interior, rim)) = split(sdfg, df, &step, &open[*j].x)
        {
            let o = open.remove(*j);
            waits.sort_unstable();
            waits.dedup();
            let mut inner = step.clone();
            inner.waits = waits.clone();
            inner.part = Some(MapPart::Interior(interior));
            out.push(inner);
            let first = out.len() - 1;
            out.push(finish(&o.x, o.node, o.start.into_iter().collect()));
            waits.push(out.len() - 1);
            step.waits = waits;
            step.part = Some(MapPart::Rim(rim));
            out.push(step);
            index[k] = vec![first, out.len() - 1];
            continue;
        }
        for j in due.into_iter().rev() {
            let o = open.remove(j);
            out.push(finish(&o.x, o.node, o.start.into_iter().collect()));
            waits.push(out.len() - 1);
        }
        waits.sort_unstable();
        waits.dedup();
        step.waits = waits;
        index[k] = vec![out.len()];
        let node = step.node;
        if let StepKind::ExchangeStart(x) = &mut step.kind {
            x.id = *next;
            *next += 1;
            let x = x.clone();
            out.push(step);
            let at = out.len() - 1;
            if overlap {
                open.push(Open {
                    x,
                    node,
                    start: Some(at),
                });
            } else {
                out.push(finish(&x, node, vec![at]));
            }
            continue;
        }
        out.push(step);
    }
    sp.steps = out;
}

/// The interior and the rim of `step`'s map for exchange `x` (see the module
/// documentation): `None` unless the step is a parallel map that can run unchecked (its
/// checked version, where its bounds condition fails, runs whole in the rim's step), is
/// not row-jammed, writes none of `x`'s fields, and reads them (over a structured
/// decomposition) only at constant offsets from its own parameters along the first two
/// dimensions, with step 1 there.
fn split(
    sdfg: &Sdfg,
    df: &Dataflow,
    step: &Step,
    x: &Exchange,
) -> Option<(Vec<Range>, Vec<Vec<Range>>)> {
    let Decomposition::Structured { width, .. } = x.decomposition else {
        return None;
    };
    let (StepKind::ParallelMap { row_checks, .. }, Node::Map(m)) = (&step.kind, df.node(step.node))
    else {
        return None;
    };
    // Checked (when its bounds condition fails) the whole map runs in the rim's step.
    if step.check == CheckPolicy::Always || step.jam.is_some() || row_checks.is_some() {
        return None;
    }
    if df
        .out_edges(step.node)
        .into_iter()
        .any(|e| x.fields.contains(&df.edge(e).memlet.data))
    {
        return None;
    }
    // Per map parameter: the lowest start and highest end its reads allow.
    let w = SymExpr::Int(width);
    let mut lo: Vec<Option<SymExpr>> = vec![None; m.params.len()];
    let mut hi: Vec<Option<SymExpr>> = vec![None; m.params.len()];
    let mut reads = Vec::new();
    collect_reads(&m.body, &x.fields, &mut reads);
    if reads.is_empty() {
        return None;
    }
    for (data, subset) in reads {
        let shape = sdfg.arrays.get(&data)?.shape();
        for d in 0..2 {
            let Some(Dim::Index(e)) = subset.0.get(d) else {
                return None;
            };
            let (p, c) = m.params.iter().enumerate().find_map(|(k, p)| {
                let c = e.sub(&SymExpr::sym(p)).simplify().as_int()?;
                e.mentions(p).then_some((k, c))
            })?;
            // p + c within [w, n - w): p >= w - c, p < n - w - c.
            let l = w.sub(&SymExpr::Int(c)).simplify();
            let h = shape.get(d)?.sub(&w).sub(&SymExpr::Int(c)).simplify();
            lo[p] = Some(match lo[p].take() {
                None => l,
                Some(a) => SymExpr::max(&a, &l).simplify(),
            });
            hi[p] = Some(match hi[p].take() {
                None => h,
                Some(a) => SymExpr::min(&a, &h).simplify(),
            });
        }
    }
    let mut interior = m.ranges.clone();
    let mut split_params = Vec::new();
    for (k, r) in m.ranges.iter().enumerate() {
        let (Some(l), Some(h)) = (&lo[k], &hi[k]) else {
            continue;
        };
        if r.step.as_int() != Some(1) {
            return None;
        }
        let i0 = SymExpr::min(&SymExpr::max(&r.start, l), &r.end).simplify();
        let i1 = SymExpr::max(&SymExpr::min(&r.end, h), &i0).simplify();
        interior[k] = Range::new(i0, i1);
        split_params.push(k);
    }
    // The rim: along the first split parameter, below and above the interior over the
    // whole of the others; along the next, below and above within the interior of the
    // ones before.
    let mut rim = Vec::new();
    for (n, &k) in split_params.iter().enumerate() {
        let mut base = m.ranges.clone();
        for &before in &split_params[..n] {
            base[before] = interior[before].clone();
        }
        let mut below = base.clone();
        below[k] = Range::new(m.ranges[k].start.clone(), interior[k].start.clone());
        let mut above = base;
        above[k] = Range::new(interior[k].end.clone(), m.ranges[k].end.clone());
        rim.push(below);
        rim.push(above);
    }
    Some((interior, rim))
}

/// The subsets by which `body` (map bodies inside it too) reads one of `fields`.
fn collect_reads(body: &Dataflow, fields: &[String], out: &mut Vec<(String, sdflow_ir::Subset)>) {
    for e in body.edge_ids() {
        let m = &body.edge(e).memlet;
        if fields.contains(&m.data) && body.node(body.endpoints(e).1).as_access().is_none() {
            out.push((m.data.clone(), m.subset.clone()));
        }
    }
    for n in body.node_ids() {
        if let Node::Map(inner) = body.node(n) {
            collect_reads(&inner.body, fields, out);
        }
    }
}
