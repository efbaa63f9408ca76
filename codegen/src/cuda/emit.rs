//! The CUDA printer: a whole program's kernels from its execution plan. The printer
//! shares the C backend's body printer (tasklets, copies, reductions, nested SDFGs,
//! checked versions), so both backends spell one semantics; see
//! `cpu/emit/device.rs` for the kernel shapes.

pub use crate::cpu::emit::device::{
    CudaEmitOptions, CudaProgram, KernelFault, KernelParams, KernelSpec, STATUS_READ, emit_cuda,
};
