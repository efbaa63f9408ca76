//! `sdflow-codegen`: whole-program code generators (C/OpenMP for CPUs, CUDA for GPUs),
//! their compilers, loaders and runtime ABI.
//!
//! Depends on `sdflow-transforms` and `sdflow-ir`. The backends arrive with their own
//! work; today the crate names the backends so configuration can refer to them.

#![warn(missing_docs)]

/// A code-generation target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The reference interpreter of `sdflow-ir` (no code generated).
    Interp,
    /// C with OpenMP, compiled by the system C compiler.
    Cpu,
    /// CUDA compiled with NVRTC.
    Gpu,
}

impl Backend {
    /// Parses a backend tag: `interp`, `cpu` or `gpu`.
    pub fn from_tag(tag: &str) -> Option<Backend> {
        match tag {
            "interp" => Some(Backend::Interp),
            "cpu" => Some(Backend::Cpu),
            "gpu" => Some(Backend::Gpu),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags() {
        assert_eq!(Backend::from_tag("cpu"), Some(Backend::Cpu));
        assert_eq!(Backend::from_tag("gpu"), Some(Backend::Gpu));
        assert_eq!(Backend::from_tag("interp"), Some(Backend::Interp));
        assert_eq!(Backend::from_tag("tpu"), None);
    }
}
