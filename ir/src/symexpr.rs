//! Symbolic integer expressions: shapes, strides, map ranges, memlet subsets, loop bounds
//! and control-flow conditions.
//!
//! `SymExpr` is deliberately small (affine-first, no computer-algebra system): a tree over
//! 64-bit integers and named symbols with `+ - * // % min max`, comparisons and boolean
//! connectives (booleans are the integers 0 and 1). Children are reference-counted, so
//! clones are cheap; every operation is deterministic.
//!
//! Why one file of this size: the algebra (simplification to canonical sums, decided
//! comparisons, folded min/max), substitution and evaluation work on one representation
//! and share its normal form.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

/// A binary operator of [`SymExpr`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SymOp {
    /// `a + b`
    Add,
    /// `a - b`
    Sub,
    /// `a * b`
    Mul,
    /// `a // b`: division rounding toward negative infinity (Python's `//`).
    FloorDiv,
    /// `a % b`: remainder with the sign of `b` (Python's `%`).
    Mod,
    /// `min(a, b)`
    Min,
    /// `max(a, b)`
    Max,
    /// `a == b` (1 or 0)
    Eq,
    /// `a != b`
    Ne,
    /// `a < b`
    Lt,
    /// `a <= b`
    Le,
    /// `a > b`
    Gt,
    /// `a >= b`
    Ge,
    /// `a && b` (operands are truthy when non-zero)
    And,
    /// `a || b`
    Or,
}

impl SymOp {
    /// Infix spelling, or the function name for `min`/`max`.
    pub fn symbol(self) -> &'static str {
        match self {
            SymOp::Add => "+",
            SymOp::Sub => "-",
            SymOp::Mul => "*",
            SymOp::FloorDiv => "//",
            SymOp::Mod => "%",
            SymOp::Min => "min",
            SymOp::Max => "max",
            SymOp::Eq => "==",
            SymOp::Ne => "!=",
            SymOp::Lt => "<",
            SymOp::Le => "<=",
            SymOp::Gt => ">",
            SymOp::Ge => ">=",
            SymOp::And => "&&",
            SymOp::Or => "||",
        }
    }

    /// Binding strength when printed infix (higher binds tighter); 0 for calls.
    pub(crate) fn precedence(self) -> u8 {
        match self {
            SymOp::Or => 1,
            SymOp::And => 2,
            SymOp::Eq | SymOp::Ne | SymOp::Lt | SymOp::Le | SymOp::Gt | SymOp::Ge => 3,
            SymOp::Add | SymOp::Sub => 4,
            SymOp::Mul | SymOp::FloorDiv | SymOp::Mod => 5,
            SymOp::Min | SymOp::Max => 0,
        }
    }

    /// Applies the operator to two integers; `None` on overflow or division by zero.
    pub fn apply(self, a: i64, b: i64) -> Option<i64> {
        Some(match self {
            SymOp::Add => a.checked_add(b)?,
            SymOp::Sub => a.checked_sub(b)?,
            SymOp::Mul => a.checked_mul(b)?,
            SymOp::FloorDiv => floor_div(a, b)?,
            SymOp::Mod => floor_mod(a, b)?,
            SymOp::Min => a.min(b),
            SymOp::Max => a.max(b),
            SymOp::Eq => (a == b) as i64,
            SymOp::Ne => (a != b) as i64,
            SymOp::Lt => (a < b) as i64,
            SymOp::Le => (a <= b) as i64,
            SymOp::Gt => (a > b) as i64,
            SymOp::Ge => (a >= b) as i64,
            SymOp::And => (a != 0 && b != 0) as i64,
            SymOp::Or => (a != 0 || b != 0) as i64,
        })
    }

    fn is_comparison(self) -> bool {
        matches!(
            self,
            SymOp::Eq | SymOp::Ne | SymOp::Lt | SymOp::Le | SymOp::Gt | SymOp::Ge
        )
    }
}

/// Python-style floor division; `None` on division by zero or overflow.
pub fn floor_div(a: i64, b: i64) -> Option<i64> {
    if b == 0 {
        return None;
    }
    let q = a.checked_div(b)?;
    if (a % b != 0) && ((a < 0) != (b < 0)) {
        q.checked_sub(1)
    } else {
        Some(q)
    }
}

/// Python-style modulo (result has the sign of `b`); `None` on division by zero.
pub fn floor_mod(a: i64, b: i64) -> Option<i64> {
    if b == 0 {
        return None;
    }
    let r = a.checked_rem(b).unwrap_or(0);
    Some(if r != 0 && ((r < 0) != (b < 0)) {
        r + b
    } else {
        r
    })
}

