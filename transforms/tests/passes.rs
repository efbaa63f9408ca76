//! Each pass on hand-written programs, with the exact structure expected afterwards (map
//! and transient counts, which branch a map ended up in) and the interpreter's outputs
//! compared with the original program's.

use sdflow_ir::testkit::assert_same_results;
use std::collections::BTreeMap;

use sdflow_ir::testkit::{IfStmtKind, branchy, if_stmt_callee_of};
use sdflow_ir::{Block, DType, DataDesc, Node, Sdfg, SdfgBuilder, SymExpr, Value};
use sdflow_transforms::{
    DeadDataflow, EGraphPass, MapFusion, MoveIntoIf, Pass, Pipeline, RedundantCopy, SiblingFusion,
    Specialize, StateFusion, TransformError,
};

fn symbols(pairs: &[(&str, i64)]) -> BTreeMap<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Value::I64(*v)))
        .collect()
}

/// Runs both programs on the same random inputs; every argument must be bitwise equal.
fn same_results(a: &Sdfg, b: &Sdfg, syms: &[(&str, i64)]) {
    assert_same_results(a, b, &symbols(syms), 3);
}

fn maps(s: &Sdfg) -> usize {
    s.stats().maps
}

fn transient_arrays(s: &Sdfg) -> Vec<String> {
    s.arrays
        .iter()
        .filter(|(_, d)| d.transient() && d.rank() > 0)
        .map(|(k, _)| k.clone())
        .collect()
}

/// `t = 2 u` then `out = t + 1` over the same range, in one state.
fn pointwise_pair() -> Sdfg {
    let mut b = SdfgBuilder::new("pair");
    b.symbol("N", DType::I64)
        .array("u", DType::F64, ["N", "N"])
        .array("out", DType::F64, ["N", "N"])
        .transient("t", DType::F64, ["N", "N"]);
    b.state("s", |s| {
        s.map("a", &["i", "j"], &["0:N", "0:N"], |m| {
            m.tasklet("a", &[("x", "u[i, j]")], &[("y", "t[i, j]")], "y = 2.0 * x");
        });
        s.map("b", &["p", "q"], &["0:N", "0:N"], |m| {
            m.tasklet(
                "b",
                &[("x", "t[p, q]")],
                &[("y", "out[p, q]")],
                "y = x + 1.0",
            );
        });
    });
    b.build()
}

#[test]
fn map_fusion_same_point_removes_the_transient() {
    let s0 = pointwise_pair();
    let mut s = s0.clone();
    let c = MapFusion::default().run(&mut s);
    assert_eq!(s.validate(), Ok(()));
    assert_eq!((c.get("maps_fused"), c.get("transients_removed")), (1, 1));
    assert_eq!(maps(&s), 1);
    assert!(transient_arrays(&s).is_empty());
    // The value passes through a scalar local to the body.
    assert!(matches!(
        s.arrays["t_v"],
        sdflow_ir::DataDesc::Scalar {
            transient: true,
            ..
        }
    ));
    same_results(&s0, &s, &[("N", 5)]);
    assert!(MapFusion::default().run(&mut s).is_empty());
}

/// GT4Py's neighbour producer once unrolled: one map writes a slab `t[i, 0:3, j]` element
/// by element (`written` of the three elements) and a field `f[i, j]` from the slab read
/// back; the next map reads both at its point.
fn slab_and_field(written: &[usize]) -> Sdfg {
    let mut b = SdfgBuilder::new("slab_and_field");
    b.symbol("N", DType::I64)
        .array("u", DType::F64, ["N", "N"])
        .array("out", DType::F64, ["N", "N"])
        .transient("t", DType::F64, ["N", "3", "N"])
        .transient("f", DType::F64, ["N", "N"]);
    b.state("s", |s| {
        s.map("a", &["i", "j"], &["0:N", "0:N"], |m| {
            for &l in written {
                m.tasklet(
                    &format!("v{l}"),
                    &[("x", "u[i, j]")],
                    &[("y", &format!("t[i, {l}, j]"))],
                    &format!("y = x * {}.5", l + 1),
                );
            }
            m.tasklet(
                "f",
                &[("x", &format!("t[i, {}, j]", written[0])), ("w", "u[i, j]")],
                &[("y", "f[i, j]")],
                "y = x - w",
            );
        });
        s.map("b", &["p", "q"], &["0:N", "0:N"], |m| {
            m.tasklet(
                "b",
                &[
                    ("x0", "t[p, 0, q]"),
                    ("x1", "t[p, 1, q]"),
                    ("x2", "t[p, 2, q]"),
                    ("g", "f[p, q]"),
                ],
                &[("y", "out[p, q]")],
                "y = x0 * x1 - x2 + g",
            );
        });
    });
    b.build()
}

#[test]
fn map_fusion_goes_through_a_slab_written_by_elements_and_a_field_at_once() {
    let s0 = slab_and_field(&[0, 1, 2]);
    let mut s = s0.clone();
    let c = MapFusion::default().run(&mut s);
    assert_eq!(s.validate(), Ok(()));
    assert_eq!(
        (
            c.get("maps_fused"),
            c.get("maps_fused_through_slabs_and_more"),
            c.get("transients_removed")
        ),
        (1, 1, 2)
    );
    assert_eq!(maps(&s), 1);
    assert!(transient_arrays(&s).iter().all(|t| t.starts_with("t_slab")));
    same_results(&s0, &s, &[("N", 5)]);
    assert!(MapFusion::default().run(&mut s).is_empty());
    // A slab not written whole at each point is not a slab per point.
    let mut partial = slab_and_field(&[0, 2]);
    assert!(MapFusion::default().run(&mut partial).is_empty());
    assert_eq!(maps(&partial), 2);
}

/// `out[i, j] = u[i, j] * 2` over `N x M` row-major arrays, the map listed `(j, i)`; with
/// `sum`, the values are also added into `total[0]`.
fn column_walk(sum: bool) -> Sdfg {
    let mut b = SdfgBuilder::new("column_walk");
    b.symbol("N", DType::I64)
        .symbol("M", DType::I64)
        .array("u", DType::F64, ["N", "M"])
        .array("out", DType::F64, ["N", "M"])
        .array("total", DType::F64, ["1"]);
    b.state("s", |s| {
        s.map("walk", &["j", "i"], &["0:M", "0:N"], |m| {
            let mut outs = vec![("o", "out[i, j]")];
            if sum {
                outs.push(("t", "total[0] (wcr: sum)"));
            }
            let code = if sum {
                "o = x * 2.0; t = x"
            } else {
                "o = x * 2.0"
            };
            m.tasklet("t", &[("x", "u[i, j]")], &outs, code);
        });
    });
    b.build()
}

#[test]
fn loop_order_puts_the_contiguous_dimension_innermost() {
    let s0 = column_walk(false);
    let mut s = s0.clone();
    let c = sdflow_transforms::LoopOrder.run(&mut s);
    assert_eq!(s.validate(), Ok(()));
    assert_eq!(c.get("loops_reordered"), 1);
    let Some(Node::Map(m)) = s.states[0]
        .graph
        .node_ids()
        .into_iter()
        .map(|n| s.states[0].graph.node(n).clone())
        .find(|n| matches!(n, Node::Map(_)))
    else {
        panic!("no map")
    };
    assert_eq!(m.params, ["i", "j"]);
    assert_eq!(m.ranges[1].end, sdflow_ir::SymExpr::sym("M"));
    same_results(&s0, &s, &[("N", 5), ("M", 7)]);
    assert!(sdflow_transforms::LoopOrder.run(&mut s).is_empty());
    // A sum's rounding depends on the order: left alone.
    let mut summed = column_walk(true);
    assert!(sdflow_transforms::LoopOrder.run(&mut summed).is_empty());
    // So is a map that reads an array it writes (here at the next row: the order decides
    // which values it sees).
    let mut b = SdfgBuilder::new("in_place");
    b.symbol("N", DType::I64)
        .symbol("M", DType::I64)
        .array("u", DType::F64, ["N", "M"]);
    b.state("s", |s| {
        s.map("walk", &["j", "i"], &["0:M", "0:N - 1"], |m| {
            m.tasklet(
                "t",
                &[("x", "u[i + 1, j]")],
                &[("o", "u[i, j]")],
                "o = x * 2.0",
            );
        });
    });
    let mut in_place = b.build();
    assert!(sdflow_transforms::LoopOrder.run(&mut in_place).is_empty());
    // GT4Py's fields: strides passed at call time. A one-dimensional array over the first
    // dimension, contiguous, says nothing about the field's layout: left alone.
    let mut b = SdfgBuilder::new("symbolic_strides");
    b.symbol("N", DType::I64)
        .symbol("M", DType::I64)
        .array("f", DType::F64, ["N", "M"])
        .array("c", DType::F64, ["N"])
        .array("out", DType::F64, ["N", "M"]);
    b.state("s", |s| {
        s.map("walk", &["i", "j"], &["0:N", "0:M"], |m| {
            m.tasklet(
                "t",
                &[("x", "f[i, j]"), ("y", "c[i]")],
                &[("o", "out[i, j]")],
                "o = x * y",
            );
        });
    });
    let mut symbolic = b.build();
    for a in ["f", "out"] {
        if let Some(sdflow_ir::DataDesc::Array(a)) = symbolic.arrays.get_mut(a) {
            a.strides = vec![
                sdflow_ir::SymExpr::sym("f_stride_0"),
                sdflow_ir::SymExpr::sym("f_stride_1"),
            ];
        }
    }
    for s in ["f_stride_0", "f_stride_1"] {
        let symbol = sdflow_ir::Symbol::new(DType::I64);
        symbolic.symbols.insert(s.into(), symbol);
    }
    assert!(sdflow_transforms::LoopOrder.run(&mut symbolic).is_empty());
}

