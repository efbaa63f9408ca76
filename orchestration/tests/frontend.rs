//! The stencil DSL and program builder: flattened programs validate and compute, on the
//! reference interpreter, what straightforward Rust loops compute; rule violations are
//! build errors naming the stencil and argument.

use std::collections::BTreeMap;

use ndarray::{ArrayD, IxDyn};
use sdflow_ir::interp::{Bindings, HostArray, run};
use sdflow_ir::{Block, DType, Node, Sdfg, Value};
use sdflow_orchestration::{BuildError, Dims, Loc, Program, ScanDir, Stencil, select};

fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

fn arr(shape: &[usize], v: Vec<f64>) -> HostArray {
    HostArray::F64(ArrayD::from_shape_vec(IxDyn(shape), v).unwrap())
}

fn get(b: &Bindings, name: &str) -> ArrayD<f64> {
    match &b.arrays[name] {
        HostArray::F64(a) => a.clone(),
        _ => panic!("{name} is not f64"),
    }
}

fn bind(arrays: Vec<(&str, HostArray)>, symbols: &[(&str, Value)]) -> Bindings {
    Bindings {
        arrays: arrays
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        symbols: symbols
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect::<BTreeMap<_, _>>(),
    }
}

fn laplacian() -> Stencil {
    Stencil::new("lap", |s| {
        let u = s.input("u");
        let out = s.output("out");
        s.set(
            &out,
            u.at(-1, 0, 0) + u.at(1, 0, 0) + u.at(0, -1, 0) + u.at(0, 1, 0) - 4.0 * u.c(),
        );
    })
}

fn lap_at(u: &ArrayD<f64>, i: usize, j: usize, k: usize) -> f64 {
    u[[i - 1, j, k]] + u[[i + 1, j, k]] + u[[i, j - 1, k]] + u[[i, j + 1, k]] - 4.0 * u[[i, j, k]]
}

/// Hyperdiffusion as two calls of one stencil through a temporary, in a loop.
fn hyperdiffusion_program() -> Program {
    let lap = laplacian();
    let update = Stencil::new("update", |s| {
        let u = s.input("u");
        let l2 = s.input("l2");
        let nu = s.param("nu");
        let out = s.output("out");
        s.set(&out, u.c() - nu * l2.c());
    });
    let mut p = Program::new("hyper");
    p.symbol("N", DType::I64)
        .symbol("nu", DType::F64)
        .symbol("steps", DType::I64)
        .static_symbol("NZ", Value::I64(2));
    p.field("u", ["N", "N", "NZ"])
        .temp("l1", ["N", "N", "NZ"])
        .temp("l2", ["N", "N", "NZ"]);
    p.repeat("t", "steps", |b| {
        b.call(
            &lap,
            &[("u", "u"), ("out", "l1")],
            &[],
            &["1:N-1", "1:N-1", "0:NZ"],
        );
        b.call(
            &lap,
            &[("u", "l1"), ("out", "l2")],
            &[],
            &["2:N-2", "2:N-2", "0:NZ"],
        );
        b.call(
            &update,
            &[("u", "u"), ("l2", "l2"), ("out", "u")],
            &[("nu", "nu")],
            &["2:N-2", "2:N-2", "0:NZ"],
        );
    });
    p
}

#[test]
fn hyperdiffusion_in_a_loop_matches_rust_loops() {
    let sdfg = hyperdiffusion_program().build().unwrap();
    assert_eq!(sdfg.stats().maps, 3);
    assert!(matches!(&sdfg.body, Block::Seq(b) if matches!(b.as_slice(), [Block::Loop(_)])));
    let (n, nz, steps, nu) = (9usize, 2usize, 3i64, 0.01);
    let u0 = values(n * n * nz, 1);
    let mut b = bind(
        vec![("u", arr(&[n, n, nz], u0.clone()))],
        &[
            ("N", Value::I64(n as i64)),
            ("nu", Value::F64(nu)),
            ("steps", Value::I64(steps)),
        ],
    );
    run(&sdfg, &mut b).unwrap();
    let mut u = ArrayD::from_shape_vec(IxDyn(&[n, n, nz]), u0).unwrap();
    for _ in 0..steps {
        let mut l1 = ArrayD::<f64>::zeros(IxDyn(&[n, n, nz]));
        let mut l2 = l1.clone();
        for k in 0..nz {
            for i in 1..n - 1 {
                for j in 1..n - 1 {
                    l1[[i, j, k]] = lap_at(&u, i, j, k);
                }
            }
            for i in 2..n - 2 {
                for j in 2..n - 2 {
                    l2[[i, j, k]] = lap_at(&l1, i, j, k);
                }
            }
            for i in 2..n - 2 {
                for j in 2..n - 2 {
                    u[[i, j, k]] -= nu * l2[[i, j, k]];
                }
            }
        }
    }
    let got = get(&b, "u");
    for (x, y) in got.iter().zip(u.iter()) {
        assert_eq!(x.to_bits(), y.to_bits());
    }
}

