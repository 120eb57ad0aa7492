"""The site meter: what each datacenter draws at its grid connection, slot by slot.

The meter is the one record of power. Every power figure (the caps, the demand charges'
peaks, the Supply chart, ``peak grid kW``, ``power_cap_violations``, the sites CSV) and
every money figure (the bill, :mod:`workbench.bill`) reads it. Per datacenter ``d`` and
slot ``t`` of ``h`` hours (kWh over the slot; kW = kWh / h)::

    load    = jobs + idle_power_kw[d] x PUE[d] x h
              jobs: the jobs' facility energy at d (IT x PUE), transfers' halves at both
              ends included
    site    = site_balance(load, own supply, battery decision)    (workbench.outcome.supply)
              -> grid import, export or curtailment, energy charge, carbon
    no_jobs = site_balance(idle load alone, greedy battery)       the same site, supply and
              tariffs running no job (its own battery state)

The *controllable* part of the bill is what the jobs add to what the sites pay anyway::

    controllable = sum_t,d (site.energy_charge - no_jobs.energy_charge)
                 + (demand and capacity charges - those of the no-jobs meter)

It is shared out online, slot by slot, among the slot's jobs (:meth:`Meter.read`): each
site-slot's part (its energy charge above the no-jobs one, plus the increase of its demand
charges above the no-jobs increase) goes to the rows that drew energy there, pro rata to
that energy; a part no row drew at (a battery moving energy between slots) goes to every
row of the slot with energy, or, in a slot without any, to the next slot's. Carbon likewise
(without demand). So the rows' shares add up to the controllable part, except what is left
after the last slot with any job energy (:attr:`Meter.unattributed`).

The planners keep a cap on grid import with the same arithmetic: the jobs' power a site may
draw under an import cap is the cap less its idle load (:func:`job_power_caps_kw`; its own
supply only lowers the import, so a plan within it stays within the cap), and the
simulator checks the import itself.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from workbench import events
from workbench.bill import buckets, slot_buckets
from workbench.caps import Caps
from workbench.model import Scenario, ScenarioView
from workbench.outcome.supply import SiteSlot, site_balance
from workbench.schema import site_key


def idle_kw(sc: Scenario | ScenarioView) -> NDArray[np.float64]:
    """Each datacenter's idle load at the meter, ``idle_power_kw * PUE`` (kW), in the
    scenario's datacenter order: drawn whatever runs."""
    return np.array([d.idle_power_kw * d.pue for d in sc.datacenters], dtype=float)


def job_power_caps_kw(sc: Scenario | ScenarioView, caps: Caps) -> NDArray[np.float64]:
    """The jobs' facility power (kW) each datacenter may draw under ``caps``' grid import
    caps: ``cap - idle_kw`` (``inf`` where uncapped, never below 0). What a planner keeps
    its plan within so that the meter's import stays within the cap."""
    names = [d.name for d in sc.datacenters]
    cap = caps.power_kw_array(names).astype(float)
    return np.maximum(cap - idle_kw(sc), 0.0)


def import_limits_kw(sc: Scenario | ScenarioView, caps: Caps, t0: int = 0,
                     t1: int | None = None, known_at: int | None = None
                     ) -> NDArray[np.float64]:
    """Each datacenter's grid import limit (kW) in slots ``[t0, t1)``, shape ``(slots, D)``:
    its power cap, lower in a grid event's slots (:func:`workbench.events.
    import_limits_kw`; with ``known_at`` only the events known at that slot); ``inf``
    where none applies."""
    names = [d.name for d in sc.datacenters]
    return events.import_limits_kw(sc, caps.events, caps.power_kw_array(names), t0, t1,
                                   known_at)


def job_power_limits_kw(sc: Scenario | ScenarioView, caps: Caps, t0: int = 0,
                        t1: int | None = None, known_at: int | None = None
                        ) -> NDArray[np.float64]:
    """:func:`job_power_caps_kw` slot by slot, with the grid events known at ``known_at``:
    the jobs' facility power (kW) each datacenter may draw in slots ``[t0, t1)``, shape
    ``(slots, D)``."""
    return np.maximum(import_limits_kw(sc, caps, t0, t1, known_at) - idle_kw(sc), 0.0)


