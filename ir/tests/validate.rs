//! Tests of `Sdfg::validate`: valid programs pass, and each class of problem is found and
//! located.

use sdflow_ir::validate::{Problem, ProblemKind};
use sdflow_ir::*;

mod common;
use common::laplace;

fn problems(s: &Sdfg) -> Vec<Problem> {
    match s.validate() {
        Ok(()) => Vec::new(),
        Err(p) => p,
    }
}

/// The first problem of this kind, with all problems printed on failure.
fn find(s: &Sdfg, kind: ProblemKind) -> Problem {
    let ps = problems(s);
    let text: Vec<String> = ps.iter().map(|p| format!("{:?}: {p}", p.kind)).collect();
    ps.into_iter()
        .find(|p| p.kind == kind)
        .unwrap_or_else(|| panic!("no {kind:?} problem among: {text:#?}"))
}

fn assert_ok(s: &Sdfg) {
    let ps = problems(s);
    let text: Vec<String> = ps.iter().map(ToString::to_string).collect();
    assert!(ps.is_empty(), "unexpected problems: {text:#?}");
}

fn main_graph(s: &mut Sdfg) -> &mut Dataflow {
    &mut s.states[0].graph
}

fn map_of(g: &mut Dataflow) -> &mut MapScope {
    let n = g
        .node_ids()
        .into_iter()
        .find(|n| matches!(g.node(*n), Node::Map(_)))
        .expect("a map");
    match &mut g.graph[n] {
        Node::Map(m) => m,
        _ => unreachable!(),
    }
}

fn tasklet_of(g: &mut Dataflow) -> &mut Tasklet {
    let n = g
        .node_ids()
        .into_iter()
        .find(|n| matches!(g.node(*n), Node::Tasklet(_)))
        .expect("a tasklet");
    match &mut g.graph[n] {
        Node::Tasklet(t) => t,
        _ => unreachable!(),
    }
}

const LAP_MAP: &str = "sdfg 'laplace' > state 'main' (#0) > map 'lap' (node 0)";

#[test]
fn laplacian_is_valid() {
    assert_ok(&laplace());
}

#[test]
fn loop_and_if_program_is_valid() {
    let mut b = SdfgBuilder::new("timeloop");
    b.symbol("N", DType::I64)
        .symbol("T", DType::I64)
        .symbol("t", DType::I64)
        .scalar("go", DType::I64)
        .array("a", DType::F64, ["N"])
        .array("b", DType::F64, ["N"]);
    let s0 = b.state("step", |s| {
        s.map("m", &["i"], &["0:N"], |m| {
            m.tasklet("inc", &[("x", "a[i]")], &[("y", "b[i]")], "y = x + 1.0");
        });
    });
    let s1 = b.state("back", |s| {
        s.copy("b[0:N]", "a[0:N]");
    });
    b.body(Block::for_loop(
        "t",
        0,
        SymExpr::parse("t < T").unwrap(),
        SymExpr::parse("t + 1").unwrap(),
        Block::seq([
            Block::State(s0),
            Block::if_else(
                SymExpr::parse("go > 0 && t % 2 == 0").unwrap(),
                Block::State(s1),
                Block::empty(),
            ),
        ]),
    ));
    assert_ok(&b.build());
}

fn inner_sdfg() -> Sdfg {
    let mut b = SdfgBuilder::new("inner");
    b.symbol("N", DType::I64)
        .array("a", DType::F64, ["N"])
        .array("b", DType::F64, ["N"]);
    b.state("body", |s| {
        s.map("m", &["i"], &["0:N"], |m| {
            m.tasklet("dbl", &[("x", "a[i]")], &[("y", "b[i]")], "y = 2.0 * x");
        });
    });
    b.build()
}

