"""The one deadline rule: every job keeps a share ``m`` of its life in hand.

A training job arrives at ``a`` with deadline ``D``; the rule gives it the *planned end*
``D' = D - m (D - a)`` (``m`` = ``deadline_margin``, :data:`DEADLINE_MARGIN_DEFAULT`) and
every planner keeps it through the same three consequences, all defined here:

1. **The window** (:meth:`DeadlineRule.window`): a window that reaches ``D'`` must do all of
   the job's remaining work by ``D'`` (its part of the window ends there); a window short of
   it does what keeps the job on its straight pace line from ``a`` to ``D'``
   (:func:`pace_need`); a job already past ``D'`` (inside its margin) may use the window to
   ``D``. The window LP has no restarts, so a paused job's need carries the work one
   restart loses (:func:`restart_work`).
2. **The slot** (:meth:`DeadlineRule.slot`, the *completion rule* below): a job whose slack
   to ``D'`` runs out is placed by constraint in the slot MILP on an option that still
   finishes it, whatever the plan's prices say.
3. **The fallback's order**: the jobs the slot rule finds urgent come first in the greedy
   fallback (:func:`workbench.optim.fallback.solve_or_greedy`).

The margin covers what the plans do not see exactly: restarts and transfers beyond the one
charged, contention, whole slots, and rates that are estimates (the planning speed of a job
with a predicted profile that has not run yet drops to the slow end of its interval near its
deadline: :func:`workbench.estimate.planning_speed_factor`). It is a share of the job's life,
not of its run time, because the planning speed can fall sharply just before the deadline,
and a margin on the run time falls with it (docs/results.md, section 7).

The completion rule
-------------------

Drift-plus-penalty alone (:mod:`workbench.policies.lyapunov`) keeps its promise on average:
its deadline queue ``Y_j`` grows only once a job has fallen behind, and at a large ``V`` it
must grow to about ``V`` before the job runs, by which time the deadline may be gone; a
window plan may leave a job too late (it waited for a re-plan, or the plan's blocks are
coarse). The rule below is applied in every slot, before the slot MILP.

**Slack.** For a training job ``j`` with a deadline ``T_j`` seconds after the start of the
slot, remaining work ``R_j`` (a fraction of the job), and each of its options ``k``
(datacenter, GPU type, count) with steady rate ``r_k`` (fraction of the work per second, the
online estimate, no losses: :func:`steady_rates`) and ``o_k`` the seconds owed before it makes
progress if it starts on ``k`` now (restart, checkpoint and dataset transfer, a pending
transfer), or ``o'_k`` if it starts in a later slot (``max(o_k, restart_s)`` for a job that
runs now: pausing costs it a restart)::

    run_k   = o_k  + R_j / r_k               seconds to finish when started on k now and kept
    run'_k  = o'_k + R_j / r_k               the same when started in a later slot
    slack_j = T_j - min_k run_k               its slack (s), on the best option it can get
    U_j     = T_j - m (deadline_j - arrival_j)   the time it may plan to use

with the rule's margin ``m`` (``U_j`` is ``D'``, seconds from now). Option ``k`` is
*safe* when ``run_k <= U_j`` (started now and kept, the job finishes with its margin), or,
for a job already inside its margin, ``run_k <= T_j``.

**Reservation (contention).** Slack alone ignores that jobs share pools. The jobs with a
deadline are therefore placed backwards, latest deadline first, on a per-pool timeline of
free GPUs (the pool's size less the GPUs of the inference services): each takes the option
and start slot ``s`` (slots from now) with the fewest GPU-slots ``n_k ceil(run'_k / D)``
(the least capacity; ties: the latest start) among those that fit: ``s D + run'_k <= U_j``
for ``s >= 1``, ``run_k <= U_j`` for ``s = 0``, with ``n_k`` GPUs free in every slot of its
run, started as late as they fit; it reserves those GPUs. A job whose latest start is now
(``s = 0``) cannot wait: it is *urgent*. So is a job that finds no start at all:
*contended* when it could finish (``slack_j >= 0``), *late* when no option finishes it by
its deadline even if it starts now (``slack_j < 0``, e.g. a job that arrives already
infeasible, or a deadline already passed). Jobs without a deadline have no slack and never
become urgent (their only pressure is the queue). A deadline beyond the horizon's end is
kept pro rata: the share of the job's window (arrival to deadline) that lies inside the
horizon is due by its end (:func:`required_share`, what the
hindsight plan must do), so that the horizon's end is not a cliff the work is pushed over.

**Must-run set** (:func:`must_run`). The urgent jobs are packed into the slot, inference
services first: (1) the urgent jobs that can still finish, by slack ascending (the most
urgent get the GPUs first), each on a safe option that fits beside those already packed
(its fewest-GPU one: it leaves the most for the next); (2) on the GPUs that are left, the
urgent jobs that found no safe option (*blocked*) and then the late ones, each on its
fastest option that fits (a late job finishes as early as capacity allows, after every job
that can still be saved). Every packed job must be placed in the slot MILP: one of its safe
options (``sum_k z_k = 1`` over them), or, from step (2), one at least as fast as its packed
one. The packing is a feasible point of that MILP, so it stays feasible, and its objective
(NetCoef) still chooses among the allowed options. An urgent job that fits nowhere (every
allowed pool taken by more urgent jobs and the inference services) waits for this slot and
is named in the log; when capacity cannot save every job, those it cannot save are the least
urgent ones.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from workbench import outcome as _outcome
from workbench.model import Job, Scenario, ScenarioView
from workbench.optim.blocklp import BlockConfig
from workbench.optim.fallback import greedy_choice
from workbench.optim.slot import SlotProblem
from workbench.policies.base import RESTART_S_DEFAULT, JobState, SlotOptions, SlotState

log = logging.getLogger(__name__)

DEADLINE_MARGIN_DEFAULT = 0.1
"""Default margin ``m``: a tenth of a job's life (arrival to deadline) kept in hand."""

