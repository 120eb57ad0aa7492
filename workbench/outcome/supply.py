"""The energy balance of one datacenter-slot: where its load comes from.

Every datacenter-slot draws its load (the jobs' facility energy, IT x PUE with transfers,
plus the site's idle load ``idle_power_kw x PUE``) from its renewables and PPAs, its battery
and the grid (:func:`site_balance`); the site meter (:mod:`workbench.meter`) calls it with
the truth and with the no-jobs reference, the tests with whatever they like. All
quantities are kWh over the slot at the site's meter (a slot of ``h`` hours: power kW =
kWh / h).

**Battery.** ``battery_kw`` is the planner's decision (positive: discharge into the site,
negative: charge, kW at the meter), clipped to what the battery can do::

    discharge <= min(P_bat h, (soc - soc_min) eta)
    charge    <= min(P_bat h, (soc_max - soc) / eta)
    discharge <= max(load - available, 0)        (no discharge into a renewable surplus)
    soc'      = soc + eta charge - discharge / eta      eta = sqrt(round-trip efficiency)

so the state of charge never leaves its bounds. Without a decision (``battery_kw`` None)
the **greedy dispatch** of the site's own controller applies: a renewable surplus charges the
battery, a deficit discharges it (self-consumption, as far as power and state of charge
allow); it never charges from the grid.

**Import cap.** Under a grid import cap (a power cap at the connection or a grid event's
limit, ``import_cap_kwh``) the site's controller charges no more than the cap leaves and,
whatever the decision, discharges at least what keeps the import within it, as far as the
battery allows::

    discharge >= min(load - available - cap h, P_bat h, (soc - soc_min) eta)

what a real site's battery controller does against its connection's limit (it reacts to the
slot's metered load, no forecast involved). The load itself is never cut here.

**Dispatch of the rest.** The load plus charging, less discharge, is the *net* demand; the
sources serve it in merit order (take-or-pay first, at marginal price 0, then by price,
carbon and name); the grid supplies what is left. Surplus renewable power is exported at the
site's export price when one is given, else curtailed (recorded, not sold)::

    net      = load + charge - discharge
    used_s   = min(available_s, net - sum of cheaper used)        per source, merit order
    grid     = net - sum_s used_s                                  >= 0
    surplus  = sum_s available_s - sum_s used_s  -> exported or curtailed

    load     = renewable_to_load + discharge + grid_to_load        (the load's split)
    charge   = what the site put into the battery (renewables first, then grid)

**Bill and carbon** of the slot (scenario currency, kg)::

    energy_charge = grid p + sum_{s pay as used} used_s price_s + sum_{s take-or-pay}
                    available_s price_s - exported export_price
    carbon        = (grid c + sum_s used_s c_s) / 1000

A datacenter without sources or battery has ``grid = load``: the grid price and carbon alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from workbench.supply import Battery, Source
from workbench.units import G_PER_KG

TOLERANCE = 1e-9
"""kWh by which a state of charge may stray from its bounds in floating point and still
count as within them."""


@dataclass(frozen=True)
class SiteSlot:
    """One datacenter-slot's energy balance (kWh over the slot; see the module notes).

    Attributes
    ----------
    load_kwh : float
        The site's load: jobs (with PUE and transfers) plus its baseline.
    used_kwh : tuple of float
        Energy used from each of the site's sources (in the order given).
    renewable_kwh : float
        ``sum(used_kwh)``: renewable and PPA energy used on site (load and charging).
    renewable_to_load_kwh, grid_to_load_kwh : float
        The parts of the load served by renewables and by the grid (with
        ``discharge_kwh``: the load's split).
    curtailed_kwh, exported_kwh : float
        Surplus renewable energy thrown away, or sold at the export price.
    charge_kwh, discharge_kwh : float
        Energy into the battery from the site, and out of it into the site.
    grid_kwh : float
        Grid import (load and charging).
    soc_kwh : float
        The battery's state of charge at the slot's end (0 without one).
    energy_charge : float
        The slot's energy bill, scenario currency: ``grid_charge + ppa_charge -
        export_credit``.
    carbon_kg : float
    grid_charge, ppa_charge, export_credit : float
        Its parts: grid energy at the grid's price; the sources' settlement (pay as used,
        take-or-pay on what was available); exported energy at the export price.
    """

    load_kwh: float
    used_kwh: tuple[float, ...]
    renewable_kwh: float
    renewable_to_load_kwh: float
    grid_to_load_kwh: float
    curtailed_kwh: float
    exported_kwh: float
    charge_kwh: float
    discharge_kwh: float
    grid_kwh: float
    soc_kwh: float
    energy_charge: float
    carbon_kg: float
    grid_charge: float = 0.0
    ppa_charge: float = 0.0
    export_credit: float = 0.0

    @property
    def battery_kwh(self) -> float:
        """Net battery energy into the site (discharge - charge), kWh."""
        return self.discharge_kwh - self.charge_kwh


def merit_order(sources: Sequence[Source]) -> list[int]:
    """Indices of ``sources`` in dispatch order: take-or-pay first (marginal price 0), then
    by marginal price, carbon intensity and name."""
    return sorted(range(len(sources)), key=lambda i: (
        sources[i].marginal_price_per_kwh, sources[i].carbon_g_per_kwh, sources[i].name))


def battery_limits(battery: Battery, soc_kwh: float, slot_h: float) -> tuple[float, float]:
    """Most energy the battery can take from the site and deliver to it this slot, kWh:
    ``(min(P h, (soc_max - soc) / eta), min(P h, (soc - soc_min) eta))``, both >= 0."""
    cap = battery.power_kw * slot_h
    room = max(battery.soc_max_kwh - soc_kwh, 0.0) / battery.eta
    stock = max(soc_kwh - battery.soc_min_kwh, 0.0) * battery.eta
    return min(cap, room), min(cap, stock)


def site_balance(
    load_kwh: float,
    available_kwh: Sequence[float],
    sources: Sequence[Source],
    *,
    grid_price_per_kwh: float,
    grid_carbon_g_per_kwh: float,
    slot_h: float,
    battery: Battery | None = None,
    soc_kwh: float = 0.0,
    battery_kw: float | None = None,
    export_price_per_kwh: float | None = None,
    import_cap_kwh: float = math.inf,
) -> SiteSlot:
    """The energy balance of one datacenter-slot (see the module notes for the rules).

    Parameters
    ----------
    load_kwh : float
        The site's load over the slot, kWh (>= 0).
    available_kwh : sequence of float
        What each source can deliver this slot, kWh (>= 0), in the order of ``sources``.
    battery, soc_kwh : Battery or None, float
        The site's battery and its state of charge at the slot's start, kWh.
    battery_kw : float or None
        The planner's battery decision (kW at the meter, + discharge, - charge); None: the
        greedy dispatch.
    export_price_per_kwh : float or None
        Price paid for exported surplus; None: surplus is curtailed.
    import_cap_kwh : float
        Grid import allowed over the slot (a power cap at the connection times the slot's
        hours): charging the battery is cut so as not to import above it and the battery
        discharges what keeps the import within it (the load itself is never cut here: the
        simulator keeps the jobs within what the cap and the battery allow before).
    """
    load = max(float(load_kwh), 0.0)
    avail = [max(float(a), 0.0) for a in available_kwh]
    total = sum(avail)
    charge = discharge = 0.0
    if battery is not None:
        can_charge, can_discharge = battery_limits(battery, soc_kwh, slot_h)
        deficit = max(load - total, 0.0)
        if battery_kw is None:
            if total > load:
                charge = min(total - load, can_charge)
            else:
                discharge = min(deficit, can_discharge)
        elif battery_kw > 0:
            discharge = min(battery_kw * slot_h, can_discharge, deficit)
        elif battery_kw < 0:
            charge = min(-battery_kw * slot_h, can_charge)
        if charge > 0 and math.isfinite(import_cap_kwh):
            # Charging may take what renewables leave and the grid up to the cap.
            charge = min(charge, max(total + import_cap_kwh - load, 0.0))
        over = load + charge - discharge - total - import_cap_kwh
        if over > 0:
            # The site's controller keeps the cap with the battery first.
            discharge = min(discharge + over, can_discharge)
    net = load + charge - discharge
    used = [0.0] * len(avail)
    left = net
    for i in merit_order(sources):
        take = min(avail[i], max(left, 0.0))
        used[i] = take
        left -= take
    renewable = sum(used)
    grid = max(net - renewable, 0.0)
    surplus = max(total - renewable, 0.0)
    exported = surplus if export_price_per_kwh is not None else 0.0
    to_load = min(renewable, load - discharge)
    grid_charge = grid * grid_price_per_kwh
    export_credit = exported * (export_price_per_kwh or 0.0)
    ppa_charge = 0.0
    carbon_g = grid * grid_carbon_g_per_kwh
    for s, u, a in zip(sources, used, avail, strict=True):
        ppa_charge += (a if s.take_or_pay else u) * s.price_per_kwh
        carbon_g += u * s.carbon_g_per_kwh
    soc_end = soc_kwh + (battery.eta * charge - discharge / battery.eta
                         if battery is not None else 0.0)
    return SiteSlot(
        load_kwh=load, used_kwh=tuple(used), renewable_kwh=renewable,
        renewable_to_load_kwh=to_load, grid_to_load_kwh=load - discharge - to_load,
        curtailed_kwh=surplus - exported, exported_kwh=exported, charge_kwh=charge,
        discharge_kwh=discharge, grid_kwh=grid, soc_kwh=soc_end if battery is not None else 0.0,
        energy_charge=grid_charge + ppa_charge - export_credit, carbon_kg=carbon_g / G_PER_KG,
        grid_charge=grid_charge, ppa_charge=ppa_charge, export_credit=export_credit)


__all__ = ["TOLERANCE", "SiteSlot", "battery_limits", "merit_order", "site_balance"]
