"""Rolling-origin forecasts: every candidate issued at each origin from the past only, then
selected or combined by its own past errors, with quantiles from the past errors too.

At origin ``o`` (an hour index), candidate ``c`` gives a path ``f_c[o, 0..H-1]`` computed from
``y[:o]`` (see :mod:`workbench.forecast.models`). An earlier origin ``j`` is *scored* at ``o``
once its whole path is observed (``j + H <= o``). Over the last ``window`` scored origins:

- ``MAE_c = mean |y[j + k] - f_c[j, k]|``; a candidate needs ``min_scored`` scored origins;
- ``auto`` weights ``w_c = MAE_c^-2 / sum MAE^-2`` over its members (:data:`COMBINATIONS`)
  with ``MAE_c <= 1.25 min MAE`` (Bates-Granger inverse-error weights among the near-best), so
  the combination leans on whatever has forecast this series best lately, naive included;
  ``auto-lear`` weights the same way with LEAR (:mod:`workbench.forecast.lear`) one more
  member;
- the band adds quantiles of the issued forecast's own past errors ``e = y - f`` (pooled over
  each day of lead) to the point forecast: ``q10 = f + min(Q_{a/2}(e), 0)``, ``q50 = f``,
  ``q90 = f + max(Q_{1-a/2}(e), 0)``, so ``q10 <= q50 <= q90`` always. The level ``a`` starts
  at 0.2 and is adapted after every scored origin, ``a <- a + 0.03 (0.2 - miss)`` with
  ``miss`` the share of that origin's truth outside its band (adaptive conformal inference,
  Gibbs and Candes 2021), so the band's long-run coverage tracks 80 % when errors drift;
- how long an error lasts: ``rho``, the hour-to-hour persistence of the same past errors
  (:func:`error_persistence`, an AR(1) coefficient through 0 in [0, 0.99]), with which a
  forecast is revised within its day once the truth leaves the band
  (:meth:`workbench.forecast.scenario.ModelForecast.revised`).

Before ``min_scored`` origins are scored, the forecast is the daily seasonal naive and the band
comes from its in-sample errors over the last week. A candidate without a path at an origin
(``gbm`` before 14 training origins, ``lear`` before :data:`~workbench.forecast.lear.LEAR_MIN_H`
hours of history) is not scored there: a combination does without it, a named model gives the
seasonal naive until it has ``min_scored`` scored origins (logged). Both learnt models are
refitted weekly (``gbm`` on the last 120 days, ``lear`` on its calibration windows) and
issue a fresh forecast from the latest data every day.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from workbench.cubes import CubeError
from workbench.forecast.calendar import Calendar
from workbench.forecast.lear import LEAR_MIN_H, LearModel, fit_lear
from workbench.forecast.models import (
    DAY_H,
    MIN_LAG_H,
    WEEK_H,
    Array,
    GbmModel,
    fit_gbm,
    harmonic,
    seasonal_naive,
)

log = logging.getLogger(__name__)

CANDIDATES = ("seasonal-naive", "seasonal-naive-weekly", "harmonic", "gbm", "lear")
COMBINATIONS: dict[str, tuple[str, ...]] = {
    "auto": ("seasonal-naive", "seasonal-naive-weekly", "harmonic", "gbm"),
    "auto-lear": CANDIDATES,
}
"""Each combination's members: candidates weighted by their own past errors."""
MODELS = (*COMBINATIONS, *CANDIDATES)
DEFAULT_MODEL = "auto"
QUANTILES = (0.1, 0.5, 0.9)
WINDOW_ORIGINS = 28
MIN_SCORED = 7
GBM_REFIT_H = 7 * DAY_H
GBM_TRAIN_H = 120 * DAY_H
GBM_MIN_TRAIN = 14
LEAR_REFIT_H = 7 * DAY_H
NEAR_BEST = 1.25
ALPHA = 0.2  # 1 - the band's target coverage (10 % .. 90 %)
ACI_GAMMA = 0.03
ALPHA_BOUNDS = (0.02, 0.6)
MAX_HORIZON_H = WEEK_H


class ForecastError(CubeError):
    """A forecast cannot be made from the data given; the message names the series and what
    is missing."""