fn outer_with_nested() -> Sdfg {
    let mut b = SdfgBuilder::new("outer");
    b.symbol("M", DType::I64)
        .array("x", DType::F64, ["M"])
        .array("y", DType::F64, ["M"]);
    b.state("call", |s| {
        s.nested(
            inner_sdfg(),
            &[("N", "M")],
            &[("a", "x[0:M]")],
            &[("b", "y[0:M]")],
        );
    });
    b.build()
}

#[test]
fn nested_sdfg_is_valid() {
    assert_ok(&outer_with_nested());
}

#[test]
fn nested_connector_volume_must_match_the_callee() {
    let mut s = outer_with_nested();
    // The callee's 'a' holds N = M elements; the caller now passes M - 1.
    let g = &mut s.states[0].graph;
    let e = g.edge_ids()[0];
    g.graph[e].memlet = Memlet::parse("x[1:M]");
    let p = problems(&s);
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].kind, ProblemKind::NestedSdfg);
    assert_eq!(
        p[0].to_string(),
        "sdfg 'outer' > state 'call' (#0) > nested SDFG 'inner' (node 0): connector 'a' of nested SDFG 'inner' holds M element(s) but memlet 'x[1:M]' moves M - 1"
    );
}

#[test]
fn float_parameters_map_only_to_caller_symbols_of_their_type() {
    let mut inner = SdfgBuilder::new("inner");
    inner
        .symbol("alpha", DType::F64)
        .array("a", DType::F64, [4]);
    inner.state("body", |s| {
        s.map("m", &["i"], &["0:4"], |m| {
            m.tasklet("sc", &[("x", "a[i]")], &[("y", "a[i]")], "y = alpha * x");
        });
    });
    let inner = inner.build();
    let outer = |value: &str| {
        let mut b = SdfgBuilder::new("outer");
        b.symbol("dt", DType::F64)
            .symbol("n", DType::I64)
            .array("u", DType::F64, [4]);
        b.state("call", |s| {
            s.nested(
                inner.clone(),
                &[("alpha", value)],
                &[("a", "u[0:4]")],
                &[("a", "u[0:4]")],
            );
        });
        b.build()
    };
    assert_ok(&outer("dt"));
    for bad in ["n", "dt + 1", "2"] {
        let p = problems(&outer(bad));
        assert_eq!(p.len(), 1, "{bad}: {p:?}");
        assert_eq!(p[0].kind, ProblemKind::NestedSdfg);
        assert!(
            p[0].message.contains(&format!("symbol 'alpha' of nested SDFG 'inner' is f64: map it to a caller symbol of type f64, not '{bad}'")),
            "{}",
            p[0]
        );
    }
}

fn gather() -> Sdfg {
    let mut b = SdfgBuilder::new("gather");
    b.symbol("E", DType::I64)
        .symbol("C", DType::I64)
        .array("e2c", DType::I64, ["E", "2"])
        .array("c", DType::F64, ["C"])
        .array("out", DType::F64, ["E"]);
    b.state("g", |s| {
        s.map("edges", &["e"], &["0:E"], |m| {
            m.tasklet(
                "sum",
                &[("l", "c[e2c[e, 0]]"), ("r", "c[e2c[e, 1]]")],
                &[("o", "out[e]")],
                "o = l + r",
            );
        });
    });
    b.build()
}

#[test]
fn neighbour_gather_is_valid() {
    assert_ok(&gather());
}

#[test]
fn location_display_names_the_path() {
    let mut s = laplace();
    let t = tasklet_of(&mut map_of(main_graph(&mut s)).body);
    t.inputs.insert("c".into(), DType::F32);
    let p = find(&s, ProblemKind::DTypeMismatch);
    assert_eq!(
        p.to_string(),
        format!(
            "{LAP_MAP} > edge 0 (access 'u' -> tasklet 'lap'): tasklet 'lap' reads connector 'c' (f32) from 'u' (f64)"
        )
    );
}

#[test]
fn undefined_data() {
    let mut s = laplace();
    main_graph(&mut s).add_access("ghost");
    let p = find(&s, ProblemKind::UndefinedData);
    assert!(
        p.to_string()
            .contains("state 'main' (#0) > access 'ghost' (node 3)"),
        "{p}"
    );
}

