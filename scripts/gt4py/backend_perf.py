"""sdflow as a GT4Py backend against GT4Py's own, through GT4Py's call, in one run.

For every program of the corpus (`tests/gt4py`), on the grid of `--copies` copies of
ICON4Py's simple grid that `perf.py` builds (fields tiled, neighbour tables offset per
copy, index scalars scaled), the program is called as a model calls it:
`program.with_backend(B)(**fields_and_scalars, offset_provider=tables)`, with B each of
`sdflow.gt4py.cpu`, GT4Py's `gtfn_cpu` and `run_dace_cpu`. Reported per program: the
median time of a call (ms; the backends' calls timed in rounds, one call of each per
round, so that a slow minute of a shared machine falls on all of them alike), the first call (translation and build, s), and the check of
sdflow's outputs against the tiled references (bit for bit where exact, else
`perf.TOLERANCE` relative) and against gtfn's.

`--overhead` also measures the cost of a call above the compute on the simple grid
(K 10: a few microseconds of work): the whole GT4Py call for each backend, and for sdflow
its parts (the GT4Py program pool; sdflow's argument handling; the bound call).

`--build` also measures the cold build of all the programs at once through GT4Py's
compilation pool (its worker processes): `program.compile(...)` for every program, then
`gt4py.next.wait_for_compilation()`, with fresh caches, for sdflow and for DaCe.

Run in the GT4Py environment (scripts/gt4py/env.sh) with sdflow installed
(scripts/test-gt4py.sh installs it):

    scripts/gt4py/.venv/bin/python -O scripts/gt4py/backend_perf.py [--copies N]
        [--reps R] [--only NAME]... [--overhead] [--build] [--no-gt4py] [--no-table] [--json OUT]

`-O`: GT4Py type-checks every call's arguments in Python's debug mode (tens of
microseconds); a model runs optimized.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import timeit
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import perf  # noqa: E402  (the large grid, the corpus's inputs and references)


def log(msg: str) -> None:
    print(msg, flush=True)


def backends(gt4py_too: bool) -> dict:
    import gt4py.next as gtx
    from gt4py.next.program_processors.runners import dace as gtx_dace

    import sdflow.gt4py

    out = {"sdflow": sdflow.gt4py.cpu, "sdflow hf": sdflow.gt4py.cpu_horizontal_first}
    if gt4py_too:
        out |= {"gtfn": gtx.gtfn_cpu, "dace": gtx_dace.run_dace_cpu}
    return out


def prepare_program(case, program, backend, offset_provider, sync=None) -> dict:
    """The bound call of `program` on `backend`, called once: its first-call time and the
    outputs of the initial inputs (after `sync`, a device wait, where given)."""
    args, fields = perf.gt4py_arguments(program, case.inputs, backend)
    prog = program.with_backend(backend)
    call = lambda: prog(**args, offset_provider=offset_provider)
    t0 = time.perf_counter()
    call()
    if sync is not None:
        sync()
    first = time.perf_counter() - t0
    outputs = {f: fields[f].asnumpy().copy() for f in case.outputs}
    return {"call": call, "first_call_s": first, "outputs": outputs}


def time_interleaved(calls: dict, reps: int, warmup: int = 2, sync=None) -> dict:
    """Times the calls of `calls` in rounds, one call of each per round (so that a slow
    minute of a shared machine falls on all of them alike); the median of `reps` rounds
    after `warmup`, in ms, per name. `sync` (a device wait) runs before each call and
    inside each timing."""
    samples: dict = {b: [] for b in calls}
    for k in range(warmup + reps):
        for b, call in calls.items():
            if sync is not None:
                sync()
            t0 = time.perf_counter()
            call()
            if sync is not None:
                sync()
            t = time.perf_counter() - t0
            if k >= warmup:
                samples[b].append(t)
    return {b: statistics.median(v) * 1e3 for b, v in samples.items()}


def measure(case, program, bk: dict, offset_provider, reps: int, sync=None) -> tuple[dict, list[str]]:
    """`program` on each backend of `bk` (name to GT4Py backend): prepared, timed in
    rounds (`time_interleaved`), and the outputs of each sdflow backend checked against
    the tiled references and gtfn's. A backend that fails is reported, the others go on."""
    got = {}
    for bname, backend in bk.items():
        try:
            got[bname] = prepare_program(case, program, backend, offset_provider, sync)
        except Exception as e:  # a backend that fails is reported, the others go on
            got[bname] = {"error": f"{type(e).__name__}: {e}"[:500]}
    calls = {b: r.pop("call") for b, r in got.items() if "call" in r}
    for b, ms in time_interleaved(calls, reps, sync=sync).items():
        got[b]["median_ms"] = ms
    del calls
    checks = []
    for b, r in got.items():
        if not b.startswith("sdflow"):
            continue
        if "outputs" in r:
            checks += [f"{b}: {c}" for c in check(case, r["outputs"], got.get("gtfn", {}).get("outputs"))]
        else:
            checks.append(f"{b}: {r['error']} FAIL")
    return got, checks


