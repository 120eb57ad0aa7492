"""The block-problem builder shared by the look-ahead and the hindsight plan."""

from __future__ import annotations

import numpy as np
import pytest
from helpers_policies import tiny_scenario, training_job

from workbench.caps import Caps
from workbench.optim.blocklp import BlockConfig, ConfigArrays
from workbench.policies.blockproblem import block_power_caps, block_problem, column_prices


def _configs() -> ConfigArrays:
    return ConfigArrays.of([
        BlockConfig(datacenter="a", gpu_type="A100", n_gpus=1, pool=0, dc=0, rate=0.5,
                    energy_kwh=2.0),
        BlockConfig(datacenter="b", gpu_type="A100", n_gpus=1, pool=1, dc=1, rate=0.5,
                    energy_kwh=4.0)])


def test_columns_are_priced_at_their_blocks_price_and_carbon() -> None:
    cfg = _configs()
    price = np.array([[1.0, 3.0], [2.0, 5.0]])        # blocks x datacenters
    carbon = np.array([[100.0, 300.0], [200.0, 500.0]])
    cost, kg = column_prices(cfg, np.array([1, 0]), price, carbon)
    np.testing.assert_allclose(cost, [2.0 * 2.0, 4.0 * 3.0])
    np.testing.assert_allclose(kg, [2.0 * 200.0 / 1000, 4.0 * 300.0 / 1000])
    empty = column_prices(cfg.take(np.zeros(0, dtype=np.int64)), np.zeros(0, dtype=np.int64),
                          price, carbon)
    assert all(a.shape == (0,) for a in empty)


def test_the_problem_takes_the_pools_the_clock_and_the_work_rows_from_the_scenario() -> None:
    sc = tiny_scenario([training_job("j1", "a", 2.0, deadline_slot=8)], n_slots=8).view()
    assert block_power_caps(sc, Caps(), np.array([0, 4])) is None
    cfg = _configs()
    prob = block_problem(
        sc, block_len=np.array([4]), job=np.array([0, 1]), block=np.array([0, 0]),
        slots=np.array([4.0, 4.0]), configs=cfg, rate=cfg.rate, cost=np.array([1.0, 2.0]),
        carbon_kg=np.array([0.1, 0.2]), training=np.array([True, False]),
        need=np.array([0.5]), shortfall_weight=10.0, carbon_slack_weight=1.0,
        power_cap_kw=None)
    np.testing.assert_array_equal(prob.must_run, [False, True])
    np.testing.assert_array_equal(prob.work_jobs, [0])
    assert prob.slot_s == pytest.approx(float(sc.slot_s))
    np.testing.assert_array_equal(prob.pool_capacity, [p.count for p in sc.pools])
    np.testing.assert_array_equal(prob.cost, [1.0, 2.0])    # no supply: costs as given
