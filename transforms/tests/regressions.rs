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
