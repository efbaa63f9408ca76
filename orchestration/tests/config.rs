//! The configuration file: merge order, sources, and errors that name file, line and key.

use std::path::Path;

use sdflow_codegen::{Backend, OmpSchedule};
use sdflow_orchestration::config::{Config, Options, Source};

const FILE: &str = r#"# deployment settings
[defaults]
fast_math = true
tile_rows = 4

[cpu]
threads = 8
schedule = "dynamic"

[cpu.x86_64]
threads = 6

[cpu.aarch64]
threads = 64

[gpu]
block_size = 128

[gpu.sm_90]
block_size = 512

[program.diffusion]
tile_rows = 2
backend = "gpu"

[program.diffusion.gpu.sm_90]
graphs = false

[program.advection.cpu]
threads = 3
overlap_exchanges = false
lag_points = 0
"#;

fn arch(b: Backend) -> String {
    match b {
        Backend::Gpu => "sm_90".into(),
        _ => "x86_64".into(),
    }
}

fn parse(text: &str) -> Result<Config, String> {
    Config::parse(text, Path::new("granule.toml")).map_err(|e| e.to_string())
}

#[test]
fn layers_merge_from_general_to_specific() {
    let c = parse(FILE).unwrap();
    // A program with no table of its own: defaults, [cpu], [cpu.x86_64].
    let r = c.resolve("other", Backend::Cpu, &arch, &[]).unwrap();
    assert_eq!(r.options.threads, 6);
    assert_eq!(r.options.schedule, OmpSchedule::Dynamic);
    assert!(r.options.fast_math);
    assert_eq!(r.options.tile_rows, 4);
    assert_eq!(r.options.lag_points, 131072);
    assert_eq!(r.arch, "x86_64");
    assert_eq!(
        r.sources["threads"],
        Source::File {
            path: "granule.toml".into(),
            line: 11,
            table: "cpu.x86_64".into()
        }
    );
    assert!(!r.sources.contains_key("parallel_min_points"));
    // [program.advection.cpu] beats [cpu.x86_64].
    let r = c.resolve("advection", Backend::Cpu, &arch, &[]).unwrap();
    assert_eq!(r.options.threads, 3);
    assert!(!r.options.overlap_exchanges);
    assert_eq!(r.options.lag_points, 0);
    // The program's table picks the GPU: then gpu tables apply, cpu ones do not.
    let r = c.resolve("diffusion", Backend::Cpu, &arch, &[]).unwrap();
    assert_eq!(r.options.backend, Backend::Gpu);
    assert_eq!(r.arch, "sm_90");
    assert_eq!(r.options.block_size, 512);
    assert!(!r.options.graphs);
    assert_eq!(r.options.tile_rows, 2);
    assert_eq!(
        r.options.threads, 0,
        "cpu options do not reach a gpu program"
    );
    let text = r.to_text();
    assert!(text.contains("graphs"), "{text}");
    assert!(
        text.contains("granule.toml:27 [program.diffusion.gpu.sm_90]"),
        "{text}"
    );
    assert!(!text.contains("threads"), "{text}");
}

#[test]
fn the_file_overrides_the_code_and_the_code_the_defaults() {
    let c = parse(FILE).unwrap();
    let code = vec![
        ("threads".to_string(), "2".to_string()),
        ("parallel_min_points".to_string(), "100".to_string()),
    ];
    let r = c.resolve("other", Backend::Cpu, &arch, &code).unwrap();
    assert_eq!(r.options.threads, 6);
    assert_eq!(r.options.parallel_min_points, 100);
    assert_eq!(r.sources["parallel_min_points"], Source::Code);
    let r = Config::empty()
        .resolve("other", Backend::Cpu, &arch, &code)
        .unwrap();
    assert_eq!(r.options.threads, 2);
    assert_eq!(
        r.options.tile_rows,
        Options::defaults(Backend::Cpu).tile_rows
    );
    let bad = vec![("threads".to_string(), "\"many\"".to_string())];
    assert_eq!(
        Config::empty()
            .resolve("p", Backend::Cpu, &arch, &bad)
            .unwrap_err(),
        "program 'p': option threads: expected an integer, found string"
    );
}

