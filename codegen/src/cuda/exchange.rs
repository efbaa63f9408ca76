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
//! per-direction buffers one after another, so a message is the same bytes on both
//! backends.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use sdflow_ir::{Decomposition, Sdfg, SymExpr};

use super::device::{DevPtr, Device, DeviceHandle, KernelArg, KernelId};
use super::emit::CudaProgram;
use crate::CodegenError;
use crate::mpi::{ExchangeContext, Runtime, WaitFailure};

/// Bytes before the messages in each buffer: the status word the unpack kernel reads.
const HEADER: usize = 8;

/// One exchange of a loaded program.
struct XState {
    id: usize,
    /// The exchanged fields, in the exchange's order: their names, shapes and element
    /// sizes.
    fields: Vec<(String, Vec<SymExpr>, usize)>,
    width: i64,
    ctx: Arc<ExchangeContext>,
    /// The neighbour in each direction (−1: none).
    nb: [i32; 9],
    /// Bit `d` set where direction `d` has a neighbour.
    mask: i32,
    /// Where direction `d`'s message lies in the buffers (after the header), for the
    /// call under way.
    off: [i64; 10],
    /// The most elements of one strip, for the kernels' grid.
    widest: i64,
    /// Bytes of each buffer (header included) allocated.
    cap: usize,
    send_dev: DevPtr,
    recv_dev: DevPtr,
    send_host: *mut u8,
    recv_host: *mut u8,
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
    list: Vec<XState>,
    error: Arc<Mutex<Option<String>>>,
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
        let mut list = Vec::new();
        for x in prog.plan.exchanges() {
            let Decomposition::Structured {
                ranks,
                width,
                periodic,
                corners,
            } = &x.decomposition
            else {
                return Err(load_err(format!(
                    "halo exchange #{}: the CUDA backend lowers structured exchanges only",
                    x.id
                )));
            };
            let ctx = rt.exchange(&program).map_err(load_err)?;
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
            list.push(XState {
                id: x.id,
                fields,
                width: *width,
                ctx: Arc::new(ctx),
                nb,
                mask,
                off: [0; 10],
                widest: 0,
                cap: 0,
                send_dev: 0,
                recv_dev: 0,
                send_host: std::ptr::null_mut(),
                recv_host: std::ptr::null_mut(),
            });
        }
        Ok(Some(Exchanges {
            rt,
            list,
            error: Arc::new(Mutex::new(None)),
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

    /// Enqueues the start of exchange `id`: its pack kernel `kernel` (with the common
    /// arguments `args`), the copy of the buffer to the host and the host function that
    /// posts the messages. `at` says where the exchange is, for messages.
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
        let x = self.state(id)?;
        x.layout(env)?;
        let bytes = HEADER + x.off[9] as usize;
        if x.cap < bytes {
            x.release(dev);
            x.send_dev = dev.alloc_zeroed(bytes).map_err(|e| e.0)?;
            x.recv_dev = dev.alloc_zeroed(bytes).map_err(|e| e.0)?;
            x.send_host = dev.alloc_host(bytes).map_err(|e| e.0)?;
            x.recv_host = dev.alloc_host(bytes).map_err(|e| e.0)?;
            x.cap = bytes;
        }
        x.launch(dev, args, kernel, block, x.send_dev)?;
        // SAFETY: `send_host` holds `cap >= bytes` bytes; the host touches it only in
        // the host function enqueued after this copy.
        unsafe { dev.copy_d2h_async(x.send_host, x.send_dev, bytes) }.map_err(|e| e.0)?;
        let (ctx, nb, off) = (x.ctx.clone(), x.nb, x.off);
        let bufs = HostBufs {
            send: x.send_host as usize,
            recv: x.recv_host as usize,
        };
        let fields = field_names(x);
        dev.host_fn(Box::new(move || {
            let (send, recv) = (bufs.send as *mut u8, bufs.recv as *mut u8);
            // SAFETY: both buffers hold the header and `off[9]` bytes of messages; they
            // are freed only after the stream is drained. The receive buffer's status
            // word is outside the messages, and no copy uses it now (stream order).
            let posted = unsafe {
                std::ptr::write_bytes(recv, 0, HEADER);
                rt.post(
                    &ctx,
                    &nb,
                    (9 * id) as i32,
                    send.add(HEADER),
                    recv.add(HEADER),
                    &off,
                )
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
    /// messages, the copy of the received strips to the device and the unpack kernel.
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
        let (ctx, nb, off) = (x.ctx.clone(), x.nb, x.off);
        let recv = x.recv_host as usize;
        let fields = field_names(x);
        dev.host_fn(Box::new(move || {
            if let Err(f) = rt.wait(&ctx, &nb, &off) {
                let message = match f {
                    WaitFailure::Mpi(d, code) => format!(
                        "{at}: the message of {fields} from the neighbour at ({}, {}) failed: MPI error {code}",
                        d as i64 % 3 - 1,
                        d as i64 / 3 - 1
                    ),
                    WaitFailure::Size(d, got, want) => format!(
                        "{at}: the message of {fields} from the neighbour at ({}, {}) has {got} bytes, {want} expected: the ranks' parts of the fields do not fit together",
                        d as i64 % 3 - 1,
                        d as i64 / 3 - 1
                    ),
                };
                // SAFETY: the receive buffer holds the header; no copy uses it now.
                unsafe { std::ptr::write(recv as *mut i64, 1) };
                record(&error, message);
            }
        }))
        .map_err(|e| e.0)?;
        let bytes = HEADER + x.off[9] as usize;
        // SAFETY: `recv_host` holds `bytes`; the host writes it only in host functions,
        // which the stream orders around this copy.
        unsafe { dev.copy_h2d_async(x.recv_dev, x.recv_host, bytes) }.map_err(|e| e.0)?;
        x.launch(dev, args, kernel, block, x.recv_dev)
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
        }
    }
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

impl XState {
    /// The messages' layout for the symbol values `env`: per direction, each field's
    /// strip padded to 8 bytes (as the pack kernel writes them).
    fn layout(&mut self, env: &BTreeMap<String, i64>) -> Result<(), String> {
        let w = self.width;
        let mut off = [0i64; 10];
        let mut widest = 0;
        for d in 0..9usize {
            let (di, dj) = (d as i64 % 3 - 1, d as i64 / 3 - 1);
            let mut bytes = 0i64;
            if d != 4 {
                for (name, shape, elem) in &self.fields {
                    let mut ext = Vec::with_capacity(shape.len());
                    for s in shape {
                        ext.push(s.eval_map(env).map_err(|e| {
                            format!("halo exchange #{}: the shape of '{name}': {e}", self.id)
                        })?);
                    }
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
            off[d + 1] = off[d] + bytes;
        }
        self.off = off;
        self.widest = widest;
        Ok(())
    }

    /// Launches the pack or unpack kernel on `buffer`.
    fn launch(
        &self,
        dev: &mut dyn Device,
        args: &[KernelArg],
        kernel: KernelId,
        block: u32,
        buffer: DevPtr,
    ) -> Result<(), String> {
        let mut all = args.to_vec();
        all.push(KernelArg::Ptr(buffer));
        all.push(KernelArg::I32(self.mask));
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
