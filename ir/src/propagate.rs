//! Memlet propagation: from what one map iteration accesses to what the whole map does,
//! and the symbolic bound reasoning validation uses for coverage and bounds checks.
//!
//! Everything here is conservative: when a bound cannot be decided, propagation widens to
//! the whole dimension and checks answer `None` (unknown).

use crate::dataflow::Range;
use crate::memlet::{Dim, Subset};
pub use crate::symexpr::ParamBox;
use crate::symexpr::SymExpr;

impl ParamBox {
    /// The boxes of a map's parameters; `None` when a range's last value is not
    /// expressible (a non-unit step whose size is symbolic is still fine).
    pub fn of_map(params: &[String], ranges: &[Range]) -> Vec<ParamBox> {
        params
            .iter()
            .zip(ranges)
            .filter_map(|(p, r)| {
                let (lo, hi) = r.to_dim().bounds()?;
                Some(ParamBox {
                    name: p.clone(),
                    lo,
                    hi,
                })
            })
            .collect()
    }
}

/// Inclusive bounds of `e` over the box, when `e` is affine in the box's parameters with
/// constant coefficients (a positive coefficient takes the low end at the low bound, a
/// negative one the high end).
pub fn expr_bounds(e: &SymExpr, boxes: &[ParamBox]) -> Option<(SymExpr, SymExpr)> {
    if !boxes.iter().any(|b| e.mentions(&b.name)) {
        let e = e.simplify();
        return Some((e.clone(), e));
    }
    e.affine_bounds(boxes)
}

/// One end of [`expr_bounds`]: the largest value when `upper`, else the smallest.
fn expr_bound(e: &SymExpr, boxes: &[ParamBox], upper: bool) -> Option<SymExpr> {
    if !boxes.iter().any(|b| e.mentions(&b.name)) {
        return Some(e.simplify());
    }
    e.affine_bound(boxes, upper)
}

/// Inclusive bounds of a subset dimension over the box (`None` for indirect or undecidable).
pub fn dim_bounds(d: &Dim, boxes: &[ParamBox]) -> Option<(SymExpr, SymExpr)> {
    if let Dim::Index(e) = d {
        return expr_bounds(e, boxes);
    }
    let (lo, hi) = d.bounds()?;
    Some((
        expr_bound(&lo, boxes, false)?,
        expr_bound(&hi, boxes, true)?,
    ))
}

/// What a whole map accesses, given what one iteration accesses: each dimension becomes
/// the range its index takes over the parameters, or the whole dimension of `shape` when
/// that cannot be decided (and for indirect dimensions).
pub fn propagate(subset: &Subset, boxes: &[ParamBox], shape: &[SymExpr]) -> Subset {
    Subset(
        subset
            .0
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let uses_param = boxes
                    .iter()
                    .any(|b| d.exprs().iter().any(|e| e.mentions(&b.name)));
                let whole = || Dim::range(0, shape.get(i).cloned().unwrap_or(SymExpr::Int(1)));
                match d {
                    Dim::Indirect { .. } => whole(),
                    _ if !uses_param => d.clone(),
                    Dim::Range { step, .. } if step.as_int() != Some(1) => whole(),
                    _ => match dim_bounds(d, boxes) {
                        Some((lo, hi)) if lo == hi => Dim::Index(lo),
                        Some((lo, hi)) => Dim::range(lo, hi.add(&SymExpr::Int(1))),
                        None => whole(),
                    },
                }
            })
            .collect(),
    )
}

