//! Views resolved into direct accesses of the data they view.
//!
//! A DaCe view (`ArrayView`) is an access node that aliases a window `S` of another
//! container `A`; one edge (the *view edge*) connects it with `A` (an access node of `A`,
//! or a map entry or exit carrying `A`) and carries `S`. Every other memlet that names the
//! view addresses it in the view's own coordinates. Resolving the view rewrites those
//! memlets into `A`'s coordinates (`S` composed with them), turns the view's node into an
//! access node of `A` (merged into `A`'s node when the view edge connects the two), and
//! drops the view edge: no copy, no transient, and passes see the real accesses.
//!
//! Views whose window cannot be composed (ranks that do not line up, strided windows
//! under an indirect index) are left alone; the importer then keeps them as transient
//! arrays filled by their view edge (see `StateCx::build`).

use std::collections::{BTreeMap, BTreeSet};

use sdflow_ir::{Dim, Subset, SymExpr};

use super::{Edge, StateCx};

impl StateCx<'_> {
    /// The container an access node names (after earlier view resolutions).
    pub(super) fn access_data(&self, id: &str) -> Option<String> {
        if let Some(d) = self.data_of.get(id) {
            return Some(d.clone());
        }
        let n = self.by_id.get(id)?;
        (super::s(n, "type") == Some("AccessNode"))
            .then(|| super::s(super::attrs(n), "data").map(super::name_of))
            .flatten()
    }

    /// Resolves every view access node of the state that can be resolved.
    pub(super) fn resolve_views(&mut self) {
        let views = self.views;
        // A view of a view resolves once the inner one has: repeat while progress is made.
        loop {
            let pending: Vec<String> = self
                .by_id
                .keys()
                .filter(|id| !self.removed.contains(*id))
                .filter(|id| self.access_data(id).is_some_and(|d| views.contains_key(&d)))
                .cloned()
                .collect();
            let before = pending.len();
            let mut done = 0;
            for v in pending {
                if self.resolve_view(&v) {
                    done += 1;
                }
            }
            if done == 0 || done == before {
                return;
            }
        }
    }

    /// DaCe's choice of a view's view edge (`sdfg.utils.get_view_edge`): the single edge on
    /// one side when the other side has several; else the edge with the `views`
    /// connector; else the edge whose memlet does not name the view; else the side whose
    /// memlet path ends at an access node. `(edge index, whether it enters the view)`.
    fn view_edge(&self, v: &str, view: &str) -> Option<(usize, bool)> {
        let ins: Vec<usize> = (0..self.edges.len())
            .filter(|&i| self.edges[i].dst == v)
            .collect();
        let outs: Vec<usize> = (0..self.edges.len())
            .filter(|&i| self.edges[i].src == v)
            .collect();
        if ins.is_empty() || outs.is_empty() {
            return None;
        }
        if ins.len() == 1 && outs.len() != 1 {
            return Some((ins[0], true));
        }
        if outs.len() == 1 && ins.len() != 1 {
            return Some((outs[0], false));
        }
        if ins.len() != 1 {
            return None;
        }
        let (i, o) = (ins[0], outs[0]);
        if self.edges[i].dst_conn.as_deref() == Some("views") {
            return Some((i, true));
        }
        if self.edges[o].src_conn.as_deref() == Some("views") {
            return Some((o, false));
        }
        let names = |k: usize| self.edges[k].data.as_deref() == Some(view);
        match (names(i), names(o)) {
            (false, true) => return Some((i, true)),
            (true, false) => return Some((o, false)),
            (true, true) => return None,
            (false, false) => {}
        }
        let first = self.path_end(i, false);
        let last = self.path_end(o, true);
        let is_access = |id: &str| self.kind(id) == "AccessNode";
        match (is_access(&first), is_access(&last)) {
            (true, false) => Some((i, true)),
            (false, true) => Some((o, false)),
            _ => None,
        }
    }

    /// The edges that continue edge `k`'s memlet path through the map entry or exit it
    /// leads to, forward (`true`: out of the node) or backward; `(node, edges)`, no edges
    /// when the node is not a scope node.
    fn continuations(&self, k: usize, forward: bool) -> (&str, Vec<usize>) {
        let e = &self.edges[k];
        let (node, conn) = if forward {
            (e.dst.as_str(), e.dst_conn.as_deref())
        } else {
            (e.src.as_str(), e.src_conn.as_deref())
        };
        if !matches!(self.kind(node), "MapEntry" | "MapExit") {
            return (node, Vec::new());
        }
        let next = match conn {
            Some(c) if forward => c.strip_prefix("IN_").map(|x| format!("OUT_{x}")),
            Some(c) => c.strip_prefix("OUT_").map(|x| format!("IN_{x}")),
            None => None,
        };
        let Some(nc) = next else {
            return (node, Vec::new());
        };
        let hits = (0..self.edges.len())
            .filter(|&j| {
                let f = &self.edges[j];
                if forward {
                    f.src == node && f.src_conn.as_deref() == Some(nc.as_str())
                } else {
                    f.dst == node && f.dst_conn.as_deref() == Some(nc.as_str())
                }
            })
            .collect();
        (node, hits)
    }

    /// The node at the far end of edge `k`'s memlet path through map entries and exits,
    /// forward (`true`) or backward.
    fn path_end(&self, mut k: usize, forward: bool) -> String {
        for _ in 0..=self.edges.len() {
            let (node, next) = self.continuations(k, forward);
            match next.first() {
                Some(&j) => k = j,
                None => return node.to_string(),
            }
        }
        String::new()
    }

    /// The edges that carry the view's data from (or to) node `v`: its own edges other
    /// than the view edge, and their continuations through map entries and exits.
    fn view_uses(&self, v: &str, skip: usize) -> BTreeSet<usize> {
        let mut out = BTreeSet::new();
        let mut work: Vec<(usize, bool)> = (0..self.edges.len())
            .filter(|&i| i != skip)
            .filter_map(|i| {
                let e = &self.edges[i];
                if e.src == v {
                    Some((i, true))
                } else if e.dst == v {
                    Some((i, false))
                } else {
                    None
                }
            })
            .collect();
        while let Some((k, forward)) = work.pop() {
            if out.insert(k) {
                work.extend(
                    self.continuations(k, forward)
                        .1
                        .into_iter()
                        .map(|j| (j, forward)),
                );
            }
        }
        out
    }

    /// Resolves view node `v`; false when it cannot be (it then stays a copy).
    fn resolve_view(&mut self, v: &str) -> bool {
        let views = self.views;
        let Some(view) = self.access_data(v) else {
            return false;
        };
        let Some((ve, enters)) = self.view_edge(v, &view) else {
            return false;
        };
        let far = if enters {
            self.edges[ve].src.clone()
        } else {
            self.edges[ve].dst.clone()
        };
        let far_access = self.access_data(&far);
        let e = &self.edges[ve];
        // The viewed container and the window, in its coordinates.
        let (target, window, in_view) = match e.data.as_deref() {
            Some(d) if d != view => (d.to_string(), e.subset.clone(), e.other.clone()),
            Some(_) => match &far_access {
                Some(a) => (a.clone(), e.other.clone(), e.subset.clone()),
                None => return false,
            },
            None => return false,
        };
        if views.contains_key(&target) && far_access.as_deref() != Some(target.as_str()) {
            return false;
        }
        let Some(view_shape) = self.sdfg.arrays.get(&view).map(|d| d.shape().to_vec()) else {
            return false;
        };
        let Some(target_shape) = self.sdfg.arrays.get(&target).map(|d| d.shape().to_vec()) else {
            return false;
        };
        let window = window.unwrap_or_else(|| Subset::full(&target_shape));
        // A window of the array, not a reshape: each view dimension is one of the
        // window's ranges, of the same length and (where it has more than one element)
        // the array's stride times the range's step.
        let target_strides = match self.sdfg.arrays.get(&target).and_then(|d| d.as_array()) {
            Some(a) => a.strides.clone(),
            None => return false,
        };
        let view_strides = views.get(&view).cloned().unwrap_or_default();
        let ranges: Vec<usize> = (0..window.rank())
            .filter(|&k| matches!(window.0[k], Dim::Range { .. }))
            .collect();
        if ranges.len() != view_shape.len() || view_strides.len() != view_shape.len() {
            return false;
        }
        for (j, &k) in ranges.iter().enumerate() {
            let Dim::Range { step, .. } = &window.0[k] else {
                return false;
            };
            if window.0[k].size().const_diff(&view_shape[j]) != Some(0) {
                return false;
            }
            let unit = view_shape[j].as_int() == Some(1);
            let Some(ts) = target_strides.get(k) else {
                return false;
            };
            if !unit && view_strides[j].const_diff(&ts.mul(step).simplify()) != Some(0) {
                return false;
            }
        }
        // The view-side subset of the view edge must be the whole view.
        if let Some(w) = &in_view
            && !is_whole(w, &view_shape)
        {
            return false;
        }
        // Compose every use; give up (leaving everything as it was) if one cannot be.
        let uses = self.view_uses(v, ve);
        let mut rewritten: BTreeMap<usize, Edge> = BTreeMap::new();
        for &k in &uses {
            let mut f = self.edges[k].clone();
            let direct = f.src == v || f.dst == v;
            if f.data.as_deref() == Some(view.as_str()) {
                let t = f
                    .subset
                    .clone()
                    .unwrap_or_else(|| Subset::full(&view_shape));
                let Some(c) = compose(&window, &t) else {
                    return false;
                };
                f.data = Some(target.clone());
                f.subset = Some(c);
            } else if direct {
                // A copy naming the other end: `other_subset` is the view's side.
                let t = f.other.clone().unwrap_or_else(|| Subset::full(&view_shape));
                let Some(c) = compose(&window, &t) else {
                    return false;
                };
                f.other = Some(c);
            }
            rewritten.insert(k, f);
        }
        for (k, f) in rewritten {
            self.edges[k] = f;
        }
        // The view's node: merged into the viewed access node, or an access node of the
        // viewed container in the scope it was in.
        self.edges.remove(ve);
        if far_access.as_deref() == Some(target.as_str()) {
            for f in &mut self.edges {
                if f.src == v {
                    f.src = far.clone();
                }
                if f.dst == v {
                    f.dst = far.clone();
                }
            }
            self.removed.insert(v.to_string());
        } else {
            self.data_of.insert(v.to_string(), target);
        }
        true
    }
}

