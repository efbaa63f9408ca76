//! Declared strides describe the memory layout of the arrays passed: a column-major
//! program runs on the interpreter (which indexes logically), compiled with arrays in
//! its layout, and through interpreter-style bindings that compiled code lays out as
//! declared; zero, negative and overlapping strides are refused.

use ndarray::ShapeBuilder;
use sdflow_codegen::{Args, CpuBackend};
use sdflow_ir::interp::{self, HostArray, random_bindings};
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

/// `out[e, k] = code(a = u[e2c[e, 0], k], b = u[e2c[e, 1], k], c = w[k])`, with `u`
/// and `out` column-major (horizontal first, as GT4Py's fields from Fortran) when
/// `strides` names the extents their second dimension strides by.
fn gather(strides: Option<[&str; 2]>, wcr: bool, code: &str) -> Sdfg {
    gather_reading(strides, wcr, code, false)
}

/// [`gather`], where with `index` the tasklet also reads its first neighbour's index
/// from the table, as GT4Py's neighbour tasklets do.
fn gather_reading(strides: Option<[&str; 2]>, wcr: bool, code: &str, index: bool) -> Sdfg {
    let out = if wcr {
        "out[e, k] (wcr: sum)"
    } else {
        "out[e, k]"
    };
    let mut s = gather_program("u[e2c[e, 0], k]", out, "0:K", code, index);
    if let Some([su, so]) = strides {
        for (a, extent) in [("u", su), ("out", so)] {
            if let Some(DataDesc::Array(a)) = s.arrays.get_mut(a) {
                a.strides = vec![SymExpr::Int(1), SymExpr::sym(extent)];
            }
        }
    }
    s
}

/// A map gathering through a table over column-major fields runs in strips: the plan
/// says so, the C loops over strips of 512 points with the levels outside a vectorized
/// loop over a strip's points, and the results are the interpreter's bits over three
/// strips (the last one short) — NaNs of any payload in, canonical NaNs out; a bad table
/// entry in the second strip is reported as the interpreter reports it; a table of
/// strides known only at the call runs in strips too, with the same bits. Row-major
/// fields, fields of strides known only at the call, a body resolving write conflicts
/// and a body calling `exp` (a call) keep rows; one taking a square root (one
/// instruction, scalar under `-frounding-math`) runs in strips, with the interpreter's
/// bits.
#[test]
fn a_column_major_gather_runs_in_strips() {
    use sdflow_codegen::plan::{Plan, StepKind, Target, rows::Strip};
    let strips = |s: &Sdfg| {
        let plan = Plan::of(s, Target::default()).unwrap();
        match &plan.body.states()[0].steps[0].kind {
            StepKind::ParallelMap {
                row_checks: Some(_),
                strips,
                ..
            } => {
                assert_ne!(*strips, Some(Strip::Inner));
                strips.is_some()
            }
            other => panic!("a parallel map checked per row: {other:?}"),
        }
    };
    const CODE: &str = "o = (a - b) * c + min(a, c)";
    let s = gather(Some(["C", "E"]), false, CODE);
    assert_eq!(s.validate(), Ok(()));
    assert!(strips(&s));
    assert!(!strips(&gather(None, false, CODE)));
    assert!(!strips(&gather(
        Some(["C", "E"]),
        false,
        "o = exp(a - b) * c"
    )));
    const SQRT: &str = "o = sqrt(abs(a - b)) * c + sqrt(a)";
    let root = gather(Some(["C", "E"]), false, SQRT);
    assert!(strips(&root));
    assert!(strips(&gather(
        Some(["C", "E"]),
        false,
        "o = abs(a - b) * max(c, 0.5)"
    )));
    let mut symbolic = gather(Some(["C", "E"]), false, CODE);
    if let Some(DataDesc::Array(a)) = symbolic.arrays.get_mut("out") {
        a.strides = vec![SymExpr::sym("so0"), SymExpr::sym("so1")];
    }
    symbolic
        .symbols
        .insert("so0".into(), sdflow_ir::Symbol::new(DType::I64));
    symbolic
        .symbols
        .insert("so1".into(), sdflow_ir::Symbol::new(DType::I64));
    assert!(!strips(&symbolic));
    assert!(!strips(&gather(Some(["C", "E"]), true, CODE)));
    // A table whose strides are known only at the call (GT4Py's, where the fields'
    // layout is specialized): read the same at every level, its layout does not matter.
    let mut table_strides = gather_reading(Some(["C", "E"]), false, CODE, true);
    if let Some(DataDesc::Array(a)) = table_strides.arrays.get_mut("e2c") {
        a.strides = vec![SymExpr::sym("st0"), SymExpr::sym("st1")];
    }
    for n in ["st0", "st1"] {
        table_strides
            .symbols
            .insert(n.into(), sdflow_ir::Symbol::new(DType::I64));
    }
    assert_eq!(table_strides.validate(), Ok(()));
    assert!(strips(&table_strides));
    let (backend, inputs) = printed_in_strips(&s, "in strips of 512", 3);
    let prog = backend.build(&s).unwrap();
    prog.set_threads(2);
    let mut expected = inputs.clone();
    interp::run(&s, &mut expected).unwrap();
    let nans = expected.arrays["out"]
        .to_f64_vec()
        .iter()
        .filter(|v| v.is_nan())
        .count();
    assert!(nans > 100, "{nans} NaNs");
    let mut got = inputs.clone();
    prog.run_bindings(&mut got).unwrap();
    assert_eq!(got.arrays["out"].bits(), expected.arrays["out"].bits());
    // A square root in strips: a scalar loop over the strip's points, the same bits
    // (NaNs of negative `a` included).
    let root_prog = backend.build(&root).unwrap();
    root_prog.set_threads(2);
    let mut want = inputs.clone();
    interp::run(&root, &mut want).unwrap();
    let mut got = inputs.clone();
    root_prog.run_bindings(&mut got).unwrap();
    assert_eq!(got.arrays["out"].bits(), want.arrays["out"].bits());
    // The same with the table's strides given at the call (row-major: 2, 1).
    let table_prog = backend.build(&table_strides).unwrap();
    table_prog.set_threads(2);
    let mut got = inputs.clone();
    got.symbols.insert("st0".into(), Value::I64(2));
    got.symbols.insert("st1".into(), Value::I64(1));
    table_prog.run_bindings(&mut got).unwrap();
    assert_eq!(got.arrays["out"].bits(), expected.arrays["out"].bits());

    let mut bad = inputs.clone();
    let e2c = bad.arrays.get_mut("e2c").unwrap();
    assert!(e2c.set(&[1000, 1], Value::I64(700)));
    let mut expected = bad.clone();
    let want = interp::run(&s, &mut expected).unwrap_err();
    let got = prog.run_bindings(&mut bad).unwrap_err();
    assert_eq!(got.to_string(), format!("program 'strips': {want}"));
}

