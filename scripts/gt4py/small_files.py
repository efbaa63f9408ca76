"""Write the three small DaCe 2.0.0a10 files of `tests/dace/small/` that stand for the GT4Py
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
