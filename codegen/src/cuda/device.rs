//! The host layer the CUDA executor calls: one [`Device`] trait over one stream, and two
//! implementations of it.
//!
//! - [`CudaDevice`]: the CUDA driver API through `cudarc` (one context, one non-blocking
//!   stream, `cudarc`'s per-buffer event tracking disabled, raw `cuLaunchKernel`, CUDA
//!   graph capture and replay).
//! - [`RecordingDevice`]: a fake for tests without a GPU. Memory is real host memory
//!   behind fake device pointers, so data round-trips; launches are only recorded.
//! - [`EmulatedDevice`]: the generated CUDA compiled for the host and run there, every
//!   block and thread of every launch, for tests (and users) without a GPU.
//!
//! [`from_env`] picks one by `SDFLOW_CUDA_DEVICE`.
//!
//! Everything is enqueued on the program's one stream in call order. Nothing blocks the
//! host except [`Device::synchronize`], [`Device::copy_d2h_sync`], [`Event::wait`] and the
//! allocations and frees done at load time.

mod driver;
mod emulated;
mod recording;
mod staging;

pub use driver::CudaDevice;
pub use emulated::{EMULATED, EmulatedDevice, build_library};
pub use recording::{Call, Launch, RecordingDevice};

/// The environment variable that picks the device [`from_env`] opens.
pub const DEVICE_ENV: &str = "SDFLOW_CUDA_DEVICE";

/// The device `SDFLOW_CUDA_DEVICE` names: unset or a number, that CUDA device (default
/// 0); `emulated`, an [`EmulatedDevice`] (the generated CUDA run on the host); `recording`,
/// a [`RecordingDevice`] (launches recorded, not run).
pub fn from_env() -> Result<DeviceHandle, DeviceError> {
    match std::env::var(DEVICE_ENV) {
        Err(_) => CudaDevice::new(0).map(DeviceHandle::new),
        Ok(v) => match v.trim() {
            EMULATED => Ok(DeviceHandle::new(EmulatedDevice::new())),
            "recording" => Ok(DeviceHandle::new(RecordingDevice::new((9, 0)))),
            n => match n.parse::<usize>() {
                Ok(ordinal) => CudaDevice::new(ordinal).map(DeviceHandle::new),
                Err(_) => Err(DeviceError(format!(
                    "{DEVICE_ENV}='{v}': expected a device number, 'emulated' or 'recording'"
                ))),
            },
        },
    }
}

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// A device address (`CUdeviceptr`).
pub type DevPtr = u64;

/// A function the stream runs on the host ([`Device::host_fn`]).
pub type HostFn = Arc<dyn Fn() + Send + Sync>;

/// One kernel argument, passed by value as the kernel's parameter of the same type.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KernelArg {
    /// A device pointer (`T*`).
    Ptr(DevPtr),
    /// `long long` / `int64_t`.
    I64(i64),
    /// `int` / `int32_t`.
    I32(i32),
    /// `double`.
    F64(f64),
    /// `float`.
    F32(f32),
}

/// A kernel of a loaded module, as returned by [`Device::load_module`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KernelId(pub usize);

/// An instantiated CUDA graph, as returned by [`Device::end_capture`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GraphId(pub usize);

/// Why a device operation failed: the driver's error name and text, and what was done.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct DeviceError(pub String);

/// The driver error `e` while doing `what`, with the error's name and text.
fn driver_error(
    what: impl std::fmt::Display,
    e: cudarc::driver::result::DriverError,
) -> DeviceError {
    let name = e
        .error_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{:?}", e.0));
    let text = e
        .error_string()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    if text.is_empty() {
        DeviceError(format!("{what}: {name}"))
    } else {
        DeviceError(format!("{what}: {name} ({text})"))
    }
}

/// How much a device was asked to do (for tests and `sdflow` statistics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Kernel launches enqueued (also those captured into a graph; not replays).
    pub launches: u64,
    /// Copies enqueued: host to device, device to host and device to device (not the
    /// mirrors, [`Device::mirror`]).
    pub copies: u64,
    /// Host waits: [`Device::synchronize`], [`Device::copy_d2h_sync`] and [`Event::wait`]
    /// on events this device recorded.
    pub syncs: u64,
    /// Graph replays.
    pub replays: u64,
}

