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

    /// Stops every rank as [`Mpi::abort`] does, after writing `error: rank R: message`
    /// to standard error in one write: the launcher forwards the ranks' output in the
    /// pieces they write, so a line written piecewise can be cut by its abort banner.
    pub fn abort_with(&self, rank: usize, message: &dyn std::fmt::Display) -> ! {
        use std::io::Write;
        let line = format!("error: rank {rank}: {message}\n");
        let mut err = std::io::stderr().lock();
        // Nothing is left to do with a failed write: the process ends either way.
        let _ = err.write_all(line.as_bytes()).and_then(|()| err.flush());
        drop(err);
        self.abort(1)
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

/// The CUDA backend's host side of structured halo exchanges, in C. A program's context
/// is its duplicate of `MPI_COMM_WORLD` (one per program, as the C backend's state
/// has); each exchange has its 18 requests over it. `sdfx_post` posts a receive and a
/// send per neighbour over one buffer each (direction `d`'s message at bytes
/// `off[d]..off[d + 1]`, tag `tag + d` out, `tag + 8 - d` in, as the C backend's),
/// `sdfx_wait` waits and checks the messages' sizes.
const EXCHANGE_C: &str = r#"
typedef struct { MPI_Comm comm; } sdfx_p;
typedef struct { MPI_Comm comm; int nrq; MPI_Request* rq; MPI_Status* st; } sdfx_t;
/* 0: made, *out the program's context; 1: MPI could not start; 2: rank *other runs
   another program (*out made, to be closed); 3: out of memory or MPI_Comm_dup failed. */
int sdfx_open(uint64_t hash, void** out, int* rank, int* size, int* other) {
    *out = NULL; *other = -1;
    if (sdf_mpi_up() != 0) return 1;
    sdfx_p* p = (sdfx_p*)calloc(1, sizeof *p);
    if (!p) return 3;
    if (MPI_Comm_dup(MPI_COMM_WORLD, &p->comm) != MPI_SUCCESS) { free(p); return 3; }
    MPI_Comm_set_errhandler(p->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(p->comm, rank); MPI_Comm_size(p->comm, size);
    uint64_t* all = (uint64_t*)calloc((size_t)*size, sizeof(uint64_t));
    if (!all) { MPI_Comm_free(&p->comm); free(p); return 3; }
    MPI_Allgather(&hash, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, p->comm);
    for (int r = 0; r < *size; r++) if (all[r] != hash) { *other = r; break; }
    free(all);
    *out = p;
    return *other >= 0 ? 2 : 0; }
/* Frees a program's context (its exchanges' are closed first). */
void sdfx_close(void* q) {
    sdfx_p* p = (sdfx_p*)q;
    if (!p) return;
    int fin = 0; MPI_Finalized(&fin);
    if (!fin) MPI_Comm_free(&p->comm);
    free(p); }
/* An exchange's requests over the program's communicator (18, or two per rank where
   there are more than 9 ranks); NULL when out of memory. */
void* sdfx_exchange(void* q) {
    sdfx_t* x = (sdfx_t*)calloc(1, sizeof *x);
    if (!x) return NULL;
    x->comm = ((sdfx_p*)q)->comm;
    int size = 0; MPI_Comm_size(x->comm, &size);
    x->nrq = 2 * (size > 9 ? size : 9);
    x->rq = (MPI_Request*)malloc((size_t)x->nrq * sizeof(MPI_Request));
    x->st = (MPI_Status*)malloc((size_t)x->nrq * sizeof(MPI_Status));
    if (!x->rq || !x->st) { free(x->rq); free(x->st); free(x); return NULL; }
    for (int d = 0; d < x->nrq; d++) x->rq[d] = MPI_REQUEST_NULL;
    return x; }
/* Completes what is left of an exchange's messages and frees its requests. */
void sdfx_exchange_close(void* q) {
    sdfx_t* x = (sdfx_t*)q;
    if (!x) return;
    int fin = 0; MPI_Finalized(&fin);
    if (!fin) MPI_Waitall(x->nrq, x->rq, MPI_STATUSES_IGNORE);
    free(x->rq); free(x->st); free(x); }
/* Posts the receives into `rb` and the sends from `sb` to the neighbours `nb` (-1: none);
   0, or the MPI error. Requests a run that stopped early left are completed first. */
int sdfx_post(void* p, const int* nb, int tag, char* sb, char* rb, const int64_t* off) {
    sdfx_t* x = (sdfx_t*)p;
    MPI_Waitall(x->nrq, x->rq, MPI_STATUSES_IGNORE);
    for (int d = 0; d < x->nrq; d++) x->rq[d] = MPI_REQUEST_NULL;
    for (int d = 0; d < 9; d++) {
        if (nb[d] < 0) continue;
        int rc = MPI_Irecv(rb + off[d], (int)(off[d + 1] - off[d]), MPI_BYTE, nb[d], tag + 8 - d, x->comm, &x->rq[d]);
        if (rc != MPI_SUCCESS) return rc; }
    for (int d = 0; d < 9; d++) {
        if (nb[d] < 0) continue;
        int rc = MPI_Isend(sb + off[d], (int)(off[d + 1] - off[d]), MPI_BYTE, nb[d], tag + d, x->comm, &x->rq[9 + d]);
        if (rc != MPI_SUCCESS) return rc; }
    return 0; }
/* Waits for the messages: 0; 1: the message from direction bad[0] failed with MPI error
   bad[1]; 2: it has bad[1] bytes, bad[2] expected. */
int sdfx_wait(void* p, const int* nb, const int64_t* off, int64_t* bad) {
    sdfx_t* x = (sdfx_t*)p;
    MPI_Status* st = x->st;
    const int rc = MPI_Waitall(x->nrq, x->rq, st);
    for (int d = 0; d < 9; d++) {
        if (nb[d] < 0) continue;
        if (rc != MPI_SUCCESS) {
            const int er = rc == MPI_ERR_IN_STATUS ? st[d].MPI_ERROR : rc;
            if (er != MPI_SUCCESS) { bad[0] = d; bad[1] = er; return 1; } }
        int n = 0; MPI_Get_count(&st[d], MPI_BYTE, &n);
        if (n != off[d + 1] - off[d]) { bad[0] = d; bad[1] = n; bad[2] = off[d + 1] - off[d]; return 2; } }
    return 0; }
/* Unstructured: the schedule of lists `g` (global indices) and `o` (owners) of `n`
   cells, made by the program's ranks together (sdf_us_build, as the C backend's; its
   codes and `bad`); *out the schedule, freed by sdfx_us_free. */
int sdfx_us_build(void* q, const int64_t* g, const int64_t* o, int64_t n, void** out, int64_t* bad) {
    sdfx_p* p = (sdfx_p*)q;
    *out = NULL;
    int rank = 0, size = 0; MPI_Comm_rank(p->comm, &rank); MPI_Comm_size(p->comm, &size);
    sdf_usched* s = (sdf_usched*)calloc(1, sizeof *s);
    if (!s) { bad[0] = 0; return 3; }
    const int k = sdf_us_build(s, p->comm, rank, size, g, o, n, bad);
    if (k != 0) { sdf_us_free(s); free(s); return k; }
    *out = s;
    return 0; }
/* The schedule's arrays: scnt, rcnt, soff, roff (size + 1 each for the offsets), sidx, ridx. */
void sdfx_us_view(void* q, const int64_t** v) {
    const sdf_usched* s = (const sdf_usched*)q;
    v[0] = s->scnt; v[1] = s->rcnt; v[2] = s->soff; v[3] = s->roff; v[4] = s->sidx; v[5] = s->ridx; }
void sdfx_us_free(void* q) { if (q) { sdf_us_free((sdf_usched*)q); free(q); } }
/* The largest `flag` over the program's ranks (collective). */
int sdfx_any(void* q, int flag, int* any) {
    return MPI_Allreduce(&flag, any, 1, MPI_INT, MPI_MAX, ((sdfx_p*)q)->comm); }
/* Unstructured: to and from each rank p with cells to exchange, `rcnt[p] * B` bytes into
   `rb + roff[p] * B`, `scnt[p] * B` bytes from `sb + soff[p] * B`, tag `tag`; 0 or the
   MPI error. */
int sdfx_us_post(void* p, int size, const int64_t* scnt, const int64_t* soff, const int64_t* rcnt,
                 const int64_t* roff, int64_t B, int tag, char* sb, char* rb) {
    sdfx_t* x = (sdfx_t*)p;
    MPI_Waitall(x->nrq, x->rq, MPI_STATUSES_IGNORE);
    for (int d = 0; d < x->nrq; d++) x->rq[d] = MPI_REQUEST_NULL;
    for (int r = 0; r < size; r++) {
        if (rcnt[r] == 0) continue;
        int rc = MPI_Irecv(rb + roff[r] * B, (int)(rcnt[r] * B), MPI_BYTE, r, tag, x->comm, &x->rq[r]);
        if (rc != MPI_SUCCESS) return rc; }
    for (int r = 0; r < size; r++) {
        if (scnt[r] == 0) continue;
        int rc = MPI_Isend(sb + soff[r] * B, (int)(scnt[r] * B), MPI_BYTE, r, tag, x->comm, &x->rq[size + r]);
        if (rc != MPI_SUCCESS) return rc; }
    return 0; }
/* Waits for sdfx_us_post's messages: 0; 1: the message from rank bad[0] failed with MPI
   error bad[1]; 2: it has bad[1] bytes, bad[2] expected. */
int sdfx_us_wait(void* p, int size, const int64_t* rcnt, int64_t B, int64_t* bad) {
    sdfx_t* x = (sdfx_t*)p;
    MPI_Status* st = x->st;
    const int rc = MPI_Waitall(x->nrq, x->rq, st);
    for (int r = 0; r < size; r++) {
        if (rcnt[r] == 0) continue;
        if (rc != MPI_SUCCESS) {
            const int er = rc == MPI_ERR_IN_STATUS ? st[r].MPI_ERROR : rc;
            if (er != MPI_SUCCESS) { bad[0] = r; bad[1] = er; return 1; } }
        int n = 0; MPI_Get_count(&st[r], MPI_BYTE, &n);
        if (n != rcnt[r] * B) { bad[0] = r; bad[1] = n; bad[2] = rcnt[r] * B; return 2; } }
    return 0; }
"#;

/// `sdfx_open(hash, &ctx, &rank, &size, &other)`.
type OpenFn = unsafe extern "C" fn(u64, *mut *mut c_void, *mut i32, *mut i32, *mut i32) -> i32;
/// `sdfx_post(ctx, nb, tag, sb, rb, off)`.
type PostFn =
    unsafe extern "C" fn(*mut c_void, *const i32, i32, *mut u8, *mut u8, *const i64) -> i32;
/// `sdfx_wait(ctx, nb, off, bad)`.
type WaitFn = unsafe extern "C" fn(*mut c_void, *const i32, *const i64, *mut i64) -> i32;
/// `sdfx_close(ctx)`, `sdfx_exchange_close(x)`.
type CloseFn = unsafe extern "C" fn(*mut c_void);
/// `sdfx_exchange(ctx)`.
type ExchangeFn = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
/// `sdfx_us_build(ctx, g, o, n, &schedule, bad)`.
type UsBuildFn = unsafe extern "C" fn(
    *mut c_void,
    *const i64,
    *const i64,
    i64,
    *mut *mut c_void,
    *mut i64,
) -> i32;
/// `sdfx_us_view(schedule, arrays)`.
type UsViewFn = unsafe extern "C" fn(*mut c_void, *mut *const i64);
/// `sdfx_any(ctx, flag, &any)`.
type AnyFn = unsafe extern "C" fn(*mut c_void, i32, *mut i32) -> i32;
/// `sdfx_us_post(x, size, scnt, soff, rcnt, roff, B, tag, sb, rb)`.
type UsPostFn = unsafe extern "C" fn(
    *mut c_void,
    i32,
    *const i64,
    *const i64,
    *const i64,
    *const i64,
    i64,
    i32,
    *mut u8,
    *mut u8,
) -> i32;
/// `sdfx_us_wait(x, size, rcnt, B, bad)`.
type UsWaitFn = unsafe extern "C" fn(*mut c_void, i32, *const i64, i64, *mut i64) -> i32;

/// MPI for hosts whose programs are not compiled C (the CUDA backend's): a small library
/// built once with the MPI C compiler through the build cache (so the Rust build needs no
/// MPI) and loaded for the life of the process. It starts MPI, when no one has, at
/// `MPI_THREAD_MULTIPLE`: the CUDA driver runs the host functions that post and wait
/// for messages on a thread of its own, while the caller's thread may call MPI too.
#[derive(Debug)]
pub struct Runtime {
    open: OpenFn,
    post: PostFn,
    wait: WaitFn,
    close: CloseFn,
    exchange: ExchangeFn,
    exchange_close: CloseFn,
    us_build: UsBuildFn,
    us_view: UsViewFn,
    us_free: CloseFn,
    any: AnyFn,
    us_post: UsPostFn,
    us_wait: UsWaitFn,
    /// Rank, size, barrier, sum, gather and abort.
    pub mpi: Mpi,
}

/// A program's MPI context ([`Runtime::open`]): its communicator, freed on drop.
#[derive(Debug)]
pub struct Context {
    ptr: *mut c_void,
    close: CloseFn,
}

/// One exchange's requests over a program's communicator ([`Runtime::exchange`]):
/// completed and freed on drop, before the communicator it keeps alive.
#[derive(Debug)]
pub struct ExchangeContext {
    ptr: *mut c_void,
    close: CloseFn,
    _program: std::sync::Arc<Context>,
}

// SAFETY: a communicator and requests, used by one thread at a time (an exchange's
// start and finish are ordered on the stream; the program's context is only read).
unsafe impl Send for Context {}
unsafe impl Sync for Context {}
unsafe impl Send for ExchangeContext {}
unsafe impl Sync for ExchangeContext {}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: made by `sdfx_open`, closed once.
        unsafe { (self.close)(self.ptr) }
    }
}

