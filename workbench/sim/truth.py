"""Applying an allocation to the truth: the simulator's bookkeeping of each job, the checks
of an allocation, and one slot's outcome for every active job through the one slot model
(:mod:`workbench.outcome`), at the true price and carbon, with the hidden throughput factor
and noise (see :mod:`workbench.sim`)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr
from numpy.typing import NDArray

from workbench import outcome, perf
from workbench.estimate import OnlineEstimator, planning_speed_factor
from workbench.meter import Drawn, Meter, MeterSlot
from workbench.model import Datacenter, GpuPool, Job, Scenario
from workbench.outcome.supply import SiteSlot
from workbench.policies.base import Allocation, JobState, Placement
from workbench.power_limits import limit_factors
from workbench.schema import PLAN_ROW, PLAN_STORED_COLUMNS
from workbench.units import G_PER_KG

PlanRow = PLAN_ROW.row_type(PLAN_STORED_COLUMNS)
"""One plan row as the simulator records it, made by field name
(:data:`workbench.schema.PLAN_ROW` without ``slot_start``/``slot_end``)."""


class AllocationError(ValueError):
    """A policy returned an allocation that breaks the scenario's rules."""


@dataclass
class JobRun:
    """The simulator's mutable bookkeeping of one job (truth and estimates)."""

    job: Job
    first_slot: int
    stop_slot: int  # exclusive; n_slots for training (they run until done)
    factor: float
    est: OnlineEstimator | None
    done: float = 0.0
    placement: Placement | None = None
    last_dc: str | None = None
    slots_active: int = 0
    slots_run: int = 0
    migrations: int = 0
    first_start: datetime | None = None
    finish_time: datetime | None = None
    energy_kwh: float = 0.0
    cost: float = 0.0
    carbon_kg: float = 0.0
    capacity_seen: bool = False
    unserved: int = 0
    data_at: set[str] = field(default_factory=set)
    pending_s: float = 0.0
    transfer_gb: float = 0.0
    lost_s: float = 0.0

    @property
    def finished(self) -> bool:
        return self.finish_time is not None

    def active(self, t: int) -> bool:
        return self.first_slot <= t < self.stop_slot and not self.finished

    def state(self, now: datetime | None = None) -> JobState:
        if self.est is not None:
            phi = self.est.phi(self.done)
            remaining = max(1.0 - self.done, 0.0)
            left = (None if now is None or self.job.deadline is None
                    else (self.job.deadline - now).total_seconds())
            scale = planning_speed_factor(self.est, self.job, remaining, left)
            power_scale = self.est.speed_factor
        else:
            phi, scale, remaining, power_scale = 1.0, 1.0, 1.0, 1.0
        return JobState(
            job=self.job,
            remaining=remaining,
            placement=self.placement,
            last_datacenter=self.last_dc,
            phi=phi,
            throughput_scale=scale,
            slots_run=self.slots_run,
            data_at=tuple(sorted(self.data_at)),
            pending_s=self.pending_s,
            power_scale=power_scale,
        )


def horizon_cube(scenario: Scenario) -> xr.Dataset:
    """The scenario's cube cut to its horizon, so that row ``t`` is slot ``t``."""
    grid = scenario.grid
    times = pd.DatetimeIndex(grid["time"].values)
    start = pd.Timestamp(scenario.start).tz_convert("UTC").tz_localize(None)
    pos = times.get_indexer([start])[0]
    if pos < 0:
        raise ValueError(
            f"scenario {scenario.name!r}: its grid cube has no time step at the scenario start "
            f"{scenario.start.isoformat()}; rebuild the cube from the start"
        )
    if times.size - pos < scenario.n_slots:
        raise ValueError(
            f"scenario {scenario.name!r}: its grid cube covers {times.size - pos} slots from the "
            f"start, fewer than n_slots {scenario.n_slots}"
        )
    cube = grid.isel(time=slice(pos, pos + scenario.n_slots))
    if "slot_s" not in cube.attrs:
        cube = cube.assign_attrs(slot_s=scenario.slot_s)
    for var in ("price_per_kwh", "carbon_g_per_kwh"):
        if not np.all(np.isfinite(cube[var].values)):
            raise ValueError(
                f"scenario {scenario.name!r}: {var} has missing values inside the horizon; "
                "fill or re-import the grid data"
            )
    return cube


