"""The hindsight bound: one LP/MILP over the whole horizon, then a replay policy.

With perfect knowledge of prices, carbon and every arrival (the true scenario, given to its
constructor: an online policy never sees it), :class:`OfflinePolicy` solves at ``reset`` one
block LP (:mod:`workbench.optim.blocklp`, its rows and their maths there) over all jobs,
slot blocks and configurations ``k`` (datacenter, GPU type, GPU count), with ``x[j,b,k]``
the number of slots of block ``b`` that job ``j`` runs configuration ``k``::

    min   sum_{j,b,k} E_k * price[b, d_k] * x[j,b,k]  +  M_w * sum_j short_j  +  M_c * slack
    s.t.  sum_k x[j,b,k] <= len_b  (= act_j,b for inference)    one configuration at a time
          sum_{j,k in p} n_k * x[j,b,k] <= C_p * len_b           every pool p and block b
          sum_{b,k} r_k * x[j,b,k] + short_j >= need_j           every training job
          sum carbon * x <= cap (+ slack at M_c)                 global or per-datacenter cap
          sum_{j,k in d} P_k * x[j,b,k] <= Pcap_d * len_b        power cap (optional)

``r_k`` is the job's progress per slot on ``k`` and ``E_k`` its energy per slot (kWh, with
PUE), both averaged over the job's gradient-noise trajectory (exact for a job that keeps one
configuration: slots to finish ``= sum_q (1/Q) / r_k(p_q)`` over ``Q`` progress points;
:func:`workbench.policies.problems.job_configs`). A job's window runs from the first slot
starting at or after its arrival to the last slot ending by its deadline (horizon end if
none); a job whose deadline lies beyond the horizon needs only the share of its work
proportional to the part of its window inside the horizon. Blocks are as long as needed to
keep the model within ``max_columns``; with blocks of one slot and at most
``exact_max_columns`` columns the model is the MILP (binaries per slot, the block LP's
exact mode).

What it neglects, on purpose, so that it stays a **lower bound** on what the simulator
charges a plan under the same noise-free truth model (``bound``): restart and resize losses,
dataset and checkpoint transfers (their time and energy), the integrality of per-slot
choices when solved as an LP (time-sharing within a slot), and the price spread inside a
block (each block is priced at its *cheapest* slot). Each configuration runs at its
ECU-best batch (as every policy here does). ``short_j`` (unfinishable work, weight
``M_w`` per job, :data:`SHORTFALL_FACTOR`) and ``slack`` (kg above a carbon cap, weight
``M_c`` per kg, :data:`CARBON_SLACK_FACTOR`) keep the model feasible; both are reported.
The replay (``decide``) is the *hindsight plan (replayed)*: it pays every loss the bound
neglects, so its cost is at or above the bound.

Solved with HiGHS (:mod:`workbench.optim.highs`). ``is_bound`` is False only when the MILP
(binaries per slot, blocks of one slot) was solved to optimality.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from workbench import events
from workbench.caps import Caps, kg_text
from workbench.forecast import Forecast
from workbench.model import Job, Scenario, ScenarioView
from workbench.optim import blocklp
from workbench.optim.blockdata import exact_dot
from workbench.optim.fallback import greedy_choice
from workbench.optim.info import SolveInfo
from workbench.policies.base import (
    RESTART_S_DEFAULT,
    Allocation,
    HindsightBound,
    SlotState,
    as_caps,
    slot_options,
)
from workbench.policies.blockproblem import block_power_caps, block_problem, column_prices
from workbench.policies.deadlines import DeadlineRule, horizon_window
from workbench.policies.problems import build_slot_problem, current_prices, job_configs
from workbench.policies.supplyplan import (
    SupplyPlan,
    SupplyPlanner,
    WindowSupply,
    site_load_kw,
    slot_caps,
)

log = logging.getLogger(__name__)


SHORTFALL_FACTOR = 1e3
"""Penalty of unfinishable work: this many times the dearest cost of a whole job's work on
any configuration (currency per job-fraction), so the model finishes every job it can."""

CARBON_SLACK_FACTOR = 1e3
"""Penalty of carbon above the cap: this many times the dearest cost of avoiding a kg by
running elsewhere or later (max over columns of cost / carbon, currency per kg), so the
model exceeds the cap only where nothing can keep it."""

_ROW_ORDER = ("choice", "pool", "work", "carbon", "power", "move")
"""The hindsight model's order of rows (power caps after the carbon cap; it has no moves):
the order its plans were checked with (HiGHS's path depends on it, the optimum does not)."""

LEAST_CARBON_LABEL = "hindsight LP bound: no restarts or transfers"
"""How :class:`LeastCarbon` is labelled wherever it is shown."""

BOUND_KINDS = ("lp-relaxation", "milp-optimal", "milp-dual-bound")
"""What ``OfflinePolicy.bound`` is: the LP relaxation's optimum, the MILP solved to
optimality, or the dual bound of a MILP stopped at its time limit."""


@dataclass(frozen=True)
class _Horizon:
    """The hindsight model's jobs, windows and columns, and the true block prices.

    ``wins[j]`` is job ``j``'s first slot, end slot and share of work due (:func:`_window`);
    per column: job, block, bound (slots) and global configuration index into ``flat``;
    ``bprice``, ``bcarbon`` (blocks, datacenters) the cheapest slot's price and carbon.
    """

    jobs: list[Job]
    wins: list[tuple[int, int, float]]
    flat: list[blocklp.BlockConfig]
    starts: NDArray[np.int64]
    lens: NDArray[np.int64]
    job_of: NDArray[np.int64]
    blk_of: NDArray[np.int64]
    ub: NDArray[np.float64]
    gcfg: NDArray[np.int64]
    bprice: NDArray[np.float64]
    bcarbon: NDArray[np.float64]


@dataclass(frozen=True)
class LeastCarbon:
    """The least carbon achievable over the horizon with every deadline met, from
    perfect hindsight: the block LP of the whole horizon minimising carbon
    (:func:`least_carbon_bound`).

    ``carbon_kg`` is a lower bound on what any plan that meets the deadlines emits (LP
    relaxation, each block at its cleanest slot, no restarts or transfers:
    :data:`LEAST_CARBON_LABEL`); ``cost`` the cost of that plan (scenario currency);
    ``shortfall`` the work (fraction per job) that no plan fits before its deadline;
    ``per_job`` each job's ``(work, carbon_kg, energy_kwh)`` in that plan.
    """

    carbon_kg: float
    cost: float
    shortfall: dict[str, float]
    kind: str = "lp-relaxation"
    per_job: dict[str, tuple[float, float, float]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return LEAST_CARBON_LABEL

    def as_dict(self) -> dict[str, Any]:
        """``{"carbon_kg", "cost", "kind", "label", "shortfall_jobs"}``, as runs store it."""
        return {"carbon_kg": float(self.carbon_kg), "cost": float(self.cost),
                "kind": self.kind, "label": self.label,
                "shortfall_jobs": sorted(self.shortfall)}


def _least_carbon(prob: blocklp.BlockProblem, jobs: list[Job], time_limit_s: float
                  ) -> LeastCarbon:
    """Solve ``prob`` (the horizon model) for its least carbon: LP relaxation, no carbon
    rows, objective ``sum g_x x + eps c_x x`` (the cost only breaks ties among
    least-carbon plans), shortfall weighing :data:`SHORTFALL_FACTOR` times the most carbon
    a whole job's work emits on any configuration.

    Raises RuntimeError when HiGHS does not solve it to optimality.
    """
    tr = ~prob.must_run[prob.job] if prob.n_x else np.zeros(0, dtype=bool)
    scale = float(prob.carbon_kg.sum()) / max(float(prob.cost.sum()), 1e-12)
    lp = replace(prob, cost=prob.carbon_kg + 1e-6 * scale * prob.cost,
                 shortfall_weight=blocklp.penalty_weight(
                     prob.carbon_kg[tr] / np.maximum(prob.rate[tr], 1e-12), SHORTFALL_FACTOR),
                 carbon_group=None, carbon_cap_kg=None, exact=False)
    sol = blocklp.solve_block_problem(lp, time_limit_s=time_limit_s)
    if not (sol.optimal and sol.complete):
        raise RuntimeError(f"least-carbon model not solved: HiGHS status {sol.status}; "
                           "raise time_limit_s or lower max_columns")
    shortfall = {jobs[j].job_id: float(v) for j, v in zip(
        prob.work_jobs.tolist(), sol.short, strict=True) if v > 1e-6}
    work, kg, kwh = (np.bincount(prob.job, weights=v * sol.x, minlength=len(jobs)) for v in (
        np.where(tr, prob.rate, 0.0), prob.carbon_kg, prob.configs.energy_kwh))
    per_job = {j.job_id: (float(w), float(k), float(e))
               for j, w, k, e in zip(jobs, work, kg, kwh, strict=True)}
    return LeastCarbon(carbon_kg=exact_dot(prob.carbon_kg, sol.x),
                       cost=exact_dot(prob.cost, sol.x), shortfall=shortfall, per_job=per_job)


def _min_overshoot_kg(prob: blocklp.BlockProblem, time_limit_s: float) -> float:
    """The least kg by which the horizon model must exceed its carbon budgets (one slack
    for every budget: the largest overshoot) with every deadline met as far as any plan
    can: the model with ``c_x = 0`` and the slack weighing 1."""
    tr = ~prob.must_run[prob.job] if prob.n_x else np.zeros(0, dtype=bool)
    lp = replace(prob, cost=np.zeros(prob.n_x), carbon_slack_weight=1.0,
                 shortfall_weight=blocklp.penalty_weight(
                     prob.carbon_kg[tr] / np.maximum(prob.rate[tr], 1e-12), SHORTFALL_FACTOR),
                 exact=False)
    sol = blocklp.solve_block_problem(lp, time_limit_s=time_limit_s)
    if not (sol.optimal and sol.complete):
        raise RuntimeError(f"least-overshoot model not solved: HiGHS status {sol.status}")
    return max(float(sol.slack_kg), 0.0)


def least_carbon_bound(scenario: Scenario, *, caps: Caps | None = None,
                       gpu_counts: tuple[int, ...] | None = None,
                       power_limits: tuple[float, ...] = (),
                       max_columns: int = 400_000, time_limit_s: float = 300.0
                       ) -> LeastCarbon:
    """The least carbon achievable on ``scenario`` with every deadline met (as far as any
    plan can meet them), under the power caps of ``caps`` (its carbon budgets are ignored)
    and with the GPU ``power_limits`` a run may choose (:func:`~workbench.policies.problems.
    job_configs`' relaxation): see :class:`LeastCarbon`. Hindsight: it reads the true grid
    and every arrival.

    Raises RuntimeError when HiGHS fails.
    """
    pol = OfflinePolicy(scenario=scenario, caps=None if caps is None else caps.power_only(),
                        gpu_counts=gpu_counts, max_columns=max_columns,
                        time_limit_s=time_limit_s)
    pol.power_limits = tuple(power_limits)
    hz = pol._horizon(scenario)
    return _least_carbon(pol._horizon_problem(scenario, hz), hz.jobs, time_limit_s)


class OfflinePolicy:
    """Hindsight bound over the whole horizon, and its plan replayed slot by slot.

    Parameters
    ----------
    scenario : Scenario
        The true scenario (prices, carbon, every arrival): hindsight. Required; the
        ``reset`` argument (the static view every policy gets) does not hold them.
    caps : Caps, optional
        Carbon budget over the horizon (kg), for the fleet or per datacenter, and power cap
        per datacenter (kW, per block on average).
    gpu_counts : tuple of int, optional
        One GPU-count menu for every training job (default: each job's own).
    exact_max_columns : int
        Solve as a MILP (binaries per slot) when the model has at most this many columns;
        above it, the LP relaxation (a bound).
    max_columns : int
        Merge slots into blocks until the model has at most about this many columns.
    time_limit_s : float
        HiGHS time limit (s).
    restart_s : float
        Restart loss the replay expects when it enumerates the slot's options.
    lead_slots : int
        The replay runs a job once its true progress lags the plan this many slots ahead
        (the plan has no restart losses, so the replay starts a little early).

    Attributes (after ``reset``)
    ----------------------------
    bound : dict
        ``{"cost", "carbon_kg", "kind"}``: the hindsight bound's cost (scenario currency)
        and its plan's carbon, ``kind`` one of :data:`BOUND_KINDS`.
    optimum_cost : float
        Least electricity cost of the plan (scenario currency), without restart losses.
    optimum_carbon_kg, optimum_energy_kwh : float
    is_bound : bool
        True when the value comes from the LP relaxation (or a MILP stopped at a gap).
    block_slots : int
        Slots per block in the model.
    shortfall : dict job id -> float
        Work (fraction) the plan cannot fit before a job's deadline.
    status : str
        HiGHS model status.
    """

    name = "offline"
    plans_batteries = True
    """The horizon's block LP plans the sites' batteries."""

    def __init__(
        self,
        *,
        scenario: Scenario | None = None,
        caps: Caps | None = None,
        gpu_counts: tuple[int, ...] | None = None,
        exact_max_columns: int = 3000,
        max_columns: int = 400_000,
        time_limit_s: float = 300.0,
        mip_rel_gap: float = 1e-4,
        restart_s: float = RESTART_S_DEFAULT,
        lead_slots: int = 2,
    ) -> None:
        if exact_max_columns < 0 or max_columns <= 0 or time_limit_s <= 0:
            raise ValueError("exact_max_columns >= 0, max_columns > 0, time_limit_s > 0")
        self.caps = as_caps(caps)
        self.truth = scenario
        self.gpu_counts = gpu_counts
        # The GPU power-limit menu of the run (the view's, at reset): the bound's relaxation.
        self.power_limits: tuple[float, ...] = ()
        self.exact_max_columns = int(exact_max_columns)
        self.max_columns = int(max_columns)
        self.time_limit_s = float(time_limit_s)
        self.mip_rel_gap = float(mip_rel_gap)
        self.restart_s = float(restart_s)
        # The replay keeps deadlines by the one rule with no margin: the plan it follows is
        # the hindsight one (true rates, every deadline in it), so the rule only has to catch
        # what the plan does not see (restarts, transfers, whole slots). With the look-ahead's
        # margin it ran jobs before the plan's cheap hours (battery: dearer on four scenarios).
        self.deadlines = DeadlineRule(0.0, self.restart_s)
        self.lead_slots = max(int(lead_slots), 0)
        self.optimum_cost = math.nan
        self.optimum_carbon_kg = math.nan
        self.optimum_energy_kwh = math.nan
        self.is_bound = True
        self.block_slots = 1
        self.shortfall: dict[str, float] = {}
        self.status = "not solved"
        self.solve_info: SolveInfo | None = None
        self.bound: dict[str, float | str] = {}
        self._bound: HindsightBound | None = None
        self.carbon_slack_kg = 0.0
        self.optimum_demand = 0.0
        self.least_carbon: LeastCarbon | None = None
        self.carbon_raised_kg = 0.0
        self._solved_for: ScenarioView | None = None
        self._ws: WindowSupply | None = None
        self._supply_plan: SupplyPlan | None = None

    def hindsight_bound(self) -> HindsightBound | None:
        """The hindsight bound of the last ``reset`` (None before it)."""
        return self._bound

    # -- the model -----------------------------------------------------------------------
    def reset(self, scenario: ScenarioView) -> None:
        """Solve the horizon model on the true scenario (given to the constructor) and keep
        the per-slot plan for :meth:`decide`."""
        if self.truth is None:
            raise ValueError("the hindsight (offline) policy needs the true scenario: "
                             "OfflinePolicy(scenario=...) (hindsight is not in the view)")
        if scenario.name != self.truth.name or scenario.n_slots != self.truth.n_slots:
            raise ValueError(f"OfflinePolicy was given scenario {self.truth.name!r} but runs "
                             f"on {scenario.name!r}")
        self._solved_for = scenario
        self.power_limits = tuple(getattr(scenario, "power_limits", ()))
        sc = self.truth
        self.caps.check_names(d.name for d in sc.datacenters)
        t0 = time.perf_counter()
        horizon = self._horizon(sc)
        prob = self._horizon_problem(sc, horizon)
        if self.caps.has_carbon:
            prob = self._keepable_budgets(prob, horizon)
        sol = blocklp.solve_block_problem(prob, time_limit_s=self.time_limit_s,
                                          mip_rel_gap=self.mip_rel_gap)
        self.status = sol.status
        solve_s = time.perf_counter() - t0
        if not (sol.optimal and sol.complete):
            if not (prob.exact and sol.complete and sol.time_limit):
                raise RuntimeError(f"offline model not solved: HiGHS status {self.status}; "
                                   f"raise time_limit_s or lower max_columns")
            log.warning("offline MILP hit the time limit; using its incumbent as the plan")
        self._read_solution(horizon, prob, sol, solve_s)
        self._plan_from(sc, horizon, prob, sol.x)

    def _horizon(self, sc: Scenario) -> _Horizon:
        """The true prices and carbon per block (each block at its cheapest slot, which keeps
        the model a lower bound) and every job's configurations, window and columns."""
        price = np.asarray(sc.grid["price_per_kwh"].sel(
            region=[d.region for d in sc.datacenters]).values[:sc.n_slots], dtype=float)
        carbon = np.asarray(sc.grid["carbon_g_per_kwh"].sel(
            region=[d.region for d in sc.datacenters]).values[:sc.n_slots], dtype=float)
        if not (np.all(np.isfinite(price)) and np.all(np.isfinite(carbon))):
            raise ValueError("the scenario's cube has missing price or carbon values")
        jobs = list(sc.jobs)
        cfgs = [job_configs(sc, j, self.gpu_counts if j.is_training else None,
                            self.power_limits) for j in jobs]
        wins = [horizon_window(sc, j) for j in jobs]
        est = sum(len(c) * max(w[1] - w[0], 0) for c, w in zip(cfgs, wins, strict=True))
        block = max(1, math.ceil(est / self.max_columns))
        self.block_slots = block
        n_blocks = math.ceil(sc.n_slots / block)
        starts = np.arange(n_blocks) * block
        lens = np.minimum(starts + block, sc.n_slots) - starts
        cuts = events.edges(sc, self.caps.events, 0, sc.n_slots)
        if cuts:  # one limit per block: cut where a grid event starts or ends
            starts, lens = events.split_blocks(starts, sc.n_slots, cuts)
        job_of, blk_of, cfg_of, ub = blocklp.block_columns(
            starts, lens, np.array([w[0] for w in wins], dtype=np.int64),
            np.array([w[1] for w in wins], dtype=np.int64),
            [np.ones(len(c), dtype=bool) for c in cfgs])
        offsets = np.cumsum([0] + [len(c) for c in cfgs])[:-1].astype(np.int64)
        return _Horizon(jobs=jobs, wins=wins, flat=[cf for c in cfgs for cf in c],
                        starts=starts, lens=lens, job_of=job_of, blk_of=blk_of, ub=ub,
                        gcfg=offsets[job_of] + cfg_of if job_of.size else job_of,
                        bprice=np.minimum.reduceat(price, starts, axis=0),
                        bcarbon=np.minimum.reduceat(carbon, starts, axis=0))

    def _horizon_problem(self, sc: Scenario, hz: _Horizon) -> blocklp.BlockProblem:
        """The block LP of the whole horizon: energy at the block's price, every job's whole
        work due in its window, the caps over the horizon; exact (binaries per slot) when
        blocks are single slots and the model has at most ``exact_max_columns`` columns."""
        cfg = blocklp.ConfigArrays.of(hz.flat).take(hz.gcfg)
        cost, carb = column_prices(cfg, hz.blk_of, hz.bprice, hz.bcarbon)
        training = np.array([j.is_training for j in hz.jobs], dtype=bool)
        train_ids = np.flatnonzero(training)
        tr = training[hz.job_of]
        names = [d.name for d in sc.datacenters]
        groups = self.caps.carbon_groups(names)
        group: NDArray[np.int64] | None = None if groups is None else groups[0][cfg.dc]
        caps_kg: NDArray[np.float64] | None = None if groups is None else groups[1]
        pos_c = carb > 1e-12
        self._ws = None
        planner = SupplyPlanner.of(sc)
        if planner is not None:
            # Balanced sites: renewables, battery and grid in the balance, peaks priced at
            # their lowest tier (the bound stays a lower bound).
            dc_group = None if groups is None else groups[0]
            self._ws = planner.block(
                t0=0, block_start=hz.starts, block_len=hz.lens,
                renewable_kw=sc.supply.available_kw(0, sc.n_slots), price=hz.bprice,
                carbon_g=hz.bcarbon, carbon_group=dc_group, lowest_tier=True)
            self._planner = planner
        return block_problem(
            sc, block_len=hz.lens, job=hz.job_of, block=hz.blk_of, slots=hz.ub, configs=cfg,
            rate=cfg.rate, cost=cost, carbon_kg=carb, training=training,
            need=np.array([hz.wins[j][2] for j in train_ids]),
            # Separate weights: a shortfall is a fraction of a job, the slack kilograms.
            shortfall_weight=blocklp.penalty_weight(
                cost[tr] / np.maximum(cfg.rate[tr], 1e-12), SHORTFALL_FACTOR),
            carbon_slack_weight=blocklp.penalty_weight(cost[pos_c] / carb[pos_c],
                                                       CARBON_SLACK_FACTOR),
            power_cap_kw=block_power_caps(sc, self.caps, hz.starts),
            supply=None if self._ws is None else self._ws.block,
            carbon_group=group, carbon_cap_kg=caps_kg,
            exact=self.block_slots == 1 and hz.job_of.size <= self.exact_max_columns,
            row_order=_ROW_ORDER)

    def _keepable_budgets(self, prob: blocklp.BlockProblem, hz: _Horizon
                          ) -> blocklp.BlockProblem:
        """The horizon model with its carbon budgets raised to what can be kept.

        First the least carbon with every deadline met (:attr:`least_carbon`); where a
        budget is below it (or, per datacenter, where the budgets cannot all be kept:
        :func:`_min_overshoot_kg`), each budget is raised by the least overshoot, so that
        the plan minimises carbon subject to the deadlines, then cost, rather than trading
        deadlines for kilograms (:attr:`carbon_raised_kg`, logged).
        """
        assert prob.carbon_cap_kg is not None
        self.least_carbon = _least_carbon(prob, hz.jobs, self.time_limit_s)
        if self.caps.carbon_kg_by_dc:
            over = _min_overshoot_kg(prob, self.time_limit_s)
        else:
            over = max(self.least_carbon.carbon_kg - float(prob.carbon_cap_kg[0]), 0.0)
        self.carbon_raised_kg = over
        if over <= 1e-9:
            return prob
        log.warning("offline: the carbon budget cannot be kept with every deadline met "
                    "(least carbon %s kg, %s); raised by %s kg: the plan minimises "
                    "carbon subject to the deadlines", kg_text(self.least_carbon.carbon_kg),
                    LEAST_CARBON_LABEL, kg_text(over))
        return replace(prob, carbon_cap_kg=prob.carbon_cap_kg + over * (1 + 1e-6) + 1e-9)

    def _read_solution(self, hz: _Horizon, prob: blocklp.BlockProblem,
                       sol: blocklp.BlockSolution, solve_s: float) -> None:
        """The plan's cost, carbon and energy, its shortfalls and carbon slack, and the bound."""
        x = sol.x
        self.is_bound = not ((exact := prob.exact) and sol.optimal)
        self.optimum_cost = exact_dot(prob.cost, x)
        self.optimum_carbon_kg = exact_dot(prob.carbon_kg, x)
        demand = 0.0
        self._supply_plan = None
        if self._ws is not None and sol.supply is not None:
            sb = self._ws.block
            self.optimum_cost += sol.supply.energy_cost(sb)
            self.optimum_carbon_kg += sol.supply.carbon_kg(sb)
            demand = sol.supply.demand_cost(sb)
            self._supply_plan = self._planner.plan(self._ws, sol.supply)
        self.optimum_energy_kwh = exact_dot(prob.configs.energy_kwh, x)
        self.shortfall = {hz.jobs[j].job_id: float(s) for j, s in zip(
            prob.work_jobs.tolist(), sol.short, strict=True) if s > 1e-6}
        if self.shortfall:
            log.warning("offline plan cannot finish %d job(s) by their deadlines: %s",
                        len(self.shortfall), ", ".join(sorted(self.shortfall)))
        capped = self.caps.has_carbon
        self.carbon_slack_kg = sol.slack_kg if capped else 0.0
        if capped and sol.slack_kg > 1e-3:
            log.warning("offline plan exceeds the carbon cap by %.1f kg", sol.slack_kg)
        if exact and sol.optimal:
            kind, bound_cost = "milp-optimal", self.optimum_cost
        elif exact:
            # Stopped at the time limit: the incumbent is no bound, the dual bound is (its
            # penalty terms are zero whenever nothing is short and the cap holds).
            kind = "milp-dual-bound"
            bound_cost = min(sol.mip_dual_bound, self.optimum_cost)
        else:
            kind, bound_cost = "lp-relaxation", self.optimum_cost
        if kind == "milp-dual-bound" and demand:
            # The dual bound covers the objective with its demand charges: split it.
            bound_cost = min(sol.mip_dual_bound - demand, self.optimum_cost)
        self.optimum_demand = demand
        self._bound = HindsightBound(cost=float(bound_cost),
                                     carbon_kg=float(self.optimum_carbon_kg), kind=kind,
                                     demand=float(demand))
        self.bound = self._bound.as_dict()
        self.solve_info = SolveInfo(status=self.status, solve_s=solve_s,
                                    objective=self.optimum_cost,
                                    gap=None if not exact else sol.mip_gap)
        log.info("offline %s: cost %.2f, %d columns, blocks of %d slots, %.1f s",
                 "MILP" if exact else "LP bound", self.optimum_cost, prob.n_x,
                 self.block_slots, solve_s)

    def _plan_from(self, sc: Scenario, hz: _Horizon, prob: blocklp.BlockProblem,
                   x: NDArray[np.float64]) -> None:
        """Per job: cumulative planned progress by slot end, and the preferred config."""
        n = sc.n_slots
        self._cum: dict[str, NDArray[np.float64]] = {}
        self._pref: dict[str, dict[int, tuple[str, str, int]]] = {}
        for j, job in enumerate(hz.jobs):
            sel = np.flatnonzero((hz.job_of == j) & (x > 1e-7))
            per_slot = np.zeros(n)
            pref: dict[int, tuple[str, str, int]] = {}
            best_x: dict[int, float] = {}
            for c in sel.tolist():
                b = int(hz.blk_of[c])
                # Spread the block's planned work evenly over its slots in the window.
                s0 = max(int(hz.starts[b]), hz.wins[j][0])
                s1 = min(int(hz.starts[b] + hz.lens[b]), hz.wins[j][1])
                share = x[c] / max(hz.ub[c], 1e-12)
                cf = hz.flat[int(hz.gcfg[c])]
                for s in range(s0, s1):
                    per_slot[s] += prob.rate[c] * share
                    if share > best_x.get(s, 0.0):
                        best_x[s] = share
                        pref[s] = (cf.datacenter, cf.gpu_type, cf.n_gpus)
            self._cum[job.job_id] = np.concatenate([[0.0], np.cumsum(per_slot)])
            self._pref[job.job_id] = pref

    # -- the replay ----------------------------------------------------------------------
    def decide(self, state: SlotState, forecast: Forecast) -> Allocation:
        """Run each job whose true progress lags the plan; prefer the planned configuration.

        A job whose slack runs out runs whatever the plan says (the deadline rule's slot
        half, :meth:`~workbench.policies.deadlines.DeadlineRule.slot`): the replay pays
        restarts and transfers the plan does not see.
        """
        if self._solved_for is not state.scenario:
            self.reset(state.scenario)
        sc = state.scenario
        price, carbon = current_prices(sc, forecast)
        opts = slot_options(state, price, carbon, restart_s=self.restart_s)
        coef = np.full(len(opts), -1.0)
        prio = np.zeros(len(state.jobs))
        reasons: dict[str, str] = {}
        t = state.t
        for j, js in enumerate(state.jobs):
            rows = opts.rows_of(js.job.job_id)
            if rows.size == 0:
                continue
            pref = self._pref.get(js.job.job_id, {}).get(t)
            match = np.array([
                pref is not None and (str(opts.datacenter[k]), str(opts.gpu_type[k]),
                                      int(opts.n_gpus[k])) == pref for k in rows])
            same_dc = np.array([pref is not None and str(opts.datacenter[k]) == pref[0]
                                for k in rows])
            if not js.job.is_training:
                coef[rows] = 2.0 * match + 1.0 * same_dc - opts.cost[rows] / max(
                    float(opts.cost[rows].max()), 1e-12)
                continue
            cum = self._cum.get(js.job.job_id)
            # Track the plan one slot ahead: restart losses are not in the plan.
            ahead = t + 1 + self.lead_slots
            target = float(cum[min(ahead, cum.size - 1)]) if cum is not None else 1.0
            deficit = target - js.progress
            eff = opts.progress[rows] / np.maximum(opts.cost[rows], 1e-12)
            base = eff / max(float(eff.max()), 1e-12)
            if deficit <= 1e-6:
                # Not run unless the deadline rule makes it (then on its cheapest work,
                # the plan's configuration first): every option stays below 0.
                coef[rows] = -2.0 + base + 0.5 * match + 0.25 * same_dc
                continue
            prio[j] = deficit
            coef[rows] = np.where(opts.progress[rows] > 0, 1.0 + base + 2.0 * match
                                  + 1.0 * same_dc, -1.0)
        sp = self._supply_plan
        prob = build_slot_problem(state, opts, coef, self.caps if sp is None else
                                  slot_caps(sc, sp, t, state.soc_kwh, self.caps, opts))
        prob, keep, forced, urgent = self.deadlines.slot(state, opts, prob,
                                                         np.ones(len(opts), dtype=bool))
        rows_kept = np.flatnonzero(keep)
        chosen = np.zeros(len(opts), dtype=bool)
        chosen[rows_kept[greedy_choice(prob.subset(keep),
                                       priority=prio + np.where(urgent, 10.0, 0.0))]] = True
        placements = {state.jobs[int(opts.job_index[k])].job.job_id: opts.placement(int(k))
                      for k in np.flatnonzero(chosen)}
        for j in np.flatnonzero(forced).tolist():
            reasons[state.jobs[j].job.job_id] = ("no slack left before its deadline: must "
                                                 "run (completion rule)")
        battery: dict[str, float] = {}
        if sp is not None:
            # The batteries keep the grid at the plan's level for the load placed here (a
            # battery the view leaves out runs the site's greedy dispatch).
            region = {d.name: d.region for d in sc.datacenters}
            load = site_load_kw(opts, np.flatnonzero(chosen), float(sc.slot_s))
            battery = {d: kw for d, kw in sp.battery_kw(
                t, load, {n: price[region[n]] for n in sp.names}).items()
                if sc.supply.battery_at(d) is not None}
        return Allocation(placements=placements, reasons=reasons, battery_kw=battery)
