"""ICON4Py's diffusion granule (`icon4py.model.atmosphere.diffusion.diffusion.Diffusion`),
set up reproducibly without serialized data.

* `make_grid(kind, num_levels, copies)`: ICON4Py's simple grid (``"simple"``: 18 cells,
  27 edges, 9 vertices, a torus) or ``copies`` disjoint copies of it (``"large"``),
  both of class `icon4py.model.common.grid.base.Grid`, as the granule takes them.
* `make_granule(grid, backend, seed)`: a `Diffusion` built with ``backend`` (a GT4Py
  `Backend`, e.g. ``sdflow.gt4py.cpu``, or ``None`` for GT4Py's embedded execution), its
  diagnostic and prognostic states and ``dtime``. Every input field is drawn from
  ``numpy.random.default_rng`` in physically plausible ranges, deterministically in
  (grid, seed).
* `run_steps(granule, steps)`: ``steps`` calls of ``Diffusion.run`` (all with
  ``initial_run=False`` unless asked otherwise).
* `state_arrays(granule)`: the prognostic and diagnostic fields as NumPy arrays.

Inputs drawn per copy. The grid's cells, edges and vertices are split into the copies of
the simple grid it is made of (one block for the simple grid, or for any grid that is not
block diagonal); block ``c``'s horizontal fields are drawn from
``numpy.random.default_rng(seed + c)`` with the block's own (local) neighbour tables, and
the vertical grid (``vct_a``), which all blocks share, from
``numpy.random.default_rng(vertical_seed)`` (``vertical_seed`` defaults to ``seed``). So
copy ``c`` of ``make_granule(make_grid("large", n, copies), backend, seed)`` gets exactly
the inputs of ``make_granule(make_grid("simple", n), backend, seed + c, vertical_seed=seed)``,
and, the copies being disconnected, computes the same results.

GT4Py 1.2.1's embedded execution cannot run two of the granule's programs as ICON4Py 0.4.1
writes them (`concat_where` with a scalar branch, and with a 2-D condition); for
backend=None, `make_granule` swaps in equivalent variants of those two (see
`_EMBEDDED_VARIANTS`). Compiled backends run ICON4Py's programs unchanged.

GT4Py compiles in worker processes started with ``spawn``: a script that builds a granule
with a compiling backend needs an ``if __name__ == "__main__":`` guard (or
``GT4PY_BUILD_JOBS_MODE=serial``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import uuid
from typing import Any, Iterator, Optional

import gt4py.next as gtx
import numpy as np
from gt4py.next.experimental import concat_where

from icon4py.model.atmosphere.diffusion import diffusion, diffusion_states, diffusion_utils
from icon4py.model.atmosphere.diffusion.stencils.apply_nabla2_to_w import _apply_nabla2_to_w
from icon4py.model.atmosphere.diffusion.stencils.apply_nabla2_to_w_in_upper_damping_layer import (
    _apply_nabla2_to_w_in_upper_damping_layer,
)
from icon4py.model.atmosphere.diffusion.stencils.calculate_horizontal_gradients_for_turbulence import (
    _calculate_horizontal_gradients_for_turbulence,
)
from icon4py.model.atmosphere.diffusion.stencils.calculate_nabla2_for_w import (
    _calculate_nabla2_for_w,
)
from icon4py.model.common import constants, dimension as dims, model_backends, type_alias as ta
from icon4py.model.common.decomposition import definitions as decomposition
from icon4py.model.common.grid import base, horizontal as h_grid, simple, states as grid_states
from icon4py.model.common.grid import vertical as v_grid
from icon4py.model.common.states import prognostic_state as prognostics

__all__ = [
    "Granule",
    "blocks_of",
    "diffusion_config",
    "make_grid",
    "make_granule",
    "make_vertical_grid",
    "run_steps",
    "state_arrays",
    "STATE_FIELDS",
]

# ----------------------------------------------------------------------------------------
# Grids
# ----------------------------------------------------------------------------------------

SIMPLE_CELLS, SIMPLE_EDGES, SIMPLE_VERTICES = 18, 27, 9


def _tables(grid: base.Grid) -> dict[str, tuple[gtx.FieldOffset, np.ndarray]]:
    """The grid's neighbour tables as NumPy arrays, with their offsets, by offset name."""
    offsets = {o.value: o for o in vars(dims).values() if isinstance(o, gtx.FieldOffset)}
    return {name: (offsets[name], np.asarray(conn.asnumpy())) for name, conn in grid.connectivities.items()}