def check_import_caps(sc: Scenario | ScenarioView, caps: Caps) -> None:
    """Refuse a grid import cap below a datacenter's idle load (kW): no plan can keep it.

    Raises
    ------
    ValueError
        Naming the datacenter, its cap and its idle load.
    """
    if not caps.has_power:
        return
    names = [d.name for d in sc.datacenters]
    cap = caps.power_kw_array(names)
    idle = idle_kw(sc)
    for n, c, i in zip(names, cap.tolist(), idle.tolist(), strict=True):
        if math.isfinite(c) and c < i - 1e-9:
            raise ValueError(
                f"power cap {c:g} kW at {n} is below its idle load {i:.2f} kW (idle power x "
                f"PUE, drawn whatever runs): a cap on grid import cannot be kept; give at "
                f"least {i:.2f} kW plus what its inference services draw")


Drawn = tuple[str, float, float, float]
"""What a plan row drew at one site in a slot: ``(datacenter, kWh, cost at the grid's
price, kg at the grid's carbon)``."""

_DRAWN_KWH = 1e-9
"""kWh below which a site-slot counts as drawing nothing for its rows (a share per kWh of
a rounding residue would be a division by nearly zero)."""


@dataclass(frozen=True)
class MeterSlot:
    """One slot of the meter: per datacenter the site's balance (``sites``), the no-jobs
    reference's (``no_jobs``), and the controllable part of its demand and capacity charges
    accrued this slot (``demand_delta``, currency)."""

    sites: dict[str, SiteSlot]
    no_jobs: dict[str, SiteSlot]
    demand_delta: dict[str, float]
    grid_only: frozenset[str] = frozenset()
    """Sites without own supply or battery: their energy is the grid's at its price."""
    at_grid: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    """Per site, the jobs' energy this slot at the grid's price and carbon (currency, kg),
    summed row by row."""

    def controllable(self, name: str) -> tuple[float, float]:
        """The controllable charge (currency) and carbon (kg) of ``name`` this slot. At a
        grid-only site ``(jobs + idle) p - idle p`` is the jobs' energy at the grid's price:
        taken as the rows' own sum, so that it carries no rounding of the difference."""
        if name in self.grid_only and name in self.at_grid:
            cost, kg = self.at_grid[name]
            return cost + self.demand_delta[name], kg
        s, n = self.sites[name], self.no_jobs[name]
        return (s.energy_charge - n.energy_charge + self.demand_delta[name],
                s.carbon_kg - n.carbon_kg)


