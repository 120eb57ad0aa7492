"""Carbon budgets paced against the forecast and the meter, for the look-ahead.

**Carbon budgets** (:class:`~workbench.caps.Caps`, for the fleet or per datacenter) are
paced against the forecast and the meter: each window gets the budget left (less what was
metered so far) shared between the window and the rest of the horizon by the least carbon
each must emit (:meth:`BudgetPacer.window_budgets`, :meth:`BudgetPacer.budget_problem`),
never below the window's own least carbon.

- **The work a budget pays for.** Under a budget a window asks of each training job no
  more than what is still due within the horizon (:meth:`BudgetPacer.budget_needs`: for
  a deadline beyond the horizon the share of the job's window inside it, pro rata, as the
  hindsight bound and the deadline rule's slot half count it).
- **A budget that the window keeps anyway** changes nothing: the window's uncapped plan is
  kept when it emits no more than the window's share, so a budget that never binds plans
  exactly as uncapped.
- **A budget that binds** adds one carbon row per budget whose slack (kg above it) is
  priced at the window's average price of a kg cut, ``lambda_bar`` (between its
  least-cost and least-carbon plans, :func:`abatement_price`): the window cuts to its
  share wherever a kg costs less than that. The rows' duals ``lambda_d <= lambda_bar``
  (currency per kg) join ``q`` in the slot decision. A budget that cannot be kept thus
  buys the cuts that cost what the window's cuts cost on average, never the last
  kilograms of the least-carbon plan at any price (measured: ``docs/results.md``, caps).
- **The meter.** ``phi``, the metered carbon over what the plans would have emitted for the
  work actually done (:meth:`BudgetPacer.meter_overrun`), scales the budget left into
  the plan's kilograms.
"""


from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
from numpy.typing import NDArray

from workbench.caps import Caps
from workbench.forecast import Forecast
from workbench.model import ScenarioView
from workbench.optim import blocklp
from workbench.optim.blockdata import exact_dot
from workbench.policies.base import JobState, SlotState
from workbench.policies.deadlines import (
    horizon_window,
    job_life_slots,
    required_share,
    restart_work,
)
from workbench.units import G_PER_KG

SHORT_WEIGHT = 1e3
"""Shortfall and carbon-slack weight factor of the look-ahead's window LPs."""


@dataclass(frozen=True)
class WindowEnd:
    """A window plan's carbon per budget group (kg, the balanced sites' included) and its
    cost (currency: the columns' ``c_x``, moves and supply): a point of the window's
    cost-carbon frontier."""

    carbon_kg: NDArray[np.float64]
    cost: float

    @staticmethod
    def of(prob: blocklp.BlockProblem, sol: blocklp.BlockSolution,
           group_x: NDArray[np.int64], n_groups: int) -> WindowEnd:
        """The point of plan ``sol`` of ``prob``, ``group_x`` each column's budget group."""
        sel = group_x >= 0
        kg = np.bincount(group_x[sel], weights=(prob.carbon_kg * sol.x)[sel],
                         minlength=n_groups).astype(float)
        cost = exact_dot(prob.cost, sol.x)
        if prob.moves is not None:
            cost += exact_dot(prob.moves.cost, sol.move)
        if prob.supply is not None and sol.supply is not None:
            kg += sol.supply.carbon_kg_by_group(prob.supply, n_groups)
            cost += sol.supply.cost(prob.supply)
        return WindowEnd(carbon_kg=kg, cost=cost)


