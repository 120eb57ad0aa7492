"""The grouped look-ahead's coordinator: a job's work priced in every group, and the moves.

:class:`~workbench.policies.grouped.GroupedLookahead` gives every job to one group of
datacenters; each group plans its window with the block LP. Its plan reports the capacity
price ``lambda[p,b]`` of each of its pools in each block (the pool rows' duals, per
GPU-slot), the GPU-slots it uses, and each training job's window need ``N_j`` (samples) and
window end ``e_j``. Given those prices, the window LP falls apart by job (its Lagrangian:
the pool rows priced, every job's columns alone): job ``j`` of class ``c`` does its need in
group ``g`` at the least cost ``K_jg`` (:func:`group_costs`) over the group's blocks ``b``.
A configuration ``k`` costs, per slot, its energy at the forecast's block mean plus its
GPU-slots at their price::

    C_kb = E_k (p_{b,d_k} + q c_{b,d_k} / 1000) + n_k lambda_{p_k,b}

and does ``S_k`` samples a slot (the class's rate times the job's throughput estimate). In
each block the job runs the class's cheapest configuration per sample ``k1`` and, to meet
a tight deadline, may move part of the block to the fastest ``k2``: ``t_jb`` slots (the
block's slots before the job's window end) give ``S_k1 t_jb`` samples at ``C_k1b / S_k1``
each, then ``(S_k2 - S_k1) t_jb`` more at the marginal ``(C_k2b - C_k1b) / (S_k2 - S_k1)``
(no less, as ``k1`` is the cheapest per sample), and ``K_jg`` fills ``N_j`` from these
items cheapest first (a fractional knapsack); a job whose need does not fit is not priced
there (infinite).

A job ``j`` in group ``h`` moves to ``g`` (:func:`choose_moves`) when
``gain = K_jh - K_jg - M_jg > reassign_gain * K_jh``, ``M_jg`` its move at the group's site
where it is least (:func:`move_costs`): the transfer's energy at the price the window LP
charges it and the work lost to the transfer and (when it runs) the restart, at ``g``'s
fastest rate, valued at ``K_jg / N_j`` per sample. Elsewhere than its own group a job is
priced on the pools with room (``FILL_LIMIT`` of the GPU-slots its plan leaves free in a
pool and block). Moves are taken best gain first while each pool keeps room in each block
for the GPU-slots they take (a move that would make the jobs of a group contend for a pool
beyond its room waits for the next pass, priced on the pools left: contention is what
makes a group's window LP slow); what a job leaves frees its GPU-slots in ``h``. No group
takes more than ``balance`` times the mean number of jobs per group: the groups' window LPs
stay of a size (the decomposition's point; a group holding most of the fleet's jobs would
plan them in one LP as large as the monolithic one). The jobs not moved are priced
again on the room left, in up to ``PASSES`` passes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from workbench.forecast import Forecast
from workbench.model import Job, ScenarioView
from workbench.optim.blocklp import ConfigArrays
from workbench.policies.base import JobState
from workbench.policies.problems import job_configs
from workbench.policies.window import block_forecast, transfer_price
from workbench.units import G_PER_KG

FILL_LIMIT = 0.8
"""Share of the GPU-slots a plan leaves free in a pool and block that moves may fill."""

CHOICES_PER_JOB = 3
"""A job's best groups tried, in order, when the first has no room."""

PASSES = 8
"""Passes of pricing and moves in one round (the jobs that found no room, priced again)."""


@dataclass(frozen=True)
class ClassConfigs:
    """A job class's configurations in one group: energy per slot (kWh), samples of work
    per slot, pool (index in the group), GPU count and datacenter (scenario index)."""

    energy: NDArray[np.float64]
    samples_per_slot: NDArray[np.float64]
    pool: NDArray[np.int64]
    n_gpus: NDArray[np.float64]
    dc: NDArray[np.int64]

    @staticmethod
    def of(job: Job, view: ScenarioView) -> ClassConfigs:
        """The configurations of ``job``'s class on ``view``'s pools."""
        a = ConfigArrays.of(job_configs(view, job))
        return ClassConfigs(energy=a.energy_kwh, samples_per_slot=a.rate * job.work_samples,
                            pool=a.pool, n_gpus=a.n_gpus, dc=a.dc)


