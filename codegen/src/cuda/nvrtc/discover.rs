//! Where NVRTC is, and loading it so that `cudarc` uses it (see [`super`]).

use super::{ENV_NVRTC, ENV_NVRTC_HOME, NvrtcInfo, PIP_REQUIREMENT, check, nv};
use std::ffi::c_int;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Searches (environment as it is now) and loads NVRTC.
pub(super) fn find() -> Result<NvrtcInfo, String> {
    let search = Search::from_env();
    // SAFETY: probing only; never panics.
    let found = locate(&search, || unsafe { nv::is_culib_present() })?;
    load(found)
}

/// Where to look, read from the environment once (tests build their own).
#[derive(Clone, Debug, Default)]
struct Search {
    /// `SDFLOW_NVRTC`.
    explicit: Option<PathBuf>,
    /// Directories that may hold the wheel's `libnvrtc.so.13` (with `python3*` patterns
    /// already expanded), in order.
    wheel_dirs: Vec<PathBuf>,
    /// The patterns, for messages.
    wheel_patterns: Vec<String>,
}

impl Search {
    fn from_env() -> Search {
        let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
        let explicit = var(ENV_NVRTC).map(PathBuf::from);
        let home = dirs::home_dir();
        let mut roots: Vec<(PathBuf, &str)> = Vec::new();
        if let Some(venv) = var("VIRTUAL_ENV") {
            roots.push((PathBuf::from(venv).join("lib"), "site-packages"));
        }
        if let Some(home) = &home {
            roots.push((home.join(".local/lib"), "site-packages"));
        }
        roots.push((PathBuf::from("/usr/local/lib"), "dist-packages"));
        let mut fixed = vec![PathBuf::from("/usr/lib/python3/dist-packages")];
        let install = var(ENV_NVRTC_HOME)
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".cache/sdflow/nvrtc")));
        fixed.extend(install);
        Search::new(explicit, &roots, &fixed)
    }

    /// `roots`: `(…/lib, site-packages|dist-packages)` pairs, searched as
    /// `…/lib/python3*/<packages>/nvidia/cu13/lib`; `fixed`: package directories searched as
    /// `<dir>/nvidia/cu13/lib`.
    fn new(explicit: Option<PathBuf>, roots: &[(PathBuf, &str)], fixed: &[PathBuf]) -> Search {
        const WHEEL_LIB: &str = "nvidia/cu13/lib";
        let mut wheel_dirs = Vec::new();
        let mut wheel_patterns = Vec::new();
        for (lib, packages) in roots {
            wheel_patterns.push(format!("{}/python3*/{packages}/{WHEEL_LIB}", lib.display()));
            let mut pythons: Vec<PathBuf> = std::fs::read_dir(lib)
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
                .map(|e| e.path())
                .collect();
            // Newest Python first: python3.12 before python3.9.
            pythons.sort_by_key(|p| {
                let name = p.file_name().unwrap_or_default().to_string_lossy();
                let minor = name["python3".len()..].trim_start_matches('.');
                std::cmp::Reverse((minor.parse::<u32>().unwrap_or(0), p.clone()))
            });
            wheel_dirs.extend(
                pythons
                    .into_iter()
                    .map(|p| p.join(packages).join(WHEEL_LIB)),
            );
        }
        for dir in fixed {
            wheel_patterns.push(format!("{}/{WHEEL_LIB}", dir.display()));
            wheel_dirs.push(dir.join(WHEEL_LIB));
        }
        Search {
            explicit,
            wheel_dirs,
            wheel_patterns,
        }
    }
}

/// Where the library was found.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Found {
    /// A file named by `SDFLOW_NVRTC`.
    Explicit(PathBuf),
    /// By name, through the system search.
    System,
    /// A file of a pip wheel.
    Wheel(PathBuf),
}

/// How to install NVRTC, for messages.
fn install_hint() -> String {
    format!(
        "install it with `pip install {PIP_REQUIREMENT}` (or `scripts/install-nvrtc.sh`) and \
         set {ENV_NVRTC} to the wheel's `nvidia/cu13/lib` directory, or to a libnvrtc.so file"
    )
}

