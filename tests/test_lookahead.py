"""The receding-horizon look-ahead: the joint plan shares capacity, contention is priced."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from helpers_policies import (
    perfect_forecast,
    run_slots,
    tiny_scenario,
    training_job,
)

from workbench.optim.fastslot import FastSlotSolver
from workbench.optim.info import SolveInfo
from workbench.policies import make_policy
from workbench.policies.base import JobState, SlotState
from workbench.policies.lookahead import LookaheadPolicy
from workbench.policies.window import window_blocks
from workbench.schema import site_key


@pytest.mark.parametrize("knobs", [
    {"window_h": 0.0}, {"window_h": float("nan")}, {"replan_slots": 0},
    {"block_slots": 0}, {"deadline_margin": -0.1}, {"carbon_price_per_kg": -1.0},
    {"restart_s": -1.0}, {"caps": 0.0}, {"caps": {"power_kw": -2.0}},
])
def test_invalid_knobs_are_rejected(knobs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        LookaheadPolicy(**knobs)  # type: ignore[arg-type]


@pytest.mark.parametrize(("n", "fine", "block", "starts", "lens"), [
    (10, 4, 4, [0, 1, 2, 3, 4, 8], [1, 1, 1, 1, 4, 2]),
    (3, 4, 4, [0, 1, 2], [1, 1, 1]),
    (9, 1, 4, [0, 1, 5], [1, 4, 4]),
])
def test_window_blocks_table(n: int, fine: int, block: int, starts: list[int],
                             lens: list[int]) -> None:
    st, ln = window_blocks(n, fine, block)
    assert st.tolist() == starts and ln.tolist() == lens and int(ln.sum()) == n


def _valley_scenario() -> tuple[object, list[object]]:
    # One cheap valley (slots 4-5) and one 4-GPU pool per region; three 4-GPU jobs each
    # need about 2 slots of work, deadline slot 12. The valley holds one job only: a
    # per-job threshold sends all three to it; the joint plan must not.
    jobs = [training_job(f"j{i}", "a", 2.0, gpus=4, counts=(4,), deadline_slot=12)
            for i in range(3)]
    prices = [[1.0]] * 4 + [[0.1]] * 2 + [[1.0]] * 6
    sc = tiny_scenario(jobs, prices=prices, carbons=[[500.0]] * 12, n_slots=12,
                       regions=("a",))
    return sc, jobs


def test_joint_plan_respects_pool_capacity_in_every_block() -> None:
    sc, jobs = _valley_scenario()
    pol = LookaheadPolicy(window_h=3.0, deadline_margin=0.0)
    pol.reset(sc.view())  # type: ignore[arg-type]
    states = tuple(JobState(job=j, remaining=1.0, placement=None, last_datacenter=None,
                            phi=200.0) for j in jobs)  # type: ignore[attr-defined]
    state = SlotState(scenario=sc.view(), t=0, time=sc.start, jobs=states)  # type: ignore[attr-defined]
    plan = pol.solve_window(state, perfect_forecast(sc, 0))  # type: ignore[arg-type]
    assert plan.status == "Optimal"
    cap = sc.pools[0].count  # type: ignore[attr-defined]
    for b in range(plan.block_start.size):
        used = sum(n * s for (jid, bb), shares in plan.share.items() if bb == b
                   for (_, _, n), s in shares.items())
        assert used <= cap + 1e-6, f"block {b} uses {used} of {cap} GPUs"
    # Contention is priced: the valley is full, so the jobs' work duals exceed what the
    # valley alone would charge, and every job's work is planned.
    assert not plan.shortfall
    assert all(mu > 0 for mu in plan.mu.values())


def test_contended_valley_every_job_finishes_and_capacity_holds() -> None:
    sc, _ = _valley_scenario()
    res = run_slots(sc, LookaheadPolicy(window_h=3.0))  # type: ignore[arg-type]
    assert not res.unfinished and not res.deadline_misses
    assert res.max_pool_use["a/A100"] <= 4
    # The valley is used (it is the cheapest) and not left idle.
    valley = [t for t, a in enumerate(res.allocations) if a.placements and t in (4, 5)]
    assert valley == [4, 5]


def test_lookahead_waits_for_a_cheap_region_hour_when_it_has_slack() -> None:
    jobs = [training_job("j1", "a", 1.0, deadline_slot=12)]
    prices = [[5.0, 5.0]] * 6 + [[0.5, 0.5]] * 6
    sc = tiny_scenario(jobs, prices=prices, n_slots=12)
    res = run_slots(sc, LookaheadPolicy(window_h=3.0))
    assert not res.deadline_misses
    first = min(t for t, a in enumerate(res.allocations) if a.placements)
    assert first >= 6


def test_the_slot_follows_the_plans_slot_not_a_quota_of_the_replan_period() -> None:
    """One re-plan period (an hour of 15-minute slots): the plan runs the job in the
    period's two cheap slots; the slot decision runs it there, not in the dear first ones
    (a quota over the period gave the bonus to its first slots)."""
    jobs = [training_job("j1", "a", 1.8, deadline_slot=8, counts=(2,))]
    prices = [[1.5, 1.5]] * 2 + [[1.0, 1.0]] * 2 + [[3.0, 3.0]] * 4
    sc = tiny_scenario(jobs, prices=prices, n_slots=8)
    res = run_slots(sc, LookaheadPolicy(window_h=2.0, replan_slots=4, fine_slots=4,
                                        deadline_margin=0.0))
    ran = [t for t, a in enumerate(res.allocations) if a.placements]
    assert not res.deadline_misses
    assert ran[:2] == [2, 3]


def test_registry_and_view_only() -> None:
    pol = make_policy("lookahead", window_h=48.0)
    assert pol.name == "lookahead" and isinstance(pol, LookaheadPolicy)
    # The plan reads the forecast, not the scenario's grid: a forecast that lies about the
    # future changes the plan.
    jobs = [training_job("j1", "a", 1.0, deadline_slot=12)]
    sc = tiny_scenario(jobs, prices=[[1.0, 1.0]] * 12, n_slots=12)
    st = SlotState(scenario=sc.view(), t=0, time=sc.start, jobs=(JobState(
        job=jobs[0], remaining=1.0, placement=None, last_datacenter=None, phi=200.0),))
    fc = perfect_forecast(sc, 0)
    lie = type(fc)(t=0, regions=fc.regions, price_per_kwh=np.where(
        np.arange(12)[:, None] == 9, 0.01, fc.price_per_kwh), carbon_g_per_kwh=fc.carbon_g_per_kwh)
    p = LookaheadPolicy(window_h=3.0, deadline_margin=0.0)
    p.reset(sc.view())
    truthful = p.solve_window(st, fc)
    lied = p.solve_window(st, lie)
    blk = lied.block_of(9)
    assert any(b == blk for (_, b) in lied.share)
    assert truthful.share != lied.share


def test_a_failed_window_lp_is_reported_and_jobs_still_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = [training_job("j1", "a", 1.0, deadline_slot=8)]
    sc = tiny_scenario(jobs, n_slots=8)
    pol = LookaheadPolicy(window_h=2.0)

    def fail(*_: object) -> object:
        raise RuntimeError("look-ahead LP at slot 0 not solved: HiGHS Time limit reached")

    monkeypatch.setattr(pol, "solve_window", fail)
    res = run_slots(sc, pol)
    assert not res.unfinished and not res.deadline_misses
    first = res.allocations[0].solve
    assert first is not None and first.fallback and "not solved" in first.message


def test_a_failed_slot_milp_falls_back_to_the_greedy_allocation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The slot MILP times out every slot: the greedy feasible allocation runs the jobs,
    # within the pool's 4 GPUs, and every slot reports the fallback and why.
    jobs = [training_job(f"j{i}", "a", 1.0, gpus=2, counts=(2,), deadline_slot=8)
            for i in range(3)]
    sc = tiny_scenario(jobs, n_slots=8, regions=("a",))
    pol = LookaheadPolicy(window_h=2.0)

    def time_out(*_: object, **__: object) -> tuple[None, SolveInfo]:
        return None, SolveInfo(status="maxTimeLimit", solve_s=10.0, message="time limit")

    monkeypatch.setattr(FastSlotSolver, "__call__", time_out)
    res = run_slots(sc, pol)
    assert not res.unfinished and max(res.max_pool_use.values()) <= 4
    ran = [a.solve for a in res.allocations if a.placements]
    assert ran and all(s is not None and s.fallback and "greedy" in s.message for s in ran)


def test_window_need_follows_the_line_from_arrival_not_a_rolling_share() -> None:
    # Deadline at slot 50, window 4 slots, arrival at slot 0: the line ends at the planned
    # end, slot 45 (the deadline rule's margin, a tenth of the life, early), where the
    # job's part of the window ends too, and asks for 4/45 of the work per window. A job
    # ahead of its
    # line (it ran in the cheap hours) needs nothing more of this window; one behind it
    # needs what puts it back on the line.
    # (Through window_needs, what the next window LP would ask; no restart to charge.)
    job = training_job("j1", "a", 20.0, deadline_slot=50)
    sc = tiny_scenario([job], prices=[[1.0, 1.0]] * 50, n_slots=50)
    pol = LookaheadPolicy(window_h=4 * sc.slot_s / 3600, deadline_margin=0.1, restart_s=0.0)
    pol.reset(sc.view())  # type: ignore[arg-type]

    def need(t: int, remaining: float) -> float:
        js = JobState(job=job, remaining=remaining, placement=None, last_datacenter=None,
                      phi=200.0)
        state = SlotState(scenario=sc.view(), t=t,  # type: ignore[arg-type]
                          time=sc.start + timedelta(seconds=t * sc.slot_s), jobs=(js,))
        needs, ends = pol.window_needs(state)
        assert ends == {"j1": min(45 - t, 4)}
        return needs["j1"]

    on_line = 1.0 - 9.0 / 45.0                                # at slot 9
    assert need(0, 1.0) == pytest.approx(4.0 / 45.0)
    assert need(9, 0.5) == 0.0                                 # ahead of its line
    assert need(9, on_line) == pytest.approx(4.0 / 45.0)       # on the line
    assert need(9, on_line + 0.1) == pytest.approx(4.0 / 45.0 + 0.1)  # behind: catch up
    assert need(42, 0.3) == pytest.approx(0.3)                 # line ends in the window


def test_a_paused_job_ahead_of_its_line_is_not_asked_for_a_restarts_work() -> None:
    """The window LP charges a paused job the restart it pays to resume, but only when the
    window needs its work: a job ahead of its line stays paused (a restart's worth of need
    alone made such a job run one expensive slot in two, paying a restart each time)."""
    job = training_job("j1", "a", 20.0, deadline_slot=50)
    sc = tiny_scenario([job], prices=[[1.0, 1.0]] * 50, n_slots=50)
    pol = LookaheadPolicy(window_h=4.0, deadline_margin=0.1)
    pol.reset(sc.view())  # type: ignore[arg-type]
    cfgs = [pol._configs(job)]

    def need(remaining: float) -> float:
        js = JobState(job=job, remaining=remaining, placement=None, last_datacenter="a",
                      phi=200.0)
        return float(pol._window_jobs([js], cfgs, 9, 4)[2][0])

    restart = pol.config.restart_s / sc.slot_s * max(c.rate for c in cfgs[0])
    on_line = 1.0 - 9.0 / 45.0
    assert need(0.5) == 0.0                                   # ahead of its line: no need
    assert need(on_line) == pytest.approx(4.0 / 45.0 + restart)  # runs: pays its restart


def test_a_move_reports_its_gain_over_staying_with_a_reason_of_the_same_sign() -> None:
    """Issue 24 item 3: a move's expected_gain is its gain over the job's best way to stay
    (positive when the window plan moved it for its own sake), and its reason says so; a
    move that is worth less than staying (made for capacity) says that instead."""
    from helpers_sim import inference, training
    from helpers_sim import tiny_scenario as sim_scenario

    from workbench.runner import ForecastSettings, RunSpec, simulate_spec

    # a cheap first, then b: a tight training job and a service started at a move to b
    # (nothing contends). A service cannot pause: its gain is over staying placed at a.
    n = 16
    sc = sim_scenario([training("long", slots_of_work=10.0, deadline_slot=12, counts=(1,)),
                       inference("svc", first=0, last=n)], n_slots=n,
                      price_a=[0.2] * 4 + [5.0] * (n - 4), price_b=[5.0] * 4 + [0.2] * (n - 4))
    res, _ = simulate_spec(RunSpec(sc.name, "lookahead", baseline=False,
                                   forecast=ForecastSettings("perfect")), sc)
    moves = res.migrations[res.migrations["reason"].str.startswith("move")]
    assert set(moves["job_id"]) == {"long", "svc"}, "the scenario should move both"
    for gain, reason in zip(moves["expected_gain"], moves["reason"], strict=True):
        assert (gain > 0) == ("pays for the round trip" in reason), (gain, reason)
    assert (moves["expected_gain"] > 0).all()  # uncontended: every move is for its own sake


@pytest.mark.parametrize(("soc_initial", "carbon_price", "night_gpus"),
                         [(0.1, 0.0, 0), (0.1, 1.0, 0), (0.5, 0.0, 2)])
def test_work_that_can_wait_runs_on_the_sun_not_on_the_grid_at_night(
        soc_initial: float, carbon_price: float, night_gpus: int) -> None:
    # Site a: a battery (empty at its floor, or half full) and 6 kW of sun in slots 8-15;
    # a job with all day to finish. The plan values energy at 0 at night (a kWh less would
    # only displace free charge tomorrow), but an empty battery leaves a night's work to the
    # grid: it waits for the sun. Half full, the battery (refilled by the sun) runs it. Under
    # a carbon price the sun's energy is charged no grid carbon (the plan's value holds it).
    import dataclasses

    from helpers_sim import tiny_scenario as sim_scenario
    from helpers_sim import training

    from workbench.runner import ForecastSettings, RunSpec, simulate_spec
    from workbench.supply import Battery, Source, Supply

    sun = np.zeros(24)
    sun[8:16] = 6.0
    sc = sim_scenario([training("j", home="a", arrival_slot=0, slots_of_work=3.0,
                                deadline_slot=24)], n_slots=24)
    sc = dataclasses.replace(sc, supply=Supply(
        sources=(Source("pv", "a", "solar", 6.0, sun),),
        batteries=(Battery("bat", "a", 2.0, 1.0, soc_initial=soc_initial, soc_min=0.1),)))
    res, _ = simulate_spec(RunSpec("tiny", "lookahead", baseline=False,
                                   knobs={"carbon_price_per_kg": carbon_price},
                                   forecast=ForecastSettings(mode="perfect")), sc)
    s, m = res.slots, res.metrics
    assert m["jobs_unfinished"] == 0 and m["deadline_misses"] == 0
    assert int(s["gpus_busy:a/A100"].iloc[:8].max()) == night_gpus
    if night_gpus == 0:
        # In the sun (without the carbon of grid energy charged on it: run after the sun,
        # off the battery, under the carbon price).
        assert int(s["gpus_busy:a/A100"].iloc[8:16].sum()) > 0
        assert s[site_key("grid_kwh", "a")].sum() == pytest.approx(0.0, abs=1e-9)
        assert m["green_share"] == pytest.approx(1.0)
    else:
        assert s[site_key("discharge_kwh", "a")].iloc[:8].sum() > 10 * s[
            site_key("grid_kwh", "a")].iloc[:8].sum()


def test_undo_restores_the_records_a_replan_changes() -> None:
    """``restore_plan`` puts back the window state, the pacing's record of the plans and the
    supply plan that ``kept_plan`` copied; what was observed (arrivals) stays."""
    from workbench.caps import Caps

    jobs = [training_job("j1", "a", 2.0, deadline_slot=8),
            training_job("j2", "b", 2.0, arrival_slot=1, deadline_slot=9)]
    sc = tiny_scenario(jobs, prices=[[1.0, 2.0]] * 12, n_slots=12)
    pol = LookaheadPolicy(window_h=3.0, deadline_margin=0.0, caps=Caps(carbon_kg=50.0))
    pol.reset(sc.view())

    def state(t: int, js: list) -> SlotState:
        return SlotState(scenario=sc.view(), t=t, time=sc.start + timedelta(
            seconds=sc.slot_s * t), jobs=tuple(JobState(
                job=j, remaining=1.0, placement=None, last_datacenter=j.home, phi=200.0)
                for j in js))

    first = pol.replan(state(0, jobs[:1]), perfect_forecast(sc, 0))
    kept = pol.kept_plan()
    eta = pol.pacer.plans.eta_num.copy()
    pol.replan(state(1, jobs), perfect_forecast(sc, 1))
    assert pol.plan is not first and pol.replans == 2
    pol.restore_plan(kept)
    assert pol.plan is first and pol.replans == 1
    assert pol.window == kept.window and pol.window is not kept.window
    np.testing.assert_array_equal(pol.pacer.plans.eta_num, eta)
    assert pol.pacer.plans.planned == kept.pace.planned
    assert pol.tracker.notes.seen == {"j1", "j2"}  # observations are not undone


@pytest.mark.parametrize("knobs", [
    {"window_h": 0.0}, {"fine_slots": 0}, {"max_columns": 0}, {"arrival_replan_slots": 0},
    {"min_dwell_slots": -1}, {"time_limit_s": 0.0}, {"mip_rel_gap": -1.0},
    {"deadline_margin": 1.0}, {"restart_s": -1.0},
])
def test_the_config_is_validated_once_where_it_is_made(knobs: dict[str, object]) -> None:
    from workbench.policies.lookahead import LookaheadConfig

    with pytest.raises(ValueError):
        LookaheadConfig(**knobs)  # type: ignore[arg-type]
    cfg = LookaheadConfig(window_h=6, restart_s=0, warm_start=1)  # type: ignore[arg-type]
    assert (cfg.window_h, cfg.restart_s, cfg.warm_start) == (6.0, 0.0, True)
    assert LookaheadPolicy.of(cfg).config == cfg
    assert cfg.slots(900.0) == type(cfg.slots(900.0))(replan=4, fine=4, block=4, min_dwell=8)
