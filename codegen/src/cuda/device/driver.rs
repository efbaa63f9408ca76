//! [`CudaDevice`]: the [`Device`] over the CUDA driver API, through `cudarc`.
//!
//! `cudarc`'s safe layer gives the context (primary context retained and released), the
//! stream and events; the rest uses its `result`/`sys` layers on raw pointers, since the
//! executor deals in [`DevPtr`]s, not typed buffers. `cudarc`'s per-buffer event tracking
//! is disabled before the stream is made (it costs ~2 µs per launch and breaks graph
//! capture; there is one stream, so it protects nothing here).
//!
//! Why one file of this size: every `Device` operation over the driver API, each a few
//! lines of unsafe FFI with its own error message; the staging buffers are
//! `staging.rs`.

use super::staging::{self, StagingPool};
use super::{
    Counters, DevPtr, Device, DeviceError, Event, EventImpl, GraphId, HostFn, KernelArg, KernelId,
    MIRROR_BYTES, arg_slots, check_args, check_mirror, driver_error,
};
use cudarc::driver::result::{self as cu, DriverError};
use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaEvent, CudaStream};
use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A CUDA device: one context, one non-blocking stream.
pub struct CudaDevice {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    name: String,
    arch: (u32, u32),
    async_alloc: bool,
    modules: Vec<sys::CUmodule>,
    kernels: Vec<Kernel>,
    /// Live allocations: size, and whether `cuMemAllocAsync` made it.
    allocations: HashMap<DevPtr, (usize, bool)>,
    graphs: Vec<(sys::CUgraph, sys::CUgraphExec)>,
    /// The host functions of the graphs (kept as long as the graphs), and those of the
    /// capture under way.
    graph_fns: Vec<*mut HostFn>,
    capture_fns: Vec<*mut HostFn>,
    staging: StagingPool,
    capturing: bool,
    /// Frees asked for during a capture, done after it.
    deferred_frees: Vec<DevPtr>,
    slots: Vec<u64>,
    params: Vec<*mut c_void>,
    /// Pinned host mirrors ([`Device::mirror`]) of device addresses, [`MIRROR_BYTES`]
    /// each; those of freed addresses wait in `retired` until the device is dropped (a
    /// copy into one may still be under way).
    mirrors: HashMap<DevPtr, *mut u8>,
    retired: Vec<*mut u8>,
    launches: u64,
    copies: u64,
    replays: u64,
    syncs: Arc<AtomicU64>,
}

// SAFETY: the raw handles (modules, functions, graphs, pinned buffers, events) belong to
// `ctx`, which every method binds to the calling thread first; CUDA driver handles are not
// tied to the thread that made them. `params` only points into `slots` during `launch`.
unsafe impl Send for CudaDevice {}

/// A kernel of a loaded module.
struct Kernel {
    f: sys::CUfunction,
    name: String,
    /// The size of each parameter, where the driver says (`cuFuncGetParamInfo`).
    params: Option<Vec<usize>>,
}

/// The sizes of `f`'s parameters, or `None` when the driver cannot say.
fn param_sizes(f: sys::CUfunction) -> Option<Vec<usize>> {
    let mut sizes = Vec::new();
    loop {
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: a function of a loaded module; valid out-pointers.
        let r = unsafe { sys::cuFuncGetParamInfo(f, sizes.len(), &mut offset, &mut size) };
        match r {
            sys::CUresult::CUDA_SUCCESS => sizes.push(size),
            // Past the last parameter.
            sys::CUresult::CUDA_ERROR_INVALID_VALUE => return Some(sizes),
            _ => return None,
        }
    }
}

/// The driver functions this module calls (directly or through `cudarc`), checked at
/// [`CudaDevice::new`]: `cudarc` panics on a symbol missing from an old driver.
const SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDeviceGet",
    "cuDeviceGetCount",
    "cuDeviceGetName",
    "cuDeviceGetAttribute",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuStreamBeginCapture_v2",
    "cuStreamEndCapture",
    "cuMemAlloc_v2",
    "cuMemAllocAsync",
    "cuMemFree_v2",
    "cuMemFreeAsync",
    "cuMemsetD8Async",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuModuleLoadDataEx",
    "cuModuleGetFunction",
    "cuModuleUnload",
    "cuLaunchKernel",
    "cuFuncGetParamInfo",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventSynchronize",
    "cuEventDestroy_v2",
    "cuStreamWaitEvent",
    "cuPointerGetAttribute",
    "cuGraphInstantiateWithFlags",
    "cuGraphLaunch",
    "cuGraphDestroy",
    "cuGraphExecDestroy",
    "cuGetErrorName",
    "cuGetErrorString",
];

