//! The system C compiler: which one, with which flags, and its identity (part of every
//! cache key).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::CodegenError;

/// How generated C is compiled.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CompilerOptions {
    /// The compiler: `$SDFLOW_CC`, else `cc`.
    pub cc: String,
    /// Flags. Default: `-O3 -march=native -fopenmp -ffp-contract=off -frounding-math
    /// -fno-math-errno -fPIC -shared -std=c11`. `-ffp-contract=off` keeps results bitwise
    /// equal to the interpreter (no fused multiply-add); `-frounding-math` keeps GCC from
    /// rewriting the arithmetic we print where it is exact only for some signs of zero
    /// (`0.0 - x` into `-x`) and from folding a math function of a constant to the
    /// correctly rounded result where the C library, which the interpreter calls, may
    /// differ in the last bit (`sinh`, `cosh`, `tanh`, `log10`, …). There is no
    /// fast-math unless a program opts in by adding flags here. With `SDFLOW_SANITIZE=1` in the environment, the
    /// sanitizer flags of [`CompilerOptions::sanitized`] follow.
    pub flags: Vec<String>,
    /// With `-march=native`, add the tuning of [`CompilerOptions::host_tuning`] for the
    /// host CPU (default: on).
    pub host_tuning: bool,
}

/// GCC's tuning that keeps its vectorizer from the AVX2/AVX-512 gather instructions
/// (`vgatherdpd`, …); it then vectorizes an indirect load as scalar loads assembled into a
/// vector.
pub const NO_HARDWARE_GATHER: &str =
    "-mtune-ctrl=^use_gather,^use_gather_2parts,^use_gather_4parts";

/// The `-mtune` targets (as GCC names the host CPU under `-march=native`) whose gather
/// instructions run under the microcode mitigation of Gather Data Sampling: Intel's cores
/// from Skylake to Tiger Lake and Rocket Lake. GCC 13.3 and 14 leave gathers out for these
/// by default; older GCC (12 in Debian 12) still emits them, and on such a CPU they are
/// slower than the scalar loads (`docs/backend-cpu.md`, *Host tuning*).
pub const SLOW_GATHER_TUNINGS: [&str; 9] = [
    "skylake",
    "skylake-avx512",
    "cannonlake",
    "icelake-client",
    "icelake-server",
    "cascadelake",
    "cooperlake",
    "tigerlake",
    "rocketlake",
];

/// The flags of a sanitized build: AddressSanitizer and UndefinedBehaviorSanitizer, a
/// finding ends the run (`-fno-sanitize-recover=all`).
pub const SANITIZE_FLAGS: [&str; 4] = [
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
    "-fno-omit-frame-pointer",
    "-g",
];

impl Default for CompilerOptions {
    fn default() -> Self {
        let opts = CompilerOptions {
            cc: std::env::var("SDFLOW_CC").unwrap_or_else(|_| "cc".to_string()),
            flags: [
                "-O3",
                "-march=native",
                "-fopenmp",
                "-ffp-contract=off",
                "-frounding-math",
                "-fno-math-errno",
                "-fPIC",
                "-shared",
                "-std=c11",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
            host_tuning: true,
        };
        if std::env::var("SDFLOW_SANITIZE").is_ok_and(|v| v == "1") {
            opts.sanitized()
        } else {
            opts
        }
    }
}

impl CompilerOptions {
    /// The same options at optimization level `level` (`-O1`, `-O2`, …) in place of
    /// the default's `-O3`: builds whose run time matters less than their build time
    /// (tests, an emulated device).
    pub fn at_level(mut self, level: &str) -> Self {
        self.flags.retain(|f| !f.starts_with("-O"));
        self.flags.insert(0, level.to_string());
        self
    }

    /// The same options without OpenMP (a sequential build).
    pub fn without_openmp(mut self) -> Self {
        self.flags.retain(|f| f != "-fopenmp");
        self
    }

