//! Minimal programs that passes once miscompiled, one per bug class: each pass's output
//! validates and the reference interpreter's outputs are bitwise equal before and after.

use sdflow_ir::testkit::assert_same_results;
use std::collections::BTreeMap;

use sdflow_ir::interp::{self, random_bindings};
use sdflow_ir::{Block, DType, Sdfg, SdfgBuilder, Value};
use sdflow_transforms::{DeadDataflow, MoveIntoIf, Pass, Pipeline, RedundantCopy, Specialize};

/// Runs both programs on the same random inputs (symbols `syms`); every argument must be
/// bitwise equal afterwards.
fn same_results(a: &Sdfg, b: &Sdfg, syms: &[(&str, Value)]) {
    let syms: BTreeMap<String, Value> = syms.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    assert_same_results(a, b, &syms, 3);
}

fn n(v: i64) -> (&'static str, Value) {
    ("N", Value::I64(v))
}

/// Applies `pass`; the result must validate and compute the same at every `N` given.
fn preserved(s0: &Sdfg, pass: &dyn Pass, ns: &[i64]) -> Sdfg {
    assert_eq!(s0.validate(), Ok(()));
    let mut s = s0.clone();
    pass.run(&mut s);
    assert_eq!(s.validate(), Ok(()), "{}", sdflow_ir::format::to_json(&s));
    for &v in ns {
        same_results(s0, &s, &[n(v)]);
    }
    s
}

/// `for t in 0..N { tmp[t] = 2 u[t]; if t % 2 == 1 { out[0:t+1] = tmp[0:t+1] + 1 } }`:
/// the branch reads elements written on earlier iterations, when it was not taken.
fn loop_carried_branch() -> Sdfg {
    let mut b = SdfgBuilder::new("loop_carried_branch");
    b.symbol("N", DType::I64)
        .symbol("t", DType::I64)
        .array("u", DType::F64, ["N"])
        .array("out", DType::F64, ["N"])
        .transient("tmp", DType::F64, ["N"]);
    let pre = b.state("pre", |s| {
        s.map("w", &["i"], &["t:t + 1"], |m| {
            m.tasklet("w", &[("x", "u[i]")], &[("y", "tmp[i]")], "y = 2.0 * x");
        });
    });
    let then = b.state("use", |s| {
        s.map("r", &["i"], &["0:t + 1"], |m| {
            m.tasklet("r", &[("x", "tmp[i]")], &[("y", "out[i]")], "y = x + 1.0");
        });
    });
    b.body(Block::for_loop(
        "t",
        0,
        "t < N",
        "t + 1",
        Block::seq([
            Block::State(pre),
            Block::if_else("t % 2 == 1", Block::State(then), Block::empty()),
        ]),
    ));
    b.build()
}

#[test]
fn move_into_if_keeps_a_loop_carried_partial_write_before_the_if() {
    let s = preserved(&loop_carried_branch(), &MoveIntoIf, &[1, 2, 4, 5]);
    assert!(MoveIntoIf.run(&mut s.clone()).is_empty());
}

/// The nested form: `for t in 0..N { tmp[t] = 2 u[t]; nested { if t % 2 != 0 { out =
/// tmp + 1 } else { out = 0 } } }`. Moved into the callee, `tmp` would become a callee
/// transient, fresh on every call, where the caller's kept its value across iterations.
fn loop_carried_nested_branch() -> Sdfg {
    let mut inner = SdfgBuilder::new("cond");
    inner
        .symbol("n", DType::I64)
        .symbol("f", DType::I64)
        .array("c", DType::F64, ["n"])
        .array("o", DType::F64, ["n"]);
    let t = inner.state("use", |s| {
        s.map("use", &["i"], &["0:n"], |m| {
            m.tasklet("use", &[("x", "c[i]")], &[("y", "o[i]")], "y = x + 1.0");
        });
    });
    let e = inner.state("zero", |s| {
        s.map("zero", &["i"], &["0:n"], |m| {
            m.tasklet("zero", &[], &[("y", "o[i]")], "y = 0.0");
        });
    });
    inner.body(Block::if_else("f != 0", Block::State(t), Block::State(e)));
    let inner = inner.build();
    let mut b = SdfgBuilder::new("loop_carried_nested_branch");
    b.symbol("N", DType::I64)
        .symbol("t", DType::I64)
        .array("u", DType::F64, ["N"])
        .array("out", DType::F64, ["N"])
        .transient("tmp", DType::F64, ["N"]);
    let s = b.state("s", |s| {
        s.map("w", &["i"], &["t:t + 1"], |m| {
            m.tasklet("w", &[("x", "u[i]")], &[("y", "tmp[i]")], "y = 2.0 * x");
        });
        s.nested(
            inner,
            &[("n", "N"), ("f", "t % 2")],
            &[("c", "tmp[0:N]")],
            &[("o", "out[0:N]")],
        );
    });
    b.body(Block::for_loop("t", 0, "t < N", "t + 1", Block::State(s)));
    b.build()
}

