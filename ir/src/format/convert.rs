//! Conversion between the IR and the document types, both ways. Reading builds the JSON
//! path of every element it converts, so a conversion error says where it is.

use std::collections::BTreeMap;

use crate::control::{Block, If, Loop, StateId};
use crate::data::{Array, DataDesc, Symbol, row_major_strides};
use crate::dataflow::{
    Dataflow, Decomposition, HaloExchange, LibraryNode, MapScope, NestedSdfg, Node, Range, Reduce,
    Tasklet,
};
use crate::dtype::{DType, Value};
use crate::expr::{Expr, Stmt};
use crate::memlet::{Memlet, Subset};
use crate::parse;
use crate::sdfg::{Sdfg, State};
use crate::symexpr::SymExpr;

use super::FormatError;
use super::doc::*;

// ---------------------------------------------------------------- IR -> document

fn sym_doc(e: &SymExpr) -> SymDoc {
    match e {
        SymExpr::Int(v) => SymDoc::Int(*v),
        e => SymDoc::Text(e.to_string()),
    }
}

fn memlet_text(data: &str, subset: &Subset) -> String {
    if subset.0.is_empty() {
        data.to_string()
    } else {
        format!("{data}[{subset}]")
    }
}

fn value_json(v: Value) -> serde_json::Value {
    match v {
        Value::Bool(b) => serde_json::Value::Bool(b),
        Value::I32(x) => serde_json::Value::from(x),
        Value::I64(x) => serde_json::Value::from(x),
        Value::F32(x) if x.is_finite() => serde_json::Value::from(x as f64),
        Value::F64(x) if x.is_finite() => serde_json::Value::from(x),
        // inf and nan have no JSON number: write expression text.
        v => serde_json::Value::String(v.to_string()),
    }
}

pub(crate) fn sdfg_to_doc(s: &Sdfg) -> SdfgDoc {
    SdfgDoc {
        sdflow_format: None,
        name: s.name.clone(),
        symbols: s
            .symbols
            .iter()
            .map(|(n, sym)| {
                (
                    n.clone(),
                    SymbolDoc {
                        dtype: sym.dtype.into(),
                        value: sym.value.map(value_json),
                        default: sym.default,
                    },
                )
            })
            .collect(),
        arrays: s
            .arrays
            .iter()
            .map(|(n, d)| (n.clone(), data_to_doc(d)))
            .collect(),
        arg_order: s.arg_order.clone(),
        states: s
            .states
            .iter()
            .map(|st| {
                let (nodes, edges) = graph_to_doc(&st.graph);
                StateDoc {
                    name: st.name.clone(),
                    nodes,
                    edges,
                }
            })
            .collect(),
        body: block_to_doc(&s.body),
    }
}

fn data_to_doc(d: &DataDesc) -> DataDoc {
    match d {
        DataDesc::Scalar { dtype, transient } => DataDoc {
            scalar: Some((*dtype).into()),
            transient: *transient,
            ..DataDoc::default()
        },
        DataDesc::Array(a) => DataDoc {
            dtype: Some(a.dtype.into()),
            shape: Some(a.shape.iter().map(sym_doc).collect()),
            transient: a.transient,
            strides: (a.strides != row_major_strides(&a.shape))
                .then(|| a.strides.iter().map(sym_doc).collect()),
            storage: Some(StorageDoc::from(a.storage)).filter(|s| !s.is_default()),
            scalar: None,
        },
    }
}

fn graph_to_doc(g: &Dataflow) -> (Vec<NodeDoc>, Vec<EdgeDoc>) {
    let (nodes, edges) = g.compacted();
    let nodes = nodes.into_iter().map(node_to_doc).collect();
    let edges = edges
        .into_iter()
        .map(|(src, dst, e)| EdgeDoc {
            src,
            src_conn: e.src_conn.clone(),
            dst,
            dst_conn: e.dst_conn.clone(),
            memlet: memlet_text(&e.memlet.data, &e.memlet.subset),
            other: e.memlet.other_subset.as_ref().map(|o| o.to_string()),
            wcr: e.memlet.wcr.map(Into::into),
        })
        .collect();
    (nodes, edges)
}

