"""The slot loop: hand each slot's state to a policy, apply its allocation to the truth
(:mod:`workbench.sim.truth`), record (:mod:`workbench.sim.results`)."""

from __future__ import annotations

import json
import logging
import math
import time as _time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from workbench.caps import Caps
from workbench.chunks import ColumnChunks, QueueTrace
from workbench.estimate import OnlineEstimator
from workbench.forecast import FORECAST_MODES, Forecast, forecast
from workbench.meter import import_limits_kw
from workbench.model import Scenario, ScenarioView
from workbench.policies.base import (
    RESIZE_S_DEFAULT,
    RESTART_S_DEFAULT,
    Allocation,
    Policy,
    SlotState,
)
from workbench.schema import MIGRATION, PLAN_ROW, PLAN_STORED_COLUMNS
from workbench.sim.results import (
    RUN_WARNING,
    Recorder,
    RunResult,
    SlotRecord,
    cap_warnings_after,
    cap_warnings_before,
    check_power_caps,
    job_outcomes,
    job_warnings,
    plan_frame,
    run_caps,
    trim_warnings,
)
from workbench.sim.truth import (
    JobRun,
    PowerTrim,
    SlotApplied,
    Truth,
    horizon_cube,
)
from workbench.sim.validate import validate_allocation
from workbench.supply import forecast_output

if TYPE_CHECKING:
    from workbench.forecast.scenario import ModelForecast

log = logging.getLogger(__name__)

EMA_ALPHA_DEFAULT = 0.1
"""Weight of the newest observation in the online estimates (:mod:`workbench.estimate`)."""


