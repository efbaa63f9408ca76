//! Row-jammed printing of a producer–consumer pair in one map body, in the shape the
//! plan decided (`plan::jam`: whether a body is jammed, the row and column offsets,
//! whether the column loop is `simd`, which rows are prefetched). Printed as they stand,
//! A' writes all its rows of `buf`, then B' reads them: while A' runs only the input
//! streams are in flight, while B' runs only the output stream, and a memory-bound pair
//! runs at about half the bandwidth of a copy (`docs/perf.md`, `scripts/perf/stencil-loops`).
//! Jammed, each row of B' is computed in one column loop with the row of A' it is the
//! last to need; the rows of A' before B's first one are produced first, the rows after
//! its last one after, the columns of A' outside B's (shifted by `k`) around the loop.
//!
//! A `simd` column loop is marked so (eight lanes: the widest vectors available; results
//! are elementwise, so the lanes change nothing).
//!
//! The column loop runs in blocks of [`BLOCK`] columns; before each block the leading
//! row of every container the pair reads or writes from outside (the row no earlier
//! iteration has touched: for a stencil, the input row below the producer's newest and
//! the output row) is prefetched [`AHEAD`] columns ahead — past a row's end that is the
//! start of the next row, where the next iteration goes — with the element index
//! clamped to the container, so that every address is inside it. A core keeps more
//! memory requests in flight that way than the hardware prefetcher alone starts: on the
//! development machine this took the fused hyperdiffusion from 68–70 % to 83–86 % of a
//! copy's bandwidth (`docs/perf.md`).

use super::*;
use crate::plan::jam::{AHEAD, BLOCK, Jam, rows_cols};

/// The producer and consumer maps of `jam` in `df`.
fn pair<'d>(df: &'d Dataflow, jam: &Jam) -> Result<(&'d MapScope, &'d MapScope), CodegenError> {
    match (df.node(jam.producer), df.node(jam.consumer)) {
        (Node::Map(a), Node::Map(b)) => Ok((a, b)),
        _ => Err(CodegenError::Unsupported(
            "the plan jams a map body that is not its producer–consumer pair".into(),
        )),
    }
}

impl Emitter<'_> {
    /// Prints the pair of `jam` in the map body `df` (see the module documentation), in
    /// scope `sc`.
    pub(super) fn jammed(
        &mut self,
        sc: &Scope<'_>,
        df: &Dataflow,
        jam: &Jam,
    ) -> Result<(), CodegenError> {
        let (a, b) = pair(df, jam)?;
        let (Some((ar, ac)), Some((br, bc))) = (rows_cols(a), rows_cols(b)) else {
            return Err(CodegenError::Unsupported(
                "the plan jams maps that are not row × column maps".into(),
            ));
        };
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
        self.prefetch(sc, (a, b), jam, &blk, &ai)?;
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
        (a, b): (&MapScope, &MapScope),
        jam: &Jam,
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
            .filter_map(|s| sc.sdfg.arrays.get(&s.data))
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
            let Some(DataDesc::Array(arr)) = sc.sdfg.arrays.get(&st.data) else {
                continue;
            };
            let m = if st.by_producer { a } else { b };
            let subset = &m.body.edge(st.edge).memlet.subset;
            let mut inner = sc.at(LocPart::Text(format!("map '{}'", m.label)));
            inner.params.extend(m.params.iter().cloned());
            self.line("{");
            self.indent += 1;
            if st.by_producer {
                self.line(&format!("const int64_t s_{} = {a_row};", m.params[0]));
                self.line(&format!(
                    "const int64_t s_{} = {p} + {}LL;",
                    m.params[1], jam.k
                ));
            } else {
                self.line(&format!("const int64_t s_{} = {p};", m.params[1]));
            }
            // The element's index, clamped to the container's: Σ (shape − 1) · stride.
            let idx: Vec<String> = subset
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
        // A jammed pair's column loop vectorizes: its NaNs are canonicalized by the
        // conditional, whatever loop encloses the pair.
        self.point_body(sc, m, false, false)?;
        self.indent -= 1;
        self.line("}");
        Ok(())
    }
}