/// Checks that the driver library is there and has every function used, without panicking.
fn probe_driver() -> Result<(), DeviceError> {
    // SAFETY: probing only.
    if !unsafe { sys::is_culib_present() } {
        return Err(DeviceError(format!(
            "no CUDA driver (libcuda.so) found: searched for {} on the library search path; \
             a machine with an NVIDIA GPU and its driver is needed",
            {
                let mut names = cudarc::get_lib_name_candidates("cuda");
                let mut seen = std::collections::HashSet::new();
                names.retain(|n| seen.insert(n.clone()));
                names.join(", ")
            }
        )));
    }
    let lib = std::panic::catch_unwind(|| unsafe { sys::culib() })
        .map_err(|_| DeviceError("the CUDA driver (libcuda.so) could not be loaded".into()))?;
    let missing: Vec<&str> = SYMBOLS
        .iter()
        .copied()
        // SAFETY: only looking symbols up.
        .filter(|s| unsafe { lib.get::<unsafe extern "C" fn()>(s.as_bytes()) }.is_err())
        .collect();
    if !missing.is_empty() {
        return Err(DeviceError(format!(
            "the CUDA driver is too old (it lacks {}); CUDA 13.0 or newer is needed",
            missing.join(", ")
        )));
    }
    Ok(())
}

impl CudaDevice {
    /// The number of CUDA devices; `Err` when there is no driver or it fails to start.
    pub fn count() -> Result<usize, DeviceError> {
        probe_driver()?;
        let n =
            CudaContext::device_count().map_err(|e| driver_error("counting CUDA devices", e))?;
        Ok(n.max(0) as usize)
    }

    /// Opens device `ordinal`: retains its primary context, disables `cudarc`'s event
    /// tracking and makes the program's stream. Without a driver, a clear error.
    pub fn new(ordinal: usize) -> Result<CudaDevice, DeviceError> {
        probe_driver()?;
        let ctx = CudaContext::new(ordinal)
            .map_err(|e| driver_error(format_args!("opening CUDA device {ordinal}"), e))?;
        // SAFETY: one stream; the device orders everything on it itself.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx
            .new_stream()
            .map_err(|e| driver_error("creating a stream", e))?;
        let name = ctx
            .name()
            .map_err(|e| driver_error("reading the device name", e))?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| driver_error("reading the compute capability", e))?;
        Ok(CudaDevice {
            async_alloc: ctx.has_async_alloc(),
            ctx,
            stream,
            name,
            arch: (major.max(0) as u32, minor.max(0) as u32),
            modules: Vec::new(),
            kernels: Vec::new(),
            allocations: HashMap::new(),
            graphs: Vec::new(),
            graph_fns: Vec::new(),
            capture_fns: Vec::new(),
            staging: StagingPool::default(),
            capturing: false,
            deferred_frees: Vec::new(),
            slots: Vec::new(),
            mirrors: HashMap::new(),
            retired: Vec::new(),
            params: Vec::new(),
            launches: 0,
            copies: 0,
            replays: 0,
            syncs: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The device's context (for code that needs more of `cudarc`).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    fn bind(&self) -> Result<(), DeviceError> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| driver_error("binding the CUDA context", e))
    }

    fn not_while_capturing(&self, what: &str) -> Result<(), DeviceError> {
        if self.capturing {
            return Err(DeviceError(format!(
                "{what} is not allowed while capturing a CUDA graph"
            )));
        }
        Ok(())
    }

    fn cu_stream(&self) -> sys::CUstream {
        self.stream.cu_stream()
    }

    fn free_now(&mut self, p: DevPtr) {
        match self.allocations.remove(&p) {
            // SAFETY: allocated by cuMemAllocAsync on this stream, freed once.
            Some((_, true)) => self
                .ctx
                .record_err(unsafe { cu::free_async(p, self.cu_stream()) }),
            Some((_, false)) => {
                // SAFETY: this stream is the only user; wait for it, then free once.
                self.ctx
                    .record_err(unsafe { cu::stream::synchronize(self.cu_stream()) });
                self.ctx.record_err(unsafe { cu::free_sync(p) });
            }
            None => self
                .ctx
                .record_err::<()>(Err(DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE))),
        }
    }
}

