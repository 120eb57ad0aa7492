"""Receding-horizon look-ahead: plan every arrived job jointly over the forecast window.

Every ``replan_slots`` slots (and whenever a job arrives that the plan does not know), an LP
over the next ``window_h`` hours of the forecast plans all waiting and running jobs together,
sharing pool capacity, power caps and the carbon budget among them. Slots are grouped into
blocks ``b`` (the first ``fine_slots`` slots one by one, then ``block_slots`` slots per
block; coarser when the model would exceed ``max_columns``). Columns: ``x[j,b,k]``, slots of
block ``b`` that job ``j`` runs configuration ``k`` (datacenter, GPU type, count; rates and
energies from :func:`workbench.policies.offline.job_configs`, scaled by the job's online
throughput estimate), ``m[j,d]`` in [0, 1] (the job moves its data to datacenter ``d``),
``short_j`` and a carbon slack ``s``::

    min  sum E_k (p[b,d_k] + q c[b,d_k]/1000) x  +  sum M_jd m  +  B sum short  +  B_c s
    s.t. sum_k x[j,b,k] <= len_jb            training job j, block b in its window
         sum_k x[j,b,k]  = act_jb            inference j: its active slots of b
         sum n_k x[j,b,k] <= C_p len_b       pool p, block b        (capacity, shared)
         sum P_k x[j,b,k] <= Pcap_d len_b    datacenter d, block b  (power cap)
         sum_{k in d} x[j,b,k] <= len_jb m[j,d]      d away from the job's data
         sum r_k x[j,.,k] - l_jd m[j,d] + short_j >= need_j
         sum carbon x - s <= budget          (carbon cap, remaining share)

``p, c`` are the forecast's price and carbon averaged over the block (the policy never sees
the truth beyond the current slot), ``q`` an optional carbon price (currency/kg). Moving
costs its transfer energy ``M_jd = GB * kWh/GB * p`` and its transfer time ``l_jd`` (work
lost) once. ``need_j`` is the remaining work when the deadline (less ``deadline_margin_slots``)
falls inside the window, else what keeps it on its pace line, a straight line from its
arrival to a tenth of its life before its deadline (``PACE_MARGIN``; a job ahead of the line
needs less, :meth:`LookaheadPolicy._window_need`), plus one restart's worth of work for a
paused job. Equal prices: the earliest slot wins.

**From the plan to the slot.** The dual ``mu_j >= 0`` of job ``j``'s work row is the plan's
price of a unit of its progress (currency), contention included: when jobs compete for a
pool, the pool's dual raises the ``mu`` of the jobs that need it. The slot's integral
decision is the per-slot MILP (:class:`~workbench.policies.fastslot.FastSlotSolver`) over
the slot's true options with::

    coef_i = mu_j * progress_i - cost_i - q * carbon_i + mu_j * pmax_j * share_i

(``share_i = min(quota, 1)``, the slots the plan still gives the job on option ``i``'s
configuration in the current re-plan period: it carries the plan's choice over the restart
loss the LP does not see; the job already running keeps its GPUs until its quota is spent
rather than swap every slot) and ``-cost_i - q carbon_i`` for inference services (placed
every slot).
An option that finishes the job values its progress at a full slot's work at least (the
slot is paid whole). A job whose deadline leaves no slack (``R_j >= 0.9 * pmax_j * L_j``)
runs first. A move must pay for its round trip (:mod:`workbench.policies.migration`).
Between re-plans the plan is reused (its duals and quotas), which is the warm start: a
re-plan only happens when the forecast has moved on by ``replan_slots`` or a job arrived.

A window LP that fails (HiGHS status other than optimal) is reported in the slot's
``SolveInfo`` (``fallback``, with the message): the previous plan stays, and a job it does not
know prices its progress at its dearest option now, so it runs rather than waits.

Reads only ``state.t``, ``state.time``, ``state.jobs``, the scenario's static facts and the
forecast: no true future price and no future arrival.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import highspy
import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from workbench.model import Job, ScenarioView
from workbench.policies._highs import new_highs
from workbench.policies.base import (
    RESTART_S_DEFAULT,
    Allocation,
    Forecast,
    JobState,
    NoHindsightBound,
    Placement,
    SlotState,
    SolveInfo,
    check_caps,
    slot_options,
)
from workbench.policies.fastslot import FastSlotSolver
from workbench.policies.greedy import greedy_choice
from workbench.policies.migration import (
    moves_that_pay,
    one_way_move_cost,
    transfer_kwh,
)
from workbench.policies.milp import build_slot_problem, current_prices
from workbench.policies.offline import _Config, job_configs

log = logging.getLogger(__name__)

PACE_MARGIN = 0.1
"""Share of a job's life (arrival to deadline) by which its pace line finishes early."""

