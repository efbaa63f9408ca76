//! Flattening a [`Program`] into one SDFG with a worklist: every item is visited once,
//! nested programs are inlined by pushing their bodies with a renaming environment, and
//! nothing recurses, so flattening is linear in the size of the (inlined) program and
//! cannot overflow the stack however deep the nesting.
//!
//! Each stencil call becomes one state holding its map(s); loops and ifs become
//! structured blocks; a nested program's temporaries become transients named
//! `<program>_<n>_<temp>` and its loop variables are renamed the same way.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use sdflow_ir::{Block, DType, Sdfg, SdfgBuilder, SymExpr, Value};

use crate::error::BuildError;
use crate::lower::{Env, Resolved, lower_call};
use crate::program::{Item, Program};

enum Work<'p> {
    Items {
        program: &'p Program,
        items: &'p [Item],
        env: Rc<Env>,
        list: usize,
    },
    EndLoop {
        parent: usize,
        list: usize,
        var: String,
        init: SymExpr,
        end: SymExpr,
    },
    EndIf {
        parent: usize,
        then: usize,
        otherwise: usize,
        cond: SymExpr,
    },
}

/// A block list being built, with the temporaries written so far on every path to here.
struct List {
    blocks: Vec<Block>,
    written: BTreeSet<String>,
}

fn is_identifier(s: &str) -> bool {
    sdflow_ir::parse::is_name(s)
}

impl Program {
    /// Flattens the whole program, nested programs included, into one validated SDFG.
    pub fn build(&self) -> Result<Sdfg, BuildError> {
        flatten(self)
    }
}

