//! Mutations of expression, subset and memlet text: tokens of both syntaxes (sdflow's and
//! DaCe's Python), interesting numbers, deep nesting and long operator chains.

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

/// Tokens of sdflow's text syntax and of the Python/SymPy subset DaCe writes.
pub const TOKENS: [&str; 58] = [
    "(",
    ")",
    "[",
    "]",
    ",",
    ":",
    "=",
    "+",
    "-",
    "*",
    "/",
    "//",
    "%",
    "**",
    "<",
    "<=",
    ">",
    ">=",
    "==",
    "!=",
    "!",
    "&&",
    "||",
    " and ",
    " or ",
    "not ",
    " if ",
    " else ",
    "min(",
    "max(",
    "abs(",
    "sqrt(",
    "pow(",
    "select(",
    "f32(",
    "i32(",
    "math.",
    "dace.",
    "lambda x, y: ",
    "\n",
    ";",
    "inf",
    "nan",
    "-nan",
    "inff32",
    "True",
    "False",
    "2.0f32",
    "3i32",
    "1e-3",
    "N",
    "i",
    "__tmp",
    "_",
    "wall_ns()",
    "Min(",
    "Max(",
    "int_floor(",
];

/// Numbers at the edges of the integer and float types.
pub const NUMBERS: [&str; 20] = [
    "0",
    "-1",
    "1",
    "2147483647",
    "2147483648",
    "-2147483649",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999999",
    "1e308",
    "1e309",
    "-1e400",
    "4.9e-324",
    "0x10",
    "1_000",
];

/// Depths for nesting mutations: below, at and above the parser's limit, and far above.
const DEPTHS: [usize; 8] = [10, 100, 255, 256, 257, 515, 1000, 20_000];

/// A mutated copy of `text`; `donor` is another corpus string to splice from.
pub fn mutate(rng: &mut ChaCha8Rng, text: &str, donor: &str) -> String {
    let mut s = text.to_string();
    let n = rng.random_range(1..=3);
    for _ in 0..n {
        s = one(rng, &s, donor);
    }
    s
}

fn boundary(rng: &mut ChaCha8Rng, s: &str) -> usize {
    let cuts: Vec<usize> = (0..=s.len()).filter(|&i| s.is_char_boundary(i)).collect();
    cuts[rng.random_range(0..cuts.len())]
}

fn one(rng: &mut ChaCha8Rng, s: &str, donor: &str) -> String {
    match rng.random_range(0..9) {
        0 | 1 => {
            let at = boundary(rng, s);
            let t = TOKENS[rng.random_range(0..TOKENS.len())];
            format!("{}{t}{}", &s[..at], &s[at..])
        }
        2 => {
            // Replace a run of digits (or insert) with an interesting number.
            let num = NUMBERS[rng.random_range(0..NUMBERS.len())];
            match s.find(|c: char| c.is_ascii_digit()) {
                Some(a) => {
                    let b = s[a..]
                        .find(|c: char| !c.is_ascii_digit())
                        .map_or(s.len(), |k| a + k);
                    format!("{}{num}{}", &s[..a], &s[b..])
                }
                None => {
                    let at = boundary(rng, s);
                    format!("{}{num}{}", &s[..at], &s[at..])
                }
            }
        }
        3 => {
            let d = DEPTHS[rng.random_range(0..DEPTHS.len())];
            let (open, close) = match rng.random_range(0..6) {
                0 => ("(", ")"),
                1 => ("-", ""),
                2 => ("not ", ""),
                3 => ("abs(", ")"),
                4 => ("a[", "]"),
                _ => ("!", ""),
            };
            let mut out = String::with_capacity(s.len() + d * (open.len() + close.len()));
            for _ in 0..d {
                out.push_str(open);
            }
            out.push_str(if s.is_empty() { "x" } else { s });
            for _ in 0..d {
                out.push_str(close);
            }
            out
        }
        4 => {
            // A long chain of binary operators.
            let d = DEPTHS[rng.random_range(0..DEPTHS.len())];
            let op = [" + ", " * ", " - ", " // ", " and ", " < "][rng.random_range(0..6)];
            let term = if s.is_empty() || s.len() > 20 { "x" } else { s };
            vec![term; d].join(op)
        }
        5 if !s.is_empty() => {
            let a = boundary(rng, s);
            let b = boundary(rng, s);
            let (a, b) = (a.min(b), a.max(b));
            format!("{}{}", &s[..a], &s[b..])
        }
        6 if !donor.is_empty() => {
            let at = boundary(rng, s);
            let k = boundary(rng, donor);
            format!("{}{}{}", &s[..at], &donor[k..], &s[at..])
        }
        7 => {
            let mut b = s.as_bytes().to_vec();
            super::bytes::mutate(rng, &mut b, &[], donor.as_bytes(), 1 << 16);
            String::from_utf8_lossy(&b).into_owned()
        }
        _ => {
            // A random non-ASCII or control character.
            let at = boundary(rng, s);
            let c =
                ['\u{0}', '\u{7f}', 'é', '∞', '\u{feff}', '\t', '\r', '𝑥'][rng.random_range(0..8)];
            format!("{}{c}{}", &s[..at], &s[at..])
        }
    }
}
