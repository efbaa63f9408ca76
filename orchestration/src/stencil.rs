//! Stencil definitions: fields read at relative offsets, scalar parameters, several
//! outputs, vertical scans with carried values, and unstructured neighbour access.
//!
//! ```
//! use sdflow_orchestration::Stencil;
//!
//! let lap = Stencil::new("lap", |s| {
//!     let u = s.input("u");
//!     let out = s.output("out");
//!     s.set(&out, u.at(-1, 0, 0) + u.at(1, 0, 0) + u.at(0, -1, 0) + u.at(0, 1, 0) - 4.0 * u.c());
//! });
//! assert_eq!(lap.name(), "lap");
//! ```

use std::cell::RefCell;
use std::rc::Rc;

use sdflow_ir::{Expr, Stmt};

use crate::expr::E;

/// Where the horizontal index of an unstructured field lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Loc {
    /// Cell centres.
    Cell,
    /// Edges.
    Edge,
    /// Vertices.
    Vertex,
}

/// The dimensions of a field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dims {
    /// Cartesian `(I, J, K)`.
    Ijk,
    /// Unstructured `(Loc, K)`.
    Unstructured(Loc),
    /// Vertical only, `(K)`: per-level coefficients (layer densities, damping profiles,
    /// vertical-coordinate weights), read at the level being computed with `.c()` or
    /// `.k(dk)` by any stencil. Inputs only.
    K,
}

impl Dims {
    /// Number of dimensions (3 or 2).
    pub fn rank(self) -> usize {
        match self {
            Dims::Ijk => 3,
            Dims::Unstructured(_) => 2,
            Dims::K => 1,
        }
    }
}

/// Direction of a vertical scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanDir {
    /// From the first level of the domain up (k increasing).
    Forward,
    /// From the last level down (k decreasing).
    Backward,
}

/// How a read addresses its field, relative to the point being computed.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Index {
    /// Cartesian offset.
    Offset { di: i64, dj: i64, dk: i64 },
    /// Vertical offset of an unstructured field at the same horizontal point.
    Vertical { dk: i64 },
    /// Neighbour `slot` of the current point through a connectivity table.
    Neighbor { table: String, slot: i64, dk: i64 },
}

/// One read of a formal field, bound to a tasklet connector.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Read {
    pub conn: String,
    pub field: String,
    pub index: Index,
}

/// A formal field of a stencil.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct FieldDecl {
    pub name: String,
    pub dims: Dims,
    pub output: bool,
}

/// A connectivity table: for each point at `from`, indices of points at `to`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TableDecl {
    pub name: String,
    pub from: Loc,
    pub to: Loc,
}

/// Reads, statements and writes of one computation (a point stencil, or one part of a scan).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Section {
    pub reads: Vec<Read>,
    pub code: Vec<Stmt>,
    /// (formal output, local holding its value)
    pub writes: Vec<(String, String)>,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Kind {
    Point(Section),
    Scan {
        dir: ScanDir,
        first: Section,
        step: Section,
    },
}

#[derive(Default)]
struct Ctx {
    sections: [Section; 2],
    current: usize,
    scan: Option<ScanDir>,
    in_step: bool,
    counter: usize,
    errors: Vec<String>,
    name: String,
}

impl Ctx {
    fn fresh(&mut self, prefix: &str) -> String {
        self.counter += 1;
        format!("{prefix}{}", self.counter)
    }

    fn read(&mut self, field: &str, index: Index) -> E {
        let sec = &mut self.sections[self.current];
        if let Some(r) = sec
            .reads
            .iter()
            .find(|r| r.field == field && r.index == index)
        {
            return E(Expr::Var(r.conn.clone()));
        }
        let conn = self.fresh("in");
        self.sections[self.current].reads.push(Read {
            conn: conn.clone(),
            field: field.to_string(),
            index,
        });
        E(Expr::Var(conn))
    }
}

/// A formal field inside a stencil definition.
#[derive(Clone)]
pub struct Field {
    name: String,
    dims: Dims,
    output: bool,
    ctx: Rc<RefCell<Ctx>>,
}

impl Field {
    /// The value at a Cartesian offset `(di, dj, dk)`.
    pub fn at(&self, di: i64, dj: i64, dk: i64) -> E {
        let mut cx = self.ctx.borrow_mut();
        if self.dims != Dims::Ijk {
            let msg = if self.dims == Dims::K {
                format!(
                    "stencil '{}': field '{}' is over K only; read it with .c() or .k(dk)",
                    cx.name, self.name
                )
            } else {
                format!(
                    "stencil '{}': field '{}' is unstructured; read it with .k(dk) or .nb(table, slot)",
                    cx.name, self.name
                )
            };
            cx.errors.push(msg);
        }
        if cx.scan.is_some() && (di, dj) != (0, 0) {
            let msg = format!(
                "scan '{}': field '{}' is read at horizontal offset ({di}, {dj}); a scan reads its own column only",
                cx.name, self.name
            );
            cx.errors.push(msg);
        }
        if self.output && cx.scan.is_some() {
            let msg = format!(
                "scan '{}': output '{}' is read with .at(); use .prev() for the previous level",
                cx.name, self.name
            );
            cx.errors.push(msg);
        }
        cx.read(&self.name, Index::Offset { di, dj, dk })
    }

