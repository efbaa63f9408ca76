//! The one home of tasklet semantics that every consumer reads: the typing rule of each
//! operation ([`Typing`]: the type its operands are converted to and the type of its
//! result), expressions with every conversion explicit ([`Expr::elaborate`]), and what a
//! name in a tasklet's code refers to ([`TaskletNames`]).
//!
//! Validation ([`Expr::infer`]), the interpreter (`interp::value`), the C and CUDA
//! printers and the e-graph optimizer all ask these functions, so a rule is written once.
//!
//! The rules are C's usual arithmetic conversions on [`DType`] (the wider operand type,
//! at least `i32`), with these choices of sdflow:
//! - arithmetic (`+ - * / // %`, `-x`) refuses `bool` operands;
//! - comparisons compare integers (and `bool`s, which only `==`/`!=` accept, both sides
//!   `bool`) as `i64`, floats in their promoted float type; the result is `bool`;
//! - `&&`, `||`, `!` and a `select`'s condition take `bool`;
//! - `select(c, a, b)` converts both branches to their promoted type (both `bool` or
//!   neither);
//! - `abs`, `min`, `max` on integers stay integer (at least `i32`); every other function,
//!   and these on floats, computes in `f32` when the promoted operand type is `f32`, else
//!   in `f64`; `wall_ns()` is `i64`.
//!
//! Every implicit conversion is [`Value::cast`](crate::Value::cast) (C's conversion,
//! saturating from float to integer as Rust's `as`).

use std::collections::BTreeMap;

use crate::dataflow::Tasklet;
use crate::dtype::DType;
use crate::expr::{BinOp, Expr, MathFn, TypeError, UnOp};

/// The typing of one operation: the type every operand is converted to before the
/// operation, and the type of its result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Typing {
    /// The type the operands are converted to (for `select`, the branches; its
    /// condition is always `bool`).
    pub operands: DType,
    /// The result's type.
    pub result: DType,
}

impl Typing {
    fn same(t: DType) -> Typing {
        Typing {
            operands: t,
            result: t,
        }
    }
}

/// An operand type an operation does not take: the operation's spelling and the type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// The operator or function.
    pub op: &'static str,
    /// The offending operand type.
    pub found: DType,
}

/// The arithmetic type of two operands: the promoted type, at least `i32`.
fn arith(a: DType, b: DType) -> DType {
    DType::promote(DType::promote(a, b), DType::I32)
}

/// The typing of a unary operation on an operand of type `t`.
pub fn unary(op: UnOp, t: DType) -> Result<Typing, Refused> {
    match op {
        UnOp::Not if t == DType::Bool => Ok(Typing::same(DType::Bool)),
        UnOp::Not => Err(Refused { op: "!", found: t }),
        UnOp::Neg if t == DType::Bool => Err(Refused { op: "-", found: t }),
        UnOp::Neg => Ok(Typing::same(arith(t, t))),
    }
}

/// The typing of a binary operation on operands of types `a` and `b`.
pub fn binary(op: BinOp, a: DType, b: DType) -> Result<Typing, Refused> {
    let refuse = |found| Refused {
        op: op.symbol(),
        found,
    };
    if op.is_logical() {
        return match [a, b].into_iter().find(|t| *t != DType::Bool) {
            Some(t) => Err(refuse(t)),
            None => Ok(Typing::same(DType::Bool)),
        };
    }
    if op.is_comparison() {
        let both_bool = a == DType::Bool && b == DType::Bool;
        if !(both_bool && matches!(op, BinOp::Eq | BinOp::Ne))
            && let Some(t) = [a, b].into_iter().find(|t| *t == DType::Bool)
        {
            return Err(refuse(t));
        }
        let operands = match DType::promote(a, b) {
            DType::F32 => DType::F32,
            DType::F64 => DType::F64,
            _ => DType::I64,
        };
        return Ok(Typing {
            operands,
            result: DType::Bool,
        });
    }
    if let Some(t) = [a, b].into_iter().find(|t| *t == DType::Bool) {
        return Err(refuse(t));
    }
    Ok(Typing::same(arith(a, b)))
}

/// The typing of `select(c, a, b)`; `operands` is the branches' type.
pub fn select(c: DType, a: DType, b: DType) -> Result<Typing, Refused> {
    if c != DType::Bool {
        return Err(Refused {
            op: "select",
            found: c,
        });
    }
    if (a == DType::Bool) != (b == DType::Bool) {
        return Err(Refused {
            op: "select",
            found: DType::Bool,
        });
    }
    Ok(Typing::same(DType::promote(a, b)))
}

