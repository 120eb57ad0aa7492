"""The look-ahead's part of the site supply (renewables, batteries, demand charges): the
supply block of its window LP and the plan read back from it, the slot options priced at the
plan's value of energy, the slot MILP with each balanced site's own supply and the grid as
two tiers (the value holds only for what that supply can still give in the slot), and the
batteries' decision for the chosen options (:mod:`workbench.policies.supplyplan` holds the
planner and the plan; this mixin is how :class:`~workbench.policies.lookahead.
LookaheadPolicy` uses them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np
from numpy.typing import NDArray

from workbench.caps import Caps
from workbench.forecast import Forecast
from workbench.model import ScenarioView
from workbench.optim.blocklp import BlockSolution
from workbench.optim.fallback import solve_or_greedy
from workbench.optim.fastslot import FastSlotSolver
from workbench.optim.info import SolveInfo
from workbench.optim.slot import SlotProblem
from workbench.policies.base import SlotOptions, SlotState, slot_options
from workbench.policies.supplyplan import (
    SupplyPlan,
    SupplyPlanner,
    WindowSupply,
    own_supply_problem,
    site_energy_kwh,
    site_load_kw,
    supplied_options,
)
from workbench.policies.window import WindowPlan


class SupplyWindow:
    """The look-ahead's use of the site supply (a mixin of
    :class:`~workbench.policies.lookahead.LookaheadPolicy`, whose state it reads)."""

    caps: Caps
    restart_s: float
    gpu_counts: tuple[int, ...] | None
    carbon_price_per_kg: float
    mip_rel_gap: float
    time_limit_s: float
    _fast: FastSlotSolver
    _sc: ScenarioView | None
    _supply: SupplyPlanner | None
    _supply_plan: SupplyPlan | None

    def _reset_supply(self, scenario: ScenarioView) -> None:
        """The planner of ``scenario``'s balanced sites (None without supply); no plan yet."""
        self._supply = SupplyPlanner.of(scenario)
        self._supply_plan = None

    def _read_supply(self, ws: WindowSupply | None, sol: BlockSolution,
                     plan: WindowPlan) -> WindowPlan:
        """Keep the window's supply plan; the plan's cost with the supply's (grid, sources,
        peaks)."""
        if ws is None or self._supply is None or sol.supply is None:
            return plan
        self._supply_plan = self._supply.plan(ws, sol.supply)
        return replace(plan, cost=plan.cost + sol.supply.cost(ws.block))

    def _window_supply(
        self, state: SlotState, forecast: Forecast, bstart: NDArray[np.int64],
        blen: NDArray[np.int64], rows_fc: NDArray[np.int64], bprice: NDArray[np.float64],
        bcarbon: NDArray[np.float64], cfg_dc: NDArray[np.int64], cost_x: NDArray[np.float64],
        carb_x: NDArray[np.float64], *, carbon_group: NDArray[np.int64] | None,
    ) -> tuple[WindowSupply | None, NDArray[np.float64], NDArray[np.float64]]:
        """The window LP's supply block (None without supply) and its columns' cost and
        carbon: the balanced sites' energy goes through their renewables, battery and grid,
        so their columns carry neither (``carbon_group`` the datacenters' budget groups)."""
        sc = self._sc
        if self._supply is None or sc is None:
            return None, cost_x, carb_x
        t, n_win = state.t, int(rows_fc.size)
        ws = self._supply.block(
            t0=t, block_start=bstart, block_len=blen,
            renewable_kw=(np.asarray(forecast.renewable_kw, dtype=float)[rows_fc]
                          if forecast.renewable_kw.size else np.zeros((n_win, 0))),
            price=bprice, carbon_g=bcarbon, soc_kwh=state.soc_kwh,
            peaks=state.peak_kw_so_far, carbon_price_per_kg=self.carbon_price_per_kg,
            tie=(1.0 + 1e-4 * bstart).astype(float),
            # Energy left in the battery is worth something only before the horizon ends.
            terminal=t + n_win < sc.n_slots, carbon_group=carbon_group)
        bal = ws.block.site_of_dc(len(sc.datacenters))[cfg_dc] >= 0
        return ws, np.where(bal, 0.0, cost_x), np.where(bal, 0.0, carb_x)

    def _slot_options(self, state: SlotState, price: Mapping[str, float],
                      carbon: Mapping[str, float]) -> tuple[SlotOptions, Caps]:
        """The slot's options (the GPU-count menu, the power limits) and the caps the slot
        MILP keeps: balanced sites price their options at the plan's value of energy there,
        and a demand-charged site keeps under the planned peak (a power cap of the slot)."""
        opts = slot_options(state, price, carbon, restart_s=self.restart_s,
                            gpu_counts=None if self.gpu_counts is None else {
                                js.job.job_id: tuple(self.gpu_counts) for js in state.jobs
                                if js.job.is_training})
        sp = self._supply_plan
        if sp is None or self._sc is None:
            return opts, self.caps
        return supplied_options(self._sc, opts, sp, state.t, price, carbon, self.caps,
                                state.soc_kwh)

    def _solve_slot(self, state: SlotState, opts: SlotOptions, prob: SlotProblem,
                    keep: NDArray[np.bool_], prio: NDArray[np.float64],
                    price: Mapping[str, float], carbon: Mapping[str, float],
                    carbon_price_by_dc: Mapping[str, float]
                    ) -> tuple[NDArray[np.int64], SolveInfo]:
        """The slot MILP (:func:`~workbench.optim.fallback.solve_or_greedy` over the ``keep``
        options; ``prio`` the greedy fallback's order), with the balanced sites' own supply
        and the grid as two tiers (:func:`~workbench.policies.supplyplan.own_supply_problem`;
        none without a plan): the chosen rows of ``prob`` and how the solve went. A kWh from
        the grid costs its price and its carbon at the carbon price and the plan's budget
        price (``carbon_price_by_dc``)."""
        sp, sc = self._supply_plan, self._sc
        origin = np.arange(prob.n_options, dtype=np.int64)
        if sp is not None and sc is not None:
            region = {d.name: d.region for d in sc.datacenters}
            batteries = {n: b for n in sp.names if (b := sc.supply.battery_at(n)) is not None}
            grid_cost = {d: float(price[region[d]]) + (
                self.carbon_price_per_kg + float(carbon_price_by_dc.get(d, 0.0)))
                * float(carbon[region[d]]) / 1000.0 for d in sp.names}
            prob, keep, origin = own_supply_problem(
                prob, keep, site_energy_kwh(opts, float(sc.slot_s)), sp.energy_value(state.t),
                grid_cost, sp.own_supply_kwh(state.t, state.soc_kwh, batteries))
        chosen, info = solve_or_greedy(prob, keep, prio, t=state.t, solver="fast",
                                       fast=self._fast, mip_rel_gap=self.mip_rel_gap,
                                       time_limit_s=self.time_limit_s)
        return origin[chosen], info

    def _battery_kw(self, opts: SlotOptions, chosen: NDArray[np.int64], t: int,
                    price: Mapping[str, float]) -> dict[str, float]:
        """The batteries' decision for the chosen options: they keep each balanced site's
        grid import at the plan's level for the load chosen here (none without a plan)."""
        sp, sc = self._supply_plan, self._sc
        if sp is None or sc is None:
            return {}
        region = {d.name: d.region for d in sc.datacenters}
        load = site_load_kw(opts, chosen, float(sc.slot_s))
        return sp.battery_kw(t, load, {d: price[region[d]] for d in sp.names})
