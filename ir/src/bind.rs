//! Symbol values implied by the arrays passed to a program.
//!
//! A program's argument shapes and strides are symbolic (`N`, `M + 2`, GT4Py's
//! `-__w_Cell_range_0 + __w_Cell_range_1` and `__w_Cell_stride`); the arrays a caller
//! passes have concrete extents and strides. Every dimension is an equation
//! `expression = value`; an equation with one unknown symbol is solved (checked by
//! evaluating it back), which may make others solvable, until nothing changes. An
//! equation whose symbols are all known must hold, or the arguments conflict: the error
//! names both arrays.
//!
//! When nothing more is solvable, a symbol of an argument's shape that is still unknown
//! takes its default ([`crate::Symbol::default`]), if it has one, and solving goes on.
//! Front ends supply defaults for their conventions (the DaCe importer: GT4Py's field
//! origins `__<field>_<Dim>_range_0`, of which an array gives only the difference to
//! `range_1`, start at 0); this module knows none.

use std::collections::BTreeMap;

use crate::symexpr::SymExpr;

/// One array argument: its declared layout and the array passed.
#[derive(Clone, Copy, Debug)]
pub struct ArgLayout<'a> {
    /// The argument's name.
    pub name: &'a str,
    /// Declared extents.
    pub shape: &'a [SymExpr],
    /// Declared strides, in elements (empty: not declared).
    pub strides: &'a [SymExpr],
    /// The extents of the array passed.
    pub extents: &'a [usize],
    /// Its strides in elements (`None`: not known, no stride is inferred).
    pub elem_strides: Option<&'a [isize]>,
}

/// Why arguments do not fit the program.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BindError(pub String);

/// One equation `expr = value`, with where it came from.
struct Equation<'a> {
    expr: &'a SymExpr,
    value: i64,
    array: &'a str,
    what: What,
}

/// What an equation of [`infer_symbols`] equates (described only in messages).
#[derive(Clone, Copy)]
enum What {
    /// An extent of the array passed, in a dimension.
    Extent(usize, usize),
    /// A stride (elements) of the array passed, in a dimension.
    Stride(isize, usize),
}

impl std::fmt::Display for What {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            What::Extent(n, d) => write!(f, "extent {n} in dimension {d}"),
            What::Stride(s, d) => write!(f, "stride {s} in dimension {d}"),
        }
    }
}

/// The error of a runtime symbol without a value (`float`: of a float type), worded
/// the same by every backend: the interpreter's callers ([`check_symbols`]) and the
/// compiled programs' argument check.
pub fn no_value(name: &str, float: bool) -> BindError {
    BindError(if float {
        format!("float symbol '{name}' has no value (give it)")
    } else {
        format!("symbol '{name}' has no value (give it, or pass an array whose shape names it)")
    })
}

/// Checks that every runtime symbol of `sdfg` — one without a static value that its
/// control flow does not set (loop variables, assigned symbols) — has a value: `given`
/// says which names have one. A symbol is a parameter of the program whether or not
/// the program reads it, so a missing one is an error before anything runs, on every
/// backend (the compiled programs check the same in their argument check).
pub fn check_symbols(sdfg: &crate::Sdfg, given: &dyn Fn(&str) -> bool) -> Result<(), BindError> {
    let flow = sdfg.loop_and_assigned_symbols();
    for (name, s) in &sdfg.symbols {
        if s.value.is_none() && !flow.contains(name) && !given(name) {
            return Err(no_value(name, s.dtype.is_float()));
        }
    }
    Ok(())
}

/// C-order (row-major) strides, in elements, of an array of extents `extents`.
pub fn c_strides(extents: &[usize]) -> Vec<isize> {
    let row_major: Vec<usize> = (0..extents.len()).collect();
    dense_strides(extents, &row_major)
}

/// Strides, in elements, of a dense array of extents `extents` whose dimensions are laid
/// out in `order` (slowest first, as [`dense_order`] gives it).
pub fn dense_strides(extents: &[usize], order: &[usize]) -> Vec<isize> {
    let mut out = vec![1isize; extents.len()];
    let mut reach = 1isize;
    for &d in order.iter().rev() {
        out[d] = reach;
        reach = reach.saturating_mul(extents[d].max(1) as isize);
    }
    out
}

