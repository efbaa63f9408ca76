//! [`EmulatedDevice`]: a [`Device`] that runs the generated CUDA on the host.
//!
//! The CUDA text NVRTC would receive is compiled as C++ by the system compiler into a
//! shared library ([`build_library`], through the build cache like the C backend, by
//! `CudaBackend` before it takes the device, so builds run in parallel), after a
//! compatibility prelude ([`PRELUDE`]: the
//! CUDA qualifiers as nothing, `blockIdx`/`threadIdx`/`blockDim`/`gridDim` as
//! thread-local variables, `atomicCAS`/`atomicExch` as the compiler's atomics, the bit
//! casts, a host clock for `%globaltimer`) and before one host entry point per kernel
//! ([`entry_points`]); the device loads that library as a GPU loads a CUBIN. A launch runs every block and every thread of its grid: the
//! blocks are spread over the host's threads (OpenMP), the threads of a block run one
//! after the other, so the compare-and-swap loops of conflict-resolved writes meet real
//! concurrency. Device memory is host memory; the stream runs each operation when it is
//! enqueued (which keeps stream order), so events are complete when recorded; a
//! captured graph keeps its launches, copies and memsets and a replay runs them again
//! with the arguments captured (float symbols are read from the program's buffer, as on
//! the GPU).
//!
//! Not emulated: timing, warp-level and shared-memory semantics (the printer uses
//! neither), the driver's own behaviour (CUBIN loading, capture rules beyond the ones
//! checked here, stream priorities), and memory protection: a kernel that indexes
//! outside its arrays reads or writes the host process's memory.
//!
//! Why one file of this size: the emulated device implements every `Device` operation
//! for host memory, with the compatibility prelude that lets the CUDA text compile for
//! the host.

use super::{
    Counters, DevPtr, Device, DeviceError, DoneEvent, Event, GraphId, HostFn, HostMirrors,
    KernelArg, KernelId, arg_slots, check_args, check_mirror,
};
use crate::CodegenError;
use crate::cache::{Artifact, Cache, Origin};
use crate::compile::{CompilerOptions, scratch_dir};
use std::alloc::Layout;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The value of `SDFLOW_CUDA_DEVICE` that selects this device.
pub const EMULATED: &str = "emulated";

/// What the CUDA text needs on the host, placed before it. System headers come first,
/// then the fixed-width type names the CUDA prelude defines itself are renamed, so that
/// its `typedef long long int64_t;` does not clash with the C library's.
pub const PRELUDE: &str = r#"/* sdflow: the CUDA text below, compiled for the host (emulated device). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <utility>
#include <type_traits>
#ifdef INT32_MIN
#undef INT32_MIN
#undef INT32_MAX
#undef INT64_MIN
#undef INT64_MAX
#endif
#define int8_t sdf_emu_int8_t
#define int32_t sdf_emu_int32_t
#define int64_t sdf_emu_int64_t
#define uint32_t sdf_emu_uint32_t
#define uint64_t sdf_emu_uint64_t
#define __global__
#define __device__
#define __launch_bounds__(...)
#define __forceinline__ inline
struct sdf_emu_dim3 { unsigned int x, y, z; };
static thread_local sdf_emu_dim3 threadIdx, blockIdx, blockDim, gridDim;
static inline unsigned long long atomicCAS(unsigned long long* a, unsigned long long c, unsigned long long v) {
    __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); return c; }
static inline unsigned int atomicCAS(unsigned int* a, unsigned int c, unsigned int v) {
    __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); return c; }
static inline int atomicExch(int* a, int v) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); }
static inline double __longlong_as_double(long long x) { double d; memcpy(&d, &x, sizeof d); return d; }
static inline long long __double_as_longlong(double x) { long long d; memcpy(&d, &x, sizeof d); return d; }
static inline float __int_as_float(int x) { float d; memcpy(&d, &x, sizeof d); return d; }
static inline int __float_as_int(float x) { int d; memcpy(&d, &x, sizeof d); return d; }
static inline long long sdf_emu_wall_ns(void) {
    struct timespec ts; clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + (long long)ts.tv_nsec; }