/// The typing of a math function call on arguments of the given types (their number is
/// checked by the caller: [`MathFn::arity`]).
pub fn call(f: MathFn, args: &[DType]) -> Result<Typing, Refused> {
    if f == MathFn::WallNs {
        return Ok(Typing::same(DType::I64));
    }
    if let Some(t) = args.iter().find(|t| **t == DType::Bool) {
        return Err(Refused {
            op: f.name(),
            found: *t,
        });
    }
    let t = args.iter().fold(DType::I32, |t, a| DType::promote(t, *a));
    Ok(Typing::same(if f.keeps_int() && t.is_int() {
        t
    } else if t == DType::F32 {
        DType::F32
    } else {
        DType::F64
    }))
}

impl Expr {
    /// The same expression with every implicit conversion made an explicit
    /// [`Expr::Cast`], so that the operands of every operation already have the
    /// operation's operand type ([`Typing::operands`]), and its type. Printing the result
    /// and reading it back gives the same values and types as the original.
    pub fn elaborate(
        &self,
        env: &dyn Fn(&str) -> Option<DType>,
    ) -> Result<(Expr, DType), TypeError> {
        let bad = |r: Refused| TypeError::BadOperand {
            op: r.op.to_string(),
            found: r.found,
            expr: self.to_string(),
        };
        let to = |(e, t): (Expr, DType), want: DType| {
            if t == want {
                e
            } else {
                Expr::Cast(want, Box::new(e))
            }
        };
        Ok(match self {
            Expr::Const(v) => (self.clone(), v.dtype()),
            Expr::Var(v) => (
                self.clone(),
                env(v).ok_or_else(|| TypeError::UnknownName(v.clone()))?,
            ),
            Expr::Unary(op, a) => {
                let a = a.elaborate(env)?;
                let ty = unary(*op, a.1).map_err(bad)?;
                (Expr::Unary(*op, Box::new(to(a, ty.operands))), ty.result)
            }
            Expr::Binary(op, a, b) => {
                let (a, b) = (a.elaborate(env)?, b.elaborate(env)?);
                let ty = binary(*op, a.1, b.1).map_err(bad)?;
                (
                    Expr::bin(*op, to(a, ty.operands), to(b, ty.operands)),
                    ty.result,
                )
            }
            Expr::Select(c, a, b) => {
                let (c, a, b) = (c.elaborate(env)?, a.elaborate(env)?, b.elaborate(env)?);
                let ty = select(c.1, a.1, b.1).map_err(bad)?;
                (
                    Expr::Select(
                        Box::new(c.0),
                        Box::new(to(a, ty.operands)),
                        Box::new(to(b, ty.operands)),
                    ),
                    ty.result,
                )
            }
            Expr::Call(f, args) => {
                check_arity(*f, args.len())?;
                let args = args
                    .iter()
                    .map(|a| a.elaborate(env))
                    .collect::<Result<Vec<_>, _>>()?;
                let types: Vec<DType> = args.iter().map(|a| a.1).collect();
                let ty = call(*f, &types).map_err(bad)?;
                (
                    Expr::Call(*f, args.into_iter().map(|a| to(a, ty.operands)).collect()),
                    ty.result,
                )
            }
            Expr::Cast(t, a) => {
                let a = a.elaborate(env)?;
                (to(a, *t), *t)
            }
        })
    }
}

/// An arity error when `found` arguments do not fit `f`.
pub(crate) fn check_arity(f: MathFn, found: usize) -> Result<(), TypeError> {
    if found == f.arity() {
        Ok(())
    } else {
        Err(TypeError::Arity {
            func: f.name().to_string(),
            expected: f.arity(),
            found,
        })
    }
}

/// What a name read by a tasklet statement refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binding {
    /// An input connector, converted to the connector's type when read.
    Input,
    /// A local assigned by an earlier statement (its value's type).
    Local,
    /// An output connector assigned by an earlier statement (the connector's type).
    Output,
    /// A parameter of an enclosing map (`i64`).
    Param,
    /// A symbol of the program (its declared type).
    Symbol,
}

/// The names a tasklet's statements read, resolved in one order for every consumer: the
/// input connectors, then what earlier statements assigned (locals and outputs), then the
/// parameters of enclosing maps, then the program's symbols. Walk the statements in
/// order, resolving the names of each with [`resolve`](TaskletNames::resolve) and then
/// recording its target with [`assign`](TaskletNames::assign).
#[derive(Clone, Debug)]
pub struct TaskletNames<'t> {
    tasklet: &'t Tasklet,
    assigned: BTreeMap<&'t str, (Binding, DType)>,
}

