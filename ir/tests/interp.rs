//! Reference-interpreter tests with hand-computed expected values.

use std::collections::BTreeMap;

use sdflow_ir::interp::{Bindings, HostArray, InterpError, random_bindings, run};
use sdflow_ir::{Block, DType, Sdfg, SdfgBuilder, Value, Wcr};

mod common;
use common::laplace;

fn f64s(shape: &[usize], v: Vec<f64>) -> HostArray {
    HostArray::from_f64(shape, v).expect("shape matches")
}

fn zeros(shape: &[usize]) -> HostArray {
    HostArray::zeros(DType::F64, shape)
}

fn syms(pairs: &[(&str, i64)]) -> BTreeMap<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Value::I64(*v)))
        .collect()
}

fn bindings(arrays: Vec<(&str, HostArray)>, symbols: &[(&str, i64)]) -> Bindings {
    Bindings {
        arrays: arrays
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        symbols: syms(symbols),
    }
}

#[test]
fn laplacian_of_a_quadratic_is_constant() {
    let n = 6;
    let u: Vec<f64> = (0..n * n)
        .map(|k| {
            let (i, j) = ((k / n) as f64, (k % n) as f64);
            i * i + 2.0 * j * j
        })
        .collect();
    let mut b = bindings(
        vec![("u", f64s(&[n, n], u)), ("out", zeros(&[n, n]))],
        &[("N", n as i64)],
    );
    run(&laplace(), &mut b).unwrap();
    let out = b.arrays["out"].to_f64_vec();
    for i in 0..n {
        for j in 0..n {
            let interior = (1..n - 1).contains(&i) && (1..n - 1).contains(&j);
            let want = if interior { 6.0 } else { 0.0 };
            assert_eq!(out[i * n + j], want, "at ({i}, {j})");
        }
    }
}

#[test]
fn laplacian_of_random_input_matches_a_loop() {
    let n = 7;
    let sdfg = laplace();
    let mut b = random_bindings(&sdfg, &syms(&[("N", n as i64)]), 42).unwrap();
    let u = b.arrays["u"].to_f64_vec();
    assert!(u.iter().all(|x| (-1.0..1.0).contains(x)));
    assert_eq!(
        b,
        random_bindings(&sdfg, &syms(&[("N", n as i64)]), 42).unwrap()
    );
    let before = b.arrays["out"].to_f64_vec();
    run(&sdfg, &mut b).unwrap();
    let out = b.arrays["out"].to_f64_vec();
    for i in 0..n {
        for j in 0..n {
            let k = i * n + j;
            let want = if (1..n - 1).contains(&i) && (1..n - 1).contains(&j) {
                u[k - n] + u[k + n] + u[k - 1] + u[k + 1] - 4.0 * u[k]
            } else {
                before[k]
            };
            assert_eq!(out[k], want);
        }
    }
}

/// Thomas algorithm: forward sweep as a sequential map over k inside a map over columns,
/// backward substitution as a loop over states.
fn thomas() -> Sdfg {
    let mut b = SdfgBuilder::new("thomas");
    b.symbol("NI", DType::I64).symbol("NK", DType::I64);
    for a in ["a", "b", "c", "d", "x"] {
        b.array(a, DType::F64, ["NI", "NK"]);
    }
    b.transient("cp", DType::F64, ["NI", "NK"])
        .transient("dp", DType::F64, ["NI", "NK"]);
    let fwd = b.state("forward", |s| {
        s.map("col", &["i"], &["0:NI"], |m| {
            m.tasklet(
                "first",
                &[("bb", "b[i, 0]"), ("cc", "c[i, 0]"), ("dd", "d[i, 0]")],
                &[("ocp", "cp[i, 0]"), ("odp", "dp[i, 0]")],
                "ocp = cc / bb; odp = dd / bb",
            );
            m.map_scheduled(
                "sweep",
                &["k"],
                &["1:NK"],
                sdflow_ir::Schedule::Sequential,
                |m| {
                    m.tasklet(
                        "step",
                        &[
                            ("aa", "a[i, k]"),
                            ("bb", "b[i, k]"),
                            ("cc", "c[i, k]"),
                            ("dd", "d[i, k]"),
                            ("cprev", "cp[i, k-1]"),
                            ("dprev", "dp[i, k-1]"),
                        ],
                        &[("ocp", "cp[i, k]"), ("odp", "dp[i, k]")],
                        "den = bb - aa * cprev; ocp = cc / den; odp = (dd - aa * dprev) / den",
                    );
                },
            );
        });
    });
    let last = b.state("last", |s| {
        s.map("col", &["i"], &["0:NI"], |m| {
            m.tasklet(
                "last",
                &[("v", "dp[i, NK-1]")],
                &[("o", "x[i, NK-1]")],
                "o = v",
            );
        });
    });
    let back = b.state("back", |s| {
        s.map("col", &["i"], &["0:NI"], |m| {
            m.tasklet(
                "subst",
                &[("v", "dp[i, k]"), ("w", "cp[i, k]"), ("nx", "x[i, k+1]")],
                &[("o", "x[i, k]")],
                "o = v - w * nx",
            );
        });
    });
    b.body(Block::seq([
        Block::State(fwd),
        Block::State(last),
        Block::for_loop("k", "NK - 2", "k >= 0", "k - 1", Block::State(back)),
    ]));
    b.build()
}

