//! A program with a halo exchange (`tests/distributed/halo_stencil.sdfg.json`: a 9-point
//! stencil on a field split over 2 × 2 ranks) as a user meets it: it loads, validates and
//! is drawn; the interpreter runs it over simulated ranks, optimized or not, to the same
//! bits; the C backend runs it on MPI ranks (`mpirun -n N sdflow run … --backend cpu`),
//! 1 to 4 of them on any machine (oversubscribed), to the interpreter's bits; one rank
//! builds, the others load; a failing rank or ranks that disagree stop the run with a
//! message. The CUDA backend runs it on MPI ranks too (`--backend cuda`, on the emulated
//! device where no GPU is), to the same bits, and the unstructured ring likewise.
//!
//! The MPI tests need Open MPI's `mpirun` and `mpicc` (`apt-get install openmpi-bin
//! libopenmpi-dev`, which `.ci/run` does); without them they say so and pass, unless
//! `SDFLOW_REQUIRE_MPI=1` (set by `.ci/run`) makes that a failure.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{mpirun, scratch};

use sdflow::cli;
use sdflow::ir::interp::{Bindings, HostArray, gather, run_ranks, scatter};
use sdflow::ir::{DType, Value};
use sdflow::transforms::Pipeline;

/// `sdflow ARGS…` on the fixture: `sdflow run FILE --ranks 4` is `sdflow(&["run"], &["--ranks", "4"])`.
fn sdflow(command: &[&str], extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sdflow"))
        .args(command)
        .arg(fixture())
        .args(extra)
        .output()
        .unwrap()
}

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/distributed/halo_stencil.sdfg.json")
}

/// Rank `r`'s arguments: its part of a 12 × 9 field, halos included.
fn parts() -> Vec<Bindings> {
    let values: Vec<f64> = (0..12 * 9)
        .map(|k| ((k * 37) % 101) as f64 / 13.0)
        .collect();
    let global = HostArray::from_f64(&[12, 9], values).unwrap();
    scatter(&global, [2, 2], 1)
        .into_iter()
        .map(|u| {
            let shape = u.shape().to_vec();
            let mut b = Bindings::default();
            b.symbols
                .insert("NI".into(), Value::I64(shape[0] as i64 - 2));
            b.symbols
                .insert("NJ".into(), Value::I64(shape[1] as i64 - 2));
            b.arrays
                .insert("out".into(), HostArray::zeros(DType::F64, &shape));
            b.arrays.insert("u".into(), u);
            b
        })
        .collect()
}

fn outs(ranks: &[Bindings]) -> HostArray {
    let parts: Vec<HostArray> = ranks.iter().map(|b| b.arrays["out"].clone()).collect();
    gather(&parts, &[12, 9], [2, 2], 1)
}

#[test]
fn the_optimized_program_gives_the_same_bits_on_the_ranks() {
    let s = cli::load_program(&fixture()).unwrap();
    let mut before = parts();
    run_ranks(&s, &mut before).unwrap();
    for pipeline in [Pipeline::cpu(), Pipeline::gpu()] {
        let mut opt = s.clone();
        pipeline.validate_each(true).run(&mut opt).unwrap();
        let mut after = parts();
        run_ranks(&opt, &mut after).unwrap();
        assert_eq!(outs(&after).bits(), outs(&before).bits());
    }
    // The stencil read its neighbours' cells: the result is not zero at block edges.
    let got = outs(&before);
    assert!(got.get(&[5, 4]).unwrap() != Value::F64(0.0));
}

