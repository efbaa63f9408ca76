//! The dataflow graph of a state or a map body, and its nodes.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use fixedbitset::FixedBitSet;
use petgraph::Direction;
use petgraph::stable_graph::{EdgeIndex, NodeIndex, StableDiGraph};
use petgraph::visit::EdgeRef;

use crate::dtype::{DType, Value};
use crate::expr::Stmt;
use crate::memlet::{Dim, Memlet, Wcr};
use crate::sdfg::Sdfg;
use crate::symexpr::SymExpr;

/// Index of a node in a [`Dataflow`] graph (stable under removal of other nodes).
pub type NodeId = NodeIndex<u32>;
/// Index of an edge in a [`Dataflow`] graph.
pub type EdgeId = EdgeIndex<u32>;

/// An edge: a memlet between two nodes, with the connectors it attaches to.
///
/// Connectors name tasklet inputs/outputs, nested-SDFG arrays and library-node ports.
/// Edges of access nodes and of map nodes carry no connector: an access node is its data,
/// and a map's connector is the memlet's data name.
#[derive(Clone, Debug, PartialEq)]
pub struct Edge {
    /// Connector on the source node.
    pub src_conn: Option<String>,
    /// Connector on the destination node.
    pub dst_conn: Option<String>,
    /// What moves along the edge.
    pub memlet: Memlet,
}

/// A half-open strided range of a map parameter.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Range {
    /// First value.
    pub start: SymExpr,
    /// One past the last value.
    pub end: SymExpr,
    /// Increment (positive).
    pub step: SymExpr,
}

impl Range {
    /// `start:end` with step 1.
    pub fn new(start: impl Into<SymExpr>, end: impl Into<SymExpr>) -> Range {
        Range {
            start: start.into(),
            end: end.into(),
            step: SymExpr::Int(1),
        }
    }

    /// The same range as a subset dimension.
    pub fn to_dim(&self) -> Dim {
        Dim::Range {
            start: self.start.clone(),
            end: self.end.clone(),
            step: self.step.clone(),
        }
    }

    /// Number of values, simplified.
    pub fn size(&self) -> SymExpr {
        self.to_dim().size()
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_dim())
    }
}

/// How the iterations of a map are executed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Schedule {
    /// One after the other, in lexicographic order.
    Sequential,
    /// Shared-memory parallel (OpenMP).
    #[default]
    CpuParallel,
    /// A GPU kernel.
    GpuDevice,
}

impl Schedule {
    /// Name in the JSON format.
    pub fn name(self) -> &'static str {
        match self {
            Schedule::Sequential => "sequential",
            Schedule::CpuParallel => "cpu_parallel",
            Schedule::GpuDevice => "gpu_device",
        }
    }
}

/// A computation on scalars: typed connectors and straight-line code.
#[derive(Clone, Debug, PartialEq)]
pub struct Tasklet {
    /// Label, used in messages and generated code.
    pub name: String,
    /// Input connectors and their types.
    pub inputs: BTreeMap<String, DType>,
    /// Output connectors and their types.
    pub outputs: BTreeMap<String, DType>,
    /// Statements, in order. Each output is assigned exactly once; other targets are
    /// locals, each assigned once before use. A value assigned to an output is converted
    /// to the output's type.
    pub code: Vec<Stmt>,
}

impl Tasklet {
    /// The input connectors whose values the code may need only under a lazy condition
    /// (inside a `select` branch or the right operand of `&&`/`||`, in every statement
    /// that reads them). Every backend reads such an input where the code evaluates it,
    /// not before the code runs, so that a read the taken branch does not make (an index
    /// outside the array, a table entry that is a skip value) is never made; every other
    /// input is read before the code runs, in the order of the tasklet's in-edges.
    pub fn lazy_inputs(&self) -> BTreeSet<&str> {
        if !self.code.iter().any(|s| s.value.has_lazy()) {
            return BTreeSet::new();
        }
        let mut strict = BTreeSet::new();
        let mut named = BTreeSet::new();
        for s in &self.code {
            s.value.visit_strict_vars(&mut |v| {
                strict.insert(v);
            });
            named.extend(s.value.vars());
        }
        self.inputs
            .keys()
            .map(String::as_str)
            .filter(|c| named.contains(*c) && !strict.contains(c))
            .collect()
    }
}

