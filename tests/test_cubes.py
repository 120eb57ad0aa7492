"""Cube building, validation, resampling and forecasts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench import cubes
from workbench.cubes import CubeError
from workbench.forecast import forecast


def _series(region: str, start: str, periods: int, freq: str, price, carbon) -> pd.DataFrame:
    return pd.DataFrame({
        "time_utc": pd.date_range(start, periods=periods, freq=freq, tz="UTC"),
        "region": region, "price_per_kwh": price, "currency": "CNY",
        "carbon_g_per_kwh": carbon, "source": "t",
    })


def _cube(n: int = 8, slot_s: int = 900) -> xr.Dataset:
    times = pd.date_range("2025-07-01", periods=n, freq=pd.Timedelta(seconds=slot_s))
    price = np.column_stack([np.arange(n) + 1.0, np.arange(n) + 10.0])
    carbon = np.column_stack([np.full(n, 400.0), np.full(n, 300.0)])
    return cubes.make_cube(times, ["a", "b"], price, carbon, "CNY", slot_s)


def test_hourly_is_step_held_to_15_minutes() -> None:
    s = _series("a", "2025-07-01", 3, "h", [1.0, 2.0, 3.0], [100.0, 200.0, 300.0])
    ds = cubes.cube_from_series(s, 900, "2025-07-01T00:00Z", "2025-07-01T03:00Z")
    assert ds.sizes["time"] == 12
    np.testing.assert_allclose(ds["price_per_kwh"].sel(region="a").values,
                               np.repeat([1.0, 2.0, 3.0], 4))
    assert ds["price_per_kwh"].attrs["units"] == "CNY/kWh"
    assert ds["carbon_g_per_kwh"].attrs["units"] == "gCO2/kWh"


def test_five_minute_data_is_averaged_up() -> None:
    vals = np.arange(12, dtype=float)
    s = _series("a", "2025-07-01", 12, "5min", vals, vals * 10)
    ds = cubes.cube_from_series(s, 900, "2025-07-01T00:00Z", "2025-07-01T01:00Z")
    np.testing.assert_allclose(ds["price_per_kwh"].values[:, 0], [1.0, 4.0, 7.0, 10.0])


@settings(max_examples=40, deadline=None)
@given(
    values=st.lists(st.floats(-50, 500, allow_nan=False), min_size=4, max_size=48),
    k=st.sampled_from([2, 3, 4]),
)
def test_resampling_keeps_time_weighted_means(values: list[float], k: int) -> None:
    n = (len(values) // k) * k
    if n == 0:
        return
    arr = np.asarray(values[:n])
    times = pd.date_range("2025-07-01", periods=n, freq="15min")
    ds = cubes.make_cube(times, ["a"], arr[:, None], np.abs(arr[:, None]), "CNY", 900)
    coarse = cubes.resample(ds, 900 * k)
    assert coarse.attrs["slot_s"] == 900 * k
    np.testing.assert_allclose(coarse["price_per_kwh"].values.mean(), arr.mean(), atol=1e-9)
    fine = cubes.resample(coarse, 900)
    np.testing.assert_allclose(fine["price_per_kwh"].values.mean(), arr.mean(), atol=1e-9)
    # Energy (constant power) x price over the horizon is kept too.
    np.testing.assert_allclose(fine["price_per_kwh"].values.sum() * 900,
                               coarse["price_per_kwh"].values.sum() * 900 * k, rtol=1e-12)


def test_a_slot_that_neither_divides_nor_multiplies_takes_the_overlap_mean() -> None:
    """45-minute slots into hours (and back into 20 minutes): each new slot is the
    time-weighted mean of the old ones it overlaps; a partial last slot is dropped."""
    times = pd.date_range("2025-07-01", periods=4, freq="45min")
    ds = cubes.make_cube(times, ["a", "b"], np.array([[1.0, 10], [2, 20], [3, 30], [4, 40]]),
                         np.array([[100.0, 0], [200, 0], [300, 0], [400, 0]]), "CNY", 2700)
    hourly = cubes.resample(ds, 3600)
    # hour 0: 45 min of 1 and 15 of 2; hour 1: 30 min each of 2 and 3; hour 2: 15 of 3, 45 of 4
    np.testing.assert_allclose(hourly["price_per_kwh"].values[:, 0], [1.25, 2.5, 3.75])
    np.testing.assert_allclose(hourly["price_per_kwh"].values[:, 1], [12.5, 25, 37.5])
    assert list(pd.DatetimeIndex(hourly["time"].values).hour) == [0, 1, 2]
    assert hourly.attrs["slot_s"] == 3600
    np.testing.assert_allclose(cubes.resample(hourly, 1200)["carbon_g_per_kwh"].values[:4, 0],
                               [125, 125, 125, 250])
    short = cubes.make_cube(times[:1], ["a"], np.ones((1, 1)), np.ones((1, 1)), "CNY", 2700)
    with pytest.raises(CubeError, match="shorter than one 3600-s slot"):
        cubes.resample(short, 3600)


@settings(max_examples=40, deadline=None)
@given(values=st.lists(st.floats(-50, 500, allow_nan=False), min_size=8, max_size=48),
       minutes=st.sampled_from([20, 40, 45, 50, 90, 100]))
def test_any_slot_length_keeps_the_time_weighted_mean(values: list[float],
                                                      minutes: int) -> None:
    arr = np.asarray(values)
    times = pd.date_range("2025-07-01", periods=len(arr), freq="15min")
    ds = cubes.make_cube(times, ["a"], arr[:, None], np.abs(arr[:, None]), "CNY", 900)
    out = cubes.resample(ds, minutes * 60)
    n = out.sizes["time"]
    covered = n * minutes * 60 // 900  # old slots inside the new whole ones (when aligned)
    if (n * minutes) % 15 == 0:
        np.testing.assert_allclose(out["price_per_kwh"].values.sum() * minutes,
                                   arr[:covered].sum() * 15, rtol=1e-9, atol=1e-6)


def test_validation_names_region_and_time_of_nan() -> None:
    ds = _cube()
    ds["carbon_g_per_kwh"].values[3, 1] = np.nan
    with pytest.raises(CubeError, match=r"region b at 2025-07-01T00:45:00"):
        cubes.validate_cube(ds)


def test_validation_catches_duplicates_order_and_gaps() -> None:
    ds = _cube()
    t = ds["time"].values.copy()
    t[2] = t[1]
    with pytest.raises(CubeError, match="duplicate timestamp 2025-07-01T00:15:00"):
        cubes.validate_cube(ds.assign_coords(time=t))
    t = ds["time"].values.copy()
    t[2], t[3] = t[3], t[2]
    with pytest.raises(CubeError, match="go backwards at 2025-07-01T00:30:00"):
        cubes.validate_cube(ds.assign_coords(time=t))
    with pytest.raises(CubeError, match="gap in the cube: 2025-07-01T00:15:00"):
        cubes.validate_cube(ds.drop_isel(time=2))
    with pytest.raises(CubeError, match=r"lacks regions \['c'\]"):
        cubes.validate_cube(ds, regions=["a", "c"])


def test_series_gap_and_missing_region_raise_unless_filled() -> None:
    s = _series("a", "2025-07-01", 6, "h", np.arange(6.0), np.arange(6.0))
    s = s.drop(index=[2, 3])
    with pytest.raises(CubeError, match="price_per_kwh is missing for region a at 2025-07-01T02"):
        cubes.cube_from_series(s, 3600, "2025-07-01T00:00Z", "2025-07-01T06:00Z")
    filled = cubes.cube_from_series(s, 3600, "2025-07-01T00:00Z", "2025-07-01T06:00Z",
                                    fill="hold")
    np.testing.assert_allclose(filled["price_per_kwh"].values[:, 0], [0, 1, 1, 1, 4, 5])
    with pytest.raises(CubeError, match=r"no grid series for regions \['zz'\]"):
        cubes.cube_from_series(s, 3600, "2025-07-01T00:00Z", "2025-07-01T06:00Z",
                               regions=["a", "zz"])


def test_forecast_modes() -> None:
    n = 96 * 2 + 8
    times = pd.date_range("2025-07-01", periods=n, freq="15min")
    price = np.column_stack([np.arange(n, dtype=float) + 1.0])
    ds = cubes.make_cube(times, ["a"], price, price * 2, "CNY", 900)
    perfect = forecast(ds, 100, 10, mode="perfect")
    np.testing.assert_allclose(perfect.price_per_kwh[:, 0], price[100:110, 0])
    naive = forecast(ds, 100, 10, mode="seasonal-naive")
    assert naive.price_per_kwh[0, 0] == price[100, 0]
    np.testing.assert_allclose(naive.price_per_kwh[1:, 0], price[5:14, 0])
    early = forecast(ds, 3, 5, mode="seasonal-naive")
    np.testing.assert_allclose(early.price_per_kwh[1:, 0], price[3, 0])  # persistence
    noisy_a = forecast(ds, 100, 50, mode="noisy", error=0.2, seed=1)
    noisy_b = forecast(ds, 100, 50, mode="noisy", error=0.2, seed=1)
    np.testing.assert_array_equal(noisy_a.price_per_kwh, noisy_b.price_per_kwh)
    assert noisy_a.price_per_kwh[0, 0] == price[100, 0]
    rel = noisy_a.price_per_kwh[1:, 0] / price[101:150, 0] - 1
    assert 0.05 < rel.std() < 0.4
    with pytest.raises(ValueError, match="unknown forecast mode"):
        forecast(ds, 0, mode="oracle")


def test_forecast_has_no_default_mode() -> None:
    """Hindsight (``perfect``) is never what a caller gets by leaving the mode out."""
    times = pd.date_range("2025-07-01", periods=8, freq="15min")
    ds = cubes.make_cube(times, ["a"], np.ones((8, 1)), np.ones((8, 1)), "CNY", 900)
    with pytest.raises(TypeError, match="mode"):
        forecast(ds, 0)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        forecast(ds, 0, None, "perfect")  # type: ignore[misc]


def test_noisy_forecast_keeps_the_sign_of_prices() -> None:
    """Negative prices stay <= 0 and positive ones >= 0 however large the error."""
    n = 200
    times = pd.date_range("2025-07-01", periods=n, freq="15min")
    price = np.column_stack([np.where(np.arange(n) % 2, 1.0, -1.0)])
    ds = cubes.make_cube(times, ["a"], price, np.abs(price) * 300, "EUR", 900)
    fc = forecast(ds, 0, None, mode="noisy", error=3.0, seed=0)
    assert np.all(fc.price_per_kwh[:, 0] * price[:, 0] >= 0)
    assert np.all(fc.carbon_g_per_kwh >= 0)


def test_summary_and_local_hours(seed3) -> None:
    table = cubes.summary(seed3.grid)
    row = table.set_index("region").loc["guangdong"]
    # Guangdong's published TOU: valley 0.38 x flat, critical peak 1.25 x 1.7 x flat.
    assert row["price_per_kwh_min"] == pytest.approx(0.65 * 0.38)
    assert row["price_per_kwh_max"] == pytest.approx(0.65 * 1.7 * 1.25)
    hours = cubes.local_hours(seed3.grid, "guangdong")
    assert hours[0] == 0.0  # the week starts at local midnight


def test_prices_without_currency_are_refused() -> None:
    s = _series("a", "2025-07-01", 3, "h", [1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    s["currency"] = None
    with pytest.raises(CubeError, match="carry no currency"):
        cubes.cube_from_series(s, 3600, "2025-07-01T00:00Z", "2025-07-01T03:00Z")
    ds = cubes.cube_from_series(s, 3600, "2025-07-01T00:00Z", "2025-07-01T03:00Z",
                                currency="EUR")
    assert ds["price_per_kwh"].attrs["units"] == "EUR/kWh"


def test_default_forecast_is_the_tariff_for_a_tariff_and_seasonal_naive_for_a_market(
        seed3) -> None:  # type: ignore[no-untyped-def]
    import dataclasses

    from workbench.cubes import price_kind
    from workbench.forecast import default_forecast_mode

    assert price_kind(seed3.grid) == "tariff"
    assert default_forecast_mode(seed3) == "tariff"
    # The same prices without the label are recognised by their calendar repetition.
    unlabelled = seed3.grid.copy()
    unlabelled.attrs.pop("price_kind")
    assert price_kind(unlabelled) == "tariff"
    # Market prices (noisy, many levels) are not a tariff.
    rng = np.random.default_rng(0)
    market = unlabelled.copy(deep=True)
    market["price_per_kwh"].values[:] *= np.exp(0.1 * rng.standard_normal(
        market["price_per_kwh"].shape))
    assert price_kind(market) == "market"
    assert default_forecast_mode(dataclasses.replace(seed3, grid=market)) == "seasonal-naive"
    # The tariff mode tells the published prices exactly, carbon only seasonal naive.
    fc = forecast(seed3.grid.isel(time=slice(0, seed3.n_slots)), 100, None, mode="tariff")
    truth = seed3.grid["price_per_kwh"].values[100:seed3.n_slots]
    assert np.array_equal(fc.price_per_kwh, truth)
    assert not np.array_equal(fc.carbon_g_per_kwh,
                              seed3.grid["carbon_g_per_kwh"].values[100:seed3.n_slots])
