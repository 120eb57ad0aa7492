"""The Lyapunov (drift-plus-penalty) online scheduler, true to its maths: one MILP per slot.

Queues, updated at the start of every slot from what the previous slot metered:

* ``R_j`` — remaining progress of training job ``j``, a fraction of its total work (the
  state's ``remaining``, observed): ``R_j(t+1) = max(R_j(t) - progress_j(t), 0)``.
* ``Y_j`` — Neely's epsilon-persistent deadline queue, in fractions of work::

      Y_j(t+1) = max(Y_j(t) + eps_j(t) - progress_j(t), 0),   eps_j = 1 / L_j

  with ``L_j`` the slots left before the deadline (the horizon end if none): it grows by
  the rate a whole job would need whenever the job falls behind, so worst-case delay stays
  bounded and a nearly finished job (small ``R_j``) still grows urgent.
* ``Z_d`` — carbon backlog per datacenter (or one ``global``) under a cap, in units of the
  per-slot cap ``a_d = cap_d / n_slots``: ``Z_d(t+1) = max(Z_d(t) + g_d(t)/a_d - 1, 0)``
  with ``g_d(t)`` the metered carbon (kg).

Each slot maximises ``sum_i z_i * NetCoef_i`` over binaries ``z`` (one option per job, pool
capacity, power cap, link volume; :mod:`workbench.optim.slot`) with, for option ``i`` of
job ``j`` in datacenter ``d`` (progress ``p_i``, cost ``c_i``, carbon ``g_i`` kg from
:func:`~workbench.policies.base.slot_options`)::

    max  sum_i z_i NetCoef_i
    NetCoef_i = kappa_j (R_j + Y_j) p_i - V c_i - lambda Z_d g_i      training
    NetCoef_i =                         - V c_i - lambda Z_d g_i      inference
    s.t. sum_{i of j} z_i <= 1          training job j
         sum_{i in A_j} z_i  = 1         job j of the must-run set M(t) (completion rule)
         sum_{i of j} z_i  = 1           inference service j
         pools, power caps, link volume

**The completion rule** (:mod:`workbench.policies.deadlines`, at every V): a job whose
slack (time left to its deadline minus the least time its remaining work needs on the best
option it can get, restart and transfer included) runs out, so that it cannot wait for the
next slot (a backward reservation of the pools decides it, so that jobs competing for the
same GPUs are not all left to their last slot), joins ``M(t)`` and must run on one of its
allowed options ``A_j`` (those that finish it in time if kept); the most urgent get the
GPUs first, and a job that can no longer make its deadline runs as early as the GPUs left
allow. The objective stays the drift-plus-penalty one: it chooses among ``A_j`` and decides
every other job.

This is drift-plus-penalty for the weighted quadratic Lyapunov function
``L = 1/2 sum_j kappa_j (R_j^2 + Y_j^2) + 1/2 sum_d lambda a_d Z_d^2`` and the penalty
``V * cost``: minimising ``V * penalty - sum queue * service`` per slot. The weights make
every term currency:

* ``kappa_j`` — job ``j``'s own cost scale, currency per whole job of work: its least
  energy per unit of work over the options of its first slot (``min_i e_i / p_i``, kWh per
  job) times the mean absolute forecast price (per kWh). Progress is thus valued in the
  job's own cost units, so a job 100 times larger than the median is weighed exactly like
  it (with one run-wide scale, ``V c`` of a large job outweighs ``(R + Y) p`` until its
  deadline and it starves).
* ``lambda`` — the typical price of a kg of carbon, currency per kg: the mean absolute
  forecast price over the mean forecast carbon intensity (kg/kWh).

**V is dimensionless and needs no tuning.** ``NetCoef_i > 0`` for a training job reads
``(R_j + Y_j) > V * u_i`` with ``u_i = (c_i / p_i) / kappa_j`` the option's unit cost
relative to the job's typical one (1 at its best configuration and the mean price). So
``1 / V`` is the relative unit cost a job with a whole job of work queued accepts: the same
meaning on
every grid and for every job size, which is what lets one V hold on grids never seen
(:data:`DEFAULT_V`, measured against a V sweep on every battery scenario,
``bench/battery.py --lyapunov-V``). Large V: cost within ``O(1/V)`` of the optimum,
backlogs ``O(V)`` (``bench/lyapunov_theory.py``, jobs without deadlines, where the
completion rule never acts); with deadlines, a large V leaves every job to the completion
rule, which keeps the deadlines but not the price (docs/results.md, section 7).

A job with no positive choice pauses. Migration: losses enter ``p_i`` (seconds lost) and
``c_i`` (transfer energy), and a move must pay for its round trip over the expected dwell
(:mod:`workbench.policies.migration`) and beat staying by ``migration_threshold``
(relative, default 0). After the MILP, the batch size of each running job is fine-tuned.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np
from numpy.typing import NDArray

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
from workbench.policies.deadlines import DEADLINE_MARGIN_DEFAULT
from workbench.policies.migration import (
    advantage_slots,
    event_exits,
    held_gain,
    moves_that_pay,
    one_way_move_cost,
    transfer_kwh,
)
from workbench.policies.problems import current_prices
from workbench.policies.slotqueues import GLOBAL as _GLOBAL
from workbench.policies.slotqueues import SOLVERS, SlotQueuePolicy
from workbench.units import G_PER_KG

log = logging.getLogger(__name__)

DEFAULT_V = 1.0
"""Default V (dimensionless, see the module docstring): a job with a whole job of work
queued runs where its unit cost is at most ``1/V`` times its typical one (at V = 1: its
typical one, best configuration at the mean price); measured against a V sweep on every
battery scenario in docs/results.md."""

V_MAX = 1e5
"""The largest V the CLI (``plan --V``, ``sweep --V``) and the app accept: above it ``V c``
swamps every backlog term (the policy waits out the horizon) and near 1e308 the slot
problem's coefficients overflow to inf."""