/// Decides where NVRTC is, without loading anything but through `system_present`.
fn locate(search: &Search, system_present: impl FnOnce() -> bool) -> Result<Found, String> {
    if let Some(path) = &search.explicit {
        return match library_in(path) {
            Some(file) => Ok(Found::Explicit(file)),
            None if path.is_dir() => Err(format!(
                "NVRTC not found: {ENV_NVRTC}={} is a directory without a libnvrtc.so* file; {}",
                path.display(),
                install_hint()
            )),
            None => Err(format!(
                "NVRTC not found: {ENV_NVRTC}={} does not exist; {}",
                path.display(),
                install_hint()
            )),
        };
    }
    if system_present() {
        return Ok(Found::System);
    }
    if let Some(file) = search.wheel_dirs.iter().find_map(|d| library_in(d)) {
        return Ok(Found::Wheel(file));
    }
    let mut names = cudarc::get_lib_name_candidates("nvrtc");
    let mut seen = std::collections::HashSet::new();
    names.retain(|n| seen.insert(n.clone()));
    Err(format!(
        "NVRTC not found: {ENV_NVRTC} is not set; no {} on the library search path \
         (LD_LIBRARY_PATH, ldconfig); no pip wheel in {}; {}",
        names.join(", "),
        search.wheel_patterns.join(", "),
        install_hint()
    ))
}

/// The NVRTC library `path` names: the file itself, or the best `libnvrtc.so*` in it.
fn library_in(path: &Path) -> Option<PathBuf> {
    if path.is_file() {
        return Some(path.to_path_buf());
    }
    let mut candidates: Vec<(u8, PathBuf)> = std::fs::read_dir(path)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let rank = nvrtc_file_rank(&name)?;
            Some((rank, e.path()))
        })
        .collect();
    candidates.sort();
    candidates.into_iter().map(|(_, p)| p).find(|p| p.is_file())
}

/// How good a file name is as *the* NVRTC library (lower is better), or `None` for
/// files that are not it (`libnvrtc-builtins*`, the `.alt` variants, static archives).
fn nvrtc_file_rank(name: &str) -> Option<u8> {
    let rest = name.strip_prefix("libnvrtc.so")?;
    if rest.is_empty() {
        return Some(1);
    }
    let version = rest.strip_prefix('.')?;
    if !version
        .split('.')
        .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    // `libnvrtc.so.13` (what cudarc asks for by SONAME) first, then fuller versions.
    Some(if version.contains('.') { 2 } else { 0 })
}

/// Loads the library found and asks it for its version.
fn load(found: Found) -> Result<NvrtcInfo, String> {
    let library = match &found {
        Found::Explicit(path) | Found::Wheel(path) => {
            let ours = preload(path)?;
            ensure_cudarc_uses(path, ours)?;
            path.clone()
        }
        Found::System => {
            // Loaded by name through cudarc; the dynamic loader knows the file.
            std::panic::catch_unwind(|| unsafe { nv::culib() })
                .map_err(|_| "NVRTC was found but could not be loaded".to_string())?;
            loaded_path("libnvrtc.so")
                .unwrap_or_else(|| PathBuf::from("libnvrtc.so (system search)"))
        }
    };
    let (major, minor) = version()?;
    Ok(NvrtcInfo {
        major,
        minor,
        library,
    })
}

/// `nvrtcVersion`, through cudarc (so through the library cudarc resolved).
fn version() -> Result<(u32, u32), String> {
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: the library is loaded (checked by the caller); out-pointers are valid.
    let r = std::panic::catch_unwind(move || {
        let r = unsafe { nv::nvrtcVersion(&mut major, &mut minor) };
        (r, major, minor)
    })
    .map_err(|_| "NVRTC was loaded but has no nvrtcVersion".to_string())?;
    check(r.0, "nvrtcVersion")?;
    Ok((r.1.max(0) as u32, r.2.max(0) as u32))
}

