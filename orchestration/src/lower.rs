//! Lowering one stencil call to a state: a map over the call's domain holding one tasklet
//! (pointwise stencils), or a map over the horizontal domain holding the first level and a
//! sequential map over the remaining levels (scans).

use std::collections::BTreeMap;

use sdflow_ir::{DataDesc, Expr, Schedule, Sdfg, SdfgBuilder, StateId, Stmt, SymExpr, Value};

use crate::error::BuildError;
use crate::program::{Call, Program};
use crate::stencil::{Dims, Index, Kind, ScanDir, Section, Stencil};

/// How names of the program being inlined map to the flattened SDFG's.
pub(crate) struct Env {
    /// The program's name (for messages).
    pub program: String,
    /// Field or table name → flattened container name.
    pub fields: BTreeMap<String, String>,
    /// Symbol name → expression over the flattened SDFG's symbols.
    pub symbols: BTreeMap<String, SymExpr>,
}

impl Env {
    pub(crate) fn sym(&self, p: &Program, what: &str, text: &str) -> Result<SymExpr, BuildError> {
        Ok(p.sym_expr(what, text)?.substitute(&self.symbols).simplify())
    }
}

/// A call with every name resolved to the flattened SDFG's.
pub(crate) struct Resolved<'c> {
    program: String,
    stencil: &'c Stencil,
    /// Formal field or table → flattened container.
    fields: BTreeMap<String, String>,
    /// Formal parameter → value in tasklet code.
    params: BTreeMap<String, Expr>,
    /// (start, end) per dimension of the stencil.
    domain: Vec<(SymExpr, SymExpr)>,
    dims: Dims,
}

