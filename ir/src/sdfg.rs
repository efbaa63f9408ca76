//! The stateful dataflow graph: containers, symbols, states and control flow.

use std::collections::{BTreeMap, BTreeSet};

use crate::control::{Block, StateId};
use crate::data::{DataDesc, Symbol};
use crate::dataflow::Dataflow;

/// A state: one dataflow graph, run as a unit.
#[derive(Clone, Debug, PartialEq)]
pub struct State {
    /// Label, used in messages and generated code.
    pub name: String,
    /// The dataflow.
    pub graph: Dataflow,
}

/// A stateful dataflow multigraph.
#[derive(Clone, Debug, PartialEq)]
pub struct Sdfg {
    /// Program name.
    pub name: String,
    /// Data containers by name.
    pub arrays: BTreeMap<String, DataDesc>,
    /// Symbols by name.
    pub symbols: BTreeMap<String, Symbol>,
    /// Explicit order of the first arguments (DaCe's `arg_names`); the remaining
    /// arguments follow in name order (see [`Sdfg::arguments`]).
    pub arg_order: Vec<String>,
    /// States, indexed by [`StateId`].
    pub states: Vec<State>,
    /// The control flow over the states.
    pub body: Block,
}

impl Sdfg {
    /// The default of symbol `name` ([`crate::Symbol::default`]), if it has one.
    pub fn symbol_default(&self, name: &str) -> Option<i64> {
        self.symbols.get(name).and_then(|s| s.default)
    }

    /// An empty program.
    pub fn new(name: &str) -> Sdfg {
        Sdfg {
            name: name.to_string(),
            arrays: BTreeMap::new(),
            symbols: BTreeMap::new(),
            arg_order: Vec::new(),
            states: Vec::new(),
            body: Block::empty(),
        }
    }

    /// Adds a state (not yet placed in the body).
    pub fn add_state(&mut self, name: &str) -> StateId {
        self.states.push(State {
            name: name.to_string(),
            graph: Dataflow::new(),
        });
        StateId((self.states.len() - 1) as u32)
    }

    /// The state with this id, if any.
    pub fn state(&self, id: StateId) -> Option<&State> {
        self.states.get(id.index())
    }

    /// The arguments a caller passes, in order: `arg_order`, then the other non-transient
    /// containers in name order, then symbols without a static value in name order.
    pub fn arguments(&self) -> Vec<String> {
        let mut out: Vec<String> = self.arg_order.clone();
        let seen: BTreeSet<String> = out.iter().cloned().collect();
        for (name, d) in &self.arrays {
            if !d.transient() && !seen.contains(name) {
                out.push(name.clone());
            }
        }
        for (name, s) in &self.symbols {
            if s.value.is_none()
                && !seen.contains(name)
                && !self.loop_and_assigned_symbols().contains(name)
            {
                out.push(name.clone());
            }
        }
        out
    }

    /// Symbols the control flow assigns itself (loop variables and assignments); they are
    /// not arguments.
    pub fn loop_and_assigned_symbols(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        self.body.visit(&mut |b| match b {
            Block::Loop(l) => {
                out.insert(l.var.clone());
            }
            Block::Assign(a) => out.extend(a.iter().map(|(n, _)| n.clone())),
            _ => {}
        });
        out
    }

    /// The non-transient containers (the program's array and scalar arguments).
    pub fn non_transients(&self) -> impl Iterator<Item = (&String, &DataDesc)> {
        self.arrays.iter().filter(|(_, d)| !d.transient())
    }
}
