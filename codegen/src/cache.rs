//! The persistent, content-addressed build cache.
//!
//! An entry is a directory `<dir>/<key>/` holding the generated source and the artifact
//! built from it ([`Artifact`]: `program.c` and `libprogram.so` for the CPU, `program.cu`
//! and `program.cubin` for CUDA) and `ok` (the BLAKE3 hash of the artifact, written last). It is built in a private
//! temporary directory and renamed into place, under an exclusive lock on
//! `<dir>/<key>.lock`, so that processes starting together (MPI ranks) compile once and
//! all load the same library; a reader without the lock sees either no entry or a whole
//! one. An entry whose library does not match its recorded hash (truncated, corrupted) is
//! rebuilt, never loaded.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::CodegenError;

/// A cache directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cache {
    dir: PathBuf,
}

/// The file names of one kind of cache entry: the generated source and what is built
/// from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Artifact {
    /// The generated source, kept for the user.
    pub source: &'static str,
    /// The built artifact, whose hash makes the entry whole.
    pub output: &'static str,
}

impl Artifact {
    /// C compiled to a shared library.
    pub const C_LIBRARY: Artifact = Artifact {
        source: "program.c",
        output: "libprogram.so",
    };
    /// CUDA C compiled by NVRTC to a device image (CUBIN or PTX).
    pub const CUDA_IMAGE: Artifact = Artifact {
        source: "program.cu",
        output: "program.image",
    };

    fn extension(&self) -> &'static str {
        self.source.rsplit('.').next().unwrap_or("src")
    }
}

/// Where a library came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Compiled by this call.
    Built,
    /// Found in the cache.
    Cached,
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> CodegenError {
    CodegenError::Cache(format!("{what} '{}': {e}", path.display()))
}

impl Cache {
    /// The cache at `$SDFLOW_CACHE_DIR`, else the platform cache directory
    /// (`~/.cache/sdflow` on Linux), else the system temporary directory.
    pub fn from_env() -> Cache {
        let dir = std::env::var_os("SDFLOW_CACHE_DIR")
            .map(PathBuf::from)
            .or_else(|| dirs::cache_dir().map(|d| d.join("sdflow")))
            .unwrap_or_else(|| std::env::temp_dir().join("sdflow-cache"));
        Cache { dir }
    }

    /// A cache at `dir`.
    pub fn at(dir: impl Into<PathBuf>) -> Cache {
        Cache { dir: dir.into() }
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The key of a build: a hash of everything that determines the library.
    pub fn key(parts: &[&str]) -> String {
        let mut h = blake3::Hasher::new();
        for p in parts {
            h.update(&(p.len() as u64).to_le_bytes());
            h.update(p.as_bytes());
        }
        h.finalize().to_hex()[..32].to_string()
    }

    /// The artifact of entry `key` if it is whole.
    fn verified(&self, key: &str, kind: Artifact) -> Option<PathBuf> {
        let entry = self.dir.join(key);
        let expected = fs::read_to_string(entry.join("ok")).ok()?;
        let lib = entry.join(kind.output);
        let bytes = fs::read(&lib).ok()?;
        (blake3::hash(&bytes).to_hex().as_str() == expected.trim()).then_some(lib)
    }

    /// The C library of entry `key`, built with `build(source_path, library_path)` from
    /// `source` when the cache has no whole entry.
    pub fn get_or_build(
        &self,
        key: &str,
        source: &str,
        build: impl FnOnce(&Path, &Path) -> Result<(), CodegenError>,
    ) -> Result<(PathBuf, Origin), CodegenError> {
        self.get_or_build_artifact(key, Artifact::C_LIBRARY, source, build)
    }

    /// The artifact of kind `kind` of entry `key`, built with
    /// `build(source_path, artifact_path)` from `source` when the cache has no whole entry.
    pub fn get_or_build_artifact(
        &self,
        key: &str,
        kind: Artifact,
        source: &str,
        build: impl FnOnce(&Path, &Path) -> Result<(), CodegenError>,
    ) -> Result<(PathBuf, Origin), CodegenError> {
        if let Some(lib) = self.verified(key, kind) {
            return Ok((lib, Origin::Cached));
        }
        fs::create_dir_all(&self.dir).map_err(|e| io_err("cannot create", &self.dir, e))?;
        let lock_path = self.dir.join(format!("{key}.lock"));
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| io_err("cannot open", &lock_path, e))?;
        lock.lock()
            .map_err(|e| io_err("cannot lock", &lock_path, e))?;
        let result = self.build_locked(key, kind, source, build);
        let _ = lock.unlock();
        result
    }

    fn build_locked(
        &self,
        key: &str,
        kind: Artifact,
        source: &str,
        build: impl FnOnce(&Path, &Path) -> Result<(), CodegenError>,
    ) -> Result<(PathBuf, Origin), CodegenError> {
        // Someone else may have built it while we waited for the lock.
        if let Some(lib) = self.verified(key, kind) {
            return Ok((lib, Origin::Cached));
        }
        let entry = self.dir.join(key);
        if entry.exists() {
            // A broken entry: move it aside (a process may still have its library
            // mapped), then delete it.
            let trash = self
                .dir
                .join(format!("{key}.broken-{}", std::process::id()));
            fs::rename(&entry, &trash).map_err(|e| io_err("cannot move", &entry, e))?;
            let _ = fs::remove_dir_all(&trash);
        }
        let tmp = self.dir.join(format!(
            "{key}.tmp-{}-{}",
            std::process::id(),
            crate::compile::scratch_dir("c")
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        ));
        let _ = fs::remove_dir_all(&tmp);
        fs::create_dir_all(&tmp).map_err(|e| io_err("cannot create", &tmp, e))?;
        let src = tmp.join(kind.source);
        let lib = tmp.join(kind.output);
        fs::write(&src, source).map_err(|e| io_err("cannot write", &src, e))?;
        if let Err(e) = build(&src, &lib) {
            // Keep the source for the user: copy it next to the cache entry.
            let kept = self.dir.join(format!("{key}.failed.{}", kind.extension()));
            let _ = fs::copy(&src, &kept);
            let _ = fs::remove_dir_all(&tmp);
            return Err(match e {
                CodegenError::Compiler { message, .. } => CodegenError::Compiler {
                    message,
                    source_file: Some(kept),
                },
                other => other,
            });
        }
        let bytes = fs::read(&lib).map_err(|e| io_err("cannot read", &lib, e))?;
        let ok = tmp.join("ok");
        let mut f = File::create(&ok).map_err(|e| io_err("cannot write", &ok, e))?;
        f.write_all(blake3::hash(&bytes).to_hex().as_bytes())
            .and_then(|_| f.sync_all())
            .map_err(|e| io_err("cannot write", &ok, e))?;
        fs::rename(&tmp, &entry).map_err(|e| io_err("cannot move into place", &tmp, e))?;
        Ok((entry.join(kind.output), Origin::Built))
    }
}
