//! Per-program backend options: built-in defaults, what the code asks for, and a TOML
//! configuration file looked up by program name × backend × architecture
//! (`docs/configuration.md`).
//!
//! ```toml
//! [defaults]                 # every program, every backend
//! fast_math = false
//! [cpu]                      # every program on the cpu backend
//! threads = 8
//! [cpu.x86_64]               # … on x86-64 machines
//! schedule = "static"
//! [gpu.sm_90]                # every program on the gpu backend on sm_90 devices
//! block_size = 128
//! [program.diffusion]        # one program, any backend
//! backend = "cpu"
//! tile_rows = 8
//! [program.diffusion.cpu]    # one program on one backend (and `.x86_64` below it)
//! threads = 4
//! ```
//!
//! Later layers win: built-in defaults, then the code's options, then `[defaults]`,
//! `[<backend>]`, `[<backend>.<arch>]`, `[program.<name>]`, `[program.<name>.<backend>]`,
//! `[program.<name>.<backend>.<arch>]`. The file is the deployment's word, so it overrides
//! what the code chose. Every resolved option remembers where its value came from.
//!
//! Why one file of this size: the option table, the TOML reader with spans and the
//! resolution by program, backend and architecture are read against each other: each
//! option's parser, scope and source live in one table.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use sdflow_codegen::{Backend, OmpSchedule};
use toml::de::{DeTable, DeValue};

/// The environment variable naming the configuration file (it overrides the path the
/// code gives).
pub const CONFIG_ENV: &str = "SDFLOW_CONFIG";

/// Which backends an option applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scope {
    /// The optimizer and the choice of backend: every backend.
    Any,
    /// The CPU backend only.
    Cpu,
    /// The GPU backend only.
    Gpu,
}

/// Every option: its key, the backends it applies to, and what it means (for messages
/// and `docs/configuration.md`).
const OPTIONS: &[(&str, Scope, &str)] = &[
    (
        "backend",
        Scope::Any,
        "the backend: \"cpu\", \"gpu\" or \"interp\"",
    ),
    (
        "optimize",
        Scope::Any,
        "run the optimization pipeline (bool)",
    ),
    (
        "passes",
        Scope::Any,
        "the passes to run instead of the backend's pipeline (list of names)",
    ),
    (
        "disable",
        Scope::Any,
        "passes to leave out of the pipeline (list of names)",
    ),
    (
        "fast_math",
        Scope::Any,
        "let the e-graph use result-changing rules (bool)",
    ),
    (
        "fusion_balance",
        Scope::Any,
        "flops map fusion may recompute per byte saved (number > 0)",
    ),
    (
        "tile_rows",
        Scope::Any,
        "rows per tile when fusing through a tile buffer, 0 never tiles (integer ≥ 0)",
    ),
    (
        "threads",
        Scope::Cpu,
        "OpenMP threads, 0 for the OpenMP default (integer from 0 to 4096)",
    ),
    (
        "schedule",
        Scope::Cpu,
        "OpenMP schedule of parallel maps: \"static\", \"dynamic\" or \"guided\"",
    ),
    (
        "parallel_min_points",
        Scope::Cpu,
        "maps with fewer points run on one thread (integer ≥ 1)",
    ),
    (
        "block_size",
        Scope::Gpu,
        "threads per block of map kernels (a multiple of 32, 32 to 1024)",
    ),
    ("graphs", Scope::Gpu, "replay captured CUDA graphs (bool)"),
    (
        "overlap_exchanges",
        Scope::Cpu,
        "run work that does not touch a halo exchange's fields between its start and its finish (bool)",
    ),
    (
        "lag_points",
        Scope::Cpu,
        "consumer points per thread in each chunk of a lagged producer-consumer pair; 0 runs the two maps one after the other (integer ≥ 0)",
    ),
];

