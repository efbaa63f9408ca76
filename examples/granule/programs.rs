//! The programs of the granule example, written with the stencil DSL: a structured tracer
//! advection (`advect_tracer`, over `I, J, K`) and an unstructured diffusion
//! (`diffuse_cells`, over cells and edges with connectivity tables, as ICON's).

use ndarray::{ArrayD, IxDyn};
use sdflow::ir::DType;
use sdflow::ir::Sdfg;
use sdflow::ir::interp::HostArray;
use sdflow::orchestration::{Dims, Loc, Program, Stencil, select};

/// Upwind advection of `q` by a constant velocity `(cu, cv)` (in cells per unit time)
/// over the interior `1:NX+1, 1:NY+1` of an `(NX+2) × (NY+2) × NK` grid, with `dt` changing
/// per call and `rarea` a metric field (bound once); `positive != 0` clips negative
/// values (a flag the component precompiles both ways).
pub fn advect_tracer() -> Sdfg {
    let upwind = Stencil::new("upwind", |s| {
        let q = s.input("q");
        let rarea = s.input("rarea");
        let out = s.output("q_new");
        let dt = s.param("dt");
        let cu = s.param("cu");
        let cv = s.param("cv");
        let flux = cu * (q.c() - q.at(-1, 0, 0)) + cv * (q.c() - q.at(0, -1, 0));
        s.set(&out, q.c() - dt * rarea.c() * flux);
    });
    let clip = Stencil::new("clip", |s| {
        let q = s.input("q");
        let out = s.output("q_new");
        s.set(&out, select(q.c().lt(0.0), 0.0, q.c()));
    });
    let mut p = Program::new("advect_tracer");
    p.symbol("NX", DType::I64)
        .symbol("NY", DType::I64)
        .symbol("NK", DType::I64)
        .symbol("positive", DType::I64)
        .symbol("dt", DType::F64)
        .symbol("cu", DType::F64)
        .symbol("cv", DType::F64);
    p.field("q", ["NX + 2", "NY + 2", "NK"])
        .field("q_new", ["NX + 2", "NY + 2", "NK"])
        .field("rarea", ["NX + 2", "NY + 2", "NK"])
        .temp("adv", ["NX + 2", "NY + 2", "NK"]);
    let dom = ["1:NX + 1", "1:NY + 1", "0:NK"];
    let params = [("dt", "dt"), ("cu", "cu"), ("cv", "cv")];
    p.if_else(
        "positive != 0",
        |b| {
            b.call(
                &upwind,
                &[("q", "q"), ("rarea", "rarea"), ("q_new", "adv")],
                &params,
                &dom,
            );
            b.call(&clip, &[("q", "adv"), ("q_new", "q_new")], &[], &dom);
        },
        |b| {
            b.call(
                &upwind,
                &[("q", "q"), ("rarea", "rarea"), ("q_new", "q_new")],
                &params,
                &dom,
            );
        },
    );
    p.build().expect("advect_tracer builds")
}

