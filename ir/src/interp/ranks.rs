//! Simulated ranks: one program run on every rank of a decomposition at once, a thread
//! per rank, each with its own arguments (its part of the fields, halos included). A halo
//! exchange is collective: every rank posts a snapshot of the fields it exchanges on a
//! shared board, waits for the others, fills its halos from its neighbours' snapshots and
//! waits again. A rank that fails stops the others (they return from the exchange they
//! wait in) and its error is the run's; ranks that reach different exchanges, or one
//! that ends while others wait, are an error, not a hang.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::dataflow::{Decomposition, HaloExchange};

use super::frame::err;
use super::{Bindings, HostArray, InterpError};

thread_local! {
    /// The rank this thread runs and its board (set by [`run_ranks`]).
    static RANK: RefCell<Option<(usize, Arc<Board>)>> = const { RefCell::new(None) };
}

/// What one rank posts at an exchange: which exchange it is, its fields, and an
/// unstructured decomposition's lists of its cells.
struct Post {
    what: String,
    fields: BTreeMap<String, HostArray>,
    index: BTreeMap<String, HostArray>,
}

#[derive(Default)]
struct BoardState {
    /// Barriers passed.
    generation: u64,
    /// Ranks waiting at the current barrier.
    arrived: usize,
    posts: Vec<Option<Arc<Post>>>,
    /// The first rank that failed, with its error.
    failed: Option<(usize, String)>,
    /// Ranks whose program ended.
    finished: Vec<bool>,
    /// Ranks stopped by another's failure (their error is not a cause).
    stopped: Vec<bool>,
}

/// The ranks' meeting point.
struct Board {
    ranks: usize,
    state: Mutex<BoardState>,
    cv: Condvar,
}

impl Board {
    fn new(ranks: usize) -> Board {
        Board {
            ranks,
            state: Mutex::new(BoardState {
                posts: vec![None; ranks],
                finished: vec![false; ranks],
                stopped: vec![false; ranks],
                ..BoardState::default()
            }),
            cv: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, BoardState> {
        // A rank that panicked holding the lock leaves the state as it was: usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until every rank arrived; an error when a rank failed or ended meanwhile
    /// (`rank` is then stopped).
    fn barrier(&self, rank: usize, what: &str) -> Result<(), InterpError> {
        let mut st = self.lock();
        let generation = st.generation;
        st.arrived += 1;
        if st.arrived == self.ranks {
            st.arrived = 0;
            st.generation += 1;
            self.cv.notify_all();
            return Ok(());
        }
        loop {
            if let Some((r, _)) = &st.failed {
                let r = *r;
                st.stopped[rank] = true;
                return Err(err(format!("stopped: rank {r} failed")));
            }
            if let Some(r) = st.finished.iter().position(|&f| f) {
                return Err(err(format!(
                    "rank {r} ended its program without reaching {what}, which the others reached (the ranks' exchanges differ)"
                )));
            }
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
            if st.generation != generation {
                return Ok(());
            }
        }
    }

    fn fail(&self, rank: usize, message: String) {
        let mut st = self.lock();
        if st.failed.is_none() {
            st.failed = Some((rank, message));
        }
        self.cv.notify_all();
    }

    fn finish(&self, rank: usize) {
        self.lock().finished[rank] = true;
        self.cv.notify_all();
    }
}

/// Runs `sdfg` on `ranks.len()` simulated ranks, rank `r` with the arguments
/// `ranks[r]` (its part of each field, halos included: see [`scatter`]); the halo
/// exchanges of the program exchange between them. The first rank to fail stops the
/// others; its error, located at `rank r`, is the result.
pub fn run_ranks(sdfg: &crate::sdfg::Sdfg, ranks: &mut [Bindings]) -> Result<(), InterpError> {
    let n = ranks.len();
    if n == 0 {
        return Err(InterpError::Other("no ranks to run on".into()));
    }
    let board = Arc::new(Board::new(n));
    let results: Vec<Result<(), InterpError>> = std::thread::scope(|s| {
        let handles: Vec<_> = ranks
            .iter_mut()
            .enumerate()
            .map(|(r, b)| {
                let board = board.clone();
                std::thread::Builder::new()
                    .name(format!("rank {r}"))
                    .stack_size(64 << 20)
                    .spawn_scoped(s, move || {
                        RANK.with(|c| *c.borrow_mut() = Some((r, board.clone())));
                        // A panic (a bug) must stop the other ranks too, not leave them
                        // waiting in an exchange.
                        let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            super::run(sdfg, b)
                        }))
                        .unwrap_or_else(|_| {
                            Err(InterpError::Other(format!(
                                "rank {r}: the interpreter panicked"
                            )))
                        });
                        RANK.with(|c| *c.borrow_mut() = None);
                        match &res {
                            Err(e) if !board.lock().stopped[r] => board.fail(r, e.to_string()),
                            Err(_) => {}
                            Ok(()) => board.finish(r),
                        }
                        res
                    })
            })
            .collect();
        // A rank whose thread did not start: the others would wait for it, so they stop
        // (before any is joined).
        let handles: Vec<_> = handles
            .into_iter()
            .enumerate()
            .map(|(r, h)| {
                h.map_err(|e| {
                    let e = format!("starting a thread for rank {r}: {e}");
                    board.fail(r, e.clone());
                    InterpError::Other(e)
                })
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(r, h)| {
                h.and_then(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(InterpError::Other(format!("rank {r} panicked"))))
                })
            })
            .collect()
    });
    // The cause: the lowest rank that failed by itself (not stopped by another).
    let stopped = board.lock().stopped.clone();
    let mut first = None;
    for (r, res) in results.into_iter().enumerate() {
        if let Err(e) = res {
            let cause = !stopped[r];
            match &first {
                Some((_, true)) => {}
                Some((_, false)) if !cause => {}
                _ => first = Some((e.within(&format!("rank {r}")), cause)),
            }
        }
    }
    first.map_or(Ok(()), |(e, _)| Err(e))
}