_MAX_TIMELINE_SLOTS = 100_000

__all__ = ["DEADLINE_MARGIN_DEFAULT", "DeadlineRule", "Urgency", "check_margin", "horizon_window",
           "job_life_slots", "must_run", "pace_need", "required_share", "restart_work",
           "steady_rates", "urgency"]


def _first_slot_at_or_after(sc: Scenario | ScenarioView, when: object) -> int:
    secs = (when - sc.start).total_seconds()  # type: ignore[operator]
    return max(math.ceil(secs / sc.slot_s - 1e-9), 0)


def required_share(sc: Scenario | ScenarioView, job: Job) -> float:
    """Share of a job's work due within the horizon (what the hindsight bound must do): 1,
    or for a deadline beyond the horizon the part of its window inside it."""
    return horizon_window(sc, job)[2]


def horizon_window(sc: Scenario | ScenarioView, job: Job) -> tuple[int, int, float]:
    """A job's window within the horizon: its first slot, its end slot (exclusive) and the
    share of its work due in it (:func:`required_share`)."""
    a = _first_slot_at_or_after(sc, job.arrival)
    if job.is_training:
        if job.deadline is None:
            return a, sc.n_slots, 1.0
        e = _deadline_slot(sc, job)
        if e <= sc.n_slots:
            return a, max(e, a), 1.0
        share = (sc.n_slots - a) / job_life_slots(sc, job)
        return a, sc.n_slots, float(np.clip(share, 0.0, 1.0))
    assert job.end is not None
    return a, min(_first_slot_at_or_after(sc, job.end), sc.n_slots), 1.0


def job_life_slots(sc: Scenario | ScenarioView, job: Job) -> float:
    """Slots from a training job's first slot to its deadline (``inf`` without one): what
    :func:`horizon_window` shares its work over when the deadline lies beyond the
    horizon."""
    if job.deadline is None:
        return math.inf
    return float(max(_deadline_slot(sc, job) - _first_slot_at_or_after(sc, job.arrival), 1))


def _deadline_slot(sc: Scenario | ScenarioView, job: Job) -> int:
    """The first slot boundary at or before a job's deadline, in slots from the start."""
    assert job.deadline is not None
    return math.floor((job.deadline - sc.start).total_seconds() / sc.slot_s + 1e-9)


