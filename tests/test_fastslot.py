"""The fast slot solver against hand optima and the Pyomo reference (same objective within gap)."""

from __future__ import annotations

import numpy as np
import pyomo.environ as pyo
import pytest
from helpers_policies import perturbed, problem, synthetic_slot_problem

from workbench.optim.fastslot import FastSlotSolver, solve_slot_problem_fast
from workbench.optim.slotarrays import build_arrays, lp_bound, relative_gap
from workbench.optim.slotpyomo import solve_slot_problem


@pytest.mark.parametrize("method", ["auto", "lp-repair", "mip"])
def test_two_jobs_one_pool_hand_optimum(method: str) -> None:
    # Pool of 4 GPUs; job 0: 4 GPUs (5) or 2 (3); job 1: 4 GPUs (4) or 2 (3.5).
    # Best: both on 2 GPUs, 3 + 3.5 = 6.5. The LP relaxation is integral here.
    prob = problem([0, 0, 1, 1], [5, 3, 4, 3.5], [0, 0, 0, 0], [4, 2, 4, 2], [4],
                   [False, False])
    choice, info = solve_slot_problem_fast(prob, method=method)  # type: ignore[arg-type]
    assert choice is not None and choice.tolist() == [False, True, False, True]
    assert info.objective == pytest.approx(6.5)
    assert info.status == "optimal"


def test_inference_placed_at_negative_weight_and_infeasible_reported() -> None:
    prob = problem([0, 0, 1], [-3.0, -1.0, 2.0], [0, 1, 0], [1, 1, 1], [1, 1], [True, False])
    choice, info = solve_slot_problem_fast(prob)
    assert choice is not None and choice.tolist() == [False, True, True]
    assert info.objective == pytest.approx(1.0)
    # Two services that must run, one GPU: no allocation, and the status says so.
    bad = problem([0, 1], [-1.0, -1.0], [0, 0], [1, 1], [1], [True, True])
    choice, info = solve_slot_problem_fast(bad)
    assert choice is None and info.status == "infeasible"


def test_power_cap_and_link_volume_bind() -> None:
    prob = problem([0, 1], [1.0, 1.0], [0, 0], [1, 1], [8], [False, False],
                   power_kw=[3.0, 3.0], power_cap=[5.0])
    choice, _ = solve_slot_problem_fast(prob)
    assert choice is not None and choice.sum() == 1
    prob = problem([0, 1], [1.0, 2.0], [0, 0], [1, 1], [8], [False, False],
                   link_index=[0, 0], transfer_gb=[10.0, 10.0], link_cap=[15.0])
    choice, _ = solve_slot_problem_fast(prob)
    assert choice is not None and choice.tolist() == [False, True]


@pytest.mark.parametrize("method", ["auto", "lp-repair", "mip"])
def test_supply_row_binds_as_in_the_reference(method: str) -> None:
    # Two jobs on a 4 kWh own supply that fits one (3 kWh each); grid copies worth 0.2 and
    # -0.5: j1 on the own supply, j0 on the grid (1.2).
    prob = problem([0, 1, 0, 1], [1.0, 1.0, 0.2, -0.5], [0, 0, 0, 0], [1, 1, 1, 1], [8],
                   [False, False], supply_index=[0, 0, -1, -1],
                   supply_kwh=[3.0, 3.0, 0.0, 0.0], supply_cap=[4.0])
    choice, info = solve_slot_problem_fast(
        prob, method=method, mip_rel_gap=0.0)  # type: ignore[arg-type]
    assert choice is not None and choice.tolist() == [False, True, True, False]
    assert info.objective == pytest.approx(1.2)
    arr = build_arrays(prob)
    assert arr.row_of["own_supply"].tolist() == [arr.n_job_rows]  # one supply row, after the jobs'


