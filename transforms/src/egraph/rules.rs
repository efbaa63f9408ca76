//! The rewrite rules: the exact set (the default; each holds bit for bit for every
//! non-NaN input, and a NaN stays a NaN) and the fast-math set (opt-in, changes results).
//! Why each exact rule is exact is in `docs/transforms.md`.

use egg::{Applier, EGraph, Id, Pattern, PatternAst, Rewrite, Subst, Symbol, Var};
use sdflow_ir::{DType, Value};

use super::lang::{Fold, Node, Op};

/// A rule of the pass.
pub type Rule = Rewrite<Node, Fold>;

const FLOATS: [DType; 2] = [DType::F32, DType::F64];
const INTS: [DType; 2] = [DType::I32, DType::I64];

fn pat(s: &str) -> Pattern<Node> {
    s.parse()
        .unwrap_or_else(|e| panic!("rule pattern {s:?}: {e}"))
}

/// Exact rules on floats, written for a type `T` (`f32` and `f64`): name, left, right.
const FLOAT_EXACT: [(&str, &str, &str); 15] = [
    ("mul-one", "(*.T ?x T:1)", "?x"),
    ("div-one", "(/.T ?x T:1)", "?x"),
    ("sub-zero", "(-.T ?x T:0)", "?x"),
    ("add-negzero", "(+.T ?x T:-0)", "?x"),
    ("mul-two", "(*.T ?x T:2)", "(+.T ?x ?x)"),
    ("add-self", "(+.T ?x ?x)", "(*.T ?x T:2)"),
    ("neg-neg", "(neg.T (neg.T ?x))", "?x"),
    ("mul-minus-one", "(*.T ?x T:-1)", "(neg.T ?x)"),
    ("sub-to-add", "(-.T ?a ?b)", "(+.T ?a (neg.T ?b))"),
    ("add-neg-to-sub", "(+.T ?a (neg.T ?b))", "(-.T ?a ?b)"),
    ("sub-neg", "(-.T ?a (neg.T ?b))", "(+.T ?a ?b)"),
    ("add-comm", "(+.T ?a ?b)", "(+.T ?b ?a)"),
    ("mul-comm", "(*.T ?a ?b)", "(*.T ?b ?a)"),
    ("neg-mul", "(*.T (neg.T ?a) ?b)", "(neg.T (*.T ?a ?b))"),
    ("neg-div", "(/.T (neg.T ?a) ?b)", "(neg.T (/.T ?a ?b))"),
];

/// Exact rules on wrapping integers (`i32` and `i64`): a commutative ring.
const INT_EXACT: [(&str, &str, &str); 11] = [
    ("add-zero", "(+.T ?x T:0)", "?x"),
    ("sub-zero", "(-.T ?x T:0)", "?x"),
    ("mul-one", "(*.T ?x T:1)", "?x"),
    ("mul-zero", "(*.T ?x T:0)", "T:0"),
    ("sub-self", "(-.T ?x ?x)", "T:0"),
    ("neg-neg", "(neg.T (neg.T ?x))", "?x"),
    ("add-comm", "(+.T ?a ?b)", "(+.T ?b ?a)"),
    ("mul-comm", "(*.T ?a ?b)", "(*.T ?b ?a)"),
    ("add-assoc", "(+.T (+.T ?a ?b) ?c)", "(+.T ?a (+.T ?b ?c))"),
    ("sub-add", "(-.T (+.T ?a ?b) ?b)", "?a"),
    ("add-sub", "(+.T (-.T ?a ?b) ?b)", "?a"),
];

/// Fast-math rules on floats: reassociation, distribution, factoring, fma formation.
const FLOAT_FAST: [(&str, &str, &str); 6] = [
    ("fm-fma", "(+.T (*.T ?a ?b) ?c)", "(fma.T ?a ?b ?c)"),
    (
        "fm-add-assoc",
        "(+.T (+.T ?a ?b) ?c)",
        "(+.T ?a (+.T ?b ?c))",
    ),
    (
        "fm-add-assoc-r",
        "(+.T ?a (+.T ?b ?c))",
        "(+.T (+.T ?a ?b) ?c)",
    ),
    (
        "fm-mul-assoc",
        "(*.T (*.T ?a ?b) ?c)",
        "(*.T ?a (*.T ?b ?c))",
    ),
    (
        "fm-distribute",
        "(*.T ?a (+.T ?b ?c))",
        "(+.T (*.T ?a ?b) (*.T ?a ?c))",
    ),
    (
        "fm-factor",
        "(+.T (*.T ?a ?b) (*.T ?a ?c))",
        "(*.T ?a (+.T ?b ?c))",
    ),
];

/// The rules of a table for each of `types`, `T` replaced by the type's name.
fn instantiate(table: &[(&str, &str, &str)], types: &[DType]) -> Vec<Rule> {
    let mut rules = Vec::new();
    for t in types {
        let t = t.name();
        let with = |s: &str| s.replace('T', t);
        for (name, lhs, rhs) in table {
            rules.push(
                Rewrite::new(format!("{name}.{t}"), pat(&with(lhs)), pat(&with(rhs)))
                    .unwrap_or_else(|e| panic!("rule {name}: {e}")),
            );
        }
    }
    rules
}