/// A `cudarc` event recorded on the stream.
struct DriverEvent(CudaEvent);

impl EventImpl for DriverEvent {
    fn wait(&self) -> Result<(), DeviceError> {
        self.0
            .synchronize()
            .map_err(|e| driver_error("waiting for an event", e))
    }
    fn query(&self) -> Result<bool, DeviceError> {
        self.0
            .try_is_complete()
            .map_err(|e| driver_error("querying an event", e))
    }
}

/// The ELF magic of a CUBIN, and a fat binary's.
const ELF_MAGIC: &[u8] = b"\x7fELF";
const FATBIN_MAGIC: [u8; 4] = 0xBA55_ED50u32.to_le_bytes();

impl CudaDevice {
    /// Makes stream `waiter` wait for the work enqueued so far on stream `first`, through
    /// an event (`handle`: the other library's stream, for messages).
    fn order(
        &mut self,
        first: sys::CUstream,
        waiter: sys::CUstream,
        handle: u64,
    ) -> Result<(), DeviceError> {
        self.bind()?;
        let check = |r: sys::CUresult, what: &str| {
            r.result()
                .map_err(|e| driver_error(format_args!("{what} (stream {handle:#x})"), e))
        };
        let mut ev: sys::CUevent = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; the context is bound.
        check(
            unsafe {
                sys::cuEventCreate(
                    &mut ev,
                    sys::CUevent_flags_enum::CU_EVENT_DISABLE_TIMING as u32,
                )
            },
            "creating an event",
        )?;
        // SAFETY: `ev` was just made; the other library's stream handle is the caller's
        // (an invalid one is an error the driver returns).
        let ordered = check(
            unsafe { sys::cuEventRecord(ev, first) },
            "recording an event",
        )
        .and_then(|()| {
            // SAFETY: both handles are valid.
            check(
                unsafe { sys::cuStreamWaitEvent(waiter, ev, 0) },
                "ordering two streams",
            )
        });
        // SAFETY: destroying an event whose wait is enqueued is allowed (the driver
        // releases it once the wait is done).
        let destroyed = check(unsafe { sys::cuEventDestroy_v2(ev) }, "destroying an event");
        ordered.and(destroyed)
    }
}

impl Device for CudaDevice {
    fn name(&self) -> String {
        format!("{} (sm_{}{})", self.name, self.arch.0, self.arch.1)
    }

    fn arch(&self) -> (u32, u32) {
        self.arch
    }