fn flatten(top: &Program) -> Result<Sdfg, BuildError> {
    let perr = |message: String| BuildError::Program {
        program: top.name.clone(),
        message,
    };
    if !is_identifier(&top.name) {
        return Err(perr(format!(
            "'{}' is not a valid name (letters, digits, '_')",
            top.name
        )));
    }
    let mut b = SdfgBuilder::new(&top.name);
    let mut env = Env {
        program: top.name.clone(),
        fields: BTreeMap::new(),
        symbols: BTreeMap::new(),
    };
    for s in &top.symbols {
        if !is_identifier(&s.name) {
            return Err(perr(format!("symbol '{}' is not a valid name", s.name)));
        }
        match s.value {
            Some(v) => b.static_symbol(&s.name, v),
            None => b.symbol(&s.name, s.dtype),
        };
        env.symbols.insert(s.name.clone(), SymExpr::sym(&s.name));
    }
    let mut args = Vec::new();
    for f in &top.fields {
        if !is_identifier(&f.name) {
            return Err(perr(format!("field '{}' is not a valid name", f.name)));
        }
        if b.sdfg().arrays.contains_key(&f.name) || b.sdfg().symbols.contains_key(&f.name) {
            return Err(perr(format!("'{}' is declared twice", f.name)));
        }
        let shape = f
            .shape
            .iter()
            .map(|s| top.sym_expr(&format!("shape of '{}'", f.name), s))
            .collect::<Result<Vec<_>, _>>()?;
        if f.temp {
            b.transient(&f.name, f.dtype, shape);
        } else {
            b.array(&f.name, f.dtype, shape);
            args.push(f.name.clone());
        }
        env.fields.insert(f.name.clone(), f.name.clone());
    }
    let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
    b.arg_order(&arg_refs);

    let mut lists = vec![List {
        blocks: Vec::new(),
        written: BTreeSet::new(),
    }];
    let mut work = vec![Work::Items {
        program: top,
        items: &top.body.items,
        env: Rc::new(env),
        list: 0,
    }];
    let mut nested_count = 0usize;
    let mut exchanges = 0usize;
    let new_list = |lists: &mut Vec<List>, from: usize| {
        let written = lists[from].written.clone();
        lists.push(List {
            blocks: Vec::new(),
            written,
        });
        lists.len() - 1
    };
    while let Some(w) = work.pop() {
        match w {
            Work::EndLoop {
                parent,
                list,
                var,
                init,
                end,
            } => {
                let body = std::mem::take(&mut lists[list].blocks);
                let inner = std::mem::take(&mut lists[list].written);
                lists[parent].written.extend(inner);
                let v = SymExpr::sym(&var);
                lists[parent].blocks.push(Block::for_loop(
                    &var,
                    init,
                    SymExpr::bin(sdflow_ir::SymOp::Lt, v.clone(), end),
                    v.add(&SymExpr::Int(1)),
                    Block::Seq(body),
                ));
            }
            Work::EndIf {
                parent,
                then,
                otherwise,
                cond,
            } => {
                let t = std::mem::take(&mut lists[then].blocks);
                let o = std::mem::take(&mut lists[otherwise].blocks);
                let both: BTreeSet<String> = lists[then]
                    .written
                    .intersection(&lists[otherwise].written)
                    .cloned()
                    .collect();
                lists[parent].written.extend(both);
                lists[parent]
                    .blocks
                    .push(Block::if_else(cond, Block::Seq(t), Block::Seq(o)));
            }
            Work::Items {
                program,
                items,
                env,
                list,
            } => {
                let Some((item, rest)) = items.split_first() else {
                    continue;
                };
                work.push(Work::Items {
                    program,
                    items: rest,
                    env: env.clone(),
                    list,
                });
                match item {
                    Item::Call(call) => {
                        let resolved = Resolved::new(program, &env, call, b.sdfg())?;
                        for t in resolved.temps_read(b.sdfg()) {
                            if !lists[list].written.contains(&t.1) {
                                return Err(BuildError::Argument {
                                    program: program.name.clone(),
                                    stencil: call.stencil.name.clone(),
                                    argument: t.0.clone(),
                                    message: format!(
                                        "temporary '{}' is read before any call writes it",
                                        t.1
                                    ),
                                });
                            }
                        }
                        let state = lower_call(&mut b, &resolved)?;
                        lists[list].written.extend(resolved.written());
                        lists[list].blocks.push(Block::State(state));
                    }
                    Item::Loop {
                        var,
                        start,
                        end,
                        body,
                    } => {
                        // Loop variables of nested programs are renamed like their temporaries.
                        let renamed = if std::ptr::eq(program, top) {
                            var.clone()
                        } else {
                            format!("{}_{var}", env.program)
                        };
                        if !is_identifier(var) {
                            return Err(BuildError::Program {
                                program: program.name.clone(),
                                message: format!("loop variable '{var}' is not a valid name"),
                            });
                        }
                        match b.sdfg().symbols.get(&renamed) {
                            Some(s) if s.dtype == DType::I64 && s.value.is_none() => {}
                            Some(_) => {
                                return Err(BuildError::Program {
                                    program: program.name.clone(),
                                    message: format!(
                                        "loop variable '{var}' clashes with a symbol of the same name"
                                    ),
                                });
                            }
                            None => {
                                b.symbol(&renamed, DType::I64);
                            }
                        }
                        let init = env.sym(program, &format!("start of loop '{var}'"), start)?;
                        let end = env.sym(program, &format!("end of loop '{var}'"), end)?;
                        let mut inner = Env {
                            program: env.program.clone(),
                            fields: env.fields.clone(),
                            symbols: env.symbols.clone(),
                        };
                        inner.symbols.insert(var.clone(), SymExpr::sym(&renamed));
                        let l = new_list(&mut lists, list);
                        work.push(Work::EndLoop {
                            parent: list,
                            list: l,
                            var: renamed,
                            init,
                            end,
                        });
                        work.push(Work::Items {
                            program,
                            items: body,
                            env: Rc::new(inner),
                            list: l,
                        });
                    }
                    Item::If {
                        cond,
                        then,
                        otherwise,
                    } => {
                        let cond = env.sym(program, "condition", cond)?;
                        let (t, o) = (new_list(&mut lists, list), new_list(&mut lists, list));
                        work.push(Work::EndIf {
                            parent: list,
                            then: t,
                            otherwise: o,
                            cond,
                        });
                        work.push(Work::Items {
                            program,
                            items: otherwise,
                            env: env.clone(),
                            list: o,
                        });
                        work.push(Work::Items {
                            program,
                            items: then,
                            env: env.clone(),
                            list: t,
                        });
                    }
                    Item::Exchange {
                        fields,
                        decomposition,
                    } => {
                        let mut names = Vec::with_capacity(fields.len());
                        for f in fields {
                            let Some(resolved) = env.fields.get(f) else {
                                return Err(BuildError::Program {
                                    program: program.name.clone(),
                                    message: format!(
                                        "the halo exchange names '{f}', which is not a field of the program"
                                    ),
                                });
                            };
                            names.push(resolved.clone());
                        }
                        exchanges += 1;
                        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                        let state = b.state(&format!("halo_exchange_{exchanges}"), |st| {
                            st.halo_exchange(
                                &refs,
                                sdflow_ir::HaloExchange {
                                    decomposition: decomposition.clone(),
                                },
                            );
                        });
                        lists[list].written.extend(names);
                        lists[list].blocks.push(Block::State(state));
                    }
                    Item::Nested {
                        program: callee,
                        fields,
                        symbols,
                    } => {
                        nested_count += 1;
                        let inner = bind_nested(
                            &mut b,
                            program,
                            &env,
                            callee,
                            fields,
                            symbols,
                            nested_count,
                        )?;
                        work.push(Work::Items {
                            program: callee,
                            items: &callee.body.items,
                            env: Rc::new(inner),
                            list,
                        });
                    }
                }
            }
        }
    }
    let List { blocks, .. } = lists.swap_remove(0);
    b.body(Block::Seq(blocks));
    let sdfg = b.build();
    sdfg.validate().map_err(|problems| BuildError::Invalid {
        program: top.name.clone(),
        problems,
    })?;
    Ok(sdfg)
}

