//! Execution of one dataflow graph (a state's or a map body's): copies, tasklets, maps,
//! nested SDFGs and reductions, node by node in topological order.

use std::collections::{BTreeMap, BTreeSet};

use crate::dataflow::{Dataflow, LibraryNode, MapScope, NestedSdfg, Node, NodeId, Reduce, Tasklet};
use crate::dtype::{DType, Value};
use crate::memlet::Memlet;
use crate::symexpr::SymExpr;

use super::eval::eval_expr;
use super::frame::{Frame, err, unravel};
use super::{HostArray, InterpError, control, eval_shape, value};
use crate::typing::{Binding, TaskletNames};

/// Runs every node of `g` once, in [`Dataflow::topological_order`].
pub(crate) fn exec_dataflow(f: &mut Frame<'_>, g: &Dataflow) -> Result<(), InterpError> {
    let order = g.topological_order().map_err(|n| {
        err(format!(
            "the dataflow has a cycle through {}",
            g.node(n).describe()
        ))
    })?;
    for n in order {
        match g.node(n) {
            // A map adds its own location, with the parameter values.
            Node::Map(m) => exec_map(f, m)?,
            node => exec_node(f, g, n, node).map_err(|e| e.within(&node.describe()))?,
        }
    }
    Ok(())
}

fn exec_node(f: &mut Frame<'_>, g: &Dataflow, n: NodeId, node: &Node) -> Result<(), InterpError> {
    match node {
        Node::Access(dst) => {
            for e in g.in_edges(n) {
                let (src, _) = g.endpoints(e);
                if let Node::Access(s) = g.node(src) {
                    copy(f, s, dst, &g.edge(e).memlet)?;
                }
            }
            Ok(())
        }
        Node::Tasklet(t) => exec_tasklet(f, g, n, t),
        Node::Map(m) => exec_map(f, m),
        Node::Nested(ns) => exec_nested(f, g, n, ns),
        Node::Library(LibraryNode::Reduce(r)) => exec_reduce(f, g, n, r),
        Node::Library(LibraryNode::HaloExchange(h)) => exec_halo_exchange(f, g, n, h),
    }
}

/// A halo exchange of the containers through the node, on this thread's rank.
fn exec_halo_exchange(
    f: &mut Frame<'_>,
    g: &Dataflow,
    n: NodeId,
    h: &crate::dataflow::HaloExchange,
) -> Result<(), InterpError> {
    let mut names: Vec<String> = g
        .in_edges(n)
        .into_iter()
        .map(|e| g.edge(e).memlet.data.clone())
        .collect();
    names.sort();
    names.dedup();
    let mut fields = BTreeMap::new();
    for name in &names {
        let a = f
            .arrays
            .remove(name)
            .ok_or_else(|| super::frame::err(format!("no container '{name}'")))?;
        fields.insert(name.clone(), a);
    }
    // An unstructured decomposition's lists of the cells (read only).
    let mut index = BTreeMap::new();
    if let crate::dataflow::Decomposition::Unstructured { global, owner, .. } = &h.decomposition {
        for name in [global, owner] {
            let a = f.arrays.get(name).ok_or_else(|| {
                super::frame::err(format!("no container '{name}' (the decomposition's list)"))
            });
            match a {
                Ok(a) => {
                    index.insert(name.clone(), a.clone());
                }
                Err(e) => {
                    f.arrays.extend(fields);
                    return Err(e);
                }
            }
        }
    }
    let what = format!(
        "the halo exchange of {} ({})",
        names.join(", "),
        h.decomposition
    );
    let r = super::ranks::exchange(h, &what, &mut fields, index);
    f.arrays.extend(fields);
    r
}

/// Copies `src` to `dst` along a memlet, element by element in row-major order of the
/// subsets (all reads happen before the writes).
fn copy(f: &mut Frame<'_>, src: &str, dst: &str, m: &Memlet) -> Result<(), InterpError> {
    let other = m.other_subset.as_ref().unwrap_or(&m.subset);
    let (ss, ds) = if m.data == dst && m.data != src {
        (other, &m.subset)
    } else {
        (&m.subset, other)
    };
    let (_, sp) = f.points(src, ss)?;
    let (_, dp) = f.points(dst, ds)?;
    if sp.len() != dp.len() {
        return Err(err(format!(
            "copy {m}: {} element(s) from '{src}' but {} into '{dst}'",
            sp.len(),
            dp.len()
        )));
    }
    let vals = sp
        .iter()
        .map(|p| f.read(src, p))
        .collect::<Result<Vec<_>, _>>()?;
    for (p, v) in dp.iter().zip(vals) {
        f.write(dst, p, v, m.wcr)?;
    }
    Ok(())
}

