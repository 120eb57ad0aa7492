"""Measure a training job's step time on the GPUs at hand, and store it for the predictor.

``workbench compute measure --app APP --gpu GPU --gpus N --local-batch B --steps S --
COMMAND ...`` runs the user's training command (which must run ``S`` optimizer steps of
``B`` samples per GPU on ``N`` GPUs), times it on the wall clock and, where NVML sees a
GPU, samples power alongside (:func:`workbench.measure.profile_command`). The step time
``wall_s / steps`` (start-up included, so use enough steps that it does not matter, or
pass ``--warmup-s``) goes into the store's ``compute_measurements`` table, where

* the predictor uses a 1-GPU measurement of the app on that device as its calibration
  (:func:`calibration_from_store`: compute time scaled by measured / predicted), and
* the fit reads the rows in Pollux's column layout (:func:`measurement_timings`, the input
  of :func:`workbench.fit.fit_throughput_params`) once a device has three or more.

No deep-learning framework is needed by the workbench: the command brings its own.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pandas as pd

from workbench.compute.devices import devices, normalise_device_name


@dataclass(frozen=True)
class StepMeasurement:
    """One timed run: ``steps`` training steps of ``local_batch`` samples on each of
    ``gpus`` GPUs of type ``device`` over ``nodes`` servers took ``step_time_s`` each."""

    app: str
    device: str
    gpus: int
    local_batch: int
    step_time_s: float
    steps: int
    nodes: int = 1
    sync_time_s: float | None = None
    command: str = ""
    measured_utc: datetime | None = None
    profile_id: str | None = None

    def __post_init__(self) -> None:
        if self.gpus < 1 or self.nodes < 1 or self.nodes > self.gpus:
            raise ValueError(f"need 1 <= nodes <= gpus, got gpus={self.gpus} nodes={self.nodes}")
        if self.local_batch < 1 or self.steps < 1:
            raise ValueError("local_batch and steps must be >= 1")
        if not (self.step_time_s > 0 and self.step_time_s < float("inf")):
            raise ValueError(f"step_time_s must be positive, got {self.step_time_s!r}")


def time_command(cmd: Sequence[str], steps: int, warmup_s: float = 0.0,
                 clock: Callable[[], float] = time.perf_counter,
                 run: Callable[..., Any] = subprocess.run) -> tuple[float, int]:
    """Run ``cmd`` and return ``((wall_s - warmup_s) / steps, exit status)``."""
    if steps < 1:
        raise ValueError("steps must be >= 1")
    t0 = clock()
    proc = run(list(cmd), check=False)
    wall = clock() - t0
    busy = wall - warmup_s
    if busy <= 0:
        raise ValueError(f"the command ran {wall:.3f} s, not more than --warmup-s {warmup_s}")
    return busy / steps, int(getattr(proc, "returncode", 0) or 0)


def save_measurement(store: Any, m: StepMeasurement) -> str:
    """Insert ``m`` into ``compute_measurements``; returns its id."""
    mid = uuid.uuid4().hex[:12]
    when = (m.measured_utc or datetime.now(UTC)).astimezone(UTC).replace(tzinfo=None)
    store.save_measurement({
        "measurement_id": mid, "app": m.app,
        "device": normalise_device_name(m.device, devices(store)), "gpus": m.gpus,
        "nodes": m.nodes, "local_batch": m.local_batch, "step_time_s": m.step_time_s,
        "sync_time_s": m.sync_time_s, "steps": m.steps, "measured_utc": when,
        "command": m.command, "profile_id": m.profile_id})
    return mid


def load_measurements(store: Any, app: str | None = None, device: str | None = None
                      ) -> pd.DataFrame:
    """Stored measurements, optionally of one app and/or device (canonical name)."""
    return store.measurements(
        app, None if device is None else normalise_device_name(device, devices(store)))


def measurement_timings(frame: pd.DataFrame) -> pd.DataFrame:
    """Measurements in the column layout of :func:`workbench.fit.read_pollux_timings`
    (``num_nodes, num_replicas, local_bsz, step_time, sync_time``; a missing sync time is
    0 on one GPU)."""
    sync = frame["sync_time_s"].astype(float)
    sync = sync.where(sync.notna(), 0.0)
    return pd.DataFrame({"source": "measured", "num_nodes": frame["nodes"].astype(int),
                         "num_replicas": frame["gpus"].astype(int),
                         "local_bsz": frame["local_batch"].astype(int),
                         "step_time": frame["step_time_s"].astype(float),
                         "sync_time": sync.astype(float)})


def calibration_from_store(store: Any, app: str, device: str, predict_compute_s:
                           Callable[[int], float]) -> tuple[float, int]:
    """Median ``measured / predicted`` compute time over the app's stored 1-GPU
    measurements on ``device``, and how many there were (factor 1.0 when none)."""
    m = load_measurements(store, app, device)
    m = m[m["gpus"] == 1]
    if m.empty:
        return 1.0, 0
    ratios = [float(t) / predict_compute_s(int(b)) for t, b in
              zip(m["step_time_s"], m["local_batch"], strict=True)]
    return float(pd.Series(ratios).median()), len(ratios)


def measure_command(store: Any, app: str, device: str, gpus: int, local_batch: int,
                    steps: int, cmd: Sequence[str], nodes: int = 1, warmup_s: float = 0.0,
                    interval_s: float = 0.1, gpu: Any | None = None,
                    clock: Callable[[], float] = time.perf_counter
                    ) -> tuple[StepMeasurement | None, str | None, int]:
    """Time ``cmd`` (``steps`` training steps) and store the step time.

    Where NVML (or the test's fake ``gpu``) answers, the run is power-profiled too and its
    NVML session stored (``profile_id``); without a GPU it is timed alone. Returns the
    measurement, its id and the command's exit status (nothing is stored on a failure).
    """
    from workbench.measure import NoGpuError, profile_command

    profile = None
    t0 = clock()
    try:
        profile, rc = profile_command(f"measure {app}", list(cmd), interval_s, device=gpu)
        wall = clock() - t0
    except NoGpuError:
        step_s, rc = time_command(cmd, steps, warmup_s, clock=clock)
        wall = step_s * steps + warmup_s
    if rc:
        return None, None, rc
    busy = wall - warmup_s
    if busy <= 0:
        raise ValueError(f"the command ran {wall:.3f} s, not more than --warmup-s {warmup_s}")
    profile_id = None
    if profile is not None:
        profile_id = store.save_gpu_profile(profile.summary, profile.samples)
    m = StepMeasurement(app=app, device=normalise_device_name(device, devices(store)), gpus=gpus,
                        nodes=nodes, local_batch=local_batch, step_time_s=busy / steps,
                        steps=steps, command=" ".join(cmd), profile_id=profile_id)
    return m, save_measurement(store, m), 0
