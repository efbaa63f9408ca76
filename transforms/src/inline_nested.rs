//! Inlining of nested SDFGs: a nested SDFG called from a state (not from a map body)
//! becomes part of the caller. The caller's state is split around the call — what the
//! call depends on, the callee's own states and control flow, what follows — and the
//! callee's containers become the caller's: each connector the caller data its memlet
//! names (its indices shifted by where the memlet's subset starts), each transient a new
//! caller transient, each symbol the caller expression the symbol mapping gives (or a new
//! caller symbol). State fusion then joins the pieces where their accesses allow, and the
//! callee's maps meet the caller's passes: GT4Py lowers every `let` of a program to a
//! nested SDFG whose body is the rest of the program, which the code generator would run
//! as one sequential call. Callees inside map bodies are spliced in only when they are
//! straight-line code on single elements ([`inline_map_callees`]).
//!
//! ```text
//! state S: u ─► nested f { a ─► map ─► t ─► map ─► b } ─► out ─► map g ─► v
//!                                      →
//! state S:   (what the call depends on)
//! f's states: u ─► map ─► t' ─► map ─► out        (a = u, b = out, t' a new transient)
//! state S':  out ─► map g ─► v
//! ```
//!
//! Legality. A nested SDFG copies its arguments in and its results out; inlined, the
//! callee works on the caller's data in place, which is the same whenever no container
//! is seen through two names: every caller container bound to a written connector is
//! bound to no other connector, an input-only connector is never written by the callee,
//! and no output edge combines with a write-conflict resolution. Each connector's memlet
//! must select a box of the caller's container (indices and unit-step ranges, one range
//! per callee dimension). Mapped symbol values must not be captured by the callee's map
//! parameters, and tasklet code may read only mapped symbols whose value is a name. The
//! caller's nodes that neither feed nor follow the call run after it, so they must not
//! touch what the call or its inputs' producers write. Anything else keeps the call as
//! it is, with a note in the report saying why.
//!
//! Why one file of this size: the pass's legality (what may be inlined, and why not)
//! and its rewrite (symbol and connector mappings substituted, copies kept where
//! aliasing requires) read the same analysis of the call; they are kept together so
//! that a rule and its exception are read side by side.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use sdflow_ir::{
    Block, DataDesc, Dataflow, Dim, Edge, Expr, Memlet, NestedSdfg, Node, NodeId, Sdfg, StateId,
    Subset, SymExpr, Symbol,
};

use crate::pass::{Changes, Pass};
use crate::pattern::{fresh_name, remove_isolated_access_nodes, substitute_control};

/// See the module documentation.
pub struct InlineNested;

impl Pass for InlineNested {
    fn name(&self) -> &'static str {
        "inline_nested"
    }

    fn run(&self, sdfg: &mut Sdfg) -> Changes {
        let mut ch = Changes::default();
        let mut kept: BTreeMap<String, String> = BTreeMap::new();
        // One call at a time: inlining renumbers states and may expose the callee's own
        // state-level calls, which the next sweep finds.
        'sweep: loop {
            for s in sdfg.body.states() {
                let df = &sdfg.states[s.index()].graph;
                for n in df.node_ids() {
                    let Node::Nested(ns) = df.node(n) else {
                        continue;
                    };
                    match plan(sdfg, s, n, ns) {
                        Ok(p) => {
                            apply(sdfg, s, n, p);
                            ch.add("nested_inlined", 1);
                            continue 'sweep;
                        }
                        Err(why) => {
                            let state = &sdfg.states[s.index()].name;
                            kept.insert(
                                format!("{state}/{}", ns.sdfg.name),
                                format!(
                                    "kept nested SDFG '{}' in state '{state}': {why}",
                                    ns.sdfg.name
                                ),
                            );
                        }
                    }
                }
            }
            break;
        }
        ch.notes.extend(kept.into_values());
        let (spliced, selected) = inline_map_callees(sdfg);
        ch.add("nested_inlined_in_maps", spliced);
        ch.add("nested_ifs_selected", selected);
        ch
    }
}

/// How a callee container's indices become the caller's: one entry per dimension of the
/// caller's container.
#[derive(Clone, Debug)]
enum OuterDim {
    /// A fixed index of the caller's container (a dimension the callee does not see).
    Fixed(SymExpr),
    /// The next callee dimension, shifted by this start.
    Shift(SymExpr),
}

/// What a callee container becomes in the caller.
#[derive(Clone, Debug)]
struct Target {
    /// The caller's container.
    data: String,
    /// The index map; `None` for a plain rename (same indices).
    dims: Option<Vec<OuterDim>>,
    /// The callee's shape (in caller terms), for memlets with an empty subset (the whole
    /// container).
    shape: Vec<SymExpr>,
}

/// An inlining ready to apply: the callee rewritten in the caller's names, and what to
/// add to the caller.
struct Plan {
    callee: Sdfg,
    new_arrays: Vec<(String, DataDesc)>,
    new_symbols: Vec<(String, Symbol)>,
}

/// A connector's binding: the caller container, the memlet subset, and the directions.
struct Binding {
    data: String,
    subset: Subset,
    read: bool,
    written: bool,
}

