//! Benchmarks of the IR layer: reading and validating programs, drawing them, simplifying
//! symbolic expressions, and the reference interpreter (which is meant to be obviously
//! right, not fast: this records how slow it is so tests stay sized sensibly).

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use sdflow::ir::interp::{self, Bindings};
use sdflow::ir::{SymExpr, Value, dot, format};

fn example(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples")
            .join(name),
    )
    .unwrap()
}

fn bench_format(c: &mut Criterion) {
    let text = example("tridiagonal.sdfg.json");
    let sdfg = format::from_json(&text).unwrap();
    c.bench_function("from_json tridiagonal", |b| {
        b.iter(|| format::from_json(black_box(&text)).unwrap())
    });
    c.bench_function("validate tridiagonal", |b| {
        b.iter(|| black_box(&sdfg).validate().unwrap())
    });
    c.bench_function("to_json tridiagonal", |b| {
        b.iter(|| format::to_json(black_box(&sdfg)))
    });
    c.bench_function("to_dot tridiagonal", |b| {
        b.iter(|| dot::to_dot(black_box(&sdfg)))
    });
}

/// Validation of a chain of n stencils in one state: should grow about linearly.
fn bench_validate_scaling(c: &mut Criterion) {
    let mut group = c.benchmark_group("validate stencil_chain");
    group.sample_size(10);
    for n in [10, 100, 1000] {
        let sdfg = sdflow::ir::testkit::stencil_chain(n);
        group.bench_function(format!("{n}"), |b| {
            b.iter(|| black_box(&sdfg).validate().unwrap())
        });
    }
    group.finish();
}

fn bench_symexpr(c: &mut Criterion) {
    let e = SymExpr::parse("2 * (N + 3) - N + min(i - 1, i + 2) * 1 - (j + 1) + (j - 1)").unwrap();
    c.bench_function("SymExpr::simplify", |b| b.iter(|| black_box(&e).simplify()));
}

fn bench_interp(c: &mut Criterion) {
    let sdfg = format::from_json(&example("hyperdiffusion.sdfg.json")).unwrap();
    let mut symbols = BTreeMap::new();
    symbols.insert("N".to_string(), Value::I64(64));
    symbols.insert("alpha".to_string(), Value::F64(0.05));
    let bindings = interp::random_bindings(&sdfg, &symbols, 1).unwrap();
    c.bench_function("interp hyperdiffusion 64x64", |b| {
        b.iter_batched(
            || bindings.clone(),
            |mut bind: Bindings| interp::run(&sdfg, &mut bind).unwrap(),
            criterion::BatchSize::LargeInput,
        )
    });
}

criterion_group!(
    benches,
    bench_format,
    bench_validate_scaling,
    bench_symexpr,
    bench_interp
);
criterion_main!(benches);
