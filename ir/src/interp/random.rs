//! Deterministic pseudo-random arguments for differential tests.

use std::collections::BTreeMap;

use crate::dataflow::{Dataflow, Node};
use crate::dtype::{DType, Value};
use crate::memlet::{Dim, Subset};
use crate::sdfg::Sdfg;
use crate::symexpr::SymExpr;

use super::frame::eval_sym_with;
use super::{Bindings, HostArray, InterpError, eval_shape};

/// SplitMix64 (Steele, Lea and Flood 2014): a tiny, well-known 64-bit generator.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `[0, n)` (`0` when `n == 0`).
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
}

/// FNV-1a, to give every container its own stream.
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// One use of an index table: `(table, data, dimension, offset)`.
type TableUse = (String, String, usize, SymExpr);

/// Records every indirect dimension in `g` and its maps.
fn collect_tables(g: &Dataflow, out: &mut Vec<TableUse>) {
    let mut add = |data: &str, s: &Subset| {
        for (d, dim) in s.0.iter().enumerate() {
            if let Dim::Indirect { table, offset, .. } = dim {
                out.push((table.clone(), data.to_string(), d, offset.clone()));
            }
        }
    };
    for e in g.edge_ids() {
        let (src, dst) = g.endpoints(e);
        let m = &g.edge(e).memlet;
        add(&m.data, &m.subset);
        if let Some(o) = &m.other_subset {
            let other = [g.node(dst), g.node(src)]
                .into_iter()
                .filter_map(Node::as_access)
                .find(|d| *d != m.data)
                .unwrap_or(&m.data);
            add(other, o);
        }
    }
    for n in g.node_ids() {
        match g.node(n) {
            Node::Map(m) => collect_tables(&m.body, out),
            Node::Nested(ns) => {
                let mut inner = Vec::new();
                for st in &ns.sdfg.states {
                    collect_tables(&st.graph, &mut inner);
                }
                // The caller's container a connector is bound to, where the call passes it
                // from its first element (an index into the callee's array is then one
                // into the caller's).
                let outer = |conn: &str| {
                    g.in_edges(n)
                        .into_iter()
                        .map(|e| g.edge(e))
                        .find(|e| e.dst_conn.as_deref() == Some(conn))
                        .filter(|e| {
                            e.memlet.subset.0.iter().all(|d| {
                                matches!(d, Dim::Range { start, .. } if start.as_int() == Some(0))
                            })
                        })
                        .map(|e| e.memlet.data.clone())
                };
                for (table, data, d, offset) in inner {
                    if let (Some(table), Some(data)) = (outer(&table), outer(&data)) {
                        out.push((table, data, d, offset));
                    }
                }
            }
            _ => {}
        }
    }
}

/// Arguments for `sdfg`: every non-transient container filled with pseudo-random values
/// from SplitMix64 seeded by `seed` and the container's name (floats uniform in `[-1, 1)`,
/// integers in `[0, 100)`, booleans 50/50), with shapes evaluated from the static symbol
/// values and `symbols` (passed through into the bindings).
///
/// Integer arrays used as index tables (`Dim::Indirect`, in states and map bodies, and
/// inside nested SDFGs that the call passes both the table and the array it indexes
/// from their first elements) get valid indices instead: values `v` with `v + offset` in
/// `[0, n)` for every dimension they index (extent `n`; offsets that cannot be evaluated
/// count as 0).
pub fn random_bindings(
    sdfg: &Sdfg,
    symbols: &BTreeMap<String, Value>,
    seed: u64,
) -> Result<Bindings, InterpError> {
    let mut all = symbols.clone();
    for (k, s) in &sdfg.symbols {
        if let Some(v) = s.value {
            all.insert(k.clone(), v);
        }
    }
    let shape_of = |name: &str| -> Result<Vec<usize>, InterpError> {
        match sdfg.arrays.get(name) {
            Some(d) => eval_shape(d, &all).map_err(|e| InterpError::BadArgument {
                name: name.to_string(),
                message: format!("cannot evaluate its shape: {e}"),
            }),
            None => Ok(Vec::new()),
        }
    };
    let mut uses = Vec::new();
    for st in &sdfg.states {
        collect_tables(&st.graph, &mut uses);
    }
    // The values every use accepts: `[lo, hi)`.
    let mut bound: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for (table, data, d, offset) in uses {
        let n = shape_of(&data)?.get(d).copied().unwrap_or(0) as i64;
        let o = eval_sym_with(&offset, &|k| all.get(k).copied()).unwrap_or(0);
        let (lo, hi) = (o.saturating_neg(), n.saturating_sub(o));
        let b = bound.entry(table).or_insert((lo, hi));
        *b = (b.0.max(lo), b.1.min(hi));
    }
    let mut arrays = BTreeMap::new();
    for (name, desc) in sdfg.non_transients() {
        let shape = shape_of(name)?;
        let mut rng = SplitMix64(seed ^ fnv1a(name));
        let mut a = HostArray::zeros(desc.dtype(), &shape);
        let table = bound.get(name).copied();
        for k in 0..a.len() {
            let v = match (desc.dtype(), table) {
                (DType::I32 | DType::I64, Some((lo, hi))) => {
                    let width = hi.saturating_sub(lo).max(0) as u64;
                    Value::I64(lo.saturating_add(rng.below(width) as i64))
                }
                (DType::Bool, _) => Value::Bool(rng.next() >> 63 == 1),
                (DType::I32 | DType::I64, None) => Value::I64(rng.below(100) as i64),
                (DType::F32, _) => {
                    Value::F32((rng.next() >> 40) as f32 * (2.0 / 16_777_216.0) - 1.0)
                }
                (DType::F64, _) => Value::F64(rng.unit() * 2.0 - 1.0),
            };
            a.set_flat(k, v);
        }
        arrays.insert(name.clone(), a);
    }
    Ok(Bindings {
        arrays,
        symbols: symbols.clone(),
    })
}