    /// The value at the point being computed.
    pub fn c(&self) -> E {
        match self.dims {
            Dims::Ijk => self.at(0, 0, 0),
            Dims::Unstructured(_) | Dims::K => self.k(0),
        }
    }

    /// The value `dk` levels away in the same column (unstructured or Cartesian).
    pub fn k(&self, dk: i64) -> E {
        match self.dims {
            Dims::Ijk => self.at(0, 0, dk),
            Dims::Unstructured(_) | Dims::K => self
                .ctx
                .borrow_mut()
                .read(&self.name, Index::Vertical { dk }),
        }
    }

    /// The value at neighbour `slot` of the current point through `table` (same level).
    pub fn nb(&self, table: &Table, slot: i64) -> E {
        let mut cx = self.ctx.borrow_mut();
        if self.dims != Dims::Unstructured(table.to) {
            let msg = format!(
                "stencil '{}': table '{}' leads to {:?} points but field '{}' is over {:?}",
                cx.name, table.name, table.to, self.name, self.dims
            );
            cx.errors.push(msg);
        }
        if cx.scan.is_some() {
            let msg = format!(
                "scan '{}': field '{}' is read through table '{}'; a scan reads its own column only",
                cx.name, self.name, table.name
            );
            cx.errors.push(msg);
        }
        cx.read(
            &self.name,
            Index::Neighbor {
                table: table.name.clone(),
                slot,
                dk: 0,
            },
        )
    }

    /// In the step of a scan: this output's value at the previous level (k-1 forward,
    /// k+1 backward).
    pub fn prev(&self) -> E {
        let mut cx = self.ctx.borrow_mut();
        let Some(dir) = cx.scan.filter(|_| cx.in_step && self.output) else {
            let msg = format!(
                "stencil '{}': .prev() of '{}' is only for outputs inside the step of a scan",
                cx.name, self.name
            );
            cx.errors.push(msg);
            return E::lit(0.0);
        };
        let dk = if dir == ScanDir::Forward { -1 } else { 1 };
        let index = match self.dims {
            Dims::Ijk => Index::Offset { di: 0, dj: 0, dk },
            Dims::Unstructured(_) | Dims::K => Index::Vertical { dk },
        };
        cx.read(&self.name, index)
    }
}

/// A formal connectivity table inside a stencil definition.
#[derive(Clone)]
pub struct Table {
    name: String,
    to: Loc,
}

/// Declares the formals and the computation of a stencil.
pub struct StencilBuilder {
    ctx: Rc<RefCell<Ctx>>,
    fields: Vec<FieldDecl>,
    params: Vec<String>,
    tables: Vec<TableDecl>,
}

impl StencilBuilder {
    fn field(&mut self, name: &str, dims: Dims, output: bool) -> Field {
        if output && dims == Dims::K {
            let mut cx = self.ctx.borrow_mut();
            let msg = format!(
                "stencil '{}': output '{name}' is over K only; fields over K are inputs",
                cx.name
            );
            cx.errors.push(msg);
        }
        if self.fields.iter().any(|f| f.name == name) || self.params.iter().any(|p| p == name) {
            let mut cx = self.ctx.borrow_mut();
            let msg = format!("stencil '{}': '{name}' is declared twice", cx.name);
            cx.errors.push(msg);
        }
        self.fields.push(FieldDecl {
            name: name.to_string(),
            dims,
            output,
        });
        Field {
            name: name.to_string(),
            dims,
            output,
            ctx: self.ctx.clone(),
        }
    }

    /// A Cartesian input field.
    pub fn input(&mut self, name: &str) -> Field {
        self.field(name, Dims::Ijk, false)
    }

    /// A Cartesian output field (written at the point being computed).
    pub fn output(&mut self, name: &str) -> Field {
        self.field(name, Dims::Ijk, true)
    }

    /// An input field over the vertical only (`Dims::K`): one value per level.
    pub fn input_k(&mut self, name: &str) -> Field {
        self.field(name, Dims::K, false)
    }

    /// An input field over the given dimensions.
    pub fn input_on(&mut self, name: &str, dims: Dims) -> Field {
        self.field(name, dims, false)
    }

    /// An output field over the given dimensions.
    pub fn output_on(&mut self, name: &str, dims: Dims) -> Field {
        self.field(name, dims, true)
    }

    /// A scalar parameter (`f64`), bound to a program symbol or a constant at each call.
    pub fn param(&mut self, name: &str) -> E {
        self.params.push(name.to_string());
        E(Expr::Var(name.to_string()))
    }

    /// A connectivity table from `from` points to `to` points (an integer array
    /// `[n_from, width]`).
    pub fn table(&mut self, name: &str, from: Loc, to: Loc) -> Table {
        self.tables.push(TableDecl {
            name: name.to_string(),
            from,
            to,
        });
        Table {
            name: name.to_string(),
            to,
        }
    }

