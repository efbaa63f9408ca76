//! The long fuzz campaign over every loader (see `docs/fuzzing.md`), on stable Rust:
//!
//! ```sh
//! cargo run --release --example fuzz_loaders -- --inputs 1000000 --seed 1
//! cargo run --release --example fuzz_loaders -- --loader dace --inputs 50000 --hang-ms 2000
//! cargo run --release --example fuzz_loaders -- --replay tests/fuzz/regressions/dace/x.sdfg
//! ```
//!
//! Options: `--inputs N` (total, split across the loaders by `--split`, default
//! `json=30,dace=10,npz=15,text=45,plot=1,run=1,bench=1`, as weights; the tools' loaders
//! `plot`, `run` and `bench` are slower per input), `--loader L` (only this one, repeatable),
//! `--seed S`, `--hang-ms MS` (an input slower than this is reported as a hang; default
//! 2000), `--abort-s S` (an input still running after this long is saved and the run
//! stops; default 120), `--out DIR` (findings; default `target/fuzz-findings`),
//! `--max-seed-bytes B` (leave out larger corpus files; default 300000), `--progress N`,
//! `--from I` (start at input number I of each loader: `--from I --inputs 1 --loader L`
//! runs input I of a campaign alone), `--replay FILE…` (run saved inputs and print what
//! each gave), `--binary PATH` (run the inputs of the tools' loaders through that `sdflow`
//! binary instead, and check its exit status: 0, or 1 or 2 with an `error:` line; a panic,
//! a signal or a process still running after `--abort-s` is a finding). Exit status 1 when
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
        (Loader::Plot, 1),
        (Loader::Run, 1),
        (Loader::Bench, 1),
    ];
    let mut replay: Vec<PathBuf> = Vec::new();
    let mut binary: Option<PathBuf> = None;
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
                    usage(&format!(
                        "unknown loader '{n}' (json, dace, npz, text, plot, run, bench)"
                    ))
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
            "--binary" => {
                binary =
                    Some(PathBuf::from(args.next().unwrap_or_else(|| {
                        usage("--binary needs the sdflow binary")
                    })))
            }
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
    if let Some(bin) = &binary {
        // The tools' inputs through the binary: exit statuses, not panics caught.
        split.retain(|(l, _)| matches!(l, Loader::Plot | Loader::Run | Loader::Bench));
        if split.is_empty() {
            usage("--binary runs the tools' loaders: plot, run, bench");
        }
        let weight: u64 = split.iter().map(|(_, w)| w).sum::<u64>().max(1);
        let _ = std::fs::create_dir_all(&scratch);
        let file = scratch.join(format!("binary-{}.npz", std::process::id()));
        let mut found = 0;
        for (loader, w) in &split {
            let n = total * w / weight;
            let (mut ok, start) = (0u64, std::time::Instant::now());
            for index in from..from + n {
                let mut rng = runner::rng_for(seed, *loader, index);
                let input = fuzz::generate::input(&mut rng, *loader, &corpus);
                let Some(argv) = fuzz::tools::command_line(&input, &corpus, &file) else {
                    continue;
                };
                let mut child = match std::process::Command::new(bin)
                    .args(&argv)
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                {
                    Ok(c) => c,
                    Err(e) => usage(&format!("cannot run {}: {e}", bin.display())),
                };
                let t = std::time::Instant::now();
                let finding = loop {
                    match child.try_wait() {
                        Ok(Some(status)) => {
                            let mut err = String::new();
                            if let Some(mut e) = child.stderr.take() {
                                let _ = std::io::Read::read_to_string(&mut e, &mut err);
                            }
                            break fuzz::tools::judge_exit(status, &err);
                        }
                        Ok(None) if t.elapsed() > abort => {
                            let _ = child.kill();
                            let _ = child.wait();
                            break Some(format!("still running after {abort:?}"));
                        }
                        Ok(None) => std::thread::sleep(Duration::from_millis(2)),
                        Err(e) => break Some(format!("wait: {e}")),
                    }
                };
                match finding {
                    None => ok += 1,
                    Some(m) => {
                        found += 1;
                        let p = runner::save(&out, &input, &format!("binary-{seed}-{index}"));
                        println!(
                            "{} #{index}: {m} [saved {p:?}]\n  sdflow {}",
                            loader.name(),
                            argv.join(" ")
                        );
                    }
                }
            }
            println!(
                "{}: {n} inputs through {}, {ok} exited as a command should, in {:.1?}",
                loader.name(),
                bin.display(),
                start.elapsed()
            );
        }
        std::process::exit(i32::from(found > 0));
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
