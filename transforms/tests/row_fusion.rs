//! Row fusion on GT4Py's damping-layer shape: a field written over the interior rows,
//! its boundary rows copied in states of their own, and a band of its levels updated in
//! place over the interior. The update moves up across the copies and runs inside the
//! interior's map, row by row; every shape that breaks one of the rule's conditions is
//! left as it is. Results are compared with the interpreter's on the original program,
//! at sizes where ranges are empty or clamped too.

use std::collections::BTreeMap;

use sdflow_ir::parse::parse_subset;
use sdflow_ir::testkit::assert_same_results;
use sdflow_ir::{Block, DType, Dataflow, Memlet, Node, Sdfg, SdfgBuilder, Value};
use sdflow_transforms::{Pass, Pipeline, RowFusion};

/// What a variant of [`damping`] changes, if anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// Nothing: the update fuses.
    Plain,
    /// A state between the copies and the update reads the field.
    ReadBetween,
    /// A copy overlaps the interior rows (the update may not move above it).
    Overlap,
    /// The update also reads the field one row further on.
    NextRow,
    /// The update runs over all rows, not the interior's.
    OtherRows,
    /// The interior's map starts at level 1 at least, the update's band at level `s`.
    OutsideBand,
    /// The interior's map reads the field the update writes.
    ReadByProducer,
    /// The update reads `out`, which the interior's map reads and a map after it in the
    /// same state writes: the two would read it at different times in one map.
    ReadThenWritten,
    /// The first copy moves row 0 of the field into row 1, an interior row (a copy
    /// within one container: both its subsets are touched).
    CopyWithin,
}

/// `w = 2 u` over rows `1:N-1` and levels `s:K`, rows `0:1` and `N-1:N` copied from `u`
/// in states of their own, then `w += c[k] · u` over rows `1:N-1` and levels
/// `max(1, s):min(r, K)` (GT4Py's bounds: the band within the levels whatever the
/// symbols).
fn damping(shape: Shape) -> Sdfg {
    let mut b = SdfgBuilder::new("damping");
    b.symbol("N", DType::I64)
        .symbol("K", DType::I64)
        .symbol("r", DType::I64)
        .symbol("s", DType::I64)
        .array("u", DType::F64, ["N", "K"])
        .array("c", DType::F64, ["K"])
        .array("w", DType::F64, ["N", "K"])
        .array("out", DType::F64, ["N", "K"]);
    let interior = "min(N, 1):max(min(N, 1), N - 1)";
    let levels = if shape == Shape::OutsideBand {
        "max(1, s):K"
    } else {
        "s:K"
    };
    let a = b.state("a", |s| {
        s.map("a", &["i", "k"], &[interior, levels], |m| {
            let inputs: &[(&str, &str)] = match shape {
                Shape::ReadByProducer => &[("x", "u[i, k]"), ("o", "w[i, k]")],
                Shape::ReadThenWritten => &[("x", "u[i, k]"), ("o", "out[i, k]")],
                _ => &[("x", "u[i, k]")],
            };
            let code = match shape {
                Shape::ReadByProducer | Shape::ReadThenWritten => "y = 2.0 * x + o",
                _ => "y = 2.0 * x",
            };
            m.tasklet("a", inputs, &[("y", "w[i, k]")], code);
        });
        if shape == Shape::ReadThenWritten {
            s.map("later", &["i", "k"], &["0:N", "0:K"], |m| {
                m.tasklet(
                    "later",
                    &[("x", "u[i, k]")],
                    &[("y", "out[i, k]")],
                    "y = 3.0 * x",
                );
            });
        }
    });
    let low = if shape == Shape::Overlap {
        "0:min(N, 2)"
    } else {
        "0:min(N, 1)"
    };
    let z0 = b.state("z0", |s| {
        s.copy(&format!("u[{low}, 0:K]"), &format!("w[{low}, 0:K]"));
    });
    let z1 = b.state("z1", |s| {
        s.copy(
            "u[max(min(N, 1), N - 1):N, 0:K]",
            "w[max(min(N, 1), N - 1):N, 0:K]",
        );
    });
    let rows = if shape == Shape::OtherRows {
        "0:N"
    } else {
        interior
    };
    let band = if shape == Shape::OutsideBand {
        "s:min(r, K)"
    } else {
        "max(1, s):min(r, K)"
    };
    let upd = b.state("upd", |s| {
        s.map("upd", &["p", "q"], &[rows, band], |m| {
            let x = if shape == Shape::ReadThenWritten {
                "out[p, q]"
            } else {
                "u[p, q]"
            };
            let mut inputs = vec![("x", x), ("f", "c[q]"), ("o", "w[p, q]")];
            let mut code = "y = o + f * x".to_string();
            if shape == Shape::NextRow {
                // One row further on, clamped into the grid.
                inputs.push(("n", "w[min(p + 1, N - 1), q]"));
                code = "y = o + f * x + 0.5 * n".to_string();
            }
            if shape == Shape::NextRow {
                m.tasklet("upd", &inputs, &[("y", "out[p, q]")], &code);
            } else {
                m.tasklet("upd", &inputs, &[("y", "w[p, q]")], &code);
            }
        });
    });
    let mut blocks = vec![Block::State(a), Block::State(z0), Block::State(z1)];
    if shape == Shape::ReadBetween {
        blocks.push(Block::State(b.state("peek", |s| {
            s.copy("w[0:N, 0:K]", "out[0:N, 0:K]");
        })));
    }
    blocks.push(Block::State(upd));
    b.body(Block::seq(blocks));
    let mut sdfg = b.build();
    if shape == Shape::CopyWithin {
        // Two access nodes of `w`, one edge: row 0 read (apart from the update's rows
        // whatever the symbols), row 1 written (where there are three rows).
        let mut g = Dataflow::new();
        let (from, to) = (g.add_access("w"), g.add_access("w"));
        let mut m = Memlet::new(
            "w",
            parse_subset("0:min(min(N, 1), max(0, N - 2)), 0:K").unwrap(),
        );
        m.other_subset =
            Some(parse_subset("min(N, 1):min(N, 1) + min(min(N, 1), max(0, N - 2)), 0:K").unwrap());
        g.add_edge(from, None, to, None, m);
        sdfg.states[z0.index()].graph = g;
    }
    sdfg
}

