//! What the printer asks of a body before it prints it: whether a loop stays scalar, reads
//! through tables, calls nested SDFGs, runs few iterations, and the row checks of a
//! tiled map.

use super::*;

/// Whether a map body keeps its loop scalar: it holds an inner map, a library node or a
/// nested SDFG call, or reads through an index table. A body whose table entries were
/// checked per row (`rows_checked`: its gathers are plain loads whose row is fixed before
/// the loop, so along a row of levels they are contiguous; no gather of it goes through
/// an index computed in the body, which stays checked per point) vectorizes instead
/// (measured on GT4Py's programs, `docs/perf.md`).
pub(crate) fn stays_scalar(sdfg: &Sdfg, df: &Dataflow, rows_checked: bool) -> bool {
    if df.node_ids().into_iter().any(|n| {
        matches!(
            df.node(n),
            Node::Map(_) | Node::Library(_) | Node::Nested(_)
        )
    }) {
        return true;
    }
    let tables: Vec<Vec<&str>> = df
        .edge_ids()
        .into_iter()
        .map(|e| df.edge(e).memlet.subset.tables())
        .filter(|t| !t.is_empty())
        .collect();
    let computed = tables
        .iter()
        .flatten()
        .any(|t| matches!(sdfg.arrays.get(*t), Some(DataDesc::Scalar { .. })));
    !tables.is_empty() && (computed || !rows_checked)
}

/// Whether output connector `c` of tasklet `n` goes only to transient scalars whose value
/// only tasklets read (directly, or through copies into other such scalars), without a
/// write-conflict resolution. Its NaN need not be canonical then: every reader's
/// arithmetic gives a NaN whatever the payload of a NaN operand, and no operation
/// (comparison, conversion to an integer, min, max, select) looks at the payload, so what
/// reaches an array (a tasklet output stored there, canonicalized) has the same bits
/// either way. The interpreter canonicalizes every tasklet output.
pub(crate) fn only_tasklets_read(sdfg: &Sdfg, df: &Dataflow, n: NodeId, c: &str) -> bool {
    let outs: Vec<_> = df
        .out_edges(n)
        .into_iter()
        .filter(|&e| df.edge(e).src_conn.as_deref() == Some(c))
        .collect();
    !outs.is_empty()
        && outs.iter().all(|&e| {
            let dst = df.endpoints(e).1;
            df.edge(e).memlet.wcr.is_none()
                && df
                    .node(dst)
                    .as_access()
                    .is_some_and(|d| scalar_only_computed_with(sdfg, df, d, 0))
        })
}

/// Whether transient scalar `d` of map body `df` is read only by tasklets, or copied only
/// into transient scalars for which this holds (at most a few copies deep), and is no
/// index table.
pub(crate) fn scalar_only_computed_with(sdfg: &Sdfg, df: &Dataflow, d: &str, depth: usize) -> bool {
    let scalar = matches!(
        sdfg.arrays.get(d),
        Some(DataDesc::Scalar {
            transient: true,
            ..
        })
    );
    scalar
        && depth < 4
        && df
            .edge_ids()
            .into_iter()
            .all(|r| !df.edge(r).memlet.subset.tables().contains(&d))
        && df.node_ids().into_iter().all(|x| {
            df.node(x).as_access() != Some(d)
                || df.out_edges(x).into_iter().all(|r| {
                    let edge = df.edge(r);
                    let to = df.endpoints(r).1;
                    edge.memlet.wcr.is_none()
                        && match df.node(to) {
                            Node::Tasklet(_) => true,
                            Node::Access(t) => {
                                t != d && scalar_only_computed_with(sdfg, df, t, depth + 1)
                            }
                            _ => false,
                        }
                })
        })
}

/// Whether a map runs at most 16 iterations, known at build time.
pub(crate) fn few_iterations(m: &MapScope) -> bool {
    let sizes: Vec<SymExpr> = m.ranges.iter().map(|r| r.size()).collect();
    constant_product(&sizes, 16).is_some()
}

/// The product of `sizes` (negative ones count as 0) when every one is a constant and the
/// product is at most `limit`.
pub(crate) fn constant_product(sizes: &[SymExpr], limit: i64) -> Option<i64> {
    sizes.iter().try_fold(1i64, |acc, e| {
        let n = e.simplify().as_int()?.max(0);
        acc.checked_mul(n).filter(|v| *v <= limit)
    })
}

