"""The hindsight bound: hand-known plans, bound labels, and below what the simulator charges."""

from __future__ import annotations

import math

import pytest
from helpers_policies import inference_job, run_slots, tiny_scenario, training_job

from workbench.caps import Caps
from workbench.policies import make_policy, policy_knobs
from workbench.policies.greedy import GreedyPolicy
from workbench.policies.lookahead import LookaheadPolicy
from workbench.policies.offline import OfflinePolicy
from workbench.policies.problems import job_configs
from workbench.policies.threshold import ThresholdPolicy


def _cheapest_cost(sc: object, job: object, price: float, dc: str) -> float:
    """Least cost of a whole job on one datacenter's configs at a constant price."""
    cfgs = [c for c in job_configs(sc, job) if c.datacenter == dc]  # type: ignore[arg-type]
    return min(c.energy_kwh / c.rate for c in cfgs) * price


def test_two_jobs_two_regions_hand_optimum() -> None:
    # b is always 4x cheaper and holds both jobs: the optimum runs both in b on their
    # most energy-efficient configuration; its cost is the sum of those.
    jobs = [training_job("j1", "a", 1.0, deadline_slot=8),
            training_job("j2", "a", 1.0, deadline_slot=8)]
    sc = tiny_scenario(jobs, prices=[[1.0, 0.25]] * 8)
    pol = OfflinePolicy(scenario=sc)
    pol.reset(sc.view())
    expect = sum(_cheapest_cost(sc, j, 0.25, "b") for j in jobs)
    assert pol.optimum_cost == pytest.approx(expect, rel=1e-6)
    assert not pol.shortfall and pol.block_slots == 1


def test_exact_milp_and_lp_bound_are_labelled() -> None:
    jobs = [training_job("j1", "a", 1.5, deadline_slot=6),
            training_job("j2", "b", 1.5, deadline_slot=6)]
    prices = [[1.0, 0.6]] * 3 + [[0.3, 0.9]] * 5
    sc = tiny_scenario(jobs, prices=prices)
    exact = OfflinePolicy(scenario=sc, exact_max_columns=10_000)
    exact.reset(sc.view())
    lp = OfflinePolicy(scenario=sc, exact_max_columns=0)
    lp.reset(sc.view())
    assert not exact.is_bound and lp.is_bound
    assert exact.bound["kind"] == "milp-optimal" and lp.bound["kind"] == "lp-relaxation"
    assert lp.bound["cost"] == pytest.approx(lp.optimum_cost)
    assert lp.optimum_cost <= exact.optimum_cost + 1e-9
    blocks = OfflinePolicy(scenario=sc, max_columns=20, exact_max_columns=0)
    blocks.reset(sc.view())
    assert blocks.block_slots > 1 and blocks.is_bound
    assert blocks.optimum_cost <= lp.optimum_cost + 1e-9


def test_shortfall_is_reported_for_impossible_deadlines(caplog: pytest.LogCaptureFixture) -> None:
    sc = tiny_scenario([training_job("j", "a", 20.0, deadline_slot=2, gpus=1, counts=(1,))])
    pol = OfflinePolicy(scenario=sc)
    pol.reset(sc.view())
    assert "j" in pol.shortfall and pol.shortfall["j"] > 0.5
    assert any("cannot finish" in r.getMessage() for r in caplog.records)


def test_carbon_cap_raises_the_cost() -> None:
    # b is cheap but dirty; a tight cap pushes work to clean, dear a.
    jobs = [training_job("j", "a", 2.0, deadline_slot=8)]
    sc = tiny_scenario(jobs, prices=[[1.0, 0.2]] * 8, carbons=[[50.0, 900.0]] * 8)
    free = OfflinePolicy(scenario=sc)
    free.reset(sc.view())
    capped = OfflinePolicy(scenario=sc, caps=Caps(carbon_kg=free.optimum_carbon_kg / 3))
    capped.reset(sc.view())
    assert capped.optimum_carbon_kg <= free.optimum_carbon_kg / 3 + 1e-6
    assert capped.optimum_cost > free.optimum_cost


