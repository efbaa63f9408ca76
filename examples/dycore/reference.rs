//! Reference implementation of a small multi-layer shallow-water dynamical core, written as
//! plain Rust loops (only `std`). `docs/dycore.md` gives the numerics exactly; this file is
//! the executable form of that document, and the stencil-DSL version must agree with it to
//! 1e-12 relative.
//!
//! Included from tests and the example with
//! `#[path = "../examples/dycore/reference.rs"] mod reference;`.
//!
//! # Storage
//!
//! Every field (prognostic or scratch) is a flat `Vec<f64>` of shape
//! `[nz][ny + 4][nx + 4]` in `(k, j, i)` order, `i` fastest: a halo of width [`HALO`] = 2 on
//! each side in `i` and `j`, none in `k`. Padded indices `jp = j + 2`, `ip = i + 2`; the
//! interior is `jp in 2..ny+2`, `ip in 2..nx+2`. `k = 0` is the top layer, `k = nz - 1` the
//! bottom one. See [`Config::idx`].
//!
//! Staggering (C-grid): `h`, `qh` at cell centres `(i, j)`; `u[k, jp, ip]` on the west face
//! `(i - 1/2, j)` of cell `(i, j)`; `v[k, jp, ip]` on the south face `(i, j - 1/2)`; vorticity
//! and potential vorticity at the south-west corner `(i - 1/2, j - 1/2)`.
#![allow(dead_code)]
#![allow(clippy::too_many_arguments)]

/// Halo width (cells) on each side in `i` and `j`.
pub const HALO: usize = 2;

/// Model configuration. `hyperdiffusion` is a static (build-time) flag; `damping` is a
/// runtime flag.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub nx: usize,
    pub ny: usize,
    pub nz: usize,
    /// Grid spacing in x and y (m).
    pub dx: f64,
    pub dy: f64,
    /// Time step (s).
    pub dt: f64,
    /// Gravity (m/s²).
    pub g: f64,
    /// Layer densities, top (`k = 0`) to bottom, non-decreasing (kg/m³). Length `nz`.
    pub rho: Vec<f64>,
    /// Resting layer thicknesses, top to bottom (m); used by the initial conditions only.
    /// Length `nz`.
    pub depth: Vec<f64>,
    /// Coriolis parameter (1/s), constant (f-plane).
    pub f0: f64,
    /// Static flag: fourth-order hyperdiffusion of u, v and the tracer.
    pub hyperdiffusion: bool,
    /// Hyperdiffusion coefficient (m⁴/s).
    pub nu4: f64,
    /// Vertical diffusion coefficient (m²/s); 0 makes the implicit solve an identity (up to
    /// roundoff).
    pub kv: f64,
    /// Runtime flag: Rayleigh damping of u, v in the top `damping_layers` layers.
    pub damping: bool,
    pub damping_layers: usize,
    /// Damping rate of the top layer (1/s); ramps linearly to 0 below.
    pub damping_rate: f64,
}

impl Default for Config {
    /// 32 × 32 × 4, 100 km spacing, 4000 m deep ocean-like stratification, all terms on.
    fn default() -> Self {
        Config {
            nx: 32,
            ny: 32,
            nz: 4,
            dx: 1.0e5,
            dy: 1.0e5,
            dt: 150.0,
            g: 9.81,
            rho: vec![1025.0, 1026.0, 1027.0, 1028.0],
            depth: vec![500.0, 1000.0, 1000.0, 1500.0],
            f0: 1.0e-4,
            hyperdiffusion: true,
            nu4: 5.0e14,
            kv: 1.0,
            damping: true,
            damping_layers: 1,
            damping_rate: 1.0e-4,
        }
    }
}

impl Config {
    /// Single layer, 256 × 4, 1 km spacing, 100 m deep, f = 0, no diffusion or damping: a
    /// 1-D-like channel for the linear gravity-wave test (c = sqrt(g H) ≈ 31.3 m/s).
    pub fn gravity_wave() -> Self {
        Config {
            nx: 256,
            ny: 4,
            nz: 1,
            dx: 1000.0,
            dy: 1000.0,
            dt: 10.0,
            g: 9.81,
            rho: vec![1000.0],
            depth: vec![100.0],
            f0: 0.0,
            hyperdiffusion: false,
            nu4: 0.0,
            kv: 0.0,
            damping: false,
            damping_layers: 0,
            damping_rate: 0.0,
        }
    }

