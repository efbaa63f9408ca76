//! Scalar arithmetic on [`Value`]s: the operators, math functions and write-conflict
//! resolutions of tasklet code, with C's usual conversions ([`DType::promote`]).
//!
//! Errors are plain messages; the caller adds where they happened.

use crate::dtype::{DType, Value};
use crate::expr::{BinOp, MathFn, UnOp};
use crate::memlet::Wcr;
use crate::typing;

fn i32_of(v: Value) -> i32 {
    match v.cast(DType::I32) {
        Value::I32(x) => x,
        _ => 0,
    }
}

fn f32_of(v: Value) -> f32 {
    match v.cast(DType::F32) {
        Value::F32(x) => x,
        _ => 0.0,
    }
}

/// A refused operand type as the interpreter's message.
pub(super) fn refused(r: typing::Refused) -> String {
    format!("'{}' cannot take {} operands", r.op, r.found)
}

/// Python-style floor division and modulo on a signed integer type, wrapping on overflow;
/// `None` on division by zero.
macro_rules! int_ops {
    ($name:ident, $t:ty) => {
        fn $name(op: BinOp, a: $t, b: $t) -> Result<$t, String> {
            let div0 = || {
                Err(format!(
                    "integer division by zero ({a} {} {b})",
                    op.symbol()
                ))
            };
            Ok(match op {
                BinOp::Add => a.wrapping_add(b),
                BinOp::Sub => a.wrapping_sub(b),
                BinOp::Mul => a.wrapping_mul(b),
                BinOp::Div => {
                    if b == 0 {
                        return div0();
                    }
                    a.wrapping_div(b)
                }
                BinOp::FloorDiv => {
                    if b == 0 {
                        return div0();
                    }
                    let q = a.wrapping_div(b);
                    if a.wrapping_rem(b) != 0 && ((a < 0) != (b < 0)) {
                        q.wrapping_sub(1)
                    } else {
                        q
                    }
                }
                BinOp::Mod => {
                    if b == 0 {
                        return div0();
                    }
                    let r = a.wrapping_rem(b);
                    if r != 0 && ((r < 0) != (b < 0)) {
                        r.wrapping_add(b)
                    } else {
                        r
                    }
                }
                _ => return Err(format!("'{}' is not arithmetic", op.symbol())),
            })
        }
    };
}

int_ops!(int32_op, i32);
int_ops!(int64_op, i64);

macro_rules! float_op {
    ($name:ident, $t:ty) => {
        fn $name(op: BinOp, a: $t, b: $t) -> Result<$t, String> {
            Ok(match op {
                BinOp::Add => a + b,
                BinOp::Sub => a - b,
                BinOp::Mul => a * b,
                BinOp::Div => a / b,
                BinOp::FloorDiv => (a / b).floor(),
                BinOp::Mod => a - (a / b).floor() * b,
                _ => return Err(format!("'{}' is not arithmetic", op.symbol())),
            })
        }
    };
}

float_op!(float32_op, f32);
float_op!(float64_op, f64);

/// Applies a binary operator, typed by [`typing::binary`]: arithmetic in the operand
/// type, wrapping on integer overflow, an error on integer division or modulo by zero,
/// `/` truncating on integers, `//` and `%` floored; comparisons in the operand type,
/// yielding `bool`; `&&` and `||` on `bool`s.
pub fn binary(op: BinOp, a: Value, b: Value) -> Result<Value, String> {
    let ty = typing::binary(op, a.dtype(), b.dtype()).map_err(refused)?;
    let (a, b) = (a.cast(ty.operands), b.cast(ty.operands));
    if op.is_logical() {
        let (x, y) = (a.as_bool(), b.as_bool());
        return Ok(Value::Bool(if op == BinOp::And { x && y } else { x || y }));
    }
    if op.is_comparison() {
        use std::cmp::Ordering;
        let ord = match ty.operands {
            DType::F32 => f32_of(a).partial_cmp(&f32_of(b)),
            DType::F64 => a.as_f64().partial_cmp(&b.as_f64()),
            _ => Some(a.as_i64().cmp(&b.as_i64())),
        };
        let r = match (op, ord) {
            (BinOp::Ne, None) => true,
            (_, None) => false,
            (BinOp::Eq, Some(o)) => o == Ordering::Equal,
            (BinOp::Ne, Some(o)) => o != Ordering::Equal,
            (BinOp::Lt, Some(o)) => o == Ordering::Less,
            (BinOp::Le, Some(o)) => o != Ordering::Greater,
            (BinOp::Gt, Some(o)) => o == Ordering::Greater,
            (_, Some(o)) => o != Ordering::Less,
        };
        return Ok(Value::Bool(r));
    }
    Ok(match ty.operands {
        DType::F64 => Value::F64(float64_op(op, a.as_f64(), b.as_f64())?),
        DType::F32 => Value::F32(float32_op(op, f32_of(a), f32_of(b))?),
        DType::I64 => Value::I64(int64_op(op, a.as_i64(), b.as_i64())?),
        _ => Value::I32(int32_op(op, i32_of(a), i32_of(b))?),
    })
}