#[test]
fn move_into_nested_if_keeps_a_loop_carried_partial_write() {
    let s = preserved(&loop_carried_nested_branch(), &MoveIntoIf, &[1, 2, 4, 5]);
    assert!(s.arrays.contains_key("tmp"), "tmp stays the caller's");
}

/// A nested SDFG whose float and bool symbols the caller forwards from its own static
/// symbols: `out = select(b, u * w, u)`.
fn forwarded_static_scalars() -> Sdfg {
    let mut inner = SdfgBuilder::new("scale");
    inner
        .symbol("n", DType::I64)
        .symbol("w", DType::F64)
        .symbol("b", DType::Bool)
        .array("a", DType::F64, ["n"])
        .array("o", DType::F64, ["n"]);
    inner.state("s", |s| {
        s.map("scale", &["i"], &["0:n"], |m| {
            m.tasklet(
                "scale",
                &[("x", "a[i]")],
                &[("y", "o[i]")],
                "y = select(b, x * w, x)",
            );
        });
    });
    let inner = inner.build();
    let mut b = SdfgBuilder::new("forwarded_static_scalars");
    b.symbol("N", DType::I64)
        .static_symbol("w", Value::F64(0.75))
        .static_symbol("b", Value::Bool(true))
        .array("u", DType::F64, ["N"])
        .array("out", DType::F64, ["N"]);
    b.state("s", |s| {
        s.nested(
            inner,
            &[("n", "N"), ("w", "w"), ("b", "b")],
            &[("a", "u[0:N]")],
            &[("o", "out[0:N]")],
        );
    });
    b.build()
}

#[test]
fn specialize_keeps_static_float_and_bool_symbols_forwarded_to_a_nested_sdfg() {
    let mut s = preserved(&forwarded_static_scalars(), &Specialize, &[3]);
    assert!(s.symbols.keys().eq(["N"]), "{:?}", s.symbols);
    assert!(Specialize.run(&mut s).is_empty());
    // The whole default pipeline accepts such a program.
    let s0 = forwarded_static_scalars();
    let mut opt = s0.clone();
    Pipeline::cpu().validate_each(true).run(&mut opt).unwrap();
    same_results(&s0, &opt, &[n(4)]);
}

/// `tmp` (zero at start) written on `1:N-1` by a map whose edge says `tmp[0:N]` (valid:
/// a map edge may over-approximate its body), then copied whole into `out`.
fn over_approximated_copy() -> Sdfg {
    let mut b = SdfgBuilder::new("over_approximated_copy");
    b.symbol("N", DType::I64)
        .array("u", DType::F64, ["N"])
        .array("out", DType::F64, ["N"])
        .transient("tmp", DType::F64, ["N"]);
    b.state("s", |s| {
        s.map("f", &["i"], &["1:N - 1"], |m| {
            m.tasklet("f", &[("x", "u[i]")], &[("y", "tmp[i]")], "y = 3.0 * x");
        });
        s.copy("tmp[0:N]", "out[0:N]");
    });
    let mut s = b.build();
    let g = &mut s.states[0].graph;
    for e in g.edge_ids() {
        if g.edge(e).memlet.data == "tmp" && g.edge(e).memlet.other_subset.is_none() {
            g.graph[e].memlet = sdflow_ir::Memlet::parse("tmp[0:N]");
        }
    }
    s
}

