//! The random program generator: valid, round-tripping, deterministic, runnable.
#![cfg(feature = "testkit")]

use proptest::prelude::*;
use sdflow_ir::format::{from_json, to_json};
use sdflow_ir::interp::random_bindings;
use sdflow_ir::testkit::{GenConfig, arb_sdfg, generate, sample_symbols};
use sdflow_ir::{Block, DType, Node, Value, interp};

fn count_nodes(sdfg: &sdflow_ir::Sdfg, f: &dyn Fn(&Node) -> bool) -> usize {
    sdfg.states
        .iter()
        .flat_map(|s| s.graph.node_ids().into_iter().map(move |n| s.graph.node(n)))
        .filter(|n| f(n))
        .count()
}

proptest! {
    #[test]
    fn generated_programs_validate(s in arb_sdfg(GenConfig::default())) {
        if let Err(problems) = s.validate() {
            let listed: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
            prop_assert!(false, "{}\n{}", listed.join("\n"), to_json(&s));
        }
    }

    #[test]
    fn generated_programs_round_trip_through_json(s in arb_sdfg(GenConfig::default())) {
        let text = to_json(&s);
        prop_assert_eq!(from_json(&text).expect("reads back"), s);
    }

    #[test]
    fn same_seed_same_program(seed in any::<u64>()) {
        let cfg = GenConfig::default();
        prop_assert_eq!(to_json(&generate(seed, &cfg)), to_json(&generate(seed, &cfg)));
    }
}

#[test]
fn different_seeds_differ_and_cover_the_features() {
    let cfg = GenConfig::default();
    let progs: Vec<_> = (0..200).map(|s| generate(s, &cfg)).collect();
    assert_ne!(to_json(&progs[0]), to_json(&progs[1]));
    let any_block = |f: &dyn Fn(&Block) -> bool| {
        progs.iter().any(|p| {
            let mut hit = false;
            p.body.visit(&mut |b| hit |= f(b));
            hit
        })
    };
    assert!(any_block(&|b| matches!(b, Block::Loop(_))), "some loop");
    assert!(any_block(&|b| matches!(b, Block::If(_))), "some if");
    assert!(
        progs
            .iter()
            .any(|p| count_nodes(p, &|n| matches!(n, Node::Nested(_))) > 0)
    );
    let text: String = progs.iter().take(100).map(to_json).collect();
    assert!(text.contains("\"wcr\": \"sum\""), "some reduction");
    // Some map body calls a nested SDFG that accumulates into its argument.
    let accumulating = progs.iter().any(|p| {
        p.states.iter().any(|s| {
            s.graph
                .node_ids()
                .into_iter()
                .any(|n| match s.graph.node(n) {
                    Node::Map(m) => m.body.node_ids().into_iter().any(|x| match m.body.node(x) {
                        Node::Nested(ns) => to_json(&ns.sdfg).contains("\"wcr\": \"sum\""),
                        _ => false,
                    }),
                    _ => false,
                })
        })
    });
    assert!(accumulating, "some reduction through a nested SDFG");
    assert!(text.contains("tab[i, 0]"), "some indirect gather");
    assert!(text.contains("\"f32\""), "some f32 array");
    assert!(text.contains("\"value\": "), "some static symbol");
    assert!(
        progs
            .iter()
            .any(|p| p.arrays.keys().any(|k| k.starts_with("tmp")))
    );
    assert!(
        progs
            .iter()
            .any(|p| p.arrays.values().any(|d| d.rank() == 3))
    );
    // Every program writes some output.
    for p in &progs {
        let json = to_json(p);
        assert!(json.contains("\"memlet\": \"out"), "{}", p.name);
    }
}

