//! Random tasklet expressions for differential tests: every operator and function, every
//! type, conditional evaluation, and the values where backends tend to disagree (±0,
//! ±inf, NaN, subnormals, integer extremes), as inputs and as literals.
//!
//! [`batch`] builds one program from a seed: a map over `N` points whose body holds one
//! tasklet per expression, each reading the inputs it names at the point and writing its
//! own output. The inputs are arrays of every type filled with special and random values,
//! plus two static `f64` symbols (specialization folds them into the expressions, where
//! a C compiler would fold math functions of them at compile time). Every expression is
//! well defined: an integer division or modulo is guarded by `select(d != 0, …)` (lazy,
//! so the division runs only where its divisor is not zero), so a run never stops.

use std::collections::BTreeMap;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::builder::SdfgBuilder;
use crate::dtype::{DType, Value};
use crate::expr::{BinOp, Expr, MathFn, UnOp};
use crate::interp::{Bindings, HostArray, eval::type_of};
use crate::sdfg::Sdfg;

/// The input arrays: name and type.
pub const INPUTS: [(&str, DType); 10] = [
    ("fa", DType::F64),
    ("fb", DType::F64),
    ("ga", DType::F32),
    ("gb", DType::F32),
    ("ia", DType::I32),
    ("ib", DType::I32),
    ("la", DType::I64),
    ("lb", DType::I64),
    ("ba", DType::Bool),
    ("bb", DType::Bool),
];

/// A program of random expressions with its inputs.
pub struct Batch {
    /// The program: `out<k>[i] = <expression k>` for every point `i`.
    pub sdfg: Sdfg,
    /// Its arguments: the inputs filled, the outputs zero.
    pub inputs: Bindings,
    /// The expressions, by output number.
    pub exprs: Vec<Expr>,
    /// The input values at each point, for messages: `name=value` per input.
    pub points: Vec<String>,
}

const F64_SPECIAL: [f64; 16] = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    2.0,
    f64::INFINITY,
    f64::NEG_INFINITY,
    f64::NAN,
    f64::MIN_POSITIVE,
    5e-324,
    -2.225073858507201e-308,
    f64::MAX,
    f64::MIN,
    1e300,
    3.0,
];

const I64_SPECIAL: [i64; 10] = [
    0,
    1,
    -1,
    2,
    -7,
    i64::MAX,
    i64::MIN,
    i32::MAX as i64,
    i32::MIN as i64,
    1 << 53,
];

struct Gen {
    rng: ChaCha8Rng,
}

impl Gen {
    fn f64_value(&mut self) -> f64 {
        match self.rng.random_range(0..4) {
            0 => F64_SPECIAL[self.rng.random_range(0..F64_SPECIAL.len())],
            1 => f64::from_bits(self.rng.random()),
            _ => self.rng.random_range(-4.0..4.0),
        }
    }

    fn i64_value(&mut self) -> i64 {
        match self.rng.random_range(0..3) {
            0 => I64_SPECIAL[self.rng.random_range(0..I64_SPECIAL.len())],
            1 => self.rng.random(),
            _ => self.rng.random_range(-20..20),
        }
    }

    fn value(&mut self, t: DType) -> Value {
        match t {
            DType::F64 => Value::F64(self.f64_value()),
            DType::F32 => Value::F32(self.f64_value() as f32),
            DType::I64 => Value::I64(self.i64_value()),
            DType::I32 => Value::I32(self.i64_value() as i32),
            DType::Bool => Value::Bool(self.rng.random()),
        }
    }

    fn numeric(&mut self) -> DType {
        [DType::F64, DType::F32, DType::I32, DType::I64][self.rng.random_range(0..4)]
    }

    fn float(&mut self) -> DType {
        if self.rng.random_bool(0.7) {
            DType::F64
        } else {
            DType::F32
        }
    }

    /// A leaf of type `t`: an input, a literal, a static symbol or the map parameter.
    fn leaf(&mut self, t: DType) -> Expr {
        let inputs: Vec<&str> = INPUTS
            .iter()
            .filter(|(_, d)| *d == t)
            .map(|(n, _)| *n)
            .collect();
        match self.rng.random_range(0..10) {
            0..=5 => Expr::var(inputs[self.rng.random_range(0..inputs.len())]),
            6 if t == DType::F64 => Expr::var(["c0", "c1"][self.rng.random_range(0..2)]),
            7 if t == DType::I64 => Expr::var("i"),
            _ => Expr::Const(self.value(t)),
        }
    }