/// A symbolic integer expression.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SymExpr {
    /// An integer constant.
    Int(i64),
    /// A symbol, map parameter, loop variable or host scalar, by name.
    Sym(Arc<str>),
    /// Arithmetic negation.
    Neg(Arc<SymExpr>),
    /// Logical negation (1 if the operand is 0, else 0).
    Not(Arc<SymExpr>),
    /// A binary operation.
    Bin(SymOp, Arc<SymExpr>, Arc<SymExpr>),
}

/// Why a [`SymExpr`] could not be evaluated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    /// A name had no value.
    #[error("symbol '{0}' has no value")]
    Unbound(String),
    /// Division or modulo by zero.
    #[error("division by zero in '{0}'")]
    DivByZero(String),
    /// 64-bit overflow.
    #[error("integer overflow in '{0}'")]
    Overflow(String),
}

impl From<i64> for SymExpr {
    fn from(v: i64) -> Self {
        SymExpr::Int(v)
    }
}

impl From<&str> for SymExpr {
    /// Parses expression text; panics on malformed text (for literals in code only; use
    /// [`SymExpr::parse`] for input).
    fn from(s: &str) -> Self {
        SymExpr::parse(s).unwrap_or_else(|e| panic!("invalid symbolic expression {s:?}: {e}"))
    }
}

/// A parameter with its inclusive bounds `lo..=hi` (the boxes bounds propagation
/// works with).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ParamBox {
    /// Parameter name.
    pub name: String,
    /// Smallest value.
    pub lo: SymExpr,
    /// Largest value.
    pub hi: SymExpr,
}

impl SymExpr {
    /// A symbol reference.
    pub fn sym(name: &str) -> SymExpr {
        SymExpr::Sym(Arc::from(name))
    }

    /// A binary node (not simplified).
    pub fn bin(op: SymOp, a: SymExpr, b: SymExpr) -> SymExpr {
        SymExpr::Bin(op, Arc::new(a), Arc::new(b))
    }

    /// `self + other`, simplified.
    pub fn add(&self, other: &SymExpr) -> SymExpr {
        SymExpr::bin(SymOp::Add, self.clone(), other.clone()).simplify()
    }

    /// `self - other`, simplified.
    pub fn sub(&self, other: &SymExpr) -> SymExpr {
        SymExpr::bin(SymOp::Sub, self.clone(), other.clone()).simplify()
    }

    /// `self * other`, simplified.
    pub fn mul(&self, other: &SymExpr) -> SymExpr {
        SymExpr::bin(SymOp::Mul, self.clone(), other.clone()).simplify()
    }

    /// `min(self, other)`, simplified.
    pub fn min(&self, other: &SymExpr) -> SymExpr {
        SymExpr::bin(SymOp::Min, self.clone(), other.clone()).simplify()
    }

    /// `max(self, other)`, simplified.
    pub fn max(&self, other: &SymExpr) -> SymExpr {
        SymExpr::bin(SymOp::Max, self.clone(), other.clone()).simplify()
    }

