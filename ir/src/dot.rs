//! Drawing SDFGs as Graphviz DOT, through `graphviz-rust`'s graph structures.
//!
//! One `digraph` per program. Each state is a cluster; each map is a nested cluster
//! holding an entry node (trapezium, where the map's incoming memlets arrive), its body,
//! and an exit node (inverted trapezium, where outgoing memlets leave); a nested SDFG is a
//! cluster with a call node and its own states. Dashed scope edges join a map's entry to
//! the body's sources and the body's sinks to its exit. Memlet edges are labelled `data[subset]`
//! (with ` (wcr: sum)` etc.), connectors appear as head/tail labels. The control flow is a
//! second cluster: one node per state block, loop headers (hexagons) with back edges, if
//! diamonds with `then`/`else` edges and a join point, assignments as notes. Invisible
//! edges stack the states top to bottom in state order.
//!
//! Output is deterministic: nodes and edges are emitted in index order and identifiers
//! are derived from positions (`s0_n2_n1` is node 1 in the body of map node 2 of state 0).

use graphviz_rust::dot_structures::{
    Attribute, Edge as DotEdge, EdgeTy, Graph, Id, Node as DotNode, NodeId as DotNodeId, Stmt,
    Subgraph, Vertex,
};
use graphviz_rust::printer::{DotPrinter, PrinterContext};

use crate::control::Block;
use crate::dataflow::{Dataflow, LibraryNode, Node};
use crate::expr::Stmt as CodeStmt;
use crate::sdfg::Sdfg;

fn quoted(s: &str) -> Id {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    Id::Escaped(out)
}

fn plain(s: &str) -> Id {
    Id::Plain(s.to_string())
}

fn attr(k: &str, v: &str) -> Attribute {
    Attribute(plain(k), quoted(v))
}

fn node(id: &str, attrs: Vec<Attribute>) -> Stmt {
    Stmt::Node(DotNode::new(DotNodeId(plain(id), None), attrs))
}

fn edge(a: &str, b: &str, attrs: Vec<Attribute>) -> Stmt {
    Stmt::Edge(DotEdge {
        ty: EdgeTy::Pair(
            Vertex::N(DotNodeId(plain(a), None)),
            Vertex::N(DotNodeId(plain(b), None)),
        ),
        attributes: attrs,
    })
}

fn cluster(id: &str, label: &str, style: &str, mut stmts: Vec<Stmt>) -> Stmt {
    let mut head = vec![
        Stmt::Attribute(attr("label", label)),
        Stmt::Attribute(attr("style", style)),
    ];
    head.append(&mut stmts);
    Stmt::Subgraph(Subgraph {
        id: plain(&format!("cluster_{id}")),
        stmts: head,
    })
}

/// The DOT graph structure of a program.
pub fn sdfg_graph(sdfg: &Sdfg) -> Graph {
    let mut stmts = vec![
        Stmt::Attribute(attr("label", &format!("SDFG '{}'", sdfg.name))),
        Stmt::Attribute(attr("compound", "true")),
        Stmt::Attribute(attr("fontname", "Helvetica")),
    ];
    stmts.extend(draw_states(sdfg, "s"));
    let mut cf = Vec::new();
    let mut counter = 0;
    draw_block(sdfg, &sdfg.body, "cf", &mut counter, &mut cf);
    stmts.push(cluster("control", "control flow", "dashed", cf));
    Graph::DiGraph {
        id: quoted(&sdfg.name),
        strict: false,
        stmts,
    }
}

/// DOT text of a program.
pub fn to_dot(sdfg: &Sdfg) -> String {
    let mut ctx = PrinterContext::default();
    let mut text = sdfg_graph(sdfg).print(&mut ctx);
    text.push('\n');
    text
}