/// The environment of a nested program's body: its fields bound to the caller's, its
/// temporaries declared as fresh transients, its symbols bound to the caller's expressions
/// or their static values.
fn bind_nested(
    b: &mut SdfgBuilder,
    caller: &Program,
    env: &Env,
    callee: &Program,
    fields: &[(String, String)],
    symbols: &[(String, String)],
    n: usize,
) -> Result<Env, BuildError> {
    let err = |message: String| BuildError::Program {
        program: caller.name.clone(),
        message: format!("call of program '{}': {message}", callee.name),
    };
    let prefix = format!("{}_{n}", callee.name);
    let mut inner = Env {
        program: prefix.clone(),
        fields: BTreeMap::new(),
        symbols: BTreeMap::new(),
    };
    for (formal, _) in symbols {
        if !callee.symbols.iter().any(|s| s.name == *formal) {
            return Err(err(format!("it has no symbol '{formal}'")));
        }
    }
    for s in &callee.symbols {
        let bound = symbols.iter().find(|(f, _)| *f == s.name);
        let value = match (bound, s.value) {
            (Some((_, text)), Some(_)) => {
                // A static symbol takes a constant: a literal, or an expression over the
                // caller's static symbols.
                let statics: BTreeMap<String, SymExpr> = b
                    .sdfg()
                    .symbols
                    .iter()
                    .filter_map(|(k, v)| {
                        v.value
                            .filter(|x| x.dtype().is_int())
                            .map(|x| (k.clone(), SymExpr::Int(x.as_i64())))
                    })
                    .collect();
                let e = env
                    .sym(caller, &format!("value of '{}'", s.name), text)?
                    .substitute(&statics)
                    .simplify();
                if e.as_int().is_none() {
                    return Err(err(format!(
                        "symbol '{}' is static and needs a constant, got '{text}'",
                        s.name
                    )));
                }
                e
            }
            (Some((_, text)), None) => env.sym(caller, &format!("value of '{}'", s.name), text)?,
            (None, Some(v)) => match v {
                Value::I32(_) | Value::I64(_) | Value::Bool(_) => SymExpr::Int(v.as_i64()),
                _ => {
                    return Err(err(format!(
                        "static float symbol '{}' cannot be inlined; bind it to a caller symbol",
                        s.name
                    )));
                }
            },
            (None, None) => return Err(err(format!("symbol '{}' is not bound", s.name))),
        };
        inner.symbols.insert(s.name.clone(), value);
    }
    for (formal, _) in fields {
        if !callee.fields.iter().any(|f| f.name == *formal && !f.temp) {
            return Err(err(format!("it has no argument field '{formal}'")));
        }
    }
    for f in &callee.fields {
        if f.temp {
            let name = format!("{prefix}_{}", f.name);
            let shape = f
                .shape
                .iter()
                .map(|s| {
                    Ok(callee
                        .sym_expr(&format!("shape of '{}'", f.name), s)?
                        .substitute(&inner.symbols)
                        .simplify())
                })
                .collect::<Result<Vec<_>, BuildError>>()?;
            b.transient(&name, f.dtype, shape);
            inner.fields.insert(f.name.clone(), name);
        } else {
            let Some((_, actual)) = fields.iter().find(|(formal, _)| *formal == f.name) else {
                return Err(err(format!("field '{}' is not bound", f.name)));
            };
            let Some(resolved) = env.fields.get(actual) else {
                return Err(err(format!(
                    "field '{}' is bound to '{actual}', which the caller does not declare",
                    f.name
                )));
            };
            inner.fields.insert(f.name.clone(), resolved.clone());
        }
    }
    Ok(inner)
}