fn plan(sdfg: &Sdfg, s: StateId, n: NodeId, ns: &NestedSdfg) -> Result<Plan, String> {
    let uses = sdfg.body.states().iter().filter(|x| **x == s).count();
    if uses != 1 {
        return Err(format!("the control flow runs its state {uses} times"));
    }
    let df = &sdfg.states[s.index()].graph;
    let inner = &*ns.sdfg;
    let bindings = bindings(sdfg, df, n, inner)?;
    split_is_legal(df, n, &bindings)?;

    // Containers the callee writes anywhere (access nodes with in-edges).
    let mut written_inside = BTreeSet::new();
    for st in &inner.states {
        written_data(&st.graph, &mut written_inside);
    }
    let mut used_inside = BTreeSet::new();
    for st in &inner.states {
        st.graph.for_each_accessed(&mut |d| {
            used_inside.insert(d.to_string());
        });
    }
    for (name, desc) in inner.non_transients() {
        match bindings.get(name) {
            None if used_inside.contains(name) => {
                return Err(format!("container '{name}' is used but not connected"));
            }
            Some(b) if !b.written && written_inside.contains(name) => {
                return Err(format!(
                    "it writes its input '{name}' (a copy, the caller's data unchanged)"
                ));
            }
            Some(b) => {
                let outer = sdfg.arrays.get(&b.data).map(DataDesc::dtype);
                if outer != Some(desc.dtype()) {
                    return Err(format!(
                        "connector '{name}' is {} but '{}' is not",
                        desc.dtype().name(),
                        b.data
                    ));
                }
            }
            None => {}
        }
    }

    // Symbols: mapped ones become the caller's expressions; the others (static values,
    // symbols the callee's control flow assigns) become caller symbols.
    let assigned = inner.loop_and_assigned_symbols();
    let mut subst: BTreeMap<String, SymExpr> = BTreeMap::new();
    let mut new_symbols = Vec::new();
    let mut taken: BTreeSet<String> = BTreeSet::new();
    let fresh = |base: &str, taken: &mut BTreeSet<String>| -> String {
        let mut name = fresh_name(sdfg, base);
        let mut k = 1;
        while taken.contains(&name) {
            name = fresh_name(sdfg, &format!("{base}_{k}"));
            k += 1;
        }
        taken.insert(name.clone());
        name
    };
    for (k, sym) in &inner.symbols {
        if let Some(v) = ns.symbol_mapping.get(k) {
            subst.insert(k.clone(), v.clone());
            continue;
        }
        if sym.value.is_none() && !assigned.contains(k) {
            return Err(format!("symbol '{k}' has no value and no mapping"));
        }
        let name = fresh(k, &mut taken);
        if name != *k {
            subst.insert(k.clone(), SymExpr::sym(&name));
        }
        new_symbols.push((name, sym.clone()));
    }
    // Transients become caller transients under fresh names.
    let mut targets: BTreeMap<String, Target> = BTreeMap::new();
    let mut new_arrays = Vec::new();
    let shape_of = |d: &DataDesc| -> Vec<SymExpr> {
        d.shape()
            .iter()
            .map(|e| e.substitute(&subst).simplify())
            .collect()
    };
    let mut transient_renames = BTreeMap::new();
    for (name, desc) in inner.arrays.iter().filter(|(_, d)| d.transient()) {
        let new = fresh(name, &mut taken);
        transient_renames.insert(name.clone(), new.clone());
        let mut desc = desc.clone();
        if let DataDesc::Array(a) = &mut desc {
            for e in a.shape.iter_mut().chain(a.strides.iter_mut()) {
                *e = e.substitute(&subst).simplify();
            }
        }
        targets.insert(
            name.clone(),
            Target {
                data: new.clone(),
                dims: None,
                shape: desc.shape().to_vec(),
            },
        );
        new_arrays.push((new, desc));
    }
    // Symbolic expressions may name scalar containers (read by the host): renamed
    // transients and connectors bound to a caller scalar follow their container.
    let mut names_to_data = BTreeMap::new();
    for (old, new) in &transient_renames {
        if old != new {
            names_to_data.insert(old.clone(), SymExpr::sym(new));
        }
    }
    for (c, b) in &bindings {
        let desc = &inner.arrays[c];
        let dims = index_map(&b.subset, desc.rank())
            .ok_or_else(|| format!("connector '{c}' is bound to '{}[{}]', not a box of it with one range per dimension of the connector", b.data, b.subset))?;
        let plain = dims
            .iter()
            .all(|d| matches!(d, OuterDim::Shift(x) if x.as_int() == Some(0)))
            && sdfg.arrays.get(&b.data).map(DataDesc::rank) == Some(desc.rank());
        if desc.rank() == 0 && dims.is_empty() {
            names_to_data.insert(c.clone(), SymExpr::sym(&b.data));
        }
        targets.insert(
            c.clone(),
            Target {
                data: b.data.clone(),
                dims: (!plain).then_some(dims),
                shape: shape_of(desc),
            },
        );
    }
    // Connectors bound to an element of a caller array cannot be named by symbolic
    // expressions (the host reads scalars only).
    let mut named = crate::pattern::control_names(&inner.body);
    for st in &inner.states {
        sym_names(&st.graph, &mut named);
    }
    if let Some(c) = bindings
        .keys()
        .find(|c| named.contains(*c) && !names_to_data.contains_key(*c))
    {
        return Err(format!(
            "a symbolic expression reads connector '{c}', bound to an element of '{}'",
            bindings[c].data
        ));
    }

    // Mapped values must not be captured by the callee's map parameters.
    let mut params = BTreeSet::new();
    for st in &inner.states {
        map_params(&st.graph, &mut params);
    }
    for (k, v) in &subst {
        if let Some(p) = v.free_symbols().iter().find(|p| params.contains(*p)) {
            return Err(format!(
                "symbol '{k}' maps to '{v}', which names '{p}', a map parameter inside"
            ));
        }
    }
    let mut all = subst.clone();
    all.extend(names_to_data);
    let code_renames: BTreeMap<String, Option<String>> = all
        .iter()
        .map(|(k, v)| {
            let name = match v {
                SymExpr::Sym(x) => Some(x.to_string()),
                _ => None,
            };
            (k.clone(), name)
        })
        .collect();

    // The callee in the caller's names.
    let mut callee = inner.clone();
    for st in &mut callee.states {
        substitute(&mut st.graph, &all, &code_renames, &BTreeSet::new())
            .map_err(|v| format!("tasklet code reads '{v}', mapped to '{}'", all[&v]))?;
        remap(&mut st.graph, &targets)?;
    }
    substitute_control(&mut callee.body, &all);
    rename_control_targets(&mut callee.body, &all);
    Ok(Plan {
        callee,
        new_arrays,
        new_symbols,
    })
}