fn node_to_doc(n: &Node) -> NodeDoc {
    match n {
        Node::Access(d) => NodeDoc::Access(d.clone()),
        Node::Tasklet(t) => NodeDoc::Tasklet(TaskletDoc {
            name: t.name.clone(),
            inputs: t
                .inputs
                .iter()
                .map(|(c, d)| (c.clone(), (*d).into()))
                .collect(),
            outputs: t
                .outputs
                .iter()
                .map(|(c, d)| (c.clone(), (*d).into()))
                .collect(),
            code: t.code.iter().map(|s| s.to_string()).collect(),
        }),
        Node::Map(m) => {
            let (nodes, edges) = graph_to_doc(&m.body);
            NodeDoc::Map(MapDoc {
                label: m.label.clone(),
                params: m.params.clone(),
                ranges: m.ranges.iter().map(|r| r.to_string()).collect(),
                schedule: m.schedule.into(),
                nodes,
                edges,
            })
        }
        Node::Nested(n) => NodeDoc::Nested(NestedDoc {
            symbols: n
                .symbol_mapping
                .iter()
                .map(|(k, v)| (k.clone(), sym_doc(v)))
                .collect(),
            sdfg: Box::new(sdfg_to_doc(&n.sdfg)),
        }),
        Node::Library(LibraryNode::Reduce(r)) => NodeDoc::Reduce(ReduceDoc {
            op: r.op.into(),
            axes: r.axes.clone(),
            identity: r.identity.map(|v| v.to_string()),
        }),
        Node::Library(LibraryNode::HaloExchange(h)) => NodeDoc::HaloExchange(HaloExchangeDoc {
            decomposition: match &h.decomposition {
                Decomposition::Structured {
                    ranks,
                    width,
                    periodic,
                    corners,
                } => DecompositionDoc::Structured {
                    ranks: *ranks,
                    width: *width,
                    periodic: *periodic,
                    corners: *corners,
                },
                Decomposition::Unstructured {
                    ranks,
                    global,
                    owner,
                } => DecompositionDoc::Unstructured {
                    ranks: *ranks,
                    global: global.clone(),
                    owner: owner.clone(),
                },
            },
        }),
    }
}

fn block_to_doc(b: &Block) -> BlockDoc {
    match b {
        Block::State(s) => BlockDoc::State(s.0),
        Block::Seq(bs) => BlockDoc::Seq(bs.iter().map(block_to_doc).collect()),
        Block::Loop(l) => BlockDoc::Loop(LoopDoc {
            var: l.var.clone(),
            init: sym_doc(&l.init),
            cond: sym_doc(&l.cond),
            update: sym_doc(&l.update),
            body: Box::new(block_to_doc(&l.body)),
        }),
        Block::If(i) => BlockDoc::If(IfDoc {
            cond: sym_doc(&i.cond),
            then: Box::new(block_to_doc(&i.then)),
            otherwise: Box::new(block_to_doc(&i.otherwise)),
        }),
        Block::Assign(a) => BlockDoc::Assign(OrderedMap(
            a.iter().map(|(n, e)| (n.clone(), e.to_string())).collect(),
        )),
    }
}

// ---------------------------------------------------------------- document -> IR

/// A JSON path under construction, in `serde_path_to_error`'s spelling.
#[derive(Clone, Debug)]
pub(crate) struct Path(String);

impl Path {
    pub(crate) fn root() -> Path {
        Path(String::new())
    }

    fn field(&self, name: &str) -> Path {
        let mut p = self.0.clone();
        super::push_key(&mut p, name);
        Path(p)
    }

    fn index(&self, i: usize) -> Path {
        Path(format!("{}[{i}]", self.0))
    }

