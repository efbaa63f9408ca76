//! The CPU backend: whole-program C with OpenMP ([`emit`]), compiled by the system C
//! compiler into a shared library, cached, and loaded.

pub use crate::plan::bounds;

use std::io::IsTerminal;
use std::time::Duration;

use rayon::prelude::*;
use sdflow_ir::Sdfg;

pub mod dialect;
pub mod emit;

pub use dialect::OpenMp;

pub use emit::{ArgSpec, EmitOptions, OmpSchedule, Signature};

use crate::cfamily::sites;

use crate::CodegenError;
use crate::args::static_ints;
use crate::cache::{Cache, Origin};
use crate::compile::{CompilerOptions, LibraryFile};
use crate::program::CompiledProgram;

/// Code generation, compilation and caching for the CPU.
#[derive(Clone, Debug)]
pub struct CpuBackend {
    /// Emitter options.
    pub emit: EmitOptions,
    /// Compiler and flags.
    pub compiler: CompilerOptions,
    /// Where libraries are cached (`None`: build in a scratch directory every time).
    pub cache: Option<Cache>,
}

impl Default for CpuBackend {
    fn default() -> Self {
        CpuBackend {
            emit: EmitOptions::default(),
            compiler: CompilerOptions::default(),
            cache: Some(Cache::from_env()),
        }
    }
}

impl CpuBackend {
    /// The C source of `sdfg` (validated first).
    pub fn generate(&self, sdfg: &Sdfg) -> Result<String, CodegenError> {
        Ok(self.generate_checked(sdfg)?.0)
    }

    /// The C source of `sdfg` (validated first) and its error sites and bind-time
    /// conditions.
    pub fn generate_checked(&self, sdfg: &Sdfg) -> Result<(String, sites::Sites), CodegenError> {
        if let Err(problems) = sdfg.validate() {
            return Err(CodegenError::Invalid(
                problems.iter().map(|p| p.to_string()).collect(),
            ));
        }
        emit::emit_program_checked(sdfg, &self.emit)
    }

    /// The cache key of a program whose generated C is `source`: the source itself (so a
    /// change of the program, the options or the code generator is a new key), the
    /// compiler flags and the compiler's identity, and the sdflow version.
    pub fn key(&self, source: &str) -> Result<String, CodegenError> {
        self.key_with(&self.compiler, source)
    }

    fn key_with(&self, compiler: &CompilerOptions, source: &str) -> Result<String, CodegenError> {
        let id = compiler.identity()?;
        let opts = format!("{:?}", compiler.flags);
        Ok(Cache::key(&[source, &opts, &id, env!("CARGO_PKG_VERSION")]))
    }

    /// Generates, compiles (or finds in the cache) and loads `sdfg`.
    pub fn build(&self, sdfg: &Sdfg) -> Result<CompiledProgram, CodegenError> {
        let unit = self.translate(sdfg)?;
        let (lib, origin) = self.compile_unit(&unit)?;
        unit.load(&lib, origin)
    }

    /// The generation step alone: the C translation unit of `sdfg` (validated first)
    /// with everything loading it needs.
    pub fn translate(&self, sdfg: &Sdfg) -> Result<CpuUnit, CodegenError> {
        let (source, sites) = self.generate_checked(sdfg)?;
        Ok(CpuUnit {
            name: sdfg.name.clone(),
            mpi: source.contains("\n#include <mpi.h>\n"),
            source,
            sites,
            signature: Signature::of(sdfg),
            statics: static_ints(sdfg),
        })
    }

    /// The compile step alone: the shared library of `unit`, from the cache or compiled
    /// into it (or, without a cache, into a scratch directory that goes when the
    /// returned file is dropped: load it first).
    pub fn compile_unit(&self, unit: &CpuUnit) -> Result<(LibraryFile, Origin), CodegenError> {
        self.compile_source(&unit.name, &unit.source, unit.mpi)
    }

