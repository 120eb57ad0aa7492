"""Runs compared like for like: every saving and every gap on equal work.

A run that leaves training work undone pays nothing for that work, so its bill looks
cheaper than one that did it; a saving of that kind must never lead a page. Here every run
is brought to the same work, *all* the training work of the jobs that arrive within the
horizon, by charging the work it left undone at a **stated price** that does not depend on
the run:

    remaining_j   = max(1 - sum of the run's progress of job j, 0)     (fraction of the job)
    price_j       = E*_j * mean_t p[home_j, t]                        currency per whole job
    kg_j          = E*_j * mean_t c[home_j, t] / 1000                 kg CO2 per whole job
    equal_work_cost      = cost      + sum_j remaining_j * price_j
    equal_work_carbon_kg = carbon_kg + sum_j remaining_j * kg_j

``E*_j`` is the job's least energy for its whole work at its home datacenter (kWh, the
home's PUE included) over the GPU types and counts it may use there, at the ECU-best batch,
loss-free (the hindsight model's rates, :func:`workbench.policies.offline.job_configs`; over
every datacenter for a job its home cannot run); the means run over the horizon at the
job's home datacenter. The hindsight **bound** is brought to equal work the same way: it
does each job's share due within the horizon (``s_j``,
:func:`workbench.policies.deadlines.required_share`), so its undone work ``1 - s_j`` is
charged at the same price (its shortfall, work no plan can do in time, is not charged: it
stays a lower bound on what it bounds).

:func:`equal_work` gives a run's figures (:func:`workbench.metrics.compute_metrics` adds
them to every run's metrics), :func:`bound_equal_work` the bound's, and
:func:`like_for_like` the one comparison every face shows: the saving against asap-home on
equal work (the bill's own saving beside it, marked when it is not like for like), the gap
to the hindsight bound (the yardstick) and to the hindsight plan as replayed (a reference).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from workbench.model import Job, Scenario
from workbench.units import G_PER_KG

EQUAL_WORK_BASIS = ("equal work: the training work a run left undone is charged at its "
                    "least energy at home, at the home datacenter's mean price (and carbon) "
                    "over the horizon")
"""What "equal work" means, in one line every face prints beside the figures."""

EQUAL_WORK_KEYS: tuple[str, ...] = (
    "unfinished_work_jobs", "unfinished_charge", "unfinished_carbon_kg", "equal_work_cost",
    "equal_work_carbon_kg",
)
"""Metrics :func:`equal_work` adds to a run's metrics."""

_DONE = 1e-6
"""Progress short of 1 by less than this is a finished job (float residue)."""


def _horizon_means(scenario: Scenario, var: str) -> dict[str, float]:
    """Mean of ``var`` over the horizon per datacenter (of its grid region)."""
    times = pd.DatetimeIndex(scenario.grid["time"].values).tz_localize("UTC")
    pos = int(times.get_indexer([pd.Timestamp(scenario.start)])[0])
    pos = max(pos, 0)
    out = {}
    for d in scenario.datacenters:
        values = np.asarray(scenario.grid[var].sel(region=d.region).values, dtype=float)
        out[d.name] = float(np.mean(values[pos:pos + scenario.n_slots]))
    return out


def work_prices(scenario: Scenario, jobs: Iterable[Job]) -> dict[str, tuple[float, float]]:
    """The stated price of a whole job's work: ``job_id -> (price_j, kg_j)`` (see the
    module's docstring). A job with no configuration it may run gets ``(nan, nan)``."""
    from workbench.policies.offline import job_configs

    price = _horizon_means(scenario, "price_per_kwh")
    carbon = _horizon_means(scenario, "carbon_g_per_kwh")
    per_sample: dict[tuple[Any, ...], float] = {}  # least kWh per sample, per kind of job
    out: dict[str, tuple[float, float]] = {}
    for job in jobs:
        key = (job.app, job.gpu_counts, job.gpu_types, job.home)
        if key not in per_sample:
            configs = [c for c in job_configs(scenario, job) if c.rate > 0]
            configs = [c for c in configs if c.datacenter == job.home] or configs
            least = min((c.energy_kwh / c.rate for c in configs), default=math.nan)
            per_sample[key] = least / job.work_samples
        kwh = per_sample[key] * job.work_samples
        out[job.job_id] = (kwh * price[job.home], kwh * carbon[job.home] / G_PER_KG)
    return out


def _due(scenario: Scenario) -> list[Job]:
    """Training jobs that arrive within the horizon: the work equal work counts."""
    return [j for j in scenario.jobs if j.is_training and scenario.slot_of(j.arrival)
            < scenario.n_slots]


def remaining_work(plan: pd.DataFrame, scenario: Scenario) -> dict[str, float]:
    """``job_id -> remaining_j`` (fraction of the job left undone, > 0 only) from a plan's
    ``progress`` column, for the training jobs arriving within the horizon."""
    done = plan.groupby("job_id")["progress"].sum() if len(plan) else pd.Series(dtype=float)
    out = {}
    for job in _due(scenario):
        left = 1.0 - float(done.get(job.job_id, 0.0))
        if left > _DONE:
            out[job.job_id] = min(left, 1.0)
    return out


