//! The sizes an `.npz` archive's arrays claim, checked against the bytes it holds before
//! anything is allocated: an `.npy` header may declare any shape, and the reader would
//! reserve memory for it first (a shape of 10¹² elements aborts the process instead of
//! failing).

use std::io::{Read, Seek};

use ndarray_npy::npy::header::Header;
use py_literal::Value as PyValue;

/// Why an archive member cannot be read: its name (without `.npy`) and what is wrong.
pub(crate) struct SizeError {
    pub member: String,
    pub message: String,
}

/// Bytes of one element of an `.npy` type descriptor (`<f8` → 8); 1 when the
/// descriptor is not a plain one (the reader refuses those).
fn item_size(descr: &PyValue) -> u64 {
    match descr {
        PyValue::String(s) => {
            let digits: String = s.chars().skip_while(|c| !c.is_ascii_digit()).collect();
            digits.parse::<u64>().unwrap_or(1).max(1)
        }
        _ => 1,
    }
}

/// Checks that every member's header length and declared shape fit in the member's
/// bytes (counted by reading it through, without keeping it); with `only`, just the
/// members of that name (with or without `.npy`).
pub(crate) fn check<R: Read + Seek>(archive: R, only: Option<&str>) -> Result<(), SizeError> {
    let mut zip = zip::ZipArchive::new(archive).map_err(|e| SizeError {
        member: String::new(),
        message: e.to_string(),
    })?;
    for i in 0..zip.len() {
        let mut f = zip.by_index(i).map_err(|e| SizeError {
            member: String::new(),
            message: e.to_string(),
        })?;
        let member = f
            .name()
            .strip_suffix(".npy")
            .unwrap_or(f.name())
            .to_string();
        if only.is_some_and(|o| o != member) {
            continue;
        }
        let fail = |message: String| SizeError {
            member: member.clone(),
            message,
        };
        // Magic (6 bytes), version (2), header length (2 in version 1, else 4).
        let mut prefix = vec![0u8; 8];
        if f.read_exact(&mut prefix).is_err() {
            continue; // too short to be an array: the reader says what is wrong
        }
        let len_bytes = if prefix[6] == 1 { 2 } else { 4 };
        let mut len = vec![0u8; len_bytes];
        if f.read_exact(&mut len).is_err() {
            continue;
        }
        let header_len = len.iter().rev().fold(0u64, |a, &b| (a << 8) | u64::from(b));
        prefix.extend_from_slice(&len);
        let mut header = Vec::new();
        let read = (&mut f)
            .take(header_len)
            .read_to_end(&mut header)
            .map_err(|e| fail(e.to_string()))?;
        if (read as u64) < header_len {
            return Err(fail(format!(
                "the header length is {header_len} bytes but only {read} follow"
            )));
        }
        prefix.extend_from_slice(&header);
        let Ok(h) = Header::from_reader(&mut &prefix[..]) else {
            continue; // a malformed header: the reader says what is wrong
        };
        let data = std::io::copy(&mut f, &mut std::io::sink()).map_err(|e| fail(e.to_string()))?;
        let need = h
            .shape
            .iter()
            .try_fold(item_size(&h.type_descriptor), |a, &d| {
                a.checked_mul(d as u64)
            });
        let shape = format!("{:?}", h.shape);
        match need {
            Some(n) if n <= data => {}
            Some(n) => {
                return Err(fail(format!(
                    "shape {shape} needs {n} bytes of data but the array holds {data}"
                )));
            }
            None => return Err(fail(format!("shape {shape} has too many elements"))),
        }
    }
    Ok(())
}
