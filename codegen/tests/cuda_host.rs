//! The CUDA host layer without a GPU: programs run against a recording device, which
//! counts what the host asks of the stream. A call enqueues its kernels in program order
//! and returns without one synchronization; a condition on a device value is the only
//! thing that waits, once per evaluation; waiting on the completion reads the status.

use sdflow_codegen::Origin;
use sdflow_codegen::cuda::device::RecordingDevice;
use sdflow_codegen::cuda::emit::{CudaEmitOptions, emit_cuda};
use sdflow_codegen::cuda::exec::GpuProgram;
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
    let prog = emit_cuda(s, &CudaEmitOptions::default()).unwrap();
    GpuProgram::load(
        s,
        prog,
        b"image",
        Box::new(RecordingDevice::new((9, 0))),
        Origin::Built,
    )
    .unwrap()
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
    let mut ptrs = Vec::new();
    for _ in &sig.arrays {
        ptrs.push(p.device_mut().alloc_zeroed(16 * 8 * 6 * 8).unwrap());
    }
    let before = p.device().counters();
    let done = p.call(&ptrs, &[], &[]).unwrap();
    let after = p.device().counters();
    assert_eq!(
        after.syncs - before.syncs,
        0,
        "a call never waits for the device"
    );
    assert_eq!(after.copies, before.copies, "device arrays: no copies");
    // The status reset, then init, forward for k = 1..5, last, backward for k = 4..0.
    assert_eq!(after.launches - before.launches, 1 + 1 + 5 + 1 + 5);
    assert!(done.is_done(), "the recording device completes at once");
    p.wait(done).unwrap();
    let end = p.device().counters();
    assert_eq!(
        end.syncs - after.syncs,
        2,
        "the event, then the status record"
    );
    // The first call was captured as a graph and replayed; the second replays it.
    assert_eq!(after.replays - before.replays, 1);
    let done = p.call(&ptrs, &[], &[]).unwrap();
    let c = p.device().counters();
    assert_eq!(
        (c.launches, c.replays, c.syncs),
        (end.launches, end.replays + 1, end.syncs)
    );
    p.wait(done).unwrap();
    // Other arrays are another graph.
    let other: Vec<u64> = ptrs.iter().rev().copied().collect();
    let done = p.call(&other, &[], &[]).unwrap();
    assert_eq!(
        p.device().counters().launches - c.launches,
        13 + 1,
        "captured anew (and the status read)"
    );
    p.wait(done).unwrap();
    // Without graphs, every call launches its kernels one by one.
    p.set_graphs(false);
    let c = p.device().counters();
    let done = p.call(&ptrs, &[], &[]).unwrap();
    let d = p.device().counters();
    assert_eq!(
        (d.launches - c.launches, d.replays, d.syncs),
        (13, c.replays, c.syncs)
    );
    p.wait(done).unwrap();
}

#[test]
fn the_dycore_step_enqueues_without_a_sync_point() {
    let s = example("dycore");
    let mut p = load(&s);
    assert_eq!(p.sync_points(), 0);
    let sig = p.program().plan.signature.clone();
    let mut ptrs = Vec::new();
    for a in &sig.arrays {
        let n: i64 = a
            .shape
            .iter()
            .map(|e| e.eval_map(&Default::default()).unwrap())
            .product();
        ptrs.push(p.device_mut().alloc_zeroed(n as usize * 8).unwrap());
    }
    let ints: Vec<i64> = sig
        .ints
        .iter()
        .map(|n| if n == "nsteps" { 2 } else { 0 })
        .collect();
    let floats = vec![0.5; sig.floats.len()];
    let before = p.device().counters();
    let done = p.call(&ptrs, &ints, &floats).unwrap();
    let after = p.device().counters();
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
    let cnt = p.device_mut().alloc_zeroed(8).unwrap();
    let out = p.device_mut().alloc_zeroed(8).unwrap();
    let before = p.device().counters();
    let done = p.call(&[cnt, out], &[], &[]).unwrap();
    let after = p.device().counters();
    // The recording device runs no kernel: cnt stays 0, the loop runs k = 0, 1, 2 and
    // reads cnt at each of its four condition evaluations.
    assert_eq!(after.syncs - before.syncs, 4);
    assert_eq!(after.launches - before.launches, 1 + 3 + 1);
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
