//! The flagship example: a multi-layer shallow-water dynamical core whose whole time step
//! (three RK stages, hyperdiffusion, implicit vertical diffusion, damping) is one SDFG.
//!
//! ```sh
//! cargo run --release --example dycore                        # 32x32x4, 100 steps, compiled
//! cargo run --release --example dycore -- --size 128x128x8 --steps 20
//! cargo run --release --example dycore -- --backend interp --steps 3
//! cargo run --release --example dycore -- --emit sdfg -o examples/dycore.sdfg.json
//! cargo run --release --example dycore -- --plot target/dycore-plots  # pictures of the run
//! mpirun -n 4 target/release/examples/dycore --ranks 2x2     # 4 MPI ranks, halo exchanges
//! SDFLOW_CUDA_DEVICE=emulated mpirun -n 4 target/release/examples/dycore --ranks 2x2 --backend cuda
//! cargo run --release --example dycore -- --ranks 2x2 --backend interp --steps 2  # simulated
//! ```
//!
//! It builds the program, optimizes and compiles it (C/OpenMP, through the build cache)
//! or runs it on the reference interpreter, and prints the grid, the steps, the relative
//! drift of total mass and tracer mass, the time per step and the largest difference to
//! the plain-loop reference. It writes the time step's drawing to `target/dycore.dot`
//! (and `target/dycore.svg` when Graphviz is installed).

mod program;
mod ranks;
mod reference;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, ValueEnum};

use program::Dycore;
use reference::{
    Config, HALO, State, interior_max_abs, random_smooth, total_mass, total_tracer_mass,
};
use sdflow::codegen::cuda::device::from_env;
use sdflow::codegen::cuda::exec::CudaBackend;
use sdflow::codegen::{CpuBackend, Origin};

#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum Backend {
    /// Optimized, compiled C/OpenMP.
    Cpu,
    /// Optimized with the GPU pipeline, CUDA compiled by NVRTC, on GPU 0.
    Cuda,
    /// The reference interpreter.
    Interp,
}

#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum Emit {
    /// The flattened time step in the JSON format (`docs/format.md`).
    Sdfg,
    /// The flattened time step as Graphviz DOT.
    Dot,
}

