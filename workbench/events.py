"""Grid events: a site asked to hold its grid import under a limit for some hours.

A grid event (a demand-response call, a peak-shaving order) names a datacenter, when it
starts, how many hours it lasts and the limit on the site's grid import at its meter
(:mod:`workbench.meter`): ``limit_kw``, or ``cut_pct``, a cut of the import the same plan
would draw without the event (resolved by the runner against that plan,
:func:`resolve_cuts`). The operator learns of it ``notice_hours`` before it starts: no
policy sees it earlier (:func:`import_limits_kw` with ``known_at``). A payment per kWh shed
and a penalty per kWh over the limit are optional.

An event is a cap on the meter for its slots: the planners that take caps keep it as they
keep a power cap (their window and slot problems get the limit from the slot they learn of
it on); the simulator's truth holds it as the site's controller would (a training job whose
draw would break it pauses, :meth:`workbench.sim.truth.Truth.apply`), so a policy blind to
events keeps it by pausing, at the cost of its deadlines. Events live in :class:`workbench.
caps.Caps` (one record of a run's caps), come from the scenario's ``[[grid_events]]``
(:attr:`workbench.supply.Supply.grid_events`) and from ``plan --grid-event``, and are
reported per event by :func:`report` (met, the largest import, kWh shed against the plan
without the event, its extra cost, payment and penalty).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from workbench.clock import as_utc, slot_index


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class Horizon(Protocol):
    """What an event needs of the scenario (a :class:`workbench.model.Scenario` or a view
    of it): its clock and its sites' names. A protocol, so that the supply record can hold
    events without this module importing the scenario's."""

    @property
    def start(self) -> datetime: ...
    @property
    def slot_s(self) -> float: ...
    @property
    def n_slots(self) -> int: ...
    @property
    def datacenters(self) -> Sequence[_Named]: ...

NOTICE_H_DEFAULT = 2.0
"""Hours of notice when none is given: the field trials' benchmark (a peak event announced
two hours ahead)."""

MET_TOLERANCE = 1e-6
"""Relative excess of a site-slot's import over the limit still counted as met (a
floating-point residue, not a kW drawn)."""


