//! Reading DaCe SDFG files (`.sdfg` JSON, `.sdfgz` gzip) into sdflow's IR.
//!
//! Supported today (see `docs/dace-import.md`): arrays and scalars, symbols, `arg_names`;
//! states whose control flow is a chain of unconditional interstate edges; access nodes,
//! `MapEntry`/`MapExit` pairs with their `scope_dict` (converted into hierarchical maps,
//! DaCe's inclusive range ends made half-open), Python tasklets of the arithmetic subset,
//! copies, write-conflict resolution lambdas (sum, product, min, max) and the `Reduce`
//! library node. Everything else is refused with an error that names the element.
//!
//! Why one file of this size: the walk over a DaCe document (descriptors, states,
//! scopes, memlets, nested SDFGs) is one recursive conversion with one location path
//! for errors; the rewrites that stand alone are modules beside it (`views.rs`,
//! `subscripts.rs`, `alias.rs`, `order.rs`, `control.rs`, `python.rs`, `gt4py.rs`).

mod alias;
mod control;
mod cpp;
mod float_symbols;
mod gt4py;
mod order;
pub mod python;
mod subscripts;
mod views;

use std::collections::BTreeMap;
use std::io::Read;

use serde_json::Value as J;

use sdflow_ir::{
    Array, Block, DType, DataDesc, Dataflow, Dim, Expr, LibraryNode, MapScope, Memlet, Node,
    NodeId, Range, Reduce, Schedule, Sdfg, Subset, SymExpr, Symbol, Tasklet, Value, Wcr,
};

/// Why a DaCe file could not be imported: what, and where in the file.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{location}: {message}")]
pub struct ImportError {
    /// The element: SDFG, state, node (with its DaCe id and label).
    pub location: String,
    /// What is wrong or not supported.
    pub message: String,
}

/// The views of an SDFG: name → declared strides.
type Views = BTreeMap<String, Vec<SymExpr>>;

fn err(location: &str, message: impl Into<String>) -> ImportError {
    ImportError {
        location: location.to_string(),
        message: message.into(),
    }
}

/// True when `bytes` look like a DaCe SDFG: gzip data, or JSON whose top-level `type` is
/// `"SDFG"`.
pub fn is_dace(bytes: &[u8]) -> bool {
    if bytes.starts_with(&[0x1f, 0x8b]) {
        return true;
    }
    let head = String::from_utf8_lossy(&bytes[..bytes.len().min(4096)]);
    let compact: String = head.chars().filter(|c| !c.is_whitespace()).collect();
    compact.starts_with("{\"type\":\"SDFG\"") || compact.contains("\"dace_version\"")
}

/// Imports a DaCe file's bytes (JSON, or gzip-compressed JSON).
pub fn import_bytes(bytes: &[u8]) -> Result<Sdfg, ImportError> {
    let text = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut s = String::new();
        flate2::read::GzDecoder::new(bytes)
            .read_to_string(&mut s)
            .map_err(|e| err("file", format!("not readable gzip-compressed JSON: {e}")))?;
        s
    } else {
        String::from_utf8(bytes.to_vec()).map_err(|_| err("file", "not UTF-8 text"))?
    };
    import(&text)
}

/// Imports DaCe SDFG JSON text.
pub fn import(text: &str) -> Result<Sdfg, ImportError> {
    let j: J = serde_json::from_str(text).map_err(|e| err("file", format!("not JSON: {e}")))?;
    let mut sdfg = convert_sdfg(&j, "sdfg")?;
    drop_unused_symbols(&mut sdfg);
    gt4py::default_field_origins(&mut sdfg);
    Ok(sdfg)
}

fn s<'a>(j: &'a J, key: &str) -> Option<&'a str> {
    j.get(key).and_then(J::as_str)
}

fn attrs(j: &J) -> &J {
    j.get("attributes").unwrap_or(&J::Null)
}

fn dtype(name: Option<&str>, loc: &str) -> Result<DType, ImportError> {
    // DaCe omits properties equal to their default; a descriptor's default is int32.
    Ok(match name.unwrap_or("int32").trim_start_matches("dace.") {
        "float64" | "double" => DType::F64,
        "float32" | "float" => DType::F32,
        "int64" | "long long" => DType::I64,
        "int32" | "int" => DType::I32,
        "bool" | "bool_" => DType::Bool,
        other => return Err(err(loc, format!("unsupported data type '{other}'"))),
    })
}

fn sym_of(j: &J, loc: &str) -> Result<SymExpr, ImportError> {
    let text = match j {
        J::String(t) => t.clone(),
        J::Number(n) => n.to_string(),
        other => return Err(err(loc, format!("expected an expression, found {other}"))),
    };
    python::sym(&text).map_err(|e| err(loc, format!("expression '{text}': {e}")))
}

fn name_of(raw: &str) -> String {
    let mut n: String = raw
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if n.is_empty() || n.starts_with(|c: char| c.is_ascii_digit()) {
        n.insert(0, '_');
    }
    n
}

