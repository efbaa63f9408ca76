//! [`Pipeline`]: passes run in order, the whole list repeated until a round changes nothing
//! (a fixed point) or an iteration bound is hit, with a [`Report`] of what each pass did
//! and how long it took. A pass that changed nothing is not run again until another pass
//! changes the program: the last round of a run re-runs only the passes that came before
//! the last change, and the pass that made it.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sdflow_ir::Sdfg;

use crate::pass::{Changes, Pass, TransformError};
use crate::{
    CopyForwarding, DeadDataflow, EGraphPass, GpuSchedule, InlineNested, LocalUnroll, LoopOrder,
    MapFusion, MoveIntoIf, RedundantCopy, RowFusion, SiblingFusion, Specialize, StateFusion,
};

/// What one pass did over a whole pipeline run.
#[derive(Clone, Debug, PartialEq)]
pub struct PassReport {
    /// The pass.
    pub name: &'static str,
    /// How many times it ran (at most once per round; skipped when its last run changed
    /// nothing and no pass changed the program since).
    pub runs: usize,
    /// Its changes, summed over the runs.
    pub changes: Changes,
    /// Time spent in it (validation between passes not included).
    pub time: Duration,
}

/// What a pipeline run did.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// One entry per pass, in pipeline order.
    pub passes: Vec<PassReport>,
    /// Rounds run (a round runs, in order, every enabled pass that changed something in
    /// its last run or whose input changed since).
    pub rounds: usize,
    /// True when the last round changed nothing; false when the round bound (or a
    /// `stop_after`) ended the run first.
    pub fixed_point: bool,
    /// Total time, validation included.
    pub time: Duration,
    /// Of which the validation of the input.
    pub validation: Duration,
    /// Nested SDFGs that stayed calls (not inlined) and that the passes then optimized as
    /// programs of their own, at any depth; their passes' runs and changes are counted in
    /// `passes` with the caller's.
    pub callees: usize,
}

impl Report {
    /// The summed changes of the pass called `name`.
    pub fn changes(&self, name: &str) -> Changes {
        self.passes
            .iter()
            .filter(|p| p.name == name)
            .fold(Changes::default(), |mut acc, p| {
                acc.merge(&p.changes);
                acc
            })
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} round(s), {}, {:.3} ms",
            self.rounds,
            if self.fixed_point {
                "fixed point"
            } else {
                "stopped before a fixed point"
            },
            self.time.as_secs_f64() * 1e3
        )?;
        writeln!(
            f,
            "  {:<16} {:>9.3} ms  of the input",
            "validation",
            self.validation.as_secs_f64() * 1e3
        )?;
        if self.callees > 0 {
            writeln!(
                f,
                "  (the passes below include their runs inside {} kept callee(s))",
                self.callees
            )?;
        }
        for p in &self.passes {
            writeln!(
                f,
                "  {:<16} {:>9.3} ms  {}",
                p.name,
                p.time.as_secs_f64() * 1e3,
                p.changes
            )?;
            for n in &p.changes.notes {
                writeln!(f, "      {n}")?;
            }
        }
        Ok(())
    }
}

/// An ordered list of passes run to a fixed point.
pub struct Pipeline {
    passes: Vec<Box<dyn Pass>>,
    max_rounds: usize,
    validate: bool,
    disabled: BTreeSet<String>,
    stop_after: Option<usize>,
}

/// Every pass by name, with its default settings.
pub fn pass_by_name(name: &str) -> Option<Box<dyn Pass>> {
    let p: Box<dyn Pass> = match name {
        "inline_nested" => Box::new(InlineNested),
        "specialize" => Box::new(Specialize),
        "dead_dataflow" => Box::new(DeadDataflow),
        "redundant_copy" => Box::new(RedundantCopy),
        "state_fusion" => Box::new(StateFusion),
        "copy_forwarding" => Box::new(CopyForwarding),
        "map_fusion" => Box::new(MapFusion::default()),
        "sibling_fusion" => Box::new(SiblingFusion),
        "row_fusion" => Box::new(RowFusion),
        "local_unroll" => Box::new(LocalUnroll),
        "move_into_if" => Box::new(MoveIntoIf),
        "loop_order" => Box::new(LoopOrder),
        "gpu_schedule" => Box::new(GpuSchedule),
        "egraph" => Box::new(EGraphPass::default()),
        "egraph_fast_math" => Box::new(EGraphPass::fast_math()),
        _ => return None,
    };
    Some(p)
}

