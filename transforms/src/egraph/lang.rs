//! The e-graph's language: typed tasklet operations ([`Op`]) with their operands, and
//! the constant-folding analysis ([`Fold`]).
//!
//! Every operation carries the type its operands already have (the tree is elaborated,
//! [`Expr::elaborate`](sdflow_ir::Expr::elaborate)), so a rule written for `f64` never
//! fires on `f32` and the result type of every e-class is known. Constants are keyed by
//! their type and bit pattern: `-0.0` and `+0.0` are different constants, and so are
//! NaNs with different payloads.
//!
//! Operations that can raise the program's error flag (integer `/`, `//`, `%`) and the
//! clock `wall_ns()` carry the number of the site they come from ([`Op::Guarded`],
//! [`Op::Clock`]): no two are ever equal, no rule matches them, and the pass keeps every
//! one of them (they are roots of the extraction).

use std::fmt;

use egg::{Analysis, DidMerge, EGraph, FromOp, Id, Language};
use sdflow_ir::interp::value;
use sdflow_ir::{BinOp, DType, MathFn, UnOp, Value};

/// An operation, with the operand type of its operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// A constant: its type and bits (`to_bits` for floats, the two's complement value
    /// for integers, 0 or 1 for `bool`).
    Const(DType, u64),
    /// A name the body reads (input connector, map parameter or symbol): its index in
    /// the body's leaf table and its type.
    Leaf(u32, DType),
    /// A unary operation on operands of the type.
    Un(UnOp, DType),
    /// A binary operation on operands of the type.
    Bin(BinOp, DType),
    /// `select` with branches of the type.
    Select(DType),
    /// A math function on arguments of the type.
    Call(MathFn, DType),
    /// A conversion to the type.
    Cast(DType),
    /// An integer `/`, `//` or `%` (may raise the error flag) at a site.
    Guarded(u32, BinOp, DType),
    /// `wall_ns()` at a site.
    Clock(u32),
}

/// A node: an operation and its operands' e-classes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Node {
    /// The operation.
    pub op: Op,
    /// The operands.
    pub args: Vec<Id>,
}

impl Node {
    /// A node.
    pub fn new(op: Op, args: Vec<Id>) -> Node {
        Node { op, args }
    }

    /// A constant node.
    pub fn constant(v: Value) -> Node {
        Node::new(const_op(v), vec![])
    }
}

/// The operation of a constant.
pub fn const_op(v: Value) -> Op {
    let bits = match v {
        Value::Bool(b) => b as u64,
        Value::I32(x) => x as i64 as u64,
        Value::I64(x) => x as u64,
        Value::F32(x) => x.to_bits() as u64,
        Value::F64(x) => x.to_bits(),
    };
    Op::Const(v.dtype(), bits)
}

/// The value of a constant operation.
pub fn const_value(t: DType, bits: u64) -> Value {
    match t {
        DType::Bool => Value::Bool(bits != 0),
        DType::I32 => Value::I32(bits as i64 as i32),
        DType::I64 => Value::I64(bits as i64),
        DType::F32 => Value::F32(f32::from_bits(bits as u32)),
        DType::F64 => Value::F64(f64::from_bits(bits)),
    }
}

impl Language for Node {
    type Discriminant = Op;

    fn discriminant(&self) -> Op {
        self.op
    }

    fn matches(&self, other: &Self) -> bool {
        self.op == other.op && self.args.len() == other.args.len()
    }

    fn children(&self) -> &[Id] {
        &self.args
    }

    fn children_mut(&mut self) -> &mut [Id] {
        &mut self.args
    }
}

fn type_suffix(t: DType) -> &'static str {
    t.name()
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.op {
            Op::Const(t, bits) => match const_value(t, bits) {
                Value::F64(x) if !x.is_nan() => write!(f, "f64:{x:?}"),
                Value::F32(x) if !x.is_nan() => write!(f, "f32:{x:?}"),
                Value::F64(_) | Value::F32(_) => write!(f, "{t}:nan#{bits:x}"),
                Value::I32(x) => write!(f, "i32:{x}"),
                Value::I64(x) => write!(f, "i64:{x}"),
                Value::Bool(b) => write!(f, "bool:{b}"),
            },
            Op::Leaf(k, t) => write!(f, "v{k}:{t}"),
            Op::Un(UnOp::Neg, t) => write!(f, "neg.{}", type_suffix(t)),
            Op::Un(UnOp::Not, _) => f.write_str("not"),
            Op::Bin(op, t) => write!(f, "{}.{}", op.symbol(), type_suffix(t)),
            Op::Select(t) => write!(f, "select.{}", type_suffix(t)),
            Op::Call(m, t) => write!(f, "{}.{}", m.name(), type_suffix(t)),
            Op::Cast(t) => write!(f, "cast.{}", type_suffix(t)),
            Op::Guarded(site, op, t) => write!(f, "{}.{}@{site}", op.symbol(), type_suffix(t)),
            Op::Clock(site) => write!(f, "wall_ns@{site}"),
        }
    }
}

fn parse_type(s: &str) -> Option<DType> {
    [DType::Bool, DType::I32, DType::I64, DType::F32, DType::F64]
        .into_iter()
        .find(|t| t.name() == s)
}