    fn err(&self, message: impl Into<String>) -> FormatError {
        FormatError {
            path: self.0.clone(),
            message: message.into(),
        }
    }
}

fn parse_err(path: &Path, what: &str, e: parse::ParseError) -> FormatError {
    path.err(format!("bad {what}: {e}"))
}

fn sym_from(d: &SymDoc, path: &Path) -> Result<SymExpr, FormatError> {
    match d {
        SymDoc::Int(v) => Ok(SymExpr::Int(*v)),
        SymDoc::Text(t) => SymExpr::parse(t).map_err(|e| parse_err(path, "expression", e)),
    }
}

/// A literal of exactly this type from a JSON value (a number, a bool, or literal text).
fn value_from(j: &serde_json::Value, dtype: DType, path: &Path) -> Result<Value, FormatError> {
    let mismatch = || path.err(format!("expected a {dtype} literal, found {j}"));
    let v = match j {
        serde_json::Value::Bool(b) if dtype == DType::Bool => Value::Bool(*b),
        serde_json::Value::Number(n) if dtype.is_int() => {
            let x = n.as_i64().ok_or_else(mismatch)?;
            if dtype == DType::I32 {
                Value::I32(i32::try_from(x).map_err(|_| mismatch())?)
            } else {
                Value::I64(x)
            }
        }
        serde_json::Value::Number(n) if dtype.is_float() => {
            let x = n.as_f64().ok_or_else(mismatch)?;
            if dtype == DType::F32 {
                let y = x as f32;
                if y as f64 != x {
                    return Err(path.err(format!("{x} is not exactly representable as f32")));
                }
                Value::F32(y)
            } else {
                Value::F64(x)
            }
        }
        serde_json::Value::String(t) => {
            let v = literal_from(t, path)?;
            if v.dtype() != dtype {
                return Err(mismatch());
            }
            v
        }
        _ => return Err(mismatch()),
    };
    Ok(v)
}

/// A literal in expression text (`1.5`, `2.0f32`, `3i32`, `-inf`, `true`).
fn literal_from(t: &str, path: &Path) -> Result<Value, FormatError> {
    match Expr::parse(t).map_err(|e| parse_err(path, "literal", e))? {
        Expr::Const(v) => Ok(v),
        _ => Err(path.err(format!("expected a literal, found '{t}'"))),
    }
}

pub(crate) fn sdfg_from_doc(d: &SdfgDoc, path: &Path, top: bool) -> Result<Sdfg, FormatError> {
    if !top && d.sdflow_format.is_some() {
        return Err(path
            .field("sdflow_format")
            .err("sdflow_format belongs only at the top level of a file"));
    }
    let mut s = Sdfg::new(&d.name);
    for (n, sym) in &d.symbols {
        let p = path.field("symbols").field(n);
        let dtype: DType = sym.dtype.into();
        let value = match &sym.value {
            None => None,
            Some(j) => Some(value_from(j, dtype, &p.field("value"))?),
        };
        if sym.default.is_some() && !dtype.is_int() {
            return Err(p.field("default").err(format!(
                "a default value is for integer symbols, not {dtype}"
            )));
        }
        s.symbols.insert(
            n.clone(),
            Symbol {
                dtype,
                value,
                default: sym.default,
            },
        );
    }
    for (n, a) in &d.arrays {
        let p = path.field("arrays").field(n);
        s.arrays.insert(n.clone(), data_from(a, &p)?);
    }
    s.arg_order = d.arg_order.clone();
    for (i, st) in d.states.iter().enumerate() {
        let p = path.field("states").index(i);
        s.states.push(State {
            name: st.name.clone(),
            graph: graph_from(&st.nodes, &st.edges, &p)?,
        });
    }
    s.body = block_from(&d.body, &path.field("body"))?;
    Ok(s)
}

