"""Baseline policies: each one's defining behaviour on a tiny two-datacenter scenario."""

from __future__ import annotations

import pytest
from helpers_sim import inference, tiny_scenario, training

from workbench.forecast import default_forecast_mode
from workbench.policies.baselines import (
    AsapHome,
    CarbonScaling,
    CheapestAtArrival,
    GoodputOnly,
    WaitForCheap,
)
from workbench.sim import simulate


def running(res, job_id: str):
    rows = res.plan[(res.plan["job_id"] == job_id) & (res.plan["n_gpus"] > 0)]
    return rows


def test_asap_home_is_fifo_at_home_with_requested_config() -> None:
    jobs = [training("first", gpus=2, slots_of_work=2.0),
            training("second", gpus=2, slots_of_work=1.0),
            training("third", gpus=1, arrival_slot=1, slots_of_work=1.0)]
    sc = tiny_scenario(jobs, n_slots=8, gpus_a=3, price_a=[1.0], price_b=[0.01])
    res = simulate(sc, AsapHome(), forecast_mode=default_forecast_mode(sc))
    first, second, third = (running(res, j) for j in ("first", "second", "third"))
    assert first["slot"].tolist() == [0, 1, 2]
    # second waits for the 2 GPUs; third (1 GPU) fills the gap beside first
    assert second["slot"].min() == 3
    assert third["slot"].min() == 1
    assert set(res.plan.loc[res.plan["n_gpus"] > 0, "region"]) == {"a"}
    assert (first["n_gpus"] == 2).all() and (first["batch_size"] == 128).all()
    assert res.metrics["migrations"] == 0


def test_cheapest_at_arrival_picks_lowest_price_times_pue_and_stays() -> None:
    # Over its expected 2 slots b is cheaper (0.5 x 1.2 < 1.0 x 1.5); from slot 2 on b
    # is dearer, but the job stays where it started.
    sc = tiny_scenario([training("j", slots_of_work=2.0)], n_slots=6,
                       price_a=[1.0, 1.0, 0.1, 0.1, 0.1, 0.1],
                       price_b=[0.5, 0.5, 3.0, 3.0, 3.0, 3.0])
    res = simulate(sc, CheapestAtArrival(), forecast_mode=default_forecast_mode(sc))
    assert running(res, "j")["slot"].tolist() == [0, 1, 2]
    assert set(running(res, "j")["region"]) == {"b"}
    assert res.metrics["migrations"] == 0
    assert res.metrics["energy_moved_kwh"] > 0


def test_wait_for_cheap_shifts_into_the_cheap_slots_before_the_deadline() -> None:
    price = [1.0, 1.0, 1.0, 0.2, 0.2, 0.2, 1.0, 1.0, 1.0, 1.0]
    jobs = [training("flex", slots_of_work=1.0, deadline_slot=10),
            training("tight", slots_of_work=2.0, deadline_slot=3)]
    sc = tiny_scenario(jobs, n_slots=10, price_a=price)
    # The policy is told the future (a what-if): this tests how it uses a forecast.
    res = simulate(sc, WaitForCheap(margin=0.5), forecast_mode="perfect")
    assert running(res, "flex")["slot"].tolist() == [3, 4]
    assert running(res, "tight")["slot"].tolist()[0] == 0  # no slack: runs at once
    assert res.metrics["deadline_misses"] == 0
    asap = simulate(sc, AsapHome(), forecast_mode=default_forecast_mode(sc))
    assert res.metrics["cost"] < asap.metrics["cost"]


