"""ICON4Py's diffusion granule (`Diffusion` of icon4py 0.4.1) run four ways, in one run.

The granule is `granule.py`'s: ICON4Py's `Diffusion` with every stencil switched on,
seeded random inputs, on `--copies` disjoint copies of ICON4Py's simple grid (default
2000 copies, `--levels` 10: 36,000 cells, 54,000 edges, 18,000 vertices, the size of the
per-program figures of docs/perf.md). A step is one `Diffusion.run`, run four ways:

* ``sdflow``: `sdflow.gt4py.cpu`, program by program (as ICON4Py calls them);
* ``sdflow orchestrated``: the same, with ``diffusion.run`` replaced by
  `sdflow.gt4py.orchestrate(diffusion.run)`: the first step records and runs program by
  program (and composes and compiles the step), every later step runs one composed program;
* ``sdflow replayed``: orchestrated with ``replay=True``: the step is called with the same
  states and time step every time, so every step after the first runs the composed
  program without calling ``Diffusion.run`` (and GT4Py's program calls) again;
* ``gtfn``: GT4Py's `gtfn_cpu`;
* ``dace``: GT4Py's `run_dace_cpu`.

Figures (all from one run; ratios only make sense within a run):

1. **Step on the large grid**: each backend's granule is made fresh with the same seed,
   runs 2 warm-up steps, then `--reps` steps, the backends taking turns step by step
   (round robin); each step is timed with `time.perf_counter()` around
   `granule.run_steps(g, 1)` (the CPU backends run synchronously). Reported: the median,
   min and max per step, and the median over gtfn's. **Results**: after those same
   2 + reps steps from the same seed, each backend's prognostic and diagnostic arrays
   against gtfn's: max |a - b| / max |b| per field, and whether bit for bit equal.
2. **Call overhead** on ICON4Py's simple grid (18 cells, `--levels` levels: a step is
   almost all Python and call overhead): the median step time per backend (2 warm-up
   steps, then `--reps` rounds of 10 steps each, every step timed, backends taking turns
   by round), divided by the program calls of one step (the orchestrated step's
   composed program's call count, ``len(run.composed.signature)``; the per-program
   backends make the same calls). For the orchestrated step, the whole step is one call:
   its figure is the step time itself.
3. **Cold build** (unless `--no-build`): in a fresh process (this script with `--child`),
   with empty caches (fresh `SDFLOW_CACHE_DIR` and `GT4PY_BUILD_CACHE_DIR`,
   `GT4PY_BUILD_CACHE_LIFETIME=persistent`): the wall time of
   `make_granule(large grid, backend)` (which compiles all the granule's programs) plus
   the first step. For the orchestrated granule the first step also composes and
   compiles the whole step; its second step (the first composed run) is shown too.
4. **Warm cache**: the same measurement in another fresh process, with the caches (3) filled.

Run from the repository root (`-O`: GT4Py type-checks every call's arguments in
Python's debug mode; PATH: gtfn needs the environment's cmake):

    PATH=$PWD/scripts/gt4py/.venv/bin:$PATH OMP_NUM_THREADS=2 \\
        scripts/gt4py/.venv/bin/python -O scripts/gt4py/granule_perf.py \\
        [--copies N] [--levels K] [--reps R] [--no-build] [--no-gt4py] [--json OUT]

`--no-gt4py` runs sdflow only (no gtfn, no dace; then there is no reference to check
against but sdflow program by program). GT4Py's build cache of the main process is
`target/gt4py/granule` (persistent), unless `GT4PY_BUILD_CACHE_DIR` is set.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

warnings.filterwarnings("ignore", message=".*Using Python execution.*")

SEED = 42
WARMUP = 2
#: Steps per backend per round on the simple grid (each timed on its own).
OVERHEAD_STEPS = 10
#: Each backend's name, in the order they take turns.
ALL_BACKENDS = ("sdflow", "sdflow orchestrated", "sdflow replayed", "gtfn", "dace")
#: Those whose step is one call of a composed program.
ONE_CALL = ("sdflow orchestrated", "sdflow replayed")
#: The reference the others are checked against (sdflow's per-program run without GT4Py's).
REFERENCE = "gtfn"
#: Seconds a cold-build child may take.
CHILD_TIMEOUT = 3600


def log(msg: str = "") -> None:
    print(msg, flush=True)


def error_text(exc: BaseException) -> str:
    """The exception and its chain, as text (GT4Py's build workers send errors back as
    a traceback text in the message)."""
    parts = []
    e: BaseException | None = exc
    while e is not None and len(parts) < 4:
        parts.append(f"{type(e).__name__}: {e}")
        e = e.__cause__ or e.__context__
    return "\n  caused by: ".join(parts)[:4000]


def gt4py_backend(name: str) -> Any:
    """The GT4Py backend ``name`` (of ALL_BACKENDS) builds its granule with."""
    if name.startswith("sdflow"):
        import sdflow.gt4py

        return sdflow.gt4py.cpu
    if name == "gtfn":
        import gt4py.next as gtx

        return gtx.gtfn_cpu
    if name == "dace":
        from gt4py.next.program_processors.runners import dace as gtx_dace

        return gtx_dace.run_dace_cpu
    raise ValueError(name)


def make(G: Any, grid: Any, name: str) -> Any:
    """A fresh granule for backend ``name`` (SEED); orchestrated: ``run`` replaced."""
    g = G.make_granule(grid, gt4py_backend(name), SEED)
    if name in ONE_CALL:
        import sdflow.gt4py

        g.diffusion.run = sdflow.gt4py.orchestrate(g.diffusion.run, replay=name == "sdflow replayed")
    return g


def step_once(G: Any, g: Any) -> float:
    t = time.perf_counter()
    G.run_steps(g, 1)
    return time.perf_counter() - t


def orchestration_state(g: Any) -> dict:
    run = g.diffusion.run
    return {
        "why_not": run.why_not,
        "steps_composed": run.steps_composed,
        "calls": len(run.composed.signature) if run.composed is not None else None,
    }


# ----------------------------------------------------------------------------------------
# 1. Step on the large grid, and the results checked
# ----------------------------------------------------------------------------------------


def rel_diff(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| / max |b| (max |a - b| if b is all zero)."""
    scale = float(np.abs(b).max())
    d = float(np.abs(a - b).max())
    return d / scale if scale > 0 else d


