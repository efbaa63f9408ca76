//! What the two dialects of the C family spell differently. The shared printer
//! (`cfamily::emit`) decides nothing by dialect: what runs where, what is atomic, what is
//! checked and how a step is shared among threads are the plan's; a dialect only says
//! how its language writes a function, an atomic combination, the prelude, and — where
//! the code runs in a team of threads that all walk the control flow (OpenMP) — how the
//! team shares loops and waits. C with OpenMP is `cpu::OpenMp`, CUDA is `cuda::Cuda`.

use sdflow_ir::{DType, Wcr};

/// How a C-family language spells what the printer prints.
pub trait Dialect: Sync {
    /// The dialect's name (`c`, `cuda`).
    fn name(&self) -> &'static str;

    /// The helpers a translation unit starts with: the dialect's head, the common text
    /// ([`super::prelude::COMMON`]) and the dialect's tail.
    fn prelude(&self) -> String;

    /// The qualifiers of a nested SDFG's function, after `static`; `inlined`: it is
    /// called at every point of a map and is inlined into the caller.
    fn function_qualifiers(&self, inlined: bool) -> &'static str;

    /// The statements that store `combined` (the write-conflict resolution `w` of the
    /// old value `lv` and `value`, of type `dt`) into `lv` while other threads may
    /// combine into the same element.
    fn atomic_combine(
        &self,
        w: Wcr,
        dt: DType,
        lv: &str,
        value: &str,
        combined: &str,
    ) -> Vec<String>;

    /// How a team of threads that all walk the control flow shares work and waits
    /// (OpenMP); `None` where no such team exists (a CUDA kernel's threads each run
    /// their own points, and the host orders the steps).
    fn team(&self) -> Option<&dyn Team>;
}

/// How a team of threads, all walking the same control flow, divides the steps of a
/// state and synchronizes.
pub trait Team: Sync {
    /// Before a loop nest whose outer `collapse` loops are divided among the threads
    /// (`schedule`: the division's name), none waiting for the others at its end.
    fn share_loops(&self, collapse: usize, schedule: &str) -> String;

    /// Before a block one thread of the team runs, the others going on.
    fn single(&self) -> &'static str;

    /// Before a block the team's master thread runs (the thread that called the program:
    /// the one MPI is called from), the others going on.
    fn master(&self) -> &'static str;

    /// Every thread waits until all reach this point and their writes are visible.
    fn barrier(&self) -> &'static str;

    /// Before a store to a variable the team shares, made atomically.
    fn atomic_write(&self) -> &'static str;

    /// Before a load of a variable the team shares, made atomically.
    fn atomic_read(&self) -> &'static str;

    /// Before a block one thread at a time runs, among all blocks named `name`.
    fn critical(&self, name: &str) -> String;

    /// Before a loop whose iterations carry no dependence, run `lanes` at a time.
    fn simd(&self, lanes: u32) -> String;

    /// Before a loop whose iterations carry no dependence, for the compiler to vectorize
    /// as it chooses (its gathers included: without the mark, a gather that might alias
    /// a store keeps the loop scalar).
    fn simd_loop(&self) -> String;
}
