"""On-site supply, storage and demand charges of the datacenters: frozen domain records.

A datacenter may draw, besides the grid, from renewable plants and power purchase
agreements (:class:`Source`: solar, wind, ppa, each with the power it can deliver in every
slot), store energy in a :class:`Battery`, and pay a :class:`DemandCharge` on its billing
month's peak grid import. :class:`Supply` holds them for a scenario (empty by default: a
scenario without supply behaves exactly as before). Units are in the field names; powers are
averages over a slot, kW; energies kWh.

Sign conventions: a source's ``available_kw`` is >= 0 (power it *can* deliver); a battery's
decision ``battery_kw`` (:mod:`workbench.outcome.supply`) is positive when it discharges into
the site, negative when it charges.

Policies see a :meth:`Supply.static` copy (no future output of an imported series: that
comes from :func:`forecast_output`, as prices come from the forecast).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from workbench.errors import ScenarioError
from workbench.events import GridEvent

SOURCE_KINDS: tuple[str, ...] = ("solar", "wind", "ppa")
"""Kinds of :class:`Source` (a battery is a :class:`Battery`)."""

SUPPLY_KINDS: tuple[str, ...] = (*SOURCE_KINDS, "battery")
"""The ``kind`` values of a ``[[supply]]`` entry."""

LEVERS: tuple[str, ...] = ("supply", "demand-charges", "power-limits")
"""What a run can plan as if it did not exist (``--ignore``) while the simulator still meters
and bills it (:meth:`Supply.without`)."""


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise ScenarioError(message)


def _finite(value: float, what: str, *, low: float = 0.0, low_open: bool = False,
            high: float = math.inf) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > low if low_open else value >= low) and value <= high
    bound = f"> {low:g}" if low_open else f">= {low:g}"
    _check(ok, f"{what} must be a finite number {bound}"
           + (f" and <= {high:g}" if math.isfinite(high) else "") + f", got {value!r}")
    return float(value)


@dataclass(frozen=True, eq=False)
class Source:
    """A renewable plant or power purchase agreement feeding one datacenter.

    Attributes
    ----------
    name : str
        Unique among the scenario's supply entries.
    datacenter : str
    kind : {"solar", "wind", "ppa"}
    capacity_kw : float
        Nameplate (AC) power, kW; a PPA's largest contracted power.
    available_kw : float array (n_slots,)
        Power it can deliver in each slot of the horizon (average over the slot), kW, >= 0.
        Empty in a policy's view (:meth:`Supply.static`).
    price_per_kwh : float
        What a kWh costs (scenario currency): 0 for an owned plant by default, the contract
        price for a PPA.
    carbon_g_per_kwh : float
        Carbon intensity of its energy, gCO2/kWh (0 by default).
    take_or_pay : bool
        A PPA paid for its whole contracted volume whether used or not (its unused energy
        is then curtailed or exported like any surplus).
    export_price_per_kwh : float or None
        What the grid pays for this site's surplus renewable energy; None: surplus is
        curtailed (recorded, not sold).
    modelled : bool
        Its output comes from a model of its own (a clear-sky model, a contract shape): the
        model is its own forecast. An imported series is forecast like a grid signal.
    origin : str
        Where the output comes from, in words (the model and its inputs, or the series).
    """

    name: str
    datacenter: str
    kind: str
    capacity_kw: float
    available_kw: NDArray[np.float64]
    price_per_kwh: float = 0.0
    carbon_g_per_kwh: float = 0.0
    take_or_pay: bool = False
    export_price_per_kwh: float | None = None
    modelled: bool = True
    origin: str = ""

    def __post_init__(self) -> None:
        where = f"supply {self.name!r} ({self.kind} at {self.datacenter})"
        _check(bool(self.name), "a supply entry needs a name")
        _check(self.kind in SOURCE_KINDS, f"{where}: kind must be one of {SOURCE_KINDS}")
        _finite(self.capacity_kw, f"{where}: capacity_kw", low_open=True)
        _finite(self.price_per_kwh, f"{where}: price_per_kwh", low=-math.inf)
        _finite(self.carbon_g_per_kwh, f"{where}: carbon_g_per_kwh")
        if self.export_price_per_kwh is not None:
            _finite(self.export_price_per_kwh, f"{where}: export_price_per_kwh", low=-math.inf)
        arr = np.asarray(self.available_kw, dtype=float)
        _check(arr.ndim == 1, f"{where}: available_kw must be one value per slot")
        _check(bool(np.all(np.isfinite(arr))) and bool(np.all(arr >= 0)),
               f"{where}: its output must be finite and >= 0 kW in every slot")
        arr.setflags(write=False)
        object.__setattr__(self, "available_kw", arr)
        object.__setattr__(self, "take_or_pay", bool(self.take_or_pay))

    @property
    def marginal_price_per_kwh(self) -> float:
        """What one more kWh used costs: 0 for take-or-pay (paid anyway), else its price."""
        return 0.0 if self.take_or_pay else float(self.price_per_kwh)


@dataclass(frozen=True)
class Battery:
    """A battery at one datacenter.

    Charging ``c`` kWh from the site stores ``eta * c``; taking ``u`` kWh out of storage
    delivers ``eta * u``, with ``eta = sqrt(round_trip_efficiency)`` each way (a round trip
    returns ``round_trip_efficiency`` of what went in). The state of charge stays in
    ``[soc_min, soc_max] * energy_kwh``.

    Attributes
    ----------
    energy_kwh : float
        Storage capacity, kWh.
    power_kw : float
        Largest charge or discharge power at the site's meter, kW.
    round_trip_efficiency : float
        In (0, 1].
    soc_initial, soc_min, soc_max : float
        Fractions of ``energy_kwh``: at the start, the floor and the ceiling.
    """

    name: str
    datacenter: str
    energy_kwh: float
    power_kw: float
    round_trip_efficiency: float = 0.9
    soc_initial: float = 0.5
    soc_min: float = 0.1
    soc_max: float = 1.0

    def __post_init__(self) -> None:
        where = f"battery {self.name!r} at {self.datacenter}"
        _finite(self.energy_kwh, f"{where}: energy_kwh", low_open=True)
        _finite(self.power_kw, f"{where}: power_kw", low_open=True)
        _finite(self.round_trip_efficiency, f"{where}: round_trip_efficiency", low_open=True,
                high=1.0)
        for f in ("soc_initial", "soc_min", "soc_max"):
            _finite(getattr(self, f), f"{where}: {f} (a fraction of energy_kwh)", high=1.0)
        _check(self.soc_min < self.soc_max,
               f"{where}: soc_min ({self.soc_min:g}) must be below soc_max ({self.soc_max:g})")
        _check(self.soc_min <= self.soc_initial <= self.soc_max,
               f"{where}: soc_initial ({self.soc_initial:g}) must lie between soc_min "
               f"({self.soc_min:g}) and soc_max ({self.soc_max:g})")

    @property
    def eta(self) -> float:
        """One-way efficiency ``sqrt(round_trip_efficiency)``."""
        return math.sqrt(self.round_trip_efficiency)

    @property
    def soc_min_kwh(self) -> float:
        return self.soc_min * self.energy_kwh

    @property
    def soc_max_kwh(self) -> float:
        return self.soc_max * self.energy_kwh

    @property
    def soc_initial_kwh(self) -> float:
        return self.soc_initial * self.energy_kwh

    @property
    def usable_kwh(self) -> float:
        """``(soc_max - soc_min) * energy_kwh``: one full cycle's energy."""
        return self.soc_max_kwh - self.soc_min_kwh

    def deliverable_kw(self, hours: float, lead_h: float) -> float:
        """The most power the battery can hold through an event of ``hours`` that starts
        ``lead_h`` hours after the run's start: its power, or the energy it can hold by then
        delivered over the event, whichever is less. The energy is what it holds above its
        floor at the start plus ``lead_h`` hours of charging at full power (an upper bound:
        the charge needs room at the meter), at most one full cycle, times the one-way
        efficiency out."""
        held = min(self.usable_kwh, max(self.soc_initial_kwh - self.soc_min_kwh, 0.0)
                   + self.power_kw * self.eta * max(lead_h, 0.0))
        return min(self.power_kw, held * self.eta / hours)