#[test]
fn several_outputs_select_and_math() {
    let st = Stencil::new("split", |s| {
        let a = s.input("a");
        let pos = s.output("pos");
        let mag = s.output("mag");
        let t = s.local(a.c() * 2.0);
        s.set(&pos, select(t.clone().gt(0.0), t.clone(), 0.0));
        s.set(&mag, t.abs().sqrt().max(a.k(1)));
    });
    let mut p = Program::new("split");
    p.symbol("N", DType::I64)
        .field("a", ["N", "N", "3"])
        .field("pos", ["N", "N", "3"])
        .field("mag", ["N", "N", "3"]);
    p.call(
        &st,
        &[("a", "a"), ("pos", "pos"), ("mag", "mag")],
        &[],
        &["0:N", "0:N", "0:2"],
    );
    let sdfg = p.build().unwrap();
    let n = 4;
    let a = values(n * n * 3, 2);
    let mut b = bind(
        vec![
            ("a", arr(&[n, n, 3], a.clone())),
            ("pos", arr(&[n, n, 3], vec![9.0; n * n * 3])),
            ("mag", arr(&[n, n, 3], vec![9.0; n * n * 3])),
        ],
        &[("N", Value::I64(n as i64))],
    );
    run(&sdfg, &mut b).unwrap();
    let (pos, mag) = (get(&b, "pos"), get(&b, "mag"));
    for i in 0..n {
        for j in 0..n {
            for k in 0..3 {
                let x = a[(i * n + j) * 3 + k];
                if k == 2 {
                    assert_eq!(
                        (pos[[i, j, k]], mag[[i, j, k]]),
                        (9.0, 9.0),
                        "outside the domain"
                    );
                    continue;
                }
                let t = x * 2.0;
                assert_eq!(pos[[i, j, k]], if t > 0.0 { t } else { 0.0 });
                assert_eq!(
                    mag[[i, j, k]],
                    t.abs().sqrt().max(a[(i * n + j) * 3 + k + 1])
                );
            }
        }
    }
}

/// A tridiagonal solve as two scans: forward elimination, backward substitution.
fn thomas() -> (Stencil, Stencil) {
    let fwd = Stencil::scan("thomas_fwd", ScanDir::Forward, |s| {
        let (a, b, c, d) = (s.input("a"), s.input("b"), s.input("c"), s.input("d"));
        let (cp, dp) = (s.output("cp"), s.output("dp"));
        s.first(|s| {
            s.set(&cp, c.c() / b.c());
            s.set(&dp, d.c() / b.c());
        });
        s.step(|s| {
            let den = s.local(b.c() - a.c() * cp.prev());
            s.set(&cp, c.c() / den.clone());
            s.set(&dp, (d.c() - a.c() * dp.prev()) / den);
        });
    });
    let bwd = Stencil::scan("thomas_bwd", ScanDir::Backward, |s| {
        let (cp, dp) = (s.input("cp"), s.input("dp"));
        let x = s.output("x");
        s.first(|s| s.set(&x, dp.c()));
        s.step(|s| s.set(&x, dp.c() - cp.c() * x.prev()));
    });
    (fwd, bwd)
}