/// The smallest box covering both subsets (same rank), dimension by dimension; the whole
/// dimension where the two cannot be ordered.
pub fn union(a: &Subset, b: &Subset, shape: &[SymExpr]) -> Subset {
    Subset(
        a.0.iter()
            .zip(&b.0)
            .enumerate()
            .map(|(i, (x, y))| {
                if x == y {
                    return x.clone();
                }
                let whole = || Dim::range(0, shape.get(i).cloned().unwrap_or(SymExpr::Int(1)));
                // Two unit-step ranges: order their starts and their ends directly (the
                // general path below goes through the last indices, `end - 1`).
                if let (
                    Dim::Range {
                        start: xs,
                        end: xe,
                        step: xt,
                    },
                    Dim::Range {
                        start: ys,
                        end: ye,
                        step: yt,
                    },
                ) = (x, y)
                    && xt.as_int() == Some(1)
                    && yt.as_int() == Some(1)
                {
                    return match (xs.const_diff(ys), xe.const_diff(ye)) {
                        (Some(dl), Some(dh)) => Dim::range(
                            if dl <= 0 { xs.clone() } else { ys.clone() },
                            if dh >= 0 { xe.clone() } else { ye.clone() },
                        ),
                        _ => whole(),
                    };
                }
                let (Some((xl, xh)), Some((yl, yh))) = (x.bounds(), y.bounds()) else {
                    return whole();
                };
                let (Some(dl), Some(dh)) = (xl.const_diff(&yl), xh.const_diff(&yh)) else {
                    return whole();
                };
                let step_ok =
                    |d: &Dim| !matches!(d, Dim::Range { step, .. } if step.as_int() != Some(1));
                if !step_ok(x) || !step_ok(y) {
                    return whole();
                }
                let lo = if dl <= 0 { xl } else { yl };
                let hi = if dh >= 0 { xh } else { yh };
                Dim::range(lo, hi.add(&SymExpr::Int(1)))
            })
            .collect(),
    )
}

/// Whether every index of `inner` (over the box) lies in `outer`: `Some(true)` proven,
/// `Some(false)` disproven for some dimension, `None` unknown.
pub fn covers(outer: &Subset, inner: &Subset, boxes: &[ParamBox]) -> Option<bool> {
    if outer.rank() != inner.rank() {
        return Some(false);
    }
    let mut known = true;
    for (o, i) in outer.0.iter().zip(&inner.0) {
        let (Some((ol, oh)), Some((il, ih))) = (o.bounds(), dim_bounds(i, boxes)) else {
            known = false;
            continue;
        };
        match (il.const_diff(&ol), oh.const_diff(&ih)) {
            (Some(a), Some(b)) if a >= 0 && b >= 0 => {}
            (Some(a), _) if a < 0 => return Some(false),
            (_, Some(b)) if b < 0 => return Some(false),
            _ => known = false,
        }
    }
    if known { Some(true) } else { None }
}

/// Whether two subsets are provably disjoint (some dimension's ranges do not overlap).
pub fn disjoint(a: &Subset, b: &Subset) -> bool {
    a.0.iter().zip(&b.0).any(|(x, y)| {
        let (Some((xl, xh)), Some((yl, yh))) = (x.bounds(), y.bounds()) else {
            return false;
        };
        matches!(yl.const_diff(&xh), Some(d) if d > 0)
            || matches!(xl.const_diff(&yh), Some(d) if d > 0)
    })
}

/// [`disjoint`], with `min`/`max` bounds compared by [`SymExpr::provably_le`]: GT4Py's
/// domain pieces end and start at `min`/`max` of the same symbols (`[s, min(e, n))` and
/// `[max(s, n), e)`). Costlier than [`disjoint`] (a case split per `min`/`max`), for the
/// few pairs a rule asks about.
pub fn disjoint_proven(a: &Subset, b: &Subset) -> bool {
    a.rank() == b.rank()
        && a.0.iter().zip(&b.0).any(|(x, y)| {
            let (Some((xl, xh)), Some((yl, yh))) = (x.bounds(), y.bounds()) else {
                return false;
            };
            let one = SymExpr::Int(1);
            xh.add(&one).provably_le(&yl) || yh.add(&one).provably_le(&xl)
        })
}

