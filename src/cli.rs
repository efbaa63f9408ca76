//! The commands of the `sdflow` tool, as functions that return their output text, so they
//! are tested directly as well as through the binary.
//!
//! Why one file of this size: each command is a function with its own error paths,
//! tested directly; the larger commands have modules of their own (`bench.rs`,
//! `view.rs`, `plot.rs`, `npz.rs`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use sdflow_ir::interp::{self, Bindings, HostArray, InterpError};
use sdflow_ir::{DataDesc, Sdfg, SymExpr, Value, format};

use sdflow_orchestration::load::LoadError;
use sdflow_orchestration::show::{self, ShowError};
pub use sdflow_orchestration::show::{SHOW_EMITS, ShowOptions};

use crate::npz::{self, NpzError};

/// Why a command failed. `main` prints it and exits with status 1.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The program file could not be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The interpreter failed.
    #[error("{path}: run failed: {source}")]
    Run {
        /// The file.
        path: String,
        /// The cause.
        source: InterpError,
    },
    /// An array archive could not be read or written.
    #[error(transparent)]
    Npz(#[from] NpzError),
    /// A command-line value is wrong.
    #[error("{0}")]
    Usage(String),
    /// Graphviz could not render.
    #[error("{0}")]
    Render(String),
    /// A picture could not be drawn or written.
    #[error(transparent)]
    Plot(#[from] crate::plot::PlotError),
    /// Code could not be generated, compiled or loaded.
    #[error("{path}: {source}")]
    Codegen {
        /// The file.
        path: String,
        /// The cause.
        source: sdflow_codegen::CodegenError,
    },
    /// The optimizer could not run (an unknown pass name, or a pass that broke the
    /// program, which is a bug to report).
    #[error("{path}: {source}")]
    Transform {
        /// The file.
        path: String,
        /// The cause.
        source: sdflow_transforms::TransformError,
    },
}

impl From<ShowError> for CliError {
    fn from(e: ShowError) -> Self {
        match e {
            ShowError::Usage(m) => CliError::Usage(m),
            ShowError::Codegen { path, source } => CliError::Codegen { path, source },
            ShowError::Transform { path, source } => CliError::Transform { path, source },
        }
    }
}

fn write_bytes(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    std::fs::write(path, bytes).map_err(|source| CliError::Io {
        path: path.display().to_string(),
        source,
    })
}

/// `sdflow import FILE`: a DaCe SDFG as sdflow JSON (validated).
pub fn import(path: &Path) -> Result<String, CliError> {
    let sdfg = load_program(path)?;
    Ok(format::to_json(&sdfg))
}

/// Reads a program file and validates it ([`sdflow_orchestration::load`]).
pub fn load_program(path: &Path) -> Result<Sdfg, CliError> {
    Ok(sdflow_orchestration::load::load(path)?)
}

/// `sdflow validate FILE`: a one-line summary when valid.
pub fn validate(path: &Path) -> Result<String, CliError> {
    let sdfg = load_program(path)?;
    let s = sdfg.stats();
    Ok(format!(
        "{}: valid SDFG '{}' ({} states, {} maps, {} tasklets)\n",
        path.display(),
        sdfg.name,
        s.states,
        s.maps,
        s.tasklets
    ))
}

/// `sdflow stats FILE`: one `key: value` per line.
pub fn stats(path: &Path) -> Result<String, CliError> {
    let sdfg = load_program(path)?;
    Ok(stats_text(&sdfg))
}

/// The text of `sdflow stats` for a program.
pub fn stats_text(sdfg: &Sdfg) -> String {
    let s = sdfg.stats();
    let mut out = String::new();
    let _ = writeln!(out, "name: {}", sdfg.name);
    for (k, v) in [
        ("states", s.states),
        ("nodes", s.nodes),
        ("edges", s.edges),
        ("maps", s.maps),
        ("tasklets", s.tasklets),
        ("nested", s.nested),
        ("library", s.library),
        ("transients", s.transients),
    ] {
        let _ = writeln!(out, "{k}: {v}");
    }
    for (name, sym) in &sdfg.symbols {
        let value = sym.value.map(|v| format!(" = {v}")).unwrap_or_default();
        let _ = writeln!(out, "symbol {name}: {}{value}", sym.dtype);
    }
    for (name, d) in &sdfg.arrays {
        let shape: Vec<String> = d.shape().iter().map(SymExpr::to_string).collect();
        let kind = if d.transient() { " transient" } else { "" };
        match d {
            DataDesc::Array(_) => {
                let _ = writeln!(
                    out,
                    "array {name}: {}[{}]{kind}",
                    d.dtype(),
                    shape.join(", ")
                );
            }
            DataDesc::Scalar { .. } => {
                let _ = writeln!(out, "scalar {name}: {}{kind}", d.dtype());
            }
        }
    }
    out
}

/// `sdflow plot FILE.npz FIELD [-o OUT.png] [--level K] [--axis A]`: a picture of one
/// array of an archive (as `sdflow run --outputs` writes them): a line for a 1-D array, a
/// heat map for a 2-D one (dimension 0 across, dimension 1 up), and for a 3-D one the
/// heat map of the slice at index `level` (default 0) of dimension `axis` (default the
/// last). Returns what was written, for the terminal.
pub fn plot(
    archive: &Path,
    field: &str,
    out: Option<&Path>,
    level: Option<usize>,
    axis: Option<usize>,
) -> Result<String, CliError> {
    let mut arrays = npz::Archive::open(archive)?;
    if !arrays.contains(field) {
        return Err(CliError::Usage(format!(
            "{}: no array '{field}' (arrays: {})",
            archive.display(),
            arrays.names().join(", ")
        )));
    }
    // Only the array asked for is read: another of a type sdflow does not read is no
    // obstacle.
    let a = arrays.read(field)?;
    let shape = a.shape().to_vec();
    let default_out = std::path::PathBuf::from(format!("{field}.png"));
    let out = out.unwrap_or(&default_out);
    let what = |m: String| CliError::Usage(format!("{}: '{field}' {m}", archive.display()));
    let dims = || {
        shape
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !(1..=3).contains(&shape.len()) {
        return Err(what(format!(
            "has {} dimension(s) (shape [{}]); plot draws arrays of 1, 2 or 3",
            shape.len(),
            dims()
        )));
    }
    if a.is_empty() {
        return Err(what(format!(
            "is empty (shape [{}]): there is nothing to draw",
            dims()
        )));
    }
    let values = row_major_f64(&a);
    let title = match shape.len() {
        1 => {
            let points: Vec<(f64, f64)> = values
                .iter()
                .enumerate()
                .map(|(i, &v)| (i as f64, v))
                .collect();
            let title = format!("{field} [{}]", shape[0]);
            crate::plot::lines(
                &title,
                "index",
                field,
                &[(field.to_string(), points)],
                false,
                out,
            )?;
            title
        }
        2 => {
            let (grid, nx, ny) = crate::plot::slice(&values, &shape, None, 0);
            let title = format!("{field} [{nx} x {ny}]");
            crate::plot::heatmap(&grid, nx, ny, &title, out)?;
            title
        }
        _ => {
            // Three dimensions (the rank is checked above).
            let axis = axis.unwrap_or(2);
            if axis > 2 {
                return Err(what(format!(
                    "has 3 dimensions; --axis {axis} is not one of 0, 1, 2"
                )));
            }
            let level = level.unwrap_or(0);
            if level >= shape[axis] {
                return Err(what(format!(
                    "has extent {} in dimension {axis}; --level {level} is outside it",
                    shape[axis]
                )));
            }
            let (grid, nx, ny) = crate::plot::slice(&values, &shape, Some(axis), level);
            let title = format!(
                "{field} [{} x {} x {}], index {level} of dimension {axis}",
                shape[0], shape[1], shape[2]
            );
            crate::plot::heatmap(&grid, nx, ny, &title, out)?;
            title
        }
    };
    Ok(format!("{}: {title}", out.display()))
}

/// The elements as `f64`, in row-major order, in one pass whatever the memory layout
/// (an archive's array may be column-major: `HostArray::to_f64_vec` looks each element
/// up from the start then, which took seconds for a 32 × 32 × 16 field).
fn row_major_f64(a: &HostArray) -> Vec<f64> {
    match a {
        HostArray::Bool(x) => x.iter().map(|&v| f64::from(u8::from(v))).collect(),
        HostArray::I32(x) => x.iter().map(|&v| f64::from(v)).collect(),
        HostArray::I64(x) => x.iter().map(|&v| v as f64).collect(),
        HostArray::F32(x) => x.iter().map(|&v| f64::from(v)).collect(),
        HostArray::F64(x) => x.iter().copied().collect(),
    }
}

/// Options of `sdflow dot`.
#[derive(Clone, Debug, Default)]
pub struct DotArgs {
    /// `control`, `states` or `full`; `None` picks by the program's size.
    pub level: Option<String>,
    /// Draw one state (name or `#index`).
    pub state: Option<String>,
    /// Draw one map's body (its label).
    pub map: Option<String>,
    /// With two files: draw the second marked with what changed from the first.
    pub diff: bool,
    /// Render SVG with Graphviz.
    pub svg: bool,
}

/// `sdflow dot FILE [--level control|states|full] [--state NAME] [--map LABEL] [--svg]`,
/// or `sdflow dot --diff BEFORE AFTER`: the DOT text (or SVG bytes), written to `out` or
/// returned for standard output.
pub fn dot(
    files: &[std::path::PathBuf],
    args: &DotArgs,
    out: Option<&Path>,
) -> Result<Option<Vec<u8>>, CliError> {
    let (sdfg, marks) = match (args.diff, files) {
        (false, [one]) => (sdflow_orchestration::load::read(one)?, None),
        (true, [before, after]) => {
            let a = sdflow_orchestration::load::read(before)?;
            let b = sdflow_orchestration::load::read(after)?;
            let marks = sdflow_ir::dot::diff_marks(&a, &b);
            (b, Some(marks))
        }
        (true, _) => {
            return Err(CliError::Usage(
                "--diff takes two programs: the optimizer's input and its output (sdflow dot --diff BEFORE AFTER)".into(),
            ));
        }
        (false, _) => {
            return Err(CliError::Usage(
                "dot takes one program (or two with --diff)".into(),
            ));
        }
    };
    let detail = match args.level.as_deref() {
        None | Some("auto") => None,
        Some(name) => Some(sdflow_ir::dot::Detail::from_name(name).ok_or_else(|| {
            CliError::Usage(format!(
                "--level '{name}': expected control, states, full or auto"
            ))
        })?),
    };
    let opts = sdflow_ir::dot::DotOptions {
        detail,
        state: args.state.clone(),
        map: args.map.clone(),
        marks,
    };
    let text =
        sdflow_ir::dot::to_dot_with(&sdfg, &opts).map_err(|e| CliError::Usage(e.to_string()))?;
    let bytes = if args.svg {
        render_svg(&text)?
    } else {
        text.into_bytes()
    };
    match out {
        Some(o) => {
            write_bytes(o, &bytes)?;
            Ok(None)
        }
        None => Ok(Some(bytes)),
    }
}

/// Renders DOT text to SVG with Graphviz's `dot` program (`$SDFLOW_DOT` overrides the
/// program to run).
pub fn render_svg(dot_text: &str) -> Result<Vec<u8>, CliError> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let program = std::env::var("SDFLOW_DOT").unwrap_or_else(|_| "dot".to_string());
    let child = Command::new(&program)
        .arg("-Tsvg")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(CliError::Render(format!(
                "--svg needs Graphviz's '{program}' program, which was not found; install Graphviz \
                 (e.g. `apt-get install graphviz`) or leave out --svg to write DOT text"
            )));
        }
        Err(e) => {
            return Err(CliError::Render(format!(
                "could not start '{program}': {e}"
            )));
        }
    };
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(dot_text.as_bytes())
            .map_err(|e| CliError::Render(format!("writing to '{program}': {e}")))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| CliError::Render(format!("running '{program}': {e}")))?;
    if !out.status.success() {
        return Err(CliError::Render(format!(
            "'{program}' failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out.stdout)
}

/// Options of `sdflow run`.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Arrays (and 0-d symbol values) to start from.
    pub inputs: Option<PathBuf>,
    /// Where to write every argument array after the run.
    pub outputs: Option<PathBuf>,
    /// Seed of the pseudo-random inputs when `inputs` is absent.
    pub seed: u64,
    /// Symbol values given on the command line (`N=64`).
    pub symbols: Vec<(String, String)>,
    /// Where to run: the reference interpreter or compiled code.
    pub backend: sdflow_codegen::Backend,
    /// Ranks to run on: simulated ones of the interpreter, or (`--backend cpu`) the MPI
    /// ranks `mpirun` started; `inputs` and `outputs` then hold `{rank}`.
    pub ranks: Option<usize>,
}

/// Parses a rank count: `4`, or a grid `2x2` (its product).
pub fn parse_ranks(s: &str) -> Result<usize, String> {
    let n = s
        .split('x')
        .map(|p| p.trim().parse::<usize>())
        .try_fold(1usize, |acc, p| p.ok().and_then(|p| acc.checked_mul(p)))
        .filter(|&n| n >= 1);
    n.ok_or_else(|| format!("expected a rank count (4) or a grid (2x2), got '{s}'"))
}

/// Parses `NAME=VALUE`.
pub fn parse_assignment(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() && !v.trim().is_empty() => {
            Ok((k.trim().to_string(), v.trim().to_string()))
        }
        _ => Err(format!("expected NAME=VALUE, got '{s}'")),
    }
}

/// The integer symbol values given, with the program's static values.
fn int_symbols(sdfg: &Sdfg, symbols: &BTreeMap<String, Value>) -> BTreeMap<String, i64> {
    let mut ints: BTreeMap<String, i64> = symbols
        .iter()
        .filter(|(_, v)| !v.dtype().is_float())
        .map(|(k, v)| (k.clone(), v.as_i64()))
        .collect();
    for (k, s) in &sdfg.symbols {
        if let Some(v) = s.value {
            ints.insert(k.clone(), v.as_i64());
        }
    }
    ints
}

/// Checks that every container of `sdfg` whose shape the symbol values `symbols` (and
/// the static ones) give can exist: its extents other than 0 multiply to at most what
/// one array can hold (`isize::MAX` bytes). An array with an extent of 0 has no
/// elements, but `[9223372036854775807, 0, 8]` is still no shape an array can take
/// (the array library panics on it). Shapes that do not evaluate are left to the
/// interpreter and the argument checks, which say why.
pub(crate) fn check_sizes(
    sdfg: &Sdfg,
    symbols: &BTreeMap<String, Value>,
    path: &Path,
) -> Result<(), CliError> {
    let ints = int_symbols(sdfg, symbols);
    for (name, desc) in &sdfg.arrays {
        let Some(shape) = desc
            .shape()
            .iter()
            .map(|e| e.eval_map(&ints).ok().and_then(|v| u64::try_from(v).ok()))
            .collect::<Option<Vec<u64>>>()
        else {
            continue;
        };
        let bytes = shape
            .iter()
            .filter(|&&x| x != 0)
            .try_fold(desc.dtype().size_bytes() as u64, |a, &x| a.checked_mul(x));
        if bytes.is_none_or(|b| b > isize::MAX as u64) {
            let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
            let kind = if desc.transient() {
                "transient"
            } else {
                "argument"
            };
            return Err(CliError::Usage(format!(
                "{}: {kind} '{name}': shape [{}] is larger than any array can be (its extents other than 0 multiply past the address space)",
                path.display(),
                dims.join(", ")
            )));
        }
    }
    Ok(())
}

/// Pseudo-random arguments of a program (`sdflow run` without `--inputs`, `sdflow
/// bench`) for the symbol values given, made in host memory as the interpreter's arrays
/// (at most [`interp::MAX_ELEMENTS`] elements each). `command` names the command and
/// `backend` where the program runs, for the error of an array too large: the
/// interpreter's limit there, else the limit of the inputs this command makes.
pub(crate) fn random_inputs(
    sdfg: &Sdfg,
    symbols: &BTreeMap<String, Value>,
    seed: u64,
    path: &Path,
    command: &str,
    backend: sdflow_codegen::Backend,
) -> Result<Bindings, CliError> {
    // A symbol an argument's shape needs and nothing gives: say how to give it.
    for (name, desc) in sdfg.non_transients() {
        for e in desc.shape() {
            for x in e.free_symbols() {
                let known = symbols.contains_key(&x)
                    || sdfg.symbols.get(&x).is_some_and(|s| s.value.is_some());
                if !known && sdfg.symbols.contains_key(&x) {
                    return Err(CliError::Usage(format!(
                        "{}: symbol '{x}' has no value (it sizes argument '{name}'); give it with -s {x}=VALUE{}",
                        path.display(),
                        if command == "run" {
                            " or pass the arrays with --inputs"
                        } else {
                            ""
                        }
                    )));
                }
            }
        }
    }
    check_sizes(sdfg, symbols, path)?;
    if backend != sdflow_codegen::Backend::Interp {
        let ints = int_symbols(sdfg, symbols);
        for (name, desc) in sdfg.non_transients() {
            // Shapes that do not evaluate are the generator's to report.
            let Some(shape) = desc
                .shape()
                .iter()
                .map(|e| e.eval_map(&ints).ok().and_then(|v| u64::try_from(v).ok()))
                .collect::<Option<Vec<u64>>>()
            else {
                continue;
            };
            let n = shape.iter().try_fold(1u64, |a, &x| a.checked_mul(x));
            if n.is_none_or(|n| n > interp::MAX_ELEMENTS as u64) {
                let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
                let hint = if command == "run" {
                    "; pass the arrays with --inputs"
                } else {
                    ""
                };
                return Err(CliError::Usage(format!(
                    "{}: argument '{name}': shape [{}] has more than {} elements, the most `sdflow {command}` makes as a pseudo-random input{hint}",
                    path.display(),
                    dims.join(", "),
                    interp::MAX_ELEMENTS
                )));
            }
        }
    }
    interp::random_bindings(sdfg, symbols, seed).map_err(|source| {
        CliError::Usage(format!(
            "{}: cannot make pseudo-random inputs: {source}",
            path.display()
        ))
    })
}

/// The arguments' layouts for symbol inference: the extents alone (`strides` `None`), or
/// with the declared strides and the element strides each array will have.
fn arg_layouts<'a>(
    sdfg: &'a Sdfg,
    arrays: &'a BTreeMap<String, HostArray>,
    strides: Option<&'a BTreeMap<&String, Vec<isize>>>,
) -> Vec<sdflow_ir::bind::ArgLayout<'a>> {
    arrays
        .iter()
        .filter_map(|(name, a)| {
            let desc = sdfg.arrays.get(name)?;
            Some(sdflow_ir::bind::ArgLayout {
                name,
                shape: desc.shape(),
                strides: match strides {
                    Some(_) => desc.as_array().map_or(&[][..], |x| &x.strides[..]),
                    None => &[],
                },
                extents: a.shape(),
                elem_strides: strides.and_then(|s| s.get(name)).map(|v| &v[..]),
            })
        })
        .collect()
}

