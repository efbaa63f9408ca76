//! Index-table reads checked per row: for a parallel map whose outer loops a team
//! shares, the table entries its body reads at one point of those loops — GT4Py's
//! neighbour tables, read at a horizontal point for every level — can be checked once
//! there, before the inner loops, which then gather without a check (a bad entry runs
//! them checked, as before). A check per level kept the level loop from vectorizing.
//! The plan records the checks ([`super::StepKind::ParallelMap`]); the C printer prints
//! them.

use std::collections::{BTreeMap, BTreeSet};

use sdflow_ir::{DataDesc, Dataflow, Dim, MapScope, Node, Sdfg, SymExpr};

/// One index-table read of a map body checked per point of the map's outer loops: the
/// dimension, the extent its value must lie in, and the inner-map parameters (constant
/// ranges) its table index uses.
#[derive(Clone, Debug, PartialEq)]
pub struct RowCheck {
    /// The gathered dimension (an index-table read).
    pub dim: Dim,
    /// The extent its value must lie in.
    pub extent: SymExpr,
    /// The inner-map parameters its table index uses, with their constant ranges.
    pub inner: Vec<(String, sdflow_ir::Range)>,
}

/// The row checks of `m`'s body when every index-table read there can be checked per
/// point of the first `outer` parameters: its table index uses those, program symbols
/// and parameters of inner maps of constant ranges only; and the body writes no table.
/// `None` otherwise. A scalar table (an index the body computes at each point, GT4Py's
/// dynamic vertical offsets) has no row check: its reads stay checked at each point, in
/// the same gather whose other dimensions come from a table checked with its row.
pub fn row_checks(sdfg: &Sdfg, m: &MapScope, outer: usize) -> Option<Vec<RowCheck>> {
    fn walk(
        sdfg: &Sdfg,
        df: &Dataflow,
        allowed: &BTreeSet<String>,
        inner: &BTreeMap<String, sdflow_ir::Range>,
        out: &mut Vec<RowCheck>,
    ) -> Option<()> {
        for e in df.edge_ids() {
            let memlet = &df.edge(e).memlet;
            if memlet
                .other_subset
                .as_ref()
                .is_some_and(|o| !o.tables().is_empty())
            {
                return None;
            }
            for (k, d) in memlet.subset.0.iter().enumerate() {
                let Dim::Indirect { table, index, .. } = d else {
                    continue;
                };
                let shape = sdfg.arrays.get(&memlet.data)?.as_array()?.shape.clone();
                match sdfg.arrays.get(table)? {
                    DataDesc::Scalar { .. } => continue,
                    DataDesc::Array(_) => {}
                }
                let mut used = Vec::new();
                for x in index.iter().flat_map(SymExpr::free_symbols) {
                    if let Some(r) = inner.get(&x) {
                        if !used
                            .iter()
                            .any(|(p, _): &(String, sdflow_ir::Range)| *p == x)
                        {
                            used.push((x.clone(), r.clone()));
                        }
                    } else if !allowed.contains(&x) && !sdfg.symbols.contains_key(&x) {
                        return None;
                    }
                }
                out.push(RowCheck {
                    dim: d.clone(),
                    extent: shape.get(k)?.clone(),
                    inner: used,
                });
            }
        }
        for n in df.node_ids() {
            match df.node(n) {
                Node::Map(im) => {
                    let mut inner = inner.clone();
                    for (p, r) in im.params.iter().zip(&im.ranges) {
                        let constant = r.start.as_int().is_some()
                            && r.end.as_int().is_some()
                            && r.step.as_int() == Some(1);
                        if constant {
                            inner.insert(p.clone(), r.clone());
                        }
                    }
                    walk(sdfg, &im.body, allowed, &inner, out)?;
                }
                // A callee that gathers through no table (GT4Py's `if` at a point) reads
                // nothing a row check would cover.
                Node::Nested(ns) if !gathers_anywhere(&ns.sdfg) => {}
                Node::Nested(_) => return None,
                _ => {}
            }
        }
        Some(())
    }
    /// Containers written anywhere in `df`.
    fn written(df: &Dataflow, out: &mut BTreeSet<String>) {
        for n in df.node_ids() {
            match df.node(n) {
                Node::Access(a) if df.in_degree(n) > 0 => {
                    out.insert(a.clone());
                }
                Node::Map(im) => written(&im.body, out),
                _ => {}
            }
        }
    }
    let allowed: BTreeSet<String> = m.params[..outer].iter().cloned().collect();
    let mut out = Vec::new();
    walk(sdfg, &m.body, &allowed, &BTreeMap::new(), &mut out)?;
    let mut writes = BTreeSet::new();
    written(&m.body, &mut writes);
    let writes_a_table = out
        .iter()
        .any(|c| matches!(&c.dim, Dim::Indirect { table, .. } if writes.contains(table)));
    (!writes_a_table).then_some(out)
}

/// Whether any memlet of `sdfg` (its states, map bodies and callees) reads through an
/// index table.
pub fn gathers_anywhere(sdfg: &Sdfg) -> bool {
    fn df_gathers(df: &Dataflow) -> bool {
        df.edge_ids().into_iter().any(|e| {
            let m = &df.edge(e).memlet;
            !m.subset.tables().is_empty()
                || m.other_subset
                    .as_ref()
                    .is_some_and(|o| !o.tables().is_empty())
        }) || df.node_ids().into_iter().any(|n| match df.node(n) {
            Node::Map(m) => df_gathers(&m.body),
            Node::Nested(ns) => gathers_anywhere(&ns.sdfg),
            _ => false,
        })
    }
    sdfg.states.iter().any(|st| df_gathers(&st.graph))
}
