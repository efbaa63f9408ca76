//! The control flow and the states of a function: blocks, loops, ifs and assignments;
//! a state's steps with their barriers and check policies.

use super::*;

/// When a state-level node runs unchecked.
pub(crate) enum Cond {
    /// Always (its condition holds for any symbol values).
    Always,
    /// Never (it cannot be stated, or it fails whatever the values).
    Never,
    /// When bind-time condition number `k` held (`sdf_ok[k]`).
    Bind(usize),
    /// When this condition holds at the node (it reads loop variables or host scalars).
    Runtime(SymExpr),
}

impl Emitter<'_> {
    pub(crate) fn block(&mut self, sc: &Scope<'_>, b: &Flow) -> Result<(), CodegenError> {
        match b {
            Flow::State(sp) => {
                let st = &sc.sdfg.states[sp.id.index()];
                self.line(&format!("/* state '{}' */", st.name.replace("*/", "* /")));
                self.state(
                    &sc.at(LocPart::Text(format!("state '{}'", st.name))),
                    &st.graph,
                    sp,
                )?;
            }
            Flow::Seq(items) => {
                for i in items {
                    self.block(sc, i)?;
                }
            }
            Flow::Loop {
                var: v,
                init,
                cond,
                update,
                body,
                host_reads,
            } => {
                // Every thread evaluates the condition; when it reads a host scalar that
                // the body writes, all must have read it before anyone writes it.
                let host = sc.parallel && !host_reads.is_empty();
                // Every thread evaluates the same values, so a symbolic error ends the
                // run on all of them alike.
                let here = sc.at(LocPart::Text(format!("loop over '{v}'")));
                let u = self.fresh();
                self.line(&format!("s_{v} = {};", here.sym(init)));
                self.line("if (sdf_e->failed) goto sdf_end;");
                self.line("for (;;) {");
                self.indent += 1;
                self.line(&format!("const int64_t sdf_c{u} = {};", here.sym(cond)));
                self.line("if (sdf_e->failed) goto sdf_end;");
                self.line(&format!("if (sdf_c{u} == 0) break;"));
                if host {
                    self.team_line(|t| t.barrier().into());
                }
                self.block(sc, body)?;
                self.line(&format!("s_{v} = {};", here.sym(update)));
                self.line("if (sdf_e->failed) goto sdf_end;");
                self.indent -= 1;
                self.line("}");
                if host {
                    self.team_line(|t| t.barrier().into());
                }
            }
            Flow::If {
                cond,
                then,
                otherwise,
                host_reads,
            } => {
                let host = sc.parallel && !host_reads.is_empty();
                let here = sc.at(LocPart::Text("if condition".into()));
                let u = self.fresh();
                // In a block of its own: a jump to `sdf_end` from before the `if` must
                // not cross the condition's initialization (which C allows and C++ —
                // the CUDA text, compiled as such — does not).
                self.line("{");
                self.indent += 1;
                self.line(&format!("const int64_t sdf_c{u} = {};", here.sym(cond)));
                self.line("if (sdf_e->failed) goto sdf_end;");
                self.line(&format!("if (sdf_c{u} != 0) {{"));
                self.indent += 1;
                if host {
                    self.team_line(|t| t.barrier().into());
                }
                self.block(sc, then)?;
                self.indent -= 1;
                self.line("} else {");
                self.indent += 1;
                if host {
                    self.team_line(|t| t.barrier().into());
                }
                self.block(sc, otherwise)?;
                self.indent -= 1;
                self.line("}");
                self.indent -= 1;
                self.line("}");
            }
            Flow::Assign {
                assignments: a,
                host_reads,
            } => {
                self.line("{");
                self.indent += 1;
                for (k, (n, e)) in a.iter().enumerate() {
                    let here = sc.at(LocPart::Text(format!("assignment to '{n}'")));
                    self.line(&format!("const int64_t sdf_tmp{k} = {};", here.sym(e)));
                }
                self.line("if (sdf_e->failed) goto sdf_end;");
                for (k, (n, _)) in a.iter().enumerate() {
                    self.line(&format!("s_{n} = sdf_tmp{k};"));
                }
                if sc.parallel && !host_reads.is_empty() {
                    self.team_line(|t| t.barrier().into());
                }
                self.indent -= 1;
                self.line("}");
            }
        }
        Ok(())
    }

    /// A state-level graph: in a parallel region with worksharing and barriers where
    /// dependences need them; elsewhere plain sequential code.
    pub(crate) fn state(
        &mut self,
        sc: &Scope<'_>,
        df: &Dataflow,
        sp: &StatePlan,
    ) -> Result<(), CodegenError> {
        // Steps run `nowait`; a barrier goes before a step that waits for one that ran
        // since the last barrier.
        let mut pending: Vec<usize> = Vec::new();
        let mut lagged = false;
        for (k, step) in sp.steps.iter().enumerate() {
            if std::mem::take(&mut lagged) {
                // Printed with its producer.
                pending.push(k);
                continue;
            }
            if sc.parallel
                && let Some(b) = sp.steps.get(k + 1)
                && self.lagged_pair(step, b)
            {
                let depends = pending
                    .iter()
                    .any(|p| step.waits.contains(p) || b.waits.contains(p));
                if depends {
                    self.team_line(|t| t.barrier().into());
                    pending.clear();
                }
                self.lagged(sc, df, step, b)?;
                pending.push(k);
                lagged = true;
                continue;
            }
            if sc.parallel {
                let depends = pending.iter().any(|p| step.waits.contains(p));
                if depends {
                    self.team_line(|t| t.barrier().into());
                    pending.clear();
                }
            }
            if let StepKind::ExchangeStart(x) | StepKind::ExchangeFinish(x) = &step.kind {
                if !sc.parallel {
                    return Err(CodegenError::Unsupported(
                        "a halo exchange outside the program's parallel region".into(),
                    ));
                }
                self.line(&format!("/* {} #{} */", step.kind_name(), x.id));
                if matches!(step.kind, StepKind::ExchangeStart(_)) {
                    self.exchange_start(sc, x);
                } else {
                    self.exchange_finish(sc, x);
                }
                self.line("if (sdf_e->failed) {");
                self.team_line(|t| t.atomic_write().into());
                self.line("    sdf_abort = sdf_seq + 1;");
                self.line("}");
                pending.push(k);
                continue;
            }
            let cond = self.condition(sc, step);
            self.step_block(sc, df, step, &cond)?;
            pending.push(k);
        }
        if sc.parallel && !pending.is_empty() {
            // Errors end the run after the state, on every thread at once: `sdf_abort`
            // holds the number of the state that failed, so a thread still reading it
            // after an earlier state's barrier does not see a later state's error.
            self.team_line(|t| t.barrier().into());
            self.line("sdf_seq++;");
            self.line("{ int64_t sdf_a;");
            self.team_line(|t| t.atomic_read().into());
            self.line("  sdf_a = sdf_abort;");
            self.line("  if (sdf_a != 0 && sdf_a <= sdf_seq) goto sdf_end; }");
        }
        Ok(())
    }

    /// One step in its block: its unchecked version where `cond` holds, its checked one
    /// otherwise, and the error check after it.
    pub(crate) fn step_block(
        &mut self,
        sc: &Scope<'_>,
        df: &Dataflow,
        step: &Step,
        cond: &Cond,
    ) -> Result<(), CodegenError> {
        let n = step.node;
        let u = self.fresh();
        self.line("{");
        self.indent += 1;
        match &cond {
            Cond::Always | Cond::Never => self.line(&format!("const int sdf_c{u} = 1;")),
            Cond::Bind(k) => self.line(&format!("const int sdf_c{u} = sdf_ok[{k}] != 0;")),
            // In a callee whose caller checked its subscripts (`sdf_pre`), the
            // condition is not evaluated.
            Cond::Runtime(c) if sc.takes_pre => self.line(&format!(
                "int sdf_q = 0; const int sdf_c{u} = sdf_pre || (({}) != 0 && !sdf_q);",
                sc.quiet_sym(c)
            )),
            Cond::Runtime(c) => self.line(&format!(
                "int sdf_q = 0; const int sdf_c{u} = ({}) != 0 && !sdf_q;",
                sc.quiet_sym(c)
            )),
        }
        if !matches!(cond, Cond::Never) {
            self.line(&format!("if (sdf_c{u}) {{"));
            self.indent += 1;
            self.unchecked_with_callees(sc, df, step)?;
            self.indent -= 1;
            self.line("} else {");
        } else {
            self.line(&format!("(void)sdf_c{u}; {{"));
        }
        if matches!(step.part, Some(MapPart::Interior(_))) && !matches!(cond, Cond::Always) {
            // Checked, the whole map runs in its rim's step, after the exchange
            // finished.
            self.line("    /* checked: in the rim's step */");
        } else if !matches!(cond, Cond::Always) {
            self.indent += 1;
            if sc.parallel {
                self.team_line(|t| t.single().into());
            }
            self.checked_node(sc, df, n, step.atomic_writes())?;
            self.indent -= 1;
        }
        self.line("}");
        if sc.parallel {
            self.line("if (sdf_e->failed) {");
            self.team_line(|t| t.atomic_write().into());
            self.line("    sdf_abort = sdf_seq + 1;");
            self.line("}");
        } else {
            self.line("if (sdf_e->failed) goto sdf_end;");
        }
        self.indent -= 1;
        self.line("}");
        Ok(())
    }

    /// The unchecked version of a step whose map body calls nested SDFGs: they skip their
    /// own checks where the step's callee condition holds ([`Step::callees`]). Under a
    /// bind-time condition the map is printed twice, the callees' checks skipped in the
    /// first (a constant argument: the compiler drops them) and kept in the second.
    fn unchecked_with_callees(
        &mut self,
        sc: &Scope<'_>,
        df: &Dataflow,
        step: &Step,
    ) -> Result<(), CodegenError> {
        match &step.callees {
            CheckPolicy::Never => {
                let sc = Scope {
                    callee_pre: Pre::Yes,
                    ..sc.clone()
                };
                self.unchecked_node(&sc, df, step)
            }
            CheckPolicy::AtBind(c) => {
                let k = bind_check(sc, c);
                self.line(&format!("if (sdf_ok[{k}] != 0) {{"));
                self.indent += 1;
                let yes = Scope {
                    callee_pre: Pre::Yes,
                    ..sc.clone()
                };
                self.unchecked_node(&yes, df, step)?;
                self.indent -= 1;
                self.line("} else {");
                self.indent += 1;
                self.unchecked_node(sc, df, step)?;
                self.indent -= 1;
                self.line("}");
                Ok(())
            }
            CheckPolicy::Always | CheckPolicy::AtRun(_) => self.unchecked_node(sc, df, step),
        }
    }

    /// A state-level node as it runs when its in-bounds condition holds.
    pub(crate) fn unchecked_node(
        &mut self,
        sc: &Scope<'_>,
        df: &Dataflow,
        step: &Step,
    ) -> Result<(), CodegenError> {
        let n = step.node;
        match (&step.kind, df.node(n)) {
            (
                StepKind::ParallelMap {
                    collapse,
                    min_points,
                    row_checks,
                    strips,
                },
                Node::Map(m),
            ) if sc.parallel => {
                let sc = sc.jamming(m, step);
                // Part of its points (a halo exchange's interior or rim): the same map
                // over each box of the part, one after another.
                let boxes: Vec<Vec<sdflow_ir::Range>> = match &step.part {
                    None => vec![m.ranges.clone()],
                    Some(MapPart::Interior(b)) => vec![b.clone()],
                    Some(MapPart::Rim(bs)) => bs.clone(),
                };
                for ranges in boxes {
                    let part = MapScope {
                        ranges,
                        ..m.clone()
                    };
                    let m = if step.part.is_some() { &part } else { m };
                    let rows = row_checks.as_deref().map(|c| (c, *strips));
                    self.parallel_map(&sc, m, *collapse, *min_points, rows)?;
                }
            }
            (StepKind::Copy { shared: true }, Node::Access(dst)) if sc.parallel => {
                self.shared_copies(sc, df, n, dst)?;
            }
            (_, node) => {
                if sc.parallel {
                    self.team_line(|t| t.single().into());
                }
                self.line("{");
                self.indent += 1;
                // A `single nowait` block may run beside other nodes of the state: the
                // plan says its write-conflict resolutions are atomic.
                let inner = Scope {
                    parallel: false,
                    params: sc.params.clone(),
                    locals: sc.locals.clone(),
                    in_parallel_map: sc.in_parallel_map || step.atomic_writes(),
                    stop: None,
                    loc: sc.loc.clone(),
                    ..*sc
                };
                let inner = match node {
                    Node::Map(m) => inner.jamming(m, step),
                    other => inner
                        .at(LocPart::Text(other.describe()))
                        .calling(other, step),
                };
                self.node(&inner, df, n)?;
                self.indent -= 1;
                self.line("}");
            }
        }
        Ok(())
    }

    /// The copies into access node `n` (container `dst`) of a state in a parallel region,
    /// which the plan shares among the threads ([`StepKind::Copy`]): each a loop nest
    /// ([`Emitter::copy_loops`]). Copies into one node run in edge order: a barrier
    /// separates two of them.
    pub(crate) fn shared_copies(
        &mut self,
        sc: &Scope<'_>,
        df: &Dataflow,
        n: NodeId,
        dst: &str,
    ) -> Result<(), CodegenError> {
        let edges = df.in_edges(n);
        let copies: Vec<(&str, &Edge)> = edges
            .iter()
            .filter_map(|&e| Some((df.node(df.endpoints(e).0).as_access()?, df.edge(e))))
            .collect();
        let inner = Scope {
            parallel: false,
            params: sc.params.clone(),
            locals: sc.locals.clone(),
            in_parallel_map: true,
            stop: None,
            loc: sc.loc.clone(),
            ..*sc
        };
        let inner = inner.at(LocPart::Text(df.node(n).describe()));
        for (k, &(src, edge)) in copies.iter().enumerate() {
            if k > 0 {
                self.team_line(|t| t.barrier().into());
            }
            self.line(&format!(
                "{{ /* copy {} */",
                edge.memlet.to_string().replace("*/", "* /")
            ));
            self.indent += 1;
            if !self.copy_loops(&inner, src, dst, edge, true) {
                return Err(CodegenError::Unsupported(format!(
                    "the plan shares the copy {} among threads, but it is not a loop nest",
                    edge.memlet
                )));
            }
            self.indent -= 1;
            self.line("}");
        }
        Ok(())
    }

    /// When a step runs unchecked, as the plan decided ([`CheckPolicy`]): a bind-time
    /// condition is numbered among those `bind` evaluates.
    pub(crate) fn condition(&mut self, sc: &Scope<'_>, step: &Step) -> Cond {
        match &step.check {
            CheckPolicy::Never => Cond::Always,
            CheckPolicy::Always => Cond::Never,
            CheckPolicy::AtBind(c) => Cond::Bind(bind_check(sc, c)),
            CheckPolicy::AtRun(c) => Cond::Runtime(c.clone()),
        }
    }

    /// A fresh number for labels and temporaries.
    pub(crate) fn fresh(&mut self) -> usize {
        self.labels += 1;
        self.labels
    }
}

/// Registers `c` as a bind-time condition of the program: its index in `sdf_ok`.
fn bind_check(sc: &Scope<'_>, c: &SymExpr) -> usize {
    let mut sites = sc.sites.borrow_mut();
    sites.bind_checks.push(c.clone());
    sites.bind_checks.len() - 1
}
