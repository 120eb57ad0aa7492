"""Sample GPU power, energy, utilisation, memory and SM clock through NVML.

The sampling loop talks to a :class:`GpuDevice` protocol, so tests drive it with a fake
device; :class:`NvmlBackend` (nvidia-ml-py's ``pynvml``) is the real, default one.

Energy per GPU is the difference of NVML's total-energy counter (mJ, Volta and newer)
between the first and the last sample; where the counter is unavailable it is the
trapezoidal integral of power over time. Power is in W (NVML reports mW), positive drawn.
"""

from __future__ import annotations

import logging
import math
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import numpy as np
import pandas as pd

from workbench.units import KILO

log = logging.getLogger(__name__)

SAMPLE_COLUMNS = ("t_s", "gpu_index", "power_w", "energy_j", "util_pct", "mem_used_mb",
                  "sm_clock_mhz")
"""Columns of the samples frame, in the store's order."""


class NoGpuError(RuntimeError):
    """No NVIDIA GPU or driver could be used (NVML missing, failed to start, or 0 GPUs)."""


@dataclass(frozen=True)
class GpuSample:
    """One reading of one GPU.

    ``power_w`` is board power draw (W); ``energy_j`` the cumulative energy counter since
    the driver loaded (J) or NaN where the GPU has none; ``util_pct`` GPU utilisation (%);
    ``mem_used_mb`` used device memory (MiB); ``sm_clock_mhz`` the SM clock (MHz).
    """

    power_w: float
    energy_j: float
    util_pct: float
    mem_used_mb: float
    sm_clock_mhz: float


class GpuDevice(Protocol):
    """What the sampling loop needs from a GPU driver."""

    def device_count(self) -> int:
        """Number of visible GPUs."""
        ...

    def read(self, index: int) -> GpuSample:
        """One reading of GPU ``index``."""
        ...

    def close(self) -> None:
        """Release the driver."""
        ...


class NvmlBackend:
    """:class:`GpuDevice` on nvidia-ml-py (``pynvml``).

    Raises :class:`NoGpuError` when the library, the driver or a GPU is missing.
    """

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError as exc:  # pragma: no cover - a declared dependency
            raise NoGpuError(f"nvidia-ml-py is not installed ({exc})") from exc
        self._nv: Any = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NoGpuError(str(exc)) from exc
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            self.close()
            raise NoGpuError(str(exc)) from exc
        if count == 0:
            self.close()
            raise NoGpuError("NVML reports 0 GPUs")
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]

    def device_count(self) -> int:
        return len(self._handles)

    def name(self, index: int) -> str:
        """Product name of GPU ``index``."""
        n = self._nv.nvmlDeviceGetName(self._handles[index])
        return n.decode() if isinstance(n, bytes) else str(n)

    def read(self, index: int) -> GpuSample:
        nv, h = self._nv, self._handles[index]

        def opt(f: Callable[[], float]) -> float:
            try:
                return float(f())
            except nv.NVMLError:  # a field this GPU does not support
                return float("nan")

        return GpuSample(
            power_w=opt(lambda: nv.nvmlDeviceGetPowerUsage(h) / KILO),
            energy_j=opt(lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h) / KILO),
            util_pct=opt(lambda: nv.nvmlDeviceGetUtilizationRates(h).gpu),
            mem_used_mb=opt(lambda: nv.nvmlDeviceGetMemoryInfo(h).used / 2**20),
            sm_clock_mhz=opt(lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
        )

    def close(self) -> None:
        try:
            self._nv.nvmlShutdown()
        except self._nv.NVMLError:
            log.debug("nvmlShutdown failed", exc_info=True)


