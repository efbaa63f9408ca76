//! The dynamical core written with the stencil DSL (`examples/dycore/program.rs`), one
//! flattened SDFG per time step, run on the reference interpreter: it conserves mass and
//! tracer mass, agrees with the independent plain-loop reference, keeps a lake at rest,
//! carries gravity waves at sqrt(g H), honours its static and runtime flags, and the
//! committed `examples/dycore.sdfg.json` is the current flattened program.
//!
//! On several ranks (`examples/dycore/ranks.rs`) its periodic halo updates become halo
//! exchanges, and the time step on ranks is the time step on one rank, bit for bit — on
//! simulated ranks of the interpreter, and on MPI ranks through `mpirun -n 4 sdflow run …
//! --backend cpu` (the generic path: the rank program in the JSON format, each rank's
//! state in an `.npz` archive).

#[path = "../examples/dycore/program.rs"]
mod program;
#[path = "../examples/dycore/ranks.rs"]
mod ranks;
#[path = "../examples/dycore/reference.rs"]
mod reference;

mod common;

use std::collections::{BTreeMap, BTreeSet};

use program::{Dycore, DycoreError};
use reference::{
    Config, State, gaussian_bump, interior_max_abs, lake_at_rest, random_smooth, step, total_mass,
    total_tracer_mass, wave_speed,
};
use sdflow::ir::interp::{Bindings, HostArray};
use sdflow::ir::{Block, LibraryNode, Node, Value, format};

fn rel(a: f64, b: f64) -> f64 {
    ((a - b) / b).abs()
}

/// Largest interior difference relative to the largest interior magnitude of `b`.
fn rel_diff(cfg: &Config, a: &[f64], b: &[f64]) -> f64 {
    let d: Vec<f64> = a.iter().zip(b).map(|(x, y)| x - y).collect();
    interior_max_abs(cfg, &d) / interior_max_abs(cfg, b)
}

fn small() -> Config {
    Config {
        nx: 8,
        ny: 8,
        ..Config::default()
    }
}

fn reference_run(cfg: &Config, s: &mut State, steps: usize) {
    for _ in 0..steps {
        step(cfg, s);
    }
}

fn assert_agrees(cfg: &Config, dsl: &State, reference: &State, what: &str) {
    for (name, a, b) in [
        ("h", &dsl.h, &reference.h),
        ("u", &dsl.u, &reference.u),
        ("v", &dsl.v, &reference.v),
        ("qh", &dsl.qh, &reference.qh),
    ] {
        let d = rel_diff(cfg, a, b);
        assert!(d < 1e-12, "{what}: {name} differs by {d:e} (relative)");
    }
}

#[test]
fn agrees_with_the_plain_loop_reference_after_ten_steps() {
    // Non-square, with every term on: a transposed index or a wrong offset shows.
    let cfg = Config {
        nx: 12,
        ny: 10,
        ..Config::default()
    };
    let dycore = Dycore::new(&cfg).unwrap();
    let s0 = random_smooth(&cfg, 21);
    let mut dsl = s0.clone();
    dycore.run_interpreted(&mut dsl, 10).unwrap();
    let mut r = s0.clone();
    reference_run(&cfg, &mut r, 10);
    assert_agrees(&cfg, &dsl, &r, "all terms");
    // The flow moved: the comparison is not between two copies of the initial state.
    assert!(rel_diff(&cfg, &r.u, &s0.u) > 1e-3);
    assert!(rel_diff(&cfg, &r.qh, &s0.qh) > 1e-6);
}

#[test]
fn the_static_flag_builds_another_program_and_the_runtime_flag_does_not() {
    let base = small();
    let s0 = random_smooth(&base, 5);

    // Static: hyperdiffusion off is a different program (the static symbol's value).
    let bare = Config {
        hyperdiffusion: false,
        ..base.clone()
    };
    let without = Dycore::new(&bare).unwrap();
    assert_eq!(
        without.sdfg.symbols["hyperdiffusion"].value,
        Some(Value::I64(0))
    );
    let with = Dycore::new(&base).unwrap();
    assert_eq!(
        with.sdfg.symbols["hyperdiffusion"].value,
        Some(Value::I64(1))
    );
    let mut dsl = s0.clone();
    without.run_interpreted(&mut dsl, 3).unwrap();
    let mut r = s0.clone();
    reference_run(&bare, &mut r, 3);
    assert_agrees(&bare, &dsl, &r, "no hyperdiffusion");

    // Runtime: the same program with `damping = 0` matches the reference without damping.
    let undamped = Config {
        damping: false,
        ..base.clone()
    };
    let mut b = with.bindings(&s0, 3);
    b.symbols.insert("damping".into(), Value::I64(0));
    sdflow::ir::interp::run(&with.sdfg, &mut b).unwrap();
    let mut dsl = s0.clone();
    with.store(&b, &mut dsl);
    let mut r = s0.clone();
    reference_run(&undamped, &mut r, 3);
    assert_agrees(&undamped, &dsl, &r, "damping off at run time");
    let mut damped = s0.clone();
    reference_run(&base, &mut damped, 3);
    assert!(
        rel_diff(&base, &dsl.u, &damped.u) > 1e-10,
        "damping had no effect"
    );
}

