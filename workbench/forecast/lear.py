"""LEAR: the LASSO-estimated autoregressive day-ahead model of Lago et al. (2021).

Built from its description in "Forecasting day-ahead electricity prices: A review of
state-of-the-art algorithms, best practices and an open-access benchmark" (Applied Energy
293, 116983), the benchmark of ``epftoolbox``; no code of that package is used. Like the
other candidates (:mod:`workbench.forecast.models`) it reads ``past`` (hourly, strictly
before the origin ``o = len(past)``) and returns the next ``horizon_h`` hourly values.

For a calibration window of ``W`` days before the origin:

- the series is made variance-stable: ``z = asinh((y - m) / s)`` with ``m`` the median and
  ``s = 1.4826 MAD`` (the normal-consistent median absolute deviation) of the window's
  values, lags included; forecasts go back by ``y = m + s sinh(z)``;
- one linear model per hour ``h = 0..23`` of the day that starts at the origin,
  ``z_{d,h} = b_h + sum_{l in (1, 2, 3, 7)} sum_{g=0}^{23} a_{h,l,g} z_{d-l,g}
  + sum_{w=1}^{6} c_{h,w} [weekday_h = w]``: every hour of the days ``d-1, d-2, d-3`` and
  ``d-7`` and the local weekday of the target hour (Monday the base), fitted on the ``W``
  days before ``d``;
- each model is a LASSO whose penalty is chosen on the LARS path by the Akaike criterion
  ``AIC = n log(RSS / n) + 2 df`` (``df``: non-zero coefficients, at most ``n / 2``);
- days after the first are forecast recursively: day ``d + 1``'s lag ``d`` is day ``d``'s
  forecast (the paper forecasts one day; the planner looks two ahead);
- the forecasts of the windows :data:`LEAR_WINDOWS_DAYS` (8 and 12 weeks, a year) are
  averaged in the series' unit. A window longer than the history is cut to the history; one
  shorter than :data:`LEAR_MIN_DAYS` days is dropped, and with none left :func:`lear`
  raises.

Unlike the paper there are no exogenous day-ahead forecasts (load, wind, solar): the data
here hold none, and the zone's other series is only known up to the origin.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench.forecast.calendar import Calendar
from workbench.forecast.models import DAY_H, Array

#: The lagged days whose 24 hours feed every hour's model.
LEAR_LAG_DAYS = (1, 2, 3, 7)
#: Calibration windows (days) whose forecasts are averaged.
LEAR_WINDOWS_DAYS = (56, 84, 364)
#: The shortest calibration window (days) a forecast is made from.
LEAR_MIN_DAYS = 28
#: Hours of history :func:`lear` needs before an origin: the shortest window and its lags.
LEAR_MIN_H = (LEAR_MIN_DAYS + max(LEAR_LAG_DAYS)) * DAY_H
MAD_TO_SD = 1.4826


def lear_windows(n_past_h: int) -> tuple[int, ...]:
    """The calibration windows (days) a history of ``n_past_h`` hours allows: each of
    :data:`LEAR_WINDOWS_DAYS` cut to the days with a full set of lags, those shorter than
    :data:`LEAR_MIN_DAYS` dropped."""
    available = (n_past_h - max(LEAR_LAG_DAYS) * DAY_H) // DAY_H
    return tuple(sorted({min(w, available) for w in LEAR_WINDOWS_DAYS
                         if min(w, available) >= LEAR_MIN_DAYS}))


def _lags(z: Array, starts: np.ndarray) -> Array:
    """``(len(starts), 24 * len(LEAR_LAG_DAYS))``: every hour of the lagged days of the days
    starting at ``starts``."""
    g = np.arange(DAY_H)
    cols = [z[starts[:, None] - lag * DAY_H + g[None, :]] for lag in LEAR_LAG_DAYS]
    return np.hstack(cols)


def _weekdays(cal: Calendar, hours: np.ndarray) -> Array:
    """Weekday dummies (Tuesday .. Sunday; Monday the base) of the local weekday at
    ``hours``."""
    wd = cal.weekday_local[hours]
    return (wd[:, None] == np.arange(1, 7)[None, :]).astype(float)


def lasso_aic(x: Array, y: Array) -> tuple[float, Array]:
    """Intercept and coefficients of the LASSO on the LARS path with the least
    ``AIC = n log(RSS / n) + 2 df`` among the steps with ``df <= n / 4`` (at least four
    days per coefficient: the criterion is unreliable as ``df`` nears ``n``, and the path's
    later steps cost CPU)."""
    from sklearn.linear_model import lars_path  # imported on use: keeps `import` quick

    n = len(y)
    most = max(n // 4, 1)
    x_mean, y_mean = x.mean(axis=0), float(y.mean())
    xc, yc = x - x_mean, y - y_mean
    _, _, coefs = lars_path(xc, yc, method="lasso", max_iter=min(most, x.shape[1]) + 10)
    rss = ((yc[:, None] - xc @ coefs) ** 2).sum(axis=0)
    df = (np.abs(coefs) > 0).sum(axis=0)
    aic = n * np.log(np.maximum(rss, 1e-300) / n) + 2 * df
    aic[df > most] = np.inf
    beta = coefs[:, int(np.argmin(aic))]
    return y_mean - float(x_mean @ beta), np.asarray(beta, dtype=float)


@dataclass(frozen=True)
class LearWindow:
    """The 24 hourly models fitted on one calibration window: the transform's median and
    scale, ``intercept`` ``(24,)`` and ``beta`` ``(24, 24 * lags + 6)``."""

    window_d: int
    median: float
    scale: float
    intercept: Array
    beta: Array

    def forecast(self, past: Array, days_ahead: int, cal: Calendar) -> Array:
        """The next ``days_ahead * 24`` hours from the origin ``len(past)``, later days from
        the earlier days' forecasts."""
        o = len(past)
        z = np.concatenate([np.arcsinh((past - self.median) / self.scale),
                            np.zeros(days_ahead * DAY_H)])
        hours = np.arange(DAY_H)
        for d in range(days_ahead):
            start = o + d * DAY_H
            x = np.hstack([np.repeat(_lags(z, np.array([start])), DAY_H, axis=0),
                           _weekdays(cal, start + hours)])
            z[start:start + DAY_H] = self.intercept + (x * self.beta).sum(axis=1)
        return np.asarray(self.median + self.scale * np.sinh(z[o:]), dtype=float)


