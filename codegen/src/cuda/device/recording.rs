//! [`RecordingDevice`]: a [`Device`] for tests without a GPU.

use super::{
    Counters, DevPtr, Device, DeviceError, DoneEvent, Event, GraphId, HostFn, HostMirrors,
    KernelArg, KernelId, check_mirror,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// One recorded kernel launch.
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    /// The kernel's name, as given to [`Device::load_module`].
    pub kernel: String,
    /// The grid, in blocks.
    pub grid: [u32; 3],
    /// The block, in threads.
    pub block: [u32; 3],
    /// The arguments.
    pub args: Vec<KernelArg>,
}

/// One call made on a [`RecordingDevice`], in call order.
#[derive(Clone, Debug, PartialEq)]
pub enum Call {
    /// [`Device::load_module`]: the image's size and the kernels looked up.
    LoadModule {
        /// Bytes in the image.
        image_bytes: usize,
        /// The kernels' names.
        kernels: Vec<String>,
    },
    /// [`Device::alloc_zeroed`].
    Alloc {
        /// The pointer returned.
        ptr: DevPtr,
        /// Its size.
        bytes: usize,
    },
    /// [`Device::free`].
    Free(DevPtr),
    /// [`Device::launch`].
    Launch(Launch),
    /// [`Device::copy_h2d`].
    CopyH2D {
        /// Destination.
        dst: DevPtr,
        /// Bytes copied.
        bytes: usize,
    },
    /// [`Device::copy_d2h_sync`].
    CopyD2H {
        /// Source.
        src: DevPtr,
        /// Bytes copied.
        bytes: usize,
    },
    /// [`Device::copy_d2d`].
    CopyD2D {
        /// Destination.
        dst: DevPtr,
        /// Source.
        src: DevPtr,
        /// Bytes copied.
        bytes: usize,
    },
    /// [`Device::memset_zero`].
    MemsetZero {
        /// Destination.
        dst: DevPtr,
        /// Bytes zeroed.
        bytes: usize,
    },
    /// [`Device::mirror`].
    Mirror {
        /// Source.
        src: DevPtr,
        /// Bytes copied.
        bytes: usize,
    },
    /// [`Device::copy_d2h_async`].
    CopyD2HAsync {
        /// Source.
        src: DevPtr,
        /// Bytes copied.
        bytes: usize,
    },
    /// [`Device::copy_h2d_async`].
    CopyH2DAsync {
        /// Destination.
        dst: DevPtr,
        /// Bytes copied.
        bytes: usize,
    },
    /// [`Device::host_fn`] (run when enqueued, or at each replay of the graph it was
    /// captured into).
    HostFn,
    /// [`Device::record_event`].
    RecordEvent,
    /// [`Device::wait_for_stream`], with the stream's handle.
    WaitForStream(u64),
    /// [`Device::signal_stream`], with the stream's handle.
    SignalStream(u64),
    /// [`Device::synchronize`].
    Synchronize,
    /// [`Device::begin_capture`].
    BeginCapture,
    /// [`Device::end_capture`], with the graph made.
    EndCapture(GraphId),
    /// [`Device::replay`].
    Replay(GraphId),
}

/// A fake [`Device`]: allocations are host memory behind fake device pointers (spaced
/// apart, so an access past an allocation's end is an error rather than a neighbour's
/// data), copies and memsets really move bytes, launches are only recorded. Every call is
/// logged in [`RecordingDevice::calls`].
///
/// Between [`Device::begin_capture`] and [`Device::end_capture`], launches, device copies
/// and memsets are logged and kept in the graph but do nothing to memory; each
/// [`Device::replay`] applies the graph's copies and memsets (its launches are only
/// logged once, at capture). Host copies, syncs, events, allocations and frees are errors
/// during a capture, as they are (or should be) on a real device.
#[derive(Debug)]
pub struct RecordingDevice {
    arch: (u32, u32),
    kernels: Vec<String>,
    memory: BTreeMap<DevPtr, Vec<u8>>,
    next_ptr: DevPtr,
    calls: Vec<Call>,
    capture: Option<Vec<Call>>,
    graphs: Vec<Vec<Call>>,
    /// What a captured graph does on the host, in order: its host copies and functions.
    capture_host: Vec<HostOp>,
    graphs_host: Vec<Vec<HostOp>>,
    launches: u64,
    copies: u64,
    replays: u64,
    syncs: Arc<AtomicU64>,
    mirrors: HostMirrors,
}

