//! A compiled, loaded program and its calling paths: [`CompiledProgram::bind`] checks
//! names, element types, shapes, strides and aliasing once and precomputes the argument
//! vectors; [`BoundCall::call`] is then one FFI call. [`CompiledProgram::call_checked`]
//! does both every time.
//!
//! Why one file of this size: the compiled program's calling paths (`bind`, bound
//! calls, checked calls, interpreter-style bindings) share the library's entry points
//! and state pool; argument checks are `args.rs`.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use sdflow_ir::interp::{Bindings, HostArray};
use sdflow_ir::{DType, Value};

use crate::CodegenError;
use crate::abi::Signature;
use crate::args::{
    CheckedArgs, PassedArray, Spans, byte_span, check_arguments, declared_order, declared_orders,
};
use crate::cache::Origin;
use crate::cfamily::sites::{RECORD_LEN, Sites};

type InitFn = unsafe extern "C" fn(*const i64, *const f64) -> *mut c_void;
type RunFn = unsafe extern "C" fn(*mut c_void, *const *mut c_void, *const i64, *const f64) -> i32;
type FinalizeFn = unsafe extern "C" fn(*mut c_void);
type ThreadsFn = unsafe extern "C" fn(i32);
type ErrorFn = unsafe extern "C" fn(*mut c_void, *mut i64);
type MessageFn = unsafe extern "C" fn() -> *const std::ffi::c_char;

/// The most OpenMP threads a compiled program is run with (`threads` in the
/// configuration, `sdflow bench --threads`, [`CompiledProgram::set_threads`]). The
/// OpenMP runtime starts every thread a parallel region asks for, each with its own
/// stack: GNU libgomp fails from about 32 000 threads on a Linux machine with the
/// default limits (`vm.max_map_count`, `ulimit -u`) and crashes the process at 65 536;
/// 4096 is well within those limits and above the hardware threads of a CPU node today.
pub const MAX_THREADS: usize = 4096;

/// A program compiled to a shared library and loaded.
pub struct CompiledProgram {
    // The function pointers point into the library. It is never unloaded: the OpenMP
    // runtime it pulls in keeps worker threads alive after a call, and unloading the
    // library (and with it the runtime) under them crashes the process.
    _lib: std::mem::ManuallyDrop<libloading::Library>,
    init: InitFn,
    run: RunFn,
    finalize: FinalizeFn,
    set_threads: ThreadsFn,
    error: ErrorFn,
    /// Why the calling thread's last `init` failed.
    init_message: Option<MessageFn>,
    /// MPI, in a program that exchanges halos.
    mpi: Option<crate::mpi::Mpi>,
    /// Where the generated code checks, and the conditions `bind` evaluates.
    sites: Sites,
    /// The calling convention.
    pub signature: Signature,
    /// Static symbol values (for shape checks).
    statics: BTreeMap<String, i64>,
    /// The program's name.
    pub name: String,
    /// The loaded library's path: its build cache entry, or, for a build without a
    /// cache, the scratch file it was loaded from (removed once loaded).
    pub library: PathBuf,
    /// Whether this load compiled the library or found it in the cache.
    pub origin: Origin,
    /// Program states (transients allocated by `init`) no bound call holds, by the
    /// symbol values they were allocated for: a later `bind` with the same values takes
    /// one instead of allocating again, so binding in a loop costs the checks only.
    idle: std::sync::Mutex<Vec<IdleState>>,
}

/// A program state no bound call holds.
struct IdleState {
    ints: Vec<i64>,
    state: StatePtr,
}

/// A state pointer, moved between threads with the program that owns it.
struct StatePtr(*mut c_void);

// SAFETY: a state is plain memory the generated code allocates; it is used by one bound
// call at a time (the pool hands each out once), never concurrently.
unsafe impl Send for StatePtr {}

/// States kept idle per program; beyond this, returned states are finalized.
const MAX_IDLE_STATES: usize = 8;

