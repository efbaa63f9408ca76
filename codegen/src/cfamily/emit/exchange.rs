//! Halo exchanges in C, over MPI: the plan's start and finish steps
//! ([`crate::plan::exchange`]) and what the program's state holds for them.
//!
//! An exchange over a structured decomposition talks to up to eight neighbours, one per
//! direction `d = (di + 1) + 3 (dj + 1)` (the centre, 4, is not one; the diagonals only
//! with corners). Everything that depends on the ranks and the fields' extents is
//! decided once per state, in `sdflow_init`: each direction's neighbour (or
//! `MPI_PROC_NULL` past a bounded edge), the bytes each field's strip takes in that
//! direction's message and the send and receive buffers. The start step (the team's
//! master thread: MPI is called from one thread) packs each direction's strips — the
//! owned cells next to that side — into its buffer and posts a nonblocking receive and
//! send per neighbour; the finish waits for all of them, checks that each message had
//! the size expected, and unpacks them into the halo. A message to the neighbour in
//! direction `d` has tag `9 e + d` (`e`: the exchange's number); the neighbour receives
//! it from its direction `8 - d`.
//!
//! An exchange over an unstructured decomposition talks to the ranks that own its halo
//! cells and to those whose halo holds its cells, as its lists (`global`, `owner`) say.
//! Who sends which cells to whom — the *schedule* — is made from the lists by all ranks
//! together (`sdf_us_build`: each asks each owner for the global indices it needs; the
//! owner finds them among its cells) at the start of a call, before the parallel region,
//! and kept while every rank's lists hash to what they were: a call checks that with one
//! `MPI_Allreduce` per pair of lists. A message has tag `9 e`; each of its cells carries
//! every field's values beyond the first dimension, padded to 8 bytes per field.

use super::*;

use crate::plan::exchange::Exchange;
use sdflow_ir::Decomposition;

/// The lists of an unstructured decomposition.
fn lists(x: &Exchange) -> Option<(&str, &str)> {
    match &x.decomposition {
        Decomposition::Unstructured { global, owner, .. } => Some((global, owner)),
        Decomposition::Structured { .. } => None,
    }
}

/// The distinct pairs of lists of the unstructured exchanges, in order (each keeps its
/// schedule in the state, [`schedule`]).
pub(crate) fn list_pairs(exchanges: &[&Exchange]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for x in exchanges {
        if let Some((g, o)) = lists(x)
            && !out.iter().any(|(a, b)| a == g && b == o)
        {
            out.push((g.to_string(), o.to_string()));
        }
    }
    out
}

/// The state's member holding the schedule of the lists `g` and `o`.
fn schedule(g: &str, o: &str) -> String {
    format!("us_{g}__{o}")
}

/// The structured decomposition's parameters.
pub(crate) fn structured(x: &Exchange) -> Option<([i64; 2], i64, [bool; 2], bool)> {
    match &x.decomposition {
        Decomposition::Structured {
            ranks,
            width,
            periodic,
            corners,
        } => Some((*ranks, *width, *periodic, *corners)),
        Decomposition::Unstructured { .. } => None,
    }
}

/// The state's members of the program's exchanges (after the MPI communicator).
pub(crate) fn state_members(exchanges: &[&Exchange]) -> String {
    let mut out = String::new();
    if exchanges.is_empty() {
        return out;
    }
    out.push_str("    MPI_Comm comm;\n    int rank, size;\n");
    for (g, o) in list_pairs(exchanges) {
        let _ = writeln!(out, "    sdf_usched {};", schedule(&g, &o));
    }
    for x in exchanges {
        let e = x.id;
        if lists(x).is_some() {
            let _ = writeln!(
                out,
                "    MPI_Request* x{e}_rq; MPI_Status* x{e}_st; char* x{e}_sb; char* x{e}_rb; int64_t x{e}_scap, x{e}_rcap;"
            );
            continue;
        }
        let nf = x.fields.len();
        let _ = writeln!(
            out,
            "    int x{e}_nb[9]; int64_t x{e}_off[9][{}]; char* x{e}_sb[9]; char* x{e}_rb[9]; MPI_Request x{e}_rq[18];",
            nf + 1
        );
    }
    out
}

/// Frees what `init` allocated for the exchanges (the state `st` may be half made).
pub(crate) fn finalize_text(exchanges: &[&Exchange]) -> String {
    let mut out = String::new();
    if exchanges.is_empty() {
        return out;
    }
    for (g, o) in list_pairs(exchanges) {
        let _ = writeln!(out, "    sdf_us_free(&st->{});", schedule(&g, &o));
    }
    // Messages of a run that stopped between an exchange's start and its finish are
    // waited for before their buffers go.
    out.push_str("    int sdf_fin = 0; MPI_Finalized(&sdf_fin);\n");
    for x in exchanges {
        let e = x.id;
        if lists(x).is_some() {
            let _ = writeln!(
                out,
                "    if (!sdf_fin && st->x{e}_rq && st->comm != MPI_COMM_NULL && st->comm != 0) MPI_Waitall(2 * st->size, st->x{e}_rq, MPI_STATUSES_IGNORE);\n    \
                 free(st->x{e}_rq); free(st->x{e}_st); free(st->x{e}_sb); free(st->x{e}_rb);"
            );
            continue;
        }
        let _ = writeln!(
            out,
            "    if (!sdf_fin && st->x{e}_sb[0] != NULL) MPI_Waitall(18, st->x{e}_rq, MPI_STATUSES_IGNORE);\n    \
             for (int d = 0; d < 9; d++) {{ free(st->x{e}_sb[d]); free(st->x{e}_rb[d]); }}"
        );
    }
    out.push_str("    if (st->comm != MPI_COMM_NULL && st->comm != 0) { int fin = 0; MPI_Finalized(&fin); if (!fin) MPI_Comm_free(&st->comm); }\n");
    out
}

