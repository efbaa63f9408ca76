//! The reference dynamical core (`examples/dycore/reference.rs`): conservation, a lake at
//! rest, the linear gravity-wave speed, determinism, every term exercised, and the stencil
//! calls of a step agreeing with the list in `docs/dycore.md`.

#[path = "../examples/dycore/reference.rs"]
mod reference;

use reference::{
    Config, Log, State, gaussian_bump, interior_max_abs, lake_at_rest, random_smooth, step,
    step_traced, total_mass, total_tracer_mass, wave_speed,
};

fn run(cfg: &Config, s: &mut State, steps: usize) {
    for _ in 0..steps {
        step(cfg, s);
    }
}

fn rel(a: f64, b: f64) -> f64 {
    ((a - b) / b).abs()
}

fn max_abs_diff(cfg: &Config, a: &[f64], b: &[f64]) -> f64 {
    let d: Vec<f64> = a.iter().zip(b).map(|(x, y)| x - y).collect();
    interior_max_abs(cfg, &d)
}

#[test]
fn mass_and_tracer_mass_are_conserved() {
    let cfg = Config::default();
    assert!(cfg.hyperdiffusion && cfg.damping && cfg.kv > 0.0);
    let mut s = random_smooth(&cfg, 7);
    let (m0, t0) = (total_mass(&cfg, &s), total_tracer_mass(&cfg, &s));
    let u0 = interior_max_abs(&cfg, &s.u);
    run(&cfg, &mut s, 100);
    let (m1, t1) = (total_mass(&cfg, &s), total_tracer_mass(&cfg, &s));
    eprintln!(
        "mass drift {:e}, tracer mass drift {:e}",
        rel(m1, m0),
        rel(t1, t0)
    );
    assert!(rel(m1, m0) < 1e-12, "mass drift {:e}", rel(m1, m0));
    assert!(rel(t1, t0) < 1e-12, "tracer mass drift {:e}", rel(t1, t0));
    // The flow is still alive and sane (no blow-up).
    let u1 = interior_max_abs(&cfg, &s.u);
    assert!(u1 > 0.1 * u0 && u1 < 10.0 * u0, "max |u| {u0} -> {u1}");
    assert!(s.h.iter().all(|x| x.is_finite()));
}

#[test]
fn lake_at_rest_stays_at_rest() {
    let cfg = Config::default();
    assert!(cfg.f0 != 0.0);
    let mut s = lake_at_rest(&cfg);
    let h0 = s.h.clone();
    run(&cfg, &mut s, 100);
    let (u, v) = (interior_max_abs(&cfg, &s.u), interior_max_abs(&cfg, &s.v));
    eprintln!("lake at rest: max |u| = {u:e}, max |v| = {v:e}");
    assert!(u < 1e-13 && v < 1e-13, "|u| = {u:e}, |v| = {v:e}");
    assert!(max_abs_diff(&cfg, &s.h, &h0) < 1e-12 * 1500.0);
}

#[test]
fn linear_gravity_wave_travels_at_sqrt_g_h() {
    let cfg = Config::gravity_wave();
    let lx = cfg.nx as f64 * cfg.dx;
    let mut s = gaussian_bump(&cfg, 0.01, 0.5 * lx, 8.0 * cfg.dx);
    let c = (cfg.g * cfg.depth[0]).sqrt();
    let speed = wave_speed(&cfg, &mut s, (100, 300), |s, n| run(&cfg, s, n));
    eprintln!(
        "wave speed {speed} m/s, sqrt(gH) = {c} m/s, error {:e}",
        rel(speed, c)
    );
    assert!(rel(speed, c) < 0.02, "speed {speed} vs sqrt(gH) = {c}");
    // Uniform in y: v stays zero.
    assert!(interior_max_abs(&cfg, &s.v) < 1e-14);
}

#[test]
fn steps_are_deterministic() {
    let cfg = Config::default();
    let mut a = random_smooth(&cfg, 3);
    let mut b = random_smooth(&cfg, 3);
    run(&cfg, &mut a, 10);
    run(&cfg, &mut b, 10);
    assert!(a == b, "two identical runs differ");
    assert!(random_smooth(&cfg, 3) != random_smooth(&cfg, 4));
}

#[test]
fn uniform_tracer_stays_uniform() {
    let cfg = Config::default();
    let mut s = random_smooth(&cfg, 11);
    for (qh, h) in s.qh.iter_mut().zip(&s.h) {
        *qh = 0.7 * h;
    }
    run(&cfg, &mut s, 50);
    let q: Vec<f64> = s.qh.iter().zip(&s.h).map(|(qh, h)| qh / h - 0.7).collect();
    let err = interior_max_abs(&cfg, &q);
    eprintln!("uniform tracer: max |q - 0.7| = {err:e}");
    assert!(err < 1e-12, "mixing ratio drifted by {err:e}");
}