impl Drop for ExchangeContext {
    fn drop(&mut self) {
        // SAFETY: made by `sdfx_exchange`, closed once.
        unsafe { (self.close)(self.ptr) }
    }
}

/// Who sends which cells to whom in an unstructured exchange ([`Runtime::schedule`]):
/// per rank, how many cells this rank sends it (`scnt`) and receives from it (`rcnt`),
/// at which offsets (`soff`, `roff`: one more than ranks) of the local cell indices
/// `sidx` (owned cells the rank holds in its halo) and `ridx` (this rank's halo cells
/// the rank owns) — the C backend's schedule.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Schedule {
    /// Cells sent to each rank.
    pub scnt: Vec<i64>,
    /// Cells received from each rank.
    pub rcnt: Vec<i64>,
    /// Where each rank's cells start in `sidx`.
    pub soff: Vec<i64>,
    /// Where each rank's cells start in `ridx`.
    pub roff: Vec<i64>,
    /// The local indices of the cells sent.
    pub sidx: Vec<i64>,
    /// The local indices of the cells received.
    pub ridx: Vec<i64>,
}

/// Why an unstructured exchange's schedule could not be made ([`Runtime::schedule`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScheduleFailure {
    /// Cell `.0` (global `.1`) of rank `.3` names owner `.2`, which is not a rank.
    NoSuchOwner(i64, i64, i64, i64),
    /// Rank `.2` holds cell `.0` (global `.1`) as a halo cell of owner `.3`, which does not
    /// own it.
    NotOwned(i64, i64, i64, i64),
    /// An MPI call failed (or memory ran out).
    Mpi(String),
}