/// The connectors of nested node `n` and what they are bound to, checked for aliasing.
fn bindings(
    sdfg: &Sdfg,
    df: &Dataflow,
    n: NodeId,
    inner: &Sdfg,
) -> Result<BTreeMap<String, Binding>, String> {
    let mut out: BTreeMap<String, Binding> = BTreeMap::new();
    let edges = df.edges_both(n);
    for (e, input) in edges {
        let Edge {
            src_conn,
            dst_conn,
            memlet,
        } = df.edge(e);
        let (conn, other) = if input {
            (dst_conn, df.endpoints(e).0)
        } else {
            (src_conn, df.endpoints(e).1)
        };
        let Some(c) = conn else {
            return Err("an edge has no connector".into());
        };
        if df.node(other).as_access() != Some(memlet.data.as_str()) {
            return Err(format!(
                "connector '{c}' is not connected to an access node of '{}'",
                memlet.data
            ));
        }
        if memlet.wcr.is_some() {
            return Err(format!(
                "the result of connector '{c}' combines with a write-conflict resolution"
            ));
        }
        if memlet.other_subset.is_some() {
            return Err(format!("the memlet of connector '{c}' has a second subset"));
        }
        if inner.arrays.get(c).is_none_or(|d| d.transient()) {
            return Err(format!("connector '{c}' is not an argument of the callee"));
        }
        let subset = if memlet.subset.0.is_empty() {
            let shape = sdfg.arrays.get(&memlet.data).map(DataDesc::shape);
            Subset::full(shape.unwrap_or_default())
        } else {
            memlet.subset.clone()
        };
        match out.get_mut(c) {
            Some(b) => {
                if b.data != memlet.data || b.subset != subset {
                    return Err(format!(
                        "connector '{c}' reads '{}[{}]' but writes '{}[{subset}]'",
                        b.data, b.subset, memlet.data
                    ));
                }
                b.read |= input;
                b.written |= !input;
            }
            None => {
                out.insert(
                    c.clone(),
                    Binding {
                        data: memlet.data.clone(),
                        subset,
                        read: input,
                        written: !input,
                    },
                );
            }
        }
    }
    // A written container is seen through one connector only.
    for (c, b) in &out {
        if b.written
            && let Some((d, _)) = out.iter().find(|(d, o)| *d != c && o.data == b.data)
        {
            return Err(format!(
                "connectors '{c}' and '{d}' are both bound to '{}', and '{c}' is written",
                b.data
            ));
        }
    }
    Ok(out)
}

/// The index map of a connector bound to `subset` of a caller container, for a callee
/// container of rank `rank`: `None` when the subset is not a box with exactly `rank`
/// unit-step ranges.
fn index_map(subset: &Subset, rank: usize) -> Option<Vec<OuterDim>> {
    let mut dims = Vec::new();
    for d in &subset.0 {
        match d {
            Dim::Index(e) => dims.push(OuterDim::Fixed(e.clone())),
            Dim::Range { start, step, .. } if step.as_int() == Some(1) => {
                dims.push(OuterDim::Shift(start.clone()))
            }
            _ => return None,
        }
    }
    let ranges = dims
        .iter()
        .filter(|d| matches!(d, OuterDim::Shift(_)))
        .count();
    (ranges == rank).then_some(dims)
}