/// A gather over column-major fields whose map lists the cells innermost (`(k, e)`:
/// where `loop_order` puts them when the tables' layout is left to the call) runs in
/// strips of its inner loop: the plan says so, the threads share strips of 512 points
/// of `e`, each strip's table entries are checked at once, and the levels run outside a
/// vectorized loop over the strip's points. Results are the interpreter's bits on one
/// and two threads over three strips (the last one short), NaNs included; bad entries in
/// two strips are reported as the interpreter reports the first. Row-major fields, a
/// body resolving write conflicts and one calling `exp` keep their checks at each
/// point.
#[test]
fn a_gather_with_the_cells_innermost_runs_in_strips_of_them() {
    use sdflow_codegen::plan::{Plan, StepKind, Target, rows::Strip};
    const CODE: &str = "o = (a - b) * c + min(a, c)";
    let build = |strides: bool, wcr: bool, levels: &str, code: &str| {
        let out = if wcr {
            "out[e, k] (wcr: sum)"
        } else {
            "out[e, k]"
        };
        let mut s = gather_program_in(true, "u[e2c[e, 0], k]", out, levels, code, false);
        if strides {
            for (a, extent) in [("u", "C"), ("out", "E")] {
                if let Some(DataDesc::Array(a)) = s.arrays.get_mut(a) {
                    a.strides = vec![SymExpr::Int(1), SymExpr::sym(extent)];
                }
            }
        }
        assert_eq!(s.validate(), Ok(()));
        s
    };
    let strips = |s: &Sdfg| {
        let plan = Plan::of(s, Target::default()).unwrap();
        match &plan.body.states()[0].steps[0].kind {
            StepKind::ParallelMap {
                row_checks, strips, ..
            } => {
                assert_eq!(row_checks.is_some(), strips.is_some(), "{}", plan.to_text());
                *strips
            }
            other => panic!("a parallel map: {other:?}"),
        }
    };
    let s = build(true, false, "0:K", CODE);
    assert_eq!(strips(&s), Some(Strip::Inner));
    assert_eq!(strips(&build(false, false, "0:K", CODE)), None);
    assert_eq!(strips(&build(true, true, "0:K", CODE)), None);
    assert_eq!(
        strips(&build(true, false, "0:K", "o = exp(a - b) * c")),
        None
    );
    let (backend, inputs) = printed_in_strips(
        &s,
        "tables checked per row (2 reads) in strips of 512 of its inner loop",
        5,
    );
    let prog = backend.build(&s).unwrap();
    let mut expected = inputs.clone();
    interp::run(&s, &mut expected).unwrap();
    assert!(
        expected.arrays["out"]
            .to_f64_vec()
            .iter()
            .any(|v| v.is_nan())
    );
    let mut bad = inputs.clone();
    let e2c = bad.arrays.get_mut("e2c").unwrap();
    assert!(e2c.set(&[1000, 1], Value::I64(700)));
    assert!(e2c.set(&[300, 1], Value::I64(-1)));
    let mut want = bad.clone();
    let want = interp::run(&s, &mut want).unwrap_err();
    for threads in [1, 2] {
        prog.set_threads(threads);
        let mut got = inputs.clone();
        prog.run_bindings(&mut got).unwrap();
        assert_eq!(got.arrays["out"].bits(), expected.arrays["out"].bits());
        let got = prog.run_bindings(&mut bad.clone()).unwrap_err();
        assert_eq!(got.to_string(), format!("program 'strips': {want}"));
    }
}