@dataclass
class Meter:
    """The site meter of one run (see the module notes): fed each slot's jobs' energy and
    battery decisions, it returns the sites' balances and shares the controllable part
    among the slot's rows.

    ``price[t, r]``, ``carbon[t, r]`` the true grid price and carbon by region index;
    ``limit_kw[t, d]`` the grid import limits (kW: power caps and grid events,
    :func:`import_limits_kw`) that charging a battery may not break (None: none).
    """

    scenario: Scenario
    price: NDArray[np.float64]
    carbon: NDArray[np.float64]
    region_index: dict[str, int]
    limit_kw: NDArray[np.float64] | None = None
    unattributed: float = 0.0
    """Controllable currency no row has taken yet (carried to the next slot with energy)."""
    unattributed_kg: float = 0.0

    def __post_init__(self) -> None:
        sc = self.scenario
        self.slot_h = sc.slot_s / 3600.0
        self.names = [d.name for d in sc.datacenters]
        self.col = {n: i for i, n in enumerate(self.names)}
        self.idle_kwh = dict(zip(self.names, (idle_kw(sc) * self.slot_h).tolist(),
                                 strict=True))
        self.region = {d.name: self.region_index[d.region] for d in sc.datacenters}
        self.soc = {b.datacenter: b.soc_initial_kwh for b in sc.supply.batteries}
        self.soc_no_jobs = dict(self.soc)
        self.buckets = buckets(sc)
        self.slot_buckets = slot_buckets(self.buckets, sc.n_slots)
        self.peaks = [0.0] * len(self.buckets)
        self.peaks_no_jobs = [0.0] * len(self.buckets)
        supply = sc.supply
        self.grid_only = frozenset(n for n in self.names if not supply.sources_at(n)
                                   and supply.battery_at(n) is None)

    def available_kwh(self, name: str, t: int) -> list[float]:
        """What each of ``name``'s sources can deliver in slot ``t``, kWh."""
        return [s.available_kw[t] * self.slot_h for s in self.scenario.supply.sources_at(name)]

    def _balance(self, name: str, t: int, load_kwh: float, soc: float,
                 battery_kw: float | None) -> SiteSlot:
        supply = self.scenario.supply
        sources = supply.sources_at(name)
        r = self.region[name]
        cap = math.inf if self.limit_kw is None else float(self.limit_kw[t, self.col[name]])
        return site_balance(
            load_kwh, self.available_kwh(name, t), sources,
            grid_price_per_kwh=float(self.price[t, r]),
            grid_carbon_g_per_kwh=float(self.carbon[t, r]), slot_h=self.slot_h,
            battery=supply.battery_at(name), soc_kwh=soc, battery_kw=battery_kw,
            export_price_per_kwh=supply.export_price(name) if sources else None,
            import_cap_kwh=cap * self.slot_h)

    def import_kw(self, name: str, t: int, jobs_kw: float,
                  battery_kw: float | None = None) -> float:
        """Grid import (kW) the meter would read at ``name`` in slot ``t`` if its jobs drew
        ``jobs_kw`` of facility power under the battery decision ``battery_kw`` (None: the
        greedy dispatch): :func:`site_balance`'s grid from the battery's state of charge
        now, its own sources and, under an import cap, the discharge its controller makes
        to keep it. What the simulator keeps a cap against; nothing is metered."""
        load = jobs_kw * self.slot_h + self.idle_kwh[name]
        site = self._balance(name, t, load, self.soc.get(name, 0.0), battery_kw)
        return site.grid_kwh / self.slot_h

    def read(self, t: int, jobs_kwh: Mapping[str, float],
             battery_kw: Mapping[str, float],
             at_grid: Mapping[str, tuple[float, float]] | None = None) -> MeterSlot:
        """Meter slot ``t``: the jobs' facility energy per datacenter (kWh), the planner's
        battery decisions (kW, + discharge; a site left out: greedy dispatch) and, where
        known, that energy at the grid's price and carbon (:attr:`MeterSlot.at_grid`)."""
        sites: dict[str, SiteSlot] = {}
        none: dict[str, SiteSlot] = {}
        for name in self.names:
            idle = self.idle_kwh[name]
            site = self._balance(name, t, jobs_kwh.get(name, 0.0) + idle,
                                 self.soc.get(name, 0.0), battery_kw.get(name))
            ref = self._balance(name, t, idle, self.soc_no_jobs.get(name, 0.0), None)
            if name in self.soc:
                self.soc[name] = site.soc_kwh
                self.soc_no_jobs[name] = ref.soc_kwh
            sites[name], none[name] = site, ref
        delta = dict.fromkeys(self.names, 0.0)
        for i in self.slot_buckets[t]:
            b = self.buckets[i]
            kw = sites[b.datacenter].grid_kwh / self.slot_h
            kw0 = none[b.datacenter].grid_kwh / self.slot_h
            new, new0 = max(self.peaks[i], kw), max(self.peaks_no_jobs[i], kw0)
            charge = b.rates.charge
            delta[b.datacenter] += b.share * (
                charge(b.period, new) - charge(b.period, self.peaks[i])
                - charge(b.period, new0) + charge(b.period, self.peaks_no_jobs[i]))
            self.peaks[i], self.peaks_no_jobs[i] = new, new0
        return MeterSlot(sites=sites, no_jobs=none, demand_delta=delta,
                         grid_only=self.grid_only, at_grid=dict(at_grid or {}))

    def columns(self, t: int, slot: MeterSlot) -> dict[str, float]:
        """Slot ``t``'s meter as slot-record columns: the fields of
        :data:`workbench.schema.SITE_SLOT` by :func:`~workbench.schema.site_key`, plus the
        no-jobs reference's charge parts ``site:no_jobs_<part>:<dc>``."""
        out: dict[str, float] = {}
        h = self.slot_h
        for name, site in slot.sites.items():
            ref = slot.no_jobs[name]
            r = self.region[name]
            out[site_key("load_kw", name)] = site.load_kwh / h
            out[site_key("grid_import_kw", name)] = site.grid_kwh / h
            out[site_key("price_per_kwh", name)] = float(self.price[t, r])
            out[site_key("carbon_g_per_kwh", name)] = float(self.carbon[t, r])
            for col in _FROM_SITE:
                out[site_key(col, name)] = float(getattr(site, col))
            for col, attr in _FROM_NO_JOBS.items():
                out[site_key(col, name)] = float(getattr(ref, attr))
            for part in _NO_JOBS_PARTS:
                out[site_key(f"no_jobs_{part}", name)] = float(getattr(ref, part))
        return out

    def shares(self, slot: MeterSlot, rows: Sequence[Sequence[Drawn]]
               ) -> list[tuple[float, float]]:
        """Each row's share of the slot's controllable charge and carbon: ``rows[i]`` lists
        what the row drew this slot, ``(datacenter, kWh, at the grid's price, at the
        grid's carbon)`` (see the module notes). At a grid-only site a row's share is its
        own energy at the grid's price and carbon (plus its part of a demand charge's
        rise)."""
        at: dict[str, float] = dict.fromkeys(self.names, 0.0)
        for drawn in rows:
            for name, kwh, _, _ in drawn:
                at[name] += kwh
        left_cost, left_kg = self.unattributed, self.unattributed_kg
        part: dict[str, tuple[float, float]] = {}
        for name in self.names:
            cost, kg = slot.controllable(name)
            if name in slot.grid_only and name in slot.at_grid:
                cost -= slot.at_grid[name][0]  # the rows take their own grid-price part
                kg = 0.0
            if at[name] > _DRAWN_KWH:
                part[name] = (cost / at[name], kg / at[name])
            else:
                left_cost += cost
                left_kg += kg
        total = sum(at.values())
        spread = (left_cost / total, left_kg / total) if total > _DRAWN_KWH else (0.0, 0.0)
        out = []
        for drawn in rows:
            c = k = 0.0
            for name, kwh, grid_cost, grid_kg in drawn:
                per = part.get(name, (0.0, 0.0))
                if name in slot.grid_only and name in slot.at_grid:
                    c += grid_cost
                    k += grid_kg
                if per[0] or spread[0]:
                    c += kwh * (per[0] + spread[0])
                if per[1] or spread[1]:
                    k += kwh * (per[1] + spread[1])
            out.append((c, k))
        if total > _DRAWN_KWH:
            self.unattributed = self.unattributed_kg = 0.0
        else:
            self.unattributed, self.unattributed_kg = left_cost, left_kg
        return out


_FROM_SITE = ("grid_kwh", "renewable_kwh", "curtailed_kwh", "exported_kwh", "charge_kwh",
              "discharge_kwh", "soc_kwh", "grid_charge", "ppa_charge", "export_credit",
              "energy_charge", "carbon_kg")
_FROM_NO_JOBS = {"no_jobs_grid_kwh": "grid_kwh", "no_jobs_energy_charge": "energy_charge",
                 "no_jobs_carbon_kg": "carbon_kg"}
_NO_JOBS_PARTS = ("grid_charge", "ppa_charge", "export_credit")


__all__ = ["Meter", "MeterSlot", "check_import_caps", "idle_kw", "import_limits_kw",
           "job_power_caps_kw", "job_power_limits_kw"]
