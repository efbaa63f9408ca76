//! The execution plan: one description of how a program runs, decided once for a
//! [`Target`] (a team of threads that share each step's loops, or a grid of threads per
//! step) and printed by the backend of that target.
//!
//! A [`Plan`] says, for one SDFG:
//! - where each transient lives and for how long ([`Lifetime`]): allocated once per
//!   loaded program, once per worker (a tile buffer), per map iteration (a body-local
//!   scalar), or per call of a nested SDFG;
//! - the structured control flow ([`Flow`]), with the points where host control flow reads
//!   a value the dataflow wrote (`host_reads`: an OpenMP barrier on the CPU, a device→host
//!   copy and a synchronization on the GPU — a *sync point*);
//! - per state, the ordered [`Step`]s (parallel map, single, copy, reduction, nested call),
//!   each with the earlier steps it waits for (a path in the state's graph), its writes and
//!   whether their write-conflict resolution must be atomic, its [`CheckPolicy`] (when it
//!   runs its checked version, decided once with the static values), for a parallel map
//!   its collapse depth and the fewest points a team shares, for a copy whether a team
//!   shares its loops, for a map on a team whether its body is row-jammed ([`jam`]), and
//!   on a grid the step's grid.
//!
//! The C emitter turns waits into barriers and steps into worksharing loops or `single`
//! blocks; the CUDA emitter turns parallel maps into kernels and waits into stream order.
//! `sdflow show FILE --emit plan` prints a plan ([`Plan::to_text`]).
//!
//! Why one file of this size: the plan is one set of decisions taken in one walk
//! (lifetimes, control flow, steps, waits, writes, check policies), and its printer
//! `to_text` shows all of it; in-bounds conditions are `bounds.rs`.

pub mod bounds;
pub mod exchange;
pub mod jam;
pub mod lag;
pub mod rows;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use sdflow_ir::{
    Block, DType, DataDesc, Dataflow, EdgeId, LibraryNode, Memlet, Node, NodeId, Schedule, Sdfg,
    StateId, Storage, Subset, SymExpr, Wcr,
};

use crate::CodegenError;
use crate::abi::Signature;

/// How long a transient's storage lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lifetime {
    /// Allocated once when the program is loaded (`sdflow_init`, device memory on the
    /// GPU) and kept across calls.
    Persistent,
    /// One copy per worker of the parallel region (a tile buffer, `Storage::Local`).
    PerWorker,
    /// A scalar declared afresh in every iteration of the map bodies that use it.
    BodyLocal,
    /// Allocated on entry of a nested SDFG's function and freed on exit.
    PerCall,
}

impl Lifetime {
    fn name(self) -> &'static str {
        match self {
            Lifetime::Persistent => "persistent",
            Lifetime::PerWorker => "per-worker",
            Lifetime::BodyLocal => "body-local",
            Lifetime::PerCall => "per-call",
        }
    }
}

/// One transient and its lifetime class.
#[derive(Clone, Debug, PartialEq)]
pub struct Allocation {
    /// Container name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Symbolic shape (empty for a scalar).
    pub shape: Vec<SymExpr>,
    /// How long it lives.
    pub lifetime: Lifetime,
}

/// The structured control flow of a plan (the SDFG's, with the decisions of each state).
#[derive(Clone, Debug, PartialEq)]
pub enum Flow {
    /// One state's steps.
    State(StatePlan),
    /// Blocks in order.
    Seq(Vec<Flow>),
    /// `var = init; while cond { body; var = update }`.
    Loop {
        /// Loop variable.
        var: String,
        /// Initial value.
        init: SymExpr,
        /// Continue while non-zero.
        cond: SymExpr,
        /// Next value.
        update: SymExpr,
        /// The body.
        body: Box<Flow>,
        /// Scalars the dataflow writes that the loop's expressions read.
        host_reads: Vec<String>,
    },
    /// A conditional.
    If {
        /// Taken when non-zero.
        cond: SymExpr,
        /// When the condition holds.
        then: Box<Flow>,
        /// Otherwise.
        otherwise: Box<Flow>,
        /// Scalars the dataflow writes that the condition reads.
        host_reads: Vec<String>,
    },
    /// Interstate symbol assignments, evaluated together.
    Assign {
        /// `(symbol, value)` pairs.
        assignments: Vec<(String, SymExpr)>,
        /// Scalars the dataflow writes that the values read.
        host_reads: Vec<String>,
    },
}

impl Flow {
    /// The scalars host control flow reads at this point (a sync point when not empty).
    pub fn host_reads(&self) -> &[String] {
        match self {
            Flow::Loop { host_reads, .. }
            | Flow::If { host_reads, .. }
            | Flow::Assign { host_reads, .. } => host_reads,
            Flow::State(_) | Flow::Seq(_) => &[],
        }
    }

    /// Every state plan, in program order.
    pub fn states(&self) -> Vec<&StatePlan> {
        let mut out = Vec::new();
        self.collect_states(&mut out);
        out
    }

    /// The number of states, as [`Flow::states`] lists them.
    pub fn state_count(&self) -> usize {
        match self {
            Flow::State(_) => 1,
            Flow::Seq(items) => items.iter().map(Flow::state_count).sum(),
            Flow::Loop { body, .. } => body.state_count(),
            Flow::If {
                then, otherwise, ..
            } => then.state_count() + otherwise.state_count(),
            Flow::Assign { .. } => 0,
        }
    }

    fn collect_states<'a>(&'a self, out: &mut Vec<&'a StatePlan>) {
        match self {
            Flow::State(s) => out.push(s),
            Flow::Seq(items) => items.iter().for_each(|i| i.collect_states(out)),
            Flow::Loop { body, .. } => body.collect_states(out),
            Flow::If {
                then, otherwise, ..
            } => {
                then.collect_states(out);
                otherwise.collect_states(out);
            }
            Flow::Assign { .. } => {}
        }
    }

    /// The number of places where host control flow reads a value the dataflow wrote.
    pub fn sync_points(&self) -> usize {
        let own = usize::from(!self.host_reads().is_empty());
        own + match self {
            Flow::State(_) | Flow::Assign { .. } => 0,
            Flow::Seq(items) => items.iter().map(Flow::sync_points).sum(),
            Flow::Loop { body, .. } => body.sync_points(),
            Flow::If {
                then, otherwise, ..
            } => then.sync_points() + otherwise.sync_points(),
        }
    }
}

/// One state: its steps in execution order.
#[derive(Clone, Debug, PartialEq)]
pub struct StatePlan {
    /// The state.
    pub id: StateId,
    /// Its name.
    pub name: String,
    /// Work in order (access nodes without a copy into them are not steps).
    pub steps: Vec<Step>,
}