/// Why a call could not be bound or made.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CallError {
    /// An argument is missing, unknown, of the wrong type or shape, or aliases another.
    #[error("program '{program}': {message}")]
    Bind {
        /// The program.
        program: String,
        /// What is wrong, naming the argument.
        message: String,
    },
    /// The program reported an error while running.
    #[error("program '{program}': {message}")]
    Run {
        /// The program.
        program: String,
        /// What happened.
        message: String,
    },
}

/// Element types that can be passed as arrays.
pub trait Element: Copy + 'static {
    /// The IR element type.
    const DTYPE: DType;
}

impl Element for f64 {
    const DTYPE: DType = DType::F64;
}
impl Element for f32 {
    const DTYPE: DType = DType::F32;
}
impl Element for i64 {
    const DTYPE: DType = DType::I64;
}
impl Element for i32 {
    const DTYPE: DType = DType::I32;
}
impl Element for bool {
    const DTYPE: DType = DType::Bool;
}

#[derive(Clone, Debug)]
struct RawArray {
    ptr: *mut u8,
    dtype: DType,
    shape: Vec<usize>,
    /// In elements.
    strides: Vec<isize>,
}

impl RawArray {
    /// Element offsets (in elements) of every element, in row-major index order.
    fn offsets(&self) -> Vec<isize> {
        let mut out = vec![0isize];
        for (n, st) in self.shape.iter().zip(&self.strides) {
            let mut next = Vec::with_capacity(out.len() * n);
            for o in &out {
                for i in 0..*n as isize {
                    next.push(o + i * st);
                }
            }
            out = next;
        }
        out
    }

    /// A copy of the elements as a row-major host array.
    fn copy_out(&self) -> HostArray {
        let offs = self.offsets();
        let shape = ndarray::IxDyn(&self.shape);
        macro_rules! read {
            ($t:ty, $v:ident) => {{
                let p = self.ptr as *const $t;
                // SAFETY: `Args` was built from a live mutable borrow (or a raw buffer
                // whose caller promised validity) covering every element these offsets
                // reach, for as long as the arguments live.
                let v: Vec<$t> = offs
                    .iter()
                    .map(|&o| unsafe { p.offset(o).read() })
                    .collect();
                HostArray::$v(
                    ndarray::ArrayD::from_shape_vec(shape, v).expect("the shape's element count"),
                )
            }};
        }
        match self.dtype {
            DType::F64 => read!(f64, F64),
            DType::F32 => read!(f32, F32),
            DType::I64 => read!(i64, I64),
            DType::I32 => read!(i32, I32),
            DType::Bool => read!(bool, Bool),
        }
    }

    /// Writes a host array of the same type and shape back into the elements.
    fn copy_in(&self, h: &HostArray) {
        if h.shape() != self.shape.as_slice() || h.dtype() != self.dtype {
            return;
        }
        let offs = self.offsets();
        macro_rules! write {
            ($t:ty, $a:expr) => {{
                let p = self.ptr as *mut $t;
                for (&o, v) in offs.iter().zip($a.iter()) {
                    // SAFETY: as in `copy_out`; the borrow is mutable.
                    unsafe { p.offset(o).write(*v) }
                }
            }};
        }
        match h {
            HostArray::F64(a) => write!(f64, a),
            HostArray::F32(a) => write!(f32, a),
            HostArray::I64(a) => write!(i64, a),
            HostArray::I32(a) => write!(i32, a),
            HostArray::Bool(a) => write!(bool, a),
        }
    }

    /// The byte range the array's elements span.
    fn span(&self) -> (u64, u64) {
        byte_span(self.ptr as u64, self.dtype, &self.shape, &self.strides)
    }
}

/// Arguments of a call, by name: arrays (borrowed mutably for as long as the call is
/// bound) and symbol values.
#[derive(Default)]
pub struct Args<'a> {
    arrays: Vec<(String, RawArray)>,
    ints: BTreeMap<String, i64>,
    floats: BTreeMap<String, f64>,
    _borrow: PhantomData<&'a mut ()>,
}

impl<'a> Args<'a> {
    /// No arguments yet.
    pub fn new() -> Self {
        Args::default()
    }

