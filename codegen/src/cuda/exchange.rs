//! The host side of halo exchanges on the CUDA backend: the same plan as the C backend's
//! (`crate::plan::exchange`), with every step enqueued on the program's stream so that a
//! call still returns without waiting for the device.
//!
//! - **Start**: the pack kernel copies the strips the neighbours need into the exchange's
//!   device buffer; the buffer goes to page-locked host memory
//!   ([`Device::copy_d2h_async`]); a host function ([`Device::host_fn`]), run once the
//!   copy is done, posts the nonblocking receives and sends (`MPI_Irecv`, `MPI_Isend`).
//! - **Finish**: a host function waits for the messages (`MPI_Waitall`) and checks their
//!   sizes; the received strips go to the device ([`Device::copy_h2d_async`]); the unpack
//!   kernel writes them into the halo. A failed exchange sets the buffer's status word, so
//!   the unpack kernel leaves the halo alone, and its message is reported by the next
//!   wait for the call.
//!
//! The kernels enqueued between the two (the plan's independent work, and the interior of
//! a split stencil) run while the messages travel. The host functions run on a thread of
//! the driver; MPI is reached through [`crate::mpi::Runtime`] (no MPI in the Rust build).
//! The buffers are one per exchange and direction of travel, laid out as the C backend's
//! messages one after another, so a message is the same bytes on both backends.
//!
//! An **unstructured** exchange needs its schedule (who sends which cells to whom),
//! made from the lists of global indices and owners by all ranks together. The lists
//! live on the device: a call that passes them in other arrays than the schedule was
//! made from (the first call, at least) reads them — a wait — and the ranks make the
//! schedule again together (whether any rank needs to is one `MPI_Allreduce` per call
//! on the host); the schedule and a copy of the lists go to the device. The pack kernel
//! compares the lists with that copy, so lists rewritten in place are an error of the
//! call, not a wrong halo.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use sdflow_ir::{DType, Decomposition, Sdfg, SymExpr};

use super::device::{DevPtr, Device, DeviceHandle, KernelArg, KernelId};
use super::emit::CudaProgram;
use crate::CodegenError;
use crate::mpi::{Context, ExchangeContext, Runtime, Schedule, ScheduleFailure, WaitFailure};

/// Bytes before the messages in each buffer: the status word the unpack kernel reads.
const HEADER: usize = 8;

/// One exchange of a loaded program.
struct XState {
    id: usize,
    /// The exchanged fields, in the exchange's order: their names, shapes and element
    /// sizes.
    fields: Vec<(String, Vec<SymExpr>, usize)>,
    ctx: Arc<ExchangeContext>,
    kind: Kind,
    /// The most elements of one strip, for the kernels' grid.
    widest: i64,
    /// Bytes of each buffer (header included) allocated.
    cap: usize,
    send_dev: DevPtr,
    recv_dev: DevPtr,
    send_host: *mut u8,
    recv_host: *mut u8,
}

/// What an exchange's kind adds.
enum Kind {
    Structured {
        width: i64,
        /// The neighbour in each direction (−1: none).
        nb: [i32; 9],
        /// Bit `d` set where direction `d` has a neighbour.
        mask: i32,
        /// Where direction `d`'s message lies in the buffers (after the header), for
        /// the call under way.
        off: [i64; 10],
    },
    Unstructured(Box<Unstructured>),
}

/// An unstructured exchange's lists and schedule.
struct Unstructured {
    /// The lists: names, positions among the kernels' arrays, element types.
    global: (String, usize, DType),
    owner: (String, usize, DType),
    /// The lists' length.
    n: SymExpr,
    /// The arrays and length the schedule was made from.
    made_from: Option<(DevPtr, DevPtr, i64)>,
    schedule: Arc<Schedule>,
    /// Bytes per cell of the call under way (every field's values, each padded to 8).
    cell_bytes: i64,
    /// On the device: `[ranks, counts, offsets, indices]` of the cells sent and of those
    /// received, and `[n, global…, owner…]`.
    send_schedule: DevPtr,
    recv_schedule: DevPtr,
    lists: DevPtr,
}

/// Raw host addresses a host function uses; valid until the buffers are freed, which
/// waits for the stream (and so for the host functions enqueued on it).
#[derive(Clone, Copy)]
struct HostBufs {
    send: usize,
    recv: usize,
}