    fn load_module(
        &mut self,
        image: &[u8],
        kernels: &[String],
    ) -> Result<Vec<KernelId>, DeviceError> {
        self.not_while_capturing("loading a module")?;
        self.bind()?;
        if image.is_empty() {
            return Err(DeviceError("cannot load an empty module image".into()));
        }
        let binary = image.starts_with(ELF_MAGIC) || image.starts_with(&FATBIN_MAGIC);
        let mut owned;
        let data: &[u8] = if binary || image.last() == Some(&0) {
            image
        } else {
            // PTX text must end in a NUL.
            owned = Vec::with_capacity(image.len() + 1);
            owned.extend_from_slice(image);
            owned.push(0);
            &owned
        };
        let mut log = vec![0u8; 16 << 10];
        let mut options = [
            sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
            sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        ];
        let mut values = [log.as_mut_ptr() as *mut c_void, log.len() as *mut c_void];
        let mut module = std::ptr::null_mut();
        // SAFETY: `data` is a CUBIN, fat binary or NUL-terminated PTX alive for the call;
        // the options' values are a buffer and its size.
        let r = unsafe {
            sys::cuModuleLoadDataEx(
                &mut module,
                data.as_ptr() as *const c_void,
                options.len() as u32,
                options.as_mut_ptr(),
                values.as_mut_ptr(),
            )
        };
        if let Err(e) = r.result() {
            let kind = if binary { "CUBIN" } else { "PTX" };
            let mut err = driver_error(format_args!("loading a {kind} module"), e);
            let log_end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let log = String::from_utf8_lossy(&log[..log_end]);
            if !log.trim().is_empty() {
                err.0.push_str(&format!(":\n{}", log.trim_end()));
            }
            let arch = format!("sm_{}{}", self.arch.0, self.arch.1);
            match e.0 {
                sys::CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION => err.0.push_str(&format!(
                    "\nthe PTX comes from an NVRTC newer than this driver: compile a CUBIN \
                     for {arch}, or use the NVRTC of the driver's CUDA version"
                )),
                sys::CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU => err.0.push_str(&format!(
                    "\nthe image holds no code for this device ({arch})"
                )),
                _ => {}
            }
            return Err(err);
        }
        let first = self.kernels.len();
        for name in kernels {
            let found = CString::new(name.as_str())
                .map_err(|_| DeviceError(format!("kernel name {name:?} contains a NUL byte")))
                // SAFETY: a module just loaded.
                .and_then(|c| {
                    unsafe { cu::module::get_function(module, c) }.map_err(|e| {
                        driver_error(format_args!("kernel `{name}` is not in the module"), e)
                    })
                });
            match found {
                Ok(f) => self.kernels.push(Kernel {
                    f,
                    name: name.clone(),
                    params: param_sizes(f),
                }),
                Err(err) => {
                    self.kernels.truncate(first);
                    // SAFETY: loaded above, no function of it kept.
                    let _ = unsafe { cu::module::unload(module) };
                    return Err(err);
                }
            }
        }
        self.modules.push(module);
        Ok((first..self.kernels.len()).map(KernelId).collect())
    }

    fn alloc_zeroed(&mut self, bytes: usize) -> Result<DevPtr, DeviceError> {
        self.not_while_capturing("allocating device memory")?;
        self.bind()?;
        let n = bytes.max(1);
        let stream = self.cu_stream();
        // SAFETY: plain allocations; the memset is ordered before any later work on the
        // stream, which is the only one using the memory.
        let p = unsafe {
            if self.async_alloc {
                cu::malloc_async(stream, n)
            } else {
                cu::malloc_sync(n)
            }
        }
        .map_err(|e| driver_error(format_args!("allocating {bytes} bytes on the device"), e))?;
        self.allocations.insert(p, (n, self.async_alloc));
        // SAFETY: just allocated, `n` bytes.
        if let Err(e) = unsafe { cu::memset_d8_async(p, 0, n, stream) } {
            self.free_now(p);
            return Err(driver_error("zeroing a new allocation", e));
        }
        Ok(p)
    }

    fn free(&mut self, p: DevPtr) {
        if let Some(m) = self.mirrors.remove(&p) {
            self.retired.push(m);
        }
        if self.capturing {
            self.deferred_frees.push(p);
            return;
        }
        if self.bind().is_ok() {
            self.free_now(p);
        }
    }