def _charge(left: Mapping[str, float], scenario: Scenario) -> tuple[float, float]:
    if not left:
        return 0.0, 0.0
    prices = work_prices(scenario, [j for j in scenario.jobs if j.job_id in left])
    cost = sum(left[j] * prices[j][0] for j in left)
    kg = sum(left[j] * prices[j][1] for j in left)
    return float(cost), float(kg)


def equal_work(plan: pd.DataFrame, scenario: Scenario, cost: float, carbon_kg: float
               ) -> dict[str, float]:
    """A run's figures on equal work (:data:`EQUAL_WORK_KEYS`), from its plan rows and its
    bill ``cost`` and ``carbon_kg``::

        unfinished_work_jobs = sum_j remaining_j          (jobs' worth of work left undone)
        unfinished_charge    = sum_j remaining_j * price_j
        equal_work_cost      = cost + unfinished_charge   (likewise for carbon)
    """
    left = remaining_work(plan, scenario)
    charge, kg = _charge(left, scenario)
    return {"unfinished_work_jobs": float(sum(left.values())), "unfinished_charge": charge,
            "unfinished_carbon_kg": kg, "equal_work_cost": float(cost) + charge,
            "equal_work_carbon_kg": float(carbon_kg) + kg}


def bound_equal_work(bound: Mapping[str, Any], scenario: Scenario) -> dict[str, float]:
    """The hindsight bound on equal work: ``equal_work_cost = cost + sum_j (1 - s_j)
    price_j`` with ``s_j`` the job's share due within the horizon (likewise for carbon)."""
    from workbench.policies.deadlines import required_share

    left = {}
    for job in _due(scenario):
        share = 1.0 - required_share(scenario, job)
        if share > _DONE:
            left[job.job_id] = share
    charge, kg = _charge(left, scenario)
    return {"unfinished_charge": charge, "unfinished_carbon_kg": kg,
            "equal_work_cost": float(bound["cost"]) + charge,
            "equal_work_carbon_kg": float(bound["carbon_kg"]) + kg}


def _num(metrics: Mapping[str, Any] | None, key: str) -> float:
    if not metrics:
        return math.nan
    value = metrics.get(key)
    try:
        out = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan
    return out if math.isfinite(out) else math.nan


def _whole(metrics: Mapping[str, Any] | None, key: str, fallback: str) -> float:
    """The whole site's figure (``bill_total``, ``site_carbon_kg``) of a metered run; the
    jobs' own (``fallback``) for a run read back without its meter."""
    got = _num(metrics, key)
    return got if math.isfinite(got) else _num(metrics, fallback)


def _pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole and math.isfinite(whole) else math.nan


