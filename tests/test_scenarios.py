"""The embedded seed3 scenario: deterministic, and shaped as its data/README says."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from workbench import cubes, scenarios
from workbench.scenarios import build_seed3


def test_generator_is_deterministic(seed3) -> None:
    again = build_seed3(seed=0)
    assert again.jobs == seed3.jobs
    np.testing.assert_array_equal(again.grid["carbon_g_per_kwh"].values,
                                  seed3.grid["carbon_g_per_kwh"].values)
    other = build_seed3(seed=1)
    assert other.jobs != seed3.jobs


def test_shape_of_the_week(seed3) -> None:
    assert seed3.n_slots == 7 * 96 and seed3.slot_s == 900
    assert {d.name for d in seed3.datacenters} == {"guangzhou", "guiyang", "suzhou"}
    training = seed3.jobs_of_kind("training")
    assert 120 <= len(training) <= 180
    assert len(seed3.jobs_of_kind("inference")) >= 3
    assert {j.app for j in training} == {"cifar10", "imagenet", "bert", "deepspeech2",
                                         "yolov3", "ncf"}
    for job in training:
        assert job.deadline is not None and seed3.start <= job.arrival < job.deadline <= seed3.end
    # July: the week lies in Guangdong's critical-peak season.
    assert seed3.start.month == 7


@pytest.mark.parametrize(
    ("local_hour", "ratio"),
    [(3, 0.38), (9, 1.0), (10, 1.7), (11, 1.7 * 1.25), (13, 1.0), (15, 1.7 * 1.25),
     (18, 1.7), (20, 1.0)],
)
def test_guangdong_tariff_windows(seed3, local_hour: int, ratio: float) -> None:
    hours = cubes.local_hours(seed3.grid, "guangdong")
    price = seed3.grid["price_per_kwh"].sel(region="guangdong").values
    assert np.allclose(price[hours == local_hour], 0.65 * ratio)


def test_guizhou_is_cheapest_and_cleanest(seed3) -> None:
    table = cubes.summary(seed3.grid).set_index("region")
    assert table.loc["guizhou", "price_per_kwh_mean"] < table.loc["guangdong",
                                                                  "price_per_kwh_mean"]
    assert table.loc["guizhou", "carbon_g_per_kwh_mean"] < min(
        table.loc["guangdong", "carbon_g_per_kwh_mean"],
        table.loc["jiangsu", "carbon_g_per_kwh_mean"])


def test_carbon_dips_at_midday(seed3) -> None:
    hours = cubes.local_hours(seed3.grid, "jiangsu")
    carbon = seed3.grid["carbon_g_per_kwh"].sel(region="jiangsu").values
    assert carbon[(hours >= 12) & (hours < 14)].mean() < carbon[(hours >= 2) & (hours < 4)].mean()


def test_tou_prices_respect_critical_months() -> None:
    tariff = {"flat": 1.0, "peak_ratio": 2.0, "valley_ratio": 0.5, "peak": [[10, 12]],
              "valley": [[0, 6]], "critical": [[11, 12]], "critical_factor": 1.5,
              "critical_months": [7]}
    times = pd.DatetimeIndex(["2025-07-01T03:00", "2025-12-01T03:00"])  # 11:00 in Shanghai
    np.testing.assert_allclose(scenarios.tou_prices(times, tariff, "Asia/Shanghai"), [3.0, 2.0])


def test_describe_has_the_documented_keys(seed3) -> None:
    info = scenarios.describe(seed3)
    assert {"regions", "gpu_pools", "links", "slots", "slot_minutes", "jobs"} <= set(info)
    assert info["slot_minutes"] == 15


def test_first_hours_cuts_horizon_jobs_and_services(seed3) -> None:
    day = scenarios.first_hours(seed3, 24, arrivals_h=6)
    assert day.n_slots == 96 and day.name == "seed3-24h"
    assert all(j.arrival < seed3.start + pd.Timedelta(hours=6) for j in day.jobs)
    assert all(j.end <= day.end for j in day.jobs_of_kind("inference"))
    assert len(day.jobs_of_kind("inference")) == len(seed3.jobs_of_kind("inference"))


def test_seed3_jobs_carry_their_dataset_sizes(seed3) -> None:  # type: ignore[no-untyped-def]
    sizes = {j.app: j.dataset_gb for j in seed3.jobs_of_kind("training")}
    assert sizes["imagenet"] == 144.0 and sizes["cifar10"] == 0.17
    assert all(j.dataset_gb > 0 for j in seed3.jobs)
