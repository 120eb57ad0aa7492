"""The one interface every policy implements, and the records it reads and returns.

A policy sees a :class:`SlotState` (the scenario, the slot, the active jobs with their
remaining work, current placement and online estimates) and a :class:`Forecast` of price and
carbon, and returns an :class:`Allocation`: for each job that runs in the slot, where and how.
A job absent from the allocation is paused (or waits). The simulator never asks which policy
it is talking to.

:func:`slot_options` enumerates, for every active job, every feasible (datacenter, GPU type,
GPU count) with its best batch size and the slot's predicted progress, energy, cost and
carbon: the raw material of the Lyapunov MILP, the offline optimum and the baselines.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from workbench import perf
from workbench.model import GpuPool, Job, Scenario

RESTART_S_DEFAULT = 120.0
"""Seconds to restore a checkpoint and warm up after a start, resume or migration."""


@dataclass(frozen=True)
class Placement:
    """Where and how a job runs in one slot."""

    datacenter: str
    gpu_type: str
    n_gpus: int
    batch_size: int


@dataclass(frozen=True)
class JobState:
    """What a policy knows about one active job at the start of a slot.

    Attributes
    ----------
    remaining : float
        Training: fraction of total work still to do, in (0, 1]. Inference: 1.
    placement : Placement or None
        Where the job ran in the previous slot (None if it did not run).
    last_datacenter : str or None
        Where its latest checkpoint lives (None before its first slot).
    phi : float
        Online estimate of the gradient noise scale.
    throughput_scale : float
        Online estimate of true / modelled throughput (1 = the model is right).
    slots_run : int
        Slots in which the job has run so far.
    """

    job: Job
    remaining: float
    placement: Placement | None
    last_datacenter: str | None
    phi: float
    throughput_scale: float = 1.0
    slots_run: int = 0

    @property
    def progress(self) -> float:
        return 1.0 - self.remaining


@dataclass(frozen=True)
class SlotState:
    """The simulator's view of slot ``t`` handed to a policy."""

    scenario: Scenario
    t: int
    time: datetime
    jobs: tuple[JobState, ...]
    carbon_kg_so_far: float = 0.0
    cost_so_far: float = 0.0
    carbon_kg_by_dc_so_far: Mapping[str, float] = field(default_factory=dict)
    """Metered carbon per datacenter since the start, kg (empty when not metered)."""


@dataclass(frozen=True)
class Forecast:
    """Price and carbon from slot ``t`` on, as the policy believes them.

    ``price_per_kwh`` and ``carbon_g_per_kwh`` have shape ``(slots, regions)``; row 0 is the
    current slot (always the true value: it is being metered now), later rows are forecasts.
    """

    t: int
    regions: tuple[str, ...]
    price_per_kwh: NDArray[np.float64]
    carbon_g_per_kwh: NDArray[np.float64]
    mode: str = "perfect"

    def region_index(self, region: str) -> int:
        return self.regions.index(region)


@dataclass(frozen=True)
class SolveInfo:
    """How a policy's optimisation went in one slot (None for policies that solve nothing)."""

    status: str
    solve_s: float
    objective: float | None = None
    gap: float | None = None
    fallback: bool = False
    message: str = ""


@dataclass(frozen=True)
class Allocation:
    """A policy's decision for one slot.

    ``placements`` maps job id to where it runs; jobs not in it pause or wait.
    ``expected_gain`` holds, for jobs whose datacenter changes, the gain that justified the
    move (NetCoef units of the policy), and ``reasons`` a short text per job for the plan.
    ``queues`` exposes the policy's internal queues (e.g. ``Z:guangzhou``) for recording.
    """

    placements: Mapping[str, Placement]
    solve: SolveInfo | None = None
    expected_gain: Mapping[str, float] = field(default_factory=dict)
    reasons: Mapping[str, str] = field(default_factory=dict)
    queues: Mapping[str, float] = field(default_factory=dict)


class Policy(Protocol):
    """A scheduling policy: one decision per slot."""

    name: str

    def reset(self, scenario: Scenario) -> None:
        """Forget everything; called once before the first slot of a run."""

    def decide(self, state: SlotState, forecast: Forecast) -> Allocation:
        """Choose where and how each active job runs in slot ``state.t``."""
        ...


