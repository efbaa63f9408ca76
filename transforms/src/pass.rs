//! The [`Pass`] trait and what a pass reports.

use std::fmt;

use sdflow_ir::Sdfg;

/// What a pass changed: named counters (not prose), plus the decisions of cost models
/// (one line each), so a report says why something was or was not done.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Named counters in first-use order, e.g. `("maps_fused", 3)`.
    pub counts: Vec<(&'static str, usize)>,
    /// Cost-model decisions, e.g. `fused 'lap' into 'lap2' by recomputation: …`.
    pub notes: Vec<String>,
}

impl Changes {
    /// True when the pass changed nothing (notes alone are not changes).
    pub fn is_empty(&self) -> bool {
        self.counts.iter().all(|(_, n)| *n == 0)
    }

    /// Adds `n` to counter `name`.
    pub fn add(&mut self, name: &'static str, n: usize) {
        match self.counts.iter_mut().find(|(k, _)| *k == name) {
            Some((_, v)) => *v += n,
            None => self.counts.push((name, n)),
        }
    }

    /// The value of counter `name` (0 when absent).
    pub fn get(&self, name: &str) -> usize {
        self.counts
            .iter()
            .find(|(k, _)| *k == name)
            .map_or(0, |(_, v)| *v)
    }

    /// Adds every counter and note of `other`.
    pub fn merge(&mut self, other: &Changes) {
        for (k, v) in &other.counts {
            self.add(k, *v);
        }
        self.notes.extend(other.notes.iter().cloned());
    }
}

impl fmt::Display for Changes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nonzero: Vec<String> = self
            .counts
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| format!("{k}={n}"))
            .collect();
        if nonzero.is_empty() {
            f.write_str("no change")
        } else {
            f.write_str(&nonzero.join(" "))
        }
    }
}

/// Why a pass or pipeline failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TransformError {
    /// A pass left an invalid program (a bug in the pass; found by validation between
    /// passes in debug builds, or always when the pipeline asks for it).
    #[error("pass '{pass}' produced an invalid SDFG:\n{}", .problems.join("\n"))]
    Invalid {
        /// The pass.
        pass: String,
        /// Validation's problems, one line each.
        problems: Vec<String>,
    },
    /// The input program does not validate.
    #[error("the input SDFG is invalid:\n{}", .0.join("\n"))]
    InvalidInput(Vec<String>),
    /// A pass name that no pass has.
    #[error("unknown pass '{name}'; the passes are: {}", .known.join(", "))]
    UnknownPass {
        /// The name asked for.
        name: String,
        /// Every pass name.
        known: Vec<String>,
    },
    /// Fast math asked of a pipeline whose e-graph pass is missing or disabled.
    #[error(
        "fast math needs the 'egraph' pass, which this pipeline {}; the passes are: {}",
        if *.disabled { "disables" } else { "does not have" },
        .passes.join(", ")
    )]
    FastMathWithoutEGraph {
        /// The e-graph pass is in the pipeline but disabled.
        disabled: bool,
        /// The pipeline's passes.
        passes: Vec<String>,
    },
}

/// A transformation of a whole program. It applies its rule wherever it matches, until
/// nothing matches (or an internal bound), and reports what it changed. Passes are
/// deterministic: the same input gives the same output, byte for byte, and a pass run
/// again on its own output changes nothing.
pub trait Pass: Send + Sync {
    /// Stable name, used to enable or disable the pass and in reports.
    fn name(&self) -> &'static str;
    /// Runs the pass in place.
    fn run(&self, sdfg: &mut Sdfg) -> Changes;
    /// Builds what the pass builds once per process (rule tables and the like), so that
    /// a pipeline can do it in the background while earlier passes run. Never changes a
    /// result; by default nothing.
    fn prepare(&self) {}

    /// Whether the pipeline also runs this pass inside nested SDFGs that stay calls (as
    /// programs of their own): true unless the pass places work on a device or otherwise
    /// assumes it sees the whole program.
    fn in_callees(&self) -> bool {
        true
    }

    /// Whether the pipeline runs this pass only in a round where the passes before it
    /// changed nothing: it then sees the program the others have settled (the loop order
    /// of fused maps, not of the maps before fusion, which a reordering would keep apart).
    fn settled(&self) -> bool {
        false
    }
}