/// Checks a layout: in elements, every dimension of extent above 1 has a positive
/// stride, and no two indices reach the same element (sorted by stride, each stride
/// is at least the previous stride times the previous extent). Declared strides describe
/// the memory layout of the array passed; a zero, negative or overlapping one is not a
/// layout sdflow accepts. An array without elements has any layout.
pub fn check_layout(name: &str, extents: &[i64], strides: &[i64]) -> Result<(), BindError> {
    if extents.iter().any(|&n| n <= 0) {
        return Ok(());
    }
    let mut dims: Vec<(i64, i64, usize)> = Vec::new();
    for (d, (&n, &s)) in extents.iter().zip(strides).enumerate() {
        if n <= 1 {
            continue;
        }
        if s <= 0 {
            return Err(BindError(format!(
                "'{name}' has stride {s} in dimension {d}; strides must be positive (in elements)"
            )));
        }
        dims.push((s, n, d));
    }
    dims.sort();
    for w in dims.windows(2) {
        let ((s0, n0, d0), (s1, _, d1)) = (w[0], w[1]);
        if s0.checked_mul(n0).is_none_or(|reach| s1 < reach) {
            return Err(BindError(format!(
                "'{name}' has strides {strides:?} for extents {extents:?}: dimensions {d0} and {d1} overlap (stride {s1} < {s0} * {n0})"
            )));
        }
    }
    Ok(())
}

/// The dense layout that declared strides describe, evaluated with `known`: the order
/// of the dimensions from the slowest to the fastest (row-major `0, 1, …`; column-major
/// `…, 1, 0`). `None` when a stride cannot be evaluated or the strides are not those of
/// a dense layout (padding, say).
pub fn dense_order(
    strides: &[SymExpr],
    extents: &[usize],
    known: &BTreeMap<String, i64>,
) -> Option<Vec<usize>> {
    let st: Vec<i64> = strides
        .iter()
        .map(|e| e.eval_map(known).ok())
        .collect::<Option<_>>()?;
    if st.len() != extents.len() {
        return None;
    }
    let mut order: Vec<usize> = (0..extents.len()).collect();
    // Slowest first; ties (extent-1 dimensions) keep the declared order.
    order.sort_by_key(|&d| std::cmp::Reverse(if extents[d] > 1 { st[d] } else { 0 }));
    let mut expected: i64 = 1;
    for &d in order.iter().rev() {
        if extents[d] > 1 && st[d] != expected {
            return None;
        }
        expected = expected.checked_mul(extents[d].max(1) as i64)?;
    }
    Some(order)
}

/// The dense layout an array passed for declared `strides` is given: the one they
/// describe ([`dense_order`]); else, when their symbols are not all known but the
/// stride of exactly one dimension of extent above 1 is 1 (declared, or a static symbol
/// of `known`: a layout
/// specialized for contiguous arguments, the other strides left to the array),
/// column-major when that is the first dimension and row-major with it moved last
/// otherwise; else `None` (row-major is the callers' default).
pub fn layout_order(
    strides: &[SymExpr],
    extents: &[usize],
    known: &BTreeMap<String, i64>,
) -> Option<Vec<usize>> {
    if let Some(order) = dense_order(strides, extents, known) {
        return Some(order);
    }
    if strides.len() != extents.len() {
        return None;
    }
    let unit: Vec<usize> = (0..extents.len())
        .filter(|&d| extents[d] > 1 && strides[d].eval_map(known).ok() == Some(1))
        .collect();
    match unit.as_slice() {
        [0] if extents.len() > 1 => Some((0..extents.len()).rev().collect()),
        [d] => Some(
            (0..extents.len())
                .filter(|k| k != d)
                .chain(std::iter::once(*d))
                .collect(),
        ),
        _ => None,
    }
}