#[test]
fn thomas_solves_tridiagonal_systems() {
    let (ni, nk) = (3usize, 8usize);
    let sdfg = thomas();
    let mut b = random_bindings(&sdfg, &syms(&[("NI", ni as i64), ("NK", nk as i64)]), 7).unwrap();
    // Make the systems diagonally dominant: b in [3, 5).
    let bdiag: Vec<f64> = b.arrays["b"].to_f64_vec().iter().map(|v| v + 4.0).collect();
    b.arrays.insert("b".into(), f64s(&[ni, nk], bdiag));
    let g = |n: &str| b.arrays[n].to_f64_vec();
    let (a, bd, c, d) = (g("a"), g("b"), g("c"), g("d"));
    run(&sdfg, &mut b).unwrap();
    let x = b.arrays["x"].to_f64_vec();
    for i in 0..ni {
        let r = |k: usize| i * nk + k;
        // Independent solution: dense Gaussian elimination with partial pivoting.
        let mut m = vec![vec![0.0; nk + 1]; nk];
        for k in 0..nk {
            m[k][k] = bd[r(k)];
            if k > 0 {
                m[k][k - 1] = a[r(k)];
            }
            if k + 1 < nk {
                m[k][k + 1] = c[r(k)];
            }
            m[k][nk] = d[r(k)];
        }
        for p in 0..nk {
            let piv = (p..nk)
                .max_by(|&u, &v| m[u][p].abs().total_cmp(&m[v][p].abs()))
                .unwrap();
            m.swap(p, piv);
            let pivot_row = m[p].clone();
            for row in m.iter_mut().skip(p + 1) {
                let f = row[p] / pivot_row[p];
                for (x, y) in row.iter_mut().zip(&pivot_row).skip(p) {
                    *x -= f * y;
                }
            }
        }
        let mut sol = vec![0.0; nk];
        for p in (0..nk).rev() {
            let s: f64 = (p + 1..nk).map(|q| m[p][q] * sol[q]).sum();
            sol[p] = (m[p][nk] - s) / m[p][p];
        }
        for k in 0..nk {
            assert!((x[r(k)] - sol[k]).abs() < 1e-12, "column {i}, k={k}");
            let mut ax = bd[r(k)] * x[r(k)];
            if k > 0 {
                ax += a[r(k)] * x[r(k - 1)];
            }
            if k + 1 < nk {
                ax += c[r(k)] * x[r(k + 1)];
            }
            assert!(
                (ax - d[r(k)]).abs() < 1e-12,
                "residual at column {i}, k={k}"
            );
        }
    }
}

