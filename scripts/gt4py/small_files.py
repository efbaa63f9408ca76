"""Write the small DaCe 2.0.0a10 files of `tests/dace/small/` that stand for the GT4Py
import failures (run with the generator's environment: `.venv/bin/python small_files.py OUT`).

* `symbol_assumptions.sdfg`: a nested SDFG whose `symbol_mapping` DaCe prints in SymPy's form
  with a type and assumptions, `symbol($s, dtype=dace.float64, …, real=True)`, as GT4Py's
  lowering of scalar parameters into nested SDFGs is printed. B[i] = A[i] * s + n.
* `unordered_writes.sdfg`: one state in which two maps write B through two access nodes with
  no path between them, `B[0:min(k, N)]` and `B[max(0, k):N]`: disjoint for every k, but
  only under conditions on the runtime symbol k (GT4Py's `concat_where`). B[i] = A[i] + 1
  below k, A[i] * 2 from k on.
* `wide_read_window.sdfg`: a map over i whose nested SDFG reads a[M - 1 - j] (M = N,
  j = i) through the connector memlet A[0:i + 1], narrower than what the callee addresses
  from DaCe's pointer at A[0] (GT4Py's auto-optimized `geofac_n2s_c[0:i - r0 + 1]`).
  B[i] = 2 A[N - 1 - i].
* `float_symbol_values.sdfg`: nested SDFGs whose float symbols are mapped to expressions and
  literals, as GT4Py maps the values of its scalar lambdas (`1/a*1/b*(b - a)`) and the scalar
  branch of a `concat_where` (`0`): `mid` gets u = 1/s*1/t*(t - s) and z = 0 from the
  program; `leaf`, inside `mid`, gets w = u (passed on) and v = 2*u + z.
  B[i] = (A[i] + v) * w (no multiply-add for the C compiler to contract).
"""

import sys
from pathlib import Path

import dace

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)

# -- symbol_assumptions ----------------------------------------------------------------------
N = dace.symbol("N")
inner = dace.SDFG("scale")
M = dace.symbol("M")
inner.add_symbol("s_in", dace.float64)
inner.add_symbol("m_in", dace.int32)
inner.add_array("a", [M], dace.float64)
inner.add_array("b", [M], dace.float64)
ist = inner.add_state("body")
ist.add_mapped_tasklet(
    "scale",
    dict(j="0:M"),
    dict(x=dace.Memlet("a[j]")),
    "y = x * s_in + m_in",
    dict(y=dace.Memlet("b[j]")),
    external_edges=True,
)
outer = dace.SDFG("symbol_assumptions")
outer.add_symbol("s", dace.float64)
outer.add_symbol("n", dace.int32)
outer.add_array("A", [N], dace.float64)
outer.add_array("B", [N], dace.float64)
st = outer.add_state("call")
nested = st.add_nested_sdfg(
    inner,
    {"a"},
    {"b"},
    symbol_mapping={
        "M": N,
        "s_in": dace.symbol("s", dace.float64, real=True, finite=True, positive=True),
        "m_in": dace.symbol("n", dace.int32, nonnegative=True),
    },
)
st.add_edge(st.add_read("A"), None, nested, "a", dace.Memlet("A[0:N]"))
st.add_edge(nested, "b", st.add_write("B"), None, dace.Memlet("B[0:N]"))
outer.validate()
outer.save(str(out / "symbol_assumptions.sdfg"))

# -- unordered_writes ------------------------------------------------------------------------
K = dace.symbol("k")
sdfg = dace.SDFG("unordered_writes")
sdfg.add_symbol("k", dace.int32)
sdfg.add_array("A", [N], dace.float64)
sdfg.add_array("B", [N], dace.float64)
st = sdfg.add_state("both")
st.add_mapped_tasklet(
    "below", dict(i="0:min(k, N)"), dict(a=dace.Memlet("A[i]")), "b = a + 1",
    dict(b=dace.Memlet("B[i]")), external_edges=True,
)
st.add_mapped_tasklet(
    "above", dict(i="max(0, k):N"), dict(a=dace.Memlet("A[i]")), "b = a * 2",
    dict(b=dace.Memlet("B[i]")), external_edges=True,
)
sdfg.validate()
sdfg.save(str(out / "unordered_writes.sdfg"))