/// Whether boxes `pieces` (half-open `[lo, hi)` per dimension) together cover every
/// index of a container of shape `shape`, for every value of the symbols. Each `min` and
/// `max` in the expressions is replaced by one operand and then by the other
/// (consistently in all of them; at most ten deep and 512 cases in all, each case first
/// tried with the `min`/`max` left opaque), and in each case the pieces
/// must chain along one dimension from 0 past the extent while spanning the others
/// whole. Sound, not complete.
pub fn union_covers(shape: &[SymExpr], pieces: &[Vec<(SymExpr, SymExpr)>]) -> bool {
    if pieces.iter().any(|p| p.len() != shape.len()) {
        return false;
    }
    // Dimensions every piece spans whole as written (`0:e` of an extent `e` or
    // `max(0, e)`) drop out before the case splits: their `min`s and `max`s would only
    // multiply the cases.
    let spans = |d: usize| {
        let n = shape[d].simplify();
        pieces.iter().all(|p| {
            let (lo, hi) = (&p[d].0, p[d].1.simplify());
            lo.simplify().as_int() == Some(0)
                && (hi == n
                    || matches!(&n, SymExpr::Bin(crate::symexpr::SymOp::Max, a, b)
                        if (a.as_int() == Some(0) && **b == hi)
                            || (b.as_int() == Some(0) && **a == hi)))
        })
    };
    let keep: Vec<usize> = (0..shape.len()).filter(|&d| !spans(d)).collect();
    if keep.is_empty() {
        return !pieces.is_empty() || shape.iter().any(|n| n.provably_le(&SymExpr::Int(0)));
    }
    let shape: Vec<SymExpr> = keep.iter().map(|&d| shape[d].clone()).collect();
    let mut pieces: Vec<Vec<(SymExpr, SymExpr)>> = pieces
        .iter()
        .map(|p| keep.iter().map(|&d| p[d].clone()).collect())
        .collect();
    // Two dimensions: pieces sharing their range in one (a band; ends compared where
    // the band is not empty) that together span the other whole stand for one piece
    // spanning it (zones along the horizontal in a band of levels).
    // The band then replaces its pieces (fewer `min`s and `max`s to split).
    if shape.len() == 2 {
        for k in 0..2 {
            let j = 1 - k;
            let mut groups: Vec<((SymExpr, SymExpr), Vec<usize>)> = Vec::new();
            for (i, p) in pieces.iter().enumerate() {
                let (lo, hi) = (p[k].0.simplify(), p[k].1.simplify());
                // The same elements: one start, and ends equal where the range is not
                // empty (`max(lo, hi)` the same).
                let same = |g: &(SymExpr, SymExpr)| {
                    let (x, y) = (SymExpr::max(&lo, &g.1), SymExpr::max(&lo, &hi));
                    g.0 == lo && x.provably_le(&y) && y.provably_le(&x)
                };
                match groups.iter_mut().find(|g| same(&g.0)) {
                    Some(g) => g.1.push(i),
                    None => groups.push(((lo, hi), vec![i])),
                }
            }
            let mut merged = Vec::new();
            let mut bands = Vec::new();
            for (band, members) in groups {
                let one: Vec<Vec<_>> = members
                    .iter()
                    .map(|&i| vec![pieces[i][j].clone()])
                    .collect();
                if one.len() > 1 && cover_cases(&flatten(&shape[j..=j], &one), 1, 10) {
                    let mut piece = vec![band.clone(), band];
                    piece[j] = (SymExpr::Int(0), shape[j].clone());
                    bands.push(piece);
                    merged.extend(members);
                }
            }
            pieces = std::mem::take(&mut pieces)
                .into_iter()
                .enumerate()
                .filter(|(i, _)| !merged.contains(i))
                .map(|(_, p)| p)
                .chain(bands)
                .collect();
        }
    }
    let exprs = flatten(&shape, &pieces);
    // The proof is a pure function of its expressions, and the optimizer asks about
    // the same pieces again in each of its rounds: remembered per thread.
    thread_local! {
        static PROVEN: std::cell::RefCell<rustc_hash::FxHashMap<(usize, Vec<SymExpr>), bool>> =
            Default::default();
    }
    let key = (shape.len(), exprs);
    if let Some(known) = PROVEN.with(|m| m.borrow().get(&key).copied()) {
        return known;
    }
    let covered = cover_cases(&key.1, key.0, 10);
    PROVEN.with(|m| {
        let mut m = m.borrow_mut();
        if m.len() >= 4096 {
            m.clear();
        }
        m.insert(key, covered);
    });
    covered
}

