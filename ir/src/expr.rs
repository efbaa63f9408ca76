//! Tasklet code: typed scalar expressions and the statements of a tasklet body.
//!
//! This is the language the e-graph rewrites, so it stays a plain tree with one meaning:
//! C's arithmetic on the types of [`DType`] (see [`DType::promote`]), IEEE semantics for
//! floats, Python's `//` and `%` (floored) on integers, and the math functions of C's
//! `<math.h>` on the operand's float type.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::dtype::{DType, Value, fmt_float};

/// A unary operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UnOp {
    /// Arithmetic negation.
    Neg,
    /// Logical negation (operand `bool`).
    Not,
}

/// A binary operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BinOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`: IEEE division on floats, truncating division on integers (C).
    Div,
    /// `//`: floor division (`floor(a / b)` on floats).
    FloorDiv,
    /// `%`: floored modulo, the sign of the divisor (Python).
    Mod,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `&&` on booleans.
    And,
    /// `||` on booleans.
    Or,
}

impl BinOp {
    /// Infix spelling.
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::FloorDiv => "//",
            BinOp::Mod => "%",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::And => "&&",
            BinOp::Or => "||",
        }
    }

    /// Binding strength (higher binds tighter).
    pub(crate) fn precedence(self) -> u8 {
        match self {
            BinOp::Or => 1,
            BinOp::And => 2,
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => 3,
            BinOp::Add | BinOp::Sub => 4,
            BinOp::Mul | BinOp::Div | BinOp::FloorDiv | BinOp::Mod => 5,
        }
    }

    /// True for the six comparisons.
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge
        )
    }

    /// True for `&&` and `||`.
    pub fn is_logical(self) -> bool {
        matches!(self, BinOp::And | BinOp::Or)
    }
}

/// A math function (C `<math.h>` semantics, in the float type of the operands).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MathFn {
    /// `abs(x)`; on integers stays integer.
    Abs,
    /// `sqrt(x)`
    Sqrt,
    /// `cbrt(x)`
    Cbrt,
    /// `exp(x)`
    Exp,
    /// `log(x)` (natural)
    Log,
    /// `log10(x)`
    Log10,
    /// `sin(x)`
    Sin,
    /// `cos(x)`
    Cos,
    /// `tan(x)`
    Tan,
    /// `asin(x)`
    Asin,
    /// `acos(x)`
    Acos,
    /// `atan(x)`
    Atan,
    /// `sinh(x)`
    Sinh,
    /// `cosh(x)`
    Cosh,
    /// `tanh(x)`
    Tanh,
    /// `floor(x)`
    Floor,
    /// `ceil(x)`
    Ceil,
    /// `trunc(x)`
    Trunc,
    /// `round(x)` (half away from zero)
    Round,
    /// `pow(x, y)`
    Pow,
    /// `atan2(y, x)`
    Atan2,
    /// `min(a, b)`: on floats C's `fmin` (a NaN operand yields the other).
    Min,
    /// `max(a, b)`: on floats C's `fmax`.
    Max,
    /// `fma(a, b, c)`: `a * b + c` rounded once (C's `fma`). Not in [`MathFn::ALL`]:
    /// programs get it from the e-graph's opt-in fast-math rules or write it.
    Fma,
    /// `wall_ns()`: a clock in nanoseconds (i64) whose differences time a region (GT4Py's
    /// metrics); the one function that is not pure, so not in [`MathFn::ALL`].
    WallNs,
}

impl MathFn {
    /// Every pure function, for parsing and generators.
    pub const ALL: [MathFn; 23] = [
        MathFn::Abs,
        MathFn::Sqrt,
        MathFn::Cbrt,
        MathFn::Exp,
        MathFn::Log,
        MathFn::Log10,
        MathFn::Sin,
        MathFn::Cos,
        MathFn::Tan,
        MathFn::Asin,
        MathFn::Acos,
        MathFn::Atan,
        MathFn::Sinh,
        MathFn::Cosh,
        MathFn::Tanh,
        MathFn::Floor,
        MathFn::Ceil,
        MathFn::Trunc,
        MathFn::Round,
        MathFn::Pow,
        MathFn::Atan2,
        MathFn::Min,
        MathFn::Max,
    ];