#[test]
fn undefined_symbol_in_shape() {
    let mut s = laplace();
    if let Some(DataDesc::Array(a)) = s.arrays.get_mut("u") {
        a.shape[1] = SymExpr::from("K");
    }
    let p = find(&s, ProblemKind::UndefinedSymbol);
    assert!(
        p.to_string()
            .starts_with("sdfg 'laplace' > array 'u': undefined symbol 'K'"),
        "{p}"
    );
}

#[test]
fn float_symbol_in_range() {
    let mut s = laplace();
    s.symbols.insert("alpha".into(), Symbol::new(DType::F64));
    map_of(main_graph(&mut s)).ranges[0] = Range::parse("1:alpha").unwrap();
    let p = find(&s, ProblemKind::FloatSymbol);
    assert!(p.to_string().starts_with(LAP_MAP), "{p}");
    assert!(p.message.contains("f64 symbol 'alpha'"), "{p}");
}

#[test]
fn dangling_input_connector() {
    let mut s = laplace();
    tasklet_of(&mut map_of(main_graph(&mut s)).body)
        .inputs
        .insert("q".into(), DType::F64);
    let p = find(&s, ProblemKind::DanglingConnector);
    assert!(
        p.to_string()
            .contains("> tasklet 'lap' (node 0): input connector 'q'"),
        "{p}"
    );
}

#[test]
fn unknown_connector() {
    let mut s = laplace();
    let body = &mut map_of(main_graph(&mut s)).body;
    let e = body.edge_ids()[0];
    body.graph[e].dst_conn = Some("zz".into());
    let p = find(&s, ProblemKind::UnknownConnector);
    assert!(
        p.to_string()
            .contains("edge 0 (access 'u' -> tasklet 'lap')"),
        "{p}"
    );
    assert!(p.message.contains("'zz'"), "{p}");
}

#[test]
fn map_boundary_missing_in_edge() {
    let mut s = laplace();
    let g = main_graph(&mut s);
    let e = g
        .edge_ids()
        .into_iter()
        .find(|e| g.edge(*e).memlet.data == "u")
        .unwrap();
    g.graph.remove_edge(e);
    let p = find(&s, ProblemKind::MapBoundary);
    assert!(
        p.to_string().contains(&format!("{LAP_MAP} > access 'u'")),
        "{p}"
    );
    assert!(p.message.contains("reads 'u'"), "{p}");
}

#[test]
fn map_in_edge_never_read() {
    let mut s = laplace();
    let g = main_graph(&mut s);
    let m = g.node_ids()[0];
    let a = g.add_access("out");
    g.add_edge(a, None, m, None, Memlet::parse("out[0:N, 0:N]"));
    let p = find(&s, ProblemKind::MapBoundary);
    assert!(
        p.message
            .contains("carries 'out', but the body never reads it"),
        "{p}"
    );
}

#[test]
fn not_covered() {
    let mut s = laplace();
    let g = main_graph(&mut s);
    let e = g
        .edge_ids()
        .into_iter()
        .find(|e| g.edge(*e).memlet.data == "u")
        .unwrap();
    g.graph[e].memlet.subset = Subset::parse("1:N, 0:N").unwrap();
    let p = find(&s, ProblemKind::NotCovered);
    assert!(p.to_string().contains("access 'u' -> tasklet 'lap'"), "{p}");
    assert!(p.message.contains("'u' [i - 1, j]"), "{p}");
}

#[test]
fn out_of_bounds() {
    let mut s = laplace();
    map_of(main_graph(&mut s)).ranges[0] = Range::parse("0:N-1").unwrap();
    let p = find(&s, ProblemKind::OutOfBounds);
    assert!(p.message.contains("below 0 in dimension 0 of 'u'"), "{p}");
}

