"""What the planning policies hand the block LP about supply, and what they read back.

:class:`SupplyPlanner` turns a scenario's static supply facts (its balanced sites: those with
renewables, a battery or a demand charge), the forecast of the sources' output, the block
prices and the metered state (state of charge, peaks so far) into the block LP's
:class:`~workbench.optim.supplylp.SupplyBlock`; :class:`SupplyPlan` is the solution as the
slot decisions use it: the battery power of each slot, the marginal value of energy at each
balanced site (the price the slot's options are charged at there), and the power a
demand-charged site may draw in a slot without raising the planned peak::

    cap_d(t) = peak_d(line of t) - base_d + renewable_d(t) + max(battery_d(t), 0)

where ``peak_d`` is the planned peak of the billing period's line (kW, at least the peak
metered so far), ``base_d`` the site's baseline power and ``renewable_d(t)`` the forecast of
its sources (kW). The marginal value holds only for what the site's own supply can still
give in the slot (:meth:`SupplyPlan.own_supply_kwh`): :func:`own_supply_problem` splits the
slot MILP's options there into a copy on that supply and a copy on the grid. The greedy
policies use none of this: the simulator applies the site's greedy dispatch
(:func:`workbench.outcome.site_balance`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from workbench.bill import Bucket, buckets
from workbench.caps import Caps
from workbench.meter import idle_kw, import_limits_kw
from workbench.model import Scenario, ScenarioView
from workbench.optim.slot import SlotProblem
from workbench.optim.supplylp import SupplyBlock, SupplySolution
from workbench.outcome.supply import battery_limits
from workbench.policies.base import SlotOptions
from workbench.supply import Battery
from workbench.units import G_PER_KG


@dataclass(frozen=True)
class SupplyPlanner:
    """The static supply facts a planner needs, computed once per run (:meth:`of`)."""

    names: tuple[str, ...]
    site_dc: NDArray[np.int64]
    source_site: NDArray[np.int64]
    source_cost: NDArray[np.float64]
    source_carbon_kg: NDArray[np.float64]
    export_price: NDArray[np.float64]
    battery: NDArray[np.bool_]
    power_kw: NDArray[np.float64]
    eta: NDArray[np.float64]
    soc_lo: NDArray[np.float64]
    soc_hi: NDArray[np.float64]
    soc_initial: NDArray[np.float64]
    base_kw: NDArray[np.float64]
    lines: tuple[Bucket, ...]
    slot_s: float

    @staticmethod
    def of(sc: Scenario | ScenarioView) -> SupplyPlanner | None:
        """The planner of ``sc``'s balanced sites; None when it has no supply."""
        sup = sc.supply
        if sup.empty:
            return None
        names = tuple(d.name for d in sc.datacenters)
        sites = [n for n in names if sup.sources_at(n) or sup.battery_at(n) is not None
                 or sup.demand_at(n)]
        site_of = {n: i for i, n in enumerate(sites)}
        bats = [sup.battery_at(n) for n in sites]
        base = idle_kw(sc)
        return SupplyPlanner(
            names=tuple(sites),
            site_dc=np.array([names.index(n) for n in sites], dtype=np.int64),
            source_site=np.array([site_of[s.datacenter] for s in sup.sources], dtype=np.int64),
            source_cost=np.array([s.marginal_price_per_kwh for s in sup.sources], dtype=float),
            source_carbon_kg=np.array([s.carbon_g_per_kwh / G_PER_KG for s in sup.sources],
                                      dtype=float),
            export_price=np.array([np.nan if (e := sup.export_price(n)) is None else e
                                   for n in sites], dtype=float),
            battery=np.array([b is not None for b in bats], dtype=bool),
            power_kw=np.array([0.0 if b is None else b.power_kw for b in bats]),
            eta=np.array([1.0 if b is None else b.eta for b in bats]),
            soc_lo=np.array([0.0 if b is None else b.soc_min_kwh for b in bats]),
            soc_hi=np.array([0.0 if b is None else b.soc_max_kwh for b in bats]),
            soc_initial=np.array([0.0 if b is None else b.soc_initial_kwh for b in bats]),
            base_kw=base[[names.index(n) for n in sites]],
            lines=tuple(buckets(sc)), slot_s=float(sc.slot_s))

    def site_index(self, name: str) -> int:
        return self.names.index(name)

    def block(
        self, *, t0: int, block_start: NDArray[np.int64], block_len: NDArray[np.int64],
        renewable_kw: NDArray[np.float64], price: NDArray[np.float64],
        carbon_g: NDArray[np.float64], soc_kwh: Mapping[str, float] | None = None,
        peaks: Mapping[tuple[str, int, int, int, int], float] | None = None,
        carbon_price_per_kg: float = 0.0, tie: NDArray[np.float64] | None = None,
        terminal: bool = False, carbon_group: NDArray[np.int64] | None = None,
        lowest_tier: bool = False,
    ) -> WindowSupply:
        """The block LP's supply data from slot ``t0`` on.

        ``renewable_kw`` (slots from ``t0``, sources) is what the sources are believed to
        deliver; ``price``, ``carbon_g`` (blocks, datacenters) the block prices the jobs'
        columns would have paid; ``tie`` a factor per block on the grid cost (the look-ahead's
        preference for early slots); ``terminal`` values the battery's last state of charge
        at its site's least grid cost in the window times ``eta`` (what the energy left
        would save: replacing it later costs at least that); ``carbon_group`` (datacenters)
        the carbon rows' groups. A peak is priced at the tier of the peak metered so far, or with
        ``lowest_tier`` at the lowest tier of its period (a charge whose tiers fall with the
        peak is then never overestimated: what a lower bound needs).
        """
        h = self.slot_s / 3600.0
        d = self.site_dc
        n_b = block_start.size
        f = np.ones(n_b) if tie is None else tie
        cost = (price[:, d] + carbon_price_per_kg * carbon_g[:, d] / G_PER_KG) * f[:, None]
        avail = np.zeros((n_b, self.source_site.size))
        if self.source_site.size:
            cum = np.concatenate([np.zeros((1, renewable_kw.shape[1])),
                                  np.cumsum(renewable_kw, axis=0)])
            end = np.minimum(block_start + block_len, renewable_kw.shape[0])
            avail = (cum[end] - cum[np.minimum(block_start, end)]) * h
        soc0 = np.array([(soc_kwh or {}).get(n, float(s0)) for n, s0 in
                         zip(self.names, self.soc_initial, strict=True)], dtype=float)
        soc0 = np.clip(soc0, self.soc_lo, self.soc_hi)
        absolute = t0 + block_start
        line_blocks: list[NDArray[np.int64]] = []
        keep: list[int] = []
        for k, line in enumerate(self.lines):
            inside = np.array([bool(np.any((line.slots >= a) & (line.slots < a + n)))
                               for a, n in zip(absolute.tolist(), block_len.tolist(),
                                               strict=True)], dtype=bool)
            if inside.any():
                keep.append(k)
                line_blocks.append(np.flatnonzero(inside).astype(np.int64))
        kept = [self.lines[k] for k in keep]
        floors = np.array([(peaks or {}).get(b.key, 0.0) for b in kept], dtype=float)
        prices = np.array([(min(p for _, p in b.rates.tiers[b.period]) if lowest_tier
                            else b.rates.marginal_price(b.period, fl)) * b.share
                           for b, fl in zip(kept, floors, strict=True)], dtype=float)
        sb = SupplyBlock(
            site_dc=d, grid_cost=cost, grid_carbon_kg=carbon_g[:, d] / G_PER_KG,
            source_site=self.source_site, available_kwh=avail, source_cost=self.source_cost,
            source_carbon_kg=self.source_carbon_kg, export_price=self.export_price,
            battery=self.battery, power_kwh=self.power_kw * h, eta=self.eta, soc0=soc0,
            soc_lo=self.soc_lo, soc_hi=self.soc_hi,
            terminal_value=(cost.min(axis=0) * self.eta if terminal
                            else np.zeros(d.size)),
            line_site=np.array([self.site_index(b.datacenter) for b in kept], dtype=np.int64),
            line_price=prices, line_floor_kw=floors, line_blocks=tuple(line_blocks),
            base_kw=self.base_kw, slot_h=h,
            carbon_group=None if carbon_group is None else carbon_group[d])
        return WindowSupply(block=sb, lines=tuple(kept), t0=t0, block_start=block_start,
                            block_len=block_len, renewable_kw=renewable_kw)

    def plan(self, ws: WindowSupply, sol: SupplySolution) -> SupplyPlan:
        """The solution as the slot decisions read it (:class:`SupplyPlan`)."""
        sb = ws.block
        return SupplyPlan(
            names=self.names, t0=ws.t0, block_start=ws.block_start, block_len=ws.block_len,
            battery_kwh=sol.discharge - sol.charge, grid_kwh=sol.grid, value=sol.energy_value,
            peak_kw={b.key: float(fl + pk) for b, fl, pk in
                     zip(ws.lines, sb.line_floor_kw, sol.peak_kw, strict=True)},
            lines=ws.lines, base_kw=self.base_kw, source_site=self.source_site,
            renewable_kw=ws.renewable_kw, slot_h=sb.slot_h, battery=self.battery)