/// A map: a parallel loop nest whose body is itself a dataflow graph.
#[derive(Clone, Debug, PartialEq)]
pub struct MapScope {
    /// Label, used in messages and generated code.
    pub label: String,
    /// Parameter names, outermost first.
    pub params: Vec<String>,
    /// One range per parameter.
    pub ranges: Vec<Range>,
    /// Execution schedule.
    pub schedule: Schedule,
    /// What one iteration does. Access nodes in the body refer to the SDFG's containers by
    /// name; the map node's edges carry what the whole map reads and writes.
    pub body: Dataflow,
}

impl MapScope {
    /// The writes of `data` in the body, each as one `(parameter index, offset)` per
    /// dimension: `data[p_a + c_0, p_b + c_1, …]` with distinct parameters. `None` when a
    /// write of `data` has another form (a range, an index that is not a parameter plus a
    /// constant, a parameter used twice).
    pub fn affine_writes(&self, data: &str) -> Option<Vec<Vec<(usize, i64)>>> {
        let body = &self.body;
        let mut writes = Vec::new();
        for e in body.edge_ids() {
            if body.node(body.endpoints(e).1).as_access() != Some(data) {
                continue;
            }
            let mut used = BTreeSet::new();
            let mut dims = Vec::new();
            for dim in &body.edge(e).memlet.subset.0 {
                let Dim::Index(x) = dim else { return None };
                let (k, c) = self
                    .params
                    .iter()
                    .enumerate()
                    .find_map(|(k, p)| x.const_diff(&SymExpr::sym(p)).map(|c| (k, c)))?;
                if !used.insert(k) {
                    return None;
                }
                dims.push((k, c));
            }
            writes.push(dims);
        }
        Some(writes)
    }
}

/// An SDFG called from a state; its non-transient containers are its connectors.
#[derive(Clone, Debug, PartialEq)]
pub struct NestedSdfg {
    /// The callee.
    pub sdfg: Box<Sdfg>,
    /// Value of each of the callee's free symbols, in terms of the caller's.
    pub symbol_mapping: BTreeMap<String, SymExpr>,
}

/// A reduction of the input (connector `in`) along some axes into the output (`out`).
#[derive(Clone, Debug, PartialEq)]
pub struct Reduce {
    /// The combining operation.
    pub op: Wcr,
    /// Axes reduced (all when `None`); the output has the remaining axes.
    pub axes: Option<Vec<usize>>,
    /// Start value; without it the fold starts from the first element.
    pub identity: Option<Value>,
}

/// A halo exchange: the program runs on every rank of a decomposition (each rank on its
/// own part of the fields, with a halo around it), and each field that passes through
/// the node (connector `X` in and out, the whole container) gets the neighbouring ranks'
/// cells into its halo. Collective: every rank reaches the same exchanges in the same
/// order.
#[derive(Clone, Debug, PartialEq)]
pub struct HaloExchange {
    /// How the global domain is split over the ranks, and where the halo is.
    pub decomposition: Decomposition,
}

/// How a program's global domain is split over ranks.
#[derive(Clone, Debug, PartialEq)]
pub enum Decomposition {
    /// A grid of `ranks[0] × ranks[1]` ranks over the first two dimensions of each field
    /// (rank `r` at position `(r % ranks[0], r / ranks[0])`); each rank's field holds its
    /// part of the domain with `width` halo cells on each side of both dimensions.
    Structured {
        /// Ranks along the first and the second dimension.
        ranks: [i64; 2],
        /// Halo cells on each side.
        width: i64,
        /// Whether each dimension wraps around (else the outer halos stay as they are).
        periodic: [bool; 2],
        /// Whether the corners of the halo are filled too (from the diagonal neighbours),
        /// for stencils that read diagonally.
        corners: bool,
    },
    /// Cells of an unstructured grid (ICON's cells, edges or vertices: the first
    /// dimension of each field) partitioned over `ranks` ranks: each rank holds the cells
    /// it owns and a halo of cells other ranks own, listed by two integer containers of
    /// the program indexed like the fields' first dimension — `global`, each cell's index
    /// in the global grid, and `owner`, the rank that owns it. The exchange fills every
    /// cell a rank does not own from the rank that does.
    Unstructured {
        /// How many ranks.
        ranks: i64,
        /// The container of each local cell's global index.
        global: String,
        /// The container of each local cell's owning rank.
        owner: String,
    },
}

