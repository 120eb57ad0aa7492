"""The slot loop: hand each slot's state to a policy, apply its allocation to the truth, record.

The clock is explicit: slot ``t`` covers ``[start + t*slot_s, start + (t+1)*slot_s)``. Each
slot the simulator

1. activates arrivals (a training job from the first slot starting at or after its arrival,
   until it finishes; an inference service in every slot starting in ``[arrival, end)``);
2. builds a :class:`~workbench.policies.base.SlotState` with the jobs' remaining work and
   online estimates, and a :class:`~workbench.policies.base.Forecast` from
   :func:`workbench.cubes.forecast`;
3. calls ``policy.decide`` and validates the allocation (pool capacity, allowed GPU types,
   latency bounds, links for moves); an invalid allocation raises :class:`AllocationError`.
   GPU counts outside a job's ``gpu_counts`` are accepted (operators may pass wider menus
   to a policy) as long as the pool holds them;
4. applies it to the *truth* through the one slot model (:mod:`workbench.outcome`):
   progress at the profile's true gradient noise scale, times a hidden per-job throughput
   factor and per-slot noise; the dataset's first trip away from home, checkpoint moves,
   restarts on a start, resume, move or change of GPU type or count (transfers longer than
   a slot span slots); energy, cost and carbon at the true price and carbon of each end;
   it meters each datacenter's power (``power_kw:<dc>``) for the caps;
5. re-estimates each job's throughput scale and gradient noise scale from the noisy
   observations (:class:`workbench.estimate.OnlineEstimator`, exponential moving averages);
6. hands a :class:`SlotRecord` to every recorder.

The simulator never asks which policy it runs: every policy is driven by the same
``reset``/``decide`` calls and the same truth, and sees only a
:class:`~workbench.model.ScenarioView` (no true prices, no future arrivals).

Truth model, for a training job on ``n`` GPUs of type ``g`` with global batch ``m``
(:func:`workbench.outcome.slot_outcome` with ``speed = f_j * eta_t`` and ``phi`` the
profile's trajectory at the job's true progress; the policies predict with the same
function at their online estimates)::

    f_j ~ LogNormal(0, noise) once per job,  eta_t ~ LogNormal(0, noise) per job and slot
    lost, progress, used_s, energy: see workbench.outcome

An inference service draws ``n * (idle + load * (max - idle))`` W for the whole slot, or
until its end when it ends inside the slot.
"""

from __future__ import annotations

import json
import logging
import math
import time as _time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pandas as pd
import xarray as xr
from tqdm.auto import tqdm

from workbench import outcome, perf
from workbench.chunks import ColumnChunks, QueueTrace
from workbench.cubes import FORECAST_MODES, forecast
from workbench.estimate import OnlineEstimator, planning_speed_factor
from workbench.model import Datacenter, GpuPool, Job, Scenario
from workbench.policies.base import (
    RESIZE_S_DEFAULT,
    RESTART_S_DEFAULT,
    Allocation,
    JobState,
    Placement,
    Policy,
    SlotState,
)
from workbench.schema import JOB_OUTCOME, MIGRATION, PLAN_ROW, PLAN_STORED_COLUMNS
from workbench.units import G_PER_KG

if TYPE_CHECKING:
    from workbench.forecast.scenario import ModelForecast

log = logging.getLogger(__name__)

EMA_ALPHA_DEFAULT = 0.1
"""Weight of the newest observation in the online estimates (:mod:`workbench.estimate`)."""

_PlanRow = PLAN_ROW.row_type(PLAN_STORED_COLUMNS)
"""One plan row as the simulator records it, made by field name
(:data:`workbench.schema.PLAN_ROW` without ``slot_start``/``slot_end``)."""


class AllocationError(ValueError):
    """A policy returned an allocation that breaks the scenario's rules."""


@dataclass(frozen=True)
class SlotRecord:
    """Everything that happened in one slot, as handed to recorders.

    ``plan_columns`` holds the slot's plan rows as one list per column of
    :data:`workbench.schema.PLAN_STORED_COLUMNS` (the simulator's columnar form); :attr:`plan`
    gives them as rows with every column of :data:`workbench.schema.PLAN_ROW` and
    :meth:`plan_frame` as a DataFrame. ``migrations`` rows carry the columns of
    :data:`workbench.schema.MIGRATION`; ``summary`` is the slot's row of
    :attr:`RunResult.slots`; ``queues`` the policy's queues after the slot.
    """

    t: int
    slot_start: datetime
    slot_end: datetime
    plan_columns: Mapping[str, Sequence[Any]]
    migrations: tuple[dict[str, Any], ...]
    summary: dict[str, Any]
    queues: Mapping[str, float]

    @property
    def n_rows(self) -> int:
        """Plan rows of the slot."""
        return len(self.plan_columns.get("job_id", ()))

    @property
    def plan(self) -> tuple[dict[str, Any], ...]:
        """The slot's plan rows as dicts (built on access)."""
        cols = [self.plan_columns[c] for c in PLAN_STORED_COLUMNS]
        return tuple({"slot_start": self.slot_start, "slot_end": self.slot_end,
                      **dict(zip(PLAN_STORED_COLUMNS, values, strict=True))}
                     for values in zip(*cols, strict=True))

    def plan_frame(self) -> pd.DataFrame:
        """The slot's plan rows as a DataFrame (the columns of :attr:`RunResult.plan`)."""
        n = self.n_rows
        frame = pd.DataFrame({c: self.plan_columns[c] for c in PLAN_STORED_COLUMNS})
        frame.insert(0, "slot_end", pd.Series([self.slot_end] * n, dtype=object))
        frame.insert(0, "slot_start", pd.Series([self.slot_start] * n, dtype=object))
        return frame


