//! The default pipelines on the dynamical core: fewer maps and transients, outputs bitwise
//! equal on the reference interpreter; and on random variants of the dycore (sizes,
//! flags, steps).

#[path = "../examples/dycore/program.rs"]
mod program;
#[path = "../examples/dycore/reference.rs"]
mod reference;

use program::Dycore;
use proptest::prelude::*;
use reference::{Config, random_smooth};
use sdflow::ir::interp;
use sdflow::ir::testkit::first_difference;
use sdflow::transforms::Pipeline;

/// Transient arrays (scalars local to map bodies are registers, not memory).
fn transient_arrays(s: &sdflow::ir::Sdfg) -> usize {
    s.arrays
        .values()
        .filter(|d| d.transient() && d.rank() > 0)
        .count()
}

/// Runs the dycore and its form optimized by `pipeline`: the first argument whose values
/// differ, if any, and the optimizer's report.
fn optimized_run(cfg: &Config, steps: usize, pipeline: Pipeline) -> (Option<String>, String) {
    let dycore = Dycore::new(cfg).unwrap();
    let inputs = dycore.bindings(&random_smooth(cfg, 3), steps);
    let mut before = inputs.clone();
    interp::run(&dycore.sdfg, &mut before).unwrap();
    let mut opt = dycore.sdfg.clone();
    let report = pipeline.validate_each(true).run(&mut opt).unwrap();
    let mut after = inputs.clone();
    interp::run(&opt, &mut after).unwrap();
    (
        first_difference(&dycore.sdfg, &before, &after),
        report.to_string(),
    )
}

#[test]
fn the_cpu_pipeline_shrinks_the_dycore_and_keeps_its_results() {
    let cfg = Config {
        nx: 6,
        ny: 5,
        ..Config::default()
    };
    let dycore = Dycore::new(&cfg).unwrap();
    let before = dycore.sdfg.stats();
    let mut opt = dycore.sdfg.clone();
    let report = Pipeline::cpu().validate_each(true).run(&mut opt).unwrap();
    let after = opt.stats();
    let (t0, t1) = (transient_arrays(&dycore.sdfg), transient_arrays(&opt));
    eprintln!(
        "dycore: maps {} -> {}, transient arrays {t0} -> {t1}, states {} -> {}\n{report}",
        before.maps, after.maps, before.states, after.states
    );
    assert!(report.fixed_point);
    assert!(after.maps < before.maps, "{report}");
    assert!(t1 < t0, "{report}");
    // The static flag is folded: no `hyperdiffusion` symbol and one `if` fewer.
    assert!(!opt.symbols.contains_key("hyperdiffusion"));
    let (diff, report) = optimized_run(&cfg, 2, Pipeline::cpu());
    assert_eq!(diff, None, "{report}");
}

#[test]
fn the_gpu_pipeline_keeps_the_dycore_results() {
    let cfg = Config {
        nx: 4,
        ny: 4,
        nz: 2,
        rho: vec![1025.0, 1027.0],
        depth: vec![1000.0, 3000.0],
        ..Config::default()
    };
    let (diff, report) = optimized_run(&cfg, 1, Pipeline::gpu());
    assert_eq!(diff, None, "{report}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Random variants of the dycore: sizes, layers, both flags, steps.
    #[test]
    fn random_dycore_variants_keep_their_results(
        nx in 2usize..6,
        ny in 2usize..5,
        nz in 1usize..4,
        hyper in any::<bool>(),
        damping in any::<bool>(),
        steps in 1usize..3,
    ) {
        let cfg = Config {
            nx,
            ny,
            nz,
            rho: (0..nz).map(|k| 1025.0 + k as f64).collect(),
            depth: vec![4000.0 / nz as f64; nz],
            hyperdiffusion: hyper,
            damping,
            damping_layers: 1,
            ..Config::default()
        };
        let (diff, report) = optimized_run(&cfg, steps, Pipeline::cpu());
        prop_assert_eq!(diff, None, "{:?}\n{}", cfg, report);
    }
}