impl<'t> TaskletNames<'t> {
    /// The names before the first statement.
    pub fn new(tasklet: &'t Tasklet) -> TaskletNames<'t> {
        TaskletNames {
            tasklet,
            assigned: BTreeMap::new(),
        }
    }

    /// What `name` refers to and its type; `is_param` tells the enclosing map
    /// parameters, `symbol` the program's symbols and their types.
    pub fn resolve(
        &self,
        name: &str,
        is_param: &dyn Fn(&str) -> bool,
        symbol: &dyn Fn(&str) -> Option<DType>,
    ) -> Option<(Binding, DType)> {
        if let Some(t) = self.tasklet.inputs.get(name) {
            return Some((Binding::Input, *t));
        }
        if let Some(b) = self.assigned.get(name) {
            return Some(*b);
        }
        if is_param(name) {
            return Some((Binding::Param, DType::I64));
        }
        symbol(name).map(|t| (Binding::Symbol, t))
    }

    /// What statement `target = value` defines: an output (of the connector's type) or
    /// a local (of the value's type `value_type`). Returns the binding and its type.
    pub fn assign(&mut self, target: &'t str, value_type: DType) -> (Binding, DType) {
        let b = match self.tasklet.outputs.get(target) {
            Some(t) => (Binding::Output, *t),
            None => (Binding::Local, value_type),
        };
        self.assigned.insert(target, b);
        b
    }

    /// True when an earlier statement assigned `name`.
    pub fn is_assigned(&self, name: &str) -> bool {
        self.assigned.contains_key(name)
    }
}

impl Expr {
    /// The type of the expression given the type of each name (the rules of
    /// this module).
    pub fn infer(&self, env: &dyn Fn(&str) -> Option<DType>) -> Result<DType, TypeError> {
        let bad = |r: Refused| TypeError::BadOperand {
            op: r.op.to_string(),
            found: r.found,
            expr: self.to_string(),
        };
        Ok(match self {
            Expr::Const(v) => v.dtype(),
            Expr::Var(v) => env(v).ok_or_else(|| TypeError::UnknownName(v.clone()))?,
            Expr::Unary(op, a) => unary(*op, a.infer(env)?).map_err(bad)?.result,
            Expr::Binary(op, a, b) => {
                let (ta, tb) = (a.infer(env)?, b.infer(env)?);
                binary(*op, ta, tb).map_err(bad)?.result
            }
            Expr::Select(c, a, b) => {
                let (tc, ta, tb) = (c.infer(env)?, a.infer(env)?, b.infer(env)?);
                select(tc, ta, tb).map_err(bad)?.result
            }
            Expr::Call(func, args) => {
                check_arity(*func, args.len())?;
                let types = args
                    .iter()
                    .map(|a| a.infer(env))
                    .collect::<Result<Vec<_>, _>>()?;
                call(*func, &types).map_err(bad)?.result
            }
            Expr::Cast(t, a) => {
                a.infer(env)?;
                *t
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::Value;

    #[test]
    fn rules_follow_c_with_sdflow_choices() {
        use DType::*;
        assert_eq!(
            binary(BinOp::Add, I32, F32),
            Ok(Typing {
                operands: F32,
                result: F32
            })
        );
        assert_eq!(
            binary(BinOp::Lt, I32, I32),
            Ok(Typing {
                operands: I64,
                result: Bool
            })
        );
        assert_eq!(
            binary(BinOp::Eq, Bool, Bool),
            Ok(Typing {
                operands: I64,
                result: Bool
            })
        );
        assert_eq!(
            binary(BinOp::Lt, Bool, Bool),
            Err(Refused {
                op: "<",
                found: Bool
            })
        );
        assert_eq!(binary(BinOp::Add, Bool, I32).unwrap_err().found, Bool);
        assert_eq!(call(MathFn::Abs, &[I32]).unwrap().result, I32);
        assert_eq!(call(MathFn::Sqrt, &[I64]).unwrap().result, F64);
        assert_eq!(call(MathFn::Sqrt, &[F32]).unwrap().result, F32);
        assert_eq!(call(MathFn::Min, &[F32, I64]).unwrap().result, F32);
        assert_eq!(unary(UnOp::Neg, I32).unwrap().result, I32);
        assert_eq!(select(Bool, F32, I64).unwrap().result, F32);
    }

    #[test]
    fn elaboration_makes_every_conversion_explicit() {
        let env = |n: &str| match n {
            "a" => Some(DType::F32),
            "i" => Some(DType::I32),
            "c" => Some(DType::Bool),
            _ => None,
        };
        let (e, t) = Expr::parse("a * i + select(c, i, 2) < sqrt(i)")
            .unwrap()
            .elaborate(&env)
            .unwrap();
        assert_eq!(t, DType::Bool);
        assert_eq!(
            e.to_string(),
            "f64(a * f32(i) + f32(select(c, i64(i), 2))) < sqrt(f64(i))"
        );
        // Printing and reading back keeps types (no conversion is left implicit).
        assert_eq!(Expr::parse(&e.to_string()).unwrap().infer(&env), Ok(t));
        assert_eq!(
            Expr::Const(Value::I32(1)).elaborate(&env).unwrap().1,
            DType::I32
        );
    }
}
