"""The block LP's input records (:mod:`workbench.optim.blocklp`): the configurations a job
may run in, as records and as arrays, the columns ``x[j,b,k]`` of the jobs' windows, the move
columns and the keys that carry a basis from one re-plan to the next; and the penalty weight
of the LP's slacks."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True)
class BlockConfig:
    """One configuration a job may run in the block LP, with its loss-free per-slot rates.

    ``pool`` and ``dc`` index the scenario's pools and datacenters; ``rate`` is the work
    per slot (fraction of the job; 0 for an inference service) and ``energy_kwh`` the
    energy per slot with PUE.
    """

    datacenter: str
    gpu_type: str
    n_gpus: int
    pool: int
    dc: int
    rate: float
    energy_kwh: float


@dataclass(frozen=True)
class ConfigArrays:
    """Configurations as arrays, one entry per :class:`BlockConfig`: datacenter and pool
    index, GPU count, energy per slot (kWh) and work per slot."""

    dc: NDArray[np.int64]
    pool: NDArray[np.int64]
    n_gpus: NDArray[np.float64]
    energy_kwh: NDArray[np.float64]
    rate: NDArray[np.float64]

    @staticmethod
    def of(cfgs: Sequence[BlockConfig]) -> ConfigArrays:
        return ConfigArrays(dc=np.array([c.dc for c in cfgs], dtype=np.int64),
                            pool=np.array([c.pool for c in cfgs], dtype=np.int64),
                            n_gpus=np.array([c.n_gpus for c in cfgs], dtype=float),
                            energy_kwh=np.array([c.energy_kwh for c in cfgs], dtype=float),
                            rate=np.array([c.rate for c in cfgs], dtype=float))

    @staticmethod
    def stack(parts: Sequence[ConfigArrays]) -> ConfigArrays:
        """Every job's configurations one after the other (empty when there are none)."""
        if not parts:
            return ConfigArrays.of(())
        return ConfigArrays(*(np.concatenate([getattr(p, f) for p in parts])
                              for f in ("dc", "pool", "n_gpus", "energy_kwh", "rate")))

    def take(self, idx: NDArray[np.int64]) -> ConfigArrays:
        """The entries ``idx`` (one per LP column)."""
        return ConfigArrays(self.dc[idx], self.pool[idx], self.n_gpus[idx],
                            self.energy_kwh[idx], self.rate[idx])


def block_columns(
    block_start: NDArray[np.int64], block_len: NDArray[np.int64],
    first: NDArray[np.int64], end: NDArray[np.int64], allowed: Sequence[NDArray[np.bool_]],
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64], NDArray[np.float64]]:
    """The columns ``x[j,b,k]``: for job ``j`` (in order), every block overlapping its window
    ``[first_j, end_j)`` (in order) and every allowed configuration ``k`` (in order).

    Returns job, block, configuration (index into the job's own list) and the column's
    bound ``len_jb = min(start_b + len_b, end_j) - max(start_b, first_j)``, the slots of the
    block inside the window.
    """
    parts: list[tuple[NDArray[np.int64], ...]] = []
    for j, (a, e, ok) in enumerate(zip(first.tolist(), end.tolist(), allowed, strict=True)):
        ks = np.flatnonzero(ok).astype(np.int64)
        if e <= a or ks.size == 0:
            continue
        lo = int(np.searchsorted(block_start, a, side="right")) - 1
        hi = int(np.searchsorted(block_start, e, side="left"))
        bs = np.arange(lo, hi, dtype=np.int64)
        length = (np.minimum(block_start[bs] + block_len[bs], e)
                  - np.maximum(block_start[bs], a))
        parts.append((np.full(bs.size * ks.size, j, dtype=np.int64), np.repeat(bs, ks.size),
                      np.tile(ks, bs.size), np.repeat(length, ks.size)))
    if not parts:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z, np.zeros(0)
    return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
            np.concatenate([p[2] for p in parts]),
            np.concatenate([p[3] for p in parts]).astype(float))


def exact_dot(a: NDArray[np.float64], b: NDArray[np.float64]) -> float:
    """``a . b`` rounded once (``math.fsum`` of the products): the same number in any order
    and any process. (``a @ b`` goes to BLAS, whose sum order depends on its thread count:
    a Dask worker, started with one BLAS thread, and a many-core parent added a plan's
    cost up to different last bits.)"""
    return math.fsum(np.multiply(np.asarray(a, dtype=float), np.asarray(b, dtype=float))
                     .tolist())


def penalty_weight(ratios: NDArray[np.float64], factor: float) -> float:
    """``factor * max(max(ratios), 1)``: a penalty that outweighs the dearest of ``ratios``
    (e.g. the cost of a whole job's work, or of avoiding one kg, on any column)."""
    return factor * max(float(np.max(ratios, initial=0.0)), 1.0)


@dataclass(frozen=True)
class BlockMoves:
    """Move columns ``m[j,d]`` of the block LP (the look-ahead's data moves).

    Attributes
    ----------
    job : int array (M,)
        Training job of each move column.
    cost : float array (M,)
        ``M_jd``: what moving costs, scenario currency.
    lost : float array (M,)
        ``l_jd``: work lost while the data move (fraction of the job).
    of_x : int array (X,)
        The move column each ``x`` column needs (-1: none, the data are there). Columns of
        one move are ordered like the moves.
    """

    job: NDArray[np.int64]
    cost: NDArray[np.float64]
    lost: NDArray[np.float64]
    of_x: NDArray[np.int64]


@dataclass(frozen=True)
class BlockKeys:
    """What a column or row of the block LP is, independent of its position: a stable key
    per job (the same job keeps its key from one re-plan to the next) and each block's
    first slot on the caller's absolute clock. With them a basis of one solve is mapped
    onto the next model (:func:`workbench.optim.blocklp.warm_basis`)."""

    job: NDArray[np.int64]
    block_start: NDArray[np.int64]
