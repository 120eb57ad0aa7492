"""The electricity bill of a run, from the site meter alone (:mod:`workbench.meter`):
energy, own supply's settlement, export credit, demand and capacity charges, prorated to
the horizon.

**Parts.** Per datacenter, over the horizon (scenario currency)::

    energy        = sum_t grid import x the grid's price
    ppa           = sum_t own sources' settlement (pay as used; take-or-pay on what was
                    available)
    export_credit = sum_t exported surplus x the export price
    demand        = sum_buckets charge(period, peak_kw) x share(month)
    capacity      = sum_months capacity_kva x price_per_kva_month x share(month)
    total         = energy + ppa - export_credit + demand + capacity

The same meter of the same sites running no job gives ``no_jobs_total``; ``total -
no_jobs_total`` is the part of the bill the plan controls (what the metrics call ``cost``).

**Billing periods.** A datacenter is billed by local calendar month (its timezone). A demand
structure (:class:`workbench.supply.DemandStructure`) assigns each local (month, hour) of a
weekday or weekend day to a period; its charge in a month is the period's (tiered) price per
kW times the month's peak grid import in that period. The peak is the largest slot-average
grid import at the meter, kW (the slot is the demand interval). A :class:`Bucket` is one
(datacenter, charge, structure, month, period): the slots whose peak one charge line takes.

**Proration.** The horizon rarely covers whole months. A monthly charge (demand or capacity)
of a month the horizon covers in part is multiplied by the share of the month's hours inside
the horizon, and the bill says so (:attr:`Bill.note`).
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
from workbench.schema import site_key
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


BILL_PARTS: tuple[str, ...] = ("energy", "ppa", "export_credit", "demand", "capacity",
                                "event_payment", "event_penalty")
"""The bill's named parts, in order; ``export_credit`` and ``event_payment`` (what grid
events pay for the kWh shed, :func:`workbench.events.settle`) are subtracted, the rest
added."""

CREDITS: frozenset[str] = frozenset({"export_credit", "event_payment"})
"""The parts of :data:`BILL_PARTS` the bill subtracts."""


@dataclass(frozen=True)
class SiteBill:
    """One datacenter's bill over the horizon (scenario currency; see the module notes).

    ``peak_kw`` is its largest slot-average grid import and ``peak_time`` the start of that
    slot (UTC; None without import); ``share`` the smallest share of a billed month inside
    the horizon (1: whole months only).
    """

    datacenter: str
    energy: float
    ppa: float
    export_credit: float
    demand: float
    capacity: float
    peak_kw: float
    peak_time: datetime | None
    share: float
    event_payment: float = 0.0
    event_penalty: float = 0.0

    @property
    def total(self) -> float:
        return (self.energy + self.ppa - self.export_credit + self.demand + self.capacity
                - self.event_payment + self.event_penalty)


@dataclass(frozen=True)
class Bill:
    """A run's bill: per datacenter and in total; ``note`` says how monthly charges were
    prorated ("" when no monthly charge applies or whole months were billed)."""

    sites: tuple[SiteBill, ...]
    note: str = ""

    def part(self, name: str) -> float:
        """One of :data:`BILL_PARTS` over every datacenter."""
        return float(sum(getattr(s, name) for s in self.sites))

    @property
    def total(self) -> float:
        return float(sum(s.total for s in self.sites))

    @property
    def prorated(self) -> bool:
        return bool(self.note)

    def as_dict(self) -> dict[str, float]:
        """Every part (:data:`BILL_PARTS`) and ``total``."""
        return {**{p: self.part(p) for p in BILL_PARTS}, "total": self.total}


def compute_bill(sc: Scenario, grid_kwh: NDArray[np.float64], grid_charge: NDArray[np.float64],
                 ppa_charge: NDArray[np.float64] | None = None,
                 export_credit: NDArray[np.float64] | None = None) -> Bill:
    """The bill from the meter: each site-slot's grid import (kWh) and its charges' parts,
    arrays (slots, datacenters) in the scenario's datacenter order (see the module notes;
    ``ppa_charge`` and ``export_credit`` default to 0)."""
    slot_h = sc.slot_s / 3600.0
    names = [d.name for d in sc.datacenters]
    kw = np.asarray(grid_kwh, dtype=float) / slot_h
    zero = np.zeros_like(kw)
    grid_charge = np.asarray(grid_charge, dtype=float)
    ppa = zero if ppa_charge is None else np.asarray(ppa_charge, dtype=float)
    credit = zero if export_credit is None else np.asarray(export_credit, dtype=float)
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
            datacenter=name, energy=float(np.sum(grid_charge[:, i])) if kw.size else 0.0,
            ppa=float(np.sum(ppa[:, i])) if kw.size else 0.0,
            export_credit=float(np.sum(credit[:, i])) if kw.size else 0.0,
            demand=demand[name], capacity=cap.get(name, 0.0),
            peak_kw=float(col.max()) if col.size else 0.0,
            peak_time=None if at is None else times[at],
            share=shares[name] if (demand[name] or cap.get(name)) else 1.0))
    return Bill(sites=tuple(sites), note=_note(sc, partial))


def has_meter(slots: pd.DataFrame | None, datacenters: Sequence[str]) -> bool:
    """Whether a slots frame holds the site meter's columns
    (:data:`workbench.schema.SITE_SLOT`; runs simulated since the meter, or recomputed,
    :func:`workbench.runs.fill_meter`)."""
    return (slots is not None and bool(datacenters)
            and site_key("no_jobs_grid_kwh", datacenters[0]) in slots.columns)


def site_array(slots: pd.DataFrame, field: str, datacenters: Sequence[str]
               ) -> NDArray[np.float64]:
    """One :data:`workbench.schema.SITE_SLOT` field of a slots frame as an array (slots,
    datacenters)."""
    return np.column_stack([slots[site_key(field, d)].to_numpy(dtype=float)
                            for d in datacenters])


def metered_bills(sc: Scenario, slots: pd.DataFrame) -> tuple[Bill, Bill]:
    """The run's bill and the no-jobs reference's, from a slots frame holding the meter's
    columns (:func:`has_meter`; :data:`workbench.schema.SITE_SLOT`)."""
    names = [d.name for d in sc.datacenters]

    def arr(col: str) -> NDArray[np.float64]:
        return site_array(slots, col, names)

    run = compute_bill(sc, arr("grid_kwh"), arr("grid_charge"), arr("ppa_charge"),
                       arr("export_credit"))
    none = compute_bill(sc, arr("no_jobs_grid_kwh"), arr("no_jobs_grid_charge"),
                        arr("no_jobs_ppa_charge"), arr("no_jobs_export_credit"))
    return run, none


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


__all__ = ["BILL_KEYS", "BILL_PARTS", "CREDITS", "Bill", "Bucket", "SiteBill", "bill_metrics",
           "buckets", "capacity_charges", "compute_bill", "demand_prices", "has_meter",
           "metered_bills", "month_share", "site_array", "slot_buckets"]


BILL_KEYS: tuple[str, ...] = (
    *(f"bill_{p}" for p in BILL_PARTS), "bill_total", "bill_no_jobs_total",
    "bill_no_jobs_demand", "bill_unattributed", "demand_proration", "site_carbon_kg",
    "no_jobs_carbon_kg", "green_share", "renewable_kwh", "curtailed_kwh", "exported_kwh",
    "grid_kwh", "battery_throughput_kwh", "battery_cycles", "battery_soc_violations",
    "limit_saved_kwh", "power_limited_share", "cost_at_grid_price",
    "carbon_kg_at_grid_intensity",
)
"""The bill, supply, storage and power-limit metrics (:func:`bill_metrics`) of a metered
run; per datacenter ``bill_<part>:<dc>``, ``bill_total:<dc>``, ``peak_kw:<dc>`` and
``peak_time:<dc>`` follow, and ``bill_note`` (how monthly charges were prorated, text)."""


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


def bill_metrics(plan: pd.DataFrame, slots: pd.DataFrame | None, scenario: Scenario
                 ) -> dict[str, Any]:
    """The bill and where the energy came from (:data:`BILL_KEYS`), from the slots' meter
    (:mod:`workbench.meter`; only the power-limit figures for a slots frame without it).

    - ``bill_<part>`` (:data:`BILL_PARTS`) and ``bill_total``: :func:`metered_bills`;
      ``bill_no_jobs_total`` the same sites' bill running no job, ``bill_no_jobs_demand``
      its demand and capacity charges. ``cost = bill_total - bill_no_jobs_total``, the part
      of the bill the plan controls, and ``carbon_kg = site_carbon_kg -
      no_jobs_carbon_kg`` likewise; ``bill_unattributed`` the part of ``cost`` no plan row
      took (:class:`workbench.meter.Meter`; 0 unless energy moved through a battery after the
      last job ran).
    - ``cost_at_grid_price`` and ``carbon_kg_at_grid_intensity``: the jobs' energy at the
      grid's price and carbon (where the attribution of a saving starts).
    - Per datacenter ``bill_<part>:<dc>``, ``bill_total:<dc>``, its peak grid import
      ``peak_kw:<dc>`` and when (``peak_time:<dc>``, UTC ISO); ``demand_proration`` the
      smallest share of a billed month inside the horizon (1: whole months, or no monthly
      charge) and ``bill_note`` what was prorated.
    - ``green_share = renewable / (renewable + grid)``: the share of the energy the sites
      took in that came from their renewables and PPAs (0 without them);
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
    out: dict[str, Any] = {}
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
    if slots is None or not has_meter(slots, names):
        return out
    bill, none = metered_bills(scenario, slots)
    rows_cost = float(plan["cost"].sum()) if "cost" in plan else 0.0
    cost = bill.total - none.total
    site_kg = float(site_array(slots, "carbon_kg", names).sum())
    none_kg = float(site_array(slots, "no_jobs_carbon_kg", names).sum())
    out.update({f"bill_{p}": bill.part(p) for p in BILL_PARTS})
    out.update(bill_total=bill.total, bill_no_jobs_total=none.total,
               bill_no_jobs_demand=none.part("demand") + none.part("capacity"),
               cost=cost, bill_unattributed=cost - rows_cost,
               site_carbon_kg=site_kg, no_jobs_carbon_kg=none_kg, carbon_kg=site_kg - none_kg,
               demand_proration=min((s.share for s in bill.sites), default=1.0),
               bill_note=bill.note)
    for col, key in (("cost_at_grid_price", "cost_at_grid_price"),
                     ("carbon_kg_at_grid_intensity", "carbon_kg_at_grid_intensity")):
        if col in slots:
            out[key] = float(slots[col].sum())
    for s in bill.sites:
        for p in BILL_PARTS:
            out[f"bill_{p}:{s.datacenter}"] = float(getattr(s, p))
        out[f"bill_total:{s.datacenter}"] = s.total
        out[f"peak_kw:{s.datacenter}"] = s.peak_kw
        out[f"peak_time:{s.datacenter}"] = (None if s.peak_time is None
                                            else pd.Timestamp(s.peak_time).isoformat())

    def total(col: str) -> float:
        return float(site_array(slots, col, names).sum())

    ren, grid_kwh = total("renewable_kwh"), total("grid_kwh")
    out.update(renewable_kwh=ren, grid_kwh=grid_kwh, curtailed_kwh=total("curtailed_kwh"),
               exported_kwh=total("exported_kwh"),
               green_share=ren / (ren + grid_kwh) if ren + grid_kwh > 0 else 0.0)
    throughput = total("discharge_kwh")
    sup = scenario.supply
    usable = sum(b.usable_kwh for b in sup.batteries)
    violations = 0
    for b in sup.batteries:
        soc = site_array(slots, "soc_kwh", [b.datacenter])[:, 0]
        violations += int(((soc < b.soc_min_kwh - TOLERANCE)
                           | (soc > b.soc_max_kwh + TOLERANCE)).sum())
    out.update(battery_throughput_kwh=throughput,
               battery_cycles=throughput / usable if usable else 0.0,
               battery_soc_violations=violations)
    return out
