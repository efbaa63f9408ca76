//! Declared strides describe the memory layout of the arrays passed: a column-major
//! program runs on the interpreter (which indexes logically), compiled with arrays in
//! its layout, and through interpreter-style bindings that compiled code lays out as
//! declared; zero, negative and overlapping strides are refused.

use ndarray::ShapeBuilder;
use sdflow_codegen::{Args, CpuBackend};
use sdflow_ir::interp::{self, random_bindings};
use sdflow_ir::{DType, DataDesc, Sdfg, SdfgBuilder, SymExpr, Value};

/// `out[i, j] = u[i, j] + 10 i + j` over `N x M`, both arrays column-major.
fn column_major() -> Sdfg {
    let mut b = SdfgBuilder::new("colmajor");
    b.symbol("N", DType::I64)
        .symbol("M", DType::I64)
        .array("u", DType::F64, ["N", "M"])
        .array("out", DType::F64, ["N", "M"]);
    b.state("main", |s| {
        s.map("m", &["i", "j"], &["0:N", "0:M"], |m| {
            m.tasklet(
                "t",
                &[("x", "u[i, j]")],
                &[("o", "out[i, j]")],
                "o = x + 10.0 * f64(i) + f64(j)",
            );
        });
    });
    let mut s = b.build();
    for a in ["u", "out"] {
        if let Some(DataDesc::Array(a)) = s.arrays.get_mut(a) {
            a.strides = vec![SymExpr::Int(1), SymExpr::sym("N")];
        }
    }
    s
}

#[test]
fn a_column_major_program_runs_alike_on_both_backends() {
    let s = column_major();
    assert_eq!(s.validate(), Ok(()));
    let syms = [("N", 5), ("M", 3)]
        .map(|(k, v)| (k.to_string(), Value::I64(v)))
        .into();
    let inputs = random_bindings(&s, &syms, 1).unwrap();
    let mut expected = inputs.clone();
    interp::run(&s, &mut expected).unwrap();
    let u = inputs.arrays["u"].to_f64_vec();
    let want: Vec<f64> = (0..15)
        .map(|k| u[k] + 10.0 * (k / 3) as f64 + (k % 3) as f64)
        .collect();
    assert_eq!(expected.arrays["out"].to_f64_vec(), want);

    let prog = CpuBackend {
        cache: None,
        ..CpuBackend::default()
    }
    .build(&s)
    .unwrap();
    // Interpreter-style (row-major) bindings: laid out as declared, same values.
    let mut got = inputs.clone();
    prog.run_bindings(&mut got).unwrap();
    assert_eq!(got.arrays["out"].bits(), expected.arrays["out"].bits());

    // Fortran-order arrays bind as they are; C-order ones are refused.
    let mut uf = ndarray::Array2::<f64>::zeros((5, 3).f());
    for ((i, j), v) in uf.indexed_iter_mut() {
        *v = u[i * 3 + j];
    }
    let mut outf = ndarray::Array2::<f64>::zeros((5, 3).f());
    prog.call_checked(Args::new().array("u", &mut uf).array("out", &mut outf))
        .unwrap();
    let flat: Vec<f64> = outf.iter().copied().collect();
    assert_eq!(flat, want);
    let mut uc = ndarray::Array2::<f64>::zeros((5, 3));
    let mut outc = ndarray::Array2::<f64>::zeros((5, 3));
    let e = prog
        .call_checked(Args::new().array("u", &mut uc).array("out", &mut outc))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "program 'colmajor': 'out' has stride 3 in dimension 0, but the program takes 1 there (its declared or specialized layout)"
    );
}

/// The optimizer walks a column-major program down its columns: the map's `i`, which
/// indexes the dimension of stride 1, becomes its innermost loop (`loop_order`), and the
/// compiled program computes the interpreter's bits.
#[test]
fn a_column_major_program_runs_its_contiguous_dimension_innermost() {
    let s = column_major();
    let mut opt = s.clone();
    let report = sdflow_transforms::Pipeline::cpu().run(&mut opt).unwrap();
    let reordered: usize = report
        .passes
        .iter()
        .map(|p| p.changes.get("loops_reordered"))
        .sum();
    assert_eq!(reordered, 1, "{report}");
    let g = &opt.states[0].graph;
    let params: Vec<Vec<String>> = g
        .node_ids()
        .into_iter()
        .filter_map(|n| match g.node(n) {
            sdflow_ir::Node::Map(m) => Some(m.params.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(params, [["j", "i"]]);
    let syms = [("N", 6), ("M", 4)]
        .map(|(k, v)| (k.to_string(), Value::I64(v)))
        .into();
    let inputs = random_bindings(&s, &syms, 2).unwrap();
    let mut expected = inputs.clone();
    interp::run(&s, &mut expected).unwrap();
    let prog = CpuBackend {
        cache: None,
        ..CpuBackend::default()
    }
    .build(&opt)
    .unwrap();
    let mut got = inputs.clone();
    prog.run_bindings(&mut got).unwrap();
    assert_eq!(got.arrays["out"].bits(), expected.arrays["out"].bits());
}

#[test]
fn zero_negative_and_overlapping_strides_are_refused() {
    let with = |shape: [i64; 2], strides: [i64; 2]| {
        let mut b = SdfgBuilder::new("bad");
        b.array("a", DType::F64, shape);
        b.state("main", |_| {});
        let mut s = b.build();
        if let Some(DataDesc::Array(a)) = s.arrays.get_mut("a") {
            a.strides = strides.iter().map(|&v| SymExpr::Int(v)).collect();
        }
        s.validate()
            .unwrap_err()
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        with([3, 4], [0, 1]),
        [
            "sdfg 'bad' > array 'a': 'a' has stride 0 in dimension 0; strides must be positive (in elements)"
        ]
    );
    assert_eq!(
        with([3, 4], [4, -1]),
        [
            "sdfg 'bad' > array 'a': 'a' has stride -1 in dimension 1; strides must be positive (in elements)"
        ]
    );
    assert_eq!(
        with([3, 4], [2, 1]),
        [
            "sdfg 'bad' > array 'a': 'a' has strides [2, 1] for extents [3, 4]: dimensions 1 and 0 overlap (stride 2 < 1 * 4)"
        ]
    );

    // Symbolic strides are checked when the arguments are bound.
    let mut s = column_major();
    if let Some(DataDesc::Array(a)) = s.arrays.get_mut("u") {
        a.strides = vec![SymExpr::Int(1), SymExpr::sym("S")];
    }
    s.symbols
        .insert("S".into(), sdflow_ir::Symbol::new(DType::I64));
    let prog = CpuBackend {
        cache: None,
        ..CpuBackend::default()
    }
    .build(&s)
    .unwrap();
    // An array whose columns all start at the same element (stride 0).
    let mut u = vec![0.0f64; 5];
    let mut out = ndarray::Array2::<f64>::zeros((5, 3).f());
    // SAFETY: with strides [1, 0], the 5 x 3 elements all lie in the 5 of `u`, which
    // outlives the call; nothing else accesses it meanwhile.
    let args = unsafe { Args::new().raw("u", u.as_mut_ptr().cast(), DType::F64, &[5, 3], &[1, 0]) };
    let e = prog.call_checked(args.array("out", &mut out)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "program 'colmajor': the program's 'u' has stride 0 in dimension 1; strides must be positive (in elements)"
    );
}