#[test]
fn write_conflict_resolution_and_reduce() {
    let mut b = SdfgBuilder::new("reductions");
    b.symbol("N", DType::I64)
        .array("a", DType::F64, ["N"])
        .array("s", DType::F64, [1])
        .array("mn", DType::F64, [1])
        .array("mx", DType::F64, [1])
        .array("m", DType::F64, [3, 4])
        .array("rows", DType::F64, [3])
        .array("top", DType::F64, [1])
        .array("cols", DType::F64, [4]);
    b.state("wcr", |s| {
        s.map("acc", &["i"], &["0:N"], |m| {
            m.tasklet(
                "acc",
                &[("x", "a[i]")],
                &[
                    ("o", "s[0] (wcr: sum)"),
                    ("lo", "mn[0] (wcr: min)"),
                    ("hi", "mx[0] (wcr: max)"),
                ],
                "o = x; lo = x; hi = x",
            );
        });
    });
    b.state("lib", |s| {
        s.reduce(Wcr::Sum, Some(vec![1]), None, "m[0:3, 0:4]", "rows[0:3]");
        s.reduce(
            Wcr::Max,
            None,
            Some(Value::F64(100.0)),
            "m[0:3, 0:4]",
            "top[0]",
        );
        s.reduce(
            Wcr::Prod,
            Some(vec![0]),
            Some(Value::F64(1.0)),
            "m",
            "cols (wcr: sum)",
        );
    });
    let sdfg = b.build();
    let av = vec![3.0, -1.5, 7.0, 0.25, 2.0];
    let mv: Vec<f64> = (0..12).map(|k| k as f64).collect();
    let mut bi = bindings(
        vec![
            ("a", f64s(&[5], av)),
            ("s", f64s(&[1], vec![10.0])),
            ("mn", f64s(&[1], vec![1e300])),
            ("mx", f64s(&[1], vec![-1e300])),
            ("m", f64s(&[3, 4], mv)),
            ("rows", zeros(&[3])),
            ("top", zeros(&[1])),
            ("cols", f64s(&[4], vec![1.0; 4])),
        ],
        &[("N", 5)],
    );
    run(&sdfg, &mut bi).unwrap();
    let g = |n: &str| bi.arrays[n].to_f64_vec();
    assert_eq!(g("s"), vec![10.0 + 10.75]);
    assert_eq!(g("mn"), vec![-1.5]);
    assert_eq!(g("mx"), vec![7.0]);
    assert_eq!(g("rows"), vec![6.0, 22.0, 38.0]);
    assert_eq!(g("top"), vec![100.0]);
    // Column products 0*4*8, 1*5*9, 2*6*10, 3*7*11, added to 1.
    assert_eq!(g("cols"), vec![1.0, 46.0, 121.0, 232.0]);
}

fn gather() -> Sdfg {
    let mut b = SdfgBuilder::new("gather");
    b.symbol("NC", DType::I64)
        .symbol("NE", DType::I64)
        .array("c", DType::F64, ["NC"])
        .array("e2c", DType::I64, ["NE", "2"])
        .array("out", DType::F64, ["NE"]);
    b.state("edges", |s| {
        s.map("edge", &["e"], &["0:NE"], |m| {
            m.tasklet(
                "gather",
                &[("a", "c[e2c[e, 0]]"), ("b", "c[e2c[e, 1]]")],
                &[("o", "out[e]")],
                "o = a + b",
            );
        });
    });
    b.build()
}

#[test]
fn neighbour_table_gather() {
    let sdfg = gather();
    let table =
        HostArray::from_values(DType::I64, &[3, 2], &[0, 1, 1, 2, 3, 0].map(Value::I64)).unwrap();
    let mut b = bindings(
        vec![
            ("c", f64s(&[4], vec![1.0, 10.0, 100.0, 1000.0])),
            ("e2c", table.clone()),
            ("out", zeros(&[3])),
        ],
        &[("NC", 4), ("NE", 3)],
    );
    run(&sdfg, &mut b).unwrap();
    assert_eq!(b.arrays["out"].to_f64_vec(), vec![11.0, 110.0, 1001.0]);

    // Random bindings fill the table with valid cell indices.
    let s = syms(&[("NC", 5), ("NE", 40)]);
    let mut rb = random_bindings(&sdfg, &s, 3).unwrap();
    let t = rb.arrays["e2c"].values();
    assert!(t.iter().all(|v| (0..5).contains(&v.as_i64())));
    run(&sdfg, &mut rb).unwrap();

    // An out-of-bounds index through the table is an error naming data, index and node.
    let bad =
        HostArray::from_values(DType::I64, &[3, 2], &[0, 1, 1, 7, 3, 0].map(Value::I64)).unwrap();
    b.arrays.insert("e2c".into(), bad);
    let e = run(&sdfg, &mut b).unwrap_err().to_string();
    assert!(
        e.contains("index 7 out of bounds for dimension 0 of 'c'"),
        "{e}"
    );
    assert!(e.contains("tasklet 'gather'"), "{e}");
    assert!(e.contains("state 'edges'"), "{e}");
    assert!(e.contains("e=1"), "{e}");
}

