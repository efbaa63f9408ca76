//! The halo exchange on simulated ranks: a stencil on a decomposed field, after an
//! exchange, equals the stencil on the whole field bit for bit; failures stop every rank.

use std::collections::BTreeMap;

use sdflow_ir::format::{from_json, to_json};
use sdflow_ir::interp::{Bindings, HostArray, gather, run, run_ranks, scatter};
use sdflow_ir::validate::ProblemKind;
use sdflow_ir::{DType, Decomposition, HaloExchange, Sdfg, SdfgBuilder, Value};

/// One step of a 9-point stencil on `u` (interior `NI × NJ`, halo 1) into `out`, after
/// exchanging `u`'s halo over `ranks`.
fn stencil(ranks: [i64; 2], periodic: [bool; 2], corners: bool) -> Sdfg {
    let mut b = SdfgBuilder::new("stencil");
    b.symbol("NI", DType::I64)
        .symbol("NJ", DType::I64)
        .array("u", DType::F64, ["NI + 2", "NJ + 2"])
        .array("out", DType::F64, ["NI + 2", "NJ + 2"]);
    b.state("exchange", |s| {
        s.halo_exchange(
            &["u"],
            HaloExchange {
                width: 1,
                decomposition: Decomposition::Structured {
                    ranks,
                    periodic,
                    corners,
                },
            },
        );
    });
    b.state("apply", |s| {
        s.map("lap", &["i", "j"], &["1:NI+1", "1:NJ+1"], |m| {
            m.tasklet(
                "lap",
                &[
                    ("c", "u[i, j]"),
                    ("w", "u[i - 1, j]"),
                    ("e", "u[i + 1, j]"),
                    ("s", "u[i, j - 1]"),
                    ("n", "u[i, j + 1]"),
                    ("sw", "u[i - 1, j - 1]"),
                    ("ne", "u[i + 1, j + 1]"),
                ],
                &[("o", "out[i, j]")],
                "o = w + e + s + n - 4.0 * c + 0.25 * (sw - ne)",
            );
        });
    });
    b.build()
}

/// A global field of `n0 × n1` interior values with a zero halo of 1.
fn field(n0: usize, n1: usize) -> HostArray {
    let mut a = HostArray::zeros(DType::F64, &[n0 + 2, n1 + 2]);
    for i in 0..n0 {
        for j in 0..n1 {
            let v = ((i * 31 + j * 17) % 23) as f64 / 7.0 - 1.0 + (i as f64).sin();
            a.set(&[i + 1, j + 1], Value::F64(v));
        }
    }
    a
}

fn bindings(u: HostArray) -> Bindings {
    let shape = u.shape().to_vec();
    let mut b = Bindings::default();
    b.symbols
        .insert("NI".into(), Value::I64(shape[0] as i64 - 2));
    b.symbols
        .insert("NJ".into(), Value::I64(shape[1] as i64 - 2));
    b.arrays
        .insert("out".into(), HostArray::zeros(DType::F64, &shape));
    b.arrays.insert("u".into(), u);
    b
}

/// The interior of `a` (halo 1) without its halo, as a field of its own.
fn interior(a: &HostArray) -> HostArray {
    let s = a.shape();
    let mut out = HostArray::zeros(DType::F64, &[s[0] - 2, s[1] - 2]);
    for i in 0..s[0] - 2 {
        for j in 0..s[1] - 2 {
            out.set(&[i, j], a.get(&[i + 1, j + 1]).unwrap());
        }
    }
    out
}

/// `out` of the program on `ranks` ranks (the field split by `scatter`), gathered.
fn on_ranks(
    global: &HostArray,
    ranks: [usize; 2],
    periodic: [bool; 2],
    corners: bool,
) -> HostArray {
    let s = stencil([ranks[0] as i64, ranks[1] as i64], periodic, corners);
    assert_eq!(s.validate(), Ok(()));
    let inner = interior(global);
    let mut parts: Vec<Bindings> = scatter(&inner, ranks, 1)
        .into_iter()
        .map(bindings)
        .collect();
    run_ranks(&s, &mut parts).unwrap();
    let outs: Vec<HostArray> = parts.iter().map(|b| b.arrays["out"].clone()).collect();
    gather(&outs, inner.shape(), ranks, 1)
}