/// A host copy or function a captured graph replays.
#[derive(Clone)]
enum HostOp {
    ToHost {
        dst: usize,
        src: DevPtr,
        bytes: usize,
    },
    FromHost {
        dst: DevPtr,
        src: usize,
        bytes: usize,
    },
    Fn(HostFn),
}

impl std::fmt::Debug for HostOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostOp::ToHost { bytes, .. } => write!(f, "ToHost({bytes})"),
            HostOp::FromHost { bytes, .. } => write!(f, "FromHost({bytes})"),
            HostOp::Fn(_) => write!(f, "Fn"),
        }
    }
}

/// Where fake allocations start, and how far apart they are at least.
const BASE: DevPtr = 0x7f00_0000_0000;
const GAP: DevPtr = 0x1_0000;

impl Default for RecordingDevice {
    fn default() -> Self {
        RecordingDevice::new((9, 0))
    }
}

impl RecordingDevice {
    /// A fake device of compute capability `arch`.
    pub fn new(arch: (u32, u32)) -> RecordingDevice {
        RecordingDevice {
            arch,
            kernels: Vec::new(),
            memory: BTreeMap::new(),
            next_ptr: BASE,
            calls: Vec::new(),
            capture: None,
            graphs: Vec::new(),
            capture_host: Vec::new(),
            graphs_host: Vec::new(),
            launches: 0,
            copies: 0,
            replays: 0,
            syncs: Arc::new(AtomicU64::new(0)),
            mirrors: HostMirrors::default(),
        }
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> &[Call] {
        &self.calls
    }

    /// The launches so far (including those made while capturing), in order.
    pub fn launches(&self) -> Vec<&Launch> {
        self.calls
            .iter()
            .filter_map(|c| match c {
                Call::Launch(l) => Some(l),
                _ => None,
            })
            .collect()
    }

    /// The calls captured into graph `g`.
    pub fn graph(&self, g: GraphId) -> Option<&[Call]> {
        self.graphs.get(g.0).map(Vec::as_slice)
    }

    /// Forgets the call log (memory, kernels, graphs and counters stay).
    pub fn clear_calls(&mut self) {
        self.calls.clear();
    }

    /// The live allocations: `(pointer, bytes)`, in address order.
    pub fn allocations(&self) -> Vec<(DevPtr, usize)> {
        self.memory.iter().map(|(&p, m)| (p, m.len())).collect()
    }

    /// Reads device memory directly (no call logged, nothing counted).
    pub fn read(&self, src: DevPtr, bytes: usize) -> Result<Vec<u8>, DeviceError> {
        let (base, off) = self.find(src, bytes)?;
        Ok(self.memory[&base][off..off + bytes].to_vec())
    }

    /// Writes device memory directly (no call logged, nothing counted).
    pub fn write(&mut self, dst: DevPtr, data: &[u8]) -> Result<(), DeviceError> {
        let (base, off) = self.find(dst, data.len())?;
        self.memory.get_mut(&base).expect("found")[off..off + data.len()].copy_from_slice(data);
        Ok(())
    }

    /// The allocation holding `[p, p + bytes)`: its base and `p`'s offset in it.
    fn find(&self, p: DevPtr, bytes: usize) -> Result<(DevPtr, usize), DeviceError> {
        let Some((&base, mem)) = self.memory.range(..=p).next_back() else {
            return Err(DeviceError(format!("{p:#x} is not in any allocation")));
        };
        let off = (p - base) as usize;
        if off > mem.len() || bytes > mem.len() - off {
            return Err(DeviceError(format!(
                "[{p:#x}, +{bytes}) is outside the allocation at {base:#x} of {} bytes",
                mem.len()
            )));
        }
        Ok((base, off))
    }

    fn not_while_capturing(&self, what: &str) -> Result<(), DeviceError> {
        if self.capture.is_some() {
            return Err(DeviceError(format!(
                "{what} is not allowed while capturing a graph"
            )));
        }
        Ok(())
    }

    /// Logs `call`, and keeps it in the graph being captured when `captured`.
    fn log(&mut self, call: Call, captured: bool) {
        if captured && let Some(graph) = &mut self.capture {
            graph.push(call.clone());
        }
        self.calls.push(call);
    }

    fn apply_mirror(&mut self, src: DevPtr, bytes: usize) -> Result<(), DeviceError> {
        let data = self.read(src, bytes)?;
        self.mirrors.set(src, data);
        Ok(())
    }

    fn apply_d2d(&mut self, dst: DevPtr, src: DevPtr, bytes: usize) -> Result<(), DeviceError> {
        let data = self.read(src, bytes)?;
        self.write(dst, &data)
    }

    fn apply_memset(&mut self, dst: DevPtr, bytes: usize) -> Result<(), DeviceError> {
        let (base, off) = self.find(dst, bytes)?;
        self.memory.get_mut(&base).expect("found")[off..off + bytes].fill(0);
        Ok(())
    }
}

impl Device for RecordingDevice {
    fn name(&self) -> String {
        format!("RecordingDevice (sm_{}{})", self.arch.0, self.arch.1)
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
        if image.is_empty() {
            return Err(DeviceError("cannot load an empty module image".into()));
        }
        self.log(
            Call::LoadModule {
                image_bytes: image.len(),
                kernels: kernels.to_vec(),
            },
            false,
        );
        let first = self.kernels.len();
        self.kernels.extend(kernels.iter().cloned());
        Ok((first..self.kernels.len()).map(KernelId).collect())
    }