/// The options one program is built and run with.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// The backend.
    pub backend: Backend,
    /// Whether the optimization pipeline runs at all.
    pub optimize: bool,
    /// The passes to run, in order, instead of the backend's default pipeline.
    pub passes: Option<Vec<String>>,
    /// Passes left out of the pipeline.
    pub disable: Vec<String>,
    /// The e-graph's result-changing rules (reassociation, fma formation, …).
    pub fast_math: bool,
    /// Map fusion's machine balance (flops recomputed per byte saved).
    pub fusion_balance: f64,
    /// Map fusion's rows per tile (0: never fuse through a tile buffer).
    pub tile_rows: i64,
    /// OpenMP threads (0: the OpenMP default).
    pub threads: usize,
    /// OpenMP schedule of parallel maps.
    pub schedule: OmpSchedule,
    /// Maps with fewer points run on one thread.
    pub parallel_min_points: i64,
    /// Threads per block of the GPU's map kernels.
    pub block_size: u32,
    /// Replay captured CUDA graphs.
    pub graphs: bool,
    /// Run independent work between a halo exchange's start and finish.
    pub overlap_exchanges: bool,
    /// Consumer points per thread in each chunk of a lagged pair (0: not lagged).
    pub lag_points: i64,
}

impl Options {
    /// The pass pipeline these options ask for: the one function every entry point (the
    /// workflow's optimize step, `sdflow opt`, `show` and `bench`, Python's `optimize`)
    /// builds it with, so the same options give the same pipeline.
    pub fn pipeline(
        &self,
    ) -> Result<sdflow_transforms::Pipeline, sdflow_transforms::TransformError> {
        let mut p = match &self.passes {
            Some(names) => sdflow_transforms::Pipeline::from_names(names)?,
            None if self.backend == Backend::Gpu => sdflow_transforms::Pipeline::gpu(),
            None => sdflow_transforms::Pipeline::cpu(),
        };
        for d in &self.disable {
            p = p.disable(d)?;
        }
        if p.names().contains(&"map_fusion") {
            p = p.replace(
                "map_fusion",
                Box::new(sdflow_transforms::MapFusion {
                    balance: self.fusion_balance,
                    tile_rows: self.tile_rows,
                }),
            )?;
        }
        if self.fast_math {
            p = p.fast_math()?;
        }
        Ok(p)
    }

    /// The built-in defaults for a backend.
    pub fn defaults(backend: Backend) -> Options {
        let emit = sdflow_codegen::EmitOptions::default();
        Options {
            backend,
            optimize: true,
            passes: None,
            disable: Vec::new(),
            fast_math: false,
            fusion_balance: 1.0,
            // The GPU pipeline fuses by recomputation only: a tile buffer per thread is a
            // CPU cache optimization.
            tile_rows: if backend == Backend::Gpu { 0 } else { 16 },
            threads: 0,
            schedule: emit.schedule,
            parallel_min_points: emit.parallel_min_points,
            block_size: sdflow_codegen::cuda::emit::CudaEmitOptions::default().block_size,
            graphs: true,
            overlap_exchanges: emit.overlap_exchanges,
            lag_points: emit.lag_points,
        }
    }

    /// Sets option `key` from a value written as TOML (`8`, `"dynamic"`, `["a", "b"]`),
    /// as code does; errors say what is wrong with the value.
    pub fn set(&mut self, key: &str, toml_value: &str) -> Result<(), String> {
        let v = DeValue::parse(toml_value).map_err(|e| format!("{key}: {}", e.message()))?;
        self.set_value(key, v.get_ref())
            .map_err(|m| format!("{key}: {m}"))
    }

