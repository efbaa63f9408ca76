//! `sdflow bench`: a program's median time per call after warm-up, its effective
//! bandwidth, and the machine's ceiling measured in the same run — a STREAM-style copy
//! and triad compiled by the same backend on the CPU, a device-to-device copy on the
//! GPU — as fractions.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use sdflow_codegen::{Args, Backend, CpuBackend, MAX_THREADS};
use sdflow_ir::interp::{Bindings, HostArray};
use sdflow_ir::{Sdfg, Value, format};
use sdflow_orchestration::config::Options;

use sdflow_orchestration::show;

use crate::cli::{CliError, load_program, random_inputs};

/// Options of `sdflow bench`.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// `cpu` or `gpu`.
    pub backend: Backend,
    /// Timed calls (after three untimed ones).
    pub reps: usize,
    /// Symbol values (`N=4096`).
    pub symbols: Vec<(String, String)>,
    /// Seed of the pseudo-random inputs.
    pub seed: u64,
    /// Input arrays (`.npz`, bound as `sdflow run --inputs` binds them) instead of
    /// pseudo-random ones: programs whose neighbour tables must hold valid indices.
    pub inputs: Option<std::path::PathBuf>,
    /// OpenMP threads (0: the OpenMP default).
    pub threads: usize,
    /// Skip the optimization pipeline.
    pub no_opt: bool,
    /// A configuration file (`$SDFLOW_CONFIG` overrides it): the program's options
    /// (pipeline, fusion knobs, threads, schedule) come from it.
    pub config: Option<std::path::PathBuf>,
    /// Pass every argument whose strides the program leaves to the caller in this order,
    /// the program specialized for it first
    /// ([`sdflow_transforms::layout::specialize_unit_strides`]); `None`: row-major, not
    /// specialized.
    pub layout: Option<sdflow_transforms::Order>,
    /// Time every call with cold caches: a buffer twice the size of the last-level cache
    /// is read before each call, outside its time, and the ceiling is measured over
    /// arrays that together exceed that cache (CPU backend).
    pub cold: bool,
}

/// The compulsory traffic of one call: every argument array the program reads, once,
/// and every one it writes, once (bytes).
pub fn traffic(sdfg: &Sdfg, b: &Bindings) -> (u64, u64) {
    let size = |names: std::collections::BTreeSet<String>| -> u64 {
        names
            .iter()
            .filter_map(|n| b.arrays.get(n))
            .map(|a| (a.len() * a.dtype().size_bytes()) as u64)
            .sum()
    };
    (size(sdfg.read_data()), size(sdfg.written_data()))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn gbs(bytes: u64, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64() / 1e9
}

fn ms(t: Duration) -> String {
    format!("{:.3} ms", t.as_secs_f64() * 1e3)
}

/// What `sdflow bench` times, made from its argument files before anything compiles:
/// the program (optimized as configured), its pseudo-random inputs, their traffic and
/// the options.
pub struct Prepared {
    /// The program as it is compiled.
    pub sdfg: Sdfg,
    /// Its inputs.
    pub bindings: Bindings,
    /// Bytes read and written per call.
    pub traffic: (u64, u64),
    /// The options it is compiled and run with.
    pub options: Options,
}

/// The argument files and values of `sdflow bench` checked and read (the program, `-s`,
/// `--threads`, the configuration) and the program optimized: everything before the
/// compilation.
pub fn prepare(path: &Path, o: &BenchOptions) -> Result<Prepared, CliError> {
    if o.reps == 0 {
        return Err(CliError::Usage("--reps must be at least 1".into()));
    }
    if o.backend == Backend::Interp {
        return Err(CliError::Usage(
            "--backend: bench runs compiled code (cpu or cuda)".into(),
        ));
    }
    if o.cold && o.backend == Backend::Gpu {
        return Err(CliError::Usage(
            "--cold: the caches are flushed on the CPU backend only (a GPU's L2 is not)".into(),
        ));
    }
    if o.threads > MAX_THREADS {
        return Err(CliError::Usage(format!(
            "--threads {}: at most {MAX_THREADS} (more threads than sdflow asks the OpenMP runtime for; 0 is the OpenMP default)",
            o.threads
        )));
    }
    let mut sdfg = load_program(path)?;
    if let Some(order) = o.layout {
        show::specialize_layout(&mut sdfg, order)?;
    }
    let symbols = show::symbol_values(&sdfg, "-s/--symbol", &o.symbols)?;
    let bindings = match &o.inputs {
        Some(p) => crate::cli::bind_inputs(&sdfg, p, symbols)?,
        None => random_inputs(&sdfg, &symbols, o.seed, path, "bench", o.backend)?,
    };
    let traffic = traffic(&sdfg, &bindings);
    // This machine's architecture for either backend, as `sdflow bench` has always read
    // the tables.
    let mut options = show::resolve_options(
        o.config.as_deref(),
        &sdfg.name,
        o.backend,
        Some(sdflow_orchestration::config::host_arch()),
    )?
    .0
    .options;
    options.backend = o.backend;
    if o.threads > 0 {
        options.threads = o.threads;
    }
    if !o.no_opt && options.optimize {
        let p = options.pipeline().map_err(|source| CliError::Transform {
            path: path.display().to_string(),
            source,
        })?;
        p.run(&mut sdfg).map_err(|source| CliError::Transform {
            path: path.display().to_string(),
            source,
        })?;
    }
    Ok(Prepared {
        sdfg,
        bindings,
        traffic,
        options,
    })
}

/// `sdflow bench FILE`.
pub fn bench(path: &Path, o: &BenchOptions) -> Result<String, CliError> {
    let Prepared {
        sdfg,
        bindings: b,
        traffic: (read, written),
        options,
    } = prepare(path, o)?;
    let o = &BenchOptions {
        threads: options.threads,
        ..o.clone()
    };
    match o.backend {
        Backend::Cpu => bench_cpu(path, &sdfg, b, read, written, o, &options),
        Backend::Gpu => bench_gpu(path, &sdfg, b, read, written, o),
        Backend::Interp => Err(CliError::Usage(
            "--backend: bench runs compiled code (cpu or cuda)".into(),
        )),
    }
}

fn args_of<'a>(
    sig: &sdflow_codegen::cpu::Signature,
    arrays: &'a mut BTreeMap<String, HostArray>,
    symbols: &BTreeMap<String, Value>,
) -> Args<'a> {
    let mut args = Args::new();
    for (k, v) in symbols {
        if sig.floats.contains(k) {
            args = args.float(k, v.as_f64());
        } else if sig.ints.contains(k) {
            args = args.int(k, v.as_i64());
        }
    }
    for (k, a) in arrays.iter_mut() {
        if sig.arrays.iter().any(|s| &s.name == k) {
            args = args.host(k, a);
        }
    }
    args
}

