//! A builder that makes writing an SDFG by hand in Rust short and readable.
//!
//! ```
//! use sdflow_ir::{DType, SdfgBuilder};
//!
//! let mut b = SdfgBuilder::new("laplace");
//! b.symbol("N", DType::I64)
//!     .array("u", DType::F64, ["N", "N"])
//!     .array("out", DType::F64, ["N", "N"]);
//! b.state("main", |s| {
//!     s.map("lap", &["i", "j"], &["1:N-1", "1:N-1"], |m| {
//!         m.tasklet(
//!             "lap",
//!             &[("c", "u[i, j]"), ("n", "u[i-1, j]"), ("s", "u[i+1, j]"), ("w", "u[i, j-1]"), ("e", "u[i, j+1]")],
//!             &[("o", "out[i, j]")],
//!             "o = n + s + w + e - 4.0 * c",
//!         );
//!     });
//! });
//! let sdfg = b.build();
//! assert_eq!(sdfg.states.len(), 1);
//! ```
//!
//! Expression, range and memlet text is parsed as in the JSON format. The builder is for
//! programs written in code: malformed text there is a programming error and panics with
//! the parser's message. Input from files goes through [`crate::format`], which never
//! panics.

use std::collections::BTreeMap;

use crate::control::{Block, StateId};
use crate::data::{Array, DataDesc, Symbol};
use crate::dataflow::{
    Dataflow, HaloExchange, LibraryNode, MapScope, NestedSdfg, Node, NodeId, Range, Reduce,
    Schedule, Tasklet,
};
use crate::dtype::{DType, Value};
use crate::expr::Stmt;
use crate::memlet::{Memlet, Subset, Wcr};
use crate::parse;
use crate::propagate::map_boundary;
use crate::sdfg::{Sdfg, State};
use crate::symexpr::SymExpr;

/// Builds an [`Sdfg`]: declare symbols and containers, then states, then (optionally) the
/// control flow; without [`SdfgBuilder::body`] the states run once, in creation order.
pub struct SdfgBuilder {
    sdfg: Sdfg,
    body: Option<Block>,
}

impl SdfgBuilder {
    /// Starts an empty program.
    pub fn new(name: &str) -> SdfgBuilder {
        SdfgBuilder {
            sdfg: Sdfg::new(name),
            body: None,
        }
    }

    /// Declares a runtime symbol.
    pub fn symbol(&mut self, name: &str, dtype: DType) -> &mut Self {
        self.sdfg
            .symbols
            .insert(name.to_string(), Symbol::new(dtype));
        self
    }

    /// Declares a symbol whose value is known at build time.
    pub fn static_symbol(&mut self, name: &str, value: Value) -> &mut Self {
        self.sdfg.symbols.insert(
            name.to_string(),
            Symbol {
                dtype: value.dtype(),
                value: Some(value),
                default: None,
            },
        );
        self
    }

    /// Declares an argument array with row-major strides.
    pub fn array<S: Into<SymExpr>>(
        &mut self,
        name: &str,
        dtype: DType,
        shape: impl IntoIterator<Item = S>,
    ) -> &mut Self {
        let a = Array::new(dtype, shape.into_iter().map(Into::into).collect());
        self.sdfg
            .arrays
            .insert(name.to_string(), DataDesc::Array(a));
        self
    }

    /// Declares a transient (program-internal) array.
    pub fn transient<S: Into<SymExpr>>(
        &mut self,
        name: &str,
        dtype: DType,
        shape: impl IntoIterator<Item = S>,
    ) -> &mut Self {
        let mut a = Array::new(dtype, shape.into_iter().map(Into::into).collect());
        a.transient = true;
        self.sdfg
            .arrays
            .insert(name.to_string(), DataDesc::Array(a));
        self
    }

    /// Sets the strides of the array `name` declared before (a padded or column-major
    /// layout); nothing for a scalar or an undeclared name.
    pub fn strides<S: Into<SymExpr>>(
        &mut self,
        name: &str,
        strides: impl IntoIterator<Item = S>,
    ) -> &mut Self {
        if let Some(DataDesc::Array(a)) = self.sdfg.arrays.get_mut(name) {
            a.strides = strides.into_iter().map(Into::into).collect();
        }
        self
    }

    /// Declares an argument scalar.
    pub fn scalar(&mut self, name: &str, dtype: DType) -> &mut Self {
        self.sdfg.arrays.insert(
            name.to_string(),
            DataDesc::Scalar {
                dtype,
                transient: false,
            },
        );
        self
    }

    /// Declares a transient scalar (a temporary inside map bodies, for example).
    pub fn transient_scalar(&mut self, name: &str, dtype: DType) -> &mut Self {
        self.sdfg.arrays.insert(
            name.to_string(),
            DataDesc::Scalar {
                dtype,
                transient: true,
            },
        );
        self
    }

    /// Declares any container.
    pub fn data(&mut self, name: &str, desc: DataDesc) -> &mut Self {
        self.sdfg.arrays.insert(name.to_string(), desc);
        self
    }