/// What a step does.
#[derive(Clone, Debug, PartialEq)]
pub enum StepKind {
    /// A map whose points run in parallel (an `omp for`, a GPU kernel).
    ParallelMap {
        /// How many of the outermost parameters are collapsed into one parallel loop
        /// (at least 1; the innermost stays a contiguous loop on the CPU).
        collapse: usize,
        /// With fewer points than this, one worker of a team runs it: the target's
        /// threshold ([`Target::Team`]), or 2 for a map whose body holds maps (tiles,
        /// scan columns: much more than a point of work per iteration); 1 on a grid.
        min_points: i64,
        /// On a team, the index-table reads of the body checked once per point of the
        /// collapsed loops ([`rows`]), the inner loops then gathering without a check —
        /// in strips of the inner loop ([`rows::Strip::Inner`]), once per point of that
        /// loop, for all of the outer one; `None`: checked where they are read.
        row_checks: Option<Vec<rows::RowCheck>>,
        /// With row checks, which loop of a two-parameter map runs in strips of
        /// [`rows::STRIP`] points, each strip's table entries checked at once, the
        /// other loop outside a contiguous loop over the strip's points
        /// ([`rows::Strip`]); `None`: no strips.
        strips: Option<rows::Strip>,
    },
    /// A map run by one worker (its schedule is sequential, or the plan is not parallel).
    SequentialMap,
    /// A tasklet run once.
    Tasklet,
    /// A copy between containers (an access node with copies into it).
    Copy {
        /// Each of the step's copies runs in parallel, one after another (each is a loop
        /// nest between two different containers of matching sizes, without a
        /// write-conflict resolution): a team shares each copy's loops among its
        /// workers; on a grid, a step of several copies is one grid per copy, in order
        /// (a step of one copy is its [`Step::grid`]). Otherwise one worker runs them.
        shared: bool,
    },
    /// A reduction library node.
    Reduce,
    /// A call of a nested SDFG, with the nested program's own plan.
    Nested(Box<Plan>),
    /// The start of a halo exchange ([`exchange`]): pack the cells the neighbours need,
    /// post the receives and the sends.
    ExchangeStart(exchange::Exchange),
    /// The finish of a halo exchange: wait for its messages, unpack them into the halos.
    /// Placed before the first step that touches its fields ([`exchange`]).
    ExchangeFinish(exchange::Exchange),
}

impl StepKind {
    fn name(&self) -> &'static str {
        match self {
            StepKind::ParallelMap { .. } => "parallel map",
            StepKind::SequentialMap => "sequential map",
            StepKind::Tasklet => "tasklet",
            StepKind::Copy { .. } => "copy",
            StepKind::Reduce => "reduce",
            StepKind::Nested(_) => "nested call",
            StepKind::ExchangeStart(_) => "exchange start",
            StepKind::ExchangeFinish(_) => "exchange finish",
        }
    }
}

/// A write of a step to a container.
#[derive(Clone, Debug, PartialEq)]
pub struct Write {
    /// The container.
    pub data: String,
    /// Its write-conflict resolution, if any.
    pub wcr: Option<Wcr>,
    /// The resolution must be atomic: the step runs beside others or in parallel.
    pub atomic: bool,
}

/// One unit of work of a state.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// The state-level node.
    pub node: NodeId,
    /// Its label (map label, tasklet name, destination container...).
    pub label: String,
    /// What it is.
    pub kind: StepKind,
    /// Earlier steps of the state (indices into `steps`) it must wait for.
    pub waits: Vec<usize>,
    /// Containers it writes.
    pub writes: Vec<Write>,
    /// When the step runs its checked version instead (the interpreter's checks, one
    /// thread): decided once, with the program's static values. Every printer and the
    /// CUDA host read this and nothing else.
    pub check: CheckPolicy,
    /// How a backend that runs a step on a grid of threads (CUDA) covers it: one thread
    /// per point of these sizes, outermost first — a parallel map's independent
    /// parameters ([`independent_depth`]), a copy's elements ([`grid_copy`]), a
    /// reduction's output elements; `None`: one thread (and in a nested plan, or for a
    /// team, always).
    pub grid: Option<Vec<SymExpr>>,
    /// The map's body is a producer–consumer pair printed row-jammed ([`jam`]; a team's
    /// maps only).
    pub jam: Option<jam::Jam>,
    /// The step runs part of its map's points ([`exchange`]: the interior before a halo
    /// exchange finishes, the rim after); `None`: all of them.
    pub part: Option<MapPart>,
    /// The map runs in chunks lagged behind the step before it, its producer ([`lag`]; a
    /// team's top-level maps only).
    pub lag: Option<lag::Lag>,
    /// When the nested SDFGs the map's body calls skip their own in-bounds checks in its
    /// unchecked version ([`bounds::callee_condition`]: every subscript of their states,
    /// wherever the map runs): `Never` checks, a condition at bind, or `Always` (they
    /// check themselves at every call: no callee, a condition that cannot be stated, or
    /// not the top-level program).
    pub callees: CheckPolicy,
}

/// Part of a parallel map's points, as boxes of ranges (one per map parameter).
#[derive(Clone, Debug, PartialEq)]
pub enum MapPart {
    /// The points whose reads of an exchange's fields stay within the cells this rank
    /// owns: they run before the exchange finishes.
    Interior(Vec<sdflow_ir::Range>),
    /// The others (up to four boxes around the interior), after it finishes.
    Rim(Vec<Vec<sdflow_ir::Range>>),
}

/// How the backend a plan is made for runs a state's steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// A team of threads that all walk the control flow and share each step's loops (C
    /// with OpenMP): parallel maps with fewer points than `parallel_min_points` run on one
    /// worker, copies share their loops, producer–consumer pairs are row-jammed.
    Team {
        /// The smallest parallel map (in points) the team shares.
        parallel_min_points: i64,
    },
    /// A grid of threads per step, the steps ordered by the host (CUDA): each step's grid.
    Grid,
}

impl Default for Target {
    /// The C backend's team with its default threshold.
    fn default() -> Self {
        Target::Team {
            parallel_min_points: 4096,
        }
    }
}

/// When a step runs checked: whether the condition under which all its accesses are in
/// bounds holds is known now, once the arguments are bound, or only where it runs.
#[derive(Clone, Debug, PartialEq)]
pub enum CheckPolicy {
    /// Never: the condition holds whatever the arguments (with the static values).
    Never,
    /// Always: no condition can be stated, or it fails under the static values.
    Always,
    /// Where this condition fails, evaluated once when the arguments are bound: it reads
    /// only the program's integer symbols (a top-level program only).
    AtBind(SymExpr),
    /// Where this condition fails, evaluated each time the step runs: it reads symbols
    /// the control flow assigns, loop variables, or a nested SDFG's symbols.
    AtRun(SymExpr),
}

