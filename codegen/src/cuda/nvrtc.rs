//! Finding and running NVRTC, NVIDIA's runtime CUDA C++ compiler.
//!
//! **Finding the library** ([`available`]), in this order:
//!
//! 1. `SDFLOW_NVRTC`: a `libnvrtc.so*` file, or a directory holding one. When it is set
//!    and names nothing loadable, that is the error (no silent fallback).
//! 2. The names `cudarc` tries (`libnvrtc.so`, `libnvrtc.so.13`, …) through the system
//!    search: `LD_LIBRARY_PATH`, the `ldconfig` cache, the default directories.
//! 3. The `nvidia-cuda-nvrtc` pip wheel (`nvidia/cu13/lib/libnvrtc.so.13`) in
//!    `$VIRTUAL_ENV/lib/python3*/site-packages`, `~/.local/lib/python3*/site-packages`,
//!    `/usr/local/lib/python3*/dist-packages`, `/usr/lib/python3/dist-packages`, and
//!    where `scripts/install-nvrtc.sh` puts it
//!    (`${SDFLOW_NVRTC_HOME:-~/.cache/sdflow/nvrtc}`).
//!
//! `cudarc` only loads libraries by name. A library found by path is `dlopen`ed first,
//! `RTLD_NOW | RTLD_GLOBAL`, and kept loaded for the life of the process; `cudarc`'s later
//! `dlopen("libnvrtc.so.13")` then returns that very library, since glibc matches loaded
//! objects by their SONAME. `libnvrtc-builtins.so.*` next to it is preloaded the same way
//! (the wheel's `libnvrtc` has no RPATH and opens it by name). [`available`] checks that
//! `cudarc` did resolve to the library it found.
//!
//! **Compiling** ([`compile`]) always passes `--fmad=false --prec-div=true
//! --prec-sqrt=true -std=c++17`, so that + − × ÷ sqrt round as the interpreter does, and
//! `--gpu-architecture=sm_XY` for a CUBIN or `compute_XY` for PTX.
//!
//! **CUBIN or PTX:** PTX written by a newer NVRTC carries a newer PTX ISA version, which
//! an older driver refuses (`CUDA_ERROR_UNSUPPORTED_PTX_VERSION`). A CUBIN for the exact
//! architecture of the device involves no JIT at load time, so the runtime loader
//! prefers CUBIN for the device's compute capability and keeps PTX for inspection.
//!
//! Nothing here panics when no library is installed: `cudarc` panics on a missing library,
//! so every path probes first (`cudarc::nvrtc::sys::is_culib_present`).

mod discover;

use crate::CodegenError;
use cudarc::nvrtc::sys as nv;
use std::ffi::{CStr, CString, c_char, c_int};
use std::fmt;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The environment variable naming the NVRTC library (a file or a directory).
pub const ENV_NVRTC: &str = "SDFLOW_NVRTC";
/// The environment variable naming where `scripts/install-nvrtc.sh` installs the wheel.
pub const ENV_NVRTC_HOME: &str = "SDFLOW_NVRTC_HOME";
/// The pip requirement that installs the NVRTC matching the CUDA 13.0 driver.
pub const PIP_REQUIREMENT: &str = "nvidia-cuda-nvrtc==13.0.88";

/// The NVRTC library in use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NvrtcInfo {
    /// `nvrtcVersion`'s major version (13 for CUDA 13.0).
    pub major: u32,
    /// `nvrtcVersion`'s minor version.
    pub minor: u32,
    /// The file loaded (as reported by the dynamic loader where known, else the name
    /// the system search resolved).
    pub library: PathBuf,
}

impl fmt::Display for NvrtcInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "NVRTC {}.{} ({})",
            self.major,
            self.minor,
            self.library.display()
        )
    }
}

/// Whether NVRTC can be used, and which one. Searched and loaded once per process (see
/// the [module documentation](self) for the order); the `Err` says what was searched and
/// how to install it.
pub fn available() -> Result<NvrtcInfo, String> {
    static FOUND: OnceLock<Result<NvrtcInfo, String>> = OnceLock::new();
    FOUND.get_or_init(discover::find).clone()
}

/// A GPU architecture (compute capability), `sm_90` by default.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Arch {
    /// The major compute capability (9 for sm_90).
    pub major: u32,
    /// The minor compute capability (0 for sm_90).
    pub minor: u32,
}

impl Arch {
    /// The architecture with compute capability `major.minor`.
    pub const fn new(major: u32, minor: u32) -> Arch {
        Arch { major, minor }
    }

    /// The virtual architecture of the same version, `compute_XY`, which PTX targets.
    pub fn compute(&self) -> String {
        format!("compute_{}{}", self.major, self.minor)
    }
}

impl Default for Arch {
    fn default() -> Arch {
        Arch::new(9, 0)
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sm_{}{}", self.major, self.minor)
    }
}

