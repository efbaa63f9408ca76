//! Scalar element types and typed scalar values.

use std::fmt;

/// Element type of arrays, scalars, symbols and tasklet connectors.
///
/// Arithmetic follows C's usual conversions restricted to these types:
/// `bool < i32 < i64 < f32 < f64`; mixing two numeric types computes in the larger one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// Boolean (one byte in memory).
    Bool,
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer.
    I64,
    /// IEEE-754 single precision.
    F32,
    /// IEEE-754 double precision.
    F64,
}

impl DType {
    /// All types, in promotion order.
    pub const ALL: [DType; 5] = [DType::Bool, DType::I32, DType::I64, DType::F32, DType::F64];

    /// The spelling used in the JSON format and expression text (`f64`, `i32`, `bool`, …).
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    /// Parses the spelling returned by [`DType::name`].
    pub fn from_name(s: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == s)
    }

    /// True for `i32` and `i64`.
    pub fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::I64)
    }

    /// True for `f32` and `f64`.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64)
    }

    /// True for every type but `bool`.
    pub fn is_numeric(self) -> bool {
        self != DType::Bool
    }

    /// Size of one element in bytes.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::Bool => 1,
            DType::I32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    /// The type two operands of an arithmetic operation are converted to.
    pub fn promote(a: DType, b: DType) -> DType {
        a.max(b)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A typed scalar value: a literal in tasklet code, a symbol's static value, or one
/// element of an array in the interpreter.
///
/// Equality is structural (bitwise for floats: `nan == nan`, `0.0 != -0.0`), as befits
/// an IR literal; numeric comparison is the interpreter's business.
#[derive(Clone, Copy, Debug)]
pub enum Value {
    /// A boolean.
    Bool(bool),
    /// A 32-bit integer.
    I32(i32),
    /// A 64-bit integer.
    I64(i64),
    /// A single-precision float.
    F32(f32),
    /// A double-precision float.
    F64(f64),
}

impl Value {
    /// The value's type.
    pub fn dtype(self) -> DType {
        match self {
            Value::Bool(_) => DType::Bool,
            Value::I32(_) => DType::I32,
            Value::I64(_) => DType::I64,
            Value::F32(_) => DType::F32,
            Value::F64(_) => DType::F64,
        }
    }

    /// The zero of a type (`false` for bool).
    pub fn zero(dtype: DType) -> Value {
        Value::I64(0).cast(dtype)
    }

    /// Converts with C semantics (float→int truncates toward zero and saturates, as
    /// Rust's `as`; anything→bool is `!= 0`).
    pub fn cast(self, to: DType) -> Value {
        match to {
            DType::Bool => Value::Bool(match self {
                Value::Bool(b) => b,
                Value::I32(v) => v != 0,
                Value::I64(v) => v != 0,
                Value::F32(v) => v != 0.0,
                Value::F64(v) => v != 0.0,
            }),
            DType::I32 => Value::I32(match self {
                Value::Bool(b) => b as i32,
                Value::I32(v) => v,
                Value::I64(v) => v as i32,
                Value::F32(v) => v as i32,
                Value::F64(v) => v as i32,
            }),
            DType::I64 => Value::I64(match self {
                Value::Bool(b) => b as i64,
                Value::I32(v) => v as i64,
                Value::I64(v) => v,
                Value::F32(v) => v as i64,
                Value::F64(v) => v as i64,
            }),
            DType::F32 => Value::F32(match self {
                Value::Bool(b) => b as u8 as f32,
                Value::I32(v) => v as f32,
                Value::I64(v) => v as f32,
                Value::F32(v) => v,
                Value::F64(v) => v as f32,
            }),
            DType::F64 => Value::F64(match self {
                Value::Bool(b) => b as u8 as f64,
                Value::I32(v) => v as f64,
                Value::I64(v) => v as f64,
                Value::F32(v) => v as f64,
                Value::F64(v) => v,
            }),
        }
    }

    /// The value as an `i64` (after a C conversion).
    pub fn as_i64(self) -> i64 {
        match self.cast(DType::I64) {
            Value::I64(v) => v,
            _ => unreachable!("cast to i64 yields i64"),
        }
    }

    /// The value as an `f64` (after a C conversion).
    pub fn as_f64(self) -> f64 {
        match self.cast(DType::F64) {
            Value::F64(v) => v,
            _ => unreachable!("cast to f64 yields f64"),
        }
    }

    /// The value as a `bool` (`!= 0`).
    pub fn as_bool(self) -> bool {
        match self.cast(DType::Bool) {
            Value::Bool(v) => v,
            _ => unreachable!("cast to bool yields bool"),
        }
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        match (*self, *other) {
            (Value::Bool(a), Value::Bool(b)) => a == b,
            (Value::I32(a), Value::I32(b)) => a == b,
            (Value::I64(a), Value::I64(b)) => a == b,
            (Value::F32(a), Value::F32(b)) => a.to_bits() == b.to_bits(),
            (Value::F64(a), Value::F64(b)) => a.to_bits() == b.to_bits(),
            _ => false,
        }
    }
}

/// Bitwise equality is an equivalence (`nan == nan`).
impl Eq for Value {}

/// Consistent with the bitwise equality: the type and the bits.
impl std::hash::Hash for Value {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let bits = match *self {
            Value::Bool(b) => b as u64,
            Value::I32(x) => x as u32 as u64,
            Value::I64(x) => x as u64,
            Value::F32(x) => x.to_bits() as u64,
            Value::F64(x) => x.to_bits(),
        };
        self.dtype().hash(state);
        bits.hash(state);
    }
}

/// Writes a float so that parsing the text gives the same bits back.
pub(crate) fn fmt_float(f: &mut fmt::Formatter<'_>, v: f64) -> fmt::Result {
    write_float(
        f,
        v.is_nan(),
        v.is_infinite(),
        v.is_sign_negative(),
        format!("{v:?}"),
    )
}

/// Writes an `f32` so that parsing the text gives the same bits back.
pub(crate) fn fmt_float32(f: &mut fmt::Formatter<'_>, v: f32) -> fmt::Result {
    write_float(
        f,
        v.is_nan(),
        v.is_infinite(),
        v.is_sign_negative(),
        format!("{v:?}"),
    )
}

/// `nan`, `-nan` (sign bit set), `inf`, `-inf`, or Rust's shortest round-trip text with a
/// `.0` where it would otherwise read as an integer.
fn write_float(
    f: &mut fmt::Formatter<'_>,
    nan: bool,
    infinite: bool,
    negative: bool,
    text: String,
) -> fmt::Result {
    if nan {
        f.write_str(if negative { "-nan" } else { "nan" })
    } else if infinite {
        f.write_str(if negative { "-inf" } else { "inf" })
    } else {
        f.write_str(&text)?;
        if !text.contains(['.', 'e', 'E']) {
            f.write_str(".0")?;
        }
        Ok(())
    }
}

/// Displays as expression text: `1.5`, `2.0f32`, `3`, `3i32`, `true`.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Value::Bool(b) => write!(f, "{b}"),
            Value::I32(v) => write!(f, "{v}i32"),
            Value::I64(v) => write!(f, "{v}"),
            Value::F32(v) => {
                fmt_float32(f, v)?;
                f.write_str("f32")
            }
            Value::F64(v) => fmt_float(f, v),
        }
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::Bool(v)
    }
}

impl From<i32> for Value {
    fn from(v: i32) -> Value {
        Value::I32(v)
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::I64(v)
    }
}

impl From<f32> for Value {
    fn from(v: f32) -> Value {
        Value::F32(v)
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::F64(v)
    }
}
