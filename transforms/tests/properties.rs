//! Every pass, and the default pipelines, on random valid programs: the result validates,
//! the reference interpreter's outputs are bitwise equal before and after (at the usual
//! sizes and at sizes 0..4, where shapes like `N - 2` would be negative), and running
//! the pass again at its fixed point changes nothing. The programs include the shapes
//! that stress pass legality (`GenConfig::allow_hazards`: loop-carried row writes read
//! in branches, nested ifs in loops, widened map edges, conflict resolution on body
//! edges only, whole copies, scalar parameters forwarded to nested SDFGs, nested SDFGs
//! bound to windows of their arguments) and GT4Py's shapes (`GenConfig::
//! allow_gt4py_shapes`: column copies and computations over the first dimension read by
//! maps over the grid, slabs written through inner maps or element by element and reduced,
//! a field written beside the slab and read with it, the sum copied into its field, two fields written by one map and read by the next, a transient
//! assembled from row pieces in successive states and copied whole into another, or
//! read back into a field zone by zone, a band of a field updated in place after its
//! zones were written), and programs
//! that stop with an error in a map whose results nothing reads (compared only where the
//! original runs: `docs/transforms.md`, *Errors*). At least 256 cases per property;
//! `PROPTEST_CASES` raises the number.

use proptest::prelude::*;
use sdflow_ir::Sdfg;
use sdflow_ir::interp::{self, Bindings, random_bindings};
use sdflow_ir::testkit::{GenConfig, arb_sdfg, generate, sample_small_symbols, sample_symbols};
use sdflow_ir::testkit::{assert_same_arguments, first_difference};
use sdflow_transforms::{PASS_NAMES, Pipeline, pass_by_name};

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
        .max(256)
}

/// The generator's default shapes, the hazards, and maps whose unread results fail.
fn hazards() -> GenConfig {
    GenConfig {
        allow_hazards: true,
        allow_failing_dead_code: true,
        allow_gt4py_shapes: true,
        ..GenConfig::default()
    }
}

fn run(sdfg: &Sdfg, b: &Bindings) -> Result<Bindings, String> {
    let mut b = b.clone();
    interp::run(sdfg, &mut b).map_err(|e| e.to_string())?;
    Ok(b)
}

