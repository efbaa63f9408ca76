//! Bitwise comparison of two runs' results: what every equivalence test asserts.

use std::collections::BTreeMap;

use crate::dtype::Value;
use crate::interp::{self, Bindings};
use crate::sdfg::Sdfg;

/// The first argument of `sdfg` whose values differ bit for bit between two runs
/// (floats by their IEEE bits, so `-0.0` against `0.0` differs and NaNs compare),
/// described by name, first differing element (row-major index) and both values; `None`
/// when every argument agrees.
pub fn first_difference(sdfg: &Sdfg, expected: &Bindings, got: &Bindings) -> Option<String> {
    for (name, _) in sdfg.non_transients() {
        let (Some(e), Some(g)) = (expected.arrays.get(name), got.arrays.get(name)) else {
            match (
                expected.arrays.contains_key(name),
                got.arrays.contains_key(name),
            ) {
                (true, false) => return Some(format!("'{name}' is missing from the second run")),
                (false, true) => return Some(format!("'{name}' is missing from the first run")),
                _ => continue,
            }
        };
        if e.shape() != g.shape() {
            return Some(format!(
                "'{name}' has shape {:?} against {:?}",
                e.shape(),
                g.shape()
            ));
        }
        let (eb, gb) = (e.bits(), g.bits());
        if let Some(i) = eb.iter().zip(&gb).position(|(x, y)| x != y) {
            let (ev, gv) = (e.values()[i], g.values()[i]);
            return Some(format!(
                "'{name}' differs at element {i} of {}: {ev:?} ({:#x}) against {gv:?} ({:#x})",
                eb.len(),
                eb[i],
                gb[i]
            ));
        }
    }
    None
}

/// Panics, prefixed by `what`, where [`first_difference`] finds one.
#[track_caller]
pub fn assert_same_arguments(sdfg: &Sdfg, expected: &Bindings, got: &Bindings, what: &str) {
    if let Some(d) = first_difference(sdfg, expected, got) {
        panic!("{what}: {d}");
    }
}

/// Runs `a` and `b` on the interpreter with the same pseudo-random arguments for the
/// symbol values `symbols` (made from `seed` for `a`); both must succeed, and every
/// argument must be bitwise equal afterwards.
#[track_caller]
pub fn assert_same_results(a: &Sdfg, b: &Sdfg, symbols: &BTreeMap<String, Value>, seed: u64) {
    let inputs = interp::random_bindings(a, symbols, seed)
        .unwrap_or_else(|e| panic!("'{}' at {symbols:?}: no inputs: {e}", a.name));
    let run = |s: &Sdfg| {
        let mut x = inputs.clone();
        interp::run(s, &mut x).unwrap_or_else(|e| panic!("'{}' at {symbols:?}: {e}", s.name));
        x
    };
    let (x, y) = (run(a), run(b));
    assert_same_arguments(a, &x, &y, &format!("'{}' at {symbols:?}", a.name));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::HostArray;
    use crate::{DType, SdfgBuilder};

    fn program() -> Sdfg {
        let mut b = SdfgBuilder::new("p");
        b.array("a", DType::F64, [3]).array("b", DType::F64, [3]);
        b.build()
    }

    fn bindings(a: &[f64]) -> Bindings {
        let mut x = Bindings::default();
        x.arrays.insert(
            "a".into(),
            HostArray::F64(ndarray::ArrayD::from_shape_vec(vec![a.len()], a.to_vec()).unwrap()),
        );
        x
    }

    #[test]
    fn the_first_differing_bit_pattern_is_named() {
        let p = program();
        assert_eq!(
            first_difference(&p, &bindings(&[1.0, 0.0, 2.0]), &bindings(&[1.0, 0.0, 2.0])),
            None
        );
        assert_eq!(
            first_difference(
                &p,
                &bindings(&[1.0, 0.0, 2.0]),
                &bindings(&[1.0, -0.0, 3.0])
            )
            .unwrap(),
            "'a' differs at element 1 of 3: F64(0.0) (0x0) against F64(-0.0) (0x8000000000000000)"
        );
        assert_eq!(
            first_difference(&p, &bindings(&[1.0, 2.0]), &bindings(&[1.0, 2.0, 3.0])).unwrap(),
            "'a' has shape [2] against [3]"
        );
        assert_eq!(
            first_difference(&p, &bindings(&[1.0]), &Bindings::default()).unwrap(),
            "'a' is missing from the second run"
        );
    }
}
