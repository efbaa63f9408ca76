//! An ICON-style granule: a model component that compiles its programs once at
//! initialization — each with its own backend options from `granule.toml`, static
//! domains, precompiled flag variants and bound metric fields — and then runs time steps
//! calling each with only the arguments that change.
//!
//! ```sh
//! cargo run --release --example granule                  # 64 x 64 x 8 and 4096 cells, 50 steps
//! cargo run --release --example granule -- --steps 200 --check
//! SDFLOW_CONFIG=my.toml cargo run --release --example granule
//! cargo run --release --example granule -- --emit-sdfg target/granule   # the programs as JSON
//! ```
//!
//! A second start compiles nothing: every variant comes from the persistent build cache.

mod programs;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use sdflow::codegen::{Args as CallArgs, Backend, Origin};
use sdflow::ir::interp::{self, Bindings, HostArray};
use sdflow::ir::{Value, format};
use sdflow::orchestration::component::{Component, ProgramSpec, Programs};
use sdflow::orchestration::config::Config;

/// An ICON-style granule: several programs compiled at initialization, then time steps.
#[derive(Parser)]
#[command(name = "granule")]
struct Args {
    /// Structured grid interior `NX` = `NY`.
    #[arg(long, default_value_t = 64)]
    n: usize,
    /// Vertical levels.
    #[arg(long, default_value_t = 8)]
    levels: usize,
    /// Cells of the unstructured grid (even).
    #[arg(long, default_value_t = 4096)]
    cells: usize,
    /// Time steps.
    #[arg(long, default_value_t = 50)]
    steps: usize,
    /// The configuration file (`SDFLOW_CONFIG` overrides it).
    #[arg(long, default_value = "examples/granule/granule.toml")]
    config: PathBuf,
    /// Also run the unspecialized programs on the interpreter and compare, bit for bit.
    #[arg(long)]
    check: bool,
    /// Write the two programs as JSON into this directory and stop.
    #[arg(long)]
    emit_sdfg: Option<PathBuf>,
}

/// The granule's state: the fields it advances.
struct State {
    q: HostArray,
    q_new: HostArray,
    t: HostArray,
    t_new: HostArray,
}

fn build(args: &Args) -> Result<Programs, String> {
    let config = Config::locate(Some(&args.config)).map_err(|e| e.to_string())?;
    let (nx, nk, nc) = (args.n as i64, args.levels as i64, args.cells as i64);
    let shape3 = [args.n + 2, args.n + 2, args.levels];
    let (e2c, c2e) = programs::tables(args.cells);
    let component = Component::new(Backend::Cpu)
        .config(config)
        .with_program(
            ProgramSpec::new(programs::advect_tracer())
                .static_value("NX", nx)
                .static_value("NY", nx)
                .static_value("NK", nk)
                .variants("positive", [0i64, 1])
                .bind_array("rarea", HostArray::F64(programs::metric(&shape3, 1.0)))
                .bind_float("cu", 0.4)
                .bind_float("cv", 0.3),
        )
        .with_program(
            ProgramSpec::new(programs::diffuse_cells())
                .static_value("NC", nc)
                .static_value("NE", nc)
                .static_value("NK", nk)
                .static_value("hstart", 0i64)
                .static_value("hend", nc)
                .variants("limited_area", [0i64, 1])
                .bind_array("e2c", e2c)
                .bind_array("c2e", c2e)
                .bind_array(
                    "inv_len",
                    HostArray::F64(programs::metric(&[args.cells, args.levels], 1.0)),
                )
                .bind_array(
                    "area_inv",
                    HostArray::F64(programs::metric(&[args.cells, args.levels], 0.5)),
                )
                .bind_float("nu", 0.1),
        );
    for (name, r) in component.resolve().map_err(|e| e.to_string())? {
        print!("{name}: {}", r.to_text());
    }
    component.build().map_err(|e| e.to_string())
}

/// One time step: advection with `dt`, diffusion; the flags chosen per step.
fn step(
    p: &Programs,
    s: &mut State,
    dt: f64,
    positive: i64,
    limited_area: i64,
    t_bdy: &mut HostArray,
) -> Result<(), String> {
    p.program("advect_tracer")
        .and_then(|c| {
            c.call(
                CallArgs::new()
                    .host("q", &mut s.q)
                    .host("q_new", &mut s.q_new)
                    .float("dt", dt)
                    .int("positive", positive),
            )
        })
        .map_err(|e| e.to_string())?;
    p.program("diffuse_cells")
        .and_then(|c| {
            c.call(
                CallArgs::new()
                    .host("t", &mut s.t)
                    .host("t_new", &mut s.t_new)
                    .host("t_bdy", t_bdy)
                    .int("limited_area", limited_area),
            )
        })
        .map_err(|e| e.to_string())?;
    std::mem::swap(&mut s.q, &mut s.q_new);
    std::mem::swap(&mut s.t, &mut s.t_new);
    Ok(())
}

