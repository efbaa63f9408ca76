//! The CUDA backend on a GPU, with its baselines measured in the same run: the
//! device-to-device copy bandwidth as the ceiling for fused hyperdiffusion (4096², 8192²)
//! and a 7-point Laplacian (256³, 512³); the dycore step at 256×256×8 on the GPU (graph
//! replays and direct launches: GPU time per step and the host's time to enqueue one)
//! against the compiled CPU program on all cores. Before timing, every GPU program's
//! result is compared with the CPU backend's bit for bit (the bench stops on a
//! difference). Without NVRTC, a CUDA driver or a GPU it says so and measures nothing.
//! Figures go to docs/perf.md with the device named.
//!
//! Bandwidth is the least traffic a kernel needs (every input read once, every output
//! written once) over its time; the copy's is its bytes read plus written.

#[path = "../examples/dycore/program.rs"]
mod program;
#[path = "../examples/dycore/reference.rs"]
mod reference;

use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sdflow::codegen::cuda::array::DeviceArray;
use sdflow::codegen::cuda::device::{CudaDevice, DeviceHandle};
use sdflow::codegen::cuda::exec::{CudaBackend, DeviceArgs, GpuCall, GpuProgram};
use sdflow::codegen::cuda::nvrtc;
use sdflow::codegen::{Cache, CpuBackend};
use sdflow::ir::interp::{Bindings, HostArray};
use sdflow::ir::{DType, Sdfg, SdfgBuilder, Value};
use sdflow::transforms::Pipeline;

/// The GPU, or `None` after saying why nothing is measured.
fn gpu() -> Option<DeviceHandle> {
    if let Err(e) = nvrtc::available() {
        eprintln!("cuda benches skipped: NVRTC not found ({e})");
        return None;
    }
    match CudaDevice::new(0) {
        Ok(d) => {
            eprintln!(
                "device: {}",
                sdflow::codegen::cuda::device::Device::name(&d)
            );
            Some(DeviceHandle::new(d))
        }
        Err(e) => {
            eprintln!("cuda benches skipped: {e}");
            None
        }
    }
}

fn cache() -> Cache {
    Cache::at(std::env::temp_dir().join("sdflow-bench-cache"))
}

/// A smooth field of `shape` (values of order 1, no two equal along a line).
fn field(shape: &[usize], seed: f64) -> HostArray {
    let n: usize = shape.iter().product();
    let v = (0..n)
        .map(|k| (k as f64 * 0.618_033_988_75 + seed).sin() + 0.001 * (k % 97) as f64)
        .collect();
    HostArray::from_f64(shape, v).expect("the shape's element count")
}

/// `N`³ points, `out = u[i-1] + u[i+1] + … - 6 u` on the interior.
fn laplace3d() -> Sdfg {
    let mut b = SdfgBuilder::new("laplace3d");
    b.symbol("N", DType::I64)
        .array("u", DType::F64, ["N", "N", "N"])
        .array("out", DType::F64, ["N", "N", "N"]);
    b.state("s", |s| {
        s.map(
            "lap7",
            &["i", "j", "k"],
            &["1:N-1", "1:N-1", "1:N-1"],
            |m| {
                m.tasklet(
                    "t",
                    &[
                        ("c", "u[i, j, k]"),
                        ("w", "u[i-1, j, k]"),
                        ("e", "u[i+1, j, k]"),
                        ("s", "u[i, j-1, k]"),
                        ("n", "u[i, j+1, k]"),
                        ("b", "u[i, j, k-1]"),
                        ("t", "u[i, j, k+1]"),
                    ],
                    &[("o", "out[i, j, k]")],
                    "o = w + e + s + n + b + t - 6.0 * c",
                );
            },
        );
    });
    b.build()
}