/// Symbol values implied by the arrays passed (their extents, and the strides they will
/// have, against the declared shapes and strides; see [`sdflow_ir::bind`]). An array is
/// laid out as its declared strides say when they describe a dense layout (column-major,
/// say) once the extents have given their symbols, and row-major otherwise. Two arrays
/// implying different values is an error naming both.
pub fn infer_symbols(
    sdfg: &Sdfg,
    arrays: &BTreeMap<String, HostArray>,
    known: &mut BTreeMap<String, Value>,
) -> Result<(), CliError> {
    let mut ints: BTreeMap<String, i64> = known
        .iter()
        .filter(|(_, v)| v.dtype().is_int())
        .map(|(k, v)| (k.clone(), v.as_i64()))
        .collect();
    for (k, s) in &sdfg.symbols {
        if let Some(v) = s.value {
            ints.insert(k.clone(), v.as_i64());
        }
    }
    let inferable = |s: &str| {
        sdfg.symbols
            .get(s)
            .is_some_and(|sym| sym.value.is_none() && sym.dtype.is_int())
    };
    // The extents first, then the strides of the layout each array will have.
    let mut first = ints.clone();
    let default = |s: &str| sdfg.symbol_default(s);
    sdflow_ir::bind::infer_symbols(
        &arg_layouts(sdfg, arrays, None),
        &inferable,
        &default,
        &mut first,
    )
    .map_err(|e| CliError::Usage(e.to_string()))?;
    let strides: BTreeMap<&String, Vec<isize>> = arrays
        .iter()
        .map(|(k, a)| {
            let st = sdfg
                .arrays
                .get(k)
                .and_then(|d| d.as_array())
                .and_then(|d| sdflow_ir::bind::layout_order(&d.strides, a.shape(), &first))
                .map_or_else(
                    || sdflow_ir::bind::c_strides(a.shape()),
                    |order| sdflow_ir::bind::dense_strides(a.shape(), &order),
                );
            (k, st)
        })
        .collect();
    let layouts = arg_layouts(sdfg, arrays, Some(&strides));
    sdflow_ir::bind::infer_symbols(&layouts, &inferable, &default, &mut ints)
        .map_err(|e| CliError::Usage(e.to_string()))?;
    for (k, v) in ints {
        if known.contains_key(&k) || sdfg.symbols.get(&k).is_none_or(|s| s.value.is_some()) {
            continue;
        }
        known.insert(k.clone(), Value::I64(v).cast(sdfg.symbols[&k].dtype));
    }
    Ok(())
}