@dataclass(frozen=True)
class WindowSupply:
    """A window's supply data (:meth:`SupplyPlanner.block`): the block LP's part, the demand
    charge lines it covers, and the window's blocks and forecast output (kW)."""

    block: SupplyBlock
    lines: tuple[Bucket, ...]
    t0: int
    block_start: NDArray[np.int64]
    block_len: NDArray[np.int64]
    renewable_kw: NDArray[np.float64]


@dataclass(frozen=True)
class SupplyPlan:
    """A solved window's supply plan (see the module docstring); slots are absolute."""

    names: tuple[str, ...]
    t0: int
    block_start: NDArray[np.int64]
    block_len: NDArray[np.int64]
    battery_kwh: NDArray[np.float64]
    grid_kwh: NDArray[np.float64]
    value: NDArray[np.float64]
    peak_kw: Mapping[tuple[str, int, int, int, int], float]
    lines: tuple[Bucket, ...]
    base_kw: NDArray[np.float64]
    source_site: NDArray[np.int64]
    renewable_kw: NDArray[np.float64]
    slot_h: float
    battery: NDArray[np.bool_]

    def _block(self, t: int) -> int:
        pos = int(np.searchsorted(self.block_start, t - self.t0, side="right")) - 1
        return min(max(pos, 0), int(self.block_start.size) - 1)

    def battery_kw(self, t: int, load_kw: Mapping[str, float] | None = None,
                   price: Mapping[str, float] | None = None) -> dict[str, float]:
        """Each battery's power in slot ``t`` (kW, + discharge): the block's planned mean, or,
        given the jobs' actual ``load_kw`` per site and the grid ``price``, the power that
        keeps the grid import at the plan's level where the plan values energy below the
        grid price (the battery, not the grid, is the marginal source there)::

            battery = load - renewable(t) - grid_plan(t)     if value(t) < price
                    = battery_plan(t)                         otherwise
        """
        b = self._block(t)
        span = float(self.block_len[b]) * self.slot_h
        per = self.battery_kwh[:, b] / span
        out = {n: float(per[i]) for i, n in enumerate(self.names) if self.battery[i]}
        if load_kw is None or price is None:
            return out
        row = min(max(t - self.t0, 0), self.renewable_kw.shape[0] - 1)
        for i, n in enumerate(self.names):
            if not self.battery[i] or n not in price:
                continue
            if not self.value[i, b] < float(price[n]) * (1.0 - 1e-9):
                continue
            ren = (float(self.renewable_kw[row, self.source_site == i].sum())
                   if self.renewable_kw.size else 0.0)
            out[n] = float(load_kw.get(n, 0.0)) - ren - float(self.grid_kwh[i, b]) / span
        return out

    def own_supply_kwh(self, t: int, soc_kwh: Mapping[str, float],
                       batteries: Mapping[str, Battery]) -> dict[str, float]:
        """Energy each balanced site can draw in slot ``t`` without importing from the grid,
        keeping the plan's battery charge (kWh)::

            H_d = R_d(t) h + min(P h, (soc - soc_min) eta) - max(-battery_plan(t), 0) h

        ``R_d(t)`` the forecast of its sources (kW), the battery's most discharge this slot
        from its metered ``soc_kwh`` (:func:`workbench.outcome.supply.battery_limits`) and
        the charge the plan puts into it (kW); at least 0."""
        b = self._block(t)
        row = min(max(t - self.t0, 0), self.renewable_kw.shape[0] - 1)
        per = self.battery_kwh[:, b] / float(self.block_len[b])
        out: dict[str, float] = {}
        for i, n in enumerate(self.names):
            ren = (float(self.renewable_kw[row, self.source_site == i].sum()) * self.slot_h
                   if self.renewable_kw.size else 0.0)
            bat = batteries.get(n)
            stock = 0.0 if bat is None else battery_limits(
                bat, float(soc_kwh.get(n, bat.soc_initial_kwh)), self.slot_h)[1]
            out[n] = max(ren + stock - max(-float(per[i]), 0.0), 0.0)
        return out

    def planned_own_kw(self, t: int, soc_kwh: Mapping[str, float],
                       batteries: Mapping[str, Battery]) -> dict[str, float]:
        """What each balanced site's own supply gives in slot ``t`` by the plan (kW): the
        forecast of its sources and its battery's planned discharge, at most what the
        battery holds now (its metered ``soc_kwh``)::

            R_d(t) + min(max(battery_plan(t), 0), min(P h, (soc - soc_min) eta) / h)"""
        b = self._block(t)
        per = self.battery_kwh[:, b] / (float(self.block_len[b]) * self.slot_h)
        own = self._own_kw(t, soc_kwh, batteries)
        return {n: ren + min(max(float(per[i]), 0.0), can)
                for i, (n, (ren, can)) in enumerate(own.items())}

    def most_own_kw(self, t: int, soc_kwh: Mapping[str, float],
                    batteries: Mapping[str, Battery]) -> dict[str, float]:
        """The most each balanced site's own supply can give in slot ``t`` (kW): the
        forecast of its sources and all its battery can discharge now (what the site's
        controller gives to keep an import limit, :func:`workbench.outcome.supply.
        site_balance`), whatever the plan keeps for later."""
        return {n: ren + can for n, (ren, can) in self._own_kw(t, soc_kwh, batteries).items()}

    def _own_kw(self, t: int, soc_kwh: Mapping[str, float],
                batteries: Mapping[str, Battery]) -> dict[str, tuple[float, float]]:
        """Per balanced site, its sources' forecast and its battery's most discharge in
        slot ``t`` from its metered ``soc_kwh`` (kW)."""
        row = min(max(t - self.t0, 0), self.renewable_kw.shape[0] - 1)
        out: dict[str, tuple[float, float]] = {}
        for i, n in enumerate(self.names):
            ren = (float(self.renewable_kw[row, self.source_site == i].sum())
                   if self.renewable_kw.size else 0.0)
            bat = batteries.get(n)
            can = 0.0 if bat is None else battery_limits(
                bat, float(soc_kwh.get(n, bat.soc_initial_kwh)), self.slot_h)[1] / self.slot_h
            out[n] = (ren, can)
        return out

    def energy_value(self, t: int) -> dict[str, float]:
        """Each balanced site's marginal value of energy in slot ``t`` (currency/kWh)."""
        b = self._block(t)
        return {n: float(self.value[i, b]) for i, n in enumerate(self.names)
                if np.isfinite(self.value[i, b])}

    def power_caps_kw(self, t: int) -> dict[str, float]:
        """The jobs' power a demand-charged site may draw in slot ``t`` without raising the
        planned peak (kW; see the module docstring)."""
        row = min(max(t - self.t0, 0), self.renewable_kw.shape[0] - 1) \
            if self.renewable_kw.size else -1
        bat = self.battery_kw(t)
        out: dict[str, float] = {}
        for line in self.lines:
            if not np.any(line.slots == t):
                continue
            i = self.names.index(line.datacenter)
            ren = (float(self.renewable_kw[row, self.source_site == i].sum())
                   if row >= 0 else 0.0)
            cap = (self.peak_kw[line.key] - float(self.base_kw[i]) + ren
                   + max(bat.get(line.datacenter, 0.0), 0.0))
            out[line.datacenter] = min(out.get(line.datacenter, np.inf), cap)
        return out


