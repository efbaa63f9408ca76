//! Recovering structured control flow from DaCe's state machines: states joined by
//! interstate edges with conditions and assignments become sequences, loops
//! (`init → guard ⇄ body`, `guard → exit`) and ifs (`c → then`, `not c → else`, joining
//! again). A machine of another shape is an error.

use std::collections::{BTreeMap, BTreeSet};

use sdflow_ir::{Block, Loop, SymExpr};

use super::{ImportError, err};

/// Symbol assignments of an interstate edge.
type Assigns = Vec<(String, SymExpr)>;

/// An interstate edge.
pub(crate) struct IEdge {
    pub src: String,
    pub dst: String,
    /// `None`: unconditional.
    pub cond: Option<SymExpr>,
    pub assigns: Assigns,
}

pub(crate) struct Machine<'a> {
    pub states: &'a BTreeMap<String, Block>,
    pub edges: Vec<IEdge>,
    pub loc: String,
}

impl Machine<'_> {
    fn out(&self, n: &str) -> Vec<&IEdge> {
        self.edges.iter().filter(|e| e.src == n).collect()
    }

    fn reachable(&self, from: &str, avoid: &str) -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(n) = todo.pop() {
            if n == avoid || !seen.insert(n.clone()) {
                continue;
            }
            for e in self.out(&n) {
                todo.push(e.dst.clone());
            }
        }
        seen
    }

    /// The whole machine from its start (the one state without predecessors).
    pub fn structure(&self) -> Result<Block, ImportError> {
        let targets: BTreeSet<&str> = self.edges.iter().map(|e| e.dst.as_str()).collect();
        let starts: Vec<&String> = self
            .states
            .keys()
            .filter(|k| !targets.contains(k.as_str()))
            .collect();
        let [start] = starts.as_slice() else {
            return Err(err(
                &self.loc,
                format!(
                    "the control flow needs exactly one start state, found {}",
                    starts.len()
                ),
            ));
        };
        let mut visited = BTreeSet::new();
        let (blocks, _) = self.seq(start, None, &mut visited)?;
        if visited.len() != self.states.len() {
            return Err(err(&self.loc, "states not reachable from the start"));
        }
        Ok(Block::Seq(blocks))
    }

    /// Blocks from `node` until `stop` (exclusive); returns them and the assignments of
    /// the edge that reached `stop` (a loop's update).
    fn seq(
        &self,
        node: &str,
        stop: Option<&str>,
        visited: &mut BTreeSet<String>,
    ) -> Result<(Vec<Block>, Assigns), ImportError> {
        let mut out = Vec::new();
        let mut cur = node.to_string();
        loop {
            if Some(cur.as_str()) == stop {
                return Ok((out, Vec::new()));
            }
            if !visited.insert(cur.clone()) {
                return Err(err(
                    &self.loc,
                    format!(
                        "state {cur} is reached twice: unstructured control flow is not supported"
                    ),
                ));
            }
            let id =
                self.states.get(&cur).cloned().ok_or_else(|| {
                    err(&self.loc, format!("an edge leads to unknown state {cur}"))
                })?;
            let edges = self.out(&cur);
            match edges.as_slice() {
                [] => {
                    out.push(id.clone());
                    return Ok((out, Vec::new()));
                }
                [e] if e.cond.is_none() => {
                    out.push(id.clone());
                    if Some(e.dst.as_str()) == stop {
                        return Ok((out, e.assigns.clone()));
                    }
                    if !e.assigns.is_empty() {
                        out.push(Block::Assign(e.assigns.clone()));
                    }
                    cur = e.dst.clone();
                }
                [a, b]
                    if a.cond.is_some()
                        && b.cond.is_some()
                        && a.assigns.is_empty()
                        && b.assigns.is_empty() =>
                {
                    let (ca, cb) = (
                        a.cond.clone().unwrap_or(SymExpr::Int(1)),
                        b.cond.clone().unwrap_or(SymExpr::Int(0)),
                    );
                    let complementary = SymExpr::Not(std::sync::Arc::new(ca.clone())).simplify()
                        == cb.simplify()
                        || SymExpr::Not(std::sync::Arc::new(cb.clone())).simplify()
                            == ca.simplify();
                    if !complementary {
                        return Err(err(
                            &self.loc,
                            format!(
                                "state {cur} branches on '{ca}' and '{cb}', which are not complementary"
                            ),
                        ));
                    }
                    // A loop guard: one branch comes back here.
                    // (Paths through an enclosing loop's guard do not count.)
                    let avoid = stop.unwrap_or("");
                    let back_a = self.reachable(&a.dst, avoid).contains(&cur);
                    let back_b = self.reachable(&b.dst, avoid).contains(&cur);
                    if back_a || back_b {
                        let (body, exit, cond) = if back_a { (a, b, ca) } else { (b, a, cb) };
                        out.push(id.clone());
                        let (inner, update) = self.seq(&body.dst, Some(&cur), visited)?;
                        let [(var, upd)] = update.as_slice() else {
                            return Err(err(
                                &self.loc,
                                format!(
                                    "the loop at state {cur} must update exactly one symbol on its back edge"
                                ),
                            ));
                        };
                        out.push(Block::Loop(Loop {
                            var: var.clone(),
                            init: SymExpr::sym(var),
                            cond,
                            update: upd.clone(),
                            body: Box::new(Block::Seq(inner)),
                        }));
                        cur = exit.dst.clone();
                        continue;
                    }
                    // An if: both branches meet again at the first state the then-branch
                    // reaches along the else-branch.
                    out.push(id.clone());
                    let from_a = self.reachable(&a.dst, &cur);
                    let join = self.first_common(&b.dst, &from_a, &cur);
                    let (t, _) = self.seq(&a.dst, join.as_deref().or(stop), visited)?;
                    let (f, _) = self.seq(&b.dst, join.as_deref().or(stop), visited)?;
                    out.push(Block::if_else(ca, Block::Seq(t), Block::Seq(f)));
                    match join {
                        Some(j) => cur = j,
                        None => return Ok((out, Vec::new())),
                    }
                }
                _ => {
                    return Err(err(
                        &self.loc,
                        format!(
                            "state {cur} has {} outgoing edges of a shape that is neither a sequence, a loop nor an if",
                            edges.len()
                        ),
                    ));
                }
            }
        }
    }

    /// The first state along the unconditional path from `from` that is in `set`.
    fn first_common(&self, from: &str, set: &BTreeSet<String>, avoid: &str) -> Option<String> {
        // Breadth-first from the else side, nearest first.
        let mut seen = BTreeSet::new();
        let mut queue = std::collections::VecDeque::from([from.to_string()]);
        while let Some(n) = queue.pop_front() {
            if n == avoid || !seen.insert(n.clone()) {
                continue;
            }
            if set.contains(&n) {
                return Some(n);
            }
            for e in self.out(&n) {
                queue.push_back(e.dst.clone());
            }
        }
        None
    }
}