"#;

/// The host entry points of `kernels` (defined in the CUDA text): `sdf_emu_k_<name>`
/// calls the kernel with its arguments from an array of pointers to 8-byte slots (the
/// driver's layout), `sdf_emu_n_<name>`/`sdf_emu_s_<name>` give its parameter count and
/// sizes; `sdf_emu_launch` runs an entry point over a grid.
pub fn entry_points(kernels: &[String]) -> String {
    let mut out = String::from(
        r#"
/* sdflow emulation: one host entry point per kernel, and the launcher. */
template <typename F> struct sdf_emu_sig;
template <typename... A> struct sdf_emu_sig<void(A...)> {
    static constexpr int n = (int)sizeof...(A);
    static constexpr int sizes[sizeof...(A) + 1] = {(int)sizeof(A)..., 0};
    template <size_t... I> static void apply(void (*f)(A...), void* const* a, std::index_sequence<I...>) {
        f(*static_cast<typename std::remove_cv<A>::type*>(a[I])...); }
    static void call(void (*f)(A...), void* const* a) { apply(f, a, std::index_sequence_for<A...>{}); }
};
typedef void (*sdf_emu_entry)(void* const*);
/* rev: the blocks of the grid and the threads of each block in reverse order (a kernel
   whose threads depend on one another's writes then gives other results, as it may on a
   GPU). */
extern "C" void sdf_emu_launch(sdf_emu_entry f, void* const* a, unsigned gx, unsigned gy, unsigned gz,
                               unsigned bx, unsigned by, unsigned bz, int threads, int rev) {
    const long long nb = (long long)gx * gy * gz;
    #pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (long long i = 0; i < nb; i++) {
        const long long b = rev ? nb - 1 - i : i;
        gridDim = sdf_emu_dim3{gx, gy, gz}; blockDim = sdf_emu_dim3{bx, by, bz};
        blockIdx = sdf_emu_dim3{(unsigned)(b % gx), (unsigned)(b / gx % gy), (unsigned)(b / ((long long)gx * gy))};
        for (unsigned zi = 0; zi < bz; zi++)
            for (unsigned yi = 0; yi < by; yi++)
                for (unsigned xi = 0; xi < bx; xi++) {
                    threadIdx = rev ? sdf_emu_dim3{bx - 1 - xi, by - 1 - yi, bz - 1 - zi} : sdf_emu_dim3{xi, yi, zi};
                    f(a);
                }
    }
}
"#,
    );
    for k in kernels {
        out.push_str(&format!(
            "extern \"C\" void sdf_emu_k_{k}(void* const* a) {{ sdf_emu_sig<decltype({k})>::call({k}, a); }}\n\
             extern \"C\" int sdf_emu_n_{k}(void) {{ return sdf_emu_sig<decltype({k})>::n; }}\n\
             extern \"C\" const int* sdf_emu_s_{k}(void) {{ return sdf_emu_sig<decltype({k})>::sizes; }}\n"
        ));
    }
    out
}

/// The C++ translation unit the emulated device compiles for `cuda` and `kernels`.
pub fn translation_unit(cuda: &str, kernels: &[String]) -> String {
    format!("{PRELUDE}{cuda}\n{}", entry_points(kernels))
}

/// How the emulated device compiles: `$SDFLOW_CXX` (else `c++`), the C backend's flags
/// that keep the arithmetic the interpreter's, as C++17, with `SDFLOW_EMULATED` defined.
pub fn compiler() -> CompilerOptions {
    // The kernels are only run, not timed: build time matters more.
    let mut opts = CompilerOptions {
        cc: std::env::var("SDFLOW_CXX").unwrap_or_else(|_| "c++".to_string()),
        ..CompilerOptions::default()
    }
    .at_level("-O1");
    for f in &mut opts.flags {
        if f == "-std=c11" {
            *f = "-std=c++17".into();
        }
    }
    opts.flags.push("-DSDFLOW_EMULATED".into());
    opts.flags.push("-w".into());
    opts
}

