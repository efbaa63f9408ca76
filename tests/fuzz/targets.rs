//! The loaders under test, each fed one input the way the `sdflow` tool feeds it, and the
//! check that every rejection says what and where.
//!
//! The check, per error kind:
//! - JSON format errors: a non-empty message, and a JSON path whose every step but the
//!   last exists in the document (the last may be the missing field; with repeated keys,
//!   whose every key occurs in the text); an empty path only for errors about the
//!   document itself, which then give its line and column (malformed JSON, a repeated or
//!   missing top-level field) or say it is not an object.
//! - DaCe import errors: a non-empty message and location; the location `file` only for
//!   a file that is not gzip, UTF-8 or JSON, otherwise a path from `sdfg '…'` down.
//! - Validation problems: at least one; each with a non-empty message and a location
//!   that starts at an SDFG.
//! - `.npz` errors: a non-empty message naming the archive's path, or an argument,
//!   member or symbol name of the program.
//! - Text syntax errors: a non-empty message, the text itself, and a column inside it
//!   (1 to its length + 1); DaCe's Python reader: a non-empty message.
//!
//! Accepted inputs are checked further: a valid program read from a file is written to
//! the JSON format and read back equal; accepted text prints as text that parses back
//! equal.

use std::collections::BTreeMap;
use std::path::Path;

use sdflow::cli::{self, CliError};
use sdflow::ir::validate::{Problem, Segment};
use sdflow::ir::{Sdfg, format, parse};
use sdflow::npz::NpzError;
use sdflow::orchestration::load::{self, LoadError};
use serde_json::Value;

use super::corpus::Corpus;

/// A loader under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Loader {
    /// sdflow JSON: read (as `sdflow` reads a program file), draw, validate, stats,
    /// write and read back.
    Json,
    /// DaCe `.sdfg`/`.sdfgz`: the same path, through the importer.
    Dace,
    /// `.npz` inputs bound against a program, as `sdflow run --inputs` binds them.
    Npz,
    /// Expression, statement, subset and memlet text, and DaCe's Python subset.
    Text,
    /// `sdflow plot`: an archive and the field to draw ([`super::tools`]).
    Plot,
    /// `sdflow run` on the interpreter: a program with an archive of inputs or
    /// pseudo-random ones, and `-s` values.
    Run,
    /// `sdflow bench` up to the compilation: a configuration file, `--threads`, `-s`.
    Bench,
}

impl Loader {
    /// Every loader.
    pub const ALL: [Loader; 7] = [
        Loader::Json,
        Loader::Dace,
        Loader::Npz,
        Loader::Text,
        Loader::Plot,
        Loader::Run,
        Loader::Bench,
    ];

    /// Its name on the command line and in folder names.
    pub fn name(self) -> &'static str {
        match self {
            Loader::Json => "json",
            Loader::Dace => "dace",
            Loader::Npz => "npz",
            Loader::Text => "text",
            Loader::Plot => "plot",
            Loader::Run => "run",
            Loader::Bench => "bench",
        }
    }

    /// The loader of this name.
    pub fn from_name(s: &str) -> Option<Loader> {
        Loader::ALL.into_iter().find(|l| l.name() == s)
    }

    /// File extension of saved inputs.
    pub fn ext(self) -> &'static str {
        match self {
            Loader::Json => "json",
            Loader::Dace => "sdfg",
            Loader::Npz => "npz",
            Loader::Text => "txt",
            Loader::Plot | Loader::Run => "npz",
            Loader::Bench => "toml",
        }
    }
}

/// The text entry points: an input of [`Loader::Text`] is `ENTRY\nTEXT`.
pub const TEXT_ENTRIES: [&str; 7] = [
    "expr",
    "symexpr",
    "stmt",
    "subset",
    "memlet",
    "python",
    "python_sym",
];

/// One input.
#[derive(Clone, Debug)]
pub struct Input {
    /// The loader it is for.
    pub loader: Loader,
    /// For `.npz` inputs: the program (key of [`Corpus::programs`]) it is bound against;
    /// for the tools' inputs, the command line around the file ([`super::tools`]).
    pub program: Option<String>,
    /// The bytes.
    pub bytes: Vec<u8>,
}

/// What a loader made of an input.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Loaded (and everything downstream ran).
    Accepted,
    /// Refused with an error that passes the check.
    Rejected(String),
    /// Refused with an error that fails the check, or accepted but broke an invariant.
    Bad(String),
}

/// Runs one input through its loader. `scratch` is a file the `.npz` loader may write
/// (the tool reads archives from files).
pub fn run(input: &Input, corpus: &Corpus, scratch: &Path) -> Verdict {
    match input.loader {
        Loader::Json | Loader::Dace => program_file(&input.bytes),
        Loader::Npz => npz(input, corpus, scratch),
        Loader::Text => text(&input.bytes),
        Loader::Plot | Loader::Run | Loader::Bench => super::tools::run(input, corpus, scratch),
    }
}

