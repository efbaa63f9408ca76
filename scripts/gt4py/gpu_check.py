"""sdflow's GT4Py GPU backend (`sdflow.gt4py.gpu`) with CuPy fields, on a machine with an
NVIDIA GPU, CuPy and the GT4Py environment of `scripts/gt4py/env.sh`:

    python -O scripts/gt4py/gpu_check.py [--steps 3] [--copies 0] [--host-fields]

1. Every diffusion program of the corpus (`tests/gt4py/*.simple.npz`) through
   `program.with_backend(sdflow.gt4py.gpu)` with its fields allocated by the backend
   (CuPy arrays), against the stored GT4Py references.
2. The host's time per call: calls enqueued back to back (the host does not wait), and
   each call followed by a wait for the device.
3. ICON4Py's diffusion granule on the simple grid with the backend: the set-up fields and
   STEPS steps against gtfn's stored references (`tests/gt4py/granule/`); then the whole
   step orchestrated into one program.
4. With --copies N: the time per diffusion step on N copies of the simple grid (per
   program and orchestrated).
5. `backends` (not in the default `--parts`): every corpus program on --copies copies of
   the simple grid (default 2000) through GT4Py's call on `sdflow.gt4py.gpu` and GT4Py's
   own `gtfn_gpu` and `run_dace_gpu`, timed in rounds, sdflow checked against the tiled
   references and gtfn's; a table of medians.

`--host-fields` allocates NumPy fields instead (copied to the device and back per call):
the same checks without CuPy, on the emulated device (`SDFLOW_CUDA_DEVICE=emulated`).
Each part reports and goes on after a failure; the exit status says whether all passed.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
import traceback

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python" / "tests_gt4py"))
sys.path.insert(0, str(ROOT / "scripts" / "gt4py"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--copies", type=int, default=0)
    ap.add_argument("--host-fields", action="store_true")
    ap.add_argument("--profile", action="store_true", help="profile five steps on the large grid")
    ap.add_argument("--per-program", action="store_true", help="each program's time per step on the large grid")
    ap.add_argument("--parts", default="corpus,calls,granule,large", help="which parts, in this order")
    opts = ap.parse_args()

    import gt4py.next as gtx
    from gt4py.next import custom_layout_allocators as allocators
    from icon4py.model.common.grid import simple

    import sdflow
    import sdflow.gt4py

    if opts.host_fields:
        gpu = sdflow.gt4py.make_backend("gpu", allocator=allocators.StandardCPUFieldBufferAllocator())

        def sync() -> None:
            pass

    else:
        import cupy as cp

        gpu = sdflow.gt4py.gpu
        props = cp.cuda.runtime.getDeviceProperties(0)
        print(f"device: {props['name'].decode()}, CuPy {cp.__version__}")

        def sync() -> None:
            cp.cuda.get_current_stream().synchronize()

    print(f"gt4py {gtx.__version__ if hasattr(gtx, '__version__') else '?'}, sdflow {sdflow.__version__}")
    parts = set(opts.parts.split(","))
    failed: list[str] = []

    def part(name: str, fn) -> None:
        if name not in parts:
            return
        t0 = time.perf_counter()
        print(f"== {name}", flush=True)
        try:
            fn()
            print(f"== {name}: passed ({time.perf_counter() - t0:.1f} s)", flush=True)
        except Exception:
            traceback.print_exc()
            failed.append(name)
            print(f"== {name}: FAILED ({time.perf_counter() - t0:.1f} s)", flush=True)

    import test_backend as tb

    # A call on device fields takes the neighbour tables on the device too.
    table_allocator = None if opts.host_fields else gpu
    grid = simple.simple_grid(num_levels=10, allocator=table_allocator)

    def corpus() -> None:
        bad = []
        for name in tb.PROGRAMS:
            program, npz, meta = tb.corpus(name)
            args, fields = tb.gt4py_arguments(program, npz, backend=gpu)
            try:
                program.with_backend(gpu)(**args, offset_provider=grid.connectivities)
                sync()
                tb.assert_equals_references(fields, npz, meta)
                print(f"  {name}: equal", flush=True)
            except Exception as e:  # noqa: BLE001 - each program reports
                print(f"  {name}: {type(e).__name__}: {e}", flush=True)
                bad.append(name)
        if bad:
            raise AssertionError(f"{len(bad)} of {len(tb.PROGRAMS)} programs differ: {bad}")

    def calls() -> None:
        program, npz, meta = tb.corpus("apply_nabla2_to_w")
        args, fields = tb.gt4py_arguments(program, npz, backend=gpu)
        prog = program.with_backend(gpu)
        conn = grid.connectivities
        for _ in range(20):
            prog(**args, offset_provider=conn)
        sync()
        n = 2000
        t0 = time.perf_counter()
        for _ in range(n):
            prog(**args, offset_provider=conn)
        enqueued = time.perf_counter() - t0
        sync()
        total = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(n // 4):
            prog(**args, offset_provider=conn)
            sync()
        waited = time.perf_counter() - t0
        # The layers of a call: GT4Py's program, sdflow's GT4Py program, the compiled
        # program with its keyword arguments made once.
        (decorated,) = tb.compiled_variants(prog)
        positional = [args[str(p.id)] for p in program.past_stage.past_node.params]
        kw = decorated.arguments(*positional, offset_provider=conn)
        for label, fn in (
            ("sdflow's GT4Py program", lambda: decorated(*positional, offset_provider=conn)),
            ("its arguments alone", lambda: decorated.arguments(*positional, offset_provider=conn)),
            ("the compiled program", lambda: decorated.compiled(**kw)),
        ):
            fn()
            sync()
            t0 = time.perf_counter()
            for _ in range(500):
                fn()
            host = time.perf_counter() - t0
            sync()
            print(f"  {label}: host time per call {host / 500 * 1e6:.1f} us")
        print(
            f"  apply_nabla2_to_w through GT4Py: host time per call enqueued back to back "
            f"{enqueued / n * 1e6:.1f} us (all {n} done after {total / n * 1e6:.1f} us per call); "
            f"call and wait {waited / (n // 4) * 1e6:.1f} us"
        )

    def granule() -> None:
        import granule as G
        import granule_refs as R

        refs = np.load(ROOT / "tests" / "gt4py" / "granule" / "diffusion_simple.npz")
        meta = json.loads(str(refs["meta_json"]))

        def check(arrays: dict, step: int) -> None:
            worst = 0.0
            for field, got in arrays.items():
                key = f"{field}__{step}"
                want = refs[f"gtfn__{key}"]
                scale = max(np.abs(want).max(), np.finfo(float).tiny)
                rel = float(np.abs(got - want).max() / scale)
                bitwise = bool(np.array_equal(got, want))
                if meta["gtfn_equals_embedded"][key] is True and not bitwise:
                    raise AssertionError(f"{key}: not bit for bit with gtfn ({rel:.3e} relative)")
                if rel > 1e-12:
                    raise AssertionError(f"{key}: {rel:.3e} relative from gtfn")
                worst = max(worst, rel)
            print(f"  step {step}: {len(arrays)} fields equal gtfn's (largest relative difference {worst:.1e})")

        grid_g = G.make_grid("simple", num_levels=meta["nlev"], allocator=table_allocator)
        t0 = time.perf_counter()
        g = G.make_granule(grid_g, gpu, meta["seed"])
        print(f"  set-up {time.perf_counter() - t0:.1f} s")
        assert R.inputs_sha256(g.inputs) == str(refs["inputs_sha256"]), "inputs differ from the references'"
        d = g.diffusion
        sync()
        check({name: getattr(d, name).asnumpy() for name in meta["init_fields"]}, 0)
        for step in range(1, opts.steps + 1):
            G.run_steps(g, 1)
            sync()
            if step in meta["kept"]:
                check(G.state_arrays(g), step)

        ref = G.make_granule(grid_g, gpu, meta["seed"])
        o = G.make_granule(grid_g, gpu, meta["seed"])
        od = o.diffusion
        scratch = [od.u_vert, od.v_vert, od.kh_smag_e, od.kh_smag_ec, od.z_nabla2_e, od.diff_multfac_smag]
        run = sdflow.gt4py.orchestrate(od.run, scratch=scratch)
        for _ in range(3):
            G.run_steps(ref, 1)
            run(o.diagnostic_state, o.prognostic_state, o.dtime)
            run.wait()
            sync()
            print(f"  orchestrated: why_not = {run.why_not}, steps composed {run.steps_composed}")
            a, b = G.state_arrays(ref), G.state_arrays(o)
            for k in a:
                if not np.array_equal(a[k], b[k]):
                    raise AssertionError(f"orchestrated {k} differs: {np.abs(a[k] - b[k]).max():.3e}")
        print("  orchestrated step equals the per-program step bit for bit")

    def large() -> None:
        if opts.copies <= 0:
            print("  (no --copies)")
            return
        import granule as G

        grid_l = G.make_grid("large", num_levels=10, copies=opts.copies, allocator=table_allocator)
        print(f"  {grid_l.num_edges} edges x {grid_l.num_levels} levels")
        for mode in ("per program", "orchestrated"):
            g = G.make_granule(grid_l, gpu, 42)
            d = g.diffusion
            if mode == "orchestrated":
                run = sdflow.gt4py.orchestrate(d.run)

                def step() -> None:
                    run(g.diagnostic_state, g.prognostic_state, g.dtime)
                    if run.why_not:
                        raise AssertionError(f"not composed: {run.why_not}")

            else:

                def step() -> None:
                    G.run_steps(g, 1)

            for _ in range(3):
                step()
            sync()
            times = []
            for _ in range(10):
                t0 = time.perf_counter()
                step()
                sync()
                times.append(time.perf_counter() - t0)
            n = 20
            t0 = time.perf_counter()
            for _ in range(n):
                step()
            host = time.perf_counter() - t0
            sync()
            back = time.perf_counter() - t0
            print(
                f"  {mode}: {np.median(times) * 1e3:.3f} ms per step with a wait (median of 10); "
                f"{back / n * 1e3:.3f} ms per step back to back, host time {host / n * 1e3:.3f} ms"
            )
            if opts.per_program and mode == "per program":
                # Each program's own time: the device idle before, each call waited for.
                cls = sdflow.gt4py.SdflowGT4PyProgram
                plain = cls._run
                spent: dict[str, list[float]] = {}

                def timed(self, args, offset_provider):  # noqa: ANN001
                    sync()
                    t0 = time.perf_counter()
                    plain(self, args, offset_provider)
                    self.wait()
                    sync()
                    spent.setdefault(self.name, []).append(time.perf_counter() - t0)

                cls._run = timed
                try:
                    for _ in range(3):
                        step()
                finally:
                    cls._run = plain
                for name, ts in sorted(spent.items(), key=lambda kv: -sum(kv[1])):
                    print(f"    {name}: {sum(ts) / 3 * 1e3:.3f} ms per step ({len(ts) // 3} calls)")
            if opts.profile:
                import cProfile
                import pstats

                prof = cProfile.Profile()
                prof.enable()
                for _ in range(5):
                    step()
                sync()
                prof.disable()
                pstats.Stats(prof).sort_stats("tottime").print_stats(25)

    def backends() -> None:
        # Every corpus program on --copies copies of the simple grid (default 2000), K 10,
        # through GT4Py's call: sdflow.gt4py.gpu against GT4Py's own GPU backends (gtfn,
        # DaCe), the calls timed in rounds (one call of each backend per round, each
        # waited for). sdflow's outputs are checked against the tiled references and
        # gtfn's; a GT4Py backend that cannot build or run here is reported and left out.
        import importlib

        import backend_perf as bp
        import perf

        from gt4py.next.program_processors.runners import dace as gtx_dace

        copies = opts.copies or 2000
        lg = perf.GT4Py(copies, perf.NLEV)
        if table_allocator is not None:
            lg.offset_provider = {
                name: gtx.as_connectivity(
                    domain=list(c.domain.dims),
                    codomain=c.codomain,
                    data=c.asnumpy(),
                    skip_value=c.skip_value,
                    allocator=table_allocator,
                )
                for name, c in lg.offset_provider.items()
            }
        bk = {"sdflow": gpu}
        if not opts.host_fields:
            bk |= {"gtfn": gtx.gtfn_gpu, "dace": gtx_dace.run_dace_gpu}
        rows, bad = [], []
        for name in tb.PROGRAMS:
            case = perf.load_case(name, copies, perf.NLEV)
            lg.check_grid(case)
            program = getattr(importlib.import_module(case.meta["module"]), case.meta["program"])
            got, checks = bp.measure(case, program, bk, lg.offset_provider, 11, sync)
            if any("FAIL" in c for c in checks):
                bad.append(name)
            print("  " + bp.summary(name, got, checks), flush=True)
            rows.append((name, {b: r.get("median_ms") for b, r in got.items()}))
        names = list(bk)
        print("\n| program | " + " | ".join(f"{b} ms" for b in names) + " | sdflow / best of GT4Py's |")
        print("|---|" + "---:|" * (len(names) + 1))
        ratios = []
        for name, ms in rows:
            theirs = [ms[b] for b in names if b != "sdflow" and ms[b] is not None]
            r = ms["sdflow"] / min(theirs) if theirs and ms["sdflow"] is not None else None
            if r is not None:
                ratios.append(r)
            cells = ["error" if ms[b] is None else f"{ms[b]:.3f}" for b in names]
            print(f"| {name} | " + " | ".join(cells) + f" | {'–' if r is None else f'{r:.2f}'} |")
        if ratios:
            print(f"| **geometric mean** |" + " |" * len(names) + f" **{float(np.exp(np.mean(np.log(ratios)))):.2f}** |")
        if bad:
            raise AssertionError(f"{len(bad)} programs differ: {bad}")

    known = {"corpus": corpus, "calls": calls, "granule": granule, "large": large, "backends": backends}
    for name in opts.parts.split(","):
        if name not in known:
            print(f"unknown part '{name}': expected one of {', '.join(known)}")
            failed.append(name)
            continue
        part(name, known[name])
    print("FAILED: " + ", ".join(failed) if failed else "all passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
