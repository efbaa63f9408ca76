//! The CUDA backend without a GPU: the generated CUDA of every example, the dycore, the
//! DaCe and GT4Py corpus programs and random programs compiles with NVRTC to a CUBIN for
//! sm_90 (`--fmad=false`, precise division and square root), and the CUDA text of the
//! small examples is a snapshot (`tests/out/<name>.cu`).
//!
//! NVRTC is found through `SDFLOW_NVRTC` (a `libnvrtc.so*` or its folder; `.ci/run`
//! installs the `nvidia-cuda-nvrtc` wheel and sets it), the library search path, or the
//! wheel's usual places. Without it the compile tests say so on standard error and
//! return; the snapshots need no NVRTC.

use std::path::{Path, PathBuf};

use expect_test::expect_file;
use sdflow::cli;
use sdflow_codegen::cuda::exec::CudaBackend;
use sdflow_codegen::cuda::nvrtc::{self, Arch, Output};
use sdflow_ir::Sdfg;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
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

/// The CUDA text of the small examples after the GPU pipeline.
#[test]
fn cuda_snapshots() {
    for name in ["laplace", "hyperdiffusion", "flag_if", "tridiagonal"] {
        let p = root().join(format!("examples/{name}.sdfg.json"));
        let cu = cli::show(&p, "cuda", true).unwrap();
        expect_file![root().join(format!("tests/out/{name}.cu"))].assert_eq(&cu);
    }
}

/// On a GPU (skipped without one): every example and the dycore, optimized with the GPU
/// pipeline and run through CUDA, equal the interpreter bit for bit on the unoptimized
/// program.
#[test]
fn gpu_runs_equal_the_interpreter() {
    use sdflow_codegen::cuda::device::CudaDevice;
    if !nvrtc_or_skip("gpu_runs_equal_the_interpreter") {
        return;
    }
    if let Err(e) = CudaDevice::count().and_then(|n| {
        if n == 0 {
            Err(sdflow_codegen::cuda::device::DeviceError("no GPU".into()))
        } else {
            Ok(n)
        }
    }) {
        eprintln!("skipped gpu_runs_equal_the_interpreter: {e}");
        return;
    }
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
        let device = CudaDevice::new(0).unwrap();
        let mut prog = backend
            .build(&opt, Box::new(device))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        for graphs in [true, false] {
            prog.set_graphs(graphs);
            let mut got = inputs.clone();
            prog.run_bindings(&mut got)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            for (n, d) in s.non_transients() {
                if d.transient() {
                    continue;
                }
                assert_eq!(
                    expected.arrays[n].bits(),
                    got.arrays[n].bits(),
                    "{name}: '{n}' differs (graphs {graphs})"
                );
            }
        }
    }
}
