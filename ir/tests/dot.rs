//! DOT drawings parse back with graphviz-rust's parser, with the node and edge counts the
//! program implies, and are deterministic.

use graphviz_rust::dot_structures::{Graph, Stmt};
use sdflow_ir::{Block, DType, SdfgBuilder, Value, Wcr, dot};

#[derive(Default, Debug, PartialEq)]
struct Counts {
    nodes: usize,
    edges: usize,
    clusters: Vec<String>,
}

fn count(stmts: &[Stmt], c: &mut Counts) {
    for s in stmts {
        match s {
            Stmt::Node(_) => c.nodes += 1,
            Stmt::Edge(_) => c.edges += 1,
            Stmt::Subgraph(sg) => {
                c.clusters.push(sg.id.to_string());
                count(&sg.stmts, c);
            }
            _ => {}
        }
    }
}

fn parse_counts(text: &str) -> Counts {
    let g =
        graphviz_rust::parse(text).unwrap_or_else(|e| panic!("DOT does not parse: {e}\n{text}"));
    let Graph::DiGraph { stmts, .. } = g else {
        panic!("expected a digraph")
    };
    let mut c = Counts::default();
    count(&stmts, &mut c);
    c
}

fn laplace_loop() -> sdflow_ir::Sdfg {
    let mut b = SdfgBuilder::new("lap_loop");
    b.symbol("N", DType::I64)
        .symbol("T", DType::I64)
        .symbol("t", DType::I64)
        .symbol("flag", DType::I64)
        .array("u", DType::F64, ["N", "N"])
        .array("s", DType::F64, [1])
        .transient("lap", DType::F64, ["N", "N"]);
    let s0 = b.state("stencil", |s| {
        s.map("lap", &["i", "j"], &["1:N-1", "1:N-1"], |m| {
            m.tasklet(
                "lap",
                &[
                    ("c", "u[i, j]"),
                    ("n", "u[i-1, j]"),
                    ("so", "u[i+1, j]"),
                    ("w", "u[i, j-1]"),
                    ("e", "u[i, j+1]"),
                ],
                &[("o", "lap[i, j]")],
                "o = n + so + w + e - 4.0 * c",
            );
        });
        s.map("upd", &["i", "j"], &["1:N-1", "1:N-1"], |m| {
            m.tasklet(
                "upd",
                &[("l", "lap[i, j]"), ("x", "u[i, j]")],
                &[("o", "u[i, j]")],
                "o = x + 0.1 * l",
            );
        });
    });
    let s1 = b.state("sum", |s| {
        s.map("sum", &["i", "j"], &["0:N", "0:N"], |m| {
            m.tasklet(
                "acc",
                &[("x", "u[i, j]")],
                &[("o", "s[0] (wcr: sum)")],
                "o = x",
            );
        });
    });
    b.body(Block::seq([
        Block::for_loop("t", 0, "t < T", "t + 1", Block::State(s0)),
        Block::if_else("flag != 0", Block::State(s1), Block::empty()),
    ]));
    b.build()
}

