//! Compiled code against the interpreter on programs that once went wrong: a loop whose
//! condition reads a host scalar the body writes (a deadlock with two threads),
//! unordered write-conflict writers (lost updates), and nested outputs under a wcr
//! (started at zero instead of the operation's identity). Transient scalars carried
//! across iterations or shared with state level are now invalid programs.

use sdflow_ir::testkit::assert_same_arguments;
use std::collections::BTreeMap;

use sdflow_codegen::CpuBackend;
use sdflow_ir::interp::{self, Bindings, HostArray, random_bindings};
use sdflow_ir::{Block, DType, Schedule, Sdfg, SdfgBuilder, StateId, SymExpr, Value};

fn syms(pairs: &[(&str, i64)]) -> BTreeMap<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Value::I64(*v)))
        .collect()
}

fn check(s: &Sdfg, inputs: &Bindings) {
    let mut expected = inputs.clone();
    interp::run(s, &mut expected).unwrap();
    let prog = CpuBackend {
        cache: None,
        ..CpuBackend::default()
    }
    .build(s)
    .unwrap();
    prog.set_threads(2);
    let mut got = inputs.clone();
    prog.run_bindings(&mut got).unwrap();
    assert_same_arguments(s, &expected, &got, "compiled");
}

#[test]
fn a_loop_on_a_host_scalar_the_body_writes_terminates_and_agrees() {
    let mut b = SdfgBuilder::new("lc");
    b.symbol("k", DType::I64)
        .scalar("cnt", DType::I64)
        .array("out", DType::I64, [1]);
    b.state("body", |s| {
        s.tasklet("inc", &[("a", "cnt")], &[("o", "cnt")], "o = a + 1");
    });
    b.state("after", |s| {
        s.tasklet("cp", &[("a", "cnt")], &[("o", "out[0]")], "o = a");
    });
    b.body(Block::seq([
        Block::for_loop(
            "k",
            SymExpr::Int(0),
            SymExpr::parse("cnt < 20000").unwrap(),
            SymExpr::parse("k + 1").unwrap(),
            Block::State(StateId(0)),
        ),
        Block::State(StateId(1)),
    ]));
    let s = b.build();
    assert_eq!(s.validate(), Ok(()));
    let mut inputs = random_bindings(&s, &syms(&[]), 1).unwrap();
    inputs
        .arrays
        .insert("cnt".into(), HostArray::zeros(DType::I64, &[]));
    check(&s, &inputs);
}

#[test]
fn unordered_write_conflict_writers_lose_no_update() {
    for sched in [Schedule::CpuParallel, Schedule::Sequential] {
        let mut b = SdfgBuilder::new("acc2");
        b.symbol("N", DType::I64)
            .array("x", DType::I64, ["N"])
            .array("acc", DType::I64, [1]);
        b.state("s", |s| {
            for name in ["a", "b"] {
                s.map_scheduled(name, &["i"], &["0:N"], sched, |m| {
                    m.tasklet(
                        "t",
                        &[("v", "x[i]")],
                        &[("o", "acc[0] (wcr: sum)")],
                        "o = v",
                    );
                });
            }
        });
        let s = b.build();
        let inputs = random_bindings(&s, &syms(&[("N", 200_000)]), 3).unwrap();
        for _ in 0..5 {
            check(&s, &inputs);
        }
    }
}

#[test]
fn nested_outputs_under_a_wcr_start_from_its_identity() {
    let mut inner = SdfgBuilder::new("inner");
    inner
        .array("o", DType::F64, [4])
        .array("x", DType::F64, [4]);
    inner.state("s", |s| {
        s.map("m", &["i"], &["0:2"], |m| {
            m.tasklet("t", &[("v", "x[i]")], &[("w", "o[i]")], "w = v");
        });
    });
    let inner = inner.build();
    let mut b = SdfgBuilder::new("nw");
    b.array("x", DType::F64, [4]).array("y", DType::F64, [4]);
    b.state("s", |s| {
        s.nested(
            inner,
            &[],
            &[("x", "x[0:4]")],
            &[("o", "y[0:4] (wcr: max)")],
        );
    });
    let s = b.build();
    let inputs = random_bindings(&s, &syms(&[]), 3).unwrap();
    check(&s, &inputs);
}

