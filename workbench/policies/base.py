"""The one interface every policy implements, and the records it reads and returns.

A policy sees a :class:`SlotState` (the scenario, the slot, the active jobs with their
remaining work, current placement and online estimates) and a :class:`Forecast` of price and
carbon, and returns an :class:`Allocation`: for each job that runs in the slot, where and how.
A job absent from the allocation is paused (or waits). The simulator never asks which policy
it is talking to.

:func:`slot_options` enumerates, for every active job, every feasible (datacenter, GPU type,
GPU count) with its best batch size and the slot's predicted progress, energy, cost and
carbon: the raw material of the Lyapunov MILP, the hindsight replay and the baselines.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from workbench import outcome as _outcome
from workbench.caps import Caps
from workbench.forecast.modes import Forecast
from workbench.model import Job, ScenarioView
from workbench.optim.info import SolveInfo
from workbench.outcome import RESIZE_S_DEFAULT, RESTART_S_DEFAULT
from workbench.outcome import vector as _vector
from workbench.policies.limits import with_power_limits
from workbench.units import G_PER_KG, W_PER_KW

__all__ = ["RESIZE_S_DEFAULT", "RESTART_S_DEFAULT"]


@dataclass(frozen=True)
class Placement:
    """Where and how a job runs in one slot; ``power_limit_w`` is the GPU power limit (W
    per GPU) it runs under, None for the GPU's maximum board power (the default)."""

    datacenter: str
    gpu_type: str
    n_gpus: int
    batch_size: int
    power_limit_w: float | None = None


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
    data_at : tuple of str
        Datacenters holding the job's dataset (empty: only its home).
    pending_s : float
        Seconds of an unfinished transfer or restart into ``last_datacenter`` still owed.
    power_scale : float, optional
        The online estimate of true / modelled throughput without the planning margin of
        ``throughput_scale`` (which near a deadline plans a predicted profile at its slow
        end): the speed at which the job's power is predicted against a power cap, since
        a job that runs faster draws more. None: ``throughput_scale``.
    """

    job: Job
    remaining: float
    placement: Placement | None
    last_datacenter: str | None
    phi: float
    throughput_scale: float = 1.0
    slots_run: int = 0
    data_at: tuple[str, ...] = ()
    pending_s: float = 0.0
    power_scale: float | None = None

    @property
    def progress(self) -> float:
        return 1.0 - self.remaining

    @property
    def move_gb(self) -> float:
        """Data a move away from where the job is now carries, GB: its checkpoint once it
        has run somewhere, else its dataset (its first trip away from home)."""
        return self.job.checkpoint_gb if self.last_datacenter is not None else self.job.dataset_gb


@dataclass(frozen=True)
class SlotState:
    """What a policy knows at the start of slot ``t``: the scenario's static facts (a
    :class:`~workbench.model.ScenarioView`: no true prices, no future arrivals), the jobs
    that have arrived and are active, and what was metered so far."""

    scenario: ScenarioView
    t: int
    time: datetime
    jobs: tuple[JobState, ...]
    carbon_kg_so_far: float = 0.0
    cost_so_far: float = 0.0
    carbon_kg_by_dc_so_far: Mapping[str, float] = field(default_factory=dict)
    """Metered carbon per datacenter since the start, kg (empty when not metered)."""
    soc_kwh: Mapping[str, float] = field(default_factory=dict)
    """Each battery's state of charge at the slot's start, kWh (by datacenter)."""
    peak_kw_so_far: Mapping[tuple[str, int, int, int, int], float] = field(
        default_factory=dict)
    """Per demand charge line (:attr:`workbench.bill.Bucket.key`), the largest grid import
    metered so far, kW: what the site already pays for."""
    resize_s: float = RESIZE_S_DEFAULT
    """Seconds the run loses when a job changes its GPU count in the same pool (the
    simulator's ``resize_s``, ``--resize-s``): what :func:`slot_options` predicts a resize
    costs."""


@dataclass(frozen=True)
class Allocation:
    """A policy's decision for one slot.

    ``placements`` maps job id to where it runs; jobs not in it pause or wait.
    ``expected_gain`` holds, for jobs whose datacenter changes, the gain that justified the
    move (NetCoef units of the policy), and ``reasons`` a short text per job for the plan.
    ``queues`` exposes the policy's internal queues (e.g. ``Z:guangzhou``) for recording.
    ``battery_kw`` is the policy's battery decision per datacenter (kW at the meter, positive
    discharging, negative charging; :func:`workbench.outcome.site_balance` clips it to what
    the battery can do); a battery it leaves out runs the site's greedy dispatch.
    """

    placements: Mapping[str, Placement]
    solve: SolveInfo | None = None
    expected_gain: Mapping[str, float] = field(default_factory=dict)
    reasons: Mapping[str, str] = field(default_factory=dict)
    queues: Mapping[str, float] = field(default_factory=dict)
    battery_kw: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class HindsightBound:
    """A lower bound on what a plan of the scenario can cost, from perfect hindsight.

    ``cost`` in the scenario's currency (the jobs' energy charges, through the sites'
    renewables and batteries where they have them) and ``carbon_kg`` the carbon of the
    bounding plan; ``demand`` the demand charges of its peaks (0 without demand charges);
    ``kind`` says where it
    comes from (the hindsight LP relaxation, the MILP solved to optimality, or a MILP's dual
    bound at its time limit).
    """

    cost: float
    carbon_kg: float
    kind: str
    demand: float = 0.0

    def as_dict(self) -> dict[str, float | str]:
        """``{"cost", "carbon_kg", "kind", "demand"}``, as runs store it
        (``meta["bound"]``)."""
        return {"cost": float(self.cost), "carbon_kg": float(self.carbon_kg),
                "kind": str(self.kind), "demand": float(self.demand)}


class NoHindsightBound:
    """Mixin of the policies that compute no hindsight bound (all but the hindsight plan)."""

    def hindsight_bound(self) -> HindsightBound | None:
        """None: only the hindsight plan computes a bound."""
        return None


class Policy(Protocol):
    """A scheduling policy: one decision per slot."""

    name: str

    def hindsight_bound(self) -> HindsightBound | None:
        """The hindsight bound the policy computed for this run (after ``reset``), or None:
        only a hindsight policy has one."""
        ...

    def reset(self, scenario: ScenarioView) -> None:
        """Forget everything; called once before the first slot of a run with the
        scenario's static facts (no prices, no jobs)."""

    def decide(self, state: SlotState, forecast: Forecast) -> Allocation:
        """Choose where and how each active job runs in slot ``state.t``."""
        ...


