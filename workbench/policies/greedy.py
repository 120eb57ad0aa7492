"""The greedy online policy: every active job runs at once, in its best option per cost.

:class:`GreedyPolicy` (``"greedy"``) uses the slot problem's greedy feasible answer
(:func:`workbench.optim.fallback.greedy_choice`, also the fallback of a failed solve) as a
plain online policy: every active job runs at once in the option with the best progress
per unit of cost.
"""

from __future__ import annotations

import numpy as np

from workbench.forecast import Forecast
from workbench.model import Job, ScenarioView
from workbench.optim.fallback import greedy_choice
from workbench.policies.base import (
    RESTART_S_DEFAULT,
    Allocation,
    NoHindsightBound,
    SlotState,
    slot_options,
)
from workbench.policies.problems import build_slot_problem, current_prices


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