#[test]
fn transient_scalars_in_map_bodies_are_private_to_an_iteration() {
    // Carried across iterations: invalid.
    let mut b = SdfgBuilder::new("carry");
    b.symbol("N", DType::I64)
        .array("x", DType::F64, ["N"])
        .array("out", DType::F64, ["N"])
        .transient_scalar("acc", DType::F64);
    b.state("s", |s| {
        s.map_scheduled("scan", &["i"], &["0:N"], Schedule::Sequential, |m| {
            m.tasklet(
                "t",
                &[("a", "acc"), ("v", "x[i]")],
                &[("o", "out[i]"), ("n", "acc")],
                "o = a + v; n = a + v",
            );
        });
    });
    let problems = b.build().validate().unwrap_err();
    assert!(
        problems[0]
            .to_string()
            .contains("transient scalar 'acc' is read in map 'scan' before the body writes it"),
        "{}",
        problems[0]
    );
    // Written at state level, read in a body: invalid.
    let mut b = SdfgBuilder::new("shared");
    b.symbol("N", DType::I64)
        .array("x", DType::F64, ["N"])
        .array("c", DType::F64, [1])
        .array("out", DType::F64, ["N"])
        .transient_scalar("s", DType::F64);
    b.state("s0", |s| {
        s.tasklet("k", &[("v", "c[0]")], &[("o", "s")], "o = v * 2.0");
    });
    b.state("s1", |s| {
        s.map("m", &["i"], &["0:N"], |m| {
            m.tasklet(
                "t",
                &[("a", "s"), ("v", "x[i]")],
                &[("o", "out[i]")],
                "o = a + v",
            );
        });
    });
    let text: Vec<String> = b
        .build()
        .validate()
        .unwrap_err()
        .iter()
        .map(|p| p.to_string())
        .collect();
    assert!(
        text.iter().any(|t| t
            .contains("transient scalar 's' is used both inside map 'm' and outside map bodies")),
        "{text:?}"
    );
    // Written in a body, read by the control flow (a loop's condition): invalid, since
    // no one iteration's value is the scalar's.
    let mut b = SdfgBuilder::new("steer");
    b.symbol("N", DType::I64)
        .symbol("k", DType::I64)
        .array("x", DType::I64, ["N"])
        .array("out", DType::I64, ["N"])
        .transient_scalar("t", DType::I64);
    b.state("s", |s| {
        s.map("m", &["i"], &["0:N"], |m| {
            m.tasklet("w", &[("v", "x[i]")], &[("o", "t")], "o = v");
            m.tasklet("r", &[("a", "t")], &[("o", "out[i]")], "o = a");
        });
    });
    b.body(Block::for_loop(
        "k",
        SymExpr::Int(0),
        SymExpr::parse("t < 1").unwrap(),
        SymExpr::parse("k + 1").unwrap(),
        Block::State(StateId(0)),
    ));
    let text: Vec<String> = b
        .build()
        .validate()
        .unwrap_err()
        .iter()
        .map(|p| p.to_string())
        .collect();
    assert!(
        text.iter().any(|t| t.contains(
            "transient scalar 't' is written inside map 'm' and read by the control flow"
        )),
        "{text:?}"
    );
}