    fn set_value(&mut self, key: &str, v: &DeValue<'_>) -> Result<(), String> {
        match key {
            "backend" => {
                let s = string(v)?;
                self.backend = Backend::from_tag(s).ok_or_else(|| {
                    format!("unknown backend \"{s}\"; expected \"cpu\", \"gpu\" or \"interp\"")
                })?;
            }
            "optimize" => self.optimize = boolean(v)?,
            "passes" => {
                let names = strings(v)?;
                for n in &names {
                    known_pass(n)?;
                }
                self.passes = Some(names);
            }
            "disable" => {
                let names = strings(v)?;
                for n in &names {
                    known_pass(n)?;
                }
                self.disable = names;
            }
            "fast_math" => self.fast_math = boolean(v)?,
            "fusion_balance" => {
                let x = number(v)?;
                if !(x > 0.0 && x.is_finite()) {
                    return Err(format!("expected a positive number, found {x}"));
                }
                self.fusion_balance = x;
            }
            "tile_rows" => self.tile_rows = integer(v, 0, 1 << 20)?,
            "threads" => {
                let n = integer(v, i64::MIN, i64::MAX)?;
                let max = sdflow_codegen::MAX_THREADS;
                if !(0..=max as i64).contains(&n) {
                    let why = if n > 0 {
                        ": more threads than sdflow asks the OpenMP runtime for (docs/configuration.md)"
                    } else {
                        ""
                    };
                    return Err(format!(
                        "expected an integer from 0 to {max}, found {n}{why}"
                    ));
                }
                self.threads = n as usize;
            }
            "schedule" => {
                let s = string(v)?;
                self.schedule = OmpSchedule::from_name(s).ok_or_else(|| {
                    format!(
                        "unknown schedule \"{s}\"; expected \"static\", \"dynamic\" or \"guided\""
                    )
                })?;
            }
            "parallel_min_points" => self.parallel_min_points = integer(v, 1, i64::MAX)?,
            "block_size" => {
                let b = integer(v, 32, 1024)?;
                if b % 32 != 0 {
                    return Err(format!("expected a multiple of 32, found {b}"));
                }
                self.block_size = b as u32;
            }
            "graphs" => self.graphs = boolean(v)?,
            "overlap_exchanges" => self.overlap_exchanges = boolean(v)?,
            "lag_points" => self.lag_points = integer(v, 0, i64::from(i32::MAX))?,
            _ => return Err(unknown_option(key)),
        }
        Ok(())
    }

    /// Each option's value as TOML text, in the order of `docs/configuration.md`.
    pub fn entries(&self) -> Vec<(&'static str, String)> {
        let list = |v: &[String]| {
            let q: Vec<String> = v.iter().map(|s| format!("\"{s}\"")).collect();
            format!("[{}]", q.join(", "))
        };
        OPTIONS
            .iter()
            .filter(|(_, scope, _)| applies(*scope, self.backend))
            .map(|(k, _, _)| {
                let v = match *k {
                    "backend" => format!("\"{}\"", tag(self.backend)),
                    "optimize" => self.optimize.to_string(),
                    "passes" => match &self.passes {
                        Some(p) => list(p),
                        None => "(the backend's pipeline)".into(),
                    },
                    "disable" => list(&self.disable),
                    "fast_math" => self.fast_math.to_string(),
                    "fusion_balance" => format!("{:?}", self.fusion_balance),
                    "tile_rows" => self.tile_rows.to_string(),
                    "threads" => self.threads.to_string(),
                    "schedule" => format!("\"{}\"", self.schedule.name()),
                    "parallel_min_points" => self.parallel_min_points.to_string(),
                    "block_size" => self.block_size.to_string(),
                    "overlap_exchanges" => self.overlap_exchanges.to_string(),
                    "lag_points" => self.lag_points.to_string(),
                    _ => self.graphs.to_string(),
                };
                (*k, v)
            })
            .collect()
    }
}

fn applies(scope: Scope, backend: Backend) -> bool {
    match scope {
        Scope::Any => true,
        Scope::Cpu => backend == Backend::Cpu,
        Scope::Gpu => backend == Backend::Gpu,
    }
}

/// The tag of a backend as configuration files write it.
pub fn tag(b: Backend) -> &'static str {
    match b {
        Backend::Interp => "interp",
        Backend::Cpu => "cpu",
        Backend::Gpu => "gpu",
    }
}

fn unknown_option(key: &str) -> String {
    let names: Vec<&str> = OPTIONS.iter().map(|(k, _, _)| *k).collect();
    format!("unknown option '{key}'; options are {}", names.join(", "))
}

fn known_pass(name: &str) -> Result<(), String> {
    if sdflow_transforms::PASS_NAMES.contains(&name) {
        Ok(())
    } else {
        Err(format!(
            "unknown pass '{name}'; passes are {}",
            sdflow_transforms::PASS_NAMES.join(", ")
        ))
    }
}

fn string<'a>(v: &'a DeValue<'_>) -> Result<&'a str, String> {
    v.as_str()
        .ok_or_else(|| format!("expected a string, found {}", v.type_str()))
}

fn boolean(v: &DeValue<'_>) -> Result<bool, String> {
    v.as_bool()
        .ok_or_else(|| format!("expected true or false, found {}", v.type_str()))
}