def simulate(
    scenario: Scenario,
    policy: Policy,
    *,
    forecast_mode: str,
    forecast_error: float = 0.0,
    noise: float = 0.0,
    seed: int = 0,
    recorders: Sequence[Recorder] = (),
    progress: bool = False,
    restart_s: float = RESTART_S_DEFAULT,
    resize_s: float = RESIZE_S_DEFAULT,
    ema_alpha: float = EMA_ALPHA_DEFAULT,
    knobs: Mapping[str, Any] | None = None,
    forecast_model: ModelForecast | None = None,
    caps: Caps | None = None,
    meter_only: bool = False,
    ignore: frozenset[str] = frozenset(),
    power_limits: tuple[float, ...] = (),
) -> RunResult:
    """Run ``policy`` over the scenario's horizon and return what happened.

    Parameters
    ----------
    scenario : Scenario
        Sites, pools, links, jobs, profiles and the price/carbon cube.
    policy : Policy
        Anything with ``name``, ``reset(scenario)`` and ``decide(state, forecast)``.
    forecast_mode, forecast_error : str, float
        What the policy is told about future price and carbon (see
        :func:`workbench.forecast.forecast`); the simulator always charges the truth. The
        runner decides the mode (:func:`workbench.runner.forecast_mode`: the honest
        :func:`workbench.forecast.default_forecast_mode` unless a run asks for another);
        ``"perfect"`` is a what-if.
    noise : float
        Log-normal sigma of the hidden per-job throughput factor, of the per-slot
        throughput noise and of the noise on observed gradient noise scales (0: the job
        model is exact and observations are noiseless).
    seed : int
        Seed of every random draw (noise and noisy forecasts); equal seeds, equal runs.
    recorders, progress
        Each recorder gets ``start(meta)``, ``record(slot_record)`` per slot and
        ``finish(result)``; ``progress`` shows a tqdm progress bar on stderr.
    restart_s, resize_s : float
        Seconds lost on every start, resume, move or change of GPU type; on a change of GPU
        count in the same pool (:data:`workbench.outcome.RESIZE_S_DEFAULT`).
    ema_alpha : float
        Weight in (0, 1] of the newest observation in the online estimates.
    knobs : mapping, optional
        The policy's settings, stored with the run (``meta["knobs"]``).
    forecast_model : ModelForecast, optional
        With ``forecast_mode="model"``: forecasts already fitted on this scenario's history
        (:func:`workbench.forecast.fit_scenario`), so that runs of several policies on one
        scenario fit once; fitted here when absent.
    caps : Caps, optional
        The caps the run is metered against (stored with its knobs, ``meta["knobs"]``);
        default: the policy's own (its ``caps``, none if it has none). Unless
        ``meter_only``, its power caps are enforced: an allocation whose true draw would
        put a datacenter above its cap is trimmed (:meth:`Truth.apply`, reported), and a
        cap below what the inference services alone draw is refused before the first slot
        (:func:`workbench.sim.results.check_power_caps`).
    meter_only : bool
        Meter the caps without enforcing them (a comparison run that was not given them:
        its violations are reported).
    ignore, power_limits
        Levers (:data:`workbench.supply.LEVERS`) the policy plans without, while they are
        metered and billed; its menu of GPU power limits (:meth:`Scenario.view`).

    Returns
    -------
    RunResult

    Raises
    ------
    AllocationError
        When the policy places a job where it may not run or over a pool's capacity.
    ValueError
        For bad settings, caps naming unknown datacenters, or power caps below what the
        inference services alone draw.
    """
    _check_settings(forecast_mode, forecast_error, noise, restart_s, resize_s, ema_alpha)
    sc = scenario
    caps = run_caps(policy, caps)
    names = [d.name for d in sc.datacenters]
    caps.check_names(names)
    if not meter_only:
        check_power_caps(sc, caps)
    cube = horizon_cube(sc)
    fc_model = _forecast_model(sc, forecast_mode, forecast_model)
    truth = Truth.of(sc, cube, restart_s=restart_s, resize_s=resize_s, noise=noise,
                     seed=seed, limit_kw=None if meter_only or not caps.has_limits
                     else import_limits_kw(sc, caps))
    runs = _job_runs(sc, noise, seed, ema_alpha)
    meta: dict[str, Any] = {
        "scenario": sc.name, "policy": policy.name, "knobs": {**(knobs or {}), **caps.knobs()},
        "forecast_mode": forecast_mode, "forecast_error": forecast_error,
        **_forecast_meta(fc_model),
        "noise": noise, "seed": seed, "restart_s": restart_s, "resize_s": resize_s,
        **_horizon_meta(sc), "ignore": sorted(ignore), "power_limits": list(power_limits)}
    for rec in recorders:
        rec.start(meta)

    view = sc.view(ignore=ignore, power_limits=power_limits)
    planned_supply = sc.supply.without(ignore)
    policy.reset(view)
    warnings: list[str] = cap_warnings_before(sc, caps)
    acc = _Accumulated(sc)
    wall0 = _time.perf_counter()

    def told(t: int) -> Forecast:
        fc = forecast(cube, t, mode=forecast_mode, error=forecast_error, seed=seed, model=fc_model)
        if planned_supply.sources:  # what the policy believes its renewables deliver
            fc = replace(fc, renewable_kw=forecast_output(
                planned_supply, t, sc.n_slots, forecast_mode, sc.slot_s))
        return fc

    _run_slots(sc, view, policy, truth, runs, acc, warnings, recorders, progress=progress,
               told=told)
    meta["wall_s"] = _time.perf_counter() - wall0
    return _result(sc, policy, meta, runs, acc, warnings, recorders)


def _run_slots(sc: Scenario, view: ScenarioView, policy: Policy, truth: Truth,
               runs: list[JobRun], acc: _Accumulated, warnings: list[str],
               recorders: Sequence[Recorder], *, progress: bool,
               told: Callable[[int], Forecast]) -> None:
    """The horizon slot by slot: the policy decides on what it is ``told`` (the forecast
    of each slot), the truth applies its allocation; ``acc``, ``warnings`` and the
    recorders take what happened."""
    slot_s = float(sc.slot_s)
    bar = tqdm(range(sc.n_slots), desc=f"{sc.name}/{policy.name}", unit="slot",
               disable=not progress, leave=False)
    live = _Live(runs)
    for t in bar:
        t_start = sc.start + timedelta(seconds=slot_s * t)
        t_end = t_start + timedelta(seconds=slot_s)
        active = live.at(t)
        state = acc.state(view, t, t_start, active, truth)
        fc = told(t)
        tic = _time.perf_counter()
        alloc = policy.decide(state, fc)
        decide_s = _time.perf_counter() - tic
        validate_allocation(alloc, state, truth.pools, policy.name,
                            batteries=view.supply.batteries)
        warnings.extend(_fallback_warning(alloc, policy.name, t, t_start))
        applied = truth.apply(alloc, active, t, t_start)

        summary = _summary(sc, t, t_start, applied, alloc, len(active), decide_s)
        assert applied.meter is not None  # Truth.apply always meters the slot
        summary.update(truth.meter.columns(t, applied.meter))
        record = acc.add(t, t_start, t_end, applied, summary, alloc.queues)
        for rec in recorders:
            rec.record(record)
    bar.close()


