//! `sdflow view`: the page's data, its fallback without Graphviz, and the page itself in a
//! real browser (headless Chromium from the system's packages, when installed: the test
//! says when it is skipped). The page's own `#selftest` opens the overview, clicks a
//! state and a map and searches a container, as a person would, and writes the outcome
//! into the body's `data-selftest` attribute, which `--dump-dom` shows.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn tmp(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("view");
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// Writes the page of `example` (with `SDFLOW_DOT` set to `dot` when given).
fn view(example: &str, out: &Path, dot: Option<&str>) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sdflow"));
    cmd.args([
        "view",
        &format!("examples/{example}.sdfg.json"),
        "-o",
        out.to_str().unwrap(),
    ])
    .current_dir(root());
    if let Some(d) = dot {
        cmd.env("SDFLOW_DOT", d);
    }
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

/// The JSON the page carries.
fn data(html: &str) -> serde_json::Value {
    let start = html
        .find(r#"<script type="application/json" id="data">"#)
        .unwrap();
    let rest = &html[start..];
    let body = &rest[rest.find('>').unwrap() + 1..rest.find("</script>").unwrap()];
    serde_json::from_str(&body.replace("<\\/", "</")).unwrap()
}

fn have_graphviz() -> bool {
    Command::new("dot")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn the_page_carries_every_state_map_and_container() {
    let out = tmp("dycore.html");
    let msg = view("dycore", &out, None);
    assert!(msg.contains("122 states"), "{msg}");
    let html = std::fs::read_to_string(&out).unwrap();
    assert!(html.contains("<title>sdflow: dycore</title>"));
    // Nothing is fetched when the page is viewed.
    for remote in ["http://", "https://", "src=\"//"] {
        assert!(
            !html.contains(&format!("<script src=\"{remote}")) && !html.contains("<link "),
            "the page loads something: {remote}"
        );
    }
    let d = data(&html);
    let states = d["states"].as_array().unwrap();
    assert_eq!(states.len(), 122);
    assert_eq!(states[0]["name"], "copy_state");
    assert_eq!(
        states[0]["summary"],
        "1 map; 1 tasklet in all\nreads h, qh, u, v\nwrites hs, qhs, us, vs"
    );
    // One map at the top of each state (`sdflow stats` counts 130 with those in bodies),
    // each with the drawing of its body.
    let maps: usize = states
        .iter()
        .map(|s| s["maps"].as_array().unwrap().len())
        .sum();
    assert_eq!(maps, 122);
    assert_eq!(d["maps"].as_object().unwrap().len(), 122);
    // `h` is touched by the states that copy, halo-exchange and update it.
    let h: Vec<u64> = d["containers"]["h"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert!(h.contains(&0) && h.len() > 5, "{h:?}");
    if have_graphviz() {
        assert!(d["overview"].as_str().unwrap().starts_with("<svg"));
        assert!(
            d["overview"]
                .as_str()
                .unwrap()
                .contains(r#"id="state&#45;0" class="node state""#)
        );
        let s0 = states[0]["svg"].as_str().unwrap();
        assert!(
            s0.contains(r#"class="node map""#) && s0.contains("acc&#45;h"),
            "{s0}"
        );
    } else {
        eprintln!("Graphviz is not installed: the SVG checks are skipped");
    }
}

#[test]
fn without_graphviz_the_page_says_so_and_lists_the_structure() {
    let out = tmp("nodot.html");
    let msg = view("hyperdiffusion", &out, Some("sdflow-no-such-dot"));
    assert!(
        msg.contains("Graphviz's 'sdflow-no-such-dot' could not be run"),
        "{msg}"
    );
    let d = data(&std::fs::read_to_string(&out).unwrap());
    assert!(d["overview"].is_null());
    assert!(
        d["problem"]
            .as_str()
            .unwrap()
            .contains("the drawings are lists")
    );
    assert_eq!(d["control"]["kind"], "state");
}

/// Headless Chromium, as Debian packages it, or `$SDFLOW_CHROMIUM`.
fn chromium() -> Option<PathBuf> {
    let candidates = std::env::var("SDFLOW_CHROMIUM")
        .ok()
        .into_iter()
        .chain(["/usr/bin/chromium", "/usr/bin/chromium-browser"].map(String::from));
    candidates.map(PathBuf::from).find(|p| p.exists())
}

/// The page's `<body …>` tag after its `#selftest` ran in the browser.
fn selftest_in_browser(browser: &Path, page: &Path) -> String {
    let profile = tmp(&format!(
        "profile-{}",
        page.file_stem().unwrap().to_string_lossy()
    ));
    let o = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            &format!("--user-data-dir={}", profile.display()),
            "--virtual-time-budget=10000",
            "--dump-dom",
            &format!("file://{}#selftest", page.display()),
        ])
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&o.stdout).to_string();
    let start = dom.find("<body").unwrap_or_else(|| {
        panic!(
            "no DOM from the browser: {}",
            String::from_utf8_lossy(&o.stderr)
        )
    });
    dom[start..start + dom[start..].find('>').unwrap() + 1].to_string()
}

#[test]
fn the_page_works_in_a_real_browser() {
    let Some(browser) = chromium() else {
        eprintln!(
            "skipped: no Chromium (install Debian's chromium, or set SDFLOW_CHROMIUM); .ci/run installs it"
        );
        return;
    };
    let with = tmp("browser-dycore.html");
    view("dycore", &with, None);
    let without = tmp("browser-nodot.html");
    view("dycore", &without, Some("sdflow-no-such-dot"));
    for page in [&with, &without] {
        let body = selftest_in_browser(&browser, page);
        assert!(
            body.starts_with(r#"<body data-selftest="ok (opened state 0, map s0_n0)""#),
            "{}: {body}",
            page.display()
        );
        assert!(!body.contains("data-errors"), "script errors: {body}");
    }
}
