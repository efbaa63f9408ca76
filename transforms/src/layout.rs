//! Layout specialization: the dimension in which each argument is passed contiguously
//! becomes part of the program, and the program's own arrays follow that layout.
//!
//! GT4Py declares every field's strides as symbols (`__vn_Edge_stride`,
//! `__vn_K_stride`): the same compiled program takes fields in any layout, and which
//! dimension is contiguous is known only at the call. Then no pass can put the innermost
//! loop (the GPU's fastest thread index) over the contiguous dimension
//! ([`crate::LoopOrder`] leaves maps over such arrays as they are), the C compiler
//! vectorizes only behind a run-time stride test, and the program's transients, laid out
//! row-major, disagree with fields passed column-major (as a Fortran model passes them):
//! whichever loop is innermost, one of the two is walked with a stride.
//!
//! [`specialize_unit_strides`] takes, per argument, the dimension whose stride is 1 in
//! the arrays that will be passed (GT4Py's DaCe backend has the same choice as its
//! `unit_strides_kind`, by dimension kind) and
//!
//! - makes a stride symbol there a static 1 ([`crate::Specialize`] folds it away; the
//!   arguments' check then refuses an array that is not contiguous there, naming it);
//! - when most arguments of two or more dimensions are contiguous in their first
//!   dimension (column-major), inlines the callees (as the pipeline's first pass would)
//!   and lays out every transient of two or more dimensions column-major too. Only
//!   transients whose strides are the row-major ones of their shape (as built and
//!   imported) are changed; one passed to a nested SDFG that stays a call only where
//!   the callee can follow: passed whole and declared there row-major (relaid with it)
//!   or with stride symbols the call maps to the caller's strides (the mapping follows),
//!   or passed one element at a time.
//!
//! ```text
//! vn: [E, K] strides [__vn_Edge_stride, __vn_K_stride]    passed column-major
//! tmp: [E, K] strides [K, 1] (transient)
//!                        →
//! vn: [E, K] strides [__vn_Edge_stride, __vn_K_stride]    __vn_Edge_stride = 1 (static)
//! tmp: [E, K] strides [1, E]
//! ```
//!
//! It never changes a result: strides decide where elements live, not what is computed,
//! and a static symbol's value is checked against every array passed.
//! [`unit_dims_of`] finds the contiguous dimension of each array a caller has.

use std::collections::{BTreeMap, BTreeSet};

use crate::{InlineNested, Pass};
use sdflow_ir::{
    DataDesc, Dataflow, Dim, EdgeId, Node, NodeId, Sdfg, SymExpr, Value, data::row_major_strides,
};

/// What [`specialize_unit_strides`] changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LayoutReport {
    /// The stride symbols made a static 1, in name order.
    pub strides_specialized: Vec<String>,
    /// Whether the transients follow a column-major layout.
    pub column_major: bool,
    /// The transients laid out column-major, in name order.
    pub transients_relaid: Vec<String>,
    /// Transients of two or more dimensions left row-major in a column-major program
    /// (passed to a nested SDFG that cannot follow), in name order.
    pub transients_kept: Vec<String>,
}

/// Why a layout cannot be specialized.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// The name is not an array argument of the program.
    #[error("'{0}' is not an array argument of program '{1}'")]
    NotAnArgument(String, String),
    /// The dimension is out of range.
    #[error("'{name}' has {rank} dimension(s); it cannot be contiguous in dimension {dim}")]
    NoSuchDimension {
        /// The argument.
        name: String,
        /// The dimension asked for.
        dim: usize,
        /// Its rank.
        rank: usize,
    },
    /// The declared stride there is neither 1 nor a runtime symbol.
    #[error(
        "'{name}' declares stride '{stride}' in dimension {dim}: it cannot be 1 there (only a stride that is 1, or a runtime symbol no shape or other stride uses, can)"
    )]
    NotUnit {
        /// The argument.
        name: String,
        /// The dimension.
        dim: usize,
        /// The declared stride.
        stride: String,
    },
}

/// The dimension of each array whose stride is 1 (and extent above 1), from the extents
/// and element strides of the arrays a caller will pass; arrays with no such dimension
/// (one element, or none contiguous) are left out.
pub fn unit_dims_of<'a>(
    arrays: impl IntoIterator<Item = (&'a str, &'a [usize], &'a [isize])>,
) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for (name, extents, strides) in arrays {
        let unit: Vec<usize> = (0..extents.len().min(strides.len()))
            .filter(|&d| extents[d] > 1 && strides[d] == 1)
            .collect();
        if let [d] = unit.as_slice() {
            out.insert(name.to_string(), *d);
        }
    }
    out
}