/// Symbol values: the usual size, sizes where the interior or the band is empty or
/// clamped, and a band longer than the levels.
const SIZES: [[(&str, i64); 4]; 7] = [
    [("N", 7), ("K", 5), ("r", 3), ("s", 0)],
    [("N", 7), ("K", 5), ("r", 9), ("s", 0)],
    [("N", 7), ("K", 5), ("r", 4), ("s", 2)],
    [("N", 2), ("K", 4), ("r", 2), ("s", 0)],
    [("N", 1), ("K", 3), ("r", 2), ("s", 0)],
    [("N", 0), ("K", 3), ("r", 2), ("s", 0)],
    [("N", 5), ("K", 0), ("r", 1), ("s", 0)],
];

fn symbols(pairs: &[(&str, i64)]) -> BTreeMap<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Value::I64(*v)))
        .collect()
}

/// The labels of the top-level maps, state by state.
fn map_labels(s: &Sdfg) -> Vec<Vec<String>> {
    s.states
        .iter()
        .map(|st| {
            let g = &st.graph;
            g.node_ids()
                .into_iter()
                .filter_map(|n| match g.node(n) {
                    Node::Map(m) => Some(m.label.clone()),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

#[test]
fn a_band_update_moves_up_across_the_zone_copies_and_runs_in_the_interiors_map() {
    let s0 = damping(Shape::Plain);
    let mut s = s0.clone();
    let c = RowFusion.run(&mut s);
    assert_eq!(s.validate(), Ok(()));
    assert_eq!(c.get("maps_row_fused"), 1, "{c}");
    assert_eq!(c.get("states_moved_up"), 1, "{c}");
    // One state fewer; the fused map iterates the rows and holds both maps' levels.
    assert_eq!(s.states.len(), 3);
    assert_eq!(
        map_labels(&s),
        vec![vec!["a+upd".to_string()], vec![], vec![]]
    );
    let g = &s.states[0].graph;
    let fused = g
        .node_ids()
        .into_iter()
        .find_map(|n| match g.node(n) {
            Node::Map(m) => Some(m.clone()),
            _ => None,
        })
        .expect("the fused map");
    assert_eq!(fused.params, vec!["i".to_string()]);
    let inner: Vec<(String, Vec<String>)> = fused
        .body
        .node_ids()
        .into_iter()
        .filter_map(|n| match fused.body.node(n) {
            Node::Map(m) => Some((m.label.clone(), m.params.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        inner,
        vec![
            ("a".to_string(), vec!["k".to_string()]),
            ("upd".to_string(), vec!["q".to_string()])
        ]
    );
    for syms in &SIZES {
        assert_same_results(&s0, &s, &symbols(syms), 3);
    }
    // At its fixed point the pass changes nothing.
    let mut again = s.clone();
    assert!(RowFusion.run(&mut again).is_empty());
    assert!(again == s);
}

#[test]
fn row_fusion_leaves_every_shape_that_breaks_a_condition() {
    for shape in [
        Shape::ReadBetween,
        Shape::Overlap,
        Shape::NextRow,
        Shape::OtherRows,
        Shape::OutsideBand,
        Shape::ReadByProducer,
        Shape::CopyWithin,
        Shape::ReadThenWritten,
    ] {
        let s0 = damping(shape);
        let mut s = s0.clone();
        let c = RowFusion.run(&mut s);
        assert_eq!(c.get("maps_row_fused"), 0, "{shape:?}: {c}");
        assert_eq!(map_labels(&s), map_labels(&s0), "{shape:?}");
        for syms in &SIZES {
            assert_same_results(&s0, &s, &symbols(syms), 3);
        }
    }
}

#[test]
fn the_cpu_pipeline_row_fuses_and_the_gpu_pipeline_does_not() {
    let s0 = damping(Shape::Plain);
    let mut cpu = s0.clone();
    let report = Pipeline::cpu().run(&mut cpu).unwrap();
    assert_eq!(report.changes("row_fusion").get("maps_row_fused"), 1);
    assert!(!Pipeline::gpu().names().contains(&"row_fusion"));
    // `without` takes a pass out by name; an unknown name is an error.
    let names = Pipeline::cpu().without("row_fusion").unwrap().names();
    assert_eq!(names.len(), Pipeline::cpu().names().len() - 1);
    assert!(!names.contains(&"row_fusion"));
    let Err(e) = Pipeline::cpu().without("fuse_all") else {
        panic!("an unknown pass was taken out")
    };
    assert!(e.to_string().starts_with("unknown pass 'fuse_all'"), "{e}");
    let mut gpu = s0.clone();
    Pipeline::gpu().run(&mut gpu).unwrap();
    assert!(map_labels(&gpu).iter().flatten().all(|l| !l.contains('+')));
    for syms in &SIZES {
        assert_same_results(&s0, &cpu, &symbols(syms), 3);
        assert_same_results(&s0, &gpu, &symbols(syms), 3);
    }
}
