//! A lagged producer–consumer pair ([`crate::plan::lag`]) on a team. Each thread takes
//! an equal part of the consumer's first parameter and of the producer's, and walks its
//! part of the consumer in chunks: a chunk whose reads need only rows of the producer
//! in the thread's own part runs as soon as the thread has produced them (the producer
//! runs ahead just as far as that); a chunk that needs another thread's rows is left
//! for later. When its part of the producer is complete, the thread waits at one
//! barrier — as between the two maps unlagged — and then runs the chunks it left.
//! Nothing but that barrier orders the threads: in the first phase each reads only
//! rows it wrote itself.

use super::flow::Cond;
use super::*;
use crate::plan::lag::{Lag, LagRead};

impl Emitter<'_> {
    /// Whether `b` runs lagged behind `a` here: the plan says so, and both run unchecked
    /// under conditions known when the arguments are bound (a runtime condition keeps
    /// the two steps as they are).
    pub(crate) fn lagged_pair(&self, a: &Step, b: &Step) -> bool {
        let bound = |s: &Step| matches!(s.check, CheckPolicy::Never | CheckPolicy::AtBind(_));
        self.opts.lag_points > 0
            && b.lag.as_ref().is_some_and(|l| l.producer == a.node)
            && a.part.is_none()
            && b.part.is_none()
            && bound(a)
            && bound(b)
    }

    /// Producer `a` and consumer `b`: lagged where both run unchecked and are large
    /// enough to share, else one after the other (each checked or not as its condition
    /// says) with a barrier between.
    pub(crate) fn lagged(
        &mut self,
        sc: &Scope<'_>,
        df: &Dataflow,
        a: &Step,
        b: &Step,
    ) -> Result<(), CodegenError> {
        let (Some(lag), Node::Map(ma), Node::Map(mb)) = (&b.lag, df.node(a.node), df.node(b.node))
        else {
            return Err(CodegenError::Unsupported(
                "a lagged pair whose steps are not maps".into(),
            ));
        };
        let (
            StepKind::ParallelMap {
                collapse: ca,
                min_points: na,
                row_checks: ra,
                strips: sa,
            },
            StepKind::ParallelMap {
                collapse: cb,
                min_points: nb,
                row_checks: rb,
                strips: sb,
            },
        ) = (&a.kind, &b.kind)
        else {
            return Err(CodegenError::Unsupported(
                "a lagged pair whose steps are not parallel maps".into(),
            ));
        };
        let conds = [self.condition(sc, a), self.condition(sc, b)];
        let holds: Vec<String> = conds
            .iter()
            .map(|c| match c {
                Cond::Bind(k) => format!("sdf_ok[{k}] != 0"),
                _ => "1".to_string(),
            })
            .collect();
        let u = self.fresh();
        let v = |x: &str| format!("sdf_lag{u}_{x}");
        let s = |x: &str| SymExpr::sym(&format!("sdf_lag{u}_{x}"));
        let points = |m: &MapScope| {
            m.ranges
                .iter()
                .map(|r| format!("sdf_max64({}, 0)", sc.sym(&r.size())))
                .collect::<Vec<_>>()
                .join(" * ")
        };
        let (sca, scb) = (sc.jamming(ma, a), sc.jamming(mb, b));
        let (rows_a, rows_b) = (
            ra.as_deref().map(|c| (c, *sa)),
            rb.as_deref().map(|c| (c, *sb)),
        );
        self.line(&format!(
            "/* '{}' lagged behind '{}' (rows of {}) */",
            mb.label.replace("*/", "* /"),
            ma.label.replace("*/", "* /"),
            lag.transient
        ));
        self.line(&format!("if ({}) {{", holds.join(" && ")));
        self.indent += 1;
        let (pa, pb) = (points(ma), points(mb));
        self.line(&format!("if ({pa} >= {na} && {pb} >= {nb}) {{"));
        self.indent += 1;
        let (r0, r1) = (&ma.ranges[0], &mb.ranges[0]);
        self.line(&format!(
            "const int64_t s_{} = {}, s_{} = {}, s_{} = {}, s_{} = {};",
            v("a0"),
            sc.sub_sym(&r0.start),
            v("a1"),
            sc.sub_sym(&r0.end),
            v("b0"),
            sc.sub_sym(&r1.start),
            v("b1"),
            sc.sub_sym(&r1.end)
        ));
        self.line("#ifdef _OPENMP");
        self.line("const int64_t sdf_nt = omp_get_num_threads(), sdf_th = omp_get_thread_num();");
        self.line("#else");
        self.line("const int64_t sdf_nt = 1, sdf_th = 0;");
        self.line("#endif");
        // This thread's parts: equal shares, the first `len % nt` one larger.
        for (x, lo, hi) in [("qa", "a0", "a1"), ("qb", "b0", "b1")] {
            self.line(&format!(
                "int64_t s_{q}, s_{q}_end; {{ const int64_t sdf_n = s_{hi} > s_{lo} ? s_{hi} - s_{lo} : 0, sdf_d = sdf_n / sdf_nt, sdf_m = sdf_n % sdf_nt; s_{q} = s_{lo} + sdf_th * sdf_d + (sdf_th < sdf_m ? sdf_th : sdf_m); s_{q}_end = s_{q} + sdf_d + (sdf_th < sdf_m ? 1 : 0); }}",
                q = v(x),
                lo = v(lo),
                hi = v(hi),
            ));
        }
        // The consumer's points per row: its inner loops', or where the map has one
        // parameter, those of the largest of its body's maps (a row-fused map's).
        let points = |m: &MapScope, from: usize| -> Option<String> {
            let sizes: Vec<String> = m.ranges[from..]
                .iter()
                .map(|r| format!("sdf_max64({}, 0)", sc.sub_sym(&r.size())))
                .collect();
            (!sizes.is_empty()).then(|| sizes.join(" * "))
        };
        let inner = points(mb, 1)
            .or_else(|| {
                mb.body
                    .node_ids()
                    .into_iter()
                    .filter_map(|n| match mb.body.node(n) {
                        // Not where a range depends on the row (a tile's rows).
                        Node::Map(im)
                            if im.ranges.iter().all(|r| {
                                let f = r.size().free_symbols();
                                mb.params.iter().all(|p| !f.contains(p))
                            }) =>
                        {
                            points(im, 0)
                        }
                        _ => None,
                    })
                    .reduce(|a, b| format!("sdf_max64({a}, {b})"))
            })
            .unwrap_or_else(|| "1".to_string());
        self.line(&format!(
            "const int64_t {rows} = sdf_max64({}LL / sdf_max64({inner}, 1), 1);",
            self.opts.lag_points,
            rows = v("rows"),
        ));
        self.line(&format!(
            "int64_t s_{lo} = s_{qa}, sdf_left = 0;",
            lo = v("lo"),
            qa = v("qa")
        ));
        // Both phases walk this thread's chunks alike; `first`: the chunks whose rows
        // are this thread's own, else the others.
        for first in [true, false] {
            if !first {
                // The rest of this thread's part of the producer, then the barrier.
                self.line("{");
                self.indent += 1;
                self.part_loops(&sca, ma, s("lo"), s("qa_end"), *ca, rows_a)?;
                self.indent -= 1;
                self.line("}");
                self.team_line(|t| t.barrier().into());
                self.line("if (sdf_left > 0)");
            }
            self.line(&format!(
                "for (int64_t s_{cb} = s_{qb}; s_{cb} < s_{qb}_end;) {{",
                cb = v("cb"),
                qb = v("qb"),
            ));
            self.indent += 1;
            self.line(&format!(
                "const int64_t s_{ce} = s_{qb}_end - s_{cb} > {rows} ? s_{cb} + {rows} : s_{qb}_end;",
                ce = v("ce"),
                cb = v("cb"),
                qb = v("qb"),
                rows = v("rows"),
            ));
            self.scan(
                sc,
                lag,
                &mb.params[0],
                &v("cb"),
                &v("ce"),
                &v("a0"),
                &v("a1"),
            );
            self.line(&format!(
                "const int sdf_own = !sdf_far && (sdf_mn > sdf_mx || (sdf_mn >= s_{qa} && sdf_mx < s_{qa}_end));",
                qa = v("qa")
            ));
            if first {
                self.line("if (sdf_own) {");
                self.indent += 1;
                self.line(&format!(
                    "if (sdf_mn <= sdf_mx && sdf_mx >= s_{lo}) {{",
                    lo = v("lo")
                ));
                self.indent += 1;
                self.line(&format!("const int64_t s_{} = sdf_mx + 1;", v("hi")));
                self.part_loops(&sca, ma, s("lo"), s("hi"), *ca, rows_a)?;
                self.line(&format!("s_{} = s_{};", v("lo"), v("hi")));
                self.indent -= 1;
                self.line("}");
                self.part_loops(&scb, mb, s("cb"), s("ce"), *cb, rows_b)?;
                self.indent -= 1;
                self.line("} else {");
                self.line("    sdf_left++;");
                self.line("}");
            } else {
                self.line("if (!sdf_own) {");
                self.indent += 1;
                self.part_loops(&scb, mb, s("cb"), s("ce"), *cb, rows_b)?;
                self.indent -= 1;
                self.line("}");
            }
            self.line(&format!("s_{} = s_{};", v("cb"), v("ce")));
            self.indent -= 1;
            self.line("}");
        }
        self.indent -= 1;
        self.line("} else {");
        self.indent += 1;
        self.parallel_map(&sca, ma, *ca, *na, rows_a)?;
        self.team_line(|t| t.barrier().into());
        self.parallel_map(&scb, mb, *cb, *nb, rows_b)?;
        self.indent -= 1;
        self.line("}");
        self.line("if (sdf_e->failed) {");
        self.team_line(|t| t.atomic_write().into());
        self.line("    sdf_abort = sdf_seq + 1;");
        self.line("}");
        self.indent -= 1;
        self.line("} else {");
        self.indent += 1;
        let [ca, cb] = conds;
        self.step_block(sc, df, a, &ca)?;
        self.team_line(|t| t.barrier().into());
        self.step_block(sc, df, b, &cb)?;
        self.indent -= 1;
        self.line("}");
        Ok(())
    }

    /// Map `m` over `[lo, hi)` of its first parameter (its other ranges whole), on the
    /// calling thread alone, with the plan's collapse depth and row checks.
    fn part_loops(
        &mut self,
        sc: &Scope<'_>,
        m: &MapScope,
        lo: SymExpr,
        hi: SymExpr,
        collapse: usize,
        rows: Option<(&[RowCheck], Option<Strip>)>,
    ) -> Result<(), CodegenError> {
        let ranges = std::iter::once(sdflow_ir::Range {
            start: lo,
            end: hi,
            step: SymExpr::Int(1),
        })
        .chain(m.ranges[1..].iter().cloned())
        .collect();
        let part = MapScope {
            ranges,
            ..m.clone()
        };
        self.map_loops_from(sc, &part, true, collapse.max(1), rows)
    }

    /// Declares `sdf_mn`, `sdf_mx`: the first and the last of the producer's points
    /// (within `[s_a0, s_a1)`) whose rows the consumer's points `[s_cb, s_ce)` of
    /// parameter `p` read (`sdf_mn > sdf_mx`: none), and `sdf_far`, set where an offset
    /// is too large to tell (the chunk then waits for the whole producer). A table
    /// column's entries are compared with the entries that name the producer's first
    /// and last rows, in a vector loop; a row read at `p + c` spans the chunk's rows;
    /// any other row expression is evaluated at every point.
    #[allow(clippy::too_many_arguments)]
    fn scan(&mut self, sc: &Scope<'_>, lag: &Lag, p: &str, cb: &str, ce: &str, a0: &str, a1: &str) {
        let shift = sc.sub_sym(&lag.shift);
        self.line("int64_t sdf_mn = INT64_MAX, sdf_mx = INT64_MIN; int sdf_far = 0;");
        // The producer's points `[lo, hi]` (no overflow: the caller checked `lo + d`).
        let take = |lo: &str, hi: &str| {
            format!(
                "if ({lo} < s_{a0}) {lo} = s_{a0}; if ({hi} >= s_{a1}) {hi} = s_{a1} - 1; if ({lo} <= {hi}) {{ if ({lo} < sdf_mn) sdf_mn = {lo}; if ({hi} > sdf_mx) sdf_mx = {hi}; }}"
            )
        };
        let mut columns = Vec::new();
        let mut per_point = Vec::new();
        for r in &lag.reads {
            match r {
                LagRead::Table {
                    table,
                    index,
                    offset,
                } => {
                    columns.push((sc.table_entry(table, index), sc.sub_sym(offset)));
                }
                LagRead::Row(e) => {
                    let c = e.sub(&SymExpr::sym(p)).simplify();
                    if c.free_symbols().contains(p) {
                        per_point.push(sc.sub_sym(e));
                    } else {
                        // Rows `[cb + c, ce - 1 + c]`: points `- shift`.
                        self.line(&format!(
                            "{{ int64_t sdf_d, sdf_lo, sdf_hi; if (SDF_SUB_OVF({}, {shift}, &sdf_d) || SDF_ADD_OVF(s_{cb}, sdf_d, &sdf_lo) || SDF_ADD_OVF(s_{ce} - 1, sdf_d, &sdf_hi)) sdf_far = 1; else {{ {} }} }}",
                            sc.sub_sym(&c),
                            take("sdf_lo", "sdf_hi")
                        ));
                    }
                }
            }
        }
        if !columns.is_empty() {
            // Entry `x` of a column of offset `o` names point `x + d`, `d = o - shift`:
            // the producer's points are the entries in `[a0 - d, a1 - d)`.
            for (k, (_, offset)) in columns.iter().enumerate() {
                self.line(&format!(
                    "int64_t sdf_d{k} = 0, sdf_l{k} = 0, sdf_h{k} = 0, sdf_n{k} = INT64_MAX, sdf_x{k} = INT64_MIN; if (SDF_SUB_OVF({offset}, {shift}, &sdf_d{k}) || SDF_SUB_OVF(s_{a0}, sdf_d{k}, &sdf_l{k}) || SDF_SUB_OVF(s_{a1}, sdf_d{k}, &sdf_h{k})) sdf_far = 1;"
                ));
            }
            let mut red: Vec<String> = Vec::new();
            for k in 0..columns.len() {
                red.push(format!("min:sdf_n{k}"));
                red.push(format!("max:sdf_x{k}"));
            }
            let red: Vec<String> = red.iter().map(|r| format!("reduction({r})")).collect();
            self.line(&format!("#pragma omp simd {}", red.join(" ")));
            self.line(&format!(
                "for (int64_t s_{p} = s_{cb}; s_{p} < s_{ce}; s_{p}++) {{"
            ));
            self.indent += 1;
            for (k, (value, _)) in columns.iter().enumerate() {
                self.line(&format!(
                    "{{ const int64_t sdf_v = {value}; const int sdf_in = sdf_v >= sdf_l{k} && sdf_v < sdf_h{k}; sdf_n{k} = sdf_in && sdf_v < sdf_n{k} ? sdf_v : sdf_n{k}; sdf_x{k} = sdf_in && sdf_v > sdf_x{k} ? sdf_v : sdf_x{k}; }}"
                ));
            }
            self.indent -= 1;
            self.line("}");
            for k in 0..columns.len() {
                self.line(&format!(
                    "if (!sdf_far && sdf_n{k} <= sdf_x{k}) {{ if (sdf_n{k} + sdf_d{k} < sdf_mn) sdf_mn = sdf_n{k} + sdf_d{k}; if (sdf_x{k} + sdf_d{k} > sdf_mx) sdf_mx = sdf_x{k} + sdf_d{k}; }}"
                ));
            }
        }
        if !per_point.is_empty() {
            self.line(&format!(
                "for (int64_t s_{p} = s_{cb}; s_{p} < s_{ce}; s_{p}++) {{"
            ));
            self.indent += 1;
            for value in &per_point {
                self.line(&format!(
                    "{{ int64_t sdf_lo; if (SDF_SUB_OVF({value}, {shift}, &sdf_lo)) sdf_far = 1; else {{ int64_t sdf_hi = sdf_lo; {} }} }}",
                    take("sdf_lo", "sdf_hi")
                ));
            }
            self.indent -= 1;
            self.line("}");
        }
    }
}