fn data_from(a: &DataDoc, p: &Path) -> Result<DataDesc, FormatError> {
    if let Some(t) = a.scalar {
        for (present, name) in [
            (a.dtype.is_some(), "dtype"),
            (a.shape.is_some(), "shape"),
            (a.strides.is_some(), "strides"),
            (a.storage.is_some(), "storage"),
        ] {
            if present {
                return Err(p.field(name).err(format!(
                    "a scalar (\"scalar\": \"{}\") has no '{name}'",
                    DType::from(t)
                )));
            }
        }
        return Ok(DataDesc::Scalar {
            dtype: t.into(),
            transient: a.transient,
        });
    }
    let dtype = a
        .dtype
        .ok_or_else(|| p.err("an array needs 'dtype' and 'shape' (or 'scalar' for a scalar)"))?;
    let shape_doc = a
        .shape
        .as_ref()
        .ok_or_else(|| p.err("an array needs 'shape' (or 'scalar' for a scalar)"))?;
    let shape = shape_doc
        .iter()
        .enumerate()
        .map(|(i, e)| sym_from(e, &p.field("shape").index(i)))
        .collect::<Result<Vec<_>, _>>()?;
    let strides = match &a.strides {
        None => row_major_strides(&shape),
        Some(st) => {
            if st.len() != shape.len() {
                return Err(p.field("strides").err(format!(
                    "{} strides for {} dimensions",
                    st.len(),
                    shape.len()
                )));
            }
            st.iter()
                .enumerate()
                .map(|(i, e)| sym_from(e, &p.field("strides").index(i)))
                .collect::<Result<Vec<_>, _>>()?
        }
    };
    Ok(DataDesc::Array(Array {
        dtype: dtype.into(),
        shape,
        strides,
        storage: a.storage.unwrap_or_default().into(),
        transient: a.transient,
    }))
}

fn graph_from(nodes: &[NodeDoc], edges: &[EdgeDoc], p: &Path) -> Result<Dataflow, FormatError> {
    let mut g = Dataflow::new();
    let mut ids = Vec::with_capacity(nodes.len());
    for (i, n) in nodes.iter().enumerate() {
        ids.push(g.add_node(node_from(n, &p.field("nodes").index(i))?));
    }
    for (i, e) in edges.iter().enumerate() {
        let ep = p.field("edges").index(i);
        let end = |k: usize, name: &str| {
            ids.get(k).copied().ok_or_else(|| {
                ep.field(name).err(format!(
                    "node {k} does not exist (this graph has {} nodes)",
                    ids.len()
                ))
            })
        };
        let src = end(e.src, "src")?;
        let dst = end(e.dst, "dst")?;
        let mp = ep.field("memlet");
        let mut m: Memlet =
            parse::parse_memlet(&e.memlet).map_err(|x| parse_err(&mp, "memlet", x))?;
        if let Some(o) = &e.other {
            m.other_subset = Some(
                parse::parse_subset(o).map_err(|x| parse_err(&ep.field("other"), "subset", x))?,
            );
        }
        m.wcr = e.wcr.map(Into::into);
        g.add_edge(src, e.src_conn.as_deref(), dst, e.dst_conn.as_deref(), m);
    }
    Ok(g)
}