/// `c[e2c[e, n] - r]`: a gather through a neighbour table whose entries are absolute
/// indices of a field that starts at `r` (GT4Py's layout).
fn gather_with_offset() -> Sdfg {
    let mut b = SdfgBuilder::new("gather_off");
    b.symbol("NC", DType::I64)
        .symbol("NE", DType::I64)
        .symbol("r", DType::I64)
        .array("c", DType::F64, ["NC"])
        .array("e2c", DType::I32, ["NE", "2"])
        .array("out", DType::F64, ["NE"]);
    b.state("edges", |s| {
        s.map("edge", &["e"], &["0:NE"], |m| {
            m.tasklet(
                "gather",
                &[("a", "c[e2c[e, 0] - r]"), ("b", "c[e2c[e, 1] - r]")],
                &[("o", "out[e]")],
                "o = a - b",
            );
        });
    });
    b.build()
}

#[test]
fn indirect_accesses_with_an_offset_agree_and_bad_entries_are_errors() {
    let s = gather_with_offset();
    assert_eq!(s.validate(), Ok(()));
    let sy = syms(&[("NC", 7), ("NE", 50), ("r", 3)]);
    let inputs = random_bindings(&s, &sy, 5).unwrap();
    let table: Vec<i64> = inputs.arrays["e2c"]
        .values()
        .iter()
        .map(|v| v.as_i64())
        .collect();
    assert!(table.iter().all(|v| (3..10).contains(v)), "{table:?}");
    check(&s, &inputs);

    // An entry that points outside the field: the interpreter names it, compiled code
    // reports an error instead of reading outside the array.
    let mut bad = inputs.clone();
    let mut values = bad.arrays["e2c"].values();
    values[17] = Value::I64(10);
    bad.arrays.insert(
        "e2c".into(),
        HostArray::from_values(DType::I32, &[50, 2], &values).unwrap(),
    );
    bad_table(&s, &bad, "index 7 out of bounds for dimension 0 of 'c'");
}

/// `out[e, k] = c[e2c[e, n] - r, k]` summed over the neighbours `n`: a gather at every
/// level `k` of an edge `e`, through entries of the edge's row (GT4Py's neighbour
/// reductions over a horizontal and a vertical dimension). With `call`, the difference of
/// the two goes through a nested SDFG called at each point (GT4Py's `if` at a point)
/// before it is stored: the callee gathers through no table.
fn gather_per_level(call: bool) -> Sdfg {
    let mut b = SdfgBuilder::new(if call {
        "gather_levels_call"
    } else {
        "gather_levels"
    });
    b.symbol("NC", DType::I64)
        .symbol("NE", DType::I64)
        .symbol("K", DType::I64)
        .symbol("r", DType::I64)
        .array("c", DType::F64, ["NC", "K"])
        .array("e2c", DType::I32, ["NE", "2"])
        .array("out", DType::F64, ["NE", "K"]);
    b.transient("nb", DType::F64, ["2"]);
    if call {
        b.transient("sum", DType::F64, ["NE", "K"]);
    }
    let callee = call.then(|| {
        let mut callee = SdfgBuilder::new("point");
        for c in ["a", "o"] {
            callee.array(c, DType::F64, ["1"]);
        }
        callee.state("body", |s| {
            s.tasklet(
                "f",
                &[("a", "a[0]")],
                &[("o", "o[0]")],
                "o = select(a > 0.0, a, -a)",
            );
        });
        callee.build()
    });
    b.state("edges", |s| {
        s.map("edge", &["e", "k"], &["0:NE", "0:K"], |m| {
            m.map("nbh", &["n"], &["0:2"], |inner| {
                inner.tasklet(
                    "g",
                    &[("a", "c[e2c[e, n] - r, k]")],
                    &[("o", "nb[n]")],
                    "o = a * 0.5",
                );
            });
            match callee {
                Some(callee) => {
                    m.tasklet(
                        "sum",
                        &[("a", "nb[0]"), ("b", "nb[1]")],
                        &[("o", "sum[e, k]")],
                        "o = a - b",
                    );
                    m.nested(callee, &[], &[("a", "sum[e, k]")], &[("o", "out[e, k]")]);
                }
                None => {
                    m.tasklet(
                        "sum",
                        &[("a", "nb[0]"), ("b", "nb[1]")],
                        &[("o", "out[e, k]")],
                        "o = a + b",
                    );
                }
            }
        });
    });
    b.build()
}

