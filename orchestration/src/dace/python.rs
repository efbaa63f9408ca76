//! The subset of Python (tasklet code, interstate conditions) and SymPy (shapes, ranges,
//! subsets) text that DaCe files use, parsed into sdflow's `Expr` and `SymExpr`.
//! Anything outside the subset is an error naming the text, never a guess.
//!
//! Why one file of this size: one tokenizer and parser for the Python and SymPy subsets
//! DaCe writes, with the translation of each construct beside its parse.

use sdflow_ir::{BinOp, DType, Expr, MathFn, Stmt, SymExpr, UnOp, Value};

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Num(String),
    Name(String),
    Op(String),
}

fn tokenize(text: &str) -> Result<Vec<Tok>, String> {
    let cs: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < cs.len() {
        let c = cs[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit()
            || (c == '.' && cs.get(i + 1).is_some_and(|d| d.is_ascii_digit()))
        {
            let start = i;
            while i < cs.len() && (cs[i].is_ascii_alphanumeric() || cs[i] == '.') {
                // exponent sign
                if (cs[i] == 'e' || cs[i] == 'E') && matches!(cs.get(i + 1), Some('+') | Some('-'))
                {
                    i += 2;
                    continue;
                }
                i += 1;
            }
            out.push(Tok::Num(cs[start..i].iter().collect()));
        } else if c.is_alphabetic() || c == '_' || c == '$' {
            let start = i;
            i += 1;
            while i < cs.len() && (cs[i].is_alphanumeric() || cs[i] == '_' || cs[i] == '.') {
                i += 1;
            }
            let s: String = cs[start..i].iter().collect();
            out.push(Tok::Name(s.trim_start_matches('$').to_string()));
        } else {
            let two: String = cs[i..(i + 2).min(cs.len())].iter().collect();
            if ["**", "//", "==", "!=", "<=", ">="].contains(&two.as_str()) {
                out.push(Tok::Op(two));
                i += 2;
            } else if "+-*/%<>()=,:[]".contains(c) {
                out.push(Tok::Op(c.to_string()));
                i += 1;
            } else {
                return Err(format!("unexpected character '{c}'"));
            }
        }
    }
    Ok(out)
}

struct Parser {
    toks: Vec<Tok>,
    pos: usize,
    /// Subscripts met so far; each stands in the expression as `__sub<k>`.
    subs: Vec<Subscript>,
    /// Nesting depth of the parse so far (parentheses, prefix operators, calls).
    depth: usize,
}

/// The deepest an expression may nest, as in sdflow's own syntax: deeper text is an error,
/// not a stack overflow, and every imported expression can be written back as text.
const MAX_DEPTH: usize = sdflow_ir::parse::MAX_DEPTH;

fn too_deep() -> String {
    format!("expression nests deeper than {MAX_DEPTH} levels")
}

/// A subscript in tasklet code, `name[i, j]`: the tasklet's expression holds the variable
/// `placeholder` in its place.
#[derive(Clone, Debug, PartialEq)]
pub struct Subscript {
    /// The variable that stands for the subscripted value.
    pub placeholder: String,
    /// The subscripted name (an input connector in DaCe tasklets).
    pub name: String,
    /// One index expression per dimension.
    pub index: Vec<Expr>,
}

impl Parser {
    /// Runs `f` one level deeper, refusing to go past [`MAX_DEPTH`].
    fn nested<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T, String>) -> Result<T, String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(too_deep());
        }
        let r = f(self);
        self.depth -= 1;
        r
    }

    /// One more link of a left-leaning operator chain: each deepens the tree by one.
    fn link(&self, n: &mut usize) -> Result<(), String> {
        *n += 1;
        if self.depth + *n > MAX_DEPTH {
            return Err(too_deep());
        }
        Ok(())
    }

    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos)
    }

    fn is_op(&self, s: &str) -> bool {
        matches!(self.peek(), Some(Tok::Op(o)) if o == s)
    }

    fn is_name(&self, s: &str) -> bool {
        matches!(self.peek(), Some(Tok::Name(o)) if o == s)
    }

    fn expect(&mut self, s: &str) -> Result<(), String> {
        if self.is_op(s) {
            self.pos += 1;
            Ok(())
        } else {
            Err(format!("expected '{s}'"))
        }
    }

    /// `a if c else b` (lowest), then `or`, `and`, `not`, comparisons, `+ -`, `* / // %`,
    /// unary `-`, `**`, atoms.
    fn ternary(&mut self) -> Result<Expr, String> {
        self.nested(Self::ternary_here)
    }

    fn ternary_here(&mut self) -> Result<Expr, String> {
        let a = self.or()?;
        if self.is_name("if") {
            self.pos += 1;
            let c = self.or()?;
            if !self.is_name("else") {
                return Err("expected 'else'".into());
            }
            self.pos += 1;
            let b = self.ternary()?;
            return Ok(Expr::Select(Box::new(c), Box::new(a), Box::new(b)));
        }
        Ok(a)
    }

    fn or(&mut self) -> Result<Expr, String> {
        let mut a = self.and()?;
        let mut n = 0;
        while self.is_name("or") {
            self.link(&mut n)?;
            self.pos += 1;
            a = Expr::bin(BinOp::Or, a, self.and()?);
        }
        Ok(a)
    }

    fn and(&mut self) -> Result<Expr, String> {
        let mut a = self.not()?;
        let mut n = 0;
        while self.is_name("and") {
            self.link(&mut n)?;
            self.pos += 1;
            a = Expr::bin(BinOp::And, a, self.not()?);
        }
        Ok(a)
    }

    fn not(&mut self) -> Result<Expr, String> {
        if self.is_name("not") {
            self.pos += 1;
            return Ok(Expr::Unary(UnOp::Not, Box::new(self.nested(Self::not)?)));
        }
        self.comparison()
    }

    fn comparison(&mut self) -> Result<Expr, String> {
        let a = self.sum()?;
        let op = match self.peek() {
            Some(Tok::Op(o)) => match o.as_str() {
                "==" => BinOp::Eq,
                "!=" => BinOp::Ne,
                "<" => BinOp::Lt,
                "<=" => BinOp::Le,
                ">" => BinOp::Gt,
                ">=" => BinOp::Ge,
                _ => return Ok(a),
            },
            _ => return Ok(a),
        };
        self.pos += 1;
        let b = self.sum()?;
        if matches!(self.peek(), Some(Tok::Op(o)) if ["==", "!=", "<", "<=", ">", ">="].contains(&o.as_str()))
        {
            return Err("chained comparisons are not supported".into());
        }
        Ok(Expr::bin(op, a, b))
    }

    fn sum(&mut self) -> Result<Expr, String> {
        let mut a = self.product()?;
        let mut n = 0;
        loop {
            let op = if self.is_op("+") {
                BinOp::Add
            } else if self.is_op("-") {
                BinOp::Sub
            } else {
                return Ok(a);
            };
            self.link(&mut n)?;
            self.pos += 1;
            a = Expr::bin(op, a, self.product()?);
        }
    }

    fn product(&mut self) -> Result<Expr, String> {
        let mut a = self.unary()?;
        let mut n = 0;
        loop {
            let op = if self.is_op("*") {
                BinOp::Mul
            } else if self.is_op("/") {
                BinOp::Div
            } else if self.is_op("//") {
                BinOp::FloorDiv
            } else if self.is_op("%") {
                BinOp::Mod
            } else {
                return Ok(a);
            };
            self.link(&mut n)?;
            self.pos += 1;
            a = Expr::bin(op, a, self.unary()?);
        }
    }

    fn unary(&mut self) -> Result<Expr, String> {
        if self.is_op("-") {
            self.pos += 1;
            let x = self.nested(Self::unary)?;
            // A negative literal stays a literal (as Python's constant folding does).
            return Ok(match x {
                Expr::Const(Value::F64(v)) => Expr::Const(Value::F64(-v)),
                Expr::Const(Value::I64(v)) => Expr::Const(Value::I64(v.wrapping_neg())),
                other => Expr::Unary(UnOp::Neg, Box::new(other)),
            });
        }
        if self.is_op("+") {
            self.pos += 1;
            return self.nested(Self::unary);
        }
        self.power()
    }

    fn power(&mut self) -> Result<Expr, String> {
        let a = self.atom()?;
        if self.is_op("**") {
            self.pos += 1;
            let b = self.nested(Self::unary)?;
            return Ok(Expr::Call(MathFn::Pow, vec![a, b]));
        }
        Ok(a)
    }

    fn args(&mut self) -> Result<Vec<Expr>, String> {
        self.expect("(")?;
        let mut v = Vec::new();
        if !self.is_op(")") {
            loop {
                v.push(self.ternary()?);
                if self.is_op(",") {
                    self.pos += 1;
                } else {
                    break;
                }
            }
        }
        self.expect(")")?;
        Ok(v)
    }

    fn atom(&mut self) -> Result<Expr, String> {
        match self.peek().cloned() {
            Some(Tok::Num(n)) => {
                self.pos += 1;
                if let Some(e) = typed_literal(&n)? {
                    return Ok(e);
                }
                if n.contains(['.', 'e', 'E']) {
                    n.parse::<f64>()
                        .map(|v| Expr::Const(Value::F64(v)))
                        .map_err(|_| format!("bad number '{n}'"))
                } else {
                    n.parse::<i64>()
                        .map(|v| Expr::Const(Value::I64(v)))
                        .map_err(|_| format!("bad number '{n}'"))
                }
            }
            Some(Tok::Op(o)) if o == "(" => {
                self.pos += 1;
                let e = self.ternary()?;
                self.expect(")")?;
                Ok(e)
            }
            Some(Tok::Name(n)) => {
                self.pos += 1;
                match n.as_str() {
                    "True" | "true" => return Ok(Expr::Const(Value::Bool(true))),
                    "False" | "false" => return Ok(Expr::Const(Value::Bool(false))),
                    _ => {}
                }
                if self.is_op("[") {
                    self.pos += 1;
                    let mut index = vec![self.ternary()?];
                    while self.is_op(",") {
                        self.pos += 1;
                        index.push(self.ternary()?);
                    }
                    self.expect("]")?;
                    let placeholder = format!("__sub{}", self.subs.len());
                    self.subs.push(Subscript {
                        placeholder: placeholder.clone(),
                        name: n,
                        index,
                    });
                    return Ok(Expr::Var(placeholder));
                }
                if !self.is_op("(") {
                    return Ok(Expr::Var(n));
                }
                if n == "symbol" {
                    return self.serialized_symbol();
                }
                let args = self.args()?;
                call(&n, args)
            }
            other => Err(format!("unexpected {}", describe(other.as_ref()))),
        }
    }
}