/// An order of the dimensions in memory, for every argument at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Row-major (C, NumPy's default): the last dimension contiguous.
    RowMajor,
    /// Column-major (Fortran): the first dimension contiguous.
    ColumnMajor,
}

impl std::str::FromStr for Order {
    type Err = String;
    fn from_str(s: &str) -> Result<Order, String> {
        match s.to_ascii_lowercase().as_str() {
            "c" | "row-major" => Ok(Order::RowMajor),
            "f" | "column-major" => Ok(Order::ColumnMajor),
            other => Err(format!(
                "layout '{other}': expected 'C' (row-major) or 'F' (column-major)"
            )),
        }
    }
}

/// The contiguous dimension of every array argument of `sdfg` passed in `order`, for
/// [`specialize_unit_strides`]: the last (row-major) or first (column-major) dimension
/// of each argument whose stride there is a runtime symbol of its own (its layout
/// chosen by the caller). Arguments with strides fixed by the program keep them and are
/// left out.
pub fn unit_dims_in_order(sdfg: &Sdfg, order: Order) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for (name, desc) in &sdfg.arrays {
        let DataDesc::Array(a) = desc else { continue };
        if a.transient || a.rank() == 0 {
            continue;
        }
        let dim = match order {
            Order::RowMajor => a.rank() - 1,
            Order::ColumnMajor => 0,
        };
        if let Some(SymExpr::Sym(s)) = a.strides.get(dim)
            && sdfg
                .symbols
                .get(&**s)
                .is_some_and(|sym| sym.dtype.is_int() && sym.value.is_none())
            && uses(sdfg, s) == 1
        {
            out.insert(name.clone(), dim);
        }
    }
    out
}

/// Specializes `sdfg` for arguments passed contiguously in the dimensions `unit` names
/// (argument → dimension of stride 1). See the module documentation.
pub fn specialize_unit_strides(
    sdfg: &mut Sdfg,
    unit: &BTreeMap<String, usize>,
) -> Result<LayoutReport, LayoutError> {
    let mut report = LayoutReport::default();
    let mut statics: BTreeSet<String> = BTreeSet::new();
    let (mut first, mut last) = (0usize, 0usize);
    for (name, &dim) in unit {
        let Some(DataDesc::Array(a)) = sdfg.arrays.get(name).filter(|d| !d.transient()) else {
            return Err(LayoutError::NotAnArgument(name.clone(), sdfg.name.clone()));
        };
        let Some(stride) = a.strides.get(dim) else {
            return Err(LayoutError::NoSuchDimension {
                name: name.clone(),
                dim,
                rank: a.rank(),
            });
        };
        // A runtime symbol of its own: one that sizes an array or strides another
        // dimension would change them too.
        let runtime_symbol = match stride {
            SymExpr::Sym(s) => (sdfg
                .symbols
                .get(&**s)
                .is_some_and(|sym| sym.dtype.is_int() && sym.value.is_none())
                && uses(sdfg, s) == 1)
                .then(|| s.to_string()),
            _ => None,
        };
        match runtime_symbol {
            Some(s) => {
                statics.insert(s);
            }
            None if stride.as_int() == Some(1) => {}
            None => {
                return Err(LayoutError::NotUnit {
                    name: name.clone(),
                    dim,
                    stride: stride.to_string(),
                });
            }
        }
        if a.rank() >= 2 {
            if dim == 0 {
                first += 1;
            } else if dim + 1 == a.rank() {
                last += 1;
            }
        }
    }
    for s in &statics {
        if let Some(sym) = sdfg.symbols.get_mut(s) {
            sym.value = Some(Value::I64(1).cast(sym.dtype));
        }
    }
    report.strides_specialized = statics.into_iter().collect();
    report.column_major = first > last;
    if report.column_major {
        // Callees inlined first: their transients become the program's, laid out with
        // the others (the pipeline would inline them first anyway).
        // (Each run inlines what it can; a bound, as the pipeline has one.)
        for _ in 0..MAX_INLINE_ROUNDS {
            if InlineNested.run(sdfg).is_empty() {
                break;
            }
        }
        let names: Vec<String> = sdfg
            .arrays
            .iter()
            .filter(|(_, d)| matches!(d, DataDesc::Array(a) if a.transient && a.rank() >= 2))
            .map(|(k, _)| k.clone())
            .collect();
        let ones: BTreeMap<String, SymExpr> = report
            .strides_specialized
            .iter()
            .map(|s| (s.clone(), SymExpr::Int(1)))
            .collect();
        for name in names {
            if relayable(sdfg, &name, 0) {
                relayout(sdfg, &name);
                report.transients_relaid.push(name);
                continue;
            }
            // A transient an inlined callee declared with a field's strides follows the
            // field.
            let follows = sdfg
                .arrays
                .get(&name)
                .and_then(DataDesc::as_array)
                .is_some_and(|a| {
                    a.strides
                        .first()
                        .map(|e| e.substitute(&ones).simplify().as_int())
                        == Some(Some(1))
                });
            if !follows {
                report.transients_kept.push(name);
            }
        }
    }
    Ok(report)
}