#[test]
fn redundant_copy_keeps_the_boundary_an_over_approximated_edge_claims() {
    let s = preserved(&over_approximated_copy(), &RedundantCopy, &[1, 3, 5]);
    assert!(s.arrays.contains_key("tmp"));
}

/// `tmp[i] (wcr: sum) = 3 u[i]` over `0:N`, the conflict resolution on the body's edge
/// only (as DaCe writes it), then `out = tmp`.
fn inner_wcr_copy() -> Sdfg {
    let mut b = SdfgBuilder::new("inner_wcr_copy");
    b.symbol("N", DType::I64)
        .array("u", DType::F64, ["N"])
        .array("out", DType::F64, ["N"])
        .transient("tmp", DType::F64, ["N"]);
    b.state("s", |s| {
        s.map("f", &["i"], &["0:N"], |m| {
            m.tasklet(
                "f",
                &[("x", "u[i]")],
                &[("y", "tmp[i] (wcr: sum)")],
                "y = 3.0 * x",
            );
        });
        s.copy("tmp[0:N]", "out[0:N]");
    });
    let mut s = b.build();
    let g = &mut s.states[0].graph;
    for e in g.edge_ids() {
        g.graph[e].memlet.wcr = None;
    }
    // Put the resolution back on the body's edge only.
    for n in g.node_ids() {
        if let sdflow_ir::Node::Map(m) = &mut g.graph[n] {
            for e in m.body.edge_ids() {
                if m.body.edge(e).memlet.data == "tmp" {
                    m.body.graph[e].memlet.wcr = Some(sdflow_ir::Wcr::Sum);
                }
            }
        }
    }
    s
}

#[test]
fn redundant_copy_keeps_a_write_with_conflict_resolution_on_the_inner_edge() {
    let s = preserved(&inner_wcr_copy(), &RedundantCopy, &[1, 4]);
    assert!(s.arrays.contains_key("tmp"));
}

/// One map writes `out` (live) and `waste` (never read).
fn live_and_dead_outputs() -> Sdfg {
    let mut b = SdfgBuilder::new("live_and_dead_outputs");
    b.symbol("N", DType::I64)
        .array("u", DType::F64, ["N"])
        .array("out", DType::F64, ["N"])
        .transient("waste", DType::F64, ["N"]);
    b.state("s", |s| {
        s.map("both", &["i"], &["0:N"], |m| {
            m.tasklet(
                "both",
                &[("x", "u[i]")],
                &[("y", "out[i]"), ("z", "waste[i]")],
                "y = x + 1.0; z = x * x",
            );
        });
    });
    b.build()
}

#[test]
fn dead_dataflow_keeps_what_a_kept_map_writes() {
    let mut s = preserved(&live_and_dead_outputs(), &DeadDataflow, &[3]);
    assert!(DeadDataflow.run(&mut s).is_empty());
    let s0 = live_and_dead_outputs();
    let mut opt = s0.clone();
    Pipeline::cpu().validate_each(true).run(&mut opt).unwrap();
    same_results(&s0, &opt, &[n(4)]);
}

/// The hyperdiffusion example, optimized (tiled fusion of the two Laplacians), runs
/// wherever the original does: tile buffers of `N - 2` columns are empty, not negative,
/// at `N = 1`.
#[test]
fn tiled_fusion_runs_at_every_small_size() {
    let text = include_str!("../../examples/hyperdiffusion.sdfg.json");
    let s0 = sdflow_ir::format::from_json(text).unwrap();
    let mut opt = s0.clone();
    let report = Pipeline::cpu().validate_each(true).run(&mut opt).unwrap();
    assert!(report.to_string().contains("maps_fused_tiled"), "{report}");
    for v in 0..6 {
        same_results(&s0, &opt, &[n(v), ("alpha", Value::F64(0.5))]);
    }
    let s0 = sdflow_ir::testkit::stencil_chain(3);
    let mut opt = s0.clone();
    Pipeline::cpu().validate_each(true).run(&mut opt).unwrap();
    for v in 0..8 {
        same_results(&s0, &opt, &[n(v)]);
    }
}