/// The shape, then each piece's `lo, hi` per dimension.
fn flatten(shape: &[SymExpr], pieces: &[Vec<(SymExpr, SymExpr)>]) -> Vec<SymExpr> {
    let mut exprs: Vec<SymExpr> = shape.to_vec();
    for p in pieces {
        for (lo, hi) in p {
            exprs.push(lo.clone());
            exprs.push(hi.clone());
        }
    }
    exprs
}

fn cover_cases(exprs: &[SymExpr], rank: usize, budget: u32) -> bool {
    let fixed = exprs.len();
    // At most this many cases in all: a proof that does not close within them fails
    // (a program's pieces then keep their copy) rather than costing seconds.
    let mut cases = CASES;
    cover_split(exprs.to_vec(), fixed, rank, budget, &mut cases)
}

/// The most cases one coverage proof examines.
const CASES: u32 = 512;

/// One case of [`union_covers`]: `exprs` holds the shape and the pieces (the first
/// `fixed`), then facts known in this case (each at least 0: which operand a `min` or
/// `max` took).
fn cover_split(
    exprs: Vec<SymExpr>,
    fixed: usize,
    rank: usize,
    budget: u32,
    cases: &mut u32,
) -> bool {
    if *cases == 0 {
        return false;
    }
    *cases -= 1;
    // Proven without splitting what is left (`min`/`max` as opaque terms): done.
    if cover_linear(&exprs[..fixed], &exprs[fixed..], rank) {
        return true;
    }
    let Some(node) = exprs.iter().find_map(|e| e.first_min_max()).cloned() else {
        return false;
    };
    let SymExpr::Bin(op, a, b) = &node else {
        return false;
    };
    budget > 0
        && [(a, b), (b, a)].iter().all(|(x, y)| {
            // `max(a, b)` is `a` where `a >= b`; `min(a, b)` is `a` where `a <= b`.
            let fact = if *op == crate::symexpr::SymOp::Max {
                x.sub(y)
            } else {
                y.sub(x)
            };
            let mut case: Vec<SymExpr> = exprs.iter().map(|e| e.replace(&node, x)).collect();
            case.push(fact.replace(&node, x));
            cover_split(case, fixed, rank, budget - 1, cases)
        })
}

/// [`union_covers`] with the `min`/`max` left as opaque terms: `exprs` is the shape, then
/// each piece's `lo, hi` per dimension; `facts` are known to be at least 0.
fn cover_linear(exprs: &[SymExpr], facts: &[SymExpr], rank: usize) -> bool {
    let zero = SymExpr::Int(0);
    let facts = crate::symexpr::Facts::new(facts);
    let le = |x: &SymExpr, y: &SymExpr| facts.le(x, y);
    let (shape, rest) = exprs.split_at(rank);
    if shape.iter().any(|n| le(n, &zero)) {
        return true;
    }
    let pieces: Vec<&[SymExpr]> = rest.chunks(2 * rank).collect();
    (0..rank).any(|k| {
        // Pieces spanning every other dimension whole, chained along `k`.
        let mut open: Vec<(&SymExpr, &SymExpr)> = pieces
            .iter()
            .filter(|p| {
                (0..rank)
                    .filter(|&d| d != k)
                    .all(|d| le(&p[2 * d], &zero) && le(&shape[d], &p[2 * d + 1]))
            })
            .map(|p| (&p[2 * k], &p[2 * k + 1]))
            .collect();
        // Covered: `[0, r)` for the largest `r` reached.
        let mut reached = vec![zero.clone()];
        loop {
            let before = open.len();
            open.retain(|(lo, hi)| {
                if reached.iter().any(|r| le(lo, r)) {
                    reached.push((*hi).clone());
                    false
                } else {
                    true
                }
            });
            if reached.iter().any(|r| le(&shape[k], r)) {
                return true;
            }
            if open.len() == before {
                return false;
            }
        }
    })
}