#[test]
fn scans_solve_tridiagonal_systems() {
    let (fwd, bwd) = thomas();
    let mut p = Program::new("solve");
    p.symbol("NX", DType::I64).symbol("NZ", DType::I64);
    for f in ["a", "b", "c", "d", "x"] {
        p.field(f, ["NX", "1", "NZ"]);
    }
    p.temp("cp", ["NX", "1", "NZ"])
        .temp("dp", ["NX", "1", "NZ"]);
    p.call(
        &fwd,
        &[
            ("a", "a"),
            ("b", "b"),
            ("c", "c"),
            ("d", "d"),
            ("cp", "cp"),
            ("dp", "dp"),
        ],
        &[],
        &["0:NX", "0:1", "0:NZ"],
    );
    p.call(
        &bwd,
        &[("cp", "cp"), ("dp", "dp"), ("x", "x")],
        &[],
        &["0:NX", "0:1", "0:NZ"],
    );
    let sdfg = p.build().unwrap();
    // Each scan: a horizontal map holding a sequential map over the levels.
    let st = &sdfg.states[0].graph;
    let outer = st.node_ids().into_iter().find_map(|n| match st.node(n) {
        Node::Map(m) => Some(m.clone()),
        _ => None,
    });
    let outer = outer.expect("a map");
    assert_eq!(outer.params, ["i", "j"]);
    let inner = outer
        .body
        .node_ids()
        .into_iter()
        .find_map(|n| match outer.body.node(n) {
            Node::Map(m) => Some(m.clone()),
            _ => None,
        });
    assert_eq!(
        inner.expect("levels map").schedule,
        sdflow_ir::Schedule::Sequential
    );

    let (nx, nz) = (3usize, 6usize);
    let len = nx * nz;
    let (a, c, d) = (values(len, 3), values(len, 4), values(len, 5));
    let b: Vec<f64> = values(len, 6).iter().map(|v| 3.0 + v).collect();
    let sh = [nx, 1, nz];
    let mut bi = bind(
        vec![
            ("a", arr(&sh, a.clone())),
            ("b", arr(&sh, b.clone())),
            ("c", arr(&sh, c.clone())),
            ("d", arr(&sh, d.clone())),
            ("x", arr(&sh, vec![0.0; len])),
        ],
        &[("NX", Value::I64(nx as i64)), ("NZ", Value::I64(nz as i64))],
    );
    run(&sdfg, &mut bi).unwrap();
    let x = get(&bi, "x");
    for i in 0..nx {
        let at = |v: &Vec<f64>, k: usize| v[i * nz + k];
        for k in 0..nz {
            let mut lhs = at(&b, k) * x[[i, 0, k]];
            if k > 0 {
                lhs += at(&a, k) * x[[i, 0, k - 1]];
            }
            if k + 1 < nz {
                lhs += at(&c, k) * x[[i, 0, k + 1]];
            }
            assert!((lhs - at(&d, k)).abs() < 1e-12, "column {i}, row {k}");
        }
    }
}

#[test]
fn column_sum_scan_carries_the_previous_level() {
    let csum = Stencil::scan("csum", ScanDir::Forward, |s| {
        let q = s.input("q");
        let acc = s.output("acc");
        s.first(|s| s.set(&acc, q.c()));
        s.step(|s| s.set(&acc, acc.prev() + q.c()));
    });
    let mut p = Program::new("colsum");
    p.field("q", [2, 2, 5]).field("acc", [2, 2, 5]);
    p.call(
        &csum,
        &[("q", "q"), ("acc", "acc")],
        &[],
        &["0:2", "0:2", "1:4"],
    );
    let sdfg = p.build().unwrap();
    let q: Vec<f64> = (0..20).map(|v| v as f64).collect();
    let mut b = bind(
        vec![
            ("q", arr(&[2, 2, 5], q)),
            ("acc", arr(&[2, 2, 5], vec![-1.0; 20])),
        ],
        &[],
    );
    run(&sdfg, &mut b).unwrap();
    let acc = get(&b, "acc");
    // Column (1, 0) holds q = 10..15; levels 1..4 accumulate 11, 11+12, 11+12+13.
    assert_eq!(
        acc.slice(ndarray::s![1, 0, ..]).to_vec(),
        vec![-1.0, 11.0, 23.0, 36.0, -1.0]
    );
}