/// Whether `s` is all of an array of shape `shape`.
fn is_whole(s: &Subset, shape: &[SymExpr]) -> bool {
    s.rank() == shape.len()
        && s.0.iter().zip(shape).all(|(d, n)| match d {
            Dim::Range { start, end, step } => {
                start.as_int() == Some(0)
                    && step.as_int() == Some(1)
                    && end.const_diff(n) == Some(0)
            }
            Dim::Index(i) => i.as_int() == Some(0) && n.as_int() == Some(1),
            Dim::Indirect { .. } => false,
        })
}

/// `t` (in a view's coordinates) in the coordinates of the container the view's window
/// `window` is taken from: the view's dimensions are the window's ranges, in order; the
/// window's single indices stay.
pub(super) fn compose(window: &Subset, t: &Subset) -> Option<Subset> {
    let ranges: Vec<usize> = (0..window.rank())
        .filter(|&k| matches!(window.0[k], Dim::Range { .. }))
        .collect();
    if ranges.len() != t.rank() {
        return None;
    }
    let mut out = window.0.clone();
    for (j, &k) in ranges.iter().enumerate() {
        let Dim::Range { start, step, .. } = &window.0[k] else {
            return None;
        };
        let at = |x: &SymExpr| start.add(&x.mul(step)).simplify();
        out[k] = match &t.0[j] {
            Dim::Index(x) => Dim::Index(at(x)),
            Dim::Range {
                start: a,
                end: b,
                step: c,
            } => Dim::Range {
                start: at(a),
                end: at(&b.sub(&SymExpr::Int(1)))
                    .add(&SymExpr::Int(1))
                    .simplify(),
                step: c.mul(step).simplify(),
            },
            Dim::Indirect {
                table,
                index,
                offset,
            } if step.as_int() == Some(1) => Dim::Indirect {
                table: table.clone(),
                index: index.clone(),
                offset: offset.add(start).simplify(),
            },
            Dim::Indirect { .. } => return None,
        };
    }
    Some(Subset(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(t: &str) -> Subset {
        sdflow_ir::parse::parse_subset(t).unwrap()
    }

    #[test]
    fn windows_compose() {
        // A column of w at level k, viewed as a vector.
        let w = sub("0:N, k - r");
        assert_eq!(compose(&w, &sub("i")), Some(sub("i, k - r")));
        assert_eq!(compose(&w, &sub("2:5")), Some(sub("2:5, k - r")));
        assert_eq!(
            compose(&w, &sub("t[c, n] - r")).map(|s| s.to_string()),
            Some("t[c, n] - r, k - r".to_string())
        );
        // An interior window, and a strided one.
        let u = sub("1:63, 2:62");
        assert_eq!(compose(&u, &sub("i, j")), Some(sub("i + 1, j + 2")));
        let s = sub("1:9:2");
        assert_eq!(compose(&s, &sub("0:4")), Some(sub("1:8:2")));
        assert_eq!(compose(&s, &sub("t[i]")), None);
        // Ranks that do not line up.
        assert_eq!(compose(&u, &sub("i")), None);
    }
}