def _forecast_meta(fc_model: ModelForecast | None) -> dict[str, Any]:
    """The model forecast's history, forecaster and revision rule (named on every run)."""
    if fc_model is None:
        return {"forecast_history_days": None}
    return {"forecast_history_days": fc_model.history_days, "forecast_model": fc_model.model,
            "forecast_revise": fc_model.revise}


def _forecast_model(sc: Scenario, mode: str, fitted: ModelForecast | None
                    ) -> ModelForecast | None:
    """The model forecasts of a ``model`` run: ``fitted``, or fitted here on the scenario."""
    if mode != "model":
        return None
    if fitted is not None:
        return fitted
    from workbench.forecast.scenario import fit_scenario

    return fit_scenario(sc)


def _horizon_meta(sc: Scenario) -> dict[str, Any]:
    """The run's slots and currency, as its meta records them."""
    return {"slot_s": sc.slot_s, "n_slots": sc.n_slots, "start": sc.start.isoformat(),
            "currency": sc.currency}


class _Live:
    """The active jobs slot by slot, at a cost proportional to them, not to the whole
    trace: jobs join the live set at their first slot (in arrival order) and leave it once
    finished or past their end; the active list keeps the scenario's job order."""

    def __init__(self, runs: list[JobRun]) -> None:
        self.runs = runs
        self.by_first = sorted(range(len(runs)), key=lambda i: runs[i].first_slot)
        self.joined = 0
        self.live: list[int] = []

    def at(self, t: int) -> list[JobRun]:
        runs, order = self.runs, self.by_first
        while self.joined < len(order) and runs[order[self.joined]].first_slot <= t:
            self.live.append(order[self.joined])
            self.joined += 1
        self.live = sorted(i for i in self.live if runs[i].active(t))
        return [runs[i] for i in self.live]