/// Checks that the caller's state can be split around the call: its nodes that neither
/// feed nor follow the call (run after it once split) touch nothing the call or the
/// nodes feeding it write, and read nothing they write.
fn split_is_legal(
    df: &Dataflow,
    n: NodeId,
    bindings: &BTreeMap<String, Binding>,
) -> Result<(), String> {
    let (before, after) = (ancestors(df, n), descendants(df, n));
    let (mut reads, mut writes): (BTreeSet<String>, BTreeSet<String>) = (
        bindings
            .values()
            .filter(|b| b.read)
            .map(|b| b.data.clone())
            .collect(),
        bindings
            .values()
            .filter(|b| b.written)
            .map(|b| b.data.clone())
            .collect(),
    );
    for &m in &before {
        let (r, w) = node_access(df, m);
        reads.extend(r);
        writes.extend(w);
    }
    // Once split, a value flows from before the call to after it through memory only.
    for e in df.edge_ids() {
        let (a, b) = df.endpoints(e);
        if before.contains(&a) && b != n && !before.contains(&b) && df.node(a).as_access().is_none()
        {
            return Err(format!(
                "{} feeds both the call and {} directly",
                df.node(a).describe(),
                df.node(b).describe()
            ));
        }
    }
    for m in df.node_ids() {
        if m == n || before.contains(&m) || after.contains(&m) {
            continue;
        }
        let (r, w) = node_access(df, m);
        if let Some(d) = w.iter().find(|d| reads.contains(*d) || writes.contains(*d)) {
            return Err(format!(
                "{} writes '{d}' with no order to the call",
                df.node(m).describe()
            ));
        }
        if let Some(d) = r.iter().find(|d| writes.contains(*d)) {
            return Err(format!(
                "{} reads '{d}' with no order to the call",
                df.node(m).describe()
            ));
        }
    }
    Ok(())
}

/// What one state-level node reads and writes: an access node its own container (read
/// when it has out-edges, written when it has in-edges), any other node its edges'
/// containers and tables.
fn node_access(df: &Dataflow, m: NodeId) -> (BTreeSet<String>, BTreeSet<String>) {
    match df.node(m).as_access() {
        Some(d) => {
            let mut r = BTreeSet::new();
            let mut w = BTreeSet::new();
            if df.out_degree(m) > 0 {
                r.insert(d.to_string());
            }
            if df.in_degree(m) > 0 {
                w.insert(d.to_string());
            }
            (r, w)
        }
        None => crate::pattern::node_reads_writes(df, m),
    }
}

fn ancestors(df: &Dataflow, n: NodeId) -> BTreeSet<NodeId> {
    walk(df, n, petgraph::Direction::Incoming)
}

fn descendants(df: &Dataflow, n: NodeId) -> BTreeSet<NodeId> {
    walk(df, n, petgraph::Direction::Outgoing)
}

fn walk(df: &Dataflow, n: NodeId, dir: petgraph::Direction) -> BTreeSet<NodeId> {
    let mut seen = BTreeSet::new();
    let mut queue = VecDeque::from([n]);
    while let Some(x) = queue.pop_front() {
        for y in df.graph.neighbors_directed(x, dir) {
            if seen.insert(y) {
                queue.push_back(y);
            }
        }
    }
    seen
}

/// Containers written anywhere in `df` (access nodes with in-edges, map bodies too).
fn written_data(df: &Dataflow, out: &mut BTreeSet<String>) {
    for m in df.node_ids() {
        match df.node(m) {
            Node::Access(d) if df.in_degree(m) > 0 => {
                out.insert(d.clone());
            }
            Node::Map(map) => written_data(&map.body, out),
            _ => {}
        }
    }
}

/// Map parameters anywhere in `df`.
fn map_params(df: &Dataflow, out: &mut BTreeSet<String>) {
    for m in df.graph.node_weights() {
        if let Node::Map(map) = m {
            out.extend(map.params.iter().cloned());
            map_params(&map.body, out);
        }
    }
}

/// Names read by the symbolic expressions of `df` (memlets, ranges, symbol mappings).
fn sym_names(df: &Dataflow, out: &mut BTreeSet<String>) {
    for m in df.graph.node_weights() {
        match m {
            Node::Map(map) => {
                for r in &map.ranges {
                    for e in [&r.start, &r.end, &r.step] {
                        out.extend(e.free_symbols());
                    }
                }
                sym_names(&map.body, out);
            }
            Node::Nested(ns) => {
                for v in ns.symbol_mapping.values() {
                    out.extend(v.free_symbols());
                }
            }
            _ => {}
        }
    }
    for e in df.graph.edge_weights() {
        out.extend(e.memlet.subset.free_symbols());
        if let Some(o) = &e.memlet.other_subset {
            out.extend(o.free_symbols());
        }
    }
}

