//! `sdflow-codegen`: whole-program code generators, their compilers, loaders and runtime
//! ABI.
//!
//! - [`plan`]: the execution plan, one description of how a program runs, made for a
//!   target (a team of threads, a grid of them), which that target's printer prints.
//! - [`cfamily`]: what the two C-family printers share — the printer of control flow,
//!   states and nodes behind a dialect trait, C text of expressions, the prelude's common
//!   text, error sites.
//! - [`cpu`]: C with OpenMP for the whole program (`sdflow_init` allocates transients
//!   once, `sdflow_run` runs the whole control flow in one parallel region,
//!   `sdflow_finalize`), compiled by the system C compiler ([`compile`]), kept in a
//!   content-addressed, multi-process-safe [`cache`], and loaded as a
//!   [`CompiledProgram`].
//! - [`cuda`]: CUDA kernels printed from the plan, NVRTC, the devices (driver, emulated,
//!   recording) and the host layer that enqueues a call without waiting.
//! - [`program`]: binding arguments once ([`CompiledProgram::bind`]) and calling through
//!   one FFI call ([`BoundCall::call`]); [`abi`]: the calling convention both backends
//!   share, whose arguments both check alike.
//! - [`mpi`]: the host's side of MPI for programs that exchange halos (rank, size,
//!   abort, gather), through the program's own library.
//!
//! Depends on `sdflow-ir` only (its tests also run the optimizer). See
//! `docs/backend-cpu.md` and `docs/backend-cuda.md`.

#![warn(missing_docs)]

pub mod abi;
mod args;
pub mod cache;
pub mod cfamily;
pub mod compile;
pub mod cpu;
pub mod cuda;
pub mod mpi;
pub mod plan;
pub mod program;

pub use abi::{ArgSpec, Signature};
pub use cache::{Artifact, Cache, Origin};
pub use compile::{CompilerOptions, LibraryFile};
pub use cpu::{CpuBackend, CpuUnit, EmitOptions, OmpSchedule};
pub use plan::Plan;
pub use program::{Args, BoundCall, CallError, CompiledProgram, Element, MAX_THREADS};

use std::path::PathBuf;

/// Why a program could not be generated, compiled or loaded.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CodegenError {
    /// The program does not validate.
    #[error("the SDFG is invalid:\n{}", .0.join("\n"))]
    Invalid(Vec<String>),
    /// A construct the backend does not generate code for.
    #[error("cannot generate code: {0}")]
    Unsupported(String),
    /// The C compiler failed or could not run.
    #[error("{message}{}", .source_file.as_ref().map(|p| format!("\n(generated source: {})", p.display())).unwrap_or_default())]
    Compiler {
        /// What the compiler said.
        message: String,
        /// The generated file it compiled.
        source_file: Option<PathBuf>,
    },
    /// The cache directory could not be used.
    #[error("build cache: {0}")]
    Cache(String),
    /// The library could not be loaded.
    #[error("cannot load the compiled program: {0}")]
    Load(String),
}

/// A code-generation target.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The reference interpreter of `sdflow-ir` (no code generated).
    #[default]
    Interp,
    /// C with OpenMP, compiled by the system C compiler.
    Cpu,
    /// CUDA compiled with NVRTC.
    Gpu,
}

impl Backend {
    /// Parses a backend tag: `interp`, `cpu`, or `cuda` (also spelled `gpu`).
    pub fn from_tag(tag: &str) -> Option<Backend> {
        match tag {
            "interp" => Some(Backend::Interp),
            "cpu" => Some(Backend::Cpu),
            "gpu" | "cuda" => Some(Backend::Gpu),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags() {
        assert_eq!(Backend::from_tag("cpu"), Some(Backend::Cpu));
        assert_eq!(Backend::from_tag("gpu"), Some(Backend::Gpu));
        assert_eq!(Backend::from_tag("cuda"), Some(Backend::Gpu));
        assert_eq!(Backend::from_tag("interp"), Some(Backend::Interp));
        assert_eq!(Backend::from_tag("tpu"), None);
    }
}