    /// Name in expression text.
    pub fn name(self) -> &'static str {
        match self {
            MathFn::Abs => "abs",
            MathFn::Sqrt => "sqrt",
            MathFn::Cbrt => "cbrt",
            MathFn::Exp => "exp",
            MathFn::Log => "log",
            MathFn::Log10 => "log10",
            MathFn::Sin => "sin",
            MathFn::Cos => "cos",
            MathFn::Tan => "tan",
            MathFn::Asin => "asin",
            MathFn::Acos => "acos",
            MathFn::Atan => "atan",
            MathFn::Sinh => "sinh",
            MathFn::Cosh => "cosh",
            MathFn::Tanh => "tanh",
            MathFn::Floor => "floor",
            MathFn::Ceil => "ceil",
            MathFn::Trunc => "trunc",
            MathFn::Round => "round",
            MathFn::Pow => "pow",
            MathFn::Atan2 => "atan2",
            MathFn::Min => "min",
            MathFn::Max => "max",
            MathFn::Fma => "fma",
            MathFn::WallNs => "wall_ns",
        }
    }

    /// Looks a function up by name.
    pub fn from_name(s: &str) -> Option<MathFn> {
        MathFn::ALL
            .into_iter()
            .chain([MathFn::WallNs, MathFn::Fma])
            .find(|f| f.name() == s)
    }

    /// Number of arguments.
    pub fn arity(self) -> usize {
        match self {
            MathFn::Pow | MathFn::Atan2 | MathFn::Min | MathFn::Max => 2,
            MathFn::Fma => 3,
            MathFn::WallNs => 0,
            _ => 1,
        }
    }

    /// True when the function keeps integer operands integer (`abs`, `min`, `max`).
    pub fn keeps_int(self) -> bool {
        matches!(self, MathFn::Abs | MathFn::Min | MathFn::Max)
    }
}

/// A typed scalar expression.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Expr {
    /// A literal.
    Const(Value),
    /// A tasklet input connector, a local, a symbol or an enclosing map parameter.
    Var(String),
    /// A unary operation.
    Unary(UnOp, Box<Expr>),
    /// A binary operation.
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `select(cond, a, b)`: `a` where `cond` holds, else `b`. Lazy, as C's `?:` and
    /// Python's `a if c else b`: only the branch taken is evaluated (and can fail).
    Select(Box<Expr>, Box<Expr>, Box<Expr>),
    /// A math function call.
    Call(MathFn, Vec<Expr>),
    /// A conversion, written `f64(x)`, `i32(x)`, ….
    Cast(DType, Box<Expr>),
}

/// Why an expression is ill-typed or uses an unknown name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TypeError {
    /// A name that is neither connector, local, symbol nor map parameter.
    #[error("unknown name '{0}'")]
    UnknownName(String),
    /// Operands of a wrong type.
    #[error("'{op}' cannot take {found} operands (in '{expr}')")]
    BadOperand {
        /// The operator or function.
        op: String,
        /// The offending type.
        found: DType,
        /// The expression text.
        expr: String,
    },
    /// A function called with the wrong number of arguments.
    #[error("'{func}' takes {expected} argument(s), got {found}")]
    Arity {
        /// The function.
        func: String,
        /// Expected count.
        expected: usize,
        /// Given count.
        found: usize,
    },
}

impl From<Value> for Expr {
    fn from(v: Value) -> Self {
        Expr::Const(v)
    }
}

impl Expr {
    /// Depth of the expression tree (a leaf is 1), computed without recursion, so that
    /// loaders can refuse expressions too deep to walk recursively.
    pub fn depth(&self) -> usize {
        let mut max = 0;
        let mut stack = vec![(self, 1usize)];
        while let Some((e, d)) = stack.pop() {
            max = max.max(d);
            match e {
                Expr::Const(_) | Expr::Var(_) => {}
                Expr::Unary(_, a) | Expr::Cast(_, a) => stack.push((a, d + 1)),
                Expr::Binary(_, a, b) => stack.extend([(&**a, d + 1), (&**b, d + 1)]),
                Expr::Select(c, a, b) => {
                    stack.extend([(&**c, d + 1), (&**a, d + 1), (&**b, d + 1)]);
                }
                Expr::Call(_, args) => stack.extend(args.iter().map(|a| (a, d + 1))),
            }
        }
        max
    }

    /// A variable reference.
    pub fn var(name: &str) -> Expr {
        Expr::Var(name.to_string())
    }

    /// An `f64` literal.
    pub fn f64(v: f64) -> Expr {
        Expr::Const(Value::F64(v))
    }