    /// The constant value, if this is an integer literal.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            SymExpr::Int(v) => Some(*v),
            _ => None,
        }
    }

    /// The constant value after simplification, if it has one.
    pub fn const_value(&self) -> Option<i64> {
        match self {
            SymExpr::Int(v) => Some(*v),
            SymExpr::Sym(_) => None,
            // A sum that does not reduce to a constant simplifies to a sum or product.
            SymExpr::Neg(_) | SymExpr::Bin(SymOp::Add | SymOp::Sub | SymOp::Mul, _, _) => {
                Linear::of(self)?.as_constant()
            }
            _ => self.simplify().as_int(),
        }
    }

    /// `self - other` as a constant, when the difference simplifies to one.
    pub fn const_diff(&self, other: &SymExpr) -> Option<i64> {
        if let (SymExpr::Int(a), SymExpr::Int(b)) = (self, other) {
            return a.checked_sub(*b);
        }
        // What `self.sub(other).simplify()` computes, without building the result.
        Linear::of(self)?
            .plus(Linear::of(other)?, -1)?
            .as_constant()
    }

    /// Inclusive bounds of the expression over the parameter boxes, when it is affine in
    /// the boxes' parameters with constant coefficients (see `propagate::expr_bounds`).
    pub(crate) fn affine_bounds(&self, boxes: &[ParamBox]) -> Option<(SymExpr, SymExpr)> {
        let [lo, hi] = self.affine_ends(boxes, [true, true])?;
        Some((lo?, hi?))
    }

    /// One end of [`SymExpr::affine_bounds`]: the upper bound when `upper`, else the
    /// lower one.
    pub(crate) fn affine_bound(&self, boxes: &[ParamBox], upper: bool) -> Option<SymExpr> {
        let [lo, hi] = self.affine_ends(boxes, [!upper, upper])?;
        if upper { hi } else { lo }
    }

    /// The lower and upper ends asked for in `want` (one pass over the expression's
    /// terms); `None` when the expression is not affine in the box's parameters.
    fn affine_ends(&self, boxes: &[ParamBox], want: [bool; 2]) -> Option<[Option<SymExpr>; 2]> {
        let lin = Linear::of(self)?;
        let mut acc = want.map(|w| w.then(|| Linear::constant(lin.constant)));
        let mut rest = Vec::new();
        for (atom, c) in lin.terms {
            let param = match &atom {
                SymExpr::Sym(s) => boxes.iter().find(|b| *b.name == **s),
                _ => None,
            };
            match param {
                Some(b) => {
                    // A positive coefficient takes the low end at the low bound.
                    for (upper, a) in acc.iter_mut().enumerate() {
                        let Some(sum) = a.take() else { continue };
                        let end = if (c >= 0) != (upper == 1) {
                            &b.lo
                        } else {
                            &b.hi
                        };
                        *a = Some(sum.plus(Linear::of(end)?.scale(c)?, 1)?);
                    }
                }
                None if boxes.iter().any(|b| atom.mentions(&b.name)) => return None,
                None => rest.push((atom, c)),
            }
        }
        let mut out = [None, None];
        for (k, a) in acc.into_iter().enumerate() {
            let Some(mut sum) = a else { continue };
            if !rest.is_empty() {
                let part = Linear {
                    terms: rest.clone(),
                    constant: 0,
                };
                sum = sum.plus(part, 1)?;
            }
            out[k] = Some(sum.rebuild());
        }
        Some(out)
    }

    /// Every name the expression mentions, sorted.
    pub fn free_symbols(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        self.collect_symbols(&mut out);
        out
    }

    fn collect_symbols(&self, out: &mut BTreeSet<String>) {
        match self {
            SymExpr::Int(_) => {}
            SymExpr::Sym(s) => {
                out.insert(s.to_string());
            }
            SymExpr::Neg(a) | SymExpr::Not(a) => a.collect_symbols(out),
            SymExpr::Bin(_, a, b) => {
                a.collect_symbols(out);
                b.collect_symbols(out);
            }
        }
    }

    /// Appends every name the expression mentions (with repeats) to `out`.
    pub(crate) fn symbol_refs<'a>(&'a self, out: &mut Vec<&'a str>) {
        match self {
            SymExpr::Int(_) => {}
            SymExpr::Sym(s) => out.push(s),
            SymExpr::Neg(a) | SymExpr::Not(a) => a.symbol_refs(out),
            SymExpr::Bin(_, a, b) => {
                a.symbol_refs(out);
                b.symbol_refs(out);
            }
        }
    }

    /// True if `name` occurs in the expression.
    pub fn mentions(&self, name: &str) -> bool {
        match self {
            SymExpr::Int(_) => false,
            SymExpr::Sym(s) => &**s == name,
            SymExpr::Neg(a) | SymExpr::Not(a) => a.mentions(name),
            SymExpr::Bin(_, a, b) => a.mentions(name) || b.mentions(name),
        }
    }

    /// Replaces names by expressions (simultaneously; the result is not simplified).
    pub fn substitute(&self, map: &BTreeMap<String, SymExpr>) -> SymExpr {
        if map.is_empty() {
            return self.clone();
        }
        match self {
            SymExpr::Int(_) => self.clone(),
            SymExpr::Sym(s) => map.get(&**s).cloned().unwrap_or_else(|| self.clone()),
            SymExpr::Neg(a) => SymExpr::Neg(Arc::new(a.substitute(map))),
            SymExpr::Not(a) => SymExpr::Not(Arc::new(a.substitute(map))),
            SymExpr::Bin(op, a, b) => SymExpr::bin(*op, a.substitute(map), b.substitute(map)),
        }
    }

    /// Replaces one name by an expression (not simplified).
    pub fn substitute_one(&self, name: &str, value: &SymExpr) -> SymExpr {
        let mut map = BTreeMap::new();
        map.insert(name.to_string(), value.clone());
        self.substitute(&map)
    }

    /// Evaluates with `lookup` giving the value of each name.
    pub fn eval(&self, lookup: &dyn Fn(&str) -> Option<i64>) -> Result<i64, EvalError> {
        match self {
            SymExpr::Int(v) => Ok(*v),
            SymExpr::Sym(s) => lookup(s).ok_or_else(|| EvalError::Unbound(s.to_string())),
            SymExpr::Neg(a) => a
                .eval(lookup)?
                .checked_neg()
                .ok_or_else(|| EvalError::Overflow(self.to_string())),
            SymExpr::Not(a) => Ok((a.eval(lookup)? == 0) as i64),
            SymExpr::Bin(op, a, b) => {
                let x = a.eval(lookup)?;
                // Short-circuit like C, so `n > 0 && m // n > 1` is safe.
                match op {
                    SymOp::And if x == 0 => return Ok(0),
                    SymOp::Or if x != 0 => return Ok(1),
                    _ => {}
                }
                let y = b.eval(lookup)?;
                op.apply(x, y).ok_or_else(|| {
                    if matches!(op, SymOp::FloorDiv | SymOp::Mod) && y == 0 {
                        EvalError::DivByZero(self.to_string())
                    } else {
                        EvalError::Overflow(self.to_string())
                    }
                })
            }
        }
    }

    /// Evaluates with values from a map.
    pub fn eval_map(&self, env: &BTreeMap<String, i64>) -> Result<i64, EvalError> {
        self.eval(&|s| env.get(s).copied())
    }

    /// Simplifies to a canonical form: constants folded, sums and constant multiples
    /// gathered into `c1*a1 + c2*a2 + … + c0` with terms in a fixed order, comparisons
    /// whose sides differ by a constant decided. Deterministic and idempotent.
    ///
    /// Simplification assumes the expression is defined: a subterm that would fail to
    /// evaluate (a division by zero) may cancel away (`x // 0 - x // 0` becomes `0`). Where
    /// both evaluate, they give the same value.
    pub fn simplify(&self) -> SymExpr {
        match self {
            SymExpr::Int(_) | SymExpr::Sym(_) => self.clone(),
            SymExpr::Neg(_) | SymExpr::Bin(SymOp::Add | SymOp::Sub | SymOp::Mul, _, _) => {
                match Linear::of(self) {
                    Some(l) => l.rebuild(),
                    None => self.simplify_children(),
                }
            }
            SymExpr::Not(a) => match a.simplify() {
                SymExpr::Int(v) => SymExpr::Int((v == 0) as i64),
                a => SymExpr::Not(Arc::new(a)),
            },
            SymExpr::Bin(op, a, b) => simplify_bin(*op, a.simplify(), b.simplify()),
        }
    }

    /// Splits the expression into `Σ c_p·p + rest` over the given names, when it is affine
    /// in them with constant coefficients: returns the non-zero coefficients and `rest`
    /// (which mentions none of the names). `None` when a name occurs non-linearly (inside
    /// a product of two non-constants, a `//`, a `min`, …).
    pub fn affine_in(&self, names: &[&str]) -> Option<(BTreeMap<String, i64>, SymExpr)> {
        let lin = Linear::of(self)?;
        let mut coeffs = BTreeMap::new();
        let mut rest = Linear::constant(lin.constant);
        for (atom, c) in lin.terms {
            match &atom {
                SymExpr::Sym(s) if names.contains(&&**s) => {
                    coeffs.insert(s.to_string(), c);
                }
                _ if names.iter().any(|n| atom.mentions(n)) => return None,
                // Still sorted: a subsequence of sorted terms.
                _ => rest.terms.push((atom, c)),
            }
        }
        Some((coeffs, rest.rebuild()))
    }

    /// Whether `self <= other` whatever values the symbols take. Proven on the
    /// difference as a sum: a constant at most 0 once each `min` and `max` in it is
    /// replaced by its operands — by either one where the replacement can only grow the
    /// sum (a `min` added, a `max` subtracted), by each in turn otherwise (the node
    /// equals one of them). Sound, not complete: `false` means "not proven"; at most
    /// eight nodes deep.
    pub fn provably_le(&self, other: &SymExpr) -> bool {
        if let Some(d) = self.const_diff(other) {
            return d <= 0;
        }
        match Linear::of(self).and_then(|a| a.plus(Linear::of(other)?, -1)) {
            Some(diff) => nonpositive(diff, 8),
            None => false,
        }
    }

    /// Every occurrence of `from` replaced by `to`, simplified.
    pub fn replace(&self, from: &SymExpr, to: &SymExpr) -> SymExpr {
        fn go(e: &SymExpr, from: &SymExpr, to: &SymExpr) -> SymExpr {
            if e == from {
                return to.clone();
            }
            match e {
                SymExpr::Int(_) | SymExpr::Sym(_) => e.clone(),
                SymExpr::Neg(a) => SymExpr::Neg(Arc::new(go(a, from, to))),
                SymExpr::Not(a) => SymExpr::Not(Arc::new(go(a, from, to))),
                SymExpr::Bin(op, a, b) => SymExpr::bin(*op, go(a, from, to), go(b, from, to)),
            }
        }
        go(self, from, to).simplify()
    }

    /// The number of nodes of the expression tree.
    pub fn nodes(&self) -> usize {
        match self {
            SymExpr::Int(_) | SymExpr::Sym(_) => 1,
            SymExpr::Neg(a) | SymExpr::Not(a) => 1 + a.nodes(),
            SymExpr::Bin(_, a, b) => 1 + a.nodes() + b.nodes(),
        }
    }

    /// The first `min` or `max` node of the expression (outermost first).
    pub fn first_min_max(&self) -> Option<&SymExpr> {
        match self {
            SymExpr::Bin(SymOp::Min | SymOp::Max, _, _) => Some(self),
            SymExpr::Int(_) | SymExpr::Sym(_) => None,
            SymExpr::Neg(a) | SymExpr::Not(a) => a.first_min_max(),
            SymExpr::Bin(_, a, b) => a.first_min_max().or_else(|| b.first_min_max()),
        }
    }

    fn simplify_children(&self) -> SymExpr {
        match self {
            SymExpr::Neg(a) => SymExpr::Neg(Arc::new(a.simplify())),
            SymExpr::Bin(op, a, b) => SymExpr::bin(*op, a.simplify(), b.simplify()),
            _ => self.clone(),
        }
    }
}