#[test]
fn loop_with_if_on_parity_and_assignments() {
    let mut b = SdfgBuilder::new("steps");
    b.array("x", DType::F64, [1]).array("pq", DType::I64, [2]);
    let even = b.state("even", |s| {
        s.tasklet("add", &[("a", "x[0]")], &[("o", "x[0]")], "o = a + t");
    });
    let odd = b.state("odd", |s| {
        s.tasklet("dbl", &[("a", "x[0]")], &[("o", "x[0]")], "o = a * 2.0");
    });
    let store = b.state("store", |s| {
        s.tasklet("st", &[], &[("o", "pq[0]"), ("w", "pq[1]")], "o = p; w = q");
    });
    b.body(Block::seq([
        Block::for_loop(
            "t",
            0,
            "t < 5",
            "t + 1",
            Block::if_else("t % 2 == 0", Block::State(even), Block::State(odd)),
        ),
        Block::Assign(vec![("p".into(), "1".into()), ("q".into(), "2".into())]),
        Block::Assign(vec![("p".into(), "q".into()), ("q".into(), "p".into())]),
        Block::State(store),
    ]));
    let sdfg = b.build();
    let mut bi = bindings(
        vec![
            ("x", f64s(&[1], vec![1.0])),
            ("pq", HostArray::zeros(DType::I64, &[2])),
        ],
        &[],
    );
    run(&sdfg, &mut bi).unwrap();
    // t=0: 1+0, t=1: *2, t=2: +2, t=3: *2, t=4: +4.
    assert_eq!(bi.arrays["x"].to_f64_vec(), vec![12.0]);
    assert_eq!(bi.arrays["pq"].values(), vec![Value::I64(2), Value::I64(1)]);
}

#[test]
fn nested_sdfg_with_symbol_mapping_and_subsets() {
    let mut inner = SdfgBuilder::new("scale");
    inner
        .symbol("M", DType::I64)
        .symbol("alpha", DType::F64)
        .array("x", DType::F64, ["M"])
        .array("y", DType::F64, ["M"]);
    inner.state("body", |s| {
        s.map("j", &["j"], &["0:M"], |m| {
            m.tasklet(
                "sc",
                &[("v", "x[j]")],
                &[("o", "y[j]")],
                "o = alpha * v + M",
            );
        });
    });
    let inner = inner.build();
    let mut b = SdfgBuilder::new("outer");
    b.symbol("N", DType::I64)
        .symbol("dt", DType::F64)
        .array("u", DType::F64, ["N"])
        .array("v", DType::F64, ["N + 2"]);
    b.state("call", |s| {
        s.nested(
            inner,
            // A float parameter passes through from a caller symbol of its type.
            &[("M", "N - 2"), ("alpha", "dt")],
            &[("x", "u[1:N-1]")],
            &[("y", "v[2:N]")],
        );
    });
    let sdfg = b.build();
    assert_eq!(sdfg.validate(), Ok(()));
    let mut bi = bindings(
        vec![
            ("u", f64s(&[5], vec![1.0, 2.0, 3.0, 4.0, 5.0])),
            ("v", f64s(&[7], vec![-1.0; 7])),
        ],
        &[("N", 5)],
    );
    bi.symbols.insert("dt".into(), Value::F64(0.5));
    run(&sdfg, &mut bi).unwrap();
    // M = 3: v[2..5] = 0.5 * u[1..4] + 3; the rest untouched.
    assert_eq!(
        bi.arrays["v"].to_f64_vec(),
        vec![-1.0, -1.0, 4.0, 4.5, 5.0, -1.0, -1.0]
    );
}