class _Accumulated:
    """A run's plan rows, migrations, slot rows and queues as they accumulate (typed numpy
    column chunks, :mod:`workbench.chunks`, not one dict per row), and the cost and carbon
    (kg, in total and per datacenter) metered so far."""

    def __init__(self, sc: Scenario) -> None:
        self.cost = 0.0
        self.carbon_kg = 0.0
        self.carbon_kg_by_dc: Counter[str] = Counter()
        self.plan = ColumnChunks(PLAN_ROW.dtypes(PLAN_STORED_COLUMNS))
        self.migrations = ColumnChunks(MIGRATION.dtypes())
        self.slots: ColumnChunks | None = None
        self.queues = QueueTrace()
        self.trims: list[PowerTrim] = []

    def state(self, view: ScenarioView, t: int, t_start: datetime, active: Sequence[JobRun],
              truth: Truth) -> SlotState:
        """What the policy sees at slot ``t``: the active jobs, what was metered so far
        (cost, carbon, the peaks of the demand charges) and the batteries' charge."""
        return SlotState(
            scenario=view, t=t, time=t_start, jobs=tuple(r.state(t_start) for r in active),
            carbon_kg_so_far=self.carbon_kg, cost_so_far=self.cost,
            carbon_kg_by_dc_so_far=dict(self.carbon_kg_by_dc),
            soc_kwh={b.datacenter: truth.soc_kwh[b.datacenter]
                     for b in view.supply.batteries}, resize_s=truth.resize_s,
            peak_kw_so_far=({b.key: kw for b, kw in zip(truth.meter.buckets, truth.meter.peaks,
                                                        strict=True)}
                            if view.supply.demand_charges else {}))

    def add(self, t: int, t_start: datetime, t_end: datetime, applied: SlotApplied,
            summary: dict[str, Any], queues: Mapping[str, float]) -> SlotRecord:
        """Add slot ``t`` (its summary gains the queues as JSON); returns its record."""
        self.cost += summary["cost"]
        self.carbon_kg += summary["carbon_kg"]
        self.carbon_kg_by_dc.update({d: float(summary[f"carbon_kg:{d}"])
                                     for d in applied.carbon_kg})
        self.trims.extend(applied.trimmed)
        queues = {str(k): float(v) for k, v in queues.items()}
        summary["queues"] = json.dumps(queues, sort_keys=True)
        plan_cols: dict[str, list[Any]] = (
            {c: list(v) for c, v in zip(PLAN_STORED_COLUMNS, zip(*applied.plan, strict=True),
                                        strict=True)}
            if applied.plan else {c: [] for c in PLAN_STORED_COLUMNS})
        self.plan.extend(plan_cols)
        if applied.migrations:
            self.migrations.extend({c: [m[c] for m in applied.migrations]
                                    for c in MIGRATION.names})
        if self.slots is None:
            self.slots = ColumnChunks(dict.fromkeys(summary, None))
        self.slots.extend({k: [v] for k, v in summary.items()})
        self.queues.add(t, queues)
        return SlotRecord(t=t, slot_start=t_start, slot_end=t_end, plan_columns=plan_cols,
                          migrations=tuple(applied.migrations), summary=summary,
                          queues=queues)


def _check_settings(forecast_mode: str, forecast_error: float, noise: float,
                    restart_s: float, resize_s: float, ema_alpha: float) -> None:
    if forecast_mode not in FORECAST_MODES:
        raise ValueError(f"unknown forecast mode {forecast_mode!r}; use one of {FORECAST_MODES}")
    for value, what in ((forecast_error, "forecast_error"), (noise, "noise"),
                        (restart_s, "restart_s"), (resize_s, "resize_s")):
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{what} must be a finite number >= 0, got {value!r}")
    if not 0 < ema_alpha <= 1:
        raise ValueError(f"ema_alpha must be in (0, 1], got {ema_alpha!r}")


def _job_runs(sc: Scenario, noise: float, seed: int, ema_alpha: float) -> list[JobRun]:
    """The simulator's bookkeeping of every job: its slots, its hidden throughput factor
    (``f_j ~ LogNormal(0, noise)``, drawn in job order from ``seed``) and, for a training
    job, its online estimator."""
    rng = np.random.default_rng(seed)
    factors = np.exp(noise * rng.standard_normal(len(sc.jobs)))
    runs: list[JobRun] = []
    for job, factor in zip(sc.jobs, factors, strict=True):
        first = max(sc.slot_of(job.arrival, after=True), 0)
        if job.is_training:
            stop = sc.n_slots
            # One estimator per job, against a reference profile: observations on other GPU
            # types are mapped onto it by the ratio to their own model.
            ref_pool = min((p for p in sc.pools if job.allows(p.gpu_type)),
                           key=lambda p: (p.gpu_type, p.datacenter))
            est: OnlineEstimator | None = OnlineEstimator(
                sc.profile(job.app, ref_pool.gpu_type), alpha=ema_alpha,
                gpus_per_node=ref_pool.gpus_per_node)
        else:
            assert job.end is not None
            stop = min(max(sc.slot_of(job.end, after=True), 0), sc.n_slots)
            est = None
        runs.append(JobRun(
            job=job, first_slot=first, stop_slot=stop,
            factor=float(factor) if job.is_training else 1.0, est=est, data_at={job.home},
        ))
    return runs


def _fallback_warning(alloc: Allocation, policy: str, t: int, t_start: Any) -> list[str]:
    """The warning of a slot answered by a fallback allocation (none otherwise)."""
    solve = alloc.solve
    if solve is None or not solve.fallback:
        return []
    detail = f": {solve.message}" if solve.message else ""
    msg = (f"slot {t} ({t_start:%Y-%m-%d %H:%M} UTC): {policy} used a fallback "
           f"allocation (solver status {solve.status}){detail}")
    # Collected for RunResult.warnings (the CLI and app show them) and summarised once at
    # the end of the run, rather than one log line per slot.
    log.debug(msg)
    return [msg]