fn simplify_bin(op: SymOp, a: SymExpr, b: SymExpr) -> SymExpr {
    if let (SymExpr::Int(x), SymExpr::Int(y)) = (&a, &b)
        && let Some(v) = op.apply(*x, *y)
    {
        return SymExpr::Int(v);
    }
    match op {
        SymOp::Min | SymOp::Max => {
            if a == b {
                return a;
            }
            // Idempotent: `max(a, max(a, x)) = max(a, x)`, either side, `min` alike.
            for (x, y) in [(&a, &b), (&b, &a)] {
                if let SymExpr::Bin(o, y1, y2) = y
                    && *o == op
                    && (**y1 == *x || **y2 == *x)
                {
                    return y.clone();
                }
            }
            if let Some(d) = a.const_diff(&b) {
                let a_smaller = d <= 0;
                return if a_smaller == (op == SymOp::Min) {
                    a
                } else {
                    b
                };
            }
            // Commutative: order operands canonically.
            let (a, b) = if a <= b { (a, b) } else { (b, a) };
            SymExpr::bin(op, a, b)
        }
        _ if op.is_comparison() => {
            if let Some(d) = a.const_diff(&b) {
                return SymExpr::Int(op.apply(d, 0).unwrap_or(0));
            }
            SymExpr::bin(op, a, b)
        }
        SymOp::And => match (a.as_int(), b.as_int()) {
            (Some(0), _) | (_, Some(0)) => SymExpr::Int(0),
            (Some(_), _) => truthy(b),
            (_, Some(_)) => truthy(a),
            _ => SymExpr::bin(op, a, b),
        },
        SymOp::Or => match (a.as_int(), b.as_int()) {
            (Some(x), _) if x != 0 => SymExpr::Int(1),
            (_, Some(y)) if y != 0 => SymExpr::Int(1),
            (Some(_), _) => truthy(b),
            (_, Some(_)) => truthy(a),
            _ => SymExpr::bin(op, a, b),
        },
        SymOp::FloorDiv if b.as_int() == Some(1) => a,
        SymOp::Mod if b.as_int() == Some(1) => SymExpr::Int(0),
        _ => SymExpr::bin(op, a, b),
    }
}