/// Runs a halo exchange of `fields` (the containers through the node) on this thread's
/// rank; on a thread that is not a simulated rank, as the only rank.
pub(crate) fn exchange(
    h: &HaloExchange,
    what: &str,
    fields: &mut BTreeMap<String, HostArray>,
    index: BTreeMap<String, HostArray>,
) -> Result<(), InterpError> {
    let size = h.decomposition.size();
    let ctx = RANK.with(|c| c.borrow().clone());
    let Some((rank, board)) = ctx else {
        if size != 1 {
            return Err(err(format!(
                "a halo exchange over {} cannot run on one rank alone (run the program on its ranks: `interp::run_ranks`)",
                h.decomposition
            )));
        }
        let own = Post {
            what: what.to_string(),
            fields: fields.clone(),
            index,
        };
        return fill(h, 0, fields, &own.index, &|_| Some(&own));
    };
    if size != board.ranks as i64 {
        return Err(err(format!(
            "a halo exchange over {} is run on {} rank(s)",
            h.decomposition, board.ranks
        )));
    }
    let mine = Arc::new(Post {
        what: what.to_string(),
        fields: fields.clone(),
        index,
    });
    board.lock().posts[rank] = Some(mine.clone());
    board.barrier(rank, what)?;
    let posts: Vec<Arc<Post>> = {
        let st = board.lock();
        st.posts.iter().flatten().cloned().collect()
    };
    for (r, p) in posts.iter().enumerate() {
        if p.what != what {
            return Err(err(format!(
                "rank {rank} reached {what}, rank {r} {} (the ranks' exchanges differ)",
                p.what
            )));
        }
    }
    if let Err(e) = fill(h, rank, fields, &mine.index, &|r| {
        posts.get(r).map(|p| p.as_ref())
    }) {
        // The others learn it at the barrier below.
        let shapes: Vec<String> = fields
            .iter()
            .map(|(n, a)| format!("{n} {:?}", a.shape()))
            .collect();
        board.fail(rank, format!("{what} of {}: {e}", shapes.join(", ")));
        return Err(e);
    }
    // Everyone read the posts before any is replaced.
    board.barrier(rank, what)
}

