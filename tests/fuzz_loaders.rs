//! The short, fixed-seed fuzz runs over every loader and the tools' argument files (the long campaign is
//! `examples/fuzz_loaders.rs`; see `docs/fuzzing.md`), and the replay of every saved
//! regression input in `tests/fuzz/regressions/`.

#[allow(dead_code)]
mod fuzz;

use std::time::Duration;

use fuzz::corpus::Corpus;
use fuzz::runner::{self, Options, Outcome};
use fuzz::targets::{Loader, Verdict};

/// Seeds up to this size (decompressed): the short run skips the biggest DaCe files.
const MAX_SEED_BYTES: usize = 140_000;

#[test]
fn short_run_finds_no_panic_and_no_unclear_error() {
    let corpus = Corpus::load(MAX_SEED_BYTES);
    assert!(corpus.json.len() >= 5 && corpus.dace.len() >= 5 && corpus.npz.len() >= 5);
    let out = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fuzz-findings");
    let opts = Options {
        seed: 20261123,
        inputs: vec![
            (Loader::Json, 1200),
            (Loader::Dace, 150),
            (Loader::Npz, 500),
            (Loader::Text, 3000),
        ],
        // Not asserted on: the short run reports slow inputs, the long run hunts them.
        hang_limit: Duration::from_secs(3600),
        save_dir: Some(out),
        scratch: std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")),
        progress: 0,
        max_findings: 20,
        from: 0,
    };
    let report = runner::campaign(&corpus, &opts, None);
    println!("{report}");
    assert!(
        report.findings.is_empty(),
        "fuzzing found problems (seed {}):\n{report}",
        opts.seed
    );
    // Every loader both accepted and refused inputs: the mutations are neither all
    // harmless nor all garbage.
    for (l, t) in &report.tallies {
        assert!(t.accepted > 0 && t.rejected > 0, "{}: {t:?}", l.name());
    }
}

#[test]
fn the_tools_argument_files_give_no_panic_and_clear_errors() {
    // `sdflow plot`, `run` (on the interpreter) and `bench` (up to the compilation)
    // through their own functions, on mutated archives, `-s` values and configurations.
    let corpus = Corpus::load(MAX_SEED_BYTES);
    let tmp = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let opts = Options {
        seed: 20261124,
        inputs: vec![(Loader::Plot, 60), (Loader::Run, 60), (Loader::Bench, 60)],
        hang_limit: Duration::from_secs(3600),
        save_dir: Some(tmp.join("fuzz-findings")),
        // A scratch folder of its own: the other campaign runs beside this one.
        scratch: tmp.join("fuzz-tools"),
        progress: 0,
        max_findings: 20,
        from: 0,
    };
    let report = runner::campaign(&corpus, &opts, None);
    println!("{report}");
    assert!(
        report.findings.is_empty(),
        "fuzzing found problems (seed {}):\n{report}",
        opts.seed
    );
    for (l, t) in &report.tallies {
        assert!(t.accepted > 0 && t.rejected > 0, "{}: {t:?}", l.name());
    }
}

#[test]
fn saved_regressions_load_without_panic_and_with_clear_errors() {
    let corpus = Corpus::load(MAX_SEED_BYTES);
    let dir = fuzz::corpus::root().join("tests/fuzz/regressions");
    let scratch = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("regression.npz");
    let mut n = 0;
    let mut failures = Vec::new();
    for l in Loader::ALL {
        let Ok(entries) = std::fs::read_dir(dir.join(l.name())) else {
            continue;
        };
        let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        paths.sort();
        for p in paths {
            let input =
                runner::load_saved(&p).unwrap_or_else(|| panic!("{}: unreadable", p.display()));
            let (o, _) = runner::run_one(&input, &corpus, &scratch);
            n += 1;
            if !matches!(o, Outcome::Done(Verdict::Accepted | Verdict::Rejected(_))) {
                failures.push(format!("{}: {o:?}", p.display()));
            }
        }
    }
    assert!(n > 0, "no regression inputs under {}", dir.display());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
