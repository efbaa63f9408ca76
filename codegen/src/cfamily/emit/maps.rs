//! Map bodies and map loops: the scope of a body, parallel (`omp for`) and sequential
//! loops, and the NaN canonicalization and write-conflict combination they use.

use super::*;

impl Emitter<'_> {
    /// The graph of a map body, in topological order, by the current thread.
    pub(crate) fn body(&mut self, sc: &Scope<'_>, df: &Dataflow) -> Result<(), CodegenError> {
        // The body the plan jams (the step's map's, unchecked) is printed row-jammed.
        if !sc.checked
            && let Some((body, jam)) = sc.jam
            && std::ptr::eq(body, df)
        {
            return self.jammed(sc, df, jam);
        }
        let order = df
            .topological_order()
            .map_err(|_| CodegenError::Unsupported("a map body has a cycle".into()))?;
        for n in order {
            match df.node(n) {
                Node::Map(_) => self.node(sc, df, n)?,
                other => self.node(&sc.at(LocPart::Text(other.describe())), df, n)?,
            }
        }
        Ok(())
    }

    pub(crate) fn loop_header(&self, sc: &Scope<'_>, m: &MapScope, k: usize) -> String {
        let (p, r) = (&m.params[k], &m.ranges[k]);
        // The condition proved the step positive; a non-unit step stops instead of
        // stepping past the largest integer.
        let step = match r.step.as_int() {
            Some(1) => format!("s_{p}++"),
            _ => {
                let st = sc.sub_sym(&r.step);
                format!("s_{p} = (s_{p} > INT64_MAX - ({st})) ? INT64_MAX : s_{p} + ({st})")
            }
        };
        format!(
            "for (int64_t s_{p} = {}; s_{p} < {}; {step}) {{",
            sc.sub_sym(&r.start),
            sc.sub_sym(&r.end)
        )
    }

    /// Body-local scalars of a map body, declared at the top of an iteration.
    pub(crate) fn body_scope<'s>(
        &mut self,
        sc: &Scope<'s>,
        m: &MapScope,
        in_parallel_map: bool,
    ) -> Scope<'s> {
        let mut inner = Scope {
            sdfg: sc.sdfg,
            plan: sc.plan,
            params: sc.params.clone(),
            locals: sc.locals.clone(),
            parallel: false,
            in_parallel_map: sc.in_parallel_map || in_parallel_map,
            checked: sc.checked,
            stop: sc.stop.clone(),
            loc: sc.loc.clone(),
            depth: sc.depth,
            sites: sc.sites,
            rows_checked: sc.rows_checked,
            points_checked: sc.points_checked,
            jam: sc.jam,
            callee: None,
            callee_pre: sc.callee_pre,
            takes_pre: sc.takes_pre,
            exits: None,
        };
        inner.params.extend(m.params.iter().cloned());
        // Checked loops record their parameters for messages (between the loops, in
        // `checked_map`). Unchecked loops record them only around nested-SDFG calls,
        // whose functions report errors with the interpreter's `map 'm' at i=…` path;
        // a tight loop without calls stores nothing per point. Recording here, at the top
        // of the innermost body, keeps collapsed loop nests perfectly nested.
        if sc.checked || calls_nested(&m.body) {
            if !sc.checked {
                for (k, p) in m.params.iter().enumerate() {
                    if sc.depth + k < MAX_PARAMS {
                        self.line(&format!("sdf_pv[{}] = s_{p};", sc.depth + k));
                    }
                }
            }
            inner.loc.push(LocPart::Map {
                label: m.label.clone(),
                params: m.params.clone(),
                depth: sc.depth,
            });
            inner.depth += m.params.len();
        } else {
            inner.loc.push(LocPart::Point {
                label: m.label.clone(),
                params: m.params.clone(),
                depth: sc.depth,
            });
            inner.depth += m.params.len();
        }
        // The plan's body-local scalars, declared where a body first uses them.
        for d in m.body.accessed_data() {
            if let Some(DataDesc::Scalar { dtype, .. }) = sc.sdfg.arrays.get(&d)
                && sc.plan.body_local(&d)
                && !inner.locals.contains(&d)
            {
                self.line(&format!("{} a_{d} = 0;", ctype(*dtype)));
                inner.locals.insert(d);
            }
        }
        inner
    }

    pub(crate) fn sequential_map(
        &mut self,
        sc: &Scope<'_>,
        m: &MapScope,
    ) -> Result<(), CodegenError> {
        self.line(&format!("/* map '{}' */", m.label.replace("*/", "* /")));
        self.map_loops(sc, m, false)
    }

    pub(crate) fn parallel_map(
        &mut self,
        sc: &Scope<'_>,
        m: &MapScope,
        collapse: usize,
        min_points: i64,
        row_checks: Option<(&[RowCheck], Option<Strip>)>,
    ) -> Result<(), CodegenError> {
        let sizes: Vec<String> = m
            .ranges
            .iter()
            .map(|r| {
                let size = r.size();
                format!("sdf_max64({}, 0)", sc.sym(&size))
            })
            .collect();
        let points = if sizes.is_empty() {
            "1".to_string()
        } else {
            sizes.join(" * ")
        };
        // The plan collapses all but the innermost loop (when the inner bounds do not use
        // outer parameters), so the innermost loop stays contiguous.
        self.line(&format!("/* map '{}' */", m.label.replace("*/", "* /")));
        // Smaller than the plan's threshold, one thread runs it.
        self.line(&format!("if ({points} >= {min_points}) {{"));
        self.indent += 1;
        let schedule = self.opts.schedule.name();
        self.team_line(|t| t.share_loops(collapse, schedule));
        self.map_loops_from(sc, m, true, collapse.max(1), row_checks)?;
        self.indent -= 1;
        self.line("} else {");
        self.indent += 1;
        self.team_line(|t| t.single().into());
        self.line("{");
        self.indent += 1;
        // Beside other nodes of the state: write-conflict resolutions stay atomic.
        self.map_loops(sc, m, true)?;
        self.indent -= 1;
        self.line("}");
        self.indent -= 1;
        self.line("}");
        Ok(())
    }

    /// The NaN canonicalization the loop being printed wants ([`Emitter::blend_canon`]).
    pub(crate) fn canon(&self) -> fn(&str, DType) -> String {
        if self.blend_canon {
            cexpr::canon_blend
        } else {
            cexpr::canon
        }
    }

    /// [`combine`], canonicalizing as the loop being printed wants.
    pub(crate) fn combine(&self, w: Wcr, old: &str, new: &str, t: DType) -> String {
        combine_with(w, old, new, t, self.canon())
    }

    /// The map's loop nest and body, in the scope `sc` (the loops themselves are the
    /// caller's to schedule); `parallel`: the body runs in a parallel map's iterations.
    pub(crate) fn map_loops(
        &mut self,
        sc: &Scope<'_>,
        m: &MapScope,
        parallel: bool,
    ) -> Result<(), CodegenError> {
        self.map_loops_from(sc, m, parallel, 0, None)
    }

    /// [`Self::map_loops`]; with `outer` > 0 and the plan's row checks (`plan::rows`),
    /// the index-table entries the body reads for one point of the first `outer` loops
    /// are checked once there, before the inner loops, which then gather without a check
    /// (a bad entry runs them checked, as before). With the plan's `strips` as well, the
    /// outer or the inner loop steps over strips ([`Self::strip_loops`]).
    pub(crate) fn map_loops_from(
        &mut self,
        sc: &Scope<'_>,
        m: &MapScope,
        parallel: bool,
        outer: usize,
        row_checks: Option<(&[RowCheck], Option<Strip>)>,
    ) -> Result<(), CodegenError> {
        let checks = row_checks
            .filter(|(c, _)| !c.is_empty())
            .filter(|_| outer > 0 && !sc.checked && !sc.rows_checked)
            .filter(|_| outer < m.params.len() || body_has_maps(&m.body));
        let Some((checks, strips)) = checks else {
            return self.map_loops_inner(sc, m, parallel, 0, outer);
        };
        let strip = strips.filter(|_| outer == 1 && m.params.len() == 2 && sc.jam.is_none());
        match (strip, strips) {
            (Some(s), _) => return self.strip_loops(sc, m, parallel, checks, s),
            // Checks per point of the inner loop, which stays whole: at each point.
            (None, Some(Strip::Inner)) => return self.map_loops_inner(sc, m, parallel, 0, outer),
            (None, _) => {}
        }
        self.open_loops(sc, m, 0..outer);
        self.row_checks(sc, m, outer, checks, None);
        let mut proven = sc.clone();
        proven.rows_checked = true;
        self.proven_or_checked(
            "sdf_rok",
            |e| e.map_loops_inner(&proven, m, parallel, outer, outer),
            |e| e.map_loops_inner(sc, m, parallel, outer, outer),
        )?;
        self.close_loops(outer);
        Ok(())
    }

    /// `if (flag) { proven } else { checked }`: the loops whose checks `flag` says
    /// held, and the same loops checked.
    fn proven_or_checked(
        &mut self,
        flag: &str,
        proven: impl FnOnce(&mut Self) -> Result<(), CodegenError>,
        checked: impl FnOnce(&mut Self) -> Result<(), CodegenError>,
    ) -> Result<(), CodegenError> {
        self.line(&format!("if ({flag}) {{"));
        self.indent += 1;
        proven(self)?;
        self.indent -= 1;
        self.line("} else {");
        self.indent += 1;
        checked(self)?;
        self.indent -= 1;
        self.line("}");
        Ok(())
    }

    /// A two-parameter map in strips (`plan::rows::Strip`): the loop along which the
    /// fields are contiguous (`h`: the outer one, or with [`Strip::Inner`] the inner one)
    /// steps over strips of `STRIP` points, the loop the threads share; the table entries
    /// of a strip's points are checked at once; then the other loop (`k`) runs outside a
    /// loop over the strip's points, which gathers without a check and vectorizes (the
    /// map's points are independent, so the loop is marked so). A bad entry runs the
    /// strip's points checked, in the map's own order: `h` then `k` one after another
    /// for an outer strip, `k` around the strip's points for an inner one.
    fn strip_loops(
        &mut self,
        sc: &Scope<'_>,
        m: &MapScope,
        parallel: bool,
        checks: &[RowCheck],
        strip: Strip,
    ) -> Result<(), CodegenError> {
        // The map as its strips nest: the strip's parameter first.
        let nest = match strip {
            Strip::Outer => std::borrow::Cow::Borrowed(m),
            Strip::Inner => std::borrow::Cow::Owned(crate::plan::rows::swapped(m).ok_or_else(
                || {
                    CodegenError::Unsupported(format!(
                        "map '{}' runs in strips of its inner loop, but its ranges use each other's parameters",
                        m.label
                    ))
                },
            )?),
        };
        let (h, r) = (&nest.params[0], &nest.ranges[0]);
        let n = self.fresh();
        let (sb, se) = (format!("sdf_sb{n}"), format!("sdf_se{n}"));
        let (start, end) = (sc.sub_sym(&r.start), sc.sub_sym(&r.end));
        let size = crate::plan::rows::STRIP;
        self.line(&format!(
            "for (int64_t {sb} = {start}; {sb} < {end}; {sb} += {size}LL) {{"
        ));
        self.indent += 1;
        // The distance to the end, unsigned, cannot overflow: `sb` < `end`.
        self.line(&format!(
            "const int64_t {se} = ((uint64_t)({end}) - (uint64_t){sb} > {size}u) ? {sb} + {size}LL : ({end});"
        ));
        let strip_loop = format!("for (int64_t s_{h} = {sb}; s_{h} < {se}; s_{h}++) {{");
        self.row_checks(sc, &nest, 1, checks, Some(&strip_loop));
        let mut proven = sc.clone();
        proven.rows_checked = true;
        // The body's scope records the point in the map's own order.
        let in_strip = |e: &mut Self, sc: &Scope<'_>, vectorized: bool| {
            e.open_loops(sc, &nest, 1..2);
            if vectorized {
                e.team_line(|t| t.simd_loop());
            }
            e.line(&strip_loop);
            e.indent += 1;
            // Contiguous, its gathers checked: the loop vectorizes, so the NaN
            // canonicalization is the select the vectorizer turns into a blend. Checked
            // at each point, it stays scalar, and the blend is spelled out. (A square
            // root keeps GCC from vectorizing under `-frounding-math`; spelling the
            // blend out there measured the same as the select.)
            let scalar = !vectorized && stays_scalar(sc.sdfg, &m.body, sc.rows_checked);
            e.point_body(sc, m, parallel, scalar)?;
            e.close_loops(2);
            Ok(())
        };
        self.proven_or_checked(
            "sdf_rok",
            |e| in_strip(e, &proven, true),
            |e| match strip {
                Strip::Outer => {
                    e.line(&strip_loop);
                    e.indent += 1;
                    e.map_loops_inner(sc, m, parallel, 1, 1)?;
                    e.close_loops(1);
                    Ok(())
                }
                Strip::Inner => in_strip(e, sc, false),
            },
        )?;
        self.close_loops(1);
        Ok(())
    }

    /// `int sdf_rok`: whether the index-table entries of `checks`, read at the current
    /// point of `m`'s first `outer` loops, lie in their extents (checked only where the
    /// inner loops run at all); with `points`, a loop header over the outer parameter,
    /// at each of its points (a strip's).
    fn row_checks(
        &mut self,
        sc: &Scope<'_>,
        m: &MapScope,
        outer: usize,
        checks: &[RowCheck],
        points: Option<&str>,
    ) {
        let mut at = sc.clone();
        at.params.extend(m.params[..outer].iter().cloned());
        // Only where the inner loops run: the body reads the tables only then.
        let nonempty: Vec<String> = m.ranges[outer..]
            .iter()
            .map(|r| format!("({}) < ({})", at.sub_sym(&r.start), at.sub_sym(&r.end)))
            .collect();
        self.line("int sdf_rok = 1;");
        // A body's own inner maps may run no points: a bad entry then selects the checked
        // body, which reads no table either.
        let nonempty = if nonempty.is_empty() {
            "1".to_string()
        } else {
            nonempty.join(" && ")
        };
        self.line(&format!("if ({nonempty}) {{"));
        self.indent += 1;
        if let Some(header) = points {
            self.line(header);
            self.indent += 1;
        }
        for c in checks {
            for (p, r) in &c.inner {
                self.line(&format!(
                    "for (int64_t s_{p} = {}; s_{p} < {}; s_{p}++) {{",
                    r.start, r.end
                ));
                self.indent += 1;
            }
            let mut here = at.clone();
            here.params.extend(c.inner.iter().map(|(p, _)| p.clone()));
            let value = here.index_of(&c.dim, None, None);
            let ext = here.sym_with(&c.extent, SymCheck::Plain);
            self.line(&format!(
                "{{ const int64_t sdf_rv = {value}; if (sdf_rv < 0 || sdf_rv >= ({ext})) sdf_rok = 0; }}"
            ));
            for _ in &c.inner {
                self.indent -= 1;
                self.line("}");
            }
        }
        if points.is_some() {
            self.indent -= 1;
            self.line("}");
        }
        self.indent -= 1;
        self.line("}");
    }

    /// `m`'s body at one point, inside its loops (`parallel`: a parallel map's point),
    /// its NaNs canonicalized by the blend spelled out where `blend` (a loop that stays
    /// scalar: [`Emitter::blend_canon`]), else by the select.
    pub(crate) fn point_body(
        &mut self,
        sc: &Scope<'_>,
        m: &MapScope,
        parallel: bool,
        blend: bool,
    ) -> Result<(), CodegenError> {
        let inner = self.body_scope(sc, m, parallel);
        let outer = std::mem::replace(&mut self.blend_canon, blend);
        let done = self.body(&inner, &m.body);
        self.blend_canon = outer;
        done
    }

    /// Opens the loops of `m`'s parameters `ks`.
    pub(crate) fn open_loops(&mut self, sc: &Scope<'_>, m: &MapScope, ks: std::ops::Range<usize>) {
        for k in ks {
            let h = self.loop_header(sc, m, k);
            self.line(&h);
            self.indent += 1;
        }
    }

    /// Closes `n` loops.
    pub(crate) fn close_loops(&mut self, n: usize) {
        for _ in 0..n {
            self.indent -= 1;
            self.line("}");
        }
    }

    /// The loops of `m` from parameter `from` on, and the body; the first `shared` loops
    /// of `m` are divided among the threads by the pragma just before the nest.
    pub(crate) fn map_loops_inner(
        &mut self,
        sc: &Scope<'_>,
        m: &MapScope,
        parallel: bool,
        from: usize,
        shared: usize,
    ) -> Result<(), CodegenError> {
        // A loop of a few iterations inside a scalar loop (a neighbour loop) is unrolled
        // into it and stays scalar too; any other inner loop (a tile's rows) decides
        // for itself.
        let scalar = stays_scalar(sc.sdfg, &m.body, sc.rows_checked)
            || (self.blend_canon && few_iterations(m));
        let n = m.params.len();
        if from >= n {
            return self.point_body(sc, m, parallel, scalar);
        }
        self.open_loops(sc, m, from..n - 1);
        if !self.prechecked_row(sc, m, parallel, scalar, shared)? {
            self.innermost_loop(sc, m, parallel, scalar, shared)?;
        }
        self.close_loops(n - 1 - from);
        Ok(())
    }

    /// The innermost loop of `m`, where its body gathers through an index it computes
    /// (GT4Py's dynamic vertical offsets), after a loop over the same points that checks
    /// the index-table values the body reads at each of them ([`point_checks`]: those
    /// indices, computed there by the tasklets that compute them in the body, and the
    /// table entries not checked with their row): loads, arithmetic and compares
    /// without a branch; where every value lies in its extent, the row gathers without
    /// a check, else it runs checked at each point, as without the loop before. CPU
    /// only (a team of threads), in unchecked bodies, not in a loop the threads share
    /// (its pragma must stand right before it), and not where computing an index could
    /// raise an error of its own (an integer division): the check must not raise before
    /// the row. Whether it was printed so.
    fn prechecked_row(
        &mut self,
        sc: &Scope<'_>,
        m: &MapScope,
        parallel: bool,
        scalar: bool,
        shared: usize,
    ) -> Result<bool, CodegenError> {
        if self.fns.dialect.team().is_none()
            || sc.checked
            || sc.points_checked
            || m.params.len() <= shared
        {
            return Ok(false);
        }
        let mut params = sc.params.clone();
        params.extend(m.params.iter().cloned());
        let Some(pc) = point_checks(sc.sdfg, sc.plan, &m.body, sc.rows_checked, &params) else {
            return Ok(false);
        };
        let order = m
            .body
            .topological_order()
            .map_err(|_| CodegenError::Unsupported("a map body has a cycle".into()))?;
        let (mark, sites) = (self.out.len(), sc.sites.borrow().sites.len());
        let ok = format!("sdf_pok{}", self.fresh());
        self.line(&format!("int {ok} = 1;"));
        let header = self.loop_header(sc, m, m.params.len() - 1);
        self.line(&header);
        self.indent += 1;
        let inner = self.body_scope(sc, m, parallel);
        for n in order.into_iter().filter(|n| pc.slice.contains(n)) {
            let here = inner.at(LocPart::Text(m.body.node(n).describe()));
            self.node(&here, &m.body, n)?;
        }
        for (dim, extent) in &pc.checks {
            let value = inner.index_of(dim, None, None);
            let extent = inner.sym_with(extent, SymCheck::Plain);
            self.line(&format!(
                "{{ const int64_t sdf_rv = {value}; {ok} &= (sdf_rv >= 0) & (sdf_rv < ({extent})); }}"
            ));
        }
        self.close_loops(1);
        if sc.sites.borrow().sites.len() != sites {
            // Computing an index raises at a site of its own.
            self.out.truncate(mark);
            return Ok(false);
        }
        let proven = Scope {
            points_checked: true,
            ..sc.clone()
        };
        self.proven_or_checked(
            &ok,
            |e| e.innermost_loop(&proven, m, parallel, scalar, shared),
            |e| e.innermost_loop(sc, m, parallel, scalar, shared),
        )?;
        Ok(true)
    }

    /// The innermost loop of `m` and its body (the loops outside it open).
    fn innermost_loop(
        &mut self,
        sc: &Scope<'_>,
        m: &MapScope,
        parallel: bool,
        scalar: bool,
        shared: usize,
    ) -> Result<(), CodegenError> {
        let n = m.params.len();
        // The innermost loop of a body meant to vectorize: its points are independent
        // (a map's are; a sequential one's need not be), so it is marked so, and the
        // compiler does not test at every row whether the arrays overlap (GCC does
        // not apply `restrict` to the pointers inside the parallel region: a
        // ten-level column then spends as much on the test as on the loop). Not a
        // loop the threads share: their pragma must stand right before it.
        if !scalar
            && n > shared
            && m.schedule != sdflow_ir::Schedule::Sequential
            && independent_points(sc.sdfg, &m.body, &m.params[n - 1])
        {
            if let Some(block) = self.row_block(sc, m) {
                return self.split_row(sc, m, parallel, block);
            }
            self.team_line(|t| t.simd_loop());
        }
        self.open_loops(sc, m, n - 1..n);
        self.point_body(sc, m, parallel, scalar)?;
        self.close_loops(1);
        Ok(())
    }

    /// The points of a block of the innermost loop of `m` where it is split
    /// ([`Emitter::split_row`]): 64 bytes of the widest element the body streams along
    /// the loop. `None`: not split — a team-less dialect (a CUDA thread runs one point),
    /// a step other than 1, a trip count the compiler knows (it sizes the loop's vectors
    /// itself), or no array element that moves with the loop.
    fn row_block(&self, sc: &Scope<'_>, m: &MapScope) -> Option<u32> {
        self.fns.dialect.team()?;
        let (p, r) = (m.params.last()?, m.ranges.last()?);
        if r.step.as_int() != Some(1) || r.size().simplify().as_int().is_some() {
            return None;
        }
        let widest = m
            .body
            .edge_ids()
            .into_iter()
            .map(|e| &m.body.edge(e).memlet)
            .filter(|ml| ml.subset.free_symbols().contains(p))
            .filter_map(|ml| match sc.sdfg.arrays.get(&ml.data) {
                Some(d @ DataDesc::Array(_)) => Some(d.dtype().size_bytes()),
                _ => None,
            })
            .max()?;
        Some((64 / widest.max(1)) as u32)
    }

    /// The innermost loop of `m`, its points independent, as two loops over the same
    /// points in the same order: whole blocks of `block` points (64 bytes of the widest
    /// element), marked for the compiler to vectorize as it chooses, then the rest, fewer
    /// than `block` points, marked to run in vectors of half that width. A row of levels
    /// is short and its length known only at the call: GCC 12 vectorizes a loop with
    /// 64-byte vectors where the CPU has them, its remainder in 32-byte vectors and the
    /// last points scalar — the last two of a ten-level row, where a select of the body
    /// (an exact `min` or `max`) becomes a branch on the data, and a division has no
    /// vector to share its latency with.
    fn split_row(
        &mut self,
        sc: &Scope<'_>,
        m: &MapScope,
        parallel: bool,
        block: u32,
    ) -> Result<(), CodegenError> {
        let (p, r) = (&m.params[m.params.len() - 1], &m.ranges[m.ranges.len() - 1]);
        let n = self.fresh();
        let (lo, hi, mid) = (
            format!("sdf_lo{n}"),
            format!("sdf_hi{n}"),
            format!("sdf_mid{n}"),
        );
        self.line("{");
        self.indent += 1;
        self.line(&format!(
            "const int64_t {lo} = {}, {hi} = {};",
            sc.sub_sym(&r.start),
            sc.sub_sym(&r.end)
        ));
        // The distance, unsigned, cannot overflow where `lo` < `hi`.
        self.line(&format!(
            "const int64_t {mid} = {lo} < {hi} ? (int64_t)((uint64_t){lo} + (((uint64_t){hi} - (uint64_t){lo}) & ~(uint64_t){}u)) : {lo};",
            block - 1
        ));
        for (from, to, rest) in [(&lo, &mid, false), (&mid, &hi, true)] {
            self.team_line(|t| {
                if rest {
                    t.simd(block / 2)
                } else {
                    t.simd_loop()
                }
            });
            self.line(&format!(
                "for (int64_t s_{p} = {from}; s_{p} < {to}; s_{p}++) {{"
            ));
            self.indent += 1;
            self.point_body(sc, m, parallel, false)?;
            self.close_loops(1);
        }
        self.close_loops(1);
        Ok(())
    }
}

