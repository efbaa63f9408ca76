//! Checking the arguments of a call against a program's [`Signature`], shared by the CPU
//! and CUDA backends: names, element types, extents, strides and layouts, the symbol
//! values the arrays imply ([`sdflow_ir::bind`]), and the byte spans of the arrays (to
//! find those that overlap).

use std::collections::BTreeMap;

use sdflow_ir::interp::Bindings;
use sdflow_ir::{DType, SymExpr, Value};

use crate::abi::Signature;

/// The dense layout (dimensions slowest first) in which an argument declared as `spec`
/// is passed with extents `extents`: the one its declared strides describe with the
/// symbol values `values` ([`sdflow_ir::bind::layout_order`]: or the contiguous
/// dimension they declare), else row-major (the binding's stride check then says what
/// differs); none for a scalar.
pub(crate) fn declared_order(
    spec: &crate::abi::ArgSpec,
    extents: &[usize],
    values: &BTreeMap<String, i64>,
) -> Vec<usize> {
    if spec.shape.is_empty() {
        return Vec::new();
    }
    sdflow_ir::bind::layout_order(&spec.strides, extents, values)
        .unwrap_or_else(|| (0..extents.len()).collect())
}

/// The dense layout of every argument of interpreter-style bindings `b` for a program of
/// signature `sig` ([`declared_order`], with the symbol values the bindings give).
pub(crate) fn declared_orders(
    sig: &Signature,
    statics: &BTreeMap<String, i64>,
    b: &Bindings,
) -> Result<BTreeMap<String, Vec<usize>>, String> {
    let values = binding_symbols(sig, statics, b)?;
    Ok(sig
        .arrays
        .iter()
        .filter_map(|s| {
            let a = b.arrays.get(&s.name)?;
            Some((s.name.clone(), declared_order(s, a.shape(), &values)))
        })
        .collect())
}

/// The byte range `[lo, hi)` the elements of an array at address `ptr` with these
/// extents and strides (in elements) span; empty for an array without elements.
pub(crate) fn byte_span(
    ptr: u64,
    dtype: DType,
    extents: &[usize],
    strides: &[isize],
) -> (u64, u64) {
    if extents.contains(&0) {
        return (ptr, ptr);
    }
    let size = dtype.size_bytes() as i128;
    let (mut lo, mut hi) = (0i128, 0i128);
    for (&n, &s) in extents.iter().zip(strides) {
        let reach = (n as i128 - 1) * s as i128;
        if reach < 0 {
            lo += reach;
        } else {
            hi += reach;
        }
    }
    let base = ptr as i128;
    let clamp = |x: i128| x.clamp(0, u64::MAX as i128) as u64;
    (clamp(base + lo * size), clamp(base + (hi + 1) * size))
}

/// The byte ranges of a call's arrays so far, to refuse one that overlaps another.
#[derive(Default)]
pub(crate) struct Spans<'a>(Vec<(u64, u64, &'a str)>);

impl<'a> Spans<'a> {
    /// Adds argument `name`'s range; the message when it overlaps one added before.
    pub(crate) fn claim(&mut self, (lo, hi): (u64, u64), name: &'a str) -> Result<(), String> {
        if let Some((_, _, other)) = self.0.iter().find(|(l, h, _)| lo < *h && *l < hi) {
            return Err(format!(
                "'{name}' and '{other}' overlap in memory; pass distinct arrays"
            ));
        }
        if lo < hi {
            self.0.push((lo, hi, name));
        }
        Ok(())
    }
}

/// One array argument as a call passes it (host or device memory alike).
pub(crate) struct PassedArray<'a> {
    /// The argument's name.
    pub name: &'a str,
    /// Its element type.
    pub dtype: DType,
    /// Its extents.
    pub shape: &'a [usize],
    /// Its strides, in elements.
    pub strides: &'a [isize],
}

/// A call's arguments checked against its signature.
pub(crate) struct CheckedArgs {
    /// Every integer symbol's value: static, given, or inferred from the arrays.
    pub values: BTreeMap<String, i64>,
    /// The signature's integer symbols' values, in order.
    pub ints: Vec<i64>,
    /// The signature's float symbols' values, in order.
    pub floats: Vec<f64>,
    /// Per array of the signature: the position of the array passed for it, its extents
    /// and its declared strides (empty for a scalar).
    pub arrays: Vec<(usize, Vec<i64>, Vec<i64>)>,
}