/// The exchanges of a loaded program, and the first failure of an exchange not yet
/// reported.
pub(crate) struct Exchanges {
    rt: &'static Runtime,
    /// The program's communicator.
    program: Arc<Context>,
    list: Vec<XState>,
    error: Arc<Mutex<Option<String>>>,
    /// The integer symbols the structured exchanges were last laid out for.
    laid_out_for: Option<Vec<i64>>,
}

// SAFETY: the raw host addresses are buffers of the device these exchanges belong to,
// used by the thread holding the program (and by host functions the stream orders).
unsafe impl Send for Exchanges {}

fn load_err(m: impl std::fmt::Display) -> CodegenError {
    CodegenError::Load(m.to_string())
}

impl Exchanges {
    /// The exchanges of `prog` (printed from `sdfg`), each with its MPI context, after
    /// checking that every rank runs the same program over as many ranks as its
    /// decompositions have; `None` for a program without exchanges.
    pub(crate) fn open(sdfg: &Sdfg, prog: &CudaProgram) -> Result<Option<Exchanges>, CodegenError> {
        let Some((hash, description)) = &prog.identity else {
            return Ok(None);
        };
        let rt = Runtime::get().map_err(load_err)?;
        // One communicator for the program, as the C backend's state has.
        let (program, rank, size, other) = rt.open(*hash).map_err(load_err)?;
        let program = Arc::new(program);
        if let Some(o) = other {
            return Err(load_err(format!(
                "rank {rank} runs {description}, and rank {o} another program or decomposition: every rank must run the same program"
            )));
        }
        let mut list_state = Vec::new();
        for x in prog.plan.exchanges() {
            let ctx = rt.exchange(&program).map_err(load_err)?;
            let mut fields = Vec::new();
            for name in &x.fields {
                let a = sdfg
                    .arrays
                    .get(name)
                    .and_then(|d| d.as_array())
                    .ok_or_else(|| {
                        load_err(format!(
                            "halo exchange #{}: '{name}' is not an array of the program",
                            x.id
                        ))
                    })?;
                fields.push((name.clone(), a.shape.clone(), a.dtype.size_bytes()));
            }
            let new = |kind| XState {
                id: x.id,
                fields: fields.clone(),
                ctx: Arc::new(ctx),
                kind,
                widest: 0,
                cap: 0,
                send_dev: 0,
                recv_dev: 0,
                send_host: std::ptr::null_mut(),
                recv_host: std::ptr::null_mut(),
            };
            let (ranks, width, periodic, corners) = match &x.decomposition {
                Decomposition::Structured {
                    ranks,
                    width,
                    periodic,
                    corners,
                } => (ranks, width, periodic, corners),
                Decomposition::Unstructured {
                    ranks,
                    global,
                    owner,
                } => {
                    if size != *ranks as usize {
                        return Err(load_err(format!(
                            "halo exchange #{} of {} is over {ranks} ranks, but the program runs on {size}: start it with `mpirun -n {ranks}`",
                            x.id,
                            quoted(&x.fields),
                        )));
                    }
                    let list =
                        |name: &str| -> Result<(String, usize, DType, SymExpr), CodegenError> {
                            let k = prog.params.arrays.iter().position(|a| a == name);
                            let d = sdfg.arrays.get(name).and_then(|d| d.as_array());
                            match (k, d) {
                                (Some(k), Some(d)) if k < prog.plan.signature.arrays.len() => {
                                    Ok((name.to_string(), k, d.dtype, d.shape[0].clone()))
                                }
                                _ => Err(load_err(format!(
                                    "halo exchange #{}: its list '{name}' is not an array argument of the program",
                                    x.id
                                ))),
                            }
                        };
                    let (g, gk, gt, n) = list(global)?;
                    let (o, ok, ot, _) = list(owner)?;
                    list_state.push(new(Kind::Unstructured(Box::new(Unstructured {
                        global: (g, gk, gt),
                        owner: (o, ok, ot),
                        n,
                        made_from: None,
                        schedule: Arc::new(Schedule::default()),
                        cell_bytes: 0,
                        send_schedule: 0,
                        recv_schedule: 0,
                        lists: 0,
                    }))));
                    continue;
                }
            };
            let want = (ranks[0] * ranks[1]) as usize;
            if size != want {
                return Err(load_err(format!(
                    "halo exchange #{} of {} is over {} x {} = {want} ranks, but the program runs on {size}: start it with `mpirun -n {want}`",
                    x.id,
                    quoted(&x.fields),
                    ranks[0],
                    ranks[1]
                )));
            }
            let (px, py) = (ranks[0], ranks[1]);
            let (ri, rj) = (rank as i64 % px, rank as i64 / px);
            let mut nb = [-1i32; 9];
            let mut mask = 0;
            for (d, slot) in nb.iter_mut().enumerate() {
                let (di, dj) = (d as i64 % 3 - 1, d as i64 / 3 - 1);
                if d == 4 || (!corners && di != 0 && dj != 0) {
                    continue;
                }
                let (mut ni, mut nj) = (ri + di, rj + dj);
                if !(0..px).contains(&ni) {
                    if !periodic[0] {
                        continue;
                    }
                    ni = (ni + px) % px;
                }
                if !(0..py).contains(&nj) {
                    if !periodic[1] {
                        continue;
                    }
                    nj = (nj + py) % py;
                }
                *slot = (nj * px + ni) as i32;
                mask |= 1 << d;
            }
            list_state.push(new(Kind::Structured {
                width: *width,
                nb,
                mask,
                off: [0; 10],
            }));
        }
        Ok(Some(Exchanges {
            rt,
            program,
            list: list_state,
            error: Arc::new(Mutex::new(None)),
            laid_out_for: None,
        }))
    }

