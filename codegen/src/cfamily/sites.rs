//! Where generated code can fail, and what it then says. Every check the emitter writes
//! (a subscript against its extent, a map range's step, a symbolic operation that may
//! overflow or divide by zero) gets a numbered [`Site`]; on failure the generated code
//! records the site, up to two values and the enclosing map parameters
//! (`sdflow_error`), and [`Sites::message`] turns that record into the interpreter's
//! message for the same failure, location included.

use sdflow_ir::SymExpr;

/// How many enclosing map parameters an error record keeps (`SDF_MAXP` in C).
pub const MAX_PARAMS: usize = 16;

/// The length of an error record: `[failed, site, v0, v1, params…]`.
pub const RECORD_LEN: usize = 4 + MAX_PARAMS;

/// One step of a location path, as the interpreter writes it (`sdfg 'p'`, `state 's'`,
/// `map 'm' at i=1`, `tasklet 't'`).
#[derive(Clone, Debug, PartialEq)]
pub enum LocPart {
    /// Fixed text.
    Text(String),
    /// A map iteration: its label and parameters, whose values the record holds from
    /// position `depth` on.
    Map {
        /// The map's label.
        label: String,
        /// Its parameters.
        params: Vec<String>,
        /// Where the first parameter's value is in the record's parameter list.
        depth: usize,
    },
    /// An iteration of a map whose loops record no parameters as they run (an
    /// unchecked loop nest): a site that passes the parameters with its failure
    /// ([`Site::points`]) writes them from position `depth` on; any other site names the
    /// map alone.
    Point {
        /// The map's label.
        label: String,
        /// Its parameters.
        params: Vec<String>,
        /// Where the first parameter's value is in the record's parameter list.
        depth: usize,
    },
}

/// What failed at a site.
#[derive(Clone, Debug, PartialEq)]
pub enum SiteKind {
    /// An index outside dimension `dim` of `data` (values: index, extent).
    Index {
        /// The container.
        data: String,
        /// The dimension.
        dim: usize,
    },
    /// A range whose step is not positive (value: the step).
    Step {
        /// The range as text.
        range: String,
    },
    /// A symbolic operation that overflowed.
    Overflow {
        /// The failing subexpression.
        expr: String,
    },
    /// A symbolic floor division or modulo by zero.
    DivZero {
        /// The failing subexpression.
        expr: String,
    },
    /// An index-table value whose offset overflows (values: value, offset).
    TableOffset {
        /// The table.
        table: String,
    },
    /// A halo exchange's message from the neighbour in `direction` (values: the bytes
    /// received and the bytes expected; or -1 and the MPI error code).
    Exchange {
        /// The fields exchanged.
        fields: Vec<String>,
        /// Where the neighbour is, along the first two dimensions (-1, 0 or 1 each);
        /// `None`: an unstructured exchange, the neighbour's rank the first parameter.
        direction: Option<[i64; 2]>,
    },
    /// An unstructured exchange's lists: a cell whose owner is not a rank (values: the
    /// cell, its global index; parameters: the owner, this rank).
    ExchangeOwner {
        /// How many ranks there are.
        ranks: i64,
    },
    /// An unstructured exchange's lists: a halo cell its stated owner does not own
    /// (values: the cell, its global index; parameters: the rank holding it, the owner).
    ExchangeNotOwned,
    /// A field of an unstructured exchange whose first extent is not the lists' length
    /// (values: its extent, the lists' length; parameters: -, this rank).
    ExchangeExtent {
        /// The field.
        field: String,
        /// The list of global indices.
        global: String,
    },
    /// An MPI call (or an allocation) for an exchange failed (value: the MPI error code,
    /// 0 for memory).
    ExchangeCall {
        /// What was called.
        call: String,
    },
    /// Integer division or modulo by zero in a tasklet statement (values: the operands).
    TaskletDivZero {
        /// The operator (`/`, `//`, `%`).
        op: String,
        /// The statement, as text.
        stmt: String,
    },
}

/// One place generated code checks something.
#[derive(Clone, Debug, PartialEq)]
pub struct Site {
    /// Where, outermost first.
    pub loc: Vec<LocPart>,
    /// What.
    pub kind: SiteKind,
    /// The failure passes the parameters of its [`LocPart::Point`] maps.
    pub points: bool,
}

