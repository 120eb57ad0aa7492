"""Tiny inline scenarios, a slot loop and slot problems for the policy and solver tests.

The loop is the simulator itself (noise-free, perfect forecast): a slot's outcome comes
from the one slot-outcome model (:mod:`workbench.outcome`), never from a copy here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from workbench import perf
from workbench.forecast import Forecast
from workbench.model import Datacenter, GpuPool, Job, Link, Scenario, ScenarioView
from workbench.optim.slot import SlotProblem
from workbench.policies.base import Allocation, Policy, SlotState

START = datetime(2024, 1, 1, tzinfo=UTC)
SLOT_S = 900


def profile(app: str = "toy", gpu_type: str = "A100", speed: float = 1.0) -> perf.JobProfile:
    """A small Pollux-style profile (sublinear scaling, growing phi)."""
    return perf.JobProfile(
        app=app,
        gpu_type=gpu_type,
        throughput=perf.ThroughputParams(
            alpha_c=0.05 / speed, beta_c=0.002 / speed, alpha_r=0.02, beta_r=0.005,
            alpha_n=0.05, beta_n=0.01, gamma=1.5),
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
            link_cap: list[float] | None = None, supply_index: list[int] | None = None,
            supply_kwh: list[float] | None = None,
            supply_cap: list[float] | None = None) -> SlotProblem:
    """A hand-written slot problem: one datacenter per pool, optional power, link and supply
    rows."""
    k = len(job_index)
    n_links = len(link_cap) if link_cap is not None else 0
    supply: dict[str, Any] = {} if supply_cap is None else {
        "supply_labels": tuple(f"s{i}" for i in range(len(supply_cap))),
        "supply_index": np.array(supply_index, dtype=np.int64),
        "supply_kwh": np.array(supply_kwh, dtype=float),
        "supply_cap_kwh": np.array(supply_cap, dtype=float)}
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
        **supply,
    )


def synthetic_slot_problem(
    n_jobs: int,
    n_dcs: int,
    n_configs: int,
    *,
    seed: int = 0,
    inference_share: float = 0.05,
    moved_share: float = 0.7,
    load: float = 1.6,
    V: float = 20.0,
) -> SlotProblem:
    """A random slot problem shaped like the Lyapunov scheduler's (tests and bench/slot_solver).

    ``n_jobs`` jobs, each with ``n_dcs * n_configs`` options (training) or the options in
    about a third of the datacenters (inference, within a latency bound). Configurations
    alternate two GPU types per datacenter with counts 1, 2, 4, 8. Weights follow the
    NetCoef shape ``(V + Q_j) p / pref - V c / (kappa_j pref)`` with sublinear progress
    ``p ~ speed_g n^0.8``, cost ``c ~ price_d P_g n`` and random backlog ``Q_j``; about a
    fifth of the options are negative. Pool capacities are set so that the best choices
    ask for ``load`` times the GPUs there are; half of the datacenters have a binding power
    cap; ``moved_share`` of the jobs last ran elsewhere, so their options there move a
    checkpoint over a link whose volume binds.
    """
    if min(n_jobs, n_dcs, n_configs) < 1:
        raise ValueError("n_jobs, n_dcs and n_configs must be >= 1")
    rng = np.random.default_rng(seed)
    n_types = 2
    counts_menu = np.array([1, 2, 4, 8])
    cfg_type = np.arange(n_configs) % n_types
    cfg_n = counts_menu[(np.arange(n_configs) // n_types) % counts_menu.size]
    speed = np.array([1.0, 0.6])
    power_kw = np.array([0.7, 0.4])  # per GPU, facility
    price = rng.uniform(0.3, 1.2, n_dcs)
    inference = rng.random(n_jobs) < inference_share
    last_dc = np.where(rng.random(n_jobs) < moved_share, rng.integers(0, n_dcs, n_jobs), -1)
    q = rng.exponential(0.5 * V, n_jobs)
    kappa = rng.uniform(0.5, 1.5, n_jobs) * float(np.mean(price) * power_kw.mean())
    ckpt = rng.uniform(1.0, 40.0, n_jobs)
    work = rng.uniform(0.5, 2.0, n_jobs)

    mesh = np.meshgrid(np.arange(n_jobs), np.arange(n_dcs), np.arange(n_configs),
                       indexing="ij")
    jj, dd, cc = (a.ravel() for a in mesh)
    home = rng.integers(0, n_dcs, n_jobs)
    near = (dd - home[jj]) % n_dcs < max(1, math.ceil(n_dcs / 3))
    ok = ~inference[jj] | (near & (cfg_n[cc] == 1))
    jj, dd, cc = jj[ok], dd[ok], cc[ok]
    g = cfg_type[cc]
    n = cfg_n[cc]
    jitter = rng.lognormal(0.0, 0.1, jj.size)
    prog = speed[g] * n ** 0.8 / work[jj] * jitter
    pref = np.zeros(n_jobs)
    np.maximum.at(pref, jj, prog)
    cost = price[dd] * power_kw[g] * n * jitter
    moves = (last_dc[jj] >= 0) & (last_dc[jj] != dd)
    prog = np.where(moves, prog * 0.9, prog)
    coef = ((V + q[jj]) * prog - V * cost / kappa[jj]) / pref[jj]
    coef = np.where(inference[jj], -V * cost / np.mean(cost), coef)

    pools = n_dcs * n_types
    pool_index = dd * n_types + g
    best = np.full(n_jobs, -np.inf)
    np.maximum.at(best, jj, coef)
    is_best = coef == best[jj]
    want = np.bincount(pool_index[is_best], weights=n[is_best], minlength=pools)
    capacity = np.maximum(np.round(want.sum() / pools / load), 8).astype(np.int64)
    capacity = np.maximum(capacity + rng.integers(-2, 3, pools), 1)
    dc_power_want = np.bincount(dd[is_best], weights=(power_kw[g] * n)[is_best],
                                minlength=n_dcs)
    power_cap = np.full(n_dcs, np.inf)
    capped = rng.random(n_dcs) < 0.5
    power_cap[capped] = np.maximum(0.5 * dc_power_want[capped], 5.0)

    links = [(a, b) for a in range(n_dcs) for b in range(a + 1, n_dcs)]
    link_pos = {pair: i for i, pair in enumerate(links)}
    link_index = np.full(jj.size, -1, dtype=np.int64)
    mv = np.flatnonzero(moves)
    src, dst = last_dc[jj[mv]], dd[mv]
    link_index[mv] = [link_pos[(min(a, b), max(a, b))] for a, b in
                      zip(src.tolist(), dst.tolist(), strict=True)]
    transfer_gb = np.where(moves, ckpt[jj], 0.0)
    link_cap = np.full(len(links), max(200.0, 0.6 * n_jobs / max(len(links), 1) * 20.0))
    return SlotProblem(
        job_ids=tuple(f"j{i}" for i in range(n_jobs)),
        job_index=jj.astype(np.int64),
        coef=coef.astype(float),
        must_place=inference,
        pool_labels=tuple(f"dc{d}/g{t}" for d in range(n_dcs) for t in range(n_types)),
        pool_index=pool_index.astype(np.int64),
        n_gpus=n.astype(np.int64),
        pool_capacity=capacity,
        dc_labels=tuple(f"dc{d}" for d in range(n_dcs)),
        dc_index=dd.astype(np.int64),
        power_kw=(power_kw[g] * n).astype(float),
        power_cap_kw=power_cap,
        link_labels=tuple(f"dc{a}<->dc{b}" for a, b in links),
        link_index=link_index,
        transfer_gb=transfer_gb.astype(float),
        link_capacity_gb=link_cap,
    )


def perturbed(prob: SlotProblem, seed: int, sigma: float = 0.05) -> SlotProblem:
    """The next slot of a steady period: the same options, weights moved by ~``sigma``."""
    rng = np.random.default_rng(seed)
    scale = np.abs(prob.coef).mean() if prob.n_options else 1.0
    coef = prob.coef + sigma * scale * rng.standard_normal(prob.n_options)
    return replace(prob, coef=coef)