/// The most bytes [`Device::mirror`] copies.
pub const MIRROR_BYTES: usize = 64;

/// Checks a [`Device::mirror`] request: its size, and that a capture only copies into a
/// mirror made before it (`made`: whether `src` has one).
fn check_mirror(bytes: usize, capturing: bool, made: bool) -> Result<(), DeviceError> {
    if bytes > MIRROR_BYTES {
        return Err(DeviceError(format!(
            "a mirror of {bytes} bytes (at most {MIRROR_BYTES})"
        )));
    }
    if capturing && !made {
        return Err(DeviceError(
            "making a mirror is not allowed while capturing a graph".into(),
        ));
    }
    Ok(())
}

/// The mirrors of a device whose memory is host memory (the emulated and the recording
/// device): the bytes last copied, per device address.
#[derive(Debug, Default)]
struct HostMirrors(std::collections::BTreeMap<DevPtr, Vec<u8>>);

impl HostMirrors {
    fn contains(&self, src: DevPtr) -> bool {
        self.0.contains_key(&src)
    }

    fn set(&mut self, src: DevPtr, bytes: Vec<u8>) {
        self.0.insert(src, bytes);
    }

    fn forget(&mut self, src: DevPtr) {
        self.0.remove(&src);
    }

    /// [`Device::read_mirror`].
    fn read(&self, src: DevPtr, dst: &mut [u8]) {
        dst.fill(0);
        if let Some(m) = self.0.get(&src) {
            let n = m.len().min(dst.len());
            dst[..n].copy_from_slice(&m[..n]);
        }
    }
}