    fn launch(
        &mut self,
        k: KernelId,
        grid: [u32; 3],
        block: [u32; 3],
        args: &[KernelArg],
    ) -> Result<(), DeviceError> {
        let kernel = self
            .kernels
            .get(k.0)
            .ok_or_else(|| DeviceError(format!("no kernel {}", k.0)))?;
        let f = kernel.f;
        if let Some(params) = &kernel.params {
            check_args(&kernel.name, params, args)?;
        }
        self.bind()?;
        arg_slots(args, &mut self.slots);
        self.params.clear();
        let base = self.slots.as_mut_ptr();
        // SAFETY: `i < slots.len()`; the pointers are only used by cuLaunchKernel below,
        // which copies the values before returning.
        self.params
            .extend((0..self.slots.len()).map(|i| unsafe { base.add(i) } as *mut c_void));
        // SAFETY: a function of a loaded module; one parameter pointer per kernel
        // parameter, each to a slot of the parameter's size or more.
        let r = unsafe {
            sys::cuLaunchKernel(
                f,
                grid[0],
                grid[1],
                grid[2],
                block[0],
                block[1],
                block[2],
                0,
                self.cu_stream(),
                self.params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        self.params.clear();
        r.result().map_err(|e| {
            driver_error(
                format_args!(
                    "launching {} (grid {grid:?}, block {block:?})",
                    self.kernels[k.0].name
                ),
                e,
            )
        })?;
        self.launches += 1;
        Ok(())
    }

    fn copy_h2d(&mut self, dst: DevPtr, src: &[u8]) -> Result<(), DeviceError> {
        self.not_while_capturing(
            "a host-to-device copy (a graph would read the host buffer at replay time)",
        )?;
        self.bind()?;
        if src.is_empty() {
            return Ok(());
        }
        let stream = self.cu_stream();
        // SAFETY: context bound, live stream; `dst` is the caller's device range.
        let staged =
            src.len() <= staging::MAX_COPY && unsafe { self.staging.copy_h2d(dst, src, stream) }?;
        if !staged {
            // SAFETY: from pageable memory the driver copies `src` out before returning.
            unsafe { cu::memcpy_htod_async(dst, src, stream) }.map_err(|e| {
                driver_error(format_args!("copying {} bytes to the device", src.len()), e)
            })?;
        }
        self.copies += 1;
        Ok(())
    }

    fn copy_d2h_sync(&mut self, dst: &mut [u8], src: DevPtr) -> Result<(), DeviceError> {
        self.not_while_capturing("a device-to-host copy")?;
        self.bind()?;
        let stream = self.cu_stream();
        let len = dst.len();
        // SAFETY: `dst` stays borrowed until the stream is synchronized below.
        unsafe {
            if len > 0 {
                cu::memcpy_dtoh_async(dst, src, stream).map_err(|e| {
                    driver_error(format_args!("copying {len} bytes to the host"), e)
                })?;
            }
            cu::stream::synchronize(stream)
        }
        .map_err(|e| driver_error("waiting for a copy to the host", e))?;
        self.copies += 1;
        self.syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn mirror(&mut self, src: DevPtr, bytes: usize) -> Result<(), DeviceError> {
        check_mirror(bytes, self.capturing, self.mirrors.contains_key(&src))?;
        self.bind()?;
        let host = match self.mirrors.get(&src) {
            Some(&p) => p,
            None => {
                // SAFETY: a plain pinned allocation, zeroed before it is shared.
                let p = unsafe { cu::malloc_host(MIRROR_BYTES, 0) }
                    .map_err(|e| driver_error("allocating a pinned mirror", e))?
                    as *mut u8;
                // SAFETY: just allocated, MIRROR_BYTES bytes.
                unsafe { std::ptr::write_bytes(p, 0, MIRROR_BYTES) };
                self.mirrors.insert(src, p);
                p
            }
        };
        if bytes == 0 {
            return Ok(());
        }
        let stream = self.cu_stream();
        // SAFETY: `host` is a live pinned buffer of MIRROR_BYTES >= bytes (freed only when
        // the device is dropped, after the stream is synchronized); `src` is the caller's
        // device range. Readers read it with volatile loads only.
        unsafe {
            let dst = std::slice::from_raw_parts_mut(host, bytes);
            cu::memcpy_dtoh_async(dst, src, stream)
        }
        .map_err(|e| driver_error(format_args!("mirroring {bytes} bytes"), e))?;
        Ok(())
    }

    fn read_mirror(&mut self, src: DevPtr, dst: &mut [u8]) {
        dst.fill(0);
        if let Some(&p) = self.mirrors.get(&src) {
            for (i, b) in dst.iter_mut().take(MIRROR_BYTES).enumerate() {
                // SAFETY: a live pinned buffer of MIRROR_BYTES; a DMA may be writing it,
                // hence the volatile loads (the value may be torn, as documented).
                *b = unsafe { std::ptr::read_volatile(p.add(i)) };
            }
        }
    }

    fn copy_d2d(&mut self, dst: DevPtr, src: DevPtr, bytes: usize) -> Result<(), DeviceError> {
        self.bind()?;
        if bytes > 0 {
            // SAFETY: device pointers given by the caller; ordered on the stream.
            unsafe { cu::memcpy_dtod_async(dst, src, bytes, self.cu_stream()) }.map_err(|e| {
                driver_error(format_args!("copying {bytes} bytes on the device"), e)
            })?;
        }
        self.copies += 1;
        Ok(())
    }

    fn memset_zero(&mut self, dst: DevPtr, bytes: usize) -> Result<(), DeviceError> {
        self.bind()?;
        if bytes > 0 {
            // SAFETY: a device range given by the caller; ordered on the stream.
            unsafe { cu::memset_d8_async(dst, 0, bytes, self.cu_stream()) }
                .map_err(|e| driver_error(format_args!("zeroing {bytes} bytes"), e))?;
        }
        Ok(())
    }

    fn record_event(&mut self) -> Result<Event, DeviceError> {
        self.not_while_capturing("recording an event")?;
        self.bind()?;
        let event = self
            .ctx
            .new_event(None)
            .map_err(|e| driver_error("creating an event", e))?;
        event
            .record(&self.stream)
            .map_err(|e| driver_error("recording an event", e))?;
        Ok(Event::new(Box::new(DriverEvent(event)), self.syncs.clone()))
    }

    fn synchronize(&mut self) -> Result<(), DeviceError> {
        self.not_while_capturing("synchronizing")?;
        self.bind()?;
        self.syncs.fetch_add(1, Ordering::Relaxed);
        // SAFETY: this device's live stream.
        unsafe { cu::stream::synchronize(self.cu_stream()) }
            .map_err(|e| driver_error("synchronizing the stream", e))
    }

    fn begin_capture(&mut self) -> Result<(), DeviceError> {
        self.not_while_capturing("beginning a capture")?;
        self.bind()?;
        // Relaxed: the device may move between threads, and other threads' work (other
        // programs allocating, compiling) must not break the capture. The device itself
        // refuses what cannot be captured.
        // SAFETY: this device's live stream.
        unsafe {
            cu::stream::begin_capture(
                self.cu_stream(),
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
            )
        }
        .map_err(|e| driver_error("beginning a graph capture", e))?;
        self.capturing = true;
        Ok(())
    }

    fn end_capture(&mut self) -> Result<GraphId, DeviceError> {
        if !self.capturing {
            return Err(DeviceError("end_capture without begin_capture".into()));
        }
        self.bind()?;
        self.capturing = false;
        // SAFETY: this device's live stream, capturing.
        let ended = unsafe { cu::stream::end_capture(self.cu_stream()) };
        for p in std::mem::take(&mut self.deferred_frees) {
            self.free_now(p);
        }
        let graph = ended.map_err(|e| driver_error("ending a graph capture", e))?;
        if graph.is_null() {
            return Err(DeviceError(
                "the graph capture was invalidated by an operation that cannot be captured".into(),
            ));
        }
        // SAFETY: a graph just captured.
        let exec = match unsafe { cu::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) }
        {
            Ok(exec) => exec,
            Err(e) => {
                // SAFETY: not instantiated, not kept.
                let _ = unsafe { cu::graph::destroy(graph) };
                return Err(driver_error("instantiating a captured graph", e));
            }
        };
        self.graphs.push((graph, exec));
        self.graph_fns.append(&mut self.capture_fns);
        Ok(GraphId(self.graphs.len() - 1))
    }

    fn replay(&mut self, g: GraphId) -> Result<(), DeviceError> {
        self.not_while_capturing("replaying a graph")?;
        let (_, exec) = *self
            .graphs
            .get(g.0)
            .ok_or_else(|| DeviceError(format!("no graph {}", g.0)))?;
        self.bind()?;
        // SAFETY: an instantiated graph of this context; this device's stream.
        unsafe { cu::graph::launch(exec, self.cu_stream()) }
            .map_err(|e| driver_error(format_args!("replaying graph {}", g.0), e))?;
        self.replays += 1;
        Ok(())
    }

    fn wait_for_stream(&mut self, stream: u64) -> Result<(), DeviceError> {
        self.not_while_capturing("waiting for another stream")?;
        let theirs = stream as usize as sys::CUstream;
        self.order(theirs, self.cu_stream(), stream)
    }

    fn signal_stream(&mut self, stream: u64) -> Result<(), DeviceError> {
        self.not_while_capturing("signalling another stream")?;
        let theirs = stream as usize as sys::CUstream;
        self.order(self.cu_stream(), theirs, stream)
    }

    fn alloc_host(&mut self, bytes: usize) -> Result<*mut u8, DeviceError> {
        self.not_while_capturing("a pinned host allocation")?;
        self.bind()?;
        // SAFETY: a plain pinned allocation, zeroed before it is handed out.
        let p = unsafe { cu::malloc_host(bytes.max(1), 0) }.map_err(|e| {
            driver_error(
                format_args!("allocating {bytes} bytes of pinned host memory"),
                e,
            )
        })? as *mut u8;
        // SAFETY: just allocated, at least `bytes` bytes.
        unsafe { std::ptr::write_bytes(p, 0, bytes.max(1)) };
        Ok(p)
    }

    fn free_host(&mut self, p: *mut u8, _bytes: usize) {
        if p.is_null() || self.bind().is_err() {
            return;
        }
        // SAFETY: the stream is drained first (a copy may still use `p`), then `p`,
        // allocated by `alloc_host`, is freed once.
        unsafe {
            let _ = cu::stream::synchronize(self.cu_stream());
            let _ = cu::free_host(p as *mut c_void);
        }
    }

    unsafe fn copy_d2h_async(
        &mut self,
        dst: *mut u8,
        src: DevPtr,
        bytes: usize,
    ) -> Result<(), DeviceError> {
        self.bind()?;
        if bytes > 0 {
            // SAFETY: pinned `dst` of `bytes` bytes, left alone by the host until the
            // copy is done (the caller's promise); `src` is the caller's device range.
            // Captured, the graph copies at each replay.
            unsafe {
                let dst = std::slice::from_raw_parts_mut(dst, bytes);
                cu::memcpy_dtoh_async(dst, src, self.cu_stream())
            }
            .map_err(|e| driver_error(format_args!("copying {bytes} bytes to the host"), e))?;
        }
        self.copies += 1;
        Ok(())
    }

    unsafe fn copy_h2d_async(
        &mut self,
        dst: DevPtr,
        src: *const u8,
        bytes: usize,
    ) -> Result<(), DeviceError> {
        self.bind()?;
        if bytes > 0 {
            // SAFETY: pinned `src` of `bytes` bytes, not written by the host until the
            // copy is done (the caller's promise). Captured, the graph copies at each
            // replay.
            unsafe {
                let src = std::slice::from_raw_parts(src, bytes);
                cu::memcpy_htod_async(dst, src, self.cu_stream())
            }
            .map_err(|e| driver_error(format_args!("copying {bytes} bytes to the device"), e))?;
        }
        self.copies += 1;
        Ok(())
    }

    fn host_fn(&mut self, f: HostFn) -> Result<(), DeviceError> {
        self.bind()?;
        /// Runs the function the driver passes back and frees it (a host function
        /// enqueued outside a capture runs once), keeping a panic from unwinding into the
        /// driver.
        unsafe extern "C" fn once(data: *mut c_void) {
            // SAFETY: `data` is the `Box<HostFn>` leaked below, taken back once.
            let f = unsafe { Box::from_raw(data as *mut HostFn) };
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(&**f));
        }
        /// Runs a captured graph's host function at a replay (the graph keeps it).
        unsafe extern "C" fn kept(data: *mut c_void) {
            // SAFETY: `data` is a `Box<HostFn>` freed only with the device's graphs,
            // after the stream is drained.
            let f = unsafe { &*(data as *const HostFn) };
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(&**f));
        }
        let data = Box::into_raw(Box::new(f));
        let run: unsafe extern "C" fn(*mut c_void) = if self.capturing { kept } else { once };
        // SAFETY: context bound, live stream; the driver calls `run(data)` once, or at
        // each replay of the graph being captured.
        let rc = unsafe { sys::cuLaunchHostFunc(self.cu_stream(), Some(run), data as *mut c_void) };
        if let Err(e) = rc.result() {
            // SAFETY: not enqueued: taken back, dropped without running.
            drop(unsafe { Box::from_raw(data) });
            return Err(driver_error("enqueueing a host function", e));
        }
        if self.capturing {
            self.capture_fns.push(data);
        }
        Ok(())
    }

