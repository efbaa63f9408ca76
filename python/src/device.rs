//! The CUDA side of the package: the device programs compiled for `"cuda"` run on, arrays
//! that live there (anything with `__cuda_array_interface__` — CuPy, Numba, PyTorch — or
//! DLPack — JAX, and the same), and
//! the handle a call on them returns without waiting for the device.

use std::sync::{Mutex, OnceLock};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};

use sdflow_codegen::cuda::device::{DeviceHandle, RecordingDevice};
use sdflow_codegen::cuda::exec::Completion as GpuCompletion;
use sdflow_ir::DType;
use sdflow_orchestration::component::GpuHandle;

use crate::{SdflowError, call_err};

/// The device every program compiled for `"cuda"` in this process runs on (one stream:
/// programs and calls are ordered on it), opened on first use: the one
/// `SDFLOW_CUDA_DEVICE` names (`sdflow_codegen::cuda::device::from_env`: a CUDA device
/// number, default 0; `emulated`, the generated CUDA run on the host; `recording`, a
/// device that checks arguments and records launches without running them).
pub(crate) fn device() -> PyResult<DeviceHandle> {
    static DEVICE: OnceLock<Result<DeviceHandle, String>> = OnceLock::new();
    DEVICE
        .get_or_init(|| {
            sdflow_codegen::cuda::device::from_env().map_err(|e| {
                if std::env::var(sdflow_codegen::cuda::device::DEVICE_ENV).is_ok() {
                    e.to_string()
                } else {
                    format!("the cuda backend needs a CUDA device: {e}")
                }
            })
        })
        .clone()
        .map_err(SdflowError::new_err)
}

/// DLPack's tensor description (`dlpack.h`, the unversioned `DLManagedTensor` a
/// `__dlpack__()` capsule named `dltensor` holds).
#[repr(C)]
struct DlTensor {
    data: *mut std::ffi::c_void,
    device_type: i32,
    device_id: i32,
    ndim: i32,
    dtype_code: u8,
    dtype_bits: u8,
    dtype_lanes: u16,
    shape: *const i64,
    strides: *const i64,
    byte_offset: u64,
}

/// DLPack's device types for CUDA memory: `kDLCUDA`, `kDLCUDAManaged`.
const DL_CUDA: [i32; 2] = [2, 13];

/// `value` as a DLPack device array (its `__dlpack__`), or `None` when it has no
/// `__dlpack__`. The capsule goes into `keep`: it owns the tensor until it is dropped.
fn dlpack_arg(
    name: &str,
    value: &Bound<'_, PyAny>,
    what: &dyn Fn(String) -> PyErr,
    keep: &mut Vec<Py<PyAny>>,
) -> PyResult<Option<DeviceArg>> {
    use pyo3::types::PyCapsule;
    use pyo3::types::PyCapsuleMethods as _;
    if !value.hasattr("__dlpack__")? {
        return Ok(None);
    }
    let (device_type, _): (i32, i32) = value
        .call_method0("__dlpack_device__")
        .and_then(|d| d.extract())
        .map_err(|_| what("__dlpack_device__() did not give (device type, id)".into()))?;
    if !DL_CUDA.contains(&device_type) {
        return Err(what(format!(
            "is on DLPack device type {device_type}, not on a CUDA device (2); pass a device array"
        )));
    }
    // Stream 1, the legacy default stream: the producer orders its work before it, and
    // the call waits for it and signals it (as for `__cuda_array_interface__`).
    let kwargs = PyDict::new(value.py());
    kwargs.set_item("stream", 1)?;
    let capsule = value
        .call_method("__dlpack__", (), Some(&kwargs))
        .map_err(|e| what(format!("__dlpack__(stream=1) failed: {e}")))?;
    let cap = capsule
        .cast::<PyCapsule>()
        .map_err(|_| what("__dlpack__() did not return a capsule".into()))?;
    let ptr = cap
        .pointer_checked(Some(c"dltensor"))
        .map_err(|_| what("__dlpack__() did not return an unused 'dltensor' capsule".into()))?;
    // SAFETY: a `dltensor` capsule holds a `DLManagedTensor`, whose first member is the
    // `DLTensor`; the capsule (kept below) keeps it alive.
    let t = unsafe { &*ptr.as_ptr().cast::<DlTensor>() };
    let ndim = usize::try_from(t.ndim).map_err(|_| what(format!("ndim {}", t.ndim)))?;
    // SAFETY: `shape` (and `strides`, unless null) hold `ndim` values.
    let dims = |p: *const i64| unsafe { std::slice::from_raw_parts(p, ndim) }.to_vec();
    let shape: Vec<usize> = if ndim == 0 {
        Vec::new()
    } else {
        dims(t.shape)
            .into_iter()
            .map(|n| usize::try_from(n).map_err(|_| what(format!("extent {n}"))))
            .collect::<PyResult<_>>()?
    };
    let dtype = match (t.dtype_code, t.dtype_bits, t.dtype_lanes) {
        (2, 64, 1) => DType::F64,
        (2, 32, 1) => DType::F32,
        (0, 64, 1) => DType::I64,
        (0, 32, 1) => DType::I32,
        (6, 8, 1) | (1, 8, 1) => DType::Bool,
        (c, b, l) => {
            return Err(what(format!(
                "element type (code {c}, {b} bits, {l} lanes) is not supported (float64, float32, int64, int32, bool)"
            )));
        }
    };
    let strides: Vec<isize> = if ndim == 0 {
        Vec::new()
    } else if t.strides.is_null() {
        row_major(&shape)
    } else {
        dims(t.strides).into_iter().map(|s| s as isize).collect()
    };
    let data = (t.data as u64).wrapping_add(t.byte_offset);
    keep.push(capsule.unbind());
    Ok(Some(DeviceArg {
        name: name.to_string(),
        ptr: data,
        dtype,
        shape,
        strides,
        stream: Some(1),
    }))
}