def sample_loop(
    device: GpuDevice,
    interval_s: float,
    should_stop: Callable[[], bool],
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], None] | None = None,
    max_samples: int | None = None,
) -> pd.DataFrame:
    """Read every GPU each ``interval_s`` seconds until ``should_stop()`` is true.

    ``clock`` (s) and ``sleep`` default to :func:`time.monotonic` and :func:`time.sleep`.

    One round is always taken before stopping and one after, so the energy counter spans
    the whole run. Returns a frame with :data:`SAMPLE_COLUMNS` (``t_s`` from the first
    round).
    """
    if not (math.isfinite(interval_s) and interval_s > 0):
        raise ValueError(f"interval_s must be a positive finite number, got {interval_s}")
    clock = clock or time.monotonic
    sleep = sleep or time.sleep
    n = device.device_count()
    rows: list[tuple[float, ...]] = []
    t0 = clock()
    next_t = t0
    rounds = 0
    stopping = False
    while True:
        now = clock()
        for i in range(n):
            s = device.read(i)
            rows.append((now - t0, i, s.power_w, s.energy_j, s.util_pct, s.mem_used_mb,
                         s.sm_clock_mhz))
        rounds += 1
        if stopping:
            break
        if should_stop() or (max_samples is not None and rounds >= max_samples):
            if rounds >= 2:
                break
            stopping = True  # a single round spans no time: take one more
        next_t += interval_s
        sleep(max(0.0, next_t - clock()))
    frame = pd.DataFrame(rows, columns=list(SAMPLE_COLUMNS))
    return frame.astype({"gpu_index": int})


@dataclass(frozen=True)
class ProfileResult:
    """Samples and the summary of one profiling session (the store's two tables)."""

    summary: dict[str, Any]
    samples: pd.DataFrame


def _gpu_energy_j(g: pd.DataFrame) -> float:
    e = g["energy_j"].to_numpy(float)
    if np.isfinite(e[0]) and np.isfinite(e[-1]) and e[-1] >= e[0] and len(e) > 1:
        return float(e[-1] - e[0])
    t = g["t_s"].to_numpy(float)
    p = np.nan_to_num(g["power_w"].to_numpy(float))
    return float(np.sum((p[1:] + p[:-1]) / 2.0 * np.diff(t)))


def summarise(
    name: str, samples: pd.DataFrame, started_utc: datetime, command: str
) -> dict[str, Any]:
    """Summary row: ``duration_s`` (first to last round), ``energy_j`` summed over GPUs,
    ``mean_power_w = energy_j / duration_s`` (all GPUs together), ``n_gpus``."""
    duration = float(samples["t_s"].max() - samples["t_s"].min()) if len(samples) else 0.0
    energy = float(sum(_gpu_energy_j(g) for _, g in samples.groupby("gpu_index")))
    if duration > 0:
        mean_power = energy / duration
    else:
        mean_power = float(samples.groupby("t_s")["power_w"].sum().mean()) if len(samples) else 0.0
    return {
        "name": name,
        "started_utc": started_utc,
        "duration_s": duration,
        "mean_power_w": mean_power,
        "energy_j": energy,
        "n_gpus": int(samples["gpu_index"].nunique()) if len(samples) else 0,
        "command": command,
    }


def profile_for(
    name: str,
    duration_s: float,
    interval_s: float = 0.1,
    device: GpuDevice | None = None,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], None] | None = None,
) -> ProfileResult:
    """Sample every GPU for ``duration_s`` seconds (an idle or externally loaded GPU).

    ``clock`` and ``sleep`` default to :func:`time.monotonic` and :func:`time.sleep`.
    """
    clock = clock or time.monotonic
    dev = device if device is not None else NvmlBackend()
    started = datetime.now(UTC)
    if not (math.isfinite(duration_s) and duration_s > 0):
        raise ValueError(f"duration_s must be a positive finite number, got {duration_s}")
    t_end = clock() + duration_s
    try:
        samples = sample_loop(dev, interval_s, lambda: clock() >= t_end, clock, sleep)
    finally:
        dev.close()
    return ProfileResult(summarise(name, samples, started, ""), samples)


def profile_command(
    name: str,
    command: Sequence[str],
    interval_s: float = 0.1,
    device: GpuDevice | None = None,
) -> tuple[ProfileResult, int]:
    """Run ``command`` and sample every GPU until it exits; returns the result and its
    exit status. The device is opened first, so a missing GPU fails before the command
    starts."""
    if not command:
        raise ValueError("profile_command needs a command to run")
    dev = device if device is not None else NvmlBackend()
    started = datetime.now(UTC)
    try:
        proc = subprocess.Popen(list(command))
        samples = sample_loop(dev, interval_s, lambda: proc.poll() is not None)
        rc = proc.wait()
    finally:
        dev.close()
    return ProfileResult(summarise(name, samples, started, " ".join(command)), samples), rc
