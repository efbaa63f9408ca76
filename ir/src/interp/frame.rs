//! One activation of an SDFG: its symbol values, its containers, the enclosing map
//! parameters; symbolic evaluation, subset enumeration and checked element access.

use std::cell::RefCell;
use std::collections::BTreeMap;

use crate::dtype::Value;
use crate::memlet::{Dim, Subset, Wcr};
use crate::sdfg::Sdfg;
use crate::symexpr::SymExpr;

use super::{HostArray, InterpError, value};

/// A runtime error without location yet (the callers add it).
pub(crate) fn err(message: impl Into<String>) -> InterpError {
    InterpError::Runtime {
        location: String::new(),
        message: message.into(),
    }
}

/// The state of one running SDFG.
pub(crate) struct Frame<'a> {
    /// The program.
    pub sdfg: &'a Sdfg,
    /// Symbol values: static, bound, loop variables and assigned symbols.
    pub symbols: BTreeMap<String, Value>,
    /// Every container (arguments and transients).
    pub arrays: &'a mut BTreeMap<String, HostArray>,
    /// Enclosing map parameters, outermost first.
    pub params: Vec<(String, i64)>,
}

/// Row-major position of flat index `k` in an array of the given shape.
pub(crate) fn unravel(mut k: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        let n = shape[d].max(1);
        idx[d] = k % n;
        k /= n;
    }
    idx
}

/// Evaluates a symbolic expression where names resolve through `lookup`; a float symbol
/// is an error.
pub(crate) fn eval_sym_with(
    e: &SymExpr,
    lookup: &dyn Fn(&str) -> Option<Value>,
) -> Result<i64, String> {
    let bad = RefCell::new(None);
    let r = e.eval(&|n| {
        let v = lookup(n)?;
        if v.dtype().is_float() {
            *bad.borrow_mut() = Some(format!(
                "symbol '{n}' is {}, not usable in the symbolic expression '{e}'",
                v.dtype()
            ));
            return None;
        }
        Some(v.as_i64())
    });
    match (r, bad.into_inner()) {
        (Ok(v), _) => Ok(v),
        (Err(_), Some(m)) => Err(m),
        (Err(x), None) => Err(x.to_string()),
    }
}

fn check_index(data: &str, dim: usize, i: i64, extent: usize) -> Result<usize, InterpError> {
    if i < 0 || i as u64 >= extent as u64 {
        return Err(err(format!(
            "index {i} out of bounds for dimension {dim} of '{data}' (extent {extent})"
        )));
    }
    Ok(i as usize)
}

