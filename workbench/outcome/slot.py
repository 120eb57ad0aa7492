"""The slot model: a placement's charges and the outcome of one slot.

The formulas are in :mod:`workbench.outcome`'s notes and in each function's docstring.
"""


from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from workbench import perf
from workbench.units import J_PER_KWH, W_PER_KW

if TYPE_CHECKING:
    from workbench.model import GpuPool, Job, Link

RESTART_S_DEFAULT = 120.0
"""Seconds to restore a checkpoint and warm up after a start, resume, move or change of GPU
type. Illustrative: checkpoint-restart of a data-parallel job (process start, framework
init, checkpoint load, data-loader warm-up) takes on the order of minutes; Pollux (Qiao et
al., OSDI 2021) likewise charges every re-allocation a checkpoint-restart."""

RESIZE_S_DEFAULT = 60.0
"""Seconds lost when a job keeps its datacenter and GPU type but changes its GPU count.
Illustrative (not measured): half of :data:`RESTART_S_DEFAULT`, since the dataset is
already local and the node's page cache holds the checkpoint; the job still restarts from
its checkpoint."""

_BATCH_GRID = 24


@dataclass(frozen=True)
class Charges:
    """What placing a job in a datacenter costs before any work is done.

    Attributes
    ----------
    lost_s : float
        Seconds owed before the job makes progress (pending + transfer + restart); may
        exceed a slot.
    transfer_s : float
        Seconds of new transfers started by this placement.
    transfer_gb : float
        GB moved into the datacenter by this placement (dataset and/or checkpoint).
    dataset_gb, checkpoint_gb : float
        The two parts of ``transfer_gb``.
    transfer_kwh : float
        Network energy of the transfers, kWh (half at each end).
    source_kwh : tuple of (datacenter, kWh)
        The sending ends' halves.
    sources : tuple of str
        Datacenters the data came from (for the migrations table).
    restart_s : float
        The restart part of ``lost_s``.
    """

    lost_s: float = 0.0
    transfer_s: float = 0.0
    transfer_gb: float = 0.0
    dataset_gb: float = 0.0
    checkpoint_gb: float = 0.0
    transfer_kwh: float = 0.0
    source_kwh: tuple[tuple[str, float], ...] = ()
    sources: tuple[str, ...] = ()
    restart_s: float = 0.0


NO_CHARGES = Charges()


@dataclass(frozen=True)
class SlotOutcome:
    """One job's slot: work done, power, energy, time lost and data moved.

    Attributes
    ----------
    progress : float
        Fraction of the job's total work done in the slot (0 for inference).
    it_power_w : float
        IT (board) power while the job holds its GPUs, W.
    used_s : float
        Seconds the job held its GPUs in the slot.
    lost_s : float
        Seconds of the slot lost to restart and transfer.
    pending_s : float
        Seconds of loss still owed after the slot (a transfer longer than the slot).
    energy_kwh : float
        Facility energy charged in the job's datacenter, kWh: IT energy times PUE plus the
        destination half of the transfer energy.
    source_kwh : tuple of (datacenter, kWh)
        Transfer energy drawn at the sending datacenters.
    movement_kwh : float
        Energy of lost time plus all transfer energy, kWh (part of ``energy_kwh`` and
        ``source_kwh``).
    transfer_gb : float
        GB moved into the datacenter in this slot.
    finishes : bool
        The job's work is done inside this slot.
    power_kw : float
        The job's average facility power over the slot, kW:
        ``P_it * used_s / D * PUE / 1000`` (what a datacenter's power meter and power cap
        count; network transfer energy is not part of it).
    """

    progress: float
    it_power_w: float
    used_s: float
    lost_s: float
    pending_s: float
    energy_kwh: float
    movement_kwh: float
    transfer_gb: float = 0.0
    source_kwh: tuple[tuple[str, float], ...] = field(default_factory=tuple)
    finishes: bool = False
    power_kw: float = 0.0
    limit_saved_kwh: float = 0.0
    """Energy (kWh, with PUE) the slot's progress would have taken more at full power
    than it took under the slot's power limit (0 without a limit): what the attribution of
    a saving calls *power limits*."""