    /// An array argument from an `ndarray` view (any layout; the program checks it).
    pub fn view<T: Element, D: ndarray::Dimension>(
        mut self,
        name: &str,
        mut a: ndarray::ArrayViewMut<'a, T, D>,
    ) -> Self {
        let raw = RawArray {
            ptr: a.as_mut_ptr() as *mut u8,
            dtype: T::DTYPE,
            shape: a.shape().to_vec(),
            strides: a.strides().to_vec(),
        };
        self.arrays.push((name.to_string(), raw));
        self
    }

    /// An array argument from an owned `ndarray` array.
    pub fn array<T: Element, D: ndarray::Dimension>(
        self,
        name: &str,
        a: &'a mut ndarray::Array<T, D>,
    ) -> Self {
        self.view(name, a.view_mut())
    }

    /// An array argument from a raw host buffer.
    ///
    /// # Safety
    /// `ptr` must point to memory valid for reads and writes of every element that
    /// `shape` and `strides` (in elements) describe, of type `dtype`, for as long as the
    /// call stays bound, and nothing else may access it during a call.
    pub unsafe fn raw(
        mut self,
        name: &str,
        ptr: *mut u8,
        dtype: DType,
        shape: &[usize],
        strides: &[isize],
    ) -> Self {
        let raw = RawArray {
            ptr,
            dtype,
            shape: shape.to_vec(),
            strides: strides.to_vec(),
        };
        self.arrays.push((name.to_string(), raw));
        self
    }

    /// An array argument from an interpreter-style host array, in whatever layout it
    /// has (see [`CompiledProgram::lay_out`] for the one a program declares).
    pub fn host(self, name: &str, a: &'a mut HostArray) -> Self {
        match a {
            HostArray::F64(x) => self.view(name, x.view_mut()),
            HostArray::F32(x) => self.view(name, x.view_mut()),
            HostArray::I64(x) => self.view(name, x.view_mut()),
            HostArray::I32(x) => self.view(name, x.view_mut()),
            HostArray::Bool(x) => self.view(name, x.view_mut()),
        }
    }

    /// The value given for integer symbol `name`.
    pub fn int_value(&self, name: &str) -> Option<i64> {
        self.ints.get(name).copied()
    }

    /// The integer and float symbol values given, by name.
    pub fn symbols(&self) -> (&BTreeMap<String, i64>, &BTreeMap<String, f64>) {
        (&self.ints, &self.floats)
    }

    /// Removes the value given for integer symbol `name` and returns it.
    pub fn take_int(&mut self, name: &str) -> Option<i64> {
        self.ints.remove(name)
    }

    /// Whether an array called `name` is among the arguments.
    pub fn has_array(&self, name: &str) -> bool {
        self.arrays.iter().any(|(n, _)| n == name)
    }

    /// Whether a symbol value called `name` is among the arguments.
    pub fn has_symbol(&self, name: &str) -> bool {
        self.ints.contains_key(name) || self.floats.contains_key(name)
    }

    /// Runs `f` on interpreter-style bindings holding copies of these arguments (arrays
    /// copied in, symbols as given), then copies every array back: how programs run
    /// where the arrays cannot be passed in place (the interpreter, a GPU).
    pub fn run_copied<E>(
        self,
        types: &BTreeMap<String, DType>,
        f: impl FnOnce(&mut Bindings) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut b = Bindings::default();
        for (name, a) in &self.arrays {
            b.arrays.insert(name.clone(), a.copy_out());
        }
        for (k, v) in &self.ints {
            let t = types.get(k).copied().unwrap_or(DType::I64);
            b.symbols.insert(k.clone(), Value::I64(*v).cast(t));
        }
        for (k, v) in &self.floats {
            let t = types.get(k).copied().unwrap_or(DType::F64);
            b.symbols.insert(k.clone(), Value::F64(*v).cast(t));
        }
        f(&mut b)?;
        for (name, a) in &self.arrays {
            if let Some(h) = b.arrays.get(name) {
                a.copy_in(h);
            }
        }
        Ok(())
    }

