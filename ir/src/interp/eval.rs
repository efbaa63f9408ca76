//! Evaluation of tasklet expressions ([`Expr`]) over a name lookup.

use crate::dtype::Value;
use crate::expr::Expr;

use super::value;

/// Evaluates an expression; `lookup` gives the value of each name (connectors, locals,
/// map parameters, symbols). Both branches of `select` are evaluated.
pub fn eval_expr(e: &Expr, lookup: &dyn Fn(&str) -> Option<Value>) -> Result<Value, String> {
    Ok(match e {
        Expr::Const(v) => *v,
        Expr::Var(n) => lookup(n).ok_or_else(|| format!("name '{n}' has no value"))?,
        Expr::Unary(op, a) => value::unary(*op, eval_expr(a, lookup)?)?,
        Expr::Binary(op, a, b) => value::binary(*op, eval_expr(a, lookup)?, eval_expr(b, lookup)?)?,
        Expr::Select(c, a, b) => value::select(
            eval_expr(c, lookup)?,
            eval_expr(a, lookup)?,
            eval_expr(b, lookup)?,
        )?,
        Expr::Call(f, args) => {
            let vals = args
                .iter()
                .map(|a| eval_expr(a, lookup))
                .collect::<Result<Vec<_>, _>>()?;
            value::math(*f, &vals)?
        }
        Expr::Cast(t, a) => eval_expr(a, lookup)?.cast(*t),
    })
}