#[test]
fn rank_mismatch() {
    let mut s = laplace();
    let body = &mut map_of(main_graph(&mut s)).body;
    let e = body.edge_ids()[0];
    body.graph[e].memlet.subset = Subset::parse("i").unwrap();
    let p = find(&s, ProblemKind::RankMismatch);
    assert!(
        p.to_string()
            .contains("edge 0 (access 'u' -> tasklet 'lap')"),
        "{p}"
    );
    assert!(p.message.contains("has rank 1 but 'u' has rank 2"), "{p}");
}

#[test]
fn cycle() {
    let mut s = laplace();
    let g = main_graph(&mut s);
    let (m, out) = (g.node_ids()[0], g.node_ids()[2]);
    g.add_edge(out, None, m, None, Memlet::parse("out[0:N, 0:N]"));
    let p = find(&s, ProblemKind::Cycle);
    assert!(p.message.contains("is on a cycle"), "{p}");
}

fn two_writers(wcr: &str) -> Sdfg {
    let mut b = SdfgBuilder::new("race");
    b.symbol("N", DType::I64)
        .array("a", DType::F64, ["N"])
        .array("out", DType::F64, ["N"]);
    let w = format!("out[i]{wcr}");
    b.state("s", |s| {
        s.map("first", &["i"], &["0:N"], |m| {
            m.tasklet("t1", &[("x", "a[i]")], &[("y", w.as_str())], "y = x");
        });
        s.map("second", &["i"], &["0:N"], |m| {
            m.tasklet("t2", &[("x", "a[i]")], &[("y", w.as_str())], "y = 2.0 * x");
        });
    });
    b.build()
}

#[test]
fn write_race_between_unordered_maps() {
    let s = two_writers("");
    let p = find(&s, ProblemKind::WriteRace);
    assert!(
        p.to_string()
            .starts_with("sdfg 'race' > state 's' (#0): map 'first'"),
        "{p}"
    );
    assert!(
        p.message.contains("map 'second'") && p.message.contains("'out'"),
        "{p}"
    );
    // Both with write-conflict resolution: no race.
    assert_ok(&two_writers(" (wcr: sum)"));
}

#[test]
fn loop_var_reassigned() {
    let mut s = laplace();
    s.symbols.insert("t".into(), Symbol::new(DType::I64));
    s.body = Block::for_loop(
        "t",
        0,
        SymExpr::parse("t < 10").unwrap(),
        SymExpr::parse("t + 1").unwrap(),
        Block::seq([
            Block::State(StateId(0)),
            Block::Assign(vec![("t".into(), SymExpr::from(3))]),
        ]),
    );
    let p = find(&s, ProblemKind::LoopVarReassigned);
    assert_eq!(
        p.to_string(),
        "sdfg 'laplace' > loop 't': loop variable 't' is reassigned inside the loop by an assignment"
    );
}

#[test]
fn bad_name_and_name_clash() {
    let mut s = laplace();
    let u = s.arrays["u"].clone();
    s.arrays.insert("1u".into(), u.clone());
    s.arrays.insert("N".into(), u);
    let p = find(&s, ProblemKind::BadName);
    assert!(
        p.to_string().starts_with("sdfg 'laplace' > array '1u'"),
        "{p}"
    );
    let p = find(&s, ProblemKind::NameClash);
    assert!(
        p.to_string().starts_with("sdfg 'laplace' > array 'N'"),
        "{p}"
    );
}

#[test]
fn bad_edge_between_tasklets() {
    let mut s = laplace();
    let body = &mut map_of(main_graph(&mut s)).body;
    let t = body.node_ids()[0];
    let t2 = body.add_node(Node::Tasklet(Tasklet {
        name: "other".into(),
        inputs: [("z".to_string(), DType::F64)].into(),
        outputs: Default::default(),
        code: vec![],
    }));
    body.add_edge(t, Some("o"), t2, Some("z"), Memlet::parse("out[i, j]"));
    let p = find(&s, ProblemKind::BadEdge);
    assert!(
        p.to_string().contains("(tasklet 'lap' -> tasklet 'other')"),
        "{p}"
    );
}