/// The checks of one generated program: the sites, and the conditions `bind` evaluates
/// (one per state-level node whose condition only needs the program's symbols; a node
/// runs unchecked when its condition holds).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sites {
    /// Every site, numbered by position.
    pub sites: Vec<Site>,
    /// Bind-time conditions, passed to `run` after the symbol values (1 holds, 0 not).
    pub bind_checks: Vec<SymExpr>,
}

impl Sites {
    /// Adds a site and returns its number.
    pub fn add(&mut self, loc: &[LocPart], kind: SiteKind) -> usize {
        self.add_with(loc, kind, false)
    }

    /// Adds a site whose failure passes the parameters of its unchecked maps
    /// ([`LocPart::Point`]) when `points`, and returns its number.
    pub fn add_with(&mut self, loc: &[LocPart], kind: SiteKind, points: bool) -> usize {
        self.sites.push(Site {
            loc: loc.to_vec(),
            kind,
            points,
        });
        self.sites.len() - 1
    }

    /// The interpreter's message for an error record (`location: what`).
    pub fn message(&self, rec: &[i64; RECORD_LEN]) -> String {
        let Some(site) = usize::try_from(rec[1]).ok().and_then(|s| self.sites.get(s)) else {
            return format!("run-time error at unknown site {}", rec[1]);
        };
        let (v0, v1) = (rec[2], rec[3]);
        let what = match &site.kind {
            SiteKind::Index { data, dim } => {
                format!("index {v0} out of bounds for dimension {dim} of '{data}' (extent {v1})")
            }
            SiteKind::Step { range } => format!("range {range} has step {v0}; it must be positive"),
            SiteKind::Overflow { expr } => format!("integer overflow in '{expr}'"),
            SiteKind::DivZero { expr } => format!("division by zero in '{expr}'"),
            SiteKind::TableOffset { table } => {
                format!("index-table value {v0} of '{table}' plus offset {v1} overflows")
            }
            SiteKind::Exchange { fields, direction } => {
                let f: Vec<String> = fields.iter().map(|f| format!("'{f}'")).collect();
                let from = match direction {
                    Some(d) => format!("the neighbour at ({}, {})", d[0], d[1]),
                    None => format!("rank {}", rec[4]),
                };
                if v0 < 0 {
                    format!(
                        "the message of {} from {from} failed: MPI error {v1}",
                        f.join(", ")
                    )
                } else {
                    format!(
                        "the message of {} from {from} has {v0} bytes, {v1} expected: the ranks' parts of the fields do not fit together",
                        f.join(", ")
                    )
                }
            }
            SiteKind::ExchangeOwner { ranks } => format!(
                "cell {v0} (global {v1}) of rank {} is owned by rank {}, which is not one of the {ranks}",
                rec[5], rec[4]
            ),
            SiteKind::ExchangeNotOwned => format!(
                "cell {v0} (global {v1}) of rank {} is not among the cells rank {} owns",
                rec[4], rec[5]
            ),
            SiteKind::ExchangeExtent { field, global } => format!(
                "'{field}' has {v0} cells in its first dimension on rank {}, '{global}' lists {v1}",
                rec[5]
            ),
            SiteKind::ExchangeCall { call } => {
                if v0 == 0 {
                    format!("{call}: out of memory")
                } else {
                    format!("{call} failed: MPI error {v0}")
                }
            }
            SiteKind::TaskletDivZero { op, stmt } => {
                format!("integer division by zero ({v0} {op} {v1}) (in '{stmt}')")
            }
        };
        let loc: Vec<String> = site
            .loc
            .iter()
            .map(|p| match p {
                LocPart::Text(t) => t.clone(),
                LocPart::Point { label, .. } if !site.points => format!("map '{label}'"),
                LocPart::Map {
                    label,
                    params,
                    depth,
                }
                | LocPart::Point {
                    label,
                    params,
                    depth,
                } => {
                    let at: Vec<String> = params
                        .iter()
                        .enumerate()
                        .map(|(k, p)| match rec.get(4 + depth + k) {
                            Some(v) if depth + k < MAX_PARAMS => format!("{p}={v}"),
                            _ => format!("{p}=?"),
                        })
                        .collect();
                    format!("map '{label}' at {}", at.join(", "))
                }
            })
            .collect();
        if loc.is_empty() {
            what
        } else {
            format!("{}: {what}", loc.join(" / "))
        }
    }
}
