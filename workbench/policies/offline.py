"""The hindsight bound: one LP/MILP over the whole horizon, then a replay policy.

With perfect knowledge of prices, carbon and every arrival (the true scenario, given to its
constructor: an online policy never sees it), :class:`OfflinePolicy` solves at ``reset`` one
model over all jobs, slot blocks and configurations ``k`` (datacenter, GPU
type, GPU count), with ``x[j,b,k]`` the number of slots of block ``b`` that job ``j`` runs
configuration ``k``::

    min   sum_{j,b,k} E_k * price[b, d_k] * x[j,b,k]  +  M_w * sum_j short_j  +  M_c * slack
    s.t.  sum_k x[j,b,k] <= len_b                     training job j, block b in its window
          sum_k x[j,b,k]  = act_j,b                   inference j: its active slots in b
          sum_{j,k in p} n_k * x[j,b,k] <= C_p * len_b    every pool p and block b
          sum_{b,k} r_k * x[j,b,k] + short_j >= need_j    every training job
          sum carbon * x <= cap (+ slack at M)            global or per-datacenter cap
          sum_{j,k in d} P_k * x[j,b,k] <= Pcap_d * len_b power cap (optional)

``r_k`` is the job's progress per slot on ``k`` and ``E_k`` its energy per slot (kWh, with
PUE), both averaged over the job's gradient-noise trajectory (exact for a job that keeps one
configuration: slots to finish ``= sum_q (1/Q) / r_k(p_q)`` over ``Q`` progress points).
A job's window runs from the first slot starting at or after its arrival to the last slot
ending by its deadline (horizon end if none); a job whose deadline lies beyond the horizon
needs only the share of its work proportional to the part of its window inside the horizon.

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

Solved with HiGHS through highspy arrays. ``is_bound`` is False only when the MILP
(binaries per slot, blocks of one slot) was solved to optimality.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass

import highspy
import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from workbench import outcome
from workbench.model import Job, Scenario, ScenarioView
from workbench.policies._highs import new_highs
from workbench.policies.base import (
    RESTART_S_DEFAULT,
    Allocation,
    Forecast,
    HindsightBound,
    SlotState,
    SolveInfo,
    check_caps,
    slot_options,
)
from workbench.policies.greedy import greedy_choice
from workbench.policies.milp import build_slot_problem, current_prices

log = logging.getLogger(__name__)

_QUAD = 8

SHORTFALL_FACTOR = 1e3
"""Penalty of unfinishable work: this many times the dearest cost of a whole job's work on
any configuration (currency per job-fraction), so the model finishes every job it can."""

CARBON_SLACK_FACTOR = 1e3
"""Penalty of carbon above the cap: this many times the dearest cost of avoiding a kg by
running elsewhere or later (max over columns of cost / carbon, currency per kg), so the
model exceeds the cap only where nothing can keep it."""

BOUND_KINDS = ("lp-relaxation", "milp-optimal", "milp-dual-bound")
"""What ``OfflinePolicy.bound`` is: the LP relaxation's optimum, the MILP solved to
optimality, or the dual bound of a MILP stopped at its time limit."""


@dataclass(frozen=True)
class _Config:
    datacenter: str
    gpu_type: str
    n_gpus: int
    pool: int
    dc: int
    rate: float
    energy_kwh: float


def _first_slot_at_or_after(sc: Scenario, when: object) -> int:
    secs = (when - sc.start).total_seconds()  # type: ignore[operator]
    return max(math.ceil(secs / sc.slot_s - 1e-9), 0)


def required_share(sc: Scenario, job: Job) -> float:
    """Share of a job's work due within the horizon (what the hindsight bound must do): 1,
    or for a deadline beyond the horizon the part of its window inside it."""
    return _window(sc, job)[2]


def _window(sc: Scenario, job: Job) -> tuple[int, int, float]:
    """First slot, end slot (exclusive) within the horizon, and the work share needed."""
    a = _first_slot_at_or_after(sc, job.arrival)
    if job.is_training:
        if job.deadline is None:
            return a, sc.n_slots, 1.0
        e = math.floor((job.deadline - sc.start).total_seconds() / sc.slot_s + 1e-9)
        if e <= sc.n_slots:
            return a, max(e, a), 1.0
        share = (sc.n_slots - a) / max(e - a, 1)
        return a, sc.n_slots, float(np.clip(share, 0.0, 1.0))
    assert job.end is not None
    return a, min(_first_slot_at_or_after(sc, job.end), sc.n_slots), 1.0


def job_configs(sc: Scenario | ScenarioView, job: Job,
                gpu_counts: tuple[int, ...] | None = None) -> list[_Config]:
    """Every (datacenter, pool, GPU count) the job may use, with trajectory-averaged rates."""
    dc_pos = {d.name: i for i, d in enumerate(sc.datacenters)}
    pool_pos = {(p.datacenter, p.gpu_type): i for i, p in enumerate(sc.pools)}
    out: list[_Config] = []
    limit = job.max_latency_ms if job.max_latency_ms is not None else math.inf
    menu = gpu_counts if gpu_counts is not None else job.gpu_counts
    qp = (np.arange(_QUAD) + 0.5) / _QUAD
    for dc in sc.datacenters:
        if not job.is_training and sc.latency_ms(job.home, dc.name) > limit:
            continue
        for pool in sc.pools_at(dc.name):
            if not job.allows(pool.gpu_type):
                continue
            if not job.is_training:
                if job.requested_gpus <= pool.count:
                    o = outcome.slot_outcome(job, slot_s=float(sc.slot_s), pue=dc.pue,
                                             inference_power_w=outcome.service_power_w(job, pool))
                    out.append(_Config(dc.name, pool.gpu_type, job.requested_gpus,
                                       pool_pos[(dc.name, pool.gpu_type)], dc_pos[dc.name],
                                       0.0, o.energy_kwh))
                continue
            prof = sc.profile(job.app, pool.gpu_type)
            for n in menu:
                if n > pool.count:
                    continue
                # One loss-free full slot at each progress point, from the one slot model.
                prog_q, kwh_q = outcome.full_slot_rates(
                    prof, job, int(n), pool.gpus_per_node, float(sc.slot_s), dc.pue,
                    prof.efficiency.phi(qp))
                slots_q = (1.0 / _QUAD) / prog_q
                slots = float(slots_q.sum())
                energy = float((slots_q * kwh_q).sum())
                out.append(_Config(dc.name, pool.gpu_type, int(n),
                                   pool_pos[(dc.name, pool.gpu_type)], dc_pos[dc.name],
                                   1.0 / slots, energy / slots))
    return out


class OfflinePolicy:
    """Hindsight bound over the whole horizon, and its plan replayed slot by slot.

    Parameters
    ----------
    scenario : Scenario
        The true scenario (prices, carbon, every arrival): hindsight. Required; the
        ``reset`` argument (the static view every policy gets) does not hold them.
    carbon_cap_kg : float or mapping datacenter -> float, optional
        Hard carbon cap over the horizon (kg), global or per datacenter.
    power_cap_kw : float or mapping datacenter -> float, optional
        Power cap per datacenter (kW), per block on average.
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

    def __init__(
        self,
        *,
        scenario: Scenario | None = None,
        carbon_cap_kg: float | Mapping[str, float] | None = None,
        power_cap_kw: float | Mapping[str, float] | None = None,
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
        check_caps(carbon_cap_kg, "carbon_cap_kg", "kg")
        check_caps(power_cap_kw, "power_cap_kw", "kW")
        self.truth = scenario
        self.carbon_cap_kg = carbon_cap_kg
        self.power_cap_kw = power_cap_kw
        self.gpu_counts = gpu_counts
        self.exact_max_columns = int(exact_max_columns)
        self.max_columns = int(max_columns)
        self.time_limit_s = float(time_limit_s)
        self.mip_rel_gap = float(mip_rel_gap)
        self.restart_s = float(restart_s)
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
        self._solved_for: ScenarioView | None = None

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
        sc = self.truth
        t0 = time.perf_counter()
        price = np.asarray(sc.grid["price_per_kwh"].sel(
            region=[d.region for d in sc.datacenters]).values[:sc.n_slots], dtype=float)
        carbon = np.asarray(sc.grid["carbon_g_per_kwh"].sel(
            region=[d.region for d in sc.datacenters]).values[:sc.n_slots], dtype=float)
        if not (np.all(np.isfinite(price)) and np.all(np.isfinite(carbon))):
            raise ValueError("the scenario's cube has missing price or carbon values")
        jobs = list(sc.jobs)
        cfgs = [job_configs(sc, j, self.gpu_counts if j.is_training else None) for j in jobs]
        wins = [_window(sc, j) for j in jobs]
        est = sum(len(c) * max(w[1] - w[0], 0) for c, w in zip(cfgs, wins, strict=True))
        block = max(1, math.ceil(est / self.max_columns))
        self.block_slots = block
        n_blocks = math.ceil(sc.n_slots / block)
        starts = np.arange(n_blocks) * block
        lens = np.minimum(starts + block, sc.n_slots) - starts
        # Cheapest slot of each block: keeps the model a lower bound.
        bprice = np.minimum.reduceat(price, starts, axis=0)
        bcarbon = np.minimum.reduceat(carbon, starts, axis=0)

        cols_job: list[NDArray[np.int64]] = []
        cols_blk: list[NDArray[np.int64]] = []
        cols_cfg: list[NDArray[np.int64]] = []
        cfg_base = np.cumsum([0] + [len(c) for c in cfgs])
        for j, (c, (a, e, _)) in enumerate(zip(cfgs, wins, strict=True)):
            if not c or e <= a:
                continue
            blocks = np.arange(a // block, (e - 1) // block + 1)
            bj, kj = np.meshgrid(blocks, np.arange(len(c)), indexing="ij")
            cols_job.append(np.full(bj.size, j))
            cols_blk.append(bj.ravel())
            cols_cfg.append(kj.ravel() + cfg_base[j])
        job_of = np.concatenate(cols_job) if cols_job else np.zeros(0, np.int64)
        blk_of = np.concatenate(cols_blk) if cols_blk else np.zeros(0, np.int64)
        gcfg = np.concatenate(cols_cfg) if cols_cfg else np.zeros(0, np.int64)
        flat = [cf for c in cfgs for cf in c]
        rate = np.array([cf.rate for cf in flat])[gcfg]
        energy = np.array([cf.energy_kwh for cf in flat])[gcfg]
        n_g = np.array([cf.n_gpus for cf in flat], dtype=float)[gcfg]
        pool = np.array([cf.pool for cf in flat], dtype=np.int64)[gcfg]
        dci = np.array([cf.dc for cf in flat], dtype=np.int64)[gcfg]
        # Slots of each block inside the job's window: the column's upper bound.
        a_j = np.array([w[0] for w in wins])[job_of]
        e_j = np.array([w[1] for w in wins])[job_of]
        b0 = starts[blk_of]
        ub = (np.minimum(b0 + lens[blk_of], e_j) - np.maximum(b0, a_j)).astype(float)
        cost = energy * bprice[blk_of, dci]
        carb = energy * bcarbon[blk_of, dci] / 1000.0
        nx = job_of.size
        training = np.array([j.is_training for j in jobs])
        train_ids = np.flatnonzero(training)
        n_short = train_ids.size

        exact = block == 1 and nx <= self.exact_max_columns
        # Columns: use u (slots run, continuous), shortfall, carbon slack, and in exact mode
        # the binaries z (configuration chosen) with u <= z: a finishing job pays only the
        # part of its last slot it uses, as in the simulator.
        zc = nx + n_short + 1
        ncol = zc + (nx if exact else 0)
        rows: list[sp.coo_matrix] = []
        lo: list[NDArray[np.float64]] = []
        hi: list[NDArray[np.float64]] = []

        def add(r_idx: NDArray[np.int64], c_idx: NDArray[np.int64], vals: NDArray[np.float64],
                n_rows: int, r_lo: NDArray[np.float64], r_hi: NDArray[np.float64],
                extra: sp.coo_matrix | None = None) -> None:
            m = sp.coo_matrix((vals, (r_idx, c_idx)), shape=(n_rows, ncol))
            rows.append(m if extra is None else (m + extra).tocoo())
            lo.append(r_lo)
            hi.append(r_hi)

        # One configuration at a time per (job, block); inference exactly its active slots.
        jb = job_of * n_blocks + blk_of
        uniq, inv = np.unique(jb, return_inverse=True)
        cap = np.zeros(uniq.size)
        np.maximum.at(cap, inv, ub)
        must = ~training[uniq // n_blocks]
        add(inv, np.arange(nx), np.ones(nx), uniq.size,
            np.where(must, cap, -np.inf), cap)
        # Pool capacity per block.
        n_pools = len(sc.pools)
        pb = pool * n_blocks + blk_of
        pcap = np.array([p.count for p in sc.pools], dtype=float)
        add(pb, np.arange(nx), n_g, n_pools * n_blocks, np.full(n_pools * n_blocks, -np.inf),
            np.repeat(pcap, n_blocks) * np.tile(lens, n_pools))
        # Work: sum r x + short >= need.
        need = np.array([wins[j][2] for j in train_ids])
        pos = np.full(len(jobs), -1)
        pos[train_ids] = np.arange(n_short)
        tr = training[job_of]
        short = sp.coo_matrix((np.ones(n_short), (np.arange(n_short), nx + np.arange(n_short))),
                              shape=(n_short, ncol))
        add(pos[job_of[tr]], np.flatnonzero(tr), rate[tr], n_short, need,
            np.full(n_short, np.inf), extra=short)
        # Carbon cap (hard, with a priced slack column so the model stays feasible).
        ccap = self.carbon_cap_kg
        slack_col = nx + n_short
        if ccap is not None:
            if isinstance(ccap, Mapping):
                names = [d.name for d in sc.datacenters]
                r_of = np.array([names.index(d) if d in ccap else -1 for d in names])[dci]
                keys = [d for d in names if d in ccap]
                sel = r_of >= 0
                slack = sp.coo_matrix((-np.ones(len(keys)), (np.arange(len(keys)),
                                                              np.full(len(keys), slack_col))),
                                      shape=(len(keys), ncol))
                add(r_of[sel], np.flatnonzero(sel), carb[sel], len(keys),
                    np.full(len(keys), -np.inf), np.array([float(ccap[k]) for k in keys]),
                    extra=slack)
            else:
                slack = sp.coo_matrix(([-1.0], ([0], [slack_col])), shape=(1, ncol))
                add(np.zeros(nx, np.int64), np.arange(nx), carb, 1, np.array([-np.inf]),
                    np.array([float(ccap)]), extra=slack)
        if self.power_cap_kw is not None:
            names = [d.name for d in sc.datacenters]
            pc = self.power_cap_kw
            caps = np.array([float(pc.get(n, np.inf)) if isinstance(pc, Mapping) else float(pc)
                             for n in names])
            kw = energy * 3600.0 / sc.slot_s
            db = dci * n_blocks + blk_of
            add(db, np.arange(nx), kw, len(names) * n_blocks,
                np.full(len(names) * n_blocks, -np.inf),
                np.repeat(caps, n_blocks) * np.tile(lens, len(names)))

        if exact:
            # Choice and capacity on z; link u - ub * z <= 0.
            add(inv, zc + np.arange(nx), np.ones(nx), uniq.size,
                np.where(must, 1.0, -np.inf), np.ones(uniq.size))
            add(pb, zc + np.arange(nx), n_g, n_pools * n_blocks,
                np.full(n_pools * n_blocks, -np.inf), np.repeat(pcap, n_blocks))
            link = sp.coo_matrix((-ub, (np.arange(nx), zc + np.arange(nx))), shape=(nx, ncol))
            add(np.arange(nx), np.arange(nx), np.ones(nx), nx, np.full(nx, -np.inf),
                np.zeros(nx), extra=link)
        # Separate weights: a shortfall is a fraction of a job, the slack kilograms.
        per_job = cost[tr] / np.maximum(rate[tr], 1e-12) if tr.any() else np.ones(1)
        w_short = SHORTFALL_FACTOR * max(float(per_job.max(initial=1.0)), 1.0)
        pos_c = carb > 1e-12
        per_kg = cost[pos_c] / carb[pos_c] if pos_c.any() else np.ones(1)
        w_slack = CARBON_SLACK_FACTOR * max(float(per_kg.max(initial=1.0)), 1.0)
        col_cost = np.concatenate([cost, np.full(n_short, w_short), [w_slack],
                                   np.zeros(ncol - zc)])
        col_lo = np.zeros(ncol)
        col_hi = np.concatenate([ub, np.full(n_short, np.inf),
                                 [np.inf if ccap is not None else 0.0], np.ones(ncol - zc)])
        a_mat = sp.vstack(rows).tocsc()
        r_lo, r_hi = np.concatenate(lo), np.concatenate(hi)
        h = new_highs()
        h.setOptionValue("time_limit", self.time_limit_s)
        h.setOptionValue("mip_rel_gap", self.mip_rel_gap)
        lp = highspy.HighsLp()
        lp.num_col_ = int(col_cost.size)
        lp.num_row_ = int(r_lo.size)
        lp.col_cost_ = col_cost
        lp.col_lower_ = col_lo
        lp.row_lower_ = np.where(np.isfinite(r_lo), r_lo, -highspy.kHighsInf)
        lp.row_upper_ = np.where(np.isfinite(r_hi), r_hi, highspy.kHighsInf)
        lp.col_upper_ = np.where(np.isfinite(col_hi), col_hi, highspy.kHighsInf)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = a_mat.indptr.astype(np.int32)
        lp.a_matrix_.index_ = a_mat.indices.astype(np.int32)
        lp.a_matrix_.value_ = a_mat.data.astype(float)
        if exact:
            lp.integrality_ = [highspy.HighsVarType.kContinuous] * zc + [
                highspy.HighsVarType.kInteger] * nx
        h.passModel(lp)
        h.run()
        status = h.getModelStatus()
        self.status = h.modelStatusToString(status)
        solve_s = time.perf_counter() - t0
        sol = np.asarray(h.getSolution().col_value, dtype=float)
        if status != highspy.HighsModelStatus.kOptimal or sol.size != col_cost.size:
            if not (exact and sol.size == col_cost.size
                    and status == highspy.HighsModelStatus.kTimeLimit):
                raise RuntimeError(f"offline model not solved: HiGHS status {self.status}; "
                                   f"raise time_limit_s or lower max_columns")
            log.warning("offline MILP hit the time limit; using its incumbent as the plan")
        x = sol[:nx]
        self.is_bound = not (exact and status == highspy.HighsModelStatus.kOptimal)
        self.optimum_cost = float(cost @ x)
        self.optimum_carbon_kg = float(carb @ x)
        self.optimum_energy_kwh = float(energy @ x)
        shorts = sol[nx:nx + n_short]
        self.shortfall = {jobs[j].job_id: float(s) for j, s in zip(train_ids, shorts,
                                                                   strict=True) if s > 1e-6}
        if self.shortfall:
            log.warning("offline plan cannot finish %d job(s) by their deadlines: %s",
                        len(self.shortfall), ", ".join(sorted(self.shortfall)))
        self.carbon_slack_kg = float(sol[slack_col]) if ccap is not None else 0.0
        if ccap is not None and sol[slack_col] > 1e-6:
            log.warning("offline plan exceeds the carbon cap by %.1f kg", sol[slack_col])
        if exact and status == highspy.HighsModelStatus.kOptimal:
            kind, bound_cost = "milp-optimal", self.optimum_cost
        elif exact:
            # Stopped at the time limit: the incumbent is no bound, the dual bound is (its
            # penalty terms are zero whenever nothing is short and the cap holds).
            kind = "milp-dual-bound"
            bound_cost = min(float(h.getInfo().mip_dual_bound), self.optimum_cost)
        else:
            kind, bound_cost = "lp-relaxation", self.optimum_cost
        self._bound = HindsightBound(cost=float(bound_cost),
                                     carbon_kg=float(self.optimum_carbon_kg), kind=kind)
        self.bound = self._bound.as_dict()
        self.solve_info = SolveInfo(status=self.status, solve_s=solve_s,
                                    objective=self.optimum_cost,
                                    gap=None if not exact else float(h.getInfo().mip_gap))
        log.info("offline %s: cost %.2f, %d columns, blocks of %d slots, %.1f s",
                 "MILP" if exact else "LP bound", self.optimum_cost, nx, block, solve_s)
        self._plan_from(sc, jobs, wins, x, job_of, blk_of, gcfg, flat, rate, starts, lens, ub)

    def _plan_from(self, sc: Scenario, jobs: list[Job], wins: list[tuple[int, int, float]],
                   x: NDArray[np.float64],
                   job_of: NDArray[np.int64], blk_of: NDArray[np.int64],
                   gcfg: NDArray[np.int64], flat: list[_Config], rate: NDArray[np.float64],
                   starts: NDArray[np.int64], lens: NDArray[np.int64],
                   ub: NDArray[np.float64]) -> None:
        """Per job: cumulative planned progress by slot end, and the preferred config."""
        n = sc.n_slots
        self._cum: dict[str, NDArray[np.float64]] = {}
        self._pref: dict[str, dict[int, tuple[str, str, int]]] = {}
        for j, job in enumerate(jobs):
            sel = np.flatnonzero((job_of == j) & (x > 1e-7))
            per_slot = np.zeros(n)
            pref: dict[int, tuple[str, str, int]] = {}
            best_x: dict[int, float] = {}
            for c in sel.tolist():
                b = int(blk_of[c])
                # Spread the block's planned work evenly over its slots in the window.
                s0 = max(int(starts[b]), wins[j][0])
                s1 = min(int(starts[b] + lens[b]), wins[j][1])
                slots = range(s0, s1)
                share = x[c] / max(ub[c], 1e-12)
                cf = flat[int(gcfg[c])]
                for s in slots:
                    per_slot[s] += rate[c] * share
                    if share > best_x.get(s, 0.0):
                        best_x[s] = share
                        pref[s] = (cf.datacenter, cf.gpu_type, cf.n_gpus)
            self._cum[job.job_id] = np.concatenate([[0.0], np.cumsum(per_slot)])
            self._pref[job.job_id] = pref

    # -- the replay ----------------------------------------------------------------------
    def decide(self, state: SlotState, forecast: Forecast) -> Allocation:
        """Run each job whose true progress lags the plan; prefer the planned configuration.

        Jobs that cannot meet their deadline otherwise (urgency ``R / (p_max L) >= 1``)
        are topped up greedily.
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
            end = sc.n_slots if js.job.deadline is None else sc.slot_of(js.job.deadline)
            left = max(end - t, 1)
            pmax = float(opts.progress[rows].max())
            urgent = pmax > 0 and js.remaining / (pmax * left) >= 0.6
            if deficit <= 1e-6 and not urgent:
                continue
            prio[j] = deficit + (10.0 if urgent else 0.0)
            eff = opts.progress[rows] / np.maximum(opts.cost[rows], 1e-12)
            base = eff / max(float(eff.max()), 1e-12)
            if urgent:
                base = opts.progress[rows] / max(pmax, 1e-12)
                reasons[js.job.job_id] = "behind the plan near its deadline (top-up)"
            coef[rows] = np.where(opts.progress[rows] > 0, 1.0 + base + 2.0 * match
                                  + 1.0 * same_dc, -1.0)
        prob = build_slot_problem(state, opts, coef, self.power_cap_kw)
        chosen = greedy_choice(prob, priority=prio)
        placements = {state.jobs[int(opts.job_index[k])].job.job_id: opts.placement(int(k))
                      for k in np.flatnonzero(chosen)}
        return Allocation(placements=placements, reasons=reasons)
