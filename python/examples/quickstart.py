"""sdflow from Python: load, optimize, compile and call a stencil program, then call an
ICON4Py diffusion stencil that GT4Py's DaCe backend lowered (from tests/gt4py), and
check both against their references.

Run from the repository root after `pip install ./python`:
    python python/examples/quickstart.py
"""

import json
import pathlib

import numpy as np

import sdflow

ROOT = pathlib.Path(__file__).resolve().parents[2]

# 1. A program of sdflow's own JSON format.
prog = sdflow.load(ROOT / "examples" / "hyperdiffusion.sdfg.json")
opt, report = prog.optimize()
print(report)
run = opt.compile("cpu")
u = np.random.default_rng(0).standard_normal((128, 128))
out, ref = np.zeros_like(u), np.zeros_like(u)
run(u=u, out=out, alpha=0.05)
prog.compile("interp")(u=u, out=ref, alpha=0.05)
assert np.array_equal(out, ref)
step = run.bind(u=u, out=out, alpha=0.05)
for t in range(10):
    step(alpha=0.05 / (t + 1))
print("hyperdiffusion: compiled equals the interpreter bit for bit")

# 2. An ICON4Py stencil as GT4Py 1.2.1 lowered it to an SDFG, with GT4Py's own inputs.
name = "apply_nabla2_to_w"
npz = np.load(ROOT / "tests" / "gt4py" / f"{name}.simple.npz")
sdfg = sdflow.load(ROOT / "tests" / "gt4py" / f"{name}.simple.dace.lowered.sdfgz")
stencil = sdfg.optimize()[0].compile("cpu")
args = {}
for a in sdfg.arguments:
    if a.startswith("gt_conn_"):
        args[a] = np.array(npz["conn__" + a[len("gt_conn_"):]])
    elif "in__" + a in npz.files:
        v = np.array(npz["in__" + a])
        args[a] = v.item() if v.ndim == 0 and a in sdfg.symbols else v
for s in sdfg.symbols:
    if s not in args and "in__" + s in npz.files:
        args[s] = np.array(npz["in__" + s]).item()
stencil(**args)
field = json.loads(str(npz["meta_json"]))["outputs"][0]
assert np.array_equal(args[field], npz[f"out__gtfn__{field}"])
print(f"{name}: '{field}' equals GT4Py's gtfn backend bit for bit")
