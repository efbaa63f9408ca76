//! Text syntax of expressions, statements, subsets and memlets, used by the JSON format,
//! the builder and error messages. One lexer and one precedence-climbing parser read both
//! tasklet [`Expr`]s and symbolic [`SymExpr`]s (the latter is the integer subset).
//!
//! Precedence, loosest first: `||`/`or`, `&&`/`and`, `not`, comparisons (not chained),
//! `+ -`, `* / // %`, prefix `- !`. A `-` directly before a number is part of the literal.
//!
//! Why one file of this size: one lexer and one precedence-climbing parser serve every
//! text form, and the types' parsing constructors live here so that no type depends on
//! its parser.

use std::fmt;
use std::sync::Arc;

use crate::dataflow::Range;
use crate::dtype::{DType, Value};
use crate::expr::{BinOp, Expr, MathFn, Stmt, UnOp};
use crate::memlet::{Dim, Memlet, Subset};
use crate::symexpr::{SymExpr, SymOp};

/// A syntax error in expression, subset or memlet text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message} at column {column} of '{text}'")]
pub struct ParseError {
    /// What is wrong.
    pub message: String,
    /// 1-based column of the offending character.
    pub column: usize,
    /// The whole text.
    pub text: String,
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Int(u64, Option<DType>),
    Float(f64, Option<DType>),
    Ident(String),
    Punct(&'static str),
    End,
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Int(v, _) => write!(f, "number {v}"),
            Tok::Float(v, _) => write!(f, "number {v}"),
            Tok::Ident(s) => write!(f, "'{s}'"),
            Tok::Punct(p) => write!(f, "'{p}'"),
            Tok::End => f.write_str("end of text"),
        }
    }
}

const PUNCTS: [&str; 22] = [
    "//", "==", "!=", "<=", ">=", "&&", "||", "+", "-", "*", "/", "%", "<", ">", "!", "(", ")",
    "[", "]", ",", ":", "=",
];

fn lex(text: &str) -> Result<Vec<(Tok, usize)>, ParseError> {
    let err = |message: String, pos: usize| ParseError {
        message,
        column: pos + 1,
        text: text.to_string(),
    };
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(|d| d.is_ascii_digit())) {
            let mut is_float = false;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            if i < b.len() && b[i] == b'.' {
                is_float = true;
                i += 1;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
            }
            if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
                let mut j = i + 1;
                if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
                    j += 1;
                }
                if j < b.len() && b[j].is_ascii_digit() {
                    is_float = true;
                    i = j;
                    while i < b.len() && b[i].is_ascii_digit() {
                        i += 1;
                    }
                }
            }
            let num = &text[start..i];
            let sfx_start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            let suffix = match &text[sfx_start..i] {
                "" => None,
                s => Some(
                    DType::from_name(s)
                        .filter(|d| d.is_numeric())
                        .ok_or_else(|| {
                            err(
                                format!(
                                    "unknown number suffix '{s}' (expected f32, f64, i32 or i64)"
                                ),
                                sfx_start,
                            )
                        })?,
                ),
            };
            let tok = if is_float || suffix.is_some_and(DType::is_float) {
                if suffix.is_some_and(DType::is_int) {
                    return Err(err(format!("'{num}' is not an integer"), start));
                }
                Tok::Float(
                    num.parse()
                        .map_err(|_| err(format!("bad number '{num}'"), start))?,
                    suffix,
                )
            } else {
                Tok::Int(
                    num.parse()
                        .map_err(|_| err(format!("integer '{num}' is too large"), start))?,
                    suffix,
                )
            };
            out.push((tok, start));
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            let word = &text[start..i];
            let tok = match word {
                "inf" => Tok::Float(f64::INFINITY, None),
                "inff32" => Tok::Float(f64::INFINITY, Some(DType::F32)),
                "nan" => Tok::Float(f64::NAN, None),
                "nanf32" => Tok::Float(f64::NAN, Some(DType::F32)),
                _ => Tok::Ident(word.to_string()),
            };
            out.push((tok, start));
            continue;
        }
        match PUNCTS.iter().find(|p| text[i..].starts_with(**p)) {
            Some(p) => {
                out.push((Tok::Punct(p), start));
                i += p.len();
            }
            None => {
                let ch = text[i..].chars().next().unwrap_or('?');
                return Err(err(format!("unexpected character '{ch}'"), start));
            }
        }
    }
    out.push((Tok::End, text.len()));
    Ok(out)
}

