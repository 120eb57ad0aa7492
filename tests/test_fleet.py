"""The fleet generator: deterministic, from the real zones, repeats shifted by weeks, latencies
from the matrix, job streams copied to the wanted concurrency."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from workbench.fleet import FLEET_ZONES, build_fleet, fleet_sites
from workbench.io.latency import latency_ms, read_latency_matrix


@pytest.mark.slow
def test_the_same_arguments_give_the_same_fleet(shared_data: Path) -> None:
    """Two builds alike, past the zones' first round (the sites a week later)."""
    n = len(FLEET_ZONES) + 4
    one = build_fleet(shared_data, n_datacenters=n, active_jobs=400, horizon_h=6.0)
    two = build_fleet(shared_data, n_datacenters=n, active_jobs=400, horizon_h=6.0)
    assert one.datacenters == two.datacenters
    assert one.pools == two.pools
    assert one.links == two.links
    assert one.jobs == two.jobs
    assert one.profiles == two.profiles
    for var in ("price_per_kwh", "carbon_g_per_kwh"):
        np.testing.assert_array_equal(one.grid[var].values, two.grid[var].values)
    assert one.history is not None and two.history is not None
    np.testing.assert_array_equal(one.history["price_per_kwh"].values,
                                  two.history["price_per_kwh"].values)
    # Enough jobs running at the start, every site linked to every other.
    assert sum(j.arrival <= one.start for j in one.jobs) >= 400
    assert len(one.links) == n * (n - 1) // 2
    assert {j.home for j in one.jobs} <= {d.name for d in one.datacenters}


@pytest.mark.slow
def test_sites_take_every_zone_then_repeat_it_a_week_later(shared_data: Path) -> None:
    n = len(FLEET_ZONES) + 3
    sites = fleet_sites(shared_data, n)
    assert [d.region for d in sites.datacenters[:len(FLEET_ZONES)]] == [
        z.name for z in FLEET_ZONES]
    series = sites.series.set_index(["region", "time_utc"]).sort_index()
    for k in range(3):
        zone = FLEET_ZONES[k].name
        repeat = sites.datacenters[len(FLEET_ZONES) + k]
        assert repeat.region == f"{zone}+7d" and repeat.grid_zone == FLEET_ZONES[k].matrix_zone
        # The repeat's value at t is the zone's at t - 7 days.
        t = pd.Timestamp("2023-03-10 12:00")
        for var in ("price_per_kwh", "carbon_g_per_kwh"):
            assert series.loc[(repeat.region, t), var] == series.loc[
                (zone, t - pd.Timedelta(days=7)), var]
    # No carbon intensity below zero (AVERT's negative marginal hours are taken as 0).
    assert (sites.series["carbon_g_per_kwh"].dropna() >= 0).all()


@pytest.mark.slow
def test_latencies_come_from_the_matrix(shared_data: Path) -> None:
    sites = fleet_sites(shared_data, 8)
    matrix = read_latency_matrix(shared_data / "grid/electricitymaps/gcp_latency_matrix.csv")
    for lk in sites.links:
        a = next(d for d in sites.datacenters if d.name == lk.src)
        b = next(d for d in sites.datacenters if d.name == lk.dst)
        assert lk.latency_ms == latency_ms(matrix, a.grid_zone, b.grid_zone)


def test_bad_sizes_are_refused(shared_data: Path) -> None:
    with pytest.raises(ValueError, match="n_datacenters"):
        fleet_sites(shared_data, 0)
    with pytest.raises(ValueError, match="active_jobs"):
        build_fleet(shared_data, n_datacenters=4, active_jobs=0)
    with pytest.raises(ValueError, match="horizon_h"):
        build_fleet(shared_data, n_datacenters=4, active_jobs=10, horizon_h=0.01)
