//! Snapshot tests in the style of naga: every program in `examples/` and `tests/in/`
//! (`*.sdfg.json`) is read, and its DOT drawings (full, `control`, `states`, and the
//! optimized program marked against it, `diff`), `sdflow stats` text and canonical JSON
//! are compared with `tests/out/<name>.{dot,control.dot,states.dot,diff.dot,stats,json}`.
//!
//! `examples/dycore.sdfg.json` is generated (and checked against its generator by
//! `tests/dycore.rs`): only its stats are a snapshot, not another 450 KiB of DOT and JSON.
//!
//! After an intended change, `UPDATE_EXPECT=1 cargo test --test snapshots` rewrites the
//! files; review the diff before committing.

use std::path::{Path, PathBuf};

use expect_test::expect_file;
use sdflow::cli;
use sdflow::codegen::cfamily::Dialect;
use sdflow::codegen::cpu::OpenMp;
use sdflow::codegen::cuda::Cuda;
use sdflow::ir::{dot, format};

/// The snapshot file of a dialect's prelude.
fn prelude_file(dialect: &dyn Dialect) -> String {
    let ext = match dialect.name() {
        "cuda" => "cu",
        other => other,
    };
    format!("prelude.{ext}")
}

/// `text` with the prelude of `dialect` replaced by a line naming its snapshot: the
/// prelude must be there, whole, once.
fn without_prelude(text: &str, dialect: &dyn Dialect, name: &str) -> String {
    let p = dialect.prelude();
    assert_eq!(
        text.matches(&p).count(),
        1,
        "{name}: the {} prelude, once",
        dialect.name()
    );
    text.replacen(
        &p,
        &format!("/* prelude: tests/out/{} */\n", prelude_file(dialect)),
        1,
    )
}

/// Each dialect's prelude, once.
#[test]
fn prelude_snapshots() {
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/out");
    for d in [&OpenMp as &dyn Dialect, &Cuda] {
        expect_file![out.join(prelude_file(d))].assert_eq(&d.prelude());
    }
}

fn inputs() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["examples", "tests/in"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let p = entry.unwrap().path();
            if p.to_string_lossy().ends_with(".sdfg.json") {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

#[test]
fn snapshots() {
    let files = inputs();
    assert!(
        files.len() >= 4,
        "expected the example programs, found {files:?}"
    );
    for path in files {
        let name = path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .trim_end_matches(".sdfg.json")
            .to_string();
        let sdfg = cli::load_program(&path).unwrap_or_else(|e| panic!("{e}"));
        let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/out");
        expect_file![out.join(format!("{name}.stats"))].assert_eq(&cli::stats_text(&sdfg));
        // Drawn as the control flow by default (122 states), and marked with what the
        // optimizer did.
        if name == "dycore" {
            assert_eq!(dot::Detail::auto(&sdfg), dot::Detail::Control);
        } else {
            assert_eq!(dot::Detail::auto(&sdfg), dot::Detail::Full, "{name}");
        }
        let mut optimized = sdfg.clone();
        sdflow::transforms::Pipeline::cpu()
            .run(&mut optimized)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let marked = dot::DotOptions {
            detail: Some(if name == "dycore" {
                dot::Detail::Control
            } else {
                dot::Detail::States
            }),
            marks: Some(dot::diff_marks(&sdfg, &optimized)),
            ..Default::default()
        };
        expect_file![out.join(format!("{name}.diff.dot"))]
            .assert_eq(&dot::to_dot_with(&optimized, &marked).unwrap());
        if name == "dycore" {
            let control = dot::DotOptions {
                detail: Some(dot::Detail::Control),
                ..Default::default()
            };
            expect_file![out.join("dycore.control.dot")]
                .assert_eq(&dot::to_dot_with(&sdfg, &control).unwrap());
            continue;
        }
        expect_file![out.join(format!("{name}.dot"))].assert_eq(&dot::to_dot(&sdfg));
        for (level, detail) in [
            ("control", dot::Detail::Control),
            ("states", dot::Detail::States),
        ] {
            let opts = dot::DotOptions {
                detail: Some(detail),
                ..Default::default()
            };
            expect_file![out.join(format!("{name}.{level}.dot"))]
                .assert_eq(&dot::to_dot_with(&sdfg, &opts).unwrap());
        }
        expect_file![out.join(format!("{name}.json"))].assert_eq(&format::to_json(&sdfg));
    }
}

/// The execution plan and the generated C of every example after the CPU pipeline, and
/// its CUDA after the GPU pipeline (the dycore's plan only: its C is 370 KB), as naga
/// snapshots its backends' output: a change of a scheduling decision or of the emitted
/// text shows up in review. The prelude of each dialect is a snapshot of its own.
#[test]
fn generated_code_snapshots() {
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/out");
    let mut seen = 0;
    for path in inputs() {
        if !path.starts_with(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")) {
            continue;
        }
        let name = path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .trim_end_matches(".sdfg.json")
            .to_string();
        let plan = cli::show(&path, "plan", true).unwrap_or_else(|e| panic!("{name}: {e}"));
        expect_file![out.join(format!("{name}.plan"))].assert_eq(&plan);
        if name != "dycore" {
            let c = cli::show(&path, "c", true).unwrap_or_else(|e| panic!("{name}: {e}"));
            expect_file![out.join(format!("{name}.c"))]
                .assert_eq(&without_prelude(&c, &OpenMp, &name));
            let cu = cli::show(&path, "cuda", true).unwrap_or_else(|e| panic!("{name}: {e}"));
            expect_file![out.join(format!("{name}.cu"))]
                .assert_eq(&without_prelude(&cu, &Cuda, &name));
        }
        seen += 1;
    }
    assert_eq!(seen, 5, "the five examples");
}
