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
                decomposition: Decomposition::Structured {
                    ranks,
                    width: 1,
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
            "a halo exchange over 2x2 ranks (periodic, periodic, corners), width 1 is run on 3 rank(s)"
        ),
        "{e}"
    );
    // On one rank (not on simulated ranks): a clear error.
    let mut b = bindings(field(6, 6));
    let e = run(&s, &mut b).unwrap_err().to_string();
    assert!(
        e.contains("a halo exchange over 2x2 ranks (periodic, periodic, corners), width 1 cannot run on one rank alone (run the program on its ranks: `interp::run_ranks`)"),
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
                decomposition: Decomposition::Structured {
                    ranks: [2, 1],
                    width: 1,
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
        e.contains("rank 1 ended its program without reaching the halo exchange of u (2x1 ranks (periodic, periodic), width 1)"),
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
        dot.contains("halo exchange\\n2x3 ranks (periodic, bounded, corners), width 1"),
        "{dot}"
    );
}

#[test]
fn a_malformed_exchange_is_a_validation_error() {
    let exchange = |width, ranks| HaloExchange {
        decomposition: Decomposition::Structured {
            ranks,
            width,
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

/// A ring of `N` cells (neighbours `c - 1` and `c + 1`, wrapping), three levels: a
/// neighbour-table stencil after an unstructured exchange of `u` over `ranks` ranks
/// (cells listed by `glob`, owners by `own`).
fn ring(ranks: i64) -> Sdfg {
    let mut b = SdfgBuilder::new("ring");
    b.symbol("NL", DType::I64)
        .symbol("NO", DType::I64)
        .array("u", DType::F64, ["NL", "3"])
        .array("out", DType::F64, ["NL", "3"])
        .array("glob", DType::I64, ["NL"])
        .array("own", DType::I64, ["NL"])
        .array("nb", DType::I64, ["NL", "2"]);
    b.state("exchange", |s| {
        s.halo_exchange(
            &["u"],
            HaloExchange {
                decomposition: Decomposition::Unstructured {
                    ranks,
                    global: "glob".into(),
                    owner: "own".into(),
                },
            },
        );
    });
    b.state("apply", |s| {
        s.map("diffuse", &["c", "k"], &["0:NO", "0:3"], |m| {
            m.tasklet(
                "diffuse",
                &[
                    ("a", "u[nb[c, 0], k]"),
                    ("b", "u[nb[c, 1], k]"),
                    ("x", "u[c, k]"),
                ],
                &[("o", "out[c, k]")],
                "o = a + b - 2.0 * x",
            );
        });
    });
    b.build()
}

/// Rank `r`'s arguments for a ring of `n` cells split into `ranks` blocks: its cells in
/// order, then the cell before and the cell after its block (owned by the neighbours).
fn ring_part(n: usize, ranks: usize, r: usize, u: &dyn Fn(usize, usize) -> f64) -> Bindings {
    let block = n / ranks;
    let (lo, hi) = (r * block, if r + 1 == ranks { n } else { (r + 1) * block });
    let mut cells: Vec<usize> = (lo..hi).collect();
    if ranks > 1 {
        cells.push((lo + n - 1) % n);
        cells.push(hi % n);
    }
    let owner = |g: usize| (g / block).min(ranks - 1);
    let local = |g: usize| cells.iter().position(|&c| c == g).unwrap_or(0);
    let nl = cells.len();
    let mut b = Bindings::default();
    b.symbols.insert("NL".into(), Value::I64(nl as i64));
    b.symbols.insert("NO".into(), Value::I64((hi - lo) as i64));
    let mut field = HostArray::zeros(DType::F64, &[nl, 3]);
    let (mut glob, mut own) = (
        HostArray::zeros(DType::I64, &[nl]),
        HostArray::zeros(DType::I64, &[nl]),
    );
    let mut nb = HostArray::zeros(DType::I64, &[nl, 2]);
    for (l, &g) in cells.iter().enumerate() {
        glob.set(&[l], Value::I64(g as i64));
        own.set(&[l], Value::I64(owner(g) as i64));
        let owned = l < hi - lo;
        for k in 0..3 {
            // Halo cells hold garbage until the exchange fills them.
            field.set(&[l, k], Value::F64(if owned { u(g, k) } else { -1e9 }));
        }
        if owned {
            nb.set(&[l, 0], Value::I64(local((g + n - 1) % n) as i64));
            nb.set(&[l, 1], Value::I64(local((g + 1) % n) as i64));
        }
    }
    b.arrays.insert("u".into(), field);
    b.arrays
        .insert("out".into(), HostArray::zeros(DType::F64, &[nl, 3]));
    b.arrays.insert("glob".into(), glob);
    b.arrays.insert("own".into(), own);
    b.arrays.insert("nb".into(), nb);
    b
}

#[test]
fn an_unstructured_exchange_feeds_a_neighbour_table_stencil_as_on_one_rank() {
    let u = |g: usize, k: usize| ((g * 7 + k * 3) % 11) as f64 / 3.0 + (g as f64).cos();
    let n = 12;
    let mut whole = ring_part(n, 1, 0, &u);
    let s1 = ring(1);
    assert_eq!(s1.validate(), Ok(()));
    run(&s1, &mut whole).unwrap();
    let want = &whole.arrays["out"];
    for ranks in [2, 3, 4] {
        let s = ring(ranks as i64);
        let mut parts: Vec<Bindings> = (0..ranks).map(|r| ring_part(n, ranks, r, &u)).collect();
        run_ranks(&s, &mut parts).unwrap();
        for p in &parts {
            let glob = p.arrays["glob"].values();
            let no = p.symbols["NO"].as_i64() as usize;
            for (l, g) in glob.iter().take(no).enumerate() {
                for k in 0..3 {
                    let g = g.as_i64() as usize;
                    assert_eq!(
                        p.arrays["out"].get(&[l, k]).unwrap(),
                        want.get(&[g, k]).unwrap(),
                        "{ranks} ranks: cell {g}, level {k}"
                    );
                }
            }
        }
    }
}

#[test]
fn a_halo_cell_its_owner_does_not_hold_is_an_error() {
    let u = |g: usize, _: usize| g as f64;
    let s = ring(3);
    let mut parts: Vec<Bindings> = (0..3).map(|r| ring_part(12, 3, r, &u)).collect();
    // Rank 1's halo cell 4 (global 3) said to be owned by rank 2, which does not hold it.
    parts[1]
        .arrays
        .get_mut("own")
        .unwrap()
        .set(&[4], Value::I64(2));
    let e = run_ranks(&s, &mut parts).unwrap_err().to_string();
    assert!(
        e.starts_with("rank 1 / ")
            && e.ends_with("cell 4 (global 3) of rank 1 is not among the cells rank 2 owns"),
        "{e}"
    );
    // The lists must be one-dimensional integer containers of the program.
    let mut b = SdfgBuilder::new("lists");
    b.symbol("N", DType::I64)
        .array("u", DType::F64, ["N"])
        .array("glob", DType::F64, ["N"]);
    b.state("s", |s| {
        s.halo_exchange(
            &["u"],
            HaloExchange {
                decomposition: Decomposition::Unstructured {
                    ranks: 2,
                    global: "glob".into(),
                    owner: "own".into(),
                },
            },
        );
    });
    let problems: Vec<String> = b
        .build()
        .validate()
        .unwrap_err()
        .iter()
        .map(|p| p.message.clone())
        .collect();
    assert!(
        problems.contains(
            &"halo exchange: the global indices 'glob' must be a one-dimensional integer container"
                .to_string()
        ),
        "{problems:?}"
    );
    assert!(
        problems
            .contains(&"halo exchange: the owners 'own' is not a declared container".to_string()),
        "{problems:?}"
    );
}

/// A map that reads a field at an offset beyond the width of the exchange that fills it
/// is an error naming the map, the field, the offset and the exchange; within the width,
/// or where the field is never exchanged, it is not.
#[test]
fn a_read_beyond_the_halo_is_an_error() {
    let program = |width: i64, exchanged: bool| {
        let mut b = SdfgBuilder::new("wide");
        b.symbol("N", DType::I64)
            .array("u", DType::F64, ["N + 4", "N + 4"])
            .array("out", DType::F64, ["N + 4", "N + 4"]);
        if exchanged {
            b.state("exchange", |s| {
                s.halo_exchange(
                    &["u"],
                    HaloExchange {
                        decomposition: Decomposition::Structured {
                            ranks: [2, 1],
                            width,
                            periodic: [true, true],
                            corners: true,
                        },
                    },
                );
            });
        }
        b.state("apply", |s| {
            s.map("wide", &["i", "j"], &["2:N+2", "2:N+2"], |m| {
                m.tasklet(
                    "wide",
                    &[("a", "u[i - 2, j]"), ("b", "u[i, j + 1]")],
                    &[("o", "out[i, j]")],
                    "o = a + b",
                );
            });
        });
        b.build()
    };
    let problems = program(1, true).validate().unwrap_err();
    let beyond: Vec<String> = problems
        .iter()
        .filter(|p| p.kind == ProblemKind::LibraryNode)
        .map(|p| p.to_string())
        .collect();
    assert_eq!(
        beyond,
        [
            "sdfg 'wide' > state 'apply' (#1) > map 'wide' (node 0) > edge 0 (access 'u' -> tasklet 'wide'): map 'wide' reads 'u' at offset -2 from 'i' in dimension 0 (u[i - 2, j]), beyond the halo of width 1 that the exchange in state 'exchange' fills"
        ],
        "{problems:?}"
    );
    assert_eq!(program(2, true).validate(), Ok(()));
    assert_eq!(program(1, false).validate(), Ok(()));
}
