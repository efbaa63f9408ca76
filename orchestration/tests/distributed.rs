//! The DSL's halo exchange: a program that asks for one before its stencil runs over
//! simulated ranks to the bits of the same program on one rank.

use sdflow_ir::interp::{Bindings, HostArray, gather, run, run_ranks, scatter};
use sdflow_ir::{DType, Decomposition, Sdfg, Value};
use sdflow_orchestration::{BuildError, Program, Stencil};

/// `u` (interior `N × N`, halo 1, `NZ` levels) exchanged, then a Laplacian with a
/// diagonal term into `out`.
fn program(ranks: [i64; 2], field: &str) -> Result<Sdfg, BuildError> {
    let lap = Stencil::new("lap", |s| {
        let u = s.input("u");
        let out = s.output("out");
        s.set(
            &out,
            u.at(-1, 0, 0) + u.at(1, 0, 0) + u.at(0, -1, 0) + u.at(0, 1, 0) - 4.0 * u.c()
                + 0.5 * u.at(1, 1, 0),
        );
    });
    let mut p = Program::new("halo");
    p.symbol("N", DType::I64).static_symbol("NZ", Value::I64(2));
    p.field("u", ["N + 2", "N + 2", "NZ"])
        .field("out", ["N + 2", "N + 2", "NZ"]);
    p.halo_exchange(
        &[field],
        Decomposition::Structured {
            ranks,
            width: 1,
            periodic: [true, true],
            corners: true,
        },
    );
    p.call(
        &lap,
        &[("u", "u"), ("out", "out")],
        &[],
        &["1:N+1", "1:N+1", "0:NZ"],
    );
    p.build()
}

fn bindings(u: HostArray) -> Bindings {
    let shape = u.shape().to_vec();
    let mut b = Bindings::default();
    b.symbols
        .insert("N".into(), Value::I64(shape[0] as i64 - 2));
    b.arrays
        .insert("out".into(), HostArray::zeros(DType::F64, &shape));
    b.arrays.insert("u".into(), u);
    b
}

#[test]
fn a_programs_exchange_runs_on_ranks_as_on_one() {
    let n = 8;
    let values: Vec<f64> = (0..n * n * 2)
        .map(|k| ((k * 13) % 17) as f64 * 0.37)
        .collect();
    let inner = HostArray::from_f64(&[n, n, 2], values).unwrap();
    // One rank: the interior padded with its halo, wrapped by the 1 x 1 exchange.
    let one = program([1, 1], "u").unwrap();
    let mut whole = bindings(scatter(&inner, [1, 1], 1).remove(0));
    run(&one, &mut whole).unwrap();
    let want = gather(&[whole.arrays["out"].clone()], &[n, n, 2], [1, 1], 1);
    // Four ranks.
    let four = program([2, 2], "u").unwrap();
    assert!(four.states.iter().any(|s| s.name == "halo_exchange_1"));
    let mut parts: Vec<Bindings> = scatter(&inner, [2, 2], 1)
        .into_iter()
        .map(bindings)
        .collect();
    run_ranks(&four, &mut parts).unwrap();
    let outs: Vec<HostArray> = parts.iter().map(|b| b.arrays["out"].clone()).collect();
    assert_eq!(gather(&outs, &[n, n, 2], [2, 2], 1).bits(), want.bits());
}

#[test]
fn exchanging_a_field_the_program_does_not_have_is_an_error() {
    let e = program([2, 2], "v").unwrap_err().to_string();
    assert_eq!(
        e,
        "program 'halo': the halo exchange names 'v', which is not a field of the program"
    );
}

/// Three diffusion steps, `out = lap(u)` then `u = u + 0.1 out`, with no exchange of
/// their own: the halo analysis over `ranks` puts them in.
fn diffusion(ranks: [i64; 2], analyse: bool) -> (Sdfg, usize) {
    let lap = Stencil::new("lap", |s| {
        let u = s.input("u");
        let out = s.output("out");
        s.set(
            &out,
            u.at(-1, 0, 0) + u.at(1, 0, 0) + u.at(0, -1, 0) + u.at(0, 1, 0) - 4.0 * u.c(),
        );
    });
    let step = Stencil::new("step", |s| {
        let u = s.input("u");
        let d = s.input("d");
        let out = s.output("out");
        s.set(&out, u.c() + 0.1 * d.c());
    });
    let mut p = Program::new("diffusion");
    p.symbol("N", DType::I64).static_symbol("NZ", Value::I64(2));
    p.field("u", ["N + 2", "N + 2", "NZ"])
        .field("out", ["N + 2", "N + 2", "NZ"]);
    let interior = ["1:N+1", "1:N+1", "0:NZ"];
    p.repeat("t", "3", |b| {
        b.call(&lap, &[("u", "u"), ("out", "out")], &[], &interior);
        b.call(
            &step,
            &[("u", "u"), ("d", "out"), ("out", "u")],
            &[],
            &interior,
        );
    });
    let inserted = if analyse {
        p.insert_halo_exchanges(Decomposition::Structured {
            ranks,
            width: 1,
            periodic: [true, true],
            corners: false,
        })
    } else {
        0
    };
    (p.build().unwrap(), inserted)
}

#[test]
fn the_halo_analysis_inserts_the_exchanges_a_program_needs() {
    let n = 8;
    let values: Vec<f64> = (0..n * n * 2)
        .map(|k| ((k * 13) % 17) as f64 * 0.37)
        .collect();
    let inner = HostArray::from_f64(&[n, n, 2], values).unwrap();
    let (one, inserted) = diffusion([1, 1], true);
    // `u` is read at offsets at the top of every iteration, and written at its end: one
    // exchange, inside the loop, before the Laplacian.
    assert_eq!(inserted, 1);
    let mut whole = bindings(scatter(&inner, [1, 1], 1).remove(0));
    run(&one, &mut whole).unwrap();
    let want = gather(&[whole.arrays["u"].clone()], &[n, n, 2], [1, 1], 1);
    let (four, _) = diffusion([2, 2], true);
    let mut parts: Vec<Bindings> = scatter(&inner, [2, 2], 1)
        .into_iter()
        .map(bindings)
        .collect();
    run_ranks(&four, &mut parts).unwrap();
    let us: Vec<HostArray> = parts.iter().map(|b| b.arrays["u"].clone()).collect();
    assert_eq!(gather(&us, &[n, n, 2], [2, 2], 1).bits(), want.bits());
    // Without the exchanges the ranks' borders differ: the analysis is what makes them
    // agree.
    let (stale, _) = diffusion([2, 2], false);
    let mut parts: Vec<Bindings> = scatter(&inner, [2, 2], 1)
        .into_iter()
        .map(bindings)
        .collect();
    run_ranks(&stale, &mut parts).unwrap();
    let us: Vec<HostArray> = parts.iter().map(|b| b.arrays["u"].clone()).collect();
    assert_ne!(gather(&us, &[n, n, 2], [2, 2], 1).bits(), want.bits());
}