const LIBRARY: Artifact = Artifact {
    source: "program.cpp",
    output: "libprogram.emu.so",
};

type Entry = unsafe extern "C" fn(*const *mut c_void);
type Launcher =
    unsafe extern "C" fn(Entry, *const *mut c_void, u32, u32, u32, u32, u32, u32, i32, i32);

/// A kernel of a loaded module: its entry point and parameter sizes.
struct Kernel {
    name: String,
    entry: Entry,
    launch: Launcher,
    params: Vec<usize>,
}

/// One operation a graph keeps.
#[derive(Clone)]
enum Op {
    Launch {
        k: KernelId,
        grid: [u32; 3],
        block: [u32; 3],
        args: Vec<KernelArg>,
    },
    CopyD2D {
        dst: DevPtr,
        src: DevPtr,
        bytes: usize,
    },
    Memset {
        dst: DevPtr,
        bytes: usize,
    },
    Mirror {
        src: DevPtr,
        bytes: usize,
    },
    /// A copy to host memory (its address).
    ToHost {
        dst: usize,
        src: DevPtr,
        bytes: usize,
    },
    /// A copy from host memory (its address).
    FromHost {
        dst: DevPtr,
        src: usize,
        bytes: usize,
    },
    HostFn(HostFn),
}

/// The emulated device. See the module documentation.
pub struct EmulatedDevice {
    threads: i32,
    reverse: bool,
    libraries: Vec<libloading::Library>,
    kernels: Vec<Kernel>,
    memory: BTreeMap<DevPtr, Layout>,
    capture: Option<Vec<Op>>,
    graphs: Vec<Vec<Op>>,
    launches: u64,
    copies: u64,
    replays: u64,
    syncs: Arc<AtomicU64>,
    mirrors: HostMirrors,
}

// SAFETY: the loaded libraries and the host memory behind the device pointers are used
// only through `&mut self` (the device handle's lock), as a GPU context is.
unsafe impl Send for EmulatedDevice {}

impl Default for EmulatedDevice {
    fn default() -> Self {
        EmulatedDevice::new()
    }
}

/// Device allocations are aligned as `cuMemAlloc`'s are.
const ALIGN: usize = 256;

impl EmulatedDevice {
    /// An emulated device running launches on every core (`SDFLOW_EMULATED_THREADS`
    /// overrides), in the threads' order unless `SDFLOW_EMULATED_ORDER=reverse`.
    pub fn new() -> EmulatedDevice {
        let threads = std::env::var("SDFLOW_EMULATED_THREADS")
            .ok()
            .and_then(|v| v.parse::<i32>().ok())
            .filter(|&t| t > 0)
            .unwrap_or_else(|| {
                std::thread::available_parallelism().map_or(1, |n| n.get().min(64) as i32)
            });
        let reverse = std::env::var("SDFLOW_EMULATED_ORDER").is_ok_and(|v| v == "reverse");
        EmulatedDevice::with_threads(threads).in_reverse_order(reverse)
    }

    /// An emulated device with `threads` host threads per launch.
    pub fn with_threads(threads: i32) -> EmulatedDevice {
        EmulatedDevice {
            threads: threads.max(1),
            reverse: false,
            libraries: Vec::new(),
            kernels: Vec::new(),
            memory: BTreeMap::new(),
            capture: None,
            graphs: Vec::new(),
            launches: 0,
            copies: 0,
            replays: 0,
            syncs: Arc::new(AtomicU64::new(0)),
            mirrors: HostMirrors::default(),
        }
    }

    /// With `reverse`, every launch runs the blocks of its grid from the last to the
    /// first and the threads of each block from the last to the first: a kernel whose
    /// threads read what other threads of the same launch write (a race on a GPU) then
    /// gives other results than in the threads' order.
    pub fn in_reverse_order(mut self, reverse: bool) -> EmulatedDevice {
        self.reverse = reverse;
        self
    }

