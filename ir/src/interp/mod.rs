//! The reference interpreter: executes any valid SDFG on host arrays. It defines the
//! semantics every transformation and backend is tested against.

use std::collections::BTreeMap;

use ndarray::ArrayD;

use crate::dtype::{DType, Value};
use crate::sdfg::Sdfg;

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
            a.as_slice_memory_order()
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
            _ => unreachable!("value was cast to the array's type"),
        }
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
    /// Placeholder until the interpreter lands.
    #[error("{0}")]
    Other(String),
}

/// Runs the program, reading and updating the arrays in `b`.
pub fn run(_sdfg: &Sdfg, _b: &mut Bindings) -> Result<(), InterpError> {
    Err(InterpError::Other("interpreter not yet implemented".into()))
}

/// Pseudo-random arguments (placeholder).
pub fn random_bindings(
    _sdfg: &Sdfg,
    _symbols: &BTreeMap<String, Value>,
    _seed: u64,
) -> Result<Bindings, InterpError> {
    Err(InterpError::Other("interpreter not yet implemented".into()))
}
