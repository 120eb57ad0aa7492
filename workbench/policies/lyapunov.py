"""The Lyapunov (drift-plus-penalty) online scheduler, true to its maths: one MILP per slot.

Queues, updated at the start of every slot from what the previous slot metered:

* ``R_j`` — remaining progress of training job ``j``, a fraction of its total work (the
  state's ``remaining``, observed): ``R_j(t+1) = max(R_j(t) - progress_j(t), 0)``.
* ``Y_j`` — Neely's epsilon-persistent deadline queue, in fractions of work::

      Y_j(t+1) = max(Y_j(t) + eps_j(t) - progress_j(t), 0),   eps_j = R_j / L_j

  with ``L_j`` the slots left before the deadline (the horizon end if none): it grows by
  the required rate whenever the job falls behind, so worst-case delay stays bounded.
* ``Z_d`` — carbon backlog per datacenter (or one ``global``) under a cap, in units of the
  per-slot cap ``a_d = cap_d / n_slots``: ``Z_d(t+1) = max(Z_d(t) + g_d(t)/a_d - 1, 0)``
  with ``g_d(t)`` the metered carbon (kg).

Each slot maximises ``sum_i z_i * NetCoef_i`` over binaries ``z`` (one option per job, pool
capacity, power cap, link volume; :mod:`workbench.policies.milp`) with, for option ``i`` of
job ``j`` in datacenter ``d`` (progress ``p_i``, cost ``c_i``, carbon ``g_i`` kg from
:func:`~workbench.policies.base.slot_options`)::

    NetCoef_i = (R_j + Y_j) * p_i - V * c_i / kappa - Z_d * g_i / a_d     training
    NetCoef_i =                   - V * c_i / kappa - Z_d * g_i / a_d     inference

This is drift-plus-penalty: minimising ``V * penalty - sum queue * service`` per slot. The
constant ``kappa`` (currency per whole job of work) only fixes the unit of ``V`` so that it
needs no tuning: set once per run at the first slot with a training job,
``kappa = median_j(min_i e_i / p_i) * mean |forecast price|`` (the typical energy per job times
the typical price). ``V = 1`` then means: a job with a full queue runs when its slot costs
less than a typical job's whole bill per unit of work; the default is ``V = 0.1``. Large V:
cost within ``O(1/V)`` of the optimum, backlogs ``O(V)`` (``bench/lyapunov_theory.py``).

A job with no positive choice pauses. Migration: losses enter ``p_i`` (seconds lost) and
``c_i`` (transfer energy), and a move must pay for its round trip over the expected dwell
(:mod:`workbench.policies.migration`) and beat staying by ``migration_threshold``
(relative, default 0). After the MILP, the batch size of each running job is fine-tuned.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from workbench import perf
from workbench.model import ScenarioView
from workbench.policies.base import (
    RESTART_S_DEFAULT,
    Allocation,
    Forecast,
    JobState,
    Placement,
    SlotOptions,
    SlotState,
    check_caps,
    slot_options,
)
from workbench.policies.fastslot import FastSlotSolver, solve_or_greedy
from workbench.policies.migration import (
    advantage_slots,
    moves_that_pay,
    one_way_move_cost,
    transfer_kwh,
)
from workbench.policies.milp import (
    ExtraConstraints,
    build_slot_problem,
    current_prices,
)

log = logging.getLogger(__name__)

DEFAULT_V = 0.1
"""Default V, in units of ``kappa`` (see the module docstring), the same on every scenario:
on the battery's us3-jul-burst and es-no-br-jan, V = 0.1 missed 3 and 0 deadlines against
9 and 7 at V = 0.3, 19 and 15 at V = 1 (``bench/battery.py``, docs/results.md)."""
SOLVERS = ("pyomo", "fast")
"""Slot solvers: the readable Pyomo reference model, or the array fast path
(:class:`workbench.policies.fastslot.FastSlotSolver`: LP relaxation, repair, exact polish)."""

_GLOBAL = "global"


def net_coef(weight: NDArray[np.float64], progress: NDArray[np.float64],
             cost: NDArray[np.float64], carbon_kg: NDArray[np.float64],
             z_per_cap: NDArray[np.float64], cap_slot_kg: NDArray[np.float64],
             V: float, kappa: float) -> NDArray[np.float64]:
    """Drift-plus-penalty weight per option.

    ``NetCoef = w * p - V * c / kappa - Z * g / a`` with ``w = R_j + Y_j`` (0 for inference),
    ``Z`` the carbon queue in units of the per-slot cap ``a`` (kg) of the option's
    datacenter (``a = inf``: no cap).
    """
    carbon_term = np.where(np.isfinite(cap_slot_kg), z_per_cap * carbon_kg
                           / np.where(np.isfinite(cap_slot_kg), cap_slot_kg, 1.0), 0.0)
    return weight * progress - V * cost / kappa - carbon_term


class LyapunovPolicy:
    """Drift-plus-penalty scheduler (see the module docstring for the maths).

    Parameters
    ----------
    V : float
        Cost weight against backlog (> 0), in units of the run's cost scale ``kappa``.
    carbon_cap_kg : float or mapping datacenter -> float, optional
        Carbon cap over the whole horizon, kg (one global cap or per datacenter). Soft:
        enforced through ``Z``.
    power_cap_kw : float or mapping datacenter -> float, optional
        Facility power cap per datacenter and slot, kW (hard, in the MILP).
    gpu_counts : tuple of int or mapping job id -> tuple of int, optional
        GPU-count menu override: one menu for every training job, or per job.
    migration_threshold : float
        Extra relative margin a move's NetCoef must beat staying by (0 = the round-trip
        rule alone).
    min_dwell_slots : int
        A job is not moved again within this many slots of its last move.
    restart_s : float
        Seconds lost on a start, resume or migration.
    mip_rel_gap, time_limit_s : float
        HiGHS relative MIP gap and time limit per slot (s).
    refine_batch : bool
        Fine-tune each running job's batch size by golden-section search.
    extra_constraints : callable(model) -> None, optional
        What-if hook applied to every slot's Pyomo model before solving.
    solver : {"fast", "pyomo"}
        ``"fast"`` solves the MILP as arrays with highspy; ``"pyomo"`` the readable reference
        model (same optimum). A what-if hook always goes through the Pyomo model.
    """

    name = "lyapunov"

    def __init__(
        self,
        V: float = DEFAULT_V,
        *,
        carbon_cap_kg: float | Mapping[str, float] | None = None,
        power_cap_kw: float | Mapping[str, float] | None = None,
        gpu_counts: tuple[int, ...] | Mapping[str, tuple[int, ...]] | None = None,
        migration_threshold: float = 0.0,
        min_dwell_slots: int = 8,
        restart_s: float = RESTART_S_DEFAULT,
        mip_rel_gap: float = 1e-3,
        time_limit_s: float = 10.0,
        refine_batch: bool = True,
        extra_constraints: ExtraConstraints | None = None,
        solver: str = "fast",
    ) -> None:
        if solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
        if not (isinstance(V, int | float) and math.isfinite(V) and V > 0):
            raise ValueError(f"V must be a positive number, got {V!r}; try V=1")
        if not (math.isfinite(migration_threshold) and migration_threshold >= 0):
            raise ValueError(f"migration_threshold must be >= 0, got {migration_threshold}")
        if not (isinstance(min_dwell_slots, int) and min_dwell_slots >= 0):
            raise ValueError(f"min_dwell_slots must be an integer >= 0, got {min_dwell_slots!r}")
        if not (math.isfinite(restart_s) and restart_s >= 0):
            raise ValueError(f"restart_s must be >= 0 seconds, got {restart_s!r}")
        if not (mip_rel_gap >= 0 and time_limit_s > 0):
            raise ValueError("mip_rel_gap must be >= 0 and time_limit_s > 0")
        check_caps(carbon_cap_kg, "carbon_cap_kg", "kg")
        check_caps(power_cap_kw, "power_cap_kw", "kW")
        if isinstance(gpu_counts, tuple | list) and not all(
                isinstance(n, int) and n > 0 for n in gpu_counts):
            raise ValueError(f"gpu_counts must hold positive integers, got {gpu_counts!r}")
        self.V = float(V)
        self.carbon_cap_kg = carbon_cap_kg
        self.power_cap_kw = power_cap_kw
        self.gpu_counts = gpu_counts
        self.migration_threshold = float(migration_threshold)
        self.min_dwell_slots = min_dwell_slots
        self.restart_s = float(restart_s)
        self.mip_rel_gap = float(mip_rel_gap)
        self.time_limit_s = float(time_limit_s)
        self.refine_batch = bool(refine_batch)
        self.extra_constraints = extra_constraints
        self.solver = solver
        self._fast = FastSlotSolver()
        self._scenario: ScenarioView | None = None
        self.kappa: float | None = None

    # -- lifecycle -----------------------------------------------------------------------
    def reset(self, scenario: ScenarioView) -> None:
        """Empty every queue (the cap against what inference alone emits is checked by the
        simulator, which holds the truth)."""
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
        self.kappa = None
        cap = self.carbon_cap_kg
        if isinstance(cap, Mapping):
            names = {dc.name for dc in scenario.datacenters}
            unknown = sorted(set(cap) - names)
            if unknown:
                raise ValueError(f"carbon_cap_kg names unknown datacenters {unknown}")
            self._cap_slot = {d: float(v) / scenario.n_slots for d, v in cap.items()}
        elif cap is not None:
            self._cap_slot = {_GLOBAL: float(cap) / scenario.n_slots}
        self._Z: dict[str, float] = dict.fromkeys(self._cap_slot, 0.0)
        # The cap against what inference alone must emit is checked by the simulator,
        # which holds the truth (a policy sees only the scenario's static facts).

    # -- queues --------------------------------------------------------------------------
    def _update_queues(self, state: SlotState) -> None:
        remaining = {js.job.job_id: js.remaining for js in state.jobs if js.job.is_training}
        for jid, r_prev in self._R_prev.items():
            if jid not in remaining:
                self._Y.pop(jid, None)
                continue
            progress = max(r_prev - remaining[jid], 0.0)
            self._Y[jid] = max(self._Y.get(jid, 0.0) + self._eps.get(jid, 0.0) - progress, 0.0)
        if _GLOBAL in self._Z:
            emitted = max(state.carbon_kg_so_far - self._carbon_so_far, 0.0)
            self._Z[_GLOBAL] = max(self._Z[_GLOBAL] + emitted / self._cap_slot[_GLOBAL] - 1.0,
                                   0.0)
        else:
            metered = state.carbon_kg_by_dc_so_far
            for d in self._Z:
                # The meter when the state carries one; a hand-built state without it
                # falls back on what the last allocation was predicted to emit.
                emitted = (metered.get(d, 0.0) - self._carbon_by_dc.get(d, 0.0)
                           if metered else self._pred_carbon.get(d, 0.0))
                self._Z[d] = max(self._Z[d] + max(emitted, 0.0) / self._cap_slot[d] - 1.0, 0.0)
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

    def queues(self) -> dict[str, float]:
        """Current queue values: ``R:<job>``, ``Y:<job>``, ``Z:<dc or global>`` (per-slot caps)."""
        out = {f"R:{j}": r for j, r in self._R_prev.items()}
        out.update({f"Y:{j}": y for j, y in self._Y.items()})
        out.update({f"Z:{d}": z for d, z in self._Z.items()})
        return out

    # -- the decision --------------------------------------------------------------------
    def decide(self, state: SlotState, forecast: Forecast) -> Allocation:
        if self._scenario is None:
            self.reset(state.scenario)
        sc = self._scenario
        assert sc is not None
        self._update_queues(state)
        price, carbon = current_prices(sc, forecast)
        opts = slot_options(state, price, carbon, gpu_counts=self._menus(state),
                            restart_s=self.restart_s)
        if self.kappa is None:
            self.kappa = cost_scale(opts, forecast)
        kappa = self.kappa if self.kappa is not None else 1.0
        dc_names = [dc.name for dc in sc.datacenters]
        dc_pos = {n: i for i, n in enumerate(dc_names)}
        dc_idx = np.array([dc_pos[str(d)] for d in opts.datacenter], dtype=np.int64)
        weight = np.array([self._weight(js) for js in state.jobs], dtype=float)
        z, a = self._carbon_arrays(dc_names)
        coef = net_coef(weight[opts.job_index] if len(opts) else np.zeros(0), opts.progress,
                        opts.cost, opts.carbon_kg, z[dc_idx], a[dc_idx], self.V, kappa)
        keep, stay_best = self._moves(state, opts, coef, weight, price, kappa, forecast)
        prob = build_slot_problem(state, opts, coef, self.power_cap_kw)
        chosen, info = solve_or_greedy(
            prob, keep, weight, t=state.t, solver=self.solver, fast=self._fast,
            mip_rel_gap=self.mip_rel_gap, time_limit_s=self.time_limit_s,
            extra_constraints=self.extra_constraints)
        placements: dict[str, Placement] = {}
        gains: dict[str, float] = {}
        reasons: dict[str, str] = {}
        carbon_by_dc: dict[str, float] = {}
        for k in chosen.tolist():
            j = int(opts.job_index[k])
            js = state.jobs[j]
            jid = js.job.job_id
            placements[jid] = self._placement(sc, js, opts, k)
            dc = str(opts.datacenter[k])
            carbon_by_dc[dc] = carbon_by_dc.get(dc, 0.0) + float(opts.carbon_kg[k])
            if opts.moves[k]:
                gains[jid] = float(coef[k] - stay_best[j])
                reasons[jid] = (f"migrate {js.last_datacenter}->{dc}: NetCoef {coef[k]:.3g} vs "
                                f"stay {stay_best[j]:.3g}; pays for its round trip")
        self._pred_carbon = carbon_by_dc
        self._eps = {js.job.job_id: js.remaining / self._slots_left(sc, js, state.t)
                     for js in state.jobs if js.job.is_training}
        return Allocation(placements=placements, solve=info, expected_gain=gains,
                          reasons=reasons, queues=self.queues())

    # -- helpers -------------------------------------------------------------------------
    def _weight(self, js: JobState) -> float:
        """``R_j + Y_j`` for a training job, 0 for an inference service."""
        if not js.job.is_training:
            return 0.0
        return js.remaining + self._Y.get(js.job.job_id, 0.0)

    def _carbon_arrays(self, names: list[str]) -> tuple[NDArray[np.float64],
                                                          NDArray[np.float64]]:
        z = np.zeros(len(names))
        a = np.full(len(names), np.inf)
        for i, n in enumerate(names):
            key = _GLOBAL if _GLOBAL in self._Z else n
            if key in self._Z:
                z[i], a[i] = self._Z[key], self._cap_slot[key]
        return z, a

    def _moves(self, state: SlotState, opts: SlotOptions, coef: NDArray[np.float64],
               weight: NDArray[np.float64], price: Mapping[str, float],
               kappa: float, forecast: Forecast) -> tuple[NDArray[np.bool_],
                                                          NDArray[np.float64]]:
        """Keep only the moves that pay for their round trip (and beat the margin)."""
        sc = self._scenario
        assert sc is not None
        n_jobs = len(state.jobs)
        if not len(opts) or not opts.moves.any():
            keep = np.ones(len(opts), dtype=bool)
            stay = np.where([js.job.is_training for js in state.jobs], 0.0, -np.inf)
            if len(opts):
                np.maximum.at(stay, opts.job_index[~opts.moves], coef[~opts.moves])
            return keep, np.asarray(stay, dtype=float).reshape(n_jobs)
        slot_s = float(sc.slot_s)
        region = {dc.name: dc.region for dc in sc.datacenters}
        p_opt = np.array([price[region[str(d)]] for d in opts.datacenter])
        useful = np.maximum(slot_s - opts.transfer_s - self.restart_s, 1.0)
        steady = np.where(opts.moves, opts.progress * (slot_s - self.restart_s) / useful,
                          opts.progress)
        w = weight[opts.job_index]
        one_way = one_way_move_cost(opts, w, steady,
                                    self.V * transfer_kwh(sc, opts) * p_opt / kappa, slot_s)
        left = np.array([self._slots_left(sc, js, state.t) for js in state.jobs], dtype=float)
        rem = np.array([js.remaining for js in state.jobs], dtype=float)
        to_finish = rem[opts.job_index] / np.maximum(steady, 1e-12)
        names = [dc.name for dc in sc.datacenters]
        ridx = [forecast.region_index(dc.region) for dc in sc.datacenters]
        fp = np.asarray(forecast.price_per_kwh, dtype=float)[:, ridx]
        origin = np.array([names.index(js.last_datacenter) if js.last_datacenter in names
                           else 0 for js in state.jobs], dtype=np.int64)[opts.job_index]
        dest = np.array([names.index(str(d)) for d in opts.datacenter], dtype=np.int64)
        ahead = advantage_slots(fp, origin, dest)
        dwell = np.minimum(np.minimum(to_finish, left[opts.job_index]), ahead)
        finishes = to_finish <= dwell + 1e-9
        recent = np.array([state.t - self._moved_at.get(js.job.job_id, -10**9)
                           < self.min_dwell_slots for js in state.jobs], dtype=bool)
        keep, stay_best = moves_that_pay(opts, coef, one_way, dwell, finishes, recent)
        if self.migration_threshold > 0:
            sb = stay_best[opts.job_index]
            margin = coef - sb > self.migration_threshold * np.abs(sb)
            keep &= ~opts.moves | margin | ~np.isfinite(sb)
        return keep, stay_best

    def _menus(self, state: SlotState) -> Mapping[str, tuple[int, ...]] | None:
        if self.gpu_counts is None or isinstance(self.gpu_counts, Mapping):
            return self.gpu_counts
        menu = tuple(self.gpu_counts)
        return {js.job.job_id: menu for js in state.jobs if js.job.is_training}

    @staticmethod
    def _slots_left(sc: ScenarioView, js: JobState, t: int) -> int:
        if js.job.deadline is None:
            end = sc.n_slots
        else:
            end = math.floor((js.job.deadline - sc.start).total_seconds() / sc.slot_s + 1e-9)
        return max(end - t, 1)

    def _placement(self, sc: ScenarioView, js: JobState, opts: SlotOptions, k: int
                   ) -> Placement:
        pl = opts.placement(k)
        # Under a power cap the batch stays the one whose power the MILP checked.
        if not (self.refine_batch and js.job.is_training) or self.power_cap_kw is not None:
            return pl
        prof = sc.profile(js.job.app, pl.gpu_type)
        gpn = next(p.gpus_per_node for p in sc.pools
                   if p.datacenter == pl.datacenter and p.gpu_type == pl.gpu_type)
        m = perf.best_batch(prof, pl.n_gpus, js.progress, gpus_per_node=gpn, phi=js.phi)
        return Placement(pl.datacenter, pl.gpu_type, pl.n_gpus, int(m))

    def describe(self) -> dict[str, Any]:
        """The knobs, for run logs."""
        return {"policy": self.name, "V": self.V, "kappa": self.kappa,
                "carbon_cap_kg": self.carbon_cap_kg, "power_cap_kw": self.power_cap_kw,
                "gpu_counts": self.gpu_counts, "migration_threshold": self.migration_threshold,
                "min_dwell_slots": self.min_dwell_slots, "restart_s": self.restart_s,
                "solver": self.solver}


def cost_scale(opts: SlotOptions, forecast: Forecast) -> float | None:
    """``kappa``: typical energy of a whole job (kWh) times the typical |price| (per kWh).

    ``median_j min_i e_i / p_i`` over the slot's training jobs (``e`` kWh and ``p`` progress
    per option), times the mean absolute forecast price. None while no training job has a
    running option (the next slot tries again).
    """
    ok = opts.progress > 0
    if not ok.any():
        return None
    unit = np.full(len(opts.jobs), np.inf)
    np.minimum.at(unit, opts.job_index[ok], opts.energy_kwh[ok] / opts.progress[ok])
    unit = unit[np.isfinite(unit)]
    price = float(np.mean(np.abs(forecast.price_per_kwh)))
    return max(float(np.median(unit)) * price, 1e-9)

