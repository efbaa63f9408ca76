//! The granule example's component: compiled variants equal the unspecialized programs on
//! the interpreter, the configuration file is honoured (and shown by `sdflow show --emit
//! report`), and a second start compiles nothing.

#[path = "../examples/granule/programs.rs"]
mod programs;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use sdflow::codegen::{Args, Backend, Cache, Origin};
use sdflow::ir::interp::{self, Bindings, HostArray};
use sdflow::ir::{Value, format};
use sdflow::orchestration::component::{Component, ProgramSpec, Programs};
use sdflow::orchestration::config::{Config, Source};
use sdflow::orchestration::workflow::Workflow;

const NC: usize = 64;
const NK: usize = 3;
const N: usize = 10;

fn config_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/granule/granule.toml")
}

fn build(cache: &Path) -> Programs {
    let (e2c, c2e) = programs::tables(NC);
    Component::new(Backend::Cpu)
        .config(Config::load(&config_path()).unwrap())
        .workflow(Arc::new(Workflow::new().with_cache(Some(Cache::at(cache)))))
        .with_program(
            ProgramSpec::new(programs::advect_tracer())
                .static_value("NX", N as i64)
                .static_value("NY", N as i64)
                .static_value("NK", NK as i64)
                .variants("positive", [0i64, 1])
                .bind_array(
                    "rarea",
                    HostArray::F64(programs::metric(&[N + 2, N + 2, NK], 1.0)),
                )
                .bind_float("cu", 0.4)
                .bind_float("cv", 0.3),
        )
        .with_program(
            ProgramSpec::new(programs::diffuse_cells())
                .static_value("NC", NC as i64)
                .static_value("NE", NC as i64)
                .static_value("NK", NK as i64)
                .static_value("hstart", 2i64)
                .static_value("hend", (NC - 2) as i64)
                .variants("limited_area", [0i64, 1])
                .bind_array("e2c", e2c)
                .bind_array("c2e", c2e)
                .bind_array("inv_len", HostArray::F64(programs::metric(&[NC, NK], 1.0)))
                .bind_array("area_inv", HostArray::F64(programs::metric(&[NC, NK], 0.5)))
                .bind_float("nu", 0.1),
        )
        .build()
        .unwrap()
}