impl Parser {
    /// DaCe 2's serialized symbol with a type or assumptions, as `DaceSympySerializer`
    /// prints it: `symbol($NAME, dtype=dace.<type>, <assumption>=True, …)` (the `dtype`
    /// when it is not DaCe's default symbol type, then every SymPy assumption that holds
    /// and does not hold by default for that type, sorted). It is the symbol `NAME`:
    /// sdflow takes a symbol's type from its declaration, and SymPy's assumptions
    /// (`integer`, `real`, `positive`, …) only describe values the symbol has anyway.
    fn serialized_symbol(&mut self) -> Result<Expr, String> {
        self.expect("(")?;
        let Some(Tok::Name(name)) = self.peek().cloned() else {
            return Err(format!(
                "'symbol(…)' takes a symbol name first, found {}",
                describe(self.peek())
            ));
        };
        self.pos += 1;
        while self.is_op(",") {
            self.pos += 1;
            let Some(Tok::Name(key)) = self.peek().cloned() else {
                return Err(format!(
                    "in 'symbol({name}, …)': expected 'key=value', found {}",
                    describe(self.peek())
                ));
            };
            self.pos += 1;
            self.expect("=")?;
            let value = match self.peek().cloned() {
                Some(Tok::Name(v)) => v,
                other => {
                    return Err(format!(
                        "in 'symbol({name}, …)': '{key}' has the value {}, expected a name",
                        describe(other.as_ref())
                    ));
                }
            };
            self.pos += 1;
            let ok = if key == "dtype" {
                value
                    .strip_prefix("dace.")
                    .is_some_and(|t| DACE_TYPES.contains(&t))
            } else {
                SYMPY_ASSUMPTIONS.contains(&key.as_str()) && (value == "True" || value == "False")
            };
            if !ok {
                return Err(format!(
                    "in 'symbol({name}, …)': unknown property '{key}={value}'"
                ));
            }
        }
        self.expect(")")?;
        Ok(Expr::Var(name))
    }
}

