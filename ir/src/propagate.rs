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