def check_seconds(value: float, what: str) -> float:
    """``value`` as a float, or ``ValueError`` unless it is a finite number >= 0."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number of seconds >= 0, got {value!r}") from None
    if not (math.isfinite(out) and out >= 0):
        raise ValueError(f"{what} must be a finite number of seconds >= 0, got {value!r}")
    return out


def transfer_charges(
    job: Job,
    datacenter: str,
    *,
    checkpoint_at: str | None,
    data_at: Iterable[str],
    pending_s: float,
    link: Callable[[str, str], Link | None],
) -> Charges | None:
    """The data part of :func:`move_charges` (what travels, and the loss owed before any
    restart): the same for every GPU type and count in ``datacenter``."""
    gb_total = kwh = t_s = 0.0
    src_kwh: dict[str, float] = {}
    sources: list[str] = []
    ds_gb = ck_gb = 0.0
    if job.dataset_gb > 0 and datacenter != job.home:
        holders = set(data_at) | {job.home}
        if datacenter not in holders:
            cands = sorted(holders, key=lambda d: (d != job.home, d))
            found = next(((d, lk) for d in cands if (lk := link(d, datacenter)) is not None),
                         None)
            if found is None:
                return None
            src, lk = found
            ds_gb = job.dataset_gb
            t_s += lk.transfer_s(ds_gb)
            e = ds_gb * lk.transfer_energy_kwh_per_gb
            kwh += e
            src_kwh[src] = src_kwh.get(src, 0.0) + e / 2.0
            sources.append(src)
    if checkpoint_at is not None and checkpoint_at != datacenter:
        lk = link(checkpoint_at, datacenter)
        if lk is None:
            return None
        ck_gb = job.checkpoint_gb
        t_s += lk.transfer_s(ck_gb)
        e = ck_gb * lk.transfer_energy_kwh_per_gb
        kwh += e
        src_kwh[checkpoint_at] = src_kwh.get(checkpoint_at, 0.0) + e / 2.0
        if checkpoint_at not in sources:
            sources.append(checkpoint_at)
    if ds_gb == 0.0 and ck_gb == 0.0:
        owed = pending_s if job.is_training and checkpoint_at == datacenter else 0.0
        return Charges(lost_s=owed) if owed else NO_CHARGES
    gb_total = ds_gb + ck_gb
    owed = pending_s if checkpoint_at == datacenter else 0.0
    return Charges(lost_s=(owed + t_s) if job.is_training else 0.0, transfer_s=t_s,
                   transfer_gb=gb_total, dataset_gb=ds_gb, checkpoint_gb=ck_gb,
                   transfer_kwh=kwh, source_kwh=tuple(sorted(src_kwh.items())),
                   sources=tuple(sources))


def restart_seconds(
    previous: tuple[str, str, int] | None, datacenter: str, gpu_type: str, n_gpus: int,
    restart_s: float = RESTART_S_DEFAULT, resize_s: float = RESIZE_S_DEFAULT,
) -> float:
    """The restart part of :func:`move_charges`: 0 for the same datacenter, GPU type and
    count as the previous slot, ``resize_s`` for another count in the same pool, else
    ``restart_s``."""
    if previous is not None and previous[0] == datacenter and previous[1] == gpu_type:
        return 0.0 if previous[2] == n_gpus else resize_s
    return restart_s


def move_charges(
    job: Job,
    datacenter: str,
    gpu_type: str,
    n_gpus: int,
    *,
    previous: tuple[str, str, int] | None,
    checkpoint_at: str | None,
    data_at: Iterable[str],
    pending_s: float,
    link: Callable[[str, str], Link | None],
    restart_s: float = RESTART_S_DEFAULT,
    resize_s: float = RESIZE_S_DEFAULT,
) -> Charges | None:
    """The charges of placing ``job`` on ``n_gpus`` x ``gpu_type`` in ``datacenter``.

    Parameters
    ----------
    previous : (datacenter, gpu_type, n_gpus) or None
        Where the job ran in the previous slot (None: it did not run).
    checkpoint_at : str or None
        Where its latest checkpoint lives (None before its first run).
    data_at : iterable of str
        Datacenters holding its dataset (its home at least).
    pending_s : float
        Loss still owed from an unfinished transfer or restart into ``checkpoint_at``.
    link : callable
        ``link(a, b)`` -> the :class:`~workbench.model.Link` joining two datacenters, or None.

    Returns
    -------
    Charges, or None when data would have to travel over a link that does not exist.
    """
    base = transfer_charges(job, datacenter, checkpoint_at=checkpoint_at, data_at=data_at,
                            pending_s=pending_s, link=link)
    if base is None:
        return None
    if not job.is_training:
        return base
    restart = restart_seconds(previous, datacenter, gpu_type, int(n_gpus), restart_s, resize_s)
    return dataclasses.replace(base, lost_s=base.lost_s + restart, restart_s=restart)


def batch_grid(profile: perf.JobProfile, n: int) -> NDArray[np.float64]:
    """The batch sizes a scheduler considers on ``n`` GPUs: 24 geometric steps."""
    lo, hi = perf.batch_bounds(profile, n)
    return np.unique(np.round(np.geomspace(lo, hi, _BATCH_GRID)))


_GRID_MEMO: dict[tuple[int, int, int], tuple[perf.JobProfile, NDArray[np.float64],
                                             NDArray[np.float64]]] = {}


def grid_throughput(
    profile: perf.JobProfile, n: int, gpus_per_node: int
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Batch grid and modelled hardware throughput ``X(n, m)`` on it (memoised, read-only).

    Memoised by the profile's identity (a frozen record; the memo keeps it alive, so an id
    cannot be reused while its entry exists): hashing nested profiles costs more than the
    lookup saves.
    """
    key = (id(profile), int(n), int(gpus_per_node))
    hit = _GRID_MEMO.get(key)
    if hit is not None and hit[0] is profile:
        return hit[1], hit[2]
    if len(_GRID_MEMO) > 8192:
        _GRID_MEMO.clear()
    grid = batch_grid(profile, n)
    x = perf.throughput(profile.throughput, n, grid, gpus_per_node)
    for arr in (grid, x):
        arr.setflags(write=False)
    _GRID_MEMO[key] = (profile, grid, x)
    return grid, x