/// Applies a unary operator, typed by [`typing::unary`]: `-` in the operand type
/// (wrapping on integers), `!` on a `bool`.
pub fn unary(op: UnOp, a: Value) -> Result<Value, String> {
    let ty = typing::unary(op, a.dtype()).map_err(refused)?;
    Ok(match (op, a.cast(ty.operands)) {
        (UnOp::Not, a) => Value::Bool(!a.as_bool()),
        (UnOp::Neg, Value::F64(x)) => Value::F64(-x),
        (UnOp::Neg, Value::F32(x)) => Value::F32(-x),
        (UnOp::Neg, Value::I64(x)) => Value::I64(x.wrapping_neg()),
        (UnOp::Neg, other) => Value::I32(i32_of(other).wrapping_neg()),
    })
}

/// `select(c, a, b)`: `a` or `b` converted to their common type ([`typing::select`]).
pub fn select(c: Value, a: Value, b: Value) -> Result<Value, String> {
    let ty = typing::select(c.dtype(), a.dtype(), b.dtype()).map_err(refused)?;
    Ok(if c.as_bool() { a } else { b }.cast(ty.operands))
}

/// `min` and `max` on floats, one definition for every backend: a NaN operand yields
/// the other operand, `-0.0` is below `+0.0` (IEEE 754-2019 `minimumNumber` and
/// `maximumNumber`; when both are NaN, the second, which the result's canonicalization
/// then makes the canonical NaN).
trait MinMax: Copy + PartialOrd {
    fn nan(self) -> bool;
    fn negative(self) -> bool;
    /// sdflow's cube root ([`cbrt`]).
    fn cbrt_c(self) -> Self;
}

/// The cube root every backend computes, by the same operations (the C prelude's
/// `sdf_cbrt` spells them out): ±0, ±inf and NaN as they are; else an initial guess from
/// the exponent bits and six Newton steps `t += (a / t² - t) / 3` on `|x|` (subnormals
/// scaled by 2⁵⁴ first), at most 1 ulp from the exact root. Neither Rust's `cbrt`
/// (correctly rounded) nor the C library's (glibc: within 1 ulp) is used: they differ
/// from each other on many inputs. `f32` computes in `f64` and rounds once.
pub fn cbrt(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let mut a = x.abs();
    let mut scale = 1.0;
    if a < f64::MIN_POSITIVE {
        a *= 18_014_398_509_481_984.0; // 2^54
        scale = 1.0 / 262_144.0; // 2^-18
    }
    let mut t = f64::from_bits(a.to_bits() / 3 + 0x2AA0_0000_0000_0000);
    for _ in 0..6 {
        t += (a / (t * t) - t) / 3.0;
    }
    let r = t * scale;
    if x < 0.0 { -r } else { r }
}

impl MinMax for f64 {
    fn nan(self) -> bool {
        self.is_nan()
    }
    fn negative(self) -> bool {
        self.is_sign_negative()
    }
    fn cbrt_c(self) -> f64 {
        cbrt(self)
    }
}

impl MinMax for f32 {
    fn nan(self) -> bool {
        self.is_nan()
    }
    fn negative(self) -> bool {
        self.is_sign_negative()
    }
    fn cbrt_c(self) -> f32 {
        cbrt(self as f64) as f32
    }
}

