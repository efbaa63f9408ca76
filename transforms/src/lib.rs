//! `sdflow-transforms`: the structural optimizer — passes over the SDFG IR.
//!
//! - [`Pass`] and [`Pipeline`]: a pass applies its rule to a fixed point and reports what
//!   changed ([`Changes`]); a pipeline runs passes in order, round after round, until a
//!   round changes nothing, with a [`Report`] of counts and times per pass, validation
//!   between passes in debug builds, passes disabled by name, and a `stop_after` bound to
//!   bisect a miscompile. [`Pipeline::cpu`] and [`Pipeline::gpu`] are the defaults.
//! - [`pattern`]: the graph plumbing the passes share.
//! - The passes: [`InlineNested`], [`Specialize`], [`DeadDataflow`], [`RedundantCopy`], [`StateFusion`], [`CopyForwarding`],
//!   [`MapFusion`], [`SiblingFusion`], [`RowFusion`], [`LocalUnroll`], [`MoveIntoIf`], [`LoopOrder`],
//!   [`GpuSchedule`], and the e-graph pass [`EGraphPass`].
//!
//! Every pass is deterministic and preserves results bit for bit: the property tests run
//! random programs through each pass and compare the reference interpreter's outputs.
//! `docs/transforms.md` explains each rule with a picture.
//!
//! ```
//! use sdflow_ir::testkit::stencil_chain;
//! use sdflow_transforms::Pipeline;
//!
//! let mut sdfg = stencil_chain(4);
//! let report = Pipeline::cpu().run(&mut sdfg).unwrap();
//! assert!(report.fixed_point);
//! ```

#![warn(missing_docs)]

mod copy_forwarding;
mod dead_dataflow;
pub mod egraph;
mod gpu_schedule;
mod if_select;
mod inline_nested;
pub mod layout;
mod local_unroll;
mod loop_order;
mod map_fusion;
mod move_into_if;
mod move_into_nested_if;
mod pass;
pub mod pattern;
mod pipeline;
mod redundant_copy;
mod row_fusion;
mod scratch;
mod sibling_fusion;
mod specialize;
mod state_fusion;
mod tiled_fusion;

pub use copy_forwarding::CopyForwarding;
pub use dead_dataflow::DeadDataflow;
pub use egraph::EGraphPass;
pub use gpu_schedule::GpuSchedule;
pub use inline_nested::InlineNested;
pub use layout::{
    LayoutError, LayoutReport, Order, specialize_unit_strides, unit_dims_in_order, unit_dims_of,
};
pub use local_unroll::LocalUnroll;
pub use loop_order::LoopOrder;
pub use map_fusion::MapFusion;
pub use move_into_if::MoveIntoIf;
pub use pass::{Changes, Pass, TransformError};
pub use pipeline::{PASS_NAMES, PassReport, Pipeline, Report, pass_by_name};
pub use redundant_copy::RedundantCopy;
pub use row_fusion::RowFusion;
pub use sibling_fusion::SiblingFusion;
pub use specialize::Specialize;
pub use state_fusion::StateFusion;