struct Parser<'t> {
    text: &'t str,
    toks: Vec<(Tok, usize)>,
    pos: usize,
    depth: usize,
}

/// The deepest tree an expression may build (each operator, call, cast and prefix
/// operator is a level; operator chains count): deeper input is an error rather than a
/// risk to the stack of every pass that walks the tree.
pub const MAX_DEPTH: usize = 256;

/// The deepest the text may nest while it is read (parentheses and prefix operators each
/// count): twice [`MAX_DEPTH`], so the printed form of every tree the parser accepts,
/// which may spend a parenthesis and an operator on each level, reads back.
const MAX_NESTING: usize = 2 * MAX_DEPTH + 2;

fn too_deep_text() -> String {
    format!(
        "expression text nests deeper than {MAX_NESTING} levels (an expression may be at most {MAX_DEPTH} deep)"
    )
}

impl<'t> Parser<'t> {
    fn new(text: &'t str) -> Result<Self, ParseError> {
        Ok(Parser {
            text,
            toks: lex(text)?,
            pos: 0,
            depth: 0,
        })
    }

    fn peek(&self) -> &Tok {
        &self.toks[self.pos].0
    }

    fn peek_at(&self, k: usize) -> &Tok {
        &self.toks[(self.pos + k).min(self.toks.len() - 1)].0
    }

    fn next(&mut self) -> Tok {
        let t = self.toks[self.pos].0.clone();
        if self.pos + 1 < self.toks.len() {
            self.pos += 1;
        }
        t
    }

    fn error(&self, message: impl Into<String>) -> ParseError {
        ParseError {
            message: message.into(),
            column: self.toks[self.pos].1 + 1,
            text: self.text.to_string(),
        }
    }

    fn eat(&mut self, p: &str) -> bool {
        if matches!(self.peek(), Tok::Punct(q) if *q == p) {
            self.next();
            true
        } else {
            false
        }
    }