def test_carbon_scaling_uses_more_gpus_when_carbon_is_low() -> None:
    carbon = [900.0, 900.0, 100.0, 100.0, 900.0, 900.0, 900.0, 900.0]
    sc = tiny_scenario([training("j", slots_of_work=3.0, deadline_slot=8, counts=(1, 2, 4))],
                       n_slots=8, carbon_a=carbon)
    res = simulate(sc, CarbonScaling(margin=0.25), forecast_mode="perfect")
    rows = running(res, "j")
    n_low = rows.loc[rows["slot"].isin([2, 3]), "n_gpus"]
    n_high = rows.loc[~rows["slot"].isin([2, 3]), "n_gpus"]
    assert n_low.max() >= 2
    assert n_high.empty or n_high.max() <= n_low.max()
    assert res.jobs.set_index("job_id").loc["j", "deadline_met"]
    assert set(rows["region"]) == {"a"}
    asap = simulate(sc, AsapHome(), forecast_mode=default_forecast_mode(sc))
    assert res.metrics["carbon_kg"] < asap.metrics["carbon_kg"]


def test_carbon_scaling_scales_up_when_the_deadline_is_near() -> None:
    sc = tiny_scenario([training("j", slots_of_work=3.0, deadline_slot=2, counts=(1, 2, 4))],
                       n_slots=4)
    res = simulate(sc, CarbonScaling(), forecast_mode=default_forecast_mode(sc))
    assert running(res, "j")["n_gpus"].iloc[0] == 4


def test_goodput_only_is_blind_to_price_and_fills_capacity() -> None:
    jobs = [training("j", slots_of_work=2.0, counts=(1, 2, 4)),
            training("k", home="b", slots_of_work=2.0, counts=(1, 2, 4))]
    cheap_b = tiny_scenario(jobs, n_slots=4, price_b=[0.01], carbon_b=[10.0])
    dear_b = tiny_scenario(jobs, n_slots=4, price_b=[50.0], carbon_b=[2000.0])
    a = simulate(cheap_b, GoodputOnly(), forecast_mode=default_forecast_mode(cheap_b))
    b = simulate(dear_b, GoodputOnly(), forecast_mode=default_forecast_mode(dear_b))
    cols = ["slot", "job_id", "region", "n_gpus", "batch_size", "action"]
    assert a.plan[cols].equals(b.plan[cols])
    first = a.plan[a.plan["slot"] == 0]
    assert first["n_gpus"].sum() >= 4  # more than the requested 1 + 1


@pytest.mark.parametrize("policy", [AsapHome, CheapestAtArrival, WaitForCheap, CarbonScaling,
                                    GoodputOnly])
def test_every_baseline_serves_inference_every_slot(policy) -> None:
    # home a is full of the service's own size only once: the second goes to b.
    jobs = [inference("s1", gpus=2, last=4), inference("s2", gpus=2, last=4),
            inference("s3", gpus=2, last=4), training("t", slots_of_work=1.0)]
    sc = tiny_scenario(jobs, n_slots=4, gpus_a=4, gpus_b=4)
    res = simulate(sc, policy(), forecast_mode=default_forecast_mode(sc))
    svc = res.plan[res.plan["kind"] == "inference"]
    assert (svc["n_gpus"] == 2).all()
    assert res.metrics["inference_unserved_slots"] == 0
    assert set(svc.loc[svc["job_id"] == "s3", "region"]) == {"b"}
    assert res.metrics["migrations"] == 0


def test_knobs_are_validated() -> None:
    with pytest.raises(ValueError, match="restart_s"):
        AsapHome(restart_s=-1)
    with pytest.raises(ValueError, match="margin"):
        WaitForCheap(margin=-0.1)
    with pytest.raises(ValueError, match="default_slack_h"):
        CarbonScaling(default_slack_h=0)


def test_registry_builds_the_baselines_by_name() -> None:
    policies = pytest.importorskip("workbench.policies")
    for name, cls in [("asap-home", AsapHome), ("cheapest-at-arrival", CheapestAtArrival),
                      ("wait-for-cheap", WaitForCheap), ("carbon-scaling", CarbonScaling),
                      ("goodput-only", GoodputOnly)]:
        pol = policies.make_policy(name, restart_s=60.0)
        assert type(pol) is cls and pol.name == name
