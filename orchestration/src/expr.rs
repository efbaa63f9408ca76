//! `E`: stencil expressions with operator overloading, lowered to tasklet [`Expr`]s.

use std::ops::{Add, Div, Mul, Neg, Sub};

use sdflow_ir::{BinOp, DType, Expr, MathFn, UnOp, Value};

/// A scalar expression inside a stencil: literals, field reads at offsets, parameters,
/// arithmetic, comparisons, `select` and math functions. Build it with the usual
/// operators (`a + 0.5 * b`) and the methods below.
#[derive(Clone, Debug, PartialEq)]
pub struct E(pub(crate) Expr);

impl E {
    /// An `f64` literal.
    pub fn lit(v: f64) -> E {
        E(Expr::Const(Value::F64(v)))
    }

    /// The tasklet expression.
    pub fn expr(&self) -> &Expr {
        &self.0
    }

    fn bin(op: BinOp, a: E, b: E) -> E {
        E(Expr::bin(op, a.0, b.0))
    }

    fn call(f: MathFn, args: Vec<E>) -> E {
        E(Expr::Call(f, args.into_iter().map(|a| a.0).collect()))
    }

    /// `self < other`
    pub fn lt(self, other: impl Into<E>) -> E {
        E::bin(BinOp::Lt, self, other.into())
    }
    /// `self <= other`
    pub fn le(self, other: impl Into<E>) -> E {
        E::bin(BinOp::Le, self, other.into())
    }
    /// `self > other`
    pub fn gt(self, other: impl Into<E>) -> E {
        E::bin(BinOp::Gt, self, other.into())
    }
    /// `self >= other`
    pub fn ge(self, other: impl Into<E>) -> E {
        E::bin(BinOp::Ge, self, other.into())
    }
    /// `self == other`
    pub fn eq_(self, other: impl Into<E>) -> E {
        E::bin(BinOp::Eq, self, other.into())
    }
    /// `self && other` (booleans)
    pub fn and(self, other: E) -> E {
        E::bin(BinOp::And, self, other)
    }
    /// `self || other` (booleans)
    pub fn or(self, other: E) -> E {
        E::bin(BinOp::Or, self, other)
    }
    /// `abs(self)`
    pub fn abs(self) -> E {
        E::call(MathFn::Abs, vec![self])
    }
    /// `sqrt(self)`
    pub fn sqrt(self) -> E {
        E::call(MathFn::Sqrt, vec![self])
    }
    /// `exp(self)`
    pub fn exp(self) -> E {
        E::call(MathFn::Exp, vec![self])
    }
    /// `log(self)`
    pub fn ln(self) -> E {
        E::call(MathFn::Log, vec![self])
    }
    /// `sin(self)`
    pub fn sin(self) -> E {
        E::call(MathFn::Sin, vec![self])
    }
    /// `cos(self)`
    pub fn cos(self) -> E {
        E::call(MathFn::Cos, vec![self])
    }
    /// `tanh(self)`
    pub fn tanh(self) -> E {
        E::call(MathFn::Tanh, vec![self])
    }
    /// `floor(self)`
    pub fn floor(self) -> E {
        E::call(MathFn::Floor, vec![self])
    }
    /// `pow(self, e)`
    pub fn pow(self, e: impl Into<E>) -> E {
        E::call(MathFn::Pow, vec![self, e.into()])
    }
    /// `min(self, other)` (C's `fmin` on floats)
    pub fn min(self, other: impl Into<E>) -> E {
        E::call(MathFn::Min, vec![self, other.into()])
    }
    /// `max(self, other)` (C's `fmax` on floats)
    pub fn max(self, other: impl Into<E>) -> E {
        E::call(MathFn::Max, vec![self, other.into()])
    }
    /// A conversion.
    pub fn cast(self, to: DType) -> E {
        E(Expr::Cast(to, Box::new(self.0)))
    }
}

/// `select(cond, a, b)`: `a` where `cond` holds, else `b` (GT4Py's `where`).
pub fn select(cond: E, a: impl Into<E>, b: impl Into<E>) -> E {
    E(Expr::Select(
        Box::new(cond.0),
        Box::new(a.into().0),
        Box::new(b.into().0),
    ))
}

impl From<f64> for E {
    fn from(v: f64) -> E {
        E::lit(v)
    }
}

impl From<&E> for E {
    fn from(e: &E) -> E {
        e.clone()
    }
}

macro_rules! binop {
    ($tr:ident, $m:ident, $op:expr) => {
        impl<R: Into<E>> $tr<R> for E {
            type Output = E;
            fn $m(self, r: R) -> E {
                E::bin($op, self, r.into())
            }
        }
        impl<R: Into<E>> $tr<R> for &E {
            type Output = E;
            fn $m(self, r: R) -> E {
                E::bin($op, self.clone(), r.into())
            }
        }
        impl $tr<E> for f64 {
            type Output = E;
            fn $m(self, r: E) -> E {
                E::bin($op, E::lit(self), r)
            }
        }
        impl $tr<&E> for f64 {
            type Output = E;
            fn $m(self, r: &E) -> E {
                E::bin($op, E::lit(self), r.clone())
            }
        }
    };
}

binop!(Add, add, BinOp::Add);
binop!(Sub, sub, BinOp::Sub);
binop!(Mul, mul, BinOp::Mul);
binop!(Div, div, BinOp::Div);

impl std::ops::Not for E {
    type Output = E;
    /// `!self` (boolean)
    fn not(self) -> E {
        E(Expr::Unary(UnOp::Not, Box::new(self.0)))
    }
}

impl Neg for E {
    type Output = E;
    fn neg(self) -> E {
        E(Expr::Unary(UnOp::Neg, Box::new(self.0)))
    }
}

impl Neg for &E {
    type Output = E;
    fn neg(self) -> E {
        -self.clone()
    }
}