/// DaCe's type names (`dace.dtypes`' typeclasses, as `typeclass.to_string()` prints them).
const DACE_TYPES: &[&str] = &[
    "bool",
    "bool_",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
];

/// SymPy's assumption names (`sympy.core.assumptions._assume_defined`); DaCe prints those
/// that hold, except `commutative` and the `extended_` ones, but reads any of them back.
const SYMPY_ASSUMPTIONS: &[&str] = &[
    "algebraic",
    "antihermitian",
    "commutative",
    "complex",
    "composite",
    "even",
    "extended_negative",
    "extended_nonnegative",
    "extended_nonpositive",
    "extended_nonzero",
    "extended_positive",
    "extended_real",
    "finite",
    "hermitian",
    "imaginary",
    "infinite",
    "integer",
    "irrational",
    "negative",
    "noninteger",
    "nonnegative",
    "nonpositive",
    "nonzero",
    "odd",
    "positive",
    "prime",
    "rational",
    "real",
    "transcendental",
    "zero",
];

/// DaCe 2's typed literals (`dace.dtypes.TYPECLASS_TO_LITERAL_SUFFIX`): `2i64`, `7u8`,
/// `0.5f32`, `1e3f64`. `None` when `n` has no such suffix.
fn typed_literal(n: &str) -> Result<Option<Expr>, String> {
    const SUFFIXES: &[(&str, Option<DType>)] = &[
        ("i8", None),
        ("i16", None),
        ("i32", Some(DType::I32)),
        ("i64", Some(DType::I64)),
        ("u8", None),
        ("u16", None),
        ("u32", None),
        ("u64", None),
        ("f16", None),
        ("bf16", None),
        ("e4m3fn", None),
        ("e5m2", None),
        ("f32", Some(DType::F32)),
        ("f64", Some(DType::F64)),
    ];
    // Longest suffix first (`bf16` before `f16`).
    let mut sorted: Vec<_> = SUFFIXES.to_vec();
    sorted.sort_by_key(|(s, _)| std::cmp::Reverse(s.len()));
    for (suffix, t) in sorted {
        let Some(digits) = n.strip_suffix(suffix) else {
            continue;
        };
        if digits.is_empty() || !digits.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
            continue;
        }
        let Some(t) = t else {
            return Err(format!(
                "typed literal '{n}': type '{suffix}' is not supported"
            ));
        };
        let v = if t.is_int() {
            digits
                .parse::<i64>()
                .map(|v| Expr::Const(Value::I64(v)))
                .map_err(|_| format!("bad number '{n}'"))?
        } else {
            digits
                .parse::<f64>()
                .map(|v| Expr::Const(Value::F64(v)))
                .map_err(|_| format!("bad number '{n}'"))?
        };
        return Ok(Some(match t {
            DType::I64 | DType::F64 => v,
            t => Expr::Cast(t, Box::new(v)),
        }));
    }
    Ok(None)
}

