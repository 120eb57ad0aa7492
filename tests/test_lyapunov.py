"""The drift-plus-penalty Lyapunov scheduler: the documented objective, queues, knobs."""

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
from numpy.typing import NDArray

from workbench.caps import Caps
from workbench.forecast import default_forecast_mode
from workbench.model import Job, Scenario
from workbench.optim.fastslot import FastSlotSolver
from workbench.optim.slot import SlotProblem
from workbench.policies import make_policy
from workbench.policies.base import JobState, SlotOptions, SlotState, slot_options
from workbench.policies.deadlines import Urgency, must_run, steady_rates, urgency
from workbench.policies.lyapunov import (
    LyapunovPolicy,
    carbon_price,
    job_cost_scale,
    net_coef,
)
from workbench.policies.problems import build_slot_problem


@pytest.mark.parametrize("V", [0, -1.0, float("nan"), float("inf")])
def test_V_must_be_positive(V: float) -> None:
    with pytest.raises(ValueError, match="V must be a positive number"):
        LyapunovPolicy(V=V)


@pytest.mark.parametrize("knobs", [
    {"migration_threshold": -0.1}, {"min_dwell_slots": -1}, {"restart_s": -1.0},
    {"caps": -5.0}, {"gpu_counts": (0, 2)}, {"time_limit_s": 0.0},
    {"solver": "cplex"},
])
def test_invalid_knobs_are_rejected(knobs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        LyapunovPolicy(**knobs)  # type: ignore[arg-type]


def test_net_coef_has_the_documented_form() -> None:
    # NetCoef = kappa_j (R + Y) p - V c - lambda Z g, by hand for three options.
    w = np.array([5.0, 5.0, 0.0])          # kappa_j (R + Y) of the option's job (0: inference)
    p = np.array([0.2, 0.1, 0.0])
    c = np.array([2.0, 0.5, 1.0])
    g = np.array([1.0, 3.0, 2.0])           # kg
    z = np.array([0.0, 2.0, 2.0])           # carbon queue in per-slot caps (0: no cap)
    got = net_coef(w, p, c, g, z, lam_per_kg=0.25, V=2.0)
    expected = [5.0 * 0.2 - 2 * 2.0,
                5.0 * 0.1 - 2 * 0.5 - 0.25 * 2.0 * 3.0,
                -2 * 1.0 - 0.25 * 2.0 * 2.0]
    np.testing.assert_allclose(got, expected)


def test_progress_is_valued_in_each_jobs_own_cost_units() -> None:
    # Two jobs of 1 and 100 slots of work at a flat price: kappa_j is each job's own bill,
    # so both see the same NetCoef sign at the same V (the large one is not starved), and
    # both run at V = 1 (their unit cost equals their typical one).
    jobs = [training_job("small", "a", 1.0, deadline_slot=400),
            training_job("large", "a", 100.0, deadline_slot=400)]
    sc = tiny_scenario(jobs, prices=[[1.0, 1.0]] * 4, n_slots=4)
    states = tuple(JobState(job=j, remaining=1.0, placement=None, last_datacenter=None,
                            phi=200.0) for j in jobs)
    state = SlotState(scenario=sc.view(), t=0, time=sc.start, jobs=states)
    fc = perfect_forecast(sc, 0)
    opts = slot_options(state, {"a": 1.0, "b": 1.0}, {"a": 500.0, "b": 500.0})
    k_small, k_large = (job_cost_scale(opts, j, 1.0) for j in (0, 1))
    assert k_small is not None and k_large is not None
    assert k_large == pytest.approx(100.0 * k_small, rel=0.05)
    pol = LyapunovPolicy(V=0.99, refine_batch=False)
    pol.reset(sc.view())
    alloc = pol.decide(state, fc)
    assert set(alloc.placements) == {"small", "large"}
    assert pol.kappa["large"] == pytest.approx(k_large)
    assert carbon_price(fc) == pytest.approx(1.0 / 0.5)
    # The meaning of V, the same for both sizes: a whole queued job accepts unit costs up
    # to 1/V times its typical one. At V = 0.5 and a price twice the typical both run; at
    # V = 1.2 and a flat price (unit cost = typical > 1/1.2) neither does.
    for V, price, runs in ((0.5, 1.9, {"small", "large"}), (1.2, 1.0, set())):
        sc2 = tiny_scenario(jobs, prices=[[price, price]] + [[1.0, 1.0]] * 3, n_slots=4)
        st2 = SlotState(scenario=sc2.view(), t=0, time=sc2.start, jobs=states)
        pol2 = LyapunovPolicy(V=V, refine_batch=False)
        pol2.reset(sc2.view())
        pol2.kappa = {"small": k_small, "large": k_large}      # typical price 1 per kWh
        assert set(pol2.decide(st2, perfect_forecast(sc2, 0)).placements) == runs


def test_hand_solved_slot_runs_exactly_the_positive_netcoef_jobs() -> None:
    # Two jobs, one 4-GPU pool per region; price 1 in a, 10 in b. With R = 1 and Y = 0 the
    # slot maximises sum z (kappa_j p - V c): the policy's choice must equal the hand optimum
    # over the options, found by enumerating them.
    jobs = [training_job("j1", "a", 2.0, deadline_slot=8),
            training_job("j2", "a", 2.0, deadline_slot=8)]
    sc = tiny_scenario(jobs, prices=[[1.0, 10.0]] * 8)
    states = tuple(JobState(job=j, remaining=1.0, placement=None, last_datacenter=None,
                            phi=200.0) for j in jobs)
    state = SlotState(scenario=sc.view(), t=0, time=sc.start, jobs=states)
    fc = perfect_forecast(sc, 0)
    pol = LyapunovPolicy(V=1.0, refine_batch=False)
    pol.reset(sc.view())
    alloc = pol.decide(state, fc)
    opts = slot_options(state, {"a": 1.0, "b": 10.0}, {"a": 500.0, "b": 500.0})
    kappa = {j.job_id: job_cost_scale(opts, i, float(np.mean(np.abs(fc.price_per_kwh))))
             for i, j in enumerate(jobs)}
    assert pol.kappa == pytest.approx(kappa)
    w = np.array([kappa[j.job_id] for j in jobs])[opts.job_index]
    coef = w * opts.progress - 1.0 * opts.cost
    # Hand optimum: each job its best option, if positive, within the pools' 4 GPUs.
    best: dict[int, float] = {}
    import itertools
    rows = [list(opts.rows_of(j.job_id)) + [None] for j in jobs]
    for pick in itertools.product(*rows):
        use: dict[str, int] = {}
        for k in pick:
            if k is not None:
                use[str(opts.datacenter[k])] = use.get(str(opts.datacenter[k]), 0) + int(
                    opts.n_gpus[k])
        if any(v > 4 for v in use.values()):
            continue
        val = sum(float(coef[k]) for k in pick if k is not None)
        best[len(best)] = val
        if val >= max(best.values()):
            best_pick = pick
    got = {jid: (pl.datacenter, pl.n_gpus) for jid, pl in alloc.placements.items()}
    want = {jobs[i].job_id: (str(opts.datacenter[k]), int(opts.n_gpus[k]))
            for i, k in enumerate(best_pick) if k is not None}
    assert got == want


def test_larger_V_waits_for_the_cheap_slot() -> None:
    # Dear first half, cheap second half, loose deadline: small V runs at once, large V
    # waits for the cheap slots (and pays less), finishing in time either way.
    jobs = [training_job("j1", "a", 1.0, deadline_slot=16)]
    prices = [[5.0, 5.0]] * 8 + [[0.5, 0.5]] * 8
    sc = tiny_scenario(jobs, prices=prices, n_slots=16)
    lo = run_slots(sc, LyapunovPolicy(V=0.05))
    hi = run_slots(sc, LyapunovPolicy(V=1.0))
    assert not lo.deadline_misses and not hi.deadline_misses
    assert hi.cost < lo.cost
    first_run = [t for t, a in enumerate(hi.allocations) if a.placements]
    assert first_run and first_run[0] >= 8


def test_deadline_queue_grows_by_the_required_rate_when_the_job_waits() -> None:
    jobs = [training_job("j1", "a", 1.0, deadline_slot=10)]
    sc = tiny_scenario(jobs, prices=[[1e3, 1e3]] * 10, n_slots=10)
    pol = LyapunovPolicy(V=1e6)  # too dear to run: the job waits and Y must grow
    res = run_slots(sc, pol)
    ys = [a.queues.get("Y:j1", 0.0) for a in res.allocations]
    # eps = R / L with R = 1 and L = 10 - t: Y(t) = sum_{s < t} 1 / (10 - s) while idle.
    idle = [t for t, a in enumerate(res.allocations) if "j1" not in a.placements]
    t_last = idle[-1] if idle else 0
    assert t_last >= 2
    expected = sum(1.0 / (10 - s) for s in range(2))
    assert ys[2] == pytest.approx(expected)


def test_registry_builds_the_true_and_the_threshold_variant() -> None:
    assert make_policy("lyapunov").name == "lyapunov"
    assert make_policy("threshold").name == "threshold"


@pytest.mark.parametrize(("policy", "knobs"), [
    ("lyapunov", {"solver": "fast"}), ("lyapunov", {"solver": "pyomo"}),
    ("threshold", {"solver": "fast"}), ("threshold", {"solver": "pyomo"}), ("lookahead", {}),
])
def test_empty_slots_are_not_fallbacks(policy: str, knobs: dict[str, str]) -> None:
    """A slot with no active job needs no solve: it is not counted as a fallback."""
    from helpers_sim import tiny_scenario, training

    from workbench.policies import make_policy
    from workbench.sim import simulate

    sc = tiny_scenario([training("j", slots_of_work=1.0, deadline_slot=3)], n_slots=8)
    result = simulate(sc, make_policy(policy, **knobs), forecast_mode=default_forecast_mode(sc))
    assert result.metrics["fallbacks"] == 0 and not result.warnings
    empty = result.slots["jobs_active"] == 0
    assert empty.any() and (result.slots.loc[empty, "solver_status"] == "empty").all()


# -- the completion rule ----------------------------------------------------------------------
def _slot(jobs: list[Job], sc: Scenario, t: int = 0,
          remaining: dict[str, float] | None = None) -> SlotState:
    """Slot ``t`` with every job arrived, never run, at ``remaining`` (default 1)."""
    states = tuple(JobState(job=j, remaining=(remaining or {}).get(j.job_id, 1.0),
                            placement=None, last_datacenter=None, phi=200.0) for j in jobs)
    return SlotState(scenario=sc.view(), t=t, time=sc.start + timedelta(seconds=t * sc.slot_s),
                     jobs=states)


@pytest.mark.parametrize("V", [100.0, 1e4])
def test_completion_rule_runs_a_job_that_prices_say_should_wait(V: float) -> None:
    # Dear until after the deadline, almost free from slot 12: drift-plus-penalty alone waits
    # (every NetCoef < 0 at this V); the rule runs it as late as its slack allows, and it
    # meets its deadline at every V.
    job = training_job("j", "a", 2.0, deadline_slot=10, gpus=2, counts=(1, 2, 4))
    prices = [[5.0, 5.0]] * 12 + [[0.01, 0.01]] * 4
    sc = tiny_scenario([job], prices=prices, n_slots=16)
    pol = LyapunovPolicy(V=V, refine_batch=False)
    res = run_slots(sc, pol)
    assert not res.deadline_misses and res.finished["j"] < 10
    ran = [t for t, a in enumerate(res.allocations) if "j" in a.placements]
    assert ran[0] >= 4, f"it ran at {ran}: it had slack to wait"
    assert "completion rule" in res.allocations[ran[0]].reasons["j"]
    # Without the rule it would not have run then: its best NetCoef is negative.
    first = res.allocations[ran[0]]
    state = _slot([job], sc, ran[0], {"j": first.queues["R:j"]})
    price = {"a": 5.0, "b": 5.0}
    opts = slot_options(state, price, {"a": 500.0, "b": 500.0})
    w = pol.kappa["j"] * (first.queues["R:j"] + first.queues.get("Y:j", 0.0))
    assert np.max(net_coef(np.full(len(opts), w), opts.progress, opts.cost, opts.carbon_kg,
                           np.zeros(len(opts)), 0.0, V)) < 0


def test_a_job_without_a_deadline_is_left_to_the_queues() -> None:
    # No deadline, no slack: at a huge V the rule never forces it (the O(V) backlog).
    sc = tiny_scenario([training_job("j", "a", 1.0)], prices=[[1.0, 1.0]] * 8)
    res = run_slots(sc, LyapunovPolicy(V=1e4))
    assert not any(a.placements for a in res.allocations) and res.unfinished == ["j"]


def _urgency(jobs: list[Job], sc: Scenario, **kw: float
             ) -> tuple[SlotState, SlotOptions, Urgency]:

    state = _slot(jobs, sc)
    price = {r: 1.0 for r in ("a", "b")}
    opts = slot_options(state, price, {r: 500.0 for r in price})
    return state, opts, urgency(state, opts, restart_s=120.0, margin=kw.get("margin", 0.1))


def test_slack_is_deadline_minus_the_least_time_on_the_best_option() -> None:
    job = training_job("j", "a", 2.0, deadline_slot=10, gpus=2, counts=(1, 2, 4))
    sc = tiny_scenario([job], n_slots=16)
    state, opts, urg = _urgency([job], sc)
    rate = steady_rates(state, opts)
    # Every option restarts (120 s) before progress; the 4-GPU one is the fastest.
    least = float(np.min(opts.lost_s + 1.0 / rate))
    assert urg.slack_s[0] == pytest.approx(10 * 900 - least)
    assert np.all(opts.lost_s == 120.0)
    # The steady rate is the slot outcome's: a full slot's progress of a job that owes
    # nothing (batch and phi as in the options).
    np.testing.assert_allclose(rate * (900 - 120.0), opts.progress, rtol=1e-9)
    assert not urg.urgent[0] and urg.start_slot[0] > 0 and not urg.late[0]
    # Safe: started now and kept, it finishes within its life less the margin.
    usable = 10 * 900 - 0.1 * 10 * 900
    np.testing.assert_array_equal(urg.safe, opts.lost_s + 1.0 / rate <= usable)


def test_contention_makes_a_job_urgent_before_its_slack_alone_runs_out() -> None:
    # Two jobs on one 4-GPU pool, each 2.5 slots of work on its 4 GPUs (3 slots held with
    # the restart), deadline at slot 7: alone each could start at slot 3, together one must
    # start now (6 slots held of the 6.3 its life less the margin leaves).
    jobs = [training_job(f"j{i}", "a", 2.5, deadline_slot=7, gpus=4, counts=(4,))
            for i in range(2)]
    sc = tiny_scenario(jobs, regions=("a",), n_slots=8)
    _, _, urg = _urgency(jobs, sc)
    assert urg.slack_s.min() > 3 * 900
    assert sorted(urg.start_slot.tolist())[0] == 0 and urg.urgent.sum() == 1
    _, _, alone = _urgency(jobs[:1], tiny_scenario(jobs[:1], regions=("a",), n_slots=8))
    assert not alone.urgent[0]


def _must_run_choice(jobs: list[Job], sc: Scenario, coef_of: dict[str, float]
                     ) -> tuple[Urgency, NDArray[np.bool_], set[str]]:
    """The must-run set of slot 0 and what the slot MILP places with ``coef_of`` per job."""
    state, opts, urg = _urgency(jobs, sc)
    coef = np.array([coef_of[state.jobs[j].job.job_id] for j in opts.job_index])
    prob = build_slot_problem(state, opts, coef)
    prob, keep, forced = must_run(prob, np.ones(len(opts), dtype=bool), opts.progress, urg)
    choice, info = FastSlotSolver()(prob, keep=keep)
    assert choice is not None and info.status == "optimal"
    placed = {state.jobs[int(opts.job_index[k])].job.job_id for k in np.flatnonzero(choice)}
    return urg, forced, placed


def test_a_job_whose_slack_ran_out_gets_the_gpus_before_a_job_with_slack() -> None:
    # One 4-GPU pool; "loose" has a day of slack and by far the larger NetCoef, "tight" must
    # start now. The slot MILP alone would run "loose"; the must-run set gives "tight" the GPUs.
    jobs = [training_job("loose", "a", 2.0, deadline_slot=96, gpus=4, counts=(4,)),
            training_job("tight", "a", 2.0, deadline_slot=3, gpus=4, counts=(4,))]
    sc = tiny_scenario(jobs, regions=("a",), n_slots=96)
    urg, forced, placed = _must_run_choice(jobs, sc, {"loose": 10.0, "tight": -5.0})
    assert forced.tolist() == [False, True] and placed == {"tight"}
    # Two urgent jobs, room for one: the one with less slack gets it.
    jobs = [training_job("less", "a", 2.4, deadline_slot=3, gpus=4, counts=(4,)),
            training_job("more", "a", 2.0, deadline_slot=3, gpus=4, counts=(4,))]
    sc = tiny_scenario(jobs, regions=("a",), n_slots=8)
    urg, forced, placed = _must_run_choice(jobs, sc, {"less": -1.0, "more": 1.0})
    assert urg.urgent.all() and urg.slack_s[0] < urg.slack_s[1]
    assert placed == {"less"} and forced.tolist() == [True, False]


def test_a_job_that_arrives_infeasible_runs_after_every_job_that_can_be_saved() -> None:
    # "late" needs 4 slots on its 4 GPUs and has 2: it cannot make its deadline; "savable"
    # can, if it starts now. Room for one: "savable" gets it. With room for both, "late"
    # runs too, on its fastest option, to finish as early as it can.
    jobs = [training_job("late", "a", 4.0, deadline_slot=2, gpus=4, counts=(1, 2, 4)),
            training_job("savable", "a", 2.0, deadline_slot=3, gpus=4, counts=(4,))]
    sc = tiny_scenario(jobs, regions=("a",), n_slots=8)
    urg, forced, placed = _must_run_choice(jobs, sc, {"late": 5.0, "savable": -5.0})
    assert urg.late.tolist() == [True, False] and urg.urgent.all()
    assert placed == {"savable"} and forced.tolist() == [False, True]
    sc8 = tiny_scenario(jobs, regions=("a",), n_slots=8, gpus_per_pool=8)
    _, forced, placed = _must_run_choice(jobs, sc8, {"late": -5.0, "savable": -5.0})
    assert placed == {"late", "savable"} and forced.all()
    res = run_slots(sc8, LyapunovPolicy(V=100.0))
    assert res.deadline_misses == ["late"] and res.finished["savable"] < 3
    assert [a.placements["late"].n_gpus for a in res.allocations if "late" in a.placements
            ][:1] == [4]


@pytest.mark.parametrize("V", [0.1, 1.0, 100.0])
def test_every_deadline_met_on_a_crowded_pool_at_every_V(V: float) -> None:
    # Five 2-slot jobs with staggered deadlines share one 4-GPU pool (10 GPU-slots of work
    # in 12): feasible only if they run back to back. Prices fall after the last deadline.
    jobs = [training_job(f"j{i}", "a", 2.0, deadline_slot=4 + 2 * i, gpus=4, counts=(2, 4))
            for i in range(5)]
    sc = tiny_scenario(jobs, prices=[[3.0]] * 14 + [[0.1]] * 2, regions=("a",), n_slots=16)
    res = run_slots(sc, LyapunovPolicy(V=V))
    assert not res.deadline_misses and not res.unfinished
    assert res.max_pool_use["a/A100"] <= 4


def test_queue_invariants_over_a_run() -> None:
    # R is the remaining work, never negative, never rising; Y and Z are never negative and
    # follow their recursions: Y(t+1) = max(Y + 1/L - progress, 0), Z in per-slot caps.
    jobs = [training_job("j1", "a", 2.0, deadline_slot=12, gpus=2),
            training_job("j2", "b", 1.0, deadline_slot=8, gpus=2),
            training_job("j3", "a", 1.5, arrival_slot=2, deadline_slot=14, gpus=2)]
    prices = [[2.0, 1.0], [1.0, 2.0]] * 8
    sc = tiny_scenario(jobs, prices=prices, n_slots=16)
    pol = LyapunovPolicy(V=1.0, caps=Caps(carbon_kg=0.2))
    res = run_slots(sc, pol)
    assert not res.deadline_misses
    qs = [a.queues for a in res.allocations]
    assert all(v >= 0 for q in qs for v in q.values())
    deadline = {j.job_id: sc.slot_of(j.deadline) for j in jobs}
    for t in range(len(qs) - 1):
        for key, r in qs[t].items():
            if not key.startswith("R:") or f"R:{key[2:]}" not in qs[t + 1]:
                continue
            jid = key[2:]
            r_next = qs[t + 1][key]
            assert 0.0 <= r_next <= r + 1e-12
            y, y_next = qs[t].get(f"Y:{jid}", 0.0), qs[t + 1][f"Y:{jid}"]
            left = max(deadline[jid] - t, 1)
            assert y_next == pytest.approx(max(y + 1.0 / left - (r - r_next), 0.0), abs=1e-12)
    assert any(q.get("Z:global", 0.0) > 0 for q in qs)


def test_deadline_margin_is_checked() -> None:
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="deadline_margin"):
            LyapunovPolicy(deadline_margin=bad)


