//! Flattening whole programs: `Program::build` on chains of n stencil calls (each call one
//! state and one map, validated at the end), which should grow linearly; and the dynamical
//! core of `examples/dycore`: building its whole time step, and one step on the reference
//! interpreter.

#[path = "../examples/dycore/program.rs"]
mod program;
#[path = "../examples/dycore/reference.rs"]
mod reference;

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use sdflow::ir::DType;
use sdflow::orchestration::{Program, Stencil};

fn chain(n: usize) -> Program {
    let lap = Stencil::new("lap", |s| {
        let u = s.input("u");
        let out = s.output("out");
        s.set(
            &out,
            u.at(-1, 0, 0) + u.at(1, 0, 0) + u.at(0, -1, 0) + u.at(0, 1, 0) - 4.0 * u.c(),
        );
    });
    let mut p = Program::new(&format!("chain_{n}"));
    p.symbol("N", DType::I64)
        .field("u", ["N", "N", "4"])
        .temp("a", ["N", "N", "4"])
        .temp("b", ["N", "N", "4"]);
    p.call(
        &lap,
        &[("u", "u"), ("out", "a")],
        &[],
        &["1:N-1", "1:N-1", "0:4"],
    );
    for k in 1..n {
        let (src, dst) = if k % 2 == 1 { ("a", "b") } else { ("b", "a") };
        p.call(
            &lap,
            &[("u", src), ("out", dst)],
            &[],
            &["1:N-1", "1:N-1", "0:4"],
        );
    }
    p
}

fn bench_flatten(c: &mut Criterion) {
    let mut group = c.benchmark_group("Program::build chain");
    group.sample_size(10);
    for n in [10, 100, 1000] {
        let p = chain(n);
        group.bench_function(format!("{n}"), |b| {
            b.iter(|| black_box(&p).build().unwrap())
        });
    }
    group.finish();
}

fn bench_dycore(c: &mut Criterion) {
    let mut group = c.benchmark_group("dycore");
    group.sample_size(10);
    let cfg = reference::Config::default();
    group.bench_function("build 32x32x4 (flatten + validate)", |b| {
        b.iter(|| program::Dycore::new(black_box(&cfg)).unwrap())
    });
    let dycore = program::Dycore::new(&cfg).unwrap();
    let s0 = reference::random_smooth(&cfg, 7);
    group.bench_function("one step 32x32x4, interpreter", |b| {
        b.iter(|| {
            let mut s = s0.clone();
            dycore.run_interpreted(&mut s, 1).unwrap();
            s
        })
    });
    group.bench_function("one step 32x32x4, plain-loop reference", |b| {
        b.iter(|| {
            let mut s = s0.clone();
            reference::step(&cfg, &mut s);
            s
        })
    });
    group.finish();
}

criterion_group!(benches, bench_flatten, bench_dycore);
criterion_main!(benches);
