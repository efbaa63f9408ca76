//! `sdflow-orchestration`: the front ends (Rust stencil DSL and program builder, DaCe
//! `.sdfg` import), flattening into one SDFG, the workflow of cached steps, backend
//! selection and configuration, and the persistent cache.
//!
//! Depends on `sdflow-codegen`, `sdflow-transforms` and `sdflow-ir`. The front ends arrive
//! with their own work; today the crate exposes the workflow's step names.

#![warn(missing_docs)]

/// The steps of the workflow from user code to a loaded program, in order.
pub const WORKFLOW_STEPS: [&str; 6] = [
    "build",
    "specialize",
    "optimize",
    "generate",
    "compile",
    "load",
];