/// How to compile: the target architecture and options beyond the fixed ones.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NvrtcOptions {
    /// The architecture compiled for.
    pub arch: Arch,
    /// More NVRTC options, passed after the fixed ones (`-lineinfo`, `-default-device`,
    /// `-DNAME=value`, …).
    pub extra: Vec<String>,
}

impl NvrtcOptions {
    /// Every option passed to NVRTC for `output`, in order.
    pub fn arguments(&self, output: Output) -> Vec<String> {
        let target = match output {
            Output::Cubin => self.arch.to_string(),
            Output::Ptx => self.arch.compute(),
        };
        let mut args: Vec<String> = [
            "--fmad=false",
            "--prec-div=true",
            "--prec-sqrt=true",
            "-std=c++17",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push(format!("--gpu-architecture={target}"));
        args.extend(self.extra.iter().cloned());
        args
    }
}

/// What [`compile`] produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Output {
    /// An ELF image of machine code for exactly one `sm_XY`: loads without JIT.
    Cubin,
    /// PTX text for `compute_XY`: JIT-compiled by the driver at load time.
    Ptx,
}

/// A compiled CUDA program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compiled {
    /// The CUBIN (ELF) bytes, or the PTX text without a trailing NUL.
    pub image: Vec<u8>,
    /// Which of the two `image` is.
    pub kind: Output,
    /// NVRTC's log (warnings); empty when it said nothing.
    pub log: String,
}

/// Compiles the CUDA C++ `source` (kernels declared `extern "C" __global__`) named `name`
/// (the file name NVRTC's messages use) to a CUBIN or PTX. A compile error is
/// [`CodegenError::Compiler`] holding NVRTC's log and the source lines around the first
/// error; a missing NVRTC is the same error saying what was searched.
pub fn compile(
    source: &str,
    name: &str,
    opts: &NvrtcOptions,
    output: Output,
) -> Result<Compiled, CodegenError> {
    let fail = |message: String| CodegenError::Compiler {
        message,
        source_file: None,
    };
    available().map_err(|e| fail(format!("cannot compile `{name}`: {e}")))?;
    let src = CString::new(source)
        .map_err(|_| fail(format!("the CUDA source `{name}` contains a NUL byte")))?;
    let cname = CString::new(name).map_err(|_| {
        fail(format!(
            "the CUDA source name `{name:?}` contains a NUL byte"
        ))
    })?;
    let program = Program::create(&src, &cname).map_err(|e| fail(format!("{name}: {e}")))?;
    let args = opts.arguments(output);
    let status = program.compile(&args);
    let log = program.log().unwrap_or_default();
    let target = match output {
        Output::Cubin => opts.arch.to_string(),
        Output::Ptx => opts.arch.compute(),
    };
    if let Err(code) = status {
        let mut message = format!("NVRTC failed to compile `{name}` for {target} ({code})");
        if !log.trim().is_empty() {
            message.push_str(":\n");
            message.push_str(log.trim_end());
        }
        if let Some(context) = error_context(source, &log) {
            message.push('\n');
            message.push_str(&context);
        }
        if code == "NVRTC_ERROR_INVALID_OPTION" {
            message.push_str(&format!("\noptions: {}", args.join(" ")));
        }
        return Err(fail(message));
    }
    let image = match output {
        Output::Cubin => program.cubin(),
        Output::Ptx => program.ptx(),
    }
    .map_err(|e| fail(format!("NVRTC compiled `{name}` but {e}")))?;
    Ok(Compiled {
        image,
        kind: output,
        log: log.trim_end().to_string(),
    })
}

/// An NVRTC program, destroyed on drop.
struct Program(nv::nvrtcProgram);