def make_grid(kind: str, num_levels: int = 10, copies: int = 1, allocator: Any = None) -> base.Grid:
    """``"simple"``: `simple.simple_grid(num_levels=...)` (``copies`` must be 1).

    ``"large"``: ``copies`` disjoint copies of the simple grid as one `base.Grid`, the class
    the simple grid is and the granule takes: the cells, edges and vertices of copy ``c``
    are those of the simple grid offset by ``c`` times the simple grid's counts (18, 27, 9),
    and so is every entry of every neighbour table (the simple grid's 13 connectivities,
    C2E2C2E and C2E2C2E2C included), so the tables stay valid and copies never see each
    other. Like the simple grid it is global (``limited_area=False``) with no halo: every
    zone starts at 0 except the halo zones, which start (and all zones end) at the
    dimension's size.

    ``allocator``: where the neighbour tables live (a GT4Py allocator or backend; None: host
    memory). A GPU backend's calls take every array on the device, the tables too.
    """
    if kind == "simple":
        if copies != 1:
            raise ValueError("the simple grid has one copy; use kind='large'")
        return simple.simple_grid(num_levels=num_levels, allocator=allocator)
    if kind != "large":
        raise ValueError(f"unknown grid kind {kind!r}: expected 'simple' or 'large'")
    if copies < 1:
        raise ValueError("copies must be >= 1")

    small = simple.simple_grid(num_levels=num_levels)
    small_size = {
        dims.CellDim: small.num_cells,
        dims.EdgeDim: small.num_edges,
        dims.VertexDim: small.num_vertices,
    }
    size = {dim: copies * n for dim, n in small_size.items()}

    connectivities = {}
    for name, (offset, table) in _tables(small).items():
        to_dim = offset.source  # the dimension the table's entries index
        big = np.concatenate(
            [table + gtx.int32(c * small_size[to_dim]) for c in range(copies)], axis=0
        ).astype(gtx.int32)
        connectivities[name] = base.construct_connectivity(offset, big, skip_value=None, allocator=allocator)

    # As simple.simple_grid: halo zones are empty (they start at the end), every other zone
    # spans the whole dimension.
    def start_index(domain: h_grid.Domain) -> gtx.int32:
        return gtx.int32(size[domain.dim]) if domain.zone.is_halo() else gtx.int32(0)

    def end_index(domain: h_grid.Domain) -> gtx.int32:
        return gtx.int32(size[domain.dim])

    config = base.GridConfig(
        horizontal_config=base.HorizontalGridSize(
            num_vertices=size[dims.VertexDim],
            num_edges=size[dims.EdgeDim],
            num_cells=size[dims.CellDim],
        ),
        vertical_size=num_levels,
        limited_area=False,
    )
    grid = base.Grid(
        # A fixed synthetic UUID per number of copies, like the simple grid's.
        id=str(uuid.uuid5(uuid.UUID(small.id), f"sdflow-large-simple-grid-x{copies}")),
        config=config,
        connectivities=connectivities,
        start_index=start_index,
        end_index=end_index,
    )
    assert grid.size[dims.CellDim] == size[dims.CellDim]  # checks the tables' shapes
    return grid