    /// An integer symbol's value.
    pub fn int(mut self, name: &str, v: i64) -> Self {
        self.ints.insert(name.to_string(), v);
        self
    }

    /// A float symbol's value.
    pub fn float(mut self, name: &str, v: f64) -> Self {
        self.floats.insert(name.to_string(), v);
        self
    }
}

/// A call with its arguments checked and laid out: [`BoundCall::call`] is one FFI call.
/// It owns the program's state (its transients, allocated once by `init`).
pub struct BoundCall<'a> {
    program: &'a CompiledProgram,
    state: *mut c_void,
    ptrs: Vec<*mut c_void>,
    /// Stand-in storage for arguments without elements (see `bind`).
    _empty: Vec<Vec<u64>>,
    ints: Vec<i64>,
    floats: Vec<f64>,
    /// The integer symbol values `state` was allocated for (its key in the idle pool;
    /// `init` reads no float symbol).
    init_ints: Vec<i64>,
    _borrow: PhantomData<&'a mut ()>,
}

impl BoundCall<'_> {
    /// Sets float symbol `name` to `value` for the following calls; every other
    /// argument stays as bound (no float symbol sizes or places anything).
    pub fn set_float(&mut self, name: &str, value: f64) -> Result<(), CallError> {
        let floats = &self.program.signature.floats;
        match floats.iter().position(|f| f == name) {
            Some(k) => {
                self.floats[k] = value;
                Ok(())
            }
            None => Err(CallError::Bind {
                program: self.program.name.clone(),
                message: if floats.is_empty() {
                    format!("'{name}' is not a float symbol: the program has none")
                } else {
                    format!(
                        "'{name}' is not a float symbol (float symbols: {})",
                        floats.join(", ")
                    )
                },
            }),
        }
    }

    /// Runs the program once on the bound arguments.
    pub fn call(&mut self) -> Result<(), CallError> {
        self.call_inner().map_err(|e| self.program.fail(e))
    }

    fn call_inner(&mut self) -> Result<(), CallError> {
        debug_assert_eq!(self.ptrs.len(), self.program.signature.arrays.len());
        // SAFETY: `bind` checked every array against the program's signature (element
        // type, shape, strides, no aliasing) and holds the borrows for this call's
        // lifetime; the vectors have the lengths `run` reads; `state` came from `init`.
        let rc = unsafe {
            (self.program.run)(
                self.state,
                self.ptrs.as_ptr(),
                self.ints.as_ptr(),
                self.floats.as_ptr(),
            )
        };
        match rc {
            0 => Ok(()),
            3 => {
                let mut rec = [0i64; RECORD_LEN];
                // SAFETY: `error` copies the state's error record, `RECORD_LEN` values.
                unsafe { (self.program.error)(self.state, rec.as_mut_ptr()) };
                Err(CallError::Run {
                    program: self.program.name.clone(),
                    message: self.program.sites.message(&rec),
                })
            }
            2 => Err(CallError::Run {
                program: self.program.name.clone(),
                message: "integer division by zero, an index-table entry out of bounds, a nested SDFG's window outside its array or not the size of its connector, or an allocation failure, in the program"
                    .into(),
            }),
            other => Err(CallError::Run {
                program: self.program.name.clone(),
                message: format!("status {other}"),
            }),
        }
    }
}

impl Drop for BoundCall<'_> {
    fn drop(&mut self) {
        let p = self.program;
        let mut idle = p.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE_STATES {
            idle.push(IdleState {
                ints: std::mem::take(&mut self.init_ints),
                state: StatePtr(self.state),
            });
        } else {
            drop(idle);
            // SAFETY: `state` came from this library's `init` and is finalized once.
            unsafe { (p.finalize)(self.state) }
        }
    }
}

impl Drop for CompiledProgram {
    fn drop(&mut self) {
        let idle = std::mem::take(self.idle.get_mut().unwrap_or_else(|e| e.into_inner()));
        for s in idle {
            // SAFETY: each idle state came from this library's `init`, is held by no
            // bound call (they borrow the program) and is finalized once.
            unsafe { (self.finalize)(s.state.0) }
        }
    }
}

