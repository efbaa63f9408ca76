//! Subscripts in tasklet code, turned into memlets.
//!
//! GT4Py reads a neighbour's value with one tasklet that takes the whole field (a memlet
//! over the field's horizontal range) and one neighbour-table entry, and subscripts the
//! one with the other:
//!
//! ```text
//! w[0:N, k]        ──► __tlet_field ┐
//! conn[c, n]       ──► __tlet_index ┴► __tlet_val = __tlet_field[(__tlet_index - r)]
//! ```
//!
//! Each subscript becomes an input connector of its own whose memlet names the element
//! read: `w[conn[c, n] - r, k]` (an indirect dimension with an offset), or, when the
//! index is symbolic (map parameters and symbols only), `w[i + 1, k]`. Connectors that no
//! statement reads any more lose their edges. Any other index is an error naming the
//! tasklet and the text.

use std::collections::BTreeSet;

use sdflow_ir::{DataDesc, Dim, Expr, Stmt, Subset, SymExpr};

use super::python::{self, Subscript};
use super::{Edge, ImportError, StateCx, err, name_of};

/// A tasklet's code and inputs after its subscripts became connectors.
pub(super) struct Rewritten {
    pub code: Vec<Stmt>,
    pub inputs: Vec<String>,
}

impl StateCx<'_> {
    /// Rewrites the subscripts of tasklet `id` (code `text`, input connectors `inputs`);
    /// `None` when its code has none.
    pub(super) fn rewrite_subscripts(
        &mut self,
        id: &str,
        text: &str,
        inputs: &[String],
    ) -> Result<Option<Rewritten>, ImportError> {
        let nl = self.node_loc(id);
        let (code, subs) = python::statements_with_subscripts(text)
            .map_err(|e| err(&nl, format!("tasklet code '{text}': {e}")))?;
        if subs.is_empty() {
            return Ok(None);
        }
        let mut new_edges = Vec::new();
        let mut names: Vec<String> = inputs.to_vec();
        for sub in &subs {
            let what = format!("tasklet code '{text}'");
            if names.contains(&sub.placeholder) {
                return Err(err(
                    &nl,
                    format!(
                        "{what}: connector name '{}' is taken; cannot name the subscript's input",
                        sub.placeholder
                    ),
                ));
            }
            let assigned: Vec<&str> = code.iter().map(|s| s.target.as_str()).collect();
            if let Some(t) = sub
                .index
                .iter()
                .flat_map(Expr::vars)
                .find(|v| assigned.contains(&v.as_str()))
            {
                return Err(err(
                    &nl,
                    format!(
                        "{what}: the index of '{}[…]' reads '{t}', which the tasklet computes; only inputs, map parameters and symbols can index",
                        sub.name
                    ),
                ));
            }
            let edge = self.subscript_edge(id, sub, inputs, &nl, &what)?;
            names.push(sub.placeholder.clone());
            new_edges.push(edge);
        }
        // Subscripted inputs no statement reads any more lose their connectors and edges
        // (the new inputs read the same container from the same node). Table-entry
        // inputs stay: their edges order the tasklet after whatever writes the table.
        let read: BTreeSet<String> = code.iter().flat_map(|s| s.value.vars()).collect();
        let unused: BTreeSet<String> = subs
            .iter()
            .map(|s| s.name.clone())
            .filter(|c| !read.contains(c))
            .collect();
        self.edges
            .retain(|e| !(e.dst == id && e.dst_conn.as_ref().is_some_and(|c| unused.contains(c))));
        self.edges.extend(new_edges);
        names.retain(|c| !unused.contains(c));
        // The statements keep the placeholders as plain variables: the new inputs.
        Ok(Some(Rewritten {
            code,
            inputs: names,
        }))
    }

    /// The edge that reads subscript `sub` of tasklet `id`.
    fn subscript_edge(
        &self,
        id: &str,
        sub: &Subscript,
        inputs: &[String],
        nl: &str,
        what: &str,
    ) -> Result<Edge, ImportError> {
        let text = format!(
            "{}[{}]",
            sub.name,
            sub.index
                .iter()
                .map(Expr::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
        let field = self.in_edge(id, &sub.name).ok_or_else(|| {
            err(
                nl,
                format!(
                    "{what}: '{text}' subscripts '{}', which is not an input connector",
                    sub.name
                ),
            )
        })?;
        let (Some(data), Some(subset)) = (field.data.clone(), field.subset.clone()) else {
            return Err(err(
                nl,
                format!("{what}: '{text}' subscripts an input without data"),
            ));
        };
        // The subscript's dimensions are the memlet's ranges, in order.
        let ranges: Vec<usize> = (0..subset.rank())
            .filter(|&k| matches!(subset.0[k], Dim::Range { .. }))
            .collect();
        if ranges.len() != sub.index.len() {
            return Err(err(
                nl,
                format!(
                    "{what}: '{text}' has {} index(es) but its memlet {data}[{subset}] has {} range(s)",
                    sub.index.len(),
                    ranges.len()
                ),
            ));
        }
        let mut dims = subset.0.clone();
        for (x, &k) in sub.index.iter().zip(&ranges) {
            let Dim::Range { start, step, .. } = &subset.0[k] else {
                continue;
            };
            dims[k] = self
                .subscript_dim(id, x, start, step, inputs)
                .map_err(|m| err(nl, format!("{what}: in '{text}': {m}")))?;
        }
        let mut e = field.clone();
        e.dst_conn = Some(sub.placeholder.clone());
        e.data = Some(data);
        e.subset = Some(Subset(dims));
        e.other = None;
        e.wcr = None;
        Ok(e)
    }

    /// One dimension of a subscript: `start + x·step` for a symbolic index `x`, or
    /// `table[…] + start + off` for `x = entry + off` with `entry` an input connector
    /// reading one element of an integer table (step 1).
    fn subscript_dim(
        &self,
        id: &str,
        x: &Expr,
        start: &SymExpr,
        step: &SymExpr,
        inputs: &[String],
    ) -> Result<Dim, String> {
        let conns: Vec<String> = x
            .vars()
            .into_iter()
            .filter(|v| inputs.contains(v))
            .collect();
        let xs = python::to_sym(x).map_err(|m| format!("index '{x}': {m}"))?;
        match conns.as_slice() {
            [] => Ok(Dim::Index(start.add(&xs.mul(step)).simplify())),
            [entry] => {
                // `x - entry` must not mention the entry: `entry + off` exactly (not
                // `entry * entry`, `min(entry, 17)`, `entry % 7`).
                let off = xs.sub(&SymExpr::sym(entry)).simplify();
                if off.mentions(entry) {
                    return Err(format!(
                        "index '{x}' is not '{entry}' plus an offset; only a table entry plus a symbolic offset can select an element"
                    ));
                }
                if step.as_int() != Some(1) {
                    return Err(format!(
                        "a table entry cannot index a strided range (step {step})"
                    ));
                }
                let e = self
                    .in_edge(id, entry)
                    .ok_or_else(|| format!("input '{entry}' has no edge"))?;
                let table = e
                    .data
                    .clone()
                    .ok_or_else(|| format!("input '{entry}' reads no data"))?;
                if !self
                    .sdfg
                    .arrays
                    .get(&table)
                    .is_some_and(|d| d.dtype().is_int())
                {
                    return Err(format!(
                        "input '{entry}' reads '{table}', which is not an integer array"
                    ));
                }
                // A scalar table (GT4Py's dynamic vertical offset `k + zd_vertoffset`,
                // computed per point into a transient scalar) is read whole: DaCe's `x[0]`
                // is sdflow's subset-free scalar access.
                let scalar = matches!(self.sdfg.arrays.get(&table), Some(DataDesc::Scalar { .. }));
                let index = e
                    .subset
                    .iter()
                    .filter(|_| !scalar)
                    .flat_map(|s| s.0.iter())
                    .map(|d| match d {
                        Dim::Index(i) => Ok(i.clone()),
                        other => Err(format!(
                            "input '{entry}' reads '{table}' over {other}, not one element"
                        )),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Dim::Indirect {
                    table: name_of(&table),
                    index,
                    offset: start.add(&off).simplify(),
                })
            }
            more => Err(format!(
                "index '{x}' reads {} input connectors ({}); at most one table entry can select an element",
                more.len(),
                more.join(", ")
            )),
        }
    }
}
