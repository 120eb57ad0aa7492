"""The per-slot assignment MILP and its greedy fallback: hand-known optima and feasibility."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyomo.environ as pyo
import pytest
from helpers_policies import problem, synthetic_slot_problem
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.optim.fallback import greedy_choice
from workbench.optim.fastslot import solve_slot_problem_fast
from workbench.optim.slot import SlotProblem
from workbench.optim.slotarrays import build_arrays
from workbench.optim.slotpyomo import (
    create_slot_model,
    extract_choice,
    solve_slot_model,
    solve_slot_problem,
)


def test_two_jobs_one_pool_hand_optimum() -> None:
    # Pool 0 has 4 GPUs; job 0 wants 4 (coef 5) or 2 (coef 3); job 1 wants 4 (coef 4) or
    # 2 (coef 3.5). Best: both on 2 GPUs, 3 + 3.5 = 6.5 > 5.
    prob = problem([0, 0, 1, 1], [5, 3, 4, 3.5], [0, 0, 0, 0], [4, 2, 4, 2], [4],
                   [False, False])
    choice, info = solve_slot_problem(prob)
    assert info.status == "optimal" and not info.fallback
    assert choice is not None
    assert choice.tolist() == [False, True, False, True]
    assert info.objective == pytest.approx(6.5)


def test_inference_must_be_placed_even_at_negative_weight() -> None:
    prob = problem([0, 0, 1], [-3.0, -1.0, 2.0], [0, 1, 0], [1, 1, 1], [1, 1], [True, False])
    choice, info = solve_slot_problem(prob)
    assert choice is not None and info.objective == pytest.approx(1.0)
    # Inference takes the cheaper pool 1; the training job keeps pool 0.
    assert choice.tolist() == [False, True, True]


def test_power_cap_and_link_volume_bind() -> None:
    prob = problem([0, 1], [1.0, 1.0], [0, 0], [1, 1], [8], [False, False],
                   power_kw=[3.0, 3.0], power_cap=[5.0])
    choice, _ = solve_slot_problem(prob)
    assert choice is not None and choice.sum() == 1
    prob = problem([0, 1], [1.0, 2.0], [0, 0], [1, 1], [8], [False, False],
                   link_index=[0, 0], transfer_gb=[10.0, 10.0], link_cap=[15.0])
    choice, _ = solve_slot_problem(prob)
    assert choice is not None and choice.tolist() == [False, True]


def _two_tiers() -> SlotProblem:
    """Two jobs, each with a copy on a site's own supply (3 kWh, weight 1) and one on the
    grid (j0: 0.2, j1: -0.5); the own supply gives 4 kWh: one job fits on it. Best: j1 on
    the own supply, j0 on the grid (1.2; the other way round 1.0)."""
    return problem([0, 1, 0, 1], [1.0, 1.0, 0.2, -0.5], [0, 0, 0, 0], [1, 1, 1, 1], [8],
                   [False, False], supply_index=[0, 0, -1, -1],
                   supply_kwh=[3.0, 3.0, 0.0, 0.0], supply_cap=[4.0])


def test_supply_row_binds_and_the_grid_copy_takes_the_rest() -> None:
    prob = _two_tiers()
    choice, info = solve_slot_problem(prob, mip_rel_gap=0.0)
    assert choice is not None and choice.tolist() == [False, True, True, False]
    assert info.objective == pytest.approx(1.2)
    assert prob.is_feasible(choice)
    both = choice.copy()
    both[0] = True
    both[2] = False
    assert not prob.is_feasible(both)  # 6 kWh on a 4 kWh supply
    g = greedy_choice(prob)
    assert prob.is_feasible(g)
    assert prob.residual(g)["own_supply"].tolist() == [1.0]  # 3 of 4 kWh drawn


def _sending(prob: SlotProblem, share: float = 0.4) -> SlotProblem:
    """``prob`` with every option that moves data (``link_index >= 0``) sending it from the
    next datacenter, its sending half ``share`` of its own power."""
    moving = prob.link_index >= 0
    src = np.where(moving, (prob.dc_index + 1) % len(prob.dc_labels), -1)
    return replace(prob, src_dc_index=src[:, None],
                   src_power_kw=np.where(moving, share * prob.power_kw, 0.0)[:, None])


@pytest.mark.parametrize("seed", range(3))
def test_the_matrix_the_pyomo_model_and_the_check_read_the_same_rows(seed: int) -> None:
    """One definition of the rows (SlotProblem.rows): the HiGHS matrix's rows, the Pyomo
    model's constraints, is_feasible and the residual agree on random choices, and the fast
    MILP and the Pyomo model find the same optimum, a sending half in its source's row."""
    prob = _sending(synthetic_slot_problem(12, 3, 3, seed=seed, load=2.0))
    assert (prob.src_dc_index >= 0).any()
    arr = build_arrays(prob)
    m = create_slot_model(prob)
    col = np.repeat(np.arange(prob.n_options), np.diff(arr.start))
    rng = np.random.default_rng(seed)
    families = prob.rows()
    assert [f.label for f in families] == ["one_choice", "capacity", "power_cap",
                                           "link_volume", "own_supply"]
    for fam in families:  # the same rows on both paths
        built = fam.built()
        assert (arr.row_of[fam.label] >= 0).tolist() == built.tolist()
        assert len(m.component(fam.label)) == int(built.sum())
    for _ in range(20):
        z = rng.random(prob.n_options) < rng.uniform(0.05, 0.5)
        az = np.bincount(arr.index, weights=arr.value * z[col], minlength=arr.n_rows)
        left = prob.residual(z)
        for fam in families:
            rows = arr.row_of[fam.label]
            built = rows >= 0
            np.testing.assert_allclose(az[rows[built]], fam.used(z)[built])
            np.testing.assert_allclose(left[fam.label], fam.upper - fam.used(z))
        in_matrix = bool(np.all(az <= arr.row_upper + 1e-6) and np.all(az >= arr.row_lower - 1e-6))
        for k in m.K:
            m.z[k].value = float(z[k])
        in_pyomo = all(c.lslack() >= -1e-6 and c.uslack() >= -1e-6
                       for c in m.component_data_objects(pyo.Constraint, active=True))
        assert prob.is_feasible(z) == in_matrix == in_pyomo
    fast, finfo = solve_slot_problem_fast(prob, method="mip", mip_rel_gap=0.0)
    ref, rinfo = solve_slot_problem(prob, mip_rel_gap=0.0)
    assert fast is not None and ref is not None
    assert prob.is_feasible(fast) and prob.is_feasible(ref)
    assert finfo.objective == pytest.approx(rinfo.objective, rel=1e-6)
    assert prob.is_feasible(greedy_choice(prob))


