//! Specialization: static symbols become constants everywhere — shapes, memlets, map
//! ranges, tasklet code, conditions — and conditionals whose condition becomes a constant
//! are replaced by the branch taken. Compile-time domains and configuration flags (what
//! ICON4Py's static arguments are) cost nothing at run time afterwards.
//!
//! ```text
//! symbols: NZ = 4 (static), hyperdiffusion = 1 (static)
//! map k = 0:NZ  { out[k] = in[k] * w }        map k = 0:4 { out[k] = in[k] * w }
//! if hyperdiffusion != 0 { A } else { B }  →  A
//! ```

use std::collections::{BTreeMap, BTreeSet};

use sdflow_ir::{Block, DType, DataDesc, Dataflow, Expr, Node, Sdfg, SymExpr, Value};

use crate::pass::{Changes, Pass};
use crate::pattern::{compact_states, substitute_control, substitute_params};

/// See the module documentation.
pub struct Specialize;

impl Pass for Specialize {
    fn name(&self) -> &'static str {
        "specialize"
    }

    fn run(&self, sdfg: &mut Sdfg) -> Changes {
        let mut ch = Changes::default();
        let statics: BTreeMap<String, (DType, Value)> = sdfg
            .symbols
            .iter()
            .filter_map(|(k, s)| s.value.map(|v| (k.clone(), (s.dtype, v.cast(s.dtype)))))
            .collect();
        if !statics.is_empty() {
            let ints: BTreeMap<String, SymExpr> = statics
                .iter()
                .filter(|(_, (t, _))| t.is_int() || *t == DType::Bool)
                .map(|(k, (_, v))| (k.clone(), SymExpr::Int(v.as_i64())))
                .collect();
            let f = |e: &SymExpr| e.substitute(&ints).simplify();
            for desc in sdfg.arrays.values_mut() {
                if let DataDesc::Array(a) = desc {
                    a.shape = a.shape.iter().map(f).collect();
                    a.strides = a.strides.iter().map(f).collect();
                }
            }
            let values: BTreeMap<String, Value> =
                statics.iter().map(|(k, (_, v))| (k.clone(), *v)).collect();
            for st in &mut sdfg.states {
                forward_scalars(&mut st.graph, &values);
            }
            for st in &mut sdfg.states {
                substitute_params(&mut st.graph, &ints);
                constants_in_code(&mut st.graph, &values, &BTreeSet::new());
            }
            substitute_control(&mut sdfg.body, &ints);
            for k in statics.keys() {
                sdfg.symbols.remove(k);
            }
            ch.add("symbols_specialized", statics.len());
        }
        ch.add("branches_folded", fold_branches(&mut sdfg.body));
        // States of branches not taken are gone from the control flow.
        compact_states(sdfg);
        ch
    }
}

/// A nested SDFG's float or bool symbol (a scalar parameter) is mapped to a caller symbol
/// of its type, passed as is; when that caller symbol is static, the callee's symbol
/// takes its value as a static value and leaves the mapping (an integer literal is no
/// mapping for a float or bool symbol, and the caller's symbol is about to go). Nested
/// SDFGs inside map bodies too.
fn forward_scalars(df: &mut Dataflow, values: &BTreeMap<String, Value>) {
    for n in df.node_ids() {
        match &mut df.graph[n] {
            Node::Map(m) => forward_scalars(&mut m.body, values),
            Node::Nested(ns) => {
                let inner = &mut ns.sdfg;
                ns.symbol_mapping.retain(|k, e| {
                    let (SymExpr::Sym(x), Some(sym)) = (&*e, inner.symbols.get_mut(k)) else {
                        return true;
                    };
                    match values.get(&**x) {
                        Some(v) if !sym.dtype.is_int() => {
                            sym.value = Some(v.cast(sym.dtype));
                            false
                        }
                        _ => true,
                    }
                });
            }
            _ => {}
        }
    }
}

/// Replaces reads of static symbols in tasklet code by their values, where no connector,
/// local or enclosing map parameter of the same name shadows them.
fn constants_in_code(
    df: &mut Dataflow,
    values: &BTreeMap<String, Value>,
    params: &BTreeSet<String>,
) {
    for n in df.node_ids() {
        match &mut df.graph[n] {
            Node::Tasklet(t) => {
                let mut own: BTreeSet<String> = t.inputs.keys().cloned().collect();
                own.extend(t.outputs.keys().cloned());
                own.extend(t.code.iter().map(|s| s.target.clone()));
                own.extend(params.iter().cloned());
                for st in &mut t.code {
                    st.value = st.value.replace_vars(&|v| {
                        if own.contains(v) {
                            None
                        } else {
                            values.get(v).map(|x| Expr::Const(*x))
                        }
                    });
                }
            }
            Node::Map(m) => {
                let mut inner = params.clone();
                inner.extend(m.params.iter().cloned());
                constants_in_code(&mut m.body, values, &inner);
            }
            _ => {}
        }
    }
}

/// Replaces every `if` whose condition is a constant by the branch it takes.
fn fold_branches(block: &mut Block) -> usize {
    let mut n = 0;
    match block {
        Block::Seq(items) => {
            for b in items.iter_mut() {
                n += fold_branches(b);
            }
        }
        Block::Loop(l) => n += fold_branches(&mut l.body),
        Block::If(i) => {
            n += fold_branches(&mut i.then) + fold_branches(&mut i.otherwise);
            if let Some(c) = i.cond.simplify().as_int() {
                let taken = if c != 0 {
                    &mut i.then
                } else {
                    &mut i.otherwise
                };
                let taken = std::mem::replace(taken.as_mut(), Block::empty());
                *block = taken;
                n += 1;
            }
        }
        Block::State(_) | Block::Assign(_) => {}
    }
    n
}