/// Facts `f >= 0` about the symbols, for many comparisons: `x <= y` holds when
/// `x - y`, plus at most two facts, is a constant at most 0. `min` and `max` are opaque
/// terms here (the same term on both sides cancels); no case splits.
pub struct Facts(Vec<Linear>);

impl Facts {
    /// The facts `f >= 0` (those not linear sums within 64 bits are dropped).
    pub fn new(facts: &[SymExpr]) -> Facts {
        Facts(facts.iter().filter_map(Linear::of).collect())
    }

    /// Whether `x <= y` follows from the facts (see [`Facts`]).
    pub fn le(&self, x: &SymExpr, y: &SymExpr) -> bool {
        let Some(d) = Linear::of(x).and_then(|a| a.plus(Linear::of(y)?, -1)) else {
            return false;
        };
        let at_most_0 =
            |l: Option<Linear>| matches!(l.and_then(|l| l.as_constant()), Some(v) if v <= 0);
        if at_most_0(Some(d.clone())) {
            return true;
        }
        self.0.iter().enumerate().any(|(i, f)| {
            let Some(one) = d.clone().plus(f.clone(), 1) else {
                return false;
            };
            at_most_0(Some(one.clone()))
                || self.0[i + 1..]
                    .iter()
                    .any(|g| at_most_0(one.clone().plus(g.clone(), 1)))
        })
    }
}