/// Why a wait for an exchange's messages failed ([`Runtime::wait`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitFailure {
    /// The message from direction `.0` failed with MPI error `.1`.
    Mpi(usize, i64),
    /// The message from direction `.0` has `.1` bytes, `.2` expected.
    Size(usize, i64, i64),
}

impl Runtime {
    /// The runtime, built (or loaded from the cache) and loaded on first use.
    pub fn get() -> Result<&'static Runtime, MpiError> {
        static RT: std::sync::OnceLock<Result<Runtime, MpiError>> = std::sync::OnceLock::new();
        RT.get_or_init(Runtime::load)
            .as_ref()
            .map_err(|e| e.clone())
    }

    fn load() -> Result<Runtime, MpiError> {
        let source = format!(
            "/* The MPI runtime of sdflow's CUDA host. Generated; do not edit. */\n\
             #include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n#include <stdio.h>\n\
             #include <mpi.h>\n#define SDF_MPI_THREADS MPI_THREAD_MULTIPLE\n{}{}{}",
            crate::cpu::emit::MPI_HOST,
            crate::cpu::emit::MPI_UNSTRUCTURED,
            EXCHANGE_C
        );
        let (lib, _) = crate::CpuBackend::default()
            .compile_source("MPI runtime", &source, true)
            .map_err(|e| MpiError(format!("building the MPI runtime: {e}")))?;
        // SAFETY: a library of this crate's C (above); its symbols have the types named.
        // It stays loaded for the life of the process (the functions are kept).
        unsafe {
            let l = libloading::Library::new(lib.path())
                .map_err(|e| MpiError(format!("loading {}: {e}", lib.display())))?;
            let sym = |name: &[u8]| -> Result<*const c_void, MpiError> {
                l.get::<*const c_void>(name)
                    .map(|s| *s)
                    .map_err(|e| MpiError(format!("{}: {e}", lib.display())))
            };
            let rt = Runtime {
                open: std::mem::transmute::<*const c_void, OpenFn>(sym(b"sdfx_open\0")?),
                post: std::mem::transmute::<*const c_void, PostFn>(sym(b"sdfx_post\0")?),
                wait: std::mem::transmute::<*const c_void, WaitFn>(sym(b"sdfx_wait\0")?),
                close: std::mem::transmute::<*const c_void, CloseFn>(sym(b"sdfx_close\0")?),
                exchange: std::mem::transmute::<*const c_void, ExchangeFn>(sym(
                    b"sdfx_exchange\0",
                )?),
                exchange_close: std::mem::transmute::<*const c_void, CloseFn>(sym(
                    b"sdfx_exchange_close\0",
                )?),
                us_build: std::mem::transmute::<*const c_void, UsBuildFn>(sym(b"sdfx_us_build\0")?),
                us_view: std::mem::transmute::<*const c_void, UsViewFn>(sym(b"sdfx_us_view\0")?),
                us_free: std::mem::transmute::<*const c_void, CloseFn>(sym(b"sdfx_us_free\0")?),
                any: std::mem::transmute::<*const c_void, AnyFn>(sym(b"sdfx_any\0")?),
                us_post: std::mem::transmute::<*const c_void, UsPostFn>(sym(b"sdfx_us_post\0")?),
                us_wait: std::mem::transmute::<*const c_void, UsWaitFn>(sym(b"sdfx_us_wait\0")?),
                mpi: Mpi {
                    world: std::mem::transmute::<*const c_void, WorldFn>(sym(
                        b"sdflow_mpi_world\0",
                    )?),
                    abort: std::mem::transmute::<*const c_void, AbortFn>(sym(
                        b"sdflow_mpi_abort\0",
                    )?),
                    barrier: std::mem::transmute::<*const c_void, BarrierFn>(sym(
                        b"sdflow_mpi_barrier\0",
                    )?),
                    sum: std::mem::transmute::<*const c_void, SumFn>(sym(b"sdflow_mpi_sum_i64\0")?),
                    gather: std::mem::transmute::<*const c_void, GatherFn>(sym(
                        b"sdflow_mpi_gather\0",
                    )?),
                },
            };
            std::mem::forget(l);
            Ok(rt)
        }
    }

    /// The context of a program whose ranks must agree on `hash` (a duplicate of
    /// `MPI_COMM_WORLD`; collective): this rank, the number of ranks, and the first rank
    /// whose hash differs.
    pub fn open(&self, hash: u64) -> Result<(Context, usize, usize, Option<usize>), MpiError> {
        let (mut ptr, mut rank, mut size, mut other) = (std::ptr::null_mut(), 0, 0, -1);
        // SAFETY: writes the four outputs.
        let rc = unsafe { (self.open)(hash, &mut ptr, &mut rank, &mut size, &mut other) };
        match rc {
            0 | 2 => {
                let ctx = Context {
                    ptr,
                    close: self.close,
                };
                let other = (rc == 2).then_some(other as usize);
                Ok((ctx, rank as usize, size as usize, other))
            }
            1 => Err(MpiError(
                "could not start MPI (MPI_Init_thread failed, or MPI was finalized)".into(),
            )),
            _ => Err(MpiError("out of memory, or MPI_Comm_dup failed".into())),
        }
    }

    /// The requests of one exchange of `program`.
    pub fn exchange(&self, program: &std::sync::Arc<Context>) -> Result<ExchangeContext, MpiError> {
        // SAFETY: a live program context.
        let ptr = unsafe { (self.exchange)(program.ptr) };
        if ptr.is_null() {
            return Err(MpiError("out of memory".into()));
        }
        Ok(ExchangeContext {
            ptr,
            close: self.exchange_close,
            _program: program.clone(),
        })
    }

    /// Posts the receives into `rb` and the sends from `sb` to the neighbours `nb` (one
    /// per direction, −1 for none), direction `d`'s message at bytes `off[d]..off[d + 1]`
    /// of both; the MPI error code on failure.
    ///
    /// # Safety
    /// `sb` and `rb` hold `off[9]` bytes and stay valid, and `rb` unread and `sb`
    /// unwritten, until [`Runtime::wait`] on the same context returned.
    pub unsafe fn post(
        &self,
        ctx: &ExchangeContext,
        nb: &[i32; 9],
        tag: i32,
        sb: *mut u8,
        rb: *mut u8,
        off: &[i64; 10],
    ) -> Result<(), i32> {
        // SAFETY: as the caller promises.
        match unsafe { (self.post)(ctx.ptr, nb.as_ptr(), tag, sb, rb, off.as_ptr()) } {
            0 => Ok(()),
            e => Err(e),
        }
    }

    /// The largest `flag` over the ranks of `program` (collective).
    pub fn any(&self, program: &Context, flag: bool) -> Result<bool, MpiError> {
        let mut any = 0;
        // SAFETY: a live program context; writes one int.
        match unsafe { (self.any)(program.ptr, i32::from(flag), &mut any) } {
            0 => Ok(any != 0),
            e => Err(MpiError(format!("MPI_Allreduce failed: MPI error {e}"))),
        }
    }

    /// The schedule of an unstructured exchange over the ranks of `program` from this
    /// rank's lists: `g`, each local cell's global index, and `o`, its owner (collective,
    /// as the C backend's `sdf_us_build`).
    pub fn schedule(
        &self,
        program: &Context,
        g: &[i64],
        o: &[i64],
    ) -> Result<Schedule, ScheduleFailure> {
        let n = g.len().min(o.len());
        let (mut ptr, mut bad) = (std::ptr::null_mut(), [0i64; 4]);
        // SAFETY: `n` values of each list; writes the schedule's pointer and `bad`.
        let k = unsafe {
            (self.us_build)(
                program.ptr,
                g.as_ptr(),
                o.as_ptr(),
                n as i64,
                &mut ptr,
                bad.as_mut_ptr(),
            )
        };
        match k {
            0 => {}
            1 => return Err(ScheduleFailure::NoSuchOwner(bad[0], bad[1], bad[2], bad[3])),
            2 => return Err(ScheduleFailure::NotOwned(bad[0], bad[1], bad[2], bad[3])),
            _ if bad[0] == 0 => return Err(ScheduleFailure::Mpi("out of memory".into())),
            _ => return Err(ScheduleFailure::Mpi(format!("MPI error {}", bad[0]))),
        }
        let mut v = [std::ptr::null::<i64>(); 6];
        // SAFETY: a schedule just made; its arrays hold `size` counts, `size + 1` offsets
        // and as many indices as the last offsets say; copied, then freed once.
        unsafe {
            (self.us_view)(ptr, v.as_mut_ptr());
            let size = {
                let (mut r, mut s) = (0, 0);
                (self.mpi.world)(&mut r, &mut s);
                s as usize
            };
            let take = |p: *const i64, len: usize| std::slice::from_raw_parts(p, len).to_vec();
            let soff = take(v[2], size + 1);
            let roff = take(v[3], size + 1);
            let out = Schedule {
                scnt: take(v[0], size),
                rcnt: take(v[1], size),
                sidx: take(v[4], soff[size] as usize),
                ridx: take(v[5], roff[size] as usize),
                soff,
                roff,
            };
            (self.us_free)(ptr);
            Ok(out)
        }
    }

    /// Posts an unstructured exchange's receives into `rb` and sends from `sb` per
    /// `schedule`, `bytes` per cell; the MPI error code on failure.
    ///
    /// # Safety
    /// `sb` holds `soff[size] * bytes` bytes and `rb` `roff[size] * bytes`, valid (and
    /// `rb` unread, `sb` unwritten) until [`Runtime::wait_unstructured`] returned.
    pub unsafe fn post_unstructured(
        &self,
        ctx: &ExchangeContext,
        schedule: &Schedule,
        bytes: i64,
        tag: i32,
        sb: *mut u8,
        rb: *mut u8,
    ) -> Result<(), i32> {
        // SAFETY: as the caller promises; the schedule's arrays are of the ranks' count.
        match unsafe {
            (self.us_post)(
                ctx.ptr,
                schedule.scnt.len() as i32,
                schedule.scnt.as_ptr(),
                schedule.soff.as_ptr(),
                schedule.rcnt.as_ptr(),
                schedule.roff.as_ptr(),
                bytes,
                tag,
                sb,
                rb,
            )
        } {
            0 => Ok(()),
            e => Err(e),
        }
    }

    /// Waits for [`Runtime::post_unstructured`]'s messages and checks their sizes
    /// (`WaitFailure`'s first number is then the sending rank).
    pub fn wait_unstructured(
        &self,
        ctx: &ExchangeContext,
        schedule: &Schedule,
        bytes: i64,
    ) -> Result<(), WaitFailure> {
        let mut bad = [0i64; 3];
        // SAFETY: reads the counts, writes `bad`.
        match unsafe {
            (self.us_wait)(
                ctx.ptr,
                schedule.rcnt.len() as i32,
                schedule.rcnt.as_ptr(),
                bytes,
                bad.as_mut_ptr(),
            )
        } {
            0 => Ok(()),
            1 => Err(WaitFailure::Mpi(bad[0] as usize, bad[1])),
            _ => Err(WaitFailure::Size(bad[0] as usize, bad[1], bad[2])),
        }
    }

    /// Waits for the messages [`Runtime::post`] posted on `ctx` and checks their sizes.
    pub fn wait(
        &self,
        ctx: &ExchangeContext,
        nb: &[i32; 9],
        off: &[i64; 10],
    ) -> Result<(), WaitFailure> {
        let mut bad = [0i64; 3];
        // SAFETY: reads the two arrays, writes `bad`.
        match unsafe { (self.wait)(ctx.ptr, nb.as_ptr(), off.as_ptr(), bad.as_mut_ptr()) } {
            0 => Ok(()),
            1 => Err(WaitFailure::Mpi(bad[0] as usize, bad[1])),
            _ => Err(WaitFailure::Size(bad[0] as usize, bad[1], bad[2])),
        }
    }
}
