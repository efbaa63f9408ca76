//! The long run of the differential test of tasklet expressions (see `docs/fuzzing.md`):
//! batches of random expressions evaluated by the interpreter and by compiled C, before
//! and after the optimizer, compared bit for bit.
//!
//! ```sh
//! cargo run --release --example fuzz_exprs -- --exprs 100000 --seed 1
//! cargo run --release --example fuzz_exprs -- --exprs 2000 --batch 200 --depth 5 --points 64
//! ```
//!
//! Options: `--exprs N` (total; default 10 000), `--batch B` (expressions per program;
//! default 100), `--depth D` (largest expression depth; default 4), `--points P` (input
//! points per program; default 64), `--seed S` (batch `k` uses seed `S * 1 000 003 + k`;
//! default 1), `--jobs J` (batches at once; default: the cores). Every finding is printed
//! with its expression, the inputs at the point and both values; exit status 1 when
//! anything was found.

#[allow(dead_code)]
#[path = "../tests/differential/mod.rs"]
mod differential;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use rayon::prelude::*;

fn arg(args: &[String], name: &str, default: u64) -> Result<u64, String> {
    match args.iter().position(|a| a == name) {
        None => Ok(default),
        Some(k) => args
            .get(k + 1)
            .ok_or_else(|| format!("{name} needs a value"))?
            .parse()
            .map_err(|e| format!("{name}: {e}")),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let parse = || -> Result<_, String> {
        Ok((
            arg(&args, "--exprs", 10_000)? as usize,
            arg(&args, "--batch", 100)?.max(1) as usize,
            arg(&args, "--depth", 4)? as u32,
            arg(&args, "--points", 64)?.max(1) as usize,
            arg(&args, "--seed", 1)?,
            arg(&args, "--jobs", 0)? as usize,
        ))
    };
    let (total, per, depth, points, seed, jobs) = match parse() {
        Ok(v) => v,
        Err(e) => {
            eprintln!("fuzz_exprs: {e}");
            std::process::exit(2);
        }
    };
    if jobs > 0 {
        rayon::ThreadPoolBuilder::new()
            .num_threads(jobs)
            .build_global()
            .expect("one global pool");
    }
    let batches = total.div_ceil(per);
    let start = Instant::now();
    let done = AtomicUsize::new(0);
    let outcomes: Vec<_> = (0..batches)
        .into_par_iter()
        .map(|k| {
            let count = per.min(total - k * per);
            let o = differential::check(
                seed.wrapping_mul(1_000_003).wrapping_add(k as u64),
                count,
                depth,
                points,
            );
            let d = done.fetch_add(1, Ordering::Relaxed) + 1;
            if d.is_multiple_of(10) || d == batches {
                eprintln!(
                    "{d}/{batches} batches, {:.0} s",
                    start.elapsed().as_secs_f64()
                );
            }
            o
        })
        .collect();
    let exprs: usize = outcomes.iter().map(|o| o.exprs).sum();
    let values: usize = outcomes.iter().map(|o| o.values).sum();
    let findings: Vec<&String> = outcomes.iter().flat_map(|o| &o.findings).collect();
    for f in &findings {
        println!("{f}");
    }
    println!(
        "{exprs} expressions in {batches} programs, {values} values compared on 3 paths \
         (compiled, optimized+interpreted, optimized+compiled), {} finding(s), {:.0} s",
        findings.len(),
        start.elapsed().as_secs_f64()
    );
    if !findings.is_empty() {
        std::process::exit(1);
    }
}
