//! The seed inputs: the project's real files (sdflow JSON programs, DaCe `.sdfg`/`.sdfgz`
//! files, `.npz` inputs with the program each one is bound against) and the strings of
//! all of them for the text syntax, plus what the mutations draw from.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use sdflow::ir::Sdfg;
use serde_json::Value;

use super::json::Pool;
use super::npz::Members;

/// One file to mutate.
pub struct Seed {
    /// File name, for reports.
    pub name: String,
    /// Its bytes as stored (gzip for `.sdfgz`).
    pub bytes: Vec<u8>,
    /// Its JSON text, parsed (the decompressed text for `.sdfgz`).
    pub json: Option<Value>,
    /// Stored gzip-compressed.
    pub gzip: bool,
}

/// One `.npz` file and the program it is bound against.
pub struct NpzSeed {
    /// File name.
    pub name: String,
    /// The archive's bytes.
    pub bytes: Vec<u8>,
    /// Its members.
    pub members: Members,
    /// Key of the program in [`Corpus::programs`].
    pub program: String,
}

/// Every seed, by loader, and what mutations draw from.
pub struct Corpus {
    /// sdflow JSON programs.
    pub json: Vec<Seed>,
    /// DaCe SDFG files.
    pub dace: Vec<Seed>,
    /// `.npz` inputs.
    pub npz: Vec<NpzSeed>,
    /// The programs `.npz` inputs are bound against, by file name.
    pub programs: BTreeMap<String, Sdfg>,
    /// Names of each program's containers and symbols (member names worth trying).
    pub names: BTreeMap<String, Vec<String>>,
    /// Strings of every JSON seed and hand-written ones: seeds of the text loaders.
    pub texts: Vec<String>,
    /// Strings, keys and subtrees for structure-aware mutations.
    pub pool: Pool,
    /// Programs and configurations for the tools' inputs.
    pub tools: super::tools::Seeds,
}

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn files(dir: &Path, exts: &[&str]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            exts.iter().any(|e| n.ends_with(e))
        })
        .collect();
    out.sort();
    out
}

fn gunzip(bytes: &[u8]) -> Option<String> {
    let mut s = String::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_string(&mut s)
        .ok()?;
    Some(s)
}

fn seed(path: &Path, max_bytes: usize) -> Option<Seed> {
    let bytes = std::fs::read(path).ok()?;
    let gzip = bytes.starts_with(&[0x1f, 0x8b]);
    let text = if gzip {
        gunzip(&bytes)?
    } else {
        String::from_utf8(bytes.clone()).ok()?
    };
    if text.len() > max_bytes {
        return None;
    }
    Some(Seed {
        name: path.file_name()?.to_string_lossy().into_owned(),
        json: serde_json::from_str(&text).ok(),
        bytes,
        gzip,
    })
}

/// Hand-written seeds of the text loaders, beside the corpus strings.
const TEXTS: [&str; 14] = [
    "o = n + s + w + e - 4.0 * c",
    "select(a > 0.0, sqrt(a), -a) * 2.0f32",
    "u[i - 1, j + 1]",
    "w[gt_conn_C2E2CO[c, n] - __w_Cell_range_0, k]",
    "0:N, 1:M - 1:2, e2c[e, 0]",
    "N - 1",
    "min(N, 2 * M) // 3 % 4",
    "(i < N) && !(j >= 2) || k == 0",
    "__out = (__in1 + 0.25)",
    "a = x if c > 0 else -y\nb = math.sqrt(abs(a)) ** 2",
    "v = f[(i - __r)] * 2.0",
    "lambda x, y: (x + y)",
    "(not (k > (- 1)))",
    "int_floor(N, 2) + Min(i, 3)",
];

