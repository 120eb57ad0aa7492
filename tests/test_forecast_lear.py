"""LEAR (workbench.forecast.lear): it learns a known lag structure, is deterministic, gives
ordered bands through the rolling forecast, says what history it lacks, and is selectable
wherever a forecaster is chosen."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from workbench.cli import build_parser
from workbench.forecast import (
    CANDIDATES,
    COMBINATIONS,
    MODELS,
    SeriesInput,
    calendar,
    fit_lear,
    lear,
    rolling_forecast,
)
from workbench.forecast.lear import LEAR_MIN_H, lasso_aic, lear_windows
from workbench.forecast.models import seasonal_naive
from workbench.runner import ForecastSettings, SpecError

T0 = pd.Timestamp("2024-01-01")  # a Monday


def _ar_days(days: int, seed: int = 0) -> np.ndarray:
    """Hourly values whose day ``d`` is ``mu + 0.6 (day d-1 - mu) + 0.3 (day d-7 - mu)``
    plus a weekend step and noise: a structure LEAR's lags hold exactly."""
    rng = np.random.default_rng(seed)
    mu = 50 + 10 * np.sin(2 * np.pi * np.arange(24) / 24)
    y = np.tile(mu, (days, 1)) + rng.standard_normal((days, 24))
    for d in range(7, days):
        weekend = 6.0 if (T0 + pd.Timedelta(days=d)).day_of_week >= 5 else 0.0
        y[d] = (mu + 0.6 * (y[d - 1] - mu) + 0.3 * (y[d - 7] - mu) + weekend
                + 2.0 * rng.standard_normal(24))
    return y.ravel()


def _cal(hours: int):
    return calendar(pd.date_range(T0, periods=hours + 168, freq="h"), "DE-LU")


def _series(days: int) -> SeriesInput:
    y = _ar_days(days)
    idx = pd.date_range(T0, periods=len(y), freq="h")
    return SeriesInput(name="X price_per_kwh", index=idx, values=y, calendar=_cal(len(y)))


@pytest.mark.slow
def test_lear_learns_a_known_lag_structure_better_than_the_naive() -> None:
    y = _ar_days(72)
    cal = _cal(len(y))
    ours, naive = [], []
    for o in range(24 * 64, 24 * 72, 24):
        truth = y[o:o + 24]
        ours.append(np.abs(lear(y[:o], 24, cal) - truth).mean())
        naive.append(np.abs(seasonal_naive(y[:o], 24) - truth).mean())
    assert np.mean(ours) < 0.75 * np.mean(naive)


def test_lasso_aic_keeps_the_true_inputs_and_drops_noise() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((200, 30))
    y = 1.0 + 2.0 * x[:, 0] - 1.5 * x[:, 3] + 0.1 * rng.standard_normal(200)
    b, beta = lasso_aic(x, y)
    assert b == pytest.approx(1.0, abs=0.05)
    assert beta[0] == pytest.approx(2.0, abs=0.05) and beta[3] == pytest.approx(-1.5, abs=0.05)
    assert np.abs(np.delete(beta, [0, 3])).max() < 0.05


def test_lear_is_deterministic() -> None:
    y = _ar_days(60)
    cal = _cal(len(y))
    o = 24 * 50
    a = lear(y[:o], 48, cal)
    b = lear(y[:o].copy(), 48, cal)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (48,) and np.isfinite(a).all()
    model = fit_lear(y[:o], cal)
    assert model.fitted_before == o and [w.window_d for w in model.windows] == [43]


@pytest.mark.parametrize(("days", "windows"), [(34, ()), (35, (28,)), (70, (56, 63)),
                                               (100, (56, 84, 93)), (400, (56, 84, 364))])
def test_calibration_windows_follow_the_history(days: int, windows: tuple[int, ...]) -> None:
    assert lear_windows(24 * days) == windows


def test_too_short_a_history_is_one_clear_error() -> None:
    y = _ar_days(30)
    with pytest.raises(ValueError, match=r"LEAR needs 35 days of history .* has 30\.0"):
        lear(y, 24, _cal(len(y)))