def test_fast_solver_places_a_must_run_job_whose_allowed_options_changed() -> None:
    # The kept LP holds the options allowed last slot; a must-place job now allowed only
    # others must not make the hot start report the slot infeasible.
    n = 12
    prob = SlotProblem(
        job_ids=("m",), job_index=np.zeros(n, dtype=np.int64),
        coef=-np.arange(1.0, n + 1), must_place=np.array([True]),
        pool_labels=("p",), pool_index=np.zeros(n, dtype=np.int64),
        n_gpus=np.ones(n, dtype=np.int64), pool_capacity=np.array([1]),
        dc_labels=("d",), dc_index=np.zeros(n, dtype=np.int64), power_kw=np.ones(n),
        power_cap_kw=np.array([np.inf]), link_labels=(), link_index=np.full(n, -1),
        transfer_gb=np.zeros(n), link_capacity_gb=np.zeros(0))
    solver = FastSlotSolver(initial_columns=2)
    first = np.arange(n) < 2
    assert solver(prob, keep=first)[0] is not None
    choice, info = solver(prob, keep=~first)
    assert choice is not None and info.status == "optimal" and np.flatnonzero(choice) == [2]


def test_a_deadline_beyond_the_horizon_is_kept_pro_rata() -> None:
    # Deadline at slot 16 of an 8-slot horizon, arrival at 0: half its window lies inside,
    # so half its work is due by the horizon's end (the hindsight plan's share), even at a
    # V that never runs it for its price; the rest may wait past the end.
    from workbench.policies.deadlines import required_share
    from workbench.sim import simulate

    job = training_job("j", "a", 4.0, deadline_slot=16, gpus=2, counts=(1, 2))
    sc = tiny_scenario([job], prices=[[5.0, 5.0]] * 8, n_slots=8)
    assert required_share(sc, job) == pytest.approx(0.5)
    left = float(simulate(sc, LyapunovPolicy(V=1e4), forecast_mode="perfect").jobs
                 .set_index("job_id").loc["j", "remaining"])
    assert 0.3 <= left <= 0.5 + 1e-9