impl Step {
    /// What the step is, in words (as `--emit plan` prints it).
    pub fn kind_name(&self) -> &'static str {
        self.kind.name()
    }

    /// Whether some write of the step combines atomically ([`Write::atomic`]).
    pub fn atomic_writes(&self) -> bool {
        self.writes.iter().any(|w| w.atomic)
    }
}

impl CheckPolicy {
    /// The policy of a step whose in-bounds condition is `cond` (`None`: it cannot be
    /// stated) in `sdfg`, with its static integer values `statics` and the symbols its
    /// control flow assigns `flow`; `top`: a top-level program, whose symbols are bound
    /// once per set of arguments.
    fn of(
        sdfg: &Sdfg,
        cond: Option<SymExpr>,
        statics: &BTreeMap<String, i64>,
        flow: &BTreeSet<String>,
        top: bool,
    ) -> Self {
        let Some(c) = cond else {
            return CheckPolicy::Always;
        };
        match c.eval(&|x| statics.get(x).copied()) {
            Ok(v) if v != 0 => return CheckPolicy::Never,
            Ok(_) => return CheckPolicy::Always,
            Err(sdflow_ir::symexpr::EvalError::Unbound(_)) => {}
            Err(_) => return CheckPolicy::Always,
        }
        let bindable = c
            .free_symbols()
            .iter()
            .all(|x| sdfg.symbols.get(x).is_some_and(|s| !s.dtype.is_float()) && !flow.contains(x));
        if top && bindable {
            CheckPolicy::AtBind(c)
        } else {
            CheckPolicy::AtRun(c)
        }
    }

    /// Whether the step runs unchecked for the symbol values `values` (a condition that
    /// cannot be evaluated with them does not hold).
    pub fn unchecked_with(&self, values: &BTreeMap<String, i64>) -> bool {
        match self {
            CheckPolicy::Never => true,
            CheckPolicy::Always => false,
            CheckPolicy::AtBind(c) | CheckPolicy::AtRun(c) => {
                c.eval_map(values).is_ok_and(|v| v != 0)
            }
        }
    }
}

/// How a program executes: see the module documentation.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The SDFG's name.
    pub name: String,
    /// The calling ABI.
    pub signature: Signature,
    /// Steps of a state may run at once (the top-level program); a nested SDFG's plan
    /// runs sequentially inside the step that calls it.
    pub parallel: bool,
    /// What the plan is made for.
    pub target: Target,
    /// Every transient with its lifetime.
    pub allocations: Vec<Allocation>,
    /// Symbols the control flow assigns (loop variables, interstate assignments).
    pub flow_symbols: Vec<String>,
    /// The control flow.
    pub body: Flow,
}

impl Plan {
    /// The plan of a whole program for `target` (its states' steps run in parallel).
    pub fn of(sdfg: &Sdfg, target: Target) -> Result<Plan, CodegenError> {
        Plan::of_with(sdfg, target, true)
    }

    /// [`Plan::of`], choosing whether work that does not touch an exchange's fields runs
    /// between its start and its finish (`overlap`, the default) or each exchange
    /// finishes right after it starts ([`exchange`]).
    pub fn of_with(sdfg: &Sdfg, target: Target, overlap: bool) -> Result<Plan, CodegenError> {
        let mut plan = plan_sdfg(sdfg, true, target)?;
        exchange::place_finishes(sdfg, &mut plan.body, overlap);
        Ok(plan)
    }

    /// The program's halo exchanges, by number.
    pub fn exchanges(&self) -> Vec<&exchange::Exchange> {
        let mut out: Vec<&exchange::Exchange> = self
            .body
            .states()
            .into_iter()
            .flat_map(|s| &s.steps)
            .filter_map(|s| match &s.kind {
                StepKind::ExchangeStart(x) => Some(x),
                _ => None,
            })
            .collect();
        out.sort_by_key(|x| x.id);
        out
    }

    /// The plan of a nested SDFG for `target`, run sequentially inside the step that
    /// calls it.
    pub fn nested(sdfg: &Sdfg, target: Target) -> Result<Plan, CodegenError> {
        plan_sdfg(sdfg, false, target)
    }

    /// The number of sync points of the control flow.
    pub fn sync_points(&self) -> usize {
        self.body.sync_points()
    }

    /// The allocation of a transient.
    pub fn allocation(&self, name: &str) -> Option<&Allocation> {
        self.allocations.iter().find(|a| a.name == name)
    }

    /// Whether `name` is a scalar declared afresh in every map iteration that uses it
    /// ([`Lifetime::BodyLocal`]).
    pub fn body_local(&self, name: &str) -> bool {
        self.allocation(name)
            .is_some_and(|a| a.lifetime == Lifetime::BodyLocal)
    }

    /// Transients of one lifetime class, in name order.
    pub fn with_lifetime(&self, l: Lifetime) -> impl Iterator<Item = &Allocation> {
        self.allocations.iter().filter(move |a| a.lifetime == l)
    }