def _observe(
    r: JobRun, n: int, m: int, speed: float, phi_true: float, noise: float,
    rng: np.random.Generator,
) -> None:
    """Feed one slot's noisy observations to the job's estimator.

    The job reports its throughput (``speed`` times the model's, mapped onto the reference
    profile) and gradient statistics with ``grad_var / grad_sqr = phi_true / m0``, each
    multiplied by log-normal noise of sigma ``noise``.
    """
    est = r.est
    assert est is not None
    x_ref = float(perf.throughput(est.profile.throughput, n, m, est.gpus_per_node))
    z = np.exp(noise * rng.standard_normal(2)) if noise > 0 else np.ones(2)
    m0 = est.profile.efficiency.m0
    est.update(n, m, observed_throughput_sps=speed * x_ref, grad_sqr=float(z[0]),
               grad_var=float(phi_true / m0 * z[1]))


@dataclass
class SlotApplied:
    """What one slot's allocation did to the truth: the plan rows (:data:`PlanRow`), the data
    movements (rows of :data:`workbench.schema.MIGRATION`), per datacenter the jobs' energy
    (kWh), their part of the bill and of the carbon (``cost``, ``carbon_kg``: the site's
    controllable part this slot, :mod:`workbench.meter`), their energy at the grid's price
    and carbon (``cost_at_grid_price``, ``carbon_kg_at_grid_intensity``), busy GPUs per pool,
    and the counts of jobs running, waiting and inference services unserved."""

    plan: list[tuple[Any, ...]]
    migrations: list[dict[str, Any]]
    energy_kwh: dict[str, float]
    cost: dict[str, float]
    carbon_kg: dict[str, float]
    cost_at_grid_price: dict[str, float]
    carbon_kg_at_grid_intensity: dict[str, float]
    busy: Counter[tuple[str, str]]
    running: int = 0
    waiting: int = 0
    unserved: int = 0
    meter: MeterSlot | None = None
    """The site meter's slot: each datacenter's balance, its no-jobs reference, the
    controllable demand charges (:class:`workbench.meter.MeterSlot`)."""
    trimmed: list[PowerTrim] = field(default_factory=list)
    drawn: list[list[Drawn]] = field(default_factory=list)
    """Per plan row, what it drew at each site this slot (:data:`workbench.meter.Drawn`):
    what the meter shares the slot's controllable part by."""

    @property
    def sites(self) -> dict[str, SiteSlot]:
        """Each datacenter's energy balance at the meter."""
        return {} if self.meter is None else self.meter.sites


@dataclass(frozen=True)
class PowerTrim:
    """A training job the simulator paused in slot ``t`` because the allocation would have
    put ``datacenter``'s grid import above its power cap: the import with every placed job
    (``drawn_kw``) against its cap (``cap_kw``), both kW."""

    t: int
    job_id: str
    datacenter: str
    drawn_kw: float
    cap_kw: float