fn describe(t: Option<&Tok>) -> String {
    match t {
        None => "end of text".into(),
        Some(Tok::Num(n)) | Some(Tok::Name(n)) | Some(Tok::Op(n)) => format!("'{n}'"),
    }
}

/// A function call of the supported subset.
fn call(name: &str, mut args: Vec<Expr>) -> Result<Expr, String> {
    let base = name
        .trim_start_matches("math.")
        .trim_start_matches("numpy.")
        .trim_start_matches("np.")
        .trim_start_matches("dace.");
    let cast = match base {
        "float64" | "float" => Some(DType::F64),
        "float32" => Some(DType::F32),
        "int64" | "int" => Some(DType::I64),
        "int32" => Some(DType::I32),
        "bool" | "bool_" => Some(DType::Bool),
        _ => None,
    };
    if let Some(t) = cast {
        if args.len() != 1 {
            return Err(format!("'{name}' takes one argument"));
        }
        return Ok(Expr::Cast(t, Box::new(args.remove(0))));
    }
    let f = match base {
        "abs" | "Abs" | "fabs" => MathFn::Abs,
        "sqrt" => MathFn::Sqrt,
        "cbrt" => MathFn::Cbrt,
        "exp" => MathFn::Exp,
        "log" => MathFn::Log,
        "log10" => MathFn::Log10,
        "sin" => MathFn::Sin,
        "cos" => MathFn::Cos,
        "tan" => MathFn::Tan,
        "asin" | "arcsin" => MathFn::Asin,
        "acos" | "arccos" => MathFn::Acos,
        "atan" | "arctan" => MathFn::Atan,
        "sinh" => MathFn::Sinh,
        "cosh" => MathFn::Cosh,
        "tanh" => MathFn::Tanh,
        "floor" => MathFn::Floor,
        "ceil" | "ceiling" => MathFn::Ceil,
        "trunc" => MathFn::Trunc,
        "round" => MathFn::Round,
        "pow" | "power" | "Pow" => MathFn::Pow,
        "atan2" | "arctan2" => MathFn::Atan2,
        "min" | "Min" | "fmin" | "minimum" => MathFn::Min,
        "max" | "Max" | "fmax" | "maximum" => MathFn::Max,
        "int_floor" | "floordiv" if args.len() == 2 => {
            let b = args.pop().unwrap_or(Expr::Const(Value::I64(1)));
            let a = args.pop().unwrap_or(Expr::Const(Value::I64(0)));
            return Ok(Expr::bin(BinOp::FloorDiv, a, b));
        }
        "Mod" if args.len() == 2 => {
            let b = args.pop().unwrap_or(Expr::Const(Value::I64(1)));
            let a = args.pop().unwrap_or(Expr::Const(Value::I64(0)));
            return Ok(Expr::bin(BinOp::Mod, a, b));
        }
        _ => return Err(format!("unsupported function '{name}'")),
    };
    // min/max with more than two arguments fold left.
    if matches!(f, MathFn::Min | MathFn::Max) && args.len() > 2 {
        let mut it = args.into_iter();
        let first = it.next().unwrap_or(Expr::Const(Value::I64(0)));
        return Ok(it.fold(first, |acc, x| Expr::Call(f, vec![acc, x])));
    }
    if args.len() != f.arity() {
        return Err(format!("'{name}' takes {} argument(s)", f.arity()));
    }
    Ok(Expr::Call(f, args))
}

