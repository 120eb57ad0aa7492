"""The slot driver shared by the queue-based schedulers (``lyapunov`` and ``threshold``).

Both decide one slot at a time from queues updated with what the previous slot metered:

* ``R_j`` — remaining progress of training job ``j``, a fraction of its total work (the
  state's ``remaining``, observed).
* ``Y_j`` — Neely's epsilon-persistent deadline queue, in fractions of work::

      Y_j(t+1) = max(Y_j(t) + eps_j(t) - progress_j(t), 0),   eps_j = R_j / L_j

  with ``L_j`` the slots left before the deadline (the horizon end if none).
* ``Z_d`` — carbon backlog per datacenter (or one ``global``) under a budget ``B_d``, with
  the slot's budget ``a_d(t)`` paced against the forecast and the meter
  (:meth:`SlotQueuePolicy._pace`) and metered carbon ``g_d(t)`` (kg): in kg,
  ``Z_d(t+1) = max(Z_d + g_d - a_d, 0)``, or in units of the even share
  ``abar_d = B_d / n_slots`` (:attr:`Z_IN_CAPS`), ``Z_d(t+1) = max(Z_d + (g_d - a_d) /
  abar_d, 0)``.

:class:`SlotQueuePolicy` holds the knobs both take, the queues, the GPU-count menus and the
batch refinement; a subclass gives :meth:`SlotQueuePolicy.decide` (its per-slot objective).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np
from numpy.typing import NDArray

from workbench import perf
from workbench.caps import Caps
from workbench.model import ScenarioView
from workbench.optim.fallback import solve_or_greedy
from workbench.optim.fastslot import FastSlotSolver
from workbench.optim.slot import ExtraConstraints, pyomo_solver
from workbench.policies.base import (
    RESTART_S_DEFAULT,
    Allocation,
    Forecast,
    JobState,
    NoHindsightBound,
    Placement,
    SlotOptions,
    SlotState,
    as_caps,
)
from workbench.policies.deadlines import DeadlineRule
from workbench.policies.problems import build_slot_problem

SOLVERS = ("pyomo", "fast")
"""Slot solvers: the Pyomo model (``pyomo``, HiGHS through Pyomo; ``pyomo:NAME`` any solver
Pyomo drives, :func:`workbench.optim.slot.pyomo_solver`), or the array fast path
(:class:`workbench.optim.fastslot.FastSlotSolver`: LP relaxation, repair, exact polish)."""

GLOBAL = "global"
"""Key of the one carbon queue under a global cap."""


class SlotQueuePolicy(NoHindsightBound):
    """Knobs, queues ``R, Y, Z`` and slot helpers of a queue-based per-slot scheduler.

    Parameters
    ----------
    V : float
        Cost weight against backlog (> 0); its meaning is the subclass's.
    caps : Caps, optional
        Carbon budget over the whole horizon, kg (one for the fleet or per datacenter;
        soft: enforced through ``Z``) and facility power cap per datacenter and slot, kW
        (hard, in the MILP).
    gpu_counts : tuple of int or mapping job id -> tuple of int, optional
        GPU-count menu override: one menu for every training job, or per job.
    restart_s : float
        Seconds lost on a start, resume or migration.
    mip_rel_gap, time_limit_s : float
        HiGHS relative MIP gap and time limit per slot (s).
    refine_batch : bool
        Fine-tune each running job's batch size by golden-section search.
    extra_constraints : callable(model) -> None, optional
        What-if hook applied to every slot's Pyomo model before solving.
    solver : {"pyomo", "pyomo:NAME", "fast"}
        ``"fast"`` solves the MILP as arrays with highspy; ``"pyomo"`` the readable Pyomo
        model with HiGHS, ``"pyomo:NAME"`` with Pyomo's ``SolverFactory(NAME)`` (same
        optimum). A what-if hook always goes through the Pyomo model.
    deadline_margin : float, optional
        Apply the deadline rule's completion rule (:mod:`workbench.policies.deadlines`: a
        job whose slack runs out must run) with this share of each job's life kept in hand;
        None: no rule.
    """

    name = "slot-queues"
    V_HINT = "V=1"
    Z_IN_CAPS = False
    """Carbon queue in per-slot caps (True) or in kg (False)."""

    def __init__(
        self,
        V: float,
        *,
        caps: Caps | None = None,
        gpu_counts: tuple[int, ...] | Mapping[str, tuple[int, ...]] | None = None,
        migration_threshold: float = 0.0,
        restart_s: float = RESTART_S_DEFAULT,
        mip_rel_gap: float = 1e-3,
        time_limit_s: float = 10.0,
        refine_batch: bool = True,
        extra_constraints: ExtraConstraints | None = None,
        solver: str = "fast",
        deadline_margin: float | None = None,
    ) -> None:
        name = pyomo_solver(solver)
        if name is not None:
            from workbench.optim.slotpyomo import check_available  # Pyomo only when asked

            check_available(name)
        if not (isinstance(V, int | float) and math.isfinite(V) and V > 0):
            raise ValueError(f"V must be a positive number, got {V!r}; try {self.V_HINT}")
        self.deadlines = (None if deadline_margin is None
                          else DeadlineRule(deadline_margin, restart_s))
        if not (math.isfinite(restart_s) and restart_s >= 0):
            raise ValueError(f"restart_s must be >= 0 seconds, got {restart_s!r}")
        if not (math.isfinite(migration_threshold) and migration_threshold >= 0):
            raise ValueError(f"migration_threshold must be >= 0, got {migration_threshold}")
        if not (mip_rel_gap >= 0 and time_limit_s > 0):
            raise ValueError("mip_rel_gap must be >= 0 and time_limit_s > 0")
        self.caps = as_caps(caps)
        if isinstance(gpu_counts, tuple | list) and not all(
                isinstance(n, int) and n > 0 for n in gpu_counts):
            raise ValueError(f"gpu_counts must hold positive integers, got {gpu_counts!r}")
        self.V = float(V)
        self.gpu_counts = gpu_counts
        self.migration_threshold = float(migration_threshold)
        self.restart_s = float(restart_s)
        self.mip_rel_gap = float(mip_rel_gap)
        self.time_limit_s = float(time_limit_s)
        self.refine_batch = bool(refine_batch)
        self.extra_constraints = extra_constraints
        self.solver = solver
        self._fast = FastSlotSolver()
        self._scenario: ScenarioView | None = None

    # -- lifecycle -----------------------------------------------------------------------
    def reset(self, scenario: ScenarioView) -> None:
        """Empty every queue (the cap against what inference alone emits is checked by the
        simulator, which holds the truth: a policy sees only the scenario's static facts)."""
        self._scenario = scenario
        self._fast.reset()
        self._Y: dict[str, float] = {}
        self._eps: dict[str, float] = {}
        self._R_prev: dict[str, float] = {}
        self._cap_slot: dict[str, float] = {}
        self._pred_carbon: dict[str, float] = {}
        self._carbon_so_far = 0.0
        self._carbon_by_dc: dict[str, float] = {}
        self._moved_at: dict[str, int] = {}
        self._where: dict[str, str] = {}
        self.caps.check_names(dc.name for dc in scenario.datacenters)
        self._cap_slot = {GLOBAL if d == "all" else d: float(v) / scenario.n_slots
                          for d, v in self.caps.carbon_scopes().items()}
        self._Z: dict[str, float] = dict.fromkeys(self._cap_slot, 0.0)
        self._budget_slot: dict[str, float] = dict(self._cap_slot)
        self._spent: dict[str, float] = dict.fromkeys(self._cap_slot, 0.0)
        self._seen_kg: dict[str, tuple[str, float]] = {}

    # -- queues --------------------------------------------------------------------------
    def _z_step(self, key: str, emitted_kg: float) -> float:
        """``Z`` of budget ``key`` after a slot that emitted ``emitted_kg`` against its
        slot budget ``a`` (:meth:`_pace`)."""
        z, a = self._Z[key], self._budget_slot[key]
        self._spent[key] += max(emitted_kg, 0.0)
        if self.Z_IN_CAPS:
            return max(z + (max(emitted_kg, 0.0) - a) / self._cap_slot[key], 0.0)
        return max(z + max(emitted_kg, 0.0) - a, 0.0)

    def _pace(self, state: SlotState, opts: SlotOptions, forecast: Forecast) -> None:
        """The slot's carbon budget per scope, ``a_d(t)``: the budget left shared by least
        carbon demand, now against the rest of the horizon::

            a_d(t) = max(B_d - E_d, 0) * d_d(t) / (D_d(t) + U_d(t))
            d_d(t) = sum_j k_j due_j / L_j + sum_i e_i          (training j, inference i)
            D_d(t) = sum_j k_j due_j       + sum_i e'_i S_i
            U_d(t) = (demand seen so far) / (t + 1) * (slots left after this one)

        ``E_d`` the carbon metered so far, ``k_j`` the job's least kg per whole job of
        work over its options now, carried to the forecast's mean intensity
        (``g_i / p_i * cbar_d / c_d``), ``due_j`` its work due within the horizon, ``L_j``
        the slots to its deadline (within the horizon), ``e_i`` a service's least kg this
        slot and ``e'_i`` at the mean, ``S_i`` its slots left; each job's demand in the
        scope of its least-carbon datacenter. A burst of work gets the budget it needs, a
        quiet slot little; jobs still to come are extrapolated from those arrived.
        Without demand, the even share of what is left.
        """
        if not self._cap_slot:
            return
        sc = state.scenario
        t = state.t
        names = [dc.name for dc in sc.datacenters]
        ridx = [forecast.region_index(dc.region) for dc in sc.datacenters]
        fc = np.asarray(forecast.carbon_g_per_kwh, dtype=float)[:, ridx]
        ratio = np.where(fc[0] > 0, fc.mean(axis=0) / np.maximum(fc[0], 1e-12), 1.0)
        dc_of = {n: i for i, n in enumerate(names)}
        key_of = [GLOBAL if GLOBAL in self._cap_slot else (n if n in self._cap_slot else "")
                  for n in names]
        now = dict.fromkeys(self._cap_slot, 0.0)
        rest = dict.fromkeys(self._cap_slot, 0.0)
        order = np.argsort(opts.job_index, kind="stable")
        bounds = np.searchsorted(opts.job_index[order], np.arange(len(state.jobs) + 1))
        for j, js in enumerate(state.jobs):
            rows = order[bounds[j]:bounds[j + 1]]
            if rows.size == 0:
                continue
            d = np.array([dc_of[str(x)] for x in opts.datacenter[rows]], dtype=np.int64)
            if js.job.is_training:
                ok = opts.progress[rows] > 0
                if not ok.any():
                    continue
                per = np.where(ok, opts.carbon_kg[rows] / np.maximum(opts.progress[rows],
                                                                      1e-12), np.inf)
                best = int(np.argmin(per * ratio[d]))
                key = key_of[d[best]]
                k = float(per[best] * ratio[d[best]])
                end = (sc.n_slots if js.job.deadline is None
                       else math.floor((js.job.deadline - sc.start).total_seconds()
                                       / sc.slot_s + 1e-9))
                due = js.remaining * (1.0 if end <= sc.n_slots
                                      else (sc.n_slots - t) / max(end - t, 1))
                slots = max(min(end, sc.n_slots) - t, 1)
                if key:
                    now[key] += k * due / slots
                    rest[key] += k * due
                    if js.job.job_id not in self._seen_kg:
                        self._seen_kg[js.job.job_id] = (key, k * due)
            else:
                assert js.job.end is not None
                best = int(np.argmin(opts.carbon_kg[rows]))
                key = key_of[d[best]]
                stop = min(math.ceil((js.job.end - sc.start).total_seconds() / sc.slot_s
                                     - 1e-9), sc.n_slots)
                if key:
                    now[key] += float(opts.carbon_kg[rows][best])
                    rest[key] += (float(opts.carbon_kg[rows][best] * ratio[d[best]])
                                  * max(stop - t, 1))
        seen = dict.fromkeys(self._cap_slot, 0.0)
        for key, kg in self._seen_kg.values():
            seen[key] += kg
        budgets = {GLOBAL if d == "all" else d: float(v)
                   for d, v in self.caps.carbon_scopes().items()}
        for key, cap in budgets.items():
            unspent = max(cap - self._spent[key], 0.0)
            total = rest[key] + seen[key] / (t + 1) * max(sc.n_slots - t - 1, 0)
            self._budget_slot[key] = (unspent * now[key] / total if total > 1e-12
                                      else unspent / max(sc.n_slots - t, 1))

    def _update_queues(self, state: SlotState) -> None:
        """Advance ``Y`` and ``Z`` by what the last slot metered; track moves."""
        remaining = {js.job.job_id: js.remaining for js in state.jobs if js.job.is_training}
        for jid, r_prev in self._R_prev.items():
            if jid not in remaining:
                self._Y.pop(jid, None)
                continue
            progress = max(r_prev - remaining[jid], 0.0)
            self._Y[jid] = max(self._Y.get(jid, 0.0) + self._eps.get(jid, 0.0) - progress, 0.0)
        if GLOBAL in self._Z:
            emitted = state.carbon_kg_so_far - self._carbon_so_far
            self._Z[GLOBAL] = self._z_step(GLOBAL, emitted)
        else:
            metered = state.carbon_kg_by_dc_so_far
            for d in self._Z:
                # The meter when the state carries one; a hand-built state without it
                # falls back on what the last allocation was predicted to emit.
                emitted = (metered.get(d, 0.0) - self._carbon_by_dc.get(d, 0.0)
                           if metered else self._pred_carbon.get(d, 0.0))
                self._Z[d] = self._z_step(d, emitted)
            self._carbon_by_dc = dict(metered)
        self._carbon_so_far = state.carbon_kg_so_far
        self._R_prev = remaining
        for js in state.jobs:
            here = js.last_datacenter
            if here is None:
                continue
            prev = self._where.get(js.job.job_id)
            if prev is not None and prev != here:
                self._moved_at[js.job.job_id] = state.t - 1
            self._where[js.job.job_id] = here

    def _solve_slot(self, state: SlotState, opts: SlotOptions, coef: NDArray[np.float64],
                    keep: NDArray[np.bool_], priority: NDArray[np.float64],
                    explain: Callable[[int, JobState], tuple[float | None, str] | None],
                    ) -> Allocation:
        """Maximise ``sum coef * z`` over the kept options (slot MILP, greedy fallback
        reported), place the chosen jobs and advance the per-slot bookkeeping.

        With :attr:`deadlines` set, the jobs of the completion rule's must-run set must be
        placed, on their allowed options (:meth:`~workbench.policies.deadlines.DeadlineRule.
        slot`). ``explain(k, job_state)`` gives a chosen option's expected gain and
        reason (or None).
        """
        sc = self._scenario
        assert sc is not None
        prob = build_slot_problem(state, opts, coef, self.caps)
        forced = np.zeros(len(state.jobs), dtype=bool)
        if self.deadlines is not None and len(opts):
            prob, keep, forced, _ = self.deadlines.slot(state, opts, prob, keep)
        chosen, info = solve_or_greedy(
            prob, keep, priority, t=state.t, solver=self.solver, fast=self._fast,
            mip_rel_gap=self.mip_rel_gap, time_limit_s=self.time_limit_s,
            extra_constraints=self.extra_constraints)
        placements: dict[str, Placement] = {}
        gains: dict[str, float] = {}
        reasons: dict[str, str] = {}
        for k in chosen.tolist():
            js = state.jobs[int(opts.job_index[k])]
            jid = js.job.job_id
            placements[jid] = self._placement(sc, js, opts, k)
            why = explain(k, js)
            if why is not None:
                gain, reasons[jid] = why
                if gain is not None:
                    gains[jid] = gain
            if forced[int(opts.job_index[k])]:
                rule = "no slack left before its deadline: must run (completion rule)"
                reasons[jid] = f"{reasons[jid]}; {rule}" if jid in reasons else rule
        self._after_slot(state, opts, chosen.tolist())
        return Allocation(placements=placements, solve=info, expected_gain=gains,
                          reasons=reasons, queues=self.queues())

    def _after_slot(self, state: SlotState, opts: SlotOptions, chosen: list[int]) -> None:
        """Remember the slot's predicted carbon per datacenter and each job's ``eps``."""
        sc = self._scenario
        assert sc is not None
        carbon_by_dc: dict[str, float] = {}
        for k in chosen:
            dc = str(opts.datacenter[k])
            carbon_by_dc[dc] = carbon_by_dc.get(dc, 0.0) + float(opts.carbon_kg[k])
        self._pred_carbon = carbon_by_dc
        self._eps = {js.job.job_id: self._eps_of(js, self._slots_left(sc, js, state.t))
                     for js in state.jobs if js.job.is_training}

    def _eps_of(self, js: JobState, left: int) -> float:
        """Growth of ``Y_j`` per slot: the required rate ``R_j / L_j``."""
        return js.remaining / left

    def queues(self) -> dict[str, float]:
        """Current queue values: ``R:<job>``, ``Y:<job>``, ``Z:<dc or global>`` and the
        slot's carbon budget ``A:<dc or global>`` (kg, :meth:`_pace`)."""
        out = {f"R:{j}": r for j, r in self._R_prev.items()}
        out.update({f"Y:{j}": y for j, y in self._Y.items()})
        out.update({f"Z:{d}": z for d, z in self._Z.items()})
        out.update({f"A:{d}": a for d, a in self._budget_slot.items()})
        return out

    # -- helpers -------------------------------------------------------------------------
    def _menus(self, state: SlotState) -> Mapping[str, tuple[int, ...]] | None:
        if self.gpu_counts is None or isinstance(self.gpu_counts, Mapping):
            return self.gpu_counts
        menu = tuple(self.gpu_counts)
        return {js.job.job_id: menu for js in state.jobs if js.job.is_training}

    @staticmethod
    def _slots_left(sc: ScenarioView, js: JobState, t: int) -> int:
        """Slots from ``t`` to the job's deadline (the horizon's end if none), at least 1."""
        if js.job.deadline is None:
            end = sc.n_slots
        else:
            end = math.floor((js.job.deadline - sc.start).total_seconds() / sc.slot_s + 1e-9)
        return max(end - t, 1)

    def _placement(self, sc: ScenarioView, js: JobState, opts: SlotOptions, k: int
                   ) -> Placement:
        pl = opts.placement(k)
        # Under a power cap the batch stays the one whose power the MILP checked.
        if not (self.refine_batch and js.job.is_training) or self.caps.has_power:
            return pl
        prof = sc.profile(js.job.app, pl.gpu_type)
        gpn = next(p.gpus_per_node for p in sc.pools
                   if p.datacenter == pl.datacenter and p.gpu_type == pl.gpu_type)
        m = perf.best_batch(prof, pl.n_gpus, js.progress, gpus_per_node=gpn, phi=js.phi)
        return Placement(pl.datacenter, pl.gpu_type, pl.n_gpus, int(m))