    /// A binary node.
    pub fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
        Expr::Binary(op, Box::new(a), Box::new(b))
    }

    /// Every variable name the expression reads, sorted.
    pub fn vars(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        self.visit(&mut |e| {
            if let Expr::Var(v) = e {
                out.insert(v.clone());
            }
        });
        out
    }

    /// True when the expression holds a lazy operation: a `select`, `&&` or `||`, whose
    /// branch or right operand is evaluated only when the condition asks for it.
    pub fn has_lazy(&self) -> bool {
        let mut lazy = false;
        self.visit(&mut |e| {
            lazy |= matches!(e, Expr::Select(..))
                || matches!(e, Expr::Binary(op, ..) if op.is_logical());
        });
        lazy
    }

    /// Calls `f` on every name the expression always evaluates: names outside the
    /// branches of every `select` and the right operands of every `&&` and `||`.
    pub fn visit_strict_vars<'e>(&'e self, f: &mut dyn FnMut(&'e str)) {
        let mut stack = vec![self];
        while let Some(e) = stack.pop() {
            match e {
                Expr::Const(_) => {}
                Expr::Var(v) => f(v),
                Expr::Unary(_, a) | Expr::Cast(_, a) => stack.push(a),
                Expr::Binary(op, a, _) if op.is_logical() => stack.push(a),
                Expr::Binary(_, a, b) => stack.extend([&**a, &**b]),
                Expr::Select(c, _, _) => stack.push(c),
                Expr::Call(_, args) => stack.extend(args.iter()),
            }
        }
    }

    /// Calls `f` on every node, parents before children, left to right.
    pub fn visit(&self, f: &mut dyn FnMut(&Expr)) {
        f(self);
        match self {
            Expr::Const(_) | Expr::Var(_) => {}
            Expr::Unary(_, a) | Expr::Cast(_, a) => a.visit(f),
            Expr::Binary(_, a, b) => {
                a.visit(f);
                b.visit(f);
            }
            Expr::Select(c, a, b) => {
                c.visit(f);
                a.visit(f);
                b.visit(f);
            }
            Expr::Call(_, args) => args.iter().for_each(|a| a.visit(f)),
        }
    }

    /// Number of nodes in the tree.
    pub fn size(&self) -> usize {
        let mut n = 0;
        self.visit(&mut |_| n += 1);
        n
    }

    /// Renames variables (names not in the map stay).
    pub fn rename(&self, map: &BTreeMap<String, String>) -> Expr {
        self.replace_vars(&|v| map.get(v).map(|n| Expr::Var(n.clone())))
    }

    /// Replaces variables for which `f` returns an expression.
    pub fn replace_vars(&self, f: &dyn Fn(&str) -> Option<Expr>) -> Expr {
        match self {
            Expr::Const(_) => self.clone(),
            Expr::Var(v) => f(v).unwrap_or_else(|| self.clone()),
            Expr::Unary(op, a) => Expr::Unary(*op, Box::new(a.replace_vars(f))),
            Expr::Cast(t, a) => Expr::Cast(*t, Box::new(a.replace_vars(f))),
            Expr::Binary(op, a, b) => Expr::bin(*op, a.replace_vars(f), b.replace_vars(f)),
            Expr::Select(c, a, b) => Expr::Select(
                Box::new(c.replace_vars(f)),
                Box::new(a.replace_vars(f)),
                Box::new(b.replace_vars(f)),
            ),
            Expr::Call(func, args) => {
                Expr::Call(*func, args.iter().map(|a| a.replace_vars(f)).collect())
            }
        }
    }
}

/// One statement of a tasklet body: `name = value`. A name that is an output connector
/// assigns that output; any other name is a local, usable by later statements.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Stmt {
    /// Output connector or local being defined.
    pub target: String,
    /// The value.
    pub value: Expr,
}

impl Stmt {}

impl fmt::Display for Stmt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} = {}", self.target, self.value)
    }
}

const PREC_UNARY: u8 = 6;
const PREC_ATOM: u8 = 7;

fn prec_of(e: &Expr) -> u8 {
    match e {
        Expr::Const(v) if is_negative_literal(*v) => PREC_UNARY,
        Expr::Const(_) | Expr::Var(_) | Expr::Select(..) | Expr::Call(..) | Expr::Cast(..) => {
            PREC_ATOM
        }
        Expr::Unary(..) => PREC_UNARY,
        Expr::Binary(op, _, _) => op.precedence(),
    }
}