    /// Padded extent in i: `nx + 2 * HALO`.
    pub fn px(&self) -> usize {
        self.nx + 2 * HALO
    }

    /// Padded extent in j: `ny + 2 * HALO`.
    pub fn py(&self) -> usize {
        self.ny + 2 * HALO
    }

    /// Elements of one field: `nz * py * px`.
    pub fn len(&self) -> usize {
        self.nz * self.py() * self.px()
    }

    /// Flat index of padded coordinates `(k, jp, ip)`.
    pub fn idx(&self, k: usize, jp: usize, ip: usize) -> usize {
        (k * self.py() + jp) * self.px() + ip
    }

    /// Reduced gravity at the top of each layer: `gr[0] = g`,
    /// `gr[k] = g * (rho[k] - rho[k-1]) / rho[0]` for `k >= 1`.
    pub fn reduced_gravity(&self) -> Vec<f64> {
        (0..self.nz)
            .map(|k| {
                if k == 0 {
                    self.g
                } else {
                    self.g * (self.rho[k] - self.rho[k - 1]) / self.rho[0]
                }
            })
            .collect()
    }

    /// Rayleigh damping rate of layer `k`:
    /// `damping_rate * (damping_layers - k) / damping_layers` for `k < damping_layers`, else 0.
    pub fn damping_rate_of(&self, k: usize) -> f64 {
        if k < self.damping_layers {
            self.damping_rate * (self.damping_layers - k) as f64 / self.damping_layers as f64
        } else {
            0.0
        }
    }

    /// Panics on an inconsistent configuration.
    pub fn validate(&self) {
        assert!(self.nx >= 1 && self.ny >= 1 && self.nz >= 1, "empty grid");
        assert_eq!(self.rho.len(), self.nz, "rho needs nz entries");
        assert_eq!(self.depth.len(), self.nz, "depth needs nz entries");
        assert!(self.damping_layers <= self.nz, "damping_layers > nz");
        assert!(self.depth.iter().all(|&d| d > 0.0), "layers must be thick");
    }
}

/// Prognostic state. All four fields have the padded shape of [`Config::len`].
#[derive(Clone, Debug, PartialEq)]
pub struct State {
    /// Layer thickness (m), cell centres.
    pub h: Vec<f64>,
    /// x-velocity (m/s), west faces.
    pub u: Vec<f64>,
    /// y-velocity (m/s), south faces.
    pub v: Vec<f64>,
    /// Tracer mass per unit area `h * q` (m × mixing ratio), cell centres. The tracer is
    /// prognosed in this flux form so that its total is conserved to roundoff; the mixing
    /// ratio is `q = qh / h`.
    pub qh: Vec<f64>,
}

impl State {
    pub fn zeros(cfg: &Config) -> Self {
        let n = cfg.len();
        State {
            h: vec![0.0; n],
            u: vec![0.0; n],
            v: vec![0.0; n],
            qh: vec![0.0; n],
        }
    }

    /// Tracer mixing ratio `qh / h` at an interior point (padded coordinates).
    pub fn mixing_ratio(&self, cfg: &Config, k: usize, jp: usize, ip: usize) -> f64 {
        let c = cfg.idx(k, jp, ip);
        self.qh[c] / self.h[c]
    }
}

/// Sum over the interior of `h * dx * dy` (m³).
pub fn total_mass(cfg: &Config, s: &State) -> f64 {
    interior_sum(cfg, &s.h) * cfg.dx * cfg.dy
}

/// Sum over the interior of `qh * dx * dy`.
pub fn total_tracer_mass(cfg: &Config, s: &State) -> f64 {
    interior_sum(cfg, &s.qh) * cfg.dx * cfg.dy
}

/// Sum over the interior, in storage order.
pub fn interior_sum(cfg: &Config, a: &[f64]) -> f64 {
    let mut sum = 0.0;
    interior(cfg, |_, c| sum += a[c]);
    sum
}

/// Largest absolute value over the interior.
pub fn interior_max_abs(cfg: &Config, a: &[f64]) -> f64 {
    let mut m: f64 = 0.0;
    interior(cfg, |_, c| m = m.max(a[c].abs()));
    m
}

