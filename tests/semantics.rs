//! One meaning everywhere: conditional evaluation is lazy (only the taken branch of a
//! `select`, the right operand of `&&`/`||` only when needed) in the interpreter, the
//! e-graph and the C backend; an input that the code reads only under a condition is
//! read only when the condition asks for it.

use std::collections::BTreeMap;

use sdflow::codegen::CpuBackend;
use sdflow::ir::interp::{self, Bindings, HostArray};
use sdflow::ir::{DType, Sdfg, SdfgBuilder, Value};
use sdflow::transforms::Pipeline;

fn compiled(s: &Sdfg, inputs: &Bindings) -> Result<Bindings, String> {
    let prog = CpuBackend {
        cache: None,
        ..CpuBackend::default()
    }
    .build(s)
    .map_err(|e| e.to_string())?;
    prog.set_threads(2);
    let mut got = inputs.clone();
    prog.run_bindings(&mut got).map_err(|e| e.to_string())?;
    Ok(got)
}

fn interpreted(s: &Sdfg, inputs: &Bindings) -> Result<Bindings, String> {
    let mut got = inputs.clone();
    interp::run(s, &mut got).map_err(|e| e.to_string())?;
    Ok(got)
}

fn optimized(s: &Sdfg) -> Sdfg {
    let mut opt = s.clone();
    Pipeline::cpu().validate_each(true).run(&mut opt).unwrap();
    opt
}

fn bits(b: &Bindings, name: &str) -> Vec<u64> {
    b.arrays[name].bits()
}

/// The program, its optimized form, on the interpreter and compiled: all four succeed
/// and agree bit for bit on `out`, which is returned.
fn all_agree(s: &Sdfg, inputs: &Bindings) -> Vec<u64> {
    assert_eq!(s.validate(), Ok(()));
    let opt = optimized(s);
    let reference = interpreted(s, inputs).expect("interpreter");
    for (what, got) in [
        ("compiled", compiled(s, inputs)),
        ("optimized, interpreted", interpreted(&opt, inputs)),
        ("optimized, compiled", compiled(&opt, inputs)),
    ] {
        let got = got.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(bits(&got, "out"), bits(&reference, "out"), "{what}");
    }
    bits(&reference, "out")
}

fn i64s(v: &[i64]) -> HostArray {
    let vals: Vec<Value> = v.iter().map(|x| Value::I64(*x)).collect();
    HostArray::from_values(DType::I64, &[v.len()], &vals).unwrap()
}

fn f64s(v: &[f64]) -> HostArray {
    HostArray::from_f64(&[v.len()], v.to_vec()).unwrap()
}

fn bindings(arrays: &[(&str, HostArray)], n: i64) -> Bindings {
    Bindings {
        arrays: arrays
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        symbols: BTreeMap::from([("N".to_string(), Value::I64(n))]),
    }
}

/// `code` over `a[i]`, `b[i]` (i64) into `out[i]` (i64), one tasklet in a map.
fn int_program(code: &str) -> Sdfg {
    let mut p = SdfgBuilder::new("lazy");
    p.symbol("N", DType::I64)
        .array("a", DType::I64, ["N"])
        .array("b", DType::I64, ["N"])
        .array("out", DType::I64, ["N"]);
    p.state("s", |s| {
        s.map("m", &["i"], &["0:N"], |m| {
            m.tasklet(
                "t",
                &[("x", "a[i]"), ("y", "b[i]")],
                &[("o", "out[i]")],
                code,
            );
        });
    });
    p.build()
}

fn int_inputs() -> Bindings {
    bindings(
        &[
            ("a", i64s(&[7, -7, 9, 0, 5, 11])),
            ("b", i64s(&[2, 0, -4, 0, 3, 0])),
            ("out", i64s(&[0; 6])),
        ],
        6,
    )
}

fn as_i64(bits: &[u64]) -> Vec<i64> {
    bits.iter().map(|b| *b as i64).collect()
}

