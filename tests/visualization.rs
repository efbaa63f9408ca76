//! Drawings at each level of detail, one state or one map's body, and the optimizer's
//! work marked on its output (`docs/visualization.md`). The examples' drawings at every
//! level are snapshots (`tests/snapshots.rs`); these tests pin the choices and the errors.

use std::path::PathBuf;
use std::process::Command;

use sdflow::ir::Sdfg;
use sdflow::ir::dot::{self, Detail, DotOptions, Mark};
use sdflow::ir::testkit::branchy;
use sdflow::transforms::Pipeline;

fn draw(s: &Sdfg, opts: &DotOptions) -> String {
    dot::to_dot_with(s, opts).unwrap()
}

#[test]
fn a_map_moved_into_an_if_and_a_fusion_are_marked() {
    let before = branchy();
    // Moved only: the producer goes into the branch that reads its result.
    let mut moved = before.clone();
    Pipeline::from_names(&["move_into_if"])
        .unwrap()
        .run(&mut moved)
        .unwrap();
    let marks = dot::diff_marks(&before, &moved);
    assert_eq!(
        marks.maps.into_iter().collect::<Vec<_>>(),
        [("square".to_string(), Mark::MovedIntoIf)]
    );
    // The whole pipeline: moved, then fused with its consumer in the branch.
    let mut optimized = before.clone();
    Pipeline::cpu().run(&mut optimized).unwrap();
    let marks = dot::diff_marks(&before, &optimized);
    assert_eq!(
        marks.maps.get("square+use"),
        Some(&Mark::Fused(vec!["square".into(), "use".into()]))
    );
    assert_eq!(
        marks.legend,
        [
            "against 'branchy': 1 map fused (green), 0 maps moved into an if (orange)",
            "containers removed: tmp",
            "states: 3 -> 2"
        ]
    );
    let text = draw(
        &optimized,
        &DotOptions {
            detail: Some(Detail::Control),
            marks: Some(marks),
            ..Default::default()
        },
    );
    assert!(
        text.contains(r##"\nsquare+use: fused: square + use" shape="box" style="filled" fillcolor="#c8f0c8"]"##),
        "{text}"
    );
    assert!(text.contains("containers removed: tmp"), "{text}");
}

#[test]
fn each_level_draws_what_it_says() {
    let s = branchy();
    let full = draw(&s, &DotOptions::default());
    assert_eq!(Detail::auto(&s), Detail::Full);
    assert_eq!(full, dot::to_dot(&s));
    let states = draw(
        &s,
        &DotOptions {
            detail: Some(Detail::States),
            ..Default::default()
        },
    );
    // One node per map, no entry/exit pair, no body.
    assert!(
        states.contains(r#"label="square[i=0:N] (cpu_parallel)\n1 tasklet" shape="component""#),
        "{states}"
    );
    assert!(!states.contains("_entry") && !states.contains("y = x * x"));
    let control = draw(
        &s,
        &DotOptions {
            detail: Some(Detail::Control),
            ..Default::default()
        },
    );
    assert!(
        !control.contains("subgraph"),
        "no state clusters: {control}"
    );
    assert!(
        control
            .contains(r#"label="state 'pre' (#0)\n1 map; 1 tasklet in all\nreads u\nwrites tmp""#),
        "{control}"
    );
    assert!(control.contains(r#"label="if flag != 0" shape="diamond""#));
}

#[test]
fn one_state_or_one_map_body() {
    let s = branchy();
    let by_name = draw(
        &s,
        &DotOptions {
            state: Some("then".into()),
            ..Default::default()
        },
    );
    let by_index = draw(
        &s,
        &DotOptions {
            state: Some("#1".into()),
            ..Default::default()
        },
    );
    assert_eq!(by_name, by_index);
    assert!(by_name.contains("label=\"SDFG 'branchy', state 'then' (#1)\""));
    assert!(by_name.contains("y = x + 1.0") && !by_name.contains("y = x * x"));
    let body = draw(
        &s,
        &DotOptions {
            map: Some("copy".into()),
            ..Default::default()
        },
    );
    assert!(body.contains("label=\"SDFG 'branchy', body of map copy[i=0:N] (cpu_parallel)\""));
    assert!(body.contains("copy\\ny = x") && !body.contains("y = x + 1.0"));
    let err = |o: DotOptions| dot::to_dot_with(&s, &o).unwrap_err().to_string();
    assert_eq!(
        err(DotOptions {
            state: Some("post".into()),
            ..Default::default()
        }),
        "program 'branchy' has no state 'post' (states: pre, then, else)"
    );
    assert_eq!(
        err(DotOptions {
            map: Some("cube".into()),
            ..Default::default()
        }),
        "program 'branchy' has no map 'cube' (maps: square, use, copy)"
    );
}

fn sdflow(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sdflow"))
        .args(args)
        .current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")))
        .output()
        .unwrap()
}

#[test]
fn the_command_line_takes_levels_states_maps_and_diffs() {
    let o = sdflow(&["dot", "examples/dycore.sdfg.json"]);
    assert!(o.status.success());
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.contains("label=\"SDFG 'dycore' (control flow)\""));
    let o = sdflow(&[
        "dot",
        "examples/hyperdiffusion.sdfg.json",
        "--level",
        "states",
    ]);
    assert!(
        String::from_utf8(o.stdout)
            .unwrap()
            .contains("(maps collapsed)")
    );
    let out = std::env::temp_dir().join(format!("sdflow-vis-{}.json", std::process::id()));
    let dotfile = out.with_extension("dot");
    let o = sdflow(&[
        "opt",
        "examples/hyperdiffusion.sdfg.json",
        "-o",
        out.to_str().unwrap(),
        "--dot",
        dotfile.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let marked = std::fs::read_to_string(&dotfile).unwrap();
    assert!(marked.contains("1 map fused (green)"), "{marked}");
    let o = sdflow(&[
        "dot",
        "--diff",
        "examples/hyperdiffusion.sdfg.json",
        out.to_str().unwrap(),
    ]);
    // The same marks (node numbers differ: the file written renumbers the nodes).
    let diffed = String::from_utf8(o.stdout).unwrap();
    let legend = |t: &str| t.lines().nth(1).unwrap_or_default().to_string();
    assert_eq!(legend(&diffed), legend(&marked));
    assert!(diffed.contains(r"\nfused: lap1 + lap2"), "{diffed}");
    let err = |args: &[&str]| {
        let o = sdflow(args);
        assert!(!o.status.success());
        String::from_utf8(o.stderr).unwrap()
    };
    assert!(
        err(&["dot", "--diff", "examples/laplace.sdfg.json"])
            .contains("--diff takes two programs: the optimizer's input and its output")
    );
    assert!(
        err(&["dot", "examples/laplace.sdfg.json", "--level", "some"])
            .contains("--level 'some': expected control, states, full or auto")
    );
    assert!(
        err(&["dot", "examples/laplace.sdfg.json", "--state", "nope"])
            .contains("program 'laplace' has no state 'nope' (states: ")
    );
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(&dotfile);
}

/// The colour `plot::heatmap` gives the cell at `(i, j)`: decoded from the PNG written, at
/// the centre of the cell (the picture is `cell` pixels per cell, the plot area found by
/// its known corner colours).
fn png(path: &std::path::Path) -> image::RgbImage {
    image::open(path).unwrap().to_rgb8()
}

#[test]
fn a_heat_map_colours_each_cell_by_its_value() {
    use plotters::style::colors::colormaps::ViridisRGB;
    let dir = std::env::temp_dir().join(format!("sdflow-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (nx, ny) = (8, 4);
    // The value grows with i and j: the smallest at (0, 0), the largest at (7, 3).
    let values: Vec<f64> = (0..ny)
        .flat_map(|j| (0..nx).map(move |i| (i + nx * j) as f64))
        .collect();
    let path = dir.join("field.png");
    sdflow::plot::heatmap(&values, nx, ny, "a field", &path).unwrap();
    let img = png(&path);
    let colour = |v: f64| {
        let c = ViridisRGB::get_color_normalized(v, 0.0, (nx * ny - 1) as f64);
        image::Rgb([c.0, c.1, c.2])
    };
    let count = |c: image::Rgb<u8>| img.pixels().filter(|p| **p == c).count();
    // Every cell is drawn in its colour (some pixels of the cell: 80 per side here).
    let side = 640 / nx.max(ny);
    for (k, &v) in values.iter().enumerate() {
        assert!(
            count(colour(v)) >= side * side / 2,
            "cell {k} (value {v}) is not drawn in its colour"
        );
    }
    // Row 0 is at the bottom: the lowest pixel of the smallest value's colour lies below
    // the lowest pixel of the largest value's.
    let lowest = |c: image::Rgb<u8>| {
        img.enumerate_pixels()
            .filter(|(_, _, p)| **p == c)
            .map(|(_, y, _)| y)
            .max()
            .unwrap()
    };
    assert!(lowest(colour(0.0)) > lowest(colour(31.0)) + side as u32);
    // Wrong sizes are an error naming the file.
    let e = sdflow::plot::heatmap(&values, 5, 5, "bad", &path).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("{}: a 5 x 5 field needs 25 values, got 32", path.display())
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_command_line_plots_a_field_of_an_archive() {
    let dir = std::env::temp_dir().join(format!("sdflow-plotcli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let npz = dir.join("out.npz");
    let o = sdflow(&[
        "run",
        "examples/hyperdiffusion.sdfg.json",
        "-s",
        "N=16",
        "-s",
        "alpha=0.05",
        "--outputs",
        npz.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let pic = dir.join("out.png");
    let o = sdflow(&[
        "plot",
        npz.to_str().unwrap(),
        "out",
        "-o",
        pic.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8(o.stdout).unwrap(),
        format!("{}: out [16 x 16]\n", pic.display())
    );
    let img = png(&pic);
    assert!(
        img.width() > 640 && img.height() > 640,
        "{:?}",
        img.dimensions()
    );
    let err = |args: &[&str]| {
        let o = sdflow(args);
        assert!(!o.status.success());
        String::from_utf8(o.stderr).unwrap()
    };
    assert!(
        err(&["plot", npz.to_str().unwrap(), "lap"]).contains("no array 'lap' (arrays: out, u)")
    );
    // A 3-D array: one slice, chosen by dimension and index.
    let cube = dir.join("cube.npz");
    let a = ndarray::ArrayD::from_shape_fn(ndarray::IxDyn(&[3, 4, 2]), |ix| {
        (ix[0] * 8 + ix[1] * 2 + ix[2]) as f64
    });
    let arrays = [("t".to_string(), sdflow::ir::interp::HostArray::F64(a))]
        .into_iter()
        .collect();
    sdflow::npz::write_npz(&cube, &arrays).unwrap();
    let slice = dir.join("t.png");
    let o = sdflow(&[
        "plot",
        cube.to_str().unwrap(),
        "t",
        "--axis",
        "0",
        "--level",
        "1",
        "-o",
        slice.to_str().unwrap(),
    ]);
    assert_eq!(
        String::from_utf8(o.stdout).unwrap(),
        format!(
            "{}: t [3 x 4 x 2], index 1 of dimension 0\n",
            slice.display()
        )
    );
    assert!(
        err(&["plot", cube.to_str().unwrap(), "t", "--level", "2"])
            .contains("'t' has extent 2 in dimension 2; --level 2 is outside it")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// An `.npz` archive of `.npy` members written by hand (element types sdflow does not
/// read too: complex, strings, objects).
fn npz_by_hand(path: &std::path::Path, members: &[(&str, &str, &[usize], Vec<u8>)]) {
    npz_by_hand_in(path, members, false);
}

/// [`npz_by_hand`], the members' data column-major (`fortran_order` true) when `fortran`.
fn npz_by_hand_in(
    path: &std::path::Path,
    members: &[(&str, &str, &[usize], Vec<u8>)],
    fortran: bool,
) {
    use std::io::Write;
    let mut w = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, descr, shape, data) in members {
        let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
        let shape = match dims.len() {
            1 => format!("({},)", dims[0]),
            _ => format!("({})", dims.join(", ")),
        };
        let mut header = format!(
            "{{'descr': '{descr}', 'fortran_order': {}, 'shape': {shape}, }}",
            if fortran { "True" } else { "False" }
        );
        header.extend(std::iter::repeat_n(
            ' ',
            (64 - (11 + header.len()) % 64) % 64,
        ));
        header.push('\n');
        let mut npy = b"\x93NUMPY\x01\x00".to_vec();
        npy.extend_from_slice(&(header.len() as u16).to_le_bytes());
        npy.extend_from_slice(header.as_bytes());
        npy.extend_from_slice(data);
        w.start_file(format!("{name}.npy"), opts).unwrap();
        w.write_all(&npy).unwrap();
    }
    w.finish().unwrap();
}

fn f64_bytes(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// `sdflow plot` (in-process) on a thread that must finish within a minute.
fn plot_in_time(
    npz: &std::path::Path,
    field: &str,
    out: &std::path::Path,
) -> Result<String, String> {
    let (npz, field, out) = (npz.to_path_buf(), field.to_string(), out.to_path_buf());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = std::panic::catch_unwind(|| {
            sdflow::cli::plot(&npz, &field, Some(&out), None, None).map_err(|e| e.to_string())
        });
        let _ = tx.send(r);
    });
    match rx.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok(Ok(r)) => r,
        Ok(Err(_)) => panic!("plot panicked"),
        Err(_) => panic!("plot did not finish in a minute"),
    }
}

#[test]
fn plot_draws_any_values_and_names_what_it_cannot_draw() {
    // Was: a panic in the colour map on a constant field of magnitude 2^53 or more or a
    // range wider than the largest float (2-D and 3-D), a hang on the 1-D array
    // [1e308, -1e308], "needs 0 values, got 0" for an empty field, and one member of an
    // unsupported type stopping every other field of the archive from being drawn.
    let dir = std::env::temp_dir().join(format!("sdflow-plotx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let npz = dir.join("x.npz");
    let (max, nan, inf) = (f64::MAX, f64::NAN, f64::INFINITY);
    let big = 2f64.powi(53);
    npz_by_hand(
        &npz,
        &[
            ("const53", "<f8", &[2, 2], f64_bytes(&[big; 4])),
            ("wide", "<f8", &[1, 2], f64_bytes(&[1e308, -1e308])),
            ("line", "<f8", &[2], f64_bytes(&[1e308, -1e308])),
            (
                "extremes",
                "<f8",
                &[4],
                f64_bytes(&[max, -max, 5e-324, 0.0]),
            ),
            (
                "cube",
                "<f8",
                &[2, 2, 2],
                f64_bytes(&[1e300, -1e300, 1e300, -1e300, max, max, max, max]),
            ),
            ("nans", "<f8", &[2, 2], f64_bytes(&[nan; 4])),
            ("infs", "<f8", &[2, 2], f64_bytes(&[inf, -inf, nan, 1.0])),
            ("nan_line", "<f8", &[3], f64_bytes(&[nan, inf, -inf])),
            ("empty", "<f8", &[0, 3], Vec::new()),
            ("cplx", "<c16", &[2], vec![0; 32]),
            ("text", "<U3", &[2], vec![0; 24]),
            ("obj", "|O", &[2], vec![0; 16]),
            ("four", "<f8", &[1, 1, 1, 1], f64_bytes(&[1.0])),
        ],
    );
    let out = dir.join("p.png");
    for field in [
        "const53", "wide", "line", "extremes", "cube", "nans", "infs", "nan_line",
    ] {
        let r = plot_in_time(&npz, field, &out);
        assert!(r.is_ok(), "{field}: {r:?}");
        assert!(png(&out).width() > 100, "{field}");
    }
    let p = npz.display();
    let err = |field: &str| plot_in_time(&npz, field, &out).unwrap_err();
    assert_eq!(
        err("empty"),
        format!("{p}: 'empty' is empty (shape [0, 3]): there is nothing to draw")
    );
    assert_eq!(
        err("cplx"),
        format!(
            "{p}: array 'cplx' has elements of type complex128 (descriptor '<c16'), which sdflow does not read (supported element types: f64, f32, i64, i32, bool)"
        )
    );
    assert_eq!(
        err("text"),
        format!(
            "{p}: array 'text' has elements of type str (descriptor '<U3'), which sdflow does not read (supported element types: f64, f32, i64, i32, bool)"
        )
    );
    assert_eq!(
        err("obj"),
        format!(
            "{p}: array 'obj' has elements of type object (descriptor '|O'), which sdflow does not read (supported element types: f64, f32, i64, i32, bool)"
        )
    );
    assert_eq!(
        err("four"),
        format!(
            "{p}: 'four' has 4 dimension(s) (shape [1, 1, 1, 1]); plot draws arrays of 1, 2 or 3"
        )
    );
    // The binary: no panic, no hang (the case that looped for ever), exit status 0.
    let mut child = Command::new(env!("CARGO_BIN_EXE_sdflow"))
        .args([
            "plot",
            npz.to_str().unwrap(),
            "line",
            "-o",
            out.to_str().unwrap(),
        ])
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > std::time::Duration::from_secs(60) {
            let _ = child.kill();
            panic!("sdflow plot did not finish in a minute");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(status.success());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn plot_reads_a_column_major_array_in_one_pass() {
    // Was: the values of a column-major array (as DaCe and GT4Py write them) were looked
    // up one by one from the start, quadratic in its size: 2.6 s for 32 × 32 × 16,
    // minutes for this one.
    let dir = std::env::temp_dir().join(format!("sdflow-plotf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let npz = dir.join("f.npz");
    let shape = [128usize, 128, 8];
    let n: usize = shape.iter().product();
    let values: Vec<f64> = (0..n).map(|k| (k % 97) as f64).collect();
    npz_by_hand_in(&npz, &[("u", "<f8", &shape, f64_bytes(&values))], true);
    let out = dir.join("u.png");
    let start = std::time::Instant::now();
    let r = plot_in_time(&npz, "u", &out);
    assert_eq!(
        r.unwrap(),
        format!(
            "{}: u [128 x 128 x 8], index 0 of dimension 2",
            out.display()
        )
    );
    assert!(
        start.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
