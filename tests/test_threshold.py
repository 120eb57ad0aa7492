"""The forecast-threshold scheduler (round 1's lyapunov): knobs, hand-known choices, queues,
fallback, capacity, migrations."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pyomo.environ as pyo
import pytest
from helpers_policies import (
    inference_job,
    perfect_forecast,
    run_slots,
    tiny_scenario,
    training_job,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.caps import Caps
from workbench.forecast import default_forecast_mode
from workbench.metrics import inference_carbon_floor_kg
from workbench.policies import POLICY_NAMES, make_policy
from workbench.policies.base import JobState, Placement, SlotState
from workbench.policies.threshold import ThresholdPolicy as LyapunovPolicy


@pytest.mark.parametrize("V", [0, -1.0, float("nan"), float("inf")])
def test_V_must_be_positive(V: float) -> None:
    with pytest.raises(ValueError, match="V must be a positive number"):
        LyapunovPolicy(V=V)


@pytest.mark.parametrize("knobs", [
    {"migration_threshold": -0.1}, {"slack_margin": 0.5}, {"urgency_start": 1.0},
    {"caps": -5.0}, {"gpu_counts": (0, 2)}, {"time_limit_s": 0.0},
])
def test_invalid_knobs_are_rejected(knobs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        LyapunovPolicy(**knobs)  # type: ignore[arg-type]


def test_registry_builds_lyapunov_and_names_every_policy() -> None:
    pol = make_policy("threshold", V=3.0)
    assert pol.name == "threshold" and isinstance(pol, LyapunovPolicy) and pol.V == 3.0
    for name in ("threshold", "offline", "greedy", "asap-home", "cheapest-at-arrival",
                 "wait-for-cheap", "carbon-scaling", "goodput-only"):
        assert name in POLICY_NAMES
    with pytest.raises(ValueError, match="unknown policy"):
        make_policy("nope")


def test_two_jobs_two_regions_go_to_the_cheap_region() -> None:
    # Region b is four times cheaper in every slot; 4 GPUs each; two 2-GPU jobs fit in b.
    jobs = [training_job("j1", "a", 1.5, deadline_slot=8),
            training_job("j2", "a", 1.5, deadline_slot=8)]
    sc = tiny_scenario(jobs, prices=[[1.0, 0.25]] * 8)
    res = run_slots(sc, LyapunovPolicy(V=10.0))
    assert not res.unfinished and not res.deadline_misses
    used = {pl.datacenter for a in res.allocations for pl in a.placements.values()}
    assert used == {"b"}


def test_waits_for_the_cheap_slots_within_its_slack() -> None:
    # Dear now, cheap from slot 4: a job of ~2 slots with a deadline at slot 8 waits.
    sc = tiny_scenario([training_job("j", "a", 1.5, deadline_slot=8)],
                       prices=[[1.0, 1.0]] * 4 + [[0.2, 0.2]] * 4, regions=("a", "b"))
    res = run_slots(sc, LyapunovPolicy(V=10.0))
    ran = [t for t, a in enumerate(res.allocations) if "j" in a.placements]
    assert ran and min(ran) >= 4 and not res.deadline_misses


def test_urgent_job_runs_at_any_price() -> None:
    # It needs about 2 of the 2 slots left before its deadline at full speed.
    sc = tiny_scenario([training_job("j", "a", 1.7, deadline_slot=2, gpus=4)],
                       prices=[[50.0, 50.0]] * 8)
    res = run_slots(sc, LyapunovPolicy(V=100.0))
    assert "j" in res.allocations[0].placements


def test_queues_are_exposed_and_the_virtual_queue_grows_while_waiting() -> None:
    sc = tiny_scenario([training_job("j", "a", 1.0, deadline_slot=8)],
                       prices=[[1.0, 1.0]] * 5 + [[0.1, 0.1]] * 3,
                       carbons=[[400.0, 400.0]] * 8)
    pol = LyapunovPolicy(V=50.0, caps=Caps(carbon_kg=0.01))
    res = run_slots(sc, pol)
    q = [a.queues for a in res.allocations]
    assert "R:j" in q[1] and "Y:j" in q[1] and "Z:global" in q[1]
    ys = [qq["Y:j"] for qq in q[1:5]]
    assert all(b > a for a, b in zip(ys, ys[1:], strict=False))
    assert q[0]["Z:global"] == 0.0


def test_cap_below_inference_floor_is_reported_with_numbers(
        caplog: pytest.LogCaptureFixture) -> None:
    from workbench.sim import simulate

    sc = tiny_scenario([inference_job("i", "a", end_slot=8)])
    floor = inference_carbon_floor_kg(sc)
    assert floor > 0
    # The simulator holds the truth (a policy sees no prices, no jobs): it warns before
    # the run, and reports the missed cap after it.
    with caplog.at_level(logging.WARNING):
        res = simulate(sc, LyapunovPolicy(caps=Caps(carbon_kg=floor / 2)),
                       forecast_mode=default_forecast_mode(sc))
    assert any(f"{floor:.1f}" in w and "below" in w for w in res.warnings)
    assert res.metrics["carbon_cap_met"] is False
    assert any("carbon cap missed" in w for w in res.warnings)


def test_inference_is_placed_every_slot_in_its_latency_bound() -> None:
    jobs = [inference_job("i", "a", end_slot=8, max_latency_ms=10.0),
            training_job("j", "a", 1.0, deadline_slot=8)]
    sc = tiny_scenario(jobs, prices=[[1.0, 0.1]] * 8)
    res = run_slots(sc, LyapunovPolicy())
    assert all(a.placements["i"].datacenter == "a" for a in res.allocations)


def test_failed_solve_falls_back_to_greedy_with_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    def impossible(model: pyo.ConcreteModel) -> None:
        model.bad = pyo.Constraint(expr=sum(model.z[k] for k in model.K) >= len(model.K) + 1)

    jobs = [training_job("j1", "a", 1.0, deadline_slot=2, gpus=4),
            inference_job("i", "b", end_slot=8)]
    sc = tiny_scenario(jobs)
    pol = LyapunovPolicy(extra_constraints=impossible)
    pol.reset(sc.view())
    js = tuple(JobState(job=j, remaining=1.0, placement=None, last_datacenter=None, phi=200.0)
               for j in sc.jobs)
    state = SlotState(scenario=sc.view(), t=0, time=sc.start, jobs=js)
    alloc = pol.decide(state, perfect_forecast(sc, 0))
    assert alloc.solve is not None and alloc.solve.fallback
    assert "infeasible" in alloc.solve.status and "greedy" in alloc.solve.message
    assert set(alloc.placements) == {"j1", "i"}
    # Through the simulator the user sees it: in the run's warnings and in the log.
    from workbench.sim import simulate

    with caplog.at_level(logging.WARNING):
        result = simulate(sc, LyapunovPolicy(extra_constraints=impossible),
                          forecast_mode=default_forecast_mode(sc))
    assert result.warnings and all("fallback" in w for w in result.warnings[:3])
    assert any("greedy" in r.getMessage() and r.levelno == logging.WARNING
               for r in caplog.records)


def test_time_limit_fallback_is_feasible() -> None:
    jobs = [training_job(f"j{i}", "ab"[i % 2], 1.0, deadline_slot=3) for i in range(4)]
    sc = tiny_scenario(jobs)
    res = run_slots(sc, LyapunovPolicy(time_limit_s=1e-9))
    infos = [a.solve for a in res.allocations if a.solve is not None and a.solve.status != "empty"]
    assert infos and all(i.fallback and "greedy" in i.message for i in infos)
    assert all(n <= 4 for n in res.max_pool_use.values())


@st.composite
def small_scenarios(draw: st.DrawFn) -> tuple[object, float]:
    n_jobs = draw(st.integers(1, 5))
    jobs = []
    for i in range(n_jobs):
        arrival = draw(st.integers(0, 3))
        jobs.append(training_job(
            f"j{i}", draw(st.sampled_from(["a", "b"])), draw(st.floats(0.3, 3.0)),
            arrival_slot=arrival, deadline_slot=arrival + draw(st.integers(2, 6)),
            gpus=draw(st.sampled_from([1, 2, 4]))))
    if draw(st.booleans()):
        jobs.append(inference_job("inf", "a", gpus=draw(st.integers(1, 2))))
    prices = [[draw(st.floats(0.1, 2.0)), draw(st.floats(0.1, 2.0))] for _ in range(6)]
    sc = tiny_scenario(jobs, prices=prices, n_slots=6,
                       gpus_per_pool=draw(st.integers(4, 6)))
    return sc, draw(st.sampled_from([0.5, 5.0, 50.0]))


@pytest.mark.slow
@settings(max_examples=15, deadline=None)
@given(small_scenarios())
def test_capacity_is_never_exceeded(case: tuple[object, float]) -> None:
    sc, V = case
    res = run_slots(sc, LyapunovPolicy(V=V))  # type: ignore[arg-type]
    for pool in sc.pools:  # type: ignore[attr-defined]
        assert res.max_pool_use.get(f"{pool.datacenter}/{pool.gpu_type}", 0) <= pool.count
    assert all(a.solve is not None and not a.solve.fallback for a in res.allocations)
    assert all(a.solve.status in ("optimal", "empty") for a in res.allocations if a.solve)


def _decide_placed_in_a(threshold: float, price_b: float) -> tuple[object, float]:
    """One decision for a job running in a, half done, with b at ``price_b`` (a at 0.5)."""
    sc = tiny_scenario([training_job("j", "a", 3.0, deadline_slot=8, gpus=2, counts=(2,))],
                       prices=[[0.5, price_b]] * 8)
    pol = LyapunovPolicy(V=5.0, migration_threshold=threshold)
    pol.reset(sc.view())
    here = Placement("a", "A100", 2, 128)
    js = JobState(job=sc.jobs[0], remaining=0.5, placement=here, last_datacenter="a",
                  phi=300.0, slots_run=3)
    state = SlotState(scenario=sc.view(), t=0, time=sc.start, jobs=(js,))
    return pol.decide(state, perfect_forecast(sc, 0)), threshold


@pytest.mark.parametrize("price_b", [0.05, 0.3, 0.45])
def test_migrations_happen_only_above_the_threshold(price_b: float) -> None:
    low, _ = _decide_placed_in_a(0.0, price_b)
    high, _ = _decide_placed_in_a(1e6, price_b)
    assert high.placements.get("j", Placement("a", "A100", 2, 1)).datacenter == "a"  # type: ignore[attr-defined]
    assert not high.expected_gain  # type: ignore[attr-defined]
    if price_b == 0.05:
        assert low.placements["j"].datacenter == "b"  # type: ignore[attr-defined]
    for thr in (0.0, 0.1, 0.5, 2.0):
        alloc, _ = _decide_placed_in_a(thr, price_b)
        pl = alloc.placements.get("j")  # type: ignore[attr-defined]
        if pl is not None and pl.datacenter == "b":
            gain = alloc.expected_gain["j"]  # type: ignore[attr-defined]
            reason = alloc.reasons["j"]  # type: ignore[attr-defined]
            assert gain > 0 and "migrate a->b" in reason
            rel = float(reason.split("gain ")[1].split("%")[0]) / 100
            assert rel >= thr


def test_batch_is_fine_tuned_within_bounds() -> None:
    sc = tiny_scenario([training_job("j", "a", 2.0, deadline_slot=3, gpus=4)])
    res = run_slots(sc, LyapunovPolicy())
    pl = res.allocations[0].placements["j"]
    assert 64 <= pl.batch_size <= min(2048, 256 * pl.n_gpus)
    assert np.isfinite(res.cost)


def test_fast_solver_matches_the_pyomo_reference_over_a_run() -> None:
    from workbench.policies import make_policy
    from workbench.sim import simulate

    jobs = [training_job(f"j{i}", "ab"[i % 2], 1.0 + 0.4 * i, arrival_slot=i % 3,
                         deadline_slot=8) for i in range(5)]
    prices = [[1.0 + 0.3 * (t % 3), 0.6 + 0.2 * (t % 2)] for t in range(8)]
    sc = tiny_scenario(jobs, prices=prices)
    ref = simulate(sc, make_policy("threshold", solver="pyomo"),
                   forecast_mode=default_forecast_mode(sc))
    fast = simulate(sc, make_policy("threshold", solver="fast"),
                    forecast_mode=default_forecast_mode(sc))
    assert fast.metrics["deadline_misses"] == ref.metrics["deadline_misses"]
    assert fast.metrics["cost"] == pytest.approx(ref.metrics["cost"], rel=0.02)
    # Any solver Pyomo drives, named: pyomo:highs is the same model and solver as pyomo.
    named = simulate(sc, make_policy("threshold", solver="pyomo:highs"),
                     forecast_mode=default_forecast_mode(sc))
    cols = ["slot", "job_id", "region", "gpu_type", "n_gpus", "batch_size"]
    pd.testing.assert_frame_equal(named.plan[cols], ref.plan[cols])
    pd.testing.assert_frame_equal(named.plan[cols], fast.plan[cols])
    with pytest.raises(ValueError, match="unknown slot solver"):
        make_policy("threshold", solver="cplex")
    with pytest.raises(ValueError, match="Pyomo finds no solver 'no_such_solver'"):
        make_policy("threshold", solver="pyomo:no_such_solver")


@pytest.mark.slow
def test_large_v_still_meets_every_deadline_on_seed3(seed3) -> None:
    """At large V jobs wait for the cheapest slots; urgency judged at the requested GPU
    count (not at a whole pool) must still bring every job in on time."""
    from workbench.policies import make_policy
    from workbench.sim import simulate

    result = simulate(seed3, make_policy("threshold", V=300.0, solver="fast"),
                      forecast_mode=default_forecast_mode(seed3))
    assert result.metrics["deadline_misses"] == 0
    assert result.metrics["jobs_finished"] == result.metrics["jobs_total"]


@pytest.mark.parametrize(("move", "stay", "expected"), [
    (3.0, 2.0, 0.5), (1.0, -2.0, 1.5), (-3.0, -2.0, -0.5),
    (1.0, 0.0, float("inf")), (-1.0, 0.0, 0.0), (1.0, float("-inf"), float("inf")),
])
def test_relative_gain_table(move: float, stay: float, expected: float) -> None:
    from workbench.policies.threshold import _relative_gain

    assert float(_relative_gain(move, stay)) == pytest.approx(expected)
    got = _relative_gain(np.array([move, move]), np.array([stay, stay]))
    assert got.tolist() == pytest.approx([expected, expected])


def test_per_datacenter_carbon_queues_follow_the_meter() -> None:
    """Z_d(t+1) = max(Z_d(t) + carbon_d(t) - a_d(t), 0) with metered carbon and the slot's
    paced budget a_d(t) (``A:<d>``), never more than the budget left unspent."""
    from workbench.policies import make_policy
    from workbench.sim import simulate

    jobs = [training_job(f"j{i}", "ab"[i % 2], 2.0, deadline_slot=8) for i in range(4)]
    sc = tiny_scenario(jobs, prices=[[1.0, 0.5]] * 8)
    caps = {"a": 0.05, "b": 0.05}
    result = simulate(sc, make_policy("threshold", caps=Caps(carbon_kg_by_dc=caps)),
                      forecast_mode=default_forecast_mode(sc))
    for d, cap in caps.items():
        z, spent, expected = 0.0, 0.0, []
        for t in range(sc.n_slots):
            expected.append(z)  # the queue as the policy saw it at the start of slot t
            a = float(result.queues[f"A:{d}"].iloc[t])
            assert 0.0 <= a <= max(cap - spent, 0.0) + 1e-12
            g = float(result.slots[f"carbon_kg:{d}"].iloc[t])
            z, spent = max(z + g - a, 0.0), spent + g
        np.testing.assert_allclose(result.queues[f"Z:{d}"].to_numpy(), expected, atol=1e-12)
    assert result.queues["Z:a"].max() > 0  # the caps bind


@pytest.mark.parametrize("policy", ["lyapunov", "threshold", "lookahead", "offline"])
def test_caps_are_the_one_record(policy: str) -> None:
    from workbench.policies import make_policy

    for bad in (-3.0, 0.0, float("nan"), {"a": -1.0}, {"carbon_cap_kg": 3.0}):
        with pytest.raises(ValueError, match="caps must be a workbench.caps.Caps record"):
            make_policy(policy, caps=bad)
    with pytest.raises(ValueError, match="percentage carbon cap must be resolved"):
        make_policy(policy, caps=Caps(carbon_pct_below_baseline=10.0))
    for kwargs in ({"carbon_kg": -3.0}, {"power_kw": float("nan")},
                   {"power_kw_by_dc": {"a": float("inf")}}):
        with pytest.raises(ValueError, match="must be a positive finite number"):
            Caps(**kwargs)
