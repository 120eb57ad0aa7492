"""The forecast-threshold scheduler (round 1's "lyapunov"): one assignment MILP per slot.

Kept as a baseline under a name that says what it is: each job runs when the slot's
carbon-priced unit cost beats its *own* threshold (the N-th cheapest forecast slot before
its deadline), with a backlog boost. This is not drift-plus-penalty (the threshold
normalisation makes cost non-monotone in V) and it ignores that other jobs want the same
cheap slots; :mod:`workbench.policies.lyapunov` is the drift-plus-penalty scheduler and
:mod:`workbench.policies.lookahead` the contention-aware planner.

Queues, updated at the start of every slot from what the previous slot achieved:

* ``R_j`` — remaining progress of training job ``j`` as a fraction of its total work
  (the state's ``remaining``; ``R:<job>`` in :attr:`Allocation.queues`).
* ``Y_j`` — deadline-aware ε-persistent virtual queue (Neely), in fractions of work::

      Y_j(t+1) = max(Y_j(t) + eps_j(t) - progress_j(t), 0),   eps_j = R_j / L_j

  where ``L_j`` is the number of slots left before the deadline (horizon end if none):
  it grows by the *required rate* whenever the job falls behind, so a nearly finished job
  near its deadline is not starved (``Y:<job>``).
* ``Z_d`` — carbon backlog in kg per datacenter (or one ``global``) under a cap::

      Z_d(t+1) = max(Z_d(t) + carbon_d(t) - cap_d / n_slots, 0)     (``Z:<dc>``)

Per option ``i`` (job ``j``, datacenter ``d``, GPU type and count) with slot progress
``p_i``, cost ``c_i`` and carbon ``g_i`` from :func:`~workbench.policies.base.slot_options`::

    lambda_d  = carbon_gain * Z_d / cap_slot_d * pbar           (currency per kg)
    c'_i      = c_i + lambda_d * g_i                              (carbon-priced cost)
    NetCoef_i = ((V + Q_j) * p_i - V * c'_i / kappa_j) / pref_j   training
    NetCoef_i = -V * c'_i / mean_i(c'_i)                          inference (placed every slot)

with ``pbar`` the mean price per kg of carbon of the forecast, ``pref_j`` the job's best
progress per slot, ``Q_j = Y_j / pref_j + 10 V max(0, (u_j - u0) / (1 - u0))`` the backlog
in slots behind the required pace plus an urgency boost (``u_j = R_j / (preq_j L_j)`` is the
share of the remaining slots the job needs at its best progress with at most its requested
GPU count, ``preq_j``: a job must not count on a whole pool being free near its deadline),
and ``kappa_j`` the job's *threshold unit cost* (currency per unit of progress): the
``N_j``-th cheapest of the best unit costs ``min_i c'_i / p_i`` over the slots left before
its deadline, with ``N_j = ceil(slack_margin * R_j / p_sel)`` the slots it needs. The
forecast thus values waiting: a slot cheaper than ``kappa_j`` earns a positive NetCoef, a
dearer one only runs once the backlog ``Q_j`` outweighs the price. Without a forecast
(``use_forecast=False``) the future unit costs use an exponential moving average of past
prices per region.

**Meaning of V**: the backlog, in slots behind the required pace, that a job accepts before
it pays twice its threshold unit cost (``Q_j > V (c'/(kappa p) - 1)`` makes it run). Large V:
cheaper, later, larger backlogs (``O(V)``); small V: runs as soon as it lags. Migration and
restart losses are charged through ``p_i`` (seconds lost) and ``c_i`` (transfer energy);
on top, a job moves only when the best remote NetCoef beats the best stay NetCoef by more
than ``migration_threshold`` (relative, hysteresis).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

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
from workbench.policies.milp import (
    ExtraConstraints,
    build_slot_problem,
    current_prices,
)

log = logging.getLogger(__name__)

DEFAULT_V = 20.0
"""Default V of the threshold rule: a job may fall ~20 slots (5 h at 15 min) behind pace
before paying double."""
SOLVERS = ("pyomo", "fast")
"""Slot solvers: the readable Pyomo reference model, or the array fast path
(:class:`workbench.policies.fastslot.FastSlotSolver`: LP relaxation, repair, exact polish)."""

_URGENCY_GAIN = 10.0
_GLOBAL = "global"


class ThresholdPolicy:
    """Forecast-threshold scheduler (see the module docstring for the maths).

    Parameters
    ----------
    V : float
        Cost weight against backlog (> 0); see "Meaning of V" above.
    carbon_cap_kg : float or mapping datacenter -> float, optional
        Carbon cap over the whole horizon, kg (one global cap or per datacenter). The
        caller converts "percent below asap-home" into kg. Soft: enforced through ``Z``.
    power_cap_kw : float or mapping datacenter -> float, optional
        Facility power cap per datacenter and slot, kW (hard, in the MILP).
    gpu_counts : tuple of int or mapping job id -> tuple of int, optional
        GPU-count menu override: one menu for every training job, or per job.
    migration_threshold : float
        Minimum relative NetCoef gain of the best remote option over the best stay option
        for a move (0.1 = 10 %).
    use_forecast : bool
        Value waiting with the forecast (temporal shifting); False uses past prices.
    restart_s : float
        Seconds lost on a start, resume or migration.
    mip_rel_gap, time_limit_s : float
        HiGHS relative MIP gap and time limit per slot (s).
    slack_margin : float
        Safety factor (>= 1) on the slots a job needs when setting its threshold.
    urgency_start : float
        Urgency ``u0`` in (0, 1) above which the urgency boost starts.
    carbon_gain : float
        Gain of the carbon shadow price ``lambda_d`` (>= 0).
    refine_batch : bool
        Fine-tune each running job's batch size by golden-section search.
    extra_constraints : callable(model) -> None, optional
        What-if hook applied to every slot's Pyomo model before solving.
    solver : {"pyomo", "fast"}
        ``"pyomo"`` solves the readable reference MILP; ``"fast"`` the same model as arrays
        with highspy (LP relaxation, integer repair, exact polish; see ``bench/slot_solver.py``).
        A what-if hook always goes through the Pyomo model.
    """

    name = "threshold"

    def __init__(
        self,
        V: float = DEFAULT_V,
        *,
        carbon_cap_kg: float | Mapping[str, float] | None = None,
        power_cap_kw: float | Mapping[str, float] | None = None,
        gpu_counts: tuple[int, ...] | Mapping[str, tuple[int, ...]] | None = None,
        migration_threshold: float = 0.03,
        use_forecast: bool = True,
        restart_s: float = RESTART_S_DEFAULT,
        mip_rel_gap: float = 1e-3,
        time_limit_s: float = 10.0,
        slack_margin: float = 1.1,
        urgency_start: float = 0.7,
        carbon_gain: float = 1.0,
        refine_batch: bool = True,
        extra_constraints: ExtraConstraints | None = None,
        solver: str = "pyomo",
    ) -> None:
        if solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
        if not (isinstance(V, int | float) and math.isfinite(V) and V > 0):
            raise ValueError(f"V must be a positive number, got {V!r}; try V=20")
        if migration_threshold < 0:
            raise ValueError(f"migration_threshold must be >= 0, got {migration_threshold}")
        if slack_margin < 1:
            raise ValueError(f"slack_margin must be >= 1, got {slack_margin}")
        if not 0 < urgency_start < 1:
            raise ValueError(f"urgency_start must be in (0, 1), got {urgency_start}")
        if restart_s < 0 or carbon_gain < 0:
            raise ValueError("restart_s and carbon_gain must be >= 0")
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
        self.use_forecast = bool(use_forecast)
        self.restart_s = float(restart_s)
        self.mip_rel_gap = float(mip_rel_gap)
        self.time_limit_s = float(time_limit_s)
        self.slack_margin = float(slack_margin)
        self.urgency_start = float(urgency_start)
        self.carbon_gain = float(carbon_gain)
        self.refine_batch = bool(refine_batch)
        self.extra_constraints = extra_constraints
        self.solver = solver
        self._fast = FastSlotSolver()
        self._scenario: ScenarioView | None = None

    # -- lifecycle -----------------------------------------------------------------------
    def reset(self, scenario: ScenarioView) -> None:
        """Empty every queue (the cap against what inference alone emits is checked by the
        simulator, which holds the truth)."""
        self._scenario = scenario
        self._fast.reset()
        self._Y: dict[str, float] = {}
        self._eps: dict[str, float] = {}
        self._R_prev: dict[str, float] = {}
        self._Z: dict[str, float] = {}
        self._cap_slot: dict[str, float] = {}
        self._pred_carbon: dict[str, float] = {}
        self._carbon_so_far = 0.0
        self._carbon_by_dc: dict[str, float] = {}
        self._ema_price: NDArray[np.float64] | None = None
        self._ema_carbon: NDArray[np.float64] | None = None
        cap = self.carbon_cap_kg
        if isinstance(cap, Mapping):
            names = {dc.name for dc in scenario.datacenters}
            unknown = sorted(set(cap) - names)
            if unknown:
                raise ValueError(f"carbon_cap_kg names unknown datacenters {unknown}")
            self._cap_slot = {d: float(v) / scenario.n_slots for d, v in cap.items()}
        elif cap is not None:
            self._cap_slot = {_GLOBAL: float(cap) / scenario.n_slots}
        self._Z = dict.fromkeys(self._cap_slot, 0.0)
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
            self._Z[_GLOBAL] = max(self._Z[_GLOBAL] + emitted - self._cap_slot[_GLOBAL], 0.0)
        else:
            metered = state.carbon_kg_by_dc_so_far
            for d in self._Z:
                # The meter when the state carries one; a hand-built state without it
                # falls back on what the last allocation was predicted to emit.
                emitted = (metered.get(d, 0.0) - self._carbon_by_dc.get(d, 0.0)
                           if metered else self._pred_carbon.get(d, 0.0))
                self._Z[d] = max(self._Z[d] + max(emitted, 0.0) - self._cap_slot[d], 0.0)
            self._carbon_by_dc = dict(metered)
        self._carbon_so_far = state.carbon_kg_so_far
        self._R_prev = remaining

    def queues(self) -> dict[str, float]:
        """Current queue values: ``R:<job>``, ``Y:<job>``, ``Z:<dc or global>``."""
        out = {f"R:{j}": r for j, r in self._R_prev.items()}
        out.update({f"Y:{j}": y for j, y in self._Y.items()})
        out.update({f"Z:{d}": z for d, z in self._Z.items()})
        return out

    # -- the decision --------------------------------------------------------------------
    def decide(self, state: SlotState, forecast: Forecast) -> Allocation:
        if self._scenario is None or self._scenario is not state.scenario:
            self.reset(state.scenario)
        sc = state.scenario
        self._update_queues(state)
        price, carbon = current_prices(sc, forecast)
        opts = slot_options(state, price, carbon, gpu_counts=self._menus(state),
                            restart_s=self.restart_s)
        dc_names = [dc.name for dc in sc.datacenters]
        dc_pos = {n: i for i, n in enumerate(dc_names)}
        dc_idx = np.array([dc_pos[str(d)] for d in opts.datacenter], dtype=np.int64)
        lam = self._carbon_price(sc, forecast)
        ceff = opts.cost + lam[dc_idx] * opts.carbon_kg
        future = self._future_prices(sc, forecast, lam, state)
        coef, q = self._net_coef(state, opts, dc_idx, ceff, future)
        keep, stay_best = self._hysteresis(state, opts, coef)
        prob = build_slot_problem(state, opts, coef, self.power_cap_kw)
        chosen, info = solve_or_greedy(
            prob, keep, q, t=state.t, solver=self.solver, fast=self._fast,
            mip_rel_gap=self.mip_rel_gap, time_limit_s=self.time_limit_s,
            extra_constraints=self.extra_constraints)
        placements: dict[str, Placement] = {}
        gains: dict[str, float] = {}
        reasons: dict[str, str] = {}
        carbon_by_dc: dict[str, float] = {}
        for k in chosen.tolist():
            js = state.jobs[int(opts.job_index[k])]
            jid = js.job.job_id
            placements[jid] = self._placement(sc, js, opts, k)
            dc = str(opts.datacenter[k])
            carbon_by_dc[dc] = carbon_by_dc.get(dc, 0.0) + float(opts.carbon_kg[k])
            if opts.moves[k]:
                s = stay_best[int(opts.job_index[k])]
                gains[jid] = float(coef[k] - s) if math.isfinite(s) else float(coef[k])
                rel = float(_relative_gain(coef[k], s))
                reasons[jid] = (
                    f"migrate {js.last_datacenter}->{dc}: NetCoef {coef[k]:.3g} vs stay "
                    f"{s:.3g} (gain {rel:.0%} > threshold {self.migration_threshold:.0%})"
                )
            elif js.job.is_training and q[int(opts.job_index[k])] > self.V:
                reasons[jid] = "behind its required pace (urgent)"
        self._pred_carbon = carbon_by_dc
        self._eps = {}
        for js in state.jobs:
            if js.job.is_training:
                self._eps[js.job.job_id] = js.remaining / self._slots_left(sc, js, state.t)
        queues = self.queues()
        return Allocation(placements=placements, solve=info, expected_gain=gains,
                          reasons=reasons, queues=queues)

    # -- helpers -------------------------------------------------------------------------
    def _menus(self, state: SlotState) -> Mapping[str, tuple[int, ...]] | None:
        if self.gpu_counts is None or isinstance(self.gpu_counts, Mapping):
            return self.gpu_counts
        menu = tuple(self.gpu_counts)
        return {js.job.job_id: menu for js in state.jobs if js.job.is_training}

    @staticmethod
    def _slots_left(sc: ScenarioView, js: JobState, t: int) -> int:
        end = sc.n_slots if js.job.deadline is None else sc.slot_of(js.job.deadline)
        return max(end - t, 1)

    def _carbon_price(self, sc: ScenarioView, forecast: Forecast) -> NDArray[np.float64]:
        """Shadow carbon price per datacenter, currency per kg: ``gain * Z / cap_slot * pbar``."""
        lam = np.zeros(len(sc.datacenters))
        if not self._Z:
            return lam
        pbar = float(np.mean(forecast.price_per_kwh)) / max(
            float(np.mean(forecast.carbon_g_per_kwh)) / 1000.0, 1e-9)
        for i, dc in enumerate(sc.datacenters):
            key = _GLOBAL if _GLOBAL in self._Z else dc.name
            if key in self._Z:
                lam[i] = self.carbon_gain * self._Z[key] / self._cap_slot[key] * pbar
        return lam

    def _future_prices(self, sc: ScenarioView, forecast: Forecast, lam: NDArray[np.float64],
                       state: SlotState) -> NDArray[np.float64]:
        """Carbon-priced price per kWh, shape (slots ahead, datacenters); row 0 is now.

        The forecast is tiled over whole days (its seasonal shape repeats) to cover the
        longest deadline; without a forecast, an EMA of past prices stands for the future.
        """
        reg = [forecast.region_index(dc.region) for dc in sc.datacenters]
        price = forecast.price_per_kwh[:, reg]
        carbon = forecast.carbon_g_per_kwh[:, reg]
        if self._ema_price is None or self._ema_carbon is None:
            self._ema_price, self._ema_carbon = price[0].copy(), carbon[0].copy()
        else:
            a = 1.0 / 96.0
            self._ema_price = (1 - a) * self._ema_price + a * price[0]
            self._ema_carbon = (1 - a) * self._ema_carbon + a * carbon[0]
        horizon = max([self._slots_left(sc, js, state.t) for js in state.jobs], default=1)
        if self.use_forecast and price.shape[0] > 1:
            per_day = max(int(round(86400 / sc.slot_s)), 1)
            period = price.shape[0]
            if period >= per_day:
                period = (period // per_day) * per_day
            idx = np.arange(horizon) % period
            fp, fc = price[idx], carbon[idx]
        else:
            fp = np.vstack([price[:1], np.repeat(self._ema_price[None, :], horizon - 1, 0)])
            fc = np.vstack([carbon[:1], np.repeat(self._ema_carbon[None, :], horizon - 1, 0)])
        return fp + lam[None, :] * fc / 1000.0

    def _net_coef(
        self,
        state: SlotState,
        opts: SlotOptions,
        dc_idx: NDArray[np.int64],
        ceff: NDArray[np.float64],
        future: NDArray[np.float64],
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """NetCoef per option and the backlog weight ``Q_j`` per job."""
        sc = state.scenario
        V = self.V
        coef = np.zeros(len(opts))
        q = np.zeros(len(state.jobs))
        order = np.argsort(opts.job_index, kind="stable")
        bounds = np.searchsorted(opts.job_index[order], np.arange(len(state.jobs) + 1))
        n_dc = future.shape[1]
        for j, js in enumerate(state.jobs):
            rows = order[bounds[j]:bounds[j + 1]]
            if rows.size == 0:
                continue
            if not js.job.is_training:
                scale = max(float(np.mean(ceff[rows])), 1e-12)
                coef[rows] = -V * ceff[rows] / scale
                continue
            p = opts.progress[rows]
            pref = float(p.max())
            if pref <= 0:
                coef[rows] = -1.0
                continue
            left = self._slots_left(sc, js, state.t)
            # Urgency is judged at the job's requested size, not at the largest menu entry:
            # a job must not count on grabbing a whole pool in its last hours.
            req = opts.n_gpus[rows] <= js.job.requested_gpus
            psafe = float(p[req].max()) if req.any() and p[req].max() > 0 else pref
            u = js.remaining / (psafe * left)
            boost = _URGENCY_GAIN * V * max(0.0, (u - self.urgency_start)
                                            / (1 - self.urgency_start))
            qj = self._Y.get(js.job.job_id, 0.0) / pref + boost
            q[j] = qj
            kappa = self._threshold(js, rows, opts, dc_idx, ceff, future[:left], n_dc, pref)
            cost_term = 0.0 if not math.isfinite(kappa) else 1.0 / kappa
            coef[rows] = ((V + qj) * p - V * ceff[rows] * cost_term) / pref
        return coef, q

    def _threshold(self, js: JobState, rows: NDArray[np.int64], opts: SlotOptions,
                   dc_idx: NDArray[np.int64], ceff: NDArray[np.float64],
                   future: NDArray[np.float64], n_dc: int, pref: float) -> float:
        """Threshold unit cost ``kappa_j``: the N-th cheapest best unit cost before the deadline."""
        p = opts.progress[rows]
        ok = p > 0
        rows, p = rows[ok], p[ok]
        unit_now = ceff[rows] / p
        best = int(np.argmin(unit_now))
        left = future.shape[0]
        need = math.ceil(self.slack_margin * js.remaining / p[best] - 1e-9)
        if need > left:
            need = math.ceil(self.slack_margin * js.remaining / pref - 1e-9)
        if need >= left:
            return math.inf
        # Unit cost now per datacenter, carried to later slots by the price ratio: a move's
        # one-off charges (both ends of its transfer) look the same now and later.
        uc = np.full(n_dc, np.inf)
        np.minimum.at(uc, dc_idx[rows], ceff[rows] / p)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(future[:1] > 0, future / future[:1], 1.0)
        unit = np.min(uc[None, :] * ratio, axis=1)
        unit[0] = unit_now[best]
        kappa = float(np.partition(unit, need - 1)[need - 1])
        # Among equally cheap slots, the earliest wins: run now rather than later.
        return kappa * (1.0 + 1e-6)

    def _hysteresis(self, state: SlotState, opts: SlotOptions,
                    coef: NDArray[np.float64]) -> tuple[NDArray[np.bool_], NDArray[np.float64]]:
        """Drop the moves of jobs whose best move does not beat staying by the threshold."""
        keep = np.ones(len(opts), dtype=bool)
        stay_best = np.full(len(state.jobs), -np.inf)
        if not len(opts):
            return keep, stay_best
        stay = ~opts.moves
        np.maximum.at(stay_best, opts.job_index[stay], coef[stay])
        move_best = np.full(len(state.jobs), -np.inf)
        np.maximum.at(move_best, opts.job_index[opts.moves], coef[opts.moves])
        both = np.isfinite(move_best) & np.isfinite(stay_best)
        drop = both & (_relative_gain(move_best, stay_best) <= self.migration_threshold)
        keep[drop[opts.job_index] & opts.moves] = False
        return keep, stay_best

    def _placement(self, sc: ScenarioView, js: JobState, opts: SlotOptions, k: int) -> Placement:
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
        return {"policy": self.name, "V": self.V, "carbon_cap_kg": self.carbon_cap_kg,
                "power_cap_kw": self.power_cap_kw, "gpu_counts": self.gpu_counts,
                "migration_threshold": self.migration_threshold,
                "use_forecast": self.use_forecast, "restart_s": self.restart_s,
                "solver": self.solver}


def _relative_gain(move: ArrayLike, stay: ArrayLike) -> NDArray[np.float64]:
    """``(move - stay) / |stay|`` elementwise; infinite when staying is worth nothing.

    A ``stay`` of (about) zero gives ``inf`` if ``move`` beats it, else 0.
    """
    mv, st = np.asarray(move, dtype=float), np.asarray(stay, dtype=float)
    small = np.abs(st) < 1e-12
    with np.errstate(invalid="ignore"):
        rel = (mv - st) / np.where(small, 1.0, np.abs(st))
    rel = np.where(small, np.where(mv > st, np.inf, 0.0), rel)
    return np.where(np.isfinite(st), rel, np.inf)

