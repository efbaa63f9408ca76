//! Random valid programs for property tests (feature `testkit`).
//!
//! [`generate`] builds a random, valid and well-defined SDFG from a seed: stencil chains
//! and DAGs over symbolic grids, elementwise maps, reductions with write-conflict
//! resolution (some through a nested SDFG that accumulates into its argument), indirect
//! gathers, conditionals, loops and nested SDFGs, as [`GenConfig`]
//! allows. Every generated program:
//!
//! - reads only elements that are in bounds and written (arguments are written by the
//!   caller; transients are written earlier on *every* path: writes inside a loop, whose
//!   trip count may be 0, or inside one branch of an `if` do not count after it);
//! - has no write races: in one state a container is written by at most one map, never
//!   read by a map that is not ordered after its writer, and a map never reads what it
//!   writes; the only concurrent writes are `wcr: sum` reductions of integer-valued
//!   floats, which are exact in any order;
//! - computes no NaN or infinity from finite inputs: tasklets use `+ - *`, `min`, `max`,
//!   `select`, `abs` and `sqrt(abs(x) + 1.0)`, and clamp their results to `[-2, 2]`;
//!   with [`GenConfig::allow_edge_arith`] also integer divisions guarded by a lazy
//!   `select`, `0.0 - x` over conversions, negated fused products and math functions of
//!   a static float symbol;
//! - stops with no error, unless [`GenConfig::allow_failing_dead_code`] adds maps whose
//!   unread results divide by zero at some points.
//!
//! Integer arrays are neighbour tables indexing the first dimension of the grid;
//! [`crate::interp::random_bindings`] fills them with valid indices.
//!
//! Why one file of this size: the generator is one grammar of program shapes whose
//! invariants (in bounds, written before read, no races, no NaN) every production must
//! keep together; the expression generator and the result comparison are modules of
//! their own (`testkit/exprs.rs`, `testkit/compare.rs`).

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

mod compare;
pub mod exprs;

pub use compare::{assert_same_arguments, assert_same_results, first_difference};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::StateId;
use crate::builder::SdfgBuilder;
use crate::control::Block;
use crate::data::DataDesc;
use crate::dataflow::Schedule;
use crate::dtype::{DType, Value};
use crate::memlet::Wcr;
use crate::sdfg::Sdfg;
use crate::symexpr::{SymExpr, SymOp};

/// What [`generate`] may produce.
#[derive(Clone, Debug)]
pub struct GenConfig {
    /// Most states in the program (at least 1).
    pub max_states: usize,
    /// Most maps (or nested SDFGs) in one state (at least 1).
    pub max_maps_per_state: usize,
    /// Largest grid rank: 2 or 3.
    pub max_rank: usize,
    /// Most input arrays (at least 1).
    pub max_inputs: usize,
    /// Most output arrays (at least 1).
    pub max_outputs: usize,
    /// Loops `for t = 0; t < T; t + 1` around states.
    pub allow_loops: bool,
    /// Conditionals on the integer symbol `flag`.
    pub allow_ifs: bool,
    /// Nested SDFG nodes.
    pub allow_nested: bool,
    /// Sum reductions into a one-element output with `wcr: sum`.
    pub allow_wcr: bool,
    /// Gathers through an integer neighbour table (indirect subsets).
    pub allow_indirect: bool,
    /// `f32` arrays besides `f64` ones.
    pub allow_f32: bool,
    /// Static (build-time) values for some size symbols.
    pub allow_static: bool,
    /// Shapes that stress the legality of optimizer passes (off by default; the pass
    /// property tests turn it on): loops that write a transient row by row (one element
    /// row per iteration, read on later iterations) with reads inside branches of ifs
    /// inside the loop, and the same through a nested SDFG whose body is an `if`; map
    /// edges that over-approximate what their bodies write; writes with conflict
    /// resolution on the body's edge only (as DaCe writes them); whole copies of
    /// transients whose boundary was never written (they read the interpreter's zeros);
    /// static float and bool symbols forwarded into nested SDFGs; gathers whose row is
    /// a body-local scalar read through a memlet's subset (`src[k[], …]`, GT4Py's
    /// dynamic offsets); stencil maps that list their parameters last first (the
    /// innermost loop over the outermost dimension).
    pub allow_hazards: bool,
    /// Arithmetic where backends and compilers have disagreed (on by default): integer
    /// divisions guarded by a lazy `select` (the division runs only where its divisor
    /// is not zero), `0.0 - x` over conversions and absolute values (where +0.0 must
    /// stay +0.0), negated fused products `-fma(a, b, -(a * b))`, and math functions of
    /// a static float symbol `kappa` (a constant after specialization).
    pub allow_edge_arith: bool,
    /// Maps whose results nothing reads and whose integer division fails at some
    /// points (off by default): the program stops with an error, and the optimizer may
    /// remove the map and with it the error (`docs/transforms.md`, *Errors*).
    pub allow_failing_dead_code: bool,
    /// The shapes GT4Py's lowering produces (off by default; the pass property tests turn
    /// it on): maps over the first dimension alone that copy one column of an input (a
    /// gather with a fixed local index) or compute from it, read by a map over the whole
    /// grid; and a map whose points each write a slab `t[i, j, 0:3]` through an inner map
    /// over a local dimension into a per-worker buffer (or element by element), and
    /// sometimes a field beside it from the slab read back, reduced by a library node in
    /// the map that reads it (a neighbour reduction) and added to that field; a transient
    /// assembled from row pieces in successive states and copied whole into another
    /// (`concat_where`), inside a conditional's arm or a loop at times; `if_stmt`
    /// callees (a branching nested SDFG) called at every point of a map, some reading a
    /// whole field at the point, at the row before or through the program's neighbour
    /// table ([`if_stmt_gather_callee_at`]); a field written
    /// over interior rows, its boundary rows in states of their own, and a band of its
    /// second dimension updated in place over the interior in a later state (ICON's
    /// damping layer); and a quarter
    /// of the grid-shaped transients with padded strides (a composed program's scratch
    /// fields keep their allocator's), drawn from a stream of their own.
    pub allow_gt4py_shapes: bool,
    /// Halo exchanges over this decomposition (off by default): states that
    /// exchange one or two of the fields, between the others; the program is then run on
    /// the decomposition's ranks (`interp::run_ranks`). An unstructured decomposition's
    /// lists are declared as arguments (`i64` global indices, `i32` owners, over the
    /// first dimension), whose values the caller sets.
    pub exchange: Option<crate::dataflow::Decomposition>,
}

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig {
            max_states: 4,
            max_maps_per_state: 3,
            max_rank: 3,
            max_inputs: 3,
            max_outputs: 2,
            allow_loops: true,
            allow_ifs: true,
            allow_nested: true,
            allow_wcr: true,
            allow_indirect: true,
            allow_f32: true,
            allow_static: true,
            allow_hazards: false,
            allow_edge_arith: true,
            allow_failing_dead_code: false,
            allow_gt4py_shapes: false,
            exchange: None,
        }
    }
}

/// Margins `(low, high)` per dimension of the region of a container known to be written.
type Halo = Vec<(i64, i64)>;

/// Containers readable at a program point, with their valid regions.
type Env = BTreeMap<String, Halo>;

/// Which rows (first dimension) a [`Step::Copy`] moves, all of the other dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CopyShape {
    /// The whole container, one copy.
    Whole,
    /// Rows `1:N-1` to the same rows (GT4Py's write-back of an interior into a field).
    Interior,
    /// Rows `0:1` and `1:N` (`min(N, 1)` for empty grids), two copies into one access
    /// node.
    Split,
    /// Rows `0:N-1` to rows `1:N` (offsets that differ on the two sides).
    Shifted,
}

impl CopyShape {
    /// What is valid of the target after the copy, from what is valid of the source.
    fn halo(self, src: &Halo) -> Halo {
        let mut h = src.clone();
        match self {
            CopyShape::Whole | CopyShape::Split => {}
            CopyShape::Interior => h[0] = (h[0].0.max(1), h[0].1.max(1)),
            CopyShape::Shifted => h[0] = (h[0].0 + 1, (h[0].1 - 1).max(0)),
        }
        h
    }

    /// `(source rows, target rows)` of each copy, over a first dimension of size `n`.
    fn rows(self, n: &str) -> Vec<(String, String)> {
        match self {
            CopyShape::Whole => vec![(format!("0:{n}"), format!("0:{n}"))],
            CopyShape::Interior => vec![(range_text(n, 1, 1), range_text(n, 1, 1))],
            CopyShape::Split => vec![
                (format!("0:min({n}, 1)"), format!("0:min({n}, 1)")),
                (format!("min({n}, 1):{n}"), format!("min({n}, 1):{n}")),
            ],
            CopyShape::Shifted => vec![(range_text(n, 0, 1), format!("1:{n}"))],
        }
    }
}

/// A map writing a fresh transient right before it is copied (see [`Step::Copy`]):
/// `src = f(input)` pointwise, over the whole grid (`margin` 0) or its interior
/// (`margin` 1, the map's edge then claiming the whole grid); `wcr`: the write is
/// `wcr: sum` on the body's edge only.
struct Produce {
    input: String,
    code: String,
    margin: i64,
    wcr: bool,
}

/// A vertical scan: `s = 0.25; for k (upwards, or downwards with `down`) { o[k] =
/// f(c[k], s); s = o[k] }`, `c` and `o` the point's columns of the step's `src` and
/// `target` — or of `through`, a grid-shaped transient then copied whole into `target`
/// in the same state, as GT4Py writes a scan's result.
struct Scan {
    down: bool,
    through: Option<String>,
}

/// One planned dataflow step of a state.
enum Step {
    /// A map over the grid shrunk by `domain` margins, reading `reads`, writing `target`.
    Stencil {
        target: String,
        domain: Halo,
        reads: Vec<(String, Vec<i64>)>,
        code: String,
        schedule: Schedule,
    },
    /// `total[0] += floor(clamp(src) * 8)` over the whole grid.
    Reduce { src: String, target: String },
    /// `target[i, ..] = src[tab[i, 0], ..] + src[tab[i, 1], ..]`.
    Gather {
        src: String,
        table: String,
        target: String,
    },
    /// GT4Py's shapes ([`GenConfig::allow_gt4py_shapes`]), writing `target` whole from
    /// `src`. Without `slab`: `t1[i] = src[i, 0, ..]` and `t2[i] = src[i, 0, ..] * 0.5`
    /// over the first dimension, then `target = t1[i] + t2[i] * src` over the grid. With
    /// `slab`: `t1[i, .., l] = src[i, ..] * 0.5` for `l` in `0:3` (an inner map into
    /// the per-worker buffer `t2`, directly or through a scalar `t2_v`, copied whole), then
    /// `target = sum, max or min(t1[i, .., 0:3])`.
    Chain {
        src: String,
        target: String,
        t1: String,
        t2: String,
        slab: bool,
        /// With `slab`: the first map also writes this field, `= t1[i, .., 1] * 0.25 +
        /// src` (the slab read back where it was written), which the second map adds to
        /// the reduction (GT4Py's producers write neighbour slabs and fields at once).
        /// Named `t1_f` or `f_t1`, so that a fusion meets the slab first or the field.
        field: Option<String>,
        /// With `slab`: the first map writes the slab element by element, `t1[i, .., l] =
        /// src[i, ..] * c_l` by three tasklets into one access node (GT4Py's neighbour
        /// map once unrolled), instead of through the inner map.
        unrolled: bool,
        /// Instead: `t1 = target * c + src` over the grid, `c` read from the one-element
        /// `t2` a tasklet without inputs sets to 0.5 (GT4Py's `get_value`), and a state
        /// after this one copies `t1` over `target` (a field updated in place; `target`
        /// is an output).
        in_place: bool,
        /// Instead: one map writes two fields at each point, `t1 = src * 0.5` and, from
        /// `t1` read back and `src`, `t2 = t1 + src` — through a scalar copied into it
        /// (GT4Py writes a reduction's result so) or, every other time, a nested SDFG
        /// called at the point; a second map reads both at the same point, `target =
        /// t1 * t2`.
        pair: bool,
    },
    /// A nested SDFG computing `target = f(src)` elementwise. With `window`, its
    /// connectors are bound to the rows `1:` of both (the callee's indices shifted by
    /// one, as GT4Py binds a field's domain), and row 0 of `target` is left as it was.
    ///
    /// With `scan` (GT4Py's shapes), instead a map over every dimension but the last
    /// calling at each point a nested SDFG that runs a loop along the last one — GT4Py's
    /// vertical scan ([`Scan`]).
    Nested {
        src: String,
        target: String,
        code: String,
        window: bool,
        scan: Option<Scan>,
    },
    /// `target = src` (copies between access nodes) in the rows `shape` says; `halo` is
    /// what is valid of `src`.
    Copy {
        src: String,
        target: String,
        halo: Halo,
        produce: Option<Produce>,
        shape: CopyShape,
    },
    /// `target[i, ..] = f(src[i, ..])` for the rows `start:end` of the first dimension
    /// (whole in the others).
    Rows {
        src: String,
        target: String,
        rows: (String, String),
        code: String,
    },
    /// `target = f(src, target)` in place over the rows `rows` of the first dimension
    /// and the band `band` of the second (whole in the others): GT4Py's update of a band
    /// of levels of a field an earlier map wrote (ICON's damping layer).
    Update {
        src: String,
        target: String,
        rows: (String, String),
        band: (String, String),
        code: String,
    },
    /// A nested SDFG whose body is `if f != 0 { o[0:r] = g(c[0:r]); o[r:] = 0 } else
    /// { o = 0 }`, with `c = src`, `o = target`, `f = var % 2`, `r = var + 1`.
    NestedIf {
        src: String,
        target: String,
        var: String,
        code: String,
    },
}

