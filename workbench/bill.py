"""The electricity bill of a run: energy charges, demand charges on the billing month's peak,
capacity charges, prorated to the horizon.

**Billing periods.** A datacenter is billed by local calendar month (its timezone). A demand
structure (:class:`workbench.supply.DemandStructure`) assigns each local (month, hour) of a
weekday or weekend day to a period; its charge in a month is the period's (tiered) price per
kW times the month's peak grid import in that period. The peak is the largest slot-average
grid import, kW (the slot is the demand interval). A :class:`Bucket` is one (datacenter,
charge, structure, month, period): the slots whose peak one charge line takes.

**Proration.** The horizon rarely covers whole months. A monthly charge (demand or capacity)
of a month the horizon covers in part is multiplied by the share of the month's hours inside
the horizon, and the bill says so (:attr:`Bill.note`)::

    demand  = sum_buckets charge(period, peak_kw) * share(month)
    capacity= sum_months capacity_kva * price_per_kva_month * share(month)
    total   = energy + demand + capacity

``energy`` is the sum of the slots' energy charges of the jobs' load
(:func:`workbench.outcome.site_balance`) plus the sites' baseline power at the grid price
(:func:`baseline_kw`, the same under every plan); the peak is that of the grid import with
the baseline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from workbench.model import Scenario, ScenarioView
from workbench.supply import DemandStructure


@dataclass(frozen=True)
class Bucket:
    """One demand charge line: the slots of ``datacenter`` in ``month`` (local ``year * 12 +
    month - 1``) and ``period`` of structure ``structure`` of its demand charge ``charge``
    (indices into :attr:`workbench.supply.Supply.demand_charges` and its structures)."""

    datacenter: str
    charge: int
    structure: int
    month: int
    period: int
    slots: NDArray[np.int64]
    rates: DemandStructure
    share: float
    """Share of the month's hours inside the horizon (1 for a whole month)."""

    @property
    def key(self) -> tuple[str, int, int, int, int]:
        return (self.datacenter, self.charge, self.structure, self.month, self.period)


def _local(sc: Scenario | ScenarioView, tz: str) -> pd.DatetimeIndex:
    times = pd.date_range(pd.Timestamp(sc.start), periods=sc.n_slots,
                          freq=pd.Timedelta(seconds=sc.slot_s))
    return times.tz_convert(tz)


