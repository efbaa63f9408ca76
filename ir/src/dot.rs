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
//!
//! Why one file of this size: the three levels of detail and the viewer's drawings
//! share one naming of nodes and one set of label printers, so that a node has the same
//! identifier in every drawing.

use graphviz_rust::dot_structures::{
    Attribute, Edge as DotEdge, EdgeTy, Graph, Id, Node as DotNode, NodeId as DotNodeId, Stmt,
    Subgraph, Vertex,
};
use graphviz_rust::printer::{DotPrinter, PrinterContext};

use crate::control::Block;
use crate::dataflow::{Dataflow, LibraryNode, MapScope, Node};
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
    let (label, stmts) = dataflow_graph(sdfg, None, false);
    digraph(&sdfg.name, &label, stmts)
}

/// The states (maps drawn whole, or `collapse`d to one node each) and the control flow.
fn dataflow_graph(sdfg: &Sdfg, marks: Option<&Marks>, collapse: bool) -> (String, Vec<Stmt>) {
    let mut stmts = draw_states(
        sdfg,
        "s",
        Style {
            collapse,
            marks,
            interactive: false,
        },
    );
    let mut cf = Vec::new();
    let mut counter = 0;
    draw_block(sdfg, &sdfg.body, "cf", &mut counter, None, &mut cf);
    stmts.push(cluster("control", "control flow", "dashed", cf));
    let label = if collapse {
        format!("SDFG '{}' (maps collapsed)", sdfg.name)
    } else {
        format!("SDFG '{}'", sdfg.name)
    };
    (label, stmts)
}

/// How the dataflow is drawn: maps collapsed or not, and marks of what the optimizer did.
#[derive(Clone, Copy, Default)]
struct Style<'a> {
    collapse: bool,
    marks: Option<&'a Marks>,
    /// For the viewer: ids on collapsed maps (`map-<node id>`) and classes on access
    /// nodes (`acc acc-<container>`), which its script finds in the SVG.
    interactive: bool,
}

impl Style<'_> {
    /// Inside a map body: everything drawn, marks kept.
    fn full(self) -> Self {
        Style {
            collapse: false,
            ..self
        }
    }
}

/// How the control flow's states are drawn: as boxes with their summary (and marks).
#[derive(Clone, Copy)]
struct Summary<'a> {
    marks: Option<&'a Marks>,
    /// For the viewer: each state's box gets the id `state-<index>`.
    interactive: bool,
}

/// DOT text of a program.
pub fn to_dot(sdfg: &Sdfg) -> String {
    let mut ctx = PrinterContext::default();
    let mut text = sdfg_graph(sdfg).print(&mut ctx);
    text.push('\n');
    text
}

/// How much of a program a drawing shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Detail {
    /// The control flow alone: one box per state with what it holds (maps, tasklets,
    /// nested calls, as counts) and the containers it reads and writes.
    Control,
    /// The states' dataflow, each map one node (its ranges and what its body holds).
    States,
    /// Everything: map bodies, nested SDFGs, every memlet.
    Full,
}

impl Detail {
    /// The detail called `name`: `control`, `states` or `full`.
    pub fn from_name(name: &str) -> Option<Detail> {
        match name {
            "control" => Some(Detail::Control),
            "states" => Some(Detail::States),
            "full" => Some(Detail::Full),
            _ => None,
        }
    }

    /// The level of detail that stays readable for a program of this size: a program
    /// of more than [`MAX_STATES`] states (its states' clusters stacked make a strip no
    /// one reads) gets the control flow; otherwise everything up to [`FULL_NODES`] nodes
    /// in all (bodies included), the states with collapsed maps up to [`STATE_NODES`]
    /// nodes outside map bodies, else the control flow.
    pub fn auto(sdfg: &Sdfg) -> Detail {
        let (all, top) = node_counts(sdfg);
        if sdfg.states.len() > MAX_STATES {
            Detail::Control
        } else if all <= FULL_NODES {
            Detail::Full
        } else if top <= STATE_NODES {
            Detail::States
        } else {
            Detail::Control
        }
    }
}