/// Sub-cell x-position (m, cell-centre coordinates) of the largest `h` among cells
/// `from..to` of row `j = 0` of the top layer, by a parabola through the maximum and its
/// neighbours. Panics when the maximum is at the window's edge.
pub fn peak_x(cfg: &Config, s: &State, from: usize, to: usize) -> f64 {
    let at = |i: usize| s.h[cfg.idx(0, HALO, HALO + i)];
    let imax = (from..to).max_by(|&a, &b| at(a).total_cmp(&at(b))).unwrap();
    assert!(imax > from && imax + 1 < to, "peak at the window's edge");
    let (l, c, r) = (at(imax - 1), at(imax), at(imax + 1));
    let offset = 0.5 * (l - r) / (l - 2.0 * c + r);
    (imax as f64 + 0.5 + offset) * cfg.dx
}

/// Speed (m/s) of the right-going half of the gravity wave from [`gaussian_bump`] at half
/// the channel: the travel of its peak, searched for in the right half of the channel,
/// between steps `n1` and `n2`. `advance(s, n)` runs `n` steps on `s`; `s` is left at step
/// `n2`.
pub fn wave_speed(
    cfg: &Config,
    s: &mut State,
    (n1, n2): (usize, usize),
    mut advance: impl FnMut(&mut State, usize),
) -> f64 {
    advance(s, n1);
    let x1 = peak_x(cfg, s, cfg.nx / 2, cfg.nx);
    advance(s, n2 - n1);
    let x2 = peak_x(cfg, s, cfg.nx / 2, cfg.nx);
    (x2 - x1) / ((n2 - n1) as f64 * cfg.dt)
}

// ----------------------------------------------------------------------------------------
// Initial conditions. Cell centre of (i, j): x = (i + 1/2) dx, y = (j + 1/2) dy; u point:
// x = i dx; v point: y = j dy. Halos are filled (periodic) on return.

/// Flat layer interfaces (`h = depth[k]` everywhere), zero velocity; a smooth non-uniform
/// tracer `q = 1 + 0.5 sin(2πx/Lx) cos(2πy/Ly)` so that tracer terms are non-trivial.
pub fn lake_at_rest(cfg: &Config) -> State {
    cfg.validate();
    let mut s = State::zeros(cfg);
    let (lx, ly) = (cfg.nx as f64 * cfg.dx, cfg.ny as f64 * cfg.dy);
    let tau = std::f64::consts::TAU;
    for k in 0..cfg.nz {
        for j in 0..cfg.ny {
            for i in 0..cfg.nx {
                let c = cfg.idx(k, j + HALO, i + HALO);
                let x = (i as f64 + 0.5) * cfg.dx;
                let y = (j as f64 + 0.5) * cfg.dy;
                let q = 1.0 + 0.5 * (tau * x / lx).sin() * (tau * y / ly).cos();
                s.h[c] = cfg.depth[k];
                s.qh[c] = s.h[c] * q;
            }
        }
    }
    fill_halos(cfg, &mut s);
    s
}

/// Lake at rest plus a Gaussian bump, uniform in y, in the top layer's thickness:
/// `h[0] += amplitude * exp(-d² / (2 sigma²))`, `d` the periodic x-distance of the cell
/// centre from `x0` (m). Tracer `q = 1`. With `nz = 1` and `f0 = 0` it splits into two
/// linear gravity waves running at ±sqrt(g H).
pub fn gaussian_bump(cfg: &Config, amplitude: f64, x0: f64, sigma: f64) -> State {
    cfg.validate();
    let mut s = State::zeros(cfg);
    let lx = cfg.nx as f64 * cfg.dx;
    for k in 0..cfg.nz {
        for j in 0..cfg.ny {
            for i in 0..cfg.nx {
                let c = cfg.idx(k, j + HALO, i + HALO);
                let x = (i as f64 + 0.5) * cfg.dx;
                let mut d = (x - x0).rem_euclid(lx);
                if d > 0.5 * lx {
                    d -= lx;
                }
                let bump = if k == 0 {
                    amplitude * (-d * d / (2.0 * sigma * sigma)).exp()
                } else {
                    0.0
                };
                s.h[c] = cfg.depth[k] + bump;
                s.qh[c] = s.h[c];
            }
        }
    }
    fill_halos(cfg, &mut s);
    s
}

