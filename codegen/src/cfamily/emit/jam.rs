//! Row-jammed emission of a producer–consumer pair in one map body (the shape tiled
//! fusion leaves: `A' ─► buf ─► B'`, two row × column maps run one after the other by
//! the body's thread). Printed as they stand, A' writes all its rows of `buf`, then B'
//! reads them: while A' runs only the input streams are in flight, while B' runs only
//! the output stream, and a memory-bound pair runs at about half the bandwidth of a copy
//! (`docs/perf.md`, `scripts/perf/stencil-loops`). Jammed, each row `i` of B' is computed
//! in one column loop with the row of A' it is the last to need (`i + dmax`): per column
//! `j`, A' at column `j + k` (`k`: the largest column offset at which B' reads that
//! newest row), then B' at `j`. The rows of A' before B's first one are produced first,
//! the rows after its last one after, the columns of A' outside B's (shifted by `k`)
//! around the loop. Every element of A' is computed once, before any read of it, so the
//! values are those of the plain order, bit for bit; only the order of independent
//! points changes.
//!
//! When B' reads the newest row only at column offset `k` (a value the same iteration
//! has just computed) and writes each element at most once per row, the column loop
//! carries no dependence and is marked `omp simd` (eight lanes: the widest vectors
//! available; results are elementwise, so the lanes change nothing).
//!
//! The column loop runs in blocks of [`BLOCK`] columns; before each block the leading
//! row of every container the pair reads or writes from outside (the row no earlier
//! iteration has touched: for a stencil, the input row below the producer's newest and
//! the output row) is prefetched [`AHEAD`] columns ahead — past a row's end that is the
//! start of the next row, where the next iteration goes — with the element index
//! clamped to the container, so that every address is inside it. A core keeps more
//! memory requests in flight that way than the hardware prefetcher alone starts: on the
//! development machine this took the fused hyperdiffusion from 68–70 % to 83–86 % of a copy's
//! bandwidth (`docs/perf.md`).

use super::*;
use sdflow_ir::{Range, Schedule};

/// A body the jammed form applies to, with what the printer needs.
pub(super) struct Jam<'d> {
    a: &'d MapScope,
    b: &'d MapScope,
    /// Row offset of B's newest row of `buf` (B' row `i` needs A' rows up to `i + dmax`).
    dmax: i64,
    /// Column skew: A' at column `j + k` is computed in B's column `j`.
    k: i64,
    /// The column loop carries no dependence.
    simd: bool,
    /// What to prefetch ahead of each block of columns.
    streams: Vec<Stream<'d>>,
}

/// One container the pair accesses from outside, at its leading row.
struct Stream<'d> {
    data: &'d str,
    subset: &'d Subset,
    /// Accessed by A' (at A's point), else by B'.
    by_a: bool,
    write: bool,
}

/// Columns per block of the jammed loop.
const BLOCK: i64 = 64;
/// Columns ahead of the block that are prefetched.
const AHEAD: i64 = 256;

/// The streams of a pair: per container accessed from outside the two bodies, the access
/// with the largest row (A's rows are `dmax` below B's).
fn streams<'d>(
    sdfg: &Sdfg,
    a: &'d MapScope,
    b: &'d MapScope,
    buf: &str,
    dmax: i64,
) -> Vec<Stream<'d>> {
    let mut lead: BTreeMap<&'d str, (i64, Stream<'d>)> = BTreeMap::new();
    for (m, by_a) in [(a, true), (b, false)] {
        let row = SymExpr::sym(&m.params[0]);
        for e in m.body.edge_ids() {
            let (s, d) = m.body.endpoints(e);
            let memlet = &m.body.edge(e).memlet;
            let (data, write) = match (m.body.node(s).as_access(), m.body.node(d).as_access()) {
                (Some(x), _) if m.body.in_degree(s) == 0 => (x, false),
                (_, Some(x)) => (x, true),
                _ => continue,
            };
            let is_array = matches!(sdfg.arrays.get(data), Some(DataDesc::Array(_)));
            let Some((r, _)) = indices(&memlet.subset) else {
                continue;
            };
            let Some(r) = offset(r, &row) else { continue };
            if data == buf || !is_array {
                continue;
            }
            let r = if by_a { r + dmax } else { r };
            let stream = Stream {
                data,
                subset: &memlet.subset,
                by_a,
                write,
            };
            match lead.get(data) {
                Some((best, _)) if *best >= r => {}
                _ => {
                    lead.insert(data, (r, stream));
                }
            }
        }
    }
    lead.into_values().map(|(_, s)| s).collect()
}