fn program_file(bytes: &[u8]) -> Verdict {
    let path = Path::new("input.sdfg");
    let sdfg = match load::read_bytes(bytes, &path.display().to_string()) {
        Ok(s) => s,
        Err(e) => return check_load(&e, bytes),
    };
    // `sdflow dot` draws programs without validating them.
    let dot = sdflow::ir::dot::to_dot(&sdfg);
    if !dot.starts_with("digraph") {
        return Verdict::Bad(format!(
            "DOT text does not start with 'digraph': {:.60}",
            dot
        ));
    }
    if let Err(problems) = sdfg.validate() {
        return check_problems(&problems);
    }
    let back = format::to_json(&sdfg);
    match format::from_json(&back) {
        Ok(s) if s == sdfg => {}
        Ok(_) => return Verdict::Bad("written and read back, the program differs".into()),
        Err(e) => return Verdict::Bad(format!("its own JSON does not read back: {e}")),
    }
    let stats = cli::stats_text(&sdfg);
    if !stats.starts_with("name: ") {
        return Verdict::Bad(format!("stats text: {stats:.60}"));
    }
    Verdict::Accepted
}

fn check_problems(problems: &[Problem]) -> Verdict {
    if problems.is_empty() {
        return Verdict::Bad("invalid, with no problem listed".into());
    }
    for p in problems {
        if p.message.trim().is_empty()
            || !matches!(p.location.segments.first(), Some(Segment::Sdfg(_)))
        {
            return Verdict::Bad(format!("problem without what or where: '{p}'"));
        }
    }
    Verdict::Rejected(problems[0].to_string())
}

fn check_load(e: &LoadError, bytes: &[u8]) -> Verdict {
    let shown = e.to_string();
    match e {
        LoadError::Format { source, .. } => {
            if source.message.trim().is_empty() {
                return Verdict::Bad(format!("format error without a message: '{shown}'"));
            }
            if source.path.is_empty() {
                // About the document itself: where is its line and column.
                let whole = source.message.contains(" at line ")
                    || source.message == "an SDFG document is a JSON object";
                return if whole {
                    Verdict::Rejected(shown)
                } else {
                    Verdict::Bad(format!("format error without a JSON path: '{shown}'"))
                };
            }
            let doc: Option<Value> = std::str::from_utf8(bytes)
                .ok()
                .and_then(|t| serde_json::from_str(t).ok());
            // With a repeated key, the parsed document holds only the last value: then
            // each key of the path must at least occur in the text.
            let keys_in_text = || {
                let text = String::from_utf8_lossy(bytes);
                path_steps(&source.path).is_some_and(|steps| {
                    steps
                        .iter()
                        .filter_map(|s| s.as_ref().ok())
                        .all(|k| text.contains(&format!("{}:", Value::String(k.to_string()))))
                })
            };
            match doc {
                Some(d) if !path_exists(&d, &source.path) && !keys_in_text() => {
                    Verdict::Bad(format!(
                        "JSON path '{}' is not in the document: '{shown}'",
                        source.path
                    ))
                }
                _ => Verdict::Rejected(shown),
            }
        }
        LoadError::Import { source, .. } => {
            let file_level = ["not JSON", "not UTF-8", "not readable gzip"]
                .iter()
                .any(|p| source.message.starts_with(p));
            if source.message.trim().is_empty()
                || (source.location == "file") != file_level
                || (source.location != "file" && !source.location.starts_with("sdfg"))
            {
                Verdict::Bad(format!("import error without what or where: '{shown}'"))
            } else {
                Verdict::Rejected(shown)
            }
        }
        LoadError::NotText { .. } => Verdict::Rejected(shown),
        LoadError::Invalid { problems, .. } => check_problems(problems),
        other => Verdict::Bad(format!("unexpected kind of error: {other:?}")),
    }
}

/// The steps of a JSON path like `states[0].nodes[1].tasklet` or `arrays["u.v"].shape`:
/// keys and indices; `None` when it does not read as a path.
fn path_steps(path: &str) -> Option<Vec<Result<String, usize>>> {
    let mut steps = Vec::new();
    let mut rest = path;
    while !rest.is_empty() {
        rest = rest.strip_prefix('.').unwrap_or(rest);
        if let Some(r) = rest.strip_prefix("[\"") {
            // A quoted key: a JSON string up to the first unescaped quote.
            let mut de = serde_json::Deserializer::from_str(&rest[1..]).into_iter::<String>();
            let key = de.next()?.ok()?;
            let used = de.byte_offset();
            steps.push(Ok(key));
            rest = r.get(used - 1..)?.strip_prefix(']')?;
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            steps.push(Err(r[..end].parse().ok()?));
            rest = &r[end + 1..];
        } else {
            let end = rest.find(['.', '[']).unwrap_or(rest.len());
            steps.push(Ok(rest[..end].to_string()));
            rest = &rest[end..];
        }
    }
    Some(steps)
}

