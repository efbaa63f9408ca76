//! Components: static values, precompiled variants dispatched at call time, bound
//! arguments, per-program options, and builds that land in the persistent cache.

use std::path::Path;
use std::sync::Arc;

use ndarray::{Array1, ArrayD, IxDyn};
use sdflow::codegen::{Args, Backend, Cache, CallError, Origin};
use sdflow::ir::interp::{self, Bindings, HostArray};
use sdflow::ir::{Sdfg, Value, format};
use sdflow::orchestration::component::{Component, ComponentError, ProgramSpec};
use sdflow::orchestration::config::Config;
use sdflow::orchestration::workflow::Workflow;

fn example(name: &str) -> Sdfg {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(format!("{name}.sdfg.json"));
    format::load(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn workflow(dir: &str) -> Arc<Workflow> {
    Arc::new(Workflow::new().with_cache(Some(Cache::at(
        std::env::temp_dir().join("sdflow-test-cache").join(dir),
    ))))
}

fn input(n: usize) -> Array1<f64> {
    Array1::from_iter((0..n).map(|i| ((i * 37 % 101) as f64 - 50.0) / 7.0))
}

/// The unspecialized program on the interpreter.
fn reference(
    sdfg: &Sdfg,
    arrays: &[(&str, ArrayD<f64>)],
    ints: &[(&str, i64)],
    floats: &[(&str, f64)],
) -> Bindings {
    let mut b = Bindings::default();
    for (k, a) in arrays {
        b.arrays.insert(k.to_string(), HostArray::F64(a.clone()));
    }
    for (k, v) in ints {
        b.symbols.insert(k.to_string(), Value::I64(*v));
    }
    for (k, v) in floats {
        b.symbols.insert(k.to_string(), Value::F64(*v));
    }
    interp::run(sdfg, &mut b).unwrap();
    b
}

fn bits(a: &ArrayD<f64>) -> Vec<u64> {
    a.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn variants_dispatch_on_the_flag_without_compiling() {
    let sdfg = example("flag_if");
    let programs = Component::new(Backend::Cpu)
        .workflow(workflow("component-variants"))
        .with_program(
            ProgramSpec::new(sdfg.clone())
                .static_value("N", 64i64)
                .variants("mode", [0i64, 1]),
        )
        .build()
        .unwrap();
    let p = programs.program("flag_if").unwrap();
    assert_eq!(p.compiled_variants(), vec![vec![0], vec![1]]);
    let u0 = input(64).into_dyn();
    for mode in [0i64, 1] {
        let mut u = u0.clone();
        let mut out = ArrayD::<f64>::zeros(IxDyn(&[64]));
        p.call(
            Args::new()
                .array("u", &mut u)
                .array("out", &mut out)
                .int("mode", mode),
        )
        .unwrap();
        let want = reference(
            &sdfg,
            &[("u", u0.clone()), ("out", ArrayD::zeros(IxDyn(&[64])))],
            &[("N", 64), ("mode", mode)],
            &[],
        );
        let HostArray::F64(w) = &want.arrays["out"] else {
            unreachable!()
        };
        assert_eq!(bits(&out), bits(w), "mode {mode}");
    }
    assert_eq!(p.compiled_variants().len(), 2, "no call compiled anything");
    // A value with no variant.
    let mut u = u0.clone();
    let mut out = ArrayD::<f64>::zeros(IxDyn(&[64]));
    let e = p
        .call(
            Args::new()
                .array("u", &mut u)
                .array("out", &mut out)
                .int("mode", 2),
        )
        .unwrap_err();
    assert_eq!(
        e,
        CallError::Bind {
            program: "flag_if".into(),
            message: "no precompiled variant for mode=2 (compiled: mode=0; mode=1); list the value in variants or allow compile_on_demand".into()
        }
    );
    // The flag missing, a static passed.
    let e = p
        .call(Args::new().array("u", &mut u).array("out", &mut out))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "program 'flag_if': missing the value of variant flag 'mode' (pass it as an int; variants: 0, 1)"
    );
    let e = p
        .call(
            Args::new()
                .array("u", &mut u)
                .array("out", &mut out)
                .int("mode", 1)
                .int("N", 64),
        )
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "program 'flag_if': 'N' is static (compiled in as 64); do not pass it"
    );
    // A static size: arrays of another size are refused with the checked path's message.
    let mut short = ArrayD::<f64>::zeros(IxDyn(&[63]));
    let e = p
        .call(
            Args::new()
                .array("u", &mut u)
                .array("out", &mut short)
                .int("mode", 1),
        )
        .unwrap_err();
    assert!(e.to_string().contains("'out'"), "{e}");
}

#[test]
fn a_variant_compiles_on_demand_when_allowed() {
    let sdfg = example("flag_if");
    let programs = Component::new(Backend::Cpu)
        .workflow(workflow("component-on-demand"))
        .with_program(
            ProgramSpec::new(sdfg.clone())
                .variants("mode", [0i64])
                .compile_on_demand(true),
        )
        .build()
        .unwrap();
    let p = programs.program("flag_if").unwrap();
    let u0 = input(33).into_dyn();
    let mut u = u0.clone();
    let mut out = ArrayD::<f64>::zeros(IxDyn(&[33]));
    p.call(
        Args::new()
            .array("u", &mut u)
            .array("out", &mut out)
            .int("mode", 5),
    )
    .unwrap();
    assert_eq!(p.compiled_variants(), vec![vec![0], vec![5]]);
    let want: Vec<u64> = u0.iter().map(|x| (2.0 * x).to_bits()).collect();
    assert_eq!(bits(&out), want);
}

#[test]
fn bound_arguments_are_given_once() {
    let sdfg = example("hyperdiffusion");
    let n = 40usize;
    let u0 = ArrayD::from_shape_fn(IxDyn(&[n, n]), |d| {
        ((d[0] * 13 + d[1] * 7) % 17) as f64 * 0.25 - 2.0
    });
    for backend in [Backend::Cpu, Backend::Interp] {
        let programs = Component::new(backend)
            .workflow(workflow("component-bound"))
            .with_program(
                ProgramSpec::new(sdfg.clone())
                    .named("hyper")
                    .static_value("N", n as i64)
                    .bind_array("u", HostArray::F64(u0.clone()))
                    .bind_float("alpha", 0.05),
            )
            .build()
            .unwrap();
        let p = programs.program("hyper").unwrap();
        let mut out = ArrayD::<f64>::zeros(IxDyn(&[n, n]));
        p.call(Args::new().array("out", &mut out)).unwrap();
        // Twice: the bound array and the program state are reused.
        let mut out2 = ArrayD::<f64>::zeros(IxDyn(&[n, n]));
        p.call(Args::new().array("out", &mut out2)).unwrap();
        let want = reference(
            &sdfg,
            &[("u", u0.clone()), ("out", ArrayD::zeros(IxDyn(&[n, n])))],
            &[("N", n as i64)],
            &[("alpha", 0.05)],
        );
        let HostArray::F64(w) = &want.arrays["out"] else {
            unreachable!()
        };
        assert_eq!(bits(&out), bits(w), "{backend:?}");
        assert_eq!(bits(&out2), bits(w), "{backend:?}");
        let mut u = u0.clone();
        let e = p
            .call(Args::new().array("out", &mut out).array("u", &mut u))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "program 'hyper': 'u' is bound; do not pass it"
        );
        let e = programs.program("lap").err().unwrap();
        assert_eq!(
            e.to_string(),
            "program 'lap': no such program in the component (programs: hyper)"
        );
    }
}

