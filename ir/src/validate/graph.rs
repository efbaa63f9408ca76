//! Dataflow graph checks: nodes, edges, memlet subsets, cycles and races.

use super::{Cx, Loc, ProblemKind, Scope, maps, tasklet};
use crate::data::DataDesc;
use crate::dataflow::{Dataflow, EdgeId, LibraryNode, Node, NodeId};
use crate::memlet::{Dim, Subset};
use crate::propagate::{dim_bounds, disjoint, expr_bounds};

/// The location of a node of `g` under `loc`.
pub(super) fn node_loc<'a>(g: &'a Dataflow, n: NodeId, loc: &'a Loc<'a>) -> Loc<'a> {
    Loc::Node(loc, g, n)
}

/// The location of an edge of `g` under `loc`.
pub(super) fn edge_loc<'a>(g: &'a Dataflow, e: EdgeId, loc: &'a Loc<'a>) -> Loc<'a> {
    Loc::Edge(loc, g, e)
}

/// Checks a state's graph or a map body (recursively).
pub(super) fn check_graph(cx: &mut Cx, scope: &Scope<'_>, g: &Dataflow, loc: &Loc<'_>) {
    for n in g.node_ids() {
        let nloc = node_loc(g, n, loc);
        match g.node(n) {
            Node::Access(d) => {
                if !scope.sdfg.arrays.contains_key(d) {
                    cx.push(
                        ProblemKind::UndefinedData,
                        &nloc,
                        format!("access node of '{d}', which is not a declared container"),
                    );
                }
            }
            Node::Tasklet(t) => {
                tasklet::check_tasklet(cx, scope, t, &nloc);
                check_tasklet_edges(cx, g, n, t, &nloc);
            }
            Node::Map(m) => maps::check_map(cx, scope, g, n, m, &nloc),
            Node::Nested(ns) => maps::check_nested(cx, scope, g, n, ns, &nloc),
            Node::Library(LibraryNode::Reduce(r)) => maps::check_reduce(cx, scope, g, n, r, &nloc),
            Node::Library(LibraryNode::HaloExchange(h)) => {
                check_halo_exchange(cx, scope, g, n, h, &nloc)
            }
        }
    }
    for e in g.edge_ids() {
        check_edge(cx, scope, g, e, &edge_loc(g, e, loc));
    }
    if let Err(n) = g.topological_order() {
        cx.push(
            ProblemKind::Cycle,
            &node_loc(g, n, loc),
            format!("{} is on a cycle", g.node(n).describe()),
        );
    }
    check_races(cx, g, loc);
}

