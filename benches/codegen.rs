//! The CPU backend: call overhead, memory bandwidth against a STREAM triad measured in the
//! same run, the dycore per step (interpreter vs compiled, 1 vs 2 threads), and builds
//! (cold compile, warm-cache load). Figures go to docs/perf.md.

#[path = "../examples/dycore/program.rs"]
mod program;
#[path = "../examples/dycore/reference.rs"]
mod reference;

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use ndarray::{Array1, ArrayD, IxDyn};
use sdflow::codegen::{Args, Cache, CompilerOptions, CpuBackend};
use sdflow::ir::{DType, Sdfg, SdfgBuilder};
use sdflow::transforms::Pipeline;

fn backend() -> CpuBackend {
    CpuBackend {
        cache: Some(Cache::at(std::env::temp_dir().join("sdflow-bench-cache"))),
        ..CpuBackend::default()
    }
}

/// 15 copies `out_k[i] = in_k[i]`: 30 array arguments.
fn thirty_args() -> Sdfg {
    let mut b = SdfgBuilder::new("thirty");
    b.symbol("N", DType::I64);
    for k in 0..15 {
        b.array(&format!("in{k}"), DType::F64, ["N"]);
        b.array(&format!("out{k}"), DType::F64, ["N"]);
    }
    b.state("s", |s| {
        for k in 0..15 {
            s.map(&format!("m{k}"), &["i"], &["0:N"], |m| {
                m.tasklet(
                    "t",
                    &[("x", &format!("in{k}[i]"))],
                    &[("y", &format!("out{k}[i]"))],
                    "y = x",
                );
            });
        }
    });
    b.build()
}

/// The name of [`thirty_args`]'s `k`-th array: inputs and outputs alternate.
fn arg_name(k: usize) -> String {
    if k.is_multiple_of(2) {
        format!("in{}", k / 2)
    } else {
        format!("out{}", k / 2)
    }
}