@dataclass(frozen=True)
class DemandStructure:
    """One demand charge structure: a price per kW of the billing month's peak in each
    period, the periods given by local month and hour (URDB's demand structures).

    Attributes
    ----------
    tiers : tuple per period of ((upper_kw, price_per_kw_month), ...)
        Each period's tiers: the price applies to the part of the peak between the previous
        tier's ``upper_kw`` (0 first) and this one's; the last ``upper_kw`` is ``inf``.
    weekday, weekend : 12 x 24 tuples of int
        Period of each local (month, hour) on weekdays and on Saturdays and Sundays.
    """

    tiers: tuple[tuple[tuple[float, float], ...], ...]
    weekday: tuple[tuple[int, ...], ...]
    weekend: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        _check(bool(self.tiers), "a demand structure needs at least one period")
        for p, tiers in enumerate(self.tiers):
            _check(bool(tiers), f"demand period {p} has no tier")
            last = 0.0
            for i, (upper, price) in enumerate(tiers):
                _check(upper > last, f"demand period {p}: tier {i}'s upper kW ({upper:g}) must "
                       f"exceed the previous one ({last:g})")
                _finite(price, f"demand period {p} tier {i}: price per kW-month")
                last = upper
            _check(math.isinf(last), f"demand period {p}: the last tier must have no upper "
                   "limit")
        for name in ("weekday", "weekend"):
            sched = np.asarray(getattr(self, name))
            _check(sched.shape == (12, 24), f"demand {name} schedule must be 12 x 24")
            _check(bool(np.all((sched >= 0) & (sched < len(self.tiers)))),
                   f"demand {name} schedule names a period that has no rates")

    @staticmethod
    def flat(price_per_kw_month: float) -> DemandStructure:
        """One period all the time at one price per kW-month."""
        zero = tuple(tuple(0 for _ in range(24)) for _ in range(12))
        return DemandStructure(tiers=(((math.inf, float(price_per_kw_month)),),),
                               weekday=zero, weekend=zero)

    def charge(self, period: int, peak_kw: float) -> float:
        """The monthly charge of ``peak_kw`` in ``period``: ``sum_i price_i * (min(peak,
        upper_i) - upper_{i-1})^+`` (per month, before any proration)."""
        total, lower = 0.0, 0.0
        for upper, price in self.tiers[period]:
            if peak_kw <= lower:
                break
            total += price * (min(peak_kw, upper) - lower)
            lower = upper
        return total

    def marginal_price(self, period: int, peak_kw: float) -> float:
        """Price per kW-month of the next kW above ``peak_kw`` in ``period``."""
        for upper, price in self.tiers[period]:
            if peak_kw < upper:
                return price
        return self.tiers[period][-1][1]


