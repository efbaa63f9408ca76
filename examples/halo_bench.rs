//! What a halo exchange costs on MPI ranks, and how much of it the plan's start/finish
//! split hides behind work that does not touch the exchanged field.
//!
//! ```sh
//! cargo build --release --example halo_bench
//! OMP_NUM_THREADS=1 mpirun -n 2 target/release/examples/halo_bench --ranks 2x1 --size 128x128x8
//! ```
//!
//! Four programs, each a loop of `--steps` steps on every rank's block (`--size` cells,
//! halo 2, periodic), are timed in one run, alternating, `--reps` times each:
//! - `exchange`: the exchange of `u` alone;
//! - `work`: `--work` sweeps of `w = 0.999 w + 0.001 v` over the block (no `u`);
//! - `split on`: exchange `u`, the sweeps, then a Laplacian of `u` — the plan starts
//!   the exchange, runs the sweeps and the Laplacian's interior, finishes the exchange,
//!   then runs the Laplacian's rim;
//! - `split off`: the same program with each exchange finished right after its start
//!   and the Laplacian whole.
//!
//! Each line gives the median over the repetitions of the slowest rank's time per step.
//! `hidden` is `(split off − split on) / exchange`: the share of the exchange's time the
//! sweeps covered.

use std::time::Instant;

use clap::Parser;
use sdflow::codegen::{CompiledProgram, CpuBackend, EmitOptions};
use sdflow::ir::interp::{Bindings, HostArray};
use sdflow::ir::{DType, Decomposition, Value};
use sdflow_orchestration::{Program, Stencil};

/// Halo exchange cost and overlap on MPI ranks.
#[derive(Parser)]
struct Args {
    /// Ranks, `PXxPY` (start with `mpirun -n PX*PY`).
    #[arg(long, default_value = "2x1")]
    ranks: String,
    /// Each rank's block, `NXxNYxNZ`.
    #[arg(long, default_value = "128x128x8")]
    size: String,
    /// Steps per timed call.
    #[arg(long, default_value_t = 200)]
    steps: i64,
    /// Sweeps of independent work per step.
    #[arg(long, default_value_t = 2)]
    work: usize,
    /// Timed calls of each program.
    #[arg(long, default_value_t = 7)]
    reps: usize,
}

fn numbers(s: &str, n: usize) -> Result<Vec<i64>, String> {
    let v: Vec<i64> = s
        .split('x')
        .map(|p| {
            p.trim()
                .parse::<i64>()
                .map_err(|_| format!("'{s}': expected {n} numbers joined by x"))
        })
        .collect::<Result<_, _>>()?;
    if v.len() != n || v.iter().any(|&x| x < 1) {
        return Err(format!("'{s}': expected {n} positive numbers joined by x"));
    }
    Ok(v)
}

