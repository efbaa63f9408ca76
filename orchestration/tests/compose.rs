//! A sequence of program calls composed into one program (`compose`): the composed program
//! computes what the calls compute one after another, before and after optimization, and
//! what does not fit is an error naming the call.

use std::collections::BTreeMap;

use sdflow_ir::interp::{Bindings, HostArray, run};
use sdflow_ir::{Array, DType, DataDesc, Sdfg, SymExpr, Value};
use sdflow_orchestration::compose::{Step, StepCall, compose};
use sdflow_transforms::Pipeline;

fn laplace() -> Sdfg {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/laplace.sdfg.json"
    ))
    .unwrap();
    sdflow_ir::format::from_json(&text).unwrap()
}

fn field(n: &str) -> (String, DataDesc) {
    let m = SymExpr::sym("M");
    (
        n.to_string(),
        DataDesc::Array(Array::new(DType::F64, vec![m.clone(), m])),
    )
}

fn call(u: &str, out: &str) -> StepCall {
    StepCall {
        sdfg: laplace(),
        data: [("u", u), ("out", out)]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        symbols: [("N".to_string(), SymExpr::sym("M"))].into_iter().collect(),
    }
}

/// `lap(a) -> b; lap(b) -> c`.
fn step() -> Step {
    Step {
        name: "twice".into(),
        data: vec![field("a"), field("b"), field("c")],
        symbols: vec![("M".into(), DType::I64)],
        calls: vec![call("a", "b"), call("b", "c")],
    }
}

fn inputs(m: usize) -> Vec<f64> {
    (0..m * m).map(|i| ((i * 37 % 101) as f64).sin()).collect()
}

fn bindings(arrays: &[(&str, Vec<f64>)], symbols: &[(&str, i64)], m: usize) -> Bindings {
    Bindings {
        arrays: arrays
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    HostArray::from_f64(&[m, m], v.clone()).unwrap(),
                )
            })
            .collect(),
        symbols: symbols
            .iter()
            .map(|(k, v)| (k.to_string(), Value::I64(*v)))
            .collect::<BTreeMap<_, _>>(),
    }
}

#[test]
fn a_composed_step_computes_what_its_calls_compute_in_order() {
    let m = 9;
    let a = inputs(m);
    // The calls one after another.
    let mut first = bindings(
        &[("u", a.clone()), ("out", vec![0.0; m * m])],
        &[("N", m as i64)],
        m,
    );
    run(&laplace(), &mut first).unwrap();
    let b = first.arrays["out"].to_f64_vec();
    let mut second = bindings(
        &[("u", b.clone()), ("out", vec![0.0; m * m])],
        &[("N", m as i64)],
        m,
    );
    run(&laplace(), &mut second).unwrap();
    let c = second.arrays["out"].to_f64_vec();
    assert!(c.iter().any(|x| *x != 0.0));

    let composed = compose(&step()).unwrap();
    assert_eq!(composed.states.len(), 2);
    assert_eq!(composed.arguments()[..3], ["a", "b", "c"]);
    let zeros = vec![0.0; m * m];
    let args = [("a", a.clone()), ("b", zeros.clone()), ("c", zeros)];
    let mut one = bindings(&args, &[("M", m as i64)], m);
    run(&composed, &mut one).unwrap();
    assert_eq!(one.arrays["b"].to_f64_vec(), b);
    assert_eq!(one.arrays["c"].to_f64_vec(), c);

    // Optimized: the callees inlined and the two stencils fused, the same numbers.
    let mut opt = composed.clone();
    let report = Pipeline::cpu().run(&mut opt).unwrap();
    assert!(report.to_string().contains("nested_inlined=2"), "{report}");
    assert_eq!(opt.stats().nested, 0);
    let mut fused = bindings(&args, &[("M", m as i64)], m);
    run(&opt, &mut fused).unwrap();
    assert_eq!(fused.arrays["b"].to_f64_vec(), b);
    assert_eq!(fused.arrays["c"].to_f64_vec(), c);
}

fn error_of(step: &Step) -> String {
    compose(step).unwrap_err().to_string()
}