    fn eat_word(&mut self, w: &str) -> bool {
        if matches!(self.peek(), Tok::Ident(s) if s == w) {
            self.next();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, p: &str) -> Result<(), ParseError> {
        if self.eat(p) {
            Ok(())
        } else {
            Err(self.error(format!("expected '{p}', found {}", self.peek())))
        }
    }

    fn expect_end(&mut self) -> Result<(), ParseError> {
        match self.peek() {
            Tok::End => Ok(()),
            t => Err(self.error(format!("unexpected {t} after the expression"))),
        }
    }

    fn ident(&mut self, what: &str) -> Result<String, ParseError> {
        match self.peek().clone() {
            Tok::Ident(s) => {
                self.next();
                Ok(s)
            }
            t => Err(self.error(format!("expected {what}, found {t}"))),
        }
    }

    fn expr(&mut self) -> Result<Expr, ParseError> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(self.error(too_deep_text()));
        }
        let e = self.or();
        self.depth -= 1;
        e
    }

    /// One more link of a left-leaning operator chain: each deepens the tree by one.
    fn chain(&mut self, n: &mut usize) -> Result<(), ParseError> {
        *n += 1;
        if self.depth + *n > MAX_NESTING {
            return Err(self.error(format!(
                "expression is deeper than {MAX_DEPTH} levels (split it into several statements)"
            )));
        }
        Ok(())
    }

    fn nested<T>(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<T, ParseError>,
    ) -> Result<T, ParseError> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(self.error(too_deep_text()));
        }
        let r = f(self);
        self.depth -= 1;
        r
    }

    fn or(&mut self) -> Result<Expr, ParseError> {
        let mut a = self.and()?;
        let mut n = 0;
        while self.eat("||") || self.eat_word("or") {
            self.chain(&mut n)?;
            a = Expr::bin(BinOp::Or, a, self.and()?);
        }
        Ok(a)
    }

    fn and(&mut self) -> Result<Expr, ParseError> {
        let mut a = self.not()?;
        let mut n = 0;
        while self.eat("&&") || self.eat_word("and") {
            self.chain(&mut n)?;
            a = Expr::bin(BinOp::And, a, self.not()?);
        }
        Ok(a)
    }

    fn not(&mut self) -> Result<Expr, ParseError> {
        if self.eat_word("not") {
            return Ok(Expr::Unary(UnOp::Not, Box::new(self.nested(|p| p.not())?)));
        }
        self.cmp()
    }

    fn cmp_op(&self) -> Option<BinOp> {
        match self.peek() {
            Tok::Punct("==") => Some(BinOp::Eq),
            Tok::Punct("!=") => Some(BinOp::Ne),
            Tok::Punct("<") => Some(BinOp::Lt),
            Tok::Punct("<=") => Some(BinOp::Le),
            Tok::Punct(">") => Some(BinOp::Gt),
            Tok::Punct(">=") => Some(BinOp::Ge),
            _ => None,
        }
    }

    fn cmp(&mut self) -> Result<Expr, ParseError> {
        let a = self.add()?;
        if let Some(op) = self.cmp_op() {
            self.next();
            let b = self.add()?;
            if self.cmp_op().is_some() {
                return Err(self.error("comparisons cannot be chained; use parentheses and '&&'"));
            }
            return Ok(Expr::bin(op, a, b));
        }
        Ok(a)
    }

    fn add(&mut self) -> Result<Expr, ParseError> {
        let mut a = self.mul()?;
        let mut n = 0;
        loop {
            let op = match self.peek() {
                Tok::Punct("+") => BinOp::Add,
                Tok::Punct("-") => BinOp::Sub,
                _ => return Ok(a),
            };
            self.next();
            self.chain(&mut n)?;
            a = Expr::bin(op, a, self.mul()?);
        }
    }

    fn mul(&mut self) -> Result<Expr, ParseError> {
        let mut a = self.unary()?;
        let mut n = 0;
        loop {
            let op = match self.peek() {
                Tok::Punct("*") => BinOp::Mul,
                Tok::Punct("/") => BinOp::Div,
                Tok::Punct("//") => BinOp::FloorDiv,
                Tok::Punct("%") => BinOp::Mod,
                _ => return Ok(a),
            };
            self.next();
            self.chain(&mut n)?;
            a = Expr::bin(op, a, self.unary()?);
        }
    }

    fn unary(&mut self) -> Result<Expr, ParseError> {
        if self.eat("-") {
            if matches!(self.peek(), Tok::Int(..) | Tok::Float(..)) {
                return self.number(true);
            }
            return Ok(Expr::Unary(
                UnOp::Neg,
                Box::new(self.nested(|p| p.unary())?),
            ));
        }
        if self.eat("!") {
            return Ok(Expr::Unary(
                UnOp::Not,
                Box::new(self.nested(|p| p.unary())?),
            ));
        }
        self.primary()
    }

    fn number(&mut self, negative: bool) -> Result<Expr, ParseError> {
        let sign = if negative { -1i128 } else { 1 };
        let v = match self.peek().clone() {
            Tok::Int(v, t) => {
                let v = sign * v as i128;
                let out_of_range = || self.error(format!("integer {v} is out of range"));
                match t {
                    Some(DType::I32) => Value::I32(i32::try_from(v).map_err(|_| out_of_range())?),
                    _ => Value::I64(i64::try_from(v).map_err(|_| out_of_range())?),
                }
            }
            Tok::Float(v, t) => {
                let v = if negative { -v } else { v };
                match t {
                    Some(DType::F32) => Value::F32(v as f32),
                    _ => Value::F64(v),
                }
            }
            t => return Err(self.error(format!("expected a number, found {t}"))),
        };
        self.next();
        Ok(Expr::Const(v))
    }

    fn args(&mut self, name: &str) -> Result<Vec<Expr>, ParseError> {
        self.expect("(")?;
        let mut args = Vec::new();
        if !self.eat(")") {
            loop {
                args.push(self.expr()?);
                if self.eat(")") {
                    break;
                }
                if !self.eat(",") {
                    return Err(self.error(format!(
                        "expected ',' or ')' in the arguments of '{name}', found {}",
                        self.peek()
                    )));
                }
            }
        }
        Ok(args)
    }

    fn primary(&mut self) -> Result<Expr, ParseError> {
        match self.peek().clone() {
            Tok::Int(..) | Tok::Float(..) => self.number(false),
            Tok::Punct("(") => {
                self.next();
                let e = self.expr()?;
                self.expect(")")?;
                Ok(e)
            }
            Tok::Ident(name) => {
                let start = self.pos;
                self.next();
                match name.as_str() {
                    "true" | "True" => return Ok(Expr::Const(Value::Bool(true))),
                    "false" | "False" => return Ok(Expr::Const(Value::Bool(false))),
                    _ => {}
                }
                if !matches!(self.peek(), Tok::Punct("(")) {
                    return Ok(Expr::Var(name));
                }
                let args = self.args(&name)?;
                let arity_err = |p: &Self, n: usize| {
                    let mut e = p.error(format!(
                        "'{name}' takes {n} argument(s), got {}",
                        args.len()
                    ));
                    e.column = p.toks[start].1 + 1;
                    e
                };
                if name == "select" {
                    if args.len() != 3 {
                        return Err(arity_err(self, 3));
                    }
                    let mut it = args.into_iter();
                    let (c, a, b) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
                    return Ok(Expr::Select(Box::new(c), Box::new(a), Box::new(b)));
                }
                if let Some(t) = DType::from_name(&name) {
                    if args.len() != 1 {
                        return Err(arity_err(self, 1));
                    }
                    return Ok(Expr::Cast(t, Box::new(args.into_iter().next().unwrap())));
                }
                match MathFn::from_name(&name) {
                    Some(f) if f.arity() == args.len() => Ok(Expr::Call(f, args)),
                    Some(f) => Err(arity_err(self, f.arity())),
                    None => {
                        let mut e = self.error(format!("unknown function '{name}'"));
                        e.column = self.toks[start].1 + 1;
                        Err(e)
                    }
                }
            }
            t => Err(self.error(format!("expected an expression, found {t}"))),
        }
    }

    fn sym(&mut self) -> Result<SymExpr, ParseError> {
        let start = self.pos;
        let e = self.expr()?;
        check_depth(self, &e)?;
        to_sym(&e).map_err(|m| {
            let mut err = self.error(m);
            err.column = self.toks[start].1 + 1;
            err
        })
    }

    fn subset(&mut self) -> Result<Subset, ParseError> {
        let mut dims = Vec::new();
        if matches!(self.peek(), Tok::Punct("]") | Tok::End) {
            return Ok(Subset(dims));
        }
        loop {
            dims.push(self.dim()?);
            if !self.eat(",") {
                return Ok(Subset(dims));
            }
        }
    }

    fn dim(&mut self) -> Result<Dim, ParseError> {
        if let (Tok::Ident(table), Tok::Punct("[")) = (self.peek().clone(), self.peek_at(1).clone())
        {
            self.next();
            self.next();
            // `k[]` reads a scalar (a 0-dimensional table).
            let mut index = Vec::new();
            while !self.eat("]") {
                index.push(self.sym()?);
                if self.eat("]") {
                    break;
                }
                self.expect(",")?;
            }
            // An offset added to the value read: `e2c[e, 0] - r + 1`.
            let mut offset = SymExpr::Int(0);
            loop {
                let neg = match self.peek() {
                    Tok::Punct("+") => false,
                    Tok::Punct("-") => true,
                    _ => break,
                };
                self.next();
                let start = self.pos;
                let term = self.mul()?;
                let term = to_sym(&term).map_err(|m| {
                    let mut err = self.error(m);
                    err.column = self.toks[start].1 + 1;
                    err
                })?;
                offset = if neg {
                    offset.sub(&term)
                } else {
                    offset.add(&term)
                };
            }
            return Ok(Dim::Indirect {
                table,
                index,
                offset: offset.simplify(),
            });
        }
        let start = self.sym()?;
        if !self.eat(":") {
            return Ok(Dim::Index(start));
        }
        let end = self.sym()?;
        let step = if self.eat(":") {
            self.sym()?
        } else {
            SymExpr::Int(1)
        };
        Ok(Dim::Range { start, end, step })
    }
}

