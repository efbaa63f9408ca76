//! Reading a program file, whatever its format: sdflow JSON, or a DaCe `.sdfg` (JSON) or
//! `.sdfgz` (gzip), recognised by content. The command-line tool and the Python package
//! both load through here.

use std::path::Path;

use sdflow_ir::validate::Problem;
use sdflow_ir::{Sdfg, format};

/// Why a program could not be loaded; each names the file (or the origin given).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Neither a DaCe document nor UTF-8 text.
    #[error("{path}: not UTF-8 text")]
    NotText {
        /// The file.
        path: String,
    },
    /// Not a well-formed sdflow document.
    #[error("{path}: {source}")]
    Format {
        /// The file.
        path: String,
        /// The cause, with its JSON path.
        source: format::FormatError,
    },
    /// A DaCe document sdflow cannot import.
    #[error("{path}: {source}")]
    Import {
        /// The file.
        path: String,
        /// What and where.
        source: crate::dace::ImportError,
    },
    /// Well-formed but invalid.
    #[error("{path}: {} problem(s):\n{}", .problems.len(), crate::error::list(.problems))]
    Invalid {
        /// The file.
        path: String,
        /// Every problem found.
        problems: Vec<Problem>,
    },
}

/// Reads a program file without validating it.
pub fn read(path: &Path) -> Result<Sdfg, LoadError> {
    let bytes = std::fs::read(path).map_err(|source| LoadError::Io {
        path: path.display().to_string(),
        source,
    })?;
    read_bytes(&bytes, &path.display().to_string())
}

/// [`read`] on a file's contents; `origin` names the file in errors.
pub fn read_bytes(bytes: &[u8], origin: &str) -> Result<Sdfg, LoadError> {
    if crate::dace::is_dace(bytes) {
        return crate::dace::import_bytes(bytes).map_err(|source| LoadError::Import {
            path: origin.to_string(),
            source,
        });
    }
    let text = std::str::from_utf8(bytes).map_err(|_| LoadError::NotText {
        path: origin.to_string(),
    })?;
    format::from_json(text).map_err(|source| LoadError::Format {
        path: origin.to_string(),
        source,
    })
}

/// Reads a program file and validates it.
pub fn load(path: &Path) -> Result<Sdfg, LoadError> {
    let sdfg = read(path)?;
    sdfg.validate().map_err(|problems| LoadError::Invalid {
        path: path.display().to_string(),
        problems,
    })?;
    Ok(sdfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_that_are_neither_dace_nor_text_are_refused_by_name() {
        let e = read_bytes(&[0xff, 0xfe, 0x00], "x.bin").unwrap_err();
        assert!(matches!(e, LoadError::NotText { .. }));
        assert_eq!(e.to_string(), "x.bin: not UTF-8 text");
    }

    #[test]
    fn a_malformed_document_names_the_file_and_the_json_path() {
        let e = read_bytes(br#"{"name": "p", "arrays": 3}"#, "p.json").unwrap_err();
        let LoadError::Format { path, source } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(path, "p.json");
        assert!(e.to_string().starts_with("p.json: "), "{e}");
        assert!(!source.message.is_empty());
    }

    #[test]
    fn a_missing_file_is_an_io_error_naming_it() {
        let e = load(Path::new("/nonexistent/p.sdfg")).unwrap_err();
        assert!(matches!(e, LoadError::Io { .. }), "{e:?}");
        assert!(e.to_string().starts_with("/nonexistent/p.sdfg: "), "{e}");
    }
}