/// Substitutes `map` in every symbolic expression of `df` (map parameters shadow), and
/// renames the names of `code` in tasklet code where no connector, local or map parameter
/// shadows them. Returns the name read by tasklet code whose value is not a name.
fn substitute(
    df: &mut Dataflow,
    map: &BTreeMap<String, SymExpr>,
    code: &BTreeMap<String, Option<String>>,
    shadow: &BTreeSet<String>,
) -> Result<(), String> {
    let f = |e: &SymExpr| e.substitute(map).simplify();
    for n in df.node_ids() {
        match &mut df.graph[n] {
            Node::Map(m) => {
                for r in &mut m.ranges {
                    r.start = f(&r.start);
                    r.end = f(&r.end);
                    r.step = f(&r.step);
                }
                let mut inner = map.clone();
                let mut inner_code = code.clone();
                let mut inner_shadow = shadow.clone();
                for p in &m.params {
                    inner.remove(p);
                    inner_code.remove(p);
                    inner_shadow.insert(p.clone());
                }
                substitute(&mut m.body, &inner, &inner_code, &inner_shadow)?;
            }
            Node::Tasklet(t) => {
                let own: BTreeSet<String> = t
                    .inputs
                    .keys()
                    .chain(t.outputs.keys())
                    .cloned()
                    .chain(t.code.iter().map(|s| s.target.clone()))
                    .collect();
                let mut bad = None;
                for st in &mut t.code {
                    st.value = st.value.replace_vars(&|v| {
                        if own.contains(v) || shadow.contains(v) {
                            return None;
                        }
                        match code.get(v) {
                            Some(Some(x)) => Some(Expr::var(x)),
                            _ => None,
                        }
                    });
                    for v in st.value.vars() {
                        if !own.contains(&v) && matches!(code.get(&v), Some(None)) {
                            bad = Some(v);
                        }
                    }
                }
                if let Some(v) = bad {
                    return Err(v);
                }
            }
            Node::Nested(ns) => {
                for v in ns.symbol_mapping.values_mut() {
                    *v = f(v);
                }
            }
            _ => {}
        }
    }
    for e in df.edge_ids() {
        let m = &mut df.graph[e].memlet;
        m.subset = m.subset.map_exprs(&f);
        if let Some(o) = &mut m.other_subset {
            *o = o.map_exprs(&f);
        }
    }
    Ok(())
}

/// Loop variables and assigned symbols renamed with the symbolic expressions.
fn rename_control_targets(block: &mut Block, map: &BTreeMap<String, SymExpr>) {
    let rename = |name: &mut String| {
        if let Some(SymExpr::Sym(x)) = map.get(name.as_str()) {
            *name = x.to_string();
        }
    };
    match block {
        Block::Seq(items) => items
            .iter_mut()
            .for_each(|b| rename_control_targets(b, map)),
        Block::Loop(l) => {
            rename(&mut l.var);
            rename_control_targets(&mut l.body, map);
        }
        Block::If(i) => {
            rename_control_targets(&mut i.then, map);
            rename_control_targets(&mut i.otherwise, map);
        }
        Block::Assign(a) => a.iter_mut().for_each(|(n, _)| rename(n)),
        Block::State(_) => {}
    }
}

/// Moves every memlet and access node of `df` (map bodies too) from callee containers to
/// their caller targets.
fn remap(df: &mut Dataflow, targets: &BTreeMap<String, Target>) -> Result<(), String> {
    for e in df.edge_ids() {
        let (a, b) = df.endpoints(e);
        let (na, nb) = (
            df.node(a).as_access().map(str::to_string),
            df.node(b).as_access().map(str::to_string),
        );
        let m = &mut df.graph[e].memlet;
        // The container `other_subset` indexes: the copy's other end.
        let other_data = match (&na, &nb) {
            (Some(x), Some(y)) => Some(if *x == m.data { y.clone() } else { x.clone() }),
            _ => None,
        };
        if let Some(o) = m.other_subset.take() {
            let Some(od) = other_data else {
                return Err(format!("memlet '{m}' has a second subset off a copy"));
            };
            m.other_subset = Some(remap_tables(&remap_subset(&o, targets.get(&od))?, targets));
        }
        let own = targets.get(&m.data);
        m.subset = remap_tables(&remap_subset(&m.subset, own)?, targets);
        if let Some(t) = own {
            m.data = t.data.clone();
        }
    }
    for n in df.node_ids() {
        match &mut df.graph[n] {
            Node::Access(d) => {
                if let Some(t) = targets.get(d.as_str()) {
                    *d = t.data.clone();
                }
            }
            Node::Map(m) => remap(&mut m.body, targets)?,
            _ => {}
        }
    }
    Ok(())
}

/// A subset of a callee container as a subset of its caller target.
fn remap_subset(s: &Subset, target: Option<&Target>) -> Result<Subset, String> {
    let Some(Target {
        dims: Some(dims),
        shape,
        data,
    }) = target
    else {
        return Ok(s.clone());
    };
    let full;
    let s = if s.0.is_empty() && !shape.is_empty() {
        full = Subset::full(shape);
        &full
    } else {
        s
    };
    let mut inner = s.0.iter();
    let mut out = Vec::with_capacity(dims.len());
    for d in dims {
        match d {
            OuterDim::Fixed(e) => out.push(Dim::Index(e.clone())),
            OuterDim::Shift(start) => {
                let Some(x) = inner.next() else {
                    return Err(format!(
                        "a subset of rank {} of '{data}' is too short",
                        s.rank()
                    ));
                };
                out.push(crate::pattern::shift_dim(x, start));
            }
        }
    }
    if inner.next().is_some() {
        return Err(format!(
            "a subset of rank {} of '{data}' is too long",
            s.rank()
        ));
    }
    Ok(Subset(out))
}