/// Names of every pass: the structural passes in the default CPU pipeline's order, the
/// GPU-only one, then the e-graph pass (in the defaults after `sibling_fusion`) and its
/// opt-in fast-math form.
pub const PASS_NAMES: [&str; 15] = [
    "inline_nested",
    "specialize",
    "dead_dataflow",
    "redundant_copy",
    "state_fusion",
    "copy_forwarding",
    "map_fusion",
    "sibling_fusion",
    "row_fusion",
    "local_unroll",
    "move_into_if",
    "loop_order",
    "gpu_schedule",
    "egraph",
    "egraph_fast_math",
];

/// The structural passes of the default CPU pipeline, in order.
const CPU_PASSES: [&str; 12] = [
    "inline_nested",
    "specialize",
    "dead_dataflow",
    "redundant_copy",
    "state_fusion",
    "copy_forwarding",
    "map_fusion",
    "sibling_fusion",
    "row_fusion",
    "local_unroll",
    "move_into_if",
    "loop_order",
];

/// Programs with at least this many states keep the thread pool awake while they are
/// optimized (see [`keep_warm`]).
const WARM_STATES: usize = 64;

/// The longest a worker waits for work in [`keep_warm`].
const WARM_LIMIT: Duration = Duration::from_millis(200);

/// Runs on the other workers of the pool while a large program is optimized: takes the
/// passes' parallel work as soon as it is offered, instead of sleeping between the
/// passes' parallel sections (waking a sleeping worker costs a quarter of a millisecond on
/// a virtual machine with idle cores, once per section). Between tries it yields its core
/// to any other thread ready to run. It stops when the pipeline ends,
/// or after [`WARM_LIMIT`] at the latest, so that two pipelines waiting on each other's
/// workers delay each other at most that long. The cost: the other cores stay busy for
/// the pipeline's duration (a few milliseconds), as OpenMP's active wait policy does.
fn keep_warm(done: &AtomicBool) {
    let until = Instant::now() + WARM_LIMIT;
    while !done.load(Ordering::Acquire) && Instant::now() < until {
        if rayon::yield_now() != Some(rayon::Yield::Executed) {
            // Gives the core to another thread of this process that is ready to run.
            std::thread::yield_now();
        }
    }
}

impl Pipeline {
    /// A pipeline of the given passes, at most 16 rounds, validating between passes in
    /// debug builds.
    pub fn new(passes: Vec<Box<dyn Pass>>) -> Pipeline {
        Pipeline {
            passes,
            max_rounds: 16,
            validate: cfg!(debug_assertions),
            disabled: BTreeSet::new(),
            stop_after: None,
        }
    }

