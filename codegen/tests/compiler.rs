//! The C compiler's flags: the optimization level, and the host tuning sdflow adds for
//! the host CPU.

use std::path::{Path, PathBuf};

use sdflow_codegen::compile::{CompilerOptions, NO_HARDWARE_GATHER, tuned_cpu};

/// A stand-in compiler that answers `-Q --help=target` with `listing` (exit status
/// `status`) and records every call's arguments.
fn fake_cc(dir: &Path, listing: &str, status: i32) -> PathBuf {
    let script = dir.join("cc");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\ncat <<'END'\n{listing}\nEND\nexit {status}\n",
            dir.join("calls.txt").display()
        ),
    )
    .unwrap();
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(&script)
        .status()
        .unwrap();
    script
}

fn options(cc: &Path) -> CompilerOptions {
    CompilerOptions {
        cc: cc.display().to_string(),
        ..CompilerOptions::default()
    }
}

const CASCADELAKE: &str = "The following options are target specific:\n  -mtune-ctrl=                \t\t^use_gather,^use_gather_2parts,^use_gather_4parts\n  -mtune=                     \t\tcascadelake\n  -muintr                     \t\t[disabled]";

#[test]
fn the_tuned_cpu_is_read_from_the_compilers_listing() {
    assert_eq!(tuned_cpu(CASCADELAKE).as_deref(), Some("cascadelake"));
    assert_eq!(
        tuned_cpu("  -mtune=                     \t\tznver3\n").as_deref(),
        Some("znver3")
    );
    assert_eq!(tuned_cpu("  -mtune=                     \t\t\n"), None);
    assert_eq!(tuned_cpu("clang: error: unknown argument: '-Q'"), None);
}

#[test]
fn gathers_are_tuned_off_only_on_cpus_whose_gathers_are_slow() {
    let dir = tempfile::tempdir().unwrap();
    let slow = dir.path().join("slow");
    let fast = dir.path().join("fast");
    let refusing = dir.path().join("refusing");
    for d in [&slow, &fast, &refusing] {
        std::fs::create_dir(d).unwrap();
    }
    let slow_cc = fake_cc(&slow, CASCADELAKE, 0);
    assert_eq!(options(&slow_cc).host_tuning(), [NO_HARDWARE_GATHER]);
    // Asked once per compiler and process.
    assert_eq!(options(&slow_cc).host_tuning(), [NO_HARDWARE_GATHER]);
    let calls = std::fs::read_to_string(slow.join("calls.txt")).unwrap();
    assert_eq!(
        calls,
        format!("-march=native {NO_HARDWARE_GATHER} -Q --help=target\n")
    );

    let fast_cc = fake_cc(&fast, "  -mtune=                     \t\tsapphirerapids", 0);
    assert!(options(&fast_cc).host_tuning().is_empty());
    // A compiler that does not know the tuning knobs (clang, GCC before 12, other
    // architectures) gets none.
    let refusing_cc = fake_cc(&refusing, CASCADELAKE, 1);
    assert!(options(&refusing_cc).host_tuning().is_empty());

    // Not asked where the flags do not target the host or choose a tuning of their own,
    // or where host tuning is off.
    for opts in [
        CompilerOptions {
            flags: vec!["-O3".into(), "-march=x86-64-v3".into()],
            ..options(&slow_cc)
        },
        CompilerOptions {
            flags: vec!["-march=native".into(), "-mtune=generic".into()],
            ..options(&slow_cc)
        },
        CompilerOptions {
            flags: vec!["-march=native".into(), "-mtune-ctrl=^use_gather".into()],
            ..options(&slow_cc)
        },
        CompilerOptions {
            host_tuning: false,
            ..options(&slow_cc)
        },
    ] {
        assert!(opts.host_tuning().is_empty(), "{opts:?}");
    }
}

#[test]
fn the_host_tuning_is_part_of_the_compilers_identity() {
    let dir = tempfile::tempdir().unwrap();
    let cc = fake_cc(dir.path(), CASCADELAKE, 0);
    let id = options(&cc).identity().unwrap();
    assert!(id.ends_with(NO_HARDWARE_GATHER), "{id}");
    let off = CompilerOptions {
        host_tuning: false,
        ..options(&cc)
    }
    .identity()
    .unwrap();
    assert!(!off.ends_with(NO_HARDWARE_GATHER), "{off}");
}

#[test]
fn a_level_replaces_the_optimization_level_and_keeps_the_rest() {
    let opts = CompilerOptions::default().at_level("-O1");
    assert_eq!(opts.flags[0], "-O1");
    assert!(
        !opts.flags[1..].iter().any(|f| f.starts_with("-O")),
        "{opts:?}"
    );
    let rest = |o: &CompilerOptions| {
        o.flags
            .iter()
            .filter(|f| !f.starts_with("-O"))
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(rest(&opts), rest(&CompilerOptions::default()));
    assert!(rest(&opts).iter().any(|f| f == "-ffp-contract=off"));
}
