//! `sdflow`: whole-program optimization and code generation for stencil programs.
//!
//! This facade re-exports the stage crates and holds what the `sdflow` command-line tool
//! needs around them (reading programs and arrays from files, printing results).
//!
//! - [`ir`]: the SDFG data model, validation, JSON format, DOT and reference interpreter.
//! - [`transforms`]: passes over the IR.
//! - [`codegen`]: code generators and runtime.
//! - [`orchestration`]: front ends, workflow and cache.

#![warn(missing_docs)]

pub mod bench;
pub mod cli;
pub mod npz;
mod npz_sizes;
pub mod plot;
pub mod view;

pub use sdflow_codegen as codegen;
pub use sdflow_ir as ir;
pub use sdflow_orchestration as orchestration;
pub use sdflow_transforms as transforms;
