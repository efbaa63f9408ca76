//! Nested SDFGs called at every point of a map (DaCe's optimized GT4Py programs keep
//! `if_stmt` callees there): the map's condition covers their subscripts, checked once
//! when the arguments are bound, and the callees then skip their own checks
//! (`plan::bounds::callee_condition`); where it fails they check themselves, and an
//! access that is really out of bounds stops the program with the interpreter's error.

use sdflow_codegen::CpuBackend;
use sdflow_codegen::cuda::device::{DeviceHandle, EmulatedDevice};
use sdflow_codegen::cuda::exec::CudaBackend;
use sdflow_codegen::plan::{CheckPolicy, Plan, Target};
use sdflow_ir::interp::{self, Bindings, random_bindings};
use sdflow_ir::testkit::{assert_same_arguments, if_stmt_gather_callee};
use sdflow_ir::{Block, DType, Sdfg, SdfgBuilder, Value};

/// `v[i, j] = u[i, j] > 0.5 u[i, j] (…) ? w-branch : …` over rows `lo:N`: the generator's
/// gather callee (`w` the whole of `u`, at the point or the row before), called at every
/// point with its symbols bound to the sizes and the map's parameters.
fn program(before: bool, lo: i64) -> Sdfg {
    let mut b = SdfgBuilder::new(if before { "row_before" } else { "at_point" });
    b.symbol("N", DType::I64)
        .symbol("M", DType::I64)
        .array("u", DType::F64, ["N", "M"])
        .array("v", DType::F64, ["N", "M"])
        .transient("h", DType::F64, ["N", "M"]);
    let callee = if_stmt_gather_callee("point", DType::F64, DType::F64, 2, before);
    let rows = format!("{lo}:N");
    b.state("s", |s| {
        s.map("pair", &["i", "j"], &[&rows, "0:M"], |m| {
            m.tasklet("p", &[("a", "u[i, j]")], &[("o", "h[i, j]")], "o = a * 0.5");
            m.nested(
                callee,
                &[("n0", "N"), ("n1", "M"), ("p0", "i"), ("p1", "j")],
                &[("a", "h[i, j]"), ("b", "u[i, j]"), ("w", "u[0:N, 0:M]")],
                &[("o", "v[i, j]")],
            );
        });
    });
    let s = b.build();
    assert_eq!(s.validate(), Ok(()));
    s
}

fn inputs(s: &Sdfg, n: i64, m: i64, seed: u64) -> Bindings {
    let symbols = [
        ("N".to_string(), Value::I64(n)),
        ("M".to_string(), Value::I64(m)),
    ]
    .into_iter()
    .collect();
    let mut b = random_bindings(s, &symbols, seed).unwrap();
    // Both branches taken: `a > b` compares half of `u` with `u`, true where `u` < 0.
    let u = b.arrays.get_mut("u").unwrap();
    for k in (0..u.len()).step_by(3) {
        let x = u.get_flat(k).unwrap().as_f64();
        u.set_flat(k, Value::F64(-x.abs()));
    }
    b
}

fn backend() -> CpuBackend {
    let mut b = CpuBackend {
        cache: None,
        ..CpuBackend::default()
    };
    // Every map on the parallel path, two threads.
    b.emit.parallel_min_points = 1;
    b
}

/// Compiled against the interpreter on each of `cases` (`(N, M)`), and the C source.
fn run(s: &Sdfg, cases: &[(i64, i64)]) -> String {
    let backend = backend();
    let unit = backend.translate(s).unwrap();
    let (lib, origin) = backend.compile_unit(&unit).unwrap();
    for (k, &(n, m)) in cases.iter().enumerate() {
        let prog = unit.load(&lib, origin).unwrap();
        prog.set_threads(2);
        let b = inputs(s, n, m, 7 + k as u64);
        let (mut expected, mut got) = (b.clone(), b);
        match interp::run(s, &mut expected) {
            Ok(()) => {
                prog.run_bindings(&mut got).unwrap();
                assert_same_arguments(s, &expected, &got, &s.name);
            }
            Err(e) => {
                let c = prog.run_bindings(&mut got).unwrap_err().to_string();
                assert_eq!(c, format!("program '{}': {e}", s.name));
            }
        }
    }
    unit.source
}