/// The clusters of the states, stacked top to bottom in state order by invisible edges
/// from a sink of each state to a source of the next (without them Graphviz puts
/// unconnected clusters side by side, and a program of a hundred states becomes a drawing
/// a hundred states wide).
fn draw_states(sdfg: &Sdfg, prefix: &str) -> Vec<Stmt> {
    // (a source's incoming end, a sink's outgoing end) of each state.
    let anchors: Vec<(String, String)> = sdfg
        .states
        .iter()
        .enumerate()
        .map(|(i, st)| {
            let id = format!("{prefix}{i}");
            let g = &st.graph;
            let ids = g.node_ids();
            let source = ids.iter().find(|&&n| g.in_degree(n) == 0);
            let sink = ids.iter().rev().find(|&&n| g.out_degree(n) == 0);
            match (source.or(ids.first()), sink.or(ids.last())) {
                (Some(&a), Some(&b)) => (ends(g, &id, a).0, ends(g, &id, b).1),
                _ => (format!("{id}_empty"), format!("{id}_empty")),
            }
        })
        .collect();
    let mut stmts: Vec<Stmt> = sdfg
        .states
        .iter()
        .enumerate()
        .map(|(i, st)| {
            let id = format!("{prefix}{i}");
            let mut inner = Vec::new();
            if st.graph.node_count() == 0 {
                inner.push(node(
                    &format!("{id}_empty"),
                    vec![attr("label", "(empty)"), attr("shape", "plaintext")],
                ));
            }
            draw_dataflow(sdfg, &st.graph, &id, &mut inner);
            cluster(
                &id,
                &format!("state '{}' (#{i})", st.name),
                "rounded",
                inner,
            )
        })
        .collect();
    stmts.extend(
        anchors
            .windows(2)
            .map(|w| edge(&w[0].1, &w[1].0, vec![attr("style", "invis")])),
    );
    stmts
}

/// Where edges attach to a node: (incoming end, outgoing end).
fn ends(df: &Dataflow, prefix: &str, n: crate::dataflow::NodeId) -> (String, String) {
    let id = format!("{prefix}_n{}", n.index());
    match df.node(n) {
        Node::Map(_) => (format!("{id}_entry"), format!("{id}_exit")),
        Node::Nested(_) => (format!("{id}_call"), format!("{id}_call")),
        _ => (id.clone(), id),
    }
}

fn tasklet_label(name: &str, code: &[CodeStmt]) -> String {
    let mut s = name.to_string();
    for c in code {
        s.push('\n');
        s.push_str(&c.to_string());
    }
    s
}

fn draw_dataflow(sdfg: &Sdfg, df: &Dataflow, prefix: &str, out: &mut Vec<Stmt>) {
    for n in df.node_ids() {
        let id = format!("{prefix}_n{}", n.index());
        match df.node(n) {
            Node::Access(d) => {
                let transient = sdfg.arrays.get(d).is_some_and(|a| a.transient());
                let style = if transient { "dashed" } else { "solid" };
                out.push(node(
                    &id,
                    vec![
                        attr("label", d),
                        attr("shape", "ellipse"),
                        attr("style", style),
                    ],
                ));
            }
            Node::Tasklet(t) => {
                out.push(node(
                    &id,
                    vec![
                        attr("label", &tasklet_label(&t.name, &t.code)),
                        attr("shape", "octagon"),
                    ],
                ));
            }
            Node::Library(LibraryNode::Reduce(r)) => {
                let axes = r
                    .axes
                    .as_ref()
                    .map(|a| format!("{a:?}"))
                    .unwrap_or_else(|| "all".into());
                out.push(node(
                    &id,
                    vec![
                        attr("label", &format!("reduce {} over {axes}", r.op)),
                        attr("shape", "invhouse"),
                    ],
                ));
            }
            Node::Map(m) => {
                let ranges: Vec<String> = m
                    .params
                    .iter()
                    .zip(&m.ranges)
                    .map(|(p, r)| format!("{p}={r}"))
                    .collect();
                let head = format!("{}[{}] ({})", m.label, ranges.join(", "), m.schedule.name());
                let mut inner = vec![
                    node(
                        &format!("{id}_entry"),
                        vec![attr("label", &head), attr("shape", "trapezium")],
                    ),
                    node(
                        &format!("{id}_exit"),
                        vec![attr("label", &m.label), attr("shape", "invtrapezium")],
                    ),
                ];
                draw_dataflow(sdfg, &m.body, &id, &mut inner);
                // Scope edges: entry to the body's sources, the body's sinks to exit.
                let scope = || vec![attr("style", "dashed"), attr("arrowhead", "none")];
                for b in m.body.node_ids() {
                    let (b_in, b_out) = ends(&m.body, &id, b);
                    if m.body.in_degree(b) == 0 {
                        inner.push(edge(&format!("{id}_entry"), &b_in, scope()));
                    }
                    if m.body.out_degree(b) == 0 {
                        inner.push(edge(&b_out, &format!("{id}_exit"), scope()));
                    }
                }
                out.push(cluster(&id, &format!("map '{}'", m.label), "filled", inner));
            }
            Node::Nested(ns) => {
                let syms: Vec<String> = ns
                    .symbol_mapping
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                let mut inner = vec![node(
                    &format!("{id}_call"),
                    vec![
                        attr(
                            "label",
                            &format!("call '{}' ({})", ns.sdfg.name, syms.join(", ")),
                        ),
                        attr("shape", "box3d"),
                    ],
                )];
                inner.extend(draw_states(&ns.sdfg, &format!("{id}_s")));
                out.push(cluster(
                    &id,
                    &format!("nested SDFG '{}'", ns.sdfg.name),
                    "bold",
                    inner,
                ));
            }
        }
    }
    for e in df.edge_ids() {
        let (s, d) = df.endpoints(e);
        let edge_data = df.edge(e);
        let mut attrs = vec![attr("label", &edge_data.memlet.to_string())];
        if let Some(c) = &edge_data.src_conn {
            attrs.push(attr("taillabel", c));
        }
        if let Some(c) = &edge_data.dst_conn {
            attrs.push(attr("headlabel", c));
        }
        out.push(edge(&ends(df, prefix, s).1, &ends(df, prefix, d).0, attrs));
    }
}