fn exec_tasklet(
    f: &mut Frame<'_>,
    g: &Dataflow,
    n: NodeId,
    t: &Tasklet,
) -> Result<(), InterpError> {
    let mut env: BTreeMap<String, Value> = BTreeMap::new();
    // Inputs the code reads only under a lazy condition are read where it evaluates
    // them; every other input is read now, in edge order.
    let lazy_names = t.lazy_inputs();
    let mut lazy: BTreeMap<String, &Memlet> = BTreeMap::new();
    for e in g.in_edges(n) {
        let edge = g.edge(e);
        let Some(c) = &edge.dst_conn else { continue };
        let m = &edge.memlet;
        if lazy_names.contains(c.as_str()) {
            lazy.insert(c.clone(), m);
            continue;
        }
        let idx = f.element(&m.data, &m.subset)?;
        let v = f.read(&m.data, &idx)?;
        let v = t.inputs.get(c).map_or(v, |dt| v.cast(*dt));
        env.insert(c.clone(), v);
    }
    let mut assigned = BTreeSet::new();
    let mut names = TaskletNames::new(t);
    for s in &t.code {
        let fr: &Frame<'_> = f;
        let is_param = |p: &str| fr.params.iter().any(|(q, _)| q == p);
        let symbol = |n: &str| fr.symbols.get(n).map(|v| v.dtype());
        // A failed lazy read is reported as itself, not as an expression error.
        let mut failed_read: Option<InterpError> = None;
        let v = eval_expr(
            &s.value,
            &mut |name| {
                let missing = || format!("name '{name}' has no value");
                match names
                    .resolve(name, &is_param, &symbol)
                    .ok_or_else(missing)?
                    .0
                {
                    Binding::Input if lazy.contains_key(name) && !env.contains_key(name) => {
                        let m = lazy[name];
                        let read = fr
                            .element(&m.data, &m.subset)
                            .and_then(|idx| fr.read(&m.data, &idx));
                        match read {
                            Ok(v) => {
                                let v = t.inputs.get(name).map_or(v, |dt| v.cast(*dt));
                                env.insert(name.to_string(), v);
                                Ok(v)
                            }
                            Err(e) => {
                                let msg = e.to_string();
                                failed_read = Some(e);
                                Err(msg)
                            }
                        }
                    }
                    Binding::Input | Binding::Local | Binding::Output => {
                        env.get(name).copied().ok_or_else(missing)
                    }
                    Binding::Param | Binding::Symbol => fr.value_of(name).ok_or_else(missing),
                }
            },
            &|name| names.resolve(name, &is_param, &symbol).map(|(_, t)| t),
        );
        let v = match (v, failed_read) {
            (Ok(v), _) => v,
            (Err(_), Some(e)) => return Err(e),
            (Err(m), None) => return Err(err(format!("{m} (in '{s}')"))),
        };
        let v = t
            .outputs
            .get(&s.target)
            .map_or(v, |dt| value::canonical(v.cast(*dt)));
        names.assign(&s.target, v.dtype());
        env.insert(s.target.clone(), v);
        assigned.insert(s.target.clone());
    }
    for e in g.out_edges(n) {
        let edge = g.edge(e);
        let Some(c) = &edge.src_conn else { continue };
        let v = match env.get(c) {
            Some(v) if assigned.contains(c) => *v,
            _ => return Err(err(format!("output '{c}' is never assigned"))),
        };
        let m = &edge.memlet;
        let idx = f.element(&m.data, &m.subset)?;
        f.write(&m.data, &idx, v, m.wcr)?;
    }
    Ok(())
}