/// A deterministic smooth non-trivial flow: each field is a sum of four Fourier modes with
/// wavenumbers 1..=2 in each direction and pseudo-random amplitudes and phases (a linear
/// congruential generator seeded with `seed`). Thickness perturbations are 1% of
/// `depth[k]`, velocities O(1 m/s), the mixing ratio is in [0.5, 1.5].
pub fn random_smooth(cfg: &Config, seed: u64) -> State {
    cfg.validate();
    let mut rng = Lcg::new(seed);
    let mut s = State::zeros(cfg);
    let (lx, ly) = (cfg.nx as f64 * cfg.dx, cfg.ny as f64 * cfg.dy);
    let tau = std::f64::consts::TAU;
    // field f = 0 h, 1 u, 2 v, 3 q: four modes (kx, ky, amplitude, phase) per layer.
    for k in 0..cfg.nz {
        let mut modes = [[(0.0f64, 0.0f64, 0.0f64, 0.0f64); 4]; 4];
        for field in modes.iter_mut() {
            for m in field.iter_mut() {
                let kx = 1.0 + (rng.next() * 2.0).floor();
                let ky = (rng.next() * 3.0).floor();
                let amp = rng.next() * 2.0 - 1.0;
                let phase = rng.next() * tau;
                *m = (kx, ky, amp, phase);
            }
        }
        let eval = |f: usize, x: f64, y: f64| -> f64 {
            modes[f]
                .iter()
                .map(|&(kx, ky, a, p)| a * (tau * (kx * x / lx + ky * y / ly) + p).sin())
                .sum::<f64>()
                / 4.0
        };
        for j in 0..cfg.ny {
            for i in 0..cfg.nx {
                let c = cfg.idx(k, j + HALO, i + HALO);
                let (xc, yc) = ((i as f64 + 0.5) * cfg.dx, (j as f64 + 0.5) * cfg.dy);
                let (xu, yv) = (i as f64 * cfg.dx, j as f64 * cfg.dy);
                s.h[c] = cfg.depth[k] * (1.0 + 0.01 * eval(0, xc, yc));
                s.u[c] = 2.0 * eval(1, xu, yc);
                s.v[c] = 2.0 * eval(2, xc, yv);
                s.qh[c] = s.h[c] * (1.0 + 0.5 * eval(3, xc, yc));
            }
        }
    }
    fill_halos(cfg, &mut s);
    s
}

/// Deterministic numbers in [0, 1).
struct Lcg(u64);

impl Lcg {
    fn new(seed: u64) -> Self {
        Lcg(seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407))
    }

    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn fill_halos(cfg: &Config, s: &mut State) {
    for a in [&mut s.h, &mut s.u, &mut s.v, &mut s.qh] {
        halo_fill(cfg, a);
    }
}

// ----------------------------------------------------------------------------------------
// Loop-nest helpers.

/// Calls `f(k, c)` for every interior point, `c` the flat index, in storage order.
fn interior(cfg: &Config, mut f: impl FnMut(usize, usize)) {
    for k in 0..cfg.nz {
        for jp in HALO..HALO + cfg.ny {
            let row = cfg.idx(k, jp, 0);
            for ip in HALO..HALO + cfg.nx {
                f(k, row + ip);
            }
        }
    }
}

/// Calls `f(c0)` for every interior column, `c0` the flat index of its `k = 0` point.
fn columns(cfg: &Config, mut f: impl FnMut(usize)) {
    for jp in HALO..HALO + cfg.ny {
        for ip in HALO..HALO + cfg.nx {
            f(cfg.idx(0, jp, ip));
        }
    }
}

/// Periodic source of padded index `p` on an axis of `n` interior points.
fn wrap(p: usize, n: usize) -> usize {
    HALO + (p as isize - HALO as isize).rem_euclid(n as isize) as usize
}

/// Periodic halo update: every halo point (corners included) copies the interior point
/// `(k, wrap(jp), wrap(ip))`.
fn halo_fill(cfg: &Config, a: &mut [f64]) {
    for k in 0..cfg.nz {
        for jp in 0..cfg.py() {
            let js = wrap(jp, cfg.ny);
            let inner_row = (HALO..HALO + cfg.ny).contains(&jp);
            for ip in 0..cfg.px() {
                if inner_row && (HALO..HALO + cfg.nx).contains(&ip) {
                    continue;
                }
                a[cfg.idx(k, jp, ip)] = a[cfg.idx(k, js, wrap(ip, cfg.nx))];
            }
        }
    }
}

