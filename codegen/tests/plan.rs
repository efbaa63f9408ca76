//! The execution plan's decisions on small programs: waits follow paths in a state's
//! graph, independent steps wait for nothing, lifetimes are classed, write-conflict
//! resolutions in a parallel state are atomic, and a control-flow condition on a scalar
//! the dataflow writes is a counted sync point.

use sdflow_codegen::plan::{Flow, Lifetime, Plan, StepKind, Target};
use sdflow_ir::{Block, DType, SdfgBuilder, StateId, SymExpr};

#[test]
fn waits_follow_paths_and_independent_maps_wait_for_nothing() {
    let mut b = SdfgBuilder::new("w");
    b.symbol("N", DType::I64)
        .array("a", DType::F64, ["N"])
        .array("b", DType::F64, ["N"])
        .array("c", DType::F64, ["N"])
        .array("d", DType::F64, ["N"])
        .transient("t", DType::F64, ["N"]);
    b.state("s", |s| {
        s.map("p", &["i"], &["0:N"], |m| {
            m.tasklet("x", &[("v", "a[i]")], &[("o", "t[i]")], "o = v * 2.0");
        });
        s.map("q", &["i"], &["0:N"], |m| {
            m.tasklet("y", &[("v", "c[i]")], &[("o", "d[i]")], "o = v + 1.0");
        });
        s.map("r", &["i"], &["0:N"], |m| {
            m.tasklet("z", &[("v", "t[i]")], &[("o", "b[i]")], "o = v - 1.0");
        });
    });
    let s = b.build();
    assert_eq!(s.validate(), Ok(()));
    let plan = Plan::of(&s, Target::default()).unwrap();
    let st = plan.body.states()[0];
    let by_label = |l: &str| st.steps.iter().position(|x| x.label == l).unwrap();
    let (p, q, r) = (by_label("p"), by_label("q"), by_label("r"));
    assert!(st.steps[p].waits.is_empty());
    assert!(st.steps[q].waits.is_empty());
    assert_eq!(
        st.steps[r].waits,
        vec![p],
        "r reads what p wrote, and only that"
    );
    assert!(matches!(
        st.steps[r].kind,
        StepKind::ParallelMap {
            collapse: 1,
            min_points: 4096,
            row_checks: None,
            strips: None
        }
    ));
    assert_eq!(plan.allocation("t").unwrap().lifetime, Lifetime::Persistent);
    assert_eq!(plan.sync_points(), 0);
    // A nested program's plan is sequential: nothing waits, nothing is atomic.
    let nested = Plan::nested(&s, Target::default()).unwrap();
    assert!(!nested.parallel);
    assert!(
        nested.body.states()[0]
            .steps
            .iter()
            .all(|x| x.waits.is_empty())
    );
    assert_eq!(nested.allocation("t").unwrap().lifetime, Lifetime::PerCall);
}

#[test]
fn a_loop_on_a_scalar_the_dataflow_writes_is_a_sync_point() {
    let mut b = SdfgBuilder::new("lc");
    b.symbol("k", DType::I64)
        .scalar("cnt", DType::I64)
        .array("out", DType::I64, [1]);
    b.state("body", |s| {
        s.tasklet("inc", &[("a", "cnt")], &[("o", "cnt")], "o = a + 1");
    });
    b.state("after", |s| {
        s.tasklet(
            "cp",
            &[("a", "cnt")],
            &[("o", "out[0] (wcr: sum)")],
            "o = a",
        );
    });
    b.body(Block::seq([
        Block::for_loop(
            "k",
            SymExpr::Int(0),
            SymExpr::parse("cnt < 20").unwrap(),
            SymExpr::parse("k + 1").unwrap(),
            Block::State(StateId(0)),
        ),
        Block::State(StateId(1)),
    ]));
    let s = b.build();
    assert_eq!(s.validate(), Ok(()));
    let plan = Plan::of(&s, Target::default()).unwrap();
    assert_eq!(plan.sync_points(), 1);
    let Flow::Seq(items) = &plan.body else {
        panic!("a sequence")
    };
    assert_eq!(items[0].host_reads(), ["cnt".to_string()]);
    let after = plan.body.states()[1];
    assert_eq!(after.steps[0].kind, StepKind::Tasklet);
    let w = &after.steps[0].writes[0];
    assert_eq!((w.data.as_str(), w.atomic), ("out", true));
    let text = plan.to_text();
    assert!(
        text.contains("loop k = 0; cnt < 20; k = k + 1  [sync point: reads cnt]"),
        "{text}"
    );
    assert!(
        text.starts_with("plan 'lc' (parallel, team; 1 sync point)"),
        "{text}"
    );
    assert!(text.contains("writes out (atomic sum)"), "{text}");
}

