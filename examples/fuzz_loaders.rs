//! The long fuzz campaign over every loader (see `docs/fuzzing.md`), on stable Rust:
//!
//! ```sh
//! cargo run --release --example fuzz_loaders -- --inputs 1000000 --seed 1
//! cargo run --release --example fuzz_loaders -- --loader dace --inputs 50000 --hang-ms 2000
//! cargo run --release --example fuzz_loaders -- --replay tests/fuzz/regressions/dace/x.sdfg
//! ```
//!
//! Options: `--inputs N` (total, split across the loaders by `--split`, default
//! `json=30,dace=10,npz=15,text=45` percent), `--loader L` (only this one, repeatable),
//! `--seed S`, `--hang-ms MS` (an input slower than this is reported as a hang; default
//! 2000), `--abort-s S` (an input still running after this long is saved and the run
//! stops; default 120), `--out DIR` (findings; default `target/fuzz-findings`),
//! `--max-seed-bytes B` (leave out larger corpus files; default 300000), `--progress N`,
//! `--from I` (start at input number I of each loader: `--from I --inputs 1 --loader L`
//! runs input I of a campaign alone), `--replay FILE…` (run saved inputs and print what
//! each gave). Exit status 1 when
//! anything was found.

#[allow(dead_code)]
#[path = "../tests/fuzz/mod.rs"]
mod fuzz;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fuzz::corpus::Corpus;
use fuzz::runner::{self, Current, Options, Outcome};
use fuzz::targets::Loader;

fn usage(msg: &str) -> ! {
    eprintln!("fuzz_loaders: {msg}\nsee the top of examples/fuzz_loaders.rs for the options");
    std::process::exit(2)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut total: u64 = 100_000;
    let mut seed: u64 = 1;
    let mut hang = Duration::from_millis(2000);
    let mut abort = Duration::from_secs(120);
    let mut out = fuzz::corpus::root().join("target/fuzz-findings");
    let mut max_seed = 300_000usize;
    let mut progress = 0u64;
    let mut from = 0u64;
    let mut only: Vec<Loader> = Vec::new();
    let mut split = vec![
        (Loader::Json, 30u64),
        (Loader::Dace, 10),
        (Loader::Npz, 15),
        (Loader::Text, 45),
    ];
    let mut replay: Vec<PathBuf> = Vec::new();
    let num = |v: Option<String>, what: &str| -> u64 {
        v.and_then(|s| s.replace('_', "").parse().ok())
            .unwrap_or_else(|| usage(&format!("{what} needs a number")))
    };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--inputs" => total = num(args.next(), "--inputs"),
            "--seed" => seed = num(args.next(), "--seed"),
            "--hang-ms" => hang = Duration::from_millis(num(args.next(), "--hang-ms")),
            "--abort-s" => abort = Duration::from_secs(num(args.next(), "--abort-s")),
            "--max-seed-bytes" => max_seed = num(args.next(), "--max-seed-bytes") as usize,
            "--progress" => progress = num(args.next(), "--progress"),
            "--from" => from = num(args.next(), "--from"),
            "--out" => {
                out = PathBuf::from(args.next().unwrap_or_else(|| usage("--out needs a folder")))
            }
            "--loader" => {
                let n = args.next().unwrap_or_default();
                only.push(Loader::from_name(&n).unwrap_or_else(|| {
                    usage(&format!("unknown loader '{n}' (json, dace, npz, text)"))
                }));
            }
            "--split" => {
                let s = args.next().unwrap_or_default();
                split = s
                    .split(',')
                    .map(|kv| {
                        let (k, v) = kv
                            .split_once('=')
                            .unwrap_or_else(|| usage("--split json=30,dace=10,…"));
                        let l = Loader::from_name(k)
                            .unwrap_or_else(|| usage(&format!("unknown loader '{k}'")));
                        (
                            l,
                            v.parse().unwrap_or_else(|_| usage("--split needs numbers")),
                        )
                    })
                    .collect();
            }
            "--replay" => replay.extend(args.by_ref().map(PathBuf::from)),
            other => usage(&format!("unknown option '{other}'")),
        }
    }
    let corpus = Corpus::load(max_seed);
    eprintln!(
        "corpus: {} json, {} dace, {} npz ({} programs), {} texts",
        corpus.json.len(),
        corpus.dace.len(),
        corpus.npz.len(),
        corpus.programs.len(),
        corpus.texts.len()
    );
    let scratch = std::env::temp_dir().join("sdflow-fuzz");
    if !replay.is_empty() {
        let _ = std::fs::create_dir_all(&scratch);
        let file = scratch.join(format!("replay-{}.npz", std::process::id()));
        let mut bad = false;
        for p in &replay {
            let Some(input) = runner::load_saved(p) else {
                eprintln!("{}: not a saved input (DIR/<loader>/FILE)", p.display());
                bad = true;
                continue;
            };
            let (o, took) = runner::run_one(&input, &corpus, &file);
            bad |= !matches!(
                o,
                Outcome::Done(
                    fuzz::targets::Verdict::Accepted | fuzz::targets::Verdict::Rejected(_)
                )
            );
            println!("{}: {o:?} in {took:.2?}", p.display());
        }
        std::process::exit(i32::from(bad));
    }
    if !only.is_empty() {
        split.retain(|(l, _)| only.contains(l));
        if split.is_empty() {
            split = only.iter().map(|l| (*l, 1)).collect();
        }
    }
    let weight: u64 = split.iter().map(|(_, w)| w).sum::<u64>().max(1);
    let inputs: Vec<(Loader, u64)> = split
        .iter()
        .map(|(l, w)| (*l, total * w / weight))
        .collect();
    let opts = Options {
        seed,
        inputs,
        hang_limit: hang,
        save_dir: Some(out.clone()),
        scratch,
        progress,
        max_findings: 10_000,
        from,
    };
    // The watchdog: an input that never finishes is saved and reported, then the run ends.
    let current: Current = Arc::new(Mutex::new(None));
    {
        let current = current.clone();
        let out = out.clone();
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(Duration::from_millis(500));
                let guard = current.lock().unwrap_or_else(|e| e.into_inner());
                if let Some((since, input)) = guard.as_ref()
                    && since.elapsed() > abort
                {
                    let p = runner::save(&out, input, &format!("hang-{seed}-running"));
                    eprintln!(
                        "hang: an input of loader {} is still running after {abort:?}; saved as {p:?}",
                        input.loader.name()
                    );
                    std::process::exit(3);
                }
            }
        });
    }
    let report = runner::campaign(&corpus, &opts, Some(&current));
    println!("seed {seed}\n{report}");
    std::process::exit(i32::from(!report.findings.is_empty()));
}
