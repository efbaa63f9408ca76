//! Checks of scope-like nodes: maps (parameters, boundary, coverage, recursion into the
//! body), nested SDFGs and library nodes.

use std::collections::BTreeSet;

use super::{Cx, Loc, ProblemKind, Scope, check_sdfg, graph, is_identifier};
use crate::data::DataDesc;
use crate::dataflow::{Dataflow, MapScope, NestedSdfg, NodeId, Reduce};
use crate::memlet::Subset;
use crate::propagate::ParamBox;
use crate::symexpr::SymExpr;

/// Checks a map node: parameters, ranges, boundary and coverage, then its body.
pub(super) fn check_map(
    cx: &mut Cx,
    scope: &Scope<'_>,
    g: &Dataflow,
    n: NodeId,
    m: &MapScope,
    loc: &Loc<'_>,
) {
    let label = &m.label;
    let mut seen = BTreeSet::new();
    for p in &m.params {
        if !is_identifier(p) {
            cx.push(
                ProblemKind::BadName,
                loc,
                format!("parameter name '{p}' of map '{label}' is not an identifier"),
            );
        }
        if !seen.insert(p) {
            cx.push(
                ProblemKind::BadMap,
                loc,
                format!("map '{label}' has parameter '{p}' more than once"),
            );
        } else if scope.params.contains(p) {
            cx.push(
                ProblemKind::BadMap,
                loc,
                format!("parameter '{p}' of map '{label}' shadows a parameter of an enclosing map"),
            );
        } else if scope.sdfg.symbols.contains_key(p) || scope.sdfg.arrays.contains_key(p) {
            cx.push(
                ProblemKind::BadMap,
                loc,
                format!("parameter '{p}' of map '{label}' shadows a symbol or container of the same name"),
            );
        }
    }
    if m.params.len() != m.ranges.len() {
        cx.push(
            ProblemKind::BadMap,
            loc,
            format!(
                "map '{label}' has {} parameter(s) but {} range(s)",
                m.params.len(),
                m.ranges.len()
            ),
        );
    }
    for (p, r) in m.params.iter().zip(&m.ranges) {
        let what = format_args!("the range {r} of parameter '{p}' of map '{label}'");
        scope.check_expr_all(cx, loc, &[&r.start, &r.end, &r.step], &what);
        if let Some(s) = r.step.const_value()
            && s <= 0
        {
            cx.push(
                ProblemKind::BadMap,
                loc,
                format!("{what} has a non-positive step"),
            );
        }
    }
    let own = ParamBox::of_map(&m.params, &m.ranges);
    let own_id = cx.memo.intern(&own);
    check_boundary(cx, scope, g, n, m, (&own, own_id), loc);
    check_private_scalars(cx, scope, m, loc);
    let mut inner = scope.clone();
    inner.params.extend(m.params.iter().cloned());
    inner.boxes.extend(own);
    inner.boxes_id = cx.memo.intern(&inner.boxes);
    graph::check_graph(cx, &inner, &m.body, loc);
}

/// The boundary rule and coverage of body memlets by the map's edges.
/// Transient scalars in a map body are private to one iteration: each read in the body
/// must be of a value the body wrote (an access node written before it is read), and the
/// scalar must not be used outside map bodies — by a state, or by the control flow.
fn check_private_scalars(cx: &mut Cx, scope: &Scope<'_>, m: &MapScope, loc: &Loc<'_>) {
    let body = &m.body;
    for n in body.node_ids() {
        let Some(d) = body.node(n).as_access() else {
            continue;
        };
        if !matches!(
            scope.sdfg.arrays.get(d),
            Some(DataDesc::Scalar {
                transient: true,
                ..
            })
        ) {
            continue;
        }
        if body.in_degree(n) == 0 && body.out_degree(n) > 0 {
            cx.push(
                ProblemKind::BadMap,
                loc,
                format!(
                    "transient scalar '{d}' is read in map '{}' before the body writes it; transient scalars in map bodies are private to one iteration",
                    m.label
                ),
            );
        }
        if scope.control.contains(d) {
            cx.push(
                ProblemKind::BadMap,
                loc,
                format!(
                    "transient scalar '{d}' is written inside map '{}' and read by the control flow; a scalar in a map body is private to one iteration",
                    m.label
                ),
            );
        }
        let at_state_level = scope.state_level.contains(d);
        if at_state_level {
            cx.push(
                ProblemKind::BadMap,
                loc,
                format!(
                    "transient scalar '{d}' is used both inside map '{}' and outside map bodies; a scalar in a map body is private to one iteration",
                    m.label
                ),
            );
        }
    }
}