impl Frame<'_> {
    /// Value of a name in tasklet code: map parameters (innermost first), then symbols.
    pub fn value_of(&self, name: &str) -> Option<Value> {
        if let Some((_, v)) = self.params.iter().rev().find(|(p, _)| p == name) {
            return Some(Value::I64(*v));
        }
        self.symbols.get(name).copied()
    }

    /// Evaluates a symbolic expression: map parameters, then symbols, then host scalars.
    pub fn sym(&self, e: &SymExpr) -> Result<i64, InterpError> {
        eval_sym_with(e, &|n| {
            self.value_of(n).or_else(|| {
                self.arrays
                    .get(n)
                    .filter(|a| a.shape().is_empty())
                    .and_then(|a| a.get(&[]))
                    .map(|v| Value::I64(v.as_i64()))
            })
        })
        .map_err(err)
    }

    fn array(&self, data: &str) -> Result<&HostArray, InterpError> {
        self.arrays
            .get(data)
            .ok_or_else(|| err(format!("no container named '{data}'")))
    }

    /// Reads an index table at a (symbolic) position, as `i64`.
    fn table_value(&self, table: &str, index: &[SymExpr]) -> Result<i64, InterpError> {
        let t = self.array(table)?;
        if index.len() != t.shape().len() {
            return Err(err(format!(
                "index table '{table}' has {} dimension(s), indexed with {}",
                t.shape().len(),
                index.len()
            )));
        }
        let mut idx = Vec::with_capacity(index.len());
        for (d, e) in index.iter().enumerate() {
            idx.push(check_index(table, d, self.sym(e)?, t.shape()[d])?);
        }
        t.get(&idx)
            .map(Value::as_i64)
            .ok_or_else(|| err(format!("cannot read index table '{table}'")))
    }

    /// The index an indirect dimension names: the table's value plus the offset.
    fn indirect(
        &self,
        table: &str,
        index: &[SymExpr],
        offset: &SymExpr,
    ) -> Result<i64, InterpError> {
        let v = self.table_value(table, index)?;
        let o = self.sym(offset)?;
        v.checked_add(o).ok_or_else(|| {
            err(format!(
                "index-table value {v} of '{table}' plus offset {o} overflows"
            ))
        })
    }

    /// The indices one dimension of a subset covers, in order.
    fn dim_indices(&self, dim: &Dim) -> Result<Vec<i64>, InterpError> {
        Ok(match dim {
            Dim::Index(e) => vec![self.sym(e)?],
            Dim::Indirect {
                table,
                index,
                offset,
            } => vec![self.indirect(table, index, offset)?],
            Dim::Range { start, end, step } => {
                let (s, e, st) = (self.sym(start)?, self.sym(end)?, self.sym(step)?);
                if st <= 0 {
                    return Err(err(format!(
                        "range {dim} has step {st}; it must be positive"
                    )));
                }
                // An array holds at most MAX_ELEMENTS, so a longer range cannot be in bounds.
                let count = (e as i128 - s as i128).max(0) / st as i128;
                if count > super::MAX_ELEMENTS as i128 {
                    return Err(err(format!(
                        "range {dim} evaluates to {s}:{e}:{st}, more indices than any array holds"
                    )));
                }
                let mut out = Vec::new();
                let mut i = s;
                while i < e {
                    out.push(i);
                    match i.checked_add(st) {
                        Some(n) => i = n,
                        None => break,
                    }
                }
                out
            }
        })
    }

    /// Every element of `data[subset]` in row-major order of the subset, bounds-checked,
    /// with the subset's size per dimension. An empty subset of an array means all of it.
    pub fn points(
        &self,
        data: &str,
        subset: &Subset,
    ) -> Result<(Vec<usize>, Vec<Vec<usize>>), InterpError> {
        let shape = self.array(data)?.shape().to_vec();
        let per_dim: Vec<Vec<usize>> = if subset.0.is_empty() {
            shape.iter().map(|n| (0..*n).collect()).collect()
        } else {
            if subset.rank() != shape.len() {
                return Err(err(format!(
                    "subset [{subset}] has {} dimension(s) but '{data}' has {}",
                    subset.rank(),
                    shape.len()
                )));
            }
            let mut v = Vec::new();
            for (d, dim) in subset.0.iter().enumerate() {
                let idx = self.dim_indices(dim)?;
                v.push(
                    idx.into_iter()
                        .map(|i| check_index(data, d, i, shape[d]))
                        .collect::<Result<Vec<_>, _>>()?,
                );
            }
            v
        };
        let sizes: Vec<usize> = per_dim.iter().map(Vec::len).collect();
        let total: usize = sizes.iter().product();
        let pts = (0..total)
            .map(|k| {
                unravel(k, &sizes)
                    .iter()
                    .enumerate()
                    .map(|(d, &p)| per_dim[d][p])
                    .collect()
            })
            .collect();
        Ok((sizes, pts))
    }

    /// The single element a tasklet memlet names: indices evaluated, ranges at their
    /// start, indirect dimensions read from their table; bounds-checked.
    pub fn element(&self, data: &str, subset: &Subset) -> Result<Vec<usize>, InterpError> {
        let shape = self.array(data)?.shape().to_vec();
        if subset.rank() != shape.len() {
            return Err(err(format!(
                "subset [{subset}] has {} dimension(s) but '{data}' has {}",
                subset.rank(),
                shape.len()
            )));
        }
        let mut idx = Vec::with_capacity(shape.len());
        for (d, dim) in subset.0.iter().enumerate() {
            let i = match dim {
                Dim::Index(e) => self.sym(e)?,
                Dim::Range { start, .. } => self.sym(start)?,
                Dim::Indirect {
                    table,
                    index,
                    offset,
                } => self.indirect(table, index, offset)?,
            };
            idx.push(check_index(data, d, i, shape[d])?);
        }
        Ok(idx)
    }

    /// Reads one element.
    pub fn read(&self, data: &str, idx: &[usize]) -> Result<Value, InterpError> {
        self.array(data)?
            .get(idx)
            .ok_or_else(|| err(format!("index {idx:?} out of bounds of '{data}'")))
    }

    /// Writes one element (converted to the element type), combining with the old value
    /// under `wcr` when given.
    pub fn write(
        &mut self,
        data: &str,
        idx: &[usize],
        v: Value,
        wcr: Option<Wcr>,
    ) -> Result<(), InterpError> {
        let v = match wcr {
            Some(w) => value::combine(w, self.read(data, idx)?, v).map_err(err)?,
            None => v,
        };
        let a = self
            .arrays
            .get_mut(data)
            .ok_or_else(|| err(format!("no container named '{data}'")))?;
        if a.set(idx, v) {
            Ok(())
        } else {
            Err(err(format!("index {idx:?} out of bounds of '{data}'")))
        }
    }
}