#[test]
fn every_term_changes_the_result() {
    let base = Config::default();
    let s0 = random_smooth(&base, 5);
    let steps = 5;
    let mut reference = s0.clone();
    run(&base, &mut reference, steps);
    let variants: [(&str, Config); 6] = [
        (
            "no hyperdiffusion",
            Config {
                hyperdiffusion: false,
                ..base.clone()
            },
        ),
        (
            "no damping",
            Config {
                damping: false,
                ..base.clone()
            },
        ),
        (
            "no vertical diffusion",
            Config {
                kv: 0.0,
                ..base.clone()
            },
        ),
        (
            "f = 0",
            Config {
                f0: 0.0,
                ..base.clone()
            },
        ),
        (
            "equal densities",
            Config {
                rho: vec![1025.0; 4],
                ..base.clone()
            },
        ),
        (
            "damping two layers",
            Config {
                damping_layers: 2,
                ..base.clone()
            },
        ),
    ];
    for (what, cfg) in variants {
        let mut s = s0.clone();
        run(&cfg, &mut s, steps);
        let du = max_abs_diff(&base, &s.u, &reference.u);
        let dv = max_abs_diff(&base, &s.v, &reference.v);
        assert!(
            du > 1e-10 && dv > 1e-10,
            "{what}: u, v unchanged ({du:e}, {dv:e})"
        );
        if what != "damping two layers" && what != "no damping" {
            let dq = max_abs_diff(&base, &s.qh, &reference.qh);
            assert!(dq > 1e-12, "{what}: tracer unchanged ({dq:e})");
        }
    }
    // Within one step the post-processing of the tracer does not feed back through the
    // flow: these differences come from the tracer's own hyperdiffusion and vertical
    // diffusion.
    for (what, cfg) in [
        (
            "nu4 = 0",
            Config {
                nu4: 0.0,
                ..base.clone()
            },
        ),
        (
            "kv = 0",
            Config {
                kv: 0.0,
                ..base.clone()
            },
        ),
    ] {
        let mut a = s0.clone();
        let mut b = s0.clone();
        run(&cfg, &mut a, 1);
        run(&base, &mut b, 1);
        let dq = max_abs_diff(&base, &a.qh, &b.qh);
        assert!(
            dq > 1e-12,
            "{what}: tracer unchanged after one step ({dq:e})"
        );
        let dh = max_abs_diff(&base, &a.h, &b.h);
        assert!(dh == 0.0, "{what}: h changed ({dh:e})");
    }
}

/// The numbered call names in the table between `<!-- begin NAME -->` and
/// `<!-- end NAME -->` in docs/dycore.md.
fn documented_calls(doc: &str, name: &str) -> Vec<String> {
    let begin = format!("<!-- begin {name} -->");
    let end = format!("<!-- end {name} -->");
    let start = doc.find(&begin).unwrap_or_else(|| panic!("no {begin}")) + begin.len();
    let stop = start
        + doc[start..]
            .find(&end)
            .unwrap_or_else(|| panic!("no {end}"));
    doc[start..stop]
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            (cells.len() > 2 && cells[1].parse::<usize>().is_ok())
                .then(|| cells[2].trim_matches('`').to_string())
        })
        .collect()
}

#[test]
fn stencil_calls_match_the_documented_list() {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/dycore.md"),
    )
    .unwrap();
    let stage = documented_calls(&doc, "stage-calls");
    let post = documented_calls(&doc, "post-calls");
    let hyper = documented_calls(&doc, "hyperdiffusion-calls");
    let damping = documented_calls(&doc, "damping-calls");
    let vertical = documented_calls(&doc, "vertical-calls");

    let traced = |cfg: &Config| {
        let mut s = random_smooth(cfg, 1);
        let mut log = Log::new();
        step_traced(cfg, &mut s, &mut log);
        log.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let all = Config::default();
    let mut expected: Vec<String> = [&stage, &stage, &stage, &post, &hyper, &vertical, &damping]
        .into_iter()
        .flatten()
        .cloned()
        .collect();
    assert_eq!(traced(&all), expected);

    let bare = Config {
        hyperdiffusion: false,
        damping: false,
        ..all.clone()
    };
    expected = [&stage, &stage, &stage, &post, &vertical]
        .into_iter()
        .flatten()
        .cloned()
        .collect();
    assert_eq!(traced(&bare), expected);

    // At least 30 distinct loop nests besides the halo updates, all run by a full step.
    let full = traced(&all);
    let mut kernels: Vec<&String> = full.iter().filter(|n| !n.starts_with("halo_")).collect();
    kernels.sort();
    kernels.dedup();
    assert!(kernels.len() >= 30, "{} distinct kernels", kernels.len());
    assert!(full.len() >= 100, "{} calls per step", full.len());
}
