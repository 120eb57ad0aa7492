"""The block LP of the look-ahead and the hindsight plan: hand-known optima, duals and rows."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.optim.blocklp import (
    ROW_ORDER,
    BlockMoves,
    BlockProblem,
    ConfigArrays,
    block_columns,
    create_block_lp,
    penalty_weight,
    solve_block_problem,
)


@pytest.mark.parametrize(("starts", "lens", "first", "end", "want_blocks", "want_slots"), [
    # Uniform blocks of 2 (the hindsight plan): window [1, 5) touches blocks 0, 1, 2.
    ([0, 2, 4, 6], [2, 2, 2, 2], 1, 5, [0, 1, 2], [1, 2, 1]),
    ([0, 2, 4, 6], [2, 2, 2, 1], 6, 7, [3], [1]),
    # Singles then blocks of 4 (the look-ahead), window from 0 to 6.
    ([0, 1, 2, 6], [1, 1, 4, 4], 0, 6, [0, 1, 2], [1, 1, 4]),
    ([0, 1, 2, 6], [1, 1, 4, 4], 0, 7, [0, 1, 2, 3], [1, 1, 4, 1]),
])
def test_block_columns_cover_the_window(starts: list[int], lens: list[int], first: int,
                                        end: int, want_blocks: list[int],
                                        want_slots: list[float]) -> None:
    ok = np.array([True, False, True])
    job, blk, cfg, slots = block_columns(np.array(starts), np.array(lens), np.array([first]),
                                         np.array([end]), [ok])
    # Block-major, then the allowed configurations in order.
    assert blk.tolist() == [b for b in want_blocks for _ in range(2)]
    assert cfg.tolist() == [0, 2] * len(want_blocks)
    assert slots.tolist() == [s for s in want_slots for _ in range(2)]
    assert job.tolist() == [0] * slots.size


def test_block_columns_skip_empty_windows_and_jobs_without_configurations() -> None:
    job, blk, cfg, slots = block_columns(
        np.array([0, 2]), np.array([2, 2]), np.array([0, 3, 1]), np.array([2, 3, 4]),
        [np.array([True]), np.array([True]), np.array([False])])
    assert job.tolist() == [0] and blk.tolist() == [0] and slots.tolist() == [2.0]


@pytest.mark.parametrize(("ratios", "factor", "want"), [
    ([], 10.0, 10.0), ([0.2, 0.5], 10.0, 10.0), ([3.0, 7.0], 1e3, 7e3)])
def test_penalty_weight_outweighs_the_dearest_ratio(ratios: list[float], factor: float,
                                                    want: float) -> None:
    assert penalty_weight(np.array(ratios), factor) == pytest.approx(want)


def _problem(**over: Any) -> BlockProblem:
    """One training job, two blocks of one slot, one pool of 2 GPUs in datacenter 0.

    Configurations: k0 = 1 GPU, 0.5 work and 1 kWh per slot; k1 = 2 GPUs, 1.0 work and
    2.5 kWh per slot. Prices 1 then 2 per kWh. Columns (block-major): x00, x01, x10, x11.
    """
    energy = np.array([1.0, 2.5, 1.0, 2.5])
    price = np.array([1.0, 1.0, 2.0, 2.0])
    base: dict[str, Any] = dict(
        block_len=np.array([1, 1]), job=np.zeros(4, dtype=np.int64),
        block=np.array([0, 0, 1, 1]), slots=np.ones(4), cost=energy * price,
        configs=ConfigArrays(dc=np.zeros(4, dtype=np.int64), pool=np.zeros(4, dtype=np.int64),
                             n_gpus=np.array([1.0, 2.0, 1.0, 2.0]), energy_kwh=energy,
                             rate=np.array([0.5, 1.0, 0.5, 1.0])),
        rate=np.array([0.5, 1.0, 0.5, 1.0]), carbon_kg=energy * 0.5,
        must_run=np.array([False]), work_jobs=np.array([0]), need=np.array([1.0]),
        pool_capacity=np.array([2.0]), slot_s=3600.0, shortfall_weight=1e3,
        carbon_slack_weight=1e3)
    base.update(over)
    return BlockProblem(**base)


def test_hand_optimum_and_the_work_dual() -> None:
    # Per unit of work: k0 now 2, k1 now 2.5, k0 later 4, k1 later 5; one configuration
    # per block, so 1.0 work costs at least 2.5 (k1 now; k0 now + k0 later is 3).
    sol = solve_block_problem(_problem(), time_limit_s=10.0)
    assert sol.optimal and sol.complete and sol.status == "Optimal"
    np.testing.assert_allclose(sol.x, [0.0, 1.0, 0.0, 0.0], atol=1e-9)
    assert float(_problem().cost @ sol.x) == pytest.approx(2.5)
    # The job's price of work lies between what one unit less saves (k0 for part of the
    # first slot: 3 per unit) and what one unit more costs (k0 later: 4 per unit).
    assert 3.0 - 1e-9 <= sol.work_dual[0] <= 4.0 + 1e-9
    assert sol.short.tolist() == [0.0] and sol.slack_kg == 0.0
    assert sol.n_columns == 4 + 0 + 1 + 1  # x, no moves, one shortfall, the slack


def test_work_that_does_not_fit_is_short_not_infeasible() -> None:
    # Both blocks on k1 give 2.0 work; 2.5 is asked.
    sol = solve_block_problem(_problem(need=np.array([2.5])), time_limit_s=10.0)
    assert sol.optimal
    assert sol.short.tolist() == pytest.approx([0.5])
    np.testing.assert_allclose(sol.x, [0.0, 1.0, 0.0, 1.0], atol=1e-9)


def test_pool_capacity_is_shared_per_block() -> None:
    # A second job wants the same pool: only 2 GPUs per block for both.
    prob = _problem()
    two = _problem(
        job=np.r_[prob.job, np.ones(4, dtype=np.int64)], block=np.tile(prob.block, 2),
        slots=np.ones(8), cost=np.tile(prob.cost, 2),
        configs=ConfigArrays.stack([prob.configs, prob.configs]), rate=np.tile(prob.rate, 2),
        carbon_kg=np.tile(prob.carbon_kg, 2), must_run=np.array([False, False]),
        work_jobs=np.array([0, 1]), need=np.array([1.0, 1.0]))
    sol = solve_block_problem(two, time_limit_s=10.0)
    assert sol.optimal and sol.short.sum() == pytest.approx(0.0, abs=1e-9)
    x = sol.x.reshape(2, 2, 2)  # job, block, configuration
    gpus = np.einsum("jbk,k->b", x, [1.0, 2.0])
    assert np.all(gpus <= 2.0 + 1e-9)
    # k0 for both jobs in both blocks (2 GPUs a block): 2 * 1 + 2 * 2 = 6, cheaper than
    # k1 now for one job and later for the other (2.5 + 5).
    assert float(two.cost @ sol.x) == pytest.approx(6.0)
    np.testing.assert_allclose(gpus, [2.0, 2.0], atol=1e-9)


def test_inference_runs_exactly_its_active_slots() -> None:
    prob = _problem(must_run=np.array([True]), work_jobs=np.zeros(0, dtype=np.int64),
                    need=np.zeros(0), rate=np.zeros(4))
    sol = solve_block_problem(prob, time_limit_s=10.0)
    assert sol.optimal
    # Placed in both blocks, on the cheaper configuration (k0).
    np.testing.assert_allclose(sol.x, [1.0, 0.0, 1.0, 0.0], atol=1e-9)


def test_power_cap_rows_use_the_average_kw() -> None:
    # k1 draws 2.5 kW (2.5 kWh per hour slot), k0 1 kW. Under a 2 kW cap (on average over
    # the block) the first block gives at most x00 + 2.5 x01 <= 2, x00 + x01 <= 1: 2/3 of
    # k1 and 1/3 of k0 (5/6 work at 2); the rest, 1/6 work, from k0 later (4 per unit).
    prob = _problem(power_cap_kw=np.array([2.0]))
    sol = solve_block_problem(prob, time_limit_s=10.0)
    assert sol.optimal
    kw = prob.configs.energy_kwh * 3600.0 / prob.slot_s
    assert np.bincount(prob.block, weights=kw * sol.x).max() <= 2.0 + 1e-9
    np.testing.assert_allclose(sol.x, [1 / 3, 2 / 3, 1 / 3, 0.0], atol=1e-9)
    assert float(prob.cost @ sol.x) == pytest.approx(1 / 3 + 2.5 * 2 / 3 + 2 / 3)


def test_carbon_cap_binds_and_its_slack_is_priced() -> None:
    # Carbon 0.5 kg per kWh: the optimum emits 1.25 kg; a 0.9 kg cap cannot be met at the
    # work asked (the least carbon for 1.0 work is 1.0 kg, k0 twice).
    group = np.zeros(4, dtype=np.int64)
    capped = solve_block_problem(_problem(carbon_group=group, carbon_cap_kg=np.array([1.0])),
                                 time_limit_s=10.0)
    assert capped.optimal and capped.slack_kg == pytest.approx(0.0, abs=1e-9)
    assert float(_problem().carbon_kg @ capped.x) <= 1.0 + 1e-9
    # Shortfall dearer than carbon slack: the work is done, 0.1 kg over the cap.
    over = solve_block_problem(_problem(carbon_group=group, carbon_cap_kg=np.array([0.9]),
                                        shortfall_weight=1e4), time_limit_s=10.0)
    assert over.optimal and over.slack_kg == pytest.approx(0.1)
    # Columns outside every group (-1) are not counted.
    free = solve_block_problem(_problem(carbon_group=np.full(4, -1),
                                        carbon_cap_kg=np.array([0.0])), time_limit_s=10.0)
    assert free.slack_kg == pytest.approx(0.0) and float(
        _problem().cost @ free.x) == pytest.approx(2.5)


def test_a_move_is_paid_once_and_loses_work() -> None:
    # A second datacenter (its own pool) at half the price; the data are in datacenter 0.
    prob = _problem()
    cheap = replace(prob.configs, dc=np.ones(4, dtype=np.int64), pool=np.ones(4, dtype=np.int64))
    cols: dict[str, Any] = dict(
        job=np.zeros(8, dtype=np.int64), block=np.tile(prob.block, 2), slots=np.ones(8),
        cost=np.r_[prob.cost, prob.cost / 2], configs=ConfigArrays.stack([prob.configs, cheap]),
        rate=np.tile(prob.rate, 2), carbon_kg=np.tile(prob.carbon_kg, 2),
        pool_capacity=np.array([2.0, 2.0]))
    of_x = np.r_[np.full(4, -1), np.zeros(4)].astype(np.int64)

    def solve(cost: float, lost: float) -> Any:
        moves = BlockMoves(job=np.array([0]), cost=np.array([cost]), lost=np.array([lost]),
                           of_x=of_x)
        return solve_block_problem(_problem(**cols, moves=moves), time_limit_s=10.0)

    moved = solve(0.5, 0.0)  # 1.25 there + 0.5 < 2.5 here
    assert moved.optimal and moved.move.tolist() == pytest.approx([1.0])
    np.testing.assert_allclose(moved.x, [0, 0, 0, 0, 0, 1, 0, 0], atol=1e-9)
    stays = solve(2.0, 0.0)  # 1.25 + 2 > 2.5
    assert stays.move.tolist() == pytest.approx([0.0], abs=1e-9)
    np.testing.assert_allclose(stays.x[:4], [0, 1, 0, 0], atol=1e-9)
    # Moving loses 0.5 work: the move must be made up for in the second block.
    lossy = solve(0.5, 0.5)
    work = float(np.tile(prob.rate, 2) @ lossy.x) - 0.5 * float(lossy.move[0])
    assert work >= 1.0 - 1e-9


def test_exact_mode_forbids_time_sharing_a_slot_and_pays_only_the_part_used() -> None:
    # 0.75 work. The LP time-shares the first slot: half k0, half k1 (0.25 + 0.5 work,
    # cost 0.5 + 1.25). Exact mode chooses one configuration per slot (z binary): k1 for
    # 0.75 of the slot, paying that part only (1.875), cheaper than k0 now and later (2).
    lp_sol = solve_block_problem(_problem(need=np.array([0.75])), time_limit_s=10.0)
    np.testing.assert_allclose(lp_sol.x, [0.5, 0.5, 0.0, 0.0], atol=1e-9)
    prob = _problem(need=np.array([0.75]), exact=True)
    sol = solve_block_problem(prob, time_limit_s=10.0, mip_rel_gap=1e-9)
    assert sol.optimal and sol.complete
    np.testing.assert_allclose(sol.x, [0.0, 0.75, 0.0, 0.0], atol=1e-9)
    assert float(prob.cost @ sol.x) == pytest.approx(1.875)
    lp = create_block_lp(prob)
    assert lp.cols["z"].stop - lp.cols["z"].start == 4
    assert list(lp.rows) == ["choice", "pool", "work", "z_choice", "z_pool", "z_link"]


@pytest.mark.parametrize("order", list(itertools.islice(itertools.permutations(ROW_ORDER),
                                                        0, 720, 97)))
def test_row_order_changes_no_optimum(order: tuple[str, ...]) -> None:
    group = np.zeros(4, dtype=np.int64)
    base = _problem(need=np.array([1.5]), carbon_group=group, carbon_cap_kg=np.array([2.0]),
                    power_cap_kw=np.array([3.0]))
    ref = solve_block_problem(base, time_limit_s=10.0)
    got = solve_block_problem(replace(base, row_order=order), time_limit_s=10.0)
    assert got.optimal
    assert float(base.cost @ got.x) == pytest.approx(float(base.cost @ ref.x), rel=1e-12)
    lp = create_block_lp(replace(base, row_order=order))
    assert [r for r in lp.rows] == [r for r in order if r != "move"]


@pytest.mark.parametrize(("over", "match"), [
    ({"cost": np.zeros(3)}, "cost must have shape"),
    ({"need": np.zeros(2)}, "need needs one entry per work job"),
    ({"carbon_group": np.zeros(4, dtype=np.int64)}, "come together"),
    ({"row_order": ("choice", "pool")}, "row_order must order"),
])
def test_malformed_problems_are_refused(over: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _problem(**over)


@given(st.lists(st.tuples(st.floats(-1e6, 1e6), st.floats(0.0, 1.0)), min_size=0, max_size=300),
       st.randoms(use_true_random=False))
@settings(max_examples=60, deadline=None)
def test_exact_dot_is_the_same_in_any_order_and_memory_layout(
        pairs: list[tuple[float, float]], rnd: Any) -> None:
    """A plan's cost as the sum of cost x share rounded once: a shuffled order, a strided
    copy (BLAS takes other paths for these, and ``a @ b`` moved in its last bits; a plan
    cost summed in a Dask worker differed from this process's) give the same number, and
    that number is the exactly rounded sum."""
    import math

    from workbench.optim.blockdata import exact_dot

    a = np.array([p[0] for p in pairs], dtype=float)
    b = np.array([p[1] for p in pairs], dtype=float)
    want = math.fsum((a * b).tolist())
    assert exact_dot(a, b) == want
    order = list(range(a.size))
    rnd.shuffle(order)
    assert exact_dot(a[order], b[order]) == want
    strided = np.empty(2 * a.size)[::2]
    strided[:] = a
    assert exact_dot(strided, b) == want
