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
//!
//! [`callee_condition`] states the same for the nested SDFGs a map body calls at every
//! point: every subscript their states form, in the caller's terms (the callee's symbols
//! replaced by the caller's expressions the call binds them to, the caller's map
//! parameters bounded over the map). Where it holds, the callees skip their own checks
//! (`docs/backend-cpu.md`, "Callees in map bodies").

use std::collections::BTreeMap;

use sdflow_ir::propagate::{ParamBox, expr_bounds};
use sdflow_ir::{
    Block, Dataflow, Dim, Loop, MapScope, NestedSdfg, Node, NodeId, Sdfg, Subset, SymExpr, SymOp,
};

/// The condition of node `n` of `df` (a state's graph of `sdfg`); `None` when it cannot
/// be stated (a subscript that is not affine in the map parameters, for example).
pub fn node_condition(sdfg: &Sdfg, df: &Dataflow, n: NodeId) -> Option<SymExpr> {
    let mut c = Collect {
        sdfg,
        levels: Vec::new(),
        params: Vec::new(),
        terms: Vec::new(),
    };
    let cond = match df.node(n) {
        Node::Map(m) => {
            c.levels
                .push(Level::Box(ParamBox::of_map(&m.params, &m.ranges)));
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

/// The condition under which the nested SDFGs that the body of map node `n` calls (at
/// any depth of its maps) may run every state unchecked at every point of the map: the
/// in-bounds conditions of all their state-level nodes (as [`node_condition`] states
/// them inside the callee), over the caller's symbols alone. `None` when the body calls
/// none, or some subscript cannot be stated in the caller's terms (a callee symbol bound
/// to nothing, one its control flow assigns, a subscript that is not affine).
pub fn callee_condition(sdfg: &Sdfg, df: &Dataflow, n: NodeId) -> Option<SymExpr> {
    let Node::Map(m) = df.node(n) else {
        return None;
    };
    // No parameter may stay in the result: checked below against the caller's symbols.
    let mut c = Collect {
        sdfg,
        levels: vec![Level::Box(ParamBox::of_map(&m.params, &m.ranges))],
        params: Vec::new(),
        terms: Vec::new(),
    };
    let mut found = false;
    c.callees(&m.body, &mut found)?;
    if !found {
        return None;
    }
    // Simplified: most of a callee's terms hold for any sizes (`N - 1 < N`), and a
    // condition that always holds needs no second version of the map.
    let cond = and_all(c.terms).simplify();
    cond.free_symbols()
        .iter()
        .all(|s| sdfg.symbols.contains_key(s.as_str()))
        .then_some(cond)
}

fn and_all(terms: Vec<SymExpr>) -> SymExpr {
    terms
        .into_iter()
        .reduce(|a, b| SymExpr::bin(SymOp::And, a, b))
        .unwrap_or(SymExpr::Int(1))
}

/// One step inwards from the node: a map's parameter box, or the call of a nested SDFG
/// (the callee's symbols in terms of the caller's).
#[derive(Clone)]
enum Level {
    Box(Vec<ParamBox>),
    Callee(BTreeMap<String, SymExpr>),
}

struct Collect<'a> {
    /// The SDFG whose containers the accesses name (a callee's, inside one).
    sdfg: &'a Sdfg,
    /// The enclosing maps' parameter boxes and callee entries inside the node, outermost
    /// first.
    levels: Vec<Level>,
    /// Every parameter of those maps, which [`node_condition`]'s result must not name
    /// (the callee condition checks its result against the caller's symbols instead).
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
                self.map(m)?;
            }
        }
        Some(())
    }

    /// A map inside the node: its steps positive, then its body over its parameters' box.
    fn map(&mut self, m: &MapScope) -> Option<()> {
        for r in &m.ranges {
            if r.step.as_int().is_none_or(|s| s < 1) {
                let (lo, _) = self.over_boxes(&r.step, &r.step)?;
                self.terms
                    .push(SymExpr::bin(SymOp::Ge, lo, SymExpr::Int(1)));
            }
        }
        self.levels
            .push(Level::Box(ParamBox::of_map(&m.params, &m.ranges)));
        self.params.extend(m.params.iter().cloned());
        let r = self.graph(&m.body);
        self.levels.pop();
        r
    }

    /// The nested SDFGs of a map body and of the maps inside it (`found` set when there
    /// is one): the in-bounds conditions of all their states' nodes.
    fn callees(&mut self, g: &Dataflow, found: &mut bool) -> Option<()> {
        for n in g.node_ids() {
            match g.node(n) {
                Node::Map(m) => {
                    self.levels
                        .push(Level::Box(ParamBox::of_map(&m.params, &m.ranges)));
                    let r = self.callees(&m.body, found);
                    self.levels.pop();
                    r?;
                }
                Node::Nested(ns) => {
                    *found = true;
                    self.callee(ns)?;
                }
                _ => {}
            }
        }
        Some(())
    }

    /// Every state-level node of callee `ns`, as [`node_condition`] collects it, with
    /// the callee's symbols bound as the call binds them (its static values included).
    /// The callee's control flow is walked: both arms of an `if` count, and inside a
    /// counted loop the loop variable is bounded by the values it takes ([`loop_box`]),
    /// as a map parameter is by its range. A symbol the callee's control flow assigns
    /// (other than such a loop variable, inside its loop) is bound to nothing.
    fn callee(&mut self, ns: &NestedSdfg) -> Option<()> {
        let mut bind = ns.symbol_mapping.clone();
        for (k, s) in &ns.sdfg.symbols {
            if let Some(v) = s.value.filter(|v| !v.dtype().is_float()) {
                bind.insert(k.clone(), SymExpr::Int(v.as_i64()));
            }
        }
        for assigned in ns.sdfg.loop_and_assigned_symbols() {
            bind.remove(&assigned);
        }
        let mut levels = self.levels.clone();
        levels.push(Level::Callee(bind));
        let mut inner = Collect {
            sdfg: &ns.sdfg,
            levels,
            params: Vec::new(),
            terms: Vec::new(),
        };
        inner.block(&ns.sdfg.body)?;
        self.terms.append(&mut inner.terms);
        Some(())
    }

    /// The state-level nodes of the states `b` runs, in a callee.
    fn block(&mut self, b: &Block) -> Option<()> {
        match b {
            Block::State(s) => self.state(&self.sdfg.states.get(s.index())?.graph),
            Block::Seq(bs) => bs.iter().try_for_each(|b| self.block(b)),
            Block::If(i) => {
                self.block(&i.then)?;
                self.block(&i.otherwise)
            }
            Block::Loop(l) => {
                let b = loop_box(l)?;
                self.levels.push(Level::Box(vec![b]));
                let r = self.block(&l.body);
                self.levels.pop();
                r
            }
            Block::Assign(_) => Some(()),
        }
    }

    /// The state-level nodes of one state of a callee.
    fn state(&mut self, g: &Dataflow) -> Option<()> {
        for n in g.node_ids() {
            match g.node(n) {
                Node::Map(m) => self.map(m)?,
                _ => self.edges_of(g, n)?,
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

    /// `lo` over the boxes at its low end, `hi` at its high end, innermost map first,
    /// each callee's symbols replaced by their binding on the way out.
    fn over_boxes(&self, lo: &SymExpr, hi: &SymExpr) -> Option<(SymExpr, SymExpr)> {
        let (mut lo, mut hi) = (lo.clone(), hi.clone());
        for l in self.levels.iter().rev() {
            match l {
                Level::Box(b) => {
                    lo = bounds_over(&lo, b, FUEL)?.0;
                    hi = bounds_over(&hi, b, FUEL)?.1;
                }
                Level::Callee(bind) => {
                    lo = rebind(&lo, bind)?;
                    hi = rebind(&hi, bind)?;
                }
            }
        }
        Some((lo, hi))
    }

    /// An extent of the current SDFG in the node's terms: through the callee entries.
    fn outward(&self, e: &SymExpr) -> Option<SymExpr> {
        let mut e = e.clone();
        for l in self.levels.iter().rev() {
            if let Level::Callee(bind) = l {
                e = rebind(&e, bind)?;
            }
        }
        Some(e)
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
                SymExpr::bin(SymOp::Lt, hi.clone(), self.outward(&shape[k])?),
            );
            // An empty range (or an index over an empty map) accesses nothing.
            let empty = SymExpr::bin(SymOp::Gt, lo, hi);
            self.terms.push(SymExpr::bin(SymOp::Or, empty, inside));
        }
        Some(())
    }
}