/// The libraries loaded by path, kept loaded for the life of the process.
static PRELOADED: OnceLock<Vec<LoadedLib>> = OnceLock::new();

#[cfg(unix)]
type LoadedLib = libloading::os::unix::Library;
#[cfg(not(unix))]
type LoadedLib = libloading::Library;

/// Opens `path` (after its `libnvrtc-builtins` neighbour) globally and forever; returns
/// the address of its `nvrtcVersion`.
fn preload(path: &Path) -> Result<usize, String> {
    let mut libs = Vec::new();
    if let Some(dir) = path.parent() {
        for builtins in builtins_in(dir) {
            // Best effort: without it NVRTC will say so itself when compiling.
            if let Ok(lib) = open_global(&builtins) {
                libs.push(lib);
            }
        }
    }
    let lib = open_global(path).map_err(|e| {
        format!(
            "NVRTC at {} could not be loaded: {e}; {}",
            path.display(),
            install_hint()
        )
    })?;
    // SAFETY: only the symbol's address is read.
    let addr = unsafe { lib.get::<unsafe extern "C" fn()>(b"nvrtcVersion") }
        .map(|s| *s as usize)
        .map_err(|e| format!("{} is not NVRTC (no nvrtcVersion: {e})", path.display()))?;
    libs.push(lib);
    // Another thread may have won the race; then its libraries are the ones kept, and
    // ours are dropped, which only lowers reference counts of the same objects.
    let _ = PRELOADED.set(libs);
    Ok(addr)
}

fn builtins_in(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("libnvrtc-builtins.so")
        })
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}

#[cfg(unix)]
fn open_global(path: &Path) -> Result<LoadedLib, libloading::Error> {
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
    // SAFETY: loading NVRTC runs its initializers, which have no preconditions.
    unsafe { Library::open(Some(path), RTLD_NOW | RTLD_GLOBAL) }
}

#[cfg(not(unix))]
fn open_global(path: &Path) -> Result<LoadedLib, libloading::Error> {
    // SAFETY: as above.
    unsafe { libloading::Library::new(path) }
}

/// Checks that cudarc's own `dlopen` by name lands on the library loaded from `path`.
fn ensure_cudarc_uses(path: &Path, ours: usize) -> Result<(), String> {
    // SAFETY: probing only; `is_culib_present` never panics.
    if !unsafe { nv::is_culib_present() } {
        return Err(format!(
            "NVRTC at {} was loaded, but cudarc cannot open it by any of the names {:?} \
             (its SONAME is not one of them)",
            path.display(),
            cudarc::get_lib_name_candidates("nvrtc")
        ));
    }
    let lib = std::panic::catch_unwind(|| unsafe { nv::culib() }).map_err(|_| {
        format!(
            "NVRTC at {} was loaded, but cudarc could not open it",
            path.display()
        )
    })?;
    // SAFETY: only the symbol's address is read.
    let theirs = unsafe { lib.get::<unsafe extern "C" fn()>(b"nvrtcVersion") }
        .map(|s| *s as usize)
        .map_err(|e| format!("cudarc's NVRTC has no nvrtcVersion: {e}"))?;
    if theirs != ours {
        let other = loaded_path_except("libnvrtc.so", path)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "another libnvrtc".to_string());
        return Err(format!(
            "{ENV_NVRTC} names {}, but cudarc already resolved libnvrtc by name to {other}; \
             remove that one from the library search path or unset {ENV_NVRTC}",
            path.display()
        ));
    }
    Ok(())
}

/// The file of a loaded library whose name starts with `stem`, from `/proc/self/maps`.
fn loaded_path(stem: &str) -> Option<PathBuf> {
    loaded_paths(stem).into_iter().next()
}

fn loaded_path_except(stem: &str, except: &Path) -> Option<PathBuf> {
    let except = except
        .canonicalize()
        .unwrap_or_else(|_| except.to_path_buf());
    loaded_paths(stem)
        .into_iter()
        .find(|p| p.canonicalize().unwrap_or_else(|_| p.clone()) != except)
}

