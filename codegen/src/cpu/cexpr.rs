//! C text for scalar values, symbolic expressions and tasklet expressions, with exactly
//! the interpreter's semantics: C promotion with at least `int32_t` arithmetic, wrapping
//! integer `+ - *` (through unsigned arithmetic, never signed overflow), Python's `//`
//! and `%` on integers and floats, saturating float-to-integer casts (Rust's `as`),
//! `fmin`/`fmax` for float `min`/`max`, `<math.h>` in the operand's float type.

use sdflow_ir::{BinOp, DType, Expr, MathFn, SymExpr, SymOp, UnOp, Value};

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

/// How names resolve in symbolic expressions: `s_<name>` for symbols and map parameters;
/// host scalar containers are read through `scalar(name)`.
pub struct SymNames<'a> {
    /// Scalar containers the control flow or subsets may read (name → C lvalue).
    pub scalar: &'a dyn Fn(&str) -> Option<String>,
    /// Names that are symbols or map parameters in scope.
    pub is_symbol: &'a dyn Fn(&str) -> bool,
}

/// C text of a symbolic (int64) expression.
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
        // Symbolic arithmetic is plain signed C: the interpreter rejects overflow in
        // symbolic expressions, and plain operators keep index expressions affine for
        // the C compiler's loop analysis (contiguous vector loads, not gathers).
        SymExpr::Neg(a) => format!("(-({}))", sym(a, names)),
        SymExpr::Not(a) => format!("((int64_t)!({}))", sym(a, names)),
        SymExpr::Bin(op, a, b) => {
            let (x, y) = (sym(a, names), sym(b, names));
            match op {
                SymOp::Add => format!("({x} + {y})"),
                SymOp::Sub => format!("({x} - {y})"),
                SymOp::Mul => format!("({x} * {y})"),
                SymOp::FloorDiv => format!("sdf_floordiv64({x}, {y})"),
                SymOp::Mod => format!("sdf_mod64({x}, {y})"),
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

/// The interpreter's arithmetic type: the promoted type, at least `i32`.
fn arith(a: DType, b: DType) -> DType {
    DType::promote(DType::promote(a, b), DType::I32)
}

/// C text and type of a tasklet expression; `var` gives the C name and type of a name.
pub fn expr(e: &Expr, var: &dyn Fn(&str) -> (String, DType)) -> (String, DType) {
    match e {
        Expr::Const(v) => (literal(*v), v.dtype()),
        Expr::Var(n) => var(n),
        Expr::Unary(UnOp::Not, a) => {
            let (x, _) = expr(a, var);
            (format!("(!({x}))"), DType::Bool)
        }
        Expr::Unary(UnOp::Neg, a) => {
            let (x, t) = expr(a, var);
            match t {
                DType::F64 | DType::F32 => (format!("(-({x}))"), t),
                DType::I64 => (format!("sdf_neg64({x})"), t),
                _ => (
                    format!("sdf_neg32({})", convert(&x, t, DType::I32)),
                    DType::I32,
                ),
            }
        }
        Expr::Binary(op, a, b) => {
            let ((x, ta), (y, tb)) = (expr(a, var), expr(b, var));
            if op.is_logical() {
                let c = if *op == BinOp::And { "&&" } else { "||" };
                return (
                    format!(
                        "({} {c} {})",
                        convert(&x, ta, DType::Bool),
                        convert(&y, tb, DType::Bool)
                    ),
                    DType::Bool,
                );
            }
            if op.is_comparison() {
                let t = match DType::promote(ta, tb) {
                    DType::Bool | DType::I32 | DType::I64 => DType::I64,
                    f => f,
                };
                let (x, y) = (convert(&x, ta, t), convert(&y, tb, t));
                return (format!("(({x}) {} ({y}))", op.symbol()), DType::Bool);
            }
            let t = arith(ta, tb);
            let (x, y) = (convert(&x, ta, t), convert(&y, tb, t));
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
                    format!("sdf_{f}{w}({x}, {y})")
                }
            };
            (text, t)
        }
        Expr::Select(c, a, b) => {
            let ((xc, tc), (x, ta), (y, tb)) = (expr(c, var), expr(a, var), expr(b, var));
            let t = DType::promote(ta, tb);
            (
                format!(
                    "({} ? {} : {})",
                    convert(&xc, tc, DType::Bool),
                    convert(&x, ta, t),
                    convert(&y, tb, t)
                ),
                t,
            )
        }
        Expr::Call(MathFn::WallNs, _) => ("sdf_wall_ns()".to_string(), DType::I64),
        Expr::Call(f, args) => {
            let parts: Vec<(String, DType)> = args.iter().map(|a| expr(a, var)).collect();
            let t = parts
                .iter()
                .fold(DType::Bool, |t, (_, ta)| DType::promote(t, *ta));
            if f.keeps_int() && !t.is_float() {
                let t = DType::promote(t, DType::I32);
                let w = if t == DType::I64 { "64" } else { "32" };
                let conv: Vec<String> = parts.iter().map(|(x, ta)| convert(x, *ta, t)).collect();
                let name = match f {
                    MathFn::Abs => "abs",
                    MathFn::Min => "min",
                    _ => "max",
                };
                return (format!("sdf_{name}{w}({})", conv.join(", ")), t);
            }
            let ft = if t == DType::F32 {
                DType::F32
            } else {
                DType::F64
            };
            let conv: Vec<String> = parts.iter().map(|(x, ta)| convert(x, *ta, ft)).collect();
            let base = match f {
                MathFn::Abs => "fabs",
                MathFn::Min => "fmin",
                MathFn::Max => "fmax",
                MathFn::Log => "log",
                other => other.name(),
            };
            let name = if ft == DType::F32 {
                format!("{base}f")
            } else {
                base.to_string()
            };
            (format!("{name}({})", conv.join(", ")), ft)
        }
        Expr::Cast(t, a) => {
            let (x, ta) = expr(a, var);
            (convert(&x, ta, *t), *t)
        }
    }
}

