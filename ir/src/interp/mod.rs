//! The reference interpreter: executes any valid SDFG on host arrays. It defines the
//! semantics every transformation and backend is tested against. It is written to be
//! obviously right, not fast.
//!
//! # Semantics
//!
//! - **Arguments** ([`run`]): symbol values are the static values, then `Bindings::symbols`
//!   (converted to the declared type). Every non-transient container must be in
//!   `Bindings::arrays` (scalars as 0-dimensional arrays) with the declared dtype and the
//!   shape the symbolic shape evaluates to; transients are zero-filled at the start of
//!   each run (of each call, for nested SDFGs). Results are left in `Bindings::arrays`.
//! - **Symbolic expressions** evaluate over `i64` (overflow and division by zero are
//!   errors). Names resolve to map parameters, then symbols (loop variables, assigned
//!   symbols, integer or bool symbols; a float symbol is an error), then scalar containers
//!   (read as `i64`).
//! - **Control flow**: sequences in order; `Loop`: `var = init; while cond != 0 { body;
//!   var = update }`; `If`: `cond != 0`; `Assign`: every right side is evaluated, then all
//!   are assigned.
//! - **A dataflow graph** runs its nodes once each in [`crate::Dataflow::topological_order`]:
//!   - an access node with incoming edges from access nodes performs those copies: the
//!     memlet's `subset` of the source to its `other_subset` (or the same subset) of the
//!     destination, element by element in row-major order of the subsets (volumes must
//!     match; all reads before the writes), combined under the memlet's wcr if any. An
//!     empty subset on an array means the whole array;
//!   - a tasklet reads one element per input edge (index dimensions evaluated, ranges at
//!     their start, indirect dimensions read from their table as `i64`), converts it to
//!     the connector type, runs its statements in order (names: connectors and locals,
//!     then map parameters, then symbols, float symbols included), converts each output to
//!     its connector type and stores it through every out-edge of that connector, under
//!     the edge's wcr if any;
//!   - a map runs its body once per point of its iteration space, in lexicographic order
//!     (last parameter fastest); its own edges are summaries and are ignored;
//!   - a nested SDFG gets fresh inner arrays (shape from the inner descriptor with the
//!     mapped symbols), filled from the caller's memlet subsets (an output connector that
//!     is not an input is filled from its out-edge subset, unless that edge has a wcr:
//!     then it starts from the wcr's identity); inner symbols are the evaluated `symbol_mapping`, the
//!     inner static values (a float or bool symbol is mapped to a caller symbol of its
//!     type and takes its value as is). After the call each output connector's array is
//!     written back to the caller's subset (under the out-edge's wcr if any);
//!   - a `Reduce` folds its input subset (connector `in`) over `axes` (all when `None`),
//!     starting from `identity` or else from the first element, in the input's element
//!     type, and writes the result (row-major over the kept axes) to its output subset
//!     (connector `out`) under the out-edge's wcr if any.
//! - **Arithmetic** ([`value`]): C promotion ([`DType::promote`], at least `i32`); `f32`
//!   in `f32`, `f64` in `f64`; integer `+ - *` wrap on overflow (what C hardware does;
//!   C calls it undefined); integer `/` truncates, `//` floors, `%` is floored (the sign of
//!   the divisor; on floats `a - floor(a/b)*b`); integer division by zero is an error. Math
//!   functions compute in the promoted float type (`f64` for integers) except integer
//!   `abs`/`min`/`max`; float `min`/`max` are IEEE 754-2019 `minimumNumber` and
//!   `maximumNumber` (a NaN operand yields the other, `-0.0 < +0.0`); `cbrt` and the other
//!   functions are the C library's (what Rust's float methods call). Write-conflict
//!   resolutions combine in the element type. A NaN that a tasklet output, a
//!   write-conflict resolution or a reduction produces is stored as the canonical quiet
//!   NaN (positive, payload 0); copies move NaNs as they are.
//! - **Errors, never panics**: out-of-bounds indices (also through index tables), unbound
//!   symbols, division by zero, volume mismatches and bad arguments are [`InterpError`]s
//!   saying where: SDFG, state, map (with parameter values), node.