/// Programs with more states are drawn as their control flow by default.
pub const MAX_STATES: usize = 24;
/// Programs with at most this many nodes in all are drawn in full by default.
pub const FULL_NODES: usize = 300;
/// Programs with at most this many nodes outside map bodies are drawn with collapsed maps
/// by default (and with the control flow alone beyond).
pub const STATE_NODES: usize = 300;

/// (all nodes, bodies and nested SDFGs included; nodes of the states' own graphs).
fn node_counts(sdfg: &Sdfg) -> (usize, usize) {
    fn all(df: &Dataflow) -> usize {
        df.graph
            .node_weights()
            .map(|n| match n {
                Node::Map(m) => 2 + all(&m.body),
                Node::Nested(ns) => 1 + ns.sdfg.states.iter().map(|s| all(&s.graph)).sum::<usize>(),
                _ => 1,
            })
            .sum()
    }
    let total = sdfg.states.iter().map(|s| all(&s.graph)).sum();
    let top = sdfg.states.iter().map(|s| s.graph.node_count()).sum();
    (total, top)
}

/// What to draw: the detail (`None`: [`Detail::auto`]), or one state or one map's body.
#[derive(Clone, Debug, Default)]
pub struct DotOptions {
    /// The level of detail; `None` picks it from the program's size.
    pub detail: Option<Detail>,
    /// Draw only this state (its name, or `#` and its index), in full.
    pub state: Option<String>,
    /// Draw only the body of the map with this label (the first in state order), in full.
    pub map: Option<String>,
    /// Marks of what the optimizer did ([`diff_marks`]).
    pub marks: Option<Marks>,
}

/// What the optimizer did, marked on the drawing of its output: maps fused (by label),
/// maps moved into an `if`, and what disappeared, in the graph's label.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Marks {
    /// Per map label of the output: what happened to it.
    pub maps: std::collections::BTreeMap<String, Mark>,
    /// Lines for the drawing's legend.
    pub legend: Vec<String>,
}

/// What happened to a map of the output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mark {
    /// Fused from these maps of the input.
    Fused(Vec<String>),
    /// Moved from a state outside any `if` into a branch.
    MovedIntoIf,
}

impl Mark {
    fn colour(&self) -> &'static str {
        match self {
            Mark::Fused(_) => "#c8f0c8",
            Mark::MovedIntoIf => "#ffe0b0",
        }
    }

    fn note(&self) -> String {
        match self {
            Mark::Fused(parts) => format!("fused: {}", parts.join(" + ")),
            Mark::MovedIntoIf => "moved into an if".into(),
        }
    }
}

/// The maps of a program's states (outside bodies), with whether their state runs
/// inside an `if`.
fn top_maps(sdfg: &Sdfg) -> Vec<(String, bool)> {
    fn walk(sdfg: &Sdfg, b: &Block, in_if: bool, out: &mut Vec<(String, bool)>) {
        match b {
            Block::State(s) => {
                if let Some(st) = sdfg.state(*s) {
                    for n in st.graph.graph.node_weights() {
                        if let Node::Map(m) = n {
                            out.push((m.label.clone(), in_if));
                        }
                    }
                }
            }
            Block::Seq(bs) => bs.iter().for_each(|b| walk(sdfg, b, in_if, out)),
            Block::Loop(l) => walk(sdfg, &l.body, in_if, out),
            Block::If(i) => {
                walk(sdfg, &i.then, true, out);
                walk(sdfg, &i.otherwise, true, out);
            }
            Block::Assign(_) => {}
        }
    }
    let mut out = Vec::new();
    walk(sdfg, &sdfg.body, false, &mut out);
    out
}