class RunResult:
    """The outcome of one simulated run.

    Attributes
    ----------
    meta : dict
        ``scenario``, ``policy``, ``knobs`` and the simulator's settings.
    plan : DataFrame
        One row per job per slot it is active in, the columns of
        :data:`workbench.schema.PLAN_ROW` (the plan CSV's first; ``region`` is the
        datacenter).
    migrations : DataFrame
        The columns of :data:`workbench.schema.MIGRATION`, one row per data movement
        between datacenters (a checkpoint move, or a dataset's first trip away from home).
    slots : DataFrame
        One row per slot: totals (``energy_kwh``, ``cost``, ``carbon_kg``), counts of jobs,
        busy GPUs, the policy's solve status and time, fallback flag, then per datacenter
        ``energy_kwh:<dc>``, ``cost:<dc>``, ``carbon_kg:<dc>``, per pool
        ``gpus_busy:<dc>/<gpu>``, and ``queues`` (the policy's queues as JSON).
    queues : DataFrame
        The policy's queues after each slot, one column per queue, indexed by slot. The
        simulator keeps them in long form (:class:`workbench.chunks.QueueTrace`) and builds
        this table on first access (slots x queues cells: a look-ahead run over a trace of
        thousands of jobs has one queue per job; :attr:`queue_totals` is the small form).
    queue_totals : DataFrame
        The queues summed per kind (``R``, ``Z``, ``mu``, ...) for each slot.
    jobs : DataFrame
        One row per job (:data:`workbench.schema.JOB_OUTCOME`): finish time, JCT, deadline
        met, and for a job not done a ``reason``.
    metrics : dict
        :func:`workbench.metrics.compute_metrics` of the run.
    warnings : list of str
        What the user should see: solver fallbacks, unserved inference, unfinished jobs.
    """

    def __init__(
        self,
        meta: dict[str, Any],
        plan: pd.DataFrame,
        migrations: pd.DataFrame,
        slots: pd.DataFrame,
        queues: pd.DataFrame | QueueTrace,
        jobs: pd.DataFrame,
        metrics: dict[str, Any],
        warnings: list[str] | None = None,
    ) -> None:
        self.meta = meta
        self.plan = plan
        self.migrations = migrations
        self.slots = slots
        self._queues: pd.DataFrame | QueueTrace = queues
        self.jobs = jobs
        self.metrics = metrics
        self.warnings: list[str] = [] if warnings is None else warnings

    @property
    def queues(self) -> pd.DataFrame:
        if isinstance(self._queues, QueueTrace):
            self._queues = self._queues.frame()
        return self._queues

    @queues.setter
    def queues(self, value: pd.DataFrame | QueueTrace) -> None:
        self._queues = value

    @property
    def queue_totals(self) -> pd.DataFrame:
        from workbench.metrics import queue_kind_totals

        q = self._queues
        return q.kind_totals() if isinstance(q, QueueTrace) else queue_kind_totals(q)

    @property
    def policy(self) -> str:
        return str(self.meta["policy"])

    def __repr__(self) -> str:
        return (f"RunResult(policy={self.meta.get('policy')!r}, "
                f"scenario={self.meta.get('scenario')!r}, plan_rows={len(self.plan)}, "
                f"slots={len(self.slots)})")


class Recorder(Protocol):
    """Receives a run as it happens; see :mod:`workbench.recorders`."""

    def start(self, run_meta: Mapping[str, Any]) -> None: ...

    def record(self, slot_record: SlotRecord) -> None: ...

    def finish(self, result: RunResult) -> None: ...


@dataclass
class _JobRun:
    """The simulator's mutable bookkeeping of one job (truth and estimates)."""

    job: Job
    first_slot: int
    stop_slot: int  # exclusive; n_slots for training (they run until done)
    factor: float
    est: OnlineEstimator | None
    done: float = 0.0
    placement: Placement | None = None
    last_dc: str | None = None
    slots_active: int = 0
    slots_run: int = 0
    migrations: int = 0
    first_start: datetime | None = None
    finish_time: datetime | None = None
    energy_kwh: float = 0.0
    cost: float = 0.0
    carbon_kg: float = 0.0
    capacity_seen: bool = False
    unserved: int = 0
    data_at: set[str] = field(default_factory=set)
    pending_s: float = 0.0
    transfer_gb: float = 0.0
    lost_s: float = 0.0

    @property
    def finished(self) -> bool:
        return self.finish_time is not None

    def active(self, t: int) -> bool:
        return self.first_slot <= t < self.stop_slot and not self.finished

    def state(self, now: datetime | None = None) -> JobState:
        if self.est is not None:
            phi = self.est.phi(self.done)
            remaining = max(1.0 - self.done, 0.0)
            left = (None if now is None or self.job.deadline is None
                    else (self.job.deadline - now).total_seconds())
            scale = planning_speed_factor(self.est, self.job, remaining, left)
        else:
            phi, scale, remaining = 1.0, 1.0, 1.0
        return JobState(
            job=self.job,
            remaining=remaining,
            placement=self.placement,
            last_datacenter=self.last_dc,
            phi=phi,
            throughput_scale=scale,
            slots_run=self.slots_run,
            data_at=tuple(sorted(self.data_at)),
            pending_s=self.pending_s,
        )