def best_batch(
    profile: perf.JobProfile, n: int, gpus_per_node: int, phi: float
) -> tuple[int, float]:
    """The grid batch maximising ECU ``X(n, m) * E_phi(m)`` at gradient noise scale ``phi``,
    and ``X(n, m)`` there (samples/s, before any speed factor).

    Memoised by the profile's identity, ``n``, ``gpus_per_node`` and ``phi`` (a paused job
    keeps its ``phi``, so the slot options ask the same question slot after slot); the
    memo is emptied at 100,000 entries.
    """
    key = (id(profile), n, gpus_per_node, phi)
    hit = _BEST_MEMO.get(key)
    if hit is not None and hit[0] is profile:
        return hit[1], hit[2]
    grid, x = grid_throughput(profile, n, gpus_per_node)
    m0 = profile.efficiency.m0
    u = x * ((phi + m0) / (phi + grid))  # perf.efficiency, inlined on the grid
    b = int(u.argmax())
    if len(_BEST_MEMO) > 100_000:
        _BEST_MEMO.clear()
    _BEST_MEMO[key] = (profile, int(grid[b]), float(x[b]))
    return int(grid[b]), float(x[b])


_BEST_MEMO: dict[tuple[int, int, int, float], tuple[perf.JobProfile, int, float]] = {}


def training_power_w(profile: perf.JobProfile, n_gpus: int, x_sps: float | NDArray[np.float64]
                     ) -> NDArray[np.float64]:
    """IT power at hardware throughput ``x_sps``: ``min(n * a1 + a2 * X, n * max_power_w)``."""
    e = profile.energy
    return np.minimum(n_gpus * e.a1_w + e.a2_w_per_sps * np.asarray(x_sps, dtype=float),
                      n_gpus * e.max_power_w)