def _number(value: Any, what: str, *, low: float = 0.0, open_low: bool = False,
            high: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(
            value) or value < low or (open_low and value <= low) or value > high:
        bound = f"> {low:g}" if open_low else f">= {low:g}"
        top = "" if math.isinf(high) else f" and <= {high:g}"
        raise ValueError(f"{what} must be a finite number {bound}{top}, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class GridEvent:
    """One grid event at one datacenter.

    Attributes
    ----------
    datacenter : str
    start : datetime or float
        When it starts (UTC), or hours after the horizon's start (resolved by
        :func:`check_events`).
    hours : float
        How long it lasts (> 0).
    limit_kw : float, optional
        The most the site may import at its meter during the event, kW.
    cut_pct : float, optional
        Or the cut, % in (0, 100], of what the same plan imports without the event (its
        peak in the event's slots); exclusive with ``limit_kw``.
    notice_hours : float
        Hours before ``start`` that the operator learns of it (>= 0).
    payment_per_kwh, penalty_per_kwh : float
        Paid per kWh shed (against the plan without the event) and charged per kWh
        imported above the limit, scenario currency.
    name : str
        A label (default: ``<datacenter>@<start>``).
    """

    datacenter: str
    start: datetime | float
    hours: float
    limit_kw: float | None = None
    cut_pct: float | None = None
    notice_hours: float = NOTICE_H_DEFAULT
    payment_per_kwh: float = 0.0
    penalty_per_kwh: float = 0.0
    name: str = ""

    def __post_init__(self) -> None:
        where = f"grid event at {self.datacenter!r}"
        if not isinstance(self.datacenter, str) or not self.datacenter:
            raise ValueError("a grid event needs a datacenter")
        object.__setattr__(self, "hours", _number(self.hours, f"{where}: hours",
                                                  open_low=True))
        if (self.limit_kw is None) == (self.cut_pct is None):
            raise ValueError(f"{where}: give limit_kw (kW at the meter) or cut_pct (% of the "
                             "planned import), one of them")
        if self.limit_kw is not None:
            object.__setattr__(self, "limit_kw", _number(self.limit_kw, f"{where}: limit_kw"))
        if self.cut_pct is not None:
            object.__setattr__(self, "cut_pct", _number(self.cut_pct, f"{where}: cut_pct",
                                                        open_low=True, high=100.0))
        for f in ("notice_hours", "payment_per_kwh", "penalty_per_kwh"):
            object.__setattr__(self, f, _number(getattr(self, f), f"{where}: {f}"))
        if isinstance(self.start, datetime):
            object.__setattr__(self, "start", as_utc(self.start))
        else:
            object.__setattr__(self, "start", _number(self.start, f"{where}: start (hours "
                                                      "after the horizon's start)"))

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        at = (self.start.strftime("%Y-%m-%dT%H:%M") if isinstance(self.start, datetime)
              else f"+{self.start:g}h")
        return f"{self.datacenter}@{at}"

    @property
    def limit_text(self) -> str:
        return (f"{self.limit_kw:g} kW" if self.limit_kw is not None
                else f"-{self.cut_pct:g}% of the planned import")

    def starts_at(self, sc: Horizon) -> datetime:
        """Its start as a UTC time."""
        if isinstance(self.start, datetime):
            return self.start
        return sc.start + timedelta(hours=float(self.start))

    def slots(self, sc: Horizon) -> tuple[int, int]:
        """The slots it covers, ``[a, b)`` (every slot that overlaps it, within the
        horizon)."""
        s = self.starts_at(sc)
        a = slot_index(sc.start, sc.slot_s, s)
        b = slot_index(sc.start, sc.slot_s, s + timedelta(hours=self.hours), after=True)
        return max(a, 0), min(max(b, a + 1), sc.n_slots)

    def known_from(self, sc: Horizon) -> int:
        """The first slot at whose start a policy knows of it (the notice rounded up to a
        slot boundary; 0 when announced before the horizon)."""
        notice = self.starts_at(sc) - timedelta(hours=self.notice_hours)
        return max(slot_index(sc.start, sc.slot_s, notice, after=True), 0)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON values (what a run stores with its caps)."""
        start = self.start.isoformat() if isinstance(self.start, datetime) else self.start
        return {"datacenter": self.datacenter, "start": start, "hours": self.hours,
                "limit_kw": self.limit_kw, "cut_pct": self.cut_pct,
                "notice_hours": self.notice_hours, "payment_per_kwh": self.payment_per_kwh,
                "penalty_per_kwh": self.penalty_per_kwh, "name": self.name}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GridEvent:
        """The inverse of :meth:`as_dict` (and a TOML ``[[grid_events]]`` table): ``start``
        an ISO time (UTC unless it names its offset) or hours after the horizon's start.

        Raises ValueError naming an unknown key or a bad value.
        """
        known = {"datacenter", "start", "hours", "limit_kw", "cut_pct", "notice_hours",
                 "payment_per_kwh", "penalty_per_kwh", "name"}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"grid event: unknown key(s) {', '.join(unknown)}; known: "
                             f"{', '.join(sorted(known))}")
        for key in ("datacenter", "start", "hours"):
            if key not in d:
                raise ValueError(f"grid event: missing {key!r} (give datacenter, start, hours "
                                 "and limit_kw or cut_pct)")
        fields = dict(d)
        fields["start"] = _start(fields["start"])
        fields.setdefault("notice_hours", NOTICE_H_DEFAULT)
        if fields.get("name") is None:
            fields["name"] = ""
        return cls(**fields)


def _start(value: Any) -> datetime | float:
    if isinstance(value, datetime):
        return as_utc(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip()
    try:
        return float(text.removeprefix("+").removesuffix("h"))
    except ValueError:
        pass
    try:
        return as_utc(pd.Timestamp(text).to_pydatetime())
    except (ValueError, TypeError):
        raise ValueError(f"grid event start {value!r}: give an ISO time (2024-07-02T14:00, "
                         "UTC unless it names its offset) or hours after the horizon's "
                         "start (e.g. 30)") from None


def parse_event(text: str) -> GridEvent:
    """``"DATACENTER,START,HOURS,LIMIT[,NOTICE_H]"`` (``plan --grid-event``): ``LIMIT`` in kW
    at the meter or a cut of the planned import (``25%``); ``START`` an ISO time or hours
    after the horizon's start.

    Raises ValueError saying which part is wrong and the expected form.
    """
    form = ("give DATACENTER,START,HOURS,LIMIT_KW[,NOTICE_H], e.g. guangzhou,"
            "2024-07-02T14:00,3,60,2 or suzhou,30,3,25%")
    parts = [p.strip() for p in str(text).split(",")]
    if len(parts) not in (4, 5) or not all(parts):
        raise ValueError(f"grid event {text!r}: {form}")
    dc, start, hours, limit = parts[:4]
    try:
        h = float(hours)
    except ValueError:
        raise ValueError(f"grid event {text!r}: HOURS {hours!r} is not a number; {form}"
                         ) from None
    try:
        lim: dict[str, float] = ({"cut_pct": float(limit[:-1])} if limit.endswith("%")
                                 else {"limit_kw": float(limit)})
    except ValueError:
        raise ValueError(f"grid event {text!r}: LIMIT {limit!r} is neither kW nor a cut "
                         f"like 25%; {form}") from None
    notice = NOTICE_H_DEFAULT
    if len(parts) == 5:
        try:
            notice = float(parts[4])
        except ValueError:
            raise ValueError(f"grid event {text!r}: NOTICE_H {parts[4]!r} is not a number; "
                             f"{form}") from None
    return GridEvent(datacenter=dc, start=_start(start), hours=h, notice_hours=notice,
                     limit_kw=lim.get("limit_kw"), cut_pct=lim.get("cut_pct"))


def check_events(sc: Horizon, events: Sequence[GridEvent],
                 floor_kw: Mapping[str, NDArray[np.float64]] | None = None,
                 storage: Mapping[str, Callable[[float, float], float]] | None = None
                 ) -> tuple[GridEvent, ...]:
    """The events with their start resolved to a UTC time, checked against the scenario:
    a known datacenter, a start inside the horizon, and a limit at least what the site
    draws whatever runs in the event's slots (``floor_kw``: per datacenter and slot, kW,
    its idle load plus the inference services that may run only there,
    :func:`workbench.sim.results.site_floors_kw`) less what its battery could give through
    the event (``storage``: per datacenter, the kW given an event's hours and its start's
    hours after the run's start, :meth:`workbench.supply.Battery.deliverable_kw`).

    Raises
    ------
    ValueError
        Naming the event, what is wrong with the numbers and what to give instead.
    """
    names = [d.name for d in sc.datacenters]
    end = sc.start + timedelta(seconds=sc.slot_s * sc.n_slots)
    out = []
    for ev in events:
        if ev.datacenter not in names:
            raise ValueError(f"grid event {ev.label}: unknown datacenter {ev.datacenter!r}; "
                             f"the scenario has {', '.join(names)}")
        s = ev.starts_at(sc)
        if not sc.start <= s < end:
            raise ValueError(f"grid event {ev.label}: starts {s:%Y-%m-%d %H:%M} UTC, outside "
                             f"the horizon {sc.start:%Y-%m-%d %H:%M} - {end:%Y-%m-%d %H:%M} "
                             "UTC; give a start inside it")
        ev = replace(ev, start=s)
        if ev.limit_kw is not None and floor_kw is not None:
            a, b = ev.slots(sc)
            floor = float(np.max(floor_kw[ev.datacenter][a:b]))
            give = (storage or {}).get(ev.datacenter)
            lead_h = (s - sc.start) / timedelta(hours=1)
            bat = 0.0 if give is None else give(ev.hours, lead_h)
            if ev.limit_kw < floor - bat - 1e-9:
                by = (f", less the {bat:.2f} kW its battery can give for {ev.hours:g} h "
                      "from what it can hold by then") if bat > 0 else ""
                raise ValueError(
                    f"grid event {ev.label}: limit {ev.limit_kw:g} kW is below the "
                    f"{floor:.2f} kW {ev.datacenter} draws whatever runs then (its idle load "
                    f"plus the inference services that may run only there{by}); give at "
                    f"least {floor - bat:.2f} kW")
        out.append(ev)
    return tuple(out)


def import_limits_kw(sc: Horizon, events: Sequence[GridEvent],
                     static_kw: NDArray[np.float64], t0: int = 0, t1: int | None = None,
                     known_at: int | None = None) -> NDArray[np.float64]:
    """Each datacenter's import limit (kW) in slots ``[t0, t1)``, shape ``(slots, D)``: its
    power cap (``static_kw``, ``inf`` where none) and, lower in an event's slots, the
    event's limit; with ``known_at`` only the events a policy knows of at that slot
    (:meth:`GridEvent.known_from`). Events must be resolved (:func:`resolve_cuts`)."""
    stop = sc.n_slots if t1 is None else t1
    out = np.tile(np.asarray(static_kw, dtype=float), (max(stop - t0, 0), 1))
    names = [d.name for d in sc.datacenters]
    for ev in events:
        if ev.limit_kw is None:
            raise ValueError(f"grid event {ev.label}: its cut is not resolved to kW")
        if known_at is not None and ev.known_from(sc) > known_at:
            continue
        a, b = ev.slots(sc)
        a, b = max(a, t0), min(b, stop)
        if b > a:
            j = names.index(ev.datacenter)
            out[a - t0:b - t0, j] = np.minimum(out[a - t0:b - t0, j], ev.limit_kw)
    return out


def edges(sc: Horizon, events: Sequence[GridEvent], t: int, n: int,
          known_at: int | None = None) -> list[int]:
    """The events' first and end slots within ``(0, n)`` slots from ``t``: where a window's
    blocks must start for each block to have one limit."""
    out = set()
    for ev in events:
        if known_at is not None and ev.known_from(sc) > known_at:
            continue
        for s in ev.slots(sc):
            if 0 < s - t < n:
                out.add(s - t)
    return sorted(out)


def split_blocks(starts: NDArray[np.int64], n: int, cuts: Sequence[int]
                 ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Block starts with ``cuts`` added (a block that straddles a cut becomes two), and
    their lengths over ``n`` slots."""
    st = np.unique(np.concatenate([np.asarray(starts, dtype=np.int64),
                                   np.asarray(list(cuts), dtype=np.int64)]))
    return st, np.diff(np.append(st, n)).astype(np.int64)


def resolve_cuts(sc: Horizon, events: Sequence[GridEvent],
                 import_kw: NDArray[np.float64]) -> tuple[GridEvent, ...]:
    """The events with each ``cut_pct`` turned into ``limit_kw``: that share off the peak of
    ``import_kw`` (slots, D; the same plan without the events) in the event's slots."""
    names = [d.name for d in sc.datacenters]
    out = []
    for ev in events:
        if ev.cut_pct is not None:
            a, b = ev.slots(sc)
            peak = float(np.max(import_kw[a:b, names.index(ev.datacenter)]))
            ev = replace(ev, limit_kw=peak * (1.0 - ev.cut_pct / 100.0), cut_pct=None,
                         name=ev.name or f"{ev.label} (-{ev.cut_pct:g}%)")
        out.append(ev)
    return tuple(out)


def report(sc: Horizon, events: Sequence[GridEvent],
           import_kw: NDArray[np.float64], without_kw: NDArray[np.float64] | None = None
           ) -> list[dict[str, Any]]:
    """Per event: ``met`` (every slot's import at most the limit), ``max_import_kw``,
    ``limit_kw``, ``over_kwh`` (above the limit) and its ``penalty``, and against the same
    plan without the events (``without_kw``; None: not known) ``planned_import_kw`` (its
    peak in the event's slots), ``shed_kwh`` (what the run imported less, never below 0)
    and the ``payment`` for it. ``import_kw``: the run's metered grid import (slots, D)."""
    names = [d.name for d in sc.datacenters]
    slot_h = sc.slot_s / 3600.0
    out = []
    for ev in events:
        assert ev.limit_kw is not None
        a, b = ev.slots(sc)
        j = names.index(ev.datacenter)
        got = import_kw[a:b, j]
        over = float(np.maximum(got - ev.limit_kw, 0.0).sum() * slot_h)
        met = bool(np.all(got <= ev.limit_kw * (1 + MET_TOLERANCE) + 1e-9))
        row: dict[str, Any] = {
            "name": ev.label, "datacenter": ev.datacenter,
            "start": ev.starts_at(sc).isoformat(), "hours": ev.hours,
            "notice_hours": ev.notice_hours, "limit_kw": ev.limit_kw, "met": met,
            "max_import_kw": float(got.max()) if got.size else 0.0,
            "over_kwh": over if not met else 0.0,
            "penalty": (over if not met else 0.0) * ev.penalty_per_kwh,
            "planned_import_kw": None, "shed_kwh": None, "payment": None}
        if without_kw is not None:
            ref = without_kw[a:b, j]
            shed = max(float((ref - got).sum() * slot_h), 0.0)
            row.update(planned_import_kw=float(ref.max()) if ref.size else 0.0,
                       shed_kwh=shed, payment=shed * ev.payment_per_kwh)
        out.append(row)
    return out


def settle(metrics: dict[str, Any], rows: Sequence[Mapping[str, Any]],
           datacenters: Sequence[str]) -> None:
    """Add the events' payments and penalties to a run's bill (in place): the parts
    ``bill_event_payment`` (a credit) and ``bill_event_penalty``, per datacenter and in
    total, with ``bill_total``, the plan's part ``cost`` and its ``equal_work_cost`` moved
    by them."""
    pay = dict.fromkeys(datacenters, 0.0)
    pen = dict.fromkeys(datacenters, 0.0)
    for r in rows:
        pay[r["datacenter"]] += float(r.get("payment") or 0.0)
        pen[r["datacenter"]] += float(r.get("penalty") or 0.0)
    for d in datacenters:
        metrics[f"bill_event_payment:{d}"] = pay[d]
        metrics[f"bill_event_penalty:{d}"] = pen[d]
        if f"bill_total:{d}" in metrics:
            metrics[f"bill_total:{d}"] += pen[d] - pay[d]
    net = sum(pen.values()) - sum(pay.values())
    metrics["bill_event_payment"] = sum(pay.values())
    metrics["bill_event_penalty"] = sum(pen.values())
    for key in ("bill_total", "cost", "equal_work_cost"):
        if metrics.get(key) is not None:
            metrics[key] = float(metrics[key]) + net


def event_line(row: Mapping[str, Any], currency: str = "") -> str:
    """One event's report row (:func:`report`, settled by
    :func:`workbench.runner.settle_events`) in one line, as every face prints it: the
    verdict, the largest import against the limit and, where known, what was shed against
    the run without it, its extra cost, payment, penalty and the new deadline misses."""
    cur = f" {currency}" if currency else ""
    verdict = "kept" if row["met"] else "MISSED"
    text = (f"grid event {row['name']} ({row['hours']:g} h, {row['notice_hours']:g} h "
            f"notice): {verdict}, import up to {row['max_import_kw']:,.1f} kW against its "
            f"{row['limit_kw']:,.1f} kW limit")
    if row.get("shed_kwh") is not None:
        text += (f"; planned {row['planned_import_kw']:,.1f} kW without it, "
                 f"{row['shed_kwh']:,.1f} kWh shed")
    if row.get("extra_cost") is not None:
        text += f", extra cost {row['extra_cost']:,.2f}{cur}"
    if row.get("payment"):
        text += f", paid {row['payment']:,.2f}{cur}"
    if row.get("penalty"):
        text += f", penalty {row['penalty']:,.2f}{cur}"
    if row.get("new_misses"):
        text += f"; {len(row['new_misses'])} new deadline miss(es)"
    elif row.get("new_misses") is not None:
        text += "; no new deadline miss"
    return text


__all__ = ["MET_TOLERANCE", "NOTICE_H_DEFAULT", "GridEvent", "check_events", "edges",
           "event_line", "import_limits_kw", "parse_event", "report", "resolve_cuts",
           "settle", "split_blocks"]