const BINOPS: [BinOp; 14] = [
    BinOp::Add,
    BinOp::Sub,
    BinOp::Mul,
    BinOp::Div,
    BinOp::FloorDiv,
    BinOp::Mod,
    BinOp::Eq,
    BinOp::Ne,
    BinOp::Lt,
    BinOp::Le,
    BinOp::Gt,
    BinOp::Ge,
    BinOp::And,
    BinOp::Or,
];

/// Reads the operations rules are written with: `f64:1` (a constant), `+.f64`,
/// `neg.f64`, `not`, `select.f64`, `sqrt.f64`, `cast.f64`.
impl FromOp for Node {
    type Error = String;

    fn from_op(op: &str, args: Vec<Id>) -> Result<Node, String> {
        let bad = || format!("unknown operation '{op}'");
        if let Some((t, lit)) = op.split_once(':') {
            let t = parse_type(t).ok_or_else(bad)?;
            let v = match t {
                DType::F64 => lit.parse::<f64>().map(Value::F64).ok(),
                DType::F32 => lit.parse::<f32>().map(Value::F32).ok(),
                DType::I64 => lit.parse::<i64>().map(Value::I64).ok(),
                DType::I32 => lit.parse::<i32>().map(Value::I32).ok(),
                DType::Bool => lit.parse::<bool>().map(Value::Bool).ok(),
            }
            .ok_or_else(bad)?;
            return Ok(Node::constant(v));
        }
        if op == "not" {
            return Ok(Node::new(Op::Un(UnOp::Not, DType::Bool), args));
        }
        let (name, t) = op.rsplit_once('.').ok_or_else(bad)?;
        let t = parse_type(t).ok_or_else(bad)?;
        let o = match name {
            "neg" => Op::Un(UnOp::Neg, t),
            "select" => Op::Select(t),
            "cast" => Op::Cast(t),
            _ => match BINOPS.into_iter().find(|b| b.symbol() == name) {
                Some(b) => Op::Bin(b, t),
                None => Op::Call(MathFn::from_name(name).ok_or_else(bad)?, t),
            },
        };
        Ok(Node::new(o, args))
    }
}

/// The type of a node's result.
pub fn result_type(op: Op) -> DType {
    match op {
        Op::Const(t, _) | Op::Leaf(_, t) | Op::Select(t) | Op::Cast(t) => t,
        Op::Un(UnOp::Not, _) => DType::Bool,
        Op::Un(_, t) | Op::Call(_, t) | Op::Guarded(_, _, t) => t,
        Op::Bin(b, _) if b.is_comparison() || b.is_logical() => DType::Bool,
        Op::Bin(_, t) => t,
        Op::Clock(_) => DType::I64,
    }
}

/// True for the functions whose result is exact or correctly rounded in every backend
/// (so a constant folds to the value each backend computes); transcendental functions
/// are not (the C library, CUDA's and Rust's differ in the last bits).
fn exact_function(f: MathFn) -> bool {
    matches!(
        f,
        MathFn::Abs
            | MathFn::Sqrt
            | MathFn::Floor
            | MathFn::Ceil
            | MathFn::Trunc
            | MathFn::Round
            | MathFn::Min
            | MathFn::Max
    )
}

/// The value of an operation on constant operands, when folding it is exact: through
/// the interpreter's own operations, so a folded constant is what every backend would
/// have computed.
pub fn fold(op: Op, args: &[Value]) -> Option<Value> {
    let v = match op {
        Op::Const(t, bits) => const_value(t, bits),
        Op::Un(u, _) => value::unary(u, args[0]).ok()?,
        Op::Bin(b, _) => value::binary(b, args[0], args[1]).ok()?,
        Op::Select(_) => value::select(args[0], args[1], args[2]).ok()?,
        Op::Call(f, _) if exact_function(f) => value::math(f, args).ok()?,
        Op::Cast(t) => args[0].cast(t),
        Op::Leaf(..) | Op::Call(..) | Op::Guarded(..) | Op::Clock(_) => return None,
    };
    Some(v)
}

/// What the analysis knows of an e-class: its type and, when it is a constant, its value.
#[derive(Clone, Copy, Debug)]
pub struct ClassData {
    /// The type of every node of the class.
    pub ty: DType,
    /// The constant's value.
    pub value: Option<Value>,
}

/// Constant folding: a class whose operands are constants gets the folded constant.
#[derive(Clone, Copy, Debug, Default)]
pub struct Fold;

impl Analysis<Node> for Fold {
    type Data = ClassData;

    fn make(egraph: &mut EGraph<Node, Self>, enode: &Node, _id: Id) -> ClassData {
        let ty = result_type(enode.op);
        let args: Option<Vec<Value>> = enode.args.iter().map(|a| egraph[*a].data.value).collect();
        let value = args.and_then(|a| fold(enode.op, &a));
        ClassData { ty, value }
    }

    fn merge(&mut self, a: &mut ClassData, b: ClassData) -> DidMerge {
        match (a.value, b.value) {
            (None, Some(v)) => {
                a.value = Some(v);
                DidMerge(true, false)
            }
            (Some(_), None) => DidMerge(false, true),
            _ => DidMerge(false, false),
        }
    }

    fn modify(egraph: &mut EGraph<Node, Self>, id: Id) {
        if let Some(v) = egraph[id].data.value {
            let c = egraph.add(Node::constant(v));
            egraph.union(id, c);
        }
    }
}