    /// A readable listing of the plan (what `sdflow show --emit plan` prints).
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        self.write_text(&mut out, 0);
        out
    }

    fn write_text(&self, out: &mut String, ind: usize) {
        let pad = "  ".repeat(ind);
        let _ = writeln!(
            out,
            "{pad}plan '{}' ({}, {}; {} sync point{})",
            self.name,
            if self.parallel {
                "parallel"
            } else {
                "sequential"
            },
            match self.target {
                Target::Team { .. } => "team",
                Target::Grid => "grid",
            },
            self.sync_points(),
            if self.sync_points() == 1 { "" } else { "s" }
        );
        let sig = &self.signature;
        let _ = writeln!(
            out,
            "{pad}  arguments: {}",
            if sig.arrays.is_empty() {
                "-".to_string()
            } else {
                sig.arrays
                    .iter()
                    .map(|a| a.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        );
        if !sig.ints.is_empty() || !sig.floats.is_empty() {
            let syms: Vec<&str> = sig
                .ints
                .iter()
                .chain(&sig.floats)
                .map(|s| s.as_str())
                .collect();
            let _ = writeln!(out, "{pad}  symbols: {}", syms.join(", "));
        }
        for a in &self.allocations {
            let shape: Vec<String> = a.shape.iter().map(|e| e.to_string()).collect();
            let _ = writeln!(
                out,
                "{pad}  alloc {} {}[{}] {}",
                a.name,
                a.dtype.name(),
                shape.join(", "),
                a.lifetime.name()
            );
        }
        write_flow(out, &self.body, ind + 1);
    }
}

fn write_flow(out: &mut String, f: &Flow, ind: usize) {
    let pad = "  ".repeat(ind);
    let sync = |r: &[String]| {
        if r.is_empty() {
            String::new()
        } else {
            format!("  [sync point: reads {}]", r.join(", "))
        }
    };
    match f {
        Flow::State(s) => {
            let _ = writeln!(out, "{pad}state '{}'", s.name);
            for (k, st) in s.steps.iter().enumerate() {
                let mut line = format!("{pad}  {k}: {} '{}'", st.kind.name(), st.label);
                match &st.kind {
                    StepKind::ParallelMap {
                        collapse,
                        min_points,
                        row_checks,
                        strips,
                    } => {
                        let _ = write!(line, " collapse {collapse}");
                        if *min_points > 1 {
                            let _ = write!(line, " from {min_points} points");
                        }
                        if let Some(c) = row_checks {
                            let _ = write!(
                                line,
                                " tables checked per row ({} read{})",
                                c.len(),
                                if c.len() == 1 { "" } else { "s" }
                            );
                        }
                        match strips {
                            Some(rows::Strip::Outer) => {
                                let _ = write!(line, " in strips of {}", rows::STRIP);
                            }
                            Some(rows::Strip::Inner) => {
                                let _ =
                                    write!(line, " in strips of {} of its inner loop", rows::STRIP);
                            }
                            None => {}
                        }
                    }
                    StepKind::Copy { shared: true } => line.push_str(" shared"),
                    StepKind::ExchangeStart(x) | StepKind::ExchangeFinish(x) => {
                        let _ = write!(
                            line,
                            " #{} of {} over {}",
                            x.id,
                            x.fields.join(", "),
                            x.decomposition
                        );
                    }
                    _ => {}
                }
                if let Some(j) = &st.jam {
                    let _ = write!(
                        line,
                        " rows jammed (+{} rows, +{} columns{})",
                        j.dmax,
                        j.k,
                        if j.simd { ", simd" } else { "" }
                    );
                }
                if let Some(g) = &st.grid {
                    let sizes: Vec<String> = g.iter().map(|e| e.to_string()).collect();
                    let _ = write!(line, " grid [{}]", sizes.join(", "));
                }
                match &st.part {
                    Some(MapPart::Interior(_)) => line.push_str(" (interior)"),
                    Some(MapPart::Rim(b)) => {
                        let _ = write!(line, " (rim: {} boxes)", b.len());
                    }
                    None => {}
                }
                if !st.waits.is_empty() {
                    let w: Vec<String> = st.waits.iter().map(|w| w.to_string()).collect();
                    let _ = write!(line, " after {}", w.join(","));
                }
                if let Some(l) = &st.lag {
                    let rows: Vec<String> = l
                        .reads
                        .iter()
                        .map(|r| match r {
                            lag::LagRead::Row(e) => e.to_string(),
                            lag::LagRead::Table { table, index, .. } => {
                                let i: Vec<String> = index.iter().map(|e| e.to_string()).collect();
                                format!("{table}[{}]", i.join(", "))
                            }
                        })
                        .collect();
                    let _ = write!(
                        line,
                        " lagged behind its producer ({} rows at {})",
                        l.transient,
                        rows.join(", ")
                    );
                }
                if !st.writes.is_empty() {
                    let w: Vec<String> = st
                        .writes
                        .iter()
                        .map(|w| match w.wcr {
                            Some(c) => format!(
                                "{} ({}{})",
                                w.data,
                                if w.atomic { "atomic " } else { "" },
                                c.name()
                            ),
                            None if w.atomic => format!("{} (atomic inside)", w.data),
                            None => w.data.clone(),
                        })
                        .collect();
                    let _ = write!(line, " writes {}", w.join(", "));
                }
                match &st.check {
                    CheckPolicy::Never => {}
                    CheckPolicy::Always => line.push_str(" checked"),
                    CheckPolicy::AtBind(c) | CheckPolicy::AtRun(c) => {
                        let when = if matches!(st.check, CheckPolicy::AtBind(_)) {
                            "checked at bind"
                        } else {
                            "checked at run"
                        };
                        let text = c.to_string();
                        if text.len() <= 60 {
                            let _ = write!(line, " {when}: in bounds if {text}");
                        } else {
                            let names: Vec<String> = c.free_symbols().into_iter().collect();
                            let _ = write!(
                                line,
                                " {when}: in bounds by a condition on {}",
                                names.join(", ")
                            );
                        }
                    }
                }
                match &st.callees {
                    CheckPolicy::Never => line.push_str("; its callees in bounds"),
                    CheckPolicy::AtBind(_) => line.push_str("; its callees checked at bind"),
                    CheckPolicy::Always | CheckPolicy::AtRun(_) => {}
                }
                let _ = writeln!(out, "{line}");
                if let StepKind::Nested(p) = &st.kind {
                    p.write_text(out, ind + 2);
                }
            }
        }
        Flow::Seq(items) => items.iter().for_each(|i| write_flow(out, i, ind)),
        Flow::Loop {
            var,
            init,
            cond,
            update,
            body,
            host_reads,
        } => {
            let _ = writeln!(
                out,
                "{pad}loop {var} = {init}; {cond}; {var} = {update}{}",
                sync(host_reads)
            );
            write_flow(out, body, ind + 1);
        }
        Flow::If {
            cond,
            then,
            otherwise,
            host_reads,
        } => {
            let _ = writeln!(out, "{pad}if {cond}{}", sync(host_reads));
            write_flow(out, then, ind + 1);
            if !matches!(**otherwise, Flow::Seq(ref v) if v.is_empty()) {
                let _ = writeln!(out, "{pad}else");
                write_flow(out, otherwise, ind + 1);
            }
        }
        Flow::Assign {
            assignments,
            host_reads,
        } => {
            let a: Vec<String> = assignments
                .iter()
                .map(|(n, e)| format!("{n} = {e}"))
                .collect();
            let _ = writeln!(out, "{pad}assign {}{}", a.join("; "), sync(host_reads));
        }
    }
}

/// The plan of one SDFG; `parallel` at the top level.
fn plan_sdfg(sdfg: &Sdfg, parallel: bool, target: Target) -> Result<Plan, CodegenError> {
    let flow = sdfg.loop_and_assigned_symbols();
    let mut body_scalars = BTreeSet::new();
    let mut state_level = BTreeSet::new();
    for s in sdfg.body.states() {
        let g = &sdfg.states[s.index()].graph;
        for n in g.node_ids() {
            match g.node(n) {
                Node::Map(m) => body_scalars.extend(m.body.accessed_data()),
                Node::Access(a) => {
                    state_level.insert(a.to_string());
                }
                _ => {}
            }
        }
    }
    // Names the control flow reads: a scalar among them outlives the map bodies.
    let control = sdflow_ir::uses::control_names(&sdfg.body);
    let mut allocations = Vec::new();
    for (name, d) in &sdfg.arrays {
        if !d.transient() {
            continue;
        }
        for e in d.shape() {
            if let Some(s) = e.free_symbols().iter().find(|s| flow.contains(*s)) {
                return Err(CodegenError::Unsupported(format!(
                    "transient '{name}' has a shape that depends on '{s}', which the control flow assigns"
                )));
            }
        }
        let lifetime = match d {
            DataDesc::Array(a) if a.storage == Storage::Local && parallel => Lifetime::PerWorker,
            DataDesc::Scalar { .. }
                if body_scalars.contains(name)
                    && !state_level.contains(name)
                    && !control.contains(name) =>
            {
                Lifetime::BodyLocal
            }
            _ if parallel => Lifetime::Persistent,
            _ => Lifetime::PerCall,
        };
        allocations.push(Allocation {
            name: name.clone(),
            dtype: d.dtype(),
            shape: d.shape().to_vec(),
            lifetime,
        });
    }
    let body = plan_block(sdfg, &sdfg.body, parallel, target)?;
    Ok(Plan {
        name: sdfg.name.clone(),
        signature: Signature::of(sdfg),
        parallel,
        target,
        allocations,
        flow_symbols: flow.into_iter().collect(),
        body,
    })
}

/// Scalars (not symbols) read by the expressions: values host control flow needs from the
/// dataflow.
fn host_reads(sdfg: &Sdfg, es: &[&SymExpr]) -> Vec<String> {
    let mut out = BTreeSet::new();
    for e in es {
        for n in e.free_symbols() {
            if sdfg.symbols.contains_key(&n) {
                continue;
            }
            if let Some(DataDesc::Scalar { .. }) = sdfg.arrays.get(&n) {
                out.insert(n);
            }
        }
    }
    out.into_iter().collect()
}

fn plan_block(
    sdfg: &Sdfg,
    b: &Block,
    parallel: bool,
    target: Target,
) -> Result<Flow, CodegenError> {
    Ok(match b {
        Block::State(id) => Flow::State(plan_state(sdfg, *id, parallel, target)?),
        Block::Seq(items) => Flow::Seq(
            items
                .iter()
                .map(|i| plan_block(sdfg, i, parallel, target))
                .collect::<Result<_, _>>()?,
        ),
        Block::Loop(l) => Flow::Loop {
            var: l.var.clone(),
            init: l.init.clone(),
            cond: l.cond.clone(),
            update: l.update.clone(),
            body: Box::new(plan_block(sdfg, &l.body, parallel, target)?),
            host_reads: host_reads(sdfg, &[&l.init, &l.cond, &l.update]),
        },
        Block::If(i) => Flow::If {
            cond: i.cond.clone(),
            then: Box::new(plan_block(sdfg, &i.then, parallel, target)?),
            otherwise: Box::new(plan_block(sdfg, &i.otherwise, parallel, target)?),
            host_reads: host_reads(sdfg, &[&i.cond]),
        },
        Block::Assign(a) => {
            let exprs: Vec<&SymExpr> = a.iter().map(|(_, e)| e).collect();
            Flow::Assign {
                assignments: a.clone(),
                host_reads: host_reads(sdfg, &exprs),
            }
        }
    })
}

/// Whether connector `conn` of nested-SDFG node `n` (in `df`, a graph of `sdfg`) is passed
/// by reference: the callee reads the caller's container itself instead of a copy. So it
/// is when the callee only reads it (no out-edge, no write inside), its memlet is the
/// whole of a caller array of the callee container's type and rank, and the callee's
/// shape and strides are the caller's under the symbol mapping. A call made at every
/// point of a map (DaCe's `if_stmt`, which GT4Py's optimized programs keep inside maps,
/// taking whole fields) then moves nothing; copying a whole field per point would make
/// the cost grow with the square of the grid. Every backend's printer asks this.
pub fn passed_by_reference(sdfg: &Sdfg, df: &Dataflow, n: NodeId, conn: &str) -> bool {
    let Node::Nested(ns) = df.node(n) else {
        return false;
    };
    if df
        .out_edges(n)
        .into_iter()
        .any(|e| df.edge(e).src_conn.as_deref() == Some(conn))
    {
        return false;
    }
    let ins: Vec<_> = df
        .in_edges(n)
        .into_iter()
        .filter(|&e| df.edge(e).dst_conn.as_deref() == Some(conn))
        .collect();
    let [e] = ins.as_slice() else { return false };
    let m = &df.edge(*e).memlet;
    let Some((outer, inner)) = plain_arrays(sdfg, ns, conn, m) else {
        return false;
    };
    if inner.shape.len() != outer.shape.len() {
        return false;
    }
    let whole = m.subset.0.is_empty()
        || (m.subset.rank() == outer.shape.len()
            && m.subset.0.iter().zip(&outer.shape).all(|(d, n)| {
                matches!(d, sdflow_ir::Dim::Range { start, end, step }
                    if start.as_int() == Some(0)
                        && step.as_int() == Some(1)
                        && end.simplify() == n.simplify())
            }));
    let mapped = |e: &SymExpr| e.substitute(&ns.symbol_mapping).simplify();
    let same = |a: &[SymExpr], b: &[SymExpr]| {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| mapped(x) == y.simplify())
    };
    whole
        && same(&inner.shape, &outer.shape)
        && same(&inner.strides, &outer.strides)
        && !ns.sdfg.writes(conn)
}