@dataclass(frozen=True)
class GroupPrices:
    """What the coordinator knows of one group's window: its blocks (slots from now), the
    capacity price and the GPU-slots moves may still fill of each pool in each block
    (pools x blocks), the forecast's block means of price and carbon per datacenter (blocks
    x datacenters)."""

    block_start: NDArray[np.int64]
    block_len: NDArray[np.int64]
    pool_price: NDArray[np.float64]
    free: NDArray[np.float64]
    price: NDArray[np.float64]
    carbon: NDArray[np.float64]

    @staticmethod
    def of(block_start: NDArray[np.int64], block_len: NDArray[np.int64],
           pool_price: NDArray[np.float64], pool_used: NDArray[np.float64],
           capacity: NDArray[np.float64], forecast: Forecast, view: ScenarioView
           ) -> GroupPrices:
        """From a group's plan (blocks, prices and GPU-slots used, pools x blocks), its pools'
        GPU counts and the forecast (rows from the current slot)."""
        _, price, carbon = block_forecast(forecast, view, block_start, block_len)
        return GroupPrices(
            block_start=block_start, block_len=block_len, pool_price=pool_price,
            free=FILL_LIMIT * (capacity[:, None] * block_len.astype(float)[None, :]
                               - pool_used),
            price=price, carbon=carbon)


@dataclass(frozen=True)
class JobCosts:
    """A group's pricing of some jobs (rows): the least cost of each job's need there (inf
    where it does not fit); per block (jobs x blocks) the slots it runs on its cheapest
    configuration per sample and on its fastest, their pools and GPU counts; its fastest
    samples per slot."""

    cost: NDArray[np.float64]
    slots1: NDArray[np.float64]
    slots2: NDArray[np.float64]
    pool1: NDArray[np.int64]
    pool2: NDArray[np.int64]
    gpus1: NDArray[np.float64]
    gpus2: NDArray[np.float64]
    fastest: NDArray[np.float64]

    def fits(self, i: int, free: NDArray[np.float64]) -> bool:
        """Whether job row ``i``'s GPU-slots fit in ``free`` (pools x blocks)."""
        blocks = np.arange(free.shape[1])
        u1, u2 = self.slots1[i] * self.gpus1[i], self.slots2[i] * self.gpus2[i]
        f1 = np.maximum(free[self.pool1[i], blocks], 0.0)
        f2 = np.maximum(free[self.pool2[i], blocks], 0.0)
        same = self.pool1[i] == self.pool2[i]
        return bool(np.all(np.where(same, u1 + u2 <= f1 + 1e-9,
                                    (u1 <= f1 + 1e-9) & (u2 <= f2 + 1e-9))))

    def take_from(self, i: int, free: NDArray[np.float64], sign: float = 1.0) -> None:
        """Take job row ``i``'s GPU-slots from ``free`` (``sign`` -1: give them back)."""
        blocks = np.arange(free.shape[1])
        free[self.pool1[i], blocks] -= sign * self.slots1[i] * self.gpus1[i]
        free[self.pool2[i], blocks] -= sign * self.slots2[i] * self.gpus2[i]


def _fill(need: NDArray[np.float64], room: NDArray[np.float64], per_sample: NDArray[np.float64]
          ) -> NDArray[np.float64]:
    """The fractional knapsack of every row: ``room`` (samples, rows x items) filled
    cheapest item first (``per_sample``, rows x items) up to ``need`` (rows)."""
    order = np.argsort(per_sample, axis=1, kind="stable")
    room_s = np.take_along_axis(room, order, axis=1)
    before = np.cumsum(room_s, axis=1) - room_s
    take_s = np.clip(need[:, None] - before, 0.0, room_s)
    take = np.empty_like(take_s)
    np.put_along_axis(take, order, take_s, axis=1)
    return take