    /// The allocation holding `[p, p + bytes)`, or an error naming the range.
    fn check(&self, p: DevPtr, bytes: usize, what: &str) -> Result<(), DeviceError> {
        let not_ours = || {
            DeviceError(format!(
                "{what}: {p:#x} is not memory of the emulated device"
            ))
        };
        let Some((&base, layout)) = self.memory.range(..=p).next_back() else {
            return Err(not_ours());
        };
        let off = (p - base) as usize;
        if off >= layout.size() && !(off == layout.size() && bytes == 0) {
            return Err(not_ours());
        }
        if off > layout.size() || bytes > layout.size() - off {
            return Err(DeviceError(format!(
                "{what}: [{p:#x}, +{bytes}) is outside the allocation at {base:#x} of {} bytes",
                layout.size()
            )));
        }
        Ok(())
    }

    fn run(&mut self, op: &Op) -> Result<(), DeviceError> {
        match op {
            Op::Launch {
                k,
                grid,
                block,
                args,
            } => {
                let kernel = &self.kernels[k.0];
                let mut slots = Vec::new();
                arg_slots(args, &mut slots);
                let ptrs: Vec<*mut c_void> = slots
                    .iter_mut()
                    .map(|s| s as *mut u64 as *mut c_void)
                    .collect();
                // SAFETY: the entry point unpacks exactly `params.len()` slots (checked at
                // enqueue), each 8 bytes holding the argument's native value; the kernel
                // accesses the memory its pointers address, which the caller allocated
                // on this device (host memory).
                unsafe {
                    (kernel.launch)(
                        kernel.entry,
                        ptrs.as_ptr(),
                        grid[0],
                        grid[1],
                        grid[2],
                        block[0],
                        block[1],
                        block[2],
                        self.threads,
                        i32::from(self.reverse),
                    )
                };
                Ok(())
            }
            Op::CopyD2D { dst, src, bytes } => {
                self.check(*dst, *bytes, "device-to-device copy")?;
                self.check(*src, *bytes, "device-to-device copy")?;
                // SAFETY: both ranges lie in live allocations (checked); `copy` allows
                // overlap.
                unsafe { std::ptr::copy(*src as *const u8, *dst as *mut u8, *bytes) };
                Ok(())
            }
            Op::Memset { dst, bytes } => {
                self.check(*dst, *bytes, "memset")?;
                // SAFETY: the range lies in a live allocation (checked).
                unsafe { std::ptr::write_bytes(*dst as *mut u8, 0, *bytes) };
                Ok(())
            }
            Op::ToHost { dst, src, bytes } => {
                self.check(*src, *bytes, "copy to the host")?;
                // SAFETY: the source lies in a live allocation (checked), the destination
                // holds `bytes` (the promise of `copy_d2h_async`'s caller).
                unsafe {
                    std::ptr::copy_nonoverlapping(*src as *const u8, *dst as *mut u8, *bytes)
                };
                Ok(())
            }
            Op::FromHost { dst, src, bytes } => {
                self.check(*dst, *bytes, "copy to the device")?;
                // SAFETY: as above, the other way.
                unsafe {
                    std::ptr::copy_nonoverlapping(*src as *const u8, *dst as *mut u8, *bytes)
                };
                Ok(())
            }
            Op::HostFn(f) => {
                // The work before is done: it ran when enqueued (or replayed).
                f();
                Ok(())
            }
            Op::Mirror { src, bytes } => {
                self.check(*src, *bytes, "mirror")?;
                let mut data = vec![0u8; *bytes];
                // SAFETY: the range lies in a live allocation (checked).
                unsafe {
                    std::ptr::copy_nonoverlapping(*src as *const u8, data.as_mut_ptr(), *bytes)
                };
                self.mirrors.set(*src, data);
                Ok(())
            }
        }
    }

    /// Runs `op` now, or keeps it in the graph being captured.
    fn enqueue(&mut self, op: Op) -> Result<(), DeviceError> {
        match &mut self.capture {
            Some(ops) => {
                ops.push(op);
                Ok(())
            }
            None => self.run(&op),
        }
    }

