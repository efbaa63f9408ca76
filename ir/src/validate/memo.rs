//! Verdicts of the symbolic checks, remembered while a worker validates: the bounds of a
//! subset dimension over the enclosing parameter boxes, and the coverage of a body memlet
//! by a map edge's. A program's stencils repeat the same subsets over the same ranges
//! (DaCe's stencil chain has fifty copies of one stencil), and each verdict needs affine
//! sums built and simplified; a lookup hashes a few small trees.
//!
//! A verdict depends only on its key (the expressions and the boxes), never on the
//! program around it, so one memo serves a program and its nested SDFGs.

use std::hash::{Hash, Hasher};

use rustc_hash::{FxHashMap, FxHasher};

use crate::memlet::{Dim, Subset};
use crate::propagate::{ParamBox, covers, dim_bounds};
use crate::symexpr::SymExpr;

/// The id of the empty list of boxes (outside every map), never interned.
pub(super) const NO_BOXES: u32 = u32::MAX;

/// See the module documentation.
#[derive(Default)]
pub(crate) struct Memo {
    boxes: FxHashMap<Vec<ParamBox>, u32>,
    /// (boxes, dimension, extent) → (may go below 0, may reach past the extent).
    bounds: Buckets<(u32, Dim, SymExpr), [bool; 2]>,
    /// (boxes, outer subset, inner subset) → [`covers`].
    covers: Buckets<(u32, Subset, Subset), Option<bool>>,
}

/// Entries filed under the hash of their key and compared on lookup: a key is found
/// from borrowed parts, and cloned only when its entry is added.
struct Buckets<K, V>(FxHashMap<u64, Vec<(K, V)>>);

impl<K, V> Default for Buckets<K, V> {
    fn default() -> Self {
        Buckets(FxHashMap::default())
    }
}

impl<K, V: Copy> Buckets<K, V> {
    /// The value of the key hashing to `hash` for which `is` holds, or the entry `add`
    /// makes, added.
    fn get_or_add(
        &mut self,
        hash: u64,
        is: impl Fn(&K) -> bool,
        add: impl FnOnce() -> (K, V),
    ) -> V {
        let list = self.0.entry(hash).or_default();
        if let Some((_, v)) = list.iter().find(|(k, _)| is(k)) {
            return *v;
        }
        let (k, v) = add();
        list.push((k, v));
        v
    }
}

fn hash(parts: impl Hash) -> u64 {
    let mut h = FxHasher::default();
    parts.hash(&mut h);
    h.finish()
}

impl Memo {
    /// A small id for a list of boxes (equal lists, equal ids).
    pub(super) fn intern(&mut self, boxes: &[ParamBox]) -> u32 {
        if boxes.is_empty() {
            return NO_BOXES;
        }
        if let Some(&id) = self.boxes.get(boxes) {
            return id;
        }
        let id = self.boxes.len() as u32;
        self.boxes.insert(boxes.to_vec(), id);
        id
    }

    /// Whether dimension `dim`, over `boxes` (interned as `id`), can go below 0 and can
    /// reach `extent` or past it, where that is decidable (false where it is not).
    pub(super) fn out_of_bounds(
        &mut self,
        id: u32,
        boxes: &[ParamBox],
        dim: &Dim,
        extent: &SymExpr,
    ) -> [bool; 2] {
        self.bounds.get_or_add(
            hash((id, dim, extent)),
            |(i, d, e)| *i == id && d == dim && e == extent,
            || {
                let v = match dim_bounds(dim, boxes) {
                    Some((lo, hi)) => [
                        lo.const_value().is_some_and(|v| v < 0),
                        extent.const_diff(&hi).is_some_and(|d| d <= 0),
                    ],
                    None => [false, false],
                };
                ((id, dim.clone(), extent.clone()), v)
            },
        )
    }

    /// [`covers`], remembered by (`id`, `outer`, `inner`).
    pub(super) fn covers(
        &mut self,
        id: u32,
        boxes: &[ParamBox],
        outer: &Subset,
        inner: &Subset,
    ) -> Option<bool> {
        self.covers.get_or_add(
            hash((id, outer, inner)),
            |(i, o, n)| *i == id && o == outer && n == inner,
            || {
                (
                    (id, outer.clone(), inner.clone()),
                    covers(outer, inner, boxes),
                )
            },
        )
    }
}