/// The caller's array memlet `m` names and the callee's array of connector `conn`, when a
/// view of one can stand for the other: plain (no write-conflict resolution, no second
/// subset), the callee's an argument of the caller's element type and of rank one or more.
fn plain_arrays<'a>(
    sdfg: &'a Sdfg,
    ns: &'a sdflow_ir::NestedSdfg,
    conn: &str,
    m: &Memlet,
) -> Option<(&'a sdflow_ir::Array, &'a sdflow_ir::Array)> {
    let (Some(DataDesc::Array(outer)), Some(DataDesc::Array(inner))) =
        (sdfg.arrays.get(&m.data), ns.sdfg.arrays.get(conn))
    else {
        return None;
    };
    (m.wcr.is_none()
        && m.other_subset.is_none()
        && !inner.transient
        && inner.dtype == outer.dtype
        && !inner.shape.is_empty())
    .then_some((outer, inner))
}

/// Whether connector `conn` of nested-SDFG node `n` can be passed as a view of the
/// caller's array where the callee's conditions are covered by its map's
/// (`bounds::callee_condition` held): its memlet is a unit-step box of one caller array
/// (a GT4Py scan's column, `tmp[i, 0:K]`), read, written or both (then the same box
/// both ways), without a write-conflict resolution; the callee's array, of the same
/// type, has the box's extents (its dimensions of one index left out, or kept as extents
/// of 1) and the caller's strides in those dimensions, under the symbol mapping, extents
/// compared as element counts (`max(0, e)`); and no other connector of the call names
/// the caller's array. The callee then reads and writes the caller's elements where a
/// copy would have put them: the same values, in the same places, without a buffer
/// allocated, filled and written back at every point. Under the map's condition the
/// box lies inside the caller's array and every subscript of the callee inside the
/// callee's extents, that is inside the box. What differs is only a callee that stops
/// with an error after writing part of its box: it leaves those writes, where the
/// interpreter writes nothing back (`docs/backend-cpu.md`, what differs by design).
pub fn window_by_reference(sdfg: &Sdfg, df: &Dataflow, n: NodeId, conn: &str) -> bool {
    let Node::Nested(ns) = df.node(n) else {
        return false;
    };
    let ins: Vec<EdgeId> = df
        .in_edges(n)
        .into_iter()
        .filter(|&e| df.edge(e).dst_conn.as_deref() == Some(conn))
        .collect();
    let outs: Vec<EdgeId> = df
        .out_edges(n)
        .into_iter()
        .filter(|&e| df.edge(e).src_conn.as_deref() == Some(conn))
        .collect();
    let m = match (ins.as_slice(), outs.as_slice()) {
        ([e], []) | ([], [e]) => &df.edge(*e).memlet,
        ([a], [b]) if df.edge(*a).memlet == df.edge(*b).memlet => &df.edge(*a).memlet,
        _ => return false,
    };
    let Some((outer, inner)) = plain_arrays(sdfg, ns, conn, m) else {
        return false;
    };
    if m.subset.rank() != outer.shape.len() || inner.strides.len() != inner.shape.len() {
        return false;
    }
    // Only this connector names the caller's array.
    let others = df
        .in_edges(n)
        .into_iter()
        .filter(|&e| df.edge(e).dst_conn.as_deref() != Some(conn))
        .chain(
            df.out_edges(n)
                .into_iter()
                .filter(|&e| df.edge(e).src_conn.as_deref() != Some(conn)),
        )
        .any(|e| df.edge(e).memlet.data == m.data);
    if others {
        return false;
    }
    // The box's dimensions as (extent, the caller's stride), ranges alone or all.
    let mut ranges = Vec::new();
    let mut all = Vec::new();
    for (k, d) in m.subset.0.iter().enumerate() {
        let stride = outer.strides.get(k).cloned().unwrap_or(SymExpr::Int(1));
        match d {
            sdflow_ir::Dim::Range { start, end, step } if step.as_int() == Some(1) => {
                let ext = end.sub(start);
                ranges.push((ext.clone(), stride.clone()));
                all.push((ext, stride));
            }
            sdflow_ir::Dim::Index(_) => all.push((SymExpr::Int(1), stride)),
            _ => return false,
        }
    }
    let count = |e: &SymExpr| SymExpr::max(&SymExpr::Int(0), e);
    let mapped = |e: &SymExpr| e.substitute(&ns.symbol_mapping).simplify();
    let fits = |dims: &[(SymExpr, SymExpr)]| {
        dims.len() == inner.shape.len()
            && dims.iter().zip(inner.shape.iter().zip(&inner.strides)).all(
                |((ext, stride), (n, s))| {
                    count(&mapped(n)) == count(ext)
                        && (mapped(s) == stride.simplify() || count(ext) == SymExpr::Int(1))
                },
            )
    };
    fits(&ranges) || fits(&all)
}