/// Multi-layer shallow-water dynamical core, one SDFG per time step.
#[derive(Parser)]
#[command(name = "dycore")]
struct Args {
    /// Interior grid size: `NXxNYxNZ` or `NXxNY` (4 layers) or `N` (N x N x 4).
    #[arg(long, default_value = "32x32x4", value_parser = parse_size)]
    size: (usize, usize, usize),
    /// Time steps to run.
    #[arg(long, default_value_t = 100)]
    steps: usize,
    /// Where to run: compiled C/OpenMP, CUDA on GPU 0, or the reference interpreter
    /// (slow: about a second per step at the default size).
    #[arg(long, value_enum, default_value = "cpu")]
    backend: Backend,
    /// Turn the (static) hyperdiffusion off.
    #[arg(long)]
    no_hyperdiffusion: bool,
    /// Turn the (runtime) Rayleigh damping off.
    #[arg(long)]
    no_damping: bool,
    /// Seed of the initial condition (a smooth random flow).
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Print the flattened program instead of running it.
    #[arg(long)]
    emit: Option<Emit>,
    /// With --emit: write to this file instead of standard output.
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Where to write the drawing of the time step (DOT; SVG beside it when Graphviz is
    /// installed).
    #[arg(long, default_value = "target/dycore.dot")]
    dot: PathBuf,
    /// Write pictures of the run into this folder: the surface height and the tracer of
    /// the top layer at the end (PNG), and the relative drift of the total mass and
    /// tracer mass over the run. The steps then run in up to 50 chunks (to sample the
    /// drift), so the time per step includes a call per chunk.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Run on `PXxPY` ranks, each on its block with halo exchanges between them: MPI
    /// processes with `--backend cpu` or `cuda` (start with `mpirun -n PX*PY`), simulated ranks
    /// with `--backend interp`. Rank 0 puts the result together and compares it bit for
    /// bit with one rank (`docs/distributed.md`).
    #[arg(long, value_parser = parse_ranks)]
    ranks: Option<[usize; 2]>,
    /// With --ranks: no halo updates in the program, the exchanges where the halo
    /// analysis finds them needed instead of where the program updates its halos.
    #[arg(long)]
    halo_analysis: bool,
}

fn parse_ranks(s: &str) -> Result<[usize; 2], String> {
    let parts: Vec<Option<usize>> = s.split('x').map(|p| p.trim().parse().ok()).collect();
    match parts.as_slice() {
        [Some(a), Some(b)] if *a >= 1 && *b >= 1 => Ok([*a, *b]),
        [Some(a)] if *a >= 1 => Ok([*a, 1]),
        _ => Err(format!("ranks '{s}': expected PXxPY (2x2) or a count (4)")),
    }
}

fn parse_size(s: &str) -> Result<(usize, usize, usize), String> {
    let parts: Vec<&str> = s.split('x').collect();
    let n = |p: &str| {
        p.trim()
            .parse::<usize>()
            .map_err(|_| format!("'{p}' in size '{s}' is not a positive integer"))
    };
    let (nx, ny, nz) = match parts.as_slice() {
        [a] => (n(a)?, n(a)?, 4),
        [a, b] => (n(a)?, n(b)?, 4),
        [a, b, c] => (n(a)?, n(b)?, n(c)?),
        _ => return Err(format!("size '{s}': expected N, NXxNY or NXxNYxNZ")),
    };
    if nx < 2 || ny < 2 || nz < 1 {
        return Err(format!(
            "size '{s}': the periodic halo needs NX, NY >= 2 and NZ >= 1"
        ));
    }
    Ok((nx, ny, nz))
}

/// The default configuration at another size: the default stratification for 4 layers,
/// else densities 1025, 1026, … and 4000 m split evenly.
fn config(args: &Args) -> Config {
    let (nx, ny, nz) = args.size;
    let mut cfg = Config {
        nx,
        ny,
        hyperdiffusion: !args.no_hyperdiffusion,
        damping: !args.no_damping,
        ..Config::default()
    };
    if nz != cfg.nz {
        cfg.nz = nz;
        cfg.rho = (0..nz).map(|k| 1025.0 + k as f64).collect();
        cfg.depth = vec![4000.0 / nz as f64; nz];
        cfg.damping_layers = cfg.damping_layers.min(nz);
    }
    cfg
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let cfg = config(args);
    if let Some(r) = args.ranks
        && args.emit.is_none()
    {
        let on = match args.backend {
            Backend::Cpu => ranks::On::Cpu,
            Backend::Interp => ranks::On::Interp,
            Backend::Cuda => ranks::On::Cuda,
        };
        return ranks::run(&cfg, r, args.steps, args.seed, on, args.halo_analysis);
    }
    let t0 = Instant::now();
    // With --emit and --ranks: rank 0's program.
    let dycore = match args.ranks {
        Some(r) => {
            let (local, _, _) = ranks::block(&cfg, r, 0);
            let grid = [r[0] as i64, r[1] as i64];
            Dycore::with(
                &local,
                if args.halo_analysis {
                    program::Halos::Analysis(grid)
                } else {
                    program::Halos::Exchanges(grid)
                },
            )?
        }
        None => Dycore::new(&cfg)?,
    };
    let build = t0.elapsed();
    if let Some(emit) = args.emit {
        let text = match emit {
            Emit::Sdfg => sdflow::ir::format::to_json(&dycore.sdfg),
            Emit::Dot => sdflow::ir::dot::to_dot(&dycore.sdfg),
        };
        match &args.output {
            Some(path) => std::fs::write(path, text)
                .map_err(|e| format!("cannot write '{}': {e}", path.display()))?,
            None => print!("{text}"),
        }
        return Ok(());
    }

    let stats = dycore.sdfg.stats();
    println!(
        "grid {} x {} x {} (+ halo 2), dx = {} m, dt = {} s, hyperdiffusion {}, damping {}",
        cfg.nx,
        cfg.ny,
        cfg.nz,
        cfg.dx,
        cfg.dt,
        on(cfg.hyperdiffusion),
        on(cfg.damping)
    );
    println!(
        "time step: one SDFG, {} states, {} maps, {} tasklets, {} transients (built in {:.1} ms)",
        stats.states,
        stats.maps,
        stats.tasklets,
        stats.transients,
        build.as_secs_f64() * 1e3
    );

    write_drawing(&dycore, &args.dot)?;

    let s0 = random_smooth(&cfg, args.seed);
    let mut s = s0.clone();
    // The steps in one call, or in up to 50 chunks when the drift is plotted.
    let chunk = match &args.plot {
        Some(_) => args.steps.div_ceil(50).max(1),
        None => args.steps.max(1),
    };
    let mut drift = Drift::default();
    let mut record = |s: &State, step: usize| {
        drift.record(&cfg, &s0, s, step);
    };
    record(&s, 0);
    let per_step = match args.backend {
        Backend::Interp => {
            let t = Instant::now();
            let mut done = 0;
            while done < args.steps {
                let n = chunk.min(args.steps - done);
                dycore.run_interpreted(&mut s, n)?;
                done += n;
                record(&s, done);
            }
            t.elapsed().as_secs_f64() / args.steps.max(1) as f64
        }
        Backend::Cpu => {
            let t = Instant::now();
            let prog = dycore.compile(&CpuBackend::default())?;
            println!(
                "optimized and compiled in {:.0} ms ({}: {})",
                t.elapsed().as_secs_f64() * 1e3,
                match prog.origin {
                    Origin::Built => "built",
                    Origin::Cached => "loaded from the build cache",
                },
                prog.library.display()
            );
            let t = Instant::now();
            let mut done = 0;
            while done < args.steps {
                let n = chunk.min(args.steps - done);
                dycore.run_compiled(&prog, &mut s, n)?;
                done += n;
                record(&s, done);
            }
            t.elapsed().as_secs_f64() / args.steps.max(1) as f64
        }
        Backend::Cuda => {
            let t = Instant::now();
            let mut sdfg = dycore.sdfg.clone();
            sdflow::transforms::Pipeline::gpu()
                .run(&mut sdfg)
                .map_err(|e| format!("optimizer: {e}"))?;
            let device = from_env().map_err(|e| format!("--backend cuda: {e}"))?;
            let name = device.lock().name();
            let mut prog = CudaBackend::default().build(&sdfg, &device)?;
            println!(
                "optimized and compiled for {name} in {:.0} ms ({})",
                t.elapsed().as_secs_f64() * 1e3,
                match prog.origin {
                    Origin::Built => "built",
                    Origin::Cached => "loaded from the build cache",
                }
            );
            // The state goes to the device once per chunk; every step is one call,
            // enqueued without waiting; the state comes back at the end of the chunk.
            let (mut enqueue, mut total) = (0.0, 0.0);
            let mut done = 0;
            while done < args.steps {
                let n = chunk.min(args.steps - done);
                let times = dycore.run_gpu(&mut prog, &mut s, n)?;
                enqueue += times.enqueue.as_secs_f64();
                total += times.total.as_secs_f64();
                done += n;
                record(&s, done);
            }
            let n = args.steps.max(1) as f64;
            println!("host time to enqueue a step {:.1} us", enqueue * 1e6 / n);
            total / n
        }
    };
    let where_ = match args.backend {
        Backend::Interp => "the reference interpreter",
        Backend::Cpu => "compiled C/OpenMP",
        Backend::Cuda => "the GPU (CUDA)",
    };

    let mut r = s0.clone();
    for _ in 0..args.steps {
        reference::step(&cfg, &mut r);
    }
    let rel = |a: f64, b: f64| ((a - b) / b).abs();
    let diff = |a: &[f64], b: &[f64]| {
        let d: Vec<f64> = a.iter().zip(b).map(|(x, y)| x - y).collect();
        interior_max_abs(&cfg, &d) / interior_max_abs(&cfg, b).max(f64::MIN_POSITIVE)
    };
    println!("steps {} on {where_}", args.steps);
    println!(
        "mass drift {:.3e}, tracer mass drift {:.3e} (relative)",
        rel(total_mass(&cfg, &s), total_mass(&cfg, &s0)),
        rel(total_tracer_mass(&cfg, &s), total_tracer_mass(&cfg, &s0))
    );
    println!("time per step {:.3} ms", per_step * 1e3);
    if let Some(dir) = &args.plot {
        write_plots(&cfg, &s, &drift, dir)?;
    }
    println!(
        "largest difference to the plain-loop reference (relative to max |field|): h {:.2e}, u {:.2e}, v {:.2e}, qh {:.2e}",
        diff(&s.h, &r.h),
        diff(&s.u, &r.u),
        diff(&s.v, &r.v),
        diff(&s.qh, &r.qh)
    );
    Ok(())
}

fn on(b: bool) -> &'static str {
    if b { "on" } else { "off" }
}