struct Gen {
    rng: ChaCha8Rng,
    /// Draws the layouts of transients: a stream of its own, so that padding them leaves
    /// the programs' structure as the seed gives it without.
    layout_rng: ChaCha8Rng,
    /// The in-place variant of `assembled` (its own stream: the other draws stay those of
    /// the programs generated before it existed).
    zones_rng: ChaCha8Rng,
    /// Whether and how to write a banded in-place update ([`Gen::banded`]; its own stream,
    /// like `zones_rng`).
    band_rng: ChaCha8Rng,
    /// Whether a nested step is a vertical scan ([`Step::Nested`]; its own stream).
    scan_rng: ChaCha8Rng,
    cfg: GenConfig,
    dims: Vec<&'static str>,
    b: SdfgBuilder,
    inputs: Vec<String>,
    outputs: Vec<String>,
    dtypes: BTreeMap<String, DType>,
    transients: usize,
    maps: usize,
    states_left: usize,
    loops: usize,
    written_outputs: BTreeSet<String>,
    table: Option<String>,
    total: Option<String>,
    /// Labels of maps whose out-edges claim the whole container (hazards).
    widened: BTreeSet<String>,
    /// Labels of maps whose write keeps its `wcr: sum` on the body's edge only.
    inner_wcr: BTreeSet<String>,
    /// The caller's float and bool symbols forwarded to nested SDFGs are declared.
    scalars: bool,
    /// The value of the static float symbol `kappa` (with `allow_edge_arith`).
    kappa: Option<f64>,
}

const PARAMS: [&str; 3] = ["i", "j", "k"];

/// A random valid, well-defined program (see the module documentation); the same seed
/// and configuration always give the same program.
pub fn generate(seed: u64, cfg: &GenConfig) -> Sdfg {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let rank = if cfg.max_rank >= 3 && rng.random_bool(0.3) {
        3
    } else {
        2
    };
    let dims: Vec<&'static str> = ["N", "M", "K"][..rank].to_vec();
    let mut b = SdfgBuilder::new(&format!("gen_{seed:x}"));
    for d in &dims {
        if cfg.allow_static && rng.random_bool(0.2) {
            b.static_symbol(d, Value::I64(rng.random_range(4..8)));
        } else {
            b.symbol(d, DType::I64);
        }
    }
    let mut g = Gen {
        rng,
        layout_rng: ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_1a70),
        zones_rng: ChaCha8Rng::seed_from_u64(seed ^ 0x20e5_b4c4),
        band_rng: ChaCha8Rng::seed_from_u64(seed ^ 0xba2d_0c1e),
        scan_rng: ChaCha8Rng::seed_from_u64(seed ^ 0x5ca4_c011),
        cfg: cfg.clone(),
        dims,
        b,
        inputs: Vec::new(),
        outputs: Vec::new(),
        dtypes: BTreeMap::new(),
        transients: 0,
        maps: 0,
        states_left: cfg.max_states.max(1),
        loops: 0,
        written_outputs: BTreeSet::new(),
        table: None,
        total: None,
        widened: BTreeSet::new(),
        inner_wcr: BTreeSet::new(),
        scalars: false,
        kappa: None,
    };
    if cfg.allow_edge_arith && cfg.allow_static {
        let v = g.rng.random_range(0.1..1.5);
        g.b.static_symbol("kappa", Value::F64(v));
        g.kappa = Some(v);
    }
    let n_in = g.rng.random_range(1..=cfg.max_inputs.max(1));
    for k in 0..n_in {
        let name = format!("in{k}");
        g.declare(&name, false);
        g.inputs.push(name);
    }
    let n_out = g.rng.random_range(1..=cfg.max_outputs.max(1));
    for k in 0..n_out {
        let name = format!("out{k}");
        g.declare(&name, false);
        g.outputs.push(name);
    }
    if let Some(crate::dataflow::Decomposition::Unstructured { global, owner, .. }) = &cfg.exchange
    {
        // The lists of an unstructured exchange: each cell's global index and owner
        // (the caller gives them values that partition the cells).
        g.b.array(global, DType::I64, [g.dims[0]]);
        g.b.array(owner, DType::I32, [g.dims[0]]);
    }
    if cfg.allow_indirect && g.rng.random_bool(0.4) {
        g.b.array("tab", DType::I32, [g.dims[0], "2"]);
        g.table = Some("tab".into());
    }
    if cfg.allow_wcr && g.rng.random_bool(0.4) {
        g.b.array("total", DType::F64, ["1"]);
        g.total = Some("total".into());
    }
    let mut env: Env = BTreeMap::new();
    let full: Halo = vec![(0, 0); g.dims.len()];
    for a in g.inputs.iter().chain(&g.outputs) {
        env.insert(a.clone(), full.clone());
    }
    let mut body = Vec::new();
    while g.states_left > 0 {
        body.push(g.top_item(&mut env));
    }
    if g.written_outputs.is_empty() {
        // Make sure the program computes something visible.
        let target = g.outputs[0].clone();
        let step = g.stencil_to(&env, &target, &BTreeSet::new());
        body.push(g.emit_state(vec![step]));
    }
    // Appended last, from a stream of its own: the programs before it stay as they were.
    if cfg.allow_gt4py_shapes && g.band_rng.random_bool(0.4) {
        let band = g.banded(&mut env);
        body.push(band);
    }
    g.b.body(Block::Seq(body));
    let arg_order: Vec<String> = g.inputs.iter().chain(&g.outputs).cloned().collect();
    let refs: Vec<&str> = arg_order.iter().map(String::as_str).collect();
    g.b.arg_order(&refs);
    let (widened, inner_wcr) = (g.widened, g.inner_wcr);
    let mut sdfg = g.b.build();
    hazard_edges(&mut sdfg, &widened, &inner_wcr);
    sdfg
}

/// Widens the out-edges of the maps labelled in `widened` to their whole containers, and
/// drops the conflict resolution from the out-edges of those in `inner_wcr` (their
/// bodies' edges keep it).
fn hazard_edges(sdfg: &mut Sdfg, widened: &BTreeSet<String>, inner_wcr: &BTreeSet<String>) {
    let shapes: BTreeMap<String, Vec<crate::SymExpr>> = sdfg
        .arrays
        .iter()
        .map(|(k, d)| (k.clone(), d.shape().to_vec()))
        .collect();
    for st in &mut sdfg.states {
        let df = &mut st.graph;
        for n in df.node_ids() {
            let label = match df.node(n) {
                crate::Node::Map(m) => m.label.clone(),
                _ => continue,
            };
            for e in df.out_edges(n) {
                let m = &mut df.graph[e].memlet;
                if widened.contains(&label) {
                    m.subset = crate::Subset::full(&shapes[&m.data]);
                }
                if inner_wcr.contains(&label) {
                    m.wcr = None;
                }
            }
        }
    }
}

/// Proptest strategy: programs [`generate`]d from random seeds.
pub fn arb_sdfg(cfg: GenConfig) -> impl Strategy<Value = Sdfg> {
    any::<u64>().prop_map(move |seed| generate(seed, &cfg))
}