#[test]
fn threads_are_bounded_by_what_openmp_can_start() {
    // Was: any count up to 65 536 was taken, and libgomp failed at 40 000 or crashed
    // the process (a segmentation fault) at 65 536.
    assert_eq!(sdflow_codegen::MAX_THREADS, 4096);
    let c = parse("[cpu]\nthreads = 4096\n").unwrap();
    let r = c.resolve("p", Backend::Cpu, &arch, &[]).unwrap();
    assert_eq!(r.options.threads, 4096);
    for n in ["4097", "65536", "1_000_000"] {
        let digits = n.replace('_', "");
        assert_eq!(
            parse(&format!("[cpu]\nthreads = {n}\n")).unwrap_err(),
            format!(
                "granule.toml:2:11: cpu.threads: expected an integer from 0 to 4096, found {digits}: more threads than sdflow asks the OpenMP runtime for (docs/configuration.md)"
            )
        );
    }
    let code = vec![("threads".to_string(), "65536".to_string())];
    assert_eq!(
        Config::empty()
            .resolve("p", Backend::Cpu, &arch, &code)
            .unwrap_err(),
        "program 'p': option threads: expected an integer from 0 to 4096, found 65536: more threads than sdflow asks the OpenMP runtime for (docs/configuration.md)"
    );
    assert_eq!(
        parse("[cpu]\nthreads = -1\n").unwrap_err(),
        "granule.toml:2:11: cpu.threads: expected an integer from 0 to 4096, found -1"
    );
}

#[test]
fn errors_name_the_file_line_and_key() {
    let cases: &[(&str, &str)] = &[
        (
            "[cpu]\nthreads = \"x\"\n",
            "granule.toml:2:11: cpu.threads: expected an integer, found string",
        ),
        (
            "[cpu]\nthread = 3\n",
            "granule.toml:2:1: cpu.thread: unknown option 'thread'; options are backend, optimize, passes, disable, fast_math, fusion_balance, tile_rows, threads, schedule, parallel_min_points, block_size, graphs, overlap_exchanges, lag_points",
        ),
        (
            "[cpu]\nlag_points = -1\n",
            "granule.toml:2:14: cpu.lag_points: expected an integer from 0 to 2147483647, found -1",
        ),
        (
            "[gpu]\nlag_points = 1\n",
            "granule.toml:2:1: gpu.lag_points: option 'lag_points' applies to the cpu backend, not gpu",
        ),
        (
            "[gpu]\nthreads = 3\n",
            "granule.toml:2:1: gpu.threads: option 'threads' applies to the cpu backend, not gpu",
        ),
        (
            "[gpu]\nblock_size = 100\n",
            "granule.toml:2:14: gpu.block_size: expected a multiple of 32, found 100",
        ),
        (
            "\n[cpu.sm_90]\nthreads = 1\n",
            "granule.toml:2:6: cpu.sm_90: unknown CPU architecture 'sm_90'; expected one of x86_64, x86, aarch64, arm, powerpc64, riscv64, s390x, loongarch64",
        ),
        (
            "[gpu.x86_64]\nblock_size = 64\n",
            "granule.toml:1:6: gpu.x86_64: unknown GPU architecture 'x86_64'; expected sm_<compute capability>, e.g. sm_90",
        ),
        (
            "[tpu]\n",
            "granule.toml:1:2: tpu: unknown table; expected [defaults], [cpu], [gpu], [interp] or [program.<name>]",
        ),
        (
            "[program.x.tpu]\nthreads = 1\n",
            "granule.toml:1:12: program.x.tpu: unknown table; a program's tables are its backends: cpu, gpu, interp",
        ),
        (
            "[cpu]\nbackend = \"gpu\"\n",
            "granule.toml:2:1: cpu.backend: 'backend' belongs in [defaults] or [program.<name>], not in a backend's table",
        ),
        (
            "[defaults]\npasses = [\"map_fusion\", \"fuse_all\"]\n",
            "granule.toml:2:10: defaults.passes: unknown pass 'fuse_all'; passes are inline_nested, specialize, dead_dataflow, redundant_copy, state_fusion, copy_forwarding, map_fusion, sibling_fusion, row_fusion, local_unroll, move_into_if, loop_order, gpu_schedule, egraph, egraph_fast_math",
        ),
        (
            "[defaults]\nschedule = \"auto\"\n",
            "granule.toml:2:12: defaults.schedule: unknown schedule \"auto\"; expected \"static\", \"dynamic\" or \"guided\"",
        ),
        (
            "defaults = 3\n",
            "granule.toml:1:12: defaults: expected a table, found integer",
        ),
        (
            "[cpu\n",
            "granule.toml:1:5: not valid TOML: unclosed table, expected `]`",
        ),
    ];
    for (text, want) in cases {
        assert_eq!(parse(text).unwrap_err(), *want, "for {text:?}");
    }
}

