"""The look-ahead decomposed by datacenter groups: a fleet's slot decided group by group.

The monolithic look-ahead (:mod:`workbench.policies.lookahead`) gives every job a column per
block and configuration in every datacenter: at 50 sites and 10,000 jobs its window LP has
millions of columns and its slot MILP millions of options. Here the sites are partitioned
into groups ``G_1 .. G_m`` of about ``group_size`` near ones (:func:`datacenter_groups`);
every job belongs to one group at a time, and each group runs its own look-ahead (window LP
over its pools, slot MILP over its options) on its jobs, on a view of the scenario with only
its pools (:func:`group_view`: the other sites stay, without GPUs, so a job's data can move
in from them). The groups are
independent given the assignment: they share no pool, and power caps are per site. What
crosses groups is priced:

**Capacity, by the groups' duals.** At every re-plan (every ``replan_slots``) each group
reports the capacity price ``lambda_p`` of its pools (the mean over its window of the dual
of the pool rows, per GPU-slot; :attr:`workbench.policies.window.WindowPlan.pool_price`) and
the GPU-slots its plan leaves free. A job's cost of work in group ``g`` is that of its best
configuration there at the window's forecast means ``p_d``, ``c_d`` (per sample of work, for
the job's class: application, GPU-count menu and GPU types)::

    cps_g = min_k [E_k (p_{d_k} + q c_{d_k} / 1000) + n_k lambda_{p_k}] / (r_k W)

and a training job ``j`` in group ``h`` moves to ``g`` when the work it has left is cheaper
there by more than ``reassign_gain`` of its cost, after its move (the transfer energy at
``g``'s price and the work lost to transfer and restart, valued at ``cps_g``)::

    gain_jg = R_j W_j (cps_h - cps_g) - move_jg  >  reassign_gain * R_j W_j cps_h

best gains first, while ``g``'s free GPU-slots hold the job's (``R_j W_j n_k / (r_k W)`` on
its best configuration); what it leaves frees ``h``'s. A new job joins its home's group.
The groups that gained or lost jobs re-plan their windows in that slot.

**Carbon, by the groups' carbon prices.** A cap per datacenter is exact (each group gets its
sites' caps). A total cap is shared by the groups' GPU capacity at first; at each re-plan
each share ``s_g`` is scaled by ``exp(eta (pi_g - mean pi) / (mean pi + 1e-9))`` (``pi_g``
the price of a kg under the group's window cap) and the shares renormalised: budget flows
to the groups where a kg saves most.

The groups' decisions run on Dask (``scheduler``: a running scheduler's address, as the
sweep takes it; ``workers`` > 0: a ``LocalCluster`` of that many single-threaded workers
started by the policy), one actor per group holding its look-ahead, or in this process
(``workers = 0``, no scheduler: one after the other).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from workbench.caps import Caps
from workbench.model import Job, ScenarioView
from workbench.optim.info import SolveInfo
from workbench.policies.base import (
    RESTART_S_DEFAULT,
    Allocation,
    Forecast,
    JobState,
    NoHindsightBound,
    SlotState,
    as_caps,
)
from workbench.policies.lookahead import LookaheadPolicy
from workbench.policies.problems import job_configs

log = logging.getLogger(__name__)

GROUP_SIZE_DEFAULT = 5
"""Datacenters per group by default (50 sites: 10 groups)."""

FILL_LIMIT = 0.8
"""Share of a group's GPU-slots over the window that moves may fill."""


def datacenter_groups(sc: ScenarioView, group_size: int) -> list[list[int]]:
    """Partition the datacenters (indices) into groups of at most ``group_size`` near ones.

    Deterministic: the first datacenter not yet grouped (scenario order) seeds a group and
    takes its ``group_size - 1`` nearest ungrouped ones by link latency (ties by order;
    unlinked sites are farthest)."""
    if not (isinstance(group_size, int) and group_size >= 1):
        raise ValueError(f"group_size must be an integer >= 1, got {group_size!r}")
    names = [d.name for d in sc.datacenters]
    left = list(range(len(names)))
    groups: list[list[int]] = []
    while left:
        seed = left.pop(0)
        near = sorted(left, key=lambda i: (sc.latency_ms(names[seed], names[i]), i))
        members = [seed, *near[:group_size - 1]]
        left = [i for i in left if i not in members]
        groups.append(sorted(members))
    return groups


