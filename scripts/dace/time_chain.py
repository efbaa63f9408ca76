#!/usr/bin/env python
"""Time DaCe 1.0.2's own optimization of a saved raw stencil-chain SDFG, in this (fresh) process.

Usage: venv/bin/python time_chain.py N RUN_LABEL [--save-simplified] [--results FILE]

Steps (wall time with time.perf_counter around each call only):
  load   : dace.SDFG.from_file(stencil_chain_<N>.raw.sdfgz)
  simplify: sdfg.simplify()                       (default arguments)
  [optional, untimed: save simplified SDFG as stencil_chain_<N>.simplified.sdfgz and .sdfg]
  mapfusion: sdfg.apply_transformations_repeated(MapFusion)   (default arguments)
Map counts (MapEntry nodes, recursive) before simplify, after simplify, after MapFusion.
Appends one JSON line per run to the results file (default: timings.jsonl next to this script).
"""
import argparse
import json
import os
import platform
import resource
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def count(sdfg):
    from dace.sdfg import nodes
    from dace import data
    maps = states = views = transients = 0
    for sd in sdfg.all_sdfgs_recursive():
        for desc in sd.arrays.values():
            if isinstance(desc, data.View):
                views += 1
            elif desc.transient:
                transients += 1
        for st in sd.states():
            states += 1
            maps += sum(1 for n in st.nodes() if isinstance(n, nodes.MapEntry))
    return dict(states=states, maps=maps, views=views, transients=transients)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('n', type=int)
    ap.add_argument('run', help='run label, e.g. 1')
    ap.add_argument('--save-simplified', action='store_true')
    ap.add_argument('--results', default=os.path.join(HERE, 'timings.jsonl'))
    args = ap.parse_args()

    t0 = time.perf_counter()
    import dace
    from dace.transformation.dataflow import MapFusion  # dace/transformation/dataflow/map_fusion.py
    t_import = time.perf_counter() - t0

    raw_path = os.path.join(HERE, f'stencil_chain_{args.n}.raw.sdfgz')
    t0 = time.perf_counter()
    sdfg = dace.SDFG.from_file(raw_path)
    t_load = time.perf_counter() - t0
    before = count(sdfg)

    t0 = time.perf_counter()
    simplify_result = sdfg.simplify()
    t_simplify = time.perf_counter() - t0
    after_simplify = count(sdfg)

    if args.save_simplified:
        base = os.path.join(HERE, f'stencil_chain_{args.n}.simplified')
        sdfg.save(base + '.sdfgz', compress=True)
        sdfg.save(base + '.sdfg')

    t0 = time.perf_counter()
    n_applied = sdfg.apply_transformations_repeated(MapFusion)
    t_mapfusion = time.perf_counter() - t0
    after_fusion = count(sdfg)

    rec = dict(
        n=args.n,
        run=args.run,
        date_utc=time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()),
        dace=dace.__version__,
        python=platform.python_version(),
        import_s=round(t_import, 3),
        load_s=round(t_load, 3),
        simplify_s=round(t_simplify, 3),
        mapfusion_s=round(t_mapfusion, 3),
        mapfusion_applied=n_applied,
        simplify_passes_applied=sorted(simplify_result.keys()) if isinstance(simplify_result, dict) else None,
        raw=before,
        simplified=after_simplify,
        fused=after_fusion,
        maxrss_mib=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    )
    line = json.dumps(rec)
    print(line)
    with open(args.results, 'a') as f:
        f.write(line + '\n')


if __name__ == '__main__':
    main()