fn exec_map(f: &mut Frame<'_>, m: &MapScope) -> Result<(), InterpError> {
    let here = format!("map '{}'", m.label);
    if m.params.len() != m.ranges.len() {
        return Err(err(format!(
            "{} parameter(s) but {} range(s)",
            m.params.len(),
            m.ranges.len()
        ))
        .within(&here));
    }
    let mut ranges = Vec::with_capacity(m.ranges.len());
    for r in &m.ranges {
        let (s, e, st) = (f.sym(&r.start), f.sym(&r.end), f.sym(&r.step));
        let (s, e, st) = (
            s.map_err(|x| x.within(&here))?,
            e.map_err(|x| x.within(&here))?,
            st.map_err(|x| x.within(&here))?,
        );
        if st <= 0 {
            return Err(err(format!("range {r} has step {st}; it must be positive")).within(&here));
        }
        if s >= e {
            return Ok(());
        }
        ranges.push((s, e, st));
    }
    let base = f.params.len();
    for (p, (s, _, _)) in m.params.iter().zip(&ranges) {
        f.params.push((p.clone(), *s));
    }
    let r = iterate(f, m, base, &ranges);
    f.params.truncate(base);
    r
}

fn iterate(
    f: &mut Frame<'_>,
    m: &MapScope,
    base: usize,
    ranges: &[(i64, i64, i64)],
) -> Result<(), InterpError> {
    loop {
        exec_dataflow(f, &m.body).map_err(|e| {
            let at: Vec<String> = f.params[base..]
                .iter()
                .map(|(p, v)| format!("{p}={v}"))
                .collect();
            e.within(&format!("map '{}' at {}", m.label, at.join(", ")))
        })?;
        // Advance the odometer, innermost parameter fastest.
        let mut k = ranges.len();
        loop {
            if k == 0 {
                return Ok(());
            }
            k -= 1;
            let (s, e, st) = ranges[k];
            let cur = &mut f.params[base + k].1;
            match cur.checked_add(st) {
                Some(n) if n < e => {
                    *cur = n;
                    break;
                }
                _ => *cur = s,
            }
        }
    }
}

/// Copies `data[subset]` of the caller into a whole inner array.
fn copy_in(f: &Frame<'_>, m: &Memlet, arr: &mut HostArray, conn: &str) -> Result<(), InterpError> {
    let (_, pts) = f.points(&m.data, &m.subset)?;
    if pts.len() != arr.len() {
        return Err(err(format!(
            "connector '{conn}': memlet {m} moves {} element(s) but the inner array has {}",
            pts.len(),
            arr.len()
        )));
    }
    for (k, p) in pts.iter().enumerate() {
        let v = f.read(&m.data, p)?;
        arr.set_flat(k, v);
    }
    Ok(())
}

