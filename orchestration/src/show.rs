//! The intermediates of the workflow as text (`sdflow show`, `Program.show` in Python):
//! the program, its generated C or CUDA, its execution plan, or a report of the options
//! it gets and what each step did; and the option parsing those share with `sdflow
//! opt` and `sdflow bench`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sdflow_codegen::Backend;
use sdflow_ir::{DType, Sdfg, Value, format};
use sdflow_transforms::Order;

use crate::config::{Config, Resolved, host_arch};
use crate::workflow::{StepContext, Workflow, WorkflowError};

/// Why an intermediate could not be shown.
#[derive(Debug, thiserror::Error)]
pub enum ShowError {
    /// An option's value is wrong.
    #[error("{0}")]
    Usage(String),
    /// Code could not be generated.
    #[error("{path}: {source}")]
    Codegen {
        /// The program's origin.
        path: String,
        /// The cause.
        source: sdflow_codegen::CodegenError,
    },
    /// The optimizer could not run (an unknown pass name, or a pass that broke the
    /// program, which is a bug to report).
    #[error("{path}: {source}")]
    Transform {
        /// The program's origin.
        path: String,
        /// The cause.
        source: sdflow_transforms::TransformError,
    },
}

/// Options of `sdflow show`.
#[derive(Clone, Debug, Default)]
pub struct ShowOptions {
    /// What to print: `c`, `cuda`, `plan`, `sdfg`, `dot`, `optimized` or `report`.
    pub emit: String,
    /// `c`, `cuda`, `plan`, `sdfg` and `dot` after the optimize step.
    pub opt: bool,
    /// The backend tag (default: `gpu` for `--emit cuda`, else `cpu`).
    pub backend: Option<Backend>,
    /// The configuration file (`$SDFLOW_CONFIG` overrides it).
    pub config: Option<PathBuf>,
    /// Static values (`NAME=VALUE`), specialized before anything is printed.
    pub statics: Vec<(String, String)>,
    /// The architecture whose configuration tables apply (default: this machine's for
    /// `cpu`; none for `gpu`, whose architecture is the device's).
    pub arch: Option<String>,
    /// Specialized for arguments passed in this layout first
    /// ([`sdflow_transforms::layout`]).
    pub layout: Option<Order>,
}

/// What `sdflow show --emit` accepts.
pub const SHOW_EMITS: [&str; 7] = ["c", "cuda", "plan", "sdfg", "dot", "optimized", "report"];

/// The value of symbol `name` of `sdfg` from text (`-s NAME=VALUE`): an error names
/// the symbol and its type.
pub fn symbol_value(sdfg: &Sdfg, name: &str, text: &str) -> Result<Value, ShowError> {
    let sym = sdfg.symbols.get(name).ok_or_else(|| {
        ShowError::Usage(format!(
            "--symbol {name}: the program has no symbol '{name}'"
        ))
    })?;
    let bad = || {
        ShowError::Usage(format!(
            "--symbol {name}={text}: not a valid {} value",
            sym.dtype
        ))
    };
    Ok(match sym.dtype {
        DType::Bool => Value::Bool(match text {
            "true" | "1" => true,
            "false" | "0" => false,
            _ => return Err(bad()),
        }),
        DType::I32 => Value::I32(text.parse().map_err(|_| bad())?),
        DType::I64 => Value::I64(text.parse().map_err(|_| bad())?),
        DType::F32 | DType::F64 => Value::F64(text.parse().map_err(|_| bad())?).cast(sym.dtype),
    })
}

/// The symbol values `given` as `NAME=VALUE` pairs by `option` (`-s/--static`, say),
/// each parsed by [`symbol_value`]; a name given twice is an error.
pub fn symbol_values(
    sdfg: &Sdfg,
    option: &str,
    given: &[(String, String)],
) -> Result<BTreeMap<String, Value>, ShowError> {
    let mut out = BTreeMap::new();
    let mut text: BTreeMap<&str, &str> = BTreeMap::new();
    for (k, v) in given {
        if let Some(first) = text.insert(k, v) {
            return Err(ShowError::Usage(format!(
                "{option} {k} is given twice ({k}={first} and {k}={v}); give each name once"
            )));
        }
        out.insert(k.clone(), symbol_value(sdfg, k, v)?);
    }
    Ok(out)
}

/// The options program `name` gets with backend tag `backend` from the configuration
/// file `config` (`SDFLOW_CONFIG` overrides it) on architecture `arch` (by default this
/// machine's for the CPU; none for a GPU, whose architecture is the device's), with the
/// source of each, and the configuration file read, if any: what `opt`, `show` and
/// `bench` build from.
pub fn resolve_options(
    config: Option<&Path>,
    name: &str,
    backend: Backend,
    arch: Option<&str>,
) -> Result<(Resolved, Option<PathBuf>), ShowError> {
    let config = Config::locate(config).map_err(|e| ShowError::Usage(e.to_string()))?;
    let arch_of = |b: Backend| match (arch, b) {
        (Some(a), _) => a.to_string(),
        (None, Backend::Gpu) => "(no device)".to_string(),
        (None, _) => host_arch().to_string(),
    };
    let resolved = config
        .resolve(name, backend, &arch_of, &[])
        .map_err(ShowError::Usage)?;
    Ok((resolved, config.path().map(Path::to_path_buf)))
}

