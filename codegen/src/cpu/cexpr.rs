//! C text for scalar values, symbolic expressions and tasklet expressions, with exactly
//! the interpreter's semantics: C promotion with at least `int32_t` arithmetic, wrapping
//! integer `+ - *` (through unsigned arithmetic, never signed overflow), Python's `//`
//! and `%` on integers and floats, saturating float-to-integer casts (Rust's `as`),
//! IEEE `minimumNumber`/`maximumNumber` for float `min`/`max`, `<math.h>` in the
//! operand's float type, NaN results of outputs canonical ([`canon`]).

use sdflow_ir::typing::{self, Typing};
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
/* The first checked failure of the calling thread: its site, two values and the map
   parameters the checked loops recorded (`sdf_pv`); `run` keeps the program's first
   and `sdflow_error` hands it to the caller, who turns it into the message. */
#define SDF_MAXP 16
typedef struct { int64_t failed, site, v0, v1, p[SDF_MAXP]; } sdf_err_t;
static _Thread_local sdf_err_t sdf_err;
static _Thread_local int64_t sdf_pv[SDF_MAXP];
/* The calling thread's record, addressed once per function: thread-local storage in a
   shared library costs a call per access, and the compiler would recompute the address
   at every use; the empty asm makes the pointer a value it keeps. */
#define SDF_ERR_PTR() __extension__({ sdf_err_t* sdf_p_ = &sdf_err; __asm__("" : "+r"(sdf_p_)); sdf_p_; })
static inline int sdf_raise(int64_t site, int64_t v0, int64_t v1) {
    if (sdf_err.failed) return 0;
    sdf_err.failed = 1; sdf_err.site = site; sdf_err.v0 = v0; sdf_err.v1 = v1;
    memcpy(sdf_err.p, sdf_pv, sizeof sdf_pv); return 1; }
/* A failure in loops that record no map parameters as they run: the parameters of the
   enclosing maps (`n` of them, at most four, from position `first`) come with it. */
static inline void sdf_raise_at(int64_t site, int64_t v0, int64_t v1, int64_t first, int64_t n,
                                int64_t p0, int64_t p1, int64_t p2, int64_t p3) {
    if (!sdf_raise(site, v0, v1)) return;
    const int64_t p[4] = {p0, p1, p2, p3};
    for (int64_t k = 0; k < n && k < 4 && first + k < SDF_MAXP; k++) sdf_err.p[first + k] = p[k]; }
static inline int sdf_err_before(const sdf_err_t* a, const sdf_err_t* b) {
    if (a->site != b->site) return a->site < b->site;
    for (int k = 0; k < SDF_MAXP; k++) if (a->p[k] != b->p[k]) return a->p[k] < b->p[k];
    return 0; }
/* An index checked against its extent: a bad one raises and reads index 0. */
static inline int64_t sdf_ck(int64_t i, int64_t n, int64_t site) {
    if (i >= 0 && i < n) return i;
    sdf_raise(site, i, n); return 0; }
/* The indices s, s+st, ... below e against extent n, as the interpreter checks a range:
   a step that is not positive, else the first index outside [0, n), raises. */
static inline void sdf_pts(int64_t s, int64_t e, int64_t st, int64_t n, int64_t site, int64_t step_site) {
    if (st <= 0) { sdf_raise(step_site, st, 0); return; }
    if (s >= e) return;
    if (s < 0 || s >= n) { sdf_raise(site, s, n); return; }
    __int128 i = (__int128)s + (((__int128)n - s + st - 1) / st) * st;
    if (i < e) sdf_raise(site, (int64_t)i, n); }
/* The next value of a map parameter; past the largest integer, the end. */
static inline int64_t sdf_next(int64_t i, int64_t st, int64_t e) {
    return (i > INT64_MAX - st) ? e : i + st; }
/* Symbolic arithmetic with the interpreter's errors: `sdf_s*` raise a site, `sdf_q*`
   set the caller's flag (a condition that cannot be evaluated does not hold). */
#define SDF_SYM_OPS(P, FAIL, ARG, ...)                                                    \
static inline int64_t sdf_##P##add(int64_t a, int64_t b, ARG) {                          \
    int64_t r; if (__builtin_add_overflow(a, b, &r)) { FAIL; return 0; } return r; }     \