fn check_boundary(
    cx: &mut Cx,
    scope: &Scope<'_>,
    g: &Dataflow,
    n: NodeId,
    m: &MapScope,
    (own, own_id): (&[ParamBox], u32),
    loc: &Loc<'_>,
) {
    let label = &m.label;
    let body = &m.body;
    let local = |d: &str| {
        scope
            .sdfg
            .arrays
            .get(d)
            .is_some_and(DataDesc::is_body_local)
    };
    let outer_in: Vec<(&str, &Subset)> = g
        .in_edges(n)
        .into_iter()
        .map(|e| (g.edge(e).memlet.data.as_str(), &g.edge(e).memlet.subset))
        .collect();
    let outer_out: Vec<(&str, &Subset)> = g
        .out_edges(n)
        .into_iter()
        .map(|e| {
            let mm = &g.edge(e).memlet;
            (mm.data.as_str(), &mm.subset)
        })
        .collect();
    let mut read = BTreeSet::new();
    let mut written = BTreeSet::new();
    for a in body.node_ids() {
        let Some(d) = body.node(a).as_access() else {
            continue;
        };
        let is_input = body.in_degree(a) == 0;
        if is_input {
            if body.out_degree(a) > 0 {
                read.insert(d);
            }
        } else {
            written.insert(d);
        }
        if local(d) {
            continue;
        }
        let (outer, dir, side) = if is_input {
            (&outer_in, "reads", "into")
        } else {
            (&outer_out, "writes", "out of")
        };
        if !outer.iter().any(|(od, _)| *od == d) {
            cx.push(
                ProblemKind::MapBoundary,
                &graph::node_loc(body, a, loc),
                format!("the body of map '{label}' {dir} '{d}', but no edge {side} the map carries '{d}'"),
            );
            continue;
        }
        // Coverage of each body memlet at this boundary node.
        let edges = if is_input {
            body.out_edges(a)
        } else {
            body.in_edges(a)
        };
        for e in edges {
            let (s, _) = body.endpoints(e);
            let mm = &body.edge(e).memlet;
            let sub = if !is_input && body.node(s).as_access().is_some() {
                mm.other_subset.as_ref().unwrap_or(&mm.subset)
            } else {
                &mm.subset
            };
            let results: Vec<Option<bool>> = outer
                .iter()
                .filter(|(od, _)| *od == d)
                .map(|(_, os)| cx.memo.covers(own_id, own, os, sub))
                .collect();
            if results.iter().all(|r| *r == Some(false)) {
                let outer_text: Vec<String> = outer
                    .iter()
                    .filter(|(od, _)| *od == d)
                    .map(|(_, os)| format!("[{os}]"))
                    .collect();
                cx.push(
                    ProblemKind::NotCovered,
                    &graph::edge_loc(body, e, loc),
                    format!(
                        "'{d}' [{sub}] over map '{label}' is not within the map's memlet {}",
                        outer_text.join(", ")
                    ),
                );
            }
        }
    }
    for e in body.edge_ids() {
        for t in body.edge(e).memlet.subset.tables() {
            read.insert(t);
            // A table private to the body is computed there, not carried in.
            if !local(t) && !outer_in.iter().any(|(od, _)| *od == t) {
                cx.push(
                    ProblemKind::MapBoundary,
                    &graph::edge_loc(body, e, loc),
                    format!("indirection table '{t}' is used in the body of map '{label}' but no edge into the map carries it"),
                );
            }
        }
    }
    for (d, _) in &outer_in {
        if !read.contains(d) {
            cx.push(
                ProblemKind::MapBoundary,
                loc,
                format!("an edge into map '{label}' carries '{d}', but the body never reads it"),
            );
        }
    }
    for (d, _) in &outer_out {
        if !written.contains(d) {
            cx.push(
                ProblemKind::MapBoundary,
                loc,
                format!("an edge out of map '{label}' carries '{d}', but the body never writes it"),
            );
        }
    }
}

