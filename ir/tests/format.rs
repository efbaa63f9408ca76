//! The JSON format: canonical example, round trips, broken files, mutations.

use std::path::PathBuf;

use proptest::prelude::*;
use sdflow_ir::format::{FORMAT_VERSION, FormatError, LoadError, from_json, load, to_json};
use sdflow_ir::{Block, DType, Sdfg, SdfgBuilder, Value};

fn in_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/in")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(in_dir().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

#[test]
fn example_loads_validates_and_is_canonical() {
    let text = read("format_example.sdfg.json");
    let sdfg = load(&text).expect("the documented example loads and validates");
    assert_eq!(sdfg.name, "laplace");
    assert_eq!(sdfg.arg_order, vec!["u".to_string(), "out".to_string()]);
    assert_eq!(sdfg.states.len(), 1);
    assert_eq!(sdfg.states[0].graph.node_count(), 5);
    assert!(matches!(&sdfg.body, Block::Loop(l) if l.var == "t"));
    assert_eq!(to_json(&sdfg), text);
}

#[test]
fn short_hand_written_file_gets_defaults() {
    let text = r#"{ "sdflow_format": 1, "name": "h",
        "symbols": { "N": { "dtype": "i64" }, "K": { "dtype": "i32", "value": 10 },
                     "a": { "dtype": "f32", "value": 0.5 }, "z": { "dtype": "f64", "value": "-inf" } },
        "arrays": { "u": { "dtype": "f64", "shape": ["N", 4] },
                    "w": { "dtype": "f32", "shape": [3, "N"], "strides": [1, 3], "storage": "device", "transient": true },
                    "flag": { "scalar": "bool" } },
        "states": [ { "name": "s", "nodes": [ { "access": "u" }, { "access": "w" },
                       { "reduce": { "op": "max", "axes": [0], "identity": "2.0f32" } } ],
                      "edges": [ { "src": 0, "dst": 1, "memlet": "u[0:3, 0]", "other": "0:3, 1", "wcr": "sum" },
                                 { "src": 1, "dst": 2, "dst_conn": "in", "memlet": "w[0:3, 0:N]" } ] } ],
        "body": { "seq": [ { "assign": { "q": "N", "b": "q + 1" } },
                           { "if": { "cond": "flag", "then": { "state": 0 } } } ] } }"#;
    let s = from_json(text).expect("reads");
    let u = s.arrays["u"].as_array().expect("array");
    assert_eq!(u.strides[0].to_string(), "4");
    assert!(!u.transient);
    let w = s.arrays["w"].as_array().expect("array");
    assert_eq!(w.strides[1].as_int(), Some(3));
    assert_eq!(w.storage, sdflow_ir::Storage::Device);
    assert_eq!(s.symbols["K"].value, Some(Value::I32(10)));
    assert_eq!(s.symbols["a"].value, Some(Value::F32(0.5)));
    assert_eq!(s.symbols["z"].value, Some(Value::F64(f64::NEG_INFINITY)));
    assert_eq!(s.arrays["flag"].dtype(), DType::Bool);
    match &s.body {
        Block::Seq(bs) => {
            // Assignment order is kept, not sorted.
            assert!(matches!(&bs[0], Block::Assign(a) if a[0].0 == "q" && a[1].0 == "b"));
            assert!(matches!(&bs[1], Block::If(i) if *i.otherwise == Block::empty()));
        }
        b => panic!("unexpected body {b:?}"),
    }
    let (_, edges) = s.states[0].graph.compacted();
    assert_eq!(edges[0].2.memlet.wcr, Some(sdflow_ir::Wcr::Sum));
    assert_eq!(
        edges[0]
            .2
            .memlet
            .other_subset
            .as_ref()
            .map(|o| o.to_string()),
        Some("0:3, 1".to_string())
    );
    let again = from_json(&to_json(&s)).expect("round trip");
    assert_eq!(again, s);
    let out = to_json(&s);
    assert!(
        out.contains("\"strides\""),
        "non-row-major strides are written"
    );
    assert_eq!(
        out.matches("\"strides\"").count(),
        1,
        "row-major strides are not"
    );
    assert!(out.contains("\"value\": \"-inf\""));
}

