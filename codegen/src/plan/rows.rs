//! Index-table reads checked per row: for a parallel map whose outer loops a team
//! shares, the table entries its body reads at one point of those loops — GT4Py's
//! neighbour tables, read at a horizontal point for every level — can be checked once
//! there, before the inner loops, which then gather without a check (a bad entry runs
//! them checked, as before). A check per level kept the level loop from vectorizing.
//! The plan records the checks ([`super::StepKind::ParallelMap`]); the C printer prints
//! them.

use std::collections::{BTreeMap, BTreeSet};

use sdflow_ir::{DataDesc, Dataflow, Dim, Expr, MapScope, MathFn, Memlet, Node, Sdfg, SymExpr};

/// One index-table read of a map body checked per point of the map's outer loops: the
/// dimension, the extent its value must lie in, and the inner-map parameters (constant
/// ranges) its table index uses.
#[derive(Clone, Debug, PartialEq)]
pub struct RowCheck {
    /// The gathered dimension (an index-table read).
    pub dim: Dim,
    /// The extent its value must lie in.
    pub extent: SymExpr,
    /// The inner-map parameters its table index uses, with their constant ranges.
    pub inner: Vec<(String, sdflow_ir::Range)>,
}

/// The row checks of `m`'s body when every index-table read there can be checked per
/// point of the first `outer` parameters: its table index uses those, program symbols
/// and parameters of inner maps of constant ranges only; and the body writes no table.
/// `None` otherwise. A scalar table (an index the body computes at each point, GT4Py's
/// dynamic vertical offsets) has no row check: its reads stay checked at each point, in
/// the same gather whose other dimensions come from a table checked with its row.
pub fn row_checks(sdfg: &Sdfg, m: &MapScope, outer: usize) -> Option<Vec<RowCheck>> {
    fn walk(
        sdfg: &Sdfg,
        df: &Dataflow,
        allowed: &BTreeSet<String>,
        inner: &BTreeMap<String, sdflow_ir::Range>,
        out: &mut Vec<RowCheck>,
    ) -> Option<()> {
        for (memlet, k, d) in gathered_dims(df)? {
            let Dim::Indirect { table, index, .. } = d else {
                continue;
            };
            let shape = sdfg.arrays.get(&memlet.data)?.as_array()?.shape.clone();
            match sdfg.arrays.get(table)? {
                DataDesc::Scalar { .. } => continue,
                DataDesc::Array(_) => {}
            }
            let mut used = Vec::new();
            for x in index.iter().flat_map(SymExpr::free_symbols) {
                if let Some(r) = inner.get(&x) {
                    if !used
                        .iter()
                        .any(|(p, _): &(String, sdflow_ir::Range)| *p == x)
                    {
                        used.push((x.clone(), r.clone()));
                    }
                } else if !allowed.contains(&x) && !sdfg.symbols.contains_key(&x) {
                    return None;
                }
            }
            out.push(RowCheck {
                dim: d.clone(),
                extent: shape.get(k)?.clone(),
                inner: used,
            });
        }
        for n in df.node_ids() {
            match df.node(n) {
                Node::Map(im) => {
                    let mut inner = inner.clone();
                    for (p, r) in im.params.iter().zip(&im.ranges) {
                        let constant = r.start.as_int().is_some()
                            && r.end.as_int().is_some()
                            && r.step.as_int() == Some(1);
                        if constant {
                            inner.insert(p.clone(), r.clone());
                        }
                    }
                    walk(sdfg, &im.body, allowed, &inner, out)?;
                }
                // A callee that gathers through no table (GT4Py's `if` at a point) reads
                // nothing a row check would cover.
                Node::Nested(ns) if !gathers_anywhere(&ns.sdfg) => {}
                Node::Nested(_) => return None,
                _ => {}
            }
        }
        Some(())
    }
    /// Containers written anywhere in `df`.
    fn written(df: &Dataflow, out: &mut BTreeSet<String>) {
        for n in df.node_ids() {
            match df.node(n) {
                Node::Access(a) if df.in_degree(n) > 0 => {
                    out.insert(a.clone());
                }
                Node::Map(im) => written(&im.body, out),
                _ => {}
            }
        }
    }
    let allowed: BTreeSet<String> = m.params[..outer].iter().cloned().collect();
    let mut out = Vec::new();
    walk(sdfg, &m.body, &allowed, &BTreeMap::new(), &mut out)?;
    let mut writes = BTreeSet::new();
    written(&m.body, &mut writes);
    let writes_a_table = out
        .iter()
        .any(|c| matches!(&c.dim, Dim::Indirect { table, .. } if writes.contains(table)));
    (!writes_a_table).then_some(out)
}