__all__ = ["DEFAULT_V", "SOLVERS", "V_MAX", "LyapunovPolicy", "carbon_price", "job_cost_scale",
           "net_coef"]


def net_coef(weight: NDArray[np.float64], progress: NDArray[np.float64],
             cost: NDArray[np.float64], carbon_kg: NDArray[np.float64],
             z: NDArray[np.float64], lam_per_kg: float, V: float) -> NDArray[np.float64]:
    """Drift-plus-penalty weight per option.

    ``NetCoef = w * p - V * c - lambda * Z * g`` with ``w = kappa_j (R_j + Y_j)`` (0 for
    inference, currency per whole job), ``Z`` the carbon queue of the option's datacenter
    (per-slot caps; 0 without a cap) and ``lambda`` currency per kg.
    """
    return weight * progress - V * cost - lam_per_kg * z * carbon_kg


def job_cost_scale(opts: SlotOptions, j: int, mean_abs_price: float) -> float | None:
    """``kappa_j``: job ``j``'s least energy per whole job of work (kWh) over its options,
    times the mean absolute price (per kWh); None while it has no running option."""
    rows = (opts.job_index == j) & (opts.progress > 0)
    if not rows.any():
        return None
    unit = float(np.min(opts.energy_kwh[rows] / opts.progress[rows]))
    return max(unit * mean_abs_price, 1e-12)


def carbon_price(forecast: Forecast) -> float:
    """``lambda``: mean absolute forecast price over mean forecast carbon (currency per kg)."""
    kg = float(np.mean(np.abs(forecast.carbon_g_per_kwh))) / G_PER_KG
    return float(np.mean(np.abs(forecast.price_per_kwh))) / max(kg, 1e-9)