    fn alloc_zeroed(&mut self, bytes: usize) -> Result<DevPtr, DeviceError> {
        self.not_while_capturing("allocating")?;
        let ptr = self.next_ptr;
        let span = (bytes as DevPtr).div_ceil(GAP) * GAP + GAP;
        self.next_ptr += span;
        self.memory.insert(ptr, vec![0; bytes]);
        self.log(Call::Alloc { ptr, bytes }, false);
        Ok(ptr)
    }

    /// # Panics
    ///
    /// On a pointer that is not a live allocation, or while capturing: both are bugs in
    /// the caller, which a test should see where they happen.
    fn free(&mut self, p: DevPtr) {
        assert!(
            self.capture.is_none(),
            "RecordingDevice: free({p:#x}) while capturing"
        );
        assert!(
            self.memory.remove(&p).is_some(),
            "RecordingDevice: free({p:#x}), which is not a live allocation"
        );
        self.mirrors.forget(p);
        self.log(Call::Free(p), false);
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
            .ok_or_else(|| DeviceError(format!("no kernel {}", k.0)))?
            .clone();
        if grid.contains(&0) || block.contains(&0) {
            return Err(DeviceError(format!(
                "launch of {kernel} with an empty grid {grid:?} or block {block:?}"
            )));
        }
        self.launches += 1;
        let launch = Launch {
            kernel,
            grid,
            block,
            args: args.to_vec(),
        };
        self.log(Call::Launch(launch), true);
        Ok(())
    }

    fn copy_h2d(&mut self, dst: DevPtr, src: &[u8]) -> Result<(), DeviceError> {
        self.not_while_capturing("a host-to-device copy")?;
        self.write(dst, src)?;
        self.copies += 1;
        self.log(
            Call::CopyH2D {
                dst,
                bytes: src.len(),
            },
            false,
        );
        Ok(())
    }

    fn copy_d2h_sync(&mut self, dst: &mut [u8], src: DevPtr) -> Result<(), DeviceError> {
        self.not_while_capturing("a device-to-host copy")?;
        let data = self.read(src, dst.len())?;
        dst.copy_from_slice(&data);
        self.copies += 1;
        self.syncs.fetch_add(1, Ordering::Relaxed);
        self.log(
            Call::CopyD2H {
                src,
                bytes: dst.len(),
            },
            false,
        );
        Ok(())
    }

