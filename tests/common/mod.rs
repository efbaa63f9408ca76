//! Helpers shared by the integration tests that run imported DaCe and GT4Py programs.
#![allow(dead_code)] // each test binary uses its own part

use std::path::Path;

use ndarray_npy::NpzReader;
use sdflow::codegen::{Cache, CpuBackend};
use sdflow::ir::interp::{Bindings, HostArray};
use sdflow::ir::{DType, Sdfg, Value};

pub type Npz = NpzReader<std::fs::File>;

/// The CPU backend with the tests' shared build cache.
pub fn backend() -> CpuBackend {
    CpuBackend {
        cache: Some(Cache::at(std::env::temp_dir().join("sdflow-test-cache"))),
        ..CpuBackend::default()
    }
}

/// `s` compiled and run on a copy of `b`.
pub fn compiled(backend: &CpuBackend, s: &Sdfg, b: &Bindings) -> Bindings {
    let mut out = b.clone();
    backend.build(s).unwrap().run_bindings(&mut out).unwrap();
    out
}

pub fn open_npz(path: &Path) -> Npz {
    NpzReader::new(std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .unwrap()
}

/// Whether the npz has the array `key`.
pub fn has(npz: &mut Npz, key: &str) -> bool {
    npz.names()
        .unwrap()
        .iter()
        .any(|n| n.trim_end_matches(".npy") == key)
}

/// The array `key`, whatever its element type (float64, int32 or bool).
pub fn array(npz: &mut Npz, key: &str) -> HostArray {
    if let Ok(a) = npz.by_name::<ndarray::OwnedRepr<f64>, ndarray::IxDyn>(key) {
        return HostArray::F64(a);
    }
    if let Ok(a) = npz.by_name::<ndarray::OwnedRepr<i32>, ndarray::IxDyn>(key) {
        return HostArray::I32(a);
    }
    if let Ok(a) = npz.by_name::<ndarray::OwnedRepr<bool>, ndarray::IxDyn>(key) {
        return HostArray::Bool(a);
    }
    panic!("{key}: not a float64, int32 or bool array")
}

/// The npz's array names (without `.npy`).
pub fn names(npz: &mut Npz) -> Vec<String> {
    npz.names()
        .unwrap()
        .iter()
        .map(|n| n.trim_end_matches(".npy").to_string())
        .collect()
}

/// The arguments of a GT4Py program from its npz: fields `in__<name>`, the neighbour
/// tables `conn__<O>` as `gt_conn_<O>`, scalar parameters as symbols (a bool parameter as
/// the integer 0 or 1, as the importer declares DaCe's bool symbols), `gt_compute_time`
/// (the metrics output of the final files) zero and `gt_metrics_level` 0; every shape and
/// stride symbol inferred from the arrays.
pub fn gt4py_inputs(sdfg: &Sdfg, npz: &mut Npz) -> Bindings {
    let mut b = Bindings::default();
    for (arg, desc) in sdfg.non_transients() {
        let a = if let Some(o) = arg.strip_prefix("gt_conn_") {
            array(npz, &format!("conn__{o}"))
        } else if arg == "gt_compute_time" {
            HostArray::zeros(desc.dtype(), &[1])
        } else {
            array(npz, &format!("in__{arg}"))
        };
        b.arrays.insert(arg.clone(), a);
    }
    for (name, sym) in &sdfg.symbols {
        let key = format!("in__{name}");
        if !has(npz, &key) {
            continue;
        }
        let v = match array(npz, &key) {
            HostArray::F64(a) => a.iter().copied().next().unwrap(),
            HostArray::I32(a) => f64::from(a.iter().copied().next().unwrap()),
            HostArray::Bool(a) => f64::from(u8::from(a.iter().copied().next().unwrap())),
            _ => unreachable!(),
        };
        let v = match sym.dtype {
            DType::F64 => Value::F64(v),
            DType::I64 => Value::I64(v as i64),
            _ => Value::I32(v as i32),
        };
        b.symbols.insert(name.clone(), v);
    }
    if sdfg.symbols.contains_key("gt_metrics_level") {
        b.symbols.insert("gt_metrics_level".into(), Value::I32(0));
    }
    sdflow::cli::infer_symbols(sdfg, &b.arrays, &mut b.symbols).unwrap();
    b
}

/// Largest absolute difference of `field` to the npz's `out__<backend>__<field>`.
pub fn gt4py_diff(got: &Bindings, npz: &mut Npz, backend: &str, field: &str) -> f64 {
    let want = array(npz, &format!("out__{backend}__{field}")).to_f64_vec();
    got.arrays[field]
        .to_f64_vec()
        .iter()
        .zip(want.iter())
        .fold(0.0, |m, (g, x)| m.max((g - x).abs()))
}

/// `mpirun -n N sdflow ARGS…` (Open MPI, oversubscribed, allowed as root), with
/// `SDFLOW_CACHE_DIR` set to `cache`; `None` (with a note) where Open MPI is not
/// installed, unless `SDFLOW_REQUIRE_MPI=1`. Every run ends within two minutes.
pub fn mpirun(
    groups: &[(usize, Vec<String>)],
    cache: &std::path::Path,
) -> Option<std::process::Output> {
    if !have_mpi() {
        return None;
    }
    let mut cmd = std::process::Command::new("timeout");
    cmd.arg("120").arg("mpirun").arg("--oversubscribe");
    // A test of this process that started MPI itself (a singleton) left Open MPI's and
    // PMIx's variables in its environment: a job started from here must not inherit them.
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if ["OMPI_", "PMIX_", "PMI_", "OPAL_", "ORTE_"]
            .iter()
            .any(|p| k.starts_with(p))
        {
            cmd.env_remove(&k);
        }
    }
    for (k, (n, args)) in groups.iter().enumerate() {
        if k > 0 {
            cmd.arg(":");
        }
        cmd.arg("-n")
            .arg(n.to_string())
            .arg(env!("CARGO_BIN_EXE_sdflow"))
            .args(args);
    }
    // Programs run with `--backend cuda` run on the emulated device unless a device is
    // named; one host thread per launch (the ranks share the cores).
    if std::env::var_os("SDFLOW_CUDA_DEVICE").is_none() {
        cmd.env("SDFLOW_CUDA_DEVICE", "emulated");
    }
    let out = cmd
        .env("SDFLOW_CACHE_DIR", cache)
        .env("SDFLOW_EMULATED_THREADS", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMP_NUM_THREADS", "1")
        .output()
        .unwrap();
    assert_ne!(
        out.status.code(),
        Some(124),
        "mpirun did not end within two minutes"
    );
    Some(out)
}

/// A scratch directory of a test, empty.
pub fn scratch(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sdflow-mpi-{tag}-{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Whether Open MPI's `mpirun` and `mpicc` are installed; where not, says so (and fails
/// when `SDFLOW_REQUIRE_MPI=1`).
pub fn have_mpi() -> bool {
    let have = |tool: &str| {
        std::process::Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if have("mpirun") && have("mpicc") {
        return true;
    }
    assert!(
        std::env::var("SDFLOW_REQUIRE_MPI").as_deref() != Ok("1"),
        "SDFLOW_REQUIRE_MPI=1 but Open MPI's mpirun and mpicc are not installed"
    );
    eprintln!(
        "note: Open MPI is not installed (apt-get install openmpi-bin libopenmpi-dev); the MPI runs are left out"
    );
    false
}