@dataclass(frozen=True)
class DeadlineRule:
    """The deadline rule (module docstring): its margin ``m`` (a share of each job's life
    in [0, 1)) and the seconds ``restart_s`` a paused job pays to resume; validated here.
    """

    margin: float = DEADLINE_MARGIN_DEFAULT
    restart_s: float = RESTART_S_DEFAULT

    def __post_init__(self) -> None:
        if not (math.isfinite(self.restart_s) and self.restart_s >= 0):
            raise ValueError(f"restart_s must be >= 0 seconds, got {self.restart_s!r}")
        object.__setattr__(self, "margin", check_margin(self.margin))
        object.__setattr__(self, "restart_s", float(self.restart_s))

    def planned_left(self, sc: ScenarioView, js: JobState, t: int) -> int:
        """Slots from ``t`` to the job's planned end ``D'`` (the horizon's end without a
        deadline; its deadline once ``t`` is past ``D'``), at least 1."""
        job = js.job
        if job.deadline is None:
            return max(sc.n_slots - t, 1)
        end = sc.slot_of(job.deadline - self.margin * (job.deadline - job.arrival))
        if end <= t:
            end = sc.slot_of(job.deadline)
        return max(end - t, 1)

    def window(self, sc: ScenarioView, js: JobState, cfgs: Sequence[BlockConfig], t: int,
               n_win: int) -> tuple[int, float]:
        """Training job ``js``'s part of a window of ``n_win`` slots from ``t``: its end
        (slots from ``t``: the planned end, or the window's) and its need, the work (fraction
        of the job) it must do there (:func:`pace_need`, plus one restart's work for a
        paused job that needs any: the window LP has no restarts)."""
        left = self.planned_left(sc, js, t)
        need = pace_need(js.remaining, sc.slot_of(js.job.arrival), t, left, n_win)
        if need > 0:
            need += restart_work(js, cfgs, self.restart_s, sc.slot_s)
        return int(np.clip(left, 1, n_win)), need

    def slot(self, state: SlotState, opts: SlotOptions, prob: SlotProblem,
             keep: NDArray[np.bool_]
             ) -> tuple[SlotProblem, NDArray[np.bool_], NDArray[np.bool_], NDArray[np.bool_]]:
        """The slot's completion rule: ``prob`` and ``keep`` with the must-run set placed by
        constraint (:func:`must_run`), the must-run set and the urgent jobs (first in the
        greedy fallback)."""
        urg = urgency(state, opts, restart_s=self.restart_s, margin=self.margin)
        prob, keep, forced = must_run(prob, keep, opts.progress, urg)
        return prob, keep, forced, urg.urgent


def pace_need(remaining: float, arrival_slot: int, t: int, left: int, n_win: int) -> float:
    """Work (fraction of the job) a window of ``n_win`` slots from ``t`` must do, ``left``
    slots from ``t`` to the planned end ``D'``: all of it when that falls inside the window,
    else what keeps the job on its straight line from arrival ``a`` to ``D'``:
    ``max(R - (D' - t - W) / (D' - a), 0)``.

    The line is anchored at the arrival: a job that ran ahead of its pace (in the cheap
    hours) needs correspondingly less of the next window. (A rolling share
    ``R * W / (D - t)`` asks for almost the same work at every re-plan however much the
    job just did, so in a cheap stretch it runs on far beyond its pace.)
    """
    if left <= n_win:
        return remaining
    a = min(arrival_slot, t)
    return max(remaining - (left - n_win) / max(t + left - a, 1), 0.0)


def restart_work(js: JobState, cfgs: Sequence[BlockConfig], restart_s: float,
                 slot_s: float) -> float:
    """Work (fraction of the job) paused job ``js`` loses to a restart on its fastest
    configuration, ``restart_s / slot_s * max_k r_k`` (0 for a running job): the window LP
    has no restarts, so a paused job's need carries one."""
    if js.placement is not None:
        return 0.0
    return restart_s / slot_s * max((c.rate for c in cfgs), default=0.0)


@dataclass(frozen=True)
class Urgency:
    """Slack, reservation and safe options of one slot (:func:`urgency`); a job whose
    deadline lies beyond the horizon is judged on the work due by the horizon's end.

    Attributes
    ----------
    slack_s : float array (J,)
        ``slack_j`` in seconds (``inf`` without a deadline, for inference, or without an
        option).
    start_slot : int array (J,)
        Reserved start, slots from now (``-1``: none: no deadline, late or contended).
    urgent : bool array (J,)
        Cannot wait for the next slot (reserved start now, contended or late).
    late : bool array (J,)
        No option finishes it by its deadline even when it starts now (``slack_j < 0``).
    safe : bool array (K,)
        Options that finish their job in time when started now and kept (``run_k <= T_j``).
    run_s : float array (K,)
        ``run_k``: seconds to finish on option ``k`` when started now and kept (``inf`` for
        inference or a zero rate).
    """

    slack_s: NDArray[np.float64]
    start_slot: NDArray[np.int64]
    urgent: NDArray[np.bool_]
    late: NDArray[np.bool_]
    safe: NDArray[np.bool_]
    run_s: NDArray[np.float64]