def slot_caps(sc: ScenarioView, sp: SupplyPlan, t: int, soc_kwh: Mapping[str, float],
              caps: Caps, opts: SlotOptions | None = None) -> Caps:
    """The import limits slot ``t``'s decision keeps, as a caps record of that slot alone:
    each datacenter's power cap and the grid events known at ``t``
    (:func:`workbench.meter.import_limits_kw`), raised at a site with own supply by what
    its sources and battery give in the slot by the plan (:meth:`SupplyPlan.planned_own_kw`:
    the slot draws no more of the battery than the plan, which keeps the rest for the
    slots after; the site's controller covers a shortfall of the sources as far as the
    battery holds, :func:`workbench.outcome.supply.site_balance`), and further, up to all
    the battery can give now (:meth:`SupplyPlan.most_own_kw`), as far as the inference
    services among the slot's options ``opts`` must draw there (:func:`services_kw`: they
    run whatever the plan kept, so the slot stays feasible; no more, so that no training
    job runs on the charge the plan keeps for later). ``caps`` itself without a limit
    there."""
    if not caps.has_limits:
        return caps
    supply = sc.supply
    names = [d.name for d in sc.datacenters]
    limit = dict(zip(names, import_limits_kw(sc, caps, t, t + 1, known_at=t)[0].tolist(),
                     strict=True))
    own = [n for n in sp.names if math.isfinite(limit[n])
           and (supply.battery_at(n) is not None or supply.sources_at(n))]
    if not own:
        return caps
    batteries = {n: b for n in own if (b := supply.battery_at(n)) is not None}
    extra = sp.planned_own_kw(t, soc_kwh, batteries)
    if opts is not None and len(opts):
        must = services_kw(opts, float(sc.slot_s))
        most = sp.most_own_kw(t, soc_kwh, batteries)
        idle = dict(zip(names, idle_kw(sc).tolist(), strict=True))
        for n in own:
            need = must.get(n, 0.0) - (limit[n] - idle[n])
            extra[n] = max(extra[n], min(most[n], need))
    merged = {n: v + (extra[n] if n in own else 0.0) for n, v in limit.items()
              if math.isfinite(v)}
    return dataclasses.replace(caps, power_kw=None, power_kw_by_dc=merged, events=())


