"""The job-arrival model (workbench.forecast.arrivals): rates by hour of week, expected GPUs
busy, and its rolling backtest."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from workbench.forecast import ForecastError
from workbench.forecast.arrivals import (
    backtest_arrivals,
    fit_arrivals,
    gpu_class,
    trace_jobs,
)
from workbench.io.jobs import Trace

MONDAY = pd.Timestamp("2024-01-01")


def _trace(times, gpus, duration_s) -> Trace:
    frame = pd.DataFrame({"job_id": [f"j{i}" for i in range(len(times))],
                          "arrival_utc": pd.DatetimeIndex(times).tz_localize("UTC"),
                          "duration_s": duration_s, "gpus": gpus, "app": None,
                          "batch_size": 0})
    return Trace("inline", "philly", frame, {})


def test_rate_and_gpus_by_hour_of_week_and_the_busy_gpus_they_imply() -> None:
    # Two 4-GPU jobs of 2 h every Monday 10:00 for four weeks.
    times = [MONDAY + pd.Timedelta(weeks=w, hours=10) for w in range(4) for _ in range(2)]
    jobs = trace_jobs(_trace(times, [4] * 8, [7200.0] * 8))
    model = fit_arrivals(jobs, MONDAY, MONDAY + pd.Timedelta(weeks=4))
    assert model.classes == ("2-4 GPUs",) and model.fitted_hours == 4 * 168
    mean = 8 / (4 * 168)
    assert model.jobs_per_h[0, 10] == pytest.approx((8 + mean) / (4 + 1))
    assert model.jobs_per_h[0, 11] == pytest.approx(mean / 5)
    assert model.gpus_per_h[0, 10] == pytest.approx(4 * model.jobs_per_h[0, 10])
    g = model.gpus_per_h[0]
    busy = model.expected_gpu_demand(MONDAY + pd.Timedelta(weeks=5, hours=10), 3)
    # S(0) = S(1) = 1, S(2) = 0: a 2-hour job is busy in its first two hours only.
    np.testing.assert_allclose(busy, [g[10], g[11] + g[10], g[12] + g[11]])
    quarter = model.expected_gpu_demand(MONDAY + pd.Timedelta(weeks=5, hours=10), 3, 900)
    np.testing.assert_allclose(quarter, np.repeat(busy, 4))
    arr = model.expected_arrivals(MONDAY + pd.Timedelta(hours=9, minutes=30), 2)
    assert list(arr.index.hour) == [9, 10] and arr["jobs"].iloc[1] == model.jobs_per_h[0, 10]


def test_classes_by_gpu_count() -> None:
    assert [gpu_class(n) for n in (1, 2, 4, 5, 8, 9)] == [
        "1 GPU", "2-4 GPUs", "2-4 GPUs", "5-8 GPUs", "5-8 GPUs", ">8 GPUs"]


def test_backtest_beats_a_flat_rate_on_a_trace_with_a_weekly_pattern() -> None:
    rng = np.random.default_rng(0)
    hours = pd.date_range(MONDAY, periods=8 * 168, freq="h")
    rate = np.where((hours.hour >= 9) & (hours.hour < 18) & (hours.day_of_week < 5), 6.0, 0.5)
    counts = rng.poisson(rate)
    times = np.repeat(hours, counts) + pd.to_timedelta(rng.uniform(0, 3600, counts.sum()), "s")
    n = counts.sum()
    r = backtest_arrivals(_trace(times, rng.integers(1, 9, n), rng.uniform(60, 7200, n)))
    assert r.origins >= 3 and r.horizon_h == 168
    assert r.mae_jobs_per_h < 0.8 * r.mae_flat_jobs_per_h
    assert r.mae_gpus_per_h < 0.8 * r.mae_flat_gpus_per_h
    assert r.total_jobs_ratio == pytest.approx(1.0, abs=0.1)


def test_a_trace_too_short_is_refused() -> None:
    times = [MONDAY + pd.Timedelta(hours=h) for h in range(30)]
    with pytest.raises(ForecastError, match="needs 4 weeks plus 168 h"):
        backtest_arrivals(_trace(times, [1] * 30, [60.0] * 30))
    with pytest.raises(ForecastError, match="needs >= 24 h"):
        fit_arrivals(trace_jobs(_trace(times[:5], [1] * 5, [60.0] * 5)))