/// `e` with a callee's symbols replaced by their binding; `None` where it names a symbol
/// the call does not bind (the callee's control flow assigns it, say).
fn rebind(e: &SymExpr, bind: &BTreeMap<String, SymExpr>) -> Option<SymExpr> {
    e.free_symbols()
        .iter()
        .all(|s| bind.contains_key(s.as_str()))
        .then(|| e.substitute(bind))
}

/// The values a counted loop's variable takes in its body, as a box: a loop that counts
/// up (`v = v + c`, `c >= 1`) from `init` while `v < e` (or `v <= e`, `e > v`, `e >= v`)
/// runs its body with `init <= v <= e - 1`; one that counts down (`v = v - c`) while
/// `v >= e` (or `v > e`, …) with `e <= v <= init`. Of a conjunction of conditions, every
/// bound on the variable applies (the smallest upper one is taken, symbolically
/// `min`). Only the loop assigns its variable (`ir::Loop`), so the bound holds
/// wherever the body reads it; a loop that runs no iteration gives an empty box, over
/// which every subscript is vacuously in bounds (and no state of the body runs).
/// `None` for any other loop.
fn loop_box(l: &Loop) -> Option<ParamBox> {
    let v = l.var.as_str();
    if l.init.mentions(v) {
        return None;
    }
    let step = match l.update.sub(&SymExpr::sym(v)).simplify().as_int() {
        Some(c) if c >= 1 => 1,
        Some(c) if c <= -1 => -1,
        _ => return None,
    };
    // The bounds the condition puts on `v` on the side it counts towards.
    let mut ends: Vec<SymExpr> = Vec::new();
    let mut conds = vec![&l.cond];
    while let Some(c) = conds.pop() {
        let SymExpr::Bin(op, a, b) = c else { continue };
        let (op, a, b) = (*op, a.as_ref(), b.as_ref());
        if op == SymOp::And {
            conds.push(a);
            conds.push(b);
            continue;
        }
        // `v OP e` with `e` free of `v`, the comparison turned around where `v` is right.
        let (op, e) = match (a, b) {
            (SymExpr::Sym(x), e) if &**x == v && !e.mentions(v) => (op, e),
            (e, SymExpr::Sym(x)) if &**x == v && !e.mentions(v) => match op {
                SymOp::Lt => (SymOp::Gt, e),
                SymOp::Le => (SymOp::Ge, e),
                SymOp::Gt => (SymOp::Lt, e),
                SymOp::Ge => (SymOp::Le, e),
                _ => continue,
            },
            _ => continue,
        };
        let one = SymExpr::Int(1);
        match (step, op) {
            (1, SymOp::Lt) => ends.push(e.sub(&one)),
            (1, SymOp::Le) => ends.push(e.clone()),
            (-1, SymOp::Gt) => ends.push(e.add(&one)),
            (-1, SymOp::Ge) => ends.push(e.clone()),
            _ => {}
        }
    }
    let combine = |op| {
        ends.iter()
            .cloned()
            .reduce(|x, y| SymExpr::bin(op, x, y))
            .map(|e| e.simplify())
    };
    let (lo, hi) = if step == 1 {
        (l.init.clone(), combine(SymOp::Min)?)
    } else {
        (combine(SymOp::Max)?, l.init.clone())
    };
    Some(ParamBox {
        name: l.var.clone(),
        lo,
        hi,
    })
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
