//! Extraction that counts a shared value once.
//!
//! egg's `Extractor` costs trees: a value used twice is paid twice, which is exactly the
//! sharing this pass exists for. This is a greedy DAG extractor: bottom-up, the cost of
//! an e-class with a chosen node is the cost of the *set* of e-classes that node needs
//! (itself and the union of its operands' sets), each paid once. A node whose operands'
//! sets contain its own class would close a cycle and is not a candidate. Sweeps repeat
//! until no class finds a cheaper node (or a sweep bound), visiting classes in id order,
//! so the result is deterministic.

use egg::{EGraph, Id, Language};
use fixedbitset::FixedBitSet;

use super::lang::{Fold, Node};

/// The chosen node of each e-class reachable from the roots.
pub struct Extraction {
    /// Chosen node per canonical class id, indexed by [`Extraction::index`].
    chosen: Vec<Option<Node>>,
    index: rustc_hash::FxHashMap<Id, usize>,
}

impl Extraction {
    /// The chosen node of a class (operands are canonical class ids).
    pub fn node(&self, egraph: &EGraph<Node, Fold>, id: Id) -> Option<&Node> {
        let i = *self.index.get(&egraph.find(id))?;
        self.chosen[i].as_ref()
    }
}

struct Best {
    node: Node,
    own: u64,
    total: u64,
    /// Classes this choice needs, itself included.
    deps: FixedBitSet,
}

/// Bound on sweeps (each sweep visits every class once).
const MAX_SWEEPS: usize = 64;

/// Chooses a node per class, minimizing the shared (DAG) cost; `cost` is a node's own
/// cost. Every class has at least one node without a cycle when it was built from
/// trees, so every class gets a choice.
pub fn extract(egraph: &EGraph<Node, Fold>, cost: &dyn Fn(&Node) -> u64) -> Extraction {
    let mut ids: Vec<Id> = egraph.classes().map(|c| c.id).collect();
    ids.sort();
    let index: rustc_hash::FxHashMap<Id, usize> =
        ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
    let n = ids.len();
    let mut best: Vec<Option<Best>> = (0..n).map(|_| None).collect();
    for _ in 0..MAX_SWEEPS {
        let mut changed = false;
        for (ci, id) in ids.iter().enumerate() {
            let mut candidate: Option<Best> = None;
            for node in &egraph[*id].nodes {
                let Some(b) = evaluate(egraph, &index, &best, ci, node, cost, n) else {
                    continue;
                };
                if candidate.as_ref().is_none_or(|c| b.total < c.total) {
                    candidate = Some(b);
                }
            }
            let Some(c) = candidate else { continue };
            let (replace, better) = match &best[ci] {
                None => (true, true),
                Some(old) if c.total < old.total => (true, true),
                // The same choice whose operands changed since: keep its set and cost
                // current (a stale cost would be counted again by every user).
                Some(old) => (
                    old.node == c.node && (old.deps != c.deps || old.total != c.total),
                    false,
                ),
            };
            if replace {
                changed |= better;
                best[ci] = Some(c);
            }
        }
        if !changed {
            break;
        }
    }
    Extraction {
        chosen: best.into_iter().map(|b| b.map(|b| b.node)).collect(),
        index,
    }
}

/// The cost of choosing `node` for class `ci`, when all its operands have a choice and
/// none of them needs `ci`.
fn evaluate(
    egraph: &EGraph<Node, Fold>,
    index: &rustc_hash::FxHashMap<Id, usize>,
    best: &[Option<Best>],
    ci: usize,
    node: &Node,
    cost: &dyn Fn(&Node) -> u64,
    n: usize,
) -> Option<Best> {
    let own = cost(node);
    let mut deps = FixedBitSet::with_capacity(n);
    let mut total = own;
    for a in node.children() {
        let ai = index[&egraph.find(*a)];
        let b = best[ai].as_ref()?;
        if b.deps.contains(ci) {
            return None;
        }
        if deps.contains(ai) {
            continue;
        }
        // Add the operand's set, paying only for classes not yet in it.
        let shared: u64 = deps
            .intersection(&b.deps)
            .map(|d| best[d].as_ref().map_or(0, |x| x.own))
            .sum();
        total = total.saturating_add(b.total - shared.min(b.total));
        deps.union_with(&b.deps);
    }
    deps.insert(ci);
    Some(Best {
        node: node.clone(),
        own,
        total,
        deps,
    })
}