    /// An expression of type `t` (the generator's target; promotions may widen it, the
    /// output takes whatever type it has).
    fn expr(&mut self, t: DType, depth: u32) -> Expr {
        if depth == 0 || self.rng.random_bool(0.2) {
            return self.leaf(t);
        }
        let d = depth - 1;
        if t == DType::Bool {
            return match self.rng.random_range(0..6) {
                0 | 1 => {
                    let ops = [
                        BinOp::Eq,
                        BinOp::Ne,
                        BinOp::Lt,
                        BinOp::Le,
                        BinOp::Gt,
                        BinOp::Ge,
                    ];
                    let op = ops[self.rng.random_range(0..ops.len())];
                    let (ta, tb) = (self.numeric(), self.numeric());
                    Expr::bin(op, self.expr(ta, d), self.expr(tb, d))
                }
                2 => Expr::bin(BinOp::And, self.expr(t, d), self.expr(t, d)),
                3 => Expr::bin(BinOp::Or, self.expr(t, d), self.expr(t, d)),
                4 => Expr::Unary(UnOp::Not, Box::new(self.expr(t, d))),
                _ => self.select(t, d),
            };
        }
        match self.rng.random_range(0..14) {
            0 => Expr::Unary(UnOp::Neg, Box::new(self.expr(t, d))),
            1..=4 => {
                let ops = [
                    BinOp::Add,
                    BinOp::Sub,
                    BinOp::Mul,
                    BinOp::Div,
                    BinOp::FloorDiv,
                    BinOp::Mod,
                ];
                let op = ops[self.rng.random_range(0..ops.len())];
                let tb = if self.rng.random_bool(0.7) {
                    t
                } else {
                    self.numeric()
                };
                let (a, b) = (self.expr(t, d), self.expr(tb, d));
                self.binary(op, a, b)
            }
            5 | 6 => self.call(t, d),
            7 => self.select(t, d),
            8 => {
                let from = [DType::F64, DType::F32, DType::I32, DType::I64, DType::Bool]
                    [self.rng.random_range(0..5)];
                Expr::Cast(t, Box::new(self.expr(from, d)))
            }
            // `0.0 - x` over a value a compiler can prove is not -0.0 (a conversion, an
            // absolute value, a bool): exact only with +0.0 kept.
            9 if t.is_float() => {
                let inner = match self.rng.random_range(0..3) {
                    0 => Expr::Cast(t, Box::new(self.expr(DType::I32, d))),
                    1 => Expr::Call(MathFn::Abs, vec![self.expr(t, d)]),
                    _ => Expr::Cast(t, Box::new(self.expr(DType::Bool, d))),
                };
                let zero = Expr::Const(Value::F64(0.0).cast(t));
                Expr::bin(BinOp::Sub, zero, inner)
            }
            // A negated fused product.
            10 if t.is_float() => {
                let args = (0..3).map(|_| self.expr(t, d)).collect();
                Expr::Unary(UnOp::Neg, Box::new(Expr::Call(MathFn::Fma, args)))
            }
            _ => self.leaf(t),
        }
    }

    /// `a op b`; an integer division or modulo guarded by its divisor (lazily).
    fn binary(&mut self, op: BinOp, a: Expr, b: Expr) -> Expr {
        let e = Expr::bin(op, a.clone(), b.clone());
        let divides = matches!(op, BinOp::Div | BinOp::FloorDiv | BinOp::Mod);
        match (type_of(&a, &input_types), type_of(&b, &input_types)) {
            (Ok(ta), Ok(tb)) if divides && !DType::promote(ta, tb).is_float() => {
                let zero = Expr::Const(Value::I64(0));
                Expr::Select(
                    Box::new(Expr::bin(BinOp::Ne, b, zero)),
                    Box::new(e),
                    Box::new(a),
                )
            }
            _ => e,
        }
    }

    fn select(&mut self, t: DType, d: u32) -> Expr {
        Expr::Select(
            Box::new(self.expr(DType::Bool, d)),
            Box::new(self.expr(t, d)),
            Box::new(self.expr(t, d)),
        )
    }