#[test]
fn unstructured_neighbours_through_tables() {
    // 3 cells in a ring, 3 edges; edge e joins cells e and (e + 1) % 3; cell c has edges
    // c, (c + 2) % 3 and c again (a made-up but valid table).
    let e_from_c = Stencil::new("edge_sum", |s| {
        let e2c = s.table("e2c", Loc::Edge, Loc::Cell);
        let c = s.input_on("c", Dims::Unstructured(Loc::Cell));
        let e = s.output_on("e", Dims::Unstructured(Loc::Edge));
        s.set(&e, c.nb(&e2c, 0) - c.nb(&e2c, 1));
    });
    let c_from_e = Stencil::new("cell_sum", |s| {
        let c2e = s.table("c2e", Loc::Cell, Loc::Edge);
        let e = s.input_on("e", Dims::Unstructured(Loc::Edge));
        let out = s.output_on("out", Dims::Unstructured(Loc::Cell));
        s.set(&out, e.nb(&c2e, 0) + e.nb(&c2e, 1) + e.nb(&c2e, 2));
    });
    let mut p = Program::new("ring");
    p.symbol("NC", DType::I64).symbol("NK", DType::I64);
    p.field_typed("e2c", DType::I32, ["NC", "2"])
        .field_typed("c2e", DType::I32, ["NC", "3"]);
    p.field("cells", ["NC", "NK"])
        .field("out", ["NC", "NK"])
        .temp("edges", ["NC", "NK"]);
    p.call(
        &e_from_c,
        &[("e2c", "e2c"), ("c", "cells"), ("e", "edges")],
        &[],
        &["0:NC", "0:NK"],
    );
    p.call(
        &c_from_e,
        &[("c2e", "c2e"), ("e", "edges"), ("out", "out")],
        &[],
        &["0:NC", "0:NK"],
    );
    let sdfg = p.build().unwrap();
    let e2c = ArrayD::from_shape_vec(IxDyn(&[3, 2]), vec![0, 1, 1, 2, 2, 0]).unwrap();
    let c2e = ArrayD::from_shape_vec(IxDyn(&[3, 3]), vec![0, 2, 0, 1, 0, 1, 2, 1, 2]).unwrap();
    let cells = vec![1.0, 2.0, 10.0, 20.0, 100.0, 200.0]; // [cell, level]
    let mut b = bind(
        vec![
            ("e2c", HostArray::I32(e2c)),
            ("c2e", HostArray::I32(c2e)),
            ("cells", arr(&[3, 2], cells)),
            ("out", arr(&[3, 2], vec![0.0; 6])),
        ],
        &[("NC", Value::I64(3)), ("NK", Value::I64(2))],
    );
    run(&sdfg, &mut b).unwrap();
    // Level 0: cells (1, 10, 100) → edges (1-10, 10-100, 100-1) = (-9, -90, 99).
    // Cells: c0 = e0 + e2 + e0 = 81; c1 = e1 + e0 + e1 = -189; c2 = e2 + e1 + e2 = 108.
    let out = get(&b, "out");
    assert_eq!(
        out.slice(ndarray::s![.., 0]).to_vec(),
        vec![81.0, -189.0, 108.0]
    );
    assert_eq!(
        out.slice(ndarray::s![.., 1]).to_vec(),
        vec![162.0, -378.0, 216.0]
    );
}

/// A sub-program with its own temporary and a static size, called twice.
fn smoother() -> Program {
    let lap = laplacian();
    let relax = Stencil::new("relax", |s| {
        let u = s.input("u");
        let l = s.input("l");
        let w = s.param("w");
        let out = s.output("out");
        s.set(&out, u.c() + w * l.c());
    });
    let mut p = Program::new("smoother");
    p.symbol("n", DType::I64)
        .symbol("w", DType::F64)
        .static_symbol("nz", Value::I64(1));
    p.field("x", ["n", "n", "nz"]).temp("l", ["n", "n", "nz"]);
    p.call(
        &lap,
        &[("u", "x"), ("out", "l")],
        &[],
        &["1:n-1", "1:n-1", "0:nz"],
    );
    p.call(
        &relax,
        &[("u", "x"), ("l", "l"), ("out", "x")],
        &[("w", "w")],
        &["1:n-1", "1:n-1", "0:nz"],
    );
    p
}

