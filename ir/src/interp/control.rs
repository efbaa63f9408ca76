//! Control flow: running an SDFG's [`Block`] tree over its states, and one SDFG
//! activation (argument checks, transient allocation).

use std::collections::BTreeMap;

use crate::control::Block;
use crate::dtype::Value;
use crate::sdfg::Sdfg;

use super::dataflow::exec_dataflow;
use super::frame::{Frame, err};
use super::{HostArray, InterpError, eval_shape};

/// Runs `sdfg` with the given symbol values over `arrays`, which must hold every
/// non-transient container (checked: dtype and shape). Transients are added zero-filled
/// and removed again at the end, whatever the outcome.
pub(crate) fn run_sdfg(
    sdfg: &Sdfg,
    symbols: BTreeMap<String, Value>,
    arrays: &mut BTreeMap<String, HostArray>,
) -> Result<(), InterpError> {
    let here = format!("sdfg '{}'", sdfg.name);
    let mut transients = Vec::new();
    let mut setup = || -> Result<(), InterpError> {
        for (name, desc) in &sdfg.arrays {
            let shape = eval_shape(desc, &symbols).map_err(|e| match desc.transient() {
                true => InterpError::Runtime {
                    location: String::new(),
                    message: format!("transient '{name}': cannot evaluate its shape: {e}"),
                },
                false => InterpError::BadArgument {
                    name: name.clone(),
                    message: format!("cannot evaluate its shape: {e}"),
                },
            })?;
            if desc.transient() {
                arrays.insert(name.clone(), HostArray::zeros(desc.dtype(), &shape));
                transients.push(name.clone());
                continue;
            }
            let a = arrays
                .get(name)
                .ok_or_else(|| InterpError::MissingArgument(name.clone()))?;
            if a.dtype() != desc.dtype() {
                return Err(InterpError::BadArgument {
                    name: name.clone(),
                    message: format!(
                        "dtype {} but the program declares {}",
                        a.dtype(),
                        desc.dtype()
                    ),
                });
            }
            if a.shape() != shape.as_slice() {
                return Err(InterpError::BadArgument {
                    name: name.clone(),
                    message: format!("shape {:?} but the program expects {:?}", a.shape(), shape),
                });
            }
        }
        Ok(())
    };
    let mut r = setup();
    if r.is_ok() {
        let mut frame = Frame {
            sdfg,
            symbols,
            arrays: &mut *arrays,
            params: Vec::new(),
        };
        r = exec_block(&mut frame, &sdfg.body);
    }
    for t in transients {
        arrays.remove(&t);
    }
    r.map_err(|e| match e {
        InterpError::Runtime { .. } => e.within(&here),
        other => other,
    })
}

fn exec_block(f: &mut Frame<'_>, b: &Block) -> Result<(), InterpError> {
    match b {
        Block::State(id) => {
            let st = f
                .sdfg
                .state(*id)
                .ok_or_else(|| err(format!("no state with index {}", id.index())))?;
            exec_dataflow(f, &st.graph).map_err(|e| e.within(&format!("state '{}'", st.name)))
        }
        Block::Seq(bs) => bs.iter().try_for_each(|b| exec_block(f, b)),
        Block::Loop(l) => {
            let here = format!("loop over '{}'", l.var);
            let init = f.sym(&l.init).map_err(|e| e.within(&here))?;
            f.symbols.insert(l.var.clone(), Value::I64(init));
            while f.sym(&l.cond).map_err(|e| e.within(&here))? != 0 {
                exec_block(f, &l.body)?;
                let next = f.sym(&l.update).map_err(|e| e.within(&here))?;
                f.symbols.insert(l.var.clone(), Value::I64(next));
            }
            Ok(())
        }
        Block::If(i) => {
            let c = f.sym(&i.cond).map_err(|e| e.within("if condition"))?;
            exec_block(f, if c != 0 { &i.then } else { &i.otherwise })
        }
        Block::Assign(asg) => {
            let vals = asg
                .iter()
                .map(|(n, e)| {
                    f.sym(e)
                        .map(|v| (n.clone(), v))
                        .map_err(|x| x.within(&format!("assignment to '{n}'")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            for (n, v) in vals {
                f.symbols.insert(n, Value::I64(v));
            }
            Ok(())
        }
    }
}