#[test]
fn mixed_dtypes() {
    let mut b = SdfgBuilder::new("types");
    b.array("a", DType::F32, [4])
        .array("k", DType::I32, [4])
        .array("m", DType::Bool, [4])
        .array("r", DType::F32, [4])
        .array("q", DType::I32, [4])
        .array("w", DType::I64, [4])
        .array("z", DType::Bool, [4]);
    b.state("main", |s| {
        s.map("i", &["i"], &["0:4"], |m| {
            m.tasklet(
                "t",
                &[("x", "a[i]"), ("n", "k[i]"), ("f", "m[i]")],
                &[
                    ("orr", "r[i]"),
                    ("oq", "q[i]"),
                    ("ow", "w[i]"),
                    ("oz", "z[i]"),
                ],
                "orr = select(f, x * 3.0f32, -x); oq = n // 2 + n % 3 + n / 2; \
                 ow = i64(n) * 3000000000; oz = !f && n > 0",
            );
        });
    });
    let sdfg = b.build();
    let f32s = [0.1f32, -2.5, 1.0e-3, 7.0];
    let mut bi = bindings(
        vec![
            (
                "a",
                HostArray::from_values(DType::F32, &[4], &f32s.map(Value::F32)).unwrap(),
            ),
            (
                "k",
                HostArray::from_values(DType::I32, &[4], &[-7, 7, 0, 5].map(Value::I32)).unwrap(),
            ),
            (
                "m",
                HostArray::from_values(
                    DType::Bool,
                    &[4],
                    &[true, false, true, false].map(Value::Bool),
                )
                .unwrap(),
            ),
            ("r", HostArray::zeros(DType::F32, &[4])),
            ("q", HostArray::zeros(DType::I32, &[4])),
            ("w", HostArray::zeros(DType::I64, &[4])),
            ("z", HostArray::zeros(DType::Bool, &[4])),
        ],
        &[],
    );
    run(&sdfg, &mut bi).unwrap();
    assert_eq!(
        bi.arrays["r"].values(),
        vec![
            Value::F32(0.1f32 * 3.0f32),
            Value::F32(2.5),
            Value::F32(1.0e-3f32 * 3.0f32),
            Value::F32(-7.0)
        ]
    );
    // -7 // 2 = -4, -7 % 3 = 2, -7 / 2 = -3; 7 → 3 + 1 + 3; 0 → 0; 5 → 2 + 2 + 2.
    assert_eq!(
        bi.arrays["q"].values(),
        [-5, 7, 0, 6].map(Value::I32).to_vec()
    );
    assert_eq!(
        bi.arrays["w"].values(),
        [-21_000_000_000i64, 21_000_000_000, 0, 15_000_000_000]
            .map(Value::I64)
            .to_vec()
    );
    assert_eq!(
        bi.arrays["z"].values(),
        [false, true, false, true].map(Value::Bool).to_vec()
    );
}

#[test]
fn copies_with_other_subset() {
    let mut b = SdfgBuilder::new("copies");
    b.array("a", DType::F64, [5])
        .array("bb", DType::F64, [6])
        .array("m", DType::F64, [3, 3])
        .array("v", DType::F64, [4])
        .array("acc", DType::F64, [2]);
    b.state("copy", |s| {
        s.copy("a[0:3]", "bb[2:5]");
        s.copy("m[1:3, 0:2]", "v[0:4]");
        s.copy("a[0:5:2]", "m[0, 0:3]");
        s.copy("a[3:5]", "acc[0:2] (wcr: sum)");
    });
    let sdfg = b.build();
    let mut bi = bindings(
        vec![
            ("a", f64s(&[5], vec![1.0, 2.0, 3.0, 4.0, 5.0])),
            ("bb", zeros(&[6])),
            ("m", f64s(&[3, 3], (0..9).map(|k| k as f64).collect())),
            ("v", zeros(&[4])),
            ("acc", f64s(&[2], vec![10.0, 20.0])),
        ],
        &[],
    );
    run(&sdfg, &mut bi).unwrap();
    let g = |n: &str| bi.arrays[n].to_f64_vec();
    assert_eq!(g("bb"), vec![0.0, 0.0, 1.0, 2.0, 3.0, 0.0]);
    assert_eq!(g("v"), vec![3.0, 4.0, 6.0, 7.0]);
    assert_eq!(g("acc"), vec![14.0, 25.0]);
    // The m → v copy reads m before or after the a → m copy, as the graph orders them;
    // the first row of m is then a[0], a[2], a[4].
    assert_eq!(&g("m")[0..3], &[1.0, 3.0, 5.0]);
}