fn exec_nested(
    f: &mut Frame<'_>,
    g: &Dataflow,
    n: NodeId,
    ns: &NestedSdfg,
) -> Result<(), InterpError> {
    let inner = &*ns.sdfg;
    let mut syms: BTreeMap<String, Value> = BTreeMap::new();
    for (k, s) in &inner.symbols {
        if let Some(v) = s.value {
            syms.insert(k.clone(), v);
        }
    }
    for (k, e) in &ns.symbol_mapping {
        let dt = inner.symbols.get(k).map_or(DType::I64, |s| s.dtype);
        // A float or bool symbol is mapped to a caller symbol of its type, passed as is.
        let v = match e {
            SymExpr::Sym(name) if !dt.is_int() => f
                .value_of(name)
                .ok_or_else(|| err(format!("symbol '{name}' mapped to '{k}' has no value")))?,
            _ => Value::I64(f.sym(e)?),
        };
        syms.insert(k.clone(), v.cast(dt));
    }
    let fresh = |c: &str| -> Result<HostArray, InterpError> {
        let desc = inner
            .arrays
            .get(c)
            .filter(|d| !d.transient())
            .ok_or_else(|| {
                err(format!(
                    "connector '{c}' is not a non-transient container of '{}'",
                    inner.name
                ))
            })?;
        let shape = eval_shape(desc, &syms).map_err(|e| e.within(&format!("shape of '{c}'")))?;
        Ok(HostArray::zeros(desc.dtype(), &shape))
    };
    let mut arrays: BTreeMap<String, HostArray> = BTreeMap::new();
    for e in g.in_edges(n) {
        let edge = g.edge(e);
        let Some(c) = &edge.dst_conn else { continue };
        let mut a = fresh(c)?;
        copy_in(f, &edge.memlet, &mut a, c)?;
        arrays.insert(c.clone(), a);
    }
    for e in g.out_edges(n) {
        let edge = g.edge(e);
        let Some(c) = &edge.src_conn else { continue };
        if arrays.contains_key(c) {
            continue;
        }
        let mut a = fresh(c)?;
        match edge.memlet.wcr {
            None => copy_in(f, &edge.memlet, &mut a, c)?,
            // Elements the callee does not write then leave the caller's values unchanged.
            Some(op) => a.fill(value::wcr_identity(op, a.dtype())),
        }
        arrays.insert(c.clone(), a);
    }
    control::run_sdfg(inner, syms, &mut arrays)?;
    for e in g.out_edges(n) {
        let edge = g.edge(e);
        let Some(c) = &edge.src_conn else { continue };
        let m = &edge.memlet;
        let a = arrays
            .get(c)
            .ok_or_else(|| err(format!("connector '{c}' has no array")))?;
        let (_, pts) = f.points(&m.data, &m.subset)?;
        if pts.len() != a.len() {
            return Err(err(format!(
                "connector '{c}': memlet {m} moves {} element(s) but the inner array has {}",
                pts.len(),
                a.len()
            )));
        }
        for (k, p) in pts.iter().enumerate() {
            let v = a
                .get_flat(k)
                .ok_or_else(|| err(format!("connector '{c}': element {k} missing")))?;
            f.write(&m.data, p, v, m.wcr)?;
        }
    }
    Ok(())
}

fn exec_reduce(f: &mut Frame<'_>, g: &Dataflow, n: NodeId, r: &Reduce) -> Result<(), InterpError> {
    let input = g
        .in_edges(n)
        .into_iter()
        .map(|e| g.edge(e))
        .find(|e| e.dst_conn.as_deref() == Some("in"))
        .ok_or_else(|| err("no input edge on connector 'in'"))?;
    let output = g
        .out_edges(n)
        .into_iter()
        .map(|e| g.edge(e))
        .find(|e| e.src_conn.as_deref() == Some("out"))
        .ok_or_else(|| err("no output edge on connector 'out'"))?;
    let (im, om) = (&input.memlet, &output.memlet);
    let (sizes, pts) = f.points(&im.data, &im.subset)?;
    let axes: Vec<usize> = r.axes.clone().unwrap_or_else(|| (0..sizes.len()).collect());
    if let Some(a) = axes.iter().find(|a| **a >= sizes.len()) {
        return Err(err(format!(
            "axis {a} out of range for a {}-dimensional input",
            sizes.len()
        )));
    }
    let kept: Vec<usize> = (0..sizes.len()).filter(|d| !axes.contains(d)).collect();
    let out_sizes: Vec<usize> = kept.iter().map(|d| sizes[*d]).collect();
    let out_len: usize = out_sizes.iter().product();
    let in_dtype = f.arrays.get(&im.data).map_or(DType::F64, HostArray::dtype);
    let mut acc: Vec<Option<Value>> = vec![r.identity.map(|v| v.cast(in_dtype)); out_len];
    for (k, p) in pts.iter().enumerate() {
        let pos = unravel(k, &sizes);
        let o = kept
            .iter()
            .zip(&out_sizes)
            .fold(0usize, |o, (d, n)| o * n + pos[*d]);
        let v = f.read(&im.data, p)?;
        acc[o] = Some(match acc[o] {
            None => v,
            Some(a) => value::combine(r.op, a, v).map_err(err)?,
        });
    }
    let (_, ops) = f.points(&om.data, &om.subset)?;
    if ops.len() != out_len {
        return Err(err(format!(
            "the reduction yields {out_len} element(s) but {om} has {}",
            ops.len()
        )));
    }
    for (p, v) in ops.iter().zip(acc) {
        let v = v.ok_or_else(|| err("reduction of no elements without an identity"))?;
        f.write(&om.data, p, v, om.wcr)?;
    }
    Ok(())
}