def measure_steps(G: Any, grid: Any, names: list[str], reps: int) -> tuple[dict, dict, dict]:
    """Per backend: the step times (s) and setup, the state arrays after WARMUP + reps
    steps, and the orchestration's state. A backend that fails is reported and dropped."""
    granules, out, errors = {}, {}, {}
    for name in names:
        t = time.perf_counter()
        try:
            g = make(G, grid, name)
            setup = time.perf_counter() - t
            warm = [step_once(G, g) for _ in range(WARMUP)]
        except Exception as e:  # a backend that fails is reported, the others go on
            errors[name] = error_text(e)
            log(f"  {name}: FAILED\n  {errors[name]}")
            continue
        granules[name] = g
        out[name] = {"setup_s": setup, "warmup_s": warm, "samples_s": []}
        extra = ""
        if name == "sdflow orchestrated":
            st = orchestration_state(g)
            out[name]["orchestration_after_warmup"] = st
            extra = f"; composed: {st['why_not'] is None} ({st['calls']} calls), why_not: {st['why_not']!r}"
        log(
            f"  {name}: make_granule {setup:.1f} s (caches as found), warm-up steps "
            + ", ".join(f"{w:.3f}" for w in warm) + " s" + extra
        )
    for r in range(reps):
        for name, g in list(granules.items()):
            try:
                out[name]["samples_s"].append(step_once(G, g))
            except Exception as e:
                errors[name] = f"step {WARMUP + r + 1}: " + error_text(e)
                log(f"  {name}: FAILED\n  {errors[name]}")
                del granules[name]
    for name in list(out):
        if name in errors:
            out[name]["error"] = errors[name]
            continue
        s = out[name]["samples_s"]
        out[name] |= {"median_s": statistics.median(s), "min_s": min(s), "max_s": max(s)}
    for name, err in errors.items():
        out.setdefault(name, {"error": err})
    arrays = {name: G.state_arrays(g) for name, g in granules.items()}
    orch = orchestration_state(granules["sdflow orchestrated"]) if "sdflow orchestrated" in granules else None
    return out, arrays, orch


