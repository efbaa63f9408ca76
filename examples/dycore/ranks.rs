//! `dycore --ranks PXxPY`: the time step on `PX × PY` ranks, each on its block of the
//! grid with a halo of 2 that halo exchanges fill ([`crate::program::timestep_on`]).
//!
//! - `--backend cpu`, under `mpirun -n PX*PY`: one MPI process per rank. Each cuts its
//!   block out of the same initial state, runs the compiled program (built by one rank,
//!   loaded by the others through the cache), and sends its block's interior to rank 0,
//!   which puts the grid together and compares it bit for bit with the program on one
//!   rank (compiled, the periodic halo copies in place of the exchanges) and with the
//!   plain-loop reference, and prints the conservation of mass and tracer mass.
//! - `--backend cuda`, under `mpirun -n PX*PY`: the same with each rank's program on
//!   the GPU (`Pipeline::gpu`, the CUDA backend; `SDFLOW_CUDA_DEVICE=emulated` runs its
//!   kernels on the host), its exchanges packed and unpacked by kernels on the stream.
//! - `--backend interp`: the same on simulated ranks of the interpreter, one thread each
//!   (every rank runs one program, so the blocks must be of equal size).
//!
//! With `--halo-analysis`, the program has no halo updates of its own and the exchanges
//! are where the halo analysis finds them needed (`Program::insert_halo_exchanges`).

#![allow(dead_code)]

use std::time::Instant;

use sdflow::codegen::cuda::device::from_env;
use sdflow::codegen::cuda::exec::CudaBackend;
use sdflow::codegen::{CpuBackend, Origin};
use sdflow::ir::interp::{Bindings, run_ranks};

use crate::program::{Dycore, Halos};
use crate::reference::{self, Config, HALO, State, interior_max_abs, random_smooth};

/// The blocks of `n` cells over `p` ranks, `(start, length)`: the first `n % p` get one
/// more (as `sdflow::ir::interp::scatter` splits).
pub fn blocks(n: usize, p: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::with_capacity(p);
    let mut start = 0;
    for k in 0..p {
        let len = n / p + usize::from(k < n % p);
        out.push((start, len));
        start += len;
    }
    out
}

/// Rank `r`'s block: its configuration and its offset in the grid's interior.
pub fn block(cfg: &Config, ranks: [usize; 2], r: usize) -> (Config, usize, usize) {
    let (bi, bj) = (blocks(cfg.nx, ranks[0]), blocks(cfg.ny, ranks[1]));
    let ((oi, li), (oj, lj)) = (bi[r % ranks[0]], bj[r / ranks[0]]);
    let local = Config {
        nx: li,
        ny: lj,
        ..cfg.clone()
    };
    (local, oi, oj)
}

/// The part of `s` (on the whole grid, `cfg`) a rank with block `local` at `(oi, oj)`
/// holds: its block and the halo around it.
pub fn cut(cfg: &Config, s: &State, local: &Config, oi: usize, oj: usize) -> State {
    let mut out = State::zeros(local);
    let (px, py) = (local.px(), local.py());
    for (dst, src) in [
        (&mut out.h, &s.h),
        (&mut out.u, &s.u),
        (&mut out.v, &s.v),
        (&mut out.qh, &s.qh),
    ] {
        for k in 0..cfg.nz {
            for j in 0..py {
                for i in 0..px {
                    dst[local.idx(k, j, i)] = src[cfg.idx(k, oj + j, oi + i)];
                }
            }
        }
    }
    out
}

/// The interior of a rank's state, field by field (h, u, v, qh), each in `(k, j, i)`
/// order.
pub fn interior(local: &Config, s: &State) -> Vec<f64> {
    let mut out = Vec::with_capacity(4 * local.nz * local.ny * local.nx);
    for a in [&s.h, &s.u, &s.v, &s.qh] {
        for k in 0..local.nz {
            for j in 0..local.ny {
                for i in 0..local.nx {
                    out.push(a[local.idx(k, HALO + j, HALO + i)]);
                }
            }
        }
    }
    out
}

