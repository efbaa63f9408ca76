//! The dynamical core of `docs/dycore.md` written with the stencil DSL: every time step —
//! three Runge–Kutta stages, hyperdiffusion, implicit vertical diffusion and Rayleigh
//! damping — is one [`Program`], flattened into one SDFG. This file is written from the
//! document, independently of the plain-loop reference (`reference.rs`); the two are
//! compared in `tests/dycore.rs`.
//!
//! Included from the example and the tests next to `reference.rs` (whose [`Config`] and
//! [`State`] it shares) as `mod program;`.
//!
//! # Storage
//!
//! Fields are Cartesian `(I, J, K)` arrays of shape `[NX + 4, NY + 4, NZ]` (a halo of width
//! 2 in `I` and `J`, `K` fastest); the reference stores `(k, j, i)` with `i` fastest.
//! [`Dycore::bindings`] and [`Dycore::store`] convert between the two. The interior is
//! `2:NX+2, 2:NY+2, 0:NZ`; `k = 0` is the top layer.
//!
//! # The program
//!
//! Arguments: the prognostic `h, u, v, qh`; the per-level reduced gravities `gr[K]` and
//! damping rates `rdamp[K]` (fields over `K`). Symbols: the static sizes `NX, NY, NZ` and the
//! static flag `hyperdiffusion`; the runtime `dx, dy, dt, f0, nu4, kv` (`f64`), the runtime
//! flag `damping` and the number of steps `nsteps`. Body:
//!
//! ```text
//! for step in 0..nsteps:
//!     copy_state                       (hs, us, vs, qhs) = (h, u, v, qh)
//!     for stage in 0..3:               Wicker–Skamarock RK3
//!         halo(hs, us, vs, qhs); tendencies of the stage state (vertical scans inside)
//!         if stage < 2: hs = h + dt/(3 - stage) dh, …   else: h = h + dt dh, …
//!     halo(h)
//!     if hyperdiffusion (static): ∇⁴ of u, v; flux-form ∇⁴ of the tracer
//!     implicit vertical diffusion of u, v, the tracer (Thomas: forward and backward scans)
//!     if damping (runtime): Rayleigh damping of u, v
//! ```
//!
//! Periodic halo updates are a nested program (`halo`, four copy calls) called for each
//! array that is read at an offset after being written.

#![allow(dead_code)]

use sdflow::codegen::cuda::exec::{DeviceArgs, GpuProgram};
use sdflow::codegen::{CallError, CodegenError, CompiledProgram, CpuBackend};
use sdflow::transforms::Pipeline;
use sdflow_ir::interp::{Bindings, HostArray, InterpError, run};
use sdflow_ir::{DType, Decomposition, Sdfg, Value};
use sdflow_orchestration::{Body, BuildError, E, Program, ScanDir, Stencil, StencilBuilder};
use std::time::{Duration, Instant};

use crate::reference::{Config, HALO, State};

/// The interior domain of every compute call.
const INTERIOR: [&str; 3] = ["2:NX+2", "2:NY+2", "0:NZ"];
/// The shape of every field.
const SHAPE: [&str; 3] = ["NX+4", "NY+4", "NZ"];

/// `out = a` at a constant offset: the copies of a periodic halo update.
fn shifted_copy(name: &str, di: i64, dj: i64) -> Stencil {
    Stencil::new(name, |s| {
        let a = s.input("a");
        let out = s.output("out");
        s.set(&out, a.at(di, dj, 0));
    })
}

/// The periodic halo update of one field `x`, as a program: the west and east strips of
/// the interior rows, then the south and north strips over the full width (corners
/// included, from the strips just written). Every halo point ends up a copy of the
/// interior point it wraps to, as `halo_X` in `docs/dycore.md`. Needs `nx, ny >= 2`.
fn halo_program(cfg: &Config) -> Program {
    let (nx, ny) = (cfg.nx as i64, cfg.ny as i64);
    let mut p = Program::new("halo");
    p.static_symbol("NX", Value::I64(nx))
        .static_symbol("NY", Value::I64(ny))
        .static_symbol("NZ", Value::I64(cfg.nz as i64));
    p.field("x", SHAPE);
    let bind = &[("a", "x"), ("out", "x")];
    p.call(
        &shifted_copy("halo_west", nx, 0),
        bind,
        &[],
        &["0:2", "2:NY+2", "0:NZ"],
    );
    p.call(
        &shifted_copy("halo_east", -nx, 0),
        bind,
        &[],
        &["NX+2:NX+4", "2:NY+2", "0:NZ"],
    );
    p.call(
        &shifted_copy("halo_south", 0, ny),
        bind,
        &[],
        &["0:NX+4", "0:2", "0:NZ"],
    );
    p.call(
        &shifted_copy("halo_north", 0, -ny),
        bind,
        &[],
        &["0:NX+4", "NY+2:NY+4", "0:NZ"],
    );
    p
}

