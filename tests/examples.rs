//! The programs in `examples/` load, validate, and compute on the interpreter what
//! straightforward Rust loops (written independently here) compute.

use std::collections::BTreeMap;
use std::path::Path;

use ndarray::{ArrayD, IxDyn};
use sdflow::ir::interp::{self, Bindings, HostArray};
use sdflow::ir::{Sdfg, Value, format};

fn example(name: &str) -> Sdfg {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    let sdfg = format::from_json(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if let Err(problems) = sdfg.validate() {
        panic!("{}: {problems:?}", path.display());
    }
    sdfg
}

/// Deterministic values in [-1, 1) (a linear congruential sequence; independent of the
/// interpreter's own generator).
fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

fn f64_array(shape: &[usize], data: Vec<f64>) -> HostArray {
    HostArray::F64(ArrayD::from_shape_vec(IxDyn(shape), data).unwrap())
}

fn f64_of(b: &Bindings, name: &str) -> ArrayD<f64> {
    match &b.arrays[name] {
        HostArray::F64(a) => a.clone(),
        other => panic!("{name} is {:?}", other.dtype()),
    }
}

fn bindings(arrays: &[(&str, HostArray)], symbols: &[(&str, Value)]) -> Bindings {
    Bindings {
        arrays: arrays
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        symbols: symbols
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect::<BTreeMap<_, _>>(),
    }
}

fn lap5(u: &ArrayD<f64>, i: usize, j: usize) -> f64 {
    u[[i - 1, j]] + u[[i + 1, j]] + u[[i, j - 1]] + u[[i, j + 1]] - 4.0 * u[[i, j]]
}

#[test]
fn laplace_of_a_quadratic_is_constant() {
    // u = i^2 + 2 j^2 has the 5-point Laplacian 2 + 4 = 6 at every interior point.
    let sdfg = example("laplace.sdfg.json");
    let n: usize = 6;
    let u: Vec<f64> = (0..n * n)
        .map(|p| ((p / n).pow(2) + 2 * (p % n).pow(2)) as f64)
        .collect();
    let mut b = bindings(
        &[
            ("u", f64_array(&[n, n], u)),
            ("out", f64_array(&[n, n], vec![-1.0; n * n])),
        ],
        &[("N", Value::I64(6))],
    );
    interp::run(&sdfg, &mut b).unwrap();
    let out = f64_of(&b, "out");
    for i in 0..n {
        for j in 0..n {
            let interior = (1..n - 1).contains(&i) && (1..n - 1).contains(&j);
            assert_eq!(
                out[[i, j]],
                if interior { 6.0 } else { -1.0 },
                "out[{i}, {j}]"
            );
        }
    }
}

#[test]
fn laplace_matches_a_rust_loop_on_random_input() {
    let sdfg = example("laplace.sdfg.json");
    let n = 9;
    let u = ArrayD::from_shape_vec(IxDyn(&[n, n]), values(n * n, 7)).unwrap();
    let mut b = bindings(
        &[
            ("u", HostArray::F64(u.clone())),
            ("out", f64_array(&[n, n], vec![0.0; n * n])),
        ],
        &[("N", Value::I64(n as i64))],
    );
    interp::run(&sdfg, &mut b).unwrap();
    let out = f64_of(&b, "out");
    for i in 1..n - 1 {
        for j in 1..n - 1 {
            assert_eq!(
                out[[i, j]].to_bits(),
                lap5(&u, i, j).to_bits(),
                "out[{i}, {j}]"
            );
        }
    }
}

#[test]
fn hyperdiffusion_matches_a_rust_loop() {
    let sdfg = example("hyperdiffusion.sdfg.json");
    let n = 12;
    let alpha = 0.05;
    let u = ArrayD::from_shape_vec(IxDyn(&[n, n]), values(n * n, 3)).unwrap();
    let out0 = values(n * n, 4);
    let mut b = bindings(
        &[
            ("u", HostArray::F64(u.clone())),
            ("out", f64_array(&[n, n], out0.clone())),
        ],
        &[("N", Value::I64(n as i64)), ("alpha", Value::F64(alpha))],
    );
    interp::run(&sdfg, &mut b).unwrap();
    let out = f64_of(&b, "out");
    let mut lap = ArrayD::<f64>::zeros(IxDyn(&[n, n]));
    for i in 1..n - 1 {
        for j in 1..n - 1 {
            lap[[i, j]] = lap5(&u, i, j);
        }
    }
    for i in 0..n {
        for j in 0..n {
            let expect = if (2..n - 2).contains(&i) && (2..n - 2).contains(&j) {
                u[[i, j]] - alpha * lap5(&lap, i, j)
            } else {
                out0[i * n + j]
            };
            assert_eq!(out[[i, j]].to_bits(), expect.to_bits(), "out[{i}, {j}]");
        }
    }
}

#[test]
fn tridiagonal_solve_satisfies_the_system() {
    let sdfg = example("tridiagonal.sdfg.json");
    let (nx, ny, nz) = (3, 4, 7);
    let len = nx * ny * nz;
    let a: Vec<f64> = values(len, 11);
    let c: Vec<f64> = values(len, 12);
    // Diagonally dominant: |b| > |a| + |c|.
    let b: Vec<f64> = values(len, 13).iter().map(|v| 3.0 + v).collect();
    let d: Vec<f64> = values(len, 14);
    let sh = [nx, ny, nz];
    let mut bind = bindings(
        &[
            ("a", f64_array(&sh, a.clone())),
            ("b", f64_array(&sh, b.clone())),
            ("c", f64_array(&sh, c.clone())),
            ("d", f64_array(&sh, d.clone())),
            ("x", f64_array(&sh, vec![0.0; len])),
        ],
        &[
            ("NX", Value::I64(nx as i64)),
            ("NY", Value::I64(ny as i64)),
            ("NZ", Value::I64(nz as i64)),
        ],
    );
    interp::run(&sdfg, &mut bind).unwrap();
    let x = f64_of(&bind, "x");
    let at = |v: &Vec<f64>, i: usize, j: usize, k: usize| v[(i * ny + j) * nz + k];
    for i in 0..nx {
        for j in 0..ny {
            // Residual of A x = d in every row.
            for k in 0..nz {
                let mut lhs = at(&b, i, j, k) * x[[i, j, k]];
                if k > 0 {
                    lhs += at(&a, i, j, k) * x[[i, j, k - 1]];
                }
                if k + 1 < nz {
                    lhs += at(&c, i, j, k) * x[[i, j, k + 1]];
                }
                assert!(
                    (lhs - at(&d, i, j, k)).abs() < 1e-12,
                    "row {k} of column ({i}, {j}): {lhs} vs {}",
                    at(&d, i, j, k)
                );
            }
            // And the same numbers as a Thomas solve written here.
            let mut cp = vec![0.0; nz];
            let mut dp = vec![0.0; nz];
            cp[0] = at(&c, i, j, 0) / at(&b, i, j, 0);
            dp[0] = at(&d, i, j, 0) / at(&b, i, j, 0);
            for k in 1..nz {
                let den = at(&b, i, j, k) - at(&a, i, j, k) * cp[k - 1];
                cp[k] = at(&c, i, j, k) / den;
                dp[k] = (at(&d, i, j, k) - at(&a, i, j, k) * dp[k - 1]) / den;
            }
            let mut xs = vec![0.0; nz];
            xs[nz - 1] = dp[nz - 1];
            for k in (0..nz - 1).rev() {
                xs[k] = dp[k] - cp[k] * xs[k + 1];
            }
            for k in 0..nz {
                assert_eq!(x[[i, j, k]].to_bits(), xs[k].to_bits(), "x[{i}, {j}, {k}]");
            }
        }
    }
}

#[test]
fn flag_if_takes_the_branch_the_flag_selects() {
    let sdfg = example("flag_if.sdfg.json");
    let u: Vec<f64> = vec![0.5, -1.0, 2.0, 4.25];
    for (mode, f) in [
        (1i64, (|x: f64| 2.0 * x) as fn(f64) -> f64),
        (0, |x| x + 1.0),
        (-3, |x| 2.0 * x),
    ] {
        let mut b = bindings(
            &[
                ("u", f64_array(&[4], u.clone())),
                ("out", f64_array(&[4], vec![0.0; 4])),
            ],
            &[("N", Value::I64(4)), ("mode", Value::I64(mode))],
        );
        interp::run(&sdfg, &mut b).unwrap();
        let out = f64_of(&b, "out");
        let expect: Vec<f64> = u.iter().map(|&x| f(x)).collect();
        assert_eq!(out.as_slice().unwrap(), expect.as_slice(), "mode {mode}");
    }
}