/// Fills rank `rank`'s halos of `fields` from what its neighbours posted (`posted(r)`:
/// rank `r`'s fields as they were before the exchange); `index`: this rank's lists of an
/// unstructured decomposition.
fn fill<'p>(
    h: &HaloExchange,
    rank: usize,
    fields: &mut BTreeMap<String, HostArray>,
    index: &BTreeMap<String, HostArray>,
    posted: &dyn Fn(usize) -> Option<&'p Post>,
) -> Result<(), InterpError> {
    match &h.decomposition {
        Decomposition::Structured {
            ranks,
            width,
            periodic,
            corners,
        } => fill_structured(rank, fields, *ranks, *width, *periodic, *corners, &|r| {
            posted(r).map(|p| &p.fields)
        }),
        Decomposition::Unstructured {
            ranks,
            global,
            owner,
        } => fill_unstructured(rank, fields, index, *ranks, global, owner, posted),
    }
}

/// The integers of a list container.
fn integers(a: &HostArray) -> Vec<i64> {
    a.values().into_iter().map(|v| v.as_i64()).collect()
}

/// Fills every cell of `fields` this rank does not own (by `owner`) from the rank that
/// does, found there by its global index (`global`).
fn fill_unstructured<'p>(
    rank: usize,
    fields: &mut BTreeMap<String, HostArray>,
    index: &BTreeMap<String, HostArray>,
    ranks: i64,
    global: &str,
    owner: &str,
    posted: &dyn Fn(usize) -> Option<&'p Post>,
) -> Result<(), InterpError> {
    let lists = |idx: &BTreeMap<String, HostArray>,
                 r: usize|
     -> Result<(Vec<i64>, Vec<i64>), InterpError> {
        let get = |n: &str| {
            idx.get(n)
                .map(integers)
                .ok_or_else(|| err(format!("rank {r} has no list '{n}'")))
        };
        let (g, o) = (get(global)?, get(owner)?);
        if g.len() != o.len() {
            return Err(err(format!(
                "rank {r}: '{global}' lists {} cells and '{owner}' {}",
                g.len(),
                o.len()
            )));
        }
        Ok((g, o))
    };
    let (glob, own) = lists(index, rank)?;
    for (name, field) in fields.iter() {
        if field.shape().first() != Some(&glob.len()) {
            return Err(err(format!(
                "'{name}' has {} cells in its first dimension on rank {rank}, '{global}' lists {}",
                field.shape().first().copied().unwrap_or(0),
                glob.len()
            )));
        }
    }
    // Per owning rank: its owned cells by global index.
    let mut owned: BTreeMap<usize, (std::collections::HashMap<i64, usize>, &'p Post)> =
        BTreeMap::new();
    for (l, (&g, &s)) in glob.iter().zip(&own).enumerate() {
        if s == rank as i64 {
            continue;
        }
        if !(0..ranks).contains(&s) {
            return Err(err(format!(
                "cell {l} (global {g}) of rank {rank} is owned by rank {s}, which is not one of the {ranks}"
            )));
        }
        let s = s as usize;
        let (map, post) = match owned.entry(s) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                let post = posted(s).ok_or_else(|| err(format!("rank {s} posted nothing")))?;
                let (tg, to) = lists(&post.index, s)?;
                let map = tg
                    .iter()
                    .zip(&to)
                    .enumerate()
                    .filter(|(_, (_, o))| **o == s as i64)
                    .map(|(m, (g, _))| (*g, m))
                    .collect();
                e.insert((map, post))
            }
        };
        let post: &Post = post;
        let m = *map.get(&g).ok_or_else(|| {
            err(format!(
                "cell {l} (global {g}) of rank {rank} is not among the cells rank {s} owns"
            ))
        })?;
        for (name, field) in fields.iter_mut() {
            let theirs = post
                .fields
                .get(name)
                .ok_or_else(|| err(format!("rank {s} posted no field '{name}'")))?;
            let shape = field.shape().to_vec();
            if theirs.shape()[1..] != shape[1..] {
                return Err(err(format!(
                    "'{name}' has extents {:?} beyond the first dimension on rank {rank} and {:?} on rank {s}",
                    &shape[1..],
                    &theirs.shape()[1..]
                )));
            }
            let rest: usize = shape[1..].iter().product();
            for k in 0..rest {
                let (mut dst, mut src) = (vec![l; shape.len()], vec![m; shape.len()]);
                let mut q = k;
                for d in (1..shape.len()).rev() {
                    dst[d] = q % shape[d];
                    src[d] = dst[d];
                    q /= shape[d];
                }
                let v = theirs
                    .get(&src)
                    .ok_or_else(|| err(format!("'{name}': no element {src:?} on rank {s}")))?;
                field.set(&dst, v);
            }
        }
    }
    Ok(())
}