def supplied_options(sc: ScenarioView, opts: SlotOptions, sp: SupplyPlan, t: int,
                     price: Mapping[str, float], carbon: Mapping[str, float], caps: Caps,
                     soc_kwh: Mapping[str, float]) -> tuple[SlotOptions, Caps]:
    """The slot's options priced at the plan's value of energy at balanced sites, and the
    caps of the slot (:func:`slot_caps`: own supply counted) with each demand-charged site's
    power cap lowered to the plan's (:meth:`SupplyPlan.power_caps_kw`, at least what its
    inference services draw, so that the slot stays feasible).

    An option's energy in its own datacenter ``E_d`` (:func:`site_energy_kwh`) is
    repriced, at the region's grid price ``p_d`` and carbon intensity ``c_d`` (g/kWh)::

        cost'   = cost + (value_d - p_d) E_d
        carbon' = carbon - c_d E_d / 1000

    The value holds the carbon the plan prices (its carbon price and its budgets' duals are
    in the LP's cost of grid energy), so the slot charges the site's share of the option's
    carbon no second time (``carbon'`` is the carbon the slot still prices: a transfer's
    other end's).
    """
    value = sp.energy_value(t)
    region = {d.name: d.region for d in sc.datacenters}
    cost = np.asarray(opts.cost, dtype=float).copy()
    kg = np.asarray(opts.carbon_kg, dtype=float).copy()
    if len(opts) and value:
        at_d = site_energy_kwh(opts, float(sc.slot_s))
        for name, v in value.items():
            rows = opts.datacenter == name
            cost[rows] += (v - float(price[region[name]])) * at_d[rows]
            kg[rows] -= float(carbon[region[name]]) * at_d[rows] / G_PER_KG
    opts = dataclasses.replace(opts, cost=cost, carbon_kg=kg)
    caps = slot_caps(sc, sp, t, soc_kwh, caps, opts)
    planned = sp.power_caps_kw(t)
    if not planned:
        return opts, caps
    names = [d.name for d in sc.datacenters]
    user = caps.power_kw_array(names) if caps.has_power else np.full(len(names), np.inf)
    merged = {n: float(u) for n, u in zip(names, user.tolist(), strict=True)
              if np.isfinite(u)}
    must = np.array([not opts.jobs[int(j)].job.is_training for j in opts.job_index],
                    dtype=bool) if len(opts) else np.zeros(0, dtype=bool)
    idle = dict(zip(names, idle_kw(sc).tolist(), strict=True))
    for n, cap in planned.items():
        services = float(opts.power_kw[must & (opts.datacenter == n)].sum()) if len(opts) \
            else 0.0
        # The plan's cap is on the jobs' power; the caps record holds import caps.
        merged[n] = min(merged.get(n, np.inf),
                        max(cap, services) * (1 + 1e-6) + 1e-6 + idle[n])
    return opts, dataclasses.replace(caps, power_kw=None, power_kw_by_dc=merged)