#[test]
fn a_restricted_config_is_respected() {
    let cfg = GenConfig {
        max_states: 1,
        max_maps_per_state: 1,
        max_rank: 2,
        allow_loops: false,
        allow_ifs: false,
        allow_nested: false,
        allow_wcr: false,
        allow_indirect: false,
        allow_f32: false,
        allow_static: false,
        ..GenConfig::default()
    };
    for seed in 0..50 {
        let p = generate(seed, &cfg);
        assert!(p.states.len() <= 2, "one state, plus one writing an output");
        assert!(
            p.arrays
                .values()
                .all(|d| d.dtype() == DType::F64 && d.rank() == 2)
        );
        assert!(p.symbols.values().all(|s| s.value.is_none()));
        assert!(!p.symbols.contains_key("T") && !p.symbols.contains_key("flag"));
        assert_eq!(count_nodes(&p, &|n| matches!(n, Node::Nested(_))), 0);
    }
}

#[test]
fn sampled_symbols_and_bindings_are_small_and_complete() {
    let cfg = GenConfig::default();
    for seed in 0..50 {
        let p = generate(seed, &cfg);
        let syms = sample_symbols(&p);
        assert_eq!(syms, sample_symbols(&p), "deterministic");
        for (name, v) in &syms {
            let v = v.as_i64();
            match name.as_str() {
                "T" => assert!((0..4).contains(&v)),
                "flag" => assert!((0..2).contains(&v)),
                _ => assert!((4..10).contains(&v), "{name} = {v}"),
            }
            assert!(!name.starts_with('t'), "loop variables are not arguments");
        }
        let b = random_bindings(&p, &syms, seed).expect("shapes evaluate");
        assert_eq!(b, random_bindings(&p, &syms, seed).expect("again"));
        let text = to_json(&p);
        for (name, _) in p.non_transients() {
            let a = &b.arrays[name];
            let is_table = text.contains(&format!("{name}["));
            for i in 0..a.len() {
                let v = a.get_flat(i).expect("in range");
                match v {
                    Value::F64(x) => assert!((-1.0..1.0).contains(&x)),
                    Value::F32(x) => assert!((-1.0..1.0).contains(&x)),
                    // Tables used for indirection hold valid indices of the grid's first
                    // dimension; an unused integer array is plain data.
                    Value::I32(x) if is_table => {
                        assert!(
                            (0..a.shape()[0] as i32).contains(&x),
                            "seed {seed}: {name} = {x}"
                        )
                    }
                    Value::I32(x) => assert!((0..100).contains(&x), "seed {seed}: {name} = {x}"),
                    _ => {}
                }
            }
        }
    }
}

#[test]
fn generated_programs_run_on_the_interpreter() {
    let cfg = GenConfig::default();
    for seed in 0..64 {
        let p = generate(seed, &cfg);
        let syms = sample_symbols(&p);
        let mut b = random_bindings(&p, &syms, seed).expect("bindings");
        interp::run(&p, &mut b).unwrap_or_else(|e| panic!("seed {seed}: {e}\n{}", to_json(&p)));
        // Deterministic, and finite everywhere.
        let mut again = random_bindings(&p, &syms, seed).expect("bindings");
        interp::run(&p, &mut again).expect("second run");
        assert_eq!(b, again, "seed {seed}");
        for a in b.arrays.values() {
            for i in 0..a.len() {
                let v = a.get_flat(i).expect("in range").as_f64();
                assert!(v.is_finite(), "seed {seed}: non-finite output");
            }
        }
    }
}

