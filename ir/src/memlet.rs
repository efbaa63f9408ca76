//! Memlets: which part of which data container an edge moves.

use std::fmt;

use crate::symexpr::SymExpr;

/// One dimension of a [`Subset`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Dim {
    /// A single index: `i - 1`.
    Index(SymExpr),
    /// A half-open strided range `start:end:step` (`start:end` when `step` is 1).
    Range {
        /// First index.
        start: SymExpr,
        /// One past the last index.
        end: SymExpr,
        /// Stride (positive).
        step: SymExpr,
    },
    /// A single index read from an integer array at run time: `e2c[e, 0]` means the index
    /// is the value of `e2c` at `(e, 0)` (neighbour tables of unstructured grids);
    /// `e2c[e, 0] - r` adds a symbolic offset to that value (GT4Py's fields start at a
    /// domain index `r`, its tables hold absolute indices).
    Indirect {
        /// The index array (integer dtype).
        table: String,
        /// Where to read it, one expression per dimension of `table`.
        index: Vec<SymExpr>,
        /// Added to the value read (0 for a plain table lookup).
        offset: SymExpr,
    },
}

impl Dim {
    /// A half-open range with step 1.
    pub fn range(start: impl Into<SymExpr>, end: impl Into<SymExpr>) -> Dim {
        Dim::Range {
            start: start.into(),
            end: end.into(),
            step: SymExpr::Int(1),
        }
    }

    /// Number of indices covered (1 for an index, `ceil((end-start)/step)` for a range).
    pub fn size(&self) -> SymExpr {
        match self {
            Dim::Index(_) | Dim::Indirect { .. } => SymExpr::Int(1),
            Dim::Range { start, end, step } => {
                if step.as_int() == Some(1) {
                    end.sub(start)
                } else {
                    // ceil((end - start) / step) = (end - start + step - 1) // step
                    let n = end.sub(start).add(step).sub(&SymExpr::Int(1));
                    SymExpr::bin(crate::symexpr::SymOp::FloorDiv, n, step.clone()).simplify()
                }
            }
        }
    }

    /// The first index, when it is symbolic (not indirect).
    pub fn first(&self) -> Option<&SymExpr> {
        match self {
            Dim::Index(e) => Some(e),
            Dim::Range { start, .. } => Some(start),
            Dim::Indirect { .. } => None,
        }
    }

    /// `(min, max)` indices touched, inclusive, when the dimension is symbolic and its step
    /// is 1 or it is a single index.
    pub fn bounds(&self) -> Option<(SymExpr, SymExpr)> {
        match self {
            Dim::Index(e) => Some((e.clone(), e.clone())),
            Dim::Range { start, end, step } if step.as_int() == Some(1) => {
                Some((start.clone(), end.sub(&SymExpr::Int(1))))
            }
            Dim::Range { start, end, step } => {
                // Last index: start + (size - 1) * step.
                let d = Dim::Range {
                    start: start.clone(),
                    end: end.clone(),
                    step: step.clone(),
                };
                let last = start.add(&d.size().sub(&SymExpr::Int(1)).mul(step));
                Some((start.clone(), last))
            }
            Dim::Indirect { .. } => None,
        }
    }

    /// Every symbol this dimension mentions (index tables not included).
    pub fn free_symbols(&self) -> std::collections::BTreeSet<String> {
        let mut out = std::collections::BTreeSet::new();
        for e in self.exprs() {
            out.extend(e.free_symbols());
        }
        out
    }

    /// The symbolic expressions in this dimension.
    pub fn exprs(&self) -> Vec<&SymExpr> {
        match self {
            Dim::Index(e) => vec![e],
            Dim::Range { start, end, step } => vec![start, end, step],
            Dim::Indirect { index, offset, .. } => index.iter().chain([offset]).collect(),
        }
    }

    /// Applies `f` to every symbolic expression.
    pub fn map_exprs(&self, f: &dyn Fn(&SymExpr) -> SymExpr) -> Dim {
        match self {
            Dim::Index(e) => Dim::Index(f(e)),
            Dim::Range { start, end, step } => Dim::Range {
                start: f(start),
                end: f(end),
                step: f(step),
            },
            Dim::Indirect {
                table,
                index,
                offset,
            } => Dim::Indirect {
                table: table.clone(),
                index: index.iter().map(f).collect(),
                offset: f(offset),
            },
        }
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Index(e) => write!(f, "{e}"),
            Dim::Range { start, end, step }
                if step.as_int() == Some(1) && *step == SymExpr::Int(1) =>
            {
                write!(f, "{start}:{end}")
            }
            Dim::Range { start, end, step } => write!(f, "{start}:{end}:{step}"),
            Dim::Indirect {
                table,
                index,
                offset,
            } => {
                write!(f, "{table}[")?;
                for (i, e) in index.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{e}")?;
                }
                f.write_str("]")?;
                // Written so that the subset parser reads it back: `+ term` / `- term`
                // with compound offsets in parentheses.
                match offset {
                    SymExpr::Int(0) => Ok(()),
                    SymExpr::Int(v) if *v < 0 && *v > i64::MIN => {
                        write!(f, " - {}", v.unsigned_abs())
                    }
                    SymExpr::Int(_) | SymExpr::Sym(_) => write!(f, " + {offset}"),
                    SymExpr::Neg(a) if matches!(**a, SymExpr::Sym(_) | SymExpr::Int(_)) => {
                        write!(f, " - {a}")
                    }
                    _ => write!(f, " + ({offset})"),
                }
            }
        }
    }
}