fn integer(v: &DeValue<'_>, lo: i64, hi: i64) -> Result<i64, String> {
    let i = v
        .as_integer()
        .ok_or_else(|| format!("expected an integer, found {}", v.type_str()))?;
    let x = i64::from_str_radix(&i.as_str().replace('_', ""), i.radix())
        .map_err(|_| format!("integer {} out of range", i.as_str()))?;
    if x < lo || x > hi {
        return Err(format!("expected an integer from {lo} to {hi}, found {x}"));
    }
    Ok(x)
}

fn number(v: &DeValue<'_>) -> Result<f64, String> {
    if let Some(f) = v.as_float() {
        return f
            .as_str()
            .replace('_', "")
            .parse::<f64>()
            .map_err(|_| format!("bad number {}", f.as_str()));
    }
    integer(v, i64::MIN, i64::MAX).map(|x| x as f64)
}

fn strings(v: &DeValue<'_>) -> Result<Vec<String>, String> {
    let a = v
        .as_array()
        .ok_or_else(|| format!("expected a list of strings, found {}", v.type_str()))?;
    a.iter()
        .map(|e| string(e.get_ref()).map(str::to_string))
        .collect()
}

/// Where a resolved option's value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// sdflow's built-in default.
    Default,
    /// The program's options in code.
    Code,
    /// A configuration file: its path, the line, and the table (`[program.x.cpu]`).
    File {
        /// The file.
        path: PathBuf,
        /// The line of the value (1-based).
        line: usize,
        /// The table it was set in.
        table: String,
    },
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => write!(f, "default"),
            Source::Code => write!(f, "code"),
            Source::File { path, line, table } => {
                write!(f, "{}:{line} [{table}]", path.display())
            }
        }
    }
}

/// A program's options and where each came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    /// The options.
    pub options: Options,
    /// The architecture they were looked up for (`x86_64`, `sm_90`).
    pub arch: String,
    /// Per option key, where its value came from (absent: the built-in default).
    pub sources: BTreeMap<&'static str, Source>,
}

impl Resolved {
    /// The report `sdflow show --emit report` prints: one line per option that applies
    /// to the backend, with its value and its source.
    pub fn to_text(&self) -> String {
        let mut s = format!(
            "options ({} on {}):\n",
            tag(self.options.backend),
            self.arch
        );
        for (k, v) in self.options.entries() {
            let src = self.sources.get(k).cloned().unwrap_or(Source::Default);
            s.push_str(&format!("  {k:<20} {v:<28} {src}\n"));
        }
        s
    }
}

/// A configuration error: the file, the line and column, the key, and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}:{line}:{column}: {}{message}", path.display(), if key.is_empty() { String::new() } else { format!("{key}: ") })]
pub struct ConfigError {
    /// The file.
    pub path: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// The dotted key (or table) at fault.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

/// Which programs, backends and architectures a table applies to.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Selector {
    program: Option<String>,
    backend: Option<Backend>,
    arch: Option<String>,
}

impl Selector {
    /// The merge rank: more specific tables come later.
    fn rank(&self) -> u8 {
        (self.program.is_some() as u8) * 3
            + self.backend.is_some() as u8
            + self.arch.is_some() as u8
    }

    fn table(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        if let Some(p) = &self.program {
            parts.push("program".into());
            parts.push(quote_key(p));
        }
        if let Some(b) = self.backend {
            parts.push(tag(b).into());
        }
        if let Some(a) = &self.arch {
            parts.push(quote_key(a));
        }
        if parts.is_empty() {
            "defaults".into()
        } else {
            parts.join(".")
        }
    }
}

fn quote_key(k: &str) -> String {
    if !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        k.to_string()
    } else {
        format!("\"{}\"", k.replace('\\', "\\\\").replace('"', "\\\""))
    }
}

/// One option set in a file.
#[derive(Clone, Debug)]
struct Entry {
    key: &'static str,
    /// The value as TOML text (re-parsed when applied: the file's values outlive the
    /// borrowed parse tree).
    text: String,
    line: usize,
}

/// A parsed configuration file.
#[derive(Clone, Debug, Default)]
pub struct Config {
    path: Option<PathBuf>,
    layers: Vec<(Selector, Vec<Entry>)>,
}