/// Asserts that the plan of the gather `s` says `says` and that its C steps over strips
/// of 512 points with a loop over a strip's points marked independent; the backend, and
/// inputs of `seed` for 1300 edges, 700 cells and 5 levels (three strips, the last one
/// short) with NaNs of both signs and several payloads in `u`'s first cells, all levels.
fn printed_in_strips(s: &Sdfg, says: &str, seed: u64) -> (CpuBackend, interp::Bindings) {
    use sdflow_codegen::plan::{Plan, Target};
    let plan = Plan::of(s, Target::default()).unwrap().to_text();
    assert!(plan.contains(says), "{plan}");
    let backend = CpuBackend {
        cache: None,
        ..CpuBackend::default()
    };
    let c = backend.generate(s).unwrap();
    assert!(c.contains(" += 512LL) {"), "{c}");
    assert!(c.contains("#pragma GCC ivdep\n"), "{c}");
    let syms = [("E", 1300), ("C", 700), ("K", 5)]
        .map(|(k, v)| (k.to_string(), Value::I64(v)))
        .into();
    let mut inputs = random_bindings(s, &syms, seed).unwrap();
    let u = inputs.arrays.get_mut("u").unwrap();
    for cell in 0..40usize {
        for k in 0..5usize {
            let bits = [
                0x7ff8_0000_0000_0001u64,
                0xfff4_0000_0000_0000,
                0x7ff0_0000_dead_beef,
            ];
            assert!(u.set(&[cell, k], Value::F64(f64::from_bits(bits[(cell + k) % 3]))));
        }
    }
    (backend, inputs)
}