/// Everything one enqueues on the program's one stream, in order. Nothing here blocks the
/// host except `synchronize`, `copy_d2h_sync` and the allocations/frees at load time.
pub trait Device: Send {
    /// The device's name and architecture, e.g. `NVIDIA H100 80GB HBM3 (sm_90)`.
    fn name(&self) -> String;
    /// The compute capability `(major, minor)`.
    fn arch(&self) -> (u32, u32);
    /// Whether [`Device::load_module`] takes a host library built from the CUDA text
    /// ([`build_library`]: the emulated device) rather than an image NVRTC made of it.
    fn host_library(&self) -> bool {
        false
    }
    /// Loads a CUBIN or PTX image and looks up `kernels` in it, in order.
    fn load_module(
        &mut self,
        image: &[u8],
        kernels: &[String],
    ) -> Result<Vec<KernelId>, DeviceError>;
    /// Allocates `bytes` of device memory, zeroed (in stream order) before any later work.
    fn alloc_zeroed(&mut self, bytes: usize) -> Result<DevPtr, DeviceError>;
    /// Frees an allocation once the work enqueued before is done with it.
    fn free(&mut self, p: DevPtr);
    /// Enqueues a kernel launch.
    fn launch(
        &mut self,
        k: KernelId,
        grid: [u32; 3],
        block: [u32; 3],
        args: &[KernelArg],
    ) -> Result<(), DeviceError>;
    /// Enqueues a copy from the host; may stage through pinned memory; returns once the
    /// host slice may be reused.
    fn copy_h2d(&mut self, dst: DevPtr, src: &[u8]) -> Result<(), DeviceError>;
    /// Copies to the host after all work enqueued before: a sync point.
    fn copy_d2h_sync(&mut self, dst: &mut [u8], src: DevPtr) -> Result<(), DeviceError>;
    /// Enqueues a device-to-device copy.
    fn copy_d2d(&mut self, dst: DevPtr, src: DevPtr, bytes: usize) -> Result<(), DeviceError>;
    /// Enqueues zeroing `bytes` bytes at `dst`.
    fn memset_zero(&mut self, dst: DevPtr, bytes: usize) -> Result<(), DeviceError>;
    /// Records an event after everything enqueued so far.
    fn record_event(&mut self) -> Result<Event, DeviceError>;
    /// Waits for everything enqueued so far.
    fn synchronize(&mut self) -> Result<(), DeviceError>;
    /// Starts capturing the stream into a CUDA graph: launches, device copies and memsets
    /// are recorded, not run, until [`Device::end_capture`].
    fn begin_capture(&mut self) -> Result<(), DeviceError>;
    /// Ends the capture and instantiates the graph.
    fn end_capture(&mut self) -> Result<GraphId, DeviceError>;
    /// Enqueues one run of a captured graph.
    fn replay(&mut self, g: GraphId) -> Result<(), DeviceError>;
    /// Makes the program's stream wait, without blocking the host, for the work enqueued
    /// so far on another library's stream (a `CUstream` handle; 1 and 2 are the legacy
    /// and the per-thread default stream, as in `__cuda_array_interface__`).
    fn wait_for_stream(&mut self, stream: u64) -> Result<(), DeviceError>;
    /// Makes another library's stream wait, without blocking the host, for the work
    /// enqueued so far on the program's stream.
    fn signal_stream(&mut self, stream: u64) -> Result<(), DeviceError>;
    /// Enqueues a copy of the `bytes` (at most [`MIRROR_BYTES`]) at `src` into host memory
    /// this device keeps for `src` (its mirror), also during a capture (the graph then
    /// copies at each replay). The first call for `src` makes the mirror: not during a
    /// capture. A program mirrors its error record after each call, so that the host sees
    /// a failure of finished work without waiting for the work enqueued since.
    fn mirror(&mut self, src: DevPtr, bytes: usize) -> Result<(), DeviceError>;
    /// The mirror of `src` (zeros where none was made) as the copies so far left it,
    /// without waiting: every copy enqueued before an event that is done has landed; a
    /// later copy may be landing (a value that changed meanwhile can be read torn).
    fn read_mirror(&mut self, src: DevPtr, dst: &mut [u8]);
    /// Allocates `bytes` of zeroed host memory the device copies to and from without the
    /// host waiting ([`Device::copy_d2h_async`], [`Device::copy_h2d_async`]): page-locked
    /// on a GPU.
    fn alloc_host(&mut self, bytes: usize) -> Result<*mut u8, DeviceError>;
    /// Frees memory of [`Device::alloc_host`] of `bytes` bytes, after waiting for the
    /// work enqueued so far (a copy may still use it).
    fn free_host(&mut self, p: *mut u8, bytes: usize);
    /// Enqueues a copy of `bytes` bytes at `src` into host memory `dst` (during a capture,
    /// the graph copies at each replay).
    ///
    /// # Safety
    /// `dst` is memory of [`Device::alloc_host`] holding `bytes`, which the host neither
    /// reads nor writes until the copy is done (a later host function or event says so),
    /// and, for a capture, which outlives the graph.
    unsafe fn copy_d2h_async(
        &mut self,
        dst: *mut u8,
        src: DevPtr,
        bytes: usize,
    ) -> Result<(), DeviceError>;
    /// Enqueues a copy of `bytes` bytes from host memory `src` to `dst` (during a capture,
    /// the graph copies at each replay).
    ///
    /// # Safety
    /// `src` is memory of [`Device::alloc_host`] holding `bytes`, which the host does not
    /// write until the copy is done, and, for a capture, which outlives the graph.
    unsafe fn copy_h2d_async(
        &mut self,
        dst: DevPtr,
        src: *const u8,
        bytes: usize,
    ) -> Result<(), DeviceError>;
    /// Enqueues `f`, run on a host thread once the work enqueued before is done; the work
    /// enqueued after starts once `f` returned. `f` must not call the device. During a
    /// capture, the graph calls `f` at each replay (and keeps it as long as the graph).
    fn host_fn(&mut self, f: HostFn) -> Result<(), DeviceError>;
    /// Checks that `[p, p + bytes)` is memory of this device (another library's
    /// allocation a program is given).
    fn check_memory(&mut self, p: DevPtr, bytes: usize) -> Result<(), DeviceError>;
    /// What was done so far.
    fn counters(&self) -> Counters;
    /// The implementation, to look at its own state (a [`RecordingDevice`]'s log).
    fn as_any(&self) -> &dyn std::any::Any;
}

/// A device shared by the programs loaded on it and the arrays allocated there: all of
/// them enqueue on the device's one stream, in the order the host calls them, so an array
/// one program writes is ready for the next program's call without a wait. Cloning the
/// handle shares the device; it is freed when the last handle, program and array are gone.
#[derive(Clone)]
pub struct DeviceHandle(Arc<Shared>);