/// Whether the sum is at most 0 for every value of its symbols ([`SymExpr::provably_le`]),
/// replacing at most `budget` more `min`/`max` terms.
fn nonpositive(lin: Linear, budget: u32) -> bool {
    // Where the term equals one of two operands, the cases first: each case may decide
    // which bound of a `min` or `max` elsewhere is the one that proves the claim.
    let kind = |(a, c): &(SymExpr, i64)| match a {
        SymExpr::Bin(op @ (SymOp::Min | SymOp::Max), _, _) => Some((*op == SymOp::Min) == (*c > 0)),
        _ => None,
    };
    // Then the largest bound first: one that holds another (`max(1, max(1, x))` against
    // `x`) keeps the choice of the inner one for later.
    let Some(k) = (lin.terms.iter().position(|t| kind(t) == Some(false))).or_else(|| {
        (0..lin.terms.len())
            .filter(|&i| kind(&lin.terms[i]) == Some(true))
            .max_by_key(|&i| (lin.terms[i].0.nodes(), std::cmp::Reverse(i)))
    }) else {
        return lin.terms.is_empty() && lin.constant <= 0;
    };
    if budget == 0 {
        return false;
    }
    let mut rest = lin;
    let (atom, c) = rest.terms.remove(k);
    let SymExpr::Bin(op, a, b) = &atom else {
        return false;
    };
    let holds = |x: &SymExpr| {
        Linear::of(x)
            .and_then(|l| l.scale(c))
            .and_then(|l| rest.clone().plus(l, 1))
            .is_some_and(|l| nonpositive(l, budget - 1))
    };
    // `c·min(a, b)` with `c > 0` is at most `c·a` and at most `c·b` (so is `c·max` with
    // `c < 0`): either bound suffices. Otherwise the term is one of the two: both must.
    if (*op == SymOp::Min) == (c > 0) {
        holds(a) || holds(b)
    } else {
        holds(a) && holds(b)
    }
}

/// `e` as a 0/1 value: comparisons and connectives already are; anything else is `e != 0`.
fn truthy(e: SymExpr) -> SymExpr {
    match &e {
        SymExpr::Not(_) => e,
        SymExpr::Bin(op, _, _) if op.is_comparison() || matches!(op, SymOp::And | SymOp::Or) => e,
        _ => simplify_bin(SymOp::Ne, e, SymExpr::Int(0)),
    }
}

/// `Σ coeff·atom + constant`, the normal form of sums. The terms are sorted by atom and
/// have non-zero coefficients; sums in index expressions have one to three terms, so a
/// sorted vector beats a map.
#[derive(Clone)]
struct Linear {
    terms: Vec<(SymExpr, i64)>,
    constant: i64,
}

impl Linear {
    fn constant(c: i64) -> Linear {
        Linear {
            terms: Vec::new(),
            constant: c,
        }
    }

    fn atom(e: SymExpr) -> Linear {
        Linear {
            terms: vec![(e, 1)],
            constant: 0,
        }
    }

    /// `None` on overflow (the caller then keeps the tree as it is).
    fn of(e: &SymExpr) -> Option<Linear> {
        Some(match e {
            SymExpr::Int(v) => Linear::constant(*v),
            SymExpr::Sym(_) => Linear::atom(e.clone()),
            SymExpr::Neg(a) => Linear::of(a)?.scale(-1)?,
            SymExpr::Bin(SymOp::Add, a, b) => Linear::of(a)?.plus(Linear::of(b)?, 1)?,
            SymExpr::Bin(SymOp::Sub, a, b) => Linear::of(a)?.plus(Linear::of(b)?, -1)?,
            SymExpr::Bin(SymOp::Mul, a, b) => {
                let (la, lb) = (Linear::of(a)?, Linear::of(b)?);
                if la.terms.is_empty() {
                    lb.scale(la.constant)?
                } else if lb.terms.is_empty() {
                    la.scale(lb.constant)?
                } else {
                    // A genuine product: an atom of its simplified factors in fixed order.
                    let (x, y) = (la.rebuild(), lb.rebuild());
                    let (x, y) = if x <= y { (x, y) } else { (y, x) };
                    Linear::atom(SymExpr::bin(SymOp::Mul, x, y))
                }
            }
            _ => {
                // A non-linear node may simplify into a linear one (`-max(-a, -a)`):
                // gather that into the sum too, so simplification is idempotent.
                let s = e.simplify();
                match s {
                    SymExpr::Int(v) => Linear::constant(v),
                    SymExpr::Neg(_) | SymExpr::Bin(SymOp::Add | SymOp::Sub | SymOp::Mul, _, _) => {
                        Linear::of(&s)?
                    }
                    s => Linear::atom(s),
                }
            }
        })
    }

    fn scale(mut self, k: i64) -> Option<Linear> {
        if k == 0 {
            return Some(Linear::constant(0));
        }
        self.constant = self.constant.checked_mul(k)?;
        for (_, c) in &mut self.terms {
            *c = c.checked_mul(k)?;
        }
        Some(self)
    }

