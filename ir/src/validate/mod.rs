//! Validation: every problem of an SDFG, each naming where it is.
//!
//! [`Sdfg::validate`] never panics, whatever the input, and reports every problem it finds
//! (not just the first), in a deterministic order: declarations, `arg_order`, control flow,
//! then the states in index order (nodes, then edges, then cycles and races of each graph,
//! map bodies and nested SDFGs recursively, where they appear).
//!
//! # The rules it enforces
//!
//! - **Names** of the program, containers, symbols, connectors, map parameters and tasklet
//!   locals are identifiers `[A-Za-z_][A-Za-z0-9_]*`. A name both a container and a symbol
//!   is an error.
//! - **Declarations**: every container named by an access node, a memlet, an indirection
//!   table or `arg_order` is declared in `arrays`. Every free symbol of a shape, stride,
//!   range, subset, condition, loop bound, assignment or symbol mapping is a declared
//!   symbol, an enclosing map parameter, a loop variable / assigned symbol, or (in control
//!   flow conditions and assignments only) a scalar container. Float symbols never appear
//!   in symbolic (integer) expressions. Arrays have as many strides as dimensions. A
//!   symbol's static value has the symbol's type.
//! - **Tasklets**: each input connector has exactly one incoming edge, each output
//!   connector at least one outgoing edge; edges name existing connectors; connector types
//!   equal the types of the data they read or write; tasklet memlets are single elements.
//!   Code: each output assigned exactly once, locals assigned once before use, inputs never
//!   assigned, every name a connector, local, symbol or enclosing map parameter, and the
//!   code is well typed ([`crate::Expr::infer`]).
//! - **Edges** have an access node at one end at least (access↔access copies, and access
//!   to or from a tasklet, map, nested SDFG or library node). A memlet touching an access
//!   node names that node's data (on a copy, `data` is the source and `other_subset` is in
//!   the destination's coordinates; copy volumes agree where decidable). Edges of access
//!   and map nodes carry no connectors.
//! - **Subsets** have the rank of their data and lie within `0..shape` where decidable
//!   (over the boxes of the enclosing map parameters). Indirection tables are integer
//!   containers of rank `index.len()`.
//! - **Maps**: parameters are distinct, shadow no symbol, container or enclosing
//!   parameter, and have one range each. In the body, an access node without incoming body
//!   edges is an input and needs an edge into the map carrying that data; one with incoming
//!   edges is an output and needs an edge out of the map for that data — except transient
//!   scalars and `local` arrays, which are private to the body's iteration (a `local`
//!   array must be transient and is never accessed outside map bodies; a transient scalar
//!   in a body is written by the body before it is read there, and is not used outside
//!   map bodies, by a state or by the control flow). Conversely each map in-edge's data is read in
//!   the body (or used there as an indirection table) and each out-edge's data is written
//!   there. Every body memlet of an input or output, over the map's parameters, lies within
//!   the map edge's memlet of the same data where decidable.
//! - **Graphs** (states and map bodies) are acyclic. Two unordered nodes (no path either
//!   way) must not both write the same data, or one write what the other reads, unless the
//!   subsets are provably disjoint or both writes carry a write-conflict resolution.
//! - **Nested SDFGs**: connectors name non-transient containers of the callee, of the same
//!   type; the symbol mapping's keys are callee symbols, and every callee symbol without a
//!   static value (and not set by the callee's control flow) has an entry. The callee is
//!   validated recursively, its problems located under the nested node.
//! - **Library nodes** (reduce): connectors exactly `in` (one edge) and `out`; axes
//!   distinct and within the input's rank.
//! - **Control flow**: every state referenced exists, and each state is referenced exactly
//!   once. A loop variable is a declared integer symbol that its body does not reassign
//!   (by an assignment or an inner loop). Assignment targets are declared integer symbols
//!   without a static value.
//! - **`arg_order`**: no duplicates; each name a non-transient container or a symbol
//!   without a static value.

mod control;
mod graph;
mod halo;
mod location;
mod maps;
mod memo;
mod tasklet;

use std::collections::BTreeSet;
use std::fmt;

pub use halo::{halo_offsets, halo_widths};
use location::{Loc, Where};
pub use location::{Location, Segment};

use crate::data::DataDesc;
use crate::propagate::ParamBox;
use crate::sdfg::Sdfg;
use crate::symexpr::SymExpr;