/// `lap = Laplacian(u)` on `1:N-1`, then `out = Laplacian(lap)` on `2:N-2`.
fn lap_of_lap() -> Sdfg {
    let mut b = SdfgBuilder::new("lap2");
    b.symbol("N", DType::I64)
        .array("u", DType::F64, ["N", "N"])
        .array("out", DType::F64, ["N", "N"])
        .transient("lap", DType::F64, ["N", "N"]);
    let code = "o = n + s + w + e - 4.0 * c";
    b.state("s", |s| {
        s.map("lap1", &["i", "j"], &["1:N-1", "1:N-1"], |m| {
            m.tasklet(
                "lap1",
                &[
                    ("c", "u[i, j]"),
                    ("n", "u[i-1, j]"),
                    ("s", "u[i+1, j]"),
                    ("w", "u[i, j-1]"),
                    ("e", "u[i, j+1]"),
                ],
                &[("o", "lap[i, j]")],
                code,
            );
        });
        s.map("lap2", &["i", "j"], &["2:N-2", "2:N-2"], |m| {
            m.tasklet(
                "lap2",
                &[
                    ("c", "lap[i, j]"),
                    ("n", "lap[i-1, j]"),
                    ("s", "lap[i+1, j]"),
                    ("w", "lap[i, j-1]"),
                    ("e", "lap[i, j+1]"),
                ],
                &[("o", "out[i, j]")],
                code,
            );
        });
    });
    b.build()
}

#[test]
fn map_fusion_recomputes_a_stencil_when_the_cost_model_agrees() {
    let s0 = lap_of_lap();
    let mut s = s0.clone();
    let recompute = MapFusion {
        tile_rows: 0,
        ..MapFusion::default()
    };
    let c = recompute.run(&mut s);
    assert_eq!(s.validate(), Ok(()));
    assert_eq!(c.get("maps_fused_recompute"), 1);
    assert_eq!(maps(&s), 1);
    assert!(transient_arrays(&s).is_empty());
    // Five copies of the inner Laplacian (5 flops each): 20 more per point, and 6 × 8 B
    // (one write, five reads of `lap`) less.
    assert_eq!(
        c.notes,
        [
            "'lap1' into 'lap2' by recomputation at 5 point(s): 20 flop(s) more, 48 B less per point -> fused (limit 1 flop/B)"
        ]
    );
    assert_eq!(s.stats().tasklets, 6);
    same_results(&s0, &s, &[("N", 9)]);

    // A machine with little bandwidth to spare keeps the two maps, and says why.
    let mut s = s0.clone();
    let c = MapFusion {
        balance: 0.25,
        tile_rows: 0,
    }
    .run(&mut s);
    assert!(c.is_empty());
    assert_eq!(maps(&s), 2);
    assert!(
        c.notes[0].ends_with("-> kept (limit 0.25 flop/B)"),
        "{:?}",
        c.notes
    );
}

#[test]
fn map_fusion_through_a_tile_buffer() {
    let s0 = lap_of_lap();
    let mut s = s0.clone();
    let c = MapFusion::default().run(&mut s);
    assert_eq!(s.validate(), Ok(()), "{}", sdflow_ir::format::to_json(&s));
    assert_eq!(c.get("maps_fused_tiled"), 1);
    assert_eq!(
        c.notes,
        [
            "'lap1' into 'lap2' through a tile buffer of 16 + 2 rows: 5 reads per point from the buffer instead of 5 recomputations"
        ]
    );
    // One map over tiles at the top, holding the two stencils; lap is gone, and the
    // buffer is private to a tile.
    assert_eq!(maps(&s), 3);
    assert_eq!(s.states[0].graph.node_ids().len(), 3, "u -> tiles -> out");
    assert!(!s.arrays.contains_key("lap"));
    let buf = &s.arrays["lap_tile"];
    assert_eq!(buf.as_array().unwrap().storage, sdflow_ir::Storage::Local);
    assert_eq!(buf.shape()[0], sdflow_ir::SymExpr::Int(18));
    assert_eq!(s.stats().tasklets, 2, "each stencil once: no recomputation");
    // Grids smaller than, equal to and larger than a tile, and not a multiple of it.
    for n in [5, 8, 20, 21, 37] {
        same_results(&s0, &s, &[("N", n)]);
    }
    let mut small = s0.clone();
    MapFusion {
        tile_rows: 2,
        ..MapFusion::default()
    }
    .run(&mut small);
    same_results(&s0, &small, &[("N", 11)]);
    assert!(MapFusion::default().run(&mut s).is_empty());
}

#[test]
fn fusion_across_states_goes_through_state_fusion() {
    let mut b = SdfgBuilder::new("two_states");
    b.symbol("N", DType::I64)
        .array("u", DType::F64, ["N"])
        .array("out", DType::F64, ["N"])
        .transient("t", DType::F64, ["N"]);
    let s1 = b.state("first", |s| {
        s.map("a", &["i"], &["0:N"], |m| {
            m.tasklet("a", &[("x", "u[i]")], &[("y", "t[i]")], "y = x * x");
        });
    });
    let s2 = b.state("second", |s| {
        s.map("b", &["i"], &["0:N"], |m| {
            m.tasklet("b", &[("x", "t[i]")], &[("y", "out[i]")], "y = x - 3.0");
        });
    });
    b.body(Block::seq([Block::State(s1), Block::State(s2)]));
    let s0 = b.build();
    let mut s = s0.clone();
    let report = Pipeline::from_names(&["state_fusion", "map_fusion"])
        .unwrap()
        .validate_each(true)
        .run(&mut s)
        .unwrap();
    assert_eq!(report.changes("state_fusion").get("states_fused"), 1);
    assert_eq!(report.changes("map_fusion").get("maps_fused"), 1);
    assert_eq!((s.states.len(), maps(&s)), (1, 1));
    assert_eq!(s.states[0].name, "first+second");
    same_results(&s0, &s, &[("N", 7)]);
}

#[test]
fn state_fusion_keeps_conflicting_states_apart() {
    // The second state overwrites what the first reads: fusing would race.
    let mut b = SdfgBuilder::new("war");
    b.symbol("N", DType::I64)
        .array("u", DType::F64, ["N"])
        .array("v", DType::F64, ["N"]);
    let s1 = b.state("read_u", |s| {
        s.map("a", &["i"], &["0:N"], |m| {
            m.tasklet("a", &[("x", "u[i]")], &[("y", "v[i]")], "y = x");
        });
    });
    let s2 = b.state("write_u", |s| {
        s.map("b", &["i"], &["0:N"], |m| {
            m.tasklet("b", &[("x", "v[i]")], &[("y", "u[i]")], "y = x + 1.0");
        });
    });
    b.body(Block::seq([Block::State(s1), Block::State(s2)]));
    let mut s = b.build();
    assert!(StateFusion.run(&mut s).is_empty());
    assert_eq!(s.states.len(), 2);
}

#[test]
fn sibling_fusion_loads_shared_inputs_once() {
    let mut b = SdfgBuilder::new("siblings");
    b.symbol("N", DType::I64)
        .array("u", DType::F64, ["N", "N"])
        .array("x", DType::F64, ["N", "N"])
        .array("y", DType::F64, ["N", "N"]);
    b.state("s", |s| {
        s.map("fx", &["i", "j"], &["1:N", "0:N"], |m| {
            m.tasklet(
                "fx",
                &[("a", "u[i, j]"), ("b", "u[i-1, j]")],
                &[("o", "x[i, j]")],
                "o = a - b",
            );
        });
        s.map("fy", &["p", "q"], &["1:N", "0:N"], |m| {
            m.tasklet(
                "fy",
                &[("a", "u[p, q]")],
                &[("o", "y[p, q]")],
                "o = 2.0 * a",
            );
        });
    });
    let s0 = b.build();
    let mut s = s0.clone();
    let c = SiblingFusion.run(&mut s);
    assert_eq!(s.validate(), Ok(()));
    assert_eq!(c.get("maps_fused"), 1);
    assert_eq!(maps(&s), 1);
    let Node::Map(m) = s.states[0]
        .graph
        .node_ids()
        .into_iter()
        .map(|n| s.states[0].graph.node(n))
        .find(|n| matches!(n, Node::Map(_)))
        .unwrap()
    else {
        unreachable!()
    };
    assert_eq!(
        m.body.access_nodes("u").len(),
        1,
        "u is read through one access node"
    );
    same_results(&s0, &s, &[("N", 6)]);
}

#[test]
fn move_into_if_moves_the_producer_into_its_branch() {
    let s0 = branchy();
    let mut s = s0.clone();
    let c = MoveIntoIf.run(&mut s);
    assert_eq!(s.validate(), Ok(()));
    assert_eq!(c.get("nodes_moved"), 1);
    let Block::Seq(items) = &s.body else { panic!() };
    let Block::If(i) = &items[1] else { panic!() };
    let then_states: Vec<&str> = i
        .then
        .states()
        .iter()
        .map(|id| s.states[id.index()].name.as_str())
        .collect();
    assert_eq!(then_states, ["pre_moved", "then"]);
    let Block::State(pre) = items[0] else {
        panic!()
    };
    assert_eq!(
        s.states[pre.index()].graph.node_count(),
        0,
        "nothing left before the if"
    );
    for flag in [0, 1] {
        same_results(&s0, &s, &[("N", 5), ("flag", flag)]);
    }
    assert!(MoveIntoIf.run(&mut s).is_empty());
    // The cleanup drops the empty state.
    let c = DeadDataflow.run(&mut s);
    assert_eq!(c.get("empty_states_removed"), 1);
    assert_eq!(s.validate(), Ok(()));
}

#[test]
fn move_into_if_leaves_values_read_after_the_if() {
    let mut s = branchy();
    // `tmp` is also read after the if: it must be computed on both paths.
    let after = s.add_state("after");
    let mut g = sdflow_ir::Dataflow::new();
    let t = g.add_access("tmp");
    let o = g.add_access("out");
    g.add_edge(t, None, o, None, sdflow_ir::Memlet::parse("tmp[0:N]"));
    s.states[after.index()].graph = g;
    let Block::Seq(items) = &mut s.body else {
        panic!()
    };
    items.push(Block::State(after));
    assert_eq!(s.validate(), Ok(()));
    assert!(MoveIntoIf.run(&mut s).is_empty());
}