    fn copy_d2d(&mut self, dst: DevPtr, src: DevPtr, bytes: usize) -> Result<(), DeviceError> {
        if self.capture.is_some() {
            // Checked now, applied at replay.
            self.find(src, bytes)?;
            self.find(dst, bytes)?;
        } else {
            self.apply_d2d(dst, src, bytes)?;
        }
        self.copies += 1;
        self.log(Call::CopyD2D { dst, src, bytes }, true);
        Ok(())
    }

    fn memset_zero(&mut self, dst: DevPtr, bytes: usize) -> Result<(), DeviceError> {
        if self.capture.is_some() {
            self.find(dst, bytes)?;
        } else {
            self.apply_memset(dst, bytes)?;
        }
        self.log(Call::MemsetZero { dst, bytes }, true);
        Ok(())
    }

    fn mirror(&mut self, src: DevPtr, bytes: usize) -> Result<(), DeviceError> {
        check_mirror(bytes, self.capture.is_some(), self.mirrors.contains(src))?;
        if self.capture.is_some() {
            self.find(src, bytes)?;
        } else {
            self.apply_mirror(src, bytes)?;
        }
        self.log(Call::Mirror { src, bytes }, true);
        Ok(())
    }

    fn read_mirror(&mut self, src: DevPtr, dst: &mut [u8]) {
        self.mirrors.read(src, dst);
    }

    fn record_event(&mut self) -> Result<Event, DeviceError> {
        self.not_while_capturing("recording an event")?;
        self.log(Call::RecordEvent, false);
        Ok(Event::new(Box::new(DoneEvent), self.syncs.clone()))
    }

    fn synchronize(&mut self) -> Result<(), DeviceError> {
        self.not_while_capturing("synchronizing")?;
        self.syncs.fetch_add(1, Ordering::Relaxed);
        self.log(Call::Synchronize, false);
        Ok(())
    }

    fn begin_capture(&mut self) -> Result<(), DeviceError> {
        self.not_while_capturing("beginning a capture")?;
        self.log(Call::BeginCapture, false);
        self.capture = Some(Vec::new());
        self.capture_host.clear();
        Ok(())
    }

    fn end_capture(&mut self) -> Result<GraphId, DeviceError> {
        let graph = self
            .capture
            .take()
            .ok_or_else(|| DeviceError("end_capture without begin_capture".into()))?;
        let g = GraphId(self.graphs.len());
        self.graphs.push(graph);
        self.graphs_host
            .push(std::mem::take(&mut self.capture_host));
        self.log(Call::EndCapture(g), false);
        Ok(g)
    }

    fn replay(&mut self, g: GraphId) -> Result<(), DeviceError> {
        self.not_while_capturing("replaying a graph")?;
        let graph = self
            .graphs
            .get(g.0)
            .ok_or_else(|| DeviceError(format!("no graph {}", g.0)))?
            .clone();
        let mut host = self.graphs_host[g.0].clone().into_iter();
        for call in &graph {
            match *call {
                Call::CopyD2D { dst, src, bytes } => self.apply_d2d(dst, src, bytes)?,
                Call::MemsetZero { dst, bytes } => self.apply_memset(dst, bytes)?,
                Call::Mirror { src, bytes } => self.apply_mirror(src, bytes)?,
                Call::CopyD2HAsync { .. } | Call::CopyH2DAsync { .. } | Call::HostFn => {
                    match host.next() {
                        Some(HostOp::ToHost { dst, src, bytes }) => {
                            let data = self.read(src, bytes)?;
                            // SAFETY: `dst` holds `bytes` and outlives the graph (the
                            // promise of `copy_d2h_async`'s caller).
                            unsafe {
                                std::ptr::copy_nonoverlapping(data.as_ptr(), dst as *mut u8, bytes)
                            };
                        }
                        Some(HostOp::FromHost { dst, src, bytes }) => {
                            // SAFETY: as above, the other way.
                            let data =
                                unsafe { std::slice::from_raw_parts(src as *const u8, bytes) }
                                    .to_vec();
                            self.write(dst, &data)?;
                        }
                        Some(HostOp::Fn(f)) => f(),
                        None => {}
                    }
                }
                _ => {}
            }
        }
        self.replays += 1;
        self.log(Call::Replay(g), false);
        Ok(())
    }