@dataclass
class Truth:
    """The true world of one run: the horizon's price and carbon (``price[t, r]``,
    ``carbon[t, r]`` by region index), the sites, the pools, the losses of a restart and a
    resize, the hidden noise (sigma ``noise``, drawn from ``rng`` in job order) and the
    power caps it enforces on each datacenter's grid import (``power_cap_kw``, kW; empty:
    none)."""

    scenario: Scenario
    price: np.ndarray
    carbon: np.ndarray
    region_index: dict[str, int]
    restart_s: float
    resize_s: float
    noise: float
    rng: np.random.Generator
    limit_kw: NDArray[np.float64] | None = None
    """Per slot and datacenter, the grid import limit it holds (power caps and grid
    events, kW, ``inf``: none; None: no limit anywhere)."""
    dcs: dict[str, Datacenter] = field(init=False)
    pools: dict[tuple[str, str], GpuPool] = field(init=False)
    meter: Meter = field(init=False)
    """The site meter (:mod:`workbench.meter`): power caps are on its grid import."""

    def __post_init__(self) -> None:
        sc = self.scenario
        self.dcs = {d.name: d for d in sc.datacenters}
        self.pools = {(p.datacenter, p.gpu_type): p for p in sc.pools}
        self.meter = Meter(sc, self.price, self.carbon, self.region_index,
                           limit_kw=self.limit_kw)

    @property
    def soc_kwh(self) -> dict[str, float]:
        """Each battery's state of charge now, kWh (by datacenter)."""
        return self.meter.soc

    @classmethod
    def of(cls, sc: Scenario, cube: xr.Dataset, *, restart_s: float, resize_s: float,
           noise: float, seed: int, limit_kw: NDArray[np.float64] | None = None
           ) -> Truth:
        """The truth of ``sc`` over its horizon cube (:func:`horizon_cube`); the per-slot
        noise drawn from the generator seeded ``[seed, 1]``; ``limit_kw`` the import limits
        it holds, (slots, D) kW (:func:`workbench.meter.import_limits_kw`)."""
        regions = [str(r) for r in cube["region"].values]
        if limit_kw is not None and not np.isfinite(limit_kw).any():
            limit_kw = None
        return cls(sc, price=np.asarray(cube["price_per_kwh"].values, dtype=float),
                   carbon=np.asarray(cube["carbon_g_per_kwh"].values, dtype=float),
                   region_index={r: i for i, r in enumerate(regions)}, restart_s=restart_s,
                   resize_s=resize_s, noise=noise, rng=np.random.default_rng([seed, 1]),
                   limit_kw=limit_kw)

    def apply(self, alloc: Allocation, active: list[JobRun], t: int, t_start: datetime
              ) -> SlotApplied:
        """Run slot ``t`` of every active job as ``alloc`` places it (a job it leaves out
        pauses) and update each job's bookkeeping.

        Under enforced power caps the allocation is first trimmed to them
        (:meth:`_within_power_caps`): a job whose true draw would put its datacenter above
        its cap pauses (a :class:`PowerTrim` in the result).
        """
        placements: Mapping[str, Placement] = alloc.placements
        etas: dict[str, float] = {}
        trimmed: list[PowerTrim] = []
        if self.limit_kw is not None and placements:
            placements, etas, trimmed = self._within_power_caps(placements, active, t,
                                                                t_start, alloc.battery_kw)
        busy: Counter[tuple[str, str]] = Counter()
        for placed in placements.values():
            busy[(placed.datacenter, placed.gpu_type)] += placed.n_gpus
        zero = dict.fromkeys(self.dcs, 0.0)
        out = SlotApplied(plan=[], migrations=[], energy_kwh=dict(zero), cost=dict(zero),
                          carbon_kg=dict(zero), cost_at_grid_price=dict(zero),
                          carbon_kg_at_grid_intensity=dict(zero), busy=busy,
                          trimmed=trimmed)
        for r in active:
            r.slots_active += 1
            p = placements.get(r.job.job_id)
            if p is None:
                self._pause(r, t, out)
            else:
                out.running += 1
                self._run(r, p, alloc, t, t_start, out, etas.get(r.job.job_id))
        self._balance(alloc, t, out)
        # One row per active job, in order: each job's share of the bill and carbon.
        row: Any
        for r, row in zip(active, out.plan, strict=True):
            r.cost += row.cost
            r.carbon_kg += row.carbon_kg
        return out

    def _balance(self, alloc: Allocation, t: int, out: SlotApplied) -> None:
        """Meter the slot (:class:`workbench.meter.Meter`: each datacenter's load with its
        idle load from its sources, battery and the grid, and the no-jobs reference), give
        each plan row its share of the slot's controllable charge and carbon, and split
        each row's energy by its datacenter-slot's mix (pro rata)."""
        at_grid = {n: (out.cost_at_grid_price[n], out.carbon_kg_at_grid_intensity[n])
                   for n in self.dcs}
        slot = self.meter.read(t, out.energy_kwh, alloc.battery_kw, at_grid)
        out.meter = slot
        for name in self.dcs:
            out.cost[name], out.carbon_kg[name] = slot.controllable(name)
        rows: list[Any] = out.plan
        shares = self.meter.shares(slot, out.drawn)
        split = {}
        for name, site in slot.sites.items():
            load = site.load_kwh
            split[name] = ((site.renewable_to_load_kwh / load, site.discharge_kwh / load,
                            site.grid_to_load_kwh / load) if load > 0 else (0.0, 0.0, 1.0))
        for i, (row, (cost, kg)) in enumerate(zip(rows, shares, strict=True)):
            if row.n_gpus or cost or kg:
                ren, bat, grid = split[row.region]
                rows[i] = row._replace(cost=cost, carbon_kg=kg,
                                       renewable_kwh=row.energy_kwh * ren,
                                       battery_kwh=row.energy_kwh * bat,
                                       grid_kwh=row.energy_kwh * grid)

    def _charges(self, r: JobRun, p: Placement) -> outcome.Charges:
        """What placing ``r`` at ``p`` owes this slot (restart, transfers)."""
        prev = (None if r.placement is None else
                (r.placement.datacenter, r.placement.gpu_type, int(r.placement.n_gpus)))
        ch = outcome.move_charges(
            r.job, p.datacenter, p.gpu_type, int(p.n_gpus), previous=prev,
            checkpoint_at=r.last_dc, data_at=r.data_at, pending_s=r.pending_s,
            link=self.scenario.link, restart_s=self.restart_s, resize_s=self.resize_s)
        assert ch is not None  # links checked by validate_allocation
        return ch

    def _eta(self) -> float:
        """The slot's throughput noise of one job: ``LogNormal(0, noise)`` (1 without)."""
        return float(np.exp(self.noise * self.rng.standard_normal())) if self.noise > 0 \
            else 1.0

    def _within_power_caps(
        self, placements: Mapping[str, Placement], active: list[JobRun], t: int,
        t_start: datetime, battery_kw: Mapping[str, float],
    ) -> tuple[dict[str, Placement], dict[str, float], list[PowerTrim]]:
        """The placements trimmed to the enforced power caps, with the throughput noise
        drawn for each running training job, and what was trimmed.

        Each datacenter's grid import is what the meter reads (:meth:`Meter.import_kw`):
        its jobs' true facility energy in the slot (:func:`workbench.outcome.slot_outcome`
        at the truth, transfers' halves at both ends) over the slot's hours, plus its idle
        load, less what its own sources and its battery deliver (the allocation's battery
        decision, and the discharge the site's controller adds to keep the cap,
        :func:`workbench.outcome.supply.site_balance`).
        Where it exceeds the cap, training jobs that draw there (placed there, or moving away
        with half their transfer there) pause until it fits: first
        those the allocation starts, resumes or moves here this slot (its marginal
        decisions), then those that ran here in the last slot, the most power first within
        each. Inference services are never paused (a cap below the idle load plus what
        they alone draw is refused before the run).
        """
        kept = dict(placements)
        etas: dict[str, float] = {}
        kw_of: dict[str, list[tuple[str, float]]] = {}
        draw: dict[str, float] = dict.fromkeys(self.dcs, 0.0)
        slot_h = self.scenario.slot_s / 3600.0
        for r in active:
            p = placements.get(r.job.job_id)
            if p is None:
                continue
            ch = self._charges(r, p)
            if r.job.is_training:
                etas[r.job.job_id] = eta = self._eta()
                res = self._training_outcome(r, p, ch, eta)
            else:
                res = self._service_outcome(r, p, ch, t_start)
            kw_of[r.job.job_id] = [(p.datacenter, res.energy_kwh / slot_h)] + [
                (d, kwh / slot_h) for d, kwh in res.source_kwh]
            for d, kw in kw_of[r.job.job_id]:
                draw[d] += kw
        trimmed: list[PowerTrim] = []
        by_id = {r.job.job_id: r for r in active}
        meter = self.meter
        assert self.limit_kw is not None
        for dc, cap in zip(self.dcs, self.limit_kw[t].tolist(), strict=True):
            if not math.isfinite(cap):
                continue
            bat = battery_kw.get(dc)
            drawn = meter.import_kw(dc, t, draw[dc], bat)
            if drawn <= cap * (1 + 1e-9):
                continue
            # Training jobs that draw here: those placed here and those whose move away
            # leaves half its transfer here (paused, a job does not move).
            here = [j for j in kept if by_id[j].job.is_training
                    and any(d == dc and kw > 0 for d, kw in kw_of[j])]
            here.sort(key=lambda j: (by_id[j].placement == placements[j],
                                     -sum(kw for d, kw in kw_of[j] if d == dc), j))
            for j in here:
                if meter.import_kw(dc, t, draw[dc], bat) <= cap * (1 + 1e-9):
                    break
                del kept[j]
                for d, kw in kw_of[j]:
                    draw[d] -= kw
                trimmed.append(PowerTrim(t=t, job_id=j, datacenter=dc, drawn_kw=drawn,
                                         cap_kw=cap))
        return kept, etas, trimmed

    def _prices(self, t: int, datacenter: str) -> tuple[str, float, float]:
        reg = self.dcs[datacenter].region
        i = self.region_index[reg]
        return reg, float(self.price[t, i]), float(self.carbon[t, i])

    def _pause(self, r: JobRun, t: int, out: SlotApplied) -> None:
        job = r.job
        where = r.last_dc or job.home
        reg, pr, cg = self._prices(t, where)
        if job.is_training:
            out.waiting += 1
            need = min(job.gpu_counts)
            if any(pool.count - out.busy[key] >= need
                   for key, pool in self.pools.items() if job.allows(pool.gpu_type)):
                r.capacity_seen = True
        else:
            out.unserved += 1
            r.unserved += 1
        r.placement = None
        out.plan.append(PlanRow(
            job_id=job.job_id, region=where, gpu_type="", n_gpus=0, batch_size=0,
            action="pause", energy_kwh=0.0, cost=0.0, carbon_kg=0.0, price_per_kwh=pr,
            carbon_g_per_kwh=cg, progress=0.0, transfer_gb=0.0, lost_s=0.0, slot=t,
            kind=job.kind, home=job.home, grid_region=reg, used_s=0.0, movement_kwh=0.0,
            remaining=max(1.0 - r.done, 0.0) if job.is_training else 1.0, power_limit_w=0.0,
            renewable_kwh=0.0, battery_kwh=0.0, grid_kwh=0.0, limit_saved_kwh=0.0))
        out.drawn.append([])

    def _training_outcome(self, r: JobRun, p: Placement, ch: outcome.Charges, eta: float
                          ) -> outcome.SlotOutcome:
        """The true slot outcome of training job ``r`` at ``p`` with throughput noise
        ``eta`` (nothing is updated)."""
        job = r.job
        pool = self.pools[(p.datacenter, p.gpu_type)]
        prof = self.scenario.profile(job.app, p.gpu_type)
        x_model = float(perf.throughput(prof.throughput, p.n_gpus, p.batch_size,
                                        pool.gpus_per_node))
        r_t = r_p = 1.0
        if p.power_limit_w is not None and p.power_limit_w < pool.max_power_w:
            # The power-limit model on the job's true draw at full power.
            full_w = float(outcome.training_power_w(prof, int(p.n_gpus),
                                                    x_model * r.factor * eta))
            r_t, r_p = limit_factors(p.gpu_type, p.power_limit_w / pool.max_power_w,
                                     full_w / int(p.n_gpus), pool.max_power_w)
        return outcome.slot_outcome(
            job, slot_s=float(self.scenario.slot_s), pue=self.dcs[p.datacenter].pue,
            charges=ch, remaining=1.0 - r.done, profile=prof, n_gpus=int(p.n_gpus),
            batch_size=int(p.batch_size), x_model_sps=x_model, speed=r.factor * eta,
            phi=float(prof.efficiency.phi(r.done)), gpus_per_node=pool.gpus_per_node,
            time_factor=r_t, power_factor=r_p)

    def _service_outcome(self, r: JobRun, p: Placement, ch: outcome.Charges,
                         t_start: datetime) -> outcome.SlotOutcome:
        """The slot outcome of inference service ``r`` at ``p``: a service ending inside
        the slot draws power only until its end."""
        job = r.job
        assert job.end is not None
        pool = self.pools[(p.datacenter, p.gpu_type)]
        return outcome.slot_outcome(
            job, slot_s=float(self.scenario.slot_s), pue=self.dcs[p.datacenter].pue,
            charges=ch, inference_power_w=outcome.service_power_w(job, pool, p.n_gpus),
            up_s=(job.end - t_start).total_seconds())

    def _outcome(self, r: JobRun, p: Placement, ch: outcome.Charges, t: int,
                 t_start: datetime, eta: float | None = None
                 ) -> tuple[outcome.SlotOutcome, float, bool]:
        """The slot's outcome of ``r`` placed at ``p`` with charges ``ch``, its progress and
        whether it finishes (a training job's online estimate is updated); ``eta`` the
        throughput noise already drawn for it (drawn here when None)."""
        job = r.job
        sc = self.scenario
        if job.is_training:
            if eta is None:
                eta = self._eta()
            res = self._training_outcome(r, p, ch, eta)
            finishing = res.finishes
            # Online re-estimation from what the job reports this slot.
            if res.used_s > res.lost_s:
                phi_true = float(sc.profile(job.app, p.gpu_type).efficiency.phi(r.done))
                _observe(r, p.n_gpus, p.batch_size, r.factor * eta, phi_true, self.noise,
                         self.rng)
            r.done = 1.0 if finishing else r.done + res.progress
            return res, res.progress, finishing
        res = self._service_outcome(r, p, ch, t_start)
        # The last slot before the service's end (not merely the horizon's last).
        assert job.end is not None
        return res, 0.0, t == max(sc.slot_of(job.end, after=True), 0) - 1

    def _run(self, r: JobRun, p: Placement, alloc: Allocation, t: int, t_start: datetime,
             out: SlotApplied, eta: float | None = None) -> None:
        job = r.job
        reg, pr, cg = self._prices(t, p.datacenter)
        moves = r.last_dc is not None and r.last_dc != p.datacenter
        ch = self._charges(r, p)
        res, delta, finishing = self._outcome(r, p, ch, t, t_start, eta)
        used_s, lost = res.used_s, res.lost_s
        r.pending_s = res.pending_s
        if finishing:
            action = "finish"
        elif moves:
            action = "migrate"
        elif r.slots_run == 0:
            action = "start"
        elif r.placement is not None and r.placement.datacenter == p.datacenter:
            action = "run"
        else:
            action = "resume"
        if moves:
            r.migrations += 1
        if ch.transfer_gb > 0 or moves:
            out.migrations.append(_movement(r, p, ch, alloc, moves, t_start))
            r.data_at.add(p.datacenter)
            r.transfer_gb += ch.transfer_gb
        if r.first_start is None:
            r.first_start = t_start
        if finishing and job.is_training:
            r.finish_time = t_start + timedelta(seconds=used_s)
        energy, drawn = self._charge(p.datacenter, t, res, pr, cg, out)
        r.energy_kwh += energy
        r.lost_s += lost
        r.slots_run += 1
        r.placement = p
        r.last_dc = p.datacenter
        out.plan.append(PlanRow(
            job_id=job.job_id, region=p.datacenter, gpu_type=p.gpu_type,
            n_gpus=int(p.n_gpus), batch_size=int(p.batch_size), action=action,
            energy_kwh=energy, cost=0.0, carbon_kg=0.0, price_per_kwh=pr,
            carbon_g_per_kwh=cg, progress=delta, transfer_gb=ch.transfer_gb, lost_s=lost,
            slot=t, kind=job.kind, home=job.home, grid_region=reg, used_s=used_s,
            movement_kwh=res.movement_kwh,
            remaining=max(1.0 - r.done, 0.0) if job.is_training else 1.0,
            power_limit_w=float(p.power_limit_w if p.power_limit_w is not None else
                                self.pools[(p.datacenter, p.gpu_type)].max_power_w),
            renewable_kwh=0.0, battery_kwh=0.0, grid_kwh=energy,
            limit_saved_kwh=res.limit_saved_kwh))
        out.drawn.append(drawn)

    def _charge(self, datacenter: str, t: int, res: outcome.SlotOutcome, pr: float,
                cg: float, out: SlotApplied) -> tuple[float, list[Drawn]]:
        """Meter the slot's energy of one job at each end (the sending datacenters' half of
        a transfer at theirs), at the grid's price and carbon; returns the job's energy
        (kWh) and the (datacenter, kWh) it drew. Its share of the bill follows when the slot
        is metered (:meth:`_balance`)."""
        energy = res.energy_kwh
        cost, carb = energy * pr, energy * cg / G_PER_KG
        drawn = [(datacenter, energy, cost, carb)]
        out.energy_kwh[datacenter] += energy
        out.cost_at_grid_price[datacenter] += cost
        out.carbon_kg_at_grid_intensity[datacenter] += carb
        for src_dc, kwh in res.source_kwh:
            _, s_pr, s_cg = self._prices(t, src_dc)
            s_cost = kwh * s_pr
            s_carb = kwh * s_cg / G_PER_KG
            out.energy_kwh[src_dc] += kwh
            out.cost_at_grid_price[src_dc] += s_cost
            out.carbon_kg_at_grid_intensity[src_dc] += s_carb
            drawn.append((src_dc, kwh, s_cost, s_carb))
            energy += kwh
        return energy, drawn


def _movement(r: JobRun, p: Placement, ch: outcome.Charges, alloc: Allocation, moves: bool,
              t_start: datetime) -> dict[str, Any]:
    """The migrations row of data moving into ``p.datacenter`` this slot."""
    job = r.job
    src = r.last_dc if moves else (ch.sources[0] if ch.sources else job.home)
    what = ("dataset+checkpoint" if ch.dataset_gb > 0 and ch.checkpoint_gb > 0
            else "dataset" if ch.dataset_gb > 0 else "checkpoint")
    return {
        "slot_start": t_start, "job_id": job.job_id, "from_region": src,
        "to_region": p.datacenter, "checkpoint_gb": ch.checkpoint_gb,
        "dataset_gb": ch.dataset_gb, "transfer_gb": ch.transfer_gb,
        "transfer_s": ch.transfer_s, "moved": what,
        "expected_gain": float(alloc.expected_gain.get(job.job_id, math.nan)),
        "reason": str(alloc.reasons.get(job.job_id, "")) or (
            "first run away from home: its dataset travels" if not moves else ""),
    }
