//! `sdflow-transforms`: passes over the SDFG IR (pattern passes and the e-graph).
//!
//! This crate depends on `sdflow-ir` only. The pass framework and passes arrive with the
//! optimizer; today it offers the [`Pass`] trait every pass will implement, so that
//! later stages can be written against it.

#![warn(missing_docs)]

use sdflow_ir::Sdfg;

/// What a pass changed, as counts (not prose).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Named counters, e.g. `("maps_fused", 3)`.
    pub counts: Vec<(&'static str, usize)>,
}

impl Changes {
    /// True when the pass changed nothing.
    pub fn is_empty(&self) -> bool {
        self.counts.iter().all(|(_, n)| *n == 0)
    }
}

/// A transformation of a whole program.
pub trait Pass {
    /// Stable name, used to enable or disable the pass.
    fn name(&self) -> &'static str;
    /// Runs the pass in place and reports what changed.
    fn run(&self, sdfg: &mut Sdfg) -> Result<Changes, String>;
}
