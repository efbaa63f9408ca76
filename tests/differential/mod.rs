//! The standing differential test of tasklet expressions (see `docs/fuzzing.md`):
//! random expressions ([`sdflow::ir::testkit::exprs`]) evaluated by the interpreter and
//! by the compiled C backend, before and after the optimizer, compared bit for bit.

use sdflow::codegen::CpuBackend;
use sdflow::ir::interp::{self, Bindings};
use sdflow::ir::testkit::exprs::{Batch, batch};
use sdflow::transforms::Pipeline;

/// What one batch gave: how many expressions and values were compared, and the
/// disagreements (one line each: where, the expression, the point, both values).
pub struct Outcome {
    pub exprs: usize,
    pub values: usize,
    pub findings: Vec<String>,
}

fn compiled(b: &Batch, sdfg: &sdflow::ir::Sdfg) -> Result<Bindings, String> {
    let prog = CpuBackend {
        cache: None,
        ..CpuBackend::default()
    }
    .build(sdfg)
    .map_err(|e| e.to_string())?;
    let mut got = b.inputs.clone();
    prog.run_bindings(&mut got).map_err(|e| e.to_string())?;
    Ok(got)
}

fn interpreted(b: &Batch, sdfg: &sdflow::ir::Sdfg) -> Result<Bindings, String> {
    let mut got = b.inputs.clone();
    interp::run(sdfg, &mut got).map_err(|e| e.to_string())?;
    Ok(got)
}

/// Runs batch `seed` (`count` expressions of depth `depth` over `points` points) on the
/// four paths and compares each with the interpreter's run of the original program.
pub fn check(seed: u64, count: usize, depth: u32, points: usize) -> Outcome {
    let b = batch(seed, count, depth, points);
    let mut findings = Vec::new();
    if let Err(problems) = b.sdfg.validate() {
        findings.push(format!("seed {seed}: invalid program: {problems:?}"));
        return Outcome {
            exprs: 0,
            values: 0,
            findings,
        };
    }
    let reference = match interpreted(&b, &b.sdfg) {
        Ok(r) => r,
        Err(e) => {
            findings.push(format!("seed {seed}: the interpreter failed: {e}"));
            return Outcome {
                exprs: 0,
                values: 0,
                findings,
            };
        }
    };
    let mut opt = b.sdfg.clone();
    let optimized = Pipeline::cpu()
        .validate_each(true)
        .run(&mut opt)
        .map(|_| ())
        .map_err(|e| e.to_string());
    let mut runs = vec![("compiled", compiled(&b, &b.sdfg))];
    match optimized {
        Ok(()) => {
            runs.push(("optimized, interpreted", interpreted(&b, &opt)));
            runs.push(("optimized, compiled", compiled(&b, &opt)));
        }
        Err(e) => findings.push(format!("seed {seed}: the optimizer failed: {e}")),
    }
    let mut values = 0;
    for (what, got) in runs {
        let got = match got {
            Ok(g) => g,
            Err(e) => {
                findings.push(format!("seed {seed}: {what}: failed: {e}"));
                continue;
            }
        };
        for (k, e) in b.exprs.iter().enumerate() {
            let name = format!("out{k}");
            let (want, have) = (reference.arrays[&name].bits(), got.arrays[&name].bits());
            values += want.len();
            if let Some(p) = want.iter().zip(&have).position(|(x, y)| x != y) {
                let (wv, hv) = (
                    reference.arrays[&name].values()[p],
                    got.arrays[&name].values()[p],
                );
                findings.push(format!(
                    "seed {seed}: {what}: out{k} = {e}\n  at {}\n  interpreter {wv:?} ({:#x}), {what} {hv:?} ({:#x})",
                    b.points[p], want[p], have[p]
                ));
            }
        }
    }
    Outcome {
        exprs: b.exprs.len(),
        values,
        findings,
    }
}