/// Row-major strides, in elements, of an array of these extents.
fn row_major(shape: &[usize]) -> Vec<isize> {
    let mut st = vec![0isize; shape.len()];
    let mut acc = 1isize;
    for (s, &n) in st.iter_mut().zip(shape).rev() {
        *s = acc;
        acc *= n.max(1) as isize;
    }
    st
}

/// An array on the device, as its `__cuda_array_interface__` (or DLPack) describes it.
pub(crate) struct DeviceArg {
    pub name: String,
    pub ptr: u64,
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// In elements.
    pub strides: Vec<isize>,
    /// The stream its producer used, to order the call after (none: no ordering asked).
    pub stream: Option<u64>,
}

/// `value` read as a [`DeviceArg`] through its `__cuda_array_interface__`, else through
/// DLPack (`__dlpack__`, `__dlpack_device__`; the capsule goes into `keep`), or `None`
/// when it has neither (it is not a device array). A NumPy array, which has DLPack on
/// the CPU, is `None` too.
pub(crate) fn device_arg(
    program: &str,
    name: &str,
    value: &Bound<'_, PyAny>,
    keep: &mut Vec<Py<PyAny>>,
) -> PyResult<Option<DeviceArg>> {
    let Ok(iface) = value.getattr("__cuda_array_interface__") else {
        if value.cast::<numpy::PyUntypedArray>().is_ok() {
            return Ok(None);
        }
        let what = |m: String| {
            call_err(format!(
                "program '{program}': argument '{name}': {m} (DLPack)"
            ))
        };
        return dlpack_arg(name, value, &what, keep);
    };
    let what = |m: String| {
        call_err(format!(
            "program '{program}': argument '{name}': {m} (__cuda_array_interface__)"
        ))
    };
    let iface = iface
        .cast::<PyDict>()
        .map_err(|_| what("is not a dict".into()))?;
    let item = |k: &str| -> PyResult<Option<Bound<'_, PyAny>>> {
        Ok(iface.get_item(k)?.filter(|v| !v.is_none()))
    };
    let shape: Vec<usize> = item("shape")?
        .ok_or_else(|| what("has no 'shape'".into()))?
        .extract()
        .map_err(|_| what("'shape' is not a tuple of sizes".into()))?;
    let typestr_obj = item("typestr")?.ok_or_else(|| what("has no 'typestr'".into()))?;
    let typestr = typestr_obj
        .cast::<PyString>()
        .map_err(|_| what("'typestr' is not a string".into()))?
        .to_str()?
        .to_string();
    let dtype = dtype_of_typestr(&typestr).ok_or_else(|| {
        what(format!(
            "element type '{typestr}' is not supported (float64, float32, int64, int32, bool in native byte order)"
        ))
    })?;
    let data = item("data")?.ok_or_else(|| what("has no 'data'".into()))?;
    let data = data
        .cast::<PyTuple>()
        .map_err(|_| what("'data' is not a (pointer, read-only) pair".into()))?;
    let (ptr, readonly): (u64, bool) = data
        .extract()
        .map_err(|_| what("'data' is not a (pointer, read-only) pair".into()))?;
    if readonly {
        return Err(what(
            "the array is read-only; pass a writeable array".into(),
        ));
    }
    if item("mask")?.is_some() {
        return Err(what("masked arrays are not supported".into()));
    }
    let size = dtype.size_bytes() as isize;
    let strides: Vec<isize> = match item("strides")? {
        None => row_major(&shape),
        Some(st) => {
            let bytes: Vec<isize> = st
                .extract()
                .map_err(|_| what("'strides' is not a tuple of byte strides".into()))?;
            if bytes.len() != shape.len() {
                return Err(what(format!(
                    "{} strides for {} dimensions",
                    bytes.len(),
                    shape.len()
                )));
            }
            if let Some(b) = bytes.iter().find(|&&b| b % size != 0) {
                return Err(what(format!(
                    "stride {b} (bytes) is not a multiple of the element size {size}"
                )));
            }
            bytes.into_iter().map(|b| b / size).collect()
        }
    };
    let elements: usize = shape.iter().product();
    if ptr == 0 && elements > 0 {
        return Err(what("the data pointer is null".into()));
    }
    let stream = match item("stream")? {
        None => None,
        Some(s) => {
            let s: u64 = s
                .extract()
                .map_err(|_| what("'stream' is not an integer".into()))?;
            if s == 0 {
                return Err(what(
                    "'stream' is 0, which the interface disallows (1: legacy default stream, 2: per-thread default stream)".into(),
                ));
            }
            Some(s)
        }
    };
    Ok(Some(DeviceArg {
        name: name.to_string(),
        ptr,
        dtype,
        shape,
        strides,
        stream,
    }))
}

