//! The CPU backend against the reference interpreter: bitwise-equal outputs.

use sdflow_ir::testkit::assert_same_arguments;
use std::path::Path;

use sdflow_codegen::CpuBackend;
use sdflow_ir::interp::{self, Bindings, random_bindings};
use sdflow_ir::testkit::{sample_small_symbols, sample_symbols};
use sdflow_ir::{Sdfg, Value};

fn backend() -> CpuBackend {
    CpuBackend {
        cache: None,
        ..CpuBackend::default()
    }
}

/// [`backend`] at `-O2` for the generated programs. Their C takes GCC 12 twice as long
/// at `-O3` (these tests spend 85 % of their time in the compiler) and what they check,
/// the generated code's semantics, the flags that keep results bitwise (no contraction,
/// rounding math) keep at every level; `-O2` still vectorizes and relies on `restrict`
/// and on the absence of undefined behaviour. `-O3` builds are the examples', the
/// dycore's, both corpora's and the Python tests'.
fn generated_backend() -> CpuBackend {
    let mut b = backend();
    b.compiler = b.compiler.at_level("-O2");
    b
}

/// [`generated_backend`] with every map of at least one point on the parallel path, run
/// on two threads: the random programs' grids are far smaller than the default
/// threshold, so they would only ever test the single-thread loops. For the same reason
/// a lagged pair runs in chunks of one row.
fn parallel_backend() -> CpuBackend {
    let mut b = generated_backend();
    b.emit.parallel_min_points = 1;
    // Lagged pairs (`plan::lag`) in chunks of one row: every chunk boundary tested.
    b.emit.lag_points = 1;
    b
}

fn compare(sdfg: &Sdfg, inputs: &Bindings) {
    compare_all(sdfg, std::slice::from_ref(inputs));
}

/// One build of `sdfg`, run on each of `inputs` against the interpreter.
fn compare_all(sdfg: &Sdfg, inputs: &[Bindings]) {
    compare_runs(&backend(), sdfg, inputs, false);
}

/// [`compare_all`], where the interpreter may stop with an error: compiled code then stops
/// with the same message.
/// Compiled with [`parallel_backend`]. The generator's reductions add integral values
/// into `total` (exact in any order); its initial value is made integral too, since
/// parallel additions combine in an unspecified order (`docs/backend-cpu.md`).
fn compare_or_fail_alike(sdfg: &Sdfg, inputs: &[Bindings]) {
    let inputs: Vec<Bindings> = inputs
        .iter()
        .map(|b| {
            let mut b = b.clone();
            sdflow_ir::testkit::make_total_integral(&mut b);
            b
        })
        .collect();
    compare_runs(&parallel_backend(), sdfg, &inputs, true);
}

/// One compile of `sdfg`, loaded afresh for each of `inputs`: compiled transients are
/// zero-filled when a program is loaded, not at every call (`docs/backend-cpu.md`), and
/// the interpreter's start zero-filled on every run, so each comparison is a first call.
fn compare_runs(backend: &CpuBackend, sdfg: &Sdfg, inputs: &[Bindings], errors: bool) {
    let fail = |e: sdflow_codegen::CodegenError| -> ! { panic!("{}: {e}", sdfg.name) };
    let unit = backend.translate(sdfg).unwrap_or_else(|e| fail(e));
    let (lib, origin) = backend.compile_unit(&unit).unwrap_or_else(|e| fail(e));
    for inputs in inputs {
        let prog = unit.load(&lib, origin).unwrap_or_else(|e| fail(e));
        prog.set_threads(2);
        let (mut expected, mut got) = (inputs.clone(), inputs.clone());
        match interp::run(sdfg, &mut expected) {
            Ok(()) => {
                prog.run_bindings(&mut got).unwrap();
                assert_same_arguments(sdfg, &expected, &got, &sdfg.name);
            }
            Err(e) if errors => {
                let c = prog.run_bindings(&mut got).unwrap_err().to_string();
                assert_eq!(c, format!("program '{}': {e}", sdfg.name));
            }
            Err(e) => panic!("{}: {e}", sdfg.name),
        }
    }
}