@pytest.mark.parametrize("capped", ["a", "b"])
def test_a_per_datacenter_carbon_cap_binds_at_its_datacenter(capped: str) -> None:
    # The cheap datacenter is capped, by a cap keyed by it alone (one on "b", the second
    # datacenter, once indexed a row that did not exist). Both grids emit the same per kWh,
    # so the plan's carbon stays about what it was: a global cap of that size could not be
    # kept, the per-datacenter one is, by running the rest at the dearer, uncapped site.
    prices = [[0.5, 1.0] if capped == "a" else [1.0, 0.5]] * 8
    sc = tiny_scenario([training_job("j", "a", 2.0, deadline_slot=8)], prices=prices,
                       carbons=[[400.0, 400.0]] * 8)
    free = OfflinePolicy(scenario=sc)
    free.reset(sc.view())
    cap = free.optimum_carbon_kg / 4
    pol = OfflinePolicy(scenario=sc, caps=Caps(carbon_kg_by_dc={capped: cap}))
    pol.reset(sc.view())
    assert pol.carbon_slack_kg == pytest.approx(0.0, abs=1e-9) and not pol.shortfall
    assert pol.optimum_carbon_kg > 2 * cap
    assert pol.optimum_cost > free.optimum_cost + 1e-9


def _instance() -> object:
    jobs = [
        training_job("j1", "a", 1.5, deadline_slot=6),
        training_job("j2", "b", 2.0, arrival_slot=1, deadline_slot=8, gpus=4),
        training_job("j3", "a", 1.0, arrival_slot=2, deadline_slot=7, gpus=1),
        inference_job("i", "a", end_slot=8),
    ]
    prices = [[1.0, 0.8], [0.9, 0.7], [0.4, 0.9], [0.3, 1.0],
              [0.6, 0.2], [0.8, 0.3], [1.1, 0.5], [1.0, 0.9]]
    carbons = [[500.0, 300.0]] * 8
    return tiny_scenario(jobs, prices=prices, carbons=carbons, gpus_per_pool=6)


@pytest.mark.slow
@pytest.mark.parametrize("exact_max_columns", [0, 10_000])
def test_offline_is_never_worse_than_online_policies(exact_max_columns: int) -> None:
    sc = _instance()
    off = OfflinePolicy(scenario=sc, exact_max_columns=exact_max_columns)
    replay = run_slots(sc, off)  # type: ignore[arg-type]
    bound = float(off.bound["cost"])  # type: ignore[arg-type]
    assert math.isfinite(bound) and not off.shortfall
    for pol in (ThresholdPolicy(), ThresholdPolicy(V=1.0), LookaheadPolicy(), GreedyPolicy()):
        res = run_slots(sc, pol)  # type: ignore[arg-type]
        assert not res.unfinished, pol.name
        assert bound <= res.cost + 1e-9, pol.name
    # The replay pays the restarts and transfers the bound neglects: it costs at least it.
    assert replay.cost >= bound - 1e-9
    assert not replay.deadline_misses
    for pool in sc.pools:  # type: ignore[attr-defined]
        assert replay.max_pool_use.get(f"{pool.datacenter}/{pool.gpu_type}", 0) <= pool.count


def test_registry_builds_offline_with_the_truth() -> None:
    sc = tiny_scenario([training_job("j", "a", 1.0, deadline_slot=8)])
    pol = make_policy("offline", truth=sc, exact_max_columns=0)
    assert isinstance(pol, OfflinePolicy) and pol.name == "offline" and pol.truth is sc
    assert "scenario" not in policy_knobs("offline")
    # Without the truth, hindsight is impossible: the view holds no prices, no jobs.
    with pytest.raises(ValueError, match="needs the true scenario"):
        make_policy("offline").reset(sc.view())


def test_bound_stays_below_the_simulated_replay_with_moving_data() -> None:
    # The bound neglects dataset transfers and restarts; the simulator charges them.
    jobs = [training_job("j1", "a", 1.5, deadline_slot=8, dataset_gb=400.0),
            training_job("j2", "a", 1.0, deadline_slot=8, dataset_gb=400.0)]
    sc = tiny_scenario(jobs, prices=[[1.0, 0.25]] * 8)
    off = OfflinePolicy(scenario=sc)
    replay = run_slots(sc, off)
    assert off.bound["kind"] == "milp-optimal"
    assert replay.cost >= float(off.bound["cost"]) - 1e-9  # type: ignore[arg-type]