    fn call(&mut self, t: DType, d: u32) -> Expr {
        let f = MathFn::ALL[self.rng.random_range(0..MathFn::ALL.len())];
        // Integer operands where the function keeps them integer, else floats.
        let arg_t = if t.is_float() || f.keeps_int() {
            t
        } else {
            self.float()
        };
        let args = (0..f.arity()).map(|_| self.expr(arg_t, d)).collect();
        Expr::Call(f, args)
    }
}

/// The type of a name in the generated expressions.
fn input_types(name: &str) -> Option<DType> {
    match name {
        "c0" | "c1" => Some(DType::F64),
        "i" => Some(DType::I64),
        _ => INPUTS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t),
    }
}

/// `count` random expressions of depth at most `depth` over `points` points, from
/// `seed`; the same arguments give the same batch.
pub fn batch(seed: u64, count: usize, depth: u32, points: usize) -> Batch {
    let mut g = Gen {
        rng: ChaCha8Rng::seed_from_u64(seed),
    };
    let mut exprs = Vec::with_capacity(count);
    let mut types = Vec::with_capacity(count);
    while exprs.len() < count {
        let t =
            [DType::F64, DType::F32, DType::I32, DType::I64, DType::Bool][g.rng.random_range(0..5)];
        let e = g.expr(t, depth);
        if let Ok(t) = type_of(&e, &input_types) {
            exprs.push(e);
            types.push(t);
        }
    }
    let mut b = SdfgBuilder::new(&format!("exprs_{seed:x}"));
    b.symbol("N", DType::I64);
    let c0 = g.f64_value();
    let c1: f64 = g.rng.random_range(-3.0..3.0);
    b.static_symbol("c0", Value::F64(c0));
    b.static_symbol("c1", Value::F64(c1));
    for (n, t) in INPUTS {
        b.array(n, t, ["N"]);
    }
    for (k, t) in types.iter().enumerate() {
        b.array(&format!("out{k}"), *t, ["N"]);
    }
    let exprs_ref = &exprs;
    b.state("main", |s| {
        s.map("m", &["i"], &["0:N"], |m| {
            for (k, e) in exprs_ref.iter().enumerate() {
                let vars = e.vars();
                let ins: Vec<(String, String)> = INPUTS
                    .iter()
                    .filter(|(n, _)| vars.contains(*n))
                    .map(|(n, _)| (n.to_string(), format!("{n}[i]")))
                    .collect();
                let ins: Vec<(&str, &str)> =
                    ins.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
                let out = format!("out{k}[i]");
                m.tasklet(&format!("e{k}"), &ins, &[("o", &out)], &format!("o = {e}"));
            }
        });
    });
    let sdfg = b.build();
    // The expressions as the program holds them (parsed from their text).
    let mut parsed: BTreeMap<usize, Expr> = BTreeMap::new();
    for st in &sdfg.states {
        for n in st.graph.node_ids() {
            if let crate::Node::Map(m) = st.graph.node(n) {
                for t in m.body.node_ids() {
                    if let crate::Node::Tasklet(t) = m.body.node(t)
                        && let Some(k) = t.name.strip_prefix('e').and_then(|k| k.parse().ok())
                    {
                        parsed.insert(k, t.code[0].value.clone());
                    }
                }
            }
        }
    }
    let exprs: Vec<Expr> = (0..count).map(|k| parsed[&k].clone()).collect();

    let mut inputs = Bindings::default();
    inputs.symbols.insert("N".into(), Value::I64(points as i64));
    let mut columns: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    for (n, t) in INPUTS {
        let vals: Vec<Value> = (0..points).map(|_| g.value(t)).collect();
        inputs.arrays.insert(
            n.to_string(),
            HostArray::from_values(t, &[points], &vals).expect("the shape's count"),
        );
        columns.insert(n, vals);
    }
    for (k, t) in types.iter().enumerate() {
        inputs
            .arrays
            .insert(format!("out{k}"), HostArray::zeros(*t, &[points]));
    }
    let points = (0..points)
        .map(|p| {
            let mut s: Vec<String> = columns
                .iter()
                .map(|(n, v)| format!("{n}={}", v[p]))
                .collect();
            s.push(format!("c0={c0:e}, c1={c1:e}"));
            s.join(", ")
        })
        .collect();
    Batch {
        sdfg,
        inputs,
        exprs,
        points,
    }
}