fn loaded_paths(stem: &str) -> Vec<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let mut out: Vec<PathBuf> = Vec::new();
    for line in maps.lines() {
        let Some(path) = line.split_whitespace().nth(5) else {
            continue;
        };
        let file = Path::new(path);
        let is_it = file
            .file_name()
            .map(|n| n.to_string_lossy().starts_with(stem))
            .unwrap_or(false);
        if is_it && !out.iter().any(|p| p == file) {
            out.push(file.to_path_buf());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "sdflow-nvrtc-test-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn file_names() {
        assert_eq!(nvrtc_file_rank("libnvrtc.so.13"), Some(0));
        assert_eq!(nvrtc_file_rank("libnvrtc.so"), Some(1));
        assert_eq!(nvrtc_file_rank("libnvrtc.so.13.0.88"), Some(2));
        assert_eq!(nvrtc_file_rank("libnvrtc-builtins.so.13.0"), None);
        assert_eq!(nvrtc_file_rank("libnvrtc.alt.so.13"), None);
        assert_eq!(nvrtc_file_rank("libnvrtc_static.a"), None);
        assert_eq!(nvrtc_file_rank("libnvrtc.so.13.bak"), None);
    }

    #[test]
    fn explicit_directory_without_library_is_an_error() {
        let dir = temp_dir("empty");
        let search = Search::new(Some(dir.clone()), &[], &[]);
        let err = locate(&search, || panic!("the system is not searched")).unwrap_err();
        assert!(err.contains("SDFLOW_NVRTC"), "{err}");
        assert!(err.contains(&dir.display().to_string()), "{err}");
        assert!(
            err.contains("pip install nvidia-cuda-nvrtc==13.0.88"),
            "{err}"
        );
        let missing = dir.join("nope");
        let search = Search::new(Some(missing.clone()), &[], &[]);
        let err = locate(&search, || true).unwrap_err();
        assert!(err.contains("does not exist"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn explicit_directory_picks_the_soname_file() {
        let dir = temp_dir("pick");
        for f in [
            "libnvrtc-builtins.so.13.0",
            "libnvrtc.alt.so.13",
            "libnvrtc.so.13",
            "libnvrtc.so.13.0.88",
        ] {
            std::fs::write(dir.join(f), b"").unwrap();
        }
        let search = Search::new(Some(dir.clone()), &[], &[]);
        assert_eq!(
            locate(&search, || true),
            Ok(Found::Explicit(dir.join("libnvrtc.so.13")))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn wheel_locations_after_the_system() {
        let root = temp_dir("wheel");
        let lib = root.join("lib");
        let wheel = lib.join("python3.12/site-packages/nvidia/cu13/lib");
        let older = lib.join("python3.9/site-packages/nvidia/cu13/lib");
        for dir in [&wheel, &older] {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join("libnvrtc.so.13"), b"").unwrap();
        }
        let search = Search::new(None, &[(lib.clone(), "site-packages")], &[]);
        assert_eq!(locate(&search, || true), Ok(Found::System));
        assert_eq!(
            locate(&search, || false),
            Ok(Found::Wheel(wheel.join("libnvrtc.so.13")))
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn nothing_found_says_what_was_searched() {
        let root = temp_dir("none");
        let search = Search::new(
            None,
            &[(root.join("lib"), "site-packages")],
            std::slice::from_ref(&root),
        );
        let err = locate(&search, || false).unwrap_err();
        assert!(err.contains("SDFLOW_NVRTC is not set"), "{err}");
        assert!(err.contains("libnvrtc.so.13"), "{err}");
        assert!(
            err.contains("python3*/site-packages/nvidia/cu13/lib"),
            "{err}"
        );
        assert!(
            err.contains("pip install nvidia-cuda-nvrtc==13.0.88"),
            "{err}"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_file_that_is_not_a_library_does_not_load() {
        let dir = temp_dir("bad");
        let file = dir.join("libnvrtc.so.13");
        std::fs::write(&file, b"not an ELF file").unwrap();
        let err = preload(&file).unwrap_err();
        assert!(err.contains("could not be loaded"), "{err}");
        assert!(err.contains("pip install"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