fn bench_cpu(
    path: &Path,
    sdfg: &Sdfg,
    mut b: Bindings,
    read: u64,
    written: u64,
    o: &BenchOptions,
    options: &Options,
) -> Result<String, CliError> {
    let cg = |source| CliError::Codegen {
        path: path.display().to_string(),
        source,
    };
    let backend = CpuBackend {
        emit: sdflow_codegen::EmitOptions {
            parallel_min_points: options.parallel_min_points,
            schedule: options.schedule,
            overlap_exchanges: options.overlap_exchanges,
            lag_points: options.lag_points,
        },
        ..CpuBackend::default()
    };
    let prog = backend.build(sdfg).map_err(cg)?;
    if o.threads > 0 {
        prog.set_threads(o.threads);
    }
    // Lay arrays out as the program declares them (column-major for GT4Py's, say).
    let ints: BTreeMap<String, i64> = b
        .symbols
        .iter()
        .filter(|(_, v)| !v.dtype().is_float())
        .map(|(k, v)| (k.clone(), v.as_i64()))
        .collect();
    for (k, a) in b.arrays.iter_mut() {
        prog.lay_out(k, a, &ints);
    }
    let symbols = b.symbols.clone();
    let mut call = prog
        .bind(args_of(&prog.signature, &mut b.arrays, &symbols))
        .map_err(|e| CliError::Usage(e.to_string()))?;
    let run_err = |e: sdflow_codegen::CallError| CliError::Usage(e.to_string());
    for _ in 0..3 {
        call.call().map_err(run_err)?;
    }
    let mut flush = o.cold.then(Flush::new).transpose()?;
    let mut times = Vec::with_capacity(o.reps);
    for _ in 0..o.reps {
        if let Some(f) = &mut flush {
            f.run();
        }
        let t = Instant::now();
        call.call().map_err(run_err)?;
        times.push(t.elapsed());
    }
    drop(call);
    let (min, max) = (
        *times.iter().min().expect("reps ≥ 1"),
        *times.iter().max().expect("reps ≥ 1"),
    );
    let t = median(times);
    // The ceiling: arrays as large as the program's largest, and at least 32 MiB each;
    // with cold caches, three that together exceed the last-level cache twice over.
    let largest = b.arrays.values().map(|a| a.len()).max().unwrap_or(0);
    let mut n = largest.max(1 << 22);
    if let Some(f) = &flush {
        n = n.max(f.bytes().div_ceil(3 * 8));
    }
    let (copy, triad) = stream(&backend, n, o.threads, o.reps).map_err(cg)?;
    let bytes = read + written;
    let mut out = String::new();
    let threads = if o.threads > 0 {
        o.threads.to_string()
    } else {
        std::env::var("OMP_NUM_THREADS").unwrap_or_else(|_| {
            std::thread::available_parallelism().map_or("?".into(), |n| n.get().to_string())
        })
    };
    let _ = writeln!(
        out,
        "program: {} (cpu, {threads} threads{})",
        sdfg.name,
        if o.no_opt { ", not optimized" } else { "" }
    );
    if let Some(f) = &flush {
        let _ = writeln!(
            out,
            "cold caches: {:.0} MB read before each call ({})",
            f.bytes() as f64 / 1e6,
            match f.llc {
                Some(c) => format!("twice the {:.0} MB last-level cache", c as f64 / 1e6),
                None => "the last-level cache's size unknown".to_string(),
            }
        );
    }
    let _ = writeln!(
        out,
        "time per call: median {} (min {}, max {}) over {} calls",
        ms(t),
        ms(min),
        ms(max),
        o.reps
    );
    let bw = gbs(bytes, t);
    let _ = writeln!(
        out,
        "traffic: {:.1} MB per call (read {:.1} MB, written {:.1} MB): {bw:.2} GB/s",
        bytes as f64 / 1e6,
        read as f64 / 1e6,
        written as f64 / 1e6
    );
    let cbw = gbs(2 * 8 * n as u64, copy);
    let tbw = gbs(3 * 8 * n as u64, triad);
    let _ = writeln!(
        out,
        "ceiling (this run, {n} doubles per array): copy {cbw:.2} GB/s, triad {tbw:.2} GB/s"
    );
    let _ = writeln!(
        out,
        "fraction: {:.0}% of copy, {:.0}% of triad",
        100.0 * bw / cbw,
        100.0 * bw / tbw
    );
    Ok(out)
}