/// The most runs of [`InlineNested`] before the transients are laid out.
const MAX_INLINE_ROUNDS: usize = 64;

/// How deep [`relayable`] follows a container into callees.
const MAX_DEPTH: usize = 8;

/// Whether container `name` of `sdfg` has the row-major strides of its shape, and so
/// has every callee's view of it: passed whole (each dimension `0:extent`) to nested
/// SDFGs only, where it is again such a container, or one whose strides are symbols
/// the call maps to those row-major strides ([`CalleeStrides`]).
pub(crate) fn relayable(sdfg: &Sdfg, name: &str, depth: usize) -> bool {
    let Some(DataDesc::Array(a)) = sdfg.arrays.get(name) else {
        return false;
    };
    if depth > MAX_DEPTH || a.rank() < 2 || !is_row_major(a) {
        return false;
    }
    let mut ok = true;
    for st in &sdfg.states {
        for_each_call(&st.graph, name, &mut |ns, conn, memlet| {
            let whole = memlet.other_subset.is_none()
                && memlet.subset.0.len() == a.rank()
                && memlet.subset.0.iter().zip(&a.shape).all(|(d, n)| match d {
                    Dim::Range { start, end, step } => {
                        start.simplify().as_int() == Some(0)
                            && step.simplify().as_int() == Some(1)
                            && end.simplify() == n.simplify()
                    }
                    _ => false,
                });
            // One element (an `if` inside a map body takes a point's value): its
            // place in memory is the caller's business.
            let element = memlet.other_subset.is_none()
                && memlet.subset.0.iter().all(|d| matches!(d, Dim::Index(_)))
                && conn.is_some_and(|c| {
                    ns.sdfg
                        .arrays
                        .get(c)
                        .is_some_and(|d| d.shape().iter().all(|e| e.simplify().as_int() == Some(1)))
                });
            ok &= element
                || whole
                    && match conn.map(|c| callee_strides(ns, c, &a.strides)) {
                        Some(CalleeStrides::RowMajor(c)) => relayable(&ns.sdfg, c, depth + 1),
                        Some(CalleeStrides::Mapped(_)) => true,
                        _ => false,
                    };
        });
    }
    ok
}

pub(crate) fn is_row_major(a: &sdflow_ir::Array) -> bool {
    let simple = |v: &[SymExpr]| v.iter().map(SymExpr::simplify).collect::<Vec<_>>();
    simple(&a.strides) == simple(&row_major_strides(&a.shape))
}

/// How a callee declares the strides of a container the caller passes it whole.
enum CalleeStrides<'a> {
    /// Its own row-major strides: the callee's container `.0` follows the caller's.
    RowMajor(&'a str),
    /// A symbol per dimension, each used by no other container of the callee and mapped
    /// by the call to the caller's stride there (GT4Py's `__<field>_<Dim>_stride`): the
    /// mapping follows the caller's strides.
    Mapped(Vec<String>),
    /// Anything else: the container keeps its layout.
    Other,
}