#[test]
fn the_environment_variable_overrides_the_path() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("config");
    std::fs::create_dir_all(&dir).unwrap();
    let a = dir.join("a.toml");
    std::fs::write(&a, "[cpu]\nthreads = 5\n").unwrap();
    let r = Config::locate(Some(&a))
        .unwrap()
        .resolve("p", Backend::Cpu, &arch, &[])
        .unwrap();
    assert_eq!(r.options.threads, 5);
    let missing = dir.join("missing.toml");
    let e = Config::locate(Some(&missing)).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!(
            "{}:0:0: cannot read the configuration file:",
            missing.display()
        )),
        "{e}"
    );
    assert!(Config::locate(None).is_ok() || std::env::var_os("SDFLOW_CONFIG").is_some());
}

/// `fast_math = true` where the pipeline has no e-graph pass that runs is refused when
/// the options are resolved, naming where each came from: with `disable = ["egraph"]`
/// the fast-math e-graph once ran in the disabled pass's place, and with `passes`
/// leaving it out, fast math was silently ignored.
#[test]
fn fast_math_without_a_running_egraph_pass_is_refused() {
    let c = parse("[defaults]\nfast_math = true\ndisable = [\"egraph\"]\n").unwrap();
    let e = c.resolve("p", Backend::Cpu, &arch, &[]).unwrap_err();
    assert_eq!(
        e,
        "program 'p': fast_math (granule.toml:2 [defaults]): fast math needs the 'egraph' \
         pass, which this pipeline disables; the passes are: inline_nested, specialize, \
         dead_dataflow, redundant_copy, state_fusion, copy_forwarding, map_fusion, \
         sibling_fusion, row_fusion, local_unroll, egraph, move_into_if, loop_order \
         (passes: default; disable: granule.toml:3 [defaults])"
    );
    let c = parse("[defaults]\nfast_math = true\npasses = [\"map_fusion\"]\n").unwrap();
    let e = c.resolve("p", Backend::Cpu, &arch, &[]).unwrap_err();
    assert!(
        e.contains("which this pipeline does not have; the passes are: map_fusion"),
        "{e}"
    );
    // With the pass, or without optimizing, fast math is fine.
    let c = parse("[defaults]\nfast_math = true\n").unwrap();
    assert!(
        c.resolve("p", Backend::Cpu, &arch, &[])
            .unwrap()
            .options
            .fast_math
    );
    let c = parse("[defaults]\nfast_math = true\noptimize = false\npasses = [\"map_fusion\"]\n")
        .unwrap();
    assert!(c.resolve("p", Backend::Cpu, &arch, &[]).is_ok());
}
