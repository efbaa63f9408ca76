#!/usr/bin/env python3
"""A model of halo volume against computation per rank, for an ICON-like grid on 16 to
1,024 ranks (docs/distributed.md, "Beyond this machine"). Every number it uses is an
argument or a stated assumption; nothing here is measured.

    python3 scripts/halo-model.py [--cells 20971520] [--levels 90] [--ns-per-point 168]
"""
import argparse
import math

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--cells", type=float, default=20_971_520, help="horizontal cells (ICON R2B9: 20,971,520)")
p.add_argument("--levels", type=int, default=90, help="vertical levels")
p.add_argument("--width", type=int, default=2, help="halo width in cell rows")
p.add_argument("--shape", type=float, default=4.0,
               help="perimeter of a rank's part in cell rows over sqrt(cells per rank) (4: a square)")
p.add_argument("--neighbours", type=int, default=8, help="messages per exchange per rank")
p.add_argument("--exchanges", type=int, default=21, help="exchanges per time step")
p.add_argument("--fields", type=int, default=39, help="field exchanges per time step (a field of an exchange)")
p.add_argument("--ns-per-point", type=float, default=168.0,
               help="compute time per grid point per step on one core (the dycore example: 22 ms for 128 x 128 x 8)")
p.add_argument("--cores", type=int, default=16, help="cores per rank (threads sharing its part)")
p.add_argument("--latency-us", type=float, default=2.0, help="time per message (network latency and MPI overhead)")
p.add_argument("--gbs", type=float, default=12.5, help="bandwidth per rank, GB/s (a 100 Gb/s link)")
a = p.parse_args()

print(f"{a.cells:,.0f} cells x {a.levels} levels, halo {a.width}, {a.exchanges} exchanges "
      f"({a.fields} fields) per step, {a.ns_per_point} ns per point per core, {a.cores} cores per rank, "
      f"{a.latency_us} us per message, {a.gbs} GB/s per rank")
print(f"{'ranks':>6} {'cells/rank':>11} {'halo cells':>10} {'halo %':>7} {'compute ms':>11} "
      f"{'exchange ms':>12} {'exchange %':>10}")
for ranks in [16, 32, 64, 128, 256, 512, 1024]:
    own = a.cells / ranks
    halo = a.width * a.shape * math.sqrt(own) + 4 * a.width * a.width
    compute = own * a.levels * a.ns_per_point * 1e-9 / a.cores
    volume = a.fields * halo * a.levels * 8  # bytes sent per rank per step
    comm = a.exchanges * a.neighbours * a.latency_us * 1e-6 + volume / (a.gbs * 1e9)
    print(f"{ranks:>6} {own:>11,.0f} {halo:>10,.0f} {100 * halo / own:>6.2f}% {compute * 1e3:>11.1f} "
          f"{comm * 1e3:>12.2f} {100 * comm / (compute + comm):>9.1f}%")
