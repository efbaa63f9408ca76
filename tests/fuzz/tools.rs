//! The tools' argument files: inputs for `sdflow plot` (an archive and the field to
//! draw), `sdflow run` (a program with an archive of inputs, or pseudo-random inputs, and
//! `-s` values) and `sdflow bench` up to its compilation (a configuration file,
//! `--threads`, `-s` values), each run in-process through the tool's own function, and
//! the check that what fails says what and where.
//!
//! An input's bytes are the file (the archive; the configuration's text); its
//! [`Input::program`] holds the rest, fields separated by `~`: for `plot`
//! `FIELD~AXIS~LEVEL` (`-` for an option left out), for `run` `PROGRAM~MODE~SYMBOLS`
//! (`MODE` `inputs` or `random`, `SYMBOLS` the `-s` values separated by `;`), for
//! `bench` `PROGRAM~THREADS~SYMBOLS`. `PROGRAM` is a key of [`Seeds::programs`]. The
//! programs themselves are not mutated here: their files go through the `json` and
//! `dace` loaders, with the same functions.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use sdflow::cli::{self, CliError, RunOptions};
use sdflow::ir::Sdfg;
use sdflow::npz::NpzError;
use sdflow::orchestration::show::symbol_value;

use super::corpus::Corpus;
use super::npz::Members;
use super::targets::{Input, Loader, Verdict};

/// What the tools' inputs are made from, besides the archives of the corpus.
pub struct Seeds {
    /// Programs by key: the example programs (by file name) and the programs the
    /// corpus archives go with.
    pub programs: BTreeMap<String, Sdfg>,
    /// The example programs' keys (the ones `bench` optimizes: small and quick).
    pub examples: Vec<String>,
    /// The keys of programs quick enough to interpret (`run`).
    pub quick: Vec<String>,
    /// Configuration files' text.
    pub configs: Vec<String>,
}

/// A plain configuration (a seed for mutations).
const CONFIG_PLAIN: &str = r#"[cpu]
threads = 1
schedule = "guided"

[program.tridiagonal]
optimize = false
"#;

/// A configuration that sets every option, some out of range (a seed for mutations).
const CONFIG: &str = r#"[defaults]
optimize = true
fast_math = false
passes = ["specialize", "dead_dataflow", "state_fusion", "map_fusion", "egraph"]
disable = ["egraph"]
fusion_balance = 1.5
tile_rows = 16

[cpu]
threads = 2
schedule = "dynamic"
parallel_min_points = 4096

[cpu.x86_64]
threads = 4096

[gpu]
block_size = 256
graphs = true

[program.laplace.cpu]
threads = 65536

[program.hyperdiffusion]
backend = "interp"
fast_math = true

[interp]
optimize = false
"#;

/// Tokens worth inserting into configuration text.
const TOML_TOKENS: [&[u8]; 22] = [
    b"[",
    b"]",
    b"=",
    b"\"",
    b"'''",
    b"[cpu]\n",
    b"[defaults]\n",
    b"[program.laplace.cpu]\n",
    b"threads = ",
    b"65536",
    b"4097",
    b"-1",
    b"1e309",
    b"nan",
    b"inf",
    b"true",
    b"\n",
    b"{",
    b"}",
    b",",
    b"#",
    b"9223372036854775808",
];

/// `-s` values: small sizes, sizes no input can have (refused before anything is made),
/// and text that is not a number of the symbol's type.
const SMALL: [&str; 9] = ["0", "1", "2", "3", "4", "5", "8", "16", "-1"];
const HUGE: [&str; 5] = [
    "4294967296",
    "9223372036854775807",
    "-9223372036854775808",
    "9223372036854775808",
    "99999999999999999999",
];
const ODD: [&str; 12] = [
    "-3", "1e3", "0x10", "abc", "nan", "inf", "-inf", "0.5", "1.5", "true", " 7 ", "",
];

/// `--threads` values: valid ones, then too many.
const THREADS: [usize; 7] = [0, 1, 2, 4096, 4097, 65536, usize::MAX];

