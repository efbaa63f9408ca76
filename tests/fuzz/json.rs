//! Structure-aware JSON mutations: the document is parsed into a `serde_json::Value`, a
//! random node is replaced, retyped, deleted, duplicated, spliced from another document
//! or given an extreme number, and the tree is written back by a writer of our own that
//! can also repeat an object key and nest far deeper than `serde_json` would build.

use std::fmt::Write as _;

use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use serde_json::{Map, Value};

/// A string value the writer expands into `depth` nested arrays or objects.
const DEEP: &str = "\u{1}deep:";
/// An object key the writer writes as the key after the prefix, repeating that key.
const DUP: &str = "\u{1}dup:";

/// Extreme and edge numbers for sizes, shapes, ranges, ids and values.
const NUMBERS: [&str; 22] = [
    "0",
    "1",
    "-1",
    "2",
    "-2",
    "255",
    "65536",
    "2147483647",
    "2147483648",
    "-2147483648",
    "4294967296",
    "9007199254740993",
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "1e300",
    "-1e300",
    "0.5",
    "1e-300",
    "-0.0",
    "100000000000",
];

/// What mutations draw from: strings and small subtrees seen in the corpus.
pub struct Pool {
    /// String values of the corpus (expressions, names, ids, dtypes).
    pub strings: Vec<String>,
    /// Object keys of the corpus.
    pub keys: Vec<String>,
    /// Small subtrees (under 2 KB written) of the corpus.
    pub subtrees: Vec<Value>,
}

impl Pool {
    /// Collects strings, keys and small subtrees from `docs`.
    pub fn new(docs: &[&Value]) -> Pool {
        let mut strings = std::collections::BTreeSet::new();
        let mut keys = std::collections::BTreeSet::new();
        let mut subtrees = Vec::new();
        let mut seen = 0usize;
        for d in docs {
            let mut stack = vec![*d];
            while let Some(v) = stack.pop() {
                seen += 1;
                match v {
                    Value::String(s) if s.len() <= 300 => {
                        strings.insert(s.clone());
                    }
                    Value::Array(a) => stack.extend(a.iter()),
                    Value::Object(m) => {
                        for (k, x) in m {
                            keys.insert(k.clone());
                            stack.push(x);
                        }
                    }
                    _ => {}
                }
                // Keep every 7th small compound subtree.
                if matches!(v, Value::Array(_) | Value::Object(_))
                    && seen.is_multiple_of(7)
                    && subtrees.len() < 4000
                    && v.to_string().len() < 2048
                {
                    subtrees.push(v.clone());
                }
            }
        }
        Pool {
            strings: strings.into_iter().collect(),
            keys: keys.into_iter().collect(),
            subtrees,
        }
    }
}

#[derive(Clone, Copy)]
enum Step {
    Key(usize),
    Index(usize),
}

/// The path (object entry and array element positions) of every node, in preorder,
/// found without recursion.
fn paths(v: &Value, limit: usize) -> Vec<Vec<Step>> {
    let mut out = Vec::new();
    let mut stack: Vec<(&Value, Vec<Step>)> = vec![(v, Vec::new())];
    while let Some((v, p)) = stack.pop() {
        match v {
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate().rev() {
                    let mut q = p.clone();
                    q.push(Step::Index(i));
                    stack.push((x, q));
                }
            }
            Value::Object(m) => {
                for (i, x) in m.values().enumerate().rev() {
                    let mut q = p.clone();
                    q.push(Step::Key(i));
                    stack.push((x, q));
                }
            }
            _ => {}
        }
        out.push(p);
        if out.len() >= limit {
            break;
        }
    }
    out
}

fn at<'a>(mut v: &'a mut Value, path: &[Step]) -> &'a mut Value {
    for s in path {
        v = match (v, *s) {
            (Value::Array(a), Step::Index(i)) => &mut a[i],
            (Value::Object(m), Step::Key(i)) => m.values_mut().nth(i).expect("path from paths()"),
            _ => unreachable!("path from paths()"),
        };
    }
    v
}

fn number(rng: &mut ChaCha8Rng) -> Value {
    serde_json::from_str(NUMBERS[rng.random_range(0..NUMBERS.len())]).unwrap_or(Value::Null)
}

fn pick<'a, T>(rng: &mut ChaCha8Rng, v: &'a [T]) -> Option<&'a T> {
    (!v.is_empty()).then(|| &v[rng.random_range(0..v.len())])
}

/// Applies one to three structure-aware mutations to `doc`.
pub fn mutate(rng: &mut ChaCha8Rng, doc: &mut Value, pool: &Pool) {
    let n = rng.random_range(1..=3);
    for _ in 0..n {
        // Sample among the first nodes of big documents too: a random cut-off keeps the
        // walk short while still reaching deep parts now and then.
        let limit = if rng.random_bool(0.5) { 4000 } else { 400_000 };
        let ps = paths(doc, limit);
        let path = ps[rng.random_range(0..ps.len())].clone();
        let node = at(doc, &path);
        one(rng, node, pool);
    }
}