/// Converts the integer part of the expression language to a [`SymExpr`] (integer
/// literals, names, `+ - * // %`, comparisons, `&& || !`, `min`, `max`); anything else is
/// an error saying what.
pub fn symexpr_of(e: &Expr) -> Result<SymExpr, String> {
    to_sym(e)
}

fn to_sym(e: &Expr) -> Result<SymExpr, String> {
    Ok(match e {
        Expr::Const(Value::I64(v)) => SymExpr::Int(*v),
        Expr::Const(Value::I32(v)) => SymExpr::Int(*v as i64),
        Expr::Const(Value::Bool(b)) => SymExpr::Int(*b as i64),
        Expr::Const(v) => return Err(format!("floating-point value {v} in an integer expression")),
        Expr::Var(v) => SymExpr::Sym(Arc::from(v.as_str())),
        Expr::Unary(UnOp::Neg, a) => SymExpr::Neg(Arc::new(to_sym(a)?)),
        Expr::Unary(UnOp::Not, a) => SymExpr::Not(Arc::new(to_sym(a)?)),
        Expr::Binary(op, a, b) => {
            let op = match op {
                BinOp::Add => SymOp::Add,
                BinOp::Sub => SymOp::Sub,
                BinOp::Mul => SymOp::Mul,
                BinOp::Div => {
                    return Err("'/' in an integer expression; use '//' (floor division)".into());
                }
                BinOp::FloorDiv => SymOp::FloorDiv,
                BinOp::Mod => SymOp::Mod,
                BinOp::Eq => SymOp::Eq,
                BinOp::Ne => SymOp::Ne,
                BinOp::Lt => SymOp::Lt,
                BinOp::Le => SymOp::Le,
                BinOp::Gt => SymOp::Gt,
                BinOp::Ge => SymOp::Ge,
                BinOp::And => SymOp::And,
                BinOp::Or => SymOp::Or,
            };
            SymExpr::bin(op, to_sym(a)?, to_sym(b)?)
        }
        Expr::Call(MathFn::Min, args) => {
            SymExpr::bin(SymOp::Min, to_sym(&args[0])?, to_sym(&args[1])?)
        }
        Expr::Call(MathFn::Max, args) => {
            SymExpr::bin(SymOp::Max, to_sym(&args[0])?, to_sym(&args[1])?)
        }
        Expr::Call(f, _) => {
            return Err(format!("function '{}' in an integer expression", f.name()));
        }
        Expr::Select(..) => return Err("'select' in an integer expression".into()),
        Expr::Cast(..) => return Err("a cast in an integer expression".into()),
    })
}

