//! `sdflow-ir`: the SDFG data model of sdflow.
//!
//! An [`Sdfg`] holds data containers ([`DataDesc`]), symbols ([`Symbol`]), states whose
//! dataflow is a [`Dataflow`] graph of access, tasklet, map, nested-SDFG and library
//! nodes joined by [`Memlet`]s, and structured control flow ([`Block`]). Maps are
//! hierarchical: a [`MapScope`] owns its body as a nested dataflow graph.
//!
//! Around the data model: [`builder`] (writing SDFGs in Rust), [`validate`]
//! (every problem, each located), [`format`](mod@format) (the versioned JSON format), [`dot`] (drawings),
//! [`interp`] (the reference interpreter that defines the semantics) and, behind the
//! `testkit` feature, [`testkit`] (random valid programs for property tests).

#![warn(missing_docs)]

pub mod bind;
pub mod builder;
pub mod control;
pub mod data;
pub mod dataflow;
pub mod dot;
pub mod dtype;
pub mod expr;
pub mod format;
pub mod interp;
pub mod memlet;
pub mod parse;
pub mod propagate;
pub mod sdfg;
pub mod stats;
pub mod symexpr;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod typing;
pub mod uses;
pub mod validate;

pub use builder::{DataflowBuilder, SdfgBuilder};
pub use control::{Block, If, Loop, StateId};
pub use data::{Array, DataDesc, Descriptors, Storage, Symbol};
pub use dataflow::{
    Dataflow, Decomposition, Edge, EdgeId, HaloExchange, LibraryNode, MapScope, NestedSdfg, Node,
    NodeId, Range, Reachability, Reduce, Schedule, Tasklet,
};
pub use dtype::{DType, Value};
pub use expr::{BinOp, Expr, MathFn, Stmt, UnOp};
pub use memlet::{Dim, Memlet, Subset, Wcr};
pub use sdfg::{Sdfg, State};
pub use symexpr::{SymExpr, SymOp};
