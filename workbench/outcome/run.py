"""A training job alone on one configuration, slot after slot: what the simulator charges it
(:func:`uninterrupted_run`, what :mod:`workbench.quote` prices)."""


from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from workbench import perf

if TYPE_CHECKING:
    from workbench.model import Job, Link

from workbench.outcome.slot import (
    NO_CHARGES,
    RESTART_S_DEFAULT,
    Charges,
    SlotOutcome,
    best_batch,
    best_batches,
    full_slot_rates,
    move_charges,
    slot_outcome,
)


@dataclass(frozen=True)
class UninterruptedRun:
    """A training job alone on one configuration, from a fresh start until it finishes
    (:func:`uninterrupted_run`): what the simulator charges it, slot by slot.

    Attributes
    ----------
    energy_kwh : ndarray
        Per slot, the facility energy charged in the job's datacenter, kWh
        (:attr:`SlotOutcome.energy_kwh`: IT energy times PUE, lost time included, plus the
        destination half of the transfer energy).
    source_kwh : tuple of (datacenter, kWh)
        Transfer energy drawn at the sending datacenters, all in the first slot.
    batch_size : ndarray of int
        Per slot, the ECU-best grid batch at the slot's gradient noise scale.
    finishes : bool
        The job finishes within the slots simulated (``max_slots``).
    run_s : float
        Seconds from the start of the first slot to the finish:
        ``(slots - 1) * D + used_s`` of the last slot. For a run that does not finish
        within ``max_slots``, extrapolated (see :func:`uninterrupted_run`).
    lost_s : float
        Seconds lost to the transfer and the restart (no progress, GPUs held).
    transfer_gb : float
        GB moved into the datacenter (the dataset's first trip away from home).
    total_energy_kwh : float
        All energy of the run at both ends, kWh (extrapolated as ``run_s``).
    """

    energy_kwh: NDArray[np.float64]
    source_kwh: tuple[tuple[str, float], ...]
    batch_size: NDArray[np.int64]
    finishes: bool
    run_s: float
    lost_s: float
    transfer_gb: float
    total_energy_kwh: float


def uninterrupted_run(
    job: Job,
    profile: perf.JobProfile,
    datacenter: str,
    gpu_type: str,
    n_gpus: int,
    *,
    gpus_per_node: int,
    slot_s: float,
    pue: float,
    link: Callable[[str, str], Link | None],
    max_slots: int,
    restart_s: float = RESTART_S_DEFAULT,
) -> UninterruptedRun | None:
    """``job`` started fresh on ``n_gpus`` x ``gpu_type`` in ``datacenter`` and kept there,
    slot after slot, until it finishes: the simulator's noise-free truth for a job that
    runs alone, uninterrupted.

    Each slot is :func:`move_charges` (first slot: the dataset's trip away from home and
    the restart; later slots: what is still owed) and :func:`slot_outcome` at the batch a
    policy picks, :func:`best_batch` at the profile's gradient noise scale at the job's
    progress (its estimate before any observation)::

        phi_k      = phi(done_k)                       profile trajectory
        m_k, X_k   = best_batch(n, phi_k)
        outcome_k  = slot_outcome(charges_k, remaining = 1 - done_k, m_k, X_k, phi_k)
        done_k+1   = done_k + progress_k

    The slots that owe a transfer or restart are evaluated one by one. From the first slot
    that owes nothing, every slot until the last is a loss-free full slot
    (:func:`full_slot_rates` at ``phi(done_k)``, the same operations as
    :func:`slot_outcome`), so the whole sequence ``done_k`` is solved at once as the fixed
    point of ``done = done_h + cumsum(progress(done))`` (sequential sums, as the
    simulator adds; a triangular recurrence, so the iteration is exact after at most as
    many rounds as slots, in practice about ten); the finishing slot is
    :func:`slot_outcome` again.

    At most ``max_slots`` slots are simulated. A run still unfinished then is extrapolated
    with the loss-free per-slot rates at ``Q = 8`` midpoints of the remaining progress
    ``r``: ``slots = sum_q (r/Q) / progress_q`` and energy ``sum_q slots_q * energy_q``
    (the hindsight model's trajectory average).

    Returns
    -------
    UninterruptedRun, or None when the dataset would travel over a link that does not exist.
    """
    n = int(n_gpus)
    prev: tuple[str, str, int] | None = None
    checkpoint_at: str | None = None
    data_at = {job.home}
    pending = done = lost = gb = 0.0
    energies: list[float] = []
    batches: list[float] = []
    source: dict[str, float] = {}
    finishes, used_last, steady = False, slot_s, NO_CHARGES
    while len(energies) < max_slots:
        ch = move_charges(job, datacenter, gpu_type, n, previous=prev,
                          checkpoint_at=checkpoint_at, data_at=data_at, pending_s=pending,
                          link=link, restart_s=restart_s)
        if ch is None:
            return None
        if prev is not None and ch.lost_s == 0.0 and ch.transfer_gb == 0.0 \
                and ch.transfer_kwh == 0.0:
            steady = ch  # owes nothing now, and (nothing changing) in every later slot
            break
        out, m_slot = _solo_slot(job, profile, n, gpus_per_node, slot_s, pue, ch, done)
        energies.append(out.energy_kwh)
        batches.append(m_slot)
        for d, kwh in out.source_kwh:
            source[d] = source.get(d, 0.0) + kwh
        if ch.transfer_gb > 0:
            data_at.add(datacenter)
            gb += ch.transfer_gb
        lost += out.lost_s
        pending = out.pending_s
        prev, checkpoint_at = (datacenter, gpu_type, n), datacenter
        if out.finishes:
            finishes, used_last = True, out.used_s
            break
        done += out.progress
    if not finishes and len(energies) < max_slots:
        at, m_tail, kwh_tail, fin = _steady_slots(job, profile, n, gpus_per_node, slot_s, pue,
                                                  done, max_slots - len(energies))
        upto = at.size if fin is None else fin
        energies.extend(kwh_tail[:upto].tolist())
        batches.extend(m_tail[:upto].tolist())
        if fin is None:
            done = float(at[-1] + _steady_progress(job, profile, n, gpus_per_node, slot_s,
                                                   pue, at[-1:])[0])
        else:
            out, _ = _solo_slot(job, profile, n, gpus_per_node, slot_s, pue, steady,
                                float(at[fin]))
            energies.append(out.energy_kwh)
            batches.append(float(m_tail[fin]))
            finishes, used_last = out.finishes, out.used_s
            done = 1.0 if out.finishes else float(at[fin]) + out.progress
    slots = len(energies)
    total_kwh = float(sum(energies) + sum(source.values()))
    if finishes:
        run_s = (slots - 1) * slot_s + used_last
    else:
        more, more_kwh = _trajectory_slots(profile, job, n, gpus_per_node, slot_s, pue, done)
        run_s = (slots + more) * slot_s + pending
        total_kwh += more_kwh
        lost += pending
    return UninterruptedRun(
        energy_kwh=np.asarray(energies, dtype=float), source_kwh=tuple(sorted(source.items())),
        batch_size=np.asarray(batches, dtype=float).astype(np.int64), finishes=finishes,
        run_s=run_s, lost_s=lost, transfer_gb=gb, total_energy_kwh=total_kwh)