/// A halo exchange: at state level (every rank runs it once, not per map point); a
/// positive width and rank counts; each field enters at the connector of its name from
/// an access node of it and leaves the same way, whole; on a structured decomposition it
/// has at least two dimensions whose extents hold the halo on both sides and an interior
/// as wide as the halo; on an unstructured one its first dimension is the cells the
/// index containers list (one-dimensional integer containers of the program).
fn check_halo_exchange(
    cx: &mut Cx,
    scope: &Scope<'_>,
    g: &Dataflow,
    n: NodeId,
    h: &crate::dataflow::HaloExchange,
    loc: &Loc<'_>,
) {
    use crate::dataflow::Decomposition;
    if !scope.params.is_empty() {
        cx.push(
            ProblemKind::LibraryNode,
            loc,
            "a halo exchange inside a map body (it runs once per rank, at state level)".into(),
        );
    }
    let mut cells: Option<crate::SymExpr> = None;
    match &h.decomposition {
        Decomposition::Structured { ranks, width, .. } => {
            if *width < 1 {
                cx.push(
                    ProblemKind::LibraryNode,
                    loc,
                    format!("halo exchange of width {width}: the width must be at least 1"),
                );
            }
            if ranks.iter().any(|&r| r < 1) {
                cx.push(
                    ProblemKind::LibraryNode,
                    loc,
                    format!(
                        "halo exchange over {}x{} ranks: each count must be at least 1",
                        ranks[0], ranks[1]
                    ),
                );
            }
        }
        Decomposition::Unstructured {
            ranks,
            global,
            owner,
        } => {
            if *ranks < 1 {
                cx.push(
                    ProblemKind::LibraryNode,
                    loc,
                    format!("halo exchange over {ranks} ranks: the count must be at least 1"),
                );
            }
            for (role, name) in [("global indices", global), ("owners", owner)] {
                match scope.sdfg.arrays.get(name) {
                    Some(d) if d.dtype().is_int() && d.shape().len() == 1 => {
                        cells.get_or_insert_with(|| d.shape()[0].clone());
                    }
                    Some(_) => cx.push(
                        ProblemKind::LibraryNode,
                        loc,
                        format!(
                            "halo exchange: the {role} '{name}' must be a one-dimensional integer container"
                        ),
                    ),
                    None => cx.push(
                        ProblemKind::UndefinedData,
                        loc,
                        format!("halo exchange: the {role} '{name}' is not a declared container"),
                    ),
                }
            }
        }
    }
    let mut side = |edges: Vec<EdgeId>, out: bool| -> Vec<String> {
        let mut fields = Vec::new();
        for e in edges {
            let edge = g.edge(e);
            let (a, b) = g.endpoints(e);
            let other = g.node(if out { b } else { a }).as_access();
            let conn = if out { &edge.src_conn } else { &edge.dst_conn };
            let data = &edge.memlet.data;
            if other != Some(data.as_str()) || conn.as_deref() != Some(data.as_str()) {
                cx.push(
                    ProblemKind::BadEdge,
                    loc,
                    format!(
                        "halo exchange: the edge of '{data}' must {} an access node of '{data}' at connector '{data}'",
                        if out { "go to" } else { "come from" }
                    ),
                );
                continue;
            }
            fields.push(data.clone());
        }
        fields.sort();
        fields
    };
    let ins = side(g.in_edges(n), false);
    let outs = side(g.out_edges(n), true);
    if ins.is_empty() {
        cx.push(
            ProblemKind::LibraryNode,
            loc,
            "halo exchange of no field (each field enters and leaves at its own connector)".into(),
        );
    }
    if ins != outs {
        cx.push(
            ProblemKind::LibraryNode,
            loc,
            format!(
                "halo exchange: the fields entering ({}) and leaving ({}) differ",
                ins.join(", "),
                outs.join(", ")
            ),
        );
    }
    for f in &ins {
        let Some(desc) = scope.sdfg.arrays.get(f) else {
            continue;
        };
        let shape = desc.shape();
        let Decomposition::Structured { width, .. } = &h.decomposition else {
            // Unstructured: the first dimension is the listed cells.
            let first = shape.first().map(|e| e.simplify());
            match (&first, &cells) {
                (None, _) => cx.push(
                    ProblemKind::LibraryNode,
                    loc,
                    format!("halo exchange of '{f}', which has no dimension to split"),
                ),
                (Some(a), Some(c)) if a.sub(c).simplify().as_int().is_some_and(|d| d != 0) => {
                    cx.push(
                        ProblemKind::LibraryNode,
                        loc,
                        format!(
                            "halo exchange of '{f}': its first extent {a} is not the {c} cells the decomposition lists"
                        ),
                    )
                }
                _ => {}
            }
            continue;
        };
        if shape.len() < 2 {
            cx.push(
                ProblemKind::LibraryNode,
                loc,
                format!(
                    "halo exchange of '{f}', which has {} dimension(s); the decomposition splits the first two",
                    shape.len()
                ),
            );
            continue;
        }
        for (d, e) in shape.iter().take(2).enumerate() {
            if let Some(v) = e.simplify().as_int()
                && v < 3 * width
            {
                cx.push(
                    ProblemKind::LibraryNode,
                    loc,
                    format!(
                        "halo exchange of '{f}': extent {v} in dimension {d} leaves no interior as wide as the halo ({width} on each side)"
                    ),
                );
            }
        }
    }
}

fn check_tasklet_edges(
    cx: &mut Cx,
    g: &Dataflow,
    n: NodeId,
    t: &crate::dataflow::Tasklet,
    loc: &Loc<'_>,
) {
    let ins = g.in_edges(n);
    let outs = g.out_edges(n);
    for c in t.inputs.keys() {
        let k = ins
            .iter()
            .filter(|e| g.edge(**e).dst_conn.as_deref() == Some(c.as_str()))
            .count();
        if k == 0 {
            cx.push(
                ProblemKind::DanglingConnector,
                loc,
                format!(
                    "input connector '{c}' of tasklet '{}' has no incoming edge",
                    t.name
                ),
            );
        } else if k > 1 {
            cx.push(
                ProblemKind::BadEdge,
                loc,
                format!(
                    "input connector '{c}' of tasklet '{}' has {k} incoming edges",
                    t.name
                ),
            );
        }
    }
    for c in t.outputs.keys() {
        if !outs
            .iter()
            .any(|e| g.edge(*e).src_conn.as_deref() == Some(c.as_str()))
        {
            cx.push(
                ProblemKind::DanglingConnector,
                loc,
                format!(
                    "output connector '{c}' of tasklet '{}' has no outgoing edge",
                    t.name
                ),
            );
        }
    }
}

