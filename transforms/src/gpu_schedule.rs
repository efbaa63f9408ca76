//! GPU scheduling: every top-level map of every state becomes a GPU kernel
//! (`gpu_device`) and every host transient array moves to device storage; maps inside them keep their schedule (a sequential level loop of a
//! vertical scan stays sequential inside the kernel's thread). The last pass of the GPU
//! pipeline, after fusion decided what a kernel is.

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
        // Transients live in device memory (tile buffers, if any, stay per thread).
        let mut moved = 0;
        for d in sdfg.arrays.values_mut() {
            if let sdflow_ir::DataDesc::Array(a) = d
                && a.transient
                && a.storage == sdflow_ir::Storage::Host
            {
                a.storage = sdflow_ir::Storage::Device;
                moved += 1;
            }
        }
        ch.add("transients_on_device", moved);
        ch
    }
}
