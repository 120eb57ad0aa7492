"""The ``model`` forecast mode: forecasts for a scenario from the history it carries.

A scenario built from the store carries ``Scenario.history``: the hourly cube of the gap-free
hours right before its start (:func:`workbench.cubes.history_cube`). :func:`fit_scenario`
joins it with the horizon's own values (hourly) and issues, for every region and variable,
a forecast at each day's 00:00 UTC covering the next ``horizon_h`` hours, each from the data
before its origin only (:func:`workbench.forecast.rolling.rolling_forecast`). A policy at slot
``t`` sees the forecast issued at the last 00:00 UTC at or before the slot (like a day-ahead
market), revised within the day only where the truth has left the issued band
(:meth:`ModelForecast.revised`); hours past the issued horizon repeat its last day.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import xarray as xr

from workbench.cubes import HISTORY_SLOT_S, VARIABLES, resample
from workbench.forecast.backtest import MIN_HISTORY_DAYS
from workbench.forecast.calendar import calendar
from workbench.forecast.models import DAY_H
from workbench.forecast.rolling import (
    DEFAULT_MODEL,
    MAX_HORIZON_H,
    ForecastError,
    SeriesInput,
    rolling_forecast,
)

if TYPE_CHECKING:
    from workbench.model import Scenario

log = logging.getLogger(__name__)

PLAN_HORIZON_H = 2 * DAY_H
REVISIONS = ("none", "band", "always")
"""When :meth:`ModelForecast.revised` carries the current slot's error ahead: never (``none``:
the day-ahead median as issued), where the truth left the band (``band``, the default), or
every slot (``always``: a what-if, more accurate hour by hour but dearer plans, measured in
``docs/results.md`` section 6)."""


def history_days(scenario: Scenario) -> float:
    """Days of gap-free hourly history (price and carbon, every region) before the start."""
    hist = getattr(scenario, "history", None)
    if hist is None:
        return 0.0
    return hist.sizes["time"] * float(hist.attrs.get("slot_s", HISTORY_SLOT_S)) / 86400.0


def has_history(scenario: Scenario, days: int = MIN_HISTORY_DAYS) -> bool:
    """Whether at least ``days`` days of history precede the scenario (the ``model`` mode's
    condition to be the default)."""
    return history_days(scenario) >= days


@dataclass(frozen=True)
class ModelForecast:
    """Forecasts issued at each day's 00:00 UTC over a scenario's horizon.

    ``paths[var][q]`` has shape ``(origins, horizon_h, regions)`` (``q`` in 0.1, 0.5, 0.9),
    in the cube's units (``price_per_kwh``: the scenario currency per kWh; carbon: gCO2/kWh).
    ``history_days`` says how much history preceded the start. ``rho[var]`` has shape
    ``(origins, regions)``: how much of an hour's error was left the next hour in the errors
    before each origin (:func:`~workbench.forecast.rolling.error_persistence`); without it
    (empty) the forecast is never revised within its day. ``revise`` says when it is
    (:data:`REVISIONS`; ``band``, the default, measured in ``bench/forecast_revision.py``).
    """

    model: str
    origins: pd.DatetimeIndex
    regions: tuple[str, ...]
    horizon_h: int
    paths: dict[str, dict[float, np.ndarray]]
    history_days: float
    rho: dict[str, np.ndarray] = field(default_factory=dict)
    revise: str = "band"

    def __post_init__(self) -> None:
        if self.revise not in REVISIONS:
            raise ForecastError(f"unknown forecast revision {self.revise!r}; use one of "
                                f"{REVISIONS}")

    def at(self, times: pd.DatetimeIndex, var: str, quantile: float = 0.5,
           slot_s: int = HISTORY_SLOT_S) -> np.ndarray:
        """Values ``(len(times), regions)`` for the slots of ``slot_s`` seconds starting at
        ``times``, as forecast at the last 00:00 UTC at or before ``times[0]``; beyond the
        issued horizon the last issued day repeats.

        A slot within one hour takes that hour's value; a slot across hours (45 minutes,
        two hours) the time-weighted mean of the hours it overlaps,
        ``sum_h w_h x_h / slot_s`` with ``w_h`` the seconds of the slot in hour ``h``.
        """
        origin, i = self._origin(times)
        path = self.paths[var][quantile][i]
        # Seconds since the origin, in integers (times >= origin, whole seconds).
        a = (times.as_unit("ns").asi8 - origin.as_unit("ns").value) // 1_000_000_000
        first = a // 3600
        last = (a + slot_s - 1) // 3600
        if (first == last).all():
            return np.asarray(path[self._wrap(first), :], dtype=float)
        out = np.zeros((len(a), path.shape[1]))
        for k in range(int((last - first).max()) + 1):
            h = first + k
            w = np.clip(np.minimum(a + slot_s, (h + 1) * 3600) - np.maximum(a, h * 3600), 0,
                        None)
            out += w[:, None] * path[self._wrap(h), :]
        return out / slot_s

    def revised(self, times: pd.DatetimeIndex, var: str, now: np.ndarray,
                slot_s: int = HISTORY_SLOT_S) -> tuple[np.ndarray, np.ndarray]:
        """The median (:meth:`at`) for the slots ``times``, revised by ``now``, the truth
        metered in the first slot (one value per region, in :attr:`regions`' order), and
        which regions' truth lies outside the issued 10-90 % band there.

        Where it does (the forecast errs beyond its band), the error ``e = now - q50`` is
        carried into the hours ahead at the persistence of the errors before the origin,
        ``f'[k] = f[k] + e * rho ** h_k`` (``h_k`` hours from the first slot; carbon kept
        >= 0); inside the band the issued median stands (an error the band expects is
        noise, not news). :attr:`revise` ``none`` never carries, ``always`` carries every
        error. Row 0 is ``now``. Reads nothing after the first slot.
        """
        med = self.at(times, var, 0.5, slot_s)
        first = times[:1]
        lo = self.at(first, var, 0.1, slot_s)[0]
        hi = self.at(first, var, 0.9, slot_s)[0]
        now = np.asarray(now, dtype=float)
        out = (now < lo) | (now > hi)
        carry = {"band": out, "none": np.zeros_like(out),
                 "always": np.isfinite(now)}[self.revise]
        rho = self.rho.get(var)
        if carry.any() and rho is not None and rho.size:
            _, i = self._origin(times)
            hours = np.arange(len(times), dtype=float) * slot_s / 3600.0
            e = np.where(carry, now - med[0], 0.0)
            med = med + e[None, :] * rho[i][None, :] ** hours[:, None]
            if var == "carbon_g_per_kwh":
                med = np.maximum(med, 0.0)
        med[0] = now
        return med, out

    def _origin(self, times: pd.DatetimeIndex) -> tuple[pd.Timestamp, int]:
        """The last 00:00 UTC at or before ``times[0]`` and its row in :attr:`origins`."""
        origin = times[0].floor("D")
        # The origin's row, by binary search on the issue times' nanoseconds (the pandas
        # indexer costs milliseconds a call, and the simulator asks every slot).
        ns = self.origins.as_unit("ns").asi8
        o_ns = origin.as_unit("ns").value
        i = int(np.searchsorted(ns, o_ns))
        if i >= ns.size or ns[i] != o_ns or (origin.tz is None) != (self.origins.tz is None):
            raise ForecastError(f"no forecast issued at {origin.isoformat()} (issued "
                                f"{self.origins[0]} .. {self.origins[-1]})")
        return origin, i

    def _wrap(self, h: np.ndarray) -> np.ndarray:
        """Hours since the origin as rows of the issued path: past the horizon, the last
        issued day repeats."""
        h = np.asarray(h, dtype=int).copy()
        over = h >= self.horizon_h
        h[over] = self.horizon_h - DAY_H + (h[over] - self.horizon_h) % DAY_H
        return h


def _hourly(cube: xr.Dataset) -> xr.Dataset:
    """The cube in hours (the models' step), from any slot length
    (:func:`workbench.cubes.resample`: an hour of 45-minute slots is the time-weighted mean
    of the two it overlaps)."""
    return resample(cube, HISTORY_SLOT_S)


def fit_scenario(scenario: Scenario, model: str = DEFAULT_MODEL,
                 horizon_h: int = PLAN_HORIZON_H) -> ModelForecast:
    """Issue the ``model`` forecasts for every region and variable of ``scenario``.

    Raises
    ------
    ForecastError
        The scenario carries fewer than :data:`MIN_HISTORY_DAYS` days of history (the message
        names the regions and what the store must hold). Any slot length is forecast (the
        horizon's values are resampled to hours, :meth:`ModelForecast.at` back to slots).
    """
    days = history_days(scenario)
    regions = tuple(str(r) for r in scenario.grid["region"].values)
    if days < MIN_HISTORY_DAYS:
        raise ForecastError(
            f"scenario {scenario.name!r}: {days:.1f} days of gap-free price and carbon history "
            f"before {scenario.start.isoformat()} for regions {', '.join(regions)}, the model "
            f"needs >= {MIN_HISTORY_DAYS}; import earlier series and rebuild the scenario, or "
            "use --forecast seasonal-naive")
    hist = scenario.history
    assert hist is not None
    start = pd.Timestamp(scenario.start).tz_convert("UTC").tz_localize(None)
    end = start + pd.Timedelta(seconds=scenario.slot_s * scenario.n_slots)
    horizon = _hourly(scenario.grid.sel(time=slice(start, end - pd.Timedelta(seconds=1))))
    joined = xr.concat([hist[list(VARIABLES)], horizon[list(VARIABLES)]], dim="time")
    index = pd.DatetimeIndex(joined["time"].values)
    if not (np.diff(index.asi8) == HISTORY_SLOT_S * 10**9).all():
        raise ForecastError(f"scenario {scenario.name!r}: its history does not end where the "
                            "horizon begins; rebuild the scenario")
    origins = pd.date_range(start.floor("D"), (end - pd.Timedelta(seconds=1)).floor("D"),
                            freq="D")
    n_hours = int(index.get_indexer([origins[-1]])[0]) + horizon_h
    if n_hours > len(index):
        # The last origin's path reaches past the horizon: pad the (never read) future.
        pad = n_hours - len(index)
        index = index.append(pd.date_range(index[-1] + pd.Timedelta(hours=1), periods=pad,
                                           freq="h"))
    zones = {d.region: (d.grid_zone, d.timezone) for d in scenario.datacenters}
    paths: dict[str, dict[float, np.ndarray]] = {
        v: {q: np.empty((len(origins), horizon_h, len(regions))) for q in (0.1, 0.5, 0.9)}
        for v in VARIABLES}
    rho = {v: np.zeros((len(origins), len(regions))) for v in VARIABLES}
    cal_index = pd.date_range(index[0], periods=len(index) + MAX_HORIZON_H, freq="h")
    for j, region in enumerate(regions):
        zone, tz = zones.get(region, (region, "UTC"))
        cal = calendar(cal_index, zone, tz)
        for var in VARIABLES:
            other = VARIABLES[1] if var == VARIABLES[0] else VARIABLES[0]

            def values(v: str, region: str = region) -> np.ndarray:
                x = joined[v].sel(region=region).values.astype(float)
                return np.concatenate([x, np.full(len(index) - len(x), np.nan)])

            series = SeriesInput(name=f"{var} of {region}", index=index, values=values(var),
                                 calendar=cal, exog=values(other),
                                 nonnegative=var == "carbon_g_per_kwh")
            fc = rolling_forecast(series, origins, horizon_h, model)
            for q, arr in ((0.1, fc.q10), (0.5, fc.q50), (0.9, fc.q90)):
                paths[var][q][:, :, j] = arr
            rho[var][:, j] = fc.rho
    log.info("model forecasts for %s: %d origins x %d regions, %.0f days of history",
             scenario.name, len(origins), len(regions), days)
    return ModelForecast(model=model, origins=origins, regions=regions, horizon_h=horizon_h,
                         paths=paths, history_days=days, rho=rho)


def band_frame(scenario: Scenario, fm: ModelForecast, origin: pd.Timestamp, region: str,
               var: str) -> pd.DataFrame:
    """The forecast issued at ``origin`` for ``region``'s ``var`` against the truth, hourly
    over the issued horizon within the scenario: columns ``time`` (naive UTC), ``truth``,
    ``q10``, ``q50``, ``q90`` (the cube's unit)."""
    if var not in VARIABLES:
        raise ForecastError(f"unknown variable {var!r}; use one of {VARIABLES}")
    i = int(fm.origins.get_indexer([origin])[0])
    if i < 0:
        raise ForecastError(f"no forecast issued at {origin}; origins: "
                            f"{', '.join(str(o.date()) for o in fm.origins)}")
    j = fm.regions.index(region)
    start = pd.Timestamp(scenario.start).tz_convert("UTC").tz_localize(None)
    end = start + pd.Timedelta(seconds=scenario.slot_s * scenario.n_slots)
    times = pd.date_range(origin, periods=fm.horizon_h, freq="h")
    truth = _hourly(scenario.grid.sel(time=slice(start, end - pd.Timedelta(seconds=1))))
    truth_s = truth[var].sel(region=region).to_series()
    hist = scenario.history
    if hist is not None:
        truth_s = pd.concat([hist[var].sel(region=region).to_series(), truth_s])
    frame = pd.DataFrame({"time": times, "truth": truth_s.reindex(times).to_numpy(),
                          **{f"q{int(q * 100)}": fm.paths[var][q][i, :, j]
                             for q in (0.1, 0.5, 0.9)}})
    return frame[frame["time"] < end].reset_index(drop=True)