fn check_depth(p: &Parser<'_>, e: &Expr) -> Result<(), ParseError> {
    if e.depth() > MAX_DEPTH {
        return Err(ParseError {
            message: format!(
                "expression is deeper than {MAX_DEPTH} levels (split it into several statements)"
            ),
            column: 1,
            text: p.text.to_string(),
        });
    }
    Ok(())
}

/// Words the expression syntax reads as literals or operators, so they cannot name
/// containers, symbols, connectors or parameters.
pub const RESERVED: [&str; 11] = [
    "true", "false", "True", "False", "and", "or", "not", "inf", "nan", "inff32", "nanf32",
];

/// True for a usable name: an identifier (`[A-Za-z_][A-Za-z0-9_]*`) that is not
/// [`RESERVED`].
pub fn is_name(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(x) if x.is_ascii_alphabetic() || x == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
        && !RESERVED.contains(&s)
}

/// Parses tasklet expression text.
pub fn parse_expr(text: &str) -> Result<Expr, ParseError> {
    let mut p = Parser::new(text)?;
    let e = p.expr()?;
    p.expect_end()?;
    check_depth(&p, &e)?;
    Ok(e)
}

/// Parses symbolic integer expression text.
pub fn parse_symexpr(text: &str) -> Result<SymExpr, ParseError> {
    let mut p = Parser::new(text)?;
    let e = p.sym()?;
    p.expect_end()?;
    Ok(e)
}