/// The arguments of a run read from an `.npz` archive, as `sdflow run --inputs` binds
/// them: 0-d entries named like symbols give symbol values, the other symbols are inferred
/// from the arrays' extents and strides, and every non-transient container must be
/// present. `symbols` holds the values already given (`-s NAME=VALUE`).
pub fn bind_inputs(
    sdfg: &Sdfg,
    p: &Path,
    mut symbols: BTreeMap<String, Value>,
) -> Result<Bindings, CliError> {
    // Only the members the program takes are read: another (of a type sdflow does not
    // read, say) is no obstacle.
    let mut archive = npz::Archive::open(p)?;
    let mut arrays = BTreeMap::new();
    for name in archive.names().to_vec() {
        let taken = sdfg.arrays.get(&name).is_some_and(|d| !d.transient())
            || sdfg.symbols.contains_key(&name);
        if taken && !arrays.contains_key(&name) {
            let a = archive.read(&name)?;
            arrays.insert(name, a);
        }
    }
    // 0-d entries named like symbols give symbol values.
    for (name, sym) in &sdfg.symbols {
        if let Some(a) = arrays.get(name)
            && a.shape().is_empty()
            && !sdfg.arrays.contains_key(name)
            && !symbols.contains_key(name)
            && let Some(v) = a.get(&[])
        {
            // Only exact conversions: no silent wrapping of out-of-range values.
            let c = v.cast(sym.dtype);
            if c.cast(v.dtype()) != v {
                return Err(CliError::Usage(format!(
                    "{}: '{name}' = {v} does not fit the symbol's type {}",
                    p.display(),
                    sym.dtype
                )));
            }
            symbols.insert(name.clone(), c);
        }
    }
    arrays.retain(|k, _| sdfg.arrays.get(k).is_some_and(|d| !d.transient()));
    infer_symbols(sdfg, &arrays, &mut symbols).map_err(|e| match e {
        CliError::Usage(m) => CliError::Usage(format!("{}: {m}", p.display())),
        other => other,
    })?;
    let missing: Vec<&String> = sdfg
        .non_transients()
        .map(|(k, _)| k)
        .filter(|k| !arrays.contains_key(*k))
        .collect();
    if !missing.is_empty() {
        let names: Vec<&str> = missing.iter().map(|s| s.as_str()).collect();
        return Err(CliError::Usage(format!(
            "{}: no array for argument(s) {}",
            p.display(),
            names.join(", ")
        )));
    }
    Ok(Bindings { arrays, symbols })
}