fn callees(s: &Sdfg) -> CheckPolicy {
    let plan = Plan::of(s, Target::default()).unwrap();
    let st = plan.body.states()[0];
    st.steps
        .iter()
        .find(|x| x.label == "pair")
        .unwrap()
        .callees
        .clone()
}

#[test]
fn a_callee_reading_a_whole_field_at_the_point_skips_its_checks() {
    let s = program(false, 0);
    // `p0` over `0:N` and `p1` over `0:M` read `w`, of extents `N` and `M`, inside:
    // true whatever the sizes.
    assert_eq!(callees(&s), CheckPolicy::Never);
    let c = run(&s, &[(5, 4), (1, 1), (0, 3), (7, 0)]);
    // The unchecked map passes 1; only its checked version asks the callee to check.
    let calls: Vec<&str> = c.lines().filter(|l| l.contains("sdf_e, 1);")).collect();
    assert!(!calls.is_empty(), "no call with the checks skipped:\n{c}");
    assert!(
        c.contains("sdf_pre || ("),
        "the callee's conditions take sdf_pre"
    );
    // The call's windows (`h[i, j]`, `u[i, j]`, `u[0:N, 0:M]`) are subscripts of the map,
    // which its condition covers: only the checked version tests them against the
    // container (each copy still compares the window's size with the callee's array).
    let windows = |tail: &str| {
        c.lines()
            .filter(|l| l.contains(&format!("if (sdf_n != sdf_len_a{tail}")))
            .count()
    };
    // Two unchecked versions (on the team and on one thread, below the parallel
    // threshold), one checked.
    assert_eq!((windows(")"), windows(" ||")), (2, 1), "{c}");
}

#[test]
fn a_callee_reading_the_row_before_checks_itself_where_the_map_starts_at_row_0() {
    // From row 0, the branch's `w[p0 - 1, p1]` would be row -1: the condition, checked at
    // bind, fails, and the callee checks its reads itself (the branch is taken only
    // where `p0 > 0`, so nothing fails).
    let s = program(true, 0);
    let CheckPolicy::AtBind(c) = callees(&s) else {
        panic!("expected a bind-time condition, got {:?}", callees(&s));
    };
    let at = |n: i64| {
        c.eval(&|x| match x {
            "N" => Some(n),
            "M" => Some(4),
            _ => None,
        })
        .unwrap()
    };
    assert_eq!(at(5), 0, "row -1 is read in the branch: not covered");
    let src = run(&s, &[(5, 4), (1, 3), (0, 2)]);
    assert!(src.contains("sdf_e, 0);") && src.contains("sdf_e, 1);"));
    // From row 1 the same callee is covered for every size (the map is empty below 1).
    let s = program(true, 1);
    let p = callees(&s);
    let covered = |n: i64, m: i64| match &p {
        CheckPolicy::Never => true,
        CheckPolicy::AtBind(c) => {
            c.eval(&|x| match x {
                "N" => Some(n),
                "M" => Some(m),
                _ => None,
            })
            .unwrap()
                != 0
        }
        other => panic!("{other:?}"),
    };
    assert!(covered(5, 4) && covered(1, 1) && covered(0, 0));
    run(&s, &[(5, 4), (2, 1), (1, 3)]);
}

/// `o = w[<read>] * 2` at every point of `0:N` (`program`, callee `callee`), `w` the
/// whole of `u`; with `table`, an index table `t` (`tab` whole) passed beside it.
fn row_callee(program: &str, callee: &str, read: &str, table: bool) -> Sdfg {
    let mut c = SdfgBuilder::new(callee);
    c.symbol("n0", DType::I64)
        .symbol("p0", DType::I64)
        .array("w", DType::F64, ["n0"])
        .array("o", DType::F64, ["1"]);
    if table {
        c.array("t", DType::I64, ["n0"]);
    }
    let read = format!("w[{read}]");
    let st = c.state("read", |s| {
        s.tasklet("t", &[("w", &read)], &[("o", "o[0]")], "o = w * 2.0");
    });
    c.body(Block::State(st));
    let callee = c.build();
    let mut b = SdfgBuilder::new(program);
    b.symbol("N", DType::I64)
        .array("u", DType::F64, ["N"])
        .array("v", DType::F64, ["N"]);
    if table {
        b.array("tab", DType::I64, ["N"]);
    }
    let mut ins = vec![("w", "u[0:N]")];
    if table {
        ins.push(("t", "tab[0:N]"));
    }
    b.state("s", |s| {
        s.map("pair", &["i"], &["0:N"], |m| {
            m.nested(callee, &[("n0", "N"), ("p0", "i")], &ins, &[("o", "v[i]")]);
        });
    });
    let s = b.build();
    assert_eq!(s.validate(), Ok(()));
    s
}