/// The class of a [`Problem`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProblemKind {
    /// A container name that is not declared.
    UndefinedData,
    /// A symbol name that is not defined where it is used.
    UndefinedSymbol,
    /// A float symbol inside a symbolic (integer) expression.
    FloatSymbol,
    /// Types that should agree do not.
    DTypeMismatch,
    /// A connector without the edges it needs.
    DanglingConnector,
    /// An edge names a connector the node does not have.
    UnknownConnector,
    /// A map body and the map's edges disagree on what crosses the map.
    MapBoundary,
    /// A body memlet is not covered by the map edge's memlet.
    NotCovered,
    /// A subset reaches outside its data's shape.
    OutOfBounds,
    /// A subset's rank differs from its data's.
    RankMismatch,
    /// A cycle in a dataflow graph.
    Cycle,
    /// Two unordered nodes conflict on the same data.
    WriteRace,
    /// A loop variable assigned inside its own loop.
    LoopVarReassigned,
    /// A name that is not an identifier.
    BadName,
    /// A name used both as a container and as a symbol.
    NameClash,
    /// An edge between the wrong kinds of nodes, or whose memlet names the wrong data.
    BadEdge,
    /// A memlet of the wrong shape (a tasklet memlet that is not one element, copy
    /// volumes that differ).
    BadMemlet,
    /// A malformed indirection (table not an integer container, or of the wrong rank).
    BadIndirect,
    /// Tasklet code that is ill-formed or ill-typed.
    TaskletCode,
    /// A malformed map scope (parameters, ranges).
    BadMap,
    /// A malformed array declaration.
    BadArray,
    /// A nested SDFG whose interface does not fit.
    NestedSdfg,
    /// A malformed library node.
    LibraryNode,
    /// A malformed control-flow body.
    ControlFlow,
    /// A malformed `arg_order`.
    ArgOrder,
}

/// One problem found by [`Sdfg::validate`].
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    /// The class of problem.
    pub kind: ProblemKind,
    /// Where it is.
    pub location: Location,
    /// What is wrong, naming the elements involved.
    pub message: String,
}

/// `{location}: {message}`.
impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location, self.message)
    }
}

impl Sdfg {
    /// Checks the whole program; returns every problem found, in a deterministic order.
    pub fn validate(&self) -> Result<(), Vec<Problem>> {
        let mut cx = Cx::default();
        check_sdfg(&mut cx, self, &Location::default());
        if cx.problems.is_empty() {
            Ok(())
        } else {
            Err(cx.problems)
        }
    }
}

/// Collects problems.
#[derive(Default)]
pub(crate) struct Cx {
    problems: Vec<Problem>,
    memo: memo::Memo,
}

impl Cx {
    fn push(&mut self, kind: ProblemKind, location: &(impl Where + ?Sized), message: String) {
        self.problems.push(Problem {
            kind,
            location: location.location(),
            message,
        });
    }
}

/// What names are defined at a point of the dataflow.
#[derive(Clone)]
pub(crate) struct Scope<'a> {
    sdfg: &'a Sdfg,
    /// Symbols the control flow sets (loop variables, assignments).
    flow: &'a BTreeSet<String>,
    /// Containers with an access node in a state's graph (outside map bodies).
    state_level: &'a rustc_hash::FxHashSet<&'a str>,
    /// Names the control flow's expressions read (loop bounds, conditions, assignments).
    control: &'a BTreeSet<String>,
    /// Enclosing map parameters, outermost first.
    params: Vec<String>,
    /// Their boxes (where expressible).
    boxes: Vec<ParamBox>,
    /// `boxes` interned in the worker's [`memo::Memo`].
    boxes_id: u32,
}