#[test]
fn argument_errors() {
    let sdfg = laplace();
    // Missing argument.
    let mut b = bindings(vec![("u", zeros(&[4, 4]))], &[("N", 4)]);
    let e = run(&sdfg, &mut b).unwrap_err();
    assert_eq!(e, InterpError::MissingArgument("out".into()));
    assert_eq!(e.to_string(), "missing argument 'out'");
    assert!(b.arrays.contains_key("u"), "arguments stay in the bindings");
    // Shape mismatch.
    let mut b = bindings(
        vec![("u", zeros(&[4, 4])), ("out", zeros(&[4, 5]))],
        &[("N", 4)],
    );
    let e = run(&sdfg, &mut b).unwrap_err().to_string();
    assert!(e.contains("'out'") && e.contains("shape [4, 5]"), "{e}");
    // Dtype mismatch.
    let mut b = bindings(
        vec![
            ("u", HostArray::zeros(DType::F32, &[4, 4])),
            ("out", zeros(&[4, 4])),
        ],
        &[("N", 4)],
    );
    let e = run(&sdfg, &mut b).unwrap_err().to_string();
    assert!(e.contains("'u'") && e.contains("f32"), "{e}");
    // Unbound symbol.
    let mut b = bindings(vec![("u", zeros(&[4, 4])), ("out", zeros(&[4, 4]))], &[]);
    let e = run(&sdfg, &mut b).unwrap_err().to_string();
    assert!(e.contains("symbol 'N' has no value"), "{e}");
}

#[test]
fn integer_division_by_zero_is_an_error() {
    let mut b = SdfgBuilder::new("div");
    b.array("a", DType::I64, [3]).array("o", DType::I64, [3]);
    b.state("main", |s| {
        s.map("m", &["i"], &["0:3"], |m| {
            m.tasklet("div", &[("x", "a[i]")], &[("y", "o[i]")], "y = 10 // x");
        });
    });
    let sdfg = b.build();
    let a = HostArray::from_values(DType::I64, &[3], &[1, 2, 0].map(Value::I64)).unwrap();
    let mut bi = bindings(
        vec![("a", a), ("o", HostArray::zeros(DType::I64, &[3]))],
        &[],
    );
    let e = run(&sdfg, &mut bi).unwrap_err().to_string();
    assert!(e.contains("division by zero"), "{e}");
    assert!(e.contains("tasklet 'div'") && e.contains("i=2"), "{e}");
    assert_eq!(bi.arrays["o"].values(), [10, 5, 0].map(Value::I64).to_vec());
}

#[test]
fn transients_are_reset_each_run_and_scalars_drive_control_flow() {
    let mut b = SdfgBuilder::new("scalars");
    b.scalar("flag", DType::I32)
        .array("x", DType::F64, [1])
        .transient("tmp", DType::F64, [1]);
    let inc = b.state("inc", |s| {
        s.tasklet("inc", &[("a", "tmp[0]")], &[("o", "tmp[0]")], "o = a + 1.0");
        s.copy("tmp[0]", "x[0]");
    });
    b.body(Block::if_else(
        "flag > 0",
        Block::State(inc),
        Block::empty(),
    ));
    let sdfg = b.build();
    let mut bi = bindings(vec![("x", zeros(&[1]))], &[]);
    bi.arrays
        .insert("flag".into(), HostArray::scalar(Value::I32(1)));
    run(&sdfg, &mut bi).unwrap();
    run(&sdfg, &mut bi).unwrap();
    assert_eq!(bi.arrays["x"].to_f64_vec(), vec![1.0]);
    assert!(!bi.arrays.contains_key("tmp"));
    bi.arrays
        .insert("flag".into(), HostArray::scalar(Value::I32(0)));
    bi.arrays.insert("x".into(), zeros(&[1]));
    run(&sdfg, &mut bi).unwrap();
    assert_eq!(bi.arrays["x"].to_f64_vec(), vec![0.0]);
}