#[test]
fn specifications_are_checked_before_building() {
    let sdfg = example("flag_if");
    let build = |spec: ProgramSpec| {
        Component::new(Backend::Cpu)
            .workflow(workflow("component-checks"))
            .with_program(spec)
            .build()
            .err()
            .map(|e| e.to_string())
    };
    assert_eq!(
        build(ProgramSpec::new(sdfg.clone()).static_value("M", 3i64)).unwrap(),
        "program 'flag_if': static 'M' is not a symbol of the program (its symbols: N, mode)"
    );
    assert_eq!(
        build(ProgramSpec::new(sdfg.clone()).variants("flag", [0i64])).unwrap(),
        "program 'flag_if': variant flag 'flag' is not a symbol of the program (its symbols: N, mode)"
    );
    assert_eq!(
        build(
            ProgramSpec::new(sdfg.clone())
                .bind_array("v", HostArray::zeros(sdflow::ir::DType::F64, &[4]))
        )
        .unwrap(),
        "program 'flag_if': bound array 'v' is not an argument of the program (its arguments: u, out, mode, N)"
    );
    assert_eq!(
        build(
            ProgramSpec::new(sdfg.clone())
                .bind_array("u", HostArray::zeros(sdflow::ir::DType::I32, &[4]))
        )
        .unwrap(),
        "program 'flag_if': bound array 'u' has elements of type i32, the program declares f64"
    );
    assert_eq!(
        build(ProgramSpec::new(sdfg.clone()).bind_float("mode", 1.0)).unwrap(),
        "program 'flag_if': bound 'mode' is a i64 symbol; bind it with bind_int"
    );
    assert_eq!(
        build(ProgramSpec::new(sdfg.clone()).option("threads", "-1")).unwrap(),
        "program 'flag_if': option threads: expected an integer from 0 to 4096, found -1"
    );
    // A name both static and bound, arrays the static values contradict, and a static
    // value that makes an extent negative: refused before anything compiles (was: built,
    // and every call failed, with "'N' is static … do not pass it" when nothing was
    // passed).
    assert_eq!(
        build(
            ProgramSpec::new(sdfg.clone())
                .static_value("N", 4i64)
                .bind_int("N", 5)
        )
        .unwrap(),
        "program 'flag_if': 'N' is bound and also static (= 4); give it one way"
    );
    assert_eq!(
        build(
            ProgramSpec::new(sdfg.clone())
                .variants("mode", [0i64, 1])
                .bind_int("mode", 1)
        )
        .unwrap(),
        "program 'flag_if': 'mode' is bound and also a variant flag; give it one way"
    );
    assert_eq!(
        build(
            ProgramSpec::new(sdfg.clone())
                .static_value("N", 4i64)
                .bind_array("u", HostArray::zeros(sdflow::ir::DType::F64, &[5]))
        )
        .unwrap(),
        "program 'flag_if': bound array 'u' has extent 5 in dimension 0, the program needs 4 ('N' with its static values)"
    );
    assert_eq!(
        build(
            ProgramSpec::new(sdfg.clone())
                .bind_array("u", HostArray::zeros(sdflow::ir::DType::F64, &[2, 2]))
        )
        .unwrap(),
        "program 'flag_if': bound array 'u' has 2 dimension(s), the program declares 1"
    );
    assert_eq!(
        build(ProgramSpec::new(sdfg.clone()).static_value("N", -3i64)).unwrap(),
        "program 'flag_if': static N = -3: extent 'N' of 'out' evaluates to -3; an extent cannot be negative"
    );
    let twice = Component::new(Backend::Cpu)
        .with_program(ProgramSpec::new(sdfg.clone()))
        .with_program(ProgramSpec::new(sdfg.clone()))
        .build()
        .err()
        .unwrap();
    assert!(matches!(twice, ComponentError::Duplicate(ref n) if n == "flag_if"));
}