    /// `self + sign·other`, merging the sorted term lists.
    fn plus(mut self, other: Linear, sign: i64) -> Option<Linear> {
        self.constant = self
            .constant
            .checked_add(other.constant.checked_mul(sign)?)?;
        if other.terms.is_empty() {
            return Some(self);
        }
        if self.terms.is_empty() {
            self.terms = other.terms;
            if sign != 1 {
                for (_, c) in &mut self.terms {
                    *c = c.checked_mul(sign)?;
                }
            }
            return Some(self);
        }
        let mut out = Vec::with_capacity(self.terms.len() + other.terms.len());
        let mut a = std::mem::take(&mut self.terms).into_iter().peekable();
        let mut b = other.terms.into_iter().peekable();
        loop {
            let ord = match (a.peek(), b.peek()) {
                (None, None) => break,
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (Some((x, _)), Some((y, _))) => x.cmp(y),
            };
            match ord {
                std::cmp::Ordering::Less => out.extend(a.next()),
                std::cmp::Ordering::Greater => {
                    let (atom, c) = b.next()?;
                    out.push((atom, c.checked_mul(sign)?));
                }
                std::cmp::Ordering::Equal => {
                    let ((atom, x), (_, y)) = (a.next()?, b.next()?);
                    let c = x.checked_add(y.checked_mul(sign)?)?;
                    if c != 0 {
                        out.push((atom, c));
                    }
                }
            }
        }
        self.terms = out;
        Some(self)
    }

    /// The constant, when no term is left.
    fn as_constant(&self) -> Option<i64> {
        self.terms.is_empty().then_some(self.constant)
    }

    fn rebuild(&self) -> SymExpr {
        let mut acc: Option<SymExpr> = None;
        for (atom, c) in &self.terms {
            let c = *c;
            let mag = c.unsigned_abs();
            let term = |a: &SymExpr| {
                if mag == 1 {
                    a.clone()
                } else {
                    SymExpr::bin(SymOp::Mul, SymExpr::Int(mag as i64), a.clone())
                }
            };
            acc = Some(match acc {
                None if c > 0 => term(atom),
                None if mag == 1 => SymExpr::Neg(Arc::new(atom.clone())),
                None => SymExpr::bin(SymOp::Mul, SymExpr::Int(c), atom.clone()),
                Some(s) if c > 0 => SymExpr::bin(SymOp::Add, s, term(atom)),
                Some(s) => SymExpr::bin(SymOp::Sub, s, term(atom)),
            });
        }
        match acc {
            None => SymExpr::Int(self.constant),
            Some(s) if self.constant > 0 => {
                SymExpr::bin(SymOp::Add, s, SymExpr::Int(self.constant))
            }
            Some(s) if self.constant < 0 && self.constant != i64::MIN => {
                SymExpr::bin(SymOp::Sub, s, SymExpr::Int(-self.constant))
            }
            Some(s) if self.constant < 0 => {
                SymExpr::bin(SymOp::Add, s, SymExpr::Int(self.constant))
            }
            Some(s) => s,
        }
    }
}

impl fmt::Display for SymExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_sym(f, self, 0, false)
    }
}

const PREC_UNARY: u8 = 6;

fn prec_of(e: &SymExpr) -> u8 {
    match e {
        SymExpr::Int(v) if *v < 0 => PREC_UNARY,
        SymExpr::Int(_) | SymExpr::Sym(_) => 7,
        SymExpr::Neg(_) | SymExpr::Not(_) => PREC_UNARY,
        SymExpr::Bin(op, _, _) => match op.precedence() {
            0 => 7,
            p => p,
        },
    }
}

