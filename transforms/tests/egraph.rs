//! The e-graph pass: random expressions over special values (NaN, ±inf, ±0,
//! subnormals, the largest finite values) evaluate bitwise equal before and after with
//! the exact rules; with fast-math, within the documented tolerance on finite inputs;
//! and the hand-written cases of the pass's purpose: lap(lap(u)) after recomputation
//! fusion, a static flag folding a select, a repeated subexpression computed once,
//! bodies of 10,000 nodes within the bounds, the fused dycore.

use std::collections::BTreeMap;

use proptest::prelude::*;
use sdflow_ir::interp::{self, Bindings, HostArray};
use sdflow_ir::stats::PointCounts;
use sdflow_ir::{BinOp, DType, Expr, MathFn, Sdfg, SdfgBuilder, UnOp, Value};
use sdflow_transforms::{EGraphPass, Pass, Pipeline};

const N: usize = 96;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512)
        .max(512)
}

/// The values every input array cycles through, then random finite values.
const SPECIAL: [f64; 16] = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    2.0,
    0.5,
    f64::INFINITY,
    f64::NEG_INFINITY,
    f64::NAN,
    5e-324,
    -2.2250738585072014e-308,
    f64::MAX,
    -f64::MAX,
    1e-300,
    3.0,
    -0.1,
];

/// Leaves: f64 inputs `a`, `b`, `c`, an f32 input `x`, an i64 input `k`, constants of
/// the special values.
fn leaf() -> impl Strategy<Value = Expr> {
    prop_oneof![
        Just(Expr::var("a")),
        Just(Expr::var("b")),
        Just(Expr::var("c")),
        Just(Expr::var("x")),
        Just(Expr::var("k")),
        (0..SPECIAL.len()).prop_map(|i| Expr::f64(SPECIAL[i])),
        (0..SPECIAL.len()).prop_map(|i| Expr::Const(Value::F32(SPECIAL[i] as f32))),
        prop_oneof![Just(1i64), Just(0), Just(-1), Just(2), Just(7)]
            .prop_map(|v| Expr::Const(Value::I64(v))),
    ]
}

fn expr() -> impl Strategy<Value = Expr> {
    leaf().prop_recursive(5, 48, 3, |inner| {
        let arith = prop_oneof![
            Just(BinOp::Add),
            Just(BinOp::Sub),
            Just(BinOp::Mul),
            Just(BinOp::Div),
            Just(BinOp::Add),
            Just(BinOp::Mul),
        ];
        let cmp = prop_oneof![Just(BinOp::Lt), Just(BinOp::Eq), Just(BinOp::Ge)];
        let func = prop_oneof![
            Just(MathFn::Sqrt),
            Just(MathFn::Abs),
            Just(MathFn::Floor),
            Just(MathFn::Exp),
        ];
        prop_oneof![
            (arith.clone(), inner.clone(), inner.clone()).prop_map(|(o, a, b)| Expr::bin(o, a, b)),
            // A repeated operand: `e op e`, the shape sharing is found in.
            (arith, inner.clone()).prop_map(|(o, a)| Expr::bin(o, a.clone(), a)),
            inner
                .clone()
                .prop_map(|a| Expr::Unary(UnOp::Neg, Box::new(a))),
            (
                cmp,
                inner.clone(),
                inner.clone(),
                inner.clone(),
                inner.clone()
            )
                .prop_map(|(o, p, q, a, b)| Expr::Select(
                    Box::new(Expr::bin(o, p, q)),
                    Box::new(a),
                    Box::new(b)
                )),
            (func, inner.clone()).prop_map(|(f, a)| Expr::Call(f, vec![a])),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Expr::Call(MathFn::Min, vec![a, b])),
            inner
                .clone()
                .prop_map(|a| Expr::Cast(DType::F32, Box::new(a))),
            inner.prop_map(|a| Expr::Cast(DType::F64, Box::new(a))),
        ]
    })
}