/// Whether a map body holds maps of its own (their loops are the rows' inner loops).
fn body_has_maps(df: &sdflow_ir::Dataflow) -> bool {
    df.node_ids()
        .into_iter()
        .any(|n| matches!(df.node(n), Node::Map(_)))
}

/// A body whose points do not depend on each other through memory along its innermost
/// parameter `p`: tasklets and access nodes only, no write-conflict resolution (an
/// accumulation into one element is such a dependence), every array written at an
/// element that moves with `p`, and an array both read and written only at the element
/// written (GT4Py's in-place updates).
fn independent_points(sdfg: &sdflow_ir::Sdfg, df: &sdflow_ir::Dataflow, p: &str) -> bool {
    if !df
        .node_ids()
        .into_iter()
        .all(|n| matches!(df.node(n), Node::Tasklet(_) | Node::Access(_)))
    {
        return false;
    }
    let mut written: BTreeMap<&str, Vec<&sdflow_ir::Subset>> = BTreeMap::new();
    let mut read: BTreeMap<&str, Vec<&sdflow_ir::Subset>> = BTreeMap::new();
    for e in df.edge_ids() {
        let m = &df.edge(e).memlet;
        if m.wcr.is_some() {
            return false;
        }
        let (src, dst) = df.endpoints(e);
        if df.node(dst).as_access().is_some() {
            if !matches!(sdfg.arrays.get(&m.data), Some(DataDesc::Scalar { .. }))
                && !m.subset.free_symbols().contains(p)
            {
                return false;
            }
            written.entry(&m.data).or_default().push(&m.subset);
        } else if df.node(src).as_access().is_some() {
            read.entry(&m.data).or_default().push(&m.subset);
        }
    }
    written.iter().all(|(d, ws)| {
        read.get(d)
            .is_none_or(|rs| rs.iter().chain(ws.iter()).all(|s| *s == ws[0]))
    })
}
