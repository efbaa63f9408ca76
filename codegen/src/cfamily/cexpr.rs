//! C text for scalar values, symbolic expressions and tasklet expressions, with exactly
//! the interpreter's semantics: C promotion with at least `int32_t` arithmetic, wrapping
//! integer `+ - *` (through unsigned arithmetic, never signed overflow), Python's `//`
//! and `%` on integers and floats, saturating float-to-integer casts (Rust's `as`),
//! IEEE `minimumNumber`/`maximumNumber` for float `min`/`max`, `<math.h>` in the
//! operand's float type, NaN results of outputs canonical ([`canon`]).

use sdflow_ir::typing::{self, Typing};
use sdflow_ir::{BinOp, DType, Expr, MathFn, SymExpr, SymOp, UnOp, Value, Wcr};

/// The C type of a dtype.
pub fn ctype(t: DType) -> &'static str {
    match t {
        DType::Bool => "bool",
        DType::I32 => "int32_t",
        DType::I64 => "int64_t",
        DType::F32 => "float",
        DType::F64 => "double",
    }
}

/// A C literal of exactly this value and type.
pub fn literal(v: Value) -> String {
    match v {
        Value::Bool(b) => (if b { "true" } else { "false" }).to_string(),
        Value::I32(x) if x == i32::MIN => "((int32_t)(-2147483647 - 1))".to_string(),
        Value::I32(x) => format!("((int32_t){x})"),
        Value::I64(x) if x == i64::MIN => "((int64_t)(-9223372036854775807LL - 1))".into(),
        Value::I64(x) => format!("((int64_t){x}LL)"),
        Value::F64(x) => float_literal(x, false),
        Value::F32(x) => float_literal(x as f64, true),
    }
}

fn float_literal(x: f64, single: bool) -> String {
    let (cast, suffix) = if single {
        ("(float)", "f")
    } else {
        ("(double)", "")
    };
    if x.is_nan() {
        let s = if x.is_sign_negative() { "-" } else { "" };
        return format!("({cast}({s}NAN))");
    }
    if x.is_infinite() {
        let s = if x.is_sign_negative() { "-" } else { "" };
        return format!("({cast}({s}INFINITY))");
    }
    // Rust's shortest round-trip text parses back to the same bits in C.
    let text = if single {
        format!("{:?}", x as f32)
    } else {
        format!("{x:?}")
    };
    let text = if text.contains(['.', 'e', 'E']) {
        text
    } else {
        format!("{text}.0")
    };
    format!("({text}{suffix})")
}

/// How symbolic arithmetic is checked.
#[derive(Clone, Copy)]
pub enum SymCheck<'a> {
    /// Plain C operators: for subscripts and map ranges that the node's in-bounds
    /// condition covers (they keep index expressions affine for the C compiler's loop
    /// analysis).
    Plain,
    /// Overflow and division by zero raise the error site that the function returns for
    /// the failing subexpression (`true`: a division by zero).
    Raise(&'a dyn Fn(&SymExpr, bool) -> usize),
    /// Overflow and division by zero set the caller's local `sdf_q` and yield 0 (for
    /// conditions: a condition that cannot be evaluated does not hold).
    Quiet,
}

/// How names resolve in symbolic expressions: `s_<name>` for symbols and map parameters;
/// host scalar containers are read through `scalar(name)`.
pub struct SymNames<'a> {
    /// Scalar containers the control flow or subsets may read (name → C lvalue).
    pub scalar: &'a dyn Fn(&str) -> Option<String>,
    /// Names that are symbols or map parameters in scope.
    pub is_symbol: &'a dyn Fn(&str) -> bool,
    /// How arithmetic is checked.
    pub check: SymCheck<'a>,
}