def group_view(sc: ScenarioView, members: Sequence[int]) -> ScenarioView:
    """The scenario as one group sees it: only its pools (so it plans and places only on
    its datacenters), every datacenter and link kept (a job's data and checkpoint may be
    anywhere, and move in from there at that site's price)."""
    names = {sc.datacenters[i].name for i in members}
    return replace(sc, pools=tuple(p for p in sc.pools if p.datacenter in names))


@dataclass(frozen=True)
class GroupReport:
    """What a group tells the coordinator after a slot: the capacity price of a GPU-slot of
    each of its pools (window mean) and the GPU-slots its plan uses over the window, the
    price of a kg under its cap, the slot its plan was made at, the CPU seconds of its
    decision, and its plan's cost (forecast prices), shortfall (jobs' work) and columns."""

    pool_price: NDArray[np.float64]
    pool_used: NDArray[np.float64]
    window_slots: int
    carbon_price: float
    plan_t0: int
    solve_s: float
    plan_cost: float = 0.0
    shortfall: float = 0.0
    n_columns: int = 0


@dataclass(frozen=True)
class _ClassConfigs:
    """A job class's configurations in one group: energy per slot (kWh), samples of work
    per slot, pool (index in the group), GPU count and datacenter (index in the group)."""

    energy: NDArray[np.float64]
    samples_per_slot: NDArray[np.float64]
    pool: NDArray[np.int64]
    n_gpus: NDArray[np.float64]
    dc: NDArray[np.int64]


def _configs(job: Job, view: ScenarioView) -> _ClassConfigs:
    cfgs = job_configs(view, job)
    return _ClassConfigs(
        energy=np.array([c.energy_kwh for c in cfgs], dtype=float),
        samples_per_slot=np.array([c.rate for c in cfgs], dtype=float) * job.work_samples,
        pool=np.array([c.pool for c in cfgs], dtype=np.int64),
        n_gpus=np.array([c.n_gpus for c in cfgs], dtype=float),
        dc=np.array([c.dc for c in cfgs], dtype=np.int64))


class GroupPlanner:
    """One group's look-ahead (a Dask actor, or a plain object in this process)."""

    def __init__(self, view: ScenarioView, knobs: Mapping[str, Any]) -> None:
        self.view = view
        self.policy = LookaheadPolicy(**knobs)
        self.policy.reset(view)

    def set_caps(self, caps: Caps) -> None:
        """The group's caps from now on (a new share of the fleet's carbon budget)."""
        self.policy.caps = caps

    def decide(self, state: SlotState, forecast: Forecast, replan: bool = False
               ) -> tuple[Allocation, GroupReport]:
        """The group's allocation (re-planning its window first when ``replan``: jobs moved
        in or out) and its report."""
        c0 = time.process_time()
        if replan:
            self.policy.request_replan()
        alloc = self.policy.decide(state, forecast)
        plan = self.policy.plan
        sc = self.view
        n_p = len(sc.pools)
        price = np.zeros(n_p)
        used = np.zeros(n_p)
        n_win = 0
        carbon = cost = short = 0.0
        cols = 0
        t0 = state.t
        if plan is not None and plan.pool_price.size:
            cost, short, cols = plan.cost, float(sum(plan.shortfall.values())), plan.n_columns
            blen = plan.block_len.astype(float)
            n_win = int(blen.sum())
            price = plan.pool_price @ blen / max(n_win, 1)
            pos = {(p.datacenter, p.gpu_type): i for i, p in enumerate(sc.pools)}
            for (_, b), shares in plan.share.items():
                for (d, g, n), f in shares.items():
                    used[pos[(d, g)]] += f * n * blen[b]
            carbon = plan.carbon_price
            t0 = plan.t0
        return alloc, GroupReport(price, used, n_win, carbon, t0, time.process_time() - c0,
                                  cost, short, cols)


