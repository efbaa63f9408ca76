//! The devices' host layer: a kernel loaded, launched, captured and replayed — on a real
//! GPU from NVRTC's output (without a CUDA driver and device, or without NVRTC, that test
//! says it is skipped), and on the emulated device from the CUDA text itself (every
//! machine with a C++ compiler).

use sdflow_codegen::cache::Cache;
use sdflow_codegen::cuda::device::{CudaDevice, Device, EmulatedDevice, KernelArg, build_library};
use sdflow_codegen::cuda::nvrtc::{self, Arch, NvrtcOptions, Output};

const KERNEL: &str = r#"extern "C" __global__ void axpy(double* y, const double* x, double a, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i] + y[i];
    }
}
"#;

fn bytes(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

fn doubles(b: &[u8]) -> Vec<f64> {
    b.chunks_exact(8)
        .map(|c| f64::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn launch_capture_and_replay() {
    let mut dev = match CudaDevice::new(0) {
        Ok(dev) => dev,
        Err(e) => {
            eprintln!("skipped: no CUDA device ({e})");
            return;
        }
    };
    if let Err(e) = nvrtc::available() {
        eprintln!("skipped: NVRTC not found ({e})");
        return;
    }
    eprintln!("device: {}", dev.name());
    let (major, minor) = dev.arch();
    let opts = NvrtcOptions {
        arch: Arch::new(major, minor),
        extra: vec![],
    };
    let cubin = nvrtc::compile(KERNEL, "axpy.cu", &opts, Output::Cubin).unwrap();
    let ptx = nvrtc::compile(KERNEL, "axpy.cu", &opts, Output::Ptx).unwrap();
    exercise(&mut dev, &cubin.image, &ptx.image);
}

/// The same on the emulated device, which loads the host library built from the CUDA
/// text (twice: two modules, each with its own globals).
#[test]
fn emulated_launch_capture_and_replay() {
    let dir = std::env::temp_dir().join(format!("sdflow-emu-device-{}", std::process::id()));
    let cache = Cache::at(&dir);
    let names = vec!["axpy".to_string()];
    let (lib, _) = build_library(KERNEL, &names, Some(&cache)).unwrap();
    let mut dev = EmulatedDevice::with_threads(2);
    exercise(&mut dev, &lib, &lib);
    // An image that is not a host library is refused with a message.
    let err = dev.load_module(KERNEL.as_bytes(), &names);
    assert!(err.unwrap_err().0.contains("is not one"));
    // A kernel the text does not define does not build.
    let missing = build_library(KERNEL, &["nope".to_string()], Some(&cache));
    assert!(missing.unwrap_err().to_string().contains("nope"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Loads `image` and `image2` (each holding `axpy`) on `dev` and checks launches, capture
/// and replay, copies and counters.
fn exercise(dev: &mut dyn Device, image: &[u8], image2: &[u8]) {
    let names = vec!["axpy".to_string()];
    let k = dev.load_module(image, &names).unwrap()[0];
    let k_ptx = dev.load_module(image2, &names).unwrap()[0];
    let missing = dev.load_module(image, &["nope".to_string()]);
    assert!(missing.unwrap_err().0.contains("nope"));

    let n = 1000usize;
    let x: Vec<f64> = (0..n).map(|i| 0.1 * i as f64 + 1.0 / 3.0).collect();
    let y0: Vec<f64> = (0..n).map(|i| 1.0 / (i as f64 + 7.0)).collect();
    let a = 1.0 / 3.0;
    let px = dev.alloc_zeroed(n * 8).unwrap();
    let py = dev.alloc_zeroed(n * 8).unwrap();
    // Memory of the device passes the check arrays from other libraries get; a host
    // address does not.
    dev.check_memory(px, n * 8).unwrap();
    let host = x.as_ptr() as u64;
    let err = dev
        .check_memory(host, 8)
        .expect_err("a host address")
        .to_string();
    assert!(err.contains(&format!("{host:#x}")), "{err}");
    dev.copy_h2d(px, &bytes(&x)).unwrap();
    dev.copy_h2d(py, &bytes(&y0)).unwrap();
    let args = [
        KernelArg::Ptr(py),
        KernelArg::Ptr(px),
        KernelArg::F64(a),
        KernelArg::I64(n as i64),
    ];
    let grid = [n.div_ceil(128) as u32, 1, 1];
    let block = [128, 1, 1];
    dev.launch(k, grid, block, &args).unwrap();
    let ev = dev.record_event().unwrap();
    ev.wait().unwrap();
    assert!(ev.is_done());
    let mut out = vec![0u8; n * 8];
    dev.copy_d2h_sync(&mut out, py).unwrap();
    // Bit for bit: a rounded multiply, then a rounded add (no FMA on either side).
    let mut want: Vec<f64> = y0.iter().zip(&x).map(|(y, x)| a * x + y).collect();
    assert_eq!(doubles(&out), want);

    // Wrong arguments are refused before they reach the driver.
    let bad = dev.launch(k, grid, block, &[KernelArg::Ptr(py), KernelArg::I32(1)]);
    assert!(bad.unwrap_err().0.contains("takes parameters"));

    // Captured once, replayed twice (the PTX kernel, to load both kinds).
    dev.begin_capture().unwrap();
    assert!(dev.copy_h2d(px, &bytes(&x)).is_err());
    dev.launch(k_ptx, grid, block, &args).unwrap();
    let g = dev.end_capture().unwrap();
    dev.replay(g).unwrap();
    dev.replay(g).unwrap();
    dev.copy_d2h_sync(&mut out, py).unwrap();
    for _ in 0..2 {
        want = want.iter().zip(&x).map(|(y, x)| a * x + y).collect();
    }
    assert_eq!(doubles(&out), want);

    dev.copy_d2d(px, py, n * 8).unwrap();
    dev.memset_zero(py, n * 8).unwrap();
    dev.synchronize().unwrap();
    dev.copy_d2h_sync(&mut out, px).unwrap();
    assert_eq!(doubles(&out), want);
    dev.copy_d2h_sync(&mut out, py).unwrap();
    assert!(doubles(&out).iter().all(|&v| v == 0.0));

    let c = dev.counters();
    assert_eq!(c.launches, 2);
    assert_eq!(c.replays, 2);
    assert_eq!(c.copies, 2 + 4 + 1);
    assert_eq!(c.syncs, 1 + 4 + 1);
    dev.free(px);
    dev.free(py);
    dev.synchronize().unwrap();
}

/// A kernel whose threads read what other threads of the same launch write (a race on a
/// GPU): the emulated device in its threads' order and in reverse order gives two
/// results, so the reverse order exposes such a kernel; a kernel without one (`axpy`)
/// gives the same bits in both orders.
#[test]
fn the_emulated_device_in_reverse_order_exposes_threads_that_read_each_others_writes() {
    const RACY: &str = r#"extern "C" __global__ void shift(double* a, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i + 1 < n) {
        a[i] = a[i + 1] + 1.0;
    }
}
"#;
    let dir = std::env::temp_dir().join(format!("sdflow-emu-order-{}", std::process::id()));
    let cache = Cache::at(&dir);
    let n = 600usize;
    let run = |text: &str, name: &str, reverse: bool, args: &dyn Fn(u64, u64) -> Vec<KernelArg>| {
        let names = vec![name.to_string()];
        let (lib, _) = build_library(text, &names, Some(&cache)).unwrap();
        // One host thread: the blocks one after the other, so the orders are exact.
        let mut dev = EmulatedDevice::with_threads(1).in_reverse_order(reverse);
        assert_eq!(dev.name().contains("reverse order"), reverse);
        let k = dev.load_module(&lib, &names).unwrap()[0];
        let p = dev.alloc_zeroed(n * 8).unwrap();
        let q = dev.alloc_zeroed(n * 8).unwrap();
        let init: Vec<f64> = (0..n).map(|i| i as f64 * 0.25).collect();
        dev.copy_h2d(p, &bytes(&init)).unwrap();
        dev.copy_h2d(q, &bytes(&init)).unwrap();
        dev.launch(k, [n.div_ceil(128) as u32, 1, 1], [128, 1, 1], &args(p, q))
            .unwrap();
        let mut out = vec![0u8; n * 8];
        dev.copy_d2h_sync(&mut out, p).unwrap();
        doubles(&out)
    };
    let racy = |p: u64, _: u64| vec![KernelArg::Ptr(p), KernelArg::I64(n as i64)];
    let forward = run(RACY, "shift", false, &racy);
    let backward = run(RACY, "shift", true, &racy);
    // In order, each thread reads its neighbour before the neighbour's thread writes it;
    // in reverse, after.
    assert_eq!(forward[0], 0.25 + 1.0);
    assert_eq!(backward[0], 0.25 * (n - 1) as f64 + (n - 1) as f64);
    assert_ne!(forward, backward);
    let axpy = |p: u64, q: u64| {
        vec![
            KernelArg::Ptr(p),
            KernelArg::Ptr(q),
            KernelArg::F64(1.0 / 3.0),
            KernelArg::I64(n as i64),
        ]
    };
    assert_eq!(
        run(KERNEL, "axpy", false, &axpy),
        run(KERNEL, "axpy", true, &axpy)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