/// CPU architecture names a `[cpu.<arch>]` table may use (Rust's `target_arch` names).
const CPU_ARCHES: &[&str] = &[
    "x86_64",
    "x86",
    "aarch64",
    "arm",
    "powerpc64",
    "riscv64",
    "s390x",
    "loongarch64",
];

/// This machine's CPU architecture, as `[cpu.<arch>]` tables name it.
pub fn host_arch() -> &'static str {
    std::env::consts::ARCH
}

impl Config {
    /// No file: every program gets the defaults and the code's options.
    pub fn empty() -> Config {
        Config::default()
    }

    /// The file in `$SDFLOW_CONFIG` if set, else `default` if given, else none.
    pub fn locate(default: Option<&Path>) -> Result<Config, ConfigError> {
        match std::env::var_os(CONFIG_ENV) {
            Some(p) if !p.is_empty() => Config::load(Path::new(&p)),
            _ => match default {
                Some(p) => Config::load(p),
                None => Ok(Config::empty()),
            },
        }
    }

    /// Reads and checks a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            path: path.to_path_buf(),
            line: 0,
            column: 0,
            key: String::new(),
            message: format!("cannot read the configuration file: {e}"),
        })?;
        Config::parse(&text, path)
    }

    /// Parses configuration text; `path` names it in errors and sources.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let at = |offset: usize, key: &str, message: String| {
            let before = &text[..offset.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            ConfigError {
                path: path.to_path_buf(),
                line,
                column,
                key: key.to_string(),
                message,
            }
        };
        let root = DeTable::parse(text).map_err(|e| {
            at(
                e.span().map_or(0, |s| s.start),
                "",
                format!("not valid TOML: {}", e.message().trim()),
            )
        })?;
        let mut cfg = Config {
            path: Some(path.to_path_buf()),
            layers: Vec::new(),
        };
        let mut tops: Vec<_> = root.get_ref().iter().collect();
        tops.sort_by_key(|(k, _)| k.span().start);
        for (k, v) in tops {
            let name = k.get_ref().as_ref();
            let table = |v, key: &str| {
                as_table(v).ok_or_else(|| {
                    at(
                        v.span().start,
                        key,
                        format!("expected a table, found {}", v.get_ref().type_str()),
                    )
                })
            };
            match name {
                "defaults" => {
                    let t = table(v, name)?;
                    cfg.read_layer(
                        t,
                        Selector {
                            program: None,
                            backend: None,
                            arch: None,
                        },
                        name,
                        &at,
                    )?;
                }
                "program" => {
                    let programs = table(v, name)?;
                    let mut ps: Vec<_> = programs.iter().collect();
                    ps.sort_by_key(|(k, _)| k.span().start);
                    for (pk, pv) in ps {
                        let pname = pk.get_ref().to_string();
                        let key = format!("program.{}", quote_key(&pname));
                        let t = table(pv, &key)?;
                        cfg.read_layer(
                            t,
                            Selector {
                                program: Some(pname),
                                backend: None,
                                arch: None,
                            },
                            &key,
                            &at,
                        )?;
                    }
                }
                _ => match Backend::from_tag(name).filter(|_| name != "cuda") {
                    Some(b) => {
                        let t = table(v, name)?;
                        cfg.read_layer(
                            t,
                            Selector {
                                program: None,
                                backend: Some(b),
                                arch: None,
                            },
                            name,
                            &at,
                        )?;
                    }
                    None => {
                        return Err(at(
                            k.span().start,
                            name,
                            "unknown table; expected [defaults], [cpu], [gpu], [interp] or [program.<name>]"
                                .into(),
                        ));
                    }
                },
            }
        }
        Ok(cfg)
    }

    /// Reads one table: its options, and the more specific tables nested in it.
    fn read_layer(
        &mut self,
        t: &DeTable<'_>,
        sel: Selector,
        key: &str,
        at: &dyn Fn(usize, &str, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        let mut entries = Vec::new();
        let mut items: Vec<_> = t.iter().collect();
        items.sort_by_key(|(k, _)| k.span().start);
        for (k, v) in items {
            let name: &str = k.get_ref().as_ref();
            let full = format!("{key}.{}", quote_key(name));
            if let DeValue::Table(sub) = v.get_ref() {
                // A nested table: a backend under a program, an architecture under a
                // backend.
                let mut inner = sel.clone();
                if sel.backend.is_none() && sel.arch.is_none() && sel.program.is_some() {
                    match Backend::from_tag(name).filter(|_| name != "cuda") {
                        Some(b) => inner.backend = Some(b),
                        None => {
                            return Err(at(
                                k.span().start,
                                &full,
                                "unknown table; a program's tables are its backends: cpu, gpu, interp"
                                    .into(),
                            ));
                        }
                    }
                } else if let (Some(b), None) = (sel.backend, &sel.arch) {
                    check_arch(b, name).map_err(|m| at(k.span().start, &full, m))?;
                    inner.arch = Some(name.to_string());
                } else {
                    return Err(at(
                        k.span().start,
                        &full,
                        format!("unknown table; [{}] holds options only", sel.table()),
                    ));
                }
                self.read_layer(sub, inner, &full, at)?;
                continue;
            }
            let Some((okey, scope, _)) = OPTIONS.iter().find(|(o, _, _)| *o == name) else {
                return Err(at(k.span().start, &full, unknown_option(name)));
            };
            if *okey == "backend" && sel.backend.is_some() {
                return Err(at(
                    k.span().start,
                    &full,
                    "'backend' belongs in [defaults] or [program.<name>], not in a backend's table"
                        .into(),
                ));
            }
            if let Some(b) = sel.backend
                && !applies(*scope, b)
            {
                let owner = if *scope == Scope::Cpu { "cpu" } else { "gpu" };
                return Err(at(
                    k.span().start,
                    &full,
                    format!(
                        "option '{name}' applies to the {owner} backend, not {}",
                        tag(b)
                    ),
                ));
            }
            // Check the value now, so a bad one is reported with its place.
            let mut probe = Options::defaults(sel.backend.unwrap_or(Backend::Cpu));
            probe
                .set_value(name, v.get_ref())
                .map_err(|m| at(v.span().start, &full, m))?;
            let text = &self.source_text(v);
            let line = at(v.span().start, "", String::new()).line;
            entries.push(Entry {
                key: okey,
                text: text.clone(),
                line,
            });
        }
        if !entries.is_empty() || sel.rank() == 0 {
            self.layers.push((sel, entries));
        }
        Ok(())
    }

    /// A value as TOML text.
    fn source_text(&self, v: &toml::Spanned<DeValue<'_>>) -> String {
        value_text(v.get_ref())
    }

    /// The options of program `name` on the backend `tag` (unless the file chooses
    /// another) for architecture `arch`, starting from the built-in defaults and the
    /// code's `code` options (key, TOML value).
    pub fn resolve(
        &self,
        name: &str,
        tag_backend: Backend,
        arch_of: &dyn Fn(Backend) -> String,
        code: &[(String, String)],
    ) -> Result<Resolved, String> {
        let mut sources = BTreeMap::new();
        let mut o = Options::defaults(tag_backend);
        for (k, v) in code {
            o.set(k, v)
                .map_err(|m| format!("program '{name}': option {m}"))?;
            if let Some((key, _, _)) = OPTIONS.iter().find(|(x, _, _)| x == k) {
                sources.insert(*key, Source::Code);
            }
        }
        // The backend first: it decides which backend tables apply.
        for (sel, entries) in self.ordered() {
            if sel.backend.is_some() || sel.program.as_deref().is_some_and(|p| p != name) {
                continue;
            }
            for e in entries.iter().filter(|e| e.key == "backend") {
                o.set("backend", &e.text)
                    .map_err(|m| format!("program '{name}': {m}"))?;
                sources.insert("backend", self.source(sel, e));
            }
        }
        let backend = o.backend;
        // Start again from this backend's defaults (a GPU program does not tile), with
        // the code's options that apply to it.
        let mut resolved = Options::defaults(backend);
        for (k, v) in code {
            let scope = OPTIONS.iter().find(|(x, _, _)| x == k).map(|x| x.1);
            if k != "backend" && scope.is_some_and(|s| applies(s, backend)) {
                resolved
                    .set(k, v)
                    .map_err(|m| format!("program '{name}': option {m}"))?;
            } else if k != "backend" {
                sources.remove(k.as_str());
            }
        }
        let arch = arch_of(backend);
        for (sel, entries) in self.ordered() {
            let matches = sel.program.as_deref().is_none_or(|p| p == name)
                && sel.backend.is_none_or(|b| b == backend)
                && sel.arch.as_deref().is_none_or(|a| a == arch);
            if !matches {
                continue;
            }
            for e in entries {
                if e.key == "backend" {
                    continue;
                }
                let scope = OPTIONS.iter().find(|(k, _, _)| *k == e.key).map(|x| x.1);
                if scope.is_some_and(|s| !applies(s, backend)) {
                    continue;
                }
                resolved
                    .set(e.key, &e.text)
                    .map_err(|m| format!("program '{name}': {m}"))?;
                sources.insert(e.key, self.source(sel, e));
            }
        }
        // Fast math needs an e-graph pass that runs: refuse it here, naming where the
        // options came from, rather than run nothing (or a disabled pass).
        if resolved.optimize && resolved.fast_math {
            resolved.pipeline().map_err(|e| {
                let at = |k: &str| {
                    sources
                        .get(k)
                        .map_or_else(|| "default".to_string(), ToString::to_string)
                };
                format!(
                    "program '{name}': fast_math ({}): {e} (passes: {}; disable: {})",
                    at("fast_math"),
                    at("passes"),
                    at("disable")
                )
            })?;
        }
        Ok(Resolved {
            options: resolved,
            arch,
            sources,
        })
    }

    fn ordered(&self) -> Vec<&(Selector, Vec<Entry>)> {
        let mut v: Vec<_> = self.layers.iter().collect();
        v.sort_by_key(|(s, _)| s.rank());
        v
    }

    fn source(&self, sel: &Selector, e: &Entry) -> Source {
        Source::File {
            path: self.path.clone().unwrap_or_default(),
            line: e.line,
            table: sel.table(),
        }
    }

    /// The file this configuration came from.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }
}