impl<'c> Resolved<'c> {
    pub(crate) fn new(
        program: &Program,
        env: &Env,
        call: &'c Call,
        sdfg: &Sdfg,
    ) -> Result<Resolved<'c>, BuildError> {
        let st = &call.stencil;
        let arg_err = |argument: &str, message: String| BuildError::Argument {
            program: program.name.clone(),
            stencil: st.name.clone(),
            argument: argument.to_string(),
            message,
        };
        if let Some(e) = st.errors.first() {
            return Err(BuildError::Stencil {
                stencil: st.name.clone(),
                message: e
                    .trim_start_matches(&format!("stencil '{}': ", st.name))
                    .to_string(),
            });
        }
        let mut fields = BTreeMap::new();
        for (formal, _) in &call.fields {
            if !st.fields.iter().any(|f| f.name == *formal)
                && !st.tables.iter().any(|t| t.name == *formal)
            {
                return Err(arg_err(
                    formal,
                    "the stencil has no such field or table".into(),
                ));
            }
        }
        let formals = st
            .fields
            .iter()
            .map(|f| (f.name.as_str(), Some(f.dims)))
            .chain(st.tables.iter().map(|t| (t.name.as_str(), None)));
        for (formal, dims) in formals {
            let Some((_, actual)) = call.fields.iter().find(|(f, _)| f == formal) else {
                return Err(arg_err(formal, "not bound".into()));
            };
            let Some(resolved) = env.fields.get(actual) else {
                return Err(arg_err(
                    formal,
                    format!(
                        "bound to '{actual}', which program '{}' does not declare",
                        program.name
                    ),
                ));
            };
            let desc = &sdfg.arrays[resolved];
            match dims {
                Some(d) if desc.rank() != d.rank() || !desc.dtype().is_float() => {
                    return Err(arg_err(
                        formal,
                        format!(
                            "'{actual}' is {}[rank {}], the stencil needs a float field of rank {}",
                            desc.dtype(),
                            desc.rank(),
                            d.rank()
                        ),
                    ));
                }
                None if desc.rank() != 2 || !desc.dtype().is_int() => {
                    return Err(arg_err(
                        formal,
                        format!(
                            "'{actual}' is {}[rank {}], a table must be an integer array [points, neighbours]",
                            desc.dtype(),
                            desc.rank()
                        ),
                    ));
                }
                _ => {}
            }
            fields.insert(formal.to_string(), resolved.clone());
        }
        let mut params = BTreeMap::new();
        for (formal, _) in &call.params {
            if !st.params.contains(formal) {
                return Err(arg_err(formal, "the stencil has no such parameter".into()));
            }
        }
        for formal in &st.params {
            let Some((_, text)) = call.params.iter().find(|(f, _)| f == formal) else {
                return Err(arg_err(formal, "not bound".into()));
            };
            let text = text.trim();
            let value = match (text.parse::<f64>(), env.symbols.get(text)) {
                (Ok(v), _) => Expr::Const(Value::F64(v)),
                (_, Some(SymExpr::Sym(s))) => Expr::Var(s.to_string()),
                (_, Some(SymExpr::Int(v))) => Expr::Const(Value::F64(*v as f64)),
                (_, Some(e)) => {
                    return Err(arg_err(
                        formal,
                        format!(
                            "bound to '{text}' = '{e}'; a parameter takes a symbol or a number"
                        ),
                    ));
                }
                (_, None) => {
                    return Err(arg_err(
                        formal,
                        format!(
                            "'{text}' is neither a number nor a symbol of program '{}'",
                            program.name
                        ),
                    ));
                }
            };
            params.insert(formal.clone(), value);
        }
        // The stencil iterates its outputs' space; same-point reads are on it, and
        // neighbour reads go through tables leading from it.
        let serr = |message: String| BuildError::Stencil {
            stencil: st.name.clone(),
            message,
        };
        let dims = st
            .fields
            .iter()
            .find(|f| f.output)
            .map(|f| f.dims)
            .unwrap_or(Dims::Ijk);
        if let Some(f) = st.fields.iter().find(|f| f.output && f.dims != dims) {
            return Err(serr(format!(
                "output '{}' is over {:?} but the stencil iterates {:?}",
                f.name, f.dims, dims
            )));
        }
        let sections: Vec<&crate::stencil::Section> = match &st.kind {
            Kind::Point(s) => vec![s],
            Kind::Scan { first, step, .. } => vec![first, step],
        };
        for rd in sections.iter().flat_map(|s| &s.reads) {
            let fdims = st
                .fields
                .iter()
                .find(|f| f.name == rd.field)
                .map(|f| f.dims);
            match &rd.index {
                Index::Neighbor { table, .. } => {
                    let from = st.tables.iter().find(|t| t.name == *table).map(|t| t.from);
                    if dims != Dims::Unstructured(from.unwrap_or(crate::stencil::Loc::Cell)) {
                        return Err(serr(format!(
                            "table '{table}' leads from {from:?} points but the stencil iterates {dims:?}"
                        )));
                    }
                }
                // Vertical-only fields are read at the level being computed by any stencil.
                _ if fdims == Some(Dims::K) => {}
                _ if fdims != Some(dims) => {
                    return Err(serr(format!(
                        "field '{}' is over {:?} and read at the same point, but the stencil iterates {dims:?}",
                        rd.field,
                        fdims.unwrap_or(dims)
                    )));
                }
                _ => {}
            }
        }
        if call.domain.len() != dims.rank() {
            return Err(arg_err(
                "domain",
                format!(
                    "{} range(s) given, the stencil iterates {} dimensions",
                    call.domain.len(),
                    dims.rank()
                ),
            ));
        }
        let mut domain = Vec::new();
        for text in &call.domain {
            let r = sdflow_ir::Range::parse(text).map_err(|e| arg_err("domain", e.to_string()))?;
            let sub = |e: &SymExpr| e.substitute(&env.symbols).simplify();
            domain.push((sub(&r.start), sub(&r.end)));
        }
        let r = Resolved {
            program: program.name.clone(),
            stencil: st,
            fields,
            params,
            domain,
            dims,
        };
        r.check_bounds(sdfg)?;
        r.check_races()?;
        Ok(r)
    }

    fn sections(&self) -> Vec<&Section> {
        self.sections_with_levels()
            .into_iter()
            .map(|(s, _)| s)
            .collect()
    }

    /// Each section with the levels `[lo, hi)` it computes.
    fn sections_with_levels(&self) -> Vec<(&Section, (SymExpr, SymExpr))> {
        let (ks, ke) = self
            .domain
            .last()
            .cloned()
            .unwrap_or((SymExpr::Int(0), SymExpr::Int(0)));
        let one = SymExpr::Int(1);
        match &self.stencil.kind {
            Kind::Point(s) => vec![(s, (ks, ke))],
            Kind::Scan {
                dir: ScanDir::Forward,
                first,
                step,
            } => {
                vec![
                    (first, (ks.clone(), ks.add(&one))),
                    (step, (ks.add(&one), ke)),
                ]
            }
            Kind::Scan {
                dir: ScanDir::Backward,
                first,
                step,
            } => {
                vec![
                    (first, (ke.sub(&one), ke.clone())),
                    (step, (ks, ke.sub(&one))),
                ]
            }
        }
    }

    /// (formal, container) of every temporary (transient) the call reads.
    pub(crate) fn temps_read(&self, sdfg: &Sdfg) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for s in self.sections() {
            for r in &s.reads {
                let actual = &self.fields[&r.field];
                let is_own_output = self
                    .stencil
                    .fields
                    .iter()
                    .any(|f| f.name == r.field && f.output);
                if sdfg.arrays.get(actual).is_some_and(DataDesc::transient)
                    && !is_own_output
                    && !out.iter().any(|(f, _)| *f == r.field)
                {
                    out.push((r.field.clone(), actual.clone()));
                }
            }
        }
        out
    }

    /// Containers the call writes.
    pub(crate) fn written(&self) -> Vec<String> {
        self.stencil
            .fields
            .iter()
            .filter(|f| f.output)
            .map(|f| self.fields[&f.name].clone())
            .collect()
    }

    /// A pointwise stencil is a parallel map: a container it writes may be read at an
    /// offset only where no point of the domain writes it (a periodic halo copy reads the
    /// interior and writes the halo; a boundary level reads the level above). Otherwise the
    /// result would depend on the order of the points.
    fn check_races(&self) -> Result<(), BuildError> {
        let Kind::Point(section) = &self.stencil.kind else {
            return Ok(());
        };
        let written = self.written();
        for rd in &section.reads {
            let actual = &self.fields[&rd.field];
            if !written.contains(actual) {
                continue;
            }
            let off = offsets(&rd.index, self.dims);
            let indirect = matches!(rd.index, Index::Neighbor { .. });
            if !indirect && off.iter().all(|&o| o == 0) {
                continue;
            }
            // Disjoint if, in some dimension, the read range ends before the written one
            // starts or starts after it ends.
            let disjoint = !indirect
                && self.domain.iter().zip(&off).any(|((start, end), &o)| {
                    let (lo, hi) = (start.add(&SymExpr::Int(o)), end.add(&SymExpr::Int(o)));
                    matches!(hi.const_diff(start), Some(d) if d <= 0)
                        || matches!(end.const_diff(&lo), Some(d) if d <= 0)
                });
            if !disjoint {
                let at = if indirect {
                    "through a table".to_string()
                } else {
                    format!("at offset {off:?}")
                };
                return Err(BuildError::Argument {
                    program: self.program.clone(),
                    stencil: self.stencil.name.clone(),
                    argument: rd.field.clone(),
                    message: format!(
                        "'{actual}' is written by this call and read {at} where the call also writes it; \
                         the points of a stencil run in parallel, so write the result to another field"
                    ),
                });
            }
        }
        Ok(())
    }

    /// Every access must lie in its field (where decidable from the domain and shapes).
    fn check_bounds(&self, sdfg: &Sdfg) -> Result<(), BuildError> {
        let names = ["i", "j", "k"];
        for (s, levels) in self.sections_with_levels() {
            let mut domain = self.domain.clone();
            if let Some(k) = domain.last_mut() {
                *k = levels;
            }
            let mut accesses: Vec<(String, Vec<i64>, bool)> = s
                .reads
                .iter()
                .map(|r| {
                    (
                        r.field.clone(),
                        offsets(&r.index, self.dims),
                        matches!(r.index, Index::Neighbor { .. }),
                    )
                })
                .collect();
            let vertical_only = |formal: &str| {
                self.stencil
                    .fields
                    .iter()
                    .any(|f| f.name == formal && f.dims == Dims::K)
            };
            accesses.extend(
                s.writes
                    .iter()
                    .map(|(f, _)| (f.clone(), vec![0; self.dims.rank()], false)),
            );
            for (formal, off, indirect) in accesses {
                let actual = &self.fields[&formal];
                let shape = sdfg.arrays[actual].shape();
                // The array dimension each domain dimension indexes (a field over K only
                // has the last one).
                let kdim = domain.len() - 1;
                let vertical = vertical_only(&formal);
                for (d, ((start, end), o)) in domain.iter().zip(&off).enumerate() {
                    if (indirect && d == 0) || (vertical && d != kdim) {
                        continue;
                    }
                    let ad = if vertical { 0 } else { d };
                    let lo = start.add(&SymExpr::Int(*o));
                    let hi = end.add(&SymExpr::Int(*o));
                    let below = matches!(lo.as_int(), Some(v) if v < 0);
                    let above = matches!(hi.const_diff(&shape[ad]), Some(v) if v > 0);
                    if below || above {
                        let dim = if self.dims == Dims::Ijk {
                            names[d]
                        } else {
                            ["horizontal", "k"][d]
                        };
                        return Err(BuildError::Argument {
                            program: self.program.clone(),
                            stencil: self.stencil.name.clone(),
                            argument: formal.clone(),
                            message: format!(
                                "domain {start}:{end} in {dim} with offset {o} reaches {}:{} of '{actual}', outside 0:{}",
                                lo, hi, shape[ad]
                            ),
                        });
                    }
                }
            }
        }
        Ok(())
    }
}