fn driver(flag_static: bool) -> Program {
    let sm = smoother();
    let mut p = Program::new("driver");
    p.symbol("N", DType::I64)
        .symbol("omega", DType::F64)
        .symbol("twice", DType::I64);
    p.static_symbol("ONE", Value::I64(1));
    p.field("u", ["N", "N", "1"]);
    p.nested(
        &sm,
        &[("x", "u")],
        &[
            ("n", "N"),
            ("w", "omega"),
            ("nz", if flag_static { "ONE" } else { "N" }),
        ],
    );
    p.if_("twice != 0", |b| {
        b.nested(&sm, &[("x", "u")], &[("n", "N"), ("w", "omega")]);
    });
    p
}

#[test]
fn nested_programs_inline_with_their_own_temporaries() {
    let sdfg = driver(true).build().unwrap();
    // Two inlined copies, each with its temporary; 4 states; the if holds the second copy.
    assert!(sdfg.arrays.contains_key("smoother_1_l") && sdfg.arrays.contains_key("smoother_2_l"));
    assert_eq!(sdfg.states.len(), 4);
    let n = 7;
    let u0 = values(n * n, 9);
    for twice in [0i64, 1] {
        let mut b = bind(
            vec![("u", arr(&[n, n, 1], u0.clone()))],
            &[
                ("N", Value::I64(n as i64)),
                ("omega", Value::F64(0.2)),
                ("twice", Value::I64(twice)),
            ],
        );
        run(&sdfg, &mut b).unwrap();
        let mut u = ArrayD::from_shape_vec(IxDyn(&[n, n, 1]), u0.clone()).unwrap();
        for _ in 0..=twice {
            let mut l = ArrayD::<f64>::zeros(IxDyn(&[n, n, 1]));
            for i in 1..n - 1 {
                for j in 1..n - 1 {
                    l[[i, j, 0]] = lap_at(&u, i, j, 0);
                }
            }
            for i in 1..n - 1 {
                for j in 1..n - 1 {
                    u[[i, j, 0]] += 0.2 * l[[i, j, 0]];
                }
            }
        }
        assert_eq!(get(&b, "u"), u, "twice = {twice}");
    }
}

#[test]
fn deep_nesting_flattens_without_recursion() {
    // 300 levels of programs, each calling the next: one state at the bottom.
    let copy = Stencil::new("copy", |s| {
        let a = s.input("a");
        let b = s.output("b");
        s.set(&b, a.c() + 1.0);
    });
    let mut p = Program::new("level0");
    p.field("a", [2, 2, 1]).field("b", [2, 2, 1]);
    p.call(
        &copy,
        &[("a", "a"), ("b", "b")],
        &[],
        &["0:2", "0:2", "0:1"],
    );
    for lvl in 1..300 {
        let mut q = Program::new(&format!("level{lvl}"));
        q.field("a", [2, 2, 1]).field("b", [2, 2, 1]);
        q.nested(&p, &[("a", "a"), ("b", "b")], &[]);
        p = q;
    }
    let sdfg = p.build().unwrap();
    assert_eq!(sdfg.states.len(), 1);
}

fn err_of(p: &Program) -> String {
    match p.build() {
        Err(e) => e.to_string(),
        Ok(s) => panic!("expected a build error, got {} states", s.states.len()),
    }
}

