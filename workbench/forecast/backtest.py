"""Backtests: one forecast issued every day at 00:00 UTC, scored against the stored series.

Scores over all origins ``o`` and leads ``k < H`` (truth ``y``, median forecast ``f``, band
``[q10, q90]``):

- ``mae = mean |y - f|``, ``rmse = sqrt(mean (y - f)^2)``, in the series' unit;
- ``mape = mean |y - f| / |y|`` (a fraction), only when every true value stays away from
  zero (``|y| >= 0.1 mean |y|``), else None: prices go negative;
- ``mae_seasonal_naive``: the MAE of the daily seasonal naive at the same origins;
- ``coverage_80 = mean [q10 <= y <= q90]``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

from workbench.cubes import values_on_grid
from workbench.forecast.calendar import calendar
from workbench.forecast.models import DAY_H, MIN_LAG_H
from workbench.forecast.rolling import (
    DEFAULT_MODEL,
    MAX_HORIZON_H,
    ForecastError,
    RollingForecast,
    SeriesInput,
    rolling_forecast,
)

log = logging.getLogger(__name__)

KINDS = {"price": "price_per_kwh", "carbon": "carbon_g_per_kwh"}
#: Days of gap-free history the model needs before the first origin.
MIN_HISTORY_DAYS = 28
#: Days of history read before the first origin (training window, warm-up, lags).
HISTORY_DAYS = 160
MAPE_FLOOR = 0.1
HOUR_S = 3600


def _ts(value: datetime | str | pd.Timestamp) -> pd.Timestamp:
    ts = pd.Timestamp(value)
    return ts.tz_convert("UTC").tz_localize(None) if ts.tz is not None else ts


def _first_hole(values: np.ndarray) -> int | None:
    bad = np.flatnonzero(~np.isfinite(values))
    return int(bad[0]) if bad.size else None


def series_input(
    rows: pd.DataFrame, region: str, kind: str, start: pd.Timestamp, end: pd.Timestamp,
    timezone: str = "UTC", min_history_days: int = MIN_HISTORY_DAYS,
    history_days: int = HISTORY_DAYS,
) -> SeriesInput:
    """The hourly series ``kind`` of ``region`` from long grid rows, from up to
    ``history_days`` before ``start`` until ``end`` (exclusive), with the zone's other kind
    as exogenous input when it covers the same hours.

    Raises
    ------
    ForecastError
        The rows hold no such series, it has a hole at or after ``start``, or fewer than
        ``min_history_days`` gap-free days precede ``start``.
    """
    if kind not in KINDS:
        raise ForecastError(f"unknown kind {kind!r}; use one of {sorted(KINDS)}")
    var = KINDS[kind]
    label = f"{kind} series of {region}"
    has = var in rows and len(rows)
    mine = rows[(rows["region"] == region) & rows[var].notna()] if has else rows.iloc[:0]
    if mine.empty:
        held = sorted(rows.loc[rows[var].notna(), "region"].unique()) if has else []
        raise ForecastError(f"the store holds no {label} (regions with {kind}: "
                            f"{', '.join(held) or 'none'}); import it first")
    first = pd.Timestamp(mine["time_utc"].min())
    first = (first.tz_convert("UTC").tz_localize(None) if first.tz is not None else first).ceil("h")
    lo = max(first, start - pd.Timedelta(days=history_days))
    if lo > start - pd.Timedelta(days=min_history_days):
        have = max((start - lo) / pd.Timedelta(days=1), 0.0)
        raise ForecastError(f"{label}: {have:.1f} days of history before "
                            f"{start.isoformat()}, need >= {min_history_days}; import earlier "
                            "data or start later")
    grid = pd.date_range(lo, end, freq="h", inclusive="left")
    values = values_on_grid(mine, var, grid, HOUR_S, region)
    at = int(grid.get_indexer([start])[0])
    hole = _first_hole(values[at:])
    if hole is not None:
        t = grid[at + hole]
        raise ForecastError(f"{label} has a gap: no value at {t.isoformat()} UTC (needed until "
                            f"{end.isoformat()}); import that period or end earlier")
    before = np.flatnonzero(~np.isfinite(values[:at]))
    if before.size:
        cut = int(before[-1]) + 1
        days = (at - cut) / DAY_H
        if days < min_history_days:
            raise ForecastError(
                f"{label} has a gap at {grid[int(before[-1])].isoformat()} UTC, leaving "
                f"{days:.1f} gap-free days before {start.isoformat()}, need >= "
                f"{min_history_days}; import that period or start later")
        grid, values = grid[cut:], values[cut:]
    other_var = KINDS["carbon" if kind == "price" else "price"]
    exog = None
    other = rows[(rows["region"] == region) & rows[other_var].notna()] if other_var in rows \
        else rows.iloc[:0]
    if not other.empty:
        x = values_on_grid(other, other_var, grid, HOUR_S, region)
        if np.isfinite(x).all():
            exog = x
    cal_index = pd.date_range(grid[0], periods=len(grid) + MAX_HORIZON_H, freq="h")
    return SeriesInput(name=label, index=grid, values=values,
                       calendar=calendar(cal_index, region, timezone), exog=exog,
                       nonnegative=kind == "carbon")


@dataclass(frozen=True)
class BacktestResult:
    """Scores of a backtest (see the module docstring) and the forecasts behind them."""

    region: str
    kind: str
    model: str
    horizon_h: int
    mae: float
    rmse: float
    mape: float | None
    mae_seasonal_naive: float
    coverage_80: float
    origins: int
    unit: str
    forecast: RollingForecast
    truth: np.ndarray

    def to_json(self) -> dict[str, Any]:
        """The CLI's record: exactly the documented keys."""
        return {"region": self.region, "kind": self.kind, "model": self.model,
                "horizon_h": self.horizon_h, "mae": self.mae, "rmse": self.rmse,
                "mape": self.mape, "mae_seasonal_naive": self.mae_seasonal_naive,
                "coverage_80": self.coverage_80, "origins": self.origins}