def check_margin(value: float) -> float:
    """``deadline_margin`` as a float, or ``ValueError`` unless it is in [0, 1)."""
    if not (isinstance(value, int | float) and math.isfinite(value) and 0 <= value < 1):
        raise ValueError(f"deadline_margin must be a share of a job's life in [0, 1) "
                         f"(e.g. 0.1), got {value!r}")
    return float(value)


def steady_rates(state: SlotState, opts: SlotOptions) -> NDArray[np.float64]:
    """Steady rate of each option, fraction of the job's work per second (0 for inference).

    The rate :func:`workbench.outcome.slot_outcome` runs at once the losses are paid, at the
    option's batch: ``r = X(n, m) * s_j * (phi_j + m0) / (phi_j + m) / W_j`` with the online
    throughput scale ``s_j`` and gradient noise scale ``phi_j``.
    """
    if opts.rate_per_s.size == len(opts):
        return opts.rate_per_s.copy()  # slot_options computed it (the same operations)
    sc = state.scenario
    gpn = {(p.datacenter, p.gpu_type): p.gpus_per_node for p in sc.pools}
    rate = np.zeros(len(opts))
    for k in range(len(opts)):
        js = state.jobs[int(opts.job_index[k])]
        job = js.job
        if not job.is_training:
            continue
        g, n = str(opts.gpu_type[k]), int(opts.n_gpus[k])
        prof = sc.profile(job.app, g)
        m, x = _outcome.best_batch(prof, n, gpn[(str(opts.datacenter[k]), g)], js.phi)
        eff = (js.phi + prof.efficiency.m0) / (js.phi + m)
        rate[k] = x * js.throughput_scale * eff / job.work_samples
    return rate


def urgency(state: SlotState, opts: SlotOptions, *, restart_s: float, margin: float
            ) -> Urgency:
    """Slack, the backward reservation and the urgent jobs of this slot (module docstring).

    Parameters
    ----------
    restart_s : float
        Seconds a paused job pays to resume (``o'_k >= restart_s`` for a job running now).
    margin : float
        ``m``: the share of run time kept in hand.
    """
    sc = state.scenario
    slot_s = float(sc.slot_s)
    n_jobs, n_opts = len(state.jobs), len(opts)
    rate = steady_rates(state, opts)
    # Seconds owed before progress if the job starts on the option now: the slot's lost
    # seconds, or, when they fill the slot, the whole transfer plus a restart.
    pending = np.array([js.pending_s for js in state.jobs], dtype=float)
    owed = np.where(opts.lost_s < slot_s - 1e-9, opts.lost_s,
                    opts.transfer_s + pending[opts.job_index] + restart_s) if n_opts else \
        np.zeros(0)
    running = np.array([js.placement is not None for js in state.jobs], dtype=bool)
    owed_later = np.where(running[opts.job_index], np.maximum(owed, restart_s), owed) \
        if n_opts else np.zeros(0)
    remaining = np.array([js.remaining for js in state.jobs], dtype=float)
    deadline_s = np.full(n_jobs, np.inf)
    hand_s = np.zeros(n_jobs)
    for j, js in enumerate(state.jobs):
        job = js.job
        if not job.is_training or job.deadline is None:
            continue
        due, end = remaining[j], job.deadline
        if job.deadline > sc.end:
            # Beyond the horizon: the share of its window inside it is due by the horizon's
            # end, as the hindsight plan counts it (reads only the scenario's clock).
            due = remaining[j] - (1.0 - required_share(sc, job))  # type: ignore[arg-type]
            end = sc.end
            if due <= 0:
                continue
        remaining[j] = due
        deadline_s[j] = (end - state.time).total_seconds()
        hand_s[j] = margin * max((end - job.arrival).total_seconds(), 0.0)
    ok = rate > 0
    work = np.full(n_opts, np.inf)
    work[ok] = remaining[opts.job_index[ok]] / rate[ok]
    run_now = owed + work
    run_later = owed_later + work
    # The time a job may use: to its deadline, less the share of its life kept in hand.
    usable = deadline_s - hand_s
    best_now = np.full(n_jobs, np.inf)
    if n_opts:
        np.minimum.at(best_now, opts.job_index, run_now)
    has_deadline = np.isfinite(deadline_s)
    slack = np.full(n_jobs, np.inf)
    slack[has_deadline] = deadline_s[has_deadline] - best_now[has_deadline]
    late = has_deadline & (slack < 0)
    # Safe: finishes within the usable time; a job already inside its margin, by its deadline.
    in_hand = has_deadline & (best_now > usable)
    limit = np.where(in_hand, deadline_s, usable)
    safe = ok & (run_now <= limit[opts.job_index]) if n_opts else np.zeros(0, dtype=bool)

    # The backward reservation on the per-pool timeline of free GPUs.
    start = np.full(n_jobs, -1, dtype=np.int64)
    cands = np.flatnonzero(has_deadline & ~late)
    if cands.size:
        pool_pos = {(p.datacenter, p.gpu_type): i for i, p in enumerate(sc.pools)}
        pool_k = np.array([pool_pos[(str(d), str(g))] for d, g in
                           zip(opts.datacenter, opts.gpu_type, strict=True)], dtype=np.int64)
        horizon = int(min(math.ceil(float(deadline_s[cands].max()) / slot_s) + 1,
                          _MAX_TIMELINE_SLOTS))
        free = _free_gpus(state, opts, pool_k, horizon)
        order = np.argsort(opts.job_index, kind="stable")
        bounds = np.searchsorted(opts.job_index[order], np.arange(n_jobs + 1))
        for j in cands[np.argsort(-deadline_s[cands], kind="stable")].tolist():
            rows = order[bounds[j]:bounds[j + 1]]
            rows = rows[ok[rows]]
            pick = _latest_start(rows, free, pool_k, opts.n_gpus, run_now, run_later,
                                 float(usable[j]), slot_s)
            if pick is None:
                continue
            s, k, length = pick
            start[j] = s
            free[pool_k[k], s:s + length] -= int(opts.n_gpus[k])
    urgent = late | (has_deadline & (start <= 0))
    run_s = np.where(ok, run_now, np.inf) if n_opts else np.zeros(0)
    return Urgency(slack_s=slack, start_slot=start, urgent=urgent, late=late, safe=safe,
                   run_s=run_s)


