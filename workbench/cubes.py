"""Price and carbon-intensity cubes over ``(time, region)``.

One schema: an :class:`xarray.Dataset` with dimensions ``time`` (UTC, naive
``datetime64[ns]``, one step per slot, labelling the slot's start) and ``region``, and the
variables ``price_per_kwh`` (attrs ``units`` e.g. ``"CNY/kWh"`` and ``currency``) and
``carbon_g_per_kwh`` (``units = "gCO2/kWh"``). The cube's ``attrs`` carry ``slot_s``.

Missing data raises :class:`CubeError` naming the region and time of the first problem;
filling a gap is an explicit choice (``fill="hold"``), never a silent zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

import numpy as np
import pandas as pd
import xarray as xr

from workbench.model import as_utc

VARIABLES = ("price_per_kwh", "carbon_g_per_kwh")


class CubeError(ValueError):
    """Grid data cannot form a valid cube; the message names the region and time."""


def _step_s(idx: pd.DatetimeIndex) -> np.ndarray:
    """Seconds between consecutive timestamps, whatever the index's time unit."""
    return np.diff(np.asarray((idx - idx[0]).total_seconds(), dtype=float))


def _naive_utc(value: datetime | str | pd.Timestamp) -> pd.Timestamp:
    return pd.Timestamp(as_utc(pd.Timestamp(value).to_pydatetime())).tz_localize(None)


def make_cube(
    times: pd.DatetimeIndex | np.ndarray,
    regions: list[str] | tuple[str, ...],
    price_per_kwh: np.ndarray,
    carbon_g_per_kwh: np.ndarray,
    currency: str,
    slot_s: int,
    source: str = "",
) -> xr.Dataset:
    """Assemble and validate a cube from ``(time, region)`` arrays."""
    idx = pd.DatetimeIndex(times)
    if idx.tz is not None:
        idx = idx.tz_convert("UTC").tz_localize(None)
    ds = xr.Dataset(
        {
            "price_per_kwh": (("time", "region"), np.asarray(price_per_kwh, dtype=float)),
            "carbon_g_per_kwh": (("time", "region"), np.asarray(carbon_g_per_kwh, dtype=float)),
        },
        coords={"time": idx.values.astype("datetime64[ns]"), "region": list(regions)},
        attrs={"slot_s": int(slot_s), "source": source},
    )
    ds["price_per_kwh"].attrs.update(units=f"{currency}/kWh", currency=currency)
    ds["carbon_g_per_kwh"].attrs.update(units="gCO2/kWh")
    validate_cube(ds)
    return ds


def validate_cube(ds: xr.Dataset, regions: list[str] | None = None) -> None:
    """Raise :class:`CubeError` at the first problem: a missing variable or region, a
    duplicate or non-monotonic timestamp, a gap in the regular time step, or a NaN."""
    for var in VARIABLES:
        if var not in ds:
            raise CubeError(f"cube lacks the variable {var!r}")
        if ds[var].dims != ("time", "region"):
            raise CubeError(f"{var} must have dims ('time', 'region'), has {ds[var].dims}")
    present = [str(r) for r in ds["region"].values]
    if regions is not None:
        missing = [r for r in regions if r not in present]
        if missing:
            raise CubeError(f"cube lacks regions {missing}; it has {present}")
    times = pd.DatetimeIndex(ds["time"].values)
    if times.has_duplicates:
        dup = times[times.duplicated()][0]
        raise CubeError(f"duplicate timestamp {dup.isoformat()} in the cube")
    if not times.is_monotonic_increasing:
        pos = int(np.flatnonzero(_step_s(times) < 0)[0]) + 1
        raise CubeError(
            f"timestamps go backwards at {times[pos].isoformat()} (after "
            f"{times[pos - 1].isoformat()}); sort the series"
        )
    step = ds.attrs.get("slot_s")
    if step and len(times) > 1:
        diffs = _step_s(times)
        bad = np.flatnonzero(diffs != step)
        if bad.size:
            i = int(bad[0])
            raise CubeError(
                f"gap in the cube: {times[i].isoformat()} is followed by "
                f"{times[i + 1].isoformat()}, expected a step of {step} s"
            )
    for var in VARIABLES:
        arr = ds[var].values
        nan = np.argwhere(~np.isfinite(arr))
        if nan.size:
            ti, ri = nan[0]
            raise CubeError(
                f"{var} is missing for region {present[ri]} at {times[ti].isoformat()} UTC; "
                "import that period or fill it explicitly (fill='hold')"
            )


