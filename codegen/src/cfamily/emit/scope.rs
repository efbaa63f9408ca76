//! [`Scope`]: where a name used in symbolic expressions and code is defined, and the
//! C text of symbols, subscripts and element addresses in it.

use super::*;

/// Where a name used in symbolic expressions and code is defined.
#[derive(Clone)]
pub(crate) struct Scope<'a> {
    pub(crate) sdfg: &'a Sdfg,
    /// The plan of `sdfg` being printed.
    pub(crate) plan: &'a Plan,
    /// Map parameters in scope.
    pub(crate) params: BTreeSet<String>,
    /// Transient scalars declared as body locals.
    pub(crate) locals: BTreeSet<String>,
    /// Inside a parallel region (worksharing at state level).
    pub(crate) parallel: bool,
    /// Inside the body of a map that runs in parallel (wcr writes need atomics).
    pub(crate) in_parallel_map: bool,
    /// The checked version of a node: subscripts are checked one by one, symbolic
    /// arithmetic everywhere raises its errors, map loops record their parameters.
    pub(crate) checked: bool,
    /// Where failure jumps to in a checked body (a label after the checked loops).
    pub(crate) stop: Option<String>,
    /// The location path of what is emitted, as the interpreter writes it.
    pub(crate) loc: Vec<LocPart>,
    /// Map parameters recorded (`sdf_pv`) by the enclosing checked loops.
    pub(crate) depth: usize,
    /// The program's error sites.
    pub(crate) sites: &'a RefCell<Sites>,
    /// Every index-table entry the body reads was checked for its row before the inner
    /// loops ([`Emitter::row_checks`]): gathers index without a check.
    pub(crate) rows_checked: bool,
    /// Every index-table value the body reads at a point of its innermost loop (the
    /// entries of array tables, the indices it computes) was checked for the whole row
    /// before the loop ([`Emitter::map_loops_inner`]): gathers index without a check.
    pub(crate) points_checked: bool,
    /// The map body the plan jams, and its shape (the step's map, unchecked).
    pub(crate) jam: Option<(&'a Dataflow, &'a Jam)>,
    /// The nested SDFG a state-level step calls, and the callee's plan (the step's).
    pub(crate) callee: Option<(&'a NestedSdfg, &'a Plan)>,
    /// Whether the nested SDFGs called here skip their own in-bounds checks (the
    /// unchecked version of a map whose condition covers them: [`Step::callees`]).
    pub(crate) callee_pre: Pre,
    /// The function printed is a nested SDFG's: it takes `sdf_pre`, which, set, makes
    /// every step's runtime condition hold.
    pub(crate) takes_pre: bool,
    /// Where a value read from an index table is checked by statements before the read
    /// that end the function at once when it is bad (raise, then `goto sdf_end`): the
    /// statements, for the printer to put before the read ([`Scope::exits_allowed`]).
    /// `None`: checked in the expression (`sdf_inds`: a bad value reads index 0 and the
    /// code goes on to the end of the state).
    pub(crate) exits: Option<&'a RefCell<Vec<String>>>,
}

/// What a nested SDFG's call passes as `sdf_pre`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Pre {
    /// 0: the callee checks its subscripts itself.
    No,
    /// 1: the step's callee condition, which held, covers them.
    Yes,
}

impl<'a> Scope<'a> {
    pub(crate) fn is_symbol(&self, n: &str) -> bool {
        self.params.contains(n) || self.sdfg.symbols.contains_key(n)
    }

    pub(crate) fn scalar_lvalue(&self, n: &str) -> Option<String> {
        match self.sdfg.arrays.get(n)? {
            DataDesc::Scalar { .. } if self.locals.contains(n) => Some(format!("a_{n}")),
            DataDesc::Scalar { .. } => Some(format!("a_{n}[0]")),
            DataDesc::Array(_) => None,
        }
    }