/// Index tables of indirect dimensions moved to their caller targets.
fn remap_tables(s: &Subset, targets: &BTreeMap<String, Target>) -> Subset {
    Subset(
        s.0.iter()
            .map(|d| match d {
                Dim::Indirect {
                    table,
                    index,
                    offset,
                } => match targets.get(table) {
                    Some(t) => {
                        let index = match &t.dims {
                            None => index.clone(),
                            Some(dims) => {
                                let mut inner = index.iter();
                                dims.iter()
                                    .map(|od| match od {
                                        OuterDim::Fixed(e) => e.clone(),
                                        OuterDim::Shift(start) => inner.next().map_or_else(
                                            || start.clone(),
                                            |i| start.add(i).simplify(),
                                        ),
                                    })
                                    .collect()
                            }
                        };
                        Dim::Indirect {
                            table: t.data.clone(),
                            index,
                            offset: offset.clone(),
                        }
                    }
                    None => d.clone(),
                },
                _ => d.clone(),
            })
            .collect(),
    )
}

/// Splits the caller's state around the call and splices the callee in between.
fn apply(sdfg: &mut Sdfg, s: StateId, n: NodeId, p: Plan) {
    let Plan {
        callee,
        new_arrays,
        new_symbols,
    } = p;
    sdfg.arrays.extend(new_arrays);
    sdfg.symbols.extend(new_symbols);

    let state_name = sdfg.states[s.index()].name.clone();
    let df = std::mem::take(&mut sdfg.states[s.index()].graph);
    let before = ancestors(&df, n);
    let (mut pre, mut post) = (Dataflow::new(), Dataflow::new());
    let mut pre_ids = BTreeMap::new();
    let mut post_ids = BTreeMap::new();
    for m in df.node_ids() {
        if m == n {
            continue;
        }
        let node = df.node(m).clone();
        if before.contains(&m) {
            pre_ids.insert(m, pre.add_node(node));
        } else {
            post_ids.insert(m, post.add_node(node));
        }
    }
    // A value a node before the call hands to one after it is read from memory again.
    let mut reread: BTreeMap<NodeId, NodeId> = BTreeMap::new();
    for e in df.edge_ids() {
        let (a, b) = df.endpoints(e);
        if a == n || b == n {
            continue;
        }
        let edge = df.edge(e).clone();
        match (
            pre_ids.get(&a),
            pre_ids.get(&b),
            post_ids.get(&a),
            post_ids.get(&b),
        ) {
            (Some(&x), Some(&y), _, _) => {
                pre.graph.add_edge(x, y, edge);
            }
            (_, _, Some(&x), Some(&y)) => {
                post.graph.add_edge(x, y, edge);
            }
            (Some(_), None, None, Some(&y)) => {
                let x = *reread
                    .entry(a)
                    .or_insert_with(|| post.add_node(df.node(a).clone()));
                post.graph.add_edge(x, y, edge);
            }
            _ => unreachable!("a node after the call never feeds one before it"),
        }
    }
    remove_isolated_access_nodes(&mut pre);
    remove_isolated_access_nodes(&mut post);
    sdfg.states[s.index()].graph = pre;

    // The callee's states, renumbered after the caller's.
    let offset = sdfg.states.len() as u32;
    let mut body = callee.body;
    renumber(&mut body, offset);
    for st in callee.states {
        let name = format!("{}_{}", callee.name, st.name);
        sdfg.states.push(sdflow_ir::State {
            name,
            graph: st.graph,
        });
    }
    let after = StateId(sdfg.states.len() as u32);
    sdfg.states.push(sdflow_ir::State {
        name: format!("{state_name}_after_{}", callee.name),
        graph: post,
    });
    let mut items = vec![Block::State(s)];
    match body {
        Block::Seq(v) => items.extend(v),
        b => items.push(b),
    }
    items.push(Block::State(after));
    replace_state(&mut sdfg.body, s, &Block::Seq(items));
}

fn renumber(block: &mut Block, offset: u32) {
    match block {
        Block::State(x) => x.0 += offset,
        Block::Seq(items) => items.iter_mut().for_each(|b| renumber(b, offset)),
        Block::Loop(l) => renumber(&mut l.body, offset),
        Block::If(i) => {
            renumber(&mut i.then, offset);
            renumber(&mut i.otherwise, offset);
        }
        Block::Assign(_) => {}
    }
}

/// Replaces the (one) occurrence of state `s` in the control flow by `with`, flattening a
/// sequence into the enclosing one.
fn replace_state(block: &mut Block, s: StateId, with: &Block) {
    match block {
        Block::State(x) if *x == s => *block = with.clone(),
        Block::Seq(items) => {
            let mut out = Vec::with_capacity(items.len() + 2);
            for mut b in std::mem::take(items) {
                match (&b, with) {
                    (Block::State(x), Block::Seq(w)) if *x == s => out.extend(w.iter().cloned()),
                    _ => {
                        replace_state(&mut b, s, with);
                        out.push(b);
                    }
                }
            }
            *items = out;
        }
        Block::Loop(l) => replace_state(&mut l.body, s, with),
        Block::If(i) => {
            replace_state(&mut i.then, s, with);
            replace_state(&mut i.otherwise, s, with);
        }
        _ => {}
    }
}