fn convert_sdfg(j: &J, parent: &str) -> Result<Sdfg, ImportError> {
    let a = attrs(j);
    let name = name_of(s(a, "name").unwrap_or("sdfg"));
    let loc = format!("{parent} '{name}'");
    let mut sdfg = Sdfg::new(&name);
    let mut views = Views::new();
    // Transients whose lifetime is not DaCe's default scope lifetime.
    let mut long_lived = std::collections::BTreeSet::new();
    if let Some(arrays) = a.get("_arrays").and_then(J::as_object) {
        for (n, d) in arrays {
            let dloc = format!("{loc} > container '{n}'");
            let da = attrs(d);
            let transient = da.get("transient").and_then(J::as_bool).unwrap_or(false);
            let dt = dtype(s(da, "dtype"), &dloc)?;
            let desc = match s(d, "type") {
                Some("Scalar") => DataDesc::Scalar {
                    dtype: dt,
                    transient,
                },
                Some("Array") => {
                    let shape = da
                        .get("shape")
                        .and_then(J::as_array)
                        .ok_or_else(|| err(&dloc, "an array without a shape"))?
                        .iter()
                        .map(|x| sym_of(x, &dloc))
                        .collect::<Result<Vec<_>, _>>()?;
                    let mut arr = Array::new(dt, shape);
                    if let Some(st) = da.get("strides").and_then(J::as_array) {
                        arr.strides = st
                            .iter()
                            .map(|x| sym_of(x, &dloc))
                            .collect::<Result<Vec<_>, _>>()?;
                    }
                    if let Some(off) = da.get("offset").and_then(J::as_array)
                        && off
                            .iter()
                            .any(|x| x.as_str().is_some_and(|t| t.trim() != "0"))
                    {
                        return Err(err(
                            &dloc,
                            "arrays with a non-zero offset are not supported",
                        ));
                    }
                    arr.transient = transient;
                    if transient && s(da, "lifetime").is_some_and(|l| !l.ends_with("Scope")) {
                        long_lived.insert(name_of(n));
                    }
                    DataDesc::Array(arr)
                }
                Some("ArrayView" | "View") => {
                    // A view becomes a transient array of the view's shape, filled from
                    // (or written back to) the viewed window by the copy edge DaCe
                    // connects it with (connector `views`). Written views must be
                    // written whole (checked with the edges).
                    let shape = da
                        .get("shape")
                        .and_then(J::as_array)
                        .ok_or_else(|| err(&dloc, "a view without a shape"))?
                        .iter()
                        .map(|x| sym_of(x, &dloc))
                        .collect::<Result<Vec<_>, _>>()?;
                    let mut arr = Array::new(dt, shape);
                    arr.transient = true;
                    // The view's strides (the viewed array's, in DaCe's files) decide
                    // whether it is a window of that array or a reshape.
                    let strides = match da.get("strides").and_then(J::as_array) {
                        Some(st) => st
                            .iter()
                            .map(|x| sym_of(x, &dloc))
                            .collect::<Result<Vec<_>, _>>()?,
                        None => arr.strides.clone(),
                    };
                    views.insert(name_of(n), strides);
                    DataDesc::Array(arr)
                }
                Some(other) => {
                    return Err(err(
                        &dloc,
                        format!(
                            "data descriptors of type '{other}' (streams, references, …) are not supported yet"
                        ),
                    ));
                }
                None => return Err(err(&dloc, "a data descriptor without a type")),
            };
            sdfg.arrays.insert(name_of(n), desc);
        }
    }
    if let Some(syms) = a.get("symbols").and_then(J::as_object) {
        for (n, t) in syms {
            let dt = dtype(t.as_str(), &format!("{loc} > symbol '{n}'"))?;
            // A bool symbol (GT4Py's bool scalar parameters, `limited_area`, tested in
            // interstate conditions) is an integer symbol holding 0 or 1: sdflow's symbolic
            // expressions are integer, and C's and Python's truth of 0 and 1 agree.
            let dt = if dt == DType::Bool { DType::I32 } else { dt };
            sdfg.symbols.insert(name_of(n), Symbol::new(dt));
        }
    }
    // Symbols used in shapes and strides but not declared are integers.
    let mut used = std::collections::BTreeSet::new();
    for d in sdfg.arrays.values() {
        for e in d.shape() {
            used.extend(e.free_symbols());
        }
        if let Some(arr) = d.as_array() {
            for e in &arr.strides {
                used.extend(e.free_symbols());
            }
        }
    }
    for u in used {
        sdfg.symbols.entry(u).or_insert(Symbol::new(DType::I64));
    }
    if let Some(args) = a.get("arg_names").and_then(J::as_array) {
        sdfg.arg_order = args
            .iter()
            .filter_map(J::as_str)
            .map(name_of)
            .filter(|n| sdfg.arrays.get(n).is_some_and(|d| !d.transient()))
            .collect();
    }
    // DaCe passes a transient scalar written at state level into maps by value; sdflow's
    // transient scalars in map bodies are private to an iteration, so such a scalar
    // becomes a one-element array (DaCe's `x[0]` subsets already address it so).
    let mut shared = std::collections::BTreeSet::new();
    shared_scalars(j, &mut shared);
    for name in shared {
        if let Some(DataDesc::Scalar {
            dtype,
            transient: true,
        }) = sdfg.arrays.get(&name).cloned()
        {
            let mut arr = Array::new(dtype, vec![SymExpr::Int(1)]);
            arr.transient = true;
            sdfg.arrays.insert(name, DataDesc::Array(arr));
        }
    }
    // States and the control flow between them.
    sdfg.body = convert_region(&mut sdfg, &views, j, &loc)?;
    // Views resolved everywhere are gone; the others stay as transient arrays.
    let mut used = std::collections::BTreeSet::new();
    for st in &sdfg.states {
        used.extend(st.graph.accessed_data());
    }
    for v in views.keys().filter(|v| !used.contains(*v)) {
        sdfg.arrays.remove(v);
    }
    scope_local_transients(&mut sdfg, &long_lived);
    Ok(sdfg)
}

/// Drops the declared symbols a program never uses, in nested SDFGs first (with their
/// entries in the caller's `symbol_mapping`). GT4Py declares the size and stride symbols of
/// every neighbour table of the grid (`__gt_conn_C2E2C2E2C_neighbor_stride`) in every
/// program and passes them down to every nested SDFG; DaCe's arguments are the symbols the
/// program uses (`free_symbols`), so a caller gives values to those only. Symbols named in
/// `arg_names` stay: they are parameters.
fn drop_unused_symbols(sdfg: &mut Sdfg) {
    fn nested_in(g: &mut Dataflow) {
        for node in g.graph.node_weights_mut() {
            match node {
                Node::Map(m) => nested_in(&mut m.body),
                Node::Nested(n) => {
                    drop_unused_symbols(&mut n.sdfg);
                    let used = used_names(&n.sdfg);
                    n.symbol_mapping
                        .retain(|k, _| n.sdfg.symbols.contains_key(k) || used.contains(k));
                }
                _ => {}
            }
        }
    }
    for st in &mut sdfg.states {
        nested_in(&mut st.graph);
    }
    let used = used_names(sdfg);
    let keep: std::collections::BTreeSet<String> = sdfg.arg_order.iter().cloned().collect();
    sdfg.symbols
        .retain(|name, _| used.contains(name) || keep.contains(name));
}