/// Checks the connector on one side of an edge; `out` is true for the source side.
fn check_conn(cx: &mut Cx, node: &Node, conn: Option<&str>, out: bool, loc: &Loc<'_>) {
    let dir = if out { "leaves" } else { "enters" };
    // Described only when a problem is reported.
    struct Describe<'a>(&'a Node);
    impl std::fmt::Display for Describe<'_> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0.describe())
        }
    }
    let desc = Describe(node);
    match node {
        Node::Access(_) | Node::Map(_) => {
            if let Some(c) = conn {
                cx.push(
                    ProblemKind::UnknownConnector,
                    loc,
                    format!("the edge {dir} connector '{c}' of {desc}, which has no connectors"),
                );
            }
        }
        Node::Tasklet(t) => {
            let set = if out { &t.outputs } else { &t.inputs };
            let kind = if out { "output" } else { "input" };
            match conn {
                Some(c) if set.contains_key(c) => {}
                Some(c) => cx.push(
                    ProblemKind::UnknownConnector,
                    loc,
                    format!("the edge {dir} {desc} at '{c}', which is not an {kind} connector"),
                ),
                None => cx.push(
                    ProblemKind::UnknownConnector,
                    loc,
                    format!("the edge {dir} {desc} without naming an {kind} connector"),
                ),
            }
        }
        Node::Nested(ns) => match conn {
            Some(c) if ns.sdfg.arrays.get(c).is_some_and(|d| !d.transient()) => {}
            Some(c) => cx.push(
                ProblemKind::UnknownConnector,
                loc,
                format!(
                    "the edge {dir} {desc} at '{c}', which is not a non-transient container of '{}'",
                    ns.sdfg.name
                ),
            ),
            None => cx.push(
                ProblemKind::UnknownConnector,
                loc,
                format!("the edge {dir} {desc} without naming a connector"),
            ),
        },
        Node::Library(LibraryNode::HaloExchange(_)) => {
            if conn.is_none() {
                cx.push(
                    ProblemKind::UnknownConnector,
                    loc,
                    format!("the edge {dir} {desc} without naming the field it exchanges"),
                );
            }
        }
        Node::Library(LibraryNode::Reduce(_)) => {
            let want = if out { "out" } else { "in" };
            if conn != Some(want) {
                cx.push(
                    ProblemKind::UnknownConnector,
                    loc,
                    format!(
                        "the edge {dir} {desc} at {}, expected connector '{want}'",
                        conn.map(|c| format!("'{c}'"))
                            .unwrap_or_else(|| "no connector".into())
                    ),
                );
            }
        }
    }
}

