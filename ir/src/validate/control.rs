//! Control-flow checks: state references, loops, conditions and assignments.

use super::{Cx, Location, ProblemKind, Scope, Segment};
use crate::control::Block;
use crate::sdfg::Sdfg;

/// Checks the body of `sdfg` and that each state is referenced exactly once.
pub(super) fn check_control(cx: &mut Cx, sdfg: &Sdfg, scope: &Scope<'_>, loc: &Location) {
    let mut refs = vec![0usize; sdfg.states.len()];
    walk(cx, sdfg, scope, &sdfg.body, loc, &mut refs);
    for (i, n) in refs.iter().enumerate() {
        if *n != 1 {
            let name = sdfg
                .states
                .get(i)
                .map(|s| s.name.clone())
                .unwrap_or_default();
            let sloc = loc.child(Segment::State {
                name: name.clone(),
                index: i,
            });
            cx.push(
                ProblemKind::ControlFlow,
                &sloc,
                format!("state '{name}' (#{i}) is referenced {n} times in the control flow (expected once)"),
            );
        }
    }
}

fn walk(
    cx: &mut Cx,
    sdfg: &Sdfg,
    scope: &Scope<'_>,
    block: &Block,
    loc: &Location,
    refs: &mut [usize],
) {
    match block {
        Block::State(id) => match refs.get_mut(id.index()) {
            Some(n) => *n += 1,
            None => cx.push(
                ProblemKind::ControlFlow,
                loc,
                format!(
                    "the control flow runs state #{}, but the program has {} state(s)",
                    id.0,
                    sdfg.states.len()
                ),
            ),
        },
        Block::Seq(bs) => {
            for b in bs {
                walk(cx, sdfg, scope, b, loc, refs);
            }
        }
        Block::Loop(l) => {
            let lloc = loc.child(Segment::Control(format!("loop '{}'", l.var)));
            match sdfg.symbols.get(&l.var) {
                None => cx.push(
                    ProblemKind::UndefinedSymbol,
                    &lloc,
                    format!("loop variable '{}' is not a declared symbol", l.var),
                ),
                Some(s) if !s.dtype.is_int() => cx.push(
                    ProblemKind::DTypeMismatch,
                    &lloc,
                    format!("loop variable '{}' is {}, not an integer", l.var, s.dtype),
                ),
                Some(s) if s.value.is_some() => cx.push(
                    ProblemKind::ControlFlow,
                    &lloc,
                    format!("loop variable '{}' has a static value", l.var),
                ),
                Some(_) => {}
            }
            scope.check_expr(cx, &lloc, &l.init, "the loop's initial value", true);
            scope.check_expr(cx, &lloc, &l.cond, "the loop's condition", true);
            scope.check_expr(cx, &lloc, &l.update, "the loop's update", true);
            reassigned(cx, &l.var, &l.body, &lloc);
            walk(cx, sdfg, scope, &l.body, &lloc, refs);
        }
        Block::If(i) => {
            let iloc = loc.child(Segment::Control(format!("if '{}'", i.cond)));
            scope.check_expr(cx, &iloc, &i.cond, "the condition", true);
            walk(cx, sdfg, scope, &i.then, &iloc, refs);
            walk(cx, sdfg, scope, &i.otherwise, &iloc, refs);
        }
        Block::Assign(assigns) => {
            for (target, value) in assigns {
                let aloc = loc.child(Segment::Control(format!("assign '{target}'")));
                match sdfg.symbols.get(target) {
                    None => cx.push(
                        ProblemKind::UndefinedSymbol,
                        &aloc,
                        format!("assignment to '{target}', which is not a declared symbol"),
                    ),
                    Some(s) if !s.dtype.is_int() => cx.push(
                        ProblemKind::DTypeMismatch,
                        &aloc,
                        format!(
                            "assignment to {} symbol '{target}' (must be an integer)",
                            s.dtype
                        ),
                    ),
                    Some(s) if s.value.is_some() => cx.push(
                        ProblemKind::ControlFlow,
                        &aloc,
                        format!("assignment to symbol '{target}', which has a static value"),
                    ),
                    Some(_) => {}
                }
                scope.check_expr(
                    cx,
                    &aloc,
                    value,
                    &format_args!("the value assigned to '{target}'"),
                    true,
                );
            }
        }
    }
}

/// Reports assignments to `var` (and inner loops over it) inside a loop's body.
fn reassigned(cx: &mut Cx, var: &str, body: &Block, loc: &Location) {
    let mut found = Vec::new();
    body.visit(&mut |b| match b {
        Block::Assign(a) if a.iter().any(|(t, _)| t == var) => {
            found.push("an assignment".to_string());
        }
        Block::Loop(l) if l.var == var => found.push("an inner loop".to_string()),
        _ => {}
    });
    for how in found {
        cx.push(
            ProblemKind::LoopVarReassigned,
            loc,
            format!("loop variable '{var}' is reassigned inside the loop by {how}"),
        );
    }
}