static inline int64_t sdf_##P##sub(int64_t a, int64_t b, ARG) {                          \
    int64_t r; if (__builtin_sub_overflow(a, b, &r)) { FAIL; return 0; } return r; }     \
static inline int64_t sdf_##P##mul(int64_t a, int64_t b, ARG) {                          \
    int64_t r; if (__builtin_mul_overflow(a, b, &r)) { FAIL; return 0; } return r; }     \
static inline int64_t sdf_##P##neg(int64_t a, ARG) {                                     \
    if (a == INT64_MIN) { FAIL; return 0; } return -a; }
SDF_SYM_OPS(s, sdf_raise(site, 0, 0), int64_t site)
SDF_SYM_OPS(q, *q = 1, int* q)
static inline int64_t sdf_sfloordiv(int64_t a, int64_t b, int64_t site, int64_t dsite) {
    if (b == 0) { sdf_raise(dsite, 0, 0); return 0; }
    if (a == INT64_MIN && b == -1) { sdf_raise(site, 0, 0); return 0; }
    int64_t q = a / b; return ((a % b) != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
static inline int64_t sdf_smod(int64_t a, int64_t b, int64_t site, int64_t dsite) {
    (void)site;
    if (b == 0) { sdf_raise(dsite, 0, 0); return 0; }
    if (b == -1) return 0;
    int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
static inline int64_t sdf_qfloordiv(int64_t a, int64_t b, int* q) {
    if (b == 0 || (a == INT64_MIN && b == -1)) { *q = 1; return 0; }
    int64_t d = a / b; return ((a % b) != 0 && ((a < 0) != (b < 0))) ? d - 1 : d; }
static inline int64_t sdf_qmod(int64_t a, int64_t b, int* q) {
    if (b == 0) { *q = 1; return 0; }
    if (b == -1) return 0;
    int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
/* An index-table value plus its offset; overflow raises. */
static inline int64_t sdf_tadd(int64_t v, int64_t o, int64_t site) {
    int64_t r; if (__builtin_add_overflow(v, o, &r)) { sdf_raise(site, v, o); return 0; } return r; }
#define SDF_AT_PARAMS int64_t first, int64_t n, int64_t p0, int64_t p1, int64_t p2, int64_t p3
#define SDF_RAISE_AT(site, v0, v1) sdf_raise_at(site, v0, v1, first, n, p0, p1, p2, p3)
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
static inline T sdf_div##W##s(T a, T b, int64_t site, SDF_AT_PARAMS) {                    \
    if (b == 0) { SDF_RAISE_AT(site, a, b); return 0; } return sdf_div##W(a, b); }       \
static inline T sdf_mod##W##s(T a, T b, int64_t site, SDF_AT_PARAMS) {                    \
    if (b == 0) { SDF_RAISE_AT(site, a, b); return 0; } return sdf_mod##W(a, b); }       \
static inline T sdf_floordiv##W##s(T a, T b, int64_t site, SDF_AT_PARAMS) {               \
    if (b == 0) { SDF_RAISE_AT(site, a, b); return 0; } return sdf_floordiv##W(a, b); }  \
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
/* The same, raising at an error site (the index, the extent). */
static inline int64_t sdf_inds(int64_t v, int64_t ext, int64_t site, SDF_AT_PARAMS) {
    if (v < 0 || v >= ext) { SDF_RAISE_AT(site, v, ext); return 0; }
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
/* Float min and max: a NaN operand yields the other, -0.0 is below +0.0 (IEEE 754-2019
   minimumNumber / maximumNumber, as the interpreter). Selects without branches, so that
   loops over them vectorize: where the operands compare equal (only +0.0 and -0.0 differ
   in bits) the result is their bitwise OR (min: -0.0 if either is) or AND (max: +0.0 if
   either is); a NaN `a` fails both comparisons and yields `b`. */
#define SDF_FMINMAX(NAME, T, U, CMP, BITOP)                                               \
static inline T NAME(T a, T b) {                                                          \
    U x, y; memcpy(&x, &a, sizeof x); memcpy(&y, &b, sizeof y); x = x BITOP y;            \
    T z; memcpy(&z, &x, sizeof z);                                                        \
    T r = a CMP b ? a : b; r = a == b ? z : r; return b != b ? a : r; }
SDF_FMINMAX(sdf_fmin, double, uint64_t, <, |)
SDF_FMINMAX(sdf_fmax, double, uint64_t, >, &)
SDF_FMINMAX(sdf_fminf, float, uint32_t, <, |)
SDF_FMINMAX(sdf_fmaxf, float, uint32_t, >, &)
/* fma whose result the compiler cannot see into: GCC turns -(fma(a, b, c)) into one
   fused negate-multiply-subtract, -(a*b) - c, which is +0.0 where the negated +0.0 sum
   is -0.0. An empty asm that may change the value stops that; the fma itself stays
   one instruction. */
#if defined(__GNUC__) && !defined(__CUDACC__) && !defined(__CUDACC_RTC__) && (defined(__x86_64__) || defined(__i386__))
#define SDF_OPAQUE(v) __asm__("" : "+x"(v))
#elif defined(__GNUC__) && !defined(__CUDACC__) && !defined(__CUDACC_RTC__) && defined(__aarch64__)
#define SDF_OPAQUE(v) __asm__("" : "+w"(v))
#elif defined(__GNUC__) && !defined(__CUDACC__) && !defined(__CUDACC_RTC__)
#define SDF_OPAQUE(v) __asm__("" : "+m"(v))
#else
#define SDF_OPAQUE(v) ((void)0)
#endif
static inline double sdf_fma(double a, double b, double c) {
    double r = fma(a, b, c); SDF_OPAQUE(r); return r; }
static inline float sdf_fmaf(float a, float b, float c) {
    float r = fmaf(a, b, c); SDF_OPAQUE(r); return r; }
/* Float comparisons, as functions: GCC 12's front end folds `(a && x < y) || x >= y`
   into `a || x >= y`, as if `x >= y` were `!(x < y)`, which a NaN makes false. Inlined,
   they are the plain comparisons. */
#define SDF_FCMP(T)                                                                       \
static inline bool sdf_lt_##T(T a, T b) { return a < b; }                                \
static inline bool sdf_le_##T(T a, T b) { return a <= b; }                               \
static inline bool sdf_gt_##T(T a, T b) { return a > b; }                                \
static inline bool sdf_ge_##T(T a, T b) { return a >= b; }                               \
static inline bool sdf_eq_##T(T a, T b) { return a == b; }                               \
static inline bool sdf_ne_##T(T a, T b) { return a != b; }
SDF_FCMP(double)
SDF_FCMP(float)
/* The cube root, by exactly the interpreter's operations (`interp::value::cbrt`). */
static inline double sdf_cbrt(double x) {
    if (x == 0.0 || !isfinite(x)) return x;
    double a = fabs(x), scale = 1.0;
    if (a < 2.2250738585072014e-308) { a *= 18014398509481984.0; scale = 1.0 / 262144.0; }
    uint64_t b; memcpy(&b, &a, sizeof b); b = b / 3 + 0x2AA0000000000000ULL;
    double t; memcpy(&t, &b, sizeof t);
    for (int k = 0; k < 6; k++) t += (a / (t * t) - t) / 3.0;
    double r = t * scale;
    return x < 0.0 ? -r : r; }
static inline float sdf_cbrtf(float x) { return (float)sdf_cbrt((double)x); }
/* A NaN made the canonical quiet NaN: what outputs, resolutions and reductions store. */
static inline double sdf_canon(double x) { return x != x ? (double)NAN : x; }
static inline float sdf_canonf(float x) { return x != x ? (float)NAN : x; }
/* The same in a loop that stays scalar: GCC compiles the conditional to a branch per
   value there, a compare and a blend cost two instructions and no branch. */
#if defined(__AVX__) && defined(__GNUC__) && defined(__x86_64__)
static inline double sdf_canon_blend(double x) {
    double m, r; const double n = (double)NAN;
    __asm__("vcmpunordsd %2, %2, %1\n\tvblendvpd %1, %3, %2, %0" : "=x"(r), "=&x"(m) : "x"(x), "x"(n));
    return r; }
static inline float sdf_canonf_blend(float x) {
    float m, r; const float n = (float)NAN;
    __asm__("vcmpunordss %2, %2, %1\n\tvblendvps %1, %3, %2, %0" : "=x"(r), "=&x"(m) : "x"(x), "x"(n));
    return r; }
#else
static inline double sdf_canon_blend(double x) { return sdf_canon(x); }
static inline float sdf_canonf_blend(float x) { return sdf_canonf(x); }
#endif
static inline float sdf_fmod_float(float a, float b) { return a - floorf(a / b) * b; }
"#;