fn min_num<T: MinMax>(x: T, y: T) -> T {
    if x.nan() {
        y
    } else if y.nan() || x < y {
        x
    } else if y < x || !x.negative() {
        y
    } else {
        x
    }
}

fn max_num<T: MinMax>(x: T, y: T) -> T {
    if x.nan() {
        y
    } else if y.nan() || x > y {
        x
    } else if y > x || x.negative() {
        y
    } else {
        x
    }
}

/// A NaN made the canonical quiet NaN (positive, payload 0), any other value as is:
/// what tasklet outputs, write-conflict resolutions and reductions store, so that the
/// sign and payload of a NaN never depend on how a backend ordered the operations.
pub fn canonical(v: Value) -> Value {
    match v {
        Value::F64(x) if x.is_nan() => Value::F64(f64::NAN),
        Value::F32(x) if x.is_nan() => Value::F32(f32::NAN),
        other => other,
    }
}

/// The math functions on one float type (the same method names exist on `f32` and `f64`).
macro_rules! math_table {
    ($f:expr, $x:expr, $y:expr) => {{
        let (x, y) = ($x, $y);
        match $f {
            MathFn::Abs => x.abs(),
            MathFn::Sqrt => x.sqrt(),
            MathFn::Cbrt => x.cbrt_c(),
            MathFn::Exp => x.exp(),
            MathFn::Log => x.ln(),
            MathFn::Log10 => x.log10(),
            MathFn::Sin => x.sin(),
            MathFn::Cos => x.cos(),
            MathFn::Tan => x.tan(),
            MathFn::Asin => x.asin(),
            MathFn::Acos => x.acos(),
            MathFn::Atan => x.atan(),
            MathFn::Sinh => x.sinh(),
            MathFn::Cosh => x.cosh(),
            MathFn::Tanh => x.tanh(),
            MathFn::Floor => x.floor(),
            MathFn::Ceil => x.ceil(),
            MathFn::Trunc => x.trunc(),
            MathFn::Round => x.round(),
            MathFn::Pow => x.powf(y),
            MathFn::Atan2 => x.atan2(y),
            MathFn::Min => min_num(x, y),
            MathFn::Max => max_num(x, y),
            // `math` answers these before reaching a float table.
            MathFn::WallNs | MathFn::Fma => x,
        }
    }};
}

fn math_f64(f: MathFn, x: f64, y: f64) -> f64 {
    math_table!(f, x, y)
}

fn math_f32(f: MathFn, x: f32, y: f32) -> f32 {
    math_table!(f, x, y)
}

/// Calls a math function, typed by [`typing::call`]: `abs`, `min` and `max` on
/// integers stay integer (`abs` wrapping); everything else is computed in `f32` or `f64`
/// with Rust's `f32`/`f64` methods (the C library's functions); float `min`/`max` are
/// `minimumNumber`/`maximumNumber` (see `min_num`).
pub fn math(f: MathFn, args: &[Value]) -> Result<Value, String> {
    if args.len() != f.arity() {
        return Err(format!(
            "'{}' takes {} argument(s), got {}",
            f.name(),
            f.arity(),
            args.len()
        ));
    }
    if f == MathFn::WallNs {
        return Ok(Value::I64(wall_ns()));
    }
    let types: Vec<DType> = args.iter().map(|a| a.dtype()).collect();
    let t = typing::call(f, &types).map_err(refused)?.operands;
    let x = args[0].cast(t);
    let y = args.get(1).map_or(Value::zero(t), |y| y.cast(t));
    if f == MathFn::Fma {
        let z = args[2].cast(t);
        return Ok(match t {
            DType::F32 => Value::F32(f32_of(x).mul_add(f32_of(y), f32_of(z))),
            _ => Value::F64(x.as_f64().mul_add(y.as_f64(), z.as_f64())),
        });
    }
    Ok(match t {
        DType::I32 | DType::I64 => {
            let (a, b) = (x.as_i64(), y.as_i64());
            let r = match f {
                MathFn::Abs => match t {
                    DType::I64 => a.wrapping_abs(),
                    _ => i32_of(x).wrapping_abs() as i64,
                },
                MathFn::Min => a.min(b),
                _ => a.max(b),
            };
            Value::I64(r).cast(t)
        }
        DType::F32 => Value::F32(math_f32(f, f32_of(x), f32_of(y))),
        _ => Value::F64(math_f64(f, x.as_f64(), y.as_f64())),
    })
}

