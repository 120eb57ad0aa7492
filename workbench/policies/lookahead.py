"""Receding-horizon look-ahead: plan every arrived job jointly over the forecast window.

Every ``replan_slots`` slots (and whenever a job arrives that the plan does not know), an LP
over the next ``window_h`` hours of the forecast plans all waiting and running jobs together,
sharing pool capacity, power caps and the carbon budget among them. The LP is the block LP
of :mod:`workbench.optim.blocklp` (its rows and their maths there; assembled by
:func:`workbench.policies.blockproblem.block_problem`, as the hindsight plan's), with this
data:

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
- ``need_j`` and the end of job ``j``'s part of the window from the deadline rule
  (:meth:`~workbench.policies.deadlines.DeadlineRule.window`): all its remaining work by
  its planned end (a tenth of its life before its deadline, ``deadline_margin``) when that
  falls inside the window, else what keeps it on its pace line from its arrival to the
  planned end, plus one restart's worth of work for a paused job that needs any;
- the power cap per datacenter and block; shortfall and carbon slack weigh 1000 times the
  dearest cost of a job's work and of a kg.

**Carbon budgets** are paced by :class:`~workbench.policies.pacing.BudgetPacer` (a window
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
slot is paid whole). A move must pay for its round trip (:mod:`workbench.policies.migration`).
Between re-plans the plan is reused (its duals and shares): a re-plan happens when the
forecast has moved on by ``replan_slots``, a job arrived that the plan does not know, or the
current slot's truth left the forecast's band (``Forecast.band_miss``: the forecast ahead was
revised by the error, :meth:`~workbench.forecast.scenario.ModelForecast.revised`).

**Arrivals at scale.** When jobs arrive slot after slot (the Philly trace: about 16 every
15 minutes) a window LP per slot would dominate the run. By default (``arrival_replan_slots``
None) a new job re-plans the window at once only when no other new job arrived in the
``replan_slots`` slots before; otherwise it waits for the next periodic re-plan (at most
``replan_slots`` slots), unpriced (it does not run) unless the completion rule below says
it cannot wait. One policy serves a week of a few dozen jobs (every arrival planned at once,
as before) and a trace of thousands (one LP per re-plan period).

**The completion rule** (the deadline rule's slot half, :mod:`workbench.policies.deadlines`):
a job whose slack runs out (it must start now, on its best option, to finish with a tenth of its
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
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from workbench import events
from workbench.caps import Caps
from workbench.forecast import Forecast
from workbench.model import Job, ScenarioView
from workbench.optim import blocklp
from workbench.optim.fallback import solve_or_greedy
from workbench.optim.fastslot import FastSlotSolver
from workbench.optim.info import SolveInfo
from workbench.optim.slot import SlotProblem
from workbench.policies.base import (
    RESTART_S_DEFAULT,
    Allocation,
    JobState,
    NoHindsightBound,
    SlotOptions,
    SlotState,
    as_caps,
    slot_options,
)
from workbench.policies.blockproblem import block_power_caps, block_problem, column_prices
from workbench.policies.deadlines import DEADLINE_MARGIN_DEFAULT, DeadlineRule
from workbench.policies.migration import event_exits, round_trip_keep
from workbench.policies.pacing import SHORT_WEIGHT, BudgetPacer, PacePlan
from workbench.policies.plan_slot import plan_coefficients, plan_placements, with_plan
from workbench.policies.problems import build_slot_problem, current_prices, job_configs
from workbench.policies.replanning import ReplanTracker
from workbench.policies.supplyplan import SupplyPlan
from workbench.policies.supplywindow import SupplyCoordinator
from workbench.policies.window import (
    WindowPlan,
    block_forecast,
    window_blocks,
    window_moves,
    window_plan,
)

log = logging.getLogger(__name__)


def slots_per_hour(slot_s: float) -> int:
    """An hour's worth of slots (at least one): the default re-plan period, first fine
    slots and block length."""
    return max(int(round(3600 / slot_s)), 1)


@dataclass(frozen=True)
class LookaheadConfig:
    """The look-ahead's knobs, validated once, here (:class:`LookaheadPolicy` takes them
    as keywords; :class:`~workbench.policies.grouped.GroupedLookahead` holds one for its
    groups). Numbers are stored as ``float``, flags as ``bool``.

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
    carbon_price_per_kg : float
        Optional internal carbon price (currency/kg) added to the energy cost.
    carbon_first : bool
        Under a binding carbon budget, cut carbon at any price (the window's least carbon
        before cost, work before both) instead of at most the window's average price of a
        kg cut (:meth:`~workbench.policies.pacing.BudgetPacer.budget_problem`). The
        runner sets it for a budget below the least carbon achievable with every deadline
        met: the planner then minimises carbon subject to the deadlines.
    gpu_counts : tuple of int, optional
        One GPU-count menu for every training job (default: each job's own).
    restart_s : float
        Seconds lost on a start, resume or migration.
    deadline_margin : float
        The deadline rule's margin: the share of each job's life (arrival to deadline) kept
        in hand (:mod:`workbench.policies.deadlines`; the window plans each job to finish
        by its planned end, the slot's completion rule keeps it).
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

    window_h: float = 24.0
    replan_slots: int | None = None
    fine_slots: int | None = None
    block_slots: int | None = None
    carbon_price_per_kg: float = 0.0
    carbon_first: bool = False
    gpu_counts: tuple[int, ...] | None = None
    restart_s: float = RESTART_S_DEFAULT
    deadline_margin: float = DEADLINE_MARGIN_DEFAULT
    min_dwell_slots: int | None = None
    max_columns: int = 60_000
    arrival_replan_slots: int | None = None
    time_limit_s: float = 30.0
    mip_rel_gap: float = 1e-3
    warm_start: bool = False
    presolve: bool = False

    def __post_init__(self) -> None:
        window_h = self.window_h
        if not (math.isfinite(window_h) and window_h > 0):
            raise ValueError(f"window_h must be a positive number of hours, got {window_h!r}")
        for v, what in ((self.replan_slots, "replan_slots"), (self.fine_slots, "fine_slots"),
                        (self.block_slots, "block_slots"), (self.max_columns, "max_columns"),
                        (self.arrival_replan_slots, "arrival_replan_slots")):
            if v is not None and not (isinstance(v, int) and v >= 1):
                raise ValueError(f"{what} must be an integer >= 1, got {v!r}")
        if self.min_dwell_slots is not None and not (
                isinstance(self.min_dwell_slots, int) and self.min_dwell_slots >= 0):
            raise ValueError(f"min_dwell_slots must be an integer >= 0, "
                             f"got {self.min_dwell_slots!r}")
        q = self.carbon_price_per_kg
        if not (math.isfinite(q) and q >= 0):
            raise ValueError(f"carbon_price_per_kg must be >= 0, got {q!r}")
        rule = DeadlineRule(self.deadline_margin, self.restart_s)
        if not (self.time_limit_s > 0 and self.mip_rel_gap >= 0):
            raise ValueError("time_limit_s must be > 0 and mip_rel_gap >= 0")
        for name, value in (("window_h", float(window_h)), ("carbon_price_per_kg", float(q)),
                            ("carbon_first", bool(self.carbon_first)),
                            ("restart_s", rule.restart_s),
                            ("deadline_margin", rule.margin),
                            ("time_limit_s", float(self.time_limit_s)),
                            ("mip_rel_gap", float(self.mip_rel_gap)),
                            ("warm_start", bool(self.warm_start)),
                            ("presolve", bool(self.presolve))):
            object.__setattr__(self, name, value)

    def deadline_rule(self) -> DeadlineRule:
        """The deadline rule of these knobs (margin and restart seconds)."""
        return DeadlineRule(self.deadline_margin, self.restart_s)

    def slots(self, slot_s: float) -> WindowSlots:
        """The slot knobs on a clock of ``slot_s`` seconds, each ``None`` at its default:
        one hour's worth of slots (the minimum dwell: two)."""
        hour = slots_per_hour(slot_s)
        replan, fine, block = (hour if v is None else v
                               for v in (self.replan_slots, self.fine_slots, self.block_slots))
        return WindowSlots(replan=replan, fine=fine, block=block,
                           min_dwell=2 * hour if self.min_dwell_slots is None
                           else self.min_dwell_slots)


@dataclass(frozen=True)
class WindowSlots:
    """The look-ahead's slot knobs on a scenario's clock (:meth:`LookaheadConfig.slots`):
    the re-plan period, the window's first single slots, its block length and a job's
    minimum dwell after a move."""

    replan: int
    fine: int
    block: int
    min_dwell: int


@dataclass
class WindowState:
    """What the look-ahead's window planning holds: the plan in force, the simplex basis of
    its last window LP (for a warm start), the number of window LPs solved and the last
    failure (slot, HiGHS's message; ``(-1, "")`` none)."""

    plan: WindowPlan | None = None
    basis: blocklp.BlockBasis | None = None
    replans: int = 0
    lp_failed: tuple[int, str] = (-1, "")


@dataclass(frozen=True)
class KeptPlan:
    """What a re-plan changes, kept to be restored (:meth:`LookaheadPolicy.kept_plan`): the
    window state, the pacing's record of the plans and the supply plan. What the look-ahead
    observed (arrivals, moves, the meter) is no part of it."""

    window: WindowState
    pace: PacePlan
    supply: SupplyPlan | None


class LookaheadPolicy(NoHindsightBound):
    """Contention-aware receding-horizon planner (see the module docstring for the maths),
    composed of its parts: the window planning (its state a :class:`WindowState`), a
    :class:`~workbench.policies.pacing.BudgetPacer` (carbon budgets), a
    :class:`~workbench.policies.supplywindow.SupplyCoordinator` (the site supply) and a
    :class:`~workbench.policies.replanning.ReplanTracker` (arrivals and moves), made at
    :meth:`reset`; each slot decided by the slot MILP from the plan.

    Parameters
    ----------
    caps : Caps, optional
        Carbon budget over the horizon, kg (each window gets the remaining budget's share)
        and facility power cap per datacenter and slot, kW (hard in the slot MILP).
    **knobs
        The fields of :class:`LookaheadConfig` (each documented there).
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
        deadline_margin: float = DEADLINE_MARGIN_DEFAULT,
        min_dwell_slots: int | None = None,
        max_columns: int = 60_000,
        arrival_replan_slots: int | None = None,
        time_limit_s: float = 30.0,
        mip_rel_gap: float = 1e-3,
        warm_start: bool = False,
        presolve: bool = False,
    ) -> None:
        self.config = LookaheadConfig(
            window_h=window_h, replan_slots=replan_slots, fine_slots=fine_slots,
            block_slots=block_slots, carbon_price_per_kg=carbon_price_per_kg,
            carbon_first=carbon_first, gpu_counts=gpu_counts, restart_s=restart_s,
            deadline_margin=deadline_margin, min_dwell_slots=min_dwell_slots,
            max_columns=max_columns, arrival_replan_slots=arrival_replan_slots,
            time_limit_s=time_limit_s, mip_rel_gap=mip_rel_gap, warm_start=warm_start,
            presolve=presolve)
        self.caps = as_caps(caps)
        self._fast = FastSlotSolver()
        self._sc: ScenarioView | None = None
        self.window = WindowState()

    @classmethod
    def of(cls, config: LookaheadConfig, caps: Caps | None = None) -> LookaheadPolicy:
        """The look-ahead of ``config`` under ``caps``."""
        return cls(caps=caps, **{f.name: getattr(config, f.name) for f in fields(config)})

    @property
    def plan(self) -> WindowPlan | None:
        """The window plan in force (None before the first)."""
        return self.window.plan

    @property
    def replans(self) -> int:
        """Window LPs solved since :meth:`reset`."""
        return self.window.replans

    # -- lifecycle -----------------------------------------------------------------------
    def reset(self, scenario: ScenarioView) -> None:
        """Forget the plan; keep the static facts of ``scenario`` (never its grid or jobs):
        the parts start afresh on it."""
        cfg = self.config
        self._sc = scenario
        self.slots = cfg.slots(scenario.slot_s)
        self._fast.reset()
        self._cfgs: dict[str, list[blocklp.BlockConfig]] = {}
        self._cfg_arrays: dict[str, blocklp.ConfigArrays] = {}
        self._job_keys: dict[str, int] = {}
        self.window = WindowState()
        self.deadlines = cfg.deadline_rule()
        self.pacer = BudgetPacer(scenario, self.caps, restart_s=cfg.restart_s,
                                 carbon_first=cfg.carbon_first, time_limit_s=cfg.time_limit_s,
                                 presolve=cfg.presolve)
        self.supply = SupplyCoordinator(scenario)
        self.tracker = ReplanTracker(self.slots.replan, cfg.arrival_replan_slots)
        self.caps.check_names(dc.name for dc in scenario.datacenters)

    def kept_plan(self) -> KeptPlan:
        """What a re-plan changes (the window state, the pacing's record of the plans, the
        supply plan), for :meth:`restore_plan` to undo a re-plan with."""
        return KeptPlan(window=replace(self.window), pace=self.pacer.plans.copy(),
                        supply=self.supply.plan)

    def restore_plan(self, kept: KeptPlan) -> None:
        """Back to the plan :meth:`kept_plan` returned (a coordinator undoing a round)."""
        self.window = replace(kept.window)
        self.pacer.plans = kept.pace.copy()
        self.supply.plan = kept.supply

    def forget_basis(self) -> None:
        """Solve the next window LP cold (a coordinator re-planning a window that has
        changed too much since its last solve for that basis to help)."""
        self.window.basis = None

    def _observe(self, state: SlotState) -> None:
        """Note the slot's jobs (:meth:`ReplanTracker.observe
        <workbench.policies.replanning.ReplanTracker.observe>`) and, at the slot's first
        call, its metered carbon (:meth:`BudgetPacer.meter_overrun
        <workbench.policies.pacing.BudgetPacer.meter_overrun>`)."""
        if self.tracker.observe(state):
            self.pacer.meter_overrun(state, self.caps)

    # -- static helpers ------------------------------------------------------------------
    def _configs(self, job: Job) -> list[blocklp.BlockConfig]:
        got = self._cfgs.get(job.job_id)
        if got is None:
            assert self._sc is not None
            menu = self.config.gpu_counts if job.is_training else None
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

    def window_slots(self, t: int) -> int:
        """Slots in the window from slot ``t`` (``window_h``, to the horizon's end)."""
        assert self._sc is not None
        n = int(round(self.config.window_h * 3600 / float(self._sc.slot_s)))
        return max(min(n, self._sc.n_slots - t), 1)

    def _slots_left(self, js: JobState, t: int) -> int:
        """Slots from ``t`` to the job's deadline (the horizon's end if none), at least 1."""
        assert self._sc is not None
        end = (self._sc.n_slots if js.job.deadline is None
               else self._sc.slot_of(js.job.deadline))
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
        n_win = self.window_slots(t)
        dcs = [dc.name for dc in sc.datacenters]
        jobs = [js for js in state.jobs if not js.job.is_training or js.remaining > 1e-9]
        cfgs = [self._configs(js.job) for js in jobs]
        bstart, blen = self.window_shape(state)
        rows_fc, bprice, bcarbon = block_forecast(forecast, sc, bstart, blen)
        q = self.config.carbon_price_per_kg
        ends, allowed, need, origin = self._window_jobs(jobs, cfgs, t, n_win)
        job_of, blk_of, cfg_of, ubx = blocklp.block_columns(
            bstart, blen, np.zeros(len(jobs), dtype=np.int64), ends, allowed)
        offsets, table = self._config_table(jobs, cfgs)
        cfg = table.take(offsets[job_of] + cfg_of)
        scale = np.array([js.throughput_scale for js in jobs], dtype=float)[job_of]
        # With the online speed estimate the job needs fewer (or more) slots for its work;
        # the energy per slot stays the modelled one.
        rate = cfg.rate * scale
        energy_x, carb_x = column_prices(cfg, blk_of, bprice, bcarbon)
        # Among equally cheap slots the earliest wins (1e-4 per slot): no procrastination.
        cost_x = (energy_x + q * carb_x) * (1.0 + 1e-4 * bstart[blk_of])
        training = np.array([js.job.is_training for js in jobs], dtype=bool)
        train_ids = np.flatnonzero(training)
        tr = training[job_of] if job_of.size else np.zeros(0, dtype=bool)
        moves = window_moves(sc, jobs, origin, job_of, cfg.dc, rate, bprice)
        need_b, parts = self.pacer.budget_parts(state, forecast, jobs, cfgs, need, ends,
                                              n_win, self.caps)
        short_w = blocklp.penalty_weight(cost_x[tr] / np.maximum(rate[tr], 1e-12),
                                         SHORT_WEIGHT)
        slack_w = blocklp.penalty_weight(energy_x / np.maximum(carb_x, 1e-12), SHORT_WEIGHT)
        ws = self.supply.window_supply(
            state, forecast, bstart, blen, rows_fc, bprice, bcarbon,
            carbon_group=None if parts is None else parts[0], carbon_price_per_kg=q)
        prob = block_problem(
            sc, block_len=blen, job=job_of, block=blk_of, slots=ubx, configs=cfg, rate=rate,
            cost=cost_x, carbon_kg=carb_x, training=training, need=need[train_ids],
            shortfall_weight=short_w, carbon_slack_weight=slack_w,
            power_cap_kw=block_power_caps(sc, self.caps, bstart, t, t + int(blen.sum()),
                                          known_at=t),
            supply=None if ws is None else ws.block, moves=moves,
            keys=self._block_keys(jobs, t, bstart))
        sol = self._solve_lp(prob, t)
        lam: dict[str, float] = {}
        if parts is not None and need_b is not None:  # carbon budgets: budget_problem
            budget = self.pacer.budget_problem(prob, sol, parts, cfg.dc, need_b[train_ids],
                                          min(n_win / max(sc.n_slots - t, 1), 1.0))
            if budget is not None:
                prob, sol = budget, self._solve_lp(budget, t)
                lam = {d: float(sol.carbon_price[g]) if g >= 0 and sol.carbon_price.size
                       else 0.0 for d, g in zip(dcs, parts[0].tolist(), strict=True)}
            self.pacer.note_plan(t, jobs, prob, sol.x, carb_x, self.slots.replan)
        plan = window_plan(t, jobs, cfgs, prob, cfg_of, bstart, sol, ends)
        plan = replace(plan, solve_s=time.perf_counter() - t0c, carbon_price_by_dc=lam)
        plan = self.supply.read(ws, sol, plan)
        log.debug("look-ahead at slot %d: %d jobs, %d columns, %d blocks of up to %d slots, "
                  "%.2f s", t, len(jobs), plan.n_columns, bstart.size, int(blen.max()),
                  plan.solve_s)
        return plan

    def _solve_lp(self, prob: blocklp.BlockProblem, t: int) -> blocklp.BlockSolution:
        """Solve a window LP (warm from the last one's basis when ``warm_start``); raises
        RuntimeError when HiGHS does not solve it to optimality."""
        cfg = self.config
        sol = blocklp.solve_block_problem(prob, time_limit_s=cfg.time_limit_s,
                                          warm=self.window.basis, keep_basis=cfg.warm_start,
                                          presolve=cfg.presolve)
        if not (sol.optimal and sol.complete):
            raise RuntimeError(f"look-ahead LP at slot {t} not solved: HiGHS {sol.status}")
        self.window.basis = sol.basis
        return sol

    def _block_keys(self, jobs: list[JobState], t: int, bstart: NDArray[np.int64]
                    ) -> blocklp.BlockKeys | None:
        """Each job's stable key (first seen, first numbered) and the blocks' absolute first
        slots: what the warm start matches by (None when it is off)."""
        if not self.config.warm_start:
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
                e, need[j] = self.deadlines.window(sc, js, cf, t, n_win)
                origin.append(js.last_datacenter or job.home)
            else:
                assert job.end is not None
                e = int(np.clip(sc.slot_of(job.end) - t, 1, n_win))
                origin.append(None)
            ends[j] = e
            o = origin[j]
            allowed.append(np.array([o is None or c.datacenter == o or sc.link(
                str(o), c.datacenter) is not None for c in cf], dtype=bool))
        return ends, allowed, need, origin

    def window_shape(self, state: SlotState) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """The window's blocks at ``state.t`` (starts and lengths, slots from ``t``):
        ``fine_slots`` single slots, then blocks of ``block_slots`` doubled until the LP's
        columns (the jobs' configurations times the blocks) fit ``max_columns``; cut where a
        grid event known at ``t`` starts or ends (one limit per block)."""
        if self._sc is None:
            self.reset(state.scenario)
        est = sum(len(self._configs(js.job)) for js in state.jobs
                  if not js.job.is_training or js.remaining > 1e-9)
        n_win, block = self.window_slots(state.t), self.slots.block
        while True:
            bstart, blen = window_blocks(n_win, self.slots.fine, block)
            if est * bstart.size <= self.config.max_columns or block >= n_win:
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
        cfg = self.config
        t = state.t
        self._observe(state)
        plan = self.window.plan
        known = plan.mu if plan is not None else {}
        new_job = any(js.job.is_training and js.job.job_id not in known for js in state.jobs)
        # A grid event announced this slot is planned for at once, and so is a forecast
        # revised because the truth left its band (the plan's prices are stale).
        told = (any(ev.known_from(sc) == t for ev in self.caps.events)
                or (bool(forecast.band_miss) and plan is not None and plan.t0 < t))
        if (plan is None or t - plan.t0 >= self.slots.replan or told
                or (new_job and self.tracker.replan_for_arrivals(t, plan.t0))):
            plan = self.replan(state, forecast)
        failed_t, failed = self.window.lp_failed
        lp_failed = failed if failed_t == t else ""
        price, carbon = current_prices(sc, forecast)
        opts, power_cap = self._slot_options(state, price, carbon)
        n_jobs = len(state.jobs)
        supply_plan = self.supply.plan
        coef, mu_opt, pmax = plan_coefficients(
            state, opts, plan, self._configs, carbon_price_per_kg=cfg.carbon_price_per_kg,
            wait_unpriced=(cfg.arrival_replan_slots is None and not lp_failed
                           and plan.status != "failed"),
            balanced_sites=None if supply_plan is None else supply_plan.names)
        keep = self._round_trip_filter(state, opts, coef, mu_opt, price, forecast)
        prob, keep, forced, urgent = self.deadlines.slot(
            state, opts, build_slot_problem(state, opts, coef, power_cap), keep)
        # The greedy fallback's order: the urgent jobs first, then by the plan's value.
        prio = np.zeros(n_jobs)
        if len(opts):
            np.maximum.at(prio, opts.job_index, mu_opt)
        prio = prio * pmax + np.where(urgent, 1e9, 0.0)
        chosen, info = self._solve_slot(state, opts, prob, keep, prio, price, carbon,
                                        plan.carbon_price_by_dc)
        placements, reasons, gains = plan_placements(state, opts, chosen, coef, keep, forced)
        queues = {f"mu:{j}": v for j, v in plan.mu.items()}
        info = with_plan(info, plan, t, lp_failed)
        return Allocation(placements=placements, solve=info, expected_gain=gains,
                          reasons=reasons, queues=queues,
                          battery_kw=self.supply.battery_kw(opts, chosen, t, price))

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
        win = self.window
        try:
            win.plan = self.solve_window(state, forecast)
            win.replans += 1
            win.lp_failed = (t, "")
        except RuntimeError as exc:
            # Reported through SolveInfo.fallback (the run's warnings), never silent: the
            # previous plan stays; jobs it does not know run at their cheapest option.
            win.lp_failed = (t, str(exc))
            log.debug(str(exc))
            if win.plan is None:
                win.plan = WindowPlan.failed(t)
        return win.plan

    # -- the slot ------------------------------------------------------------------------
    def _slot_options(self, state: SlotState, price: Mapping[str, float],
                      carbon: Mapping[str, float]) -> tuple[SlotOptions, Caps]:
        """The slot's options (the GPU-count menu, the power limits) and the caps the slot
        MILP keeps, priced by the supply plan
        (:meth:`~workbench.policies.supplywindow.SupplyCoordinator.options`)."""
        menu = self.config.gpu_counts
        opts = slot_options(state, price, carbon, restart_s=self.config.restart_s,
                            gpu_counts=None if menu is None else {
                                js.job.job_id: tuple(menu) for js in state.jobs
                                if js.job.is_training})
        return self.supply.options(state, opts, price, carbon, self.caps)

    def _solve_slot(self, state: SlotState, opts: SlotOptions, prob: SlotProblem,
                    keep: NDArray[np.bool_], prio: NDArray[np.float64],
                    price: Mapping[str, float], carbon: Mapping[str, float],
                    carbon_price_by_dc: Mapping[str, float]
                    ) -> tuple[NDArray[np.int64], SolveInfo]:
        """The slot MILP (:func:`~workbench.optim.fallback.solve_or_greedy` over the ``keep``
        options; ``prio`` the greedy fallback's order) with the balanced sites' own supply
        (:meth:`~workbench.policies.supplywindow.SupplyCoordinator.slot_problem`): the
        chosen rows of ``prob`` and how the solve went."""
        cfg = self.config
        prob, keep, origin = self.supply.slot_problem(
            state, opts, prob, keep, price, carbon, carbon_price_by_dc, cfg.carbon_price_per_kg)
        chosen, info = solve_or_greedy(prob, keep, prio, t=state.t, solver="fast",
                                       fast=self._fast, mip_rel_gap=cfg.mip_rel_gap,
                                       time_limit_s=cfg.time_limit_s)
        return origin[chosen], info

    def _round_trip_filter(self, state: SlotState, opts: Any, coef: NDArray[np.float64],
                           mu_opt: NDArray[np.float64], price: Mapping[str, float],
                           forecast: Forecast) -> NDArray[np.bool_]:
        """The options whose move pays for its round trip (:func:`round_trip_keep`)."""
        assert self._sc is not None
        cfg, dwell, moved_at = self.config, self.slots.min_dwell, self.tracker.notes.moved_at
        t = state.t
        ridx = [forecast.region_index(dc.region) for dc in self._sc.datacenters]
        keep = round_trip_keep(
            self._sc, state, opts, coef, mu_opt, price, restart_s=cfg.restart_s,
            window_h=cfg.window_h, min_dwell_slots=dwell,
            # The price alone judges a service's move only where carbon weighs nothing in
            # the plan (no carbon budget or price): else a cleaner, dearer site may win.
            ahead_price=None if self.caps.has_carbon or cfg.carbon_price_per_kg > 0
            else np.asarray(forecast.price_per_kwh, dtype=float)[:, ridx],
            left=np.array([self._slots_left(js, t) for js in state.jobs], dtype=float),
            recent=np.array([t - moved_at.get(js.job.job_id, -10**9)
                             < dwell for js in state.jobs], dtype=bool))
        return keep | event_exits(self._sc, state, opts, self.caps.events)
