//! Float arithmetic the backends once disagreed on — `cbrt`, `min`/`max` of signed zeros
//! and NaNs, the sign of NaN results — and the fused multiply-add `fma`, compared bitwise between the interpreter and
//! compiled code over special values (±0, ±inf, NaNs of both signs, subnormals, the
//! extremes) and many random bit patterns, in `f64` and `f32`, in a loop that vectorizes
//! and in one that stays scalar (the two forms of NaN canonicalization).

use std::collections::BTreeMap;

use sdflow_codegen::CpuBackend;
use sdflow_ir::interp::{self, Bindings, HostArray};
use sdflow_ir::{DType, Sdfg, SdfgBuilder, Value};

/// The operations at every point of a map; with `scalar_loop`, inside an inner map of one
/// iteration, which keeps the outer loop scalar (as a neighbour loop does): NaNs are then
/// canonicalized by the compare-and-blend form.
fn program(t: DType, scalar_loop: bool) -> Sdfg {
    let mut b = SdfgBuilder::new(&format!("arith_{t}"));
    b.symbol("N", DType::I64);
    for a in [
        "x", "y", "cb", "mn", "mx", "sq", "pr", "df", "fm", "cs", "ch", "cs2", "ch2",
    ] {
        b.array(a, t, ["N"]);
    }
    for v in ["s", "u", "s2", "s3", "u2"] {
        b.transient_scalar(v, t);
    }
    let point = |m: &mut sdflow_ir::DataflowBuilder<'_>| {
        m.tasklet(
            "t",
            &[("a", "x[i]"), ("b", "y[i]")],
            &[
                ("c", "cb[i]"),
                ("lo", "mn[i]"),
                ("hi", "mx[i]"),
                ("r", "sq[i]"),
                ("p", "pr[i]"),
                ("d", "df[i]"),
                ("f", "fm[i]"),
            ],
            "c = cbrt(a); lo = min(a, b); hi = max(a, b); r = sqrt(a); p = a * b; d = b - a; \
             f = fma(a, b, -(a * b))",
        );
        // Values passed through scalars: a NaN a tasklet writes to a scalar only another
        // tasklet reads may keep its payload there (`u`); one a copy moves into an array
        // must be canonical (`s`).
        m.tasklet(
            "v",
            &[("a", "x[i]"), ("b", "y[i]")],
            &[("p", "s"), ("q", "u")],
            "p = a * b; q = b - a",
        );
        m.copy("s", "cs[i]");
        m.tasklet("w", &[("a", "u")], &[("o", "ch[i]")], "o = a * 1.5");
        // The same one copy further: a product through `s2` and `s3` into an array, `u`
        // through `u2` into a tasklet.
        m.tasklet(
            "v2",
            &[("a", "x[i]"), ("b", "y[i]")],
            &[("p", "s2")],
            "p = a * b",
        );
        m.copy("s2", "s3");
        m.copy("s3", "cs2[i]");
        m.copy("u", "u2");
        m.tasklet("w2", &[("a", "u2")], &[("o", "ch2[i]")], "o = a - 0.5");
    };
    b.state("main", |s| {
        s.map("m", &["i"], &["0:N"], |m| {
            if scalar_loop {
                m.map("one", &["j"], &["0:1"], point);
            } else {
                point(m);
            }
        });
    });
    b.build()
}

/// Special values, paired with each other, then random bit patterns.
fn inputs_f64() -> (Vec<f64>, Vec<f64>) {
    let special = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        -f64::NAN,
        f64::from_bits(0x7ff0_0000_0000_0001), // a signalling NaN
        f64::from_bits(0xfff8_0000_0000_1234),
        f64::MIN_POSITIVE,
        f64::from_bits(1),                      // the smallest subnormal
        -f64::from_bits(0x000f_ffff_ffff_ffff), // the largest negative subnormal
        f64::MAX,
        f64::MIN,
        27.0,
        1e-300,
    ];
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for a in special {
        for b in special {
            x.push(a);
            y.push(b);
        }
    }
    let mut s: u64 = 0x2545_f491_4f6c_dd1d;
    for _ in 0..20_000 {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        x.push(f64::from_bits(s));
        // Moderate magnitudes too, where cbrt's rounding is exercised most.
        y.push(f64::from_bits(s >> 2 | 0x3ff0_0000_0000_0000) - 1.5);
    }
    (x, y)
}