    fn wait_for_stream(&mut self, stream: u64) -> Result<(), DeviceError> {
        self.not_while_capturing("waiting for another stream")?;
        self.log(Call::WaitForStream(stream), false);
        Ok(())
    }

    fn signal_stream(&mut self, stream: u64) -> Result<(), DeviceError> {
        self.not_while_capturing("signalling another stream")?;
        self.log(Call::SignalStream(stream), false);
        Ok(())
    }

    fn alloc_host(&mut self, bytes: usize) -> Result<*mut u8, DeviceError> {
        self.not_while_capturing("a host allocation")?;
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
        let data = self.read(src, bytes)?;
        self.copies += 1;
        let captured = self.capture.is_some();
        self.log(Call::CopyD2HAsync { src, bytes }, true);
        if captured {
            self.capture_host.push(HostOp::ToHost {
                dst: dst as usize,
                src,
                bytes,
            });
        } else {
            // SAFETY: `dst` holds `bytes` (the caller's promise).
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, bytes) };
        }
        Ok(())
    }

    unsafe fn copy_h2d_async(
        &mut self,
        dst: DevPtr,
        src: *const u8,
        bytes: usize,
    ) -> Result<(), DeviceError> {
        self.find(dst, bytes)?;
        self.copies += 1;
        if self.capture.is_some() {
            self.capture_host.push(HostOp::FromHost {
                dst,
                src: src as usize,
                bytes,
            });
        } else {
            // SAFETY: `src` holds `bytes` (the caller's promise).
            let data = unsafe { std::slice::from_raw_parts(src, bytes) }.to_vec();
            self.write(dst, &data)?;
        }
        self.log(Call::CopyH2DAsync { dst, bytes }, true);
        Ok(())
    }

    fn host_fn(&mut self, f: HostFn) -> Result<(), DeviceError> {
        self.log(Call::HostFn, true);
        if self.capture.is_some() {
            self.capture_host.push(HostOp::Fn(f));
        } else {
            f();
        }
        Ok(())
    }

    fn check_memory(&mut self, p: DevPtr, bytes: usize) -> Result<(), DeviceError> {
        self.find(p, bytes).map(|_| ())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn f64_bytes(v: &[f64]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_ne_bytes()).collect()
    }

    #[test]
    fn copies_round_trip() {
        let mut dev = RecordingDevice::default();
        let a = dev.alloc_zeroed(32).unwrap();
        let b = dev.alloc_zeroed(32).unwrap();
        assert_ne!(a, b);
        let mut out = vec![0xffu8; 32];
        dev.copy_d2h_sync(&mut out, a).unwrap();
        assert_eq!(out, vec![0u8; 32], "allocations are zeroed");

        let data = f64_bytes(&[1.0, -2.5, 3.25, 4.0]);
        dev.copy_h2d(a, &data).unwrap();
        dev.copy_d2d(b, a, 32).unwrap();
        dev.copy_d2h_sync(&mut out, b).unwrap();
        assert_eq!(out, data);

        // A window inside an allocation.
        dev.memset_zero(b + 8, 16).unwrap();
        let mut part = vec![0u8; 24];
        dev.copy_d2h_sync(&mut part, b + 8).unwrap();
        assert_eq!(&part[..16], &[0u8; 16]);
        assert_eq!(&part[16..], &data[24..]);
        assert_eq!(dev.read(a, 32).unwrap(), data);
    }

    #[test]
    fn out_of_bounds_and_freed_memory_are_errors() {
        let mut dev = RecordingDevice::default();
        let a = dev.alloc_zeroed(16).unwrap();
        assert!(dev.copy_h2d(a + 8, &[0u8; 16]).is_err());
        assert!(dev.copy_h2d(a - 8, &[0u8; 4]).is_err());
        dev.free(a);
        let err = dev.copy_h2d(a, &[0u8; 4]).unwrap_err();
        assert!(err.0.contains("not in any allocation"), "{err}");
        assert!(dev.allocations().is_empty());
    }

    #[test]
    #[should_panic(expected = "not a live allocation")]
    fn double_free_panics() {
        let mut dev = RecordingDevice::default();
        let a = dev.alloc_zeroed(16).unwrap();
        dev.free(a);
        dev.free(a);
    }

    #[test]
    fn counters_and_log() {
        let mut dev = RecordingDevice::new((8, 0));
        assert_eq!(dev.name(), "RecordingDevice (sm_80)");
        assert_eq!(dev.arch(), (8, 0));
        let ks = dev
            .load_module(b"fake", &["first".to_string(), "second".to_string()])
            .unwrap();
        assert_eq!(ks, vec![KernelId(0), KernelId(1)]);
        let p = dev.alloc_zeroed(64).unwrap();
        let args = [KernelArg::Ptr(p), KernelArg::I64(7), KernelArg::F64(0.5)];
        dev.launch(ks[1], [4, 1, 1], [128, 1, 1], &args).unwrap();
        assert!(dev.launch(KernelId(9), [1; 3], [1; 3], &[]).is_err());
        assert!(dev.launch(ks[0], [0, 1, 1], [1; 3], &[]).is_err());
        dev.copy_h2d(p, &[1u8; 8]).unwrap();
        let mut out = [0u8; 8];
        dev.copy_d2h_sync(&mut out, p).unwrap();
        dev.memset_zero(p, 64).unwrap();
        let ev = dev.record_event().unwrap();
        assert!(ev.is_done());
        ev.wait().unwrap();
        dev.synchronize().unwrap();
        assert_eq!(
            dev.counters(),
            Counters {
                launches: 1,
                copies: 2,
                syncs: 3,
                replays: 0
            }
        );
        let launches = dev.launches();
        assert_eq!(launches.len(), 1);
        assert_eq!(launches[0].kernel, "second");
        assert_eq!(launches[0].grid, [4, 1, 1]);
        assert_eq!(launches[0].block, [128, 1, 1]);
        assert_eq!(launches[0].args, args.to_vec());
        assert_eq!(dev.calls().len(), 8);
        assert_eq!(dev.calls()[1], Call::Alloc { ptr: p, bytes: 64 });
        assert_eq!(dev.calls()[7], Call::Synchronize);
    }

    #[test]
    fn capture_defers_device_work_to_replays() {
        let mut dev = RecordingDevice::default();
        let ks = dev.load_module(b"fake", &["k".to_string()]).unwrap();
        let a = dev.alloc_zeroed(8).unwrap();
        let b = dev.alloc_zeroed(8).unwrap();
        dev.copy_h2d(a, &[5u8; 8]).unwrap();
        dev.begin_capture().unwrap();
        assert!(dev.begin_capture().is_err());
        assert!(dev.copy_h2d(a, &[1u8; 8]).is_err());
        assert!(dev.synchronize().is_err());
        assert!(dev.record_event().is_err());
        assert!(dev.alloc_zeroed(8).is_err());
        dev.launch(ks[0], [1; 3], [32, 1, 1], &[KernelArg::Ptr(a)])
            .unwrap();
        dev.copy_d2d(b, a, 8).unwrap();
        let g = dev.end_capture().unwrap();
        assert_eq!(dev.read(b, 8).unwrap(), vec![0u8; 8], "captured, not run");
        assert_eq!(dev.graph(g).unwrap().len(), 2);
        dev.replay(g).unwrap();
        dev.replay(g).unwrap();
        assert_eq!(dev.read(b, 8).unwrap(), vec![5u8; 8]);
        assert!(dev.replay(GraphId(7)).is_err());
        assert!(dev.end_capture().is_err());
        let c = dev.counters();
        assert_eq!((c.launches, c.copies, c.replays, c.syncs), (1, 2, 2, 0));
    }

    #[test]
    fn events_can_be_waited_on_from_another_thread() {
        let mut dev = RecordingDevice::default();
        let ev = dev.record_event().unwrap();
        std::thread::spawn(move || ev.wait())
            .join()
            .unwrap()
            .unwrap();
        assert_eq!(dev.counters().syncs, 1);
        let boxed: Box<dyn Device> = Box::new(dev);
        assert!(boxed.name().starts_with("RecordingDevice"));
    }
}