impl Corpus {
    /// Loads the seeds under the repository root; DaCe and JSON files larger than
    /// `max_bytes` (decompressed) are left out, as they are slow to import.
    pub fn load(max_bytes: usize) -> Corpus {
        let root = root();
        let mut json = Vec::new();
        for dir in [
            "examples",
            "tests/in",
            "tests/in/broken",
            "tests/in/invalid",
        ] {
            json.extend(
                files(&root.join(dir), &[".json"])
                    .iter()
                    .filter_map(|p| seed(p, max_bytes)),
            );
        }
        let mut dace = Vec::new();
        for dir in ["tests/dace", "tests/dace/small"] {
            dace.extend(
                files(&root.join(dir), &[".sdfg", ".sdfgz"])
                    .iter()
                    .filter_map(|p| seed(p, max_bytes)),
            );
        }
        let mut programs = BTreeMap::new();
        let mut names = BTreeMap::new();
        let mut npz = Vec::new();
        for p in files(&root.join("tests/dace"), &[".npz"]) {
            let Some(stem) = p
                .file_name()
                .map(|n| n.to_string_lossy().trim_end_matches(".npz").to_string())
            else {
                continue;
            };
            let Some(prog) = program_for(&root.join("tests/dace"), &stem) else {
                continue;
            };
            let key = prog
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if !programs.contains_key(&key) {
                let Ok(bytes) = std::fs::read(&prog) else {
                    continue;
                };
                let Ok(sdfg) = sdflow::orchestration::dace::import_bytes(&bytes) else {
                    continue;
                };
                let mut n: Vec<String> = sdfg.arrays.keys().cloned().collect();
                n.extend(sdfg.symbols.keys().cloned());
                names.insert(key.clone(), n);
                programs.insert(key.clone(), sdfg);
            }
            let Ok(bytes) = std::fs::read(&p) else {
                continue;
            };
            let Some(members) = super::npz::members(&bytes) else {
                continue;
            };
            let members = as_arguments(members, &programs[&key]);
            let bytes = super::npz::archive(&members, false);
            npz.push(NpzSeed {
                name: format!("{stem}.npz"),
                bytes,
                members,
                program: key,
            });
        }
        let docs: Vec<&Value> = json
            .iter()
            .chain(&dace)
            .filter_map(|s| s.json.as_ref())
            .collect();
        let pool = Pool::new(&docs);
        let mut texts: Vec<String> = TEXTS.iter().map(|s| s.to_string()).collect();
        texts.extend(pool.strings.iter().filter(|s| !s.is_empty()).cloned());
        let tools = super::tools::Seeds::load(&root, &programs);
        Corpus {
            json,
            dace,
            npz,
            programs,
            names,
            texts,
            pool,
            tools,
        }
    }
}

/// The corpus archives hold the inputs and outputs of a run (`in__u`, `out__u`, GT4Py's
/// tables as `conn__C2E2CO`): their inputs, named as the arguments of the program, are an
/// archive `sdflow run --inputs` reads (GT4Py's timer output `gt_compute_time` added).
fn as_arguments(members: Members, sdfg: &Sdfg) -> Members {
    let mut out: Members = members
        .into_iter()
        .filter_map(|(name, data)| {
            let stem = name.trim_end_matches(".npy");
            let arg = match (stem.strip_prefix("in__"), stem.strip_prefix("conn__")) {
                (Some(a), _) => a.to_string(),
                (_, Some(o)) => format!("gt_conn_{o}"),
                _ => return None,
            };
            Some((format!("{arg}.npy"), data))
        })
        .collect();
    if sdfg.arrays.contains_key("gt_compute_time") {
        let dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }";
        out.push(("gt_compute_time.npy".into(), super::npz::npy(dict, &[0; 8])));
    }
    out
}

/// The program an `.npz` file of the corpus goes with: a DaCe file of the same stem,
/// simplified or final preferred.
pub fn program_for(dir: &Path, stem: &str) -> Option<PathBuf> {
    let cands: Vec<PathBuf> = files(dir, &[".sdfg", ".sdfgz"])
        .into_iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(&format!("{stem}.")))
        })
        .collect();
    let size = |p: &PathBuf| std::fs::metadata(p).map(|m| m.len()).unwrap_or(u64::MAX);
    cands
        .iter()
        .filter(|p| {
            let n = p.to_string_lossy();
            n.contains("simplified") || n.contains("dace.final")
        })
        .min_by_key(|p| size(p))
        .or_else(|| cands.iter().min_by_key(|p| size(p)))
        .cloned()
}