/// Whether `df` calls a nested SDFG, directly or inside its maps.
pub(crate) fn calls_nested(df: &Dataflow) -> bool {
    df.node_ids().into_iter().any(|n| match df.node(n) {
        Node::Nested(_) => true,
        Node::Map(m) => calls_nested(&m.body),
        _ => false,
    })
}

/// The index-table values a map body reads at each point of its innermost loop, which
/// a loop before that row can check for all of its points at once
/// ([`Emitter::map_loops_inner`]): each gathered dimension with the extent it must lie
/// in, and the nodes that compute the scalar tables (GT4Py's dynamic vertical offsets),
/// which that loop evaluates first.
pub(crate) struct PointChecks {
    pub(crate) checks: Vec<(Dim, SymExpr)>,
    pub(crate) slice: BTreeSet<NodeId>,
}

/// [`PointChecks`] of a flat body `df` (tasklets and containers only) that gathers
/// through an index it computes (a scalar table) and through array tables it checks at
/// each point (not `rows_checked`: the horizontal loop innermost): those indices and
/// entries. `None` without a computed index — entries alone, read again for every row
/// of levels, cost more checked in a loop of their own than at each point (GT4Py's
/// `calculate_nabla2_for_z`, cells innermost, 14 % slower so) — or with the entries
/// checked with their row (the levels innermost: over a column's few levels the loop
/// costs about what it saves, 5 % slower at 10 levels), and where a check before the
/// row could see other values than the row's points: an array table the body writes,
/// or whose index uses a name other than `params` and program symbols; a scalar table
/// computed from a container the body writes (other than the scalars the plan declares
/// at each point), through a gather or a node other than tasklets and such scalars, or
/// by a tasklet that also writes elsewhere; a copy whose other side gathers.
pub(crate) fn point_checks(
    sdfg: &Sdfg,
    plan: &Plan,
    df: &Dataflow,
    rows_checked: bool,
    params: &BTreeSet<String>,
) -> Option<PointChecks> {
    let per_point =
        |d: &str| matches!(sdfg.arrays.get(d), Some(DataDesc::Scalar { .. })) && plan.body_local(d);
    let mut written = BTreeSet::new();
    for n in df.node_ids() {
        match df.node(n) {
            Node::Access(a) if df.in_degree(n) > 0 && !per_point(a) => {
                written.insert(a.as_str());
            }
            Node::Access(_) | Node::Tasklet(_) => {}
            _ => return None,
        }
    }
    let mut out = PointChecks {
        checks: Vec::new(),
        slice: BTreeSet::new(),
    };
    let mut stack = Vec::new();
    let (mut computed, mut entries) = (false, false);
    for (memlet, k, d) in crate::plan::rows::gathered_dims(df)? {
        let Dim::Indirect { table, index, .. } = d else {
            continue;
        };
        match sdfg.arrays.get(table)? {
            DataDesc::Array(_) if rows_checked => continue,
            DataDesc::Array(_) => {
                entries = true;
                let known = index
                    .iter()
                    .flat_map(SymExpr::free_symbols)
                    .all(|x| params.contains(&x) || sdfg.symbols.contains_key(&x));
                if written.contains(table.as_str()) || !known {
                    return None;
                }
            }
            DataDesc::Scalar { .. } => {
                computed = true;
                stack.extend(
                    df.node_ids()
                        .into_iter()
                        .filter(|&n| df.node(n).as_access() == Some(table.as_str())),
                );
            }
        }
        let extent = sdfg
            .arrays
            .get(&memlet.data)?
            .as_array()?
            .shape
            .get(k)?
            .clone();
        if !out.checks.iter().any(|(x, n)| x == d && *n == extent) {
            out.checks.push((d.clone(), extent));
        }
    }
    let mut seen = BTreeSet::new();
    while let Some(n) = stack.pop() {
        if !seen.insert(n) {
            continue;
        }
        match df.node(n) {
            Node::Access(a) if df.in_degree(n) == 0 && written.contains(a.as_str()) => {
                return None;
            }
            Node::Access(_) => {}
            Node::Tasklet(_) => {
                let elsewhere = df.out_edges(n).into_iter().any(|e| {
                    df.node(df.endpoints(e).1)
                        .as_access()
                        .is_none_or(|d| !per_point(d))
                });
                if elsewhere {
                    return None;
                }
                out.slice.insert(n);
            }
            _ => return None,
        }
        for e in df.in_edges(n) {
            let m = &df.edge(e).memlet;
            if !m.subset.tables().is_empty() || written.contains(m.data.as_str()) {
                return None;
            }
            stack.push(df.endpoints(e).0);
        }
    }
    (computed && entries).then_some(out)
}