fn run_both(t: DType, x: Vec<Value>, y: Vec<Value>) {
    run_program(t, &x, &y, false);
    run_program(t, &x, &y, true);
}

fn run_program(t: DType, x: &[Value], y: &[Value], scalar_loop: bool) {
    let s = program(t, scalar_loop);
    let n = x.len();
    let mut b = Bindings::default();
    b.symbols.insert("N".into(), Value::I64(n as i64));
    b.arrays
        .insert("x".into(), HostArray::from_values(t, &[n], x).unwrap());
    b.arrays
        .insert("y".into(), HostArray::from_values(t, &[n], y).unwrap());
    for a in [
        "cb", "mn", "mx", "sq", "pr", "df", "fm", "cs", "ch", "cs2", "ch2",
    ] {
        b.arrays.insert(a.into(), HostArray::zeros(t, &[n]));
    }
    let mut expected = b.clone();
    interp::run(&s, &mut expected).unwrap();
    let backend = CpuBackend {
        cache: None,
        ..CpuBackend::default()
    };
    let source = backend.generate(&s).unwrap();
    let blend = source.contains("= sdf_canon_blend(") || source.contains("= sdf_canonf_blend(");
    assert_eq!(blend, scalar_loop, "{t}: the canonicalization form");
    let prog = backend.build(&s).unwrap();
    let mut got = b.clone();
    prog.run_bindings(&mut got).unwrap();
    let mut bad: BTreeMap<&str, usize> = BTreeMap::new();
    for a in [
        "cb", "mn", "mx", "sq", "pr", "df", "fm", "cs", "ch", "cs2", "ch2",
    ] {
        let (e, g) = (expected.arrays[a].bits(), got.arrays[a].bits());
        let first = e.iter().zip(&g).position(|(p, q)| p != q);
        if let Some(k) = first {
            eprintln!(
                "{t} '{a}' differs at {k}: x={:?} y={:?}: interpreter {:#x}, compiled {:#x}",
                x[k], y[k], e[k], g[k]
            );
            bad.insert(a, e.iter().zip(&g).filter(|(p, q)| p != q).count());
        }
    }
    assert!(
        bad.is_empty(),
        "{t} (scalar loop {scalar_loop}): elements that differ: {bad:?}"
    );
    // The defined cases, spelled out: min/max of signed zeros and NaNs, NaN results.
    let at = |a: &str, k: usize| expected.arrays[a].values()[k];
    let pos = |v: f64, w: f64| {
        x.iter().zip(y).position(|(p, q)| {
            p.as_f64().to_bits() == v.to_bits() && q.as_f64().to_bits() == w.to_bits()
        })
    };
    if t == DType::F64 {
        let k = pos(0.0, -0.0).unwrap();
        assert_eq!(at("mn", k).as_f64().to_bits(), (-0.0f64).to_bits());
        assert_eq!(at("mx", k).as_f64().to_bits(), 0.0f64.to_bits());
        let k = pos(-0.0, 0.0).unwrap();
        assert_eq!(at("mn", k).as_f64().to_bits(), (-0.0f64).to_bits());
        assert_eq!(at("mx", k).as_f64().to_bits(), 0.0f64.to_bits());
        let k = pos(f64::NAN, 1.0).unwrap();
        assert_eq!(at("mn", k).as_f64(), 1.0);
        assert_eq!(at("mx", k).as_f64(), 1.0);
        // sqrt(-1) and NaN arithmetic: the canonical NaN, whatever the hardware made.
        let k = pos(-1.0, 0.0).unwrap();
        assert_eq!(at("sq", k).as_f64().to_bits(), f64::NAN.to_bits());
        let k = pos(-f64::NAN, 1.0).unwrap();
        assert_eq!(at("pr", k).as_f64().to_bits(), f64::NAN.to_bits());
        let k = pos(27.0, 0.0).unwrap();
        assert_eq!(at("cb", k).as_f64(), 3.0);
        // fma(a, b, -(a*b)) is the rounding error of a*b: not zero for most random pairs
        // (a separate multiply and add would give exactly zero).
        let nonzero = (0..x.len())
            .filter(|&k| at("fm", k).as_f64().is_finite() && at("fm", k).as_f64() != 0.0)
            .count();
        assert!(nonzero > x.len() / 4, "{nonzero} of {}", x.len());
        // Within an ulp of the correctly rounded root (Rust's).
        let cb = expected.arrays["cb"].values();
        for (k, v) in x.iter().enumerate() {
            let (v, got) = (v.as_f64(), cb[k].as_f64());
            if v.is_finite() {
                let d = (got.to_bits() as i64 - v.cbrt().to_bits() as i64).unsigned_abs();
                assert!(d <= 1, "cbrt({v:e}) = {got:e}, {d} ulps off");
            }
        }
    }
}