use std::collections::BTreeMap;

use ndarray::ArrayD;

use crate::data::DataDesc;
use crate::dtype::{DType, Value};
use crate::sdfg::Sdfg;

mod control;
mod dataflow;
pub mod eval;
mod frame;
mod random;
mod ranks;
pub mod value;

pub use ranks::{gather, run_ranks, scatter};

pub use random::random_bindings;

/// A host array of one of the element types (0-dimensional for scalars).
#[derive(Clone, Debug, PartialEq)]
pub enum HostArray {
    /// `bool` elements.
    Bool(ArrayD<bool>),
    /// `i32` elements.
    I32(ArrayD<i32>),
    /// `i64` elements.
    I64(ArrayD<i64>),
    /// `f32` elements.
    F32(ArrayD<f32>),
    /// `f64` elements.
    F64(ArrayD<f64>),
}

impl HostArray {
    /// The elements' bit patterns in row-major order (floats by their IEEE bits, so
    /// `-0.0` and `0.0` differ and NaNs compare), for bitwise comparisons of results.
    pub fn bits(&self) -> Vec<u64> {
        self.values()
            .into_iter()
            .map(|v| match v {
                Value::F64(x) => x.to_bits(),
                Value::F32(x) => x.to_bits() as u64,
                Value::I64(x) => x as u64,
                Value::I32(x) => x as u64,
                Value::Bool(x) => x as u64,
            })
            .collect()
    }

    /// Zero-filled (false-filled) array.
    pub fn zeros(dtype: DType, shape: &[usize]) -> HostArray {
        let s = ndarray::IxDyn(shape);
        match dtype {
            DType::Bool => HostArray::Bool(ArrayD::from_elem(s, false)),
            DType::I32 => HostArray::I32(ArrayD::zeros(s)),
            DType::I64 => HostArray::I64(ArrayD::zeros(s)),
            DType::F32 => HostArray::F32(ArrayD::zeros(s)),
            DType::F64 => HostArray::F64(ArrayD::zeros(s)),
        }
    }

    /// Sets every element to `v` (converted to the element type).
    pub fn fill(&mut self, v: Value) {
        match self {
            HostArray::Bool(a) => a.fill(v.as_bool()),
            HostArray::I32(a) => a.fill(if let Value::I32(x) = v.cast(DType::I32) {
                x
            } else {
                0
            }),
            HostArray::I64(a) => a.fill(v.as_i64()),
            HostArray::F32(a) => a.fill(if let Value::F32(x) = v.cast(DType::F32) {
                x
            } else {
                0.0
            }),
            HostArray::F64(a) => a.fill(v.as_f64()),
        }
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        match self {
            HostArray::Bool(_) => DType::Bool,
            HostArray::I32(_) => DType::I32,
            HostArray::I64(_) => DType::I64,
            HostArray::F32(_) => DType::F32,
            HostArray::F64(_) => DType::F64,
        }
    }