/// `sdflow run FILE`: runs on the reference interpreter and prints each output's name,
/// type, shape, sum and L2 norm.
pub fn run(path: &Path, opts: &RunOptions) -> Result<String, CliError> {
    let sdfg = load_program(path)?;
    let symbols = show::symbol_values(&sdfg, "-s/--symbol", &opts.symbols)?;
    if let Some(n) = opts.ranks {
        return run_ranks(path, &sdfg, symbols, n, opts);
    }
    let mut bindings = match &opts.inputs {
        Some(p) => bind_inputs(&sdfg, p, symbols)?,
        None => random_inputs(&sdfg, &symbols, opts.seed, path, "run", opts.backend)?,
    };
    // The transients too (sized by symbols an archive may give).
    check_sizes(&sdfg, &bindings.symbols, path)?;
    match opts.backend {
        sdflow_codegen::Backend::Interp => {
            // Every runtime symbol needs a value, read or not, as the compiled backends'
            // argument check has it (same message).
            sdflow_ir::bind::check_symbols(&sdfg, &|k| bindings.symbols.contains_key(k))
                .map_err(|e| CliError::Usage(format!("program '{}': {e}", sdfg.name)))?;
            interp::run(&sdfg, &mut bindings).map_err(|source| CliError::Run {
                path: path.display().to_string(),
                source,
            })?;
        }
        sdflow_codegen::Backend::Cpu => {
            let prog = sdflow_codegen::CpuBackend::default()
                .build(&sdfg)
                .map_err(|source| CliError::Codegen {
                    path: path.display().to_string(),
                    source,
                })?;
            prog.run_bindings(&mut bindings)
                .map_err(|e| CliError::Usage(e.to_string()))?;
        }
        sdflow_codegen::Backend::Gpu => {
            let device = sdflow_codegen::cuda::device::from_env()
                .map_err(|e| CliError::Usage(format!("--backend cuda: {e}")))?;
            let mut prog = sdflow_codegen::cuda::exec::CudaBackend::default()
                .build(&sdfg, &device)
                .map_err(|source| CliError::Codegen {
                    path: path.display().to_string(),
                    source,
                })?;
            prog.run_bindings(&mut bindings)
                .map_err(|e| CliError::Usage(e.to_string()))?;
        }
    }
    if let Some(o) = &opts.outputs {
        npz::write_npz(o, &bindings.arrays)?;
    }
    Ok(summary(&sdfg, &bindings.arrays, ""))
}

