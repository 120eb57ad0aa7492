"""One group of the grouped look-ahead (:mod:`workbench.policies.grouped`): its look-ahead,
held by a :class:`GroupPlanner` (a Dask actor or a plain object), and the
:class:`GroupReport` it gives the coordinator after each call."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from workbench.caps import Caps
from workbench.model import ScenarioView
from workbench.policies.base import Allocation, Forecast, SlotState
from workbench.policies.lookahead import KeptPlan, LookaheadConfig, LookaheadPolicy


@dataclass(frozen=True)
class GroupReport:
    """What a group tells the coordinator of its plan: its blocks (slots from its start),
    the capacity price of a GPU-slot of each of its pools in each block and the GPU-slots
    it uses there (pools x blocks), each training job's window need (fraction of the job)
    and window end (slots), the price of a kg under its cap, the slot the plan was made
    at, and the plan's cost (forecast prices), shortfall
    (jobs' work) and columns. A group without a plan reports empty blocks."""

    block_start: NDArray[np.int64]
    block_len: NDArray[np.int64]
    pool_price: NDArray[np.float64]
    pool_used: NDArray[np.float64]
    need: Mapping[str, float]
    end: Mapping[str, int]
    carbon_price: float
    plan_t0: int
    plan_cost: float = 0.0
    shortfall: float = 0.0
    n_columns: int = 0


class GroupPlanner:
    """One group's look-ahead of ``config`` under ``caps`` on its ``view`` of the scenario
    (a Dask actor, or a plain object in this process)."""

    def __init__(self, view: ScenarioView, config: LookaheadConfig, caps: Caps) -> None:
        self.view = view
        self.policy = LookaheadPolicy.of(config, caps)
        self.policy.reset(view)
        self._kept: KeptPlan | None = None
        self._planned_t = -1

    def set_caps(self, caps: Caps) -> None:
        """The group's caps from now on (a new share of the fleet's carbon budget)."""
        self.policy.caps = caps

    def plan(self, state: SlotState, forecast: Forecast, keep: bool = False) -> GroupReport:
        """Re-plan the window on ``state``'s jobs now (keeping the plan before when
        ``keep``, for :meth:`undo`) and report it."""
        self._kept = self.policy.kept_plan() if keep else None
        if state.t != self._planned_t:
            # The first plan of a slot is solved cold: the basis of a window solved slots
            # ago, mapped onto one with thousands of new jobs, made HiGHS 16x slower than a
            # cold solve (bench/fleet.py, 20 x 2,500 at slot 4: 80 against 5 CPU s); the
            # slot's rounds then re-solve nearly the same window from its basis.
            self.policy.forget_basis()
            self._planned_t = state.t
        self.policy.replan(state, forecast)
        return self._report(state.t)

    def needs(self, state: SlotState) -> tuple[dict[str, float], dict[str, int],
                                                NDArray[np.int64], NDArray[np.int64]]:
        """The window needs and ends of ``state``'s training jobs and the window's blocks
        (starts, lengths), as the group's next window LP would set them (no solve)."""
        need, end = self.policy.window_needs(state)
        bstart, blen = self.policy.window_shape(state)
        return need, end, bstart, blen

    def undo(self) -> GroupReport:
        """Back to the plan kept by the last :meth:`plan`; its report."""
        if self._kept is not None:
            self.policy.restore_plan(self._kept)
            self._kept = None
        plan = self.policy.plan
        return self._report(plan.t0 if plan is not None else 0)

    def decide(self, state: SlotState, forecast: Forecast) -> tuple[Allocation, GroupReport]:
        """The group's allocation (its look-ahead re-plans by its own rules: a period old,
        or new jobs) and its report."""
        alloc = self.policy.decide(state, forecast)
        return alloc, self._report(state.t)

    def _report(self, t: int) -> GroupReport:
        plan = self.policy.plan
        n_p = len(self.view.pools)
        if plan is None or not plan.pool_price.size:
            z = np.zeros(0, dtype=np.int64)
            return GroupReport(z, z, np.zeros((n_p, 0)), np.zeros((n_p, 0)), {}, {}, 0.0,
                               t if plan is None else plan.t0)
        n_b = plan.block_len.size
        used = np.zeros((n_p, n_b))
        pos = {(p.datacenter, p.gpu_type): i for i, p in enumerate(self.view.pools)}
        for (_, b), shares in plan.share.items():
            for (d, g, n), f in shares.items():
                used[pos[(d, g)], b] += f * n * plan.block_len[b]
        return GroupReport(
            plan.block_start, plan.block_len, plan.pool_price, used, plan.need, plan.end,
            plan.carbon_price, plan.t0, plan.cost,
            math.fsum(plan.shortfall.values()), plan.n_columns)
