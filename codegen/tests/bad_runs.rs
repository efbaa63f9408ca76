//! Bad runs: the interpreter and compiled code report the same error, word for word
//! (location, array, dimension, index), and leave the same partial results; compiled
//! code never reads or writes outside an array to get there.

use sdflow_ir::testkit::assert_same_arguments;
use std::collections::BTreeMap;

use sdflow_codegen::{CompiledProgram, CpuBackend};
use sdflow_ir::interp::{self, Bindings, random_bindings};
use sdflow_ir::{Block, DType, Sdfg, SdfgBuilder, StateId, SymExpr, Value};

fn syms(pairs: &[(&str, i64)]) -> BTreeMap<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Value::I64(*v)))
        .collect()
}

fn build(s: &Sdfg) -> CompiledProgram {
    assert_eq!(s.validate(), Ok(()));
    let prog = CpuBackend {
        cache: None,
        ..CpuBackend::default()
    }
    .build(s)
    .unwrap();
    prog.set_threads(2);
    prog
}

/// Runs `s` on both backends, expects both to fail with `message` (the interpreter's
/// error text; compiled code's is `program '<name>': <message>`) and to leave the same
/// arguments behind.
fn both_fail(s: &Sdfg, prog: &CompiledProgram, inputs: &Bindings, message: &str) {
    let mut expected = inputs.clone();
    let e = interp::run(s, &mut expected).unwrap_err().to_string();
    assert_eq!(e, message, "interpreter");
    let mut got = inputs.clone();
    let e = prog.run_bindings(&mut got).unwrap_err().to_string();
    assert_eq!(e, format!("program '{}': {message}", s.name), "compiled");
    assert_same_arguments(s, &expected, &got, "compiled, after the error");
}

/// Both succeed with bitwise-equal results.
fn both_agree(s: &Sdfg, prog: &CompiledProgram, inputs: &Bindings) {
    let mut expected = inputs.clone();
    interp::run(s, &mut expected).unwrap();
    let mut got = inputs.clone();
    prog.run_bindings(&mut got).unwrap();
    assert_same_arguments(s, &expected, &got, "compiled");
}

/// `out[i] = 2 a[i]` over `0:N`, with `out` of its own extent `M`.
fn scale() -> Sdfg {
    let mut b = SdfgBuilder::new("scale");
    b.symbol("N", DType::I64)
        .symbol("M", DType::I64)
        .array("a", DType::F64, ["N"])
        .array("out", DType::F64, ["M"]);
    b.state("main", |s| {
        s.map("m", &["i"], &["0:N"], |m| {
            m.tasklet("t", &[("x", "a[i]")], &[("o", "out[i]")], "o = 2.0 * x");
        });
    });
    b.build()
}

#[test]
fn a_map_past_an_array_fails_alike_at_the_same_index() {
    let s = scale();
    let prog = build(&s);
    // M >= N: fine, and large enough to run in parallel.
    for (n, m) in [(5000, 5000), (5000, 6000), (0, 0)] {
        both_agree(
            &s,
            &prog,
            &random_bindings(&s, &syms(&[("N", n), ("M", m)]), 1).unwrap(),
        );
    }
    for (n, m) in [(5000, 4096), (10, 3), (1, 0)] {
        both_fail(
            &s,
            &prog,
            &random_bindings(&s, &syms(&[("N", n), ("M", m)]), 2).unwrap(),
            &format!(
                "sdfg 'scale' / state 'main' / map 'm' at i={m} / tasklet 't': index {m} out of bounds for dimension 0 of 'out' (extent {m})"
            ),
        );
    }
}

#[test]
fn a_stencil_reading_past_its_input_fails_alike() {
    // out[i, j] = u[i + 1, j] + u[i, j - 1] over the whole of `out`, with `u` as large.
    let mut b = SdfgBuilder::new("shift");
    b.symbol("N", DType::I64)
        .symbol("M", DType::I64)
        .array("u", DType::F64, ["N", "N"])
        .array("out", DType::F64, ["M", "N"]);
    b.state("main", |s| {
        s.map("st", &["i", "j"], &["0:M", "1:N"], |m| {
            m.tasklet(
                "t",
                &[("n", "u[i, j - 1]"), ("s", "u[i + 1, j]")],
                &[("o", "out[i, j]")],
                "o = n + s",
            );
        });
    });
    let s = b.build();
    let prog = build(&s);
    both_fail(
        &s,
        &prog,
        &random_bindings(&s, &syms(&[("N", 6), ("M", 6)]), 3).unwrap(),
        "sdfg 'shift' / state 'main' / map 'st' at i=5, j=1 / tasklet 't': index 6 out of bounds for dimension 0 of 'u' (extent 6)",
    );
}

#[test]
fn a_subscript_on_a_loop_variable_is_checked_where_it_is_used() {
    // for k in 0..K: row[i] = grid[k, i]; a grid of NK rows fails at k = NK.
    let mut b = SdfgBuilder::new("rows");
    b.symbol("N", DType::I64)
        .symbol("NK", DType::I64)
        .symbol("K", DType::I64)
        .symbol("k", DType::I64)
        .array("grid", DType::F64, ["NK", "N"])
        .array("row", DType::F64, ["N"]);
    b.state("take", |s| {
        s.map("m", &["i"], &["0:N"], |m| {
            m.tasklet(
                "t",
                &[("g", "grid[k, i]"), ("r", "row[i]")],
                &[("o", "row[i]")],
                "o = r + g",
            );
        });
    });
    b.body(Block::for_loop(
        "k",
        SymExpr::Int(0),
        SymExpr::parse("k < K").unwrap(),
        SymExpr::parse("k + 1").unwrap(),
        Block::State(StateId(0)),
    ));
    let s = b.build();
    let prog = build(&s);
    let ok = random_bindings(&s, &syms(&[("N", 7), ("NK", 4), ("K", 4)]), 4).unwrap();
    both_agree(&s, &prog, &ok);
    let mut bad = ok.clone();
    bad.symbols.insert("K".into(), Value::I64(6));
    both_fail(
        &s,
        &prog,
        &bad,
        "sdfg 'rows' / state 'take' / map 'm' at i=0 / tasklet 't': index 4 out of bounds for dimension 0 of 'grid' (extent 4)",
    );
}

