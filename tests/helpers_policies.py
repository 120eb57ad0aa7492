"""Tiny inline scenarios and a slot loop for the policy tests.

The loop is the simulator itself (noise-free, perfect forecast): a slot's outcome comes
from the one slot-outcome model (:mod:`workbench.outcome`), never from a copy here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import xarray as xr

from workbench import perf
from workbench.model import Datacenter, GpuPool, Job, Link, Scenario, ScenarioView
from workbench.policies.base import (
    Allocation,
    Forecast,
    Policy,
    SlotState,
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
                 checkpoint_gb: float = 1.0, dataset_gb: float = 0.0) -> Job:
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
        checkpoint_gb=checkpoint_gb, dataset_gb=dataset_gb,
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


class _Recording:
    """Wraps a policy and keeps every allocation it returns."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.name = policy.name
        self.allocations: list[Allocation] = []

    def reset(self, scenario: ScenarioView) -> None:
        self.policy.reset(scenario)

    def decide(self, state: SlotState, forecast: Forecast) -> Allocation:
        alloc = self.policy.decide(state, forecast)
        self.allocations.append(alloc)
        return alloc


def run_slots(sc: Scenario, policy: Policy) -> LoopResult:
    """Step ``policy`` through every slot of ``sc`` in the simulator (noise-free truth, the
    perfect forecast) and summarise the run; one model of a slot, no copy of it here."""
    from workbench.sim import simulate

    rec = _Recording(policy)
    run = simulate(sc, rec, forecast_mode="perfect")
    res = LoopResult(cost=float(run.metrics["cost"]), carbon_kg=float(run.metrics["carbon_kg"]),
                     energy_kwh=float(run.metrics["energy_kwh"]), allocations=rec.allocations)
    for row in run.jobs.itertuples():
        if row.kind != "training":
            continue
        if row.finished:
            res.finished[row.job_id] = sc.slot_of(row.finish_time.to_pydatetime()
                                                  - timedelta(microseconds=1))
        else:
            res.unfinished.append(row.job_id)
        if row.deadline_met is False or (not row.finished and pd.notna(row.deadline)):
            res.deadline_misses.append(row.job_id)
    for m in run.migrations.itertuples():
        if "checkpoint" in str(m.moved):
            res.moves.append((sc.slot_of(m.slot_start.to_pydatetime()), m.job_id,
                              m.from_region, m.to_region))
    running = run.plan[run.plan["n_gpus"] > 0]
    use = running.groupby(["slot", "region", "gpu_type"])["n_gpus"].sum()
    for (_, dc, gpu), n in use.items():
        key = f"{dc}/{gpu}"
        res.max_pool_use[key] = max(res.max_pool_use.get(key, 0), int(n))
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