/// Whether a map body (at any depth) calls a nested SDFG that combines into one of its
/// arguments with a write-conflict resolution inside it (DaCe's frontend writes
/// `total += x` in a map so, the outer edges without one). A nested call copies its
/// arguments in and out, so two iterations doing it at once would lose updates: such a
/// map runs on one thread.
pub fn nested_accumulates(body: &Dataflow) -> bool {
    body.node_ids().into_iter().any(|n| match body.node(n) {
        Node::Map(m) => nested_accumulates(&m.body),
        Node::Nested(ns) => sdfg_accumulates(&ns.sdfg),
        _ => false,
    })
}

/// Whether some write in `sdfg` (map bodies and nested calls included) to one of its
/// non-transient containers carries a write-conflict resolution.
fn sdfg_accumulates(sdfg: &Sdfg) -> bool {
    fn graph(sdfg: &Sdfg, df: &Dataflow) -> bool {
        df.edge_ids().into_iter().any(|e| {
            let m = &df.edge(e).memlet;
            m.wcr.is_some() && sdfg.arrays.get(&m.data).is_some_and(|d| !d.transient())
        }) || df.node_ids().into_iter().any(|n| match df.node(n) {
            Node::Map(m) => graph(sdfg, &m.body),
            Node::Nested(ns) => sdfg_accumulates(&ns.sdfg),
            _ => false,
        })
    }
    sdfg.states.iter().any(|st| graph(sdfg, &st.graph))
}

/// The source and destination subsets of a copy from `src` to `dst` (an empty subset is
/// the whole container).
pub fn copy_subsets(sdfg: &Sdfg, src: &str, dst: &str, m: &Memlet) -> (Subset, Subset) {
    let full = |d: &str| Subset::full(sdfg.arrays.get(d).map(|x| x.shape()).unwrap_or(&[]));
    let s_sub = if m.subset.0.is_empty() {
        full(src)
    } else {
        m.subset.clone()
    };
    let d_sub = match &m.other_subset {
        Some(o) if !o.0.is_empty() => o.clone(),
        Some(_) => full(dst),
        None if m.subset.0.is_empty() => full(dst),
        None => m.subset.clone(),
    };
    (s_sub, d_sub)
}

/// The copies into node `n` of a state (its in-edges from access nodes), in order.
fn copies_into(df: &Dataflow, n: NodeId) -> Vec<EdgeId> {
    df.in_edges(n)
        .into_iter()
        .filter(|e| df.node(df.endpoints(*e).0).as_access().is_some())
        .collect()
}

/// The one copy into access node `n` when it comes from another container (a copy a grid
/// covers, one thread per element); `None` for several copies into the node or a copy
/// within one container (which may overlap: it keeps the buffered one-thread form).
pub fn grid_copy(df: &Dataflow, n: NodeId) -> Option<EdgeId> {
    let dst = df.node(n).as_access()?;
    match copies_into(df, n).as_slice() {
        [e] if df.node(df.endpoints(*e).0).as_access() != Some(dst) => Some(*e),
        _ => None,
    }
}

