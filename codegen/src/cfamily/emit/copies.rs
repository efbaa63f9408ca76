//! Copies between containers: loop nests over the elements, decomposed where the
//! layouts differ, with write-conflict resolutions.

use super::*;

impl Emitter<'_> {
    /// Copies `edge`'s source subset of `src` to its destination subset of `dst`, element
    /// by element in row-major order (within one container, which may overlap itself, all
    /// reads before the writes).
    pub(crate) fn copy(
        &mut self,
        sc: &Scope<'_>,
        src: &str,
        dst: &str,
        edge: &Edge,
    ) -> Result<(), CodegenError> {
        let m = &edge.memlet;
        let sdfg = sc.sdfg;
        let (s_sub, d_sub) = copy_subsets(sdfg, src, dst, m);
        let st = sdfg.arrays.get(src).map_or(DType::F64, DataDesc::dtype);
        let dt = sdfg.arrays.get(dst).map_or(DType::F64, DataDesc::dtype);
        self.line(&format!(
            "{{ /* copy {} */",
            m.to_string().replace("*/", "* /")
        ));
        self.indent += 1;
        if src != dst && self.copy_loops(sc, src, dst, edge, false) {
            self.indent -= 1;
            self.line("}");
            return Ok(());
        }
        let vol = subset_volume(sc, &s_sub);
        self.line(&format!("const int64_t sdf_n = {vol};"));
        if src != dst {
            // Two containers never overlap: element by element, without a buffer.
            self.line("for (int64_t sdf_q = 0; sdf_q < sdf_n; sdf_q++) {");
            self.indent += 1;
            self.copy_element(sc, src, dst, edge, "sdf_q");
            self.indent -= 1;
            self.line("}");
            self.indent -= 1;
            self.line("}");
            return Ok(());
        }
        self.line(&format!(
            "{}* sdf_buf = ({}*)malloc((size_t)(sdf_n > 0 ? sdf_n : 1) * sizeof({}));",
            ctype(st),
            ctype(st),
            ctype(st)
        ));
        self.line("if (sdf_buf) {");
        self.indent += 1;
        self.line("for (int64_t sdf_q = 0; sdf_q < sdf_n; sdf_q++) {");
        self.indent += 1;
        let s_el = self.decompose(sc, src, &s_sub, "sdf_q", "sdf_s");
        self.line(&format!("sdf_buf[sdf_q] = {s_el};"));
        self.indent -= 1;
        self.line("}");
        self.line("for (int64_t sdf_q = 0; sdf_q < sdf_n; sdf_q++) {");
        self.indent += 1;
        let d_el = self.decompose(sc, dst, &d_sub, "sdf_q", "sdf_d");
        self.store(sc, &d_el, &convert("sdf_buf[sdf_q]", st, dt), dt, m.wcr);
        self.indent -= 1;
        self.line("}");
        self.line("free(sdf_buf);");
        self.indent -= 1;
        self.line("} else { sdf_fail(); }");
        self.indent -= 1;
        self.line("}");
        Ok(())
    }

    /// A copy between two different containers whose subsets have the same sizes once
    /// the dimensions of size 1 are left out, as one loop per remaining dimension in
    /// row-major order (column-major where the destination is: its first dimension
    /// contiguous): the elements the flat order of [`Emitter::copy`] reaches, without a
    /// division per element. `shared`: the loops are shared among the team's threads
    /// (`omp for ... nowait`; the caller is in a parallel region, outside any map).
    /// Returns false, printing nothing, when the shapes differ.
    pub(crate) fn copy_loops(
        &mut self,
        sc: &Scope<'_>,
        src: &str,
        dst: &str,
        edge: &Edge,
        shared: bool,
    ) -> bool {
        let m = &edge.memlet;
        let (s_sub, d_sub) = copy_subsets(sc.sdfg, src, dst, m);
        let Some((sk, dk)) = copy_loop_dims(sc.sdfg, src, &s_sub, dst, &d_sub) else {
            return false;
        };
        let u = self.fresh();
        for (j, &k) in sk.iter().enumerate() {
            let size = sc.sym(&s_sub.0[k].size());
            self.line(&format!("const int64_t sdf_n{u}_{j} = {size};"));
        }
        let s_el = self.copy_loop_elem(sc, src, &s_sub, &sk, u, "s");
        let d_el = self.copy_loop_elem(sc, dst, &d_sub, &dk, u, "d");
        let st = sc.sdfg.arrays.get(src).map_or(DType::F64, DataDesc::dtype);
        let dt = sc.sdfg.arrays.get(dst).map_or(DType::F64, DataDesc::dtype);
        if shared {
            if sk.is_empty() {
                self.team_line(|t| t.single().into());
            } else {
                self.team_line(|t| t.share_loops(sk.len(), OmpSchedule::Static.name()));
            }
        }
        // The loop over the destination's contiguous dimension innermost: the last
        // looped dimension, unless the first has stride 1 and the last does not (a
        // column-major container). A resolved write keeps the row-major order (a sum's
        // rounding follows it).
        let unit = |data: &str, k: Option<&usize>| {
            k.and_then(|&k| sc.sdfg.arrays.get(data)?.as_array()?.strides.get(k))
                .and_then(SymExpr::as_int)
                == Some(1)
        };
        let column_major =
            m.wcr.is_none() && sk.len() > 1 && unit(dst, dk.first()) && !unit(dst, dk.last());
        let order: Vec<usize> = if column_major {
            (0..sk.len()).rev().collect()
        } else {
            (0..sk.len()).collect()
        };
        for j in order {
            self.line(&format!(
                "for (int64_t sdf_i{u}_{j} = 0; sdf_i{u}_{j} < sdf_n{u}_{j}; sdf_i{u}_{j}++)"
            ));
        }
        self.line("{");
        self.indent += 1;
        self.store(sc, &d_el, &convert(&s_el, st, dt), dt, m.wcr);
        self.indent -= 1;
        self.line("}");
        true
    }

    /// The element of `data` that [`Emitter::copy_loops`] reaches: a dimension looped
    /// over (`looped`, in order) at `start + i * step`, the others at their one index,
    /// each computed once before the loops.
    pub(crate) fn copy_loop_elem(
        &mut self,
        sc: &Scope<'_>,
        data: &str,
        subset: &Subset,
        looped: &[usize],
        u: usize,
        side: &str,
    ) -> String {
        let desc = sc.sdfg.arrays.get(data);
        if subset.rank() == 0 || desc.is_none_or(|d| d.rank() == 0) {
            return sc.elem(data, subset);
        }
        let mut idx = Vec::with_capacity(subset.rank());
        for (k, d) in subset.0.iter().enumerate() {
            let first = match d {
                Dim::Range { start, .. } => sc.sym(start),
                other => sc.index(other, desc.and_then(|d| d.shape().get(k))),
            };
            self.line(&format!("const int64_t sdf_{side}{u}_{k} = {first};"));
            idx.push(match (looped.iter().position(|&x| x == k), d) {
                (Some(j), Dim::Range { step, .. }) if step.as_int() != Some(1) => {
                    let step = sc.sym(step);
                    self.line(&format!("const int64_t sdf_{side}t{u}_{k} = {step};"));
                    format!("sdf_{side}{u}_{k} + sdf_i{u}_{j} * sdf_{side}t{u}_{k}")
                }
                (Some(j), _) => format!("sdf_{side}{u}_{k} + sdf_i{u}_{j}"),
                (None, _) => format!("sdf_{side}{u}_{k}"),
            });
        }
        let strides = desc
            .and_then(|d| d.as_array())
            .map(|a| a.strides.clone())
            .unwrap_or_default();
        format!("a_{data}[{}]", sc.flat(&idx, &strides))
    }

    /// Element number `q` (row-major in the source subset) of a copy between two
    /// different containers, by the current thread: the CUDA printer's grid covers a
    /// copy's elements this way (the containers do not overlap, so no buffer is needed).
    pub(crate) fn copy_element(
        &mut self,
        sc: &Scope<'_>,
        src: &str,
        dst: &str,
        edge: &Edge,
        q: &str,
    ) {
        let m = &edge.memlet;
        let (s_sub, d_sub) = copy_subsets(sc.sdfg, src, dst, m);
        let st = sc.sdfg.arrays.get(src).map_or(DType::F64, DataDesc::dtype);
        let dt = sc.sdfg.arrays.get(dst).map_or(DType::F64, DataDesc::dtype);
        let s_el = self.decompose(sc, src, &s_sub, q, "sdf_s");
        let d_el = self.decompose(sc, dst, &d_sub, q, "sdf_d");
        self.store(sc, &d_el, &convert(&s_el, st, dt), dt, m.wcr);
    }

    /// Declares the multi-index of element number `q` (row-major) of `subset` and returns
    /// the element's lvalue.
    pub(crate) fn decompose(
        &mut self,
        sc: &Scope<'_>,
        data: &str,
        subset: &Subset,
        q: &str,
        prefix: &str,
    ) -> String {
        let rank = subset.rank();
        let desc = sc.sdfg.arrays.get(data);
        if rank == 0 || desc.is_none_or(|d| d.rank() == 0) {
            return sc.elem(data, subset);
        }
        self.line(&format!("int64_t {prefix}_r = {q};"));
        let mut idx = vec![String::new(); rank];
        for k in (0..rank).rev() {
            let d = &subset.0[k];
            let size = sc.sym(&d.size());
            let (start, step) = match d {
                Dim::Range { start, step, .. } => (sc.sym(start), sc.sym(step)),
                other => (
                    sc.index(other, desc.and_then(|d| d.shape().get(k))),
                    "1".to_string(),
                ),
            };
            self.line(&format!(
                "const int64_t {prefix}{k} = ({start}) + ({prefix}_r % ({size})) * ({step}); {prefix}_r /= ({size});"
            ));
            idx[k] = format!("{prefix}{k}");
        }
        let strides = desc
            .and_then(|d| d.as_array())
            .map(|a| a.strides.clone())
            .unwrap_or_default();
        format!("a_{data}[{}]", sc.flat(&idx, &strides))
    }
}

pub(crate) fn has_copy_in(df: &Dataflow, n: NodeId) -> bool {
    df.in_edges(n)
        .into_iter()
        .any(|e| df.node(df.endpoints(e).0).as_access().is_some())
}

pub(crate) fn subset_volume(sc: &Scope<'_>, s: &Subset) -> String {
    if s.0.is_empty() {
        return "1".to_string();
    }
    s.0.iter()
        .map(|d| format!("sdf_max64({}, 0)", sc.sym(&d.size())))
        .collect::<Vec<_>>()
        .join(" * ")
}
