"""OpenEI Utility Rate Database (URDB) tariffs expanded into time-of-use price series.

A URDB tariff gives ``energyweekdayschedule`` and ``energyweekendschedule`` (12 months x 24
local hours, each entry a period index) and ``energyratestructure`` (per period, a list of
tiers ``{"rate", "adj", "max", "unit"}`` in $/kWh). The price of a local hour is
``rate + adj`` of the period's tier ``tier`` (the first by default: consumption tiers need
monthly totals the planner does not track). Saturdays and Sundays use the weekend schedule;
holidays are not modelled. Fixed charges are ignored.

Demand charges (:func:`read_urdb_demand`) come from ``demandratestructure`` with its
``demandweekdayschedule``/``demandweekendschedule`` (12 x 24 periods, time-of-use demand)
and from ``flatdemandstructure`` with ``flatdemandmonths`` (a period per month): per period a
list of tiers ``{"rate", "adj", "max", "unit": "kW"}`` in $/kW of the month's peak.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from workbench.io import _table
from workbench.io.errors import InputError
from workbench.supply import DemandStructure


def _tariff(doc: Any, path: str | Path, item: int) -> dict[str, Any]:
    if isinstance(doc, dict) and "items" in doc:
        items = doc["items"]
        if not isinstance(items, list) or not items:
            raise InputError(path, "'items' holds no tariff", "download the tariff again")
        if not 0 <= item < len(items):
            raise InputError(path, f"tariff index {item} out of range (0..{len(items) - 1})",
                             "pass --item with a valid index")
        doc = items[item]
    if not isinstance(doc, dict):
        raise InputError(path, "not a URDB tariff object", "pass the URDB API response")
    return doc


def _schedule(t: dict[str, Any], key: str, n_periods: int, path: str | Path,
              structure: str = "energyratestructure") -> np.ndarray:
    """The 12 x 24 table ``key`` of period numbers of ``structure`` (``n_periods``)."""
    sched = t.get(key)
    try:
        arr = np.asarray(sched, dtype=float)
    except (TypeError, ValueError):
        arr = np.empty(0)
    if arr.shape != (12, 24):
        raise InputError(path, f"{key} is not a 12 x 24 table of period numbers",
                         "pass a URDB tariff with time-of-use schedules", column=key)
    bad = (arr != np.round(arr)) | (arr < 0) | (arr >= n_periods)
    if bad.any():
        m, h = (int(x) for x in np.argwhere(bad)[0])
        raise InputError(path, f"month {m + 1}, hour {h} names period {arr[m, h]:g}, but "
                         f"{structure} has {n_periods} periods",
                         "correct the schedule", column=key)
    return arr.astype(int)


def _rates(t: dict[str, Any], tier: int, adj: bool, path: str | Path) -> np.ndarray:
    struct = t.get("energyratestructure")
    if not isinstance(struct, list) or not struct:
        raise InputError(path, "no energyratestructure", "pass a tariff with energy rates",
                         column="energyratestructure")
    most = max((len(x) for x in struct if isinstance(x, list)), default=0)
    if tier >= most:
        raise InputError(path, f"--tier {tier} does not exist: the tariff's periods have at "
                         f"most {most} tier(s)", f"pass --tier 0..{max(most - 1, 0)}",
                         column="energyratestructure")
    out = []
    for p, tiers in enumerate(struct):
        where = f"energyratestructure[{p}]"
        if not isinstance(tiers, list) or not tiers:
            raise InputError(path, "a period has no tiers", "correct the tariff", column=where)
        # A period with fewer tiers charges its last tier for any larger consumption.
        entry = tiers[min(tier, len(tiers) - 1)]
        if not isinstance(entry, dict) or "rate" not in entry:
            raise InputError(path, "a tier has no 'rate'", "correct the tariff", column=where)
        unit = str(entry.get("unit", "kWh"))
        if unit != "kWh":
            raise InputError(path, f"rate unit {unit!r} is not per kWh",
                             "only energy rates in $/kWh can become a price series",
                             column=where)
        try:
            value = float(entry["rate"]) + (float(entry.get("adj", 0.0) or 0.0) if adj else 0.0)
        except (TypeError, ValueError):
            raise InputError(path, f"rate {entry['rate']!r} is not a number",
                             "correct the tariff", column=where) from None
        if not np.isfinite(value):
            raise InputError(path, "rate is not finite", "correct the tariff", column=where)
        out.append(value)
    return np.asarray(out)


def read_urdb_json(
    path: str | Path,
    region: str,
    start: str | None = None,
    end: str | None = None,
    timezone: str | None = None,
    tier: int = 0,
    item: int = 0,
    include_adj: bool = True,
    drop_missing: bool = False,  # noqa: ARG001 - a tariff has no holes
) -> pd.DataFrame:
    """Hourly USD/kWh prices over ``[start, end)`` (UTC hours) from a URDB tariff.

    Parameters
    ----------
    start, end : str
        ISO dates or times of the span (UTC unless they carry an offset).
    timezone : str
        IANA zone of the tariff's local hours (required: URDB schedules are local time).
    tier : int
        Consumption tier to price at (0: the first).
    item : int
        Which tariff of an ``{"items": [...]}`` response.
    include_adj : bool
        Add the fuel/rider adjustment ``adj`` to ``rate``.
    """
    if start is None or end is None:
        raise InputError(path, "a tariff has no dates of its own",
                         "pass --start and --end (e.g. --start 2023-07-01 --end 2023-07-08)")
    if timezone is None:
        raise InputError(path, "URDB schedules are in local time",
                         "pass --timezone (e.g. America/New_York)")
    if tier < 0:
        raise InputError(path, f"tier {tier} is negative", "pass --tier 0 for the first tier")
    tz = _table.zone(timezone, path)
    span = _table.times_from_strings(pd.Series([str(start), str(end)]), None, str(path),
                                     "--start/--end", "UTC")
    if span[1] <= span[0]:
        raise InputError(path, f"--end {end} is not after --start {start}", "swap them")
    # Compared as a shifted start: the difference of two far-apart times overflows.
    if span[1] > span[0] + pd.Timedelta(days=3660):
        raise InputError(path, "the span is longer than ten years", "import a shorter span")
    t = _tariff(_table.read_json(path), path, item)
    rates = _rates(t, tier, include_adj, path)
    weekday = _schedule(t, "energyweekdayschedule", len(rates), path)
    weekend = _schedule(t, "energyweekendschedule", len(rates), path)
    times = pd.date_range(span[0].ceil("h"), span[1], freq="h", inclusive="left").as_unit("ns")
    if times.empty:
        raise InputError(path, "the span holds no whole hour", "widen --start/--end")
    local = times.tz_localize("UTC").tz_convert(tz)
    month = np.asarray(local.month) - 1
    hour = np.asarray(local.hour)
    is_weekend = np.asarray(local.day_of_week) >= 5
    period = np.where(is_weekend, weekend[month, hour], weekday[month, hour])
    name = t.get("name") or Path(path).stem
    return pd.DataFrame({
        "time_utc": times, "region": region, "price_per_kwh": rates[period], "currency": "USD",
        "source": f"urdb-json {name}: {Path(path).name}",
    })


def _demand_tiers(struct: Any, key: str, path: str | Path
                  ) -> tuple[tuple[tuple[float, float], ...], ...]:
    """Per period, ``((upper_kw, $/kW), ...)`` of a URDB demand structure (``max`` is the
    tier's upper kW; the last tier has none)."""
    if not isinstance(struct, list) or not struct:
        raise InputError(path, f"{key} holds no periods", "pass a tariff with demand rates",
                         column=key)
    out = []
    for p, tiers in enumerate(struct):
        where = f"{key}[{p}]"
        if not isinstance(tiers, list) or not tiers:
            raise InputError(path, "a demand period has no tiers", "correct the tariff",
                             column=where)
        rows = []
        for i, tier in enumerate(tiers):
            if not isinstance(tier, dict) or "rate" not in tier:
                raise InputError(path, "a demand tier has no 'rate'", "correct the tariff",
                                 column=where)
            unit = str(tier.get("unit", "kW"))
            if unit != "kW":
                raise InputError(path, f"demand rate unit {unit!r} is not per kW",
                                 "only demand charges in $/kW are read", column=where)
            try:
                rate = float(tier["rate"]) + float(tier.get("adj", 0.0) or 0.0)
                upper = float(tier["max"]) if i < len(tiers) - 1 and "max" in tier \
                    else np.inf
            except (TypeError, ValueError):
                raise InputError(path, f"demand tier {tier!r} holds a non-number",
                                 "correct the tariff", column=where) from None
            if not (np.isfinite(rate) and rate >= 0):
                raise InputError(path, f"demand rate {rate!r} is not a number >= 0",
                                 "correct the tariff", column=where)
            rows.append((upper, rate))
        out.append(tuple(rows))
    return tuple(out)


def read_urdb_demand(path: str | Path, item: int = 0) -> tuple[tuple[DemandStructure, ...], str]:
    """The demand structures of a URDB tariff (time-of-use and flat) and its name.

    Raises
    ------
    InputError
        For a tariff without a demand structure, or one that is malformed (the key named).
    """
    t = _tariff(_table.read_json(path), path, item)
    out: list[DemandStructure] = []
    if t.get("demandratestructure") is not None:
        tiers = _demand_tiers(t["demandratestructure"], "demandratestructure", path)
        wd = _schedule(t, "demandweekdayschedule", len(tiers), path, "demandratestructure")
        we = _schedule(t, "demandweekendschedule", len(tiers), path, "demandratestructure")
        out.append(DemandStructure(tiers=tiers, weekday=tuple(map(tuple, wd.tolist())),
                                   weekend=tuple(map(tuple, we.tolist()))))
    if t.get("flatdemandstructure") is not None:
        tiers = _demand_tiers(t["flatdemandstructure"], "flatdemandstructure", path)
        try:
            months = np.asarray(t.get("flatdemandmonths", [0] * 12), dtype=float)
        except (TypeError, ValueError):
            months = np.empty(0)
        if months.shape != (12,) or np.any((months < 0) | (months >= len(tiers))
                                           | (months != np.round(months))):
            raise InputError(path, "flatdemandmonths is not 12 period numbers of "
                             "flatdemandstructure", "correct the tariff",
                             column="flatdemandmonths")
        sched = tuple(tuple(int(months[m]) for _ in range(24)) for m in range(12))
        out.append(DemandStructure(tiers=tiers, weekday=sched, weekend=sched))
    if not out:
        raise InputError(path, "the tariff has no demand structure (demandratestructure or "
                         "flatdemandstructure)", "pass a tariff with demand charges, or give "
                         "price_per_kw_month")
    return tuple(out), str(t.get("name") or Path(path).stem)
