"""Write the two small DaCe 2.0.0a10 files of `tests/dace/small/` that stand for the GT4Py
import failures (run with the generator's environment: `.venv/bin/python small_files.py OUT`).

* `symbol_assumptions.sdfg`: a nested SDFG whose `symbol_mapping` DaCe prints in SymPy's form
  with a type and assumptions, `symbol($s, dtype=dace.float64, …, real=True)`, as GT4Py's
  lowering of scalar parameters into nested SDFGs is printed. B[i] = A[i] * s + n.
* `unordered_writes.sdfg`: one state in which two maps write B through two access nodes with
  no path between them, `B[0:min(k, N)]` and `B[max(0, k):N]`: disjoint for every k, but
  only under conditions on the runtime symbol k (GT4Py's `concat_where`). B[i] = A[i] + 1
  below k, A[i] * 2 from k on.
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

# What DaCe computes, for the test.
import numpy as np

A = np.arange(8, dtype=np.float64)
B = np.zeros(8)
outer(A=A, B=B, N=8, s=0.5, n=3)
print("symbol_assumptions:", B.tolist())
B = np.zeros(8)
sdfg(A=A, B=B, N=8, k=3)
print("unordered_writes:", B.tolist())