struct Shared {
    device: Mutex<Box<dyn Device>>,
    /// Allocations released while the device was held (by this thread or another): freed
    /// at the next [`DeviceHandle::lock`].
    pending_frees: Mutex<Vec<Pending>>,
    /// Whether `pending_frees` may hold any (a lock looks at them only then).
    any_pending: AtomicBool,
}

impl DeviceHandle {
    /// Shares `device`.
    pub fn new(device: impl Device + 'static) -> DeviceHandle {
        DeviceHandle::from_box(Box::new(device))
    }

    /// Shares a boxed device.
    pub fn from_box(device: Box<dyn Device>) -> DeviceHandle {
        DeviceHandle(Arc::new(Shared {
            device: Mutex::new(device),
            pending_frees: Mutex::new(Vec::new()),
            any_pending: AtomicBool::new(false),
        }))
    }

    /// The device, for as long as the guard lives (other threads using the handle wait).
    /// A thread that panicked while holding it leaves the device as it was: every device
    /// operation is one driver call, so there is no half-done state to refuse.
    pub fn lock(&self) -> MutexGuard<'_, Box<dyn Device>> {
        let mut d = self
            .0
            .device
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if self.0.any_pending.swap(false, Ordering::AcqRel) {
            let pending = std::mem::take(
                &mut *self
                    .0
                    .pending_frees
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner()),
            );
            for p in pending {
                p.free(&mut **d);
            }
        }
        d
    }

    /// Frees `p` in stream order: now if the device is free, else at the next
    /// [`DeviceHandle::lock`] (so dropping an array while holding the device's guard
    /// does not deadlock).
    pub fn free_later(&self, p: DevPtr) {
        self.release(Pending::Device(p));
    }

    /// Frees host memory of [`Device::alloc_host`] (`bytes` bytes) as
    /// [`DeviceHandle::free_later`] frees device memory.
    pub fn free_host_later(&self, p: *mut u8, bytes: usize) {
        self.release(Pending::Host(p as usize, bytes));
    }

    fn release(&self, p: Pending) {
        match self.0.device.try_lock() {
            Ok(mut d) => p.free(&mut **d),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => {
                p.free(&mut **poisoned.into_inner())
            }
            Err(std::sync::TryLockError::WouldBlock) => {
                self.0
                    .pending_frees
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .push(p);
                self.0.any_pending.store(true, Ordering::Release);
            }
        }
    }

    /// Whether both handles share one device.
    pub fn same(&self, other: &DeviceHandle) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let device = self
            .device
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let pending = self
            .pending_frees
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for p in pending.drain(..) {
            p.free(&mut **device);
        }
    }
}

/// Memory released while the device was held, freed at the next lock.
enum Pending {
    Device(DevPtr),
    /// Address and size of host memory of [`Device::alloc_host`].
    Host(usize, usize),
}

impl Pending {
    fn free(self, d: &mut dyn Device) {
        match self {
            Pending::Device(p) => d.free(p),
            Pending::Host(p, bytes) => d.free_host(p as *mut u8, bytes),
        }
    }
}

impl fmt::Debug for DeviceHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `try_lock`: printing a handle while its device is held must not deadlock.
        match self.0.device.try_lock() {
            Ok(d) => f.debug_tuple("DeviceHandle").field(&d.name()).finish(),
            Err(_) => f.debug_tuple("DeviceHandle").field(&"in use").finish(),
        }
    }
}

/// What an [`Event`] is made of, per device implementation.
pub trait EventImpl: Send + Sync {
    /// Blocks until the work recorded before the event is done.
    fn wait(&self) -> Result<(), DeviceError>;
    /// Whether that work is done, without waiting; `Err` for a failure seen meanwhile.
    fn query(&self) -> Result<bool, DeviceError>;
}

/// A point in the stream: completion of everything enqueued before it was recorded. Can be
/// sent to and waited on from any thread.
pub struct Event {
    inner: Box<dyn EventImpl>,
    syncs: Arc<AtomicU64>,
}

impl Event {
    /// Wraps an implementation; `syncs` is the recording device's counter of host waits.
    pub fn new(inner: Box<dyn EventImpl>, syncs: Arc<AtomicU64>) -> Event {
        Event { inner, syncs }
    }

    /// Blocks until the work recorded before this event is done (a sync point, counted in
    /// the device's [`Counters::syncs`]). An `Err` is a failure of that work (or of
    /// anything else on the device since).
    pub fn wait(&self) -> Result<(), DeviceError> {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        self.inner.wait()
    }