#[test]
fn builder_program_round_trips_with_holes() {
    let mut b = SdfgBuilder::new("holes");
    b.symbol("N", DType::I64)
        .array("a", DType::F64, ["N"])
        .array("b", DType::F64, ["N"]);
    b.state("s", |s| {
        s.map("m", &["i"], &["0:N"], |m| {
            m.tasklet("t", &[("x", "a[i]")], &[("y", "b[i]")], "y = x * 2.0");
        });
    });
    let mut s = b.build();
    // A default value travels with its symbol.
    s.symbols.get_mut("N").unwrap().default = Some(7);
    // Leave a hole in the node indices.
    let g = &mut s.states[0].graph;
    let extra = g.add_access("a");
    g.graph.remove_node(extra);
    let text = to_json(&s);
    let back = from_json(&text).expect("reads");
    assert_eq!(back, s);
    assert_eq!(back.symbol_default("N"), Some(7));
    assert!(text.contains(r#""default":7"#) || text.contains(r#""default": 7"#));
    assert_eq!(to_json(&back), text);
    assert_eq!(Sdfg::from_json(&s.to_json()).expect("reads"), s);
}

/// Each broken file and a piece of the error it must give (path or element named).
const BROKEN: &[(&str, &str)] = &[
    ("malformed.json", "malformed JSON: EOF while parsing"),
    ("truncated.json", "malformed JSON"),
    (
        "wrong_version.json",
        "unsupported sdflow_format 2 (this build reads 1)",
    ),
    (
        "missing_version.json",
        "missing sdflow_format (this build reads 1)",
    ),
    ("version_string.json", "unsupported sdflow_format \"1\""),
    ("unknown_field.json", "unknown field `arays`"),
    ("unknown_top_field.json", "unknown field `extra`"),
    (
        "bad_dtype.json",
        "at arrays.u.dtype: unknown variant `f128`",
    ),
    (
        "bad_shape_expr.json",
        "at arrays.u.shape[0]: bad expression",
    ),
    (
        "bad_tasklet_code.json",
        "at states[0].nodes[1].tasklet.code[0]: bad statement",
    ),
    (
        "edge_missing_node.json",
        "at states[0].edges[0].dst: node 5 does not exist",
    ),
    (
        "negative_index.json",
        "at states[0].edges[0].src: invalid value: integer `-1`",
    ),
    (
        "bad_memlet.json",
        "at states[0].edges[0].memlet: bad memlet",
    ),
    ("string_for_node.json", "at states[0].nodes[0]"),
    (
        "string_for_object.json",
        "at symbols: invalid type: string \"N\"",
    ),
    (
        "bad_range.json",
        "at states[0].nodes[0].map.ranges[0]: bad range",
    ),
    ("params_ranges_mismatch.json", "1 ranges for 2 params"),
    (
        "bad_symbol_value.json",
        "at symbols.K.value: expected a i32 literal",
    ),
    (
        "float_symbol_default.json",
        "at symbols.F.default: a default value is for integer symbols, not f64",
    ),
    (
        "bad_loop_update.json",
        "at body.loop.update: bad expression",
    ),
    (
        "bad_reduce_identity.json",
        "at states[0].nodes[0].reduce.identity: expected a literal",
    ),
    ("scalar_with_shape.json", "at arrays.s.shape: a scalar"),
    (
        "array_without_shape.json",
        "at arrays.u: an array needs 'shape'",
    ),
    ("not_an_object.json", "an SDFG document is a JSON object"),
    ("duplicate_assign.json", "'t' is assigned twice"),
    (
        "nested_with_version.json",
        "states[0].nodes[0].nested.sdfg.sdflow_format",
    ),
];

#[test]
fn broken_files_name_what_and_where() {
    let dir = in_dir().join("broken");
    let mut listed: Vec<&str> = BROKEN.iter().map(|(f, _)| *f).collect();
    listed.sort();
    let mut present: Vec<String> = std::fs::read_dir(&dir)
        .expect("corpus directory")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    present.sort();
    assert_eq!(present, listed, "every broken file has an expectation");
    for (file, expected) in BROKEN {
        let text = read(&format!("broken/{file}"));
        let err: FormatError = from_json(&text).expect_err(file);
        let msg = err.to_string();
        assert!(msg.contains(expected), "{file}: {msg:?} lacks {expected:?}");
        assert!(matches!(load(&text), Err(LoadError::Format(e)) if e == err));
    }
}

#[test]
fn undefined_array_is_well_formed() {
    // The format itself accepts it; validation rejects it (next test).
    let s = from_json(&read("invalid/undefined_array.sdfg.json")).expect("well-formed");
    assert_eq!(s.states[0].graph.node_count(), 2);
}

#[test]
fn undefined_array_fails_validation() {
    match load(&read("invalid/undefined_array.sdfg.json")) {
        Err(LoadError::Invalid(problems)) => assert!(
            problems.iter().any(|p| p.to_string().contains("ghost")),
            "{problems:?}"
        ),
        other => panic!("expected an invalid program, got {other:?}"),
    }
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    let deep = format!(
        "{{\"sdflow_format\": 1, \"name\": \"d\", \"body\": {}{}}}",
        "{\"seq\": [".repeat(5000),
        "]}".repeat(5000)
    );
    let e = from_json(&deep).expect_err("too deep");
    assert!(e.message.contains("recursion limit"), "{e}");
    // Just under the limit still works.
    let n = 60;
    let ok = format!(
        "{{\"sdflow_format\": 1, \"name\": \"d\", \"body\": {}{}}}",
        "{\"seq\": [".repeat(n),
        "]}".repeat(n)
    );
    let s = from_json(&ok).expect("within the limit");
    assert_eq!(from_json(&to_json(&s)).expect("round trip"), s);
    assert_eq!(FORMAT_VERSION, 1);
}

/// Replaces the `k`-th value (in a depth-first walk) by `with`.
fn replace_nth(v: &mut serde_json::Value, k: &mut usize, with: &serde_json::Value) -> bool {
    if *k == 0 {
        *v = with.clone();
        return true;
    }
    *k -= 1;
    match v {
        serde_json::Value::Array(a) => a.iter_mut().any(|x| replace_nth(x, k, with)),
        serde_json::Value::Object(o) => o.values_mut().any(|x| replace_nth(x, k, with)),
        _ => false,
    }
}

fn corpus() -> Vec<String> {
    #[cfg_attr(not(feature = "testkit"), allow(unused_mut))]
    let mut v = vec![read("format_example.sdfg.json")];
    #[cfg(feature = "testkit")]
    for seed in 0..4 {
        v.push(to_json(&sdflow_ir::testkit::generate(
            seed,
            &sdflow_ir::testkit::GenConfig::default(),
        )));
    }
    v
}

proptest! {
    #[test]
    fn byte_mutations_never_panic(which in 0usize..5, ops in prop::collection::vec((0u8..3, any::<usize>(), any::<u8>()), 1..8)) {
        let files = corpus();
        let mut bytes = files[which % files.len()].clone().into_bytes();
        for (op, pos, b) in ops {
            if bytes.is_empty() { break; }
            let p = pos % bytes.len();
            match op {
                0 => bytes[p] = b,
                1 => bytes.truncate(p),
                _ => { bytes.remove(p); }
            }
        }
        let text = String::from_utf8_lossy(&bytes);
        let _ = from_json(&text);
        let _ = load(&text);
    }

    #[test]
    fn structural_mutations_never_panic(which in 0usize..5, at in 0usize..4000, kind in 0usize..14) {
        let files = corpus();
        let mut v: serde_json::Value = serde_json::from_str(&files[which % files.len()]).expect("valid");
        let with = [
            serde_json::json!(null),
            serde_json::json!(-1),
            serde_json::json!(4294967296u64),
            serde_json::json!("x +"),
            serde_json::json!([]),
            serde_json::json!({}),
            serde_json::json!(true),
            serde_json::json!({"seq": [{"state": 99}]}),
            // Well-formed text that validation must judge without panicking.
            serde_json::json!("N // 0"),
            serde_json::json!("i * i - 9223372036854775807"),
            serde_json::json!("0:0:0"),
            serde_json::json!("u[i, j, k, l]"),
            serde_json::json!("tbl[i]"),
            serde_json::json!("o = o + undefined_name"),
        ][kind].clone();
        let mut k = at;
        replace_nth(&mut v, &mut k, &with);
        let text = v.to_string();
        if let Ok(s) = from_json(&text) {
            // Whatever is accepted can be validated, drawn and counted without a panic,
            // and writes back and reads back the same.
            let _ = s.validate();
            let _ = sdflow_ir::dot::to_dot(&s);
            let _ = s.stats();
            prop_assert_eq!(from_json(&to_json(&s)).expect("round trip"), s);
        }
    }
}

#[cfg(feature = "testkit")]
mod generated {
    use super::*;
    use sdflow_ir::testkit::{GenConfig, arb_sdfg};

    proptest! {
        #[test]
        fn generated_programs_round_trip(s in arb_sdfg(GenConfig::default())) {
            let text = to_json(&s);
            let back = from_json(&text).expect("reads what it writes");
            prop_assert_eq!(&back, &s);
            prop_assert_eq!(to_json(&back), text);
        }
    }
}

/// Static float values keep every bit through the JSON text: `1.2335884945043185` once
/// came back as `…183` (JSON numbers were parsed to the nearest float only roughly).
#[test]
fn static_float_values_round_trip_bit_for_bit() {
    let mut s: u64 = 0x2545_f491_4f6c_dd1d;
    for k in 0..2000 {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let v = match k % 3 {
            0 => 1.2335884945043185,
            1 => f64::from_bits(s >> 2 | 0x3000_0000_0000_0000),
            _ => (s >> 11) as f64 / (1u64 << 53) as f64 * 3.0,
        };
        let mut b = SdfgBuilder::new("f");
        b.static_symbol("c", Value::F64(v));
        let p = b.build();
        let q = from_json(&to_json(&p)).unwrap();
        assert_eq!(
            q.symbols["c"].value.map(|x| x.as_f64().to_bits()),
            Some(v.to_bits()),
            "{v:e}"
        );
    }
}