fn is_negative_literal(v: Value) -> bool {
    match v {
        Value::I32(x) => x < 0,
        Value::I64(x) => x < 0,
        Value::F32(x) => x.is_sign_negative() && !x.is_nan(),
        Value::F64(x) => x.is_sign_negative() && !x.is_nan(),
        Value::Bool(_) => false,
    }
}

fn write_expr(f: &mut fmt::Formatter<'_>, e: &Expr, min_prec: u8, strict: bool) -> fmt::Result {
    let p = prec_of(e);
    let paren = p < min_prec || (strict && p == min_prec);
    if paren {
        f.write_str("(")?;
    }
    match e {
        Expr::Const(Value::F64(v)) => fmt_float(f, *v)?,
        Expr::Const(v) => write!(f, "{v}")?,
        Expr::Var(v) => f.write_str(v)?,
        Expr::Unary(op, a) => {
            f.write_str(if *op == UnOp::Neg { "-" } else { "!" })?;
            // `-(1.0)` keeps Neg(literal) distinct from the literal -1.0.
            let force = matches!(**a, Expr::Const(_)) || matches!(**a, Expr::Unary(..));
            write_expr(f, a, if force { PREC_ATOM + 1 } else { PREC_UNARY }, false)?;
        }
        Expr::Binary(op, a, b) => {
            let q = op.precedence();
            write_expr(f, a, q, op.is_comparison())?;
            write!(f, " {} ", op.symbol())?;
            write_expr(f, b, q, true)?;
        }
        Expr::Select(c, a, b) => {
            f.write_str("select(")?;
            write_expr(f, c, 0, false)?;
            f.write_str(", ")?;
            write_expr(f, a, 0, false)?;
            f.write_str(", ")?;
            write_expr(f, b, 0, false)?;
            f.write_str(")")?;
        }
        Expr::Call(func, args) => {
            write!(f, "{}(", func.name())?;
            for (i, a) in args.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write_expr(f, a, 0, false)?;
            }
            f.write_str(")")?;
        }
        Expr::Cast(t, a) => {
            write!(f, "{t}(")?;
            write_expr(f, a, 0, false)?;
            f.write_str(")")?;
        }
    }
    if paren {
        f.write_str(")")?;
    }
    Ok(())
}

/// Prints expression text that [`Expr::parse`] reads back to the same tree.
impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_expr(f, self, 0, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(t: &str) -> Expr {
        Expr::parse(t).unwrap()
    }

    #[test]
    fn round_trip_text() {
        for t in [
            "a - (b - c)",
            "a - b - c",
            "-(1.0)",
            "-1.0 * x",
            "x - -2.5e-7",
            "select(a < b, a, 2.0f32)",
            "f32(x) + 3i32",
            "!(a && b) || c",
            "pow(x, 2.0) / sqrt(y + 1e300)",
            "-inf",
            "nan",
            "-nan",
            "x * -nan",
            "x // 2 % 3",
            "-(-x)",
            "(a < b) == c",
        ] {
            let e = p(t);
            assert_eq!(p(&e.to_string()), e, "{t} printed as {e}");
        }
    }

    #[test]
    fn typing_follows_c_promotion() {
        let env = |n: &str| match n {
            "a" => Some(DType::F32),
            "b" => Some(DType::F64),
            "i" => Some(DType::I32),
            "c" => Some(DType::Bool),
            _ => None,
        };
        assert_eq!(p("a * i").infer(&env), Ok(DType::F32));
        assert_eq!(p("a * b").infer(&env), Ok(DType::F64));
        assert_eq!(p("i + 1").infer(&env), Ok(DType::I64));
        assert_eq!(p("sqrt(i)").infer(&env), Ok(DType::F64));
        assert_eq!(p("abs(i)").infer(&env), Ok(DType::I32));
        assert_eq!(p("select(c, a, i)").infer(&env), Ok(DType::F32));
        assert_eq!(
            p("q + 1").infer(&env),
            Err(TypeError::UnknownName("q".into()))
        );
        assert!(matches!(
            p("c + 1").infer(&env),
            Err(TypeError::BadOperand { .. })
        ));
        assert!(matches!(
            p("a && c").infer(&env),
            Err(TypeError::BadOperand { .. })
        ));
        assert_eq!(
            Expr::Call(MathFn::Pow, vec![p("a")]).infer(&env),
            Err(TypeError::Arity {
                func: "pow".into(),
                expected: 2,
                found: 1
            })
        );
    }
}
