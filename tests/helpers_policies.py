"""Tiny inline scenarios and a minimal slot loop for the policy tests.

The loop is deliberately small: truth is the model itself (no noise), a job is active from
the first slot starting at or after its arrival, and a slot's outcome is the matching row of
:func:`slot_options` at the true prices.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import numpy as np
import xarray as xr

from workbench import perf
from workbench.model import Datacenter, GpuPool, Job, Link, Scenario
from workbench.policies.base import (
    Allocation,
    Forecast,
    JobState,
    Placement,
    Policy,
    SlotState,
    slot_options,
)
from workbench.policies.milp import SlotProblem

START = datetime(2024, 1, 1, tzinfo=UTC)
SLOT_S = 900


def profile(app: str = "toy", gpu_type: str = "A100", speed: float = 1.0) -> perf.JobProfile:
    """A small Pollux-style profile (sublinear scaling, growing phi)."""
    return perf.JobProfile(
        app=app,
        gpu_type=gpu_type,
        throughput=perf.ThroughputParams(
            alpha_c=0.05 / speed, beta_c=0.002 / speed, alpha_n=0.02, beta_n=0.005,
            alpha_r=0.05, beta_r=0.01, gamma=1.5),
        efficiency=perf.EfficiencyParams(
            m0=128, min_batch=64, max_batch=2048, max_local_batch=256,
            phi_progress=(0.0, 1.0), phi_values=(200.0, 2000.0)),
        energy=perf.EnergyParams(a1_w=150.0, a2_w_per_sps=0.05, max_power_w=300.0),
    )


def grid(prices: Sequence[Sequence[float]], carbons: Sequence[Sequence[float]],
         regions: Sequence[str]) -> xr.Dataset:
    """Cube over (time, region) from per-slot rows of per-region values."""
    p = np.asarray(prices, dtype=float)
    c = np.asarray(carbons, dtype=float)
    times = np.array([np.datetime64(START.replace(tzinfo=None)) + np.timedelta64(SLOT_S * i, "s")
                      for i in range(p.shape[0])], dtype="datetime64[ns]")
    ds = xr.Dataset(
        {"price_per_kwh": (("time", "region"), p), "carbon_g_per_kwh": (("time", "region"), c)},
        coords={"time": times, "region": list(regions)},
    )
    ds["price_per_kwh"].attrs.update(units="CNY/kWh", currency="CNY")
    ds["carbon_g_per_kwh"].attrs.update(units="gCO2/kWh")
    return ds


def training_job(job_id: str, home: str = "a", work_slots: float = 2.0, *,
                 arrival_slot: int = 0, deadline_slot: int | None = None,
                 gpus: int = 2, counts: tuple[int, ...] = (1, 2, 4),
                 checkpoint_gb: float = 1.0) -> Job:
    """A training job whose work takes ``work_slots`` slots on ``gpus`` A100s at full speed."""
    prof = profile()
    m = perf.best_batch(prof, gpus, phi=200.0)
    rate = float(perf.ecu(prof, gpus, m, phi=200.0))
    return Job(
        job_id=job_id, kind="training", app="toy",
        arrival=START + timedelta(seconds=SLOT_S * arrival_slot), home=home,
        requested_gpus=gpus, gpu_counts=counts, batch_size=128,
        work_samples=rate * SLOT_S * work_slots,
        deadline=None if deadline_slot is None else START + timedelta(
            seconds=SLOT_S * deadline_slot),
        checkpoint_gb=checkpoint_gb,
    )


def inference_job(job_id: str, home: str = "a", gpus: int = 1, end_slot: int = 8,
                  max_latency_ms: float = 100.0) -> Job:
    return Job(job_id=job_id, kind="inference", app="toy-serve", arrival=START, home=home,
               requested_gpus=gpus, gpu_counts=(gpus,), batch_size=1,
               end=START + timedelta(seconds=SLOT_S * end_slot), max_latency_ms=max_latency_ms,
               load_fraction=0.5)


def tiny_scenario(
    jobs: Sequence[Job],
    prices: Sequence[Sequence[float]] | None = None,
    carbons: Sequence[Sequence[float]] | None = None,
    *,
    n_slots: int = 8,
    gpus_per_pool: int = 4,
    regions: Sequence[str] = ("a", "b"),
    bandwidth_gbps: float = 10.0,
) -> Scenario:
    """Datacenters named like their regions, one A100 pool each, all pairs linked."""
    if prices is None:
        prices = [[1.0] * len(regions)] * n_slots
    if carbons is None:
        carbons = [[500.0] * len(regions)] * n_slots
    dcs = tuple(Datacenter(r, r, r.upper(), "UTC", pue=1.2) for r in regions)
    pools = tuple(GpuPool(r, "A100", gpus_per_pool, idle_power_w=50.0, max_power_w=300.0)
                  for r in regions)
    links = tuple(Link(a, b, bandwidth_gbps, 20.0, 0.01)
                  for i, a in enumerate(regions) for b in regions[i + 1:])
    return Scenario(
        name="tiny", datacenters=dcs, pools=pools, links=links, jobs=tuple(jobs),
        profiles=(profile(),), grid=grid(prices, carbons, regions), start=START,
        slot_s=SLOT_S, n_slots=n_slots,
    )


def perfect_forecast(sc: Scenario, t: int) -> Forecast:
    regions = tuple(str(r) for r in sc.grid["region"].values)
    return Forecast(
        t=t, regions=regions,
        price_per_kwh=np.asarray(sc.grid["price_per_kwh"].values[t:sc.n_slots], dtype=float),
        carbon_g_per_kwh=np.asarray(sc.grid["carbon_g_per_kwh"].values[t:sc.n_slots],
                                    dtype=float),
    )


@dataclass
class LoopResult:
    cost: float = 0.0
    carbon_kg: float = 0.0
    energy_kwh: float = 0.0
    finished: dict[str, int] = field(default_factory=dict)
    unfinished: list[str] = field(default_factory=list)
    deadline_misses: list[str] = field(default_factory=list)
    allocations: list[Allocation] = field(default_factory=list)
    moves: list[tuple[int, str, str, str]] = field(default_factory=list)
    max_pool_use: dict[str, int] = field(default_factory=dict)


def run_slots(sc: Scenario, policy: Policy) -> LoopResult:
    """Step ``policy`` through every slot of ``sc`` with the model as truth."""
    policy.reset(sc)
    res = LoopResult()
    states: dict[str, JobState] = {}
    for job in sc.jobs:
        states[job.job_id] = JobState(job=job, remaining=1.0, placement=None,
                                      last_datacenter=None, phi=200.0)
    done: set[str] = set()
    for t in range(sc.n_slots):
        now = START + timedelta(seconds=SLOT_S * t)
        active = tuple(
            states[j.job_id] for j in sc.jobs
            if j.arrival <= now and j.job_id not in done
            and (j.is_training or (j.end is not None and now < j.end))
        )
        state = SlotState(scenario=sc, t=t, time=now, jobs=active,
                          carbon_kg_so_far=res.carbon_kg, cost_so_far=res.cost)
        fc = perfect_forecast(sc, t)
        alloc = policy.decide(state, fc)
        res.allocations.append(alloc)
        price = {r: float(fc.price_per_kwh[0, i]) for i, r in enumerate(fc.regions)}
        carbon = {r: float(fc.carbon_g_per_kwh[0, i]) for i, r in enumerate(fc.regions)}
        opts = slot_options(state, price, carbon)
        use: dict[str, int] = {}
        for js in active:
            jid = js.job.job_id
            pl: Placement | None = alloc.placements.get(jid)
            if pl is None:
                states[jid] = replace(js, placement=None)
                continue
            rows = [k for k in opts.rows_of(jid)
                    if opts.datacenter[k] == pl.datacenter and opts.gpu_type[k] == pl.gpu_type
                    and opts.n_gpus[k] == pl.n_gpus]
            assert rows, f"slot {t}: {jid} placed on an infeasible option {pl}"
            k = rows[0]
            key = f"{pl.datacenter}/{pl.gpu_type}"
            use[key] = use.get(key, 0) + pl.n_gpus
            if opts.moves[k]:
                res.moves.append((t, jid, str(js.last_datacenter), pl.datacenter))
            res.cost += float(opts.cost[k])
            res.carbon_kg += float(opts.carbon_kg[k])
            res.energy_kwh += float(opts.energy_kwh[k])
            remaining = max(js.remaining - float(opts.progress[k]), 0.0)
            if js.job.is_training:
                prof = sc.profile(js.job.app, pl.gpu_type)
                phi = float(prof.efficiency.phi(1.0 - remaining))
            else:
                phi = js.phi
            states[jid] = replace(js, remaining=remaining, placement=pl,
                                  last_datacenter=pl.datacenter, phi=phi,
                                  slots_run=js.slots_run + 1)
            if js.job.is_training and remaining <= 1e-9:
                done.add(jid)
                res.finished[jid] = t
                if js.job.deadline is not None and t >= sc.slot_of(js.job.deadline):
                    res.deadline_misses.append(jid)
        for key, n in use.items():
            res.max_pool_use[key] = max(res.max_pool_use.get(key, 0), n)
    for job in sc.jobs_of_kind("training"):
        if job.job_id not in done:
            res.unfinished.append(job.job_id)
            if job.deadline is not None:
                res.deadline_misses.append(job.job_id)
    return res


def problem(job_index: list[int], coef: list[float], pool_index: list[int], n_gpus: list[int],
            capacity: list[int], must: list[bool], *, power_kw: list[float] | None = None,
            power_cap: list[float] | None = None, link_index: list[int] | None = None,
            transfer_gb: list[float] | None = None,
            link_cap: list[float] | None = None) -> SlotProblem:
    """A hand-written slot problem: one datacenter per pool, optional power and link rows."""
    k = len(job_index)
    n_links = len(link_cap) if link_cap is not None else 0
    return SlotProblem(
        job_ids=tuple(f"j{i}" for i in range(len(must))),
        job_index=np.array(job_index, dtype=np.int64),
        coef=np.array(coef, dtype=float),
        must_place=np.array(must, dtype=bool),
        pool_labels=tuple(f"p{i}" for i in range(len(capacity))),
        pool_index=np.array(pool_index, dtype=np.int64),
        n_gpus=np.array(n_gpus, dtype=np.int64),
        pool_capacity=np.array(capacity, dtype=np.int64),
        dc_labels=tuple(f"d{i}" for i in range(len(capacity))),
        dc_index=np.array(pool_index, dtype=np.int64),
        power_kw=np.array(power_kw if power_kw is not None else [0.0] * k),
        power_cap_kw=np.array(power_cap if power_cap is not None else [np.inf] * len(capacity)),
        link_labels=tuple(f"l{i}" for i in range(n_links)),
        link_index=np.array(link_index if link_index is not None else [-1] * k, dtype=np.int64),
        transfer_gb=np.array(transfer_gb if transfer_gb is not None else [0.0] * k),
        link_capacity_gb=np.array(link_cap if link_cap is not None else [], dtype=float),
    )