/// What a map body reads from outside and writes to outside, propagated over the map's
/// parameters: the memlets of the map node's in-edges and out-edges, one per container
/// (in name order). A read is an edge leaving a body access node without in-edges;
/// tables of indirect subsets are read whole. Transient scalars and `local` arrays are
/// private to the body.
/// A container written under one write-conflict resolution everywhere keeps it.
pub fn map_boundary(
    arrays: &std::collections::BTreeMap<String, crate::data::DataDesc>,
    body: &crate::dataflow::Dataflow,
    params: &[String],
    ranges: &[Range],
) -> (Vec<crate::memlet::Memlet>, Vec<crate::memlet::Memlet>) {
    map_boundary_memo(arrays, body, params, ranges, &mut BoundaryMemo::default())
}

/// Propagated subsets by the map's parameters and ranges, the subset one iteration
/// accesses and the container's shape (all a propagation depends on): a pass that
/// rebuilds the boundary of a growing fused map, or of many maps over the same ranges,
/// propagates each distinct memlet once.
#[derive(Debug, Default)]
pub struct BoundaryMemo {
    /// By map parameters and ranges: a program has few distinct iteration spaces, so a
    /// short list searched by comparison (no key cloned or hashed per lookup).
    maps: Vec<(Vec<String>, Vec<Range>, PropagatedSubsets)>,
}

/// By shape, then by subset (looked up without cloning either).
type PropagatedSubsets = rustc_hash::FxHashMap<Vec<SymExpr>, rustc_hash::FxHashMap<Subset, Subset>>;

