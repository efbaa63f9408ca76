//! What dataflow reads and writes: the one rule every stage asks — validation's
//! neighbours, the passes, the e-graph, the execution plan, drawings and statistics.
//!
//! In a graph, map and nested-SDFG nodes are summarized by their edges, so the access
//! nodes say everything: one with out-edges is read, one with in-edges written; and every
//! index table a memlet subscripts through (`e2c[e, 0]`) is read. A node reads what its
//! in-edges carry and the tables of its edges, and writes what its out-edges carry. The
//! `deep` forms walk map bodies too (not nested SDFGs: their containers are their own).

use std::collections::BTreeSet;

use crate::control::Block;
use crate::dataflow::{Dataflow, Node, NodeId};
use crate::sdfg::Sdfg;

/// How a graph uses a container at one place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Use {
    /// At an access node (else: an index table a memlet reads).
    pub access_node: bool,
    /// Read: an access node with out-edges, or an index table.
    pub read: bool,
    /// Written: an access node with in-edges.
    pub written: bool,
}

/// Every use in `df` (not in map bodies): `f` is called for each access node and each
/// table of a memlet (in index order), by the rule of this module.
pub fn for_each_use<'a>(df: &'a Dataflow, mut f: impl FnMut(&'a str, Use)) {
    for n in df.graph.node_indices() {
        if let Some(d) = df.node(n).as_access() {
            let (read, written) = (df.out_degree(n) > 0, df.in_degree(n) > 0);
            f(
                d,
                Use {
                    access_node: true,
                    read,
                    written,
                },
            );
        }
    }
    for e in df.graph.edge_weights() {
        for t in e.memlet.subset.tables() {
            f(
                t,
                Use {
                    access_node: false,
                    read: true,
                    written: false,
                },
            );
        }
    }
}

/// Containers a state-level graph reads and writes ([`for_each_use`]).
pub fn reads_writes(df: &Dataflow) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut reads, mut writes) = (BTreeSet::new(), BTreeSet::new());
    for_each_use(df, |d, u| {
        if u.read {
            reads.insert(d.to_string());
        }
        if u.written {
            writes.insert(d.to_string());
        }
    });
    (reads, writes)
}

/// [`for_each_use`] in `df` and the bodies of its maps at any depth.
pub fn for_each_use_deep<'a>(df: &'a Dataflow, f: &mut impl FnMut(&'a str, Use)) {
    for_each_use(df, &mut *f);
    for n in df.graph.node_weights() {
        if let Node::Map(m) = n {
            for_each_use_deep(&m.body, f);
        }
    }
}

/// Containers a node reads (sources of its in-edges, tables) and writes (destinations of
/// its out-edges), at the level of `df`.
pub fn node_reads_writes(df: &Dataflow, n: NodeId) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut reads: BTreeSet<String> = df
        .in_edges(n)
        .into_iter()
        .map(|e| df.edge(e).memlet.data.clone())
        .collect();
    for e in df.in_edges(n).into_iter().chain(df.out_edges(n)) {
        reads.extend(
            df.edge(e)
                .memlet
                .subset
                .tables()
                .iter()
                .map(|t| t.to_string()),
        );
    }
    let writes = df
        .out_edges(n)
        .into_iter()
        .map(|e| df.edge(e).memlet.data.clone())
        .collect();
    (reads, writes)
}

/// Names mentioned by the control flow (conditions, loop bounds, assignments): symbols,
/// and scalar containers read by the host.
pub fn control_names(block: &Block) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    block.visit(&mut |b| match b {
        Block::Loop(l) => {
            for e in [&l.init, &l.cond, &l.update] {
                out.extend(e.free_symbols());
            }
        }
        Block::If(i) => out.extend(i.cond.free_symbols()),
        Block::Assign(a) => {
            for (_, e) in a {
                out.extend(e.free_symbols());
            }
        }
        _ => {}
    });
    out
}

/// Index tables read by any memlet of `df` or its map bodies.
pub fn tables_read(df: &Dataflow) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for_each_use_deep(df, &mut |d, u| {
        if !u.access_node {
            out.insert(d.to_string());
        }
    });
    out
}

impl Dataflow {
    /// Every container name accessed in this graph or in the bodies of its maps
    /// (not inside nested SDFGs), sorted.
    pub fn accessed_data(&self) -> BTreeSet<String> {
        self.accessed_data_refs()
            .into_iter()
            .map(str::to_string)
            .collect()
    }

    /// [`Dataflow::accessed_data`], borrowing the names.
    pub fn accessed_data_refs(&self) -> BTreeSet<&str> {
        let mut out = BTreeSet::new();
        self.collect_accessed(&mut out);
        out
    }

    fn collect_accessed<'a>(&'a self, out: &mut BTreeSet<&'a str>) {
        self.for_each_accessed(&mut |d| {
            out.insert(d);
        });
    }

    /// Calls `f` with every container name accessed in this graph or in the bodies of
    /// its maps (not inside nested SDFGs), as [`Dataflow::accessed_data`] lists them, in
    /// no particular order and with repeats.
    pub fn for_each_accessed<'a>(&'a self, f: &mut impl FnMut(&'a str)) {
        for_each_use_deep(self, &mut |d, _| f(d));
    }
}

impl Sdfg {
    /// Containers of this program that some state writes (directly, in a map body, or
    /// through a nested SDFG's output connector), sorted.
    pub fn written_data(&self) -> BTreeSet<String> {
        self.used_data(|u| u.written)
    }

    /// Whether some state writes container `name` ([`Sdfg::written_data`], without
    /// gathering the set).
    pub fn writes(&self, name: &str) -> bool {
        let mut found = false;
        for s in &self.states {
            for_each_use_deep(&s.graph, &mut |d, u| found |= u.written && d == name);
        }
        found
    }

    /// Containers of this program that some state reads (an access node with an edge
    /// out of it, or an index table, at any depth of maps), sorted.
    pub fn read_data(&self) -> BTreeSet<String> {
        self.used_data(|u| u.read)
    }

    fn used_data(&self, pick: impl Fn(Use) -> bool) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for s in &self.states {
            for_each_use_deep(&s.graph, &mut |d, u| {
                if pick(u) {
                    out.insert(d.to_string());
                }
            });
        }
        out
    }
}
