//! What the two printers of the C family share: C text for values and expressions
//! ([`cexpr`]) and the runtime prelude in each dialect ([`prelude`]).

pub mod cexpr;
pub mod dialect;
pub mod emit;
pub mod prelude;
pub mod sites;

pub use dialect::{Dialect, Team};