#[test]
fn memlet_data_differs_from_access_node() {
    let mut s = laplace();
    let body = &mut map_of(main_graph(&mut s)).body;
    let e = body.edge_ids()[0];
    body.graph[e].memlet.data = "out".into();
    let p = find(&s, ProblemKind::BadEdge);
    assert!(
        p.message
            .contains("memlet data 'out' differs from the access node's data 'u'"),
        "{p}"
    );
}

#[test]
fn tasklet_memlet_not_an_element() {
    let mut s = laplace();
    let body = &mut map_of(main_graph(&mut s)).body;
    let e = body.edge_ids()[0];
    body.graph[e].memlet.subset = Subset::parse("i:i+2, j").unwrap();
    let p = find(&s, ProblemKind::BadMemlet);
    assert!(p.message.contains("not a single element"), "{p}");
}

#[test]
fn copy_volume_mismatch() {
    let mut b = SdfgBuilder::new("cp");
    b.array("a", DType::F64, ["10"])
        .array("b", DType::F64, ["10"]);
    b.state("s", |s| {
        s.copy("a[0:4]", "b[0:5]");
    });
    let p = find(&b.build(), ProblemKind::BadMemlet);
    assert!(
        p.to_string().contains("edge 0 (access 'a' -> access 'b')"),
        "{p}"
    );
}

#[test]
fn bad_indirect_table() {
    let mut s = gather();
    if let Some(DataDesc::Array(a)) = s.arrays.get_mut("e2c") {
        a.dtype = DType::F64;
    }
    let p = find(&s, ProblemKind::BadIndirect);
    assert!(p.message.contains("indirection table 'e2c' is f64"), "{p}");
}

#[test]
fn tasklet_code_errors() {
    let mut s = laplace();
    tasklet_of(&mut map_of(main_graph(&mut s)).body).code = vec![
        Stmt::parse("o = n + q").unwrap(),
        Stmt::parse("c = 1.0").unwrap(),
    ];
    let ps = problems(&s);
    let msgs: Vec<String> = ps
        .iter()
        .filter(|p| p.kind == ProblemKind::TaskletCode)
        .map(ToString::to_string)
        .collect();
    assert!(
        msgs.iter().any(|m| m.contains(
            "> tasklet 'lap' (node 0): tasklet 'lap', statement 'o = n + q': unknown name 'q'"
        )),
        "{msgs:#?}"
    );
    assert!(
        msgs.iter()
            .any(|m| m.contains("assigns input connector 'c'")),
        "{msgs:#?}"
    );
}

#[test]
fn tasklet_output_never_assigned() {
    let mut s = laplace();
    tasklet_of(&mut map_of(main_graph(&mut s)).body).code = vec![Stmt::parse("l = n").unwrap()];
    let p = find(&s, ProblemKind::TaskletCode);
    assert!(p.message.contains("never assigns output 'o'"), "{p}");
}

#[test]
fn bad_map() {
    let mut s = laplace();
    map_of(main_graph(&mut s)).ranges.pop();
    let p = find(&s, ProblemKind::BadMap);
    assert_eq!(
        p.to_string(),
        format!("{LAP_MAP}: map 'lap' has 2 parameter(s) but 1 range(s)")
    );
}

#[test]
fn bad_array_strides() {
    let mut s = laplace();
    if let Some(DataDesc::Array(a)) = s.arrays.get_mut("out") {
        a.strides.pop();
    }
    let p = find(&s, ProblemKind::BadArray);
    assert!(
        p.to_string()
            .starts_with("sdfg 'laplace' > array 'out': array 'out' has 2"),
        "{p}"
    );
}

