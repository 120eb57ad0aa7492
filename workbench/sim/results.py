"""What a run produces: the per-slot record handed to recorders, the run's result, and the
per-job outcomes and warnings built from the simulator's bookkeeping."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from workbench.caps import Caps, kg_text
from workbench.chunks import ColumnChunks, QueueTrace
from workbench.meter import check_import_caps, idle_kw, job_power_caps_kw
from workbench.model import Job, Scenario
from workbench.outcome import service_power_w
from workbench.policies.base import Policy
from workbench.schema import JOB_OUTCOME, PLAN_ROW, PLAN_STORED_COLUMNS
from workbench.units import W_PER_KW

if TYPE_CHECKING:
    from workbench.events import GridEvent
    from workbench.sim.truth import JobRun, PowerTrim

log = logging.getLogger(__name__)

RUN_WARNING: dict[str, bool] = {"run_warning": True}
"""``extra`` of the log records that repeat a run's warnings (:attr:`RunResult.warnings`):
a face that shows those warnings itself (the CLI) leaves these records out of its log."""


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



def plan_frame(chunks: ColumnChunks, sc: Scenario) -> pd.DataFrame:
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


def _hours(a: datetime, b: datetime) -> float:
    return (b - a).total_seconds() / 3600.0


def job_outcomes(runs: Iterable[JobRun], sc: Scenario, policy_name: str) -> pd.DataFrame:
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


def job_warnings(jobs: pd.DataFrame) -> list[str]:
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


def run_caps(policy: Policy, caps: Caps | None) -> Caps:
    """The caps a run is metered against: ``caps``, else the policy's own (its ``caps``
    attribute, as the capped policies keep it), else none."""
    if caps is not None:
        return caps
    own = getattr(policy, "caps", None)
    return own if isinstance(own, Caps) else Caps()


def service_floors_kw(sc: Scenario) -> list[tuple[Job, int, int, dict[str, float]]]:
    """Per inference service: its first and end slot and, per datacenter it may run in
    (within its latency bound, on a pool that holds it), the least facility power it draws
    there, kW: ``n * (P_idle + load (P_max - P_idle)) * PUE / 1000`` on its best pool."""
    out = []
    for job in sc.jobs_of_kind("inference"):
        assert job.end is not None
        a = max(sc.slot_of(job.arrival, after=True), 0)
        b = min(max(sc.slot_of(job.end, after=True), 0), sc.n_slots)
        limit = job.max_latency_ms if job.max_latency_ms is not None else math.inf
        where: dict[str, float] = {}
        for dc in sc.datacenters:
            if sc.latency_ms(job.home, dc.name) > limit:
                continue
            for pool in sc.pools_at(dc.name):
                if job.allows(pool.gpu_type) and job.requested_gpus <= pool.count:
                    kw = service_power_w(job, pool) * dc.pue / W_PER_KW
                    where[dc.name] = min(where.get(dc.name, math.inf), kw)
        if b > a and where:
            out.append((job, a, b, where))
    return out


def site_floors_kw(sc: Scenario) -> dict[str, NDArray[np.float64]]:
    """Per datacenter and slot, what the site draws at its meter whatever runs (kW): its
    idle load plus the least the inference services up that may run only there draw."""
    out = dict(zip([d.name for d in sc.datacenters],
                   (np.full(sc.n_slots, kw) for kw in idle_kw(sc).tolist()), strict=True))
    for _job, a, b, where in service_floors_kw(sc):
        if len(where) == 1:
            (d, kw), = where.items()
            out[d][a:b] += kw
    return out


def check_scenario_events(sc: Scenario, events: Sequence[GridEvent],
                          policy: str | None = None) -> tuple[GridEvent, ...]:
    """:func:`workbench.events.check_events` with the site's floors
    (:func:`site_floors_kw`) and its batteries' reach (power, and the energy each can hold
    by the event's start, :meth:`~workbench.supply.Battery.deliverable_kw`), counted for a
    ``policy`` that plans the batteries
    (:func:`workbench.policies.plans_batteries`; None: any policy, as when a scenario is
    built)."""
    from workbench.events import check_events
    from workbench.policies import plans_batteries

    if policy is None or plans_batteries(policy):
        # One battery per site (the supply's check).
        storage = {b.datacenter: b.deliverable_kw for b in sc.supply.batteries}
        return check_events(sc, events, site_floors_kw(sc), storage)
    try:
        return check_events(sc, events, site_floors_kw(sc))
    except ValueError as exc:
        if not sc.supply.batteries:
            raise
        raise ValueError(f"{exc} ({policy} does not plan the batteries: only lookahead, "
                         "lookahead-groups and offline keep an event below that with "
                         "one)") from None


def check_power_caps(sc: Scenario, caps: Caps, policy: str | None = None) -> None:
    """Refuse grid import caps below a site's idle load plus what the inference services
    alone draw (they run every slot they are up), with the numbers: raise ValueError when
    a cap is below the idle load (:func:`workbench.meter.check_import_caps`), a service
    fits under no cap where it may run, or in a slot where the services up draw more than
    the caps of the datacenters they may use (each at its least draw), or more than one
    datacenter's cap where they can run nowhere else (each cap less its site's idle
    load). Grid events are checked for ``policy`` (:func:`check_scenario_events`)."""
    if caps.has_events:
        check_scenario_events(sc, caps.events, policy)
    if not caps.has_power:
        return
    check_import_caps(sc, caps)
    names = [d.name for d in sc.datacenters]
    # The caps are on grid import: what the jobs may draw is the cap less the idle load.
    cap = dict(zip(names, job_power_caps_kw(sc, caps).tolist(), strict=True))
    idle = dict(zip(names, idle_kw(sc).tolist(), strict=True))
    floors = service_floors_kw(sc)
    fix = "raise the power cap or move the services"
    for job, _a, _b, where in floors:
        if all(kw > cap[d] * (1 + 1e-9) for d, kw in where.items()):
            detail = ", ".join(f"{d} {kw:.2f} kW against the {cap[d]:.2f} kW its cap leaves "
                               f"above its idle load of {idle[d]:.2f} kW"
                               for d, kw in where.items())
            raise ValueError(f"power cap below what inference alone draws: service "
                             f"{job.job_id} draws at least {min(where.values()):.2f} kW "
                             f"wherever it may run ({detail}); {fix}")
    for t in sorted({a for _, a, _, _ in floors}):
        up = [(job, where) for job, a, b, where in floors if a <= t < b]
        allowed = {d for _, where in up for d in where}
        need = sum(min(where.values()) for _, where in up)
        room = sum(cap[d] for d in allowed)
        if need > room * (1 + 1e-9):
            raise ValueError(
                f"power cap below what inference alone draws: from slot {t} the "
                f"{len(up)} inference services up draw at least {need:.2f} kW together, "
                f"more than the {room:.2f} kW the caps of {', '.join(sorted(allowed))} "
                f"leave above their idle loads; {fix}")
        for d in allowed:
            only = [(job, where[d]) for job, where in up if set(where) == {d}]
            kw = sum(k for _, k in only)
            if kw > cap[d] * (1 + 1e-9):
                raise ValueError(
                    f"power cap below what inference alone draws: from slot {t} the "
                    f"services that may run only in {d} "
                    f"({', '.join(j.job_id for j, _ in only)}) draw {kw:.2f} kW against "
                    f"the {cap[d]:.2f} kW its cap leaves above its idle load of "
                    f"{idle[d]:.2f} kW; {fix}")


def cap_warnings_before(sc: Scenario, caps: Caps) -> list[str]:
    """A carbon cap below what the inference services alone must emit cannot be met."""
    from workbench.metrics import inference_carbon_floor_kg

    total = caps.carbon_total_kg()
    if total is None:
        return []
    floor = inference_carbon_floor_kg(sc)
    if total >= floor:
        return []
    msg = (f"carbon cap {total:.1f} kg is below the {floor:.1f} kg that the inference "
           "services alone emit at least; the run will end above the cap")
    log.warning(msg, extra=RUN_WARNING)
    return [msg]


def trim_warnings(trims: Sequence[PowerTrim]) -> list[str]:
    """The power-cap trims of a run in one warning (none without any)."""
    if not trims:
        return []
    first = trims[0]
    slots = len({(x.t, x.datacenter) for x in trims})
    return [f"power cap kept by pausing {len(trims)} job-slot(s) in {slots} "
            f"datacenter-slot(s) where the allocation's true draw would have exceeded the "
            f"cap (the policy predicted less power than the truth drew); the first: slot "
            f"{first.t}, {first.datacenter} would have drawn {first.drawn_kw:.2f} kW against "
            f"{first.cap_kw:g} kW, {first.job_id} paused"]


def cap_warnings_after(metrics: Mapping[str, Any]) -> list[str]:
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
        out.append(f"carbon cap missed: {kg_text(metrics['carbon_kg'])} kg emitted against a "
                   f"cap of {kg_text(cap)} kg ({kg_text(over)} kg, {100 * over / cap:.1f}% "
                   "over)")
    for msg in out:
        log.warning(msg, extra=RUN_WARNING)
    return out
