"""Receding-horizon look-ahead: plan every arrived job jointly over the forecast window.

Every ``replan_slots`` slots (and whenever a job arrives that the plan does not know), an LP
over the next ``window_h`` hours of the forecast plans all waiting and running jobs together,
sharing pool capacity, power caps and the carbon budget among them. The LP is the block LP
of :mod:`workbench.optim.blocklp` (its rows and their maths there), with this data:

- blocks ``b``: the first ``fine_slots`` slots one by one, then ``block_slots`` slots per
  block (:func:`~workbench.policies.window.window_blocks`; coarser when the model would
  exceed ``max_columns``);
- columns ``x[j,b,k]`` for the configurations ``k`` of each job
  (:func:`workbench.policies.problems.job_configs`, rates scaled by the job's online
  throughput estimate) where its data are or can be moved over a link, weighted
  ``c_x = E_k (p[b,d_k] + q c[b,d_k] / 1000) (1 + 1e-4 start_b)``: ``p, c`` the forecast's
  price and carbon averaged over the block (the policy never sees the truth beyond the
  current slot), ``q`` an optional carbon price (currency/kg); among equal prices the
  earliest slot wins;
- moves ``m[j,d]`` to each datacenter away from the job's data, costing the transfer energy
  ``M_jd = GB * kWh/GB * p`` and the transfer time ``l_jd`` (work lost) once
  (:func:`~workbench.policies.window.window_moves`);
- ``need_j``: the remaining work when the deadline (less ``deadline_margin_slots``) falls
  inside the window, else what keeps it on its pace line, a straight line from its arrival
  to a tenth of its life before its deadline (``PACE_MARGIN``; a job ahead of the line needs
  less, :func:`~workbench.policies.window.pace_need`), plus one restart's worth of work for
  a paused job that needs any;
- the power cap per datacenter and block; shortfall and carbon slack weigh 1000 times the
  dearest cost of a job's work and of a kg.

**Carbon budgets** are paced by :class:`~workbench.policies.pacing.BudgetPacing` (a window
whose uncapped plan keeps its share of the budget plans as if uncapped); the carbon rows'
duals ``lambda_d`` (currency per kg, at most the window's average price of a kg cut) join
``q`` in the slot decision below.

**From the plan to the slot.** The dual ``mu_j >= 0`` of job ``j``'s work row is the plan's
price of a unit of its progress (currency), contention included: when jobs compete for a
pool, the pool's dual raises the ``mu`` of the jobs that need it. The slot's integral
decision is the per-slot MILP (:class:`~workbench.optim.fastslot.FastSlotSolver`) over
the slot's true options with::

    coef_i = mu_j * progress_i - cost_i - (q + lambda_d) * carbon_i + mu_j * pmax_j * share_i

(``share_i``, the share of the current slot's block the plan runs the job on option
``i``'s configuration: the window's first blocks are single slots, so it carries the plan's
decision for this slot, restarts the LP does not see included; see
:mod:`workbench.policies.plan_slot`) and ``-cost_i - q carbon_i`` for inference services
(placed every slot).
An option that finishes the job values its progress at a full slot's work at least (the
slot is paid whole). A job whose deadline leaves no slack (``R_j >= 0.9 * pmax_j * L_j``)
runs first. A move must pay for its round trip (:mod:`workbench.policies.migration`).
Between re-plans the plan is reused (its duals and shares): a re-plan happens when the
forecast has moved on by ``replan_slots`` or a job arrived that the plan does not know.

**Arrivals at scale.** When jobs arrive slot after slot (the Philly trace: about 16 every
15 minutes) a window LP per slot would dominate the run. By default (``arrival_replan_slots``
None) a new job re-plans the window at once only when no other new job arrived in the
``replan_slots`` slots before; otherwise it waits for the next periodic re-plan (at most
``replan_slots`` slots), unpriced (it does not run) unless the completion rule below says
it cannot wait. One policy serves a week of a few dozen jobs (every arrival planned at once,
as before) and a trace of thousands (one LP per re-plan period).

**The completion rule** (:mod:`workbench.policies.completion`, ``completion_margin``): a job
whose slack runs out (it must start now, on its best option, to finish with a tenth of its
life in hand; jobs placed backwards on the pools' free GPUs, latest deadline first) is
placed by constraint in the slot MILP on an option that still finishes it, whatever the
plan's prices say: a job that waited for a re-plan, or that the plan's blocks left too
late, still meets its deadline when the pools allow it.

A window LP that fails (HiGHS status other than optimal) is reported in the slot's
``SolveInfo`` (``fallback``, with the message): the previous plan stays, and a job it does not
know prices its progress at its dearest option now, so it runs rather than waits (as it
does when ``arrival_replan_slots`` is set: the earlier scale mode).

Reads only ``state.t``, ``state.time``, ``state.jobs``, the scenario's static facts and the
forecast: no true future price and no future arrival.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from workbench import events
from workbench.caps import Caps
from workbench.forecast import Forecast
from workbench.meter import job_power_caps_kw, job_power_limits_kw
from workbench.model import Job, ScenarioView
from workbench.optim import blocklp
from workbench.optim.fastslot import FastSlotSolver
from workbench.policies.base import (
    RESTART_S_DEFAULT,
    Allocation,
    JobState,
    NoHindsightBound,
    SlotState,
    as_caps,
)
from workbench.policies.completion import (
    COMPLETION_MARGIN_DEFAULT,
    check_margin,
    must_run,
    urgency,
)
from workbench.policies.migration import event_exits, round_trip_keep
from workbench.policies.pacing import SHORT_WEIGHT, BudgetPacing
from workbench.policies.plan_slot import plan_coefficients, plan_placements, with_plan
from workbench.policies.problems import build_slot_problem, current_prices, job_configs
from workbench.policies.replanning import ReplanRules
from workbench.policies.supplywindow import SupplyWindow
from workbench.policies.window import (
    WindowPlan,
    block_forecast,
    pace_need,
    window_blocks,
    window_moves,
    window_plan,
)

log = logging.getLogger(__name__)


def slots_per_hour(slot_s: float) -> int:
    """An hour's worth of slots (at least one): the default re-plan period, first fine
    slots and block length."""
    return max(int(round(3600 / slot_s)), 1)


class LookaheadPolicy(BudgetPacing, SupplyWindow, ReplanRules, NoHindsightBound):
    """Contention-aware receding-horizon planner (see the module docstring for the maths).

    Parameters
    ----------
    window_h : float
        Look-ahead window, hours (24-48 h is the intended range).
    replan_slots : int, optional
        Re-solve the window LP every this many slots (and on every new arrival); default
        one hour's worth of slots.
    fine_slots, block_slots : int, optional
        The first ``fine_slots`` slots are planned one by one, later ones in blocks of
        ``block_slots``; default one hour's worth of slots each.
    caps : Caps, optional
        Carbon budget over the horizon, kg (each window gets the remaining budget's share)
        and facility power cap per datacenter and slot, kW (hard in the slot MILP).
    carbon_price_per_kg : float
        Optional internal carbon price (currency/kg) added to the energy cost.
    carbon_first : bool
        Under a binding carbon budget, cut carbon at any price (the window's least carbon
        before cost, work before both) instead of at most the window's average price of a
        kg cut (:meth:`~workbench.policies.pacing.BudgetPacing._budget_problem`). The
        runner sets it for a budget below the least carbon achievable with every deadline
        met: the planner then minimises carbon subject to the deadlines.
    gpu_counts : tuple of int, optional
        One GPU-count menu for every training job (default: each job's own).
    restart_s : float
        Seconds lost on a start, resume or migration.
    deadline_margin_slots : int
        The plan aims to finish this many slots before each deadline (restarts are not in
        the LP).
    min_dwell_slots : int, optional
        A job stays at least this many slots where it moved to; default 2 hours' worth.
        Measured on the battery (hourly slots): on us3-jan-burst 2 h cost 7.73 USD against
        9.38 at 24 h; on es-no-br-jan 24 h was 3 % cheaper than 6 h (docs/results.md).
    max_columns : int
        Coarsen the blocks until the LP has at most about this many columns.
    arrival_replan_slots : int, optional
        None (default): a job the plan does not know re-plans the window at once when no
        other new job arrived in the ``replan_slots`` slots before, else it waits for the
        next periodic re-plan (module docstring). An integer ``K``: a new job re-plans the
        window once at least ``K`` slots have passed since the last plan (1: always at
        once), and until then prices its progress at its dearest option now, so it runs
        rather than waits (the earlier *scale mode*). Measured in ``bench/scale.py``
        (docs/results.md, scale section).
    completion_margin : float, optional
        The completion rule's safety margin, a share of each job's life (arrival to
        deadline) kept in hand (:mod:`workbench.policies.completion`); None: no rule.
    time_limit_s, mip_rel_gap : float
        Per solve (LP and slot MILP).
    warm_start : bool
        Start each window LP from the previous one's simplex basis, matched by job, pool,
        GPU count and block (:func:`workbench.optim.blocklp.warm_basis`); the optimum is the
        same LP's, found in fewer iterations (measured in ``bench/window_lp.py``).
    presolve : bool
        HiGHS's presolve on the window LP. Off by default: on the look-ahead's re-plans it
        costs more than it saves (``bench/window_lp.py --compare presolve``: the same
        optimum value in about half the CPU); the LP is degenerate, so the plan (its
        vertex) can differ.
    """

    name = "lookahead"
    plans_batteries = True
    """The window plans the sites' batteries (:meth:`~workbench.policies.supplyplan.
    SupplyPlanner.block`)."""

    def __init__(
        self,
        *,
        window_h: float = 24.0,
        replan_slots: int | None = None,
        fine_slots: int | None = None,
        block_slots: int | None = None,
        caps: Caps | None = None,
        carbon_price_per_kg: float = 0.0,
        carbon_first: bool = False,
        gpu_counts: tuple[int, ...] | None = None,
        restart_s: float = RESTART_S_DEFAULT,
        deadline_margin_slots: int = 2,
        min_dwell_slots: int | None = None,
        max_columns: int = 60_000,
        arrival_replan_slots: int | None = None,
        time_limit_s: float = 30.0,
        mip_rel_gap: float = 1e-3,
        warm_start: bool = False,
        presolve: bool = False,
        completion_margin: float | None = COMPLETION_MARGIN_DEFAULT,
    ) -> None:
        if not (math.isfinite(window_h) and window_h > 0):
            raise ValueError(f"window_h must be a positive number of hours, got {window_h!r}")
        for v, what in ((replan_slots, "replan_slots"), (fine_slots, "fine_slots"),
                        (block_slots, "block_slots"), (max_columns, "max_columns"),
                        (arrival_replan_slots, "arrival_replan_slots")):
            if v is not None and not (isinstance(v, int) and v >= 1):
                raise ValueError(f"{what} must be an integer >= 1, got {v!r}")
        for v, what in ((deadline_margin_slots, "deadline_margin_slots"),
                        (min_dwell_slots, "min_dwell_slots")):
            if v is not None and not (isinstance(v, int) and v >= 0):
                raise ValueError(f"{what} must be an integer >= 0, got {v!r}")
        if not (math.isfinite(carbon_price_per_kg) and carbon_price_per_kg >= 0):
            raise ValueError(f"carbon_price_per_kg must be >= 0, got {carbon_price_per_kg!r}")
        if not (math.isfinite(restart_s) and restart_s >= 0):
            raise ValueError(f"restart_s must be >= 0 seconds, got {restart_s!r}")
        if not (time_limit_s > 0 and mip_rel_gap >= 0):
            raise ValueError("time_limit_s must be > 0 and mip_rel_gap >= 0")
        self.caps = as_caps(caps)
        self.window_h = float(window_h)
        self._knob_slots = (replan_slots, fine_slots, block_slots)
        self.replan_slots = self.fine_slots = self.block_slots = 1
        self.carbon_price_per_kg = float(carbon_price_per_kg)
        self.carbon_first = bool(carbon_first)
        self.gpu_counts = gpu_counts
        self.restart_s = float(restart_s)
        self.deadline_margin_slots = deadline_margin_slots
        self._min_dwell_knob = min_dwell_slots
        self.min_dwell_slots = 0
        self.max_columns = max_columns
        self.arrival_replan_slots = arrival_replan_slots
        self.time_limit_s = float(time_limit_s)
        self.mip_rel_gap = float(mip_rel_gap)
        self.warm_start = bool(warm_start)
        self.presolve = bool(presolve)
        self.completion_margin = (None if completion_margin is None
                                  else check_margin(completion_margin))
        self._fast = FastSlotSolver()
        self._sc: ScenarioView | None = None
        self.plan: WindowPlan | None = None
        self.replans = 0

    # -- lifecycle -----------------------------------------------------------------------
    def reset(self, scenario: ScenarioView) -> None:
        """Forget the plan; keep the static facts of ``scenario`` (never its grid or jobs)."""
        self._sc = scenario
        hour = slots_per_hour(scenario.slot_s)
        self.replan_slots, self.fine_slots, self.block_slots = (
            hour if v is None else v for v in self._knob_slots)
        self.min_dwell_slots = (2 * hour if self._min_dwell_knob is None
                                else self._min_dwell_knob)
        self._fast.reset()
        self._cfgs: dict[str, list[blocklp.BlockConfig]] = {}
        self._cfg_arrays: dict[str, blocklp.ConfigArrays] = {}
        self._moved_at: dict[str, int] = {}
        self._reset_pacing()
        self._where: dict[str, str] = {}
        self.plan = None
        self.replans = 0
        self._basis: blocklp.BlockBasis | None = None
        self._job_keys: dict[str, int] = {}
        self._seen: set[str] = set()
        self._last_arrival = -(10**9)
        self._lp_failed: tuple[int, str] = (-1, "")
        self._observed_t = -1
        self._quiet = True
        self._reset_supply(scenario)
        self.caps.check_names(dc.name for dc in scenario.datacenters)

    def describe(self) -> dict[str, Any]:
        """The knobs, for run logs."""
        return {"policy": self.name, "window_h": self.window_h,
                "replan_slots": self.replan_slots,
                "arrival_replan_slots": self.arrival_replan_slots,
                **self.caps.knobs(),
                "carbon_price_per_kg": self.carbon_price_per_kg,
                "restart_s": self.restart_s, "min_dwell_slots": self.min_dwell_slots,
                "warm_start": self.warm_start, "presolve": self.presolve,
                "completion_margin": self.completion_margin}

    # -- static helpers ------------------------------------------------------------------
    def _configs(self, job: Job) -> list[blocklp.BlockConfig]:
        got = self._cfgs.get(job.job_id)
        if got is None:
            assert self._sc is not None
            menu = self.gpu_counts if job.is_training else None
            got = job_configs(self._sc, job, menu)
            self._cfgs[job.job_id] = got
        return got

    def _config_table(self, jobs: list[JobState], cfgs: list[list[blocklp.BlockConfig]]
                      ) -> tuple[NDArray[np.int64], blocklp.ConfigArrays]:
        """The window's configurations as arrays: per job its first row (offsets), then every
        job's configurations one after the other (each job's arrays kept with its
        configurations)."""
        parts = []
        for js, cf in zip(jobs, cfgs, strict=True):
            got = self._cfg_arrays.get(js.job.job_id)
            if got is None:
                got = self._cfg_arrays[js.job.job_id] = blocklp.ConfigArrays.of(cf)
            parts.append(got)
        offsets = np.cumsum([0] + [len(c) for c in cfgs])[:-1].astype(np.int64)
        return offsets, blocklp.ConfigArrays.stack(parts)

    def _slot_index(self, when: Any) -> int:
        assert self._sc is not None
        return math.floor((when - self._sc.start).total_seconds() / self._sc.slot_s + 1e-9)

    def window_slots(self, t: int) -> int:
        """Slots in the window from slot ``t`` (``window_h``, to the horizon's end)."""
        assert self._sc is not None
        n = int(round(self.window_h * 3600 / float(self._sc.slot_s)))
        return max(min(n, self._sc.n_slots - t), 1)

    def _slots_left(self, js: JobState, t: int) -> int:
        """Slots from ``t`` to the job's deadline (the horizon's end if none), at least 1."""
        assert self._sc is not None
        end = (self._sc.n_slots if js.job.deadline is None
               else self._slot_index(js.job.deadline))
        return max(end - t, 1)

    # -- the window LP -------------------------------------------------------------------
    def solve_window(self, state: SlotState, forecast: Forecast) -> WindowPlan:
        """Build and solve the window LP at slot ``state.t`` (see the module docstring): the
        block LP (:mod:`workbench.optim.blocklp`) over the forecast window, with blocks
        priced at the forecast's mean, each job's window need and its data moves.

        Raises
        ------
        RuntimeError
            When HiGHS does not solve the LP to optimality (the message has its status).
        """
        sc = self._sc
        assert sc is not None
        t0c = time.perf_counter()
        t = state.t
        slot_s = float(sc.slot_s)
        n_win = self.window_slots(t)
        dcs = [dc.name for dc in sc.datacenters]
        jobs = [js for js in state.jobs if not js.job.is_training or js.remaining > 1e-9]
        cfgs = [self._configs(js.job) for js in jobs]
        bstart, blen = self.window_shape(state)
        rows_fc, bprice, bcarbon = block_forecast(forecast, sc, bstart, blen)
        q = self.carbon_price_per_kg
        ends, allowed, need, origin = self._window_jobs(jobs, cfgs, t, n_win)
        job_of, blk_of, cfg_of, ubx = blocklp.block_columns(
            bstart, blen, np.zeros(len(jobs), dtype=np.int64), ends, allowed)
        offsets, table = self._config_table(jobs, cfgs)
        cfg = table.take(offsets[job_of] + cfg_of)
        scale = np.array([js.throughput_scale for js in jobs], dtype=float)[job_of]
        # With the online speed estimate the job needs fewer (or more) slots for its work;
        # the energy per slot stays the modelled one.
        rate = cfg.rate * scale
        price_x = bprice[blk_of, cfg.dc] if job_of.size else np.zeros(0)
        carb_x = cfg.energy_kwh * (bcarbon[blk_of, cfg.dc] if job_of.size
                                   else np.zeros(0)) / 1000.0
        # Among equally cheap slots the earliest wins (1e-4 per slot): no procrastination.
        cost_x = (cfg.energy_kwh * price_x + q * carb_x) * (1.0 + 1e-4 * bstart[blk_of])
        training = np.array([js.job.is_training for js in jobs], dtype=bool)
        train_ids = np.flatnonzero(training)
        tr = training[job_of] if job_of.size else np.zeros(0, dtype=bool)
        moves = window_moves(sc, jobs, origin, job_of, cfg.dc, rate, bprice)
        need_b, parts = self._budget_parts(state, forecast, jobs, cfgs, need, ends, n_win)
        short_w = blocklp.penalty_weight(cost_x[tr] / np.maximum(rate[tr], 1e-12),
                                         SHORT_WEIGHT)
        slack_w = blocklp.penalty_weight(
            cfg.energy_kwh * price_x / np.maximum(carb_x, 1e-12), SHORT_WEIGHT)
        ws, lp_cost, lp_carb = self._window_supply(
            state, forecast, bstart, blen, rows_fc, bprice, bcarbon, cfg.dc, cost_x, carb_x,
            carbon_group=None if parts is None else parts[0])
        prob = blocklp.BlockProblem(
            block_len=blen, job=job_of, block=blk_of, slots=ubx, cost=lp_cost, configs=cfg,
            rate=rate, carbon_kg=lp_carb, must_run=~training, work_jobs=train_ids,
            need=need[train_ids],
            pool_capacity=np.array([p.count for p in sc.pools], dtype=float), slot_s=slot_s,
            shortfall_weight=short_w, carbon_slack_weight=slack_w,
            power_cap_kw=self._power_caps(t, bstart, blen),
            moves=moves, keys=self._block_keys(jobs, t, bstart),
            supply=None if ws is None else ws.block)
        sol = self._solve_lp(prob, t)
        lam: dict[str, float] = {}
        if parts is not None and need_b is not None:  # carbon budgets: _budget_problem
            budget = self._budget_problem(prob, sol, parts, cfg.dc, need_b[train_ids],
                                          min(n_win / max(sc.n_slots - t, 1), 1.0))
            if budget is not None:
                prob, sol = budget, self._solve_lp(budget, t)
                lam = {d: float(sol.carbon_price[g]) if g >= 0 and sol.carbon_price.size
                       else 0.0 for d, g in zip(dcs, parts[0].tolist(), strict=True)}
            self._note_plan(t, jobs, prob, sol.x, carb_x, self.replan_slots)
        plan = window_plan(t, jobs, cfgs, prob, cfg_of, bstart, sol, ends)
        plan = replace(plan, solve_s=time.perf_counter() - t0c, carbon_price_by_dc=lam)
        plan = self._read_supply(ws, sol, plan)
        log.debug("look-ahead at slot %d: %d jobs, %d columns, %d blocks of up to %d slots, "
                  "%.2f s", t, len(jobs), plan.n_columns, bstart.size, int(blen.max()),
                  plan.solve_s)
        return plan

    def _power_caps(self, t: int, bstart: NDArray[np.int64], blen: NDArray[np.int64]
                    ) -> NDArray[np.float64] | None:
        """The window's power rows: the jobs' power each datacenter may draw under its
        import cap (D,), or per block (D, B) with the grid events known at ``t`` (the
        blocks are cut at their edges, :meth:`window_shape`); None without either."""
        sc = self._sc
        assert sc is not None
        if not self.caps.has_events:
            return job_power_caps_kw(sc, self.caps) if self.caps.has_power else None
        lim = job_power_limits_kw(sc, self.caps, t, t + int(blen.sum()), known_at=t)
        return np.minimum.reduceat(lim, bstart, axis=0).T.copy()

    def _solve_lp(self, prob: blocklp.BlockProblem, t: int) -> blocklp.BlockSolution:
        """Solve a window LP (warm from the last one's basis when ``warm_start``); raises
        RuntimeError when HiGHS does not solve it to optimality."""
        sol = blocklp.solve_block_problem(prob, time_limit_s=self.time_limit_s,
                                          warm=self._basis, keep_basis=self.warm_start,
                                          presolve=self.presolve)
        if not (sol.optimal and sol.complete):
            raise RuntimeError(f"look-ahead LP at slot {t} not solved: HiGHS {sol.status}")
        self._basis = sol.basis
        return sol

    def _block_keys(self, jobs: list[JobState], t: int, bstart: NDArray[np.int64]
                    ) -> blocklp.BlockKeys | None:
        """Each job's stable key (first seen, first numbered) and the blocks' absolute first
        slots: what the warm start matches by (None when it is off)."""
        if not self.warm_start:
            return None
        keys = self._job_keys
        return blocklp.BlockKeys(
            job=np.array([keys.setdefault(js.job.job_id, len(keys)) for js in jobs],
                         dtype=np.int64),
            block_start=(t + bstart).astype(np.int64))

    def _window_jobs(
        self, jobs: list[JobState], cfgs: list[list[blocklp.BlockConfig]], t: int, n_win: int,
    ) -> tuple[NDArray[np.int64], list[NDArray[np.bool_]], NDArray[np.float64],
               list[str | None]]:
        """Per job: the end of its window (slots from ``t``), the configurations it may use
        (where its data are, or linked to there), its need (training) and where its data
        are (None for an inference service)."""
        sc = self._sc
        assert sc is not None
        ends = np.zeros(len(jobs), dtype=np.int64)
        allowed: list[NDArray[np.bool_]] = []
        need = np.zeros(len(jobs))
        origin: list[str | None] = []
        for j, (js, cf) in enumerate(zip(jobs, cfgs, strict=True)):
            job = js.job
            if job.is_training:
                left = self._slots_left(js, t) - self.deadline_margin_slots
                e = int(np.clip(left, 1, n_win))
                need[j] = pace_need(js.remaining, self._slot_index(job.arrival), t, left,
                                    n_win)
                if need[j] > 0:
                    # The LP has no restarts: charge the one a paused job pays to resume
                    # (only when the window needs its work: a job with no need stays paused).
                    need[j] += self._restart_work(js, cf)
                origin.append(js.last_datacenter or job.home)
            else:
                assert job.end is not None
                e = int(np.clip(self._slot_index(job.end) - t, 1, n_win))
                origin.append(None)
            ends[j] = e
            o = origin[j]
            allowed.append(np.array([o is None or c.datacenter == o or sc.link(
                str(o), c.datacenter) is not None for c in cf], dtype=bool))
        return ends, allowed, need, origin

    def _restart_work(self, js: JobState, cfgs: list[blocklp.BlockConfig]) -> float:
        """Work (fraction of the job) paused job ``js`` loses to a restart on its fastest
        configuration, ``restart_s / slot_s * max_k r_k`` (0 for a running job)."""
        assert self._sc is not None
        if js.placement is not None:
            return 0.0
        return self.restart_s / self._sc.slot_s * max((c.rate for c in cfgs), default=0.0)

    def window_shape(self, state: SlotState) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """The window's blocks at ``state.t`` (starts and lengths, slots from ``t``):
        ``fine_slots`` single slots, then blocks of ``block_slots`` doubled until the LP's
        columns (the jobs' configurations times the blocks) fit ``max_columns``; cut where a
        grid event known at ``t`` starts or ends (one limit per block)."""
        if self._sc is None:
            self.reset(state.scenario)
        est = sum(len(self._configs(js.job)) for js in state.jobs
                  if not js.job.is_training or js.remaining > 1e-9)
        n_win, block = self.window_slots(state.t), self.block_slots
        while True:
            bstart, blen = window_blocks(n_win, self.fine_slots, block)
            if est * bstart.size <= self.max_columns or block >= n_win:
                break
            block *= 2
        cuts = events.edges(state.scenario, self.caps.events, state.t, n_win,
                            known_at=state.t)
        return events.split_blocks(bstart, n_win, cuts) if cuts else (bstart, blen)

    def window_needs(self, state: SlotState) -> tuple[dict[str, float], dict[str, int]]:
        """Each training job's window need (fraction of the job) and window end (slots from
        ``state.t``) as a window LP at ``state.t`` would set them, without solving it."""
        if self._sc is None:
            self.reset(state.scenario)
        jobs = [js for js in state.jobs if js.job.is_training and js.remaining > 1e-9]
        ends, _, need, _ = self._window_jobs(jobs, [self._configs(js.job) for js in jobs],
                                             state.t, self.window_slots(state.t))
        ids = [js.job.job_id for js in jobs]
        return dict(zip(ids, need.tolist(), strict=True)), dict(zip(ids, ends.tolist(),
                                                                    strict=True))

    def decide(self, state: SlotState, forecast: Forecast) -> Allocation:
        if self._sc is None:
            self.reset(state.scenario)
        sc = self._sc
        assert sc is not None
        t = state.t
        quiet = self._observe(state)
        known = self.plan.mu if self.plan is not None else {}
        new_job = any(js.job.is_training and js.job.job_id not in known for js in state.jobs)
        # A grid event announced this slot is planned for at once.
        told = any(ev.known_from(sc) == t for ev in self.caps.events)
        if (self.plan is None or t - self.plan.t0 >= self.replan_slots or told
                or (new_job and self._replan_for_arrivals(state, quiet))):
            self.replan(state, forecast)
        assert self.plan is not None
        lp_failed = self._lp_failed[1] if self._lp_failed[0] == t else ""
        plan = self.plan
        price, carbon = current_prices(sc, forecast)
        opts, power_cap = self._slot_options(state, price, carbon)
        n_jobs = len(state.jobs)
        coef, mu_opt, pmax, urgent, prio = plan_coefficients(
            state, opts, plan, self._configs, self._slots_left,
            carbon_price_per_kg=self.carbon_price_per_kg,
            wait_unpriced=(self.arrival_replan_slots is None and not lp_failed
                           and plan.status != "failed"),
            balanced_sites=None if self._supply_plan is None else self._supply_plan.names,
            due_work=self._due_work if plan.carbon_price_by_dc else None)
        keep = self._round_trip_filter(state, opts, coef, mu_opt, price, forecast)
        prob = build_slot_problem(state, opts, coef, power_cap)
        forced = np.zeros(n_jobs, dtype=bool)
        if self.completion_margin is not None and len(opts):
            urg = urgency(state, opts, restart_s=self.restart_s, margin=self.completion_margin)
            prob, keep, forced = must_run(prob, keep, opts.progress, urg)
        chosen, info = self._solve_slot(state, opts, prob, keep, prio, price, carbon,
                                        plan.carbon_price_by_dc)
        placements, reasons, gains = plan_placements(state, opts, chosen, coef, keep, forced,
                                                     urgent)
        queues = {f"mu:{j}": v for j, v in plan.mu.items()}
        info = with_plan(info, plan, t, lp_failed)
        return Allocation(placements=placements, solve=info, expected_gain=gains,
                          reasons=reasons, queues=queues,
                          battery_kw=self._battery_kw(opts, chosen, t, price))

    def replan(self, state: SlotState, forecast: Forecast) -> WindowPlan:
        """Plan the window at slot ``state.t`` now, for this slot's decision (a coordinator
        re-plans a group's window with the jobs it moved, then asks for the slot's decision,
        which re-plans no more in that slot unless asked). A window LP that fails keeps the
        previous plan and is reported by the slot's decision (``SolveInfo.fallback``, with
        HiGHS's status). Returns the plan in force."""
        if self._sc is None:
            self.reset(state.scenario)
        t = state.t
        self._observe(state)
        try:
            self.plan = self.solve_window(state, forecast)
            self.replans += 1
            self._lp_failed = (t, "")
        except RuntimeError as exc:
            # Reported through SolveInfo.fallback (the run's warnings), never silent: the
            # previous plan stays; jobs it does not know run at their cheapest option.
            self._lp_failed = (t, str(exc))
            log.debug(str(exc))
            if self.plan is None:
                self.plan = WindowPlan.failed(t)
        return self.plan

    def _round_trip_filter(self, state: SlotState, opts: Any, coef: NDArray[np.float64],
                           mu_opt: NDArray[np.float64], price: Mapping[str, float],
                           forecast: Forecast) -> NDArray[np.bool_]:
        """The options whose move pays for its round trip (:func:`round_trip_keep`)."""
        assert self._sc is not None
        t = state.t
        ridx = [forecast.region_index(dc.region) for dc in self._sc.datacenters]
        keep = round_trip_keep(
            self._sc, state, opts, coef, mu_opt, price, restart_s=self.restart_s,
            window_h=self.window_h, min_dwell_slots=self.min_dwell_slots,
            # The price alone judges a service's move only where carbon weighs nothing in
            # the plan (no carbon budget or price): else a cleaner, dearer site may win.
            ahead_price=None if self.caps.has_carbon or self.carbon_price_per_kg > 0
            else np.asarray(forecast.price_per_kwh, dtype=float)[:, ridx],
            left=np.array([self._slots_left(js, t) for js in state.jobs], dtype=float),
            recent=np.array([t - self._moved_at.get(js.job.job_id, -10**9)
                             < self.min_dwell_slots for js in state.jobs], dtype=bool))
        return keep | event_exits(self._sc, state, opts, self.caps.events)
