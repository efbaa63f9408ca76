//! The rewrite rules: the exact set (the default; each holds bit for bit for every
//! non-NaN input, and a NaN stays a NaN) and the fast-math set (opt-in, changes results).
//! Why each exact rule is exact is in `docs/transforms.md`.

use egg::{Applier, EGraph, Id, Pattern, PatternAst, Rewrite, Subst, Symbol, Var, rewrite};
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

/// The exact rules, for every float and integer type.
pub fn exact() -> Vec<Rule> {
    let mut rules = Vec::new();
    for t in FLOATS {
        let t = t.name();
        rules.extend([
            rewrite!(format!("mul-one.{t}"); {pat(&format!("(*.{t} ?x {t}:1)"))} => "?x"),
            rewrite!(format!("div-one.{t}"); {pat(&format!("(/.{t} ?x {t}:1)"))} => "?x"),
            rewrite!(format!("sub-zero.{t}"); {pat(&format!("(-.{t} ?x {t}:0)"))} => "?x"),
            rewrite!(format!("add-negzero.{t}"); {pat(&format!("(+.{t} ?x {t}:-0)"))} => "?x"),
            rewrite!(format!("mul-two.{t}"); {pat(&format!("(*.{t} ?x {t}:2)"))} => {pat(&format!("(+.{t} ?x ?x)"))}),
            rewrite!(format!("add-self.{t}"); {pat(&format!("(+.{t} ?x ?x)"))} => {pat(&format!("(*.{t} ?x {t}:2)"))}),
            rewrite!(format!("neg-neg.{t}"); {pat(&format!("(neg.{t} (neg.{t} ?x))"))} => "?x"),
            rewrite!(format!("mul-minus-one.{t}"); {pat(&format!("(*.{t} ?x {t}:-1)"))} => {pat(&format!("(neg.{t} ?x)"))}),
            rewrite!(format!("sub-to-add.{t}"); {pat(&format!("(-.{t} ?a ?b)"))} => {pat(&format!("(+.{t} ?a (neg.{t} ?b))"))}),
            rewrite!(format!("add-neg-to-sub.{t}"); {pat(&format!("(+.{t} ?a (neg.{t} ?b))"))} => {pat(&format!("(-.{t} ?a ?b)"))}),
            rewrite!(format!("sub-neg.{t}"); {pat(&format!("(-.{t} ?a (neg.{t} ?b))"))} => {pat(&format!("(+.{t} ?a ?b)"))}),
            rewrite!(format!("add-comm.{t}"); {pat(&format!("(+.{t} ?a ?b)"))} => {pat(&format!("(+.{t} ?b ?a)"))}),
            rewrite!(format!("mul-comm.{t}"); {pat(&format!("(*.{t} ?a ?b)"))} => {pat(&format!("(*.{t} ?b ?a)"))}),
            rewrite!(format!("neg-mul.{t}"); {pat(&format!("(*.{t} (neg.{t} ?a) ?b)"))} => {pat(&format!("(neg.{t} (*.{t} ?a ?b))"))}),
            rewrite!(format!("neg-div.{t}"); {pat(&format!("(/.{t} (neg.{t} ?a) ?b)"))} => {pat(&format!("(neg.{t} (/.{t} ?a ?b))"))}),
        ]);
        rules.push(
            Rewrite::new(
                format!("div-pow2.{t}"),
                pat(&format!("(/.{t} ?x ?c)")),
                ByReciprocal {
                    x: var("?x"),
                    c: var("?c"),
                    only_powers_of_two: true,
                },
            )
            .expect("a valid rule"),
        );
    }
    for t in INTS {
        let t = t.name();
        rules.extend([
            rewrite!(format!("add-zero.{t}"); {pat(&format!("(+.{t} ?x {t}:0)"))} => "?x"),
            rewrite!(format!("sub-zero.{t}"); {pat(&format!("(-.{t} ?x {t}:0)"))} => "?x"),
            rewrite!(format!("mul-one.{t}"); {pat(&format!("(*.{t} ?x {t}:1)"))} => "?x"),
            rewrite!(format!("mul-zero.{t}"); {pat(&format!("(*.{t} ?x {t}:0)"))} => {pat(&format!("{t}:0"))}),
            rewrite!(format!("sub-self.{t}"); {pat(&format!("(-.{t} ?x ?x)"))} => {pat(&format!("{t}:0"))}),
            rewrite!(format!("neg-neg.{t}"); {pat(&format!("(neg.{t} (neg.{t} ?x))"))} => "?x"),
            rewrite!(format!("add-comm.{t}"); {pat(&format!("(+.{t} ?a ?b)"))} => {pat(&format!("(+.{t} ?b ?a)"))}),
            rewrite!(format!("mul-comm.{t}"); {pat(&format!("(*.{t} ?a ?b)"))} => {pat(&format!("(*.{t} ?b ?a)"))}),
            rewrite!(format!("add-assoc.{t}"); {pat(&format!("(+.{t} (+.{t} ?a ?b) ?c)"))} => {pat(&format!("(+.{t} ?a (+.{t} ?b ?c))"))}),
            rewrite!(format!("sub-add.{t}"); {pat(&format!("(-.{t} (+.{t} ?a ?b) ?b)"))} => "?a"),
            rewrite!(format!("add-sub.{t}"); {pat(&format!("(+.{t} (-.{t} ?a ?b) ?b)"))} => "?a"),
        ]);
    }
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
    let mut rules = Vec::new();
    for t in FLOATS {
        let t = t.name();
        rules.extend([
            rewrite!(format!("fm-add-assoc.{t}"); {pat(&format!("(+.{t} (+.{t} ?a ?b) ?c)"))} => {pat(&format!("(+.{t} ?a (+.{t} ?b ?c))"))}),
            rewrite!(format!("fm-add-assoc-r.{t}"); {pat(&format!("(+.{t} ?a (+.{t} ?b ?c))"))} => {pat(&format!("(+.{t} (+.{t} ?a ?b) ?c)"))}),
            rewrite!(format!("fm-mul-assoc.{t}"); {pat(&format!("(*.{t} (*.{t} ?a ?b) ?c)"))} => {pat(&format!("(*.{t} ?a (*.{t} ?b ?c))"))}),
            rewrite!(format!("fm-distribute.{t}"); {pat(&format!("(*.{t} ?a (+.{t} ?b ?c))"))} => {pat(&format!("(+.{t} (*.{t} ?a ?b) (*.{t} ?a ?c))"))}),
            rewrite!(format!("fm-factor.{t}"); {pat(&format!("(+.{t} (*.{t} ?a ?b) (*.{t} ?a ?c))"))} => {pat(&format!("(*.{t} ?a (+.{t} ?b ?c))"))}),
        ]);
        rules.push(
            Rewrite::new(
                format!("fm-reciprocal.{t}"),
                pat(&format!("(/.{t} ?x ?c)")),
                ByReciprocal {
                    x: var("?x"),
                    c: var("?c"),
                    only_powers_of_two: false,
                },
            )
            .expect("a valid rule"),
        );
    }
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
