//! GPU scheduling: every top-level map of every state becomes a GPU kernel
//! (`gpu_device`); maps inside them keep their schedule (a sequential level loop of a
//! vertical scan stays sequential inside the kernel's thread). Runs after fusion decided
//! what a kernel is, and before `loop_order`, which weighs a `gpu_device` map's accesses
//! by the GPU's costs (the plan runs it as a parallel map, a grid on the GPU).
//!
//! Storage is left as it is: the CUDA backend keeps every container in device memory
//! whatever its storage says (only `local` storage, private to a thread, is read), so a
//! `device` mark would be read by nothing.

use sdflow_ir::{Node, Schedule, Sdfg};

use crate::pass::{Changes, Pass};

/// See the module documentation.
pub struct GpuSchedule;

impl Pass for GpuSchedule {
    fn name(&self) -> &'static str {
        "gpu_schedule"
    }

    /// Kept callees run inside a kernel's thread (or as a call on the host): their maps
    /// are not kernels of their own.
    fn in_callees(&self) -> bool {
        false
    }

    fn run(&self, sdfg: &mut Sdfg) -> Changes {
        let mut ch = Changes::default();
        let mut n = 0;
        for s in sdfg.body.states() {
            let g = &mut sdfg.states[s.index()].graph;
            for id in g.node_ids() {
                if let Node::Map(m) = &mut g.graph[id]
                    && m.schedule != Schedule::GpuDevice
                {
                    m.schedule = Schedule::GpuDevice;
                    n += 1;
                }
            }
        }
        ch.add("maps_scheduled", n);
        ch
    }
}