class LyapunovPolicy(SlotQueuePolicy):
    """Drift-plus-penalty scheduler (see the module docstring for the maths).

    Parameters
    ----------
    V : float
        Cost weight against backlog (> 0, dimensionless): a job with a whole job of work
        queued accepts unit costs up to ``1/V`` times its typical one.
    migration_threshold : float
        Extra relative margin a move's NetCoef must beat staying by (0 = the round-trip
        rule alone).
    min_dwell_slots : int
        A job is not moved again within this many slots of its last move.
    deadline_margin : float
        Share of a job's life (arrival to deadline) the deadline rule keeps in hand
        (in [0, 1); :data:`~workbench.policies.deadlines.DEADLINE_MARGIN_DEFAULT`).
    caps, gpu_counts, restart_s, mip_rel_gap, time_limit_s, \
refine_batch, extra_constraints, solver
        As for every queue-based scheduler
        (:class:`~workbench.policies.slotqueues.SlotQueuePolicy`).
    """

    name = "lyapunov"
    V_HINT = "V=1"
    Z_IN_CAPS = True

    def __init__(
        self,
        V: float = DEFAULT_V,
        *,
        caps: Caps | None = None,
        gpu_counts: tuple[int, ...] | Mapping[str, tuple[int, ...]] | None = None,
        migration_threshold: float = 0.0,
        min_dwell_slots: int = 8,
        restart_s: float = RESTART_S_DEFAULT,
        mip_rel_gap: float = 1e-3,
        time_limit_s: float = 10.0,
        refine_batch: bool = True,
        extra_constraints: ExtraConstraints | None = None,
        solver: str = "fast",
        deadline_margin: float = DEADLINE_MARGIN_DEFAULT,
    ) -> None:
        super().__init__(V, caps=caps, gpu_counts=gpu_counts,
                         migration_threshold=migration_threshold, restart_s=restart_s,
                         mip_rel_gap=mip_rel_gap, time_limit_s=time_limit_s,
                         refine_batch=refine_batch,
                         extra_constraints=extra_constraints, solver=solver,
                         deadline_margin=deadline_margin)
        if not (isinstance(min_dwell_slots, int) and min_dwell_slots >= 0):
            raise ValueError(f"min_dwell_slots must be an integer >= 0, got {min_dwell_slots!r}")
        self.min_dwell_slots = min_dwell_slots
        self.kappa: dict[str, float] = {}

    def reset(self, scenario: ScenarioView) -> None:
        """Empty every queue and forget the jobs' cost scales."""
        super().reset(scenario)
        self.kappa = {}

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
        self._pace(state, opts, forecast)
        dc_names = [dc.name for dc in sc.datacenters]
        dc_pos = {n: i for i, n in enumerate(dc_names)}
        dc_idx = np.array([dc_pos[str(d)] for d in opts.datacenter], dtype=np.int64)
        weight = self._weights(state, opts, forecast)
        z = self._carbon_queue(dc_names)
        coef = net_coef(weight[opts.job_index] if len(opts) else np.zeros(0), opts.progress,
                        opts.cost, opts.carbon_kg, z[dc_idx],
                        carbon_price(forecast) if self._Z else 0.0, self.V)
        keep, stay_best = self._moves(state, opts, coef, weight, price, forecast)

        def explain(k: int, js: JobState) -> tuple[float | None, str] | None:
            if not opts.moves[k]:
                return None
            j = int(opts.job_index[k])
            return (float(coef[k] - stay_best[j]),
                    f"migrate {js.last_datacenter}->{opts.datacenter[k]}: NetCoef "
                    f"{coef[k]:.3g} vs stay {stay_best[j]:.3g}; pays for its round trip")

        return self._solve_slot(state, opts, coef, keep, weight, explain)

    # -- helpers -------------------------------------------------------------------------
    def _eps_of(self, js: JobState, left: int) -> float:
        """Neely's persistent growth ``eps_j = 1 / L_j``: not proportional to ``R_j``, so a
        nearly finished job grows urgent as fast as a fresh one (``R_j / L_j`` left its
        tail, whose weight ``kappa_j (R_j + Y_j)`` is small, unscheduled)."""
        return 1.0 / left

    def _weights(self, state: SlotState, opts: SlotOptions, forecast: Forecast
                 ) -> NDArray[np.float64]:
        """``kappa_j (R_j + Y_j)`` per job (0 for inference); sets ``kappa_j`` on first sight."""
        pbar = float(np.mean(np.abs(forecast.price_per_kwh)))
        out = np.zeros(len(state.jobs))
        for j, js in enumerate(state.jobs):
            if not js.job.is_training:
                continue
            jid = js.job.job_id
            if jid not in self.kappa:
                k = job_cost_scale(opts, j, pbar)
                if k is None:
                    continue
                self.kappa[jid] = k
            out[j] = self.kappa[jid] * (js.remaining + self._Y.get(jid, 0.0))
        return out

    def _carbon_queue(self, names: list[str]) -> NDArray[np.float64]:
        """``Z_d`` per datacenter, per-slot caps (0 where no cap applies)."""
        return np.array([self._Z.get(_GLOBAL if _GLOBAL in self._Z else n, 0.0)
                         for n in names], dtype=float)

    def _moves(self, state: SlotState, opts: SlotOptions, coef: NDArray[np.float64],
               weight: NDArray[np.float64], price: Mapping[str, float],
               forecast: Forecast) -> tuple[NDArray[np.bool_], NDArray[np.float64]]:
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
        one_way = one_way_move_cost(opts, w, steady, self.V * transfer_kwh(sc, opts) * p_opt,
                                    slot_s)
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
        # Held over its dwell, a move must pay in the slot's own terms: price (times V) and,
        # under a carbon budget, carbon at the queue's price (NetCoef per kWh).
        fc = np.asarray(forecast.carbon_g_per_kwh, dtype=float)[:, ridx]
        z = self._carbon_queue(names)
        lam = carbon_price(forecast) if self._Z else 0.0
        per_kwh = self.V * fp + lam * z[None, :] * fc / G_PER_KG
        held = held_gain(per_kwh, origin, dest, self.min_dwell_slots) > 0
        keep, stay_best = moves_that_pay(opts, coef, one_way, dwell, finishes, recent, held)
        if self.migration_threshold > 0:
            sb = stay_best[opts.job_index]
            margin = coef - sb > self.migration_threshold * np.abs(sb)
            keep &= ~opts.moves | margin | ~np.isfinite(sb)
        return keep | event_exits(sc, state, opts, self.caps.events), stay_best
