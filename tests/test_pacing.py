"""The look-ahead's carbon-budget pacing: the price of a kg under a budget that binds, the work a
budget pays for, and the meter against the plan's kilograms for the work actually done."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from helpers_policies import perfect_forecast, tiny_scenario, training_job

from workbench.caps import Caps
from workbench.optim.blocklp import BlockProblem, ConfigArrays, solve_block_problem
from workbench.policies.base import JobState, Placement, SlotState
from workbench.policies.lookahead import LookaheadPolicy
from workbench.policies.pacing import (
    WindowEnd,
    abatement_price,
    least_carbon_plan,
)


def _window(**over: Any) -> BlockProblem:
    """One training job, one block of one slot, three configurations doing its whole work:
    A costs 1 and emits 10 kg, B 1.5 and 6 kg, C 5 and 2 kg (the frontier A-B-C: a kg
    costs 0.125 from A to B, 0.875 from B to C)."""
    cost = np.array([1.0, 1.5, 5.0])
    base: dict[str, Any] = dict(
        block_len=np.array([1]), job=np.zeros(3, dtype=np.int64),
        block=np.zeros(3, dtype=np.int64), slots=np.ones(3), cost=cost,
        configs=ConfigArrays(dc=np.zeros(3, dtype=np.int64), pool=np.arange(3),
                             n_gpus=np.ones(3), energy_kwh=np.ones(3), rate=np.ones(3)),
        rate=np.ones(3), carbon_kg=np.array([10.0, 6.0, 2.0]), must_run=np.array([False]),
        work_jobs=np.array([0]), need=np.array([1.0]), pool_capacity=np.ones(3),
        slot_s=3600.0, shortfall_weight=1e4, carbon_slack_weight=1e4)
    base.update(over)
    return BlockProblem(**base)


@pytest.mark.parametrize(("cheap", "clean", "want"), [
    ((10.0, 1.0), (2.0, 5.0), 0.5),     # 4 more for 8 kg less
    ((10.0, 1.0), (10.0, 1.0), 0.0),    # nothing to cut
    ((10.0, 3.0), (4.0, 2.0), 0.0),     # the cleaner plan is no dearer: cuts are free
])
def test_abatement_price_is_what_the_least_carbon_plan_pays_per_kg_it_cuts(
        cheap: tuple[float, float], clean: tuple[float, float], want: float) -> None:
    lbar = abatement_price(WindowEnd(np.array([cheap[0]]), cheap[1]),
                           WindowEnd(np.array([clean[0]]), clean[1]))
    assert lbar == pytest.approx(want)


def test_the_window_frontier_ends_and_a_budget_priced_at_the_average_cut() -> None:
    prob = _window()
    group = np.zeros(3, dtype=np.int64)
    cheap = solve_block_problem(prob, time_limit_s=10.0)
    cleanest = least_carbon_plan(prob, time_limit_s=10.0)
    ends = (WindowEnd.of(prob, cheap, group, 1), WindowEnd.of(prob, cleanest, group, 1))
    assert [e.carbon_kg.tolist() for e in ends] == [[10.0], [2.0]]
    assert [e.cost for e in ends] == pytest.approx([1.0, 5.0])
    lbar = abatement_price(*ends)
    assert lbar == pytest.approx(0.5)
    # A budget of 4 kg: kept at any price it takes B and C half and half, its dual the
    # 0.875 per kg of the frontier's last segment; with the slack priced at the average
    # cut (0.5) the window stops at B, where a kg still costs less than that.
    hard = solve_block_problem(replace(prob, carbon_group=group, carbon_cap_kg=np.array([4.0])),
                               time_limit_s=10.0)
    np.testing.assert_allclose(hard.x, [0.0, 0.5, 0.5], atol=1e-9)
    assert hard.carbon_price[0] == pytest.approx(0.875)
    priced = solve_block_problem(replace(prob, carbon_group=group,
                                         carbon_cap_kg=np.array([4.0]),
                                         carbon_slack_weight=lbar), time_limit_s=10.0)
    np.testing.assert_allclose(priced.x, [0.0, 1.0, 0.0], atol=1e-9)
    assert priced.slack_kg == pytest.approx(2.0)
    assert priced.carbon_price[0] == pytest.approx(lbar)


def _policy(jobs: list, n_slots: int, carbon_kg: float | None) -> LookaheadPolicy:
    sc = tiny_scenario(jobs, prices=[[1.0, 1.0]] * n_slots, n_slots=n_slots)
    pol = LookaheadPolicy(window_h=4.0, deadline_margin=0.0,
                          caps=None if carbon_kg is None else Caps(carbon_kg=carbon_kg))
    pol.reset(sc.view())  # type: ignore[arg-type]
    return pol


def test_a_budget_asks_only_the_work_due_within_the_horizon() -> None:
    # Arrival at slot 0, deadline at slot 40, horizon 20 slots: half the job is due within
    # the horizon (pro rata), as the hindsight bound counts it.
    job = training_job("j1", "a", 20.0, deadline_slot=40)
    pol = _policy([job], 20, 50.0)
    cfgs = [pol._configs(job)]
    restart = pol.config.restart_s / pol._sc.slot_s * max(c.rate for c in cfgs[0])  # type: ignore

    def needs(remaining: float, pace: float, paused: bool = True) -> float:
        js = JobState(job=job, remaining=remaining, phi=200.0, last_datacenter="a",
                      placement=None if paused else Placement("a", "A100", 1, 128))
        return float(pol.pacer.budget_needs([js], cfgs, np.array([pace]))[0])

    assert needs(1.0, 0.9) == pytest.approx(0.5 + restart)  # capped at what is due
    assert needs(1.0, 0.2) == pytest.approx(0.2)             # its pace asks less
    assert needs(0.5, 0.3) == 0.0                            # due share done: no restart
    assert needs(0.7, 0.9, paused=False) == pytest.approx(0.2)


def test_without_a_budget_the_window_asks_its_pace() -> None:
    job = training_job("j1", "a", 20.0, deadline_slot=40)
    pol = _policy([job], 20, None)
    assert pol.pacer.budget_parts(None, None, [], [], np.zeros(0),  # type: ignore[arg-type]
                                  np.zeros(0, dtype=np.int64), 4, pol.caps) == (None, None)


def test_the_meter_charges_work_done_early_at_the_plans_own_kg() -> None:
    """phi compares the meter with what the plan would have emitted for the work actually
    done: a job that ran twice its planned work at the plan's kg per unit is no overrun; the
    same kilograms for the planned work are; a slot where a job ran that the plan gave no
    work is not counted."""
    job = training_job("j1", "a", 20.0, deadline_slot=40)
    other = training_job("j2", "a", 20.0, deadline_slot=40)
    pol = _policy([job, other], 20, 50.0)
    sc = pol._sc
    assert sc is not None

    def slot(t: int, remaining: dict[str, float], kg_so_far: float) -> None:
        jobs = tuple(JobState(job=j, remaining=remaining[j.job_id], placement=None,
                              last_datacenter="a", phi=200.0) for j in (job, other))
        pol.pacer.meter_overrun(SlotState(scenario=sc, t=t, time=sc.start + timedelta(
            seconds=sc.slot_s * t), jobs=jobs, carbon_kg_so_far=kg_so_far), pol.caps)

    slot(0, {"j1": 1.0, "j2": 1.0}, 0.0)
    # The plan: services 1 kg per slot, j1 at 2 kg per unit of work; j2 not planned.
    pol.pacer.plans.planned = {t: (1.0, {"j1": 2.0}) for t in range(3)}
    slot(1, {"j1": 0.8, "j2": 1.0}, 1.4)            # 0.2 work: 1 + 0.4 kg, as planned
    assert pol.pacer.meter.overrun == pytest.approx([1.4, 1.4])
    slot(2, {"j1": 0.6, "j2": 1.0}, 1.4 + 2.0)      # 0.2 work for 2 kg: 1.4 planned
    assert pol.pacer.meter.overrun == pytest.approx([3.4, 2.8])
    slot(3, {"j1": 0.6, "j2": 0.9}, 5.0)            # j2 ran off plan: not counted
    assert pol.pacer.meter.overrun == pytest.approx([3.4, 2.8])


@pytest.mark.parametrize("budget_kg", [1e6, 1e-3])
def test_a_window_within_its_share_plans_uncapped_one_beyond_it_prices_a_kg_at_most_the_average_cut(
        budget_kg: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """A window whose uncapped plan keeps its share of the budget gets no budget rows (the
    slot sees no carbon price); one whose plan exceeds it gets rows whose duals, the price of
    a kg in the slot, never exceed the window's average price of a kg cut."""
    from workbench.policies import pacing

    seen: list[float] = []

    def spy(cheap: WindowEnd, clean: WindowEnd) -> float:
        seen.append(abatement_price(cheap, clean))
        return seen[-1]

    monkeypatch.setattr(pacing, "abatement_price", spy)
    # a cheap and dirty, b dear and clean, b's carbon rising over the window: cuts cost
    # more the further they go.
    jobs = [training_job("j1", "a", 2.0, deadline_slot=8),
            training_job("j2", "a", 2.0, deadline_slot=8)]
    sc = tiny_scenario(jobs, prices=[[0.3, 1.0]] * 8,
                       carbons=[[800.0, 100.0 + 50.0 * t] for t in range(8)], n_slots=8)
    pol = LookaheadPolicy(window_h=8.0, deadline_margin=0.0,
                          caps=Caps(carbon_kg=budget_kg))
    pol.reset(sc.view())  # type: ignore[arg-type]
    st = SlotState(scenario=sc.view(), t=0, time=sc.start, jobs=tuple(JobState(
        job=j, remaining=1.0, placement=None, last_datacenter=None, phi=200.0) for j in jobs))
    plan = pol.solve_window(st, perfect_forecast(sc, 0))
    if budget_kg > 1:
        assert plan.carbon_price_by_dc == {} and seen == []
    else:
        assert set(plan.carbon_price_by_dc) == {"a", "b"} and len(seen) == 1
        assert 0 < max(plan.carbon_price_by_dc.values()) <= seen[0] + 1e-9