#[test]
fn snapshot_inputs_match_the_interpreter() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/in");
    for entry in std::fs::read_dir(&root).unwrap() {
        let path = entry.unwrap().path();
        if !path.to_string_lossy().ends_with(".sdfg.json") {
            continue;
        }
        let sdfg = sdflow_ir::format::load(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let mut symbols = sample_symbols(&sdfg);
        for (k, s) in &sdfg.symbols {
            if s.dtype.is_float() && s.value.is_none() {
                symbols.insert(k.clone(), Value::F64(0.75));
            }
        }
        let inputs = random_bindings(&sdfg, &symbols, 9).unwrap();
        compare(&sdfg, &inputs);
    }
}

#[test]
fn examples_match_the_interpreter() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    for (file, syms) in [
        ("laplace.sdfg.json", vec![("N", 9)]),
        ("hyperdiffusion.sdfg.json", vec![("N", 12)]),
        (
            "tridiagonal.sdfg.json",
            vec![("NX", 3), ("NY", 4), ("NZ", 6)],
        ),
        ("flag_if.sdfg.json", vec![("N", 7), ("mode", 1)]),
    ] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        let sdfg = sdflow_ir::format::load(&text).unwrap();
        let mut symbols = sample_symbols(&sdfg);
        for (k, v) in syms {
            symbols.insert(k.to_string(), Value::I64(v).cast(sdfg.symbols[k].dtype));
        }
        for (k, s) in &sdfg.symbols {
            if s.dtype.is_float() && s.value.is_none() {
                symbols.insert(k.clone(), Value::F64(0.125));
            }
        }
        let inputs = random_bindings(&sdfg, &symbols, 5).unwrap();
        compare(&sdfg, &inputs);
    }
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48)
}

use proptest::prelude::*;
use sdflow_ir::testkit::{GenConfig, arb_sdfg};

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// Random programs (loops, ifs, nested SDFGs, reductions, gathers, f32) compiled
    /// match the interpreter bitwise, before and after the optimization pipeline.
    #[test]
    fn random_programs_match_the_interpreter(s in arb_sdfg(GenConfig::default())) {
        // At the usual sizes and at sizes 0..4, each size symbol drawn on its own (grids
        // without interior points, arrays without elements in one dimension only).
        let inputs: Vec<Bindings> = [sample_symbols(&s), sample_small_symbols(&s)]
            .iter()
            .map(|symbols| random_bindings(&s, symbols, 11).unwrap())
            .collect();
        compare_runs(&generated_backend(), &s, &inputs, false);
        let mut opt = s.clone();
        sdflow_transforms::Pipeline::cpu().run(&mut opt).unwrap();
        compare_runs(&generated_backend(), &opt, &inputs, false);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases() / 2, ..ProptestConfig::default() })]

    /// Random programs with the shapes that stress the optimizer and the shapes GT4Py's
    /// lowering produces (`GenConfig::allow_hazards`, `allow_gt4py_shapes`: copies of
    /// interiors, of shifted row ranges and two into one node, loop-carried row writes,
    /// neighbour slabs, nested SDFGs at each point) compiled match the interpreter
    /// bitwise, before and after the optimization pipeline, on the parallel path of every
    /// map (two threads).
    #[test]
    fn random_gt4py_shaped_programs_match_the_interpreter(s in arb_sdfg(GenConfig {
        allow_hazards: true,
        allow_gt4py_shapes: true,
        ..GenConfig::default()
    })) {
        // At sizes 0..4 some of these programs read outside an input (a column at index
        // 0 of an empty dimension): compiled code stops with the interpreter's message.
        let inputs: Vec<Bindings> = [sample_symbols(&s), sample_small_symbols(&s)]
            .iter()
            .map(|symbols| random_bindings(&s, symbols, 13).unwrap())
            .collect();
        compare_or_fail_alike(&s, &inputs);
        let mut opt = s.clone();
        sdflow_transforms::Pipeline::cpu().run(&mut opt).unwrap();
        compare_or_fail_alike(&opt, &inputs);
    }
}

