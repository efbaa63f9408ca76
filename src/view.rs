//! `sdflow view`: one self-contained HTML page to explore a program offline — the
//! control flow first, a click on a state opens its dataflow (maps collapsed), a click on
//! a map opens its body; a search box highlights every access to a container and lists
//! the states that touch it; the optimizer's report beside it when given.
//!
//! The drawings are laid out by Graphviz (`dot`, or `$SDFLOW_DOT`) when it is installed,
//! in parallel, and embedded as SVG. Without it the page shows the same structure as
//! nested lists and says why. Nothing is fetched when the page is viewed: its script,
//! style and data are in the file.

use std::path::Path;

use rayon::prelude::*;
use serde_json::{Value, json};

use sdflow_ir::control::Block;
use sdflow_ir::dot;
use sdflow_ir::{Node, Sdfg};

use crate::cli::{CliError, load_program, render_svg, write_output};

const PAGE: &str = include_str!("view.html");

/// Whether Graphviz's `dot` can be run; the reason when not.
fn graphviz() -> Result<(), String> {
    let program = std::env::var("SDFLOW_DOT").unwrap_or_else(|_| "dot".to_string());
    match std::process::Command::new(&program).arg("-V").output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "'{program} -V' failed ({}); the drawings are lists",
            o.status
        )),
        Err(e) => Err(format!(
            "Graphviz's '{program}' could not be run ({e}); the drawings are lists (install Graphviz for pictures)"
        )),
    }
}

/// The SVG element of `dot`'s output (without the XML prolog and doctype), or the reason
/// it could not be drawn.
fn svg(dot_text: &str) -> Result<String, String> {
    let bytes = render_svg(dot_text).map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&bytes);
    let start = text.find("<svg").ok_or("Graphviz gave no SVG")?;
    Ok(text[start..].to_string())
}

/// `value` as JSON: the SVG text, or `null` and the reason in `problem`.
fn drawing(r: Result<String, String>) -> (Value, Value) {
    match r {
        Ok(s) => (Value::String(s), Value::Null),
        Err(e) => (Value::Null, Value::String(e)),
    }
}

fn control(b: &Block) -> Value {
    match b {
        Block::State(s) => json!({"kind": "state", "index": s.0}),
        Block::Seq(items) => {
            json!({"kind": "seq", "items": items.iter().map(control).collect::<Vec<_>>()})
        }
        Block::Loop(l) => json!({
            "kind": "loop",
            "text": format!("for {v} = {}; {}; {v} = {}", l.init, l.cond, l.update, v = l.var),
            "body": control(&l.body),
        }),
        Block::If(i) => json!({
            "kind": "if",
            "text": format!("if {}", i.cond),
            "then": control(&i.then),
            "else": control(&i.otherwise),
        }),
        Block::Assign(a) => json!({
            "kind": "assign",
            "text": a.iter().map(|(k, v)| format!("{k} = {v}")).collect::<Vec<_>>().join(", "),
        }),
    }
}

/// The page for `sdfg`, with `report` (the optimizer's report text) when given.
pub fn page(sdfg: &Sdfg, report: Option<&str>) -> String {
    let views = dot::views(sdfg);
    let problem = graphviz().err();
    let draw = |text: &String| -> Result<String, String> {
        match &problem {
            Some(p) => Err(p.clone()),
            None => svg(text),
        }
    };
    // Every drawing laid out at once, in parallel (one `dot` process each).
    let mut texts: Vec<&String> = vec![&views.overview];
    texts.extend(&views.states);
    texts.extend(views.maps.iter().map(|(_, t)| t));
    let mut svgs: Vec<Result<String, String>> = texts.par_iter().map(|t| draw(t)).collect();
    let map_svgs = svgs.split_off(1 + views.states.len());
    let state_svgs = svgs.split_off(1);
    let overview = svgs.pop().unwrap_or_else(|| Err("no drawing".into()));

    let mut containers: std::collections::BTreeMap<&str, Vec<usize>> = Default::default();
    let mut states = Vec::new();
    for (i, (st, svg)) in sdfg.states.iter().zip(state_svgs).enumerate() {
        let mut touched: Vec<&str> = Vec::new();
        st.graph.for_each_accessed(&mut |d| touched.push(d));
        touched.sort_unstable();
        touched.dedup();
        for d in &touched {
            containers.entry(d).or_default().push(i);
        }
        let maps: Vec<Value> = st
            .graph
            .node_ids()
            .into_iter()
            .filter_map(|n| match st.graph.node(n) {
                Node::Map(m) => {
                    let (head, counts) = dot::map_summary(m);
                    Some(json!({"key": format!("s{i}_n{}", n.index()), "head": head, "counts": counts}))
                }
                _ => None,
            })
            .collect();
        let (svg, why) = drawing(svg);
        states.push(json!({
            "index": i,
            "name": st.name,
            "summary": dot::state_summary(&st.graph),
            "maps": maps,
            "containers": touched,
            "svg": svg,
            "problem": why,
        }));
    }
    let mut maps = serde_json::Map::new();
    for ((key, _), svg) in views.maps.iter().zip(map_svgs) {
        let (svg, why) = drawing(svg);
        maps.insert(key.clone(), json!({"svg": svg, "problem": why}));
    }
    let (overview, overview_problem) = drawing(overview);
    let css: serde_json::Map<String, Value> = containers
        .keys()
        .map(|k| (k.to_string(), Value::String(dot::css_name(k))))
        .collect();
    let data = json!({
        "name": sdfg.name,
        "overview": overview,
        "problem": overview_problem,
        "control": control(&sdfg.body),
        "states": states,
        "maps": maps,
        "containers": containers,
        "css": css,
        "report": report,
    });
    // Inside a <script> element: no "</" may end it early.
    let data = data.to_string().replace("</", "<\\/");
    // The title is in the part before the data; the data is put in last, whole.
    let (head, tail) = PAGE.split_once("__SDFLOW_DATA__").unwrap_or((PAGE, ""));
    let mut html = head.replace("__SDFLOW_TITLE__", &html_escape(&sdfg.name));
    html.push_str(&data);
    html.push_str(tail);
    html
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// `sdflow view FILE -o OUT.html [--report REPORT]`: writes the page; returns a line
/// for the terminal.
pub fn view(path: &Path, out: &Path, report: Option<&Path>) -> Result<String, CliError> {
    let sdfg = load_program(path)?;
    let report = match report {
        Some(r) => Some(std::fs::read_to_string(r).map_err(|source| CliError::Io {
            path: r.display().to_string(),
            source,
        })?),
        None => None,
    };
    let html = page(&sdfg, report.as_deref());
    write_output(out, html.as_bytes())?;
    let how = match graphviz() {
        Ok(()) => "drawings laid out by Graphviz".to_string(),
        Err(why) => why,
    };
    Ok(format!(
        "{}: {} states, {} KiB ({how})",
        out.display(),
        sdfg.states.len(),
        html.len() / 1024
    ))
}