    /// The same options with AddressSanitizer and UndefinedBehaviorSanitizer
    /// ([`SANITIZE_FLAGS`]; the flags are part of the cache key, so sanitized and plain
    /// libraries never mix). A process that loads such a library must have the
    /// sanitizer runtime loaded first: run it with `LD_PRELOAD` set to
    /// [`CompilerOptions::asan_runtime`].
    pub fn sanitized(mut self) -> Self {
        for f in SANITIZE_FLAGS {
            if !self.flags.iter().any(|x| x == f) {
                self.flags.push(f.to_string());
            }
        }
        self
    }

    /// The AddressSanitizer runtime library of this compiler
    /// (`cc -print-file-name=libasan.so`), when it has one.
    pub fn asan_runtime(&self) -> Option<PathBuf> {
        let out = Command::new(&self.cc)
            .arg("-print-file-name=libasan.so")
            .output()
            .ok()?;
        let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        (p.is_absolute() && p.exists()).then_some(p)
    }

    /// What identifies the compiler for caching: its `--version` text, and for
    /// `-march=native` the host CPU's model, so a cache shared between machines never
    /// hands out a library built for other instructions.
    pub fn identity(&self) -> Result<String, CodegenError> {
        // One `--version` run per compiler and process.
        static IDS: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());
        if let Ok(ids) = IDS.lock()
            && let Some((_, id)) = ids.iter().find(|(cc, _)| *cc == self.cc)
        {
            return Ok(self.with_cpu(id.clone()));
        }
        let out = Command::new(&self.cc)
            .arg("--version")
            .output()
            .map_err(|e| CodegenError::Compiler {
                message: format!(
                    "cannot run the C compiler '{}': {e}; install one (e.g. `apt-get install gcc`) or set SDFLOW_CC",
                    self.cc
                ),
                source_file: None,
            })?;
        if !out.status.success() {
            return Err(CodegenError::Compiler {
                message: format!("'{} --version' failed ({})", self.cc, out.status),
                source_file: None,
            });
        }
        let id = String::from_utf8_lossy(&out.stdout).into_owned();
        if let Ok(mut ids) = IDS.lock() {
            ids.push((self.cc.clone(), id.clone()));
        }
        Ok(self.with_cpu(id))
    }

    fn with_cpu(&self, mut id: String) -> String {
        if self.flags.iter().any(|f| f == "-march=native") {
            id.push_str(host_cpu());
            for f in self.host_tuning() {
                id.push(' ');
                id.push_str(f);
            }
        }
        id
    }

    /// The flags added after [`CompilerOptions::flags`] for the host CPU: with
    /// `-march=native` and [`CompilerOptions::host_tuning`], [`NO_HARDWARE_GATHER`] where
    /// the compiler accepts it and tunes for a CPU of [`SLOW_GATHER_TUNINGS`]; nothing
    /// where the flags already choose a tuning (`-mtune=`, `-mtune-ctrl=`). The compiler
    /// is asked once per process (`-march=native -Q --help=target`).
    pub fn host_tuning(&self) -> &'static [&'static str] {
        const NONE: &[&str] = &[];
        const NO_GATHER: &[&str] = &[NO_HARDWARE_GATHER];
        if !self.host_tuning
            || !self.flags.iter().any(|f| f == "-march=native")
            || self
                .flags
                .iter()
                .any(|f| f.starts_with("-mtune=") || f.starts_with("-mtune-ctrl="))
        {
            return NONE;
        }
        static SLOW: std::sync::Mutex<Vec<(String, bool)>> = std::sync::Mutex::new(Vec::new());
        let known = SLOW
            .lock()
            .ok()
            .and_then(|v| v.iter().find(|(cc, _)| *cc == self.cc).map(|(_, s)| *s));
        let slow = known.unwrap_or_else(|| {
            let slow = Command::new(&self.cc)
                .args(["-march=native", NO_HARDWARE_GATHER, "-Q", "--help=target"])
                .output()
                .ok()
                .filter(|o| o.status.success())
                .and_then(|o| tuned_cpu(&String::from_utf8_lossy(&o.stdout)))
                .is_some_and(|cpu| SLOW_GATHER_TUNINGS.contains(&cpu.as_str()));
            if let Ok(mut v) = SLOW.lock() {
                v.push((self.cc.clone(), slow));
            }
            slow
        });
        if slow { NO_GATHER } else { NONE }
    }

    /// Compiles `source` into the shared library `output`.
    pub fn compile(&self, source: &Path, output: &Path) -> Result<(), CodegenError> {
        let out = Command::new(&self.cc)
            .args(&self.flags)
            .args(self.host_tuning())
            .arg("-o")
            .arg(output)
            .arg(source)
            .arg("-lm")
            .output()
            .map_err(|e| CodegenError::Compiler {
                message: format!("cannot run the C compiler '{}': {e}", self.cc),
                source_file: Some(source.to_path_buf()),
            })?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            return Err(CodegenError::Compiler {
                message: format!(
                    "'{} {}' failed ({}):\n{}",
                    self.cc,
                    self.flags
                        .iter()
                        .map(String::as_str)
                        .chain(self.host_tuning().iter().copied())
                        .collect::<Vec<_>>()
                        .join(" "),
                    out.status,
                    stderr.trim_end()
                ),
                source_file: Some(source.to_path_buf()),
            });
        }
        Ok(())
    }
}

