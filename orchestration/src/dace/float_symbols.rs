//! Floating-point symbols of nested SDFGs mapped to expressions.
//!
//! DaCe maps a nested SDFG's symbols to any expression of the caller's: GT4Py's lowering
//! maps floating-point symbols to arithmetic over the caller's float symbols
//! (`1/a*1/b*(c - a)`, the product of its scalar lambdas) and to literals (`0` for the
//! scalar branch of a `concat_where`). sdflow's symbolic expressions are integer ones, and
//! a float symbol passes into a nested SDFG only from a caller symbol of its type (see
//! `docs/ir.md`). The importer removes such a mapping: the expression, typed as the
//! symbol is, replaces the symbol in the nested SDFG's tasklet code (and, through the
//! mappings that pass it on, in the nested SDFGs below), and the caller symbols the
//! expression reads are passed in instead. What the nested SDFG computes is unchanged:
//! DaCe evaluates the mapping once per call of the nested SDFG, from values that do not
//! change during it.

use std::collections::{BTreeMap, BTreeSet};

use sdflow_ir::{BinOp, DType, Dataflow, Expr, Node, Sdfg, SymExpr, Symbol, Value};

/// Substitutes `value` (an expression over the caller's symbols `caller`) for the
/// non-integer symbol `name` of `inner`, the nested SDFG whose caller-side mapping is
/// `mapping` (which must no longer hold `name`). The symbols `value` reads are added to
/// `inner` and to `mapping` (under a fresh name where `inner` already uses theirs for
/// something else).
pub(super) fn inline_mapping(
    inner: &mut Sdfg,
    mapping: &mut BTreeMap<String, SymExpr>,
    name: &str,
    value: &Expr,
    caller: &BTreeMap<String, Symbol>,
) -> Result<(), String> {
    let dtype = inner
        .symbols
        .get(name)
        .map(|s| s.dtype)
        .ok_or_else(|| format!("'{name}' is not a symbol of nested SDFG '{}'", inner.name))?;
    let mut value = real(value, dtype);
    // The caller's symbols the value reads, by the name they get inside.
    let mut renames = BTreeMap::new();
    let mut taken: Option<BTreeSet<String>> = None;
    for v in value.vars() {
        let Some(sym) = caller.get(&v) else {
            return Err(format!(
                "the value '{value}' of float symbol '{name}' reads '{v}', which is not a symbol of the caller"
            ));
        };
        if mapping.get(&v) == Some(&SymExpr::sym(&v)) {
            continue;
        }
        let taken = taken.get_or_insert_with(|| {
            let mut t = super::used_names(inner);
            t.extend(inner.symbols.keys().cloned());
            t.extend(mapping.keys().cloned());
            t
        });
        let mut inside = v.clone();
        let mut n = 0;
        while taken.contains(&inside) {
            n += 1;
            inside = format!("{v}_outer{n}");
        }
        taken.insert(inside.clone());
        inner.symbols.insert(
            inside.clone(),
            Symbol {
                value: None,
                default: None,
                ..sym.clone()
            },
        );
        mapping.insert(inside.clone(), SymExpr::sym(&v));
        if inside != v {
            renames.insert(v, inside);
        }
    }
    if !renames.is_empty() {
        value = value.rename(&renames);
    }
    substitute(inner, name, &value)
}

/// `value` as a value of type `dtype`: SymPy's arithmetic is real, so its integer
/// literals are floats where the symbol is one, and the result is converted to the
/// symbol's type.
fn real(value: &Expr, dtype: DType) -> Expr {
    fn floats(e: &Expr) -> Expr {
        match e {
            Expr::Const(Value::I64(i)) => Expr::Const(Value::F64(*i as f64)),
            Expr::Const(_) | Expr::Var(_) => e.clone(),
            Expr::Unary(op, a) => Expr::Unary(*op, Box::new(floats(a))),
            Expr::Cast(t, a) => Expr::Cast(*t, Box::new(floats(a))),
            Expr::Binary(op, a, b) => Expr::bin(*op, floats(a), floats(b)),
            Expr::Select(c, a, b) => {
                Expr::Select(c.clone(), Box::new(floats(a)), Box::new(floats(b)))
            }
            Expr::Call(f, args) => Expr::Call(*f, args.iter().map(floats).collect()),
        }
    }
    match value {
        Expr::Cast(t, _) if *t == dtype => value.clone(),
        _ if dtype.is_float() => Expr::Cast(dtype, Box::new(floats(&as_printed(value)))),
        _ => Expr::Cast(dtype, Box::new(value.clone())),
    }
}

/// A product in the order of operations DaCe's generated code gives it. DaCe stores a
/// SymPy product with one factor per inverse (`1/s*1/t*(t - s)`) but generates code from
/// SymPy's printed form, which gathers the inverses into one denominator
/// (`(t - s)/(s*t)`); the value is computed in that order here too, so that it rounds as
/// DaCe's does.
fn as_printed(e: &Expr) -> Expr {
    fn factors(e: &Expr, inverse: bool, num: &mut Vec<Expr>, den: &mut Vec<Expr>) {
        match e {
            Expr::Binary(BinOp::Mul, a, b) => {
                factors(a, inverse, num, den);
                factors(b, inverse, num, den);
            }
            Expr::Binary(BinOp::Div, a, b) => {
                factors(a, inverse, num, den);
                factors(b, !inverse, num, den);
            }
            Expr::Const(Value::I64(1)) => {}
            other => {
                let f = as_printed(other);
                if inverse { den.push(f) } else { num.push(f) }
            }
        }
    }
    let product = |fs: Vec<Expr>| {
        fs.into_iter()
            .reduce(|a, b| Expr::bin(BinOp::Mul, a, b))
            .unwrap_or(Expr::Const(Value::I64(1)))
    };
    match e {
        Expr::Binary(BinOp::Mul | BinOp::Div, ..) => {
            let (mut num, mut den) = (Vec::new(), Vec::new());
            factors(e, false, &mut num, &mut den);
            if den.is_empty() {
                product(num)
            } else {
                Expr::bin(BinOp::Div, product(num), product(den))
            }
        }
        Expr::Const(_) | Expr::Var(_) => e.clone(),
        Expr::Unary(op, a) => Expr::Unary(*op, Box::new(as_printed(a))),
        Expr::Cast(t, a) => Expr::Cast(*t, Box::new(as_printed(a))),
        Expr::Binary(op, a, b) => Expr::bin(*op, as_printed(a), as_printed(b)),
        Expr::Select(c, a, b) => Expr::Select(
            Box::new(as_printed(c)),
            Box::new(as_printed(a)),
            Box::new(as_printed(b)),
        ),
        Expr::Call(f, args) => Expr::Call(*f, args.iter().map(as_printed).collect()),
    }
}