def score(truth: np.ndarray, fc: RollingForecast) -> dict[str, Any]:
    """MAE, RMSE, MAPE (or None), seasonal-naive MAE and 80 % coverage of ``fc``."""
    err = truth - fc.q50
    ok = np.abs(truth) >= MAPE_FLOOR * float(np.abs(truth).mean())
    mape = float(np.mean(np.abs(err) / np.abs(truth))) if ok.all() else None
    return {
        "mae": float(np.mean(np.abs(err))),
        "rmse": float(np.sqrt(np.mean(err ** 2))),
        "mape": mape,
        "mae_seasonal_naive": float(np.mean(np.abs(truth - fc.seasonal_naive))),
        "coverage_80": float(np.mean((fc.q10 <= truth) & (truth <= fc.q90))),
    }


def daily_origins(start: datetime | str, end: datetime | str) -> pd.DatetimeIndex:
    """00:00 UTC of every day from ``start`` (rounded up to a day) to before ``end``."""
    lo, hi = _ts(start).ceil("D"), _ts(end)
    origins = pd.date_range(lo, hi, freq="D", inclusive="left")
    if origins.empty:
        raise ForecastError(f"no 00:00 UTC origin in {lo.isoformat()} .. {hi.isoformat()}")
    return origins


def backtest_series(series: SeriesInput, origins: pd.DatetimeIndex, horizon_h: int,
                    model: str = DEFAULT_MODEL, region: str = "", kind: str = "",
                    unit: str = "") -> BacktestResult:
    """Forecast at each origin and score against ``series`` itself."""
    fc = rolling_forecast(series, origins, horizon_h, model)
    pos = np.array([series.position(t) for t in origins])
    if pos[-1] + horizon_h > len(series.values):
        raise ForecastError(f"{series.name}: the series ends at {series.index[-1]}, the "
                            f"backtest needs it until {origins[-1]} + {horizon_h} h")
    truth = np.stack([series.values[p:p + horizon_h] for p in pos])
    return BacktestResult(region=region, kind=kind, model=model, horizon_h=horizon_h,
                          origins=len(origins), unit=unit, forecast=fc, truth=truth,
                          **score(truth, fc))


def backtest(store: Any, region: str, kind: str, start: datetime | str, end: datetime | str,
             horizon_h: int = DAY_H, model: str = DEFAULT_MODEL,
             timezone: str = "UTC") -> BacktestResult:
    """Backtest ``model`` on the store's ``kind`` series of ``region``: one forecast of the
    next ``horizon_h`` hours every day at 00:00 UTC in ``[start, end)``.

    Raises
    ------
    ForecastError
        No such series, a gap, too little history before ``start``, or data ending before
        the last origin's horizon.
    """
    origins = daily_origins(start, end)
    last = origins[-1] + pd.Timedelta(hours=horizon_h)
    lo = origins[0] - pd.Timedelta(days=HISTORY_DAYS)
    rows = store.grid_series([region], lo.to_pydatetime(), last.to_pydatetime())
    if rows.empty:
        held = [r for r in store.grid_regions()]
        raise ForecastError(f"the store holds no {kind} series of {region} in "
                            f"{lo.date()} .. {last.date()} (regions: {', '.join(held) or 'none'})")
    series = series_input(rows, region, kind, origins[0], last, timezone)
    unit = "gCO2/kWh" if kind == "carbon" else (
        f"{rows['currency'].dropna().iloc[0]}/kWh" if rows["currency"].notna().any() else "")
    if MIN_LAG_H > len(series.values):
        raise ForecastError(f"{series.name}: too short")
    return backtest_series(series, origins, horizon_h, model, region, kind, unit)
