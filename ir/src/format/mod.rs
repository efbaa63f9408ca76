//! The versioned JSON file format (`"sdflow_format": 1`), documented in `docs/format.md`.
//!
//! The document is made of serde types of its own (module `doc`), converted to and from
//! the IR. Expressions, subsets, memlets, ranges and tasklet statements are strings in the
//! text syntax of [`crate::parse`]; optional fields holding their defaults are left out on
//! save, so `from_json(&to_json(x)) == x` and hand-written files stay short.
//!
//! Reading never panics: malformed JSON, a wrong version, an unknown field, a bad type,
//! unparsable expression text or an edge to a missing node are all a [`FormatError`]
//! naming the JSON path of the offending element. Nesting deeper than `serde_json`'s
//! recursion limit (128) is an error, not a stack overflow.
//!
//! ```
//! use sdflow_ir::format::{from_json, to_json};
//! let text = r#"{ "sdflow_format": 1, "name": "empty", "body": { "seq": [] } }"#;
//! let sdfg = from_json(text).unwrap();
//! assert_eq!(sdfg.name, "empty");
//! assert_eq!(from_json(&to_json(&sdfg)).unwrap(), sdfg);
//! ```

mod convert;
mod doc;

use std::fmt;

use crate::sdfg::Sdfg;
use crate::validate::Problem;

/// The format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// Why a file could not be read as an SDFG: the JSON path of the offending element (empty
/// for the whole document) and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormatError {
    /// Where: `states[0].nodes[3].tasklet.code[1]`, or empty for the document itself.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "at {}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for FormatError {}

/// Why [`load`] failed: the file is not a well-formed SDFG document, or it is one but the
/// program it describes does not validate.
#[derive(Clone, Debug, PartialEq)]
pub enum LoadError {
    /// The document could not be read.
    Format(FormatError),
    /// The program is invalid; every problem validation found.
    Invalid(Vec<Problem>),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Format(e) => write!(f, "{e}"),
            LoadError::Invalid(ps) => {
                write!(f, "invalid SDFG ({} problems)", ps.len())?;
                for p in ps {
                    write!(f, "\n  {p}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for LoadError {}

impl From<FormatError> for LoadError {
    fn from(e: FormatError) -> Self {
        LoadError::Format(e)
    }
}

/// Writes the program as a pretty-printed, deterministic JSON document: maps in name
/// order, nodes and edges in index order (holes left by removals compacted).
pub fn to_json(sdfg: &Sdfg) -> String {
    let mut d = convert::sdfg_to_doc(sdfg);
    d.sdflow_format = Some(serde_json::Value::from(FORMAT_VERSION));
    let mut out = serde_json::to_string_pretty(&d)
        .unwrap_or_else(|e| unreachable!("document types always serialize: {e}"));
    out.push('\n');
    out
}

/// Reads a JSON document: syntax, version, structure and the text of every expression.
/// Does not validate the program (see [`load`]).
pub fn from_json(text: &str) -> Result<Sdfg, FormatError> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| FormatError {
        path: String::new(),
        message: format!("malformed JSON: {e}"),
    })?;
    check_version(&value)?;
    drop(value);
    // Second pass from the text itself: keeps the order of keys (assignments) and gives
    // line and column numbers.
    let mut de = serde_json::Deserializer::from_str(text);
    let d: doc::SdfgDoc = serde_path_to_error::deserialize(&mut de).map_err(|e| FormatError {
        path: path_string(e.path()),
        message: e.inner().to_string(),
    })?;
    convert::sdfg_from_doc(&d, &convert::Path::root(), true)
}

/// Reads a JSON document ([`from_json`]) and validates the program.
pub fn load(text: &str) -> Result<Sdfg, LoadError> {
    let sdfg = from_json(text)?;
    sdfg.validate().map_err(LoadError::Invalid)?;
    Ok(sdfg)
}

fn path_string(p: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for seg in p {
        match seg {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } => push_key(&mut out, key),
            Segment::Enum { variant } => push_key(&mut out, variant),
            Segment::Unknown => push_key(&mut out, "?"),
        }
    }
    out
}

/// Appends one object key to a JSON path: `.name`, or `["…"]` (JSON-quoted) when the key
/// is not a plain identifier, so that a path reads one way whatever the keys hold
/// (`arrays["u.v"].shape`, not `arrays.u.v.shape`).
pub(crate) fn push_key(path: &mut String, key: &str) {
    let plain = key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        || key == "?";
    if !plain {
        path.push_str(&format!("[{}]", serde_json::Value::String(key.to_string())));
    } else if path.is_empty() {
        path.push_str(key);
    } else {
        path.push('.');
        path.push_str(key);
    }
}

fn check_version(v: &serde_json::Value) -> Result<(), FormatError> {
    let err = |message: String| FormatError {
        path: "sdflow_format".into(),
        message,
    };
    let obj = v.as_object().ok_or_else(|| FormatError {
        path: String::new(),
        message: "an SDFG document is a JSON object".into(),
    })?;
    match obj.get("sdflow_format") {
        None => Err(err(format!(
            "missing sdflow_format (this build reads {FORMAT_VERSION})"
        ))),
        Some(f) if f.as_u64() == Some(FORMAT_VERSION as u64) => Ok(()),
        Some(f) => Err(err(format!(
            "unsupported sdflow_format {f} (this build reads {FORMAT_VERSION})"
        ))),
    }
}

impl Sdfg {
    /// The program as a JSON document ([`to_json`]).
    pub fn to_json(&self) -> String {
        to_json(self)
    }

    /// Reads a JSON document without validating it ([`from_json`]).
    pub fn from_json(text: &str) -> Result<Sdfg, FormatError> {
        from_json(text)
    }
}
