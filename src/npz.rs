//! Reading and writing host arrays as NumPy `.npz` archives (through `ndarray-npy`), so
//! results can be compared with NumPy, DaCe or GT4Py.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use ndarray::{ArrayD, IxDyn, OwnedRepr};
use ndarray_npy::{NpzReader, NpzWriter, ReadNpzError};
use sdflow_ir::interp::HostArray;

/// Why an archive could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum NpzError {
    /// The file could not be opened or created.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The archive or one of its arrays is malformed or of an unsupported type.
    #[error("{path}: {message}")]
    Format {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// The supported element types, as errors list them.
const SUPPORTED: &str = "f64, f32, i64, i32, bool";

fn read_one(npz: &mut NpzReader<File>, name: &str) -> Result<HostArray, ReadNpzError> {
    macro_rules! try_type {
        ($t:ty, $v:ident) => {
            match npz.by_name::<OwnedRepr<$t>, IxDyn>(name) {
                Ok(a) => return Ok(HostArray::$v(a)),
                Err(ReadNpzError::Npy(ndarray_npy::ReadNpyError::WrongDescriptor(_))) => {}
                Err(e) => return Err(e),
            }
        };
    }
    try_type!(f64, F64);
    try_type!(f32, F32);
    try_type!(i64, I64);
    try_type!(i32, I32);
    try_type!(bool, Bool);
    // Report the real descriptor through one last typed read.
    npz.by_name::<OwnedRepr<f64>, IxDyn>(name)
        .map(HostArray::F64)
}

/// NumPy's name of the element type an `.npy` descriptor (`'<c16'`, `'|O'`) describes,
/// for errors; `None` when it is not a plain descriptor sdflow recognises.
fn numpy_type(descr: &py_literal::Value) -> Option<String> {
    let py_literal::Value::String(s) = descr else {
        return Some("structured".into());
    };
    let body = s.trim_start_matches(['<', '>', '|', '=']);
    let kind = body.chars().next()?;
    let digits: String = body[kind.len_utf8()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let size: u32 = digits.parse().unwrap_or(0);
    let bits = size.saturating_mul(8);
    Some(match kind {
        'c' => format!("complex{bits}"),
        'f' => format!("float{bits}"),
        'i' => format!("int{bits}"),
        'u' => format!("uint{bits}"),
        'b' => "bool".into(),
        'U' => "str".into(),
        'S' | 'a' => "bytes".into(),
        'O' => "object".into(),
        'M' => "datetime64".into(),
        'm' => "timedelta64".into(),
        'V' => "void".into(),
        _ => return None,
    })
}

/// The error of a member that could not be read: its name, and for an element type
/// sdflow does not read, that type and its descriptor.
fn member_error(path: &str, name: &str, e: &ReadNpzError) -> NpzError {
    use ndarray_npy::ReadNpyError;
    let message = match e {
        ReadNpzError::Npy(ReadNpyError::WrongDescriptor(d)) => match numpy_type(d) {
            Some(t) => format!(
                "array '{name}' has elements of type {t} (descriptor {d}), which sdflow does not read (supported element types: {SUPPORTED})"
            ),
            None => format!(
                "array '{name}' has elements of descriptor {d}, which sdflow does not read (supported element types: {SUPPORTED})"
            ),
        },
        other => format!("array '{name}': {other}"),
    };
    NpzError::Format {
        path: path.to_string(),
        message,
    }
}

/// An archive opened for reading: its member names are known, each array is read (and
/// its size checked) only when asked for, so that a member of an unsupported type does
/// not stand in the way of the others.
pub struct Archive {
    path: String,
    file: File,
    npz: NpzReader<File>,
    names: Vec<String>,
}

impl Archive {
    /// Opens `path` and lists its members (without `.npy`).
    pub fn open(path: &Path) -> Result<Archive, NpzError> {
        let p = path.display().to_string();
        let file = File::open(path).map_err(|source| NpzError::Io {
            path: p.clone(),
            source,
        })?;
        let fmt = |e: &dyn std::fmt::Display| NpzError::Format {
            path: p.clone(),
            message: e.to_string(),
        };
        let reader = file.try_clone().map_err(|e| fmt(&e))?;
        let mut npz = NpzReader::new(reader).map_err(|e| fmt(&e))?;
        let names = npz.names().map_err(|e| fmt(&e))?;
        Ok(Archive {
            path: p,
            file,
            npz,
            names,
        })
    }

    /// The members' names, in archive order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Whether the archive has a member `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.names.iter().any(|n| n == name)
    }

    /// Reads member `name` (f64, f32, i64, i32 or bool elements), after checking that
    /// the size its header declares fits the bytes it holds.
    pub fn read(&mut self, name: &str) -> Result<HostArray, NpzError> {
        use std::io::Seek;
        let p = self.path.clone();
        let mut f = &self.file;
        f.rewind().map_err(|source| NpzError::Io {
            path: p.clone(),
            source,
        })?;
        crate::npz_sizes::check(f, Some(name)).map_err(|e| NpzError::Format {
            path: p.clone(),
            message: match e.member.as_str() {
                "" => e.message,
                m => format!("array '{m}': {}", e.message),
            },
        })?;
        read_one(&mut self.npz, name).map_err(|e| member_error(&p, name, &e))
    }
}

/// Reads every array of an archive (f64, f32, i64, i32 and bool elements).
pub fn read_npz(path: &Path) -> Result<BTreeMap<String, HostArray>, NpzError> {
    let mut archive = Archive::open(path)?;
    let mut out = BTreeMap::new();
    for name in archive.names().to_vec() {
        let a = archive.read(&name)?;
        out.insert(name, a);
    }
    Ok(out)
}

/// Writes arrays to an (uncompressed) archive, in name order.
pub fn write_npz(path: &Path, arrays: &BTreeMap<String, HostArray>) -> Result<(), NpzError> {
    let p = path.display().to_string();
    let file = File::create(path).map_err(|source| NpzError::Io {
        path: p.clone(),
        source,
    })?;
    let mut npz = NpzWriter::new(BufWriter::new(file));
    let fmt = |e: &dyn std::fmt::Display| NpzError::Format {
        path: p.clone(),
        message: e.to_string(),
    };
    for (name, a) in arrays {
        let r = match a {
            HostArray::Bool(x) => npz.add_array(name.as_str(), x),
            HostArray::I32(x) => npz.add_array(name.as_str(), x),
            HostArray::I64(x) => npz.add_array(name.as_str(), x),
            HostArray::F32(x) => npz.add_array(name.as_str(), x),
            HostArray::F64(x) => npz.add_array(name.as_str(), x),
        };
        r.map_err(|e| fmt(&e))?;
    }
    npz.finish().map_err(|e| fmt(&e))?;
    Ok(())
}

/// Sum and L2 norm of the elements (as `f64`; booleans count as 0/1).
pub fn checksum(a: &HostArray) -> (f64, f64) {
    fn go<T: Copy>(a: &ArrayD<T>, f: impl Fn(T) -> f64) -> (f64, f64) {
        a.iter().fold((0.0, 0.0), |(s, q), &x| {
            let v = f(x);
            (s + v, q + v * v)
        })
    }
    let (s, q) = match a {
        HostArray::Bool(x) => go(x, |v| v as u8 as f64),
        HostArray::I32(x) => go(x, |v| v as f64),
        HostArray::I64(x) => go(x, |v| v as f64),
        HostArray::F32(x) => go(x, |v| v as f64),
        HostArray::F64(x) => go(x, |v| v),
    };
    (s, q.sqrt())
}
