//! Raw byte mutations: bit flips, interesting bytes, deleted, duplicated and inserted
//! ranges, dictionary tokens, truncation and splices from another input.

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

const INTERESTING: [u8; 16] = [
    0, 0xff, 0x7f, 0x80, b'"', b'{', b'}', b'[', b']', b',', b':', b'0', b'9', b'-', b'\\', b'\n',
];

/// Applies one to four random byte-level edits to `data`, never growing it past `max_len`.
/// `dict` holds tokens worth inserting whole; `donor` is another input to splice from.
pub fn mutate(
    rng: &mut ChaCha8Rng,
    data: &mut Vec<u8>,
    dict: &[&[u8]],
    donor: &[u8],
    max_len: usize,
) {
    let n = rng.random_range(1..=4);
    for _ in 0..n {
        one(rng, data, dict, donor, max_len);
    }
}

fn pos(rng: &mut ChaCha8Rng, len: usize) -> usize {
    if len == 0 {
        0
    } else {
        rng.random_range(0..=len)
    }
}

fn one(rng: &mut ChaCha8Rng, data: &mut Vec<u8>, dict: &[&[u8]], donor: &[u8], max_len: usize) {
    let len = data.len();
    match rng.random_range(0..9) {
        0 if len > 0 => {
            let i = rng.random_range(0..len);
            data[i] ^= 1 << rng.random_range(0..8);
        }
        1 if len > 0 => {
            let i = rng.random_range(0..len);
            data[i] = INTERESTING[rng.random_range(0..INTERESTING.len())];
        }
        2 if len > 0 => {
            let a = rng.random_range(0..len);
            let b = (a + rng.random_range(1..=64.min(len - a).max(1))).min(len);
            data.drain(a..b);
        }
        3 if len > 0 && len < max_len => {
            let a = rng.random_range(0..len);
            let b = (a + rng.random_range(1..=256)).min(len);
            let chunk = data[a..b].to_vec();
            let at = pos(rng, len);
            data.splice(at..at, chunk);
        }
        4 if !dict.is_empty() => {
            let t = dict[rng.random_range(0..dict.len())];
            let at = pos(rng, len);
            data.splice(at..at, t.iter().copied());
        }
        5 if len > 0 => {
            let at = rng.random_range(0..len);
            data.truncate(at);
        }
        6 if !donor.is_empty() => {
            let a = rng.random_range(0..donor.len());
            let b = (a + rng.random_range(1..=512)).min(donor.len());
            let at = pos(rng, len);
            let end = (at + rng.random_range(0..=64)).min(len);
            data.splice(at..end, donor[a..b].iter().copied());
        }
        7 => {
            let at = pos(rng, len);
            let digits = b"99999999999999999999999";
            let k = rng.random_range(1..=digits.len());
            data.splice(at..at, digits[..k].iter().copied());
        }
        _ => {
            let at = pos(rng, len);
            let k = rng.random_range(1..=8);
            let bytes: Vec<u8> = (0..k).map(|_| rng.random::<u8>()).collect();
            data.splice(at..at, bytes);
        }
    }
    if data.len() > max_len {
        data.truncate(max_len);
    }
}