/// Straight-line callees inside map bodies: a nested SDFG called at every point of a map
/// whose body is a plain sequence of states of tasklets on scalars — DaCe's frontend
/// writes `total += a[i] * b[i]` in a map so, the sum under a write-conflict resolution
/// inside the callee — becomes the tasklets themselves in the map body. A call copies its
/// arguments in and out, which keeps such a map on one thread; inlined, the write with
/// its resolution goes to the caller's container directly and the map runs in parallel.
///
/// Legality: every connector is one element (a scalar, or an array of extents 1) bound
/// by one edge (read or written, not both);
/// every callee container is written at most once, an input never, an output read never,
/// a transient only read after its write; the callee has no symbols, maps or calls, and
/// the caller's edges carry no resolution. The copy-in of an output then holds the
/// caller's value, which a single write with a resolution combines with as the inlined
/// write does.
///
/// A callee whose body branches is spliced in the same way once both branches and a
/// select of their results can stand for it ([`crate::if_select`]). Returns how many
/// callees were spliced in, and how many of those through a select.
pub(crate) fn inline_map_callees(sdfg: &mut Sdfg) -> (usize, usize) {
    let mut count = (0, 0);
    let mut new_arrays: Vec<(String, DataDesc)> = Vec::new();
    let mut taken: BTreeSet<String> = BTreeSet::new();
    for si in 0..sdfg.states.len() {
        let mut df = std::mem::take(&mut sdfg.states[si].graph);
        in_bodies(
            sdfg,
            &mut df,
            false,
            &mut new_arrays,
            &mut taken,
            &mut count,
        );
        sdfg.states[si].graph = df;
    }
    for (name, desc) in new_arrays {
        sdfg.arrays.insert(name, desc);
    }
    count
}

/// Inlines the straight-line callees of the map bodies in `df` (`in_map`: `df` is one),
/// counting them in `count` (all, and those made straight-line through a select).
fn in_bodies(
    sdfg: &Sdfg,
    df: &mut Dataflow,
    in_map: bool,
    new_arrays: &mut Vec<(String, DataDesc)>,
    taken: &mut BTreeSet<String>,
    count: &mut (usize, usize),
) {
    for n in df.node_ids() {
        if let Node::Map(m) = df.graph.node_weight_mut(n).expect("node of the graph") {
            let mut body = std::mem::take(&mut m.body);
            in_bodies(sdfg, &mut body, true, new_arrays, taken, count);
            if let Node::Map(m) = df.graph.node_weight_mut(n).expect("node of the graph") {
                m.body = body;
            }
        }
    }
    if !in_map {
        return;
    }
    for n in df.node_ids() {
        let Node::Nested(ns) = df.node(n) else {
            continue;
        };
        let ns = match straight_line(df, n, ns) {
            Ok(()) => ns.clone(),
            // A branching callee whose branches can both run: both, then a select.
            Err(_) => match crate::if_select::flatten(ns) {
                Ok(flat) if straight_line(df, n, &flat).is_ok() => {
                    count.1 += 1;
                    flat
                }
                _ => continue,
            },
        };
        splice(sdfg, df, n, &ns, new_arrays, taken);
        count.0 += 1;
    }
}

/// A scalar, or an array whose every extent is the constant 1: a connector of it moves
/// one element, so the caller's memlet can stand for the callee's.
pub(crate) fn one_element(d: &DataDesc) -> bool {
    d.shape().iter().all(|e| e.as_int() == Some(1))
}

/// The callee's states in order when its body is a plain sequence.
pub(crate) fn plain_states(b: &Block, out: &mut Vec<StateId>) -> bool {
    match b {
        Block::State(s) => {
            out.push(*s);
            true
        }
        Block::Seq(v) => v.iter().all(|b| plain_states(b, out)),
        _ => false,
    }
}

