"""Issue 38, item 3: a forecast revised within its day when the truth leaves its band, and
the look-ahead re-planning then rather than waiting for its clock."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import numpy as np
import pandas as pd
import pytest
from helpers_policies import perfect_forecast, tiny_scenario, training_job

from workbench import cubes
from workbench.forecast import forecast
from workbench.forecast.rolling import error_persistence
from workbench.forecast.scenario import ModelForecast
from workbench.policies.base import JobState, SlotState
from workbench.policies.lookahead import LookaheadPolicy

T0 = pd.Timestamp("2024-01-01")


def _flat(regions: tuple[str, ...], rho: float, lo: float = 9.0, mid: float = 10.0,
          hi: float = 11.0) -> ModelForecast:
    """One forecast issued at T0: every hour ``mid`` in a band ``[lo, hi]``, both variables."""
    n = len(regions)
    paths = {v: {q: np.full((1, 48, n), val) for q, val in ((0.1, lo), (0.5, mid), (0.9, hi))}
             for v in cubes.VARIABLES}
    return ModelForecast(model="m", origins=pd.DatetimeIndex([T0]), regions=regions,
                         horizon_h=48, paths=paths, history_days=30.0,
                         rho={v: np.full((1, n), rho) for v in cubes.VARIABLES})


def test_error_persistence_is_the_ar1_coefficient_of_the_errors() -> None:
    rng = np.random.default_rng(7)
    e = np.zeros((40, 48))
    for k in range(1, 48):
        e[:, k] = 0.8 * e[:, k - 1] + rng.standard_normal(40)
    assert error_persistence(e) == pytest.approx(0.8, abs=0.05)
    assert error_persistence(np.zeros((3, 24))) == 0.0
    assert error_persistence(np.array([[1.0]])) == 0.0
    # Errors that flip sign hour to hour carry nothing into the next hour.
    assert error_persistence(np.array([[1.0, -1.0, 1.0, -1.0]])) == 0.0


def test_inside_its_band_the_issued_median_stands() -> None:
    fm = _flat(("z",), rho=0.5)
    times = pd.date_range(T0 + pd.Timedelta(hours=3), periods=5, freq="h")
    path, out = fm.revised(times, "price_per_kwh", np.array([10.8]))
    assert not out.any()
    np.testing.assert_array_equal(path[:, 0], [10.8, 10, 10, 10, 10])


def test_beyond_its_band_the_error_is_carried_ahead_at_its_persistence() -> None:
    fm = _flat(("z",), rho=0.5)
    times = pd.date_range(T0 + pd.Timedelta(hours=3), periods=4, freq="h")
    path, out = fm.revised(times, "price_per_kwh", np.array([14.0]))
    assert out.tolist() == [True]
    np.testing.assert_allclose(path[:, 0], [14.0, 10 + 4 * 0.5, 10 + 4 * 0.25, 10 + 4 * 0.125])
    # 15-minute slots: the error decays by the hour, not by the slot.
    quarter = pd.date_range(T0, periods=5, freq="15min")
    path, _ = fm.revised(quarter, "price_per_kwh", np.array([14.0]), slot_s=900)
    np.testing.assert_allclose(path[4, 0], 10 + 4 * 0.5)
    # Carbon never goes below 0; without persistence nothing is carried.
    path, out = fm.revised(times, "carbon_g_per_kwh", np.array([-100.0]))
    assert out.tolist() == [True] and (path[1:] >= 0).all()
    still = replace(fm, rho={})
    path, out = still.revised(times, "price_per_kwh", np.array([14.0]))
    assert out.tolist() == [True]
    np.testing.assert_array_equal(path[1:, 0], [10, 10, 10])


def test_the_model_forecast_names_the_series_that_left_their_band() -> None:
    sc = tiny_scenario([training_job("j", "a")], prices=[[10.0, 14.0]] * 8,
                       carbons=[[10.0, 10.0]] * 8)
    fm = _flat(("b", "a"), rho=0.5)  # the model's regions in another order than the cube's
    fc = forecast(sc.grid.assign_attrs(slot_s=sc.slot_s), 0, mode="model", model=fm)
    assert fc.band_miss == ("price_per_kwh:b",)
    # Row 0 is the truth; b's price ahead carries its error, a's stands at the median.
    np.testing.assert_allclose(fc.price_per_kwh[:, 0], 10.0)
    assert fc.price_per_kwh[0, 1] == 14.0
    np.testing.assert_allclose(fc.price_per_kwh[1:, 1],
                               10 + 4 * 0.5 ** (np.arange(1, 8) / 4))
    np.testing.assert_allclose(fc.carbon_g_per_kwh, 10.0)


@pytest.mark.parametrize("miss", [False, True])
def test_a_forecast_that_leaves_its_band_re_plans_the_window_before_its_clock(
        miss: bool) -> None:
    jobs = [training_job("j1", "a", 2.0, deadline_slot=8)]
    sc = tiny_scenario(jobs, prices=[[1.0, 2.0]] * 8)
    pol = LookaheadPolicy(window_h=2.0)  # 15-minute slots: a clock re-plan every 4 slots
    pol.reset(sc.view())

    def state(t: int) -> SlotState:
        return SlotState(scenario=sc.view(), t=t, time=sc.start + timedelta(
            seconds=sc.slot_s * t), jobs=(JobState(job=jobs[0], remaining=1.0,
                                                   placement=None, last_datacenter="a",
                                                   phi=200.0),))

    pol.decide(state(0), perfect_forecast(sc, 0))
    assert pol.replans == 1
    told = perfect_forecast(sc, 1)
    pol.decide(state(1), replace(told, band_miss=("price_per_kwh:a",) if miss else ()))
    assert pol.replans == (2 if miss else 1)


def test_the_revision_rule_is_named_and_checked() -> None:
    from workbench.forecast import ForecastError

    fm = _flat(("z",), rho=0.5)
    times = pd.date_range(T0, periods=3, freq="h")
    never = replace(fm, revise="none")
    path, out = never.revised(times, "price_per_kwh", np.array([14.0]))
    assert out.tolist() == [True]  # still told: the re-plan trigger does not depend on it
    np.testing.assert_array_equal(path[:, 0], [14.0, 10, 10])
    every = replace(fm, revise="always")
    path, out = every.revised(times, "price_per_kwh", np.array([10.8]))
    assert not out.any()
    np.testing.assert_allclose(path[:, 0], [10.8, 10.4, 10.2])
    with pytest.raises(ForecastError, match="unknown forecast revision 'sometimes'"):
        replace(fm, revise="sometimes")