/// `o[i] = code` over inputs `a, b, c` (f64), `x` (f32), `k` (i64), as tasklets.
fn program(stmts: &[&str]) -> Sdfg {
    let mut b = SdfgBuilder::new("expr");
    for n in ["a", "b", "c", "o", "p"] {
        b.array(n, DType::F64, [N as i64]);
    }
    b.array("x", DType::F32, [N as i64])
        .array("k", DType::I64, [N as i64]);
    b.state("s", |s| {
        s.map("m", &["i"], &["0:96"], |m| {
            m.tasklet(
                "t",
                &[
                    ("a", "a[i]"),
                    ("b", "b[i]"),
                    ("c", "c[i]"),
                    ("x", "x[i]"),
                    ("k", "k[i]"),
                ],
                &[("o", "o[i]"), ("p", "p[i]")],
                &stmts.join("; "),
            );
        });
    });
    b.build()
}

fn inputs(s: &Sdfg, seed: u64, finite_positive: bool) -> Bindings {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        state >> 11
    };
    let mut arrays = BTreeMap::new();
    for (n, d) in &s.arrays {
        let vals: Vec<Value> = (0..N)
            .map(|i| {
                let r = next();
                let v = if finite_positive {
                    0.5 + (r % 1_000_000) as f64 / 1_000_000.0
                } else if i < SPECIAL.len() * 4 {
                    SPECIAL[(i + r as usize) % SPECIAL.len()]
                } else {
                    ((r % 2_000_001) as f64 - 1_000_000.0) / 1000.0
                };
                match d.dtype() {
                    DType::I64 => Value::I64((r % 9) as i64 - 4),
                    t => Value::F64(v).cast(t),
                }
            })
            .collect();
        arrays.insert(
            n.to_string(),
            HostArray::from_values(d.dtype(), &[N], &vals).unwrap(),
        );
    }
    Bindings {
        arrays,
        symbols: BTreeMap::new(),
    }
}

fn run(s: &Sdfg, b: &Bindings) -> Bindings {
    let mut b = b.clone();
    interp::run(s, &mut b).unwrap();
    b
}

fn optimized(s: &Sdfg, pass: EGraphPass) -> (Sdfg, sdflow_transforms::Changes) {
    let mut o = s.clone();
    let c = pass.run(&mut o);
    o.validate()
        .unwrap_or_else(|p| panic!("invalid after the pass: {p:?}"));
    (o, c)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// Exact rules: bitwise equal outputs (NaN equal to NaN: outputs store the
    /// canonical NaN) on special values, and the pass is idempotent.
    #[test]
    fn exact_rules_keep_every_bit(e in expr(), f in expr(), seed in 0u64..1000) {
        let o = format!("o = {e}");
        let p = format!("p = {f} + ({e})");
        let s = program(&[o.as_str(), p.as_str()]);
        prop_assume!(s.validate().is_ok());
        let (opt, _) = optimized(&s, EGraphPass::default());
        let b = inputs(&s, seed, false);
        let (mut before, mut after) = (b.clone(), b.clone());
        match (interp::run(&s, &mut before), interp::run(&opt, &mut after)) {
            (Ok(()), Ok(())) => {}
            // An integer division by zero raises before and after.
            (Err(x), Err(y)) => {
                prop_assert!(x.to_string().contains("division by zero"), "{}", x);
                prop_assert!(y.to_string().contains("division by zero"), "{}", y);
                return Ok(());
            }
            (x, y) => prop_assert!(false, "{:?} before, {:?} after", x, y),
        }
        for n in ["o", "p"] {
            prop_assert_eq!(before.arrays[n].bits(), after.arrays[n].bits(), "{} differs: {}\n{:?}", n, o, opt.states[0].graph);
        }
        let mut again = opt.clone();
        let c = EGraphPass::default().run(&mut again);
        prop_assert!(c.is_empty() && again == opt, "not idempotent: {}", c);
    }
}