/// The most work (map points, estimated) of a program `run` interprets: the corpus's
/// chains of 20 and 50 stencils take up to a second each on the interpreter (their
/// archives go through the `npz` loader).
const MAX_WORK: u64 = 50_000;

/// An estimate of the interpreter's work on `sdfg` at its static sizes (or 16 per
/// dimension not static): the largest argument's elements times the maps.
fn work(sdfg: &Sdfg) -> u64 {
    let ints: BTreeMap<String, i64> = sdfg
        .symbols
        .iter()
        .filter_map(|(k, s)| Some((k.clone(), s.value?.as_i64())))
        .collect();
    let largest = sdfg
        .non_transients()
        .map(|(_, d)| {
            d.shape()
                .iter()
                .map(|e| e.eval_map(&ints).map_or(16, |v| v.clamp(0, 1 << 20) as u64))
                .product::<u64>()
        })
        .max()
        .unwrap_or(1);
    largest.saturating_mul(sdfg.stats().maps.max(1) as u64)
}

impl Seeds {
    /// The example programs and the configurations; `programs` are the corpus archives'.
    pub fn load(root: &Path, programs: &BTreeMap<String, Sdfg>) -> Seeds {
        let mut all = programs.clone();
        let mut examples = Vec::new();
        for name in [
            "laplace.sdfg.json",
            "hyperdiffusion.sdfg.json",
            "flag_if.sdfg.json",
            "tridiagonal.sdfg.json",
        ] {
            let Ok(text) = std::fs::read_to_string(root.join("examples").join(name)) else {
                continue;
            };
            let Ok(sdfg) = sdflow::ir::format::from_json(&text) else {
                continue;
            };
            all.insert(name.to_string(), sdfg);
            examples.push(name.to_string());
        }
        let mut configs = vec![CONFIG.to_string(), CONFIG_PLAIN.to_string()];
        if let Ok(t) = std::fs::read_to_string(root.join("examples/granule/granule.toml")) {
            configs.push(t);
        }
        let quick = all
            .iter()
            .filter(|(_, p)| work(p) <= MAX_WORK)
            .map(|(k, _)| k.clone())
            .collect();
        Seeds {
            programs: all,
            examples,
            quick,
            configs,
        }
    }
}

/// Symbols of `sdfg` that size none of its arguments: bounds of loops, flags. They get
/// small values only (a loop over 2⁶³ iterations is no finding).
fn loose_symbols(sdfg: &Sdfg) -> Vec<String> {
    let mut sizing = std::collections::BTreeSet::new();
    for (_, d) in sdfg.non_transients() {
        for e in d.shape() {
            sizing.extend(e.free_symbols());
        }
    }
    sdfg.symbols
        .iter()
        .filter(|(k, s)| s.value.is_none() && !sizing.contains(*k))
        .map(|(k, _)| k.clone())
        .collect()
}

/// Whether the archive at `path` gives an integer scalar argument of `sdfg` (a loop's
/// count, as DaCe passes one) a value over 64: the program may then run for hours, which
/// is no finding; such inputs are bound but not run.
fn long_loop(sdfg: &Sdfg, path: &Path) -> bool {
    let Ok(mut archive) = sdflow::npz::Archive::open(path) else {
        return false;
    };
    for name in archive.names().to_vec() {
        let scalar_int = matches!(
            sdfg.arrays.get(&name),
            Some(sdflow::ir::DataDesc::Scalar { dtype, .. }) if dtype.is_int()
        );
        if scalar_int
            && let Ok(a) = archive.read(&name)
            && a.len() == 1
            && a.to_f64_vec().first().is_some_and(|v| v.abs() > 64.0)
        {
            return true;
        }
    }
    false
}