#[test]
fn dead_dataflow_removes_unread_transients_and_their_writers() {
    let mut b = SdfgBuilder::new("dead");
    b.symbol("N", DType::I64)
        .array("u", DType::F64, ["N"])
        .array("out", DType::F64, ["N"])
        .transient("unused", DType::F64, ["N"]);
    b.state("s", |s| {
        s.map("waste", &["i"], &["0:N"], |m| {
            m.tasklet(
                "w",
                &[("x", "u[i]")],
                &[("y", "unused[i]")],
                "y = sqrt(x * x)",
            );
        });
        s.map("keep", &["i"], &["0:N"], |m| {
            m.tasklet("k", &[("x", "u[i]")], &[("y", "out[i]")], "y = x + x");
        });
    });
    let s0 = b.build();
    let mut s = s0.clone();
    let c = DeadDataflow.run(&mut s);
    assert_eq!(s.validate(), Ok(()));
    assert_eq!(maps(&s), 1);
    assert_eq!(c.get("transients_removed"), 1);
    assert!(!s.arrays.contains_key("unused"));
    same_results(&s0, &s, &[("N", 4)]);
}

#[test]
fn dead_dataflow_removes_chains_of_dead_writers() {
    // t2 and t4 are never read: B and the copy into t4 go first, which leaves t1 and t3
    // unread, so A and C go on the next sweep. A transient scalar that only a kept body
    // uses stays declared.
    let mut b = SdfgBuilder::new("chains");
    b.symbol("N", DType::I64)
        .array("u", DType::F64, ["N"])
        .array("out", DType::F64, ["N"])
        .transient_scalar("acc", DType::F64);
    for t in ["t1", "t2", "t3", "t4"] {
        b.transient(t, DType::F64, ["N"]);
    }
    b.state("s", |s| {
        s.map("A", &["i"], &["0:N"], |m| {
            m.tasklet("a", &[("x", "u[i]")], &[("y", "t1[i]")], "y = x + 1.0");
        });
        s.map("B", &["i"], &["0:N"], |m| {
            m.tasklet("b", &[("x", "t1[i]")], &[("y", "t2[i]")], "y = x * 2.0");
        });
        s.map("C", &["i"], &["0:N"], |m| {
            m.tasklet("c", &[("x", "u[i]")], &[("y", "t3[i]")], "y = x - 1.0");
        });
        s.copy("t3[0:N]", "t4[0:N]");
        s.map("keep", &["i"], &["0:N"], |m| {
            m.tasklet("k1", &[("x", "u[i]")], &[("y", "acc")], "y = x + x");
            m.tasklet("k2", &[("x", "acc")], &[("y", "out[i]")], "y = x * x");
        });
    });
    let s0 = b.build();
    assert_eq!(s0.validate(), Ok(()));
    let mut s = s0.clone();
    let c = DeadDataflow.run(&mut s);
    assert_eq!(s.validate(), Ok(()));
    assert_eq!(maps(&s), 1);
    for t in ["t1", "t2", "t3", "t4"] {
        assert!(!s.arrays.contains_key(t), "{t} is still declared");
    }
    assert!(s.arrays.contains_key("acc"));
    assert_eq!(c.get("transients_removed"), 4);
    same_results(&s0, &s, &[("N", 4)]);
    // Nothing is left to remove.
    assert!(DeadDataflow.run(&mut s).is_empty());
}

#[test]
fn redundant_copies_disappear() {
    let mut b = SdfgBuilder::new("copy");
    b.symbol("N", DType::I64)
        .array("u", DType::F64, ["N"])
        .array("out", DType::F64, ["N"])
        .transient("tmp", DType::F64, ["N"]);
    b.state("s", |s| {
        s.map("f", &["i"], &["0:N"], |m| {
            m.tasklet("f", &[("x", "u[i]")], &[("y", "tmp[i]")], "y = 3.0 * x");
        });
        s.copy("tmp[0:N]", "out[0:N]");
    });
    let s0 = b.build();
    let mut s = s0.clone();
    let c = RedundantCopy.run(&mut s);
    assert_eq!(s.validate(), Ok(()));
    assert_eq!(c.get("copies_removed"), 1);
    assert!(!s.arrays.contains_key("tmp"));
    assert_eq!(s.states[0].graph.node_count(), 3, "u -> map -> out");
    same_results(&s0, &s, &[("N", 4)]);
}

/// GT4Py's `concat_where`: `a` assembled from two pieces in two states (bounded by
/// `min`), copied whole into `c` in a third, which the last state reads. With `before`,
/// `c` is written in a state ahead of the pieces; with `after`, `a` is read after the copy.
fn assembled(before: bool, after: bool) -> Sdfg {
    let mut b = SdfgBuilder::new("assembled");
    b.symbol("N", DType::I64)
        .symbol("S", DType::I64)
        .array("u", DType::F64, ["N"])
        .array("out", DType::F64, ["N"])
        .array("out2", DType::F64, ["N"])
        .transient("a", DType::F64, ["N"])
        .transient("c", DType::F64, ["N"]);
    let mut blocks = Vec::new();
    if before {
        blocks.push(Block::State(b.state("pre", |s| {
            s.map("pre", &["i"], &["0:N"], |m| {
                m.tasklet("f", &[("x", "u[i]")], &[("y", "c[i]")], "y = x - 1.0");
            });
        })));
    }
    let p1 = b.state("piece1", |s| {
        s.map("p1", &["i"], &["0:min(N, S)"], |m| {
            m.tasklet("f", &[("x", "u[i]")], &[("y", "a[i]")], "y = 2.0 * x");
        });
    });
    let p2 = b.state("piece2", |s| {
        // Rows from `min(N, S)` to `N - 1`: the last row of `a` keeps its zero.
        s.map("p2", &["i"], &["min(N, S):max(min(N, S), N - 1)"], |m| {
            m.tasklet("f", &[("x", "u[i]")], &[("y", "a[i]")], "y = x + 1.0");
        });
    });
    let cp = b.state("copy", |s| {
        s.copy("a[0:N]", "c[0:N]");
    });
    let use_ = b.state("use", |s| {
        s.map("use", &["i"], &["0:N"], |m| {
            m.tasklet("f", &[("x", "c[i]")], &[("y", "out[i]")], "y = 3.0 * x");
        });
        if after {
            s.map("again", &["i"], &["0:N"], |m| {
                m.tasklet("f", &[("x", "a[i]")], &[("y", "out2[i]")], "y = x");
            });
        }
    });
    blocks.extend([p1, p2, cp, use_].map(Block::State));
    b.body(Block::seq(blocks));
    b.build()
}

#[test]
fn a_transient_assembled_over_states_becomes_the_one_it_is_copied_into() {
    let s0 = assembled(false, false);
    let mut s = s0.clone();
    let c = RedundantCopy.run(&mut s);
    assert_eq!(s.validate(), Ok(()));
    assert_eq!(c.get("transients_merged"), 1);
    assert!(!s.arrays.contains_key("a"));
    let copy = s.states.iter().find(|st| st.name == "copy").unwrap();
    assert!(copy.graph.edge_ids().is_empty(), "the copy is gone");
    // The split inside the domain, beyond it, and an empty domain.
    for syms in [
        [("N", 6), ("S", 2)],
        [("N", 3), ("S", 5)],
        [("N", 0), ("S", 1)],
    ] {
        same_results(&s0, &s, &syms);
    }
    // `c` written before the copy: its last row would keep that value instead of the
    // zero the copy carries. `a` read after the copy: it would see what the copy wrote.
    for (before, after) in [(true, false), (false, true)] {
        let s0 = assembled(before, after);
        let mut s = s0.clone();
        assert_eq!(RedundantCopy.run(&mut s).get("transients_merged"), 0);
        same_results(&s0, &s, &[("N", 6), ("S", 2)]);
    }
}

/// What a write-back program gets wrong, if anything (see [`zones`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Zones {
    /// Nothing: the rule applies.
    Whole,
    /// The upper zone starts one row late: row `S` keeps `t`'s zero.
    Gap,
    /// The upper zone reads `v` one row off the one it writes.
    NeighbourRead,
    /// A map reads all of `v` after the lower zone was written.
    ReadAfterWrite,
    /// A state before writes `v[0]`, outside the box the copy back writes: the rule
    /// applies (a destination assembled from pieces keeps its other pieces).
    PieceOutside,
    /// A state before writes `v[1]`, inside that box.
    PieceInside,
    /// The copy back runs under an `if` on the condition of the `if` that assembled `t`
    /// (a random program's shape): where it is skipped, `v` keeps its values.
    BackInIf,
}