/// Sums and products of positive inputs (no cancellation), which fast-math reassociates
/// and distributes.
fn positive_expr() -> impl Strategy<Value = Expr> {
    let leaf = prop_oneof![
        Just(Expr::var("a")),
        Just(Expr::var("b")),
        Just(Expr::var("c")),
        Just(Expr::f64(0.3)),
        Just(Expr::f64(3.0)),
    ];
    leaf.prop_recursive(5, 40, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Expr::bin(BinOp::Add, a, b)),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Expr::bin(BinOp::Mul, a, b)),
            (inner.clone(), inner).prop_map(|(a, b)| Expr::bin(
                BinOp::Div,
                a,
                Expr::bin(BinOp::Add, b, Expr::f64(7.0))
            )),
        ]
    })
}

/// The documented fast-math tolerance: results within 2^-40 relative (a few hundred
/// ulp) on finite inputs without cancellation.
const FAST_MATH_REL: f64 = 1.0 / (1u64 << 40) as f64;

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn fast_math_stays_within_its_tolerance(e in positive_expr(), seed in 0u64..1000) {
        let o = format!("o = {e}");
        let s = program(&[o.as_str(), "p = a"]);
        let (opt, _) = optimized(&s, EGraphPass::fast_math());
        let b = inputs(&s, seed, true);
        let (before, after) = (run(&s, &b), run(&opt, &b));
        for (x, y) in before.arrays["o"].to_f64_vec().iter().zip(after.arrays["o"].to_f64_vec()) {
            prop_assert!(x.is_finite() && y.is_finite());
            prop_assert!((x - y).abs() <= FAST_MATH_REL * x.abs(), "{} vs {} for {}", x, y, o);
        }
    }
}

#[test]
fn fast_math_changes_results_where_exact_rules_do_not() {
    // (a + b) + c reassociated and 3.0 * (a + b) distributed: rounding differs for some
    // inputs, which is why these rules are opt-in.
    let s = program(&["o = (a * 0.1 + b * 0.1) + c * 0.1", "p = a / 10.0"]);
    let (exact, c) = optimized(&s, EGraphPass::default());
    assert!(c.is_empty(), "nothing to gain exactly: {c}");
    assert_eq!(exact, s);
    let (fast, c) = optimized(&s, EGraphPass::fast_math());
    assert_eq!(c.get("bodies_optimized"), 1, "{c}");
    let b = inputs(&s, 3, true);
    let (x, y) = (run(&s, &b), run(&fast, &b));
    assert_ne!(
        x.arrays["o"].bits(),
        y.arrays["o"].bits(),
        "fast-math changed nothing"
    );
    for (x, y) in x.arrays["o"]
        .to_f64_vec()
        .iter()
        .zip(y.arrays["o"].to_f64_vec())
    {
        assert!((x - y).abs() <= FAST_MATH_REL * x.abs());
    }
}

/// The code of the single tasklet of the first map.
fn body_code(s: &Sdfg) -> Vec<String> {
    let g = &s.states[0].graph;
    let mut out = Vec::new();
    for n in g.node_ids() {
        if let sdflow_ir::Node::Map(m) = g.node(n) {
            for b in m.body.node_ids() {
                if let sdflow_ir::Node::Tasklet(t) = m.body.node(b) {
                    out.extend(t.code.iter().map(|s| s.to_string()));
                }
            }
        }
    }
    out
}