/// The entries a map's body reads at one edge are checked once for the edge, before its
/// levels, which then gather without a check: the results are the interpreter's, a bad
/// entry is the interpreter's error with its map point, and with no levels nothing is
/// read (the interpreter reads nothing either).
#[test]
fn entries_checked_per_row_agree_and_bad_entries_are_errors() {
    let s = gather_per_level(false);
    assert_eq!(s.validate(), Ok(()));
    let code = CpuBackend::default().generate(&s).unwrap();
    assert!(code.contains("if (sdf_rok) {"), "no check per row:\n{code}");
    // Enough points for the parallel loops, where the rows are checked.
    let sy = syms(&[("NC", 7), ("NE", 800), ("K", 6), ("r", 3)]);
    let inputs = random_bindings(&s, &sy, 11).unwrap();
    check(&s, &inputs);
    let mut bad = inputs.clone();
    let mut values = bad.arrays["e2c"].values();
    values[33] = Value::I64(2);
    bad.arrays.insert(
        "e2c".into(),
        HostArray::from_values(DType::I32, &[800, 2], &values).unwrap(),
    );
    bad_table(&s, &bad, "index -1 out of bounds for dimension 0 of 'c'");
    // The same with a nested SDFG called at each point.
    let call = gather_per_level(true);
    assert_eq!(call.validate(), Ok(()));
    let code = CpuBackend::default().generate(&call).unwrap();
    assert!(code.contains("if (sdf_rok) {"), "no check per row:\n{code}");
    check(&call, &inputs);
    bad_table(&call, &bad, "index -1 out of bounds for dimension 0 of 'c'");
    // No levels: the bad entry is never read.
    let mut none = bad.clone();
    none.symbols.insert("K".into(), Value::I64(0));
    for a in ["c", "out"] {
        let rows = if a == "c" { 7 } else { 800 };
        none.arrays
            .insert(a.into(), HostArray::zeros(DType::F64, &[rows, 0]));
    }
    check(&s, &none);
}

/// `out[e, k] = c[e2c[e, 0], kk] + c[e2c[e, 1], kk]` with `kk = k + off[e, k]` computed at
/// each point (GT4Py's dynamic vertical offsets: the level a neighbour is read at comes
/// from a field): a gather through a table entry of the edge's row in one dimension and
/// an index computed in the body in the other.
fn gather_at_computed_level() -> Sdfg {
    let mut b = SdfgBuilder::new("computed_level");
    b.symbol("NC", DType::I64)
        .symbol("NE", DType::I64)
        .symbol("K", DType::I64)
        .array("c", DType::F64, ["NC", "K"])
        .array("off", DType::I32, ["NE", "K"])
        .array("e2c", DType::I32, ["NE", "2"])
        .array("out", DType::F64, ["NE", "K"])
        .transient_scalar("kk", DType::I32);
    b.state("edges", |s| {
        s.map("edge", &["e", "k"], &["0:NE", "0:K"], |m| {
            m.tasklet(
                "level",
                &[("o", "off[e, k]")],
                &[("l", "kk")],
                "l = i32(k) + o",
            );
            m.tasklet(
                "g",
                &[
                    ("a", "c[e2c[e, 0], kk[]]"),
                    ("b", "c[e2c[e, 1], kk[]]"),
                    ("l", "kk"),
                ],
                &[("o", "out[e, k]")],
                "o = a * 0.5 + b",
            );
        });
    });
    b.build()
}