@dataclass(frozen=True)
class LikeForLike:
    """A run against asap-home, the hindsight bound and the replayed hindsight plan, on
    equal work (:func:`like_for_like`). NaN where a reference is missing.

    Attributes
    ----------
    equal_work_cost, equal_work_carbon_kg
        The run's controllable part of the bill (``cost``: ``bill_total -
        bill_no_jobs_total``) and of the carbon, plus its undone work's charge.
    equal_work_bill, equal_work_site_carbon_kg
        The whole bill (``bill_total``) and the sites' whole carbon, plus the same charge.
    saving
        ``equal_work_cost[asap-home] - equal_work_cost[run]`` in the currency (positive:
        cheaper): the bill's saving on equal work. The sites' no-jobs bill is the same for
        both runs, so it is the whole bill's saving and its controllable part's alike.
    saving_pct
        That saving as a percentage of asap-home's whole bill on equal work.
    jobs_saving_pct
        The same saving as a percentage of asap-home's controllable part on equal work.
    carbon_saving_kg, carbon_saving_pct, jobs_carbon_saving_pct
        The same for carbon.
    bill_saving, bill_saving_pct
        The bills alone (``bill_total``), which count no work left undone.
    unfinished_charge, baseline_unfinished_charge
        What the run's and asap-home's undone work was charged (currency).
    unfinished_carbon_kg, baseline_unfinished_carbon_kg
        The same in kg CO2.
    above_bound_pct
        ``100 (equal_work_cost / bound's equal_work_cost - 1)``: the gap to the hindsight
        bound, the yardstick (a lower bound on every plan).
    above_replay_pct
        The same against the hindsight plan as replayed (a reference: it pays the restarts
        and transfers the bound neglects, so a good plan may beat it).
    more_unfinished, more_misses
        Jobs unfinished and deadline misses beyond asap-home's (> 0: the bill's saving is
        not like for like).
    mean_jct_h, baseline_mean_jct_h, mean_jct_change_pct
        What the saving costs in time: the finished training jobs' mean completion time
        (hours) in the run and in asap-home, and its change in percent (positive: slower).
    p95_jct_h, baseline_p95_jct_h, p95_jct_change_pct
        The same for the 95th percentile.
    basis
        :data:`EQUAL_WORK_BASIS`.
    """

    equal_work_cost: float
    equal_work_carbon_kg: float
    equal_work_bill: float
    equal_work_site_carbon_kg: float
    saving: float
    saving_pct: float
    jobs_saving_pct: float
    carbon_saving_kg: float
    carbon_saving_pct: float
    jobs_carbon_saving_pct: float
    bill_saving: float
    bill_saving_pct: float
    unfinished_charge: float
    baseline_unfinished_charge: float
    unfinished_carbon_kg: float
    baseline_unfinished_carbon_kg: float
    bound_equal_work_cost: float
    above_bound_pct: float
    replay_equal_work_cost: float
    above_replay_pct: float
    more_unfinished: float
    more_misses: float
    mean_jct_h: float = math.nan
    baseline_mean_jct_h: float = math.nan
    mean_jct_change_pct: float = math.nan
    p95_jct_h: float = math.nan
    baseline_p95_jct_h: float = math.nan
    p95_jct_change_pct: float = math.nan
    basis: str = EQUAL_WORK_BASIS

    @property
    def like_for_like_bill(self) -> bool:
        """True when the bills alone compare (no more work undone, no more misses)."""
        return not (self.more_unfinished > 0 or self.more_misses > 0)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: NaN as None."""
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in asdict(self).items()}


def like_for_like(run: Mapping[str, Any], baseline: Mapping[str, Any] | None = None,
                  bound: Mapping[str, Any] | None = None,
                  replay: Mapping[str, Any] | None = None) -> LikeForLike:
    """The one comparison of a run every face shows (plan, runs show, the app).

    ``run``, ``baseline`` (asap-home) and ``replay`` (the hindsight plan as replayed) are
    metrics dicts with :data:`EQUAL_WORK_KEYS` (:func:`workbench.metrics.compute_metrics`);
    ``bound`` the hindsight bound's dict with :func:`bound_equal_work`'s keys (a run's
    ``meta["bound"]``). A figure whose inputs are missing (a reference not run, a run
    stored before these metrics existed) is NaN.
    """
    ew, kg = _num(run, "equal_work_cost"), _num(run, "equal_work_carbon_kg")
    b_ew, b_kg = _num(baseline, "equal_work_cost"), _num(baseline, "equal_work_carbon_kg")
    bill, b_bill = _whole(run, "bill_total", "cost"), _whole(baseline, "bill_total", "cost")
    site_kg = _whole(run, "site_carbon_kg", "carbon_kg")
    b_site_kg = _whole(baseline, "site_carbon_kg", "carbon_kg")
    # On equal work the whole bill carries the same charge as its controllable part.
    ew_bill = bill + ew - _num(run, "cost")
    b_ew_bill = b_bill + b_ew - _num(baseline, "cost")
    ew_site = site_kg + kg - _num(run, "carbon_kg")
    b_ew_site = b_site_kg + b_kg - _num(baseline, "carbon_kg")
    lb = _num(bound, "equal_work_cost")
    rp = _num(replay, "equal_work_cost")
    jct = (_num(run, "mean_jct_h"), _num(run, "p95_jct_h"))
    b_jct = (_num(baseline, "mean_jct_h"), _num(baseline, "p95_jct_h"))
    return LikeForLike(
        equal_work_cost=ew, equal_work_carbon_kg=kg, equal_work_bill=ew_bill,
        equal_work_site_carbon_kg=ew_site,
        saving=b_ew - ew, saving_pct=_pct(b_ew - ew, b_ew_bill),
        jobs_saving_pct=_pct(b_ew - ew, b_ew),
        carbon_saving_kg=b_kg - kg, carbon_saving_pct=_pct(b_kg - kg, b_ew_site),
        jobs_carbon_saving_pct=_pct(b_kg - kg, b_kg),
        bill_saving=b_bill - bill, bill_saving_pct=_pct(b_bill - bill, b_bill),
        unfinished_charge=_num(run, "unfinished_charge"),
        baseline_unfinished_charge=_num(baseline, "unfinished_charge"),
        unfinished_carbon_kg=_num(run, "unfinished_carbon_kg"),
        baseline_unfinished_carbon_kg=_num(baseline, "unfinished_carbon_kg"),
        bound_equal_work_cost=lb, above_bound_pct=_pct(ew - lb, lb),
        replay_equal_work_cost=rp, above_replay_pct=_pct(ew - rp, rp),
        more_unfinished=_num(run, "jobs_unfinished") - _num(baseline, "jobs_unfinished"),
        more_misses=_num(run, "deadline_misses") - _num(baseline, "deadline_misses"),
        mean_jct_h=jct[0], baseline_mean_jct_h=b_jct[0],
        mean_jct_change_pct=_pct(jct[0] - b_jct[0], b_jct[0]),
        p95_jct_h=jct[1], baseline_p95_jct_h=b_jct[1],
        p95_jct_change_pct=_pct(jct[1] - b_jct[1], b_jct[1]))


__all__ = [
    "EQUAL_WORK_BASIS",
    "EQUAL_WORK_KEYS",
    "LikeForLike",
    "bound_equal_work",
    "equal_work",
    "like_for_like",
    "remaining_work",
    "work_prices",
]
