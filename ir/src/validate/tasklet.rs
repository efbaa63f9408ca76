//! Tasklet code checks: assignment discipline, names and types.

use std::collections::{BTreeMap, BTreeSet};

use super::{Cx, Loc, ProblemKind, Scope, is_identifier};
use crate::dataflow::Tasklet;
use crate::dtype::DType;
use crate::typing::TaskletNames;

/// Checks connector names and the code of a tasklet.
pub(super) fn check_tasklet(cx: &mut Cx, scope: &Scope<'_>, t: &Tasklet, loc: &Loc<'_>) {
    let name = &t.name;
    for c in t.inputs.keys().chain(t.outputs.keys()) {
        if !is_identifier(c) {
            cx.push(
                ProblemKind::BadName,
                loc,
                format!("connector name '{c}' of tasklet '{name}' is not an identifier"),
            );
        }
    }
    for c in t.inputs.keys() {
        if t.outputs.contains_key(c) {
            cx.push(
                ProblemKind::TaskletCode,
                loc,
                format!("tasklet '{name}' has '{c}' both as an input and as an output"),
            );
        }
    }
    let mut locals: BTreeMap<String, DType> = BTreeMap::new();
    let mut assigned: BTreeSet<&str> = BTreeSet::new();
    let mut names = TaskletNames::new(t);
    for stmt in &t.code {
        let env = |v: &str| -> Option<DType> {
            names
                .resolve(v, &|p| scope.params.iter().any(|q| q == p), &|s| {
                    scope.sdfg.symbols.get(s).map(|s| s.dtype)
                })
                .map(|(_, t)| t)
        };
        let ty = match stmt.value.infer(&env) {
            Ok(ty) => Some(ty),
            Err(e) => {
                cx.push(
                    ProblemKind::TaskletCode,
                    loc,
                    format!("tasklet '{name}', statement '{stmt}': {e}"),
                );
                None
            }
        };
        let target = stmt.target.as_str();
        if t.inputs.contains_key(target) {
            cx.push(
                ProblemKind::TaskletCode,
                loc,
                format!("tasklet '{name}', statement '{stmt}': assigns input connector '{target}'"),
            );
        } else if t.outputs.contains_key(target) {
            if !assigned.insert(target) {
                cx.push(
                    ProblemKind::TaskletCode,
                    loc,
                    format!("tasklet '{name}', statement '{stmt}': output '{target}' is assigned more than once"),
                );
            }
        } else if locals.contains_key(target) {
            cx.push(
                ProblemKind::TaskletCode,
                loc,
                format!("tasklet '{name}', statement '{stmt}': local '{target}' is assigned more than once"),
            );
        } else {
            if !is_identifier(target) {
                cx.push(
                    ProblemKind::BadName,
                    loc,
                    format!("tasklet '{name}': local name '{target}' is not an identifier"),
                );
            }
            locals.insert(target.to_string(), ty.unwrap_or(DType::F64));
        }
        if !names.is_assigned(target) && !t.inputs.contains_key(target) {
            names.assign(target, ty.unwrap_or(DType::F64));
        }
    }
    for o in t.outputs.keys() {
        if !assigned.contains(o.as_str()) {
            cx.push(
                ProblemKind::TaskletCode,
                loc,
                format!("tasklet '{name}' never assigns output '{o}'"),
            );
        }
    }
}