/// A row-major gather checked per row (levels innermost, GT4Py's layout): the inner loop
/// is marked independent (`#pragma GCC ivdep` right before it), so GCC vectorizes it
/// without testing at every row whether the arrays overlap; results are the
/// interpreter's bits. A body resolving write conflicts (an accumulation, a dependence
/// between points) and a sequential map get no mark; nor does the loop an `omp for`
/// shares out, which its pragma must immediately precede.
#[test]
fn a_row_major_gather_marks_its_inner_loop_independent() {
    const CODE: &str = "o = max(a, c) + min(b, c)";
    let backend = CpuBackend {
        cache: None,
        ..CpuBackend::default()
    };
    let marked = |s: &Sdfg| {
        let c = backend.generate(s).unwrap();
        let lines: Vec<&str> = c.lines().map(str::trim).collect();
        lines
            .windows(2)
            .filter(|w| w[0] == "#pragma GCC ivdep")
            .map(|w| {
                assert!(w[1].starts_with("for (int64_t s_"), "{c}");
            })
            .count()
    };
    let s = gather(None, false, CODE);
    assert_eq!(s.validate(), Ok(()));
    assert_eq!(marked(&s), 1);
    let c = backend.generate(&s).unwrap();
    let at = c.find("#pragma GCC ivdep\n").unwrap();
    let next = c[at..].lines().nth(1).unwrap().trim();
    assert!(next.starts_with("for (int64_t s_k = "), "{c}");
    assert_eq!(marked(&gather(None, true, CODE)), 0);
    let mut sequential = s.clone();
    if let sdflow_ir::Node::Map(m) = sequential.states[0]
        .graph
        .graph
        .node_weights_mut()
        .find(|n| matches!(n, sdflow_ir::Node::Map(_)))
        .unwrap()
    {
        m.schedule = sdflow_ir::Schedule::Sequential;
    }
    assert_eq!(marked(&sequential), 0);
    // Points that depend on each other along the levels: one element written per row
    // (the last level's value stays), a level read that the previous level wrote.
    assert_eq!(marked(&levels_dependent("u[e2c[e, 0], k]", "out[e, 0]")), 0);
    assert_eq!(marked(&levels_dependent("out[e, k - 1]", "out[e, k]")), 0);
    assert_eq!(marked(&levels_dependent("u[e2c[e, 0], k]", "out[e, k]")), 1);
    // A one-dimensional map: its only loop is the one the threads share (marked only
    // where one thread runs it, below the size worth sharing).
    let one_d = one_dimensional();
    let c = backend.generate(&one_d).unwrap();
    let lines: Vec<&str> = c.lines().map(str::trim).collect();
    for w in lines.windows(2) {
        if w[0].starts_with("#pragma omp for") {
            assert!(w[1].starts_with("for ("), "{c}");
        }
    }
    assert_eq!(marked(&one_d), 1);
    assert!(backend.build(&one_d).is_ok());

    let syms = [("E", 900), ("C", 700), ("K", 10)]
        .map(|(k, v)| (k.to_string(), Value::I64(v)))
        .into();
    let inputs = random_bindings(&s, &syms, 5).unwrap();
    let prog = backend.build(&s).unwrap();
    prog.set_threads(2);
    let mut expected = inputs.clone();
    interp::run(&s, &mut expected).unwrap();
    let mut got = inputs;
    prog.run_bindings(&mut got).unwrap();
    assert_eq!(got.arrays["out"].bits(), expected.arrays["out"].bits());
}

/// `out[i] = 2 u[i]` over `N` points.
fn one_dimensional() -> Sdfg {
    let mut b = SdfgBuilder::new("one_d");
    b.symbol("N", DType::I64)
        .array("u", DType::F64, ["N"])
        .array("out", DType::F64, ["N"]);
    b.state("main", |s| {
        s.map("m", &["i"], &["0:N"], |m| {
            m.tasklet("t", &[("x", "u[i]")], &[("o", "out[i]")], "o = 2.0 * x");
        });
    });
    b.build()
}

/// A row-major gather over levels `1:K` reading `a` and writing `out` as given.
fn levels_dependent(a: &str, out: &str) -> Sdfg {
    let s = gather_program(a, out, "1:K", "o = max(a, c) + min(b, c)", false);
    assert_eq!(s.validate(), Ok(()));
    s
}

/// `out = code(a, u[e2c[e, 1], k], w[k])` over edges `e` and levels `k` in `levels`, `a`
/// and `out` as given; with `index` the tasklet also reads its first neighbour's index.
fn gather_program(a: &str, out: &str, levels: &str, code: &str, index: bool) -> Sdfg {
    gather_program_in(false, a, out, levels, code, index)
}

/// [`gather_program`], with `levels_outer` the map's parameters listed `(k, e)`: the
/// cells innermost.
fn gather_program_in(
    levels_outer: bool,
    a: &str,
    out: &str,
    levels: &str,
    code: &str,
    index: bool,
) -> Sdfg {
    let (params, ranges) = if levels_outer {
        (["k", "e"], [levels, "0:E"])
    } else {
        (["e", "k"], ["0:E", levels])
    };
    let mut b = SdfgBuilder::new("strips");
    b.symbol("E", DType::I64)
        .symbol("C", DType::I64)
        .symbol("K", DType::I64)
        .array("e2c", DType::I32, ["E", "2"])
        .array("u", DType::F64, ["C", "K"])
        .array("w", DType::F64, ["K"])
        .array("out", DType::F64, ["E", "K"]);
    b.state("main", |s| {
        s.map("m", &params, &ranges, |m| {
            let mut inputs = vec![("a", a), ("b", "u[e2c[e, 1], k]"), ("c", "w[k]")];
            if index {
                inputs.push(("n", "e2c[e, 0]"));
            }
            m.tasklet("t", &inputs, &[("o", out)], code);
        });
    });
    b.build()
}