/// Writes the DOT drawing, and the SVG beside it when Graphviz's `dot` is installed.
fn write_drawing(dycore: &Dycore, path: &PathBuf) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create '{}': {e}", dir.display()))?;
    }
    // At the level of detail that stays readable (the control flow, for the time step).
    let text = sdflow::ir::dot::to_dot_with(&dycore.sdfg, &Default::default())?;
    std::fs::write(path, &text).map_err(|e| format!("cannot write '{}': {e}", path.display()))?;
    match sdflow::cli::render_svg(&text) {
        Ok(svg) => {
            let svg_path = path.with_extension("svg");
            std::fs::write(&svg_path, svg)
                .map_err(|e| format!("cannot write '{}': {e}", svg_path.display()))?;
            println!("drawing: {} and {}", path.display(), svg_path.display());
        }
        Err(e) => println!("drawing: {} (no SVG: {e})", path.display()),
    }
    Ok(())
}

/// The relative drift of the total mass and tracer mass, sampled over the run.
#[derive(Default)]
struct Drift {
    mass: Vec<(f64, f64)>,
    tracer: Vec<(f64, f64)>,
}

impl Drift {
    fn record(&mut self, cfg: &Config, s0: &State, s: &State, step: usize) {
        let rel = |a: f64, b: f64| (a - b) / b;
        let t = step as f64;
        self.mass
            .push((t, rel(total_mass(cfg, s), total_mass(cfg, s0))));
        self.tracer.push((
            t,
            rel(total_tracer_mass(cfg, s), total_tracer_mass(cfg, s0)),
        ));
    }
}