def test_a_budget_keeps_room_for_the_jobs_still_to_arrive_within_the_window() -> None:
    """The window covers the whole horizon and t2 arrives halfway: the first plans reserve
    the budget of jobs still to come over every slot to come (the window's included), so
    t1 runs clean enough to leave t2 its share. A cap halfway between the look-ahead's
    floor and its uncapped carbon is met (reserving only for slots after the window, the
    first plan spent the whole budget on t1)."""
    from helpers_sim import tiny_scenario as sim_scenario
    from helpers_sim import training

    from workbench.runner import RunSpec, floor_run, simulate_spec

    jobs = [training("t1", "a", slots_of_work=2.0, deadline_slot=8),
            training("t2", "a", arrival_slot=4, slots_of_work=2.0, deadline_slot=8)]
    sc = sim_scenario(jobs, n_slots=8, price_a=[0.3], price_b=[1.0], carbon_a=[800.0],
                      carbon_b=[100.0 + 50.0 * t for t in range(8)])
    spec = RunSpec(sc.name, "lookahead", baseline=False)
    free, _ = simulate_spec(spec, sc)
    floor = floor_run(spec, sc, Caps()).metrics["carbon_kg"]
    assert floor < free.metrics["carbon_kg"]
    cap = 0.5 * (floor + free.metrics["carbon_kg"])
    res, _ = simulate_spec(replace(spec, caps=Caps(carbon_kg=cap)), sc)
    assert res.metrics["carbon_cap_met"] is True, (res.metrics["carbon_kg"], cap)
    assert res.metrics["deadline_misses"] == 0