    /// Shape.
    pub fn shape(&self) -> &[usize] {
        match self {
            HostArray::Bool(a) => a.shape(),
            HostArray::I32(a) => a.shape(),
            HostArray::I64(a) => a.shape(),
            HostArray::F32(a) => a.shape(),
            HostArray::F64(a) => a.shape(),
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape().iter().product()
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The element at a flat row-major position (`None` when out of range).
    pub fn get_flat(&self, i: usize) -> Option<Value> {
        fn at<T: Copy>(a: &ArrayD<T>, i: usize) -> Option<T> {
            // Row-major position: the memory order only when it is row-major too (an
            // argument may be laid out column-major).
            a.as_slice()
                .and_then(|s| s.get(i).copied())
                .or_else(|| a.iter().nth(i).copied())
        }
        Some(match self {
            HostArray::Bool(a) => Value::Bool(at(a, i)?),
            HostArray::I32(a) => Value::I32(at(a, i)?),
            HostArray::I64(a) => Value::I64(at(a, i)?),
            HostArray::F32(a) => Value::F32(at(a, i)?),
            HostArray::F64(a) => Value::F64(at(a, i)?),
        })
    }

    /// The element at an index (`None` when out of range).
    pub fn get(&self, idx: &[usize]) -> Option<Value> {
        Some(match self {
            HostArray::Bool(a) => Value::Bool(*a.get(idx)?),
            HostArray::I32(a) => Value::I32(*a.get(idx)?),
            HostArray::I64(a) => Value::I64(*a.get(idx)?),
            HostArray::F32(a) => Value::F32(*a.get(idx)?),
            HostArray::F64(a) => Value::F64(*a.get(idx)?),
        })
    }

    /// Stores a value (converted to the element type) at an index; `false` when out of
    /// range.
    pub fn set(&mut self, idx: &[usize], v: Value) -> bool {
        let v = v.cast(self.dtype());
        match (self, v) {
            (HostArray::Bool(a), Value::Bool(x)) => a.get_mut(idx).map(|r| *r = x).is_some(),
            (HostArray::I32(a), Value::I32(x)) => a.get_mut(idx).map(|r| *r = x).is_some(),
            (HostArray::I64(a), Value::I64(x)) => a.get_mut(idx).map(|r| *r = x).is_some(),
            (HostArray::F32(a), Value::F32(x)) => a.get_mut(idx).map(|r| *r = x).is_some(),
            (HostArray::F64(a), Value::F64(x)) => a.get_mut(idx).map(|r| *r = x).is_some(),
            _ => false,
        }
    }

    /// Stores a value (converted to the element type) at a flat row-major position;
    /// `false` when out of range.
    pub fn set_flat(&mut self, i: usize, v: Value) -> bool {
        if i >= self.len() {
            return false;
        }
        let idx = frame::unravel(i, self.shape());
        self.set(&idx, v)
    }

    /// Every element in row-major order.
    pub fn values(&self) -> Vec<Value> {
        (0..self.len()).filter_map(|i| self.get_flat(i)).collect()
    }

    /// A 0-dimensional array holding one value.
    pub fn scalar(v: Value) -> HostArray {
        let mut a = HostArray::zeros(v.dtype(), &[]);
        a.set(&[], v);
        a
    }

    /// An array of the given type and shape from row-major values (converted to the
    /// type); `None` when the count does not match the shape.
    pub fn from_values(dtype: DType, shape: &[usize], values: &[Value]) -> Option<HostArray> {
        let mut a = HostArray::zeros(dtype, shape);
        if values.len() != a.len() {
            return None;
        }
        for (i, v) in values.iter().enumerate() {
            a.set_flat(i, *v);
        }
        Some(a)
    }

    /// An `f64` array from row-major values; `None` when the count does not match.
    pub fn from_f64(shape: &[usize], values: Vec<f64>) -> Option<HostArray> {
        ArrayD::from_shape_vec(ndarray::IxDyn(shape), values)
            .ok()
            .map(HostArray::F64)
    }

    /// The elements as `f64`, row-major.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        self.values().into_iter().map(Value::as_f64).collect()
    }
}

/// Arguments of a run: arrays and scalars by name, and symbol values.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Bindings {
    /// Non-transient containers (scalars as 0-dimensional arrays).
    pub arrays: BTreeMap<String, HostArray>,
    /// Values of symbols without a static value.
    pub symbols: BTreeMap<String, Value>,
}