#[test]
fn select_evaluates_only_the_branch_it_takes() {
    let s = int_program("o = select(y != 0, x // y, 0)");
    assert_eq!(as_i64(&all_agree(&s, &int_inputs())), [3, 0, -3, 0, 1, 0]);
    // The other way round too.
    let s = int_program("o = select(y == 0, -1, x % y)");
    assert_eq!(
        as_i64(&all_agree(&s, &int_inputs())),
        [1, -1, -3, -1, 2, -1]
    );
}

#[test]
fn and_and_or_evaluate_their_right_operand_only_when_needed() {
    let s = int_program("o = select(y != 0 && x // y > 1, 1, 0)");
    assert_eq!(as_i64(&all_agree(&s, &int_inputs())), [1, 0, 0, 0, 0, 0]);
    let s = int_program("o = select(y == 0 || x % y == 1, 1, 0)");
    assert_eq!(as_i64(&all_agree(&s, &int_inputs())), [1, 1, 0, 1, 0, 1]);
}

#[test]
fn a_division_shared_by_two_branches_is_not_hoisted_out_of_them() {
    // The e-graph sees one value used twice; it must not become a local evaluated
    // before the select (which would divide by zero where the original does not).
    let s = int_program("q = 2; o = select(y != 0, x // y + q, 0) + select(y != 0, x // y, 1)");
    let opt = optimized(&s);
    assert_eq!(as_i64(&all_agree(&s, &int_inputs())), [8, 1, -4, 1, 4, 1]);
    let text = sdflow::ir::format::to_json(&opt);
    assert!(text.contains("//"), "the division is still there");
}

#[test]
fn an_unused_division_by_zero_still_fails_where_it_is_evaluated() {
    // Outside any condition the division runs: both backends stop.
    let s = int_program("d = x // y; o = x");
    let what = "tasklet 't': integer division by zero (-7 // 0) (in 'd = x // y')";
    assert_eq!(
        interpreted(&s, &int_inputs()).unwrap_err(),
        format!("sdfg 'lazy' / state 's' / map 'm' at i=1 / {what}")
    );
    assert_eq!(
        compiled(&s, &int_inputs()).unwrap_err(),
        format!("program 'lazy': sdfg 'lazy' / state 's' / map 'm' at i=1 / {what}")
    );
}

/// GT4Py's neighbour reads with a skip value: `f[tab[i]] if tab[i] != -1 else 0`, where
/// the read through the table is an input connector used only in the taken branch.
fn skip_value_program() -> Sdfg {
    let mut p = SdfgBuilder::new("skip");
    p.symbol("N", DType::I64)
        .symbol("M", DType::I64)
        .array("f", DType::F64, ["M"])
        .array("tab", DType::I64, ["N"])
        .array("out", DType::F64, ["N"]);
    p.state("s", |s| {
        s.map("m", &["i"], &["0:N"], |m| {
            m.tasklet(
                "t",
                &[("v", "f[tab[i]]"), ("k", "tab[i]")],
                &[("o", "out[i]")],
                "o = select(k != -1, v * 2.0, 0.0)",
            );
        });
    });
    p.build()
}

#[test]
fn an_input_read_only_under_a_condition_is_read_only_when_it_holds() {
    let s = skip_value_program();
    let mut inputs = bindings(
        &[
            ("f", f64s(&[1.5, 2.5, 3.5])),
            ("tab", i64s(&[2, -1, 0, -1, 1])),
            ("out", f64s(&[9.0; 5])),
        ],
        5,
    );
    inputs.symbols.insert("M".into(), Value::I64(3));
    let out = all_agree(&s, &inputs);
    let out: Vec<f64> = out.iter().map(|b| f64::from_bits(*b)).collect();
    assert_eq!(out, [7.0, 0.0, 3.0, 0.0, 5.0]);

    // An entry that is no skip value and points outside `f` is still an error, on both.
    inputs.arrays.insert("tab".into(), i64s(&[2, -1, 3, -1, 1]));
    let what = "index 3 out of bounds for dimension 0 of 'f' (extent 3)";
    assert_eq!(
        interpreted(&s, &inputs).unwrap_err(),
        format!("sdfg 'skip' / state 's' / map 'm' at i=2 / tasklet 't': {what}")
    );
    assert_eq!(
        compiled(&s, &inputs).unwrap_err(),
        format!("program 'skip': sdfg 'skip' / state 's' / map 'm' at i=2 / tasklet 't': {what}")
    );
}