def _free_gpus(state: SlotState, opts: SlotOptions, pool_k: NDArray[np.int64],
               horizon: int) -> NDArray[np.int64]:
    """Free GPUs per pool and slot from now, shape ``(pools, horizon)``: the pool's size
    less each inference service's GPUs until it ends (where it runs, or its cheapest
    option for a service not placed yet)."""
    sc = state.scenario
    slot_s = float(sc.slot_s)
    free = np.repeat(np.array([p.count for p in sc.pools], dtype=np.int64)[:, None],
                     horizon, axis=1)
    pool_pos = {(p.datacenter, p.gpu_type): i for i, p in enumerate(sc.pools)}
    for j, js in enumerate(state.jobs):
        job = js.job
        if job.is_training:
            continue
        if js.placement is not None:
            p = pool_pos.get((js.placement.datacenter, js.placement.gpu_type))
            n = int(js.placement.n_gpus)
        else:
            rows = np.flatnonzero(opts.job_index == j)
            if rows.size == 0:
                continue
            k = int(rows[np.argmin(opts.cost[rows])])
            p, n = int(pool_k[k]), int(opts.n_gpus[k])
        if p is None:
            continue
        end = horizon if job.end is None else min(
            horizon, max(math.ceil((job.end - state.time).total_seconds() / slot_s), 0))
        free[p, :end] -= n
    return free


def _latest_start(rows: NDArray[np.int64], free: NDArray[np.int64],
                  pool_k: NDArray[np.int64], n_gpus: NDArray[np.int64],
                  run_now: NDArray[np.float64], run_later: NDArray[np.float64],
                  deadline_s: float, slot_s: float) -> tuple[int, int, int] | None:
    """The latest start over the job's options (ties: fewest GPU-slots) as ``(slot, option,
    slots held)``, or None when no option fits before the deadline."""
    best: tuple[int, int, int, int] | None = None  # (start, -gpu_slots, option, length)
    for k in rows.tolist():
        p, n = int(pool_k[k]), int(n_gpus[k])
        lo = 1
        later = float(run_later[k])
        s_hi = math.floor((deadline_s - later) / slot_s + 1e-9)
        if s_hi >= lo:
            length = max(math.ceil(later / slot_s - 1e-9), 1)
            s = _latest_fit(free[p], n, s_hi, length, lo)
            if s >= lo:
                cand = (s, -n * length, k, length)
                if best is None or (cand[1], cand[0]) > (best[1], best[0]):
                    best = cand
                continue
        if run_now[k] <= deadline_s:
            length = max(math.ceil(float(run_now[k]) / slot_s - 1e-9), 1)
            if int(free[p, :length].min()) >= n:
                cand = (0, -n * length, k, length)
                if best is None or (cand[1], cand[0]) > (best[1], best[0]):
                    best = cand
    return None if best is None else (best[0], best[2], best[3])


