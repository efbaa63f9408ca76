//! The CUDA backend without a GPU: the generated CUDA of every example, the dycore, the
//! DaCe and GT4Py corpus programs and random programs compiles with NVRTC to a CUBIN for
//! sm_90 (`--fmad=false`, precise division and square root), and the CUDA text of the
//! small examples is a snapshot (`tests/out/<name>.cu`).
//!
//! NVRTC is found through `SDFLOW_NVRTC` (a `libnvrtc.so*` or its folder; `.ci/run`
//! installs the `nvidia-cuda-nvrtc` wheel and sets it), the library search path, or the
//! wheel's usual places. Without it the compile tests say so on standard error and
//! return; the snapshots need no NVRTC.

use sdflow::ir::testkit::assert_same_arguments;
use std::path::PathBuf;

use sdflow::cli;
use sdflow_codegen::cuda::device::{CudaDevice, DeviceHandle, EmulatedDevice};
use sdflow_codegen::cuda::exec::CudaBackend;
use sdflow_codegen::cuda::nvrtc::{self, Arch, Output};
use sdflow_ir::Sdfg;

/// The repository: `SDFLOW_ROOT` when set (the prebuilt binaries of
/// `scripts/gpu-bundle.sh` run on another machine), else where this was built.
fn root() -> PathBuf {
    std::env::var_os("SDFLOW_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

fn nvrtc_or_skip(test: &str) -> bool {
    match nvrtc::available() {
        Ok(_) => true,
        Err(e) => {
            eprintln!("skipped {test}: NVRTC not found ({e})");
            false
        }
    }
}

/// Optimizes with the GPU pipeline, prints CUDA, compiles it to a CUBIN; panics naming
/// `what`.
fn compile(s: Sdfg, what: &str) -> usize {
    compile_as(s, what, Output::Cubin, &[])
}

fn compile_as(mut s: Sdfg, what: &str, output: Output, extra: &[&str]) -> usize {
    sdflow_transforms::Pipeline::gpu()
        .run(&mut s)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let backend = CudaBackend {
        cache: None,
        ..CudaBackend::default()
    };
    let prog = backend
        .generate(&s)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut opts = backend.nvrtc_options(Arch::default());
    opts.extra.extend(extra.iter().map(|s| s.to_string()));
    let out = nvrtc::compile(&prog.source, &format!("{what}.cu"), &opts, output)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    match output {
        Output::Cubin => assert_eq!(
            &out.image[..4],
            b"\x7fELF",
            "{what}: a CUBIN is an ELF image"
        ),
        Output::Ptx => assert!(
            String::from_utf8_lossy(&out.image).contains(".target sm_90"),
            "{what}: PTX for sm_90"
        ),
    }
    prog.kernels.len()
}

fn files(dir: &str, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    v.sort();
    v
}

#[test]
fn examples_and_the_dycore_compile_with_nvrtc() {
    if !nvrtc_or_skip("examples_and_the_dycore_compile_with_nvrtc") {
        return;
    }
    let mut n = 0;
    for p in files("examples", ".sdfg.json") {
        let s = cli::load_program(&p).unwrap();
        let k = compile(s, &p.file_name().unwrap().to_string_lossy());
        assert!(k >= 1);
        n += 1;
    }
    assert_eq!(n, 5);
}

#[test]
fn the_dace_corpus_compiles_with_nvrtc() {
    if !nvrtc_or_skip("the_dace_corpus_compiles_with_nvrtc") {
        return;
    }
    let all = files("tests/dace", ".sdfg");
    assert!(all.len() >= 20, "{}", all.len());
    for p in all {
        let s = cli::load_program(&p).unwrap();
        compile(s, &p.file_name().unwrap().to_string_lossy());
    }
}

/// GT4Py's raw lowerings are large (0.75 MB of CUDA for `apply_diffusion_to_vn`): NVRTC
/// takes about 50 s to optimize one, so this test compiles them to PTX without device
/// optimization (`-G`, about 1.6 s each): the front end checks the whole text.
#[test]
fn the_gt4py_lowerings_compile_with_nvrtc() {
    if !nvrtc_or_skip("the_gt4py_lowerings_compile_with_nvrtc") {
        return;
    }
    let all = files("tests/gt4py", ".dace.lowered.sdfgz");
    assert!(all.len() >= 20, "{}", all.len());
    for p in all {
        let s = cli::load_program(&p).unwrap();
        compile_as(
            s,
            &p.file_name().unwrap().to_string_lossy(),
            Output::Ptx,
            &["-G"],
        );
    }
}

#[test]
fn random_programs_compile_with_nvrtc() {
    if !nvrtc_or_skip("random_programs_compile_with_nvrtc") {
        return;
    }
    let cfg = sdflow_ir::testkit::GenConfig {
        allow_hazards: true,
        ..Default::default()
    };
    for seed in 0..24 {
        let s = sdflow_ir::testkit::generate(seed, &cfg);
        compile(s, &format!("random-{seed}"));
    }
}

/// On the emulated device and a GPU: random programs from the generator (hazard shapes
/// included: loops, ifs, nested SDFGs, gathers, conflict-resolved writes; and GT4Py's
/// shapes, padded transients among them), optimized with
/// the GPU pipeline, equal the interpreter on the unoptimized program — bit for bit, or
/// within 64 ulp of each array's largest magnitude where floats are summed under a
/// write-conflict resolution; where the interpreter stops with an error, so does the
/// device, unless the optimizer removed the failing computation (`docs/transforms.md`,
/// *Errors*): then the device equals the interpreter on the optimized program.
#[test]
fn gpu_random_programs_equal_the_interpreter() {
    let cfg = sdflow_ir::testkit::GenConfig {
        allow_hazards: true,
        allow_gt4py_shapes: true,
        ..Default::default()
    };
    let programs: Vec<Sdfg> = (0..32)
        .map(|seed| sdflow_ir::testkit::generate(seed, &cfg))
        .collect();
    let backend = CudaBackend::default();
    // Also the emulated device in reverse order: a kernel whose threads read each other's
    // writes (a race on a GPU) gives other results there.
    let mut devs = devices("gpu_random_programs_equal_the_interpreter");
    devs.insert(
        1,
        (
            "emulated (reverse order)",
            DeviceHandle::new(EmulatedDevice::new().in_reverse_order(true)),
        ),
    );
    for (dev, handle) in devs {
        let (mut compared, mut rescued) = (0, 0);
        for (seed, s) in programs.iter().enumerate() {
            let symbols = sdflow_ir::testkit::sample_small_symbols(s);
            let Ok(inputs) = sdflow_ir::interp::random_bindings(s, &symbols, seed as u64) else {
                continue;
            };
            let mut expected = inputs.clone();
            let interp = sdflow_ir::interp::run(s, &mut expected);
            let mut opt = s.clone();
            sdflow_transforms::Pipeline::gpu().run(&mut opt).unwrap();
            let mut prog = backend
                .build(&opt, &handle)
                .unwrap_or_else(|e| panic!("{dev}: random-{seed}: {e}"));
            let mut got = inputs.clone();
            match (interp, prog.run_bindings(&mut got)) {
                (Err(_), Err(_)) => continue,
                (Err(e), Ok(())) => {
                    // The optimizer may have removed the failing computation with its
                    // error (`docs/transforms.md`, *Errors*): the optimized program is
                    // then held to the interpreter on its own.
                    expected = inputs.clone();
                    if let Err(o) = sdflow_ir::interp::run(&opt, &mut expected) {
                        panic!(
                            "{dev}: random-{seed}: the interpreter stops ({e}; optimized: {o}), the device does not"
                        )
                    }
                    rescued += 1;
                }
                (Ok(_), Err(e)) => {
                    panic!("{dev}: random-{seed}: the device stops ({e}), the interpreter does not")
                }
                (Ok(_), Ok(())) => {}
            }
            let tolerant =
                sums_under_wcr(s) || (!dev.starts_with("emulated") && uses_transcendentals(s));
            assert_outputs(
                s,
                &expected,
                &got,
                tolerant,
                &format!("{dev}: random-{seed}"),
            );
            compared += 1;
        }
        eprintln!(
            "random programs on the {dev} device: {compared} of {} compared ({rescued} of them against the optimized program, the original stopping with an error)",
            programs.len()
        );
        assert!(compared >= 24, "{dev}: {compared} compared");
    }
}

/// Programs the GPU pipeline leaves with no one-thread kernel for work that has a parallel
/// dimension: after `Pipeline::gpu`, every example (the dycore among them) and every DaCe
/// and GT4Py corpus program runs each map as a grid, and each copy between containers
/// (one grid per copy where several assemble one container; a copy within one container,
/// which may overlap itself, stays on one thread). The one exception the plan makes —
/// a map whose nested call accumulates into its output with a write-conflict resolution
/// (the callee's copied-out results would race) — no longer occurs: `inline_nested`
/// splices such straight-line callees into the map body (4 DaCe files). GT4Py's
/// state-level nested SDFGs (one-thread kernels before they were inlined) are checked by
/// `tests/gt4py_corpus.rs` as well.
#[test]
fn no_one_thread_kernel_for_parallel_work() {
    use sdflow_codegen::plan::{Plan, StepKind, Target, nested_accumulates};
    use sdflow_ir::Node;
    let mut programs = files("examples", ".sdfg.json");
    programs.extend(files("tests/dace", ".sdfg"));
    programs.extend(files("tests/gt4py", "dace.lowered.sdfgz"));
    programs.extend(files("tests/gt4py", "dace.final.sdfgz"));
    let (mut grids, mut kept, mut copies) = (0, 0, 0);
    for p in &programs {
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        let s = cli::load_program(p).unwrap();
        let mut opt = s.clone();
        sdflow_transforms::Pipeline::gpu().run(&mut opt).unwrap();
        let plan = Plan::of(&opt, Target::Grid).unwrap();
        for sp in plan.body.states() {
            let st = &opt.states[sp.id.index()];
            for step in &sp.steps {
                match (&step.kind, st.graph.node(step.node)) {
                    (StepKind::ParallelMap { .. }, _) => grids += 1,
                    (StepKind::SequentialMap, Node::Map(m)) => {
                        assert!(
                            nested_accumulates(&m.body),
                            "{name}: map '{}' of state '{}' runs on one thread",
                            m.label,
                            st.name
                        );
                        kept += 1;
                    }
                    (StepKind::Nested(_), _) => panic!(
                        "{name}: nested call '{}' of state '{}' runs on one thread",
                        step.label, st.name
                    ),
                    // Copies between containers: a grid, or one grid per copy.
                    (StepKind::Copy { shared }, Node::Access(dst)) => {
                        let df = &st.graph;
                        let within = df
                            .in_edges(step.node)
                            .into_iter()
                            .any(|e| df.node(df.endpoints(e).0).as_access() == Some(dst.as_str()));
                        assert!(
                            step.grid.is_some() || *shared || within,
                            "{name}: copy '{}' of state '{}' runs on one thread",
                            step.label,
                            st.name
                        );
                        copies += 1;
                    }
                    _ => {}
                }
            }
        }
    }
    eprintln!(
        "{} programs: {grids} maps as grids, {copies} copy steps, {kept} maps kept on one thread (accumulating callees)",
        programs.len()
    );
    assert!(programs.len() >= 70, "{} programs", programs.len());
    assert_eq!(
        kept, 0,
        "maps kept on one thread for an accumulating callee"
    );
}

/// A grid kernel splits its linear index into the map's parameters with 32-bit division
/// when the grid has at most 2^31 - 1 points (a 64-bit division costs a GPU tens of
/// instructions per thread): in the CUDA text of every example and corpus program after
/// the GPU pipeline, each kernel that divides its index has the 32-bit path.
#[test]
fn grid_kernels_split_their_index_in_32_bits() {
    let backend = CudaBackend::default();
    let mut programs = files("examples", ".sdfg.json");
    programs.extend(files("tests/dace", ".sdfg"));
    programs.extend(files("tests/gt4py", "dace.lowered.sdfgz"));
    let (mut dividing, mut kernels) = (0, 0);
    for p in &programs {
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        let mut s = cli::load_program(p).unwrap();
        sdflow_transforms::Pipeline::gpu().run(&mut s).unwrap();
        let cuda = backend.generate(&s).unwrap().source;
        for k in cuda.split("extern \"C\" __global__").skip(1) {
            kernels += 1;
            if !k.contains("sdf_r /=") {
                continue;
            }
            dividing += 1;
            let head = k.lines().next().unwrap_or_default();
            assert!(
                k.contains("if (sdf_total <= (int64_t)INT32_MAX) {")
                    && k.contains("uint32_t sdf_r = (uint32_t)sdf_t;"),
                "{name}: kernel {head} divides its index in 64 bits only"
            );
        }
    }
    eprintln!("{kernels} kernels, {dividing} divide their index, each with the 32-bit path");
    assert!(dividing >= 20, "{dividing}");
}

/// The fastest-varying thread index walks the stride-1 dimension: `column_walk` lists its
/// map's parameters `(j, i)` over row-major arrays, so as written consecutive threads
/// stride by a row; after the GPU pipeline (`loop_order`) consecutive threads take
/// consecutive `j`, the contiguous dimension. Both versions give the interpreter's
/// results on the emulated device.
#[test]
fn the_thread_index_walks_the_stride_1_dimension() {
    let p = root().join("tests/in/column_walk.sdfg.json");
    let s = cli::load_program(&p).unwrap();
    let mut opt = s.clone();
    sdflow_transforms::Pipeline::gpu().run(&mut opt).unwrap();
    let backend = CudaBackend::default();
    let fastest = |s: &Sdfg| -> String {
        let cuda = backend.generate(s).unwrap().source;
        let line = cuda
            .lines()
            .find(|l| l.contains("% (uint32_t)sdf_n1)"))
            .expect("a 2-D grid kernel")
            .trim()
            .to_string();
        line.split(" = ").next().unwrap().to_string()
    };
    assert_eq!(
        fastest(&s),
        "s_i",
        "as written: the row index varies fastest"
    );
    assert_eq!(
        fastest(&opt),
        "s_j",
        "optimized: the column index varies fastest"
    );
    let mut symbols = std::collections::BTreeMap::new();
    symbols.insert("N".to_string(), sdflow_ir::Value::I64(33));
    let inputs = sdflow_ir::interp::random_bindings(&s, &symbols, 2).unwrap();
    let mut expected = inputs.clone();
    sdflow_ir::interp::run(&s, &mut expected).unwrap();
    let handle = DeviceHandle::new(EmulatedDevice::new());
    for prog in [&s, &opt] {
        let mut got = inputs.clone();
        backend
            .build(prog, &handle)
            .unwrap()
            .run_bindings(&mut got)
            .unwrap();
        assert_eq!(got.arrays["out"].bits(), expected.arrays["out"].bits());
    }
}

/// Where the strides are symbols (GT4Py's fields), the kernel picks the fastest-varying
/// parameter at the call: the one whose dimension of the written array has stride 1. The
/// CUDA text of a map over `(i, j)` writing `out[i, j]` with strides `(SO0, SO1)` holds
/// the choice, and on the emulated device both layouts — row-major (`j` fastest) and
/// column-major (`i` fastest) — give the interpreter's results. In the GT4Py corpus the
/// kernels that write a field (its strides are symbols) choose the same way; those that
/// write sdflow's own transients (row-major, the last dimension contiguous) keep the
/// last parameter fastest.
#[test]
fn the_fastest_thread_index_follows_strides_known_only_at_the_call() {
    use sdflow_ir::interp::{Bindings, HostArray};
    use sdflow_ir::{DType, DataDesc, SdfgBuilder, SymExpr, Value};
    let mut b = SdfgBuilder::new("strided");
    b.symbol("N", DType::I64).symbol("M", DType::I64);
    for s in ["SU0", "SU1", "SO0", "SO1"] {
        b.symbol(s, DType::I64);
    }
    b.array("u", DType::F64, ["N", "M"])
        .array("out", DType::F64, ["N", "M"]);
    b.state("s", |st| {
        st.map("m", &["i", "j"], &["0:N", "0:M"], |m| {
            m.tasklet(
                "t",
                &[("x", "u[i, j]")],
                &[("o", "out[i, j]")],
                "o = 2.0 * x + 1.0",
            );
        });
    });
    let mut s = b.build();
    for (name, a, c) in [("u", "SU0", "SU1"), ("out", "SO0", "SO1")] {
        if let Some(DataDesc::Array(d)) = s.arrays.get_mut(name) {
            d.strides = vec![SymExpr::sym(a), SymExpr::sym(c)];
        }
    }
    assert_eq!(s.validate(), Ok(()));
    let mut opt = s.clone();
    sdflow_transforms::Pipeline::gpu().run(&mut opt).unwrap();
    let backend = CudaBackend::default();
    let cuda = backend.generate(&opt).unwrap().source;
    assert!(
        cuda.contains("if ((s_SO1) != 1 && (s_SO0) == 1) {"),
        "no runtime choice of the fastest parameter:\n{cuda}"
    );
    let (n, m) = (17i64, 23i64);
    let values: Vec<f64> = (0..n * m).map(|k| 0.25 * k as f64 - 3.0).collect();
    let handle = DeviceHandle::new(EmulatedDevice::new());
    let mut prog = backend.build(&opt, &handle).unwrap();
    for (row, col) in [(m, 1), (1, n)] {
        let mut inputs = Bindings::default();
        inputs.arrays.insert(
            "u".into(),
            HostArray::from_f64(&[n as usize, m as usize], values.clone()).unwrap(),
        );
        inputs.arrays.insert(
            "out".into(),
            HostArray::zeros(DType::F64, &[n as usize, m as usize]),
        );
        for (k, v) in [
            ("N", n),
            ("M", m),
            ("SU0", row),
            ("SU1", col),
            ("SO0", row),
            ("SO1", col),
        ] {
            inputs.symbols.insert(k.into(), Value::I64(v));
        }
        let mut expected = inputs.clone();
        sdflow_ir::interp::run(&s, &mut expected).unwrap();
        let mut got = inputs.clone();
        prog.run_bindings(&mut got).unwrap();
        assert_eq!(
            got.arrays["out"].bits(),
            expected.arrays["out"].bits(),
            "strides ({row}, {col})"
        );
    }
    let mut choosing = 0;
    for p in files("tests/gt4py", "dace.lowered.sdfgz") {
        let mut s = cli::load_program(&p).unwrap();
        sdflow_transforms::Pipeline::gpu().run(&mut s).unwrap();
        let cuda = backend.generate(&s).unwrap().source;
        choosing += cuda.matches("_K_stride) != 1 && (s___").count();
    }
    eprintln!("{choosing} GT4Py grid kernels choose their fastest parameter at the call");
    assert!(choosing >= 20, "{choosing}");
}

/// No kernel of an optimized program allocates from the device heap: a nested SDFG called
/// at every point of a map keeps its small containers on the stack. (The heap holds a
/// few megabytes; GT4Py's `if` at every point of a 540,000-point grid exhausted it, and
/// the kernel wrote through a null pointer.)
#[test]
fn no_optimized_kernel_allocates_from_the_device_heap() {
    let backend = CudaBackend {
        cache: None,
        ..CudaBackend::default()
    };
    let mut programs = files("examples", ".sdfg.json");
    programs.extend(files("tests/dace", ".sdfg"));
    programs.extend(files("tests/gt4py", ".sdfgz"));
    assert!(programs.len() >= 90, "{}", programs.len());
    for p in programs {
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        let mut s = cli::load_program(&p).unwrap();
        sdflow_transforms::Pipeline::gpu().run(&mut s).unwrap();
        let prog = backend
            .generate(&s)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let allocs: Vec<&str> = prog
            .source
            .lines()
            .filter(|l| l.contains("calloc(") && !l.contains("sdf_calloc"))
            .collect();
        assert!(allocs.is_empty(), "{name}: {}", allocs.join("\n"));
    }
}

/// The devices the `gpu_*` tests run on: the emulated device (the generated CUDA compiled
/// for the host, on every machine), then the GPU where there is one (else the reason it
/// is left out is said). Each name says which.
fn devices(test: &str) -> Vec<(&'static str, DeviceHandle)> {
    let mut out = vec![("emulated", DeviceHandle::new(EmulatedDevice::new()))];
    if !nvrtc_or_skip(test) {
        return out;
    }
    match CudaDevice::count() {
        Ok(0) => eprintln!("{test}: no GPU, emulated device only"),
        Err(e) => eprintln!("{test}: {e}; emulated device only"),
        Ok(_) => match CudaDevice::new(0) {
            Ok(d) => out.push(("GPU", DeviceHandle::new(d))),
            Err(e) => eprintln!("{test}: {e}; emulated device only"),
        },
    }
    out
}

/// On the emulated device and a GPU: every example and the dycore, optimized with the GPU
/// pipeline and run through CUDA, equal the interpreter bit for bit on the unoptimized
/// program.
#[test]
fn gpu_runs_equal_the_interpreter() {
    for (dev, handle) in devices("gpu_runs_equal_the_interpreter") {
        runs_equal_the_interpreter(dev, &handle);
    }
}

fn runs_equal_the_interpreter(dev: &str, handle: &DeviceHandle) {
    let backend = CudaBackend {
        cache: None,
        ..CudaBackend::default()
    };
    for p in files("examples", ".sdfg.json") {
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        let s = cli::load_program(&p).unwrap();
        let symbols = sdflow_ir::testkit::sample_symbols(&s);
        let inputs = sdflow_ir::interp::random_bindings(&s, &symbols, 11).unwrap();
        let mut expected = inputs.clone();
        sdflow_ir::interp::run(&s, &mut expected).unwrap();
        let mut opt = s.clone();
        sdflow_transforms::Pipeline::gpu().run(&mut opt).unwrap();
        let mut prog = backend
            .build(&opt, handle)
            .unwrap_or_else(|e| panic!("{dev}: {name}: {e}"));
        for graphs in [true, false] {
            prog.set_graphs(graphs);
            let mut got = inputs.clone();
            prog.run_bindings(&mut got)
                .unwrap_or_else(|e| panic!("{dev}: {name}: {e}"));
            assert_same_arguments(
                &s,
                &expected,
                &got,
                &format!("{dev}: {name} (graphs {graphs})"),
            );
        }
    }
}

/// On a GPU: a float symbol changed between calls reaches the kernels through the
/// program's buffer while the captured graph is replayed, and each result equals the
/// interpreter's for that value.
#[test]
fn gpu_float_symbols_change_without_a_new_graph() {
    for (dev, handle) in devices("gpu_float_symbols_change_without_a_new_graph") {
        float_symbols_change_without_a_new_graph(dev, handle);
    }
}

fn float_symbols_change_without_a_new_graph(dev: &str, handle: DeviceHandle) {
    use sdflow_codegen::cuda::exec::DeviceArgs;
    let s = cli::load_program(&root().join("examples/hyperdiffusion.sdfg.json")).unwrap();
    let mut opt = s.clone();
    sdflow_transforms::Pipeline::gpu().run(&mut opt).unwrap();
    let backend = CudaBackend {
        cache: None,
        ..CudaBackend::default()
    };
    let mut prog = backend.build(&opt, &handle).unwrap();
    let mut symbols = std::collections::BTreeMap::new();
    symbols.insert("N".to_string(), sdflow_ir::Value::I64(64));
    symbols.insert("alpha".to_string(), sdflow_ir::Value::F64(0.25));
    let inputs = sdflow_ir::interp::random_bindings(&s, &symbols, 5).unwrap();
    let u = prog.upload("u", &inputs.arrays["u"]).unwrap();
    let out = prog.upload("out", &inputs.arrays["out"]).unwrap();
    let mut call = prog
        .bind(
            DeviceArgs::new()
                .array("u", &u)
                .array("out", &out)
                .float("alpha", 0.25),
        )
        .unwrap();
    let mut launches = None;
    for alpha in [0.25, -1.0 / 3.0, 7.5] {
        call.set_float("alpha", alpha).unwrap();
        let done = prog.call_bound(&call).unwrap();
        prog.wait(done).unwrap();
        let l = handle.lock().counters().launches;
        // The first call captures; later ones replay (only the status reads launch).
        if let Some(before) = launches {
            assert_eq!(
                l - before,
                1,
                "{dev}: alpha {alpha}: replayed, not captured again"
            );
        }
        launches = Some(l);
        let mut expected = inputs.clone();
        expected
            .symbols
            .insert("alpha".into(), sdflow_ir::Value::F64(alpha));
        sdflow_ir::interp::run(&s, &mut expected).unwrap();
        assert_eq!(
            out.to_host().unwrap().bits(),
            expected.arrays["out"].bits(),
            "{dev}: alpha {alpha}"
        );
    }
}

/// On a GPU: a failing call's error is kept until it is read, even when later calls
/// were enqueued before the wait; reading it clears it.
#[test]
fn gpu_errors_are_kept_until_read() {
    for (dev, handle) in devices("gpu_errors_are_kept_until_read") {
        errors_are_kept_until_read(dev, handle);
    }
}

fn errors_are_kept_until_read(dev: &str, handle: DeviceHandle) {
    use sdflow_codegen::cuda::array::DeviceArray;
    use sdflow_codegen::cuda::exec::DeviceArgs;
    use sdflow_ir::interp::HostArray;
    use sdflow_ir::{DType, SdfgBuilder};
    let mut b = SdfgBuilder::new("divide");
    b.array("a", DType::I64, [8]).array("out", DType::I64, [8]);
    b.state("s", |s| {
        s.map("m", &["i"], &["0:8"], |m| {
            m.tasklet("t", &[("x", "a[i]")], &[("o", "out[i]")], "o = 100 / x");
        });
    });
    let s = b.build();
    let backend = CudaBackend {
        cache: None,
        ..CudaBackend::default()
    };
    let mut prog = backend.build(&s, &handle).unwrap();
    let with_zero = HostArray::from_values(
        DType::I64,
        &[8],
        &(0..8)
            .map(|k| sdflow_ir::Value::I64(if k == 5 { 0 } else { k + 1 }))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let mut expected = sdflow_ir::interp::Bindings::default();
    expected.arrays.insert("a".into(), with_zero.clone());
    expected
        .arrays
        .insert("out".into(), HostArray::zeros(DType::I64, &[8]));
    let message = sdflow_ir::interp::run(&s, &mut expected)
        .unwrap_err()
        .to_string();
    let mut a = DeviceArray::from_host(&handle, &with_zero).unwrap();
    let out = DeviceArray::zeros(&handle, DType::I64, &[8]).unwrap();
    let call = prog
        .bind(DeviceArgs::new().array("a", &a).array("out", &out))
        .unwrap();
    // The first call fails; the array is mended and the second call succeeds; waiting
    // on the second still reports the first one's error.
    let ones = HostArray::from_values(DType::I64, &[8], &[sdflow_ir::Value::I64(1); 8]).unwrap();
    assert!(!prog.failed(), "{dev}: no failure before the first call");
    let first = prog.call_bound(&call).unwrap();
    // Once the failing call is done, the host sees that it failed without a wait.
    while !first.is_done() {
        std::thread::yield_now();
    }
    let syncs = handle.lock().counters().syncs;
    assert!(
        prog.failed(),
        "{dev}: the failure is seen once the call is done"
    );
    assert_eq!(
        handle.lock().counters().syncs,
        syncs,
        "{dev}: seen without a wait"
    );
    a.copy_from_host(&ones).unwrap();
    let second = prog.call_bound(&call).unwrap();
    drop(first);
    let e = prog.wait(second).unwrap_err().to_string();
    assert!(
        e.contains("division by zero"),
        "{dev}: {e} (interpreter: {message})"
    );
    // Read and cleared: the next call reports success.
    let done = prog.call_bound(&call).unwrap();
    prog.wait(done).unwrap();
    assert!(
        !prog.failed(),
        "{dev}: the flags on the host are cleared too"
    );
    assert_eq!(
        out.to_host().unwrap().bits(),
        vec![100u64; 8],
        "{dev}: 100 / 1 everywhere"
    );
}

/// The program's output arrays in `got` against `expected`: bit for bit, or (`tolerant`)
/// within 64 ulp of each array's largest magnitude.
fn assert_outputs(
    s: &Sdfg,
    expected: &sdflow_ir::interp::Bindings,
    got: &sdflow_ir::interp::Bindings,
    tolerant: bool,
    what: &str,
) {
    for (n, d) in s.non_transients() {
        if d.transient() {
            continue;
        }
        let (want, have) = (&expected.arrays[n], &got.arrays[n]);
        if !tolerant {
            assert_eq!(want.bits(), have.bits(), "{what}: '{n}' differs");
            continue;
        }
        let (w, h) = (want.to_f64_vec(), have.to_f64_vec());
        let scale = w.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        let bound = 64.0 * f64::EPSILON * scale;
        for (k, (a, b)) in w.iter().zip(&h).enumerate() {
            let same = a.to_bits() == b.to_bits() || (a - b).abs() <= bound;
            assert!(same, "{what}: '{n}'[{k}] {b} vs {a} (bound {bound:e})");
        }
    }
}

/// Whether a program's tasklets call a transcendental function (CUDA's math library
/// differs from the host's there, within its documented error bounds).
fn uses_transcendentals(s: &Sdfg) -> bool {
    let text = sdflow_ir::format::to_json(s);
    let bytes = text.as_bytes();
    [
        "exp", "log", "log10", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh",
        "pow", "atan2",
    ]
    .iter()
    .any(|f| {
        let pat = format!("{f}(");
        text.match_indices(&pat)
            .any(|(i, _)| i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_'))
    })
}

/// Whether a program combines values under a sum or product write-conflict resolution:
/// threads combine them in an order no one fixes (DaCe's atomics do the same), so a float
/// result may differ from the interpreter's sequential order in its last bits.
fn sums_under_wcr(s: &Sdfg) -> bool {
    let text = sdflow_ir::format::to_json(s);
    text.contains("\"wcr\": \"sum\"") || text.contains("\"wcr\": \"prod\"")
}

/// On the emulated device and a GPU: every DaCe corpus program on random inputs,
/// optimized with the GPU pipeline, equals the interpreter bit for bit, or within 64 ulp
/// of the largest magnitude of each array for float sums under a write-conflict
/// resolution (threads combine them in arrival order) and, on a GPU, for transcendental
/// functions (CUDA's math library; the emulated device calls the host's, as the
/// interpreter does); where the interpreter stops with an error, the device reports one
/// too.
#[test]
fn gpu_dace_corpus_equals_the_interpreter() {
    for (dev, handle) in devices("gpu_dace_corpus_equals_the_interpreter") {
        dace_corpus_equals_the_interpreter(dev, &handle);
    }
}

fn dace_corpus_equals_the_interpreter(dev: &str, handle: &DeviceHandle) {
    let backend = CudaBackend {
        cache: None,
        ..CudaBackend::default()
    };
    let (mut exact, mut bounded, mut failing) = (0, 0, 0);
    for p in files("tests/dace", ".sdfg") {
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        let s = cli::load_program(&p).unwrap();
        let symbols = sdflow_ir::testkit::sample_symbols(&s);
        let Ok(inputs) = sdflow_ir::interp::random_bindings(&s, &symbols, 3) else {
            continue;
        };
        let mut expected = inputs.clone();
        let interp = sdflow_ir::interp::run(&s, &mut expected);
        let mut opt = s.clone();
        sdflow_transforms::Pipeline::gpu().run(&mut opt).unwrap();
        let mut prog = backend
            .build(&opt, handle)
            .unwrap_or_else(|e| panic!("{dev}: {name}: {e}"));
        let mut got = inputs.clone();
        let gpu = prog.run_bindings(&mut got);
        match (interp, gpu) {
            (Err(_), Err(_)) => {
                failing += 1;
                continue;
            }
            (Err(e), Ok(())) => {
                panic!("{dev}: {name}: the interpreter stops ({e}), the device does not")
            }
            (Ok(_), Err(e)) => {
                panic!("{dev}: {name}: the device stops ({e}), the interpreter does not")
            }
            (Ok(_), Ok(())) => {}
        }
        let tolerant = (dev != "emulated" && uses_transcendentals(&s)) || sums_under_wcr(&s);
        assert_outputs(&s, &expected, &got, tolerant, &format!("{dev}: {name}"));
        if tolerant {
            bounded += 1;
        } else {
            exact += 1;
        }
    }
    eprintln!(
        "DaCe corpus on the {dev} device: {exact} bit for bit, {bounded} within the bound, {failing} stopped with an error on both"
    );
    assert!(exact + bounded >= 15, "{exact} + {bounded}");
}

/// Distance in units in the last place between two doubles (0 for equal bits).
fn ulps(a: f64, b: f64) -> u64 {
    let key = |x: f64| {
        let b = x.to_bits() as i64;
        if b < 0 { i64::MIN - b } else { b }
    };
    key(a).abs_diff(key(b))
}

/// On a GPU: each transcendental function, applied once, is within 4 ulp of the
/// interpreter (the host's libm, within 1 ulp, against CUDA's documented maximum errors
/// of 1 to 2 ulp in double precision), over inputs across their ranges.
#[test]
fn gpu_transcendentals_are_within_their_bounds() {
    use sdflow_ir::interp::{Bindings, HostArray};
    use sdflow_ir::{DType, SdfgBuilder, Value};
    // Real GPUs only: the emulated device calls the host's libm, as the interpreter does.
    let Some((_, handle)) = devices("gpu_transcendentals_are_within_their_bounds")
        .into_iter()
        .find(|(d, _)| *d == "GPU")
    else {
        eprintln!("skipped gpu_transcendentals_are_within_their_bounds: no GPU");
        return;
    };
    let fns: &[(&str, &str)] = &[
        ("exp", "o = exp(x / 4.0)"),
        ("log", "o = log(abs(x) + 0.5)"),
        ("log10", "o = log10(abs(x) + 0.5)"),
        ("sin", "o = sin(x)"),
        ("cos", "o = cos(x)"),
        ("tan", "o = tan(x / 16.0)"),
        ("asin", "o = asin(x / 40.0)"),
        ("acos", "o = acos(x / 40.0)"),
        ("atan", "o = atan(x)"),
        ("sinh", "o = sinh(x / 8.0)"),
        ("cosh", "o = cosh(x / 8.0)"),
        ("tanh", "o = tanh(x / 4.0)"),
        ("pow", "o = pow(abs(x) + 0.1, 1.7)"),
    ];
    let mut b = SdfgBuilder::new("transcendentals");
    b.symbol("N", DType::I64).array("x", DType::F64, ["N"]);
    for (f, _) in fns {
        b.array(&format!("o_{f}"), DType::F64, ["N"]);
    }
    b.state("s", |s| {
        s.map("m", &["i"], &["0:N"], |m| {
            for (f, code) in fns {
                m.tasklet(f, &[("x", "x[i]")], &[("o", &format!("o_{f}[i]"))], code);
            }
        });
    });
    let s = b.build();
    assert_eq!(s.validate(), Ok(()));
    let n = 100_000usize;
    let mut inputs = Bindings::default();
    let xs: Vec<f64> = (0..n)
        .map(|k| -40.0 + 80.0 * (k as f64 + 0.37) / n as f64)
        .collect();
    inputs
        .arrays
        .insert("x".into(), HostArray::from_f64(&[n], xs).unwrap());
    for (f, _) in fns {
        inputs
            .arrays
            .insert(format!("o_{f}"), HostArray::zeros(DType::F64, &[n]));
    }
    inputs.symbols.insert("N".into(), Value::I64(n as i64));
    let mut expected = inputs.clone();
    sdflow_ir::interp::run(&s, &mut expected).unwrap();
    let backend = CudaBackend {
        cache: None,
        ..CudaBackend::default()
    };
    let mut prog = backend.build(&s, &handle).unwrap();
    let mut got = inputs.clone();
    prog.run_bindings(&mut got).unwrap();
    for (f, _) in fns {
        let name = format!("o_{f}");
        let (w, h) = (
            expected.arrays[&name].to_f64_vec(),
            got.arrays[&name].to_f64_vec(),
        );
        let worst = w
            .iter()
            .zip(&h)
            .map(|(a, b)| ulps(*a, *b))
            .max()
            .unwrap_or(0);
        let exact = w
            .iter()
            .zip(&h)
            .filter(|(a, b)| a.to_bits() == b.to_bits())
            .count();
        eprintln!("{f}: at most {worst} ulp from the host, {exact} of {n} bit for bit");
        assert!(worst <= 4, "{f}: {worst} ulp");
    }
}

/// The emulated device catches what it is for: every grid kernel of the examples (the
/// dycore among them) printed one point short (`KernelFault::LastPointSkipped`, an
/// off-by-one in the grid's size) gives results that differ from the interpreter's on it,
/// and the comparison the `gpu_*` tests make names the array; printed right, the same
/// programs equal the interpreter bit for bit.
#[test]
fn the_emulated_device_catches_a_kernel_one_point_short() {
    use sdflow_codegen::cuda::emit::{CudaEmitOptions, KernelFault};
    let handle = DeviceHandle::new(EmulatedDevice::new());
    let wrong = CudaBackend {
        cache: None,
        emit: CudaEmitOptions {
            fault: Some(KernelFault::LastPointSkipped),
            ..CudaEmitOptions::default()
        },
        ..CudaBackend::default()
    };
    let (mut caught, mut programs) = (0, 0);
    for p in files("examples", ".sdfg.json") {
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        let s = cli::load_program(&p).unwrap();
        let mut opt = s.clone();
        sdflow_transforms::Pipeline::gpu().run(&mut opt).unwrap();
        if !wrong.generate(&opt).unwrap().source.contains(") - 1;") {
            continue;
        }
        programs += 1;
        let symbols = sdflow_ir::testkit::sample_symbols(&s);
        let inputs = sdflow_ir::interp::random_bindings(&s, &symbols, 11).unwrap();
        let mut expected = inputs.clone();
        sdflow_ir::interp::run(&s, &mut expected).unwrap();
        let mut got = inputs.clone();
        let mut prog = wrong.build(&opt, &handle).unwrap();
        prog.run_bindings(&mut got).unwrap();
        let compare = std::panic::catch_unwind(|| {
            assert_outputs(&s, &expected, &got, false, &format!("emulated: {name}"))
        });
        if let Err(e) = compare {
            let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
            assert!(
                msg.contains(&format!("emulated: {name}: '")) && msg.contains("' differs"),
                "{msg}"
            );
            caught += 1;
        }
    }
    eprintln!("{caught} of {programs} examples with grid kernels caught one point short");
    assert!(programs >= 5, "{programs}");
    assert_eq!(caught, programs);
}

/// A step whose in-bounds condition reads only the program's symbols runs checked or
/// not as that condition held when the call was bound: in bounds, the unchecked kernel
/// computes the result; out of bounds, the checked kernel reports the interpreter's error.
#[test]
fn gpu_bind_time_conditions_choose_the_kernel() {
    for (dev, handle) in devices("gpu_bind_time_conditions_choose_the_kernel") {
        bind_time_conditions_choose_the_kernel(dev, handle);
    }
}

fn bind_time_conditions_choose_the_kernel(dev: &str, handle: DeviceHandle) {
    use sdflow_codegen::cuda::array::DeviceArray;
    use sdflow_codegen::cuda::exec::DeviceArgs;
    use sdflow_codegen::plan::CheckPolicy;
    use sdflow_ir::interp::HostArray;
    use sdflow_ir::{DType, SdfgBuilder};
    let mut b = SdfgBuilder::new("head");
    b.symbol("N", DType::I64)
        .symbol("M", DType::I64)
        .array("a", DType::I64, ["M"])
        .array("out", DType::I64, ["N"]);
    b.state("s", |s| {
        s.map("m", &["i"], &["0:N"], |m| {
            m.tasklet("t", &[("x", "a[i]")], &[("o", "out[i]")], "o = x * 3");
        });
    });
    let s = b.build();
    let backend = CudaBackend {
        cache: None,
        ..CudaBackend::default()
    };
    let mut prog = backend.build(&s, &handle).unwrap();
    let step = &prog.program().plan.body.states()[0].steps[0];
    assert!(
        matches!(step.check, CheckPolicy::AtBind(_)),
        "{:?}",
        step.check
    );
    let values = |n: i64| {
        HostArray::from_values(
            DType::I64,
            &[n as usize],
            &(0..n)
                .map(|k| sdflow_ir::Value::I64(k + 1))
                .collect::<Vec<_>>(),
        )
        .unwrap()
    };
    // In bounds (N = 4 ≤ M = 6).
    let a = DeviceArray::from_host(&handle, &values(6)).unwrap();
    let out = DeviceArray::zeros(&handle, DType::I64, &[4]).unwrap();
    let call = prog
        .bind(DeviceArgs::new().array("a", &a).array("out", &out))
        .unwrap();
    let done = prog.call_bound(&call).unwrap();
    prog.wait(done).unwrap();
    assert_eq!(out.to_host().unwrap().bits(), vec![3, 6, 9, 12], "{dev}");
    // Out of bounds (N = 5 > M = 3): the checked kernel stops with the interpreter's error.
    let mut inputs = sdflow_ir::interp::Bindings::default();
    inputs.arrays.insert("a".into(), values(3));
    inputs
        .arrays
        .insert("out".into(), HostArray::zeros(DType::I64, &[5]));
    inputs.symbols.insert("N".into(), sdflow_ir::Value::I64(5));
    inputs.symbols.insert("M".into(), sdflow_ir::Value::I64(3));
    let message = sdflow_ir::interp::run(&s, &mut inputs)
        .unwrap_err()
        .to_string();
    let a = DeviceArray::from_host(&handle, &values(3)).unwrap();
    let out = DeviceArray::zeros(&handle, DType::I64, &[5]).unwrap();
    let call = prog
        .bind(DeviceArgs::new().array("a", &a).array("out", &out))
        .unwrap();
    let done = prog.call_bound(&call).unwrap();
    let e = prog.wait(done).unwrap_err().to_string();
    assert!(e.contains(&message), "{dev}: {e} (interpreter: {message})");
}
