"""The grouped look-ahead's coordinator: a job's work priced in a group (a fractional
knapsack over the group's blocks, worked by hand) and the moves it leads to."""

from __future__ import annotations

import math

import numpy as np
import pytest

from workbench.policies.groupmoves import (
    FILL_LIMIT,
    ClassConfigs,
    GroupPrices,
    Movable,
    MoveData,
    choose_moves,
    group_costs,
    move_costs,
)


def _class(pools: tuple[int, int] = (0, 0), dc: int = 0) -> ClassConfigs:
    # k0: 1 kWh and 10 samples a slot on 1 GPU (cheapest per sample); k1: 3 kWh and 20
    # samples on 2 GPUs (fastest).
    return ClassConfigs(energy=np.array([1.0, 3.0]), samples_per_slot=np.array([10.0, 20.0]),
                        pool=np.array(pools), n_gpus=np.array([1.0, 2.0]),
                        dc=np.array([dc, dc]))


def _prices(price_per_block: list[float], free: float = 100.0, n_dc: int = 1,
            pool_price: float = 0.0) -> GroupPrices:
    n_b = len(price_per_block)
    return GroupPrices(block_start=np.arange(0, 2 * n_b, 2), block_len=np.full(n_b, 2),
                       pool_price=np.full((1, n_b), pool_price), free=np.full((1, n_b), free),
                       price=np.repeat(np.array(price_per_block)[:, None], n_dc, axis=1),
                       carbon=np.zeros((n_b, n_dc)))


@pytest.mark.parametrize(("need", "end", "cost"), [
    (15.0, 4, 1.5),     # all in the cheap block 1, on k0: 15 x 1.0 / 10
    (30.0, 4, 4.0),     # block 1 full on k0 (20 x 0.1), then 10 more there on k1 at 0.2
    (30.0, 2, 10.0),    # only block 0 before the end: 20 x 0.25, then 10 x 0.5 on k1
    (45.0, 2, math.inf),  # block 0 holds 40 samples at most: not priced there
])
def test_a_job_fills_the_cheapest_blocks_first_then_its_fastest_configuration(
        need: float, end: int, cost: float) -> None:
    got = group_costs(_prices([2.5, 1.0]), [_class()], np.array([0]), np.array([need]),
                      np.array([end]), np.array([1.0]), 0.0)
    assert got.cost[0] == pytest.approx(cost)


def test_usage_and_capacity_price() -> None:
    got = group_costs(_prices([2.5, 1.0]), [_class()], np.array([0]), np.array([30.0]),
                      np.array([4]), np.array([1.0]), 0.0)
    # Block 1: one slot on k0 (1 GPU) and one on k1 (2 GPUs).
    free = np.array([[5.0, 3.0]])
    assert got.fits(0, free) and not got.fits(0, free - 0.5)
    got.take_from(0, free)
    np.testing.assert_allclose(free, [[5.0, 0.0]])
    # A GPU-slot priced at 1.0: in block 1 k0 costs 1 + 1 a slot (0.2 a sample), the
    # upgrade to k1 (3 + 2 - 2) / 10 = 0.3, below block 0's k0 (0.35): 20 x 0.2 + 10 x 0.3.
    priced = group_costs(_prices([2.5, 1.0], pool_price=1.0), [_class()], np.array([0]),
                         np.array([30.0]), np.array([4]), np.array([1.0]), 0.0)
    assert priced.cost[0] == pytest.approx(7.0)
    # A faster job (throughput estimate 2) does the same work in half the slots.
    fast = group_costs(_prices([2.5, 1.0]), [_class()], np.array([0]), np.array([30.0]),
                       np.array([4]), np.array([2.0]), 0.0)
    assert fast.cost[0] == pytest.approx(1.5)


def test_room_prices_a_job_off_full_pools() -> None:
    full = _prices([2.5, 1.0], free=0.0)
    assert np.isinf(group_costs(full, [_class()], np.array([0]), np.array([15.0]),
                                np.array([4]), np.array([1.0]), 0.0, with_room=True).cost[0])
    # Its own group prices it on every pool.
    assert group_costs(full, [_class()], np.array([0]), np.array([15.0]), np.array([4]),
                       np.array([1.0]), 0.0).cost[0] == pytest.approx(1.5)


