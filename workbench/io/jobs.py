"""Importers of job traces: Pollux workloads, Philly, Alibaba GPU pods, GAIA.

A trace becomes a *job set*: :class:`~workbench.model.Job` records stored in the ``jobs``
table under the set's name (a name that is not a scenario). ``workbench scenario build``
then takes jobs from a set into a scenario. Each row maps to a training job:

- **arrival**: the trace's time; relative traces (seconds since the trace began) are placed
  after ``start`` (default the Unix epoch: the scenario build realigns them to its horizon);
- **GPU count**: as requested (a fractional Alibaba GPU counts as one whole GPU);
- **application**: the trace's own (Pollux) or ``app`` (one name, or ``mix``: the six
  Pollux applications in turn, row by row);
- **work** (effective samples): Pollux workloads: the application's completion target in
  the Pollux artifact (:data:`POLLUX_WORK_SAMPLES`); the others: ECU at the requested GPU
  count and batch on ``reference_gpu`` x the trace's duration;
- **batch size**: the trace's (Pollux, clipped to the profile's feasible range) or
  ``m0 * max(n // 2, 1)`` clipped, as the built-in scenario does;
- **deadline**: ``arrival + slack x duration`` (for Pollux, the duration at the requested
  configuration); ``slack = 0`` means no deadline;
- **home**: ``homes`` in turn, row by row (``unassigned`` until a scenario maps it);
- **GPU-count menu**: 1, 2, 4, ... up to twice the request, plus the request itself.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from workbench import perf
from workbench.io import _table
from workbench.io.errors import InputError, quoted
from workbench.model import Job, ScenarioError

log = logging.getLogger(__name__)

POLLUX_WORK_SAMPLES: dict[str, float] = {
    # max(progress) x m0 of the smallest-batch validation-<m0>.csv of each application in
    # the Pollux artifact: the statistical progress at which its simulator ends the job
    # (progress counts iterations at batch m0, so x m0 gives effective samples).
    "bert": 14774.0 * 12,
    "cifar10": 39063.0 * 128,
    "deepspeech2": 28536.0 * 20,
    "imagenet": 576526.0 * 200,
    "ncf": 194174.0 * 256,
    "yolov3": 103444.0 * 8,
}

CHECKPOINT_GB: dict[str, float] = {
    # The same illustrative checkpoint sizes as data/seed3.toml.
    "cifar10": 0.2, "imagenet": 0.4, "bert": 4.0, "deepspeech2": 1.2, "yolov3": 0.9,
    "ncf": 0.1,
}

DATASET_GB: dict[str, float] = {
    # The dataset sizes of data/seed3.toml (sources and labels: data/README.md).
    "cifar10": 0.17, "imagenet": 144.0, "bert": 0.5, "deepspeech2": 1.0, "yolov3": 2.8,
    "ncf": 0.2,
}

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
UNASSIGNED = "unassigned"


@dataclass(frozen=True)
class Trace:
    """A job trace normalised before mapping: one row per job.

    ``frame`` columns: ``job_id``, ``arrival_s`` (seconds after the trace origin) or
    ``arrival_utc``, ``duration_s`` (NaN when the trace has none), ``gpus``, ``app`` (None
    when the trace names none), ``batch_size`` (0 when none).
    """

    path: str
    fmt: str
    frame: pd.DataFrame
    skipped: dict[str, int]


_MAX_GPUS = 4096
_MAX_SECONDS = 100 * 365 * 86400.0  # a century: beyond it a time is a unit mistake


def _whole(values: np.ndarray, table: _table.Table, column: str, minimum: int,
           maximum: int = _MAX_GPUS) -> np.ndarray:
    bad = (values != np.round(values)) | (values < minimum) | (values > maximum)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(table.path, f"{values[i]:g} is not a whole number in "
                         f"{minimum}..{maximum}", "correct the row",
                         line=int(table.lines[i]), column=column)
    return values.astype(np.int64)


def _non_negative(values: np.ndarray, table: _table.Table, column: str) -> None:
    """Seconds must lie in [0, a century]."""
    bad = (values < 0) | (values > _MAX_SECONDS)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        what = "negative" if values[i] < 0 else "more than a century of seconds"
        raise InputError(table.path, f"{values[i]:g} is {what}", "correct the row (seconds)",
                         line=int(table.lines[i]), column=column)


def _ids(table: _table.Table, column: str) -> pd.Series:
    ids = table.column(column)
    empty = (ids == "").to_numpy()
    if empty.any():
        i = int(np.flatnonzero(empty)[0])
        raise InputError(table.path, "the job name is empty", "name every job",
                         line=int(table.lines[i]), column=column)
    dup = ids.duplicated().to_numpy()
    if dup.any():
        i = int(np.flatnonzero(dup)[0])
        raise InputError(table.path, f"job name {quoted(ids[i])} appears twice", "rename one",
                         line=int(table.lines[i]), column=column)
    return ids


def read_pollux_workload(path: str | Path) -> Trace:
    """Pollux artifact workload: ``name,time,application,num_replicas,batch_size``."""
    table = _table.read_table(path)
    ids = _ids(table, "name")
    time_s, _ = _table.parse_numbers(table, "time")
    _non_negative(time_s, table, "time")
    gpus = _whole(_table.parse_numbers(table, "num_replicas")[0], table, "num_replicas", 1)
    batch = _whole(_table.parse_numbers(table, "batch_size")[0], table, "batch_size", 1, 10**7)
    apps = table.column("application")
    unknown = ~apps.isin(list(POLLUX_WORK_SAMPLES)).to_numpy()
    if unknown.any():
        i = int(np.flatnonzero(unknown)[0])
        raise InputError(path, f"unknown application {quoted(apps[i])}",
                         f"use one of {sorted(POLLUX_WORK_SAMPLES)}",
                         line=int(table.lines[i]), column="application")
    frame = pd.DataFrame({"job_id": ids, "arrival_s": time_s, "duration_s": np.nan,
                          "gpus": gpus, "app": apps, "batch_size": batch})
    return Trace(str(path), "pollux-workload", frame, {})


def read_philly(path: str | Path, timezone: str = "UTC") -> Trace:
    """Pollux's ``philly.csv``: ``timestamp,duration,num_gpus,gpu_time,cluster``.

    ``timestamp`` is the submission time (naive, in ``timezone``), ``duration`` seconds.
    """
    table = _table.read_table(path)
    when = _table.parse_times(table, "timestamp", timezone)
    dur, _ = _table.parse_numbers(table, "duration")
    _non_negative(dur, table, "duration")
    gpus = _whole(_table.parse_numbers(table, "num_gpus")[0], table, "num_gpus", 1)
    keep = dur > 0
    frame = pd.DataFrame({
        "job_id": [f"philly-{int(n)}" for n in table.lines], "arrival_utc": when,
        "duration_s": dur, "gpus": gpus, "app": None, "batch_size": 0,
    })[keep].reset_index(drop=True)
    return Trace(str(path), "philly", frame, {"zero duration": int((~keep).sum())})


def read_alibaba_pods(path: str | Path) -> Trace:
    """Alibaba GPU-cluster v2023 pod list (``openb_pod_list_*.csv``).

    Arrival is ``creation_time`` (s); duration is ``deletion_time - scheduled_time`` (the
    run time). CPU-only pods (``num_gpu`` 0), pods never scheduled (blank
    ``scheduled_time``) and pods with no run time are skipped and counted. A GPU-sharing pod
    (``gpu_milli`` < 1000) is counted as one whole GPU. ``gpu_spec`` is not mapped: its
    model names (V100M16, G2, ...) are not the scenario's pool types.
    """
    table = _table.read_table(path)
    ids = _ids(table, "name")
    created, _ = _table.parse_numbers(table, "creation_time")
    deleted, _ = _table.parse_numbers(table, "deletion_time")
    sched, ran = _table.parse_numbers(table, "scheduled_time", drop_missing=True)
    for col, vals in (("creation_time", created), ("deletion_time", deleted)):
        _non_negative(vals, table, col)
    gpus = _whole(_table.parse_numbers(table, "num_gpu")[0], table, "num_gpu", 0)
    milli, _ = _table.parse_numbers(table, "gpu_milli")
    if ((milli < 0) | (milli > 1000)).any():
        i = int(np.flatnonzero((milli < 0) | (milli > 1000))[0])
        raise InputError(path, f"gpu_milli {milli[i]:g} is outside 0..1000", "correct the row",
                         line=int(table.lines[i]), column="gpu_milli")
    run = deleted - np.where(ran, sched, np.nan)
    cpu_only = gpus == 0
    pending = ~cpu_only & ~ran
    no_run = ~cpu_only & ran & ~(run > 0)
    keep = ~cpu_only & ~pending & ~no_run
    frame = pd.DataFrame({
        "job_id": ids, "arrival_s": created, "duration_s": run, "gpus": gpus, "app": None,
        "batch_size": 0,
    })[keep].reset_index(drop=True)
    skipped = {"cpu-only": int(cpu_only.sum()), "never scheduled": int(pending.sum()),
               "no run time": int(no_run.sum())}
    return Trace(str(path), "alibaba-pods", frame, skipped)


def read_gaia(path: str | Path) -> Trace:
    """GAIA job file ``arrival_time,length,cpus`` (seconds); ``cpus`` is read as GPUs."""
    table = _table.read_table(path)
    arrival, _ = _table.parse_numbers(table, "arrival_time")
    _non_negative(arrival, table, "arrival_time")
    length, _ = _table.parse_numbers(table, "length")
    _non_negative(length, table, "length")
    gpus = _whole(_table.parse_numbers(table, "cpus")[0], table, "cpus", 1)
    keep = length > 0
    frame = pd.DataFrame({
        "job_id": [f"gaia-{int(n)}" for n in table.lines], "arrival_s": arrival,
        "duration_s": length, "gpus": gpus, "app": None, "batch_size": 0,
    })[keep].reset_index(drop=True)
    return Trace(str(path), "gaia", frame, {"zero length": int((~keep).sum())})


JOB_FORMATS = {
    "pollux-workload": read_pollux_workload,
    "philly": read_philly,
    "alibaba-pods": read_alibaba_pods,
    "gaia": read_gaia,
}
"""Job trace formats by name (the ``FORMAT`` of ``workbench import jobs``)."""


def _menu(n: int) -> tuple[int, ...]:
    return tuple(sorted({c for c in (1, 2, 4, 8, 16, 32, 64, 128) if c <= max(2 * n, 2)} | {n}))


def jobs_from_trace(
    trace: Trace,
    profiles: Sequence[perf.JobProfile],
    start: datetime = EPOCH,
    app: str = "mix",
    homes: Sequence[str] = (UNASSIGNED,),
    reference_gpu: str = "A100",
    slack: float = 2.0,
    gpus_per_node: int = 8,
) -> list[Job]:
    """Map a trace to training jobs (the rules are in the module docstring)."""
    path = trace.path
    by_app = {p.app: p for p in profiles if p.gpu_type == reference_gpu}
    if not by_app:
        known = sorted({p.gpu_type for p in profiles})
        raise InputError(path, f"no profiles on reference GPU {reference_gpu!r}",
                         f"pass --reference-gpu with one of {known}")
    apps = sorted(by_app)
    if app != "mix" and app not in by_app:
        raise InputError(path, f"no profile for application {app!r} on {reference_gpu}",
                         f"pass --app with one of {apps} or 'mix'")
    if slack < 0 or not np.isfinite(slack):
        raise InputError(path, f"slack {slack} is not a number >= 0",
                         "pass --slack >= 0 (0: no deadline)")
    if not homes:
        raise InputError(path, "no home datacenters", "pass --homes a,b,c")
    f = trace.frame
    jobs: list[Job] = []
    # Per-row work is the Job itself: whatever depends only on (application, GPUs, batch)
    # is computed once per distinct triple, and the columns are read as Python lists (a
    # trace of 82 k Philly jobs spent most of its mapping in per-row pandas and numpy calls).
    plans: dict[tuple[str, int, int], tuple[int, float]] = {}
    menus: dict[int, tuple[int, ...]] = {}
    if "arrival_utc" in f:
        arrivals = list(pd.DatetimeIndex(f["arrival_utc"]).tz_localize("UTC").to_pydatetime())
    else:
        arrivals = [start + timedelta(seconds=float(s)) for s in f["arrival_s"].tolist()]
    columns = zip(f["job_id"].tolist(), f["app"].tolist(), f["gpus"].tolist(),
                  f["batch_size"].tolist(), f["duration_s"].astype(float).tolist(), arrivals,
                  strict=True)
    for i, (job_id, row_app, gpus, batch_size, duration_s, arrival) in enumerate(columns):
        name = row_app if row_app is not None else (app if app != "mix" else apps[i % len(apps)])
        if name not in by_app:
            raise InputError(path, f"no profile for application {name!r} on {reference_gpu}",
                             "fit one (workbench import profiles pollux DIR)")
        n = int(gpus)
        key = (name, n, int(batch_size))
        if key not in plans:
            prof = by_app[name]
            lo, hi = perf.batch_bounds(prof, n)
            wanted = int(batch_size) or prof.efficiency.m0 * max(n // 2, 1)
            batch = max(lo, min(int(wanted), hi))
            plans[key] = (batch, float(perf.ecu(prof, n, batch, 0.0,
                                                gpus_per_node=gpus_per_node)))
        batch, rate = plans[key]
        if n not in menus:
            menus[n] = _menu(n)
        if duration_s != duration_s:  # NaN: the trace has no duration
            work = POLLUX_WORK_SAMPLES[name]
            duration = work / rate
        else:
            duration = duration_s
            work = rate * duration
        deadline = arrival + timedelta(seconds=slack * duration) if slack > 0 else None
        try:
            jobs.append(Job(
                job_id=str(job_id), kind="training", app=name, arrival=arrival,
                home=homes[i % len(homes)], requested_gpus=n, gpu_counts=menus[n],
                batch_size=batch, work_samples=work, deadline=deadline,
                checkpoint_gb=CHECKPOINT_GB.get(name, 1.0),
                dataset_gb=DATASET_GB.get(name, 0.0),
            ))
        except ScenarioError as exc:
            raise InputError(path, str(exc), "check the row", column=str(job_id)) from None
    return jobs


@dataclass(frozen=True)
class JobImport:
    """What one job import wrote."""

    path: str
    fmt: str
    job_set: str
    jobs: int
    skipped: dict[str, int]
    first_arrival: datetime | None
    last_arrival: datetime | None
    gpus_min: int
    gpus_max: int
    apps: dict[str, int]


def job_sets(store: Any) -> dict[str, int]:
    """Job sets in the store (names in ``jobs`` that are not scenarios) and their sizes."""
    return dict(store.job_set_sizes())


def load_job_set(store: Any, name: str) -> list[Job]:
    """The jobs of one stored job set, by arrival."""
    return list(store.load_jobs(name))


def read_jobs(fmt: str, path: str | Path, *, timezone: str = "UTC",
              limit: int | None = None) -> Trace:
    """Read and check a job trace without a store (the first ``limit`` jobs by arrival).

    :func:`import_jobs` calls it; the CLI calls it first so that the store's lock is held
    only while the jobs are written.
    """
    if fmt not in JOB_FORMATS:
        raise InputError(path, f"unknown job format {fmt!r}",
                         f"use one of {', '.join(JOB_FORMATS)}")
    trace = read_philly(path, timezone) if fmt == "philly" else JOB_FORMATS[fmt](path)
    frame = trace.frame
    if limit is not None:
        if limit <= 0:
            raise InputError(path, f"--limit {limit} is not positive", "pass --limit >= 1")
        order = "arrival_utc" if "arrival_utc" in frame else "arrival_s"
        frame = frame.sort_values([order, "job_id"], kind="stable").head(limit)
        trace = Trace(trace.path, trace.fmt, frame.reset_index(drop=True), trace.skipped)
    if trace.frame.empty:
        raise InputError(path, "no jobs left after skipping rows "
                         f"({trace.skipped})", "check the file")
    return trace


def refuse_changed_jobs(store: Any, into: str, jobs: Sequence[Job], path: str | Path,
                        replace: bool) -> None:
    """Raise :class:`InputError` when job set ``into`` already holds a job of one of
    ``jobs``' names with other fields and ``replace`` is not set: a file added to a set
    never replaces a stored job unasked (the same file imported again changes nothing and
    passes)."""
    if replace or not store.job_ids(into) & {j.job_id for j in jobs}:
        return
    held = {j.job_id: j for j in store.load_jobs(into)}
    again = [j.job_id for j in jobs if j.job_id in held and held[j.job_id] != j]
    if again:
        more = f" and {len(again) - 1} more" if len(again) > 1 else ""
        raise InputError(path, f"job set {into!r} already holds job {quoted(again[0])}{more}",
                         "pass --replace to replace the set, or --into another name")


def import_jobs(
    store: Any,
    fmt: str,
    path: str | Path,
    into: str,
    *,
    start: datetime | str | None = None,
    app: str = "mix",
    homes: Sequence[str] = (UNASSIGNED,),
    reference_gpu: str = "A100",
    slack: float = 2.0,
    limit: int | None = None,
    replace: bool = False,
    timezone: str = "UTC",
    profiles: Sequence[perf.JobProfile] | None = None,
    trace: Trace | None = None,
) -> JobImport:
    """Read a job trace, map it to jobs and upsert them into job set ``into`` in one
    transaction (``replace`` first empties the set). Profiles default to the store's and
    the shipped ones for what the store lacks (:func:`workbench.perf.with_shipped`).
    ``trace`` is one :func:`read_jobs` already read (``fmt``, ``timezone`` and ``limit`` are
    then not used)."""
    if not into:
        raise InputError(path, "no job set name", "pass --into NAME")
    if trace is None:
        trace = read_jobs(fmt, path, timezone=timezone, limit=limit)
    if store.has_scenario(into):
        raise InputError(path, f"{into!r} is a scenario in the store; a job set needs a name "
                         "of its own", f"pass --into with another name (e.g. {into}-jobs)")
    origin = EPOCH if start is None else _table.times_from_strings(
        pd.Series([str(start)]), None, str(path), "--start", "UTC")[0].tz_localize(
        "UTC").to_pydatetime()
    if profiles is None:
        profiles = perf.with_shipped(list(store.load_profiles()))
    jobs = jobs_from_trace(trace, profiles, origin, app, homes, reference_gpu, slack)
    refuse_changed_jobs(store, into, jobs, path, replace)
    store.write_jobs(into, jobs, replace=replace)
    for why, count in trace.skipped.items():
        if count:
            log.info("%s: skipped %d row(s): %s", path, count, why)
    arrivals = [j.arrival for j in jobs]
    counts = pd.Series([j.app for j in jobs]).value_counts().sort_index()
    return JobImport(
        path=str(path), fmt=fmt, job_set=into, jobs=len(jobs), skipped=dict(trace.skipped),
        first_arrival=min(arrivals), last_arrival=max(arrivals),
        gpus_min=min(j.requested_gpus for j in jobs),
        gpus_max=max(j.requested_gpus for j in jobs),
        apps={str(k): int(v) for k, v in counts.items()},
    )
