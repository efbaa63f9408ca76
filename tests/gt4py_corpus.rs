//! The GT4Py corpus (`tests/gt4py/`, written by `scripts/gt4py/generate.sh`): every program
//! of ICON4Py's diffusion package, lowered by GT4Py 1.2.1's DaCe backend (DaCe 2.0.0a10),
//! with the inputs and the outputs of GT4Py's own runs. Each SDFG — the raw lowering, the
//! `dace_noopt` backend's final file and the `dace` backend's auto-optimized final file —
//! is imported, validated, run on the interpreter and compiled, before and after
//! `Pipeline::cpu`, and compared with GT4Py's outputs: bitwise where GT4Py's embedded and
//! gtfn runs agree bitwise, else within `TOLERANCE` (relative to the output's largest
//! magnitude).

mod common;

use std::path::{Path, PathBuf};

use common::{Npz, array, gt4py_inputs, names, open_npz};
use sdflow::ir::Sdfg;
use sdflow::ir::interp::{self, Bindings};
use sdflow::transforms::Pipeline;

/// The stages each program was captured at.
const VARIANTS: [&str; 3] = ["dace.lowered", "dace_noopt.final", "dace.final"];

/// Where GT4Py's own backends disagree (embedded and gtfn evaluate some expressions in a
/// different order), sdflow must agree with the reference within this relative distance.
const TOLERANCE: f64 = 1e-14;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gt4py")
}

/// The programs of the corpus, by name.
fn programs() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir())
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".simple.npz").map(str::to_string)
        })
        .collect();
    v.sort();
    v
}

/// What a program's outputs are compared with: for each output field, the backend whose
/// result is the reference and the tolerance. GT4Py's embedded backend is the reference
/// where it ran (gtfn where it did not, then DaCe's own unoptimized run); the comparison is
/// bitwise where embedded and gtfn agree bitwise.
fn references(npz: &mut Npz) -> Vec<(String, String, f64)> {
    let all = names(npz);
    let mut fields: Vec<String> = all
        .iter()
        .filter_map(|n| n.strip_prefix("out__"))
        .filter_map(|n| n.split_once("__").map(|(_, f)| f.to_string()))
        .collect();
    fields.sort();
    fields.dedup();
    let mut out = Vec::new();
    for f in fields {
        let key = |b: &str| format!("out__{b}__{f}");
        let reference = ["embedded", "gtfn", "dace_noopt"]
            .into_iter()
            .find(|b| all.contains(&key(b)))
            .unwrap();
        let exact = match (all.contains(&key("embedded")), all.contains(&key("gtfn"))) {
            (true, true) => array(npz, &key("embedded")).bits() == array(npz, &key("gtfn")).bits(),
            _ => true,
        };
        out.push((
            f,
            reference.to_string(),
            if exact { 0.0 } else { TOLERANCE },
        ));
    }
    out
}

/// The largest difference of `got`'s outputs to their references, relative to the
/// reference's largest magnitude, over the outputs; `Err` naming the first output beyond
/// its tolerance.
fn check(got: &Bindings, npz: &mut Npz, refs: &[(String, String, f64)]) -> Result<f64, String> {
    let mut worst: f64 = 0.0;
    for (field, backend, tol) in refs {
        let want = array(npz, &format!("out__{backend}__{field}")).to_f64_vec();
        let got = got.arrays[field].to_f64_vec();
        let scale = want
            .iter()
            .fold(0.0f64, |m, x| m.max(x.abs()))
            .max(f64::MIN_POSITIVE);
        let d = got.iter().zip(&want).fold(0.0f64, |m, (g, w)| {
            if g.to_bits() == w.to_bits() {
                m
            } else {
                m.max((g - w).abs() / scale).max(f64::MIN_POSITIVE)
            }
        });
        if d > *tol {
            return Err(format!(
                "'{field}' differs from GT4Py's {backend} run by {d:e} (relative; allowed {tol:e})"
            ));
        }
        worst = worst.max(d);
    }
    Ok(worst)
}