/// GT4Py's in-place update on a domain split in zones (`apply_diffusion_to_vn`): `t`
/// assembled in the arms of a conditional — the lower zone computed from `v` at the
/// point written, or copied over from `v` unchanged; the upper zone computed — then
/// copied whole into `v[1:N + 1]` (element `i` of `t` is element `i + 1` of `v`).
fn zones(z: Zones) -> Sdfg {
    let mut b = SdfgBuilder::new("zones");
    b.symbol("N", DType::I64)
        .symbol("S", DType::I64)
        .symbol("c", DType::I64)
        .array("v", DType::F64, ["N + 2"])
        .array("u", DType::F64, ["N"])
        .array("out", DType::F64, ["N"])
        .transient("t", DType::F64, ["N"]);
    let lo = b.state("lo", |s| {
        s.map("lo", &["i"], &["0:min(N, S)"], |m| {
            m.tasklet(
                "f",
                &[("x", "v[i + 1]"), ("a", "u[i]")],
                &[("y", "t[i]")],
                "y = x + a",
            );
        });
    });
    let start = if z == Zones::Gap {
        "max(0, S) + 1:N"
    } else {
        "max(0, S):N"
    };
    let read = if z == Zones::NeighbourRead {
        "v[i]"
    } else {
        "v[i + 1]"
    };
    let hi = b.state("hi", |s| {
        s.map("hi", &["i"], &[start], |m| {
            m.tasklet("g", &[("x", read)], &[("y", "t[i]")], "y = 2.0 * x");
        });
    });
    let mut then = vec![Block::State(lo)];
    if z == Zones::ReadAfterWrite {
        then.push(Block::State(b.state("peek", |s| {
            s.map("peek", &["i"], &["0:N"], |m| {
                m.tasklet("p", &[("x", "v[i + 1]")], &[("y", "out[i]")], "y = x");
            });
        })));
    }
    then.push(Block::State(hi));
    let keep = b.state("keep", |s| {
        s.copy("v[1:min(N, S) + 1]", "t[0:min(N, S)]");
    });
    let hi2 = b.state("hi2", |s| {
        s.map("hi2", &["i"], &["max(0, S):N"], |m| {
            m.tasklet(
                "g",
                &[("x", "v[i + 1]"), ("a", "u[i]")],
                &[("y", "t[i]")],
                "y = x - a",
            );
        });
    });
    let back = b.state("back", |s| {
        s.copy("t[0:N]", "v[1:N + 1]");
    });
    let mut blocks = Vec::new();
    if matches!(z, Zones::PieceOutside | Zones::PieceInside) {
        let at = if z == Zones::PieceOutside {
            "0:1"
        } else {
            "1:2"
        };
        blocks.push(Block::State(b.state("piece", |s| {
            s.copy("u[0:1]", &format!("v[{at}]"));
        })));
    }
    blocks.extend([
        Block::if_else(
            "c != 0",
            Block::seq(then),
            Block::seq([Block::State(keep), Block::State(hi2)]),
        ),
        if z == Zones::BackInIf {
            Block::if_else("c != 0", Block::State(back), Block::seq([]))
        } else {
            Block::State(back)
        },
    ]);
    b.body(Block::seq(blocks));
    b.build()
}

#[test]
fn a_write_back_buffer_assembled_in_zones_becomes_its_destination() {
    let cases = [
        [("N", 6), ("S", 2), ("c", 1)],
        [("N", 6), ("S", 2), ("c", 0)],
        [("N", 3), ("S", 5), ("c", 1)],
        [("N", 3), ("S", 5), ("c", 0)],
        [("N", 4), ("S", 0), ("c", 1)],
        [("N", 4), ("S", 0), ("c", 0)],
    ];
    let s0 = zones(Zones::PieceOutside);
    let mut s = s0.clone();
    assert_eq!(RedundantCopy.run(&mut s).get("write_backs_merged"), 1);
    for syms in &cases {
        same_results(&s0, &s, syms);
    }
    let s0 = zones(Zones::Whole);
    let mut s = s0.clone();
    let c = RedundantCopy.run(&mut s);
    assert_eq!(s.validate(), Ok(()));
    assert_eq!(c.get("write_backs_merged"), 1);
    assert!(!s.arrays.contains_key("t"));
    // The copy back and the unchanged zone's copy are gone: the maps write `v`.
    assert_eq!(copied(&s), Vec::<String>::new());
    for syms in &cases {
        same_results(&s0, &s, syms);
    }
    let cases: Vec<&[(&str, i64)]> = cases.iter().map(|c| c.as_slice()).collect();
    for z in [
        Zones::Gap,
        Zones::NeighbourRead,
        Zones::ReadAfterWrite,
        Zones::PieceInside,
        Zones::BackInIf,
    ] {
        refused(&zones(z), "write_backs_merged", &format!("{z:?}"), &cases);
    }
}