# -- wide_read_window ------------------------------------------------------------------------
rev = dace.SDFG("reverse_read")
rev.add_symbol("M", dace.int64)
rev.add_symbol("j", dace.int64)
rev.add_array("a", [M], dace.float64)
rev.add_array("b", [1], dace.float64)
rst = rev.add_state("body")
t = rst.add_tasklet("rev", {"x"}, {"y"}, "y = x * 2")
rst.add_edge(rst.add_read("a"), None, t, "x", dace.Memlet("a[M - 1 - j]"))
rst.add_edge(t, "y", rst.add_write("b"), None, dace.Memlet("b[0]"))
wide = dace.SDFG("wide_read_window")
wide.add_array("A", [N], dace.float64)
wide.add_array("B", [N], dace.float64)
st = wide.add_state("call")
me, mx = st.add_map("over", dict(i="0:N"))
nested = st.add_nested_sdfg(rev, {"a"}, {"b"}, symbol_mapping={"M": N, "j": dace.symbol("i")})
st.add_memlet_path(st.add_read("A"), me, nested, dst_conn="a", memlet=dace.Memlet("A[0:i + 1]"))
st.add_memlet_path(nested, mx, st.add_write("B"), src_conn="b", memlet=dace.Memlet("B[i]"))
# The map's outer edges cover the whole arrays (add_memlet_path propagated the window).
for e in st.in_edges(me):
    e.data = dace.Memlet("A[0:N]")
for e in st.out_edges(mx):
    e.data = dace.Memlet("B[0:N]")
wide.validate()
wide.save(str(out / "wide_read_window.sdfg"))

# -- float_symbol_values ---------------------------------------------------------------------
leaf = dace.SDFG("leaf")
leaf.add_symbol("w", dace.float64)
leaf.add_symbol("v", dace.float64)
leaf.add_array("a", [M], dace.float64)
leaf.add_array("b", [M], dace.float64)
lst = leaf.add_state("body")
lst.add_mapped_tasklet(
    "affine", dict(j="0:M"), dict(x=dace.Memlet("a[j]")), "y = (x + v) * w",
    dict(y=dace.Memlet("b[j]")), external_edges=True,
)
mid = dace.SDFG("mid")
mid.add_symbol("u", dace.float64)
mid.add_symbol("z", dace.float64)
mid.add_array("a", [M], dace.float64)
mid.add_array("b", [M], dace.float64)
mst = mid.add_state("call")
u = dace.symbol("u", dace.float64)
zs = dace.symbol("z", dace.float64)
mnested = mst.add_nested_sdfg(
    leaf, {"a"}, {"b"}, symbol_mapping={"M": M, "w": u, "v": 2 * u + zs}
)
mst.add_edge(mst.add_read("a"), None, mnested, "a", dace.Memlet("a[0:M]"))
mst.add_edge(mnested, "b", mst.add_write("b"), None, dace.Memlet("b[0:M]"))
fsv = dace.SDFG("float_symbol_values")
fsv.add_symbol("s", dace.float64)
fsv.add_symbol("t", dace.float64)
fsv.add_array("A", [N], dace.float64)
fsv.add_array("B", [N], dace.float64)
fst = fsv.add_state("call")
s_, t_ = dace.symbol("s", dace.float64), dace.symbol("t", dace.float64)
fnested = fst.add_nested_sdfg(
    mid, {"a"}, {"b"}, symbol_mapping={"M": N, "u": 1 / s_ * 1 / t_ * (t_ - s_), "z": 0}
)
fst.add_edge(fst.add_read("A"), None, fnested, "a", dace.Memlet("A[0:N]"))
fst.add_edge(fnested, "b", fst.add_write("B"), None, dace.Memlet("B[0:N]"))
fsv.validate()
fsv.save(str(out / "float_symbol_values.sdfg"))

# What DaCe computes, for the test.
import numpy as np

A = np.arange(8, dtype=np.float64)
B = np.zeros(8)
outer(A=A, B=B, N=8, s=0.5, n=3)
print("symbol_assumptions:", B.tolist())
B = np.zeros(8)
sdfg(A=A, B=B, N=8, k=3)
print("unordered_writes:", B.tolist())
A = np.arange(8, dtype=np.float64) + 1
B = np.zeros(8)
wide(A=A, B=B, N=8)
print("wide_read_window:", B.tolist())
A = np.arange(8, dtype=np.float64)
B = np.zeros(8)
fsv(A=A, B=B, N=8, s=0.5, t=3.0)
print("float_symbol_values:", B.tolist())