    fn not_while_capturing(&self, what: &str) -> Result<(), DeviceError> {
        if self.capture.is_some() {
            return Err(DeviceError(format!(
                "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: {what} while the stream is captured"
            )));
        }
        Ok(())
    }

    /// Loads a private copy of the library `image`, so that each module has its own
    /// device globals, as each `cuModuleLoadData` does.
    fn load_private(&mut self, image: &[u8]) -> Result<libloading::Library, DeviceError> {
        if !image.starts_with(b"\x7fELF") {
            return Err(DeviceError(
                "the emulated device loads a host library (`emulated::build_library`), and \
                 this image is not one"
                    .into(),
            ));
        }
        let dir = scratch_dir("emu");
        let private = dir.join("libprogram.emu.so");
        let lib = std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(&private, image))
            .map_err(|e| DeviceError(format!("emulated device: {}: {e}", private.display())))
            .and_then(|()| {
                // SAFETY: the library was built by `build_library` from generated code;
                // its initializers only set up the device globals.
                unsafe { libloading::Library::new(&private) }
                    .map_err(|e| DeviceError(format!("emulated device: {e}")))
            });
        let _ = std::fs::remove_dir_all(&dir);
        lib
    }
}

/// Builds the host library of the CUDA text `cuda` with entry points for `kernels`
/// ([`translation_unit`], [`compiler`]) through `cache` (a scratch directory without one)
/// and returns its bytes: what [`EmulatedDevice`] loads.
pub fn build_library(
    cuda: &str,
    kernels: &[String],
    cache: Option<&Cache>,
) -> Result<(Vec<u8>, Origin), CodegenError> {
    let tu = translation_unit(cuda, kernels);
    let cc = compiler();
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|e| CodegenError::Cache(format!("{}: {e}", path.display())))
    };
    match cache {
        Some(cache) => {
            let key = Cache::key(&[
                &tu,
                &cc.flags.join(" "),
                &cc.identity()?,
                env!("CARGO_PKG_VERSION"),
                "emulated",
            ]);
            let (path, origin) =
                cache.get_or_build_artifact(&key, LIBRARY, &tu, |src, out| cc.compile(src, out))?;
            Ok((read(&path)?, origin))
        }
        None => {
            let dir = scratch_dir("emu-build");
            std::fs::create_dir_all(&dir)
                .map_err(|e| CodegenError::Cache(format!("{}: {e}", dir.display())))?;
            let (src, out) = (dir.join(LIBRARY.source), dir.join(LIBRARY.output));
            std::fs::write(&src, &tu)
                .map_err(|e| CodegenError::Cache(format!("{}: {e}", src.display())))?;
            let built = cc.compile(&src, &out).and_then(|()| read(&out));
            let _ = std::fs::remove_dir_all(&dir);
            Ok((built?, Origin::Built))
        }
    }
}

impl Drop for EmulatedDevice {
    fn drop(&mut self) {
        for (&p, &layout) in &self.memory {
            // SAFETY: allocated by `alloc_zeroed` with this layout, freed once.
            unsafe { std::alloc::dealloc(p as *mut u8, layout) };
        }
    }
}

impl Device for EmulatedDevice {
    fn name(&self) -> String {
        format!(
            "sdflow emulated CUDA device ({} host threads{})",
            self.threads,
            if self.reverse { ", reverse order" } else { "" }
        )
    }

    fn arch(&self) -> (u32, u32) {
        (9, 0)
    }

    fn host_library(&self) -> bool {
        true
    }