    fn check_memory(&mut self, p: DevPtr, bytes: usize) -> Result<(), DeviceError> {
        self.bind()?;
        // Both attributes in one driver call (a call passes every array through here).
        let mut kind: u32 = 0;
        let mut ordinal: i32 = -1;
        let mut attributes = [
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        ];
        let mut data: [*mut std::ffi::c_void; 2] = [
            (&mut kind as *mut u32).cast(),
            (&mut ordinal as *mut i32).cast(),
        ];
        // SAFETY: two attributes, each with a valid out-pointer of its type
        // (`CUmemorytype`: 32 bits; the ordinal: `int`). For an address CUDA does not
        // know, the driver leaves the memory type 0 and succeeds.
        let r = unsafe {
            sys::cuPointerGetAttributes(2, attributes.as_mut_ptr(), data.as_mut_ptr(), p)
        };
        r.result()
            .map_err(|e| driver_error(format_args!("asking what memory {p:#x} is"), e))?;
        if kind == 0 {
            return Err(DeviceError(format!(
                "{p:#x} is not CUDA memory (a host array? pass a device array, e.g. CuPy's)"
            )));
        }
        if kind != sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32
            && kind != sys::CUmemorytype::CU_MEMORYTYPE_UNIFIED as u32
        {
            return Err(DeviceError(format!(
                "{p:#x} is host memory registered with CUDA; pass a device array"
            )));
        }
        if ordinal as usize != self.ctx.ordinal() {
            return Err(DeviceError(format!(
                "{p:#x} (+{bytes} bytes) is on CUDA device {ordinal}, the program on device {}",
                self.ctx.ordinal()
            )));
        }
        Ok(())
    }