/// Writes `e`; parenthesised when its precedence is below `min_prec`, or equal to it
/// and `strict` (right operands of left-associative operators, operands of comparisons).
fn write_sym(f: &mut fmt::Formatter<'_>, e: &SymExpr, min_prec: u8, strict: bool) -> fmt::Result {
    let p = prec_of(e);
    let paren = p < min_prec || (strict && p == min_prec);
    if paren {
        f.write_str("(")?;
    }
    match e {
        SymExpr::Int(v) => write!(f, "{v}")?,
        SymExpr::Sym(s) => f.write_str(s)?,
        SymExpr::Neg(a) => {
            f.write_str("-")?;
            // `-(3)` keeps Neg(Int) distinct from the literal -3.
            let force = matches!(**a, SymExpr::Int(_));
            write_sym(f, a, if force { 8 } else { PREC_UNARY }, false)?;
        }
        SymExpr::Not(a) => {
            f.write_str("!")?;
            write_sym(f, a, PREC_UNARY, false)?;
        }
        SymExpr::Bin(op @ (SymOp::Min | SymOp::Max), a, b) => {
            write!(f, "{}(", op.symbol())?;
            write_sym(f, a, 0, false)?;
            f.write_str(", ")?;
            write_sym(f, b, 0, false)?;
            f.write_str(")")?;
        }
        SymExpr::Bin(op, a, b) => {
            let q = op.precedence();
            write_sym(f, a, q, op.is_comparison())?;
            write!(f, " {} ", op.symbol())?;
            write_sym(f, b, q, true)?;
        }
    }
    if paren {
        f.write_str(")")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(t: &str) -> SymExpr {
        SymExpr::parse(t).unwrap()
    }

    #[test]
    fn provably_le_reasons_through_min_and_max() {
        let le = |a: &str, b: &str| s(a).provably_le(&s(b));
        // GT4Py's domain pieces: `[s, min(e, n))` ends where `[max(s, n), e)` starts.
        assert!(le("min(e, n)", "max(s, n)"));
        assert!(le("max(s, min(e, n))", "max(s, n)"));
        assert!(le("min(e, n) - s", "max(s, n) - s"));
        assert!(le("N - 1", "N"));
        assert!(le("max(0, N - 2)", "max(0, N)"));
        // Not proven: false for some values, or not decidable from the terms.
        assert!(!le("max(s, n)", "min(e, n)"));
        assert!(!le("N", "M"));
        assert!(!le("min(e, n)", "s"));
        assert!(!le("N", "N - 1"));
        assert!(!le("i // 2", "i"));
    }

    #[test]
    fn replace_substitutes_every_occurrence() {
        let e = s("max(a, min(b, c)) + min(b, c)");
        assert_eq!(e.first_min_max(), Some(&s("max(a, min(b, c))")));
        assert_eq!(
            e.replace(&s("min(b, c)"), &s("b")).to_string(),
            "b + max(a, b)"
        );
    }

    #[test]
    fn simplify_gathers_affine_terms() {
        assert_eq!(s("N - 1 + 1").simplify(), s("N"));
        assert_eq!(s("(i + 1) - (i - 1)").simplify(), SymExpr::Int(2));
        assert_eq!(s("2 * (N + 3) - N").simplify().to_string(), "N + 6");
        assert_eq!(s("j + i - 2").simplify().to_string(), "i + j - 2");
        assert_eq!(s("-N + 4").simplify().to_string(), "-N + 4");
        assert_eq!(s("N * M - M * N").simplify(), SymExpr::Int(0));
    }

    #[test]
    fn simplify_decides_comparisons_and_minmax() {
        assert_eq!(s("i + 1 > i").simplify(), SymExpr::Int(1));
        assert_eq!(s("min(N - 1, N)").simplify(), s("N - 1"));
        assert_eq!(s("max(N - 1, N + 2)").simplify(), s("N + 2"));
        assert_eq!(s("0 < 1 && flag").simplify().to_string(), "flag != 0");
        assert_eq!(s("7 // 2").simplify(), SymExpr::Int(3));
        assert_eq!(s("-7 // 2").simplify(), SymExpr::Int(-4));
        assert_eq!(s("-7 % 3").simplify(), SymExpr::Int(2));
    }

    #[test]
    fn simplify_is_idempotent() {
        for t in [
            "2*(N+3)-N",
            "min(i, j) + 1 - 1",
            "N*M + M*N",
            "a // 2 + 1 < b",
        ] {
            let once = s(t).simplify();
            assert_eq!(once.simplify(), once, "{t}");
        }
    }

    #[test]
    fn affine_decomposition() {
        let (c, rest) = s("2 * i - j + N - 3").affine_in(&["i", "j"]).unwrap();
        assert_eq!(c, [("i".to_string(), 2), ("j".to_string(), -1)].into());
        assert_eq!(rest, s("N - 3").simplify());
        let (c, rest) = s("i - i + 4").affine_in(&["i"]).unwrap();
        assert!(c.is_empty());
        assert_eq!(rest, SymExpr::Int(4));
        assert_eq!(s("i * j").affine_in(&["i"]), None);
        assert_eq!(s("min(i, 3)").affine_in(&["i"]), None);
        assert!(s("N * M + i").affine_in(&["i"]).is_some());
    }

    #[test]
    fn substitute_and_eval() {
        let e = s("i + 2 * N");
        let sub = e.substitute_one("N", &s("M - 1"));
        let env: BTreeMap<String, i64> = [("i".into(), 3), ("M".into(), 5)].into();
        assert_eq!(sub.eval_map(&env), Ok(11));
        assert_eq!(
            s("x // 0").eval_map(&[("x".into(), 1)].into()),
            Err(EvalError::DivByZero("x // 0".into()))
        );
        assert_eq!(
            s("q + 1").eval_map(&env),
            Err(EvalError::Unbound("q".into()))
        );
    }

    #[test]
    fn display_round_trips_structure() {
        for t in [
            "a - (b - c)",
            "(a - b) - c",
            "-(3)",
            "-3",
            "a - -3",
            "!(a < b) || c && d",
            "(a || b) && c",
            "min(a, b // 2) % 4",
            "-(a + b)",
            "(a == b) == c",
        ] {
            let e = s(t);
            assert_eq!(s(&e.to_string()), e, "{t} printed as {e}");
        }
    }
}