def _horizon_cube(scenario: Scenario) -> xr.Dataset:
    """The scenario's cube cut to its horizon, so that row ``t`` is slot ``t``."""
    grid = scenario.grid
    times = pd.DatetimeIndex(grid["time"].values)
    start = pd.Timestamp(scenario.start).tz_convert("UTC").tz_localize(None)
    pos = times.get_indexer([start])[0]
    if pos < 0:
        raise ValueError(
            f"scenario {scenario.name!r}: its grid cube has no time step at the scenario start "
            f"{scenario.start.isoformat()}; rebuild the cube from the start"
        )
    if times.size - pos < scenario.n_slots:
        raise ValueError(
            f"scenario {scenario.name!r}: its grid cube covers {times.size - pos} slots from the "
            f"start, fewer than n_slots {scenario.n_slots}"
        )
    cube = grid.isel(time=slice(pos, pos + scenario.n_slots))
    if "slot_s" not in cube.attrs:
        cube = cube.assign_attrs(slot_s=scenario.slot_s)
    for var in ("price_per_kwh", "carbon_g_per_kwh"):
        if not np.all(np.isfinite(cube[var].values)):
            raise ValueError(
                f"scenario {scenario.name!r}: {var} has missing values inside the horizon; "
                "fill or re-import the grid data"
            )
    return cube


def _validate(
    alloc: Allocation,
    state: SlotState,
    pools: Mapping[tuple[str, str], GpuPool],
    policy_name: str,
) -> None:
    """Raise :class:`AllocationError` unless every placement is allowed and pools suffice."""
    sc = state.scenario
    where = f"policy {policy_name!r}, slot {state.t} ({state.time.isoformat()})"
    active = {js.job.job_id: js for js in state.jobs}
    used: Counter[tuple[str, str]] = Counter()
    users: dict[tuple[str, str], list[str]] = {}
    for job_id, p in alloc.placements.items():
        js = active.get(job_id)
        if js is None:
            raise AllocationError(
                f"{where}: job {job_id!r} is placed but is not active (unknown, not yet "
                "arrived, finished, or past its service end)"
            )
        job = js.job
        key = (p.datacenter, p.gpu_type)
        pool = pools.get(key)
        if pool is None:
            raise AllocationError(
                f"{where}: job {job_id!r} is placed on {p.datacenter}/{p.gpu_type}, which is "
                "not a GPU pool of the scenario"
            )
        if not job.allows(p.gpu_type):
            raise AllocationError(
                f"{where}: job {job_id!r} may run only on {list(job.gpu_types)}, not on "
                f"{p.gpu_type}"
            )
        if not (isinstance(p.n_gpus, int | np.integer) and p.n_gpus >= 1):
            raise AllocationError(f"{where}: job {job_id!r} needs n_gpus >= 1, got {p.n_gpus!r}")
        if not (isinstance(p.batch_size, int | np.integer) and p.batch_size >= 1):
            raise AllocationError(
                f"{where}: job {job_id!r} needs batch_size >= 1, got {p.batch_size!r}"
            )
        if not job.is_training:
            bound = job.max_latency_ms if job.max_latency_ms is not None else math.inf
            latency = sc.latency_ms(job.home, p.datacenter)
            if latency > bound:
                raise AllocationError(
                    f"{where}: inference service {job_id!r} placed in {p.datacenter}, "
                    f"{latency} ms from its home {job.home} (bound {bound} ms)"
                )
        if js.last_datacenter is not None and js.last_datacenter != p.datacenter:
            if sc.link(js.last_datacenter, p.datacenter) is None:
                raise AllocationError(
                    f"{where}: job {job_id!r} moves {js.last_datacenter} -> {p.datacenter} but "
                    "no link joins them"
                )
        holders = set(js.data_at) | {job.home}
        if job.dataset_gb > 0 and p.datacenter not in holders and not any(
                sc.link(d, p.datacenter) is not None for d in holders):
            raise AllocationError(
                f"{where}: job {job_id!r} runs in {p.datacenter}, but its "
                f"{job.dataset_gb:g} GB dataset (in {sorted(holders)}) has no link to get there"
            )
        used[key] += int(p.n_gpus)
        users.setdefault(key, []).append(f"{job_id}:{p.n_gpus}")
    for key, n in used.items():
        cap = pools[key].count
        if n > cap:
            raise AllocationError(
                f"{where}: pool {key[0]}/{key[1]} is given {n} GPUs but has {cap} "
                f"({', '.join(users[key])})"
            )