#[test]
fn reading_a_temporary_before_it_is_written_is_an_error() {
    let lap = laplacian();
    let mut p = Program::new("early");
    p.symbol("N", DType::I64)
        .field("u", ["N", "N", "1"])
        .temp("t", ["N", "N", "1"]);
    p.call(
        &lap,
        &[("u", "t"), ("out", "u")],
        &[],
        &["1:N-1", "1:N-1", "0:1"],
    );
    assert_eq!(
        err_of(&p),
        "program 'early', call of stencil 'lap', argument 'u': temporary 't' is read before any call writes it"
    );
    // Written in only one branch of an if: still not written on every path.
    let mut p = Program::new("branch");
    p.symbol("N", DType::I64)
        .symbol("f", DType::I64)
        .field("u", ["N", "N", "1"])
        .temp("t", ["N", "N", "1"]);
    p.if_("f != 0", |b| {
        b.call(
            &lap,
            &[("u", "u"), ("out", "t")],
            &[],
            &["1:N-1", "1:N-1", "0:1"],
        );
    });
    p.call(
        &lap,
        &[("u", "t"), ("out", "u")],
        &[],
        &["2:N-2", "2:N-2", "0:1"],
    );
    assert!(err_of(&p).contains("temporary 't' is read before any call writes it"));
}

#[test]
fn a_domain_outside_the_field_is_an_error() {
    let lap = laplacian();
    let mut p = Program::new("oob");
    p.symbol("N", DType::I64)
        .field("u", ["N", "N", "1"])
        .field("v", ["N", "N", "1"]);
    p.call(
        &lap,
        &[("u", "u"), ("out", "v")],
        &[],
        &["0:N-1", "1:N-1", "0:1"],
    );
    assert_eq!(
        err_of(&p),
        "program 'oob', call of stencil 'lap', argument 'u': domain 0:N - 1 in i with offset -1 reaches -1:N - 2 of 'u', outside 0:N"
    );
}

#[test]
fn a_static_parameter_needs_a_constant() {
    assert_eq!(
        err_of(&driver(false)),
        "program 'driver': call of program 'smoother': symbol 'nz' is static and needs a constant, got 'N'"
    );
}

#[test]
fn a_scan_reads_its_own_column_only() {
    let bad = Stencil::scan("smear", ScanDir::Forward, |s| {
        let q = s.input("q");
        let acc = s.output("acc");
        s.first(|s| s.set(&acc, q.c()));
        s.step(|s| s.set(&acc, acc.prev() + q.at(1, 0, 0)));
    });
    let mut p = Program::new("p");
    p.field("q", [4, 4, 4]).field("acc", [4, 4, 4]);
    p.call(
        &bad,
        &[("q", "q"), ("acc", "acc")],
        &[],
        &["0:3", "0:4", "0:4"],
    );
    assert_eq!(
        err_of(&p),
        "stencil 'smear': scan 'smear': field 'q' is read at horizontal offset (1, 0); a scan reads its own column only"
    );
}

#[test]
fn binding_errors_name_the_argument() {
    let lap = laplacian();
    let base = || {
        let mut p = Program::new("p");
        p.symbol("N", DType::I64)
            .field("u", ["N", "N", "1"])
            .field("v", ["N", "N", "1"])
            .field_typed("t", DType::I32, ["N", "2"]);
        p
    };
    let mut p = base();
    p.call(&lap, &[("u", "u")], &[], &["1:N-1", "1:N-1", "0:1"]);
    assert_eq!(
        err_of(&p),
        "program 'p', call of stencil 'lap', argument 'out': not bound"
    );
    let mut p = base();
    p.call(
        &lap,
        &[("u", "w"), ("out", "v")],
        &[],
        &["1:N-1", "1:N-1", "0:1"],
    );
    assert_eq!(
        err_of(&p),
        "program 'p', call of stencil 'lap', argument 'u': bound to 'w', which program 'p' does not declare"
    );
    let mut p = base();
    p.call(
        &lap,
        &[("u", "t"), ("out", "v")],
        &[],
        &["1:N-1", "1:N-1", "0:1"],
    );
    assert_eq!(
        err_of(&p),
        "program 'p', call of stencil 'lap', argument 'u': 't' is i32[rank 2], the stencil needs a float field of rank 3"
    );
    let mut p = base();
    p.call(
        &lap,
        &[("u", "u"), ("out", "v"), ("z", "u")],
        &[],
        &["1:N-1", "1:N-1", "0:1"],
    );
    assert_eq!(
        err_of(&p),
        "program 'p', call of stencil 'lap', argument 'z': the stencil has no such field or table"
    );
    let mut p = base();
    p.call(&lap, &[("u", "u"), ("out", "v")], &[], &["1:N-1", "1:N-1"]);
    assert_eq!(
        err_of(&p),
        "program 'p', call of stencil 'lap', argument 'domain': 2 range(s) given, the stencil iterates 3 dimensions"
    );
    let mut p = base();
    p.call(
        &lap,
        &[("u", "u"), ("out", "v")],
        &[],
        &["1:N-1", "1:N-1", "0:1:"],
    );
    assert!(
        err_of(&p).starts_with("program 'p', call of stencil 'lap', argument 'domain': "),
        "{}",
        err_of(&p)
    );
}