def check_results(G: Any, arrays: dict, reference: str) -> dict:
    """Per backend other than ``reference``: per field (rel diff, bitwise equal)."""
    ref = arrays[reference]
    out = {}
    for name, a in arrays.items():
        if name == reference:
            continue
        out[name] = {
            f: {"rel_diff": rel_diff(a[f], ref[f]), "bitwise": bool(np.array_equal(a[f], ref[f])),
                "finite": bool(np.isfinite(a[f]).all())}
            for f in G.STATE_FIELDS
        }
    return out


# ----------------------------------------------------------------------------------------
# 2. Call overhead on the simple grid
# ----------------------------------------------------------------------------------------


def measure_overhead(G: Any, grid: Any, names: list[str], reps: int) -> tuple[dict, dict]:
    granules, out = {}, {}
    for name in names:
        try:
            g = make(G, grid, name)
            for _ in range(WARMUP):
                G.run_steps(g, 1)
        except Exception as e:
            out[name] = {"error": error_text(e)}
            log(f"  {name}: FAILED\n  {out[name]['error']}")
            continue
        granules[name] = g
        out[name] = {"samples_s": []}
    orch = orchestration_state(granules["sdflow orchestrated"]) if "sdflow orchestrated" in granules else None
    for _ in range(reps):
        for name, g in granules.items():
            out[name]["samples_s"].extend(step_once(G, g) for _ in range(OVERHEAD_STEPS))
    calls = orch["calls"] if orch else None
    for name in granules:
        med = statistics.median(out[name]["samples_s"])
        per = 1 if name in ONE_CALL else calls
        out[name] |= {
            "median_step_us": med * 1e6,
            "calls_per_step": per,
            "us_per_call": med * 1e6 / per if per else None,
        }
        del out[name]["samples_s"]
    if orch:
        orch = orch | {"steps_composed_after": orchestration_state(granules["sdflow orchestrated"])["steps_composed"]}
    return out, orch


# ----------------------------------------------------------------------------------------
# 3., 4. Builds, each in a fresh process
# ----------------------------------------------------------------------------------------


def child(name: str, copies: int, levels: int) -> int:
    """The child process: make_granule on the large grid + the first step (+ the second
    for the orchestrated step), timed; one line ``RESULT {json}``."""
    import granule as G

    grid = G.make_grid("large", levels, copies)
    backend = gt4py_backend(name)  # imports the backend's modules before the clock starts
    t0 = time.perf_counter()
    g = make(G, grid, name)
    t1 = time.perf_counter()
    G.run_steps(g, 1)
    t2 = time.perf_counter()
    res = {"make_granule_s": t1 - t0, "first_step_s": t2 - t1, "total_s": t2 - t0}
    if name == "sdflow orchestrated":
        res["second_step_s"] = step_once(G, g)
        res["orchestration"] = orchestration_state(g)
    del backend
    print("RESULT " + json.dumps(res), flush=True)
    return 0


def run_child(name: str, copies: int, levels: int, cache: Path) -> dict:
    env = dict(os.environ)
    env["SDFLOW_CACHE_DIR"] = str(cache / "sdflow")
    env["GT4PY_BUILD_CACHE_DIR"] = str(cache / "gt4py")
    env["GT4PY_BUILD_CACHE_LIFETIME"] = "persistent"
    cmd = [sys.executable] + (["-O"] if sys.flags.optimize else []) + [
        "-W", "ignore", str(Path(__file__).resolve()),
        "--child", name, "--copies", str(copies), "--levels", str(levels),
    ]
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=CHILD_TIMEOUT, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {CHILD_TIMEOUT} s"}
    wall = time.perf_counter() - t
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    if p.returncode != 0 or not lines:
        return {"error": f"rc={p.returncode}\n{p.stderr[-4000:]}"}
    return json.loads(lines[-1][len("RESULT "):]) | {"process_s": wall}