def service_power_w(job: Job, pool: GpuPool, n_gpus: int | None = None) -> float:
    """Board power of inference service ``job`` on ``pool``, W (before PUE).

    ``n`` GPUs (default: its requested count) at ``load_fraction`` between idle and maximum
    board power: ``n * (P_idle + load_fraction * (P_max - P_idle))``.
    """
    n = job.requested_gpus if n_gpus is None else n_gpus
    return n * (
        pool.idle_power_w + job.load_fraction * (pool.max_power_w - pool.idle_power_w))


def slot_outcome(
    job: Job,
    *,
    slot_s: float,
    pue: float,
    charges: Charges = NO_CHARGES,
    remaining: float = 1.0,
    profile: perf.JobProfile | None = None,
    n_gpus: int = 0,
    batch_size: int = 0,
    x_model_sps: float | None = None,
    speed: float = 1.0,
    phi: float = 1.0,
    gpus_per_node: int = 8,
    inference_power_w: float = 0.0,
    up_s: float | None = None,
    lost_s: float | None = None,
    time_factor: float = 1.0,
    power_factor: float = 1.0,
) -> SlotOutcome:
    """The outcome of one slot for ``job`` with the given charges (see the module notes).

    Parameters
    ----------
    slot_s, pue : float
        Slot length (s) and the datacenter's PUE.
    charges : Charges
        From :func:`move_charges` (default: none).
    remaining : float
        Training: fraction of the work left (``np.inf``: never finishes, for per-slot rates).
    profile, n_gpus, batch_size : training placement
        ``x_model_sps`` (default: computed) is the modelled ``X(n, m)``.
    speed : float
        Throughput factor: the truth's hidden factor times noise, or the online estimate.
    phi : float
        Gradient noise scale: the truth's trajectory value, or the online estimate.
    inference_power_w : float
        Inference: its board power, W.
    up_s : float, optional
        Inference: seconds of the slot before the service ends (default: the whole slot).
    lost_s : float, optional
        Seconds owed before progress, overriding ``charges.lost_s`` (a caller that prices
        one transfer for several GPU configurations adds each one's restart here).
    time_factor, power_factor : float
        A GPU power limit's effect (:func:`workbench.power_limits.limit_factors`):
        throughput ``X / r_t`` and power ``P_it * r_P`` (held during lost time too); 1 at
        full power. ``limit_saved_kwh = (P_it (lost + work / r_t) - P_it r_P used) / 3.6e6
        * PUE``, with ``work = used - lost`` the seconds of progress.
    """
    transfer_dst = charges.transfer_kwh / 2.0
    if not job.is_training:
        used = slot_s if up_s is None else min(slot_s, max(up_s, 0.0))
        p_w = float(inference_power_w)
        energy = p_w * used / J_PER_KWH * pue + transfer_dst
        return SlotOutcome(progress=0.0, it_power_w=p_w, used_s=used, lost_s=0.0,
                           pending_s=0.0, energy_kwh=energy, movement_kwh=charges.transfer_kwh,
                           transfer_gb=charges.transfer_gb, source_kwh=charges.source_kwh,
                           power_kw=p_w * used / slot_s * pue / W_PER_KW)
    assert profile is not None
    if x_model_sps is None:
        x_model_sps = float(perf.throughput(profile.throughput, n_gpus, batch_size,
                                            gpus_per_node))
    x = float(x_model_sps) * float(speed)
    limited = time_factor != 1.0 or power_factor != 1.0
    owed = charges.lost_s if lost_s is None else float(lost_s)
    lost = min(owed, slot_s)
    pending = owed - lost
    useful = slot_s - lost
    m0 = profile.efficiency.m0
    eff = (phi + m0) / (phi + batch_size)  # perf.efficiency, in floats
    rate = (x / time_factor if limited else x) * eff / job.work_samples
    finishes = useful > 0 and rate * useful >= remaining - 1e-12
    if finishes:
        progress = float(remaining)
        used = min(lost + (remaining / rate if rate > 0 else 0.0), slot_s)
    else:
        progress = rate * useful
        used = slot_s
    e = profile.energy
    p_w = min(n_gpus * e.a1_w + e.a2_w_per_sps * x, n_gpus * e.max_power_w)
    saved = 0.0
    if limited:
        full_w = p_w
        p_w = full_w * power_factor
        saved = (full_w * (lost + (used - lost) / time_factor) - p_w * used) / J_PER_KWH * pue
    it_kwh = p_w / J_PER_KWH * pue
    return SlotOutcome(
        progress=progress, it_power_w=p_w, used_s=used, lost_s=lost, pending_s=pending,
        energy_kwh=it_kwh * used + transfer_dst,
        movement_kwh=it_kwh * lost + charges.transfer_kwh,
        transfer_gb=charges.transfer_gb, source_kwh=charges.source_kwh, finishes=finishes,
        power_kw=p_w * used / slot_s * pue / W_PER_KW, limit_saved_kwh=saved,
    )


