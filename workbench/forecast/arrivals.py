"""Job arrivals: a task-frequency model per job class, by hour of week.

For class ``c`` and hour of week ``w`` (0 = Monday 00:00 UTC), fitted on the hours a trace
spans:

- arrival rate ``lambda[c, w] = (N[c, w] + k m[c]) / (n[w] + k)`` jobs per hour, where
  ``N[c, w]`` counts the class's arrivals in hours of week ``w``, ``n[w]`` the number of such
  hours observed, ``m[c]`` the class's mean rate over all hours and ``k = 1`` a prior of one
  week at the mean (so an hour seen once is not taken at face value);
- GPUs requested per hour ``g[c, w] = lambda[c, w] * mean GPUs per job of class c``;
- GPUs busy from jobs arriving after a time ``t0``: ``B(t) = sum_{s = t0}^{t} g[c, w(s)]
  S_c(t - s)`` with ``S_c(d)`` the class's empirical share of jobs running longer than ``d``
  hours (a job without a duration in the trace counts as running one hour).

Classes are the application where the trace names one, else the GPU count: ``1 GPU``,
``2-4 GPUs``, ``5-8 GPUs``, ``>8 GPUs``. Traces whose times are seconds from their start
(Alibaba, GAIA, Pollux workloads) are anchored at ``anchor`` (default a Monday 00:00 UTC).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from workbench.forecast.models import WEEK_H
from workbench.forecast.rolling import ForecastError
from workbench.io.jobs import (
    Trace,
    read_alibaba_pods,
    read_gaia,
    read_philly,
    read_pollux_workload,
)

TRACE_FORMATS: dict[str, Callable[[str | Path], Trace]] = {
    "philly": read_philly, "alibaba-pods": read_alibaba_pods,
    "pollux-workload": read_pollux_workload, "gaia": read_gaia,
}
#: Monday 2024-01-01 00:00 UTC: where traces timed from their own start are placed.
ANCHOR = datetime(2024, 1, 1, tzinfo=UTC)
PRIOR_WEEKS = 1.0
MAX_DURATION_H = 24 * 14


def read_trace(fmt: str, path: str | Path) -> Trace:
    """Read a job trace in one of :data:`TRACE_FORMATS`."""
    if fmt not in TRACE_FORMATS:
        raise ForecastError(f"unknown trace format {fmt!r}; use one of {sorted(TRACE_FORMATS)}")
    return TRACE_FORMATS[fmt](path)


def gpu_class(gpus: int) -> str:
    return "1 GPU" if gpus <= 1 else "2-4 GPUs" if gpus <= 4 else "5-8 GPUs" if gpus <= 8 \
        else ">8 GPUs"


def trace_jobs(trace: Trace, anchor: datetime = ANCHOR) -> pd.DataFrame:
    """``arrival_utc`` (naive UTC), ``gpus``, ``duration_h`` and ``job_class`` per job."""
    f = trace.frame
    if "arrival_utc" in f and f["arrival_utc"].notna().all():
        t = pd.to_datetime(f["arrival_utc"], utc=True).dt.tz_localize(None)
    else:
        base = pd.Timestamp(anchor).tz_convert("UTC").tz_localize(None)
        t = base + pd.to_timedelta(f["arrival_s"].astype(float), unit="s")
    apps = f["app"] if "app" in f else pd.Series([None] * len(f))
    cls = [str(a) if isinstance(a, str) and a else gpu_class(int(g))
           for a, g in zip(apps, f["gpus"], strict=True)]
    dur = f["duration_s"].astype(float) / 3600.0
    return pd.DataFrame({"arrival_utc": t.to_numpy(), "gpus": f["gpus"].astype(int).to_numpy(),
                         "duration_h": dur.to_numpy(), "job_class": cls})


def _hour_of_week(idx: pd.DatetimeIndex) -> np.ndarray:
    return np.asarray(idx.day_of_week * 24 + idx.hour, dtype=int)


@dataclass(frozen=True)
class ArrivalModel:
    """Arrival rate and GPU demand by hour of week per job class (see the module docstring).

    Attributes
    ----------
    classes : tuple of str
    jobs_per_h : ndarray (classes, 168)
        Expected arrivals per hour of week (UTC).
    gpus_per_job : ndarray (classes,)
        Mean GPUs requested per job.
    survival : ndarray (classes, MAX_DURATION_H)
        ``S_c(d)``: share of the class's jobs running longer than ``d`` hours.
    fitted_hours : int
        Hours of trace the model was fitted on.
    """

    classes: tuple[str, ...]
    jobs_per_h: np.ndarray
    gpus_per_job: np.ndarray
    survival: np.ndarray
    fitted_hours: int

    @property
    def gpus_per_h(self) -> np.ndarray:
        """GPUs requested per hour of week, ``(classes, 168)``."""
        return self.jobs_per_h * self.gpus_per_job[:, None]

    def expected_arrivals(self, start: datetime | pd.Timestamp, hours: int) -> pd.DataFrame:
        """Expected arrivals per hour from ``start`` (floored to the hour), per class:
        columns ``jobs:<class>``, ``gpus_requested:<class>``, and the totals ``jobs`` and
        ``gpus_requested``; index the hour starts (naive UTC)."""
        t0 = pd.Timestamp(start)
        t0 = (t0.tz_convert("UTC").tz_localize(None) if t0.tz is not None else t0).floor("h")
        idx = pd.date_range(t0, periods=int(hours), freq="h")
        how = _hour_of_week(idx)
        out = pd.DataFrame(index=idx)
        for i, c in enumerate(self.classes):
            out[f"jobs:{c}"] = self.jobs_per_h[i, how]
            out[f"gpus_requested:{c}"] = self.gpus_per_h[i, how]
        out["jobs"] = self.jobs_per_h[:, how].sum(axis=0)
        out["gpus_requested"] = self.gpus_per_h[:, how].sum(axis=0)
        return out

    def expected_gpu_demand(self, start: datetime | pd.Timestamp, hours: int,
                            slot_s: int = 3600) -> np.ndarray:
        """Expected GPUs busy in each slot of ``slot_s`` seconds over the next ``hours``,
        from jobs arriving from ``start`` on: ``B(t)`` of the module docstring, hourly,
        step-held onto slots. This is what a look-ahead plan keeps free for arrivals."""
        arr = self.expected_arrivals(start, hours)
        how = _hour_of_week(pd.DatetimeIndex(arr.index))
        busy = np.zeros(len(arr))
        lags = np.arange(len(arr))
        for i in range(len(self.classes)):
            g = self.gpus_per_h[i, how]
            s = self.survival[i, np.minimum(lags, self.survival.shape[1] - 1)]
            busy += np.convolve(g, s)[: len(arr)]
        if slot_s == 3600:
            return busy
        per_h = 3600 / slot_s
        n = int(round(hours * per_h))
        return busy[np.minimum((np.arange(n) / per_h).astype(int), len(busy) - 1)]


def fit_arrivals(jobs: pd.DataFrame, start: pd.Timestamp | None = None,
                 end: pd.Timestamp | None = None) -> ArrivalModel:
    """Fit on the jobs arriving in ``[start, end)`` (default: the trace's own span, by hour).

    Raises
    ------
    ForecastError
        Fewer than 24 hours spanned or no job in the span.
    """
    t = pd.DatetimeIndex(jobs["arrival_utc"])
    lo = (start or t.min()).floor("h")
    hi = (end or t.max() + pd.Timedelta(hours=1)).floor("h")
    hours = pd.date_range(lo, hi, freq="h", inclusive="left")
    if len(hours) < 24:
        raise ForecastError(f"the job trace spans {len(hours)} h, the arrival model needs "
                            ">= 24 h")
    sel = jobs[(t >= lo) & (t < hi)]
    if sel.empty:
        raise ForecastError(f"no job arrives in {lo} .. {hi}")
    classes = tuple(sorted(sel["job_class"].unique()))
    n_w = np.bincount(_hour_of_week(hours), minlength=WEEK_H).astype(float)
    rate = np.zeros((len(classes), WEEK_H))
    gpj = np.zeros(len(classes))
    surv = np.zeros((len(classes), MAX_DURATION_H))
    d = np.arange(MAX_DURATION_H)
    for i, c in enumerate(classes):
        cj = sel[sel["job_class"] == c]
        counts = np.bincount(_hour_of_week(pd.DatetimeIndex(cj["arrival_utc"])),
                             minlength=WEEK_H).astype(float)
        mean = len(cj) / len(hours)
        rate[i] = (counts + PRIOR_WEEKS * mean) / (n_w + PRIOR_WEEKS)
        gpj[i] = float(cj["gpus"].mean())
        dur = cj["duration_h"].fillna(1.0).to_numpy()
        surv[i] = (dur[None, :] > d[:, None]).mean(axis=1)
    return ArrivalModel(classes=classes, jobs_per_h=rate, gpus_per_job=gpj, survival=surv,
                        fitted_hours=len(hours))


@dataclass(frozen=True)
class ArrivalBacktest:
    """Rolling-origin backtest of hourly arrivals: every ``step_h`` hours the model is fitted
    on the ``train_weeks`` weeks before the origin and forecasts the next ``horizon_h`` hours;
    the flat baseline forecasts the same weeks' mean rate for every hour."""

    origins: int
    train_weeks: int
    horizon_h: int
    mae_jobs_per_h: float
    mae_flat_jobs_per_h: float
    mae_gpus_per_h: float
    mae_flat_gpus_per_h: float
    total_jobs_ratio: float

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def backtest_arrivals(trace: Trace, train_weeks: int = 4, horizon_h: int = WEEK_H,
                      anchor: datetime = ANCHOR) -> ArrivalBacktest:
    """Score hourly arrivals and GPUs requested, forecast from the ``train_weeks`` weeks
    before each weekly origin, against the truth and the flat rate: MAE per hour, and
    ``total_jobs_ratio`` = forecast / actual arrivals summed over all origins."""
    if train_weeks < 1:
        raise ForecastError(f"train_weeks must be >= 1, got {train_weeks}")
    jobs = trace_jobs(trace, anchor)
    t = pd.DatetimeIndex(jobs["arrival_utc"])
    lo, hi = t.min().floor("h"), (t.max() + pd.Timedelta(hours=1)).floor("h")
    train = pd.Timedelta(weeks=train_weeks)
    origins = pd.date_range(lo + train, hi - pd.Timedelta(hours=horizon_h), freq=f"{WEEK_H}h")
    if origins.empty:
        raise ForecastError(f"{trace.path}: the trace spans {(hi - lo) / pd.Timedelta(days=1):.1f}"
                            f" days, the backtest needs {train_weeks} weeks plus "
                            f"{horizon_h} h")
    hours = pd.date_range(lo, hi, freq="h", inclusive="left")
    bins = ((t - lo) // pd.Timedelta(hours=1)).to_numpy()
    n_jobs = np.bincount(bins, minlength=len(hours)).astype(float)
    n_gpus = np.bincount(bins, weights=jobs["gpus"].to_numpy(float), minlength=len(hours))
    err: dict[str, list[np.ndarray]] = {k: [] for k in ("jobs", "flat_jobs", "gpus", "flat_gpus")}
    total_fc = total_true = 0.0
    for o in origins:
        sel = jobs[(t >= o - train) & (t < o)]
        if sel.empty:
            continue
        model = fit_arrivals(sel, o - train, o)
        fc = model.expected_arrivals(o, horizon_h)
        i = int((o - lo) // pd.Timedelta(hours=1))
        true_j, true_g = n_jobs[i:i + horizon_h], n_gpus[i:i + horizon_h]
        err["jobs"].append(np.abs(true_j - fc["jobs"].to_numpy()))
        err["gpus"].append(np.abs(true_g - fc["gpus_requested"].to_numpy()))
        err["flat_jobs"].append(np.abs(true_j - n_jobs[i - train_weeks * WEEK_H:i].mean()))
        err["flat_gpus"].append(np.abs(true_g - n_gpus[i - train_weeks * WEEK_H:i].mean()))
        total_fc += float(fc["jobs"].sum())
        total_true += float(true_j.sum())
    if not err["jobs"]:
        raise ForecastError(f"{trace.path}: no job arrives in any training window")
    mae = {k: float(np.concatenate(v).mean()) for k, v in err.items()}
    return ArrivalBacktest(
        origins=len(err["jobs"]), train_weeks=train_weeks, horizon_h=horizon_h,
        mae_jobs_per_h=mae["jobs"], mae_flat_jobs_per_h=mae["flat_jobs"],
        mae_gpus_per_h=mae["gpus"], mae_flat_gpus_per_h=mae["flat_gpus"],
        total_jobs_ratio=total_fc / max(total_true, 1.0))