/// `o = w[p0 + 1]` at every point of `0:N`: the last row reads past the field.
fn reads_past_the_end() -> Sdfg {
    row_callee("past_the_end", "next", "p0 + 1", false)
}

#[test]
fn a_callee_that_reads_out_of_bounds_still_fails_with_the_interpreters_error() {
    let s = reads_past_the_end();
    assert!(matches!(callees(&s), CheckPolicy::AtBind(_)));
    let backend = backend();
    let prog = backend.build(&s).unwrap();
    prog.set_threads(2);
    let symbols = [("N".to_string(), Value::I64(6))].into_iter().collect();
    let b = random_bindings(&s, &symbols, 3).unwrap();
    let (mut expected, mut got) = (b.clone(), b);
    let e = interp::run(&s, &mut expected).unwrap_err().to_string();
    assert!(e.contains("out of bounds") || e.contains("outside"), "{e}");
    let c = prog.run_bindings(&mut got).unwrap_err().to_string();
    assert_eq!(c, format!("program 'past_the_end': {e}"));
}

#[test]
fn the_plan_says_when_callees_skip_their_checks() {
    let text = Plan::of(&program(false, 0), Target::default())
        .unwrap()
        .to_text();
    assert!(text.contains("; its callees in bounds"), "{text}");
    let text = Plan::of(&program(true, 0), Target::default())
        .unwrap()
        .to_text();
    assert!(text.contains("; its callees checked at bind"), "{text}");
}

/// The random GT4Py-shaped programs (which `tests/cpu.rs` compiles against the
/// interpreter) call callees at every point both ways: covered by their map's condition
/// (the checks skipped) and not (a read of the row before from row 0: each call checks
/// itself), the latter both decided by the plan and at bind; and some of those callees
/// read through a neighbour table, checked where read, ending the callee when bad; and
/// vertical scans pass their columns in place.
#[test]
fn random_programs_call_callees_both_ways() {
    use sdflow_codegen::plan::bounds::callee_condition;
    use sdflow_ir::Node;
    use sdflow_ir::testkit::{GenConfig, generate, sample_symbols};
    let cfg = GenConfig {
        allow_hazards: true,
        allow_gt4py_shapes: true,
        ..GenConfig::default()
    };
    let (mut skipped, mut refused, mut at_bind, mut exits, mut views) = (0, 0, 0, 0, 0);
    for seed in 0..200 {
        let s = generate(seed, &cfg);
        // Callees reading through a neighbour table (`GatherAt::Table`): their checks end
        // them at once.
        let c = backend().translate(&s).unwrap().source;
        exits += usize::from(c.contains("{ sdf_raise_exit("));
        // Scans (`Step::Nested` with `scan`) covered by their map: columns passed in place.
        views += usize::from(c.contains("(void*)&a_"));
        let values: std::collections::BTreeMap<String, i64> = sample_symbols(&s)
            .into_iter()
            .filter(|(_, v)| !v.dtype().is_float())
            .map(|(k, v)| (k, v.as_i64()))
            .collect();
        let plan = Plan::of(&s, Target::default()).unwrap();
        for sp in plan.body.states() {
            let st = &s.states[sp.id.index()];
            for step in &sp.steps {
                if !matches!(st.graph.node(step.node), Node::Map(_)) {
                    continue;
                }
                let Some(c) = callee_condition(&s, &st.graph, step.node) else {
                    continue;
                };
                at_bind += usize::from(matches!(step.callees, CheckPolicy::AtBind(_)));
                if c.eval_map(&values).is_ok_and(|v| v != 0) {
                    skipped += 1;
                } else {
                    refused += 1;
                }
            }
        }
    }
    assert!(
        skipped >= 10 && refused >= 2 && at_bind >= 1 && exits >= 3 && views >= 3,
        "skipped {skipped}, refused {refused}, at bind {at_bind}, programs whose callees end at a bad table value {exits}, programs passing columns in place {views}"
    );
}