/// Marks for drawing `after`, the optimizer's output for `before`: a map of `after`
/// whose label joins labels of `before`'s maps with `+` was fused from them; a map
/// whose state is inside an `if` in `after` but was not in `before` was moved into it;
/// maps and containers of `before` that `after` lacks (and that no fusion took in) are
/// listed as removed.
pub fn diff_marks(before: &Sdfg, after: &Sdfg) -> Marks {
    use std::collections::BTreeSet;
    let old = top_maps(before);
    let new = top_maps(after);
    let old_labels: BTreeSet<&str> = old.iter().map(|(l, _)| l.as_str()).collect();
    let old_outside_if: BTreeSet<&str> = old
        .iter()
        .filter(|(_, in_if)| !in_if)
        .map(|(l, _)| l.as_str())
        .collect();
    let mut marks = Marks::default();
    let mut taken: BTreeSet<String> = BTreeSet::new();
    let (mut fused, mut moved) = (0, 0);
    for (label, in_if) in &new {
        let parts: Vec<String> = label.split('+').map(str::to_string).collect();
        let known = parts
            .iter()
            .filter(|p| old_labels.contains(p.as_str()))
            .count();
        if !old_labels.contains(label.as_str()) && parts.len() > 1 && known >= 2 {
            taken.extend(parts.iter().cloned());
            fused += 1;
            marks.maps.insert(label.clone(), Mark::Fused(parts));
        } else if *in_if && old_outside_if.contains(label.as_str()) {
            moved += 1;
            marks.maps.insert(label.clone(), Mark::MovedIntoIf);
        }
    }
    let new_labels: BTreeSet<&str> = new.iter().map(|(l, _)| l.as_str()).collect();
    let removed_maps: Vec<&str> = old_labels
        .iter()
        .filter(|l| !new_labels.contains(*l) && !taken.contains(**l))
        .copied()
        .collect();
    let removed_data: Vec<&str> = before
        .arrays
        .keys()
        .filter(|k| !after.arrays.contains_key(*k))
        .map(String::as_str)
        .collect();
    marks.legend.push(format!(
        "against '{}': {} fused (green), {} moved into an if (orange)",
        before.name,
        plural(fused, "map"),
        plural(moved, "map")
    ));
    if !removed_maps.is_empty() {
        marks
            .legend
            .push(format!("maps removed: {}", list_names(&removed_maps, 8)));
    }
    if !removed_data.is_empty() {
        marks.legend.push(format!(
            "containers removed: {}",
            list_names(&removed_data, 8)
        ));
    }
    if before.states.len() != after.states.len() {
        marks.legend.push(format!(
            "states: {} -> {}",
            before.states.len(),
            after.states.len()
        ));
    }
    marks
}

/// The drawings an interactive viewer shows (`sdflow view`): the control flow with a
/// box per state (ids `state-<index>`), each state with its maps collapsed (ids
/// `map-<key>`), and each of those maps' bodies, keyed by the collapsed node's DOT id
/// (`s<state>_n<node>`). Access nodes carry the classes `acc acc-<container>` (see
/// [`css_name`]).
#[derive(Clone, Debug)]
pub struct Views {
    /// The control flow.
    pub overview: String,
    /// Per state, in index order.
    pub states: Vec<String>,
    /// Per top-level map: its key and the drawing of its body.
    pub maps: Vec<(String, String)>,
}

/// The drawings of [`Views`].
pub fn views(sdfg: &Sdfg) -> Views {
    let print = |label: String, stmts: Vec<Stmt>| {
        let mut ctx = PrinterContext::default();
        let mut text = digraph(&sdfg.name, &label, stmts).print(&mut ctx);
        text.push('\n');
        text
    };
    let mut stmts = vec![node_defaults("box")];
    let mut counter = 0;
    let summary = Summary {
        marks: None,
        interactive: true,
    };
    draw_block(
        sdfg,
        &sdfg.body,
        "cf",
        &mut counter,
        Some(summary),
        &mut stmts,
    );
    let overview = print(format!("SDFG '{}' (control flow)", sdfg.name), stmts);
    let collapsed = Style {
        collapse: true,
        marks: None,
        interactive: true,
    };
    let full = Style {
        collapse: false,
        ..collapsed
    };
    let mut states = Vec::new();
    let mut maps = Vec::new();
    for (i, st) in sdfg.states.iter().enumerate() {
        let id = format!("s{i}");
        let inner = state_contents(sdfg, st, &id, collapsed);
        states.push(print(
            format!("SDFG '{}'", sdfg.name),
            vec![cluster(
                &id,
                &format!("state '{}' (#{i})", st.name),
                "rounded",
                inner,
            )],
        ));
        for n in st.graph.node_ids() {
            if let Node::Map(m) = st.graph.node(n) {
                let key = format!("{id}_n{}", n.index());
                let mut inner = Vec::new();
                draw_dataflow(sdfg, &m.body, &key, full, &mut inner);
                maps.push((
                    key.clone(),
                    print(
                        format!("SDFG '{}', state '{}' (#{i})", sdfg.name, st.name),
                        vec![cluster(
                            &key,
                            &format!("map '{}'", m.label),
                            "filled",
                            inner,
                        )],
                    ),
                ));
            }
        }
    }
    Views {
        overview,
        states,
        maps,
    }
}