def least_carbon_plan(prob: blocklp.BlockProblem, time_limit_s: float,
                      presolve: bool | None = None) -> blocklp.BlockSolution:
    """The window's least-carbon plan that does the work ``prob`` asks (its carbon rows, if
    any, left out of the objective): the LP with ``c_x = g_x + eps c_x``, moves at ``eps``
    their cost, and the shortfall weighing more than any column's carbon for the work.

    Raises RuntimeError when HiGHS does not solve it.
    """
    tr = ~prob.must_run[prob.job] if prob.n_x else np.zeros(0, dtype=bool)
    eps = 1e-6 * float(prob.carbon_kg.sum()) / max(float(prob.cost.sum()), 1e-12)
    moves = prob.moves
    lp = replace(prob, cost=prob.carbon_kg + eps * prob.cost,
                 shortfall_weight=blocklp.penalty_weight(
                     prob.carbon_kg[tr] / np.maximum(prob.rate[tr], 1e-12), SHORT_WEIGHT),
                 moves=None if moves is None else replace(moves, cost=eps * moves.cost))
    sol = blocklp.solve_block_problem(lp, time_limit_s=time_limit_s, presolve=presolve)
    if not (sol.optimal and sol.complete):
        raise RuntimeError(f"least-carbon window LP not solved: HiGHS {sol.status}")
    return sol


def abatement_price(cheapest: WindowEnd, cleanest: WindowEnd) -> float:
    """A window's average price of a kg cut (currency/kg): what its least-carbon plan
    costs more than its least-cost plan per kg it emits less::

        lambda_bar = max(C_L - C_U, 0) / sum_g (U_g - L_g)

    0 when the window cannot cut its carbon."""
    cut = float(np.sum(cheapest.carbon_kg - cleanest.carbon_kg))
    return max(cleanest.cost - cheapest.cost, 0.0) / cut if cut > 1e-9 else 0.0


@dataclass
class PacePlan:
    """What the window plans said, for the pacing (undone with a re-plan): per slot of each
    plan's first re-plan period what it emits whatever the work and each training job's kg
    per unit of work (:meth:`BudgetPacer.note_plan`), and the running sums of ``eta``, the
    windows' least carbon above their services' over their estimated training demand per
    budget group (:meth:`BudgetPacer.budget_problem`)."""

    planned: dict[int, tuple[float, dict[str, float]]]
    eta_num: NDArray[np.float64]
    eta_den: NDArray[np.float64]

    @staticmethod
    def empty(n_groups: int) -> PacePlan:
        """No plan yet, ``n_groups`` budget groups."""
        return PacePlan(planned={}, eta_num=np.zeros(n_groups), eta_den=np.zeros(n_groups))

    def copy(self) -> PacePlan:
        """A copy that later plans do not change."""
        return PacePlan(planned=dict(self.planned), eta_num=self.eta_num.copy(),
                        eta_den=self.eta_den.copy())


@dataclass
class PaceMeter:
    """What the pacing has observed (never undone): each training job's least carbon when
    first seen and its budget group (the demand arrivals brought), the jobs' remaining work
    and the metered carbon at the last slot, and the sums of ``phi`` (metered kg, planned
    kg; :meth:`BudgetPacer.meter_overrun`)."""

    seen_kg: dict[str, tuple[int, float, float]] = field(default_factory=dict)
    remaining: dict[str, float] = field(default_factory=dict)
    overrun: list[float] = field(default_factory=lambda: [0.0, 0.0])
    last_kg: float = 0.0