def _class_items(prices: GroupPrices, cf: ClassConfigs, carbon_price_per_kg: float,
                 with_room: bool) -> tuple[NDArray[np.float64], ...]:
    """Per block, a class's cheapest configuration per sample ``k1`` and its fastest ``k2``
    (module docstring): cost per slot, samples per slot, GPU count and pool of each
    (inf cost and 0 samples in a block without a configuration)."""
    n_b = prices.block_start.size
    per_slot = (cf.energy[:, None] * (prices.price[:, cf.dc].T
                                      + carbon_price_per_kg * prices.carbon[:, cf.dc].T / G_PER_KG)
                + cf.n_gpus[:, None] * prices.pool_price[cf.pool])
    if with_room:
        per_slot = np.where(prices.free[cf.pool] > 0, per_slot, np.inf)
    ok = np.isfinite(per_slot)
    cols = np.arange(n_b)
    k1 = np.argmin(per_slot / cf.samples_per_slot[:, None], axis=0)
    k2 = np.argmax(np.where(ok, cf.samples_per_slot[:, None], -1.0), axis=0)
    has = ok.any(axis=0)
    c1 = np.where(has, per_slot[k1, cols], np.inf)
    c2 = np.where(has, per_slot[k2, cols], np.inf)
    s1 = np.where(has, cf.samples_per_slot[k1], 0.0)
    s2 = np.where(has, cf.samples_per_slot[k2], 0.0)
    return (c1, s1, cf.n_gpus[k1].astype(float), cf.pool[k1].astype(float),
            c2, s2, cf.n_gpus[k2].astype(float), cf.pool[k2].astype(float))