def summary(name: str, got: dict, checks: list[str]) -> str:
    """One program's line: each backend's median (and first call) or error, the checks."""
    return (
        f"{name}: "
        + ", ".join(
            f"{b} {r['median_ms']:.3f} ms (first {r['first_call_s']:.1f} s)" if "median_ms" in r else f"{b} {r['error']}"
            for b, r in got.items()
        )
        + "; " + "; ".join(checks)
    )


def check(case, got: dict, gtfn: dict | None) -> list[str]:
    out = []
    if not case.no_reference:
        for f, (b, tol, want) in case.references.items():
            d = perf.difference(got[f], want)
            out.append(f"{f} vs tiled {b}: {'bitwise' if d == 0 else f'{d:.2g}'}" + ("" if d <= tol else " FAIL"))
    if gtfn is not None:
        for f in case.outputs:
            d = perf.difference(got[f], gtfn[f])
            out.append(f"{f} vs gtfn: {'bitwise' if d == 0 else f'{d:.2g}'}" + ("" if d <= perf.TOLERANCE else " FAIL"))
    return out


def overhead(programs: list[str], bk: dict, reps: int) -> list[dict]:
    """Per program on the simple grid: the whole GT4Py call per backend; for sdflow, the
    call of the program GT4Py's pool holds (sdflow's argument handling and the bound
    call) and the bound call alone."""
    from icon4py.model.common.grid import simple

    grid = simple.simple_grid(num_levels=perf.NLEV)
    conn = grid.connectivities
    rows = []
    for name in programs:
        case = perf.load_case(name, 1, perf.NLEV)
        program = getattr(importlib.import_module(case.meta["module"]), case.meta["program"])
        row = {"program": name}
        for bname, backend in bk.items():
            args, _ = perf.gt4py_arguments(program, case.inputs, backend)
            prog = program.with_backend(backend)
            prog(**args, offset_provider=conn)
            prog(**args, offset_provider=conn)
            n = max(reps, 1)
            row[bname] = min(timeit.repeat(lambda: prog(**args, offset_provider=conn), number=n, repeat=5)) / n * 1e6
            if bname == "sdflow":
                pool = prog._compiled_programs
                (decorated,) = pool.compiled_programs.values()
                pos = [args[str(p.id)] for p in program.past_stage.past_node.params]
                row["sdflow decorated"] = (
                    min(timeit.repeat(lambda: decorated(*pos, offset_provider=conn), number=n, repeat=5)) / n * 1e6
                )
                bound = decorated._bindings[0].bound  # the binding of the last call
                row["sdflow bound"] = min(timeit.repeat(bound, number=n, repeat=5)) / n * 1e6
        log(
            f"  {name}: "
            + ", ".join(f"{k} {v:.2f} µs" for k, v in row.items() if k != "program")
        )
        rows.append(row)
    return rows