/// The CPU a compiler tunes for, from its `-Q --help=target` listing (GCC: the line
/// `  -mtune=  cascadelake`).
pub fn tuned_cpu(listing: &str) -> Option<String> {
    listing.lines().find_map(|l| {
        let v = l.trim_start().strip_prefix("-mtune=")?.trim();
        (!v.is_empty()).then(|| v.to_string())
    })
}

/// The host CPU's model name (Linux), or the architecture.
fn host_cpu() -> &'static str {
    static CPU: OnceLock<String> = OnceLock::new();
    CPU.get_or_init(|| {
        std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find(|l| l.starts_with("model name") || l.starts_with("CPU part"))
                    .map(str::to_string)
            })
            .unwrap_or_else(|| std::env::consts::ARCH.to_string())
    })
}

/// Where a program's files go when they are not cached: a fresh directory under the
/// system temporary directory.
pub fn scratch_dir(tag: &str) -> PathBuf {
    static COUNTER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::env::temp_dir().join(format!("sdflow-{tag}-{}-{n}", std::process::id()))
}

/// A compiled shared library on disk: an entry of the build cache, which stays, or a
/// file in a scratch directory of its own, which is removed when this is dropped. Load
/// the library before dropping this: a loaded library stays mapped after its file is
/// gone, so an uncached build leaves nothing behind in the temporary directory.
#[derive(Debug)]
pub struct LibraryFile {
    path: PathBuf,
    /// Held for its drop, which removes the folder.
    _scratch: Option<tempfile::TempDir>,
}

impl LibraryFile {
    /// A library in the build cache (or anywhere else it is to stay).
    pub fn kept(path: PathBuf) -> LibraryFile {
        LibraryFile {
            path,
            _scratch: None,
        }
    }

    /// Compiles C `source` with `compile(source file, library file)` in a fresh scratch
    /// directory. On success the directory goes when the returned value is dropped; when
    /// the compile fails it stays, so that the source the error names can be read.
    pub fn compile_scratch(
        source: &str,
        compile: impl FnOnce(&Path, &Path) -> Result<(), CodegenError>,
    ) -> Result<LibraryFile, CodegenError> {
        let dir = tempfile::Builder::new()
            .prefix("sdflow-build-")
            .tempdir()
            .map_err(|e| {
                CodegenError::Cache(format!(
                    "cannot create a scratch directory in {}: {e}",
                    std::env::temp_dir().display()
                ))
            })?;
        let src = dir.path().join("program.c");
        std::fs::write(&src, source)
            .map_err(|e| CodegenError::Cache(format!("{}: {e}", src.display())))?;
        let path = dir.path().join("libprogram.so");
        if let Err(e) = compile(&src, &path) {
            let _ = dir.keep();
            return Err(e);
        }
        Ok(LibraryFile {
            path,
            _scratch: Some(dir),
        })
    }

    /// The library's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl std::ops::Deref for LibraryFile {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}
