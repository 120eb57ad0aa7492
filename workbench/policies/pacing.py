"""Carbon budgets paced against the forecast and the meter, for the look-ahead.

**Carbon budgets** (:class:`~workbench.caps.Caps`, for the fleet or per datacenter) are
paced against the forecast and the meter: one carbon row per budget whose cap is the
budget left (less what was metered so far) shared between the window and the rest of the
horizon by the least carbon each must emit (:meth:`BudgetPacing._window_budgets`,
:meth:`BudgetPacing._share_budgets`), never below the window's own least carbon; the
shortfall then outweighs the carbon slack (work before kilograms before cost), so a
budget that cannot be kept buys the least carbon that does the work, never work deferred
to a dirtier window. The rows' duals ``lambda_d`` (currency per kg) join ``q`` in the slot
decision below.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from workbench.caps import Caps
from workbench.forecast import Forecast
from workbench.model import ScenarioView
from workbench.optim import blocklp
from workbench.policies.base import JobState, SlotState

SHORT_WEIGHT = 1e3
"""Shortfall and carbon-slack weight factor of the look-ahead's window LPs."""


def least_window_carbon(prob: blocklp.BlockProblem, group_x: NDArray[np.int64], n_groups: int,
                         time_limit_s: float) -> NDArray[np.float64]:
    """The least carbon per budget group with which the window LP ``prob`` (no carbon rows)
    does its work: the LP with ``c_x = g_x + eps c_x``, moves at ``eps`` their cost, and the
    shortfall weighing more than any column's carbon for the work.

    Raises RuntimeError when HiGHS does not solve it.
    """
    tr = ~prob.must_run[prob.job] if prob.n_x else np.zeros(0, dtype=bool)
    eps = 1e-6 * float(prob.carbon_kg.sum()) / max(float(prob.cost.sum()), 1e-12)
    moves = prob.moves
    lp = replace(prob, cost=prob.carbon_kg + eps * prob.cost,
                 shortfall_weight=blocklp.penalty_weight(
                     prob.carbon_kg[tr] / np.maximum(prob.rate[tr], 1e-12), SHORT_WEIGHT),
                 moves=None if moves is None else replace(moves, cost=eps * moves.cost))
    sol = blocklp.solve_block_problem(lp, time_limit_s=time_limit_s)
    if not (sol.optimal and sol.complete):
        raise RuntimeError(f"least-carbon window LP not solved: HiGHS {sol.status}")
    sel = group_x >= 0
    return np.bincount(group_x[sel], weights=(prob.carbon_kg * sol.x)[sel],
                       minlength=n_groups).astype(float)


