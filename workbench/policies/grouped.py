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

**Capacity: an opening, then rounds priced by the groups' duals.** At slot 0 and every
re-plan period (``replan_slots``) the coordinator moves jobs between groups
(:mod:`workbench.policies.groupmoves`: every training job's work priced in every group,
moves best gains first while the receiving pools have room, no group beyond ``balance``
times the mean number of jobs):

- *the opening* (``opening``), before the groups plan: each group tells the jobs' window
  needs and ends and its window's blocks (no solve); the jobs are priced at the forecast's
  block prices with no capacity price, the room being what the groups' own jobs leave when
  each does its need at least cost;
- *round 0*: every group re-plans its window on the jobs it has (its periodic re-plan) and
  reports each pool's capacity price per block (the dual of the pool rows, per GPU-slot;
  :attr:`workbench.policies.window.WindowPlan.pool_price`), the GPU-slots its plan uses
  and each job's window need;
- *rounds 1, 2, ...*: the jobs are priced at those capacity prices, on the room the plans
  leave; the groups that gained or lost jobs re-plan, from their last basis
  (``warm_start``), and report again.

The rounds stop when a round moves no job, when it lowers the sum of the groups' plan
costs by less than ``coordinate_tol`` of it, or after ``coordinate_rounds`` rounds; a round
that raises that sum, or the plans' shortfall, is undone (its moves and its plans). Then
each group decides the slot on its plan. A new job joins its home's group until the next
coordination. :attr:`GroupedLookahead.rounds` records every round (cost, shortfall, moves).

**Carbon, by the groups' carbon prices.** A cap per datacenter is exact (each group gets its
sites' caps). A total cap is shared by the groups' GPU capacity at first; at each re-plan
each share ``s_g`` is scaled by ``exp(eta (pi_g - mean pi) / (mean pi + 1e-9))`` (``pi_g``
the price of a kg under the group's window cap) and the shares renormalised: budget flows
to the groups where a kg saves most.

The groups' decisions run on Dask (``scheduler``: a running scheduler's address, as the
sweep takes it; ``workers`` > 0: a ``LocalCluster`` of that many single-threaded workers
started by the policy), one actor per group holding its look-ahead, or in this process
(``workers = 0``, no scheduler: one after the other). The two decide alike by construction:
the coordinator sends each round's calls and combines the replies in group order, every
group's state is built here in scenario order, every cost a group reports and every total
of them is a sum rounded once (:func:`~workbench.optim.blockdata.exact_dot`,
``math.fsum``: BLAS's sums move in their last bits with its threads, which differ between
a Dask worker and its parent), and no group's solve has a wall-clock limit
by default (``time_limit_s`` None: a limit would make a decision depend on the machine's
load, as a window LP cut short keeps the previous plan).
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
from workbench.policies.groupmoves import (
    ClassConfigs,
    GroupPrices,
    Movable,
    MoveData,
    choose_moves,
    job_arrays,
    own_usage,
)
from workbench.policies.groupplanner import GroupPlanner, GroupReport
from workbench.policies.lookahead import LookaheadConfig, slots_per_hour

log = logging.getLogger(__name__)

GROUP_SIZE_DEFAULT = 5
"""Datacenters per group by default (50 sites: 10 groups)."""


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
class CoordinationRound:
    """One round of a coordination at slot ``t``: the sum of the groups' plan costs and
    shortfalls after it, the jobs it moved, the groups it re-planned and whether it was
    undone (it raised the cost or the shortfall)."""

    t: int
    round: int
    plan_cost: float
    shortfall: float
    moves: int
    replanned: int
    undone: bool = False


