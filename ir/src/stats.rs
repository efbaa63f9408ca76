//! Counts and summaries of a program, for `sdflow stats` and pass reports.

use crate::dataflow::{Dataflow, Node};
use crate::sdfg::Sdfg;

/// Element counts of a program. Nodes, maps and tasklets are counted recursively: inside
/// map bodies and nested SDFGs too; states include those of nested SDFGs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// States (nested SDFGs' included).
    pub states: usize,
    /// Dataflow nodes of every kind (map bodies' and nested SDFGs' included).
    pub nodes: usize,
    /// Map scopes.
    pub maps: usize,
    /// Tasklets.
    pub tasklets: usize,
    /// Nested SDFG nodes.
    pub nested: usize,
    /// Library nodes.
    pub library: usize,
    /// Memlet edges.
    pub edges: usize,
    /// Transient containers (nested SDFGs' included).
    pub transients: usize,
}

impl Stats {
    fn add_dataflow(&mut self, df: &Dataflow) {
        self.nodes += df.node_count();
        self.edges += df.edge_ids().len();
        for n in df.node_ids() {
            match df.node(n) {
                Node::Map(m) => {
                    self.maps += 1;
                    self.add_dataflow(&m.body);
                }
                Node::Tasklet(_) => self.tasklets += 1,
                Node::Nested(ns) => {
                    self.nested += 1;
                    self.add_sdfg(&ns.sdfg);
                }
                Node::Library(_) => self.library += 1,
                Node::Access(_) => {}
            }
        }
    }

    fn add_sdfg(&mut self, sdfg: &Sdfg) {
        self.states += sdfg.states.len();
        self.transients += sdfg.arrays.values().filter(|d| d.transient()).count();
        for s in &sdfg.states {
            self.add_dataflow(&s.graph);
        }
    }
}

impl Sdfg {
    /// Element counts (see [`Stats`]).
    pub fn stats(&self) -> Stats {
        let mut s = Stats::default();
        s.add_sdfg(self);
        s
    }
}

/// The work of one grid point: what the tasklets in map bodies do per iteration,
/// summed over every map of the program (bodies of nested maps and nested SDFGs inside
/// maps included, each counted once; tasklets outside maps not counted). Pass reports
/// show it before and after optimization.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PointCounts {
    /// Operations: unary, binary, `select` and math function nodes of tasklet code
    /// (conversions not counted).
    pub flops: usize,
    /// Of them, `/`, `//` and `%`.
    pub divisions: usize,
    /// Of them, math functions other than `abs`, `min`, `max`, `floor`, `ceil`,
    /// `trunc`, `round` (square roots and transcendental functions).
    pub special: usize,
    /// Elements read by tasklets (input memlets).
    pub loads: usize,
    /// Elements written by tasklets (output memlets).
    pub stores: usize,
}

impl PointCounts {
    /// The counts of a program.
    pub fn of(sdfg: &Sdfg) -> PointCounts {
        let mut c = PointCounts::default();
        for s in &sdfg.states {
            c.add(&s.graph, false);
        }
        c
    }

    fn add(&mut self, df: &Dataflow, in_map: bool) {
        use crate::expr::{BinOp, Expr, MathFn};
        for n in df.node_ids() {
            match df.node(n) {
                Node::Map(m) => self.add(&m.body, true),
                Node::Nested(ns) if in_map => {
                    for s in &ns.sdfg.states {
                        self.add(&s.graph, true);
                    }
                }
                Node::Tasklet(t) if in_map => {
                    self.loads += df.in_degree(n);
                    self.stores += df.out_degree(n);
                    for st in &t.code {
                        st.value.visit(&mut |e| match e {
                            Expr::Unary(..) | Expr::Select(..) => self.flops += 1,
                            Expr::Binary(op, ..) => {
                                self.flops += 1;
                                if matches!(op, BinOp::Div | BinOp::FloorDiv | BinOp::Mod) {
                                    self.divisions += 1;
                                }
                            }
                            Expr::Call(MathFn::WallNs, _) => {}
                            Expr::Call(f, _) => {
                                self.flops += 1;
                                if !matches!(
                                    f,
                                    MathFn::Abs
                                        | MathFn::Min
                                        | MathFn::Max
                                        | MathFn::Floor
                                        | MathFn::Ceil
                                        | MathFn::Trunc
                                        | MathFn::Round
                                        | MathFn::Fma
                                ) {
                                    self.special += 1;
                                }
                            }
                            Expr::Const(_) | Expr::Var(_) | Expr::Cast(..) => {}
                        });
                    }
                }
                _ => {}
            }
        }
    }
}

impl std::fmt::Display for PointCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "flops {} (divisions {}, special functions {}), loads {}, stores {}",
            self.flops, self.divisions, self.special, self.loads, self.stores
        )
    }
}