/// Builds `sdfg` for the GPU and the CPU, runs both once on `inputs` and stops the bench
/// unless every array is equal bit for bit; returns the GPU program, its device arrays
/// (in signature order) and the bound call.
fn checked_gpu_program(
    dev: &DeviceHandle,
    sdfg: &Sdfg,
    inputs: &Bindings,
    what: &str,
) -> (GpuProgram, Vec<DeviceArray>, GpuCall) {
    let mut opt = sdfg.clone();
    Pipeline::gpu().run(&mut opt).expect("GPU pipeline");
    let gpu_backend = CudaBackend {
        cache: Some(cache()),
        ..CudaBackend::default()
    };
    let mut prog = gpu_backend.build(&opt, dev).expect("CUDA build");
    let sig = prog.program().plan.signature.clone();
    let arrays: Vec<DeviceArray> = sig
        .arrays
        .iter()
        .map(|a| {
            prog.upload(&a.name, &inputs.arrays[&a.name])
                .expect("upload")
        })
        .collect();
    let mut args = DeviceArgs::new();
    for (a, d) in sig.arrays.iter().zip(&arrays) {
        args = args.array(&a.name, d);
    }
    for (n, v) in &inputs.symbols {
        args = match v {
            Value::F64(x) if sig.floats.contains(n) => args.float(n, *x),
            other if sig.ints.contains(n) => args.int(n, other.as_i64()),
            _ => args,
        };
    }
    let call = prog.bind(args).expect("bind");
    let done = prog.call_bound(&call).expect("call");
    prog.wait(done).expect("GPU run");
    let mut cpu_opt = sdfg.clone();
    Pipeline::cpu().run(&mut cpu_opt).expect("CPU pipeline");
    let cpu = CpuBackend {
        cache: Some(cache()),
        ..CpuBackend::default()
    }
    .build(&cpu_opt)
    .expect("CPU build");
    let mut expected = inputs.clone();
    cpu.run_bindings(&mut expected).expect("CPU run");
    for (a, d) in sig.arrays.iter().zip(&arrays) {
        let got = d.to_host().expect("download");
        assert!(
            got.bits() == expected.arrays[&a.name].bits(),
            "{what}: '{}' on the GPU differs from the CPU backend",
            a.name
        );
    }
    eprintln!("{what}: GPU equals the CPU backend bit for bit");
    (prog, arrays, call)
}

/// `iters` calls enqueued back to back, then one wait: the GPU's time per call once the
/// host is ahead.
fn gpu_time(prog: &mut GpuProgram, call: &GpuCall, iters: u64) -> Duration {
    let t = Instant::now();
    let mut last = None;
    for _ in 0..iters {
        last = Some(prog.call_bound(call).expect("call"));
    }
    if let Some(done) = last {
        prog.wait(done).expect("GPU run");
    }
    t.elapsed()
}

/// Calls enqueued before the host waits, in [`enqueue_time`]: well within the driver's
/// queue of pending launches, so no enqueue blocks on the GPU.
const ENQUEUE_CHUNK: u64 = 16;
/// Calls timed per sample in [`enqueue_time`].
const ENQUEUE_SAMPLE: u64 = 256;

/// The host's time to enqueue `iters` calls, from at most [`ENQUEUE_SAMPLE`] of them
/// enqueued in chunks of [`ENQUEUE_CHUNK`] (each chunk's wait is not timed), scaled to
/// `iters`. Enqueuing all `iters` at once would time the GPU instead: criterion sizes a
/// sample from the fast first calls, a full launch queue then makes each enqueue wait
/// for a step on the GPU, and one sample takes minutes.
fn enqueue_time(prog: &mut GpuProgram, call: &GpuCall, iters: u64) -> Duration {
    let timed = iters.clamp(1, ENQUEUE_SAMPLE);
    let mut host = Duration::ZERO;
    let mut done = 0;
    while done < timed {
        let n = ENQUEUE_CHUNK.min(timed - done);
        let t = Instant::now();
        let mut last = None;
        for _ in 0..n {
            last = Some(prog.call_bound(call).expect("call"));
        }
        host += t.elapsed();
        if let Some(last) = last {
            prog.wait(last).expect("GPU run");
        }
        done += n;
    }
    host.mul_f64(iters as f64 / timed as f64)
}