/// Replaces symbol `name` of `sdfg` by `value` (an expression over `sdfg`'s symbols) and
/// drops the symbol.
fn substitute(sdfg: &mut Sdfg, name: &str, value: &Expr) -> Result<(), String> {
    let symbols = sdfg.symbols.clone();
    for st in &mut sdfg.states {
        in_dataflow(&mut st.graph, name, value, &symbols)?;
    }
    sdfg.symbols.remove(name);
    if super::used_names(sdfg).contains(name) {
        return Err(format!(
            "float symbol '{name}' of nested SDFG '{}' is mapped to '{value}' and used outside tasklet code",
            sdfg.name
        ));
    }
    Ok(())
}

fn in_dataflow(
    g: &mut Dataflow,
    name: &str,
    value: &Expr,
    symbols: &BTreeMap<String, Symbol>,
) -> Result<(), String> {
    for node in g.graph.node_weights_mut() {
        match node {
            Node::Map(m) => in_dataflow(&mut m.body, name, value, symbols)?,
            Node::Tasklet(t) => {
                // An input connector or local of that name hides the symbol.
                if t.inputs.contains_key(name) {
                    continue;
                }
                for stmt in &mut t.code {
                    stmt.value = stmt
                        .value
                        .replace_vars(&|v| (v == name).then(|| value.clone()));
                    if stmt.target == name {
                        break;
                    }
                }
            }
            Node::Nested(n) => {
                let passed: Vec<String> = n
                    .symbol_mapping
                    .iter()
                    .filter(|(_, e)| **e == SymExpr::sym(name))
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in passed {
                    n.symbol_mapping.remove(&k);
                    inline_mapping(&mut n.sdfg, &mut n.symbol_mapping, &k, value, symbols)?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sdflow_ir::builder::SdfgBuilder;
    use sdflow_ir::interp::{self, Bindings, HostArray};

    /// `inner(b[0] = (x + s) * u)` with its own float symbol `s`, called with s = `q` and
    /// u = `s * 2` over the caller's `s`: the caller's `s` enters under a fresh name.
    fn program() -> (Sdfg, Sdfg) {
        let mut ib = SdfgBuilder::new("inner");
        ib.symbol("s", DType::F64)
            .symbol("u", DType::F64)
            .array("a", DType::F64, [1])
            .array("b", DType::F64, [1]);
        ib.state("body", |st| {
            st.tasklet("t", &[("x", "a[0]")], &[("y", "b[0]")], "y = (x + s) * u");
        });
        let inner = ib.build();
        let mut ob = SdfgBuilder::new("outer");
        ob.symbol("s", DType::F64)
            .symbol("q", DType::F64)
            .array("A", DType::F64, [1])
            .array("B", DType::F64, [1]);
        (inner, ob.build())
    }

    #[test]
    fn a_caller_symbol_whose_name_the_callee_uses_enters_renamed() {
        let (mut inner, outer) = program();
        let mut mapping = BTreeMap::from([("s".to_string(), SymExpr::sym("q"))]);
        let value = super::super::python::expr("symbol($s, dtype=dace.float64)*2").unwrap();
        inline_mapping(&mut inner, &mut mapping, "u", &value, &outer.symbols).unwrap();
        assert!(!inner.symbols.contains_key("u"));
        assert_eq!(inner.symbols["s_outer1"].dtype, DType::F64);
        assert_eq!(mapping["s_outer1"], SymExpr::sym("s"));
        assert_eq!(mapping["s"], SymExpr::sym("q"));
        // (1 + q) * (2 s) with s = 3, q = 0.5.
        let mut b = Bindings::default();
        b.arrays
            .insert("a".into(), HostArray::F64(ndarray::arr1(&[1.0]).into_dyn()));
        b.arrays
            .insert("b".into(), HostArray::F64(ndarray::arr1(&[0.0]).into_dyn()));
        b.symbols.insert("q".into(), Value::F64(0.5));
        b.symbols.insert("s".into(), Value::F64(0.5));
        b.symbols.insert("s_outer1".into(), Value::F64(3.0));
        interp::run(&inner, &mut b).unwrap();
        assert_eq!(b.arrays["b"].to_f64_vec(), vec![9.0]);
    }

    #[test]
    fn a_value_reading_what_the_caller_does_not_have_is_refused() {
        let (mut inner, outer) = program();
        let mut mapping = BTreeMap::new();
        let value = super::super::python::expr("r * 2").unwrap();
        let e = inline_mapping(&mut inner, &mut mapping, "u", &value, &outer.symbols).unwrap_err();
        assert_eq!(
            e,
            "the value 'f64(r * 2.0)' of float symbol 'u' reads 'r', which is not a symbol of the caller"
        );
    }
}