/// Every identifier in `sdfg` outside its symbol declarations and argument order, and
/// outside its nested SDFGs (their own scopes) except their symbol mappings' values: the
/// program in sdflow's text format, cut into words.
fn used_names(sdfg: &Sdfg) -> std::collections::BTreeSet<String> {
    fn hollow(g: &mut Dataflow) {
        for node in g.graph.node_weights_mut() {
            match node {
                Node::Map(m) => hollow(&mut m.body),
                Node::Nested(n) => {
                    *n.sdfg = Sdfg::new("nested");
                    n.symbol_mapping = n
                        .symbol_mapping
                        .values()
                        .enumerate()
                        .map(|(k, v)| (format!("{k}"), v.clone()))
                        .collect();
                }
                _ => {}
            }
        }
    }
    let mut text_of = sdfg.clone();
    text_of.symbols.clear();
    text_of.arg_order.clear();
    for st in &mut text_of.states {
        hollow(&mut st.graph);
    }
    let text = sdflow_ir::format::to_json(&text_of);
    let mut used = std::collections::BTreeSet::new();
    let mut word = String::new();
    for c in text.chars().chain([' ']) {
        if c.is_alphanumeric() || c == '_' {
            word.push(c);
        } else if !word.is_empty() {
            used.insert(std::mem::take(&mut word));
        }
    }
    used
}

/// A control-flow region (the SDFG itself, a `ControlFlowRegion`, a `LoopRegion`'s body,
/// a branch of a `ConditionalBlock`): its blocks, structured along its interstate edges.
fn convert_region(sdfg: &mut Sdfg, views: &Views, j: &J, loc: &str) -> Result<Block, ImportError> {
    let nodes: &[J] = j
        .get("nodes")
        .and_then(J::as_array)
        .map_or(&[], Vec::as_slice);
    let mut ids: BTreeMap<String, Block> = BTreeMap::new();
    for (k, st) in nodes.iter().enumerate() {
        let label = s(st, "label").unwrap_or("state");
        let sloc = format!("{loc} > state '{label}' (id {k})");
        let a = attrs(st);
        let block = match s(st, "type") {
            Some("SDFGState") => {
                let graph = convert_state(sdfg, views, st, &sloc)?;
                let mut parts = order::split_unordered_writes(graph);
                if parts.len() == 1 {
                    let id = sdfg.add_state(&name_of(label));
                    sdfg.states[id.index()].graph = parts.remove(0);
                    Block::State(id)
                } else {
                    // Unordered writes, ordered: one state per part (`order.rs`).
                    let mut seq = Vec::new();
                    for (k, graph) in parts.into_iter().enumerate() {
                        let id = sdfg.add_state(&format!("{}_{k}", name_of(label)));
                        sdfg.states[id.index()].graph = graph;
                        seq.push(Block::State(id));
                    }
                    Block::Seq(seq)
                }
            }
            Some("ControlFlowRegion") => convert_region(sdfg, views, st, &sloc)?,
            Some("LoopRegion") => {
                let code = |key: &str| -> Option<String> {
                    a.get(key)
                        .and_then(|c| c.get("string_data").or(Some(c)))
                        .and_then(J::as_str)
                        .map(str::to_string)
                };
                if a.get("inverted").and_then(J::as_bool).unwrap_or(false) {
                    return Err(err(
                        &sloc,
                        "do-while loops (inverted LoopRegion) are not supported yet",
                    ));
                }
                let var = name_of(s(a, "loop_variable").unwrap_or(""));
                let rhs = |stmt: Option<String>, what: &str| -> Result<SymExpr, ImportError> {
                    let text =
                        stmt.ok_or_else(|| err(&sloc, format!("a loop without its {what}")))?;
                    let value = text.split_once('=').map(|(_, v)| v).unwrap_or(&text);
                    python::sym(value).map_err(|e| err(&sloc, format!("{what} '{text}': {e}")))
                };
                let init = rhs(code("init_statement"), "init statement")?;
                let update = rhs(code("update_statement"), "update statement")?;
                let cond_text = code("loop_condition").unwrap_or_else(|| "1".into());
                let cond = python::sym(&cond_text)
                    .map_err(|e| err(&sloc, format!("loop condition '{cond_text}': {e}")))?;
                sdfg.symbols
                    .entry(var.clone())
                    .or_insert(Symbol::new(DType::I64));
                let body = convert_region(sdfg, views, st, &sloc)?;
                Block::Loop(sdflow_ir::Loop {
                    var,
                    init,
                    cond,
                    update,
                    body: Box::new(body),
                })
            }
            Some("ConditionalBlock") => {
                let branches = st
                    .get("branches")
                    .and_then(J::as_array)
                    .cloned()
                    .unwrap_or_default();
                let mut otherwise = Block::empty();
                let mut conds = Vec::new();
                for br in &branches {
                    let (Some(c), Some(region)) = (br.get(0), br.get(1)) else {
                        return Err(err(&sloc, "a branch is not a (condition, region) pair"));
                    };
                    let body = convert_region(sdfg, views, region, &sloc)?;
                    match c.get("string_data").and_then(J::as_str) {
                        None => otherwise = body,
                        Some(t) => {
                            let cond = python::sym(t)
                                .map_err(|e| err(&sloc, format!("condition '{t}': {e}")))?;
                            conds.push((cond, body));
                        }
                    }
                }
                let mut block = otherwise;
                for (cond, body) in conds.into_iter().rev() {
                    block = Block::if_else(cond, body, block);
                }
                block
            }
            Some(other) => {
                return Err(err(
                    &sloc,
                    format!("control-flow blocks of type '{other}' are not supported yet"),
                ));
            }
            None => return Err(err(&sloc, "a block without a type")),
        };
        let key = st
            .get("id")
            .map(|x| x.to_string().trim_matches('"').to_string());
        ids.insert(key.unwrap_or_else(|| k.to_string()), block);
    }
    chain(j, &ids, loc)
}

/// The control flow: the state machine of interstate edges, structured.
fn chain(j: &J, ids: &BTreeMap<String, Block>, loc: &str) -> Result<Block, ImportError> {
    let mut edges = Vec::new();
    for e in j.get("edges").and_then(J::as_array).into_iter().flatten() {
        let id = |k: &str| {
            e.get(k)
                .map(|x| x.to_string().trim_matches('"').to_string())
                .unwrap_or_default()
        };
        let (src, dst) = (id("src"), id("dst"));
        let eloc = format!("{loc} > interstate edge {src} -> {dst}");
        let d = attrs(attrs(e).get("data").unwrap_or(&J::Null));
        let cond_text = d
            .get("condition")
            .and_then(|c| c.get("string_data"))
            .and_then(J::as_str)
            .unwrap_or("1")
            .trim();
        let cond = match cond_text {
            "1" | "True" | "(1)" | "" => None,
            t => Some(python::sym(t).map_err(|x| err(&eloc, format!("condition '{t}': {x}")))?),
        };
        let mut assigns = Vec::new();
        for (k, v) in d
            .get("assignments")
            .and_then(J::as_object)
            .into_iter()
            .flatten()
        {
            assigns.push((name_of(k), sym_of(v, &eloc)?));
        }
        edges.push(control::IEdge {
            src,
            dst,
            cond,
            assigns,
        });
    }
    control::Machine {
        states: ids,
        edges,
        loc: loc.to_string(),
    }
    .structure()
}