#[test]
fn mass_and_tracer_mass_are_conserved_over_100_steps() {
    let cfg = small();
    assert!(cfg.hyperdiffusion && cfg.damping && cfg.kv > 0.0);
    let dycore = Dycore::new(&cfg).unwrap();
    let s0 = random_smooth(&cfg, 7);
    let mut s = s0.clone();
    dycore.run_interpreted(&mut s, 100).unwrap();
    let dm = rel(total_mass(&cfg, &s), total_mass(&cfg, &s0));
    let dq = rel(total_tracer_mass(&cfg, &s), total_tracer_mass(&cfg, &s0));
    eprintln!("100 steps: mass drift {dm:e}, tracer mass drift {dq:e}");
    assert!(dm < 1e-12, "mass drift {dm:e}");
    assert!(dq < 1e-12, "tracer mass drift {dq:e}");
    // Still a live, finite flow.
    let (u0, u1) = (interior_max_abs(&cfg, &s0.u), interior_max_abs(&cfg, &s.u));
    assert!(u1 > 0.1 * u0 && u1 < 10.0 * u0, "max |u| {u0} -> {u1}");
    assert!(s.h.iter().chain(&s.qh).all(|x| x.is_finite()));
}

#[test]
fn a_lake_at_rest_stays_at_rest() {
    let cfg = small();
    assert!(cfg.f0 != 0.0);
    let dycore = Dycore::new(&cfg).unwrap();
    let s0 = lake_at_rest(&cfg);
    let mut s = s0.clone();
    dycore.run_interpreted(&mut s, 50).unwrap();
    let (u, v) = (interior_max_abs(&cfg, &s.u), interior_max_abs(&cfg, &s.v));
    eprintln!("lake at rest after 50 steps: max |u| = {u:e}, max |v| = {v:e}");
    assert!(u < 1e-13 && v < 1e-13, "|u| = {u:e}, |v| = {v:e}");
    let d: Vec<f64> = s.h.iter().zip(&s0.h).map(|(a, b)| a - b).collect();
    assert!(interior_max_abs(&cfg, &d) < 1e-12 * 1500.0);
}

#[test]
fn a_linear_gravity_wave_travels_at_sqrt_g_h() {
    // The reference's channel, two rows wide (the smallest the periodic halo allows).
    let cfg = Config {
        ny: 2,
        ..Config::gravity_wave()
    };
    let dycore = Dycore::new(&cfg).unwrap();
    let lx = cfg.nx as f64 * cfg.dx;
    let mut s = gaussian_bump(&cfg, 0.01, 0.5 * lx, 8.0 * cfg.dx);
    let c = (cfg.g * cfg.depth[0]).sqrt();
    let speed = wave_speed(&cfg, &mut s, (100, 300), |s, n| {
        dycore.run_interpreted(s, n).unwrap()
    });
    eprintln!(
        "wave speed {speed} m/s, sqrt(gH) = {c} m/s, error {:e}",
        rel(speed, c)
    );
    assert!(rel(speed, c) < 0.02, "speed {speed} vs sqrt(gH) = {c}");
    assert!(interior_max_abs(&cfg, &s.v) < 1e-14);
}