/// A neighbour read `f[i - r]` that leaves the array at the first points, under a
/// condition that excludes them (GT4Py's `concat_where` reads a field at an offset given
/// by its domain's start this way): the node cannot be proven in bounds, so compiled code
/// runs its checked version, whose read under the condition is one expression (which
/// CUDA compiles too).
#[test]
fn a_checked_read_under_a_condition_is_made_only_where_it_holds() {
    let mut p = SdfgBuilder::new("shift");
    p.symbol("N", DType::I64)
        .symbol("r", DType::I64)
        .array("f", DType::F64, ["N"])
        .array("out", DType::F64, ["N"]);
    p.state("s", |s| {
        s.map("m", &["i"], &["0:N"], |m| {
            m.tasklet(
                "t",
                &[("left", "f[i - r]"), ("here", "f[i]")],
                &[("o", "out[i]")],
                "o = select(i >= r, here - left, here)",
            );
        });
    });
    let s = p.build();
    let mut inputs = bindings(
        &[
            ("f", f64s(&[1.0, 4.0, 9.0, 16.0, 25.0])),
            ("out", f64s(&[0.0; 5])),
        ],
        5,
    );
    inputs.symbols.insert("r".into(), Value::I64(2));
    let out = all_agree(&s, &inputs);
    let out: Vec<f64> = out.iter().map(|b| f64::from_bits(*b)).collect();
    assert_eq!(out, [1.0, 4.0, 8.0, 12.0, 16.0]);
    // The generated C reads `f[i - r]` inside the conditional, in the checked version.
    let code = CpuBackend::default().generate(&s).unwrap();
    assert!(code.contains("(checked)"), "{code}");
    assert!(code.contains("= sdf_ck(sdf_ssub(s_i, s_r, "), "{code}");
    assert!(code.contains(", a_f[(sdf_x"), "{code}");
}

/// `(a && x < y) || x >= y` is `a || x >= y` only without NaNs: GCC's front end folded it
/// so, as if `x >= y` were `!(x < y)`. Every combination of a flag and ordered and NaN
/// operands, on the interpreter and compiled, before and after the optimizer.
#[test]
fn float_comparisons_under_and_and_or_keep_nans_unordered() {
    let mut p = SdfgBuilder::new("nan_cmp");
    p.symbol("N", DType::I64)
        .array("f", DType::Bool, ["N"])
        .array("x", DType::F64, ["N"])
        .array("y", DType::F64, ["N"])
        .array("out", DType::I64, ["N"]);
    p.state("s", |s| {
        s.map("m", &["i"], &["0:N"], |m| {
            m.tasklet(
                "t",
                &[("a", "f[i]"), ("u", "x[i]"), ("v", "y[i]")],
                &[("o", "out[i]")],
                "o = select((a && u < v) || u >= v, 1, 0) + select((a || u > v) && u <= v, 2, 0) + \
                 select(!(u == v) && (a || u != v), 4, 0)",
            );
        });
    });
    let s = p.build();
    let vals = [f64::NAN, -1.0, 0.0, -0.0, 2.5, f64::INFINITY];
    let (mut f, mut x, mut y) = (Vec::new(), Vec::new(), Vec::new());
    for a in [false, true] {
        for u in vals {
            for v in vals {
                f.push(Value::Bool(a));
                x.push(u);
                y.push(v);
            }
        }
    }
    let n = f.len();
    let inputs = bindings(
        &[
            ("f", HostArray::from_values(DType::Bool, &[n], &f).unwrap()),
            ("x", f64s(&x)),
            ("y", f64s(&y)),
            ("out", i64s(&vec![0; n])),
        ],
        n as i64,
    );
    let out = as_i64(&all_agree(&s, &inputs));
    // A NaN operand: every comparison but `!=` is false, so only the third term holds.
    assert_eq!(out[0], 4, "a = false, x = y = NaN");
    assert_eq!(out[n / 2 + 1], 4, "a = true, x = NaN, y = -1");
}