/// The CUDA text of `s` and its results on the emulated device against the interpreter
/// on each of `cases` (`(N, M)`).
fn run_cuda(s: &Sdfg, cases: &[(i64, i64)]) -> String {
    let backend = CudaBackend {
        cache: None,
        ..CudaBackend::default()
    };
    let handle = DeviceHandle::new(EmulatedDevice::new());
    let mut prog = backend.build(s, &handle).unwrap();
    for (k, &(n, m)) in cases.iter().enumerate() {
        let b = inputs(s, n, m, 11 + k as u64);
        let (mut expected, mut got) = (b.clone(), b);
        interp::run(s, &mut expected).unwrap();
        prog.run_bindings(&mut got).unwrap();
        assert_same_arguments(s, &expected, &got, &format!("{} ({n}, {m})", s.name));
    }
    backend.generate(s).unwrap().source
}

/// The CUDA kernel named `name` in `src` (from its header to the next kernel).
fn kernel<'a>(src: &'a str, name: &str) -> &'a str {
    let head = format!(" {name}(");
    let at = src
        .find(&head)
        .unwrap_or_else(|| panic!("no kernel {name}"));
    let rest = &src[at..];
    let end = rest[1..].find("extern \"C\"").map_or(rest.len(), |e| e + 1);
    &rest[..end]
}

/// The CUDA backend uses the same condition: the grid kernel of a covered map passes 1
/// to its callees, whose own conditions the compiler then drops; there is no second
/// kernel; results equal the interpreter on the emulated device.
#[test]
fn cuda_kernels_skip_the_checks_of_covered_callees() {
    let s = program(false, 0);
    let src = run_cuda(&s, &[(5, 4), (1, 1), (0, 3), (7, 0)]);
    let k = kernel(&src, "sdf_k0_0");
    assert!(k.contains("sdf_e, 1);"), "the grid kernel passes 1:\n{k}");
    assert!(!k.contains("sdf_e, 0);"), "{k}");
    assert!(!src.contains("sdf_k0_0_own"), "no second kernel");
    assert!(
        src.contains("sdf_pre || ("),
        "the callee's conditions take sdf_pre"
    );
}

/// Under a bind-time callee condition the step has two unchecked kernels: `sdf_k0_0`
/// passes 1, `sdf_k0_0_own` passes 0, and the host launches the second where the
/// condition fails (from row 0) — equal results either way.
#[test]
fn cuda_kernels_of_callees_checked_at_bind_come_in_two_versions() {
    let s = program(true, 0);
    let src = run_cuda(&s, &[(5, 4), (1, 3), (0, 2)]);
    assert!(kernel(&src, "sdf_k0_0").contains("sdf_e, 1);"));
    assert!(kernel(&src, "sdf_k0_0_own").contains("sdf_e, 0);"));
    run_cuda(&program(true, 1), &[(5, 4), (2, 1), (1, 3)]);
}

/// Which version runs matters: a callee that reads past the field (its condition fails
/// at bind) must run in the kernel whose callees check themselves, and the call stops
/// with the interpreter's error; the kernel that skips the checks would read past the
/// end and carry on.
#[test]
fn cuda_a_callee_that_reads_out_of_bounds_still_fails_with_the_interpreters_error() {
    let s = reads_past_the_end();
    let backend = CudaBackend {
        cache: None,
        ..CudaBackend::default()
    };
    let src = backend.generate(&s).unwrap().source;
    assert!(src.contains("sdf_k0_0_own"), "two versions");
    let handle = DeviceHandle::new(EmulatedDevice::new());
    let mut prog = backend.build(&s, &handle).unwrap();
    let symbols = [("N".to_string(), Value::I64(6))].into_iter().collect();
    let b = random_bindings(&s, &symbols, 3).unwrap();
    let (mut expected, mut got) = (b.clone(), b);
    let e = interp::run(&s, &mut expected).unwrap_err().to_string();
    let c = prog.run_bindings(&mut got).unwrap_err().to_string();
    assert!(c.contains(&e), "device: {c}\ninterpreter: {e}");
}