#[test]
fn flattened_programs_validate_and_round_trip() {
    for p in [hyperdiffusion_program(), driver(true)] {
        let sdfg: Sdfg = p.build().unwrap();
        assert_eq!(sdfg.validate(), Ok(()));
        let text = sdflow_ir::format::to_json(&sdfg);
        assert_eq!(sdflow_ir::format::from_json(&text).unwrap(), sdfg);
    }
    let e: BuildError = Program::new("bad name").build().unwrap_err();
    assert_eq!(
        e.to_string(),
        "program 'bad name': 'bad name' is not a valid name (letters, digits, '_')"
    );
}

#[test]
fn fields_over_k_are_per_level_coefficients() {
    // out = a * w[k] + w[k+1]: a 3-D field scaled by a profile, on levels 0..NZ-1; and a
    // column sum weighted by the profile (a scan reading a K field).
    let scale = Stencil::new("scale", |s| {
        let (a, w) = (s.input("a"), s.input_k("w"));
        let out = s.output("out");
        s.set(&out, a.c() * w.c() + w.k(1));
    });
    let weighted = Stencil::scan("weighted", ScanDir::Forward, |s| {
        let (a, w) = (s.input("a"), s.input_k("w"));
        let acc = s.output("acc");
        s.first(|s| s.set(&acc, w.c() * a.c()));
        s.step(|s| s.set(&acc, acc.prev() + w.c() * a.c()));
    });
    let mut p = Program::new("profile");
    p.symbol("N", DType::I64).symbol("NZ", DType::I64);
    p.field("a", ["N", "N", "NZ"])
        .field("w", ["NZ"])
        .field("out", ["N", "N", "NZ"])
        .field("acc", ["N", "N", "NZ"]);
    p.call(
        &scale,
        &[("a", "a"), ("w", "w"), ("out", "out")],
        &[],
        &["0:N", "0:N", "0:NZ-1"],
    );
    p.call(
        &weighted,
        &[("a", "a"), ("w", "w"), ("acc", "acc")],
        &[],
        &["0:N", "0:N", "0:NZ"],
    );
    let sdfg = p.build().unwrap();
    assert_eq!(sdfg.validate(), Ok(()));
    let (n, nz) = (3, 5);
    let a = values(n * n * nz, 3);
    let w = values(nz, 4);
    let mut b = bind(
        vec![
            ("a", arr(&[n, n, nz], a.clone())),
            ("w", arr(&[nz], w.clone())),
            ("out", arr(&[n, n, nz], vec![0.0; n * n * nz])),
            ("acc", arr(&[n, n, nz], vec![0.0; n * n * nz])),
        ],
        &[("N", Value::I64(n as i64)), ("NZ", Value::I64(nz as i64))],
    );
    run(&sdfg, &mut b).unwrap();
    let (out, acc) = (get(&b, "out"), get(&b, "acc"));
    let a = ArrayD::from_shape_vec(IxDyn(&[n, n, nz]), a).unwrap();
    for i in 0..n {
        for j in 0..n {
            let mut sum = 0.0;
            for k in 0..nz {
                let expect = if k + 1 < nz {
                    a[[i, j, k]] * w[k] + w[k + 1]
                } else {
                    0.0
                };
                assert_eq!(out[[i, j, k]], expect, "out at {i} {j} {k}");
                sum = if k == 0 {
                    w[k] * a[[i, j, k]]
                } else {
                    sum + w[k] * a[[i, j, k]]
                };
                assert_eq!(acc[[i, j, k]], sum, "acc at {i} {j} {k}");
            }
        }
    }

    // Reading one level past the profile is a bounds error on the K field.
    let mut p = Program::new("past");
    p.symbol("N", DType::I64).symbol("NZ", DType::I64);
    p.field("a", ["N", "N", "NZ"])
        .field("w", ["NZ"])
        .field("out", ["N", "N", "NZ"]);
    p.call(
        &scale,
        &[("a", "a"), ("w", "w"), ("out", "out")],
        &[],
        &["0:N", "0:N", "0:NZ"],
    );
    assert_eq!(
        err_of(&p),
        "program 'past', call of stencil 'scale', argument 'w': domain 0:NZ in k with offset 1 reaches 1:NZ + 1 of 'w', outside 0:NZ"
    );
    // A K field must be bound to a rank-1 array.
    let mut p = Program::new("rank");
    p.symbol("N", DType::I64).symbol("NZ", DType::I64);
    p.field("a", ["N", "N", "NZ"])
        .field("out", ["N", "N", "NZ"]);
    p.call(
        &scale,
        &[("a", "a"), ("w", "a"), ("out", "out")],
        &[],
        &["0:N", "0:N", "0:NZ-1"],
    );
    assert_eq!(
        err_of(&p),
        "program 'rank', call of stencil 'scale', argument 'w': 'a' is f64[rank 3], the stencil needs a float field of rank 1"
    );
}