@dataclass(frozen=True)
class SeriesInput:
    """One hourly series to forecast, with what else is known about its zone.

    Attributes
    ----------
    name : str
        Names the series in errors, e.g. ``"DE-LU price_per_kwh"``.
    index : DatetimeIndex
        Hourly, naive UTC, gap-free; ``calendar`` must cover it plus the longest horizon.
    values : ndarray
        The series on ``index`` (finite).
    calendar : Calendar
        Calendar features on ``index`` extended by ``MAX_HORIZON_H`` hours.
    exog : ndarray or None
        The zone's other series on ``index`` (only its past is read), or None.
    nonnegative : bool
        Clip forecasts and bands at 0 (carbon intensity).
    """

    name: str
    index: pd.DatetimeIndex
    values: Array
    calendar: Calendar
    exog: Array | None = None
    nonnegative: bool = False

    def position(self, when: pd.Timestamp) -> int:
        pos = self.index.get_indexer([when])[0]
        if pos < 0:
            raise ForecastError(f"{self.name}: no hour {when.isoformat()} in the series "
                                f"({self.index[0]} .. {self.index[-1]})")
        return int(pos)


@dataclass(frozen=True)
class RollingForecast:
    """Forecasts issued at ``origins``: arrays ``(origins, horizon_h)`` in the series' unit.

    ``weights`` is ``(origins, len(CANDIDATES))``: the weight each candidate got (one-hot
    for a named model; all on ``seasonal-naive`` while too few origins are scored).
    """

    name: str
    model: str
    horizon_h: int
    origins: pd.DatetimeIndex
    q10: Array
    q50: Array
    q90: Array
    seasonal_naive: Array
    weights: Array
    candidates: dict[str, Array] = field(default_factory=dict)
    rho: Array = field(default_factory=lambda: np.zeros(0))
    """Per origin, the hour-to-hour persistence of the past errors (:func:`error_persistence`
    of the errors the band is made of)."""


def error_persistence(err: Array) -> float:
    """How much of an hour's forecast error is left the next hour: the least-squares AR(1)
    coefficient through 0 of the errors ``e`` along each row (consecutive hours; rows are
    separate paths)::

        rho = sum_k e_k e_{k+1} / sum_k e_k^2,   clipped to [0, 0.99]

    0 without errors or with fewer than two hours per row."""
    e = np.atleast_2d(np.asarray(err, dtype=float))
    if e.shape[1] < 2:
        return 0.0
    a, b = e[:, :-1], e[:, 1:]
    ok = np.isfinite(a) & np.isfinite(b)
    den = float(np.sum(np.where(ok, a * a, 0.0)))
    if den <= 1e-12:
        return 0.0
    return float(np.clip(np.sum(np.where(ok, a * b, 0.0)) / den, 0.0, 0.99))


def _mae(errors: dict[str, np.ndarray]) -> np.ndarray:
    """Mean of each candidate's per-origin MAE row; NaN with fewer than MIN_SCORED."""
    mae = np.full(len(CANDIDATES), np.nan)
    for i, c in enumerate(CANDIDATES):
        e = errors[c]
        ok = np.isfinite(e)
        if ok.sum() >= MIN_SCORED:
            mae[i] = float(e[ok].mean())
    return mae


def _weights(errors: dict[str, np.ndarray], model: str) -> np.ndarray | None:
    """Weights over CANDIDATES from their per-origin MAE rows (NaN: no forecast)."""
    mae = _mae(errors)
    if model not in COMBINATIONS:
        i = CANDIDATES.index(model)
        if not np.isfinite(mae[i]):
            return None
        w = np.zeros(len(CANDIDATES))
        w[i] = 1.0
        return w
    members = np.array([c in COMBINATIONS[model] for c in CANDIDATES])
    mae = np.where(members, mae, np.nan)
    if not np.isfinite(mae).any():
        return None
    best = float(np.nanmin(mae))
    near = np.isfinite(mae) & (mae <= NEAR_BEST * best)
    w = np.where(near, 1.0 / np.maximum(mae, 1e-12) ** 2, 0.0)
    return np.asarray(w / w.sum(), dtype=float)