/// A transient whose shape is negative at the sizes given is reported as a transient,
/// not as an argument of the call.
#[test]
fn a_negative_transient_extent_is_reported_as_a_transient() {
    let mut b = SdfgBuilder::new("neg");
    b.symbol("N", DType::I64)
        .array("u", DType::F64, ["N"])
        .transient("inner", DType::F64, ["N - 2"]);
    b.state("s", |s| {
        s.map("f", &["i"], &["1:N - 1"], |m| {
            m.tasklet("f", &[("x", "u[i]")], &[("y", "inner[i - 1]")], "y = x");
        });
    });
    let s = b.build();
    assert_eq!(s.validate(), Ok(()));
    let mut x =
        random_bindings(&s, &BTreeMap::from([("N".to_string(), Value::I64(1))]), 1).unwrap();
    let e = interp::run(&s, &mut x).unwrap_err().to_string();
    assert!(e.contains("transient 'inner'"), "{e}");
    assert!(!e.contains("argument"), "{e}");
}

/// A legal nested move (a whole write, no loop) whose input's shape uses a caller symbol
/// (`K`) that neither the node's code nor its memlets mention: the callee must receive
/// it with the input's descriptor.
#[test]
fn move_into_nested_if_passes_the_symbols_of_moved_descriptors() {
    let mut inner = SdfgBuilder::new("cond");
    inner
        .symbol("n", DType::I64)
        .symbol("f", DType::I64)
        .array("c", DType::F64, ["n"])
        .array("o", DType::F64, ["n"]);
    let t = inner.state("use", |s| {
        s.map("use", &["i"], &["0:n"], |m| {
            m.tasklet("use", &[("x", "c[i]")], &[("y", "o[i]")], "y = x + 1.0");
        });
    });
    let e = inner.state("zero", |s| {
        s.map("zero", &["i"], &["0:n"], |m| {
            m.tasklet("zero", &[], &[("y", "o[i]")], "y = 0.0");
        });
    });
    inner.body(Block::if_else("f != 0", Block::State(t), Block::State(e)));
    let inner = inner.build();
    let mut b = SdfgBuilder::new("descriptor_symbols");
    b.symbol("N", DType::I64)
        .symbol("K", DType::I64)
        .symbol("flag", DType::I64)
        .array("u", DType::F64, ["K"])
        .array("out", DType::F64, ["N"])
        .transient("tmp", DType::F64, ["N"]);
    b.state("s", |s| {
        s.map("w", &["i"], &["0:N"], |m| {
            m.tasklet("w", &[("x", "u[i]")], &[("y", "tmp[i]")], "y = 2.0 * x");
        });
        s.nested(
            inner,
            &[("n", "N"), ("f", "flag")],
            &[("c", "tmp[0:N]")],
            &[("o", "out[0:N]")],
        );
    });
    let s0 = b.build();
    assert_eq!(s0.validate(), Ok(()));
    let mut s = s0.clone();
    assert_eq!(MoveIntoIf.run(&mut s).get("nodes_moved"), 1);
    assert_eq!(s.validate(), Ok(()), "{}", sdflow_ir::format::to_json(&s));
    assert!(!s.arrays.contains_key("tmp"));
    for flag in [0, 1] {
        same_results(
            &s0,
            &s,
            &[n(3), ("K", Value::I64(5)), ("flag", Value::I64(flag))],
        );
    }
}