@dataclass(frozen=True)
class SlotOptions:
    """Every feasible (job, datacenter, GPU type, GPU count) for one slot, as flat arrays.

    Row ``i`` is one option of job ``job_index[i]`` (an index into ``jobs``), predicted by
    :func:`workbench.outcome.slot_outcome` with the online estimates. Per slot:
    ``progress`` is the fraction of the job's total work done (capped at what remains,
    after transfer and restart time are lost), ``energy_kwh`` includes PUE and transfer
    energy at both ends, ``cost`` is in the scenario's currency and ``carbon_kg`` in kg;
    ``lost_s`` the seconds of the slot lost, ``transfer_gb`` the data moved in,
    ``transfer_from`` where it comes from ("" if nothing moves) and ``movement_kwh`` the
    energy of moving and restarting; ``power_kw`` the option's average facility power in
    its datacenter (what the simulator meters against a power cap); ``rate_per_s`` the
    steady rate once the losses are paid, ``X(n, m) s_j E_phi(m) / W_j`` (fraction of the
    work per second; 0 for inference; at a power limit ``X / r_t``); ``power_limit_w`` the
    GPU power limit of the option (W per GPU, NaN: full power; empty: no menu,
    :mod:`workbench.policies.limits`).
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
    lost_s: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    transfer_gb: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    transfer_from: NDArray[np.str_] = field(default_factory=lambda: np.zeros(0, dtype=str))
    movement_kwh: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    power_kw: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    rate_per_s: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    power_limit_w: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))

    def __len__(self) -> int:
        return int(self.job_index.size)

    def placement(self, i: int) -> Placement:
        limit = (float(self.power_limit_w[i]) if self.power_limit_w.size
                 and np.isfinite(self.power_limit_w[i]) else None)
        return Placement(
            str(self.datacenter[i]),
            str(self.gpu_type[i]),
            int(self.n_gpus[i]),
            int(self.batch_size[i]),
            limit,
        )

    def rows_of(self, job_id: str) -> NDArray[np.int64]:
        k = next(i for i, js in enumerate(self.jobs) if js.job.job_id == job_id)
        return np.flatnonzero(self.job_index == k)


def as_caps(caps: Caps | None) -> Caps:
    """A policy's ``caps`` argument as the one caps record (None: no caps).

    Raises ValueError for anything but a :class:`~workbench.caps.Caps` (its values were
    checked when it was made) or for a percentage budget not yet resolved to kg.
    """
    if caps is None:
        return Caps()
    if not isinstance(caps, Caps):
        raise ValueError(f"caps must be a workbench.caps.Caps record, got {caps!r}")
    if caps.needs_baseline:
        raise ValueError("a percentage carbon cap must be resolved to kg first "
                         "(Caps.resolved, as the runner does)")
    return caps


# The batch grid lives with the slot-outcome model; kept under its old name for callers.
_batch_grid = _outcome.batch_grid


def slot_options(
    state: SlotState,
    price_per_kwh: Mapping[str, float],
    carbon_g_per_kwh: Mapping[str, float],
    gpu_counts: Mapping[str, tuple[int, ...]] | None = None,
    restart_s: float = RESTART_S_DEFAULT,
    resize_s: float | None = None,
) -> SlotOptions:
    """Enumerate every feasible option of every active job for one slot.

    Parameters
    ----------
    price_per_kwh, carbon_g_per_kwh : mapping region -> value
        The slot's price and carbon intensity (true or forecast) per grid region.
    gpu_counts : mapping job id -> GPU counts, optional
        Override a job's GPU-count menu (the operator's configuration menus).
    restart_s, resize_s : float
        Seconds lost on a start, resume, move or GPU-type change, and on a GPU-count
        change in the same pool (:func:`workbench.outcome.move_charges`; None: ``state.resize_s``).

    Notes
    -----
    Training option, for ``n`` GPUs of type ``g`` in datacenter ``d``: batch ``m*``
    maximises the estimated ECU ``X(n, m) * E_phi(m)`` on a geometric grid
    (:func:`workbench.outcome.best_batch`); its charges (dataset on a first run away from
    home, checkpoint move, restart) come from :func:`workbench.outcome.move_charges` and
    its progress, power and energy from :func:`workbench.outcome.slot_outcome` at the
    online throughput scale ``s_j`` (which scales progress *and* power) and the estimated
    gradient noise scale. Energy counts the seconds the GPUs are held (a finishing job
    frees them early). Cost and carbon price each end's energy at its own region.
    Inference option: its requested GPU count at ``load_fraction`` between idle and max
    board power, only in datacenters within ``max_latency_ms`` of its home.

    The charges are priced once per (job, datacenter); the training options of all jobs
    are evaluated at once (:func:`workbench.outcome.vector.training_slot_outcomes`, the
    same floating-point operations as the scalar model), in the row order of
    :func:`workbench.policies.options_scalar.slot_options_scalar` (job, datacenter, pool,
    GPU count), with identical values.
    """
    sc = state.scenario
    resize_s = state.resize_s if resize_s is None else resize_s
    slot_s = float(sc.slot_s)
    dcs = sc.datacenters
    pools = sc.pools
    pairs = _option_pairs(state, price_per_kwh, carbon_g_per_kwh, gpu_counts, [
        [i for i, p in enumerate(pools) if p.datacenter == dc.name] for dc in dcs])
    n_pairs = len(pairs.job)
    tmpl_len = np.array([len(t) for t in pairs.templates], dtype=np.int64)
    tmpl_start = np.cumsum(tmpl_len) - tmpl_len
    flat_pool = np.array([pi for t in pairs.templates for pi, _ in t], dtype=np.int64)
    flat_n = np.array([n for t in pairs.templates for _, n in t], dtype=np.int64)
    tid = np.asarray(pairs.template, dtype=np.int64)
    cnt = tmpl_len[tid] if n_pairs else np.zeros(0, dtype=np.int64)
    rep = np.repeat(np.arange(n_pairs), cnt)
    within = np.arange(rep.size) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    idx = tmpl_start[tid][rep] + within
    row_pool = flat_pool[idx]
    row_n = flat_n[idx]
    row_k = np.asarray(pairs.job, dtype=np.int64)[rep]
    row_d = np.asarray(pairs.dc, dtype=np.int64)[rep]
    n_rows = int(rep.size)
    jobs = state.jobs
    training = np.array([js.job.is_training for js in jobs], dtype=bool)
    train_row = training[row_k] if n_rows else np.zeros(0, dtype=bool)
    ch_lost = np.array([c.lost_s for c in pairs.charges], dtype=float)
    ch_tkwh = np.array([c.transfer_kwh for c in pairs.charges], dtype=float)
    energy = np.zeros(n_rows)
    progress = np.zeros(n_rows)
    lost = np.zeros(n_rows)
    movement = np.zeros(n_rows)
    power = np.zeros(n_rows)
    rate = np.zeros(n_rows)
    batch = np.zeros(n_rows, dtype=np.int64)
    pue = np.array([dc.pue for dc in dcs], dtype=float)
    tr = np.flatnonzero(train_row)
    if tr.size:
        out, m = _training_outcomes(state, row_k[tr], row_pool[tr], row_n[tr], pue[row_d[tr]],
                                    ch_lost[rep[tr]], ch_tkwh[rep[tr]], restart_s, resize_s)
        energy[tr], progress[tr], lost[tr] = out.energy_kwh, out.progress, out.lost_s
        movement[tr], power[tr], rate[tr] = out.movement_kwh, out.power_kw, out.rate_per_s
        batch[tr] = m.astype(np.int64)
    t_end = state.time.timestamp() + slot_s
    for i in np.flatnonzero(~train_row).tolist():
        js = jobs[int(row_k[i])]
        job = js.job
        dc = dcs[int(row_d[i])]
        up_s = None if job.end is None else slot_s - max(t_end - job.end.timestamp(), 0.0)
        o = _outcome.slot_outcome(
            job, slot_s=slot_s, pue=dc.pue, charges=pairs.charges[int(rep[i])],
            inference_power_w=_outcome.service_power_w(job, pools[int(row_pool[i])]),
            up_s=up_s)
        energy[i], progress[i], lost[i] = o.energy_kwh, o.progress, o.lost_s
        movement[i], power[i] = o.movement_kwh, o.power_kw
        batch[i] = job.batch_size
    price_d = np.array([float(price_per_kwh[dc.region]) for dc in dcs], dtype=float)
    carbon_d = np.array([float(carbon_g_per_kwh[dc.region]) for dc in dcs], dtype=float)
    src = np.array(pairs.source, dtype=float).reshape(-1, 3)
    dc_names = np.array([dc.name for dc in dcs], dtype=str)
    pool_types = np.array([p.gpu_type for p in pools], dtype=str)
    return with_power_limits(SlotOptions(  # the scenario's menu of GPU power limits
        jobs=jobs,
        job_index=row_k.astype(np.int64),
        datacenter=dc_names[row_d] if n_rows else np.zeros(0, dtype=str),
        gpu_type=pool_types[row_pool] if n_rows else np.zeros(0, dtype=str),
        n_gpus=row_n.astype(np.int64),
        batch_size=batch,
        progress=progress,
        energy_kwh=energy + src[rep, 2],
        cost=energy * price_d[row_d] + src[rep, 0],
        carbon_kg=energy * carbon_d[row_d] / G_PER_KG + src[rep, 1],
        moves=np.asarray(pairs.moves, dtype=bool)[rep],
        transfer_s=np.array([c.transfer_s for c in pairs.charges], dtype=float)[rep],
        lost_s=lost,
        transfer_gb=np.array([c.transfer_gb for c in pairs.charges], dtype=float)[rep],
        transfer_from=np.array([c.sources[0] if c.sources else "" for c in pairs.charges],
                               dtype=str)[rep],
        movement_kwh=movement,
        power_kw=power,
        rate_per_s=rate,
    ), state, price_per_kwh, carbon_g_per_kwh)


def _training_outcomes(
    state: SlotState, k: NDArray[np.int64], pool: NDArray[np.int64], n: NDArray[np.int64],
    pue: NDArray[np.float64], charged_s: NDArray[np.float64],
    transfer_kwh: NDArray[np.float64], restart_s: float, resize_s: float,
) -> tuple[_vector.SlotOutcomes, NDArray[np.float64]]:
    """The slot outcomes and best batches of training options (job ``k``, pool ``pool``,
    ``n`` GPUs; ``pue`` of the option's site, ``charged_s`` and ``transfer_kwh`` of its
    transfer charges): :func:`workbench.outcome.vector.training_slot_outcomes` on the jobs'
    online estimates, one profile per (application, pool); the restart owed is 0 in the
    job's own pool and GPU count, ``resize_s`` for another count there, else ``restart_s``."""
    sc = state.scenario
    jobs = state.jobs
    pools = sc.pools
    pool_at = {(p.datacenter, p.gpu_type): i for i, p in enumerate(pools)}
    apps = sorted({js.job.app for js in jobs})
    app_of = np.array([apps.index(js.job.app) for js in jobs], dtype=np.int64)
    combo = app_of[k] * len(pools) + pool
    uc, prof_of = np.unique(combo, return_inverse=True)
    profs = [sc.profile(apps[int(c) // len(pools)], pools[int(c) % len(pools)].gpu_type)
             for c in uc.tolist()]
    gpn = np.array([p.gpus_per_node for p in pools], dtype=np.int64)[pool]
    phi = np.array([js.phi for js in jobs], dtype=float)[k]
    m, x = _vector.best_batches_grouped(profs, prof_of, n, gpn, phi)
    prev_pool = np.array([-1 if js.placement is None else pool_at.get(
        (js.placement.datacenter, js.placement.gpu_type), -2) for js in jobs],
        dtype=np.int64)[k]
    prev_n = np.array([-1 if js.placement is None else int(js.placement.n_gpus)
                       for js in jobs], dtype=np.int64)[k]
    restart = np.where(prev_pool == pool, np.where(prev_n == n, 0.0, float(resize_s)),
                       float(restart_s))
    out = _vector.training_slot_outcomes(
        slot_s=float(sc.slot_s), pue=pue, owed_s=charged_s + restart,
        transfer_kwh=transfer_kwh,
        remaining=np.array([js.remaining for js in jobs], dtype=float)[k],
        work_samples=np.array([js.job.work_samples for js in jobs], dtype=float)[k],
        n_gpus=n, batch_size=m, x_model_sps=x,
        speed=np.array([js.throughput_scale for js in jobs], dtype=float)[k], phi=phi,
        m0=np.array([p.efficiency.m0 for p in profs], dtype=float)[prof_of],
        a1_w=np.array([p.energy.a1_w for p in profs], dtype=float)[prof_of],
        a2_w_per_sps=np.array([p.energy.a2_w_per_sps for p in profs], dtype=float)[prof_of],
        max_power_w=np.array([p.energy.max_power_w for p in profs], dtype=float)[prof_of])
    est = np.array([js.throughput_scale if js.power_scale is None else js.power_scale
                    for js in jobs], dtype=float)[k]
    faster = est != np.array([js.throughput_scale for js in jobs], dtype=float)[k]
    if faster.any():
        # Against a power cap the draw at the estimated speed, not at the planning margin's
        # slower one: P_it = min(n a1 + a2 X_model s_est, n P_max).
        a1 = np.array([p.energy.a1_w for p in profs], dtype=float)[prof_of]
        a2 = np.array([p.energy.a2_w_per_sps for p in profs], dtype=float)[prof_of]
        p_w = np.minimum(n * a1 + a2 * (x * est), n * np.array(
            [p.energy.max_power_w for p in profs], dtype=float)[prof_of])
        p_kw = p_w * out.used_s / float(sc.slot_s) * pue / W_PER_KW
        out = replace(out, power_kw=np.where(faster, p_kw, out.power_kw))
    return out, m


@dataclass
class _Pairs:
    """The (job, datacenter) pairs of a slot with their charges (see :func:`_option_pairs`)."""

    job: list[int] = field(default_factory=list)
    dc: list[int] = field(default_factory=list)
    moves: list[bool] = field(default_factory=list)
    charges: list[_outcome.Charges] = field(default_factory=list)
    source: list[float] = field(default_factory=list)
    template: list[int] = field(default_factory=list)
    templates: list[list[tuple[int, int]]] = field(default_factory=list)


def _option_pairs(
    state: SlotState, price_per_kwh: Mapping[str, float],
    carbon_g_per_kwh: Mapping[str, float], gpu_counts: Mapping[str, tuple[int, ...]] | None,
    dc_pools: list[list[int]],
) -> _Pairs:
    """Every (job, datacenter) a job may use this slot, in order, with its transfer charges,
    the sending ends' cost, carbon (kg) and energy (kWh), and its (pool, GPU count)
    template: the loops of the scalar reference
    (:func:`workbench.policies.options_scalar.slot_options_scalar`) down to the pool, the same
    filters (latency of a service, a link for the checkpoint, data that can reach ``d``)."""
    sc = state.scenario
    region_of = {dc.name: dc.region for dc in sc.datacenters}
    out = _Pairs()
    seen: dict[tuple[object, ...], int] = {}
    charged: dict[tuple[object, ...], tuple[_outcome.Charges | None, list[float] | None]] = {}
    for k, js in enumerate(state.jobs):
        job = js.job
        menu = tuple(gpu_counts.get(job.job_id, job.gpu_counts)) if gpu_counts else job.gpu_counts
        limit = job.max_latency_ms if job.max_latency_ms is not None else np.inf
        for d, dc in enumerate(sc.datacenters):
            if not job.is_training and sc.latency_ms(job.home, dc.name) > limit:
                continue
            key = (d, job.is_training, menu if job.is_training else job.requested_gpus,
                   job.gpu_types)
            tid = seen.get(key)
            if tid is None:
                tid = seen[key] = len(out.templates)
                out.templates.append(_pool_template(sc, job, menu, dc_pools[d]))
            if not out.templates[tid]:
                continue  # no pool of the site takes the job: no option, whatever it costs
            moves = js.last_datacenter is not None and js.last_datacenter != dc.name
            if moves and js.last_datacenter is not None and sc.link(
                    js.last_datacenter, dc.name) is None:
                continue
            # The charges are a function of these alone: priced once per slot for every
            # job that shares them (fresh jobs of one home, most of a trace).
            ckey = (job.is_training, job.home, job.dataset_gb, job.checkpoint_gb, dc.name,
                    js.last_datacenter, js.data_at, js.pending_s)
            got = charged.get(ckey)
            if got is None:
                ch = _outcome.transfer_charges(
                    job, dc.name, checkpoint_at=js.last_datacenter, data_at=js.data_at,
                    pending_s=js.pending_s, link=sc.link)
                got = charged[ckey] = (ch, None if ch is None else [
                    sum(kwh * float(price_per_kwh[region_of[s]]) for s, kwh in ch.source_kwh),
                    sum(kwh * float(carbon_g_per_kwh[region_of[s]]) / G_PER_KG
                        for s, kwh in ch.source_kwh),
                    sum(kwh for _, kwh in ch.source_kwh)] if ch.source_kwh else [0.0, 0.0, 0.0])
            ch, src = got
            if ch is None or src is None:
                continue
            out.job.append(k)
            out.dc.append(d)
            out.moves.append(moves)
            out.charges.append(ch)
            out.source += src
            out.template.append(tid)
    return out


def _pool_template(sc: ScenarioView, job: Job, menu: tuple[int, ...], pools: list[int]
                   ) -> list[tuple[int, int]]:
    """The (pool index, GPU count) options of ``job`` among ``pools`` (one datacenter's):
    its menu's counts that fit each allowed pool (a service: its requested count)."""
    out: list[tuple[int, int]] = []
    for pi in pools:
        pool = sc.pools[pi]
        if not job.allows(pool.gpu_type):
            continue
        if job.is_training:
            out += [(pi, int(n)) for n in menu if n <= pool.count]
        elif job.requested_gpus <= pool.count:
            out.append((pi, int(job.requested_gpus)))
    return out
