//! Nested SDFG calls: the callee's function, its arguments passed by reference or
//! copied in and out, and its transients.

use super::*;

/// Callee containers of at most this many elements, their shape known at build time,
/// are stack arrays.
const STACK_ELEMENTS: i64 = 64;

impl Emitter<'_> {
    /// A nested SDFG: inner arrays filled from the caller's subsets, the callee run as a
    /// static function, outputs written back.
    pub(crate) fn nested(
        &mut self,
        sc: &Scope<'_>,
        df: &Dataflow,
        n: NodeId,
        ns: &NestedSdfg,
    ) -> Result<(), CodegenError> {
        let inner = &ns.sdfg;
        let mut loc = sc.loc.clone();
        loc.push(LocPart::Text(format!("sdfg '{}'", inner.name)));
        let ctx = FnCtx {
            sites: sc.sites,
            loc,
            depth: sc.depth,
            per_point: !sc.params.is_empty(),
        };
        // A state-level call's callee plan is the step's; a call in a map body is
        // planned where its function is printed.
        let plan = sc
            .callee
            .filter(|(c, _)| std::ptr::eq(*c, ns))
            .map(|(_, p)| p);
        let fname = emit_function(inner, plan, self.opts, &ctx, self.fns, self.counter)?;
        let isig = Signature::of(inner);
        self.line(&format!(
            "{{ /* nested SDFG '{}' */",
            inner.name.replace("*/", "* /")
        ));
        self.indent += 1;
        // Inner symbol values, then inner shapes in terms of them.
        let mut ints = Vec::new();
        for s in &isig.ints {
            let v = ns
                .symbol_mapping
                .get(s)
                .map_or("0".to_string(), |e| sc.sym(e));
            self.line(&format!("const int64_t sdf_is_{s} = {v};"));
            ints.push(format!("sdf_is_{s}"));
        }
        let mut floats = Vec::new();
        for s in &isig.floats {
            let v = match ns.symbol_mapping.get(s) {
                Some(SymExpr::Sym(x)) => format!("(double)s_{x}"),
                _ => "0.0".to_string(),
            };
            floats.push(v);
        }
        self.line(&format!(
            "const int64_t sdf_ints[{}] = {{ {} }};",
            ints.len().max(1),
            if ints.is_empty() {
                "0".to_string()
            } else {
                ints.join(", ")
            }
        ));
        self.line(&format!(
            "const double sdf_floats[{}] = {{ {} }};",
            floats.len().max(1),
            if floats.is_empty() {
                "0.0".to_string()
            } else {
                floats.join(", ")
            }
        ));
        let inner_sym: BTreeMap<String, SymExpr> = isig
            .ints
            .iter()
            .map(|s| (s.clone(), SymExpr::sym(&format!("sdf_is_{s}"))))
            .chain(inner.symbols.iter().filter_map(|(k, s)| {
                s.value
                    .filter(|v| !v.dtype().is_float())
                    .map(|v| (k.clone(), SymExpr::Int(v.as_i64())))
            }))
            .collect();
        let in_edges: Vec<&Edge> = df.in_edges(n).into_iter().map(|e| df.edge(e)).collect();
        let out_edges: Vec<&Edge> = df.out_edges(n).into_iter().map(|e| df.edge(e)).collect();
        let shim = Scope {
            sdfg: sc.sdfg,
            plan: sc.plan,
            params: {
                let mut p = sc.params.clone();
                p.extend(isig.ints.iter().map(|s| format!("sdf_is_{s}")));
                p
            },
            locals: sc.locals.clone(),
            parallel: false,
            in_parallel_map: sc.in_parallel_map,
            checked: sc.checked,
            stop: sc.stop.clone(),
            loc: sc.loc.clone(),
            depth: sc.depth,
            sites: sc.sites,
            rows_checked: sc.rows_checked,
            points_checked: false,
            jam: None,
            callee: None,
            callee_pre: Pre::No,
            takes_pre: false,
            exits: None,
        };
        let mut ptrs = Vec::new();
        // Connectors the callee only reads, bound to a whole caller array laid out as the
        // callee declares it, get the caller's pointer (`plan::passed_by_reference`).
        let by_ref: BTreeSet<&str> = isig
            .arrays
            .iter()
            .filter(|a| crate::plan::passed_by_reference(sc.sdfg, df, n, &a.name))
            .map(|a| a.name.as_str())
            .collect();
        // Where the map's callee condition covers the callee, connectors bound to a box
        // of one caller array (a scan's column) get a pointer into it
        // (`plan::window_by_reference`).
        let windows: BTreeSet<&str> = isig
            .arrays
            .iter()
            .filter(|a| {
                matches!(sc.callee_pre, Pre::Yes)
                    && !by_ref.contains(a.name.as_str())
                    && crate::plan::window_by_reference(sc.sdfg, df, n, &a.name)
            })
            .map(|a| a.name.as_str())
            .collect();
        for a in &isig.arrays {
            if by_ref.contains(a.name.as_str()) {
                let data = in_edges
                    .iter()
                    .find(|e| e.dst_conn.as_deref() == Some(&a.name))
                    .map_or(a.name.as_str(), |e| e.memlet.data.as_str());
                ptrs.push(format!("(void*)a_{data}"));
                continue;
            }
            // The caller's side of the connector: its input, else an output without a wcr
            // (what a copy is filled from; a window has no wcr).
            let src = in_edges
                .iter()
                .find(|e| e.dst_conn.as_deref() == Some(&a.name))
                .or_else(|| {
                    out_edges
                        .iter()
                        .find(|e| e.src_conn.as_deref() == Some(&a.name) && e.memlet.wcr.is_none())
                });
            if windows.contains(a.name.as_str())
                && let Some(e) = src
            {
                let m = &e.memlet;
                ptrs.push(format!("(void*)&{}", sc.elem(&m.data, &m.subset)));
                continue;
            }
            let t = ctype(a.dtype);
            let size: Vec<String> = a
                .shape
                .iter()
                .map(|e| {
                    format!(
                        "sdf_max64({}, 0)",
                        strip_s(&shim.sym(&e.substitute(&inner_sym)))
                    )
                })
                .collect();
            let size = if size.is_empty() {
                "1".to_string()
            } else {
                size.join(" * ")
            };
            self.line(&format!("const int64_t sdf_len_{} = {size};", a.name));
            // A callee container of a few elements known at build time (a scalar: the
            // `if` a map's point calls) lives on the stack, zero-filled, not on the heap:
            // a call per point would otherwise allocate per point.
            match small_len(&a.shape) {
                Some(len) => self.line(&format!("{t} sdf_c_{}[{len}] = {{0}};", a.name)),
                None => self.line(&format!(
                    "{t}* sdf_c_{} = ({t}*)calloc((size_t)({size} > 0 ? {size} : 1), sizeof({t}));",
                    a.name
                )),
            }
            ptrs.push(format!("(void*)sdf_c_{}", a.name));
            // Filled from the caller's side, where there is one.
            if let Some(e) = src {
                let el = |em: &mut Self, sub_el: &str, dt: DType| {
                    em.line(&format!(
                        "sdf_c_{}[sdf_q] = {};",
                        a.name,
                        convert(sub_el, dt, a.dtype)
                    ));
                };
                let len = format!("sdf_len_{}", a.name);
                self.element_loop(sc, &e.memlet.data, &e.memlet.subset, &len, "sdf_s", &el);
            } else if let Some(w) = out_edges
                .iter()
                .find(|e| e.src_conn.as_deref() == Some(&a.name))
                .and_then(|e| e.memlet.wcr)
            {
                // An output combined under a wcr starts from the operation's identity.
                let id = sdflow_ir::interp::value::wcr_identity(w, a.dtype);
                self.line(&format!(
                    "for (int64_t sdf_q = 0; sdf_q < ({size}); sdf_q++) sdf_c_{}[sdf_q] = {};",
                    a.name,
                    literal(id)
                ));
            }
        }
        self.line(&format!(
            "void* sdf_args[{}] = {{ {} }};",
            ptrs.len().max(1),
            if ptrs.is_empty() {
                "0".to_string()
            } else {
                ptrs.join(", ")
            }
        ));
        // The caller's error record goes along: a callee at every point of a map would
        // otherwise look up its thread's record (a thread-local access) at every call.
        let pre = match sc.callee_pre {
            Pre::No => 0,
            Pre::Yes => 1,
        };
        self.line(&format!(
            "{fname}(sdf_args, sdf_ints, sdf_floats, sdf_e, {pre});"
        ));
        // A callee that failed writes nothing back, as in the interpreter.
        self.line("if (!sdf_e->failed) {");
        self.indent += 1;
        for e in &out_edges {
            let Some(c) = &e.src_conn else { continue };
            if windows.contains(c.as_str()) {
                continue;
            }
            let Some(a) = isig.arrays.iter().find(|a| a.name == *c) else {
                continue;
            };
            let wcr = e.memlet.wcr;
            let st = |em: &mut Self, el: &str, dt: DType| {
                let v = convert(&format!("sdf_c_{c}[sdf_q]"), a.dtype, dt);
                em.store(sc, el, &v, dt, wcr);
            };
            let len = format!("sdf_len_{c}");
            self.element_loop(sc, &e.memlet.data, &e.memlet.subset, &len, "sdf_d", &st);
        }
        self.indent -= 1;
        self.line("}");
        for a in isig.arrays.iter().filter(|a| {
            small_len(&a.shape).is_none()
                && !by_ref.contains(a.name.as_str())
                && !windows.contains(a.name.as_str())
        }) {
            self.line(&format!("free(sdf_c_{});", a.name));
        }
        self.indent -= 1;
        self.line("}");
        Ok(())
    }
}