/// `sdflow run FILE --ranks N`: the program on `n` simulated ranks of the interpreter.
fn run_ranks(
    path: &Path,
    sdfg: &Sdfg,
    symbols: BTreeMap<String, Value>,
    n: usize,
    opts: &RunOptions,
) -> Result<String, CliError> {
    let per_rank = |p: &Path, what: &str, r: usize| -> Result<PathBuf, CliError> {
        let text = p.to_string_lossy();
        if !text.contains("{rank}") {
            return Err(CliError::Usage(format!(
                "{what} '{text}': with --ranks, the path names each rank's file with {{rank}} (in.{{rank}}.npz)"
            )));
        }
        Ok(PathBuf::from(text.replace("{rank}", &r.to_string())))
    };
    match opts.backend {
        sdflow_codegen::Backend::Interp => {}
        sdflow_codegen::Backend::Cpu | sdflow_codegen::Backend::Gpu => {
            return run_mpi_rank(path, sdfg, symbols, n, opts, &per_rank);
        }
    }
    let outputs = match &opts.outputs {
        Some(o) => Some(
            (0..n)
                .map(|r| per_rank(o, "--outputs", r))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        None => None,
    };
    let mut ranks = Vec::with_capacity(n);
    for r in 0..n {
        let b = rank_inputs(path, sdfg, symbols.clone(), r, opts, &per_rank)?;
        sdflow_ir::bind::check_symbols(sdfg, &|k| b.symbols.contains_key(k))
            .map_err(|e| CliError::Usage(format!("program '{}', rank {r}: {e}", sdfg.name)))?;
        ranks.push(b);
    }
    interp::run_ranks(sdfg, &mut ranks).map_err(|source| CliError::Run {
        path: path.display().to_string(),
        source,
    })?;
    let mut out = String::new();
    for (r, b) in ranks.iter().enumerate() {
        if let Some(o) = &outputs {
            npz::write_npz(&o[r], &b.arrays)?;
        }
        out.push_str(&summary(sdfg, &b.arrays, &format!("rank {r}: ")));
    }
    Ok(out)
}

/// `sdflow run FILE --ranks N --backend cpu|cuda` in one of the `n` processes `mpirun -n N`
/// started: this rank's inputs (`{rank}` in the path, or pseudo-random with the seed plus
/// the rank), the compiled program (built by one rank, loaded by the others through the
/// cache's lock), this rank's outputs; its lines start with `rank r: `, the first saying
/// whether this rank built the program or loaded it.
fn run_mpi_rank(
    path: &Path,
    sdfg: &Sdfg,
    symbols: BTreeMap<String, Value>,
    n: usize,
    opts: &RunOptions,
    per_rank: &dyn Fn(&Path, &str, usize) -> Result<PathBuf, CliError>,
) -> Result<String, CliError> {
    let backend = match opts.backend {
        sdflow_codegen::Backend::Gpu => "cuda",
        _ => "cpu",
    };
    let Some((r, size)) = sdflow_codegen::mpi::launched() else {
        return Err(CliError::Usage(format!(
            "--ranks {n} --backend {backend} runs on {n} MPI ranks: start it with `mpirun -n {n} sdflow run …`"
        )));
    };
    if size != n {
        return Err(CliError::Usage(format!(
            "--ranks {n}, but mpirun started {size} ranks"
        )));
    }
    let codegen = |source| CliError::Codegen {
        path: path.display().to_string(),
        source,
    };
    let mut prog = match opts.backend {
        sdflow_codegen::Backend::Gpu => {
            let device = sdflow_codegen::cuda::device::from_env()
                .map_err(|e| CliError::Usage(format!("--backend cuda: {e}")))?;
            let p = sdflow_codegen::cuda::exec::CudaBackend::default()
                .build(sdfg, &device)
                .map_err(codegen)?;
            RankProgram::Gpu(Box::new(p))
        }
        _ => RankProgram::Cpu(Box::new(
            sdflow_codegen::CpuBackend::default()
                .build(sdfg)
                .map_err(codegen)?,
        )),
    };
    let (origin, mpi) = match &prog {
        RankProgram::Cpu(p) => (p.origin, p.mpi()),
        RankProgram::Gpu(p) => (p.origin, p.mpi()),
    };
    // From here on, a rank that fails stops every rank (the others would wait for it in
    // an exchange), with its message.
    let this_rank = || -> Result<Bindings, CliError> {
        let mut b = rank_inputs(path, sdfg, symbols, r, opts, per_rank)?;
        match &mut prog {
            RankProgram::Cpu(p) => p.run_bindings(&mut b),
            RankProgram::Gpu(p) => p.run_bindings(&mut b),
        }
        .map_err(|e| CliError::Usage(e.to_string()))?;
        if let Some(o) = &opts.outputs {
            npz::write_npz(&per_rank(o, "--outputs", r)?, &b.arrays)?;
        }
        Ok(b)
    };
    let b = match this_rank() {
        Ok(b) => b,
        Err(e) => match mpi {
            Some(m) if size > 1 => m.abort_with(r, &e),
            _ => return Err(e),
        },
    };
    let mut out = format!(
        "rank {r}: program '{}' {}\n",
        sdfg.name,
        match origin {
            sdflow_codegen::Origin::Built => "built",
            sdflow_codegen::Origin::Cached => "loaded from the cache",
        }
    );
    out.push_str(&summary(sdfg, &b.arrays, &format!("rank {r}: ")));
    Ok(out)
}

/// A rank's program, on either compiled backend.
enum RankProgram {
    Cpu(Box<sdflow_codegen::CompiledProgram>),
    Gpu(Box<sdflow_codegen::cuda::exec::GpuProgram>),
}

/// Rank `r`'s arguments: from its `--inputs` file (`{rank}` in the path), else
/// pseudo-random from the seed plus the rank; their sizes checked.
fn rank_inputs(
    path: &Path,
    sdfg: &Sdfg,
    symbols: BTreeMap<String, Value>,
    r: usize,
    opts: &RunOptions,
    per_rank: &dyn Fn(&Path, &str, usize) -> Result<PathBuf, CliError>,
) -> Result<Bindings, CliError> {
    let b = match &opts.inputs {
        Some(p) => bind_inputs(sdfg, &per_rank(p, "--inputs", r)?, symbols)?,
        None => random_inputs(
            sdfg,
            &symbols,
            opts.seed.wrapping_add(r as u64),
            path,
            "run",
            opts.backend,
        )?,
    };
    check_sizes(sdfg, &b.symbols, path)?;
    Ok(b)
}

/// A line per argument the program writes: `{prefix}name: dtype[shape] sum=… l2=…`.
fn summary(sdfg: &Sdfg, arrays: &BTreeMap<String, HostArray>, prefix: &str) -> String {
    let written = sdfg.written_data();
    let mut out = String::new();
    for name in sdfg.arguments() {
        if let (true, Some(a)) = (written.contains(&name), arrays.get(&name)) {
            let (sum, l2) = npz::checksum(a);
            let shape: Vec<String> = a.shape().iter().map(|s| s.to_string()).collect();
            let _ = writeln!(
                out,
                "{prefix}{name}: {}[{}] sum={sum:e} l2={l2:e}",
                a.dtype(),
                shape.join(", ")
            );
        }
    }
    out
}

/// What `sdflow opt` produced: the optimized program as JSON and the pipeline's report.
pub struct Optimized {
    /// The optimized SDFG in the JSON format.
    pub json: String,
    /// Its drawing marked with what the optimizer did, when asked for (at the level of
    /// detail that suits its size).
    pub dot: Option<String>,
    /// The per-pass report (rounds, time, counts, cost-model decisions).
    pub report: String,
}

/// `sdflow opt FILE [--passes a,b,c] [--gpu] [--fast-math] [--config F]`: runs the
/// default CPU pipeline (or the GPU one, or the passes named, in that order) to a fixed
/// point, built from the options as every command builds it
/// ([`sdflow_orchestration::config::Options::pipeline`]: the configuration's
/// `disable`, `fusion_balance`, `tile_rows` and `fast_math` too); with `fast_math` the
/// e-graph pass also uses its result-changing rules. The result is validated; the report
/// ends with the work per grid point before and after.
pub fn opt(
    path: &Path,
    config: Option<&Path>,
    passes: Option<&str>,
    gpu: bool,
    fast_math: bool,
    dot: bool,
) -> Result<Optimized, CliError> {
    let mut sdfg = load_program(path)?;
    let input = dot.then(|| sdfg.clone());
    let before = sdflow_ir::stats::PointCounts::of(&sdfg);
    let terr = |source| CliError::Transform {
        path: path.display().to_string(),
        source,
    };
    // The pipeline every entry point builds from options (`Options::pipeline`): the
    // configuration file's `disable`, `fusion_balance` and `tile_rows` apply here too.
    let backend = if gpu {
        sdflow_codegen::Backend::Gpu
    } else {
        sdflow_codegen::Backend::Cpu
    };
    let mut options = show::resolve_options(config, &sdfg.name, backend, None)?
        .0
        .options;
    if let Some(list) = passes {
        let names: Vec<String> = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        if names.is_empty() {
            return Err(CliError::Usage(
                "--passes needs at least one pass name (e.g. --passes state_fusion,map_fusion)"
                    .into(),
            ));
        }
        options.passes = Some(names);
    }
    options.fast_math |= fast_math;
    let pipeline = options.pipeline().map_err(|e| match e {
        e @ sdflow_transforms::TransformError::FastMathWithoutEGraph { .. } => {
            CliError::Usage(format!("--fast-math: {e}"))
        }
        other => terr(other),
    })?;
    let report = pipeline.run(&mut sdfg).map_err(terr)?;
    let after = sdflow_ir::stats::PointCounts::of(&sdfg);
    if let Err(problems) = sdfg.validate() {
        return Err(terr(sdflow_transforms::TransformError::Invalid {
            pass: "(pipeline)".into(),
            problems: problems.iter().map(|p| p.to_string()).collect(),
        }));
    }
    let dot = input.map(|before| {
        let opts = sdflow_ir::dot::DotOptions {
            marks: Some(sdflow_ir::dot::diff_marks(&before, &sdfg)),
            ..Default::default()
        };
        sdflow_ir::dot::to_dot_with(&sdfg, &opts).unwrap_or_default()
    });
    Ok(Optimized {
        json: format::to_json(&sdfg),
        dot,
        report: format!(
            "{report}work per grid point (all maps)\n  before  {before}\n  after   {after}\n"
        ),
    })
}

/// Writes `bytes` to `path` (for commands whose output goes to a file).
pub fn write_output(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    write_bytes(path, bytes)
}

/// `sdflow show FILE --emit c|cuda|plan|sdfg|dot [--opt]`: [`show_with`] without a
/// configuration file or static values.
pub fn show(path: &Path, emit: &str, optimize: bool) -> Result<String, CliError> {
    show_with(
        path,
        &ShowOptions {
            emit: emit.to_string(),
            opt: optimize,
            ..ShowOptions::default()
        },
    )
}

/// `sdflow show FILE --emit KIND [--opt] [--backend B] [--config F] [-s NAME=VALUE]`: an
/// intermediate of the workflow (`docs/workflow.md`) — the program (`sdfg`, `dot`) or
/// its generated C or CUDA or execution plan, after specialization to the static values
/// and, with `--opt`, the optimize step; `optimized`, the program after the optimize
/// step; `report`, the options the program gets with the source of each, and every
/// step's log.
pub fn show_with(path: &Path, o: &ShowOptions) -> Result<String, CliError> {
    Ok(show::show(
        load_program(path)?,
        &path.display().to_string(),
        o,
    )?)
}