class BudgetPacer:
    """The look-ahead's carbon-budget pacing (see the module docstring) on scenario ``sc``:
    what it observed (:class:`PaceMeter`) and what the plans said (:class:`PacePlan`).

    ``restart_s`` (seconds lost on a restart), ``carbon_first``, ``time_limit_s`` and
    ``presolve`` are the look-ahead's (:class:`~workbench.policies.lookahead.
    LookaheadConfig`); the caps are passed to each call (a coordinator may change them).
    """

    def __init__(self, sc: ScenarioView, caps: Caps, *, restart_s: float, carbon_first: bool,
                 time_limit_s: float, presolve: bool) -> None:
        self.sc = sc
        self.restart_s = restart_s
        self.carbon_first = carbon_first
        self.time_limit_s = time_limit_s
        self.presolve = presolve
        self.meter = PaceMeter()
        self.plans = PacePlan.empty(len(caps.carbon_scopes()) if caps.has_carbon else 0)

    def window_budgets(
        self, state: SlotState, forecast: Forecast, jobs: list[JobState],
        cfgs: list[list[blocklp.BlockConfig]], need: NDArray[np.float64],
        ends: NDArray[np.int64], n_win: int, caps: Caps,
    ) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64],
               NDArray[np.float64]] | None:
        """What the window's carbon budgets are made of: per datacenter its budget group
        (-1: none) and per group the budget left (kg), the window's least-carbon demand
        ``D_w`` and the rest's ``D_a`` (kg, the forecast's estimate; each ``(2, groups)``:
        row 0 the inference services, which run every slot they are up, row 1 the training
        jobs, whose work can move to cleaner hours); None without a budget.
        :meth:`budget_problem` makes the budgets from them.

        Each budget's remainder ``B - E`` (``E`` the carbon metered so far in its scope) is
        to be shared between the window and the rest of the horizon in proportion to the
        least carbon each must emit, estimated at the forecast's mean intensities ``cbar``
        (window; after it)::

            D_w = sum_j need_j * k_j  + sum_i s_i^w * e_i       (training j, inference i)
            D_a = sum_j max(due_j - need_j, 0) * k'_j + sum_i s_i^a * e'_i + U
            U   = the least carbon of the jobs still to come due within the horizon
                  (:meth:`to_come`)

        with ``k_j = min_c E_c cbar_{d_c} / r_c`` the least kg per whole job of work,
        ``due_j`` the work due within the horizon (all of it, or pro rata of its window
        for a deadline beyond it), ``s_i`` a service's slots and ``e_i`` its least kg per
        slot; each job's demand counts in the group of its least-carbon datacenter. The
        window's share thus follows the work it must do, not the clock (a burst of jobs
        gets the budget it needs; a quiet window little), and every window gets the same
        share of its least carbon: a tight budget binds alike everywhere. Jobs still to
        come join ``D_a`` over every slot still to come, those of the window included
        (:meth:`to_come`: the jobs seen so far arriving again at the rate they came, each
        owing what its life leaves due within the horizon): a job that arrives during the
        window is in none of the window's plans, so its carbon is reserved with the rest's
        (the window's last plans before the horizon's end would otherwise take the budget
        of the jobs still to arrive in them). The policy sees no future arrival, and a burst
        looks like the start of a stream until it ends. Without demand, the time share
        ``n_win / slots left``.
        """
        sc = self.sc
        dcs = [dc.name for dc in sc.datacenters]
        groups = caps.carbon_groups(dcs)
        if groups is None:
            return None
        group_of, cap = groups
        ridx = [forecast.region_index(dc.region) for dc in sc.datacenters]
        fc = np.asarray(forecast.carbon_g_per_kwh, dtype=float)[:, ridx] / G_PER_KG
        c_win = fc[:n_win].mean(axis=0)
        c_after = fc[n_win:].mean(axis=0) if fc.shape[0] > n_win else c_win
        t = state.t
        # Row 0 the inference services (placed every slot), row 1 the training jobs.
        d_win = np.zeros((2, cap.size))
        d_after = np.zeros((2, cap.size))
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
                w_amt, a_amt = need[j], max(self.horizon_due(js) - need[j], 0.0)
            else:
                assert js.job.end is not None
                kw, ka = e * c_win[dc], e * c_after[dc]
                stop = min(sc.slot_of(js.job.end), sc.n_slots) - t
                w_amt, a_amt = float(ends[j]), float(max(stop - ends[j], 0))
            gw, ga = group_of[dc[int(np.argmin(kw))]], group_of[dc[int(np.argmin(ka))]]
            kind = int(js.job.is_training)
            if gw >= 0:
                d_win[kind, gw] += w_amt * float(np.min(kw))
            if ga >= 0:
                d_after[kind, ga] += a_amt * float(np.min(ka))
            if js.job.is_training and jid not in self.meter.seen_kg:
                # Its demand due within the horizon when first seen (what arrivals have
                # brought so far) and its life in slots (what a job like it arriving later
                # would owe within the horizon).
                _, _, share = horizon_window(sc, js.job)
                whole = (w_amt + a_amt) / share if share > 1e-9 else 0.0
                self.meter.seen_kg[jid] = (int(ga), whole * float(np.min(ka)),
                                           job_life_slots(sc, js.job))
        if caps.carbon_kg_by_dc:
            spent = np.array([float(state.carbon_kg_by_dc_so_far.get(d, 0.0))
                              for d, g in zip(dcs, group_of.tolist(), strict=True) if g >= 0])
        else:
            spent = np.array([float(state.carbon_kg_so_far)])
        left = np.maximum(cap - spent, 0.0)
        d_after[1] += self.to_come(t, cap.size)
        return group_of, left, d_win, d_after

    def to_come(self, t: int, n_groups: int) -> NDArray[np.float64]:
        """The least carbon of the jobs still to arrive after slot ``t`` that falls due
        within the horizon, per budget group (kg): the jobs seen so far stand for those to
        come, each arriving again in every slot to come at the rate they arrived (one per
        ``t + 1`` slots), owing within the horizon what its life allows::

            to_come = sum_j k_j / (t + 1) * sum_{s = t+1}^{N-1} min(1, (N - s) / L_j)

        ``k_j`` job ``j``'s whole least carbon (its demand due within the horizon over its
        share of work due there, when first seen), ``L_j`` its life in slots (arrival to
        deadline; without a deadline all its work is due: the min is 1). A job arriving
        near the horizon's end owes only the part of its window inside it, as the bound and
        the deadline rule count it; at first the rate comes from a few slots (an early
        over-reserve costs a few hours at least carbon).
        """
        out = np.zeros(n_groups)
        seen = self.meter.seen_kg
        if not seen:
            return out
        n = self.sc.n_slots
        group, kg, life = (np.array(v, dtype=float) for v in zip(*seen.values(), strict=True))
        k_left = max(n - t - 1, 0)  # slots to come: N - s runs over 1 .. k_left
        # sum_{k=1}^{K} min(1, k / L) = m (m + 1) / (2 L) + (K - m), m = min(K, floor(L)).
        m = np.minimum(k_left, np.floor(np.where(np.isfinite(life), life, 0.0)))
        owed = np.where(np.isfinite(life),
                        m * (m + 1) / (2 * np.maximum(life, 1.0)) + (k_left - m), k_left)
        ok = group >= 0
        np.add.at(out, group[ok].astype(np.int64), (kg * owed)[ok] / (t + 1))
        return out

    def budget_parts(
        self, state: SlotState, forecast: Forecast, jobs: list[JobState],
        cfgs: list[list[blocklp.BlockConfig]], need: NDArray[np.float64],
        ends: NDArray[np.int64], n_win: int, caps: Caps,
    ) -> tuple[NDArray[np.float64] | None, tuple[NDArray[np.int64], NDArray[np.float64],
                                                 NDArray[np.float64], NDArray[np.float64]]
               | None]:
        """Under a carbon budget, the window's budget needs (:meth:`budget_needs`) and what
        its budgets are made of (:meth:`window_budgets`, from those needs); (None, None)
        without one."""
        if not caps.has_carbon:
            return None, None
        need_b = self.budget_needs(jobs, cfgs, need)
        return need_b, self.window_budgets(state, forecast, jobs, cfgs, need_b, ends, n_win,
                                            caps)

    def budget_needs(self, jobs: list[JobState], cfgs: list[list[blocklp.BlockConfig]],
                      need: NDArray[np.float64]) -> NDArray[np.float64]:
        """The work (fraction of each job) a window may ask under a carbon budget: the
        look-ahead's ``need`` (its pace line, a paused job's restart included), at most
        what is still due within the horizon (:meth:`horizon_due`, a paused job's restart
        on top), nothing when nothing is due. The budget is the horizon's: work due after
        it (the part of a job's window beyond the horizon, pro rata as the hindsight bound
        and the completion rule count it) is not spent on it. 0 for inference services."""
        out = np.zeros(len(jobs))
        for j, (js, cf) in enumerate(zip(jobs, cfgs, strict=True)):
            if js.job.is_training:
                due = self.horizon_due(js)
                lost = restart_work(js, cf, self.restart_s, self.sc.slot_s)
                out[j] = min(need[j], due + lost) if due > 0 else 0.0
        return out

    def budget_problem(
        self, prob: blocklp.BlockProblem, free: blocklp.BlockSolution,
        parts: tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64],
                     NDArray[np.float64]],
        dc_x: NDArray[np.int64], need: NDArray[np.float64], time_share: float,
    ) -> blocklp.BlockProblem | None:
        """The window LP under the carbon budgets, or None when the uncapped plan ``free``
        (of ``prob``) keeps the window's share of every budget: the window then plans as
        if uncapped.

        ``parts`` are :meth:`window_budgets`'s (each datacenter's group, the budget left
        and the demand estimates), ``dc_x`` each column's datacenter, ``need`` the work
        rows' budget needs (:meth:`budget_needs`). The window's budget is its own least
        carbon ``L_w`` (:func:`least_carbon_plan` with those needs: capacity, moves and
        what each job may use included) and the rest's demand, its training part scaled
        by the ratio seen so far of the windows' least carbon above their services' to
        their training estimate (``eta``: what moving work to cleaner hours takes off, and
        contention and the configurations a job may use add to, the estimate at mean
        intensities; the services run when they are up, so their estimate stands)::

            eta = sum_w max(L_w - D_w^services, 0) / sum_w D_w^training
            B_w = max(left / phi * L_w / (L_w + D_a^services + eta * D_a^training), L_w)

        never below ``L_w``: what a window overspends comes out of later windows' ``left``;
        without demand, ``left / phi * time_share``. ``phi`` is the ratio so far of the
        metered carbon to what the plans would have emitted for the same work (in
        [1, 1.5], :meth:`meter_overrun`): what the plan does not see comes out of the
        budget too.

        When ``free`` exceeds ``B_w`` in a group, the LP gets the budget rows with their
        slack ``s`` (kg above the budget) priced at the window's average price of a kg cut
        ``lambda_bar`` (:func:`abatement_price`, between its least-cost and least-carbon
        plans with the budget needs): the window cuts its carbon to the budget wherever a
        kg costs less than that, and no further. The rows' duals, the price of a kg in the
        slot decision, are therefore at most ``lambda_bar``: a budget that cannot be kept,
        or only by the last and dearest kilograms of the window's frontier, buys the cuts
        that cost what the window's cuts cost on average, not the least carbon at any
        price. With ``carbon_first`` (a budget below the least carbon achievable) the slack
        keeps the LP's own weight, a thousand times the dearest kg: the window buys its
        least carbon at any price. The shortfall still weighs more than any column's work at
        its cost and carbon price (work before kilograms).
        """
        group_of, left, d_win, d_rest = parts
        group_x = group_of[dc_x]
        n_g = left.size
        probe = replace(prob, need=need)
        cleanest = WindowEnd.of(probe, least_carbon_plan(probe, self.time_limit_s,
                                                         self.presolve), group_x, n_g)
        least = cleanest.carbon_kg
        got, planned = self.meter.overrun
        phi = float(np.clip(got / planned, 1.0, 1.5)) if planned > 1e-9 else 1.0
        plans = self.plans
        plans.eta_num += np.maximum(least - d_win[0], 0.0)
        plans.eta_den += d_win[1]
        eta = np.where(plans.eta_den > 1e-12, plans.eta_num / np.maximum(plans.eta_den, 1e-12),
                       1.0)
        total = least + d_rest[0] + eta * d_rest[1]
        share = np.where(total > 1e-12, least / np.maximum(total, 1e-12), time_share)
        kg = np.maximum(left / phi * share, least * (1 + 1e-6) + 1e-9)
        if np.all(WindowEnd.of(prob, free, group_x, n_g).carbon_kg <= kg):
            return None
        if self.carbon_first:
            lbar = prob.carbon_slack_weight
        else:
            cheap = blocklp.solve_block_problem(probe, time_limit_s=self.time_limit_s,
                                                presolve=self.presolve)
            if not (cheap.optimal and cheap.complete):
                raise RuntimeError(f"least-cost window LP not solved: HiGHS {cheap.status}")
            lbar = abatement_price(WindowEnd.of(probe, cheap, group_x, n_g), cleanest)
        tr = ~prob.must_run[prob.job] if prob.n_x else np.zeros(0, dtype=bool)
        short = max(prob.shortfall_weight, blocklp.penalty_weight(
            (prob.cost[tr] + lbar * prob.carbon_kg[tr]) / np.maximum(prob.rate[tr], 1e-12),
            SHORT_WEIGHT))
        return replace(probe, carbon_group=group_x, carbon_cap_kg=kg,
                       carbon_slack_weight=lbar, shortfall_weight=short)

    def horizon_due(self, js: JobState) -> float:
        """Work of training job ``js`` still due within the horizon, ``max(R - (1 - s), 0)``
        with ``s`` its :func:`~workbench.policies.deadlines.required_share` (the share of its
        window inside the horizon)."""
        return max(js.remaining - (1.0 - required_share(self.sc, js.job)), 0.0)

    # -- the meter against the plan ---------------------------------------------------
    def note_plan(self, t: int, jobs: list[JobState], prob: blocklp.BlockProblem,
                   x: NDArray[np.float64], carb_x: NDArray[np.float64], period: int) -> None:
        """Keep, for each slot of the plan's first ``period`` slots, what the plan emits in
        it whatever the work (the inference services' kg per slot) and each training job's
        kg per unit of work over the period (``carb_x`` the columns' carbon per slot run, at
        the forecast's intensities): :meth:`meter_overrun` compares the meter with them."""
        blen = prob.block_len
        bstart = np.concatenate([[0], np.cumsum(blen)[:-1]])
        inside = bstart[prob.block] < period
        fixed = prob.must_run[prob.job] & inside
        per_block = np.bincount(prob.block[fixed], weights=(carb_x * x)[fixed],
                                minlength=blen.size) / blen
        tr = ~prob.must_run[prob.job] & inside & (x > 0)
        kg = np.bincount(prob.job[tr], weights=(carb_x * x)[tr], minlength=len(jobs))
        work = np.bincount(prob.job[tr], weights=(prob.rate * x)[tr], minlength=len(jobs))
        per_work = {jobs[j].job.job_id: float(kg[j] / work[j])
                    for j in np.flatnonzero(work > 1e-12).tolist()}
        for b in np.flatnonzero(bstart < period).tolist():
            for k in range(int(blen[b])):
                self.plans.planned[t + int(bstart[b]) + k] = (float(per_block[b]), per_work)

    def meter_overrun(self, state: SlotState, caps: Caps) -> None:
        """Add the last slot's metered carbon and what the plan would have emitted for the
        work actually done in it to the sums of ``phi`` (the restarts, transfers, integral
        choices and forecast errors the window LP does not see)::

            planned = F + sum_j k_j * w_j

        ``F`` the plan's kg of the inference services in the slot, ``k_j`` its kg per unit
        of job ``j``'s work, ``w_j`` the work the job did (progress, from its remaining
        work before and after). Work done earlier or later than the plan said is no
        overrun: it is charged at the plan's own kg per unit. A slot in which a job ran
        that the plan gave no work is not counted."""
        if not caps.has_carbon:
            return
        rec = self.plans.planned.pop(state.t - 1, None)
        metered = state.carbon_kg_so_far - self.meter.last_kg
        self.meter.last_kg = state.carbon_kg_so_far
        now = {js.job.job_id: js.remaining for js in state.jobs if js.job.is_training}
        done = {j: r - now.get(j, 0.0) for j, r in self.meter.remaining.items()}
        self.meter.remaining = now
        if rec is None:
            return
        fixed, per_work = rec
        ran = {j: w for j, w in done.items() if w > 1e-12}
        if any(j not in per_work for j in ran):
            return
        planned = fixed + sum(per_work[j] * w for j, w in ran.items())
        if planned > 0:
            self.meter.overrun[0] += metered
            self.meter.overrun[1] += planned
