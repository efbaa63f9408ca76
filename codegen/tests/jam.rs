//! Row-jammed producer–consumer pairs (`codegen/src/cpu/emit/jam.rs`): the pair tiled
//! fusion leaves in a tile's body is printed as one column loop per row. Compiled, it
//! equals the interpreter on the unoptimized program bit for bit, for consumers that read
//! the producer's newest row at one column (the loop is `omp simd`) or at several (a
//! skew, no `simd`), rows only above the consumer's, grids smaller than, equal to and
//! larger than a tile and of every small size, and tiles of 4, 5 and 16 rows; and for
//! random sets of read offsets (`PROPTEST_CASES` sets how many).

use std::collections::BTreeMap;

use sdflow_codegen::CpuBackend;
use sdflow_ir::interp::{self, random_bindings};
use sdflow_ir::{Sdfg, Value};
use sdflow_transforms::{MapFusion, Pipeline};

/// `t = 5-point Laplacian of u` on the interior, then `out = u - alpha * Σ t[i+di, j+dj]`
/// over `reads`, on the inner points: a stencil after a stencil.
fn pair(reads: &[(i64, i64)]) -> Sdfg {
    let off = |v: i64| match v {
        0 => String::new(),
        v if v > 0 => format!(" + {v}"),
        v => format!(" - {}", -v),
    };
    let inputs: Vec<String> = (0..reads.len())
        .map(|k| format!("\"t{k}\": \"f64\""))
        .collect();
    let sum: Vec<String> = (0..reads.len()).map(|k| format!("t{k}")).collect();
    let edges: Vec<String> = reads
        .iter()
        .enumerate()
        .map(|(k, (di, dj))| {
            format!(
                "{{ \"src\": 0, \"dst\": 2, \"dst_conn\": \"t{k}\", \"memlet\": \"t[i{}, j{}]\" }}",
                off(*di),
                off(*dj)
            )
        })
        .collect();
    let text = format!(
        r#"{{
  "sdflow_format": 1,
  "name": "pair",
  "symbols": {{ "N": {{ "dtype": "i64" }}, "M": {{ "dtype": "i64" }}, "alpha": {{ "dtype": "f64" }} }},
  "arrays": {{
    "u": {{ "dtype": "f64", "shape": ["N", "M"] }},
    "out": {{ "dtype": "f64", "shape": ["N", "M"] }},
    "t": {{ "dtype": "f64", "shape": ["N", "M"], "transient": true }}
  }},
  "arg_order": ["u", "out", "alpha"],
  "states": [{{
    "name": "s",
    "nodes": [
      {{ "access": "u" }},
      {{ "map": {{ "label": "lap", "params": ["i", "j"], "ranges": ["1:N - 1", "1:M - 1"],
          "nodes": [
            {{ "access": "u" }},
            {{ "tasklet": {{ "name": "l", "inputs": {{ "c": "f64", "e": "f64", "n": "f64", "s": "f64", "w": "f64" }},
                "outputs": {{ "o": "f64" }}, "code": ["o = n + s + w + e - 4.0 * c"] }} }},
            {{ "access": "t" }}
          ],
          "edges": [
            {{ "src": 0, "dst": 1, "dst_conn": "c", "memlet": "u[i, j]" }},
            {{ "src": 0, "dst": 1, "dst_conn": "n", "memlet": "u[i - 1, j]" }},
            {{ "src": 0, "dst": 1, "dst_conn": "s", "memlet": "u[i + 1, j]" }},
            {{ "src": 0, "dst": 1, "dst_conn": "w", "memlet": "u[i, j - 1]" }},
            {{ "src": 0, "dst": 1, "dst_conn": "e", "memlet": "u[i, j + 1]" }},
            {{ "src": 1, "dst": 2, "src_conn": "o", "memlet": "t[i, j]" }}
          ] }} }},
      {{ "access": "t" }},
      {{ "map": {{ "label": "use", "params": ["i", "j"], "ranges": ["2:N - 2", "2:M - 2"],
          "nodes": [
            {{ "access": "t" }},
            {{ "access": "u" }},
            {{ "tasklet": {{ "name": "d", "inputs": {{ {inputs}, "u0": "f64" }},
                "outputs": {{ "o": "f64" }}, "code": ["o = u0 - alpha * ({sum})"] }} }},
            {{ "access": "out" }}
          ],
          "edges": [
            {edges},
            {{ "src": 1, "dst": 2, "dst_conn": "u0", "memlet": "u[i, j]" }},
            {{ "src": 2, "dst": 3, "src_conn": "o", "memlet": "out[i, j]" }}
          ] }} }},
      {{ "access": "out" }}
    ],
    "edges": [
      {{ "src": 0, "dst": 1, "memlet": "u[0:N, 0:M]" }},
      {{ "src": 1, "dst": 2, "memlet": "t[1:N - 1, 1:M - 1]" }},
      {{ "src": 2, "dst": 3, "memlet": "t[1:N - 1, 1:M - 1]" }},
      {{ "src": 0, "dst": 3, "memlet": "u[2:N - 2, 2:M - 2]" }},
      {{ "src": 3, "dst": 4, "memlet": "out[2:N - 2, 2:M - 2]" }}
    ]
  }}],
  "body": {{ "state": 0 }}
}}"#,
        inputs = inputs.join(", "),
        sum = sum.join(" + "),
        edges = edges.join(",\n            "),
    );
    sdflow_ir::format::load(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// `Pipeline::cpu` with tiles of `rows` rows.
fn optimized(s: &Sdfg, rows: i64) -> Sdfg {
    let mut o = s.clone();
    let fusion = MapFusion {
        tile_rows: rows,
        ..MapFusion::default()
    };
    let report = Pipeline::cpu()
        .replace("map_fusion", Box::new(fusion))
        .unwrap()
        .run(&mut o)
        .unwrap();
    assert!(
        report.to_string().contains("maps_fused_tiled=1"),
        "not fused through a tile: {report}"
    );
    o
}

/// Grids smaller than, equal to and larger than a tile, of every small size, and grids
/// with columns for the producer but none for the consumer (`M` = 3, 4).
const SIZES: [(i64, i64); 13] = [
    (0, 0),
    (1, 7),
    (3, 3),
    (4, 5),
    (5, 4),
    (6, 9),
    (17, 6),
    (18, 19),
    (19, 18),
    (37, 23),
    (11, 3),
    (20, 3),
    (9, 4),
];

/// The pair fused through tiles of each of `tiles` rows is printed row-jammed (as a
/// `simd` loop or not) and equals the interpreter on each grid of `sizes`.
fn check(original: &Sdfg, reads: &[(i64, i64)], simd: bool, tiles: &[i64], sizes: &[(i64, i64)]) {
    let backend = CpuBackend {
        cache: None,
        ..CpuBackend::default()
    };
    for &rows in tiles {
        let o = optimized(original, rows);
        let code = backend.generate(&o).unwrap();
        assert!(
            code.contains("row-jammed"),
            "{reads:?}, {rows} rows:\n{code}"
        );
        assert_eq!(
            code.contains("#pragma omp simd"),
            simd,
            "{reads:?}, {rows} rows"
        );
        let prog = backend.build(&o).unwrap();
        prog.set_threads(2);
        for &(n, m) in sizes {
            let syms: BTreeMap<String, Value> = [
                ("N".to_string(), Value::I64(n)),
                ("M".to_string(), Value::I64(m)),
                ("alpha".to_string(), Value::F64(0.375)),
            ]
            .into();
            let inputs = random_bindings(original, &syms, (n * 100 + m) as u64).unwrap();
            let mut expected = inputs.clone();
            interp::run(original, &mut expected).unwrap();
            let mut got = inputs.clone();
            prog.run_bindings(&mut got).unwrap();
            assert_eq!(
                expected.arrays["out"].bits(),
                got.arrays["out"].bits(),
                "{reads:?}, {rows}-row tiles, N = {n}, M = {m}"
            );
        }
    }
}

/// The hyperdiffusion's shape: the newest row read at the consumer's own column.
#[test]
fn newest_row_at_one_column_is_a_simd_loop() {
    let reads = [(0, 0), (-1, 0), (1, 0), (0, -1), (0, 1)];
    check(&pair(&reads), &reads, true, &[4, 5, 16], &SIZES);
}

/// The newest row read at three columns: the producer runs one column ahead, no `simd`.
#[test]
fn newest_row_at_several_columns_is_skewed() {
    let reads = [(1, -1), (1, 0), (1, 1), (0, 0), (-1, 1)];
    check(&pair(&reads), &reads, false, &[4, 5, 16], &SIZES);
}

/// Rows at and above the consumer's only: the newest row is the consumer's own.
#[test]
fn rows_above_only() {
    let reads = [(0, 0), (-1, -1), (-1, 1), (0, 1)];
    check(&pair(&reads), &reads, false, &[4, 5, 16], &SIZES);
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(12, |n: u32| n.min(64))
}

use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// Any two to six distinct offsets within one point of the consumer's: jammed, a
    /// `simd` loop exactly when the newest row is read at one column, and bit for bit.
    #[test]
    fn random_read_offsets(
        reads in prop::collection::btree_set((-1i64..=1, -1i64..=1), 2..=6),
        rows in prop::sample::select(vec![4i64, 5, 16]),
        n in 0i64..24,
        m in 0i64..24,
    ) {
        let reads: Vec<(i64, i64)> = reads.into_iter().collect();
        let dmax = reads.iter().map(|r| r.0).max().unwrap();
        let simd = reads.iter().filter(|r| r.0 == dmax).count() == 1;
        // Also a grid with one column of the producer's and none of the consumer's.
        check(&pair(&reads), &reads, simd, &[rows], &[(n, m), (19, 21), (n.max(5), 3)]);
    }
}