def _data(n: int, gb: float = 0.0) -> MoveData:
    return MoveData(origin=np.zeros(n, dtype=np.int64), gb=np.full(n, gb),
                    lost_s=np.zeros(n), kwh_per_gb=np.full((2, 2), 0.5),
                    s_per_gb=np.array([[0.0, 100.0], [100.0, 0.0]]))


def test_move_cost_is_transfer_energy_and_lost_work() -> None:
    data = _data(1, gb=2.0)
    price = np.array([[0.0, 3.0], [0.0, 1.0]])  # blocks x datacenters
    got = move_costs(data, np.array([0]), [1], price, np.array([10.0]), np.array([0.5]),
                     slot_s=400.0)
    # 2 GB x 0.5 kWh/GB x mean(3, 1) + 200 s / 400 s x 10 samples x 0.5 a sample
    assert got[0] == pytest.approx(2.0 + 2.5)
    assert move_costs(data, np.array([0]), [0], price, np.array([10.0]), np.array([0.5]),
                      slot_s=400.0)[0] == 0.0


def test_moves_go_best_gain_first_while_the_group_has_room() -> None:
    # Two jobs in group 0 (price 3); group 1 (price 1, 2 GPUs) has room in its block 0
    # for one of them only (a job of 20 samples takes 2 GPU-slots on k0), none in block 1.
    need = np.array([20.0, 10.0])
    jobs = Movable(job_class=np.array([0, 0]), group=np.array([0, 0]), need=need,
                   end=np.array([4, 4]), scale=np.array([1.0, 1.0]), data=_data(2))
    used = np.array([[4.0 - 2.0 / FILL_LIMIT, 4.0]])
    cheap = GroupPrices.of(np.array([0, 2]), np.array([2, 2]), np.zeros((1, 2)), used,
                           np.array([2.0]), _forecast([[3.0, 1.0]] * 4), _view(2))
    dear = _prices([3.0, 3.0], n_dc=2)
    classes = [[_class(dc=0)], [_class(dc=1)]]
    moves = choose_moves(jobs, [dear, cheap], classes, [[0], [1]], 900.0, 0.0, 0.05)
    assert [(m.job, m.src, m.dst) for m in moves] == [(0, 0, 1)]
    assert moves[0].gain == pytest.approx(20.0 * (0.3 - 0.1))
    # Balance: no group beyond the mean number of jobs per group (1 here): one move.
    roomy = GroupPrices.of(np.array([0, 2]), np.array([2, 2]), np.zeros((1, 2)),
                           np.zeros((1, 2)), np.array([100.0]), _forecast([[3.0, 1.0]] * 4),
                           _view(2))
    three = Movable(job_class=np.zeros(3, dtype=np.int64), group=np.array([0, 0, 1]),
                    need=np.full(3, 10.0), end=np.full(3, 4), scale=np.ones(3),
                    data=_data(3))
    assert len(choose_moves(three, [dear, roomy], classes, [[0], [1]], 900.0, 0.0, 0.05,
                            balance=1.5)) == 1
    assert len(choose_moves(three, [dear, roomy], classes, [[0], [1]], 900.0, 0.0, 0.05)) == 2
    # A gain below reassign_gain of the job's cost at home: no move.
    assert not choose_moves(jobs, [dear, cheap], classes, [[0], [1]], 900.0, 0.0, 0.7)


class _Forecast:
    def __init__(self, price: list[list[float]]) -> None:
        self.price_per_kwh = np.array(price)
        self.carbon_g_per_kwh = np.zeros_like(self.price_per_kwh)

    def region_index(self, region: str) -> int:
        return int(region)


class _Dc:
    def __init__(self, i: int) -> None:
        self.region = str(i)


class _View:
    def __init__(self, n: int) -> None:
        self.datacenters = [_Dc(i) for i in range(n)]


def _forecast(price: list[list[float]]) -> _Forecast:
    return _Forecast(price)


def _view(n: int) -> _View:
    return _View(n)
