//! Evaluation of tasklet expressions ([`Expr`]) over a name lookup.
//!
//! Conditional evaluation has C's and Python's meaning: `select(c, a, b)` evaluates `c`
//! and then only the branch it picks; `a && b` and `a || b` evaluate `b` only when `a`
//! does not decide. An operation that would fail (integer division by zero, a read
//! outside an array) fails only when it is evaluated.

use crate::dtype::{DType, Value};
use crate::expr::{BinOp, Expr};
use crate::typing;

use super::value::{self, refused};

/// Evaluates an expression; `lookup` gives the value of each name (connectors, locals,
/// map parameters, symbols) when the expression evaluates it (a lazily read input is
/// read then, and a failed read is the expression's error); `types` gives each name's
/// type, which the branch of a `select` that is not taken contributes to its result type.
pub fn eval_expr(
    e: &Expr,
    lookup: &mut dyn FnMut(&str) -> Result<Value, String>,
    types: &dyn Fn(&str) -> Option<DType>,
) -> Result<Value, String> {
    Ok(match e {
        Expr::Const(v) => *v,
        Expr::Var(n) => lookup(n)?,
        Expr::Unary(op, a) => value::unary(*op, eval_expr(a, lookup, types)?)?,
        Expr::Binary(op, a, b) if op.is_logical() => {
            let x = eval_expr(a, lookup, types)?;
            let ty = typing::binary(*op, x.dtype(), DType::Bool).map_err(refused)?;
            let x = x.cast(ty.operands).as_bool();
            let decided = if *op == BinOp::And { !x } else { x };
            if decided {
                Value::Bool(x)
            } else {
                value::binary(*op, Value::Bool(x), eval_expr(b, lookup, types)?)?
            }
        }
        Expr::Binary(op, a, b) => {
            let x = eval_expr(a, lookup, types)?;
            value::binary(*op, x, eval_expr(b, lookup, types)?)?
        }
        Expr::Select(c, a, b) => {
            let cond = eval_expr(c, lookup, types)?;
            let (v, ta, tb) = if cond.cast(DType::Bool).as_bool() {
                let v = eval_expr(a, lookup, types)?;
                (v, v.dtype(), type_of(b, types)?)
            } else {
                let v = eval_expr(b, lookup, types)?;
                (v, type_of(a, types)?, v.dtype())
            };
            let ty = typing::select(cond.dtype(), ta, tb).map_err(refused)?;
            v.cast(ty.operands)
        }
        Expr::Call(f, args) => {
            let mut vals = Vec::with_capacity(args.len());
            for a in args {
                vals.push(eval_expr(a, lookup, types)?);
            }
            value::math(*f, &vals)?
        }
        Expr::Cast(t, a) => eval_expr(a, lookup, types)?.cast(*t),
    })
}

/// The type of an expression, without evaluating it.
pub fn type_of(e: &Expr, types: &dyn Fn(&str) -> Option<DType>) -> Result<DType, String> {
    Ok(match e {
        Expr::Const(v) => v.dtype(),
        Expr::Var(n) => types(n).ok_or_else(|| format!("name '{n}' has no value"))?,
        Expr::Unary(op, a) => {
            typing::unary(*op, type_of(a, types)?)
                .map_err(refused)?
                .result
        }
        Expr::Binary(op, a, b) => {
            typing::binary(*op, type_of(a, types)?, type_of(b, types)?)
                .map_err(refused)?
                .result
        }
        Expr::Select(c, a, b) => {
            typing::select(type_of(c, types)?, type_of(a, types)?, type_of(b, types)?)
                .map_err(refused)?
                .result
        }
        Expr::Call(f, args) => {
            let ts = args
                .iter()
                .map(|a| type_of(a, types))
                .collect::<Result<Vec<_>, _>>()?;
            typing::call(*f, &ts).map_err(refused)?.result
        }
        Expr::Cast(t, _) => *t,
    })
}