/// `x / c → x * (1/c)` for each float type, for powers of two only or for any constant.
fn reciprocal_rules(name: &str, only_powers_of_two: bool) -> Vec<Rule> {
    FLOATS
        .iter()
        .map(|t| {
            let t = t.name();
            Rewrite::new(
                format!("{name}.{t}"),
                pat(&format!("(/.{t} ?x ?c)")),
                ByReciprocal {
                    x: var("?x"),
                    c: var("?c"),
                    only_powers_of_two,
                },
            )
            .expect("a valid rule")
        })
        .collect()
}

/// The exact rules, for every float and integer type.
pub fn exact() -> Vec<Rule> {
    let mut rules = instantiate(&FLOAT_EXACT, &FLOATS);
    rules.extend(reciprocal_rules("div-pow2", true));
    rules.extend(instantiate(&INT_EXACT, &INTS));
    for t in [DType::Bool, DType::I32, DType::I64, DType::F32, DType::F64] {
        rules.push(
            Rewrite::new(
                format!("select-const.{}", t.name()),
                pat(&format!("(select.{} ?c ?a ?b)", t.name())),
                ConstSelect {
                    c: var("?c"),
                    a: var("?a"),
                    b: var("?b"),
                },
            )
            .expect("a valid rule"),
        );
    }
    rules
}

/// The fast-math rules: reassociation, distribution and multiplication by a constant's
/// reciprocal on floats. They change results (by rounding, and `inf`/NaN where an
/// intermediate overflows); opt-in per program.
pub fn fast_math() -> Vec<Rule> {
    let mut rules = instantiate(&FLOAT_FAST, &FLOATS);
    rules.extend(reciprocal_rules("fm-reciprocal", false));
    rules
}

fn var(s: &str) -> Var {
    s.parse().expect("a pattern variable")
}

/// `x / c → x * (1/c)` for a constant `c`: with `only_powers_of_two`, only where `c` is
/// a power of two whose reciprocal is representable (then `x/c` and `x*(1/c)` are the
/// same real number, rounded once: exact); otherwise for any finite nonzero `c`.
struct ByReciprocal {
    x: Var,
    c: Var,
    only_powers_of_two: bool,
}

impl Applier<Node, Fold> for ByReciprocal {
    fn apply_one(
        &self,
        egraph: &mut EGraph<Node, Fold>,
        eclass: Id,
        subst: &Subst,
        _ast: Option<&PatternAst<Node>>,
        rule: Symbol,
    ) -> Vec<Id> {
        let (x, c) = (subst[self.x], subst[self.c]);
        let p2 = self.only_powers_of_two;
        let r = match egraph[c].data.value {
            Some(Value::F64(v)) => {
                let r = 1.0 / v;
                allowed(v, r, p2, v.to_bits(), 52, v.is_normal()).then_some(Value::F64(r))
            }
            Some(Value::F32(v)) => {
                let r = 1.0 / v;
                let ok = v.is_finite() && r.is_finite() && v != 0.0 && r != 0.0;
                (ok && (!p2 || is_pow2(v.to_bits() as u64, 23, v.is_normal())))
                    .then_some(Value::F32(r))
            }
            _ => None,
        };
        let Some(r) = r else { return vec![] };
        let t = egraph[eclass].data.ty;
        let rc = egraph.add(Node::constant(r));
        let m = egraph.add(Node::new(Op::Bin(sdflow_ir::BinOp::Mul, t), vec![x, rc]));
        if egraph.union_trusted(eclass, m, rule) {
            vec![eclass]
        } else {
            vec![]
        }
    }
}

/// True when multiplying by `r = 1/c` may replace dividing by `c`: both finite and
/// nonzero, and with `p2`, `c` a power of two (then `r` is exact and `x/c`, `x*r` are the
/// same real number rounded once).
fn allowed(c: f64, r: f64, p2: bool, bits: u64, mant: u32, normal: bool) -> bool {
    c.is_finite() && r.is_finite() && c != 0.0 && r != 0.0 && (!p2 || is_pow2(bits, mant, normal))
}

/// True when the float with these bits (`mant` mantissa bits) is ± a power of two.
fn is_pow2(bits: u64, mant: u32, normal: bool) -> bool {
    let m = bits & ((1u64 << mant) - 1);
    if normal { m == 0 } else { m.count_ones() == 1 }
}

/// `select(c, a, b)` with a constant condition is `a` or `b` (both have the select's
/// type already: the tree is elaborated).
struct ConstSelect {
    c: Var,
    a: Var,
    b: Var,
}

impl Applier<Node, Fold> for ConstSelect {
    fn apply_one(
        &self,
        egraph: &mut EGraph<Node, Fold>,
        eclass: Id,
        subst: &Subst,
        _ast: Option<&PatternAst<Node>>,
        rule: Symbol,
    ) -> Vec<Id> {
        let Some(Value::Bool(c)) = egraph[subst[self.c]].data.value else {
            return vec![];
        };
        let pick = if c { subst[self.a] } else { subst[self.b] };
        if egraph.union_trusted(eclass, pick, rule) {
            vec![eclass]
        } else {
            vec![]
        }
    }
}
