//! Generated C under AddressSanitizer and UndefinedBehaviorSanitizer: every example, the
//! dycore and the DaCe corpus run clean through `sdflow run --backend cpu` with
//! `SDFLOW_SANITIZE=1` (a finding aborts the run: `-fno-sanitize-recover=all`). The
//! sanitized library is loaded into a child process with the ASan runtime preloaded, as
//! a sanitized library must be.

use std::path::{Path, PathBuf};
use std::process::Command;

use sdflow::codegen::CompilerOptions;

/// The ASan runtime, or why the sanitizers cannot run here.
fn runtime() -> Result<PathBuf, String> {
    let cc = CompilerOptions::default();
    let lib = cc.asan_runtime().ok_or_else(|| {
        format!(
            "the C compiler '{}' has no libasan.so (install libasan/libubsan, e.g. `apt-get install gcc`)",
            cc.cc
        )
    })?;
    // The compiler must also link with the sanitizers (libubsan).
    let dir = std::env::temp_dir().join(format!("sdflow-sanitize-probe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let src = dir.join("probe.c");
    std::fs::write(&src, "int probe(int* a, int i) { return a[i] + 1; }\n")
        .map_err(|e| e.to_string())?;
    let out = Command::new(&cc.cc)
        .args(sdflow::codegen::compile::SANITIZE_FLAGS)
        .args(["-fPIC", "-shared", "-o"])
        .arg(dir.join("probe.so"))
        .arg(&src)
        .output()
        .map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&dir);
    if !out.status.success() {
        return Err(format!(
            "the C compiler cannot build sanitized code: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(lib)
}

fn run_sanitized(asan: &Path, cache: &Path, file: &Path, symbols: &[&str]) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sdflow"));
    cmd.arg("run").arg(file).args(["--backend", "cpu"]);
    for s in symbols {
        cmd.args(["-s", s]);
    }
    let out = cmd
        .env("SDFLOW_SANITIZE", "1")
        .env("SDFLOW_CACHE_DIR", cache)
        .env("LD_PRELOAD", asan)
        // Leaks of the Rust process itself are not the generated code's.
        .env("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=0")
        .env("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
        .env("OMP_NUM_THREADS", "2")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success()
            && !stderr.contains("runtime error")
            && !stderr.contains("AddressSanitizer"),
        "{}: sanitized run failed ({}):\n{stderr}",
        file.display(),
        out.status
    );
}

#[test]
fn examples_dycore_and_dace_corpus_run_clean_under_sanitizers() {
    let asan = match runtime() {
        Ok(p) => p,
        Err(why) => {
            println!("skipped: {why}");
            return;
        }
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cache = std::env::temp_dir().join("sdflow-sanitize-cache");
    let ex = root.join("examples");
    let programs: Vec<(PathBuf, Vec<&str>)> = vec![
        (ex.join("laplace.sdfg.json"), vec!["N=33"]),
        (
            ex.join("hyperdiffusion.sdfg.json"),
            vec!["N=20", "alpha=0.05"],
        ),
        (
            ex.join("tridiagonal.sdfg.json"),
            vec!["NX=5", "NY=4", "NZ=7"],
        ),
        (ex.join("flag_if.sdfg.json"), vec!["N=9", "mode=1"]),
        (ex.join("flag_if.sdfg.json"), vec!["N=9", "mode=0"]),
        (
            ex.join("dycore.sdfg.json"),
            vec![
                "nsteps=2",
                "damping=1",
                "dt=0.01",
                "dx=1.0",
                "dy=1.0",
                "f0=0.0001",
                "kv=0.01",
                "nu4=0.001",
            ],
        ),
    ];
    for (file, syms) in &programs {
        run_sanitized(&asan, &cache, file, syms);
    }
    let dace = root.join("tests/dace");
    for name in [
        "hdiff_np",
        "hdiff_map",
        "lap3d_map",
        "pointwise_chain_20",
        "stencil_chain_20",
        "wcr_reduce",
        "tridiag",
    ] {
        for kind in ["raw", "simplified"] {
            run_sanitized(
                &asan,
                &cache,
                &dace.join(format!("{name}.{kind}.sdfg")),
                &[],
            );
        }
    }
    for name in ["cf_demo", "cf_demo_blocks"] {
        for kind in ["raw", "simplified"] {
            run_sanitized(
                &asan,
                &cache,
                &dace.join(format!("{name}.{kind}.sdfg")),
                &["N=16"],
            );
        }
    }
}
