//! One input per loader from the corpus: a seed, mutated structure-aware (JSON trees,
//! `.npz` members and headers, expression text) and/or byte by byte.

use std::io::Write;

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use super::corpus::{Corpus, Seed};
use super::targets::{Input, Loader, TEXT_ENTRIES};

const JSON_TOKENS: [&[u8]; 12] = [
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b",",
    b":",
    b"null",
    b"-1",
    b"1e999",
    b"\"type\": \"SDFG\"",
    b"\\u0000",
];

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let _ = e.write_all(bytes);
    e.finish().unwrap_or_default()
}

fn program_bytes(rng: &mut ChaCha8Rng, seeds: &[Seed], corpus: &Corpus) -> Vec<u8> {
    let seed = &seeds[rng.random_range(0..seeds.len())];
    let donor = &seeds[rng.random_range(0..seeds.len())];
    let structured = seed.json.is_some() && rng.random_bool(0.8);
    let mut bytes = match (&seed.json, structured) {
        (Some(doc), true) => {
            let mut d = doc.clone();
            super::json::mutate(rng, &mut d, &corpus.pool);
            super::json::write(&d).into_bytes()
        }
        _ => {
            let mut b = if seed.gzip && rng.random_bool(0.7) {
                seed.json
                    .as_ref()
                    .map(|d| d.to_string().into_bytes())
                    .unwrap_or_else(|| seed.bytes.clone())
            } else {
                seed.bytes.clone()
            };
            super::bytes::mutate(rng, &mut b, &JSON_TOKENS, &donor.bytes, 1 << 24);
            b
        }
    };
    if structured && rng.random_bool(0.15) {
        super::bytes::mutate(rng, &mut bytes, &JSON_TOKENS, &donor.bytes, 1 << 24);
    }
    if seed.gzip && !bytes.starts_with(&[0x1f, 0x8b]) && rng.random_bool(0.5) {
        bytes = gzip(&bytes);
        if rng.random_bool(0.2) {
            super::bytes::mutate(rng, &mut bytes, &[], &[], 1 << 24);
        }
    }
    bytes
}

/// A new input for `loader`.
pub fn input(rng: &mut ChaCha8Rng, loader: Loader, corpus: &Corpus) -> Input {
    match loader {
        Loader::Json => Input {
            loader,
            program: None,
            bytes: program_bytes(rng, &corpus.json, corpus),
        },
        Loader::Dace => Input {
            loader,
            program: None,
            bytes: program_bytes(rng, &corpus.dace, corpus),
        },
        Loader::Npz => {
            let seed = &corpus.npz[rng.random_range(0..corpus.npz.len())];
            let names = corpus
                .names
                .get(&seed.program)
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            let mut bytes = if rng.random_bool(0.85) {
                let mut m = seed.members.clone();
                super::npz::mutate(rng, &mut m, names);
                super::npz::archive(&m, rng.random_bool(0.5))
            } else {
                seed.bytes.clone()
            };
            if rng.random_bool(0.15) {
                super::bytes::mutate(rng, &mut bytes, &[], &[], 1 << 24);
            }
            Input {
                loader,
                program: Some(seed.program.clone()),
                bytes,
            }
        }
        Loader::Plot | Loader::Run | Loader::Bench => super::tools::input(rng, loader, corpus),
        Loader::Text => {
            let entry = TEXT_ENTRIES[rng.random_range(0..TEXT_ENTRIES.len())];
            let t = &corpus.texts[rng.random_range(0..corpus.texts.len())];
            let donor = &corpus.texts[rng.random_range(0..corpus.texts.len())];
            let t = if rng.random_bool(0.9) {
                super::text::mutate(rng, t, donor)
            } else {
                t.clone()
            };
            Input {
                loader,
                program: None,
                bytes: format!("{entry}\n{t}").into_bytes(),
            }
        }
    }
}