/// The same step with the unspecialized programs on the interpreter.
fn reference_step(
    args: &Args,
    s: &mut State,
    dt: f64,
    positive: i64,
    limited_area: i64,
    t_bdy: &HostArray,
) -> Result<(), String> {
    let shape3 = [args.n + 2, args.n + 2, args.levels];
    let mut b = Bindings::default();
    b.arrays.insert("q".into(), s.q.clone());
    b.arrays.insert("q_new".into(), s.q_new.clone());
    b.arrays.insert(
        "rarea".into(),
        HostArray::F64(programs::metric(&shape3, 1.0)),
    );
    for (k, v) in [("NX", args.n), ("NY", args.n), ("NK", args.levels)] {
        b.symbols.insert(k.into(), Value::I64(v as i64));
    }
    b.symbols.insert("positive".into(), Value::I64(positive));
    for (k, v) in [("dt", dt), ("cu", 0.4), ("cv", 0.3)] {
        b.symbols.insert(k.into(), Value::F64(v));
    }
    interp::run(&programs::advect_tracer(), &mut b).map_err(|e| e.to_string())?;
    s.q_new = b.arrays.remove("q_new").expect("an argument");
    let (e2c, c2e) = programs::tables(args.cells);
    let mut b = Bindings::default();
    b.arrays.insert("t".into(), s.t.clone());
    b.arrays.insert("t_new".into(), s.t_new.clone());
    b.arrays.insert("t_bdy".into(), t_bdy.clone());
    b.arrays.insert("e2c".into(), e2c);
    b.arrays.insert("c2e".into(), c2e);
    b.arrays.insert(
        "inv_len".into(),
        HostArray::F64(programs::metric(&[args.cells, args.levels], 1.0)),
    );
    b.arrays.insert(
        "area_inv".into(),
        HostArray::F64(programs::metric(&[args.cells, args.levels], 0.5)),
    );
    for (k, v) in [
        ("NC", args.cells),
        ("NE", args.cells),
        ("NK", args.levels),
        ("hstart", 0),
        ("hend", args.cells),
    ] {
        b.symbols.insert(k.into(), Value::I64(v as i64));
    }
    b.symbols
        .insert("limited_area".into(), Value::I64(limited_area));
    b.symbols.insert("nu".into(), Value::F64(0.1));
    interp::run(&programs::diffuse_cells(), &mut b).map_err(|e| e.to_string())?;
    s.t_new = b.arrays.remove("t_new").expect("an argument");
    std::mem::swap(&mut s.q, &mut s.q_new);
    std::mem::swap(&mut s.t, &mut s.t_new);
    Ok(())
}

fn sum(a: &HostArray) -> f64 {
    match a {
        HostArray::F64(x) => x.sum(),
        _ => 0.0,
    }
}

fn run(args: &Args) -> Result<(), String> {
    if let Some(dir) = &args.emit_sdfg {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for s in [programs::advect_tracer(), programs::diffuse_cells()] {
            let p = dir.join(format!("{}.sdfg.json", s.name));
            std::fs::write(&p, format::to_json(&s)).map_err(|e| format!("{}: {e}", p.display()))?;
            println!("wrote {}", p.display());
        }
        return Ok(());
    }
    if args.cells < 2 || !args.cells.is_multiple_of(2) || args.n == 0 || args.levels == 0 {
        return Err("--cells must be even and at least 2; --n and --levels at least 1".into());
    }
    let t0 = Instant::now();
    let programs = build(args)?;
    let built = programs
        .records
        .iter()
        .filter(|r| r.origin == Some(Origin::Built))
        .count();
    println!(
        "initialization: {} program variants in {:.2} s ({built} compiled, {} from the cache)",
        programs.records.len(),
        t0.elapsed().as_secs_f64(),
        programs.records.len() - built
    );
    let shape3 = [args.n + 2, args.n + 2, args.levels];
    let shape2 = [args.cells, args.levels];
    let fresh = || State {
        q: HostArray::F64(programs::field(&shape3, 0.0)),
        q_new: HostArray::F64(programs::field(&shape3, 0.0)),
        t: HostArray::F64(programs::field(&shape2, 1.0)),
        t_new: HostArray::F64(programs::field(&shape2, 1.0)),
    };
    let mut t_bdy = HostArray::F64(programs::field(&shape2, 2.0));
    let mut s = fresh();
    let mut reference = args.check.then(fresh);
    let t0 = Instant::now();
    let mut worst = 0u64;
    for n in 0..args.steps {
        let dt = 0.5 + 0.1 * ((n % 5) as f64);
        let positive = (n % 2) as i64;
        let limited_area = ((n / 3) % 2) as i64;
        step(&programs, &mut s, dt, positive, limited_area, &mut t_bdy)?;
        if let Some(r) = &mut reference {
            reference_step(args, r, dt, positive, limited_area, &t_bdy)?;
            for (a, b) in [(&s.q, &r.q), (&s.t, &r.t)] {
                if a.bits() != b.bits() {
                    worst += 1;
                }
            }
        }
    }
    let per_step = t0.elapsed().as_secs_f64() / args.steps.max(1) as f64;
    println!(
        "{} steps, {:.3} ms per step (two calls); sum(q) = {:.6e}, sum(t) = {:.6e}",
        args.steps,
        per_step * 1e3,
        sum(&s.q),
        sum(&s.t)
    );
    if args.check {
        println!("fields differing from the unspecialized programs on the interpreter: {worst}");
        if worst > 0 {
            return Err("the compiled variants differ from the reference".into());
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    match run(&Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