fn check_arch(b: Backend, name: &str) -> Result<(), String> {
    match b {
        Backend::Cpu if CPU_ARCHES.contains(&name) => Ok(()),
        Backend::Cpu => Err(format!(
            "unknown CPU architecture '{name}'; expected one of {}",
            CPU_ARCHES.join(", ")
        )),
        Backend::Gpu
            if name.strip_prefix("sm_").is_some_and(|d| {
                !d.is_empty() && d.chars().all(|c| c.is_ascii_digit() || c == 'a')
            }) =>
        {
            Ok(())
        }
        Backend::Gpu => Err(format!(
            "unknown GPU architecture '{name}'; expected sm_<compute capability>, e.g. sm_90"
        )),
        Backend::Interp => Err("the interp backend has no architecture tables".into()),
    }
}

fn as_table<'a, 'i>(v: &'a toml::Spanned<DeValue<'i>>) -> Option<&'a DeTable<'i>> {
    match v.get_ref() {
        DeValue::Table(t) => Some(t),
        _ => None,
    }
}

/// A TOML value written back as TOML text.
fn value_text(v: &DeValue<'_>) -> String {
    match v {
        DeValue::String(s) => format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\"")),
        DeValue::Integer(i) => match i.radix() {
            16 => format!("0x{}", i.as_str()),
            8 => format!("0o{}", i.as_str()),
            2 => format!("0b{}", i.as_str()),
            _ => i.as_str().to_string(),
        },
        DeValue::Float(f) => f.as_str().to_string(),
        DeValue::Boolean(b) => b.to_string(),
        DeValue::Datetime(d) => d.to_string(),
        DeValue::Array(a) => {
            let items: Vec<String> = a.iter().map(|e| value_text(e.get_ref())).collect();
            format!("[{}]", items.join(", "))
        }
        DeValue::Table(_) => "{}".into(),
    }
}

/// Every option key with the backends it applies to and its meaning, as the
/// documentation lists them.
pub fn option_table() -> Vec<(&'static str, &'static str, &'static str)> {
    OPTIONS
        .iter()
        .map(|(k, s, d)| {
            let scope = match s {
                Scope::Any => "any",
                Scope::Cpu => "cpu",
                Scope::Gpu => "gpu",
            };
            (*k, scope, *d)
        })
        .collect()
}