#[test]
fn float_arithmetic_agrees_bitwise_on_special_and_random_values() {
    let (x, y) = inputs_f64();
    run_both(
        DType::F64,
        x.iter().map(|&v| Value::F64(v)).collect(),
        y.iter().map(|&v| Value::F64(v)).collect(),
    );
    // f32: the same values rounded, and random f32 bit patterns.
    let mut x32: Vec<Value> = x.iter().map(|&v| Value::F32(v as f32)).collect();
    let mut y32: Vec<Value> = y.iter().map(|&v| Value::F32(v as f32)).collect();
    let mut s: u32 = 0x9e37_79b9;
    for _ in 0..20_000 {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        x32.push(Value::F32(f32::from_bits(s)));
        y32.push(Value::F32(f32::from_bits(s.rotate_left(7))));
    }
    for v in [
        f32::from_bits(1),
        -f32::from_bits(0x007f_ffff),
        -0.0,
        f32::NAN,
        -f32::NAN,
    ] {
        x32.push(Value::F32(v));
        y32.push(Value::F32(-0.0));
    }
    run_both(DType::F32, x32, y32);
}

/// The shapes GCC once rewrote, each over many values, compiled against the interpreter
/// before and after the optimizer: `0.0 - x` over an integer conversion, an absolute
/// value and a bool conversion (GCC made it `-x`, wrong for `x = +0.0`), and through
/// `1/(…)` and `atan2(…, -1)`, where the sign of zero becomes ±inf and ±π; the negated
/// fused product `-fma(a, b, c)` (fused into one instruction giving `+0.0` for `-0.0`);
/// and math functions of constants, as literals and as static float symbols (GCC folded
/// them to the correctly rounded value where the C library differs in the last bit).
#[test]
fn the_arithmetic_we_print_is_the_arithmetic_that_runs() {
    const CONSTANTS: usize = 40;
    let mut s: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (s >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut b = SdfgBuilder::new("shapes");
    b.symbol("N", DType::I64);
    for (a, t) in [
        ("k", DType::I64),
        ("x", DType::F64),
        ("g", DType::F32),
        ("p", DType::Bool),
        ("fa", DType::F64),
        ("fb", DType::F64),
        ("fc", DType::F64),
    ] {
        b.array(a, t, ["N"]);
    }
    let mut code = vec![
        "neg_k = 0.0 - f64(k)",
        "neg_x = 0.0 - abs(x)",
        "neg_g = 0.0f32 - abs(g)",
        "neg_p = 0.0 - f64(p)",
        "inv_x = 1.0 / (0.0 - abs(x))",
        "ang_k = atan2(0.0 - f64(k), -1.0)",
        "nfma = -fma(fa, fb, fc)",
        "nfma_mul = -fma(fa, fb, fc) * 3.0",
        "nfma_sel = select(p, -fma(fa, fb, fc), 1.0)",
    ]
    .into_iter()
    .map(|c| c.to_string())
    .collect::<Vec<_>>();
    let funcs = [
        "sinh", "cosh", "tanh", "log10", "exp", "log", "sin", "tan", "atan",
    ];
    for k in 0..CONSTANTS {
        let v = next() * 3.0;
        for f in funcs {
            code.push(format!("c_{f}_{k} = {f}({v:?})"));
        }
        b.static_symbol(&format!("s{k}"), Value::F64(next() * 3.0));
        for f in funcs {
            code.push(format!("s_{f}_{k} = {f}(s{k})"));
        }
    }
    let outs: Vec<String> = code
        .iter()
        .map(|c| c.split(" = ").next().unwrap().to_string())
        .collect();
    for o in &outs {
        b.array(o, if o == "neg_g" { DType::F32 } else { DType::F64 }, ["N"]);
    }
    let code_ref = &code;
    let outs_ref = &outs;
    b.state("main", |st| {
        st.map("m", &["i"], &["0:N"], |m| {
            for (c, o) in code_ref.iter().zip(outs_ref) {
                let ins: Vec<(&str, String)> = ["k", "x", "g", "p", "fa", "fb", "fc"]
                    .into_iter()
                    .filter(|a| c.split(" = ").nth(1).unwrap().contains(a))
                    .map(|a| (a, format!("{a}[i]")))
                    .collect();
                let ins: Vec<(&str, &str)> = ins.iter().map(|(a, m)| (*a, m.as_str())).collect();
                let out = format!("{o}[i]");
                m.tasklet(o, &ins, &[("v", &out)], &c.replacen(o, "v", 1));
            }
        });
    });
    let sdfg = b.build();
    assert_eq!(sdfg.validate(), Ok(()));
    // Inputs with zeros of both signs among random values; fused products that cancel
    // exactly (a * b = -c) among random ones.
    let n = 4003;
    let (mut k, mut x, mut g, mut p, mut fa, mut fb, mut fc) =
        (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    for i in 0..n {
        let r = next();
        k.push(Value::I64(if i % 3 == 0 {
            0
        } else {
            (r * 20.0) as i64 - 10
        }));
        x.push(Value::F64(match i % 4 {
            0 => 0.0,
            1 => -0.0,
            _ => r * 8.0 - 4.0,
        }));
        g.push(Value::F32(if i % 4 < 2 {
            -0.0
        } else {
            (r * 8.0 - 4.0) as f32
        }));
        p.push(Value::Bool(i % 2 == 0));
        let (a, bb) = (
            (next() * 64.0).floor() / 16.0 - 2.0,
            (next() * 64.0).floor() / 8.0,
        );
        fa.push(Value::F64(a));
        fb.push(Value::F64(bb));
        fc.push(Value::F64(if i % 2 == 0 { -(a * bb) } else { next() }));
    }
    let mut inputs = Bindings::default();
    inputs.symbols.insert("N".into(), Value::I64(n as i64));
    for (a, t, v) in [
        ("k", DType::I64, &k),
        ("x", DType::F64, &x),
        ("g", DType::F32, &g),
        ("p", DType::Bool, &p),
        ("fa", DType::F64, &fa),
        ("fb", DType::F64, &fb),
        ("fc", DType::F64, &fc),
    ] {
        inputs
            .arrays
            .insert(a.into(), HostArray::from_values(t, &[n], v).unwrap());
    }
    for o in &outs {
        let t = if o == "neg_g" { DType::F32 } else { DType::F64 };
        inputs.arrays.insert(o.clone(), HostArray::zeros(t, &[n]));
    }
    let mut expected = inputs.clone();
    interp::run(&sdfg, &mut expected).unwrap();
    // The interpreter's signs: +0.0 from `0.0 - (+0.0)`, +inf and +π through it, -0.0
    // from the negated exact-zero fused product.
    assert_eq!(expected.arrays["neg_k"].values()[0].as_f64().to_bits(), 0);
    assert_eq!(expected.arrays["inv_x"].values()[0].as_f64(), f64::INFINITY);
    assert_eq!(
        expected.arrays["ang_k"].values()[0].as_f64(),
        std::f64::consts::PI
    );
    assert_eq!(
        expected.arrays["nfma"].values()[0].as_f64().to_bits(),
        (-0.0f64).to_bits()
    );
    let mut opt = sdfg.clone();
    sdflow_transforms::Pipeline::cpu().run(&mut opt).unwrap();
    for (what, p) in [("original", &sdfg), ("optimized", &opt)] {
        let prog = CpuBackend {
            cache: None,
            ..CpuBackend::default()
        }
        .build(p)
        .unwrap();
        let mut got = inputs.clone();
        prog.run_bindings(&mut got).unwrap();
        let bad: Vec<&String> = outs
            .iter()
            .filter(|o| expected.arrays[*o].bits() != got.arrays[*o].bits())
            .collect();
        assert!(
            bad.is_empty(),
            "{what}: {} outputs differ: {bad:?}",
            bad.len()
        );
    }
}