fn bench_bandwidth(c: &mut Criterion) {
    let Some(dev) = gpu() else { return };
    let mut g = c.benchmark_group("cuda bandwidth");
    g.sample_size(20);
    // The ceiling: cuMemcpyDtoD of 1 GiB.
    let bytes = 1usize << 30;
    let (a, b) = {
        let mut d = dev.lock();
        (
            d.alloc_zeroed(bytes).expect("1 GiB"),
            d.alloc_zeroed(bytes).expect("1 GiB"),
        )
    };
    g.throughput(Throughput::Bytes(2 * bytes as u64));
    g.bench_function("copy d2d 1 GiB", |bch| {
        bch.iter_custom(|iters| {
            let mut d = dev.lock();
            d.synchronize().expect("sync");
            let t = Instant::now();
            for _ in 0..iters {
                d.copy_d2d(b, a, bytes).expect("copy");
            }
            d.synchronize().expect("sync");
            t.elapsed()
        })
    });
    {
        let mut d = dev.lock();
        d.free(a);
        d.free(b);
    }
    // `SDFLOW_ROOT`: the repository, when the prebuilt bench runs elsewhere
    // (`scripts/gpu-bundle.sh`).
    let root = std::env::var_os("SDFLOW_ROOT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into());
    let hyper = sdflow::cli::load_program(&root.join("examples/hyperdiffusion.sdfg.json"))
        .expect("example");
    for n in [4096usize, 8192] {
        let mut inputs = Bindings::default();
        inputs.arrays.insert("u".into(), field(&[n, n], 0.1));
        inputs.arrays.insert("out".into(), field(&[n, n], 0.7));
        inputs.symbols.insert("N".into(), Value::I64(n as i64));
        inputs.symbols.insert("alpha".into(), Value::F64(0.05));
        let what = format!("hyperdiffusion {n}²");
        let (mut prog, _arrays, call) = checked_gpu_program(&dev, &hyper, &inputs, &what);
        g.throughput(Throughput::Bytes(2 * (n * n * 8) as u64));
        g.bench_function(&what, |bch| {
            bch.iter_custom(|iters| gpu_time(&mut prog, &call, iters))
        });
    }
    let lap = laplace3d();
    for n in [256usize, 512] {
        let mut inputs = Bindings::default();
        inputs.arrays.insert("u".into(), field(&[n, n, n], 0.3));
        inputs.arrays.insert("out".into(), field(&[n, n, n], 0.9));
        inputs.symbols.insert("N".into(), Value::I64(n as i64));
        let what = format!("laplace 7-point {n}³");
        let (mut prog, _arrays, call) = checked_gpu_program(&dev, &lap, &inputs, &what);
        g.throughput(Throughput::Bytes(2 * (n * n * n * 8) as u64));
        g.bench_function(&what, |bch| {
            bch.iter_custom(|iters| gpu_time(&mut prog, &call, iters))
        });
    }
    g.finish();
}

fn bench_dycore(c: &mut Criterion) {
    let Some(dev) = gpu() else { return };
    let mut g = c.benchmark_group("cuda dycore step");
    g.sample_size(20);
    for (nx, ny, nz) in [(256usize, 256usize, 8usize), (512, 512, 8)] {
        let cfg = reference::Config {
            nx,
            ny,
            nz,
            rho: (0..nz).map(|k| 1025.0 + k as f64).collect(),
            depth: vec![4000.0 / nz as f64; nz],
            ..reference::Config::default()
        };
        let dycore = program::Dycore::new(&cfg).expect("dycore");
        let s0 = reference::random_smooth(&cfg, 7);
        let inputs = dycore.bindings(&s0, 1);
        let what = format!("dycore {nx}x{ny}x{nz}");
        let (mut prog, _arrays, call) = checked_gpu_program(&dev, &dycore.sdfg, &inputs, &what);
        for graphs in [true, false] {
            prog.set_graphs(graphs);
            let how = if graphs { "graph" } else { "direct" };
            g.bench_function(format!("{what} GPU time, {how}"), |bch| {
                bch.iter_custom(|iters| gpu_time(&mut prog, &call, iters))
            });
            g.bench_function(format!("{what} host enqueue, {how}"), |bch| {
                bch.iter_custom(|iters| enqueue_time(&mut prog, &call, iters))
            });
        }
        // The baseline: the compiled CPU program on every core of the same machine.
        let cpu = dycore
            .compile(&CpuBackend {
                cache: Some(cache()),
                ..CpuBackend::default()
            })
            .expect("CPU build");
        g.bench_function(format!("{what} CPU, all cores"), |bch| {
            bch.iter_custom(|iters| {
                let mut s = s0.clone();
                let t = Instant::now();
                dycore
                    .run_compiled(&cpu, &mut s, iters as usize)
                    .expect("CPU run");
                t.elapsed()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_bandwidth, bench_dycore);
criterion_main!(benches);