fn node_from(n: &NodeDoc, p: &Path) -> Result<Node, FormatError> {
    Ok(match n {
        NodeDoc::Access(d) => Node::Access(d.clone()),
        NodeDoc::Tasklet(t) => {
            let p = p.field("tasklet");
            let code = t
                .code
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    Stmt::parse(s).map_err(|e| parse_err(&p.field("code").index(i), "statement", e))
                })
                .collect::<Result<Vec<_>, _>>()?;
            Node::Tasklet(Tasklet {
                name: t.name.clone(),
                inputs: dtypes(&t.inputs),
                outputs: dtypes(&t.outputs),
                code,
            })
        }
        NodeDoc::Map(m) => {
            let p = p.field("map");
            if m.params.len() != m.ranges.len() {
                return Err(p.field("ranges").err(format!(
                    "{} ranges for {} params",
                    m.ranges.len(),
                    m.params.len()
                )));
            }
            let ranges = m
                .ranges
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    Range::parse(r).map_err(|e| parse_err(&p.field("ranges").index(i), "range", e))
                })
                .collect::<Result<Vec<_>, _>>()?;
            Node::Map(MapScope {
                label: m.label.clone(),
                params: m.params.clone(),
                ranges,
                schedule: m.schedule.into(),
                body: graph_from(&m.nodes, &m.edges, &p)?,
            })
        }
        NodeDoc::Nested(n) => {
            let p = p.field("nested");
            let symbol_mapping = n
                .symbols
                .iter()
                .map(|(k, v)| Ok((k.clone(), sym_from(v, &p.field("symbols").field(k))?)))
                .collect::<Result<BTreeMap<_, _>, FormatError>>()?;
            Node::Nested(NestedSdfg {
                sdfg: Box::new(sdfg_from_doc(&n.sdfg, &p.field("sdfg"), false)?),
                symbol_mapping,
            })
        }
        NodeDoc::Reduce(r) => {
            let p = p.field("reduce");
            let identity = match &r.identity {
                None => None,
                Some(t) => Some(literal_from(t, &p.field("identity"))?),
            };
            Node::Library(LibraryNode::Reduce(Reduce {
                op: r.op.into(),
                axes: r.axes.clone(),
                identity,
            }))
        }
        NodeDoc::HaloExchange(h) => Node::Library(LibraryNode::HaloExchange(HaloExchange {
            decomposition: match &h.decomposition {
                DecompositionDoc::Structured {
                    ranks,
                    width,
                    periodic,
                    corners,
                } => Decomposition::Structured {
                    ranks: *ranks,
                    width: *width,
                    periodic: *periodic,
                    corners: *corners,
                },
                DecompositionDoc::Unstructured {
                    ranks,
                    global,
                    owner,
                } => Decomposition::Unstructured {
                    ranks: *ranks,
                    global: global.clone(),
                    owner: owner.clone(),
                },
            },
        })),
    })
}

fn dtypes(m: &BTreeMap<String, DTypeDoc>) -> BTreeMap<String, DType> {
    m.iter().map(|(k, v)| (k.clone(), (*v).into())).collect()
}

fn block_from(b: &BlockDoc, p: &Path) -> Result<Block, FormatError> {
    Ok(match b {
        BlockDoc::State(s) => Block::State(StateId(*s)),
        BlockDoc::Seq(bs) => {
            let q = p.field("seq");
            Block::Seq(
                bs.iter()
                    .enumerate()
                    .map(|(i, b)| block_from(b, &q.index(i)))
                    .collect::<Result<Vec<_>, _>>()?,
            )
        }
        BlockDoc::Loop(l) => {
            let q = p.field("loop");
            Block::Loop(Loop {
                var: l.var.clone(),
                init: sym_from(&l.init, &q.field("init"))?,
                cond: sym_from(&l.cond, &q.field("cond"))?,
                update: sym_from(&l.update, &q.field("update"))?,
                body: Box::new(block_from(&l.body, &q.field("body"))?),
            })
        }
        BlockDoc::If(i) => {
            let q = p.field("if");
            Block::If(If {
                cond: sym_from(&i.cond, &q.field("cond"))?,
                then: Box::new(block_from(&i.then, &q.field("then"))?),
                otherwise: Box::new(block_from(&i.otherwise, &q.field("else"))?),
            })
        }
        BlockDoc::Assign(a) => {
            let q = p.field("assign");
            Block::Assign(
                a.0.iter()
                    .map(|(n, t)| {
                        let e = SymExpr::parse(t)
                            .map_err(|e| parse_err(&q.field(n), "expression", e))?;
                        Ok((n.clone(), e))
                    })
                    .collect::<Result<Vec<_>, FormatError>>()?,
            )
        }
    })
}
