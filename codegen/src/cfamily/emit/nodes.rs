//! The nodes: tasklets, stores with write-conflict resolutions and reductions (copies in
//! `copies.rs`, nested SDFG calls in `nested.rs`).

use super::*;

impl Emitter<'_> {
    pub(crate) fn tasklet(
        &mut self,
        sc: &Scope<'_>,
        df: &Dataflow,
        n: NodeId,
        t: &Tasklet,
    ) -> Result<(), CodegenError> {
        self.line(&format!(
            "{{ /* tasklet '{}' */",
            t.name.replace("*/", "* /")
        ));
        self.indent += 1;
        // Inputs the code reads only under a lazy condition are read where it evaluates
        // them (one expression, checked ones too), every other one here.
        let lazy_names = t.lazy_inputs();
        let mut lazy: BTreeMap<&str, String> = BTreeMap::new();
        for e in df.in_edges(n) {
            let edge = df.edge(e);
            let Some(c) = &edge.dst_conn else { continue };
            let Some(&ct) = t.inputs.get(c) else { continue };
            let dt = sc
                .sdfg
                .arrays
                .get(&edge.memlet.data)
                .map_or(ct, DataDesc::dtype);
            if lazy_names.contains(c.as_str()) {
                let read = if sc.checked {
                    let v = self.checked_read_expr(sc, &edge.memlet.data, &edge.memlet.subset);
                    convert(&v, dt, ct)
                } else {
                    convert(&sc.elem(&edge.memlet.data, &edge.memlet.subset), dt, ct)
                };
                lazy.insert(c.as_str(), format!("({read})"));
                continue;
            }
            let v = if sc.checked {
                self.checked_elem(sc, &edge.memlet.data, &edge.memlet.subset)
            } else if sc.exits_allowed() {
                // Its table values checked by statements before the read.
                let exits = RefCell::new(Vec::new());
                let esc = Scope {
                    exits: Some(&exits),
                    ..sc.clone()
                };
                let v = esc.elem(&edge.memlet.data, &edge.memlet.subset);
                for l in exits.into_inner() {
                    self.line(&l);
                }
                v
            } else {
                sc.elem(&edge.memlet.data, &edge.memlet.subset)
            };
            self.line(&format!(
                "const {} v_{c} = {};",
                ctype(ct),
                convert(&v, dt, ct)
            ));
        }
        if let (true, Some(stop)) = (sc.checked, &sc.stop) {
            self.line(&format!("if (sdf_e->failed) goto {stop};"));
        }
        for (c, ct) in &t.outputs {
            self.line(&format!("{} v_{c} = 0;", ctype(*ct)));
        }
        let mut names = TaskletNames::new(t);
        for st in &t.code {
            let var = |name: &str| -> (String, DType) {
                let is_param = |p: &str| sc.params.contains(p);
                let symbol = |s: &str| sc.sdfg.symbols.get(s).map(|s| s.dtype);
                match names.resolve(name, &is_param, &symbol) {
                    Some((Binding::Input, ty)) if lazy.contains_key(name) => {
                        (lazy[name].clone(), ty)
                    }
                    Some((Binding::Input | Binding::Local | Binding::Output, ty)) => {
                        (format!("v_{name}"), ty)
                    }
                    Some((Binding::Symbol, ty)) if !ty.is_float() => {
                        (format!("(({})s_{name})", ctype(ty)), ty)
                    }
                    Some((_, ty)) => (format!("s_{name}"), ty),
                    None => (format!("s_{name}"), DType::I64),
                }
            };
            // Integer division raises at a site of its own: the message names the
            // statement and the operands, as the interpreter's does.
            let mut site = |op: BinOp| {
                Some(sc.site_at_point(SiteKind::TaskletDivZero {
                    op: op.symbol().to_string(),
                    stmt: st.to_string(),
                }))
            };
            let (x, ty) = cexpr::expr_sited(&st.value, &var, &mut site);
            match names.assign(&st.target, ty) {
                (Binding::Output, out_t) if only_tasklets_read(sc.sdfg, df, n, &st.target) => {
                    self.line(&format!("v_{} = {};", st.target, convert(&x, ty, out_t)));
                }
                (Binding::Output, out_t) => self.line(&format!(
                    "v_{} = {};",
                    st.target,
                    self.canon()(&convert(&x, ty, out_t), out_t)
                )),
                _ => self.line(&format!("{} v_{} = {x};", ctype(ty), st.target)),
            }
        }
        for e in df.out_edges(n) {
            let edge = df.edge(e);
            let Some(c) = &edge.src_conn else { continue };
            let Some(&ct) = t.outputs.get(c) else {
                continue;
            };
            let data = &edge.memlet.data;
            let dt = sc.sdfg.arrays.get(data).map_or(ct, DataDesc::dtype);
            let lv = if sc.checked {
                let lv = self.checked_elem(sc, data, &edge.memlet.subset);
                if let Some(stop) = &sc.stop {
                    self.line(&format!("if (sdf_e->failed) goto {stop};"));
                }
                lv
            } else {
                sc.elem(data, &edge.memlet.subset)
            };
            self.store(
                sc,
                &lv,
                &convert(&format!("v_{c}"), ct, dt),
                dt,
                edge.memlet.wcr,
            );
        }
        self.indent -= 1;
        self.line("}");
        Ok(())
    }

    /// `lv = value`, or combined under `wcr` (atomically inside parallel maps).
    pub(crate) fn store(
        &mut self,
        sc: &Scope<'_>,
        lv: &str,
        value: &str,
        dt: DType,
        wcr: Option<Wcr>,
    ) {
        let Some(w) = wcr else {
            self.line(&format!("{lv} = {value};"));
            return;
        };
        let combined = self.combine(w, lv, value, dt);
        if sc.in_parallel_map {
            for l in self.fns.dialect.atomic_combine(w, dt, lv, value, &combined) {
                self.line(&l);
            }
        } else {
            self.line(&format!("{lv} = {combined};"));
        }
    }

    pub(crate) fn reduce(
        &mut self,
        sc: &Scope<'_>,
        df: &Dataflow,
        n: NodeId,
        r: &Reduce,
    ) -> Result<(), CodegenError> {
        let parts = ReduceParts::of(sc, df, n, r)?;
        self.line("{ /* reduce */");
        self.indent += 1;
        self.line(&format!(
            "const int64_t sdf_nk = {}, sdf_nr = {};",
            parts.count(sc, &parts.kept),
            parts.count(sc, &parts.red)
        ));
        self.line("for (int64_t sdf_o = 0; sdf_o < sdf_nk; sdf_o++) {");
        self.indent += 1;
        self.reduce_point(sc, &parts);
        self.indent -= 1;
        self.line("}");
        self.indent -= 1;
        self.line("}");
        Ok(())
    }

    /// Output element number `sdf_o` (row-major over the kept axes) of a reduction: its
    /// inputs combined in row-major order over the reduced axes (`sdf_nr` of them), then
    /// stored. Each output element is one sequential sum, so a grid over the outputs (the
    /// CUDA printer's) combines in the interpreter's order.
    pub(crate) fn reduce_point(&mut self, sc: &Scope<'_>, parts: &ReduceParts<'_>) {
        let ReduceParts {
            r,
            idata,
            odata,
            it,
            ot,
            isub,
            osub,
            wcr,
            ..
        } = parts;
        let (r, it, ot) = (*r, *it, *ot);
        let sdfg = sc.sdfg;
        let rank = isub.rank();
        let sizes: Vec<String> = isub.0.iter().map(|d| sc.sym(&d.size())).collect();
        let t = ctype(it);
        match r.identity {
            Some(v) => self.line(&format!(
                "{t} sdf_acc = {};",
                convert(&literal(v), v.dtype(), it)
            )),
            None => self.line(&format!("{t} sdf_acc = 0;")),
        }
        self.line("for (int64_t sdf_i = 0; sdf_i < sdf_nr; sdf_i++) {");
        self.indent += 1;
        // Multi-index: kept axes from sdf_o, reduced axes from sdf_i (row-major each).
        self.line("int64_t sdf_ko = sdf_o, sdf_ri = sdf_i;");
        let mut idx = vec![String::new(); rank];
        for k in (0..rank).rev() {
            let (var, src) = if parts.red.contains(&k) {
                ("sdf_ri", "r")
            } else {
                ("sdf_ko", "k")
            };
            let d = &isub.0[k];
            let (start, step) = match d {
                Dim::Range { start, step, .. } => (sc.sym(start), sc.sym(step)),
                other => (
                    sc.index(
                        other,
                        sdfg.arrays.get(*idata).and_then(|d| d.shape().get(k)),
                    ),
                    "1".to_string(),
                ),
            };
            self.line(&format!(
                "const int64_t sdf_{src}{k} = ({start}) + ({var} % ({})) * ({step}); {var} /= ({});",
                sizes[k], sizes[k]
            ));
            idx[k] = format!("sdf_{src}{k}");
        }
        let strides = sdfg
            .arrays
            .get(*idata)
            .and_then(|d| d.as_array())
            .map(|a| a.strides.clone())
            .unwrap_or_default();
        let x = format!("a_{idata}[{}]", sc.flat(&idx, &strides));
        if r.identity.is_some() {
            self.line(&format!(
                "sdf_acc = {};",
                self.combine(r.op, "sdf_acc", &x, it)
            ));
        } else {
            self.line(&format!(
                "sdf_acc = (sdf_i == 0) ? {x} : {};",
                self.combine(r.op, "sdf_acc", &x, it)
            ));
        }
        self.indent -= 1;
        self.line("}");
        let d_el = self.decompose(sc, odata, osub, "sdf_o", "sdf_w");
        self.store(sc, &d_el, &convert("sdf_acc", it, ot), ot, *wcr);
    }
}