/// A tasklet's language and code text.
fn tasklet_code(n: &J) -> (&str, &str) {
    let code = attrs(n).get("code").unwrap_or(&J::Null);
    (
        s(code, "language").unwrap_or("Python"),
        s(code, "string_data").unwrap_or(""),
    )
}

/// The names of a node's connectors (`in_connectors` or `out_connectors`).
fn connectors(n: &J, key: &str) -> Vec<String> {
    attrs(n)
        .get(key)
        .and_then(J::as_object)
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

fn wcr_of(text: Option<&str>, loc: &str) -> Result<Option<Wcr>, ImportError> {
    let Some(t) = text else { return Ok(None) };
    let body: String = t
        .split_once(':')
        .map(|(_, b)| b)
        .unwrap_or(t)
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '(' && *c != ')')
        .collect();
    Ok(Some(match body.as_str() {
        "x+y" | "y+x" => Wcr::Sum,
        "x*y" | "y*x" => Wcr::Prod,
        "minx,y" | "miny,x" => Wcr::Min,
        "maxx,y" | "maxy,x" => Wcr::Max,
        _ => {
            return Err(err(
                loc,
                format!("unsupported write-conflict resolution '{t}'"),
            ));
        }
    }))
}

/// A DaCe subset (inclusive range ends) as an sdflow subset (half-open; single indices
/// as indices).
fn subset_of(j: Option<&J>, loc: &str) -> Result<Option<Subset>, ImportError> {
    let Some(j) = j.filter(|x| !x.is_null()) else {
        return Ok(None);
    };
    let ranges = j
        .get("ranges")
        .and_then(J::as_array)
        .ok_or_else(|| err(loc, format!("unsupported subset {j}")))?;
    let mut dims = Vec::new();
    for r in ranges {
        let start = sym_of(r.get("start").unwrap_or(&J::Null), loc)?;
        let end = sym_of(r.get("end").unwrap_or(&J::Null), loc)?;
        let step = sym_of(r.get("step").unwrap_or(&J::String("1".into())), loc)?;
        if r.get("tile")
            .and_then(J::as_str)
            .is_some_and(|t| t.trim() != "1")
        {
            return Err(err(loc, "tiled subset ranges are not supported"));
        }
        if start == end {
            dims.push(Dim::Index(start));
        } else {
            dims.push(Dim::Range {
                start,
                end: end.add(&SymExpr::Int(1)).simplify(),
                step,
            });
        }
    }
    Ok(Some(Subset(dims)))
}

#[derive(Clone, Debug)]
struct Edge {
    src: String,
    dst: String,
    src_conn: Option<String>,
    dst_conn: Option<String>,
    data: Option<String>,
    subset: Option<Subset>,
    other: Option<Subset>,
    is_data_src: Option<bool>,
    wcr: Option<Wcr>,
}