/// The copies into access node `n` of a state when there are several, each from another
/// container and without a write-conflict resolution, in the order they run: on a grid,
/// one grid each, one after another. `None` otherwise (one copy is [`grid_copy`]'s).
pub fn grid_copies(df: &Dataflow, n: NodeId) -> Option<Vec<EdgeId>> {
    let dst = df.node(n).as_access()?;
    let copies = copies_into(df, n);
    (copies.len() > 1
        && copies.iter().all(|&e| {
            df.node(df.endpoints(e).0).as_access() != Some(dst) && df.edge(e).memlet.wcr.is_none()
        }))
    .then_some(copies)
}

/// Whether a team shares the copies into access node `n` (container `dst`) of a state:
/// each is a loop nest ([`copy_loop_dims`]) between two different containers without a
/// write-conflict resolution.
fn shared_copies(sdfg: &Sdfg, df: &Dataflow, n: NodeId, dst: &str) -> bool {
    let copies: Vec<(&str, &Memlet)> = copies_into(df, n)
        .into_iter()
        .filter_map(|e| Some((df.node(df.endpoints(e).0).as_access()?, &df.edge(e).memlet)))
        .collect();
    !copies.is_empty()
        && copies.iter().all(|&(src, m)| {
            let (s_sub, d_sub) = copy_subsets(sdfg, src, dst, m);
            src != dst
                && m.wcr.is_none()
                && copy_loop_dims(sdfg, src, &s_sub, dst, &d_sub).is_some()
        })
}

/// The dimensions a copy from `s_sub` of `src` to `d_sub` of `dst` loops over, on each
/// side: those whose size is not the constant 1, when both sides have as many and their
/// sizes are equal in order. `None` otherwise (a copy that reshapes, or a container
/// without dimensions whose subset has some), which the flat order handles.
pub fn copy_loop_dims(
    sdfg: &Sdfg,
    src: &str,
    s_sub: &Subset,
    dst: &str,
    d_sub: &Subset,
) -> Option<(Vec<usize>, Vec<usize>)> {
    let dims = |data: &str, subset: &Subset| {
        let rank = sdfg.arrays.get(data).map_or(0, DataDesc::rank);
        if (rank == 0) != (subset.rank() == 0) {
            return None;
        }
        Some(
            (0..subset.rank())
                .filter(|&k| subset.0[k].size().simplify().as_int() != Some(1))
                .collect::<Vec<_>>(),
        )
    };
    let (sk, dk) = (dims(src, s_sub)?, dims(dst, d_sub)?);
    let same = sk.len() == dk.len()
        && sk.iter().zip(&dk).all(|(&a, &b)| {
            s_sub.0[a]
                .size()
                .sub(&d_sub.0[b].size())
                .simplify()
                .as_int()
                == Some(0)
        });
    same.then_some((sk, dk))
}

/// Whether some edge in `body` (map bodies at any depth) combines into container `data`
/// with a write-conflict resolution.
fn combines_into(body: &Dataflow, data: &str) -> bool {
    body.edge_ids().into_iter().any(|e| {
        let m = &body.edge(e).memlet;
        m.wcr.is_some() && m.data == data
    }) || body.graph.node_weights().any(|n| match n {
        Node::Map(m) => combines_into(&m.body, data),
        _ => false,
    })
}

/// The grid of step `n` of kind `kind` ([`Step::grid`]).
fn grid_of(sdfg: &Sdfg, df: &Dataflow, n: NodeId, kind: &StepKind) -> Option<Vec<SymExpr>> {
    match (kind, df.node(n)) {
        (StepKind::ParallelMap { .. }, Node::Map(m)) => Some(
            m.ranges[..independent_depth(m)]
                .iter()
                .map(|r| r.size())
                .collect(),
        ),
        (StepKind::Copy { .. }, Node::Access(dst)) => {
            let e = grid_copy(df, n)?;
            let src = df.node(df.endpoints(e).0).as_access()?;
            let (s_sub, _) = copy_subsets(sdfg, src, dst, &df.edge(e).memlet);
            Some(s_sub.0.iter().map(|d| d.size()).collect())
        }
        (StepKind::Reduce, Node::Library(LibraryNode::Reduce(r))) => {
            // The input's axes that are kept: one thread per output element.
            let input = df
                .in_edges(n)
                .into_iter()
                .map(|e| df.edge(e))
                .find(|e| e.dst_conn.as_deref() == Some("in"))?;
            let isub = if input.memlet.subset.0.is_empty() {
                Subset::full(sdfg.arrays.get(&input.memlet.data)?.shape())
            } else {
                input.memlet.subset.clone()
            };
            let kept = (0..isub.rank()).filter(|k| r.axes.as_ref().is_some_and(|a| !a.contains(k)));
            Some(kept.map(|k| isub.0[k].size()).collect())
        }
        _ => None,
    }
}

/// Whether node `n` of a state is work (not an access node without copies into it).
pub fn is_step(df: &Dataflow, n: NodeId) -> bool {
    !matches!(df.node(n), Node::Access(_))
        || df
            .in_edges(n)
            .into_iter()
            .any(|e| df.node(df.endpoints(e).0).as_access().is_some())
}

/// How many leading parameters of a map have ranges that use no outer parameter (so
/// their points form one box that can be flattened): all, or the position of the first
/// range that uses an outer parameter.
pub fn independent_depth(m: &sdflow_ir::MapScope) -> usize {
    (1..m.params.len())
        .find(|&k| {
            let r = &m.ranges[k];
            m.params[..k]
                .iter()
                .any(|p| r.start.mentions(p) || r.end.mentions(p) || r.step.mentions(p))
        })
        .unwrap_or(m.params.len())
}

/// How many outer parameters of a parallel map collapse into one loop on the CPU: the
/// independent ones but the innermost (which stays a contiguous, vectorizable loop), at
/// least one.
pub fn collapse_depth(m: &sdflow_ir::MapScope) -> usize {
    independent_depth(m)
        .min(m.params.len().saturating_sub(1))
        .max(1)
}