/// `sdflow_init`'s part for the exchanges, after the state is allocated and the symbols
/// declared: MPI started, the program's communicator (a duplicate of
/// `MPI_COMM_WORLD`), the check that every rank runs the same program (`hash`: of its
/// name, signature and exchanges) over as many ranks as its decompositions have, and per
/// exchange the neighbours, the strips' sizes and the buffers. On failure it writes the
/// message (`sdf_init_fail`) and returns NULL.
pub(crate) fn init_text(
    frame: &Frame<'_>,
    exchanges: &[&Exchange],
    hash: u64,
    description: &str,
) -> Result<String, CodegenError> {
    let mut out = String::new();
    if exchanges.is_empty() {
        return Ok(out);
    }
    let _ = writeln!(
        out,
        "    if (sdf_mpi_up() != 0) return sdf_init_fail(st, \"could not start MPI (MPI_Init_thread failed, or MPI was finalized)\");\n    \
         st->comm = MPI_COMM_NULL;\n    \
         if (MPI_Comm_dup(MPI_COMM_WORLD, &st->comm) != MPI_SUCCESS) return sdf_init_fail(st, \"MPI_Comm_dup failed\");\n    \
         MPI_Comm_set_errhandler(st->comm, MPI_ERRORS_RETURN);\n    \
         MPI_Comm_rank(st->comm, &st->rank); MPI_Comm_size(st->comm, &st->size);\n    \
         {{ uint64_t h = {hash}ULL; uint64_t* all = (uint64_t*)calloc((size_t)st->size, sizeof(uint64_t));\n      \
         if (!all) return sdf_init_fail(st, \"out of memory\");\n      \
         MPI_Allgather(&h, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, st->comm);\n      \
         int other = -1; for (int r = 0; r < st->size; r++) if (all[r] != h) {{ other = r; break; }}\n      \
         free(all);\n      \
         if (other >= 0) {{ char m[768]; snprintf(m, sizeof m, \"rank %d runs %s, and rank %d another program or decomposition: every rank must run the same program\", st->rank, {desc}, other); return sdf_init_fail(st, m); }} }}",
        desc = c_string(description),
    );
    for x in exchanges {
        let Some((ranks, w, periodic, corners)) = structured(x) else {
            let e = x.id;
            let size = x.decomposition.size();
            let _ = writeln!(
                out,
                "    {{ /* exchange #{e}: {} over {} */\n      \
                 if (st->size != {size}) {{ char m[512]; snprintf(m, sizeof m, \"halo exchange #{e} of %s is over {size} ranks, but the program runs on %d: start it with `mpirun -n {size}`\", {fields}, st->size); return sdf_init_fail(st, m); }}\n      \
                 st->x{e}_rq = (MPI_Request*)malloc(2 * (size_t)st->size * sizeof(MPI_Request));\n      \
                 st->x{e}_st = (MPI_Status*)malloc(2 * (size_t)st->size * sizeof(MPI_Status));\n      \
                 if (st->x{e}_rq) for (int p = 0; p < 2 * st->size; p++) st->x{e}_rq[p] = MPI_REQUEST_NULL;\n      \
                 if (!st->x{e}_rq || !st->x{e}_st) return sdf_init_fail(st, \"out of memory\");\n    }}",
                x.fields.join(", "),
                x.decomposition,
                fields = c_string(&quoted(&x.fields)),
            );
            continue;
        };
        let e = x.id;
        let (px, py) = (ranks[0], ranks[1]);
        let _ = writeln!(
            out,
            "    {{ /* exchange #{e}: {} over {} */\n      \
             if (st->size != {size}) {{ char m[512]; snprintf(m, sizeof m, \"halo exchange #{e} of %s is over {px} x {py} = {size} ranks, but the program runs on %d: start it with `mpirun -n {size}`\", {fields}, st->size); return sdf_init_fail(st, m); }}\n      \
             const int ri = st->rank % {px}, rj = st->rank / {px};\n      \
             for (int d = 0; d < 9; d++) {{\n        \
             const int di = d % 3 - 1, dj = d / 3 - 1; int ni = ri + di, nj = rj + dj;\n        \
             st->x{e}_nb[d] = MPI_PROC_NULL;\n        \
             if (d == 4 || ({corners} == 0 && di != 0 && dj != 0)) continue;\n        \
             if (ni < 0 || ni >= {px}) {{ if (!{p0}) continue; ni = (ni + {px}) % {px}; }}\n        \
             if (nj < 0 || nj >= {py}) {{ if (!{p1}) continue; nj = (nj + {py}) % {py}; }}\n        \
             st->x{e}_nb[d] = nj * {px} + ni;\n      }}\n      \
             for (int d = 0; d < 18; d++) st->x{e}_rq[d] = MPI_REQUEST_NULL;",
            x.fields.join(", "),
            x.decomposition,
            size = px * py,
            fields = c_string(&quoted(&x.fields)),
            corners = i32::from(corners),
            p0 = i32::from(periodic[0]),
            p1 = i32::from(periodic[1]),
        );
        for (f, name) in x.fields.iter().enumerate() {
            let d = frame
                .sdfg
                .arrays
                .get(name)
                .and_then(|d| d.as_array())
                .ok_or_else(|| {
                    CodegenError::Unsupported(format!(
                        "halo exchange #{e}: '{name}' is not an array of the program"
                    ))
                })?;
            let rest: Vec<String> = d.shape[2..]
                .iter()
                .map(|s| format!("({})", frame.plain(s)))
                .collect();
            let rest = if rest.is_empty() {
                "1".to_string()
            } else {
                rest.join(" * ")
            };
            let _ = writeln!(
                out,
                "      {{ const int64_t n0 = {}, n1 = {}, nr = {rest};\n        \
                 if (n0 < {w2} || n1 < {w2}) {{ char m[512]; snprintf(m, sizeof m, \"'{name}' has extents %lld x %lld on rank %d: it holds no halo of width {w} on both sides of its first two dimensions (halo exchange #{e})\", (long long)n0, (long long)n1, st->rank); return sdf_init_fail(st, m); }}\n        \
                 for (int d = 0; d < 9; d++) {{\n          \
                 const int di = d % 3 - 1, dj = d / 3 - 1;\n          \
                 const int64_t l0 = di == 0 ? n0 - {w2} : {w}, l1 = dj == 0 ? n1 - {w2} : {w};\n          \
                 const int64_t bytes = l0 * l1 * (nr > 0 ? nr : 0) * (int64_t)sizeof({t});\n          \
                 st->x{e}_off[d][{f1}] = st->x{e}_off[d][{f}] + ((bytes + 7) / 8) * 8;\n        }} }}",
                frame.plain(&d.shape[0]),
                frame.plain(&d.shape[1]),
                w2 = 2 * w,
                t = ctype(d.dtype),
                f1 = f + 1,
            );
        }
        let nf = x.fields.len();
        let _ = writeln!(
            out,
            "      for (int d = 0; d < 9; d++) {{\n        \
             if (st->x{e}_off[d][{nf}] > INT32_MAX) return sdf_init_fail(st, \"halo exchange #{e}: a message of more than 2 GiB\");\n        \
             const size_t b = (size_t)(st->x{e}_off[d][{nf}] > 0 ? st->x{e}_off[d][{nf}] : 1);\n        \
             st->x{e}_sb[d] = (char*)malloc(b); st->x{e}_rb[d] = (char*)malloc(b);\n        \
             if (!st->x{e}_sb[d] || !st->x{e}_rb[d]) return sdf_init_fail(st, \"out of memory\");\n      }}\n    }}"
        );
    }
    Ok(out)
}