/// A subset of a data container: one [`Dim`] per dimension (none for a scalar).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Subset(pub Vec<Dim>);

impl Subset {
    /// The whole of an array of the given shape: `0:s0, 0:s1, …`.
    pub fn full(shape: &[SymExpr]) -> Subset {
        Subset(shape.iter().map(|s| Dim::range(0, s.clone())).collect())
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.0.len()
    }

    /// Number of elements (product of the dimension sizes), simplified.
    pub fn volume(&self) -> SymExpr {
        self.0
            .iter()
            .fold(SymExpr::Int(1), |acc, d| acc.mul(&d.size()))
    }

    /// Sizes of the dimensions.
    pub fn sizes(&self) -> Vec<SymExpr> {
        self.0.iter().map(Dim::size).collect()
    }

    /// True when every dimension is a single index (an element access).
    pub fn is_element(&self) -> bool {
        self.0.iter().all(|d| d.size().as_int() == Some(1))
    }

    /// Index tables used by indirect dimensions.
    pub fn tables(&self) -> Vec<&str> {
        self.0
            .iter()
            .filter_map(|d| match d {
                Dim::Indirect { table, .. } => Some(table.as_str()),
                _ => None,
            })
            .collect()
    }

    /// Every symbol the subset mentions.
    pub fn free_symbols(&self) -> std::collections::BTreeSet<String> {
        self.0.iter().flat_map(Dim::free_symbols).collect()
    }

    /// Applies `f` to every symbolic expression.
    pub fn map_exprs(&self, f: &dyn Fn(&SymExpr) -> SymExpr) -> Subset {
        Subset(self.0.iter().map(|d| d.map_exprs(f)).collect())
    }
}

impl fmt::Display for Subset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

/// Write-conflict resolution: how a write combines with the value already there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Wcr {
    /// `old + new`
    Sum,
    /// `old * new`
    Prod,
    /// `min(old, new)`
    Min,
    /// `max(old, new)`
    Max,
}

impl Wcr {
    /// Every kind.
    pub const ALL: [Wcr; 4] = [Wcr::Sum, Wcr::Prod, Wcr::Min, Wcr::Max];

    /// Name in the JSON format.
    pub fn name(self) -> &'static str {
        match self {
            Wcr::Sum => "sum",
            Wcr::Prod => "prod",
            Wcr::Min => "min",
            Wcr::Max => "max",
        }
    }

    /// Looks a kind up by name.
    pub fn from_name(s: &str) -> Option<Wcr> {
        Wcr::ALL.into_iter().find(|w| w.name() == s)
    }
}

impl fmt::Display for Wcr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What an edge moves: a subset of one data container.
///
/// On an edge between an access node and a tasklet, `subset` is the element read or
/// written. On a copy between two access nodes, `subset` is in `data` (the source's
/// container) and `other_subset` in the destination's (the same subset when absent). On
/// the edges of a map node, the memlet covers everything the whole map reads or writes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Memlet {
    /// The data container.
    pub data: String,
    /// The part of `data` moved.
    pub subset: Subset,
    /// For copies: the destination subset.
    pub other_subset: Option<Subset>,
    /// For writes: how to combine with the existing value.
    pub wcr: Option<Wcr>,
}

impl Memlet {
    /// A memlet with no `other_subset` and no write-conflict resolution.
    pub fn new(data: &str, subset: Subset) -> Memlet {
        Memlet {
            data: data.to_string(),
            subset,
            other_subset: None,
            wcr: None,
        }
    }

    /// With write-conflict resolution.
    pub fn with_wcr(mut self, wcr: Wcr) -> Memlet {
        self.wcr = Some(wcr);
        self
    }

    /// Number of elements moved.
    pub fn volume(&self) -> SymExpr {
        self.subset.volume()
    }
}

/// `data[subset]`, plus ` -> [other]` and ` (wcr: sum)` when present.
impl fmt::Display for Memlet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.subset.0.is_empty() {
            write!(f, "{}", self.data)?;
        } else {
            write!(f, "{}[{}]", self.data, self.subset)?;
        }
        if let Some(o) = &self.other_subset {
            write!(f, " -> [{o}]")?;
        }
        if let Some(w) = self.wcr {
            write!(f, " (wcr: {w})")?;
        }
        Ok(())
    }
}