/// `tmp[i, j] = 2 u[i, j - a]` then `out[i, j] = tmp[i + 1, j - 1]`, `u` exchanged with
/// a halo of width 1: fusing by recomputation reads `u[i + 1, j - 1 - a]`, beyond the
/// halo when `a = 1`. Map fusion keeps the maps apart then, and fuses them otherwise.
#[test]
fn map_fusion_keeps_recomputed_reads_within_the_halo() {
    use sdflow_transforms::MapFusion;
    let program = |a: i64| {
        let mut b = SdfgBuilder::new("halo_recompute");
        b.symbol("N", DType::I64)
            .array("u", DType::F64, ["N", "N"])
            .array("out", DType::F64, ["N", "N"])
            .transient("tmp", DType::F64, ["N", "N"]);
        b.state("exchange", |s| {
            s.halo_exchange(&["u"], exchange_2x2());
        });
        b.state("apply", |s| {
            s.map("make", &["i", "j"], &["0:N", "1:N"], |m| {
                m.tasklet(
                    "make",
                    &[("x", &format!("u[i, j - {a}]"))],
                    &[("o", "tmp[i, j]")],
                    "o = 2.0 * x",
                );
            });
            s.map("use", &["i", "j"], &["0:N - 1", "2:N"], |m| {
                m.tasklet(
                    "use",
                    &[("x", "tmp[i + 1, j - 1]")],
                    &[("o", "out[i, j]")],
                    "o = x + 1.0",
                );
            });
        });
        b.build()
    };
    let pass = MapFusion {
        tile_rows: 0,
        ..MapFusion::default()
    };
    for (a, fused) in [(1, 0), (0, 1)] {
        let s0 = program(a);
        assert_eq!(s0.validate(), Ok(()));
        let mut s = s0.clone();
        let ch = pass.run(&mut s);
        assert_eq!(ch.get("maps_fused_recompute"), fused, "a = {a}: {ch:?}");
        assert_eq!(s.validate(), Ok(()), "{}", sdflow_ir::format::to_json(&s));
        same_results_on_ranks(&s0, &s, &[3, 6]);
    }
}

/// Both programs on the 2 x 2 ranks of their exchanges, at each `N` given: every rank's
/// arguments bitwise equal afterwards.
fn same_results_on_ranks(a: &Sdfg, b: &Sdfg, ns: &[i64]) {
    for &v in ns {
        let syms = BTreeMap::from([("N".to_string(), Value::I64(v))]);
        let inputs: Vec<_> = (0..4)
            .map(|r| random_bindings(a, &syms, 11 + r).unwrap())
            .collect();
        let (mut before, mut after) = (inputs.clone(), inputs);
        interp::run_ranks(a, &mut before).unwrap();
        interp::run_ranks(b, &mut after).unwrap();
        for (r, (x, y)) in before.iter().zip(&after).enumerate() {
            let d = sdflow_ir::testkit::first_difference(a, x, y);
            assert_eq!(d, None, "'{}': rank {r}, N = {v}", a.name);
        }
    }
}

fn exchange_2x2() -> sdflow_ir::HaloExchange {
    sdflow_ir::HaloExchange {
        decomposition: sdflow_ir::Decomposition::Structured {
            ranks: [2, 2],
            width: 1,
            periodic: [true, true],
            corners: true,
        },
    }
}

/// `tmp = 2 u`, exchanged, copied whole into `tmp2`, which a stencil reads: merging the
/// copy renames `tmp` to `tmp2` everywhere, the exchange's connectors (named after the
/// field) included.
#[test]
fn redundant_copy_renames_an_exchanged_transient_at_the_exchange() {
    let mut b = SdfgBuilder::new("exchanged_copy");
    b.symbol("N", DType::I64)
        .array("u", DType::F64, ["N", "N"])
        .array("out", DType::F64, ["N", "N"])
        .transient("tmp", DType::F64, ["N", "N"])
        .transient("tmp2", DType::F64, ["N", "N"]);
    b.state("make", |s| {
        s.map("make", &["i", "j"], &["0:N", "0:N"], |m| {
            m.tasklet(
                "make",
                &[("x", "u[i, j]")],
                &[("o", "tmp[i, j]")],
                "o = 2.0 * x",
            );
        });
    });
    b.state("exchange", |s| {
        s.halo_exchange(&["tmp"], exchange_2x2());
    });
    b.state("copy", |s| {
        s.copy("tmp[0:N, 0:N]", "tmp2[0:N, 0:N]");
    });
    b.state("use", |s| {
        s.map("use", &["i", "j"], &["1:N", "0:N"], |m| {
            m.tasklet(
                "use",
                &[("x", "tmp2[i - 1, j]"), ("y", "tmp2[i, j]")],
                &[("o", "out[i, j]")],
                "o = x - y",
            );
        });
    });
    let s0 = b.build();
    assert_eq!(s0.validate(), Ok(()));
    let mut s = s0.clone();
    assert_eq!(RedundantCopy.run(&mut s).get("transients_merged"), 1);
    assert_eq!(s.validate(), Ok(()), "{}", sdflow_ir::format::to_json(&s));
    assert!(!s.arrays.contains_key("tmp"));
    same_results_on_ranks(&s0, &s, &[3, 6]);
}
