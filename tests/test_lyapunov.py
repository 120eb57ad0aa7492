"""The drift-plus-penalty Lyapunov scheduler: the documented objective, queues, knobs."""

from __future__ import annotations

import numpy as np
import pytest
from helpers_policies import (
    perfect_forecast,
    run_slots,
    tiny_scenario,
    training_job,
)

from workbench.cubes import default_forecast_mode
from workbench.policies import make_policy
from workbench.policies.base import JobState, SlotState, slot_options
from workbench.policies.lyapunov import (
    LyapunovPolicy,
    carbon_price,
    job_cost_scale,
    net_coef,
)


@pytest.mark.parametrize("V", [0, -1.0, float("nan"), float("inf")])
def test_V_must_be_positive(V: float) -> None:
    with pytest.raises(ValueError, match="V must be a positive number"):
        LyapunovPolicy(V=V)


@pytest.mark.parametrize("knobs", [
    {"migration_threshold": -0.1}, {"min_dwell_slots": -1}, {"restart_s": -1.0},
    {"carbon_cap_kg": -5.0}, {"gpu_counts": (0, 2)}, {"time_limit_s": 0.0},
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