#[test]
fn a_copy_past_an_array_fails_alike() {
    let mut b = SdfgBuilder::new("cp");
    b.symbol("N", DType::I64)
        .symbol("M", DType::I64)
        .array("a", DType::I64, ["N"])
        .array("b", DType::I64, ["M"]);
    b.state("main", |s| {
        s.copy("a[0:N:2]", "b[1:N//2+1]");
    });
    let s = b.build();
    let prog = build(&s);
    both_agree(
        &s,
        &prog,
        &random_bindings(&s, &syms(&[("N", 10), ("M", 6)]), 5).unwrap(),
    );
    both_fail(
        &s,
        &prog,
        &random_bindings(&s, &syms(&[("N", 10), ("M", 4)]), 5).unwrap(),
        "sdfg 'cp' / state 'main' / access 'b': index 4 out of bounds for dimension 0 of 'b' (extent 4)",
    );
}

#[test]
fn symbolic_overflow_is_an_error_on_both() {
    // A map range whose size overflows 64 bits.
    let mut b = SdfgBuilder::new("big");
    b.symbol("N", DType::I64)
        .symbol("S", DType::I64)
        .array("a", DType::F64, ["N"]);
    b.state("main", |s| {
        s.map("m", &["i"], &["0:N*S"], |m| {
            m.tasklet("t", &[], &[("o", "a[i % N]")], "o = 1.0");
        });
    });
    let s = b.build();
    let prog = build(&s);
    let mut inputs = random_bindings(&s, &syms(&[("N", 4), ("S", 2)]), 6).unwrap();
    both_agree(&s, &prog, &inputs);
    inputs.symbols.insert("S".into(), Value::I64(1 << 62));
    both_fail(
        &s,
        &prog,
        &inputs,
        "sdfg 'big' / state 'main' / map 'm': integer overflow in 'N * S'",
    );

    // A loop variable that overflows in the update.
    let mut b = SdfgBuilder::new("steps");
    b.symbol("k", DType::I64)
        .symbol("D", DType::I64)
        .array("n", DType::I64, [1]);
    b.state("count", |s| {
        s.tasklet("t", &[("x", "n[0]")], &[("o", "n[0]")], "o = x + 1");
    });
    b.body(Block::for_loop(
        "k",
        SymExpr::Int(0),
        SymExpr::parse("k >= 0").unwrap(),
        SymExpr::parse("k + D").unwrap(),
        Block::State(StateId(0)),
    ));
    let s = b.build();
    let prog = build(&s);
    let mut inputs = random_bindings(&s, &syms(&[("D", 1 << 61)]), 7).unwrap();
    inputs.arrays.insert(
        "n".into(),
        sdflow_ir::interp::HostArray::from_values(DType::I64, &[1], &[Value::I64(0)]).unwrap(),
    );
    both_fail(
        &s,
        &prog,
        &inputs,
        "sdfg 'steps' / loop over 'k': integer overflow in 'k + D'",
    );
}

/// A nested SDFG that fails inside a map whose bounds hold: the callee's message names
/// the caller's map point, as the interpreter's does (loops that call nested SDFGs record
/// their parameters).
#[test]
fn a_nested_sdfg_failing_inside_a_map_names_the_map_point() {
    let mut callee = SdfgBuilder::new("scale_row");
    callee
        .symbol("N", DType::I64)
        .symbol("M", DType::I64)
        .array("a", DType::F64, ["M"])
        .array("out", DType::F64, ["M"]);
    callee.state("row", |s| {
        s.map("m", &["i"], &["0:N"], |m| {
            m.tasklet("t", &[("x", "a[i]")], &[("o", "out[i]")], "o = 2.0 * x");
        });
    });
    let callee = callee.build();
    let mut b = SdfgBuilder::new("rows");
    b.symbol("R", DType::I64)
        .symbol("C", DType::I64)
        .symbol("K", DType::I64)
        .array("x", DType::F64, ["R", "C"])
        .array("y", DType::F64, ["R", "C"]);
    b.state("main", |s| {
        s.map("row", &["r"], &["R - 1:R"], |m| {
            m.nested(
                callee,
                &[("N", "K"), ("M", "C")],
                &[("a", "x[r, 0:C]")],
                &[("out", "y[r, 0:C]")],
            );
        });
    });
    let s = b.build();
    let prog = build(&s);
    both_agree(
        &s,
        &prog,
        &random_bindings(&s, &syms(&[("R", 3), ("C", 4), ("K", 4)]), 1).unwrap(),
    );
    both_fail(
        &s,
        &prog,
        &random_bindings(&s, &syms(&[("R", 3), ("C", 4), ("K", 5)]), 2).unwrap(),
        "sdfg 'rows' / state 'main' / map 'row' at r=2 / nested SDFG 'scale_row' / sdfg 'scale_row' / state 'row' / map 'm' at i=4 / tasklet 't': index 4 out of bounds for dimension 0 of 'a' (extent 4)",
    );
}
