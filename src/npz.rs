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

/// Reads every array of an archive (f64, f32, i64, i32 and bool elements).
pub fn read_npz(path: &Path) -> Result<BTreeMap<String, HostArray>, NpzError> {
    let p = path.display().to_string();
    let file = File::open(path).map_err(|source| NpzError::Io {
        path: p.clone(),
        source,
    })?;
    let fmt = |e: &dyn std::fmt::Display| NpzError::Format {
        path: p.clone(),
        message: e.to_string(),
    };
    crate::npz_sizes::check(&file).map_err(|e| NpzError::Format {
        path: p.clone(),
        message: match e.member.as_str() {
            "" => e.message,
            m => format!("array '{m}': {}", e.message),
        },
    })?;
    let mut npz = NpzReader::new(file).map_err(|e| fmt(&e))?;
    let names = npz.names().map_err(|e| fmt(&e))?;
    let mut out = BTreeMap::new();
    for name in names {
        let a = read_one(&mut npz, &name).map_err(|e| NpzError::Format {
            path: p.clone(),
            message: format!(
                "array '{name}': {e} (supported element types: f64, f32, i64, i32, bool)"
            ),
        })?;
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