#[test]
fn stencil_chain_is_valid_and_computes_the_chain() {
    let p = sdflow_ir::testkit::stencil_chain(3);
    assert_eq!(p.validate(), Ok(()));
    assert_eq!(p.stats().maps, 3);
    assert_eq!(p.stats().transients, 2);
    let syms: std::collections::BTreeMap<String, Value> = [("N".to_string(), Value::I64(9))].into();
    let mut b = random_bindings(&p, &syms, 1).expect("bindings");
    let a = match &b.arrays["a"] {
        sdflow_ir::interp::HostArray::F64(a) => a.clone(),
        _ => unreachable!("a is f64"),
    };
    interp::run(&p, &mut b).expect("runs");
    // Three steps by hand on the innermost point's neighbourhood.
    let avg = |g: &ndarray::ArrayD<f64>, i: usize, j: usize| {
        0.25 * (g[[i - 1, j]] + g[[i + 1, j]] + g[[i, j - 1]] + g[[i, j + 1]])
    };
    let mut g = a.clone();
    for k in 1..=3 {
        let mut next = g.clone();
        for i in k..9 - k {
            for j in k..9 - k {
                next[[i, j]] = avg(&g, i, j);
            }
        }
        g = next;
    }
    let sdflow_ir::interp::HostArray::F64(out) = &b.arrays["out"] else {
        unreachable!("out is f64")
    };
    for i in 3..6 {
        for j in 3..6 {
            assert_eq!(out[[i, j]].to_bits(), g[[i, j]].to_bits(), "out[{i}, {j}]");
        }
    }
}

/// With `allow_hazards`, the generator also writes the shapes that stress the optimizer
/// (row-by-row loop-carried writes read in branches, nested ifs in loops, widened map
/// edges, conflict resolution on body edges only, whole copies of transients, scalar
/// parameters forwarded to nested SDFGs); every program still validates and runs, at
/// the usual sizes and at sizes 0..4.
#[test]
fn hazard_programs_validate_run_and_cover_their_shapes() {
    let cfg = GenConfig {
        allow_hazards: true,
        ..GenConfig::default()
    };
    let mut text = String::new();
    for seed in 0..200 {
        let p = generate(seed, &cfg);
        if let Err(problems) = p.validate() {
            let listed: Vec<String> = problems.iter().map(|x| x.to_string()).collect();
            panic!("seed {seed}: {}\n{}", listed.join("\n"), to_json(&p));
        }
        for syms in [
            sample_symbols(&p),
            sdflow_ir::testkit::sample_small_symbols(&p),
        ] {
            let mut b = random_bindings(&p, &syms, seed).expect("bindings");
            interp::run(&p, &mut b)
                .unwrap_or_else(|e| panic!("seed {seed} at {syms:?}: {e}\n{}", to_json(&p)));
        }
        text.push_str(&to_json(&p));
    }
    for shape in [
        "% 2 == 1",       // a branch inside a loop, on the loop variable
        "\"f\": \"t",     // a nested if called in a loop
        "\"wb\"",         // a bool scalar forwarded to nested SDFGs
        "\"b_\": \"wb\"", // its mapping
    ] {
        assert!(text.contains(shape), "no program has {shape:?}");
    }
    let progs: Vec<_> = (0..200).map(|s| generate(s, &cfg)).collect();
    let copies = progs.iter().any(|p| {
        p.states.iter().any(|st| {
            st.graph.edge_ids().into_iter().any(|e| {
                let (a, b) = st.graph.endpoints(e);
                st.graph.node(a).as_access().is_some() && st.graph.node(b).as_access().is_some()
            })
        })
    });
    assert!(copies, "some copy between access nodes");
    // Copies of part of a container: an interior, a row range shifted by one, and two
    // copies into one access node.
    let (mut shifted, mut two_into_one) = (false, false);
    for p in &progs {
        for st in &p.states {
            for n in st.graph.node_ids() {
                let copies: Vec<_> = st
                    .graph
                    .in_edges(n)
                    .into_iter()
                    .filter(|&e| {
                        let (a, _) = st.graph.endpoints(e);
                        st.graph.node(a).as_access().is_some()
                    })
                    .collect();
                two_into_one |= copies.len() == 2;
                shifted |= copies.iter().any(|&e| {
                    let m = &st.graph.edge(e).memlet;
                    let src = m.subset.0[0].first().cloned();
                    let dst = m
                        .other_subset
                        .as_ref()
                        .and_then(|o| o.0[0].first().cloned());
                    src.is_some() && dst.is_some() && src != dst
                });
            }
        }
    }
    assert!(
        shifted && two_into_one,
        "shifted copy {shifted}, two copies into one node {two_into_one}"
    );
    // Some map's edge claims more than its body writes, and some body edge carries a
    // conflict resolution its map's edge does not.
    let (mut widened, mut inner_only) = (false, false);
    for p in &progs {
        for st in &p.states {
            for n in st.graph.node_ids() {
                let Node::Map(m) = st.graph.node(n) else {
                    continue;
                };
                for e in st.graph.out_edges(n) {
                    let outer = &st.graph.edge(e).memlet;
                    let body_wcr = m.body.edge_ids().into_iter().any(|x| {
                        let b = &m.body.edge(x).memlet;
                        b.data == outer.data && b.wcr.is_some()
                    });
                    inner_only |= body_wcr && outer.wcr.is_none();
                    let full = sdflow_ir::Subset::full(p.arrays[&outer.data].shape());
                    widened |= outer.subset == full
                        && m.ranges.iter().any(|r| r.start.as_int() == Some(1));
                }
            }
        }
    }
    assert!(
        widened && inner_only,
        "widened {widened}, inner-only wcr {inner_only}"
    );
}

