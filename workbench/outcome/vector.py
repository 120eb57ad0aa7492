"""The slot model of :func:`workbench.outcome.slot_outcome` for many training options at once.

:func:`training_slot_outcomes` evaluates :func:`~workbench.outcome.slot_outcome`'s formulas
for arrays of training options (one entry per job, datacenter, pool and GPU count) with the
same floating-point operations in the same order, so every value is the scalar one
(``tests/test_outcome_vector.py`` checks it bit for bit). The scalar function stays the one
definition; this is its array form for :func:`workbench.policies.base.slot_options`, which
asks for tens of thousands of options a slot.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from workbench import perf
from workbench.outcome.slot import grid_throughput
from workbench.units import J_PER_KWH, W_PER_KW

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class SlotOutcomes:
    """:class:`~workbench.outcome.SlotOutcome` as arrays, one entry per option (the same
    names, units and meaning; ``source_kwh`` and ``transfer_gb`` stay with the charges)."""

    progress: FloatArray
    it_power_w: FloatArray
    used_s: FloatArray
    lost_s: FloatArray
    pending_s: FloatArray
    energy_kwh: FloatArray
    movement_kwh: FloatArray
    finishes: NDArray[np.bool_]
    power_kw: FloatArray
    rate_per_s: FloatArray
    """The steady rate once the losses are paid, fraction of the job's work per second."""


def training_slot_outcomes(
    *,
    slot_s: float,
    pue: FloatArray,
    owed_s: FloatArray,
    transfer_kwh: FloatArray,
    remaining: FloatArray,
    work_samples: FloatArray,
    n_gpus: NDArray[np.int64],
    batch_size: FloatArray,
    x_model_sps: FloatArray,
    speed: FloatArray,
    phi: FloatArray,
    m0: FloatArray,
    a1_w: FloatArray,
    a2_w_per_sps: FloatArray,
    max_power_w: FloatArray,
) -> SlotOutcomes:
    """:func:`~workbench.outcome.slot_outcome` of training options, element by element.

    Every argument but ``slot_s`` is an array with one entry per option: the datacenter's
    PUE, the seconds owed before progress (``charges.lost_s`` plus the restart), the
    transfer energy of the placement (kWh, half drawn here), the job's remaining work, total
    work (samples), GPU count, batch, modelled ``X(n, m)`` (samples/s), speed factor and
    gradient noise scale, and the profile's ``m0``, ``a1``, ``a2`` and board power limit::

        lost     = min(owed, D),  pending = owed - lost,  useful = D - lost
        X        = X_model * speed
        rate     = X * (phi + m0) / (phi + m) / W
        finishes = useful > 0 and rate * useful >= remaining - 1e-12
        progress = remaining if finishes else rate * useful
        used_s   = min(lost + remaining / rate, D) if finishes else D
        P_it     = min(n a1 + a2 X, n P_max)
        energy   = P_it / 3.6e6 * PUE * used_s + transfer_kwh / 2
        movement = P_it / 3.6e6 * PUE * lost + transfer_kwh
        power_kw = P_it * used_s / D * PUE / 1000
    """
    x = x_model_sps * speed
    lost = np.minimum(owed_s, slot_s)
    pending = owed_s - lost
    useful = slot_s - lost
    eff = (phi + m0) / (phi + batch_size)
    rate = x * eff / work_samples
    finishes = (useful > 0) & (rate * useful >= remaining - 1e-12)
    with np.errstate(divide="ignore", invalid="ignore"):
        to_finish = np.where(rate > 0, remaining / rate, 0.0)
    progress = np.where(finishes, remaining, rate * useful)
    used = np.where(finishes, np.minimum(lost + to_finish, slot_s), slot_s)
    p_w = np.minimum(n_gpus * a1_w + a2_w_per_sps * x, n_gpus * max_power_w)
    it_kwh = p_w / J_PER_KWH * pue
    return SlotOutcomes(
        progress=progress, it_power_w=p_w, used_s=used, lost_s=lost, pending_s=pending,
        energy_kwh=it_kwh * used + transfer_kwh / 2.0,
        movement_kwh=it_kwh * lost + transfer_kwh, finishes=finishes,
        power_kw=p_w * used / slot_s * pue / W_PER_KW, rate_per_s=rate)


def best_batches_grouped(
    profiles: list[perf.JobProfile], profile_of: NDArray[np.int64], n_gpus: NDArray[np.int64],
    gpus_per_node: NDArray[np.int64], phi: FloatArray, *, chunk: int = 65_536,
) -> tuple[FloatArray, FloatArray]:
    """:func:`~workbench.outcome.best_batch` of every option: ``profiles[profile_of[i]]`` on
    ``n_gpus[i]`` GPUs (``gpus_per_node[i]`` a node) at ``phi[i]``. Returns the batches (as
    floats) and ``X(n, m)`` there.

    The grids of the distinct (profile, GPU count, node size) are stacked, padded with
    ``X = -inf`` (never the maximum), and the ECU ``X * (phi + m0) / (phi + m)`` of every
    option on its grid is evaluated with :func:`~workbench.outcome.best_batches`'
    operations, the first maximum taken (the same choice, ties included), ``chunk`` options
    at a time.
    """
    m = np.zeros(phi.size)
    x = np.zeros(phi.size)
    if not phi.size:
        return m, x
    key = (profile_of * (int(n_gpus.max()) + 1) + n_gpus) * (int(gpus_per_node.max()) + 1) \
        + gpus_per_node
    uk, first, inv = np.unique(key, return_index=True, return_inverse=True)
    grids = [grid_throughput(profiles[int(profile_of[i])], int(n_gpus[i]),
                             int(gpus_per_node[i])) for i in first.tolist()]
    width = max(g.size for g, _ in grids)
    grid = np.ones((uk.size, width))
    xs = np.full((uk.size, width), -np.inf)
    for c, (g, gx) in enumerate(grids):
        grid[c, :g.size] = g
        xs[c, :g.size] = gx
    m0 = np.array([float(profiles[int(profile_of[i])].efficiency.m0) for i in first.tolist()])
    for lo in range(0, phi.size, chunk):
        sl = slice(lo, lo + chunk)
        c = inv[sl]
        ph = phi[sl, None]
        b = (xs[c] * ((ph + m0[c, None]) / (ph + grid[c]))).argmax(axis=1)
        m[sl] = grid[c, b]
        x[sl] = xs[c, b]
    return m, x