/// The log of stencil calls of one step, in order (names as in docs/dycore.md).
pub type Log = Vec<&'static str>;

fn halo(cfg: &Config, a: &mut [f64], name: &'static str, log: &mut Log) {
    log.push(name);
    halo_fill(cfg, a);
}

/// Scratch fields (padded shape), allocated per step.
struct Work {
    /// Mass fluxes at u and v points.
    mu: Vec<f64>,
    mv: Vec<f64>,
    /// Relative and potential vorticity at corners.
    zeta: Vec<f64>,
    pv: Vec<f64>,
    /// Kinetic energy, interface height, Montgomery potential, Bernoulli function (centres).
    ke: Vec<f64>,
    e: Vec<f64>,
    m: Vec<f64>,
    b: Vec<f64>,
    /// Tendencies.
    dh: Vec<f64>,
    du: Vec<f64>,
    dv: Vec<f64>,
    dqh: Vec<f64>,
    /// Tracer mass fluxes at u and v points.
    fu: Vec<f64>,
    fv: Vec<f64>,
    /// Mixing ratio and Laplacians.
    q: Vec<f64>,
    lu: Vec<f64>,
    lv: Vec<f64>,
    lq: Vec<f64>,
    /// Hyperdiffusive tracer fluxes.
    gx: Vec<f64>,
    gy: Vec<f64>,
    /// Thomas coefficients.
    cp: Vec<f64>,
    dp: Vec<f64>,
}

impl Work {
    fn new(cfg: &Config) -> Self {
        let z = || vec![0.0; cfg.len()];
        Work {
            mu: z(),
            mv: z(),
            zeta: z(),
            pv: z(),
            ke: z(),
            e: z(),
            m: z(),
            b: z(),
            dh: z(),
            du: z(),
            dv: z(),
            dqh: z(),
            fu: z(),
            fv: z(),
            q: z(),
            lu: z(),
            lv: z(),
            lq: z(),
            gx: z(),
            gy: z(),
            cp: z(),
            dp: z(),
        }
    }
}

// ----------------------------------------------------------------------------------------
// The time step.

/// One time step: three Wicker–Skamarock RK3 stages, then hyperdiffusion (if
/// `cfg.hyperdiffusion`), implicit vertical diffusion, Rayleigh damping (if `cfg.damping`).
pub fn step(cfg: &Config, s: &mut State) {
    let mut log = Log::new();
    step_traced(cfg, s, &mut log);
}

/// [`step`], appending the name of every stencil call, in order, to `log`.
pub fn step_traced(cfg: &Config, s: &mut State, log: &mut Log) {
    cfg.validate();
    assert_eq!(
        s.h.len(),
        cfg.len(),
        "state does not match the configuration"
    );
    let mut w = Work::new(cfg);
    // The stage state (the RK3 intermediates φ⁽¹⁾, φ⁽²⁾).
    let mut st = State::zeros(cfg);
    // Stage 1: tendencies of φⁿ; φ⁽¹⁾ = φⁿ + dt/3 T(φⁿ).
    tendencies(cfg, s, &mut w, log);
    rk_update(cfg, s, &mut st, &w, cfg.dt / 3.0, false, log);
    // Stage 2: φ⁽²⁾ = φⁿ + dt/2 T(φ⁽¹⁾).
    tendencies(cfg, &mut st, &mut w, log);
    rk_update(cfg, s, &mut st, &w, cfg.dt / 2.0, false, log);
    // Stage 3: φⁿ⁺¹ = φⁿ + dt T(φ⁽²⁾), written over φⁿ.
    tendencies(cfg, &mut st, &mut w, log);
    rk_update(cfg, s, &mut st, &w, cfg.dt, true, log);
    physics(cfg, s, &mut w, log);
}

