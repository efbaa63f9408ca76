//! The `sdflow` command-line tool.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use sdflow::cli::{self, CliError, RunOptions};

// The optimizer builds and drops many small values (names, symbolic expressions, graph
// nodes); mimalloc's thread-local size classes make that markedly cheaper than glibc's
// allocator (docs/perf.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Whole-program optimization for stencil programs (SDFGs).
#[derive(Parser)]
#[command(name = "sdflow", version, about)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check a program; lists every problem (exit status 1) or prints a summary.
    Validate {
        /// The program (.sdfg.json).
        file: PathBuf,
    },
    /// Draw a program as Graphviz DOT (or SVG through Graphviz's `dot`).
    Dot {
        /// The program (with --diff: the optimizer's input, then its output).
        #[arg(required = true, num_args = 1..=2)]
        files: Vec<PathBuf>,
        /// Output file (standard output when absent).
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Render SVG with Graphviz's `dot` program.
        #[arg(long)]
        svg: bool,
        /// Level of detail: `control` (one box per state), `states` (maps collapsed),
        /// `full`, or `auto` (the default: what stays readable for the program's size).
        #[arg(long)]
        level: Option<String>,
        /// Draw one state, by name or `#index`, in full.
        #[arg(long)]
        state: Option<String>,
        /// Draw the body of one map, by label, in full.
        #[arg(long)]
        map: Option<String>,
        /// Draw AFTER marked with what changed from BEFORE: fused maps, maps moved into
        /// an if, and what was removed (`sdflow dot --diff BEFORE AFTER`).
        #[arg(long)]
        diff: bool,
    },
    /// Write one self-contained HTML page to explore the program offline: the control
    /// flow, click a state for its dataflow, a map for its body; search a container.
    View {
        /// The program.
        file: PathBuf,
        /// The page.
        #[arg(short, long, default_value = "sdflow-view.html")]
        output: PathBuf,
        /// The optimizer's report (`sdflow opt --report` output) to show beside it.
        #[arg(long)]
        report: Option<PathBuf>,
    },
    /// Draw one array of an .npz archive as a PNG picture: a line (1-D), a heat map
    /// (2-D), or one slice of a 3-D array.
    Plot {
        /// The archive (e.g. written by `sdflow run --outputs`).
        file: PathBuf,
        /// The array's name in it.
        field: String,
        /// The picture (default FIELD.png).
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// For a 3-D array: the index of the slice (default 0).
        #[arg(long)]
        level: Option<usize>,
        /// For a 3-D array: the dimension sliced (default 2, the last).
        #[arg(long)]
        axis: Option<usize>,
    },
    /// Run a program on the reference interpreter; prints each output's sum and L2 norm.
    Run {
        /// The program.
        file: PathBuf,
        /// Input arrays (.npz); symbol values are inferred from their shapes and strides.
        #[arg(long)]
        inputs: Option<PathBuf>,
        /// Write every argument array after the run to this .npz file.
        #[arg(long)]
        outputs: Option<PathBuf>,
        /// Seed of the pseudo-random inputs used when --inputs is absent.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// A symbol value, NAME=VALUE (repeatable).
        #[arg(short = 's', long = "symbol", value_parser = cli::parse_assignment)]
        symbols: Vec<(String, String)>,
        /// Where to run: `interp` (the reference interpreter), `cpu` (compiled C/OpenMP,
        /// through the build cache) or `cuda` (alias `gpu`: CUDA through NVRTC on GPU 0).
        #[arg(long, default_value = "interp", value_parser = parse_backend)]
        backend: sdflow::codegen::Backend,
        /// Run on this many ranks (`4`, or `2x2`): simulated ones of the interpreter, one
        /// thread each, or with `--backend cpu` the MPI ranks of `mpirun -n N`. Each
        /// rank's arguments from `--inputs`/`--outputs` paths with `{rank}` in them, or
        /// random (seed + rank); its halo exchanges between them.
        #[arg(long, value_parser = cli::parse_ranks)]
        ranks: Option<usize>,
    },
    /// Convert a DaCe SDFG file (.sdfg JSON or .sdfgz) into sdflow's JSON format.
    Import {
        /// The DaCe file.
        file: PathBuf,
        /// Output file (standard output when absent).
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Print an intermediate of the workflow: the generated C or CUDA, the execution plan,
    /// the SDFG, its drawing, the optimized SDFG, or the options and step report.
    Show {
        /// The program.
        file: PathBuf,
        /// What to print: `c`, `cuda`, `plan`, `sdfg`, `dot`, `optimized` or `report`.
        #[arg(long, default_value = "c")]
        emit: String,
        /// `c`, `cuda`, `plan`, `sdfg` and `dot` after the optimize step (the backend's
        /// pipeline, as configured).
        #[arg(long)]
        opt: bool,
        /// The backend tag whose options apply (default: `gpu` for `--emit cuda`, else
        /// `cpu`).
        #[arg(long, value_parser = parse_backend)]
        backend: Option<sdflow::codegen::Backend>,
        /// A configuration file (TOML; `SDFLOW_CONFIG` overrides it; docs/configuration.md).
        #[arg(long)]
        config: Option<PathBuf>,
        /// The architecture whose configuration tables apply (`x86_64`, `sm_90`).
        #[arg(long)]
        arch: Option<String>,
        /// A static value, NAME=VALUE (repeatable): specialized at compile time.
        #[arg(short = 's', long = "static", value_parser = cli::parse_assignment)]
        statics: Vec<(String, String)>,
        /// Specialize for arguments passed in this layout, `C` (row-major) or `F`
        /// (column-major), where the program leaves their strides to the caller.
        #[arg(long, value_parser = clap::builder::ValueParser::new(|s: &str| s.parse::<sdflow::transforms::Order>()))]
        layout: Option<sdflow::transforms::Order>,
    },
    /// Time a compiled program: median per call, effective bandwidth, and the machine's
    /// copy/triad (CPU) or device-to-device copy (GPU) ceiling measured in the same run.
    Bench {
        /// The program.
        file: PathBuf,
        /// `cpu` or `cuda` (alias `gpu`).
        #[arg(long, default_value = "cpu", value_parser = parse_backend)]
        backend: sdflow::codegen::Backend,
        /// Timed calls (after three untimed ones).
        #[arg(long, default_value_t = 20)]
        reps: usize,
        /// A symbol value, NAME=VALUE (repeatable).
        #[arg(short = 's', long = "symbol", value_parser = cli::parse_assignment)]
        symbols: Vec<(String, String)>,
        /// Seed of the pseudo-random inputs.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Input arrays (.npz) instead of pseudo-random ones; symbol values are inferred
        /// from their shapes and strides, as `sdflow run --inputs` does.
        #[arg(long)]
        inputs: Option<PathBuf>,
        /// OpenMP threads (default: OMP_NUM_THREADS or every core).
        #[arg(long, default_value_t = 0)]
        threads: usize,
        /// Time the program as written, without the optimization pipeline.
        #[arg(long)]
        no_opt: bool,
        /// A configuration file (TOML; `SDFLOW_CONFIG` overrides it).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Pass the arrays whose strides the program leaves to the caller (GT4Py's
        /// fields) in this layout, `C` (row-major) or `F` (column-major), with the program
        /// specialized for it: the contiguous dimension becomes part of the program and
        /// its transients follow (docs/transforms.md, "Layout specialization").
        #[arg(long, value_parser = clap::builder::ValueParser::new(|s: &str| s.parse::<sdflow::transforms::Order>()))]
        layout: Option<sdflow::transforms::Order>,
        /// Time each call with cold caches: twice the last-level cache is read before
        /// it (outside its time), and the ceiling is measured beyond that cache (CPU).
        #[arg(long)]
        cold: bool,
    },
    /// Print counts (states, nodes, maps, tasklets, transients) and every container.
    Stats {
        /// The program.
        file: PathBuf,
    },
    /// Optimize a program: specialization, fusion, move-into-if, cleanup, to a fixed point.
    Opt {
        /// The program.
        file: PathBuf,
        /// Write the optimized program here (standard output when absent).
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Run these passes, in this order, instead of the default pipeline
        /// (e.g. `state_fusion,map_fusion`).
        #[arg(long)]
        passes: Option<String>,
        /// Use the GPU pipeline (every top-level map becomes a kernel).
        #[arg(long)]
        gpu: bool,
        /// Let the e-graph pass reassociate, distribute and multiply by reciprocals:
        /// results change in the last bits (docs/transforms.md).
        #[arg(long)]
        fast_math: bool,
        /// Print the per-pass report and the work per grid point before and after (to
        /// standard output with -o, else to standard error).
        #[arg(long)]
        report: bool,
        /// Also write the output's drawing, marked with what the optimizer fused, moved
        /// into an if or removed, to this DOT file.
        #[arg(long)]
        dot: Option<PathBuf>,
        /// A configuration file (TOML; `SDFLOW_CONFIG` overrides it): its `disable`,
        /// `fusion_balance`, `tile_rows` and `fast_math` apply, as for every command.
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

fn execute(cmd: Command) -> Result<Vec<u8>, CliError> {
    Ok(match cmd {
        Command::Opt {
            file,
            output,
            passes,
            gpu,
            fast_math,
            report,
            dot,
            config,
        } => {
            let o = cli::opt(
                &file,
                config.as_deref(),
                passes.as_deref(),
                gpu,
                fast_math,
                dot.is_some(),
            )?;
            if let (Some(path), Some(text)) = (&dot, &o.dot) {
                cli::write_output(path, text.as_bytes())?;
            }
            match output {
                Some(path) => {
                    cli::write_output(&path, o.json.as_bytes())?;
                    if report {
                        o.report.into_bytes()
                    } else {
                        Vec::new()
                    }
                }
                None => {
                    if report {
                        eprint!("{}", o.report);
                    }
                    o.json.into_bytes()
                }
            }
        }
        Command::Bench {
            file,
            backend,
            reps,
            symbols,
            seed,
            inputs,
            threads,
            no_opt,
            config,
            layout,
            cold,
        } => sdflow::bench::bench(
            &file,
            &sdflow::bench::BenchOptions {
                backend,
                reps,
                symbols,
                seed,
                inputs,
                threads,
                no_opt,
                config,
                layout,
                cold,
            },
        )?
        .into_bytes(),
        Command::Validate { file } => cli::validate(&file)?.into_bytes(),
        Command::Stats { file } => cli::stats(&file)?.into_bytes(),
        Command::Dot {
            files,
            output,
            svg,
            level,
            state,
            map,
            diff,
        } => {
            let args = cli::DotArgs {
                level,
                state,
                map,
                diff,
                svg,
            };
            cli::dot(&files, &args, output.as_deref())?.unwrap_or_default()
        }
        Command::View {
            file,
            output,
            report,
        } => {
            let msg = sdflow::view::view(&file, &output, report.as_deref())?;
            format!("{msg}\n").into_bytes()
        }
        Command::Plot {
            file,
            field,
            output,
            level,
            axis,
        } => {
            let msg = cli::plot(&file, &field, output.as_deref(), level, axis)?;
            format!("{msg}\n").into_bytes()
        }
        Command::Run {
            file,
            inputs,
            outputs,
            seed,
            symbols,
            backend,
            ranks,
        } => cli::run(
            &file,
            &RunOptions {
                inputs,
                outputs,
                seed,
                symbols,
                backend,
                ranks,
            },
        )?
        .into_bytes(),
        Command::Show {
            file,
            emit,
            opt,
            backend,
            config,
            arch,
            statics,
            layout,
        } => cli::show_with(
            &file,
            &cli::ShowOptions {
                emit,
                opt,
                backend,
                config,
                statics,
                arch,
                layout,
            },
        )?
        .into_bytes(),
        Command::Import { file, output } => {
            let json = cli::import(&file)?;
            match output {
                Some(p) => {
                    cli::write_output(&p, json.as_bytes())?;
                    Vec::new()
                }
                None => json.into_bytes(),
            }
        }
    })
}

fn parse_backend(s: &str) -> Result<sdflow::codegen::Backend, String> {
    sdflow::codegen::Backend::from_tag(s)
        .ok_or_else(|| format!("unknown backend '{s}'; expected interp, cpu or cuda (gpu)"))
}

fn main() -> ExitCode {
    let args = Args::parse();
    match execute(args.command) {
        Ok(out) => {
            let _ = std::io::stdout().write_all(&out);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