/// Whether nested node `n` of map body `df` can be spliced in (see
/// [`inline_map_callees`]); the reason when not.
fn straight_line(df: &Dataflow, n: NodeId, ns: &NestedSdfg) -> Result<(), String> {
    let inner = &*ns.sdfg;
    let mut order = Vec::new();
    if !plain_states(&inner.body, &mut order) {
        return Err("its body has control flow".into());
    }
    // Symbols passed through under their own names (DaCe's callees read the program's
    // scalar parameters so) mean the same spliced into the caller's scope.
    let identity = |(k, v): (&String, &SymExpr)| matches!(v, SymExpr::Sym(x) if **x == **k);
    if !ns.symbol_mapping.iter().all(identity)
        || inner
            .symbols
            .keys()
            .any(|k| !ns.symbol_mapping.contains_key(k))
    {
        return Err("it has symbols not passed through by name".into());
    }
    let mut conn_dirs: BTreeMap<String, (bool, bool)> = BTreeMap::new();
    for (e, input) in df.edges_both(n) {
        let edge = df.edge(e);
        let c = if input {
            &edge.dst_conn
        } else {
            &edge.src_conn
        };
        let Some(c) = c else {
            return Err("an edge has no connector".into());
        };
        let other = if input {
            df.endpoints(e).0
        } else {
            df.endpoints(e).1
        };
        if df.node(other).as_access() != Some(edge.memlet.data.as_str())
            || edge.memlet.wcr.is_some()
            || edge.memlet.other_subset.is_some()
            || !inner
                .arrays
                .get(c)
                .is_some_and(|d| !d.transient() && one_element(d))
        {
            return Err(format!("connector '{c}' is not a plain scalar binding"));
        }
        let d = conn_dirs.entry(c.clone()).or_default();
        // One edge per connector: read or written, not both, not twice.
        if d.0 || d.1 {
            return Err(format!("connector '{c}' is bound twice"));
        }
        if input {
            d.0 = true;
        } else {
            d.1 = true;
        }
    }
    let mut written: BTreeSet<String> = BTreeSet::new();
    for &s in &order {
        let g = &inner.states[s.index()].graph;
        for m in g.node_ids() {
            match g.node(m) {
                Node::Tasklet(_) => {}
                Node::Access(a) => {
                    let Some(desc) = inner.arrays.get(a) else {
                        return Err(format!("'{a}' is not declared"));
                    };
                    if !one_element(desc) {
                        return Err(format!("'{a}' has more than one element"));
                    }
                    let writes = g.in_degree(m) > 0;
                    let reads = g.out_degree(m) > 0;
                    if writes
                        && g.in_edges(m)
                            .iter()
                            .any(|&e| g.node(g.endpoints(e).0).as_access().is_some())
                    {
                        return Err(format!("'{a}' is copied into"));
                    }
                    if reads && !writes && desc.transient() && !written.contains(a) {
                        return Err(format!("'{a}' is read before it is written"));
                    }
                    if writes && (g.in_degree(m) > 1 || !written.insert(a.clone())) {
                        return Err(format!("'{a}' is written more than once"));
                    }
                    if !desc.transient() {
                        let (read, write) = conn_dirs.get(a).copied().unwrap_or_default();
                        if (writes && !write) || (reads && !read) {
                            return Err(format!("connector '{a}' is used against its binding"));
                        }
                    }
                }
                _ => return Err("it holds maps, calls or library nodes".into()),
            }
        }
    }
    Ok(())
}

/// Replaces nested node `n` of `df` by its callee's tasklets (checked by
/// [`straight_line`]): connectors become the caller's memlets, transients new scalars.
fn splice(
    sdfg: &Sdfg,
    df: &mut Dataflow,
    n: NodeId,
    ns: &NestedSdfg,
    new_arrays: &mut Vec<(String, DataDesc)>,
    taken: &mut BTreeSet<String>,
) {
    let inner = &*ns.sdfg;
    // Connector -> (caller access node, caller memlet).
    let mut outer: BTreeMap<String, (NodeId, Memlet)> = BTreeMap::new();
    for e in df.in_edges(n) {
        let edge = df.edge(e);
        if let Some(c) = &edge.dst_conn {
            outer.insert(c.clone(), (df.endpoints(e).0, edge.memlet.clone()));
        }
    }
    for e in df.out_edges(n) {
        let edge = df.edge(e);
        if let Some(c) = &edge.src_conn {
            outer.insert(c.clone(), (df.endpoints(e).1, edge.memlet.clone()));
        }
    }
    let mut renamed: BTreeMap<String, String> = BTreeMap::new();
    let mut writer: BTreeMap<String, NodeId> = BTreeMap::new();
    let mut order = Vec::new();
    plain_states(&inner.body, &mut order);
    for s in order {
        let g = &inner.states[s.index()].graph;
        let mut map: BTreeMap<NodeId, NodeId> = BTreeMap::new();
        for m in g.node_ids() {
            let new = match g.node(m) {
                Node::Access(a) if outer.contains_key(a) => outer[a].0,
                Node::Access(a) => {
                    let name = renamed
                        .entry(a.clone())
                        .or_insert_with(|| {
                            let stem = format!("{}_{a}", inner.name);
                            let base = (0..)
                                .map(|k| {
                                    if k == 0 {
                                        stem.clone()
                                    } else {
                                        format!("{stem}_{k}")
                                    }
                                })
                                .find(|b| !taken.contains(b) && fresh_name(sdfg, b) == *b)
                                .expect("an unused name exists");
                            taken.insert(base.clone());
                            let mut desc = inner.arrays[a].clone();
                            if let DataDesc::Array(arr) = &mut desc {
                                arr.transient = true;
                            }
                            new_arrays.push((base.clone(), desc));
                            base
                        })
                        .clone();
                    if g.in_degree(m) > 0 {
                        let id = df.add_access(&name);
                        writer.insert(a.clone(), id);
                        id
                    } else {
                        match writer.get(a) {
                            Some(&id) => id,
                            None => df.add_access(&name),
                        }
                    }
                }
                other => df.add_node(other.clone()),
            };
            map.insert(m, new);
        }
        for e in g.edge_ids() {
            let (src, dst) = g.endpoints(e);
            let edge = g.edge(e);
            let memlet = match outer.get(&edge.memlet.data) {
                Some((_, m)) => Memlet {
                    wcr: edge.memlet.wcr,
                    ..m.clone()
                },
                None => Memlet {
                    data: renamed
                        .get(&edge.memlet.data)
                        .cloned()
                        .unwrap_or_else(|| edge.memlet.data.clone()),
                    ..edge.memlet.clone()
                },
            };
            df.add_edge(
                map[&src],
                edge.src_conn.as_deref(),
                map[&dst],
                edge.dst_conn.as_deref(),
                memlet,
            );
        }
    }
    df.graph.remove_node(n);
    remove_isolated_access_nodes(df);
}