/// The program: a loop of `nsteps` steps; with `exchange`, `u` is exchanged first; with
/// `work`, that many sweeps over `v` and `w`; with `laplacian`, `out = ∇²u` last.
fn program(ranks: [i64; 2], exchange: bool, work: usize, laplacian: bool) -> Program {
    let sweep = Stencil::new("sweep", |s| {
        let v = s.input("v");
        let w = s.input("w");
        let out = s.output("out");
        s.set(&out, 0.999 * w.c() + 0.001 * v.c());
    });
    let lap = Stencil::new("lap", |s| {
        let u = s.input("u");
        let out = s.output("out");
        s.set(
            &out,
            u.at(-1, 0, 0) + u.at(1, 0, 0) + u.at(0, -1, 0) + u.at(0, 1, 0) - 4.0 * u.c(),
        );
    });
    let interior = ["2:NX+2", "2:NY+2", "0:NZ"];
    let mut p = Program::new("halo_bench");
    p.symbol("NX", DType::I64)
        .symbol("NY", DType::I64)
        .symbol("NZ", DType::I64)
        .symbol("nsteps", DType::I64);
    for f in ["u", "v", "w", "out"] {
        p.field(f, ["NX + 4", "NY + 4", "NZ"]);
    }
    p.repeat("step", "nsteps", |b| {
        if exchange {
            b.halo_exchange(
                &["u"],
                Decomposition::Structured {
                    ranks,
                    width: 2,
                    periodic: [true, true],
                    corners: true,
                },
            );
        }
        for _ in 0..work {
            b.call(
                &sweep,
                &[("v", "v"), ("w", "w"), ("out", "w")],
                &[],
                &interior,
            );
        }
        if laplacian {
            b.call(&lap, &[("u", "u"), ("out", "out")], &[], &interior);
        }
    });
    p
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let r = numbers(&args.ranks, 2)?;
    let size = numbers(&args.size, 3)?;
    let ranks = [r[0], r[1]];
    let Some((rank, n)) = sdflow::codegen::mpi::launched() else {
        return Err(format!("start it with `mpirun -n {}`", r[0] * r[1]).into());
    };
    let build = |exchange,
                 work,
                 laplacian,
                 overlap|
     -> Result<CompiledProgram, Box<dyn std::error::Error>> {
        let sdfg = program(ranks, exchange, work, laplacian).build()?;
        let backend = CpuBackend {
            emit: EmitOptions {
                overlap_exchanges: overlap,
                ..EmitOptions::default()
            },
            ..CpuBackend::default()
        };
        Ok(backend.build(&sdfg)?)
    };
    let programs = [
        ("exchange", build(true, 0, false, true)?),
        ("work", build(false, args.work, false, true)?),
        ("split on", build(true, args.work, true, true)?),
        ("split off", build(true, args.work, true, false)?),
    ];
    let mpi = programs[0]
        .1
        .mpi()
        .ok_or("the program does not exchange halos")?;
    let shape = [size[0] as usize + 4, size[1] as usize + 4, size[2] as usize];
    let field = |seed: usize| {
        let len = shape.iter().product::<usize>();
        let v: Vec<f64> = (0..len)
            .map(|k| ((k * 7 + seed) % 13) as f64 * 0.1)
            .collect();
        HostArray::from_f64(&shape, v).expect("shape")
    };
    let mut b = Bindings::default();
    for (k, f) in ["u", "v", "w", "out"].iter().enumerate() {
        b.arrays.insert(f.to_string(), field(k));
    }
    for (k, v) in [
        ("NX", size[0]),
        ("NY", size[1]),
        ("NZ", size[2]),
        ("nsteps", args.steps),
    ] {
        b.symbols.insert(k.into(), Value::I64(v));
    }
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); programs.len()];
    for rep in 0..=args.reps {
        for (k, (_, prog)) in programs.iter().enumerate() {
            let mut bk = b.clone();
            mpi.barrier()?;
            let t = Instant::now();
            prog.run_bindings(&mut bk)?;
            let mine = t.elapsed().as_secs_f64() / args.steps as f64;
            // The slowest rank's time (the first repetition warms up).
            if let Some(all) = mpi.gather(&[mine], 0)?
                && rep > 0
            {
                times[k].push(all.iter().cloned().fold(0.0, f64::max));
            }
        }
    }
    if rank != 0 {
        return Ok(());
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let m: Vec<f64> = times.iter_mut().map(median).collect();
    println!(
        "{n} ranks ({}x{}), block {}x{}x{} + halo 2, {} steps per call, {} sweeps, median of {} calls, slowest rank",
        r[0], r[1], size[0], size[1], size[2], args.steps, args.work, args.reps
    );
    for ((name, _), t) in programs.iter().zip(&m) {
        println!("  {name:<10} {:>9.2} us per step", t * 1e6);
    }
    println!(
        "  hidden     {:>9.0} % of the exchange ((split off - split on) / exchange)",
        100.0 * (m[3] - m[2]) / m[0]
    );
    Ok(())
}