def own_supply_problem(
    prob: SlotProblem, keep: NDArray[np.bool_], site_kwh: NDArray[np.float64],
    value: Mapping[str, float], grid_cost: Mapping[str, float], own_kwh: Mapping[str, float],
) -> tuple[SlotProblem, NDArray[np.bool_], NDArray[np.int64]]:
    """The slot problem with each balanced site's supply in two tiers, and each option's
    original row.

    The plan's value of energy ``v_d`` (:meth:`SupplyPlan.energy_value`, what ``prob``'s
    weights price the site's options at) is a marginal price: it holds for the energy the
    site's own supply can still give in the slot (``own_kwh``: ``H_d`` of
    :meth:`SupplyPlan.own_supply_kwh`), not for a job's whole draw beyond it (a battery with
    a sliver of charge, a renewable surplus smaller than the job: the rest comes from the
    grid; and where the plan draws nothing the LP's dual may be the value of drawing less,
    0 at night when a kWh less would only displace tomorrow's free charge). Where ``v_d`` is
    below ``g_d``, the cost of a kWh from the grid (``grid_cost``: its price plus the carbon
    the slot prices, ``p_d + (q + lambda_d) c_d / 1000``), each option ``k`` at ``d`` gets a
    second copy on the grid::

        copy on the site's supply:  coef_k,                in supply row d:  sum E_k z_k <= H_d
        copy on the grid:           coef_k - (g_d - v_d) E_k

    (``site_kwh`` = ``E_k``, the option's energy at its site, :func:`site_energy_kwh`); a job
    takes at most one of its copies (one job, one choice), so the slot MILP fills the
    site's own supply first and buys from the grid only where a job's progress is worth it.

    Returns
    -------
    prob, keep
        The problem with the grid copies appended after the original options, its mask.
    origin : int array
        Each option's row in the given ``prob`` (``origin[chosen]`` maps a choice back).
    """
    k_n = prob.n_options
    dc = np.asarray(prob.dc_labels, dtype=object)[prob.dc_index] if k_n else np.zeros(0)
    labels = tuple(n for n in own_kwh if n in value and n in grid_cost
                   and value[n] < float(grid_cost[n]) * (1.0 - 1e-9) and np.any(dc == n))
    if not labels:
        return prob, keep, np.arange(k_n, dtype=np.int64)
    site = np.full(k_n, -1, dtype=np.int64)
    for s, n in enumerate(labels):
        site[dc == n] = s
    dup = np.flatnonzero(site >= 0)
    e_d = np.asarray(site_kwh, dtype=float)
    gap = np.array([float(grid_cost[n]) - value[n] for n in labels])
    idx = np.concatenate([np.arange(k_n, dtype=np.int64), dup])
    copies = prob.take(idx)  # the grid copies: option rows duplicated
    tiered = dataclasses.replace(
        copies, coef=np.concatenate([prob.coef, prob.coef[dup] - gap[site[dup]] * e_d[dup]]),
        supply_labels=labels,
        supply_index=np.concatenate([site, np.full(dup.size, -1, dtype=np.int64)]),
        supply_kwh=np.concatenate([np.where(site >= 0, e_d, 0.0), np.zeros(dup.size)]),
        supply_cap_kwh=np.array([float(own_kwh[n]) for n in labels], dtype=float))
    return tiered, keep[idx], idx