/// The integer offset `e - base` when it is a constant.
fn offset(e: &SymExpr, base: &SymExpr) -> Option<i64> {
    e.const_diff(base)
}

/// The integer `(x - px) - (y - py)`: how far the element index `x` of a point at `px` is
/// from the index `y` of a point at `py` (both may hold the same symbolic shift).
fn relative(x: &SymExpr, px: &SymExpr, y: &SymExpr, py: &SymExpr) -> Option<i64> {
    x.sub(px).const_diff(&y.sub(py))
}

/// The subset's two dimensions as single indices.
fn indices(s: &Subset) -> Option<(&SymExpr, &SymExpr)> {
    match s.0.as_slice() {
        [Dim::Index(r), Dim::Index(c)] => Some((r, c)),
        _ => None,
    }
}

/// A body of tasklets and access nodes only, no write-conflict resolution.
fn plain_body(df: &Dataflow) -> bool {
    df.node_ids()
        .iter()
        .all(|&n| matches!(df.node(n), Node::Access(_) | Node::Tasklet(_)))
        && df
            .edge_ids()
            .iter()
            .all(|&e| df.edge(e).memlet.wcr.is_none())
}

/// Row and column ranges of a two-parameter map with unit steps.
fn rows_cols(m: &MapScope) -> Option<(&Range, &Range)> {
    match m.ranges.as_slice() {
        // The column range must not use the row (the printer evaluates the ranges outside
        // the loops).
        [r, c]
            if r.step.as_int() == Some(1)
                && c.step.as_int() == Some(1)
                && crate::plan::independent_depth(m) == 2 =>
        {
            Some((r, c))
        }
        _ => None,
    }
}