/// The table entries of an edge's row are checked once for the row while the level each
/// gather computes stays checked at each point: results are the interpreter's, and a bad
/// entry or a level outside the field is the interpreter's error with its map point.
#[test]
fn entries_checked_per_row_beside_levels_computed_at_each_point() {
    let s = gather_at_computed_level();
    assert_eq!(s.validate(), Ok(()));
    let code = CpuBackend::default().generate(&s).unwrap();
    assert!(code.contains("if (sdf_rok) {"), "no check per row:\n{code}");
    // Enough points for the parallel loops, where the rows are checked.
    let sy = syms(&[("NC", 7), ("NE", 800), ("K", 6)]);
    let mut inputs = random_bindings(&s, &sy, 5).unwrap();
    // Offsets that keep every level inside the field: -k ..= K - 1 - k.
    let offs: Vec<Value> = (0..800 * 6)
        .map(|p| Value::I64(((p / 6) % 6) as i64 - (p % 6) as i64))
        .collect();
    inputs.arrays.insert(
        "off".into(),
        HostArray::from_values(DType::I32, &[800, 6], &offs).unwrap(),
    );
    check(&s, &inputs);
    let mut bad_entry = inputs.clone();
    let mut values = bad_entry.arrays["e2c"].values();
    values[57] = Value::I64(7);
    bad_entry.arrays.insert(
        "e2c".into(),
        HostArray::from_values(DType::I32, &[800, 2], &values).unwrap(),
    );
    bad_table(
        &s,
        &bad_entry,
        "index 7 out of bounds for dimension 0 of 'c' (extent 7)",
    );
    let mut bad_level = inputs.clone();
    let mut values = offs.clone();
    values[6 * 521 + 4] = Value::I64(2);
    bad_level.arrays.insert(
        "off".into(),
        HostArray::from_values(DType::I32, &[800, 6], &values).unwrap(),
    );
    bad_table(
        &s,
        &bad_level,
        "index 6 out of bounds for dimension 1 of 'c' (extent 6)",
    );
}

/// `b` holds a table entry outside the field: the interpreter's error names it
/// (`interp_says`), and compiled code reports the same error, location and map point
/// included, instead of reading outside memory.
fn bad_table(s: &Sdfg, b: &Bindings, interp_says: &str) {
    let e = interp::run(s, &mut b.clone()).unwrap_err().to_string();
    assert!(e.contains(interp_says), "{e}");
    let prog = CpuBackend {
        cache: None,
        ..CpuBackend::default()
    }
    .build(s)
    .unwrap();
    prog.set_threads(2);
    let c = prog.run_bindings(&mut b.clone()).unwrap_err().to_string();
    assert_eq!(c, format!("program '{}': {e}", s.name));
}

#[test]
fn a_table_into_a_field_without_elements_is_an_error_not_a_stray_read() {
    let s = gather_with_offset();
    let mut b = random_bindings(&s, &syms(&[("NC", 0), ("NE", 3), ("r", 0)]), 1).unwrap();
    b.arrays.insert(
        "e2c".into(),
        HostArray::from_values(DType::I32, &[3, 2], &[0, 1, 2, 0, 1, 2].map(Value::I64)).unwrap(),
    );
    b.symbols.insert("r".into(), Value::I64(0));
    bad_table(&s, &b, "out of bounds for dimension 0 of 'c' (extent 0)");
}