#[test]
fn fields_over_k_are_inputs_read_at_the_level() {
    let out_k = Stencil::new("out_k", |s| {
        let a = s.input("a");
        let w = s.output_on("w", Dims::K);
        s.set(&w, a.c());
    });
    assert_eq!(
        out_k.errors()[0],
        "stencil 'out_k': output 'w' is over K only; fields over K are inputs"
    );
    let shifted = Stencil::new("shifted", |s| {
        let w = s.input_k("w");
        let out = s.output("out");
        s.set(&out, w.at(1, 0, 0));
    });
    assert_eq!(
        shifted.errors()[0],
        "stencil 'shifted': field 'w' is over K only; read it with .c() or .k(dk)"
    );
}

#[test]
fn reading_a_written_field_at_an_offset_is_a_race() {
    let smooth = Stencil::new("smooth", |s| {
        let a = s.input("a");
        let out = s.output("out");
        s.set(&out, 0.5 * (a.at(-1, 0, 0) + a.c()));
    });
    let mut p = Program::new("inplace");
    p.symbol("N", DType::I64).field("u", ["N", "N", "1"]);
    p.call(
        &smooth,
        &[("a", "u"), ("out", "u")],
        &[],
        &["1:N", "0:N", "0:1"],
    );
    assert_eq!(
        err_of(&p),
        "program 'inplace', call of stencil 'smooth', argument 'a': 'u' is written by this call and read at offset [-1, 0, 0] where the call also writes it; the points of a stencil run in parallel, so write the result to another field"
    );
    // Reading only where the call does not write is fine: a periodic copy of the last
    // column into the first, and a pointwise in-place update.
    let wrap = Stencil::new("wrap", |s| {
        let a = s.input("a");
        let out = s.output("out");
        s.set(&out, a.at(4, 0, 0));
    });
    let scale = Stencil::new("scale", |s| {
        let a = s.input("a");
        let out = s.output("out");
        s.set(&out, 2.0 * a.c());
    });
    let mut p = Program::new("disjoint");
    p.field("u", [5, 3, 1]);
    p.call(
        &wrap,
        &[("a", "u"), ("out", "u")],
        &[],
        &["0:1", "0:3", "0:1"],
    );
    p.call(
        &scale,
        &[("a", "u"), ("out", "u")],
        &[],
        &["0:5", "0:3", "0:1"],
    );
    let sdfg = p.build().unwrap();
    let u: Vec<f64> = (0..15).map(f64::from).collect();
    let mut b = bind(vec![("u", arr(&[5, 3, 1], u.clone()))], &[]);
    run(&sdfg, &mut b).unwrap();
    let out = get(&b, "u");
    for i in 0..5 {
        for j in 0..3 {
            let src = if i == 0 { 4 * 3 + j } else { i * 3 + j };
            assert_eq!(out[[i, j, 0]], 2.0 * u[src]);
        }
    }
}