/// Checks arrays and symbol values passed to a program of signature `sig`: every name
/// is the program's, every symbol has a value (given or implied by the arrays), every
/// array has the declared element type, shape and strides. Aliasing is the caller's
/// check (it knows the memory).
pub(crate) fn check_arguments(
    sig: &Signature,
    statics: &BTreeMap<String, i64>,
    passed: &[PassedArray<'_>],
    ints: &BTreeMap<String, i64>,
    floats: &BTreeMap<String, f64>,
) -> Result<CheckedArgs, String> {
    // Where each of the signature's arrays is among those passed (the first of a name):
    // looked up at the same position first, as callers usually pass them in order.
    let mut at: Vec<Option<usize>> = vec![None; sig.arrays.len()];
    for (k, a) in passed.iter().enumerate() {
        let i = if sig.arrays.get(k).is_some_and(|s| s.name == a.name) {
            k
        } else {
            sig.arrays
                .iter()
                .position(|s| s.name == a.name)
                .ok_or_else(|| format!("it has no array argument '{}'", a.name))?
        };
        at[i].get_or_insert(k);
    }
    for name in ints.keys().chain(floats.keys()) {
        if !sig.ints.contains(name) && !sig.floats.contains(name) {
            return Err(format!("it has no runtime symbol '{name}'"));
        }
    }
    let find = |i: usize| at[i];
    // Symbol values: given, or implied by the arrays' extents and strides.
    let mut values: BTreeMap<String, i64> = statics.clone();
    values.extend(ints.iter().map(|(k, v)| (k.clone(), *v)));
    let layouts: Vec<sdflow_ir::bind::ArgLayout<'_>> = sig
        .arrays
        .iter()
        .enumerate()
        .filter_map(|(i, spec)| {
            let a = &passed[find(i)?];
            Some(sdflow_ir::bind::ArgLayout {
                name: &spec.name,
                shape: &spec.shape,
                strides: &spec.strides,
                extents: a.shape,
                elem_strides: Some(a.strides),
            })
        })
        .collect();
    sdflow_ir::bind::infer_symbols(
        &layouts,
        &|s| sig.is_int(s),
        &|s| sig.default_of(s),
        &mut values,
    )
    .map_err(|e| e.0)?;
    let mut int_values = Vec::new();
    for s in &sig.ints {
        let v = values
            .get(s)
            .ok_or_else(|| sdflow_ir::bind::no_value(s, false).0)?;
        int_values.push(*v);
    }
    let mut float_values = Vec::new();
    for s in &sig.floats {
        let v = floats
            .get(s)
            .copied()
            .or_else(|| ints.get(s).map(|&i| i as f64))
            .ok_or_else(|| sdflow_ir::bind::no_value(s, true).0)?;
        float_values.push(v);
    }
    let eval = |e: &SymExpr| {
        e.eval_map(&values)
            .map_err(|x| format!("cannot evaluate '{e}': {x}"))
    };
    let mut arrays = Vec::new();
    for (i, spec) in sig.arrays.iter().enumerate() {
        let k = find(i).ok_or_else(|| format!("missing argument '{}'", spec.name))?;
        let a = &passed[k];
        if a.dtype != spec.dtype {
            return Err(format!(
                "'{}' is {}, the program needs {}",
                spec.name, a.dtype, spec.dtype
            ));
        }
        let want: Vec<i64> = spec.shape.iter().map(eval).collect::<Result<_, _>>()?;
        let have: Vec<i64> = a.shape.iter().map(|&n| n as i64).collect();
        let scalar_ok = want.is_empty() && have.iter().product::<i64>() == 1;
        if want != have && !scalar_ok {
            return Err(format!(
                "'{}' has shape {have:?}, the program needs {want:?}",
                spec.name
            ));
        }
        let mut strides: Vec<i64> = Vec::new();
        if !want.is_empty() {
            strides = spec.strides.iter().map(eval).collect::<Result<_, _>>()?;
            sdflow_ir::bind::check_layout(&spec.name, &want, &strides)
                .map_err(|e| format!("the program's {}", e.0))?;
            // An array without elements has no meaningful strides, nor has a dimension
            // of extent 1.
            let empty = want.contains(&0);
            for (d, (&w, &h)) in strides.iter().zip(a.strides).enumerate() {
                if !empty && want[d] > 1 && w != h as i64 {
                    return Err(format!(
                        "'{}' has strides {:?}, the program needs {strides:?} (dimension {d})",
                        spec.name, a.strides
                    ));
                }
            }
        }
        arrays.push((k, have, strides));
    }
    Ok(CheckedArgs {
        values,
        ints: int_values,
        floats: float_values,
        arrays,
    })
}

/// The integer symbol values of interpreter-style bindings for a program of signature
/// `sig`: its static ones, those given, and those read off the arrays' extents where a
/// dimension is declared as a bare symbol.
pub(crate) fn binding_symbols(
    sig: &Signature,
    statics: &BTreeMap<String, i64>,
    b: &Bindings,
) -> Result<BTreeMap<String, i64>, String> {
    let mut values = statics.clone();
    for (k, v) in &b.symbols {
        if sig.ints.contains(k) {
            values.insert(k.clone(), v.as_i64());
        }
    }
    let layouts: Vec<sdflow_ir::bind::ArgLayout<'_>> = sig
        .arrays
        .iter()
        .filter_map(|s| {
            Some(sdflow_ir::bind::ArgLayout {
                name: &s.name,
                shape: &s.shape,
                strides: &s.strides,
                extents: b.arrays.get(&s.name)?.shape(),
                elem_strides: None,
            })
        })
        .collect();
    sdflow_ir::bind::infer_symbols(
        &layouts,
        &|s| sig.is_int(s),
        &|s| sig.default_of(s),
        &mut values,
    )
    .map_err(|e| e.0)?;
    Ok(values)
}

/// Values of static integer symbols, for binding.
pub(crate) fn static_ints(sdfg: &sdflow_ir::Sdfg) -> BTreeMap<String, i64> {
    sdfg.symbols
        .iter()
        .filter_map(|(k, s)| {
            s.value
                .filter(|v| !matches!(v, Value::F32(_) | Value::F64(_)))
                .map(|v| (k.clone(), v.as_i64()))
        })
        .collect()
}
