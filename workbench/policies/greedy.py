"""A feasible greedy answer to the slot problem: the fallback when a solve fails or times out.

:func:`greedy_choice` walks the jobs once, inference services first, then training jobs in
descending ``priority``; each job takes its best-``coef`` option that still fits every
built-in constraint of :class:`~workbench.policies.milp.SlotProblem` (pool capacity, power
caps, link volume). A training job takes an option only when its ``coef`` is positive.
The result is feasible by construction, though not optimal. Constraints added through the
MILP's ``extra_constraints`` hook are not known to it.

:class:`GreedyPolicy` (``"greedy"``) uses it as a plain online policy: every active job runs
at once in the option with the best progress per unit of cost.
"""

from __future__ import annotations

import logging

import numpy as np
from numpy.typing import NDArray

from workbench.model import Job, ScenarioView
from workbench.policies.base import (
    RESTART_S_DEFAULT,
    Allocation,
    Forecast,
    NoHindsightBound,
    SlotState,
    slot_options,
)
from workbench.policies.milp import SlotProblem, build_slot_problem, current_prices

log = logging.getLogger(__name__)


def greedy_choice(
    prob: SlotProblem, priority: NDArray[np.float64] | None = None
) -> NDArray[np.bool_]:
    """Choose at most one option per job, greedily and feasibly.

    Parameters
    ----------
    prob : SlotProblem
        The slot problem; ``coef`` ranks options within a job.
    priority : float array (J,), optional
        Order of training jobs (higher first); defaults to each job's best ``coef``.

    Returns
    -------
    bool array (K,)
        The chosen options. A must-place job with no option that fits is left out and
        logged as a warning (no feasible allocation places it).
    """
    n_jobs = len(prob.job_ids)
    chosen = np.zeros(prob.n_options, dtype=bool)
    if prob.n_options == 0:
        return chosen
    free_gpus = prob.pool_capacity.astype(float).copy()
    free_kw = prob.power_cap_kw.astype(float).copy()
    free_gb = prob.link_capacity_gb.astype(float).copy()
    order_rows = np.argsort(prob.job_index, kind="stable")
    bounds = np.searchsorted(prob.job_index[order_rows], np.arange(n_jobs + 1))
    best = np.full(n_jobs, -np.inf)
    np.maximum.at(best, prob.job_index, prob.coef)
    prio = best if priority is None else np.asarray(priority, dtype=float)
    must = prob.must_place
    # Inference first (by fewest options, the hardest to place), then training by priority.
    n_opts = np.diff(bounds)
    job_order = sorted(range(n_jobs), key=lambda j: (not must[j], n_opts[j] if must[j] else 0,
                                                     -prio[j]))
    for j in job_order:
        rows = order_rows[bounds[j]:bounds[j + 1]]
        if rows.size == 0:
            continue
        rows = rows[np.argsort(-prob.coef[rows], kind="stable")]
        for k in rows:
            if not must[j] and prob.coef[k] <= 0:
                break
            p, d, lk = prob.pool_index[k], prob.dc_index[k], prob.link_index[k]
            if prob.n_gpus[k] > free_gpus[p] + 1e-9 or prob.power_kw[k] > free_kw[d] + 1e-9:
                continue
            if lk >= 0 and prob.transfer_gb[k] > free_gb[lk] + 1e-9:
                continue
            chosen[k] = True
            free_gpus[p] -= prob.n_gpus[k]
            free_kw[d] -= prob.power_kw[k]
            if lk >= 0:
                free_gb[lk] -= prob.transfer_gb[k]
            break
        else:
            if must[j]:
                # Reported by the simulator as unserved inference, once per run.
                log.debug("greedy: no feasible option left for must-place job %s",
                          prob.job_ids[j])
    return chosen


class GreedyPolicy(NoHindsightBound):
    """Run every active job now, each in its cheapest option per unit of progress.

    Training option score: ``progress / cost`` (progress per currency unit); inference:
    ``-cost``. Jobs closest to their deadline pick first. Capacity is respected.
    """

    name = "greedy"

    def __init__(self, restart_s: float = RESTART_S_DEFAULT) -> None:
        self.restart_s = float(restart_s)

    def reset(self, scenario: ScenarioView) -> None:  # noqa: ARG002
        """Nothing to forget: every decision reads only the slot's state."""

    def decide(self, state: SlotState, forecast: Forecast) -> Allocation:
        price, carbon = current_prices(state.scenario, forecast)
        opts = slot_options(state, price, carbon, restart_s=self.restart_s)
        training = np.array([js.job.is_training for js in state.jobs], dtype=bool)
        is_train = training[opts.job_index] if len(opts) else np.zeros(0, dtype=bool)
        per_cost = opts.progress / np.maximum(opts.cost, 1e-12)
        coef = np.where(is_train, np.where(opts.progress > 0, per_cost, -1.0), -opts.cost)
        prob = build_slot_problem(state, opts, coef=coef)
        slack = np.array([_slack_slots(state, js.job) for js in state.jobs], dtype=float)
        chosen = greedy_choice(prob, priority=-slack)
        placements = {
            state.jobs[int(opts.job_index[k])].job.job_id: opts.placement(int(k))
            for k in np.flatnonzero(chosen)
        }
        return Allocation(placements=placements)


def _slack_slots(state: SlotState, job: Job) -> float:
    if job.deadline is None:
        return float(state.scenario.n_slots - state.t)
    return float(state.scenario.slot_of(job.deadline) - state.t)