/// The gathered dimensions of the memlets of `df` (not of its inner maps): each memlet
/// with the position of the dimension and the dimension (`Dim::Indirect`). `None`
/// where the other side of a copy gathers, which no check before the loops covers.
pub fn gathered_dims(df: &Dataflow) -> Option<Vec<(&Memlet, usize, &Dim)>> {
    let mut out = Vec::new();
    for e in df.edge_ids() {
        let memlet = &df.edge(e).memlet;
        if memlet
            .other_subset
            .as_ref()
            .is_some_and(|o| !o.tables().is_empty())
        {
            return None;
        }
        for (k, d) in memlet.subset.0.iter().enumerate() {
            if matches!(d, Dim::Indirect { .. }) {
                out.push((memlet, k, d));
            }
        }
    }
    Some(out)
}

/// Whether any memlet of `sdfg` (its states, map bodies and callees) reads through an
/// index table.
pub fn gathers_anywhere(sdfg: &Sdfg) -> bool {
    fn df_gathers(df: &Dataflow) -> bool {
        df.edge_ids().into_iter().any(|e| {
            let m = &df.edge(e).memlet;
            !m.subset.tables().is_empty()
                || m.other_subset
                    .as_ref()
                    .is_some_and(|o| !o.tables().is_empty())
        }) || df.node_ids().into_iter().any(|n| match df.node(n) {
            Node::Map(m) => df_gathers(&m.body),
            Node::Nested(ns) => gathers_anywhere(&ns.sdfg),
            _ => false,
        })
    }
    sdfg.states.iter().any(|st| df_gathers(&st.graph))
}

/// The points of the outer loop a strip holds ([`strips`]): 4 KiB of each field of
/// doubles per level, a page.
pub const STRIP: i64 = 512;

/// Which loop of a two-parameter map whose outer loop a team shares runs in strips of
/// [`STRIP`] points: the loop along which its fields are contiguous, the horizontal
/// one of GT4Py's horizontal-first fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strip {
    /// The outer loop ([`strips`]): the levels listed innermost, as `loop_order` keeps
    /// a gathering map.
    Outer,
    /// The inner loop ([`inner_strips`]): listed innermost, it is cut into strips the
    /// threads share, and the outer loop (the levels) runs inside each strip, outside a
    /// loop over the strip's points.
    Inner,
}

/// Whether a two-parameter map whose outer loop a team shares, with row checks, runs in
/// strips: the outer loop steps over strips of [`STRIP`] points, the tables are checked
/// for the strip's points at once, and inside a strip the level loop runs outside a
/// contiguous loop over the strip's points. That is the map whose fields are contiguous
/// along its outer parameter (column-major fields, horizontal first), which `loop_order`
/// keeps outermost because a gather at every point of the levels' loop costs more: in
/// strips a point's table entries are read once per level, after one check per strip,
/// and the contiguous loop vectorizes, its gathers included.
///
/// The order of the points changes only between points of different outer indices,
/// which a parallel map runs in any order already. Required: the outer range steps by
/// 1 and the inner range does not depend on it; the body is tasklets and containers
/// (no inner map, library node or nested SDFG), calls no math function the C compiler
/// keeps a call ([`calls_out`]: such a loop stays scalar and reads each table entry at
/// every level), resolves no write conflict, and indexes no
/// table it computes (those stay checked at each point); every array it reads or writes
/// has a dimension of constant stride 1 (its layout is known when the program is
/// built); some array is contiguous along the outer parameter, and none that varies with
/// it is contiguous along the inner one.
pub fn strips(sdfg: &Sdfg, m: &MapScope) -> bool {
    let [h, k] = m.params.as_slice() else {
        return false;
    };
    let inner = &m.ranges[1];
    if m.ranges[0].step.as_int() != Some(1)
        || [&inner.start, &inner.end, &inner.step]
            .iter()
            .any(|x| x.free_symbols().contains(h.as_str()))
    {
        return false;
    }
    let df = &m.body;
    let plain = df.node_ids().into_iter().all(|n| match df.node(n) {
        Node::Tasklet(t) => t.code.iter().all(|st| !calls_out(&st.value)),
        Node::Access(_) => true,
        _ => false,
    });
    if !plain {
        return false;
    }
    let names = [h.as_str(), k.as_str()];
    let (mut along_outer, mut along_inner) = (0usize, 0usize);
    for e in df.edge_ids() {
        let memlet = &df.edge(e).memlet;
        if memlet.wcr.is_some() {
            return false;
        }
        let computed = memlet
            .subset
            .tables()
            .into_iter()
            .any(|t| matches!(sdfg.arrays.get(t), Some(DataDesc::Scalar { .. }) | None));
        if computed {
            return false;
        }
        let Some(DataDesc::Array(a)) = sdfg.arrays.get(&memlet.data) else {
            continue;
        };
        if a.shape.is_empty() {
            continue;
        }
        // An array whose access moves with the levels must have a known contiguous
        // dimension (it might be contiguous along the levels, which then belong
        // innermost). One read the same at every level (a neighbour table, a horizontal
        // field) cannot be, whatever its layout: GT4Py leaves the tables' strides to
        // the call even where the fields' are specialized.
        let free = memlet.subset.free_symbols();
        if free.contains(k.as_str()) && !a.strides.iter().any(|s| s.as_int() == Some(1)) {
            return false;
        }
        if contiguous_along(&memlet.subset.0, &a.strides, h, &names) {
            along_outer += 1;
        }
        // An array read the same at every point of a strip (a column of coefficients)
        // is one value per level there, whatever its layout.
        let varies_outer = free.contains(h.as_str());
        if varies_outer && contiguous_along(&memlet.subset.0, &a.strides, k, &names) {
            along_inner += 1;
        }
    }
    along_outer > 0 && along_inner == 0
}

