#!/usr/bin/env python
"""Generate the DaCe 1.0.2 "stencil chain" program for N dependent steps and save its raw SDFG.

Mirrors the corpus file stencil_chain_20 (meta_json.python_source): S=64, float64[64,64] arguments `a`, `out`,
temporaries t1..t{N-1} = np.zeros_like(a), step k: t_k[1:-1, 1:-1] = 0.25 * (4 neighbours of t_{k-1}),
step 1 reads `a`, step N writes `out`.

The Python source is written to <outdir>/gen/stencil_chain_<N>.py and imported as module `stencil_chain_<N>`, so the
SDFG name is `stencil_chain_<N>_stencil_chain_<N>` as in the corpus.  As in the corpus, the DebugInfo file names are
replaced (on the in-memory SDFG, before saving) by `<corpus>/gen/stencil_chain_<N>.py` and
`<site-packages>/dace/frontend/python/newast.py`.

Usage: venv/bin/python gen_chain.py [--outdir DIR] N [N ...]
Writes <outdir>/stencil_chain_<N>.raw.sdfg and <outdir>/stencil_chain_<N>.raw.sdfgz.
"""
import argparse
import importlib
import os
import sys


def chain_source(n: int) -> str:
    assert n >= 2
    name = f'stencil_chain_{n}'
    lines = [
        'import dace',
        'import numpy as np',
        '',
        '@dace.program',
        f'def {name}(a: dace.float64[64, 64], out: dace.float64[64, 64]):',
    ]
    prev = 'a'
    for k in range(1, n + 1):
        rhs = f'0.25 * ({prev}[:-2, 1:-1] + {prev}[2:, 1:-1] + {prev}[1:-1, :-2] + {prev}[1:-1, 2:])'
        if k < n:
            cur = f't{k}'
            lines.append(f'    {cur} = np.zeros_like(a)')
        else:
            cur = 'out'
        lines.append(f'    {cur}[1:-1, 1:-1] = {rhs}')
        prev = cur
    return '\n'.join(lines) + '\n'


def _debuginfos(sdfg):
    """Yield every DebugInfo object reachable from the SDFG (recursively)."""
    for sd in sdfg.all_sdfgs_recursive():
        if getattr(sd, 'debuginfo', None) is not None:
            yield sd.debuginfo
        for desc in sd.arrays.values():
            if getattr(desc, 'debuginfo', None) is not None:
                yield desc.debuginfo
        for block in sd.all_control_flow_blocks():
            if getattr(block, 'debuginfo', None) is not None:
                yield block.debuginfo
        for state in sd.states():
            for node in state.nodes():
                if getattr(node, 'debuginfo', None) is not None:
                    yield node.debuginfo
            for e in state.edges():
                if getattr(e.data, 'debuginfo', None) is not None:
                    yield e.data.debuginfo


def neutralize_paths(sdfg, gen_file: str, n: int):
    gen_file = os.path.realpath(gen_file)
    unknown = set()
    for di in _debuginfos(sdfg):
        fn = di.filename
        if fn is None or fn.startswith('<'):
            continue
        if os.path.realpath(fn) == gen_file:
            di.filename = f'<corpus>/gen/stencil_chain_{n}.py'
        elif fn.replace(os.sep, '/').endswith('dace/frontend/python/newast.py'):
            di.filename = '<site-packages>/dace/frontend/python/newast.py'
        else:
            unknown.add(fn)
    if unknown:
        print('WARNING: unrecognized DebugInfo filenames left unchanged:', sorted(unknown), file=sys.stderr)


def generate(n: int, outdir: str):
    gendir = os.path.join(outdir, 'gen')
    os.makedirs(gendir, exist_ok=True)
    name = f'stencil_chain_{n}'
    src_path = os.path.join(gendir, name + '.py')
    with open(src_path, 'w') as f:
        f.write(chain_source(n))
    if gendir not in sys.path:
        sys.path.insert(0, gendir)
    importlib.invalidate_caches()
    mod = importlib.import_module(name)
    prog = getattr(mod, name)
    sdfg = prog.to_sdfg(simplify=False)
    neutralize_paths(sdfg, src_path, n)
    raw = os.path.join(outdir, name + '.raw.sdfg')
    sdfg.save(raw)
    sdfg.save(raw + 'z', compress=True)
    # sanity: no absolute paths in the saved file
    with open(raw) as f:
        txt = f.read()
    leaked = [p for p in (os.path.realpath(outdir), sys.prefix) if p in txt]
    if leaked:
        print('WARNING: absolute paths found in', raw, leaked, file=sys.stderr)
    print(f'N={n}: wrote {raw} ({os.path.getsize(raw)} B) and {raw}z ({os.path.getsize(raw + "z")} B); '
          f'sdfg name {sdfg.name}')
    return sdfg


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--outdir', default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument('n', type=int, nargs='+')
    args = ap.parse_args()
    for n in args.n:
        generate(n, os.path.abspath(args.outdir))


if __name__ == '__main__':
    main()