    /// A pipeline of the passes named, in that order.
    pub fn from_names<S: AsRef<str>>(names: &[S]) -> Result<Pipeline, TransformError> {
        let passes = names
            .iter()
            .map(|n| {
                let n = n.as_ref().trim();
                pass_by_name(n).ok_or_else(|| TransformError::UnknownPass {
                    name: n.to_string(),
                    known: PASS_NAMES.iter().map(|s| s.to_string()).collect(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Pipeline::new(passes))
    }

    /// The default pipeline for the CPU backend: specialization, cleanup, state fusion,
    /// producer–consumer and sibling map fusion, the e-graph optimizer of fused bodies,
    /// move-into-if.
    pub fn cpu() -> Pipeline {
        Pipeline::from_names(&CPU_PASSES)
            .and_then(|p| p.insert_after("local_unroll", Box::new(EGraphPass::default())))
            .expect("the default passes exist")
    }

    /// The default pipeline for the GPU backend: the CPU pipeline's passes, with map
    /// fusion by recomputation only (a tile buffer per thread is a CPU cache
    /// optimization; on the GPU each point is one thread and neighbours come from the
    /// caches) and without row fusion (a thread per row would lose the parallelism of
    /// the inner dimensions), then every top-level map becomes a GPU kernel and every
    /// transient moves to device memory.
    pub fn gpu() -> Pipeline {
        Pipeline::cpu()
            .without("row_fusion")
            .and_then(|p| {
                p.replace(
                    "map_fusion",
                    Box::new(MapFusion {
                        tile_rows: 0,
                        ..MapFusion::default()
                    }),
                )
            })
            .and_then(|p| p.insert_after("move_into_if", Box::new(GpuSchedule)))
            .expect("the default passes exist")
    }

    fn position(&self, name: &str) -> Result<usize, TransformError> {
        self.passes
            .iter()
            .position(|p| p.name() == name)
            .ok_or_else(|| TransformError::UnknownPass {
                name: name.to_string(),
                known: self.names().iter().map(|s| s.to_string()).collect(),
            })
    }

    /// Inserts `pass` right after the pass called `after` (by name, so a pipeline's
    /// order can change without breaking the insertion).
    pub fn insert_after(
        mut self,
        after: &str,
        pass: Box<dyn Pass>,
    ) -> Result<Pipeline, TransformError> {
        let k = self.position(after)?;
        self.passes.insert(k + 1, pass);
        Ok(self)
    }

    /// The pipeline without the pass called `name` (an error when it has none).
    pub fn without(mut self, name: &str) -> Result<Pipeline, TransformError> {
        let k = self.position(name)?;
        self.passes.remove(k);
        self.disabled.remove(name);
        Ok(self)
    }

    /// Replaces the pass called `name` by `pass`; a disabled pass's replacement is
    /// disabled too.
    pub fn replace(mut self, name: &str, pass: Box<dyn Pass>) -> Result<Pipeline, TransformError> {
        let k = self.position(name)?;
        if self.disabled.contains(name) {
            self.disabled.insert(pass.name().to_string());
        }
        self.passes[k] = pass;
        Ok(self)
    }

    /// The e-graph pass replaced by its fast-math version (result-changing rules, see
    /// `docs/transforms.md`); an error when the pipeline has no e-graph pass or disables
    /// it, since fast math would then silently do nothing (or run a disabled pass).
    pub fn fast_math(self) -> Result<Pipeline, TransformError> {
        let has = self.names().contains(&"egraph");
        if !has || self.disabled.contains("egraph") {
            return Err(TransformError::FastMathWithoutEGraph {
                disabled: has,
                passes: self.names().iter().map(|s| s.to_string()).collect(),
            });
        }
        self.replace("egraph", Box::new(crate::EGraphPass::fast_math()))
    }

    /// True when the pipeline has the pass called `name` and does not disable it.
    pub fn is_enabled(&self, name: &str) -> bool {
        self.names().contains(&name) && !self.disabled.contains(name)
    }

    /// Sets the round bound.
    pub fn max_rounds(mut self, n: usize) -> Pipeline {
        self.max_rounds = n.max(1);
        self
    }

    /// Validates after every pass (default: in debug builds only).
    pub fn validate_each(mut self, on: bool) -> Pipeline {
        self.validate = on;
        self
    }

    /// Skips the pass called `name` (unknown names are an error).
    pub fn disable(mut self, name: &str) -> Result<Pipeline, TransformError> {
        if !self.passes.iter().any(|p| p.name() == name) {
            return Err(TransformError::UnknownPass {
                name: name.to_string(),
                known: self.names().iter().map(|s| s.to_string()).collect(),
            });
        }
        self.disabled.insert(name.to_string());
        Ok(self)
    }

    /// Stops after `n` pass runs in total (to bisect a miscompile: the first `n` that
    /// changes a result names the pass).
    pub fn stop_after(mut self, n: usize) -> Pipeline {
        self.stop_after = Some(n);
        self
    }

    /// The pass names, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.passes.iter().map(|p| p.name()).collect()
    }

    /// Runs the pipeline on `sdfg` in place. The input must validate.
    ///
    /// It runs on a worker of rayon's pool: the passes that work on states in parallel
    /// run one share on this thread instead of waking the pool and waiting. The passes'
    /// once-per-process tables ([`Pass::prepare`]) are built by another worker meanwhile,
    /// so that the first run in a process does not wait for them.
    pub fn run(&self, sdfg: &mut Sdfg) -> Result<Report, TransformError> {
        let warm = rayon::current_thread_index().is_none()
            && rayon::current_num_threads() > 1
            && sdfg.states.len() >= WARM_STATES;
        let done = AtomicBool::new(false);
        std::thread::scope(|t| {
            t.spawn(|| {
                for pass in &self.passes {
                    if !self.disabled.contains(pass.name()) {
                        pass.prepare();
                    }
                }
            });
            rayon::scope(|s| {
                if warm {
                    let here = rayon::current_thread_index();
                    let done = &done;
                    s.spawn_broadcast(move |_, cx| {
                        if Some(cx.index()) != here {
                            keep_warm(done);
                        }
                    });
                }
                let report = self.run_passes(sdfg, 0);
                done.store(true, Ordering::Release);
                report
            })
        })
    }

    /// Runs the passes to a fixed point on `sdfg`, then on every nested SDFG that is still
    /// a call (`depth`: how deep in calls `sdfg` is), and again on `sdfg` when a callee
    /// changed.
    fn run_passes(&self, sdfg: &mut Sdfg, depth: usize) -> Result<Report, TransformError> {
        let start = Instant::now();
        if let Err(problems) = sdfg.validate() {
            return Err(TransformError::InvalidInput(
                problems.iter().map(|p| p.to_string()).collect(),
            ));
        }
        let validation = start.elapsed();
        let mut reports: Vec<PassReport> = self
            .passes
            .iter()
            .map(|p| PassReport {
                name: p.name(),
                runs: 0,
                changes: Changes::default(),
                time: Duration::ZERO,
            })
            .collect();
        let mut rounds = 0;
        let mut fixed_point = false;
        let mut total_runs = 0;
        // How many changes the program has seen, and for each pass the count at its last
        // run if that run changed nothing: running it again on the same program would
        // change nothing either (passes are deterministic), so it is skipped until another
        // pass changes the program. A pass that changed something runs again in the next
        // round, since a change can enable more of the same (map fusion scans once and
        // leaves fusions that become possible behind its scan to the next round).
        let mut version = 0u64;
        let mut seen: Vec<Option<u64>> = vec![None; self.passes.len()];
        let mut callees = 0;
        let mut callees_fixed = true;
        // The program, then its kept callees, then the program again if a callee changed
        // (a simpler callee may now be inlined): a callee at its fixed point does not
        // change the second time, so two passes over the callees suffice.
        for pass_over_callees in 0..2 {
            fixed_point = false;
            let before = version;
            'rounds: while rounds < self.max_rounds {
                rounds += 1;
                let mut changed = false;
                for (i, pass) in self.passes.iter().enumerate() {
                    if self.disabled.contains(pass.name())
                        || seen[i] == Some(version)
                        || (depth > 0 && !pass.in_callees())
                        || (changed && pass.settled())
                    {
                        continue;
                    }
                    if self.stop_after.is_some_and(|n| total_runs >= n) {
                        break 'rounds;
                    }
                    total_runs += 1;
                    let t = Instant::now();
                    let c = pass.run(sdfg);
                    reports[i].time += t.elapsed();
                    reports[i].runs += 1;
                    if c.is_empty() {
                        seen[i] = Some(version);
                    } else {
                        changed = true;
                        version += 1;
                        seen[i] = None;
                    }
                    reports[i].changes.merge(&c);
                    if self.validate
                        && let Err(problems) = sdfg.validate()
                    {
                        return Err(TransformError::Invalid {
                            pass: pass.name().to_string(),
                            problems: problems.iter().map(|p| p.to_string()).collect(),
                        });
                    }
                }
                if !changed {
                    fixed_point = true;
                    break;
                }
            }
            // The second time, callees are at their fixed point unless the program changed
            // around them.
            if depth >= MAX_CALL_DEPTH
                || self.stop_after.is_some()
                || (pass_over_callees > 0 && version == before)
            {
                break;
            }
            let mut changed = false;
            for callee in kept_callees(sdfg) {
                let report = match self.run_passes(callee, depth + 1) {
                    Ok(r) => r,
                    // A callee that does not validate on its own (a symbol only its caller's
                    // mapping defines, say) is left as it is: the caller validated.
                    Err(TransformError::InvalidInput(_)) => continue,
                    Err(e) => return Err(e),
                };
                if pass_over_callees == 0 {
                    callees += 1 + report.callees;
                }
                callees_fixed &= report.fixed_point;
                for (mine, theirs) in reports.iter_mut().zip(&report.passes) {
                    mine.runs += theirs.runs;
                    mine.time += theirs.time;
                    mine.changes.merge(&theirs.changes);
                    changed |= !theirs.changes.is_empty();
                }
            }
            if !changed {
                break;
            }
            version += 1;
            if self.validate
                && let Err(problems) = sdfg.validate()
            {
                return Err(TransformError::Invalid {
                    pass: "(a pass inside a kept callee)".to_string(),
                    problems: problems.iter().map(|p| p.to_string()).collect(),
                });
            }
        }
        Ok(Report {
            passes: reports,
            rounds,
            fixed_point: fixed_point && callees_fixed,
            time: start.elapsed(),
            validation,
            callees,
        })
    }
}

/// How deep in calls the passes optimize kept callees.
const MAX_CALL_DEPTH: usize = 8;

/// The nested SDFGs called from `sdfg`'s states and map bodies (not from inside the
/// callees: the recursion reaches those).
fn kept_callees(sdfg: &mut Sdfg) -> Vec<&mut Sdfg> {
    fn walk<'a>(df: &'a mut sdflow_ir::Dataflow, out: &mut Vec<&'a mut Sdfg>) {
        for n in df.graph.node_weights_mut() {
            match n {
                sdflow_ir::Node::Nested(ns) => out.push(&mut ns.sdfg),
                sdflow_ir::Node::Map(m) => walk(&mut m.body, out),
                _ => {}
            }
        }
    }
    let run: BTreeSet<usize> = sdfg.body.states().iter().map(|s| s.index()).collect();
    let mut out = Vec::new();
    for (i, st) in sdfg.states.iter_mut().enumerate() {
        if run.contains(&i) {
            walk(&mut st.graph, &mut out);
        }
    }
    out
}
