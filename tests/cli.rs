//! The `sdflow` binary, run as a user would.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ndarray::{ArrayD, IxDyn};
use sdflow::ir::interp::HostArray;
use sdflow::npz;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn sdflow(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sdflow"))
        .args(args)
        .current_dir(root())
        .output()
        .unwrap()
}

fn sdflow_env(args: &[&str], key: &str, value: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sdflow"))
        .args(args)
        .env(key, value)
        .current_dir(root())
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn tmp(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

const EXAMPLES: [&str; 5] = [
    "laplace",
    "hyperdiffusion",
    "tridiagonal",
    "flag_if",
    "dycore",
];

#[test]
fn validate_accepts_every_example() {
    for ex in EXAMPLES {
        let o = sdflow(&["validate", &format!("examples/{ex}.sdfg.json")]);
        assert!(o.status.success(), "{ex}: {}", stderr(&o));
        assert!(
            stdout(&o).contains(&format!("valid SDFG '{ex}'")),
            "{}",
            stdout(&o)
        );
    }
}

#[test]
fn validate_lists_problems_and_exits_1() {
    let bad = tmp("bad.sdfg.json");
    let text = std::fs::read_to_string(root().join("examples/laplace.sdfg.json")).unwrap();
    // Point the tasklet's output at an undeclared array.
    std::fs::write(
        &bad,
        text.replace("\"memlet\": \"out[i, j]\"", "\"memlet\": \"outt[i, j]\""),
    )
    .unwrap();
    let o = sdflow(&["validate", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("problem(s)"), "{err}");
    assert!(err.contains("'outt'"), "{err}");
    assert!(err.contains("state 'main'"), "{err}");
}

#[test]
fn malformed_json_reports_where() {
    let bad = tmp("trunc.sdfg.json");
    let text = std::fs::read_to_string(root().join("examples/laplace.sdfg.json")).unwrap();
    std::fs::write(&bad, &text[..text.len() / 2]).unwrap();
    let o = sdflow(&["validate", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("trunc.sdfg.json"), "{}", stderr(&o));
    let o = sdflow(&["stats", "examples/missing.sdfg.json"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("examples/missing.sdfg.json"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn stats_prints_key_value_lines() {
    let o = sdflow(&["stats", "examples/hyperdiffusion.sdfg.json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    for line in [
        "states: 1",
        "maps: 2",
        "tasklets: 2",
        "transients: 1",
        "array lap: f64[N, N] transient",
        "array u: f64[N, N]",
        "symbol alpha: f64",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
}

#[test]
fn dot_writes_parsable_dot() {
    for ex in EXAMPLES {
        let o = sdflow(&["dot", &format!("examples/{ex}.sdfg.json")]);
        assert!(o.status.success(), "{ex}: {}", stderr(&o));
        graphviz_rust::parse(&stdout(&o)).unwrap_or_else(|e| panic!("{ex}: {e}"));
    }
    let out = tmp("lap.dot");
    let o = sdflow(&[
        "dot",
        "examples/laplace.sdfg.json",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success());
    assert!(
        std::fs::read_to_string(&out)
            .unwrap()
            .starts_with("digraph \"laplace\"")
    );
}

#[test]
fn dot_svg_needs_graphviz_and_says_so() {
    let o = sdflow_env(
        &["dot", "examples/laplace.sdfg.json", "--svg"],
        "SDFLOW_DOT",
        "/nonexistent/dot",
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o)
            .contains("--svg needs Graphviz's '/nonexistent/dot' program, which was not found"),
        "{}",
        stderr(&o)
    );
    let have_dot = Command::new("dot").arg("-V").output().is_ok();
    if have_dot {
        let o = sdflow(&["dot", "examples/laplace.sdfg.json", "--svg"]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(stdout(&o).contains("<svg"), "{}", stdout(&o));
    } else {
        eprintln!("note: Graphviz 'dot' is not installed; SVG rendering itself was not exercised");
    }
}

fn write_inputs(path: &Path, n: usize) {
    let u: Vec<f64> = (0..n * n)
        .map(|p| ((p / n).pow(2) + 2 * (p % n).pow(2)) as f64)
        .collect();
    let mut arrays = std::collections::BTreeMap::new();
    arrays.insert(
        "u".to_string(),
        HostArray::F64(ArrayD::from_shape_vec(IxDyn(&[n, n]), u).unwrap()),
    );
    arrays.insert(
        "out".to_string(),
        HostArray::F64(ArrayD::zeros(IxDyn(&[n, n]))),
    );
    npz::write_npz(path, &arrays).unwrap();
}

#[test]
fn run_with_npz_inputs_and_outputs() {
    let inp = tmp("lap_in.npz");
    let outp = tmp("lap_out.npz");
    write_inputs(&inp, 6);
    let o = sdflow(&[
        "run",
        "examples/laplace.sdfg.json",
        "--inputs",
        inp.to_str().unwrap(),
        "--outputs",
        outp.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    // 16 interior points of value 6, border 0: sum 96, L2 sqrt(16 * 36) = 24.
    assert_eq!(stdout(&o), "out: f64[6, 6] sum=9.6e1 l2=2.4e1\n");
    let back = npz::read_npz(&outp).unwrap();
    let HostArray::F64(out) = &back["out"] else {
        panic!("out is not f64")
    };
    assert_eq!(out[[1, 1]], 6.0);
    assert_eq!(out[[0, 3]], 0.0);
    // Inputs pass through unchanged.
    assert_eq!(back["u"], npz::read_npz(&inp).unwrap()["u"]);
}

#[test]
fn run_with_random_inputs_is_deterministic() {
    let a = sdflow(&[
        "run",
        "examples/hyperdiffusion.sdfg.json",
        "-s",
        "N=16",
        "-s",
        "alpha=0.1",
        "--seed",
        "5",
    ]);
    let b = sdflow(&[
        "run",
        "examples/hyperdiffusion.sdfg.json",
        "--symbol",
        "N=16",
        "--symbol",
        "alpha=0.1",
        "--seed",
        "5",
    ]);
    let c = sdflow(&[
        "run",
        "examples/hyperdiffusion.sdfg.json",
        "-s",
        "N=16",
        "-s",
        "alpha=0.1",
        "--seed",
        "6",
    ]);
    assert!(a.status.success(), "{}", stderr(&a));
    assert_eq!(stdout(&a), stdout(&b));
    assert_ne!(stdout(&a), stdout(&c));
    assert!(
        stdout(&a).starts_with("out: f64[16, 16] sum="),
        "{}",
        stdout(&a)
    );
}

#[test]
fn run_reports_bad_symbols_and_missing_values() {
    let o = sdflow(&["run", "examples/laplace.sdfg.json", "-s", "M=3"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("the program has no symbol 'M'"),
        "{}",
        stderr(&o)
    );
    let o = sdflow(&["run", "examples/laplace.sdfg.json", "-s", "N=abc"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("N=abc: not a valid i64 value"),
        "{}",
        stderr(&o)
    );
    let o = sdflow(&["run", "examples/laplace.sdfg.json"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("'N'"), "{}", stderr(&o));
    let o = sdflow(&["run", "examples/laplace.sdfg.json", "-s", "N"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("expected NAME=VALUE"), "{}", stderr(&o));
}

#[test]
fn every_command_works_on_every_example() {
    let symbols: [(&str, &[&str]); 4] = [
        ("laplace", &["N=8"]),
        ("hyperdiffusion", &["N=8", "alpha=0.5"]),
        ("tridiagonal", &["NX=2", "NY=3", "NZ=5"]),
        ("flag_if", &["N=4", "mode=1"]),
    ];
    let outputs = [
        "out: f64[8, 8] sum=",
        "out: f64[8, 8] sum=",
        "x: f64[2, 3, 5] sum=",
        "out: f64[4] sum=",
    ];
    for ((ex, syms), expect) in symbols.iter().zip(outputs) {
        let file = format!("examples/{ex}.sdfg.json");
        let o = sdflow(&["stats", &file]);
        assert!(o.status.success(), "{ex}: {}", stderr(&o));
        assert!(
            stdout(&o).starts_with(&format!("name: {ex}\nstates: ")),
            "{}",
            stdout(&o)
        );
        let mut args = vec!["run", file.as_str()];
        for s in syms.iter() {
            args.extend(["-s", s]);
        }
        let o = sdflow(&args);
        assert!(o.status.success(), "{ex}: {}", stderr(&o));
        assert!(stdout(&o).starts_with(expect), "{ex}: {}", stdout(&o));
        assert_eq!(stdout(&o).lines().count(), 1, "{ex}: one output");
    }
}

#[test]
fn opt_reports_the_e_graph_and_the_work_per_point() {
    // The GPU pipeline fuses hyperdiffusion by recomputation; the e-graph pass merges
    // the six tasklets and loads each of the 13 distinct neighbours once.
    let out = tmp("hyper_gpu.sdfg.json");
    let o = sdflow(&[
        "opt",
        "examples/hyperdiffusion.sdfg.json",
        "--gpu",
        "-o",
        out.to_str().unwrap(),
        "--report",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report = stdout(&o);
    assert!(
        report.contains("bodies_optimized=1 tasklets_merged=5"),
        "{report}"
    );
    assert!(report.contains("saturation: saturated"), "{report}");
    assert!(
        report.contains("after   flops 32 (divisions 0, special functions 0), loads 13, stores 1"),
        "{report}"
    );
    // Fast math needs the e-graph pass in the pipeline.
    let o = sdflow(&[
        "opt",
        "examples/hyperdiffusion.sdfg.json",
        "--passes",
        "map_fusion",
        "--fast-math",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--fast-math: fast math needs the 'egraph' pass, which this pipeline does not have; the passes are: map_fusion"),
        "{}",
        stderr(&o)
    );
    let o = sdflow(&[
        "opt",
        "examples/dycore.sdfg.json",
        "--fast-math",
        "--report",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("egraph_fast_math"), "{}", stderr(&o));
}

#[test]
fn opt_writes_an_optimized_program_and_reports() {
    let out = tmp("dycore_opt.sdfg.json");
    let o = sdflow(&[
        "opt",
        "examples/dycore.sdfg.json",
        "-o",
        out.to_str().unwrap(),
        "--report",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report = stdout(&o);
    assert!(report.contains("fixed point"), "{report}");
    assert!(report.contains("state_fusion"), "{report}");
    assert!(report.contains("maps_fused="), "{report}");
    // The result is a valid program with fewer maps, and no static flag left.
    let o = sdflow(&["stats", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let maps = |text: &str| -> usize {
        text.lines()
            .find_map(|l| l.strip_prefix("maps: "))
            .unwrap()
            .parse()
            .unwrap()
    };
    let before = stdout(&sdflow(&["stats", "examples/dycore.sdfg.json"]));
    assert!(maps(&stdout(&o)) < maps(&before));
    assert!(!stdout(&o).contains("symbol hyperdiffusion"));

    // Without -o the program goes to standard output, the report to standard error.
    let o = sdflow(&["opt", "examples/hyperdiffusion.sdfg.json", "--report"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).starts_with('{'), "{}", stdout(&o));
    assert!(stderr(&o).contains("round(s)"), "{}", stderr(&o));
    // The hyperdiffusion example's Laplacian of a Laplacian fuses through a tile buffer.
    assert!(
        stderr(&o).contains("'lap1' into 'lap2' through a tile buffer of 16 + 2 rows"),
        "{}",
        stderr(&o)
    );

    let o = sdflow(&[
        "opt",
        "examples/laplace.sdfg.json",
        "--passes",
        "map_fusion,fuse_all",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("unknown pass 'fuse_all'; the passes are: inline_nested, specialize,"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_column_major_program_runs_on_the_cpu_backend_as_on_the_interpreter() {
    // out[i, j] = u[i, j] * 2 + i, both arrays declared column-major (strides [1, N]).
    let mut b = sdflow::ir::SdfgBuilder::new("colmajor");
    b.symbol("N", sdflow::ir::DType::I64)
        .symbol("M", sdflow::ir::DType::I64)
        .array("u", sdflow::ir::DType::F64, ["N", "M"])
        .array("out", sdflow::ir::DType::F64, ["N", "M"]);
    b.state("main", |s| {
        s.map("m", &["i", "j"], &["0:N", "0:M"], |m| {
            m.tasklet(
                "t",
                &[("x", "u[i, j]")],
                &[("o", "out[i, j]")],
                "o = x * 2.0 + f64(i)",
            );
        });
    });
    let mut s = b.build();
    for a in ["u", "out"] {
        if let Some(sdflow::ir::DataDesc::Array(a)) = s.arrays.get_mut(a) {
            a.strides = vec![sdflow::ir::SymExpr::Int(1), sdflow::ir::SymExpr::sym("N")];
        }
    }
    let file = tmp("colmajor.sdfg.json");
    std::fs::write(&file, sdflow::ir::format::to_json(&s)).unwrap();
    let f = file.to_str().unwrap();
    let (oi, oc) = (tmp("colmajor_interp.npz"), tmp("colmajor_cpu.npz"));
    let interp = sdflow(&[
        "run",
        f,
        "-s",
        "N=6",
        "-s",
        "M=4",
        "--outputs",
        oi.to_str().unwrap(),
    ]);
    assert!(interp.status.success(), "{}", stderr(&interp));
    let cpu = sdflow(&[
        "run",
        f,
        "--backend",
        "cpu",
        "-s",
        "N=6",
        "-s",
        "M=4",
        "--outputs",
        oc.to_str().unwrap(),
    ]);
    assert!(cpu.status.success(), "{}", stderr(&cpu));
    assert_eq!(stdout(&interp), stdout(&cpu));
    assert!(
        stdout(&cpu).starts_with("out: f64[6, 4]"),
        "{}",
        stdout(&cpu)
    );
    let (a, b) = (npz::read_npz(&oi).unwrap(), npz::read_npz(&oc).unwrap());
    assert_eq!(a["out"].bits(), b["out"].bits());
    assert_eq!(a["u"].bits(), b["u"].bits());
}

/// 0-d entries of an input archive named like symbols set them, converted exactly: a
/// boolean (GT4Py's flags, imported as `int32` symbols) becomes 0 or 1; a value the
/// symbol's type cannot hold is refused with the file, the name and the type.
#[test]
fn zero_dimensional_inputs_set_symbols_exactly() {
    use sdflow::ir::{DType, SdfgBuilder, Value};
    use std::collections::BTreeMap;
    let mut b = SdfgBuilder::new("flagged");
    b.symbol("N", DType::I64)
        .symbol("flag", DType::I32)
        .array("x", DType::F64, ["N"]);
    let s = b.build();
    let mut arrays = BTreeMap::new();
    arrays.insert("x".to_string(), HostArray::F64(ArrayD::zeros(IxDyn(&[3]))));
    arrays.insert(
        "flag".to_string(),
        HostArray::Bool(ArrayD::from_elem(IxDyn(&[]), true)),
    );
    let p = tmp("flag.npz");
    npz::write_npz(&p, &arrays).unwrap();
    let bound = sdflow::cli::bind_inputs(&s, &p, BTreeMap::new()).unwrap();
    assert_eq!(bound.symbols["flag"], Value::I32(1));
    assert_eq!(bound.symbols["N"], Value::I64(3));
    arrays.insert(
        "flag".to_string(),
        HostArray::I64(ArrayD::from_elem(IxDyn(&[]), 1 << 40)),
    );
    npz::write_npz(&p, &arrays).unwrap();
    let e = sdflow::cli::bind_inputs(&s, &p, BTreeMap::new())
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        format!(
            "{}: 'flag' = 1099511627776 does not fit the symbol's type i32",
            p.display()
        )
    );
}

#[test]
fn show_reports_options_with_their_sources_and_specializes_statics() {
    let cfg = tmp("show_config.toml");
    std::fs::write(
        &cfg,
        "[cpu]\nschedule = \"dynamic\"\n[program.flag_if]\ntile_rows = 4\n[program.flag_if.cpu]\nthreads = 3\n",
    )
    .unwrap();
    let c = cfg.to_str().unwrap();
    let o = sdflow(&[
        "show",
        "examples/flag_if.sdfg.json",
        "--emit",
        "report",
        "--config",
        c,
        "-s",
        "mode=1",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r = stdout(&o);
    let want_lines = [
        "program 'flag_if'".to_string(),
        format!("configuration: {c}"),
        format!("  threads              3                            {c}:6 [program.flag_if.cpu]"),
        format!("  schedule             \"dynamic\"                    {c}:2 [cpu]"),
        format!("  tile_rows            4                            {c}:4 [program.flag_if]"),
        "  fast_math            false                        default".to_string(),
        "step specialize:".to_string(),
        "    specialize           ".to_string(),
    ];
    for l in &want_lines {
        assert!(
            r.lines().any(|x| x.starts_with(l.as_str())),
            "missing {l:?} in\n{r}"
        );
    }
    // The static flag folded the branch: the generated C has one map, the doubling.
    let o = sdflow(&[
        "show",
        "examples/flag_if.sdfg.json",
        "--emit",
        "c",
        "--config",
        c,
        "-s",
        "mode=1",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let src = stdout(&o);
    assert!(src.contains("schedule(dynamic)"), "{src}");
    assert!(
        src.contains("/* map 'double' */") && !src.contains("/* map 'shift' */"),
        "{src}"
    );
    // SDFLOW_CONFIG overrides --config.
    let other = tmp("show_config_env.toml");
    std::fs::write(&other, "[cpu]\nschedule = \"guided\"\n").unwrap();
    let o = sdflow_env(
        &[
            "show",
            "examples/flag_if.sdfg.json",
            "--emit",
            "c",
            "--config",
            c,
        ],
        "SDFLOW_CONFIG",
        other.to_str().unwrap(),
    );
    assert!(stdout(&o).contains("schedule(guided)"), "{}", stderr(&o));
    // Errors: a bad key names the file, line and key; a static that is no symbol.
    std::fs::write(&other, "[cpu]\nthreads = true\n").unwrap();
    let o = sdflow(&[
        "show",
        "examples/flag_if.sdfg.json",
        "--emit",
        "report",
        "--config",
        other.to_str().unwrap(),
    ]);
    assert_eq!(
        stderr(&o).trim(),
        format!(
            "error: {}:2:11: cpu.threads: expected an integer, found boolean",
            other.display()
        )
    );
    let o = sdflow(&["show", "examples/flag_if.sdfg.json", "-s", "M=3"]);
    assert_eq!(
        stderr(&o).trim(),
        "error: --symbol M: the program has no symbol 'M'"
    );
    let o = sdflow(&["show", "examples/flag_if.sdfg.json", "--emit", "ir"]);
    assert_eq!(
        stderr(&o).trim(),
        "error: --emit ir: expected one of c, cuda, plan, sdfg, dot, optimized, report"
    );
}

#[test]
fn bench_prints_time_bandwidth_and_the_ceiling_of_the_same_run() {
    let o = sdflow(&[
        "bench",
        "examples/laplace.sdfg.json",
        "-s",
        "N=128",
        "--reps",
        "3",
        "--threads",
        "1",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 5, "{out}");
    assert_eq!(lines[0], "program: laplace (cpu, 1 threads)");
    assert!(
        lines[1].starts_with("time per call: median ") && lines[1].ends_with(" over 3 calls"),
        "{out}"
    );
    // u is read and out written: 2 × 128² doubles.
    assert!(
        lines[2].starts_with("traffic: 0.3 MB per call (read 0.1 MB, written 0.1 MB): "),
        "{out}"
    );
    assert!(
        lines[3].starts_with("ceiling (this run, 4194304 doubles per array): copy "),
        "{out}"
    );
    assert!(
        lines[4].starts_with("fraction: ") && lines[4].contains("% of copy, "),
        "{out}"
    );
    let o = sdflow(&["bench", "examples/laplace.sdfg.json", "--reps", "0"]);
    assert_eq!(stderr(&o).trim(), "error: --reps must be at least 1");
    let o = sdflow(&[
        "bench",
        "examples/laplace.sdfg.json",
        "-s",
        "N=8",
        "--backend",
        "interp",
    ]);
    assert_eq!(
        stderr(&o).trim(),
        "error: --backend: bench runs compiled code (cpu or cuda)"
    );
}

/// `y = a x` (or `y = 2 x` when `reads_a` is false) with a float symbol `a`.
fn scaled_copy(reads_a: bool) -> String {
    let code = if reads_a { "v = a * u" } else { "v = 2.0 * u" };
    format!(
        r#"{{"sdflow_format": 1, "name": "axpy",
 "symbols": {{"N": {{"dtype": "i64"}}, "a": {{"dtype": "f64"}}}},
 "arrays": {{"x": {{"dtype": "f64", "shape": ["N"]}}, "y": {{"dtype": "f64", "shape": ["N"]}}}},
 "states": [{{"name": "main", "nodes": [{{"access": "x"}}, {{"map": {{"label": "axpy", "params": ["i"], "ranges": ["0:N"],
   "nodes": [{{"access": "x"}}, {{"tasklet": {{"name": "t", "inputs": {{"u": "f64"}}, "outputs": {{"v": "f64"}}, "code": ["{code}"]}}}}, {{"access": "y"}}],
   "edges": [{{"src": 0, "dst": 1, "dst_conn": "u", "memlet": "x[i]"}}, {{"src": 1, "dst": 2, "src_conn": "v", "memlet": "y[i]"}}]}}}}, {{"access": "y"}}],
   "edges": [{{"src": 0, "dst": 1, "memlet": "x[0:N]"}}, {{"src": 1, "dst": 2, "memlet": "y[0:N]"}}]}}],
 "body": {{"state": 0}}}}"#
    )
}

#[test]
fn a_missing_symbol_is_refused_alike_by_the_interpreter_and_the_cpu_backend() {
    // Was: the interpreter ran a program whose float symbol was never read and refused
    // one that read it only when the tasklet ran; the cpu backend refused both.
    for (reads, file) in [(true, "reads_a.sdfg.json"), (false, "ignores_a.sdfg.json")] {
        let p = tmp(file);
        std::fs::write(&p, scaled_copy(reads)).unwrap();
        let p = p.to_str().unwrap();
        let mut outs = Vec::new();
        for backend in ["interp", "cpu"] {
            let o = sdflow(&["run", p, "-s", "N=8", "--backend", backend]);
            assert_eq!(o.status.code(), Some(1), "{file} on {backend}");
            assert_eq!(
                stderr(&o),
                "error: program 'axpy': float symbol 'a' has no value (give it)\n",
                "{file} on {backend}"
            );
            let o = sdflow(&["run", p, "-s", "N=8", "-s", "a=0.5", "--backend", backend]);
            assert!(o.status.success(), "{file} on {backend}: {}", stderr(&o));
            outs.push(stdout(&o));
        }
        assert_eq!(outs[0], outs[1], "{file}");
    }
    // An integer symbol nothing reads: the same on both.
    let p = tmp("extra_k.sdfg.json");
    let text = scaled_copy(false).replace(
        r#""a": {"dtype": "f64"}"#,
        r#""a": {"dtype": "f64"}, "K": {"dtype": "i64"}"#,
    );
    std::fs::write(&p, text).unwrap();
    for backend in ["interp", "cpu"] {
        let o = sdflow(&[
            "run",
            p.to_str().unwrap(),
            "-s",
            "N=8",
            "-s",
            "a=1",
            "--backend",
            backend,
        ]);
        assert_eq!(
            stderr(&o),
            "error: program 'axpy': symbol 'K' has no value (give it, or pass an array whose shape names it)\n",
            "{backend}"
        );
    }
}

#[test]
fn a_name_given_twice_is_an_error_naming_the_option_and_the_name() {
    // Was: the last value silently won.
    for backend in ["interp", "cpu"] {
        let o = sdflow(&[
            "run",
            "examples/laplace.sdfg.json",
            "-s",
            "N=8",
            "--symbol",
            "N=9",
            "--backend",
            backend,
        ]);
        assert_eq!(o.status.code(), Some(1));
        assert_eq!(
            stderr(&o),
            "error: -s/--symbol N is given twice (N=8 and N=9); give each name once\n"
        );
    }
    // Twice the same value is still twice.
    let o = sdflow(&[
        "run",
        "examples/laplace.sdfg.json",
        "-s",
        "N=8",
        "-s",
        "N=8",
    ]);
    assert_eq!(
        stderr(&o),
        "error: -s/--symbol N is given twice (N=8 and N=8); give each name once\n"
    );
    let o = sdflow(&[
        "show",
        "examples/laplace.sdfg.json",
        "-s",
        "N=8",
        "--static",
        "N=16",
    ]);
    assert_eq!(
        stderr(&o),
        "error: -s/--static N is given twice (N=8 and N=16); give each name once\n"
    );
    let bench = sdflow::bench::bench(
        Path::new("examples/laplace.sdfg.json"),
        &sdflow::bench::BenchOptions {
            backend: sdflow::codegen::Backend::Cpu,
            reps: 1,
            symbols: vec![("N".into(), "8".into()), ("N".into(), "4".into())],
            seed: 0,
            inputs: None,
            threads: 0,
            no_opt: true,
            config: None,
            layout: None,
            cold: false,
        },
    );
    assert_eq!(
        bench.unwrap_err().to_string(),
        "-s/--symbol N is given twice (N=8 and N=4); give each name once"
    );
}

#[test]
fn bench_cold_reads_past_the_last_level_cache_before_each_call() {
    use sdflow::bench::{last_level_cache, parse_cache_size};
    assert_eq!(parse_cache_size("48K\n"), Some(48 << 10));
    assert_eq!(parse_cache_size("266240K"), Some(266240 << 10));
    assert_eq!(parse_cache_size("260M"), Some(260 << 20));
    assert_eq!(parse_cache_size("1G"), Some(1 << 30));
    assert_eq!(parse_cache_size("4096"), Some(4096));
    for bad in ["", "K", "12X", "-3K", "99999999999999999999G"] {
        assert_eq!(parse_cache_size(bad), None, "{bad:?}");
    }
    let args = [
        "bench",
        "examples/laplace.sdfg.json",
        "-s",
        "N=64",
        "--reps",
        "3",
    ];
    let warm = sdflow(&[&args[..], &["--threads", "1"]].concat());
    assert!(warm.status.success(), "{}", stderr(&warm));
    assert!(!stdout(&warm).contains("cold caches"), "{}", stdout(&warm));
    let cold = sdflow(&[&args[..], &["--threads", "1", "--cold"]].concat());
    assert!(cold.status.success(), "{}", stderr(&cold));
    let out = stdout(&cold);
    // The buffer: twice the last-level cache, from 64 MiB to 16 GiB (512 MiB where
    // unknown).
    let want = last_level_cache()
        .map_or(512 << 20, |c| 2 * c)
        .clamp(64 << 20, 16 << 30);
    let line = out.lines().nth(1).unwrap_or_default();
    assert_eq!(
        line,
        format!(
            "cold caches: {:.0} MB read before each call ({})",
            want as f64 / 1e6,
            match last_level_cache() {
                Some(c) => format!("twice the {:.0} MB last-level cache", c as f64 / 1e6),
                None => "the last-level cache's size unknown".into(),
            }
        ),
        "{out}"
    );
    assert!(out.contains("time per call: median "), "{out}");
    // The ceiling's three arrays together exceed that buffer.
    let n: usize = out
        .split("ceiling (this run, ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|d| d.parse().ok())
        .unwrap_or_else(|| panic!("no ceiling line: {out}"));
    assert!(3 * 8 * n >= want, "{n} doubles per array: {out}");
    // The GPU's caches are not flushed: an error before anything compiles.
    let o = sdflow(&[&args[..], &["--backend", "cuda", "--cold"]].concat());
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        "error: --cold: the caches are flushed on the CPU backend only (a GPU's L2 is not)\n"
    );
}

#[test]
fn bench_threads_stay_within_what_openmp_can_start() {
    // Was: 65536 was taken and crashed the process (a segmentation fault in libgomp).
    let o = sdflow(&[
        "bench",
        "examples/laplace.sdfg.json",
        "-s",
        "N=8",
        "--threads",
        "65536",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        "error: --threads 65536: at most 4096 (more threads than sdflow asks the OpenMP runtime for; 0 is the OpenMP default)\n"
    );
    let config = tmp("threads.toml");
    std::fs::write(&config, "[cpu]\nthreads = 65536\n").unwrap();
    let o = sdflow(&[
        "bench",
        "examples/laplace.sdfg.json",
        "-s",
        "N=8",
        "--config",
        config.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        format!(
            "error: {}:2:11: cpu.threads: expected an integer from 0 to 4096, found 65536: more threads than sdflow asks the OpenMP runtime for (docs/configuration.md)\n",
            config.display()
        )
    );
}

#[test]
fn an_input_too_large_names_what_limits_it() {
    // Was: "the interpreter's limit" from bench and the cpu backend too.
    let o = sdflow(&["bench", "examples/laplace.sdfg.json", "-s", "N=100000"]);
    assert_eq!(
        stderr(&o),
        "error: examples/laplace.sdfg.json: argument 'out': shape [100000, 100000] has more than 1073741824 elements, the most `sdflow bench` makes as a pseudo-random input\n"
    );
    let o = sdflow(&[
        "run",
        "examples/laplace.sdfg.json",
        "-s",
        "N=100000",
        "--backend",
        "cpu",
    ]);
    assert_eq!(
        stderr(&o),
        "error: examples/laplace.sdfg.json: argument 'out': shape [100000, 100000] has more than 1073741824 elements, the most `sdflow run` makes as a pseudo-random input; pass the arrays with --inputs\n"
    );
    // On the interpreter, the interpreter's limit it is.
    let o = sdflow(&["run", "examples/laplace.sdfg.json", "-s", "N=100000"]);
    assert_eq!(
        stderr(&o),
        "error: examples/laplace.sdfg.json: cannot make pseudo-random inputs: argument 'out': cannot evaluate its shape: shape [100000, 100000] has more than 1073741824 elements, the interpreter's limit\n"
    );
    // Extents whose product overflows: no array can be that large, on any backend.
    for args in [
        &["bench", "examples/laplace.sdfg.json"][..],
        &["run", "examples/laplace.sdfg.json"][..],
    ] {
        let mut args = args.to_vec();
        args.extend(["-s", "N=9223372036854775807"]);
        let o = sdflow(&args);
        assert_eq!(
            stderr(&o),
            "error: examples/laplace.sdfg.json: argument 'out': shape [9223372036854775807, 9223372036854775807] is larger than any array can be (its extents other than 0 multiply past the address space)\n"
        );
    }
}

/// `sdflow bench --inputs` times the program on the arrays of an `.npz` (symbols
/// inferred from their shapes, as `sdflow run --inputs`): 64 × 64 doubles in and out is
/// 0.07 MB of traffic; a file without one of the arguments is refused, naming it.
#[test]
fn bench_times_the_inputs_of_an_npz() {
    let inp = tmp("bench_in.npz");
    write_inputs(&inp, 64);
    let o = sdflow(&[
        "bench",
        "examples/laplace.sdfg.json",
        "--inputs",
        inp.to_str().unwrap(),
        "--reps",
        "2",
        "--threads",
        "1",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.lines().nth(2).is_some_and(
            |l| l.starts_with("traffic: 0.1 MB per call (read 0.0 MB, written 0.0 MB): ")
        ),
        "{out}"
    );
    let partial = tmp("bench_partial.npz");
    let mut arrays = std::collections::BTreeMap::new();
    arrays.insert(
        "u".to_string(),
        HostArray::F64(ArrayD::zeros(IxDyn(&[8, 8]))),
    );
    npz::write_npz(&partial, &arrays).unwrap();
    let o = sdflow(&[
        "bench",
        "examples/laplace.sdfg.json",
        "--inputs",
        partial.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).ends_with("bench_partial.npz: no array for argument(s) out\n"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn run_on_the_emulated_cuda_device_prints_what_the_cpu_backend_prints() {
    let args = |backend: &'static str| {
        vec![
            "run",
            "examples/hyperdiffusion.sdfg.json",
            "-s",
            "N=24",
            "-s",
            "alpha=0.05",
            "--backend",
            backend,
        ]
    };
    let cpu = sdflow(&args("cpu"));
    assert!(cpu.status.success(), "{}", stderr(&cpu));
    let emulated = sdflow_env(&args("cuda"), "SDFLOW_CUDA_DEVICE", "emulated");
    assert!(emulated.status.success(), "{}", stderr(&emulated));
    assert_eq!(stdout(&emulated), stdout(&cpu));
    let unknown = sdflow_env(&args("cuda"), "SDFLOW_CUDA_DEVICE", "tpu");
    assert_eq!(unknown.status.code(), Some(1), "{}", stderr(&unknown));
    assert_eq!(
        stderr(&unknown),
        "error: --backend cuda: SDFLOW_CUDA_DEVICE='tpu': expected a device number, 'emulated' or 'recording'\n"
    );
}

/// One pipeline from one set of options: `sdflow opt` and the workflow's optimize step
/// (`sdflow show --emit optimized`, `sdflow bench`, components) build it with the same
/// function, so a configuration's `disable` and `tile_rows` give the same program through
/// both, and fast math without the e-graph pass is refused by both, saying why.
#[test]
fn opt_and_the_workflow_build_the_same_pipeline_from_the_same_options() {
    let dir = std::env::temp_dir().join(format!("sdflow-pipeline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = root().join("examples/hyperdiffusion.sdfg.json");
    let optimized = |config: Option<&Path>| {
        let opt = sdflow::cli::opt(&file, config, None, false, false, false)
            .unwrap()
            .json;
        let shown = sdflow::cli::show_with(
            &file,
            &sdflow::cli::ShowOptions {
                emit: "optimized".into(),
                config: config.map(Path::to_path_buf),
                ..Default::default()
            },
        )
        .unwrap();
        (opt, shown)
    };
    let (plain, plain_shown) = optimized(None);
    assert_eq!(plain.trim(), plain_shown.trim());
    let config = dir.join("sdflow.toml");
    std::fs::write(
        &config,
        "[defaults]\ndisable = [\"egraph\"]\ntile_rows = 0\n",
    )
    .unwrap();
    let (configured, configured_shown) = optimized(Some(&config));
    assert_eq!(configured.trim(), configured_shown.trim());
    assert_ne!(configured, plain, "the configuration changed nothing");
    // Fast math with the e-graph pass disabled: refused by both, with the same reason.
    let e = sdflow::cli::opt(&file, Some(&config), None, false, true, false)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("--fast-math: fast math needs the 'egraph' pass, which this pipeline disables"),
        "{e}"
    );
    std::fs::write(
        &config,
        "[defaults]\ndisable = [\"egraph\"]\nfast_math = true\n",
    )
    .unwrap();
    let e = sdflow::cli::show_with(
        &file,
        &sdflow::cli::ShowOptions {
            emit: "optimized".into(),
            config: Some(config.clone()),
            ..Default::default()
        },
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        e.contains("fast math needs the 'egraph' pass, which this pipeline disables"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