/// What a state holds, as the control-flow drawing's boxes say it (counts of maps,
/// tasklets and nested calls; the containers read and written).
pub fn state_summary(df: &Dataflow) -> String {
    StateSummary::of(df).text()
}

/// A map's head (`label[ranges] (schedule)`) and what its body holds.
pub fn map_summary(m: &MapScope) -> (String, String) {
    (map_head(m), BodyCounts::of(&m.body).text())
}

/// A container name as it appears in the viewer's CSS classes: characters other than
/// letters, digits, `_` and `-` become `_`.
pub fn css_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A drawing that cannot be made: the state or map asked for does not exist.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DotError(pub String);

/// DOT text of a program as `opts` asks.
pub fn to_dot_with(sdfg: &Sdfg, opts: &DotOptions) -> Result<String, DotError> {
    let marks = opts.marks.as_ref();
    let mut graph: (String, Vec<Stmt>) = if let Some(name) = &opts.state {
        state_graph(sdfg, name, marks)?
    } else if let Some(label) = &opts.map {
        map_graph(sdfg, label)?
    } else {
        match opts.detail.unwrap_or_else(|| Detail::auto(sdfg)) {
            Detail::Full => dataflow_graph(sdfg, marks, false),
            Detail::States => dataflow_graph(sdfg, marks, true),
            Detail::Control => control_graph(sdfg, marks),
        }
    };
    if let Some(m) = marks {
        for l in &m.legend {
            graph.0.push('\n');
            graph.0.push_str(l);
        }
    }
    let graph = digraph(&sdfg.name, &graph.0, graph.1);
    let mut ctx = PrinterContext::default();
    let mut text = graph.print(&mut ctx);
    text.push('\n');
    Ok(text)
}

fn digraph(name: &str, label: &str, mut body: Vec<Stmt>) -> Graph {
    let mut stmts = vec![
        Stmt::Attribute(attr("label", label)),
        Stmt::Attribute(attr("compound", "true")),
        Stmt::Attribute(attr("fontname", "Helvetica")),
    ];
    stmts.append(&mut body);
    Graph::DiGraph {
        id: quoted(name),
        strict: false,
        stmts,
    }
}

/// The control flow alone, each state a box with its summary.
fn control_graph(sdfg: &Sdfg, marks: Option<&Marks>) -> (String, Vec<Stmt>) {
    let mut stmts = vec![node_defaults("box")];
    let mut counter = 0;
    let summary = Summary {
        marks,
        interactive: false,
    };
    draw_block(
        sdfg,
        &sdfg.body,
        "cf",
        &mut counter,
        Some(summary),
        &mut stmts,
    );
    (format!("SDFG '{}' (control flow)", sdfg.name), stmts)
}

fn node_defaults(shape: &str) -> Stmt {
    Stmt::GAttribute(graphviz_rust::dot_structures::GraphAttributes::Node(vec![
        attr("shape", shape),
        attr("fontname", "Helvetica"),
        attr("fontsize", "10"),
    ]))
}

/// The state `name` (or `#i`), in full.
fn state_graph(
    sdfg: &Sdfg,
    name: &str,
    marks: Option<&Marks>,
) -> Result<(String, Vec<Stmt>), DotError> {
    let index = name.strip_prefix('#').and_then(|i| i.parse::<usize>().ok());
    let found = sdfg
        .states
        .iter()
        .enumerate()
        .find(|(i, st)| st.name == name || index == Some(*i));
    let Some((i, st)) = found else {
        return Err(DotError(format!(
            "program '{}' has no state '{name}' (states: {})",
            sdfg.name,
            some_names(sdfg.states.iter().map(|s| s.name.as_str()))
        )));
    };
    let id = format!("s{i}");
    let style = Style {
        collapse: false,
        marks,
        interactive: false,
    };
    let inner = state_contents(sdfg, st, &id, style);
    Ok((
        format!("SDFG '{}', state '{}' (#{i})", sdfg.name, st.name),
        vec![cluster(
            &id,
            &format!("state '{}' (#{i})", st.name),
            "rounded",
            inner,
        )],
    ))
}