/// Applies the passes named, as a pipeline validating after every pass, and checks the
/// outputs and the fixed point.
fn check(sdfg: &Sdfg, names: &[&str]) -> Result<(), TestCaseError> {
    let mut opt = sdfg.clone();
    let pipeline = Pipeline::from_names(names).unwrap().validate_each(true);
    let report = pipeline
        .run(&mut opt)
        .map_err(|e| TestCaseError::fail(format!("{}: {e}", sdfg.name)))?;
    prop_assert!(
        report.fixed_point,
        "{}: no fixed point\n{report}",
        sdfg.name
    );
    for symbols in [sample_symbols(sdfg), sample_small_symbols(sdfg)] {
        let inputs = random_bindings(sdfg, &symbols, 7).expect("bindings for a generated program");
        // The errors rule (docs/transforms.md): where the original stops with an error,
        // the optimized program may succeed (a removed computation takes its error with
        // it) or fail; where the original runs, the optimized one runs to the same bits.
        let Ok(before) = run(sdfg, &inputs) else {
            continue;
        };
        let after = run(&opt, &inputs).map_err(|e| {
            TestCaseError::fail(format!(
                "{}: fails after {names:?} at {symbols:?} where the original ran: {e}\n{report}",
                sdfg.name
            ))
        })?;
        if let Some(d) = first_difference(sdfg, &before, &after) {
            prop_assert!(
                false,
                "{}: {d} after {names:?} at {symbols:?}\n{report}",
                sdfg.name
            );
        }
    }
    // At the fixed point every pass changes nothing.
    for n in names {
        let mut again = opt.clone();
        let c = pass_by_name(n).unwrap().run(&mut again);
        prop_assert!(c.is_empty(), "{}: '{n}' not idempotent: {c}", sdfg.name);
        prop_assert!(
            again == opt,
            "{}: '{n}' changed the program again",
            sdfg.name
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn inline_nested_preserves_results(s in arb_sdfg(hazards())) {
        check(&s, &["inline_nested"])?;
        check(&s, &["inline_nested", "state_fusion", "map_fusion"])?;
    }

    #[test]
    fn specialize_preserves_results(s in arb_sdfg(hazards())) {
        check(&s, &["specialize"])?;
    }

    #[test]
    fn dead_dataflow_preserves_results(s in arb_sdfg(hazards())) {
        check(&s, &["dead_dataflow"])?;
    }

    #[test]
    fn redundant_copy_preserves_results(s in arb_sdfg(hazards())) {
        check(&s, &["redundant_copy"])?;
    }

    #[test]
    fn state_fusion_preserves_results(s in arb_sdfg(hazards())) {
        check(&s, &["state_fusion"])?;
    }

    #[test]
    fn copy_forwarding_preserves_results(s in arb_sdfg(hazards())) {
        check(&s, &["copy_forwarding"])?;
        check(&s, &["state_fusion", "copy_forwarding"])?;
    }

    #[test]
    fn map_fusion_preserves_results(s in arb_sdfg(hazards())) {
        check(&s, &["map_fusion"])?;
        check(&s, &["state_fusion", "map_fusion"])?;
    }

    #[test]
    fn sibling_fusion_preserves_results(s in arb_sdfg(hazards())) {
        check(&s, &["sibling_fusion"])?;
        check(&s, &["state_fusion", "sibling_fusion"])?;
    }

    #[test]
    fn row_fusion_preserves_results(s in arb_sdfg(hazards())) {
        check(&s, &["row_fusion"])?;
        check(&s, &["state_fusion", "redundant_copy", "row_fusion"])?;
    }

    #[test]
    fn local_unroll_preserves_results(s in arb_sdfg(hazards())) {
        check(&s, &["local_unroll"])?;
        check(&s, &["state_fusion", "map_fusion", "local_unroll"])?;
    }

    #[test]
    fn loop_order_preserves_results(s in arb_sdfg(hazards())) {
        check(&s, &["loop_order"])?;
        check(&s, &["state_fusion", "map_fusion", "loop_order"])?;
    }

    #[test]
    fn move_into_if_preserves_results_and_terminates(s in arb_sdfg(hazards())) {
        check(&s, &["move_into_if"])?;
    }

    #[test]
    fn egraph_preserves_results(s in arb_sdfg(hazards())) {
        check(&s, &["egraph"])?;
        check(&s, &["state_fusion", "map_fusion", "sibling_fusion", "egraph"])?;
    }

    #[test]
    fn the_default_pipelines_preserve_results(s in arb_sdfg(hazards())) {
        check(&s, &Pipeline::cpu().names())?;
        check(&s, &Pipeline::gpu().names())?;
        check(&s, &PASS_NAMES[..9])?;
    }
}

/// Generated programs with halo exchanges over 2 × 2 ranks (periodic along the first
/// dimension, bounded along the second, corners filled).
fn on_ranks() -> GenConfig {
    GenConfig {
        exchange: Some(sdflow_ir::Decomposition::Structured {
            ranks: [2, 2],
            width: 1,
            periodic: [true, false],
            corners: true,
        }),
        ..hazards()
    }
}

/// Generated programs with unstructured halo exchanges over 4 ranks, by the lists `glob`
/// and `own` ([`partition`] gives them their values).
fn on_unstructured_ranks() -> GenConfig {
    GenConfig {
        exchange: Some(sdflow_ir::Decomposition::Unstructured {
            ranks: 4,
            global: "glob".into(),
            owner: "own".into(),
        }),
        ..hazards()
    }
}

/// Rank `r`'s lists for `n` cells on 4 ranks, when the program has them: the first
/// `n - 2` cells its own (global `r (n - 2) + l`), the last two the first two cells of
/// rank `r + 1` (around a ring); with fewer than 4 cells, all its own.
fn partition(inputs: &mut Bindings, r: usize) {
    let (Some(g), Some(o)) = (inputs.arrays.get("glob"), inputs.arrays.get("own")) else {
        return;
    };
    let n = g.shape()[0];
    let (halo, next) = (if n >= 4 { 2 } else { 0 }, (r + 1) % 4);
    let owned = n - halo;
    let mut glob = g.clone();
    let mut own = o.clone();
    for l in 0..n {
        let (gl, ow) = if l < owned {
            (r * owned + l, r)
        } else {
            (next * owned + (l - owned), next)
        };
        glob.set(&[l], sdflow_ir::Value::I64(gl as i64));
        own.set(&[l], sdflow_ir::Value::I32(ow as i32));
    }
    inputs.arrays.insert("glob".into(), glob);
    inputs.arrays.insert("own".into(), own);
}

/// Runs `sdfg` on the four ranks of [`on_ranks`], rank `r` with `inputs[r]`.
fn run_on_ranks(sdfg: &Sdfg, inputs: &[Bindings]) -> Result<Vec<Bindings>, String> {
    let mut ranks = inputs.to_vec();
    interp::run_ranks(sdfg, &mut ranks).map_err(|e| e.to_string())?;
    Ok(ranks)
}

/// The default pipelines on a program with halo exchanges, run on simulated ranks: every
/// rank's outputs are the original program's, bit for bit.
fn check_on_ranks(sdfg: &Sdfg) -> Result<(), TestCaseError> {
    for pipeline in [Pipeline::cpu(), Pipeline::gpu()] {
        let mut opt = sdfg.clone();
        pipeline
            .validate_each(true)
            .run(&mut opt)
            .map_err(|e| TestCaseError::fail(format!("{}: {e}", sdfg.name)))?;
        for symbols in [sample_symbols(sdfg), sample_small_symbols(sdfg)] {
            let inputs: Vec<Bindings> = (0..4)
                .map(|r| {
                    let mut b = random_bindings(sdfg, &symbols, 7 + r).expect("bindings");
                    partition(&mut b, r as usize);
                    b
                })
                .collect();
            let Ok(before) = run_on_ranks(sdfg, &inputs) else {
                continue;
            };
            let after = run_on_ranks(&opt, &inputs).map_err(|e| {
                TestCaseError::fail(format!(
                    "{}: fails on ranks after the pipeline at {symbols:?} where the original ran: {e}",
                    sdfg.name
                ))
            })?;
            for (r, (b, a)) in before.iter().zip(&after).enumerate() {
                if let Some(d) = first_difference(sdfg, b, a) {
                    prop_assert!(false, "{}: rank {r}: {d} at {symbols:?}", sdfg.name);
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases() / 4, ..ProptestConfig::default() })]

    #[test]
    fn the_pipelines_preserve_results_on_ranks(s in arb_sdfg(on_ranks())) {
        check_on_ranks(&s)?;
    }

    #[test]
    fn the_pipelines_preserve_results_on_unstructured_ranks(s in arb_sdfg(on_unstructured_ranks())) {
        check_on_ranks(&s)?;
    }
}

/// The generator's exchanges run: most programs with one run on the ranks, and the
/// pipelines keep the exchanges (they are collective and write their fields).
#[test]
fn generated_exchanges_run_on_ranks_and_stay() {
    let count = |s: &Sdfg| {
        s.states
            .iter()
            .flat_map(|st| {
                st.graph
                    .node_ids()
                    .into_iter()
                    .map(move |n| st.graph.node(n))
            })
            .filter(|n| {
                matches!(
                    n,
                    sdflow_ir::Node::Library(sdflow_ir::LibraryNode::HaloExchange(_))
                )
            })
            .count()
    };
    for cfg in [on_ranks(), on_unstructured_ranks()] {
        let (mut with, mut ran, mut kept) = (0, 0, 0);
        for seed in 0..100 {
            let s = generate(seed, &cfg);
            if count(&s) == 0 {
                continue;
            }
            with += 1;
            let inputs: Vec<Bindings> = (0..4)
                .map(|r| {
                    let mut b = random_bindings(&s, &sample_symbols(&s), r).unwrap();
                    partition(&mut b, r as usize);
                    b
                })
                .collect();
            ran += usize::from(run_on_ranks(&s, &inputs).is_ok());
            let mut opt = s.clone();
            Pipeline::cpu().run(&mut opt).unwrap();
            kept += usize::from(count(&opt) > 0);
        }
        assert!(with >= 40, "{with} of 100 programs exchange halos");
        assert!(ran * 2 >= with, "{ran} of {with} ran on the ranks");
        assert!(
            kept * 2 >= with,
            "{kept} of {with} keep an exchange after the pipeline"
        );
    }
}

/// The passes do fire on the generated programs (the properties above are not vacuous).
#[test]
fn random_programs_exercise_the_passes() {
    let cfg = hazards();
    let mut fired = std::collections::BTreeMap::new();
    let (mut failing, mut rescued) = (0, 0);
    let mut with_callees = 0;
    for seed in 0..300 {
        let mut s = generate(seed, &cfg);
        let original = s.clone();
        let report = Pipeline::cpu().validate_each(true).run(&mut s).unwrap();
        let inputs = random_bindings(&original, &sample_symbols(&original), 7).unwrap();
        if run(&original, &inputs).is_err() {
            failing += 1;
            rescued += usize::from(run(&s, &inputs).is_ok());
        }
        for p in &report.passes {
            if !p.changes.is_empty() {
                *fired.entry(p.name).or_insert(0) += 1;
            }
        }
        with_callees += usize::from(report.callees > 0);
        for rule in [
            "copies_removed_in_place",
            "copies_removed_through_callees",
            "transients_merged",
            "maps_fused_recompute",
            "maps_fused_through_several",
            "maps_fused_through_slabs_and_more",
            "copies_forwarded",
            "constants_forwarded",
            "nested_inlined",
            "nested_ifs_selected",
            "local_maps_unrolled",
            "reductions_unrolled",
            "buffers_scalarized",
            "loops_reordered",
            "loops_reordered_in_place",
            "copies_merged",
            "write_backs_merged",
            "zoned_write_backs_merged",
            "maps_row_fused",
            "states_moved_up",
        ] {
            if report.passes.iter().any(|p| p.changes.get(rule) > 0) {
                *fired.entry(rule).or_insert(0) += 1;
            }
        }
    }
    eprintln!("programs changed by each pass, of 300: {fired:?}");
    // Programs that stop with an error are generated, and the optimizer removes the
    // failing dead maps of some of them (the errors rule is exercised both ways).
    eprintln!("{failing} of 300 fail before optimization, {rescued} of them run after");
    // Callees that stay calls are optimized as programs of their own; GT4Py's `if_stmt`
    // callees whose branches can both run become selects, the others stay.
    eprintln!("{with_callees} of 300 keep a nested SDFG the passes then ran inside");
    assert!(with_callees >= 3, "{with_callees}");
    let selected = fired.get("nested_ifs_selected").copied().unwrap_or(0);
    assert!(selected >= 2, "{selected}");
    assert!(failing >= 10, "{failing}");
    assert!(rescued >= 5, "{rescued} of {failing}");
    for name in [
        "inline_nested",
        "specialize",
        "dead_dataflow",
        "redundant_copy",
        "state_fusion",
        "copy_forwarding",
        "map_fusion",
        "sibling_fusion",
        "row_fusion",
        "states_moved_up",
        "move_into_if",
        "egraph",
        "copies_removed_in_place",
        "copies_removed_through_callees",
        "transients_merged",
        "maps_fused_recompute",
        "maps_fused_through_several",
        "maps_fused_through_slabs_and_more",
        "copies_forwarded",
        "constants_forwarded",
        "nested_inlined",
        "nested_ifs_selected",
        "local_unroll",
        "local_maps_unrolled",
        "reductions_unrolled",
        "buffers_scalarized",
        "loop_order",
        "loops_reordered",
        "loops_reordered_in_place",
        "copies_merged",
        "write_backs_merged",
        "zoned_write_backs_merged",
    ] {
        assert!(
            fired.get(name).copied().unwrap_or(0) > 0,
            "'{name}' never fired: {fired:?}"
        );
    }
}

/// Layout specialization on random programs: every argument of two or more dimensions
/// given GT4Py's strides (a symbol of its own per dimension), and in every fifth program
/// one argument striding its first dimension with an extent symbol instead (`N`: not a
/// stride of its own, so never specialized), specialized column-major and then run
/// through the CPU pipeline, computes the original's outputs bit for bit (the interpreter
/// indexes logically: the layout changes where elements live, never what is computed).
#[test]
fn layout_specialization_preserves_results() {
    use sdflow_ir::{DType, DataDesc, SymExpr, Symbol};
    use sdflow_transforms::{Order, specialize_unit_strides, unit_dims_in_order};
    let cfg = hazards();
    let (mut specialized, mut relaid, mut extents_kept) = (0, 0, 0);
    for seed in 0..120 {
        let mut s = generate(seed, &cfg);
        let names: Vec<String> = s
            .non_transients()
            .filter(|(_, d)| d.rank() >= 2)
            .map(|(k, _)| k.clone())
            .collect();
        let mut extent_stride = None;
        for (i, name) in names.iter().enumerate() {
            let Some(DataDesc::Array(a)) = s.arrays.get(name) else {
                continue;
            };
            let mut strides = Vec::new();
            for d in 0..a.rank() {
                let sym = format!("__{name}_stride_{d}");
                s.symbols.insert(sym.clone(), Symbol::new(DType::I64));
                strides.push(SymExpr::sym(&sym));
            }
            if i == 0 && seed % 5 == 0 && s.symbols.contains_key("N") {
                strides[0] = SymExpr::sym("N");
                extent_stride = Some(name.clone());
            }
            if let Some(DataDesc::Array(a)) = s.arrays.get_mut(name) {
                a.strides = strides;
            }
        }
        assert_eq!(s.validate(), Ok(()), "seed {seed}");
        let unit = unit_dims_in_order(&s, Order::ColumnMajor);
        if let Some(name) = &extent_stride {
            assert!(
                !unit.contains_key(name),
                "seed {seed}: '{name}' strides with N"
            );
            extents_kept += 1;
        }
        let mut spec = s.clone();
        let report = specialize_unit_strides(&mut spec, &unit).unwrap();
        specialized += report.strides_specialized.len();
        relaid += report.transients_relaid.len();
        assert_eq!(spec.validate(), Ok(()), "seed {seed}");
        Pipeline::cpu().validate_each(true).run(&mut spec).unwrap();
        let symbols = sample_symbols(&s);
        let inputs = random_bindings(&s, &symbols, 7).unwrap();
        let Ok(before) = run(&s, &inputs) else {
            continue;
        };
        let mut given = inputs.clone();
        given
            .symbols
            .retain(|k, _| !report.strides_specialized.contains(k));
        let after = run(&spec, &given).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert_same_arguments(&s, &before, &after, &format!("seed {seed}"));
    }
    eprintln!(
        "{specialized} strides specialized, {relaid} transients relaid, {extents_kept} extent strides kept"
    );
    assert!(specialized >= 100 && relaid >= 50 && extents_kept >= 5);
}

/// GT4Py's second `concat_where` reading a write-back buffer back into a field zone by
/// zone, on random programs: the generator's shape (a map over one zone of rows reading
/// the buffer at its point, a copy of the others, in either order; with hazards, a copy
/// one row short, or over all rows after the map), in a loop, a branch or neither,
/// optimized by the CPU pipeline, computes the original's outputs bit for bit; the zoned
/// rule merges the buffer where it may. Without any one of its guards (the consumers'
/// cover, their disjointness, nothing reading the field between, the producers' cover)
/// some program of the first 600 computes another result.
#[test]
fn buffers_read_back_in_zones_merge_only_where_they_may() {
    let cfg = hazards();
    let (mut shapes, mut merged) = (0, 0);
    for seed in 0..800 {
        let s = generate(seed, &cfg);
        if !s.states.iter().any(|st| st.name.ends_with("_zone")) {
            continue;
        }
        shapes += 1;
        let mut o = s.clone();
        let r = Pipeline::cpu().validate_each(true).run(&mut o).unwrap();
        let m: usize = r
            .passes
            .iter()
            .map(|p| p.changes.get("zoned_write_backs_merged"))
            .sum();
        merged += usize::from(m > 0);
        for symbols in [sample_symbols(&s), sample_small_symbols(&s)] {
            let inputs = random_bindings(&s, &symbols, 7).unwrap();
            let Ok(before) = run(&s, &inputs) else {
                continue;
            };
            let after = run(&o, &inputs)
                .unwrap_or_else(|e| panic!("seed {seed}: fails after the pipeline: {e}"));
            if let Some(d) = first_difference(&s, &before, &after) {
                panic!("seed {seed}: {d} at {symbols:?}\n{r}");
            }
        }
    }
    eprintln!("{shapes} programs read a buffer back in zones, {merged} merged it");
    assert!(shapes >= 40, "{shapes}");
    assert!(merged >= 5, "{merged} of {shapes}");
    assert!(merged < shapes, "{merged} of {shapes}");
}