fn one(rng: &mut ChaCha8Rng, node: &mut Value, pool: &Pool) {
    match rng.random_range(0..12) {
        // A value of another type.
        0 => {
            *node = match rng.random_range(0..7) {
                0 => Value::Null,
                1 => Value::Bool(rng.random_bool(0.5)),
                2 => number(rng),
                3 => Value::String(String::new()),
                4 => Value::Array(Vec::new()),
                5 => Value::Object(Map::new()),
                _ => pick(rng, &pool.strings)
                    .cloned()
                    .map_or(Value::Null, Value::String),
            }
        }
        // Extreme numbers, also as numeric strings (DaCe writes sizes and ids as text).
        1 | 2 => match node {
            Value::String(s) if s.parse::<i64>().is_ok() || rng.random_bool(0.3) => {
                *s = NUMBERS[rng.random_range(0..NUMBERS.len())].to_string();
            }
            Value::Number(n) if rng.random_bool(0.5) => {
                let v = n.as_i64().unwrap_or(0);
                let d: i64 = rng.random_range(-3..=3);
                *node = Value::from(v.saturating_add(d));
            }
            _ => *node = number(rng),
        },
        // Text mutations of strings; other nodes get a corpus string.
        3 | 4 => match node {
            Value::String(s) => {
                let donor = pick(rng, &pool.strings).cloned().unwrap_or_default();
                *s = super::text::mutate(rng, s, &donor);
            }
            _ => {
                if let Some(s) = pick(rng, &pool.strings) {
                    *node = Value::String(s.clone());
                }
            }
        },
        // Delete an entry or element.
        5 => match node {
            Value::Object(m) if !m.is_empty() => {
                let k = m.keys().nth(rng.random_range(0..m.len())).cloned();
                if let Some(k) = k {
                    m.remove(&k);
                }
            }
            Value::Array(a) if !a.is_empty() => {
                a.remove(rng.random_range(0..a.len()));
            }
            _ => *node = Value::Null,
        },
        // Duplicate a key, or an element, or shuffle two elements.
        6 => match node {
            Value::Object(m) if !m.is_empty() => {
                let i = rng.random_range(0..m.len());
                if let Some((k, v)) = m.iter().nth(i).map(|(k, v)| (k.clone(), v.clone())) {
                    let v = if rng.random_bool(0.5) {
                        v
                    } else {
                        pick(rng, &pool.subtrees).cloned().unwrap_or(Value::Null)
                    };
                    m.insert(format!("{DUP}{k}"), v);
                }
            }
            Value::Array(a) if !a.is_empty() => {
                let i = rng.random_range(0..a.len());
                let j = rng.random_range(0..a.len());
                if rng.random_bool(0.5) {
                    a.swap(i, j);
                } else {
                    let x = a[i].clone();
                    a.insert(j, x);
                }
            }
            _ => {}
        },
        // Splice a subtree of the corpus.
        7 | 8 => {
            if let Some(t) = pick(rng, &pool.subtrees) {
                *node = t.clone();
            }
        }
        // A new entry with a known key.
        9 => {
            if let Value::Object(m) = node
                && let Some(k) = pick(rng, &pool.keys)
            {
                let v = if rng.random_bool(0.5) {
                    pick(rng, &pool.subtrees).cloned().unwrap_or(Value::Null)
                } else {
                    number(rng)
                };
                m.insert(k.clone(), v);
            } else if let Value::Array(a) = node {
                let k = rng.random_range(1..=64);
                let x = a.first().cloned().unwrap_or_else(|| number(rng));
                a.extend(std::iter::repeat_n(x, k));
            }
        }
        // Deep nesting, expanded by the writer.
        10 => {
            let d = [64, 120, 127, 128, 129, 200, 5000, 100_000][rng.random_range(0..8)];
            let kind = if rng.random_bool(0.5) { 'a' } else { 'o' };
            *node = Value::String(format!("{DEEP}{d}:{kind}"));
        }
        // Wrap the node in one more level.
        _ => {
            let inner = std::mem::take(node);
            *node = if rng.random_bool(0.5) {
                Value::Array(vec![inner])
            } else {
                let mut m = Map::new();
                let k = pick(rng, &pool.keys).cloned().unwrap_or_else(|| "x".into());
                m.insert(k, inner);
                Value::Object(m)
            };
        }
    }
}

/// Writes `v` as compact JSON, expanding the writer's markers (repeated keys, deep
/// nesting). Recursion follows the tree, whose depth the mutations keep small.
pub fn write(v: &Value) -> String {
    let mut out = String::new();
    write_into(v, &mut out);
    out
}

fn write_into(v: &Value, out: &mut String) {
    match v {
        Value::String(s) if s.starts_with(DEEP) => {
            let rest = &s[DEEP.len()..];
            let (d, kind) = rest.split_once(':').unwrap_or(("1", "a"));
            // Later mutations may have edited the marker: keep it bounded.
            let d: usize = d.parse::<usize>().unwrap_or(1).min(100_000);
            let (open, close) = if kind == "a" {
                ("[", "]")
            } else {
                ("{\"x\":", "}")
            };
            for _ in 0..d {
                out.push_str(open);
            }
            out.push('0');
            for _ in 0..d {
                out.push_str(close);
            }
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_into(x, out);
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push('{');
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let k = k.strip_prefix(DUP).unwrap_or(k);
                let _ = write!(out, "{}:", Value::String(k.to_string()));
                write_into(x, out);
            }
            out.push('}');
        }
        other => {
            let _ = write!(out, "{other}");
        }
    }
}
