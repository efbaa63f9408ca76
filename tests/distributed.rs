//! A program with a halo exchange (`tests/distributed/halo_stencil.sdfg.json`: a 9-point
//! stencil on a field split over 2 × 2 ranks) as a user meets it today: it loads,
//! validates and is drawn; the interpreter runs it over simulated ranks, optimized or
//! not, to the same bits; the compiled backends refuse it with a clear error (the MPI
//! lowering is not built yet).

use std::path::PathBuf;
use std::process::Command;

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
fn the_backends_refuse_an_exchange_with_a_clear_error() {
    let s = cli::load_program(&fixture()).unwrap();
    let e = sdflow::codegen::CpuBackend {
        cache: None,
        ..Default::default()
    }
    .build(&s)
    .err()
    .expect("refused")
    .to_string();
    assert!(
        e.contains("state 'exchange' exchanges halos over 4 ranks: the interpreter runs it over simulated ranks (`interp::run_ranks`); the backends do not lower halo exchanges yet"),
        "{e}"
    );
    let out = sdflow(&["show"], &["--emit", "dot"]);
    assert!(out.status.success());
    let dot = String::from_utf8_lossy(&out.stdout);
    assert!(
        dot.contains("halo exchange\\n2x2 ranks (periodic, periodic, corners), width 1"),
        "{dot}"
    );
    let out = sdflow(&["show"], &["--emit", "c"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the backends do not lower halo exchanges yet"),
        "{err}"
    );
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
            "--ranks runs on the interpreter (--backend interp): the backends do not lower halo exchanges yet",
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