/// Files that do not reproduce GT4Py yet, with the stage and the failure, each checked to
/// still fail so (a fix shows up as a test failure asking to remove the entry).
const KNOWN_FAILURES: &[(&str, &str, &str)] = &[];

struct Case {
    file: String,
    npz: PathBuf,
    inputs: Bindings,
    sdfg: Sdfg,
    opt: Sdfg,
}

#[test]
fn every_gt4py_program_reproduces_gt4py() {
    let programs = programs();
    assert!(
        programs.len() >= 23,
        "{} programs in tests/gt4py",
        programs.len()
    );
    let mut failures = Vec::new();
    let mut cases = Vec::new();
    for p in &programs {
        let npz_path = dir().join(format!("{p}.simple.npz"));
        for v in VARIANTS {
            let file = format!("{p}.simple.{v}.sdfgz");
            let path = dir().join(&file);
            if !path.exists() {
                continue;
            }
            let sdfg = match sdflow::cli::load_program(&path) {
                Ok(s) => s,
                Err(e) => {
                    failures.push(format!("{file}: {e}"));
                    continue;
                }
            };
            let mut npz = open_npz(&npz_path);
            let refs = references(&mut npz);
            let inputs = gt4py_inputs(&sdfg, &mut npz);
            let mut b = inputs.clone();
            if let Err(e) = interp::run(&sdfg, &mut b) {
                failures.push(format!("{file}: interpreter: {e}"));
                continue;
            }
            let d = check(&b, &mut npz, &refs);
            eprintln!("{file}: interpreter {d:?}");
            if let Err(e) = d {
                failures.push(format!("{file}: interpreter: {e}"));
                continue;
            }
            let mut opt = sdfg.clone();
            if let Err(e) = Pipeline::cpu().validate_each(true).run(&mut opt) {
                failures.push(format!("{file}: Pipeline::cpu: {e}"));
                continue;
            }
            let mut bo = inputs.clone();
            if let Err(e) = interp::run(&opt, &mut bo) {
                failures.push(format!("{file}: optimized, interpreter: {e}"));
                continue;
            }
            if let Err(e) = check(&bo, &mut npz, &refs) {
                failures.push(format!("{file}: optimized, interpreter: {e}"));
                continue;
            }
            cases.push(Case {
                file,
                npz: npz_path.clone(),
                inputs,
                sdfg,
                opt,
            });
        }
    }
    // Compiled, before and after the pipeline: every build at once, in parallel. GT4Py's
    // unoptimized lowerings are large (up to 1.2 MB of C, a minute at -O3 on one core),
    // so they are built at -O1 and DaCe's optimized files at the default -O3. The result
    // does not depend on the level: there is no fast-math and no contraction
    // (`-ffp-contract=off`), so every level computes the interpreter's values bit for bit.
    let backend = common::backend();
    let mut quick = common::backend();
    quick.compiler = quick.compiler.at_level("-O1");
    let is_final = |c: &Case| c.file.ends_with(".dace.final.sdfgz");
    let build = |backend: &sdflow::codegen::CpuBackend, pick: &dyn Fn(&Case) -> bool| {
        let all: Vec<Sdfg> = cases
            .iter()
            .filter(|c| pick(c))
            .flat_map(|c| [c.sdfg.clone(), c.opt.clone()])
            .collect();
        backend.build_all(&all).into_iter()
    };
    let mut finals = build(&backend, &is_final);
    let mut others = build(&quick, &|c| !is_final(c));
    let built: Vec<_> = cases
        .iter()
        .flat_map(|c| {
            let from = if is_final(c) {
                &mut finals
            } else {
                &mut others
            };
            [from.next().unwrap(), from.next().unwrap()]
        })
        .collect();
    for (k, c) in cases.iter().enumerate() {
        let mut npz = open_npz(&c.npz);
        let refs = references(&mut npz);
        for (stage, lib) in [
            ("compiled", &built[2 * k]),
            ("optimized, compiled", &built[2 * k + 1]),
        ] {
            let lib = match lib {
                Ok(l) => l,
                Err(e) => {
                    failures.push(format!("{}: {stage}: {e}", c.file));
                    continue;
                }
            };
            let mut b = c.inputs.clone();
            if let Err(e) = lib.run_bindings(&mut b) {
                failures.push(format!("{}: {stage}: {e}", c.file));
                continue;
            }
            if let Err(e) = check(&b, &mut npz, &refs) {
                failures.push(format!("{}: {stage}: {e}", c.file));
            }
        }
    }
    eprintln!(
        "{} of {} programs' files reproduce GT4Py",
        cases.len(),
        programs.len() * VARIANTS.len()
    );
    for (file, stage, message) in KNOWN_FAILURES {
        let expected = format!("{file}: {stage}: {message}");
        let before = failures.len();
        failures.retain(|f| f != &expected);
        assert_eq!(
            before,
            failures.len() + 1,
            "{file} no longer fails at '{stage}' as recorded: update KNOWN_FAILURES"
        );
    }
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Every corpus program whose plan runs a producer–consumer pair lagged (a field read at
/// the neighbours right after the map that computed it: `plan::lag`), as given and after
/// `Pipeline::cpu`, compiled with every map on the parallel path and the pair in chunks of
/// one row on two threads — every chunk boundary and every chunk left to the second
/// phase taken — reproduces GT4Py. The corpus's grid is too small for the default
/// thresholds to take that path.
#[test]
fn lagged_gt4py_programs_reproduce_gt4py_in_chunks_of_one_row() {
    let mut backend = common::backend();
    backend.emit.parallel_min_points = 1;
    backend.emit.lag_points = 1;
    backend.compiler = backend.compiler.at_level("-O1");
    let lagged = |s: &Sdfg| {
        sdflow::codegen::Plan::of(s, sdflow::codegen::plan::Target::default())
            .unwrap()
            .to_text()
            .contains("lagged behind")
    };
    let mut cases = Vec::new();
    for p in programs() {
        for v in VARIANTS {
            let file = format!("{p}.simple.{v}.sdfgz");
            let path = dir().join(&file);
            if !path.exists() {
                continue;
            }
            let sdfg = sdflow::cli::load_program(&path).unwrap();
            let mut opt = sdfg.clone();
            Pipeline::cpu().run(&mut opt).unwrap();
            for (stage, s) in [("as given", sdfg), ("optimized", opt)] {
                if lagged(&s) {
                    cases.push((format!("{file}, {stage}"), p.clone(), s));
                }
            }
        }
    }
    assert!(
        cases.len() >= 8,
        "{} lagged corpus programs: {:?}",
        cases.len(),
        cases.iter().map(|c| &c.0).collect::<Vec<_>>()
    );
    let all: Vec<Sdfg> = cases.iter().map(|c| c.2.clone()).collect();
    let mut failures = Vec::new();
    for ((name, p, s), lib) in cases.iter().zip(backend.build_all(&all)) {
        let mut npz = open_npz(&dir().join(format!("{p}.simple.npz")));
        let refs = references(&mut npz);
        let mut b = gt4py_inputs(s, &mut npz);
        let lib = lib.unwrap_or_else(|e| panic!("{name}: {e}"));
        lib.set_threads(2);
        lib.run_bindings(&mut b)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        if let Err(e) = check(&b, &mut npz, &refs) {
            failures.push(format!("{name}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every corpus program, lowered or final, optimized by the CPU and by the GPU pipeline,
/// runs every map with its parallelism: no nested-SDFG call left at the level of a state
/// (its plan runs sequentially, a one-thread kernel on the GPU) and no map run by one
/// worker. GT4Py lowers every `let` to a state-level nested SDFG whose body is the rest of
/// the program; inlined, its maps meet the fusion passes (the fused maps are counted).
#[test]
fn every_gt4py_program_runs_its_maps_in_parallel() {
    use sdflow::codegen::plan::{Plan, StepKind, Target};
    let mut lowered_maps = 0;
    let mut final_maps = 0;
    for p in programs() {
        for variant in ["dace.lowered", "dace.final"] {
            let path = dir().join(format!("{p}.simple.{variant}.sdfgz"));
            let sdfg = sdflow::cli::load_program(&path).unwrap();
            for (pipeline, name) in [(Pipeline::cpu(), "cpu"), (Pipeline::gpu(), "gpu")] {
                let mut opt = sdfg.clone();
                pipeline.run(&mut opt).unwrap();
                let target = if name == "gpu" {
                    Target::Grid
                } else {
                    Target::default()
                };
                let plan = Plan::of(&opt, target).unwrap();
                let mut maps = 0;
                for st in plan.body.states() {
                    for step in &st.steps {
                        assert!(
                            !matches!(step.kind, StepKind::Nested(_) | StepKind::SequentialMap),
                            "{p}.{variant} ({name} pipeline): step '{}' of state '{}' runs on one worker:\n{}",
                            step.label,
                            st.name,
                            plan.to_text()
                        );
                        maps += usize::from(matches!(step.kind, StepKind::ParallelMap { .. }));
                    }
                }
                if name == "cpu" {
                    *if variant == "dace.lowered" {
                        &mut lowered_maps
                    } else {
                        &mut final_maps
                    } += maps;
                }
            }
        }
    }
    eprintln!("parallel maps after the CPU pipeline: lowered {lowered_maps}, final {final_maps}");
    // The lowered programs keep at most 1.5 times the maps GT4Py's optimizer leaves.
    assert!(
        2 * lowered_maps <= 3 * final_maps,
        "lowered {lowered_maps} maps against {final_maps} in GT4Py's optimized programs"
    );
}

/// Cost linear in the grid: no step that runs per point of a map copies or allocates a
/// container whose size grows with the grid. A nested SDFG called inside a map body (DaCe's
/// `if_stmt`, which GT4Py's optimized programs keep there, taking whole fields) gets each
/// argument either by reference (`plan::passed_by_reference`: the callee reads the
/// caller's array itself) or as a copy made at every point, which must then hold a
/// number of elements that is a constant; for every corpus program, lowered or final,
/// before and after the CPU pipeline. (The C backend gives a callee container of a few
/// elements a stack array.)
#[test]
fn no_per_point_step_copies_a_grid_sized_container() {
    use sdflow::codegen::plan::passed_by_reference;
    use sdflow::ir::{Dataflow, Node, Sdfg};
    fn walk(
        sdfg: &Sdfg,
        df: &Dataflow,
        in_map: bool,
        at: &str,
        seen: &mut (usize, usize),
        bad: &mut Vec<String>,
    ) {
        for n in df.node_ids() {
            match df.node(n) {
                Node::Map(m) => walk(sdfg, &m.body, true, &format!("{at}/{}", m.label), seen, bad),
                Node::Nested(ns) => {
                    if in_map {
                        for e in df.in_edges(n).into_iter().chain(df.out_edges(n)) {
                            let edge = df.edge(e);
                            let conn = edge
                                .dst_conn
                                .as_deref()
                                .or(edge.src_conn.as_deref())
                                .unwrap_or_default();
                            if passed_by_reference(sdfg, df, n, conn) {
                                seen.0 += 1;
                            } else if edge.memlet.volume().simplify().as_int().is_some() {
                                seen.1 += 1;
                            } else {
                                bad.push(format!(
                                    "{at}: nested SDFG '{}' copies {} at every point",
                                    ns.sdfg.name, edge.memlet
                                ));
                            }
                        }
                    }
                    for st in &ns.sdfg.states {
                        walk(
                            &ns.sdfg,
                            &st.graph,
                            in_map,
                            &format!("{at}/{}", ns.sdfg.name),
                            seen,
                            bad,
                        );
                    }
                }
                _ => {}
            }
        }
    }
    let mut bad = Vec::new();
    // Connectors of per-point calls passed by reference, and copied (a few elements).
    let mut seen = (0, 0);
    for p in programs() {
        for variant in ["dace.lowered", "dace.final"] {
            let path = dir().join(format!("{p}.simple.{variant}.sdfgz"));
            let sdfg = sdflow::cli::load_program(&path).unwrap();
            let mut opt = sdfg.clone();
            Pipeline::cpu().run(&mut opt).unwrap();
            for (s, stage) in [(&sdfg, "as written"), (&opt, "optimized")] {
                for st in &s.states {
                    walk(
                        s,
                        &st.graph,
                        false,
                        &format!("{p}.{variant} ({stage})"),
                        &mut seen,
                        &mut bad,
                    );
                }
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    // apply_diffusion_to_theta_and_exner's final SDFG passes nine whole fields and tables
    // to the `if` it calls at every point, as written and optimized.
    assert!(seen.0 >= 18 && seen.1 > 0, "{seen:?}");
}

/// Every corpus program, lowered and as DaCe optimized it, through the GPU pipeline and the
/// CUDA backend, run on the emulated device (the CUDA text compiled for the host, every
/// block and thread of every launch) and, where there is one (and NVRTC), on the GPU:
/// GT4Py's outputs, as on the CPU. Transcendental functions are the host's on the
/// emulated device, as in the interpreter, so the references' bounds hold as they do for
/// the CPU backend.
#[test]
fn every_gt4py_program_reproduces_gt4py_on_the_emulated_device() {
    use sdflow::codegen::cuda::device::{CudaDevice, DeviceHandle, EmulatedDevice};
    // Also in reverse order: a kernel whose threads read each other's writes (a race on a
    // GPU) gives other results there.
    let mut devices = vec![
        ("emulated", DeviceHandle::new(EmulatedDevice::new())),
        (
            "emulated (reverse order)",
            DeviceHandle::new(EmulatedDevice::new().in_reverse_order(true)),
        ),
    ];
    if sdflow::codegen::cuda::nvrtc::available().is_ok()
        && let Ok(d) = CudaDevice::new(0)
    {
        devices.push(("GPU", DeviceHandle::new(d)));
    }
    for (name, device) in devices {
        reproduces_gt4py_on(name, &device);
    }
}

fn reproduces_gt4py_on(dev: &str, device: &sdflow::codegen::cuda::device::DeviceHandle) {
    use rayon::prelude::*;
    use sdflow::codegen::cuda::exec::CudaBackend;
    let backend = CudaBackend::default();
    let files: Vec<(String, String)> = programs()
        .into_iter()
        .flat_map(|p| ["dace.lowered", "dace.final"].map(|v| (p.clone(), v.to_string())))
        .collect();
    // Optimized and built in parallel (the builds do not hold the device), run in order.
    let built: Vec<_> = files
        .par_iter()
        .map(|(p, v)| {
            let file = format!("{p}.simple.{v}.sdfgz");
            let sdfg = sdflow::cli::load_program(&dir().join(&file)).unwrap();
            let mut opt = sdfg.clone();
            let prog = Pipeline::gpu()
                .run(&mut opt)
                .map_err(|e| format!("Pipeline::gpu: {e}"))
                .and_then(|_| backend.build(&opt, device).map_err(|e| e.to_string()));
            (p.clone(), file, sdfg, prog)
        })
        .collect();
    let mut failures = Vec::new();
    let mut ran = 0;
    for (p, file, sdfg, prog) in built {
        let mut npz = open_npz(&dir().join(format!("{p}.simple.npz")));
        let refs = references(&mut npz);
        let mut b = gt4py_inputs(&sdfg, &mut npz);
        let result = prog
            .and_then(|mut prog| prog.run_bindings(&mut b).map_err(|e| e.to_string()))
            .and_then(|()| check(&b, &mut npz, &refs));
        match result {
            Ok(_) => ran += 1,
            Err(e) => failures.push(format!("{file}: {dev} device: {e}")),
        }
    }
    eprintln!("{ran} corpus files reproduce GT4Py on the {dev} device");
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(ran >= 46, "{ran} files ran");
}

/// Copies between containers (edges from one access node to another at a state's top
/// level, in the states the control flow runs).
fn copy_steps(sdfg: &Sdfg) -> usize {
    sdfg.body
        .states()
        .into_iter()
        .map(|s| {
            let df = &sdfg.states[s.index()].graph;
            df.edge_ids()
                .into_iter()
                .filter(|&e| {
                    let (a, b) = df.endpoints(e);
                    df.node(a).as_access().is_some() && df.node(b).as_access().is_some()
                })
                .count()
        })
        .sum()
}

/// GT4Py's `concat_where` assembles a result from pieces, each computed into a transient
/// of its own and copied into the result, which is copied again into the value of an `if`
/// and then into the field: once optimized, every lowered program copies no more than
/// GT4Py's optimizer leaves in its final SDFG, and the two `concat_where` programs fewer
/// — `apply_diffusion_to_vn` none at all: its pieces are written into `vn` itself
/// (`redundant_copy`'s write-back rule, `docs/transforms.md`), and
/// `apply_diffusion_to_w_and_compute_horizontal_gradients_for_turbulence` two, the zones
/// of `w_old` that stay as they are: its first result, which the second `concat_where`
/// read back into `w` zone by zone, is `w` itself (the rule's zoned form).
#[test]
fn no_lowered_program_copies_more_than_gt4pys_optimizer_leaves() {
    let mut counts = Vec::new();
    for p in programs() {
        let load = |variant: &str| {
            sdflow::cli::load_program(&dir().join(format!("{p}.simple.dace.{variant}.sdfgz")))
                .unwrap()
        };
        let (mut lowered, fin) = (load("lowered"), load("final"));
        Pipeline::cpu().run(&mut lowered).unwrap();
        let (ours, theirs) = (copy_steps(&lowered), copy_steps(&fin));
        assert!(
            ours <= theirs,
            "{p}: {ours} copies after sdflow's pipeline, {theirs} in GT4Py's final SDFG"
        );
        counts.push((p, ours, theirs));
    }
    let find = |name: &str| counts.iter().find(|c| c.0 == name).map(|c| (c.1, c.2));
    assert_eq!(find("apply_diffusion_to_vn"), Some((0, 4)), "{counts:?}");
    assert_eq!(
        find("apply_diffusion_to_w_and_compute_horizontal_gradients_for_turbulence"),
        Some((2, 23)),
        "{counts:?}"
    );
}

/// Fields passed column-major, as a Fortran model passes them: every lowered program,
/// specialized for that layout (`layout::specialize_unit_strides`: each field's stride in
/// its first dimension a static 1, the transients column-major) and optimized, walks
/// the horizontal dimension innermost in every parallel map over a horizontal and a
/// vertical dimension that does not gather through a neighbour table, and, compiled and called with the inputs laid out column-major,
/// computes GT4Py's outputs as the unspecialized program does with row-major ones.
#[test]
fn every_lowered_program_specialized_for_column_major_fields_reproduces_gt4py() {
    use sdflow::ir::{Dataflow, Node, Schedule};
    use sdflow::transforms::{Order, specialize_unit_strides, unit_dims_in_order};
    /// Whether `df` (inner maps too) gathers through a neighbour table.
    fn gathers(df: &Dataflow) -> bool {
        df.edge_ids().into_iter().any(|e| {
            df.edge(e)
                .memlet
                .subset
                .0
                .iter()
                .any(|d| matches!(d, sdflow::ir::Dim::Indirect { .. }))
        }) || df.node_ids().into_iter().any(|n| match df.node(n) {
            Node::Map(m) => gathers(&m.body),
            _ => false,
        })
    }
    /// Whether `df` (inner maps too) accesses an argument of two or more dimensions.
    fn reads_a_field(sdfg: &Sdfg, df: &Dataflow) -> bool {
        df.edge_ids().into_iter().any(|e| {
            sdfg.arrays
                .get(&df.edge(e).memlet.data)
                .is_some_and(|d| !d.transient() && d.rank() >= 2)
        }) || df.node_ids().into_iter().any(|n| match df.node(n) {
            Node::Map(m) => reads_a_field(sdfg, &m.body),
            _ => false,
        })
    }
    /// The parallel maps of `df` over fields, without gathers, whose last parameter is
    /// vertical while another is horizontal: their innermost loop walks the fields with
    /// a stride. (A map that gathers keeps the levels innermost: a neighbour's index is
    /// then read once per column, not per point; a map over transients alone may keep
    /// either order, its transients laid out to match: `loop_order`'s cost.)
    fn vertical_innermost(sdfg: &Sdfg, df: &Dataflow, out: &mut Vec<String>) {
        for n in df.node_ids() {
            if let Node::Map(m) = df.node(n) {
                let last = m.params.last().map(String::as_str).unwrap_or("");
                if m.schedule == Schedule::CpuParallel
                    && last.contains("vertical")
                    && m.params.iter().any(|p| p.contains("horizontal"))
                    && !gathers(&m.body)
                    && reads_a_field(sdfg, &m.body)
                {
                    out.push(format!("{} ({})", m.label, m.params.join(", ")));
                }
                vertical_innermost(sdfg, &m.body, out);
            }
        }
    }
    let mut quick = common::backend();
    quick.compiler = quick.compiler.at_level("-O1");
    let mut cases = Vec::new();
    let (mut relaid, mut reordered) = (0, 0);
    for p in programs() {
        let path = dir().join(format!("{p}.simple.dace.lowered.sdfgz"));
        let mut sdfg = sdflow::cli::load_program(&path).unwrap();
        let mut npz = open_npz(&dir().join(format!("{p}.simple.npz")));
        let unit = unit_dims_in_order(&sdfg, Order::ColumnMajor);
        let report = specialize_unit_strides(&mut sdfg, &unit).unwrap();
        assert!(report.column_major, "{p}: {report:?}");
        assert!(
            report.transients_kept.is_empty(),
            "{p}: transients left row-major: {:?}",
            report.transients_kept
        );
        relaid += report.transients_relaid.len();
        // Symbols inferred for the arrays laid out as the specialized program takes them.
        let inputs = gt4py_inputs(&sdfg, &mut npz);
        let r = Pipeline::cpu().validate_each(true).run(&mut sdfg).unwrap();
        reordered += r.changes("loop_order").get("loops_reordered");
        let mut wrong = Vec::new();
        for st in &sdfg.states {
            vertical_innermost(&sdfg, &st.graph, &mut wrong);
        }
        assert!(
            wrong.is_empty(),
            "{p}: maps walking the vertical dimension innermost: {wrong:?}"
        );
        cases.push((p, sdfg, inputs));
    }
    eprintln!("column-major: {relaid} transients relaid, {reordered} maps reordered");
    assert!(relaid >= 20 && reordered >= 14, "{relaid} {reordered}");
    let all: Vec<Sdfg> = cases.iter().map(|c| c.1.clone()).collect();
    let mut failures = Vec::new();
    for ((p, _, inputs), lib) in cases.iter().zip(quick.build_all(&all)) {
        let mut npz = open_npz(&dir().join(format!("{p}.simple.npz")));
        let refs = references(&mut npz);
        let mut b = inputs.clone();
        // Row-major fields are refused, naming one and the layout.
        let lib = lib.unwrap();
        let mut row_major = inputs.arrays.clone();
        let mut args = sdflow::codegen::Args::new();
        for (k, v) in &inputs.symbols {
            if lib.signature.floats.contains(k) {
                args = args.float(k, v.as_f64());
            } else if lib.signature.ints.contains(k) {
                args = args.int(k, v.as_i64());
            }
        }
        for (k, a) in row_major.iter_mut() {
            if lib.signature.arrays.iter().any(|s| &s.name == k) {
                args = args.host(k, a);
            }
        }
        let e = lib.call_checked(args).unwrap_err().to_string();
        assert!(
            e.contains("has stride")
                && e.contains("but the program takes 1 there (its declared or specialized layout)"),
            "{p}: {e}"
        );
        if let Err(e) = lib.run_bindings(&mut b) {
            failures.push(format!("{p}: {e}"));
            continue;
        }
        if let Err(e) = check(&b, &mut npz, &refs) {
            failures.push(format!("{p}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Column-major fields on the GPU path: four lowered programs (a pointwise update, a
/// gather over cells, a gather over vertices into edges, `concat_where` pieces copied
/// between transients), specialized column-major and optimized by the GPU pipeline, run
/// on the emulated device with column-major inputs: GT4Py's outputs. Their kernels have
/// constant strides, so the fastest thread index was chosen at build time — the
/// horizontal dimension, contiguous in the fields and the transients alike (no choice at
/// the call is left in the CUDA text).
#[test]
fn lowered_programs_specialized_for_column_major_fields_reproduce_gt4py_on_the_emulated_device() {
    use sdflow::codegen::cuda::device::{DeviceHandle, EmulatedDevice};
    use sdflow::codegen::cuda::exec::CudaBackend;
    use sdflow::transforms::{Order, specialize_unit_strides, unit_dims_in_order};
    let device = DeviceHandle::new(EmulatedDevice::new());
    let backend = CudaBackend::default();
    for p in [
        "apply_nabla2_to_vn_in_lateral_boundary",
        "apply_nabla2_to_w",
        "calculate_nabla4",
        "apply_diffusion_to_vn",
    ] {
        let path = dir().join(format!("{p}.simple.dace.lowered.sdfgz"));
        let mut sdfg = sdflow::cli::load_program(&path).unwrap();
        let unit = unit_dims_in_order(&sdfg, Order::ColumnMajor);
        let report = specialize_unit_strides(&mut sdfg, &unit).unwrap();
        assert!(
            report.column_major && report.transients_kept.is_empty(),
            "{p}"
        );
        let mut npz = open_npz(&dir().join(format!("{p}.simple.npz")));
        let refs = references(&mut npz);
        let mut b = gt4py_inputs(&sdfg, &mut npz);
        Pipeline::gpu().run(&mut sdfg).unwrap();
        // Every kernel over a horizontal and a vertical dimension has the horizontal,
        // the fields' contiguous one, as its fastest thread index (gathers or not: a
        // warp's gathered loads are a transaction each either way).
        for st in &sdfg.states {
            for n in st.graph.node_ids() {
                if let sdflow::ir::Node::Map(m) = st.graph.node(n)
                    && m.params.iter().any(|q| q.contains("vertical"))
                    && m.params.iter().any(|q| q.contains("horizontal"))
                {
                    assert!(
                        m.params.last().is_some_and(|q| q.contains("horizontal")),
                        "{p}: kernel '{}' ({})",
                        m.label,
                        m.params.join(", ")
                    );
                }
            }
        }
        let cuda = backend.generate(&sdfg).unwrap().source;
        assert!(
            !cuda.contains("_K_stride) != 1 && (s___"),
            "{p}: a kernel still chooses its fastest index at the call"
        );
        let mut prog = backend.build(&sdfg, &device).unwrap();
        prog.run_bindings(&mut b).unwrap();
        check(&b, &mut npz, &refs).unwrap_or_else(|e| panic!("{p}: {e}"));
    }
}