impl CompiledProgram {
    /// Loads a library built from a program with `signature`.
    pub(crate) fn load(
        library: &Path,
        signature: Signature,
        sites: Sites,
        statics: BTreeMap<String, i64>,
        name: &str,
        origin: Origin,
    ) -> Result<CompiledProgram, CodegenError> {
        let err = |e: libloading::Error| CodegenError::Load(format!("{}: {e}", library.display()));
        // SAFETY: the library is one sdflow generated; loading it runs no initializers
        // of ours beyond the C runtime's.
        let lib = unsafe { libloading::Library::new(library) }.map_err(err)?;
        // SAFETY: the generated code defines these three functions with these types.
        let (init, run, finalize, set_threads, error) = unsafe {
            (
                *lib.get::<InitFn>(b"sdflow_init\0").map_err(err)?,
                *lib.get::<RunFn>(b"sdflow_run\0").map_err(err)?,
                *lib.get::<FinalizeFn>(b"sdflow_finalize\0").map_err(err)?,
                *lib.get::<ThreadsFn>(b"sdflow_set_num_threads\0")
                    .map_err(err)?,
                *lib.get::<ErrorFn>(b"sdflow_error\0").map_err(err)?,
            )
        };
        // SAFETY: where the generated code defines these, it is with these types.
        let (init_message, mpi) = unsafe {
            let init_message = lib
                .get::<MessageFn>(b"sdflow_init_message\0")
                .ok()
                .map(|f| *f);
            let mpi = (|| {
                Some(crate::mpi::Mpi {
                    world: *lib.get(b"sdflow_mpi_world\0").ok()?,
                    abort: *lib.get(b"sdflow_mpi_abort\0").ok()?,
                    barrier: *lib.get(b"sdflow_mpi_barrier\0").ok()?,
                    sum: *lib.get(b"sdflow_mpi_sum_i64\0").ok()?,
                    gather: *lib.get(b"sdflow_mpi_gather\0").ok()?,
                })
            })();
            (init_message, mpi)
        };
        Ok(CompiledProgram {
            _lib: std::mem::ManuallyDrop::new(lib),
            init,
            run,
            finalize,
            set_threads,
            error,
            init_message,
            mpi,
            sites,
            signature,
            statics,
            name: name.to_string(),
            library: library.to_path_buf(),
            origin,
            idle: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// A state for these integer symbol values: an idle one allocated for the same
    /// values, or a new one from `init` (null when it could not allocate).
    fn take_state(&self, ints: &[i64], floats: &[f64]) -> *mut c_void {
        {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(k) = idle.iter().position(|s| s.ints == ints) {
                return idle.swap_remove(k).state.0;
            }
        }
        // SAFETY: `ints` and `floats` hold one value per symbol of the signature.
        unsafe { (self.init)(ints.as_ptr(), floats.as_ptr()) }
    }

    /// Sets the number of threads its parallel region uses (0: the OpenMP default,
    /// `OMP_NUM_THREADS` or the core count), at most [`MAX_THREADS`] (more are taken as
    /// that many). Affects every call of this library.
    pub fn set_threads(&self, n: usize) {
        // SAFETY: a plain setter in the generated library.
        unsafe { (self.set_threads)(n.min(MAX_THREADS) as i32) }
    }

    /// MPI, when the program exchanges halos (its library is linked with MPI).
    pub fn mpi(&self) -> Option<crate::mpi::Mpi> {
        self.mpi
    }

    /// An error of a program that exchanges halos, running on several ranks, stops every
    /// rank: the others would wait for this one at its next exchange. Its message goes
    /// to standard error, led by the rank, and MPI aborts the run. Elsewhere `e` is
    /// returned.
    fn fail(&self, e: CallError) -> CallError {
        if let Some(m) = self.mpi
            && let Ok((rank, size)) = m.world()
            && size > 1
        {
            m.abort_with(rank, &e);
        }
        e
    }

    fn bind_err(&self, message: String) -> CallError {
        CallError::Bind {
            program: self.name.clone(),
            message,
        }
    }

    /// Checks the arguments once and lays them out for [`BoundCall::call`].
    pub fn bind<'a>(&'a self, args: Args<'a>) -> Result<BoundCall<'a>, CallError> {
        self.bind_inner(args).map_err(|e| self.fail(e))
    }

    fn bind_inner<'a>(&'a self, args: Args<'a>) -> Result<BoundCall<'a>, CallError> {
        let sig = &self.signature;
        let passed: Vec<PassedArray<'_>> = args
            .arrays
            .iter()
            .map(|(name, a)| PassedArray {
                name,
                dtype: a.dtype,
                shape: &a.shape,
                strides: &a.strides,
            })
            .collect();
        let checked = check_arguments(sig, &self.statics, &passed, &args.ints, &args.floats)
            .map_err(|m| self.bind_err(m))?;
        let CheckedArgs {
            values,
            mut ints,
            mut floats,
            arrays,
        } = checked;
        let mut ptrs = Vec::new();
        let mut empty: Vec<Vec<u64>> = Vec::new();
        let mut spans = Spans::default();
        for (spec, (k, have, strides)) in sig.arrays.iter().zip(&arrays) {
            let a = &args.arrays[*k].1;
            spans
                .claim(a.span(), &spec.name)
                .map_err(|m| self.bind_err(m))?;
            if have.contains(&0) && !have.is_empty() {
                // An array without elements: the program never reaches one of them, but
                // a failed index-table lookup reads index 0 while it raises the error;
                // give it a zeroed element at every index such a read can form.
                let too_big = || {
                    self.bind_err(format!(
                        "'{}' has no elements but strides {strides:?} too large to stand in for",
                        spec.name
                    ))
                };
                let (mut lo, mut hi) = (0i64, 0i64);
                for (n, st) in have.iter().zip(strides.iter()) {
                    let reach = (n.max(&1) - 1).checked_mul(*st).ok_or_else(too_big)?;
                    if reach < 0 {
                        lo = lo.checked_add(reach).ok_or_else(too_big)?;
                    } else {
                        hi = hi.checked_add(reach).ok_or_else(too_big)?;
                    }
                }
                let elems = hi
                    .checked_sub(lo)
                    .and_then(|x| x.checked_add(1))
                    .and_then(|x| usize::try_from(x).ok())
                    .filter(|&x| x <= 1 << 32)
                    .ok_or_else(too_big)?;
                let bytes = elems * spec.dtype.size_bytes();
                let mut buf = vec![0u64; bytes.div_ceil(8).max(1)];
                let base = buf.as_mut_ptr().cast::<u8>();
                // SAFETY: `-lo` elements lie within `buf` (it holds `hi - lo + 1`).
                let p = unsafe { base.add((-lo) as usize * spec.dtype.size_bytes()) };
                ptrs.push(p as *mut c_void);
                empty.push(buf);
                continue;
            }
            ptrs.push(a.ptr as *mut c_void);
        }
        let init_ints = ints.clone();
        let state = self.take_state(&ints, &floats);
        // The in-bounds conditions of the nodes that need only these symbols, after the
        // symbol values: a node whose condition fails (or overflows) runs checked.
        for c in &self.sites.bind_checks {
            ints.push(c.eval_map(&values).is_ok_and(|v| v != 0) as i64);
        }
        if state.is_null() {
            // SAFETY: the message is the calling thread's, NUL-terminated, written by the
            // `init` that just failed on this thread.
            let said = self
                .init_message
                .map(|f| {
                    unsafe { std::ffi::CStr::from_ptr(f()) }
                        .to_string_lossy()
                        .into_owned()
                })
                .filter(|m| !m.is_empty());
            return Err(CallError::Run {
                program: self.name.clone(),
                message: said
                    .unwrap_or_else(|| "could not allocate the program's transients".into()),
            });
        }
        if ints.is_empty() {
            ints.push(0);
        }
        if floats.is_empty() {
            floats.push(0.0);
        }
        Ok(BoundCall {
            program: self,
            state,
            ptrs,
            _empty: empty,
            ints,
            floats,
            init_ints,
            _borrow: PhantomData,
        })
    }

    /// Puts `a` into the dense layout this program declares for argument `name` (its
    /// strides with the symbol values `ints` and the static ones), copying only when it
    /// is in another; unknown names and scalars are left alone.
    pub fn lay_out(&self, name: &str, a: &mut HostArray, ints: &BTreeMap<String, i64>) {
        let Some(spec) = self.signature.arrays.iter().find(|s| s.name == name) else {
            return;
        };
        let mut values = self.statics.clone();
        values.extend(ints.iter().map(|(k, v)| (k.clone(), *v)));
        let order = declared_order(spec, a.shape(), &values);
        let order = (!order.is_empty()).then_some(order.as_slice());
        match a {
            HostArray::F64(x) => drop(laid_out(x, order)),
            HostArray::F32(x) => drop(laid_out(x, order)),
            HostArray::I64(x) => drop(laid_out(x, order)),
            HostArray::I32(x) => drop(laid_out(x, order)),
            HostArray::Bool(x) => drop(laid_out(x, order)),
        }
    }

    /// Binds and calls once.
    pub fn call_checked(&self, args: Args<'_>) -> Result<(), CallError> {
        self.bind(args)?.call()
    }

    /// Runs on interpreter-style bindings (arrays updated in place, as
    /// `sdflow_ir::interp::run` does), for comparing the two.
    pub fn run_bindings(&self, b: &mut Bindings) -> Result<(), CallError> {
        let mut args = Args::new();
        let mut ints = BTreeMap::new();
        for (k, v) in &b.symbols {
            if self.signature.floats.contains(k) {
                args = args.float(k, v.as_f64());
            } else if self.signature.ints.contains(k) {
                ints.insert(k.clone(), v.as_i64());
            }
        }
        for (k, v) in ints {
            args = args.int(&k, v);
        }
        for spec in &self.signature.arrays {
            if !b.arrays.contains_key(&spec.name) {
                return Err(self.bind_err(format!("missing argument '{}'", spec.name)));
            }
        }
        let layouts =
            declared_orders(&self.signature, &self.statics, b).map_err(|e| self.bind_err(e))?;
        for (name, h) in b.arrays.iter_mut() {
            if !self.signature.arrays.iter().any(|a| a.name == *name) {
                continue;
            }
            let order = layouts.get(name).map(Vec::as_slice);
            args = match h {
                HostArray::F64(a) => args.view(name, laid_out(a, order)),
                HostArray::F32(a) => args.view(name, laid_out(a, order)),
                HostArray::I64(a) => args.view(name, laid_out(a, order)),
                HostArray::I32(a) => args.view(name, laid_out(a, order)),
                HostArray::Bool(a) => args.view(name, laid_out(a, order)),
            };
        }
        self.call_checked(args)
    }
}

/// A mutable view of `a` in the dense layout `order` (dimensions slowest first; `None`:
/// row-major), its elements moved there first if they are laid out otherwise.
fn laid_out<'a, T: Element>(
    a: &'a mut ndarray::ArrayD<T>,
    order: Option<&[usize]>,
) -> ndarray::ArrayViewMutD<'a, T> {
    let row_major: Vec<usize> = (0..a.ndim()).collect();
    let order = order.unwrap_or(&row_major);
    let mut inverse = vec![0; order.len()];
    for (k, &d) in order.iter().enumerate() {
        inverse[d] = k;
    }
    let in_place = {
        let v = a.view().permuted_axes(order.to_vec());
        v.is_standard_layout()
    };
    if !in_place {
        let dense = a
            .view()
            .permuted_axes(order.to_vec())
            .as_standard_layout()
            .into_owned();
        *a = dense.permuted_axes(inverse);
    }
    a.view_mut()
}