/// `out` of the program on one rank (a 1 × 1 decomposition: a periodic dimension wraps
/// onto itself), on the whole field.
fn on_one(global: &HostArray, periodic: [bool; 2], corners: bool) -> HostArray {
    let s = stencil([1, 1], periodic, corners);
    let mut b = bindings(global.clone());
    run(&s, &mut b).unwrap();
    interior(&b.arrays["out"])
}

#[test]
fn a_stencil_after_an_exchange_on_ranks_equals_it_on_the_whole_field() {
    let global = field(10, 7);
    for (periodic, corners) in [
        ([true, true], true),
        ([true, false], true),
        ([false, true], true),
        ([false, false], true),
    ] {
        let want = on_one(&global, periodic, corners);
        // Blocks of unequal sizes (10 rows over 3 ranks: 4, 3, 3), and one rank along a
        // dimension (it wraps onto itself where periodic).
        for ranks in [[2, 2], [3, 2], [1, 3], [5, 1], [1, 1]] {
            let got = on_ranks(&global, ranks, periodic, corners);
            assert_eq!(
                got.bits(),
                want.bits(),
                "{ranks:?} ranks, periodic {periodic:?}"
            );
        }
    }
}

#[test]
fn without_corners_the_diagonal_halo_cells_stay_unfilled() {
    // The stencil reads diagonally: without corners the ranks' corner halos keep their
    // zeros, so the decomposed result differs from the whole field's, exactly at the
    // cells next to an inner corner of the decomposition.
    let global = field(8, 8);
    let want = on_one(&global, [true, true], true);
    let got = on_ranks(&global, [2, 2], [true, true], false);
    let (g, w) = (got.bits(), want.bits());
    let differing: Vec<usize> = (0..g.len()).filter(|&k| g[k] != w[k]).collect();
    assert!(!differing.is_empty());
    // Only cells at a corner of a rank's block (row and column both at a block edge).
    for k in differing {
        let (i, j) = (k / 8, k % 8);
        assert!(
            matches!(i % 4, 0 | 3) && matches!(j % 4, 0 | 3),
            "cell ({i}, {j})"
        );
    }
}

#[test]
fn a_rank_that_fails_stops_every_rank_with_its_message() {
    let s = stencil([2, 2], [true, true], true);
    let inner = interior(&field(6, 6));
    let mut parts: Vec<Bindings> = scatter(&inner, [2, 2], 1)
        .into_iter()
        .map(bindings)
        .collect();
    // Rank 2 has no `u`: it fails before the exchange the others wait in.
    parts[2].arrays.remove("u");
    let e = run_ranks(&s, &mut parts).unwrap_err().to_string();
    assert_eq!(e, "rank 2: missing argument 'u'");
}

#[test]
fn ranks_whose_fields_do_not_fit_together_are_an_error() {
    let s = stencil([2, 1], [true, true], true);
    let mut parts: Vec<Bindings> = scatter(&interior(&field(6, 6)), [2, 1], 1)
        .into_iter()
        .map(bindings)
        .collect();
    // Rank 1's part has one column more than rank 0's, its neighbour along dimension 0.
    parts[1] = bindings(HostArray::zeros(DType::F64, &[5, 9]));
    let e = run_ranks(&s, &mut parts).unwrap_err().to_string();
    assert!(
        e.contains("'u' has extent 8 in dimension 1 on rank 0 and 9 on rank 1, its neighbour along dimension 0"),
        "{e}"
    );
}

#[test]
fn the_number_of_ranks_must_be_the_decompositions() {
    let s = stencil([2, 2], [true, true], true);
    let inner = interior(&field(6, 6));
    let mut parts: Vec<Bindings> = scatter(&inner, [3, 1], 1)
        .into_iter()
        .map(bindings)
        .collect();
    let e = run_ranks(&s, &mut parts).unwrap_err().to_string();
    assert!(
        e.ends_with(
            "a halo exchange over 2x2 ranks (periodic, periodic, corners), run on 3 rank(s)"
        ),
        "{e}"
    );
    // On one rank (not on simulated ranks): a clear error.
    let mut b = bindings(field(6, 6));
    let e = run(&s, &mut b).unwrap_err().to_string();
    assert!(
        e.contains("a halo exchange over 2x2 ranks (periodic, periodic, corners) runs on one rank here (run the program on its ranks: `interp::run_ranks`)"),
        "{e}"
    );
}