def test_rolling_lear_falls_back_to_the_naive_until_it_can_forecast() -> None:
    s = _series(40)
    origins = s.index[24 * 33::24][:3]  # the first origin has 33 days before it: too few
    fc = rolling_forecast(s, origins, 24, model="lear", warmup_origins=10)
    assert LEAR_MIN_H == 24 * 35
    assert np.isnan(fc.candidates["lear"][0]).all() and np.isfinite(fc.candidates["lear"][2]).all()
    # Too few scored LEAR origins anywhere here: the seasonal naive stands in.
    np.testing.assert_array_equal(fc.weights[:, CANDIDATES.index("seasonal-naive")], 1.0)
    np.testing.assert_array_equal(fc.q50, fc.seasonal_naive)


@pytest.mark.parametrize("model", ["lear", "auto-lear"])
def test_bands_are_ordered_and_weights_are_a_combination(model: str) -> None:
    s = _series(70)
    origins = s.index[24 * 60::24][:3]
    fc = rolling_forecast(s, origins, 36, model=model, warmup_origins=14)
    assert fc.q10.shape == (3, 36)
    assert np.all(fc.q10 <= fc.q50) and np.all(fc.q50 <= fc.q90)
    np.testing.assert_allclose(fc.weights.sum(axis=1), 1.0)
    if model == "lear":  # enough scored origins: LEAR alone
        np.testing.assert_array_equal(fc.weights[:, CANDIDATES.index("lear")], 1.0)
    else:
        assert set(fc.candidates) == set(COMBINATIONS["auto-lear"]) == set(CANDIDATES)


def test_auto_gives_lear_no_weight() -> None:
    s = _series(40)
    fc = rolling_forecast(s, s.index[24 * 38::24][:1], 24, warmup_origins=8)
    assert "lear" not in fc.candidates and fc.weights[:, CANDIDATES.index("lear")].max() == 0


def test_the_forecaster_is_selectable_in_the_settings_and_the_cli() -> None:
    assert {"lear", "auto-lear"} <= set(MODELS)
    assert ForecastSettings().model == "auto"
    assert ForecastSettings(mode="model", model="lear").model == "lear"
    with pytest.raises(SpecError, match="unknown forecast model 'arima'"):
        ForecastSettings(model="arima")
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for command in ("plan", "sweep", "quote"):
        parser = sub.choices[command]  # type: ignore[index]
        flag = next(a for a in parser._actions if a.dest == "forecast_model")
        assert flag.default == "auto" and "auto-lear" in flag.choices


@pytest.mark.slow
def test_fit_forecast_fits_the_named_forecaster(seed3) -> None:
    from workbench import cubes
    from workbench.runner import RunSpec, fit_forecast, simulate_spec
    from workbench.scenarios import first_hours

    sc = first_hours(seed3, 6)
    start = pd.Timestamp(sc.start).tz_convert("UTC").tz_localize(None)
    y = _ar_days(45)[-45 * 24:]
    idx = pd.date_range(start - pd.Timedelta(days=45), start, freq="h", inclusive="left")
    regions = [str(r) for r in sc.grid["region"].values]
    hist = cubes.make_cube(idx, regions, np.column_stack([y / 500] * len(regions)),
                           np.column_stack([y * 6] * len(regions)), sc.currency, 3600)
    sc = replace(sc, history=hist)
    fm = fit_forecast(sc, "model", "lear")
    assert fm is not None and fm.model == "lear"
    assert np.isfinite(fm.paths["price_per_kwh"][0.5]).all()
    spec = RunSpec(sc.name, "asap-home", forecast=ForecastSettings(mode="model"))
    with pytest.raises(SpecError, match="the fitted forecast is 'lear'"):
        simulate_spec(spec, sc, fitted=fm)


def test_the_app_hands_its_forecaster_to_the_run_and_keys_comparisons_by_it() -> None:
    from workbench.app.shared import ComparisonKey
    from workbench.app.state import WorkbenchState

    state = WorkbenchState(db_path="none.duckdb")
    assert state.forecast_settings().model == "auto"
    state.forecast_model = "auto-lear"
    assert state.forecast_settings() == ForecastSettings(mode=None, error=0.0, model="auto-lear")
    base = {"db_path": "a", "scenario": "s", "fingerprint": "f", "slot_s": 900, "n_slots": 8,
            "forecast_mode": None, "forecast_error": 0.0}
    assert ComparisonKey(**base) != ComparisonKey(**base, forecast_model="lear")