@dataclass(frozen=True)
class DemandCharge:
    """What a datacenter pays on its power besides energy, per billing month (local
    calendar month of its timezone).

    Attributes
    ----------
    structures : tuple of DemandStructure
        Charges on the month's peak grid import (kW, the slot's average) in each period.
    capacity_kva, price_per_kva_month : float
        A capacity charge (China's two-part tariff on transformer capacity): fixed,
        ``capacity_kva * price_per_kva_month`` per month, the same under every plan.
    source : str
        Where it comes from (the TOML, or the URDB tariff's name and file).
    """

    name: str
    datacenter: str
    structures: tuple[DemandStructure, ...] = ()
    capacity_kva: float = 0.0
    price_per_kva_month: float = 0.0
    source: str = ""

    def __post_init__(self) -> None:
        where = f"demand charge {self.name!r} at {self.datacenter}"
        _finite(self.capacity_kva, f"{where}: capacity_kva")
        _finite(self.price_per_kva_month, f"{where}: price_per_kva_month")
        _check(bool(self.structures) or self.capacity_kva * self.price_per_kva_month > 0,
               f"{where}: give price_per_kw_month, a URDB tariff with a demand structure, or "
               "capacity_kva with price_per_kva_month")


@dataclass(frozen=True, eq=False)
class Supply:
    """Every datacenter's sources, batteries and demand charges (empty: grid only)."""

    sources: tuple[Source, ...] = ()
    batteries: tuple[Battery, ...] = ()
    demand_charges: tuple[DemandCharge, ...] = ()
    grid_events: tuple[GridEvent, ...] = ()
    """The scenario's grid events (``[[grid_events]]``): every run on it is held to them
    (:func:`workbench.runner.with_scenario_events`)."""

    def __post_init__(self) -> None:
        for name in ("sources", "batteries", "demand_charges", "grid_events"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        names = [s.name for s in self.sources] + [b.name for b in self.batteries] + [
            d.name for d in self.demand_charges] + [e.label for e in self.grid_events]
        seen: set[str] = set()
        for n in names:
            _check(n not in seen, f"supply entries share the name {n!r}; give each its own")
            seen.add(n)
        at = [b.datacenter for b in self.batteries]
        dup = sorted({d for d in at if at.count(d) > 1})
        _check(not dup, f"datacenter {', '.join(dup)} has more than one battery; describe "
               "them as one (their energy_kwh and power_kw added)")
        for dc in {s.datacenter for s in self.sources}:
            prices = {s.export_price_per_kwh for s in self.sources
                      if s.datacenter == dc and s.export_price_per_kwh is not None}
            _check(len(prices) <= 1, f"datacenter {dc}: its supply entries give different "
                   f"export prices {sorted(prices)}; give one")

    @property
    def empty(self) -> bool:
        return not (self.sources or self.batteries or self.demand_charges)

    @property
    def has_energy(self) -> bool:
        """Any source or battery (what changes where the energy comes from)."""
        return bool(self.sources or self.batteries)

    def datacenters(self) -> tuple[str, ...]:
        """Datacenters with any entry, sorted."""
        return tuple(sorted({s.datacenter for s in self.sources}
                            | {b.datacenter for b in self.batteries}
                            | {d.datacenter for d in self.demand_charges}))

    def sources_at(self, datacenter: str) -> tuple[Source, ...]:
        return tuple(s for s in self.sources if s.datacenter == datacenter)

    def battery_at(self, datacenter: str) -> Battery | None:
        return next((b for b in self.batteries if b.datacenter == datacenter), None)

    def demand_at(self, datacenter: str) -> tuple[DemandCharge, ...]:
        return tuple(d for d in self.demand_charges if d.datacenter == datacenter)

    def export_price(self, datacenter: str) -> float | None:
        """The site's export price for surplus renewables (None: curtailed)."""
        return next((s.export_price_per_kwh for s in self.sources_at(datacenter)
                     if s.export_price_per_kwh is not None), None)

    def check(self, datacenters: Iterable[str], n_slots: int) -> None:
        """Raise ScenarioError unless every entry names a datacenter and every source has
        one value per slot."""
        known = set(datacenters)
        entries: list[Source | Battery | DemandCharge | GridEvent] = [
            *self.sources, *self.batteries, *self.demand_charges, *self.grid_events]
        for e in entries:
            label = e.label if isinstance(e, GridEvent) else e.name
            _check(e.datacenter in known, f"supply {label!r} names datacenter "
                   f"{e.datacenter!r}, which the scenario lacks; known: {sorted(known)}")
        for s in self.sources:
            _check(s.available_kw.size in (0, n_slots), f"supply {s.name!r} has "
                   f"{s.available_kw.size} output values for {n_slots} slots")

    def static(self) -> Supply:
        """What a policy may see in advance: every record, but no source's output (that
        comes with the forecast, :func:`forecast_output`)."""
        return replace(self, sources=tuple(replace(s, available_kw=np.zeros(0))
                                           for s in self.sources))

    def without(self, levers: Iterable[str]) -> Supply:
        """The supply as a policy that ignores ``levers`` (of :data:`LEVERS`) sees it:
        ``supply`` drops sources and batteries, ``demand-charges`` the demand charges."""
        drop = set(levers)
        unknown = sorted(drop - set(LEVERS))
        if unknown:
            raise ValueError(f"unknown lever(s) {', '.join(unknown)}; choose from "
                             f"{', '.join(LEVERS)}")
        return Supply(sources=() if "supply" in drop else self.sources,
                      batteries=() if "supply" in drop else self.batteries,
                      demand_charges=() if "demand-charges" in drop else self.demand_charges,
                      grid_events=self.grid_events)

    def available_kw(self, t0: int = 0, t1: int | None = None) -> NDArray[np.float64]:
        """True output of every source over slots ``[t0, t1)``, shape (slots, sources)."""
        if not self.sources:
            return np.zeros((0 if t1 is None else max(t1 - t0, 0), 0))
        return np.stack([s.available_kw[t0:t1] for s in self.sources], axis=1)


def forecast_output(supply: Supply, t: int, stop: int, mode: str, slot_s: int
                    ) -> NDArray[np.float64]:
    """What a policy at slot ``t`` believes each source delivers in slots ``t .. stop-1``,
    shape (stop - t, sources), kW.

    Row 0 is the truth (metered now). A modelled source (clear sky, a contract shape) is
    its own forecast, as a published tariff is. An imported series is forecast as grid
    signals are (:func:`workbench.cubes.forecast`): the truth with ``mode="perfect"``,
    otherwise seasonal naive, ``x[t + k - P ceil(k / P)]`` (``P`` slots a day), or the
    latest metered ``x[t]`` before a day of history exists.
    """
    truth = supply.available_kw(t, stop)
    if mode == "perfect" or truth.shape[0] <= 1:
        return truth
    period = int(round(86400 / slot_s))
    k = np.arange(1, stop - t)
    src = t + k - period * np.ceil(k / period).astype(np.int64)
    rows = np.where(src >= 0, src, t)
    out = truth.copy()
    for i, s in enumerate(supply.sources):
        if not s.modelled:
            out[1:, i] = s.available_kw[rows]
    return out


def ignore_set(value: str | Sequence[str] | None) -> frozenset[str]:
    """``"supply,demand-charges"`` (or a sequence, or None) as a checked set of levers.

    Raises ValueError naming the unknown lever and the known ones.
    """
    if value is None:
        return frozenset()
    items = [v.strip() for v in (value.split(",") if isinstance(value, str) else value)]
    items = [v for v in items if v]
    unknown = sorted(set(items) - set(LEVERS))
    if unknown:
        raise ValueError(f"unknown lever(s) to ignore {', '.join(repr(u) for u in unknown)}; "
                         f"choose from {', '.join(LEVERS)}")
    return frozenset(items)


def _upper(x: float | None) -> float:
    return math.inf if x is None else float(x)


def entry_to_dict(e: Source | Battery | DemandCharge | GridEvent) -> dict[str, object]:
    """One supply entry as plain JSON values (infinite tier limits as None), without a
    source's output (stored beside it)."""
    if isinstance(e, GridEvent):
        return {"type": "grid_event", **e.as_dict()}
    if isinstance(e, Source):
        return {"type": "source", "name": e.name, "datacenter": e.datacenter, "kind": e.kind,
                "capacity_kw": e.capacity_kw, "price_per_kwh": e.price_per_kwh,
                "carbon_g_per_kwh": e.carbon_g_per_kwh, "take_or_pay": e.take_or_pay,
                "export_price_per_kwh": e.export_price_per_kwh, "modelled": e.modelled,
                "origin": e.origin}
    if isinstance(e, Battery):
        return {"type": "battery", **{f: getattr(e, f) for f in (
            "name", "datacenter", "energy_kwh", "power_kw", "round_trip_efficiency",
            "soc_initial", "soc_min", "soc_max")}}
    return {"type": "demand", "name": e.name, "datacenter": e.datacenter,
            "capacity_kva": e.capacity_kva, "price_per_kva_month": e.price_per_kva_month,
            "source": e.source,
            "structures": [{"tiers": [[[None if math.isinf(u) else u, p] for u, p in tiers]
                                      for tiers in st.tiers],
                            "weekday": [list(r) for r in st.weekday],
                            "weekend": [list(r) for r in st.weekend]} for st in e.structures]}


def entry_from_dict(d: dict[str, object], output_kw: Sequence[float] | None = None
                    ) -> Source | Battery | DemandCharge | GridEvent:
    """The inverse of :func:`entry_to_dict` (a source with its output)."""
    kind = d["type"]
    fields = {k: v for k, v in d.items() if k != "type"}
    if kind == "grid_event":
        return GridEvent.from_dict(fields)
    if kind == "source":
        return Source(available_kw=np.asarray(output_kw or [], dtype=float), **fields)  # type: ignore[arg-type]
    if kind == "battery":
        return Battery(**fields)  # type: ignore[arg-type]
    structures = tuple(DemandStructure(
        tiers=tuple(tuple((_upper(u), float(p)) for u, p in tiers) for tiers in st["tiers"]),
        weekday=tuple(tuple(int(x) for x in r) for r in st["weekday"]),
        weekend=tuple(tuple(int(x) for x in r) for r in st["weekend"]))
        for st in fields.pop("structures"))  # type: ignore[attr-defined]
    return DemandCharge(structures=structures, **fields)  # type: ignore[arg-type]


NO_SUPPLY = Supply()
"""The empty supply: every datacenter on the grid alone."""


__all__ = ["LEVERS", "NO_SUPPLY", "SOURCE_KINDS", "SUPPLY_KINDS", "Battery", "DemandCharge",
           "DemandStructure", "Source", "Supply", "entry_from_dict", "entry_to_dict",
           "forecast_output", "ignore_set"]

