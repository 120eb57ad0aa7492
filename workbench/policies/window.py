"""The look-ahead's window plan: blocks of the window, data moves, and the plan read back.

:class:`~workbench.policies.lookahead.LookaheadPolicy` plans its forecast window with the
block LP (:mod:`workbench.optim.blocklp`). This module holds what is particular to that
window: its blocks (:func:`window_blocks`), its move columns priced from the links
(:func:`window_moves`) and the :class:`WindowPlan` read from the LP's solution
(:func:`window_plan`): each job's progress price (its work row's dual), the planned shares
per block.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from workbench.forecast import Forecast
from workbench.model import ScenarioView
from workbench.optim.blockdata import exact_dot
from workbench.optim.blocklp import BlockConfig, BlockMoves, BlockProblem, BlockSolution
from workbench.optim.highs import Coords
from workbench.policies.base import JobState


@dataclass(frozen=True)
class WindowPlan:
    """The look-ahead LP's result at slot ``t0``.

    Attributes
    ----------
    t0 : int
        Slot the plan starts at.
    block_start, block_len : int arrays (B,)
        Blocks, in slots from ``t0``.
    mu : mapping job id -> float
        Dual of the job's work row: the plan's price of one unit (whole job) of progress.
    share : mapping (job id, block) -> mapping (datacenter, gpu type, count) -> float
        Planned fraction of the block's slots on each configuration.
    shortfall : mapping job id -> float
        Work the window cannot fit (fraction of the job).
    cost : float
        Planned cost over the window (forecast prices), scenario currency.
    status : str
        HiGHS model status.
    solve_s : float
    n_columns : int
    pool_price : float array (pools, blocks)
        The capacity price of a GPU-slot of each pool in each block (the pool rows' duals,
        currency per GPU-slot; empty for a failed plan).
    carbon_price : float
        The price of a kg under the window's carbon cap (0 without a cap).
    carbon_price_by_dc : mapping datacenter -> float
        Under the look-ahead's paced carbon budgets, the plan's price of a kg emitted in
        each datacenter (its budget row's dual, currency per kg; empty without budgets).
    need, end : mapping job id -> float, int
        Each training job's work the window must do (fraction of the job) and the end of
        its part of the window (slots from ``t0``: its planned end, or the window's end;
        :meth:`~workbench.policies.deadlines.DeadlineRule.window`).
    """

    t0: int
    block_start: NDArray[np.int64]
    block_len: NDArray[np.int64]
    mu: Mapping[str, float]
    share: Mapping[tuple[str, int], Mapping[tuple[str, str, int], float]]
    shortfall: Mapping[str, float]
    cost: float
    status: str
    solve_s: float
    n_columns: int
    pool_price: NDArray[np.float64] = field(default_factory=lambda: np.zeros((0, 0)))
    carbon_price: float = 0.0
    carbon_price_by_dc: Mapping[str, float] = field(default_factory=dict)
    need: Mapping[str, float] = field(default_factory=dict)
    end: Mapping[str, int] = field(default_factory=dict)

    @staticmethod
    def failed(t: int) -> WindowPlan:
        """The empty plan of a window LP that failed before any plan existed."""
        return WindowPlan(t0=t, block_start=np.zeros(1, dtype=np.int64),
                          block_len=np.ones(1, dtype=np.int64), mu={}, share={},
                          shortfall={}, cost=math.nan, status="failed", solve_s=0.0,
                          n_columns=0)

    def block_of(self, t: int) -> int:
        """Index of the block holding slot ``t`` (clipped to the last block)."""
        off = t - self.t0
        pos = int(np.searchsorted(self.block_start, off, side="right")) - 1
        return min(max(pos, 0), int(self.block_start.size) - 1)



def block_forecast(forecast: Forecast, view: ScenarioView, block_start: NDArray[np.int64],
                   block_len: NDArray[np.int64]
                   ) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64]]:
    """The forecast over a window of blocks (starts and lengths, slots from now): the
    forecast row of each of the window's slots (the last row repeated past the forecast's
    end), and the mean price and carbon intensity of each block per datacenter of ``view``
    (blocks x datacenters)."""
    ridx = [forecast.region_index(d.region) for d in view.datacenters]
    rows = np.minimum(np.arange(int(block_len.sum())), forecast.price_per_kwh.shape[0] - 1)
    blen = block_len.astype(float)[:, None]
    price, carbon = (np.add.reduceat(np.asarray(a, dtype=float)[rows][:, ridx], block_start,
                                     axis=0) / blen
                     for a in (forecast.price_per_kwh, forecast.carbon_g_per_kwh))
    return rows, price, carbon

def _group_max(group: NDArray[np.int64], values: NDArray[np.float64], n: int
               ) -> NDArray[np.float64]:
    """``out[g] = max(values[group == g])``, 0 for a group without values (one pass; the
    look-ahead's best rate per (job, datacenter), which a scan per move column made
    quadratic in the window's columns)."""
    out = np.full(n, -np.inf)
    if group.size:
        np.maximum.at(out, group, values)
    out[np.isneginf(out)] = 0.0
    return out


def window_blocks(n: int, fine_slots: int, block_slots: int) -> tuple[NDArray[np.int64],
                                                                      NDArray[np.int64]]:
    """Block starts and lengths over ``n`` slots: ``fine_slots`` singles, then ``block_slots``."""
    starts = list(range(min(fine_slots, n)))
    s = len(starts)
    while s < n:
        starts.append(s)
        s += block_slots
    st = np.asarray(starts, dtype=np.int64)
    ln = np.diff(np.append(st, n)).astype(np.int64)
    return st, ln


def transfer_price(bprice: NDArray[np.float64], d: int) -> float:
    """The price a move's transfer energy pays at datacenter ``d`` (per kWh): the mean of
    the window's block prices there (``bprice``, blocks x datacenters)."""
    return float(np.mean(bprice[:, d]))


def window_moves(sc: ScenarioView, jobs: Sequence[JobState], origin: Sequence[str | None],
                 job_of: NDArray[np.int64], dci: NDArray[np.int64],
                 rate: NDArray[np.float64], bprice: NDArray[np.float64]) -> BlockMoves:
    """The window's move columns ``m[j,d]``, one per (job, datacenter away from where its
    data are, ``origin[j]``) that has a column ``x`` there: ``M_jd = GB * kWh/GB * p_d``
    (``p_d`` the window's mean price there, ``bprice`` per block and datacenter) and
    ``l_jd = transfer_s / slot_s * r_best`` (``r_best`` its fastest rate there); the GB are
    the checkpoint of a job that ran, else its dataset."""
    n_dc = len(sc.datacenters)
    dc_pos = {dc.name: i for i, dc in enumerate(sc.datacenters)}
    o_idx = np.array([-1 if o is None else dc_pos.get(o, -2) for o in origin],
                     dtype=np.int64)
    away = ((o_idx[job_of] != -1) & (dci != o_idx[job_of]) if job_of.size
            else np.zeros(0, dtype=bool))
    # The (job, datacenter) pairs sorted: the move columns' order.
    moves = Coords.unique(job=job_of[away], dc=dci[away])
    mcost = np.zeros(moves.size)
    mlost = np.zeros(moves.size)
    pairs = Coords.grid(job=len(jobs), dc=n_dc)
    best_rate = _group_max(pairs.locate(job=job_of, dc=dci), rate, pairs.size)
    p_d = [transfer_price(bprice, d) for d in range(n_dc)]
    m_job, m_dc = moves.label("job"), moves.label("dc")
    for i, (j, d, best) in enumerate(zip(m_job.tolist(), m_dc.tolist(),
                                         best_rate[pairs.locate(job=m_job, dc=m_dc)].tolist(),
                                         strict=True)):
        js = jobs[j]
        link = sc.link(str(origin[j]), sc.datacenters[d].name)
        assert link is not None
        gb = js.move_gb
        mcost[i] = gb * link.transfer_energy_kwh_per_gb * p_d[d]
        mlost[i] = link.transfer_s(gb) / sc.slot_s * best
    of_x = np.full(job_of.size, -1, dtype=np.int64)
    ax = np.flatnonzero(away)
    of_x[ax] = moves.locate(job=job_of[ax], dc=dci[ax])
    return BlockMoves(job=m_job, cost=mcost, lost=mlost, of_x=of_x)


def window_plan(t: int, jobs: Sequence[JobState], cfgs: Sequence[Sequence[BlockConfig]],
                prob: BlockProblem, cfg_of: NDArray[np.int64], bstart: NDArray[np.int64],
                sol: BlockSolution, ends: NDArray[np.int64]) -> WindowPlan:
    """The plan at slot ``t`` from the window LP's solution: each job's progress price
    ``mu`` (its work row's dual), the planned share of each block per configuration, the
    shortfalls, and each training job's need and window end (``ends``, per job of
    ``jobs``). Its ``solve_s`` is 0 (the caller times the whole)."""
    x = sol.x
    mu = {jobs[int(j)].job.job_id: max(float(sol.work_dual[i]), 0.0)
          for i, j in enumerate(prob.work_jobs)}
    share: dict[tuple[str, int], dict[tuple[str, str, int], float]] = {}
    cols = np.flatnonzero(x > 1e-7)
    # The share of each column's block (the dictionaries filled in column order).
    frac = (x[cols] / np.maximum(prob.slots[cols], 1e-12)).tolist()
    for j, b, k, f in zip(prob.job[cols].tolist(), prob.block[cols].tolist(),
                          cfg_of[cols].tolist(), frac, strict=True):
        conf = cfgs[j][k]
        sd = share.setdefault((jobs[j].job.job_id, b), {})
        ck2 = (conf.datacenter, conf.gpu_type, conf.n_gpus)
        sd[ck2] = sd.get(ck2, 0.0) + f
    shortfall = {jobs[int(j)].job.job_id: float(sol.short[i])
                 for i, j in enumerate(prob.work_jobs) if sol.short[i] > 1e-6}
    move_cost = prob.moves.cost if prob.moves is not None else np.zeros(0)
    return WindowPlan(t0=t, block_start=bstart, block_len=prob.block_len, mu=mu,
                      share=share, shortfall=shortfall,
                      cost=exact_dot(prob.cost, x) + exact_dot(move_cost, sol.move),
                      status=sol.status, solve_s=0.0, n_columns=sol.n_columns,
                      pool_price=sol.pool_price,
                      carbon_price=float(sol.carbon_price.sum()),
                      need={jobs[int(j)].job.job_id: float(prob.need[i])
                            for i, j in enumerate(prob.work_jobs)},
                      end={jobs[int(j)].job.job_id: int(ends[int(j)])
                           for j in prob.work_jobs.tolist()})