/// C text of a symbolic (int64) expression: 64-bit arithmetic with the interpreter's
/// overflow and division-by-zero errors (unless `names.check` is `Plain`).
pub fn sym(e: &SymExpr, names: &SymNames<'_>) -> String {
    match e {
        SymExpr::Int(v) if *v >= 0 => format!("{v}LL"),
        SymExpr::Int(v) => literal(Value::I64(*v)),
        SymExpr::Sym(n) => {
            if (names.is_symbol)(n) {
                format!("s_{n}")
            } else if let Some(lv) = (names.scalar)(n) {
                format!("((int64_t)({lv}))")
            } else {
                format!("s_{n}")
            }
        }
        SymExpr::Neg(a) => {
            let x = sym(a, names);
            match names.check {
                SymCheck::Plain => format!("(-({x}))"),
                SymCheck::Raise(site) => format!("sdf_sneg({x}, {})", site(e, false)),
                SymCheck::Quiet => format!("sdf_qneg({x}, &sdf_q)"),
            }
        }
        SymExpr::Not(a) => format!("((int64_t)!({}))", sym(a, names)),
        SymExpr::Bin(op, a, b) => {
            let (x, y) = (sym(a, names), sym(b, names));
            let checked = |f: &str| match names.check {
                SymCheck::Plain => None,
                SymCheck::Raise(site) => {
                    let div = if matches!(op, SymOp::FloorDiv | SymOp::Mod) {
                        format!(", {}", site(e, true))
                    } else {
                        String::new()
                    };
                    Some(format!("sdf_s{f}({x}, {y}, {}{div})", site(e, false)))
                }
                SymCheck::Quiet => Some(format!("sdf_q{f}({x}, {y}, &sdf_q)")),
            };
            match op {
                SymOp::Add => checked("add").unwrap_or_else(|| format!("({x} + {y})")),
                SymOp::Sub => checked("sub").unwrap_or_else(|| format!("({x} - {y})")),
                SymOp::Mul => checked("mul").unwrap_or_else(|| format!("({x} * {y})")),
                SymOp::FloorDiv => {
                    checked("floordiv").unwrap_or_else(|| format!("sdf_floordiv64({x}, {y})"))
                }
                SymOp::Mod => checked("mod").unwrap_or_else(|| format!("sdf_mod64({x}, {y})")),
                SymOp::Min => format!("sdf_min64({x}, {y})"),
                SymOp::Max => format!("sdf_max64({x}, {y})"),
                SymOp::Eq => format!("((int64_t)(({x}) == ({y})))"),
                SymOp::Ne => format!("((int64_t)(({x}) != ({y})))"),
                SymOp::Lt => format!("((int64_t)(({x}) < ({y})))"),
                SymOp::Le => format!("((int64_t)(({x}) <= ({y})))"),
                SymOp::Gt => format!("((int64_t)(({x}) > ({y})))"),
                SymOp::Ge => format!("((int64_t)(({x}) >= ({y})))"),
                SymOp::And => format!("((int64_t)((({x}) != 0) && (({y}) != 0)))"),
                SymOp::Or => format!("((int64_t)((({x}) != 0) || (({y}) != 0)))"),
            }
        }
    }
}

/// `x` of type `t` with a NaN made the canonical quiet NaN (floats; others as they are).
pub fn canon(x: &str, t: DType) -> String {
    match t {
        DType::F64 => format!("sdf_canon({x})"),
        DType::F32 => format!("sdf_canonf({x})"),
        _ => x.to_string(),
    }
}

/// [`canon`] by a compare and blend instead of a conditional, for loops that stay scalar
/// (the same bits).
pub fn canon_blend(x: &str, t: DType) -> String {
    match t {
        DType::F64 => format!("sdf_canon_blend({x})"),
        DType::F32 => format!("sdf_canonf_blend({x})"),
        _ => x.to_string(),
    }
}

/// C text converting `x` of type `from` to `to` as the interpreter's `Value::cast` does.
pub fn convert(x: &str, from: DType, to: DType) -> String {
    if from == to {
        return x.to_string();
    }
    match (from, to) {
        (_, DType::Bool) if from.is_float() => format!("(({x}) != 0.0)"),
        (_, DType::Bool) => format!("(({x}) != 0)"),
        (f, DType::I32) if f.is_float() => format!("sdf_f2i32((double)({x}))"),
        (f, DType::I64) if f.is_float() => format!("sdf_f2i64((double)({x}))"),
        (_, t) => format!("(({})({x}))", ctype(t)),
    }
}