def _latest_fit(free_p: NDArray[np.int64], n: int, s_hi: int, length: int, lo: int) -> int:
    """The largest ``s`` in ``[lo, s_hi]`` with ``free_p[s:s + length] >= n`` (-1 if none).

    With ``next_short[i]`` the first slot at or after ``i`` short of ``n`` GPUs, a start
    ``s`` fits when ``next_short[s] >= s + length``.
    """
    span = free_p[lo:s_hi + length]
    if span.size == s_hi + length - lo and int(span.min(initial=n)) >= n:
        return s_hi  # never short of n GPUs: the latest start fits
    at = np.arange(span.size)
    short = np.where(span < n, at, span.size)
    next_short = np.minimum.accumulate(short[::-1])[::-1]
    starts = at[:s_hi - lo + 1]
    fits = np.flatnonzero(next_short[starts] >= starts + length)
    return lo + int(fits[-1]) if fits.size else -1


def must_run(prob: SlotProblem, keep: NDArray[np.bool_], progress: NDArray[np.float64],
             urg: Urgency) -> tuple[SlotProblem, NDArray[np.bool_], NDArray[np.bool_]]:
    """The slot problem with the must-run set placed by constraint (module docstring).

    Parameters
    ----------
    prob : SlotProblem
        The slot MILP; ``must_place`` marks the inference services.
    keep : bool array (K,)
        Options the policy allows (its move filter); a must-run job's options are replaced
        by its allowed ones.
    progress : float array (K,)
        Each option's progress in the slot (fraction of its job).
    urg : Urgency
        From :func:`urgency` on the same options.

    Returns
    -------
    prob : SlotProblem
        ``must_place`` also set for every job of the must-run set.
    keep : bool array (K,)
    forced : bool array (J,)
        The must-run set.
    """
    n_jobs = len(prob.job_ids)
    forced = np.zeros(n_jobs, dtype=bool)
    if not urg.urgent.any():
        return prob, keep, forced
    ji = prob.job_index
    rank = np.empty(n_jobs)
    by_slack = np.lexsort((urg.slack_s, urg.late))
    rank[by_slack] = -np.arange(n_jobs, dtype=float)  # higher = packed first
    infer = prob.must_place[ji] & keep
    saving = urg.urgent & ~urg.late
    # (1) inference, then the jobs that can still finish on a safe option, fewest GPUs first.
    first = infer | (saving[ji] & urg.safe)
    coef1 = np.where(infer, prob.coef, 1.0 + 1.0 / np.maximum(prob.n_gpus, 1))
    pick1 = np.zeros(prob.n_options, dtype=bool)
    pick1[np.flatnonzero(first)[greedy_choice(replace(prob.subset(first), coef=coef1[first]),
                                              priority=rank)]] = True
    placed = np.bincount(ji[pick1], minlength=n_jobs) > 0
    # (2) on what is left (the jobs of (1) pinned to their picks): blocked jobs, then the
    # late ones, fastest option first.
    second = (urg.urgent & ~placed)[ji] & (progress > 0)
    pick2 = np.zeros(prob.n_options, dtype=bool)
    if second.any():
        pmax = np.zeros(n_jobs)
        np.maximum.at(pmax, ji, progress)
        both = pick1 | second
        coef2 = np.where(pick1, 1.0, progress / np.maximum(pmax[ji], 1e-300))
        sub = replace(prob.subset(both), coef=coef2[both], must_place=placed)
        pick2[np.flatnonzero(both)[greedy_choice(sub, priority=rank)]] = True
        pick2 &= second
    forced1 = placed & ~prob.must_place
    forced2 = np.bincount(ji[pick2], minlength=n_jobs) > 0
    forced = forced1 | forced2
    floor = np.zeros(n_jobs)
    if pick2.any():
        floor[ji[pick2]] = progress[pick2]
    allowed = np.where(forced1[ji], urg.safe,
                       forced2[ji] & (progress >= floor[ji] - 1e-12) & (progress > 0))
    waiting = [prob.job_ids[j] for j in np.flatnonzero(urg.urgent & ~forced & ~prob.must_place)]
    if waiting:
        log.debug("completion rule: %d urgent job(s) find no free GPUs this slot: %s",
                  len(waiting), ", ".join(waiting[:5]))
    new_keep = np.where(forced[ji], allowed, keep)
    return replace(prob, must_place=prob.must_place | forced), new_keep, forced