/// The structured exchange ([`Decomposition::Structured`]).
fn fill_structured<'p>(
    rank: usize,
    fields: &mut BTreeMap<String, HostArray>,
    ranks: [i64; 2],
    w: i64,
    periodic: [bool; 2],
    corners: bool,
    posted: &dyn Fn(usize) -> Option<&'p BTreeMap<String, HostArray>>,
) -> Result<(), InterpError> {
    let (px, py) = (ranks[0], ranks[1]);
    let (ri, rj) = (rank as i64 % px, rank as i64 / px);
    for (name, field) in fields.iter_mut() {
        let shape = field.shape().to_vec();
        if shape.len() < 2 || shape[..2].iter().any(|&n| (n as i64) < 2 * w) {
            return Err(err(format!(
                "'{name}' of extents {shape:?} holds no halo of width {w} on both sides of its first two dimensions"
            )));
        }
        for di in -1..=1i64 {
            for dj in -1..=1i64 {
                if (di, dj) == (0, 0) || (!corners && di != 0 && dj != 0) {
                    continue;
                }
                let neighbour = |pos: i64, d: i64, count: i64, wrap: bool| {
                    let q = pos + d;
                    if (0..count).contains(&q) {
                        Some(q)
                    } else if wrap {
                        Some(q.rem_euclid(count))
                    } else {
                        None
                    }
                };
                let (Some(ni), Some(nj)) = (
                    neighbour(ri, di, px, periodic[0]),
                    neighbour(rj, dj, py, periodic[1]),
                ) else {
                    continue;
                };
                let other = (nj * px + ni) as usize;
                let theirs = posted(other)
                    .and_then(|f| f.get(name))
                    .ok_or_else(|| err(format!("rank {other} posted no field '{name}'")))?;
                let tshape = theirs.shape();
                // Along a dimension where the neighbour is beside us (d = 0) the interiors
                // must match; the halo width is the same everywhere.
                for (k, d) in [(0usize, di), (1, dj)] {
                    if d == 0 && tshape[k] != shape[k] {
                        return Err(err(format!(
                            "'{name}' has extent {} in dimension {k} on rank {rank} and {} on rank {other}, its neighbour along dimension {}",
                            shape[k],
                            tshape[k],
                            1 - k
                        )));
                    }
                }
                if tshape[2..] != shape[2..] {
                    return Err(err(format!(
                        "'{name}' has extents {:?} beyond the first two dimensions on rank {rank} and {:?} on rank {other}",
                        &shape[2..],
                        &tshape[2..]
                    )));
                }
                // Where to write (ours) and where to read (theirs), per dimension.
                let span = |d: i64, n: usize, m: usize| -> (usize, usize, usize) {
                    let (n, m, w) = (n as i64, m as i64, w);
                    let (dst, src, len) = match d {
                        -1 => (0, m - 2 * w, w),
                        0 => (w, w, n - 2 * w),
                        _ => (n - w, w, w),
                    };
                    (dst as usize, src as usize, len.max(0) as usize)
                };
                let (d0, s0, l0) = span(di, shape[0], tshape[0]);
                let (d1, s1, l1) = span(dj, shape[1], tshape[1]);
                // In bounds: the extents were checked above.
                copy_block(theirs, field, [s0, s1], [d0, d1], [l0, l1]);
            }
        }
    }
    Ok(())
}