#[test]
fn ranks_that_reach_different_exchanges_are_an_error_not_a_hang() {
    // Rank 1 skips the exchange (a runtime flag): the others wait for it until it ends.
    let mut b = SdfgBuilder::new("skips");
    b.symbol("N", DType::I64)
        .symbol("skip", DType::I64)
        .array("u", DType::F64, ["N + 2", "N + 2"]);
    let ex = b.state("exchange", |s| {
        s.halo_exchange(
            &["u"],
            HaloExchange {
                width: 1,
                decomposition: Decomposition::Structured {
                    ranks: [2, 1],
                    periodic: [true, true],
                    corners: false,
                },
            },
        );
    });
    b.body(sdflow_ir::Block::if_else(
        "skip == 0",
        sdflow_ir::Block::State(ex),
        sdflow_ir::Block::Seq(vec![]),
    ));
    let s = b.build();
    assert_eq!(s.validate(), Ok(()));
    let mut parts: Vec<Bindings> = (0..2)
        .map(|r| {
            let mut b = Bindings::default();
            b.symbols.insert("N".into(), Value::I64(4));
            b.symbols.insert("skip".into(), Value::I64(r));
            b.arrays
                .insert("u".into(), HostArray::zeros(DType::F64, &[6, 6]));
            b
        })
        .collect();
    let e = run_ranks(&s, &mut parts).unwrap_err().to_string();
    assert!(
        e.contains("rank 1 ended its program without reaching the halo exchange of u (width 1, 2x1 ranks (periodic, periodic))"),
        "{e}"
    );
}

#[test]
fn the_exchange_round_trips_through_json_and_is_drawn() {
    let s = stencil([2, 3], [true, false], true);
    let text = to_json(&s);
    assert!(text.contains("\"halo_exchange\""), "{text}");
    assert_eq!(from_json(&text).unwrap(), s);
    let dot = sdflow_ir::dot::to_dot(&s);
    assert!(
        dot.contains("halo exchange\\nwidth 1, 2x3 ranks (periodic, bounded, corners)"),
        "{dot}"
    );
}

#[test]
fn a_malformed_exchange_is_a_validation_error() {
    let exchange = |width, ranks| HaloExchange {
        width,
        decomposition: Decomposition::Structured {
            ranks,
            periodic: [true, true],
            corners: false,
        },
    };
    let messages = |s: &Sdfg| -> Vec<(ProblemKind, String)> {
        s.validate()
            .unwrap_err()
            .iter()
            .map(|p| (p.kind, p.message.clone()))
            .collect()
    };
    let mut b = SdfgBuilder::new("bad");
    b.array("u", DType::F64, [2, 8]).array("v", DType::F64, [8]);
    b.state("s", |s| {
        s.halo_exchange(&["u"], exchange(0, [2, 0]));
    });
    b.state("t", |s| {
        s.halo_exchange(&["v"], exchange(1, [1, 1]));
    });
    let got = messages(&b.build());
    let want: BTreeMap<&str, ProblemKind> = [
        ("halo exchange of width 0: the width must be at least 1", ProblemKind::LibraryNode),
        ("halo exchange over 2x0 ranks: each count must be at least 1", ProblemKind::LibraryNode),
        ("halo exchange of 'v', which has 1 dimension(s); the decomposition splits the first two", ProblemKind::LibraryNode),
    ]
    .into_iter()
    .collect();
    for (m, k) in &want {
        assert!(
            got.iter().any(|(gk, gm)| gm == m && gk == k),
            "{m}: {got:?}"
        );
    }
    // Inside a map body: it is collective, once per rank.
    let mut b = SdfgBuilder::new("in_map");
    b.symbol("N", DType::I64).array("u", DType::F64, ["N", "N"]);
    b.state("s", |s| {
        s.map("m", &["i"], &["0:N"], |m| {
            m.halo_exchange(&["u"], exchange(1, [1, 1]));
        });
    });
    let got = messages(&b.build());
    assert!(
        got.iter().any(|(k, m)| *k == ProblemKind::LibraryNode
            && m == "a halo exchange inside a map body (it runs once per rank, at state level)"),
        "{got:?}"
    );
    // Width 1 on an extent of 2: no interior as wide as the halo.
    let mut b = SdfgBuilder::new("narrow");
    b.array("u", DType::F64, [2, 8]);
    b.state("s", |s| {
        s.halo_exchange(&["u"], exchange(1, [1, 1]));
    });
    let got = messages(&b.build());
    assert!(
        got.iter().any(|(_, m)| m
            == "halo exchange of 'u': extent 2 in dimension 0 leaves no interior as wide as the halo (1 on each side)"),
        "{got:?}"
    );
}