/// The number of elements of a shape of constants up to [`STACK_ELEMENTS`] (1 for a
/// scalar's empty shape).
pub(crate) fn small_len(shape: &[SymExpr]) -> Option<i64> {
    constant_product(shape, STACK_ELEMENTS).map(|n| n.max(1))
}

/// The number of elements a container of constant extents and strides spans, up to
/// [`STACK_ELEMENTS`] (1 for a scalar): a transient whose strides leave gaps needs more
/// than the product of its extents.
pub(crate) fn small_span(d: &DataDesc) -> Option<i64> {
    match d {
        DataDesc::Array(a) => a
            .span_by(|e| e.simplify().as_int())
            .filter(|n| *n <= STACK_ELEMENTS)
            .map(|n| n.max(1)),
        DataDesc::Scalar { .. } => Some(1),
    }
}

/// Declares every static symbol (`const` with its value; integers as `int64_t`) at
/// indentation `ind`.
pub(crate) fn static_symbol_decls(out: &mut String, sdfg: &Sdfg, ind: &str) {
    for (n, s) in &sdfg.symbols {
        if let Some(v) = s.value {
            let (t, v) = if s.dtype.is_float() {
                (ctype(s.dtype), v.cast(s.dtype))
            } else {
                ("int64_t", v.cast(DType::I64))
            };
            let _ = writeln!(out, "{ind}const {t} s_{n} = {};", literal(v));
        }
    }
}

/// `sdf_is_x` names were declared as symbols of the shim scope: the emitter prefixed them
/// with `s_`; undo that.
pub(crate) fn strip_s(text: &str) -> String {
    text.replace("s_sdf_is_", "sdf_is_")
}