/// The pictures of `--plot`: the surface height (the sum of the layers' thicknesses,
/// less its mean) and the tracer's mixing ratio `qh / h` in the top layer, over the
/// interior at the end of the run, and the drift of the conserved totals over the run.
fn write_plots(
    cfg: &Config,
    s: &State,
    drift: &Drift,
    dir: &PathBuf,
) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create '{}': {e}", dir.display()))?;
    let (nx, ny) = (cfg.nx, cfg.ny);
    let mut eta = vec![0.0; nx * ny];
    let mut q = vec![0.0; nx * ny];
    for j in 0..ny {
        for i in 0..nx {
            let at = |k: usize| cfg.idx(k, HALO + j, HALO + i);
            eta[j * nx + i] = (0..cfg.nz).map(|k| s.h[at(k)]).sum();
            q[j * nx + i] = s.qh[at(0)] / s.h[at(0)];
        }
    }
    let mean = eta.iter().sum::<f64>() / eta.len() as f64;
    eta.iter_mut().for_each(|e| *e -= mean);
    let surface = dir.join("surface_height.png");
    sdflow::plot::heatmap(
        &eta,
        nx,
        ny,
        &format!("surface height - mean (m), {nx} x {ny}, end of run"),
        &surface,
    )?;
    let tracer = dir.join("tracer_top_layer.png");
    sdflow::plot::heatmap(
        &q,
        nx,
        ny,
        "tracer mixing ratio qh / h, top layer, end of run",
        &tracer,
    )?;
    let conservation = dir.join("conservation.png");
    sdflow::plot::lines(
        "relative drift of the conserved totals",
        "step",
        "|drift| (relative)",
        &[
            ("mass".to_string(), drift.mass.clone()),
            ("tracer mass".to_string(), drift.tracer.clone()),
        ],
        true,
        &conservation,
    )?;
    println!(
        "pictures: {}, {}, {}{}",
        surface.display(),
        tracer.display(),
        conservation.display(),
        if sdflow::plot::has_text() {
            ""
        } else {
            " (without text: no font found; set SDFLOW_FONT to a .ttf file)"
        }
    );
    Ok(())
}