/// The tendencies T(φ) of the current stage state `s` into `w.dh, w.du, w.dv, w.dqh`.
fn tendencies(cfg: &Config, s: &mut State, w: &mut Work, log: &mut Log) {
    let (dx, dy) = (cfg.dx, cfg.dy);
    let sy = cfg.px();
    let sz = cfg.py() * cfg.px();

    halo(cfg, &mut s.h, "halo_h", log);
    halo(cfg, &mut s.u, "halo_u", log);
    halo(cfg, &mut s.v, "halo_v", log);
    halo(cfg, &mut s.qh, "halo_qh", log);
    let (h, u, v, qh) = (&s.h, &s.u, &s.v, &s.qh);

    log.push("mass_flux_x");
    interior(cfg, |_, c| w.mu[c] = 0.5 * (h[c - 1] + h[c]) * u[c]);
    log.push("mass_flux_y");
    interior(cfg, |_, c| w.mv[c] = 0.5 * (h[c - sy] + h[c]) * v[c]);
    halo(cfg, &mut w.mu, "halo_mu", log);
    halo(cfg, &mut w.mv, "halo_mv", log);

    log.push("vorticity");
    interior(cfg, |_, c| {
        w.zeta[c] = (v[c] - v[c - 1]) / dx - (u[c] - u[c - sy]) / dy;
    });
    log.push("potential_vorticity");
    interior(cfg, |_, c| {
        let hc = 0.25 * (h[c - sy - 1] + h[c - sy] + h[c - 1] + h[c]);
        w.pv[c] = (cfg.f0 + w.zeta[c]) / hc;
    });
    halo(cfg, &mut w.pv, "halo_pv", log);

    log.push("kinetic_energy");
    interior(cfg, |_, c| {
        w.ke[c] = 0.25 * (u[c] * u[c] + u[c + 1] * u[c + 1] + v[c] * v[c] + v[c + sy] * v[c + sy]);
    });

    // Vertical scans, one sequential accumulation per column.
    log.push("interface_height");
    columns(cfg, |c0| {
        let bottom = c0 + (cfg.nz - 1) * sz;
        w.e[bottom] = h[bottom];
        for k in (0..cfg.nz - 1).rev() {
            let c = c0 + k * sz;
            w.e[c] = w.e[c + sz] + h[c];
        }
    });
    log.push("montgomery");
    let gr = cfg.reduced_gravity();
    columns(cfg, |c0| {
        w.m[c0] = gr[0] * w.e[c0];
        for (k, &gk) in gr.iter().enumerate().skip(1) {
            let c = c0 + k * sz;
            w.m[c] = w.m[c - sz] + gk * w.e[c];
        }
    });
    log.push("bernoulli");
    interior(cfg, |_, c| w.b[c] = w.m[c] + w.ke[c]);
    halo(cfg, &mut w.b, "halo_b", log);

    log.push("tendency_h");
    interior(cfg, |_, c| {
        w.dh[c] = -((w.mu[c + 1] - w.mu[c]) / dx + (w.mv[c + sy] - w.mv[c]) / dy);
    });
    log.push("tendency_u");
    interior(cfg, |_, c| {
        let (pv, mv) = (&w.pv, &w.mv);
        w.du[c] = 0.25 * (pv[c] * (mv[c - 1] + mv[c]) + pv[c + sy] * (mv[c + sy - 1] + mv[c + sy]))
            - (w.b[c] - w.b[c - 1]) / dx;
    });
    log.push("tendency_v");
    interior(cfg, |_, c| {
        let (pv, mu) = (&w.pv, &w.mu);
        w.dv[c] = -0.25 * (pv[c] * (mu[c - sy] + mu[c]) + pv[c + 1] * (mu[c - sy + 1] + mu[c + 1]))
            - (w.b[c] - w.b[c - sy]) / dy;
    });

    log.push("tracer_flux_x");
    interior(cfg, |_, c| {
        w.fu[c] = w.mu[c] * (0.5 * (qh[c - 1] / h[c - 1] + qh[c] / h[c]));
    });
    log.push("tracer_flux_y");
    interior(cfg, |_, c| {
        w.fv[c] = w.mv[c] * (0.5 * (qh[c - sy] / h[c - sy] + qh[c] / h[c]));
    });
    halo(cfg, &mut w.fu, "halo_fu", log);
    halo(cfg, &mut w.fv, "halo_fv", log);
    log.push("tendency_qh");
    interior(cfg, |_, c| {
        w.dqh[c] = -((w.fu[c + 1] - w.fu[c]) / dx + (w.fv[c + sy] - w.fv[c]) / dy);
    });
}