/// The size of this machine's largest CPU cache (bytes), from Linux's
/// `/sys/devices/system/cpu/cpu0/cache/index*/size`; `None` where that is not readable.
pub fn last_level_cache() -> Option<usize> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("size")).ok())
        .filter_map(|s| parse_cache_size(&s))
        .max()
}

/// A cache size as sysfs writes it (`48K`, `2048K`, `260M`, `1G`; a plain number is
/// bytes): bytes, or `None` for anything else.
pub fn parse_cache_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (digits, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(k) => s.split_at(k),
        None => (s, ""),
    };
    let scale = match unit.trim() {
        "" => 1,
        "K" | "KB" | "KiB" => 1 << 10,
        "M" | "MB" | "MiB" => 1 << 20,
        "G" | "GB" | "GiB" => 1 << 30,
        _ => return None,
    };
    digits.parse::<usize>().ok()?.checked_mul(scale)
}

/// What `--cold` reads before each timed call: twice the last-level cache (512 MiB where
/// its size is unknown), at least 64 MiB and at most 16 GiB. Read, not written, so that
/// the lines it leaves in the caches are clean and the program's first misses do not pay
/// for their write-back; read in parallel by every thread of rayon's pool (one per core),
/// so that the private caches of the cores those threads run on are emptied too.
struct Flush {
    buf: Vec<u64>,
    sum: u64,
    /// The last-level cache's size, where known.
    llc: Option<usize>,
}

impl Flush {
    fn new() -> Result<Flush, CliError> {
        let llc = last_level_cache();
        let bytes = llc
            .map_or(512 << 20, |c| c.saturating_mul(2))
            .clamp(64 << 20, 16 << 30);
        let mut buf: Vec<u64> = Vec::new();
        buf.try_reserve_exact(bytes / 8).map_err(|_| {
            CliError::Usage(format!(
                "--cold: cannot allocate the {:.0} MB read before each call to empty the caches",
                bytes as f64 / 1e6
            ))
        })?;
        buf.extend(0..bytes as u64 / 8);
        Ok(Flush { buf, sum: 0, llc })
    }

    fn bytes(&self) -> usize {
        self.buf.len() * 8
    }

