"""The supply part of the block LP: each balanced site's energy balance, battery and peak.

A *balanced* site is a datacenter with renewables, a battery or a demand charge
(:mod:`workbench.supply`). For it the block LP (:mod:`workbench.optim.blocklp`) does not
charge its jobs' columns the grid price; the energy they draw goes through the site's
balance, where it comes from its renewables, its battery or the grid, and the billing
period's peak grid import is a variable. Columns, per site ``s``, source ``r`` and block
``b`` (kWh over the block unless said)::

    grid[s,b]      in [0, Gcap[s,b]]         cost p[b,s] (+ q c[b,s]: carbon price); Gcap
                                             the site's import cap less its idle load over
                                             the block (inf without one)
    ren[r,b]       in [0, A[r,b]]            cost its marginal price (0 take-or-pay)
    export[s,b]    >= 0                      cost -export price (sites that sell surplus)
    charge[s,b]    in [0, P_s len_b h]       battery sites
    discharge[s,b] in [0, P_s len_b h]
    soc[s,b]       in [0, hi_s - lo_s]       state of charge at the block's end, above lo_s
    peak[k]        >= 0                      per demand charge line k: kW above the peak
                                             already metered, cost its price per kW
    over[s,b]      >= 0 where Gcap is finite  import beyond the limit, cost w_over (far
                                             above any job's work): what no lever can keep
                                             (a battery emptier than planned when an event
                                             is told) is bought there, the rest of the plan
                                             stays, and the meter reports the limit missed

and rows::

    sum_{x at s} E_x x + charge + export - sum_{r at s} ren - discharge - grid - over
                                                                                   = -D[s,b]
                                                                                   balance
    soc[s,b] - soc[s,b-1] - eta charge[s,b] + discharge[s,b] / eta = 0             (b = 0:
                                                              = soc0_s - lo_s)       battery
    export[s,b] - sum_{r at s} ren[r,b] <= 0                  (only renewables are sold)
    peak[k] - grid[s,b] / (len_b h) >= base_s - floor_k       blocks b of line k     peak

``D[s,b]`` is 0 but where a grid event limits the site's import below its idle load (a
limit the check lets through by what its battery can give,
:func:`workbench.sim.results.check_scenario_events`): the site's own supply then serves
that much of the idle load too (``Gcap`` is 0 there), and the import holds the limit.
The balance row's dual (negated) is the marginal value of energy at the site in the block
(currency/kWh): what the look-ahead prices its slot's options at. Carbon of a balanced site
is its grid import's and its sources' (``c[b,s] grid + c_r ren``), entered in the carbon
rows by :func:`carbon_entries`. The last block's state of charge may carry a value per kWh
(``terminal_value``: energy left in the battery replaces grid energy later).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from workbench.optim.blockdata import exact_dot
from workbench.optim.highs import Coords, HighsResult, SparseLp


@dataclass(frozen=True)
class SupplyBlock:
    """The supply data of a block LP (see the module docstring). ``S`` balanced sites,
    ``R`` sources, ``K`` demand charge lines, ``B`` blocks.

    Attributes
    ----------
    site_dc : int array (S,)
        Datacenter index (the LP's ``d_k``) of each balanced site.
    grid_cost, grid_carbon_kg : float arrays (B, S)
        Per kWh of grid import: cost (price plus any carbon price) and kg CO2.
    source_site : int array (R,)
    available_kwh : float array (B, R)
        What each source can deliver over each block, kWh.
    source_cost, source_carbon_kg : float arrays (R,)
        Per kWh used: marginal price and kg CO2.
    export_price : float array (S,)
        NaN where surplus is curtailed.
    battery : bool array (S,)
    power_kwh : float array (S,)
        Battery power times one slot's hours (kWh per slot).
    eta, soc0, soc_lo, soc_hi : float arrays (S,)
        One-way efficiency, state of charge at the start, floor and ceiling, kWh.
    terminal_value : float array (S,)
        Value per kWh left in the battery after the last block.
    line_site, line_price, line_floor_kw : arrays (K,)
        Each demand charge line's site, price per kW of peak (prorated) and the peak
        already metered, kW.
    line_blocks : list of int arrays (K,)
        The blocks each line's peak covers.
    base_kw : float array (S,)
        The site's baseline power, kW (part of its metered grid import).
    slot_h : float
        Hours per slot.
    """

    site_dc: NDArray[np.int64]
    grid_cost: NDArray[np.float64]
    grid_carbon_kg: NDArray[np.float64]
    source_site: NDArray[np.int64]
    available_kwh: NDArray[np.float64]
    source_cost: NDArray[np.float64]
    source_carbon_kg: NDArray[np.float64]
    export_price: NDArray[np.float64]
    battery: NDArray[np.bool_]
    power_kwh: NDArray[np.float64]
    eta: NDArray[np.float64]
    soc0: NDArray[np.float64]
    soc_lo: NDArray[np.float64]
    soc_hi: NDArray[np.float64]
    terminal_value: NDArray[np.float64]
    line_site: NDArray[np.int64]
    line_price: NDArray[np.float64]
    line_floor_kw: NDArray[np.float64]
    line_blocks: tuple[NDArray[np.int64], ...]
    base_kw: NDArray[np.float64]
    slot_h: float
    carbon_group: NDArray[np.int64] | None = None
    """Each site's carbon-cap group (-1: uncapped; None: every site uncapped)."""

    @property
    def n_sites(self) -> int:
        return int(self.site_dc.size)

    @property
    def n_blocks(self) -> int:
        return int(self.grid_cost.shape[0])

    def site_of_dc(self, n_dc: int) -> NDArray[np.int64]:
        """Per datacenter index, its site (-1: not balanced)."""
        out = np.full(n_dc, -1, dtype=np.int64)
        out[self.site_dc] = np.arange(self.n_sites)
        return out


def _entries(lp: SparseLp, name: str) -> tuple[NDArray[np.int64], dict[str, NDArray[np.int64]]]:
    """Every column of group ``name`` with its labels."""
    coords = lp.col_coords[name]
    labels = {d: coords.label(d) for d in coords.sizes}
    return lp.col(name, **labels), labels


def own_supply(sb: SupplyBlock) -> NDArray[np.bool_]:
    """The sites with own supply (S,): a battery or a source (a balanced site may have only
    a demand charge)."""
    own = sb.battery.copy()
    own[sb.source_site] = True
    return own


def add_columns(lp: SparseLp, sb: SupplyBlock, block_len: NDArray[np.int64],
                grid_cap_kwh: NDArray[np.float64] | None = None) -> None:
    """The columns ``grid, ren, export, charge, discharge, soc, peak`` (and ``over``,
    with caps) with their bounds; ``grid_cap_kwh`` (S, B) bounds the grid import (a power
    cap or a grid event's limit at the site's connection, less its idle load, over the
    block; None: unbounded)."""
    s_n, b_n = sb.n_sites, sb.n_blocks
    site = Coords.grid(site=s_n, block=b_n)
    lp.add_columns("grid", np.full(s_n * b_n, np.inf) if grid_cap_kwh is None
                   else np.asarray(grid_cap_kwh, dtype=float).reshape(-1), coords=site)
    lp.add_columns("ren", sb.available_kwh.T.reshape(-1),
                   coords=Coords.grid(source=sb.source_site.size, block=b_n))
    sells = np.isfinite(sb.export_price)
    lp.add_columns("export", np.where(sells[:, None], np.inf, 0.0).repeat(b_n, axis=1)
                   .reshape(-1), coords=site)
    cap = (np.where(sb.battery, sb.power_kwh, 0.0)[:, None]
           * block_len[None, :].astype(float)).astype(float)
    lp.add_columns("charge", cap.reshape(-1), coords=site)
    lp.add_columns("discharge", cap.reshape(-1), coords=site)
    room = np.where(sb.battery, sb.soc_hi - sb.soc_lo, 0.0)
    lp.add_columns("soc", np.repeat(room, b_n), coords=site)
    lp.add_columns("peak", np.full(sb.line_site.size, np.inf),
                   coords=Coords.grid(line=sb.line_site.size))
    if grid_cap_kwh is not None:
        lp.add_columns("over", np.where(np.isfinite(grid_cap_kwh), np.inf, 0.0).reshape(-1),
                       coords=site)


def set_costs(lp: SparseLp, sb: SupplyBlock, over_weight: float) -> None:
    """Grid at its cost, sources at their marginal price, export at minus its price, the
    last state of charge at minus its terminal value, peaks at their price per kW, import
    beyond a limit at ``over_weight`` per kWh."""
    b_n = sb.n_blocks
    lp.set_cost("grid", sb.grid_cost.T.reshape(-1))
    lp.set_cost("ren", np.repeat(sb.source_cost, b_n))
    lp.set_cost("export", -np.repeat(np.nan_to_num(sb.export_price, nan=0.0), b_n))
    soc = np.zeros((sb.n_sites, b_n))
    soc[:, -1] = -np.where(sb.battery, sb.terminal_value, 0.0)
    lp.set_cost("soc", soc.reshape(-1))
    lp.set_cost("peak", sb.line_price)
    if "over" in lp.cols:
        lp.set_cost("over", over_weight)


def add_rows(lp: SparseLp, sb: SupplyBlock, x_dc: NDArray[np.int64],
             x_block: NDArray[np.int64], x_kwh: NDArray[np.float64],
             block_len: NDArray[np.int64], deficit_kwh: NDArray[np.float64] | None = None
             ) -> None:
    """The balance, battery, export and peak rows (see the module docstring); ``x_dc``,
    ``x_block``, ``x_kwh`` give each job column's datacenter, block and kWh per slot run;
    ``deficit_kwh`` (S, B) the idle load the site's own supply must serve where its import
    limit lies below it (``D[s,b]``; None: none)."""
    s_n, b_n = sb.n_sites, sb.n_blocks
    site = sb.site_of_dc(int(max(x_dc.max(initial=0), sb.site_dc.max(initial=0))) + 1)
    rows = Coords.grid(site=s_n, block=b_n)
    ren, ren_at = _entries(lp, "ren")
    ren_site = sb.source_site[ren_at["source"]]
    # balance[s, b]
    on = site[x_dc] >= 0 if x_dc.size else np.zeros(0, dtype=bool)
    cols = [lp.cols["x"].start + np.flatnonzero(on), ren]
    vals = [x_kwh[on], -np.ones(ren.size)]
    r_site, r_block = [site[x_dc[on]], ren_site], [x_block[on], ren_at["block"]]
    groups = [("charge", 1.0), ("export", 1.0), ("discharge", -1.0), ("grid", -1.0)]
    if "over" in lp.cols:
        groups.append(("over", -1.0))
    for name, sign in groups:
        c, at = _entries(lp, name)
        cols.append(c)
        vals.append(np.full(c.size, sign))
        r_site.append(at["site"])
        r_block.append(at["block"])
    rhs = np.zeros(s_n * b_n) if deficit_kwh is None else -deficit_kwh.reshape(-1)
    lp.add_rows("balance", rows, np.concatenate(cols), np.concatenate(vals), rhs, rhs,
                site=np.concatenate(r_site), block=np.concatenate(r_block))
    # battery[s, b]: soc - soc_prev - eta charge + discharge / eta = (b = 0: soc0 - lo)
    eta = np.where(sb.battery, sb.eta, 1.0)
    soc, at = _entries(lp, "soc")
    prev = at["block"] > 0
    charge, dis = lp.col("charge", **at), lp.col("discharge", **at)
    prev_soc = lp.col("soc", site=at["site"][prev], block=at["block"][prev] - 1)
    rhs = np.zeros((s_n, b_n))
    rhs[:, 0] = np.where(sb.battery, sb.soc0 - sb.soc_lo, 0.0)
    lp.add_rows("battery", rows, np.concatenate([soc, prev_soc, charge, dis]),
                np.concatenate([np.ones(soc.size), -np.ones(prev_soc.size),
                                -eta[at["site"]], 1.0 / eta[at["site"]]]),
                rhs.reshape(-1), rhs.reshape(-1),
                site=np.concatenate([at["site"], at["site"][prev], at["site"], at["site"]]),
                block=np.concatenate([at["block"], at["block"][prev], at["block"],
                                      at["block"]]))
    # export[s, b] <= sum of the site's renewables
    export, at = _entries(lp, "export")
    lp.add_rows("export", rows, np.concatenate([export, ren]),
                np.concatenate([np.ones(export.size), -np.ones(ren.size)]), -np.inf, 0.0,
                site=np.concatenate([at["site"], ren_site]),
                block=np.concatenate([at["block"], ren_at["block"]]))
    # peak[k] - grid[s, b] / (len_b h) >= base_s - floor_k, for the blocks of line k
    line = np.repeat(np.arange(sb.line_site.size), [b.size for b in sb.line_blocks])
    block = (np.concatenate(sb.line_blocks).astype(np.int64) if sb.line_blocks
             else np.zeros(0, dtype=np.int64))
    s = sb.line_site[line]
    lp.add_rows("peak", Coords.of(line=line, block=block),
                np.concatenate([lp.col("peak", line=line), lp.col("grid", site=s, block=block)]),
                np.concatenate([np.ones(line.size),
                                -1.0 / (block_len[block].astype(float) * sb.slot_h)]),
                sb.base_kw[s] - sb.line_floor_kw[line], np.inf,
                line=np.concatenate([line, line]), block=np.concatenate([block, block]))


def carbon_entries(lp: SparseLp, sb: SupplyBlock
                   ) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float64]]:
    """Entries ``(carbon group, column, kg per kWh)`` of the grid and source columns in the
    carbon rows (by each site's :attr:`SupplyBlock.carbon_group`); import beyond a limit
    (``over``) emits as the grid's import does."""
    site_group = (sb.carbon_group if sb.carbon_group is not None
                  else np.full(sb.n_sites, -1, dtype=np.int64))
    grid, g_at = _entries(lp, "grid")
    if "over" in lp.cols:
        over, o_at = _entries(lp, "over")
        grid = np.concatenate([grid, over])
        g_at = {k: np.concatenate([g_at[k], o_at[k]]) for k in ("site", "block")}
    ren, r_at = _entries(lp, "ren")
    g_group = site_group[g_at["site"]]
    r_group = site_group[sb.source_site[r_at["source"]]]
    g_on, r_on = g_group >= 0, r_group >= 0
    return (np.concatenate([g_group[g_on], r_group[r_on]]).astype(np.int64),
            np.concatenate([grid[g_on], ren[r_on]]).astype(np.int64),
            np.concatenate([sb.grid_carbon_kg[g_at["block"], g_at["site"]][g_on],
                            sb.source_carbon_kg[r_at["source"]][r_on]]).astype(float))