/// `out = base + a * T` for h, u, v, qh; into the stage state `st`, or (last stage,
/// `into_base`) over `base` itself.
fn rk_update(
    cfg: &Config,
    base: &mut State,
    st: &mut State,
    w: &Work,
    a: f64,
    into_base: bool,
    log: &mut Log,
) {
    let fields = [
        (&mut base.h, &mut st.h, &w.dh, "rk_update_h"),
        (&mut base.u, &mut st.u, &w.du, "rk_update_u"),
        (&mut base.v, &mut st.v, &w.dv, "rk_update_v"),
        (&mut base.qh, &mut st.qh, &w.dqh, "rk_update_qh"),
    ];
    for (b, o, t, name) in fields {
        log.push(name);
        if into_base {
            interior(cfg, |_, c| b[c] += a * t[c]);
        } else {
            interior(cfg, |_, c| o[c] = b[c] + a * t[c]);
        }
    }
}

/// Where a vertically diffused variable lives (sets its thickness weight).
#[derive(Clone, Copy)]
enum Loc {
    Centre,
    U,
    V,
}

/// Thickness weight `w_k` of a variable at flat index `c`.
fn weight(cfg: &Config, h: &[f64], loc: Loc, c: usize) -> f64 {
    match loc {
        Loc::Centre => h[c],
        Loc::U => 0.5 * (h[c - 1] + h[c]),
        Loc::V => 0.5 * (h[c - cfg.px()] + h[c]),
    }
}

/// Thomas forward sweep (top-down) of the column system
/// `a_k x_{k-1} + b_k x_k + c_k x_{k+1} = d_k` into `cp`, `dp`. `d_k = w_k * phi_k`, or
/// `phi_k` itself when `weighted` (the tracer: phi = qh).
fn thomas_forward(
    cfg: &Config,
    h: &[f64],
    phi: &[f64],
    loc: Loc,
    weighted: bool,
    cp: &mut [f64],
    dp: &mut [f64],
) {
    let sz = cfg.py() * cfg.px();
    let nz = cfg.nz;
    let dtk = cfg.dt * cfg.kv;
    columns(cfg, |c0| {
        for k in 0..nz {
            let c = c0 + k * sz;
            let wk = weight(cfg, h, loc, c);
            let a = if k > 0 {
                -dtk / (0.5 * (weight(cfg, h, loc, c - sz) + wk))
            } else {
                0.0
            };
            let cc = if k + 1 < nz {
                -dtk / (0.5 * (wk + weight(cfg, h, loc, c + sz)))
            } else {
                0.0
            };
            let b = wk - a - cc;
            let d = if weighted { phi[c] } else { wk * phi[c] };
            if k == 0 {
                cp[c] = cc / b;
                dp[c] = d / b;
            } else {
                let m = b - a * cp[c - sz];
                cp[c] = cc / m;
                dp[c] = (d - a * dp[c - sz]) / m;
            }
        }
    });
}

/// Thomas backward sweep (bottom-up): `x_{nz-1} = dp_{nz-1}`, `x_k = dp_k - cp_k x_{k+1}`.
fn thomas_backward(cfg: &Config, cp: &[f64], dp: &[f64], x: &mut [f64]) {
    let sz = cfg.py() * cfg.px();
    columns(cfg, |c0| {
        let bottom = c0 + (cfg.nz - 1) * sz;
        x[bottom] = dp[bottom];
        for k in (0..cfg.nz - 1).rev() {
            let c = c0 + k * sz;
            x[c] = dp[c] - cp[c] * x[c + sz];
        }
    });
}

/// `L = δxx a + δyy a` (interior).
fn laplacian(cfg: &Config, a: &[f64], out: &mut [f64]) {
    let sy = cfg.px();
    let (rdx2, rdy2) = (1.0 / (cfg.dx * cfg.dx), 1.0 / (cfg.dy * cfg.dy));
    interior(cfg, |_, c| {
        out[c] =
            (a[c - 1] - 2.0 * a[c] + a[c + 1]) * rdx2 + (a[c - sy] - 2.0 * a[c] + a[c + sy]) * rdy2;
    });
}

