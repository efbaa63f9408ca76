//! The calling ABI every backend shares: which arrays, scalars and symbols a compiled
//! program takes, in order. The CPU's `sdflow_run(state, args, ints, floats)` and the CUDA
//! host layer both take their arguments in this order, so binding (`program.rs`) is one
//! piece of code for all backends.

use sdflow_ir::{DType, Sdfg, SymExpr};

/// One array or scalar argument of the generated `run`, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct ArgSpec {
    /// Container name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Symbolic shape (empty for a scalar).
    pub shape: Vec<SymExpr>,
    /// Symbolic strides, in elements.
    pub strides: Vec<SymExpr>,
}

/// The calling convention of a generated program: `run(state, args, ints, floats)` on the
/// CPU, the same order on the GPU.
#[derive(Clone, Debug, PartialEq)]
pub struct Signature {
    /// Array and scalar arguments (pointers in `args`), in order.
    pub arrays: Vec<ArgSpec>,
    /// Integer symbols passed in `ints`, in order (also passed to `init`).
    pub ints: Vec<String>,
    /// Float symbols passed in `floats`, in order.
    pub floats: Vec<String>,
    /// The integer symbols that have a default ([`sdflow_ir::Symbol::default`]), with it.
    pub defaults: Vec<(String, i64)>,
}

impl Signature {
    /// The calling convention of `sdfg`: non-transient containers in argument order,
    /// then runtime integer and float symbols in name order (loop variables and assigned
    /// symbols excluded).
    pub fn of(sdfg: &Sdfg) -> Signature {
        let args = sdfg.arguments();
        let arrays = args
            .iter()
            .filter_map(|n| {
                let d = sdfg.arrays.get(n)?;
                Some(ArgSpec {
                    name: n.clone(),
                    dtype: d.dtype(),
                    shape: d.shape().to_vec(),
                    strides: d.as_array().map(|a| a.strides.clone()).unwrap_or_default(),
                })
            })
            .collect();
        let flow = sdfg.loop_and_assigned_symbols();
        let mut ints = Vec::new();
        let mut floats = Vec::new();
        let mut defaults = Vec::new();
        for (n, s) in &sdfg.symbols {
            if s.value.is_some() || flow.contains(n) {
                continue;
            }
            if s.dtype.is_float() {
                floats.push(n.clone());
            } else {
                ints.push(n.clone());
                if let Some(v) = s.default {
                    defaults.push((n.clone(), v));
                }
            }
        }
        Signature {
            arrays,
            ints,
            floats,
            defaults,
        }
    }

    /// Whether `name` is an integer symbol passed in `ints` (one binding may infer).
    pub fn is_int(&self, name: &str) -> bool {
        self.ints.iter().any(|s| s == name)
    }

    /// The default of integer symbol `name`, if it has one.
    pub fn default_of(&self, name: &str) -> Option<i64> {
        self.defaults
            .iter()
            .find_map(|(n, v)| (n == name).then_some(*v))
    }
}
