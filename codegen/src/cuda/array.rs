//! Arrays in device memory: the state a model keeps on the GPU from one call to the next.
//!
//! A [`DeviceArray`] owns an allocation on a [`DeviceHandle`]'s device, with an element
//! type, extents and a dense layout (the order of its dimensions in memory). Copies to
//! and from the host go through the device's stream, so they are ordered with the calls
//! enqueued before and after them; a copy to the host waits for that work. Dropping the
//! array frees the memory in stream order: a call still running on it finishes first.

use std::fmt;
use std::sync::Arc;

use sdflow_ir::DType;
use sdflow_ir::interp::HostArray;

use super::device::{DevPtr, DeviceError, DeviceHandle};

/// One device allocation; freed when the last array or bound call holding it is gone.
pub(crate) struct Buffer {
    pub(crate) ptr: DevPtr,
    pub(crate) device: DeviceHandle,
}

impl Drop for Buffer {
    fn drop(&mut self) {
        self.device.free_later(self.ptr);
    }
}

/// A dense array in device memory.
pub struct DeviceArray {
    pub(crate) buf: Arc<Buffer>,
    dtype: DType,
    extents: Vec<usize>,
    /// Dimensions from the slowest to the fastest in memory.
    order: Vec<usize>,
    /// Strides in elements.
    strides: Vec<isize>,
    /// Bytes of the elements (0 for an array without elements).
    data_bytes: usize,
}

/// Dimensions `0, 1, …`: row-major (C) order.
fn row_major(ndim: usize) -> Vec<usize> {
    (0..ndim).collect()
}

impl DeviceArray {
    /// A zeroed array of `extents` on `device`, in row-major (C) order.
    pub fn zeros(
        device: &DeviceHandle,
        dtype: DType,
        extents: &[usize],
    ) -> Result<DeviceArray, DeviceError> {
        DeviceArray::zeros_in(device, dtype, extents, &row_major(extents.len()))
    }

    /// A zeroed array of `extents` on `device` whose dimensions are laid out in `order`
    /// (slowest first: `[0, 1]` is row-major, `[1, 0]` column-major for two dimensions).
    pub fn zeros_in(
        device: &DeviceHandle,
        dtype: DType,
        extents: &[usize],
        order: &[usize],
    ) -> Result<DeviceArray, DeviceError> {
        let mut seen = vec![false; extents.len()];
        let permutation = order.len() == extents.len()
            && order
                .iter()
                .all(|&d| d < extents.len() && !std::mem::replace(&mut seen[d], true));
        if !permutation {
            return Err(DeviceError(format!(
                "layout order {order:?} is not a permutation of the {} dimensions of an array of extents {extents:?}",
                extents.len()
            )));
        }
        let size = dtype.size_bytes();
        let too_big = || {
            DeviceError(format!(
                "an array of extents {extents:?} of {dtype} is too large"
            ))
        };
        let bytes_of = |count_empty_as_one: bool| {
            extents
                .iter()
                .try_fold(size, |n, &e| {
                    n.checked_mul(if count_empty_as_one { e.max(1) } else { e })
                })
                .filter(|&b| b <= isize::MAX as usize)
                .ok_or_else(too_big)
        };
        let data_bytes = bytes_of(false)?;
        // An array without elements still gets one: a failed index-table lookup reads
        // index 0 while it raises the error.
        let alloc_bytes = bytes_of(true)?;
        let ptr = device.lock().alloc_zeroed(alloc_bytes)?;
        Ok(DeviceArray {
            buf: Arc::new(Buffer {
                ptr,
                device: device.clone(),
            }),
            dtype,
            extents: extents.to_vec(),
            strides: sdflow_ir::bind::dense_strides(extents, order),
            order: order.to_vec(),
            data_bytes,
        })
    }

    /// A copy of `a` on `device`, in row-major (C) order.
    pub fn from_host(device: &DeviceHandle, a: &HostArray) -> Result<DeviceArray, DeviceError> {
        DeviceArray::from_host_in(device, a, &row_major(a.shape().len()))
    }

    /// A copy of `a` on `device`, laid out in `order` (see [`DeviceArray::zeros_in`]).
    pub fn from_host_in(
        device: &DeviceHandle,
        a: &HostArray,
        order: &[usize],
    ) -> Result<DeviceArray, DeviceError> {
        let mut d = DeviceArray::zeros_in(device, a.dtype(), a.shape(), order)?;
        d.copy_from_host(a)?;
        Ok(d)
    }