/// The fields of unstructured exchange `x` with, per field, the C text of its extents
/// beyond the first (the values of a cell), each between `open` and `close`.
fn cell_fields<'s>(
    sc: &Scope<'s>,
    x: &Exchange,
    open: &str,
    close: &str,
) -> Vec<(String, &'s sdflow_ir::Array, Vec<String>)> {
    let mut fields = Vec::new();
    for f in &x.fields {
        let Some(a) = sc.sdfg.arrays.get(f).and_then(|d| d.as_array()) else {
            continue;
        };
        let rest: Vec<String> = a.shape[1..]
            .iter()
            .map(|n| format!("{open}{}{close}", sc.sym_with(n, SymCheck::Plain)))
            .collect();
        fields.push((f.clone(), a, rest));
    }
    fields
}

/// `'a', 'b'`.
fn quoted(fields: &[String]) -> String {
    fields
        .iter()
        .map(|f| format!("'{f}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A C string literal of `s`.
fn c_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_ascii_graphic() || c == ' ' => out.push(c),
            _ => out.push('?'),
        }
    }
    out.push('"');
    out
}

impl Emitter<'_> {
    /// The body of a CUDA kernel packing (`send`) or unpacking structured exchange `x`
    /// through the buffer `sdf_xb` (its first 8 bytes a status word: unpacking does
    /// nothing unless it is 0; direction `d`'s message follows, at the offset the
    /// directions before take, each field's strip padded to 8 bytes — the layout of the
    /// C backend's per-direction buffers, one after another), for the directions whose
    /// bit is set in `sdf_xnb`. Each thread takes every `gridDim.x * blockDim.x`-th
    /// element of each strip; the elements of a strip are in the C backend's order (the
    /// first dimension slowest).
    pub(crate) fn exchange_kernel(&mut self, sc: &Scope<'_>, x: &Exchange, send: bool) {
        let Some((_, w, _, _)) = structured(x) else {
            self.unstructured_kernel(sc, x, send);
            return;
        };
        let w2 = 2 * w;
        self.line("const int64_t sdf_t0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, sdf_ts = (int64_t)gridDim.x * blockDim.x;");
        if !send {
            self.line("if (((const int64_t*)sdf_xb)[0] != 0) return;");
        }
        self.line("int64_t sdf_o = 8;");
        self.line("for (int sdf_d = 0; sdf_d < 9; sdf_d++) {");
        self.indent += 1;
        self.line("if (sdf_d == 4) continue;");
        self.line("const int64_t di = sdf_d % 3 - 1, dj = sdf_d / 3 - 1;");
        self.line("const int sdf_on = (sdf_xnb >> sdf_d) & 1;");
        for name in &x.fields {
            let Some(a) = sc.sdfg.arrays.get(name).and_then(|d| d.as_array()) else {
                continue;
            };
            let t = ctype(a.dtype);
            let n0 = sc.sym_with(&a.shape[0], SymCheck::Plain);
            let n1 = sc.sym_with(&a.shape[1], SymCheck::Plain);
            let span = |n: &str, c: &str| -> (String, String) {
                if send {
                    (
                        format!("{c} < 0 ? {w} : ({c} == 0 ? {w} : ({n}) - {w2})"),
                        format!("{c} < 0 ? {w2} : ({n}) - {w}"),
                    )
                } else {
                    (
                        format!("{c} < 0 ? 0 : ({c} == 0 ? {w} : ({n}) - {w})"),
                        format!("{c} < 0 ? {w} : ({c} == 0 ? ({n}) - {w} : ({n}))"),
                    )
                }
            };
            let (lo0, hi0) = span(&n0, "di");
            let (lo1, hi1) = span(&n1, "dj");
            self.line(&format!("{{ /* '{name}' */"));
            self.indent += 1;
            self.line(&format!(
                "const int64_t lo0 = {lo0}, hi0 = {hi0}, lo1 = {lo1}, hi1 = {hi1};"
            ));
            let mut rest = Vec::new();
            for (k, s) in a.shape.iter().enumerate().skip(2) {
                let n = sc.sym_with(s, SymCheck::Plain);
                self.line(&format!("const int64_t sdf_n{k} = {n};"));
                rest.push(k);
            }
            let mut count = String::from("sdf_max64(hi0 - lo0, 0) * sdf_max64(hi1 - lo1, 0)");
            for k in &rest {
                let _ = write!(count, " * sdf_max64(sdf_n{k}, 0)");
            }
            self.line(&format!("const int64_t sdf_cnt = {count};"));
            self.line(&format!("{t}* sdf_b = ({t}*)(sdf_xb + sdf_o);"));
            self.line(
                "if (sdf_on) for (int64_t sdf_q = sdf_t0; sdf_q < sdf_cnt; sdf_q += sdf_ts) {",
            );
            self.indent += 1;
            self.line("int64_t sdf_r = sdf_q;");
            let mut idx = vec!["i0".to_string(), "i1".to_string()];
            for k in rest.iter().rev() {
                self.line(&format!(
                    "const int64_t i{k} = sdf_r % sdf_n{k}; sdf_r /= sdf_n{k};"
                ));
            }
            self.line(
                "const int64_t i1 = lo1 + sdf_r % (hi1 - lo1), i0 = lo0 + sdf_r / (hi1 - lo1);",
            );
            idx.extend(rest.iter().map(|k| format!("i{k}")));
            let at = format!("a_{name}[{}]", sc.flat(&idx, &a.strides));
            if send {
                self.line(&format!("sdf_b[sdf_q] = {at};"));
            } else {
                self.line(&format!("{at} = sdf_b[sdf_q];"));
            }
            self.indent -= 1;
            self.line("}");
            self.line(&format!(
                "sdf_o += (sdf_cnt * (int64_t)sizeof({t}) + 7) / 8 * 8;"
            ));
            self.indent -= 1;
            self.line("}");
        }
        self.indent -= 1;
        self.line("}");
    }

    /// The body of a CUDA kernel packing (`send`) or unpacking unstructured exchange `x`
    /// through the buffer `sdf_xb` (a status word, then the C backend's unstructured
    /// message per rank: per field, each cell's values padded to 8 bytes), with the
    /// schedule `sdf_xs` (`[ranks, count per rank, offset per rank and one, local cell
    /// indices]`, of the cells sent or of those received) and the lists as the schedule
    /// was made from them, `sdf_xl` (`[n, global…, owner…]`). Packing first compares the
    /// lists with those and sets the status word where they differ. Each thread takes
    /// every `gridDim.x * blockDim.x`-th value of each rank's cells.
    fn unstructured_kernel(&mut self, sc: &Scope<'_>, x: &Exchange, send: bool) {
        let Some((g, o)) = lists(x) else {
            return;
        };
        self.line("const int64_t sdf_t0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, sdf_ts = (int64_t)gridDim.x * blockDim.x;");
        if send {
            self.line("{ const int64_t sdf_n = sdf_xl[0];");
            self.line(&format!(
                "  for (int64_t l = sdf_t0; l < sdf_n; l += sdf_ts) if ((int64_t)a_{g}[l] != sdf_xl[1 + l] || (int64_t)a_{o}[l] != sdf_xl[1 + sdf_n + l]) ((int64_t*)sdf_xb)[0] = 1; }}"
            ));
        } else {
            self.line("if (((const int64_t*)sdf_xb)[0] != 0) return;");
        }
        let fields = cell_fields(sc, x, "sdf_max64(", ", 0)");
        // Values per cell and bytes per cell of each field.
        for (k, (_, a, rest)) in fields.iter().enumerate() {
            let m = if rest.is_empty() {
                "1".to_string()
            } else {
                rest.join(" * ")
            };
            self.line(&format!(
                "const int64_t sdf_m{k} = {m}, sdf_cb{k} = (sdf_m{k} * (int64_t)sizeof({}) + 7) / 8 * 8;",
                ctype(a.dtype)
            ));
        }
        let total: Vec<String> = (0..fields.len()).map(|k| format!("sdf_cb{k}")).collect();
        self.line(&format!(
            "const int64_t sdf_B = {};",
            if total.is_empty() {
                "0".to_string()
            } else {
                total.join(" + ")
            }
        ));
        self.line("const int64_t sdf_P = sdf_xs[0]; const int64_t* sdf_cnt = sdf_xs + 1; const int64_t* sdf_off = sdf_xs + 1 + sdf_P; const int64_t* sdf_idx = sdf_xs + 2 + 2 * sdf_P;");
        self.line("for (int64_t p = 0; p < sdf_P; p++) {");
        self.indent += 1;
        self.line("const int64_t sdf_n = sdf_cnt[p], sdf_base = 8 + sdf_off[p] * sdf_B;");
        self.line("int64_t sdf_fo = 0;");
        for (k, (f, a, rest)) in fields.iter().enumerate() {
            let t = ctype(a.dtype);
            self.line(&format!(
                "for (int64_t sdf_q = sdf_t0; sdf_q < sdf_n * sdf_m{k}; sdf_q += sdf_ts) {{ /* '{f}' */"
            ));
            self.indent += 1;
            self.line(&format!(
                "const int64_t c = sdf_q / sdf_m{k}; int64_t sdf_v = sdf_q % sdf_m{k};"
            ));
            self.line(&format!(
                "{t}* sdf_b = ({t}*)(sdf_xb + sdf_base + sdf_n * sdf_fo + c * sdf_cb{k});"
            ));
            self.line("const int64_t sdf_r0 = sdf_v;");
            let mut ix = vec!["i0".to_string()];
            for d in (1..=rest.len()).rev() {
                self.line(&format!(
                    "const int64_t i{d} = sdf_v % ({r}); sdf_v /= ({r});",
                    r = rest[d - 1]
                ));
            }
            for d in 1..=rest.len() {
                ix.push(format!("i{d}"));
            }
            self.line("const int64_t i0 = sdf_idx[sdf_off[p] + c];");
            let at = format!("a_{f}[{}]", sc.flat(&ix, &a.strides));
            if send {
                self.line(&format!("sdf_b[sdf_r0] = {at};"));
            } else {
                self.line(&format!("{at} = sdf_b[sdf_r0];"));
            }
            self.indent -= 1;
            self.line("}");
            self.line(&format!("sdf_fo += sdf_cb{k};"));
        }
        self.line("(void)sdf_fo; (void)sdf_base;");
        self.indent -= 1;
        self.line("}");
    }

    /// The loops over one field's strip in direction `sdf_d` (`send`: the owned cells
    /// next to that side, else the halo on that side), copying between the field and the
    /// direction's buffer.
    fn strip(&mut self, sc: &Scope<'_>, x: &Exchange, f: usize, w: i64, send: bool) {
        let name = &x.fields[f];
        let Some(a) = sc.sdfg.arrays.get(name).and_then(|d| d.as_array()) else {
            return;
        };
        let e = x.id;
        let t = ctype(a.dtype);
        let n0 = sc.sym_with(&a.shape[0], SymCheck::Plain);
        let n1 = sc.sym_with(&a.shape[1], SymCheck::Plain);
        let w2 = 2 * w;
        // Per dimension: [lo, hi) of the strip for the direction's component `c`.
        let span = |n: &str, c: &str| -> (String, String) {
            if send {
                (
                    format!("{c} < 0 ? {w} : ({c} == 0 ? {w} : ({n}) - {w2})"),
                    format!("{c} < 0 ? {w2} : ({n}) - {w}"),
                )
            } else {
                (
                    format!("{c} < 0 ? 0 : ({c} == 0 ? {w} : ({n}) - {w})"),
                    format!("{c} < 0 ? {w} : ({c} == 0 ? ({n}) - {w} : ({n}))"),
                )
            }
        };
        let buf = if send { "sb" } else { "rb" };
        self.line(&format!("{{ /* '{name}' */"));
        self.indent += 1;
        let (lo0, hi0) = span(&n0, "di");
        let (lo1, hi1) = span(&n1, "dj");
        self.line(&format!(
            "const int64_t lo0 = {lo0}, hi0 = {hi0}, lo1 = {lo1}, hi1 = {hi1};"
        ));
        self.line(&format!(
            "{t}* restrict sdf_b = ({t}*)(st->x{e}_{buf}[sdf_d] + st->x{e}_off[sdf_d][{f}]);"
        ));
        self.line("int64_t sdf_q = 0;");
        let mut idx = vec!["i0".to_string(), "i1".to_string()];
        self.line("for (int64_t i0 = lo0; i0 < hi0; i0++)");
        self.line("for (int64_t i1 = lo1; i1 < hi1; i1++)");
        for (k, s) in a.shape.iter().enumerate().skip(2) {
            let n = sc.sym_with(s, SymCheck::Plain);
            self.line(&format!("for (int64_t i{k} = 0; i{k} < ({n}); i{k}++)"));
            idx.push(format!("i{k}"));
        }
        let at = format!("a_{name}[{}]", sc.flat(&idx, &a.strides));
        if send {
            self.line(&format!("    sdf_b[sdf_q++] = {at};"));
        } else {
            self.line(&format!("    {at} = sdf_b[sdf_q++];"));
        }
        self.indent -= 1;
        self.line("}");
    }

    /// The start of exchange `x`: the master thread packs and posts (see the module
    /// documentation); the others go on.
    pub(crate) fn exchange_start(&mut self, sc: &Scope<'_>, x: &Exchange) {
        let Some((_, w, _, _)) = structured(x) else {
            self.unstructured(sc, x, true);
            return;
        };
        let e = x.id;
        self.team_line(|t| t.master().into());
        self.line("{");
        self.indent += 1;
        // Messages a run that stopped early left (none otherwise: a finish leaves its
        // requests null).
        self.line(&format!(
            "MPI_Waitall(18, st->x{e}_rq, MPI_STATUSES_IGNORE);"
        ));
        self.line("for (int sdf_d = 0; sdf_d < 9; sdf_d++) {");
        self.indent += 1;
        self.line(&format!(
            "if (st->x{e}_nb[sdf_d] == MPI_PROC_NULL) continue;"
        ));
        self.line("const int64_t di = sdf_d % 3 - 1, dj = sdf_d / 3 - 1;");
        for f in 0..x.fields.len() {
            self.strip(sc, x, f, w, true);
        }
        self.indent -= 1;
        self.line("}");
        self.line("for (int sdf_d = 0; sdf_d < 9; sdf_d++) {");
        self.line(&format!(
            "    st->x{e}_rq[sdf_d] = MPI_REQUEST_NULL; st->x{e}_rq[9 + sdf_d] = MPI_REQUEST_NULL;"
        ));
        self.line(&format!(
            "    if (st->x{e}_nb[sdf_d] == MPI_PROC_NULL) continue;"
        ));
        let nf = x.fields.len();
        self.line(&format!(
            "    MPI_Irecv(st->x{e}_rb[sdf_d], (int)st->x{e}_off[sdf_d][{nf}], MPI_BYTE, st->x{e}_nb[sdf_d], {base} + 8 - sdf_d, st->comm, &st->x{e}_rq[sdf_d]);",
            base = 9 * e
        ));
        self.line("}");
        self.line("for (int sdf_d = 0; sdf_d < 9; sdf_d++) {");
        self.line(&format!(
            "    if (st->x{e}_nb[sdf_d] == MPI_PROC_NULL) continue;"
        ));
        self.line(&format!(
            "    MPI_Isend(st->x{e}_sb[sdf_d], (int)st->x{e}_off[sdf_d][{nf}], MPI_BYTE, st->x{e}_nb[sdf_d], {base} + sdf_d, st->comm, &st->x{e}_rq[9 + sdf_d]);",
            base = 9 * e
        ));
        self.line("}");
        self.indent -= 1;
        self.line("}");
    }

    /// The finish of exchange `x`: the master thread waits for its messages, checks
    /// their sizes (an error names the fields, the direction and both sizes) and unpacks
    /// them into the halos.
    pub(crate) fn exchange_finish(&mut self, sc: &Scope<'_>, x: &Exchange) {
        let Some((_, w, _, _)) = structured(x) else {
            self.unstructured(sc, x, false);
            return;
        };
        let e = x.id;
        let here = sc.at(LocPart::Text(format!("halo exchange #{e}")));
        let mut sites = Vec::new();
        for d in 0..9i64 {
            sites.push(if d == 4 {
                0
            } else {
                here.site(SiteKind::Exchange {
                    fields: x.fields.clone(),
                    direction: Some([d % 3 - 1, d / 3 - 1]),
                })
            });
        }
        let sites: Vec<String> = sites.iter().map(|s| s.to_string()).collect();
        self.team_line(|t| t.master().into());
        self.line("{");
        self.indent += 1;
        self.line(&format!(
            "static const int64_t sdf_xs[9] = {{{}}};",
            sites.join(", ")
        ));
        self.line("MPI_Status sdf_st[18];");
        self.line(&format!(
            "const int sdf_rc = MPI_Waitall(18, st->x{e}_rq, sdf_st);"
        ));
        let nf = x.fields.len();
        self.line("for (int sdf_d = 0; sdf_d < 9; sdf_d++) {");
        self.indent += 1;
        self.line(&format!(
            "if (st->x{e}_nb[sdf_d] == MPI_PROC_NULL) continue;"
        ));
        self.line("if (sdf_rc != MPI_SUCCESS) {");
        self.line("    const int sdf_er = sdf_rc == MPI_ERR_IN_STATUS ? sdf_st[sdf_d].MPI_ERROR : sdf_rc;");
        self.line(
            "    if (sdf_er != MPI_SUCCESS) { sdf_raise(sdf_xs[sdf_d], -1, sdf_er); break; }",
        );
        self.line("}");
        self.line("int sdf_n = 0; MPI_Get_count(&sdf_st[sdf_d], MPI_BYTE, &sdf_n);");
        self.line(&format!(
            "if (sdf_n != st->x{e}_off[sdf_d][{nf}]) {{ sdf_raise(sdf_xs[sdf_d], sdf_n, st->x{e}_off[sdf_d][{nf}]); break; }}"
        ));
        self.indent -= 1;
        self.line("}");
        self.line("if (!sdf_e->failed) for (int sdf_d = 0; sdf_d < 9; sdf_d++) {");
        self.indent += 1;
        self.line(&format!(
            "if (st->x{e}_nb[sdf_d] == MPI_PROC_NULL) continue;"
        ));
        self.line("const int64_t di = sdf_d % 3 - 1, dj = sdf_d / 3 - 1;");
        for f in 0..x.fields.len() {
            self.strip(sc, x, f, w, false);
        }
        self.indent -= 1;
        self.line("}");
        self.indent -= 1;
        self.line("}");
    }
}