/// The first state's plan in `flow`, to change.
fn first_state(flow: &mut Flow) -> Option<&mut sdflow_codegen::plan::StatePlan> {
    match flow {
        Flow::State(s) => Some(s),
        Flow::Seq(v) => v.iter_mut().find_map(first_state),
        Flow::Loop { body, .. } => first_state(body),
        Flow::If {
            then, otherwise, ..
        } => first_state(then).or_else(|| first_state(otherwise)),
        Flow::Assign { .. } => None,
    }
}

/// The printers print the plan and decide nothing of their own: the same plan gives the
/// same text, and changing one step's check policy changes exactly what that policy
/// says — the bind-time condition, the checked code, the checked kernel.
#[test]
fn the_printers_follow_the_check_policy_of_the_plan() {
    use sdflow_codegen::cfamily::Dialect;
    use sdflow_codegen::cpu::OpenMp;
    use sdflow_codegen::cpu::emit::emit_plan;
    use sdflow_codegen::cuda::emit::{CudaEmitOptions, emit_cuda_plan};
    use sdflow_codegen::plan::CheckPolicy;

    let mut b = SdfgBuilder::new("shift");
    b.symbol("N", DType::I64)
        .array("a", DType::F64, ["N"])
        .array("out", DType::F64, ["N"]);
    b.state("s", |s| {
        s.map("m", &["i"], &["0:N - 1"], |m| {
            m.tasklet("t", &[("x", "a[i + 1]")], &[("y", "out[i]")], "y = x * 2.0");
        });
    });
    let sdfg = b.build();
    let plan = Plan::of(&sdfg, Target::default()).unwrap();
    let gplan = Plan::of(&sdfg, Target::Grid).unwrap();
    let with = |policy: Option<CheckPolicy>| {
        let (mut p, mut g) = (plan.clone(), gplan.clone());
        if let Some(policy) = policy {
            first_state(&mut p.body).unwrap().steps[0].check = policy.clone();
            first_state(&mut g.body).unwrap().steps[0].check = policy;
        }
        let (c, sites) = emit_plan(&sdfg, &p, &Default::default()).unwrap();
        // The program's part: the prelude defines the helpers whatever the plan.
        let c = c.replace(&OpenMp.prelude(), "");
        let cu = emit_cuda_plan(&sdfg, g, &CudaEmitOptions::default()).unwrap();
        let checked_kernels = cu.kernels.iter().filter(|k| k.checked).count();
        (c, sites.bind_checks.len(), checked_kernels)
    };
    // The plan's own decision: the condition reads only N, so `bind` evaluates it.
    let step = &first_state(&mut plan.clone().body).unwrap().steps[0]
        .check
        .clone();
    let CheckPolicy::AtBind(cond) = step else {
        panic!("expected a bind-time check, got {step:?}")
    };
    let (c0, binds0, kernels0) = with(None);
    assert_eq!((binds0, kernels0), (1, 1));
    assert!(c0.contains("sdf_ok[0]") && c0.contains("sdf_ck("), "{c0}");
    // The same plan, the same text.
    assert_eq!(with(None).0, c0);
    // Never checked: no condition, no checked code, no checked kernel.
    let (c1, binds1, kernels1) = with(Some(CheckPolicy::Never));
    assert_eq!((binds1, kernels1), (0, 0));
    assert!(!c1.contains("sdf_ok[0]") && !c1.contains("sdf_ck("), "{c1}");
    // Always checked: the checked code and kernel only.
    let (c2, binds2, kernels2) = with(Some(CheckPolicy::Always));
    assert_eq!((binds2, kernels2), (0, 1));
    assert!(!c2.contains("sdf_ok[0]") && c2.contains("sdf_ck("), "{c2}");
    // Checked at run: the condition is evaluated where the step runs.
    let (c3, binds3, _) = with(Some(CheckPolicy::AtRun(cond.clone())));
    assert_eq!(binds3, 0);
    assert!(
        c3.contains("int sdf_q = 0;") && !c3.contains("sdf_ok[0]"),
        "{c3}"
    );
    assert!(!c0.contains("int sdf_q = 0;"));
    // The grid: the CUDA printer launches what the plan says, and a step the plan gives
    // no grid is a one-thread kernel.
    let grids = |p: Plan| {
        let cu = emit_cuda_plan(&sdfg, p, &CudaEmitOptions::default()).unwrap();
        cu.kernels
            .iter()
            .filter(|k| !k.checked)
            .map(|k| k.grid_sizes.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        grids(gplan.clone()),
        [Some(vec![SymExpr::parse("N - 1").unwrap()])]
    );
    // A plan made for a team has no grids: the CUDA printer refuses it.
    let Err(e) = emit_cuda_plan(&sdfg, plan.clone(), &CudaEmitOptions::default()) else {
        panic!("a team's plan printed as kernels")
    };
    assert_eq!(
        e.to_string(),
        "cannot generate code: the plan of 'shift' is made for a team of threads, not for a grid of them (make it with `Target::Grid`)"
    );
    let mut single = gplan.clone();
    first_state(&mut single.body).unwrap().steps[0].grid = None;
    assert_eq!(grids(single), [None]);
}

/// The plan says which write-conflict resolutions are atomic; the C printer follows it.
#[test]
fn the_c_printer_makes_atomic_what_the_plan_says() {
    use sdflow_codegen::cfamily::Dialect;
    use sdflow_codegen::cpu::OpenMp;
    use sdflow_codegen::cpu::emit::emit_plan;

    let mut b = SdfgBuilder::new("acc");
    b.array("a", DType::F64, [4]).array("out", DType::F64, [1]);
    b.state("s", |s| {
        s.tasklet(
            "t",
            &[("x", "a[2]")],
            &[("o", "out[0] (wcr: sum)")],
            "o = x",
        );
    });
    let sdfg = b.build();
    let plan = Plan::of(&sdfg, Target::default()).unwrap();
    assert!(first_state(&mut plan.clone().body).unwrap().steps[0].atomic_writes());
    let text = |p: &Plan| {
        let (c, _) = emit_plan(&sdfg, p, &Default::default()).unwrap();
        c.replace(&OpenMp.prelude(), "")
    };
    let atomic = text(&plan);
    assert!(atomic.contains("#pragma omp atomic update"), "{atomic}");
    let mut plain = plan.clone();
    for w in &mut first_state(&mut plain.body).unwrap().steps[0].writes {
        w.atomic = false;
    }
    let plain = text(&plain);
    assert!(!plain.contains("#pragma omp atomic update"), "{plain}");
    assert_ne!(atomic, plain);
}

/// The plan decides how a team shares a step — the parallel threshold, whether copies
/// share their loops, which map body is row-jammed — and the C printer spells exactly
/// that: changing one decision changes that part of the text.
#[test]
fn the_c_printer_follows_the_plans_sharing_and_jamming() {
    use sdflow_codegen::cfamily::Dialect;
    use sdflow_codegen::cpu::OpenMp;
    use sdflow_codegen::cpu::emit::emit_plan;

    let text = |sdfg: &sdflow_ir::Sdfg, p: &Plan| {
        let (c, _) = emit_plan(sdfg, p, &Default::default()).unwrap();
        c.replace(&OpenMp.prelude(), "")
    };
    // The threshold: the options' by default, whatever the plan says otherwise.
    let mut b = SdfgBuilder::new("thr");
    b.symbol("N", DType::I64)
        .array("a", DType::F64, ["N"])
        .array("b", DType::F64, ["N"])
        .array("c", DType::F64, ["N"]);
    b.state("s", |s| {
        s.map("m", &["i"], &["0:N"], |m| {
            m.tasklet("t", &[("x", "a[i]")], &[("y", "b[i]")], "y = x + 1.0");
        });
        s.copy("a[0:N]", "c[0:N]");
    });
    let sdfg = b.build();
    assert_eq!(sdfg.validate(), Ok(()));
    let plan = Plan::of(
        &sdfg,
        Target::Team {
            parallel_min_points: 100,
        },
    )
    .unwrap();
    let steps = &plan.body.states()[0].steps;
    let (m, c) = (
        steps.iter().position(|s| s.label == "m").unwrap(),
        steps.iter().position(|s| s.label == "c").unwrap(),
    );
    assert_eq!(
        steps[m].kind,
        StepKind::ParallelMap {
            collapse: 1,
            min_points: 100,
            row_checks: None,
            strips: None
        }
    );
    assert_eq!(steps[c].kind, StepKind::Copy { shared: true });
    let base = text(&sdfg, &plan);
    assert!(base.contains(">= 100) {"), "{base}");
    let mut other = plan.clone();
    first_state(&mut other.body).unwrap().steps[m].kind = StepKind::ParallelMap {
        collapse: 1,
        min_points: 7,
        row_checks: None,
        strips: None,
    };
    let changed = text(&sdfg, &other);
    assert!(changed.contains(">= 7) {") && !changed.contains(">= 100) {"));
    assert_eq!(changed.replace(">= 7) {", ">= 100) {"), base);
    // A copy the plan does not share runs on one thread of the team.
    let shared_loops = base
        .matches("#pragma omp for schedule(static) nowait")
        .count();
    let mut single = plan.clone();
    first_state(&mut single.body).unwrap().steps[c].kind = StepKind::Copy { shared: false };
    let single = text(&sdfg, &single);
    assert_eq!(
        single
            .matches("#pragma omp for schedule(static) nowait")
            .count(),
        shared_loops - 1,
        "{single}"
    );
    assert!(
        plan.to_text().contains("copy 'c' shared"),
        "{}",
        plan.to_text()
    );

    // Row-jamming: the tiled hyperdiffusion's tile body is jammed where the plan says.
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/hyperdiffusion.sdfg.json"
    );
    let mut hd = sdflow_ir::format::load(&std::fs::read_to_string(path).unwrap()).unwrap();
    sdflow_transforms::Pipeline::cpu().run(&mut hd).unwrap();
    let plan = Plan::of(&hd, Target::default()).unwrap();
    let jammed = plan
        .body
        .states()
        .iter()
        .flat_map(|s| &s.steps)
        .filter(|s| s.jam.is_some())
        .count();
    assert_eq!(jammed, 1, "{}", plan.to_text());
    assert!(
        plan.to_text()
            .contains("rows jammed (+1 rows, +0 columns, simd)")
    );
    let with = text(&hd, &plan);
    assert!(with.contains("row-jammed */") && with.contains("#pragma omp simd simdlen(8)"));
    let mut plain = plan.clone();
    for s in &mut first_state(&mut plain.body).unwrap().steps {
        s.jam = None;
    }
    let without = text(&hd, &plain);
    assert!(
        !without.contains("row-jammed */") && !without.contains("omp simd"),
        "{without}"
    );
    let mut no_simd = plan.clone();
    for s in &mut first_state(&mut no_simd.body).unwrap().steps {
        if let Some(j) = &mut s.jam {
            j.simd = false;
        }
    }
    let no_simd = text(&hd, &no_simd);
    assert!(no_simd.contains("row-jammed */") && !no_simd.contains("omp simd"));
    // A grid's plan jams nothing and shares no copies: kernels do neither.
    let grid = Plan::of(&hd, Target::Grid).unwrap();
    assert!(
        grid.body
            .states()
            .iter()
            .flat_map(|s| &s.steps)
            .all(|s| s.jam.is_none())
    );
}