/// Checks a nested SDFG's symbol mapping, then the callee itself.
pub(super) fn check_nested(
    cx: &mut Cx,
    scope: &Scope<'_>,
    g: &Dataflow,
    n: NodeId,
    ns: &NestedSdfg,
    loc: &Loc<'_>,
) {
    let inner = &ns.sdfg;
    // Each connector's memlet moves as many elements as the callee's container holds
    // (where decidable, with the callee's integer symbols mapped to the caller's).
    let int_mapping: std::collections::BTreeMap<String, SymExpr> = ns
        .symbol_mapping
        .iter()
        .filter(|(k, _)| inner.symbols.get(*k).is_none_or(|s| s.dtype.is_int()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for e in g.in_edges(n).into_iter().chain(g.out_edges(n)) {
        let edge = g.edge(e);
        let conn = if g.endpoints(e).1 == n {
            &edge.dst_conn
        } else {
            &edge.src_conn
        };
        let Some(desc) = conn.as_ref().and_then(|c| inner.arrays.get(c)) else {
            continue;
        };
        let inner_size = desc
            .shape()
            .iter()
            .fold(SymExpr::Int(1), |a, s| a.mul(&s.substitute(&int_mapping)));
        let moved = edge.memlet.subset.volume();
        if matches!(moved.const_diff(&inner_size), Some(d) if d != 0) {
            cx.push(
                ProblemKind::NestedSdfg,
                loc,
                format!(
                    "connector '{}' of nested SDFG '{}' holds {} element(s) but memlet '{}' moves {}",
                    conn.as_deref().unwrap_or_default(),
                    inner.name,
                    inner_size,
                    edge.memlet,
                    moved
                ),
            );
        }
    }
    for (k, v) in &ns.symbol_mapping {
        if !inner.symbols.contains_key(k) {
            cx.push(
                ProblemKind::NestedSdfg,
                loc,
                format!(
                    "symbol mapping sets '{k}', which is not a symbol of '{}'",
                    inner.name
                ),
            );
        }
        let callee = inner.symbols.get(k).map(|s| s.dtype);
        match callee {
            // A float or bool parameter passes through from a caller symbol of its type.
            Some(dt) if !dt.is_int() => {
                let caller = match v {
                    SymExpr::Sym(name) => scope.sdfg.symbols.get(&**name).map(|s| s.dtype),
                    _ => None,
                };
                if caller != Some(dt) {
                    cx.push(
                        ProblemKind::NestedSdfg,
                        loc,
                        format!(
                            "symbol '{k}' of nested SDFG '{}' is {dt}: map it to a caller symbol of type {dt}, not '{v}'",
                            inner.name
                        ),
                    );
                }
            }
            _ => {
                scope.check_expr(
                    cx,
                    loc,
                    v,
                    &format_args!("the value mapped to '{k}' of nested SDFG '{}'", inner.name),
                    false,
                );
            }
        }
    }
    let flow = inner.loop_and_assigned_symbols();
    for (s, sym) in &inner.symbols {
        if sym.value.is_none() && !flow.contains(s) && !ns.symbol_mapping.contains_key(s) {
            cx.push(
                ProblemKind::NestedSdfg,
                loc,
                format!(
                    "symbol '{s}' of nested SDFG '{}' has no static value and no entry in the symbol mapping",
                    inner.name
                ),
            );
        }
    }
    check_sdfg(cx, inner, &loc.build());
}

/// Checks a reduce node: connectors and axes.
pub(super) fn check_reduce(
    cx: &mut Cx,
    scope: &Scope<'_>,
    g: &Dataflow,
    n: NodeId,
    r: &Reduce,
    loc: &Loc<'_>,
) {
    let ins = g.in_edges(n);
    let outs = g.out_edges(n);
    if ins.len() != 1 {
        cx.push(
            ProblemKind::LibraryNode,
            loc,
            format!(
                "reduce has {} incoming edge(s), expected exactly one (at 'in')",
                ins.len()
            ),
        );
    }
    if outs.is_empty() {
        cx.push(
            ProblemKind::DanglingConnector,
            loc,
            "output connector 'out' of reduce has no outgoing edge".to_string(),
        );
    }
    // The output holds the input's kept axes (where decidable).
    if let (Some(i), Some(o)) = (ins.first(), outs.first()) {
        let (inp, out) = (&g.edge(*i).memlet, &g.edge(*o).memlet);
        let axes_ok = r
            .axes
            .as_ref()
            .is_none_or(|a| a.iter().all(|k| *k < inp.subset.rank()));
        let kept = inp
            .subset
            .sizes()
            .iter()
            .enumerate()
            .filter(|(k, _)| r.axes.as_ref().is_some_and(|a| !a.contains(k)))
            .fold(SymExpr::Int(1), |acc, (_, s)| acc.mul(s));
        if axes_ok && matches!(out.volume().const_diff(&kept), Some(d) if d != 0) {
            cx.push(
                ProblemKind::LibraryNode,
                loc,
                format!(
                    "reduce of '{inp}' keeps {kept} element(s) but writes '{out}' ({})",
                    out.volume()
                ),
            );
        }
    }
    let Some(axes) = &r.axes else { return };
    let mut seen = BTreeSet::new();
    for a in axes {
        if !seen.insert(*a) {
            cx.push(
                ProblemKind::LibraryNode,
                loc,
                format!("reduce axis {a} is listed more than once"),
            );
        }
    }
    let Some(e) = ins.first() else { return };
    let data = &g.edge(*e).memlet.data;
    let Some(rank) = scope.sdfg.arrays.get(data).map(DataDesc::rank) else {
        return;
    };
    for a in axes {
        if *a >= rank {
            cx.push(
                ProblemKind::LibraryNode,
                loc,
                format!("reduce axis {a} is out of range for '{data}' of rank {rank}"),
            );
        }
    }
}
