"""The block LP's warm start (a basis kept by key, mapped onto the next window) and the
prices it reports (capacity per GPU-slot, carbon per kg)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from workbench.optim.blocklp import (
    BlockKeys,
    BlockProblem,
    ConfigArrays,
    create_block_lp,
    solve_block_problem,
    warm_basis,
)
from workbench.optim.highs import BASIS_BASIC


def _jobs_problem(n_jobs: int, n_blocks: int, *, seed: int = 0, first_slot: int = 0,
                  cap: float = 3.0, need: float = 1.5, **over: Any) -> BlockProblem:
    """``n_jobs`` training jobs, blocks of one slot, two configurations each (1 GPU: 0.5
    work, 1 kWh; 2 GPUs: 1.0 work, 2.5 kWh) in one pool of ``cap`` GPUs; prices from a
    seeded daily curve starting at ``first_slot`` (so a later window sees the same prices
    for the same slots)."""
    slots = np.arange(first_slot, first_slot + n_blocks)
    price = 1.0 + 0.5 * np.sin(slots / 3.0) + 0.1 * (seed % 3)
    job = np.repeat(np.arange(n_jobs), 2 * n_blocks)
    block = np.tile(np.repeat(np.arange(n_blocks), 2), n_jobs)
    kcfg = np.tile([0, 1], n_jobs * n_blocks)
    energy = np.where(kcfg == 0, 1.0, 2.5)
    rate = np.where(kcfg == 0, 0.5, 1.0)
    n_x = job.size
    base: dict[str, Any] = dict(
        block_len=np.ones(n_blocks, dtype=np.int64), job=job, block=block, slots=np.ones(n_x),
        cost=energy * price[block],
        configs=ConfigArrays(dc=np.zeros(n_x, dtype=np.int64), pool=np.zeros(n_x, dtype=np.int64),
                             n_gpus=np.where(kcfg == 0, 1.0, 2.0), energy_kwh=energy,
                             rate=rate),
        rate=rate, carbon_kg=energy * 0.4, must_run=np.zeros(n_jobs, dtype=bool),
        work_jobs=np.arange(n_jobs), need=np.full(n_jobs, need),
        pool_capacity=np.array([cap]), slot_s=3600.0, shortfall_weight=1e3,
        carbon_slack_weight=1e3,
        keys=BlockKeys(job=np.arange(n_jobs, dtype=np.int64) + 100,
                       block_start=slots.astype(np.int64)))
    base.update(over)
    return BlockProblem(**base)


def _objective(prob: BlockProblem, sol: Any) -> float:
    return float(prob.cost @ sol.x + prob.shortfall_weight * sol.short.sum()
                 + prob.carbon_slack_weight * sol.slack_kg)


def test_a_solve_started_from_its_own_basis_needs_no_iteration() -> None:
    prob = _jobs_problem(4, 6)
    cold = solve_block_problem(prob, time_limit_s=10.0, keep_basis=True)
    assert cold.optimal and cold.basis is not None and cold.iterations > 0
    warm = solve_block_problem(prob, time_limit_s=10.0, warm=cold.basis, keep_basis=True)
    assert warm.optimal and warm.warm
    assert warm.iterations == 0
    assert _objective(prob, warm) == pytest.approx(_objective(prob, cold), rel=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_next_window_warm_started_has_the_cold_optimum(seed: int) -> None:
    # The window moves on by two slots, one job finishes and another arrives: the mapped
    # basis is a start, never a different answer.
    old = _jobs_problem(5, 8, seed=seed)
    first = solve_block_problem(old, time_limit_s=10.0, keep_basis=True)
    assert first.basis is not None
    new = _jobs_problem(5, 8, seed=seed, first_slot=2, need=1.2)
    keys = new.keys
    assert keys is not None
    new = replace(new, keys=replace(keys, job=np.array([101, 102, 103, 104, 200])))
    cold = solve_block_problem(new, time_limit_s=10.0)
    warm = solve_block_problem(new, time_limit_s=10.0, warm=first.basis)
    assert warm.optimal and cold.optimal and warm.warm and not cold.warm
    assert _objective(new, warm) == pytest.approx(_objective(new, cold), rel=1e-9)
    # (The duals of a degenerate window may differ: another optimal vertex, as documented.)


def test_the_basis_is_matched_by_job_configuration_and_slot() -> None:
    old = _jobs_problem(2, 4)
    sol = solve_block_problem(old, time_limit_s=10.0, keep_basis=True)
    assert sol.basis is not None
    _, status = sol.basis.cols["x"]
    # The same problem, its jobs in the other order and the window one slot later.
    new = _jobs_problem(2, 4, first_slot=1)
    keys = new.keys
    assert keys is not None
    new = replace(new, keys=replace(keys, job=np.array([101, 100])))
    lp = create_block_lp(new)
    col = warm_basis(sol.basis, new, lp).col_status[lp.cols["x"]]
    # New job 0 (key 101) was old job 1; new block b starts at slot b + 1 (old block b + 1).
    old_x = status.reshape(2, 4, 2)
    new_x = col.reshape(2, 4, 2)
    np.testing.assert_array_equal(new_x[0, :3], old_x[1, 1:])
    np.testing.assert_array_equal(new_x[1, :3], old_x[0, 1:])
    # The last block is new (no old block held slot 4): its columns start at 0.
    assert not (new_x[:, 3] == BASIS_BASIC).any()


def test_the_basis_follows_the_labels_when_a_job_leaves_the_window() -> None:
    # Job key 100 leaves; keys 101 and 102 stay, now at positions 0 and 1; the window moves
    # on two slots. Each column and row of a staying job takes the status its labels had.
    old = _jobs_problem(3, 4)
    sol = solve_block_problem(old, time_limit_s=10.0, keep_basis=True)
    assert sol.basis is not None
    new = _jobs_problem(2, 4, first_slot=2)
    keys = new.keys
    assert keys is not None
    new = replace(new, keys=replace(keys, job=np.array([101, 102])))
    lp = create_block_lp(new)
    got = warm_basis(sol.basis, new, lp)
    for basis_of, where, status in (("cols", lp.cols, got.col_status),
                                    ("rows", lp.rows, got.row_status)):
        for name in ("x", "choice", "short", "work"):
            if name not in where:
                continue
            labels, old_status = getattr(sol.basis, basis_of)[name]
            new_status = status[where[name]]
            coords = (lp.col_coords if basis_of == "cols" else lp.row_coords)[name]
            job = np.array([101, 102])[coords.label("job")]
            block = (2 + coords.label("block") if "block" in coords.sizes
                     else np.zeros(coords.size, dtype=np.int64))
            for i in range(coords.size):
                same = labels["job"] == job[i]
                if "block" in labels:
                    same &= labels["block"] == block[i]
                for d in coords.sizes:
                    if d not in ("job", "block"):
                        same &= labels[d] == coords.label(d)[i]
                if block[i] < 4:  # old blocks held slots 0-3
                    assert new_status[i] == old_status[np.flatnonzero(same)[0]]
                else:
                    assert not same.any()


def test_pool_price_is_the_value_of_a_gpu_slot() -> None:
    # Five jobs want more than a 3-GPU pool gives in the cheap slots: the pool rows bind and
    # their dual lies between what one GPU-slot more saves and one less costs.
    prob = _jobs_problem(5, 6, cap=3.0)
    sol = solve_block_problem(prob, time_limit_s=10.0)
    assert sol.pool_price.shape == (1, 6) and (sol.pool_price >= 0).all()
    assert sol.pool_price.max() > 0
    base = _objective(prob, sol)
    b = int(np.argmax(sol.pool_price[0]))
    eps = 1e-3
    for sign in (1.0, -1.0):
        # More capacity in block b only: a pool of 3 + eps there (block length 1).
        lens = np.ones(6)
        lens[b] += sign * eps / 3.0
        moved = replace(prob, block_len=lens.astype(float))  # type: ignore[arg-type]
        got = solve_block_problem(moved, time_limit_s=10.0)
        slope = (base - _objective(moved, got)) / (sign * eps)
        if sign > 0:
            assert sol.pool_price[0, b] >= slope - 1e-6  # what one more saves, at most
        else:
            assert sol.pool_price[0, b] <= slope + 1e-6  # what one less costs, at least


def test_carbon_price_under_a_binding_cap() -> None:
    free = _jobs_problem(2, 4)
    sol = solve_block_problem(free, time_limit_s=10.0)
    emitted = float(free.carbon_kg @ sol.x)
    capped = replace(free, carbon_group=np.zeros(free.n_x, dtype=np.int64),
                     carbon_cap_kg=np.array([0.9 * emitted]))
    got = solve_block_problem(capped, time_limit_s=10.0)
    assert got.carbon_price.shape == (1,)
    assert got.carbon_price[0] > 0
    assert solve_block_problem(replace(capped, carbon_cap_kg=np.array([10 * emitted])),
                               time_limit_s=10.0).carbon_price[0] == pytest.approx(0.0)
