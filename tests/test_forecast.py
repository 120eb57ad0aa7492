"""The grid forecasts (workbench.forecast): no look-ahead, exact scores, bands, bad input,
and the ``model`` mode of the planner."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench import cubes
from workbench.cli import main
from workbench.forecast import (
    ForecastError,
    SeriesInput,
    backtest,
    calendar,
    daily_origins,
    default_forecast_mode,
    forecast,
    rolling_forecast,
)
from workbench.forecast.models import seasonal_naive
from workbench.forecast.scenario import fit_scenario, has_history, history_days
from workbench.model import ScenarioError
from workbench.scenarios import first_hours
from workbench.sim import simulate
from workbench.store import Store

T0 = pd.Timestamp("2024-01-01")  # a Monday


def _synthetic(days: int, seed: int = 0) -> tuple[pd.DatetimeIndex, np.ndarray, np.ndarray]:
    """Hourly price-like and carbon-like series with daily and weekly cycles, noise, spikes."""
    rng = np.random.default_rng(seed)
    idx = pd.date_range(T0, periods=24 * days, freq="h")
    h = np.arange(len(idx))
    price = (0.1 + 0.03 * np.sin(2 * np.pi * h / 24) + 0.01 * (idx.day_of_week >= 5)
             + 0.01 * rng.standard_normal(len(idx)))
    price[rng.integers(0, len(idx), 10)] += 0.2
    carbon = 300 + 80 * np.cos(2 * np.pi * h / 24) + 10 * rng.standard_normal(len(idx))
    return idx, price, carbon


def _series(days: int = 40, seed: int = 0) -> SeriesInput:
    idx, price, carbon = _synthetic(days, seed)
    cal = calendar(pd.date_range(idx[0], periods=len(idx) + 168, freq="h"), "DE-LU")
    return SeriesInput(name="X price_per_kwh", index=idx, values=price, calendar=cal,
                       exog=carbon)


def test_seasonal_naive_takes_the_same_hour_of_the_last_day_before_the_origin() -> None:
    past = np.arange(48.0)
    np.testing.assert_array_equal(seasonal_naive(past, 30), np.r_[24:48, 24:30].astype(float))
    np.testing.assert_array_equal(seasonal_naive(np.arange(200.0), 3, 168), [32.0, 33.0, 34.0])


@pytest.mark.slow
@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2**16), shift=st.integers(0, 47),
       scale=st.floats(-5.0, 5.0, allow_nan=False))
def test_perturbing_data_after_the_origin_leaves_the_forecast_unchanged(
        seed: int, shift: int, scale: float) -> None:
    s = _series(31)
    origin = s.index[24 * 29]  # late enough for every candidate, gbm included
    at = 24 * 29 + shift
    rng = np.random.default_rng(seed)
    values, exog = s.values.copy(), s.exog.copy()  # type: ignore[union-attr]
    values[at:] = values[at:] * scale + rng.standard_normal(len(values) - at)
    exog[at:] = rng.standard_normal(len(exog) - at) * 1e3
    other = replace(s, values=values, exog=exog)
    a = rolling_forecast(s, [origin], 24, warmup_origins=8)
    b = rolling_forecast(other, [origin], 24, warmup_origins=8)
    assert set(a.candidates) == {"seasonal-naive", "seasonal-naive-weekly", "harmonic", "gbm"}
    assert np.isfinite(a.candidates["gbm"]).all()
    for q in ("q10", "q50", "q90"):
        np.testing.assert_array_equal(getattr(a, q), getattr(b, q))


def test_bands_are_ordered_and_carbon_stays_non_negative() -> None:
    s = _series(33)
    origins = s.index[24 * 30::24][:2]
    for series in (s, replace(s, values=s.values - 0.12, nonnegative=True)):
        fc = rolling_forecast(series, origins, 36, warmup_origins=10)
        assert fc.q10.shape == (2, 36)
        assert np.all(fc.q10 <= fc.q50) and np.all(fc.q50 <= fc.q90)
        np.testing.assert_allclose(fc.weights.sum(axis=1), 1.0)
        if series.nonnegative:
            assert fc.q10.min() >= 0.0


def _store(path, days: int, price=None, carbon=None, region: str = "Z", drop=()) -> Store:
    idx = pd.date_range(T0, periods=24 * days, freq="h")
    t = np.arange(len(idx), dtype=float)
    frame = pd.DataFrame({
        "time_utc": idx, "region": region,
        "price_per_kwh": 1.0 + 0.001 * t if price is None else price,
        "currency": "USD",
        "carbon_g_per_kwh": 100.0 + t if carbon is None else carbon,
        "source": "test"})
    frame = frame.drop(index=list(drop))
    store = Store(path)
    store.write_grid_series(frame)
    return store


def test_backtest_scores_a_known_series_exactly(tmp_path) -> None:
    # y = 1 + 0.001 t: yesterday's value is always 0.024 too low, so every score is known.
    with _store(tmp_path / "s.duckdb", 45) as store:
        r = backtest(store, "Z", "price", "2024-02-05", "2024-02-08", 24,
                     model="seasonal-naive")
    assert r.origins == 3 and r.unit == "USD/kWh"
    assert r.mae == pytest.approx(0.024) and r.rmse == pytest.approx(0.024)
    assert r.mae_seasonal_naive == pytest.approx(0.024)
    hours = np.arange(35 * 24, 38 * 24, dtype=float)
    assert r.mape == pytest.approx(float(np.mean(0.024 / (1.0 + 0.001 * hours))))
    # Every past error was exactly +0.024: the band [f, f + 0.024] holds the truth.
    assert r.coverage_80 == pytest.approx(1.0)
    assert set(r.to_json()) == {"region", "kind", "model", "horizon_h", "mae", "rmse", "mape",
                                "mae_seasonal_naive", "coverage_80", "origins"}


def test_mape_is_none_where_values_come_near_zero(tmp_path) -> None:
    days = 45
    price = np.sin(2 * np.pi * np.arange(24 * days) / 24)
    with _store(tmp_path / "s.duckdb", days, price=price) as store:
        r = backtest(store, "Z", "price", "2024-02-05", "2024-02-07", 24,
                     model="seasonal-naive")
    assert r.mape is None and r.mae == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize(("days", "drop", "region", "kind", "needle"), [
    (40, (), "Z", "price", "price series of Z: 14.0 days of history before 2024-01-15"),
    (45, (24 * 36 + 5,), "Z", "carbon", "carbon series of Z has a gap: no value at "
                                        "2024-02-06T05:00:00"),
    (45, (24 * 30,), "Z", "price", "price series of Z has a gap at 2024-01-31T00:00:00"),
    (45, (), "Y", "price", "the store holds no price series of Y"),
])
def test_bad_input_names_the_series_and_what_is_missing(tmp_path, days, drop, region, kind,
                                                       needle) -> None:
    start = "2024-01-15" if days == 40 else "2024-02-05"
    with _store(tmp_path / "s.duckdb", days, drop=drop) as store:
        with pytest.raises(ForecastError, match=needle.replace("(", r"\(")):
            backtest(store, region, kind, start, "2024-02-08", 24)


def test_a_region_without_the_kind_is_named(tmp_path) -> None:
    with _store(tmp_path / "s.duckdb", 45, price=np.nan) as store:
        with pytest.raises(ForecastError, match="holds no price series of Z .*regions with "
                                                "price: none"):
            backtest(store, "Z", "price", "2024-02-05", "2024-02-08", 24)


def test_cli_backtest_prints_the_record_and_errors_in_one_line(tmp_path, capsys) -> None:
    db = tmp_path / "s.duckdb"
    _store(db, 45).close()
    argv = ["--db", str(db), "forecast", "backtest", "--region", "Z", "--kind", "carbon",
            "--model", "seasonal-naive", "--start", "2024-02-05", "--end", "2024-02-07",
            "--horizon-h", "24", "--json"]
    assert main(argv) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["mae"] == pytest.approx(24.0) and obj["origins"] == 2
    assert obj["model"] == "seasonal-naive" and obj["kind"] == "carbon"
    argv[argv.index("2024-02-05")] = "2024-01-10"
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: carbon series of Z: ") and "\n" not in err


def test_daily_origins_are_midnights_in_the_period() -> None:
    o = daily_origins("2024-02-05T06:00", "2024-02-08")
    assert list(o.strftime("%m-%d %H")) == ["02-06 00", "02-07 00"]


# -- the planner's ``model`` mode -----------------------------------------------------------


def _with_history(sc, days: int):
    """``sc`` with a synthetic hourly history of ``days`` days ending at its start."""
    start = pd.Timestamp(sc.start).tz_convert("UTC").tz_localize(None)
    idx = pd.date_range(start - pd.Timedelta(days=days), start, freq="h", inclusive="left")
    regions = [str(r) for r in sc.grid["region"].values]
    _, price, carbon = _synthetic(days)
    hist = cubes.make_cube(idx, regions, np.column_stack([price] * len(regions)),
                           np.column_stack([carbon] * len(regions)), sc.currency, 3600)
    return replace(sc, history=hist)


def test_history_decides_whether_the_model_mode_can_run(seed3) -> None:
    assert not has_history(seed3) and history_days(seed3) == 0.0
    with pytest.raises(ForecastError, match="0.0 days of gap-free price and carbon history"):
        fit_scenario(seed3)
    short = _with_history(seed3, 20)
    assert history_days(short) == pytest.approx(20.0) and not has_history(short)
    assert has_history(_with_history(seed3, 28))


def test_a_history_that_does_not_end_at_the_start_is_refused(seed3) -> None:
    sc = _with_history(seed3, 30)
    with pytest.raises(ScenarioError, match="history cube ends at"):
        replace(sc, history=sc.history.isel(time=slice(0, -2)))


@pytest.mark.slow
def test_model_mode_forecasts_from_the_history_and_the_run_says_so(seed3) -> None:
    sc = _with_history(first_hours(seed3, 6), 30)
    fm = fit_scenario(sc)
    assert fm.origins[0] == pd.Timestamp(sc.start).tz_convert(None).floor("D")
    cube = sc.grid
    fc = forecast(cube, 4, None, mode="model", model=fm)
    assert fc.mode == "model" and fc.price_per_kwh.shape == (cube.sizes["time"] - 4, 3)
    np.testing.assert_array_equal(fc.price_per_kwh[0], cube["price_per_kwh"].values[4])
    assert np.isfinite(fc.carbon_g_per_kwh).all() and (fc.carbon_g_per_kwh >= 0).all()
    with pytest.raises(ValueError, match="needs the fitted forecasts"):
        forecast(cube, 4, None, mode="model")
    from workbench.policies import make_policy

    run = simulate(sc, make_policy("wait-for-cheap"), forecast_mode="model")
    assert run.meta["forecast_mode"] == "model"
    assert run.meta["forecast_history_days"] == pytest.approx(30.0)
    # The forecaster and its revision rule are named on the run, and stored with it.
    assert (run.meta["forecast_model"], run.meta["forecast_revise"]) == ("auto", "band")


def test_history_cube_stops_at_the_last_hole(tmp_path) -> None:
    with _store(tmp_path / "s.duckdb", 20, drop=(24 * 10 + 3,)) as store:
        rows = store.grid_series(["Z"])
    hist = cubes.history_cube(rows, ["Z"], T0 + pd.Timedelta(days=20))
    assert hist is not None and hist.sizes["time"] == 24 * 10 - 4
    assert cubes.history_cube(rows, ["Z", "W"], T0 + pd.Timedelta(days=20)) is None


@pytest.mark.slow
def test_grid_tab_draws_the_band_against_the_truth_for_an_origin(seed3, tmp_path) -> None:
    import holoviews as hv
    import panel as pn

    from workbench.app.state import WorkbenchState
    from workbench.app.views import ForecastPane

    sc = _with_history(first_hours(seed3, 6), 30)
    state = WorkbenchState(db_path=str(tmp_path / "wb.duckdb"), scenario_name="seed3",
                           baseline_policies=[], save_runs=False)
    state.scenario = sc
    pane = ForecastPane(state=state)
    pane.variable.value = "carbon_g_per_kwh"
    pane.button.clicks += 1
    (plot,) = pane.out.objects
    assert isinstance(plot, pn.pane.HoloViews) and isinstance(plot.object, hv.Overlay)
    frame = plot.object.Curve.Truth.data
    # Issued 00:00 UTC; the scenario runs 16:00 .. 22:00: 22 hours, the first 16 from history.
    assert len(frame) == 22 and frame["truth"].notna().all()
    assert (frame["q10"] <= frame["q50"]).all() and (frame["q50"] <= frame["q90"]).all()
    state.scenario = seed3  # no history: the pane says what is missing
    pane = ForecastPane(state=state)
    pane.button.clicks += 1
    (alert,) = pane.out.objects
    assert isinstance(alert, pn.pane.Alert) and "0.0 days" in alert.object


def test_a_scenario_loaded_from_the_store_carries_its_history(tmp_path) -> None:
    from helpers_sim import START, tiny_scenario

    start = pd.Timestamp(START).tz_convert(None)
    idx = pd.date_range(start - pd.Timedelta(days=30), start, freq="h", inclusive="left")
    rows = pd.concat([pd.DataFrame({"time_utc": idx, "region": r, "price_per_kwh": 0.5,
                                    "currency": "CNY", "carbon_g_per_kwh": 300.0,
                                    "source": "test"}) for r in ("ra", "rb")])
    with Store(tmp_path / "s.duckdb") as store:
        store.write_grid_series(rows)
        store.save_scenario(tiny_scenario())
        sc = store.load_scenario("tiny")
    assert sc.history is not None and history_days(sc) == pytest.approx(30.0)
    assert has_history(sc) and list(sc.history["region"].values) == ["ra", "rb"]


@pytest.mark.slow
def test_quote_prices_against_the_model_forecast(seed3) -> None:
    from workbench.quote import JobSpec, quote

    sc = _with_history(first_hours(seed3, 6), 30)
    spec = JobSpec(app=sc.profiles[0].app, work_samples=1e5, home=sc.datacenters[0].name,
                   min_gpus=1, max_gpus=1)
    q = quote(sc, spec, forecast_mode="model")
    assert q.to_dict()["options"]
    with pytest.raises(ForecastError, match="days of gap-free"):
        quote(seed3, spec, forecast_mode="model")


def test_cli_arrivals_backtests_a_trace(tmp_path, capsys) -> None:
    rng = np.random.default_rng(1)
    hours = pd.date_range(T0, periods=6 * 168, freq="h")
    times = np.repeat(hours, rng.poisson(np.where(hours.hour < 12, 3.0, 0.3)))
    path = tmp_path / "philly.csv"
    pd.DataFrame({"timestamp": times.strftime("%Y-%m-%d %H:%M:%S"), "duration": 600.0,
                  "num_gpus": 2, "gpu_time": 1200.0, "cluster": "c1"}).to_csv(path, index=False)
    assert main(["forecast", "arrivals", "philly", str(path), "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["origins"] == 2 and obj["mae_jobs_per_h"] < obj["mae_flat_jobs_per_h"]


# -- issue 25, item 7: the model forecast on any slot length --------------------------------


def test_a_slot_across_hours_is_forecast_as_the_mean_of_the_hours_it_covers() -> None:
    from workbench.forecast.scenario import ModelForecast

    origins = pd.DatetimeIndex([T0])
    path = np.arange(48, dtype=float)[None, :, None]  # hour h is forecast as h
    fm = ModelForecast(model="m", origins=origins, regions=("Z",), horizon_h=48,
                       paths={v: {q: path for q in (0.1, 0.5, 0.9)}
                              for v in cubes.VARIABLES}, history_days=30.0)
    quarter = pd.date_range(T0, periods=8, freq="15min")
    np.testing.assert_array_equal(fm.at(quarter, "price_per_kwh", slot_s=900)[:, 0],
                                  [0, 0, 0, 0, 1, 1, 1, 1])
    slots = pd.date_range(T0, periods=4, freq="45min")
    # [0:00, 0:45) all hour 0; [0:45, 1:30) 15 min of 0 and 30 of 1; [1:30, 2:15) 30 of 1,
    # 15 of 2; [2:15, 3:00) all hour 2.
    np.testing.assert_allclose(fm.at(slots, "price_per_kwh", slot_s=2700)[:, 0],
                               [0, 2 / 3, 4 / 3, 2])
    two = pd.date_range(T0, periods=2, freq="2h")
    np.testing.assert_allclose(fm.at(two, "carbon_g_per_kwh", slot_s=7200)[:, 0], [0.5, 2.5])


@pytest.fixture(scope="module")
def history_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two regions with 35 days of hourly market prices and carbon, and a job set."""
    path = tmp_path_factory.mktemp("slots") / "wb.duckdb"
    idx = pd.date_range(T0, periods=24 * 36, freq="h")
    hour = np.asarray(idx.hour, dtype=float)
    rows = [pd.DataFrame({"time_utc": idx, "region": r, "currency": "USD", "source": "test",
                          "price_per_kwh": base + 0.05 * np.sin(hour / 24 * 2 * np.pi),
                          "carbon_g_per_kwh": 300.0 + 50 * np.cos(hour / 24 * 2 * np.pi)})
            for r, base in (("ZA", 0.1), ("ZB", 0.12))]
    trace = path.parent / "w.csv"
    trace.write_text("name,time,application,num_replicas,batch_size\n"
                     "j0,0,cifar10,2,256\nj1,600,ncf,1,256\nj2,3600,cifar10,1,128\n")
    from workbench.io.jobs import import_jobs

    with Store(path) as store:
        store.write_grid_series(pd.concat(rows))
        import_jobs(store, "pollux-workload", trace, "w")
    return path