def group_costs(prices: GroupPrices, classes: Sequence[ClassConfigs], job_class: NDArray[np.int64],
                need: NDArray[np.float64], end: NDArray[np.int64], scale: NDArray[np.float64],
                carbon_price_per_kg: float, with_room: bool = False) -> JobCosts:
    """``K_jg`` of every job in one group (module docstring): ``need`` in samples, ``end``
    the window end in slots from now, ``scale`` the jobs' throughput estimates;
    ``with_room``: on the pools with room in each block only (a job moving in)."""
    n_b, n_c = prices.block_start.size, len(classes)
    items = np.zeros((8, n_c, n_b))
    items[0] = items[4] = np.inf
    fastest = np.zeros(n_c)
    for c, cf in enumerate(classes):
        if cf.energy.size:
            items[:, c] = np.array(_class_items(prices, cf, carbon_price_per_kg, with_room))
            fastest[c] = float(cf.samples_per_slot.max())
    c1, s1, n1, p1, c2, s2, n2, p2 = (a[job_class] for a in items)
    slots = np.clip(end[:, None] - prices.block_start[None, :], 0,
                    prices.block_len[None, :]).astype(float)
    rate1, rate2 = s1 * scale[:, None], s2 * scale[:, None]
    extra = np.maximum(rate2 - rate1, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        per1 = np.where(rate1 > 0, c1 / np.where(rate1 > 0, rate1, 1.0), np.inf)
        per_up = np.where(extra > 0, (c2 - c1) / np.where(extra > 0, extra, 1.0), np.inf)
    per1 = np.where(np.isfinite(per1), per1, np.inf)
    per_up = np.where(np.isfinite(per_up), per_up, np.inf)
    room = np.concatenate([np.where(np.isfinite(per1), rate1 * slots, 0.0),
                           np.where(np.isfinite(per_up), extra * slots, 0.0)], axis=1)
    per = np.concatenate([per1, per_up], axis=1)
    take = _fill(need, room, per)
    cost = np.where(take > 0, take * np.where(np.isfinite(per), per, 0.0), 0.0).sum(axis=1)
    fits = take.sum(axis=1) >= need * (1.0 - 1e-9)
    with np.errstate(invalid="ignore", divide="ignore"):
        t2 = np.where(extra > 0, take[:, n_b:] / np.where(extra > 0, extra, 1.0), 0.0)
        t1 = np.where(rate1 > 0, take[:, :n_b] / np.where(rate1 > 0, rate1, 1.0), 0.0) - t2
    return JobCosts(cost=np.where(fits, cost, np.inf), slots1=np.maximum(t1, 0.0), slots2=t2,
                    pool1=p1.astype(np.int64), pool2=p2.astype(np.int64), gpus1=n1, gpus2=n2,
                    fastest=fastest[job_class] * scale)


@dataclass(frozen=True)
class MoveData:
    """The jobs' side of their moves: where each one's data are (datacenter index), the GB
    that travel, the seconds it loses besides the transfer (a running job's restart); and
    the links' energy per GB and seconds per GB between datacenters (inf: no link)."""

    origin: NDArray[np.int64]
    gb: NDArray[np.float64]
    lost_s: NDArray[np.float64]
    kwh_per_gb: NDArray[np.float64]
    s_per_gb: NDArray[np.float64]

    @staticmethod
    def of(sc: ScenarioView, jobs: Sequence[JobState], restart_s: float) -> MoveData:
        """From the jobs' state and the scenario's links."""
        names = [d.name for d in sc.datacenters]
        pos = {n: i for i, n in enumerate(names)}
        n_d = len(names)
        kwh = np.zeros((n_d, n_d))
        spg = np.full((n_d, n_d), np.inf)
        np.fill_diagonal(spg, 0.0)
        for a in range(n_d):
            for b in range(n_d):
                lk = sc.link(names[a], names[b]) if a != b else None
                if lk is not None:
                    kwh[a, b] = lk.transfer_energy_kwh_per_gb
                    spg[a, b] = lk.transfer_s(1.0)
        return MoveData(
            origin=np.array([pos[js.last_datacenter or js.job.home] for js in jobs],
                            dtype=np.int64),
            gb=np.array([js.move_gb for js in jobs], dtype=float),
            lost_s=np.array([restart_s if js.placement is not None else 0.0 for js in jobs],
                            dtype=float),
            kwh_per_gb=kwh, s_per_gb=spg)


def move_costs(data: MoveData, rows: NDArray[np.int64], members: Sequence[int],
               price: NDArray[np.float64], fastest: NDArray[np.float64],
               per_sample: NDArray[np.float64], slot_s: float) -> NDArray[np.float64]:
    """``M_jg`` of the jobs ``rows`` into one group (``members``, its datacenters; module
    docstring), at its site where it is least: the transfer's energy at the price the
    window LP charges it (:func:`~workbench.policies.window.transfer_price` of the block
    prices ``price``) and the work lost to the transfer and the restart, at ``fastest``
    samples per slot valued at ``per_sample``; 0 for a job whose data are in the group."""
    m = np.asarray(members, dtype=np.int64)
    p_d = np.array([transfer_price(price, int(d)) for d in m])
    o = data.origin[rows]
    gb = data.gb[rows]
    with np.errstate(invalid="ignore"):
        energy = gb[:, None] * data.kwh_per_gb[o][:, m] * p_d[None, :]
        lost = ((gb[:, None] * data.s_per_gb[o][:, m] + data.lost_s[rows, None]) / slot_s
                * (fastest * per_sample)[:, None])
    cost = np.where(np.isfinite(data.s_per_gb[o][:, m]), energy + lost, np.inf).min(axis=1)
    return np.where(np.isin(o, m), 0.0, cost)


@dataclass(frozen=True)
class Move:
    """A job (row) leaving group ``src`` for ``dst``, and its estimated gain."""

    job: int
    src: int
    dst: int
    gain: float


@dataclass(frozen=True)
class Movable:
    """The movable jobs of a round, as arrays: class, group, need (samples), window end
    (slots), throughput estimate; and their move data."""

    job_class: NDArray[np.int64]
    group: NDArray[np.int64]
    need: NDArray[np.float64]
    end: NDArray[np.int64]
    scale: NDArray[np.float64]
    data: MoveData


def choose_moves(jobs: Movable, prices: Sequence[GroupPrices],
                 classes: Sequence[Sequence[ClassConfigs]], groups: Sequence[Sequence[int]],
                 slot_s: float, carbon_price_per_kg: float, reassign_gain: float,
                 balance: float = math.inf) -> list[Move]:
    """The moves of one round (module docstring): ``classes[g]`` the classes'
    configurations in group ``g``, ``groups[g]`` its datacenters; no group takes jobs
    beyond ``balance`` times the mean per group. Returns the moves in the order taken."""
    n_j = jobs.group.size
    rows = np.arange(n_j)
    args = (jobs.job_class, jobs.need, jobs.end, jobs.scale, carbon_price_per_kg)
    stay = [group_costs(p, classes[g], *args) for g, p in enumerate(prices)]
    here = np.stack([s.cost for s in stay], axis=1)[rows, jobs.group]
    free = [p.free.copy() for p in prices]
    held = np.bincount(jobs.group, minlength=len(prices))
    most = balance * n_j / max(len(prices), 1)
    moved = ~np.isfinite(here)
    out: list[Move] = []
    for _ in range(PASSES):
        left = np.flatnonzero(~moved)
        if not left.size:
            break
        need = jobs.need[left]
        costs = [group_costs(replace(p, free=free[g]), classes[g], jobs.job_class[left], need,
                             jobs.end[left], jobs.scale[left], carbon_price_per_kg,
                             with_room=True)
                 for g, p in enumerate(prices)]
        k = np.stack([c.cost for c in costs], axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            per = k / np.maximum(need, 1e-300)[:, None]
            move = np.stack([move_costs(jobs.data, left, groups[g], p.price, costs[g].fastest,
                                        np.where(np.isfinite(per[:, g]), per[:, g], 0.0),
                                        slot_s) for g, p in enumerate(prices)], axis=1)
            gain = here[left, None] - k - move
        gain[np.arange(left.size), jobs.group[left]] = -np.inf
        gain[~np.isfinite(gain)] = -np.inf
        ok = gain > reassign_gain * here[left, None]
        top = np.argsort(-gain, axis=1, kind="stable")[:, :CHOICES_PER_JOB]
        pi = np.repeat(np.arange(left.size), top.shape[1])
        pg = top.ravel()
        keep = ok[pi, pg]
        pi, pg = pi[keep], pg[keep]
        order = np.lexsort((pg, pi, -gain[pi, pg]))
        taken = 0
        for i, g in zip(pi[order].tolist(), pg[order].tolist(), strict=True):
            j = int(left[i])
            if moved[j] or held[g] + 1 > most:
                continue
            if not costs[g].fits(i, free[g]):
                continue
            h = int(jobs.group[j])
            costs[g].take_from(i, free[g])
            stay[h].take_from(j, free[h], sign=-1.0)
            moved[j] = True
            held[g] += 1
            held[h] -= 1
            taken += 1
            out.append(Move(job=j, src=h, dst=g, gain=float(gain[i, g])))
        if not taken:
            break
    return out


def own_usage(jobs: Movable, prices: Sequence[GroupPrices],
              classes: Sequence[Sequence[ClassConfigs]], carbon_price_per_kg: float
              ) -> list[NDArray[np.float64]]:
    """Per group, the GPU-slots its own jobs take in each pool and block when each does its
    need at the least cost there (``K_jg``, at ``prices``; the room the opening leaves)."""
    out = []
    for g, p in enumerate(prices):
        rows = np.flatnonzero(jobs.group == g)
        c = group_costs(p, classes[g], jobs.job_class[rows], jobs.need[rows], jobs.end[rows],
                        jobs.scale[rows], carbon_price_per_kg)
        used = np.zeros(p.free.shape)
        blocks = np.broadcast_to(np.arange(p.block_start.size), c.slots1.shape)
        np.add.at(used, (c.pool1, blocks), c.slots1 * c.gpus1)
        np.add.at(used, (c.pool2, blocks), c.slots2 * c.gpus2)
        out.append(used)
    return out


def job_arrays(jobs: Sequence[JobState], need: Mapping[str, float], end: Mapping[str, int]
               ) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """Need (samples) and window end (slots) of each job, from its group's plan (``need``
    as a fraction of the job)."""
    return (np.array([need[js.job.job_id] * js.job.work_samples for js in jobs], dtype=float),
            np.array([end[js.job.job_id] for js in jobs], dtype=np.int64))