    /// MPI as the runtime provides it (rank, size, abort…).
    pub(crate) fn mpi(&self) -> crate::mpi::Mpi {
        self.rt.mpi
    }

    /// The first failure of an exchange since the last call of this, cleared.
    pub(crate) fn take_error(&self) -> Option<String> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Whether an exchange failed and was not reported yet.
    pub(crate) fn failed(&self) -> bool {
        self.error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    fn state(&mut self, id: usize) -> Result<&mut XState, String> {
        self.list
            .iter_mut()
            .find(|x| x.id == id)
            .ok_or_else(|| format!("halo exchange #{id} is not one of the program's"))
    }

    /// Whether a call's work can be captured as a graph and replayed: every exchange is
    /// structured (an unstructured one agrees with the other ranks on its schedule on
    /// the host, at every call).
    pub(crate) fn replayable(&self) -> bool {
        self.list
            .iter()
            .all(|x| matches!(x.kind, Kind::Structured { .. }))
    }

    /// Lays out the structured exchanges' messages for the symbol values `env` makes (of
    /// the signature's integer symbols `ints`; nothing to do when the last call had them)
    /// and makes their buffers large enough, before a call's work is enqueued (a
    /// captured graph cannot allocate); `true` when a buffer was allocated anew (graphs
    /// captured with the old ones are stale).
    pub(crate) fn reserve(
        &mut self,
        dev: &mut dyn Device,
        ints: &[i64],
        env: impl FnOnce() -> BTreeMap<String, i64>,
    ) -> Result<bool, String> {
        if self.laid_out_for.as_deref() == Some(ints) {
            return Ok(false);
        }
        self.laid_out_for = None;
        let env = env();
        let mut anew = false;
        for x in &mut self.list {
            if matches!(x.kind, Kind::Structured { .. }) {
                x.layout(&env)?;
                anew |= x.reserve(dev)?;
            }
        }
        self.laid_out_for = Some(ints.to_vec());
        Ok(anew)
    }

    /// Enqueues the start of exchange `id`: its pack kernel `kernel` (with the common
    /// arguments `args`), the copy of the buffer to the host and the host function that
    /// posts the messages. `at` says where the exchange is, for messages. An unstructured
    /// exchange first agrees with the other ranks whether its schedule must be made
    /// again, and makes it (reading the lists: a wait) where it must.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start(
        &mut self,
        id: usize,
        at: String,
        dev: &mut dyn Device,
        env: &BTreeMap<String, i64>,
        args: &[KernelArg],
        kernel: KernelId,
        block: u32,
    ) -> Result<(), String> {
        let rt = self.rt;
        let error = self.error.clone();
        let program = self.program.clone();
        let x = self.state(id)?;
        let fields = field_names(x);
        // A structured exchange was laid out for this call's symbols by `reserve`; an
        // unstructured one's layout follows its schedule.
        if let Kind::Unstructured(us) = &mut x.kind {
            us.prepare(rt, &program, dev, env, args, &x.fields, &at)?;
            x.layout(env)?;
        }
        x.reserve(dev)?;
        let (send_bytes, _) = x.message_bytes();
        if matches!(x.kind, Kind::Unstructured(_)) {
            // The status word the pack kernel sets where the lists changed.
            dev.memset_zero(x.send_dev, HEADER).map_err(|e| e.0)?;
        }
        x.launch(dev, args, kernel, block, true)?;
        // SAFETY: `send_host` holds `cap >= send_bytes` bytes; the host touches it only
        // in the host function enqueued after this copy.
        unsafe { dev.copy_d2h_async(x.send_host, x.send_dev, send_bytes) }.map_err(|e| e.0)?;
        let ctx = x.ctx.clone();
        let bufs = HostBufs {
            send: x.send_host as usize,
            recv: x.recv_host as usize,
        };
        let post = x.poster();
        dev.host_fn(Arc::new(move || {
            let (send, recv) = (bufs.send as *mut u8, bufs.recv as *mut u8);
            // SAFETY: both buffers hold the header and the messages; they are freed only
            // after the stream is drained. The receive buffer's status word is outside
            // the messages, and no copy uses it now (stream order).
            let posted = unsafe {
                std::ptr::write_bytes(recv, 0, HEADER);
                if std::ptr::read(send as *const i64) != 0
                    && let Post::Unstructured { global, owner, .. } = &post
                {
                    record(
                        &error,
                        format!(
                            "{at}: the lists '{global}' and '{owner}' were changed in place since the exchange's schedule was made from them: pass changed lists in other arrays (the CUDA backend reads them when a call passes arrays it has not seen)"
                        ),
                    );
                }
                match &post {
                    Post::Structured { nb, off } => rt.post(
                        &ctx,
                        nb,
                        (9 * id) as i32,
                        send.add(HEADER),
                        recv.add(HEADER),
                        off,
                    ),
                    Post::Unstructured {
                        schedule, bytes, ..
                    } => rt.post_unstructured(
                        &ctx,
                        schedule,
                        *bytes,
                        (9 * id) as i32,
                        send.add(HEADER),
                        recv.add(HEADER),
                    ),
                }
            };
            if let Err(code) = posted {
                // SAFETY: as above.
                unsafe { std::ptr::write(recv as *mut i64, 1) };
                record(
                    &error,
                    format!("{at}: posting the messages of {fields} failed: MPI error {code}"),
                );
            }
        }))
        .map_err(|e| e.0)
    }

