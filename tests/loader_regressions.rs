//! Inputs the loader fuzzer (`tests/fuzz_loaders.rs`, `docs/fuzzing.md`) found to panic,
//! abort or report badly, reduced to the smallest file that shows it, each loaded the way
//! the `sdflow` tool loads it, with the exact error it must give now. The files live in
//! `tests/fuzz/regressions/`, which the short fuzz run also replays.

use std::path::PathBuf;

use sdflow::cli;
use sdflow::npz::{NpzError, read_npz};
use sdflow::orchestration::load::{self, LoadError};

fn regression(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz/regressions")
        .join(path)
}

/// The importer's error for a DaCe file: (location, message).
fn import_error(file: &str) -> (String, String) {
    match load::load(&regression(file)) {
        Err(LoadError::Import { source, .. }) => (source.location, source.message),
        other => panic!("{file}: expected an import error, got {other:?}"),
    }
}

#[test]
fn scope_dict_naming_a_node_the_state_lacks_is_an_import_error() {
    // Was: `no entry found for key` (exit 101) in the importer, for `import` and `validate`.
    assert_eq!(
        import_error("dace/scope_dict_unknown_id.sdfg"),
        (
            "sdfg 'p' > state 's0' (id 0)".to_string(),
            "scope_dict['-1'] names node '7', which the state does not have".to_string()
        )
    );
    assert_eq!(
        import_error("dace/scope_dict_non_integer_id.sdfg").1,
        "scope_dict['-1'] names node 'x', which the state does not have"
    );
}

#[test]
fn scope_dict_must_list_each_node_once() {
    assert_eq!(
        import_error("dace/scope_dict_node_in_two_scopes.sdfg").1,
        "scope_dict lists node 1 in two scopes ('-1' and '0')"
    );
    assert_eq!(
        import_error("dace/scope_dict_node_in_no_scope.sdfg").1,
        "scope_dict lists no scope for node 1"
    );
    assert_eq!(
        import_error("dace/two_nodes_one_id.sdfg").1,
        "two nodes have the id 0"
    );
    // The same file with a well-formed scope_dict imports and validates.
    let ok = cli::validate(&regression("dace/one_access_node.sdfg")).unwrap();
    assert!(
        ok.ends_with("valid SDFG 'p' (1 states, 0 maps, 0 tasklets)\n"),
        "{ok}"
    );
}

fn npz_error(file: &str) -> String {
    match read_npz(&regression(file)) {
        Err(NpzError::Format { message, .. }) => message,
        other => panic!("{file}: expected a format error, got {other:?}"),
    }
}

#[test]
fn npy_header_claiming_more_data_than_the_archive_holds_is_an_error_not_an_abort() {
    // Was: the reader reserved 8 TB for the declared shape and the process aborted.
    assert_eq!(
        npz_error("npz/hdiff_np.simplified.sdfgz@huge_shape.npz"),
        "array 'u': shape [1000000000000] needs 8000000000000 bytes of data but the array holds 16"
    );
    assert_eq!(
        npz_error("npz/hdiff_np.simplified.sdfgz@huge_header_length.npz"),
        "array 'u': the header length is 4294967280 bytes but only 134 follow"
    );
}

fn text(file: &str) -> String {
    let t = std::fs::read_to_string(regression(file)).unwrap();
    t.split_once('\n').unwrap().1.to_string()
}

#[test]
fn deep_dace_python_is_an_error_not_a_stack_overflow() {
    use sdflow::orchestration::dace::python;
    // Was: a stack overflow (the process aborted) on a 20,000-term chain and on 20,000
    // nested parentheses.
    assert_eq!(
        python::sym(&text("text/python_sym_long_chain.txt")).unwrap_err(),
        "expression nests deeper than 256 levels"
    );
    let e = python::statements(&text("text/python_deep_parens.txt")).unwrap_err();
    assert!(
        e.ends_with("': expression nests deeper than 256 levels"),
        "{e:.80}"
    );
    // Up to the limit is fine.
    let chain = vec!["a"; 200].join(" + ");
    assert_eq!(python::sym(&chain).unwrap().to_string(), "200 * a");
}

#[test]
fn the_deepest_expression_accepted_prints_as_text_that_reads_back() {
    use sdflow::ir::parse::parse_expr;
    // Was: 255 nested `!` parsed, but printed as `!(!(…))`, which nests twice as deep
    // and was refused, so such a program could not be written and read back.
    let t = text("text/expr_255_nots_round_trip.txt");
    let e = parse_expr(&t).unwrap();
    let printed = e.to_string();
    assert!(
        printed.starts_with("!(!(") || printed.starts_with("!!"),
        "{printed:.20}"
    );
    assert_eq!(parse_expr(&printed).unwrap(), e);
}

fn format_error(file: &str) -> (String, String) {
    match load::read(&regression(file)) {
        Err(LoadError::Format { source, .. }) => (source.path, source.message),
        other => panic!("{file}: expected a format error, got {other:?}"),
    }
}

#[test]
fn json_paths_quote_keys_that_are_not_plain_names() {
    // Was: `at arrays.u.v.dtype`, which reads as the field `dtype` of `v` of `u`.
    let (path, message) = format_error("json/key_with_dot_in_serde_path.json");
    assert_eq!(path, r#"arrays["u.v"].dtype"#);
    assert!(message.starts_with("unknown variant `f128`"), "{message}");
    let (path, message) = format_error("json/key_with_bracket_in_format_path.json");
    assert_eq!(path, r#"arrays["a[0]"].shape[0]"#);
    assert!(message.starts_with("bad expression: "), "{message}");
}

#[test]
fn a_zero_extent_beside_a_huge_one_is_an_error_not_a_panic() {
    // Was: `sdflow bench` (and `sdflow run`, on every backend) with NX = 2⁶³ - 1, NY = 0
    // passed the size check (no elements) and the array library panicked making the
    // inputs ("product of non-zero axis lengths overflows isize").
    let file = "bench/tridiagonal.sdfg.json~1~NX=9223372036854775807;NY=0;NZ=8@zero_extent_beside_huge.toml";
    let program = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/tridiagonal.sdfg.json");
    let symbols: Vec<(String, String)> = [("NX", "9223372036854775807"), ("NY", "0"), ("NZ", "8")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let e = sdflow::bench::prepare(
        &program,
        &sdflow::bench::BenchOptions {
            backend: sdflow::codegen::Backend::Cpu,
            reps: 1,
            symbols: symbols.clone(),
            seed: 0,
            inputs: None,
            threads: 1,
            no_opt: false,
            config: Some(regression(file)),
            layout: None,
            cold: false,
        },
    )
    .err()
    .unwrap();
    let want = format!(
        "{}: argument 'a': shape [9223372036854775807, 0, 8] is larger than any array can be (its extents other than 0 multiply past the address space)",
        program.display()
    );
    assert_eq!(e.to_string(), want);
    for backend in [
        sdflow::codegen::Backend::Interp,
        sdflow::codegen::Backend::Cpu,
    ] {
        let opts = cli::RunOptions {
            symbols: symbols.clone(),
            backend,
            ..Default::default()
        };
        assert_eq!(cli::run(&program, &opts).unwrap_err().to_string(), want);
    }
}
