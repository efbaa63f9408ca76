//! The loader fuzz harness: mutations of the real corpus files fed to every loader of
//! sdflow (the JSON format, the DaCe importer, `.npz` inputs bound against a program,
//! and the text syntax of expressions, subsets and memlets), and the argument files of
//! `sdflow plot`, `run` and `bench` through the tools' own functions, each input run
//! under `catch_unwind` and timed. See `docs/fuzzing.md`.
//!
//! Shared by the short fixed-seed run of the test suite (`tests/fuzz_loaders.rs`) and
//! the long campaign (`examples/fuzz_loaders.rs`), which include this folder with
//! `#[path]`.

pub mod bytes;
pub mod corpus;
pub mod generate;
pub mod json;
pub mod npz;
pub mod runner;
pub mod targets;
pub mod text;
pub mod tools;