#[test]
fn the_exchange_is_lowered_to_mpi_and_drawn() {
    // CUDA: pack and unpack kernels; the stencil's interior and its rim's 4 boxes are
    // kernels of their own.
    let s = cli::load_program(&fixture()).unwrap();
    let cuda = sdflow::codegen::cuda::emit::emit_cuda(&s, &Default::default()).unwrap();
    for k in [
        "halo exchange #0 (pack)",
        "halo exchange #0 (unpack)",
        "char* __restrict__ sdf_xb, const int sdf_xnb",
    ] {
        assert!(cuda.source.contains(k), "{k}");
    }
    let exchange: Vec<_> = cuda
        .kernels
        .iter()
        .filter(|k| k.exchange == Some(0))
        .collect();
    assert_eq!(exchange.len(), 2);
    let lap: Vec<&str> = cuda
        .kernels
        .iter()
        .filter(|k| k.state == 1 && !k.checked && k.exchange.is_none())
        .map(|k| k.name.as_str())
        .collect();
    assert_eq!(
        lap,
        [
            "sdf_k1_0_0",
            "sdf_k1_2_0",
            "sdf_k1_2_1",
            "sdf_k1_2_2",
            "sdf_k1_2_3"
        ]
    );
    // An unstructured exchange: its kernels take the schedule and the lists it was made
    // from.
    let dir = scratch("lowered");
    let ring = cli::load_program(&ring(&dir, 12, 3)).unwrap();
    let cuda = sdflow::codegen::cuda::emit::emit_cuda(&ring, &Default::default()).unwrap();
    assert!(cuda.source.contains(
        "char* __restrict__ sdf_xb, const int64_t* __restrict__ sdf_xs, const int64_t* __restrict__ sdf_xl"
    ));
    assert_eq!(
        cuda.kernels
            .iter()
            .filter(|k| k.exchange == Some(0))
            .count(),
        2
    );
    std::fs::remove_dir_all(&dir).ok();
    let out = sdflow(&["show"], &["--emit", "dot"]);
    assert!(out.status.success());
    let dot = String::from_utf8_lossy(&out.stdout);
    assert!(
        dot.contains("halo exchange\\n2x2 ranks (periodic, periodic, corners), width 1"),
        "{dot}"
    );
    // The C unit calls MPI; the plan shows the exchange split in two.
    let out = sdflow(&["show"], &["--emit", "c"]);
    assert!(out.status.success());
    let c = String::from_utf8_lossy(&out.stdout);
    for call in [
        "#include <mpi.h>",
        "MPI_Irecv(",
        "MPI_Isend(",
        "MPI_Waitall(",
    ] {
        assert!(c.contains(call), "{call}");
    }
    let out = sdflow(&["show"], &["--emit", "plan"]);
    let plan = String::from_utf8_lossy(&out.stdout);
    // The stencil's interior runs before the finish, its rim after.
    assert!(
        plan.contains("0: exchange start 'halo exchange' #0 of u over 2x2 ranks")
            && plan.contains("0: parallel map 'lap' collapse 1 from 4096 points (interior) writes out")
            && plan.contains("1: exchange finish 'halo exchange' #0 of u")
            && plan.contains("2: parallel map 'lap' collapse 1 from 4096 points (rim: 4 boxes) after 1 writes out"),
        "{plan}"
    );
    // Without overlap the finish comes first and the map is whole.
    let dir = scratch("plan");
    let config = dir.join("sdflow.toml");
    std::fs::write(&config, "[cpu]\noverlap_exchanges = false\n").unwrap();
    let out = sdflow(
        &["show"],
        &["--emit", "plan", "--config", &config.to_string_lossy()],
    );
    let plan = String::from_utf8_lossy(&out.stdout);
    assert!(
        plan.contains("0: exchange start 'halo exchange' #0 of u over 2x2 ranks")
            && plan.contains("1: exchange finish 'halo exchange' #0 of u")
            && plan.contains("0: parallel map 'lap' collapse 1 from 4096 points writes out"),
        "{plan}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn sdflow_run_runs_the_program_on_simulated_ranks() {
    let dir = std::env::temp_dir().join(format!("sdflow-ranks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let inputs = parts();
    for (r, b) in inputs.iter().enumerate() {
        sdflow::npz::write_npz(&dir.join(format!("in.{r}.npz")), &b.arrays).unwrap();
    }
    let pattern = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let run = |extra: &[&str]| sdflow(&["run"], extra);
    let out = run(&[
        "--ranks",
        "2x2",
        "--inputs",
        &pattern("in.{rank}.npz"),
        "--outputs",
        &pattern("out.{rank}.npz"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("rank 0: out: f64[8, 7] sum="), "{text}");
    assert_eq!(text.lines().count(), 8, "{text}");
    // The same bits as the interpreter's ranks in this process.
    let mut want = parts();
    run_ranks(&cli::load_program(&fixture()).unwrap(), &mut want).unwrap();
    let got: Vec<Bindings> = (0..4)
        .map(|r| Bindings {
            arrays: sdflow::npz::read_npz(&dir.join(format!("out.{r}.npz"))).unwrap(),
            ..Bindings::default()
        })
        .collect();
    assert_eq!(outs(&got).bits(), outs(&want).bits());
    // Refused: another rank count than the program's exchange, another backend, a path
    // without `{rank}`.
    for (extra, message) in [
        (
            vec!["--ranks", "3", "-s", "NI=4", "-s", "NJ=4"],
            "a halo exchange over 2x2 ranks (periodic, periodic, corners), width 1 is run on 3 rank(s)",
        ),
        (
            vec![
                "--ranks",
                "4",
                "-s",
                "NI=4",
                "-s",
                "NJ=4",
                "--backend",
                "cpu",
            ],
            "--ranks 4 --backend cpu runs on 4 MPI ranks: start it with `mpirun -n 4 sdflow run …`",
        ),
        (
            vec![
                "--ranks",
                "4",
                "-s",
                "NI=4",
                "-s",
                "NJ=4",
                "--outputs",
                "out.npz",
            ],
            "--outputs 'out.npz': with --ranks, the path names each rank's file with {rank} (in.{rank}.npz)",
        ),
        (
            vec!["--ranks", "2x0"],
            "expected a rank count (4) or a grid (2x2), got '2x0'",
        ),
    ] {
        let out = run(&extra);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(message),
            "{extra:?}: {err}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// The fixture with another decomposition, written to `dir`.
fn variant(dir: &std::path::Path, ranks: [i64; 2], periodic: [bool; 2], corners: bool) -> PathBuf {
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture()).unwrap()).unwrap();
    doc["states"][0]["nodes"][0]["halo_exchange"]["decomposition"]["structured"] = serde_json::json!({
        "ranks": ranks, "width": 1, "periodic": periodic, "corners": corners
    });
    let p = dir.join(format!(
        "stencil-{}x{}-{}{}-{}.sdfg.json",
        ranks[0], ranks[1], periodic[0] as u8, periodic[1] as u8, corners as u8
    ));
    std::fs::write(&p, serde_json::to_string(&doc).unwrap()).unwrap();
    p
}

/// A 12 × 9 field split over `ranks`, each rank's part written to `dir/in.{r}.npz`.
fn write_parts(dir: &std::path::Path, ranks: [usize; 2]) {
    let values: Vec<f64> = (0..12 * 9)
        .map(|k| ((k * 37) % 101) as f64 / 13.0 - 3.0)
        .collect();
    let global = HostArray::from_f64(&[12, 9], values).unwrap();
    for (r, u) in scatter(&global, ranks, 1).into_iter().enumerate() {
        let shape = u.shape().to_vec();
        let mut arrays = std::collections::BTreeMap::new();
        arrays.insert("out".to_string(), HostArray::zeros(DType::F64, &shape));
        arrays.insert("u".to_string(), u);
        sdflow::npz::write_npz(&dir.join(format!("in.{r}.npz")), &arrays).unwrap();
    }
}

/// `sdflow run PROGRAM --ranks N --backend BACKEND EXTRA…` as arguments.
fn run_args(program: &std::path::Path, ranks: usize, backend: &str, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["run", &program.to_string_lossy(), "--ranks"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.push(ranks.to_string());
    args.push("--backend".into());
    args.push(backend.into());
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn mpi_ranks_give_the_interpreters_bits() {
    ranks_give_the_interpreters_bits(
        "cpu",
        &[
            ([1, 1], [true, true], true),
            ([2, 1], [false, true], false),
            ([1, 3], [true, false], true),
            ([2, 2], [true, true], true),
            ([2, 2], [false, false], false),
        ],
    );
}

#[test]
fn mpi_ranks_on_the_gpu_give_the_interpreters_bits() {
    // The CUDA backend's exchanges: on the emulated device where no GPU is.
    ranks_give_the_interpreters_bits(
        "cuda",
        &[
            ([1, 1], [true, true], true),
            ([1, 3], [true, false], true),
            ([2, 2], [true, true], true),
            ([2, 2], [false, false], false),
        ],
    );
}

/// The fixture over each decomposition of `cases` (ranks, periodic, corners) on MPI
/// ranks with `backend`, bit for bit against the interpreter's simulated ranks; where
/// periodic with corners, put together, equal to one rank.
#[allow(clippy::type_complexity)]
fn ranks_give_the_interpreters_bits(backend: &str, cases: &[([i64; 2], [bool; 2], bool)]) {
    let dir = scratch(&format!("bits-{backend}"));
    let cache = dir.join("cache");
    let path = |p: &PathBuf| p.to_string_lossy().into_owned();
    let mut whole: Option<HostArray> = None;
    for &(ranks, periodic, corners) in cases {
        let program = variant(&dir, ranks, periodic, corners);
        let n = (ranks[0] * ranks[1]) as usize;
        write_parts(&dir, [ranks[0] as usize, ranks[1] as usize]);
        let inputs = path(&dir.join("in.{rank}.npz"));
        let args = |backend: &str, out: &str| -> Vec<String> {
            [
                "run",
                &path(&program),
                "--ranks",
                &n.to_string(),
                "--backend",
                backend,
                "--inputs",
                &inputs,
                "--outputs",
                &path(&dir.join(out)),
            ]
            .iter()
            .map(|s| s.to_string())
            .collect()
        };
        let interp = Command::new(env!("CARGO_BIN_EXE_sdflow"))
            .args(args("interp", "want.{rank}.npz"))
            .output()
            .unwrap();
        assert!(interp.status.success(), "{}", text(&interp));
        let Some(out) = mpirun(&[(n, args(backend, "got.{rank}.npz"))], &cache) else {
            return;
        };
        assert!(out.status.success(), "{ranks:?}: {}", text(&out));
        let read = |name: String| sdflow::npz::read_npz(&dir.join(name)).unwrap();
        let mut gots = Vec::new();
        for r in 0..n {
            let want = read(format!("want.{r}.npz"));
            let got = read(format!("got.{r}.npz"));
            for k in ["out", "u"] {
                assert_eq!(got[k].bits(), want[k].bits(), "{ranks:?} rank {r} '{k}'");
            }
            gots.push(got["out"].clone());
        }
        // Periodic with corners: the parts put together are the program on one rank.
        if periodic == [true, true] && corners {
            let g = gather(&gots, &[12, 9], [ranks[0] as usize, ranks[1] as usize], 1);
            match &whole {
                None => whole = Some(g),
                Some(w) => assert_eq!(g.bits(), w.bits(), "{ranks:?} against one rank"),
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn one_rank_builds_the_others_load() {
    let dir = scratch("build");
    let cache = dir.join("cache");
    let args: Vec<String> = [
        "run",
        &fixture().to_string_lossy(),
        "--ranks",
        "2x2",
        "--backend",
        "cpu",
        "-s",
        "NI=6",
        "-s",
        "NJ=5",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for (built, loaded) in [(1, 3), (0, 4)] {
        let Some(out) = mpirun(&[(4, args.clone())], &cache) else {
            return;
        };
        let t = text(&out);
        assert!(out.status.success(), "{t}");
        assert_eq!(t.matches("program 'stencil' built").count(), built, "{t}");
        assert_eq!(
            t.matches("program 'stencil' loaded from the cache").count(),
            loaded,
            "{t}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_failing_rank_stops_every_rank_with_its_message() {
    for backend in ["cpu", "cuda"] {
        a_failing_rank(backend);
    }
}

fn a_failing_rank(backend: &str) {
    let dir = scratch(&format!("fail-{backend}"));
    write_parts(&dir, [2, 2]);
    // Rank 2's 'u' is of another element type: its call fails when it binds.
    let p = dir.join("in.2.npz");
    let mut arrays = sdflow::npz::read_npz(&p).unwrap();
    let shape = arrays["u"].shape().to_vec();
    arrays.insert("u".into(), HostArray::zeros(DType::I64, &shape));
    sdflow::npz::write_npz(&p, &arrays).unwrap();
    let args: Vec<String> = [
        "run",
        &fixture().to_string_lossy(),
        "--ranks",
        "4",
        "--backend",
        backend,
        "--inputs",
        &dir.join("in.{rank}.npz").to_string_lossy(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let Some(out) = mpirun(&[(4, args)], &dir.join("cache")) else {
        return;
    };
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(
        t.contains("error: rank 2: program 'stencil': 'u'") && t.contains("i64"),
        "{t}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn ranks_that_disagree_are_stopped_at_the_start() {
    for backend in ["cpu", "cuda"] {
        ranks_that_disagree(backend);
    }
}

fn ranks_that_disagree(backend: &str) {
    let dir = scratch(&format!("disagree-{backend}"));
    let cache = dir.join("cache");
    let run = |p: &PathBuf, n: &str| -> Vec<String> {
        [
            "run",
            &p.to_string_lossy(),
            "--ranks",
            n,
            "--backend",
            backend,
            "-s",
            "NI=4",
            "-s",
            "NJ=4",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    // Two ranks with one decomposition, two with another.
    let bounded = variant(&dir, [2, 2], [false, false], true);
    let Some(out) = mpirun(
        &[(2, run(&fixture(), "4")), (2, run(&bounded, "4"))],
        &cache,
    ) else {
        return;
    };
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(
        t.contains("runs program 'stencil' (out: f64, u: f64), exchange #0 of u over 2x2 ranks (")
            && t.contains("another program or decomposition: every rank must run the same program"),
        "{t}"
    );
    // A program over 2 x 2 ranks on 2.
    let Some(out) = mpirun(&[(2, run(&fixture(), "2"))], &cache) else {
        return;
    };
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(
        t.contains("halo exchange #0 of 'u' is over 2 x 2 = 4 ranks, but the program runs on 2: start it with `mpirun -n 4`"),
        "{t}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `tests/distributed/ring.sdfg.json` over `ranks` ranks, written to `dir`, and each
/// rank's arguments for a ring of `n` cells split into blocks (its cells in order, then
/// the cell before and the cell after its block, owned by the neighbours) written to
/// `dir/in.{r}.npz`; the owners as `i32` (the lists may be of any integer type).
fn ring(dir: &std::path::Path, n: usize, ranks: usize) -> PathBuf {
    let fixture =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/distributed/ring.sdfg.json");
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
    doc["states"][0]["nodes"][0]["halo_exchange"]["decomposition"]["unstructured"]["ranks"] =
        serde_json::json!(ranks);
    let program = dir.join(format!("ring-{ranks}.sdfg.json"));
    std::fs::write(&program, serde_json::to_string(&doc).unwrap()).unwrap();
    let block = n / ranks;
    for r in 0..ranks {
        let (lo, hi) = (r * block, if r + 1 == ranks { n } else { (r + 1) * block });
        let mut cells: Vec<usize> = (lo..hi).collect();
        if ranks > 1 {
            cells.push((lo + n - 1) % n);
            cells.push(hi % n);
        }
        let nl = cells.len();
        let local = |g: usize| cells.iter().position(|&c| c == g).unwrap() as i64;
        let mut u = Vec::new();
        let mut nb = Vec::new();
        for (l, &g) in cells.iter().enumerate() {
            let owned = l < hi - lo;
            for k in 0..3 {
                u.push(if owned {
                    ((g * 7 + k * 3) % 11) as f64 / 3.0 + (g as f64).cos()
                } else {
                    -1e9
                });
            }
            let (a, b) = if owned {
                (local((g + n - 1) % n), local((g + 1) % n))
            } else {
                (0, 0)
            };
            nb.extend([Value::I64(a), Value::I64(b)]);
        }
        let ints = |dtype: DType, v: Vec<i64>| {
            let v: Vec<Value> = v.into_iter().map(|x| Value::I64(x).cast(dtype)).collect();
            HostArray::from_values(dtype, &[v.len()], &v).unwrap()
        };
        let mut arrays = std::collections::BTreeMap::new();
        arrays.insert("u".to_string(), HostArray::from_f64(&[nl, 3], u).unwrap());
        arrays.insert("out".to_string(), HostArray::zeros(DType::F64, &[nl, 3]));
        arrays.insert(
            "glob".to_string(),
            ints(DType::I64, cells.iter().map(|&g| g as i64).collect()),
        );
        arrays.insert(
            "own".to_string(),
            ints(
                DType::I32,
                cells
                    .iter()
                    .map(|&g| (g / block).min(ranks - 1) as i64)
                    .collect(),
            ),
        );
        arrays.insert(
            "nb".to_string(),
            HostArray::from_values(DType::I64, &[nl, 2], &nb).unwrap(),
        );
        arrays.insert(
            "NO".to_string(),
            HostArray::scalar(Value::I64((hi - lo) as i64)),
        );
        sdflow::npz::write_npz(&dir.join(format!("in.{r}.npz")), &arrays).unwrap();
    }
    program
}

#[test]
fn an_unstructured_exchange_on_mpi_ranks_gives_the_interpreters_bits() {
    unstructured_on_mpi_ranks("cpu");
}

#[test]
fn an_unstructured_exchange_on_gpu_ranks_gives_the_interpreters_bits() {
    unstructured_on_mpi_ranks("cuda");
}

/// The ring on 2 and 3 MPI ranks with `backend`, bit for bit the interpreter's ranks;
/// and a cell whose stated owner does not own it, reported by that owner.
fn unstructured_on_mpi_ranks(backend: &str) {
    let dir = scratch(&format!("ring-{backend}"));
    let path = |p: &PathBuf| p.to_string_lossy().into_owned();
    for ranks in [2, 3] {
        let program = ring(&dir, 12, ranks);
        let args = |backend: &str, out: &str| -> Vec<String> {
            [
                "run",
                &path(&program),
                "--ranks",
                &ranks.to_string(),
                "--backend",
                backend,
                "--inputs",
                &path(&dir.join("in.{rank}.npz")),
                "--outputs",
                &path(&dir.join(out)),
            ]
            .iter()
            .map(|s| s.to_string())
            .collect()
        };
        let interp = Command::new(env!("CARGO_BIN_EXE_sdflow"))
            .args(args("interp", "want.{rank}.npz"))
            .output()
            .unwrap();
        assert!(interp.status.success(), "{}", text(&interp));
        let Some(out) = mpirun(
            &[(ranks, args(backend, "got.{rank}.npz"))],
            &dir.join("cache"),
        ) else {
            return;
        };
        assert!(out.status.success(), "{ranks} ranks: {}", text(&out));
        for r in 0..ranks {
            let read = |name: String| sdflow::npz::read_npz(&dir.join(name)).unwrap();
            let (want, got) = (read(format!("want.{r}.npz")), read(format!("got.{r}.npz")));
            for k in ["out", "u"] {
                assert_eq!(
                    got[k].bits(),
                    want[k].bits(),
                    "{ranks} ranks, rank {r}, '{k}'"
                );
            }
            // The halo was filled (no garbage left).
            assert!(got["u"].to_f64_vec().iter().all(|v| v.abs() < 1e6));
        }
    }
    // Rank 1's halo cell 4 (global 3) said to be owned by rank 2, which does not own it:
    // rank 2 finds it when the schedule is made and stops every rank.
    let program = ring(&dir, 12, 3);
    let p = dir.join("in.1.npz");
    let mut arrays = sdflow::npz::read_npz(&p).unwrap();
    arrays.get_mut("own").unwrap().set(&[4], Value::I32(2));
    sdflow::npz::write_npz(&p, &arrays).unwrap();
    let args: Vec<String> = [
        "run",
        &path(&program),
        "--ranks",
        "3",
        "--backend",
        backend,
        "--inputs",
        &path(&dir.join("in.{rank}.npz")),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let Some(out) = mpirun(&[(3, args)], &dir.join("cache")) else {
        return;
    };
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    // The C backend makes the schedule before its first state, the CUDA backend at the
    // exchange's start.
    assert!(
        t.contains("error: rank 2: program 'ring': sdfg 'ring'")
            && t.contains("cell 4 (global 3) of rank 1 is not among the cells rank 2 owns"),
        "{t}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A run that fails between an exchange's start and its finish (one rank: the error is
/// returned) leaves its messages posted; the next call waits for them and runs to the
/// interpreter's bits.
#[test]
fn a_call_after_a_failed_one_completes_the_left_messages() {
    use sdflow::ir::{HaloExchange, SdfgBuilder};
    if !common::have_mpi() {
        return;
    }
    let mut b = SdfgBuilder::new("retry");
    b.symbol("N", DType::I64)
        .array("u", DType::F64, ["N + 2", "N + 2"])
        .array("out", DType::F64, ["N + 2", "N + 2"])
        .array("v", DType::F64, ["N"])
        .array("tab", DType::I64, ["1"])
        .array("w", DType::F64, ["1"]);
    b.state("exchange", |s| {
        s.halo_exchange(
            &["u"],
            HaloExchange {
                decomposition: sdflow::ir::Decomposition::Structured {
                    ranks: [1, 1],
                    width: 1,
                    periodic: [true, true],
                    corners: true,
                },
            },
        );
    });
    b.state("gather", |s| {
        s.map("gather", &["k"], &["0:1"], |m| {
            m.tasklet("g", &[("a", "v[tab[k]]")], &[("o", "w[k]")], "o = a");
        });
    });
    b.state("apply", |s| {
        s.map("lap", &["i", "j"], &["1:N+1", "1:N+1"], |m| {
            m.tasklet(
                "lap",
                &[("a", "u[i - 1, j]"), ("b", "u[i + 1, j + 1]")],
                &[("o", "out[i, j]")],
                "o = a - b",
            );
        });
    });
    let s = b.build();
    assert_eq!(s.validate(), Ok(()));
    let n = 6;
    let bindings = |tab: i64| {
        let mut b = Bindings::default();
        let u: Vec<f64> = (0..(n + 2) * (n + 2)).map(|k| (k % 7) as f64).collect();
        b.arrays
            .insert("u".into(), HostArray::from_f64(&[n + 2, n + 2], u).unwrap());
        b.arrays
            .insert("out".into(), HostArray::zeros(DType::F64, &[n + 2, n + 2]));
        b.arrays
            .insert("v".into(), HostArray::from_f64(&[n], vec![1.5; n]).unwrap());
        b.arrays.insert(
            "tab".into(),
            HostArray::from_values(DType::I64, &[1], &[Value::I64(tab)]).unwrap(),
        );
        b.arrays
            .insert("w".into(), HostArray::zeros(DType::F64, &[1]));
        b.symbols.insert("N".into(), Value::I64(n as i64));
        b
    };
    let dir = scratch("retry");
    let prog = sdflow::codegen::CpuBackend {
        cache: Some(sdflow::codegen::Cache::at(dir.join("cache"))),
        ..Default::default()
    }
    .build(&s)
    .unwrap();
    let mut bad = bindings(n as i64 + 5);
    let e = prog.run_bindings(&mut bad).unwrap_err().to_string();
    assert!(e.contains("out of bounds"), "{e}");
    let mut good = bindings(2);
    prog.run_bindings(&mut good).unwrap();
    let mut want = bindings(2);
    sdflow::ir::interp::run(&s, &mut want).unwrap();
    assert_eq!(good.arrays["out"].bits(), want.arrays["out"].bits());
    assert_eq!(good.arrays["w"].bits(), want.arrays["w"].bits());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_gpu_exchange_is_enqueued_in_stream_order_and_never_waits() {
    use sdflow::codegen::Origin;
    use sdflow::codegen::cuda::device::{Call, DeviceHandle, RecordingDevice};
    use sdflow::codegen::cuda::exec::{DeviceArgs, GpuProgram};
    if !common::have_mpi() {
        return;
    }
    // One rank, periodic: every neighbour is this rank.
    let dir = scratch("gpu-order");
    let program = variant(&dir, [1, 1], [true, true], true);
    let s = cli::load_program(&program).unwrap();
    let prog = sdflow::codegen::cuda::emit::emit_cuda(&s, &Default::default()).unwrap();
    let names: Vec<String> = prog.kernels.iter().map(|k| k.name.clone()).collect();
    let handle = DeviceHandle::new(RecordingDevice::new((9, 0)));
    // The recording device records launches without running them: any image will do.
    let mut p = GpuProgram::load(&s, prog, b"image", &handle, Origin::Built).unwrap();
    let (ni, nj) = (6usize, 5usize);
    let u = HostArray::from_f64(&[ni + 2, nj + 2], vec![1.0; (ni + 2) * (nj + 2)]).unwrap();
    let out = HostArray::zeros(DType::F64, &[ni + 2, nj + 2]);
    let (du, dout) = (p.upload("u", &u).unwrap(), p.upload("out", &out).unwrap());
    let args = DeviceArgs::new()
        .array("u", &du)
        .array("out", &dout)
        .int("NI", ni as i64)
        .int("NJ", nj as i64);
    let call = p.bind(args).unwrap();
    // Launched one by one first; captured and replayed below.
    p.set_graphs(false);
    for round in 0..2 {
        let calls = |h: &DeviceHandle| {
            h.lock()
                .as_any()
                .downcast_ref::<RecordingDevice>()
                .unwrap()
                .calls()
                .to_vec()
        };
        let before = calls(&handle).len();
        let done = p.call_bound(&call).unwrap();
        let log: Vec<String> = calls(&handle)[before..]
            .iter()
            .filter_map(|c| match c {
                Call::Launch(l) => Some(l.kernel.clone()),
                Call::CopyD2HAsync { .. } => Some("to host".into()),
                Call::CopyH2DAsync { .. } => Some("to device".into()),
                Call::HostFn => Some("host fn".into()),
                Call::Alloc { .. } => Some("alloc".into()),
                Call::Synchronize | Call::CopyD2H { .. } => Some("wait".into()),
                Call::BeginCapture => Some("capture".into()),
                Call::Replay(_) => Some("replay".into()),
                _ => None,
            })
            .collect();
        let mut want: Vec<String> = Vec::new();
        if round == 0 {
            // The exchange's buffers, allocated at the first call and kept.
            want.extend(["alloc", "alloc"].map(String::from));
        }
        want.extend(
            [
                names[0].as_str(), // pack
                "to host",
                "host fn",    // post
                "sdf_k1_0_0", // the stencil's interior
                "host fn",    // wait
                "to device",
                "sdf_k1_1",   // unpack
                "sdf_k1_2_0", // the rim's 4 boxes
                "sdf_k1_2_1",
                "sdf_k1_2_2",
                "sdf_k1_2_3",
                "sdf_status_peek",
            ]
            .map(String::from),
        );
        assert_eq!(log, want, "call {round}");
        p.wait(done).unwrap();
    }
    // As a graph: the first call captures it (the same steps) and replays it, the next
    // ones only replay it — host functions and host copies included.
    p.set_graphs(true);
    for round in 0..3 {
        let before = handle
            .lock()
            .as_any()
            .downcast_ref::<RecordingDevice>()
            .unwrap()
            .calls()
            .len();
        let done = p.call_bound(&call).unwrap();
        let d = handle.lock();
        let rec = d.as_any().downcast_ref::<RecordingDevice>().unwrap();
        let calls = &rec.calls()[before..];
        let captured = calls.iter().any(|c| matches!(c, Call::BeginCapture));
        let replays = calls
            .iter()
            .filter(|c| matches!(c, Call::Replay(_)))
            .count();
        let host_fns = calls.iter().filter(|c| matches!(c, Call::HostFn)).count();
        assert_eq!(
            (captured, replays, host_fns),
            if round == 0 {
                (true, 1, 2)
            } else {
                (false, 1, 0)
            },
            "graph call {round}: {calls:?}"
        );
        drop(d);
        p.wait(done).unwrap();
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn ranks_whose_parts_do_not_fit_together_stop_with_the_exchanges_message() {
    for backend in ["cpu", "cuda"] {
        let dir = scratch(&format!("misfit-{backend}"));
        // Side by side over 2 x 1 ranks, bounded: rank 1's block has one column fewer,
        // so the strips the two send each other differ in size.
        let program = variant(&dir, [2, 1], [false, false], true);
        for (r, nj) in [(0, 7usize), (1, 6)] {
            let mut arrays = std::collections::BTreeMap::new();
            let shape = [6, nj];
            arrays.insert("out".to_string(), HostArray::zeros(DType::F64, &shape));
            arrays.insert(
                "u".to_string(),
                HostArray::from_f64(&shape, vec![1.0; 6 * nj]).unwrap(),
            );
            sdflow::npz::write_npz(&dir.join(format!("in.{r}.npz")), &arrays).unwrap();
        }
        let inputs = dir.join("in.{rank}.npz");
        let args = run_args(
            &program,
            2,
            backend,
            &["--inputs", &inputs.to_string_lossy()],
        );
        let Some(out) = mpirun(&[(2, args)], &dir.join("cache")) else {
            return;
        };
        let t = text(&out);
        assert!(!out.status.success(), "{backend}: {t}");
        // The rank whose receive was the larger counts the bytes; the other's receive
        // overflows (MPI truncates it): whichever stops the run first says why.
        assert!(
            t.contains("error: rank ")
                && t.contains("program 'stencil': sdfg 'stencil' / state 'apply' / halo exchange #0: the message of 'u' from the neighbour at")
                && (t.contains("from the neighbour at (1, 0) has 32 bytes, 40 expected: the ranks' parts of the fields do not fit together")
                    || t.contains("from the neighbour at (-1, 0) failed: MPI error")),
            "{backend}: {t}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}

#[test]
fn cpu_and_gpu_ranks_run_one_program_together() {
    // The two backends' messages are the same bytes: two ranks on the C backend and two
    // on the CUDA backend (the emulated device where no GPU is) run the fixture together.
    let dir = scratch("mixed");
    write_parts(&dir, [2, 2]);
    let path = |p: PathBuf| p.to_string_lossy().into_owned();
    let args = |backend: &str, out: &str| -> Vec<String> {
        run_args(
            &fixture(),
            4,
            backend,
            &[
                "--inputs",
                &path(dir.join("in.{rank}.npz")),
                "--outputs",
                &path(dir.join(out)),
            ],
        )
    };
    let interp = Command::new(env!("CARGO_BIN_EXE_sdflow"))
        .args(args("interp", "want.{rank}.npz"))
        .output()
        .unwrap();
    assert!(interp.status.success(), "{}", text(&interp));
    let Some(out) = mpirun(
        &[
            (2, args("cpu", "got.{rank}.npz")),
            (2, args("cuda", "got.{rank}.npz")),
        ],
        &dir.join("cache"),
    ) else {
        return;
    };
    assert!(out.status.success(), "{}", text(&out));
    for r in 0..4 {
        let want = sdflow::npz::read_npz(&dir.join(format!("want.{r}.npz"))).unwrap();
        let got = sdflow::npz::read_npz(&dir.join(format!("got.{r}.npz"))).unwrap();
        assert_eq!(got["out"].bits(), want["out"].bits(), "rank {r}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn gpu_lists_changed_in_place_are_an_error_and_new_lists_a_new_schedule() {
    use sdflow::codegen::cuda::device::{DeviceHandle, EmulatedDevice};
    use sdflow::codegen::cuda::exec::{CudaBackend, DeviceArgs};
    if !common::have_mpi() {
        return;
    }
    let dir = scratch("gpu-lists");
    let program = ring(&dir, 6, 1);
    let s = cli::load_program(&program).unwrap();
    let handle = DeviceHandle::new(EmulatedDevice::with_threads(1));
    let mut p = CudaBackend::default().build(&s, &handle).unwrap();
    let inputs = sdflow::npz::read_npz(&dir.join("in.0.npz")).unwrap();
    let up =
        |p: &sdflow::codegen::cuda::exec::GpuProgram, k: &str| p.upload(k, &inputs[k]).unwrap();
    let (u, out, own, nb) = (up(&p, "u"), up(&p, "out"), up(&p, "own"), up(&p, "nb"));
    let mut glob = up(&p, "glob");
    let call = |p: &mut sdflow::codegen::cuda::exec::GpuProgram,
                glob: &sdflow::codegen::cuda::array::DeviceArray| {
        let args = DeviceArgs::new()
            .array("u", &u)
            .array("out", &out)
            .array("own", &own)
            .array("nb", &nb)
            .array("glob", glob)
            .int("NL", 6)
            .int("NO", 6);
        let done = p.call(args).unwrap();
        p.wait(done)
    };
    call(&mut p, &glob).unwrap();
    // The global indices rewritten in the same device array.
    let mut moved = inputs["glob"].clone();
    moved.set(&[0], Value::I64(100));
    glob.copy_from_host(&moved).unwrap();
    let e = call(&mut p, &glob)
        .expect_err("lists changed in place")
        .to_string();
    assert!(
        e.contains("program 'ring': sdfg 'ring' / state 'exchange' / halo exchange #0: the lists 'glob' and 'own' were changed in place since the exchange's schedule was made from them"),
        "{e}"
    );
    // In another array, they make a new schedule.
    let fresh = p.upload("glob", &moved).unwrap();
    call(&mut p, &fresh).unwrap();
    std::fs::remove_dir_all(&dir).ok();
}

/// Random programs of the generator with halo exchanges (structured over 2 × 2 ranks,
/// unstructured over 4), on 4 MPI ranks with the C and the CUDA backend: every rank's
/// arrays bit for bit the interpreter's simulated ranks'. `per_config` programs of each
/// kind that the interpreter runs.
#[test]
fn random_programs_with_exchanges_on_mpi_ranks_give_the_interpreters_bits() {
    use sdflow::ir::testkit::{GenConfig, first_difference, generate, sample_symbols};
    use sdflow::ir::{Decomposition, interp::random_bindings};
    if !common::have_mpi() {
        return;
    }
    let per_config = 3;
    let structured = GenConfig {
        exchange: Some(Decomposition::Structured {
            ranks: [2, 2],
            width: 1,
            periodic: [true, false],
            corners: true,
        }),
        ..GenConfig::default()
    };
    let unstructured = GenConfig {
        exchange: Some(Decomposition::Unstructured {
            ranks: 4,
            global: "glob".into(),
            owner: "own".into(),
        }),
        ..GenConfig::default()
    };
    let has_exchange = |s: &sdflow::ir::Sdfg| {
        s.states.iter().any(|st| {
            st.graph.node_ids().into_iter().any(|n| {
                matches!(
                    st.graph.node(n),
                    sdflow::ir::Node::Library(sdflow::ir::LibraryNode::HaloExchange(_))
                )
            })
        })
    };
    let dir = scratch("random");
    let mut tried = 0;
    for (kind, cfg) in [("structured", structured), ("unstructured", unstructured)] {
        let mut done = 0;
        for seed in 0..200u64 {
            if done == per_config {
                break;
            }
            let s = generate(seed, &cfg);
            if !has_exchange(&s) {
                continue;
            }
            let symbols = sample_symbols(&s);
            let inputs: Vec<Bindings> = (0..4)
                .map(|r| {
                    let mut b = random_bindings(&s, &symbols, 11 + r).unwrap();
                    ring_lists(&mut b, r as usize);
                    b
                })
                .collect();
            let mut want = inputs.clone();
            if run_ranks(&s, &mut want).is_err() {
                continue;
            }
            done += 1;
            let program = dir.join(format!("{kind}-{seed}.sdfg.json"));
            std::fs::write(&program, sdflow::ir::format::to_json(&s)).unwrap();
            for (r, b) in inputs.iter().enumerate() {
                let mut arrays = b.arrays.clone();
                for (k, v) in &b.symbols {
                    arrays.insert(k.clone(), HostArray::scalar(*v));
                }
                sdflow::npz::write_npz(&dir.join(format!("in.{r}.npz")), &arrays).unwrap();
            }
            for backend in ["cpu", "cuda"] {
                let (inputs, outputs) = (dir.join("in.{rank}.npz"), dir.join("out.{rank}.npz"));
                let args = run_args(
                    &program,
                    4,
                    backend,
                    &[
                        "--inputs",
                        &inputs.to_string_lossy(),
                        "--outputs",
                        &outputs.to_string_lossy(),
                    ],
                );
                let Some(out) = mpirun(&[(4, args)], &dir.join("cache")) else {
                    return;
                };
                assert!(
                    out.status.success(),
                    "{kind} seed {seed}, {backend}: {}",
                    text(&out)
                );
                for (r, w) in want.iter().enumerate() {
                    let got = Bindings {
                        arrays: sdflow::npz::read_npz(&dir.join(format!("out.{r}.npz"))).unwrap(),
                        symbols: w.symbols.clone(),
                    };
                    if let Some(d) = first_difference(&s, w, &got) {
                        panic!("{kind} seed {seed}, {backend}, rank {r}: {d}");
                    }
                }
            }
        }
        assert_eq!(done, per_config, "{kind}: too few generated programs ran");
        tried += done;
    }
    assert_eq!(tried, 2 * per_config);
    std::fs::remove_dir_all(&dir).ok();
}

/// Rank `r`'s lists `glob` and `own` of 4 ranks around a ring, where the program has them:
/// the first `n - 2` cells its own, the last two the first two of rank `r + 1`.
fn ring_lists(inputs: &mut Bindings, r: usize) {
    let (Some(g), Some(o)) = (inputs.arrays.get("glob"), inputs.arrays.get("own")) else {
        return;
    };
    let n = g.shape()[0];
    let (halo, next) = (if n >= 4 { 2 } else { 0 }, (r + 1) % 4);
    let owned = n - halo;
    let (mut glob, mut own) = (g.clone(), o.clone());
    for l in 0..n {
        let (gl, ow) = if l < owned {
            (r * owned + l, r)
        } else {
            (next * owned + (l - owned), next)
        };
        glob.set(&[l], Value::I64(gl as i64));
        own.set(&[l], Value::I32(ow as i32));
    }
    inputs.arrays.insert("glob".into(), glob);
    inputs.arrays.insert("own".into(), own);
}