fn check_edge(cx: &mut Cx, scope: &Scope<'_>, g: &Dataflow, e: EdgeId, loc: &Loc<'_>) {
    let (s, d) = g.endpoints(e);
    let (sn, dn) = (g.node(s), g.node(d));
    let edge = g.edge(e);
    let m = &edge.memlet;
    if sn.as_access().is_none() && dn.as_access().is_none() {
        cx.push(
            ProblemKind::BadEdge,
            loc,
            format!(
                "an edge from {} to {} (one end must be an access node)",
                sn.describe(),
                dn.describe()
            ),
        );
        return;
    }
    check_conn(cx, sn, edge.src_conn.as_deref(), true, loc);
    check_conn(cx, dn, edge.dst_conn.as_deref(), false, loc);
    let access = sn.as_access().or(dn.as_access()).unwrap_or_default();
    if m.data != access {
        cx.push(
            ProblemKind::BadEdge,
            loc,
            format!(
                "memlet data '{}' differs from the access node's data '{access}'",
                m.data
            ),
        );
    }
    let arrays = &scope.sdfg.arrays;
    check_subset(cx, scope, loc, &m.data, &m.subset);
    if let (Some(_), Some(dst)) = (sn.as_access(), dn.as_access()) {
        let other = m.other_subset.as_ref().unwrap_or(&m.subset);
        check_subset(cx, scope, loc, dst, other);
        if let Some(o) = &m.other_subset
            && let Some(diff) = m.subset.volume().const_diff(&o.volume())
            && diff != 0
        {
            cx.push(
                ProblemKind::BadMemlet,
                loc,
                format!(
                    "copy from '{}' [{}] to '{dst}' [{o}] moves {} element(s) but writes {}",
                    m.data,
                    m.subset,
                    m.subset.volume(),
                    o.volume()
                ),
            );
        }
    } else if m.other_subset.is_some() {
        cx.push(
            ProblemKind::BadMemlet,
            loc,
            format!("memlet '{m}' has an other_subset but is not a copy between access nodes"),
        );
    }
    let data_ty = arrays.get(&m.data).map(DataDesc::dtype);
    // Tasklet ends: single elements of the connector's type.
    for (node, conn, reads) in [(dn, &edge.dst_conn, true), (sn, &edge.src_conn, false)] {
        let Node::Tasklet(t) = node else { continue };
        if !m.subset.is_element() {
            cx.push(
                ProblemKind::BadMemlet,
                loc,
                format!(
                    "tasklet '{}' {} '{m}', which is not a single element",
                    t.name,
                    if reads { "reads" } else { "writes" }
                ),
            );
        }
        let set = if reads { &t.inputs } else { &t.outputs };
        if let (Some(c), Some(dt)) = (conn, data_ty)
            && let Some(ct) = set.get(c)
            && *ct != dt
        {
            let msg = if reads {
                format!(
                    "tasklet '{}' reads connector '{c}' ({ct}) from '{}' ({dt})",
                    t.name, m.data
                )
            } else {
                format!(
                    "tasklet '{}' writes connector '{c}' ({ct}) to '{}' ({dt})",
                    t.name, m.data
                )
            };
            cx.push(ProblemKind::DTypeMismatch, loc, msg);
        }
    }
    for (node, conn) in [(dn, &edge.dst_conn), (sn, &edge.src_conn)] {
        let Node::Nested(ns) = node else { continue };
        if let (Some(c), Some(dt)) = (conn, data_ty)
            && let Some(inner) = ns.sdfg.arrays.get(c)
            && inner.dtype() != dt
        {
            cx.push(
                ProblemKind::DTypeMismatch,
                loc,
                format!(
                    "connector '{c}' of nested SDFG '{}' is {} but '{}' is {dt}",
                    ns.sdfg.name,
                    inner.dtype(),
                    m.data
                ),
            );
        }
    }
}

/// Checks that `subset` fits `data`: declared, same rank, symbols defined, within bounds,
/// indirections well-formed. Returns false when the data is unknown or the rank is wrong.
pub(super) fn check_subset(
    cx: &mut Cx,
    scope: &Scope<'_>,
    loc: &Loc<'_>,
    data: &str,
    subset: &Subset,
) -> bool {
    let arrays = &scope.sdfg.arrays;
    let Some(desc) = arrays.get(data) else {
        cx.push(
            ProblemKind::UndefinedData,
            loc,
            format!("memlet names '{data}', which is not a declared container"),
        );
        return false;
    };
    if subset.rank() != desc.rank() {
        cx.push(
            ProblemKind::RankMismatch,
            loc,
            format!(
                "subset [{subset}] of '{data}' has rank {} but '{data}' has rank {}",
                subset.rank(),
                desc.rank()
            ),
        );
        return false;
    }
    let shape = desc.shape();
    for (i, (dim, extent)) in subset.0.iter().zip(shape).enumerate() {
        let what = format_args!("dimension {i} of the subset [{subset}] of '{data}'");
        if !scope.check_expr_all(cx, loc, &dim.exprs(), &what) {
            continue;
        }
        if let Dim::Indirect { table, index, .. } = dim {
            check_indirect(cx, scope, loc, table, index);
            continue;
        }
        let [below, past] = cx
            .memo
            .out_of_bounds(scope.boxes_id, &scope.boxes, dim, extent);
        if !(below || past) {
            continue;
        }
        // A problem: the bounds again, for the message.
        let Some((lo, hi)) = dim_bounds(dim, &scope.boxes) else {
            continue;
        };
        if below {
            cx.push(
                ProblemKind::OutOfBounds,
                loc,
                format!("index {lo} is below 0 in dimension {i} of '{data}' (subset [{subset}])"),
            );
        }
        if past {
            cx.push(
                ProblemKind::OutOfBounds,
                loc,
                format!(
                    "index {hi} is past the end ({extent}) of dimension {i} of '{data}' (subset [{subset}])"
                ),
            );
        }
    }
    true
}

