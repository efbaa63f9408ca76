//! `.npz` mutations inside valid zip containers: each `.npy` member's header (shape,
//! `descr`, `fortran_order`, version, header length) and data, member names (other
//! arrays', symbols', none), members deleted, repeated or added as 0-d symbol values;
//! the archive is written again, stored or deflated. Raw byte mutations of the archive
//! are left to the caller.

use std::io::{Cursor, Read, Write};

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

/// The members of an archive: name and `.npy` bytes.
pub type Members = Vec<(String, Vec<u8>)>;

/// Reads an archive's members; `None` when the zip container itself is unreadable.
pub fn members(bytes: &[u8]) -> Option<Members> {
    let mut z = zip::ZipArchive::new(Cursor::new(bytes)).ok()?;
    let mut out = Vec::new();
    for i in 0..z.len() {
        let mut f = z.by_index(i).ok()?;
        let mut data = Vec::new();
        f.read_to_end(&mut data).ok()?;
        out.push((f.name().to_string(), data));
    }
    Some(out)
}

/// Writes members into a new archive (deflated when `deflate`).
pub fn archive(members: &Members, deflate: bool) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let method = if deflate {
        zip::CompressionMethod::Deflated
    } else {
        zip::CompressionMethod::Stored
    };
    // A compression level with `Stored` makes the writer refuse every member (the
    // archive came out empty): only deflated members get one.
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(method)
        .compression_level(deflate.then_some(1));
    for (name, data) in members {
        // A name the writer refuses (a repeated one) is left out.
        if w.start_file(name.as_str(), opts).is_ok() {
            let _ = w.write_all(data);
        }
    }
    w.finish().map(|c| c.into_inner()).unwrap_or_default()
}

/// A version 1.0 `.npy` file with this header dictionary text and data.
pub fn npy(dict: &str, data: &[u8]) -> Vec<u8> {
    let mut header = dict.to_string();
    let unpadded = 10 + header.len() + 1;
    header.extend(std::iter::repeat_n(' ', (64 - unpadded % 64) % 64));
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

/// The header dictionary text and the data of a `.npy` file.
fn split(npy: &[u8]) -> Option<(String, Vec<u8>)> {
    if npy.len() < 10 || !npy.starts_with(b"\x93NUMPY") {
        return None;
    }
    let (len, start) = match npy[6] {
        1 => (u16::from_le_bytes([npy[8], npy[9]]) as usize, 10usize),
        _ if npy.len() >= 12 => (
            u32::from_le_bytes([npy[8], npy[9], npy[10], npy[11]]) as usize,
            12,
        ),
        _ => return None,
    };
    let end = start.checked_add(len)?;
    let dict = std::str::from_utf8(npy.get(start..end)?).ok()?;
    Some((dict.trim_end().to_string(), npy[end..].to_vec()))
}

const DESCRS: [&str; 16] = [
    "<f8", "<f4", "<i8", "<i4", "|b1", ">f8", ">i4", "<u1", "<u8", "<c16", "<U4", "|O", "<f2",
    "<i2", "|V8", "xyz",
];

const EXTENTS: [&str; 14] = [
    "0",
    "1",
    "2",
    "3",
    "-1",
    "255",
    "65536",
    "4294967296",
    "9223372036854775807",
    "18446744073709551615",
    "99999999999999999999",
    "2**62",
    "1.5",
    "None",
];

fn shape_text(rng: &mut ChaCha8Rng, old: &str) -> String {
    let mut dims: Vec<String> = old
        .trim_matches(|c| c == '(' || c == ')')
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    match rng.random_range(0..5) {
        0 => dims.clear(),
        1 => dims.push(EXTENTS[rng.random_range(0..EXTENTS.len())].into()),
        2 if !dims.is_empty() => {
            dims.pop();
        }
        3 => {
            let r = rng.random_range(0..40);
            dims = (0..r)
                .map(|_| EXTENTS[rng.random_range(0..4)].to_string())
                .collect();
        }
        _ => {
            if dims.is_empty() {
                dims.push("1".into());
            }
            let i = rng.random_range(0..dims.len());
            dims[i] = EXTENTS[rng.random_range(0..EXTENTS.len())].into();
        }
    }
    match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    }
}