#[test]
fn nested_missing_symbol_and_inner_problem() {
    let mut s = outer_with_nested();
    let Node::Nested(ns) = &mut s.states[0].graph.graph[NodeId::new(0)] else {
        panic!("nested node first")
    };
    ns.symbol_mapping.clear();
    ns.sdfg.states[0].graph.add_access("ghost");
    let p = find(&s, ProblemKind::NestedSdfg);
    assert!(
        p.to_string()
            .starts_with("sdfg 'outer' > state 'call' (#0) > nested SDFG 'inner' (node 0)"),
        "{p}"
    );
    assert!(p.message.contains("symbol 'N'"), "{p}");
    let p = find(&s, ProblemKind::UndefinedData);
    assert!(
        p.to_string().starts_with("sdfg 'outer' > state 'call' (#0) > nested SDFG 'inner' (node 0) > sdfg 'inner' > state 'body' (#0) > access 'ghost'"),
        "{p}"
    );
}

#[test]
fn nested_unknown_connector() {
    let mut s = outer_with_nested();
    let g = main_graph(&mut s);
    let e = g.edge_ids()[0];
    g.graph[e].dst_conn = Some("nope".into());
    let p = find(&s, ProblemKind::UnknownConnector);
    assert!(
        p.message
            .contains("'nope', which is not a non-transient container of 'inner'"),
        "{p}"
    );
}

#[test]
fn library_reduce_axes() {
    let mut b = SdfgBuilder::new("red");
    b.array("a", DType::F64, ["4", "5"])
        .array("s", DType::F64, ["4"]);
    b.state("s", |s| {
        s.reduce(Wcr::Sum, Some(vec![1]), None, "a[0:4, 0:5]", "s[0:4]");
    });
    let ok = b.build();
    assert_ok(&ok);
    let mut bad = ok.clone();
    let Node::Library(LibraryNode::Reduce(r)) = &mut bad.states[0].graph.graph[NodeId::new(0)]
    else {
        panic!("reduce first")
    };
    r.axes = Some(vec![2]);
    let p = find(&bad, ProblemKind::LibraryNode);
    assert!(
        p.to_string()
            .contains("library node 'reduce' (node 0): reduce axis 2"),
        "{p}"
    );
}

#[test]
fn control_flow_missing_and_unreferenced_states() {
    let mut s = laplace();
    s.body = Block::State(StateId(7));
    let ps = problems(&s);
    assert!(ps.iter().any(|p| p.kind == ProblemKind::ControlFlow
        && p.to_string()
            == "sdfg 'laplace': the control flow runs state #7, but the program has 1 state(s)"));
    assert!(ps.iter().any(|p| p.kind == ProblemKind::ControlFlow
        && p.to_string().starts_with(
            "sdfg 'laplace' > state 'main' (#0): state 'main' (#0) is referenced 0 times"
        )));
}

#[test]
fn arg_order_problems() {
    let mut s = laplace();
    s.arg_order = vec!["u".into(), "u".into()];
    let p = find(&s, ProblemKind::ArgOrder);
    assert_eq!(
        p.to_string(),
        "sdfg 'laplace' > arg_order: 'u' appears more than once in arg_order"
    );
}

#[test]
fn static_symbol_dtype_and_assignment() {
    let mut s = laplace();
    s.symbols.insert(
        "K".into(),
        Symbol {
            dtype: DType::I32,
            value: Some(Value::I64(3)),
            default: None,
        },
    );
    s.body = Block::seq([
        Block::Assign(vec![("K".into(), SymExpr::from(1))]),
        Block::State(StateId(0)),
    ]);
    let p = find(&s, ProblemKind::DTypeMismatch);
    assert!(
        p.to_string().starts_with("sdfg 'laplace' > symbol 'K'"),
        "{p}"
    );
    let p = find(&s, ProblemKind::ControlFlow);
    assert!(p.to_string().contains("assign 'K'"), "{p}");
}

