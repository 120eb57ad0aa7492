"""The block problem of a planner, built one way for the look-ahead's window
(:meth:`~workbench.policies.lookahead.LookaheadPolicy.solve_window`, and so each group of
:class:`~workbench.policies.grouped.GroupedLookahead`) and for the hindsight plan's horizon
(:class:`~workbench.policies.offline.OfflinePolicy`): the block LP of
:mod:`workbench.optim.blocklp` (its rows and their maths there) with each column priced at
its block's price and carbon (:func:`column_prices`), the power rows from the caps
(:func:`block_power_caps`) and the balanced sites' energy left to the supply block
(:func:`block_problem`). What differs between the planners (the prices they see, a tie-break,
the work they ask, the penalty weights, moves, budgets) is theirs to pass.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from workbench.caps import Caps
from workbench.meter import idle_kw, import_limits_kw, job_power_caps_kw
from workbench.model import Scenario, ScenarioView
from workbench.optim.blocklp import (
    ROW_ORDER,
    BlockKeys,
    BlockMoves,
    BlockProblem,
    ConfigArrays,
)
from workbench.optim.supplylp import SupplyBlock
from workbench.units import G_PER_KG


def column_prices(configs: ConfigArrays, block: NDArray[np.int64], price: NDArray[np.float64],
                  carbon_g: NDArray[np.float64]
                  ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Each column's energy cost and carbon per slot run::

        cost_x = E_k * p[b, d_k]            (currency)
        carb_x = E_k * c[b, d_k] / 1000     (kg)

    ``configs`` the columns' configurations (``E_k`` kWh per slot, ``d_k`` datacenter),
    ``block`` their blocks, ``price`` and ``carbon_g`` (blocks, datacenters) the blocks'
    price per kWh and carbon intensity (g/kWh)."""
    if not block.size:
        return np.zeros(0), np.zeros(0)
    energy = configs.energy_kwh
    return energy * price[block, configs.dc], energy * carbon_g[block, configs.dc] / G_PER_KG


def block_power_caps(sc: Scenario | ScenarioView, caps: Caps, block_start: NDArray[np.int64],
                     t0: int = 0, t1: int | None = None, known_at: int | None = None
                     ) -> NDArray[np.float64] | None:
    """The power rows: the jobs' power (kW) each datacenter may draw under its import cap
    (D,), or with grid events per block (D, B), the least limit of each block's slots
    (slots ``[t0, t1)`` from ``block_start``; the events known at ``known_at``, None: all),
    less the idle load (below 0 where an event's limit lies below it: a battery must serve
    the rest, :class:`~workbench.optim.blocklp.BlockProblem`); None without a power cap or
    an event."""
    if not caps.has_events:
        return job_power_caps_kw(sc, caps) if caps.has_power else None
    lim = import_limits_kw(sc, caps, t0, t1, known_at=known_at) - idle_kw(sc)
    return np.minimum.reduceat(lim, block_start, axis=0).T.copy()


def block_problem(
    sc: Scenario | ScenarioView, *, block_len: NDArray[np.int64], job: NDArray[np.int64],
    block: NDArray[np.int64], slots: NDArray[np.float64], configs: ConfigArrays,
    rate: NDArray[np.float64], cost: NDArray[np.float64], carbon_kg: NDArray[np.float64],
    training: NDArray[np.bool_], need: NDArray[np.float64], shortfall_weight: float,
    carbon_slack_weight: float, power_cap_kw: NDArray[np.float64] | None,
    supply: SupplyBlock | None = None, moves: BlockMoves | None = None,
    keys: BlockKeys | None = None, carbon_group: NDArray[np.int64] | None = None,
    carbon_cap_kg: NDArray[np.float64] | None = None, exact: bool = False,
    row_order: tuple[str, ...] = ROW_ORDER,
) -> BlockProblem:
    """The block problem on ``sc``'s pools and clock.

    Per job ``training`` (False: an inference service, which runs exactly its slots); per
    training job, in order, its ``need``; per column (``job``, ``block``, bound ``slots``,
    ``configs``, ``rate``) its ``cost`` and ``carbon_kg`` per slot run. With a ``supply``
    block the balanced sites' columns carry neither (their energy is priced in the supply
    block); the rest (weights, power rows, moves, keys, budgets, exact, row order) as
    :class:`~workbench.optim.blocklp.BlockProblem` takes them.
    """
    if supply is not None:
        balanced = supply.site_of_dc(len(sc.datacenters))[configs.dc] >= 0
        cost, carbon_kg = np.where(balanced, 0.0, cost), np.where(balanced, 0.0, carbon_kg)
    return BlockProblem(
        block_len=block_len, job=job, block=block, slots=slots, cost=cost, configs=configs,
        rate=rate, carbon_kg=carbon_kg, must_run=~training,
        work_jobs=np.flatnonzero(training), need=need,
        pool_capacity=np.array([p.count for p in sc.pools], dtype=float),
        slot_s=float(sc.slot_s), shortfall_weight=shortfall_weight,
        carbon_slack_weight=carbon_slack_weight, power_cap_kw=power_cap_kw,
        carbon_group=carbon_group, carbon_cap_kg=carbon_cap_kg, moves=moves, exact=exact,
        row_order=row_order, keys=keys, supply=supply)