impl std::fmt::Display for Decomposition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Decomposition::Structured {
                ranks,
                width,
                periodic,
                corners,
            } => {
                let wrap = |p: bool| if p { "periodic" } else { "bounded" };
                write!(
                    f,
                    "{}x{} ranks ({}, {}{}), width {width}",
                    ranks[0],
                    ranks[1],
                    wrap(periodic[0]),
                    wrap(periodic[1]),
                    if *corners { ", corners" } else { "" }
                )
            }
            Decomposition::Unstructured {
                ranks,
                global,
                owner,
            } => write!(
                f,
                "{ranks} ranks (cells by '{global}', owners by '{owner}')"
            ),
        }
    }
}

impl Decomposition {
    /// How many ranks it has.
    pub fn size(&self) -> i64 {
        match self {
            Decomposition::Structured { ranks, .. } => ranks[0].saturating_mul(ranks[1]),
            Decomposition::Unstructured { ranks, .. } => *ranks,
        }
    }
}

/// A node whose semantics is a known library operation.
#[derive(Clone, Debug, PartialEq)]
pub enum LibraryNode {
    /// A reduction.
    Reduce(Reduce),
    /// A halo exchange between ranks.
    HaloExchange(HaloExchange),
}

/// A dataflow node.
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    /// A data container, by name.
    Access(String),
    /// Scalar code.
    Tasklet(Tasklet),
    /// A map scope with its body.
    Map(MapScope),
    /// A nested SDFG.
    Nested(NestedSdfg),
    /// A library operation.
    Library(LibraryNode),
}

impl Node {
    /// `access 'u'`, `tasklet 'lap'`, `map 'stencil'`, … for messages.
    pub fn describe(&self) -> String {
        match self {
            Node::Access(d) => format!("access '{d}'"),
            Node::Tasklet(t) => format!("tasklet '{}'", t.name),
            Node::Map(m) => format!("map '{}'", m.label),
            Node::Nested(n) => format!("nested SDFG '{}'", n.sdfg.name),
            Node::Library(LibraryNode::Reduce(_)) => "library node 'reduce'".to_string(),
            Node::Library(LibraryNode::HaloExchange(_)) => "halo exchange".to_string(),
        }
    }

    /// The data name of an access node.
    pub fn as_access(&self) -> Option<&str> {
        match self {
            Node::Access(d) => Some(d),
            _ => None,
        }
    }
}

/// A dataflow multigraph (a state's, or a map body's).
///
/// Equality is structural: the same live nodes in index order, the same edges in index
/// order, whatever holes removals left in the indices.
#[derive(Clone, Debug, Default)]
pub struct Dataflow {
    /// The graph itself.
    pub graph: StableDiGraph<Node, Edge, u32>,
}

impl PartialEq for Dataflow {
    fn eq(&self, other: &Self) -> bool {
        let (a, b) = (self.compacted(), other.compacted());
        a.0 == b.0 && a.1 == b.1
    }
}

impl Dataflow {
    /// An empty graph.
    pub fn new() -> Dataflow {
        Dataflow::default()
    }

    /// Nodes in index order, and edges as (source position, destination position, edge)
    /// where positions index that node list.
    pub fn compacted(&self) -> (Vec<&Node>, Vec<(usize, usize, &Edge)>) {
        let ids: Vec<NodeId> = self.graph.node_indices().collect();
        let pos: BTreeMap<NodeId, usize> = ids.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let nodes = ids.iter().map(|n| &self.graph[*n]).collect();
        let edges = self
            .graph
            .edge_indices()
            .map(|e| {
                let (s, d) = self
                    .graph
                    .edge_endpoints(e)
                    .expect("edge index from the graph");
                (pos[&s], pos[&d], &self.graph[e])
            })
            .collect();
        (nodes, edges)
    }

    /// Adds a node.
    pub fn add_node(&mut self, node: Node) -> NodeId {
        self.graph.add_node(node)
    }