#[test]
fn reports_every_problem_in_order() {
    let mut s = laplace();
    s.arg_order = vec!["nothing".into()];
    tasklet_of(&mut map_of(main_graph(&mut s)).body)
        .inputs
        .insert("c".into(), DType::I32);
    main_graph(&mut s).add_access("ghost");
    let ps = problems(&s);
    let kinds: Vec<ProblemKind> = ps.iter().map(|p| p.kind).collect();
    assert_eq!(
        kinds,
        vec![
            ProblemKind::UndefinedData,
            ProblemKind::DTypeMismatch,
            ProblemKind::UndefinedData
        ],
        "{ps:#?}"
    );
    // Deterministic.
    assert_eq!(ps, problems(&s));
}

#[test]
fn broken_graphs_do_not_panic() {
    let mut s = laplace();
    s.arrays.clear();
    s.symbols.clear();
    s.body = Block::seq([Block::State(StateId(u32::MAX)), Block::State(StateId(0))]);
    let body = &mut map_of(main_graph(&mut s)).body;
    for e in body.edge_ids() {
        body.graph[e].memlet.subset = Subset::parse("t[q], 0:3:0").unwrap();
    }
    let ps = problems(&s);
    assert!(ps.iter().any(|p| p.kind == ProblemKind::UndefinedData));
    assert!(ps.iter().any(|p| p.kind == ProblemKind::ControlFlow));
}

#[test]
fn transient_scalar_is_local_to_a_map_body() {
    let mut b = SdfgBuilder::new("tmp");
    b.symbol("N", DType::I64)
        .transient_scalar("tmp", DType::F64)
        .array("a", DType::F64, ["N"])
        .array("out", DType::F64, ["N"]);
    b.state("s", |s| {
        s.map("m", &["i"], &["0:N"], |m| {
            m.tasklet("t1", &[("x", "a[i]")], &[("y", "tmp")], "y = x * x");
            m.tasklet("t2", &[("x", "tmp")], &[("y", "out[i]")], "y = x + 1.0");
        });
    });
    let s = b.build();
    assert_ok(&s);
    // Without the scalar being transient, the body writes it without a map out-edge.
    let mut bad = s.clone();
    bad.arrays.insert(
        "tmp".into(),
        DataDesc::Scalar {
            dtype: DType::F64,
            transient: false,
        },
    );
    let p = find(&bad, ProblemKind::MapBoundary);
    assert!(p.message.contains("writes 'tmp'"), "{p}");
}

#[test]
fn reduce_output_must_hold_the_kept_axes() {
    let build = |out: &str, axes: Option<Vec<usize>>| {
        let mut b = SdfgBuilder::new("red");
        b.array("a", DType::F64, [4, 3]).array("c", DType::F64, [4]);
        b.state("s", |s| {
            s.reduce(
                Wcr::Sum,
                axes.clone(),
                Some(Value::F64(0.0)),
                "a[0:4, 0:3]",
                out,
            );
        });
        b.build()
    };
    assert_ok(&build("c[0:3]", Some(vec![0])));
    assert_ok(&build("c[0]", None));
    let p = problems(&build("c[0:4]", Some(vec![0])));
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].kind, ProblemKind::LibraryNode);
    assert_eq!(
        p[0].to_string(),
        "sdfg 'red' > state 's' (#0) > library node 'reduce' (node 0): reduce of 'a[0:4, 0:3]' keeps 3 element(s) but writes 'c[0:4]' (4)"
    );
}

#[test]
fn reserved_words_are_not_names() {
    for word in ["True", "nan", "and", "inf"] {
        let mut s = laplace();
        s.symbols.insert(word.to_string(), Symbol::new(DType::I64));
        let p = problems(&s);
        assert!(
            p.iter().any(|p| p.kind == ProblemKind::BadName
                && p.message.contains(&format!("'{word}' is a reserved word"))),
            "{word}: {p:?}"
        );
    }
}