class GroupedLookahead(NoHindsightBound):
    """The look-ahead decomposed by datacenter groups (see the module docstring).

    Parameters
    ----------
    group_size : int
        Datacenters per group (:func:`datacenter_groups`).
    reassign_gain : float
        Relative saving a job's move to another group must bring (>= 0).
    carbon_share_step : float
        ``eta``, the step of the carbon budget's shares between groups.
    scheduler : str, optional
        Address of a running Dask scheduler to place the groups on.
    workers : int
        With no scheduler: a ``LocalCluster`` of this many workers (0: in this process).
    caps : Caps, optional
        The fleet's carbon budget (shared between the groups) or per-datacenter budgets and
        power caps (each group gets its sites').
    window_h, replan_slots, carbon_price_per_kg, restart_s, max_columns,
    arrival_replan_slots, warm_start, time_limit_s :
        Each group's look-ahead knobs (:class:`~workbench.policies.lookahead.LookaheadPolicy`;
        ``max_columns`` per group).
    """

    name = "lookahead-groups"

    def __init__(
        self,
        *,
        group_size: int = GROUP_SIZE_DEFAULT,
        reassign_gain: float = 0.05,
        carbon_share_step: float = 0.5,
        scheduler: str | None = None,
        workers: int = 0,
        window_h: float = 24.0,
        replan_slots: int | None = None,
        caps: Caps | None = None,
        carbon_price_per_kg: float = 0.0,
        restart_s: float = RESTART_S_DEFAULT,
        max_columns: int = 60_000,
        arrival_replan_slots: int | None = None,
        warm_start: bool = False,
        time_limit_s: float = 30.0,
    ) -> None:
        if not (isinstance(group_size, int) and group_size >= 1):
            raise ValueError(f"group_size must be an integer >= 1, got {group_size!r}")
        if not (math.isfinite(reassign_gain) and reassign_gain >= 0):
            raise ValueError(f"reassign_gain must be >= 0, got {reassign_gain!r}")
        if not (math.isfinite(carbon_share_step) and carbon_share_step >= 0):
            raise ValueError(f"carbon_share_step must be >= 0, got {carbon_share_step!r}")
        if not (isinstance(workers, int) and workers >= 0):
            raise ValueError(f"workers must be an integer >= 0, got {workers!r}")
        self.group_size = group_size
        self.reassign_gain = float(reassign_gain)
        self.carbon_share_step = float(carbon_share_step)
        self.scheduler = scheduler
        self.workers = workers
        self.caps = as_caps(caps)
        self.restart_s = float(restart_s)
        self.carbon_price_per_kg = float(carbon_price_per_kg)
        self.knobs: dict[str, Any] = {
            "window_h": window_h, "replan_slots": replan_slots,
            "carbon_price_per_kg": carbon_price_per_kg, "restart_s": restart_s,
            "max_columns": max_columns, "arrival_replan_slots": arrival_replan_slots,
            "warm_start": warm_start, "time_limit_s": time_limit_s}
        LookaheadPolicy(**self.knobs)  # the knobs' own checks, now
        self._client: Any = None
        self._cluster: Any = None
        self._planners: list[Any] = []
        self._sc: ScenarioView | None = None

    # -- lifecycle -----------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        return {"policy": self.name, "group_size": self.group_size,
                "groups": len(getattr(self, "groups", [])),
                "reassign_gain": self.reassign_gain, "scheduler": self.scheduler,
                "workers": self.workers, **self.caps.knobs(), **self.knobs}

    def reset(self, scenario: ScenarioView) -> None:
        """Group the sites, place one look-ahead per group (on the cluster already started,
        if any), forget every assignment."""
        self._planners = []
        self._sc = scenario
        self.groups = datacenter_groups(scenario, self.group_size)
        self.views = [group_view(scenario, g) for g in self.groups]
        self._group_of_dc = {scenario.datacenters[i].name: gi
                             for gi, g in enumerate(self.groups) for i in g}
        self.caps.check_names(d.name for d in scenario.datacenters)
        gpus = np.array([sum(p.count for p in v.pools) for v in self.views], dtype=float)
        self._carbon_share = gpus / max(gpus.sum(), 1.0)
        self._assign: dict[str, int] = {}
        self._reports: list[GroupReport | None] = [None] * len(self.groups)
        self._class_index: dict[tuple[Any, ...], int] = {}
        self._class_cfgs: list[list[_ClassConfigs]] = []
        # The first coordination when the groups' first plans are a re-plan period old.
        self._last_coordination = 0
        self.moves = 0
        self.coordinate_s = 0.0
        self._start_planners()

    @property
    def reports(self) -> list[GroupReport | None]:
        """Each group's report of the latest slot (None before its first)."""
        return list(self._reports)

    def close(self) -> None:
        """Stop the cluster this policy started (a scheduler given by address stays)."""
        for obj in (self._client, self._cluster):
            if obj is not None:
                obj.close()
        self._client = self._cluster = None
        self._planners = []

    def _start_planners(self) -> None:
        knobs = [{**self.knobs, "caps": self._group_cap(g)} for g in range(len(self.groups))]
        if self.scheduler is None and self.workers == 0:
            self._planners = [GroupPlanner(v, k) for v, k in zip(self.views, knobs,
                                                                  strict=True)]
            return
        if self._client is None:
            self._connect()
        futures = [self._client.submit(GroupPlanner, v, k, actor=True, pure=False)
                   for v, k in zip(self.views, knobs, strict=True)]
        self._planners = [f.result() for f in futures]

    def _connect(self) -> None:
        """A client of the scheduler given, or of a ``LocalCluster`` started here."""
        from distributed import Client, LocalCluster

        if self.scheduler is not None:
            try:
                self._client = Client(self.scheduler, timeout=10)
            except (OSError, ValueError, TypeError) as exc:
                raise ValueError(f"cannot reach the Dask scheduler {self.scheduler}: "
                                 f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                                 "; start it, or pass workers= for a local cluster") from None
        else:
            # Worker processes on loopback, as the sweep starts them.
            self._cluster = LocalCluster(n_workers=self.workers, threads_per_worker=1,
                                         processes=True, dashboard_address=None,
                                         host="127.0.0.1")
            self._client = Client(self._cluster)

    def _group_cap(self, g: int) -> Caps:
        """Group ``g``'s caps: its sites' budgets and power caps, or its share of the
        fleet's budget."""
        caps = self.caps
        names = {self._sc.datacenters[i].name for i in self.groups[g]}  # type: ignore[union-attr]
        power: dict[str, Any] = {"power_kw": caps.power_kw, "power_kw_by_dc": {
            k: v for k, v in caps.power_kw_by_dc.items() if k in names}}
        if caps.carbon_kg_by_dc:
            return Caps(carbon_kg_by_dc={k: v for k, v in caps.carbon_kg_by_dc.items()
                                         if k in names}, **power)
        if caps.carbon_kg is None:
            return Caps(**power)
        return Caps(carbon_kg=float(caps.carbon_kg) * float(self._carbon_share[g]), **power)

    # -- the decision --------------------------------------------------------------------
    def decide(self, state: SlotState, forecast: Forecast) -> Allocation:
        if self._sc is None:
            self.reset(state.scenario)
        c0 = time.process_time()
        for js in state.jobs:
            if js.job.job_id not in self._assign:
                self._assign[js.job.job_id] = self._group_of_dc.get(js.job.home, 0)
        period = self.knobs["replan_slots"] or max(int(round(3600 / state.scenario.slot_s)), 1)
        changed = np.zeros(len(self.groups), dtype=bool)
        if (state.t - self._last_coordination >= period
                and all(r is not None for r in self._reports)):
            changed = self._reassign(state, forecast)
            self._share_carbon()
            self._last_coordination = state.t
        self.coordinate_s += time.process_time() - c0
        by_group: list[list[JobState]] = [[] for _ in self.groups]
        for js in state.jobs:
            by_group[self._assign[js.job.job_id]].append(js)
        states = [self._group_state(state, g, jobs) for g, jobs in enumerate(by_group)]
        calls = [p.decide(s, forecast, bool(c))
                 for p, s, c in zip(self._planners, states, changed, strict=True)]
        outs = calls if self._client is None else [c.result() for c in calls]
        live = {js.job.job_id for js in state.jobs}
        self._assign = {j: g for j, g in self._assign.items() if j in live}
        return self._merge(outs)

    def _group_state(self, state: SlotState, g: int, jobs: list[JobState]) -> SlotState:
        names = {self._sc.datacenters[i].name for i in self.groups[g]}  # type: ignore[union-attr]
        by_dc = {d: v for d, v in state.carbon_kg_by_dc_so_far.items() if d in names}
        carbon = (sum(by_dc.values()) if state.carbon_kg_by_dc_so_far
                  else state.carbon_kg_so_far * float(self._carbon_share[g]))
        return replace(state, scenario=self.views[g], jobs=tuple(jobs),
                       carbon_kg_so_far=carbon, carbon_kg_by_dc_so_far=by_dc)

    def _merge(self, outs: list[tuple[Allocation, GroupReport]]) -> Allocation:
        placements: dict[str, Any] = {}
        gains: dict[str, float] = {}
        reasons: dict[str, str] = {}
        queues: dict[str, float] = {}
        infos = []
        for g, (alloc, report) in enumerate(outs):
            placements.update(alloc.placements)
            gains.update(alloc.expected_gain)
            reasons.update(alloc.reasons)
            queues.update(alloc.queues)
            self._reports[g] = report
            if alloc.solve is not None:
                infos.append(alloc.solve)
        bad = [i for i in infos if i.fallback or i.status not in ("optimal", "Optimal")]
        info = SolveInfo(
            status=bad[0].status if bad else (infos[0].status if infos else "optimal"),
            solve_s=sum(i.solve_s for i in infos),
            objective=sum(i.objective for i in infos if i.objective is not None) if infos
            else None, fallback=any(i.fallback for i in infos),
            message="; ".join(f"group {g}: {i.message}" for g, i in enumerate(infos)
                              if i.message))
        return Allocation(placements=placements, solve=info, expected_gain=gains,
                          reasons=reasons, queues=queues)

    # -- coordination ----------------------------------------------------------------------
    def _class_of(self, job: Job) -> int:
        """The index of the job's class (application, GPU-count menu, GPU types): jobs of
        one class have the same configurations, their rates in proportion to their work."""
        key = (job.app, job.gpu_counts, job.gpu_types)
        got = self._class_index.get(key)
        if got is None:
            got = self._class_index[key] = len(self._class_cfgs)
            self._class_cfgs.append([_configs(job, v) for v in self.views])
        return got

    def _class_prices(self, forecast: Forecast, n_win: int) -> tuple[
            NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        """Per class and group: cost per sample of work on the best configuration there
        (``cps``), its GPU-slots per sample and the fastest configuration's samples per slot
        (inf / 0 where the class has no configuration in the group)."""
        n_c, n_g = len(self._class_cfgs), len(self.groups)
        rows = np.minimum(np.arange(n_win), forecast.price_per_kwh.shape[0] - 1)
        mean_p = np.asarray(forecast.price_per_kwh, dtype=float)[rows].mean(axis=0)
        mean_c = np.asarray(forecast.carbon_g_per_kwh, dtype=float)[rows].mean(axis=0)
        q = self.carbon_price_per_kg
        cps = np.full((n_c, n_g), np.inf)
        gps = np.zeros((n_c, n_g))
        sps = np.zeros((n_c, n_g))
        for g, v in enumerate(self.views):
            rep = self._reports[g]
            assert rep is not None
            ridx = np.array([forecast.region_index(d.region) for d in v.datacenters],
                            dtype=np.int64)
            for c in range(n_c):
                cf = self._class_cfgs[c][g]
                if not cf.energy.size:
                    continue
                ri = ridx[cf.dc]
                per_slot = (cf.energy * (mean_p[ri] + q * mean_c[ri] / 1000.0)
                            + cf.n_gpus * rep.pool_price[cf.pool])
                per_sample = per_slot / cf.samples_per_slot
                k = int(np.argmin(per_sample))
                cps[c, g] = per_sample[k]
                gps[c, g] = cf.n_gpus[k] / cf.samples_per_slot[k]
                sps[c, g] = float(cf.samples_per_slot.max())
        return cps, gps, sps

    def _reassign(self, state: SlotState, forecast: Forecast) -> NDArray[np.bool_]:
        """Move jobs to the groups where their work is cheapest (module docstring); which
        groups gained or lost jobs."""
        sc = self._sc
        assert sc is not None
        changed = np.zeros(len(self.groups), dtype=bool)
        movable = [js for js in state.jobs if js.job.is_training and js.remaining > 1e-9]
        if not movable:
            return changed
        cls = np.array([self._class_of(js.job) for js in movable], dtype=np.int64)
        n_win = max(max((r.window_slots for r in self._reports if r is not None),
                        default=1), 1)
        cps, gps, sps = self._class_prices(forecast, n_win)
        free = np.array([FILL_LIMIT * sum(p.count for p in v.pools) * n_win
                         - float(r.pool_used.sum())
                         for v, r in zip(self.views, self._reports, strict=True) if r is not None])
        h = np.array([self._assign[js.job.job_id] for js in movable], dtype=np.int64)
        work = np.array([js.remaining * js.job.work_samples for js in movable])
        gb = np.array([js.job.checkpoint_gb if js.last_datacenter is not None
                       else js.job.dataset_gb for js in movable])
        price = float(np.asarray(forecast.price_per_kwh, dtype=float)[0].mean())
        # Work lost moving: the transfer (10 Gbit/s) and the restart at the fastest rate there.
        lost_slots = (self.restart_s + 8.0 * gb / 10.0) / float(sc.slot_s)
        c_here = cps[cls, h]
        with np.errstate(invalid="ignore"):
            move = lost_slots[:, None] * sps[cls] * cps[cls] + (gb * 0.006 * price)[:, None]
            gain = work[:, None] * (c_here[:, None] - cps[cls]) - move
        gain[np.arange(h.size), h] = -np.inf
        gain[~np.isfinite(gain)] = -np.inf
        best = np.argmax(gain, axis=1)
        g_best = gain[np.arange(h.size), best]
        ok = np.isfinite(c_here) & (g_best > self.reassign_gain * work * c_here)
        need = work * gps[cls, best]
        for i in np.flatnonzero(ok)[np.argsort(-g_best[ok], kind="stable")].tolist():
            g = int(best[i])
            if free[g] >= need[i]:
                free[g] -= need[i]
                free[h[i]] += need[i]
                self._assign[movable[i].job.job_id] = g
                self.moves += 1
                changed[g] = changed[h[i]] = True
        return changed

    def _share_carbon(self) -> None:
        """Scale each group's share of a total carbon cap by its carbon price (module
        docstring) and hand the groups their new caps."""
        if self.caps.carbon_kg is None or self.carbon_share_step == 0:
            return
        pi = np.array([r.carbon_price if r is not None else 0.0 for r in self._reports])
        mean = float(pi.mean())
        share = self._carbon_share * np.exp(self.carbon_share_step * (pi - mean) / (mean + 1e-9))
        self._carbon_share = share / share.sum()
        for g, p in enumerate(self._planners):
            c = self._group_cap(g)
            if self._client is None:
                p.set_caps(c)
            else:
                p.set_caps(c).result()