fn bench_calls(c: &mut Criterion) {
    let mut g = c.benchmark_group("call");
    // The floor: an empty C function with run's signature, through the same FFI.
    let dir = std::env::temp_dir().join(format!("sdflow-bench-empty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("empty.c");
    std::fs::write(
        &src,
        "#include <stdint.h>\nint empty_run(void* s, void* const* a, const int64_t* i, const double* f) { (void)s; (void)a; (void)i; (void)f; return 0; }\n",
    )
    .unwrap();
    let lib_path: PathBuf = dir.join("libempty.so");
    CompilerOptions::default().compile(&src, &lib_path).unwrap();
    type RunFn = unsafe extern "C" fn(
        *mut std::ffi::c_void,
        *const *mut std::ffi::c_void,
        *const i64,
        *const f64,
    ) -> i32;
    // SAFETY: the library was just compiled from the source above.
    let lib = unsafe { libloading::Library::new(&lib_path) }.unwrap();
    let empty: RunFn = unsafe { *lib.get::<RunFn>(b"empty_run\0").unwrap() };
    let ptrs = vec![std::ptr::null_mut::<std::ffi::c_void>(); 30];
    let ints = [1i64];
    let floats = [0.0f64];
    g.bench_function("empty C function, 30 pointers (FFI floor)", |b| {
        b.iter(|| {
            // SAFETY: the function ignores its arguments.
            unsafe {
                black_box(empty(
                    std::ptr::null_mut(),
                    black_box(ptrs.as_ptr()),
                    ints.as_ptr(),
                    floats.as_ptr(),
                ))
            }
        })
    });
    let sdfg = thirty_args();
    let mut arrays: Vec<Array1<f64>> = (0..30).map(|_| Array1::zeros(1)).collect();
    for (label, be) in [
        ("OpenMP", backend()),
        (
            "sequential build",
            CpuBackend {
                compiler: CompilerOptions::default().without_openmp(),
                ..backend()
            },
        ),
    ] {
        let prog = be.build(&sdfg).unwrap();
        {
            let mut args = Args::new();
            for (k, a) in arrays.iter_mut().enumerate() {
                args = args.array(&arg_name(k), a);
            }
            let mut bound = prog.bind(args).unwrap();
            g.bench_function(format!("bound call, 30 arrays, N = 1 ({label})"), |b| {
                b.iter(|| bound.call().unwrap())
            });
        }
        g.bench_function(format!("checked call, 30 arrays, N = 1 ({label})"), |b| {
            b.iter(|| {
                let mut args = Args::new();
                for (k, a) in arrays.iter_mut().enumerate() {
                    args = args.array(&arg_name(k), a);
                }
                prog.call_checked(args).unwrap()
            })
        });
    }
    // Through a component: variant dispatch, bound arguments added, checks, one FFI
    // call — in a loop, and the first call after loading from a warm cache.
    let component = || {
        use sdflow::orchestration::component::{Component, ProgramSpec};
        use sdflow::orchestration::workflow::Workflow;
        let mut spec = ProgramSpec::new(sdfg.clone()).variants("N", [1i64, 2]);
        for k in 15..30 {
            spec = spec.bind_array(
                &arg_name(k),
                sdflow::ir::interp::HostArray::zeros(DType::F64, &[1]),
            );
        }
        Component::new(sdflow::codegen::Backend::Cpu)
            .workflow(std::sync::Arc::new(Workflow::new().with_cache(Some(
                Cache::at(std::env::temp_dir().join("sdflow-bench-cache")),
            ))))
            .with_program(spec)
            .build()
            .unwrap()
    };
    let programs = component();
    let call = programs.program("thirty").unwrap();
    g.bench_function(
        "component call, 15 arrays passed + 15 bound, variant N = 1",
        |b| {
            b.iter(|| {
                let mut args = Args::new().int("N", 1);
                for (k, a) in arrays.iter_mut().enumerate().take(15) {
                    args = args.array(&arg_name(k), a);
                }
                call.call(args).unwrap()
            })
        },
    );
    g.bench_function(
        "component load from a warm cache + first call (2 variants)",
        |b| {
            b.iter(|| {
                let programs = component();
                let mut args = Args::new().int("N", 1);
                for (k, a) in arrays.iter_mut().enumerate().take(15) {
                    args = args.array(&arg_name(k), a);
                }
                programs.program("thirty").unwrap().call(args).unwrap()
            })
        },
    );
    g.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

struct Hand {
    _lib: libloading::Library,
    copy: unsafe extern "C" fn(*const f64, *mut f64, i64),
    hyper: unsafe extern "C" fn(*const f64, *mut f64, i64, f64),
}

const HAND_C: &str = r#"
#include <stdint.h>
#include <stdlib.h>
void copy2d(const double* restrict u, double* restrict out, int64_t n) {
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) out[i * n + j] = u[i * n + j];
}
void hyper_tiled(const double* restrict u, double* restrict out, int64_t n, double alpha) {
    #pragma omp parallel
    {
        double* buf = (double*)malloc((size_t)(18 * n) * sizeof(double));
        #pragma omp for schedule(static)
        for (int64_t t = 0; t < (n - 4 + 15) / 16; t++) {
            int64_t r0 = 2 + 16 * t, r1 = r0 + 16 > n - 2 ? n - 2 : r0 + 16;
            for (int64_t i = r0 - 1; i < r1 + 1; i++) {
                double* b = buf + (i - (r0 - 1)) * n; const double* a = u + i * n;
                for (int64_t j = 1; j < n - 1; j++)
                    b[j] = a[j - n] + a[j + n] + a[j - 1] + a[j + 1] - 4.0 * a[j];
            }
            for (int64_t i = r0; i < r1; i++) {
                const double* b = buf + (i - (r0 - 1)) * n; const double* a = u + i * n;
                double* o = out + i * n;
                for (int64_t j = 2; j < n - 2; j++)
                    o[j] = a[j] - alpha * (b[j - n] + b[j + n] + b[j - 1] + b[j + 1] - 4.0 * b[j]);
            }
        }
        free(buf);
    }
}
"#;

fn hand_written() -> Hand {
    let dir = std::env::temp_dir().join(format!("sdflow-bench-hand-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("hand.c");
    std::fs::write(&src, HAND_C).unwrap();
    let lib_path = dir.join("libhand.so");
    CompilerOptions::default().compile(&src, &lib_path).unwrap();
    // SAFETY: compiled just above from HAND_C, which defines both functions.
    unsafe {
        let lib = libloading::Library::new(&lib_path).unwrap();
        let copy = *lib
            .get::<unsafe extern "C" fn(*const f64, *mut f64, i64)>(b"copy2d\0")
            .unwrap();
        let hyper = *lib
            .get::<unsafe extern "C" fn(*const f64, *mut f64, i64, f64)>(b"hyper_tiled\0")
            .unwrap();
        Hand {
            _lib: lib,
            copy,
            hyper,
        }
    }
}

fn lap3d() -> Sdfg {
    let mut b = SdfgBuilder::new("lap3d");
    b.symbol("NI", DType::I64)
        .symbol("NJ", DType::I64)
        .symbol("NK", DType::I64)
        .array("u", DType::F64, ["NI", "NJ", "NK"])
        .array("out", DType::F64, ["NI", "NJ", "NK"]);
    b.state("s", |s| {
        s.map(
            "lap",
            &["i", "j", "k"],
            &["1:NI-1", "1:NJ-1", "1:NK-1"],
            |m| {
                m.tasklet(
                    "lap",
                    &[
                        ("c", "u[i, j, k]"),
                        ("a", "u[i-1, j, k]"),
                        ("b", "u[i+1, j, k]"),
                        ("d", "u[i, j-1, k]"),
                        ("e", "u[i, j+1, k]"),
                        ("f", "u[i, j, k-1]"),
                        ("g", "u[i, j, k+1]"),
                    ],
                    &[("o", "out[i, j, k]")],
                    "o = a + b + d + e + f + g - 6.0 * c",
                );
            },
        );
    });
    b.build()
}

fn triad() -> Sdfg {
    let mut b = SdfgBuilder::new("triad");
    b.symbol("N", DType::I64)
        .symbol("s", DType::F64)
        .array("a", DType::F64, ["N"])
        .array("b", DType::F64, ["N"])
        .array("c", DType::F64, ["N"]);
    b.state("s", |st| {
        st.map("triad", &["i"], &["0:N"], |m| {
            m.tasklet(
                "t",
                &[("x", "b[i]"), ("y", "c[i]")],
                &[("o", "a[i]")],
                "o = x + s * y",
            );
        });
    });
    b.build()
}

fn bench_bandwidth(c: &mut Criterion) {
    let mut g = c.benchmark_group("bandwidth");
    g.sample_size(10);
    // STREAM triad: 3 × 8 B per element.
    let n = 1usize << 24;
    let prog = backend().build(&triad()).unwrap();
    let (mut a, mut b_, mut c_) = (
        Array1::<f64>::zeros(n),
        Array1::<f64>::from_elem(n, 1.0),
        Array1::<f64>::from_elem(n, 2.0),
    );
    {
        let mut call = prog
            .bind(
                Args::new()
                    .array("a", &mut a)
                    .array("b", &mut b_)
                    .array("c", &mut c_)
                    .float("s", 3.0),
            )
            .unwrap();
        g.throughput(Throughput::Bytes((24 * n) as u64));
        g.bench_function("STREAM triad 2^24 doubles", |bch| {
            bch.iter(|| call.call().unwrap())
        });
    }
    // Baselines in C, compiled with the same compiler and flags: a plain copy (the
    // floor for a kernel that reads one array and writes another) and a hand-written
    // tiled hyperdiffusion (16-row tiles, a per-thread buffer), the same algorithm the
    // optimizer produces.
    let hand = hand_written();
    let n = 4096usize;
    let (hu, mut hout) = (vec![0.5f64; n * n], vec![0.0f64; n * n]);
    g.throughput(Throughput::Bytes((2 * 8 * n * n) as u64));
    g.bench_function("copy 4096² (hand-written C)", |bch| {
        // SAFETY: both buffers hold n × n doubles.
        bch.iter(|| unsafe { (hand.copy)(hu.as_ptr(), hout.as_mut_ptr(), n as i64) })
    });
    g.bench_function("hyperdiffusion 4096² tiled (hand-written C)", |bch| {
        // SAFETY: as above.
        bch.iter(|| unsafe { (hand.hyper)(hu.as_ptr(), hout.as_mut_ptr(), n as i64, 0.05) })
    });
    // Hyperdiffusion lap(lap(u)) on 4096²: unfused (two maps, a full temporary) and
    // fused by the optimizer; bytes counted: read u, write out.
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hyperdiffusion.sdfg.json"),
    )
    .unwrap();
    let unfused = sdflow::ir::format::load(&text).unwrap();
    let mut fused = unfused.clone();
    Pipeline::cpu().run(&mut fused).unwrap();
    let n = 4096usize;
    let mut u =
        ArrayD::<f64>::from_shape_fn(IxDyn(&[n, n]), |ix| ((ix[0] * 7 + ix[1] * 3) % 17) as f64);
    let mut out = ArrayD::<f64>::zeros(IxDyn(&[n, n]));
    g.throughput(Throughput::Bytes((2 * 8 * n * n) as u64));
    // Fused by recomputation (the GPU pipeline's choice), without and with the e-graph
    // pass: 25 loads and 5 repeated inner Laplacians per point, or 13 loads.
    let recompute = |egraph: bool| {
        let mut s = unfused.clone();
        let mut p = Pipeline::cpu()
            .replace(
                "map_fusion",
                Box::new(sdflow::transforms::MapFusion {
                    tile_rows: 0,
                    ..Default::default()
                }),
            )
            .unwrap();
        if !egraph {
            p = p.disable("egraph").unwrap();
        }
        p.run(&mut s).unwrap();
        s
    };
    let (recomputed, recomputed_eg) = (recompute(false), recompute(true));
    for (label, sdfg) in [
        ("unfused", &unfused),
        ("fused", &fused),
        ("recomputed, no e-graph", &recomputed),
        ("recomputed + e-graph", &recomputed_eg),
    ] {
        let prog = backend().build(sdfg).unwrap();
        let mut call = prog
            .bind(
                Args::new()
                    .array("u", &mut u)
                    .array("out", &mut out)
                    .float("alpha", 0.05),
            )
            .unwrap();
        g.bench_function(format!("hyperdiffusion 4096² {label}"), |bch| {
            bch.iter(|| call.call().unwrap())
        });
    }
    // 7-point Laplacian on 256×256×128.
    let (ni, nj, nk) = (256usize, 256usize, 128usize);
    let mut u3 = ArrayD::<f64>::from_shape_fn(IxDyn(&[ni, nj, nk]), |ix| {
        ((ix[0] + 2 * ix[1] + 3 * ix[2]) % 11) as f64
    });
    let mut o3 = ArrayD::<f64>::zeros(IxDyn(&[ni, nj, nk]));
    let prog = backend().build(&lap3d()).unwrap();
    let mut call = prog
        .bind(Args::new().array("u", &mut u3).array("out", &mut o3))
        .unwrap();
    g.throughput(Throughput::Bytes((2 * 8 * ni * nj * nk) as u64));
    g.bench_function("laplacian 3D 256×256×128", |bch| {
        bch.iter(|| call.call().unwrap())
    });
    g.finish();
}

fn bench_dycore(c: &mut Criterion) {
    let mut g = c.benchmark_group("dycore step");
    g.sample_size(10);
    for (nx, ny, nz) in [(32, 32, 4), (256, 256, 4)] {
        let cfg = reference::Config {
            nx,
            ny,
            nz,
            ..reference::Config::default()
        };
        let dycore = program::Dycore::new(&cfg).unwrap();
        let s0 = reference::random_smooth(&cfg, 7);
        if nx == 32 {
            g.bench_function(format!("{nx}x{ny}x{nz} interpreter"), |b| {
                b.iter_batched(
                    || s0.clone(),
                    |mut s| dycore.run_interpreted(&mut s, 1).unwrap(),
                    BatchSize::LargeInput,
                )
            });
            g.bench_function(format!("{nx}x{ny}x{nz} plain-loop reference"), |b| {
                b.iter_batched(
                    || s0.clone(),
                    |mut s| reference::step(&cfg, &mut s),
                    BatchSize::LargeInput,
                )
            });
        }
        let prog = dycore.compile(&backend()).unwrap();
        for threads in [1, 2] {
            prog.set_threads(threads);
            let mut b0 = dycore.bindings(&s0, 1);
            g.bench_function(
                format!("{nx}x{ny}x{nz} compiled, {threads} thread(s)"),
                |b| b.iter(|| prog.run_bindings(&mut b0).unwrap()),
            );
        }
        prog.set_threads(0);
        if nx == 256 {
            // The same step optimized without the e-graph pass, one thread.
            let mut plain = dycore.sdfg.clone();
            Pipeline::cpu()
                .disable("egraph")
                .unwrap()
                .run(&mut plain)
                .unwrap();
            let prog = backend().build(&plain).unwrap();
            prog.set_threads(1);
            let mut b0 = dycore.bindings(&s0, 1);
            g.bench_function(
                format!("{nx}x{ny}x{nz} compiled without e-graph, 1 thread(s)"),
                |b| b.iter(|| prog.run_bindings(&mut b0).unwrap()),
            );
            prog.set_threads(0);
        }
    }
    g.finish();
}

fn bench_build(c: &mut Criterion) {
    let mut g = c.benchmark_group("build");
    g.sample_size(10);
    let dycore = program::Dycore::new(&reference::Config::default()).unwrap();
    let mut sdfg = dycore.sdfg.clone();
    Pipeline::cpu().run(&mut sdfg).unwrap();
    g.bench_function("dycore cold compile (no cache)", |b| {
        let be = CpuBackend {
            cache: None,
            ..CpuBackend::default()
        };
        b.iter(|| be.build(&sdfg).unwrap())
    });
    let warm = backend();
    warm.build(&sdfg).unwrap();
    g.bench_function(
        "dycore warm-cache load (generate, hash, verify, dlopen)",
        |b| b.iter(|| warm.build(&sdfg).unwrap()),
    );
    g.finish();
}

criterion_group!(
    benches,
    bench_calls,
    bench_bandwidth,
    bench_dycore,
    bench_build
);
criterion_main!(benches);