/// `lap(a) = (a[i−1] − 2a + a[i+1]) / dx² + (a[j−1] − 2a + a[j+1]) / dy²` of a field read
/// through `s`, with `dx`, `dy` the stencil's parameters.
fn lap(s: &mut StencilBuilder, a: &sdflow_orchestration::Field, dx: &E, dy: &E) -> E {
    let rdx2 = s.local(1.0 / (dx * dx));
    let rdy2 = s.local(1.0 / (dy * dy));
    (a.at(-1, 0, 0) - 2.0 * a.c() + a.at(1, 0, 0)) * rdx2
        + (a.at(0, -1, 0) - 2.0 * a.c() + a.at(0, 1, 0)) * rdy2
}

/// Where a vertically diffused variable lives: its thickness weight.
#[derive(Clone, Copy, PartialEq)]
enum Weight {
    /// The weight is a field of its own (`0.5 (h[i−1] + h)` at u points, precomputed).
    Field,
    /// The tracer: `w = h`, and `d = qh` (not `w φ`).
    Tracer,
}

/// One level of the Thomas forward sweep: `below`/`above` say whether the level has a
/// neighbour below (`k + 1`) and above (`k − 1`); `prev` gives `(cp, dp)` of the level
/// above. Sets `cp` and `dp`.
fn thomas_level(
    s: &mut StencilBuilder,
    fields: (&sdflow_orchestration::Field, &sdflow_orchestration::Field),
    outs: (&sdflow_orchestration::Field, &sdflow_orchestration::Field),
    prev: Option<(E, E)>,
    below: bool,
    weight: Weight,
    dtk: &E,
) {
    let (w, phi) = fields;
    let (cp, dp) = outs;
    let wk = s.local(w.c());
    let a = if prev.is_some() {
        s.local(-dtk / (0.5 * (w.k(-1) + &wk)))
    } else {
        E::lit(0.0)
    };
    let c = if below {
        s.local(-dtk / (0.5 * (&wk + w.k(1))))
    } else {
        E::lit(0.0)
    };
    let b = s.local(&wk - &a - &c);
    let d = match weight {
        Weight::Field => s.local(&wk * phi.c()),
        Weight::Tracer => s.local(phi.c()),
    };
    match prev {
        None => {
            s.set(cp, c / &b);
            s.set(dp, d / b);
        }
        Some((cp_prev, dp_prev)) => {
            let m = s.local(b - &a * cp_prev);
            s.set(cp, c / &m);
            s.set(dp, (d - a * dp_prev) / m);
        }
    }
}

/// Emits the forward sweep of the column systems with weights `w` and right-hand side
/// from `phi` into `cp`, `dp`: a forward scan over all levels but the last, then the last
/// level (no neighbour below) as a call of its own.
fn thomas_forward(b: &mut Body, cfg: &Config, name: &str, w: &str, phi: &str, weight: Weight) {
    let bind = [("w", w), ("phi", phi), ("cp", "cp"), ("dp", "dp")];
    let params = [("dt", "dt"), ("kv", "kv")];
    let single = |name: &str, above: bool| {
        Stencil::new(name, |s| {
            let (w, phi) = (s.input("w"), s.input("phi"));
            let (cp, dp) = (s.output("cp"), s.output("dp"));
            let (dt, kv) = (s.param("dt"), s.param("kv"));
            let dtk = s.local(dt * kv);
            let prev = above.then(|| (cp.k(-1), dp.k(-1)));
            thomas_level(s, (&w, &phi), (&cp, &dp), prev, false, weight, &dtk);
        })
    };
    if cfg.nz == 1 {
        b.call(&single(name, false), &bind, &params, &INTERIOR);
        return;
    }
    let scan = Stencil::scan(name, ScanDir::Forward, |s| {
        let (w, phi) = (s.input("w"), s.input("phi"));
        let (cp, dp) = (s.output("cp"), s.output("dp"));
        let (dt, kv) = (s.param("dt"), s.param("kv"));
        s.first(|s| {
            let dtk = s.local(&dt * &kv);
            thomas_level(s, (&w, &phi), (&cp, &dp), None, true, weight, &dtk);
        });
        s.step(|s| {
            let dtk = s.local(&dt * &kv);
            let prev = Some((cp.prev(), dp.prev()));
            thomas_level(s, (&w, &phi), (&cp, &dp), prev, true, weight, &dtk);
        });
    });
    b.call(&scan, &bind, &params, &["2:NX+2", "2:NY+2", "0:NZ-1"]);
    let last = single(&format!("{name}_bottom"), true);
    b.call(&last, &bind, &params, &["2:NX+2", "2:NY+2", "NZ-1:NZ"]);
}