/// Nested SDFGs twelve deep: each callee is emitted as one C function, whichever versions
/// of the calling node (bounds proven, checked, parallel or single-thread loops) call
/// it. Emitting the callee once per calling version doubled the code at every level
/// (a GT4Py program with seven nested levels reached 40 MB of C).
#[test]
fn deep_nesting_emits_each_nested_sdfg_once() {
    const DEPTH: usize = 12;
    let mut inner = SdfgBuilder::new("level0");
    inner
        .symbol("N", DType::I64)
        .array("x", DType::F64, ["N"])
        .array("y", DType::F64, ["N"]);
    inner.state("s", |s| {
        s.map("m", &["i"], &["0:N"], |m| {
            m.tasklet("t", &[("v", "x[i]")], &[("w", "y[i]")], "w = v * 2.0 + 1.0");
        });
    });
    let mut sdfg = inner.build();
    for level in 1..=DEPTH {
        let mut b = SdfgBuilder::new(&format!("level{level}"));
        b.symbol("N", DType::I64)
            .array("x", DType::F64, ["N"])
            .array("y", DType::F64, ["N"]);
        b.state("s", |s| {
            s.nested(sdfg, &[("N", "N")], &[("x", "x[0:N]")], &[("y", "y[0:N]")]);
        });
        sdfg = b.build();
    }
    assert_eq!(sdfg.validate(), Ok(()));
    let backend = CpuBackend {
        cache: None,
        ..CpuBackend::default()
    };
    let code = backend.generate(&sdfg).unwrap();
    assert_eq!(code.matches("static int sdf_nested_").count(), DEPTH);
    let inputs = random_bindings(&sdfg, &syms(&[("N", 5)]), 7).unwrap();
    check(&sdfg, &inputs);
    let y = match &inputs.arrays["x"] {
        HostArray::F64(x) => x.mapv(|v| v * 2.0 + 1.0),
        other => panic!("{other:?}"),
    };
    let mut got = inputs.clone();
    backend
        .build(&sdfg)
        .unwrap()
        .run_bindings(&mut got)
        .unwrap();
    assert_eq!(got.arrays["y"].bits(), HostArray::F64(y).bits());
}

/// The tiled fused hyperdiffusion (`Pipeline::cpu` on `examples/hyperdiffusion.sdfg.json`)
/// runs unchecked and in parallel: its in-bounds condition is stated (the tile's inner
/// ranges are clipped with `min`/`max`, which the bounds push through) and holds for the
/// sizes it runs at. Without it, the flagship kernel ran its checked version, on one
/// thread, seventeen times slower.
#[test]
fn the_tiled_fused_hyperdiffusion_runs_unchecked() {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../examples/hyperdiffusion.sdfg.json"),
    )
    .unwrap();
    let mut s = sdflow_ir::format::load(&text).unwrap();
    sdflow_transforms::Pipeline::cpu().run(&mut s).unwrap();
    let mut maps = 0;
    for st in &s.states {
        for n in st.graph.node_ids() {
            if !matches!(st.graph.node(n), sdflow_ir::Node::Map(_)) {
                continue;
            }
            maps += 1;
            let c = sdflow_codegen::cpu::bounds::node_condition(&s, &st.graph, n)
                .unwrap_or_else(|| panic!("no condition for a map of state '{}'", st.name));
            for n in [5, 64, 4096] {
                assert_eq!(c.eval(&|x| (x == "N").then_some(n)), Ok(1), "N = {n}: {c}");
            }
        }
    }
    assert!(maps >= 1);
    let code = CpuBackend::default().generate(&s).unwrap();
    assert!(
        code.contains("sdf_ok[0]") && code.contains("#pragma omp for"),
        "{code}"
    );
}

/// A tasklet that reads a name before assigning the output of that name: the name is the
/// symbol until the statement that assigns the output, the output after it, for
/// validation, the interpreter and the C code alike (the C code once read the output's
/// initial zero).
#[test]
fn an_output_read_before_its_assignment_is_the_symbol_of_that_name() {
    let mut b = SdfgBuilder::new("shadow");
    b.symbol("n", DType::I64)
        .array("x", DType::F64, [4])
        .array("y", DType::F64, [4])
        .array("z", DType::F64, [4]);
    b.state("s", |s| {
        s.map("m", &["i"], &["0:4"], |m| {
            m.tasklet(
                "t",
                &[("a", "x[i]")],
                &[("n", "y[i]"), ("w", "z[i]")],
                "before = a + n; n = before * 2.0; w = n + 1.0",
            );
        });
    });
    let s = b.build();
    s.validate().unwrap();
    let mut inputs = random_bindings(&s, &syms(&[("n", 5)]), 3).unwrap();
    inputs.arrays.insert(
        "x".into(),
        HostArray::from_f64(&[4], vec![1.0, 2.0, 3.0, 4.0]).unwrap(),
    );
    let mut expected = inputs.clone();
    interp::run(&s, &mut expected).unwrap();
    assert_eq!(
        expected.arrays["y"].to_f64_vec(),
        vec![12.0, 14.0, 16.0, 18.0]
    );
    assert_eq!(
        expected.arrays["z"].to_f64_vec(),
        vec![13.0, 15.0, 17.0, 19.0]
    );
    check(&s, &inputs);
}