/// The table checks of a two-parameter map `(k, h)` whose body reads its index tables
/// at points of the inner parameter `h` only (a gathering map over levels and cells
/// with the cells innermost: `loop_order` puts them there where the fields are
/// contiguous along them and the tables' layout is left to the call), when it runs
/// in strips of its inner loop ([`Strip::Inner`]): the threads share strips of `h`, the
/// entries of a strip's points are checked at once, then the `k` loop runs a loop over
/// the strip's points, which gathers without a check. Checked at each point instead,
/// every level reads and checks every entry again, and the threads share the levels
/// only (ten of them in GT4Py's programs at 10 levels). The conditions are
/// [`strips`]'s for the map with its parameters swapped; and neither range depends on
/// the other parameter. Within a strip the points run in the map's own order.
pub fn inner_strips(sdfg: &Sdfg, m: &MapScope) -> Option<Vec<RowCheck>> {
    // A body in strips is plain: its gathers are its own memlets'.
    if m.params.len() != 2 || gathered_dims(&m.body).is_none_or(|g| g.is_empty()) {
        return None;
    }
    let flipped = swapped(m)?;
    let checks = row_checks(sdfg, &flipped, 1).filter(|c| !c.is_empty())?;
    strips(sdfg, &flipped).then_some(checks)
}

/// `m` with its two parameters in the other order, where neither range uses the other
/// parameter; `None` otherwise.
pub fn swapped(m: &MapScope) -> Option<MapScope> {
    let ([k, h], [rk, rh]) = (m.params.as_slice(), m.ranges.as_slice()) else {
        return None;
    };
    let uses = |r: &sdflow_ir::Range, p: &str| {
        [&r.start, &r.end, &r.step]
            .iter()
            .any(|x| x.free_symbols().contains(p))
    };
    if uses(rk, h) || uses(rh, k) {
        return None;
    }
    Some(MapScope {
        params: vec![h.clone(), k.clone()],
        ranges: vec![rh.clone(), rk.clone()],
        ..m.clone()
    })
}

/// Whether an access `dims` into an array of `strides` moves by one element per step of
/// `p`: exactly one dimension varies with `p`, as `p` with coefficient 1 (affine in
/// `names`), and its stride is 1.
fn contiguous_along(dims: &[Dim], strides: &[SymExpr], p: &str, names: &[&str]) -> bool {
    let mut unit = false;
    for (d, stride) in dims.iter().zip(strides) {
        let mentions = |x: &SymExpr| x.free_symbols().contains(p);
        match d {
            Dim::Index(x) if mentions(x) => {
                let coeff = x
                    .affine_in(names)
                    .and_then(|(c, _)| c.get(p).copied())
                    .unwrap_or(0);
                if unit || coeff != 1 || stride.as_int() != Some(1) {
                    return false;
                }
                unit = true;
            }
            Dim::Index(_) => {}
            Dim::Range { start, end, step } => {
                if [start, end, step].into_iter().any(mentions) {
                    return false;
                }
            }
            Dim::Indirect { index, offset, .. } => {
                if index.iter().chain(std::iter::once(offset)).any(mentions) {
                    return false;
                }
            }
        }
    }
    unit
}

/// Whether `e` calls a math function that stays a call in the C the backend compiles
/// (anything but `abs`, `min` and `max`, which are selects, and `sqrt`, one instruction
/// under `-fno-math-errno`): `<math.h>`'s other functions and sdflow's own `cbrt`, `fma`
/// and clock. A call keeps a loop from vectorizing.
fn calls_out(e: &Expr) -> bool {
    match e {
        Expr::Call(f, args) => {
            !matches!(f, MathFn::Abs | MathFn::Min | MathFn::Max | MathFn::Sqrt)
                || args.iter().any(calls_out)
        }
        Expr::Unary(_, a) | Expr::Cast(_, a) => calls_out(a),
        Expr::Binary(_, a, b) => calls_out(a) || calls_out(b),
        Expr::Select(c, a, b) => calls_out(c) || calls_out(a) || calls_out(b),
        Expr::Const(_) | Expr::Var(_) => false,
    }
}
