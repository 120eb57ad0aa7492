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