def test_a_move_out_counts_its_sending_half_in_the_source_power_row() -> None:
    """Job 0 moves to d1 (weight 2), sending 2.5 kW from d0 for the slot; job 1 runs at d0
    (1 kW, weight 1) under a 3 kW cap there. Without the sending half both run (3); with it,
    d0 would draw 3.5 kW: the move alone is best (2)."""
    blind = problem([0, 1], [2.0, 1.0], [1, 0], [1, 1], [4, 4], [False, False],
                    power_kw=[1.0, 1.0], power_cap=[3.0, np.inf])
    prob = replace(blind, src_dc_index=np.array([[0], [-1]]),
                   src_power_kw=np.array([[2.5], [0.0]]))
    both = np.array([True, True])
    assert blind.is_feasible(both) and not prob.is_feasible(both)
    assert prob.residual(both)["power_cap"].tolist() == [-0.5, np.inf]
    for choice, _ in (solve_slot_problem(prob, mip_rel_gap=0.0),
                      solve_slot_problem_fast(prob, mip_rel_gap=0.0)):
        assert choice is not None and choice.tolist() == [True, False]
    assert greedy_choice(prob).tolist() == [True, False]
    # take: every per-option array at once, copies included.
    twice = prob.take(np.array([0, 0, 1]))
    assert twice.src_dc_index.tolist() == [[0], [0], [-1]]
    assert twice.src_power_kw[:, 0].tolist() == [2.5, 2.5, 0.0]
    assert twice.power_kw.tolist() == [1.0, 1.0, 1.0]
    assert prob.subset(np.array([False, True])).src_dc_index.tolist() == [[-1]]
    with pytest.raises(ValueError, match="src_power_kw"):
        replace(prob, src_power_kw=np.zeros((2, 2)))


