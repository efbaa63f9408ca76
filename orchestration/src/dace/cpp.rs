//! C++ tasklets: sdflow runs no C++, but recognises the timer tasklets GT4Py's metrics
//! instrumentation puts into its final SDFGs (`gt_start_timer`, `gt_stop_timer`, guarded
//! by `gt_metrics_level >= 10`) and gives them the same meaning with `wall_ns()`. Any
//! other C++ is refused.

use sdflow_ir::{BinOp, DType, Expr, MathFn, Stmt, Value};

/// The code without comments and whitespace.
fn canonical(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(i) = rest.find("/*") {
        out.push_str(&rest[..i]);
        rest = rest[i + 2..].split_once("*/").map_or("", |(_, r)| r);
    }
    out.push_str(rest);
    out.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<String>()
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect()
}

const NOW: &str = "autonow=std::chrono::high_resolution_clock::now();";
const NS: &str =
    "std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();";

/// The statements of a GT4Py timer tasklet with these connectors, or `None`.
pub(super) fn gt4py_timer(code: &str, inputs: &[String], outputs: &[String]) -> Option<Vec<Stmt>> {
    let c = canonical(code);
    let clock = || Expr::Call(MathFn::WallNs, vec![]);
    match (inputs, outputs) {
        ([], [t]) if c == format!("{NOW}{t}={NS}") => Some(vec![Stmt {
            target: t.clone(),
            value: clock(),
        }]),
        ([start], [d])
            if c == format!(
                "{NOW}autorun_cpp_end_time={NS}{d}=static_cast<double>(run_cpp_end_time-{start})*1.e-9;"
            ) =>
        {
            let elapsed = Expr::bin(BinOp::Sub, clock(), Expr::var(start));
            Some(vec![Stmt {
                target: d.clone(),
                value: Expr::bin(
                    BinOp::Mul,
                    Expr::Cast(DType::F64, Box::new(elapsed)),
                    Expr::Const(Value::F64(1e-9)),
                ),
            }])
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gt4py_timers_and_nothing_else() {
        let start = "/* The SDFG execution should already be synchronized */\nauto now = std::chrono::high_resolution_clock::now();\ntime = std::chrono::duration_cast<std::chrono::nanoseconds>(\n        now.time_since_epoch()\n    ).count();\n        ";
        let s = gt4py_timer(start, &[], &["time".into()]).unwrap();
        assert_eq!(s[0].to_string(), "time = wall_ns()");
        let stop = "/* The SDFG execution should already be synchronized */\nauto now = std::chrono::high_resolution_clock::now();\nauto run_cpp_end_time = std::chrono::duration_cast<std::chrono::nanoseconds>(\n        now.time_since_epoch()\n    ).count();\nduration = static_cast<double>(run_cpp_end_time - run_cpp_start_time) * 1.e-9;\n        ";
        let s = gt4py_timer(stop, &["run_cpp_start_time".into()], &["duration".into()]).unwrap();
        assert_eq!(
            s[0].to_string(),
            "duration = f64(wall_ns() - run_cpp_start_time) * 1e-9"
        );
        // Other names, other code: not a timer.
        assert!(gt4py_timer(start, &[], &["other".into()]).is_none());
        assert!(gt4py_timer("x = 1;", &[], &["x".into()]).is_none());
    }
}