/// Draws a block; returns its (entry, exit) node ids.
fn draw_block(
    sdfg: &Sdfg,
    b: &Block,
    prefix: &str,
    counter: &mut usize,
    out: &mut Vec<Stmt>,
) -> (String, String) {
    let mut fresh = |out: &mut Vec<Stmt>, label: &str, shape: &str| {
        let id = format!("{prefix}{}", *counter);
        *counter += 1;
        out.push(node(&id, vec![attr("label", label), attr("shape", shape)]));
        id
    };
    match b {
        Block::State(s) => {
            let name = sdfg.state(*s).map(|st| st.name.as_str()).unwrap_or("?");
            let id = fresh(out, &format!("{name} (#{})", s.0), "box");
            (id.clone(), id)
        }
        Block::Assign(a) => {
            let text: Vec<String> = a.iter().map(|(k, v)| format!("{k} = {v}")).collect();
            let id = fresh(out, &text.join("\n"), "note");
            (id.clone(), id)
        }
        Block::Seq(bs) if bs.is_empty() => {
            let id = fresh(out, "", "point");
            (id.clone(), id)
        }
        Block::Seq(bs) => {
            let mut first = None;
            let mut prev: Option<String> = None;
            for b in bs {
                let (en, ex) = draw_block(sdfg, b, prefix, counter, out);
                if let Some(p) = prev {
                    out.push(edge(&p, &en, vec![]));
                }
                first.get_or_insert(en);
                prev = Some(ex);
            }
            (first.unwrap_or_default(), prev.unwrap_or_default())
        }
        Block::Loop(l) => {
            let head = fresh(
                out,
                &format!(
                    "for {v} = {}; {}; {v} = {}",
                    l.init,
                    l.cond,
                    l.update,
                    v = l.var
                ),
                "hexagon",
            );
            let (en, ex) = draw_block(sdfg, &l.body, prefix, counter, out);
            out.push(edge(&head, &en, vec![attr("label", "body")]));
            out.push(edge(
                &ex,
                &head,
                vec![attr("label", "next"), attr("style", "dashed")],
            ));
            (head.clone(), head)
        }
        Block::If(i) => {
            let head = fresh(out, &format!("if {}", i.cond), "diamond");
            let join = fresh(out, "", "point");
            for (label, branch) in [("then", &i.then), ("else", &i.otherwise)] {
                let (en, ex) = draw_block(sdfg, branch, prefix, counter, out);
                out.push(edge(&head, &en, vec![attr("label", label)]));
                out.push(edge(&ex, &join, vec![]));
            }
            (head, join)
        }
    }
}