#[test]
fn the_granule_matches_the_unspecialized_programs() {
    let dir = std::env::temp_dir().join(format!("sdflow-granule-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let p = build(&dir);
    assert_eq!(p.compiled(), 4);
    // The configuration reached each program.
    let adv = p.program("advect_tracer").unwrap().options();
    assert_eq!(adv.options.threads, 2);
    assert_eq!(adv.options.parallel_min_points, 1024);
    let dif = p.program("diffuse_cells").unwrap().options();
    assert_eq!(dif.options.tile_rows, 0);
    assert_eq!(dif.options.schedule.name(), "dynamic");
    assert!(matches!(
        &dif.sources["tile_rows"],
        Source::File { table, .. } if table == "program.diffuse_cells"
    ));
    let shape3 = [N + 2, N + 2, NK];
    let mut q = HostArray::F64(programs::field(&shape3, 0.0));
    let mut t = HostArray::F64(programs::field(&[NC, NK], 1.0));
    let mut t_bdy = HostArray::F64(programs::field(&[NC, NK], 2.0));
    for step in 0..4i64 {
        let (positive, limited_area) = (step % 2, step / 2);
        let dt = 0.5 + 0.1 * step as f64;
        // The reference: the unspecialized programs, every argument passed.
        let mut b = Bindings::default();
        b.arrays.insert("q".into(), q.clone());
        b.arrays.insert("q_new".into(), q.clone());
        b.arrays.insert(
            "rarea".into(),
            HostArray::F64(programs::metric(&shape3, 1.0)),
        );
        for (k, v) in [("NX", N), ("NY", N), ("NK", NK)] {
            b.symbols.insert(k.into(), Value::I64(v as i64));
        }
        b.symbols.insert("positive".into(), Value::I64(positive));
        for (k, v) in [("dt", dt), ("cu", 0.4), ("cv", 0.3)] {
            b.symbols.insert(k.into(), Value::F64(v));
        }
        interp::run(&programs::advect_tracer(), &mut b).unwrap();
        let want_q = b.arrays.remove("q_new").unwrap();
        let (e2c, c2e) = programs::tables(NC);
        let mut b = Bindings::default();
        b.arrays.insert("t".into(), t.clone());
        b.arrays.insert("t_new".into(), t.clone());
        b.arrays.insert("t_bdy".into(), t_bdy.clone());
        b.arrays.insert("e2c".into(), e2c);
        b.arrays.insert("c2e".into(), c2e);
        b.arrays.insert(
            "inv_len".into(),
            HostArray::F64(programs::metric(&[NC, NK], 1.0)),
        );
        b.arrays.insert(
            "area_inv".into(),
            HostArray::F64(programs::metric(&[NC, NK], 0.5)),
        );
        for (k, v) in [
            ("NC", NC),
            ("NE", NC),
            ("NK", NK),
            ("hstart", 2),
            ("hend", NC - 2),
        ] {
            b.symbols.insert(k.into(), Value::I64(v as i64));
        }
        b.symbols
            .insert("limited_area".into(), Value::I64(limited_area));
        b.symbols.insert("nu".into(), Value::F64(0.1));
        interp::run(&programs::diffuse_cells(), &mut b).unwrap();
        let want_t = b.arrays.remove("t_new").unwrap();
        // The component: only the changing arguments.
        let mut q_new = q.clone();
        let mut t_new = t.clone();
        p.program("advect_tracer")
            .unwrap()
            .call(
                Args::new()
                    .host("q", &mut q)
                    .host("q_new", &mut q_new)
                    .float("dt", dt)
                    .int("positive", positive),
            )
            .unwrap();
        p.program("diffuse_cells")
            .unwrap()
            .call(
                Args::new()
                    .host("t", &mut t)
                    .host("t_new", &mut t_new)
                    .host("t_bdy", &mut t_bdy)
                    .int("limited_area", limited_area),
            )
            .unwrap();
        assert_eq!(q_new.bits(), want_q.bits(), "q, step {step}");
        assert_eq!(t_new.bits(), want_t.bits(), "t, step {step}");
        q = q_new;
        t = t_new;
    }
    // A second start: nothing compiled.
    let again = build(&dir);
    assert_eq!(again.compiled(), 0);
    assert!(
        again
            .records
            .iter()
            .all(|r| r.origin == Some(Origin::Cached))
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn show_reports_the_granule_configuration() {
    let dir = std::env::temp_dir().join(format!("sdflow-granule-show-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("diffuse_cells.sdfg.json");
    std::fs::write(&file, format::to_json(&programs::diffuse_cells())).unwrap();
    let cfg = config_path();
    let o = Command::new(env!("CARGO_BIN_EXE_sdflow"))
        .args([
            "show",
            file.to_str().unwrap(),
            "--emit",
            "report",
            "--arch",
            "x86_64",
        ])
        .args([
            "--config",
            cfg.to_str().unwrap(),
            "-s",
            "limited_area=0",
            "-s",
            "NK=3",
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let c = cfg.display();
    for want in [
        format!(
            "  tile_rows            0                            {c}:21 [program.diffuse_cells]"
        ),
        format!(
            "  schedule             \"dynamic\"                    {c}:25 [program.diffuse_cells.cpu]"
        ),
        format!("  parallel_min_points  1024                         {c}:10 [cpu]"),
    ] {
        assert!(out.lines().any(|l| l == want), "missing {want:?} in\n{out}");
    }
    assert!(
        out.contains("symbols_specialized=2 branches_folded=1"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