#[test]
fn what_does_not_fit_is_an_error_naming_the_call() {
    let mut s = step();
    s.calls[1].data.remove("u");
    assert_eq!(
        error_of(&s),
        "program 'twice': call 1 ('laplace'): argument 'u' is not bound to a container"
    );

    let mut s = step();
    s.calls[0].data.insert("out".into(), "d".into());
    assert_eq!(
        error_of(&s),
        "program 'twice': call 0 ('laplace'): argument 'out' is bound to 'd', which is no container of the step"
    );

    let mut s = step();
    s.data[1] = (
        "b".into(),
        DataDesc::Array(Array::new(
            DType::F32,
            vec![SymExpr::sym("M"), SymExpr::sym("M")],
        )),
    );
    assert_eq!(
        error_of(&s),
        "program 'twice': call 0 ('laplace'): argument 'out' is f64, the step's 'b' is f32"
    );

    let mut s = step();
    s.data[0] = (
        "a".into(),
        DataDesc::Array(Array::new(DType::F64, vec![SymExpr::sym("M")])),
    );
    assert_eq!(
        error_of(&s),
        "program 'twice': call 0 ('laplace'): argument 'u' has 2 dimension(s), the step's 'a' has 1"
    );

    let mut s = step();
    s.calls[0].symbols.clear();
    assert_eq!(
        error_of(&s),
        "program 'twice': call 0 ('laplace'): symbol 'N' has no value"
    );

    let mut s = step();
    s.calls[1].symbols.insert("N".into(), SymExpr::sym("K"));
    assert_eq!(
        error_of(&s),
        "program 'twice': call 1 ('laplace'): the value of symbol 'N' reads 'K', which is no symbol of the step"
    );

    let mut s = step();
    s.calls[0].symbols.insert("Q".into(), SymExpr::from(3));
    assert_eq!(
        error_of(&s),
        "program 'twice': call 0 ('laplace'): 'Q' is no symbol of the program"
    );

    let mut s = step();
    s.calls[0].data.insert("v".into(), "a".into());
    assert_eq!(
        error_of(&s),
        "program 'twice': call 0 ('laplace'): 'v' is no container of the program"
    );
}

/// `lap(a) -> b; lap(b) -> c` with `b` the step's scratch: a transient of constant
/// extents, not an argument; `c` is the same, optimized or not.
#[test]
fn a_scratch_container_is_a_transient_of_the_step() {
    let m = 9;
    let mut s = step();
    let mut b = Array::new(DType::F64, vec![SymExpr::from(m as i64); 2]);
    b.transient = true;
    s.data[1] = ("b".into(), DataDesc::Array(b.clone()));
    let composed = compose(&s).unwrap();
    assert!(!composed.arguments().contains(&"b".to_string()));
    assert!(composed.arrays["b"].transient());

    let full = compose(&step()).unwrap();
    let zeros = vec![0.0; m * m];
    let mut want = bindings(
        &[("a", inputs(m)), ("b", zeros.clone()), ("c", zeros.clone())],
        &[("M", m as i64)],
        m,
    );
    run(&full, &mut want).unwrap();
    let args = [("a", inputs(m)), ("c", zeros)];
    for optimized in [false, true] {
        let mut p = composed.clone();
        if optimized {
            Pipeline::cpu().run(&mut p).unwrap();
        }
        let mut got = bindings(&args, &[("M", m as i64)], m);
        run(&p, &mut got).unwrap();
        assert_eq!(
            got.arrays["c"].to_f64_vec(),
            want.arrays["c"].to_f64_vec(),
            "optimized: {optimized}"
        );
        assert!(!got.arrays.contains_key("b"));
    }

    // A transient's extents are constants.
    b.shape = vec![SymExpr::sym("M"), SymExpr::sym("M")];
    s.data[1] = ("b".into(), DataDesc::Array(b));
    assert_eq!(
        error_of(&s),
        "program 'twice': transient container 'b' has the extent or stride 'M'; a step's transients have constant ones"
    );
}

/// A callee argument the callee neither reads nor writes (GT4Py keeps such arguments,
/// e.g. `nudgecoeff_e` of `apply_diffusion_to_vn` when the grid is not a limited area)
/// gets no connector, bound or not, and leaves the callee's copy: the interpreter runs
/// the composed step (it requires every argument a nested SDFG declares to be bound).
#[test]
fn an_argument_the_callee_does_not_use_leaves_the_call() {
    let m = 7;
    let mut unused = laplace();
    let (name, desc) = field("spare");
    unused.arrays.insert(name.clone(), desc);
    unused.arg_order.push(name);
    for bound in [false, true] {
        let mut s = step();
        s.calls[0].sdfg = unused.clone();
        s.data.push(field("d"));
        if bound {
            s.calls[0].data.insert("spare".into(), "d".into());
        }
        let composed = compose(&s).unwrap();
        let sdflow_ir::Node::Nested(ns) = composed.states[0]
            .graph
            .node_ids()
            .into_iter()
            .map(|n| composed.states[0].graph.node(n))
            .find(|n| matches!(n, sdflow_ir::Node::Nested(_)))
            .unwrap()
        else {
            unreachable!()
        };
        assert!(!ns.sdfg.arrays.contains_key("spare"));
        assert!(!ns.sdfg.arg_order.contains(&"spare".to_string()));
        let a = inputs(m);
        let zeros = vec![0.0; m * m];
        let args = [
            ("a", a.clone()),
            ("b", zeros.clone()),
            ("c", zeros.clone()),
            ("d", zeros.clone()),
        ];
        let mut got = bindings(&args, &[("M", m as i64)], m);
        run(&composed, &mut got).unwrap();
        let mut want = bindings(&args[..3], &[("M", m as i64)], m);
        run(&compose(&step()).unwrap(), &mut want).unwrap();
        assert_eq!(got.arrays["c"].to_f64_vec(), want.arrays["c"].to_f64_vec());
        assert!(got.arrays["c"].to_f64_vec().iter().any(|x| *x != 0.0));
    }
}