fn convert_state(sdfg: &Sdfg, views: &Views, st: &J, loc: &str) -> Result<Dataflow, ImportError> {
    let nodes: Vec<&J> = st
        .get("nodes")
        .and_then(J::as_array)
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    let by_id: BTreeMap<String, &J> = nodes
        .iter()
        .map(|n| {
            (
                n.get("id")
                    .map(|x| x.to_string().trim_matches('"').to_string())
                    .unwrap_or_default(),
                *n,
            )
        })
        .collect();
    let mut edges = Vec::new();
    for e in st.get("edges").and_then(J::as_array).into_iter().flatten() {
        let m = attrs(attrs(e).get("data").unwrap_or(&J::Null));
        let eloc = format!(
            "{loc} > edge {} -> {}",
            e.get("src").unwrap_or(&J::Null),
            e.get("dst").unwrap_or(&J::Null)
        );
        edges.push(Edge {
            src: e
                .get("src")
                .map(|x| x.to_string().trim_matches('"').to_string())
                .unwrap_or_default(),
            dst: e
                .get("dst")
                .map(|x| x.to_string().trim_matches('"').to_string())
                .unwrap_or_default(),
            src_conn: s(e, "src_connector").map(str::to_string),
            dst_conn: s(e, "dst_connector").map(str::to_string),
            data: s(m, "data").map(name_of),
            subset: subset_of(m.get("subset"), &eloc)?,
            other: subset_of(m.get("other_subset"), &eloc)?,
            is_data_src: m.get("is_data_src").and_then(J::as_bool),
            wcr: wcr_of(s(m, "wcr"), &eloc)?,
        });
    }
    let scopes: BTreeMap<String, Vec<String>> = st
        .get("scope_dict")
        .and_then(J::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.as_array()
                            .into_iter()
                            .flatten()
                            .map(|x| x.to_string().trim_matches('"').to_string())
                            .collect(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    check_scope_ids(&nodes, &by_id, &scopes, loc)?;
    let mut cx = StateCx {
        sdfg,
        by_id,
        edges,
        scopes,
        loc: loc.to_string(),
        data_of: BTreeMap::new(),
        removed: Default::default(),
        rewritten: BTreeMap::new(),
        views,
    };
    cx.resolve_views();
    let tasklets: Vec<(String, String, Vec<String>)> = cx
        .by_id
        .iter()
        .filter(|(_, n)| s(n, "type") == Some("Tasklet"))
        .filter_map(|(id, n)| {
            let (lang, text) = tasklet_code(n);
            (lang == "Python")
                .then(|| (id.clone(), text.to_string(), connectors(n, "in_connectors")))
        })
        .collect();
    for (id, text, inputs) in tasklets {
        if let Some(r) = cx.rewrite_subscripts(&id, &text, &inputs)? {
            cx.rewritten.insert(id, r);
        }
    }
    let mut df = Dataflow::new();
    cx.build("-1", &mut df)?;
    Ok(df)
}

/// Every node has its own id, and `scope_dict` lists each node of the state (map exits
/// aside) exactly once and nothing else: an id the state lacks, a node in two scopes
/// (which could make a map its own body) or in none (which would drop it) is an error
/// naming it.
fn check_scope_ids(
    nodes: &[&J],
    by_id: &BTreeMap<String, &J>,
    scopes: &BTreeMap<String, Vec<String>>,
    loc: &str,
) -> Result<(), ImportError> {
    if by_id.len() != nodes.len() {
        let mut seen = std::collections::BTreeSet::new();
        for n in nodes {
            let id = n.get("id").map_or("(none)".to_string(), J::to_string);
            if !seen.insert(id.clone()) {
                return Err(err(loc, format!("two nodes have the id {id}")));
            }
        }
    }
    // Map exits are not built (a map scope is its entry), so where they are listed does
    // not matter; hand-written files list them in both scopes.
    let is_exit = |id: &str| by_id.get(id).and_then(|n| s(n, "type")) == Some("MapExit");
    let mut scope_of: BTreeMap<&str, &str> = BTreeMap::new();
    for (scope, ids) in scopes {
        for id in ids {
            if !by_id.contains_key(id) {
                return Err(err(
                    loc,
                    format!(
                        "scope_dict['{scope}'] names node '{id}', which the state does not have"
                    ),
                ));
            }
            if let Some(first) = scope_of.insert(id, scope)
                && !is_exit(id)
            {
                return Err(err(
                    loc,
                    format!("scope_dict lists node {id} in two scopes ('{first}' and '{scope}')"),
                ));
            }
        }
    }
    if let Some(id) = by_id
        .keys()
        .find(|id| !scope_of.contains_key(id.as_str()) && !is_exit(id))
    {
        return Err(err(loc, format!("scope_dict lists no scope for node {id}")));
    }
    Ok(())
}

struct StateCx<'a> {
    sdfg: &'a Sdfg,
    by_id: BTreeMap<String, &'a J>,
    edges: Vec<Edge>,
    scopes: BTreeMap<String, Vec<String>>,
    loc: String,
    /// Access nodes whose container changed (resolved views).
    data_of: BTreeMap<String, String>,
    /// Nodes merged into others (resolved views).
    removed: std::collections::BTreeSet<String>,
    /// Tasklets whose subscripts became input connectors.
    rewritten: BTreeMap<String, subscripts::Rewritten>,
    /// The SDFG's views.
    views: &'a Views,
}

impl StateCx<'_> {
    /// The parameters of every map of this state.
    fn map_params(&self) -> std::collections::BTreeSet<String> {
        self.by_id
            .values()
            .filter(|n| s(n, "type") == Some("MapEntry"))
            .flat_map(|n| params_of(attrs(n)))
            .collect()
    }

    fn node_loc(&self, id: &str) -> String {
        let n = self.by_id.get(id);
        format!(
            "{} > node {id} ({} '{}')",
            self.loc,
            n.and_then(|n| s(n, "type")).unwrap_or("?"),
            n.and_then(|n| s(n, "label")).unwrap_or("?")
        )
    }

    /// The edge into connector `conn` of node `id`.
    fn in_edge(&self, id: &str, conn: &str) -> Option<&Edge> {
        self.edges
            .iter()
            .find(|e| e.dst == id && e.dst_conn.as_deref() == Some(conn))
    }

    fn kind(&self, id: &str) -> &str {
        self.by_id.get(id).and_then(|n| s(n, "type")).unwrap_or("")
    }

    /// The map entry a map exit belongs to.
    fn entry_of_exit(&self, exit: &str) -> Option<String> {
        self.by_id
            .get(exit)
            .and_then(|n| n.get("scope_entry"))
            .and_then(J::as_str)
            .map(str::to_string)
    }

    fn dtype_of(&self, data: &str) -> DType {
        self.sdfg
            .arrays
            .get(data)
            .map_or(DType::F64, DataDesc::dtype)
    }

    /// Builds the graph of scope `key` (`-1`: the state) into `df`: its nodes (a map's
    /// body built recursively), then its edges, nested SDFGs' aliasing connectors merged,
    /// each map's edges derived from its body, and written views checked.
    fn build(&self, key: &str, df: &mut Dataflow) -> Result<(), ImportError> {
        let members: Vec<String> = self
            .scopes
            .get(key)
            .into_iter()
            .flatten()
            .filter(|id| !self.removed.contains(*id))
            .cloned()
            .collect();
        let mut ids: BTreeMap<String, NodeId> = BTreeMap::new();
        for id in &members {
            if let Some(node) = self.node(id)? {
                ids.insert(id.clone(), df.add_node(node));
            }
        }
        let Endpoints {
            mut sources,
            mut dests,
            write_backs,
        } = self.edges(key, df, &ids);
        // DaCe's nested-SDFG connectors alias the caller's memory, sdflow's are copied in
        // and out: connectors of one container become one.
        for id in &members {
            if self.kind(id) == "NestedSDFG" {
                alias::widen_read_windows(df, ids[id], &self.node_loc(id))?;
                alias::merge_aliases(self.sdfg, df, ids[id], &self.node_loc(id))?;
            }
        }
        // Each map's edges from its body, attached to the access nodes DaCe used.
        for id in &members {
            if self.kind(id) != "MapEntry" {
                continue;
            }
            let n = ids[id];
            let src = sources.remove(id).unwrap_or_default();
            let dst = dests.remove(id).unwrap_or_default();
            sdflow_transforms::pattern::connect_map(
                &self.sdfg.arrays,
                df,
                n,
                &src,
                &dst,
                &mut sdflow_ir::propagate::BoundaryMemo::default(),
            );
        }
        self.check_write_backs(df, write_backs)
    }

    /// The node DaCe's node `id` becomes (`None`: a map exit, which is its entry's map).
    fn node(&self, id: &str) -> Result<Option<Node>, ImportError> {
        let n = *self.by_id.get(id).ok_or_else(|| {
            err(
                &self.loc,
                format!("scope_dict names node '{id}', which the state does not have"),
            )
        })?;
        let nl = self.node_loc(id);
        let a = attrs(n);
        Ok(Some(match s(n, "type").unwrap_or("") {
            "AccessNode" => Node::Access(self.access_data(id).unwrap_or_default()),
            "MapExit" => return Ok(None),
            "MapEntry" => self.map_node(id, a, &nl)?,
            "Tasklet" => self.tasklet_node(id, n, a, &nl)?,
            "NestedSDFG" => self.nested_node(a, &nl)?,
            "LibraryNode" if s(n, "classpath").is_some_and(|c| c.ends_with("Reduce")) => {
                reduce_node(a, &nl)?
            }
            other => {
                return Err(err(
                    &nl,
                    format!("nodes of type '{other}' are not supported yet"),
                ));
            }
        }))
    }

    /// The map of map entry `id` (attributes `a`), its body built from its scope.
    fn map_node(&self, id: &str, a: &J, nl: &str) -> Result<Node, ImportError> {
        let params = params_of(a);
        let sub = subset_of(a.get("range"), nl)?.unwrap_or_default();
        let ranges = sub
            .0
            .iter()
            .map(|d| match d {
                Dim::Index(e) => Ok(Range::new(e.clone(), e.add(&SymExpr::Int(1)).simplify())),
                Dim::Range { start, end, step } => Ok(Range {
                    start: start.clone(),
                    end: end.clone(),
                    step: step.clone(),
                }),
                Dim::Indirect { .. } => Err(err(nl, "an indirect map range")),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut body = Dataflow::new();
        self.build(id, &mut body)?;
        Ok(Node::Map(MapScope {
            label: name_of(s(a, "label").unwrap_or("map")),
            params,
            ranges,
            schedule: Schedule::default(),
            body,
        }))
    }

    /// The tasklet of DaCe's tasklet `id` (node `n`, attributes `a`): Python code parsed,
    /// a rewritten one's code taken, GT4Py's C++ timers recognised.
    fn tasklet_node(&self, id: &str, n: &J, a: &J, nl: &str) -> Result<Node, ImportError> {
        let (lang, text) = tasklet_code(n);
        let conns = |k: &str| connectors(n, k);
        let (stmts, ins) = match self.rewritten.get(id) {
            Some(r) => (r.code.clone(), r.inputs.clone()),
            None if lang == "Python" => (
                python::statements(text)
                    .map_err(|e| err(nl, format!("tasklet code '{text}': {e}")))?,
                conns("in_connectors"),
            ),
            None => {
                let (i, o) = (conns("in_connectors"), conns("out_connectors"));
                let stmts = cpp::gt4py_timer(text, &i, &o).ok_or_else(|| {
                    err(
                        nl,
                        format!(
                            "tasklets in {lang} are not supported (of C++, only GT4Py's metrics timers are recognised)"
                        ),
                    )
                })?;
                (stmts, i)
            }
        };
        let mut inputs = BTreeMap::new();
        for c in ins {
            let dt = self
                .in_edge(id, &c)
                .and_then(|e| e.data.as_deref())
                .map_or(DType::F64, |d| self.dtype_of(d));
            inputs.insert(c, dt);
        }
        let mut outputs = BTreeMap::new();
        for c in conns("out_connectors") {
            let dt = self
                .edges
                .iter()
                .find(|e| e.src == *id && e.src_conn.as_deref() == Some(c.as_str()))
                .and_then(|e| e.data.as_deref())
                .map_or(DType::F64, |d| self.dtype_of(d));
            outputs.insert(c, dt);
        }
        Ok(Node::Tasklet(Tasklet {
            name: name_of(s(a, "label").unwrap_or("tasklet")),
            inputs,
            outputs,
            code: stmts,
        }))
    }

    /// The nested SDFG node of attributes `a`, its SDFG converted and its symbol mapping
    /// read.
    fn nested_node(&self, a: &J, nl: &str) -> Result<Node, ImportError> {
        let inner = a
            .get("sdfg")
            .ok_or_else(|| err(nl, "a nested SDFG without its SDFG"))?;
        let mut inner = convert_sdfg(inner, &format!("{nl} > nested sdfg"))?;
        let mut symbol_mapping = BTreeMap::new();
        // Float symbols mapped to anything but a caller symbol of their type.
        let mut computed = Vec::new();
        for (k, v) in a
            .get("symbol_mapping")
            .and_then(J::as_object)
            .into_iter()
            .flatten()
        {
            let k = name_of(k);
            if let Some(dt) = inner.symbols.get(&k).map(|s| s.dtype)
                && !dt.is_int()
            {
                let text = match v {
                    J::String(t) => t.clone(),
                    J::Number(n) => n.to_string(),
                    other => return Err(err(nl, format!("expected an expression, found {other}"))),
                };
                let e = python::expr(&text)
                    .map_err(|e| err(nl, format!("the value '{text}' of symbol '{k}': {e}")))?;
                let passes = matches!(&e, Expr::Var(c)
                    if self.sdfg.symbols.get(c).map(|s| s.dtype) == Some(dt));
                if !passes {
                    computed.push((k, e));
                    continue;
                }
            }
            let v = sym_of(v, nl)?;
            // GT4Py maps symbols of its temporaries that the caller does not
            // have to themselves (`__gtir_var_2_Edge_range_0` to itself); DaCe
            // accepts the mapping as long as the nested SDFG does not use the
            // symbol, and so does the importer: such an identity mapping of a
            // name unknown here (neither a symbol nor a map parameter of this
            // state) is dropped. A nested SDFG that uses it is refused by
            // validation, naming the symbol.
            if v == SymExpr::sym(&k)
                && !self.sdfg.symbols.contains_key(&k)
                && !self.map_params().contains(&k)
            {
                continue;
            }
            symbol_mapping.insert(k, v);
        }
        for (k, e) in computed {
            float_symbols::inline_mapping(
                &mut inner,
                &mut symbol_mapping,
                &k,
                &e,
                &self.sdfg.symbols,
            )
            .map_err(|m| err(nl, m))?;
        }
        Ok(Node::Nested(sdflow_ir::NestedSdfg {
            sdfg: Box::new(inner),
            symbol_mapping,
        }))
    }

    /// Adds the edges of scope `key` to `df` (whose nodes are `ids`): where an endpoint
    /// lands at this level, the memlet in sdflow's terms (a copy names its source's data,
    /// scalars have no subset, a reduction's connectors are `in`/`out`). Edges into a map
    /// entry or out of a map exit are not added but returned, with the views written back.
    fn edges(&self, key: &str, df: &mut Dataflow, ids: &BTreeMap<String, NodeId>) -> Endpoints {
        // Where an edge endpoint lands at this level: a node, the map node of a map exit,
        // or (for the scope's own entry and exit) a body access node of the data.
        let mut sources: BTreeMap<String, BTreeMap<String, NodeId>> = BTreeMap::new();
        let mut dests: BTreeMap<String, BTreeMap<String, NodeId>> = BTreeMap::new();
        let mut body_in: BTreeMap<String, NodeId> = BTreeMap::new();
        let mut write_backs: Vec<(NodeId, bool)> = Vec::new();
        let mut body_out: BTreeMap<String, NodeId> = BTreeMap::new();
        for e in &self.edges {
            let Some(data) = e.data.clone() else { continue };
            let resolve_src = |id: &str| -> Option<NodeId> {
                if self.kind(id) == "MapExit" {
                    self.entry_of_exit(id).and_then(|en| ids.get(&en).copied())
                } else {
                    ids.get(id).copied()
                }
            };
            let src_here = resolve_src(&e.src);
            let dst_here = ids.get(&e.dst).copied();
            let src_is_scope = e.src == key;
            let dst_is_scope_exit = self.kind(&e.dst) == "MapExit"
                && self.entry_of_exit(&e.dst).as_deref() == Some(key);
            let dst_is_entry = self.kind(&e.dst) == "MapEntry";
            let src_is_exit = self.kind(&e.src) == "MapExit";
            let (from, to) = match (src_here, dst_here, src_is_scope, dst_is_scope_exit) {
                (Some(a), Some(b), _, _) => (a, b),
                (None, Some(b), true, _) => {
                    let a = *body_in
                        .entry(data.clone())
                        .or_insert_with(|| df.add_access(&data));
                    (a, b)
                }
                (Some(a), None, _, true) => {
                    let b = *body_out
                        .entry(data.clone())
                        .or_insert_with(|| df.add_access(&data));
                    (a, b)
                }
                (None, None, true, true) => {
                    let a = *body_in
                        .entry(data.clone())
                        .or_insert_with(|| df.add_access(&data));
                    let b = *body_out
                        .entry(data.clone())
                        .or_insert_with(|| df.add_access(&data));
                    (a, b)
                }
                _ => continue,
            };
            // Edges into a map entry or out of a map exit: the map's edges are derived
            // from its body below; remember which access node they attach to.
            if dst_is_entry && dst_here.is_some() {
                sources.entry(e.dst.clone()).or_default().insert(data, from);
                continue;
            }
            if src_is_exit && src_here.is_some() {
                let entry = self.entry_of_exit(&e.src).unwrap_or_default();
                dests.entry(entry).or_default().insert(data, to);
                continue;
            }
            let is_access = |n: NodeId| df.node(n).as_access().is_some();
            // DaCe addresses scalars as `x[0]`; sdflow's scalars have no subset.
            let scalar = |d: &str| matches!(self.sdfg.arrays.get(d), Some(DataDesc::Scalar { .. }));
            let sub = |d: &str, x: &Option<Subset>| {
                if scalar(d) { None } else { x.clone() }
            };
            let mut memlet = Memlet::new(&data, sub(&data, &e.subset).unwrap_or_default());
            memlet.wcr = e.wcr;
            if is_access(from) && is_access(to) {
                // A copy: sdflow's memlet names the source's data.
                let src_data = df.node(from).as_access().unwrap_or_default().to_string();
                let dst_data = df.node(to).as_access().unwrap_or_default().to_string();
                let (src_sub, dst_sub) = if data == src_data && e.is_data_src != Some(false) {
                    (e.subset.clone(), e.other.clone())
                } else if data == dst_data {
                    (e.other.clone(), e.subset.clone())
                } else {
                    (e.subset.clone(), e.other.clone())
                };
                memlet = Memlet {
                    subset: sub(&src_data, &src_sub).unwrap_or_default(),
                    // A scalar destination is addressed without a subset (absent
                    // would mean "the source's subset").
                    other_subset: if scalar(&dst_data) {
                        Some(Subset::default())
                    } else {
                        sub(&dst_data, &dst_sub)
                    },
                    data: src_data,
                    wcr: e.wcr,
                };
            }
            // The Reduce library node's connectors are `_in`/`_out` in DaCe.
            let lib = |n: NodeId| matches!(df.node(n), Node::Library(_));
            let src_conn = if lib(from) {
                Some("out")
            } else {
                e.src_conn.as_deref().filter(|_| !is_access(from))
            };
            let dst_conn = if lib(to) {
                Some("in")
            } else {
                e.dst_conn.as_deref().filter(|_| !is_access(to))
            };
            if e.src_conn.as_deref() == Some("views") {
                write_backs.push((from, true));
            } else if df
                .node(from)
                .as_access()
                .is_some_and(|d| self.views.contains_key(d))
                && is_access(to)
            {
                // A view left as a transient (not resolved) and copied out: a write-back
                // when the state also computes into it (checked below).
                write_backs.push((from, false));
            }
            df.add_edge(from, src_conn, to, dst_conn, memlet);
        }
        Endpoints {
            sources,
            dests,
            write_backs,
        }
    }

    /// A written view is copied back whole: it must be written whole, by maps that write
    /// each of its points (affine, one parameter per dimension, over ranges that cover its
    /// shape), or the copy would put stale values into the viewed array.
    fn check_write_backs(
        &self,
        df: &Dataflow,
        write_backs: Vec<(NodeId, bool)>,
    ) -> Result<(), ImportError> {
        for (v, marked) in write_backs {
            let computed = df
                .in_edges(v)
                .into_iter()
                .any(|e| df.node(df.endpoints(e).0).as_access().is_none());
            if !marked && !computed {
                continue;
            }
            let name = df.node(v).as_access().unwrap_or_default().to_string();
            let shape = self
                .sdfg
                .arrays
                .get(&name)
                .map(|d| d.shape().to_vec())
                .unwrap_or_default();
            let whole = df.in_edges(v).into_iter().all(|e| {
                let (w, _) = df.endpoints(e);
                matches!(df.node(w), Node::Map(m) if writes_whole(m, &name, &shape))
            });
            if df.in_degree(v) == 0 || !whole {
                return Err(err(
                    &self.loc,
                    format!(
                        "view '{name}' is written back to the array it views but not provably written whole; partially written views are not supported yet"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// What [`Builder::edges`] leaves to its caller: per map entry the access node each of
/// its inputs comes from, per map entry (by its exit) the node each output goes to, and
/// the views written back (`true`: marked by DaCe's `views` connector).
struct Endpoints {
    sources: BTreeMap<String, BTreeMap<String, NodeId>>,
    dests: BTreeMap<String, BTreeMap<String, NodeId>>,
    write_backs: Vec<(NodeId, bool)>,
}

/// The parameters of a map entry of attributes `a`, as sdflow names them.
fn params_of(a: &J) -> Vec<String> {
    a.get("params")
        .and_then(J::as_array)
        .into_iter()
        .flatten()
        .filter_map(J::as_str)
        .map(name_of)
        .collect()
}

/// The reduction of attributes `a`.
fn reduce_node(a: &J, nl: &str) -> Result<Node, ImportError> {
    let op = wcr_of(s(a, "wcr"), nl)?.ok_or_else(|| err(nl, "a Reduce without wcr"))?;
    let axes = match a.get("axes") {
        Some(J::Array(v)) => Some(v.iter().filter_map(J::as_u64).map(|x| x as usize).collect()),
        _ => None,
    };
    let identity = a.get("identity").and_then(J::as_f64).map(Value::F64);
    Ok(Node::Library(LibraryNode::Reduce(Reduce {
        op,
        axes,
        identity,
    })))
}

/// Containers some state accesses both at its top level and inside a map scope (in
/// `j`'s states and regions, not nested SDFGs).
fn shared_scalars(j: &J, out: &mut std::collections::BTreeSet<String>) {
    for st in j.get("nodes").and_then(J::as_array).into_iter().flatten() {
        if s(st, "type") != Some("SDFGState") {
            shared_scalars(st, out);
            for br in st
                .get("branches")
                .and_then(J::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(region) = br.get(1) {
                    shared_scalars(region, out);
                }
            }
            continue;
        }
        let top: std::collections::BTreeSet<String> = st
            .get("scope_dict")
            .and_then(|d| d.get("-1"))
            .and_then(J::as_array)
            .into_iter()
            .flatten()
            .map(|x| x.to_string().trim_matches('"').to_string())
            .collect();
        let mut at_top = std::collections::BTreeSet::new();
        let mut inside = std::collections::BTreeSet::new();
        for n in st.get("nodes").and_then(J::as_array).into_iter().flatten() {
            if s(n, "type") != Some("AccessNode") {
                continue;
            }
            let id = n
                .get("id")
                .map(|x| x.to_string().trim_matches('"').to_string());
            let Some(d) = s(attrs(n), "data").map(name_of) else {
                continue;
            };
            if id.is_some_and(|i| top.contains(&i)) {
                at_top.insert(d);
            } else {
                inside.insert(d);
            }
        }
        for e in st.get("edges").and_then(J::as_array).into_iter().flatten() {
            let m = attrs(attrs(e).get("data").unwrap_or(&J::Null));
            let Some(d) = s(m, "data").map(name_of) else {
                continue;
            };
            let id = |k: &str| {
                e.get(k)
                    .map(|x| x.to_string().trim_matches('"').to_string())
            };
            let scoped = |k: &str| id(k).is_some_and(|i| !top.contains(&i));
            // An edge between two nodes inside a scope, or leaving a map entry inward.
            let entry_out = e
                .get("src_connector")
                .and_then(J::as_str)
                .is_some_and(|c| c.starts_with("OUT_"));
            if (scoped("src") && scoped("dst")) || entry_out {
                inside.insert(d);
            }
        }
        out.extend(at_top.intersection(&inside).cloned());
    }
}

/// DaCe allocates a transient inside the innermost scope that holds all its accesses, so
/// one used only inside the body of one map is private to each iteration of that map
/// (GT4Py's per-point neighbour buffers). sdflow says the same with `local` storage; the
/// owning map's edges are derived again without it.
fn scope_local_transients(sdfg: &mut Sdfg, long_lived: &std::collections::BTreeSet<String>) {
    // For each transient array: the maps (state, node) whose bodies use it, and whether
    // anything at state level does.
    let mut owners: BTreeMap<String, std::collections::BTreeSet<(usize, NodeId)>> = BTreeMap::new();
    for (si, st) in sdfg.states.iter().enumerate() {
        let g = &st.graph;
        for n in g.node_ids() {
            if let Node::Map(m) = g.node(n) {
                for d in m.body.accessed_data() {
                    owners.entry(d).or_default().insert((si, n));
                }
            }
        }
    }
    // A state-level access node only between the map and nothing else is the map's own
    // boundary (the importer derived it); any other state-level use makes it global.
    let mut global = std::collections::BTreeSet::new();
    for (si, st) in sdfg.states.iter().enumerate() {
        let g = &st.graph;
        for n in g.node_ids() {
            if let Node::Access(d) = g.node(n) {
                let own = owners.get(d);
                let only_owner = g.in_edges(n).into_iter().chain(g.out_edges(n)).all(|e| {
                    let (a, b) = g.endpoints(e);
                    let other = if a == n { b } else { a };
                    own.is_some_and(|o| o.contains(&(si, other)))
                });
                if !only_owner {
                    global.insert(d.clone());
                }
            }
        }
        for e in g.edge_ids() {
            let m = &g.edge(e).memlet;
            global.extend(m.subset.tables().into_iter().map(str::to_string));
        }
    }
    global.extend(sdflow_transforms::pattern::control_names(&sdfg.body));
    let mut fix: std::collections::BTreeSet<(usize, NodeId)> = Default::default();
    for (d, maps) in owners {
        let Some(DataDesc::Array(a)) = sdfg.arrays.get_mut(&d) else {
            continue;
        };
        if a.transient && !global.contains(&d) && !long_lived.contains(&d) && maps.len() == 1 {
            a.storage = sdflow_ir::Storage::Local;
            fix.extend(maps);
        }
    }
    for (si, n) in fix {
        let arrays = sdfg.arrays.clone();
        let g = &mut sdfg.states[si].graph;
        let (src, dst) = sdflow_transforms::pattern::neighbours(g, n);
        sdflow_transforms::pattern::connect_map(
            &arrays,
            g,
            n,
            &src,
            &dst,
            &mut sdflow_ir::propagate::BoundaryMemo::default(),
        );
        sdflow_transforms::pattern::remove_isolated_access_nodes(g);
    }
}

/// The map's body writes every element of `data` (shape `shape`): each write is
/// `data[p_0 + c_0, …]` with distinct parameters, step 1, and the shifted ranges are
/// exactly `0:shape`.
fn writes_whole(m: &MapScope, data: &str, shape: &[SymExpr]) -> bool {
    let Some(writes) = m.affine_writes(data) else {
        return false;
    };
    !writes.is_empty()
        && writes.iter().all(|w| {
            w.len() == shape.len()
                && w.iter().zip(shape).all(|(&(k, c), extent)| {
                    let r = &m.ranges[k];
                    let lo = r.start.add(&SymExpr::Int(c)).simplify();
                    let hi = r.end.add(&SymExpr::Int(c)).simplify();
                    r.step.as_int() == Some(1)
                        && lo.as_int() == Some(0)
                        && hi.const_diff(extent) == Some(0)
                })
        })
}
