//! Lagged producer–consumer pairs (`plan::lag`, `docs/backend-cpu.md` "Lagged pairs"):
//! a map that reads, through a neighbour table, a field the map before it computed runs
//! in chunks behind it. The plan marks exactly the pairs it may; compiled code in small
//! chunks, whatever the table (neighbours ahead, behind, all on one row, outside the
//! producer's rows), gives the interpreter's results bit for bit.

use std::collections::BTreeMap;

use sdflow_codegen::plan::{Plan, Target};
use sdflow_codegen::{CpuBackend, EmitOptions};
use sdflow_ir::interp::{self, Bindings, HostArray, random_bindings};
use sdflow_ir::testkit::assert_same_arguments;
use sdflow_ir::{Block, DType, Sdfg, SdfgBuilder, StateId, Value};

const N: usize = 60;
const K: usize = 5;

/// The shapes of pairs this file builds.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Pair {
    /// `t[i, k] = 2 x[i, k] + 1` over all rows; `out[i, k]` reads `t` at two
    /// neighbours `tab[i, 0]`, `tab[i, 1]` and at its own row.
    Neighbours,
    /// The producer runs over rows `1:N - 1` and writes row `i + 1` (GT4Py's shift from
    /// the domain's start): rows 0 and 1 of `t` are never written (zeros).
    Shifted,
    /// The consumer also writes `x`, which the producer reads: not lagged.
    ConsumerWritesProducerInput,
    /// The producer also writes `y`: not lagged.
    ProducerWritesTwo,
    /// The consumer reads `t` at a row of another parameter (`t[k, k]`): not lagged.
    OtherParameter,
}

fn program(pair: Pair) -> Sdfg {
    let mut b = SdfgBuilder::new("lagged");
    b.symbol("N", DType::I64)
        .symbol("K", DType::I64)
        .array("x", DType::F64, ["N", "K"])
        .array("y", DType::F64, ["N", "K"])
        .array("tab", DType::I32, ["N", "2"])
        .array("out", DType::F64, ["N", "K"])
        .transient("t", DType::F64, ["N", "K"]);
    b.state("s", |s| {
        let (range, row) = match pair {
            Pair::Shifted => ("1:N - 1", "t[i + 1, k]"),
            _ => ("0:N", "t[i, k]"),
        };
        s.map("produce", &["i", "k"], &[range, "0:K"], |m| {
            let mut outs = vec![("o", row)];
            if pair == Pair::ProducerWritesTwo {
                outs.push(("p", "y[i, k]"));
            }
            let code = if pair == Pair::ProducerWritesTwo {
                "o = a * 2.0 + 1.0\np = a"
            } else {
                "o = a * 2.0 + 1.0"
            };
            m.tasklet("p", &[("a", "x[i, k]")], &outs, code);
        });
        s.map("consume", &["i", "k"], &["0:N", "0:K"], |m| {
            let here = if pair == Pair::OtherParameter {
                "t[k, k]"
            } else {
                "t[i, k]"
            };
            let mut outs = vec![("o", "out[i, k]")];
            if pair == Pair::ConsumerWritesProducerInput {
                outs.push(("w", "x[i, k]"));
            }
            let code = if pair == Pair::ConsumerWritesProducerInput {
                "o = a + 0.5 * b - c\nw = c"
            } else {
                "o = a + 0.5 * b - c"
            };
            m.tasklet(
                "c",
                &[
                    ("a", "t[tab[i, 0], k]"),
                    ("b", "t[tab[i, 1], k]"),
                    ("c", here),
                ],
                &outs,
                code,
            );
        });
    });
    b.body(Block::seq([Block::State(StateId(0))]));
    let s = b.build();
    assert_eq!(s.validate(), Ok(()), "{pair:?}");
    s
}

/// The plan's lag note on the consumer, if any.
fn lag_note(s: &Sdfg) -> Option<String> {
    let plan = Plan::of(s, Target::default()).unwrap();
    let text = plan.to_text();
    text.lines()
        .find(|l| l.contains("lagged behind"))
        .map(|l| l.trim().to_string())
}

/// Neighbour tables of every kind the lag must survive.
fn tables() -> Vec<(&'static str, Vec<[i32; 2]>)> {
    let n = N as i32;
    vec![
        ("identity", (0..n).map(|i| [i, i]).collect()),
        (
            "next and previous",
            (0..n).map(|i| [(i + 1) % n, (i + n - 1) % n]).collect(),
        ),
        ("reversed", (0..n).map(|i| [n - 1 - i, n - 1 - i]).collect()),
        (
            "far ahead",
            (0..n).map(|i| [(i + n / 2) % n, n - 1]).collect(),
        ),
        ("all on row 0", (0..n).map(|_| [0, 0]).collect()),
        (
            "all on the last row",
            (0..n).map(|_| [n - 1, n - 1]).collect(),
        ),
        (
            "scattered",
            (0..n)
                .map(|i| [(i * 37 + 11) % n, (i * 13 + 5) % n])
                .collect(),
        ),
    ]
}

fn inputs(s: &Sdfg, table: &[[i32; 2]], seed: u64) -> Bindings {
    let syms: BTreeMap<String, Value> = [("N", N as i64), ("K", K as i64)]
        .into_iter()
        .map(|(k, v)| (k.to_string(), Value::I64(v)))
        .collect();
    let mut b = random_bindings(s, &syms, seed).unwrap();
    let values: Vec<Value> = table
        .iter()
        .flat_map(|r| r.iter().map(|v| Value::I32(*v)))
        .collect();
    b.arrays.insert(
        "tab".into(),
        HostArray::from_values(DType::I32, &[N, 2], &values).unwrap(),
    );
    b
}