impl Emitter<'_> {
    /// The start (`start`) or the finish of an unstructured exchange, on the master
    /// thread: per rank with cells to send, pack them (each cell's values of every field,
    /// a field's padded to 8 bytes) and post the receives and sends; or wait, check the
    /// messages' sizes and unpack into the halo cells.
    fn unstructured(&mut self, sc: &Scope<'_>, x: &Exchange, start: bool) {
        let Some((g, o)) = lists(x) else {
            return;
        };
        let e = x.id;
        let us = schedule(g, o);
        // Per field: its type, the C text of its values per cell, its strides.
        let fields = cell_fields(sc, x, "(", ")");
        let cell_bytes: Vec<String> = fields
            .iter()
            .map(|(_, a, rest)| {
                let n = if rest.is_empty() {
                    "1".to_string()
                } else {
                    rest.join(" * ")
                };
                format!(
                    "((({n}) * (int64_t)sizeof({}) + 7) / 8 * 8)",
                    ctype(a.dtype)
                )
            })
            .collect();
        let site = if start {
            0
        } else {
            sc.at(LocPart::Text(format!("halo exchange #{e}")))
                .site(SiteKind::Exchange {
                    fields: x.fields.clone(),
                    direction: None,
                })
        };
        let oom =
            sc.at(LocPart::Text(format!("halo exchange #{e}")))
                .site(SiteKind::ExchangeCall {
                    call: "allocating the exchange's buffers".into(),
                });
        self.team_line(|t| t.master().into());
        self.line("{");
        self.indent += 1;
        self.line(&format!("const sdf_usched* sdf_s = &st->{us};"));
        self.line(&format!(
            "const int64_t sdf_cb[{}] = {{{}}};",
            cell_bytes.len().max(1),
            if cell_bytes.is_empty() {
                "0".to_string()
            } else {
                cell_bytes.join(", ")
            }
        ));
        self.line("int64_t sdf_B = 0;");
        self.line(&format!(
            "for (int f = 0; f < {}; f++) sdf_B += sdf_cb[f];",
            fields.len()
        ));
        let (cnt, off, idx, buf, cap) = if start {
            ("scnt", "soff", "sidx", "sb", "scap")
        } else {
            ("rcnt", "roff", "ridx", "rb", "rcap")
        };
        if start {
            self.line(&format!(
                "MPI_Waitall(2 * st->size, st->x{e}_rq, MPI_STATUSES_IGNORE);"
            ));
            for (b, c, o2) in [("sb", "scap", "soff"), ("rb", "rcap", "roff")] {
                self.line(&format!(
                    "if (sdf_s->{o2}[st->size] * sdf_B > st->x{e}_{c}) {{ free(st->x{e}_{b}); st->x{e}_{c} = sdf_s->{o2}[st->size] * sdf_B; st->x{e}_{b} = (char*)malloc((size_t)(st->x{e}_{c} > 0 ? st->x{e}_{c} : 1)); if (!st->x{e}_{b}) {{ st->x{e}_{c} = 0; sdf_raise({oom}, 0, 0); }} }}"
                ));
            }
            let big =
                sc.at(LocPart::Text(format!("halo exchange #{e}")))
                    .site(SiteKind::ExchangeCall {
                        call: "a message of more than 2 GiB".into(),
                    });
            self.line(&format!(
                "for (int p = 0; p < st->size; p++) if ((sdf_s->scnt[p] > sdf_s->rcnt[p] ? sdf_s->scnt[p] : sdf_s->rcnt[p]) * sdf_B > INT32_MAX) {{ sdf_raise({big}, MPI_ERR_COUNT, 0); break; }}"
            ));
            self.line("if (!sdf_e->failed) {");
        } else {
            self.line(&format!(
                "const int sdf_rc = MPI_Waitall(2 * st->size, st->x{e}_rq, st->x{e}_st);"
            ));
            self.line("for (int p = 0; p < st->size && !sdf_e->failed; p++) {");
            self.line("    if (sdf_s->rcnt[p] == 0) continue;");
            self.line("    sdf_pv[0] = p;");
            self.line(&format!("    const int sdf_er = sdf_rc == MPI_ERR_IN_STATUS ? st->x{e}_st[p].MPI_ERROR : sdf_rc;"));
            self.line(&format!("    if (sdf_rc != MPI_SUCCESS && sdf_er != MPI_SUCCESS) {{ sdf_raise({site}, -1, sdf_er); break; }}"));
            self.line(&format!(
                "    int sdf_n = 0; MPI_Get_count(&st->x{e}_st[p], MPI_BYTE, &sdf_n);"
            ));
            self.line(&format!("    if (sdf_n != sdf_s->rcnt[p] * sdf_B) {{ sdf_raise({site}, sdf_n, sdf_s->rcnt[p] * sdf_B); break; }}"));
            self.line("}");
            self.line("if (!sdf_e->failed) {");
        }
        self.indent += 1;
        self.line("for (int p = 0; p < st->size; p++) {");
        self.indent += 1;
        self.line(&format!(
            "const int64_t sdf_n = sdf_s->{cnt}[p], sdf_base = sdf_s->{off}[p] * sdf_B;"
        ));
        self.line("int64_t sdf_fo = 0;");
        for (k, (f, a, rest)) in fields.iter().enumerate() {
            let t = ctype(a.dtype);
            self.line(&format!(
                "for (int64_t c = 0; c < sdf_n; c++) {{ /* '{f}' */"
            ));
            self.indent += 1;
            self.line(&format!(
                "const int64_t i0 = sdf_s->{idx}[sdf_s->{off}[p] + c];"
            ));
            self.line(&format!(
                "{t}* restrict sdf_b = ({t}*)(st->x{e}_{buf} + sdf_base + sdf_n * sdf_fo + c * sdf_cb[{k}]);"
            ));
            self.line("int64_t sdf_q = 0;");
            let mut ix = vec!["i0".to_string()];
            for (d, n) in rest.iter().enumerate() {
                let d = d + 1;
                self.line(&format!("for (int64_t i{d} = 0; i{d} < {n}; i{d}++)"));
                ix.push(format!("i{d}"));
            }
            let at = format!("a_{f}[{}]", sc.flat(&ix, &a.strides));
            if start {
                self.line(&format!("    sdf_b[sdf_q++] = {at};"));
            } else {
                self.line(&format!("    {at} = sdf_b[sdf_q++];"));
            }
            self.line("(void)sdf_q;");
            self.indent -= 1;
            self.line("}");
            self.line(&format!("sdf_fo += sdf_cb[{k}];"));
        }
        self.line("(void)sdf_fo; (void)sdf_base;");
        self.indent -= 1;
        self.line("}");
        if start {
            self.line(
                "for (int p = 0; p < 2 * st->size; p++) st->x{e}_rq[p] = MPI_REQUEST_NULL;"
                    .replace("{e}", &e.to_string())
                    .as_str(),
            );
            for (c, o2, b, call, slot) in [
                ("rcnt", "roff", "rb", "MPI_Irecv", "p"),
                ("scnt", "soff", "sb", "MPI_Isend", "st->size + p"),
            ] {
                self.line(&format!(
                    "for (int p = 0; p < st->size; p++) if (sdf_s->{c}[p] > 0) {call}(st->x{e}_{b} + sdf_s->{o2}[p] * sdf_B, (int)(sdf_s->{c}[p] * sdf_B), MPI_BYTE, p, {tag}, st->comm, &st->x{e}_rq[{slot}]);",
                    tag = 9 * e
                ));
            }
        }
        self.indent -= 1;
        self.line("}");
        self.indent -= 1;
        self.line("}");
        let _ = cap;
    }
}