def prefer_progress(opts: SlotOptions, coef: NDArray[np.float64], pmax: NDArray[np.float64],
                    sites: Sequence[str], plan_share: NDArray[np.float64]) -> None:
    """Break ties at balanced sites toward the plan and toward progress, in place.

    Where energy is free (a renewable surplus, a battery a surplus refills) a job's options
    there all weigh 0 and the plan's price of its progress may be 0 too (its work row is
    not binding), so its plan bonus (``mu * pmax * share``) vanishes and the slot MILP
    would pick among the jobs and their options arbitrarily: a slow power limit, or not
    the job the plan gave the GPUs to, which then falls behind. On those rows::

        coef += max(|coef|, 1) (1e-3 share_i + 1e-6 progress_i / pmax_j)

    (``share_i`` the plan's share of the slot on the option's configuration, in [0, 1]):
    small against any price, decisive in a tie."""
    if not len(opts):
        return
    rows = np.isin(opts.datacenter, list(sites))
    if not rows.any():
        return
    ref = max(float(np.max(np.abs(coef), initial=0.0)), 1.0)
    share = opts.progress / np.maximum(pmax[opts.job_index], 1e-12)
    coef[rows] += ref * (1e-3 * plan_share[rows] + 1e-6 * share[rows])


def site_energy_kwh(opts: SlotOptions, slot_s: float) -> NDArray[np.float64]:
    """Each option's energy at its own datacenter over the slot, kWh: its facility IT energy
    and the destination half of a transfer, ``E_d = P D / 3600 + (E - P D / 3600) / 2``."""
    it = np.asarray(opts.power_kw, dtype=float) * slot_s / 3600.0
    return it + (np.asarray(opts.energy_kwh, dtype=float) - it) / 2.0


