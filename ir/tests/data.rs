//! Containers: the storage an array's extents and strides span.

use std::collections::BTreeMap;

use sdflow_ir::*;

fn array(shape: &[&str], strides: &[&str]) -> Array {
    let p = |s: &&str| SymExpr::parse(s).unwrap();
    Array {
        strides: strides.iter().map(p).collect(),
        ..Array::new(DType::F64, shape.iter().map(p).collect())
    }
}

fn span(a: &Array, env: &[(&str, i64)]) -> Option<i64> {
    let env: BTreeMap<String, i64> = env.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    a.span_by(|e| e.eval_map(&env).ok())
}

#[test]
fn an_array_spans_what_its_strides_reach() {
    // Row-major: the product of the extents.
    assert_eq!(
        span(&array(&["N", "K"], &["K", "1"]), &[("N", 27), ("K", 10)]),
        Some(270)
    );
    // Rows padded to 32 (a field from a padding allocator): 26 · 32 + 9 · 1 + 1.
    assert_eq!(
        span(&array(&["N", "K"], &["32", "1"]), &[("N", 27), ("K", 10)]),
        Some(842)
    );
    // Column-major with a padded leading dimension: 1 + 26 · 1 + 9 · 32.
    assert_eq!(
        span(&array(&["N", "K"], &["1", "32"]), &[("N", 27), ("K", 10)]),
        Some(315)
    );
    // A negative stride reaches as far as a positive one.
    assert_eq!(span(&array(&["N"], &["-2"]), &[("N", 5)]), Some(9));
    // A broadcast (stride 0) still holds the product, and an empty dimension nothing.
    assert_eq!(
        span(&array(&["N", "K"], &["0", "1"]), &[("N", 4), ("K", 3)]),
        Some(12)
    );
    assert_eq!(
        span(&array(&["N", "K"], &["K", "1"]), &[("N", 0), ("K", 3)]),
        Some(0)
    );
    assert_eq!(
        span(&array(&["N", "K"], &["K", "1"]), &[("N", -3), ("K", 3)]),
        Some(0)
    );
    // A symbol without a value, or a count past 2^63: no span.
    assert_eq!(span(&array(&["N", "K"], &["K", "1"]), &[("N", 4)]), None);
    assert_eq!(
        span(
            &array(&["N", "K"], &["1", "N"]),
            &[("N", 1 << 32), ("K", 1 << 32)]
        ),
        None
    );
}