/// Splits a global field (first two dimensions `N0 × N1`, any more after them) over a
/// structured decomposition of `ranks[0] × ranks[1]` ranks with halos of `width`: rank `r`
/// gets its block of rows and columns (the first `N % p` ranks along a dimension one more)
/// with `width` cells around it, the halos zero. The inverse is [`gather`].
pub fn scatter(global: &HostArray, ranks: [usize; 2], width: usize) -> Vec<HostArray> {
    let shape = global.shape();
    let blocks = |n: usize, p: usize| -> Vec<(usize, usize)> {
        let mut out = Vec::with_capacity(p);
        let mut start = 0;
        for k in 0..p {
            let len = n / p + usize::from(k < n % p);
            out.push((start, len));
            start += len;
        }
        out
    };
    let (b0, b1) = (blocks(shape[0], ranks[0]), blocks(shape[1], ranks[1]));
    let mut out = Vec::with_capacity(ranks[0] * ranks[1]);
    for &(o1, l1) in &b1 {
        for &(o0, l0) in &b0 {
            let mut local_shape = shape.to_vec();
            local_shape[0] = l0 + 2 * width;
            local_shape[1] = l1 + 2 * width;
            let mut local = HostArray::zeros(global.dtype(), &local_shape);
            copy_block(global, &mut local, [o0, o1], [width, width], [l0, l1]);
            out.push(local);
        }
    }
    out
}

/// Assembles a global field of `shape` from the interiors of the ranks' parts made by
/// [`scatter`] (the same `ranks` and `width`).
pub fn gather(parts: &[HostArray], shape: &[usize], ranks: [usize; 2], width: usize) -> HostArray {
    let mut global = HostArray::zeros(parts[0].dtype(), shape);
    let (mut o1, mut k) = (0, 0);
    for _ in 0..ranks[1] {
        let mut o0 = 0;
        let mut l1 = 0;
        for _ in 0..ranks[0] {
            let p = &parts[k];
            let (l0, l) = (p.shape()[0] - 2 * width, p.shape()[1] - 2 * width);
            copy_block(p, &mut global, [width, width], [o0, o1], [l0, l]);
            o0 += l0;
            l1 = l;
            k += 1;
        }
        o1 += l1;
    }
    global
}

/// Copies the block of `len` rows and columns (all of the further dimensions) at `from`
/// in `src` to `to` in `dst`.
fn copy_block(
    src: &HostArray,
    dst: &mut HostArray,
    from: [usize; 2],
    to: [usize; 2],
    len: [usize; 2],
) {
    let shape = src.shape().to_vec();
    let rest: usize = shape[2..].iter().product();
    let mut s = vec![0usize; shape.len()];
    let mut d = vec![0usize; shape.len()];
    for a in 0..len[0] {
        for b in 0..len[1] {
            for k in 0..rest {
                let mut q = k;
                for x in (2..shape.len()).rev() {
                    s[x] = q % shape[x];
                    d[x] = s[x];
                    q /= shape[x];
                }
                (s[0], s[1]) = (from[0] + a, from[1] + b);
                (d[0], d[1]) = (to[0] + a, to[1] + b);
                if let Some(v) = src.get(&s) {
                    dst.set(&d, v);
                }
            }
        }
    }
}