_SHORT_WEIGHT = 1e3
_URGENT = 0.9
_GLOBAL = "global"


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
    quota : mapping job id -> mapping (datacenter, gpu type, count) -> float
        Slots the plan runs each job on each configuration over the first ``period_slots``.
    shortfall : mapping job id -> float
        Work the window cannot fit (fraction of the job).
    cost : float
        Planned cost over the window (forecast prices), scenario currency.
    status : str
        HiGHS model status.
    solve_s : float
    n_columns : int
    """

    t0: int
    block_start: NDArray[np.int64]
    block_len: NDArray[np.int64]
    mu: Mapping[str, float]
    share: Mapping[tuple[str, int], Mapping[tuple[str, str, int], float]]
    quota: Mapping[str, Mapping[tuple[str, str, int], float]]
    shortfall: Mapping[str, float]
    cost: float
    status: str
    solve_s: float
    n_columns: int

    def block_of(self, t: int) -> int:
        """Index of the block holding slot ``t`` (clipped to the last block)."""
        off = t - self.t0
        pos = int(np.searchsorted(self.block_start, off, side="right")) - 1
        return min(max(pos, 0), int(self.block_start.size) - 1)


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


def _window_columns(
    bstart: NDArray[np.int64], blen: NDArray[np.int64], ends: NDArray[np.int64],
    allowed: list[NDArray[np.bool_]],
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64], NDArray[np.float64]]:
    """The window LP's columns: for job ``j`` (in order), every block ``b`` starting before
    its end ``ends[j]`` (in order) and every allowed configuration ``k`` (in order), with
    the slots of the block inside the job's window as the bound. Returns job, block,
    configuration and bound per column."""
    parts: list[tuple[NDArray[np.int64], ...]] = []
    for j, (e, ok) in enumerate(zip(ends.tolist(), allowed, strict=True)):
        ks = np.flatnonzero(ok)
        nb = int(np.searchsorted(bstart, e, side="left"))
        if nb == 0 or ks.size == 0:
            continue
        length = np.minimum(bstart[:nb] + blen[:nb], e) - bstart[:nb]
        parts.append((np.full(nb * ks.size, j, dtype=np.int64),
                      np.repeat(np.arange(nb, dtype=np.int64), ks.size),
                      np.tile(ks.astype(np.int64), nb), np.repeat(length, ks.size)))
    if not parts:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z, np.zeros(0)
    return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
            np.concatenate([p[2] for p in parts]),
            np.concatenate([p[3] for p in parts]).astype(float))


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


class LookaheadPolicy(NoHindsightBound):
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
    carbon_cap_kg : float or mapping datacenter -> float, optional
        Carbon cap over the horizon, kg; each window gets the remaining budget's share.
    power_cap_kw : float or mapping datacenter -> float, optional
        Facility power cap per datacenter and slot, kW (hard in the slot MILP).
    carbon_price_per_kg : float
        Optional internal carbon price (currency/kg) added to the energy cost.
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
    arrival_replan_slots : int
        A job the plan does not know re-plans the window once at least this many slots
        have passed since the last plan. 1 (default): at once, in the slot it arrives. A
        larger value is the *scale mode* for traces with arrivals in nearly every slot
        (the Philly trace: about 16 per 15-minute slot), where a window LP per slot
        dominates the run: until the next plan a new job prices its progress at its
        dearest option now (as after a failed LP), so it runs rather than waits.
        Measured in ``bench/scale.py`` (docs/results.md, scale section).
    time_limit_s, mip_rel_gap : float
        Per solve (LP and slot MILP).
    """

    name = "lookahead"

    def __init__(
        self,
        *,
        window_h: float = 24.0,
        replan_slots: int | None = None,
        fine_slots: int | None = None,
        block_slots: int | None = None,
        carbon_cap_kg: float | Mapping[str, float] | None = None,
        power_cap_kw: float | Mapping[str, float] | None = None,
        carbon_price_per_kg: float = 0.0,
        gpu_counts: tuple[int, ...] | None = None,
        restart_s: float = RESTART_S_DEFAULT,
        deadline_margin_slots: int = 2,
        min_dwell_slots: int | None = None,
        max_columns: int = 60_000,
        arrival_replan_slots: int = 1,
        time_limit_s: float = 30.0,
        mip_rel_gap: float = 1e-3,
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
        check_caps(carbon_cap_kg, "carbon_cap_kg", "kg")
        check_caps(power_cap_kw, "power_cap_kw", "kW")
        self.window_h = float(window_h)
        self._knob_slots = (replan_slots, fine_slots, block_slots)
        self.replan_slots = self.fine_slots = self.block_slots = 1
        self.carbon_cap_kg = carbon_cap_kg
        self.power_cap_kw = power_cap_kw
        self.carbon_price_per_kg = float(carbon_price_per_kg)
        self.gpu_counts = gpu_counts
        self.restart_s = float(restart_s)
        self.deadline_margin_slots = deadline_margin_slots
        self._min_dwell_knob = min_dwell_slots
        self.min_dwell_slots = 0
        self.max_columns = max_columns
        self.arrival_replan_slots = arrival_replan_slots
        self.time_limit_s = float(time_limit_s)
        self.mip_rel_gap = float(mip_rel_gap)
        self._fast = FastSlotSolver()
        self._sc: ScenarioView | None = None
        self.plan: WindowPlan | None = None
        self.replans = 0

    # -- lifecycle -----------------------------------------------------------------------
    def reset(self, scenario: ScenarioView) -> None:
        """Forget the plan; keep the static facts of ``scenario`` (never its grid or jobs)."""
        self._sc = scenario
        hour = max(int(round(3600 / scenario.slot_s)), 1)
        self.replan_slots, self.fine_slots, self.block_slots = (
            hour if v is None else v for v in self._knob_slots)
        self.min_dwell_slots = (2 * hour if self._min_dwell_knob is None
                                else self._min_dwell_knob)
        self._fast.reset()
        self._cfgs: dict[str, list[_Config]] = {}
        self._cfg_arrays: dict[str, tuple[NDArray[Any], ...]] = {}
        self._moved_at: dict[str, int] = {}
        self._where: dict[str, str] = {}
        self.plan = None
        self.replans = 0
        self._quota: dict[str, dict[tuple[str, str, int], float]] = {}
        cap = self.carbon_cap_kg
        if isinstance(cap, Mapping):
            unknown = sorted(set(cap) - {dc.name for dc in scenario.datacenters})
            if unknown:
                raise ValueError(f"carbon_cap_kg names unknown datacenters {unknown}")

    def describe(self) -> dict[str, Any]:
        """The knobs, for run logs."""
        return {"policy": self.name, "window_h": self.window_h,
                "replan_slots": self.replan_slots,
                "arrival_replan_slots": self.arrival_replan_slots,
                "carbon_cap_kg": self.carbon_cap_kg,
                "power_cap_kw": self.power_cap_kw,
                "carbon_price_per_kg": self.carbon_price_per_kg,
                "restart_s": self.restart_s, "min_dwell_slots": self.min_dwell_slots}

    # -- static helpers ------------------------------------------------------------------
    def _configs(self, job: Job) -> list[_Config]:
        got = self._cfgs.get(job.job_id)
        if got is None:
            assert self._sc is not None
            menu = self.gpu_counts if job.is_training else None
            got = job_configs(self._sc, job, menu)
            self._cfgs[job.job_id] = got
        return got

    def _config_table(self, jobs: list[JobState], cfgs: list[list[_Config]]
                      ) -> tuple[NDArray[Any], ...]:
        """The window's configurations as arrays: per job its first row (offsets), then per
        row datacenter, pool, GPU count, energy per slot (kWh) and rate (each job's arrays
        kept with its configurations)."""
        arrays = []
        for js, cf in zip(jobs, cfgs, strict=True):
            got = self._cfg_arrays.get(js.job.job_id)
            if got is None:
                got = (np.array([c.dc for c in cf], dtype=np.int64),
                       np.array([c.pool for c in cf], dtype=np.int64),
                       np.array([c.n_gpus for c in cf], dtype=float),
                       np.array([c.energy_kwh for c in cf], dtype=float),
                       np.array([c.rate for c in cf], dtype=float))
                self._cfg_arrays[js.job.job_id] = got
            arrays.append(got)
        offsets = np.cumsum([0] + [len(c) for c in cfgs])[:-1].astype(np.int64)
        if not arrays:
            return (offsets, np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0),
                    np.zeros(0), np.zeros(0))
        return (offsets, *(np.concatenate([a[i] for a in arrays]) for i in range(5)))

    def _slot_index(self, when: Any) -> int:
        assert self._sc is not None
        return math.floor((when - self._sc.start).total_seconds() / self._sc.slot_s + 1e-9)

    def _slots_left(self, js: JobState, t: int) -> int:
        """Slots from ``t`` to the job's deadline (the horizon's end if none), at least 1."""
        assert self._sc is not None
        end = (self._sc.n_slots if js.job.deadline is None
               else self._slot_index(js.job.deadline))
        return max(end - t, 1)

    # -- the window LP -------------------------------------------------------------------
    def solve_window(self, state: SlotState, forecast: Forecast) -> WindowPlan:
        """Build and solve the window LP at slot ``state.t`` (see the module docstring)."""
        sc = self._sc
        assert sc is not None
        t0c = time.perf_counter()
        t = state.t
        slot_s = float(sc.slot_s)
        n_win = max(min(int(round(self.window_h * 3600 / slot_s)), sc.n_slots - t), 1)
        dcs = [dc.name for dc in sc.datacenters]
        ridx = [forecast.region_index(dc.region) for dc in sc.datacenters]
        rows_fc = np.minimum(np.arange(n_win), forecast.price_per_kwh.shape[0] - 1)
        fprice = np.asarray(forecast.price_per_kwh, dtype=float)[rows_fc][:, ridx]
        fcarbon = np.asarray(forecast.carbon_g_per_kwh, dtype=float)[rows_fc][:, ridx]
        jobs = [js for js in state.jobs if not js.job.is_training or js.remaining > 1e-9]
        cfgs = [self._configs(js.job) for js in jobs]
        est = sum(len(c) for c in cfgs)
        block = self.block_slots
        while True:
            bstart, blen = window_blocks(n_win, self.fine_slots, block)
            if est * bstart.size <= self.max_columns or block >= n_win:
                break
            block *= 2
        n_b = bstart.size
        bprice = np.add.reduceat(fprice, bstart, axis=0) / blen[:, None]
        bcarbon = np.add.reduceat(fcarbon, bstart, axis=0) / blen[:, None]
        q = self.carbon_price_per_kg

        # Columns x[j,b,k] (built per job in numpy: _window_columns).
        ends = np.zeros(len(jobs), dtype=np.int64)
        allowed: list[NDArray[np.bool_]] = []
        need = np.zeros(len(jobs))
        origin: list[str | None] = []
        for j, (js, cf) in enumerate(zip(jobs, cfgs, strict=True)):
            job = js.job
            if job.is_training:
                left = self._slots_left(js, t) - self.deadline_margin_slots
                e = int(np.clip(left, 1, n_win))
                need[j] = self._window_need(js, t, left, n_win)
                if js.placement is None:
                    # The LP has no restarts: charge the one a paused job pays to resume.
                    need[j] += self.restart_s / slot_s * max((c.rate for c in cf), default=0.0)
                origin.append(js.last_datacenter or job.home)
            else:
                assert job.end is not None
                e = int(np.clip(self._slot_index(job.end) - t, 1, n_win))
                origin.append(None)
            ends[j] = e
            o = origin[j]
            allowed.append(np.array([o is None or c.datacenter == o or sc.link(
                str(o), c.datacenter) is not None for c in cf], dtype=bool))
        job_of, blk_of, cfg_of, ubx = _window_columns(bstart, blen, ends, allowed)
        nx = job_of.size
        table = self._config_table(jobs, cfgs)
        gidx = table[0][job_of] + cfg_of
        dci = table[1][gidx]
        pool = table[2][gidx]
        n_g = table[3][gidx]
        energy = table[4][gidx]
        scale = np.array([js.throughput_scale for js in jobs], dtype=float)[job_of]
        rate = table[5][gidx] * scale
        # With the online speed estimate the job needs fewer (or more) slots for its work;
        # the energy per slot stays the modelled one.
        price_x = bprice[blk_of, dci] if nx else np.zeros(0)
        carb_x = energy * (bcarbon[blk_of, dci] if nx else np.zeros(0)) / 1000.0
        # Among equally cheap slots the earliest wins (1e-4 per slot): no procrastination.
        cost_x = (energy * price_x + q * carb_x) * (1.0 + 1e-4 * bstart[blk_of])
        training = np.array([js.job.is_training for js in jobs], dtype=bool)

        # Move columns m[j,d] for each (job, datacenter away from its data) that has x.
        dc_pos = {name: i for i, name in enumerate(dcs)}
        o_idx = np.array([-1 if o is None else dc_pos.get(o, -2) for o in origin],
                         dtype=np.int64)
        away = ((o_idx[job_of] != -1) & (dci != o_idx[job_of]) if nx
                else np.zeros(0, dtype=bool))
        # (job, datacenter) pairs as j * n_dc + d, sorted (the order of sorted tuples).
        mkey = np.unique(job_of[away] * len(dcs) + dci[away])
        mkeys = [(int(k) // len(dcs), int(k) % len(dcs)) for k in mkey]
        nm = len(mkeys)
        mcost = np.zeros(nm)
        mlost = np.zeros(nm)
        best_rate = _group_max(job_of * len(dcs) + dci, rate, len(jobs) * len(dcs))
        for i, (j, d) in enumerate(mkeys):
            js = jobs[j]
            src = str(origin[j])
            link = sc.link(src, dcs[d])
            assert link is not None
            gb = js.job.checkpoint_gb if js.last_datacenter is not None else js.job.dataset_gb
            mcost[i] = gb * link.transfer_energy_kwh_per_gb * float(np.mean(bprice[:, d]))
            mlost[i] = link.transfer_s(gb) / slot_s * best_rate[j * len(dcs) + d]
        train_ids = np.flatnonzero(training)
        n_short = train_ids.size
        base_short = nx + nm
        slack_col = base_short + n_short
        ncol = slack_col + 1
        rows: list[sp.coo_matrix] = []
        lo: list[NDArray[np.float64]] = []
        hi: list[NDArray[np.float64]] = []

        def add(r: NDArray[np.int64], c: NDArray[np.int64], v: NDArray[np.float64], n: int,
                r_lo: NDArray[np.float64], r_hi: NDArray[np.float64]) -> int:
            rows.append(sp.coo_matrix((v, (r, c)), shape=(n, ncol)))
            lo.append(r_lo)
            hi.append(r_hi)
            return sum(a.size for a in lo) - n

        # One configuration at a time per (job, block); inference exactly its active slots.
        jb = job_of * n_b + blk_of
        uniq, inv = np.unique(jb, return_inverse=True)
        cap_jb = np.zeros(uniq.size)
        np.maximum.at(cap_jb, inv, ubx)
        must = ~training[uniq // n_b] if uniq.size else np.zeros(0, dtype=bool)
        add(inv, np.arange(nx), np.ones(nx), uniq.size, np.where(must, cap_jb, -np.inf), cap_jb)
        # Pool capacity per block: the contention every job shares.
        n_pools = len(sc.pools)
        pcap = np.array([p.count for p in sc.pools], dtype=float)
        add(pool * n_b + blk_of, np.arange(nx), n_g, n_pools * n_b,
            np.full(n_pools * n_b, -np.inf), np.repeat(pcap, n_b) * np.tile(blen, n_pools))
        if self.power_cap_kw is not None:
            pc = self.power_cap_kw
            caps = np.array([float(pc.get(n, np.inf)) if isinstance(pc, Mapping) else float(pc)
                             for n in dcs])
            add(dci * n_b + blk_of, np.arange(nx), energy * 3600.0 / slot_s, len(dcs) * n_b,
                np.full(len(dcs) * n_b, -np.inf), np.repeat(caps, n_b) * np.tile(blen, len(dcs)))
        # Data movement: x in a datacenter away from the data needs its move column.
        if nm:
            ax = np.flatnonzero(away)
            mcol = np.searchsorted(mkey, job_of[ax] * len(dcs) + dci[ax]).astype(np.int64)
            grp = (job_of[ax] * len(dcs) + dci[ax]) * n_b + blk_of[ax]
            g_u, g_inv = np.unique(grp, return_inverse=True)
            g_len = np.zeros(g_u.size)
            np.maximum.at(g_len, g_inv, ubx[ax])
            g_m = np.zeros(g_u.size, dtype=np.int64)
            g_m[g_inv] = mcol
            add(np.concatenate([g_inv, np.arange(g_u.size)]),
                np.concatenate([ax, nx + g_m]),
                np.concatenate([np.ones(ax.size), -g_len]), g_u.size,
                np.full(g_u.size, -np.inf), np.zeros(g_u.size))
        # Work: sum r x - l m + short >= need (one row per training job).
        pos = np.full(len(jobs), -1)
        pos[train_ids] = np.arange(n_short)
        tr = training[job_of] if nx else np.zeros(0, dtype=bool)
        m_job = (mkey // len(dcs)).astype(np.int64)
        work_row0 = add(
            np.concatenate([pos[job_of[tr]], pos[m_job], np.arange(n_short)]),
            np.concatenate([np.flatnonzero(tr), nx + np.arange(nm),
                            base_short + np.arange(n_short)]),
            np.concatenate([rate[tr], -mlost, np.ones(n_short)]), n_short,
            need[train_ids], np.full(n_short, np.inf))
        # Carbon cap: the remaining budget's share of the window, with a priced slack.
        budget = self._window_carbon_budget(state, n_win)
        if budget is not None:
            add(np.zeros(nx + 1, np.int64), np.append(np.arange(nx), slack_col),
                np.append(carb_x, -1.0), 1, np.array([-np.inf]), np.array([budget]))
        per_work = cost_x[tr] / np.maximum(rate[tr], 1e-12)
        big = _SHORT_WEIGHT * max(float(np.max(per_work, initial=0.0)), 1.0)
        per_kg = energy * price_x / np.maximum(carb_x, 1e-12)
        big_kg = _SHORT_WEIGHT * max(float(np.max(per_kg, initial=0.0)), 1.0)
        col_cost = np.concatenate([cost_x, mcost, np.full(n_short, big), [big_kg]])
        col_hi = np.concatenate([ubx, np.ones(nm), np.full(n_short, np.inf),
                                 [np.inf if budget is not None else 0.0]])
        a_mat = sp.vstack(rows).tocsc() if rows else sp.csc_matrix((0, ncol))
        r_lo, r_hi = np.concatenate(lo), np.concatenate(hi)
        h = new_highs()
        h.setOptionValue("time_limit", self.time_limit_s)
        lp = highspy.HighsLp()
        lp.num_col_ = int(ncol)
        lp.num_row_ = int(r_lo.size)
        lp.col_cost_ = col_cost
        lp.col_lower_ = np.zeros(ncol)
        lp.col_upper_ = np.where(np.isfinite(col_hi), col_hi, highspy.kHighsInf)
        lp.row_lower_ = np.where(np.isfinite(r_lo), r_lo, -highspy.kHighsInf)
        lp.row_upper_ = np.where(np.isfinite(r_hi), r_hi, highspy.kHighsInf)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = a_mat.indptr.astype(np.int32)
        lp.a_matrix_.index_ = a_mat.indices.astype(np.int32)
        lp.a_matrix_.value_ = a_mat.data.astype(float)
        h.passModel(lp)
        h.run()
        status = h.getModelStatus()
        status_s = h.modelStatusToString(status)
        sol = h.getSolution()
        if status != highspy.HighsModelStatus.kOptimal or len(sol.col_value) != ncol:
            raise RuntimeError(f"look-ahead LP at slot {t} not solved: HiGHS {status_s}")
        x = np.asarray(sol.col_value, dtype=float)
        duals = np.asarray(sol.row_dual, dtype=float)
        mu = {jobs[int(j)].job.job_id: max(float(duals[work_row0 + i]), 0.0)
              for i, j in enumerate(train_ids)}
        share: dict[tuple[str, int], dict[tuple[str, str, int], float]] = {}
        quota: dict[str, dict[tuple[str, str, int], float]] = {}
        for col in np.flatnonzero(x[:nx] > 1e-7).tolist():
            conf = cfgs[int(job_of[col])][int(cfg_of[col])]
            jid = jobs[int(job_of[col])].job.job_id
            key = (jid, int(blk_of[col]))
            sd = share.setdefault(key, {})
            ck2 = (conf.datacenter, conf.gpu_type, conf.n_gpus)
            sd[ck2] = sd.get(ck2, 0.0) + float(x[col] / max(ubx[col], 1e-12))
            b0, bl = int(bstart[blk_of[col]]), int(blen[blk_of[col]])
            inside = max(min(b0 + bl, self.replan_slots) - b0, 0) / bl
            if inside > 0:
                qd = quota.setdefault(jid, {})
                qd[ck2] = qd.get(ck2, 0.0) + float(x[col]) * inside
        shortfall = {jobs[int(j)].job.job_id: float(x[base_short + i])
                     for i, j in enumerate(train_ids) if x[base_short + i] > 1e-6}
        plan = WindowPlan(t0=t, block_start=bstart, block_len=blen, mu=mu, share=share,
                          quota=quota,
                          shortfall=shortfall, cost=float(cost_x @ x[:nx] + mcost @ x[nx:nx + nm]),
                          status=status_s, solve_s=time.perf_counter() - t0c, n_columns=ncol)
        log.debug("look-ahead at slot %d: %d jobs, %d columns, %d blocks of up to %d slots, "
                  "%.2f s", t, len(jobs), ncol, n_b, block, plan.solve_s)
        return plan

    def _window_need(self, js: JobState, t: int, left: int, n_win: int) -> float:
        """Work (fraction of the job) the window must do: all of it when the deadline (less
        the margin) falls inside the window, else what keeps the job on its straight line
        from arrival ``a`` to ``D' = D - m (D - a)`` (``m`` = :data:`PACE_MARGIN`):
        ``max(R - (D' - t - W) / (D' - a), 0)``.

        The line is anchored at the arrival ``a``: a job that ran ahead of its pace (in the
        cheap hours) needs correspondingly less of the next window. (A rolling share
        ``R * W / (D - t)`` asks for almost the same work at every re-plan however much the
        job just did, so in a cheap stretch it runs on far beyond its pace.)
        """
        if left <= n_win:
            return js.remaining
        a = min(self._slot_index(js.job.arrival), t)
        life = max(t + left - a, 1)
        # The line ends PACE_MARGIN of the job's life before its deadline: slack for the
        # restarts, transfers and contention the LP does not see.
        end = left - PACE_MARGIN * life
        if end <= n_win:
            return js.remaining
        return max(js.remaining - (end - n_win) / (life * (1.0 - PACE_MARGIN)), 0.0)

    def _window_carbon_budget(self, state: SlotState, n_win: int) -> float | None:
        """The carbon cap's remaining budget, pro rata for the window (kg), or None."""
        cap = self.carbon_cap_kg
        sc = self._sc
        if cap is None or sc is None:
            return None
        total = float(sum(cap.values())) if isinstance(cap, Mapping) else float(cap)
        left = max(sc.n_slots - state.t, 1)
        return max(total - state.carbon_kg_so_far, 0.0) * min(n_win / left, 1.0)

    # -- the decision --------------------------------------------------------------------
    def decide(self, state: SlotState, forecast: Forecast) -> Allocation:
        if self._sc is None:
            self.reset(state.scenario)
        sc = self._sc
        assert sc is not None
        t = state.t
        self._track_moves(state)
        known = self.plan.mu if self.plan is not None else {}
        new_job = any(js.job.is_training and js.job.job_id not in known for js in state.jobs)
        lp_failed = ""
        if (self.plan is None or t - self.plan.t0 >= self.replan_slots
                or (new_job and t - self.plan.t0 >= self.arrival_replan_slots)):
            try:
                self.plan = self.solve_window(state, forecast)
                self.replans += 1
                self._quota = {j: dict(q) for j, q in self.plan.quota.items()}
            except RuntimeError as exc:
                # Reported through SolveInfo.fallback (the run's warnings), never silent: the
                # previous plan stays; jobs it does not know run at their cheapest option.
                lp_failed = str(exc)
                log.debug(lp_failed)
                if self.plan is None:
                    self.plan = WindowPlan(
                        t0=t, block_start=np.zeros(1, dtype=np.int64),
                        block_len=np.ones(1, dtype=np.int64), mu={}, share={}, quota={},
                        shortfall={}, cost=math.nan, status="failed", solve_s=0.0,
                        n_columns=0)
        plan = self.plan
        price, carbon = current_prices(sc, forecast)
        opts = slot_options(state, price, carbon, restart_s=self.restart_s,
                            gpu_counts=None if self.gpu_counts is None else {
                                js.job.job_id: tuple(self.gpu_counts) for js in state.jobs
                                if js.job.is_training})
        n_jobs = len(state.jobs)
        q = self.carbon_price_per_kg
        # Integral decisions from the plan: each job's quota is the slots the plan gives it
        # over the re-plan period; a job with quota left gets the bonus, the one already
        # running keeps its GPUs (no restart: more progress) until its quota is spent.
        coef = -(opts.cost + q * opts.carbon_kg)
        mu_opt = np.zeros(len(opts))
        pmax = np.zeros(n_jobs)
        if len(opts):
            np.maximum.at(pmax, opts.job_index, opts.progress)
        urgent = np.zeros(n_jobs, dtype=bool)
        prio = np.zeros(n_jobs)
        for j, js in enumerate(state.jobs):
            if not js.job.is_training:
                continue
            jid = js.job.job_id
            rows = np.flatnonzero(opts.job_index == j)
            if rows.size == 0:
                continue
            if jid in plan.mu:
                mu = float(plan.mu[jid])
            else:
                # No plan for this job (the window LP failed): price its progress at its
                # dearest option now, so that it runs (cheapest first) rather than waits.
                ok = opts.progress[rows] > 0
                mu = 1.1 * float(np.max(opts.cost[rows][ok] / opts.progress[rows][ok],
                                        initial=0.0))
            mu_opt[rows] = mu
            sh = self._quota.get(jid, {})
            bonus = np.array([min(sh.get((str(opts.datacenter[k]), str(opts.gpu_type[k]),
                                          int(opts.n_gpus[k])), 0.0), 1.0) for k in rows])
            # A job that finishes in this slot pays the whole slot whatever work is left:
            # value its last slot at a full slot's work, or its tail is never worth running.
            full = max((c.rate for c in self._configs(js.job)), default=0.0) * js.throughput_scale
            fin = opts.progress[rows] >= js.remaining - 1e-9
            worth = np.where(fin, np.maximum(opts.progress[rows], full), opts.progress[rows])
            coef[rows] += mu * worth + mu * pmax[j] * bonus
            left = self._slots_left(js, t)
            urgent[j] = pmax[j] > 0 and js.remaining >= _URGENT * pmax[j] * left
            prio[j] = mu * pmax[j] + (1e9 if urgent[j] else 0.0)
        if urgent.any():
            # A job without slack runs first, at its fastest option.
            ref = max(float(np.max(np.abs(coef), initial=0.0)), 1.0)
            u = urgent[opts.job_index]
            coef[u] += 10.0 * ref * opts.progress[u] / np.maximum(pmax[opts.job_index[u]],
                                                                    1e-12)
        keep = self._round_trip_filter(state, opts, coef, mu_opt, pmax, price)
        prob = build_slot_problem(state, opts, coef, self.power_cap_kw)
        t1 = time.perf_counter()
        picked, info = self._fast(prob, keep=keep, mip_rel_gap=self.mip_rel_gap,
                                  time_limit_s=self.time_limit_s)
        if picked is None:
            msg = (f"slot {t}: slot MILP {info.status} ({info.message}); using the greedy "
                   f"feasible allocation")
            log.debug(msg)
            sub = prob.subset(keep)
            chosen = np.flatnonzero(keep)[greedy_choice(sub, priority=prio)]
            info = SolveInfo(status=info.status, solve_s=time.perf_counter() - t1,
                             fallback=True, message=msg)
        else:
            chosen = np.flatnonzero(picked)
        placements: dict[str, Placement] = {}
        reasons: dict[str, str] = {}
        gains: dict[str, float] = {}
        for k in chosen.tolist():
            js = state.jobs[int(opts.job_index[k])]
            jid = js.job.job_id
            placements[jid] = opts.placement(k)
            if jid in self._quota:
                # One slot of the period's quota spent, taken from its largest entries.
                spend = 1.0
                for key in sorted(self._quota[jid], key=self._quota[jid].__getitem__,
                                  reverse=True):
                    use = min(spend, self._quota[jid][key])
                    self._quota[jid][key] -= use
                    spend -= use
                    if spend <= 0:
                        break
            if opts.moves[k]:
                gains[jid] = float(coef[k])
                reasons[jid] = (f"move {js.last_datacenter}->{opts.datacenter[k]}: the "
                                f"window plan's gain pays for the round trip")
            elif urgent[int(opts.job_index[k])]:
                reasons[jid] = "no slack left before its deadline (urgent)"
        queues = {f"mu:{j}": v for j, v in plan.mu.items()}
        info = SolveInfo(status=info.status, solve_s=info.solve_s + (
            plan.solve_s if plan.t0 == t else 0.0), objective=info.objective, gap=info.gap,
            fallback=info.fallback or bool(lp_failed),
            message="; ".join(m for m in (lp_failed, info.message) if m))
        return Allocation(placements=placements, solve=info, expected_gain=gains,
                          reasons=reasons, queues=queues)

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

    def _round_trip_filter(self, state: SlotState, opts: Any, coef: NDArray[np.float64],
                           mu_opt: NDArray[np.float64], pmax: NDArray[np.float64],
                           price: Mapping[str, float]) -> NDArray[np.bool_]:
        sc = self._sc
        assert sc is not None
        if not len(opts) or not opts.moves.any():
            return np.ones(len(opts), dtype=bool)
        t = state.t
        region = {dc.name: dc.region for dc in sc.datacenters}
        p_opt = np.array([price[region[str(d)]] for d in opts.datacenter])
        # Steady progress per slot on the option: without the transfer time of the move.
        useful = np.maximum(sc.slot_s - opts.transfer_s - self.restart_s, 1.0)
        steady = np.where(opts.moves, opts.progress * (sc.slot_s - self.restart_s) / useful,
                          opts.progress)
        one_way = one_way_move_cost(opts, mu_opt, steady, transfer_kwh(sc, opts) * p_opt,
                                    float(sc.slot_s))
        left = np.array([self._slots_left(js, t) for js in state.jobs], dtype=float)
        rem = np.array([js.remaining for js in state.jobs], dtype=float)
        to_finish = rem[opts.job_index] / np.maximum(steady, 1e-12)
        cap = float(max(round(self.window_h * 3600 / sc.slot_s), 1))
        # The window plan moved the job knowing the forecast (and capacity, which a price
        # run alone does not see): its dwell is the plan's, capped by the window.
        dwell = np.minimum(np.minimum(to_finish, left[opts.job_index]), cap)
        finishes = to_finish <= np.minimum(left[opts.job_index], cap)
        recent = np.array([t - self._moved_at.get(js.job.job_id, -10**9) < self.min_dwell_slots
                           for js in state.jobs], dtype=bool)
        keep, _ = moves_that_pay(opts, coef, one_way, dwell, finishes, recent)
        return keep
