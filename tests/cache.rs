//! The persistent build cache with real processes: eight `sdflow run --backend cpu`
//! processes started together compile once and all load the same library; a second round
//! compiles nothing; a truncated library is detected and rebuilt; concurrent in-process
//! builds of identical and different programs compile each program once.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sdflow::codegen::{Cache, CompilerOptions, CpuBackend, Origin};

fn fresh_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sdflow-cache-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A C compiler wrapper that counts compilations (not `--version` queries) in `count`.
fn counting_cc(dir: &Path) -> (PathBuf, PathBuf) {
    let count = dir.join("compiles.txt");
    let script = dir.join("cc-wrapper.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncase \"$*\" in *--version*|*--help=*) ;; *) echo compile >> '{}' ;; esac\nexec cc \"$@\"\n",
            count.display()
        ),
    )
    .unwrap();
    Command::new("chmod")
        .arg("+x")
        .arg(&script)
        .status()
        .unwrap();
    (script, count)
}

fn compiles(count: &Path) -> usize {
    std::fs::read_to_string(count)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

fn run_many(n: usize, cache: &Path, cc: &Path) -> Vec<String> {
    let children: Vec<_> = (0..n)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_sdflow"))
                .args([
                    "run",
                    "examples/hyperdiffusion.sdfg.json",
                    "--backend",
                    "cpu",
                    "-s",
                    "N=16",
                    "-s",
                    "alpha=0.5",
                ])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .env("SDFLOW_CACHE_DIR", cache)
                .env("SDFLOW_CC", cc)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children
        .into_iter()
        .map(|c| {
            let o = c.wait_with_output().unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            String::from_utf8(o.stdout).unwrap()
        })
        .collect()
}

#[test]
fn processes_started_together_compile_once() {
    let dir = fresh_dir("procs");
    let cache = dir.join("cache");
    let (cc, count) = counting_cc(&dir);
    let outs = run_many(8, &cache, &cc);
    assert_eq!(compiles(&count), 1, "eight processes, one compile");
    assert!(
        outs.iter()
            .all(|o| *o == outs[0] && o.starts_with("out: f64[16, 16] sum="))
    );
    // The interpreter agrees with what the compiled program printed.
    let interp = Command::new(env!("CARGO_BIN_EXE_sdflow"))
        .args([
            "run",
            "examples/hyperdiffusion.sdfg.json",
            "-s",
            "N=16",
            "-s",
            "alpha=0.5",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(interp.stdout).unwrap(), outs[0]);

    // A second round finds everything in the cache.
    run_many(4, &cache, &cc);
    assert_eq!(compiles(&count), 1, "a warm cache compiles nothing");

    // A truncated library is detected, rebuilt, never loaded.
    let entry = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir())
        .unwrap();
    let lib = entry.join("libprogram.so");
    let len = std::fs::metadata(&lib).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&lib)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let again = run_many(2, &cache, &cc);
    assert_eq!(compiles(&count), 2, "the broken entry is rebuilt once");
    assert_eq!(again[0], outs[0]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn concurrent_builds_of_identical_and_different_programs() {
    let dir = fresh_dir("threads");
    let (cc, count) = counting_cc(&dir);
    let backend = CpuBackend {
        cache: Some(Cache::at(dir.join("cache"))),
        compiler: CompilerOptions {
            cc: cc.display().to_string(),
            ..CompilerOptions::default()
        },
        ..CpuBackend::default()
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let load = |f: &str| {
        sdflow::ir::format::load(&std::fs::read_to_string(root.join(f)).unwrap()).unwrap()
    };
    let (a, b) = (load("laplace.sdfg.json"), load("flag_if.sdfg.json"));
    let progs = backend.build_all(&[a.clone(), b.clone(), a.clone(), b.clone(), a]);
    assert!(progs.iter().all(|p| p.is_ok()));
    assert_eq!(compiles(&count), 2, "two distinct programs, two compiles");
    let built = progs
        .iter()
        .filter(|p| p.as_ref().unwrap().origin == Origin::Built)
        .count();
    assert_eq!(built, 2);
    // Loading again is a cache hit.
    let again = backend.build(&b).unwrap();
    assert_eq!(again.origin, Origin::Cached);
    assert_eq!(compiles(&count), 2);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn compiler_errors_name_the_generated_file() {
    let dir = fresh_dir("ccerr");
    let backend = CpuBackend {
        cache: Some(Cache::at(dir.join("cache"))),
        compiler: CompilerOptions {
            flags: vec!["-shared".into(), "-fPIC".into(), "-Dsdf_fail=(".into()],
            ..CompilerOptions::default()
        },
        ..CpuBackend::default()
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let sdfg =
        sdflow::ir::format::load(&std::fs::read_to_string(root.join("laplace.sdfg.json")).unwrap())
            .unwrap();
    let Err(e) = backend.build(&sdfg) else {
        panic!("a broken compile succeeded")
    };
    let text = e.to_string();
    assert!(text.contains("failed"), "{text}");
    assert!(text.contains("generated source: "), "{text}");
    assert!(text.contains(".failed.c"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_change_of_generated_code_is_a_new_cache_entry() {
    let dir = fresh_dir("key");
    let (cc, count) = counting_cc(&dir);
    let make = |min: i64| CpuBackend {
        cache: Some(Cache::at(dir.join("cache"))),
        compiler: CompilerOptions {
            cc: cc.display().to_string(),
            ..CompilerOptions::default()
        },
        emit: sdflow::codegen::EmitOptions {
            parallel_min_points: min,
            ..Default::default()
        },
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let sdfg =
        sdflow::ir::format::load(&std::fs::read_to_string(root.join("laplace.sdfg.json")).unwrap())
            .unwrap();
    assert_eq!(make(4096).build(&sdfg).unwrap().origin, Origin::Built);
    assert_eq!(make(4096).build(&sdfg).unwrap().origin, Origin::Cached);
    // Other emitter options generate other C: never the stale library.
    assert_eq!(make(16).build(&sdfg).unwrap().origin, Origin::Built);
    assert_eq!(compiles(&count), 2);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn builds_without_a_cache_leave_nothing_behind() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let sdfg =
        sdflow::ir::format::load(&std::fs::read_to_string(root.join("laplace.sdfg.json")).unwrap())
            .unwrap();
    let backend = CpuBackend {
        cache: None,
        ..CpuBackend::default()
    };
    let prog = backend.build(&sdfg).unwrap();
    assert_eq!(prog.origin, Origin::Built);
    let scratch = prog.library.parent().unwrap().to_path_buf();
    assert!(
        scratch.starts_with(std::env::temp_dir()),
        "{}",
        scratch.display()
    );
    assert!(!scratch.exists(), "{} stayed", scratch.display());
    // The loaded library runs after its file is gone.
    use sdflow::ir::dtype::Value;
    use sdflow::ir::interp::{self, Bindings, HostArray};
    let n = 8usize;
    let mut bindings = Bindings::default();
    bindings.symbols.insert("N".into(), Value::I64(n as i64));
    let u = (0..n * n).map(|i| ((i * 7) % 11) as f64 * 0.25).collect();
    bindings
        .arrays
        .insert("u".into(), HostArray::from_f64(&[n, n], u).unwrap());
    bindings.arrays.insert(
        "out".into(),
        HostArray::from_f64(&[n, n], vec![0.0; n * n]).unwrap(),
    );
    let mut expected = bindings.clone();
    interp::run(&sdfg, &mut expected).unwrap();
    prog.run_bindings(&mut bindings).unwrap();
    assert_eq!(bindings.arrays["out"].bits(), expected.arrays["out"].bits());
    assert_ne!(expected.arrays["out"].to_f64_vec(), vec![0.0; n * n]);

    // A failed compile keeps its scratch directory: the error names the source in it.
    let broken = CpuBackend {
        cache: None,
        compiler: CompilerOptions {
            flags: vec!["-shared".into(), "-fPIC".into(), "-Dsdf_fail=(".into()],
            ..CompilerOptions::default()
        },
        ..CpuBackend::default()
    };
    let Err(sdflow::codegen::CodegenError::Compiler {
        source_file: Some(src),
        ..
    }) = broken.build(&sdfg)
    else {
        panic!("a broken compile succeeded or named no source")
    };
    assert!(src.exists(), "{} is gone", src.display());
    let text = std::fs::read_to_string(&src).unwrap();
    assert_eq!(text, backend.generate(&sdfg).unwrap());
    let _ = std::fs::remove_dir_all(src.parent().unwrap());
}