def services_kw(opts: SlotOptions, slot_s: float) -> dict[str, float]:
    """What the inference services must draw at each datacenter in the slot whatever it
    chooses, kW: per service, the least its options draw there (:func:`site_energy_kwh` at
    an option's own site, a move's sending half at the site it leaves, 0 for an option
    that touches the site not at all), summed over the services."""
    if not len(opts):
        return {}
    h = slot_s / 3600.0
    at_d = site_energy_kwh(opts, slot_s) / h
    sent = np.asarray(opts.energy_kwh, dtype=float) / h - at_d
    out: dict[str, float] = {}
    for j in np.unique(opts.job_index).tolist():
        if opts.jobs[j].job.is_training:
            continue
        ks = np.flatnonzero(opts.job_index == j)
        draws: dict[str, NDArray[np.float64]] = {}
        for i, k in enumerate(ks.tolist()):
            for d, kw in ((str(opts.datacenter[k]), float(at_d[k])),
                          (str(opts.transfer_from[k]), float(sent[k]))):
                if d:
                    draws.setdefault(d, np.zeros(ks.size))[i] += kw
        for d, least in draws.items():
            out[d] = out.get(d, 0.0) + float(least.min())
    return out


def site_load_kw(opts: SlotOptions, chosen: NDArray[np.int64], slot_s: float
                 ) -> dict[str, float]:
    """The chosen options' average power at their datacenters, kW: ``E_d`` of
    :func:`site_energy_kwh` over the slot's hours."""
    e_d = site_energy_kwh(opts, slot_s) * 3600.0 / slot_s
    out: dict[str, float] = {}
    for k in chosen.tolist():
        d = str(opts.datacenter[k])
        out[d] = out.get(d, 0.0) + float(e_d[k])
    return out


__all__ = ["SupplyPlan", "SupplyPlanner", "WindowSupply",
           "own_supply_problem", "prefer_progress", "services_kw", "site_energy_kwh",
           "site_load_kw", "slot_caps", "supplied_options"]