/// With `allow_gt4py_shapes`, programs hold GT4Py's shapes — column copies and
/// computations over the first dimension read by maps over the grid, slabs written
/// through inner maps into a per-worker buffer and reduced (the sum copied into its
/// field), nested SDFGs bound to windows of their arguments, two fields written by one
/// map and read by the next at the same point — and still validate and run at the usual
/// sizes.
#[test]
fn gt4py_shaped_programs_validate_run_and_cover_their_shapes() {
    let cfg = GenConfig {
        allow_hazards: true,
        allow_gt4py_shapes: true,
        ..GenConfig::default()
    };
    let mut text = String::new();
    let mut padded = 0;
    for seed in 0..100 {
        let p = generate(seed, &cfg);
        // Transients laid out with gaps (a composed program's scratch fields keep their
        // allocator's padded strides).
        padded += p
            .arrays
            .values()
            .filter(|d| {
                matches!(d, sdflow_ir::DataDesc::Array(a) if a.transient
                    && a.strides != sdflow_ir::data::row_major_strides(&a.shape))
            })
            .count();
        if let Err(problems) = p.validate() {
            let listed: Vec<String> = problems.iter().map(|x| x.to_string()).collect();
            panic!("seed {seed}: {}\n{}", listed.join("\n"), to_json(&p));
        }
        let mut b = random_bindings(&p, &sample_symbols(&p), seed).expect("bindings");
        interp::run(&p, &mut b).unwrap_or_else(|e| panic!("seed {seed}: {e}\n{}", to_json(&p)));
        text.push_str(&to_json(&p));
    }
    assert!(padded >= 10, "{padded} padded transients in 100 programs");
    for shape in [
        "_copy\"",                // a column copy over the first dimension
        "_line\"",                // a computation over the first dimension
        "_nbh\"",                 // a slab through an inner map
        "\"reduce\"",             // its reduction
        "\"storage\": \"local\"", // the per-worker buffer
        "[1:max(1, N)",           // a nested SDFG bound to a window
        "_pair\"",                // two fields written by one map, read by the next
        "_point\"",               // one of them through a nested SDFG at each point
    ] {
        assert!(text.contains(shape), "no program has {shape:?}");
    }
    // A reduction's sum copied into its field (the copy's memlet names the scalar, its
    // other subset the field's point).
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    assert!(
        lines
            .windows(2)
            .any(|w| w[0].starts_with("\"memlet\": \"tmp")
                && w[0].ends_with("_sum\",")
                && w[1].starts_with("\"other\"")),
        "no program copies a sum into its field"
    );
}
