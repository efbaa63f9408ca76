//! `sdflow-orchestration`: the front ends of sdflow, and what turns programs into callables.
//!
//! - [`Stencil`]: a stencil DSL that reads like the math — fields over `(I, J, K)` or
//!   unstructured `(Cell|Edge|Vertex, K)` dimensions read at relative offsets or through
//!   connectivity tables, scalar parameters, `select`, math functions, several outputs, and
//!   vertical scans (forward or backward, with the previous level's values carried).
//! - [`Program`]: a whole timestep — stencil calls with explicit domains, counted loops,
//!   ifs on runtime flags, nested programs, temporaries, static symbols — flattened into
//!   one validated SDFG by [`Program::build`] (a worklist, linear in program size).
//!
//! - [`workflow`]: the toolchain as memoized, replaceable steps (specialize, optimize,
//!   generate, compile, load); [`config`]: per-program options from a TOML file;
//!   [`component`]: programs compiled once with static values, variants and bound
//!   arguments, then called with what changes.
//! - [`load`]: reading a program file in any of the formats sdflow takes; [`show`]: the
//!   workflow's intermediates as text.
//!
//! See `docs/full-program.md` for what a full program may contain, and why.

#![warn(missing_docs)]

pub mod component;
pub mod compose;
pub mod config;
pub mod dace;
mod error;
mod expr;
mod flatten;
mod halo;
pub mod load;
mod lower;
mod program;
pub mod show;
mod stencil;
pub mod workflow;

pub use error::BuildError;
pub use expr::{E, select};
pub use program::{Body, Program};
pub use stencil::{Dims, Field, Loc, ScanDir, Stencil, StencilBuilder, Table};

/// The examples of `docs/full-program.md`, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/full-program.md")]
pub struct FullProgramDoc;

/// The steps of the workflow from user code to a loaded program, in order.
pub const WORKFLOW_STEPS: [&str; 6] = [
    "build",
    "specialize",
    "optimize",
    "generate",
    "compile",
    "load",
];
