//! A sequence of program calls as one program: each call becomes a state holding the
//! callee as a nested SDFG, its containers bound to the caller's and its free symbols to
//! expressions over the caller's symbols. The optimizer's pipeline then inlines the
//! callees (`inline_nested`) and fuses across the former program boundaries.
//!
//! This is how a recorded model step (GT4Py programs called one after another from
//! Python, `sdflow.gt4py.orchestrate`) becomes one compiled call: the recorder knows
//! which field each call's parameters name, so two calls that pass the same field bind
//! the same caller container, and the dataflow between them is explicit.

use std::collections::BTreeMap;

use sdflow_ir::{
    Block, DType, DataDesc, Dataflow, Memlet, NestedSdfg, Node, Sdfg, State, StateId, Subset,
    SymExpr, Symbol,
};

use crate::error::BuildError;

/// One call of a step.
#[derive(Clone, Debug)]
pub struct StepCall {
    /// The program called.
    pub sdfg: Sdfg,
    /// Each of the callee's argument containers the call passes: callee name → caller
    /// container.
    pub data: BTreeMap<String, String>,
    /// Each of the callee's symbols: callee name → value in terms of the caller's
    /// symbols (or a constant).
    pub symbols: BTreeMap<String, SymExpr>,
}

/// A step: the caller's containers and symbols, and the calls in order.
#[derive(Clone, Debug, Default)]
pub struct Step {
    /// The composed program's name.
    pub name: String,
    /// The caller's containers, in calling order: its arguments, and transients (the
    /// step's scratch: fields that live only within the step, which the caller does not
    /// pass and never sees; their extents and strides are constants).
    pub data: Vec<(String, DataDesc)>,
    /// The caller's symbols.
    pub symbols: Vec<(String, DType)>,
    /// The calls, in order.
    pub calls: Vec<StepCall>,
}

/// The step as one program: a state per call, in order. Every argument container of a
/// callee that the callee reads or writes must be bound, to a caller container of its
/// element type and rank; every symbol of a callee must have a value whose free symbols
/// are the caller's. The step's transient containers are not arguments of the result;
/// like any transient, their values do not outlive a call, so the optimizer may keep
/// them in registers or drop them. The result is validated.
pub fn compose(step: &Step) -> Result<Sdfg, BuildError> {
    let err = |message: String| BuildError::Program {
        program: step.name.clone(),
        message,
    };
    let mut sdfg = Sdfg::new(&step.name);
    for (name, dtype) in &step.symbols {
        sdfg.symbols.insert(name.clone(), Symbol::new(*dtype));
    }
    for (name, desc) in &step.data {
        if desc.transient()
            && let Some(s) = desc
                .shape()
                .iter()
                .chain(match desc {
                    DataDesc::Array(a) => a.strides.iter(),
                    _ => [].iter(),
                })
                .find(|e| !e.free_symbols().is_empty())
        {
            return Err(err(format!(
                "transient container '{name}' has the extent or stride '{s}'; a step's transients have constant ones"
            )));
        }
        sdfg.arrays.insert(name.clone(), desc.clone());
    }
    sdfg.arg_order = step
        .data
        .iter()
        .filter(|(_, d)| !d.transient())
        .map(|(n, _)| n.clone())
        .collect();
    for (i, call) in step.calls.iter().enumerate() {
        let callee = &call.sdfg;
        let at = format!("call {i} ('{}')", callee.name);
        let reads = callee.read_data();
        let writes = callee.written_data();
        let mut graph = Dataflow::new();
        let mut inputs = Vec::new();
        let mut outputs = Vec::new();
        for (name, desc) in &callee.arrays {
            if desc.transient() {
                continue;
            }
            let (read, written) = (reads.contains(name), writes.contains(name));
            let Some(outer) = call.data.get(name) else {
                if read || written {
                    return Err(err(format!(
                        "{at}: argument '{name}' is not bound to a container"
                    )));
                }
                continue;
            };
            let Some(outer_desc) = sdfg.arrays.get(outer) else {
                return Err(err(format!(
                    "{at}: argument '{name}' is bound to '{outer}', which is no container of the step"
                )));
            };
            if outer_desc.dtype() != desc.dtype() {
                return Err(err(format!(
                    "{at}: argument '{name}' is {}, the step's '{outer}' is {}",
                    desc.dtype().name(),
                    outer_desc.dtype().name()
                )));
            }
            if outer_desc.shape().len() != desc.shape().len() {
                return Err(err(format!(
                    "{at}: argument '{name}' has {} dimension(s), the step's '{outer}' has {}",
                    desc.shape().len(),
                    outer_desc.shape().len()
                )));
            }
            let memlet = Memlet::new(outer, Subset::full(outer_desc.shape()));
            if read {
                inputs.push((name.clone(), memlet.clone()));
            }
            if written {
                outputs.push((name.clone(), memlet));
            }
        }
        for name in call.data.keys() {
            if !callee.arrays.contains_key(name) {
                return Err(err(format!(
                    "{at}: '{name}' is no container of the program"
                )));
            }
        }
        let mut symbol_mapping = BTreeMap::new();
        for name in callee.symbols.keys() {
            let Some(value) = call.symbols.get(name) else {
                return Err(err(format!("{at}: symbol '{name}' has no value")));
            };
            if let Some(unknown) = value
                .free_symbols()
                .into_iter()
                .find(|s| !sdfg.symbols.contains_key(s))
            {
                return Err(err(format!(
                    "{at}: the value of symbol '{name}' reads '{unknown}', which is no symbol of the step"
                )));
            }
            symbol_mapping.insert(name.clone(), value.clone());
        }
        if let Some(extra) = call
            .symbols
            .keys()
            .find(|s| !callee.symbols.contains_key(*s))
        {
            return Err(err(format!("{at}: '{extra}' is no symbol of the program")));
        }
        // An argument the callee neither reads nor writes gets no connector, and leaves
        // the callee's copy too: a nested SDFG binds every argument it declares (the
        // interpreter requires that).
        let mut inner = callee.clone();
        inner
            .arrays
            .retain(|n, d| d.transient() || reads.contains(n) || writes.contains(n));
        inner.arg_order.retain(|n| inner.arrays.contains_key(n));
        let node = graph.add_node(Node::Nested(NestedSdfg {
            sdfg: Box::new(inner),
            symbol_mapping,
        }));
        for (conn, m) in inputs {
            let src = graph.add_node(Node::Access(m.data.clone()));
            graph.add_edge(src, None, node, Some(&conn), m);
        }
        for (conn, m) in outputs {
            let dst = graph.add_node(Node::Access(m.data.clone()));
            graph.add_edge(node, Some(&conn), dst, None, m);
        }
        sdfg.states.push(State {
            name: format!("call_{i}_{}", callee.name),
            graph,
        });
    }
    sdfg.body = Block::Seq(
        (0..sdfg.states.len())
            .map(|i| Block::State(StateId(i as u32)))
            .collect(),
    );
    sdfg.validate().map_err(|problems| BuildError::Invalid {
        program: step.name.clone(),
        problems,
    })?;
    Ok(sdfg)
}