@dataclass(frozen=True)
class SupplySolution:
    """The supply columns' values by (site, block), kWh, the peaks (kW above the floor),
    and ``energy_value`` (site, block): the marginal value of energy, currency/kWh (the
    negated dual of the balance row; NaN when HiGHS gave no duals)."""

    grid: NDArray[np.float64]
    ren: NDArray[np.float64]
    export: NDArray[np.float64]
    charge: NDArray[np.float64]
    discharge: NDArray[np.float64]
    soc: NDArray[np.float64]
    peak_kw: NDArray[np.float64]
    energy_value: NDArray[np.float64]

    def energy_cost(self, sb: SupplyBlock) -> float:
        """Grid import at its cost, sources at their marginal price, less export revenue."""
        return float((sb.grid_cost.T * self.grid).sum()
                     + (sb.source_cost[:, None] * self.ren).sum()
                     - (np.nan_to_num(sb.export_price)[:, None] * self.export).sum())

    def demand_cost(self, sb: SupplyBlock) -> float:
        """The peaks above their floors at their price per kW."""
        return exact_dot(sb.line_price, self.peak_kw)

    def cost(self, sb: SupplyBlock) -> float:
        """The supply part of the objective, currency (without the terminal value)."""
        return self.energy_cost(sb) + self.demand_cost(sb)

    def carbon_kg(self, sb: SupplyBlock) -> float:
        """Carbon of the grid import and the sources used, kg."""
        return float((sb.grid_carbon_kg.T * self.grid).sum()
                     + (sb.source_carbon_kg[:, None] * self.ren).sum())

    def carbon_kg_by_group(self, sb: SupplyBlock, n_groups: int) -> NDArray[np.float64]:
        """The same carbon per carbon group of the sites (:attr:`SupplyBlock.carbon_group`;
        a site without one counts in none), kg: what :func:`carbon_entries` puts in each
        group's carbon row."""
        out = np.zeros(n_groups)
        group = sb.carbon_group
        if group is None:
            return out
        site_kg = (sb.grid_carbon_kg.T * self.grid).sum(axis=1)
        np.add.at(site_kg, sb.source_site, sb.source_carbon_kg * self.ren.sum(axis=1))
        ok = group >= 0
        np.add.at(out, group[ok], site_kg[ok])
        return out


def extract(lp: SparseLp, res: HighsResult, sb: SupplyBlock) -> SupplySolution:
    """Read the supply columns and the balance duals back."""
    x = np.asarray(res.x, dtype=float)

    def get(name: str) -> NDArray[np.float64]:
        return lp.col_values(name, x)

    duals = res.row_dual if res.row_dual.size == lp.n_rows else None
    value = (-lp.row_values("balance", np.asarray(duals, dtype=float))
             if duals is not None else np.full((sb.n_sites, sb.n_blocks), np.nan))
    return SupplySolution(
        # Import beyond a limit (``over``) is import all the same.
        grid=get("grid") + (get("over") if "over" in lp.cols else 0.0),
        ren=get("ren"), export=get("export"), charge=get("charge"),
        discharge=get("discharge"), soc=get("soc"), peak_kw=get("peak"), energy_value=value)


__all__ = ["SupplyBlock", "SupplySolution", "add_columns", "add_rows", "carbon_entries",
           "extract", "own_supply", "set_costs"]
