"""The look-ahead's part of the site supply (renewables, batteries, demand charges):
:class:`SupplyCoordinator` builds the supply block of the window LP and keeps the plan read
back from it, prices the slot options at the plan's value of energy, turns the slot MILP
into one with each balanced site's own supply and the grid as two tiers (the value holds
only for what that supply can still give in the slot), and decides the batteries for the
chosen options (:mod:`workbench.policies.supplyplan` holds the planner and the plan)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np
from numpy.typing import NDArray

from workbench.caps import Caps
from workbench.forecast import Forecast
from workbench.model import ScenarioView
from workbench.optim.blocklp import BlockSolution
from workbench.optim.slot import SlotProblem
from workbench.policies.base import SlotOptions, SlotState
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
from workbench.units import G_PER_KG


class SupplyCoordinator:
    """The look-ahead's use of the site supply of scenario ``sc``: the planner of its
    balanced sites (None without supply, :meth:`SupplyPlanner.of
    <workbench.policies.supplyplan.SupplyPlanner.of>`) and the current window's supply plan
    (``plan``; None before the first window with supply)."""

    def __init__(self, sc: ScenarioView) -> None:
        self.sc = sc
        self.planner = SupplyPlanner.of(sc)
        self.plan: SupplyPlan | None = None

    def read(self, ws: WindowSupply | None, sol: BlockSolution, plan: WindowPlan
             ) -> WindowPlan:
        """Keep the window's supply plan; the plan's cost with the supply's (grid, sources,
        peaks)."""
        if ws is None or self.planner is None or sol.supply is None:
            return plan
        self.plan = self.planner.plan(ws, sol.supply)
        return replace(plan, cost=plan.cost + sol.supply.cost(ws.block))

    def window_supply(
        self, state: SlotState, forecast: Forecast, bstart: NDArray[np.int64],
        blen: NDArray[np.int64], rows_fc: NDArray[np.int64], bprice: NDArray[np.float64],
        bcarbon: NDArray[np.float64], *, carbon_group: NDArray[np.int64] | None,
        carbon_price_per_kg: float,
    ) -> WindowSupply | None:
        """The window LP's supply block (None without supply): the balanced sites' energy
        goes through their renewables, battery and grid (``carbon_group`` the datacenters'
        budget groups)."""
        sc = self.sc
        if self.planner is None:
            return None
        t, n_win = state.t, int(rows_fc.size)
        ws = self.planner.block(
            t0=t, block_start=bstart, block_len=blen,
            renewable_kw=(np.asarray(forecast.renewable_kw, dtype=float)[rows_fc]
                          if forecast.renewable_kw.size else np.zeros((n_win, 0))),
            price=bprice, carbon_g=bcarbon, soc_kwh=state.soc_kwh,
            peaks=state.peak_kw_so_far, carbon_price_per_kg=carbon_price_per_kg,
            tie=(1.0 + 1e-4 * bstart).astype(float),
            # Energy left in the battery is worth something only before the horizon ends.
            terminal=t + n_win < sc.n_slots, carbon_group=carbon_group)
        return ws

    def options(self, state: SlotState, opts: SlotOptions, price: Mapping[str, float],
                carbon: Mapping[str, float], caps: Caps) -> tuple[SlotOptions, Caps]:
        """The slot's options ``opts`` and the caps the slot MILP keeps: balanced sites
        price their options at the plan's value of energy there, and a demand-charged site
        keeps under the planned peak (a power cap of the slot); unchanged without a plan."""
        if self.plan is None:
            return opts, caps
        return supplied_options(self.sc, opts, self.plan, state.t, price, carbon, caps,
                                state.soc_kwh)

    def slot_problem(self, state: SlotState, opts: SlotOptions, prob: SlotProblem,
                     keep: NDArray[np.bool_], price: Mapping[str, float],
                     carbon: Mapping[str, float], carbon_price_by_dc: Mapping[str, float],
                     carbon_price_per_kg: float
                     ) -> tuple[SlotProblem, NDArray[np.bool_], NDArray[np.int64]]:
        """The slot MILP ``prob`` (over the ``keep`` options) with the balanced sites' own
        supply and the grid as two tiers
        (:func:`~workbench.policies.supplyplan.own_supply_problem`; unchanged without a
        plan), its options to keep and each of its rows' row in ``prob``. A kWh from the
        grid costs its price and its carbon at the carbon price and the plan's budget price
        (``carbon_price_by_dc``)."""
        sp, sc = self.plan, self.sc
        origin = np.arange(prob.n_options, dtype=np.int64)
        if sp is None:
            return prob, keep, origin
        region = {d.name: d.region for d in sc.datacenters}
        batteries = {n: b for n in sp.names if (b := sc.supply.battery_at(n)) is not None}
        grid_cost = {d: float(price[region[d]]) + (
            carbon_price_per_kg + float(carbon_price_by_dc.get(d, 0.0)))
            * float(carbon[region[d]]) / G_PER_KG for d in sp.names}
        return own_supply_problem(
            prob, keep, site_energy_kwh(opts, float(sc.slot_s)), sp.energy_value(state.t),
            grid_cost, sp.own_supply_kwh(state.t, state.soc_kwh, batteries))

    def battery_kw(self, opts: SlotOptions, chosen: NDArray[np.int64], t: int,
                   price: Mapping[str, float]) -> dict[str, float]:
        """The batteries' decision for the chosen options: they keep each balanced site's
        grid import at the plan's level for the load chosen here (none without a plan)."""
        sp, sc = self.plan, self.sc
        if sp is None:
            return {}
        region = {d.name: d.region for d in sc.datacenters}
        load = site_load_kw(opts, chosen, float(sc.slot_s))
        return sp.battery_kw(t, load, {d: price[region[d]] for d in sp.names})