impl<'a> Scope<'a> {
    fn new(
        sdfg: &'a Sdfg,
        flow: &'a BTreeSet<String>,
        state_level: &'a rustc_hash::FxHashSet<&'a str>,
        control: &'a BTreeSet<String>,
    ) -> Scope<'a> {
        Scope {
            sdfg,
            flow,
            state_level,
            control,
            params: Vec::new(),
            boxes: Vec::new(),
            boxes_id: memo::NO_BOXES,
        }
    }

    /// Checks the free symbols of `e`; `what` says where it occurs; `scalars` allows
    /// scalar containers (control-flow conditions and assignments).
    fn check_expr(
        &self,
        cx: &mut Cx,
        loc: &(impl Where + ?Sized),
        e: &SymExpr,
        what: &(impl std::fmt::Display + ?Sized),
        scalars: bool,
    ) -> bool {
        let mut names = Vec::new();
        e.symbol_refs(&mut names);
        self.check_names(cx, loc, names, what, scalars)
    }

    fn check_names(
        &self,
        cx: &mut Cx,
        loc: &(impl Where + ?Sized),
        mut names: Vec<&str>,
        what: &(impl std::fmt::Display + ?Sized),
        scalars: bool,
    ) -> bool {
        names.sort_unstable();
        names.dedup();
        let mut ok = true;
        for s in names {
            if self.params.iter().any(|p| p == s) {
                continue;
            }
            if let Some(sym) = self.sdfg.symbols.get(s) {
                if !sym.dtype.is_int() {
                    ok = false;
                    cx.push(
                        ProblemKind::FloatSymbol,
                        loc,
                        format!(
                            "{} symbol '{s}' used in {what} (symbolic expressions are integer)",
                            sym.dtype
                        ),
                    );
                }
                continue;
            }
            if self.flow.contains(s) {
                continue;
            }
            if scalars && matches!(self.sdfg.arrays.get(s), Some(DataDesc::Scalar { .. })) {
                continue;
            }
            ok = false;
            cx.push(
                ProblemKind::UndefinedSymbol,
                loc,
                format!("undefined symbol '{s}' in {what}"),
            );
        }
        ok
    }

    /// [`Scope::check_expr`] over several expressions (no scalars); true when all are fine.
    fn check_expr_all(
        &self,
        cx: &mut Cx,
        loc: &(impl Where + ?Sized),
        es: &[&SymExpr],
        what: &(impl std::fmt::Display + ?Sized),
    ) -> bool {
        let mut names = Vec::new();
        for e in es {
            e.symbol_refs(&mut names);
        }
        self.check_names(cx, loc, names, what, false)
    }
}

/// True for `[A-Za-z_][A-Za-z0-9_]*`.
pub(crate) fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn check_name(cx: &mut Cx, loc: &(impl Where + ?Sized), what: &str, name: &str) {
    if !is_identifier(name) {
        cx.push(
            ProblemKind::BadName,
            loc,
            format!("{what} name '{name}' is not an identifier"),
        );
    } else if crate::parse::RESERVED.contains(&name) {
        cx.push(
            ProblemKind::BadName,
            loc,
            format!("{what} name '{name}' is a reserved word of the expression syntax"),
        );
    }
}

/// Validates one SDFG (top-level or nested) under `prefix`.
pub(crate) fn check_sdfg(cx: &mut Cx, sdfg: &Sdfg, prefix: &Location) {
    let loc = prefix.child(Segment::Sdfg(sdfg.name.clone()));
    check_name(cx, &loc, "program", &sdfg.name);
    // Per program, not per map or container: what the control flow sets, and which
    // containers states access outside map bodies.
    let flow = sdfg.loop_and_assigned_symbols();
    let state_level: rustc_hash::FxHashSet<&str> = sdfg
        .states
        .iter()
        .flat_map(|s| s.graph.graph.node_weights().filter_map(|n| n.as_access()))
        .collect();
    let control = crate::uses::control_names(&sdfg.body);
    let scope = Scope::new(sdfg, &flow, &state_level, &control);
    check_declarations(cx, sdfg, &scope, &loc);
    check_arg_order(cx, sdfg, &loc);
    control::check_control(cx, sdfg, &scope, &loc);
    let check_state = |cx: &mut Cx, i: usize, state: &crate::State| {
        let sloc = Loc::State(&loc, &state.name, i);
        graph::check_graph(cx, &scope, &state.graph, &sloc);
    };
    if sdfg.states.len() < PARALLEL_STATES {
        for (i, state) in sdfg.states.iter().enumerate() {
            check_state(cx, i, state);
        }
    } else {
        // States are checked independently; their problems are reported in state order.
        use rayon::prelude::*;
        // One memo per job of consecutive states (states repeat each other's subsets).
        let found: Vec<Vec<Problem>> = sdfg
            .states
            .par_iter()
            .enumerate()
            .with_min_len(16)
            .map_init(memo::Memo::default, |memo, (i, state)| {
                let mut own = Cx {
                    problems: Vec::new(),
                    memo: std::mem::take(memo),
                };
                check_state(&mut own, i, state);
                *memo = own.memo;
                own.problems
            })
            .collect();
        cx.problems.extend(found.into_iter().flatten());
    }
    halo::check_halo_reads(cx, sdfg, &loc);
}