/// Programs whose unread maps divide by zero at some points: where the interpreter stops,
/// compiled code stops with the same message (the statement, the operands and the map
/// point); where it runs, compiled code computes the same bits. The optimized program,
/// which may have lost the failing map (`docs/transforms.md`, *Errors*), is held to the
/// same on its own. Eight generated programs that fail and four that run.
#[test]
fn random_failing_programs_fail_alike() {
    let cfg = GenConfig {
        allow_failing_dead_code: true,
        ..GenConfig::default()
    };
    let (mut failing, mut running) = (0, 0);
    for seed in 0.. {
        if failing >= 8 && running >= 4 {
            break;
        }
        let s = sdflow_ir::testkit::generate(seed, &cfg);
        let inputs = random_bindings(&s, &sample_symbols(&s), 11).unwrap();
        let fails = interp::run(&s, &mut inputs.clone()).is_err();
        if (fails && failing >= 8) || (!fails && running >= 4) {
            continue;
        }
        *(if fails { &mut failing } else { &mut running }) += 1;
        let mut opt = s.clone();
        sdflow_transforms::Pipeline::cpu().run(&mut opt).unwrap();
        for p in [&s, &opt] {
            let prog = backend()
                .build(p)
                .unwrap_or_else(|e| panic!("{}: {e}", p.name));
            prog.set_threads(2);
            let (mut expected, mut got) = (inputs.clone(), inputs.clone());
            match interp::run(p, &mut expected) {
                Ok(()) => {
                    prog.run_bindings(&mut got).unwrap();
                    assert_same_arguments(p, &expected, &got, &p.name);
                }
                Err(e) => {
                    let c = prog.run_bindings(&mut got).unwrap_err().to_string();
                    assert_eq!(c, format!("program '{}': {e}", p.name));
                }
            }
        }
    }
}

/// Every array of rank 2 or more laid out column-major (the first dimension contiguous,
/// as GT4Py's fields from Fortran), transients included.
fn column_major(s: &mut Sdfg) {
    for d in s.arrays.values_mut() {
        if let sdflow_ir::DataDesc::Array(a) = d
            && a.shape.len() >= 2
        {
            a.strides = sdflow_transforms::layout::column_major_strides(&a.shape);
        }
    }
}

/// Random programs of GT4Py's shapes with column-major arrays, optimized: where the plan
/// runs a gathering map in strips (`plan::rows::Strip`: the table entries of a strip's
/// points checked at once, then the levels outside a vectorized loop over the strip),
/// the compiled program computes the interpreter's bits on two threads, or stops with
/// its message. Five programs whose map lists the levels innermost (strips of its outer
/// loop) and five whose map lists the cells innermost (strips of its inner loop: the
/// generator lists the parameters of every third stencil map last first, which
/// `loop_order` turns back where a gather makes the levels cheaper innermost, so these
/// come from the programs as written), at the usual sizes and at sizes 0..4.
#[test]
fn random_column_major_programs_in_strips_match_the_interpreter() {
    use sdflow_codegen::plan::{Plan, Target};
    let cfg = GenConfig {
        allow_hazards: true,
        allow_gt4py_shapes: true,
        ..GenConfig::default()
    };
    // Programs in strips of an outer loop, of an inner one.
    let mut in_strips = [0, 0];
    for seed in 0..2000 {
        if in_strips.iter().all(|&n| n >= 5) {
            break;
        }
        let mut s = sdflow_ir::testkit::generate(seed, &cfg);
        column_major(&mut s);
        assert_eq!(s.validate(), Ok(()), "seed {seed}");
        let mut opt = s.clone();
        sdflow_transforms::Pipeline::cpu().run(&mut opt).unwrap();
        for program in [&opt, &s] {
            let text = Plan::of(program, Target::default()).unwrap().to_text();
            let kind = if text.contains(" of its inner loop ") {
                1
            } else if text.contains(" in strips of ") {
                0
            } else {
                continue;
            };
            if in_strips[kind] >= 5 {
                continue;
            }
            in_strips[kind] += 1;
            let inputs: Vec<Bindings> = [sample_symbols(&s), sample_small_symbols(&s)]
                .iter()
                .map(|symbols| random_bindings(&s, symbols, 17).unwrap())
                .collect();
            compare_or_fail_alike(program, &inputs);
        }
    }
    assert_eq!(
        in_strips,
        [5, 5],
        "programs run in strips of an outer, an inner loop"
    );
}