/// Puts the ranks' interiors (`parts`, in rank order, as [`interior`] lays them out) into
/// a state of the whole grid (halos zero).
pub fn assemble(cfg: &Config, ranks: [usize; 2], parts: &[f64]) -> State {
    let mut s = State::zeros(cfg);
    let mut at = 0;
    for r in 0..ranks[0] * ranks[1] {
        let (local, oi, oj) = block(cfg, ranks, r);
        for a in [&mut s.h, &mut s.u, &mut s.v, &mut s.qh] {
            for k in 0..local.nz {
                for j in 0..local.ny {
                    for i in 0..local.nx {
                        a[cfg.idx(k, HALO + oj + j, HALO + oi + i)] = parts[at];
                        at += 1;
                    }
                }
            }
        }
    }
    s
}

/// How many interior values of `a` and `b` differ in their bits.
pub fn differing(cfg: &Config, a: &State, b: &State) -> usize {
    interior(cfg, a)
        .iter()
        .zip(interior(cfg, b))
        .filter(|(x, y)| x.to_bits() != y.to_bits())
        .count()
}

/// The run of `--ranks` (see the module documentation).
/// Where the ranks' programs run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum On {
    /// Simulated ranks of the reference interpreter.
    Interp,
    /// MPI processes, compiled C/OpenMP.
    Cpu,
    /// MPI processes, CUDA.
    Cuda,
}

/// A rank's compiled program.
enum Rank {
    Cpu(Box<sdflow::codegen::CompiledProgram>),
    Gpu(Box<sdflow::codegen::cuda::exec::GpuProgram>),
}