/// Why a run failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum InterpError {
    /// A non-transient container has no array in the bindings.
    #[error("missing argument '{0}'")]
    MissingArgument(String),
    /// An argument has the wrong dtype or shape, or its shape cannot be evaluated.
    #[error("argument '{name}': {message}")]
    BadArgument {
        /// The container.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// A failure while running, with where it happened (`sdfg 'p' / state 's' / map 'm'
    /// at i=1 / tasklet 't'`).
    #[error("{location}: {message}")]
    Runtime {
        /// Outermost first, separated by ` / `.
        location: String,
        /// What went wrong.
        message: String,
    },
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

impl InterpError {
    /// The same error, located inside `ctx` (prepended to the location); other kinds
    /// become runtime errors located at `ctx`.
    pub fn within(self, ctx: &str) -> InterpError {
        match self {
            InterpError::Runtime { location, message } => InterpError::Runtime {
                location: if location.is_empty() {
                    ctx.to_string()
                } else {
                    format!("{ctx} / {location}")
                },
                message,
            },
            other => InterpError::Runtime {
                location: ctx.to_string(),
                message: other.to_string(),
            },
        }
    }
}

/// Evaluates a container's symbolic shape (empty for a scalar) with integer or bool
/// symbol values; an unbound or float symbol, an arithmetic error or a negative extent
/// is an error.
pub fn eval_shape(
    desc: &DataDesc,
    symbols: &BTreeMap<String, Value>,
) -> Result<Vec<usize>, InterpError> {
    let shape = desc
        .shape()
        .iter()
        .map(|e| {
            let v = frame::eval_sym_with(e, &|n| symbols.get(n).copied())
                .map_err(InterpError::Other)?;
            usize::try_from(v)
                .map_err(|_| InterpError::Other(format!("extent '{e}' evaluates to {v}")))
        })
        .collect::<Result<Vec<usize>, InterpError>>()?;
    let too_big = || {
        InterpError::Other(format!(
            "shape [{}] has more than {MAX_ELEMENTS} elements, the interpreter's limit",
            shape
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    };
    let n = shape
        .iter()
        .try_fold(1usize, |a, s| a.checked_mul(*s))
        .ok_or_else(too_big)?;
    if n > MAX_ELEMENTS {
        return Err(too_big());
    }
    // An empty array whose other extents multiply past what memory can address (`[2^63 -
    // 1, 0, 8]`) has no elements but no layout either: refused, as arrays are allocated.
    let nonzero = shape
        .iter()
        .filter(|s| **s != 0)
        .try_fold(1usize, |a, s| a.checked_mul(*s));
    if nonzero.is_none_or(|m| m > isize::MAX as usize / 8) {
        return Err(InterpError::Other(format!(
            "shape [{}] has no elements, but its other extents multiply past any array's size",
            shape
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(shape)
}

/// The most elements one array (or one memlet range) may have in the interpreter, which
/// is meant for tests and small grids: larger shapes are an error, not an allocation
/// failure.
pub const MAX_ELEMENTS: usize = 1 << 30;

/// Runs the program, reading and updating the arrays in `b` (see the module
/// documentation for the semantics). Arrays in `b` that the program does not declare are
/// left alone; on error the arguments are still in `b`, possibly partly updated.
pub fn run(sdfg: &Sdfg, b: &mut Bindings) -> Result<(), InterpError> {
    let mut symbols: BTreeMap<String, Value> = BTreeMap::new();
    for (k, v) in &b.symbols {
        let v = sdfg.symbols.get(k).map_or(*v, |s| v.cast(s.dtype));
        symbols.insert(k.clone(), v);
    }
    for (k, s) in &sdfg.symbols {
        if let Some(v) = s.value {
            if let Some(bound) = symbols.get(k)
                && *bound != v
            {
                return Err(InterpError::BadArgument {
                    name: k.clone(),
                    message: format!(
                        "symbol '{k}' is static (= {v}) and cannot be bound to {bound}"
                    ),
                });
            }
            symbols.insert(k.clone(), v);
        }
    }
    let mut work: BTreeMap<String, HostArray> = BTreeMap::new();
    for (name, _) in sdfg.non_transients() {
        if let Some(a) = b.arrays.remove(name) {
            work.insert(name.clone(), a);
        }
    }
    let r = control::run_sdfg(sdfg, symbols, &mut work);
    b.arrays.extend(work);
    r
}