/// `o = w[t[p0]] * 2` at every point of `0:N`, `t` an index table the call passes whole.
fn reads_through_a_table() -> Sdfg {
    row_callee("through_a_table", "gather", "t[p0]", true)
}

/// A value read from an index table in a callee called at every point is checked where
/// it is read; a bad one ends the callee at once (the raise out of line, then a jump to
/// its end: cheaper than reading index 0 and going on), and the program fails with the
/// interpreter's message — the first bad entry's — on the CPU and on the emulated device.
/// Good tables give the interpreter's results.
#[test]
fn a_bad_table_value_in_a_callee_ends_it_with_the_interpreters_error() {
    let s = reads_through_a_table();
    let n = 20;
    let symbols = [("N".to_string(), Value::I64(n))].into_iter().collect();
    let mut good = random_bindings(&s, &symbols, 5).unwrap();
    let tab = good.arrays.get_mut("tab").unwrap();
    for i in 0..n {
        tab.set_flat(i as usize, Value::I64((i * 7 + 3) % n));
    }
    let mut bad = good.clone();
    let t = bad.arrays.get_mut("tab").unwrap();
    t.set_flat(15, Value::I64(-2));
    t.set_flat(3, Value::I64(n + 4));
    let c = backend().translate(&s).unwrap().source;
    assert!(
        c.contains("sdf_raise_exit(") && c.contains("goto sdf_end; }"),
        "the callee's check ends it:\n{c}"
    );
    let cpu = backend().build(&s).unwrap();
    cpu.set_threads(2);
    let cuda = CudaBackend {
        cache: None,
        ..CudaBackend::default()
    };
    let handle = DeviceHandle::new(EmulatedDevice::new());
    let mut gpu = cuda.build(&s, &handle).unwrap();
    // Good tables: the interpreter's results.
    let mut expected = good.clone();
    interp::run(&s, &mut expected).unwrap();
    for k in 0..2 {
        let mut got = good.clone();
        if k == 0 {
            cpu.run_bindings(&mut got).unwrap();
        } else {
            gpu.run_bindings(&mut got).unwrap();
        }
        assert_same_arguments(&s, &expected, &got, "good table");
    }
    // Bad ones: the first one's error, as the interpreter says it.
    let e = interp::run(&s, &mut bad.clone()).unwrap_err().to_string();
    assert!(
        e.contains("at i=3") && e.contains("index 24 out of bounds"),
        "{e}"
    );
    let got = cpu.run_bindings(&mut bad.clone()).unwrap_err().to_string();
    assert_eq!(got, format!("program 'through_a_table': {e}"));
    let got = gpu.run_bindings(&mut bad.clone()).unwrap_err().to_string();
    assert!(got.contains(&e), "device: {got}\ninterpreter: {e}");
}

/// GT4Py's vertical scan: at every row `i` of `0:N`, a callee runs a loop along the row's
/// `M` levels, upwards or (`down`) downwards, carrying `s` from level to level (`v[i, k]
/// = u[i, k + shift] * 0.5 + s / 2`, `s = v[i, k]`) with its columns bound to `u[i, 0:M]`
/// and `v[i, 0:M]`. `shift` 1 reads one level past the column at the top.
fn scan(down: bool, shift: i64) -> Sdfg {
    let mut c = SdfgBuilder::new("column");
    c.symbol("n", DType::I64)
        .symbol("k", DType::I64)
        .array("c", DType::F64, ["n"])
        .array("o", DType::F64, ["n"])
        .transient_scalar("s", DType::F64)
        .transient_scalar("t", DType::F64);
    let init = c.state("init", |s| {
        s.tasklet("init", &[], &[("s", "s")], "s = 0.25");
    });
    let read = format!("c[k + {shift}]");
    let step = c.state("step", |s| {
        s.tasklet(
            "f",
            &[("a", &read), ("s", "s")],
            &[("o", "o[k]"), ("u", "t")],
            "r = a * 0.5 + s * 0.5; o = r; u = r",
        );
    });
    let carry = c.state("carry", |s| {
        s.copy("t", "s");
    });
    let body = Block::seq([Block::State(step), Block::State(carry)]);
    let levels = if down {
        Block::for_loop("k", "n - 1", "k >= 0", "k - 1", body)
    } else {
        Block::for_loop("k", 0, "k < n", "k + 1", body)
    };
    c.body(Block::seq([Block::State(init), levels]));
    let callee = c.build();
    let mut b = SdfgBuilder::new(if down { "scan_down" } else { "scan_up" });
    b.symbol("N", DType::I64)
        .symbol("M", DType::I64)
        .array("u", DType::F64, ["N", "M"])
        .array("v", DType::F64, ["N", "M"]);
    b.state("s", |s| {
        s.map("pair", &["i"], &["0:N"], |m| {
            m.nested(
                callee,
                &[("n", "M")],
                &[("c", "u[i, 0:M]")],
                &[("o", "v[i, 0:M]")],
            );
        });
    });
    let s = b.build();
    assert_eq!(s.validate(), Ok(()));
    s
}