def blocks_of(grid: base.Grid) -> int:
    """How many disjoint copies of the simple grid ``grid`` is: the number of blocks its
    inputs are drawn in. 1 for the simple grid, and for any grid whose tables are not
    block diagonal in simple-grid-sized blocks."""
    n_cells, n_edges, n_vertices = grid.num_cells, grid.num_edges, grid.num_vertices
    if n_cells % SIMPLE_CELLS:
        return 1
    n = n_cells // SIMPLE_CELLS
    if n_edges != n * SIMPLE_EDGES or n_vertices != n * SIMPLE_VERTICES:
        return 1
    block = {dims.CellDim: SIMPLE_CELLS, dims.EdgeDim: SIMPLE_EDGES, dims.VertexDim: SIMPLE_VERTICES}
    for offset, table in _tables(grid).values():
        from_dim, to_dim = offset.target[0], offset.source
        rows = np.arange(table.shape[0]) // block[from_dim]
        if not np.all(table // block[to_dim] == rows[:, None]):
            return 1
    return n


def _local_tables(grid: base.Grid, blocks: int, c: int) -> dict[str, np.ndarray]:
    """Block ``c``'s neighbour tables in the block's own (local) indices."""
    size = {dims.CellDim: grid.num_cells, dims.EdgeDim: grid.num_edges, dims.VertexDim: grid.num_vertices}
    out = {}
    for name, (offset, table) in _tables(grid).items():
        from_dim, to_dim = offset.target[0], offset.source
        nf, nt = size[from_dim] // blocks, size[to_dim] // blocks
        out[name] = table[c * nf : (c + 1) * nf] - c * nt
    return out


# ----------------------------------------------------------------------------------------
# Configuration and vertical grid
# ----------------------------------------------------------------------------------------

#: Model top [m] (ICON's default `top_height` of sleve_nml, as VerticalGridConfig's).
MODEL_TOP_HEIGHT = 23500.0
#: Height [m] where Rayleigh damping of w starts (`damp_height` of nonhydrostatic_nml; the
#: namelist's default 45 km is above the model top, which would leave the damping layer
#: empty; 12.5 km is the order of ICON's real-case settings and puts the top levels into it).
RAYLEIGH_DAMPING_HEIGHT = 12500.0
#: Typical primal edge length [m] of the synthetic horizontal grid (a ~5 km mesh).
EDGE_LENGTH = 5000.0
#: Time step [s] diffusion is run with (a plausible dynamics time step for ~5 km).
DTIME = 30.0


def diffusion_config() -> diffusion.DiffusionConfig:
    """The configuration: ICON's defaults for a real case, with everything switched on.

    * diffusion_type=SMAGORINSKY_4TH_ORDER (hdiff_order=5, ICON's default and the only type
      ICON4Py implements); type_vn_diffu=DIAMOND_VERTICES (1), type_t_diffu=HETEROGENEOUS
      (2): the only ones implemented.
    * apply_to_horizontal_wind, apply_to_vertical_wind, apply_to_temperature: True (lhdiff_vn,
      lhdiff_w, lhdiff_temp), so every stencil of the step runs.
    * apply_zdiffusion_t=True (l_zdiffu_t): the truly horizontal temperature diffusion over
      steep slopes (zd_vertoffset, zd_intcoef, zd_diffcoef) runs.
    * shear_type=VERTICAL_HORIZONTAL_OF_HORIZONTAL_VERTICAL_WIND (itype_sher=2): >= 1, so
      calculate_diagnostic_quantities_for_turbulence (div_ic, hdef_ic) runs, and 2, so the
      w stencil also computes dwdx, dwdy. a_hshr=1.0 (default; > 0 also triggers it).
    * ndyn_substeps=5, hdiff_efdt_ratio=36, hdiff_w_efdt_ratio=15, the Smagorinsky factors
      and heights, the nudging/boundary denominators: ICON's defaults.
    * iforcing=NWP (inwp), as in real cases: only decides whether the final (here no-op)
      halo exchanges run.
    """
    return diffusion.DiffusionConfig(
        diffusion_type=diffusion.DiffusionType.SMAGORINSKY_4TH_ORDER,
        apply_to_horizontal_wind=True,
        apply_to_vertical_wind=True,
        apply_to_temperature=True,
        type_vn_diffu=diffusion.SmagorinskyStencilType.DIAMOND_VERTICES,
        type_t_diffu=diffusion.TemperatureDiscretizationType.HETEROGENEOUS,
        apply_zdiffusion_t=True,
        shear_type=diffusion.TurbulenceShearForcingType.VERTICAL_HORIZONTAL_OF_HORIZONTAL_VERTICAL_WIND,
        a_hshr=1.0,
        ndyn_substeps=5,
        hdiff_efdt_ratio=36.0,
        hdiff_w_efdt_ratio=15.0,
        iforcing=diffusion.ForcingType.NWP,
    )


def make_vertical_grid(num_levels: int, seed: int, allocator: Any = None) -> v_grid.VerticalGrid:
    """A VerticalGrid with seeded, strictly decreasing interface heights ``vct_a`` (index 0
    the model top at MODEL_TOP_HEIGHT, index ``num_levels`` the surface at 0 m): layer
    thicknesses grow geometrically with height (top layer ~10x the lowest) with a random
    +-15 % jitter drawn from ``default_rng(seed)``. vct_b as ICON's analytic one,
    exp(-vct_a / 5000)."""
    rng = np.random.default_rng(seed)
    n = num_levels
    growth = 10.0 ** (1.0 / max(n - 1, 1))
    # thickness of layer k (k=0 top) relative to the lowest
    rel = growth ** np.arange(n - 1, -1, -1, dtype=float) * rng.uniform(0.85, 1.15, size=n)
    dz = rel / rel.sum() * MODEL_TOP_HEIGHT
    vct_a = np.zeros(n + 1)
    vct_a[:n] = np.cumsum(dz[::-1])[::-1]
    vct_a[0] = MODEL_TOP_HEIGHT
    assert np.all(np.diff(vct_a) < 0)
    vct_b = np.exp(-vct_a / 5000.0)
    config = v_grid.VerticalGridConfig(
        num_levels=n,
        model_top_height=MODEL_TOP_HEIGHT,
        rayleigh_damping_height=RAYLEIGH_DAMPING_HEIGHT,
        flat_height=16000.0,
        htop_moist_proc=22500.0,
    )
    return v_grid.VerticalGrid(
        config=config,
        vct_a=gtx.as_field((dims.KDim,), vct_a.astype(ta.wpfloat), allocator=allocator),
        vct_b=gtx.as_field((dims.KDim,), vct_b.astype(ta.wpfloat), allocator=allocator),
    )


# ----------------------------------------------------------------------------------------
# Random inputs, one block (copy of the simple grid) at a time
# ----------------------------------------------------------------------------------------


def _shared_edges(c2e: np.ndarray, c2e2c: np.ndarray, e2c: np.ndarray) -> np.ndarray:
    """For each cell and each of its C2E2C neighbours, the edge between them (that of the
    cell's C2E edges whose E2C holds the neighbour; the i-th C2E edge if none does)."""
    out = c2e.copy()
    for c in range(c2e.shape[0]):
        for i, n in enumerate(c2e2c[c]):
            for e in c2e[c]:
                if n in e2c[e]:
                    out[c, i] = e
                    break
    return out


def _c2e2co_coefficients(c2e2co: np.ndarray, neighbours: np.ndarray) -> np.ndarray:
    """C2E2CO coefficients from the C2E2C neighbours' (n_cells, 3), in the order of the
    C2E2CO table: the cell itself gets -sum(neighbours), wherever the table lists it."""
    n_cells = c2e2co.shape[0]
    out = np.empty((n_cells, c2e2co.shape[1]))
    for c in range(n_cells):
        self_pos = np.flatnonzero(c2e2co[c] == c)
        pos = int(self_pos[0]) if self_pos.size else 0
        out[c, pos] = -neighbours[c].sum()
        out[c, [j for j in range(c2e2co.shape[1]) if j != pos]] = neighbours[c]
    return out


def _draw_block(
    rng: np.random.Generator,
    tables: dict[str, np.ndarray],
    n_cells: int,
    n_edges: int,
    n_vertices: int,
    vct_a: np.ndarray,
    max_nudging_coefficient: float,
) -> dict[str, np.ndarray]:
    """Every horizontal input of one block, drawn in a fixed order from ``rng``.

    C2E2CO-indexed coefficients (geofac_n2s, geofac_grg_x/y) follow the grid's own C2E2CO
    table: the cell's coefficient where the table lists the cell itself, its neighbours'
    where it lists them. On grids from ICON4Py's grid manager (and in ICON) the cell comes
    first, as DiffusionInterpolationState.geofac_n2s_c / geofac_n2s_nbh ([:, 0] / [:, 1:])
    assume; the simple grid lists it last, so there the truly horizontal temperature
    diffusion pairs these slices with the wrong cells (still a zero-sum operator) while the
    w stencil's Laplacian (which goes through C2E2CO) is right. Pairing them the other way
    round made w grow without bound over a few steps (the w Laplacian then has a positive
    weight on the cell itself).
    """
    nlev = vct_a.shape[0] - 1
    # vct_a: interface heights, (nlev+1,), top -> surface
    z_full = 0.5 * (vct_a[:-1] + vct_a[1:])  # (nlev,)
    ztop = vct_a[0]
    c2e, c2e2c = tables[dims.C2E.value], tables[dims.C2E2C.value]
    c2e2co = tables[dims.C2E2CO.value]
    L = EDGE_LENGTH
    out: dict[str, np.ndarray] = {}
    u = rng.uniform

    # --- cell geometry -------------------------------------------------------------
    area = math.sqrt(3.0) / 4.0 * L**2 * u(0.9, 1.1, n_cells)  # equilateral-ish triangles
    out["cell_area"] = area
    out["cell_center_lat"] = u(-0.5 * math.pi, 0.5 * math.pi, n_cells)
    out["cell_center_lon"] = u(-math.pi, math.pi, n_cells)

    # --- edge geometry -------------------------------------------------------------
    primal = L * u(0.9, 1.1, n_edges)
    dual = primal / math.sqrt(3.0) * u(0.9, 1.1, n_edges)
    vert_vert = math.sqrt(3.0) * primal * u(0.95, 1.05, n_edges)
    out["primal_edge_lengths"] = primal
    out["inverse_primal_edge_lengths"] = 1.0 / primal
    out["dual_edge_lengths"] = dual
    out["inverse_dual_edge_lengths"] = 1.0 / dual
    out["inverse_vertex_vertex_lengths"] = 1.0 / vert_vert
    out["edge_areas"] = primal * dual  # ICON: area_edge = primal * dual edge length
    out["tangent_orientation"] = rng.choice(np.array([-1.0, 1.0]), size=n_edges)
    # Edge normal direction (angle to east); projected onto the 4 E2C2V vertices and the 2
    # E2C cells with a small rotation (the local frames differ slightly on the sphere).
    normal_angle = u(-math.pi, math.pi, n_edges)
    rot_v = normal_angle[:, None] + rng.normal(0.0, 0.02, (n_edges, 4))
    rot_c = normal_angle[:, None] + rng.normal(0.0, 0.02, (n_edges, 2))
    out["primal_normal_vert_x"] = np.cos(rot_v)
    out["primal_normal_vert_y"] = np.sin(rot_v)
    out["dual_normal_vert_x"] = -np.sin(rot_v)
    out["dual_normal_vert_y"] = np.cos(rot_v)
    out["primal_normal_cell_x"] = np.cos(rot_c)
    out["primal_normal_cell_y"] = np.sin(rot_c)
    out["dual_normal_cell_x"] = -np.sin(rot_c)
    out["dual_normal_cell_y"] = np.cos(rot_c)
    out["primal_normal_x"] = np.cos(normal_angle)
    out["primal_normal_y"] = np.sin(normal_angle)
    edge_lat = u(-0.5 * math.pi, 0.5 * math.pi, n_edges)
    out["edge_center_lat"] = edge_lat
    out["edge_center_lon"] = u(-math.pi, math.pi, n_edges)
    out["coriolis_frequency"] = 2.0 * constants.EARTH_ANGULAR_VELOCITY * np.sin(edge_lat)

    # --- interpolation coefficients ----------------------------------------------------
    # e_bln_c_s: bilinear edge->cell weights, ~1/3 each.
    out["e_bln_c_s"] = u(0.30, 0.37, (n_cells, 3))
    # geofac_div = orientation * edge length / cell area (~ +-4.6e-4 1/m).
    orientation = rng.choice(np.array([-1.0, 1.0]), size=(n_cells, 3))
    out["geofac_div"] = orientation * primal[c2e] / area[:, None]
    # geofac_n2s: scalar Laplacian over C2E2CO, neighbours l_e / (l_dual * A) > 0 (l_e the
    # edge shared with the neighbour), the cell itself -sum of them (zero for a constant).
    # geofac_grg_x/y: Green-Gauss gradient, neighbours ~ +-1/(2L), the cell itself -sum.
    shared = _shared_edges(c2e, c2e2c, tables[dims.E2C.value])
    nbh = primal[shared] / dual[shared] / area[:, None] * u(0.9, 1.1, (n_cells, 3))
    out["geofac_n2s"] = _c2e2co_coefficients(c2e2co, nbh)
    for comp in ("x", "y"):
        g = u(-1.0, 1.0, (n_cells, 3)) / (2.0 * L)
        out[f"geofac_grg_{comp}"] = _c2e2co_coefficients(c2e2co, g)
    # rbf_coeff_1/2: RBF vector reconstruction edge->vertex (u, v) of the 6 edges around a
    # vertex, ~ (1/3) (cos, sin) of the edge directions, 60 degrees apart.
    alpha = u(0.0, 2.0 * math.pi, (n_vertices, 1)) + np.arange(6) * (math.pi / 3.0)
    alpha = alpha + rng.normal(0.0, 0.05, (n_vertices, 6))
    amp = u(0.3, 0.37, (n_vertices, 6))
    out["rbf_coeff_1"] = amp * np.cos(alpha)
    out["rbf_coeff_2"] = amp * np.sin(alpha)
    # nudgecoeff_e: zero but on ~10 % of the edges (the grid is global, limited_area=False,
    # so the granule does not use it).
    nudge = u(0.0, max_nudging_coefficient, n_edges)
    out["nudgecoeff_e"] = np.where(u(0.0, 1.0, n_edges) < 0.1, nudge, 0.0)

    # --- metrics ----------------------------------------------------------------------
    # Reference potential temperature: 290 K + 3 K/km, a little horizontal variation.
    out["theta_ref_mc"] = 290.0 + 3.0e-3 * z_full[None, :] + u(-0.5, 0.5, (n_cells, nlev))
    # Full->half level interpolation weight, nlev+1 levels (KHalfDim in ICON4Py).
    out["wgtfac_c"] = u(0.4, 0.6, (n_cells, nlev + 1))
    # zd_diffcoef: 0 at ~30 % of the points, else up to ICON's cap 0.002.
    coef = u(0.0, 0.002, (n_cells, nlev))
    out["zd_diffcoef"] = np.where(u(0.0, 1.0, (n_cells, nlev)) < 0.3, 0.0, coef)
    # zd_intcoef: vertical interpolation weight in [0, 1].
    out["zd_intcoef"] = u(0.0, 1.0, (n_cells, 3, nlev))
    # zd_vertoffset: the neighbour's level relative to k, 0..2 (neighbours lower down), so
    # that k+offset and k+offset+1 both lie in [0, nlev-1] at every point (the stencils read
    # them everywhere, also where zd_diffcoef is 0): clipped into [-k, nlev-2-k].
    k = np.arange(nlev)
    off = rng.integers(0, 3, (n_cells, 3, nlev))
    out["zd_vertoffset"] = np.clip(off, -k, nlev - 2 - k).astype(gtx.int32)

    # --- prognostic state -------------------------------------------------------------
    # vn: a westerly increasing with height (5..30 m/s) projected on the edge normal,
    # plus 3 m/s noise.
    u_mean = 5.0 + 25.0 * z_full / ztop
    out["vn"] = u_mean[None, :] * np.cos(normal_angle)[:, None] + rng.normal(0.0, 3.0, (n_edges, nlev))
    # w: small (0.3 m/s), zero at the model top (half level 0).
    w = np.clip(rng.normal(0.0, 0.3, (n_cells, nlev + 1)), -2.0, 2.0)
    w[:, 0] = 0.0
    out["w"] = w
    # theta_v: the reference plus 2 K noise (a few points then trigger the cold-pool
    # enhancement, which acts below -5 K relative to the neighbours).
    out["theta_v"] = out["theta_ref_mc"] + rng.normal(0.0, 2.0, (n_cells, nlev))
    # exner: 1.0 at the surface to 0.9 at the top, small noise.
    out["exner"] = 1.0 - 0.1 * z_full[None, :] / ztop + rng.normal(0.0, 1.0e-3, (n_cells, nlev))
    out["rho"] = 1.2 * np.exp(-z_full[None, :] / 8000.0) * u(0.98, 1.02, (n_cells, nlev))

    # --- diagnostic state (half levels) ---------------------------------------------------
    out["div_ic"] = rng.normal(0.0, 1.0e-5, (n_cells, nlev + 1))  # [1/s]
    out["hdef_ic"] = u(0.0, 1.0e-8, (n_cells, nlev + 1))  # [1/s^2], >= 0
    out["dwdx"] = rng.normal(0.0, 1.0e-5, (n_cells, nlev + 1))  # [1/s]
    out["dwdy"] = rng.normal(0.0, 1.0e-5, (n_cells, nlev + 1))  # [1/s]
    return out


# ----------------------------------------------------------------------------------------
# GT4Py 1.2.1's embedded execution and two of the granule's programs
# ----------------------------------------------------------------------------------------
#
# GT4Py 1.2.1's embedded execution (backend=None) cannot run two of the granule's programs
# as ICON4Py 0.4.1 writes them, both for `concat_where` (gt4py/next/embedded/nd_array_field.py
# `_concat_where`):
#
# 1. Diffusion.__init__ runs `diffusion_utils.init_nabla2_factor_in_upper_damping_zone`
#    (diff_multfac_n2w), whose `concat_where(cond, physical_heights, 0.0)` has a scalar
#    branch: embedded broadcasts the scalar to an infinite K range and fails in `_concat`
#    ("ValueError: Cannot compute length of open 'UnitRange'"), whatever the damping layer.
# 2. Diffusion.run runs `apply_diffusion_to_w_and_compute_horizontal_gradients_for_turbulence`,
#    whose last `concat_where((0 < K) & (K < nrdmax) & (interior_idx <= Cell) & (Cell <
#    halo_idx), ...)` has a 2-D condition: "NotImplementedError: 'concat_where': Can only
#    concatenate fields with a 1-dimensional domain."
#
# For the embedded backend only, `make_granule` builds the granule with the two programs
# below in their place (`_embedded_variants`), which compute the same values:
# 1. the same expression with the scalar 0.0 replaced by `0.0 * physical_heights` (a field,
#    +0.0 everywhere: the heights are finite and >= 0);
# 2. the same field operators of ICON4Py (_calculate_horizontal_gradients_for_turbulence,
#    _calculate_nabla2_for_w, _apply_nabla2_to_w, _apply_nabla2_to_w_in_upper_damping_layer),
#    the 2-D selection written as two nested 1-D ones (K outside, Cell inside), which select
#    the same points.
# Compiled backends (sdflow, gtfn, ...) run ICON4Py's own programs.


@gtx.field_operator
def _init_nabla2_factor_in_upper_damping_zone_embedded(
    physical_heights: gtx.Field[gtx.Dims[dims.KDim], float],
    end_index_of_damping_layer: gtx.int32,
    nshift: gtx.int32,
    heights_nrd_shift: float,
    heights_1: float,
) -> gtx.Field[gtx.Dims[dims.KDim], float]:
    height_sliced = concat_where(
        ((1 + nshift) <= dims.KDim) & (dims.KDim < (nshift + end_index_of_damping_layer + 1)),
        physical_heights,
        0.0 * physical_heights,
    )
    return 1.0 / 12.0 * ((height_sliced - heights_nrd_shift) / (heights_1 - heights_nrd_shift)) ** 4


@gtx.program
def _init_nabla2_factor_in_upper_damping_zone_embedded_program(
    physical_heights: gtx.Field[gtx.Dims[dims.KDim], float],
    diff_multfac_n2w: gtx.Field[gtx.Dims[dims.KDim], float],
    end_index_of_damping_layer: gtx.int32,
    nshift: gtx.int32,
    heights_nrd_shift: float,
    heights_1: float,
    vertical_start: gtx.int32,
    vertical_end: gtx.int32,
) -> None:
    _init_nabla2_factor_in_upper_damping_zone_embedded(
        physical_heights=physical_heights,
        end_index_of_damping_layer=end_index_of_damping_layer,
        nshift=nshift,
        heights_nrd_shift=heights_nrd_shift,
        heights_1=heights_1,
        out=diff_multfac_n2w,
        domain={dims.KDim: (vertical_start, vertical_end)},
    )


@gtx.field_operator
def _apply_diffusion_to_w_and_compute_horizontal_gradients_for_turbulence_embedded(
    area: gtx.Field[gtx.Dims[dims.CellDim], ta.wpfloat],
    geofac_n2s: gtx.Field[gtx.Dims[dims.CellDim, dims.C2E2CODim], ta.wpfloat],
    geofac_grg_x: gtx.Field[gtx.Dims[dims.CellDim, dims.C2E2CODim], ta.wpfloat],
    geofac_grg_y: gtx.Field[gtx.Dims[dims.CellDim, dims.C2E2CODim], ta.wpfloat],
    w_old: gtx.Field[gtx.Dims[dims.CellDim, dims.KDim], ta.wpfloat],
    type_shear: gtx.int32,
    dwdx: gtx.Field[gtx.Dims[dims.CellDim, dims.KDim], ta.vpfloat],
    dwdy: gtx.Field[gtx.Dims[dims.CellDim, dims.KDim], ta.vpfloat],
    diff_multfac_w: ta.wpfloat,
    diff_multfac_n2w: gtx.Field[gtx.Dims[dims.KDim], ta.wpfloat],
    nrdmax: gtx.int32,
    interior_idx: gtx.int32,
    halo_idx: gtx.int32,
) -> tuple[
    gtx.Field[gtx.Dims[dims.CellDim, dims.KDim], ta.wpfloat],
    gtx.Field[gtx.Dims[dims.CellDim, dims.KDim], ta.vpfloat],
    gtx.Field[gtx.Dims[dims.CellDim, dims.KDim], ta.vpfloat],
]:
    dwdx, dwdy = (
        concat_where(
            0 < dims.KDim,
            _calculate_horizontal_gradients_for_turbulence(w_old, geofac_grg_x, geofac_grg_y),
            (dwdx, dwdy),
        )
        if type_shear == 2
        else (dwdx, dwdy)
    )

    z_nabla2_c = _calculate_nabla2_for_w(w_old, geofac_n2s)

    w = concat_where(
        (interior_idx <= dims.CellDim) & (dims.CellDim < halo_idx),
        _apply_nabla2_to_w(area, z_nabla2_c, geofac_n2s, w_old, diff_multfac_w),
        w_old,
    )

    w = concat_where(
        (0 < dims.KDim) & (dims.KDim < nrdmax),
        concat_where(
            (interior_idx <= dims.CellDim) & (dims.CellDim < halo_idx),
            _apply_nabla2_to_w_in_upper_damping_layer(w, diff_multfac_n2w, area, z_nabla2_c),
            w,
        ),
        w,
    )

    return w, dwdx, dwdy


@gtx.program(grid_type=gtx.GridType.UNSTRUCTURED)
def _apply_diffusion_to_w_and_compute_horizontal_gradients_for_turbulence_embedded_program(
    area: gtx.Field[gtx.Dims[dims.CellDim], ta.wpfloat],
    geofac_n2s: gtx.Field[gtx.Dims[dims.CellDim, dims.C2E2CODim], ta.wpfloat],
    geofac_grg_x: gtx.Field[gtx.Dims[dims.CellDim, dims.C2E2CODim], ta.wpfloat],
    geofac_grg_y: gtx.Field[gtx.Dims[dims.CellDim, dims.C2E2CODim], ta.wpfloat],
    w_old: gtx.Field[gtx.Dims[dims.CellDim, dims.KDim], ta.wpfloat],
    w: gtx.Field[gtx.Dims[dims.CellDim, dims.KDim], ta.wpfloat],
    type_shear: gtx.int32,
    dwdx: gtx.Field[gtx.Dims[dims.CellDim, dims.KDim], ta.vpfloat],
    dwdy: gtx.Field[gtx.Dims[dims.CellDim, dims.KDim], ta.vpfloat],
    diff_multfac_w: ta.wpfloat,
    diff_multfac_n2w: gtx.Field[gtx.Dims[dims.KDim], ta.wpfloat],
    nrdmax: gtx.int32,
    interior_idx: gtx.int32,
    halo_idx: gtx.int32,
    horizontal_start: gtx.int32,
    horizontal_end: gtx.int32,
    vertical_start: gtx.int32,
    vertical_end: gtx.int32,
) -> None:
    _apply_diffusion_to_w_and_compute_horizontal_gradients_for_turbulence_embedded(
        area=area,
        geofac_n2s=geofac_n2s,
        geofac_grg_x=geofac_grg_x,
        geofac_grg_y=geofac_grg_y,
        w_old=w_old,
        type_shear=type_shear,
        dwdx=dwdx,
        dwdy=dwdy,
        diff_multfac_w=diff_multfac_w,
        diff_multfac_n2w=diff_multfac_n2w,
        nrdmax=nrdmax,
        interior_idx=interior_idx,
        halo_idx=halo_idx,
        out=(w, dwdx, dwdy),
        domain={
            dims.CellDim: (horizontal_start, horizontal_end),
            dims.KDim: (vertical_start, vertical_end),
        },
    )


#: (module, attribute, embedded variant): what `_embedded_variants` swaps in.
_EMBEDDED_VARIANTS = (
    (
        diffusion_utils,
        "init_nabla2_factor_in_upper_damping_zone",
        _init_nabla2_factor_in_upper_damping_zone_embedded_program,
    ),
    (
        diffusion,
        "apply_diffusion_to_w_and_compute_horizontal_gradients_for_turbulence",
        _apply_diffusion_to_w_and_compute_horizontal_gradients_for_turbulence_embedded_program,
    ),
)


@contextlib.contextmanager
def _embedded_variants(backend: Any) -> Iterator[None]:
    """While the granule is built (Diffusion.__init__ looks both programs up in these
    modules and binds them then): for backend None, the variants above in place of
    ICON4Py's programs, restored afterwards. Nothing changes for other backends."""
    if backend is not None:
        yield
        return
    originals = [(module, name, getattr(module, name)) for module, name, _ in _EMBEDDED_VARIANTS]
    try:
        for module, name, variant in _EMBEDDED_VARIANTS:
            setattr(module, name, variant)
        yield
    finally:
        for module, name, original in originals:
            setattr(module, name, original)


# ----------------------------------------------------------------------------------------
# The granule
# ----------------------------------------------------------------------------------------

#: The fields `state_arrays` returns.
STATE_FIELDS = ("vn", "w", "theta_v", "exner", "div_ic", "hdef_ic", "dwdx", "dwdy")


@dataclasses.dataclass
class Granule:
    """A diffusion granule and its states. Unpacks as
    ``diffusion, diagnostic_state, prognostic_state, dtime = granule``."""

    diffusion: diffusion.Diffusion
    diagnostic_state: diffusion_states.DiffusionDiagnosticState
    prognostic_state: prognostics.PrognosticState
    dtime: float
    grid: base.Grid
    vertical_grid: v_grid.VerticalGrid
    config: diffusion.DiffusionConfig
    params: diffusion.DiffusionParams
    metric_state: diffusion_states.DiffusionMetricState
    interpolation_state: diffusion_states.DiffusionInterpolationState
    edge_params: grid_states.EdgeParams
    cell_params: grid_states.CellParams
    backend: Any
    seed: int
    blocks: int
    #: the drawn inputs, NumPy, whole grid (all blocks concatenated)
    inputs: dict[str, np.ndarray]

    def __iter__(self) -> Iterator[Any]:
        return iter((self.diffusion, self.diagnostic_state, self.prognostic_state, self.dtime))


def make_granule(
    grid: base.Grid,
    backend: Any,
    seed: int = 42,
    *,
    vertical_seed: Optional[int] = None,
    dtime: float = DTIME,
) -> Granule:
    """ICON4Py's Diffusion on ``grid`` with ``backend`` (a GT4Py Backend, or None: embedded)
    and seeded random inputs; see the module's docstring for how they are drawn. The fields
    are allocated with the backend's allocator (``model_backends.get_allocator``: the
    backend itself, or GT4Py's standard CPU allocator for None), as the granule allocates
    its own. The exchange is ICON4Py's single-node no-op `SingleNodeExchange`."""
    vertical_seed = seed if vertical_seed is None else vertical_seed
    allocator = model_backends.get_allocator(backend)
    nlev = grid.num_levels

    config = diffusion_config()
    params = diffusion.DiffusionParams(config)
    vertical_grid = make_vertical_grid(nlev, vertical_seed, allocator=allocator)
    vct_a = vertical_grid.interface_physical_height.asnumpy()

    blocks = blocks_of(grid)
    nc, ne, nv = grid.num_cells // blocks, grid.num_edges // blocks, grid.num_vertices // blocks
    drawn = [
        _draw_block(
            np.random.default_rng(seed + c),
            _local_tables(grid, blocks, c),
            nc,
            ne,
            nv,
            vct_a,
            config.max_nudging_coefficient,
        )
        for c in range(blocks)
    ]
    inputs = {name: np.concatenate([d[name] for d in drawn], axis=0) for name in drawn[0]}

    def field(name: str, *field_dims: gtx.Dimension, dtype: Any = ta.wpfloat) -> gtx.Field:
        value = np.ascontiguousarray(inputs[name]).astype(dtype)
        return gtx.as_field(field_dims, value, allocator=allocator)

    C, E, V, K = dims.CellDim, dims.EdgeDim, dims.VertexDim, dims.KDim

    edge_params = grid_states.EdgeParams(
        tangent_orientation=field("tangent_orientation", E),
        primal_edge_lengths=field("primal_edge_lengths", E),
        inverse_primal_edge_lengths=field("inverse_primal_edge_lengths", E),
        dual_edge_lengths=field("dual_edge_lengths", E),
        inverse_dual_edge_lengths=field("inverse_dual_edge_lengths", E),
        inverse_vertex_vertex_lengths=field("inverse_vertex_vertex_lengths", E),
        primal_normal_vert_x=field("primal_normal_vert_x", E, dims.E2C2VDim),
        primal_normal_vert_y=field("primal_normal_vert_y", E, dims.E2C2VDim),
        dual_normal_vert_x=field("dual_normal_vert_x", E, dims.E2C2VDim),
        dual_normal_vert_y=field("dual_normal_vert_y", E, dims.E2C2VDim),
        primal_normal_cell_x=field("primal_normal_cell_x", E, dims.E2CDim),
        dual_normal_cell_x=field("dual_normal_cell_x", E, dims.E2CDim),
        primal_normal_cell_y=field("primal_normal_cell_y", E, dims.E2CDim),
        dual_normal_cell_y=field("dual_normal_cell_y", E, dims.E2CDim),
        edge_areas=field("edge_areas", E),
        coriolis_frequency=field("coriolis_frequency", E),
        edge_center_lat=field("edge_center_lat", E),
        edge_center_lon=field("edge_center_lon", E),
        primal_normal_x=field("primal_normal_x", E),
        primal_normal_y=field("primal_normal_y", E),
    )
    cell_params = grid_states.CellParams(
        cell_center_lat=field("cell_center_lat", C),
        cell_center_lon=field("cell_center_lon", C),
        area=field("cell_area", C),
        mean_cell_area=float(inputs["cell_area"].mean()),
    )
    interpolation_state = diffusion_states.DiffusionInterpolationState(
        e_bln_c_s=field("e_bln_c_s", C, dims.C2EDim),
        rbf_coeff_1=field("rbf_coeff_1", V, dims.V2EDim),
        rbf_coeff_2=field("rbf_coeff_2", V, dims.V2EDim),
        geofac_div=field("geofac_div", C, dims.C2EDim),
        geofac_n2s=field("geofac_n2s", C, dims.C2E2CODim),
        geofac_grg_x=field("geofac_grg_x", C, dims.C2E2CODim),
        geofac_grg_y=field("geofac_grg_y", C, dims.C2E2CODim),
        nudgecoeff_e=field("nudgecoeff_e", E),
    )
    metric_state = diffusion_states.DiffusionMetricState(
        theta_ref_mc=field("theta_ref_mc", C, K, dtype=ta.vpfloat),
        wgtfac_c=field("wgtfac_c", C, K, dtype=ta.vpfloat),
        zd_vertoffset=field("zd_vertoffset", C, dims.C2E2CDim, K, dtype=gtx.int32),
        zd_diffcoef=field("zd_diffcoef", C, K),
        zd_intcoef=field("zd_intcoef", C, dims.C2E2CDim, K),
    )
    prognostic_state = prognostics.PrognosticState(
        rho=field("rho", C, K),
        w=field("w", C, K),
        vn=field("vn", E, K),
        exner=field("exner", C, K),
        theta_v=field("theta_v", C, K),
    )
    diagnostic_state = diffusion_states.DiffusionDiagnosticState(
        hdef_ic=field("hdef_ic", C, K, dtype=ta.vpfloat),
        div_ic=field("div_ic", C, K, dtype=ta.vpfloat),
        dwdx=field("dwdx", C, K, dtype=ta.vpfloat),
        dwdy=field("dwdy", C, K, dtype=ta.vpfloat),
    )

    with _embedded_variants(backend):
        granule = diffusion.Diffusion(
            grid=grid,
            config=config,
            params=params,
            vertical_grid=vertical_grid,
            metric_state=metric_state,
            interpolation_state=interpolation_state,
            edge_params=edge_params,
            cell_params=cell_params,
            backend=backend,
            exchange=decomposition.SingleNodeExchange(),
        )
    return Granule(
        diffusion=granule,
        diagnostic_state=diagnostic_state,
        prognostic_state=prognostic_state,
        dtime=dtime,
        grid=grid,
        vertical_grid=vertical_grid,
        config=config,
        params=params,
        metric_state=metric_state,
        interpolation_state=interpolation_state,
        edge_params=edge_params,
        cell_params=cell_params,
        backend=backend,
        seed=seed,
        blocks=blocks,
        inputs=inputs,
    )


def run_steps(granule: Granule, steps: int, *, initial_run: bool = False) -> None:
    """``steps`` calls of ``Diffusion.run(diagnostic_state, prognostic_state, dtime)``,
    updating the states in place. The first call passes ``initial_run`` (default False:
    every step is a regular one, with diff_multfac_vn, smag_limit and smag_offset of a
    regular step); the others pass False."""
    for step in range(steps):
        granule.diffusion.run(
            granule.diagnostic_state,
            granule.prognostic_state,
            granule.dtime,
            initial_run=initial_run and step == 0,
        )


def state_arrays(granule: Granule) -> dict[str, np.ndarray]:
    """vn, w, theta_v, exner (prognostic) and div_ic, hdef_ic, dwdx, dwdy (diagnostic) as
    NumPy arrays (copies)."""
    p, d = granule.prognostic_state, granule.diagnostic_state
    fields = {
        "vn": p.vn,
        "w": p.w,
        "theta_v": p.theta_v,
        "exner": p.exner,
        "div_ic": d.div_ic,
        "hdef_ic": d.hdef_ic,
        "dwdx": d.dwdx,
        "dwdy": d.dwdy,
    }
    return {name: np.array(f.asnumpy(), copy=True) for name, f in fields.items()}