    /// Fixes the order of the first arguments.
    pub fn arg_order(&mut self, names: &[&str]) -> &mut Self {
        self.sdfg.arg_order = names.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Adds a state whose dataflow `f` builds.
    pub fn state(&mut self, name: &str, f: impl FnOnce(&mut DataflowBuilder<'_>)) -> StateId {
        let mut graph = Dataflow::new();
        f(&mut DataflowBuilder::new(&self.sdfg.arrays, &mut graph));
        self.sdfg.states.push(State {
            name: name.to_string(),
            graph,
        });
        StateId((self.sdfg.states.len() - 1) as u32)
    }

    /// Sets the control flow.
    pub fn body(&mut self, block: Block) -> &mut Self {
        self.body = Some(block);
        self
    }

    /// The declarations so far.
    pub fn sdfg(&self) -> &Sdfg {
        &self.sdfg
    }

    /// Finishes the program.
    pub fn build(mut self) -> Sdfg {
        self.sdfg.body = self.body.unwrap_or_else(|| {
            Block::Seq(
                (0..self.sdfg.states.len())
                    .map(|i| Block::State(StateId(i as u32)))
                    .collect(),
            )
        });
        self.sdfg
    }
}

/// Builds one dataflow graph (a state's or a map body's).
///
/// Reads of a container come from its most recent access node, so a map that reads what
/// an earlier map wrote is ordered after it; a write gets a fresh access node unless the
/// latest one has not been read yet.
pub struct DataflowBuilder<'a> {
    arrays: &'a BTreeMap<String, DataDesc>,
    graph: &'a mut Dataflow,
    last: BTreeMap<String, NodeId>,
}

fn parse_memlet_spec(spec: &str) -> Memlet {
    let (text, wcr) = match spec
        .trim_end()
        .strip_suffix(')')
        .and_then(|s| s.rsplit_once("(wcr:"))
    {
        Some((m, w)) => {
            let w = Wcr::from_name(w.trim())
                .unwrap_or_else(|| panic!("unknown write-conflict resolution in {spec:?}"));
            (m.trim(), Some(w))
        }
        None => (spec, None),
    };
    let mut m =
        parse::parse_memlet(text).unwrap_or_else(|e| panic!("invalid memlet {spec:?}: {e}"));
    m.wcr = wcr;
    m
}

fn parse_code(code: &str) -> Vec<Stmt> {
    code.split([';', '\n'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| Stmt::parse(s).unwrap_or_else(|e| panic!("invalid tasklet statement {s:?}: {e}")))
        .collect()
}

impl<'a> DataflowBuilder<'a> {
    fn new(arrays: &'a BTreeMap<String, DataDesc>, graph: &'a mut Dataflow) -> Self {
        DataflowBuilder {
            arrays,
            graph,
            last: BTreeMap::new(),
        }
    }

    fn dtype_of(&self, data: &str) -> DType {
        self.arrays
            .get(data)
            .map(DataDesc::dtype)
            .unwrap_or(DType::F64)
    }

    /// The access node a read of `data` comes from (the latest one, or a new one).
    pub fn read_node(&mut self, data: &str) -> NodeId {
        if let Some(n) = self.last.get(data) {
            return *n;
        }
        let n = self.graph.add_access(data);
        self.last.insert(data.to_string(), n);
        n
    }

    /// The access node a write of `data` goes to.
    pub fn write_node(&mut self, data: &str) -> NodeId {
        if let Some(&n) = self.last.get(data)
            && self.graph.out_degree(n) == 0
        {
            return n;
        }
        let n = self.graph.add_access(data);
        self.last.insert(data.to_string(), n);
        n
    }

    /// Adds a tasklet. `inputs` and `outputs` pair a connector with a memlet
    /// (`"u[i-1, j]"`; an output may end in `(wcr: sum)`); connector types are the
    /// containers' types. `code` holds statements separated by `;` or newlines.
    pub fn tasklet(
        &mut self,
        name: &str,
        inputs: &[(&str, &str)],
        outputs: &[(&str, &str)],
        code: &str,
    ) -> NodeId {
        let ins: Vec<(String, Memlet)> = inputs
            .iter()
            .map(|(c, m)| (c.to_string(), parse_memlet_spec(m)))
            .collect();
        let outs: Vec<(String, Memlet)> = outputs
            .iter()
            .map(|(c, m)| (c.to_string(), parse_memlet_spec(m)))
            .collect();
        let t = Tasklet {
            name: name.to_string(),
            inputs: ins
                .iter()
                .map(|(c, m)| (c.clone(), self.dtype_of(&m.data)))
                .collect(),
            outputs: outs
                .iter()
                .map(|(c, m)| (c.clone(), self.dtype_of(&m.data)))
                .collect(),
            code: parse_code(code),
        };
        let node = self.graph.add_node(Node::Tasklet(t));
        for (c, m) in ins {
            let src = self.read_node(&m.data);
            self.graph.add_edge(src, None, node, Some(&c), m);
        }
        for (c, m) in outs {
            let dst = self.write_node(&m.data);
            self.graph.add_edge(node, Some(&c), dst, None, m);
        }
        node
    }

    /// Adds a map with the default schedule; `f` builds one iteration's body. The map
    /// node's edges get the propagated memlets of everything the body reads and writes
    /// (transient scalars are local to the body).
    pub fn map(
        &mut self,
        label: &str,
        params: &[&str],
        ranges: &[&str],
        f: impl FnOnce(&mut DataflowBuilder<'_>),
    ) -> NodeId {
        self.map_scheduled(label, params, ranges, Schedule::default(), f)
    }

    /// Adds a map with an explicit schedule.
    pub fn map_scheduled(
        &mut self,
        label: &str,
        params: &[&str],
        ranges: &[&str],
        schedule: Schedule,
        f: impl FnOnce(&mut DataflowBuilder<'_>),
    ) -> NodeId {
        let ranges: Vec<Range> = ranges
            .iter()
            .map(|r| Range::parse(r).unwrap_or_else(|e| panic!("invalid map range {r:?}: {e}")))
            .collect();
        let params: Vec<String> = params.iter().map(|s| s.to_string()).collect();
        let mut body = Dataflow::new();
        f(&mut DataflowBuilder::new(self.arrays, &mut body));
        let (reads, writes) = map_boundary(self.arrays, &body, &params, &ranges);
        let node = self.graph.add_node(Node::Map(MapScope {
            label: label.to_string(),
            params,
            ranges,
            schedule,
            body,
        }));
        for m in reads {
            let src = self.read_node(&m.data);
            self.graph.add_edge(src, None, node, None, m);
        }
        for m in writes {
            let dst = self.write_node(&m.data);
            self.graph.add_edge(node, None, dst, None, m);
        }
        node
    }

    /// Adds a copy between two containers: `copy("a[0:N]", "b[1:N+1]")`.
    pub fn copy(&mut self, src: &str, dst: &str) -> NodeId {
        let s = parse_memlet_spec(src);
        let d = parse_memlet_spec(dst);
        let a = self.read_node(&s.data);
        let b = self.write_node(&d.data);
        let m = Memlet {
            other_subset: Some(d.subset),
            wcr: d.wcr,
            ..s
        };
        self.graph.add_edge(a, None, b, None, m);
        b
    }

    /// Adds a nested SDFG call. `inputs`/`outputs` pair a non-transient container of the
    /// callee (the connector) with the caller's memlet; `symbols` maps the callee's free
    /// symbols to expressions over the caller's.
    pub fn nested(
        &mut self,
        sdfg: Sdfg,
        symbols: &[(&str, &str)],
        inputs: &[(&str, &str)],
        outputs: &[(&str, &str)],
    ) -> NodeId {
        let symbol_mapping = symbols
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    SymExpr::parse(v).unwrap_or_else(|e| panic!("invalid symbol value {v:?}: {e}")),
                )
            })
            .collect();
        let node = self.graph.add_node(Node::Nested(NestedSdfg {
            sdfg: Box::new(sdfg),
            symbol_mapping,
        }));
        for (c, m) in inputs {
            let m = parse_memlet_spec(m);
            let src = self.read_node(&m.data);
            self.graph.add_edge(src, None, node, Some(c), m);
        }
        for (c, m) in outputs {
            let m = parse_memlet_spec(m);
            let dst = self.write_node(&m.data);
            self.graph.add_edge(node, Some(c), dst, None, m);
        }
        node
    }

    /// Adds a reduction of `input` (memlet) into `output` (memlet).
    pub fn reduce(
        &mut self,
        op: Wcr,
        axes: Option<Vec<usize>>,
        identity: Option<Value>,
        input: &str,
        output: &str,
    ) -> NodeId {
        let node = self
            .graph
            .add_node(Node::Library(LibraryNode::Reduce(Reduce {
                op,
                axes,
                identity,
            })));
        let i = parse_memlet_spec(input);
        let o = parse_memlet_spec(output);
        let src = self.read_node(&i.data);
        self.graph.add_edge(src, None, node, Some("in"), i);
        let dst = self.write_node(&o.data);
        self.graph.add_edge(node, Some("out"), dst, None, o);
        node
    }

    /// Adds a halo exchange of the whole containers `fields` (each in and out at the
    /// connector of its name).
    pub fn halo_exchange(&mut self, fields: &[&str], exchange: HaloExchange) -> NodeId {
        let node = self
            .graph
            .add_node(Node::Library(LibraryNode::HaloExchange(exchange)));
        let whole = |b: &Self, f: &str| {
            let shape = b
                .arrays
                .get(f)
                .map(|d| d.shape().to_vec())
                .unwrap_or_default();
            Memlet::new(f, Subset::full(&shape))
        };
        for f in fields {
            let src = self.read_node(f);
            let m = whole(self, f);
            self.graph.add_edge(src, None, node, Some(f), m);
        }
        for f in fields {
            let dst = self.write_node(f);
            let m = whole(self, f);
            self.graph.add_edge(node, Some(f), dst, None, m);
        }
        node
    }

    /// The graph built so far, for adding nodes or edges by hand.
    pub fn graph(&mut self) -> &mut Dataflow {
        self.graph
    }
}
