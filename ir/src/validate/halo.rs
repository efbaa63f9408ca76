//! Reads beyond the halo: a map that reads a field a structured halo exchange fills, at
//! an offset from one of its parameters larger than the exchange's width along the
//! first two dimensions, would read cells no rank holds (or, near a rank's border, cells
//! no exchange has filled) once the program runs on ranks. An error naming the map, the
//! field, the offset and the exchange.

use std::collections::BTreeMap;

use super::{Cx, Loc, Location, ProblemKind, graph};
use crate::dataflow::{Dataflow, LibraryNode, Node};
use crate::memlet::Dim;
use crate::{Decomposition, Sdfg, SymExpr};

/// Per field a structured halo exchange fills: the smallest width it is filled with and
/// the name of that exchange's state. A map may read such a field at most that far from
/// its parameters along the first two dimensions (what transformations that move reads
/// must keep).
pub fn halo_widths(sdfg: &Sdfg) -> BTreeMap<&str, (i64, &str)> {
    let mut widths: BTreeMap<&str, (i64, &str)> = BTreeMap::new();
    for st in &sdfg.states {
        for n in st.graph.node_ids() {
            let Node::Library(LibraryNode::HaloExchange(h)) = st.graph.node(n) else {
                continue;
            };
            let Decomposition::Structured { width, .. } = h.decomposition else {
                continue;
            };
            for e in st.graph.in_edges(n) {
                let data = st.graph.edge(e).memlet.data.as_str();
                let w = widths.entry(data).or_insert((width, &st.name));
                if width < w.0 {
                    *w = (width, &st.name);
                }
            }
        }
    }
    widths
}

/// Checks every map of `sdfg` against the widths of its structured exchanges.
pub(super) fn check_halo_reads(cx: &mut Cx, sdfg: &Sdfg, loc: &Location) {
    let widths = halo_widths(sdfg);
    if widths.is_empty() {
        return;
    }
    for (i, st) in sdfg.states.iter().enumerate() {
        let sloc = Loc::State(loc, &st.name, i);
        walk(cx, &st.graph, &mut Vec::new(), "", &sloc, &widths);
    }
}

fn walk(
    cx: &mut Cx,
    g: &Dataflow,
    params: &mut Vec<String>,
    label: &str,
    loc: &Loc<'_>,
    widths: &BTreeMap<&str, (i64, &str)>,
) {
    for n in g.node_ids() {
        if let Node::Map(m) = g.node(n) {
            let depth = params.len();
            params.extend(m.params.iter().cloned());
            let nloc = graph::node_loc(g, n, loc);
            walk(cx, &m.body, params, &m.label, &nloc, widths);
            params.truncate(depth);
        }
    }
    if params.is_empty() {
        return;
    }
    for e in g.edge_ids() {
        let m = &g.edge(e).memlet;
        let Some(&(w, state)) = widths.get(m.data.as_str()) else {
            continue;
        };
        // Reads: into computation, not into another container.
        if g.node(g.endpoints(e).1).as_access().is_some() {
            continue;
        }
        for (d, p, c) in halo_offsets(&m.subset, params) {
            if c.abs() > w {
                cx.push(
                    ProblemKind::LibraryNode,
                    &graph::edge_loc(g, e, loc),
                    format!(
                        "map '{label}' reads '{}' at offset {c:+} from '{p}' in dimension {d} ({m}), beyond the halo of width {w} that the exchange in state '{state}' fills",
                        m.data
                    ),
                );
            }
        }
    }
}

/// The offsets the halo rule judges in `subset`: per point of its first two dimensions
/// (an index, or a range's first and last element) that is one of `params` plus a
/// constant, the dimension, that parameter and the constant.
pub fn halo_offsets<'p>(
    subset: &crate::memlet::Subset,
    params: &'p [String],
) -> Vec<(usize, &'p str, i64)> {
    let mut out = Vec::new();
    for (d, dim) in subset.0.iter().take(2).enumerate() {
        let points: Vec<SymExpr> = match dim {
            Dim::Index(x) => vec![x.clone()],
            Dim::Range { start, end, .. } => {
                vec![start.clone(), end.sub(&SymExpr::Int(1)).simplify()]
            }
            Dim::Indirect { .. } => Vec::new(),
        };
        for x in points {
            if let Some((p, c)) = params.iter().find_map(|p| {
                let c = x.sub(&SymExpr::sym(p)).simplify().as_int()?;
                x.mentions(p).then_some((p.as_str(), c))
            }) {
                out.push((d, p, c));
            }
        }
    }
    out
}