/// Nanoseconds on a monotonic clock since the first call in this process.
fn wall_ns() -> i64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let t0 = *EPOCH.get_or_init(std::time::Instant::now);
    i64::try_from(t0.elapsed().as_nanos()).unwrap_or(i64::MAX)
}

/// Combines the value already stored (`old`, of the element type) with a new one under a
/// write-conflict resolution, in the element type. On `bool` elements `sum`/`max` are
/// `||` and `prod`/`min` are `&&`.
pub fn combine(wcr: Wcr, old: Value, new: Value) -> Result<Value, String> {
    let t = old.dtype();
    let new = new.cast(t);
    if t == DType::Bool {
        let (a, b) = (old.as_bool(), new.as_bool());
        return Ok(Value::Bool(match wcr {
            Wcr::Sum | Wcr::Max => a || b,
            Wcr::Prod | Wcr::Min => a && b,
        }));
    }
    let r = match wcr {
        Wcr::Sum => binary(BinOp::Add, old, new)?,
        Wcr::Prod => binary(BinOp::Mul, old, new)?,
        Wcr::Min => math(MathFn::Min, &[old, new])?,
        Wcr::Max => math(MathFn::Max, &[old, new])?,
    };
    Ok(canonical(r.cast(t)))
}

/// The identity of a write-conflict resolution in a type: `0` for sum, `1` for product,
/// the largest value for min and the smallest for max (`±inf` for floats; for `bool`, sum
/// and max are `||`, product and min are `&&`).
pub fn wcr_identity(op: Wcr, dtype: DType) -> Value {
    match (op, dtype) {
        (Wcr::Sum, t) => Value::zero(t),
        (Wcr::Prod, t) => Value::I64(1).cast(t),
        (Wcr::Min, DType::Bool) => Value::Bool(true),
        (Wcr::Max, DType::Bool) => Value::Bool(false),
        (Wcr::Min, DType::I32) => Value::I32(i32::MAX),
        (Wcr::Max, DType::I32) => Value::I32(i32::MIN),
        (Wcr::Min, DType::I64) => Value::I64(i64::MAX),
        (Wcr::Max, DType::I64) => Value::I64(i64::MIN),
        (Wcr::Min, t) => Value::F64(f64::INFINITY).cast(t),
        (Wcr::Max, t) => Value::F64(f64::NEG_INFINITY).cast(t),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_and_python_integer_semantics() {
        let i = |x| Value::I64(x);
        assert_eq!(binary(BinOp::Div, i(-7), i(2)), Ok(i(-3)));
        assert_eq!(binary(BinOp::FloorDiv, i(-7), i(2)), Ok(i(-4)));
        assert_eq!(binary(BinOp::Mod, i(-7), i(2)), Ok(i(1)));
        assert_eq!(binary(BinOp::Mod, i(7), i(-2)), Ok(i(-1)));
        assert!(binary(BinOp::Mod, i(7), i(0)).is_err());
        assert_eq!(
            binary(BinOp::Add, Value::I32(i32::MAX), Value::I32(1)),
            Ok(Value::I32(i32::MIN))
        );
        assert_eq!(
            binary(BinOp::Mod, Value::F64(-1.0), Value::F64(3.0)),
            Ok(Value::F64(2.0))
        );
        assert_eq!(
            binary(BinOp::Mul, Value::F32(1.5), Value::I32(2)),
            Ok(Value::F32(3.0))
        );
        assert_eq!(math(MathFn::Sqrt, &[Value::I32(4)]), Ok(Value::F64(2.0)));
        assert_eq!(math(MathFn::Abs, &[Value::I32(-4)]), Ok(Value::I32(4)));
        assert_eq!(
            math(MathFn::Min, &[Value::F64(f64::NAN), Value::F64(1.0)]),
            Ok(Value::F64(1.0))
        );
        assert_eq!(
            binary(BinOp::Lt, Value::F64(f64::NAN), Value::F64(1.0)),
            Ok(Value::Bool(false))
        );
    }
}
