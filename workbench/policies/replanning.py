"""What the look-ahead notes each slot and when it re-plans (a mixin of
:class:`~workbench.policies.lookahead.LookaheadPolicy`, whose state it reads): the jobs'
moves and arrivals, a cold solve a coordinator asks for, and a plan kept to be restored (a
coordinator undoing a round of :class:`~workbench.policies.grouped.GroupedLookahead`)."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from workbench.policies.base import SlotState
from workbench.policies.window import WindowPlan


class ReplanRules:
    """The look-ahead's slot bookkeeping and re-plan rules (see the module docstring)."""

    plan: WindowPlan | None
    replans: int
    replan_slots: int
    arrival_replan_slots: int | None
    _basis: Any
    _supply_plan: Any
    _planned: dict[int, tuple[float, dict[str, float]]]
    _lp_failed: tuple[int, str]
    _observed_t: int
    _quiet: bool
    _last_arrival: int
    _seen: set[str]
    _where: dict[str, str]
    _moved_at: dict[str, int]
    _eta_num: NDArray[np.float64]
    _eta_den: NDArray[np.float64]

    def _meter_overrun(self, state: SlotState) -> None:
        raise NotImplementedError

    def kept_plan(self) -> tuple[Any, ...]:
        """What a re-plan changes (the plan, its basis and supply plan, what the plan
        emits per slot for the meter, the budget pacing's running sums), for
        :meth:`restore_plan` to undo a re-plan with."""
        return (self.plan, self._basis, self._supply_plan, dict(self._planned), self.replans,
                self._lp_failed, self._eta_num.copy(), self._eta_den.copy())

    def restore_plan(self, kept: tuple[Any, ...]) -> None:
        """Back to the plan :meth:`kept_plan` returned (a coordinator undoing a round)."""
        (self.plan, self._basis, self._supply_plan, planned, self.replans,
         self._lp_failed, eta_num, eta_den) = kept
        self._planned = dict(planned)
        self._eta_num, self._eta_den = eta_num.copy(), eta_den.copy()

    def forget_basis(self) -> None:
        """Solve the next window LP cold (a coordinator re-planning a window that has
        changed too much since its last solve for that basis to help)."""
        self._basis = None

    def _observe(self, state: SlotState) -> bool:
        """Note the slot's jobs (moves, arrivals) and, once per slot, the metered carbon;
        whether no new job arrived in the ``replan_slots`` slots before this one (``quiet``,
        judged at the slot's first call: a coordinator may re-plan a slot more than once)."""
        if self._observed_t != state.t:
            self._observed_t = state.t
            self._quiet = state.t - self._last_arrival > self.replan_slots
            self._meter_overrun(state)
        self._track_moves(state)
        self._track_arrivals(state)
        return self._quiet

    def _replan_for_arrivals(self, state: SlotState, quiet: bool) -> bool:
        """Whether the new jobs of this slot re-plan the window now: with
        ``arrival_replan_slots`` K, once K slots have passed since the last plan; by default,
        when no new job arrived in the ``replan_slots`` slots before this one (``quiet``)."""
        assert self.plan is not None
        if self.arrival_replan_slots is not None:
            return state.t - self.plan.t0 >= self.arrival_replan_slots
        return quiet

    def _track_arrivals(self, state: SlotState) -> None:
        """Note the training jobs first seen in this slot."""
        fresh = [js.job.job_id for js in state.jobs
                 if js.job.is_training and js.job.job_id not in self._seen]
        if fresh:
            self._seen.update(fresh)
            self._last_arrival = state.t

    def _track_moves(self, state: SlotState) -> None:
        """Remember the slot of each job's latest move (its checkpoint changed place)."""
        for js in state.jobs:
            jid = js.job.job_id
            d = js.last_datacenter
            if d is None:
                continue
            prev = self._where.get(jid)
            if prev is not None and prev != d:
                self._moved_at[jid] = state.t - 1
            self._where[jid] = d