class GroupedLookahead(NoHindsightBound):
    """The look-ahead decomposed by datacenter groups (see the module docstring).

    Parameters
    ----------
    group_size : int
        Datacenters per group (:func:`datacenter_groups`).
    reassign_gain : float
        Relative saving a job's move to another group must bring (>= 0).
    opening : bool
        Move jobs at the forecast's prices before the groups plan, at every coordination
        (with ``coordinate_rounds`` 0 and no opening the groups plan their jobs alone).
    coordinate_rounds : int
        Most rounds of moves at the plans' capacity prices and re-plans in a coordination.
    coordinate_tol : float
        A round that lowers the groups' plan costs by less than this share of them ends
        the coordination.
    balance : float
        No group takes jobs beyond this multiple of the mean number of jobs per group (its
        window LP stays of a size; ``math.inf``: no bound).
    carbon_share_step : float
        ``eta``, the step of the carbon budget's shares between groups.
    scheduler : str, optional
        Address of a running Dask scheduler to place the groups on.
    workers : int
        With no scheduler: a ``LocalCluster`` of this many workers (0: in this process).
    caps : Caps, optional
        The fleet's carbon budget (shared between the groups) or per-datacenter budgets and
        power caps (each group gets its sites').
    time_limit_s : float, optional
        Wall-clock limit of each group's solves; None (default): none, so that a decision
        never depends on the machine's load (module docstring).
    window_h, replan_slots, carbon_price_per_kg, restart_s, max_columns,
    arrival_replan_slots, warm_start :
        Each group's look-ahead knobs, held as one
        :class:`~workbench.policies.lookahead.LookaheadConfig` (``lookahead``; the others
        at its defaults; ``max_columns`` per group; ``warm_start`` on by default: a round
        re-solves the window its group has just solved, from that basis).
    """

    name = "lookahead-groups"
    plans_batteries = True
    """Each group's look-ahead plans its sites' batteries."""

    def __init__(
        self,
        *,
        group_size: int = GROUP_SIZE_DEFAULT,
        reassign_gain: float = 0.05,
        opening: bool = True,
        coordinate_rounds: int = 3,
        coordinate_tol: float = 0.002,
        balance: float = 2.0,
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
        warm_start: bool = True,
        time_limit_s: float | None = None,
    ) -> None:
        if not (isinstance(group_size, int) and group_size >= 1):
            raise ValueError(f"group_size must be an integer >= 1, got {group_size!r}")
        if not (math.isfinite(reassign_gain) and reassign_gain >= 0):
            raise ValueError(f"reassign_gain must be >= 0, got {reassign_gain!r}")
        if not (isinstance(coordinate_rounds, int) and coordinate_rounds >= 0):
            raise ValueError(f"coordinate_rounds must be an integer >= 0, got "
                             f"{coordinate_rounds!r}")
        if not balance >= 1.0:
            raise ValueError(f"balance must be >= 1 (math.inf: no bound), got {balance!r}")
        if not (math.isfinite(coordinate_tol) and coordinate_tol >= 0):
            raise ValueError(f"coordinate_tol must be >= 0, got {coordinate_tol!r}")
        if not (math.isfinite(carbon_share_step) and carbon_share_step >= 0):
            raise ValueError(f"carbon_share_step must be >= 0, got {carbon_share_step!r}")
        if not (isinstance(workers, int) and workers >= 0):
            raise ValueError(f"workers must be an integer >= 0, got {workers!r}")
        self.group_size = group_size
        self.reassign_gain = float(reassign_gain)
        self.opening = bool(opening)
        self.coordinate_rounds = coordinate_rounds
        self.coordinate_tol = float(coordinate_tol)
        self.balance = float(balance)
        self.carbon_share_step = float(carbon_share_step)
        self.scheduler = scheduler
        self.workers = workers
        self.caps = as_caps(caps)
        self.lookahead = LookaheadConfig(
            window_h=window_h, replan_slots=replan_slots,
            carbon_price_per_kg=carbon_price_per_kg, restart_s=restart_s,
            max_columns=max_columns, arrival_replan_slots=arrival_replan_slots,
            warm_start=warm_start,
            time_limit_s=math.inf if time_limit_s is None else time_limit_s)
        self._client: Any = None
        self._cluster: Any = None
        self._planners: list[Any] = []
        self._sc: ScenarioView | None = None

    # -- lifecycle -----------------------------------------------------------------------
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
        self._class_cfgs: list[list[ClassConfigs]] = []
        self._last_coordination: int | None = None
        self.moves = 0
        self.coordinate_s = 0.0
        self.rounds: list[CoordinationRound] = []
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
        caps = [self._group_cap(g) for g in range(len(self.groups))]
        if self.scheduler is None and self.workers == 0:
            self._planners = [GroupPlanner(v, self.lookahead, c)
                              for v, c in zip(self.views, caps, strict=True)]
            return
        if self._client is None:
            self._connect()
        futures = [self._client.submit(GroupPlanner, v, self.lookahead, c, actor=True,
                                       pure=False)
                   for v, c in zip(self.views, caps, strict=True)]
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
            from workbench.config import bounded_workers

            self._cluster = LocalCluster(n_workers=bounded_workers(self.workers,
                                                                   "lookahead-groups"),
                                         threads_per_worker=1,
                                         processes=True, dashboard_address=None,
                                         host="127.0.0.1")
            self._client = Client(self._cluster)

    def _call(self, method: str, groups: Sequence[int], args: Sequence[tuple[Any, ...]]
              ) -> list[Any]:
        """``method`` of the planners of ``groups`` (one argument tuple each): on Dask all
        sent first, then the replies taken in the order of ``groups``; here one by one."""
        calls = [getattr(self._planners[g], method)(*a) for g, a in zip(groups, args,
                                                                          strict=True)]
        return calls if self._client is None else [c.result() for c in calls]

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
        for js in state.jobs:
            if js.job.job_id not in self._assign:
                self._assign[js.job.job_id] = self._group_of_dc.get(js.job.home, 0)
        period = self.lookahead.replan_slots or slots_per_hour(state.scenario.slot_s)
        if self._last_coordination is None or state.t - self._last_coordination >= period:
            self._share_carbon()
            self._coordinate(state, forecast)
            self._last_coordination = state.t
        everyone = list(range(len(self.groups)))
        outs = self._call("decide", everyone,
                          [(s, forecast) for s in self._group_states(state)])
        live = {js.job.job_id for js in state.jobs}
        self._assign = {j: g for j, g in self._assign.items() if j in live}
        return self._merge(outs)

    def _group_states(self, state: SlotState) -> list[SlotState]:
        """Each group's state: its jobs (in the slot's order), its sites' carbon so far."""
        by_group: list[list[JobState]] = [[] for _ in self.groups]
        for js in state.jobs:
            by_group[self._assign[js.job.job_id]].append(js)
        sc = self._sc
        assert sc is not None
        out = []
        for g, jobs in enumerate(by_group):
            names = {sc.datacenters[i].name for i in self.groups[g]}
            by_dc = {d: v for d, v in state.carbon_kg_by_dc_so_far.items() if d in names}
            carbon = (math.fsum(by_dc.values()) if state.carbon_kg_by_dc_so_far
                      else state.carbon_kg_so_far * float(self._carbon_share[g]))
            out.append(replace(state, scenario=self.views[g], jobs=tuple(jobs),
                               carbon_kg_so_far=carbon, carbon_kg_by_dc_so_far=by_dc))
        return out

    def _merge(self, outs: list[tuple[Allocation, GroupReport]]) -> Allocation:
        placements: dict[str, Any] = {}
        gains: dict[str, float] = {}
        reasons: dict[str, str] = {}
        queues: dict[str, float] = {}
        battery_kw: dict[str, float] = {}
        infos: list[tuple[int, SolveInfo]] = []
        for g, (alloc, report) in enumerate(outs):
            placements.update(alloc.placements)
            gains.update(alloc.expected_gain)
            reasons.update(alloc.reasons)
            queues.update(alloc.queues)
            # A group plans the batteries of its own sites only.
            battery_kw.update({d: kw for d, kw in alloc.battery_kw.items()
                               if self._group_of_dc.get(d) == g})
            self._reports[g] = report
            if alloc.solve is not None:
                infos.append((g, alloc.solve))
        bad = [i for _, i in infos if i.fallback or i.status not in ("optimal", "Optimal")]
        info = SolveInfo(
            status=bad[0].status if bad else (infos[0][1].status if infos else "optimal"),
            solve_s=sum(i.solve_s for _, i in infos),
            objective=math.fsum(i.objective for _, i in infos if i.objective is not None)
            if infos
            else None, fallback=any(i.fallback for _, i in infos),
            message="; ".join(f"group {g}: {i.message}" for g, i in infos if i.message))
        return Allocation(placements=placements, solve=info, expected_gain=gains,
                          reasons=reasons, queues=queues, battery_kw=battery_kw)

    # -- coordination ----------------------------------------------------------------------
    def _coordinate(self, state: SlotState, forecast: Forecast) -> None:
        """The rounds of a coordination (module docstring): every group plans (the first
        time after the opening moves), then moves and re-plans of the groups they touch
        until the stopping rule."""
        everyone = list(range(len(self.groups)))
        opened = 0
        if self.opening:
            c0 = time.process_time()
            opening = self._opening(state, forecast)
            self.coordinate_s += time.process_time() - c0
            for jid, g in opening:
                self._assign[jid] = g
            opened = len(opening)
            self.moves += opened
        self._reports = list(self._call("plan", everyone, [
            (s, forecast) for s in self._group_states(state)]))
        cost, short = self._totals()
        self.rounds.append(CoordinationRound(state.t, 0, cost, short, opened, len(everyone)))
        for r in range(1, self.coordinate_rounds + 1):
            c0 = time.process_time()
            moves = self._report_moves(state, forecast)
            self.coordinate_s += time.process_time() - c0
            if not moves:
                break
            before = dict(self._assign)
            for jid, g in moves:
                self._assign[jid] = g
            touched = sorted({before[j] for j, _ in moves} | {g for _, g in moves})
            states = self._group_states(state)
            got = self._call("plan", touched, [(states[g], forecast, True) for g in touched])
            kept = list(self._reports)
            for g, rep in zip(touched, got, strict=True):
                self._reports[g] = rep
            new_cost, new_short = self._totals()
            worse = new_short > short + 1e-6 or new_cost > cost
            self.rounds.append(CoordinationRound(state.t, r, new_cost, new_short, len(moves),
                                                 len(touched), undone=worse))
            if worse:
                self._call("undo", touched, [() for _ in touched])
                self._assign = before
                self._reports = kept
                break
            self.moves += len(moves)
            gained = cost - new_cost
            cost, short = new_cost, new_short
            if gained < self.coordinate_tol * abs(cost):
                break

    def _totals(self) -> tuple[float, float]:
        """The sum of the groups' plan costs and shortfalls (rounded once: the same in any
        order of the replies)."""
        reps = [r for r in self._reports if r is not None]
        return math.fsum(r.plan_cost for r in reps), math.fsum(r.shortfall for r in reps)

    def _class_of(self, job: Job) -> int:
        """The index of the job's class (application, GPU-count menu, GPU types): jobs of
        one class have the same configurations, their rates in proportion to their work."""
        key = (job.app, job.gpu_counts, job.gpu_types)
        got = self._class_index.get(key)
        if got is None:
            got = self._class_index[key] = len(self._class_cfgs)
            self._class_cfgs.append([ClassConfigs.of(job, v) for v in self.views])
        return got

    def _report_moves(self, state: SlotState, forecast: Forecast) -> list[tuple[str, int]]:
        """A round's moves at the groups' latest reports (their blocks, capacity prices and
        GPU-slots used, the jobs' needs)."""
        reps = [r for r in self._reports if r is not None and r.block_len.size]
        if len(reps) < len(self.groups):
            return []
        prices = [GroupPrices.of(r.block_start, r.block_len, r.pool_price, r.pool_used,
                                 self._capacity(g), forecast, v)
                  for g, (v, r) in enumerate(zip(self.views, reps, strict=True))]
        return self._moves(state, prices, [r.need for r in reps], [r.end for r in reps])

    def _opening(self, state: SlotState, forecast: Forecast) -> list[tuple[str, int]]:
        """The moves before the groups' first plans: every job priced at the forecast's
        prices over the blocks each group's window LP will have, with no capacity price; the
        room what the groups' own jobs leave at those prices
        (:func:`workbench.policies.groupmoves.own_usage`)."""
        everyone = list(range(len(self.groups)))
        got = self._call("needs", everyone, [(s,) for s in self._group_states(state)])
        needs, ends = [n for n, _, _, _ in got], [e for _, e, _, _ in got]

        def prices(used: Sequence[NDArray[np.float64]]) -> list[GroupPrices]:
            return [GroupPrices.of(b, n, np.zeros(u.shape), u, self._capacity(g), forecast, v)
                    for g, (v, u, (_, _, b, n)) in enumerate(zip(self.views, used, got,
                                                                    strict=True))]

        jobs, _ = self._movable(state, needs, ends)
        if jobs is None:
            return []
        none = [np.zeros((len(v.pools), b.size)) for v, (_, _, b, _) in zip(self.views, got,
                                                                               strict=True)]
        used = own_usage(jobs, prices(none), self._classes(), self.lookahead.carbon_price_per_kg)
        return self._moves(state, prices(used), needs, ends)

    def _capacity(self, g: int) -> NDArray[np.float64]:
        """GPUs of each of group ``g``'s pools."""
        return np.array([p.count for p in self.views[g].pools], dtype=float)

    def _classes(self) -> list[list[ClassConfigs]]:
        """Per group, every class's configurations there."""
        return [[c[g] for c in self._class_cfgs] for g in range(len(self.groups))]

    def _movable(self, state: SlotState, needs: Sequence[Mapping[str, float]],
                 ends: Sequence[Mapping[str, int]]) -> tuple[Movable | None, list[JobState]]:
        """The training jobs with work left that their group's need covers, as arrays."""
        sc = self._sc
        assert sc is not None
        movable = [js for js in state.jobs if js.job.is_training and js.remaining > 1e-9
                   and js.job.job_id in needs[self._assign[js.job.job_id]]]
        if not movable:
            return None, []
        group = np.array([self._assign[js.job.job_id] for js in movable], dtype=np.int64)
        need = np.zeros(len(movable))
        end = np.zeros(len(movable), dtype=np.int64)
        for g in np.unique(group).tolist():
            rows = np.flatnonzero(group == g)
            need[rows], end[rows] = job_arrays([movable[i] for i in rows.tolist()],
                                               needs[g], ends[g])
        return Movable(
            job_class=np.array([self._class_of(js.job) for js in movable], dtype=np.int64),
            group=group, need=need, end=end,
            scale=np.array([js.throughput_scale for js in movable], dtype=float),
            data=MoveData.of(sc, movable, self.lookahead.restart_s)), movable

    def _moves(self, state: SlotState, prices: Sequence[GroupPrices],
               needs: Sequence[Mapping[str, float]], ends: Sequence[Mapping[str, int]]
               ) -> list[tuple[str, int]]:
        """The moves (:func:`workbench.policies.groupmoves.choose_moves`) at ``prices``:
        (job id, new group), best gains first."""
        sc = self._sc
        assert sc is not None
        jobs, movable = self._movable(state, needs, ends)
        if jobs is None:
            return []
        chosen = choose_moves(jobs, prices, self._classes(), self.groups, float(sc.slot_s),
                              self.lookahead.carbon_price_per_kg, self.reassign_gain, self.balance)
        return [(movable[m.job].job.job_id, m.dst) for m in chosen]

    def _share_carbon(self) -> None:
        """Scale each group's share of a total carbon cap by its carbon price (module
        docstring) and hand the groups their new caps."""
        if (self.caps.carbon_kg is None or self.carbon_share_step == 0
                or any(r is None for r in self._reports)):
            return
        pi = np.array([r.carbon_price if r is not None else 0.0 for r in self._reports])
        mean = float(pi.mean())
        share = self._carbon_share * np.exp(self.carbon_share_step * (pi - mean) / (mean + 1e-9))
        self._carbon_share = share / share.sum()
        self._call("set_caps", list(range(len(self.groups))),
                   [(self._group_cap(g),) for g in range(len(self.groups))])