def _region_values(
    rows: pd.DataFrame, var: str, grid: pd.DatetimeIndex, slot_s: int, region: str,
    fill: str | None,
) -> np.ndarray:
    """One region's ``var`` on ``grid`` (slot starts): step-held when the source is coarser
    than the slot, time-averaged over the slot when it is finer."""
    series = rows[["time_utc", var]].dropna().set_index("time_utc")[var].sort_index()
    if series.empty:
        raise CubeError(f"region {region} has no {var} data; import it first")
    if series.index.has_duplicates:
        dup = series.index[series.index.duplicated()][0]
        raise CubeError(f"duplicate {var} timestamp for region {region} at {dup.isoformat()}")
    steps = _step_s(series.index)
    src_step = float(np.median(steps)) if len(series) > 1 else float(slot_s)
    end = grid[-1] + pd.Timedelta(seconds=slot_s)
    if src_step < slot_s:
        # Time-weighted mean over each slot: energy-weighted for constant power.
        fine = series[(series.index >= grid[0]) & (series.index < end)]
        binned = fine.groupby(((fine.index - grid[0]).total_seconds() // slot_s).astype(int)).mean()
        values = binned.reindex(range(len(grid))).to_numpy(dtype=float, copy=True)
    else:
        # Hold each value until the next timestamp, but not beyond one source step.
        held = series.reindex(series.index.union(grid)).ffill(limit=None)
        values = held.reindex(grid).to_numpy(dtype=float, copy=True)
        last_valid = series.index[-1] + pd.Timedelta(seconds=src_step)
        values[grid >= last_valid] = np.nan
        values[grid < series.index[0]] = np.nan
        # A hold across a hole in the source is a gap, not data.
        gaps = steps > src_step * 1.5
        for i in np.flatnonzero(gaps):
            hole = (grid >= series.index[i] + pd.Timedelta(seconds=src_step)) & (
                grid < series.index[i + 1])
            values[hole] = np.nan
    if fill == "hold":
        values = pd.Series(values).ffill().bfill().to_numpy()
    elif fill is not None:
        raise ValueError(f"unknown fill {fill!r}; use None or 'hold'")
    return values


def values_on_grid(
    rows: pd.DataFrame, var: str, grid: pd.DatetimeIndex, slot_s: int, region: str,
) -> np.ndarray:
    """One region's ``var`` (long grid rows) on the slot starts ``grid``, as a cube holds it
    (step-held from coarser data, time-averaged from finer); NaN where the data has a hole."""
    frame = rows.copy()
    frame["time_utc"] = pd.to_datetime(frame["time_utc"], utc=True).dt.tz_localize(None)
    return _region_values(frame, var, grid, slot_s, region, None)


def cube_from_series(
    series: pd.DataFrame,
    slot_s: int,
    start: datetime | str,
    end: datetime | str,
    regions: list[str] | None = None,
    timezones: Mapping[str, str] | None = None,
    currency: str | None = None,
    fill: str | None = None,
) -> xr.Dataset:
    """Build a cube on slots ``[start, end)`` of ``slot_s`` seconds from long grid rows.

    Parameters
    ----------
    series : DataFrame
        The store's long format: ``time_utc``, ``region``, ``price_per_kwh``, ``currency``,
        ``carbon_g_per_kwh``.
    timezones : mapping region -> IANA zone, optional
        Recorded in the cube (``attrs['timezones']``) so views can show local time.
    fill : None or "hold"
        None (default) raises on any hole; "hold" carries the last value forward, and a
        hole before a region's first value takes that first value.
    """
    start_ts, end_ts = _naive_utc(start), _naive_utc(end)
    if end_ts <= start_ts:
        raise CubeError(f"cube end {end_ts} is not after start {start_ts}")
    grid = pd.date_range(start_ts, end_ts, freq=pd.Timedelta(seconds=slot_s), inclusive="left")
    frame = series.copy()
    frame["time_utc"] = pd.to_datetime(frame["time_utc"], utc=True).dt.tz_localize(None)
    regions = list(regions) if regions is not None else sorted(frame["region"].unique())
    missing = [r for r in regions if r not in set(frame["region"])]
    if missing:
        raise CubeError(f"no grid series for regions {missing}; import them first")
    currencies = frame.loc[frame["price_per_kwh"].notna(), "currency"].dropna().unique()
    if currency is None:
        if len(currencies) > 1:
            raise CubeError(
                f"grid prices mix currencies {sorted(currencies)}; convert them to one first"
            )
        if not len(currencies):
            raise CubeError("grid prices carry no currency; import them with one (--currency) "
                            "or pass currency=")
        currency = str(currencies[0])
    price = np.empty((len(grid), len(regions)))
    carbon = np.empty((len(grid), len(regions)))
    for j, region in enumerate(regions):
        rows = frame[frame["region"] == region]
        price[:, j] = _region_values(rows, "price_per_kwh", grid, slot_s, region, fill)
        carbon[:, j] = _region_values(rows, "carbon_g_per_kwh", grid, slot_s, region, fill)
    sources = sorted(frame["source"].dropna().unique()) if "source" in frame else []
    ds = make_cube(grid, regions, price, carbon, currency, slot_s, "; ".join(map(str, sources)))
    if timezones:
        ds.attrs["timezones"] = dict(timezones)
    return ds


HISTORY_SLOT_S = 3600
#: Days of history a scenario carries at most (what the forecast models read).
HISTORY_DAYS = 160


def history_cube(
    series: pd.DataFrame,
    regions: list[str] | tuple[str, ...],
    start: datetime | str,
    days: int = HISTORY_DAYS,
    timezones: Mapping[str, str] | None = None,
    currency: str | None = None,
) -> xr.Dataset | None:
    """The hourly cube of the gap-free hours right before ``start``, at most ``days`` long.

    The span is the longest one ending at ``start`` in which every region has both price and
    carbon (an hour missing anywhere cuts it); None when not even a day is left. This is what
    the forecast models learn from (:mod:`workbench.forecast`); the horizon's cube stays
    separate, so a policy can never read history and truth as one array by mistake.
    """
    start_ts = _naive_utc(start)
    lo = start_ts - pd.Timedelta(days=days)
    grid = pd.date_range(lo, start_ts, freq=pd.Timedelta(seconds=HISTORY_SLOT_S),
                         inclusive="left")
    frame = series.copy()
    if frame.empty:
        return None
    frame["time_utc"] = pd.to_datetime(frame["time_utc"], utc=True).dt.tz_localize(None)
    frame = frame[frame["time_utc"] < start_ts]
    cut = 0
    values: dict[str, np.ndarray] = {}
    for region in regions:
        rows = frame[frame["region"] == region]
        for var in VARIABLES:
            sub = rows[rows[var].notna()]
            if sub.empty:
                return None
            v = _region_values(sub, var, grid, HISTORY_SLOT_S, region, None)
            bad = np.flatnonzero(~np.isfinite(v))
            if bad.size:
                cut = max(cut, int(bad[-1]) + 1)
            values[f"{var}:{region}"] = v
    if len(grid) - cut < 86400 // HISTORY_SLOT_S:
        return None
    if currency is None:
        held = frame.loc[frame["price_per_kwh"].notna(), "currency"].dropna().unique()
        if len(held) != 1:
            return None
        currency = str(held[0])
    price = np.column_stack([values[f"price_per_kwh:{r}"][cut:] for r in regions])
    carbon = np.column_stack([values[f"carbon_g_per_kwh:{r}"][cut:] for r in regions])
    ds = make_cube(grid[cut:], list(regions), price, carbon, currency, HISTORY_SLOT_S,
                   "history before the scenario")
    if timezones:
        ds.attrs["timezones"] = dict(timezones)
    return ds


def _resample_overlap(ds: xr.Dataset, slot_s: int) -> xr.Dataset:
    """Resample to a slot length that neither divides nor is a multiple of the cube's: each
    new slot ``[a, a + slot_s)`` takes the time-weighted mean of the old slots it overlaps,
    ``x_new = (F(a + slot_s) - F(a)) / slot_s`` with ``F`` the integral of the step function
    (exact at the old slot boundaries, linear between). A partial last slot is dropped."""
    old = int(ds.attrs["slot_s"])
    n_old = ds.sizes["time"]
    n = (n_old * old) // slot_s
    if n == 0:
        raise CubeError(f"cube of {n_old} steps is shorter than one {slot_s}-s slot")
    edges_old = np.arange(n_old + 1, dtype=np.int64) * old
    edges_new = np.arange(n + 1, dtype=np.int64) * slot_s
    t0 = ds["time"].values[0]
    times = t0 + (np.arange(n) * np.timedelta64(slot_s, "s"))
    out = xr.Dataset(coords={"time": times, "region": ds["region"].values})
    for var in VARIABLES:
        x = np.asarray(ds[var].transpose("time", "region").values, dtype=float)
        integral = np.vstack([np.zeros((1, x.shape[1])), np.cumsum(x * old, axis=0)])
        at_new = np.column_stack([np.interp(edges_new, edges_old, integral[:, j])
                                  for j in range(x.shape[1])])
        out[var] = (("time", "region"), np.diff(at_new, axis=0) / slot_s)
    return out


def resample(ds: xr.Dataset, slot_s: int) -> xr.Dataset:
    """Change the cube's slot length: coarser slots average (time-weighted), finer slots
    step-hold; a length that neither divides nor is a multiple of the old one takes the
    time-weighted mean of the old slots each new one overlaps. The time-average of each
    variable is kept exactly (to rounding)."""
    old = int(ds.attrs["slot_s"])
    if slot_s == old:
        return ds
    if slot_s % old and old % slot_s:
        out = _resample_overlap(ds, slot_s)
    elif slot_s > old:
        k = slot_s // old
        n = (ds.sizes["time"] // k) * k
        if n == 0:
            raise CubeError(f"cube of {ds.sizes['time']} steps is shorter than one {slot_s}-s slot")
        out = ds.isel(time=slice(0, n)).coarsen(time=k).mean()
        out = out.assign_coords(time=ds["time"].values[:n:k])
    else:
        k = old // slot_s
        times = (ds["time"].values[:, None]
                 + (np.arange(k) * np.timedelta64(slot_s, "s"))[None, :]).ravel()
        out = ds.isel(time=np.repeat(np.arange(ds.sizes["time"]), k)).assign_coords(time=times)
    out.attrs = dict(ds.attrs, slot_s=int(slot_s))
    for var in VARIABLES:
        out[var].attrs = dict(ds[var].attrs)
    return out


def summary(ds: xr.Dataset) -> pd.DataFrame:
    """Per-region mean, min and max of price and carbon."""
    rows = []
    for region in ds["region"].values:
        sel = ds.sel(region=region)
        row: dict[str, object] = {"region": str(region)}
        for var in VARIABLES:
            vals = sel[var].values
            row.update({f"{var}_mean": float(vals.mean()), f"{var}_min": float(vals.min()),
                        f"{var}_max": float(vals.max())})
        rows.append(row)
    return pd.DataFrame(rows)


PRICE_KINDS = ("tariff", "market")


def price_kind(cube: xr.Dataset) -> str:
    """``"tariff"`` when the cube's prices are a published tariff, else ``"market"``.

    The cube's ``attrs["price_kind"]`` when set (the seed3 generator sets it, a scenario
    saved in the store keeps it); otherwise judged from the prices (more than a day of
    them; a shorter cube counts as market prices): a tariff has at most 24 distinct price
    levels per region that repeat by the calendar (at least 95 % of slots equal the slot
    one day or one week earlier, in every region).
    """
    kind = cube.attrs.get("price_kind")
    if kind in PRICE_KINDS:
        return str(kind)
    price = np.asarray(cube["price_per_kwh"].values, dtype=float)
    per_day = int(round(86400 / int(cube.attrs.get("slot_s", 3600))))
    for j in range(price.shape[1]):
        col = price[:, j]
        if np.unique(col).size > 24:
            return "market"
        ok = False
        for lag in (per_day, 7 * per_day):
            if col.size > lag and np.mean(col[lag:] == col[:-lag]) >= 0.95:
                ok = True
        if not ok:
            return "market"
    return "tariff"


def local_hours(ds: xr.Dataset, region: str) -> np.ndarray:
    """Local hour of day (float) of every slot start in ``region``'s timezone."""
    tz = ds.attrs.get("timezones", {}).get(region, "UTC")
    idx = pd.DatetimeIndex(ds["time"].values).tz_localize("UTC").tz_convert(tz)
    return np.asarray(idx.hour + idx.minute / 60.0, dtype=float)