#[test]
fn five_copies_of_a_subexpression_are_computed_once() {
    let d = "(a * b - c / 3.0)";
    let code = format!("o = {d} + {d} * {d} - {d} / ({d} + 1.0)");
    let s = program(&[code.as_str(), "p = a"]);
    let before = PointCounts::of(&s);
    let (opt, c) = optimized(&s, EGraphPass::default());
    assert_eq!(c.get("bodies_optimized"), 1, "{c}");
    let after = PointCounts::of(&opt);
    // 5 × (×, −, ÷) + 5 = 20 operations, 5 + 1 of them divisions; after: 3 + 5, 2.
    assert_eq!((before.flops, before.divisions), (20, 6));
    assert_eq!(
        (after.flops, after.divisions),
        (8, 2),
        "{:?}",
        body_code(&opt)
    );
    let lets: Vec<String> = body_code(&opt)
        .into_iter()
        .filter(|l| l.starts_with("_t"))
        .collect();
    assert_eq!(lets.len(), 1, "{:?}", body_code(&opt));
    let b = inputs(&s, 1, false);
    assert_eq!(
        run(&s, &b).arrays["o"].bits(),
        run(&opt, &b).arrays["o"].bits()
    );
}

#[test]
fn a_static_flag_folds_a_select_away() {
    let mut b = SdfgBuilder::new("flag");
    b.static_symbol("on", Value::Bool(false));
    for n in ["a", "b", "o"] {
        b.array(n, DType::F64, [N as i64]);
    }
    b.state("s", |s| {
        s.map("m", &["i"], &["0:96"], |m| {
            m.tasklet(
                "t",
                &[("a", "a[i]"), ("b", "b[i]")],
                &[("o", "o[i]")],
                "o = select(on, a * b + 1.0, a - b)",
            );
        });
    });
    let s = b.build();
    let (opt, c) = optimized(&s, EGraphPass::default());
    assert_eq!(c.get("bodies_optimized"), 1, "{c}");
    assert_eq!(body_code(&opt), vec!["_out0 = _in0 - _in1".to_string()]);
    let bind = inputs(&s, 2, false);
    assert_eq!(
        run(&s, &bind).arrays["o"].bits(),
        run(&opt, &bind).arrays["o"].bits()
    );
}

#[test]
fn exact_identities_are_removed_and_inexact_ones_kept() {
    let s = program(&[
        "o = (a * 1.0 - 0.0) / 1.0 + b / 4.0 + -(-c) * 2.0",
        "p = (a + 0.0) + b * 0.0 + (c - c)",
    ]);
    let (opt, _) = optimized(&s, EGraphPass::default());
    let code = body_code(&opt);
    let o = code.iter().find(|l| l.starts_with("_out0")).unwrap();
    let p = code.iter().find(|l| l.starts_with("_out1")).unwrap();
    // a*1, -0, /1, --c go; /4 becomes *0.25; c*2 is c+c (same cost, either is exact).
    assert!(
        !o.contains("1.0") && !o.contains("4.0") && o.contains("0.25"),
        "{o}"
    );
    // a + 0.0 (-0 + 0 = +0), b * 0.0 (inf * 0 = nan) and c - c (inf - inf) stay.
    assert!(
        p.contains("+ 0.0") && p.contains("* 0.0") && p.contains("- _in2"),
        "{p}"
    );
    let b = inputs(&s, 5, false);
    let (x, y) = (run(&s, &b), run(&opt, &b));
    assert_eq!(x.arrays["o"].bits(), y.arrays["o"].bits());
    assert_eq!(x.arrays["p"].bits(), y.arrays["p"].bits());
}

