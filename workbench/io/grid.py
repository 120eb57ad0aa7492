"""Importers of grid signals: carbon intensity and electricity price, normalised to the
store's long format (UTC, ``<currency>/kWh``, ``gCO2/kWh``).

Every reader returns a frame with the columns ``time_utc`` (naive UTC), ``region``,
``price_per_kwh`` and ``currency`` (price files) or ``carbon_g_per_kwh`` (carbon files), and
``source``; rows are sorted by time and checked for duplicate or backwards timestamps,
missing values and unknown units. :func:`import_grid` writes one file into the store in one
transaction. The formats and their assumptions are documented in ``docs/importers.md``.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from workbench.io import _fast, _table, bounds
from workbench.io.errors import InputError, listed
from workbench.io.urdb import read_urdb_json
from workbench.units import UnitError, carbon_factor, price_factor

log = logging.getLogger(__name__)

GridReader = Callable[..., pd.DataFrame]

ENERGY_KINDS: dict[str, tuple[str, dict[str, float], bounds.Bound]] = {
    "generation": ("generation_kw", {"kW": 1.0, "MW": 1000.0, "W": 1e-3},
                   bounds.GENERATION),
    "irradiance": ("irradiance_w_m2", {"W/m2": 1.0, "kW/m2": 1000.0}, bounds.IRRADIANCE),
    "wind-speed": ("wind_speed_m_s", {"m/s": 1.0, "km/h": 1.0 / 3.6, "kn": 0.514444},
                   bounds.WIND_SPEED),
}
"""Series a site's supply reads (``[[supply]] series``), beside prices and carbon: the
``--kind`` of the generic ``csv`` format -> (stored kind, units and their factor to the
stored unit, plausible range). Stored in kW, W/m2 and m/s (the store's ``energy_series``)."""


def _frame(
    times: pd.DatetimeIndex, values: np.ndarray, region: str, kind: str, source: str,
    currency: str | None = None,
) -> pd.DataFrame:
    """The reader's frame. ``region``, ``currency`` and ``source`` are one value per file:
    categorical columns of one category (a byte a row, where strings cost 8 bytes a row:
    48 MB for a 2 M-row file)."""
    n = len(times)

    def constant(text: str | None) -> pd.Categorical:
        if text is None:
            return pd.Categorical.from_codes(np.full(n, -1, np.int8), pd.Index([], dtype=str))
        return pd.Categorical.from_codes(np.zeros(n, np.int8), [text])

    data: dict[str, Any] = {"time_utc": times, "region": constant(region)}
    if kind == "price":
        data.update(price_per_kwh=values, currency=constant(currency))
    elif kind in ENERGY_KINDS:
        data.update(kind=constant(ENERGY_KINDS[kind][0]), value=values)
    else:
        data.update(carbon_g_per_kwh=values)
    data["source"] = constant(source)
    return pd.DataFrame(data, copy=False)


def _series(
    table: _table.Table, time_col: str, value_col: str, factor: float, *, region: str,
    kind: str, source: str, currency: str | None = None, timezone: str | None = None,
    time_format: str | None = None, drop_missing: bool = False, allow_negative: bool = True,
    delimiter: str = ",",
) -> pd.DataFrame:
    """Times and values of one column, converted, bounded and checked for order.

    A large file comes as its head (``table.complete`` false): the streaming reader
    (:mod:`workbench.io._fast`) parses it, or, at the first doubt, the exact reader does.

    With ``drop_missing`` the rows without a value are dropped *before* the times are read,
    so blank rows that a local-time export lists in the spring daylight-saving gap go away
    with their (non-existent) times.
    """
    if kind == "price":
        bound = bounds.price_bound(currency or "USD")
    elif kind in ENERGY_KINDS:
        bound = ENERGY_KINDS[kind][2]
    else:
        bound = bounds.CARBON_MARGINAL if allow_negative else bounds.CARBON_AVERAGE
    if not table.complete:
        fast = _fast.fast_series(table, time_col, value_col, factor, bound, timezone,
                                 time_format, drop_missing, delimiter)
        if fast is not None:
            return _frame(fast[0], fast[1], region, kind, source, currency)
        table = _table.read_table(table.path, delimiter=delimiter)
    values, keep = _table.parse_numbers(table, value_col, drop_missing)
    if not keep.all():
        log.warning("%s: dropped %d row(s) with a missing %s", table.path, int((~keep).sum()),
                    value_col)
        table = table.take(keep)
        values = values[keep]
    times = _table.parse_times(table, time_col, timezone, time_format)
    _table.check_order(times, table.lines, table.path, time_col)
    with np.errstate(over="ignore"):
        stored = values * factor
    bounds.check(stored, bound, table.path, value_col, lambda i: int(table.lines[i]),
                 shown=values if factor != 1.0 else None)
    return _frame(times, stored, region, kind, source, currency)


def check_frame(frame: pd.DataFrame, path: str | Path, marginal: bool = False) -> None:
    """Bound every value of a grid frame (any reader's output) before it is written.

    Prices: :func:`~workbench.io.bounds.price_bound` of the frame's currency; carbon:
    average intensity in 0..2,000 gCO2/kWh (``marginal``: -2,000..2,000).
    """
    times = pd.DatetimeIndex(frame["time_utc"])

    def label(i: int) -> str:
        return f"{times[i]} UTC: "

    if "price_per_kwh" in frame:
        cur = str(frame["currency"].iloc[0]) if len(frame) else "USD"
        bounds.check(frame["price_per_kwh"].to_numpy(float), bounds.price_bound(cur), str(path),
                     "price", label=label)
    if "carbon_g_per_kwh" in frame:
        bound = bounds.CARBON_MARGINAL if marginal else bounds.CARBON_AVERAGE
        bounds.check(frame["carbon_g_per_kwh"].to_numpy(float), bound, str(path), "carbon",
                     label=label)


def _head_or_table(path: str | Path, delimiter: str = ",") -> _table.Table:
    """A large file's head (streamed later by :func:`_series`), or a small file whole."""
    head = _fast.read_head(path, delimiter)
    return head if head is not None else _table.read_table(path, delimiter=delimiter)


def _unit_in(header: str, path: str) -> str:
    """The unit between the last parentheses of a header, e.g. ``Price (USD/MWh)``."""
    if "(" not in header or not header.endswith(")"):
        raise InputError(path, f"column {header!r} names no unit in parentheses",
                         "use the exported header, e.g. 'Price (USD/MWh)'", column=header)
    return header[header.rindex("(") + 1:-1]


def _one(table: _table.Table, pattern: str, what: str, fix: str) -> str:
    found = table.find(pattern)
    if len(found) != 1:
        problem = (f"no {what} column" if not found else
                   f"{len(found)} {what} columns {found}")
        raise InputError(table.path, f"{problem}; the header is {listed(table.header)}", fix,
                         line=table.header_line)
    return found[0]


def _unit_error(path: str, exc: UnitError, column: str | None = None) -> InputError:
    return InputError(path, str(exc), "name the unit as documented in docs/importers.md",
                      column=column)


# -- Electricity Maps --------------------------------------------------------------------


def read_electricitymaps_csv(
    path: str | Path, region: str, intensity: str = "lca", drop_missing: bool = False,
) -> pd.DataFrame:
    """Electricity Maps hourly export (``Datetime (UTC)``, ``Carbon Intensity gCO₂eq/kWh
    (direct)`` and ``(LCA)``), or the wide history export (``datetime``,
    ``carbon_intensity_avg``, lifecycle only).

    Parameters
    ----------
    intensity : {"lca", "direct"}
        Lifecycle (the Electricity Maps default) or direct (combustion only) intensity.
    """
    if intensity not in ("lca", "direct"):
        raise InputError(path, f"unknown intensity {intensity!r}", "use --intensity lca or direct")
    table = _head_or_table(path)
    name = Path(path).name
    if table.has("Datetime (UTC)"):
        tag = "LCA" if intensity == "lca" else "direct"
        col = _one(table, rf"^carbon intensity.*\({tag}\)$", f"carbon intensity ({tag})",
                   "export the hourly carbon-intensity file from Electricity Maps")
        unit = col[len("Carbon Intensity"):col.rindex("(")].strip()
        try:
            factor = carbon_factor(unit)
        except UnitError as exc:
            raise _unit_error(table.path, exc, col) from None
        return _series(table, "Datetime (UTC)", col, factor, region=region, kind="carbon",
                       source=f"electricitymaps-csv {intensity}: {name}", timezone="UTC",
                       drop_missing=drop_missing, allow_negative=False)
    if table.has("datetime") and table.has("carbon_intensity_avg"):
        if intensity != "lca":
            raise InputError(path, "the wide export holds lifecycle intensity only "
                             "(carbon_intensity_avg)", "pass --intensity lca",
                             column="carbon_intensity_avg")
        return _series(table, "datetime", "carbon_intensity_avg", 1.0, region=region,
                       kind="carbon", source=f"electricitymaps-csv lca: {name}", timezone="UTC",
                       drop_missing=drop_missing, allow_negative=False)
    raise InputError(
        path, f"not an Electricity Maps export: the header is {listed(table.header)}",
        "expected 'Datetime (UTC)' and 'Carbon Intensity gCO₂eq/kWh (LCA)' columns, or "
        "'datetime' and 'carbon_intensity_avg'", line=table.header_line,
    )


def read_electricitymaps_json(
    path: str | Path, region: str, drop_missing: bool = False,
) -> pd.DataFrame:
    """Electricity Maps API ``carbon-intensity/history`` response: ``{"history": [{"datetime",
    "carbonIntensity", ...}]}`` (or ``"data"``, or a bare list), gCO2eq/kWh."""
    doc = _table.read_json(path)
    items = doc.get("history", doc.get("data")) if isinstance(doc, dict) else doc
    if not isinstance(items, list) or not items:
        raise InputError(path, "no 'history' list of readings",
                         "save the carbon-intensity/history API response as returned")
    times, values = [], []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or "datetime" not in item or "carbonIntensity" not in item:
            raise InputError(path, "a reading lacks 'datetime' or 'carbonIntensity'",
                             "save the API response unchanged", column=f"history[{i}]")
        times.append(item["datetime"])
        values.append(item["carbonIntensity"])
    kinds = {str(it.get("emissionFactorType", "lifecycle")) for it in items}
    # Each reading's place in the file, for the messages (a JSON file has no useful lines).
    keys = [f"history[{i}]" for i in range(len(items))]
    vals, keep = _table.numbers_from_strings(
        pd.Series([np.nan if v is None else v for v in values], dtype=object), keys,
        str(path), "carbonIntensity", drop_missing)
    for i in np.flatnonzero(keep & (vals < 0))[:1]:
        raise InputError(path, f"negative carbon intensity {vals[i]:g}", "correct the reading",
                         column=f"{keys[i]}.carbonIntensity")
    t = _table.times_from_strings(pd.Series(times, dtype=object).astype(str), keys, str(path),
                                  "datetime", "UTC")
    _table.check_order(t, keys, str(path), "datetime")
    source = f"electricitymaps-json {'/'.join(sorted(kinds))}: {Path(path).name}"
    return _frame(t[keep], vals[keep], region, "carbon", source)


# -- prices --------------------------------------------------------------------------------


def read_price_csv(
    path: str | Path, region: str, currency: str | None = None, timezone: str | None = None,
    drop_missing: bool = False,
) -> pd.DataFrame:
    """SustainCluster price file: ``Datetime (UTC),Datetime (Local),Price (USD/MWh)``, or the
    local variant ``Datetime,Price (JPY/MWh)`` whose naive times are in ``timezone``.

    The currency comes from the price header; ``currency`` must agree with it, or supply it
    when the header names none. Negative prices are kept.
    """
    table = _head_or_table(path)
    col = _one(table, r"^price\b", "price", "the price column must be named 'Price (<unit>)'")
    try:
        factor, cur = price_factor(_unit_in(col, table.path), currency)
    except UnitError as exc:
        raise _unit_error(table.path, exc, col) from None
    tz: str | None = "UTC"
    time_col = "Datetime (UTC)"
    if not table.has(time_col):
        time_col = _one(table, r"^datetime", "time",
                        "name the time column 'Datetime (UTC)' or 'Datetime'")
        tz = timezone
        first = table.column(time_col).iloc[0]
        if tz is None and not _table._OFFSET_RE.search(first):
            raise InputError(
                path, f"the times in {time_col!r} are local and carry no UTC offset",
                "pass --timezone with the market's IANA zone (e.g. Asia/Tokyo)", column=time_col,
            )
    return _series(table, time_col, col, factor, region=region, kind="price",
                   source=f"price-csv: {Path(path).name}", currency=cur, timezone=tz,
                   drop_missing=drop_missing)


def read_nyiso_lmp(
    path: str | Path, region: str, column: str | None = None,
    timezone: str = "America/New_York", drop_missing: bool = False,
) -> pd.DataFrame:
    """NYISO real-time LBMP file (``"Time Stamp","Name","PTID","LBMP ($/MWHr)",...``).

    One zone (``column``: a ``Name`` value, default ``region``) becomes the series; times
    are Eastern local time (``MM/DD/YYYY HH:MM:SS``, daylight saving applied), labelled as
    NYISO labels them.
    """
    table = _table.read_table(path)
    col = _one(table, r"^LBMP", "LBMP", "pass a NYISO real-time LBMP file")
    try:
        factor, cur = price_factor(_unit_in(col, table.path))
    except UnitError as exc:
        raise _unit_error(table.path, exc, col) from None
    names = table.column("Name")
    want = column or region
    if want not in set(names):
        raise InputError(path, f"no zone {want!r}; the file has {listed(sorted(set(names)))}",
                         "pass --column with one of them", column="Name")
    sub = table.take((names == want).to_numpy())
    return _series(sub, "Time Stamp", col, factor, region=region, kind="price",
                   source=f"nyiso-lmp {want}: {Path(path).name}", currency=cur,
                   timezone=timezone, time_format="%m/%d/%Y %H:%M:%S",
                   drop_missing=drop_missing)


# -- marginal emissions -----------------------------------------------------------------------


def read_watttime_csv(
    path: str | Path, region: str, column: str | None = None, timezone: str = "UTC",
    unit: str = "lb/MWh", drop_missing: bool = False,
) -> pd.DataFrame:
    """WattTime marginal operating emissions rate (MOER), lb CO2/MWh by default.

    The time column is the first whose name contains ``time`` (the vessim example calls it
    ``oootime``); the value column is ``column``, or the only other column. Naive times are
    in ``timezone`` (UTC by default). Marginal rates may be negative and are kept.
    """
    table = _head_or_table(path)
    times = table.find("time")
    if not times:
        raise InputError(path, f"no time column in {listed(table.header)}",
                         "name the time column e.g. 'point_time'", line=table.header_line)
    time_col = times[0]
    others = [h for h in table.header if h != time_col]
    if column is None:
        if len(others) != 1:
            raise InputError(path, f"several value columns {others}",
                             "pass --column with the one to import", line=table.header_line)
        column = others[0]
    try:
        factor = carbon_factor(unit)
    except UnitError as exc:
        raise _unit_error(table.path, exc) from None
    return _series(table, time_col, column, factor, region=region, kind="carbon",
                   source=f"watttime-csv {column}: {Path(path).name}", timezone=timezone,
                   drop_missing=drop_missing)


def read_avert(
    path: str | Path, region: str, year: int | None = None, column: str | None = None,
    timezone: str = "UTC", drop_missing: bool = False,
) -> pd.DataFrame:
    """EPA AVERT hourly marginal CO2 (lb/kWh): ``Month,Timestamp,<region>...``, where
    ``Timestamp`` is the hour of the year 0..8759.

    Hour ``h`` is ``h`` hours after 1 January ``year`` 00:00 in ``timezone`` (a fixed step:
    pass a standard-time zone such as ``Etc/GMT+5`` for US Eastern). ``column`` picks the
    AVERT region (default ``region``). The ``Month`` column is checked against the calendar.
    """
    if year is None:
        raise InputError(path, "AVERT files carry the hour of the year, not a date",
                         "pass --year (e.g. --year 2023)")
    table = _table.read_table(path)
    want = column or region
    data_cols = [h for h in table.header if h not in ("Month", "Timestamp")]
    if want not in data_cols:
        raise InputError(path, f"no AVERT region column {want!r}; the file has {listed(data_cols)}",
                         "pass --column with one of them", line=table.header_line)
    hours, _ = _table.parse_numbers(table, "Timestamp")
    wrong = (hours != np.round(hours)) | (hours < 0) | (hours > 8783)
    if wrong.any():
        i = int(np.flatnonzero(wrong)[0])
        raise InputError(path, f"hour of year {hours[i]:g} is not a whole number in 0..8783",
                         "correct the row", line=int(table.lines[i]), column="Timestamp")
    tz = _table.zone(timezone, path)
    origin = pd.Timestamp(datetime(int(year), 1, 1), tz=tz).tz_convert("UTC").tz_localize(None)
    times = pd.DatetimeIndex(origin + pd.to_timedelta(hours, unit="h")).as_unit("ns")
    _table.check_order(times, table.lines, table.path, "Timestamp")
    if table.has("Month"):
        months, _ = _table.parse_numbers(table, "Month")
        calendar = (pd.Timestamp(datetime(int(year), 1, 1))
                    + pd.to_timedelta(hours, unit="h")).month.to_numpy()
        wrong = np.flatnonzero(months != calendar)
        if wrong.size:
            i = int(wrong[0])
            raise InputError(
                path, f"hour {int(hours[i])} falls in month {calendar[i]} of {year}, but the "
                f"row says {months[i]:g}", "check --year (AVERT data use non-leap years)",
                line=int(table.lines[i]), column="Month",
            )
    values, keep = _table.parse_numbers(table, want, drop_missing)
    with np.errstate(over="ignore"):
        stored = values[keep] * carbon_factor("lb/kWh")
    lines = table.lines[keep]
    bounds.check(stored, bounds.CARBON_MARGINAL, table.path, want, lambda i: int(lines[i]),
                 shown=values[keep], shown_unit="lb/kWh")
    return _frame(times[keep], stored, region, "carbon", f"avert {want} {year}: "
                  f"{Path(path).name}")


# -- tariffs and generic files ---------------------------------------------------------------


def read_csv_generic(
    path: str | Path, region: str, *, time_column: str | None = None,
    value_column: str | None = None, kind: str | None = None, unit: str | None = None,
    timezone: str = "UTC", time_format: str | None = None, currency: str | None = None,
    delimiter: str = ",", drop_missing: bool = False,
) -> pd.DataFrame:
    """Any CSV with one time column and one value column.

    ``kind`` is ``price`` (``unit`` like ``EUR/MWh``, or ``/MWh`` with ``currency``),
    ``carbon`` (``unit`` like ``gCO2/kWh``, ``lb/MWh``), or a series a site's supply reads
    (:data:`ENERGY_KINDS`): ``generation`` (kW, MW, W), ``irradiance`` (global horizontal,
    W/m2) or ``wind-speed`` (m/s, km/h, kn). Naive times are local in ``timezone``;
    ``time_format`` takes strftime codes.
    """
    missing = [f"--{n}" for n, v in (("time-column", time_column),
                                     ("value-column", value_column), ("kind", kind),
                                     ("unit", unit)) if not v]
    if missing:
        raise InputError(path, f"the generic csv format needs {', '.join(missing)}",
                         "name the columns, the kind (price|carbon) and the unit")
    assert time_column and value_column and unit
    if kind not in ("price", "carbon", *ENERGY_KINDS):
        raise InputError(path, f"unknown kind {kind!r}", "pass --kind price, carbon, "
                         f"{', '.join(ENERGY_KINDS)}")
    if len(delimiter) != 1:
        raise InputError(path, f"delimiter {delimiter!r} is not one character",
                         "pass --delimiter ',' or ';' or a tab")
    table = _head_or_table(path, delimiter=delimiter)
    try:
        if kind == "price":
            factor, cur = price_factor(unit, currency)
        elif kind in ENERGY_KINDS:
            units = ENERGY_KINDS[kind][1]
            if unit not in units:
                raise UnitError(f"unit {unit!r} of a {kind} series is not one of "
                                f"{', '.join(units)}")
            factor, cur = units[unit], None
        else:
            factor, cur = carbon_factor(unit), None
    except UnitError as exc:
        raise _unit_error(table.path, exc, value_column) from None
    return _series(table, time_column, value_column, factor, region=region, kind=kind,
                   source=f"csv {value_column} [{unit}]: {Path(path).name}", currency=cur,
                   timezone=timezone, time_format=time_format, drop_missing=drop_missing,
                   allow_negative=False, delimiter=delimiter)


_MARGINAL_FORMATS = ("watttime-csv", "avert")
"""Formats carrying marginal emission rates, which may be negative."""

GRID_FORMATS: dict[str, GridReader] = {
    "electricitymaps-csv": read_electricitymaps_csv,
    "electricitymaps-json": read_electricitymaps_json,
    "price-csv": read_price_csv,
    "watttime-csv": read_watttime_csv,
    "avert": read_avert,
    "nyiso-lmp": read_nyiso_lmp,
    "urdb-json": read_urdb_json,
    "csv": read_csv_generic,
}
"""Grid formats by name (the ``FORMAT`` of ``workbench import grid``)."""


def read_grid(fmt: str, path: str | Path, region: str, **options: Any) -> pd.DataFrame:
    """Read one grid file in format ``fmt`` (see :data:`GRID_FORMATS`); options that are
    None are left at the reader's default."""
    if fmt not in GRID_FORMATS:
        raise InputError(path, f"unknown grid format {fmt!r}",
                         f"use one of {', '.join(GRID_FORMATS)}")
    if not region:
        raise InputError(path, "no region name", "pass --region (the name the series gets)")
    opts = {k: v for k, v in options.items() if v is not None}
    reader = GRID_FORMATS[fmt]
    takes = set(inspect.signature(reader).parameters) - {"path", "region"}
    extra = sorted(set(opts) - takes)
    if extra:
        flags = ", ".join("--" + k.replace("_", "-") for k in extra)
        raise InputError(path, f"format {fmt} does not take {flags}",
                         f"drop it; {fmt} takes {', '.join(sorted(takes)) or 'no options'}")
    frame = reader(path, region, **opts)
    check_frame(frame, path, marginal=fmt in _MARGINAL_FORMATS)
    return frame


@dataclass(frozen=True)
class GridImport:
    """What one grid import wrote."""

    path: str
    region: str
    kind: str
    rows: int
    start: pd.Timestamp
    end: pd.Timestamp
    minimum: float
    maximum: float
    unit: str
    source: str


def summarize(frame: pd.DataFrame, path: str | Path) -> GridImport:
    """Row count, span and value range of a grid frame from one file."""
    if "value" in frame:
        kind = str(frame["kind"].iloc[0])
        col = "value"
        unit = {"generation_kw": "kW", "irradiance_w_m2": "W/m2"}.get(kind, "m/s")
    else:
        kind = "price" if "price_per_kwh" in frame else "carbon"
        col = "price_per_kwh" if kind == "price" else "carbon_g_per_kwh"
        unit = f"{frame['currency'].iloc[0]}/kWh" if kind == "price" else "gCO2/kWh"
    return GridImport(
        path=str(path), region=str(frame["region"].iloc[0]), kind=kind, rows=len(frame),
        start=frame["time_utc"].min(), end=frame["time_utc"].max(),
        minimum=float(frame[col].min()), maximum=float(frame[col].max()), unit=unit,
        source=str(frame["source"].iloc[0]),
    )


def import_grid(store: Any, fmt: str, path: str | Path, region: str,
                **options: Any) -> GridImport:
    """Read a grid file and upsert it into ``store`` in one transaction.

    Re-importing the same file rewrites the same ``(region, time)`` rows; a file whose price
    currency differs from the prices the region already holds is refused. To hold the
    store's lock only while writing, call :func:`read_grid` first and then
    :func:`write_grid` (the CLI does).
    """
    return write_grid(store, read_grid(fmt, path, region, **options), path)


def write_grid(store: Any, frame: pd.DataFrame, path: str | Path) -> GridImport:
    """Upsert a frame :func:`read_grid` returned into ``store`` in one transaction."""
    if frame.empty:
        raise InputError(path, "no rows left to import", "check --drop-missing and the file")
    region = str(frame["region"].iloc[0])
    if "value" in frame:
        store.write_energy_series(frame)
        info = summarize(frame, path)
        log.info("imported %d %s rows for %s from %s", info.rows, info.kind, region, path)
        return info
    if "currency" in frame:
        cur = str(frame["currency"].iloc[0])
        other = [c for c in store.grid_currencies(region) if c != cur]
        if other:
            raise InputError(path, f"region {region!r} already holds prices in {other}, this "
                             f"file is in {cur}", "import it under another --region name")
    store.write_grid_series(frame)
    info = summarize(frame, path)
    log.info("imported %d %s rows for %s from %s", info.rows, info.kind, region, path)
    return info
