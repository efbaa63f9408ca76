//! Pinned staging buffers for host-to-device copies that never wait for the stream.
//!
//! A copy from pageable memory may make the driver wait for earlier work on the stream
//! before it stages the data itself. Copying into a pinned buffer of ours first, and
//! enqueueing the DMA from there, returns at once; an event recorded after the copy says
//! when the buffer may be written again.

use super::{DevPtr, DeviceError, driver_error};
use cudarc::driver::result as cu;
use cudarc::driver::sys;
use std::ffi::c_void;

/// Copies up to this size are staged; larger ones go straight from pageable memory.
pub(super) const MAX_COPY: usize = 8 << 20;
/// At most this much pinned memory per device.
const BUDGET: usize = 64 << 20;
/// The smallest buffer.
const MIN_BUFFER: usize = 64 << 10;

/// A pinned host buffer and the event after the last copy out of it.
struct Buffer {
    ptr: *mut u8,
    cap: usize,
    event: sys::CUevent,
    used: bool,
}

/// The pinned buffers of one device.
#[derive(Default)]
pub(super) struct StagingPool {
    buffers: Vec<Buffer>,
}

impl StagingPool {
    /// Enqueues the copy of `src` to `dst` on `stream` through a pinned buffer whose last
    /// copy is done. `Ok(false)`: no buffer could be had within the budget (copy directly).
    ///
    /// # Safety
    ///
    /// The device's context is current; `stream` is its live stream; `dst` is device
    /// memory of at least `src.len()` bytes.
    pub(super) unsafe fn copy_h2d(
        &mut self,
        dst: DevPtr,
        src: &[u8],
        stream: sys::CUstream,
    ) -> Result<bool, DeviceError> {
        let Some(i) = self.buffer(src.len())? else {
            return Ok(false);
        };
        let b = &mut self.buffers[i];
        // SAFETY: the buffer holds `cap >= len` bytes and its last copy is done; the DMA
        // reads it later, and the event recorded after it says when that is done.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), b.ptr, src.len());
            let pinned = std::slice::from_raw_parts(b.ptr, src.len());
            cu::memcpy_htod_async(dst, pinned, stream).map_err(|e| {
                driver_error(format_args!("copying {} bytes to the device", src.len()), e)
            })?;
            cu::event::record(b.event, stream)
                .map_err(|e| driver_error("recording a staging event", e))?;
        }
        b.used = true;
        Ok(true)
    }

    /// A buffer of at least `len` bytes whose last copy is done, if the budget allows.
    fn buffer(&mut self, len: usize) -> Result<Option<usize>, DeviceError> {
        for (i, b) in self.buffers.iter().enumerate() {
            // SAFETY: a live event of this context.
            if b.cap >= len && (!b.used || unsafe { cu::event::query(b.event) }.is_ok()) {
                return Ok(Some(i));
            }
        }
        let cap = len.next_power_of_two().max(MIN_BUFFER);
        let total: usize = self.buffers.iter().map(|b| b.cap).sum();
        if total + cap > BUDGET {
            return Ok(None);
        }
        let event = cu::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
            .map_err(|e| driver_error("creating a staging event", e))?;
        // SAFETY: a plain pinned allocation.
        let ptr = match unsafe { cu::malloc_host(cap, 0) } {
            Ok(p) => p as *mut u8,
            Err(e) => {
                // SAFETY: just created, never recorded.
                let _ = unsafe { cu::event::destroy(event) };
                return Err(driver_error(
                    format_args!("allocating {cap} bytes of pinned memory"),
                    e,
                ));
            }
        };
        self.buffers.push(Buffer {
            ptr,
            cap,
            event,
            used: false,
        });
        Ok(Some(self.buffers.len() - 1))
    }

    /// Frees every buffer.
    ///
    /// # Safety
    ///
    /// The device's context is current and its stream is idle.
    pub(super) unsafe fn release(&mut self) {
        for b in self.buffers.drain(..) {
            // SAFETY: allocated by cuMemHostAlloc / cuEventCreate, released once.
            unsafe {
                let _ = cu::free_host(b.ptr as *mut c_void);
                let _ = cu::event::destroy(b.event);
            }
        }
    }
}
