"""ICON4Py's diffusion granule (`Diffusion` of icon4py-atmosphere-diffusion 0.4.1) on
`sdflow.gt4py.cpu`, set up by `scripts/gt4py/granule.py` on ICON4Py's simple grid, against
the references GT4Py's gtfn backend computed (`tests/gt4py/granule/diffusion_simple.npz`,
written by `scripts/gt4py/granule_refs.py`): per program, and with the whole step
orchestrated into one program.
"""

from __future__ import annotations

import json
import pathlib
import sys

import numpy as np
import pytest

import sdflow
import sdflow.gt4py

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "gt4py"))

import granule as G  # noqa: E402
import granule_refs as R  # noqa: E402

REFS = np.load(ROOT / "tests" / "gt4py" / "granule" / "diffusion_simple.npz")
META = json.loads(str(REFS["meta_json"]))


def make(backend=sdflow.gt4py.cpu):
    grid = G.make_grid("simple", num_levels=META["nlev"])
    g = G.make_granule(grid, backend, META["seed"])
    # The references were computed from these very inputs.
    assert R.inputs_sha256(g.inputs) == str(REFS["inputs_sha256"])
    return g


def assert_equals_gtfn(arrays, step):
    """Bit for bit where gtfn and GT4Py's embedded execution agree, else 1e-12 relative."""
    for field, got in arrays.items():
        key = f"{field}__{step}"
        want = REFS[f"gtfn__{key}"]
        assert got.shape == want.shape, key
        if META["gtfn_equals_embedded"][key] is True:
            assert np.array_equal(got, want), f"{key}: largest difference {np.abs(got - want).max():.3e}"
        else:
            scale = max(np.abs(want).max(), np.finfo(float).tiny)
            assert np.abs(got - want).max() / scale <= 1e-12, key


def init_arrays(g):
    return {name: getattr(g.diffusion, name).asnumpy() for name in META["init_fields"]}


@pytest.fixture(scope="module")
def per_program():
    return make()


def test_the_granule_set_up_on_sdflow_equals_gtfns(per_program):
    # Diffusion.__init__'s own programs (init_diffusion_local_fields_for_regular_timestep,
    # init_nabla2_factor_in_upper_damping_zone, …) ran on sdflow.
    assert_equals_gtfn(init_arrays(per_program), 0)


def test_diffusion_steps_on_sdflow_equal_gtfns(per_program):
    for step in range(1, META["steps"] + 1):
        G.run_steps(per_program, 1)
        if step in META["kept"]:
            assert_equals_gtfn(G.state_arrays(per_program), step)


def test_the_orchestrated_step_equals_the_program_by_program_step():
    ref = make()
    g = make()
    d = g.diffusion
    # The granule's work fields, written within a step before they are read: transients
    # of the composed program.
    scratch = [d.u_vert, d.v_vert, d.kh_smag_e, d.kh_smag_ec, d.z_nabla2_e, d.diff_multfac_smag]
    run = sdflow.gt4py.orchestrate(d.run, scratch=scratch)
    d.run = run
    for step in range(1, META["steps"] + 1):
        G.run_steps(ref, 1)
        G.run_steps(g, 1)
        assert run.why_not is None
        # The first step runs program by program while it is recorded; the others are one
        # call of the composed program.
        assert run.steps_composed == step - 1
        got, want = G.state_arrays(g), G.state_arrays(ref)
        for field in want:
            assert np.array_equal(got[field], want[field]), (step, field)
        if step in META["kept"]:
            assert_equals_gtfn(got, step)
    # The reference interpreter runs the composed step too (a callee argument that the
    # callee does not use, `nudgecoeff_e` here, is left out of its call): from the same
    # state, with its work fields fresh, the same bits as the compiled step.
    c = run.composed
    before = {k: np.array(v) for k, v in c.arrays.items()}
    interpreted = {k: v.copy() for k, v in before.items()}
    c.program.compile("interp")(**interpreted, **dict(zip(c.float_symbols, c.floats)))
    c.rerun()
    for k in before:
        assert np.array_equal(interpreted[k], c.arrays[k]), k
    assert any(not np.array_equal(before[k], c.arrays[k]) for k in before)
    G.run_steps(ref, 1)  # the step `rerun` took
    # The containers of the work fields (named after the first parameter that passes
    # them) are not arguments of the composed program.
    assert run.composed.scratch == ["kh_smag_e", "kh_smag_ec", "p_u_out", "p_v_out", "scaled_field", "z_nabla2_e"]
    assert not set(run.composed.scratch) & set(run.composed.program.arguments)
    # One program: the step's GT4Py programs inlined and fused across their boundaries
    # (GT4Py lowers them to 269 maps in 34 nested SDFGs); the per-point `if`s of two
    # map bodies become both branches and a select, spliced into their maps.
    before = run.composed.program.stats()
    optimized, report = run.composed.program.optimize()
    after = optimized.stats()
    assert before["nested"] > 30 and before["maps"] > 200, before
    assert after["nested"] == 0 and after["maps"] <= 20, after
    assert f"nested_inlined={before['nested'] - 2}" in str(report), str(report)
    assert "nested_inlined_in_maps=2" in str(report) and "nested_ifs_selected=2" in str(report)

    # Replayed (`replay`): the granule's run is called with the same states and time step
    # every step, so every step after the one that records runs the composed program
    # without calling Diffusion.run again; the same bits as the steps program by program.
    replayed = sdflow.gt4py.orchestrate(run.fn, scratch=scratch, replay=True)
    d.run = replayed
    for k in range(3):
        G.run_steps(ref, 1)
        G.run_steps(g, 1)
        assert replayed.why_not is None
        assert (replayed.steps_composed, replayed.steps_replayed) == (k, k)
        got, want = G.state_arrays(g), G.state_arrays(ref)
        for field in want:
            assert np.array_equal(got[field], want[field]), ("replayed", k, field)