/// The plan decides which index-table reads a team checks once per row (a horizontal
/// point, before the level loop): the printer checks them there where the plan says, and
/// per element where it does not.
#[test]
fn the_c_printer_checks_table_reads_per_row_where_the_plan_says() {
    use sdflow_codegen::cfamily::Dialect;
    use sdflow_codegen::cpu::OpenMp;
    use sdflow_codegen::cpu::emit::emit_plan;

    let mut b = SdfgBuilder::new("gather");
    b.symbol("E", DType::I64)
        .symbol("C", DType::I64)
        .symbol("K", DType::I64)
        .array("e2c", DType::I64, ["E", "2"])
        .array("u", DType::F64, ["C", "K"])
        .array("out", DType::F64, ["E", "K"]);
    b.state("s", |s| {
        s.map("m", &["e", "k"], &["0:E", "0:K"], |m| {
            m.tasklet(
                "t",
                &[("a", "u[e2c[e, 0], k]"), ("b", "u[e2c[e, 1], k]")],
                &[("o", "out[e, k]")],
                "o = a - b",
            );
        });
    });
    let sdfg = b.build();
    assert_eq!(sdfg.validate(), Ok(()));
    let plan = Plan::of(&sdfg, Target::default()).unwrap();
    let StepKind::ParallelMap { row_checks, .. } = &plan.body.states()[0].steps[0].kind else {
        panic!("a parallel map: {}", plan.to_text())
    };
    assert_eq!(
        row_checks.as_ref().map(Vec::len),
        Some(2),
        "{}",
        plan.to_text()
    );
    assert!(plan.to_text().contains("tables checked per row (2 reads)"));
    let text = |p: &Plan| {
        let (c, _) = emit_plan(&sdfg, p, &Default::default()).unwrap();
        c.replace(&OpenMp.prelude(), "")
    };
    let per_row = text(&plan);
    assert!(per_row.contains("int sdf_rok = 1;"), "{per_row}");
    let mut plain = plan.clone();
    if let StepKind::ParallelMap { row_checks, .. } =
        &mut first_state(&mut plain.body).unwrap().steps[0].kind
    {
        *row_checks = None;
    }
    let per_element = text(&plain);
    assert!(!per_element.contains("sdf_rok"), "{per_element}");
    // A grid's plan checks no rows: each thread is one point.
    let grid = Plan::of(&sdfg, Target::Grid).unwrap();
    assert!(matches!(
        grid.body.states()[0].steps[0].kind,
        StepKind::ParallelMap {
            row_checks: None,
            ..
        }
    ));
}