def test_phases_hook_and_failure_status() -> None:
    prob = problem([0, 1], [1.0, 1.0], [0, 0], [1, 1], [2], [False, False])
    m = create_slot_model(prob)
    for name in ("J", "K", "P", "D", "L", "z", "one_choice", "capacity", "obj"):
        assert hasattr(m, name)

    def forbid_first(model: pyo.ConcreteModel) -> None:
        model.what_if = pyo.Constraint(expr=model.z[0] == 0)

    info = solve_slot_model(m, extra_constraints=forbid_first)
    assert extract_choice(m).tolist() == [False, True] and info.objective == 1.0

    def impossible(model: pyo.ConcreteModel) -> None:
        model.bad = pyo.Constraint(expr=model.z[0] + model.z[1] >= 3)

    choice, info = solve_slot_problem(prob, extra_constraints=impossible)
    assert choice is None and info.objective is None and "infeasible" in info.status


def test_nan_weight_is_an_error() -> None:
    with pytest.raises(ValueError, match="NaN"):
        problem([0], [float("nan")], [0], [1], [1], [False])


@st.composite
def random_problems(draw: st.DrawFn) -> SlotProblem:
    n_jobs = draw(st.integers(1, 6))
    n_pools = draw(st.integers(1, 3))
    capacity = draw(st.lists(st.integers(1, 8), min_size=n_pools, max_size=n_pools))
    job_index, coef, pool_index, n_gpus = [], [], [], []
    must = [draw(st.booleans()) and j == 0 for j in range(n_jobs)]
    for j in range(n_jobs):
        for _ in range(draw(st.integers(1, 4))):
            job_index.append(j)
            coef.append(draw(st.floats(-5, 5)))
            pool_index.append(draw(st.integers(0, n_pools - 1)))
            n_gpus.append(draw(st.integers(1, 8)))
    if must[0]:
        # Give the must-place job a one-GPU option so that a feasible answer exists.
        job_index.append(0)
        coef.append(-1.0)
        pool_index.append(0)
        n_gpus.append(1)
    if not draw(st.booleans()):
        return problem(job_index, coef, pool_index, n_gpus, capacity, must)
    # A supply row on some options (never the must-place job's one-GPU option).
    k = len(job_index)
    inside = [draw(st.booleans()) and not (must[0] and i == k - 1) for i in range(k)]
    kwh = [draw(st.floats(0.5, 4.0)) for _ in range(k)]
    return problem(job_index, coef, pool_index, n_gpus, capacity, must,
                   supply_index=[0 if i else -1 for i in inside],
                   supply_kwh=[e if i else 0.0 for e, i in zip(kwh, inside, strict=True)],
                   supply_cap=[draw(st.floats(0.0, 6.0))])


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(random_problems())
def test_greedy_and_milp_are_feasible_and_milp_is_at_least_greedy(prob: SlotProblem) -> None:
    g = greedy_choice(prob)
    assert prob.is_feasible(g)
    choice, info = solve_slot_problem(prob, mip_rel_gap=0.0)
    assert choice is not None, info
    assert prob.is_feasible(choice)
    assert float(prob.coef @ choice) >= float(prob.coef @ g) - 1e-6