fn callee_strides<'a>(
    ns: &'a sdflow_ir::NestedSdfg,
    conn: &'a str,
    caller: &[SymExpr],
) -> CalleeStrides<'a> {
    let Some(DataDesc::Array(a)) = ns.sdfg.arrays.get(conn) else {
        return CalleeStrides::Other;
    };
    if a.rank() != caller.len() {
        return CalleeStrides::Other;
    }
    if is_row_major(a) {
        return CalleeStrides::RowMajor(conn);
    }
    let mut syms = Vec::new();
    for (st, want) in a.strides.iter().zip(caller) {
        let SymExpr::Sym(x) = st else {
            return CalleeStrides::Other;
        };
        let mapped = ns
            .symbol_mapping
            .get(&**x)
            .is_some_and(|e| e.simplify() == want.simplify());
        let shared = ns.sdfg.arrays.iter().any(|(k, d)| {
            k != conn
                && d.as_array().is_some_and(|o| {
                    o.shape
                        .iter()
                        .chain(&o.strides)
                        .any(|e| e.free_symbols().contains(&**x))
                })
        });
        if !mapped || shared || syms.contains(&x.to_string()) {
            return CalleeStrides::Other;
        }
        syms.push(x.to_string());
    }
    CalleeStrides::Mapped(syms)
}

/// Lays out container `name` of `sdfg` column-major, and every callee's view of it
/// (checked by [`relayable`]).
pub(crate) fn relayout(sdfg: &mut Sdfg, name: &str) {
    let Some(DataDesc::Array(a)) = sdfg.arrays.get_mut(name) else {
        return;
    };
    let old = a.strides.clone();
    a.strides = column_major_strides(&a.shape);
    let new = a.strides.clone();
    for st in &mut sdfg.states {
        relayout_callees(&mut st.graph, name, &old, &new);
    }
}

fn relayout_callees(df: &mut Dataflow, name: &str, old: &[SymExpr], new: &[SymExpr]) {
    let mut calls: Vec<(NodeId, String)> = Vec::new();
    for (n, _, conn) in call_edges(df, name) {
        if let Some(c) = conn
            && !calls.contains(&(n, c.clone()))
        {
            calls.push((n, c));
        }
    }
    for (n, conn) in calls {
        if let Node::Nested(ns) = &mut df.graph[n] {
            match callee_strides(ns, &conn, old) {
                CalleeStrides::RowMajor(_) => relayout(&mut ns.sdfg, &conn),
                CalleeStrides::Mapped(syms) => {
                    for (x, e) in syms.into_iter().zip(new) {
                        ns.symbol_mapping.insert(x, e.clone());
                    }
                }
                CalleeStrides::Other => {}
            }
        }
    }
    for n in df.node_ids() {
        if let Node::Map(m) = &mut df.graph[n] {
            relayout_callees(&mut m.body, name, old, new);
        }
    }
}

/// The edges of `df` (not its map bodies) that name `name` and end at a nested SDFG
/// call: the call, the edge, and the callee's connector.
fn call_edges(df: &Dataflow, name: &str) -> Vec<(NodeId, EdgeId, Option<String>)> {
    let mut out = Vec::new();
    for e in df.edge_ids() {
        let (s, d) = df.endpoints(e);
        let edge = df.edge(e);
        if edge.memlet.data != name {
            continue;
        }
        for (n, conn) in [(d, &edge.dst_conn), (s, &edge.src_conn)] {
            if matches!(df.node(n), Node::Nested(_)) {
                out.push((n, e, conn.clone()));
            }
        }
    }
    out
}

/// Calls `f(callee, connector, memlet)` for every edge of `df` (map bodies too) that
/// names `name` and ends at a nested SDFG call.
fn for_each_call(
    df: &Dataflow,
    name: &str,
    f: &mut dyn FnMut(&sdflow_ir::NestedSdfg, Option<&str>, &sdflow_ir::Memlet),
) {
    for (n, e, conn) in call_edges(df, name) {
        if let Node::Nested(ns) = df.node(n) {
            f(ns, conn.as_deref(), &df.edge(e).memlet);
        }
    }
    for n in df.node_ids() {
        if let Node::Map(m) = df.node(n) {
            for_each_call(&m.body, name, f);
        }
    }
}

/// How many shapes and strides of `sdfg`'s arrays name symbol `s`.
fn uses(sdfg: &Sdfg, s: &str) -> usize {
    sdfg.arrays
        .values()
        .filter_map(DataDesc::as_array)
        .flat_map(|a| a.shape.iter().chain(&a.strides))
        .filter(|e| e.free_symbols().contains(s))
        .count()
}

/// Dense column-major strides of `shape` (the first dimension contiguous).
pub fn column_major_strides(shape: &[SymExpr]) -> Vec<SymExpr> {
    let mut strides = Vec::with_capacity(shape.len());
    let mut s = SymExpr::Int(1);
    for e in shape {
        strides.push(s.simplify());
        s = s.mul(e);
    }
    strides
}