/// The body of the first map labelled `label` (in state order, bodies and nested SDFGs
/// searched depth first), in full.
fn map_graph(sdfg: &Sdfg, label: &str) -> Result<(String, Vec<Stmt>), DotError> {
    let mut all = Vec::new();
    every_map(sdfg, &mut all);
    let found: Vec<&(&Sdfg, &MapScope)> = all.iter().filter(|(_, m)| m.label == label).collect();
    let Some(&&(owner, m)) = found.first() else {
        let mut labels: Vec<&str> = Vec::new();
        for (_, m) in &all {
            if !labels.contains(&m.label.as_str()) {
                labels.push(&m.label);
            }
        }
        return Err(DotError(format!(
            "program '{}' has no map '{label}' (maps: {})",
            sdfg.name,
            some_names(labels.into_iter())
        )));
    };
    let mut inner = Vec::new();
    draw_dataflow(owner, &m.body, "m", Style::default(), &mut inner);
    let more = if found.len() > 1 {
        format!(" (the first of {} maps so labelled)", found.len())
    } else {
        String::new()
    };
    Ok((
        format!("SDFG '{}', body of map {}{more}", sdfg.name, map_head(m)),
        vec![cluster("m", &format!("map '{}'", m.label), "filled", inner)],
    ))
}

/// Every map of the program with the SDFG that declares its data: in state order, each
/// before the maps of its body, nested SDFGs searched where they are called.
fn every_map<'a>(sdfg: &'a Sdfg, out: &mut Vec<(&'a Sdfg, &'a MapScope)>) {
    fn in_df<'a>(sdfg: &'a Sdfg, df: &'a Dataflow, out: &mut Vec<(&'a Sdfg, &'a MapScope)>) {
        for n in df.graph.node_weights() {
            match n {
                Node::Map(m) => {
                    out.push((sdfg, m));
                    in_df(sdfg, &m.body, out);
                }
                Node::Nested(ns) => every_map(&ns.sdfg, out),
                _ => {}
            }
        }
    }
    for st in &sdfg.states {
        in_df(sdfg, &st.graph, out);
    }
}

/// Up to eight names, then how many more.
fn some_names<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let all: Vec<&str> = names.collect();
    list_names(&all, 8)
}

fn list_names(all: &[&str], keep: usize) -> String {
    if all.is_empty() {
        return "none".into();
    }
    let mut s = all[..all.len().min(keep)].join(", ");
    if all.len() > keep {
        s.push_str(&format!(" … (+{})", all.len() - keep));
    }
    s
}

/// A map's head line: `label[i=0:N, j=0:M] (schedule)`.
fn map_head(m: &MapScope) -> String {
    let ranges: Vec<String> = m
        .params
        .iter()
        .zip(&m.ranges)
        .map(|(p, r)| format!("{p}={r}"))
        .collect();
    format!("{}[{}] ({})", m.label, ranges.join(", "), m.schedule.name())
}

/// What a map body holds, counted (nested maps included).
#[derive(Default)]
struct BodyCounts {
    tasklets: usize,
    maps: usize,
    nested: usize,
    other: usize,
}

impl BodyCounts {
    /// The counts of a map body.
    fn of(df: &Dataflow) -> BodyCounts {
        let mut c = BodyCounts::default();
        c.add(df, true);
        c
    }

    /// Adds what `df` holds; its own maps count as inner maps when `inner`.
    fn add(&mut self, df: &Dataflow, inner: bool) {
        for n in df.graph.node_weights() {
            match n {
                Node::Tasklet(_) => self.tasklets += 1,
                Node::Map(m) => {
                    self.maps += usize::from(inner);
                    self.add(&m.body, true);
                }
                Node::Nested(_) => self.nested += 1,
                Node::Library(_) => self.other += 1,
                Node::Access(_) => {}
            }
        }
    }