/// A halo exchange is a start and a finish: with overlap, work that does not touch the
/// field runs between them and a stencil over it is split — its interior before the
/// finish, its rim (four boxes) after; without, the finish follows the start and the
/// stencil is whole. Either way it is numbered and shown by `to_text`.
#[test]
fn an_exchange_finishes_late_and_splits_the_stencil_that_needs_it() {
    use sdflow_codegen::plan::MapPart;
    use sdflow_ir::{Decomposition, HaloExchange};
    let mut b = SdfgBuilder::new("x");
    b.symbol("N", DType::I64)
        .array("u", DType::F64, ["N + 2", "N + 2"])
        .array("v", DType::F64, ["N + 2", "N + 2"])
        .array("w", DType::F64, ["N + 2", "N + 2"])
        .array("out", DType::F64, ["N + 2", "N + 2"]);
    b.state("exchange", |s| {
        s.halo_exchange(
            &["u"],
            HaloExchange {
                decomposition: Decomposition::Structured {
                    ranks: [2, 2],
                    width: 1,
                    periodic: [true, true],
                    corners: false,
                },
            },
        );
    });
    b.state("independent", |s| {
        s.map("scale", &["i", "j"], &["0:N+2", "0:N+2"], |m| {
            m.tasklet(
                "scale",
                &[("a", "v[i, j]")],
                &[("o", "w[i, j]")],
                "o = 2.0 * a",
            );
        });
    });
    b.state("stencil", |s| {
        s.map("lap", &["i", "j"], &["1:N+1", "1:N+1"], |m| {
            m.tasklet(
                "lap",
                &[
                    ("a", "u[i - 1, j]"),
                    ("b", "u[i + 1, j]"),
                    ("c", "u[i, j + 1]"),
                ],
                &[("o", "out[i, j]")],
                "o = a + b + c",
            );
        });
    });
    let s = b.build();
    assert_eq!(s.validate(), Ok(()));
    let kinds = |p: &Plan| -> Vec<Vec<String>> {
        p.body
            .states()
            .iter()
            .map(|st| {
                st.steps
                    .iter()
                    .map(|x| {
                        let part = match &x.part {
                            None => "",
                            Some(MapPart::Interior(_)) => " interior",
                            Some(MapPart::Rim(_)) => " rim",
                        };
                        format!("{}{part} {:?}", x.kind_name(), x.waits)
                    })
                    .collect()
            })
            .collect()
    };
    let plan = Plan::of(&s, Target::default()).unwrap();
    assert_eq!(
        kinds(&plan),
        [
            vec!["exchange start []"],
            vec!["parallel map []"],
            vec![
                "parallel map interior []",
                "exchange finish []",
                "parallel map rim [1]"
            ],
        ]
    );
    assert_eq!(plan.exchanges().len(), 1);
    // The interior: i + 1 and i - 1 within the owned rows 1..N+1 leave 2..N; j + 1 within
    // 1..N+1 leaves 1..N (clamped to the map's range, for any N). The rim's four boxes
    // and the interior cover the map's points once.
    let st = plan.body.states()[2];
    let Some(MapPart::Interior(r)) = &st.steps[0].part else {
        panic!("{:?}", st.steps[0].part)
    };
    let Some(MapPart::Rim(boxes)) = &st.steps[2].part else {
        panic!("{:?}", st.steps[2].part)
    };
    assert_eq!(boxes.len(), 4);
    for n in [0i64, 1, 2, 3, 10] {
        let at = |e: &SymExpr| e.eval(&|x| (x == "N").then_some(n)).unwrap();
        let span = |r: &[sdflow_ir::Range]| -> Vec<(i64, i64)> {
            r.iter().map(|r| (at(&r.start), at(&r.end))).collect()
        };
        if n == 10 {
            assert_eq!(span(r), [(2, 10), (1, 10)]);
        }
        let mut hits = std::collections::BTreeMap::new();
        for b in std::iter::once(r.as_slice()).chain(boxes.iter().map(Vec::as_slice)) {
            let s = span(b);
            for i in s[0].0..s[0].1 {
                for j in s[1].0..s[1].1 {
                    *hits.entry((i, j)).or_insert(0) += 1;
                }
            }
        }
        assert_eq!(hits.len() as i64, n * n, "N = {n}");
        assert!(hits.values().all(|&c| c == 1), "N = {n}");
        assert!(
            hits.keys()
                .all(|&(i, j)| (1..=n).contains(&i) && (1..=n).contains(&j))
        );
    }
    assert!(plan.to_text().contains("(rim: 4 boxes) after 1"));
    let off = Plan::of_with(&s, Target::default(), false).unwrap();
    assert_eq!(
        kinds(&off),
        [
            vec!["exchange start []", "exchange finish [0]"],
            vec!["parallel map []"],
            vec!["parallel map []"],
        ]
    );
}