fn name_seed(name: &str) -> u64 {
    // FNV-1a: a fixed hash, independent of the standard library's hasher.
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, c| {
        (h ^ c as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Small values for the program's runtime symbols (sizes in `4..10`, `T` in `0..4`,
/// `flag` 0 or 1), chosen deterministically from the program's name. Symbols with a
/// static value and loop variables are left out.
pub fn sample_symbols(sdfg: &Sdfg) -> BTreeMap<String, Value> {
    let mut rng = ChaCha8Rng::seed_from_u64(name_seed(&sdfg.name));
    let assigned = sdfg.loop_and_assigned_symbols();
    let mut out = BTreeMap::new();
    for (name, sym) in &sdfg.symbols {
        if sym.value.is_some() || assigned.contains(name) {
            continue;
        }
        let v: i64 = match name.as_str() {
            "T" => rng.random_range(0..4),
            "flag" => rng.random_range(0..2),
            _ => rng.random_range(4..10),
        };
        out.insert(name.clone(), Value::I64(v).cast(sym.dtype));
    }
    out
}

/// Like [`sample_symbols`], with the size symbols in `0..4`: grids without interior
/// points (or without points at all), where shapes like `N - 2` would be negative.
pub fn sample_small_symbols(sdfg: &Sdfg) -> BTreeMap<String, Value> {
    let mut rng = ChaCha8Rng::seed_from_u64(name_seed(&sdfg.name) ^ 0x5a11);
    let mut out = sample_symbols(sdfg);
    for (name, v) in out.iter_mut() {
        if !matches!(name.as_str(), "T" | "flag") && v.dtype().is_int() {
            *v = Value::I64(rng.random_range(0..4)).cast(v.dtype());
        }
    }
    out
}

/// The generator's `total` (the container its reductions and write-conflict sums add
/// into) rounded down to an integral start value: the values added are integral too, so
/// parallel sums, which combine in any order, stay exact and compare bit for bit.
pub fn make_total_integral(b: &mut crate::interp::Bindings) {
    if let Some(t) = b.arrays.get("total") {
        let values: Vec<Value> = t
            .values()
            .into_iter()
            .map(|v| Value::F64(v.as_f64().floor()).cast(t.dtype()))
            .collect();
        if let Some(t) = crate::interp::HostArray::from_values(t.dtype(), t.shape(), &values) {
            b.arrays.insert("total".into(), t);
        }
    }
}

fn str_refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn offset_text(p: &str, o: i64) -> String {
    match o {
        0 => p.to_string(),
        o if o > 0 => format!("{p} + {o}"),
        o => format!("{p} - {}", -o),
    }
}

fn range_text(dim: &str, lo: i64, hi: i64) -> String {
    if hi == 0 {
        format!("{lo}:{dim}")
    } else {
        format!("{lo}:{dim} - {hi}")
    }
}

impl Gen {
    fn rank(&self) -> usize {
        self.dims.len()
    }

    /// A new grid-shaped transient, `tmp<k>`, declared. With GT4Py's shapes, one in four
    /// keeps padded strides (rows of `last + 3` elements; a one-dimensional one every
    /// second element), as a composed program's scratch fields keep their allocator's:
    /// its storage spans more than the product of its extents.
    fn fresh_transient(&mut self) -> String {
        let name = format!("tmp{}", self.transients);
        self.transients += 1;
        self.declare(&name, true);
        if self.cfg.allow_gt4py_shapes && self.layout_rng.random_bool(0.25) {
            let rank = self.dims.len();
            let mut strides = vec![SymExpr::Int(1); rank];
            if rank == 1 {
                strides[0] = SymExpr::Int(2);
            }
            for d in (0..rank.saturating_sub(1)).rev() {
                let next = SymExpr::parse(self.dims[d + 1]).unwrap_or(SymExpr::Int(1));
                strides[d] = if d + 2 == rank {
                    next.add(&SymExpr::Int(3))
                } else {
                    strides[d + 1].mul(&next)
                };
            }
            self.b.strides(&name, strides);
        }
        name
    }

    fn declare(&mut self, name: &str, transient: bool) {
        let dtype = if self.cfg.allow_f32 && self.rng.random_bool(0.2) {
            DType::F32
        } else {
            DType::F64
        };
        let dims = self.dims.clone();
        if transient {
            self.b.transient(name, dtype, dims);
        } else {
            self.b.array(name, dtype, dims);
        }
        self.dtypes.insert(name.to_string(), dtype);
    }

    /// One element of the top-level sequence: a state, or a loop or conditional around
    /// states. Only plain states extend what is known to be written afterwards.
    fn top_item(&mut self, env: &mut Env) -> Block {
        if let Some(d) = self.cfg.exchange.clone()
            && self.rng.random_bool(0.3)
            && let Some(b) = self.exchange(d)
        {
            return b;
        }
        let r = self.rng.random_range(0..10);
        if self.cfg.allow_hazards
            && self.cfg.allow_loops
            && r >= 8
            && self.loops < 2
            && self.states_left >= 2
        {
            return self.carried_loop();
        }
        if self.cfg.allow_loops && r < 2 && self.loops < 2 {
            let var = if self.loops == 0 {
                "t".to_string()
            } else {
                format!("t{}", self.loops)
            };
            self.loops += 1;
            self.b.symbol(&var, DType::I64);
            self.b.symbol("T", DType::I64);
            let mut inner = env.clone();
            let body = self.inner_seq(&mut inner);
            return Block::for_loop(
                &var,
                0,
                format!("{var} < T").as_str(),
                format!("{var} + 1").as_str(),
                body,
            );
        }
        if self.cfg.allow_gt4py_shapes && r == 7 && self.states_left >= 3 {
            return self.assembled(env);
        }
        if self.cfg.allow_ifs && r < 4 {
            self.b.symbol("flag", DType::I64);
            let mut a = env.clone();
            let then = self.inner_seq(&mut a);
            let otherwise = if self.states_left > 0 && self.rng.random_bool(0.5) {
                let mut c = env.clone();
                self.inner_seq(&mut c)
            } else {
                Block::empty()
            };
            return Block::if_else("flag", then, otherwise);
        }
        self.state(env)
    }

    /// `for t in 0..min(T, N) { tmp[t, ..] = f(src[t, ..]); if t % 2 == 1 { out[0:t+1, ..]
    /// = g(tmp[0:t+1, ..]) } }`: a transient written one row per iteration and read, in a
    /// branch not taken on every iteration, on later ones. In the nested form the `if` is
    /// the body of a nested SDFG in the writer's state. Nothing after the loop counts on
    /// `tmp` (the trip count may be 0).
    fn carried_loop(&mut self) -> Block {
        let var = if self.loops == 0 {
            "t".to_string()
        } else {
            format!("t{}", self.loops)
        };
        self.loops += 1;
        self.b.symbol(&var, DType::I64);
        self.b.symbol("T", DType::I64);
        let tmp = self.fresh_transient();
        let src = self.inputs[self.rng.random_range(0..self.inputs.len())].clone();
        let out = self.outputs[self.rng.random_range(0..self.outputs.len())].clone();
        self.written_outputs.insert(out.clone());
        let write = Step::Rows {
            src,
            target: tmp.clone(),
            rows: (var.clone(), format!("{var} + 1")),
            code: self.code(&["c0".to_string()]),
        };
        let code = self.code(&["c0".to_string()]);
        let body = if self.cfg.allow_nested && self.rng.random_bool(0.5) {
            self.states_left = self.states_left.saturating_sub(1);
            let use_ = Step::NestedIf {
                src: tmp,
                target: out,
                var: var.clone(),
                code,
            };
            self.emit_state(vec![write, use_])
        } else {
            self.states_left = self.states_left.saturating_sub(2);
            let a = self.emit_state(vec![write]);
            let b = self.emit_state(vec![Step::Rows {
                src: tmp,
                target: out,
                rows: ("0".to_string(), format!("{var} + 1")),
                code,
            }]);
            Block::seq([
                a,
                Block::if_else(format!("{var} % 2 == 1").as_str(), b, Block::empty()),
            ])
        };
        Block::for_loop(
            &var,
            0,
            format!("{var} < T && {var} < {}", self.dims[0]).as_str(),
            format!("{var} + 1").as_str(),
            body,
        )
    }

    /// A state exchanging the halos of one or two of the fields declared so far
    /// over `decomposition`. What is known to be written stays as it was: the halo cells
    /// get the neighbours' values, valid or not.
    /// Over an unstructured decomposition, any field (its first dimension the cells the
    /// lists, declared with the inputs, index); `None` where no field qualifies.
    fn exchange(&mut self, decomposition: crate::dataflow::Decomposition) -> Option<Block> {
        // Fields (not per-worker buffers) of two dimensions or more (one or more when
        // unstructured); the inputs always.
        let min_rank = match decomposition {
            crate::dataflow::Decomposition::Structured { .. } => 2,
            crate::dataflow::Decomposition::Unstructured { .. } => 1,
        };
        let sdfg = self.b.sdfg();
        let cells = crate::SymExpr::sym(self.dims[0]);
        let unstructured = min_rank == 1;
        let names: Vec<String> = self
            .dtypes
            .keys()
            .filter(|n| {
                sdfg.arrays.get(*n).is_some_and(|d| {
                    d.shape().len() >= min_rank
                        && !d.is_body_local()
                        // Unstructured: the cells the lists index.
                        && (!unstructured || d.shape()[0] == cells)
                })
            })
            .cloned()
            .collect();
        if names.is_empty() {
            return None;
        }
        let mut fields = vec![names[self.rng.random_range(0..names.len())].clone()];
        if names.len() > 1 && self.rng.random_bool(0.5) {
            let other = names[self.rng.random_range(0..names.len())].clone();
            if other != fields[0] {
                fields.push(other);
            }
        }
        self.states_left = self.states_left.saturating_sub(1);
        let refs: Vec<&str> = fields.iter().map(String::as_str).collect();
        let label = format!("exchange{}", self.maps);
        self.maps += 1;
        let id = self.b.state(&label, |st| {
            st.halo_exchange(&refs, crate::dataflow::HaloExchange { decomposition });
        });
        Some(Block::State(id))
    }

    /// GT4Py's `concat_where`: a transient `a` assembled from pieces over the rows, one
    /// state each — `a[0:min(N, s)] = f(src)`, `a[min(N, s):N] = g(src)` — then copied
    /// whole into a fresh transient `b` in a state after them; with `allow_ifs`, every
    /// other time inside the arm of a conditional whose other arm copies `src` into `b`
    /// (GT4Py's `if` on a scalar argument, both arms assembling one result), and every
    /// other time `b` is then copied whole into an output (GT4Py's write-back). With
    /// hazards, the pieces may leave the last row unwritten (whose zeros the copy
    /// carries) and `b` may be written whole in a state before. Every third time or so
    /// the source is an output and `b` is copied back into it: GT4Py's in-place update
    /// on a domain in zones (`vn = f(vn)`), the pieces reading the field at the point
    /// they compute, the other arm copying it over unchanged. The copy into the output
    /// is every so often zone by zone instead ([`Gen::zones_back`]).
    fn assembled(&mut self, env: &mut Env) -> Block {
        let full = vec![(0, 0); self.rank()];
        let valid: Vec<String> = env
            .iter()
            .filter(|(_, h)| **h == full)
            .map(|(n, _)| n.clone())
            .collect();
        let fields: Vec<String> = self
            .outputs
            .iter()
            .filter(|o| valid.contains(o))
            .cloned()
            .collect();
        let mut src = valid[self.rng.random_range(0..valid.len())].clone();
        let in_place = !fields.is_empty() && self.zones_rng.random_bool(0.35);
        if in_place {
            src = fields[self.zones_rng.random_range(0..fields.len())].clone();
        }
        let (a, b) = (self.fresh_transient(), self.fresh_transient());
        let n = self.dims[0];
        let split = format!("min({n}, {})", self.rng.random_range(1..=3));
        // Hazards: the pieces leave the last row out (the copy carries `a`'s zeros there
        // into `b`), and `b` is written before (its old values must not show through).
        let hazards = self.cfg.allow_hazards;
        let gap = hazards && self.rng.random_bool(0.35);
        let end = if gap {
            format!("max({split}, {n} - 1)")
        } else {
            n.to_string()
        };
        let mut items = Vec::new();
        if hazards && self.rng.random_bool(0.35) {
            let code = self.code(&["c0".to_string()]);
            items.push(self.emit_state(vec![Step::Rows {
                src: src.clone(),
                target: b.clone(),
                rows: ("0".to_string(), n.to_string()),
                code,
            }]));
            self.states_left = self.states_left.saturating_sub(1);
        }
        let mut pieces = Vec::new();
        for rows in [("0".to_string(), split.clone()), (split, end)] {
            let code = self.code(&["c0".to_string()]);
            pieces.push(self.emit_state(vec![Step::Rows {
                src: src.clone(),
                target: a.clone(),
                rows,
                code,
            }]));
        }
        let copy = |src: &str, target: &str| Step::Copy {
            src: src.to_string(),
            target: target.to_string(),
            halo: full.clone(),
            produce: None,
            shape: CopyShape::Whole,
        };
        pieces.push(self.emit_state(vec![copy(&a, &b)]));
        self.states_left = self.states_left.saturating_sub(3);
        items.push(if self.cfg.allow_ifs && self.rng.random_bool(0.5) {
            self.b.symbol("flag", DType::I64);
            let otherwise = self.emit_state(vec![copy(&src, &b)]);
            Block::if_else("flag", Block::Seq(pieces), otherwise)
        } else {
            Block::Seq(pieces)
        });
        let mut written = full.clone();
        if gap {
            written[0].1 = 1;
        }
        env.insert(b.clone(), written.clone());
        // Hazard: `b`'s last row rewritten after it was read (in a loop, the next
        // iteration's copy must put `a`'s zeros back first).
        let rewrite = gap && self.rng.random_bool(0.5);
        if rewrite || self.rng.random_bool(0.5) || in_place {
            let other = self.outputs[self.rng.random_range(0..self.outputs.len())].clone();
            let out = if in_place { src.clone() } else { other };
            self.written_outputs.insert(out.clone());
            if !rewrite && self.zones_rng.random_bool(0.4) {
                items.extend(self.zones_back(&b, &out, &mut written));
            } else {
                items.push(self.emit_state(vec![copy(&b, &out)]));
                self.states_left = self.states_left.saturating_sub(1);
            }
            env.insert(out, written);
        }
        if rewrite {
            let code = self.code(&["c0".to_string()]);
            items.push(self.emit_state(vec![Step::Rows {
                src,
                target: b,
                rows: (format!("max(0, {n} - 1)"), n.to_string()),
                code,
            }]));
            self.states_left = self.states_left.saturating_sub(1);
        }
        Block::Seq(items)
    }

    /// An output written over the rows `lo:hi` by one map, its other rows (`0:lo`,
    /// `hi:N`) by maps in states of their own (either order, either may be missing), and
    /// then, in a state of its own, a band of its second dimension updated in place over
    /// the same rows: GT4Py's damping layer (`w = …` over the interior, the zones copied,
    /// `w += … where k < nrdmax`). At times a state between reads the field (the update
    /// may not move above it), or the update covers other rows than the first map.
    fn banded(&mut self, env: &mut Env) -> Block {
        let full = vec![(0, 0); self.rank()];
        let out = self.outputs[self.band_rng.random_range(0..self.outputs.len())].clone();
        self.written_outputs.insert(out.clone());
        let valid: Vec<String> = env
            .iter()
            .filter(|(n, h)| **h == full && **n != out)
            .map(|(n, _)| n.clone())
            .collect();
        let pick = |g: &mut Gen| valid[g.band_rng.random_range(0..valid.len())].clone();
        let (n, m) = (self.dims[0], self.dims[1]);
        let lo = format!("min({n}, {})", self.band_rng.random_range(0..=2));
        let hi = format!("max({lo}, {n} - {})", self.band_rng.random_range(0..=2));
        let b0 = format!("min({m}, {})", self.band_rng.random_range(0..=2));
        let band = if self.band_rng.random_bool(0.5) {
            (
                b0.clone(),
                format!("max({b0}, {m} - {})", self.band_rng.random_range(0..=2)),
            )
        } else {
            (
                b0.clone(),
                format!("max({b0}, min({m}, {}))", self.band_rng.random_range(1..=5)),
            )
        };
        let mut items = Vec::new();
        let src = pick(self);
        let code = self.code(&["c0".to_string()]);
        items.push(self.emit_state(vec![Step::Rows {
            src,
            target: out.clone(),
            rows: (lo.clone(), hi.clone()),
            code,
        }]));
        let mut zones = vec![("0".to_string(), lo.clone()), (hi.clone(), n.to_string())];
        if self.band_rng.random_bool(0.5) {
            zones.reverse();
        }
        for rows in zones {
            if self.band_rng.random_bool(0.7) {
                let src = pick(self);
                let code = self.code(&["c0".to_string()]);
                items.push(self.emit_state(vec![Step::Rows {
                    src,
                    target: out.clone(),
                    rows,
                    code,
                }]));
            }
        }
        if self.band_rng.random_bool(0.2) {
            // A state that reads the field between: the update stays below it.
            let t = self.fresh_transient();
            let code = self.code(&["c0".to_string()]);
            items.push(self.emit_state(vec![Step::Rows {
                src: out.clone(),
                target: t.clone(),
                rows: ("0".to_string(), n.to_string()),
                code,
            }]));
            env.insert(t, full);
        }
        let rows = if self.band_rng.random_bool(0.15) {
            ("0".to_string(), n.to_string())
        } else {
            (lo, hi)
        };
        let src = pick(self);
        let code = self.code(&["c0".to_string(), "c1".to_string()]);
        items.push(self.emit_state(vec![Step::Update {
            src,
            target: out,
            rows,
            band,
            code,
        }]));
        self.states_left = self.states_left.saturating_sub(items.len());
        Block::Seq(items)
    }

    /// `b` handed to `out` zone by zone, as GT4Py's second `concat_where` of two in a row
    /// does: a map computes one zone of rows from `b` at the point it writes, copies
    /// carry the rest over unchanged, each in a state of its own, in either order. With
    /// hazards, the copy may stop one row short of the end (that row keeps `out`'s old
    /// value: `written` says so) or carry all rows after the map (putting `b`'s values
    /// back over the map's zone).
    fn zones_back(&mut self, b: &str, out: &str, written: &mut Halo) -> Vec<Block> {
        let n = self.dims[0];
        let rest: String = self.dims[1..].iter().map(|d| format!(", 0:{d}")).collect();
        let split = format!("min({n}, {})", self.zones_rng.random_range(1..=3));
        let map_low = self.zones_rng.random_bool(0.5);
        let hazards = self.cfg.allow_hazards;
        let (map_rows, mut copy_rows) = if map_low {
            (("0".to_string(), split.clone()), (split, n.to_string()))
        } else {
            ((split.clone(), n.to_string()), ("0".to_string(), split))
        };
        let copy_first = self.zones_rng.random_bool(0.5);
        if hazards && map_low && self.zones_rng.random_bool(0.3) {
            // The copy stops one row short: `out`'s last row keeps its old value.
            copy_rows.1 = format!("max({}, {n} - 1)", copy_rows.0);
            written[0].1 = written[0].1.max(1);
        }
        if hazards && !copy_first && self.zones_rng.random_bool(0.2) {
            // All rows, after the map: the map's zone ends with `b`'s values.
            copy_rows = ("0".to_string(), n.to_string());
        }
        let code = self.code(&["c0".to_string()]);
        let map = self.emit_state(vec![Step::Rows {
            src: b.to_string(),
            target: out.to_string(),
            rows: map_rows,
            code,
        }]);
        let label = format!("s{}_zone", self.maps);
        self.maps += 1;
        let (from, to) = (copy_rows.0, copy_rows.1);
        let id = self.b.state(&label, |st| {
            st.copy(
                &format!("{b}[{from}:{to}{rest}]"),
                &format!("{out}[{from}:{to}{rest}]"),
            );
        });
        self.states_left = self.states_left.saturating_sub(2);
        if copy_first {
            vec![Block::State(id), map]
        } else {
            vec![map, Block::State(id)]
        }
    }

    /// One or two states in sequence, inside a loop or a branch.
    fn inner_seq(&mut self, env: &mut Env) -> Block {
        if self.cfg.allow_gt4py_shapes
            && self.cfg.allow_hazards
            && self.states_left >= 3
            && self.rng.random_bool(0.25)
        {
            return self.assembled(env);
        }
        let n = self.rng.random_range(1..=2).min(self.states_left.max(1));
        Block::Seq((0..n).map(|_| self.state(env)).collect())
    }

    /// Plans and builds one state; `env` gains what it writes.
    fn state(&mut self, env: &mut Env) -> Block {
        self.states_left = self.states_left.saturating_sub(1);
        let n = self
            .rng
            .random_range(1..=self.cfg.max_maps_per_state.max(1));
        let mut read_here: BTreeSet<String> = BTreeSet::new();
        let mut written_here: BTreeSet<String> = BTreeSet::new();
        let mut steps = Vec::new();
        for _ in 0..n {
            let step = self.step(env, &read_here, &written_here);
            let (reads, target, halo) = self.effect(&step);
            read_here.extend(reads);
            written_here.insert(target.clone());
            if let Some(h) = halo {
                let keep_old = env.get(&target).is_some_and(|old| {
                    // Keep the old region unless the new one contains it.
                    !old.iter().zip(&h).all(|(o, n)| n.0 <= o.0 && n.1 <= o.1)
                });
                if !keep_old {
                    env.insert(target, h);
                }
            }
            steps.push(step);
        }
        self.emit_state(steps)
    }

    /// Containers a step reads, the one it writes, and the region it leaves valid (for
    /// grid-shaped targets).
    fn effect(&self, s: &Step) -> (Vec<String>, String, Option<Halo>) {
        let full = vec![(0, 0); self.rank()];
        match s {
            Step::Stencil {
                target,
                domain,
                reads,
                ..
            } => (
                reads.iter().map(|r| r.0.clone()).collect(),
                target.clone(),
                Some(domain.clone()),
            ),
            Step::Reduce { src, target } => (vec![src.clone()], target.clone(), None),
            Step::Gather { src, table, target } => {
                (vec![src.clone(), table.clone()], target.clone(), Some(full))
            }
            Step::Chain { src, target, .. } => (vec![src.clone()], target.clone(), Some(full)),
            Step::Nested {
                src,
                target,
                window,
                ..
            } => {
                let mut valid = full;
                if *window {
                    valid[0].0 = 1;
                }
                (vec![src.clone()], target.clone(), Some(valid))
            }
            Step::Copy {
                src,
                target,
                halo,
                shape,
                ..
            } => (vec![src.clone()], target.clone(), Some(shape.halo(halo))),
            Step::Rows { src, target, .. } | Step::NestedIf { src, target, .. } => {
                (vec![src.clone()], target.clone(), None)
            }
            Step::Update { src, target, .. } => {
                (vec![src.clone(), target.clone()], target.clone(), None)
            }
        }
    }

    /// A container to write: a fresh transient, or an output this state neither read
    /// nor wrote.
    fn target(&mut self, read_here: &BTreeSet<String>, written_here: &BTreeSet<String>) -> String {
        let free: Vec<String> = self
            .outputs
            .iter()
            .filter(|o| !read_here.contains(*o) && !written_here.contains(*o))
            .cloned()
            .collect();
        if !free.is_empty() && self.rng.random_bool(0.45) {
            let o = free[self.rng.random_range(0..free.len())].clone();
            self.written_outputs.insert(o.clone());
            return o;
        }
        self.fresh_transient()
    }

    fn step(
        &mut self,
        env: &Env,
        read_here: &BTreeSet<String>,
        written_here: &BTreeSet<String>,
    ) -> Step {
        let r = self.rng.random_range(0..10);
        let fully_valid: Vec<String> = env
            .iter()
            .filter(|(_, h)| h.iter().all(|m| *m == (0, 0)))
            .map(|(n, _)| n.clone())
            .collect();
        if r == 0
            && let Some(total) = self.total.clone()
            && !written_here.contains(&total)
        {
            let src = self.inputs[self.rng.random_range(0..self.inputs.len())].clone();
            return Step::Reduce { src, target: total };
        }
        if r == 1
            && let Some(table) = self.table.clone()
        {
            // Half of the gathers, where a transient is valid everywhere, read it at the
            // neighbours: a field computed just before (GT4Py's Laplacian read at the
            // neighbours of each cell), which the C backend may run lagged behind its
            // producer.
            let computed: Vec<&String> = fully_valid
                .iter()
                .filter(|n| n.starts_with("tmp"))
                .collect();
            let src = if !computed.is_empty() && self.rng.random_bool(0.5) {
                computed[self.rng.random_range(0..computed.len())].clone()
            } else {
                self.inputs[self.rng.random_range(0..self.inputs.len())].clone()
            };
            let target = self.target(read_here, written_here);
            return Step::Gather { src, table, target };
        }
        if r == 3 && self.cfg.allow_hazards {
            let srcs: Vec<(String, Halo)> = env
                .iter()
                .filter(|(n, _)| n.starts_with("tmp"))
                .map(|(n, h)| (n.clone(), h.clone()))
                .collect();
            let fresh = srcs.is_empty() || self.rng.random_bool(0.6);
            let mut produce = None;
            let picked = if fresh {
                // A transient written here, then copied: what front ends emit for
                // `out[:] = f(in)`.
                let name = self.fresh_transient();
                let input = self.inputs[self.rng.random_range(0..self.inputs.len())].clone();
                let kind = self.rng.random_range(0..3);
                let margin = i64::from(kind == 2);
                produce = Some(Produce {
                    input,
                    code: self.code(&["c0".to_string()]),
                    margin,
                    wcr: kind == 1,
                });
                Some((name, vec![(margin, margin); self.rank()]))
            } else {
                Some(srcs[self.rng.random_range(0..srcs.len())].clone())
            };
            if let Some((src, halo)) = picked {
                let dtype = self.dtypes[&src];
                let outs: Vec<String> = self
                    .outputs
                    .iter()
                    .filter(|o| {
                        !read_here.contains(*o)
                            && !written_here.contains(*o)
                            && self.dtypes[*o] == dtype
                    })
                    .cloned()
                    .collect();
                let target = if !outs.is_empty() && self.rng.random_bool(0.6) {
                    let o = outs[self.rng.random_range(0..outs.len())].clone();
                    self.written_outputs.insert(o.clone());
                    o
                } else {
                    let name = format!("tmp{}", self.transients);
                    self.transients += 1;
                    let dims = self.dims.clone();
                    self.b.transient(&name, dtype, dims);
                    self.dtypes.insert(name.clone(), dtype);
                    name
                };
                let shape = [
                    CopyShape::Whole,
                    CopyShape::Interior,
                    CopyShape::Split,
                    CopyShape::Shifted,
                ][self.rng.random_range(0..4)];
                return Step::Copy {
                    src,
                    target,
                    halo,
                    produce,
                    shape,
                };
            }
        }
        if r == 4 && self.cfg.allow_gt4py_shapes && !fully_valid.is_empty() {
            let target = self.target(read_here, written_here);
            let cands: Vec<&String> = fully_valid.iter().filter(|n| **n != target).collect();
            if !cands.is_empty() {
                let src = cands[self.rng.random_range(0..cands.len())].clone();
                let kind = self.rng.random_range(0..4);
                let in_place = kind == 2 && self.outputs.contains(&target);
                let slab = kind == 1;
                let pair = kind == 3;
                let dtype = if in_place {
                    self.dtypes[&target]
                } else {
                    self.dtypes[&src]
                };
                let (t1, t2) = (
                    format!("tmp{}", self.transients),
                    format!("tmp{}", self.transients + 1),
                );
                self.transients += 2;
                let first = self.dims[0];
                // Decided without a draw, so the other programs stay as they were.
                let field = (slab && (self.transients / 2) % 2 == 1).then(|| {
                    if (self.transients / 8) % 2 == 1 {
                        format!("f_{t1}")
                    } else {
                        format!("{t1}_f")
                    }
                });
                let unrolled = slab && (self.transients / 4) % 2 == 1;
                if in_place {
                    let dims = self.dims.clone();
                    self.b.transient(&t1, dtype, dims);
                    self.b.transient(&t2, dtype, ["1"]);
                } else if pair {
                    let dims = self.dims.clone();
                    self.b.transient(&t1, dtype, dims.clone());
                    self.b.transient(&t2, dtype, dims);
                    self.b.transient_scalar(&format!("{t2}_s"), dtype);
                } else if slab {
                    let mut shape: Vec<&str> = self.dims.clone();
                    shape.push("3");
                    self.b.transient(&t1, dtype, shape);
                    let mut buf = crate::data::Array::new(dtype, vec![SymExpr::Int(3)]);
                    buf.transient = true;
                    buf.storage = crate::data::Storage::Local;
                    self.b.data(&t2, DataDesc::Array(buf));
                    self.b.transient_scalar(&format!("{t1}_sum"), dtype);
                    self.b.transient_scalar(&format!("{t2}_v"), dtype);
                    if let Some(f) = &field {
                        let dims = self.dims.clone();
                        self.b.transient(f, dtype, dims);
                        self.dtypes.insert(f.clone(), dtype);
                    }
                } else {
                    self.b.transient(&t1, dtype, [first]);
                    self.b.transient(&t2, dtype, [first]);
                }
                self.dtypes.insert(t1.clone(), dtype);
                self.dtypes.insert(t2.clone(), dtype);
                return Step::Chain {
                    src,
                    target,
                    t1,
                    t2,
                    slab,
                    field,
                    unrolled,
                    in_place,
                    pair,
                };
            }
        }
        if r == 2 && self.cfg.allow_nested {
            let target = self.target(read_here, written_here);
            let cands: Vec<&String> = fully_valid.iter().filter(|n| **n != target).collect();
            let src = cands[self.rng.random_range(0..cands.len())].clone();
            let code = self.code(&["a".to_string()]);
            // Every other nested step of the hazard programs binds a window (decided
            // without a draw, so the other programs stay as they were).
            let window = self.cfg.allow_hazards && self.maps % 2 == 1;
            let scan = (self.cfg.allow_gt4py_shapes
                && !window
                && self.rank() >= 2
                && self.scan_rng.random_bool(0.5))
            .then(|| {
                let down = self.scan_rng.random_bool(0.5);
                let through = (self.scan_rng.random_bool(0.5)).then(|| {
                    let name = format!("tmp{}", self.transients);
                    self.transients += 1;
                    let dims = self.dims.clone();
                    let dtype = self.dtypes.get(&target).copied().unwrap_or(DType::F64);
                    self.b.transient(&name, dtype, dims);
                    self.dtypes.insert(name.clone(), dtype);
                    name
                });
                Scan { down, through }
            });
            return Step::Nested {
                src,
                target,
                code,
                window,
                scan,
            };
        }
        let target = self.target(read_here, written_here);
        let written = written_here.clone();
        self.stencil_to(env, &target, &written)
    }

    /// A stencil map writing `target`, reading up to three containers valid in `env`.
    fn stencil_to(&mut self, env: &Env, target: &str, _written_here: &BTreeSet<String>) -> Step {
        let rank = self.rank();
        let cands: Vec<(&String, &Halo)> =
            env.iter().filter(|(n, _)| n.as_str() != target).collect();
        let k = self.rng.random_range(1..=3usize).min(cands.len());
        let mut chosen: Vec<(String, Halo)> = Vec::new();
        while chosen.len() < k {
            let (n, h) = cands[self.rng.random_range(0..cands.len())];
            if !chosen.iter().any(|(c, _)| c == n) {
                chosen.push((n.clone(), h.clone()));
            }
        }
        // Domain margins: at least the sources' margins, at most 2.
        let mut domain: Halo = vec![(0, 0); rank];
        for (d, m) in domain.iter_mut().enumerate() {
            let lo = chosen.iter().map(|(_, h)| h[d].0).max().unwrap_or(0);
            let hi = chosen.iter().map(|(_, h)| h[d].1).max().unwrap_or(0);
            let grow = |g: &mut Self, x: i64| {
                if x < 2 && g.rng.random_bool(0.5) {
                    x + 1
                } else {
                    x
                }
            };
            *m = (grow(self, lo), grow(self, hi));
        }
        let mut reads: Vec<(String, Vec<i64>)> = Vec::new();
        for (n, h) in &chosen {
            let count = self.rng.random_range(1..=3);
            for _ in 0..count {
                let offs: Vec<i64> = (0..rank)
                    .map(|d| {
                        let min = -(domain[d].0 - h[d].0).min(1);
                        let max = (domain[d].1 - h[d].1).min(1);
                        self.rng.random_range(min..=max)
                    })
                    .collect();
                if !reads.iter().any(|(m, o)| m == n && *o == offs) {
                    reads.push((n.clone(), offs));
                }
            }
        }
        // An update in place: the target read at the point written, where it holds
        // values over the whole domain (`loop_order` may still reorder such a map).
        if let Some(h) = env.get(target)
            && h.iter().zip(&domain).all(|(v, m)| v.0 <= m.0 && v.1 <= m.1)
            && self.rng.random_bool(0.15)
        {
            reads.push((target.to_string(), vec![0; rank]));
        }
        let conns: Vec<String> = (0..reads.len()).map(|c| format!("c{c}")).collect();
        let code = self.code(&conns);
        let schedule = if self.rng.random_bool(0.2) {
            Schedule::Sequential
        } else {
            Schedule::CpuParallel
        };
        Step::Stencil {
            target: target.to_string(),
            domain,
            reads,
            code,
            schedule,
        }
    }

    fn literal(&mut self) -> &'static str {
        ["0.5", "2.0", "-1.25", "0.125", "3.0", "-0.75"][self.rng.random_range(0..6)]
    }

    fn expr(&mut self, vars: &[String], depth: u32) -> String {
        if depth == 0 || self.rng.random_bool(0.3) {
            return if self.rng.random_bool(0.8) {
                vars[self.rng.random_range(0..vars.len())].clone()
            } else {
                self.literal().to_string()
            };
        }
        let a = self.expr(vars, depth - 1);
        let b = self.expr(vars, depth - 1);
        let edge = if self.cfg.allow_edge_arith { 13 } else { 9 };
        match self.rng.random_range(0..edge) {
            0 => format!("({a} + {b})"),
            1 => format!("({a} - {b})"),
            2 => format!("({a} * {b})"),
            3 => format!("min({a}, {b})"),
            4 => format!("max({a}, {b})"),
            5 => {
                let c = self.expr(vars, depth - 1);
                format!("select({a} < {b}, {c}, {a})")
            }
            6 => format!("sqrt(abs({a}) + 1.0)"),
            7 => format!("abs({a})"),
            8 => format!("({a} * {})", self.literal()),
            9 => {
                let q = format!("i64(floor({a} * 4.0))");
                format!("select({q} != 0, f64(7 // {q}) * 0.125, {b})")
            }
            10 => match self.rng.random_range(0..3) {
                0 => format!("(0.0 - f64(i32({a} * 0.25)))"),
                1 => format!("(0.0 - abs({a} * 0.0))"),
                _ => format!("(0.0 - f64({a} < {b}))"),
            },
            11 => format!("(-fma({a}, {b}, -({a} * {b})))"),
            _ => {
                let f =
                    ["sinh", "cosh", "tanh", "log10", "exp", "sin"][self.rng.random_range(0..6)];
                // A static float symbol, or a literal where there are none.
                let c = self
                    .kappa
                    .map_or_else(|| "0.7".to_string(), |_| "kappa".to_string());
                format!("({f}({c}) * {a})")
            }
        }
    }

    /// Tasklet code reading every connector in `conns`, writing `o`.
    fn code(&mut self, conns: &[String]) -> String {
        let weights: Vec<String> = conns
            .iter()
            .map(|c| format!("{c} * {}", self.literal()))
            .collect();
        let acc = weights.join(" + ");
        let mut vars = conns.to_vec();
        vars.push("acc".to_string());
        let e = self.expr(&vars, 3);
        format!("acc = {acc}; o = min(max(acc + {e}, -2.0), 2.0)")
    }

    /// Builds a state from planned steps.
    fn emit_state(&mut self, steps: Vec<Step>) -> Block {
        let dims = self.dims.clone();
        let rank = dims.len();
        let mut nested = Vec::new();
        let hazards = self.cfg.allow_hazards;
        let scalars = hazards && steps.iter().any(|s| matches!(s, Step::Nested { .. }));
        if scalars && !self.scalars {
            // Scalar parameters the caller forwards to its nested SDFGs.
            self.scalars = true;
            if self.cfg.allow_static && self.rng.random_bool(0.6) {
                self.b.static_symbol("wf", Value::F64(0.75));
            } else {
                self.b.symbol("wf", DType::F64);
            }
            let wb = Value::Bool(self.rng.random_bool(0.5));
            self.b.static_symbol("wb", wb);
        }
        for s in &steps {
            match s {
                Step::Nested {
                    code,
                    scan: Some(scan),
                    ..
                } => nested.push(self.scan_sdfg(code, s, scan.down, scalars)),
                Step::Nested { code, .. } => nested.push(self.inner_sdfg(code, s, scalars)),
                Step::NestedIf { code, .. } => nested.push(self.inner_if_sdfg(code, s)),
                _ => {}
            }
        }
        let first = self.maps;
        // Per step: the map's edges over-approximate its writes; its write's `wcr: sum`
        // is on the body's edge only.
        // A stencil may also write a second, never read transient (a map with a live
        // and a dead output).
        let mut edge_hazards = Vec::new();
        let mut dead_outputs = Vec::new();
        for (k, s) in steps.iter().enumerate() {
            let mut wcr = false;
            let mut dead = None;
            if let (true, Step::Stencil { target, domain, .. }) = (hazards, s) {
                let margins = domain.iter().any(|m| *m != (0, 0));
                let widen = margins && self.rng.random_bool(0.4);
                wcr = target.starts_with("tmp") && self.rng.random_bool(0.25);
                if self.rng.random_bool(0.15) {
                    dead = Some(self.fresh_transient());
                }
                let label = format!("m{}", first + k);
                if widen {
                    self.widened.insert(label.clone());
                }
                if wcr {
                    self.inner_wcr.insert(label);
                }
            }
            if let Step::Copy {
                produce: Some(p), ..
            } = s
            {
                let label = format!("m{}", first + k);
                wcr = p.wcr;
                if p.wcr {
                    self.inner_wcr.insert(label.clone());
                }
                if p.margin > 0 {
                    self.widened.insert(label);
                }
            }
            edge_hazards.push(wcr);
            dead_outputs.push(dead);
        }
        // With hazards, every other gather reads its row through a body-local scalar
        // index (`k = tab[i, 0]`, then `src[k[], …]`), as GT4Py writes a dynamic offset:
        // the scalar is read by a memlet's subset, not only by a connector.
        let dynamic: Vec<Option<String>> = steps
            .iter()
            .enumerate()
            .map(|(k, s)| {
                (hazards && matches!(s, Step::Gather { .. }) && (first + k) % 2 == 1).then(|| {
                    let name = format!("dk{}", first + k);
                    self.b.transient_scalar(&name, DType::I32);
                    name
                })
            })
            .collect();
        // Every other reduction (where nested SDFGs are allowed) accumulates through a
        // nested SDFG: the resolution inside the callee, none on the outer edges, as
        // DaCe's front end writes `total += x` in a map.
        let mut accumulators: Vec<Option<Sdfg>> = steps
            .iter()
            .enumerate()
            .map(|(k, s)| match s {
                Step::Reduce { src, .. } if self.cfg.allow_nested && (first + k) % 2 == 1 => {
                    Some(self.accumulator(src, first + k))
                }
                _ => None,
            })
            .collect();
        self.maps += steps.len();
        // A map whose result nothing reads, dividing by a value that is zero at some
        // points: the program stops there unless the map is removed.
        let failing_dead =
            (self.cfg.allow_failing_dead_code && self.rng.random_bool(0.05)).then(|| {
                let name = self.fresh_transient();
                let src = self.inputs[self.rng.random_range(0..self.inputs.len())].clone();
                (src, name)
            });
        let name = format!("s{first}");
        // Copies a later state makes (fields updated in place).
        let mut copies_after: Vec<(String, String)> = Vec::new();
        let id = self.b.state(&name, |st| {
            if let Some((src, dead)) = &failing_dead {
                let params: Vec<&str> = PARAMS[..rank].to_vec();
                let idx = params.join(", ");
                let ranges: Vec<String> = dims.iter().map(|d| range_text(d, 0, 0)).collect();
                let ranges: Vec<&str> = ranges.iter().map(String::as_str).collect();
                let (inp, out) = (format!("{src}[{idx}]"), format!("{dead}[{idx}]"));
                st.map(&format!("dead{first}"), &params, &ranges, |m| {
                    m.tasklet(
                        &format!("dead{first}"),
                        &[("a", &inp)],
                        &[("o", &out)],
                        "o = f64(7 // i64(floor(a * 3.0)))",
                    );
                });
            }
            let mut nested = nested.into_iter();
            for (k, s) in steps.iter().enumerate() {
                let label = format!("m{}", first + k);
                let params: Vec<&str> = PARAMS[..rank].to_vec();
                let idx = params.join(", ");
                match s {
                    Step::Stencil {
                        target,
                        domain,
                        reads,
                        code,
                        schedule,
                    } => {
                        let ranges: Vec<String> = domain
                            .iter()
                            .zip(&dims)
                            .map(|((lo, hi), d)| range_text(d, *lo, *hi))
                            .collect();
                        let ranges: Vec<&str> = ranges.iter().map(String::as_str).collect();
                        let ins: Vec<(String, String)> = reads
                            .iter()
                            .enumerate()
                            .map(|(c, (a, offs))| {
                                let sub: Vec<String> = offs
                                    .iter()
                                    .zip(&params)
                                    .map(|(o, p)| offset_text(p, *o))
                                    .collect();
                                (format!("c{c}"), format!("{a}[{}]", sub.join(", ")))
                            })
                            .collect();
                        let out = if edge_hazards[k] {
                            format!("{target}[{idx}] (wcr: sum)")
                        } else {
                            format!("{target}[{idx}]")
                        };
                        let (mut outs, mut code) = (vec![("o", out)], code.clone());
                        if let Some(d) = &dead_outputs[k] {
                            outs.push(("o2", format!("{d}[{idx}]")));
                            code.push_str("; o2 = acc");
                        }
                        // Every third stencil of the hazard programs lists its parameters
                        // last first (the iteration order; the memlets name them): its
                        // innermost loop then walks the outermost dimension.
                        let (mut order, mut spans) = (params.clone(), ranges.clone());
                        if hazards && rank >= 2 && (first + k) % 3 == 2 {
                            order.reverse();
                            spans.reverse();
                        }
                        st.map_scheduled(&label, &order, &spans, *schedule, |m| {
                            let ins: Vec<(&str, &str)> =
                                ins.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
                            let outs: Vec<(&str, &str)> =
                                outs.iter().map(|(a, b)| (*a, b.as_str())).collect();
                            m.tasklet(&label, &ins, &outs, &code);
                        });
                    }
                    Step::Reduce { src, target } => {
                        let ranges: Vec<String> =
                            dims.iter().map(|d| range_text(d, 0, 0)).collect();
                        let ranges: Vec<&str> = ranges.iter().map(String::as_str).collect();
                        let inp = format!("{src}[{idx}]");
                        if let Some(acc) = accumulators[k].take() {
                            let out = format!("{target}[0]");
                            st.map(&label, &params, &ranges, |m| {
                                m.nested(acc, &[], &[("c", &inp)], &[("t", &out)]);
                            });
                            continue;
                        }
                        let out = format!("{target}[0] (wcr: sum)");
                        st.map(&label, &params, &ranges, |m| {
                            m.tasklet(
                                &label,
                                &[("c", &inp)],
                                &[("o", &out)],
                                "o = floor(min(max(c, -4.0), 4.0) * 8.0)",
                            );
                        });
                    }
                    Step::Chain {
                        src,
                        target,
                        t1,
                        t2,
                        slab,
                        field,
                        unrolled,
                        in_place,
                        pair,
                    } => {
                        let ranges: Vec<String> =
                            dims.iter().map(|d| range_text(d, 0, 0)).collect();
                        let ranges: Vec<&str> = ranges.iter().map(String::as_str).collect();
                        let here = format!("{src}[{idx}]");
                        let out = format!("{target}[{idx}]");
                        if *in_place {
                            let tmp = format!("{t1}[{idx}]");
                            let half = format!("{t2}[0]");
                            // Every other `f32` one stores an `f64` literal that `f32`
                            // does not hold exactly, which the tasklet converts (GT4Py's
                            // `__tlet_out = 1` into an `i32`).
                            let value = match (self.dtypes[target], k % 2) {
                                (DType::F32, 1) => "o = f32(0.5)",
                                (DType::F32, _) => "o = 0.1",
                                _ => "o = 0.5",
                            };
                            st.tasklet(&format!("{label}_get_value"), &[], &[("o", &half)], value);
                            st.map(&format!("{label}_update"), &params, &ranges, |m| {
                                m.tasklet(
                                    "f",
                                    &[("a", &out), ("b", &here), ("c", &half)],
                                    &[("o", &tmp)],
                                    "o = a * c + b",
                                );
                            });
                            let full: Vec<String> = dims.iter().map(|d| format!("0:{d}")).collect();
                            copies_after.push((
                                format!("{t1}[{}]", full.join(", ")),
                                format!("{target}[{}]", full.join(", ")),
                            ));
                        } else if *pair {
                            let (a1, a2) = (format!("{t1}[{idx}]"), format!("{t2}[{idx}]"));
                            let s = format!("{t2}_s");
                            // Most write the second field through a nested SDFG at
                            // each point (GT4Py's `if` at a point), the others through a
                            // scalar copied into it. Half of those callees hold an `if`
                            // (GT4Py's `if_stmt`, which stays a call: the passes run
                            // inside it).
                            let name = format!("{label}_point");
                            // One in four of the callees reads `src` whole, at the point or
                            // the row before (DaCe's optimized `if_stmt` callees, which
                            // gather from whole fields), its symbols bound to the sizes and
                            // the map's parameters; where the program has a neighbour
                            // table, another one in four reads `src` through it.
                            let seed = name_seed(&name);
                            let gather = match (seed % 4, &self.table) {
                                (3, _) if seed / 4 % 2 == 1 => Some(GatherAt::RowBefore),
                                (3, _) => Some(GatherAt::Point),
                                // The table indexes the grid's first dimension.
                                (1, Some(_)) if dims[0] == self.dims[0] => Some(GatherAt::Table),
                                _ => None,
                            };
                            let table = self
                                .table
                                .clone()
                                .filter(|_| gather == Some(GatherAt::Table));
                            let callee =
                                (k % 2 == 1 || name_seed(&label).is_multiple_of(2)).then(|| {
                                    if let Some(at) = gather {
                                        if_stmt_gather_callee_at(
                                            &name,
                                            self.dtypes[t2],
                                            self.dtypes[src],
                                            rank,
                                            at,
                                        )
                                    } else if seed.is_multiple_of(2) {
                                        let kinds = IfStmtKind::ALL;
                                        let kind = kinds[(seed / 2 % kinds.len() as u64) as usize];
                                        if_stmt_callee_of(&name, self.dtypes[t2], kind)
                                    } else {
                                        point_callee(&name, self.dtypes[t2])
                                    }
                                });
                            let whole: Vec<String> =
                                dims.iter().map(|d| format!("0:{d}")).collect();
                            let whole = format!("{src}[{}]", whole.join(", "));
                            let binds: Vec<(String, String)> = dims
                                .iter()
                                .enumerate()
                                .map(|(d, n)| (format!("n{d}"), n.to_string()))
                                .chain(
                                    params
                                        .iter()
                                        .enumerate()
                                        .map(|(d, p)| (format!("p{d}"), p.to_string())),
                                )
                                .collect();
                            let binds: Vec<(&str, &str)> = binds
                                .iter()
                                .map(|(a, b)| (a.as_str(), b.as_str()))
                                .collect();
                            st.map(&format!("{label}_pair"), &params, &ranges, |m| {
                                m.tasklet("p", &[("a", &here)], &[("o", &a1)], "o = a * 0.5");
                                match callee {
                                    Some(callee) if gather.is_some() => {
                                        let tab = table
                                            .as_ref()
                                            .filter(|_| gather == Some(GatherAt::Table))
                                            .map(|t| format!("{t}[0:{}, 0:2]", dims[0]));
                                        let mut ins =
                                            vec![("a", a1.as_str()), ("b", &here), ("w", &whole)];
                                        if let Some(t) = &tab {
                                            ins.push(("tab", t));
                                        }
                                        m.nested(callee, &binds, &ins, &[("o", &a2)]);
                                    }
                                    Some(callee) => {
                                        m.nested(
                                            callee,
                                            &[],
                                            &[("a", &a1), ("b", &here)],
                                            &[("o", &a2)],
                                        );
                                    }
                                    None => {
                                        m.tasklet(
                                            "q",
                                            &[("a", &a1), ("b", &here)],
                                            &[("o", &s)],
                                            "o = a + b",
                                        );
                                        m.copy(&s, &a2);
                                    }
                                }
                            });
                            st.map(&label, &params, &ranges, |m| {
                                m.tasklet(
                                    "u",
                                    &[("a", &a1), ("b", &a2)],
                                    &[("o", &out)],
                                    "o = a * b",
                                );
                            });
                        } else if *slab {
                            let slab_at = format!("{t1}[{idx}, 0:3]");
                            let buf = format!("{t2}[0:3]");
                            let sum = format!("{t1}_sum");
                            // Every other one writes each neighbour's value through a
                            // scalar of the inner map's own (GT4Py's double-write
                            // remover), the others directly.
                            let via = (k % 2 == 1).then(|| format!("{t2}_v"));
                            let f_at = field.as_ref().map(|f| format!("{f}[{idx}]"));
                            st.map(&format!("{label}_nbh"), &params, &ranges, |m| {
                                if *unrolled {
                                    for (l, c) in ["0.5", "0.25", "0.75"].iter().enumerate() {
                                        m.tasklet(
                                            &format!("v{l}"),
                                            &[("a", &here)],
                                            &[("o", &format!("{t1}[{idx}, {l}]"))],
                                            &format!("o = a * {c}"),
                                        );
                                    }
                                } else {
                                    let at = format!("{t2}[l]");
                                    m.map("local", &["l"], &["0:3"], |inner| {
                                        let to = via.clone().unwrap_or_else(|| at.clone());
                                        inner.tasklet(
                                            "v",
                                            &[("a", &here)],
                                            &[("o", &to)],
                                            "o = a * 0.5",
                                        );
                                        if let Some(v) = &via {
                                            inner.copy(v, &at);
                                        }
                                    });
                                    m.copy(&buf, &slab_at);
                                }
                                if let Some(f_at) = &f_at {
                                    m.tasklet(
                                        "f",
                                        &[("a", &format!("{t1}[{idx}, 1]")), ("b", &here)],
                                        &[("o", f_at)],
                                        "o = a * 0.25 + b",
                                    );
                                }
                            });
                            // Sums from zero, maxima from the first element, minima
                            // from a start value.
                            let (op, start) = match k % 3 {
                                0 => (Wcr::Sum, Some(Value::F64(0.0))),
                                1 => (Wcr::Max, None),
                                _ => (Wcr::Min, Some(Value::F64(1.5))),
                            };
                            // Every other one copies the sum into the field (as GT4Py
                            // does; a copy keeps the type), the others pass it through a
                            // tasklet.
                            let same_type = self.dtypes[target] == self.dtypes[src];
                            st.map(&format!("{label}_red"), &params, &ranges, |m| {
                                m.reduce(op, None, start, &slab_at, &sum);
                                if let Some(f_at) = &f_at {
                                    m.tasklet(
                                        "w",
                                        &[("a", &sum), ("b", f_at)],
                                        &[("o", &out)],
                                        "o = a + b",
                                    );
                                } else if k % 2 == 0 && same_type {
                                    m.copy(&sum, &out);
                                } else {
                                    m.tasklet("w", &[("a", &sum)], &[("o", &out)], "o = a");
                                }
                            });
                        } else {
                            let zeros: Vec<&str> = vec!["0"; dims.len() - 1];
                            let column = format!("{src}[i, {}]", zeros.join(", "));
                            let line = [range_text(dims[0], 0, 0)];
                            let line: Vec<&str> = line.iter().map(String::as_str).collect();
                            let (a1, a2) = (format!("{t1}[i]"), format!("{t2}[i]"));
                            st.map(&format!("{label}_copy"), &["i"], &line, |m| {
                                m.tasklet("c", &[("a", &column)], &[("o", &a1)], "o = a");
                            });
                            st.map(&format!("{label}_line"), &["i"], &line, |m| {
                                m.tasklet("l", &[("a", &column)], &[("o", &a2)], "o = a * 0.5");
                            });
                            st.map(&label, &params, &ranges, |m| {
                                m.tasklet(
                                    "u",
                                    &[("a", &a1), ("b", &a2), ("c", &here)],
                                    &[("o", &out)],
                                    "o = a + b * c",
                                );
                            });
                        }
                    }
                    Step::Gather { src, table, target } => {
                        let ranges: Vec<String> =
                            dims.iter().map(|d| range_text(d, 0, 0)).collect();
                        let ranges: Vec<&str> = ranges.iter().map(String::as_str).collect();
                        let rest = params[1..].join(", ");
                        let b = format!("{src}[{table}[i, 1], {rest}]");
                        let out = format!("{target}[{idx}]");
                        if let Some(dk) = &dynamic[k] {
                            let a = format!("{src}[{dk}[], {rest}]");
                            let t = format!("{table}[i, 0]");
                            st.map(&label, &params, &ranges, |m| {
                                m.tasklet("index", &[("t", &t)], &[("k", dk)], "k = t");
                                m.tasklet(
                                    &label,
                                    &[("a", &a), ("b", &b), ("k", dk)],
                                    &[("o", &out)],
                                    "o = (a + b) * 0.5",
                                );
                            });
                            continue;
                        }
                        let a = format!("{src}[{table}[i, 0], {rest}]");
                        // Like the stencils, every third gather of the hazard programs
                        // lists its parameters last first: the cells innermost.
                        let (mut order, mut spans) = (params.clone(), ranges.clone());
                        if hazards && params.len() >= 2 && (first + k) % 3 == 2 {
                            order.reverse();
                            spans.reverse();
                        }
                        st.map(&label, &order, &spans, |m| {
                            m.tasklet(
                                &label,
                                &[("a", &a), ("b", &b)],
                                &[("o", &out)],
                                "o = (a + b) * 0.5",
                            );
                        });
                    }
                    Step::Nested {
                        src,
                        target,
                        scan: Some(scan),
                        ..
                    } => {
                        let inner: Sdfg = match nested.next() {
                            Some(x) => x,
                            None => continue,
                        };
                        let last = dims[rank - 1];
                        let cols: Vec<&str> = params[..rank - 1].to_vec();
                        let col = format!("{}, 0:{last}", cols.join(", "));
                        let written = scan.through.as_ref().unwrap_or(target);
                        let (inp, out) = (format!("{src}[{col}]"), format!("{written}[{col}]"));
                        let ranges: Vec<String> =
                            dims[..rank - 1].iter().map(|d| format!("0:{d}")).collect();
                        let ranges: Vec<&str> = ranges.iter().map(String::as_str).collect();
                        let mut syms: Vec<(&str, &str)> = vec![("n", last)];
                        if scalars {
                            syms.extend([("w", "wf"), ("b_", "wb")]);
                        }
                        st.map(&label, &cols, &ranges, |m| {
                            m.nested(inner, &syms, &[("c", &inp)], &[("o", &out)]);
                        });
                        if let Some(t) = &scan.through {
                            let all: Vec<String> = dims.iter().map(|d| format!("0:{d}")).collect();
                            let all = all.join(", ");
                            st.copy(&format!("{t}[{all}]"), &format!("{target}[{all}]"));
                        }
                    }
                    Step::Nested {
                        src,
                        target,
                        window,
                        ..
                    } => {
                        let inner: Sdfg = match nested.next() {
                            Some(x) => x,
                            None => continue,
                        };
                        let mut full: Vec<String> = dims.iter().map(|d| format!("0:{d}")).collect();
                        let mut sizes: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
                        if *window {
                            // Rows 1: (none where the first extent is 0 or 1).
                            full[0] = format!("1:max(1, {})", dims[0]);
                            sizes[0] = format!("max(1, {}) - 1", dims[0]);
                        }
                        let inp = format!("{src}[{}]", full.join(", "));
                        let out = format!("{target}[{}]", full.join(", "));
                        let inner_dims = ["n", "m", "l"];
                        let syms: Vec<(&str, &str)> = inner_dims
                            .iter()
                            .zip(&sizes)
                            .map(|(a, b)| (*a, b.as_str()))
                            .collect();
                        let mut syms: Vec<(&str, &str)> = syms;
                        if scalars {
                            syms.extend([("w", "wf"), ("b_", "wb")]);
                        }
                        st.nested(inner, &syms, &[("a", &inp)], &[("b", &out)]);
                    }
                    Step::Copy {
                        src,
                        target,
                        produce,
                        shape,
                        ..
                    } => {
                        if let Some(p) = produce {
                            let ranges: Vec<String> = dims
                                .iter()
                                .map(|d| range_text(d, p.margin, p.margin))
                                .collect();
                            let ranges: Vec<&str> = ranges.iter().map(String::as_str).collect();
                            let inp = format!("{}[{idx}]", p.input);
                            let out = if edge_hazards[k] {
                                format!("{src}[{idx}] (wcr: sum)")
                            } else {
                                format!("{src}[{idx}]")
                            };
                            st.map(&label, &params, &ranges, |m| {
                                m.tasklet(&label, &[("c0", &inp)], &[("o", &out)], &p.code);
                            });
                        }
                        let rest: Vec<String> =
                            dims[1..].iter().map(|d| format!(", 0:{d}")).collect();
                        let rest = rest.concat();
                        for (from, to) in shape.rows(dims[0]) {
                            st.copy(
                                &format!("{src}[{from}{rest}]"),
                                &format!("{target}[{to}{rest}]"),
                            );
                        }
                    }
                    Step::Rows {
                        src,
                        target,
                        rows,
                        code,
                    } => {
                        let mut ranges = vec![format!("{}:{}", rows.0, rows.1)];
                        ranges.extend(dims[1..].iter().map(|d| format!("0:{d}")));
                        let ranges: Vec<&str> = ranges.iter().map(String::as_str).collect();
                        let inp = format!("{src}[{idx}]");
                        let out = format!("{target}[{idx}]");
                        st.map(&label, &params, &ranges, |m| {
                            m.tasklet(&label, &[("c0", &inp)], &[("o", &out)], code);
                        });
                    }
                    Step::Update {
                        src,
                        target,
                        rows,
                        band,
                        code,
                    } => {
                        let mut ranges = vec![
                            format!("{}:{}", rows.0, rows.1),
                            format!("{}:{}", band.0, band.1),
                        ];
                        ranges.extend(dims[2..].iter().map(|d| format!("0:{d}")));
                        let ranges: Vec<&str> = ranges.iter().map(String::as_str).collect();
                        let inp = format!("{src}[{idx}]");
                        let old = format!("{target}[{idx}]");
                        st.map(&label, &params, &ranges, |m| {
                            m.tasklet(&label, &[("c0", &inp), ("c1", &old)], &[("o", &old)], code);
                        });
                    }
                    Step::NestedIf {
                        src, target, var, ..
                    } => {
                        let inner: Sdfg = match nested.next() {
                            Some(x) => x,
                            None => continue,
                        };
                        let full: Vec<String> = dims.iter().map(|d| format!("0:{d}")).collect();
                        let inp = format!("{src}[{}]", full.join(", "));
                        let out = format!("{target}[{}]", full.join(", "));
                        let (r, f) = (format!("{var} + 1"), format!("{var} % 2"));
                        let mut syms: Vec<(&str, &str)> = ["n", "m", "l"]
                            .iter()
                            .zip(&dims)
                            .map(|(a, b)| (*a, *b))
                            .collect();
                        syms.extend([("r", r.as_str()), ("f", f.as_str())]);
                        st.nested(inner, &syms, &[("c", &inp)], &[("o", &out)]);
                    }
                }
            }
        });
        if copies_after.is_empty() {
            return Block::State(id);
        }
        let after = self.b.state(&format!("{name}_copy"), |st| {
            for (from, to) in &copies_after {
                st.copy(from, to);
            }
        });
        Block::seq([Block::State(id), Block::State(after)])
    }

    /// Declares the static symbol `kappa` in a callee whose code reads it.
    fn declare_kappa(&self, b: &mut SdfgBuilder, code: &str) {
        if let Some(v) = self.kappa
            && code.contains("kappa")
        {
            b.static_symbol("kappa", Value::F64(v));
        }
    }

    /// The callee of a nested step: `b = f(a)` elementwise over `n × m (× l)`.
    fn inner_sdfg(&self, code: &str, step: &Step, scalars: bool) -> Sdfg {
        let rank = self.rank();
        let dims: Vec<&str> = ["n", "m", "l"][..rank].to_vec();
        let dtype_of = |conn: &str| {
            let outer = match (step, conn) {
                (Step::Nested { src, .. }, "a") => src.as_str(),
                (Step::Nested { target, .. }, _) => target.as_str(),
                _ => "",
            };
            self.dtypes.get(outer).copied().unwrap_or(DType::F64)
        };
        let mut b = SdfgBuilder::new(&format!("inner{}", self.maps));
        for d in &dims {
            b.symbol(d, DType::I64);
        }
        self.declare_kappa(&mut b, code);
        // With scalar parameters: `o = select(b_, f(a) * w, f(a))`.
        let code = if scalars {
            b.symbol("w", DType::F64).symbol("b_", DType::Bool);
            format!(
                "{}; o = select(b_, o0 * w, o0)",
                code.replacen("; o = ", "; o0 = ", 1)
            )
        } else {
            code.to_string()
        };
        let code = code.as_str();
        b.array("a", dtype_of("a"), dims.clone());
        b.array("b", dtype_of("b"), dims.clone());
        let params: Vec<&str> = PARAMS[..rank].to_vec();
        let ranges: Vec<String> = dims.iter().map(|d| format!("0:{d}")).collect();
        let ranges: Vec<&str> = ranges.iter().map(String::as_str).collect();
        let idx = params.join(", ");
        let (ia, ob) = (format!("a[{idx}]"), format!("b[{idx}]"));
        b.state("body", |s| {
            s.map("inner", &params, &ranges, |m| {
                m.tasklet("f", &[("a", &ia)], &[("o", &ob)], code);
            });
        });
        b.build()
    }

    /// The callee of a scan step ([`Step::Nested`] with `scan`): `s = 0.25; for k in 0:n
    /// (or from `n - 1` down to 0, `down`) { o[k] = f(c[k]) + s / 2, clamped; s = o[k] }`,
    /// the carried value in a transient scalar copied in a state of its own, as GT4Py
    /// lowers a `scan_operator`.
    fn scan_sdfg(&self, code: &str, step: &Step, down: bool, scalars: bool) -> Sdfg {
        let Step::Nested { src, target, .. } = step else {
            unreachable!("called for nested steps")
        };
        let dtype = |c: &String| self.dtypes.get(c).copied().unwrap_or(DType::F64);
        let mut b = SdfgBuilder::new(&format!("scan{}", self.maps));
        b.symbol("n", DType::I64).symbol("k", DType::I64);
        self.declare_kappa(&mut b, code);
        let code = code.replacen("; o = min(max(acc + ", "; r = min(max(acc + s * 0.5 + ", 1);
        let code = if scalars {
            b.symbol("w", DType::F64).symbol("b_", DType::Bool);
            format!("{code}; o = select(b_, r * w, r); u = o")
        } else {
            format!("{code}; o = r; u = r")
        };
        b.array("c", dtype(src), ["n"])
            .array("o", dtype(target), ["n"])
            .transient_scalar("s", dtype(target))
            .transient_scalar("t", dtype(target));
        let init = b.state("init", |st| {
            st.tasklet("init", &[], &[("s", "s")], "s = 0.25");
        });
        let step = b.state("step", |st| {
            st.tasklet(
                "f",
                &[("a", "c[k]"), ("s", "s")],
                &[("o", "o[k]"), ("u", "t")],
                &code,
            );
        });
        let carry = b.state("carry", |st| {
            st.copy("t", "s");
        });
        let body = Block::seq([Block::State(step), Block::State(carry)]);
        let scan = if down {
            Block::for_loop("k", "n - 1", "k >= 0", "k - 1", body)
        } else {
            Block::for_loop("k", 0, "k < n", "k + 1", body)
        };
        b.body(Block::seq([Block::State(init), scan]));
        b.build()
    }

    /// The callee of a reduction that accumulates through a nested SDFG: `t[0] +=
    /// floor(clamp(c[0]) * 8)`, the resolution on its own edge.
    fn accumulator(&self, src: &str, k: usize) -> Sdfg {
        let mut b = SdfgBuilder::new(&format!("acc{k}"));
        b.array(
            "c",
            self.dtypes.get(src).copied().unwrap_or(DType::F64),
            ["1"],
        )
        .array("t", DType::F64, ["1"]);
        b.state("body", |s| {
            s.tasklet(
                "f",
                &[("c", "c[0]")],
                &[("o", "t[0] (wcr: sum)")],
                "o = floor(min(max(c, -4.0), 4.0) * 8.0)",
            );
        });
        b.build()
    }

    /// The callee of a [`Step::NestedIf`]: `if f != 0 { o[0:r] = g(c[0:r]); o[r:n] = 0 }
    /// else { o = 0 }`, rows in the first dimension.
    fn inner_if_sdfg(&self, code: &str, step: &Step) -> Sdfg {
        let rank = self.rank();
        let dims: Vec<&str> = ["n", "m", "l"][..rank].to_vec();
        let Step::NestedIf { src, target, .. } = step else {
            unreachable!("called for nested ifs")
        };
        let dtype = |c: &String| self.dtypes.get(c).copied().unwrap_or(DType::F64);
        let mut b = SdfgBuilder::new(&format!("cond{}", self.maps));
        for d in &dims {
            b.symbol(d, DType::I64);
        }
        b.symbol("r", DType::I64).symbol("f", DType::I64);
        self.declare_kappa(&mut b, code);
        b.array("c", dtype(src), dims.clone());
        b.array("o", dtype(target), dims.clone());
        let params: Vec<&str> = PARAMS[..rank].to_vec();
        let idx = params.join(", ");
        let (ic, oo) = (format!("c[{idx}]"), format!("o[{idx}]"));
        let ranges = |first: &str| {
            let mut r = vec![first.to_string()];
            r.extend(dims[1..].iter().map(|d| format!("0:{d}")));
            r
        };
        let (used, rest, all) = (ranges("0:r"), ranges("r:n"), ranges("0:n"));
        let (used, rest, all) = (str_refs(&used), str_refs(&rest), str_refs(&all));
        let then = b.state("then", |s| {
            s.map("use", &params, &used, |m| {
                m.tasklet("g", &[("c0", &ic)], &[("o", &oo)], code);
            });
            s.map("rest", &params, &rest, |m| {
                m.tasklet("zero", &[], &[("o", &oo)], "o = 0.0");
            });
        });
        let other = b.state("else", |s| {
            s.map("zero", &params, &all, |m| {
                m.tasklet("zero", &[], &[("o", &oo)], "o = 0.0");
            });
        });
        b.body(Block::if_else(
            "f != 0",
            Block::State(then),
            Block::State(other),
        ));
        b.build()
    }
}

/// The callee a [`Step::Chain`] pair calls at every point: `o[0] = a[0] + b[0]`.
fn point_callee(name: &str, dtype: DType) -> Sdfg {
    let mut b = SdfgBuilder::new(name);
    for c in ["a", "b", "o"] {
        b.array(c, dtype, ["1"]);
    }
    b.state("body", |s| {
        s.tasklet(
            "f",
            &[("a", "a[0]"), ("b", "b[0]")],
            &[("o", "o[0]")],
            "o = a + b",
        );
    });
    b.build()
}

/// `o = a > b ? w[p0, …] * 2 : a + b`, an `if_stmt` callee of the shape DaCe's optimizer
/// leaves in GT4Py's programs: besides its one-element operands it takes a whole field `w`
/// of `rank` dimensions (extents `n0`, `n1`, … and the point `p0`, `p1`, … are symbols the
/// call binds), and the branch taken reads it at the point — or, `before`, at the row
/// before, where there is one (`a > b && p0 > 0`): a read the caller cannot run at every
/// point, so the call stays, and whose in-bounds condition fails at the first row.
pub fn if_stmt_gather_callee(
    name: &str,
    dtype: DType,
    field: DType,
    rank: usize,
    before: bool,
) -> Sdfg {
    let at = if before {
        GatherAt::RowBefore
    } else {
        GatherAt::Point
    };
    if_stmt_gather_callee_at(name, dtype, field, rank, at)
}

/// Where the branch of [`if_stmt_gather_callee_at`] reads its whole field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GatherAt {
    /// `w[p0, p1, …]`.
    Point,
    /// `w[p0 - 1, p1, …]`, where `p0 > 0`.
    RowBefore,
    /// `w[t[p0, 1], p1, …]`: through a neighbour table `t` (`i32`, `n0 × 2`) the call
    /// passes whole, as DaCe's `if_stmt` callees read GT4Py's connectivities.
    Table,
}

/// [`if_stmt_gather_callee`], the branch reading `w` as `at` says.
pub fn if_stmt_gather_callee_at(
    name: &str,
    dtype: DType,
    field: DType,
    rank: usize,
    at: GatherAt,
) -> Sdfg {
    let before = at == GatherAt::RowBefore;
    let mut b = SdfgBuilder::new(name);
    let extents: Vec<String> = (0..rank).map(|d| format!("n{d}")).collect();
    for d in 0..rank {
        b.symbol(&format!("n{d}"), DType::I64)
            .symbol(&format!("p{d}"), DType::I64);
    }
    for c in ["a", "b", "o"] {
        b.array(c, dtype, ["1"]);
    }
    b.array(
        "w",
        field,
        extents.iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .transient_scalar("c", DType::Bool)
    .transient_scalar("t", dtype);
    if at == GatherAt::Table {
        b.array("tab", DType::I32, ["n0", "2"]);
    }
    let cond = b.state("cond", |s| {
        s.tasklet(
            "c",
            &[("a", "a[0]"), ("b", "b[0]")],
            &[("c", "c")],
            "c = a > b",
        );
    });
    let at: Vec<String> = (0..rank)
        .map(|d| match (d, at) {
            (0, GatherAt::RowBefore) => "p0 - 1".to_string(),
            (0, GatherAt::Table) => "tab[p0, 1]".to_string(),
            _ => format!("p{d}"),
        })
        .collect();
    let at = format!("w[{}]", at.join(", "));
    let then = b.state("then", |s| {
        s.tasklet("t", &[("w", &at)], &[("t", "t")], "t = w * 2.0");
        s.copy("t", "o[0]");
    });
    let test = if before {
        SymExpr::bin(
            SymOp::And,
            SymExpr::sym("c"),
            SymExpr::bin(SymOp::Gt, SymExpr::sym("p0"), SymExpr::Int(0)),
        )
    } else {
        SymExpr::sym("c")
    };
    if_stmt_finish(b, cond, test, then, "o[0]")
}

/// The rest of an `if_stmt` callee: the `else` state (`o = a + b` into `out`), and the
/// body, `cond` then `if test` `then` else that state.
fn if_stmt_finish(
    mut b: SdfgBuilder,
    cond: StateId,
    test: SymExpr,
    then: StateId,
    out: &str,
) -> Sdfg {
    let otherwise = b.state("otherwise", |s| {
        s.tasklet(
            "f",
            &[("a", "a[0]"), ("b", "b[0]")],
            &[("o", out)],
            "o = a + b",
        );
    });
    b.body(Block::seq([
        Block::State(cond),
        Block::if_else(test, Block::State(then), Block::State(otherwise)),
    ]));
    b.build()
}

/// `o = a > b ? a * 2 : a + b` as GT4Py's `if_stmt` callees are written: the condition a
/// bool scalar computed in a state of its own (beside a value nothing reads), the branch
/// values through a transient copied into the output ([`IfStmtKind::Plain`]).
pub fn if_stmt_callee(name: &str, dtype: DType) -> Sdfg {
    if_stmt_callee_of(name, dtype, IfStmtKind::Plain)
}

/// The shapes of [`if_stmt_callee_of`]: what decides whether an optimizer may run both
/// branches and select (the cost of a branch, whether it can fail, whether both write
/// the output) and how the condition is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IfStmtKind {
    /// `o = a > b ? a * 2 : a + b`.
    Plain,
    /// The same, the condition `c` an `i64` (non-zero is true) tested negated: `if !c`.
    NegatedInt,
    /// The `then` value `exp(a) * 2`: a branch too costly to run where it is not taken.
    Costly,
    /// The `then` value `f64(i64(a) / 2)`: a branch dividing integers.
    IntDivision,
    /// Only the `then` branch writes `o`; the `else` branch writes a transient of its own,
    /// so `o` keeps the caller's value there.
    OneBranch,
}

impl IfStmtKind {
    /// Every kind.
    pub const ALL: [IfStmtKind; 5] = [
        IfStmtKind::Plain,
        IfStmtKind::NegatedInt,
        IfStmtKind::Costly,
        IfStmtKind::IntDivision,
        IfStmtKind::OneBranch,
    ];
}

/// A callee of GT4Py's `if_stmt` shape (see [`if_stmt_callee`]) of the given kind.
pub fn if_stmt_callee_of(name: &str, dtype: DType, kind: IfStmtKind) -> Sdfg {
    let mut b = SdfgBuilder::new(name);
    for c in ["a", "b", "o"] {
        b.array(c, dtype, ["1"]);
    }
    let int_cond = kind == IfStmtKind::NegatedInt;
    b.transient_scalar("c", if int_cond { DType::I64 } else { DType::Bool })
        .transient_scalar("t", dtype)
        .transient_scalar("f", dtype)
        .transient_scalar("unused", dtype);
    let cond = b.state("cond", |s| {
        let code = if int_cond {
            "c = select(a > b, 0, 7)"
        } else {
            "c = a > b"
        };
        s.tasklet("c", &[("a", "a[0]"), ("b", "b[0]")], &[("c", "c")], code);
        s.tasklet("u", &[("a", "a[0]")], &[("u", "unused")], "u = a * a");
    });
    let then = b.state("then", |s| {
        let code = match kind {
            IfStmtKind::Costly => "t = exp(a) * 2.0",
            IfStmtKind::IntDivision => "t = f64(i64(a) / 2)",
            _ => "t = a * 2.0",
        };
        s.tasklet("t", &[("a", "a[0]")], &[("t", "t")], code);
        s.copy("t", "o[0]");
    });
    let test = if int_cond {
        SymExpr::Not(std::sync::Arc::new(SymExpr::sym("c")))
    } else {
        SymExpr::sym("c")
    };
    let out = if kind == IfStmtKind::OneBranch {
        "f"
    } else {
        "o[0]"
    };
    if_stmt_finish(b, cond, test, then, out)
}

/// A map that squares `u` into a transient `tmp`, then an `if` on `flag`: the then branch
/// reads `tmp` into `out`, the else branch copies `u` into `out`. The producer can move
/// into the branch that reads its result, and fuse there (a fixture for move-into-if,
/// fusion and the drawings that mark them).
pub fn branchy() -> Sdfg {
    let mut b = SdfgBuilder::new("branchy");
    b.symbol("N", DType::I64)
        .symbol("flag", DType::I64)
        .array("u", DType::F64, ["N"])
        .array("out", DType::F64, ["N"])
        .transient("tmp", DType::F64, ["N"]);
    let pre = b.state("pre", |s| {
        s.map("square", &["i"], &["0:N"], |m| {
            m.tasklet("sq", &[("x", "u[i]")], &[("y", "tmp[i]")], "y = x * x");
        });
    });
    let then = b.state("then", |s| {
        s.map("use", &["i"], &["0:N"], |m| {
            m.tasklet("use", &[("x", "tmp[i]")], &[("y", "out[i]")], "y = x + 1.0");
        });
    });
    let other = b.state("else", |s| {
        s.map("copy", &["i"], &["0:N"], |m| {
            m.tasklet("copy", &[("x", "u[i]")], &[("y", "out[i]")], "y = x");
        });
    });
    b.body(Block::seq([
        Block::State(pre),
        Block::if_else("flag != 0", Block::State(then), Block::State(other)),
    ]));
    b.build()
}

/// A chain of `n` dependent 5-point stencils in one state, as the stencil-chain benchmark
/// writes them: `t_k = 0.25 * (neighbours of t_{k-1})` over `k:N-k` (each step's domain
/// one point inside the last), from input `a` to output `out`, through `n - 1` transients.
/// `N` is symbolic, so the program's size does not depend on the grid's.
pub fn stencil_chain(n: usize) -> Sdfg {
    let mut b = crate::SdfgBuilder::new(&format!("stencil_chain_{n}"));
    b.symbol("N", DType::I64)
        .array("a", DType::F64, ["N", "N"])
        .array("out", DType::F64, ["N", "N"]);
    let name = |k: usize| match k {
        0 => "a".to_string(),
        k if k == n => "out".to_string(),
        k => format!("t{k}"),
    };
    for k in 1..n {
        b.transient(&name(k), DType::F64, ["N", "N"]);
    }
    b.state("chain", |s| {
        for k in 1..=n {
            let (src, dst) = (name(k - 1), name(k));
            let range = format!("{k}:N - {k}");
            s.map(&format!("step{k}"), &["i", "j"], &[&range, &range], |m| {
                m.tasklet(
                    "avg",
                    &[
                        ("n", &format!("{src}[i - 1, j]")),
                        ("s", &format!("{src}[i + 1, j]")),
                        ("w", &format!("{src}[i, j - 1]")),
                        ("e", &format!("{src}[i, j + 1]")),
                    ],
                    &[("o", &format!("{dst}[i, j]"))],
                    "o = 0.25 * (n + s + w + e)",
                );
            });
        }
    });
    b.build()
}

/// One map over `i` in `4:N-4` whose body is a single tasklet of about `nodes`
/// expression nodes (three per statement): single-assignment locals combining the nine
/// inputs `u[i-4] … u[i+4]` and earlier locals with `+ - *`, with the shapes the e-graph
/// optimizer rewrites mixed in — a statement repeating an earlier one's expression,
/// `x * 1.0`, `x / 2.0`, `x - -y` — and the output `out[i]` the sum of the last eight
/// locals. For the e-graph pass's bounds and its time on large bodies.
pub fn large_body(nodes: usize, seed: u64) -> Sdfg {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let inputs: Vec<String> = (0..9).map(|k| format!("u{k}")).collect();
    let mut values: Vec<String> = inputs.clone();
    let mut rhs: Vec<String> = Vec::new();
    let mut code = Vec::new();
    let statements = (nodes / 3).max(8);
    for k in 0..statements {
        let pick = |rng: &mut ChaCha8Rng, values: &[String]| {
            let lo = values.len().saturating_sub(48);
            values[rng.random_range(lo..values.len())].clone()
        };
        let (a, b) = (pick(&mut rng, &values), pick(&mut rng, &values));
        let e = match rng.random_range(0..10) {
            0 if !rhs.is_empty() => {
                rhs[rng.random_range(rhs.len().saturating_sub(32)..rhs.len())].clone()
            }
            1 => format!("{a} * 1.0"),
            2 => format!("{a} / 2.0"),
            3 => format!("{a} - -{b}"),
            4 | 5 => format!("{a} - {b}"),
            6 | 7 => format!("{a} * {b}"),
            _ => format!("{a} + {b}"),
        };
        code.push(format!("t{k} = {e}"));
        rhs.push(e);
        values.push(format!("t{k}"));
    }
    let last: Vec<String> = values[values.len() - 8..].to_vec();
    code.push(format!("o = {}", last.join(" + ")));
    let mut b = crate::SdfgBuilder::new(&format!("large_body_{nodes}"));
    b.symbol("N", DType::I64)
        .array("u", DType::F64, ["N"])
        .array("out", DType::F64, ["N"]);
    let reads: Vec<(String, String)> = (0..9)
        .map(|k| (format!("u{k}"), format!("u[i + {}]", k as i64 - 4)))
        .collect();
    b.state("s", |s| {
        s.map("big", &["i"], &["4:N - 4"], |m| {
            let r: Vec<(&str, &str)> = reads
                .iter()
                .map(|(c, m)| (c.as_str(), m.as_str()))
                .collect();
            m.tasklet("big", &r, &[("o", "out[i]")], &code.join("\n"));
        });
    });
    b.build()
}
