//! The in-bounds condition of a state-level node: one symbolic expression over the names
//! outside the node (symbols, loop variables, host scalars) that holds when every
//! subscript the node forms — its own memlets and those of its map body at any depth —
//! lies within its container's extents and every map range it runs has a positive step.
//!
//! The condition is derived with `ir::propagate`'s bounds over map parameters (affine
//! subscripts, bounds applied from the innermost map outwards) and is conservative: when
//! it holds, no subscript of the node leaves its array, so the generated code runs the
//! node unchecked; when it fails (or cannot be stated), the node runs its checked
//! version, which reports the interpreter's error or finds none. Values read from index
//! tables are not covered: they are checked where they are read.

use sdflow_ir::propagate::{ParamBox, expr_bounds};
use sdflow_ir::{Dataflow, Dim, Node, NodeId, Sdfg, Subset, SymExpr, SymOp};

/// The condition of node `n` of `df` (a state's graph of `sdfg`); `None` when it cannot
/// be stated (a subscript that is not affine in the map parameters, for example).
pub fn node_condition(sdfg: &Sdfg, df: &Dataflow, n: NodeId) -> Option<SymExpr> {
    let mut c = Collect {
        sdfg,
        boxes: Vec::new(),
        params: Vec::new(),
        terms: Vec::new(),
    };
    let cond = match df.node(n) {
        Node::Map(m) => {
            c.boxes.push(ParamBox::of_map(&m.params, &m.ranges));
            c.params.extend(m.params.iter().cloned());
            c.graph(&m.body)?;
            // The map's own ranges, in the interpreter's order: each range's step must be
            // positive, and an empty range ends the map before anything else happens.
            let mut inner = and_all(std::mem::take(&mut c.terms));
            for r in m.ranges.iter().rev() {
                let empty = SymExpr::bin(SymOp::Ge, r.start.clone(), r.end.clone());
                inner = SymExpr::bin(SymOp::Or, empty, inner);
                if r.step.as_int().is_none_or(|s| s < 1) {
                    let pos = SymExpr::bin(SymOp::Ge, r.step.clone(), SymExpr::Int(1));
                    inner = SymExpr::bin(SymOp::And, pos, inner);
                }
            }
            inner
        }
        _ => {
            c.edges_of(df, n)?;
            and_all(std::mem::take(&mut c.terms))
        }
    };
    let free = cond.free_symbols();
    if c.params.iter().any(|p| free.contains(p)) {
        return None;
    }
    Some(cond)
}

fn and_all(terms: Vec<SymExpr>) -> SymExpr {
    terms
        .into_iter()
        .reduce(|a, b| SymExpr::bin(SymOp::And, a, b))
        .unwrap_or(SymExpr::Int(1))
}

struct Collect<'a> {
    sdfg: &'a Sdfg,
    /// Parameter boxes of the enclosing maps inside the node, outermost first.
    boxes: Vec<Vec<ParamBox>>,
    /// Every parameter of those maps.
    params: Vec<String>,
    terms: Vec<SymExpr>,
}

impl Collect<'_> {
    /// Every access of a map body: its edges (map edges are summaries and skipped) and
    /// the bodies of the maps inside it.
    fn graph(&mut self, g: &Dataflow) -> Option<()> {
        for e in g.edge_ids() {
            self.edge(g, e)?;
        }
        for n in g.node_ids() {
            if let Node::Map(m) = g.node(n) {
                for r in &m.ranges {
                    if r.step.as_int().is_none_or(|s| s < 1) {
                        let (lo, _) = self.over_boxes(&r.step, &r.step)?;
                        self.terms
                            .push(SymExpr::bin(SymOp::Ge, lo, SymExpr::Int(1)));
                    }
                }
                self.boxes.push(ParamBox::of_map(&m.params, &m.ranges));
                self.params.extend(m.params.iter().cloned());
                let r = self.graph(&m.body);
                self.boxes.pop();
                r?;
            }
        }
        Some(())
    }

    /// The accesses of one state-level node that is not a map.
    fn edges_of(&mut self, g: &Dataflow, n: NodeId) -> Option<()> {
        let mut edges = g.in_edges(n);
        if matches!(g.node(n), Node::Access(_)) {
            // An access node runs the copies into it.
            edges.retain(|&e| g.node(g.endpoints(e).0).as_access().is_some());
        } else {
            edges.extend(g.out_edges(n));
        }
        for e in edges {
            self.edge(g, e)?;
        }
        Some(())
    }

    fn edge(&mut self, g: &Dataflow, e: sdflow_ir::EdgeId) -> Option<()> {
        let (s, d) = g.endpoints(e);
        let (sn, dn) = (g.node(s), g.node(d));
        if matches!(sn, Node::Map(_)) || matches!(dn, Node::Map(_)) {
            return Some(());
        }
        let m = &g.edge(e).memlet;
        match (sn.as_access(), dn.as_access()) {
            (Some(src), Some(dst)) => {
                // A copy, with the interpreter's choice of which subset is whose.
                let other = m.other_subset.as_ref().unwrap_or(&m.subset);
                let (ss, ds) = if m.data == dst && m.data != src {
                    (other, &m.subset)
                } else {
                    (&m.subset, other)
                };
                self.access(src, ss)?;
                self.access(dst, ds)
            }
            (_, Some(_)) | (Some(_), _) => self.access(&m.data, &m.subset),
            _ => Some(()),
        }
    }

    /// `lo` over the boxes at its low end, `hi` at its high end, innermost map first.
    fn over_boxes(&self, lo: &SymExpr, hi: &SymExpr) -> Option<(SymExpr, SymExpr)> {
        let (mut lo, mut hi) = (lo.clone(), hi.clone());
        for b in self.boxes.iter().rev() {
            lo = bounds_over(&lo, b, FUEL)?.0;
            hi = bounds_over(&hi, b, FUEL)?.1;
        }
        Some((lo, hi))
    }

    /// `data[subset]` stays within the container's extents.
    fn access(&mut self, data: &str, subset: &Subset) -> Option<()> {
        let Some(desc) = self.sdfg.arrays.get(data) else {
            return Some(());
        };
        let shape = desc.shape().to_vec();
        if subset.0.is_empty() || shape.is_empty() {
            // The whole container, or a scalar.
            return Some(());
        }
        if subset.rank() != shape.len() {
            return None;
        }
        for (k, d) in subset.0.iter().enumerate() {
            if let Dim::Indirect { table, index, .. } = d {
                let at = Subset(index.iter().cloned().map(Dim::Index).collect());
                self.access(table, &at)?;
                continue;
            }
            let (lo, hi) = d.bounds()?;
            let (lo, hi) = self.over_boxes(&lo, &hi)?;
            let inside = SymExpr::bin(
                SymOp::And,
                SymExpr::bin(SymOp::Ge, lo.clone(), SymExpr::Int(0)),
                SymExpr::bin(SymOp::Lt, hi.clone(), shape[k].clone()),
            );
            // An empty range (or an index over an empty map) accesses nothing.
            let empty = SymExpr::bin(SymOp::Gt, lo, hi);
            self.terms.push(SymExpr::bin(SymOp::Or, empty, inside));
        }
        Some(())
    }
}

