//! The CUDA backend: NVRTC to compile generated CUDA C++ ([`nvrtc`]), and the host layer
//! that loads modules and enqueues kernels, copies and graph replays on one stream
//! ([`device`]). Everything goes through `cudarc`, loaded at run time: without NVRTC or a
//! driver, the functions here return errors saying so, and never panic.
//! See `../shared/DESIGN.md` ("codegen", CUDA).

pub mod array;
pub mod device;
pub mod dialect;
pub mod emit;
mod exchange;
pub mod exec;
pub mod nvrtc;

pub use dialect::Cuda;