def test_arrays_skip_rows_that_cannot_bind_and_reduce_non_positive_options() -> None:
    prob = problem([0, 0, 1], [2.0, -1.0, 1.0], [0, 1, 1], [1, 1, 1], [1, 8], [False, False])
    arr = build_arrays(prob)
    # Two job rows, pool 0 cannot bind (1 GPU asked, 1 there), pool 1 neither (2 of 8).
    assert arr.n_rows == 2 and arr.row_of["capacity"].tolist() == [-1, -1]
    assert arr.col_upper.tolist() == [1.0, 0.0, 1.0]


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("size", [(12, 2, 3), (30, 3, 5), (60, 4, 4)])
def test_same_objective_as_pyomo_reference(size: tuple[int, int, int], seed: int) -> None:
    prob = synthetic_slot_problem(*size, seed=seed, load=2.0)
    ref_choice, ref = solve_slot_problem(prob, mip_rel_gap=1e-6)
    assert ref_choice is not None and ref.objective is not None
    bound = lp_bound(prob)
    assert bound >= ref.objective - 1e-6
    # Exact polish: the fast path reaches the reference optimum.
    exact = FastSlotSolver(accept_gap=0.0)
    choice, info = exact(prob, mip_rel_gap=1e-6)
    assert choice is not None and prob.is_feasible(choice)
    assert info.objective == pytest.approx(ref.objective, rel=1e-6, abs=1e-6)
    # Default settings: feasible, and within the reported certified gap of the LP bound.
    choice, info = FastSlotSolver()(prob)
    assert choice is not None and prob.is_feasible(choice) and info.gap is not None
    assert info.objective == pytest.approx(float(prob.coef[choice].sum()))
    assert info.gap == pytest.approx(relative_gap(bound, info.objective), abs=1e-9)
    assert info.objective >= ref.objective - max(info.gap, 1e-6) * abs(bound) - 1e-6
    # The bare repair is feasible and never better than the optimum.
    choice, info = FastSlotSolver(method="lp-repair")(prob)
    assert choice is not None and prob.is_feasible(choice)
    assert info.objective is not None and info.objective <= ref.objective + 1e-6


def test_keep_mask_returns_choice_over_full_option_axis() -> None:
    prob = synthetic_slot_problem(40, 3, 4, seed=3)
    keep = np.random.default_rng(0).random(prob.n_options) < 0.6
    keep |= prob.must_place[prob.job_index]
    choice, info = FastSlotSolver(accept_gap=0.0)(prob, keep=keep, mip_rel_gap=1e-6)
    ref_choice, ref = solve_slot_problem(prob.subset(keep), mip_rel_gap=1e-6)
    assert choice is not None and ref_choice is not None
    assert choice.shape == (prob.n_options,) and not np.any(choice & ~keep)
    assert info.objective == pytest.approx(ref.objective, rel=1e-6, abs=1e-6)


def test_kept_model_restarts_hot_and_matches_a_cold_solve() -> None:
    prob = synthetic_slot_problem(80, 4, 5, seed=5)
    solver = FastSlotSolver(method="lp-repair")
    solver(prob)
    assert solver.last is not None and not solver.last.hot_start
    nxt = perturbed(prob, seed=1)
    hot_choice, hot = solver(nxt)
    assert solver.last is not None and solver.last.hot_start
    cold_choice, cold = FastSlotSolver(method="lp-repair", reuse=False)(nxt)
    assert solver.last.lp_bound == pytest.approx(lp_bound(nxt), rel=1e-9)
    assert hot.objective == pytest.approx(cold.objective, rel=1e-6)
    # A changed structure rebuilds the model.
    solver(synthetic_slot_problem(80, 4, 5, seed=6))
    assert not solver.last.hot_start


def test_column_generation_reaches_the_full_lp_bound() -> None:
    prob = synthetic_slot_problem(150, 5, 6, seed=2)
    full = FastSlotSolver(method="lp-repair", initial_columns=0)
    few = FastSlotSolver(method="lp-repair", initial_columns=1, columns_per_round=50)
    full(prob)
    few(prob)
    assert full.last is not None and few.last is not None
    assert few.last.lp_bound == pytest.approx(full.last.lp_bound, rel=1e-9)


def test_mip_path_warm_starts_from_previous_allocation() -> None:
    prob = synthetic_slot_problem(50, 3, 4, seed=8)
    solver = FastSlotSolver(method="mip")
    first, info1 = solver(prob, mip_rel_gap=1e-6)
    second, info2 = solver(prob, mip_rel_gap=1e-6)
    assert first is not None and second is not None
    assert info2.objective == pytest.approx(info1.objective)


def test_extra_constraints_hook_goes_to_the_pyomo_reference() -> None:
    prob = problem([0, 1], [1.0, 2.0], [0, 0], [1, 1], [2], [False, False])

    def forbid_job_1(m: pyo.ConcreteModel) -> None:
        m.what_if = pyo.Constraint(expr=m.z[1] == 0)

    choice, info = solve_slot_problem_fast(prob, extra_constraints=forbid_job_1)
    assert choice is not None and choice.tolist() == [True, False]


def test_unknown_method_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown method"):
        FastSlotSolver(method="magic")  # type: ignore[arg-type]


@pytest.mark.parametrize("module", ["workbench.policies.lookahead", "workbench.optim.fastslot",
                                    "workbench.optim.fallback", "workbench.policies.lyapunov"])
def test_the_fast_path_does_not_import_pyomo(module: str) -> None:
    """The slot problem lives outside the Pyomo model: planning on the fast path (the
    default) never loads Pyomo (checked in a process of its own)."""
    import subprocess
    import sys

    code = f"import sys, {module}; print('pyomo' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
