"""Writes the references of ICON4Py's diffusion granule on the simple grid, as GT4Py's own
backends compute them: `tests/gt4py/granule/diffusion_simple.npz` (or the path given).

Run from the repository root, in the generator's environment (`scripts/gt4py/env.sh`):

    PATH=$PWD/scripts/gt4py/.venv/bin:$PATH \\
        scripts/gt4py/.venv/bin/python scripts/gt4py/granule_refs.py [OUT.npz]

The granule is `granule.make_granule(make_grid("simple", 10), backend, seed=42)` (see
`granule.py`), run for `STEPS` regular steps with GT4Py's `gtfn_cpu` and with GT4Py's
embedded execution. The file holds, for each backend `b` in (gtfn, embedded) and each
step `s` in `KEPT`:

* `b__<field>__<s>`: the state fields of `granule.STATE_FIELDS` after step `s`;
* `b__<name>__0`: what `Diffusion.__init__` computes (`INIT_FIELDS`), before any step;
* `inputs_sha256`: the SHA-256 of every drawn input (name order, float64 bytes), so a test
  knows it starts from the same inputs;
* `meta_json`: versions, seed, levels, steps, and per field and step whether gtfn and
  embedded agree bit for bit (else their largest relative difference).

sdflow's tests (`python/tests_gt4py/test_granule.py`) compare against gtfn: bit for bit
where gtfn and embedded agree, else within 1e-12 relative. CI reads the file and builds
neither gtfn nor the embedded granule.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import sys
import time
import warnings

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "gt4py"))

warnings.filterwarnings("ignore", message=".*Using Python execution.*")

SEED, NLEV, STEPS = 42, 10, 3
KEPT = (1, 3)
INIT_FIELDS = ("diff_multfac_vn", "diff_multfac_n2w", "smag_limit", "enh_smag_fac")


def inputs_sha256(inputs: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(inputs):
        h.update(name.encode())
        h.update(np.ascontiguousarray(inputs[name], dtype=np.float64).tobytes())
    return h.hexdigest()


def run(backend, grid) -> tuple[dict[str, np.ndarray], str]:
    import granule as G

    g = G.make_granule(grid, backend, SEED)
    out = {f"{name}__0": getattr(g.diffusion, name).asnumpy().copy() for name in INIT_FIELDS}
    for step in range(1, STEPS + 1):
        G.run_steps(g, 1)
        if step in KEPT:
            out.update({f"{f}__{step}": a for f, a in G.state_arrays(g).items()})
    return out, inputs_sha256(g.inputs)


def main() -> int:
    import gt4py
    import granule as G
    from gt4py.next.program_processors.runners import gtfn

    path = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests/gt4py/granule/diffusion_simple.npz"
    grid = G.make_grid("simple", num_levels=NLEV)
    t = time.perf_counter()
    gt, digest = run(gtfn.run_gtfn, grid)
    print(f"gtfn: {time.perf_counter() - t:.1f} s (compiling included)")
    emb, digest_e = run(None, grid)
    assert digest == digest_e, "embedded and gtfn granules drew different inputs"
    agree = {}
    for key in gt:
        a, b = gt[key], emb[key]
        scale = float(np.abs(a).max()) or 1.0
        agree[key] = (
            True if np.array_equal(a, b) else float(np.abs(a - b).max() / scale)
        )
    meta = {
        "granule": "icon4py.model.atmosphere.diffusion.diffusion.Diffusion",
        "grid": "simple",
        "nlev": NLEV,
        "seed": SEED,
        "steps": STEPS,
        "kept": list(KEPT),
        "init_fields": list(INIT_FIELDS),
        "state_fields": list(G.STATE_FIELDS),
        "gt4py": gt4py.__version__,
        "icon4py_diffusion": _version("icon4py-atmosphere-diffusion"),
        "numpy": np.__version__,
        "gtfn_equals_embedded": agree,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        path,
        inputs_sha256=np.array(digest),
        meta_json=np.array(json.dumps(meta, indent=1)),
        **{f"gtfn__{k}": v for k, v in gt.items()},
        **{f"embedded__{k}": v for k, v in emb.items()},
    )
    differ = {k: v for k, v in agree.items() if v is not True}
    print(f"wrote {path}; gtfn and embedded differ in {len(differ)} of {len(agree)} arrays")
    for k, v in differ.items():
        print(f"  {k}: largest relative difference {v:.3e}")
    return 0


def _version(dist: str) -> str:
    from importlib import metadata

    return metadata.version(dist)


if __name__ == "__main__":
    sys.exit(main())