/// Whether every step but the last of a JSON path exists in `doc`.
fn path_exists(doc: &Value, path: &str) -> bool {
    let Some(steps) = path_steps(path) else {
        return false;
    };
    let mut v = doc;
    for (i, s) in steps.iter().enumerate() {
        let next = match s {
            Ok(k) => v.get(k.as_str()),
            Err(i) => v.get(*i),
        };
        match next {
            Some(n) => v = n,
            None => return i + 1 == steps.len(),
        }
    }
    true
}

fn npz(input: &Input, corpus: &Corpus, scratch: &Path) -> Verdict {
    let Some(sdfg) = input.program.as_ref().and_then(|k| corpus.programs.get(k)) else {
        return Verdict::Bad(format!("no program '{:?}' to bind against", input.program));
    };
    if let Err(e) = std::fs::write(scratch, &input.bytes) {
        return Verdict::Bad(format!("cannot write {}: {e}", scratch.display()));
    }
    let b = match cli::bind_inputs(sdfg, scratch, BTreeMap::new()) {
        Ok(b) => b,
        Err(e) => return check_npz_error(&e, sdfg, scratch),
    };
    // The interpreter's argument check: every argument's dtype and shape.
    for (name, desc) in sdfg.non_transients() {
        let Some(a) = b.arrays.get(name) else {
            return Verdict::Bad(format!("argument '{name}' missing after binding"));
        };
        match sdflow::ir::interp::eval_shape(desc, &b.symbols) {
            Err(e) => return Verdict::Rejected(format!("argument '{name}': {e}")),
            Ok(shape) if shape != a.shape() || a.dtype() != desc.dtype() => {
                return Verdict::Rejected(format!("argument '{name}': shape or dtype"));
            }
            Ok(_) => {}
        }
    }
    Verdict::Accepted
}

fn check_npz_error(e: &CliError, sdfg: &Sdfg, path: &Path) -> Verdict {
    let shown = e.to_string();
    let p = path.display().to_string();
    let ok = match e {
        CliError::Npz(NpzError::Format { path: fp, message }) => {
            fp == &p && !message.trim().is_empty()
        }
        CliError::Npz(NpzError::Io { .. }) => false,
        CliError::Usage(m) => {
            !m.trim().is_empty()
                && (m.contains(&p)
                    || sdfg
                        .arrays
                        .keys()
                        .chain(sdfg.symbols.keys())
                        .any(|n| m.contains(n.as_str())))
        }
        _ => false,
    };
    if ok {
        Verdict::Rejected(shown)
    } else {
        Verdict::Bad(format!("npz error without what or where: {e:?}"))
    }
}

fn parse_err(e: &parse::ParseError, text: &str) -> Verdict {
    if e.message.trim().is_empty() || e.text != text || e.column == 0 || e.column > text.len() + 1 {
        Verdict::Bad(format!("parse error without what or where: {e:?}"))
    } else {
        Verdict::Rejected(e.to_string())
    }
}

fn roundtrip<T: PartialEq + std::fmt::Display + std::fmt::Debug>(
    v: T,
    reparse: impl Fn(&str) -> Result<T, parse::ParseError>,
) -> Verdict {
    let shown = v.to_string();
    match reparse(&shown) {
        Ok(w) if w == v => Verdict::Accepted,
        Ok(w) => Verdict::Bad(format!(
            "'{shown}' parses back as another value: {w:?} vs {v:?}"
        )),
        Err(e) => Verdict::Bad(format!("'{shown}' (printed) does not parse back: {e}")),
    }
}

fn text(bytes: &[u8]) -> Verdict {
    let s = String::from_utf8_lossy(bytes);
    let (entry, t) = s.split_once('\n').unwrap_or((&s, ""));
    let r = match entry {
        "expr" => parse::parse_expr(t).map(|v| roundtrip(v, parse::parse_expr)),
        "symexpr" => parse::parse_symexpr(t).map(|v| roundtrip(v, parse::parse_symexpr)),
        "stmt" => parse::parse_stmt(t).map(|v| roundtrip(v, parse::parse_stmt)),
        "subset" => parse::parse_subset(t).map(|v| roundtrip(v, parse::parse_subset)),
        "memlet" => parse::parse_memlet(t).map(|v| roundtrip(v, parse::parse_memlet)),
        "python" => {
            return match sdflow::orchestration::dace::python::statements(t) {
                Ok(_) => Verdict::Accepted,
                Err(m) if m.trim().is_empty() => Verdict::Bad("python: empty message".into()),
                Err(m) => Verdict::Rejected(m),
            };
        }
        "python_sym" => {
            return match sdflow::orchestration::dace::python::sym(t) {
                Ok(_) => Verdict::Accepted,
                Err(m) if m.trim().is_empty() => Verdict::Bad("python sym: empty message".into()),
                Err(m) => Verdict::Rejected(m),
            };
        }
        other => return Verdict::Bad(format!("unknown text entry '{other}'")),
    };
    match r {
        Ok(v) => v,
        Err(e) => parse_err(&e, t),
    }
}