    /// Enqueues the finish of exchange `id`: the host function that waits for its
    /// messages, the copy of the received cells to the device and the unpack kernel.
    /// `at` says where the exchange is, for messages.
    pub(crate) fn finish(
        &mut self,
        id: usize,
        at: String,
        dev: &mut dyn Device,
        args: &[KernelArg],
        kernel: KernelId,
        block: u32,
    ) -> Result<(), String> {
        let rt = self.rt;
        let error = self.error.clone();
        let x = self.state(id)?;
        if x.cap == 0 {
            return Err(format!("halo exchange #{id} finishes before it started"));
        }
        let ctx = x.ctx.clone();
        let recv = x.recv_host as usize;
        let fields = field_names(x);
        let post = x.poster();
        dev.host_fn(Arc::new(move || {
            let (waited, from) = match &post {
                Post::Structured { nb, off } => (rt.wait(&ctx, nb, off), true),
                Post::Unstructured {
                    schedule, bytes, ..
                } => (rt.wait_unstructured(&ctx, schedule, *bytes), false),
            };
            if let Err(f) = waited {
                let whom = |d: usize| {
                    if from {
                        format!(
                            "the neighbour at ({}, {})",
                            d as i64 % 3 - 1,
                            d as i64 / 3 - 1
                        )
                    } else {
                        format!("rank {d}")
                    }
                };
                let message = match f {
                    WaitFailure::Mpi(d, code) => format!(
                        "{at}: the message of {fields} from {} failed: MPI error {code}",
                        whom(d)
                    ),
                    WaitFailure::Size(d, got, want) => format!(
                        "{at}: the message of {fields} from {} has {got} bytes, {want} expected: the ranks' parts of the fields do not fit together",
                        whom(d)
                    ),
                };
                // SAFETY: the receive buffer holds the header; no copy uses it now.
                unsafe { std::ptr::write(recv as *mut i64, 1) };
                record(&error, message);
            }
        }))
        .map_err(|e| e.0)?;
        let (_, bytes) = x.message_bytes();
        // SAFETY: `recv_host` holds `bytes`; the host writes it only in host functions,
        // which the stream orders around this copy.
        unsafe { dev.copy_h2d_async(x.recv_dev, x.recv_host, bytes) }.map_err(|e| e.0)?;
        x.launch(dev, args, kernel, block, false)
    }

