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

import numpy as np
from numpy.typing import ArrayLike, NDArray

from workbench.caps import Caps
from workbench.forecast import Forecast
from workbench.model import ScenarioView
from workbench.optim.slot import ExtraConstraints
from workbench.policies.base import (
    RESTART_S_DEFAULT,
    Allocation,
    JobState,
    SlotOptions,
    SlotState,
    slot_options,
)
from workbench.policies.problems import current_prices
from workbench.policies.slotqueues import GLOBAL as _GLOBAL
from workbench.policies.slotqueues import SOLVERS, SlotQueuePolicy
from workbench.units import G_PER_KG

log = logging.getLogger(__name__)

DEFAULT_V = 20.0
"""Default V of the threshold rule: a job may fall ~20 slots (5 h at 15 min) behind pace
before paying double."""

_URGENCY_GAIN = 10.0

__all__ = ["DEFAULT_V", "SOLVERS", "ThresholdPolicy"]


class ThresholdPolicy(SlotQueuePolicy):
    """Forecast-threshold scheduler (see the module docstring for the maths).

    Parameters
    ----------
    V : float
        Cost weight against backlog (> 0); see "Meaning of V" above.
    migration_threshold : float
        Minimum relative NetCoef gain of the best remote option over the best stay option
        for a move (0.1 = 10 %).
    use_forecast : bool
        Value waiting with the forecast (temporal shifting); False uses past prices.
    slack_margin : float
        Safety factor (>= 1) on the slots a job needs when setting its threshold.
    urgency_start : float
        Urgency ``u0`` in (0, 1) above which the urgency boost starts.
    carbon_gain : float
        Gain of the carbon shadow price ``lambda_d`` (>= 0).
    caps, gpu_counts, restart_s, mip_rel_gap, time_limit_s, \
refine_batch, extra_constraints, solver
        As for every queue-based scheduler
        (:class:`~workbench.policies.slotqueues.SlotQueuePolicy`); the Pyomo model is the
        default solver here (``"fast"``: the same model as arrays, ``bench/slot_solver.py``).
    """

    name = "threshold"
    V_HINT = "V=20"

    def __init__(
        self,
        V: float = DEFAULT_V,
        *,
        caps: Caps | None = None,
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
        super().__init__(V, caps=caps, gpu_counts=gpu_counts,
                         migration_threshold=migration_threshold, restart_s=restart_s,
                         mip_rel_gap=mip_rel_gap, time_limit_s=time_limit_s,
                         refine_batch=refine_batch,
                         extra_constraints=extra_constraints, solver=solver)
        if slack_margin < 1:
            raise ValueError(f"slack_margin must be >= 1, got {slack_margin}")
        if not 0 < urgency_start < 1:
            raise ValueError(f"urgency_start must be in (0, 1), got {urgency_start}")
        if carbon_gain < 0:
            raise ValueError("restart_s and carbon_gain must be >= 0")
        self.use_forecast = bool(use_forecast)
        self.slack_margin = float(slack_margin)
        self.urgency_start = float(urgency_start)
        self.carbon_gain = float(carbon_gain)

    def reset(self, scenario: ScenarioView) -> None:
        """Empty every queue and the price averages."""
        super().reset(scenario)
        self._ema_price: NDArray[np.float64] | None = None
        self._ema_carbon: NDArray[np.float64] | None = None

    # -- the decision --------------------------------------------------------------------
    def decide(self, state: SlotState, forecast: Forecast) -> Allocation:
        if self._scenario is None or self._scenario is not state.scenario:
            self.reset(state.scenario)
        sc = state.scenario
        self._update_queues(state)
        price, carbon = current_prices(sc, forecast)
        opts = slot_options(state, price, carbon, gpu_counts=self._menus(state),
                            restart_s=self.restart_s)
        self._pace(state, opts, forecast)
        dc_names = [dc.name for dc in sc.datacenters]
        dc_pos = {n: i for i, n in enumerate(dc_names)}
        dc_idx = np.array([dc_pos[str(d)] for d in opts.datacenter], dtype=np.int64)
        lam = self._carbon_price(sc, forecast)
        ceff = opts.cost + lam[dc_idx] * opts.carbon_kg
        future = self._future_prices(sc, forecast, lam, state)
        coef, q = self._net_coef(state, opts, dc_idx, ceff, future)
        keep, stay_best = self._hysteresis(state, opts, coef)
        def explain(k: int, js: JobState) -> tuple[float | None, str] | None:
            if opts.moves[k]:
                s = stay_best[int(opts.job_index[k])]
                rel = float(_relative_gain(coef[k], s))
                return (float(coef[k] - s) if math.isfinite(s) else float(coef[k]),
                        f"migrate {js.last_datacenter}->{opts.datacenter[k]}: NetCoef "
                        f"{coef[k]:.3g} vs stay {s:.3g} (gain {rel:.0%} > threshold "
                        f"{self.migration_threshold:.0%})")
            if js.job.is_training and q[int(opts.job_index[k])] > self.V:
                return None, "behind its required pace (urgent)"
            return None

        return self._solve_slot(state, opts, coef, keep, q, explain)

    # -- helpers -------------------------------------------------------------------------
    def _carbon_price(self, sc: ScenarioView, forecast: Forecast) -> NDArray[np.float64]:
        """Shadow carbon price per datacenter, currency per kg: ``gain * Z / cap_slot * pbar``."""
        lam = np.zeros(len(sc.datacenters))
        if not self._Z:
            return lam
        pbar = float(np.mean(forecast.price_per_kwh)) / max(
            float(np.mean(forecast.carbon_g_per_kwh)) / G_PER_KG, 1e-9)
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
        return fp + lam[None, :] * fc / G_PER_KG

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