/// After the RK stages: hyperdiffusion, vertical diffusion, damping.
fn physics(cfg: &Config, s: &mut State, w: &mut Work, log: &mut Log) {
    let (dx, dy, dt) = (cfg.dx, cfg.dy, cfg.dt);
    let sy = cfg.px();
    halo(cfg, &mut s.h, "halo_h", log);

    if cfg.hyperdiffusion {
        let k4 = dt * cfg.nu4;
        halo(cfg, &mut s.u, "halo_u", log);
        halo(cfg, &mut s.v, "halo_v", log);
        log.push("laplacian_u");
        laplacian(cfg, &s.u, &mut w.lu);
        log.push("laplacian_v");
        laplacian(cfg, &s.v, &mut w.lv);
        halo(cfg, &mut w.lu, "halo_lu", log);
        halo(cfg, &mut w.lv, "halo_lv", log);
        // u -= dt nu4 lap(lap u), with the outer Laplacian written out in the update.
        let (rdx2, rdy2) = (1.0 / (dx * dx), 1.0 / (dy * dy));
        for (phi, l, name) in [
            (&mut s.u, &w.lu, "hyperdiffusion_u"),
            (&mut s.v, &w.lv, "hyperdiffusion_v"),
        ] {
            log.push(name);
            interior(cfg, |_, c| {
                let ll = (l[c - 1] - 2.0 * l[c] + l[c + 1]) * rdx2
                    + (l[c - sy] - 2.0 * l[c] + l[c + sy]) * rdy2;
                phi[c] -= k4 * ll;
            });
        }

        // Tracer, in flux form: qh -= dt div(G), G = nu4 h_face grad(lap q).
        let (h, qh) = (&s.h, &mut s.qh);
        log.push("mixing_ratio");
        interior(cfg, |_, c| w.q[c] = qh[c] / h[c]);
        halo(cfg, &mut w.q, "halo_q", log);
        log.push("laplacian_q");
        laplacian(cfg, &w.q, &mut w.lq);
        halo(cfg, &mut w.lq, "halo_lq", log);
        let nu4 = cfg.nu4;
        log.push("hyperflux_x");
        interior(cfg, |_, c| {
            w.gx[c] = nu4 * (0.5 * (h[c - 1] + h[c])) * ((w.lq[c] - w.lq[c - 1]) / dx);
        });
        log.push("hyperflux_y");
        interior(cfg, |_, c| {
            w.gy[c] = nu4 * (0.5 * (h[c - sy] + h[c])) * ((w.lq[c] - w.lq[c - sy]) / dy);
        });
        halo(cfg, &mut w.gx, "halo_gx", log);
        halo(cfg, &mut w.gy, "halo_gy", log);
        log.push("hyperdiffusion_qh");
        interior(cfg, |_, c| {
            qh[c] -= dt * ((w.gx[c + 1] - w.gx[c]) / dx + (w.gy[c + sy] - w.gy[c]) / dy);
        });
    }

    // Implicit vertical diffusion, zero flux at top and bottom.
    log.push("thomas_forward_u");
    thomas_forward(cfg, &s.h, &s.u, Loc::U, false, &mut w.cp, &mut w.dp);
    log.push("thomas_backward_u");
    thomas_backward(cfg, &w.cp, &w.dp, &mut s.u);
    log.push("thomas_forward_v");
    thomas_forward(cfg, &s.h, &s.v, Loc::V, false, &mut w.cp, &mut w.dp);
    log.push("thomas_backward_v");
    thomas_backward(cfg, &w.cp, &w.dp, &mut s.v);
    log.push("thomas_forward_qh");
    thomas_forward(cfg, &s.h, &s.qh, Loc::Centre, true, &mut w.cp, &mut w.dp);
    log.push("thomas_backward_q");
    thomas_backward(cfg, &w.cp, &w.dp, &mut w.q);
    log.push("tracer_mass");
    {
        let (h, qh) = (&s.h, &mut s.qh);
        interior(cfg, |_, c| qh[c] = h[c] * w.q[c]);
    }

    if cfg.damping {
        for (phi, name) in [(&mut s.u, "damping_u"), (&mut s.v, "damping_v")] {
            log.push(name);
            interior(cfg, |k, c| phi[c] /= 1.0 + dt * cfg.damping_rate_of(k));
        }
    }
}