/// What the copies of `s` (edges between two access nodes) carry, state by state.
fn copied(s: &Sdfg) -> Vec<String> {
    s.states
        .iter()
        .flat_map(|st| {
            let g = &st.graph;
            g.edge_ids()
                .into_iter()
                .filter(|&e| {
                    let (a, b) = g.endpoints(e);
                    g.node(a).as_access().is_some() && g.node(b).as_access().is_some()
                })
                .map(|e| g.edge(e).memlet.data.clone())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `RedundantCopy` on `s0` makes none of the changes `counter` counts, keeps `t`, and
/// computes what `s0` computes at every symbol binding of `cases`.
fn refused(s0: &Sdfg, counter: &str, what: &str, cases: &[&[(&str, i64)]]) {
    let mut s = s0.clone();
    assert_eq!(RedundantCopy.run(&mut s).get(counter), 0, "{what}");
    assert!(s.arrays.contains_key("t"), "{what}");
    for syms in cases {
        same_results(s0, &s, syms);
    }
}

/// What a program reading a write-back buffer back in zones gets wrong, if anything (see
/// [`read_back`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum ReadBack {
    /// Nothing: the rule applies.
    Zones,
    /// The levels above the band are copied from one level late: `w` keeps its old
    /// values on the band's last level.
    ConsumerGap,
    /// The levels above the band are copied from level 0, after the band's map: the
    /// copy puts `t`'s values back over what the map computed.
    Overlap,
    /// The band's map reads `t` on level 0, not at the point it writes.
    OffPoint,
    /// A state between the producers and the consumers reads `w`.
    ReadBetween,
    /// The producers leave the upper zone out: `t` is not written whole.
    ProducerGap,
    /// The lower zone's copy into `t` names only `w_old`, one subset for both ends: a
    /// shifted rename could not move `t`'s side alone.
    OneSubset,
}

/// GT4Py's two `concat_where`s in a row (`apply_diffusion_to_w_…`): `t` is `w_old` with
/// an interior `[a, h)` computed, assembled from a map and two copies; `w` (element `i`
/// of `t` is row `i + 1` of `w`) is `t` damped on the levels below `nr` of that
/// interior, by a map reading `t` at the point it writes, and `t` copied unchanged
/// everywhere else, zone by zone.
fn read_back(z: ReadBack) -> Sdfg {
    let mut b = SdfgBuilder::new("read_back");
    b.symbol("N", DType::I64)
        .symbol("K", DType::I64)
        .symbol("a", DType::I64)
        .symbol("h", DType::I64)
        .symbol("nr", DType::I64)
        .array("w_old", DType::F64, ["N", "K"])
        .array("area", DType::F64, ["N"])
        .array("w", DType::F64, ["N + 1", "K"])
        .array("out", DType::F64, ["N"])
        .transient("t", DType::F64, ["N", "K"]);
    let lower = "0:max(0, min(N, a))";
    let inner = "max(0, a):min(h, N)";
    let upper = "max(a, max(h, 0)):max(a, max(0, max(h, N)))";
    let band = "0:min(nr, K)";
    let interior = b.state("interior", |s| {
        s.map("interior", &["i", "k"], &[inner, "0:K"], |m| {
            m.tasklet(
                "f",
                &[("x", "w_old[i, k]"), ("r", "area[i]")],
                &[("y", "t[i, k]")],
                "y = 2.0 * x + r",
            );
        });
    });
    let keep_lower = b.state("keep_lower", |s| {
        s.copy(&format!("w_old[{lower}, 0:K]"), &format!("t[{lower}, 0:K]"));
    });
    let keep_upper = b.state("keep_upper", |s| {
        s.copy(&format!("w_old[{upper}, 0:K]"), &format!("t[{upper}, 0:K]"));
    });
    let read = if z == ReadBack::OffPoint {
        "t[i, 0]"
    } else {
        "t[i, k]"
    };
    let damp = b.state("damp", |s| {
        s.map("damp", &["i", "k"], &[inner, band], |m| {
            m.tasklet(
                "g",
                &[("x", read), ("r", "area[i]")],
                &[("y", "w[i + 1, k]")],
                "y = x - 0.25 * r * x",
            );
        });
    });
    let shifted = |rows: &str| {
        let (lo, hi) = rows.split_once(':').unwrap();
        format!("{lo} + 1:{hi} + 1")
    };
    let copy_band = b.state("copy_band", |s| {
        s.copy(
            &format!("t[{lower}, {band}]"),
            &format!("w[{}, {band}]", shifted(lower)),
        );
        s.copy(
            &format!("t[{upper}, {band}]"),
            &format!("w[{}, {band}]", shifted(upper)),
        );
    });
    let above = match z {
        ReadBack::ConsumerGap => "max(0, min(nr, K)) + 1:K",
        ReadBack::Overlap => "0:K",
        _ => "max(0, min(nr, K)):K",
    };
    let copy_above = b.state("copy_above", |s| {
        s.copy(&format!("t[0:N, {above}]"), &format!("w[1:N + 1, {above}]"));
    });
    let mut blocks = vec![Block::State(interior), Block::State(keep_lower)];
    if z != ReadBack::ProducerGap {
        blocks.push(Block::State(keep_upper));
    }
    if z == ReadBack::ReadBetween {
        blocks.push(Block::State(b.state("peek", |s| {
            s.map("peek", &["i"], &["0:N"], |m| {
                m.tasklet("p", &[("x", "w[i + 1, 0]")], &[("y", "out[i]")], "y = x");
            });
        })));
    }
    if z == ReadBack::Overlap {
        blocks.extend([copy_band, damp, copy_above].map(Block::State));
    } else {
        blocks.push(Block::State(damp));
        blocks.push(Block::seq([
            Block::State(copy_band),
            Block::State(copy_above),
        ]));
    }
    b.body(Block::seq(blocks));
    let mut s = b.build();
    if z == ReadBack::OneSubset {
        let st = s
            .states
            .iter_mut()
            .find(|st| st.name == "keep_lower")
            .unwrap();
        let g = &mut st.graph;
        for e in g.edge_ids() {
            g.graph[e].memlet.other_subset = None;
        }
    }
    s
}

#[test]
fn a_write_back_buffer_read_back_in_zones_becomes_its_destination() {
    // Interior inside, empty (`h < a`), past the end; the band below, above, at none.
    let cases: [[(&str, i64); 5]; 6] = [
        [("N", 7), ("K", 4), ("a", 2), ("h", 5), ("nr", 2)],
        [("N", 7), ("K", 4), ("a", 0), ("h", 7), ("nr", 4)],
        [("N", 7), ("K", 4), ("a", 5), ("h", 3), ("nr", 1)],
        [("N", 5), ("K", 3), ("a", 6), ("h", 9), ("nr", 6)],
        [("N", 5), ("K", 3), ("a", 1), ("h", 4), ("nr", 0)],
        [("N", 5), ("K", 3), ("a", -2), ("h", 2), ("nr", -1)],
    ];
    let s0 = read_back(ReadBack::Zones);
    let mut s = s0.clone();
    let c = RedundantCopy.run(&mut s);
    assert_eq!(s.validate(), Ok(()));
    assert_eq!(c.get("zoned_write_backs_merged"), 1, "{c}");
    assert!(!s.arrays.contains_key("t"));
    // The copies of `t` into `w` are gone; the two zones of `w_old` stay, into `w`.
    assert_eq!(copied(&s), ["w_old", "w_old"]);
    for syms in &cases {
        same_results(&s0, &s, syms);
    }
    let cases: Vec<&[(&str, i64)]> = cases.iter().map(|c| c.as_slice()).collect();
    for z in [
        ReadBack::ConsumerGap,
        ReadBack::Overlap,
        ReadBack::OffPoint,
        ReadBack::ReadBetween,
        ReadBack::ProducerGap,
        ReadBack::OneSubset,
    ] {
        let what = format!("{z:?}");
        refused(&read_back(z), "zoned_write_backs_merged", &what, &cases);
    }
}

#[test]
fn specialization_folds_static_sizes_and_flags() {
    let mut b = SdfgBuilder::new("static");
    b.static_symbol("NZ", Value::I64(3))
        .static_symbol("smooth", Value::I64(0))
        .static_symbol("w", Value::F64(0.5))
        .array("u", DType::F64, ["NZ"])
        .array("out", DType::F64, ["NZ"]);
    let a = b.state("scale", |s| {
        s.map("scale", &["k"], &["0:NZ"], |m| {
            m.tasklet("s", &[("x", "u[k]")], &[("y", "out[k]")], "y = w * x");
        });
    });
    let c = b.state("smooth", |s| {
        s.map("smooth", &["k"], &["1:NZ"], |m| {
            m.tasklet("s", &[("x", "u[k-1]")], &[("y", "out[k]")], "y = x");
        });
    });
    b.body(Block::seq([
        Block::State(a),
        Block::if_else("smooth != 0", Block::State(c), Block::empty()),
    ]));
    let s0 = b.build();
    let mut s = s0.clone();
    let ch = Specialize.run(&mut s);
    assert_eq!(s.validate(), Ok(()));
    assert_eq!(
        (ch.get("symbols_specialized"), ch.get("branches_folded")),
        (3, 1)
    );
    assert!(s.symbols.is_empty());
    assert_eq!(s.states.len(), 1, "the branch not taken is gone");
    assert_eq!(s.arrays["u"].shape(), [sdflow_ir::SymExpr::Int(3)]);
    let text = sdflow_ir::format::to_json(&s);
    assert!(text.contains("\"0:3\""), "{text}");
    assert!(text.contains("y = 0.5 * x"), "{text}");
    same_results(&s0, &s, &[]);
}

#[test]
fn pipelines_report_bisect_and_reject_unknown_passes() {
    let s0 = lap_of_lap();
    let mut s = s0.clone();
    let report = Pipeline::cpu().validate_each(true).run(&mut s).unwrap();
    assert!(report.fixed_point);
    assert_eq!(report.rounds, 2);
    let text = report.to_string();
    assert!(text.contains("map_fusion"), "{text}");
    assert!(text.contains("maps_fused_tiled=1"), "{text}");
    same_results(&s0, &s, &[("N", 8)]);

    // Stopping after the first three pass runs (inline_nested, specialize, dead_dataflow)
    // leaves two maps.
    let mut s = s0.clone();
    let r = Pipeline::cpu().stop_after(3).run(&mut s).unwrap();
    assert!(!r.fixed_point);
    assert_eq!(maps(&s), 2);
    // Disabling map fusion by name, too.
    let mut s = s0.clone();
    Pipeline::cpu()
        .disable("map_fusion")
        .unwrap()
        .run(&mut s)
        .unwrap();
    assert_eq!(maps(&s), 2);

    let Err(e) = Pipeline::from_names(&["specialize", "fuse_everything"]) else {
        panic!("an unknown pass was accepted")
    };
    assert!(matches!(e, TransformError::UnknownPass { .. }));
    assert_eq!(
        e.to_string(),
        "unknown pass 'fuse_everything'; the passes are: inline_nested, specialize, dead_dataflow, redundant_copy, state_fusion, copy_forwarding, map_fusion, sibling_fusion, row_fusion, local_unroll, move_into_if, loop_order, gpu_schedule, egraph, egraph_fast_math"
    );
    // The same input gives the same output, byte for byte.
    let (mut a, mut b) = (s0.clone(), s0.clone());
    Pipeline::cpu().run(&mut a).unwrap();
    Pipeline::cpu().run(&mut b).unwrap();
    assert_eq!(
        sdflow_ir::format::to_json(&a),
        sdflow_ir::format::to_json(&b)
    );
}

/// `tmp = u * u` feeds a nested SDFG whose body is `if flag != 0 { out = tmp + 1 } else
/// { out = 0 }`: the dataflow form of a conditional.
fn nested_branchy() -> Sdfg {
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
    let mut b = SdfgBuilder::new("nested_branchy");
    b.symbol("N", DType::I64)
        .symbol("flag", DType::I64)
        .array("u", DType::F64, ["N"])
        .array("out", DType::F64, ["N"])
        .transient("tmp", DType::F64, ["N"]);
    b.state("s", |s| {
        s.map("square", &["i"], &["0:N"], |m| {
            m.tasklet("sq", &[("x", "u[i]")], &[("y", "tmp[i]")], "y = x * x");
        });
        s.nested(
            inner,
            &[("n", "N"), ("f", "flag")],
            &[("c", "tmp[0:N]")],
            &[("o", "out[0:N]")],
        );
    });
    b.build()
}

#[test]
fn move_into_if_enters_a_nested_sdfg_with_an_if_body() {
    let s0 = nested_branchy();
    assert_eq!(s0.validate(), Ok(()));
    let mut s = s0.clone();
    let c = MoveIntoIf.run(&mut s);
    assert_eq!(s.validate(), Ok(()), "{}", sdflow_ir::format::to_json(&s));
    assert_eq!(c.get("nodes_moved"), 1);
    // Outside: only the nested SDFG is left, reading u directly; tmp is gone.
    assert_eq!(
        maps(&s),
        3,
        "the square map is now inside, with use and zero"
    );
    assert!(!s.arrays.contains_key("tmp"));
    let Node::Nested(ns) = s.states[0]
        .graph
        .node_ids()
        .into_iter()
        .map(|n| s.states[0].graph.node(n))
        .find(|n| matches!(n, Node::Nested(_)))
        .unwrap()
    else {
        unreachable!()
    };
    let inner = &ns.sdfg;
    let Block::If(i) = &inner.body else { panic!() };
    let then_states: Vec<&str> = i
        .then
        .states()
        .iter()
        .map(|id| inner.states[id.index()].name.as_str())
        .collect();
    assert_eq!(then_states, ["moved", "use"]);
    assert!(inner.arrays["tmp"].transient() && !inner.arrays["u"].transient());
    assert!(!inner.arrays.contains_key("c"));
    assert_eq!(ns.symbol_mapping["N"], sdflow_ir::SymExpr::sym("N"));
    for flag in [0, 1] {
        same_results(&s0, &s, &[("N", 6), ("flag", flag)]);
    }
    assert!(MoveIntoIf.run(&mut s).is_empty());
}

#[test]
fn fusion_never_lets_an_inner_map_capture_a_renamed_parameter() {
    // B's parameter j would become A's i, which B's inner map binds.
    let mut b = SdfgBuilder::new("capture");
    b.symbol("N", DType::I64)
        .array("u", DType::F64, ["N"])
        .array("v", DType::F64, ["N", "N"])
        .array("out", DType::F64, ["N"])
        .array("out2", DType::F64, ["N", "N"])
        .transient("T", DType::F64, ["N"]);
    b.state("s", |s| {
        s.map("A", &["i"], &["0:N"], |m| {
            m.tasklet("a", &[("x", "u[i]")], &[("y", "T[i]")], "y = x + 1.0");
        });
        s.map("B", &["j"], &["0:N"], |m| {
            m.tasklet("b", &[("x", "T[j]")], &[("y", "out[j]")], "y = 2.0 * x");
            m.map("inner", &["i"], &["0:N"], |m2| {
                m2.tasklet("c", &[("x", "v[j, i]")], &[("y", "out2[j, i]")], "y = x");
            });
        });
    });
    let s0 = b.build();
    let mut s = s0.clone();
    let c = MapFusion::default().run(&mut s);
    assert!(c.is_empty(), "{c}");
    assert_eq!(s.validate(), Ok(()));
    same_results(&s0, &s, &[("N", 4)]);
}

#[test]
fn redundant_copy_keeps_a_transient_written_through_a_table() {
    // The map's summary says T[0:N] but the body writes two elements through idx.
    let mut b = SdfgBuilder::new("sparse");
    b.symbol("N", DType::I64)
        .array("idx", DType::I64, [2, 1])
        .array("out", DType::F64, ["N"])
        .transient("T", DType::F64, ["N"]);
    b.state("s", |s| {
        s.map("m", &["i"], &["0:2"], |m| {
            m.tasklet("t", &[], &[("o", "T[idx[i, 0]]")], "o = 1.0");
        });
        s.copy("T[0:N]", "out[0:N]");
    });
    let s0 = b.build();
    let mut s = s0.clone();
    assert!(RedundantCopy.run(&mut s).is_empty());
    assert!(s.arrays.contains_key("T"));
}

#[test]
fn a_pass_whose_input_did_not_change_is_not_run_again() {
    let s0 = lap_of_lap();
    let mut s = s0.clone();
    let report = Pipeline::cpu().validate_each(true).run(&mut s).unwrap();
    let runs: Vec<(&str, usize)> = report.passes.iter().map(|p| (p.name, p.runs)).collect();
    // Map fusion changes the program in round 1; round 2 re-runs the passes before it and
    // map fusion itself (a change can enable more fusions), and skips the passes after
    // it, which changed nothing on the program as it is.
    assert!(report.fixed_point);
    assert_eq!(report.rounds, 2);
    assert_eq!(
        runs,
        [
            ("inline_nested", 2),
            ("specialize", 2),
            ("dead_dataflow", 2),
            ("redundant_copy", 2),
            ("state_fusion", 2),
            ("copy_forwarding", 2),
            ("map_fusion", 2),
            ("sibling_fusion", 1),
            ("row_fusion", 1),
            ("local_unroll", 1),
            ("egraph", 1),
            ("move_into_if", 1),
            ("loop_order", 1)
        ]
    );
    same_results(&s0, &s, &[("N", 8)]);
    // Skipping changes nothing: one more full run of every pass finds nothing to do.
    let again = Pipeline::cpu().run(&mut s.clone()).unwrap();
    assert_eq!(again.rounds, 1);
    assert!(again.passes.iter().all(|p| p.changes.is_empty()));
}

/// Fast math asked of a pipeline that disables its e-graph pass is an error, and a
/// disabled pass's replacement stays disabled: with `fast_math = true` and
/// `disable = ["egraph"]` the fast-math e-graph once ran in the disabled pass's place.
#[test]
fn fast_math_never_runs_a_disabled_egraph_pass() {
    let mut b = SdfgBuilder::new("fm");
    b.symbol("N", DType::I64)
        .array("x", DType::F64, ["N"])
        .array("y", DType::F64, ["N"])
        .array("out", DType::F64, ["N"]);
    b.state("s", |st| {
        st.map("m", &["i"], &["0:N"], |m| {
            m.tasklet(
                "t",
                &[("a", "x[i]"), ("b", "y[i]")],
                &[("o", "out[i]")],
                "o = (a + b) + a * b",
            );
        });
    });
    let s = b.build();
    let run = |p: Pipeline| {
        let mut o = s.clone();
        p.validate_each(true).run(&mut o).unwrap();
        o
    };
    let without = run(Pipeline::cpu().disable("egraph").unwrap());
    let fast = run(Pipeline::cpu().fast_math().unwrap());
    assert!(without != fast, "fast math changes this program");
    let replaced = Pipeline::cpu()
        .disable("egraph")
        .unwrap()
        .replace("egraph", Box::new(EGraphPass::fast_math()))
        .unwrap();
    assert!(!replaced.is_enabled("egraph_fast_math"));
    assert!(run(replaced) == without, "the disabled pass ran");

    let e = Pipeline::cpu()
        .disable("egraph")
        .unwrap()
        .fast_math()
        .err()
        .unwrap();
    assert_eq!(
        e.to_string(),
        "fast math needs the 'egraph' pass, which this pipeline disables; the passes are: \
         inline_nested, specialize, dead_dataflow, redundant_copy, state_fusion, copy_forwarding, \
         map_fusion, sibling_fusion, row_fusion, local_unroll, egraph, move_into_if, loop_order"
    );
    let e = Pipeline::from_names(&["map_fusion"])
        .unwrap()
        .fast_math()
        .err()
        .unwrap();
    assert_eq!(
        e.to_string(),
        "fast math needs the 'egraph' pass, which this pipeline does not have; the passes \
         are: map_fusion"
    );
    let p = Pipeline::cpu().fast_math().unwrap();
    assert!(p.is_enabled("egraph_fast_math") && !p.names().contains(&"egraph"));
}

/// A map calling `t += 0.5 * c` at every point, the callee written as DaCe's front end
/// writes it: the product into a transient scalar in one state, the sum under a
/// resolution in the next. `read_modify_write`: the callee instead reads its output
/// connector and writes `t = t + p` with no resolution (bound both ways).
fn accumulating_callee(read_modify_write: bool) -> Sdfg {
    let mut inner = SdfgBuilder::new("acc");
    inner
        .scalar("c", DType::F64)
        .scalar("t", DType::F64)
        .transient_scalar("p", DType::F64);
    inner.state("mul", |s| {
        s.tasklet("mul", &[("x", "c")], &[("o", "p")], "o = 0.5 * x");
    });
    inner.state("add", |s| {
        if read_modify_write {
            s.tasklet("add", &[("x", "p"), ("y", "t")], &[("o", "t")], "o = x + y");
        } else {
            s.tasklet("add", &[("x", "p")], &[("o", "t (wcr: sum)")], "o = x");
        }
    });
    let inner = inner.build();
    let mut b = SdfgBuilder::new("total");
    b.symbol("N", DType::I64)
        .array("a", DType::F64, ["N"])
        .array("s", DType::F64, ["1"]);
    b.state("sum", |st| {
        st.map("m", &["i"], &["0:N"], |m| {
            if read_modify_write {
                m.nested(
                    inner,
                    &[],
                    &[("c", "a[i]"), ("t", "s[0]")],
                    &[("t", "s[0]")],
                );
            } else {
                m.nested(inner, &[], &[("c", "a[i]")], &[("t", "s[0]")]);
            }
        });
    });
    b.build()
}

#[test]
fn inline_nested_splices_a_straight_line_accumulating_callee_into_its_map() {
    use sdflow_transforms::InlineNested;
    let s = accumulating_callee(false);
    assert_eq!(s.validate(), Ok(()));
    let mut t = s.clone();
    let ch = InlineNested.run(&mut t);
    assert_eq!(ch.get("nested_inlined_in_maps"), 1, "{ch:?}");
    assert_eq!(t.validate(), Ok(()));
    assert_eq!(t.stats().nested, 0);
    // The sum is now a resolved write to the caller's container, in the map body.
    let Node::Map(m) = t.states[0]
        .graph
        .node_ids()
        .into_iter()
        .map(|n| t.states[0].graph.node(n).clone())
        .find(|n| matches!(n, Node::Map(_)))
        .unwrap()
    else {
        unreachable!()
    };
    let resolved: Vec<String> = m
        .body
        .edge_ids()
        .into_iter()
        .map(|e| m.body.edge(e).memlet.clone())
        .filter(|mm| mm.wcr.is_some())
        .map(|mm| mm.to_string())
        .collect();
    assert_eq!(resolved, vec!["s[0] (wcr: sum)".to_string()]);
    same_results(&s, &t, &[("N", 37)]);
    // Read and written through one connector: kept (two points at once would lose
    // updates once the map runs in parallel).
    let s = accumulating_callee(true);
    assert_eq!(s.validate(), Ok(()));
    let mut t = s.clone();
    let ch = InlineNested.run(&mut t);
    assert_eq!(ch.get("nested_inlined_in_maps"), 0, "{ch:?}");
    assert_eq!(t.stats().nested, 1);
}

/// A map over `0:N` whose body calls `inner` with `a = x[i]`, `b = y[i]`, `o = out[i]`.
fn calling_map(inner: Sdfg) -> Sdfg {
    let mut b = SdfgBuilder::new("caller");
    b.symbol("N", DType::I64)
        .array("x", DType::F64, ["N"])
        .array("y", DType::F64, ["N"])
        .array("out", DType::F64, ["N"]);
    b.state("s", |st| {
        st.map("m", &["i"], &["0:N"], |m| {
            m.nested(
                inner,
                &[],
                &[("a", "x[i]"), ("b", "y[i]")],
                &[("o", "out[i]")],
            );
        });
    });
    b.build()
}

/// The body of the map of `s`'s first state.
fn map_body(s: &Sdfg) -> sdflow_ir::Dataflow {
    let df = &s.states[0].graph;
    df.node_ids()
        .into_iter()
        .find_map(|n| match df.node(n) {
            Node::Map(m) => Some(m.body.clone()),
            _ => None,
        })
        .expect("the map stays")
}

/// The callee a map body of `s` still calls.
fn map_callee(s: &Sdfg) -> Option<Sdfg> {
    let map = map_body(s);
    map.node_ids().into_iter().find_map(|n| match map.node(n) {
        Node::Nested(ns) => Some((*ns.sdfg).clone()),
        _ => None,
    })
}

/// GT4Py's `if_stmt` shape at every point of a map — `o = a > b ? a * 2 : a + b`, the
/// condition in a state of its own, the `then` value through a transient copied into
/// the output — becomes both branches and a select in the map body: no call stays, and
/// the results are the same bit for bit. So does the negated integer condition.
#[test]
fn a_branching_callee_in_a_map_becomes_a_select() {
    use sdflow_transforms::InlineNested;
    for kind in [IfStmtKind::Plain, IfStmtKind::NegatedInt] {
        let s0 = calling_map(if_stmt_callee_of("if_stmt", DType::F64, kind));
        assert_eq!(s0.validate(), Ok(()));
        let mut s = s0.clone();
        let ch = InlineNested.run(&mut s);
        assert_eq!(ch.get("nested_ifs_selected"), 1, "{kind:?}: {ch:?}");
        assert_eq!(ch.get("nested_inlined_in_maps"), 1, "{kind:?}: {ch:?}");
        assert_eq!(s.validate(), Ok(()));
        assert!(map_callee(&s).is_none(), "{kind:?}");
        let body = map_body(&s);
        let selects: Vec<String> = body
            .node_ids()
            .into_iter()
            .filter_map(|n| match body.node(n) {
                Node::Tasklet(t) if t.name.starts_with("select_") => Some(t.name.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(selects, ["select_o"], "{kind:?}");
        same_results(&s0, &s, &[("N", 23)]);
        // The whole pipeline from there: one map, no call, the same results.
        let mut p = s0.clone();
        let report = Pipeline::cpu().validate_each(true).run(&mut p).unwrap();
        assert_eq!(p.stats().nested, 0, "{report}");
        assert_eq!(report.callees, 0, "{report}");
        same_results(&s0, &p, &[("N", 23)]);
    }
}

/// A branch that would cost too much where it is not taken (`exp`), one that divides
/// integers (which could fail there), and an output written in one branch only (the
/// caller's value where the other runs) keep the call; the pipeline then optimizes the
/// callee as a program of its own: the unread value goes, the results stay bit for bit.
#[test]
fn branching_callees_that_cannot_run_both_branches_stay_calls() {
    use sdflow_transforms::InlineNested;
    for kind in [
        IfStmtKind::Costly,
        IfStmtKind::IntDivision,
        IfStmtKind::OneBranch,
    ] {
        let s0 = calling_map(if_stmt_callee_of("if_stmt", DType::F64, kind));
        assert_eq!(s0.validate(), Ok(()));
        let mut s = s0.clone();
        let ch = InlineNested.run(&mut s);
        assert_eq!(ch.get("nested_ifs_selected"), 0, "{kind:?}: {ch:?}");
        assert_eq!(s.stats().nested, 1, "{kind:?}");
        let tasklets = |s: &Sdfg| s.stats().tasklets;
        assert_eq!(tasklets(&map_callee(&s0).unwrap()), 4);
        let mut s = s0.clone();
        let report = Pipeline::cpu().validate_each(true).run(&mut s).unwrap();
        assert_eq!(s.validate(), Ok(()));
        assert_eq!(report.callees, 1, "{kind:?}: {report}");
        assert!(report.fixed_point);
        let inner = map_callee(&s).expect("the call stays");
        assert!(!inner.arrays.contains_key("unused"), "{report}");
        // The `else` branch's own value goes too where nothing reads it.
        let kept = if kind == IfStmtKind::OneBranch { 2 } else { 3 };
        assert_eq!(tasklets(&inner), kept, "{kind:?}: {report}");
        same_results(&s0, &s, &[("N", 7)]);
    }
}

/// `u[i, j] = u[i, j] * 2 + v[i, j]` over column-major arrays, listed `(i, j)`; with
/// `offset`, the update reads `u[i, j + 1]` instead (not a point's own element).
fn column_major_update(offset: bool) -> Sdfg {
    let mut b = SdfgBuilder::new("update");
    b.symbol("N", DType::I64)
        .symbol("M", DType::I64)
        .array("u", DType::F64, ["N", "M + 1"])
        .array("v", DType::F64, ["N", "M"]);
    let read = if offset { "u[i, j + 1]" } else { "u[i, j]" };
    b.state("s", |st| {
        st.map("m", &["i", "j"], &["0:N", "0:M"], |m| {
            m.tasklet(
                "t",
                &[("x", read), ("y", "v[i, j]")],
                &[("o", "u[i, j]")],
                "o = x * 2.0 + y",
            );
        });
    });
    let mut s = b.build();
    for a in ["u", "v"] {
        if let Some(DataDesc::Array(a)) = s.arrays.get_mut(a) {
            a.strides = vec![SymExpr::Int(1), SymExpr::sym("N")];
        }
    }
    s
}

fn first_map(s: &Sdfg) -> sdflow_ir::MapScope {
    s.states[0]
        .graph
        .node_ids()
        .into_iter()
        .find_map(|n| match s.states[0].graph.node(n) {
            Node::Map(m) => Some(m.clone()),
            _ => None,
        })
        .expect("a map")
}

#[test]
fn loop_order_reorders_an_update_in_place_but_not_a_read_of_another_point() {
    let s0 = column_major_update(false);
    let mut s = s0.clone();
    let c = sdflow_transforms::LoopOrder.run(&mut s);
    assert_eq!(c.get("loops_reordered"), 1);
    assert_eq!(c.get("loops_reordered_in_place"), 1);
    assert_eq!(first_map(&s).params, ["j", "i"]);
    same_results(&s0, &s, &[("N", 5), ("M", 4)]);
    // Reading the neighbour it does not write: left alone.
    let mut s = column_major_update(true);
    assert!(sdflow_transforms::LoopOrder.run(&mut s).is_empty());
    assert_eq!(first_map(&s).params, ["i", "j"]);
}

/// `out[e, k] = sum of x[tab[e, n], k]` for `n` in `0..4`, every array column-major,
/// listed `(e, k)`: the edges would be contiguous, but each gather through the table
/// then reads its entry and checks it at every point; with the levels innermost the
/// entries are read once per column.
#[test]
fn loop_order_keeps_the_levels_innermost_where_a_map_gathers() {
    let mut b = SdfgBuilder::new("gather");
    b.symbol("E", DType::I64)
        .symbol("V", DType::I64)
        .symbol("K", DType::I64)
        .array("x", DType::F64, ["V", "K"])
        .array("tab", DType::I32, ["E", "4"])
        .array("out", DType::F64, ["E", "K"]);
    b.state("s", |st| {
        st.map("m", &["e", "k"], &["0:E", "0:K"], |m| {
            m.tasklet(
                "t",
                &[
                    ("a", "x[tab[e, 0], k]"),
                    ("b", "x[tab[e, 1], k]"),
                    ("c", "x[tab[e, 2], k]"),
                    ("d", "x[tab[e, 3], k]"),
                ],
                &[("o", "out[e, k]")],
                "o = a + b + c + d",
            );
        });
    });
    let mut s = b.build();
    for (a, first) in [("x", "V"), ("tab", "E"), ("out", "E")] {
        if let Some(DataDesc::Array(a)) = s.arrays.get_mut(a) {
            a.strides = vec![SymExpr::Int(1), SymExpr::sym(first)];
        }
    }
    assert_eq!(s.validate(), Ok(()));
    assert!(sdflow_transforms::LoopOrder.run(&mut s).is_empty());
    assert_eq!(first_map(&s).params, ["e", "k"]);
    // Without the gathers (`x` read at `[e, k]`), the edges go innermost.
    let mut b = SdfgBuilder::new("plain");
    b.symbol("E", DType::I64)
        .symbol("K", DType::I64)
        .array("x", DType::F64, ["E", "K"])
        .array("out", DType::F64, ["E", "K"]);
    b.state("s", |st| {
        st.map("m", &["e", "k"], &["0:E", "0:K"], |m| {
            m.tasklet(
                "t",
                &[("a", "x[e, k]")],
                &[("o", "out[e, k]")],
                "o = a * 2.0",
            );
        });
    });
    let mut s = b.build();
    for a in ["x", "out"] {
        if let Some(DataDesc::Array(a)) = s.arrays.get_mut(a) {
            a.strides = vec![SymExpr::Int(1), SymExpr::sym("E")];
        }
    }
    assert_eq!(
        sdflow_transforms::LoopOrder
            .run(&mut s)
            .get("loops_reordered"),
        1
    );
    assert_eq!(first_map(&s).params, ["k", "e"]);
}

/// GT4Py's dynamic vertical offsets with column-major fields: `out[c, k] = x[tab[c, 0],
/// kk] + x[tab[c, 1], kk]`, `kk = k + off[c, k]` computed at each point, the table's
/// strides passed at the call (`tab_layout`: `None`) or known. The computed level is a
/// gather whichever loop is innermost, and the table a gather's index whose own layout
/// does not decide the fields': the cells, contiguous in every field, go innermost. With
/// the level read at `k` itself, the levels stay innermost (the entries read once per
/// column outweigh contiguous loads, as above).
#[test]
fn loop_order_weighs_a_computed_level_as_a_gather_and_tables_as_indices() {
    fn program(computed: bool, tab_strides: Option<[i64; 2]>) -> Sdfg {
        let mut b = SdfgBuilder::new("computed_level");
        b.symbol("C", DType::I64)
            .symbol("K", DType::I64)
            .symbol("T0", DType::I64)
            .symbol("T1", DType::I64)
            .array("x", DType::F64, ["C", "K"])
            .array("off", DType::I32, ["C", "K"])
            .array("tab", DType::I32, ["C", "2"])
            .array("out", DType::F64, ["C", "K"])
            .transient_scalar("kk", DType::I32);
        let level = if computed { "kk[]" } else { "k" };
        let (a, bb) = (
            format!("x[tab[c, 0], {level}]"),
            format!("x[tab[c, 1], {level}]"),
        );
        b.state("s", |st| {
            st.map("m", &["c", "k"], &["0:C", "0:K"], |m| {
                if computed {
                    m.tasklet(
                        "level",
                        &[("o", "off[c, k]")],
                        &[("l", "kk")],
                        "l = i32(k) + o",
                    );
                }
                // The entry itself is read too, as GT4Py's neighbour tasklets do.
                let mut inputs = vec![("a", a.as_str()), ("b", bb.as_str()), ("i", "tab[c, 0]")];
                if computed {
                    inputs.push(("l", "kk"));
                }
                m.tasklet("g", &inputs, &[("o", "out[c, k]")], "o = a * 0.5 + b");
            });
        });
        let mut s = b.build();
        for f in ["x", "off", "out"] {
            if let Some(DataDesc::Array(a)) = s.arrays.get_mut(f) {
                a.strides = vec![SymExpr::Int(1), SymExpr::sym("C")];
            }
        }
        if let Some(DataDesc::Array(a)) = s.arrays.get_mut("tab") {
            a.strides = match tab_strides {
                Some([s0, s1]) => vec![SymExpr::Int(s0), SymExpr::Int(s1)],
                None => vec![SymExpr::sym("T0"), SymExpr::sym("T1")],
            };
        }
        assert_eq!(s.validate(), Ok(()));
        s
    }
    for tab in [None, Some([2, 1]), Some([1, 1 << 20])] {
        let mut s = program(true, tab);
        let ch = sdflow_transforms::LoopOrder.run(&mut s);
        assert_eq!(ch.get("loops_reordered"), 1, "table strides {tab:?}");
        assert_eq!(first_map(&s).params, ["k", "c"], "table strides {tab:?}");
        let mut s = program(false, tab);
        assert!(
            sdflow_transforms::LoopOrder.run(&mut s).is_empty(),
            "table strides {tab:?}"
        );
        assert_eq!(first_map(&s).params, ["c", "k"]);
    }
    // A field whose layout is known only at the call still leaves the map alone.
    let mut s = program(true, None);
    if let Some(DataDesc::Array(a)) = s.arrays.get_mut("off") {
        a.strides = vec![SymExpr::sym("T0"), SymExpr::sym("T1")];
    }
    assert!(sdflow_transforms::LoopOrder.run(&mut s).is_empty());
    assert_eq!(first_map(&s).params, ["c", "k"]);
}

/// GT4Py's shape: fields with stride symbols, a transient between two maps.
fn strided_fields() -> Sdfg {
    let mut b = SdfgBuilder::new("fields");
    b.symbol("N", DType::I64).symbol("M", DType::I64);
    for s in ["SU0", "SU1", "SO0", "SO1"] {
        b.symbol(s, DType::I64);
    }
    b.array("u", DType::F64, ["N", "M"])
        .array("out", DType::F64, ["N", "M"])
        .transient("t", DType::F64, ["N", "M"]);
    b.state("s", |st| {
        st.map("a", &["i", "j"], &["0:N", "0:M"], |m| {
            m.tasklet("p", &[("x", "u[i, j]")], &[("o", "t[i, j]")], "o = x * 2.0");
        });
        st.map("b", &["i", "j"], &["0:N", "0:M"], |m| {
            m.tasklet(
                "q",
                &[("x", "t[i, j]")],
                &[("o", "out[i, j]")],
                "o = x + 1.0",
            );
        });
    });
    let mut s = b.build();
    for (name, a, c) in [("u", "SU0", "SU1"), ("out", "SO0", "SO1")] {
        if let Some(DataDesc::Array(d)) = s.arrays.get_mut(name) {
            d.strides = vec![SymExpr::sym(a), SymExpr::sym(c)];
        }
    }
    s
}

#[test]
fn a_layout_specialized_column_major_fixes_unit_strides_and_lays_out_the_transients() {
    use sdflow_transforms::{LayoutError, Order, specialize_unit_strides, unit_dims_in_order};
    let s0 = strided_fields();
    let mut s = s0.clone();
    let unit = unit_dims_in_order(&s, Order::ColumnMajor);
    assert_eq!(unit, [("out".to_string(), 0), ("u".to_string(), 0)].into());
    let r = specialize_unit_strides(&mut s, &unit).unwrap();
    assert_eq!(r.strides_specialized, ["SO0", "SU0"]);
    assert!(r.column_major);
    assert_eq!(r.transients_relaid, ["t"]);
    assert!(r.transients_kept.is_empty());
    assert_eq!(s.symbols["SU0"].value, Some(Value::I64(1)));
    let t = s.arrays["t"].as_array().unwrap();
    assert_eq!(t.strides, vec![SymExpr::Int(1), SymExpr::sym("N")]);
    // The interpreter indexes logically: the same results; the pipeline then walks the
    // columns.
    let mut opt = s.clone();
    sdflow_transforms::Pipeline::cpu().run(&mut opt).unwrap();
    assert_eq!(first_map(&opt).params, ["j", "i"]);
    same_results(&s0, &opt, &[("N", 5), ("M", 4), ("SU1", 5), ("SO1", 5)]);
    // Row-major: the last strides; the transients stay.
    let mut s = s0.clone();
    let r = specialize_unit_strides(&mut s, &unit_dims_in_order(&s0, Order::RowMajor)).unwrap();
    assert_eq!(r.strides_specialized, ["SO1", "SU1"]);
    assert!(!r.column_major && r.transients_relaid.is_empty());
    // What cannot be specialized says what and where.
    let err = |unit: &[(&str, usize)]| {
        let unit = unit.iter().map(|(k, d)| (k.to_string(), *d)).collect();
        specialize_unit_strides(&mut s0.clone(), &unit).unwrap_err()
    };
    assert_eq!(
        err(&[("t", 0)]).to_string(),
        "'t' is not an array argument of program 'fields'"
    );
    assert_eq!(
        err(&[("u", 2)]).to_string(),
        "'u' has 2 dimension(s); it cannot be contiguous in dimension 2"
    );
    let mut fixed = s0.clone();
    if let Some(DataDesc::Array(d)) = fixed.arrays.get_mut("u") {
        d.strides = vec![SymExpr::sym("M"), SymExpr::Int(1)];
    }
    let unit = [("u".to_string(), 0)].into();
    assert_eq!(
        specialize_unit_strides(&mut fixed, &unit).unwrap_err(),
        LayoutError::NotUnit {
            name: "u".into(),
            dim: 0,
            stride: "M".into()
        }
    );
    assert_eq!(
        specialize_unit_strides(&mut fixed, &unit)
            .unwrap_err()
            .to_string(),
        "'u' declares stride 'M' in dimension 0: it cannot be 1 there (only a stride that is 1, or a runtime symbol no shape or other stride uses, can)"
    );
    assert_eq!(
        "x".parse::<Order>().unwrap_err(),
        "layout 'x': expected 'C' (row-major) or 'F' (column-major)"
    );
    // The contiguous dimension of arrays a caller has.
    let dims = sdflow_transforms::unit_dims_of([
        ("u", &[5usize, 4][..], &[1isize, 5][..]),
        ("out", &[5, 4][..], &[4, 1][..]),
        ("one", &[1, 1][..], &[1, 1][..]),
    ]);
    assert_eq!(dims, [("out".to_string(), 1), ("u".to_string(), 0)].into());
}

/// GT4Py's vertical scan writing a transient that is then copied whole into `out`: at
/// every row `i` of `0:N` a callee loops over the `M` levels of `t[i, 0:M]` (upwards, or
/// `down`), carrying `s`, and writes each level — by a copy of the scalar the iteration
/// computed (`by_copy`, as GT4Py does) or from the tasklet. `from` is where the upward
/// loop starts; with `guarded` the loop runs under a condition on `f`.
fn scan_through(down: bool, by_copy: bool, from: i64, guarded: bool) -> Sdfg {
    scan_through_reading(down, by_copy, from, guarded, false)
}

/// [`scan_through`]; with `reads_back`, each iteration also reads the level it writes
/// (`o[k] = c[k] + s / 2 + o[k]`: the callee sees what the caller's container held).
fn scan_through_reading(
    down: bool,
    by_copy: bool,
    from: i64,
    guarded: bool,
    reads_back: bool,
) -> Sdfg {
    let mut c = SdfgBuilder::new("column");
    c.symbol("n", DType::I64)
        .symbol("k", DType::I64)
        .symbol("f", DType::I64)
        .array("c", DType::F64, ["n"])
        .array("o", DType::F64, ["n"])
        .transient_scalar("s", DType::F64)
        .transient_scalar("r", DType::F64);
    let init = c.state("init", |s| {
        s.tasklet("init", &[], &[("s", "s")], "s = 0.5");
    });
    let step = c.state("step", |s| {
        if reads_back {
            s.tasklet(
                "f",
                &[("a", "c[k]"), ("s", "s"), ("b", "o[k]")],
                &[("o", "r")],
                "o = a + s * 0.5 + b",
            );
            s.copy("r", "o[k]");
        } else if by_copy {
            s.tasklet(
                "f",
                &[("a", "c[k]"), ("s", "s")],
                &[("o", "r")],
                "o = a + s * 0.5",
            );
            s.copy("r", "o[k]");
        } else {
            s.tasklet(
                "f",
                &[("a", "c[k]"), ("s", "s")],
                &[("o", "o[k]"), ("u", "r")],
                "v = a + s * 0.5; o = v; u = v",
            );
        }
    });
    let carry = c.state("carry", |s| {
        s.copy("r", "s");
    });
    let body = Block::seq([Block::State(step), Block::State(carry)]);
    let levels = if down {
        Block::for_loop("k", "n - 1", "k >= 0", "k - 1", body)
    } else {
        Block::for_loop("k", from, "k < n", "k + 1", body)
    };
    let levels = if guarded {
        Block::if_else("f > 0", levels, Block::empty())
    } else {
        levels
    };
    c.body(Block::seq([Block::State(init), levels]));
    let callee = c.build();
    let mut b = SdfgBuilder::new("scan");
    b.symbol("N", DType::I64)
        .symbol("M", DType::I64)
        .symbol("F", DType::I64)
        .array("u", DType::F64, ["N", "M"])
        .array("out", DType::F64, ["N", "M"])
        .transient("t", DType::F64, ["N", "M"]);
    b.state("s", |s| {
        s.map("columns", &["i"], &["0:N"], |m| {
            m.nested(
                callee,
                &[("n", "M"), ("f", "F")],
                &[("c", "u[i, 0:M]")],
                &[("o", "t[i, 0:M]")],
            );
        });
        s.copy("t[0:N, 0:M]", "out[0:N, 0:M]");
    });
    let s = b.build();
    assert_eq!(s.validate(), Ok(()));
    s
}

/// A scan's transient copied whole into the output is the output: every level of every
/// column is written by the callee's loop, so the callee writes `out` directly. Not where
/// the loop skips a level or may not run at all: `out` would keep its old values there,
/// where the copy brought the transient's; nor where the callee reads its column (it
/// starts as the caller's container).
#[test]
fn a_scans_transient_copied_whole_becomes_its_destination() {
    let cases: &[&[(&str, i64)]] = &[
        &[("N", 3), ("M", 4), ("F", 1)],
        &[("N", 2), ("M", 0), ("F", 0)],
    ];
    for (down, by_copy) in [(false, true), (true, true), (false, false), (true, false)] {
        let s0 = scan_through(down, by_copy, 0, false);
        let mut s = s0.clone();
        let c = RedundantCopy.run(&mut s);
        assert_eq!(s.validate(), Ok(()));
        assert_eq!(c.get("copies_removed"), 1, "down {down}, by copy {by_copy}");
        assert_eq!(c.get("copies_removed_through_callees"), 1);
        assert!(!s.arrays.contains_key("t"));
        for syms in cases {
            same_results(&s0, &s, syms);
        }
    }
    let skips = scan_through(false, true, 1, false);
    refused(&skips, "copies_removed", "the loop skips level 0", cases);
    let late = scan_through(false, false, 1, false);
    refused(&late, "copies_removed", "the loop skips level 0", cases);
    let guarded = scan_through(false, true, 0, true);
    let with_f0: &[&[(&str, i64)]] = &[&[("N", 3), ("M", 4), ("F", 0)]];
    refused(&guarded, "copies_removed", "the loop may not run", with_f0);
    let reads_back = scan_through_reading(false, true, 0, false, true);
    refused(
        &reads_back,
        "copies_removed",
        "the callee reads its column",
        cases,
    );
}
