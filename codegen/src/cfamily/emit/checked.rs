//! The checked version of a state-level node, run when its in-bounds condition does not
//! hold: one thread, the interpreter's order (map points lexicographically, a body's
//! nodes in topological order, a tasklet's inputs then outputs, dimension by dimension),
//! every subscript checked before it is used, every map range's step checked, map
//! parameters recorded for the message. The first failure records its site and stops
//! the node; what ran before it has run, as in the interpreter. No subscript ever
//! reaches memory outside its array: a failed check reads index 0 (every array has one
//! element at least) and writes nothing.

use super::*;

impl Emitter<'_> {
    /// The checked version of state-level node `n`, by the calling thread; `atomic`: its
    /// write-conflict resolutions are atomic (the plan's [`Write::atomic`]: it runs beside
    /// other work).
    pub(crate) fn checked_node(
        &mut self,
        sc: &Scope<'_>,
        df: &Dataflow,
        n: NodeId,
        atomic: bool,
    ) -> Result<(), CodegenError> {
        let label = format!("sdf_stop{}", self.fresh());
        let inner = Scope {
            parallel: false,
            params: sc.params.clone(),
            locals: sc.locals.clone(),
            in_parallel_map: sc.in_parallel_map || atomic,
            checked: true,
            points_checked: false,
            callee_pre: Pre::No,
            stop: Some(label.clone()),
            loc: sc.loc.clone(),
            ..*sc
        };
        // The node's code in a block of its own, the label after it: a jump to the label
        // then leaves the block rather than skipping declarations in the label's scope
        // (which C allows and C++ — the CUDA text, compiled as such — does not).
        self.line("{");
        self.indent += 1;
        self.line("{");
        self.indent += 1;
        self.checked_body_node(&inner, df, n)?;
        self.indent -= 1;
        self.line("}");
        self.line(&format!("{label}:;"));
        self.indent -= 1;
        self.line("}");
        Ok(())
    }

    /// One node in a checked scope; a failure jumps to the scope's stop label.
    fn checked_body_node(
        &mut self,
        sc: &Scope<'_>,
        df: &Dataflow,
        n: NodeId,
    ) -> Result<(), CodegenError> {
        let stop = sc.stop.clone().unwrap_or_default();
        let node = df.node(n);
        if matches!(node, Node::Access(_)) && !has_copy_in(df, n) {
            return Ok(());
        }
        match node {
            Node::Map(m) => self.checked_map(sc, m)?,
            Node::Tasklet(t) => {
                let here = sc.at(LocPart::Text(node.describe()));
                self.tasklet(&here, df, n, t)?;
            }
            other => {
                let here = sc.at(LocPart::Text(other.describe()));
                self.precheck(&here, df, n);
                self.line(&format!("if (sdf_e->failed) goto {stop};"));
                self.node(&here, df, n)?;
            }
        }
        self.line(&format!("if (sdf_e->failed) goto {stop};"));
        Ok(())
    }

    /// A map's loops, sequential, with its ranges evaluated and checked as the
    /// interpreter does (each range's start, end and step, a step that is not positive is
    /// an error, an empty range ends the map) and its parameters recorded.
    fn checked_map(&mut self, sc: &Scope<'_>, m: &MapScope) -> Result<(), CodegenError> {
        let u = self.fresh();
        let done = format!("sdf_map{u}");
        let here = sc.at(LocPart::Text(format!("map '{}'", m.label)));
        self.line(&format!(
            "{{ /* map '{}' (checked) */",
            m.label.replace("*/", "* /")
        ));
        self.indent += 1;
        // As in `checked_node`: the declarations in a block the jumps leave.
        self.line("{");
        self.indent += 1;
        for (k, r) in m.ranges.iter().enumerate() {
            self.line(&format!(
                "const int64_t sdf_rs{u}_{k} = {}, sdf_re{u}_{k} = {}, sdf_rt{u}_{k} = {};",
                here.sym(&r.start),
                here.sym(&r.end),
                here.sym(&r.step)
            ));
            self.line(&format!("if (sdf_e->failed) goto {done};"));
            let step = here.site(SiteKind::Step {
                range: r.to_string(),
            });
            self.line(&format!(
                "if (sdf_rt{u}_{k} <= 0) {{ sdf_raise({step}, sdf_rt{u}_{k}, 0); goto {done}; }}"
            ));
            self.line(&format!("if (sdf_rs{u}_{k} >= sdf_re{u}_{k}) goto {done};"));
        }
        for (k, p) in m.params.iter().enumerate() {
            self.line(&format!(
                "for (int64_t s_{p} = sdf_rs{u}_{k}; s_{p} < sdf_re{u}_{k}; s_{p} = sdf_next(s_{p}, sdf_rt{u}_{k}, sdf_re{u}_{k})) {{"
            ));
            self.indent += 1;
            if sc.depth + k < MAX_PARAMS {
                self.line(&format!("sdf_pv[{}] = s_{p};", sc.depth + k));
            }
        }
        let mut inner = self.body_scope(sc, m, false);
        inner.stop = Some(done.clone());
        let order = m
            .body
            .topological_order()
            .map_err(|_| CodegenError::Unsupported("a map body has a cycle".into()))?;
        for n in order {
            self.checked_body_node(&inner, &m.body, n)?;
        }
        for _ in &m.params {
            self.indent -= 1;
            self.line("}");
        }
        self.indent -= 1;
        self.line("}");
        self.line(&format!("{done}:;"));
        self.indent -= 1;
        self.line("}");
        Ok(())
    }

    /// Checks every subscript a copy, reduction or nested SDFG forms, in the order the
    /// interpreter forms them, before the node runs.
    fn precheck(&mut self, sc: &Scope<'_>, df: &Dataflow, n: NodeId) {
        match df.node(n) {
            Node::Access(dst) => {
                for e in df.in_edges(n) {
                    let Some(src) = df.node(df.endpoints(e).0).as_access() else {
                        continue;
                    };
                    let m = &df.edge(e).memlet;
                    let other = m.other_subset.as_ref().unwrap_or(&m.subset);
                    let (ss, ds) = if m.data == *dst && m.data != src {
                        (other, &m.subset)
                    } else {
                        (&m.subset, other)
                    };
                    self.check_points(sc, src, ss);
                    self.check_points(sc, dst, ds);
                }
            }
            Node::Nested(_) => {
                let ins = df.in_edges(n);
                for &e in &ins {
                    let m = &df.edge(e).memlet;
                    self.check_points(sc, &m.data, &m.subset);
                }
                for e in df.out_edges(n) {
                    let m = &df.edge(e).memlet;
                    self.check_points(sc, &m.data, &m.subset);
                }
            }
            Node::Library(_) => {
                for e in df.in_edges(n).into_iter().chain(df.out_edges(n)) {
                    let m = &df.edge(e).memlet;
                    self.check_points(sc, &m.data, &m.subset);
                }
            }
            Node::Tasklet(_) | Node::Map(_) => {}
        }
    }

    /// Checks the indices of `data[subset]` dimension by dimension, as the interpreter's
    /// `points` does (a range's step, then its first index outside the extent).
    fn check_points(&mut self, sc: &Scope<'_>, data: &str, subset: &Subset) {
        let Some(DataDesc::Array(a)) = sc.sdfg.arrays.get(data) else {
            return;
        };
        if subset.0.is_empty() || subset.rank() != a.shape.len() {
            return;
        }
        for (d, dim) in subset.0.iter().enumerate() {
            let n = sc.sym_with(&a.shape[d], SymCheck::Plain);
            let site = sc.site(SiteKind::Index {
                data: data.to_string(),
                dim: d,
            });
            match dim {
                Dim::Range { start, end, step } => {
                    let step_site = sc.site(SiteKind::Step {
                        range: dim.to_string(),
                    });
                    self.line(&format!(
                        "{{ const int64_t sdf_a = {}, sdf_b = {}, sdf_c = {}; sdf_pts(sdf_a, sdf_b, sdf_c, {n}, {site}, {step_site}); }}",
                        sc.sym(start),
                        sc.sym(end),
                        sc.sym(step)
                    ));
                }
                Dim::Index(e) => {
                    self.line(&format!("(void)sdf_ck({}, {n}, {site});", sc.sym(e)));
                }
                Dim::Indirect {
                    table,
                    index,
                    offset,
                } => {
                    let v = self.checked_indirect(sc, table, index, offset);
                    self.line(&format!("(void)sdf_ck({v}, {n}, {site});"));
                }
            }
        }
    }

    /// The lvalue of the single element a tasklet memlet names, each index checked
    /// against its extent in order (as the interpreter's `element`).
    pub(super) fn checked_elem(&mut self, sc: &Scope<'_>, data: &str, subset: &Subset) -> String {
        let Some(DataDesc::Array(a)) = sc.sdfg.arrays.get(data) else {
            return sc.elem(data, subset);
        };
        let mut idx = Vec::new();
        for (d, dim) in subset.0.iter().enumerate() {
            let v = match dim {
                Dim::Index(e) => sc.sym(e),
                Dim::Range { start, .. } => sc.sym(start),
                Dim::Indirect {
                    table,
                    index,
                    offset,
                } => self.checked_indirect(sc, table, index, offset),
            };
            let n = a
                .shape
                .get(d)
                .map_or("0".to_string(), |e| sc.sym_with(e, SymCheck::Plain));
            let site = sc.site(SiteKind::Index {
                data: data.to_string(),
                dim: d,
            });
            let t = format!("sdf_x{}", self.fresh());
            self.bind_index(&t, format!("sdf_ck({v}, {n}, {site})"));
            idx.push(t);
        }
        format!("a_{data}[{}]", sc.flat(&idx, &a.strides))
    }

    /// The index an indirect dimension names: the table's position checked, its value
    /// read, the offset added (overflow is an error); the caller checks the result.
    fn checked_indirect(
        &mut self,
        sc: &Scope<'_>,
        table: &str,
        index: &[SymExpr],
        offset: &SymExpr,
    ) -> String {
        let Some(DataDesc::Array(t)) = sc.sdfg.arrays.get(table) else {
            return "0".to_string();
        };
        let mut idx = Vec::new();
        for (d, e) in index.iter().enumerate() {
            let n = t
                .shape
                .get(d)
                .map_or("0".to_string(), |x| sc.sym_with(x, SymCheck::Plain));
            let site = sc.site(SiteKind::Index {
                data: table.to_string(),
                dim: d,
            });
            let v = format!("sdf_x{}", self.fresh());
            self.bind_index(&v, format!("sdf_ck({}, {n}, {site})", sc.sym(e)));
            idx.push(v);
        }
        let value = format!("(int64_t)a_{table}[{}]", sc.flat(&idx, &t.strides));
        let v = format!("sdf_x{}", self.fresh());
        if offset.as_int() == Some(0) {
            self.bind_index(&v, value);
        } else {
            let site = sc.site(SiteKind::TableOffset {
                table: table.to_string(),
            });
            self.bind_index(&v, format!("sdf_tadd({value}, {}, {site})", sc.sym(offset)));
        }
        v
    }

    /// `const int64_t name = value;`, or, while a checked read is written as one
    /// expression ([`Emitter::checked_read_expr`]), a step of that expression.
    fn bind_index(&mut self, name: &str, value: String) {
        match &mut self.deferred {
            Some(steps) => steps.push((name.to_string(), value)),
            None => self.line(&format!("const int64_t {name} = {value};")),
        }
    }

    /// The checked read of one element as a single expression, for an input read only
    /// under a lazy condition: its index variables are declared here, and the
    /// expression assigns them in the interpreter's order (`(x0 = …, x1 = …, a[x0 + …])`,
    /// C's comma operator, which CUDA compiles too) where the code evaluates it.
    pub(super) fn checked_read_expr(
        &mut self,
        sc: &Scope<'_>,
        data: &str,
        subset: &Subset,
    ) -> String {
        let outer = self.deferred.replace(Vec::new());
        let lv = self.checked_elem(sc, data, subset);
        let steps = std::mem::replace(&mut self.deferred, outer).unwrap_or_default();
        if steps.is_empty() {
            return lv;
        }
        let names: Vec<String> = steps.iter().map(|(n, _)| format!("{n} = 0")).collect();
        self.line(&format!("int64_t {};", names.join(", ")));
        let mut parts: Vec<String> = steps.iter().map(|(n, v)| format!("{n} = {v}")).collect();
        parts.push(lv);
        format!("({})", parts.join(", "))
    }
}
