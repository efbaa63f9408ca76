//! The halo analysis: where a program that runs on ranks needs exchanges.
//!
//! A field's halo is *stale* from the program's start (the caller's halo is not trusted)
//! and after every call that writes the field; an exchange makes it fresh. A call that
//! reads a field away from the point it computes — at a horizontal offset, or through a
//! neighbour table — needs it fresh, so an exchange of every stale field it reads so is
//! inserted before it, together with the stale fields that later calls of the same
//! sequence read so before anything writes them (one exchange instead of several).
//! Loops are analysed to a fixed point (a field written late in an iteration is stale at
//! the start of the next), branches from the same state and merged; a nested program's
//! fields count as read away from the point and written (it is not looked into).

use std::collections::BTreeSet;

use sdflow_ir::Decomposition;

use crate::program::{Call, Item, Program};
use crate::stencil::{Index, Kind, Section};

impl Program {
    /// Inserts the halo exchanges over `decomposition` this program needs (see the
    /// module documentation) into its body as it stands, and returns how many. Call it
    /// once the body is complete; exchanges the program asks for itself
    /// ([`crate::Body::halo_exchange`]) are kept, and count as fresh halos.
    pub fn insert_halo_exchanges(&mut self, decomposition: Decomposition) -> usize {
        let stale: BTreeSet<String> = self.fields.iter().map(|f| f.name.clone()).collect();
        let items = std::mem::take(&mut self.body.items);
        let mut count = 0;
        let (items, _) = analyse(items, stale, &decomposition, &mut count);
        self.body.items = items;
        count
    }
}

/// The sections of a stencil.
fn sections(c: &Call) -> Vec<&Section> {
    match &c.stencil.kind {
        Kind::Point(s) => vec![s],
        Kind::Scan { first, step, .. } => vec![first, step],
    }
}

/// The actual field bound to formal `formal` of a call.
fn actual<'c>(c: &'c Call, formal: &str) -> Option<&'c str> {
    c.fields
        .iter()
        .find(|(f, _)| f == formal)
        .map(|(_, a)| a.as_str())
}

/// What an item reads away from the point it computes, and what it writes (actual
/// names); `None` for control flow.
fn effects(item: &Item) -> Option<(BTreeSet<String>, BTreeSet<String>)> {
    match item {
        Item::Call(c) => {
            let mut away = BTreeSet::new();
            let mut writes = BTreeSet::new();
            for s in sections(c) {
                for r in &s.reads {
                    let off = match &r.index {
                        Index::Offset { di, dj, .. } => *di != 0 || *dj != 0,
                        Index::Neighbor { .. } => true,
                        Index::Vertical { .. } => false,
                    };
                    if off && let Some(a) = actual(c, &r.field) {
                        away.insert(a.to_string());
                    }
                }
                for (w, _) in &s.writes {
                    if let Some(a) = actual(c, w) {
                        writes.insert(a.to_string());
                    }
                }
            }
            Some((away, writes))
        }
        Item::Nested { fields, .. } => {
            let all: BTreeSet<String> = fields.iter().map(|(_, a)| a.clone()).collect();
            Some((all.clone(), all))
        }
        Item::Exchange { .. } | Item::Loop { .. } | Item::If { .. } => None,
    }
}

/// Analyses `items` with `stale` halos on entry: the items with the exchanges needed,
/// and the stale halos at the end.
fn analyse(
    items: Vec<Item>,
    mut stale: BTreeSet<String>,
    d: &Decomposition,
    count: &mut usize,
) -> (Vec<Item>, BTreeSet<String>) {
    let mut out = Vec::with_capacity(items.len());
    for k in 0..items.len() {
        let item = &items[k];
        match item {
            Item::Exchange { fields, .. } => {
                for f in fields {
                    stale.remove(f);
                }
                out.push(item.clone());
            }
            Item::Loop {
                var,
                start,
                end,
                body,
            } => {
                // The stale halos at the start of an iteration: those on entry, and those
                // at the end of an iteration, to a fixed point.
                let mut entry = stale.clone();
                loop {
                    let (_, after) = analyse(body.clone(), entry.clone(), d, &mut 0);
                    let next: BTreeSet<String> = entry.union(&after).cloned().collect();
                    if next == entry {
                        break;
                    }
                    entry = next;
                }
                let (body, after) = analyse(body.clone(), entry.clone(), d, count);
                // No iteration, or some.
                stale = entry.union(&after).cloned().collect();
                out.push(Item::Loop {
                    var: var.clone(),
                    start: start.clone(),
                    end: end.clone(),
                    body,
                });
            }
            Item::If {
                cond,
                then,
                otherwise,
            } => {
                let (then, a) = analyse(then.clone(), stale.clone(), d, count);
                let (otherwise, b) = analyse(otherwise.clone(), stale.clone(), d, count);
                stale = a.union(&b).cloned().collect();
                out.push(Item::If {
                    cond: cond.clone(),
                    then,
                    otherwise,
                });
            }
            Item::Call(_) | Item::Nested { .. } => {
                let Some((away, writes)) = effects(item) else {
                    continue;
                };
                let needed: BTreeSet<String> = away.intersection(&stale).cloned().collect();
                if !needed.is_empty() {
                    // With them, the stale fields the following calls of this sequence
                    // read away from the point before anything writes them.
                    let mut fields = needed.clone();
                    let mut written: BTreeSet<String> = writes.clone();
                    for later in &items[k + 1..] {
                        let Some((a, w)) = effects(later) else {
                            break;
                        };
                        for f in a.intersection(&stale) {
                            if !written.contains(f) {
                                fields.insert(f.clone());
                            }
                        }
                        written.extend(w);
                    }
                    for f in &fields {
                        stale.remove(f);
                    }
                    *count += 1;
                    out.push(Item::Exchange {
                        fields: fields.into_iter().collect(),
                        decomposition: d.clone(),
                    });
                }
                stale.extend(writes);
                out.push(item.clone());
            }
        }
    }
    (out, stale)
}