impl<'d> Jam<'d> {
    /// The jammed form of `df`, when it is a pair `A' ─► buf ─► B'` that can be printed so.
    pub(super) fn of(sdfg: &Sdfg, df: &'d Dataflow) -> Option<Jam<'d>> {
        let maps: Vec<NodeId> = df
            .node_ids()
            .into_iter()
            .filter(|&n| matches!(df.node(n), Node::Map(_)))
            .collect();
        let [x, y] = maps.as_slice() else {
            return None;
        };
        // Every other node is an access node; the one between the maps is `buf`.
        if df
            .node_ids()
            .iter()
            .any(|&n| !matches!(df.node(n), Node::Access(_) | Node::Map(_)))
        {
            return None;
        }
        let feeds = |from: NodeId, to: NodeId| -> Option<(NodeId, String)> {
            let outs = df.out_edges(from);
            let [e] = outs.as_slice() else { return None };
            let t = df.endpoints(*e).1;
            let buf = df.node(t).as_access()?.to_string();
            let reads = df.out_edges(t);
            (!reads.is_empty() && reads.iter().all(|&r| df.endpoints(r).1 == to))
                .then_some((t, buf))
        };
        let ((an, bn), (t, buf)) = match (feeds(*x, *y), feeds(*y, *x)) {
            (Some(f), None) => ((*x, *y), f),
            (None, Some(f)) => ((*y, *x), f),
            _ => return None,
        };
        if df.in_degree(t) != 1 {
            return None;
        }
        let (Node::Map(a), Node::Map(b)) = (df.node(an), df.node(bn)) else {
            return None;
        };
        let local = matches!(sdfg.arrays.get(&buf), Some(DataDesc::Array(arr)) if arr.transient);
        if !local
            || a.schedule != Schedule::Sequential
            || b.schedule != Schedule::Sequential
            || !plain_body(&a.body)
            || !plain_body(&b.body)
            || rows_cols(a).is_none()
            || rows_cols(b).is_none()
        {
            return None;
        }
        // Nothing B' writes is read by A', and nothing else is written between them: the
        // maps' other edges come from access nodes that nothing in the body writes.
        let written_by_b: BTreeSet<&str> = df
            .out_edges(bn)
            .iter()
            .filter_map(|&e| df.node(df.endpoints(e).1).as_access())
            .collect();
        if written_by_b.contains(buf.as_str()) {
            return None;
        }
        for &e in &df.in_edges(an) {
            let src = df.endpoints(e).0;
            let d = df.node(src).as_access()?;
            if written_by_b.contains(d) || df.in_degree(src) != 0 {
                return None;
            }
        }
        for &e in &df.in_edges(bn) {
            let src = df.endpoints(e).0;
            if src != t && (df.node(src).as_access().is_none() || df.in_degree(src) != 0) {
                return None;
            }
        }
        // A' writes buf at one element per point, at its parameters plus constants.
        let (pa_r, pa_c) = (SymExpr::sym(&a.params[0]), SymExpr::sym(&a.params[1]));
        let (pb_r, pb_c) = (SymExpr::sym(&b.params[0]), SymExpr::sym(&b.params[1]));
        let a_writes: Vec<&Subset> = a
            .body
            .edge_ids()
            .into_iter()
            .filter(|&e| a.body.node(a.body.endpoints(e).1).as_access() == Some(buf.as_str()))
            .map(|e| &a.body.edge(e).memlet.subset)
            .collect();
        let [w] = a_writes.as_slice() else {
            return None;
        };
        let (wr, wc) = indices(w)?;
        // B' reads buf at its parameters plus constants; in A's terms, the point of A'
        // that wrote it is B's point plus (d, c).
        let mut reads: Vec<(i64, i64)> = Vec::new();
        for e in b.body.edge_ids() {
            let (s, _) = b.body.endpoints(e);
            let m = &b.body.edge(e).memlet;
            if b.body.node(s).as_access() != Some(buf.as_str()) {
                if m.data == buf || m.subset.tables().contains(&buf.as_str()) {
                    return None;
                }
                continue;
            }
            let (rr, rc) = indices(&m.subset)?;
            reads.push((
                relative(rr, &pb_r, wr, &pa_r)?,
                relative(rc, &pb_c, wc, &pa_c)?,
            ));
        }
        let dmax = reads.iter().map(|r| r.0).max()?;
        let newest: Vec<i64> = reads.iter().filter(|r| r.0 == dmax).map(|r| r.1).collect();
        let k = *newest.iter().max()?;
        // A's columns cover B's shifted by k, so the loop computes A' at every j + k.
        let ((_, ac), (_, bc)) = (rows_cols(a)?, rows_cols(b)?);
        let front = bc.start.add(&SymExpr::Int(k)).const_diff(&ac.start)?;
        let back = ac.end.const_diff(&bc.end.add(&SymExpr::Int(k)))?;
        if front < 0 || back < 0 {
            return None;
        }
        // Each write of B' goes to its own element per column (its column parameter plus a
        // constant), so lanes never write the same element.
        let distinct_writes = b.body.edge_ids().into_iter().all(|e| {
            let (_, d) = b.body.endpoints(e);
            b.body.node(d).as_access().is_none_or(|data| {
                matches!(
                    sdfg.arrays.get(data),
                    Some(DataDesc::Scalar {
                        transient: true,
                        ..
                    })
                ) || indices(&b.body.edge(e).memlet.subset)
                    .is_some_and(|(_, c)| offset(c, &pb_c).is_some())
            })
        });
        // Lanes read before they write: a container B' both reads and writes (an update
        // in place, defined in the points' order) keeps the loop scalar.
        let in_place = df.in_edges(bn).iter().any(|&e| {
            df.node(df.endpoints(e).0)
                .as_access()
                .is_some_and(|d| written_by_b.contains(d))
        });
        let simd = newest.iter().all(|&c| c == k) && distinct_writes && !in_place;
        Some(Jam {
            a,
            b,
            dmax,
            k,
            simd,
            streams: streams(sdfg, a, b, &buf, dmax),
        })
    }
}

impl Emitter<'_> {
    /// Prints the pair of `jam` (see the module documentation), in scope `sc`.
    pub(super) fn jammed(&mut self, sc: &Scope<'_>, jam: &Jam<'_>) -> Result<(), CodegenError> {
        let (a, b) = (jam.a, jam.b);
        let ((ar, ac), (br, bc)) = (
            rows_cols(a).expect("checked by Jam::of"),
            rows_cols(b).expect("checked by Jam::of"),
        );
        let (ib, jb) = (&b.params[0], &b.params[1]);
        let n = self.fresh();
        let (ai, aj, pe) = (
            format!("sdf_ai{n}"),
            format!("sdf_aj{n}"),
            format!("sdf_pe{n}"),
        );
        let s = |e: &SymExpr| sc.sub_sym(e);
        self.line(&format!(
            "/* maps '{}' and '{}', row-jammed */",
            a.label.replace("*/", "* /"),
            b.label.replace("*/", "* /")
        ));
        self.line("{");
        self.indent += 1;
        let (ar0, ar1, br0, br1) = (s(&ar.start), s(&ar.end), s(&br.start), s(&br.end));
        let (ac0, ac1, bc0, bc1) = (s(&ac.start), s(&ac.end), s(&bc.start), s(&bc.end));
        let (dmax, k) = (jam.dmax, jam.k);
        // Rows of A' before B's first row needs them in the loop: [ar0, pe).
        self.line(&format!(
            "const int64_t {pe} = sdf_max64({ar0}, sdf_min64({ar1}, ({br0}) + {dmax}LL));"
        ));
        // A' at row `row`, columns [from, to).
        let a_rows = |em: &mut Self, row: &str, from: &str, to: &str| -> Result<(), CodegenError> {
            em.line(&format!(
                "for (int64_t {aj} = {from}; {aj} < {to}; {aj}++) {{"
            ));
            em.indent += 1;
            em.a_point(sc, a, row, &aj)?;
            em.indent -= 1;
            em.line("}");
            Ok(())
        };
        self.line(&format!(
            "for (int64_t {ai} = {ar0}; {ai} < {pe}; {ai}++) {{"
        ));
        self.indent += 1;
        a_rows(self, &ai, &ac0, &ac1)?;
        self.indent -= 1;
        self.line("}");
        // B's rows, each with the newest row of A' it needs.
        self.line(&format!(
            "for (int64_t s_{ib} = {br0}; s_{ib} < {br1}; s_{ib}++) {{"
        ));
        self.indent += 1;
        self.line(&format!("const int64_t {ai} = s_{ib} + {dmax}LL;"));
        self.line(&format!("if ({ai} >= {pe} && {ai} < {ar1}) {{"));
        self.indent += 1;
        // Up to B's first column shifted by k; with no column of B' (a grid narrower than
        // its halo) that can lie past A's last column, so it is clamped there.
        a_rows(
            self,
            &ai,
            &ac0,
            &format!("sdf_min64(({bc0}) + {k}LL, {ac1})"),
        )?;
        let (blk, end) = (format!("sdf_jb{n}"), format!("sdf_je{n}"));
        self.line(&format!(
            "for (int64_t {blk} = {bc0}; {blk} < {bc1}; {blk} += {BLOCK}LL) {{"
        ));
        self.indent += 1;
        self.line(&format!(
            "const int64_t {end} = sdf_min64({blk} + {BLOCK}LL, {bc1});"
        ));
        self.prefetch(sc, jam, &blk, &ai)?;
        if jam.simd {
            self.team_line(|t| t.simd(8));
        }
        self.line(&format!(
            "for (int64_t s_{jb} = {blk}; s_{jb} < {end}; s_{jb}++) {{"
        ));
        self.indent += 1;
        self.line(&format!("const int64_t {aj} = s_{jb} + {k}LL;"));
        self.a_point(sc, a, &ai, &aj)?;
        self.b_point(sc, b)?;
        self.indent -= 1;
        self.line("}");
        self.indent -= 1;
        self.line("}");
        a_rows(self, &ai, &format!("sdf_max64({bc0}, {bc1}) + {k}LL"), &ac1)?;
        self.indent -= 1;
        self.line("} else {");
        self.indent += 1;
        self.line(&format!(
            "for (int64_t s_{jb} = {bc0}; s_{jb} < {bc1}; s_{jb}++) {{"
        ));
        self.indent += 1;
        self.b_point(sc, b)?;
        self.indent -= 1;
        self.line("}");
        self.indent -= 1;
        self.line("}");
        self.indent -= 1;
        self.line("}");
        // Rows of A' after the ones B's last row needs.
        self.line(&format!(
            "for (int64_t {ai} = sdf_max64({pe}, ({br1}) + {dmax}LL); {ai} < {ar1}; {ai}++) {{"
        ));
        self.indent += 1;
        a_rows(self, &ai, &ac0, &ac1)?;
        self.indent -= 1;
        self.line("}");
        self.indent -= 1;
        self.line("}");
        Ok(())
    }