/// Diffusion on an unstructured grid: edge gradients through `e2c` scaled by the metric
/// `inv_len`, their divergence at cells through `c2e` scaled by `area_inv`, over the cells
/// `hstart:hend` (a static horizontal domain, as ICON4Py's) and levels `0:NK`. With
/// `limited_area != 0` the cells also relax towards the boundary values `t_bdy`.
pub fn diffuse_cells() -> Sdfg {
    let grad = Stencil::new("grad", |s| {
        let e2c = s.table("e2c", Loc::Edge, Loc::Cell);
        let t = s.input_on("t", Dims::Unstructured(Loc::Cell));
        let inv_len = s.input_on("inv_len", Dims::Unstructured(Loc::Edge));
        let g = s.output_on("g", Dims::Unstructured(Loc::Edge));
        s.set(&g, (t.nb(&e2c, 1) - t.nb(&e2c, 0)) * inv_len.c());
    });
    let div = Stencil::new("div", |s| {
        let c2e = s.table("c2e", Loc::Cell, Loc::Edge);
        let t = s.input_on("t", Dims::Unstructured(Loc::Cell));
        let g = s.input_on("g", Dims::Unstructured(Loc::Edge));
        let area_inv = s.input_on("area_inv", Dims::Unstructured(Loc::Cell));
        let out = s.output_on("t_new", Dims::Unstructured(Loc::Cell));
        let nu = s.param("nu");
        let d = g.nb(&c2e, 0) + g.nb(&c2e, 1) + g.nb(&c2e, 2);
        s.set(&out, t.c() + nu * area_inv.c() * d);
    });
    let relax = Stencil::new("relax", |s| {
        let t = s.input_on("t", Dims::Unstructured(Loc::Cell));
        let bdy = s.input_on("t_bdy", Dims::Unstructured(Loc::Cell));
        let out = s.output_on("t_new", Dims::Unstructured(Loc::Cell));
        s.set(&out, t.c() + 0.25 * (bdy.c() - t.c()));
    });
    let mut p = Program::new("diffuse_cells");
    p.symbol("NC", DType::I64)
        .symbol("NE", DType::I64)
        .symbol("NK", DType::I64)
        .symbol("hstart", DType::I64)
        .symbol("hend", DType::I64)
        .symbol("limited_area", DType::I64)
        .symbol("nu", DType::F64);
    p.field_typed("e2c", DType::I32, ["NE", "2"])
        .field_typed("c2e", DType::I32, ["NC", "3"]);
    p.field("t", ["NC", "NK"])
        .field("t_new", ["NC", "NK"])
        .field("t_bdy", ["NC", "NK"])
        .field("inv_len", ["NE", "NK"])
        .field("area_inv", ["NC", "NK"])
        .temp("g", ["NE", "NK"])
        .temp("t_mid", ["NC", "NK"]);
    p.call(
        &grad,
        &[
            ("e2c", "e2c"),
            ("t", "t"),
            ("inv_len", "inv_len"),
            ("g", "g"),
        ],
        &[],
        &["0:NE", "0:NK"],
    );
    p.if_else(
        "limited_area != 0",
        |b| {
            b.call(
                &div,
                &[
                    ("c2e", "c2e"),
                    ("t", "t"),
                    ("g", "g"),
                    ("area_inv", "area_inv"),
                    ("t_new", "t_mid"),
                ],
                &[("nu", "nu")],
                &["hstart:hend", "0:NK"],
            );
            b.call(
                &relax,
                &[("t", "t_mid"), ("t_bdy", "t_bdy"), ("t_new", "t_new")],
                &[],
                &["hstart:hend", "0:NK"],
            );
        },
        |b| {
            b.call(
                &div,
                &[
                    ("c2e", "c2e"),
                    ("t", "t"),
                    ("g", "g"),
                    ("area_inv", "area_inv"),
                    ("t_new", "t_new"),
                ],
                &[("nu", "nu")],
                &["hstart:hend", "0:NK"],
            );
        },
    );
    p.build().expect("diffuse_cells builds")
}

/// A periodic strip of `nc` triangles-as-cells (`nc` even): cell `c` has edges `c`,
/// `(c + 1) % nc` and `(c + nc / 2) % nc`; edge `e` joins cells `e` and `(e + 1) % nc`.
/// Returns `(e2c, c2e)`.
pub fn tables(nc: usize) -> (HostArray, HostArray) {
    let e2c: Vec<i32> = (0..nc)
        .flat_map(|e| [e as i32, ((e + 1) % nc) as i32])
        .collect();
    let c2e: Vec<i32> = (0..nc)
        .flat_map(|c| [c as i32, ((c + 1) % nc) as i32, ((c + nc / 2) % nc) as i32])
        .collect();
    (
        HostArray::I32(ArrayD::from_shape_vec(IxDyn(&[nc, 2]), e2c).expect("shape")),
        HostArray::I32(ArrayD::from_shape_vec(IxDyn(&[nc, 3]), c2e).expect("shape")),
    )
}

/// A smooth positive-and-negative field of the given shape.
pub fn field(shape: &[usize], phase: f64) -> ArrayD<f64> {
    let mut k = 0usize;
    ArrayD::from_shape_simple_fn(IxDyn(shape), || {
        k += 1;
        ((k as f64) * 0.37 + phase).sin()
    })
}

/// A metric field: positive, varying slowly.
pub fn metric(shape: &[usize], scale: f64) -> ArrayD<f64> {
    let mut k = 0usize;
    ArrayD::from_shape_simple_fn(IxDyn(shape), || {
        k += 1;
        scale * (1.0 + 0.25 * ((k as f64) * 0.011).cos())
    })
}