#[test]
fn integer_division_and_the_clock_are_kept_in_order() {
    let mut b = SdfgBuilder::new("impure");
    b.array("k", DType::I64, [N as i64])
        .array("o", DType::I64, [N as i64])
        .array("p", DType::I64, [N as i64]);
    b.state("s", |s| {
        s.map("m", &["i"], &["0:96"], |m| {
            m.tasklet(
                "t",
                &[("k", "k[i]")],
                &[("o", "o[i]"), ("p", "p[i]")],
                "t0 = wall_ns(); q = 7 // k; r = 7 // k; unused = 1 % k; t1 = wall_ns(); o = q + r + (t1 - t1); p = select(true, k, q)",
            );
        });
    });
    let s = b.build();
    let (opt, c) = optimized(&s, EGraphPass::default());
    assert_eq!(c.get("bodies_optimized"), 1, "{c}");
    let code = body_code(&opt);
    let divs = code.iter().filter(|l| l.contains("//")).count();
    let mods = code.iter().filter(|l| l.contains('%')).count();
    let clocks: Vec<usize> = code
        .iter()
        .enumerate()
        .filter(|(_, l)| l.contains("wall_ns"))
        .map(|(k, _)| k)
        .collect();
    assert_eq!((divs, mods, clocks.len()), (2, 1, 2), "{code:?}");
    // Division by zero still raises, as before the pass.
    let mut bind = inputs(&s, 0, false);
    let zeros = HostArray::from_values(DType::I64, &[N], &vec![Value::I64(0); N]).unwrap();
    bind.arrays.insert("k".into(), zeros);
    let e1 = interp::run(&s, &mut bind.clone()).unwrap_err().to_string();
    let e2 = interp::run(&opt, &mut bind.clone())
        .unwrap_err()
        .to_string();
    assert!(
        e1.contains("division by zero") && e2.contains("division by zero"),
        "{e1} / {e2}"
    );
}

#[test]
fn lap_of_lap_after_recomputation_loads_each_neighbour_once() {
    let mut s = sdflow_ir::testkit::stencil_chain(2);
    let before = PointCounts::of(&s);
    let mut p = Pipeline::from_names(&["state_fusion", "map_fusion"]).unwrap();
    p = p
        .replace(
            "map_fusion",
            Box::new(sdflow_transforms::MapFusion {
                tile_rows: 0,
                ..Default::default()
            }),
        )
        .unwrap();
    p.run(&mut s).unwrap();
    let fused = PointCounts::of(&s);
    let mut opt = s.clone();
    let c = EGraphPass::default().run(&mut opt);
    let after = PointCounts::of(&opt);
    assert_eq!(c.get("tasklets_merged"), 4, "{c}");
    // Recomputation: 4 inner averages of 4 loads each (and 4 reads of their scalars);
    // after the pass each distinct
    // neighbour of the two-step stencil (9 points) is one load, and each inner average
    // is computed once (4 × 4 + 4 operations).
    assert_eq!(
        (before.loads, fused.loads),
        (8, 20),
        "{before:?} -> {fused:?}"
    );
    assert_eq!(after.loads, 9, "{fused:?} -> {after:?}");
    assert_eq!(after.flops, 20, "{fused:?} -> {after:?}");
    let inputs = interp::random_bindings(&s, &sdflow_ir::testkit::sample_symbols(&s), 1).unwrap();
    let (x, y) = (run(&s, &inputs), run(&opt, &inputs));
    sdflow_ir::testkit::assert_same_arguments(&s, &x, &y, "optimized");
}

/// Greedy extraction picked `-a + -a` for `o` and `a - (a + a)` for `p` (4 operations)
/// where sharing `a + a` needs 3; the pass repeats while its own output extracts
/// cheaper, so running it again changes nothing.
#[test]
fn the_pass_is_at_its_own_fixed_point_where_greedy_extraction_is_not_optimal() {
    let s = program(&["o = -a + -a", "p = a + (-a + -a)"]);
    let (opt, c) = optimized(&s, EGraphPass::default());
    assert_eq!(c.get("bodies_optimized"), 1, "{c}");
    assert_eq!(PointCounts::of(&opt).flops, 3, "{:?}", body_code(&opt));
    let (again, c) = optimized(&opt, EGraphPass::default());
    assert!(c.is_empty(), "{c}");
    assert_eq!(again, opt);
}

