//! Halo exchanges in a plan: each exchange node of the program is split into a *start*
//! step (pack the cells the neighbours need, post the nonblocking receives and sends) at
//! the node's place, and a *finish* step (wait, unpack into the halo) placed as late as
//! the program allows — just before the first later step that reads or writes one of the
//! exchanged fields, before control flow that could (a loop or a branch), or at the end
//! of the block. Every step between the two is work that does not touch the fields, which
//! then runs while the messages travel. Without overlap ([`place_finishes`] with
//! `overlap: false`) the finish follows the start at once.

use std::collections::BTreeSet;

use sdflow_ir::{Dataflow, Decomposition, Node, NodeId, Sdfg};

use super::{CheckPolicy, Flow, StatePlan, Step, StepKind};

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
    let mut index = vec![0usize; old.len()];
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
        let mut extra = Vec::new();
        let mut k2 = 0;
        while k2 < open.len() {
            if open[k2].x.fields.iter().any(|f| t.contains(f)) {
                let o = open.remove(k2);
                out.push(finish(&o.x, o.node, o.start.into_iter().collect()));
                extra.push(out.len() - 1);
            } else {
                k2 += 1;
            }
        }
        let mut waits: Vec<usize> = step.waits.iter().map(|w| index[*w]).collect();
        waits.extend(extra);
        waits.sort_unstable();
        waits.dedup();
        step.waits = waits;
        index[k] = out.len();
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