    /// Prefetches of the leading rows, [`AHEAD`] columns past the block starting at `blk`
    /// (one per cache line); A's row is `a_row`.
    fn prefetch(
        &mut self,
        sc: &Scope<'_>,
        jam: &Jam<'_>,
        blk: &str,
        a_row: &str,
    ) -> Result<(), CodegenError> {
        if jam.streams.is_empty() {
            return Ok(());
        }
        let n = self.fresh();
        let p = format!("sdf_p{n}");
        // One cache line (64 bytes) per step for the widest element of the streams.
        let size = jam
            .streams
            .iter()
            .filter_map(|s| sc.sdfg.arrays.get(s.data))
            .map(|d| d.dtype().size_bytes() as i64)
            .max()
            .unwrap_or(8);
        let step = (64 / size).max(1);
        self.line(&format!(
            "for (int64_t {p} = {blk} + {AHEAD}LL; {p} < {blk} + {}LL; {p} += {step}LL) {{",
            AHEAD + BLOCK
        ));
        self.indent += 1;
        for st in &jam.streams {
            let Some(DataDesc::Array(arr)) = sc.sdfg.arrays.get(st.data) else {
                continue;
            };
            let m = if st.by_a { jam.a } else { jam.b };
            let mut inner = sc.at(LocPart::Text(format!("map '{}'", m.label)));
            inner.params.extend(m.params.iter().cloned());
            self.line("{");
            self.indent += 1;
            if st.by_a {
                self.line(&format!("const int64_t s_{} = {a_row};", m.params[0]));
                self.line(&format!(
                    "const int64_t s_{} = {p} + {}LL;",
                    m.params[1], jam.k
                ));
            } else {
                self.line(&format!("const int64_t s_{} = {p};", m.params[1]));
            }
            // The element's index, clamped to the container's: Σ (shape − 1) · stride.
            let idx: Vec<String> = st
                .subset
                .0
                .iter()
                .enumerate()
                .map(|(d, dim)| inner.index(dim, arr.shape.get(d)))
                .collect();
            let flat = inner.flat(&idx, &arr.strides);
            let last = arr
                .shape
                .iter()
                .zip(&arr.strides)
                .fold(SymExpr::Int(0), |acc, (n, s)| {
                    acc.add(&n.sub(&SymExpr::Int(1)).mul(s))
                })
                .simplify();
            let rw = if st.write { 1 } else { 0 };
            self.line(&format!(
                "__builtin_prefetch(&a_{}[sdf_max64(0, sdf_min64({flat}, {}))], {rw}, 2);",
                st.data,
                inner.sub_sym(&last)
            ));
            self.indent -= 1;
            self.line("}");
        }
        self.indent -= 1;
        self.line("}");
        Ok(())
    }