/// [`map_boundary`], remembering propagations in `memo`.
pub fn map_boundary_memo(
    arrays: &(impl crate::data::Descriptors + ?Sized),
    body: &crate::dataflow::Dataflow,
    params: &[String],
    ranges: &[Range],
    memo: &mut BoundaryMemo,
) -> (Vec<crate::memlet::Memlet>, Vec<crate::memlet::Memlet>) {
    use crate::data::DataDesc;
    use crate::memlet::{Memlet, Wcr};
    use std::collections::BTreeMap;
    let at = match memo
        .maps
        .iter()
        .position(|(p, r, _)| p.as_slice() == params && r.as_slice() == ranges)
    {
        Some(k) => k,
        None => {
            // Bounded: a program with very many iteration spaces starts over.
            if memo.maps.len() >= 256 {
                memo.maps.clear();
            }
            memo.maps
                .push((params.to_vec(), ranges.to_vec(), Default::default()));
            memo.maps.len() - 1
        }
    };
    let known = &mut memo.maps[at].2;
    // The parameter boxes only for a subset not seen before.
    let mut boxes: Option<Vec<ParamBox>> = None;
    let shape_of = |d: &str| -> &[SymExpr] { arrays.desc(d).map_or(&[], |a| a.shape()) };
    let local = |d: &str| arrays.desc(d).is_some_and(DataDesc::is_body_local);
    let mut reads: BTreeMap<String, Subset> = BTreeMap::new();
    let mut writes: BTreeMap<String, (Subset, Option<Option<Wcr>>)> = BTreeMap::new();
    let mut propagated = |s: &Subset, shape: &[SymExpr]| -> Subset {
        if let Some(p) = known.get(shape).and_then(|by_subset| by_subset.get(s)) {
            return p.clone();
        }
        let b = boxes.get_or_insert_with(|| ParamBox::of_map(params, ranges));
        let p = propagate(s, b, shape);
        known
            .entry(shape.to_vec())
            .or_default()
            .insert(s.clone(), p.clone());
        p
    };
    let add = |acc: &mut BTreeMap<String, Subset>, data: &str, p: Subset| {
        let shape = shape_of(data);
        match acc.get_mut(data) {
            Some(old) => *old = union(old, &p, shape),
            None => {
                acc.insert(data.to_string(), p);
            }
        }
    };
    for e in body.edge_ids() {
        let (src, dst) = body.endpoints(e);
        let edge = body.edge(e);
        let m = &edge.memlet;
        // A table private to the body (a transient scalar computed per iteration, as
        // GT4Py's dynamic offsets are) is not read from outside.
        for t in m.subset.tables() {
            if !local(t) {
                let p = propagated(&Subset::full(shape_of(t)), shape_of(t));
                add(&mut reads, t, p);
            }
        }
        if let Some(d) = body.node(src).as_access()
            && body.in_degree(src) == 0
            && !local(d)
        {
            let p = propagated(&m.subset, shape_of(d));
            add(&mut reads, d, p);
        }
        if let Some(d) = body.node(dst).as_access()
            && !local(d)
        {
            let sub = m
                .other_subset
                .as_ref()
                .filter(|_| body.node(src).as_access().is_some())
                .unwrap_or(&m.subset);
            let shape = shape_of(d);
            let p = propagated(sub, shape);
            match writes.get_mut(d) {
                Some((old, w)) => {
                    *old = union(old, &p, shape);
                    if *w != Some(m.wcr) {
                        *w = Some(None);
                    }
                }
                None => {
                    writes.insert(d.to_string(), (p, Some(m.wcr)));
                }
            }
        }
    }
    let reads = reads.into_iter().map(|(d, s)| Memlet::new(&d, s)).collect();
    let writes = writes
        .into_iter()
        .map(|(d, (s, w))| Memlet {
            wcr: w.flatten(),
            ..Memlet::new(&d, s)
        })
        .collect();
    (reads, writes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boxes(spec: &[(&str, &str)]) -> Vec<ParamBox> {
        let params: Vec<String> = spec.iter().map(|(p, _)| p.to_string()).collect();
        let ranges: Vec<Range> = spec.iter().map(|(_, r)| Range::parse(r).unwrap()).collect();
        ParamBox::of_map(&params, &ranges)
    }

    #[test]
    fn disjoint_proven_separates_domain_pieces() {
        let sub = |t: &str| Subset::parse(t).unwrap();
        let (a, b) = (sub("s:min(e, n), 0:K"), sub("max(s, n):e, 0:K"));
        assert!(!disjoint(&a, &b), "needs min/max reasoning");
        assert!(disjoint_proven(&a, &b));
        assert!(disjoint_proven(&b, &a));
        assert!(!disjoint_proven(
            &sub("s:n, 0:K"),
            &sub("max(s, n - 1):e, 0:K")
        ));
        assert!(!disjoint_proven(&sub("0:N"), &sub("0:N, 0:K")));
    }

    #[test]
    fn union_covers_chains_pieces_case_by_case() {
        let e = |t: &str| SymExpr::from(t);
        let piece = |h: (&str, &str), k: (&str, &str)| vec![(e(h.0), e(h.1)), (e(k.0), e(k.1))];
        let shape = [e("max(0, he - hs)"), e("max(0, K)")];
        let low = piece(("0", "max(hs, min(he, n)) - hs"), ("0", "max(0, K)"));
        let high = piece(("max(hs, n) - hs", "he - hs"), ("0", "K"));
        // Whatever `n` is (below, inside or above `[hs, he)`), the two zones cover.
        assert!(union_covers(&shape, &[low.clone(), high.clone()]));
        assert!(union_covers(&shape, &[high.clone(), low.clone()]));
        assert!(!union_covers(&shape, std::slice::from_ref(&low)));
        // A gap of one index.
        let gap = piece(("max(hs, n) - hs + 1", "he - hs"), ("0", "K"));
        assert!(!union_covers(&shape, &[low.clone(), gap]));
        // Not spanning the other dimension whole.
        let short = piece(("max(hs, n) - hs", "he - hs"), ("0", "K - 1"));
        assert!(!union_covers(&shape, &[low, short]));
        // An empty container is covered by anything.
        assert!(union_covers(&[e("0"), e("K")], &[]));
        // Zones along the first dimension in a band of the second (its end written two
        // ways), and the levels below and above the band whole.
        let band = |h: (&str, &str)| piece(h, ("1", "min(t, K)"));
        let zones = [
            band(("0", "max(hs, min(he, n)) - hs")),
            piece(("max(hs, n) - hs", "he - hs"), ("1", "max(1, min(t, K))")),
        ];
        let k = [e("max(0, he - hs)"), e("max(0, K)")];
        let level0 = piece(("0", "max(0, he - hs)"), ("0", "min(1, K)"));
        let above = piece(("0", "max(0, he - hs)"), ("max(1, t)", "max(max(1, t), K)"));
        let all = [zones.to_vec(), vec![level0.clone(), above.clone()]].concat();
        assert!(union_covers(&k, &all));
        // Without the upper zone the band has a hole.
        let holed = [vec![zones[0].clone()], vec![level0, above]].concat();
        assert!(!union_covers(&k, &holed));
    }

    #[test]
    fn propagates_offsets_over_the_range() {
        let b = boxes(&[("i", "1:N - 1"), ("j", "1:M - 1")]);
        let shape = vec![SymExpr::from("N"), SymExpr::from("M")];
        let s = propagate(&Subset::parse("i - 1, j + 1").unwrap(), &b, &shape);
        assert_eq!(s.to_string(), "0:N - 2, 2:M");
        let s = propagate(&Subset::parse("2 * i, 3").unwrap(), &b, &shape);
        assert_eq!(s.to_string(), "2:2 * N - 3, 3");
        let s = propagate(&Subset::parse("i * j, tbl[i, 0]").unwrap(), &b, &shape);
        assert_eq!(s.to_string(), "0:N, 0:M");
        let s = propagate(&Subset::parse("N - 1 - i, j").unwrap(), &b, &shape);
        assert_eq!(s.to_string(), "1:N - 1, 1:M - 1");
    }

    #[test]
    fn union_and_covers() {
        let shape = vec![SymExpr::from("N")];
        let u = union(
            &Subset::parse("0:N - 2").unwrap(),
            &Subset::parse("2:N").unwrap(),
            &shape,
        );
        assert_eq!(u.to_string(), "0:N");
        let b = boxes(&[("i", "1:N - 1")]);
        assert_eq!(
            covers(
                &Subset::parse("0:N").unwrap(),
                &Subset::parse("i + 1").unwrap(),
                &b
            ),
            Some(true)
        );
        assert_eq!(
            covers(
                &Subset::parse("1:N").unwrap(),
                &Subset::parse("i - 1").unwrap(),
                &b
            ),
            Some(false)
        );
        assert_eq!(
            covers(
                &Subset::parse("0:M").unwrap(),
                &Subset::parse("i").unwrap(),
                &b
            ),
            None
        );
        assert!(disjoint(
            &Subset::parse("0:2, 0:N").unwrap(),
            &Subset::parse("2:4, 0:N").unwrap()
        ));
        assert!(!disjoint(
            &Subset::parse("0:3").unwrap(),
            &Subset::parse("2:4").unwrap()
        ));
    }
}