/// The stencils of the dynamical core, defined once and called many times.
struct Stencils {
    copy_state: Stencil,
    mass_flux_x: Stencil,
    mass_flux_y: Stencil,
    vorticity: Stencil,
    potential_vorticity: Stencil,
    kinetic_energy: Stencil,
    interface_height: Stencil,
    montgomery: Stencil,
    bernoulli: Stencil,
    tendency_h: Stencil,
    tendency_u: Stencil,
    tendency_v: Stencil,
    tracer_flux_x: Stencil,
    tracer_flux_y: Stencil,
    tendency_qh: Stencil,
    rk_update: Stencil,
    laplacian: Stencil,
    hyperdiffusion: Stencil,
    mixing_ratio: Stencil,
    hyperflux_x: Stencil,
    hyperflux_y: Stencil,
    hyperdiffusion_qh: Stencil,
    weight_x: Stencil,
    weight_y: Stencil,
    thomas_backward: Stencil,
    tracer_mass: Stencil,
    damping: Stencil,
}

impl Stencils {
    fn new() -> Stencils {
        Stencils {
            copy_state: Stencil::new("copy_state", |s| {
                for (from, to) in [("h", "hs"), ("u", "us"), ("v", "vs"), ("qh", "qhs")] {
                    let a = s.input(from);
                    let out = s.output(to);
                    s.set(&out, a.c());
                }
            }),
            mass_flux_x: Stencil::new("mass_flux_x", |s| {
                let (h, u, mu) = (s.input("h"), s.input("u"), s.output("mu"));
                s.set(&mu, 0.5 * (h.at(-1, 0, 0) + h.c()) * u.c());
            }),
            mass_flux_y: Stencil::new("mass_flux_y", |s| {
                let (h, v, mv) = (s.input("h"), s.input("v"), s.output("mv"));
                s.set(&mv, 0.5 * (h.at(0, -1, 0) + h.c()) * v.c());
            }),
            vorticity: Stencil::new("vorticity", |s| {
                let (u, v, zeta) = (s.input("u"), s.input("v"), s.output("zeta"));
                let (dx, dy) = (s.param("dx"), s.param("dy"));
                s.set(
                    &zeta,
                    (v.c() - v.at(-1, 0, 0)) / dx - (u.c() - u.at(0, -1, 0)) / dy,
                );
            }),
            potential_vorticity: Stencil::new("potential_vorticity", |s| {
                let (zeta, h, pv) = (s.input("zeta"), s.input("h"), s.output("pv"));
                let f0 = s.param("f0");
                let hc =
                    s.local(0.25 * (h.at(-1, -1, 0) + h.at(0, -1, 0) + h.at(-1, 0, 0) + h.c()));
                s.set(&pv, (f0 + zeta.c()) / hc);
            }),
            kinetic_energy: Stencil::new("kinetic_energy", |s| {
                let (u, v, ke) = (s.input("u"), s.input("v"), s.output("ke"));
                s.set(
                    &ke,
                    0.25 * (u.c() * u.c()
                        + u.at(1, 0, 0) * u.at(1, 0, 0)
                        + v.c() * v.c()
                        + v.at(0, 1, 0) * v.at(0, 1, 0)),
                );
            }),
            // Height of the top of each layer: a bottom-up scan.
            interface_height: Stencil::scan("interface_height", ScanDir::Backward, |s| {
                let (h, e) = (s.input("h"), s.output("e"));
                s.first(|s| s.set(&e, h.c()));
                s.step(|s| s.set(&e, e.prev() + h.c()));
            }),
            // Montgomery potential: a top-down scan with per-level reduced gravities.
            montgomery: Stencil::scan("montgomery", ScanDir::Forward, |s| {
                let (e, gr, m) = (s.input("e"), s.input_k("gr"), s.output("m"));
                s.first(|s| s.set(&m, gr.c() * e.c()));
                s.step(|s| s.set(&m, m.prev() + gr.c() * e.c()));
            }),
            bernoulli: Stencil::new("bernoulli", |s| {
                let (m, ke, b) = (s.input("m"), s.input("ke"), s.output("b"));
                s.set(&b, m.c() + ke.c());
            }),
            tendency_h: Stencil::new("tendency_h", |s| {
                let (mu, mv, dh) = (s.input("mu"), s.input("mv"), s.output("dh"));
                let (dx, dy) = (s.param("dx"), s.param("dy"));
                s.set(
                    &dh,
                    -((mu.at(1, 0, 0) - mu.c()) / dx + (mv.at(0, 1, 0) - mv.c()) / dy),
                );
            }),
            tendency_u: Stencil::new("tendency_u", |s| {
                let (pv, mv, b) = (s.input("pv"), s.input("mv"), s.input("b"));
                let du = s.output("du");
                let dx = s.param("dx");
                s.set(
                    &du,
                    0.25 * (pv.c() * (mv.at(-1, 0, 0) + mv.c())
                        + pv.at(0, 1, 0) * (mv.at(-1, 1, 0) + mv.at(0, 1, 0)))
                        - (b.c() - b.at(-1, 0, 0)) / dx,
                );
            }),
            tendency_v: Stencil::new("tendency_v", |s| {
                let (pv, mu, b) = (s.input("pv"), s.input("mu"), s.input("b"));
                let dv = s.output("dv");
                let dy = s.param("dy");
                s.set(
                    &dv,
                    -0.25
                        * (pv.c() * (mu.at(0, -1, 0) + mu.c())
                            + pv.at(1, 0, 0) * (mu.at(1, -1, 0) + mu.at(1, 0, 0)))
                        - (b.c() - b.at(0, -1, 0)) / dy,
                );
            }),
            tracer_flux_x: Stencil::new("tracer_flux_x", |s| {
                let (mu, qh, h) = (s.input("mu"), s.input("qh"), s.input("h"));
                let fu = s.output("fu");
                s.set(
                    &fu,
                    mu.c() * (0.5 * (qh.at(-1, 0, 0) / h.at(-1, 0, 0) + qh.c() / h.c())),
                );
            }),
            tracer_flux_y: Stencil::new("tracer_flux_y", |s| {
                let (mv, qh, h) = (s.input("mv"), s.input("qh"), s.input("h"));
                let fv = s.output("fv");
                s.set(
                    &fv,
                    mv.c() * (0.5 * (qh.at(0, -1, 0) / h.at(0, -1, 0) + qh.c() / h.c())),
                );
            }),
            tendency_qh: Stencil::new("tendency_qh", |s| {
                let (fu, fv, dqh) = (s.input("fu"), s.input("fv"), s.output("dqh"));
                let (dx, dy) = (s.param("dx"), s.param("dy"));
                s.set(
                    &dqh,
                    -((fu.at(1, 0, 0) - fu.c()) / dx + (fv.at(0, 1, 0) - fv.c()) / dy),
                );
            }),
            // Stage `stage` (0, 1, 2) of Wicker–Skamarock RK3: `a = dt/3, dt/2, dt`.
            rk_update: Stencil::new("rk_update", |s| {
                let (base, tend, out) = (s.input("base"), s.input("tend"), s.output("out"));
                let (dt, stage) = (s.param("dt"), s.param("stage"));
                let a = s.local(dt / (3.0 - stage.cast(DType::F64)));
                s.set(&out, base.c() + a * tend.c());
            }),
            laplacian: Stencil::new("laplacian", |s| {
                let (a, out) = (s.input("a"), s.output("out"));
                let (dx, dy) = (s.param("dx"), s.param("dy"));
                let l = lap(s, &a, &dx, &dy);
                s.set(&out, l);
            }),
            // φ = φ − dt nu4 lap(lap φ), the inner Laplacian given.
            hyperdiffusion: Stencil::new("hyperdiffusion", |s| {
                let (phi, l, out) = (s.input("phi"), s.input("l"), s.output("out"));
                let (dx, dy, dt, nu4) =
                    (s.param("dx"), s.param("dy"), s.param("dt"), s.param("nu4"));
                let k4 = s.local(dt * nu4);
                let ll = lap(s, &l, &dx, &dy);
                s.set(&out, phi.c() - k4 * ll);
            }),
            mixing_ratio: Stencil::new("mixing_ratio", |s| {
                let (qh, h, q) = (s.input("qh"), s.input("h"), s.output("q"));
                s.set(&q, qh.c() / h.c());
            }),
            hyperflux_x: Stencil::new("hyperflux_x", |s| {
                let (h, lq, gx) = (s.input("h"), s.input("lq"), s.output("gx"));
                let (nu4, dx) = (s.param("nu4"), s.param("dx"));
                s.set(
                    &gx,
                    nu4 * (0.5 * (h.at(-1, 0, 0) + h.c())) * ((lq.c() - lq.at(-1, 0, 0)) / dx),
                );
            }),
            hyperflux_y: Stencil::new("hyperflux_y", |s| {
                let (h, lq, gy) = (s.input("h"), s.input("lq"), s.output("gy"));
                let (nu4, dy) = (s.param("nu4"), s.param("dy"));
                s.set(
                    &gy,
                    nu4 * (0.5 * (h.at(0, -1, 0) + h.c())) * ((lq.c() - lq.at(0, -1, 0)) / dy),
                );
            }),
            hyperdiffusion_qh: Stencil::new("hyperdiffusion_qh", |s| {
                let (gx, gy, qh) = (s.input("gx"), s.input("gy"), s.input("qh"));
                let out = s.output("out");
                let (dx, dy, dt) = (s.param("dx"), s.param("dy"), s.param("dt"));
                s.set(
                    &out,
                    qh.c() - dt * ((gx.at(1, 0, 0) - gx.c()) / dx + (gy.at(0, 1, 0) - gy.c()) / dy),
                );
            }),
            weight_x: Stencil::new("weight_x", |s| {
                let (h, w) = (s.input("h"), s.output("w"));
                s.set(&w, 0.5 * (h.at(-1, 0, 0) + h.c()));
            }),
            weight_y: Stencil::new("weight_y", |s| {
                let (h, w) = (s.input("h"), s.output("w"));
                s.set(&w, 0.5 * (h.at(0, -1, 0) + h.c()));
            }),
            // x[nz−1] = dp[nz−1]; x[k] = dp[k] − cp[k] x[k+1]: a bottom-up scan.
            thomas_backward: Stencil::scan("thomas_backward", ScanDir::Backward, |s| {
                let (cp, dp, x) = (s.input("cp"), s.input("dp"), s.output("x"));
                s.first(|s| s.set(&x, dp.c()));
                s.step(|s| s.set(&x, dp.c() - cp.c() * x.prev()));
            }),
            tracer_mass: Stencil::new("tracer_mass", |s| {
                let (h, q, qh) = (s.input("h"), s.input("q"), s.output("qh"));
                s.set(&qh, h.c() * q.c());
            }),
            // Implicit Rayleigh damping: φ = φ / (1 + dt r[k]).
            damping: Stencil::new("damping", |s| {
                let (phi, r, out) = (s.input("phi"), s.input_k("r"), s.output("out"));
                let dt = s.param("dt");
                s.set(&out, phi.c() / (1.0 + dt * r.c()));
            }),
        }
    }
}