/// Offsets per dimension of a read (0 for the horizontal index of a neighbour read).
fn offsets(index: &Index, dims: Dims) -> Vec<i64> {
    match (index, dims) {
        (Index::Offset { di, dj, dk }, _) => vec![*di, *dj, *dk],
        (Index::Vertical { dk }, Dims::Ijk) => vec![0, 0, *dk],
        (Index::Vertical { dk }, _) | (Index::Neighbor { dk, .. }, _) => vec![0, *dk],
    }
}

/// `name + offset` as text.
fn at(name: &SymExpr, off: i64) -> String {
    name.add(&SymExpr::Int(off)).to_string()
}

/// The tasklet of one section with `k` the level expression: (inputs, outputs, code).
type TaskletSpec = (Vec<(String, String)>, Vec<(String, String)>, String);

fn tasklet_spec(r: &Resolved<'_>, s: &Section, k: &SymExpr) -> TaskletSpec {
    let (i, j) = (SymExpr::sym("i"), SymExpr::sym("j"));
    let memlet = |field: &str, index: &Index| -> String {
        let actual = &r.fields[field];
        let vertical = r
            .stencil
            .fields
            .iter()
            .any(|f| f.name == field && f.dims == Dims::K);
        match (index, r.dims) {
            (Index::Vertical { dk }, _) if vertical => format!("{actual}[{}]", at(k, *dk)),
            (Index::Offset { di, dj, dk }, _) => {
                format!("{actual}[{}, {}, {}]", at(&i, *di), at(&j, *dj), at(k, *dk))
            }
            (Index::Vertical { dk }, Dims::Ijk) => format!("{actual}[i, j, {}]", at(k, *dk)),
            (Index::Vertical { dk }, _) => format!("{actual}[i, {}]", at(k, *dk)),
            (Index::Neighbor { table, slot, dk }, _) => {
                format!("{actual}[{}[i, {slot}], {}]", r.fields[table], at(k, *dk))
            }
        }
    };
    let inputs = s
        .reads
        .iter()
        .map(|rd| (rd.conn.clone(), memlet(&rd.field, &rd.index)))
        .collect();
    let center = match r.dims {
        Dims::Ijk => Index::Offset {
            di: 0,
            dj: 0,
            dk: 0,
        },
        Dims::Unstructured(_) | Dims::K => Index::Vertical { dk: 0 },
    };
    let outputs = s
        .writes
        .iter()
        .map(|(f, local)| (local.clone(), memlet(f, &center)))
        .collect();
    let code: Vec<String> = s
        .code
        .iter()
        .map(|st| {
            Stmt {
                target: st.target.clone(),
                value: st.value.replace_vars(&|v| r.params.get(v).cloned()),
            }
            .to_string()
        })
        .collect();
    (inputs, outputs, code.join("\n"))
}