/// Adds to `known` every symbol value that `args` imply and that `known` does not hold
/// already; `inferable` says which symbols may be inferred (runtime integer symbols),
/// `default` the value an inferable symbol of a shape takes when nothing implies one
/// (for a program, [`Sdfg::symbol_default`](crate::Sdfg::symbol_default)).
/// Errors: two arrays (or an array and a given value) implying different values.
pub fn infer_symbols(
    args: &[ArgLayout<'_>],
    inferable: &dyn Fn(&str) -> bool,
    default: &dyn Fn(&str) -> Option<i64>,
    known: &mut BTreeMap<String, i64>,
) -> Result<(), BindError> {
    let mut eqs = Vec::new();
    for a in args {
        // A scalar may come as any one-element array.
        let scalar = a.shape.is_empty() && a.extents.iter().product::<usize>() == 1;
        if a.shape.len() != a.extents.len() && !scalar {
            return Err(BindError(format!(
                "'{}' has {} dimension(s) (extents {:?}), but the program's has {}",
                a.name,
                a.extents.len(),
                a.extents,
                a.shape.len()
            )));
        }
        for (d, (e, &n)) in a.shape.iter().zip(a.extents).enumerate() {
            eqs.push(Equation {
                expr: e,
                value: n as i64,
                array: a.name,
                what: What::Extent(n, d),
            });
        }
        // An array without elements has no meaningful strides (NumPy and ndarray report
        // 0 for them), and neither has a dimension of extent 1.
        if let Some(st) = a.elem_strides.filter(|_| !a.extents.contains(&0)) {
            for (d, (e, &s)) in a.strides.iter().zip(st).enumerate() {
                if a.extents.get(d).is_some_and(|&n| n > 1) {
                    eqs.push(Equation {
                        expr: e,
                        value: s as i64,
                        array: a.name,
                        what: What::Stride(s, d),
                    });
                }
            }
        }
    }
    let given: Vec<String> = known.keys().cloned().collect();
    let mut origin: BTreeMap<String, String> = BTreeMap::new();
    let mut done = vec![false; eqs.len()];
    let mut defaults_tried = false;
    loop {
        let mut progress = false;
        for (k, eq) in eqs.iter().enumerate() {
            if done[k] {
                continue;
            }
            let unknown: Vec<String> = eq
                .expr
                .free_symbols()
                .into_iter()
                .filter(|s| !known.contains_key(s))
                .collect();
            match unknown.as_slice() {
                [] => {
                    done[k] = true;
                    let v = eq.expr.eval_map(known).map_err(|e| {
                        BindError(format!(
                            "'{}': cannot evaluate '{}': {e}",
                            eq.array, eq.expr
                        ))
                    })?;
                    if v != eq.value {
                        return Err(conflict(eq, v, known, &origin, &given));
                    }
                }
                [x] if inferable(x) => {
                    if let Some(v) = solve(eq.expr, x, eq.value, known) {
                        known.insert(x.clone(), v);
                        origin.insert(x.clone(), format!("'{}' ({})", eq.array, eq.what));
                        done[k] = true;
                        progress = true;
                    }
                }
                _ => {}
            }
        }
        if progress {
            continue;
        }
        // Then the defaults of the shapes' symbols still unknown, once.
        if defaults_tried {
            break;
        }
        defaults_tried = true;
        for a in args {
            for s in a.shape.iter().flat_map(SymExpr::free_symbols) {
                if !inferable(&s) || known.contains_key(&s) {
                    continue;
                }
                if let Some(v) = default(&s) {
                    known.insert(s.clone(), v);
                    origin.insert(s, format!("'{}' (the symbol's default, {v})", a.name));
                    progress = true;
                }
            }
        }
        if !progress {
            break;
        }
    }
    Ok(())
}

/// `x` such that `e(x) = value`, with every other symbol of `e` known: found for `e`
/// linear in `x` (by its values at 0 and 1) and checked by evaluating `e` back.
fn solve(e: &SymExpr, x: &str, value: i64, known: &BTreeMap<String, i64>) -> Option<i64> {
    let at = |v: i64| {
        e.eval(&|s| {
            if s == x {
                Some(v)
            } else {
                known.get(s).copied()
            }
        })
    };
    let f0 = at(0).ok()?;
    let slope = at(1).ok()?.checked_sub(f0)?;
    if slope == 0 {
        return None;
    }
    let diff = value.checked_sub(f0)?;
    if diff.checked_rem(slope)? != 0 {
        return None;
    }
    let v = diff.checked_div(slope)?;
    (at(v).ok()? == value).then_some(v)
}

fn conflict(
    eq: &Equation<'_>,
    got: i64,
    known: &BTreeMap<String, i64>,
    origin: &BTreeMap<String, String>,
    given: &[String],
) -> BindError {
    let syms: Vec<String> = eq
        .expr
        .free_symbols()
        .into_iter()
        .map(|s| {
            let from = origin.get(&s).cloned().unwrap_or_else(|| {
                if given.contains(&s) {
                    "its given value".to_string()
                } else {
                    "the program".to_string()
                }
            });
            format!("{s} = {} from {from}", known.get(&s).copied().unwrap_or(0))
        })
        .collect();
    if syms.is_empty() {
        // A constant: declared so, or a symbol the program was specialized for.
        return BindError(format!(
            "'{}' has {}, but the program takes {got} there (its declared or specialized layout)",
            eq.array, eq.what
        ));
    }
    BindError(format!(
        "'{}' has {}, but the program's '{}' is {got} there ({})",
        eq.array,
        eq.what,
        eq.expr,
        syms.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(t: &str) -> SymExpr {
        SymExpr::parse(t).unwrap()
    }

    #[test]
    fn shapes_and_strides_imply_symbols() {
        let shape = [sym("-__w_Cell_range_0 + __w_Cell_range_1"), sym("NK + 1")];
        let strides = [sym("__w_Cell_stride"), sym("__w_K_stride")];
        let args = [ArgLayout {
            name: "w",
            shape: &shape,
            strides: &strides,
            extents: &[18, 11],
            elem_strides: Some(&[11, 1]),
        }];
        let origin = |s: &str| (s == "__w_Cell_range_0").then_some(0);
        // Without a default, the extent fixes only the difference of the range.
        let mut known = BTreeMap::new();
        infer_symbols(&args, &|_| true, &|_| None, &mut known).unwrap();
        assert!(!known.contains_key("__w_Cell_range_0"));
        assert!(!known.contains_key("__w_Cell_range_1"));
        assert_eq!(known["NK"], 10);
        let mut known = BTreeMap::new();
        infer_symbols(&args, &|_| true, &origin, &mut known).unwrap();
        assert_eq!(known["__w_Cell_range_0"], 0);
        assert_eq!(known["__w_Cell_range_1"], 18);
        assert_eq!(known["NK"], 10);
        assert_eq!(known["__w_Cell_stride"], 11);
        assert_eq!(known["__w_K_stride"], 1);
        // A given origin moves the range instead.
        let mut known = BTreeMap::from([("__w_Cell_range_0".to_string(), 5)]);
        infer_symbols(&args, &|_| true, &origin, &mut known).unwrap();
        assert_eq!(known["__w_Cell_range_1"], 23);
    }

    #[test]
    fn layouts_are_checked_and_recognized() {
        assert_eq!(check_layout("a", &[3, 4], &[4, 1]), Ok(()));
        assert_eq!(check_layout("a", &[3, 4], &[1, 3]), Ok(()));
        assert_eq!(check_layout("a", &[1, 4], &[0, 1]), Ok(()));
        // No elements, no layout: `N x M` at M = 0 has row stride 0.
        assert_eq!(check_layout("a", &[3, 0], &[0, 1]), Ok(()));
        assert_eq!(
            check_layout("a", &[3, 4], &[0, 1]).unwrap_err().0,
            "'a' has stride 0 in dimension 0; strides must be positive (in elements)"
        );
        assert_eq!(
            check_layout("a", &[3, 4], &[-4, 1]).unwrap_err().0,
            "'a' has stride -4 in dimension 0; strides must be positive (in elements)"
        );
        assert_eq!(
            check_layout("a", &[3, 4], &[2, 1]).unwrap_err().0,
            "'a' has strides [2, 1] for extents [3, 4]: dimensions 1 and 0 overlap (stride 2 < 1 * 4)"
        );
        let k = BTreeMap::from([("N".to_string(), 3)]);
        assert_eq!(
            dense_order(&[sym("1"), sym("N")], &[3, 5], &k),
            Some(vec![1, 0])
        );
        assert_eq!(
            dense_order(&[sym("5"), sym("1")], &[3, 5], &k),
            Some(vec![0, 1])
        );
        assert_eq!(dense_order(&[sym("6"), sym("1")], &[3, 5], &k), None);
        assert_eq!(dense_order(&[sym("M"), sym("1")], &[3, 5], &k), None);
        // Strides left to the array, the contiguous dimension declared.
        assert_eq!(
            layout_order(&[sym("1"), sym("M")], &[3, 5], &k),
            Some(vec![1, 0])
        );
        assert_eq!(
            layout_order(&[sym("1"), sym("M"), sym("L")], &[3, 5, 2], &k),
            Some(vec![2, 1, 0])
        );
        assert_eq!(
            layout_order(&[sym("M"), sym("1"), sym("L")], &[3, 5, 2], &k),
            Some(vec![0, 2, 1])
        );
        assert_eq!(
            layout_order(&[sym("1"), sym("N")], &[3, 5], &k),
            Some(vec![1, 0])
        );
        assert_eq!(layout_order(&[sym("M"), sym("L")], &[3, 5], &k), None);
        assert_eq!(layout_order(&[sym("1"), sym("1")], &[3, 5], &k), None);
    }

    #[test]
    fn an_array_of_another_rank_is_named_with_both_ranks() {
        let shape = [sym("N")];
        let strides = [sym("1")];
        let args = [ArgLayout {
            name: "u",
            shape: &shape,
            strides: &strides,
            extents: &[12, 12],
            elem_strides: Some(&[12, 1]),
        }];
        let e = infer_symbols(&args, &|_| true, &|_| None, &mut BTreeMap::new()).unwrap_err();
        assert_eq!(
            e.0,
            "'u' has 2 dimension(s) (extents [12, 12]), but the program's has 1"
        );
        // A scalar passed as a one-element array is no rank mismatch.
        let args = [ArgLayout {
            name: "s",
            shape: &[],
            strides: &[],
            extents: &[1],
            elem_strides: Some(&[1]),
        }];
        assert_eq!(
            infer_symbols(&args, &|_| true, &|_| None, &mut BTreeMap::new()),
            Ok(())
        );
    }

    #[test]
    fn conflicts_name_both_arrays() {
        let (a, b) = ([sym("N")], [sym("N + 1")]);
        let args = [
            ArgLayout {
                name: "a",
                shape: &a,
                strides: &[],
                extents: &[64],
                elem_strides: None,
            },
            ArgLayout {
                name: "b",
                shape: &b,
                strides: &[],
                extents: &[64],
                elem_strides: None,
            },
        ];
        let e = infer_symbols(&args, &|_| true, &|_| None, &mut BTreeMap::new()).unwrap_err();
        assert_eq!(
            e.0,
            "'b' has extent 64 in dimension 0, but the program's 'N + 1' is 65 there (N = 64 from 'a' (extent 64 in dimension 0))"
        );
        // Non-linear or non-integral cases are left unknown rather than guessed.
        let c = [sym("2 * M")];
        let args = [ArgLayout {
            name: "c",
            shape: &c,
            strides: &[],
            extents: &[7],
            elem_strides: None,
        }];
        let mut known = BTreeMap::new();
        infer_symbols(&args, &|_| true, &|_| None, &mut known).unwrap();
        assert!(!known.contains_key("M"));
        // An empty array's strides say nothing: 4 x 0 with strides [0, 0] binds N and M.
        let (shape, strides) = ([sym("N"), sym("M")], [sym("M"), sym("1")]);
        let args = [ArgLayout {
            name: "e",
            shape: &shape,
            strides: &strides,
            extents: &[4, 0],
            elem_strides: Some(&[0, 0]),
        }];
        let mut known = BTreeMap::new();
        infer_symbols(&args, &|_| true, &|_| None, &mut known).unwrap();
        assert_eq!((known["N"], known["M"]), (4, 0));
        assert_eq!(c_strides(&[18, 4, 10]), vec![40, 10, 1]);
        // Extreme values are left unknown, not a panic (i64::MIN / -1 overflows).
        let (shape, strides) = ([sym("2")], [sym("M - S")]);
        let args = [ArgLayout {
            name: "d",
            shape: &shape,
            strides: &strides,
            extents: &[2],
            elem_strides: Some(&[-1]),
        }];
        let mut known = BTreeMap::from([("M".to_string(), i64::MAX)]);
        infer_symbols(&args, &|_| true, &|_| None, &mut known).unwrap();
        assert!(!known.contains_key("S"));
    }
}