/// Names of the states a block runs, with loop bodies repeated `trips(var)` times.
fn executed(
    sdfg: &sdflow::ir::Sdfg,
    block: &Block,
    trips: &dyn Fn(&str) -> usize,
    out: &mut Vec<String>,
) {
    match block {
        Block::State(id) => out.push(sdfg.states[id.index()].name.clone()),
        Block::Seq(blocks) => blocks.iter().for_each(|b| executed(sdfg, b, trips, out)),
        Block::Loop(l) => {
            for _ in 0..trips(&l.var) {
                executed(sdfg, &l.body, trips, out);
            }
        }
        // Both flags are on, so their `then` runs; the RK update's two branches (stage
        // state or, in the last stage, the state itself) hold the same calls.
        Block::If(i) => {
            executed(sdfg, &i.then, trips, out);
        }
        _ => {}
    }
}

#[test]
fn a_time_step_is_one_sdfg_of_many_stencil_calls() {
    let dycore = Dycore::new(&Config::default()).unwrap();
    let sdfg = &dycore.sdfg;
    assert_eq!(sdfg.validate(), Ok(()));
    let names: BTreeSet<&str> = sdfg.states.iter().map(|s| s.name.as_str()).collect();
    let kernels: Vec<&&str> = names.iter().filter(|n| !n.starts_with("halo_")).collect();
    assert!(
        kernels.len() >= 30,
        "{} distinct compute stencils: {kernels:?}",
        kernels.len()
    );
    for expected in [
        "mass_flux_x",
        "vorticity",
        "kinetic_energy",
        "interface_height",
        "montgomery",
        "tendency_u",
        "tracer_flux_x",
        "rk_update",
        "hyperdiffusion_qh",
        "thomas_forward_u",
        "thomas_backward",
        "damping",
        "halo_west",
        "halo_north",
    ] {
        assert!(names.contains(expected), "no state '{expected}'");
    }
    // One step: the stage loop's body three times, the rest once.
    let mut calls = Vec::new();
    let trips = |var: &str| if var == "stage" { 3 } else { 1 };
    executed(sdfg, &sdfg.body, &trips, &mut calls);
    let halos = calls.iter().filter(|n| n.starts_with("halo_")).count();
    eprintln!(
        "{} stencil calls per step ({halos} halo copies)",
        calls.len()
    );
    assert!(
        calls.len() - halos >= 30,
        "{} compute calls per step",
        calls.len() - halos
    );
    // The 39 halo updates of docs/dycore.md (10 per stage, 9 after the stages), four
    // copies each.
    assert_eq!(halos, 4 * (3 * 10 + 9));
}

#[test]
fn bad_configurations_are_errors() {
    let narrow = Config {
        ny: 1,
        ..Config::gravity_wave()
    };
    let Err(e) = Dycore::new(&narrow) else {
        panic!("a one-row grid was accepted")
    };
    assert!(matches!(e, DycoreError::Config(_)));
    assert_eq!(
        e.to_string(),
        "configuration: the grid is 256 x 1 x 1; the periodic halo of width 2 needs nx, ny >= 2 and nz >= 1"
    );
    let short = Config {
        rho: vec![1025.0],
        ..Config::default()
    };
    let Err(e) = Dycore::new(&short) else {
        panic!("rho of the wrong length was accepted")
    };
    assert_eq!(
        e.to_string(),
        "configuration: rho has 1 entries and damping_layers is 1, for nz = 4"
    );
}

#[test]
fn the_committed_sdfg_is_the_current_time_step() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/dycore.sdfg.json");
    let committed = std::fs::read_to_string(&path).unwrap();
    let current = format::to_json(&Dycore::new(&Config::default()).unwrap().sdfg);
    assert!(
        committed == current,
        "examples/dycore.sdfg.json is stale: regenerate it with \
         `cargo run --release --example dycore -- --emit sdfg -o examples/dycore.sdfg.json`"
    );
    // And the file is a program like any other: it loads, validates and runs.
    let loaded = format::load(&committed).unwrap();
    let dycore = Dycore::new(&Config::default()).unwrap();
    assert_eq!(loaded, dycore.sdfg);
}