fn plan_state(
    sdfg: &Sdfg,
    id: StateId,
    parallel: bool,
    target: Target,
) -> Result<StatePlan, CodegenError> {
    // What every step's check policy is decided with.
    let statics = crate::args::static_ints(sdfg);
    let flow = sdfg.loop_and_assigned_symbols();
    let st = &sdfg.states[id.index()];
    let df = &st.graph;
    let order = df
        .topological_order()
        .map_err(|_| CodegenError::Unsupported("a state's graph has a cycle".into()))?;
    let reach = df.reachability();
    let mut steps: Vec<Step> = Vec::new();
    for n in order {
        if !is_step(df, n) {
            continue;
        }
        let waits: Vec<usize> = if parallel {
            steps
                .iter()
                .enumerate()
                .filter(|(_, s)| reach.as_ref().is_none_or(|r| r.reaches(s.node, n)))
                .map(|(k, _)| k)
                .collect()
        } else {
            Vec::new()
        };
        let node = df.node(n);
        let (kind, label) = match node {
            Node::Map(m)
                if parallel
                    && m.schedule != Schedule::Sequential
                    && !nested_accumulates(&m.body) =>
            {
                let coarse = m
                    .body
                    .node_ids()
                    .into_iter()
                    .any(|x| matches!(m.body.node(x), Node::Map(_)));
                let min_points = match target {
                    Target::Team { .. } if coarse => 2,
                    Target::Team {
                        parallel_min_points,
                    } => parallel_min_points,
                    Target::Grid => 1,
                };
                let collapse = collapse_depth(m);
                // Checked per row where a team shares the outer loops and an inner loop
                // stays (of the map's own, or the maps of its body): only then is there a
                // row to check before it.
                let row_checks = match target {
                    Target::Team { .. } if collapse < m.params.len() || coarse => {
                        rows::row_checks(sdfg, m, collapse).filter(|c| !c.is_empty())
                    }
                    _ => None,
                };
                let (row_checks, strips) = match row_checks {
                    Some(c) => {
                        let strips =
                            (collapse == 1 && rows::strips(sdfg, m)).then_some(rows::Strip::Outer);
                        (Some(c), strips)
                    }
                    // The tables read at a point of the inner loop: checked per strip
                    // of it, or at each point.
                    None if matches!(target, Target::Team { .. }) && collapse == 1 => {
                        match rows::inner_strips(sdfg, m) {
                            Some(c) => (Some(c), Some(rows::Strip::Inner)),
                            None => (None, None),
                        }
                    }
                    None => (None, None),
                };
                (
                    StepKind::ParallelMap {
                        collapse,
                        min_points,
                        row_checks,
                        strips,
                    },
                    m.label.clone(),
                )
            }
            Node::Map(m) => (StepKind::SequentialMap, m.label.clone()),
            Node::Tasklet(t) => (StepKind::Tasklet, t.name.clone()),
            Node::Access(a) => (
                StepKind::Copy {
                    // On a grid, one copy is the step's grid; several are one grid each.
                    shared: parallel
                        && match target {
                            Target::Team { .. } => shared_copies(sdfg, df, n, a),
                            Target::Grid => grid_copies(df, n).is_some(),
                        },
                },
                a.to_string(),
            ),
            Node::Library(LibraryNode::Reduce(_)) => (StepKind::Reduce, node.describe()),
            Node::Library(LibraryNode::HaloExchange(h)) => {
                if !parallel {
                    return Err(CodegenError::Unsupported(format!(
                        "state '{}' of nested SDFG '{}' exchanges halos: an exchange is collective and runs only at a program's top level (inline the nested SDFG)",
                        st.name, sdfg.name
                    )));
                }
                if let sdflow_ir::Decomposition::Unstructured { global, owner, .. } =
                    &h.decomposition
                {
                    for list in [global, owner] {
                        let bad = match sdfg.arrays.get(list) {
                            Some(d) if d.transient() => Some("a transient"),
                            Some(_) if sdfg.writes(list) => Some("written by the program"),
                            Some(_) => None,
                            None => Some("not a container of the program"),
                        };
                        if let Some(why) = bad {
                            return Err(CodegenError::Unsupported(format!(
                                "state '{}' exchanges halos by the list '{list}', which is {why}: the compiled exchange reads its lists once per call, so they must be arguments the program only reads",
                                st.name
                            )));
                        }
                    }
                }
                (
                    StepKind::ExchangeStart(exchange::Exchange {
                        id: 0,
                        fields: exchange::exchanged_fields(df, n),
                        decomposition: h.decomposition.clone(),
                    }),
                    "halo exchange".to_string(),
                )
            }
            Node::Nested(ns) => (
                StepKind::Nested(Box::new(plan_sdfg(&ns.sdfg, false, target)?)),
                ns.sdfg.name.clone(),
            ),
        };
        let mut writes: Vec<Write> = Vec::new();
        for e in df.out_edges(n) {
            let m = &df.edge(e).memlet;
            if matches!(node, Node::Access(_)) {
                continue;
            }
            if !writes.iter().any(|w| w.data == m.data && w.wcr == m.wcr) {
                // A map body may combine into a container its outer edge writes plainly
                // (DaCe's programs propagate no resolution outward): atomic all the same.
                let inside = match node {
                    Node::Map(mp) => combines_into(&mp.body, &m.data),
                    _ => false,
                };
                writes.push(Write {
                    data: m.data.clone(),
                    wcr: m.wcr,
                    atomic: parallel && (m.wcr.is_some() || inside),
                });
            }
        }
        if let Node::Access(a) = node {
            for e in df.in_edges(n) {
                let m = &df.edge(e).memlet;
                if df.node(df.endpoints(e).0).as_access().is_some()
                    && !writes.iter().any(|w| w.data == *a && w.wcr == m.wcr)
                {
                    writes.push(Write {
                        data: a.to_string(),
                        wcr: m.wcr,
                        atomic: parallel && m.wcr.is_some(),
                    });
                }
            }
        }
        let grid = if parallel && target == Target::Grid {
            grid_of(sdfg, df, n, &kind)
        } else {
            None
        };
        let jam = match (target, node) {
            (Target::Team { .. }, Node::Map(m)) => jam::Jam::of(sdfg, &m.body),
            _ => None,
        };
        let check = if matches!(kind, StepKind::ExchangeStart(_)) {
            // Its loops are over the fields' own extents, checked when the program
            // starts (`sdflow_init`).
            CheckPolicy::Never
        } else {
            CheckPolicy::of(
                sdfg,
                bounds::node_condition(sdfg, df, n),
                &statics,
                &flow,
                parallel,
            )
        };
        // The callees of a top-level map body: checked once, with the map, rather than
        // at every call; a condition only the control flow can evaluate keeps their own.
        let callees = match (parallel, node) {
            (true, Node::Map(_)) => match CheckPolicy::of(
                sdfg,
                bounds::callee_condition(sdfg, df, n),
                &statics,
                &flow,
                parallel,
            ) {
                CheckPolicy::AtRun(_) => CheckPolicy::Always,
                p => p,
            },
            _ => CheckPolicy::Always,
        };
        steps.push(Step {
            node: n,
            label,
            kind,
            waits,
            writes,
            check,
            grid,
            jam,
            part: None,
            lag: None,
            callees,
        });
    }
    if parallel && matches!(target, Target::Team { .. }) {
        lag::mark(sdfg, df, &mut steps);
    }
    Ok(StatePlan {
        id,
        name: st.name.clone(),
        steps,
    })
}