    /// Adds an access node.
    pub fn add_access(&mut self, data: &str) -> NodeId {
        self.graph.add_node(Node::Access(data.to_string()))
    }

    /// Adds an edge.
    pub fn add_edge(
        &mut self,
        src: NodeId,
        src_conn: Option<&str>,
        dst: NodeId,
        dst_conn: Option<&str>,
        memlet: Memlet,
    ) -> EdgeId {
        let edge = Edge {
            src_conn: src_conn.map(str::to_string),
            dst_conn: dst_conn.map(str::to_string),
            memlet,
        };
        self.graph.add_edge(src, dst, edge)
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.graph.node_count()
    }

    /// The node with this id.
    pub fn node(&self, n: NodeId) -> &Node {
        &self.graph[n]
    }

    /// Node ids in index order.
    pub fn node_ids(&self) -> Vec<NodeId> {
        self.graph.node_indices().collect()
    }

    /// Edge ids in index order.
    pub fn edge_ids(&self) -> Vec<EdgeId> {
        self.graph.edge_indices().collect()
    }

    /// Source and destination of an edge.
    pub fn endpoints(&self, e: EdgeId) -> (NodeId, NodeId) {
        self.graph
            .edge_endpoints(e)
            .expect("edge index from this graph")
    }

    /// The edge with this id.
    pub fn edge(&self, e: EdgeId) -> &Edge {
        &self.graph[e]
    }

    /// Incoming edges of a node, in edge-index order.
    pub fn in_edges(&self, n: NodeId) -> Vec<EdgeId> {
        self.edges_dir(n, Direction::Incoming)
    }

    /// A node's edges with their direction: the incoming ones (`true`) then the outgoing
    /// ones (`false`), each in edge-index order — a nested call's connector bindings.
    pub fn edges_both(&self, n: NodeId) -> Vec<(EdgeId, bool)> {
        self.in_edges(n)
            .into_iter()
            .map(|e| (e, true))
            .chain(self.out_edges(n).into_iter().map(|e| (e, false)))
            .collect()
    }

    /// Outgoing edges of a node, in edge-index order.
    pub fn out_edges(&self, n: NodeId) -> Vec<EdgeId> {
        self.edges_dir(n, Direction::Outgoing)
    }

    /// How many edges enter a node (without collecting them).
    pub fn in_degree(&self, n: NodeId) -> usize {
        self.graph.edges_directed(n, Direction::Incoming).count()
    }

    /// How many edges leave a node (without collecting them).
    pub fn out_degree(&self, n: NodeId) -> usize {
        self.graph.edges_directed(n, Direction::Outgoing).count()
    }

    fn edges_dir(&self, n: NodeId, dir: Direction) -> Vec<EdgeId> {
        let mut v: Vec<EdgeId> = self.graph.edges_directed(n, dir).map(|e| e.id()).collect();
        v.sort();
        v
    }

    /// A topological order, smallest index first among ready nodes (deterministic), or
    /// a node on a cycle.
    pub fn topological_order(&self) -> Result<Vec<NodeId>, NodeId> {
        let mut indeg: BTreeMap<NodeId, usize> = BTreeMap::new();
        for n in self.graph.node_indices() {
            indeg.insert(n, self.graph.edges_directed(n, Direction::Incoming).count());
        }
        let mut ready: BTreeSet<NodeId> = indeg
            .iter()
            .filter(|(_, d)| **d == 0)
            .map(|(n, _)| *n)
            .collect();
        let mut order = Vec::with_capacity(indeg.len());
        while let Some(n) = ready.pop_first() {
            order.push(n);
            for e in self.graph.edges_directed(n, Direction::Outgoing) {
                let d = indeg.get_mut(&e.target()).expect("target is a node");
                *d -= 1;
                if *d == 0 {
                    ready.insert(e.target());
                }
            }
        }
        if order.len() == indeg.len() {
            Ok(order)
        } else {
            let stuck = indeg
                .iter()
                .find(|(n, d)| **d > 0 && !order.contains(n))
                .map(|(n, _)| *n);
            Err(stuck.expect("some node is left when the order is short"))
        }
    }

    /// True if a directed path leads from `a` to `b` (or `a == b`). One search per call:
    /// for many queries on the same graph use [`Dataflow::reachability`].
    pub fn reaches(&self, a: NodeId, b: NodeId) -> bool {
        petgraph::algo::has_path_connecting(&self.graph, a, b, None)
    }

