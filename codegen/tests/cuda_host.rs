//! The CUDA host layer without a GPU: programs run against a recording device, which
//! counts what the host asks of the stream. A call enqueues its kernels in program order
//! and returns without one synchronization; a condition on a device value is the only
//! thing that waits, once per evaluation; waiting on the completion reads the status.
//! Arguments are device arrays, checked once when a call is bound.

use sdflow_codegen::Origin;
use sdflow_codegen::cuda::array::DeviceArray;
use sdflow_codegen::cuda::device::{Call, DeviceHandle, RecordingDevice};
use sdflow_codegen::cuda::emit::{CudaEmitOptions, emit_cuda};
use sdflow_codegen::cuda::exec::{DeviceArgs, GpuProgram};
use sdflow_ir::interp::HostArray;
use sdflow_ir::{Block, DType, Sdfg, SdfgBuilder, StateId, SymExpr};

fn example(name: &str) -> Sdfg {
    let p = format!(
        "{}/../examples/{name}.sdfg.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut s = sdflow_ir::format::from_json(&std::fs::read_to_string(p).unwrap()).unwrap();
    sdflow_transforms::Pipeline::gpu().run(&mut s).unwrap();
    s
}

/// Loaded on a recording device (it takes any image: kernels are recorded, not run).
fn load(s: &Sdfg) -> GpuProgram {
    load_on(s, &DeviceHandle::new(RecordingDevice::new((9, 0))))
}

fn load_on(s: &Sdfg, device: &DeviceHandle) -> GpuProgram {
    let prog = emit_cuda(s, &CudaEmitOptions::default()).unwrap();
    GpuProgram::load(s, prog, b"image", device, Origin::Built).unwrap()
}

/// NVRTC compiles `s`'s CUDA for sm_90 (says so and passes without NVRTC).
fn compiles_with_nvrtc(s: &Sdfg) {
    use sdflow_codegen::cuda::nvrtc::{self, Arch, NvrtcOptions, Output};
    if let Err(e) = nvrtc::available() {
        eprintln!(
            "NVRTC compile of '{}' skipped: NVRTC not found ({e})",
            s.name
        );
        return;
    }
    let prog = emit_cuda(s, &CudaEmitOptions::default()).unwrap();
    let opts = NvrtcOptions {
        arch: Arch::new(9, 0),
        extra: vec!["--device-int128".into()],
    };
    if let Err(e) = nvrtc::compile(&prog.source, "program.cu", &opts, Output::Cubin) {
        panic!("'{}': {e}", s.name);
    }
}

/// The recording device's log (the handle's device is a `RecordingDevice`).
fn h2d_copies(p: &GpuProgram) -> Vec<usize> {
    let dev = p.device().lock();
    let rec = dev
        .as_any()
        .downcast_ref::<RecordingDevice>()
        .expect("a recording device");
    rec.calls()
        .iter()
        .filter_map(|c| match c {
            Call::CopyH2D { bytes, .. } => Some(*bytes),
            _ => None,
        })
        .collect()
}

#[test]
fn a_call_enqueues_every_kernel_in_order_and_never_waits() {
    let mut s = example("tridiagonal");
    // Static sizes: the device allocates transients once, at load.
    for (n, v) in [("NX", 16), ("NY", 8), ("NZ", 6)] {
        s.symbols.get_mut(n).unwrap().value = Some(sdflow_ir::Value::I64(v));
    }
    let mut p = load(&s);
    let sig = p.program().plan.signature.clone();
    assert!(sig.ints.is_empty(), "{:?}", sig.ints);
    let arrays: Vec<DeviceArray> = sig
        .arrays
        .iter()
        .map(|_| DeviceArray::zeros(p.device(), DType::F64, &[16, 8, 6]).unwrap())
        .collect();
    let bind = |p: &GpuProgram, arrays: &[DeviceArray]| {
        let mut args = DeviceArgs::new();
        for (spec, a) in sig.arrays.iter().zip(arrays) {
            args = args.array(&spec.name, a);
        }
        p.bind(args).unwrap()
    };
    let call = bind(&p, &arrays);
    let counters = |p: &GpuProgram| p.device().lock().counters();
    let before = counters(&p);
    let done = p.call_bound(&call).unwrap();
    let after = counters(&p);
    assert_eq!(
        after.syncs - before.syncs,
        0,
        "a call never waits for the device"
    );
    assert_eq!(after.copies, before.copies, "device arrays: no copies");
    // init, forward for k = 1..5, last, backward for k = 4..0; the error flags' peek.
    assert_eq!(after.launches - before.launches, 1 + 5 + 1 + 5 + 1);
    assert!(done.is_done(), "the recording device completes at once");
    p.wait(done).unwrap();
    let end = counters(&p);
    assert_eq!(
        end.syncs - after.syncs,
        2,
        "the event, then the status record"
    );
    assert_eq!(end.launches - after.launches, 1, "the status read");
    // The first call was captured as a graph and replayed; the second replays it.
    assert_eq!(after.replays - before.replays, 1);
    let done = p.call_bound(&call).unwrap();
    let c = counters(&p);
    assert_eq!(
        (c.launches, c.replays, c.syncs),
        (end.launches, end.replays + 1, end.syncs)
    );
    p.wait(done).unwrap();
    // Other arrays are another graph.
    let swapped: Vec<DeviceArray> = sig
        .arrays
        .iter()
        .map(|_| DeviceArray::zeros(p.device(), DType::F64, &[16, 8, 6]).unwrap())
        .collect();
    let other = bind(&p, &swapped);
    let c = counters(&p);
    let done = p.call_bound(&other).unwrap();
    assert_eq!(counters(&p).launches - c.launches, 13, "captured anew");
    p.wait(done).unwrap();
    // Without graphs, every call launches its kernels one by one.
    p.set_graphs(false);
    let c = counters(&p);
    let done = p.call_bound(&call).unwrap();
    let d = counters(&p);
    assert_eq!(
        (d.launches - c.launches, d.replays, d.syncs),
        (13, c.replays, c.syncs)
    );
    p.wait(done).unwrap();
}

#[test]
fn changing_a_float_symbol_replays_the_graph_and_copies_only_the_new_value() {
    let mut s = example("hyperdiffusion");
    s.symbols.get_mut("N").unwrap().value = Some(sdflow_ir::Value::I64(12));
    let mut p = load(&s);
    assert_eq!(p.program().plan.signature.floats, ["alpha"]);
    let u = DeviceArray::zeros(p.device(), DType::F64, &[12, 12]).unwrap();
    let out = DeviceArray::zeros(p.device(), DType::F64, &[12, 12]).unwrap();
    let mut call = p
        .bind(
            DeviceArgs::new()
                .array("u", &u)
                .array("out", &out)
                .float("alpha", 0.25),
        )
        .unwrap();
    let counters = |p: &GpuProgram| p.device().lock().counters();
    let copies = h2d_copies(&p).len();
    let done = p.call_bound(&call).unwrap();
    p.wait(done).unwrap();
    assert_eq!(h2d_copies(&p)[copies..], [8], "alpha, once");
    let c = counters(&p);
    // The same value: no copy; a new one: 8 bytes; the graph is replayed both times.
    let done = p.call_bound(&call).unwrap();
    call.set_float("alpha", -3.5).unwrap();
    let done2 = p.call_bound(&call).unwrap();
    let d = counters(&p);
    assert_eq!(h2d_copies(&p)[copies..], [8, 8]);
    assert_eq!((d.launches, d.replays - c.replays), (c.launches, 2));
    p.wait(done).unwrap();
    p.wait(done2).unwrap();
    // The value the kernels read is the last one copied.
    let dev = p.device().lock();
    let rec = dev.as_any().downcast_ref::<RecordingDevice>().unwrap();
    let launch = rec
        .calls()
        .iter()
        .find_map(|c| match c {
            Call::Launch(l) if l.kernel.starts_with("sdf_k0_") => Some(l.clone()),
            _ => None,
        })
        .unwrap();
    let buffer = match launch.args.last() {
        Some(sdflow_codegen::cuda::device::KernelArg::Ptr(p)) => *p,
        other => panic!("the last parameter is the float buffer, not {other:?}"),
    };
    assert_eq!(rec.read(buffer, 8).unwrap(), (-3.5f64).to_le_bytes());
    drop(dev);
    assert!(
        call.set_float("beta", 1.0)
            .unwrap_err()
            .to_string()
            .contains("no float symbol 'beta'")
    );
}

#[test]
fn binding_checks_the_device_arrays() {
    let mut s = example("laplace");
    s.symbols.get_mut("N").unwrap().value = Some(sdflow_ir::Value::I64(8));
    let p = load(&s);
    let dev = p.device();
    let u = DeviceArray::zeros(dev, DType::F64, &[8, 8]).unwrap();
    let out = DeviceArray::zeros(dev, DType::F64, &[8, 8]).unwrap();
    let err = |args: DeviceArgs<'_>| p.bind(args).err().expect("refused").to_string();
    assert!(
        p.bind(DeviceArgs::new().array("u", &u).array("out", &out))
            .is_ok()
    );
    let small = DeviceArray::zeros(dev, DType::F64, &[8, 7]).unwrap();
    assert_eq!(
        err(DeviceArgs::new().array("u", &u).array("out", &small)),
        "program 'laplace': 'out' has extent 7 in dimension 1, but the program's 'N' is 8 there (N = 8 from its given value)"
    );
    let ints = DeviceArray::zeros(dev, DType::I64, &[8, 8]).unwrap();
    assert_eq!(
        err(DeviceArgs::new().array("u", &ints).array("out", &out)),
        "program 'laplace': 'u' is i64, the program needs f64"
    );
    assert_eq!(
        err(DeviceArgs::new().array("u", &u).array("out", &u)),
        "program 'laplace': 'u' and 'out' are the same device array; pass distinct arrays"
    );
    assert_eq!(
        err(DeviceArgs::new().array("u", &u)),
        "program 'laplace': missing argument 'out'"
    );
    assert_eq!(
        err(DeviceArgs::new()
            .array("u", &u)
            .array("out", &out)
            .array("w", &small)),
        "program 'laplace': it has no array argument 'w'"
    );
    let transposed = DeviceArray::zeros_in(dev, DType::F64, &[8, 8], &[1, 0]).unwrap();
    assert_eq!(
        err(DeviceArgs::new().array("u", &transposed).array("out", &out)),
        "program 'laplace': 'u' has stride 1 in dimension 0, but the program's 'N' is 8 there (N = 8 from its given value)"
    );
    let elsewhere = DeviceHandle::new(RecordingDevice::new((9, 0)));
    let far = DeviceArray::zeros(&elsewhere, DType::F64, &[8, 8]).unwrap();
    assert_eq!(
        err(DeviceArgs::new().array("u", &far).array("out", &out)),
        "program 'laplace': 'u' lives on another device than the program"
    );
    // A call bound for one program is refused by another.
    let mut q = load_on(&s, dev);
    let call = p
        .bind(DeviceArgs::new().array("u", &u).array("out", &out))
        .unwrap();
    assert_eq!(
        q.call_bound(&call).unwrap_err().to_string(),
        "program 'laplace': the call was bound for another program ('laplace')"
    );
}

#[test]
fn symbols_are_inferred_from_device_arrays() {
    // N is a runtime symbol: the arrays' extents give it.
    let s = example("laplace");
    let mut p = load(&s);
    assert_eq!(p.program().plan.signature.ints, ["N"]);
    let u = DeviceArray::zeros(p.device(), DType::F64, &[10, 10]).unwrap();
    let out = DeviceArray::zeros(p.device(), DType::F64, &[10, 10]).unwrap();
    let call = p
        .bind(DeviceArgs::new().array("u", &u).array("out", &out))
        .unwrap();
    assert_eq!(call.ints(), [10]);
    let done = p.call_bound(&call).unwrap();
    p.wait(done).unwrap();
    let given = p.bind(
        DeviceArgs::new()
            .array("u", &u)
            .array("out", &out)
            .int("N", 9),
    );
    assert_eq!(
        given.err().unwrap().to_string(),
        "program 'laplace': 'u' has extent 10 in dimension 0, but the program's 'N' is 9 there (N = 9 from its given value)"
    );
}

#[test]
fn device_arrays_round_trip_in_any_layout() {
    let dev = DeviceHandle::new(RecordingDevice::new((9, 0)));
    let values: Vec<f64> = (0..12).map(|k| k as f64 * 0.5 - 1.0).collect();
    let host = HostArray::from_f64(&[3, 4], values.clone()).unwrap();
    for order in [[0, 1], [1, 0]] {
        let d = DeviceArray::from_host_in(&dev, &host, &order).unwrap();
        assert_eq!(d.extents(), [3, 4]);
        let strides: &[isize] = if order == [0, 1] { &[4, 1] } else { &[1, 3] };
        assert_eq!(d.strides(), strides);
        assert_eq!(d.to_host().unwrap().bits(), host.bits(), "order {order:?}");
        // The bytes on the device are in the layout's order.
        let lock = dev.lock();
        let rec = lock.as_any().downcast_ref::<RecordingDevice>().unwrap();
        let raw = rec.read(d.ptr(), 12 * 8).unwrap();
        let second = f64::from_le_bytes(raw[8..16].try_into().unwrap());
        assert_eq!(
            second,
            if order == [0, 1] {
                values[1]
            } else {
                values[4]
            }
        );
    }
    let mut d = DeviceArray::zeros(&dev, DType::F64, &[3, 4]).unwrap();
    d.copy_from_host(&host).unwrap();
    let mut back = HostArray::zeros(DType::F64, &[3, 4]);
    d.copy_to_host(&mut back).unwrap();
    assert_eq!(back.bits(), host.bits());
    let wrong = HostArray::zeros(DType::F64, &[4, 3]);
    assert_eq!(
        d.copy_from_host(&wrong).unwrap_err().to_string(),
        "cannot copy to the device: the host array is f64 of shape [4, 3], the device array f64 of shape [3, 4]"
    );
    assert_eq!(
        DeviceArray::zeros_in(&dev, DType::F64, &[3, 4], &[0, 0])
            .unwrap_err()
            .to_string(),
        "layout order [0, 0] is not a permutation of the 2 dimensions of an array of extents [3, 4]"
    );
    // An array without elements still has an address to pass.
    let empty = DeviceArray::zeros(&dev, DType::I32, &[0, 5]).unwrap();
    assert_eq!(empty.to_host().unwrap().shape(), [0, 5]);
    // Dropping an array frees its memory on the device.
    let ptr = d.ptr();
    drop(d);
    let freed = |ptr| {
        let lock = dev.lock();
        let rec = lock.as_any().downcast_ref::<RecordingDevice>().unwrap();
        rec.calls().contains(&Call::Free(ptr)) && rec.read(ptr, 8).is_err()
    };
    assert!(freed(ptr));
    // Dropped while the device is held (no deadlock): freed at the next lock.
    let e = DeviceArray::zeros(&dev, DType::F64, &[2]).unwrap();
    let ptr = e.ptr();
    let held = dev.lock();
    drop(e);
    drop(held);
    assert!(freed(ptr));
}

#[test]
fn a_bound_call_keeps_its_arrays_alive() {
    let mut s = example("laplace");
    s.symbols.get_mut("N").unwrap().value = Some(sdflow_ir::Value::I64(8));
    let mut p = load(&s);
    let u = DeviceArray::zeros(p.device(), DType::F64, &[8, 8]).unwrap();
    let out = DeviceArray::zeros(p.device(), DType::F64, &[8, 8]).unwrap();
    let ptr = u.ptr();
    let call = p
        .bind(DeviceArgs::new().array("u", &u).array("out", &out))
        .unwrap();
    drop(u);
    let freed = |p: &GpuProgram| {
        let lock = p.device().lock();
        let rec = lock.as_any().downcast_ref::<RecordingDevice>().unwrap();
        rec.calls().contains(&Call::Free(ptr))
    };
    assert!(!freed(&p), "the call still holds 'u'");
    let done = p.call_bound(&call).unwrap();
    p.wait(done).unwrap();
    drop(call);
    assert!(freed(&p));
}

#[test]
fn the_dycore_step_enqueues_without_a_sync_point() {
    let s = example("dycore");
    let mut p = load(&s);
    assert_eq!(p.sync_points(), 0);
    let sig = p.program().plan.signature.clone();
    let mut arrays = Vec::new();
    for a in &sig.arrays {
        let extents: Vec<usize> = a
            .shape
            .iter()
            .map(|e| e.eval_map(&Default::default()).unwrap() as usize)
            .collect();
        arrays.push(DeviceArray::zeros(p.device(), a.dtype, &extents).unwrap());
    }
    let mut args = DeviceArgs::new();
    for (spec, a) in sig.arrays.iter().zip(&arrays) {
        args = args.array(&spec.name, a);
    }
    for n in &sig.ints {
        args = args.int(n, if n == "nsteps" { 2 } else { 0 });
    }
    for n in &sig.floats {
        args = args.float(n, 0.5);
    }
    let call = p.bind(args).unwrap();
    let before = p.device().lock().counters();
    let done = p.call_bound(&call).unwrap();
    let after = p.device().lock().counters();
    assert_eq!(after.syncs, before.syncs);
    assert!(after.launches - before.launches > 100, "{after:?}");
    p.wait(done).unwrap();
}

#[test]
fn a_loop_on_a_device_scalar_waits_once_per_condition() {
    let mut b = SdfgBuilder::new("lc");
    b.symbol("k", DType::I64)
        .scalar("cnt", DType::I64)
        .array("out", DType::I64, [1]);
    b.state("body", |s| {
        s.tasklet("inc", &[("a", "cnt")], &[("o", "cnt")], "o = a + 1");
    });
    b.state("after", |s| {
        s.tasklet("cp", &[("a", "cnt")], &[("o", "out[0]")], "o = a");
    });
    b.body(Block::seq([
        Block::for_loop(
            "k",
            SymExpr::Int(0),
            SymExpr::parse("cnt < 20 && k < 3").unwrap(),
            SymExpr::parse("k + 1").unwrap(),
            Block::State(StateId(0)),
        ),
        Block::State(StateId(1)),
    ]));
    let s = b.build();
    assert_eq!(s.validate(), Ok(()));
    let mut p = load(&s);
    assert_eq!(p.sync_points(), 1);
    let cnt = DeviceArray::zeros(p.device(), DType::I64, &[]).unwrap();
    let out = DeviceArray::zeros(p.device(), DType::I64, &[1]).unwrap();
    let before = p.device().lock().counters();
    let done = p
        .call(DeviceArgs::new().array("cnt", &cnt).array("out", &out))
        .unwrap();
    let after = p.device().lock().counters();
    // The recording device runs no kernel: cnt stays 0, the loop runs k = 0, 1, 2 and
    // reads cnt at each of its four condition evaluations.
    assert_eq!(after.syncs - before.syncs, 4);
    // Three iterations and the condition's scalar; then the error flags' peek.
    assert_eq!(after.launches - before.launches, 3 + 1 + 1);
    p.wait(done).unwrap();
}

#[test]
fn host_arrays_round_trip_through_the_device() {
    let mut s = example("laplace");
    s.symbols.get_mut("N").unwrap().value = Some(sdflow_ir::Value::I64(8));
    let mut p = load(&s);
    let mut b = sdflow_ir::interp::random_bindings(&s, &Default::default(), 3).unwrap();
    let before = b.clone();
    p.run_bindings(&mut b).unwrap();
    // No kernel ran: every array comes back as it went.
    for (n, a) in &before.arrays {
        assert_eq!(a.bits(), b.arrays[n].bits(), "'{n}'");
    }
}

/// The kernels a recording device launched, with their grids and blocks.
fn launch_shapes(p: &GpuProgram) -> Vec<(String, [u32; 3], [u32; 3])> {
    let dev = p.device().lock();
    let rec = dev.as_any().downcast_ref::<RecordingDevice>().unwrap();
    rec.launches()
        .iter()
        .map(|l| (l.kernel.clone(), l.grid, l.block))
        .collect()
}

/// Runs `s` compiled for the CPU and on the interpreter with `N = n` on random inputs;
/// asserts the arrays `names` are equal bit for bit and written.
fn cpu_equals_interpreter(s: &Sdfg, n: i64, names: &[&str]) {
    let mut symbols = std::collections::BTreeMap::new();
    symbols.insert("N".to_string(), sdflow_ir::Value::I64(n));
    let inputs = sdflow_ir::interp::random_bindings(s, &symbols, 9).unwrap();
    let mut expected = inputs.clone();
    sdflow_ir::interp::run(s, &mut expected).unwrap();
    let prog = sdflow_codegen::CpuBackend {
        cache: None,
        ..Default::default()
    }
    .build(s)
    .unwrap();
    let mut got = inputs.clone();
    prog.run_bindings(&mut got).unwrap();
    for name in names {
        let (g, e) = (got.arrays[*name].bits(), expected.arrays[*name].bits());
        assert_eq!(g, e, "'{name}'");
        assert_ne!(e, inputs.arrays[*name].bits(), "'{name}' is written");
    }
}

/// A copy between two containers (with a conversion) is spread over a grid, one thread
/// per element; a scalar copy is one thread. The element code is the C backend's too,
/// so the compiled CPU program checks it against the interpreter.
fn copies() -> Sdfg {
    let mut b = SdfgBuilder::new("copies");
    b.symbol("N", DType::I64)
        .array("a", DType::F64, ["N", "3"])
        .array("b", DType::F32, ["N + 1", "3"])
        .array("c", DType::I64, ["N"]);
    b.state("s", |s| {
        s.copy("a[0:N, 0:3]", "b[1:N+1, 0:3]");
    });
    b.state("t", |s| {
        s.copy("c[0:N-1:2]", "a[0:N//2, 1]");
    });
    b.build()
}

#[test]
fn a_copy_between_containers_is_a_grid_of_its_elements() {
    let s = copies();
    assert_eq!(s.validate(), Ok(()));
    compiles_with_nvrtc(&s);
    let mut p = load(&s);
    let a = DeviceArray::zeros(p.device(), DType::F64, &[1000, 3]).unwrap();
    let b = DeviceArray::zeros(p.device(), DType::F32, &[1001, 3]).unwrap();
    let c = DeviceArray::zeros(p.device(), DType::I64, &[1000]).unwrap();
    p.set_graphs(false);
    let done = p
        .call(
            DeviceArgs::new()
                .array("a", &a)
                .array("b", &b)
                .array("c", &c),
        )
        .unwrap();
    p.wait(done).unwrap();
    assert_eq!(
        launch_shapes(&p),
        [
            // 3000 elements, 256 threads a block.
            ("sdf_k0_0".to_string(), [12, 1, 1], [256, 1, 1]),
            // 500 elements.
            ("sdf_k1_0".to_string(), [2, 1, 1], [256, 1, 1]),
            // The error flags to the host after the call; read at the wait.
            ("sdf_status_peek".to_string(), [1, 1, 1], [1, 1, 1]),
            ("sdf_status_read".to_string(), [1, 1, 1], [1, 1, 1]),
        ]
    );
    // The same element code on the CPU equals the interpreter.
    cpu_equals_interpreter(&s, 7, &["a", "b"]);
}

/// Reductions: over the inner axis of a matrix (one output per row), a grid over the
/// rows; to a scalar, one thread. Each output is combined in the interpreter's order,
/// which the compiled CPU program (the same element code) checks bit for bit.
fn reductions() -> Sdfg {
    let mut b = SdfgBuilder::new("reductions");
    b.symbol("N", DType::I64)
        .array("x", DType::F64, ["N", "5"])
        .array("rows", DType::F64, ["N"])
        .array("top", DType::F64, [1]);
    b.state("s", |s| {
        s.reduce(
            sdflow_ir::Wcr::Sum,
            Some(vec![1]),
            Some(sdflow_ir::Value::F64(0.0)),
            "x[0:N, 0:5]",
            "rows[0:N]",
        );
    });
    b.state("t", |s| {
        s.reduce(sdflow_ir::Wcr::Max, None, None, "x[0:N, 0:5]", "top[0]");
    });
    b.build()
}

#[test]
fn a_reduction_is_a_grid_over_its_outputs() {
    let s = reductions();
    assert_eq!(s.validate(), Ok(()));
    compiles_with_nvrtc(&s);
    let mut p = load(&s);
    let x = DeviceArray::zeros(p.device(), DType::F64, &[1000, 5]).unwrap();
    let rows = DeviceArray::zeros(p.device(), DType::F64, &[1000]).unwrap();
    let top = DeviceArray::zeros(p.device(), DType::F64, &[1]).unwrap();
    p.set_graphs(false);
    let done = p
        .call(
            DeviceArgs::new()
                .array("x", &x)
                .array("rows", &rows)
                .array("top", &top),
        )
        .unwrap();
    p.wait(done).unwrap();
    assert_eq!(
        launch_shapes(&p),
        [
            // 1000 rows, 256 threads a block.
            ("sdf_k0_0".to_string(), [4, 1, 1], [256, 1, 1]),
            // One output: one block, one thread of it working.
            ("sdf_k1_0".to_string(), [1, 1, 1], [256, 1, 1]),
            ("sdf_status_peek".to_string(), [1, 1, 1], [1, 1, 1]),
            ("sdf_status_read".to_string(), [1, 1, 1], [1, 1, 1]),
        ]
    );
    cpu_equals_interpreter(&s, 9, &["rows", "top"]);
}

/// Arrays another library allocated (CuPy, `__cuda_array_interface__`) are passed by
/// address: checked like device arrays (types, shapes, strides, overlap), refused when
/// the address is not the device's memory; the call waits for the stream they were
/// produced on before its first kernel, and that stream waits for the call after its
/// last, without the host waiting.
#[test]
fn foreign_device_arrays_are_checked_and_ordered_after_their_stream() {
    use sdflow_codegen::cuda::device::KernelArg;
    use sdflow_codegen::cuda::exec::ForeignArray;
    use std::collections::BTreeMap;
    let s = example("laplace");
    let mut p = load(&s);
    let (u, out, both) = {
        let mut dev = p.device().lock();
        (
            dev.alloc_zeroed(10 * 10 * 8).unwrap(),
            dev.alloc_zeroed(10 * 10 * 8).unwrap(),
            dev.alloc_zeroed(2 * 10 * 10 * 8).unwrap(),
        )
    };
    let strides = [10isize, 1];
    let arr = |name, ptr, dtype| ForeignArray {
        name,
        ptr,
        dtype,
        extents: &[10, 10],
        strides: &strides,
    };
    let (ints, floats) = (BTreeMap::new(), BTreeMap::new());
    let mut call = |arrays: &[ForeignArray<'_>], after: &[u64]| {
        // SAFETY: recording-device allocations of the arrays' sizes, alive for the test.
        unsafe { p.call_foreign(arrays, &ints, &floats, after) }
    };
    let err = |r: Result<_, sdflow_codegen::CallError>| r.expect_err("refused").to_string();
    assert_eq!(
        err(call(
            &[arr("u", u, DType::F32), arr("out", out, DType::F64)],
            &[]
        )),
        "program 'laplace': 'u' is f32, the program needs f64"
    );
    assert!(
        err(call(
            &[arr("u", 0x10, DType::F64), arr("out", out, DType::F64)],
            &[]
        ))
        .starts_with("program 'laplace': 'u': 0x10 is not in any allocation"),
    );
    assert_eq!(
        err(call(
            &[arr("u", both, DType::F64), arr("out", both + 8, DType::F64)],
            &[]
        )),
        "program 'laplace': 'out' and 'u' overlap in memory; pass distinct arrays"
    );
    // SAFETY: as above.
    let done = unsafe {
        p.call_foreign(
            &[arr("u", u, DType::F64), arr("out", out, DType::F64)],
            &ints,
            &floats,
            &[0x5eed],
        )
    }
    .unwrap();
    {
        let dev = p.device().lock();
        let rec = dev.as_any().downcast_ref::<RecordingDevice>().unwrap();
        let calls = rec.calls();
        let wait = calls
            .iter()
            .position(|c| *c == Call::WaitForStream(0x5eed))
            .expect("waits for the producer's stream");
        let first_launch = calls
            .iter()
            .position(|c| matches!(c, Call::Launch(_)))
            .expect("launches");
        let signal = calls
            .iter()
            .position(|c| *c == Call::SignalStream(0x5eed))
            .expect("the producer's stream waits for the call");
        let last_launch = calls
            .iter()
            .rposition(|c| matches!(c, Call::Launch(_)))
            .unwrap();
        assert!(wait < first_launch && last_launch < signal);
        assert!(!calls.contains(&Call::Synchronize));
        let launch = rec.launches()[0];
        assert!(launch.args.contains(&KernelArg::Ptr(u)));
        assert!(launch.args.contains(&KernelArg::Ptr(out)));
    }
    p.wait(done).unwrap();
}

/// GT4Py's `concat_where` as DaCe lowers it: one access node assembled by several copies
/// into a transient sized by `N`, then copied out.
fn assembled() -> Sdfg {
    let mut b = SdfgBuilder::new("assembled");
    b.symbol("N", DType::I64)
        .array("a", DType::F64, ["N", "2"])
        .array("b", DType::F64, ["N", "7"])
        .array("w", DType::F64, ["N", "9"])
        .transient("t", DType::F64, ["N", "9"]);
    b.state("s", |s| {
        s.copy("a[0:N, 0:2]", "t[0:N, 0:2]");
        s.copy("b[0:N, 0:6]", "t[0:N, 2:8]");
        s.copy("b[0:N, 6]", "t[0:N, 8]");
    });
    b.state("u", |s| {
        s.copy("t[0:N, 0:9]", "w[0:N, 0:9]");
    });
    b.build()
}

#[test]
fn several_copies_into_one_container_are_a_grid_each_in_order() {
    let s = assembled();
    assert_eq!(s.validate(), Ok(()));
    compiles_with_nvrtc(&s);
    let plan = sdflow_codegen::plan::Plan::of(&s, sdflow_codegen::plan::Target::Grid).unwrap();
    let text = plan.to_text();
    assert!(text.contains("0: copy 't' shared writes t"), "{text}");
    let mut p = load(&s);
    let arrays = |n: usize| {
        let dev = p.device();
        [
            DeviceArray::zeros(dev, DType::F64, &[n, 2]).unwrap(),
            DeviceArray::zeros(dev, DType::F64, &[n, 7]).unwrap(),
            DeviceArray::zeros(dev, DType::F64, &[n, 9]).unwrap(),
        ]
    };
    let large = arrays(1000);
    let call = |p: &mut GpuProgram, [a, b, w]: &[DeviceArray; 3]| {
        let done = p
            .call(DeviceArgs::new().array("a", a).array("b", b).array("w", w))
            .unwrap();
        p.wait(done).unwrap();
    };
    p.set_graphs(false);
    call(&mut p, &large);
    assert_eq!(
        launch_shapes(&p)[..4],
        [
            // One grid per copy: 2000, 6000 and 1000 elements.
            ("sdf_k0_0_0".to_string(), [8, 1, 1], [256, 1, 1]),
            ("sdf_k0_0_1".to_string(), [24, 1, 1], [256, 1, 1]),
            ("sdf_k0_0_2".to_string(), [4, 1, 1], [256, 1, 1]),
            ("sdf_k1_0".to_string(), [36, 1, 1], [256, 1, 1]),
        ]
    );
    // The element code is the C backend's: the compiled CPU program equals the
    // interpreter.
    cpu_equals_interpreter(&s, 7, &["w"]);
}

/// A program called in turn with two sizes (ICON4Py's `copy_field` on cell and edge
/// fields in each step) keeps the transients allocated for the larger, and the graphs
/// captured for each: once both sizes were seen after the larger storage, no allocation,
/// free or capture.
#[test]
fn transients_stay_allocated_for_alternating_sizes() {
    let s = assembled();
    let mut p = load(&s);
    let arrays = |p: &GpuProgram, n: usize| {
        let dev = p.device();
        [
            DeviceArray::zeros(dev, DType::F64, &[n, 2]).unwrap(),
            DeviceArray::zeros(dev, DType::F64, &[n, 7]).unwrap(),
            DeviceArray::zeros(dev, DType::F64, &[n, 9]).unwrap(),
        ]
    };
    let (small, large) = (arrays(&p, 10), arrays(&p, 1000));
    let count = |p: &GpuProgram| {
        let dev = p.device().lock();
        let rec = dev.as_any().downcast_ref::<RecordingDevice>().unwrap();
        let calls = rec.calls();
        let n = |f: &dyn Fn(&Call) -> bool| calls.iter().filter(|c| f(c)).count();
        (
            n(&|c| matches!(c, Call::Alloc { .. })),
            n(&|c| matches!(c, Call::Free(_))),
            n(&|c| matches!(c, Call::BeginCapture)),
        )
    };
    let call = |p: &mut GpuProgram, [a, b, w]: &[DeviceArray; 3]| {
        let done = p
            .call(DeviceArgs::new().array("a", a).array("b", b).array("w", w))
            .unwrap();
        p.wait(done).unwrap();
    };
    call(&mut p, &small);
    call(&mut p, &large);
    call(&mut p, &small);
    let (allocs, frees, captures) = count(&p);
    // The transient for 10 rows, then for 1000 (the first freed, with the graph captured
    // for it); a graph for each size on the storage kept.
    assert_eq!((captures, frees), (3, 1));
    for _ in 0..3 {
        call(&mut p, &small);
        call(&mut p, &large);
    }
    assert_eq!(count(&p), (allocs, frees, captures));
}

/// A transient whose strides leave gaps (laid out like a padded field: a composed step's
/// scratch field keeps its allocator's strides) is allocated for every element its
/// strides reach, not for the product of its extents; the emulated device's results equal
/// the interpreter's.
#[test]
fn a_padded_transient_is_allocated_for_its_whole_span() {
    use sdflow_codegen::cuda::device::EmulatedDevice;
    let mut b = SdfgBuilder::new("padded");
    b.symbol("N", DType::I64)
        .array("a", DType::F64, ["N", "9"])
        .array("w", DType::F64, ["N", "9"])
        .transient("t", DType::F64, ["N", "9"]);
    b.state("s", |s| {
        s.copy("a[0:N, 0:9]", "t[0:N, 0:9]");
    });
    b.state("u", |s| {
        s.copy("t[0:N, 0:9]", "w[0:N, 0:9]");
    });
    let mut s = b.build();
    // Horizontal-first with rows padded to N + 5 elements: 1 + (N − 1) + 8 (N + 5)
    // elements, 130 for N = 10 (the extents' product is 90).
    let Some(sdflow_ir::DataDesc::Array(t)) = s.arrays.get_mut("t") else {
        panic!("no transient 't'");
    };
    t.strides = vec![
        SymExpr::Int(1),
        sdflow_ir::parse::parse_symexpr("N + 5").unwrap(),
    ];
    assert_eq!(s.validate(), Ok(()));
    let n = 10usize;
    let p = load(&s);
    let a = DeviceArray::zeros(p.device(), DType::F64, &[n, 9]).unwrap();
    let w = DeviceArray::zeros(p.device(), DType::F64, &[n, 9]).unwrap();
    let mut p = p;
    let done = p
        .call(DeviceArgs::new().array("a", &a).array("w", &w))
        .unwrap();
    p.wait(done).unwrap();
    let dev = p.device().lock();
    let rec = dev.as_any().downcast_ref::<RecordingDevice>().unwrap();
    let allocs: Vec<usize> = rec
        .calls()
        .iter()
        .filter_map(|c| match c {
            Call::Alloc { bytes, .. } => Some(*bytes),
            _ => None,
        })
        .collect();
    drop(dev);
    // The two arguments, then the transient (after the program's own error record).
    assert!(
        allocs.ends_with(&[n * 9 * 8, n * 9 * 8, 130 * 8]),
        "{allocs:?}"
    );

    // Run on the emulated device: the copies through the padded transient.
    let dev = DeviceHandle::new(EmulatedDevice::with_threads(2));
    let backend = sdflow_codegen::cuda::exec::CudaBackend {
        cache: None,
        ..Default::default()
    };
    let mut p = backend.build(&s, &dev).unwrap();
    let input: Vec<f64> = (0..n * 9).map(|i| i as f64 * 0.5 - 3.0).collect();
    let a = DeviceArray::from_host(&dev, &HostArray::from_f64(&[n, 9], input.clone()).unwrap())
        .unwrap();
    let w = DeviceArray::zeros(&dev, DType::F64, &[n, 9]).unwrap();
    let done = p
        .call(DeviceArgs::new().array("a", &a).array("w", &w))
        .unwrap();
    p.wait(done).unwrap();
    assert_eq!(w.to_host().unwrap().to_f64_vec(), input);
}