@dataclass(frozen=True)
class SlotOptions:
    """Every feasible (job, datacenter, GPU type, GPU count) for one slot, as flat arrays.

    Row ``i`` is one option of job ``job_index[i]`` (an index into ``jobs``). Per slot:
    ``progress`` is the fraction of the job's total work done (capped at what remains,
    after migration and restart time are lost), ``energy_kwh`` includes PUE and transfer
    energy, ``cost`` is in the scenario's currency and ``carbon_kg`` in kg.
    """

    jobs: tuple[JobState, ...]
    job_index: NDArray[np.int64]
    datacenter: NDArray[np.str_]
    gpu_type: NDArray[np.str_]
    n_gpus: NDArray[np.int64]
    batch_size: NDArray[np.int64]
    progress: NDArray[np.float64]
    energy_kwh: NDArray[np.float64]
    cost: NDArray[np.float64]
    carbon_kg: NDArray[np.float64]
    moves: NDArray[np.bool_]
    transfer_s: NDArray[np.float64]

    def __len__(self) -> int:
        return int(self.job_index.size)

    def placement(self, i: int) -> Placement:
        return Placement(
            str(self.datacenter[i]),
            str(self.gpu_type[i]),
            int(self.n_gpus[i]),
            int(self.batch_size[i]),
        )

    def rows_of(self, job_id: str) -> NDArray[np.int64]:
        k = next(i for i, js in enumerate(self.jobs) if js.job.job_id == job_id)
        return np.flatnonzero(self.job_index == k)


def check_caps(value: float | Mapping[str, float] | None, what: str, unit: str) -> None:
    """Raise ``ValueError`` unless a cap (one number, or one per datacenter) is positive."""
    caps = list(value.values()) if isinstance(value, Mapping) else (
        [] if value is None else [value])
    for c in caps:
        if not (isinstance(c, int | float) and math.isfinite(c) and c > 0):
            raise ValueError(f"{what} must be positive {unit} (one number, or one per "
                             f"datacenter), got {value!r}")


def inference_power_w(job: Job, pool: GpuPool, n_gpus: int | None = None) -> float:
    """Board power of inference service ``job`` on ``pool``, W (before PUE).

    ``n`` GPUs (default: its requested count) at ``load_fraction`` between idle and maximum
    board power: ``n * (P_idle + load_fraction * (P_max - P_idle))``.
    """
    n = job.requested_gpus if n_gpus is None else n_gpus
    return n * (
        pool.idle_power_w + job.load_fraction * (pool.max_power_w - pool.idle_power_w))


_BATCH_GRID = 24


def _batch_grid(profile: perf.JobProfile, n: int) -> NDArray[np.float64]:
    lo, hi = perf.batch_bounds(profile, n)
    return np.unique(np.round(np.geomspace(lo, hi, _BATCH_GRID)))