#[test]
fn laplace_loop_counts() {
    let sdfg = laplace_loop();
    let c = parse_counts(&dot::to_dot(&sdfg));
    // State 0: access u, map lap (entry, exit, 3 body nodes: access u, tasklet, access lap),
    // access lap, map upd (entry, exit, 4 body: access lap, access u, tasklet, access u),
    // access u  => 1 + 5 + 1 + 6 + 1 = 14. State 1: access u, map (2 + 3), access s = 7.
    // Control flow: loop header, state, if diamond, join point, state, empty else (point) = 6.
    assert_eq!(c.nodes, 14 + 7 + 6);
    // State 0 edges: u->lap, lap->lap(access), 5 body in + 1 out; u->upd, lap->upd, upd->u,
    // body 2 in + 1 out => 2 + 6 + 3 + 3 = 14. State 1: 2 outer + 2 body = 4.
    // Control flow: body, next, seq edge loop->if, then, else, two joins = 7.
    // Scope edges (entry -> body sources, body sinks -> exit): lap 1 + 1, upd 2 + 1, sum 1 + 1.
    // One invisible edge stacks state 1 below state 0.
    assert_eq!(c.edges, 14 + 4 + 7 + 7 + 1);
    assert_eq!(dot::to_dot(&sdfg).matches(r#"[style="invis"]"#).count(), 1);
    assert_eq!(
        c.clusters,
        [
            "cluster_s0",
            "cluster_s0_n0",
            "cluster_s0_n3",
            "cluster_s1",
            "cluster_s1_n0",
            "cluster_control"
        ]
    );
}

#[test]
fn labels_carry_memlets_connectors_and_code() {
    let text = dot::to_dot(&laplace_loop());
    assert!(text.contains(r#"label="u[i - 1, j]""#), "{text}");
    assert!(text.contains(r#"headlabel="n""#));
    assert!(text.contains(r#"label="s[0] (wcr: sum)""#));
    assert!(text.contains(r#"label="upd\no = x + 0.1 * l""#));
    assert!(text.contains(r#"label="for t = 0; t < T; t = t + 1""#));
    assert!(text.contains(r#"label="if flag != 0""#));
    assert!(text.contains(r#"label="lap[i=1:N - 1, j=1:N - 1] (cpu_parallel)""#));
}

#[test]
fn nested_sdfgs_are_drawn_inside_their_node() {
    let mut inner = SdfgBuilder::new("scale");
    inner
        .symbol("n", DType::I64)
        .array("x", DType::F64, ["n"])
        .array("y", DType::F64, ["n"]);
    inner.state("body", |s| {
        s.map("m", &["i"], &["0:n"], |m| {
            m.tasklet("t", &[("a", "x[i]")], &[("b", "y[i]")], "b = 2.0 * a");
        });
    });
    let inner = inner.build();
    let mut b = SdfgBuilder::new("outer");
    b.static_symbol("N", Value::I64(8))
        .array("u", DType::F64, ["N"])
        .array("v", DType::F64, ["N"]);
    b.state("call", |s| {
        s.nested(
            inner,
            &[("n", "N - 2")],
            &[("x", "u[1:N-1]")],
            &[("y", "v[1:N-1]")],
        );
    });
    let sdfg = b.build();
    let text = dot::to_dot(&sdfg);
    let c = parse_counts(&text);
    // outer: u, call, v; inner state: x, map (entry, exit, x, t, y), y; control: one state.
    assert_eq!(c.nodes, 3 + 7 + 1);
    // Memlets: 2 outer, 2 inner state, 2 map body; scope edges: 2.
    assert_eq!(c.edges, 2 + 2 + 2 + 2);
    assert!(c.clusters.contains(&"cluster_s0_n0".to_string()));
    assert!(c.clusters.contains(&"cluster_s0_n0_s0".to_string()));
    assert!(text.contains(r#"label="call 'scale' (n=N - 2)""#));
    assert!(text.contains(r#"label="u[1:N - 1]""#));
}

#[test]
fn output_is_deterministic() {
    let a = dot::to_dot(&laplace_loop());
    let b = dot::to_dot(&laplace_loop().clone());
    assert_eq!(a, b);
    // A reduce node and a copy draw too.
    let mut r = SdfgBuilder::new("red");
    r.array("a", DType::F64, [4, 3])
        .array("c", DType::F64, [3])
        .array("d", DType::F64, [3]);
    r.state("s", |s| {
        s.reduce(
            Wcr::Sum,
            Some(vec![0]),
            Some(Value::F64(0.0)),
            "a[0:4, 0:3]",
            "c[0:3]",
        );
        s.copy("c[0:3]", "d[0:3]");
    });
    let text = dot::to_dot(&r.build());
    assert!(text.contains(r#"label="reduce sum over [0]""#), "{text}");
    assert!(text.contains(r#"label="c[0:3] -> [0:3]""#), "{text}");
    assert_eq!(parse_counts(&text).edges, 3);
}