impl Emitter<'_> {
    /// A loop over the elements of `data[subset]` (the whole container for an empty
    /// subset) in row-major order, with counter `sdf_q`; `body` gets each element's
    /// lvalue and the container's type. `len` (C) is the number of elements of the inner
    /// array it fills or empties: a window of another size, or one outside the container,
    /// raises the error flag and copies nothing (the interpreter refuses both, naming the
    /// connector or the array).
    pub(crate) fn element_loop(
        &mut self,
        sc: &Scope<'_>,
        data: &str,
        subset: &Subset,
        len: &str,
        prefix: &str,
        body: &dyn Fn(&mut Self, &str, DType),
    ) {
        let desc = sc.sdfg.arrays.get(data);
        let dt = desc.map_or(DType::F64, DataDesc::dtype);
        let sub = if subset.0.is_empty() {
            Subset::full(desc.map(|x| x.shape()).unwrap_or(&[]))
        } else {
            subset.clone()
        };
        self.line("{");
        self.indent += 1;
        self.line(&format!(
            "const int64_t sdf_n = {};",
            subset_volume(sc, &sub)
        ));
        // The window must lie inside the container (an imported DaCe connector may be
        // widened past it): outside, the error flag is raised and nothing is copied. The
        // window is the call's memlet, a subscript of the node the plan checks
        // (`plan::bounds`): in the unchecked version, where that condition holds, it is
        // inside.
        let shape = desc.map(|x| x.shape().to_vec()).unwrap_or_default();
        let mut outside = Vec::new();
        for (d, ext) in sub.0.iter().zip(&shape).filter(|_| sc.checked) {
            let (lo, hi) = match d {
                Dim::Index(i) => (i.clone(), i.clone()),
                Dim::Range { start, step, .. } => (
                    start.clone(),
                    start
                        .add(&d.size().sub(&SymExpr::Int(1)).mul(step))
                        .simplify(),
                ),
                Dim::Indirect { .. } => continue,
            };
            outside.push(format!(
                "({}) < 0 || ({}) >= ({})",
                sc.sym(&lo),
                sc.sym(&hi),
                sc.sym(ext)
            ));
        }
        let outside = if outside.is_empty() {
            String::new()
        } else {
            format!(" || (sdf_n > 0 && ({}))", outside.join(" || "))
        };
        self.line(&format!("if (sdf_n != {len}{outside}) sdf_fail(); else"));
        self.line("for (int64_t sdf_q = 0; sdf_q < sdf_n; sdf_q++) {");
        self.indent += 1;
        let el = self.decompose(sc, data, &sub, "sdf_q", prefix);
        body(self, &el, dt);
        self.indent -= 1;
        self.line("}");
        self.indent -= 1;
        self.line("}");
    }
}