    fn check_host(&self, a: &HostArray, what: &str) -> Result<(), DeviceError> {
        if a.dtype() != self.dtype || a.shape() != self.extents.as_slice() {
            return Err(DeviceError(format!(
                "cannot copy {what}: the host array is {} of shape {:?}, the device array {} of shape {:?}",
                a.dtype(),
                a.shape(),
                self.dtype,
                self.extents
            )));
        }
        Ok(())
    }

    /// Enqueues a copy of `a` (same element type and shape) into this array, after the
    /// work enqueued before; returns once `a` may be changed again.
    pub fn copy_from_host(&mut self, a: &HostArray) -> Result<(), DeviceError> {
        self.check_host(a, "to the device")?;
        let bytes = to_bytes(a, &self.order);
        self.buf.device.lock().copy_h2d(self.buf.ptr, &bytes)
    }

    /// Copies this array into `a` (same element type and shape) once the work enqueued
    /// before is done: it waits for the device.
    pub fn copy_to_host(&self, a: &mut HostArray) -> Result<(), DeviceError> {
        self.check_host(a, "to the host")?;
        if self.data_bytes == 0 {
            return Ok(());
        }
        let mut bytes = vec![0u8; self.data_bytes];
        self.buf
            .device
            .lock()
            .copy_d2h_sync(&mut bytes, self.buf.ptr)?;
        from_bytes(a, &self.order, &bytes);
        Ok(())
    }

    /// A host copy of this array once the work enqueued before is done (waits).
    pub fn to_host(&self) -> Result<HostArray, DeviceError> {
        let mut a = HostArray::zeros(self.dtype, &self.extents);
        self.copy_to_host(&mut a)?;
        Ok(a)
    }

    /// Its element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Its extents.
    pub fn extents(&self) -> &[usize] {
        &self.extents
    }

    /// Its strides, in elements.
    pub fn strides(&self) -> &[isize] {
        &self.strides
    }

    /// Its dimensions from the slowest to the fastest in memory.
    pub fn order(&self) -> &[usize] {
        &self.order
    }

    /// Its device address.
    pub fn ptr(&self) -> DevPtr {
        self.buf.ptr
    }

    /// The device it lives on.
    pub fn device(&self) -> &DeviceHandle {
        &self.buf.device
    }
}

impl fmt::Debug for DeviceArray {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceArray")
            .field("dtype", &self.dtype)
            .field("extents", &self.extents)
            .field("order", &self.order)
            .field("ptr", &format_args!("{:#x}", self.buf.ptr))
            .finish()
    }
}

/// The elements of `a` in the dense layout `order` (dimensions slowest first), as
/// little-endian bytes of its element type.
pub(crate) fn to_bytes(a: &HostArray, order: &[usize]) -> Vec<u8> {
    fn go<T: Copy>(a: &ndarray::ArrayD<T>, order: &[usize], f: impl Fn(T) -> Vec<u8>) -> Vec<u8> {
        let v = if order.is_empty() {
            a.view()
        } else {
            a.view().permuted_axes(order.to_vec())
        };
        v.iter().flat_map(|x| f(*x)).collect()
    }
    match a {
        HostArray::F64(x) => go(x, order, |v| v.to_le_bytes().to_vec()),
        HostArray::F32(x) => go(x, order, |v| v.to_le_bytes().to_vec()),
        HostArray::I64(x) => go(x, order, |v| v.to_le_bytes().to_vec()),
        HostArray::I32(x) => go(x, order, |v| v.to_le_bytes().to_vec()),
        HostArray::Bool(x) => go(x, order, |v| vec![u8::from(v)]),
    }
}

/// Writes `bytes` (as [`to_bytes`] lays them out) back into `a`.
pub(crate) fn from_bytes(a: &mut HostArray, order: &[usize], bytes: &[u8]) {
    fn go<T: Copy, const W: usize>(
        a: &mut ndarray::ArrayD<T>,
        order: &[usize],
        bytes: &[u8],
        f: impl Fn([u8; W]) -> T,
    ) {
        let mut v = if order.is_empty() {
            a.view_mut()
        } else {
            a.view_mut().permuted_axes(order.to_vec())
        };
        for (x, c) in v.iter_mut().zip(bytes.chunks_exact(W)) {
            *x = f(c.try_into().unwrap_or([0; W]));
        }
    }
    match a {
        HostArray::F64(x) => go(x, order, bytes, f64::from_le_bytes),
        HostArray::F32(x) => go(x, order, bytes, f32::from_le_bytes),
        HostArray::I64(x) => go(x, order, bytes, i64::from_le_bytes),
        HostArray::I32(x) => go(x, order, bytes, i32::from_le_bytes),
        HostArray::Bool(x) => go(x, order, bytes, |b: [u8; 1]| b[0] != 0),
    }
}