def measure_builds(names: list[str], copies: int, levels: int) -> dict:
    out = {}
    for name in names:
        cache = Path(tempfile.mkdtemp(prefix="granule_perf_"))
        try:
            out[name] = {}
            for which in ("cold", "warm"):
                r = run_child(name, copies, levels, cache)
                out[name][which] = r
                if "error" in r:
                    log(f"  {name} {which}: FAILED\n{r['error']}")
                    break
                extra = f", second step {r['second_step_s']:.3f} s" if "second_step_s" in r else ""
                orch = r.get("orchestration")
                if orch:
                    extra += f", composed: {orch['why_not'] is None} (why_not: {orch['why_not']!r})"
                log(
                    f"  {name} {which}: make_granule {r['make_granule_s']:.1f} s + first step "
                    f"{r['first_step_s']:.1f} s = {r['total_s']:.1f} s (whole process {r['process_s']:.1f} s){extra}"
                )
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    return out


# ----------------------------------------------------------------------------------------
# Report
# ----------------------------------------------------------------------------------------


def table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copies", type=int, default=2000, help="copies of the simple grid (default 2000)")
    ap.add_argument("--levels", type=int, default=10, help="vertical levels (default 10)")
    ap.add_argument("--reps", type=int, default=11, help="timed steps per backend (default 11)")
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    ap.add_argument("--no-build", action="store_true", help="skip the cold and warm builds (3, 4)")
    ap.add_argument("--no-gt4py", action="store_true", help="sdflow only (no gtfn, no dace)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    opts = ap.parse_args()

    threads = int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    os.environ.setdefault("GT4PY_BUILD_CACHE_LIFETIME", "persistent")
    if opts.child:
        return child(opts.child, opts.copies, opts.levels)
    os.environ.setdefault("GT4PY_BUILD_CACHE_DIR", str(ROOT / "target" / "gt4py" / "granule"))

    import granule as G

    names = [n for n in ALL_BACKENDS if not (opts.no_gt4py and not n.startswith("sdflow"))]
    reference = REFERENCE if REFERENCE in names else "sdflow"
    large = G.make_grid("large", opts.levels, opts.copies)
    simple = G.make_grid("simple", opts.levels)
    date = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    machine = (
        f"{platform.node()}: {cores} cores (nproc), {cpu_model()}, OMP_NUM_THREADS={threads}, "
        f"Python {platform.python_version()}{' -O' if sys.flags.optimize else ''}, {date}"
    )
    sizes = {
        g: {"cells": grid.num_cells, "edges": grid.num_edges, "vertices": grid.num_vertices, "levels": grid.num_levels}
        for g, grid in (("large", large), ("simple", simple))
    }
    log(f"machine: {machine}")
    for g, s in sizes.items():
        log(f"{g} grid: {s['cells']} cells, {s['edges']} edges, {s['vertices']} vertices, {s['levels']} levels"
            + (f" ({opts.copies} copies of the simple grid; {s['edges'] * s['levels']:,} edge points)" if g == "large" else ""))
    log(f"backends: {', '.join(names)}; reps {opts.reps} after {WARMUP} warm-up steps; seed {SEED}")
    result: dict = {
        "machine": machine, "date": date, "cores": cores, "cpu": cpu_model(), "threads": threads,
        "copies": opts.copies, "levels": opts.levels, "reps": opts.reps, "warmup": WARMUP,
        "sizes": sizes, "backends": names,
    }
    problems: list[str] = []

    # 1.
    log(f"\n== 1. one Diffusion.run step, large grid ({opts.reps} steps per backend, round robin)")
    steps, arrays, orch = measure_steps(G, large, names, opts.reps)
    result["step"] = steps
    result["orchestration_large"] = orch
    if orch and (orch["why_not"] is not None or orch["steps_composed"] != opts.reps + WARMUP - 1):
        problems.append(f"orchestrated step (large grid): why_not {orch['why_not']!r}, "
                        f"{orch['steps_composed']} of {opts.reps + WARMUP} steps composed")
    checks = check_results(G, arrays, reference) if reference in arrays else {}
    result["check_against"] = reference
    result["checks"] = checks
    for name, fields in checks.items():
        if not all(v["finite"] for v in fields.values()):
            problems.append(f"{name}: non-finite values after {WARMUP + opts.reps} steps")

    # 2.
    log(f"\n== 2. call overhead, simple grid ({opts.reps} rounds of {OVERHEAD_STEPS} steps per backend)")
    overhead, orch_s = measure_overhead(G, simple, names, opts.reps)
    result["overhead"] = overhead
    result["orchestration_simple"] = orch_s
    if orch_s and orch_s["why_not"] is not None:
        problems.append(f"orchestrated step (simple grid): why_not {orch_s['why_not']!r}")

    # 3., 4.
    builds = {}
    if not opts.no_build:
        log("\n== 3./4. make_granule + first step in a fresh process, large grid: cold caches, then warm")
        # (The replayed granule builds what the orchestrated one does.)
        builds = measure_builds([n for n in names if n != "sdflow replayed"], opts.copies, opts.levels)
    result["build"] = builds
    for name, b in builds.items():
        for which, r in b.items():
            if "error" in r:
                problems.append(f"build {name} {which} failed")

    # The tables.
    log(f"\n### machine\n{machine}")
    log(f"large grid: {sizes['large']['cells']} cells, {sizes['large']['edges']} edges, "
        f"{sizes['large']['vertices']} vertices x {opts.levels} levels; simple grid: "
        f"{sizes['simple']['cells']} cells, {sizes['simple']['edges']} edges, {sizes['simple']['vertices']} vertices")
    ref_ms = steps.get(reference, {}).get("median_s")
    rows = []
    for name in names:
        s = steps.get(name, {})
        if "median_s" not in s:
            rows.append([name, "error", "–", "–", "–"])
            continue
        rows.append([
            name, f"{s['median_s'] * 1e3:.2f}", f"{s['min_s'] * 1e3:.2f}", f"{s['max_s'] * 1e3:.2f}",
            f"{s['median_s'] * 1e3 / (ref_ms * 1e3):.2f}" if ref_ms else "–",
        ])
    text1 = table(["backend", "step ms (median)", "min", "max", f"/ {reference}"], rows)
    log(f"\n### 1. Diffusion.run step, large grid, median of {opts.reps}\n{text1}")

    if checks:
        cols = list(checks)
        rows = [[f] + [
            ("bitwise" if checks[c][f]["bitwise"] else f"{checks[c][f]['rel_diff']:.2e}")
            + ("" if checks[c][f]["finite"] else " NON-FINITE")
            for c in cols
        ] for f in G.STATE_FIELDS]
        text2 = table(["field"] + [f"{c} vs {reference}" for c in cols], rows)
        log(f"\n### results after {WARMUP + opts.reps} steps (max |a-b| / max |{reference}|, "
            f"or bitwise equal)\n{text2}")
    else:
        text2 = ""
        log(f"\n### results: no {reference} arrays to check against")

    rows = []
    for name in names:
        o = overhead.get(name, {})
        if "median_step_us" not in o:
            rows.append([name, "error", "–", "–"])
            continue
        rows.append([
            name, f"{o['median_step_us']:.1f}", str(o["calls_per_step"] or "?"),
            f"{o['us_per_call']:.1f}" if o["us_per_call"] is not None else "–",
        ])
    text3 = table(["backend", "step µs (median)", "calls per step", "µs per call"], rows)
    log(f"\n### 2. call overhead, simple grid\n{text3}")

    text4 = ""
    if builds:
        rows = []
        for name, b in builds.items():
            row = [name]
            for which in ("cold", "warm"):
                r = b.get(which, {})
                if "total_s" in r:
                    row += [f"{r['make_granule_s']:.1f}", f"{r['first_step_s']:.2f}", f"**{r['total_s']:.1f}**"]
                else:
                    row += ["error" if "error" in r else "–", "–", "–"]
            rows.append(row)
        text4 = table(
            ["backend", "cold: make_granule s", "first step s", "total s",
             "warm: make_granule s", "first step s", "total s"],
            rows,
        )
        log(f"\n### 3./4. make_granule + first step, large grid, fresh process\n{text4}")
    result["tables"] = "\n\n".join(t for t in (text1, text2, text3, text4) if t)
    result["problems"] = problems
    if problems:
        log("\nproblems:\n" + "\n".join(f"- {p}" for p in problems))
    if opts.json:
        opts.json.write_text(json.dumps(result, indent=1) + "\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