def test_jobs_still_to_come_owe_the_horizon_what_their_life_allows() -> None:
    """The reserve for jobs still to arrive: the jobs seen so far arrive again at the rate
    they came, each owing within the horizon ``min(1, (N - s) / L)`` of its whole least
    carbon when it arrives at slot ``s`` (a job without a deadline owes all of it)."""
    from workbench.policies.pacing import BudgetPacer

    sc = tiny_scenario([training_job("j", "a")], n_slots=20)
    pacer = BudgetPacer(sc.view(), Caps(carbon_kg=100.0), restart_s=0.0, carbon_first=False,
                        time_limit_s=10.0, presolve=True)
    assert pacer.to_come(9, 1).tolist() == [0.0]
    pacer.meter.seen_kg["open"] = (0, 10.0, float("inf"))
    # 10 kg per 10 slots seen, 10 slots to come, all owed: 10 kg.
    assert pacer.to_come(9, 1).tolist() == pytest.approx([10.0])
    pacer.meter.seen_kg["short"] = (0, 10.0, 5.0)
    # Life 5: arriving k slots before the end it owes min(1, k / 5): 0.2 + ... + 1 + 5 = 8.
    assert pacer.to_come(9, 1).tolist() == pytest.approx([18.0])
    pacer.meter.seen_kg["elsewhere"] = (-1, 50.0, 5.0)  # under no budget
    assert pacer.to_come(9, 1).tolist() == pytest.approx([18.0])
    assert pacer.to_come(19, 1).tolist() == [0.0]  # nothing left to come