/// Why the dynamical core could not be built or run.
#[derive(Debug, thiserror::Error)]
pub enum DycoreError {
    /// The configuration cannot be expressed (sizes, lengths of per-level data).
    #[error("configuration: {0}")]
    Config(String),
    /// The program did not flatten into a valid SDFG.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// The interpreter stopped.
    #[error(transparent)]
    Run(#[from] InterpError),
    /// The compiled program could not be built.
    #[error(transparent)]
    Codegen(#[from] CodegenError),
    /// The compiled program could not be called.
    #[error(transparent)]
    Call(#[from] CallError),
}

/// The whole time step as a [`Program`] (`nsteps` steps per call).
pub fn timestep(cfg: &Config) -> Result<Program, DycoreError> {
    timestep_on(cfg, None)
}

/// The time step of one rank of `ranks[0] × ranks[1]` (`cfg`: its block; `None`: the
/// whole grid on one process): the periodic halo updates become halo exchanges between
/// the ranks (width 2, periodic, corners included), the fields of consecutive updates in
/// one exchange.
pub fn timestep_on(cfg: &Config, ranks: Option<[i64; 2]>) -> Result<Program, DycoreError> {
    timestep_with(
        cfg,
        match ranks {
            None => Halos::Copies,
            Some(r) => Halos::Exchanges(r),
        },
    )
}

/// How the time step keeps its halos.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Halos {
    /// One process: the periodic halo updates copy the opposite edge (`halo_program`).
    Copies,
    /// On ranks: exchanges where the one-process program updates its halos.
    Exchanges([i64; 2]),
    /// On ranks: the program without halo updates, and the exchanges the halo analysis
    /// finds needed (`Program::insert_halo_exchanges`).
    Analysis([i64; 2]),
}

/// The decomposition of the time step on `ranks`.
fn decomposition(ranks: [i64; 2]) -> Decomposition {
    Decomposition::Structured {
        ranks,
        width: HALO as i64,
        periodic: [true, true],
        corners: true,
    }
}

/// The time step with its halos kept as `halos` says.
pub fn timestep_with(cfg: &Config, mode: Halos) -> Result<Program, DycoreError> {
    if cfg.nx < 2 || cfg.ny < 2 || cfg.nz < 1 {
        return Err(DycoreError::Config(format!(
            "the grid is {} x {} x {}; the periodic halo of width 2 needs nx, ny >= 2 and nz >= 1",
            cfg.nx, cfg.ny, cfg.nz
        )));
    }
    let st = Stencils::new();
    let halo = halo_program(cfg);
    let halos = |b: &mut Body, fields: &[&str]| match mode {
        Halos::Copies => {
            for x in fields {
                b.nested(&halo, &[("x", x)], &[]);
            }
        }
        Halos::Exchanges(ranks) => {
            b.halo_exchange(fields, decomposition(ranks));
        }
        Halos::Analysis(_) => {}
    };
    let mut p = Program::new("dycore");
    p.static_symbol("NX", Value::I64(cfg.nx as i64))
        .static_symbol("NY", Value::I64(cfg.ny as i64))
        .static_symbol("NZ", Value::I64(cfg.nz as i64))
        .static_symbol("hyperdiffusion", Value::I64(cfg.hyperdiffusion as i64));
    for name in ["dx", "dy", "dt", "f0", "nu4", "kv"] {
        p.symbol(name, DType::F64);
    }
    p.symbol("damping", DType::I64).symbol("nsteps", DType::I64);
    for f in ["h", "u", "v", "qh"] {
        p.field(f, SHAPE);
    }
    p.field("gr", ["NZ"]).field("rdamp", ["NZ"]);
    for t in [
        "hs", "us", "vs", "qhs", "mu", "mv", "zeta", "pv", "ke", "e", "m", "b", "dh", "du", "dv",
        "dqh", "fu", "fv", "q", "lu", "lv", "lq", "gx", "gy", "wu", "wv", "cp", "dp",
    ] {
        p.temp(t, SHAPE);
    }
    let dxy = [("dx", "dx"), ("dy", "dy")];
    p.repeat("step", "nsteps", |b| {
        b.call(
            &st.copy_state,
            &[
                ("h", "h"),
                ("u", "u"),
                ("v", "v"),
                ("qh", "qh"),
                ("hs", "hs"),
                ("us", "us"),
                ("vs", "vs"),
                ("qhs", "qhs"),
            ],
            &[],
            &INTERIOR,
        );
        b.repeat("stage", "3", |b| {
            halos(b, &["hs", "us", "vs", "qhs"]);
            b.call(
                &st.mass_flux_x,
                &[("h", "hs"), ("u", "us"), ("mu", "mu")],
                &[],
                &INTERIOR,
            );
            b.call(
                &st.mass_flux_y,
                &[("h", "hs"), ("v", "vs"), ("mv", "mv")],
                &[],
                &INTERIOR,
            );
            halos(b, &["mu", "mv"]);
            b.call(
                &st.vorticity,
                &[("u", "us"), ("v", "vs"), ("zeta", "zeta")],
                &dxy,
                &INTERIOR,
            );
            b.call(
                &st.potential_vorticity,
                &[("zeta", "zeta"), ("h", "hs"), ("pv", "pv")],
                &[("f0", "f0")],
                &INTERIOR,
            );
            halos(b, &["pv"]);
            b.call(
                &st.kinetic_energy,
                &[("u", "us"), ("v", "vs"), ("ke", "ke")],
                &[],
                &INTERIOR,
            );
            b.call(
                &st.interface_height,
                &[("h", "hs"), ("e", "e")],
                &[],
                &INTERIOR,
            );
            b.call(
                &st.montgomery,
                &[("e", "e"), ("gr", "gr"), ("m", "m")],
                &[],
                &INTERIOR,
            );
            b.call(
                &st.bernoulli,
                &[("m", "m"), ("ke", "ke"), ("b", "b")],
                &[],
                &INTERIOR,
            );
            halos(b, &["b"]);
            b.call(
                &st.tendency_h,
                &[("mu", "mu"), ("mv", "mv"), ("dh", "dh")],
                &dxy,
                &INTERIOR,
            );
            b.call(
                &st.tendency_u,
                &[("pv", "pv"), ("mv", "mv"), ("b", "b"), ("du", "du")],
                &[("dx", "dx")],
                &INTERIOR,
            );
            b.call(
                &st.tendency_v,
                &[("pv", "pv"), ("mu", "mu"), ("b", "b"), ("dv", "dv")],
                &[("dy", "dy")],
                &INTERIOR,
            );
            b.call(
                &st.tracer_flux_x,
                &[("mu", "mu"), ("qh", "qhs"), ("h", "hs"), ("fu", "fu")],
                &[],
                &INTERIOR,
            );
            b.call(
                &st.tracer_flux_y,
                &[("mv", "mv"), ("qh", "qhs"), ("h", "hs"), ("fv", "fv")],
                &[],
                &INTERIOR,
            );
            halos(b, &["fu", "fv"]);
            b.call(
                &st.tendency_qh,
                &[("fu", "fu"), ("fv", "fv"), ("dqh", "dqh")],
                &dxy,
                &INTERIOR,
            );
            let updates = [
                ("h", "dh", "hs"),
                ("u", "du", "us"),
                ("v", "dv", "vs"),
                ("qh", "dqh", "qhs"),
            ];
            let rk = |b: &mut Body, last: bool| {
                for (base, tend, stage_state) in updates {
                    let out = if last { base } else { stage_state };
                    b.call(
                        &st.rk_update,
                        &[("base", base), ("tend", tend), ("out", out)],
                        &[("dt", "dt"), ("stage", "stage")],
                        &INTERIOR,
                    );
                }
            };
            b.if_else("stage < 2", |b| rk(b, false), |b| rk(b, true));
        });

        halos(b, &["h"]);
        b.if_("hyperdiffusion != 0", |b| {
            halos(b, &["u", "v"]);
            for (phi, l) in [("u", "lu"), ("v", "lv")] {
                b.call(&st.laplacian, &[("a", phi), ("out", l)], &dxy, &INTERIOR);
            }
            halos(b, &["lu", "lv"]);
            for (phi, l) in [("u", "lu"), ("v", "lv")] {
                b.call(
                    &st.hyperdiffusion,
                    &[("phi", phi), ("l", l), ("out", phi)],
                    &[("dx", "dx"), ("dy", "dy"), ("dt", "dt"), ("nu4", "nu4")],
                    &INTERIOR,
                );
            }
            b.call(
                &st.mixing_ratio,
                &[("qh", "qh"), ("h", "h"), ("q", "q")],
                &[],
                &INTERIOR,
            );
            halos(b, &["q"]);
            b.call(&st.laplacian, &[("a", "q"), ("out", "lq")], &dxy, &INTERIOR);
            halos(b, &["lq"]);
            b.call(
                &st.hyperflux_x,
                &[("h", "h"), ("lq", "lq"), ("gx", "gx")],
                &[("nu4", "nu4"), ("dx", "dx")],
                &INTERIOR,
            );
            b.call(
                &st.hyperflux_y,
                &[("h", "h"), ("lq", "lq"), ("gy", "gy")],
                &[("nu4", "nu4"), ("dy", "dy")],
                &INTERIOR,
            );
            halos(b, &["gx", "gy"]);
            b.call(
                &st.hyperdiffusion_qh,
                &[("gx", "gx"), ("gy", "gy"), ("qh", "qh"), ("out", "qh")],
                &[("dx", "dx"), ("dy", "dy"), ("dt", "dt")],
                &INTERIOR,
            );
        });

        // Implicit vertical diffusion of u, v (thickness-weighted) and the tracer.
        b.call(&st.weight_x, &[("h", "h"), ("w", "wu")], &[], &INTERIOR);
        thomas_forward(b, cfg, "thomas_forward_u", "wu", "u", Weight::Field);
        b.call(
            &st.thomas_backward,
            &[("cp", "cp"), ("dp", "dp"), ("x", "u")],
            &[],
            &INTERIOR,
        );
        b.call(&st.weight_y, &[("h", "h"), ("w", "wv")], &[], &INTERIOR);
        thomas_forward(b, cfg, "thomas_forward_v", "wv", "v", Weight::Field);
        b.call(
            &st.thomas_backward,
            &[("cp", "cp"), ("dp", "dp"), ("x", "v")],
            &[],
            &INTERIOR,
        );
        thomas_forward(b, cfg, "thomas_forward_qh", "h", "qh", Weight::Tracer);
        b.call(
            &st.thomas_backward,
            &[("cp", "cp"), ("dp", "dp"), ("x", "q")],
            &[],
            &INTERIOR,
        );
        b.call(
            &st.tracer_mass,
            &[("h", "h"), ("q", "q"), ("qh", "qh")],
            &[],
            &INTERIOR,
        );

        b.if_("damping != 0", |b| {
            for phi in ["u", "v"] {
                b.call(
                    &st.damping,
                    &[("phi", phi), ("r", "rdamp"), ("out", phi)],
                    &[("dt", "dt")],
                    &INTERIOR,
                );
            }
        });
    });
    if let Halos::Analysis(ranks) = mode {
        p.insert_halo_exchanges(decomposition(ranks));
    }
    Ok(p)
}

/// The flattened time step with the configuration's runtime values, ready to run.
pub struct Dycore {
    /// The configuration it was built for (sizes and the static flag are compiled in).
    pub cfg: Config,
    /// The flattened program.
    pub sdfg: Sdfg,
}

impl Dycore {
    /// Builds and flattens the time step for `cfg`.
    pub fn new(cfg: &Config) -> Result<Dycore, DycoreError> {
        Dycore::on(cfg, None)
    }

    /// Builds and flattens the time step of one rank of `ranks` ([`timestep_on`]):
    /// `cfg` is the rank's block.
    pub fn on(cfg: &Config, ranks: Option<[i64; 2]>) -> Result<Dycore, DycoreError> {
        Dycore::with(
            cfg,
            match ranks {
                None => Halos::Copies,
                Some(r) => Halos::Exchanges(r),
            },
        )
    }

    /// Builds and flattens the time step keeping its halos as `halos` says
    /// ([`timestep_with`]).
    pub fn with(cfg: &Config, halos: Halos) -> Result<Dycore, DycoreError> {
        if cfg.rho.len() != cfg.nz || cfg.damping_layers > cfg.nz {
            return Err(DycoreError::Config(format!(
                "rho has {} entries and damping_layers is {}, for nz = {}",
                cfg.rho.len(),
                cfg.damping_layers,
                cfg.nz
            )));
        }
        let sdfg = timestep_with(cfg, halos)?.build()?;
        Ok(Dycore {
            cfg: cfg.clone(),
            sdfg,
        })
    }

    /// Arguments of a call: the state in the program's `(I, J, K)` layout, the per-level
    /// data and the runtime symbols.
    pub fn bindings(&self, s: &State, nsteps: usize) -> Bindings {
        let cfg = &self.cfg;
        let (px, py, nz) = (cfg.px(), cfg.py(), cfg.nz);
        let field = |a: &[f64]| {
            let mut out = vec![0.0; a.len()];
            for k in 0..nz {
                for j in 0..py {
                    for i in 0..px {
                        out[(i * py + j) * nz + k] = a[cfg.idx(k, j, i)];
                    }
                }
            }
            HostArray::from_f64(&[px, py, nz], out).expect("shape matches the data")
        };
        let per_level = |v: Vec<f64>| HostArray::from_f64(&[nz], v).expect("nz values");
        let gr = cfg.reduced_gravity();
        let rdamp = (0..nz).map(|k| cfg.damping_rate_of(k)).collect();
        let mut b = Bindings::default();
        for (name, a) in [("h", &s.h), ("u", &s.u), ("v", &s.v), ("qh", &s.qh)] {
            b.arrays.insert(name.to_string(), field(a));
        }
        b.arrays.insert("gr".into(), per_level(gr));
        b.arrays.insert("rdamp".into(), per_level(rdamp));
        for (name, v) in [
            ("dx", cfg.dx),
            ("dy", cfg.dy),
            ("dt", cfg.dt),
            ("f0", cfg.f0),
            ("nu4", cfg.nu4),
            ("kv", cfg.kv),
        ] {
            b.symbols.insert(name.to_string(), Value::F64(v));
        }
        b.symbols
            .insert("damping".into(), Value::I64(cfg.damping as i64));
        b.symbols.insert("nsteps".into(), Value::I64(nsteps as i64));
        b
    }

    /// Copies the prognostic fields of `b` back into `s` (reference layout).
    pub fn store(&self, b: &Bindings, s: &mut State) {
        let cfg = &self.cfg;
        let (px, py, nz) = (cfg.px(), cfg.py(), cfg.nz);
        for (name, a) in [
            ("h", &mut s.h),
            ("u", &mut s.u),
            ("v", &mut s.v),
            ("qh", &mut s.qh),
        ] {
            let flat = b.arrays[name].to_f64_vec();
            for k in 0..nz {
                for j in 0..py {
                    for i in 0..px {
                        a[cfg.idx(k, j, i)] = flat[(i * py + j) * nz + k];
                    }
                }
            }
        }
    }

    /// Runs `nsteps` time steps on the reference interpreter, updating `s`.
    pub fn run_interpreted(&self, s: &mut State, nsteps: usize) -> Result<(), DycoreError> {
        let mut b = self.bindings(s, nsteps);
        run(&self.sdfg, &mut b)?;
        self.store(&b, s);
        Ok(())
    }

    /// Optimizes the time step with the default CPU pipeline and compiles it (through
    /// the persistent cache unless `backend.cache` is `None`).
    pub fn compile(&self, backend: &CpuBackend) -> Result<CompiledProgram, DycoreError> {
        let mut sdfg = self.sdfg.clone();
        Pipeline::cpu()
            .run(&mut sdfg)
            .map_err(|e| DycoreError::Config(format!("optimizer: {e}")))?;
        Ok(backend.build(&sdfg)?)
    }

    /// Runs `nsteps` time steps of the compiled program, updating `s`.
    pub fn run_compiled(
        &self,
        prog: &CompiledProgram,
        s: &mut State,
        nsteps: usize,
    ) -> Result<(), DycoreError> {
        let mut b = self.bindings(s, nsteps);
        prog.run_bindings(&mut b)?;
        self.store(&b, s);
        Ok(())
    }

    /// Runs `nsteps` time steps on a GPU program (optimized with `Pipeline::gpu`) with
    /// the state kept on the device: the fields go there once, every step is one call
    /// enqueued without waiting (after the first, a replay of the graph captured then),
    /// and the fields come back at the end.
    pub fn run_gpu(
        &self,
        prog: &mut GpuProgram,
        s: &mut State,
        nsteps: usize,
    ) -> Result<GpuTimes, DycoreError> {
        let mut b = self.bindings(s, 1);
        let mut on_device = Vec::new();
        for (name, a) in &b.arrays {
            on_device.push((name.clone(), prog.upload(name, a)?));
        }
        let mut args = DeviceArgs::new();
        for (name, d) in &on_device {
            args = args.array(name, d);
        }
        for (name, v) in &b.symbols {
            args = match v {
                Value::F64(x) => args.float(name, *x),
                other => args.int(name, other.as_i64()),
            };
        }
        let call = prog.bind(args)?;
        let t = Instant::now();
        let mut last = None;
        for _ in 0..nsteps {
            last = Some(prog.call_bound(&call)?);
        }
        let enqueue = t.elapsed();
        if let Some(done) = last {
            prog.wait(done)?;
        }
        let total = t.elapsed();
        for (name, d) in &on_device {
            let a = b
                .arrays
                .get_mut(name)
                .expect("uploaded from these bindings");
            d.copy_to_host(a)
                .map_err(|e| DycoreError::Config(format!("copying '{name}' back: {e}")))?;
        }
        self.store(&b, s);
        Ok(GpuTimes { enqueue, total })
    }
}

/// Host and wall-clock time of a run on the GPU.
#[derive(Clone, Copy, Debug)]
pub struct GpuTimes {
    /// The host's time to enqueue every step.
    pub enqueue: Duration,
    /// From the first enqueue to the last step's completion.
    pub total: Duration,
}