/// A Python expression, with its subscripts (numbered from `first`).
fn expr_with_subscripts(text: &str, first: usize) -> Result<(Expr, Vec<Subscript>), String> {
    let toks = tokenize(text)?;
    let mut p = Parser {
        toks,
        pos: 0,
        subs: Vec::new(),
        depth: 0,
    };
    // Placeholders continue the numbering of earlier statements.
    for k in 0..first {
        p.subs.push(Subscript {
            placeholder: format!("__sub{k}"),
            name: String::new(),
            index: Vec::new(),
        });
    }
    let e = p.ternary()?;
    if e.depth() > MAX_DEPTH {
        return Err(too_deep());
    }
    if p.pos != p.toks.len() {
        return Err(format!(
            "unexpected {} after the expression",
            describe(p.peek())
        ));
    }
    Ok((e, p.subs.split_off(first)))
}

/// A Python expression (no subscripts).
pub fn expr(text: &str) -> Result<Expr, String> {
    let (e, subs) = expr_with_subscripts(text, 0)?;
    match subs.first() {
        Some(s) => Err(format!("subscript '{}[…]' outside tasklet code", s.name)),
        None => Ok(e),
    }
}

/// Python tasklet code: assignments `name = expr`, one per line (or `;`-separated).
pub fn statements(code: &str) -> Result<Vec<Stmt>, String> {
    let (stmts, subs) = statements_with_subscripts(code)?;
    match subs.first() {
        Some(s) => Err(format!("unsupported subscript '{}[…]'", s.name)),
        None => Ok(stmts),
    }
}

/// Python tasklet code whose expressions may subscript names (`f[i - r]`): the statements,
/// with a placeholder variable for each subscript, and the subscripts.
pub fn statements_with_subscripts(code: &str) -> Result<(Vec<Stmt>, Vec<Subscript>), String> {
    let mut subs = Vec::new();
    let mut out = Vec::new();
    for line in code.split(['\n', ';']) {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((target, value)) = split_assignment(line) else {
            return Err(format!("'{line}' is not an assignment 'name = expression'"));
        };
        let target = target.trim();
        if !target.chars().all(|c| c.is_alphanumeric() || c == '_') || target.is_empty() {
            return Err(format!("assignment target '{target}' is not a plain name"));
        }
        let (value, more) =
            expr_with_subscripts(value, subs.len()).map_err(|e| format!("in '{line}': {e}"))?;
        subs.extend(more);
        out.push(Stmt {
            target: target.to_string(),
            value,
        });
    }
    Ok((out, subs))
}

/// Splits at the first `=` that is not part of `==`, `!=`, `<=`, `>=`.
fn split_assignment(line: &str) -> Option<(&str, &str)> {
    let b = line.as_bytes();
    for i in 0..b.len() {
        if b[i] == b'='
            && b.get(i + 1) != Some(&b'=')
            && (i == 0 || !matches!(b[i - 1], b'=' | b'!' | b'<' | b'>'))
        {
            return Some((&line[..i], &line[i + 1..]));
        }
    }
    None
}

/// A symbolic integer expression (shapes, ranges, subsets, conditions).
pub fn sym(text: &str) -> Result<SymExpr, String> {
    to_sym(&expr(text)?)
}