#[test]
fn huge_shapes_and_ranges_are_errors_not_aborts() {
    let sdfg = laplace();
    let mut b = Bindings::default();
    b.symbols.insert("N".into(), Value::I64(10_000_000));
    let e = random_bindings(&sdfg, &b.symbols, 0).unwrap_err();
    assert!(
        e.to_string().contains("more than 1073741824 elements"),
        "{e}"
    );
    b.symbols.insert("N".into(), Value::I64(4_000_000_000));
    let e = random_bindings(&sdfg, &b.symbols, 0).unwrap_err();
    assert!(e.to_string().contains("the interpreter's limit"), "{e}");
    // A copy whose range is far larger than any array: an error before enumerating it.
    let mut c = SdfgBuilder::new("copy");
    c.symbol("N", DType::I64)
        .symbol("M", DType::I64)
        .array("u", DType::F64, ["N"])
        .array("v", DType::F64, ["N"]);
    c.state("s", |s| {
        s.copy("u[0:M]", "v[0:M]");
    });
    let c = c.build();
    let mut b = bindings(
        vec![("u", zeros(&[4])), ("v", zeros(&[4]))],
        &[("N", 4), ("M", 4_000_000_000_000_000_000)],
    );
    let e = run(&c, &mut b).unwrap_err();
    assert!(
        e.to_string().contains("more indices than any array holds"),
        "{e}"
    );
}

#[test]
fn nested_outputs_under_wcr_keep_unwritten_elements() {
    for (wcr, expect) in [
        (Wcr::Prod, vec![50.0, 3.0]),
        (Wcr::Min, vec![-10.0, 3.0]),
        (Wcr::Max, vec![-5.0, 3.0]),
        (Wcr::Sum, vec![-15.0, 3.0]),
    ] {
        let mut inner = SdfgBuilder::new("inner");
        inner.array("o", DType::F64, [2]);
        inner.state("w", |s| {
            s.tasklet("t", &[], &[("y", "o[0]")], "y = -5.0");
        });
        let inner = inner.build();
        let mut b = SdfgBuilder::new("outer");
        b.array("x", DType::F64, [2]);
        let spec = format!("x[0:2] (wcr: {})", wcr.name());
        b.state("call", |s| {
            s.nested(inner, &[], &[], &[("o", &spec)]);
        });
        let sdfg = b.build();
        let mut bi = bindings(vec![("x", f64s(&[2], vec![-10.0, 3.0]))], &[]);
        run(&sdfg, &mut bi).unwrap();
        assert_eq!(bi.arrays["x"].to_f64_vec(), expect, "{wcr}");
    }
}

#[test]
fn a_static_symbol_cannot_be_rebound() {
    let mut b = SdfgBuilder::new("s");
    b.static_symbol("N", Value::I64(4))
        .array("u", DType::F64, ["N"]);
    b.state("z", |s| {
        s.map("m", &["i"], &["0:N"], |m| {
            m.tasklet("t", &[], &[("y", "u[i]")], "y = 1.0");
        });
    });
    let sdfg = b.build();
    let mut same = bindings(vec![("u", zeros(&[4]))], &[("N", 4)]);
    run(&sdfg, &mut same).unwrap();
    let mut other = bindings(vec![("u", zeros(&[4]))], &[("N", 64)]);
    let e = run(&sdfg, &mut other).unwrap_err();
    assert!(
        e.to_string()
            .contains("symbol 'N' is static (= 4) and cannot be bound to 64"),
        "{e}"
    );
}

/// A transient with no elements whose other extents multiply past any array's size
/// (`[2^63 - 1, 0, 8]`) is an error naming the shape, not a panic in the allocation.
#[test]
fn an_empty_shape_too_large_to_lay_out_is_an_error() {
    let mut b = sdflow_ir::SdfgBuilder::new("huge");
    b.symbol("N", sdflow_ir::DType::I64)
        .symbol("M", sdflow_ir::DType::I64)
        .transient("t", sdflow_ir::DType::F64, ["N", "M", "8"])
        .array("out", sdflow_ir::DType::F64, ["1"]);
    b.state("s", |s| {
        s.tasklet("z", &[], &[("o", "out[0]")], "o = 1.0");
    });
    let p = b.build();
    let mut args = sdflow_ir::interp::Bindings::default();
    args.arrays.insert(
        "out".into(),
        sdflow_ir::interp::HostArray::zeros(sdflow_ir::DType::F64, &[1]),
    );
    args.symbols
        .insert("N".into(), sdflow_ir::Value::I64(i64::MAX));
    args.symbols.insert("M".into(), sdflow_ir::Value::I64(0));
    let e = sdflow_ir::interp::run(&p, &mut args)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("shape [9223372036854775807, 0, 8] has no elements, but its other extents multiply past any array's size"),
        "{e}"
    );
}
