//! Whole programs: declarations, stencil calls with explicit domains, loops, ifs on
//! runtime flags and calls of nested programs. [`Program::build`] flattens everything into
//! one SDFG (see [`crate::flatten`]).
//!
//! ```
//! use sdflow_ir::{DType, Value};
//! use sdflow_orchestration::{Program, Stencil};
//!
//! let lap = Stencil::new("lap", |s| {
//!     let u = s.input("u");
//!     let out = s.output("out");
//!     s.set(&out, u.at(-1, 0, 0) + u.at(1, 0, 0) + u.at(0, -1, 0) + u.at(0, 1, 0) - 4.0 * u.c());
//! });
//! let mut p = Program::new("smooth");
//! p.symbol("N", DType::I64).static_symbol("NZ", Value::I64(2));
//! p.field("u", ["N", "N", "NZ"]).temp("l", ["N", "N", "NZ"]);
//! p.repeat("it", "3", |b| {
//!     b.call(&lap, &[("u", "u"), ("out", "l")], &[], &["1:N-1", "1:N-1", "0:NZ"]);
//!     b.call(&lap, &[("u", "l"), ("out", "u")], &[], &["2:N-2", "2:N-2", "0:NZ"]);
//! });
//! let sdfg = p.build().unwrap();
//! assert_eq!(sdfg.stats().maps, 2);
//! ```

use std::ops::{Deref, DerefMut};

use sdflow_ir::{DType, Decomposition, SymExpr, Value};

use crate::error::BuildError;
use crate::stencil::Stencil;

/// A declared field or table of a program.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct FieldDef {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<String>,
    pub temp: bool,
}

/// A declared symbol (scalar parameter) of a program.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SymDef {
    pub name: String,
    pub dtype: DType,
    pub value: Option<Value>,
}

/// A stencil call.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Call {
    pub stencil: Stencil,
    pub fields: Vec<(String, String)>,
    pub params: Vec<(String, String)>,
    pub domain: Vec<String>,
}

/// One item of a program body.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Item {
    Call(Box<Call>),
    Loop {
        var: String,
        start: String,
        end: String,
        body: Vec<Item>,
    },
    If {
        cond: String,
        then: Vec<Item>,
        otherwise: Vec<Item>,
    },
    Nested {
        program: Box<Program>,
        fields: Vec<(String, String)>,
        symbols: Vec<(String, String)>,
    },
    Exchange {
        fields: Vec<String>,
        decomposition: Decomposition,
    },
}

/// A sequence of program items (a program's body, a loop's or a branch's).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Body {
    pub(crate) items: Vec<Item>,
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

fn body(f: impl FnOnce(&mut Body)) -> Vec<Item> {
    let mut b = Body::default();
    f(&mut b);
    b.items
}

impl Body {
    /// Calls a stencil. `fields` binds each formal field (and table) to a program field;
    /// `params` binds each scalar parameter to a program symbol or a number (`"dt"`,
    /// `"0.5"`); `domain` gives `start:end` per dimension of the stencil (`I, J, K`, or
    /// `Loc, K` for unstructured stencils), as GT4Py's `horizontal_start/end` and
    /// `vertical_start/end`.
    pub fn call(
        &mut self,
        stencil: &Stencil,
        fields: &[(&str, &str)],
        params: &[(&str, &str)],
        domain: &[&str],
    ) -> &mut Self {
        self.items.push(Item::Call(Box::new(Call {
            stencil: stencil.clone(),
            fields: pairs(fields),
            params: pairs(params),
            domain: domain.iter().map(|s| s.to_string()).collect(),
        })));
        self
    }

    /// Exchanges the halos of `fields` between the ranks of `decomposition` (a state of
    /// its own: every rank runs the program on its part of the fields;
    /// `docs/distributed.md`). Where the program asks for it: before the stencils that
    /// read the halo.
    pub fn halo_exchange(&mut self, fields: &[&str], decomposition: Decomposition) -> &mut Self {
        self.items.push(Item::Exchange {
            fields: fields.iter().map(|f| f.to_string()).collect(),
            decomposition,
        });
        self
    }

    /// `for var in 0..count { f }` (RK stages, substeps, timesteps).
    pub fn repeat(&mut self, var: &str, count: &str, f: impl FnOnce(&mut Body)) -> &mut Self {
        self.for_range(var, &format!("0:{count}"), f)
    }