    fn load_module(
        &mut self,
        image: &[u8],
        kernels: &[String],
    ) -> Result<Vec<KernelId>, DeviceError> {
        let lib = self.load_private(image)?;
        let sym = |name: String| -> Result<*const c_void, DeviceError> {
            // SAFETY: looked up by name in our library; the types are the ones
            // `entry_points` defines.
            unsafe { lib.get::<*const c_void>(name.as_bytes()) }
                .map(|s| *s)
                .map_err(|e| DeviceError(format!("emulated device: no '{name}': {e}")))
        };
        // SAFETY: `sdf_emu_launch` has the `Launcher` signature (see `entry_points`).
        let launch: Launcher = unsafe { std::mem::transmute(sym("sdf_emu_launch".into())?) };
        let mut ids = Vec::with_capacity(kernels.len());
        let mut loaded = Vec::with_capacity(kernels.len());
        for k in kernels {
            // SAFETY: the three functions per kernel have the signatures `entry_points`
            // gives them.
            let (entry, count, sizes) = unsafe {
                let entry: Entry = std::mem::transmute(sym(format!("sdf_emu_k_{k}"))?);
                let count: unsafe extern "C" fn() -> i32 =
                    std::mem::transmute(sym(format!("sdf_emu_n_{k}"))?);
                let sizes: unsafe extern "C" fn() -> *const i32 =
                    std::mem::transmute(sym(format!("sdf_emu_s_{k}"))?);
                (entry, count(), sizes())
            };
            // SAFETY: `sizes` points to `count + 1` ints (see `entry_points`).
            let params = (0..count.max(0) as usize)
                .map(|i| unsafe { *sizes.add(i) } as usize)
                .collect();
            ids.push(KernelId(self.kernels.len() + loaded.len()));
            loaded.push(Kernel {
                name: k.clone(),
                entry,
                launch,
                params,
            });
        }
        self.kernels.extend(loaded);
        self.libraries.push(lib);
        Ok(ids)
    }

    fn alloc_zeroed(&mut self, bytes: usize) -> Result<DevPtr, DeviceError> {
        self.not_while_capturing("an allocation")?;
        let layout = Layout::from_size_align(bytes.max(1), ALIGN)
            .map_err(|e| DeviceError(format!("CUDA_ERROR_OUT_OF_MEMORY: {bytes} bytes: {e}")))?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        if p.is_null() {
            return Err(DeviceError(format!(
                "CUDA_ERROR_OUT_OF_MEMORY: {bytes} bytes on the emulated device"
            )));
        }
        self.memory.insert(p as DevPtr, layout);
        Ok(p as DevPtr)
    }