@dataclass(frozen=True)
class LearModel:
    """LEAR fitted on the history before ``fitted_before`` (an hour index): one
    :class:`LearWindow` per calibration window."""

    windows: tuple[LearWindow, ...]
    fitted_before: int

    def predict(self, past: Array, horizon_h: int, cal: Calendar) -> Array:
        """The mean of the windows' forecasts of the ``horizon_h`` hours from the origin
        ``len(past)``; ``cal`` covers the series from its first hour to the origin +
        horizon."""
        if len(cal.weekday_local) < len(past) + horizon_h:
            raise ValueError(f"the calendar ends before the origin + {horizon_h} h")
        days_ahead = -(-horizon_h // DAY_H)
        y = np.asarray(past, dtype=float)
        paths = [w.forecast(y, days_ahead, cal) for w in self.windows]
        return np.asarray(np.mean(paths, axis=0)[:horizon_h], dtype=float)


def _fit_window(past: Array, cal: Calendar, window_d: int) -> LearWindow:
    o = len(past)
    span = past[o - (window_d + max(LEAR_LAG_DAYS)) * DAY_H:]
    m = float(np.median(span))
    s = MAD_TO_SD * float(np.median(np.abs(span - m)))
    s = max(s, 1e-6 * (abs(m) + 1.0))
    z = np.arcsinh((past - m) / s)
    starts = o - DAY_H * np.arange(window_d, 0, -1)
    lags = _lags(z, starts)
    targets = z[starts[:, None] + np.arange(DAY_H)[None, :]]
    fits = [lasso_aic(np.hstack([lags, _weekdays(cal, starts + h)]), targets[:, h])
            for h in range(DAY_H)]
    return LearWindow(window_d=window_d, median=m, scale=s,
                      intercept=np.array([b for b, _ in fits]),
                      beta=np.vstack([beta for _, beta in fits]))


def fit_lear(past: Array, cal: Calendar) -> LearModel:
    """Fit LEAR's hourly models on each calibration window before ``len(past)`` (see the
    module docstring).

    Raises
    ------
    ValueError
        Fewer than :data:`LEAR_MIN_H` hours of history (the shortest window and its lags).
    """
    windows = lear_windows(len(past))
    if not windows:
        raise ValueError(f"LEAR needs {LEAR_MIN_H // DAY_H} days of history (a "
                         f"{LEAR_MIN_DAYS}-day calibration window and {max(LEAR_LAG_DAYS)} "
                         f"days of lags), has {len(past) / DAY_H:.1f}")
    y = np.asarray(past, dtype=float)
    return LearModel(windows=tuple(_fit_window(y, cal, w) for w in windows),
                     fitted_before=len(y))


def lear(past: Array, horizon_h: int, cal: Calendar) -> Array:
    """LEAR fitted at the origin ``len(past)`` and its forecast of the next ``horizon_h``
    hours (:func:`fit_lear`, :meth:`LearModel.predict`); raises ValueError as
    :func:`fit_lear`."""
    return fit_lear(past, cal).predict(past, horizon_h, cal)