/// GT4Py's dynamic vertical offsets with the cells innermost (horizontal-first fields):
/// `out[c, k] = x[tab[c, 0], kk] * 0.5 + x[tab[c, 1], kk] + out[c, k]`, `kk = k +
/// off[c, k]` computed at each point (`level` the tasklet's code, `level_inputs` its
/// inputs besides `o = off[c, k]`), `out` updated in place.
fn computed_level(level: &str, level_inputs: &[(&str, &str)]) -> Sdfg {
    let mut b = SdfgBuilder::new("computed_level");
    b.symbol("C", DType::I64)
        .symbol("K", DType::I64)
        .array("x", DType::F64, ["C", "K"])
        .array("off", DType::I32, ["C", "K"])
        .array("dv", DType::I32, ["C"])
        .array("tab", DType::I32, ["C", "2"])
        .array("out", DType::F64, ["C", "K"])
        .transient_scalar("kk", DType::I32);
    b.state("s", |st| {
        st.map("m", &["k", "c"], &["0:K", "0:C"], |m| {
            let mut inputs = vec![("o", "off[c, k]")];
            inputs.extend_from_slice(level_inputs);
            m.tasklet("level", &inputs, &[("l", "kk")], level);
            m.tasklet(
                "g",
                &[
                    ("a", "x[tab[c, 0], kk[]]"),
                    ("b", "x[tab[c, 1], kk[]]"),
                    ("p", "out[c, k]"),
                    ("l", "kk"),
                ],
                &[("o", "out[c, k]")],
                "o = a * 0.5 + b + p",
            );
        });
    });
    let mut s = b.build();
    for f in ["x", "off", "out"] {
        if let Some(DataDesc::Array(a)) = s.arrays.get_mut(f) {
            a.strides = vec![SymExpr::Int(1), SymExpr::sym("C")];
        }
    }
    assert_eq!(s.validate(), Ok(()));
    s
}

/// A row whose gathers check their table entries and computed levels at each point
/// (the cells innermost) checks them all first, in a loop of its own, and then gathers
/// without a check: the C says so, results are the interpreter's bits (an in-place
/// update included, on the parallel path and on one thread), and a bad computed level
/// or a bad table entry is reported as the interpreter reports it. A level computed
/// with an integer division (which could raise before the row) or from the container
/// the body writes keeps its checks at each point, with the same results.
#[test]
fn a_row_checks_its_computed_levels_and_table_entries_before_it_runs() {
    let backend = CpuBackend {
        cache: None,
        ..CpuBackend::default()
    };
    let s = computed_level("l = i32(k) + o", &[]);
    let c = backend.generate(&s).unwrap();
    assert_eq!(c.matches("int sdf_pok").count(), 2, "{c}");
    let (c_n, k_n) = (1300usize, 7usize);
    let syms = [("C", c_n as i64), ("K", k_n as i64)]
        .map(|(k, v)| (k.to_string(), Value::I64(v)))
        .into();
    let mut inputs = random_bindings(&s, &syms, 7).unwrap();
    for cell in 0..c_n {
        for j in 0..2 {
            let t = inputs.arrays.get_mut("tab").unwrap();
            assert!(t.set(&[cell, j], Value::I32(((cell * 7 + j * 3) % c_n) as i32)));
        }
        let d = inputs.arrays.get_mut("dv").unwrap();
        assert!(d.set(&[cell], Value::I32(1 + (cell % 3) as i32)));
        for k in 0..k_n {
            // Offsets of -1, 0 and 1 that stay inside the column.
            let o = (cell % 3) as i64 - 1;
            let o = if (k as i64 + o) < 0 || k as i64 + o >= k_n as i64 {
                0
            } else {
                o
            };
            let off = inputs.arrays.get_mut("off").unwrap();
            assert!(off.set(&[cell, k], Value::I32(o as i32)));
        }
    }
    let run = |s: &Sdfg, threads: usize, b: &interp::Bindings| {
        let prog = backend.build(s).unwrap();
        prog.set_threads(threads);
        let mut got = b.clone();
        prog.run_bindings(&mut got).map(|_| got)
    };
    let mut expected = inputs.clone();
    interp::run(&s, &mut expected).unwrap();
    for threads in [1, 2] {
        let got = run(&s, threads, &inputs).unwrap();
        assert_eq!(got.arrays["out"].bits(), expected.arrays["out"].bits());
    }

    // A computed level past the column, then a table entry past the cells.
    let mut bad_level = inputs.clone();
    let off = bad_level.arrays.get_mut("off").unwrap();
    assert!(off.set(&[1000, 3], Value::I32(k_n as i32)));
    let mut bad_entry = inputs.clone();
    let tab = bad_entry.arrays.get_mut("tab").unwrap();
    assert!(tab.set(&[500, 1], Value::I32(c_n as i32)));
    for bad in [bad_level, bad_entry] {
        let mut expected = bad.clone();
        let want = interp::run(&s, &mut expected).unwrap_err();
        for threads in [1, 2] {
            let got = run(&s, threads, &bad).unwrap_err();
            assert_eq!(got.to_string(), format!("program 'computed_level': {want}"));
        }
    }

    // Computing the level could raise (an integer division), or reads what the body
    // writes: checked at each point, as before.
    let divided = computed_level("l = i32(k) + o // d", &[("d", "dv[c]")]);
    let from_output = computed_level("l = i32(k) + o + i32(q * 0.0)", &[("q", "out[c, k]")]);
    for s in [&divided, &from_output] {
        let c = backend.generate(s).unwrap();
        assert!(!c.contains("sdf_pok"), "{c}");
        assert!(c.contains("sdf_inds("), "{c}");
        let mut expected = inputs.clone();
        interp::run(s, &mut expected).unwrap();
        let got = run(s, 2, &inputs).unwrap();
        assert_eq!(got.arrays["out"].bits(), expected.arrays["out"].bits());
    }
}