@pytest.mark.slow
@pytest.mark.parametrize("minutes", [15, 20, 45, 90, 120])
def test_the_default_plan_uses_the_model_forecast_on_any_slot_length(
        history_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        minutes: int) -> None:
    """`slot_minutes = 45` built, then the default `plan` failed: "the model forecasts
    hours; a slot of 2700 s neither divides nor is a multiple of an hour"."""
    import shutil

    db = tmp_path / "wb.duckdb"
    shutil.copy(history_store, db)
    start = (T0 + pd.Timedelta(days=34)).strftime("%Y-%m-%dT%H:%M:%SZ")
    config = tmp_path / "c.toml"
    config.write_text(
        f'[scenario]\nstart = "{start}"\nhours = 18\nslot_minutes = {minutes}\n'
        '[[datacenters]]\nname = "a"\nregion = "ZA"\npue = 1.2\n'
        '[[datacenters]]\nname = "b"\nregion = "ZB"\npue = 1.3\n'
        '[[pools]]\ndatacenter = "a"\ngpu_type = "A100"\ncount = 8\nidle_power_w = 60.0\n'
        'max_power_w = 400.0\n[[pools]]\ndatacenter = "b"\ngpu_type = "A100"\ncount = 8\n'
        'idle_power_w = 60.0\nmax_power_w = 400.0\n'
        '[[links]]\nsrc = "a"\ndst = "b"\nlatency_ms = 10.0\nbandwidth_gbps = 10.0\n'
        '[jobs]\nset = "w"\nhomes = ["a", "b"]\nmin_deadline_h = 6.0\n')
    assert main(["--db", str(db), "scenario", "build", "s", "--config", str(config)]) == 0
    with Store(db) as store:
        sc = store.load_scenario("s")
    assert sc.slot_s == minutes * 60 and default_forecast_mode(sc) == "model"
    fm = fit_scenario(sc)
    fc = forecast(sc.grid, 1, None, mode="model", model=fm)
    assert fc.price_per_kwh.shape == (sc.n_slots - 1, 2) and np.isfinite(fc.price_per_kwh).all()
    capsys.readouterr()
    assert main(["--db", str(db), "plan", "--scenario", "s", "--no-progress", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["forecast"] == "model" and out["jobs_finished"] == out["jobs_total"] == 3