class BudgetPacing:
    """The look-ahead's carbon-budget pacing (a mixin of
    :class:`~workbench.policies.lookahead.LookaheadPolicy`, whose state it reads)."""

    caps: Caps
    time_limit_s: float
    _sc: ScenarioView | None
    _overrun: list[float]
    _eta_num: NDArray[np.float64]
    _eta_den: NDArray[np.float64]
    _seen_kg: dict[str, tuple[int, float]]
    _planned_kg: dict[int, float]
    _last_kg: float

    def _slot_index(self, when: Any) -> int:
        raise NotImplementedError

    def _reset_pacing(self) -> None:
        """Forget what was emitted, planned and learnt of the budgets (at ``reset``)."""
        self._seen_kg = {}
        self._planned_kg = {}
        self._overrun = [0.0, 0.0]
        self._last_kg = 0.0
        n_g = len(self.caps.carbon_scopes()) if self.caps.has_carbon else 0
        self._eta_num = np.zeros(n_g)
        self._eta_den = np.zeros(n_g)

    def _window_budgets(
        self, state: SlotState, forecast: Forecast, jobs: list[JobState],
        cfgs: list[list[blocklp.BlockConfig]], need: NDArray[np.float64],
        ends: NDArray[np.int64], n_win: int,
    ) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64],
               NDArray[np.float64]] | None:
        """What the window's carbon budgets are made of: per datacenter its budget group
        (-1: none) and per group the budget left (kg), the window's least-carbon demand
        ``D_w`` and the rest's ``D_a`` (kg, the forecast's estimate); None without a
        budget. :meth:`_share_budgets` makes the budgets from them.

        Each budget's remainder ``B - E`` (``E`` the carbon metered so far in its scope) is
        to be shared between the window and the rest of the horizon in proportion to the
        least carbon each must emit, estimated at the forecast's mean intensities ``cbar``
        (window; after it)::

            D_w = sum_j need_j * k_j  + sum_i s_i^w * e_i       (training j, inference i)
            D_a = sum_j max(due_j - need_j, 0) * k'_j + sum_i s_i^a * e'_i + U
            U   = (sum of the demand seen so far) / (t + 1) * (slots after the window)

        with ``k_j = min_c E_c cbar_{d_c} / r_c`` the least kg per whole job of work,
        ``due_j`` the work due within the horizon (all of it, or pro rata of its window
        for a deadline beyond it), ``s_i`` a service's slots and ``e_i`` its least kg per
        slot; each job's demand counts in the group of its least-carbon datacenter. The
        window's share thus follows the work it must do, not the clock (a burst of jobs
        gets the budget it needs; a quiet window little), and every window gets the same
        share of its least carbon: a tight budget binds alike everywhere. Jobs still to
        come join ``D_a`` as the training demand arrived so far per slot (each job's whole
        least carbon when first seen, from the horizon's start) times the slots after the
        window: the policy sees no future arrival, and a burst looks like the start of a
        stream until it ends. Without demand, the time share ``n_win / slots left``.
        """
        sc = self._sc
        assert sc is not None
        dcs = [dc.name for dc in sc.datacenters]
        groups = self.caps.carbon_groups(dcs)
        if groups is None:
            return None
        group_of, cap = groups
        ridx = [forecast.region_index(dc.region) for dc in sc.datacenters]
        fc = np.asarray(forecast.carbon_g_per_kwh, dtype=float)[:, ridx] / 1000.0
        c_win = fc[:n_win].mean(axis=0)
        c_after = fc[n_win:].mean(axis=0) if fc.shape[0] > n_win else c_win
        t = state.t
        d_win = np.zeros(cap.size)
        d_after = np.zeros(cap.size)
        for j, (js, cf) in enumerate(zip(jobs, cfgs, strict=True)):
            if not cf:
                continue
            jid = js.job.job_id
            e = np.array([c.energy_kwh for c in cf])
            dc = np.array([c.dc for c in cf], dtype=np.int64)
            if js.job.is_training:
                r = np.array([c.rate for c in cf]) * js.throughput_scale
                ok = r > 0
                if not ok.any():
                    continue
                kw = np.where(ok, e * c_win[dc] / np.maximum(r, 1e-12), np.inf)
                ka = np.where(ok, e * c_after[dc] / np.maximum(r, 1e-12), np.inf)
                dl = (sc.n_slots if js.job.deadline is None
                      else self._slot_index(js.job.deadline))
                due = js.remaining * (1.0 if dl <= sc.n_slots
                                      else (sc.n_slots - t) / max(dl - t, 1))
                w_amt, a_amt = need[j], max(due - need[j], 0.0)
            else:
                assert js.job.end is not None
                kw, ka = e * c_win[dc], e * c_after[dc]
                stop = min(self._slot_index(js.job.end), sc.n_slots) - t
                w_amt, a_amt = float(ends[j]), float(max(stop - ends[j], 0))
            gw, ga = group_of[dc[int(np.argmin(kw))]], group_of[dc[int(np.argmin(ka))]]
            if gw >= 0:
                d_win[gw] += w_amt * float(np.min(kw))
            if ga >= 0:
                d_after[ga] += a_amt * float(np.min(ka))
            if js.job.is_training and jid not in self._seen_kg:
                # Its whole demand when first seen: what arrivals have brought so far.
                self._seen_kg[jid] = (int(ga), (w_amt + a_amt) * float(np.min(ka)))
        if self.caps.carbon_kg_by_dc:
            spent = np.array([float(state.carbon_kg_by_dc_so_far.get(d, 0.0))
                              for d, g in zip(dcs, group_of.tolist(), strict=True) if g >= 0])
        else:
            spent = np.array([float(state.carbon_kg_so_far)])
        left = np.maximum(cap - spent, 0.0)
        # Jobs still to come, extrapolated from the demand arrived so far per slot (at
        # first from a few slots: an early over-reserve costs a few hours at least carbon).
        seen = np.zeros(cap.size)
        for g, kg in self._seen_kg.values():
            if g >= 0:
                seen[g] += kg
        to_come = seen / (t + 1) * max(sc.n_slots - t - n_win, 0)
        return group_of, left, d_win, d_after + to_come

    def _share_budgets(self, prob: blocklp.BlockProblem, group_x: NDArray[np.int64],
                       left: NDArray[np.float64], d_win: NDArray[np.float64],
                       d_rest: NDArray[np.float64], time_share: float) -> NDArray[np.float64]:
        """The window's budget per group, kg: the window's own least carbon ``L_w`` (the
        window LP minimising carbon: capacity, moves and what each job may use included)
        and the rest's demand scaled by the ratio seen so far of ``L_w`` to ``D_w``
        (``eta``: what contention and the configurations a job may use add to the
        estimate)::

            B_w = max(left * L_w / (L_w + eta * D_a), L_w)

        never below ``L_w``: a budget the window cannot keep buys its least carbon (the
        work is done, never deferred), and what it overspends comes out of later windows'
        ``left``. Without demand, ``left * time_share``. ``left`` is first divided by
        ``phi``, the ratio so far of metered carbon to the carbon the plans gave the same
        slots (in [1, 1.5]): what the plan does not see comes out of the budget too.
        """
        least = least_window_carbon(prob, group_x, left.size, self.time_limit_s)
        # The window plans in LP kilograms, the meter charges more: budget in LP units.
        got, planned = self._overrun
        phi = float(np.clip(got / planned, 1.0, 1.5)) if planned > 1e-9 else 1.0
        left = left / phi
        self._eta_num += least
        self._eta_den += d_win
        eta = np.where(self._eta_den > 1e-12, self._eta_num / np.maximum(self._eta_den, 1e-12),
                       1.0)
        total = least + eta * d_rest
        share = np.where(total > 1e-12, least / np.maximum(total, 1e-12), time_share)
        return np.maximum(left * share, least * (1 + 1e-6) + 1e-9)


    # -- the decision --------------------------------------------------------------------
    def _meter_overrun(self, state: SlotState) -> None:
        """Add the last slot's metered carbon and the carbon the plan gave it to the sums of
        ``phi = metered / planned`` (the restarts, transfers, integral choices and forecast
        errors the window LP does not see)."""
        if not self.caps.has_carbon:
            return
        planned = self._planned_kg.pop(state.t - 1, None)
        metered = state.carbon_kg_so_far - self._last_kg
        self._last_kg = state.carbon_kg_so_far
        if planned is not None and planned > 0:
            self._overrun[0] += metered
            self._overrun[1] += planned