def _json_queues(queues: Mapping[str, float]) -> str:
    return json.dumps({str(k): float(v) for k, v in queues.items()}, sort_keys=True)


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
        :func:`workbench.cubes.forecast`); the simulator always charges the truth. The
        runner decides the mode (:func:`workbench.runner.forecast_mode`: the honest
        :func:`workbench.cubes.default_forecast_mode` unless a run asks for another);
        ``"perfect"`` is a what-if.
    noise : float
        Log-normal sigma of the hidden per-job throughput factor, of the per-slot
        throughput noise and of the noise on observed gradient noise scales (0: the job
        model is exact and observations are noiseless).
    seed : int
        Seed of every random draw (noise and noisy forecasts); equal seeds, equal runs.
    recorders : sequence of Recorder
        Each gets ``start(meta)``, ``record(slot_record)`` per slot and ``finish(result)``.
    progress : bool
        Show a tqdm progress bar on stderr.
    restart_s : float
        Seconds lost on every start, resume, move or change of GPU type.
    resize_s : float
        Seconds lost on a change of GPU count in the same pool
        (:data:`workbench.outcome.RESIZE_S_DEFAULT`).
    ema_alpha : float
        Weight in (0, 1] of the newest observation in the online estimates.
    knobs : mapping, optional
        The policy's settings, stored with the run (``meta["knobs"]``).
    forecast_model : ModelForecast, optional
        With ``forecast_mode="model"``: forecasts already fitted on this scenario's history
        (:func:`workbench.forecast.fit_scenario`), so that runs of several policies on one
        scenario fit once; fitted here when absent.

    Returns
    -------
    RunResult

    Raises
    ------
    AllocationError
        When the policy places a job where it may not run or over a pool's capacity.
    """
    # Imported here: metrics reads RunResult frames and would otherwise import this module.
    from workbench.metrics import compute_metrics

    if forecast_mode not in FORECAST_MODES:
        raise ValueError(f"unknown forecast mode {forecast_mode!r}; use one of {FORECAST_MODES}")
    for value, what in ((forecast_error, "forecast_error"), (noise, "noise"),
                        (restart_s, "restart_s"), (resize_s, "resize_s")):
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{what} must be a finite number >= 0, got {value!r}")
    if not 0 < ema_alpha <= 1:
        raise ValueError(f"ema_alpha must be in (0, 1], got {ema_alpha!r}")

    sc = scenario
    slot_s = float(sc.slot_s)
    cube = _horizon_cube(sc)
    fc_model = forecast_model if forecast_mode == "model" else None
    if forecast_mode == "model" and fc_model is None:
        from workbench.forecast.scenario import fit_scenario

        fc_model = fit_scenario(sc)
    regions = [str(r) for r in cube["region"].values]
    r_index = {r: i for i, r in enumerate(regions)}
    price = np.asarray(cube["price_per_kwh"].values, dtype=float)
    carbon = np.asarray(cube["carbon_g_per_kwh"].values, dtype=float)
    dcs: dict[str, Datacenter] = {d.name: d for d in sc.datacenters}
    pools: dict[tuple[str, str], GpuPool] = {(p.datacenter, p.gpu_type): p for p in sc.pools}

    rng = np.random.default_rng(seed)
    factors = np.exp(noise * rng.standard_normal(len(sc.jobs)))
    slot_rng = np.random.default_rng([seed, 1])
    runs: list[_JobRun] = []
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
        runs.append(_JobRun(
            job=job, first_slot=first, stop_slot=stop,
            factor=float(factor) if job.is_training else 1.0, est=est, data_at={job.home},
        ))

    meta: dict[str, Any] = {
        "scenario": sc.name,
        "policy": policy.name,
        "knobs": dict(knobs or {}),
        "forecast_mode": forecast_mode,
        "forecast_error": forecast_error,
        "forecast_history_days": None if fc_model is None else fc_model.history_days,
        "noise": noise,
        "seed": seed,
        "restart_s": restart_s,
        "resize_s": resize_s,
        "slot_s": sc.slot_s,
        "n_slots": sc.n_slots,
        "start": sc.start.isoformat(),
        "currency": sc.currency,
    }
    for rec in recorders:
        rec.start(meta)

    view = sc.view()
    policy.reset(view)
    warnings: list[str] = _cap_warnings_before(sc, policy, knobs)
    # Columnar accumulation (workbench.chunks): numpy chunks, not one dict per row.
    plan_chunks = ColumnChunks(PLAN_ROW.dtypes(PLAN_STORED_COLUMNS))
    mig_chunks = ColumnChunks(MIGRATION.dtypes())
    slot_chunks: ColumnChunks | None = None
    queue_trace = QueueTrace()
    cost_so_far = 0.0
    carbon_so_far = 0.0
    carbon_by_dc_so_far: Counter[str] = Counter()
    wall0 = _time.perf_counter()

    bar = tqdm(range(sc.n_slots), desc=f"{sc.name}/{policy.name}", unit="slot",
               disable=not progress, leave=False)
    # Per-slot work proportional to the active jobs, not to the whole trace: jobs join the
    # live set at their first slot (in arrival order) and leave it once finished or past
    # their end; the active list keeps the scenario's job order.
    by_first = sorted(range(len(runs)), key=lambda i: runs[i].first_slot)
    joined = 0
    live: list[int] = []
    for t in bar:
        t_start = sc.start + timedelta(seconds=slot_s * t)
        t_end = t_start + timedelta(seconds=slot_s)
        while joined < len(by_first) and runs[by_first[joined]].first_slot <= t:
            live.append(by_first[joined])
            joined += 1
        live = sorted(i for i in live if runs[i].active(t))
        active = [runs[i] for i in live]
        state = SlotState(
            scenario=view, t=t, time=t_start, jobs=tuple(r.state(t_start) for r in active),
            carbon_kg_so_far=carbon_so_far, cost_so_far=cost_so_far,
            carbon_kg_by_dc_so_far=dict(carbon_by_dc_so_far),
        )
        fc = forecast(cube, t, None, forecast_mode, forecast_error, seed, fc_model)
        tic = _time.perf_counter()
        alloc = policy.decide(state, fc)
        decide_s = _time.perf_counter() - tic
        _validate(alloc, state, pools, policy.name)

        solve = alloc.solve
        if solve is not None and solve.fallback:
            detail = f": {solve.message}" if solve.message else ""
            msg = (f"slot {t} ({t_start:%Y-%m-%d %H:%M} UTC): {policy.name} used a fallback "
                   f"allocation (solver status {solve.status}){detail}")
            # Collected for RunResult.warnings (the CLI and app show them) and summarised
            # once at the end of the run, rather than one log line per slot.
            log.debug(msg)
            warnings.append(msg)

        busy: Counter[tuple[str, str]] = Counter()
        for placed in alloc.placements.values():
            busy[(placed.datacenter, placed.gpu_type)] += placed.n_gpus
        dc_energy: dict[str, float] = dict.fromkeys(dcs, 0.0)
        dc_cost: dict[str, float] = dict.fromkeys(dcs, 0.0)
        dc_carbon: dict[str, float] = dict.fromkeys(dcs, 0.0)
        dc_power: dict[str, float] = dict.fromkeys(dcs, 0.0)
        slot_plan: list[tuple[Any, ...]] = []  # _PlanRow rows
        slot_migs: list[dict[str, Any]] = []
        running = waiting = unserved = 0

        for r in active:
            job = r.job
            r.slots_active += 1
            p = alloc.placements.get(job.job_id)
            if p is None:
                where = r.last_dc or job.home
                reg = dcs[where].region
                if job.is_training:
                    waiting += 1
                    need = min(job.gpu_counts)
                    if any(
                        pool.count - busy[key] >= need
                        for key, pool in pools.items() if job.allows(pool.gpu_type)
                    ):
                        r.capacity_seen = True
                else:
                    unserved += 1
                    r.unserved += 1
                r.placement = None
                slot_plan.append(_PlanRow(
                    job_id=job.job_id, region=where, gpu_type="", n_gpus=0, batch_size=0,
                    action="pause", energy_kwh=0.0, cost=0.0, carbon_kg=0.0,
                    price_per_kwh=float(price[t, r_index[reg]]),
                    carbon_g_per_kwh=float(carbon[t, r_index[reg]]), progress=0.0,
                    transfer_gb=0.0, lost_s=0.0, slot=t, kind=job.kind, home=job.home,
                    grid_region=reg, used_s=0.0, movement_kwh=0.0,
                    remaining=max(1.0 - r.done, 0.0) if job.is_training else 1.0))
                continue

            running += 1
            dc = dcs[p.datacenter]
            pool = pools[(p.datacenter, p.gpu_type)]
            reg = dc.region
            pr = float(price[t, r_index[reg]])
            cg = float(carbon[t, r_index[reg]])
            moves = r.last_dc is not None and r.last_dc != p.datacenter
            prev = (None if r.placement is None else
                    (r.placement.datacenter, r.placement.gpu_type, int(r.placement.n_gpus)))
            ch = outcome.move_charges(
                job, p.datacenter, p.gpu_type, int(p.n_gpus), previous=prev,
                checkpoint_at=r.last_dc, data_at=r.data_at, pending_s=r.pending_s,
                link=sc.link, restart_s=restart_s, resize_s=resize_s)
            assert ch is not None  # links checked by _validate
            if job.is_training:
                prof = sc.profile(job.app, p.gpu_type)
                eta = float(np.exp(noise * slot_rng.standard_normal())) if noise > 0 else 1.0
                x_model = float(perf.throughput(prof.throughput, p.n_gpus, p.batch_size,
                                                pool.gpus_per_node))
                phi_true = float(prof.efficiency.phi(r.done))
                out = outcome.slot_outcome(
                    job, slot_s=slot_s, pue=dc.pue, charges=ch, remaining=1.0 - r.done,
                    profile=prof, n_gpus=int(p.n_gpus), batch_size=int(p.batch_size),
                    x_model_sps=x_model, speed=r.factor * eta, phi=phi_true,
                    gpus_per_node=pool.gpus_per_node)
                finishing = out.finishes
                # Online re-estimation from what the job reports this slot.
                if out.used_s > out.lost_s:
                    _observe(r, p.n_gpus, p.batch_size, r.factor * eta, phi_true, noise,
                             slot_rng)
                r.done = 1.0 if finishing else r.done + out.progress
                delta = out.progress
            else:
                # A service ending inside the slot draws power only until its end.
                assert job.end is not None
                out = outcome.slot_outcome(
                    job, slot_s=slot_s, pue=dc.pue, charges=ch,
                    inference_power_w=outcome.service_power_w(job, pool, p.n_gpus),
                    up_s=(job.end - t_start).total_seconds())
                delta = 0.0
                # The last slot before the service's end (not merely the horizon's last).
                finishing = t == max(sc.slot_of(job.end, after=True), 0) - 1
            used_s, lost = out.used_s, out.lost_s
            r.pending_s = out.pending_s

            if finishing:
                action = "finish"
            elif moves:
                action = "migrate"
            elif r.slots_run == 0:
                action = "start"
            elif r.placement is not None and r.placement.datacenter == p.datacenter:
                action = "run"
            else:
                action = "resume"
            if moves:
                r.migrations += 1
            if ch.transfer_gb > 0 or moves:
                src = r.last_dc if moves else (ch.sources[0] if ch.sources else job.home)
                what = ("dataset+checkpoint" if ch.dataset_gb > 0 and ch.checkpoint_gb > 0
                        else "dataset" if ch.dataset_gb > 0 else "checkpoint")
                slot_migs.append({
                    "slot_start": t_start, "job_id": job.job_id, "from_region": src,
                    "to_region": p.datacenter, "checkpoint_gb": ch.checkpoint_gb,
                    "dataset_gb": ch.dataset_gb, "transfer_gb": ch.transfer_gb,
                    "transfer_s": ch.transfer_s, "moved": what,
                    "expected_gain": float(alloc.expected_gain.get(job.job_id, math.nan)),
                    "reason": str(alloc.reasons.get(job.job_id, "")) or (
                        "first run away from home: its dataset travels" if not moves
                        else ""),
                })
                r.data_at.add(p.datacenter)
                r.transfer_gb += ch.transfer_gb
            if r.first_start is None:
                r.first_start = t_start
            if finishing and job.is_training:
                r.finish_time = t_start + timedelta(seconds=used_s)
            energy = out.energy_kwh
            cost = energy * pr
            carb = energy * cg / G_PER_KG
            dc_energy[p.datacenter] += energy
            dc_cost[p.datacenter] += cost
            dc_carbon[p.datacenter] += carb
            dc_power[p.datacenter] += out.power_kw
            for src_dc, kwh in out.source_kwh:
                s_reg = dcs[src_dc].region
                s_cost = kwh * float(price[t, r_index[s_reg]])
                s_carb = kwh * float(carbon[t, r_index[s_reg]]) / G_PER_KG
                dc_energy[src_dc] += kwh
                dc_cost[src_dc] += s_cost
                dc_carbon[src_dc] += s_carb
                energy += kwh
                cost += s_cost
                carb += s_carb
            r.energy_kwh += energy
            r.cost += cost
            r.carbon_kg += carb
            r.lost_s += lost
            r.slots_run += 1
            r.placement = p
            r.last_dc = p.datacenter
            slot_plan.append(_PlanRow(
                job_id=job.job_id, region=p.datacenter, gpu_type=p.gpu_type,
                n_gpus=int(p.n_gpus), batch_size=int(p.batch_size), action=action,
                energy_kwh=energy, cost=cost, carbon_kg=carb, price_per_kwh=pr,
                carbon_g_per_kwh=cg, progress=delta, transfer_gb=ch.transfer_gb, lost_s=lost,
                slot=t, kind=job.kind, home=job.home, grid_region=reg, used_s=used_s,
                movement_kwh=out.movement_kwh,
                remaining=max(1.0 - r.done, 0.0) if job.is_training else 1.0))

        e_tot = float(sum(dc_energy.values()))
        c_tot = float(sum(dc_cost.values()))
        k_tot = float(sum(dc_carbon.values()))
        cost_so_far += c_tot
        carbon_so_far += k_tot
        carbon_by_dc_so_far.update({d: float(v) for d, v in dc_carbon.items()})
        queues = {str(k): float(v) for k, v in alloc.queues.items()}
        summary: dict[str, Any] = {
            "slot": t, "time": t_start, "energy_kwh": e_tot, "cost": c_tot, "carbon_kg": k_tot,
            "jobs_active": len(active), "jobs_running": running, "jobs_waiting": waiting,
            "inference_unserved": unserved, "migrations": len(slot_migs),
            "gpus_busy": int(sum(busy.values())),
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
        for name in dcs:
            summary[f"energy_kwh:{name}"] = float(dc_energy[name])
            # The meter: average facility power of the jobs in the slot, kW (without the
            # network energy of transfers).
            summary[f"power_kw:{name}"] = float(dc_power[name])
            summary[f"cost:{name}"] = float(dc_cost[name])
            summary[f"carbon_kg:{name}"] = float(dc_carbon[name])
        for key in pools:
            summary[f"gpus_busy:{key[0]}/{key[1]}"] = int(busy[key])
        summary["queues"] = _json_queues(queues)

        plan_cols: dict[str, list[Any]] = (
            {c: list(v) for c, v in zip(PLAN_STORED_COLUMNS, zip(*slot_plan, strict=True),
                                        strict=True)}
            if slot_plan else {c: [] for c in PLAN_STORED_COLUMNS})
        plan_chunks.extend(plan_cols)
        if slot_migs:
            mig_chunks.extend({c: [m[c] for m in slot_migs] for c in MIGRATION.names})
        if slot_chunks is None:
            slot_chunks = ColumnChunks(dict.fromkeys(summary, None))
        slot_chunks.extend({k: [v] for k, v in summary.items()})
        queue_trace.add(t, queues)
        record = SlotRecord(t=t, slot_start=t_start, slot_end=t_end, plan_columns=plan_cols,
                            migrations=tuple(slot_migs), summary=summary, queues=queues)
        for rec in recorders:
            rec.record(record)
    bar.close()

    meta["wall_s"] = _time.perf_counter() - wall0
    plan = _plan_frame(plan_chunks, sc)
    migrations = mig_chunks.frame()
    migrations["slot_start"] = pd.to_datetime(migrations["slot_start"], utc=True)
    slots = slot_chunks.frame() if slot_chunks is not None else pd.DataFrame()
    if len(slots):
        slots["time"] = pd.to_datetime(slots["time"], utc=True)
    jobs = _outcomes(runs, sc, policy.name)
    warnings.extend(_job_warnings(jobs))
    if warnings:
        log.warning("%s on %s: %d warning(s), the first: %s (all in RunResult.warnings)",
                    policy.name, sc.name, len(warnings), warnings[0])
    meta["status"] = "ok" if not any(slots.get("fallback", pd.Series(dtype=bool))) else "fallback"
    result = RunResult(meta=meta, plan=plan, migrations=migrations, slots=slots,
                       queues=queue_trace, jobs=jobs, metrics={}, warnings=warnings)
    result.metrics = compute_metrics(result, sc)
    result.warnings.extend(_cap_warnings_after(result.metrics))
    # The stored run log holds every warning, the missed caps included.
    meta["log"] = "\n".join(result.warnings)
    for rec in recorders:
        rec.finish(result)
    return result


def _plan_frame(chunks: ColumnChunks, sc: Scenario) -> pd.DataFrame:
    """:attr:`RunResult.plan` from the accumulated chunks: ``slot_start``/``slot_end`` from
    the slot number, then the stored columns (each chunk released as the frame takes it)."""
    if not len(chunks):
        plan = pd.DataFrame([], columns=list(PLAN_ROW.names))
        for col in ("slot_start", "slot_end"):
            plan[col] = pd.to_datetime(plan[col], utc=True)
        return plan
    slot = chunks.column("slot")
    start = pd.Timestamp(sc.start).tz_convert("UTC")
    step = pd.to_timedelta(float(sc.slot_s), unit="s")
    data: dict[str, Any] = {"slot_start": pd.DatetimeIndex(start + slot * step),
                            "slot_end": pd.DatetimeIndex(start + (slot + 1) * step)}
    frame = chunks.frame()
    data.update({c: frame.pop(c) for c in PLAN_STORED_COLUMNS})
    return pd.DataFrame(data, copy=False)


def _cap(policy: Policy, knobs: Mapping[str, Any] | None, name: str) -> Any:
    value = (knobs or {}).get(name)
    return getattr(policy, name, None) if value is None else value


def _cap_warnings_before(sc: Scenario, policy: Policy, knobs: Mapping[str, Any] | None
                         ) -> list[str]:
    """A carbon cap below what the inference services alone must emit cannot be met."""
    from workbench.metrics import inference_carbon_floor_kg

    cap = _cap(policy, knobs, "carbon_cap_kg")
    if cap is None:
        return []
    total = float(sum(cap.values())) if isinstance(cap, Mapping) else float(cap)
    floor = inference_carbon_floor_kg(sc)
    if total >= floor:
        return []
    msg = (f"carbon cap {total:.1f} kg is below the {floor:.1f} kg that the inference "
           "services alone emit at least; the run will end above the cap")
    log.warning(msg)
    return [msg]


def _cap_warnings_after(metrics: Mapping[str, Any]) -> list[str]:
    """A missed cap is reported, never silent."""
    out = []
    n = int(metrics.get("power_cap_violations", 0) or 0)
    if n:
        out.append(f"power cap missed: {n} datacenter-slot(s) metered above "
                   f"{metrics.get('power_cap_kw')} kW (the policy predicted less power "
                   "than the truth drew, or it does not honour the cap)")
    if metrics.get("carbon_cap_met") is False:
        cap = float(metrics["carbon_cap_kg"])
        over = float(metrics["carbon_kg"]) - cap
        out.append(f"carbon cap missed: {metrics['carbon_kg']:.1f} kg emitted against a cap "
                   f"of {cap:.1f} kg ({over:.1f} kg, {100 * over / cap:.1f}% over)")
    for msg in out:
        log.warning(msg)
    return out


def _observe(
    r: _JobRun, n: int, m: int, speed: float, phi_true: float, noise: float,
    rng: np.random.Generator,
) -> None:
    """Feed one slot's noisy observations to the job's estimator.

    The job reports its throughput (``speed`` times the model's, mapped onto the reference
    profile) and gradient statistics with ``grad_var / grad_sqr = phi_true / m0``, each
    multiplied by log-normal noise of sigma ``noise``.
    """
    est = r.est
    assert est is not None
    x_ref = float(perf.throughput(est.profile.throughput, n, m, est.gpus_per_node))
    z = np.exp(noise * rng.standard_normal(2)) if noise > 0 else np.ones(2)
    m0 = est.profile.efficiency.m0
    est.update(n, m, observed_throughput_sps=speed * x_ref, grad_sqr=float(z[0]),
               grad_var=float(phi_true / m0 * z[1]))


def _hours(a: datetime, b: datetime) -> float:
    return (b - a).total_seconds() / 3600.0


def _outcomes(runs: Iterable[_JobRun], sc: Scenario, policy_name: str) -> pd.DataFrame:
    """One row per job: when it finished, its JCT, whether it met its deadline, or why not."""
    rows = []
    horizon_end = sc.end
    for r in runs:
        job = r.job
        deadline_met: bool | None = None
        reason = ""
        jct = math.nan
        if job.is_training:
            finished = r.finished
            left = max(1.0 - r.done, 0.0)
            if finished:
                assert r.finish_time is not None
                jct = _hours(job.arrival, r.finish_time)
                if job.deadline is not None:
                    deadline_met = r.finish_time <= job.deadline
                    if not deadline_met:
                        reason = (f"finished {_hours(job.deadline, r.finish_time):.1f} h after "
                                  "its deadline")
            else:
                if job.deadline is not None and job.deadline <= horizon_end:
                    deadline_met = False
                if r.first_slot >= sc.n_slots:
                    reason = "arrives after the horizon ends"
                elif r.slots_run == 0:
                    if not r.capacity_seen:
                        reason = (f"never scheduled: no capacity (no allowed pool had "
                                  f"{min(job.gpu_counts)} free GPUs in its {r.slots_active} "
                                  "slots)")
                    else:
                        reason = (f"never scheduled: {policy_name} kept it waiting for "
                                  f"{r.slots_active} slots")
                    if job.deadline is not None and job.deadline <= horizon_end:
                        reason += "; deadline passed"
                elif job.deadline is not None and job.deadline <= horizon_end:
                    reason = f"deadline passed with {100 * left:.0f}% left"
                elif job.deadline is not None:
                    reason = (f"horizon ended with {100 * left:.0f}% left (deadline "
                              f"{job.deadline:%Y-%m-%d %H:%M} UTC is after the horizon)")
                else:
                    reason = f"horizon ended with {100 * left:.0f}% left (no deadline)"
        else:
            left = 0.0
            finished = r.slots_active > 0 and r.unserved == 0
            if r.first_slot >= sc.n_slots or r.first_slot >= r.stop_slot:
                reason = "service window lies outside the horizon"
                finished = False
            elif r.unserved:
                reason = f"unserved in {r.unserved} of {r.slots_active} slots (no capacity)"
        rows.append({
            "job_id": job.job_id, "kind": job.kind, "app": job.app, "home": job.home,
            "arrival": job.arrival, "deadline": job.deadline, "first_start": r.first_start,
            "finish_time": r.finish_time, "jct_h": jct, "finished": finished,
            "deadline_met": deadline_met, "remaining": left, "slots_active": r.slots_active,
            "slots_run": r.slots_run, "migrations": r.migrations, "energy_kwh": r.energy_kwh,
            "cost": r.cost, "carbon_kg": r.carbon_kg, "transfer_gb": r.transfer_gb,
            "lost_s": r.lost_s, "reason": reason,
        })
    frame = pd.DataFrame(rows, columns=list(JOB_OUTCOME.names))
    for col in JOB_OUTCOME.names_of("time"):
        frame[col] = pd.to_datetime(frame[col], utc=True)
    return frame


def _job_warnings(jobs: pd.DataFrame) -> list[str]:
    out = []
    unfinished = jobs[(jobs["kind"] == "training") & ~jobs["finished"].astype(bool)]
    if len(unfinished):
        detail = "; ".join(f"{j}: {why}" for j, why in
                           zip(unfinished["job_id"][:5], unfinished["reason"][:5], strict=True))
        more = f" (+{len(unfinished) - 5} more)" if len(unfinished) > 5 else ""
        out.append(f"{len(unfinished)} training job(s) unfinished at the horizon end: "
                   f"{detail}{more}")
    unserved = jobs[(jobs["kind"] == "inference") & (jobs["reason"] != "")]
    if len(unserved):
        detail = "; ".join(f"{j}: {why}" for j, why in
                           zip(unserved["job_id"][:5], unserved["reason"][:5], strict=True))
        out.append(f"{len(unserved)} inference service(s) not fully served: {detail}")
    return out