/// `-s` values for `sdfg`'s symbols: most get one, of a kind drawn at random (huge ones
/// only for symbols that size arguments when `huge`); sometimes one is given twice or a
/// name the program lacks.
fn symbol_values(rng: &mut ChaCha8Rng, sdfg: &Sdfg, huge: bool) -> Vec<String> {
    let loose = loose_symbols(sdfg);
    let mut out = Vec::new();
    if rng.random_bool(0.5) {
        // Every symbol a small size.
        for (k, s) in &sdfg.symbols {
            if s.value.is_none() {
                out.push(format!("{k}={}", rng.random_range(1..=12)));
            }
        }
        return out;
    }
    for (k, s) in &sdfg.symbols {
        if s.value.is_some() && !rng.random_bool(0.1) {
            continue;
        }
        if rng.random_bool(0.1) {
            continue;
        }
        let v = match rng.random_range(0..10) {
            0 if huge && !loose.contains(k) => HUGE[rng.random_range(0..HUGE.len())],
            1 => ODD[rng.random_range(0..ODD.len())],
            _ => SMALL[rng.random_range(0..SMALL.len())],
        };
        // Odd values of loose symbols are refused before anything runs, unless they
        // read as a number: then small ones.
        let v = if loose.contains(k) && v.trim().parse::<f64>().is_ok_and(|x| x.abs() > 16.0) {
            "2"
        } else {
            v
        };
        out.push(format!("{k}={v}"));
    }
    match rng.random_range(0..12) {
        0 if !out.is_empty() => {
            let again = out[rng.random_range(0..out.len())].clone();
            out.push(again);
        }
        1 => out.push("Q=1".into()),
        2 => out.push("N".into()),
        _ => {}
    }
    out
}

