//! The host's side of MPI for programs that exchange halos: which rank this process is,
//! how many there are, stopping them all, and gathering results — through the program's
//! own library, which is compiled with the MPI C compiler and linked with MPI (the Rust
//! build needs no MPI: a machine without it builds and runs every other program).
//!
//! A program with an exchange starts MPI on its first `sdflow_init` (or on the first call
//! here), as `MPI_THREAD_SERIALIZED`, and finalizes it when the process exits; a process
//! that started MPI itself keeps it. Ranks are MPI's `MPI_COMM_WORLD`.

use std::ffi::c_void;

/// `sdflow_mpi_world(&rank, &size)`.
pub(crate) type WorldFn = unsafe extern "C" fn(*mut i32, *mut i32) -> i32;
/// `sdflow_mpi_abort(code)`.
pub(crate) type AbortFn = unsafe extern "C" fn(i32);
/// `sdflow_mpi_barrier()`.
pub(crate) type BarrierFn = unsafe extern "C" fn() -> i32;
/// `sdflow_mpi_sum_i64(v, &sum)`.
pub(crate) type SumFn = unsafe extern "C" fn(i64, *mut i64) -> i32;
/// `sdflow_mpi_gather(send, bytes, recv, root)`.
pub(crate) type GatherFn = unsafe extern "C" fn(*const c_void, i64, *mut c_void, i32) -> i32;

/// MPI as a program's library provides it ([`crate::CompiledProgram::mpi`]).
#[derive(Clone, Copy, Debug)]
pub struct Mpi {
    pub(crate) world: WorldFn,
    pub(crate) abort: AbortFn,
    pub(crate) barrier: BarrierFn,
    pub(crate) sum: SumFn,
    pub(crate) gather: GatherFn,
}

/// An MPI call that failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("MPI: {0}")]
pub struct MpiError(pub String);

impl Mpi {
    /// This process's rank and the number of ranks (`MPI_COMM_WORLD`), starting MPI if
    /// no one has.
    pub fn world(&self) -> Result<(usize, usize), MpiError> {
        let (mut r, mut n) = (0i32, 0i32);
        // SAFETY: writes two ints.
        if unsafe { (self.world)(&mut r, &mut n) } != 0 {
            return Err(MpiError(
                "could not start MPI (MPI_Init_thread failed, or MPI was finalized)".into(),
            ));
        }
        Ok((r as usize, n as usize))
    }

    /// Stops every rank (`MPI_Abort` with `code`); this process does not return.
    pub fn abort(&self, code: i32) -> ! {
        // SAFETY: ends the process.
        unsafe { (self.abort)(code) };
        std::process::abort()
    }

    /// Waits until every rank reaches this point.
    pub fn barrier(&self) -> Result<(), MpiError> {
        // SAFETY: a collective without arguments.
        match unsafe { (self.barrier)() } {
            0 => Ok(()),
            _ => Err(MpiError("MPI_Barrier failed".into())),
        }
    }

    /// The sum of `v` over all ranks, on every rank.
    pub fn sum(&self, v: i64) -> Result<i64, MpiError> {
        let mut out = 0i64;
        // SAFETY: writes one value.
        match unsafe { (self.sum)(v, &mut out) } {
            0 => Ok(out),
            _ => Err(MpiError("MPI_Allreduce failed".into())),
        }
    }

    /// Every rank's `values` in rank order, on rank `root` (`None` on the others). Each
    /// rank may pass a different number of values.
    pub fn gather<T: Copy + Default>(
        &self,
        values: &[T],
        root: usize,
    ) -> Result<Option<Vec<T>>, MpiError> {
        let (rank, _) = self.world()?;
        let total = self.sum(values.len() as i64)?;
        let mut out = vec![T::default(); if rank == root { total as usize } else { 0 }];
        let bytes = std::mem::size_of_val(values) as i64;
        // SAFETY: `values` is `bytes` bytes; on the root `out` holds every rank's values
        // (their total count, summed above).
        let rc = unsafe {
            (self.gather)(
                values.as_ptr().cast(),
                bytes,
                out.as_mut_ptr().cast(),
                root as i32,
            )
        };
        if rc != 0 {
            return Err(MpiError("MPI_Gatherv failed (or over 2 GiB)".into()));
        }
        Ok((rank == root).then_some(out))
    }
}

/// This process's rank and the number of ranks as the MPI launcher announces them in the
/// environment (Open MPI's `OMPI_COMM_WORLD_RANK`/`_SIZE`, else the PMI variables of
/// MPICH and others), before any program is loaded: `None` when not started by one.
pub fn launched() -> Option<(usize, usize)> {
    let var = |names: &[&str]| {
        names
            .iter()
            .find_map(|n| std::env::var(n).ok()?.trim().parse::<usize>().ok())
    };
    let rank = var(&["OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"])?;
    let size = var(&["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"])?;
    (rank < size).then_some((rank, size))
}