/// The exact-rule property is not vacuous: most random expressions are rewritten.
#[test]
fn random_expressions_are_rewritten() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let (mut valid, mut changed) = (0, 0);
    for _ in 0..300 {
        let e = expr().new_tree(&mut runner).unwrap().current();
        let o = format!("o = {e}");
        let s = program(&[o.as_str(), "p = a"]);
        if s.validate().is_err() {
            continue;
        }
        valid += 1;
        if !optimized(&s, EGraphPass::default()).1.is_empty() {
            changed += 1;
        }
    }
    assert!(valid >= 250, "{valid} valid of 300");
    assert!(changed * 3 >= valid, "{changed} of {valid} rewritten");
}

/// Bodies of 10,000 expression nodes stay within the bounds (the node limit or
/// saturation ends the run, reported), keep every bit, and cost no more than before.
#[test]
fn ten_thousand_node_bodies_are_bounded_and_exact() {
    for seed in [1, 2] {
        let s = sdflow_ir::testkit::large_body(10_000, seed);
        let before = PointCounts::of(&s);
        assert!(before.flops >= 3000, "{before:?}");
        let (opt, c) = optimized(&s, EGraphPass::default());
        assert_eq!(c.get("bodies_optimized"), 1, "{c}");
        let note = c.notes.join("\n");
        assert!(
            note.contains("saturated")
                || note.contains("node limit")
                || note.contains("iteration limit"),
            "{note}"
        );
        let after = PointCounts::of(&opt);
        assert!(after.flops < before.flops, "{before:?} -> {after:?}");
        let symbols = [("N".to_string(), Value::I64(64))].into();
        let inputs = interp::random_bindings(&s, &symbols, seed).unwrap();
        assert_eq!(
            run(&s, &inputs).arrays["out"].bits(),
            run(&opt, &inputs).arrays["out"].bits()
        );
        // Deterministic: the same input gives the same program.
        assert_eq!(optimized(&s, EGraphPass::default()).0, opt);
    }
}

/// The fused dycore time step: the pass finds work in its bodies and keeps the
/// interpreter's results (the bitwise comparison of the whole model against its
/// plain-loop reference is in the workspace's dycore tests).
#[test]
fn the_fused_dycore_bodies_get_cheaper() {
    let json = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/dycore.sdfg.json"
    ))
    .unwrap();
    let mut s = sdflow_ir::format::from_json(&json).unwrap();
    Pipeline::cpu()
        .disable("egraph")
        .unwrap()
        .run(&mut s)
        .unwrap();
    let fused = PointCounts::of(&s);
    let (opt, c) = optimized(&s, EGraphPass::default());
    let after = PointCounts::of(&opt);
    assert!(c.get("bodies_optimized") >= 4, "{c}");
    assert!(
        after.flops < fused.flops && after.loads < fused.loads,
        "{fused} -> {after}"
    );
}

/// Bodies with the same code are not all the same body: one whose two connectors read
/// the same element computes `sqrt` once, one reading two arrays is left as it is (the
/// pass remembers unchanged code, keyed by which reads coincide).
#[test]
fn same_code_with_coinciding_reads_is_optimized_on_its_own() {
    let mut b = SdfgBuilder::new("twice");
    for n in ["a", "b", "o1", "o2"] {
        b.array(n, DType::F64, [N as i64]);
    }
    b.state("s", |s| {
        s.map("distinct", &["i"], &["0:96"], |m| {
            m.tasklet(
                "t",
                &[("x", "a[i]"), ("y", "b[i]")],
                &[("o", "o2[i]")],
                "o = sqrt(x) + sqrt(y)",
            );
        });
        s.map("same", &["i"], &["0:96"], |m| {
            m.tasklet(
                "t",
                &[("x", "a[i]"), ("y", "a[i]")],
                &[("o", "o1[i]")],
                "o = sqrt(x) + sqrt(y)",
            );
        });
    });
    let s = b.build();
    let pass = EGraphPass::default();
    let mut opt = s.clone();
    let c = pass.run(&mut opt);
    assert_eq!(c.get("bodies_optimized"), 1, "{c}");
    let counts = PointCounts::of(&opt);
    assert_eq!((counts.flops, counts.special), (5, 3), "{counts:?}");
    // The same pass object again (its memory of unchanged bodies filled) changes nothing.
    let mut again = opt.clone();
    assert!(pass.run(&mut again).is_empty());
    let bind = inputs(&s, 4, false);
    let (x, y) = (run(&s, &bind), run(&opt, &bind));
    assert_eq!(x.arrays["o1"].bits(), y.arrays["o1"].bits());
    assert_eq!(x.arrays["o2"].bits(), y.arrays["o2"].bits());
}