pub(crate) fn to_sym(e: &Expr) -> Result<SymExpr, String> {
    // SymPy writes integral floats (`2.0`) and integer casts where sdflow's integer
    // expressions need neither.
    fn normalize(e: &Expr) -> Expr {
        match e {
            Expr::Const(Value::F64(v)) if v.fract() == 0.0 && v.abs() < 9.0e15 => {
                Expr::Const(Value::I64(*v as i64))
            }
            Expr::Cast(t, a) if t.is_int() => normalize(a),
            Expr::Unary(op, a) => Expr::Unary(*op, Box::new(normalize(a))),
            Expr::Binary(op, a, b) => Expr::bin(*op, normalize(a), normalize(b)),
            Expr::Call(f, args) => Expr::Call(*f, args.iter().map(normalize).collect()),
            other => other.clone(),
        }
    }
    sdflow_ir::parse::symexpr_of(&normalize(e)).map(|x| x.simplify())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasklets_and_symbols() {
        let s = statements("__out = (__in1 + 0.25)").unwrap();
        assert_eq!(s[0].to_string(), "__out = __in1 + 0.25");
        let s = statements("a = x if c > 0 else -y\nb = math.sqrt(abs(a)) ** 2").unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].value.to_string(), "select(c > 0, x, -y)");
        assert_eq!(sym("N - 1").unwrap().to_string(), "N - 1");
        assert_eq!(
            sym("Max(0, $horizontal_end - $horizontal_start)")
                .unwrap()
                .to_string(),
            "max(0, horizontal_end - horizontal_start)"
        );
        assert_eq!(sym("(not (k > (- 1)))").unwrap().to_string(), "!(k > -1)");
        assert!(
            statements("x[i] = 1")
                .unwrap_err()
                .contains("not a plain name")
        );
        let (s, subs) =
            statements_with_subscripts("v = f[(i - __r)] * 2.0\nw = g[i, 0] + f[j]").unwrap();
        assert_eq!(s[0].to_string(), "v = __sub0 * 2.0");
        assert_eq!(s[1].to_string(), "w = __sub1 + __sub2");
        assert_eq!(subs.len(), 3);
        assert_eq!(
            (subs[0].name.as_str(), subs[0].index[0].to_string().as_str()),
            ("f", "i - __r")
        );
        assert_eq!((subs[1].name.as_str(), subs[1].index.len()), ("g", 2));
        assert_eq!(subs[2].placeholder, "__sub2");
        assert!(
            statements("v = f[i]")
                .unwrap_err()
                .contains("subscript 'f[…]'")
        );
        assert!(expr("f[i]").unwrap_err().contains("outside tasklet code"));
        assert!(
            expr("foo(1)")
                .unwrap_err()
                .contains("unsupported function 'foo'")
        );
        // DaCe 2's serialized symbols with a type and SymPy assumptions, as DaCe 2.0.0a10
        // writes GT4Py's nested-SDFG symbol mappings and subsets.
        assert_eq!(
            sym(
                "symbol($rd_o_cvd, dtype=dace.float64, algebraic=True, complex=True, \
                 finite=True, hermitian=True, integer=True, rational=True, real=True)"
            )
            .unwrap()
            .to_string(),
            "rd_o_cvd"
        );
        assert_eq!(
            sym("-$__z_Cell_range_0 + symbol($i_Cell_gtx_horizontal, dtype=dace.int64)")
                .unwrap()
                .to_string(),
            "-__z_Cell_range_0 + i_Cell_gtx_horizontal"
        );
        assert_eq!(
            sym("symbol($n, nonnegative=True) + 1").unwrap().to_string(),
            "n + 1"
        );
        assert!(
            sym("symbol($n, dtype=dace.float99)")
                .unwrap_err()
                .contains("unknown property 'dtype=dace.float99'")
        );
        assert!(
            sym("symbol($n, shiny=True)")
                .unwrap_err()
                .contains("unknown property 'shiny=True'")
        );
        assert!(
            sym("symbol(2, integer=True)")
                .unwrap_err()
                .contains("takes a symbol name first")
        );
        // Typed literals.
        assert_eq!(sym("$N - 2i64").unwrap().to_string(), "N - 2");
        assert_eq!(expr("x * 0.5f64").unwrap().to_string(), "x * 0.5");
        assert_eq!(expr("x * 2.0f32").unwrap().to_string(), "x * f32(2.0)");
        assert!(expr("3i8").unwrap_err().contains("'i8' is not supported"));
        assert!(
            sym("a / 2")
                .unwrap_err()
                .contains("'/' in an integer expression")
        );
    }
}