    /// One point of A' at row `row` and column `col` (C variables), its parameters
    /// declared in a block of their own.
    fn a_point(
        &mut self,
        sc: &Scope<'_>,
        a: &MapScope,
        row: &str,
        col: &str,
    ) -> Result<(), CodegenError> {
        self.point(sc, a, &[row, col])
    }

    /// One point of B' (its parameters are the loop variables).
    fn b_point(&mut self, sc: &Scope<'_>, b: &MapScope) -> Result<(), CodegenError> {
        self.point(sc, b, &[])
    }

    /// The body of `m` in a block of its own, its parameters set to `values` (C
    /// expressions, in parameter order) where given.
    fn point(&mut self, sc: &Scope<'_>, m: &MapScope, values: &[&str]) -> Result<(), CodegenError> {
        self.line("{");
        self.indent += 1;
        for (p, v) in m.params.iter().zip(values) {
            self.line(&format!("const int64_t s_{p} = {v};"));
        }
        let inner = self.body_scope(sc, m, false);
        // A jammed pair's column loop vectorizes: its NaNs are canonicalized by the
        // conditional, whatever loop encloses the pair.
        let blend = std::mem::replace(&mut self.blend_canon, false);
        let done = self.body(&inner, &m.body);
        self.blend_canon = blend;
        done?;
        self.indent -= 1;
        self.line("}");
        Ok(())
    }
}