#[test]
fn the_cli_runs_the_committed_time_step_on_npz_files() {
    // `sdflow run examples/dycore.sdfg.json --inputs in.npz --outputs out.npz -s …`: two
    // steps of a real state, compared with the reference.
    let cfg = Config::default();
    let dycore = Dycore::new(&cfg).unwrap();
    let s0 = random_smooth(&cfg, 9);
    let dir = std::env::temp_dir().join(format!("sdflow-dycore-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (inp, outp) = (dir.join("in.npz"), dir.join("out.npz"));
    let b = dycore.bindings(&s0, 2);
    sdflow::npz::write_npz(&inp, &b.arrays).unwrap();
    let symbols = b
        .symbols
        .iter()
        .map(|(k, v)| (k.clone(), v.to_string()))
        .collect();
    let opts = sdflow::cli::RunOptions {
        inputs: Some(inp),
        outputs: Some(outp.clone()),
        seed: 0,
        symbols,
        backend: sdflow::codegen::Backend::Interp,
        ranks: None,
    };
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/dycore.sdfg.json");
    let printed = sdflow::cli::run(&path, &opts).unwrap();
    assert!(printed.starts_with("h: f64[36, 36, 4] sum="), "{printed}");
    let back = sdflow::ir::interp::Bindings {
        arrays: sdflow::npz::read_npz(&outp).unwrap(),
        symbols: Default::default(),
    };
    let mut dsl = s0.clone();
    dycore.store(&back, &mut dsl);
    let mut r = s0.clone();
    reference_run(&cfg, &mut r, 2);
    assert_agrees(&cfg, &dsl, &r, "sdflow run on npz files");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn cpu_backend() -> sdflow::codegen::CpuBackend {
    sdflow::codegen::CpuBackend {
        cache: Some(sdflow::codegen::Cache::at(
            std::env::temp_dir().join("sdflow-test-cache"),
        )),
        ..Default::default()
    }
}

#[test]
fn compiled_matches_the_interpreter_after_ten_steps() {
    let cfg = Config {
        nx: 12,
        ny: 10,
        ..Config::default()
    };
    let dycore = Dycore::new(&cfg).unwrap();
    let prog = dycore.compile(&cpu_backend()).unwrap();
    let s0 = random_smooth(&cfg, 21);
    let (mut interp, mut compiled) = (s0.clone(), s0.clone());
    dycore.run_interpreted(&mut interp, 10).unwrap();
    dycore.run_compiled(&prog, &mut compiled, 10).unwrap();
    assert_agrees(&cfg, &compiled, &interp, "compiled vs interpreter");
    // In fact bit for bit: the generated C keeps the interpreter's arithmetic.
    assert!(
        compiled == interp,
        "compiled and interpreted states differ in some bit"
    );
}

#[test]
fn compiled_conserves_mass_and_keeps_a_lake_at_rest() {
    let cfg = Config::default();
    let dycore = Dycore::new(&cfg).unwrap();
    let prog = dycore.compile(&cpu_backend()).unwrap();
    let s0 = random_smooth(&cfg, 7);
    let mut s = s0.clone();
    dycore.run_compiled(&prog, &mut s, 100).unwrap();
    let dm = rel(total_mass(&cfg, &s), total_mass(&cfg, &s0));
    let dq = rel(total_tracer_mass(&cfg, &s), total_tracer_mass(&cfg, &s0));
    assert!(dm < 1e-12 && dq < 1e-12, "drift {dm:e} {dq:e}");
    let mut r = s0.clone();
    reference_run(&cfg, &mut r, 100);
    assert_agrees(&cfg, &s, &r, "compiled vs reference, 100 steps");
    let mut lake = lake_at_rest(&cfg);
    dycore.run_compiled(&prog, &mut lake, 100).unwrap();
    let (u, v) = (
        interior_max_abs(&cfg, &lake.u),
        interior_max_abs(&cfg, &lake.v),
    );
    assert!(u < 1e-13 && v < 1e-13, "|u| = {u:e}, |v| = {v:e}");
}

#[test]
fn the_gpu_path_keeps_the_state_on_the_device_and_replays_one_graph_per_step() {
    use sdflow::codegen::Origin;
    use sdflow::codegen::cuda::device::{DeviceHandle, RecordingDevice};
    use sdflow::codegen::cuda::emit::{CudaEmitOptions, emit_cuda};
    use sdflow::codegen::cuda::exec::GpuProgram;
    // A recording device runs no kernel: the state must come back as it went, through
    // the uploads and downloads of the arrays, and each step must be one graph replay.
    let cfg = small();
    let dycore = Dycore::new(&cfg).unwrap();
    let mut sdfg = dycore.sdfg.clone();
    sdflow::transforms::Pipeline::gpu().run(&mut sdfg).unwrap();
    let prog = emit_cuda(&sdfg, &CudaEmitOptions::default()).unwrap();
    let device = DeviceHandle::new(RecordingDevice::new((9, 0)));
    let mut gpu = GpuProgram::load(&sdfg, prog, b"image", &device, Origin::Built).unwrap();
    let s0 = random_smooth(&cfg, 5);
    let mut s = s0.clone();
    let times = dycore.run_gpu(&mut gpu, &mut s, 4).unwrap();
    assert!(times.enqueue <= times.total);
    for (a, b) in [(&s.h, &s0.h), (&s.u, &s0.u), (&s.v, &s0.v), (&s.qh, &s0.qh)] {
        assert_eq!(a, b);
    }
    let c = device.lock().counters();
    assert_eq!(c.replays, 4, "{c:?}");
    // Six arrays up, the float symbols once, the status record, six arrays down.
    assert_eq!(c.copies, 6 + 1 + 1 + 6, "{c:?}");
    // No step waits: the host waits for the last completion, reads the status record
    // and copies the six arrays back.
    assert_eq!(c.syncs, 1 + 1 + 6, "{c:?}");
}

/// The GPU path run for real on the emulated device (the generated CUDA compiled for the
/// host, every block and thread of each launch): the state stays on the device for ten
/// steps, each one graph replay, and comes back equal to the interpreter's bit for bit.
#[test]
fn the_gpu_path_on_the_emulated_device_equals_the_interpreter() {
    use sdflow::codegen::cuda::device::{DeviceHandle, EmulatedDevice};
    use sdflow::codegen::cuda::exec::CudaBackend;
    let cfg = Config {
        nx: 12,
        ny: 10,
        ..Config::default()
    };
    let dycore = Dycore::new(&cfg).unwrap();
    let mut sdfg = dycore.sdfg.clone();
    sdflow::transforms::Pipeline::gpu().run(&mut sdfg).unwrap();
    let device = DeviceHandle::new(EmulatedDevice::new());
    let mut gpu = CudaBackend::default().build(&sdfg, &device).unwrap();
    let s0 = random_smooth(&cfg, 21);
    let (mut interp, mut on_device) = (s0.clone(), s0.clone());
    dycore.run_interpreted(&mut interp, 10).unwrap();
    dycore.run_gpu(&mut gpu, &mut on_device, 10).unwrap();
    assert!(
        on_device == interp,
        "the emulated device's state differs from the interpreter's in some bit"
    );
    assert!(rel_diff(&cfg, &on_device.u, &s0.u) > 1e-3, "the flow moved");
    assert_eq!(device.lock().counters().replays, 10);
}

fn ranks_config(nx: usize, ny: usize) -> Config {
    Config {
        nx,
        ny,
        ..Config::default()
    }
}

#[test]
fn the_time_step_on_simulated_ranks_is_one_ranks_bits() {
    // `ranks::run` compares the put-together result with one rank's, bit for bit, and
    // fails where a value differs.
    for (nx, ny, r) in [(8, 6, [2, 2]), (8, 6, [1, 2]), (6, 4, [3, 1])] {
        ranks::run(&ranks_config(nx, ny), r, 2, 7, ranks::On::Interp, false)
            .unwrap_or_else(|e| panic!("{nx} x {ny} on {r:?}: {e}"));
    }
    // The same without the program's own halo updates: the halo analysis's exchanges.
    ranks::run(&ranks_config(8, 6), [2, 2], 2, 7, ranks::On::Interp, true)
        .unwrap_or_else(|e| panic!("with the halo analysis: {e}"));
    // The rank program exchanges where the one-rank program copies its periodic halo:
    // consecutive updates in one exchange.
    let exchanges = |d: &Dycore| {
        let mut out = Vec::new();
        for st in &d.sdfg.states {
            for n in st.graph.node_ids() {
                if let Node::Library(LibraryNode::HaloExchange(_)) = st.graph.node(n) {
                    let mut f: Vec<String> = st
                        .graph
                        .in_edges(n)
                        .into_iter()
                        .map(|e| st.graph.edge(e).memlet.data.clone())
                        .collect();
                    f.sort();
                    out.push(f.join(","));
                }
            }
        }
        out.sort();
        out
    };
    let explicit = Dycore::on(&ranks_config(4, 3), Some([2, 2])).unwrap();
    assert_eq!(
        exchanges(&explicit),
        [
            "b",
            "fu,fv",
            "gx,gy",
            "h",
            "hs,qhs,us,vs",
            "lq",
            "lu,lv",
            "mu,mv",
            "pv",
            "q",
            "u,v"
        ]
    );
    // The halo analysis finds fewer: it exchanges `b`, `mu`, `mv` and `pv` together,
    // where the first call reads them away from the point; and `h` once more after the
    // hyperdiffusion branch (its other arm, without the exchange, is possible as far as
    // the analysis knows).
    let analysed = Dycore::with(&ranks_config(4, 3), program::Halos::Analysis([2, 2])).unwrap();
    assert_eq!(
        exchanges(&analysed),
        [
            "b,mu,mv,pv",
            "fu,fv",
            "gx,gy",
            "h",
            "h,u,v",
            "hs,qhs,us,vs",
            "lq",
            "lu,lv",
            "q"
        ]
    );
}

#[test]
fn the_time_step_on_mpi_ranks_is_one_ranks_bits() {
    time_step_on_mpi_ranks("cpu");
}

#[test]
fn the_time_step_on_mpi_ranks_on_the_gpu_is_one_ranks_bits() {
    // The CUDA backend's exchanges (pack and unpack kernels, host functions posting and
    // waiting), on the emulated device where no GPU is.
    time_step_on_mpi_ranks("cuda");
}

/// The time step on 2 x 2 MPI ranks through `sdflow run --backend BACKEND`, put together
/// and compared bit for bit with one rank.
fn time_step_on_mpi_ranks(backend: &str) {
    // 11 x 8 over 2 x 2: blocks of 6 and 5 rows, so the ranks run two programs (their
    // static sizes differ) that agree on every exchange.
    let (cfg, grid, steps) = (ranks_config(11, 8), [2usize, 2], 3);
    let s0 = random_smooth(&cfg, 3);
    let dir = common::scratch(&format!("dycore-{backend}"));
    let mut programs = Vec::new();
    for r in 0..4 {
        let (local, oi, oj) = ranks::block(&cfg, grid, r);
        let d = Dycore::on(&local, Some([2, 2])).unwrap();
        let path = dir.join(format!("dycore.{r}.sdfg.json"));
        std::fs::write(&path, sdflow::ir::format::to_json(&d.sdfg)).unwrap();
        let b = d.bindings(&ranks::cut(&cfg, &s0, &local, oi, oj), steps);
        let mut arrays: BTreeMap<String, HostArray> = b.arrays.clone();
        for (k, v) in &b.symbols {
            arrays.insert(k.clone(), HostArray::scalar(*v));
        }
        sdflow::npz::write_npz(&dir.join(format!("in.{r}.npz")), &arrays).unwrap();
        programs.push((local, d, path));
    }
    // MPI's multiple-program form: each rank its own file.
    let groups: Vec<(usize, Vec<String>)> = programs
        .iter()
        .map(|(_, _, path)| {
            let (inp, outp) = (dir.join("in.{rank}.npz"), dir.join("out.{rank}.npz"));
            let args = [
                "run",
                &path.to_string_lossy(),
                "--ranks",
                "4",
                "--backend",
                backend,
                "--inputs",
                &inp.to_string_lossy(),
                "--outputs",
                &outp.to_string_lossy(),
            ];
            (1, args.iter().map(|s| s.to_string()).collect())
        })
        .collect();
    let Some(out) = common::mpirun(&groups, &dir.join("cache")) else {
        return;
    };
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Two variants (blocks of 6 and of 5 rows), each built by one rank, loaded by the
    // other rank that runs it.
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(said.matches("program 'dycore' built").count(), 2, "{said}");
    assert_eq!(
        said.matches("program 'dycore' loaded from the cache")
            .count(),
        2,
        "{said}"
    );
    let mut parts = Vec::new();
    for (r, (local, d, _)) in programs.iter().enumerate() {
        let got = Bindings {
            arrays: sdflow::npz::read_npz(&dir.join(format!("out.{r}.npz"))).unwrap(),
            ..Bindings::default()
        };
        let mut s = State::zeros(local);
        d.store(&got, &mut s);
        parts.extend(ranks::interior(local, &s));
    }
    let s = ranks::assemble(&cfg, grid, &parts);
    let one = Dycore::new(&cfg).unwrap();
    let mut s1 = s0.clone();
    one.run_interpreted(&mut s1, steps).unwrap();
    assert_eq!(ranks::differing(&cfg, &s, &s1), 0);
    std::fs::remove_dir_all(&dir).ok();
}