    /// The shared library of C `source` (named `name` in progress messages), with the
    /// MPI C compiler when `mpi`: from the cache or compiled into it.
    pub(crate) fn compile_source(
        &self,
        name: &str,
        source: &str,
        mpi: bool,
    ) -> Result<(LibraryFile, Origin), CodegenError> {
        let compiler = if mpi {
            self.mpi_compiler()?
        } else {
            self.compiler.clone()
        };
        let compile = |src: &std::path::Path, lib: &std::path::Path| {
            let spinner = spinner(name);
            let r = compiler.compile(src, lib);
            if let Some(s) = spinner {
                s.finish_and_clear();
            }
            r
        };
        match &self.cache {
            Some(cache) => {
                let key = self.key_with(&compiler, source)?;
                let (lib, origin) = cache.get_or_build(&key, source, compile)?;
                Ok((LibraryFile::kept(lib), origin))
            }
            None => Ok((
                LibraryFile::compile_scratch(source, compile)?,
                Origin::Built,
            )),
        }
    }

    /// The compiler of a program that exchanges halos: the MPI C compiler wrapper
    /// (`$SDFLOW_MPICC`, else `mpicc`) with this backend's flags.
    fn mpi_compiler(&self) -> Result<CompilerOptions, CodegenError> {
        let c = CompilerOptions {
            cc: std::env::var("SDFLOW_MPICC").unwrap_or_else(|_| "mpicc".to_string()),
            flags: self.compiler.flags.clone(),
            host_tuning: self.compiler.host_tuning,
        };
        match c.identity() {
            Ok(_) => Ok(c),
            Err(e) => Err(CodegenError::Compiler {
                message: format!(
                    "the program exchanges halos, so it is compiled with the MPI C compiler '{}', which failed: {e}; install OpenMPI (`apt-get install openmpi-bin libopenmpi-dev`) or set SDFLOW_MPICC",
                    c.cc
                ),
                source_file: None,
            }),
        }
    }

    /// Builds many programs at once (in parallel with `rayon`; identical programs are
    /// compiled once, through the cache's lock), with a progress bar on a terminal.
    pub fn build_all(&self, sdfgs: &[Sdfg]) -> Vec<Result<CompiledProgram, CodegenError>> {
        let bar = if std::io::stderr().is_terminal() && sdfgs.len() > 1 {
            let b = indicatif::ProgressBar::new(sdfgs.len() as u64);
            b.set_message("building");
            Some(b)
        } else {
            None
        };
        let out = sdfgs
            .par_iter()
            .map(|s| {
                let r = self.build(s);
                if let Some(b) = &bar {
                    b.inc(1);
                }
                r
            })
            .collect();
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        out
    }
}

/// A program's C translation unit and what loading its library needs.
#[derive(Clone, Debug)]
pub struct CpuUnit {
    /// The program's name.
    pub name: String,
    /// It exchanges halos: compiled with the MPI C compiler, and called on MPI ranks.
    pub mpi: bool,
    /// The C source.
    pub source: String,
    /// Its error sites and bind-time conditions.
    pub sites: sites::Sites,
    /// Its calling convention.
    pub signature: Signature,
    /// Static integer symbol values (for shape checks at bind time).
    pub statics: std::collections::BTreeMap<String, i64>,
}

impl CpuUnit {
    /// The load step: loads `library`, compiled from this unit.
    pub fn load(
        &self,
        library: &std::path::Path,
        origin: Origin,
    ) -> Result<CompiledProgram, CodegenError> {
        CompiledProgram::load(
            library,
            self.signature.clone(),
            self.sites.clone(),
            self.statics.clone(),
            &self.name,
            origin,
        )
    }
}

/// A spinner on standard error while a compile runs, when that is a terminal.
fn spinner(name: &str) -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let s = indicatif::ProgressBar::new_spinner();
    s.set_message(format!("compiling '{name}'"));
    s.enable_steady_tick(Duration::from_millis(120));
    Some(s)
}