#[test]
fn fast_math_forms_fused_multiply_adds() {
    let s = program(&["o = a * b + c", "p = c + a * 3.0"]);
    let (exact, c) = optimized(&s, EGraphPass::default());
    assert!(c.is_empty(), "{c}");
    assert_eq!(exact, s);
    let (fast, c) = optimized(&s, EGraphPass::fast_math());
    assert_eq!(c.get("bodies_optimized"), 1, "{c}");
    let code = body_code(&fast);
    assert_eq!(
        code.iter().filter(|l| l.contains("fma(")).count(),
        2,
        "{code:?}"
    );
    let b = inputs(&s, 9, true);
    let (x, y) = (run(&s, &b), run(&fast, &b));
    for (x, y) in x.arrays["o"]
        .to_f64_vec()
        .iter()
        .zip(y.arrays["o"].to_f64_vec())
    {
        assert!((x - y).abs() <= FAST_MATH_REL * x.abs());
    }
}

/// GT4Py's unrolled neighbour values pass through copies between body-local scalars (a
/// value copied into a slab element) and a reduction's scalar is copied into its field:
/// the copies join the merged tasklet, and an element read twice is one input.
#[test]
fn copies_from_body_locals_are_merged() {
    let mut b = SdfgBuilder::new("copies");
    b.array("a", DType::F64, [96])
        .array("o", DType::F64, [96])
        .transient_scalar("v", DType::F64)
        .transient_scalar("w", DType::F64)
        .transient_scalar("r", DType::F64);
    b.state("s", |s| {
        s.map("m", &["i"], &["0:96"], |m| {
            m.tasklet("t0", &[("x", "a[i]")], &[("y", "v")], "y = x * 2.0");
            m.copy("v", "w");
            m.tasklet(
                "t1",
                &[("x", "w"), ("z", "a[i]")],
                &[("y", "r")],
                "y = x + z",
            );
            m.copy("r", "o[i]");
        });
    });
    let s = b.build();
    assert_eq!(s.validate(), Ok(()));
    let (opt, c) = optimized(&s, EGraphPass::default());
    assert_eq!(
        (c.get("bodies_optimized"), c.get("copies_merged")),
        (1, 2),
        "{c}"
    );
    let g = &opt.states[0].graph;
    let m = g
        .node_ids()
        .into_iter()
        .find_map(|n| match g.node(n) {
            sdflow_ir::Node::Map(m) => Some(m.clone()),
            _ => None,
        })
        .unwrap();
    let tasklets: Vec<&sdflow_ir::Tasklet> = m
        .body
        .node_ids()
        .into_iter()
        .filter_map(|n| match m.body.node(n) {
            sdflow_ir::Node::Tasklet(t) => Some(t),
            _ => None,
        })
        .collect();
    assert_eq!(tasklets.len(), 1, "{:?}", body_code(&opt));
    assert_eq!(tasklets[0].inputs.len(), 1, "{:?}", body_code(&opt));
    let copies = m
        .body
        .edge_ids()
        .into_iter()
        .filter(|&e| {
            let (x, y) = m.body.endpoints(e);
            m.body.node(x).as_access().is_some() && m.body.node(y).as_access().is_some()
        })
        .count();
    assert_eq!(copies, 0);
    let b = inputs(&s, 3, false);
    assert_eq!(
        run(&s, &b).arrays["o"].bits(),
        run(&opt, &b).arrays["o"].bits()
    );
}