def _solo_slot(job: Job, profile: perf.JobProfile, n: int, gpus_per_node: int, slot_s: float,
               pue: float, charges: Charges, done: float) -> tuple[SlotOutcome, int]:
    """One slot of :func:`uninterrupted_run`: :func:`slot_outcome` at the best batch (and
    that batch)."""
    phi = float(profile.efficiency.phi(done))
    m, x = best_batch(profile, n, gpus_per_node, phi)
    return slot_outcome(job, slot_s=slot_s, pue=pue, charges=charges, remaining=1.0 - done,
                        profile=profile, n_gpus=n, batch_size=m, x_model_sps=x, phi=phi,
                        gpus_per_node=gpus_per_node), m


def _steady_progress(job: Job, profile: perf.JobProfile, n: int, gpus_per_node: int,
                     slot_s: float, pue: float, done: NDArray[np.float64]
                     ) -> NDArray[np.float64]:
    return full_slot_rates(profile, job, n, gpus_per_node, slot_s, pue,
                           profile.efficiency.phi(done), memo=False)[0]


def _steady_slots(
    job: Job, profile: perf.JobProfile, n: int, gpus_per_node: int, slot_s: float,
    pue: float, done0: float, limit: int,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], int | None]:
    """Loss-free slots from progress ``done0`` (at most ``limit``): progress before each
    slot, batch and energy (kWh) of each, and the index of the finishing slot (None if
    none finishes). Sized by the trajectory estimate, grown to ``limit`` if too short."""
    est = _trajectory_slots(profile, job, n, gpus_per_node, slot_s, pue, done0)[0]
    size = limit if not math.isfinite(est) else min(limit, int(1.2 * est) + 4)
    while True:
        # Start from the straight line to 1 at the estimated pace, iterate to the fixed
        # point (element k is exact after k + 1 rounds).
        d = np.asarray(done0 + (1.0 - done0) * np.arange(size) / max(est, 1.0), dtype=np.float64)
        for _ in range(size + 1):
            phis = profile.efficiency.phi(d)
            prog, kwh = full_slot_rates(profile, job, n, gpus_per_node, slot_s, pue, phis,
                                        memo=False)
            nxt = np.cumsum(np.r_[done0, prog[:-1]], dtype=float)
            if np.array_equal(nxt, d):
                break
            d = nxt
        # slot_outcome's test: the work left fits the slot.
        fin = np.flatnonzero(prog >= (1.0 - d) - 1e-12)
        if fin.size or size >= limit:
            m = best_batches(profile, n, gpus_per_node, phis)[0]
            return d, m, kwh, (int(fin[0]) if fin.size else None)
        size = limit


def _trajectory_slots(profile: perf.JobProfile, job: Job, n_gpus: int, gpus_per_node: int,
                      slot_s: float, pue: float, done: float) -> tuple[float, float]:
    """Loss-free full slots and their energy (kWh) to finish from progress ``done``:
    :func:`full_slot_rates` at 8 midpoints of the remaining progress."""
    rest = max(1.0 - done, 0.0)
    q = done + rest * (np.arange(8) + 0.5) / 8
    prog_q, kwh_q = full_slot_rates(profile, job, n_gpus, gpus_per_node, slot_s, pue,
                                    profile.efficiency.phi(q), memo=False)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        slots_q = (rest / 8) / prog_q
        return float(slots_q.sum()), float((slots_q * kwh_q).sum())
