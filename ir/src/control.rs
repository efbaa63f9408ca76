//! Structured control flow: sequences, counted loops, conditionals and assignments over
//! states.

use crate::symexpr::SymExpr;

/// Index of a state in [`crate::Sdfg::states`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StateId(pub u32);

impl StateId {
    /// The index as `usize`.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A `for` loop: `var = init; while cond { body; var = update }`.
#[derive(Clone, Debug, PartialEq)]
pub struct Loop {
    /// The loop variable (an integer symbol); only the loop assigns it.
    pub var: String,
    /// Initial value.
    pub init: SymExpr,
    /// Condition checked before each iteration.
    pub cond: SymExpr,
    /// Next value, in terms of the variable (e.g. `t + 1`).
    pub update: SymExpr,
    /// The body.
    pub body: Box<Block>,
}

/// A two-way conditional on a symbolic condition.
#[derive(Clone, Debug, PartialEq)]
pub struct If {
    /// Condition over symbols and host scalars (non-zero is true).
    pub cond: SymExpr,
    /// Taken when the condition holds.
    pub then: Box<Block>,
    /// Taken otherwise (an empty sequence for none).
    pub otherwise: Box<Block>,
}

/// A structured control-flow block.
#[derive(Clone, Debug, PartialEq)]
pub enum Block {
    /// Run one state's dataflow.
    State(StateId),
    /// Run blocks one after the other.
    Seq(Vec<Block>),
    /// A counted loop.
    Loop(Loop),
    /// A conditional.
    If(If),
    /// Assign integer symbols (simultaneously), like DaCe's interstate-edge assignments.
    Assign(Vec<(String, SymExpr)>),
}

impl Block {
    /// An empty sequence (does nothing).
    pub fn empty() -> Block {
        Block::Seq(Vec::new())
    }

    /// A sequence.
    pub fn seq(blocks: impl IntoIterator<Item = Block>) -> Block {
        Block::Seq(blocks.into_iter().collect())
    }

    /// `for var = init; cond; var = update`.
    pub fn for_loop(
        var: &str,
        init: impl Into<SymExpr>,
        cond: impl Into<SymExpr>,
        update: impl Into<SymExpr>,
        body: Block,
    ) -> Block {
        Block::Loop(Loop {
            var: var.to_string(),
            init: init.into(),
            cond: cond.into(),
            update: update.into(),
            body: Box::new(body),
        })
    }

    /// `if cond { then } else { otherwise }`.
    pub fn if_else(cond: impl Into<SymExpr>, then: Block, otherwise: Block) -> Block {
        Block::If(If {
            cond: cond.into(),
            then: Box::new(then),
            otherwise: Box::new(otherwise),
        })
    }

    /// Makes `first` run before what this block runs (a sequence keeps its other items).
    pub fn prepend(&mut self, first: Block) {
        match self {
            Block::Seq(v) => v.insert(0, first),
            other => {
                let old = std::mem::replace(other, Block::empty());
                *other = Block::Seq(vec![first, old]);
            }
        }
    }

    /// Every state the block runs, in program order.
    pub fn states(&self) -> Vec<StateId> {
        let mut out = Vec::new();
        self.visit(&mut |b| {
            if let Block::State(s) = b {
                out.push(*s);
            }
        });
        out
    }

    /// Calls `f` on this block and every block inside it, in program order.
    pub fn visit(&self, f: &mut dyn FnMut(&Block)) {
        f(self);
        match self {
            Block::State(_) | Block::Assign(_) => {}
            Block::Seq(bs) => bs.iter().for_each(|b| b.visit(f)),
            Block::Loop(l) => l.body.visit(f),
            Block::If(i) => {
                i.then.visit(f);
                i.otherwise.visit(f);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepend_runs_first_and_keeps_a_sequence_flat() {
        let mut b = Block::seq([Block::State(StateId(1)), Block::State(StateId(2))]);
        b.prepend(Block::State(StateId(0)));
        assert_eq!(b.states(), vec![StateId(0), StateId(1), StateId(2)]);
        assert!(matches!(&b, Block::Seq(v) if v.len() == 3));

        let mut single = Block::State(StateId(5));
        single.prepend(Block::State(StateId(4)));
        assert_eq!(single.states(), vec![StateId(4), StateId(5)]);
        assert!(matches!(&single, Block::Seq(v) if v.len() == 2));
    }
}