/// Parses a statement `target = expr`.
pub fn parse_stmt(text: &str) -> Result<Stmt, ParseError> {
    let mut p = Parser::new(text)?;
    let target = p.ident("the name assigned to")?;
    p.expect("=")?;
    let value = p.expr()?;
    p.expect_end()?;
    check_depth(&p, &value)?;
    Ok(Stmt { target, value })
}

/// Parses a subset such as `i - 1, 0:N, 1:N:2, e2c[e, 0]` (empty text: no dimension).
pub fn parse_subset(text: &str) -> Result<Subset, ParseError> {
    let mut p = Parser::new(text)?;
    let s = p.subset()?;
    p.expect_end()?;
    Ok(s)
}

/// Parses `data[subset]`, or `data` alone for a scalar.
pub fn parse_memlet(text: &str) -> Result<Memlet, ParseError> {
    let mut p = Parser::new(text)?;
    let data = p.ident("a data name")?;
    let subset = if p.eat("[") {
        let s = p.subset()?;
        p.expect("]")?;
        s
    } else {
        Subset(Vec::new())
    };
    p.expect_end()?;
    Ok(Memlet::new(&data, subset))
}

// The parsing constructors of the IR types: here, so that the types do not depend on
// their parser.

impl SymExpr {
    /// Parses expression text such as `N - 1`, `min(i + 1, M)`, `t % 2 == 0 && go`.
    pub fn parse(text: &str) -> Result<SymExpr, ParseError> {
        parse_symexpr(text)
    }
}

impl Expr {
    /// Parses expression text such as `0.25 * (a + b) - sqrt(c)`.
    pub fn parse(text: &str) -> Result<Expr, ParseError> {
        parse_expr(text)
    }
}

impl Stmt {
    /// Parses `target = expr`.
    pub fn parse(text: &str) -> Result<Stmt, ParseError> {
        parse_stmt(text)
    }
}

impl Subset {
    /// Parses `i - 1, 0:N, e2c[e, 0]`.
    pub fn parse(text: &str) -> Result<Subset, ParseError> {
        parse_subset(text)
    }
}

impl Memlet {
    /// Parses `data[subset]` (or `data` for a scalar); panics on malformed text (for
    /// literals in code; use [`parse_memlet`] for input).
    pub fn parse(text: &str) -> Memlet {
        parse_memlet(text).unwrap_or_else(|e| panic!("invalid memlet {text:?}: {e}"))
    }
}