/// What printing a reduction needs: its input and output windows and which axes of the
/// input it reduces.
pub(crate) struct ReduceParts<'a> {
    r: &'a Reduce,
    idata: &'a str,
    odata: &'a str,
    it: DType,
    ot: DType,
    isub: Subset,
    osub: Subset,
    wcr: Option<Wcr>,
    /// Input axes kept (one output element per point of them) and reduced.
    pub(crate) kept: Vec<usize>,
    pub(crate) red: Vec<usize>,
}

impl<'a> ReduceParts<'a> {
    pub(crate) fn of(
        sc: &Scope<'a>,
        df: &'a Dataflow,
        n: NodeId,
        r: &'a Reduce,
    ) -> Result<ReduceParts<'a>, CodegenError> {
        let input = df
            .in_edges(n)
            .into_iter()
            .map(|e| df.edge(e))
            .find(|e| e.dst_conn.as_deref() == Some("in"))
            .ok_or_else(|| CodegenError::Unsupported("reduce without input".into()))?;
        let output = df
            .out_edges(n)
            .into_iter()
            .map(|e| df.edge(e))
            .find(|e| e.src_conn.as_deref() == Some("out"))
            .ok_or_else(|| CodegenError::Unsupported("reduce without output".into()))?;
        let sdfg = sc.sdfg;
        let idata = input.memlet.data.as_str();
        let odata = output.memlet.data.as_str();
        let full = |d: &str| Subset::full(sdfg.arrays.get(d).map(|x| x.shape()).unwrap_or(&[]));
        let isub = if input.memlet.subset.0.is_empty() {
            full(idata)
        } else {
            input.memlet.subset.clone()
        };
        let osub = if output.memlet.subset.0.is_empty() {
            full(odata)
        } else {
            output.memlet.subset.clone()
        };
        let rank = isub.rank();
        let axes: BTreeSet<usize> = match &r.axes {
            Some(a) => a.iter().copied().collect(),
            None => (0..rank).collect(),
        };
        Ok(ReduceParts {
            r,
            idata,
            odata,
            it: sdfg.arrays.get(idata).map_or(DType::F64, DataDesc::dtype),
            ot: sdfg.arrays.get(odata).map_or(DType::F64, DataDesc::dtype),
            kept: (0..rank).filter(|k| !axes.contains(k)).collect(),
            red: (0..rank).filter(|k| axes.contains(k)).collect(),
            isub,
            osub,
            wcr: output.memlet.wcr,
        })
    }

    /// The sizes of the input axes `ks`.
    pub(crate) fn sizes(&self, ks: &[usize]) -> Vec<SymExpr> {
        ks.iter().map(|k| self.isub.0[*k].size()).collect()
    }

    /// C text of the number of points of the input axes `ks`.
    pub(crate) fn count(&self, sc: &Scope<'_>, ks: &[usize]) -> String {
        if ks.is_empty() {
            return "1".to_string();
        }
        self.sizes(ks)
            .iter()
            .map(|z| format!("sdf_max64({}, 0)", sc.sym(z)))
            .collect::<Vec<_>>()
            .join(" * ")
    }
}