impl Program {
    fn create(src: &CStr, name: &CStr) -> Result<Program, String> {
        let mut prog = std::ptr::null_mut();
        // SAFETY: `available()` succeeded, so the library is loaded; the strings outlive
        // the call (NVRTC copies them).
        let r = unsafe {
            nv::nvrtcCreateProgram(
                &mut prog,
                src.as_ptr(),
                name.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        check(r, "nvrtcCreateProgram")?;
        Ok(Program(prog))
    }

    /// Compiles; the `Err` is the name of NVRTC's result code.
    fn compile(&self, args: &[String]) -> Result<(), String> {
        let owned: Vec<CString> = args
            .iter()
            .map(|a| CString::new(a.replace('\0', "")).unwrap_or_default())
            .collect();
        let ptrs: Vec<*const c_char> = owned.iter().map(|c| c.as_ptr()).collect();
        // SAFETY: a live program; `ptrs` point into `owned`, alive for the call.
        let r = unsafe { nv::nvrtcCompileProgram(self.0, ptrs.len() as c_int, ptrs.as_ptr()) };
        match r {
            nv::nvrtcResult::NVRTC_SUCCESS => Ok(()),
            other => Err(format!("{other:?}")),
        }
    }

    fn log(&self) -> Result<String, String> {
        let mut size = 0usize;
        // SAFETY: a live program; the buffer has the size NVRTC asked for.
        unsafe {
            check(
                nv::nvrtcGetProgramLogSize(self.0, &mut size),
                "nvrtcGetProgramLogSize",
            )?;
            let mut buf = vec![0u8; size.max(1)];
            check(
                nv::nvrtcGetProgramLog(self.0, buf.as_mut_ptr() as *mut c_char),
                "nvrtcGetProgramLog",
            )?;
            Ok(text(buf))
        }
    }

    fn cubin(&self) -> Result<Vec<u8>, String> {
        let mut size = 0usize;
        // SAFETY: a live, compiled program; the buffer has the size NVRTC asked for.
        unsafe {
            check(
                nv::nvrtcGetCUBINSize(self.0, &mut size),
                "nvrtcGetCUBINSize",
            )?;
            if size == 0 {
                return Err("it produced no CUBIN (was a virtual architecture asked for?)".into());
            }
            let mut buf = vec![0u8; size];
            check(
                nv::nvrtcGetCUBIN(self.0, buf.as_mut_ptr() as *mut c_char),
                "nvrtcGetCUBIN",
            )?;
            Ok(buf)
        }
    }

    fn ptx(&self) -> Result<Vec<u8>, String> {
        let mut size = 0usize;
        // SAFETY: a live, compiled program; the buffer has the size NVRTC asked for.
        unsafe {
            check(nv::nvrtcGetPTXSize(self.0, &mut size), "nvrtcGetPTXSize")?;
            let mut buf = vec![0u8; size.max(1)];
            check(
                nv::nvrtcGetPTX(self.0, buf.as_mut_ptr() as *mut c_char),
                "nvrtcGetPTX",
            )?;
            while buf.last() == Some(&0) {
                buf.pop();
            }
            if buf.is_empty() {
                return Err("it produced no PTX".into());
            }
            Ok(buf)
        }
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by nvrtcCreateProgram and destroyed only here.
        unsafe {
            nv::nvrtcDestroyProgram(&mut self.0);
        }
    }
}

fn check(r: nv::nvrtcResult, what: &str) -> Result<(), String> {
    match r {
        nv::nvrtcResult::NVRTC_SUCCESS => Ok(()),
        other => Err(format!("{what} failed: {other:?}")),
    }
}

/// Bytes up to the first NUL, as text.
fn text(mut buf: Vec<u8>) -> String {
    if let Some(end) = buf.iter().position(|&b| b == 0) {
        buf.truncate(end);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// The source lines around the first error NVRTC's `log` points at (`name(LINE): error`).
fn error_context(source: &str, log: &str) -> Option<String> {
    let line: usize = log.lines().find_map(|l| {
        let at = l.find("): error")?;
        let open = l[..at].rfind('(')?;
        l[open + 1..at].trim().parse().ok()
    })?;
    let lines: Vec<&str> = source.lines().collect();
    if line == 0 || line > lines.len() {
        return None;
    }
    let first = line.saturating_sub(2).max(1);
    let last = (line + 2).min(lines.len());
    let width = last.to_string().len();
    let mut out = format!("near line {line}:");
    for n in first..=last {
        let mark = if n == line { '>' } else { ' ' };
        out.push_str(&format!("\n{mark} {n:>width$} | {}", lines[n - 1]));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_and_arguments() {
        let opts = NvrtcOptions::default();
        assert_eq!(opts.arch.to_string(), "sm_90");
        assert_eq!(opts.arch.compute(), "compute_90");
        let args = opts.arguments(Output::Cubin);
        assert!(args.contains(&"--fmad=false".to_string()));
        assert!(args.contains(&"--prec-div=true".to_string()));
        assert!(args.contains(&"--prec-sqrt=true".to_string()));
        assert!(args.contains(&"--gpu-architecture=sm_90".to_string()));
        let opts = NvrtcOptions {
            arch: Arch::new(8, 6),
            extra: vec!["-lineinfo".into()],
        };
        let args = opts.arguments(Output::Ptx);
        assert!(args.contains(&"--gpu-architecture=compute_86".to_string()));
        assert_eq!(args.last().map(String::as_str), Some("-lineinfo"));
    }

    #[test]
    fn error_context_shows_the_line() {
        let src = "a\nb\nc\nd\ne\nf\n";
        let log = "k.cu(4): error: expected a \";\"\n\n1 error detected";
        let ctx = error_context(src, log).unwrap();
        assert!(ctx.contains("near line 4"), "{ctx}");
        assert!(ctx.contains("> 4 | d"), "{ctx}");
        assert!(ctx.contains("  2 | b"), "{ctx}");
        assert!(ctx.contains("  6 | f"), "{ctx}");
        assert!(error_context(src, "k.cu(99): error: x").is_none());
        assert!(error_context(src, "no errors").is_none());
    }
}
