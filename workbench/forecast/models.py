"""The candidate forecasters: each reads only the values before its origin.

Every function here takes ``past`` (the series strictly before the origin, hourly) and the
horizon ``horizon_h``, and returns the next ``horizon_h`` hourly values (index 0 is the hour
starting at the origin). None of them is given anything after the origin, so the rolling
origin cannot look ahead by construction; the tests perturb the future to check it.

- ``seasonal-naive``: ``y[o + k - 24 m]`` with ``m = ceil((k + 1) / 24)``: the same hour of
  the latest day before the origin. ``seasonal-naive-weekly``: the same hour a week earlier.
- ``harmonic``: a dynamic harmonic regression, the statistical model with daily and weekly
  seasonality: ``y_t = a + sum_k (b_k sin + c_k cos)(2 pi k t / 24) + sum_k (d_k sin + e_k cos)
  (2 pi k t / 168) + u_t`` fitted by ridge least squares on the last 28 days (recent days
  weighted more, half-life 7 days), with AR(1) errors ``u_{t+1} = phi u_t``: the forecast adds
  ``u_{o-1} phi^(k+1)`` to the seasonal fit.
- ``gbm``: LightGBM gradient-boosted trees with an absolute-error loss (a median forecast)
  on the lead, calendar (local hour, weekday, public holiday), the same hour one, two and
  seven days before, the last value and the 24 h and 168 h means, and the same lags of the
  zone's other series; every value is taken relative to the last day's median and divided
  by the last week's interquartile range / 1.349 (a spike-robust standard deviation), so that
  one model serves changing price levels and a few spikes do not inflate the next day's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from workbench.forecast.calendar import Calendar

if TYPE_CHECKING:
    from lightgbm import LGBMRegressor

Array = NDArray[np.float64]

DAY_H = 24
WEEK_H = 168
#: Hours of history the lag features need before an origin (a week plus a day).
MIN_LAG_H = WEEK_H + DAY_H
HARMONIC_WINDOW_H = 28 * DAY_H
HARMONIC_HALF_LIFE_H = 7 * DAY_H
HARMONIC_ORDERS = (4, 3)  # Fourier pairs for the daily and the weekly period


def seasonal_naive(past: Array, horizon_h: int, period_h: int = DAY_H) -> Array:
    """``y[o + k - P ceil((k + 1) / P)]`` for ``k = 0 .. H-1``, ``o = len(past)``."""
    o = len(past)
    k = np.arange(horizon_h)
    src = o + k - period_h * np.ceil((k + 1) / period_h).astype(int)
    if src.min() < 0:
        raise ValueError(f"seasonal naive of period {period_h} h needs {period_h} h of history, "
                         f"has {o}")
    return past[src].astype(float)


def _fourier(t: np.ndarray) -> Array:
    cols = []
    for period, order in zip((DAY_H, WEEK_H), HARMONIC_ORDERS, strict=True):
        for k in range(1, order + 1):
            w = 2 * math.pi * k * t / period
            cols += [np.sin(w), np.cos(w)]
    return np.column_stack(cols)


def harmonic(past: Array, horizon_h: int, t0: int) -> Array:
    """Dynamic harmonic regression forecast (see the module docstring).

    ``t0`` is the absolute hour number of the origin (hours since the epoch), so that the
    Fourier phases are those of the calendar.
    """
    from sklearn.linear_model import Ridge  # imported on use: keeps `import workbench` quick

    n = min(len(past), HARMONIC_WINDOW_H)
    if n < 2 * DAY_H:
        raise ValueError(f"the harmonic model needs 48 h of history, has {len(past)}")
    y = past[-n:]
    t = np.arange(t0 - n, t0, dtype=float)
    weights = 0.5 ** ((n - 1 - np.arange(n)) / HARMONIC_HALF_LIFE_H)
    reg = Ridge(alpha=1.0).fit(_fourier(t), y, sample_weight=weights)
    resid = y - reg.predict(_fourier(t))
    r0, r1 = resid[:-1], resid[1:]
    denom = float(r0 @ r0)
    phi = float(np.clip((r0 @ r1) / denom, 0.0, 0.999)) if denom > 0 else 0.0
    future = np.arange(t0, t0 + horizon_h, dtype=float)
    ar = resid[-1] * phi ** np.arange(1, horizon_h + 1)
    return np.asarray(reg.predict(_fourier(future)) + ar, dtype=float)


def _level_scale(past: Array) -> tuple[float, float]:
    level = float(np.median(past[-DAY_H:]))
    q25, q75 = np.quantile(past[-WEEK_H:], (0.25, 0.75))
    scale = float(q75 - q25) / 1.349
    return level, max(scale, 1e-6 * (abs(level) + 1.0))


def gbm_features(y_past: Array, x_past: Array | None, cal: Calendar, horizon_h: int) -> Array:
    """Feature rows ``(horizon_h, F)`` for the origin ``o = len(y_past)``.

    Reads ``y_past`` and ``x_past`` (the zone's other series, or None) only before the origin
    and the calendar at the targets ``o .. o + H - 1``.
    """
    o = len(y_past)
    if o < MIN_LAG_H:
        raise ValueError(f"the gbm features need {MIN_LAG_H} h of history, have {o}")
    k = np.arange(horizon_h)
    tau = o + k
    m = np.ceil((k + 1) / DAY_H).astype(int)
    cols: list[np.ndarray] = [k.astype(float),
                              cal.hour_local[tau].astype(float),
                              cal.weekday_local[tau].astype(float),
                              cal.holiday[tau]]
    for series in (y_past, x_past):
        if series is None:
            continue
        level, scale = _level_scale(series)

        def rel(v: np.ndarray, level: float = level, scale: float = scale) -> np.ndarray:
            return (v - level) / scale

        cols += [rel(series[tau - DAY_H * m]), rel(series[tau - DAY_H * (m + 1)]),
                 rel(series[tau - WEEK_H]),
                 np.full(horizon_h, rel(series[o - 1:o])[0]),
                 np.full(horizon_h, rel(np.array([series[-WEEK_H:].mean()]))[0]),
                 np.full(horizon_h, scale / (abs(level) + scale))]
    return np.column_stack(cols)


@dataclass(frozen=True)
class GbmModel:
    """A fitted gradient-boosted median model and the last origin its training data reach."""

    model: LGBMRegressor
    fitted_before: int

    def predict(self, y_past: Array, x_past: Array | None, cal: Calendar,
                horizon_h: int) -> Array:
        level, scale = _level_scale(y_past)
        z = np.asarray(self.model.predict(gbm_features(y_past, x_past, cal, horizon_h)),
                       dtype=float)
        return np.asarray(level + scale * z, dtype=float)


def fit_gbm(y_past: Array, x_past: Array | None, cal: Calendar, horizon_h: int,
            train_origins: np.ndarray) -> GbmModel:
    """Fit on the origins ``train_origins`` (each with ``origin + H <= len(y_past)``)."""
    from lightgbm import LGBMRegressor  # imported on use: keeps `import workbench` quick

    o = len(y_past)
    rows, targets = [], []
    for p in train_origins:
        p = int(p)
        if p + horizon_h > o:
            raise ValueError(f"training origin {p} + {horizon_h} h reaches past the data ({o})")
        yp = y_past[:p]
        level, scale = _level_scale(yp)
        rows.append(gbm_features(yp, None if x_past is None else x_past[:p], cal, horizon_h))
        targets.append((y_past[p:p + horizon_h] - level) / scale)
    # One thread: the data are small and the machine is shared.
    model = LGBMRegressor(objective="l1", n_estimators=150, learning_rate=0.08, num_leaves=15,
                          min_child_samples=40, subsample_freq=0, n_jobs=1, random_state=0,
                          verbose=-1)
    model.fit(np.vstack(rows), np.concatenate(targets))
    return GbmModel(model=model, fitted_before=o)