    /// Names an intermediate value (a tasklet local), so it is computed once.
    pub fn local(&mut self, value: impl Into<E>) -> E {
        let mut cx = self.ctx.borrow_mut();
        let name = cx.fresh("t");
        let cur = cx.current;
        cx.sections[cur].code.push(Stmt {
            target: name.clone(),
            value: value.into().0,
        });
        E(Expr::Var(name))
    }

    /// Sets an output at the point being computed.
    pub fn set(&mut self, out: &Field, value: impl Into<E>) {
        let mut cx = self.ctx.borrow_mut();
        if !out.output {
            let msg = format!(
                "stencil '{}': '{}' is an input and cannot be set",
                cx.name, out.name
            );
            cx.errors.push(msg);
        }
        let cur = cx.current;
        if cx.sections[cur].writes.iter().any(|(f, _)| *f == out.name) {
            let msg = format!("stencil '{}': output '{}' is set twice", cx.name, out.name);
            cx.errors.push(msg);
        }
        let local = cx.fresh("o");
        cx.sections[cur].code.push(Stmt {
            target: local.clone(),
            value: value.into().0,
        });
        cx.sections[cur].writes.push((out.name.clone(), local));
    }

    /// In a scan: the computation at the first level.
    pub fn first(&mut self, f: impl FnOnce(&mut StencilBuilder)) {
        self.section(0, false, f);
    }

    /// In a scan: the computation at every following level (may read `.prev()`).
    pub fn step(&mut self, f: impl FnOnce(&mut StencilBuilder)) {
        self.section(1, true, f);
    }

    fn section(&mut self, i: usize, step: bool, f: impl FnOnce(&mut StencilBuilder)) {
        {
            let mut cx = self.ctx.borrow_mut();
            if cx.scan.is_none() {
                let msg = format!(
                    "stencil '{}': first/step are for scans (Stencil::scan)",
                    cx.name
                );
                cx.errors.push(msg);
            }
            cx.current = i;
            cx.in_step = step;
        }
        f(self);
        let mut cx = self.ctx.borrow_mut();
        cx.current = 0;
        cx.in_step = false;
    }
}

/// A stencil: a pointwise computation over a domain, or a vertical scan. Define it once,
/// call it from programs with actual fields, parameters and a domain.
#[derive(Clone, Debug, PartialEq)]
pub struct Stencil {
    pub(crate) name: String,
    pub(crate) fields: Vec<FieldDecl>,
    pub(crate) params: Vec<String>,
    pub(crate) tables: Vec<TableDecl>,
    pub(crate) kind: Kind,
    pub(crate) errors: Vec<String>,
}

impl Stencil {
    fn define(name: &str, scan: Option<ScanDir>, f: impl FnOnce(&mut StencilBuilder)) -> Stencil {
        let ctx = Rc::new(RefCell::new(Ctx {
            scan,
            name: name.to_string(),
            ..Ctx::default()
        }));
        let mut b = StencilBuilder {
            ctx: ctx.clone(),
            fields: Vec::new(),
            params: Vec::new(),
            tables: Vec::new(),
        };
        f(&mut b);
        let StencilBuilder {
            fields,
            params,
            tables,
            ..
        } = b;
        let mut cx = ctx.borrow_mut();
        let [first, step] = std::mem::take(&mut cx.sections);
        let mut errors = std::mem::take(&mut cx.errors);
        let kind = match scan {
            None => Kind::Point(first),
            Some(dir) => {
                let outs =
                    |s: &Section| s.writes.iter().map(|(f, _)| f.clone()).collect::<Vec<_>>();
                if outs(&first) != outs(&step) {
                    errors.push(format!(
                        "scan '{name}': first and step must set the same outputs in the same order"
                    ));
                }
                Kind::Scan { dir, first, step }
            }
        };
        let has_writes = match &kind {
            Kind::Point(s) => !s.writes.is_empty(),
            Kind::Scan { first, .. } => !first.writes.is_empty(),
        };
        if !has_writes {
            errors.push(format!("stencil '{name}' sets no output"));
        }
        Stencil {
            name: name.to_string(),
            fields,
            params,
            tables,
            kind,
            errors,
        }
    }

    /// A pointwise stencil: `f` declares formals and sets outputs.
    pub fn new(name: &str, f: impl FnOnce(&mut StencilBuilder)) -> Stencil {
        Stencil::define(name, None, f)
    }

    /// A vertical scan: `f` declares formals, then `first` (the first level) and `step`
    /// (every following level, which may read outputs' `.prev()`).
    pub fn scan(name: &str, dir: ScanDir, f: impl FnOnce(&mut StencilBuilder)) -> Stencil {
        Stencil::define(name, Some(dir), f)
    }

    /// The stencil's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Problems found in the definition (reported when a program using it is built).
    pub fn errors(&self) -> &[String] {
        &self.errors
    }
}