    /// The transitive closure of the graph, for answering many path queries; `None` when
    /// the graph has a cycle. Costs O(E·V/64) time and V²/8 bytes.
    pub fn reachability(&self) -> Option<Reachability> {
        let order = self.topological_order().ok()?;
        let pos: BTreeMap<NodeId, usize> = order.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let mut below = vec![FixedBitSet::with_capacity(order.len()); order.len()];
        for (i, n) in order.iter().enumerate().rev() {
            let mut set = FixedBitSet::with_capacity(order.len());
            set.insert(i);
            for e in self.graph.edges_directed(*n, Direction::Outgoing) {
                set.union_with(&below[pos[&e.target()]]);
            }
            below[i] = set;
        }
        Some(Reachability { pos, below })
    }

    /// Access nodes of a container, in index order.
    pub fn access_nodes(&self, data: &str) -> Vec<NodeId> {
        self.graph
            .node_indices()
            .filter(|n| self.graph[*n].as_access() == Some(data))
            .collect()
    }
}

/// The transitive closure of a [`Dataflow`] graph (see [`Dataflow::reachability`]).
#[derive(Clone, Debug)]
pub struct Reachability {
    pos: BTreeMap<NodeId, usize>,
    below: Vec<FixedBitSet>,
}

impl Reachability {
    /// True if a directed path leads from `a` to `b` (or `a == b`); false for nodes not in
    /// the graph.
    pub fn reaches(&self, a: NodeId, b: NodeId) -> bool {
        match (self.pos.get(&a), self.pos.get(&b)) {
            (Some(&i), Some(&j)) => self.below[i].contains(j),
            _ => false,
        }
    }

    /// True if either node reaches the other.
    pub fn ordered(&self, a: NodeId, b: NodeId) -> bool {
        self.reaches(a, b) || self.reaches(b, a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memlet::Subset;

    #[test]
    fn reachability_is_the_transitive_closure() {
        let mut g = Dataflow::new();
        let m = |d: &str| Memlet::new(d, Subset::default());
        let a = g.add_access("a");
        let b = g.add_access("b");
        let c = g.add_access("c");
        let d = g.add_access("d");
        g.add_edge(a, None, b, None, m("a"));
        g.add_edge(b, None, c, None, m("b"));
        let r = g.reachability().expect("acyclic");
        assert!(r.reaches(a, c) && r.reaches(a, a) && r.ordered(c, a));
        assert!(!r.reaches(c, a) && !r.ordered(a, d));
        for (x, y) in [(a, b), (a, c), (b, c), (c, a), (a, d), (d, b)] {
            assert_eq!(r.reaches(x, y), g.reaches(x, y), "{x:?} -> {y:?}");
        }
        g.add_edge(c, None, a, None, m("c"));
        assert!(g.reachability().is_none(), "a cycle has no closure");
    }

    #[test]
    fn affine_writes_are_parameter_plus_constant_per_dimension() {
        let mut b = crate::builder::SdfgBuilder::new("w");
        b.array("a", DType::F64, ["N", "N"]);
        b.array("b", DType::F64, ["N", "N"]);
        b.array("c", DType::F64, ["N", "N"]);
        b.state("s", |s| {
            s.map("m", &["i", "j"], &["0:N-1", "1:N"], |m| {
                m.tasklet(
                    "t",
                    &[("x", "a[i, j]")],
                    &[("y", "b[j - 1, i + 1]")],
                    "y = x",
                );
                m.tasklet("u", &[("x", "a[i, j]")], &[("y", "c[i, i]")], "y = x");
            });
        });
        let sdfg = b.build();
        let df = &sdfg.states[0].graph;
        let map = df
            .node_ids()
            .into_iter()
            .find_map(|n| match df.node(n) {
                Node::Map(m) => Some(m.clone()),
                _ => None,
            })
            .expect("one map");
        assert_eq!(map.affine_writes("b"), Some(vec![vec![(1, -1), (0, 1)]]));
        assert_eq!(map.affine_writes("a"), Some(vec![]), "read only");
        assert_eq!(map.affine_writes("c"), None, "a parameter twice");
    }
}