/// The loop variable of a scan is bounded by the values its loop gives it, as a map
/// parameter by its range: the callee condition covers the levels (`0:M`, upwards or
/// downwards), the callee skips its checks, and its columns are passed as pointers into
/// the caller's fields (`plan::window_by_reference`), not copied in and out at every
/// row; results equal the interpreter's on the CPU and on the emulated device, empty
/// extents included.
#[test]
fn a_scan_callee_runs_on_its_columns_in_place_under_its_maps_condition() {
    for down in [false, true] {
        let s = scan(down, 0);
        assert_eq!(callees(&s), CheckPolicy::Never, "down {down}");
        let c = run(&s, &[(5, 4), (1, 1), (0, 3), (7, 0), (3, 9)]);
        assert!(c.contains("sdf_e, 1);"), "{c}");
        // The unchecked versions pass pointers to the rows; the checked one copies.
        let views = c
            .lines()
            .filter(|l| l.contains("(void*)&a_u[") && l.contains("(void*)&a_v["))
            .count();
        assert_eq!(views, 2, "{c}");
        let copies = c.matches("* sdf_c_o = (double*)calloc(").count();
        assert_eq!(copies, 1, "only the checked version copies: {c}");
        run_cuda(&s, &[(5, 4), (1, 1), (0, 3), (3, 9)]);
    }
}

/// A scan whose loop reads one level past its column is not covered: the callee checks
/// itself (its columns copied), and the program stops with the interpreter's error, on
/// the CPU and on the emulated device.
#[test]
fn a_scan_reading_past_its_column_fails_with_the_interpreters_error() {
    let s = scan(false, 1);
    let CheckPolicy::AtBind(c) = callees(&s) else {
        panic!("expected a bind-time condition, got {:?}", callees(&s));
    };
    let at = |n: i64, m: i64| {
        c.eval(&|x| match x {
            "N" => Some(n),
            "M" => Some(m),
            _ => None,
        })
        .unwrap()
    };
    // Fails where a level is read; holds where the loop runs no level.
    assert_eq!((at(4, 3), at(4, 1), at(4, 0)), (0, 0, 1));
    let symbols = [
        ("N".to_string(), Value::I64(4)),
        ("M".to_string(), Value::I64(3)),
    ]
    .into_iter()
    .collect();
    let b = random_bindings(&s, &symbols, 3).unwrap();
    let mut expected = b.clone();
    let e = interp::run(&s, &mut expected).unwrap_err().to_string();
    assert!(e.contains("index 3 out of bounds"), "{e}");
    let cpu = backend().build(&s).unwrap();
    cpu.set_threads(2);
    let c = cpu.run_bindings(&mut b.clone()).unwrap_err().to_string();
    assert_eq!(c, format!("program 'scan_up': {e}"));
    let cuda = CudaBackend {
        cache: None,
        ..CudaBackend::default()
    };
    let handle = DeviceHandle::new(EmulatedDevice::new());
    let mut gpu = cuda.build(&s, &handle).unwrap();
    let c = gpu.run_bindings(&mut b.clone()).unwrap_err().to_string();
    assert!(c.contains(&e), "device: {c}\ninterpreter: {e}");
}