def _summary(sc: Scenario, t: int, t_start: Any, applied: SlotApplied, alloc: Allocation,
             n_active: int, decide_s: float) -> dict[str, Any]:
    """The slot's row of :attr:`RunResult.slots` (without its ``queues``)."""
    solve = alloc.solve
    summary: dict[str, Any] = {
        "slot": t, "time": t_start, "energy_kwh": float(sum(applied.energy_kwh.values())),
        "cost": float(sum(applied.cost.values())),
        "carbon_kg": float(sum(applied.carbon_kg.values())),
        "jobs_active": n_active, "jobs_running": applied.running,
        "jobs_waiting": applied.waiting, "inference_unserved": applied.unserved,
        "migrations": len(applied.migrations), "power_trims": len(applied.trimmed),
        "gpus_busy": int(sum(applied.busy.values())),
        "gpus_total": int(sum(p.count for p in sc.pools)),
        "decide_s": decide_s,
        "solver_status": solve.status if solve is not None else "",
        "solve_s": solve.solve_s if solve is not None else math.nan,
        "objective": (solve.objective if solve is not None and solve.objective is not None
                      else math.nan),
        "gap": solve.gap if solve is not None and solve.gap is not None else math.nan,
        "fallback": bool(solve.fallback) if solve is not None else False,
        "solver_message": solve.message if solve is not None else "",
    }
    summary["cost_at_grid_price"] = float(sum(applied.cost_at_grid_price.values()))
    summary["carbon_kg_at_grid_intensity"] = float(
        sum(applied.carbon_kg_at_grid_intensity.values()))
    for d in sc.datacenters:
        name = d.name
        summary[f"energy_kwh:{name}"] = float(applied.energy_kwh[name])
        summary[f"cost:{name}"] = float(applied.cost[name])
        summary[f"carbon_kg:{name}"] = float(applied.carbon_kg[name])
    for p in sc.pools:
        summary[f"gpus_busy:{p.datacenter}/{p.gpu_type}"] = int(
            applied.busy[(p.datacenter, p.gpu_type)])
    return summary


def _result(sc: Scenario, policy: Policy, meta: dict[str, Any], runs: list[JobRun],
            acc: _Accumulated, warnings: list[str], recorders: Sequence[Recorder]
            ) -> RunResult:
    """The run's result from what the loop accumulated: frames, job outcomes, metrics and
    warnings; every recorder's ``finish``."""
    # Imported here: metrics reads RunResult frames and would otherwise import this module.
    from workbench.metrics import compute_metrics

    plan = plan_frame(acc.plan, sc)
    migrations = acc.migrations.frame()
    migrations["slot_start"] = pd.to_datetime(migrations["slot_start"], utc=True)
    slots = acc.slots.frame() if acc.slots is not None else pd.DataFrame()
    if len(slots):
        slots["time"] = pd.to_datetime(slots["time"], utc=True)
    jobs = job_outcomes(runs, sc, policy.name)
    warnings.extend(trim_warnings(acc.trims))
    warnings.extend(job_warnings(jobs))
    if warnings:
        log.warning("%s on %s: %d warning(s), the first: %s (all in RunResult.warnings)",
                    policy.name, sc.name, len(warnings), warnings[0], extra=RUN_WARNING)
    meta["status"] = "ok" if not any(slots.get("fallback", pd.Series(dtype=bool))) else "fallback"
    result = RunResult(meta=meta, plan=plan, migrations=migrations, slots=slots,
                       queues=acc.queues, jobs=jobs, metrics={}, warnings=warnings)
    result.metrics = compute_metrics(result, sc)
    result.warnings.extend(cap_warnings_after(result.metrics))
    # The stored run log holds every warning, the missed caps included.
    meta["log"] = "\n".join(result.warnings)
    for rec in recorders:
        rec.finish(result)
    return result