/// The part of `sdflow_run` before its parallel region that makes (or keeps) the
/// schedules of the unstructured exchanges, and checks that their fields' first extents
/// are the lists' length. An error fills the state's error record and returns 3.
pub(crate) fn schedule_text(
    frame: &Frame<'_>,
    exchanges: &[&Exchange],
    site: &mut dyn FnMut(SiteKind) -> usize,
) -> Result<String, CodegenError> {
    let pairs = list_pairs(exchanges);
    let mut out = String::new();
    if pairs.is_empty() {
        return Ok(out);
    }
    let sig = &frame.plan.signature;
    out.push_str("    {\n");
    frame.symbol_decls(&mut out, "      ");
    out.push_str("      int64_t sdf_bad[4] = {0, 0, 0, 0}; int sdf_k = 0; int64_t sdf_site = 0;\n");
    for (g, o) in &pairs {
        let us = schedule(g, o);
        let arg = |name: &str| -> Result<(usize, DType, &SymExpr), CodegenError> {
            let k = sig
                .arrays
                .iter()
                .position(|a| a.name == name)
                .ok_or_else(|| {
                    CodegenError::Unsupported(format!(
                        "the exchange's list '{name}' is not an argument"
                    ))
                })?;
            let d = frame
                .sdfg
                .arrays
                .get(name)
                .and_then(|d| d.as_array())
                .ok_or_else(|| {
                    CodegenError::Unsupported(format!(
                        "the exchange's list '{name}' is not an array"
                    ))
                })?;
            Ok((k, d.dtype, &d.shape[0]))
        };
        let ((kg, tg, n), (ko, to, _)) = (arg(g)?, arg(o)?);
        let owner_site = site(SiteKind::ExchangeOwner {
            ranks: exchanges
                .iter()
                .find(|x| lists(x) == Some((g, o)))
                .map_or(0, |x| x.decomposition.size()),
        });
        let owned_site = site(SiteKind::ExchangeNotOwned);
        let call_site = site(SiteKind::ExchangeCall {
            call: format!("making the schedule of the exchanges by '{g}' and '{o}'"),
        });
        let _ = writeln!(
            out,
            "      {{ /* the schedule of the exchanges by '{g}' and '{o}' */\n        \
             const {tg_}* g = (const {tg_}*)args[{kg}]; const {to_}* o = (const {to_}*)args[{ko}];\n        \
             const int64_t n = {n_};\n        \
             uint64_t h = 1469598103934665603ULL ^ (uint64_t)n;\n        \
             for (int64_t l = 0; l < n; l++) {{ h = (h ^ (uint64_t)(int64_t)g[l]) * 1099511628211ULL; h = (h ^ (uint64_t)(int64_t)o[l]) * 1099511628211ULL; }}\n        \
             int changed = !st->{us}.built || st->{us}.hash != h, any = 0;\n        \
             const int rc = MPI_Allreduce(&changed, &any, 1, MPI_INT, MPI_MAX, st->comm);\n        \
             if (rc != MPI_SUCCESS) {{ sdf_k = 3; sdf_bad[0] = rc; }}\n        \
             else if (any) {{\n          \
             int64_t* g64 = (int64_t*)sdf_us_alloc(n); int64_t* o64 = (int64_t*)sdf_us_alloc(n);\n          \
             if (!g64 || !o64) sdf_k = 3;\n          \
             else {{ for (int64_t l = 0; l < n; l++) {{ g64[l] = (int64_t)g[l]; o64[l] = (int64_t)o[l]; }}\n            \
             sdf_k = sdf_us_build(&st->{us}, st->comm, st->rank, st->size, g64, o64, n, sdf_bad); }}\n          \
             free(g64); free(o64);\n          \
             if (sdf_k == 0) st->{us}.hash = h; else st->{us}.built = 0;\n        }}\n        \
             if (sdf_k != 0) sdf_site = sdf_k == 1 ? {owner_site} : sdf_k == 2 ? {owned_site} : {call_site};",
            tg_ = ctype(tg),
            to_ = ctype(to),
            n_ = frame.plain(n),
        );
        // The fields' first extents.
        for x in exchanges.iter().filter(|x| lists(x) == Some((g, o))) {
            for f in &x.fields {
                let Some(d) = frame.sdfg.arrays.get(f).and_then(|d| d.as_array()) else {
                    continue;
                };
                let ext = site(SiteKind::ExchangeExtent {
                    field: f.clone(),
                    global: g.clone(),
                });
                let _ = writeln!(
                    out,
                    "        if (sdf_k == 0 && ({e0}) != n) {{ sdf_k = 4; sdf_site = {ext}; sdf_bad[0] = {e0}; sdf_bad[1] = n; sdf_bad[2] = 0; sdf_bad[3] = st->rank; }}",
                    e0 = frame.plain(&d.shape[0]),
                );
            }
        }
        out.push_str("      }\n");
        out.push_str(
            "      if (sdf_k != 0) { memset(&st->err, 0, sizeof st->err); st->err.failed = 1; st->err.site = sdf_site; st->err.v0 = sdf_bad[0]; st->err.v1 = sdf_bad[1]; st->err.p[0] = sdf_bad[2]; st->err.p[1] = sdf_bad[3]; return 3; }\n",
        );
    }
    out.push_str("    }\n");
    Ok(out)
}