    /// The scope of a function's top level in `sdfg`: no map parameters or locals, not
    /// parallel, unchecked; errors registered in `sites` at location `loc`, under
    /// `depth` enclosing map parameters.
    pub(crate) fn new(
        sdfg: &'a Sdfg,
        plan: &'a Plan,
        sites: &'a RefCell<Sites>,
        loc: Vec<LocPart>,
        depth: usize,
    ) -> Scope<'a> {
        Scope {
            sdfg,
            plan,
            params: BTreeSet::new(),
            locals: BTreeSet::new(),
            parallel: false,
            in_parallel_map: false,
            checked: false,
            stop: None,
            loc,
            depth,
            sites,
            rows_checked: false,
            points_checked: false,
            jam: None,
            callee: None,
            callee_pre: Pre::No,
            takes_pre: false,
            exits: None,
        }
    }

    /// Whether a bad table value may end the function at once here: code of a nested
    /// SDFG's function outside its maps and its team's constructs, where `sdf_end` can be
    /// reached by a jump (a callee called at every point of a map: the jump leaves it
    /// as its state's end would, with the error raised, and is cheaper than going on —
    /// the code after a check that goes on cannot keep its values in registers).
    pub(crate) fn exits_allowed(&self) -> bool {
        self.takes_pre && !self.checked && !self.parallel && self.params.is_empty()
    }

    /// The same scope, jamming the body of `m` (the map of `step`) as the plan says.
    pub(crate) fn jamming<'s>(&self, m: &'s MapScope, step: &'s Step) -> Scope<'s>
    where
        'a: 's,
    {
        Scope {
            jam: step.jam.as_ref().map(|j| (&m.body, j)),
            ..self.clone()
        }
    }

    /// The same scope, calling `node` (the node of `step`) with the callee's plan from
    /// the step when it is a nested SDFG.
    pub(crate) fn calling<'s>(&self, node: &'s Node, step: &'s Step) -> Scope<'s>
    where
        'a: 's,
    {
        let callee = match (node, &step.kind) {
            (Node::Nested(ns), StepKind::Nested(p)) => Some((ns, &**p)),
            _ => None,
        };
        Scope {
            callee,
            ..self.clone()
        }
    }

    /// The same scope with one more location step.
    pub(crate) fn at(&self, part: LocPart) -> Scope<'a> {
        let mut loc = self.loc.clone();
        loc.push(part);
        Scope {
            params: self.params.clone(),
            locals: self.locals.clone(),
            stop: self.stop.clone(),
            loc,
            ..*self
        }
    }

    /// Registers an error site at this scope's location.
    pub(crate) fn site(&self, kind: SiteKind) -> usize {
        self.sites.borrow_mut().add(&self.loc, kind)
    }

    /// A site whose failure names the map point it happened at also in unchecked loops
    /// (which record no parameters as they run): its number and the C arguments that
    /// pass the parameters, `first, count, p0, p1, p2, p3` (for `sdf_raise_at`). The
    /// parameters are those of the maps of the function being printed, at most four;
    /// with more, the failure names the unchecked maps without their points.
    pub(crate) fn site_at_point(&self, kind: SiteKind) -> (usize, String) {
        let mut first = None;
        let mut names = Vec::new();
        for part in self.loc.iter().rev() {
            match part {
                LocPart::Text(t) if t.starts_with("sdfg '") => break,
                LocPart::Map { params, depth, .. } | LocPart::Point { params, depth, .. } => {
                    first = Some(*depth);
                    names.splice(0..0, params.iter().map(|p| format!("s_{p}")));
                }
                LocPart::Text(_) => {}
            }
        }
        let has_point = self.loc.iter().any(|p| matches!(p, LocPart::Point { .. }));
        match first {
            Some(first) if has_point && !self.checked && names.len() <= 4 => {
                let count = names.len();
                names.resize(4, "0".to_string());
                let site = self.sites.borrow_mut().add_with(&self.loc, kind, true);
                (site, format!("{first}, {count}, {}", names.join(", ")))
            }
            _ => (self.site(kind), "0, 0, 0, 0, 0, 0".to_string()),
        }
    }

    /// C text of a symbolic expression whose overflow or division by zero raises the
    /// interpreter's error at this location.
    pub(crate) fn sym(&self, e: &SymExpr) -> String {
        let site = |x: &SymExpr, div: bool| {
            let expr = x.to_string();
            self.site(if div {
                SiteKind::DivZero { expr }
            } else {
                SiteKind::Overflow { expr }
            })
        };
        self.sym_with(e, SymCheck::Raise(&site))
    }

    /// C text of a subscript or map bound: plain C arithmetic in an unchecked node (its
    /// in-bounds condition held), checked in a checked one.
    pub(crate) fn sub_sym(&self, e: &SymExpr) -> String {
        if self.checked {
            self.sym(e)
        } else {
            self.sym_with(e, SymCheck::Plain)
        }
    }

    /// C text of a condition: overflow makes it not hold (sets `sdf_q`).
    pub(crate) fn quiet_sym(&self, e: &SymExpr) -> String {
        self.sym_with(e, SymCheck::Quiet)
    }

    pub(crate) fn sym_with(&self, e: &SymExpr, check: SymCheck<'_>) -> String {
        let names = SymNames {
            scalar: &|n| {
                let lv = self.scalar_lvalue(n)?;
                let float = self
                    .sdfg
                    .arrays
                    .get(n)
                    .is_some_and(|d| d.dtype().is_float());
                Some(if float {
                    format!("sdf_f2i64({lv})")
                } else {
                    lv
                })
            },
            is_symbol: &|n| self.is_symbol(n),
            check,
        };
        cexpr::sym(e, &names)
    }

    /// The C lvalue of one element of `data` at `subset` (ranges at their start).
    pub(crate) fn elem(&self, data: &str, subset: &Subset) -> String {
        let Some(desc) = self.sdfg.arrays.get(data) else {
            return format!("a_{data}[0]");
        };
        match desc {
            DataDesc::Scalar { .. } => self.scalar_lvalue(data).unwrap_or_default(),
            DataDesc::Array(a) => {
                let idx: Vec<String> = subset
                    .0
                    .iter()
                    .enumerate()
                    .map(|(k, d)| self.index_of(d, a.shape.get(k), Some((data, k))))
                    .collect();
                format!("a_{data}[{}]", self.flat(&idx, &a.strides))
            }
        }
    }

    /// The C index of one dimension; `extent` is the dimension's size, against which a
    /// value read from an index table is checked (a bad entry raises the error flag and
    /// reads index 0 instead of memory outside the array).
    pub(crate) fn index(&self, d: &Dim, extent: Option<&SymExpr>) -> String {
        self.index_of(d, extent, None)
    }

    /// [`Scope::index`] of dimension `dim` of `data` when `of` names them: a bad
    /// table entry then raises at a site of its own, whose message is the interpreter's
    /// (the index, the dimension, the array and its extent).
    pub(crate) fn index_of(
        &self,
        d: &Dim,
        extent: Option<&SymExpr>,
        of: Option<(&str, usize)>,
    ) -> String {
        match d {
            Dim::Index(e) => self.sub_sym(e),
            Dim::Range { start, .. } => self.sub_sym(start),
            Dim::Indirect {
                table,
                index,
                offset,
            } => {
                // A scalar table (a per-iteration index computed in a map body) is read
                // as the scalar it is.
                let value = match self.sdfg.arrays.get(table) {
                    Some(DataDesc::Scalar { .. }) => {
                        format!("(int64_t){}", self.scalar_lvalue(table).unwrap_or_default())
                    }
                    _ => self.table_entry(table, index),
                };
                // An array table's entries were checked with their row; a scalar table
                // (an index computed at the point) is checked here.
                let row_checked = self.rows_checked
                    && matches!(self.sdfg.arrays.get(table), Some(DataDesc::Array(_)));
                let value = match offset.as_int() {
                    Some(0) => value,
                    // Checked with its row: in range, so the sum cannot overflow.
                    _ if row_checked && extent.is_some() => {
                        format!("({value} + ({}))", self.sub_sym(offset))
                    }
                    _ => format!("sdf_add64({value}, {})", self.sub_sym(offset)),
                };
                match (extent, of) {
                    (Some(_), Some(_)) if row_checked || self.points_checked => {
                        format!("({value})")
                    }
                    (Some(n), Some((data, dim))) => {
                        let (site, at) = self.site_at_point(SiteKind::Index {
                            data: data.to_string(),
                            dim,
                        });
                        let n = self.sym_with(n, SymCheck::Plain);
                        match self.exits {
                            Some(out) => {
                                let v = format!("sdf_ix{site}");
                                let mut out = out.borrow_mut();
                                out.push(format!("const int64_t {v} = {value};"));
                                out.push(format!(
                                    "if ({v} < 0 || {v} >= {n}) {{ sdf_raise_exit({site}, {v}, {n}, {at}); goto sdf_end; }}"
                                ));
                                v
                            }
                            None => format!("sdf_inds({value}, {n}, {site}, {at})"),
                        }
                    }
                    (Some(n), None) => {
                        format!("sdf_ind({value}, {})", self.sym_with(n, SymCheck::Plain))
                    }
                    (None, _) => format!("({value})"),
                }
            }
        }
    }

    /// The entry of array `table` at `index` (unchecked subscripts), as an `int64_t`.
    pub(crate) fn table_entry(&self, table: &str, index: &[SymExpr]) -> String {
        let idx: Vec<String> = index.iter().map(|e| self.sub_sym(e)).collect();
        let strides = self
            .sdfg
            .arrays
            .get(table)
            .and_then(|d| d.as_array())
            .map(|a| a.strides.clone())
            .unwrap_or_default();
        format!("(int64_t)a_{table}[{}]", self.flat(&idx, &strides))
    }

    pub(crate) fn flat(&self, idx: &[String], strides: &[SymExpr]) -> String {
        if idx.is_empty() {
            return "0".to_string();
        }
        idx.iter()
            .zip(strides)
            .map(|(i, s)| match s.as_int() {
                Some(1) => format!("({i})"),
                _ => format!("({i}) * ({})", self.sym_with(s, SymCheck::Plain)),
            })
            .collect::<Vec<_>>()
            .join(" + ")
    }
}