/// How many min/max splits `bounds_over` may make for one expression.
const FUEL: u32 = 64;

/// Bounds of `e` over the box `b`: `expr_bounds`, or, for an expression that is affine
/// but for `min`/`max` terms (an inner map's range clipped to the array, as in a tile of
/// a fused map, then offset by the tile's start), the bounds of each side after the
/// linear operations around the `min`/`max` are pushed into it. Sound: over the box,
/// `max(x, y)` lies between `max(lo x, lo y)` and `max(hi x, hi y)`, `min` alike.
fn bounds_over(e: &SymExpr, b: &[ParamBox], fuel: u32) -> Option<(SymExpr, SymExpr)> {
    if let Some(r) = expr_bounds(e, b) {
        return Some(r);
    }
    if fuel == 0 {
        return None;
    }
    match push_into_min_max(e)? {
        SymExpr::Bin(op, x, y) => {
            let (xl, xh) = bounds_over(&x, b, fuel - 1)?;
            let (yl, yh) = bounds_over(&y, b, fuel - 1)?;
            Some((
                SymExpr::bin(op, xl, yl).simplify(),
                SymExpr::bin(op, xh, yh).simplify(),
            ))
        }
        _ => None,
    }
}

/// `e` rewritten with a `min` or `max` at its root, when `e` is one, or a sum, difference,
/// negation or constant multiple of one: `max(a, b) + y = max(a + y, b + y)`,
/// `x - max(a, b) = min(x - a, x - b)`, `-max(a, b) = min(-a, -b)`,
/// `k max(a, b) = max(k a, k b)` for `k ≥ 0` (`min` for `k < 0`).
fn push_into_min_max(e: &SymExpr) -> Option<SymExpr> {
    fn split(e: &SymExpr) -> Option<(SymOp, SymExpr, SymExpr)> {
        match push_into_min_max(e)? {
            SymExpr::Bin(op, a, b) => Some((op, (*a).clone(), (*b).clone())),
            _ => None,
        }
    }
    fn flip(op: SymOp) -> SymOp {
        if op == SymOp::Min {
            SymOp::Max
        } else {
            SymOp::Min
        }
    }
    let bin = SymExpr::bin;
    match e {
        SymExpr::Bin(SymOp::Min | SymOp::Max, _, _) => Some(e.clone()),
        SymExpr::Bin(SymOp::Add, x, y) => {
            if let Some((op, a, c)) = split(x) {
                Some(bin(op, a.add(y), c.add(y)))
            } else {
                let (op, a, c) = split(y)?;
                Some(bin(op, x.add(&a), x.add(&c)))
            }
        }
        SymExpr::Bin(SymOp::Sub, x, y) => {
            if let Some((op, a, c)) = split(x) {
                Some(bin(op, a.sub(y), c.sub(y)))
            } else {
                let (op, a, c) = split(y)?;
                Some(bin(flip(op), x.sub(&a), x.sub(&c)))
            }
        }
        SymExpr::Neg(x) => {
            let (op, a, c) = split(x)?;
            Some(bin(
                flip(op),
                SymExpr::Neg(a.into()),
                SymExpr::Neg(c.into()),
            ))
        }
        SymExpr::Bin(SymOp::Mul, x, y) => {
            let (k, m) = match (x.as_int(), y.as_int()) {
                (Some(k), _) => (k, y),
                (_, Some(k)) => (k, x),
                _ => return None,
            };
            let (op, a, c) = split(m)?;
            let op = if k >= 0 { op } else { flip(op) };
            let k = SymExpr::Int(k);
            Some(bin(
                op,
                bin(SymOp::Mul, k.clone(), a),
                bin(SymOp::Mul, k, c),
            ))
        }
        _ => None,
    }
}