    fn text(&self) -> String {
        let mut parts = vec![plural(self.tasklets, "tasklet")];
        if self.maps > 0 {
            parts.push(plural(self.maps, "inner map"));
        }
        if self.nested > 0 {
            parts.push(plural(self.nested, "nested SDFG"));
        }
        if self.other > 0 {
            parts.push(plural(self.other, "library node"));
        }
        parts.join(", ")
    }
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// A state's contents for the control-flow drawing.
struct StateSummary {
    maps: usize,
    body: BodyCounts,
    reads: Vec<String>,
    writes: Vec<String>,
}

impl StateSummary {
    fn of(df: &Dataflow) -> StateSummary {
        let mut body = BodyCounts::default();
        body.add(df, false);
        let maps = df
            .graph
            .node_weights()
            .filter(|n| matches!(n, Node::Map(_)))
            .count();
        let (reads, writes) = crate::uses::reads_writes(df);
        StateSummary {
            maps,
            body,
            reads: reads.into_iter().collect(),
            writes: writes.into_iter().collect(),
        }
    }

    fn text(&self) -> String {
        let names = |v: &[String]| {
            let r: Vec<&str> = v.iter().map(String::as_str).collect();
            list_names(&r, 6)
        };
        let mut lines = vec![format!(
            "{}; {} in all",
            plural(self.maps, "map"),
            self.body.text()
        )];
        if !self.reads.is_empty() {
            lines.push(format!("reads {}", names(&self.reads)));
        }
        if !self.writes.is_empty() {
            lines.push(format!("writes {}", names(&self.writes)));
        }
        lines.join("\n")
    }
}

/// The clusters of the states, stacked top to bottom in state order by invisible edges
/// from a sink of each state to a source of the next (without them Graphviz puts
/// unconnected clusters side by side, and a program of a hundred states becomes a drawing
/// a hundred states wide).
fn draw_states(sdfg: &Sdfg, prefix: &str, style: Style<'_>) -> Vec<Stmt> {
    let collapse = style.collapse;
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
                (Some(&a), Some(&b)) => (ends(g, &id, a, collapse).0, ends(g, &id, b, collapse).1),
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
            let inner = state_contents(sdfg, st, &id, style);
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
fn ends(
    df: &Dataflow,
    prefix: &str,
    n: crate::dataflow::NodeId,
    collapse: bool,
) -> (String, String) {
    let id = format!("{prefix}_n{}", n.index());
    match df.node(n) {
        Node::Map(_) if collapse => (id.clone(), id),
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

/// The nodes of a state's graph under `id`, or a placeholder when it has none.
fn state_contents(sdfg: &Sdfg, st: &crate::State, id: &str, style: Style<'_>) -> Vec<Stmt> {
    let mut inner = Vec::new();
    if st.graph.node_count() == 0 {
        inner.push(node(
            &format!("{id}_empty"),
            vec![attr("label", "(empty)"), attr("shape", "plaintext")],
        ));
    }
    draw_dataflow(sdfg, &st.graph, id, style, &mut inner);
    inner
}

fn draw_dataflow(sdfg: &Sdfg, df: &Dataflow, prefix: &str, style: Style<'_>, out: &mut Vec<Stmt>) {
    let collapse = style.collapse;
    for n in df.node_ids() {
        let id = format!("{prefix}_n{}", n.index());
        match df.node(n) {
            Node::Access(d) => {
                let transient = sdfg.arrays.get(d).is_some_and(|a| a.transient());
                let line = if transient { "dashed" } else { "solid" };
                let mut attrs = vec![
                    attr("label", d),
                    attr("shape", "ellipse"),
                    attr("style", line),
                ];
                if style.interactive {
                    attrs.push(attr("class", &format!("acc acc-{}", css_name(d))));
                }
                out.push(node(&id, attrs));
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
            Node::Library(LibraryNode::HaloExchange(h)) => {
                out.push(node(
                    &id,
                    vec![
                        attr("label", &format!("halo exchange\n{}", h.decomposition)),
                        attr("shape", "doubleoctagon"),
                    ],
                ));
            }
            Node::Map(m) => {
                let mark = style.marks.and_then(|k| k.maps.get(&m.label));
                let mut head = map_head(m);
                if let Some(k) = mark {
                    head.push_str(&format!("\n{}", k.note()));
                }
                if collapse {
                    let c = BodyCounts::of(&m.body);
                    let mut attrs = vec![
                        attr("label", &format!("{head}\n{}", c.text())),
                        attr("shape", "component"),
                        attr("style", "filled"),
                        attr("fillcolor", mark.map_or("#e8eef8", Mark::colour)),
                    ];
                    if style.interactive {
                        attrs.push(attr("id", &format!("map-{id}")));
                        attrs.push(attr("class", "map"));
                    }
                    out.push(node(&id, attrs));
                    continue;
                }
                let mut inner = vec![
                    node(&format!("{id}_entry"), {
                        let mut a = vec![attr("label", &head), attr("shape", "trapezium")];
                        if let Some(k) = mark {
                            a.push(attr("style", "filled"));
                            a.push(attr("fillcolor", k.colour()));
                        }
                        a
                    }),
                    node(
                        &format!("{id}_exit"),
                        vec![attr("label", &m.label), attr("shape", "invtrapezium")],
                    ),
                ];
                draw_dataflow(sdfg, &m.body, &id, style.full(), &mut inner);
                // Scope edges: entry to the body's sources, the body's sinks to exit.
                let scope = || vec![attr("style", "dashed"), attr("arrowhead", "none")];
                for b in m.body.node_ids() {
                    let (b_in, b_out) = ends(&m.body, &id, b, false);
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
                inner.extend(draw_states(&ns.sdfg, &format!("{id}_s"), style));
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
        out.push(edge(
            &ends(df, prefix, s, collapse).1,
            &ends(df, prefix, d, collapse).0,
            attrs,
        ));
    }
}

/// Draws a block; returns its (entry, exit) node ids.
fn draw_block(
    sdfg: &Sdfg,
    b: &Block,
    prefix: &str,
    counter: &mut usize,
    summary: Option<Summary<'_>>,
    out: &mut Vec<Stmt>,
) -> (String, String) {
    let mut fresh = |out: &mut Vec<Stmt>, label: &str, shape: &str| {
        let id = format!("{prefix}{}", *counter);
        *counter += 1;
        out.push(node(&id, vec![attr("label", label), attr("shape", shape)]));
        id
    };
    match b {
        Block::State(s) if summary.is_some() => {
            let marks = summary.and_then(|m| m.marks);
            let (label, colour) = match sdfg.state(*s) {
                Some(st) => {
                    let mut text = format!(
                        "state '{}' (#{})\n{}",
                        st.name,
                        s.0,
                        StateSummary::of(&st.graph).text()
                    );
                    let mut colour = None;
                    if let Some(m) = marks {
                        for n in st.graph.graph.node_weights() {
                            if let Node::Map(map) = n
                                && let Some(k) = m.maps.get(&map.label)
                            {
                                text.push_str(&format!("\n{}: {}", map.label, k.note()));
                                colour.get_or_insert(k.colour());
                            }
                        }
                    }
                    (text, colour)
                }
                None => (format!("? (#{})", s.0), None),
            };
            let id = format!("{prefix}{}", *counter);
            *counter += 1;
            let mut attrs = vec![attr("label", &label), attr("shape", "box")];
            if summary.is_some_and(|m| m.interactive) {
                attrs.push(attr("id", &format!("state-{}", s.0)));
                attrs.push(attr("class", "state"));
            }
            if let Some(c) = colour {
                attrs.push(attr("style", "filled"));
                attrs.push(attr("fillcolor", c));
            }
            out.push(node(&id, attrs));
            (id.clone(), id)
        }
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
                let (en, ex) = draw_block(sdfg, b, prefix, counter, summary, out);
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
            let (en, ex) = draw_block(sdfg, &l.body, prefix, counter, summary, out);
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
                let (en, ex) = draw_block(sdfg, branch, prefix, counter, summary, out);
                out.push(edge(&head, &en, vec![attr("label", label)]));
                out.push(edge(&ex, &join, vec![]));
            }
            (head, join)
        }
    }
}