@lru_cache(maxsize=8192)
def _grid_curves(
    profile: perf.JobProfile, n: int, gpus_per_node: int
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Batch grid, hardware throughput ``X(n, m)`` and power ``P(n, m)`` on it.

    Neither depends on the gradient noise scale, so they are memoised per (profile, n,
    gpus_per_node); only the statistical efficiency is evaluated per call. Pure function
    of frozen inputs: the memo cannot go stale.
    """
    grid = _batch_grid(profile, n)
    x = perf.throughput(profile.throughput, n, grid, gpus_per_node)
    p_w = perf.power_w(profile, n, grid, gpus_per_node)
    for arr in (grid, x, p_w):
        arr.setflags(write=False)
    return grid, x, p_w


def slot_options(
    state: SlotState,
    price_per_kwh: Mapping[str, float],
    carbon_g_per_kwh: Mapping[str, float],
    gpu_counts: Mapping[str, tuple[int, ...]] | None = None,
    restart_s: float = RESTART_S_DEFAULT,
) -> SlotOptions:
    """Enumerate every feasible option of every active job for one slot.

    Parameters
    ----------
    price_per_kwh, carbon_g_per_kwh : mapping region -> value
        The slot's price and carbon intensity (true or forecast) per grid region.
    gpu_counts : mapping job id -> GPU counts, optional
        Override a job's GPU-count menu (the operator's configuration menus).
    restart_s : float
        Seconds lost on any start, resume or migration.

    Notes
    -----
    Training option, for ``n`` GPUs of type ``g`` in datacenter ``d`` with slot length
    ``D`` s: batch ``m*`` maximises ECU on a geometric grid; ``lost = restart_s`` if the job
    did not run last slot in the same place, plus ``8 * checkpoint_gb / bandwidth_gbps`` if
    its checkpoint lives elsewhere; ``progress = min(ECU * s_j * (D - lost) / W_j, remaining)``
    where ``s_j`` is the online throughput scale; ``energy = P(n, m*) * D / 3.6e6 * PUE_d``
    (kWh) plus ``checkpoint_gb * transfer_energy_kwh_per_gb`` on a move.
    Inference option: its requested GPU count at ``load_fraction`` between idle and max
    board power, only in datacenters within ``max_latency_ms`` of its home.
    """
    sc = state.scenario
    slot_s = float(sc.slot_s)
    cols: dict[str, list[object]] = {k: [] for k in (
        "job_index", "datacenter", "gpu_type", "n_gpus", "batch_size", "progress",
        "energy_kwh", "cost", "carbon_kg", "moves", "transfer_s")}
    for k, js in enumerate(state.jobs):
        job = js.job
        menu = tuple(gpu_counts.get(job.job_id, job.gpu_counts)) if gpu_counts else job.gpu_counts
        for dc in sc.datacenters:
            if not job.is_training and sc.latency_ms(job.home, dc.name) > (
                job.max_latency_ms if job.max_latency_ms is not None else np.inf
            ):
                continue
            moves = js.last_datacenter is not None and js.last_datacenter != dc.name
            transfer_s = 0.0
            transfer_kwh = 0.0
            if moves and js.last_datacenter is not None:
                link = sc.link(js.last_datacenter, dc.name)
                if link is None:
                    continue
                transfer_s = link.transfer_s(job.checkpoint_gb)
                transfer_kwh = job.checkpoint_gb * link.transfer_energy_kwh_per_gb
            price = float(price_per_kwh[dc.region])
            carbon = float(carbon_g_per_kwh[dc.region])
            same_place = js.placement is not None and js.placement.datacenter == dc.name
            for pool in sc.pools_at(dc.name):
                if not job.allows(pool.gpu_type):
                    continue
                counts = [n for n in menu if n <= pool.count]
                if not job.is_training:
                    counts = [job.requested_gpus] if job.requested_gpus <= pool.count else []
                for n in counts:
                    if job.is_training:
                        prof = sc.profile(job.app, pool.gpu_type)
                        grid, x, p_grid = _grid_curves(prof, n, pool.gpus_per_node)
                        # ECU = X * E(m), E = (phi + m0) / (phi + m): same as perf.ecu.
                        u = x * ((js.phi + prof.efficiency.m0) / (js.phi + grid))
                        b = int(np.argmax(u))
                        m = int(grid[b])
                        lost = transfer_s + (0.0 if same_place else restart_s)
                        useful_s = max(slot_s - lost, 0.0)
                        progress = min(
                            float(u[b]) * js.throughput_scale * useful_s / job.work_samples,
                            js.remaining,
                        )
                        p_w = float(p_grid[b])
                        # Power drawn for the whole slot: a restart still holds the GPUs.
                    else:
                        m = job.batch_size
                        progress = 0.0
                        p_w = inference_power_w(job, pool)
                    e_kwh = p_w * slot_s / 3.6e6 * dc.pue + transfer_kwh
                    cols["job_index"].append(k)
                    cols["datacenter"].append(dc.name)
                    cols["gpu_type"].append(pool.gpu_type)
                    cols["n_gpus"].append(n)
                    cols["batch_size"].append(m)
                    cols["progress"].append(progress)
                    cols["energy_kwh"].append(e_kwh)
                    cols["cost"].append(e_kwh * price)
                    cols["carbon_kg"].append(e_kwh * carbon / 1000.0)
                    cols["moves"].append(moves)
                    cols["transfer_s"].append(transfer_s)
    return SlotOptions(
        jobs=state.jobs,
        job_index=np.asarray(cols["job_index"], dtype=np.int64),
        datacenter=np.asarray(cols["datacenter"], dtype=str),
        gpu_type=np.asarray(cols["gpu_type"], dtype=str),
        n_gpus=np.asarray(cols["n_gpus"], dtype=np.int64),
        batch_size=np.asarray(cols["batch_size"], dtype=np.int64),
        progress=np.asarray(cols["progress"], dtype=float),
        energy_kwh=np.asarray(cols["energy_kwh"], dtype=float),
        cost=np.asarray(cols["cost"], dtype=float),
        carbon_kg=np.asarray(cols["carbon_kg"], dtype=float),
        moves=np.asarray(cols["moves"], dtype=bool),
        transfer_s=np.asarray(cols["transfer_s"], dtype=float),
    )