#[test]
fn reading_an_index_table_races_with_an_unordered_writer() {
    let mut b = SdfgBuilder::new("tables");
    b.array("f", DType::F64, [4])
        .array("idx", DType::I64, [1])
        .array("out", DType::F64, [1]);
    b.state("s", |s| {
        s.tasklet("w", &[], &[("o", "idx[0]")], "o = 2");
        s.tasklet("r", &[("x", "f[idx[0]]")], &[("y", "out[0]")], "y = x");
    });
    let s = b.build();
    let p = find(&s, ProblemKind::WriteRace);
    assert!(
        p.message.contains("tasklet 'w'")
            && p.message.contains("writes 'idx'")
            && p.message.contains("tasklet 'r'")
            && p.message.contains("reads"),
        "{p}"
    );
}

/// A program of `n` states, each one map reading `a[i - 1]` and `a[i + 1]`; the states in
/// `bad` run their map over `0:N` (both reads leave the array), the others over `1:N-1`.
fn repeated_stencil(n: usize, bad: &[usize]) -> Sdfg {
    let mut b = SdfgBuilder::new("repeated");
    b.symbol("N", DType::I64)
        .array("a", DType::F64, ["N"])
        .array("b", DType::F64, ["N"]);
    for k in 0..n {
        let range = if bad.contains(&k) { "0:N" } else { "1:N-1" };
        b.state(&format!("s{k}"), |s| {
            s.map(&format!("m{k}"), &["i"], &[range], |m| {
                m.tasklet(
                    "t",
                    &[("x", "a[i - 1]"), ("y", "a[i + 1]")],
                    &[("z", "b[i]")],
                    "z = x + y",
                );
            });
        });
    }
    b.build()
}

/// `repeated_stencil` with every map's edge from `a` carrying `a[0:N]`.
fn repeated_stencil_whole_edges(n: usize, bad: &[usize]) -> Sdfg {
    let mut s = repeated_stencil(n, bad);
    for state in &mut s.states {
        let g = &mut state.graph;
        for e in g.edge_ids() {
            if g.edge(e).memlet.data == "a" {
                g.graph[e].memlet.subset = Subset::parse("0:N").unwrap();
            }
        }
    }
    s
}

/// The states named in the problems of kind `kind` of `s`, one entry per problem.
fn states_with(s: &Sdfg, kind: ProblemKind) -> Vec<String> {
    problems(s)
        .into_iter()
        .filter(|p| p.kind == kind)
        .map(|p| {
            let text = p.to_string();
            let state = text.split("state '").nth(1).unwrap_or_default();
            state.split('\'').next().unwrap_or_default().to_string()
        })
        .collect()
}

#[test]
fn repeated_subsets_are_checked_in_every_scope() {
    // Validation remembers the bounds of a subset over a scope's ranges: the same
    // subsets recur in every state, over good and bad ranges, and each bad state still
    // reports its own problems (one program checked in one thread, one in parallel).
    // The same holds for the coverage of body memlets by the map's edges, which is
    // remembered too: with `a[0:N]` on every edge, the reads are covered over `1:N-1`
    // and not over `0:N`.
    type Program = fn(usize, &[usize]) -> Sdfg;
    let programs: [(Program, ProblemKind); 2] = [
        (repeated_stencil, ProblemKind::OutOfBounds),
        (repeated_stencil_whole_edges, ProblemKind::NotCovered),
    ];
    for (program, kind) in programs {
        let one = states_with(&program(1, &[0]), kind);
        assert!(!one.is_empty(), "{kind:?}");
        assert!(one.iter().all(|s| s == "s0"), "{one:?}");
        for n in [20, 80] {
            let bad: Vec<usize> = (0..n).filter(|k| k % 7 == 3).collect();
            let found = states_with(&program(n, &bad), kind);
            let expected: Vec<String> = bad
                .iter()
                .flat_map(|k| std::iter::repeat_n(format!("s{k}"), one.len()))
                .collect();
            assert_eq!(found, expected, "{kind:?}, n = {n}");
        }
        assert_ok(&program(80, &[]));
    }
}