fn backend(lag_points: i64) -> CpuBackend {
    let mut b = CpuBackend {
        cache: None,
        emit: EmitOptions {
            parallel_min_points: 1,
            lag_points,
            ..EmitOptions::default()
        },
        ..CpuBackend::default()
    };
    b.compiler = b.compiler.at_level("-O1");
    b
}

/// Compiled at `lag_points` (on 2 threads) against the interpreter, on every table.
fn agrees(s: &Sdfg, lag_points: i64) {
    let prog = backend(lag_points).build(s).unwrap();
    prog.set_threads(2);
    for (k, (name, table)) in tables().into_iter().enumerate() {
        let given = inputs(s, &table, k as u64);
        let mut expected = given.clone();
        interp::run(s, &mut expected).unwrap();
        // Twice: the second call starts from the transient the first left.
        for call in 0..2 {
            let mut got = given.clone();
            prog.run_bindings(&mut got).unwrap();
            assert_same_arguments(
                s,
                &expected,
                &got,
                &format!("table '{name}', lag_points {lag_points}, call {call}"),
            );
        }
    }
}

#[test]
fn a_neighbour_read_of_the_field_computed_before_runs_lagged_and_agrees() {
    let s = program(Pair::Neighbours);
    let note = lag_note(&s).expect("the consumer runs lagged");
    assert!(
        note.contains("lagged behind its producer (t rows at tab[i, 0], tab[i, 1], i)"),
        "{note}"
    );
    let c = backend(1).generate(&s).unwrap();
    assert!(c.contains("/* 'consume' lagged behind 'produce' (rows of t) */"));
    assert!(c.contains(
        "#pragma omp simd reduction(min:sdf_n0) reduction(max:sdf_x0) reduction(min:sdf_n1) reduction(max:sdf_x1)"
    ));
    // One row per chunk and thread, a few rows, and everything in one chunk.
    for points in [1, 3 * K as i64, 1 << 20] {
        agrees(&s, points);
    }
    // Not lagged at all: the same results.
    assert!(!backend(0).generate(&s).unwrap().contains("lagged behind"));
    agrees(&s, 0);
}

#[test]
fn a_shifted_producer_over_part_of_the_rows_runs_lagged_and_agrees() {
    let s = program(Pair::Shifted);
    let note = lag_note(&s).expect("the consumer runs lagged");
    assert!(
        note.contains("(t rows at tab[i, 0], tab[i, 1], i)"),
        "{note}"
    );
    for points in [1, 2 * K as i64] {
        agrees(&s, points);
    }
}

#[test]
fn pairs_with_other_dependences_are_not_lagged() {
    for pair in [
        Pair::ConsumerWritesProducerInput,
        Pair::ProducerWritesTwo,
        Pair::OtherParameter,
    ] {
        let s = program(pair);
        assert_eq!(lag_note(&s), None, "{pair:?}");
        agrees(&s, 1);
    }
}

/// Random programs in which a map gathers a transient the map before it computed
/// (`testkit`'s gathers of computed fields), before and after the CPU pipeline: those
/// whose plan runs a pair lagged, compiled in chunks of one row on two threads, give the
/// interpreter's results bit for bit at two sets of sizes: the first 16 such programs
/// of each configuration, among its first 300 seeds.
#[test]
fn random_programs_with_lagged_pairs_match_the_interpreter() {
    use sdflow_ir::testkit::{GenConfig, generate, sample_small_symbols, sample_symbols};
    for (cfg, first) in [
        (GenConfig::default(), 0u64),
        (
            GenConfig {
                allow_hazards: true,
                allow_gt4py_shapes: true,
                ..GenConfig::default()
            },
            10_000,
        ),
    ] {
        let mut lagged = 0;
        for seed in first..first + 300 {
            if lagged >= 16 {
                break;
            }
            let s = generate(seed, &cfg);
            let mut opt = s.clone();
            sdflow_transforms::Pipeline::cpu().run(&mut opt).unwrap();
            for p in [&s, &opt] {
                if lag_note(p).is_none() {
                    continue;
                }
                lagged += 1;
                let fail = |e: sdflow_codegen::CodegenError| -> ! { panic!("seed {seed}: {e}") };
                let be = backend(1);
                let unit = be.translate(p).unwrap_or_else(|e| fail(e));
                let (lib, origin) = be.compile_unit(&unit).unwrap_or_else(|e| fail(e));
                for symbols in [sample_symbols(p), sample_small_symbols(p)] {
                    let mut inputs = random_bindings(p, &symbols, seed).unwrap();
                    // Parallel sums combine in any order: integral values keep them exact.
                    sdflow_ir::testkit::make_total_integral(&mut inputs);
                    // Loaded afresh: the interpreter starts from zeroed transients.
                    let prog = unit.load(&lib, origin).unwrap_or_else(|e| fail(e));
                    prog.set_threads(2);
                    let mut expected = inputs.clone();
                    let mut got = inputs.clone();
                    match interp::run(p, &mut expected) {
                        Ok(()) => {
                            prog.run_bindings(&mut got).unwrap();
                            assert_same_arguments(p, &expected, &got, &format!("seed {seed}"));
                        }
                        Err(e) => {
                            let c = prog.run_bindings(&mut got).unwrap_err().to_string();
                            assert_eq!(c, format!("program '{}': {e}", p.name), "seed {seed}");
                        }
                    }
                }
            }
        }
        assert!(
            lagged >= 16,
            "{lagged} lagged programs from seed {first} on: the generator no longer makes the shape"
        );
    }
}