/// Members holding extreme values for `plot`: constants at 2⁵³ and beyond, ranges
/// wider than the largest float, NaN, infinities, subnormals, random bits, empty and
/// many-dimensional arrays, element types sdflow does not read.
fn extreme_members(rng: &mut ChaCha8Rng) -> Members {
    let mut out = Members::new();
    for k in 0..rng.random_range(1..=3) {
        let dims: Vec<usize> = match rng.random_range(0..8) {
            0 => vec![rng.random_range(0..6)],
            1 => vec![rng.random_range(0..2), rng.random_range(0..5)],
            2 => vec![
                rng.random_range(1..5),
                rng.random_range(1..5),
                rng.random_range(1..4),
            ],
            3 => vec![1, 1, 1, 1],
            4 => vec![],
            5 => vec![1, rng.random_range(4000..4200)],
            _ => vec![rng.random_range(1..9), rng.random_range(1..9)],
        };
        let n: usize = dims.iter().product();
        let special = [
            2f64.powi(53),
            1e300,
            f64::MAX,
            -f64::MAX,
            1e308,
            -1e308,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            5e-324,
            -0.0,
            0.0,
        ];
        let pattern = rng.random_range(0..4);
        let c = special[rng.random_range(0..special.len())];
        let values: Vec<f64> = (0..n)
            .map(|i| match pattern {
                0 => c,
                1 => {
                    if i % 2 == 0 {
                        c
                    } else {
                        -c
                    }
                }
                2 => special[rng.random_range(0..special.len())],
                _ => f64::from_bits(rng.random::<u64>()),
            })
            .collect();
        let (descr, data): (&str, Vec<u8>) = match rng.random_range(0..10) {
            0 => (
                "<f4",
                values
                    .iter()
                    .flat_map(|v| (*v as f32).to_le_bytes())
                    .collect(),
            ),
            1 => (
                "<i8",
                (0..n)
                    .flat_map(|_| rng.random::<i64>().to_le_bytes())
                    .collect(),
            ),
            2 => ("<c16", vec![0; n * 16]),
            3 => ("|O", vec![0; n * 8]),
            4 => ("<U2", vec![0; n * 8]),
            _ => ("<f8", values.iter().flat_map(|v| v.to_le_bytes()).collect()),
        };
        let shape = match dims.len() {
            1 => format!("({},)", dims[0]),
            _ => format!(
                "({})",
                dims.iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        out.push((format!("x{k}.npy"), super::npz::npy(&dict, &data)));
    }
    out
}

/// Whether `name` can be part of a saved input's file name.
fn plain(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
}

fn option(rng: &mut ChaCha8Rng) -> String {
    match rng.random_range(0..6) {
        0 => "0".into(),
        1 => "1".into(),
        2 => "2".into(),
        3 => "7".into(),
        _ => "-".into(),
    }
}

/// A new input for one of the tools' loaders.
pub fn input(rng: &mut ChaCha8Rng, loader: Loader, corpus: &Corpus) -> Input {
    let seeds = &corpus.tools;
    match loader {
        Loader::Plot => {
            let seed = &corpus.npz[rng.random_range(0..corpus.npz.len())];
            let names = corpus
                .names
                .get(&seed.program)
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            let mut m = seed.members.clone();
            if rng.random_bool(0.6) {
                super::npz::mutate(rng, &mut m, names);
            }
            if rng.random_bool(0.5) {
                m.extend(extreme_members(rng));
            }
            let mut bytes = super::npz::archive(&m, rng.random_bool(0.3));
            if rng.random_bool(0.05) {
                super::bytes::mutate(rng, &mut bytes, &[], &[], 1 << 24);
            }
            let fields: Vec<String> = m
                .iter()
                .map(|(n, _)| n.trim_end_matches(".npy").to_string())
                .filter(|n| plain(n))
                .collect();
            let field = if fields.is_empty() || rng.random_bool(0.03) {
                "missing".to_string()
            } else {
                fields[rng.random_range(0..fields.len())].clone()
            };
            let (axis, level) = (option(rng), option(rng));
            Input {
                loader,
                program: Some(format!("{field}~{axis}~{level}")),
                bytes,
            }
        }
        Loader::Run => {
            let inputs: Vec<_> = corpus
                .npz
                .iter()
                .filter(|n| seeds.quick.contains(&n.program))
                .collect();
            let random = rng.random_bool(0.3) || inputs.is_empty();
            let (key, bytes, huge) = if random {
                let keys = &seeds.quick;
                (
                    keys[rng.random_range(0..keys.len())].clone(),
                    Vec::new(),
                    true,
                )
            } else {
                let seed = inputs[rng.random_range(0..inputs.len())];
                let names = corpus
                    .names
                    .get(&seed.program)
                    .map(Vec::as_slice)
                    .unwrap_or(&[]);
                let mut m = seed.members.clone();
                if rng.random_bool(0.7) {
                    super::npz::mutate(rng, &mut m, names);
                }
                (
                    seed.program.clone(),
                    super::npz::archive(&m, rng.random_bool(0.3)),
                    false,
                )
            };
            let symbols = match seeds.programs.get(&key) {
                // With inputs, the archive gives most symbols: a few `-s` values only.
                Some(p) if random || rng.random_bool(0.3) => symbol_values(rng, p, huge),
                _ => Vec::new(),
            };
            let mode = if random { "random" } else { "inputs" };
            Input {
                loader,
                program: Some(format!("{key}~{mode}~{}", symbols.join(";"))),
                bytes,
            }
        }
        Loader::Bench => {
            let key = seeds.examples[rng.random_range(0..seeds.examples.len())].clone();
            let text = &seeds.configs[rng.random_range(0..seeds.configs.len())];
            let donor = &seeds.configs[rng.random_range(0..seeds.configs.len())];
            let mut bytes = match rng.random_range(0..5) {
                0 | 1 => text.clone().into_bytes(),
                2 => super::text::mutate(rng, text, donor).into_bytes(),
                _ => {
                    let mut b = text.clone().into_bytes();
                    super::bytes::mutate(rng, &mut b, &TOML_TOKENS, donor.as_bytes(), 1 << 20);
                    b
                }
            };
            if rng.random_bool(0.05) {
                bytes.clear();
            }
            let threads = if rng.random_bool(0.8) {
                THREADS[rng.random_range(0..4)]
            } else {
                THREADS[rng.random_range(4..THREADS.len())]
            };
            let symbols = symbol_values(rng, &seeds.programs[&key], true);
            Input {
                loader,
                program: Some(format!("{key}~{threads}~{}", symbols.join(";"))),
                bytes,
            }
        }
        _ => unreachable!("not a tool's loader: {loader:?}"),
    }
}

/// `scratch` with another file name ending (the tools read files).
fn beside(scratch: &Path, ending: &str) -> PathBuf {
    let stem = scratch
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    scratch.with_file_name(format!("{stem}-{ending}"))
}

fn fields(input: &Input) -> Option<Vec<&str>> {
    let f: Vec<&str> = input.program.as_deref()?.splitn(3, '~').collect();
    (f.len() == 3).then_some(f)
}

/// `-s` values as the command line reads them (`NAME=VALUE`, trimmed), or the usage
/// error the command line would give.
fn assignments(list: &str) -> Result<Vec<(String, String)>, String> {
    list.split(';')
        .filter(|s| !s.is_empty())
        .map(cli::parse_assignment)
        .collect()
}

/// Runs one input of a tool's loader.
pub fn run(input: &Input, corpus: &Corpus, scratch: &Path) -> Verdict {
    let Some(f) = fields(input) else {
        return Verdict::Bad(format!("malformed tool input: {:?}", input.program));
    };
    match input.loader {
        Loader::Plot => plot(input, &f, scratch),
        Loader::Run => run_program(input, &f, corpus, scratch),
        Loader::Bench => bench(input, &f, corpus, scratch),
        other => Verdict::Bad(format!("not a tool's loader: {other:?}")),
    }
}

fn plot(input: &Input, f: &[&str], scratch: &Path) -> Verdict {
    let archive = beside(scratch, "plot.npz");
    let out = beside(scratch, "plot.png");
    if let Err(e) = std::fs::write(&archive, &input.bytes) {
        return Verdict::Bad(format!("cannot write {}: {e}", archive.display()));
    }
    let _ = std::fs::remove_file(&out);
    let num = |s: &str| s.parse::<usize>().ok();
    match cli::plot(&archive, f[0], Some(&out), num(f[1]), num(f[2])) {
        Ok(msg) => {
            let written = std::fs::metadata(&out).is_ok_and(|m| m.len() > 0);
            if !written || !msg.starts_with(&out.display().to_string()) {
                return Verdict::Bad(format!("plot said '{msg}' but wrote no picture"));
            }
            Verdict::Accepted
        }
        Err(e) => {
            let a = archive.display().to_string();
            let ok = match &e {
                CliError::Usage(m) => m.starts_with(&a) && m.len() > a.len() + 2,
                CliError::Npz(NpzError::Format { path, message }) => {
                    path == &a && !message.trim().is_empty()
                }
                CliError::Plot(p) => p.0.starts_with(&out.display().to_string()),
                _ => false,
            };
            if ok {
                Verdict::Rejected(e.to_string())
            } else {
                Verdict::Bad(format!("plot error without what or where: {e:?}"))
            }
        }
    }
}

/// Whether a `run` or `bench` error says what and where: it names one of `places` (the
/// files, the options) or the program.
fn names_a_place(e: &CliError, places: &[String], sdfg: &Sdfg) -> bool {
    let text = e.to_string();
    if text.trim().is_empty() {
        return false;
    }
    let named = places.iter().any(|p| text.contains(p.as_str()))
        || text.contains(&format!("program '{}'", sdfg.name));
    match e {
        CliError::Npz(NpzError::Io { .. }) => false,
        CliError::Usage(_)
        | CliError::Npz(_)
        | CliError::Run { .. }
        | CliError::Transform { .. } => named,
        _ => false,
    }
}

fn run_program(input: &Input, f: &[&str], corpus: &Corpus, scratch: &Path) -> Verdict {
    let Some(sdfg) = corpus.tools.programs.get(f[0]) else {
        return Verdict::Bad(format!("no program '{}'", f[0]));
    };
    let mut symbols = match assignments(f[2]) {
        Ok(s) => s,
        Err(m) => return Verdict::Rejected(m),
    };
    if f[1] == "inputs" {
        // The archive may give a loose symbol (a loop's bound) any value: small ones
        // given on the command line take precedence.
        for k in loose_symbols(sdfg) {
            if !symbols.iter().any(|(n, _)| *n == k) {
                symbols.push((k, "2".into()));
            }
        }
    }
    let program = beside(scratch, "run.sdfg.json");
    let archive = beside(scratch, "run-in.npz");
    let outputs = beside(scratch, "run-out.npz");
    let written = std::fs::write(&program, sdflow::ir::format::to_json(sdfg))
        .and_then(|()| std::fs::write(&archive, &input.bytes));
    if let Err(e) = written {
        return Verdict::Bad(format!("cannot write the scratch files: {e}"));
    }
    let _ = std::fs::remove_file(&outputs);
    if f[1] == "inputs" && long_loop(sdfg, &archive) {
        let given = symbols
            .iter()
            .map(|(k, v)| Ok((k.clone(), symbol_value(sdfg, k, v)?)))
            .collect::<Result<BTreeMap<_, _>, CliError>>();
        let bound = given.and_then(|g| cli::bind_inputs(sdfg, &archive, g));
        return match bound {
            Ok(_) => Verdict::Accepted,
            Err(e)
                if names_a_place(
                    &e,
                    &[archive.display().to_string(), "--symbol".into()],
                    sdfg,
                ) =>
            {
                Verdict::Rejected(e.to_string())
            }
            Err(e) => Verdict::Bad(format!("run error without what or where: {e:?}")),
        };
    }
    let opts = RunOptions {
        inputs: (f[1] == "inputs").then(|| archive.clone()),
        outputs: Some(outputs.clone()),
        seed: 1,
        symbols,
        backend: sdflow::codegen::Backend::Interp,
        ranks: None,
    };
    match cli::run(&program, &opts) {
        Ok(text) => {
            let lines_ok = text
                .lines()
                .all(|l| l.contains(": ") && l.contains(" sum=") && l.contains(" l2="));
            if !lines_ok {
                return Verdict::Bad(format!("run printed '{text:.200}'"));
            }
            match sdflow::npz::read_npz(&outputs) {
                Ok(_) => Verdict::Accepted,
                Err(e) => Verdict::Bad(format!("--outputs does not read back: {e}")),
            }
        }
        Err(e) => {
            let places = [
                program.display().to_string(),
                archive.display().to_string(),
                "--symbol".to_string(),
            ];
            if names_a_place(&e, &places, sdfg) {
                Verdict::Rejected(e.to_string())
            } else {
                Verdict::Bad(format!("run error without what or where: {e:?}"))
            }
        }
    }
}

fn bench(input: &Input, f: &[&str], corpus: &Corpus, scratch: &Path) -> Verdict {
    let Some(sdfg) = corpus.tools.programs.get(f[0]) else {
        return Verdict::Bad(format!("no program '{}'", f[0]));
    };
    let symbols = match assignments(f[2]) {
        Ok(s) => s,
        Err(m) => return Verdict::Rejected(m),
    };
    let Ok(threads) = f[1].parse::<usize>() else {
        return Verdict::Bad(format!("threads '{}'", f[1]));
    };
    let program = super::corpus::root().join("examples").join(f[0]);
    let config = beside(scratch, "bench.toml");
    if let Err(e) = std::fs::write(&config, &input.bytes) {
        return Verdict::Bad(format!("cannot write {}: {e}", config.display()));
    }
    let o = sdflow::bench::BenchOptions {
        backend: sdflow::codegen::Backend::Cpu,
        reps: 1,
        symbols,
        seed: 0,
        inputs: None,
        threads,
        no_opt: false,
        config: Some(config.clone()),
        layout: None,
        cold: false,
    };
    match sdflow::bench::prepare(&program, &o) {
        Ok(p) if p.options.threads > sdflow::codegen::MAX_THREADS => {
            Verdict::Bad(format!("bench would start {} threads", p.options.threads))
        }
        Ok(_) => Verdict::Accepted,
        Err(e) => {
            let places = [
                program.display().to_string(),
                config.display().to_string(),
                "--symbol".to_string(),
                "--threads".to_string(),
            ];
            if names_a_place(&e, &places, sdfg) {
                Verdict::Rejected(e.to_string())
            } else {
                Verdict::Bad(format!("bench error without what or where: {e:?}"))
            }
        }
    }
}

/// The `sdflow` command line that runs a tool's input through the binary, its files
/// written beside `scratch` (the long campaign's `--binary`): `None` for an input the
/// command line cannot express (a malformed one).
pub fn command_line(input: &Input, corpus: &Corpus, scratch: &Path) -> Option<Vec<String>> {
    let f = fields(input)?;
    let s = |p: &Path| p.display().to_string();
    let symbols = |list: &str| -> Vec<String> {
        list.split(';')
            .filter(|x| !x.is_empty())
            .flat_map(|x| ["-s".to_string(), x.to_string()])
            .collect()
    };
    let mut args: Vec<String> = Vec::new();
    match input.loader {
        Loader::Plot => {
            let archive = beside(scratch, "plot.npz");
            std::fs::write(&archive, &input.bytes).ok()?;
            args.extend(["plot".into(), s(&archive), f[0].into()]);
            args.extend(["-o".into(), s(&beside(scratch, "plot.png"))]);
            for (opt, v) in [("--axis", f[1]), ("--level", f[2])] {
                if v != "-" {
                    args.extend([opt.into(), v.into()]);
                }
            }
        }
        Loader::Run => {
            let sdfg = corpus.tools.programs.get(f[0])?;
            let program = beside(scratch, "run.sdfg.json");
            let archive = beside(scratch, "run-in.npz");
            std::fs::write(&program, sdflow::ir::format::to_json(sdfg)).ok()?;
            std::fs::write(&archive, &input.bytes).ok()?;
            if f[1] == "inputs" && long_loop(sdfg, &archive) {
                return None;
            }
            args.extend(["run".into(), s(&program)]);
            if f[1] == "inputs" {
                args.extend(["--inputs".into(), s(&archive)]);
                for k in loose_symbols(sdfg) {
                    if !f[2].split(';').any(|x| x.starts_with(&format!("{k}="))) {
                        args.extend(["-s".into(), format!("{k}=2")]);
                    }
                }
            }
            args.extend(["--outputs".into(), s(&beside(scratch, "run-out.npz"))]);
            args.extend(symbols(f[2]));
        }
        Loader::Bench => {
            let config = beside(scratch, "bench.toml");
            std::fs::write(&config, &input.bytes).ok()?;
            let program = super::corpus::root().join("examples").join(f[0]);
            // Few calls: the inputs are about the arguments, not the timing.
            args.extend(["bench".into(), s(&program), "--reps".into(), "1".into()]);
            args.extend(["--threads".into(), f[1].into()]);
            args.extend(["--config".into(), s(&config)]);
            args.extend(symbols(f[2]));
        }
        _ => return None,
    }
    Some(args)
}

/// What the binary made of one input: `None` when it exited as a command should (0, or
/// 1 with an `error: …` line, or 2 for a command-line usage error), else the finding.
pub fn judge_exit(status: std::process::ExitStatus, stderr: &str) -> Option<String> {
    match status.code() {
        Some(0) => None,
        Some(1) if stderr.starts_with("error: ") && stderr.trim().len() > 8 => None,
        Some(2) if stderr.starts_with("error: ") => None,
        Some(101) => Some(format!("panic: {:.300}", stderr.trim())),
        Some(c) => Some(format!("exit status {c}: {:.300}", stderr.trim())),
        None => Some(format!(
            "killed by a signal ({status}): {:.300}",
            stderr.trim()
        )),
    }
}