/// C text and type of a tasklet expression; `var` gives the C name and type of a name.
/// Every operation is typed by [`sdflow_ir::typing`]: its operands are converted to the
/// rule's operand type, so the C text computes in exactly the interpreter's types. The
/// expression must type-check (validation): a refused operand type is printed as if it
/// were accepted.
pub fn expr(e: &Expr, var: &dyn Fn(&str) -> (String, DType)) -> (String, DType) {
    expr_sited(e, var, &mut |_| None)
}

/// [`expr`], with integer division and modulo raising at the error site `site` gives
/// for their operator, with the arguments of `sdf_raise_at` that pass the map point
/// (`None`: the error flag alone).
pub fn expr_sited(
    e: &Expr,
    var: &dyn Fn(&str) -> (String, DType),
    site: &mut dyn FnMut(BinOp) -> Option<(usize, String)>,
) -> (String, DType) {
    let or_same = |r: Result<Typing, _>, t: DType| {
        r.unwrap_or(Typing {
            operands: t,
            result: t,
        })
    };
    match e {
        Expr::Const(v) => (literal(*v), v.dtype()),
        Expr::Var(n) => var(n),
        Expr::Unary(op, a) => {
            let (x, t) = expr_sited(a, var, site);
            let ty = or_same(typing::unary(*op, t), t);
            let x = convert(&x, t, ty.operands);
            let text = match (op, ty.operands) {
                (UnOp::Not, _) => format!("(!({x}))"),
                (UnOp::Neg, DType::F64 | DType::F32) => format!("(-({x}))"),
                (UnOp::Neg, DType::I64) => format!("sdf_neg64({x})"),
                (UnOp::Neg, _) => format!("sdf_neg32({x})"),
            };
            (text, ty.result)
        }
        Expr::Binary(op, a, b) => {
            let ((x, ta), (y, tb)) = (expr_sited(a, var, site), expr_sited(b, var, site));
            let ty = or_same(typing::binary(*op, ta, tb), DType::promote(ta, tb));
            let t = ty.operands;
            let (x, y) = (convert(&x, ta, t), convert(&y, tb, t));
            if op.is_logical() {
                return (format!("({x} {} {y})", op.symbol()), ty.result);
            }
            if op.is_comparison() && t.is_float() {
                // Float comparisons are functions: GCC's front end folds
                // `(a && x < y) || x >= y` into `a || x >= y`, as if `x >= y` were
                // `!(x < y)`, which a NaN makes false.
                let name = match op {
                    BinOp::Lt => "lt",
                    BinOp::Le => "le",
                    BinOp::Gt => "gt",
                    BinOp::Ge => "ge",
                    BinOp::Eq => "eq",
                    _ => "ne",
                };
                return (format!("sdf_{name}_{}({x}, {y})", ctype(t)), ty.result);
            }
            if op.is_comparison() {
                return (format!("(({x}) {} ({y}))", op.symbol()), ty.result);
            }
            let text = match t {
                DType::F64 | DType::F32 => {
                    let fl = if t == DType::F32 { "floorf" } else { "floor" };
                    match op {
                        BinOp::FloorDiv => format!("{fl}(({x}) / ({y}))"),
                        BinOp::Mod => format!("sdf_fmod_{}({x}, {y})", ctype(t)),
                        _ => format!("(({x}) {} ({y}))", op.symbol()),
                    }
                }
                _ => {
                    let w = if t == DType::I64 { "64" } else { "32" };
                    let f = match op {
                        BinOp::Add => "add",
                        BinOp::Sub => "sub",
                        BinOp::Mul => "mul",
                        BinOp::Div => "div",
                        BinOp::FloorDiv => "floordiv",
                        _ => "mod",
                    };
                    let divides = matches!(op, BinOp::Div | BinOp::FloorDiv | BinOp::Mod);
                    match divides.then(|| site(*op)).flatten() {
                        Some((k, at)) => format!("sdf_{f}{w}s({x}, {y}, {k}, {at})"),
                        None => format!("sdf_{f}{w}({x}, {y})"),
                    }
                }
            };
            (text, ty.result)
        }
        Expr::Select(c, a, b) => {
            let ((xc, tc), (x, ta), (y, tb)) = (
                expr_sited(c, var, site),
                expr_sited(a, var, site),
                expr_sited(b, var, site),
            );
            let ty = or_same(typing::select(tc, ta, tb), DType::promote(ta, tb));
            (
                format!(
                    "({} ? {} : {})",
                    convert(&xc, tc, DType::Bool),
                    convert(&x, ta, ty.operands),
                    convert(&y, tb, ty.operands)
                ),
                ty.result,
            )
        }
        Expr::Call(MathFn::WallNs, _) => ("sdf_wall_ns()".to_string(), DType::I64),
        Expr::Call(f, args) => {
            let parts: Vec<(String, DType)> =
                args.iter().map(|a| expr_sited(a, var, site)).collect();
            let types: Vec<DType> = parts.iter().map(|p| p.1).collect();
            let ty = or_same(typing::call(*f, &types), DType::F64);
            let t = ty.operands;
            let conv: Vec<String> = parts.iter().map(|(x, ta)| convert(x, *ta, t)).collect();
            if t.is_int() {
                let w = if t == DType::I64 { "64" } else { "32" };
                let name = match f {
                    MathFn::Abs => "abs",
                    MathFn::Min => "min",
                    _ => "max",
                };
                return (format!("sdf_{name}{w}({})", conv.join(", ")), ty.result);
            }
            let base = match f {
                MathFn::Abs => "fabs",
                MathFn::Min => "sdf_fmin",
                MathFn::Max => "sdf_fmax",
                MathFn::Cbrt => "sdf_cbrt",
                MathFn::Fma => "sdf_fma",
                MathFn::Log => "log",
                other => other.name(),
            };
            let name = if t == DType::F32 {
                format!("{base}f")
            } else {
                base.to_string()
            };
            (format!("{name}({})", conv.join(", ")), ty.result)
        }
        Expr::Cast(t, a) => {
            let (x, ta) = expr_sited(a, var, site);
            (convert(&x, ta, *t), *t)
        }
    }
}