/// `out[e, k] = code(a = out[e, k], b = u[e2c[e, 0], k], c = u[e2c[e, 1], k])` in `dt`
/// over the levels `levels`, the fields row-major; with `code` `o = max(a, max(b, c))`,
/// GT4Py's `enhance_diffusion_coefficient_for_grid_point_cold_pools`.
fn row_of_levels(dt: DType, levels: &str, code: &str) -> Sdfg {
    let mut b = SdfgBuilder::new("rows");
    b.symbol("E", DType::I64)
        .symbol("C", DType::I64)
        .symbol("K", DType::I64)
        .array("e2c", DType::I32, ["E", "2"])
        .array("u", dt, ["C", "K"])
        .array("out", dt, ["E", "K"]);
    b.state("main", |s| {
        s.map("m", &["e", "k"], &["0:E", levels], |m| {
            m.tasklet(
                "t",
                &[
                    ("a", "out[e, k]"),
                    ("b", "u[e2c[e, 0], k]"),
                    ("c", "u[e2c[e, 1], k]"),
                ],
                &[("o", "out[e, k]")],
                code,
            );
        });
    });
    let s = b.build();
    assert_eq!(s.validate(), Ok(()));
    s
}

/// The inner loop of a parallel map over rows whose length is known only at the call
/// runs as whole blocks of 64 bytes of its widest element, then the rest in vectors of
/// half that width: the C says so (8 and 4 points of `f64`, 16 and 8 of `f32`; a row of
/// constant length and a CUDA kernel are left whole), and every row length from 0 to 19
/// (rests of every size) gives the interpreter's bits, on two threads and on one — signed
/// zeros and NaNs of any payload among the values, where an exact `max` differs from a
/// compare and select. A body of plain arithmetic on its gathers (GT4Py's
/// `calculate_nabla2_for_z`: a difference of two neighbours times a field) is split the
/// same: its table entries are checked per row, so its gathers are contiguous loads along
/// the row and the loop is printed to vectorize, not left scalar.
#[test]
fn a_row_of_levels_runs_in_whole_blocks_then_narrower_vectors() {
    let backend = CpuBackend {
        cache: None,
        ..CpuBackend::default()
    };
    let cases = [
        (DType::F64, 8u32, "o = max(a, max(b, c))"),
        (DType::F32, 16, "o = max(a, max(b, c))"),
        (DType::F64, 8, "o = a * (b - c)"),
        (DType::F32, 16, "o = (b - c) / a"),
    ];
    for (dt, block, code) in cases {
        let s = row_of_levels(dt, "0:K", code);
        let c = backend.generate(&s).unwrap();
        let blocks = format!("& ~(uint64_t){}u", block - 1);
        let rest = format!("#pragma omp simd simdlen({})", block / 2);
        assert_eq!(c.matches(&blocks).count(), 1, "{dt} `{code}`: {c}");
        let lines: Vec<&str> = c.lines().map(str::trim).collect();
        let after = |mark: &str| {
            lines
                .windows(2)
                .filter(|w| w[0] == mark)
                .map(|w| w[1])
                .collect::<Vec<_>>()
        };
        // The blocks, then the rest from where they end, over the same parameter.
        let (main, rest) = (after("#pragma GCC ivdep"), after(&rest));
        assert_eq!((main.len(), rest.len()), (1, 1), "{dt} `{code}`: {c}");
        let n = main[0]
            .strip_prefix("for (int64_t s_k = sdf_lo")
            .and_then(|t| t.split(';').next())
            .unwrap_or_else(|| panic!("{dt} `{code}`: {c}"));
        assert_eq!(
            main[0],
            format!("for (int64_t s_k = sdf_lo{n}; s_k < sdf_mid{n}; s_k++) {{"),
            "{dt} `{code}`"
        );
        assert_eq!(
            rest[0],
            format!("for (int64_t s_k = sdf_mid{n}; s_k < sdf_hi{n}; s_k++) {{"),
            "{dt} `{code}`"
        );
        let constant = backend.generate(&row_of_levels(dt, "0:10", code)).unwrap();
        assert!(!constant.contains("sdf_mid"), "{dt} `{code}`: {constant}");
        assert!(
            constant.contains("#pragma GCC ivdep"),
            "{dt} `{code}`: {constant}"
        );
        let cuda = sdflow_codegen::cuda::exec::CudaBackend {
            cache: None,
            ..Default::default()
        };
        assert!(
            !cuda.generate(&s).unwrap().source.contains("sdf_mid"),
            "{dt} `{code}`"
        );

        let prog = backend.build(&s).unwrap();
        let special = [0.0, -0.0, 1.5, -2.0, f64::NAN, -f64::NAN, f64::INFINITY];
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            seed >> 33
        };
        // Rows enough for the threads to share them at every length (4096 points).
        let (e, cells) = (4100usize, 230usize);
        for k in 0..20usize {
            let mut value = |_| match next() % 4 {
                0 => special[(next() % special.len() as u64) as usize],
                _ => (next() % 2001) as f64 / 100.0 - 10.0,
            };
            let u: Vec<Value> = (0..cells * k)
                .map(&mut value)
                .map(|v| cast(dt, v))
                .collect();
            let out: Vec<Value> = (0..e * k).map(&mut value).map(|v| cast(dt, v)).collect();
            let table: Vec<Value> = (0..e * 2)
                .map(|_| Value::I32((next() % cells as u64) as i32))
                .collect();
            let mut b = sdflow_ir::interp::Bindings::default();
            for (n, v) in [("E", e), ("C", cells), ("K", k)] {
                b.symbols.insert(n.into(), Value::I64(v as i64));
            }
            b.arrays.insert(
                "e2c".into(),
                HostArray::from_values(DType::I32, &[e, 2], &table).unwrap(),
            );
            b.arrays.insert(
                "u".into(),
                HostArray::from_values(dt, &[cells, k], &u).unwrap(),
            );
            b.arrays.insert(
                "out".into(),
                HostArray::from_values(dt, &[e, k], &out).unwrap(),
            );
            let mut expected = b.clone();
            interp::run(&s, &mut expected).unwrap();
            for threads in [2, 1] {
                prog.set_threads(threads);
                let mut got = b.clone();
                prog.run_bindings(&mut got).unwrap();
                let (g, x) = (got.arrays["out"].bits(), expected.arrays["out"].bits());
                let first = g.iter().zip(&x).position(|(a, b)| a != b);
                assert_eq!(
                    first.map(|i| (i / k, i % k, g[i], x[i])),
                    None,
                    "{dt} `{code}`, rows of {k} levels, {threads} threads: first (edge, level, \
                     compiled, interpreter) that differ"
                );
            }
        }
    }
}

/// `v` as a value of `dt`.
fn cast(dt: DType, v: f64) -> Value {
    match dt {
        DType::F32 => Value::F32(v as f32),
        _ => Value::F64(v),
    }
}
