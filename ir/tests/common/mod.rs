//! Programs shared by the integration tests of this crate.

use sdflow_ir::{DType, Sdfg, SdfgBuilder};

/// A 5-point Laplacian of `u` into `out` on the interior of an N×N grid.
pub fn laplace() -> Sdfg {
    let mut b = SdfgBuilder::new("laplace");
    b.symbol("N", DType::I64)
        .array("u", DType::F64, ["N", "N"])
        .array("out", DType::F64, ["N", "N"]);
    b.state("main", |s| {
        s.map("lap", &["i", "j"], &["1:N-1", "1:N-1"], |m| {
            m.tasklet(
                "lap",
                &[
                    ("c", "u[i, j]"),
                    ("n", "u[i-1, j]"),
                    ("s", "u[i+1, j]"),
                    ("w", "u[i, j-1]"),
                    ("e", "u[i, j+1]"),
                ],
                &[("o", "out[i, j]")],
                "o = n + s + w + e - 4.0 * c",
            );
        });
    });
    b.build()
}