    fn free(&mut self, p: DevPtr) {
        self.mirrors.forget(p);
        if let Some(layout) = self.memory.remove(&p) {
            // SAFETY: allocated by `alloc_zeroed` with this layout; removed, so freed once.
            unsafe { std::alloc::dealloc(p as *mut u8, layout) };
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
        check_args(&kernel.name, &kernel.params, args)?;
        let threads = block.iter().map(|&b| b as u64).product::<u64>();
        if grid.contains(&0)
            || block.contains(&0)
            || threads > 1024
            || grid[1] > 65535
            || grid[2] > 65535
            || grid[0] > i32::MAX as u32
            || block[2] > 64
        {
            return Err(DeviceError(format!(
                "CUDA_ERROR_INVALID_VALUE: launching {} with grid {grid:?} and block {block:?}",
                kernel.name
            )));
        }
        self.launches += 1;
        self.enqueue(Op::Launch {
            k,
            grid,
            block,
            args: args.to_vec(),
        })
    }

    fn copy_h2d(&mut self, dst: DevPtr, src: &[u8]) -> Result<(), DeviceError> {
        self.not_while_capturing("a copy from the host")?;
        self.check(dst, src.len(), "copy to the device")?;
        self.copies += 1;
        // SAFETY: the destination range lies in a live allocation (checked).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst as *mut u8, src.len()) };
        Ok(())
    }

    fn copy_d2h_sync(&mut self, dst: &mut [u8], src: DevPtr) -> Result<(), DeviceError> {
        self.not_while_capturing("a copy to the host")?;
        self.check(src, dst.len(), "copy to the host")?;
        self.copies += 1;
        self.syncs.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the source range lies in a live allocation (checked).
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    fn copy_d2d(&mut self, dst: DevPtr, src: DevPtr, bytes: usize) -> Result<(), DeviceError> {
        self.check(dst, bytes, "device-to-device copy")?;
        self.check(src, bytes, "device-to-device copy")?;
        self.copies += 1;
        self.enqueue(Op::CopyD2D { dst, src, bytes })
    }

    fn memset_zero(&mut self, dst: DevPtr, bytes: usize) -> Result<(), DeviceError> {
        self.check(dst, bytes, "memset")?;
        self.enqueue(Op::Memset { dst, bytes })
    }

    fn mirror(&mut self, src: DevPtr, bytes: usize) -> Result<(), DeviceError> {
        check_mirror(bytes, self.capture.is_some(), self.mirrors.contains(src))?;
        self.check(src, bytes, "mirror")?;
        self.enqueue(Op::Mirror { src, bytes })
    }

    fn read_mirror(&mut self, src: DevPtr, dst: &mut [u8]) {
        self.mirrors.read(src, dst);
    }

    fn record_event(&mut self) -> Result<Event, DeviceError> {
        self.not_while_capturing("recording an event")?;
        Ok(Event::new(Box::new(DoneEvent), self.syncs.clone()))
    }

    fn synchronize(&mut self) -> Result<(), DeviceError> {
        self.not_while_capturing("a synchronization")?;
        self.syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn begin_capture(&mut self) -> Result<(), DeviceError> {
        if self.capture.is_some() {
            return Err(DeviceError(
                "CUDA_ERROR_ILLEGAL_STATE: the stream is captured already".into(),
            ));
        }
        self.capture = Some(Vec::new());
        Ok(())
    }

    fn end_capture(&mut self) -> Result<GraphId, DeviceError> {
        let ops = self.capture.take().ok_or_else(|| {
            DeviceError("CUDA_ERROR_ILLEGAL_STATE: the stream is not captured".into())
        })?;
        self.graphs.push(ops);
        Ok(GraphId(self.graphs.len() - 1))
    }

    fn replay(&mut self, g: GraphId) -> Result<(), DeviceError> {
        self.not_while_capturing("a graph replay")?;
        let ops = self
            .graphs
            .get(g.0)
            .cloned()
            .ok_or_else(|| DeviceError(format!("no graph {}", g.0)))?;
        self.replays += 1;
        for op in &ops {
            self.run(op)?;
        }
        Ok(())
    }

    fn wait_for_stream(&mut self, _stream: u64) -> Result<(), DeviceError> {
        // Another library's work on this device ran when it was enqueued.
        Ok(())
    }

    fn signal_stream(&mut self, _stream: u64) -> Result<(), DeviceError> {
        Ok(())
    }

    fn alloc_host(&mut self, bytes: usize) -> Result<*mut u8, DeviceError> {
        super::plain_host_alloc(bytes)
    }

    fn free_host(&mut self, p: *mut u8, bytes: usize) {
        super::plain_host_free(p, bytes)
    }

    unsafe fn copy_d2h_async(
        &mut self,
        dst: *mut u8,
        src: DevPtr,
        bytes: usize,
    ) -> Result<(), DeviceError> {
        self.check(src, bytes, "copy to the host")?;
        self.copies += 1;
        self.enqueue(Op::ToHost {
            dst: dst as usize,
            src,
            bytes,
        })
    }

    unsafe fn copy_h2d_async(
        &mut self,
        dst: DevPtr,
        src: *const u8,
        bytes: usize,
    ) -> Result<(), DeviceError> {
        self.check(dst, bytes, "copy to the device")?;
        self.copies += 1;
        self.enqueue(Op::FromHost {
            dst,
            src: src as usize,
            bytes,
        })
    }

    fn host_fn(&mut self, f: HostFn) -> Result<(), DeviceError> {
        self.enqueue(Op::HostFn(f))
    }

    fn check_memory(&mut self, p: DevPtr, bytes: usize) -> Result<(), DeviceError> {
        self.check(p, bytes, "memory check")
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