@dataclass
class _Fitted:
    """The learnt candidates of one rolling run, refitted as they age (``gbm`` every
    :data:`GBM_REFIT_H`, ``lear`` every :data:`LEAR_REFIT_H` hours)."""

    gbm: GbmModel | None = None
    lear: LearModel | None = None

    def issue(self, c: str, series: SeriesInput, y: Array, x: Array | None, o: int,
              horizon_h: int) -> Array:
        """Candidate ``c``'s path at origin ``o`` from ``y[:o]`` (and ``x[:o]``); all NaN
        where the candidate cannot forecast yet."""
        past = y[:o]
        xp = None if x is None else x[:o]
        if c == "seasonal-naive":
            return seasonal_naive(past, horizon_h, DAY_H)
        if c == "seasonal-naive-weekly":
            return seasonal_naive(past, horizon_h, WEEK_H)
        if c == "harmonic":
            t0 = int(series.index[0].value // 3_600_000_000_000) + o
            return harmonic(past, horizon_h, t0)
        if c == "gbm":
            if self.gbm is None or o - self.gbm.fitted_before >= GBM_REFIT_H:
                lo = max(MIN_LAG_H, o - GBM_TRAIN_H)
                # Daily origins o' = o - 24 j whose whole path lies before o.
                first = o - DAY_H * int(np.ceil(horizon_h / DAY_H))
                train = np.arange(first, lo - 1, -DAY_H)[::-1]
                if len(train) >= GBM_MIN_TRAIN:
                    self.gbm = fit_gbm(past, xp, series.calendar, horizon_h, train)
            if self.gbm is not None:
                return self.gbm.predict(past, xp, series.calendar, horizon_h)
        if c == "lear":
            if o >= LEAR_MIN_H and (self.lear is None
                                    or o - self.lear.fitted_before >= LEAR_REFIT_H):
                self.lear = fit_lear(past, series.calendar)
            if self.lear is not None:
                return self.lear.predict(past, horizon_h, series.calendar)
        return np.full(horizon_h, np.nan)


def rolling_forecast(
    series: SeriesInput,
    origins: Sequence[pd.Timestamp] | pd.DatetimeIndex,
    horizon_h: int,
    model: str = DEFAULT_MODEL,
    warmup_origins: int = WINDOW_ORIGINS,
) -> RollingForecast:
    """Issue a forecast at each of ``origins`` (daily, same hour of day, ascending).

    Each forecast reads the series strictly before its origin. To have past errors to select
    by at the first origin, candidates are also issued at up to ``warmup_origins`` daily
    origins before it (as far as the history allows); those are not returned.

    The boosted trees run on one thread: their data are small, and OpenMP threads on a
    shared machine cost more in waiting than they save.

    Raises
    ------
    ForecastError
        Unknown model, horizon outside 1..168 h, origins not daily, or too little history.
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="openmp"):
        return _rolling(series, origins, horizon_h, model, warmup_origins)


def _rolling(
    series: SeriesInput,
    origins: Sequence[pd.Timestamp] | pd.DatetimeIndex,
    horizon_h: int,
    model: str = DEFAULT_MODEL,
    warmup_origins: int = WINDOW_ORIGINS,
) -> RollingForecast:
    if model not in MODELS:
        raise ForecastError(f"unknown forecast model {model!r}; use one of {MODELS}")
    if not 1 <= horizon_h <= MAX_HORIZON_H:
        raise ForecastError(f"horizon {horizon_h} h is outside 1 .. {MAX_HORIZON_H} h")
    idx = pd.DatetimeIndex(origins)
    if idx.empty:
        raise ForecastError(f"{series.name}: no forecast origins")
    pos = np.array([series.position(t) for t in idx])
    if len(pos) > 1 and np.any(np.diff(pos) % DAY_H) or np.any(np.diff(pos) <= 0):
        raise ForecastError(f"{series.name}: origins must be ascending and whole days apart")
    if pos[0] < MIN_LAG_H + DAY_H:
        have = pos[0] / DAY_H
        raise ForecastError(
            f"{series.name}: {have:.1f} days of history before {idx[0]}, the models need at "
            f"least {(MIN_LAG_H + DAY_H) / DAY_H:.0f}; import earlier data or start later")
    if pos[-1] > len(series.values):
        raise ForecastError(f"{series.name}: origin {idx[-1]} is after the series' end")
    n_cal = len(series.calendar.hour_local)
    if pos[-1] + horizon_h > n_cal:
        raise ForecastError(f"{series.name}: calendar ends before {idx[-1]} + {horizon_h} h")
    y = np.asarray(series.values, dtype=float)
    x = None if series.exog is None else np.asarray(series.exog, dtype=float)
    n_warm = int(min(warmup_origins, (pos[0] - MIN_LAG_H) // DAY_H))
    warm = pos[0] - DAY_H * np.arange(n_warm, 0, -1)
    every = np.concatenate([warm, pos]).astype(int)
    n = len(every)
    paths = {c: np.full((n, horizon_h), np.nan) for c in CANDIDATES}
    # Per origin i and candidate: MAE of its path once scored (NaN until then / if absent).
    mae_rows = {c: np.full(n, np.nan) for c in CANDIDATES}
    q10 = np.full((n, horizon_h), np.nan)
    q50 = np.full((n, horizon_h), np.nan)
    q90 = np.full((n, horizon_h), np.nan)
    weights = np.zeros((n, len(CANDIDATES)))
    rho = np.zeros(n)
    fitted = _Fitted()
    want = COMBINATIONS.get(model, ("seasonal-naive", model))
    alpha = ALPHA
    scored_upto = 0  # origins every[:scored_upto] have their MAE filled
    blocks = np.arange(horizon_h) // DAY_H
    for i, o in enumerate(every):
        past = y[:o]
        for c in want:
            paths[c][i] = fitted.issue(c, series, y, x, int(o), horizon_h)
        # Score the origins whose paths are now fully observed.
        while scored_upto < i and every[scored_upto] + horizon_h <= o:
            j = scored_upto
            truth = y[every[j]:every[j] + horizon_h]
            for c in want:
                mae_rows[c][j] = float(np.abs(truth - paths[c][j]).mean())
            miss = float(np.mean((truth < q10[j]) | (truth > q90[j])))
            alpha = float(np.clip(alpha + ACI_GAMMA * (ALPHA - miss), *ALPHA_BOUNDS))
            scored_upto += 1
        lo_j = max(0, scored_upto - WINDOW_ORIGINS)
        window = {c: mae_rows[c][lo_j:scored_upto] for c in CANDIDATES}
        w = _weights(window, model)
        if w is None:
            w = np.zeros(len(CANDIDATES))
            w[0] = 1.0
            point = paths["seasonal-naive"][i]
        else:
            point = sum(wc * paths[c][i] for c, wc in zip(CANDIDATES, w, strict=True)
                        if wc > 0)
        js = np.arange(lo_j, scored_upto)
        js = js[np.isfinite(q50[js]).all(axis=1)] if len(js) else js
        levels = (alpha / 2, 1 - alpha / 2)
        lo_e = np.empty(horizon_h)
        hi_e = np.empty(horizon_h)
        if len(js) >= MIN_SCORED:
            err = np.stack([y[every[j]:every[j] + horizon_h] for j in js]) - q50[js]
            for b in np.unique(blocks):
                e = err[:, blocks == b].ravel()
                lo_e[blocks == b], hi_e[blocks == b] = np.quantile(e, levels)
            rho[i] = error_persistence(err)
        else:
            resid = past[-WEEK_H:] - past[-WEEK_H - DAY_H:-DAY_H]
            lo_e[:], hi_e[:] = np.quantile(resid, levels)
            rho[i] = error_persistence(resid)
        point = np.asarray(point, dtype=float)
        lo = point + np.minimum(lo_e, 0.0)
        hi = point + np.maximum(hi_e, 0.0)
        if series.nonnegative:
            point, lo, hi = (np.maximum(a, 0.0) for a in (point, lo, hi))
        q10[i], q50[i], q90[i] = lo, point, hi
        weights[i] = w
    keep = slice(n_warm, n)
    if model not in COMBINATIONS:
        short = int((weights[keep, CANDIDATES.index(model)] == 0).sum())
        if short:
            log.info("%s: %s had too little history or too few scored origins at %d of %d "
                     "origins; the seasonal naive stands in there", series.name, model,
                     short, len(idx))
    return RollingForecast(
        name=series.name, model=model, horizon_h=horizon_h, origins=idx,
        q10=q10[keep], q50=q50[keep], q90=q90[keep],
        seasonal_naive=paths["seasonal-naive"][keep], weights=weights[keep],
        candidates={c: paths[c][keep] for c in want}, rho=rho[keep],
    )