/// The helper functions generated code uses (wrapping and floored integer arithmetic,
/// saturating conversions, float modulo). Integer division by zero yields 0 and raises
/// the translation unit's error flag, which `run` returns as status 2.
pub const PRELUDE: &str = r#"#include <stdint.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Raised by integer division by zero; per thread, so concurrent calls of the same
   library never see each other's errors; `run` gathers it from its threads. */
static _Thread_local int sdf_error_flag = 0;
static inline void sdf_fail(void) { sdf_error_flag = 1; }
#define SDF_INT_OPS(W, T, UT, MIN)                                                        \
static inline T sdf_add##W(T a, T b) { return (T)((UT)a + (UT)b); }                      \
static inline T sdf_sub##W(T a, T b) { return (T)((UT)a - (UT)b); }                      \
static inline T sdf_mul##W(T a, T b) { return (T)((UT)a * (UT)b); }                      \
static inline T sdf_neg##W(T a) { return (T)((UT)0 - (UT)a); }                           \
static inline T sdf_div##W(T a, T b) {                                                   \
    if (b == 0) { sdf_fail(); return 0; }                                                \
    if (a == MIN && b == -1) return MIN;                                                 \
    return a / b; }                                                                      \
static inline T sdf_mod##W(T a, T b) {                                                   \
    if (b == 0) { sdf_fail(); return 0; }                                                \
    if (b == -1) return 0;                                                               \
    T r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? (T)(r + b) : r; }             \
static inline T sdf_floordiv##W(T a, T b) {                                              \
    if (b == 0) { sdf_fail(); return 0; }                                                \
    if (a == MIN && b == -1) return MIN;                                                 \
    T q = a / b; return ((a % b) != 0 && ((a < 0) != (b < 0))) ? (T)(q - 1) : q; }       \
static inline T sdf_abs##W(T a) { return a < 0 ? sdf_neg##W(a) : a; }                    \
static inline T sdf_min##W(T a, T b) { return a < b ? a : b; }                           \
static inline T sdf_max##W(T a, T b) { return a > b ? a : b; }
SDF_INT_OPS(32, int32_t, uint32_t, INT32_MIN)
SDF_INT_OPS(64, int64_t, uint64_t, INT64_MIN)
/* A clock in nanoseconds (C11 `timespec_get`): differences time a region. */
static inline int64_t sdf_wall_ns(void) {
    struct timespec ts;
    if (timespec_get(&ts, TIME_UTC) != TIME_UTC) return 0;
    return (int64_t)ts.tv_sec * 1000000000 + (int64_t)ts.tv_nsec; }
/* A value read from an index table, checked against the extent it indexes. */
static inline int64_t sdf_ind(int64_t v, int64_t n) {
    if (v < 0 || v >= n) { sdf_fail(); return 0; }
    return v; }
static inline int32_t sdf_f2i32(double x) {
    if (x != x) return 0;
    if (x <= -2147483648.0) return INT32_MIN;
    if (x >= 2147483647.0) return INT32_MAX;
    return (int32_t)x; }
static inline int64_t sdf_f2i64(double x) {
    if (x != x) return 0;
    if (x <= -9223372036854775808.0) return INT64_MIN;
    if (x >= 9223372036854775808.0) return INT64_MAX;
    return (int64_t)x; }
static inline double sdf_fmod_double(double a, double b) { return a - floor(a / b) * b; }
static inline float sdf_fmod_float(float a, float b) { return a - floorf(a / b) * b; }
"#;