/// Programs with at least this many states have their states checked in parallel.
const PARALLEL_STATES: usize = 64;

fn check_declarations(cx: &mut Cx, sdfg: &Sdfg, scope: &Scope<'_>, loc: &Location) {
    for (name, desc) in &sdfg.arrays {
        // Built only for a problem (programs declare thousands of containers).
        let aloc = location::Lazy(|| loc.child(Segment::Array(name.clone())));
        check_name(cx, &aloc, "container", name);
        if sdfg.symbols.contains_key(name) {
            cx.push(
                ProblemKind::NameClash,
                &aloc,
                format!("'{name}' is declared both as a container and as a symbol"),
            );
        }
        if let DataDesc::Array(a) = desc {
            if a.storage == crate::data::Storage::Local {
                let at_state_level = scope.state_level.contains(name.as_str());
                if !a.transient || at_state_level {
                    cx.push(
                        ProblemKind::BadArray,
                        &aloc,
                        format!(
                            "'{name}' has local storage: it must be transient and accessed only inside map bodies"
                        ),
                    );
                }
            }
            if a.shape.len() != a.strides.len() {
                cx.push(
                    ProblemKind::BadArray,
                    &aloc,
                    format!(
                        "array '{name}' has {} dimension(s) but {} stride(s)",
                        a.shape.len(),
                        a.strides.len()
                    ),
                );
            }
            for (i, s) in a.shape.iter().enumerate() {
                scope.check_expr(
                    cx,
                    &aloc,
                    s,
                    &format_args!("dimension {i} of the shape of '{name}'"),
                    false,
                );
            }
            for (i, s) in a.strides.iter().enumerate() {
                scope.check_expr(cx, &aloc, s, &format_args!("stride {i} of '{name}'"), false);
            }
            // Strides describe the memory layout of the array passed: where shape and
            // strides are constants, they must be positive and must not overlap
            // (symbolic ones are checked when arguments are bound).
            let consts =
                |es: &[SymExpr]| es.iter().map(SymExpr::as_int).collect::<Option<Vec<i64>>>();
            if let (Some(n), Some(st)) = (consts(&a.shape), consts(&a.strides))
                && n.len() == st.len()
                && let Err(e) = crate::bind::check_layout(name, &n, &st)
            {
                cx.push(ProblemKind::BadArray, &aloc, e.0);
            }
        }
    }
    for (name, sym) in &sdfg.symbols {
        let sloc = location::Lazy(|| loc.child(Segment::Symbol(name.clone())));
        check_name(cx, &sloc, "symbol", name);
        if let Some(v) = sym.value
            && v.dtype() != sym.dtype
        {
            cx.push(
                ProblemKind::DTypeMismatch,
                &sloc,
                format!(
                    "symbol '{name}' is {} but its static value {v} is {}",
                    sym.dtype,
                    v.dtype()
                ),
            );
        }
    }
}

fn check_arg_order(cx: &mut Cx, sdfg: &Sdfg, loc: &Location) {
    let aloc = loc.child(Segment::ArgOrder);
    let mut seen = BTreeSet::new();
    for name in &sdfg.arg_order {
        if !seen.insert(name) {
            cx.push(
                ProblemKind::ArgOrder,
                &aloc,
                format!("'{name}' appears more than once in arg_order"),
            );
            continue;
        }
        if let Some(d) = sdfg.arrays.get(name) {
            if d.transient() {
                cx.push(
                    ProblemKind::ArgOrder,
                    &aloc,
                    format!("arg_order names transient container '{name}'"),
                );
            }
        } else if let Some(s) = sdfg.symbols.get(name) {
            if s.value.is_some() {
                cx.push(
                    ProblemKind::ArgOrder,
                    &aloc,
                    format!("arg_order names symbol '{name}', which has a static value"),
                );
            }
        } else {
            cx.push(
                ProblemKind::UndefinedData,
                &aloc,
                format!("arg_order names '{name}', which is neither a container nor a symbol"),
            );
        }
    }
}