    /// Reads the whole buffer, one word per 64-byte line.
    fn run(&mut self) {
        use rayon::prelude::*;
        let s: u64 = self
            .buf
            .par_chunks(1 << 16)
            .map(|c| c.iter().step_by(8).fold(0u64, |s, &v| s.wrapping_add(v)))
            .reduce(|| 0, u64::wrapping_add);
        self.sum = std::hint::black_box(self.sum.wrapping_add(s));
    }
}

/// STREAM's copy (`b = a`) and triad (`a = b + s·c`) over `n` doubles, compiled by
/// `backend`: median times.
fn stream(
    backend: &CpuBackend,
    n: usize,
    threads: usize,
    reps: usize,
) -> Result<(Duration, Duration), sdflow_codegen::CodegenError> {
    let program = |name: &str, code: &str, inputs: &[&str], output: &str| {
        let ins: Vec<String> = inputs
            .iter()
            .enumerate()
            .map(|(k, a)| {
                format!(
                    r#"{{"src": {k}, "dst": {m}, "memlet": "{a}[0:N]"}}"#,
                    m = inputs.len()
                )
            })
            .collect();
        let inner_ins: Vec<String> = inputs
            .iter()
            .enumerate()
            .map(|(k, a)| {
                format!(
                    r#"{{"src": {k}, "dst": {t}, "dst_conn": "x{k}", "memlet": "{a}[i]"}}"#,
                    t = inputs.len()
                )
            })
            .collect();
        let access: Vec<String> = inputs
            .iter()
            .map(|a| format!(r#"{{"access": "{a}"}}"#))
            .collect();
        let conns: Vec<String> = (0..inputs.len())
            .map(|k| format!(r#""x{k}": "f64""#))
            .collect();
        let t = inputs.len();
        format!(
            r#"{{"sdflow_format": 1, "name": "{name}",
  "symbols": {{"N": {{"dtype": "i64"}}, "s": {{"dtype": "f64"}}}},
  "arrays": {{"a": {{"dtype": "f64", "shape": ["N"]}}, "b": {{"dtype": "f64", "shape": ["N"]}}, "c": {{"dtype": "f64", "shape": ["N"]}}}},
  "states": [{{"name": "main", "nodes": [{acc}, {{"map": {{"label": "{name}", "params": ["i"], "ranges": ["0:N"],
      "nodes": [{acc}, {{"tasklet": {{"name": "{name}", "inputs": {{{conns}}}, "outputs": {{"y": "f64"}}, "code": ["{code}"]}}}}, {{"access": "{output}"}}],
      "edges": [{inner}, {{"src": {t}, "dst": {t1}, "src_conn": "y", "memlet": "{output}[i]"}}]}}}}, {{"access": "{output}"}}],
    "edges": [{outer}, {{"src": {t}, "dst": {t1}, "memlet": "{output}[0:N]"}}]}}],
  "body": {{"state": 0}}}}"#,
            acc = access.join(", "),
            conns = conns.join(", "),
            inner = inner_ins.join(", "),
            outer = ins.join(", "),
            t1 = t + 1,
        )
    };
    let copy = format::load(&program("stream_copy", "y = x0", &["a"], "b"))
        .map_err(|e| sdflow_codegen::CodegenError::Unsupported(e.to_string()))?;
    let triad = format::load(&program(
        "stream_triad",
        "y = x0 + s * x1",
        &["b", "c"],
        "a",
    ))
    .map_err(|e| sdflow_codegen::CodegenError::Unsupported(e.to_string()))?;
    let mut a = ndarray::Array1::<f64>::from_elem(n, 1.0);
    let mut bb = ndarray::Array1::<f64>::from_elem(n, 2.0);
    let mut c = ndarray::Array1::<f64>::from_elem(n, 0.5);
    let mut time = |sdfg: &Sdfg| -> Result<Duration, sdflow_codegen::CodegenError> {
        let prog = backend.build(sdfg)?;
        if threads > 0 {
            prog.set_threads(threads);
        }
        let args = Args::new()
            .array("a", &mut a)
            .array("b", &mut bb)
            .array("c", &mut c)
            .int("N", n as i64)
            .float("s", 3.0);
        let mut call = prog
            .bind(args)
            .map_err(|e| sdflow_codegen::CodegenError::Load(e.to_string()))?;
        let mut v = Vec::with_capacity(reps);
        for k in 0..reps + 3 {
            let t = Instant::now();
            call.call()
                .map_err(|e| sdflow_codegen::CodegenError::Load(e.to_string()))?;
            if k >= 3 {
                v.push(t.elapsed());
            }
        }
        Ok(median(v))
    };
    Ok((time(&copy)?, time(&triad)?))
}

/// Calls enqueued before one wait in the back-to-back figure of `bench --backend cuda`.
const PIPELINED_CHUNK: usize = 16;

fn bench_gpu(
    path: &Path,
    sdfg: &Sdfg,
    b: Bindings,
    read: u64,
    written: u64,
    o: &BenchOptions,
) -> Result<String, CliError> {
    use sdflow_codegen::cuda::exec::{CudaBackend, DeviceArgs};
    let dev = sdflow_codegen::cuda::device::from_env()
        .map_err(|e| CliError::Usage(format!("--backend cuda: {e}")))?;
    let cg = |source| CliError::Codegen {
        path: path.display().to_string(),
        source,
    };
    let run_err = |e: sdflow_codegen::CallError| CliError::Usage(e.to_string());
    let mut prog = CudaBackend::default().build(sdfg, &dev).map_err(cg)?;
    let sig = prog.program().plan.signature.clone();
    let mut arrays = Vec::new();
    for a in &sig.arrays {
        let h = b
            .arrays
            .get(&a.name)
            .ok_or_else(|| CliError::Usage(format!("no input for '{}'", a.name)))?;
        arrays.push(prog.upload(&a.name, h).map_err(run_err)?);
    }
    let mut args = DeviceArgs::new();
    for (a, d) in sig.arrays.iter().zip(&arrays) {
        args = args.array(&a.name, d);
    }
    for (k, v) in &b.symbols {
        if sig.floats.contains(k) {
            args = args.float(k, v.as_f64());
        } else if sig.ints.contains(k) {
            args = args.int(k, v.as_i64());
        }
    }
    let call = prog.bind(args).map_err(run_err)?;
    for _ in 0..3 {
        let done = prog.call_bound(&call).map_err(run_err)?;
        prog.wait(done).map_err(run_err)?;
    }
    // Each call waited on alone: the GPU time of one call plus one launch latency.
    let mut times = Vec::with_capacity(o.reps);
    for _ in 0..o.reps {
        let t = Instant::now();
        let done = prog.call_bound(&call).map_err(run_err)?;
        prog.wait(done).map_err(run_err)?;
        times.push(t.elapsed());
    }
    let t = median(times);
    // Back to back, as a host that runs ahead calls: chunks of calls enqueued before one
    // wait (few enough that no enqueue waits for a full launch queue), per call.
    let mut chunks = Vec::new();
    for _ in 0..o.reps.div_ceil(PIPELINED_CHUNK).max(3) {
        let t = Instant::now();
        let mut last = None;
        for _ in 0..PIPELINED_CHUNK {
            last = Some(prog.call_bound(&call).map_err(run_err)?);
        }
        if let Some(done) = last {
            prog.wait(done).map_err(run_err)?;
        }
        chunks.push(t.elapsed() / PIPELINED_CHUNK as u32);
    }
    let pipelined = median(chunks);
    // The ceiling: a device-to-device copy of as many bytes as the program moves.
    let bytes = ((read + written) as usize / 2).max(1 << 28);
    let copy = {
        let mut d = dev.lock();
        let x = d.alloc_zeroed(bytes).map_err(|e| CliError::Usage(e.0))?;
        let y = d.alloc_zeroed(bytes).map_err(|e| CliError::Usage(e.0))?;
        let mut v = Vec::new();
        for k in 0..o.reps + 3 {
            d.synchronize().map_err(|e| CliError::Usage(e.0))?;
            let t = Instant::now();
            d.copy_d2d(y, x, bytes).map_err(|e| CliError::Usage(e.0))?;
            d.synchronize().map_err(|e| CliError::Usage(e.0))?;
            if k >= 3 {
                v.push(t.elapsed());
            }
        }
        d.free(x);
        d.free(y);
        median(v)
    };
    let bw = gbs(read + written, t);
    let cbw = gbs(2 * bytes as u64, copy);
    let mut out = String::new();
    let _ = writeln!(out, "program: {} (cuda)", sdfg.name);
    let _ = writeln!(out, "time per call: median {} over {} calls", ms(t), o.reps);
    let _ = writeln!(
        out,
        "back to back: {} per call ({PIPELINED_CHUNK} calls enqueued, then one wait)",
        ms(pipelined)
    );
    let _ = writeln!(
        out,
        "traffic: {:.1} MB per call: {bw:.1} GB/s",
        (read + written) as f64 / 1e6
    );
    let _ = writeln!(
        out,
        "ceiling (this run): device-to-device copy {cbw:.1} GB/s"
    );
    let _ = writeln!(out, "fraction: {:.0}% of copy", 100.0 * bw / cbw);
    Ok(out)
}