pub fn run(
    cfg: &Config,
    ranks: [usize; 2],
    steps: usize,
    seed: u64,
    on: On,
    analysis: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let compiled = on != On::Interp;
    let backend = if on == On::Cuda { "cuda" } else { "cpu" };
    let n = ranks[0] * ranks[1];
    let grid = [ranks[0] as i64, ranks[1] as i64];
    let halos = if analysis {
        Halos::Analysis(grid)
    } else {
        Halos::Exchanges(grid)
    };
    let s0 = random_smooth(cfg, seed);
    if cfg.nx < 2 * ranks[0] || cfg.ny < 2 * ranks[1] {
        return Err(format!(
            "a grid of {} x {} over {} x {} ranks: every block needs at least 2 x 2 cells (the halo's width)",
            cfg.nx, cfg.ny, ranks[0], ranks[1]
        )
        .into());
    }
    let (parts, per_step) = if compiled {
        let Some((r, size)) = sdflow::codegen::mpi::launched() else {
            return Err(format!(
                "--ranks {}x{} --backend {backend} runs on {n} MPI ranks: start it with `mpirun -n {n} dycore --ranks {}x{} …`",
                ranks[0], ranks[1], ranks[0], ranks[1]
            )
            .into());
        };
        if size != n {
            return Err(format!(
                "--ranks {}x{} is {n} ranks, but mpirun started {size}",
                ranks[0], ranks[1]
            )
            .into());
        }
        let (local, oi, oj) = block(cfg, ranks, r);
        let dycore = Dycore::with(&local, halos)?;
        let t = Instant::now();
        let mut prog = match on {
            On::Cuda => {
                let mut sdfg = dycore.sdfg.clone();
                sdflow::transforms::Pipeline::gpu()
                    .run(&mut sdfg)
                    .map_err(|e| format!("optimizer: {e}"))?;
                let device = from_env().map_err(|e| format!("--backend cuda: {e}"))?;
                Rank::Gpu(Box::new(CudaBackend::default().build(&sdfg, &device)?))
            }
            _ => Rank::Cpu(Box::new(dycore.compile(&CpuBackend::default())?)),
        };
        let (mpi, origin) = match &prog {
            Rank::Cpu(p) => (p.mpi(), p.origin),
            Rank::Gpu(p) => (p.mpi(), p.origin),
        };
        let mpi = mpi.ok_or("the compiled time step does not exchange halos")?;
        let built = t.elapsed();
        let mut s = cut(cfg, &s0, &local, oi, oj);
        // A rank that fails stops every rank, with its message.
        let stop = |e: &dyn std::fmt::Display| -> ! { mpi.abort_with(r, e) };
        mpi.barrier().unwrap_or_else(|e| stop(&e));
        let t = Instant::now();
        match &mut prog {
            Rank::Cpu(p) => dycore.run_compiled(p, &mut s, steps),
            Rank::Gpu(p) => dycore.run_gpu(p, &mut s, steps).map(|_| ()),
        }
        .unwrap_or_else(|e| stop(&e));
        let per_step = t.elapsed().as_secs_f64() / steps.max(1) as f64;
        let parts = mpi
            .gather(&interior(&local, &s), 0)
            .unwrap_or_else(|e| stop(&e));
        let Some(parts) = parts else {
            return Ok(());
        };
        println!(
            "rank 0 of {n}: block {} x {} x {}; time step optimized and compiled in {:.0} ms ({})",
            local.nx,
            local.ny,
            local.nz,
            built.as_secs_f64() * 1e3,
            match origin {
                Origin::Built => "built",
                Origin::Cached => "loaded from the build cache",
            }
        );
        (parts, per_step)
    } else {
        if !cfg.nx.is_multiple_of(ranks[0]) || !cfg.ny.is_multiple_of(ranks[1]) {
            return Err(format!(
                "--backend interp runs one program on every simulated rank: {} x {} does not split evenly over {} x {} ranks",
                cfg.nx, cfg.ny, ranks[0], ranks[1]
            )
            .into());
        }
        let (local, _, _) = block(cfg, ranks, 0);
        let dycore = Dycore::with(&local, halos)?;
        let mut states = Vec::with_capacity(n);
        let mut bindings: Vec<Bindings> = Vec::with_capacity(n);
        for r in 0..n {
            let (_, oi, oj) = block(cfg, ranks, r);
            let s = cut(cfg, &s0, &local, oi, oj);
            bindings.push(dycore.bindings(&s, steps));
            states.push(s);
        }
        let t = Instant::now();
        run_ranks(&dycore.sdfg, &mut bindings)?;
        let per_step = t.elapsed().as_secs_f64() / steps.max(1) as f64;
        let mut parts = Vec::new();
        for (b, s) in bindings.iter().zip(states.iter_mut()) {
            dycore.store(b, s);
            parts.extend(interior(&local, s));
        }
        (parts, per_step)
    };
    let s = assemble(cfg, ranks, &parts);
    println!(
        "grid {} x {} x {} on {} x {} ranks ({}), {steps} steps, time per step {:.3} ms",
        cfg.nx,
        cfg.ny,
        cfg.nz,
        ranks[0],
        ranks[1],
        if on == On::Cuda {
            "MPI processes, CUDA"
        } else if compiled {
            "MPI processes, compiled C/OpenMP"
        } else {
            "simulated, the reference interpreter"
        },
        per_step * 1e3
    );
    // The same steps on one rank: compiled (or interpreted), and the plain loops.
    let one = Dycore::new(cfg)?;
    let mut s1 = s0.clone();
    if compiled {
        let prog = one.compile(&CpuBackend::default())?;
        one.run_compiled(&prog, &mut s1, steps)?;
    } else {
        one.run_interpreted(&mut s1, steps)?;
    }
    let mut r = s0.clone();
    for _ in 0..steps {
        reference::step(cfg, &mut r);
    }
    let rel = |a: f64, b: f64| ((a - b) / b).abs();
    println!(
        "mass drift {:.3e}, tracer mass drift {:.3e} (relative)",
        rel(
            reference::total_mass(cfg, &s),
            reference::total_mass(cfg, &s0)
        ),
        rel(
            reference::total_tracer_mass(cfg, &s),
            reference::total_tracer_mass(cfg, &s0)
        )
    );
    let diff = |a: &[f64], b: &[f64]| {
        let d: Vec<f64> = a.iter().zip(b).map(|(x, y)| x - y).collect();
        interior_max_abs(cfg, &d) / interior_max_abs(cfg, b).max(f64::MIN_POSITIVE)
    };
    println!(
        "largest difference to the plain-loop reference (relative to max |field|): h {:.2e}, u {:.2e}, v {:.2e}, qh {:.2e}",
        diff(&s.h, &r.h),
        diff(&s.u, &r.u),
        diff(&s.v, &r.v),
        diff(&s.qh, &r.qh)
    );
    let (against_one, against_loops) = (differing(cfg, &s, &s1), differing(cfg, &s, &r));
    println!(
        "bit for bit: {} values of {} differ from one rank, {} from the plain loops",
        against_one,
        4 * cfg.nx * cfg.ny * cfg.nz,
        against_loops
    );
    if against_one != 0 {
        return Err(
            format!("the ranks' result differs from one rank's in {against_one} values").into(),
        );
    }
    Ok(())
}