def build(programs: list[str], which: str, copies: int) -> float:
    """Seconds to build every program through GT4Py's compilation pool, caches empty."""
    import gt4py.next as gtx

    bk = backends(which != "sdflow")[which]
    grid = perf.GT4Py(copies, perf.NLEV)
    pools = []
    t0 = time.perf_counter()
    for name in programs:
        case = perf.load_case(name, copies, perf.NLEV)
        program = getattr(importlib.import_module(case.meta["module"]), case.meta["program"])
        prog = program.with_backend(bk).with_compilation_options(enable_jit=False)
        prog.compile(offset_provider=grid.offset_provider)
        pools.append(prog)
    gtx.wait_for_compilation()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copies", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=11)
    ap.add_argument("--only", action="append")
    ap.add_argument("--overhead", action="store_true")
    ap.add_argument("--build", action="store_true")
    ap.add_argument("--no-gt4py", action="store_true", help="sdflow only (no gtfn, no dace)")
    ap.add_argument("--no-table", action="store_true", help="only --build and --overhead")
    ap.add_argument("--json", type=Path)
    opts = ap.parse_args()

    threads = int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    os.environ.setdefault("GT4PY_BUILD_CACHE_LIFETIME", "persistent")
    os.environ.setdefault("GT4PY_BUILD_CACHE_DIR", str(perf.ROOT / "target" / "gt4py" / f"copies{opts.copies}-levels{perf.NLEV}"))
    programs = sorted(p.name[: -len(".simple.npz")] for p in perf.CORPUS.glob("*.simple.npz"))
    if opts.only:
        programs = [p for p in programs if p in opts.only]
    date = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    log(f"{len(programs)} program(s), {opts.copies} copies, K {perf.NLEV}, {threads} thread(s), {platform.node()}, {os.cpu_count()} cores, {date}")
    bk = backends(not opts.no_gt4py)
    result: dict = {"date": date, "copies": opts.copies, "threads": threads, "cores": os.cpu_count()}
    failed = []

    if opts.build:
        result["build_s"] = {}
        for which in ("sdflow",) + (() if opts.no_gt4py else ("dace",)):
            with tempfile.TemporaryDirectory() as tmp:
                env_before = {k: os.environ.get(k) for k in ("SDFLOW_CACHE_DIR", "GT4PY_BUILD_CACHE_DIR")}
                os.environ["SDFLOW_CACHE_DIR"] = str(Path(tmp) / "sdflow")
                os.environ["GT4PY_BUILD_CACHE_DIR"] = str(Path(tmp) / "gt4py")
                # A child process: the caches are read from the environment when first used.
                import subprocess

                code = (
                    "import sys; sys.path.insert(0, %r); import backend_perf as b; "
                    "print(b.build(%r, %r, %d))" % (str(HERE), programs, which, opts.copies)
                )
                t = subprocess.run([sys.executable, "-O", "-W", "ignore", "-c", code], capture_output=True, text=True)
                for k, v in env_before.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
                if t.returncode != 0:
                    log(f"build {which}: FAILED\n{t.stderr[-3000:]}")
                    failed.append(f"build {which}")
                    continue
                secs = float(t.stdout.strip().splitlines()[-1])
                result["build_s"][which] = secs
                log(f"cold build of {len(programs)} programs through GT4Py's pool, {which}: {secs:.1f} s")

    if opts.overhead:
        log("\ncall overhead on the simple grid (µs per call, best of 5 runs)")
        result["overhead_us"] = overhead(programs, bk, 2000)

    if opts.no_table:
        if opts.json:
            opts.json.write_text(json.dumps(result, indent=1) + "\n")
        return 1 if failed else 0
    grid = perf.GT4Py(opts.copies, perf.NLEV)
    rows = []
    result["programs"] = {}
    for name in programs:
        case = perf.load_case(name, opts.copies, perf.NLEV)
        grid.check_grid(case)
        program = getattr(importlib.import_module(case.meta["module"]), case.meta["program"])
        got, checks = measure(case, program, bk, grid.offset_provider, opts.reps)
        if any("FAIL" in c for c in checks):
            failed.append(name)
        log(summary(name, got, checks))
        rows.append((name, got))
        result["programs"][name] = {
            b: {k: v for k, v in r.items() if k != "outputs"} for b, r in got.items()
        } | {"checks": checks}

    names = list(bk)
    ours = [b for b in names if b.startswith("sdflow")]
    theirs = [b for b in names if not b.startswith("sdflow")]
    head = ["program"] + [f"{b} ms" for b in names] + [f"{b} / best of GT4Py's" for b in ours if theirs]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    ratios: dict[str, list[float]] = {b: [] for b in ours}
    for name, got in rows:
        ms = {b: got[b].get("median_ms") for b in names}
        cells = [name] + ["error" if ms[b] is None else f"{ms[b]:.3f}" for b in names]
        best = min((ms[b] for b in theirs if ms[b] is not None), default=None)
        for b in ours if theirs else []:
            if ms[b] is not None and best is not None:
                ratios[b].append(ms[b] / best)
                cells.append(f"{ms[b] / best:.2f}")
            else:
                cells.append("–")
        lines.append("| " + " | ".join(cells) + " |")
    if theirs:
        geo = {b: float(np.exp(np.mean(np.log(r)))) for b, r in ratios.items() if r}
        lines.append(
            f"| **geometric mean** |" + " |" * len(names) + "".join(f" **{geo[b]:.2f}** |" for b in ours if b in geo)
        )
        result["geomean_over_best_gt4py"] = geo
    totals = {b: sum(got[b].get("median_ms", 0.0) for _, got in rows) for b in names}
    lines.append("| **sum** | " + " | ".join(f"**{totals[b]:.2f}**" for b in names) + " |" + " |" * (len(ours) if theirs else 0))
    text = "\n".join(lines)
    result["table"] = text
    log("\n" + text)
    if failed:
        log(f"\nchecks FAILED: {', '.join(failed)}")
    result["failed"] = failed
    if opts.json:
        opts.json.write_text(json.dumps(result, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