    /// `for var in start..end { f }`, with `range` written `start:end`.
    pub fn for_range(&mut self, var: &str, range: &str, f: impl FnOnce(&mut Body)) -> &mut Self {
        let (start, end) = match range.split_once(':') {
            Some((s, e)) => (s.to_string(), e.to_string()),
            None => (range.to_string(), String::new()),
        };
        self.items.push(Item::Loop {
            var: var.to_string(),
            start,
            end,
            body: body(f),
        });
        self
    }

    /// `if cond { then } else { otherwise }` on runtime flags (`"damping != 0"`).
    pub fn if_else(
        &mut self,
        cond: &str,
        then: impl FnOnce(&mut Body),
        otherwise: impl FnOnce(&mut Body),
    ) -> &mut Self {
        self.items.push(Item::If {
            cond: cond.to_string(),
            then: body(then),
            otherwise: body(otherwise),
        });
        self
    }

    /// `if cond { then }`.
    pub fn if_(&mut self, cond: &str, then: impl FnOnce(&mut Body)) -> &mut Self {
        self.if_else(cond, then, |_| {})
    }

    /// Calls a nested program: `fields` binds its fields (not its temporaries) to this
    /// program's, `symbols` its symbols to expressions over this program's symbols. Its
    /// static symbols take their static value unless bound to a constant.
    pub fn nested(
        &mut self,
        program: &Program,
        fields: &[(&str, &str)],
        symbols: &[(&str, &str)],
    ) -> &mut Self {
        self.items.push(Item::Nested {
            program: Box::new(program.clone()),
            fields: pairs(fields),
            symbols: pairs(symbols),
        });
        self
    }
}

/// A whole program: declarations and a [`Body`] (which it dereferences to).
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    pub(crate) name: String,
    pub(crate) symbols: Vec<SymDef>,
    pub(crate) fields: Vec<FieldDef>,
    pub(crate) body: Body,
}

impl Deref for Program {
    type Target = Body;
    fn deref(&self) -> &Body {
        &self.body
    }
}

impl DerefMut for Program {
    fn deref_mut(&mut self) -> &mut Body {
        &mut self.body
    }
}

impl Program {
    /// An empty program.
    pub fn new(name: &str) -> Program {
        Program {
            name: name.to_string(),
            symbols: Vec::new(),
            fields: Vec::new(),
            body: Body::default(),
        }
    }

    /// The program's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Declares a runtime symbol (a size or a scalar parameter such as `dt`).
    pub fn symbol(&mut self, name: &str, dtype: DType) -> &mut Self {
        self.symbols.push(SymDef {
            name: name.to_string(),
            dtype,
            value: None,
        });
        self
    }

    /// Declares a static symbol: its value is known at build time (a domain size, a
    /// configuration flag) and specialization folds it.
    pub fn static_symbol(&mut self, name: &str, value: Value) -> &mut Self {
        self.symbols.push(SymDef {
            name: name.to_string(),
            dtype: value.dtype(),
            value: Some(value),
        });
        self
    }

    fn def(&mut self, name: &str, dtype: DType, shape: Vec<String>, temp: bool) -> &mut Self {
        self.fields.push(FieldDef {
            name: name.to_string(),
            dtype,
            shape,
            temp,
        });
        self
    }

    /// Declares an `f64` argument field with a symbolic shape.
    pub fn field<S: ToString>(
        &mut self,
        name: &str,
        shape: impl IntoIterator<Item = S>,
    ) -> &mut Self {
        self.def(
            name,
            DType::F64,
            shape.into_iter().map(|s| s.to_string()).collect(),
            false,
        )
    }

    /// Declares an argument field of any element type (connectivity tables are `i32`/`i64`).
    pub fn field_typed<S: ToString>(
        &mut self,
        name: &str,
        dtype: DType,
        shape: impl IntoIterator<Item = S>,
    ) -> &mut Self {
        self.def(
            name,
            dtype,
            shape.into_iter().map(|s| s.to_string()).collect(),
            false,
        )
    }

    /// Declares an `f64` temporary: internal, allocated once, reusable by many calls;
    /// reading it before some call writes it is a build error.
    pub fn temp<S: ToString>(
        &mut self,
        name: &str,
        shape: impl IntoIterator<Item = S>,
    ) -> &mut Self {
        self.def(
            name,
            DType::F64,
            shape.into_iter().map(|s| s.to_string()).collect(),
            true,
        )
    }

    pub(crate) fn sym_expr(&self, what: &str, text: &str) -> Result<SymExpr, BuildError> {
        SymExpr::parse(text).map_err(|e| BuildError::Program {
            program: self.name.clone(),
            message: format!("{what}: {e}"),
        })
    }
}