    /// Frees the buffers (in stream order: after the work enqueued so far).
    pub(crate) fn release(&mut self, handle: &DeviceHandle) {
        for x in &mut self.list {
            if x.cap > 0 {
                handle.free_later(x.send_dev);
                handle.free_later(x.recv_dev);
                handle.free_host_later(x.send_host, x.cap);
                handle.free_host_later(x.recv_host, x.cap);
                x.cap = 0;
            }
            if let Kind::Unstructured(us) = &mut x.kind {
                for p in us.take_device() {
                    handle.free_later(p);
                }
            }
        }
    }
}

/// What the host functions of one exchange's start and finish need.
enum Post {
    Structured {
        nb: [i32; 9],
        off: [i64; 10],
    },
    Unstructured {
        schedule: Arc<Schedule>,
        bytes: i64,
        global: String,
        owner: String,
    },
}

/// Keeps the first failure.
fn record(error: &Mutex<Option<String>>, message: String) {
    let mut e = error.lock().unwrap_or_else(|p| p.into_inner());
    if e.is_none() {
        *e = Some(message);
    }
}

/// `'a', 'b'`: the exchanged fields.
fn field_names(x: &XState) -> String {
    let names: Vec<String> = x.fields.iter().map(|(n, _, _)| n.clone()).collect();
    quoted(&names)
}

