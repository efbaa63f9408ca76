//! The default CPU pipeline (`Pipeline::cpu`, without validation between passes) on
//! chains of n dependent 5-point stencils in one state (`testkit::stencil_chain`, n = 10 …
//! 10 000), on the dynamical core's whole time step, and on DaCe's stencil-chain
//! benchmark as DaCe 1.0.2's front end writes it (20, 50 and 200 steps, raw SDFGs in
//! `tests/dace/`; the import too). Growth should be no worse than n log n; the dycore step
//! should optimize in well under 100 ms; DaCe's own simplify + MapFusion on the same
//! files take seconds (docs/perf.md).

#[path = "../examples/dycore/program.rs"]
mod program;
#[path = "../examples/dycore/reference.rs"]
mod reference;

use std::hint::black_box;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use sdflow::ir::testkit::stencil_chain;
use sdflow::transforms::Pipeline;

// The allocator the `sdflow` binary uses, so the figures are the command's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `Pipeline::cpu` on fresh copies of `sdfg`.
fn optimize(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    sdfg: &sdflow::ir::Sdfg,
) {
    group.bench_function(name, |b| {
        b.iter_batched(
            || sdfg.clone(),
            |mut s| {
                Pipeline::cpu().run(black_box(&mut s)).unwrap();
                s
            },
            BatchSize::LargeInput,
        )
    });
}

fn bench_pipeline(c: &mut Criterion) {
    let mut group = c.benchmark_group("Pipeline::cpu");
    group.sample_size(10);
    for n in [10, 100, 1000, 10000] {
        optimize(&mut group, &format!("stencil chain {n}"), &stencil_chain(n));
    }
    let dycore = program::Dycore::new(&reference::Config::default())
        .unwrap()
        .sdfg;
    optimize(&mut group, "dycore time step 32x32x4", &dycore);
    group.finish();

    let mut group = c.benchmark_group("DaCe stencil chain (raw)");
    group.sample_size(10);
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/dace");
    for (n, file) in [
        (20, "stencil_chain_20.raw.sdfg"),
        (50, "stencil_chain_50.raw.sdfgz"),
        (200, "stencil_chain_200.raw.sdfgz"),
    ] {
        let bytes = std::fs::read(dir.join(file)).unwrap();
        group.bench_function(format!("import {n}"), |b| {
            b.iter(|| sdflow::orchestration::dace::import_bytes(black_box(&bytes)).unwrap())
        });
        let sdfg = sdflow::orchestration::dace::import_bytes(&bytes).unwrap();
        optimize(&mut group, &format!("Pipeline::cpu {n}"), &sdfg);
    }
    group.finish();
}

/// The e-graph pass alone: on the dycore time step after the other passes (its fused
/// bodies), and on single bodies of 1,000 and 10,000 expression nodes.
fn bench_egraph(c: &mut Criterion) {
    use sdflow::transforms::{EGraphPass, Pass};
    let mut group = c.benchmark_group("egraph pass");
    group.sample_size(10);
    let mut fused = program::Dycore::new(&reference::Config::default())
        .unwrap()
        .sdfg;
    Pipeline::cpu()
        .disable("egraph")
        .unwrap()
        .run(&mut fused)
        .unwrap();
    let mut bodies = vec![("fused dycore time step".to_string(), fused)];
    for n in [1000, 10000] {
        bodies.push((
            format!("one body of {n} nodes"),
            sdflow::ir::testkit::large_body(n, 1),
        ));
    }
    for (name, sdfg) in &bodies {
        group.bench_function(name.as_str(), |b| {
            b.iter_batched(
                || sdfg.clone(),
                |mut s| {
                    EGraphPass::default().run(black_box(&mut s));
                    s
                },
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, bench_pipeline, bench_egraph);
criterion_main!(benches);