def month_share(sc: Scenario | ScenarioView, tz: str, month: int) -> float:
    """Share of local month ``month`` (``year * 12 + month - 1``) inside the horizon."""
    year, m = divmod(month, 12)
    first = pd.Timestamp(datetime(year, m + 1, 1)).tz_localize(tz)
    nxt = pd.Timestamp(datetime(year + (m + 1) // 12, (m + 1) % 12 + 1, 1)).tz_localize(tz)
    start = pd.Timestamp(sc.start).tz_convert(tz)
    end = start + pd.Timedelta(seconds=sc.slot_s * sc.n_slots)
    inside = (min(end, nxt) - max(start, first)).total_seconds()
    return float(np.clip(inside / (nxt - first).total_seconds(), 0.0, 1.0))


def buckets(sc: Scenario | ScenarioView) -> list[Bucket]:
    """Every demand charge line of the scenario's datacenters over its horizon, in order of
    datacenter, charge, structure, month and period."""
    out: list[Bucket] = []
    tz_of = {d.name: d.timezone for d in sc.datacenters}
    for ci, dc in enumerate(sc.supply.demand_charges):
        local = _local(sc, tz_of[dc.datacenter])
        month_key = (np.asarray(local.year) * 12 + np.asarray(local.month) - 1).astype(np.int64)
        mon = np.asarray(local.month) - 1
        hour = np.asarray(local.hour)
        weekend = np.asarray(local.day_of_week) >= 5
        for si, st in enumerate(dc.structures):
            wd = np.asarray(st.weekday)
            we = np.asarray(st.weekend)
            period = np.where(weekend, we[mon, hour], wd[mon, hour])
            for mk in np.unique(month_key).tolist():
                share = month_share(sc, tz_of[dc.datacenter], int(mk))
                for p in np.unique(period[month_key == mk]).tolist():
                    slots = np.flatnonzero((month_key == mk) & (period == p)).astype(np.int64)
                    out.append(Bucket(dc.datacenter, ci, si, int(mk), int(p), slots, st,
                                      share))
    return out


def capacity_charges(sc: Scenario | ScenarioView) -> dict[str, float]:
    """Each datacenter's capacity charges over the horizon (prorated), currency."""
    out: dict[str, float] = {}
    tz_of = {d.name: d.timezone for d in sc.datacenters}
    for dc in sc.supply.demand_charges:
        monthly = dc.capacity_kva * dc.price_per_kva_month
        if monthly <= 0:
            continue
        local = _local(sc, tz_of[dc.datacenter])
        months = np.unique(np.asarray(local.year) * 12 + np.asarray(local.month) - 1)
        out[dc.datacenter] = out.get(dc.datacenter, 0.0) + monthly * sum(
            month_share(sc, tz_of[dc.datacenter], int(m)) for m in months.tolist())
    return out


@dataclass(frozen=True)
class SiteBill:
    """One datacenter's bill over the horizon (scenario currency).

    ``peak_kw`` is its largest slot-average grid import and ``peak_time`` the start of that
    slot (UTC; None without load); ``share`` the smallest share of a billed month inside the
    horizon (1: whole months only).
    """

    datacenter: str
    energy: float
    demand: float
    capacity: float
    peak_kw: float
    peak_time: datetime | None
    share: float

    @property
    def total(self) -> float:
        return self.energy + self.demand + self.capacity


@dataclass(frozen=True)
class Bill:
    """A run's bill: per datacenter and in total; ``note`` says how monthly charges were
    prorated ("" when no monthly charge applies or whole months were billed)."""

    sites: tuple[SiteBill, ...]
    note: str = ""

    @property
    def energy(self) -> float:
        return float(sum(s.energy for s in self.sites))

    @property
    def demand(self) -> float:
        """Demand and capacity charges: what the bill adds to energy."""
        return float(sum(s.demand + s.capacity for s in self.sites))

    @property
    def total(self) -> float:
        return self.energy + self.demand

    @property
    def prorated(self) -> bool:
        return bool(self.note)

    def as_dict(self) -> dict[str, float]:
        """``{"energy", "demand", "total"}`` (``plan --json``'s ``bill``)."""
        return {"energy": self.energy, "demand": self.demand, "total": self.total}


def baseline_kw(sc: Scenario | ScenarioView) -> NDArray[np.float64]:
    """Each datacenter's baseline facility power, ``idle_power_kw * PUE`` (kW): metered apart
    from the jobs' load, at the grid price, and part of every slot's grid import."""
    return np.array([d.idle_power_kw * d.pue for d in sc.datacenters], dtype=float)


def compute_bill(sc: Scenario, grid_kwh: NDArray[np.float64], energy_charge: NDArray[np.float64]
                 ) -> Bill:
    """The bill from the jobs' metered grid import and energy charges, arrays (slots,
    datacenters) in the scenario's datacenter order (see the module docstring). The sites'
    baseline (:func:`baseline_kw`) is added: to every slot's grid import, and at the grid's
    price to the energy charges."""
    slot_h = sc.slot_s / 3600.0
    names = [d.name for d in sc.datacenters]
    base = baseline_kw(sc)
    kw = np.asarray(grid_kwh, dtype=float) / slot_h + base[None, :]
    price = np.asarray(sc.grid["price_per_kwh"].sel(
        region=[d.region for d in sc.datacenters]).values[_first(sc):_first(sc) + sc.n_slots],
        dtype=float)
    energy_charge = np.asarray(energy_charge, dtype=float) + price * (base * slot_h)[None, :]
    demand = dict.fromkeys(names, 0.0)
    shares = dict.fromkeys(names, 1.0)
    partial: set[int] = set()
    col: NDArray[np.float64]
    for b in buckets(sc):
        j = names.index(b.datacenter)
        peak = float(kw[b.slots, j].max()) if b.slots.size else 0.0
        demand[b.datacenter] += b.rates.charge(b.period, peak) * b.share
        if b.share < 1.0:
            shares[b.datacenter] = min(shares[b.datacenter], b.share)
            partial.add(b.month)
    cap = capacity_charges(sc)
    sites = []
    times = sc.slot_starts()
    for i, name in enumerate(names):
        col = kw[:, i] if kw.size else np.zeros(0)
        at = int(np.argmax(col)) if col.size and col.max() > 0 else None
        sites.append(SiteBill(
            datacenter=name, energy=float(np.sum(energy_charge[:, i])) if kw.size else 0.0,
            demand=demand[name], capacity=cap.get(name, 0.0),
            peak_kw=float(col.max()) if col.size else 0.0,
            peak_time=None if at is None else times[at],
            share=shares[name] if (demand[name] or cap.get(name)) else 1.0))
    return Bill(sites=tuple(sites), note=_note(sc, partial))


def _first(sc: Scenario) -> int:
    """The grid cube's row of the scenario's first slot."""
    times = pd.DatetimeIndex(sc.grid["time"].values)
    pos = int(times.get_indexer([pd.Timestamp(sc.start).tz_convert("UTC").tz_localize(None)])[0])
    if pos < 0:
        raise ValueError(f"scenario {sc.name!r}: its grid cube has no step at its start")
    return pos


def _note(sc: Scenario, months: set[int]) -> str:
    if not months and not capacity_charges(sc):
        return ""
    charged = {d.datacenter for d in sc.supply.demand_charges}
    tz = next((d.timezone for d in sc.datacenters if d.name in charged), "UTC")
    parts = []
    for m in sorted(months):
        year, mm = divmod(m, 12)
        share = month_share(sc, tz, m)
        days = share * pd.Period(f"{year}-{mm + 1:02d}").days_in_month
        parts.append(f"{year}-{mm + 1:02d}: {days:.1f} of "
                     f"{pd.Period(f'{year}-{mm + 1:02d}').days_in_month} days ({share:.1%})")
    if not parts:
        return ""
    return ("monthly demand and capacity charges prorated to the horizon's share of each "
            "billing month: " + "; ".join(parts))


def slot_buckets(bks: Sequence[Bucket], n_slots: int) -> list[list[int]]:
    """For each slot, the indices (into ``bks``) of the buckets it belongs to."""
    out: list[list[int]] = [[] for _ in range(n_slots)]
    for i, b in enumerate(bks):
        for t in b.slots.tolist():
            out[t].append(i)
    return out


def demand_prices(bks: Sequence[Bucket], peaks: Mapping[tuple[str, int, int, int, int], float]
                  ) -> NDArray[np.float64]:
    """Per bucket, the price of one more kW of peak (per kW over the horizon): the tier's
    price at the peak so far times the month's share (what a planner weighs a peak by).
    The tiers of a URDB structure often fall with the peak (a concave charge); a linear
    model prices the next kW at the current tier, not the whole curve."""
    return np.array([b.rates.marginal_price(b.period, peaks.get(b.key, 0.0)) * b.share
                     for b in bks], dtype=float)


__all__ = ["Bill", "Bucket", "SiteBill", "buckets", "capacity_charges", "compute_bill",
           "demand_prices", "month_share", "slot_buckets"]


SUPPLY_KEYS: tuple[str, ...] = (
    "bill_energy", "bill_demand", "bill_total", "demand_proration", "green_share",
    "renewable_kwh", "curtailed_kwh", "exported_kwh", "grid_kwh", "battery_throughput_kwh",
    "battery_cycles", "battery_soc_violations", "limit_saved_kwh", "power_limited_share",
    "cost_at_grid_price", "carbon_kg_at_grid_intensity",
)
"""Supply, storage, bill and power-limit metrics (:func:`supply_metrics`); per datacenter
``bill_energy:<dc>``, ``bill_demand:<dc>``, ``peak_kw:<dc>`` and ``peak_time:<dc>`` follow,
and ``bill_note`` (how monthly charges were prorated, text)."""


def _pool_max_power_w(scenario: Scenario, datacenter: NDArray[Any], gpu_type: NDArray[Any]
                      ) -> NDArray[np.float64]:
    """The maximum board power (W) of each row's pool, ``inf`` where no pool matches (rows
    looked up by code, not one by one: a trace's plan has millions of rows)."""
    d_code, d_names = pd.factorize(datacenter)
    g_code, g_names = pd.factorize(gpu_type)
    table = np.full((len(d_names) + 1, len(g_names) + 1), np.inf)
    d_pos = {str(n): i for i, n in enumerate(d_names)}
    g_pos = {str(n): i for i, n in enumerate(g_names)}
    for p in scenario.pools:
        if p.datacenter in d_pos and p.gpu_type in g_pos:
            table[d_pos[p.datacenter], g_pos[p.gpu_type]] = p.max_power_w
    # Code -1 (a missing value) reads the last row or column: inf.
    return table[d_code, g_code]


def supply_metrics(plan: pd.DataFrame, slots: pd.DataFrame | None, scenario: Scenario,
                   energy: Mapping[str, Any]) -> dict[str, Any]:
    """Where the energy came from and what the bill is (:data:`SUPPLY_KEYS`), from the
    slots' metered balance (``grid_kwh:<dc>``, ``energy_charge:<dc>``, ...; none for a run
    stored without them). ``energy`` holds the plan's ``cost`` and ``carbon_kg``.

    - ``cost`` and ``carbon_kg`` become, with on-site sources or batteries, the energy
      charges and carbon of the jobs' load from what came from where
      (:func:`workbench.outcome.site_balance`); ``cost_at_grid_price`` and
      ``carbon_kg_at_grid_intensity`` keep the plan's sums at the grid's price and carbon
      (what the attribution of a saving starts from). Without supply they are the same.
    - ``bill_energy = cost + site_idle_cost`` (the sites' baseline power, metered apart at
      the grid price), ``bill_demand`` (demand and capacity charges on the peak grid import
      with the baseline, prorated to the horizon), ``bill_total``; per datacenter
      ``bill_energy:<dc>``, ``bill_demand:<dc>``, its peak grid import ``peak_kw:<dc>``
      and when (``peak_time:<dc>``, UTC ISO);
      ``demand_proration`` the smallest share of a billed month inside the horizon (1: whole
      months, or no monthly charge) and ``bill_note`` what was prorated.
    - ``green_share = renewable / (renewable + grid)``: the share of the energy taken in
      for the jobs that came from the sites' renewables and PPAs (0 without them);
      ``renewable_kwh``, ``grid_kwh``, ``curtailed_kwh``, ``exported_kwh``.
    - ``battery_throughput_kwh`` (energy out of the batteries), ``battery_cycles`` (that
      over their usable capacity: full equivalent cycles), ``battery_soc_violations``
      (battery-slots whose metered state of charge left its bounds by more than 1e-9 kWh).
    - ``limit_saved_kwh``: energy the runs' GPU power limits saved against the same
      progress at full power; ``power_limited_share`` the share of the jobs' energy drawn
      under a limit.
    """
    from workbench.outcome.supply import TOLERANCE

    names = [d.name for d in scenario.datacenters]
    out: dict[str, Any] = {"cost_at_grid_price": float(energy["cost"]),
                           "carbon_kg_at_grid_intensity": float(energy["carbon_kg"])}
    saved = plan["limit_saved_kwh"] if "limit_saved_kwh" in plan else pd.Series(dtype=float)
    out["limit_saved_kwh"] = float(saved.fillna(0.0).sum())
    if "power_limit_w" in plan and "n_gpus" in plan:
        on = plan["n_gpus"].fillna(0).to_numpy(dtype=float) > 0
        kwh = plan["energy_kwh"].to_numpy(dtype=float)[on]
        limited = plan["power_limit_w"].to_numpy(dtype=float)[on] < _pool_max_power_w(
            scenario, plan["region"].to_numpy()[on], plan["gpu_type"].to_numpy()[on]) - 1e-9
        run_kwh = float(kwh.sum())
        out["power_limited_share"] = float(kwh[limited].sum()) / run_kwh if run_kwh else 0.0
    else:
        out["power_limited_share"] = 0.0
    if slots is None or not len(slots) or f"grid_kwh:{names[0]}" not in slots:
        return out
    grid = np.column_stack([slots[f"grid_kwh:{n}"].to_numpy(float) for n in names])
    charge = np.column_stack([slots[f"energy_charge:{n}"].to_numpy(float) for n in names])
    bill = compute_bill(scenario, grid, charge)
    sup = scenario.supply
    if sup.has_energy and "cost" in slots:
        out["cost"] = float(slots["cost"].sum())
        out["carbon_kg"] = float(slots["carbon_kg"].sum())
    out.update(bill_energy=bill.energy, bill_demand=bill.demand, bill_total=bill.total,
               demand_proration=min((s.share for s in bill.sites), default=1.0),
               bill_note=bill.note)
    for s in bill.sites:
        out[f"bill_energy:{s.datacenter}"] = s.energy
        out[f"bill_demand:{s.datacenter}"] = s.demand + s.capacity
        out[f"peak_kw:{s.datacenter}"] = s.peak_kw
        out[f"peak_time:{s.datacenter}"] = (None if s.peak_time is None
                                            else pd.Timestamp(s.peak_time).isoformat())

    def total(col: str) -> float:
        return float(sum(slots[f"{col}:{n}"].sum() for n in names if f"{col}:{n}" in slots))

    ren, grid_kwh = total("renewable_kwh"), total("grid_kwh")
    out.update(renewable_kwh=ren, grid_kwh=grid_kwh, curtailed_kwh=total("curtailed_kwh"),
               exported_kwh=total("exported_kwh"),
               green_share=ren / (ren + grid_kwh) if ren + grid_kwh > 0 else 0.0)
    throughput = total("discharge_kwh")
    usable = sum(b.usable_kwh for b in sup.batteries)
    violations = 0
    for b in sup.batteries:
        soc = slots[f"soc_kwh:{b.datacenter}"].to_numpy(float)
        violations += int(((soc < b.soc_min_kwh - TOLERANCE)
                           | (soc > b.soc_max_kwh + TOLERANCE)).sum())
    out.update(battery_throughput_kwh=throughput,
               battery_cycles=throughput / usable if usable else 0.0,
               battery_soc_violations=violations)
    return out