/// C text combining `old` and `new` (both of type `t`) under a write-conflict resolution,
/// as the interpreter's `combine`.
pub fn combine(w: Wcr, old: &str, new: &str, t: DType) -> String {
    combine_with(w, old, new, t, canon)
}

/// [`combine`] with `canon` canonicalizing a float result.
pub fn combine_with(
    w: Wcr,
    old: &str,
    new: &str,
    t: DType,
    canon: fn(&str, DType) -> String,
) -> String {
    if t == DType::Bool {
        return match w {
            Wcr::Sum | Wcr::Max => format!("(({old}) || ({new}))"),
            Wcr::Prod | Wcr::Min => format!("(({old}) && ({new}))"),
        };
    }
    let op = match w {
        Wcr::Sum => sdflow_ir::BinOp::Add,
        Wcr::Prod => sdflow_ir::BinOp::Mul,
        Wcr::Min | Wcr::Max => {
            let f = if w == Wcr::Min {
                sdflow_ir::MathFn::Min
            } else {
                sdflow_ir::MathFn::Max
            };
            let e = Expr::Call(f, vec![Expr::var("o"), Expr::var("n")]);
            let (x, xt) = expr(&e, &|v| {
                (
                    if v == "o" {
                        old.to_string()
                    } else {
                        new.to_string()
                    },
                    t,
                )
            });
            return canon(&convert(&x, xt, t), t);
        }
    };
    let e = Expr::bin(op, Expr::var("o"), Expr::var("n"));
    let (x, xt) = expr(&e, &|v| {
        (
            if v == "o" {
                old.to_string()
            } else {
                new.to_string()
            },
            t,
        )
    });
    canon(&convert(&x, xt, t), t)
}
