//! Build errors of programs: each names the program, stencil and argument concerned.

use sdflow_ir::validate::Problem;

/// Why a program could not be built into an SDFG.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum BuildError {
    /// The stencil's definition is wrong (reported at the first call).
    #[error("stencil '{stencil}': {message}")]
    Stencil {
        /// The stencil.
        stencil: String,
        /// What is wrong.
        message: String,
    },
    /// A call's argument is wrong: unknown or missing formal, undeclared actual, a field
    /// of the wrong dimensions, a domain outside the field, a temporary read before it is
    /// written.
    #[error("program '{program}', call of stencil '{stencil}', argument '{argument}': {message}")]
    Argument {
        /// The calling program.
        program: String,
        /// The stencil called.
        stencil: String,
        /// The formal argument.
        argument: String,
        /// What is wrong.
        message: String,
    },
    /// A program-level declaration or binding is wrong (names, static parameters,
    /// nested-program bindings, conditions, domains).
    #[error("program '{program}': {message}")]
    Program {
        /// The program.
        program: String,
        /// What is wrong.
        message: String,
    },
    /// The flattened SDFG does not validate (a bug in the front end, or a rule the front
    /// end does not check itself).
    #[error("program '{program}': the flattened SDFG is invalid:\n{}", list(.problems))]
    Invalid {
        /// The program.
        program: String,
        /// Validation's problems.
        problems: Vec<Problem>,
    },
}

/// Validation problems, one per line.
pub(crate) fn list(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| format!("  - {p}"))
        .collect::<Vec<_>>()
        .join("\n")
}