fn quoted(fields: &[String]) -> String {
    fields
        .iter()
        .map(|f| format!("'{f}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The extents of `shape` for the symbol values `env`.
fn extents(
    id: usize,
    name: &str,
    shape: &[SymExpr],
    env: &BTreeMap<String, i64>,
) -> Result<Vec<i64>, String> {
    shape
        .iter()
        .map(|s| {
            s.eval_map(env)
                .map_err(|e| format!("halo exchange #{id}: the shape of '{name}': {e}"))
        })
        .collect()
}

impl XState {
    /// The messages' layout for the symbol values `env`: structured, per direction each
    /// field's strip padded to 8 bytes; unstructured, the bytes per cell. Also the most
    /// values one kernel thread loop covers, for the grid.
    fn layout(&mut self, env: &BTreeMap<String, i64>) -> Result<(), String> {
        match &mut self.kind {
            Kind::Structured { width, off, .. } => {
                let w = *width;
                let mut o = [0i64; 10];
                let mut widest = 0;
                for d in 0..9usize {
                    let (di, dj) = (d as i64 % 3 - 1, d as i64 / 3 - 1);
                    let mut bytes = 0i64;
                    if d != 4 {
                        for (name, shape, elem) in &self.fields {
                            let ext = extents(self.id, name, shape, env)?;
                            if ext.len() < 2 || ext[0] < 2 * w || ext[1] < 2 * w {
                                return Err(format!(
                                    "'{name}' has extents {ext:?}: it holds no halo of width {w} on both sides of its first two dimensions (halo exchange #{})",
                                    self.id
                                ));
                            }
                            let l0 = if di == 0 { ext[0] - 2 * w } else { w };
                            let l1 = if dj == 0 { ext[1] - 2 * w } else { w };
                            let rest: i64 = ext[2..].iter().map(|&e| e.max(0)).product();
                            let count = l0 * l1 * rest;
                            widest = widest.max(count);
                            bytes += (count * *elem as i64 + 7) / 8 * 8;
                        }
                    }
                    if bytes > i32::MAX as i64 {
                        return Err(format!(
                            "halo exchange #{}: a message of more than 2 GiB",
                            self.id
                        ));
                    }
                    o[d + 1] = o[d] + bytes;
                }
                *off = o;
                self.widest = widest;
            }
            Kind::Unstructured(us) => {
                let mut bytes = 0i64;
                let mut values = 1i64;
                for (name, shape, elem) in &self.fields {
                    let ext = extents(self.id, name, shape, env)?;
                    let m: i64 = ext[1..].iter().map(|&e| e.max(0)).product();
                    values = values.max(m);
                    bytes += (m * *elem as i64 + 7) / 8 * 8;
                }
                let s = &us.schedule;
                let cells = s.scnt.iter().chain(&s.rcnt).copied().max().unwrap_or(0);
                if cells * bytes > i32::MAX as i64 {
                    return Err(format!(
                        "halo exchange #{}: a message of more than 2 GiB",
                        self.id
                    ));
                }
                us.cell_bytes = bytes;
                self.widest = cells * values;
            }
        }
        Ok(())
    }

    /// The bytes of the send and of the receive buffer for the call under way, the
    /// status word included.
    fn message_bytes(&self) -> (usize, usize) {
        match &self.kind {
            Kind::Structured { off, .. } => (HEADER + off[9] as usize, HEADER + off[9] as usize),
            Kind::Unstructured(us) => {
                let s = &us.schedule;
                let total = |o: &[i64]| o.last().copied().unwrap_or(0) * us.cell_bytes;
                (
                    HEADER + total(&s.soff) as usize,
                    HEADER + total(&s.roff) as usize,
                )
            }
        }
    }

    /// What the host functions need, for the call under way.
    fn poster(&self) -> Post {
        match &self.kind {
            Kind::Structured { nb, off, .. } => Post::Structured { nb: *nb, off: *off },
            Kind::Unstructured(us) => Post::Unstructured {
                schedule: us.schedule.clone(),
                bytes: us.cell_bytes,
                global: us.global.0.clone(),
                owner: us.owner.0.clone(),
            },
        }
    }

    /// Makes the buffers large enough for the layout; `true` when they were allocated
    /// anew.
    fn reserve(&mut self, dev: &mut dyn Device) -> Result<bool, String> {
        let (send_bytes, recv_bytes) = self.message_bytes();
        let bytes = send_bytes.max(recv_bytes);
        if self.cap >= bytes {
            return Ok(false);
        }
        self.release(dev);
        self.send_dev = dev.alloc_zeroed(bytes).map_err(|e| e.0)?;
        self.recv_dev = dev.alloc_zeroed(bytes).map_err(|e| e.0)?;
        self.send_host = dev.alloc_host(bytes).map_err(|e| e.0)?;
        self.recv_host = dev.alloc_host(bytes).map_err(|e| e.0)?;
        self.cap = bytes;
        Ok(true)
    }

    /// Launches the pack (`send`) or unpack kernel.
    fn launch(
        &self,
        dev: &mut dyn Device,
        args: &[KernelArg],
        kernel: KernelId,
        block: u32,
        send: bool,
    ) -> Result<(), String> {
        let mut all = args.to_vec();
        all.push(KernelArg::Ptr(if send {
            self.send_dev
        } else {
            self.recv_dev
        }));
        match &self.kind {
            Kind::Structured { mask, .. } => all.push(KernelArg::I32(*mask)),
            Kind::Unstructured(us) => {
                all.push(KernelArg::Ptr(if send {
                    us.send_schedule
                } else {
                    us.recv_schedule
                }));
                all.push(KernelArg::Ptr(us.lists));
            }
        }
        let blocks = (self.widest.max(1) as u64)
            .div_ceil(block as u64)
            .min(65_535) as u32;
        dev.launch(kernel, [blocks, 1, 1], [block, 1, 1], &all)
            .map_err(|e| e.0)
    }

    /// Frees the buffers now (in stream order).
    fn release(&mut self, dev: &mut dyn Device) {
        if self.cap == 0 {
            return;
        }
        dev.free(self.send_dev);
        dev.free(self.recv_dev);
        dev.free_host(self.send_host, self.cap);
        dev.free_host(self.recv_host, self.cap);
        self.cap = 0;
    }
}

impl Unstructured {
    /// The device memory of the schedule and the lists, forgotten here (to be freed).
    fn take_device(&mut self) -> Vec<DevPtr> {
        self.made_from = None;
        [
            std::mem::take(&mut self.send_schedule),
            std::mem::take(&mut self.recv_schedule),
            std::mem::take(&mut self.lists),
        ]
        .into_iter()
        .filter(|&p| p != 0)
        .collect()
    }

    /// Makes the schedule again where any rank's call passes its lists in other arrays
    /// (or of another length) than the schedule was made from: reads the lists (a wait),
    /// makes the schedule with the other ranks, and puts it and the lists on the device.
    #[allow(clippy::too_many_arguments)]
    fn prepare(
        &mut self,
        rt: &Runtime,
        program: &Context,
        dev: &mut dyn Device,
        env: &BTreeMap<String, i64>,
        args: &[KernelArg],
        fields: &[(String, Vec<SymExpr>, usize)],
        at: &str,
    ) -> Result<(), String> {
        let ptr = |k: usize| match args.get(k) {
            Some(KernelArg::Ptr(p)) => Ok(*p),
            _ => Err(format!("{at}: its list is not an array argument")),
        };
        let (gp, op) = (ptr(self.global.1)?, ptr(self.owner.1)?);
        let n = self
            .n
            .eval_map(env)
            .map_err(|e| format!("{at}: the length of '{}': {e}", self.global.0))?;
        let changed = self.made_from != Some((gp, op, n));
        if !rt.any(program, changed).map_err(|e| format!("{at}: {e}"))? {
            return Ok(());
        }
        let read = |p: DevPtr, t: DType, dev: &mut dyn Device| -> Result<Vec<i64>, String> {
            let mut b = vec![0u8; n.max(0) as usize * t.size_bytes()];
            if !b.is_empty() {
                dev.copy_d2h_sync(&mut b, p).map_err(|e| e.0)?;
            }
            Ok(match t {
                DType::I32 => b
                    .chunks_exact(4)
                    .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64)
                    .collect(),
                DType::I64 => b
                    .chunks_exact(8)
                    .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                    .collect(),
                other => {
                    return Err(format!(
                        "{at}: its lists must be integers, not {}",
                        other.name()
                    ));
                }
            })
        };
        let g = read(gp, self.global.2, dev)?;
        let o = read(op, self.owner.2, dev)?;
        let (rank, size) = rt.mpi.world().map_err(|e| format!("{at}: {e}"))?;
        let schedule = rt.schedule(program, &g, &o).map_err(|f| match f {
            ScheduleFailure::NoSuchOwner(c, gl, owner, r) => format!(
                "{at}: cell {c} (global {gl}) of rank {r} is owned by rank {owner}, which is not one of the {size}"
            ),
            ScheduleFailure::NotOwned(c, gl, holder, owner) => format!(
                "{at}: cell {c} (global {gl}) of rank {holder} is not among the cells rank {owner} owns"
            ),
            ScheduleFailure::Mpi(m) => format!(
                "{at}: making the schedule of the exchanges by '{}' and '{}' failed: {m}",
                self.global.0, self.owner.0
            ),
        })?;
        for (name, shape, _) in fields {
            if let Some(e0) = shape.first() {
                let e0 = e0
                    .eval_map(env)
                    .map_err(|e| format!("{at}: '{name}': {e}"))?;
                if e0 != n {
                    return Err(format!(
                        "{at}: '{name}' has {e0} cells in its first dimension on rank {rank}, '{}' lists {n}",
                        self.global.0
                    ));
                }
            }
        }
        // On the device: the schedule's two halves and the lists it was made from.
        let ranks = schedule.scnt.len() as i64;
        let half = |cnt: &[i64], off: &[i64], idx: &[i64]| -> Vec<i64> {
            let mut v = vec![ranks];
            v.extend_from_slice(cnt);
            v.extend_from_slice(off);
            v.extend_from_slice(idx);
            v
        };
        let send = half(&schedule.scnt, &schedule.soff, &schedule.sidx);
        let recv = half(&schedule.rcnt, &schedule.roff, &schedule.ridx);
        let mut lists = vec![n];
        lists.extend_from_slice(&g);
        lists.extend_from_slice(&o);
        for p in self.take_device() {
            dev.free(p);
        }
        let upload = |v: &[i64], dev: &mut dyn Device| -> Result<DevPtr, String> {
            let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            let p = dev.alloc_zeroed(bytes.len()).map_err(|e| e.0)?;
            dev.copy_h2d(p, &bytes).map_err(|e| e.0)?;
            Ok(p)
        };
        self.send_schedule = upload(&send, dev)?;
        self.recv_schedule = upload(&recv, dev)?;
        self.lists = upload(&lists, dev)?;
        self.schedule = Arc::new(schedule);
        self.made_from = Some((gp, op, n));
        Ok(())
    }
}