def clear_memos() -> None:
    """Empty the memos of batch grids and best batches (keyed by a profile's identity), as
    in a fresh process: a cold start, for the benches."""
    for memo in (_GRID_MEMO, _BEST_MEMO, _RATES_MEMO):
        memo.clear()


_RATES_MEMO: dict[tuple[int, int, int, bytes], tuple[perf.JobProfile, NDArray[np.float64],
                                                     NDArray[np.float64]]] = {}


def _best_batches(profile: perf.JobProfile, n_gpus: int, gpus_per_node: int,
                  phis: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """:func:`best_batch` at each of ``phis``: batches and ``X(n, m)`` (memoised by the
    profile's identity, as :func:`grid_throughput`; every job of one app shares them)."""
    key = (id(profile), int(n_gpus), int(gpus_per_node), phis.tobytes())
    hit = _RATES_MEMO.get(key)
    if hit is not None and hit[0] is profile:
        return hit[1], hit[2]
    if len(_RATES_MEMO) > 8192:
        _RATES_MEMO.clear()
    m, x = best_batches(profile, n_gpus, gpus_per_node, phis)
    _RATES_MEMO[key] = (profile, m, x)
    return m, x


def best_batches(profile: perf.JobProfile, n_gpus: int, gpus_per_node: int,
                 phis: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """:func:`best_batch` at each of ``phis`` at once (not memoised): the grid batches (as
    floats) and ``X(n, m)`` there. The same floating-point operations per element, so the
    same choice as :func:`best_batch`, ties included (the first maximum)."""
    grid, x = grid_throughput(profile, int(n_gpus), int(gpus_per_node))
    ph = np.asarray(phis, dtype=float)[:, None]
    b = (x * ((ph + profile.efficiency.m0) / (ph + grid))).argmax(axis=1)
    return grid[b], x[b]


def full_slot_rates(
    profile: perf.JobProfile, job: Job, n_gpus: int, gpus_per_node: int, slot_s: float,
    pue: float, phis: NDArray[np.float64], *, memo: bool = True,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Progress and energy (kWh) of one loss-free full slot at each gradient noise scale in
    ``phis``, at the ECU-best grid batch for each: the hindsight model's per-slot rates
    (the batches memoised by ``phis`` unless ``memo`` is False).

    :func:`slot_outcome` of a training job without charges that never finishes
    (``remaining = inf``, speed 1), evaluated for every ``phi`` at once with the same
    floating-point operations in the same order (so the values are identical)::

        progress = X * (phi + m0) / (phi + m) / W * slot_s
        energy   = min(n a1 + a2 X, n P_max) / 3.6e6 * PUE * slot_s
    """
    phis = np.asarray(phis, dtype=float)
    m, x = (_best_batches if memo else best_batches)(profile, n_gpus, gpus_per_node, phis)
    m0 = profile.efficiency.m0
    eff = (phis + m0) / (phis + m)
    useful = slot_s - min(NO_CHARGES.lost_s, slot_s)
    prog = x * eff / job.work_samples * useful
    e = profile.energy
    p_w = np.minimum(n_gpus * e.a1_w + e.a2_w_per_sps * x, n_gpus * e.max_power_w)
    kwh = p_w / J_PER_KWH * pue * slot_s + NO_CHARGES.transfer_kwh / 2.0
    return prog, kwh