/// Adds the call's state.
pub(crate) fn lower_call(b: &mut SdfgBuilder, r: &Resolved<'_>) -> Result<StateId, BuildError> {
    let name = r.stencil.name.clone();
    let ranges: Vec<String> = r.domain.iter().map(|(s, e)| format!("{s}:{e}")).collect();
    let horizontal: Vec<&str> = if r.dims == Dims::Ijk {
        vec!["i", "j"]
    } else {
        vec!["i"]
    };
    let tasklet = |m: &mut sdflow_ir::DataflowBuilder<'_>, label: &str, spec: TaskletSpec| {
        let ins: Vec<(&str, &str)> = spec
            .0
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        let outs: Vec<(&str, &str)> = spec
            .1
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        m.tasklet(label, &ins, &outs, &spec.2);
    };
    let state = match &r.stencil.kind {
        Kind::Point(s) => {
            let mut params = horizontal.clone();
            params.push("k");
            let spec = tasklet_spec(r, s, &SymExpr::sym("k"));
            let ranges: Vec<&str> = ranges.iter().map(String::as_str).collect();
            b.state(&name, |st| {
                st.map(&name, &params, &ranges, |m| tasklet(m, &name, spec));
            })
        }
        Kind::Scan { dir, first, step } => {
            let (ks, ke) = r
                .domain
                .last()
                .cloned()
                .unwrap_or((SymExpr::Int(0), SymExpr::Int(0)));
            // First level, then the others in order; backward scans count kk up and map it
            // to k = ke - 2 - kk (map steps are positive).
            let (k_first, k_step, step_range) = match dir {
                ScanDir::Forward => (
                    ks.clone(),
                    SymExpr::sym("k"),
                    format!("{}:{}", ks.add(&SymExpr::Int(1)), ke),
                ),
                ScanDir::Backward => (
                    ke.sub(&SymExpr::Int(1)),
                    ke.sub(&SymExpr::Int(2)).sub(&SymExpr::sym("kk")),
                    format!("0:{}", ke.sub(&ks).sub(&SymExpr::Int(1))),
                ),
            };
            let step_param = if *dir == ScanDir::Forward { "k" } else { "kk" };
            let first_spec = tasklet_spec(r, first, &k_first);
            let step_spec = tasklet_spec(r, step, &k_step);
            let h_ranges: Vec<&str> = ranges[..horizontal.len()]
                .iter()
                .map(String::as_str)
                .collect();
            let first_label = format!("{name}_first");
            let step_label = format!("{name}_step");
            b.state(&name, |st| {
                st.map(&name, &horizontal, &h_ranges, |m| {
                    tasklet(m, &first_label, first_spec);
                    m.map_scheduled(
                        &format!("{name}_levels"),
                        &[step_param],
                        &[&step_range],
                        Schedule::Sequential,
                        |inner| tasklet(inner, &step_label, step_spec),
                    );
                });
            })
        }
    };
    Ok(state)
}