impl Range {
    /// Parses `start:end` or `start:end:step`.
    pub fn parse(text: &str) -> Result<Range, ParseError> {
        let s = parse_subset(text)?;
        match s.0.as_slice() {
            [Dim::Range { start, end, step }] => Ok(Range {
                start: start.clone(),
                end: end.clone(),
                step: step.clone(),
            }),
            _ => Err(ParseError {
                message: "expected a range 'start:end' or 'start:end:step'".into(),
                column: 1,
                text: text.to_string(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_point_at_the_column() {
        let e = parse_expr("a + * b").unwrap_err();
        assert_eq!(e.column, 5);
        assert!(e.message.contains("expected an expression"), "{e}");
        let e = parse_symexpr("N / 2").unwrap_err();
        assert!(e.message.contains("use '//'"), "{e}");
        let e = parse_expr("a < b < c").unwrap_err();
        assert!(e.message.contains("chained"), "{e}");
        let e = parse_expr("foo(1)").unwrap_err();
        assert_eq!(e.message, "unknown function 'foo'");
        assert_eq!(
            parse_expr("1.5i32").unwrap_err().message,
            "'1.5' is not an integer"
        );
        assert_eq!(
            parse_expr("a $ b").unwrap_err().to_string(),
            "unexpected character '$' at column 3 of 'a $ b'"
        );
    }

    #[test]
    fn subsets_and_memlets() {
        let m = parse_memlet("u[i - 1, 0:N, 1:N:2, e2c[e, 0]]").unwrap();
        assert_eq!(m.data, "u");
        assert_eq!(m.subset.0.len(), 4);
        assert!(
            matches!(&m.subset.0[3], Dim::Indirect { table, index, .. } if table == "e2c" && index.len() == 2)
        );
        assert_eq!(m.to_string(), "u[i - 1, 0:N, 1:N:2, e2c[e, 0]]");
        assert!(
            matches!(&m.subset.0[3], Dim::Indirect { offset, .. } if *offset == SymExpr::Int(0))
        );
        assert_eq!(parse_memlet("s").unwrap().subset.0.len(), 0);
        assert!(parse_memlet("u[i").is_err());
    }

    #[test]
    fn indirect_offsets_read_back() {
        // `t - a + b` is `t + (b - a)`, not `t - (a + b)`.
        let s = parse_subset("c2e[c, n] - a + b, k").unwrap();
        let Dim::Indirect { offset, .. } = &s.0[0] else {
            panic!("{s}")
        };
        let expect = SymExpr::parse("b - a").unwrap().simplify();
        assert_eq!(offset.sub(&expect).simplify(), SymExpr::Int(0), "{offset}");
        for text in [
            "c2e[c, n] - r",
            "c2e[c, n] + 2",
            "c2e[c, n] - 3",
            "c2e[c, n] + 2 * r",
            "c2e[c, n] - a + b",
            "c2e[c, n] - (a + b)",
            "c2e[c, n] + (-9223372036854775808)",
            // A scalar index (GT4Py's dynamic offsets): a 0-dimensional table.
            "k[] - r, i",
        ] {
            let once = parse_subset(text).unwrap();
            let again = parse_subset(&once.to_string()).unwrap();
            assert_eq!(once, again, "{text} printed as {once}");
        }
        let e = parse_subset("c2e[c, n] - 1.5").unwrap_err();
        assert!(e.message.contains("floating-point"), "{e}");
        assert!(parse_memlet("u[i").is_err());
    }

    #[test]
    fn deep_text_is_an_error_not_a_stack_overflow() {
        let text_too_deep =
            "expression text nests deeper than 514 levels (an expression may be at most 256 deep)";
        let parens = format!("{}N{}", "(".repeat(100_000), ")".repeat(100_000));
        assert_eq!(parse_symexpr(&parens).unwrap_err().message, text_too_deep);
        let negs = format!("{}N", "-".repeat(200_000));
        assert_eq!(parse_symexpr(&negs).unwrap_err().message, text_too_deep);
        // Parentheses alone build no tree: 300 of them around a name are fine.
        let parens = format!("{}N{}", "(".repeat(300), ")".repeat(300));
        assert_eq!(parse_symexpr(&parens).unwrap().to_string(), "N");
        // A tree of the deepest kind allowed prints as text that reads back.
        let nots = format!("{}x", "!".repeat(255));
        let e = parse_expr(&nots).unwrap();
        assert_eq!(parse_expr(&e.to_string()).unwrap(), e);
        let too_many = format!("{}x", "!".repeat(256));
        assert!(
            parse_expr(&too_many)
                .unwrap_err()
                .message
                .contains("deeper than 256 levels")
        );
        let chain = vec!["N"; 300_000].join(" + ");
        assert!(
            parse_symexpr(&chain)
                .unwrap_err()
                .message
                .contains("deeper than 256")
        );
        let code = format!("o = {}", vec!["c"; 300_000].join(" + "));
        assert!(
            parse_stmt(&code)
                .unwrap_err()
                .message
                .contains("deeper than 256")
        );
        let ok = vec!["c"; 200].join(" + ");
        assert!(parse_expr(&ok).is_ok());
    }

    #[test]
    fn python_spellings() {
        assert_eq!(
            parse_expr("not a and b or c").unwrap().to_string(),
            "!a && b || c"
        );
        assert_eq!(parse_symexpr("not t < T").unwrap().to_string(), "!(t < T)");
        assert_eq!(parse_expr("True").unwrap(), Expr::Const(Value::Bool(true)));
    }
}