/// The mappings of this process with the huge-page mark (`hg` in `VmFlags`), by size in kB.
#[cfg(target_os = "linux")]
fn huge_page_mappings_kb() -> Vec<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut sizes = Vec::new();
    let mut size = 0;
    for line in smaps.lines() {
        if let Some(v) = line.strip_prefix("Size:") {
            size = v.trim().trim_end_matches("kB").trim().parse().unwrap();
        } else if let Some(flags) = line.strip_prefix("VmFlags:")
            && flags.split_whitespace().any(|f| f == "hg")
        {
            sizes.push(size);
        }
    }
    sizes
}

/// A transient of 2 MiB or more is a mapping of its own marked for huge pages: zeroed at
/// `init` (a program that leaves part of it unwritten reads zeros, as the interpreter's),
/// kept between calls, and unmapped when the program is dropped.
#[test]
fn a_large_transient_is_a_zeroed_huge_page_mapping() {
    // 700,000 doubles: 5.6 MB, rounded up to 6 MiB (6144 kB), a size no other test makes.
    let mut b = SdfgBuilder::new("big_transient");
    b.symbol("N", DType::I64)
        .array("x", DType::F64, ["N"])
        .array("out", DType::F64, ["N"])
        .transient("t", DType::F64, ["N"]);
    b.state("produce", |s| {
        s.map("p", &["i"], &["0:N - 3"], |m| {
            m.tasklet("dbl", &[("a", "x[i]")], &[("o", "t[i]")], "o = a * 2.0");
        });
    });
    b.state("consume", |s| {
        s.map("c", &["i"], &["0:N"], |m| {
            m.tasklet("inc", &[("a", "t[i]")], &[("o", "out[i]")], "o = a + 1.0");
        });
    });
    b.body(Block::seq([
        Block::State(StateId(0)),
        Block::State(StateId(1)),
    ]));
    let s = b.build();
    assert_eq!(s.validate(), Ok(()));
    let backend = CpuBackend {
        cache: None,
        ..CpuBackend::default()
    };
    let source = backend.generate(&s).unwrap();
    assert!(
        source.contains("st->t_t = (double*)sdf_array_alloc(n, sizeof(double), &st->z_t)"),
        "the transient is not allocated by sdf_array_alloc"
    );
    let inputs = random_bindings(&s, &syms(&[("N", 700_000)]), 3).unwrap();
    let mut expected = inputs.clone();
    interp::run(&s, &mut expected).unwrap();
    let out = expected.arrays["out"].to_f64_vec();
    assert_eq!(
        &out[699_997..],
        &[1.0, 1.0, 1.0],
        "the unwritten tail reads zeros"
    );
    #[cfg(target_os = "linux")]
    let before = huge_page_mappings_kb()
        .iter()
        .filter(|&&k| k == 6144)
        .count();
    let prog = backend.build(&s).unwrap();
    prog.set_threads(2);
    for _ in 0..2 {
        let mut got = inputs.clone();
        prog.run_bindings(&mut got).unwrap();
        assert_same_arguments(&s, &expected, &got, "compiled");
    }
    #[cfg(target_os = "linux")]
    {
        let during = huge_page_mappings_kb()
            .iter()
            .filter(|&&k| k == 6144)
            .count();
        assert_eq!(
            during,
            before + 1,
            "one 6 MiB mapping marked for huge pages"
        );
        drop(prog);
        let after = huge_page_mappings_kb()
            .iter()
            .filter(|&&k| k == 6144)
            .count();
        assert_eq!(after, before, "the mapping is gone with the program");
    }
}