    /// Whether the work is done, without waiting. Also `true` when the device reported a
    /// failure meanwhile, so that a poller goes on to [`Event::wait`], which returns it.
    pub fn is_done(&self) -> bool {
        self.inner.query().unwrap_or(true)
    }
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event").finish_non_exhaustive()
    }
}

/// An event of a device that runs (or records) work when it is enqueued: done at once.
struct DoneEvent;

impl EventImpl for DoneEvent {
    fn wait(&self) -> Result<(), DeviceError> {
        Ok(())
    }
    fn query(&self) -> Result<bool, DeviceError> {
        Ok(true)
    }
}

/// Host memory of a device whose memory is host memory ([`Device::alloc_host`] of the
/// emulated and the recording device): zeroed, 64-byte aligned.
fn plain_host_alloc(bytes: usize) -> Result<*mut u8, DeviceError> {
    let layout = std::alloc::Layout::from_size_align(bytes.max(1), 64)
        .map_err(|e| DeviceError(format!("{bytes} bytes of host memory: {e}")))?;
    // SAFETY: the layout has a non-zero size.
    let p = unsafe { std::alloc::alloc_zeroed(layout) };
    if p.is_null() {
        return Err(DeviceError(format!("out of host memory ({bytes} bytes)")));
    }
    Ok(p)
}

/// Frees [`plain_host_alloc`]'s `p` of `bytes`.
fn plain_host_free(p: *mut u8, bytes: usize) {
    if p.is_null() {
        return;
    }
    if let Ok(layout) = std::alloc::Layout::from_size_align(bytes.max(1), 64) {
        // SAFETY: allocated by `plain_host_alloc` with this size, as the caller says.
        unsafe { std::alloc::dealloc(p, layout) };
    }
}

/// Checks `args` against kernel `name`'s parameter sizes in bytes: launching with others
/// would make the kernel read garbage or the driver read past the arguments.
fn check_args(name: &str, params: &[usize], args: &[KernelArg]) -> Result<(), DeviceError> {
    let given: Vec<usize> = args
        .iter()
        .map(|a| match a {
            KernelArg::I32(_) | KernelArg::F32(_) => 4,
            KernelArg::Ptr(_) | KernelArg::I64(_) | KernelArg::F64(_) => 8,
        })
        .collect();
    if given != params {
        return Err(DeviceError(format!(
            "kernel {name} takes parameters of {params:?} bytes, but the launch passes \
             {given:?} ({args:?})"
        )));
    }
    Ok(())
}

/// The bytes of `args` as laid out for `cuLaunchKernel`: one 8-byte slot per argument,
/// the value in its native representation at the start of the slot.
fn arg_slots(args: &[KernelArg], slots: &mut Vec<u64>) {
    slots.clear();
    for a in args {
        let mut bytes = [0u8; 8];
        match *a {
            KernelArg::Ptr(p) => bytes = p.to_ne_bytes(),
            KernelArg::I64(v) => bytes = v.to_ne_bytes(),
            KernelArg::F64(v) => bytes = v.to_ne_bytes(),
            KernelArg::I32(v) => bytes[..4].copy_from_slice(&v.to_ne_bytes()),
            KernelArg::F32(v) => bytes[..4].copy_from_slice(&v.to_ne_bytes()),
        }
        slots.push(u64::from_ne_bytes(bytes));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argument_slots_hold_native_values() {
        let mut slots = Vec::new();
        arg_slots(
            &[
                KernelArg::Ptr(0xdead_beef_0000),
                KernelArg::I32(-2),
                KernelArg::F32(1.5),
                KernelArg::F64(-0.25),
                KernelArg::I64(-7),
            ],
            &mut slots,
        );
        assert_eq!(slots.len(), 5);
        assert_eq!(slots[0], 0xdead_beef_0000);
        let b = slots[1].to_ne_bytes();
        assert_eq!(i32::from_ne_bytes(b[..4].try_into().unwrap()), -2);
        let b = slots[2].to_ne_bytes();
        assert_eq!(f32::from_ne_bytes(b[..4].try_into().unwrap()), 1.5);
        assert_eq!(f64::from_bits(slots[3]), -0.25);
        assert_eq!(slots[4] as i64, -7);
    }
}