#[test]
fn options_come_from_the_configuration_and_builds_from_the_cache() {
    let sdfg = example("laplace");
    let dir = std::env::temp_dir().join(format!("sdflow-component-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cache = dir.join("cache");
    let _ = std::fs::remove_dir_all(&cache);
    let config = Config::parse(
        "[cpu]\nschedule = \"guided\"\n[program.lap2.cpu]\nthreads = 2\nparallel_min_points = 1\n",
        Path::new("granule.toml"),
    )
    .unwrap();
    let build = || {
        Component::new(Backend::Cpu)
            .config(config.clone())
            .workflow(Arc::new(
                Workflow::new().with_cache(Some(Cache::at(&cache))),
            ))
            .with_program(
                ProgramSpec::new(sdfg.clone())
                    .named("lap1")
                    .static_value("N", 16i64),
            )
            .with_program(
                ProgramSpec::new(sdfg.clone())
                    .named("lap2")
                    .variants("N", [16i64, 24]),
            )
            .build()
            .unwrap()
    };
    let first = build();
    assert_eq!(first.compiled(), 3);
    let o = first.program("lap2").unwrap().options();
    assert_eq!(o.options.threads, 2);
    assert_eq!(o.options.parallel_min_points, 1);
    assert_eq!(o.options.schedule.name(), "guided");
    let o1 = first.program("lap1").unwrap().options();
    assert_eq!(o1.options.threads, 0);
    assert!(
        o1.to_text().contains("granule.toml:2 [cpu]"),
        "{}",
        o1.to_text()
    );
    // A fresh workflow (as in a new process): every variant comes from the cache.
    let second = build();
    assert_eq!(second.compiled(), 0);
    assert!(
        second
            .records
            .iter()
            .all(|r| r.origin == Some(Origin::Cached)),
        "{:?}",
        second.records
    );
    // Variant N=24 computes what the unspecialized program does.
    let p = second.program("lap2").unwrap();
    let u0 = ArrayD::from_shape_fn(IxDyn(&[24, 24]), |d| (d[0] * 3 + d[1]) as f64 * 0.5);
    let mut u = u0.clone();
    let mut out = ArrayD::<f64>::zeros(IxDyn(&[24, 24]));
    p.call(
        Args::new()
            .array("u", &mut u)
            .array("out", &mut out)
            .int("N", 24),
    )
    .unwrap();
    let want = reference(
        &sdfg,
        &[("u", u0), ("out", ArrayD::zeros(IxDyn(&[24, 24])))],
        &[("N", 24)],
        &[],
    );
    let HostArray::F64(w) = &want.arrays["out"] else {
        unreachable!()
    };
    assert_eq!(bits(&out), bits(w));
    let _ = std::fs::remove_dir_all(&dir);
}