/// Specializes `sdfg` for its caller-laid-out arguments passed in `order`
/// (`--layout`).
pub fn specialize_layout(sdfg: &mut Sdfg, order: Order) -> Result<(), ShowError> {
    let unit = sdflow_transforms::unit_dims_in_order(sdfg, order);
    sdflow_transforms::specialize_unit_strides(sdfg, &unit)
        .map(|_| ())
        .map_err(|e| ShowError::Usage(format!("--layout: {e}")))
}

/// An intermediate of the workflow (`docs/workflow.md`) for a loaded, valid program —
/// the program (`sdfg`, `dot`) or its generated C or CUDA or execution plan, after
/// specialization to the static values and, with `opt`, the optimize step; `optimized`,
/// the program after the optimize step; `report`, the options the program gets with the
/// source of each, and every step's log. `origin` names the program in errors.
pub fn show(mut sdfg: Sdfg, origin: &str, o: &ShowOptions) -> Result<String, ShowError> {
    if let Some(order) = o.layout {
        specialize_layout(&mut sdfg, order)?;
    }
    let emit = o.emit.as_str();
    if !SHOW_EMITS.contains(&emit) {
        return Err(ShowError::Usage(format!(
            "--emit {emit}: expected one of {}",
            SHOW_EMITS.join(", ")
        )));
    }
    let statics = symbol_values(&sdfg, "-s/--static", &o.statics)?;
    let tag = o.backend.unwrap_or(if emit == "cuda" {
        Backend::Gpu
    } else {
        Backend::Cpu
    });
    let (resolved, config_path) =
        resolve_options(o.config.as_deref(), &sdfg.name, tag, o.arch.as_deref())?;
    let mut options = resolved.options.clone();
    if emit == "cuda" {
        options.backend = Backend::Gpu;
    } else if emit == "c" {
        options.backend = Backend::Cpu;
    }
    if !o.opt && !matches!(emit, "optimized" | "report") {
        options.optimize = false;
    }
    let cx = StepContext {
        options: &options,
        statics: &statics,
    };
    let sdfg = Arc::new(sdfg);
    let workflow = Workflow::new();
    let werr = |e: WorkflowError| match e {
        WorkflowError::Codegen { source, .. } => ShowError::Codegen {
            path: origin.to_string(),
            source,
        },
        WorkflowError::Transform { source, .. } => ShowError::Transform {
            path: origin.to_string(),
            source,
        },
        other => ShowError::Usage(format!("{origin}: {other}")),
    };
    let stages = workflow.stages(&sdfg, &cx).map_err(werr)?;
    let last = stages.last().expect("the input is a stage").sdfg.clone();
    match emit {
        "c" | "cuda" => workflow
            .generate(&sdfg, &cx)
            .map(|(_, g, _)| g.text())
            .map_err(werr),
        "plan" => {
            let codegen = |source| ShowError::Codegen {
                path: origin.to_string(),
                source,
            };
            if let Err(problems) = last.validate() {
                return Err(codegen(sdflow_codegen::CodegenError::Invalid(
                    problems.iter().map(|p| p.to_string()).collect(),
                )));
            }
            // The plan the chosen backend prints: a grid on the GPU, the C unit's team
            // with its threshold on the CPU.
            let target = match options.backend {
                Backend::Gpu => sdflow_codegen::plan::Target::Grid,
                _ => sdflow_codegen::plan::Target::Team {
                    parallel_min_points: options.parallel_min_points,
                },
            };
            sdflow_codegen::Plan::of_with(&last, target, options.overlap_exchanges)
                .map(|p| p.to_text())
                .map_err(codegen)
        }
        "sdfg" | "optimized" => Ok(format::to_json(&last)),
        "dot" => Ok(sdflow_ir::dot::to_dot(&last)),
        _ => {
            let mut out = format!("program '{}'\n", sdfg.name);
            if let Some(p) = &config_path {
                let _ = writeln!(out, "configuration: {}", p.display());
            } else {
                out.push_str("configuration: none\n");
            }
            out.push_str(&resolved.to_text());
            let before = sdflow_ir::stats::PointCounts::of(&sdfg);
            for st in &stages[1..] {
                let _ = writeln!(out, "step {}:", st.step);
                let log = if st.log.is_empty() {
                    "  (nothing to do)\n".to_string()
                } else {
                    st.log.lines().map(|l| format!("  {l}\n")).collect()
                };
                out.push_str(&log);
            }
            let after = sdflow_ir::stats::PointCounts::of(&last);
            let _ = write!(
                out,
                "work per grid point (all maps)\n  before  {before}\n  after   {after}\n"
            );
            Ok(out)
        }
    }
}
