//! Data descriptors: arrays and scalars, and symbols.

use crate::dtype::{DType, Value};
use crate::symexpr::SymExpr;

/// Where an array lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Storage {
    /// Host memory.
    #[default]
    Host,
    /// GPU global memory.
    Device,
    /// Private to one iteration of the outermost map whose body accesses it (a tile
    /// buffer, a line buffer): only transients, accessed only inside map bodies, never
    /// at state level. Compiled code gives each thread its own copy.
    Local,
}

impl Storage {
    /// Name in the JSON format.
    pub fn name(self) -> &'static str {
        match self {
            Storage::Host => "host",
            Storage::Device => "device",
            Storage::Local => "local",
        }
    }
}

/// An array: element type, symbolic shape and strides (in elements).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Array {
    /// Element type.
    pub dtype: DType,
    /// Extent of each dimension.
    pub shape: Vec<SymExpr>,
    /// Distance in elements between neighbours along each dimension.
    pub strides: Vec<SymExpr>,
    /// Where it lives.
    pub storage: Storage,
    /// True when the array is internal to the program (allocated by it, not an argument).
    pub transient: bool,
}

impl Array {
    /// A host array with row-major (C) strides.
    pub fn new(dtype: DType, shape: Vec<SymExpr>) -> Array {
        let strides = row_major_strides(&shape);
        Array {
            dtype,
            shape,
            strides,
            storage: Storage::Host,
            transient: false,
        }
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements, simplified.
    pub fn size(&self) -> SymExpr {
        self.shape.iter().fold(SymExpr::Int(1), |a, s| a.mul(s))
    }

    /// The number of elements its storage must hold, from extents and strides that
    /// `eval` gives values: 1 + Σ (n_d − 1) · |s_d| — what the strides reach, more than
    /// the product of the extents where they leave gaps (padded rows) — and at least that
    /// product; 0 when a dimension is empty. `None` when `eval` has no value for one of
    /// them or the count overflows.
    pub fn span_by(&self, mut eval: impl FnMut(&SymExpr) -> Option<i64>) -> Option<i64> {
        let mut product: i64 = 1;
        let mut extents = Vec::with_capacity(self.shape.len());
        for e in &self.shape {
            let n = eval(e)?.max(0);
            product = product.checked_mul(n)?;
            extents.push(n);
        }
        if product == 0 || self.strides.len() != extents.len() {
            return Some(product);
        }
        let mut span: i64 = 1;
        for (n, s) in extents.iter().zip(&self.strides) {
            span = span.checked_add((n - 1).checked_mul(eval(s)?.checked_abs()?)?)?;
        }
        Some(span.max(product))
    }
}

/// Row-major strides for a shape: the last dimension is contiguous.
pub fn row_major_strides(shape: &[SymExpr]) -> Vec<SymExpr> {
    let mut strides = vec![SymExpr::Int(1); shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1].mul(&shape[d + 1]);
    }
    strides
}

/// A data container.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DataDesc {
    /// A multi-dimensional array.
    Array(Array),
    /// A single value (a 0-dimensional container).
    Scalar {
        /// Its type.
        dtype: DType,
        /// True when internal to the program.
        transient: bool,
    },
}

/// Container descriptors by name: a program's table, or a view of it with containers a
/// transformation has added but not yet merged (passes that work on states in parallel).
pub trait Descriptors {
    /// The descriptor of container `name`, if it exists.
    fn desc(&self, name: &str) -> Option<&DataDesc>;
}

impl Descriptors for std::collections::BTreeMap<String, DataDesc> {
    fn desc(&self, name: &str) -> Option<&DataDesc> {
        self.get(name)
    }
}

impl DataDesc {
    /// Element type.
    pub fn dtype(&self) -> DType {
        match self {
            DataDesc::Array(a) => a.dtype,
            DataDesc::Scalar { dtype, .. } => *dtype,
        }
    }

    /// True when internal to the program.
    pub fn transient(&self) -> bool {
        match self {
            DataDesc::Array(a) => a.transient,
            DataDesc::Scalar { transient, .. } => *transient,
        }
    }

    /// Shape (empty for a scalar).
    pub fn shape(&self) -> &[SymExpr] {
        match self {
            DataDesc::Array(a) => &a.shape,
            DataDesc::Scalar { .. } => &[],
        }
    }

    /// Number of dimensions (0 for a scalar).
    pub fn rank(&self) -> usize {
        self.shape().len()
    }

    /// True for data private to a map body's iteration: transient scalars, and arrays
    /// with [`Storage::Local`].
    pub fn is_body_local(&self) -> bool {
        match self {
            DataDesc::Scalar { transient, .. } => *transient,
            DataDesc::Array(a) => a.transient && a.storage == Storage::Local,
        }
    }

    /// The array, if this is one.
    pub fn as_array(&self) -> Option<&Array> {
        match self {
            DataDesc::Array(a) => Some(a),
            DataDesc::Scalar { .. } => None,
        }
    }
}

/// A symbol: a named scalar parameter usable in shapes, ranges, conditions and tasklets.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Symbol {
    /// Its type. Integer symbols may appear in symbolic expressions; float symbols only in
    /// tasklet code (GT4Py passes scalar parameters this way).
    pub dtype: DType,
    /// A value known at build time: the symbol is then a constant that specialization
    /// can fold away, and callers need not pass it.
    pub value: Option<Value>,
    /// The value a runtime integer symbol takes when a caller neither gives it nor passes
    /// arrays whose extents and strides imply it (see [`crate::bind`]). Front ends set it
    /// for conventions of their own: GT4Py's field origins `__<field>_<Dim>_range_0`
    /// default to 0, as a field made without an origin starts there.
    pub default: Option<i64>,
}

impl Symbol {
    /// A runtime symbol of the given type.
    pub fn new(dtype: DType) -> Symbol {
        Symbol {
            dtype,
            value: None,
            default: None,
        }
    }
}