/// The element type of a `typestr` such as `<f8`, in native byte order.
fn dtype_of_typestr(t: &str) -> Option<DType> {
    let mut chars = t.chars();
    let order = chars.next()?;
    let native = if cfg!(target_endian = "little") {
        '<'
    } else {
        '>'
    };
    let rest = chars.as_str();
    let one_byte = rest == "b1";
    if !(order == native || order == '=' || (order == '|' && one_byte)) {
        return None;
    }
    match rest {
        "f8" => Some(DType::F64),
        "f4" => Some(DType::F32),
        "i8" => Some(DType::I64),
        "i4" => Some(DType::I32),
        "b1" => Some(DType::Bool),
        _ => None,
    }
}

/// The end of a call on device arrays: the call returned once its work was enqueued on
/// the program's stream; `wait()` blocks until it is done and raises the program's error
/// if it failed, `done` says whether it is done without waiting.
#[pyclass(module = "sdflow._sdflow", name = "Completion", frozen)]
pub(crate) struct Completion {
    program: GpuHandle,
    name: String,
    pending: Mutex<Option<GpuCompletion>>,
    /// The arrays of the call, kept alive until it is waited on (or this is dropped).
    keep: Mutex<Vec<Py<PyAny>>>,
}

impl Completion {
    pub(crate) fn new(
        program: GpuHandle,
        name: String,
        done: GpuCompletion,
        keep: Vec<Py<PyAny>>,
    ) -> Completion {
        Completion {
            program,
            name,
            pending: Mutex::new(Some(done)),
            keep: Mutex::new(keep),
        }
    }
}

#[pymethods]
impl Completion {
    /// Waits for the call's work (releasing the GIL meanwhile); raises `CallError` when
    /// the program reported an error (an index out of range, a failed check). Waiting
    /// again returns at once.
    fn wait(&self, py: Python<'_>) -> PyResult<()> {
        let Some(done) = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        else {
            return Ok(());
        };
        let program = self.program.clone();
        let r = py
            .detach(move || program.lock().unwrap_or_else(|e| e.into_inner()).wait(done))
            .map_err(|e| call_err(e.to_string()));
        self.keep.lock().unwrap_or_else(|e| e.into_inner()).clear();
        r
    }

    /// Whether the call's work is done (without waiting).
    #[getter]
    fn done(&self) -> bool {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_none_or(GpuCompletion::is_done)
    }

    /// Whether the call's work is done and the program reported an error meanwhile (in
    /// this call or one before it), read without waiting: :meth:`wait` then raises it.
    #[getter]
    fn failed(&self) -> bool {
        self.done()
            && self
                .program
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .failed()
    }

    fn __repr__(&self) -> String {
        format!(
            "<sdflow.Completion of '{}': {}>",
            self.name,
            if self.done() { "done" } else { "running" }
        )
    }
}

/// Allocates `nbytes` of zeroed memory on the package's device and returns its address
/// (for tests of the device call path on the recording device; the memory lives as long
/// as the process).
#[pyfunction]
pub(crate) fn _device_alloc(nbytes: usize) -> PyResult<u64> {
    device()?
        .lock()
        .alloc_zeroed(nbytes)
        .map_err(|e| SdflowError::new_err(e.to_string()))
}

/// The calls made on the package's device so far, one line each, when it is the
/// recording device (`SDFLOW_CUDA_DEVICE=recording`).
#[pyfunction]
pub(crate) fn _device_log() -> PyResult<Vec<String>> {
    let handle = device()?;
    let dev = handle.lock();
    let rec = dev
        .as_any()
        .downcast_ref::<RecordingDevice>()
        .ok_or_else(|| SdflowError::new_err("the device is not the recording device"))?;
    Ok(rec.calls().iter().map(|c| format!("{c:?}")).collect())
}