fn check_indirect(
    cx: &mut Cx,
    scope: &Scope<'_>,
    loc: &Loc<'_>,
    table: &str,
    index: &[crate::symexpr::SymExpr],
) {
    let Some(desc) = scope.sdfg.arrays.get(table) else {
        cx.push(
            ProblemKind::UndefinedData,
            loc,
            format!("indirection table '{table}' is not a declared container"),
        );
        return;
    };
    if !desc.dtype().is_int() {
        cx.push(
            ProblemKind::BadIndirect,
            loc,
            format!(
                "indirection table '{table}' is {}, not an integer container",
                desc.dtype()
            ),
        );
    }
    if desc.rank() != index.len() {
        cx.push(
            ProblemKind::BadIndirect,
            loc,
            format!(
                "indirection table '{table}' has rank {} but is indexed with {} index(es)",
                desc.rank(),
                index.len()
            ),
        );
        return;
    }
    for (i, (e, extent)) in index.iter().zip(desc.shape()).enumerate() {
        let Some((lo, hi)) = expr_bounds(e, &scope.boxes) else {
            continue;
        };
        let below = lo.const_value().is_some_and(|v| v < 0);
        let past = extent.const_diff(&hi).is_some_and(|d| d <= 0);
        if below || past {
            cx.push(
                ProblemKind::OutOfBounds,
                loc,
                format!("index {e} of dimension {i} of indirection table '{table}' can leave 0..{extent}"),
            );
        }
    }
}

/// A subset that overlaps every other (index tables are read whole).
static WHOLE: Subset = Subset(Vec::new());

/// One node's access to some data, for the race check.
struct Access<'a> {
    node: NodeId,
    data: &'a str,
    subset: &'a Subset,
    write: bool,
    wcr: bool,
}

fn check_races(cx: &mut Cx, g: &Dataflow, loc: &Loc<'_>) {
    let mut accesses: Vec<Access<'_>> = Vec::new();
    for e in g.edge_ids() {
        let (s, d) = g.endpoints(e);
        let m = &g.edge(e).memlet;
        if let Some(data) = g.node(d).as_access() {
            let copy = g.node(s).as_access().is_some();
            let subset = if copy {
                m.other_subset.as_ref().unwrap_or(&m.subset)
            } else {
                &m.subset
            };
            accesses.push(Access {
                node: s,
                data,
                subset,
                write: true,
                wcr: m.wcr.is_some(),
            });
        }
        if let Some(data) = g.node(s).as_access()
            && g.node(d).as_access().is_none()
        {
            accesses.push(Access {
                node: d,
                data,
                subset: &m.subset,
                write: false,
                wcr: false,
            });
        }
        // Index tables are read (whole, as far as ordering goes) by the node that
        // evaluates the memlet: the computing end, or a copy's destination.
        let reader = if g.node(d).as_access().is_none() || g.node(s).as_access().is_some() {
            d
        } else {
            s
        };
        let tables = m
            .subset
            .tables()
            .into_iter()
            .chain(m.other_subset.iter().flat_map(|o| o.tables()));
        for table in tables {
            accesses.push(Access {
                node: reader,
                data: table,
                subset: &WHOLE,
                write: false,
                wcr: false,
            });
        }
    }
    // Group by container: only pairs with a writer can conflict.
    let mut by_data: std::collections::BTreeMap<&str, Vec<&Access<'_>>> =
        std::collections::BTreeMap::new();
    for a in &accesses {
        by_data.entry(a.data).or_default().push(a);
    }
    let mut reach = None;
    let mut reported = std::collections::BTreeSet::new();
    for list in by_data.values() {
        // Each writer against every reader and every later writer.
        for (i, a) in list.iter().enumerate().filter(|(_, a)| a.write) {
            for (j, b) in list.iter().enumerate() {
                if j == i || (b.write && j < i) || a.node == b.node {
                    continue;
                }
                if a.write && b.write && a.wcr && b.wcr {
                    continue;
                }
                let key = (a.node.min(b.node), a.node.max(b.node), a.data);
                if reported.contains(&key) || disjoint(a.subset, b.subset) {
                    continue;
                }
                // A cyclic graph is reported as such; its races are not checked.
                let Some(r) = reach.get_or_insert_with(|| g.reachability()) else {
                    return;
                };
                if r.ordered(a.node, b.node) {
                    continue;
                }
                reported.insert(key);
                let (x, y) = if a.node <= b.node { (a, b) } else { (b, a) };
                let verb = |w: bool| if w { "writes" } else { "reads" };
                cx.push(
                ProblemKind::WriteRace,
                loc,
                format!(
                    "{} (node {}) {} '{}' [{}] and {} (node {}) {} [{}] with no ordering between them",
                    g.node(x.node).describe(),
                    x.node.index(),
                    verb(x.write),
                    x.data,
                    x.subset,
                    g.node(y.node).describe(),
                    y.node.index(),
                    verb(y.write),
                    y.subset
                ),
            );
            }
        }
    }
}