    fn counters(&self) -> Counters {
        Counters {
            launches: self.launches,
            copies: self.copies,
            syncs: self.syncs.load(Ordering::Relaxed),
            replays: self.replays,
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_err() {
            // The context is broken; its resources go with it when it is released.
            return;
        }
        let stream = self.cu_stream();
        // SAFETY: every handle below belongs to this device and is released once, after
        // the stream has finished with it.
        unsafe {
            if self.capturing {
                if let Ok(g) = cu::stream::end_capture(stream)
                    && !g.is_null()
                {
                    let _ = cu::graph::destroy(g);
                }
                self.capturing = false;
            }
            let _ = cu::stream::synchronize(stream);
            for (graph, exec) in self.graphs.drain(..) {
                let _ = cu::graph::exec_destroy(exec);
                let _ = cu::graph::destroy(graph);
            }
            for f in self.graph_fns.drain(..).chain(self.capture_fns.drain(..)) {
                drop(Box::from_raw(f));
            }
            for p in self
                .mirrors
                .drain()
                .map(|(_, p)| p)
                .chain(self.retired.drain(..))
            {
                let _ = cu::free_host(p as *mut c_void);
            }
            for (p, (_, asynchronous)) in self.allocations.drain() {
                let _ = if asynchronous {
                    cu::free_async(p, stream)
                } else {
                    cu::free_sync(p)
                };
            }
            let _ = cu::stream::synchronize(stream);
            self.staging.release();
            for m in self.modules.drain(..) {
                let _ = cu::module::unload(m);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without a driver (as on machines without a GPU), opening a device is an error,
    /// never a panic; with one, it opens and round-trips data.
    #[test]
    fn no_panic_without_a_driver() {
        match CudaDevice::new(0) {
            Err(e) => {
                // SAFETY: probing only.
                if !unsafe { sys::is_culib_present() } {
                    assert!(e.0.contains("no CUDA driver (libcuda.so) found"), "{e}");
                    assert!(CudaDevice::count().is_err());
                }
            }
            Ok(mut dev) => {
                let p = dev.alloc_zeroed(64).unwrap();
                let data: Vec<u8> = (0..64).collect();
                dev.copy_h2d(p, &data).unwrap();
                let mut out = vec![0u8; 64];
                dev.copy_d2h_sync(&mut out, p).unwrap();
                assert_eq!(out, data);
                dev.free(p);
            }
        }
    }
}