/// A mutated `.npy` member: header fields, header text, version, length field or data.
fn mutate_npy(rng: &mut ChaCha8Rng, npy_bytes: &mut Vec<u8>) {
    let Some((dict, mut data)) = split(npy_bytes) else {
        super::bytes::mutate(rng, npy_bytes, &[], &[], 1 << 20);
        return;
    };
    let mut dict = dict;
    match rng.random_range(0..8) {
        0 | 1 => {
            if let (Some(a), Some(b)) = (dict.find("'shape': ("), dict.rfind(')')) {
                let a = a + "'shape': ".len();
                if a < b {
                    let s = shape_text(rng, &dict[a..=b]);
                    dict.replace_range(a..=b, &s);
                }
            }
        }
        2 => {
            if let Some(a) = dict.find("'descr': '") {
                let a = a + "'descr': '".len();
                if let Some(l) = dict[a..].find('\'') {
                    let d = DESCRS[rng.random_range(0..DESCRS.len())];
                    dict.replace_range(a..a + l, d);
                }
            }
        }
        3 => {
            let f = ["True", "False", "1", "'x'", "None"][rng.random_range(0..5)];
            dict = dict.replace("False", f).replace("True", f);
        }
        4 => {
            let donor = "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }";
            dict = super::text::mutate(rng, &dict, donor);
        }
        5 => {
            // Data of another length.
            if data.is_empty() || rng.random_bool(0.5) {
                data.extend(std::iter::repeat_n(0u8, rng.random_range(1..=64)));
            } else {
                let k = rng.random_range(0..data.len());
                data.truncate(k);
            }
        }
        6 => {
            // Raw edits of the whole member (version, header length, magic).
            super::bytes::mutate(rng, npy_bytes, &[], &[], 1 << 20);
            return;
        }
        _ => {
            super::bytes::mutate(rng, &mut data, &[], &[], 1 << 20);
        }
    }
    *npy_bytes = npy(&dict, &data);
}

/// Applies one to three member-level or header-level mutations. `names` are names worth
/// giving members: the program's containers and symbols.
pub fn mutate(rng: &mut ChaCha8Rng, members: &mut Members, names: &[String]) {
    let n = rng.random_range(1..=3);
    for _ in 0..n {
        let len = members.len();
        match rng.random_range(0..10) {
            0..=4 if len > 0 => {
                let i = rng.random_range(0..len);
                mutate_npy(rng, &mut members[i].1);
            }
            5 if len > 0 => {
                let i = rng.random_range(0..len);
                let new = match rng.random_range(0..5) {
                    0 if !names.is_empty() => {
                        format!("{}.npy", names[rng.random_range(0..names.len())])
                    }
                    1 => members[rng.random_range(0..len)].0.clone(),
                    2 => "x".into(),
                    3 => ".npy".into(),
                    _ => members[i].0.trim_end_matches(".npy").to_string(),
                };
                members[i].0 = new;
            }
            6 if len > 0 => {
                members.remove(rng.random_range(0..len));
            }
            7 if len > 0 => {
                let i = rng.random_range(0..len);
                let m = members[i].clone();
                members.push(m);
            }
            _ => {
                // A 0-d member, named like a symbol or container, of some type and value.
                let name = if names.is_empty() {
                    "N".to_string()
                } else {
                    names[rng.random_range(0..names.len())].clone()
                };
                let (descr, data): (&str, Vec<u8>) = match rng.random_range(0..5) {
                    0 => ("<i8", rng.random::<i64>().to_le_bytes().to_vec()),
                    1 => ("<i8", (rng.random_range(-3i64..100)).to_le_bytes().to_vec()),
                    2 => ("<i4", rng.random::<i32>().to_le_bytes().to_vec()),
                    3 => (
                        "<f8",
                        [f64::NAN, 1e300, -0.0, 2.5][rng.random_range(0..4)]
                            .to_le_bytes()
                            .to_vec(),
                    ),
                    _ => ("|b1", vec![rng.random_range(0..3u8)]),
                };
                let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': (), }}");
                members.push((format!("{name}.npy"), npy(&dict, &data)));
            }
        }
    }
}
