"""Baselines of the green levers: follow the renewables greedily, or only cap GPU power.

Both keep the baselines' rules (:mod:`workbench.policies.baselines`): inference services are
placed first, training jobs run at home on their requested GPUs and batch, first come first
served. Neither plans a battery: the simulator applies each site's greedy dispatch
(:func:`workbench.outcome.site_balance`).

- :class:`FollowRenewables` (``follow-renewables``): "run when the sun shines". At a home
  site with renewables a job runs now only if the current slot is among the ``need`` slots
  of most forecast renewable output in its window (as ``wait-for-cheap`` ranks by price),
  or its slack is gone; at a site without renewables it runs as soon as possible.
- :class:`PowerLimitOnly` (``power-limit-only``): as soon as possible at home, each job at
  the GPU power limit of the menu that takes the least energy per unit of work
  (``r_P * r_t``, :func:`workbench.power_limits.limit_factors`) and still finishes before its
  deadline at its requested GPUs (``R r_t / r <= slots left``); full power otherwise.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from workbench import outcome, perf
from workbench.model import Scenario, ScenarioView
from workbench.policies.base import (
    RESTART_S_DEFAULT,
    Allocation,
    Forecast,
    JobState,
    Placement,
    SlotState,
)
from workbench.policies.baselines import (
    AsapHome,
    FreeGpus,
    WaitForCheap,
    fifo,
    place_at,
    place_inference,
    slot_rate,
    training_jobs,
)
from workbench.power_limits import DEFAULT_MENU, check_menu, limit_factors

__all__ = ["FollowRenewables", "PowerLimitOnly"]


class FollowRenewables(WaitForCheap):
    """Time shifting by the home site's forecast renewable output (see the module docstring);
    the knobs (``margin``, ``default_slack_h``, ``restart_s``) are ``wait-for-cheap``'s."""

    name = "follow-renewables"

    @classmethod
    def unsuitable(cls, scenario: Scenario | ScenarioView) -> str | None:
        """Why this policy is no plan of its own on ``scenario`` (None when it is): with no
        renewable source at any site it runs every job as asap-home does."""
        if any(True for _ in scenario.supply.sources):
            return None
        return (f"{cls.name} follows each site's own renewables and scenario "
                f"{scenario.name} has none, so it would run exactly as asap-home; choose a "
                "scenario with on-site supply (e.g. examples/green_power.toml) or another "
                "policy")

    def _signal(self, state: SlotState, js: JobState, forecast: Forecast
                ) -> NDArray[np.float64] | None:
        """The home site's forecast renewable output, negated (more sun is better); None
        where the site has no renewables (the job runs as asap-home would)."""
        sc = state.scenario
        dc = self._home(sc, js.job)
        cols = [i for i, s in enumerate(sc.supply.sources) if s.datacenter == dc]
        if not cols or forecast.renewable_kw.shape[1] == 0:
            return None
        return -forecast.renewable_kw[:, cols].sum(axis=1)

    def _usable(self, now: float) -> bool:
        """Only a slot with some sun (the negated output below 0)."""
        return now < 0


class PowerLimitOnly(AsapHome):
    """As soon as possible at home, at the power limit of least energy per unit of work that
    keeps the deadline (see the module docstring).

    Parameters
    ----------
    fractions : tuple of float
        The menu of limits when the run offers none (fractions of the GPU's maximum board
        power); a run's own menu (``--power-limits``) takes precedence.
    restart_s : float
        Accepted for a uniform knob set.
    """

    name = "power-limit-only"

    def __init__(self, *, fractions: tuple[float, ...] = DEFAULT_MENU,
                 restart_s: float = RESTART_S_DEFAULT) -> None:
        super().__init__(restart_s=restart_s)
        self.fractions = check_menu(fractions)

    def _limit(self, state: SlotState, js: JobState, dc: str, gpu_type: str) -> float | None:
        sc = state.scenario
        job = js.job
        pool = next(p for p in sc.pools_at(dc) if p.gpu_type == gpu_type)
        prof = sc.profile(job.app, gpu_type)
        n = job.requested_gpus
        x_model = float(perf.throughput(prof.throughput, n, job.batch_size, pool.gpus_per_node))
        full_w = float(outcome.training_power_w(prof, n, x_model * js.throughput_scale))
        rate = slot_rate(sc, js, dc, n, job.batch_size)
        left = (math.inf if job.deadline is None else
                (job.deadline - state.time).total_seconds() / sc.slot_s)
        best, best_e = None, 1.0
        for f in state.scenario.power_limits or self.fractions:
            if f >= 1.0:
                continue
            r_t, r_p = limit_factors(gpu_type, f, full_w / n, pool.max_power_w)
            if rate > 0 and js.remaining * r_t / rate > left:
                continue
            if r_p * r_t < best_e:
                best, best_e = f * pool.max_power_w, r_p * r_t
        return best

    def decide(self, state: SlotState, forecast: Forecast) -> Allocation:  # noqa: ARG002
        free = FreeGpus(state.scenario)
        placements: dict[str, Placement] = {}
        place_inference(state, free, placements)
        for js in fifo(training_jobs(state)):
            job = js.job
            dc = self._home(state.scenario, job)
            if place_at(free, placements, js, dc, job.requested_gpus, job.batch_size):
                p = placements[job.job_id]
                limit = self._limit(state, js, dc, p.gpu_type)
                if limit is not None:
                    placements[job.job_id] = Placement(p.datacenter, p.gpu_type, p.n_gpus,
                                                       p.batch_size, limit)
        return Allocation(placements=placements)
