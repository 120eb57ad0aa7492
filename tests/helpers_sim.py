"""Tiny inline scenarios for the simulator, baseline, metrics and plan-export tests."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd

from workbench import cubes
from workbench.model import Datacenter, GpuPool, Job, Link, Scenario
from workbench.perf import EfficiencyParams, EnergyParams, JobProfile, ThroughputParams

START = datetime(2025, 7, 1, tzinfo=UTC)
SLOT_S = 900


def profile(app: str = "toy", gpu_type: str = "A100", speed: float = 1.0) -> JobProfile:
    """A small Pollux-style profile: about 420 samples/s on one GPU at batch 128."""
    return JobProfile(
        app=app,
        gpu_type=gpu_type,
        throughput=ThroughputParams(
            alpha_c=0.05 / speed, beta_c=0.002 / speed, alpha_r=0.01, beta_r=0.002,
            alpha_n=0.05, beta_n=0.01, gamma=2.0,
        ),
        efficiency=EfficiencyParams(
            m0=128, min_batch=64, max_batch=2048, max_local_batch=512,
            phi_progress=(0.0, 1.0), phi_values=(200.0, 4000.0),
        ),
        energy=EnergyParams(a1_w=150.0, a2_w_per_sps=0.1, max_power_w=400.0),
    )


def samples_per_slot(n: int = 1, m: int = 128) -> float:
    """Effective samples one slot of the toy profile does at progress 0 (no restart loss)."""
    from workbench import perf

    return float(perf.ecu(profile(), n, m)) * SLOT_S


def training(
    job_id: str, home: str = "a", arrival_slot: int = 0, slots_of_work: float = 2.0,
    deadline_slot: int | None = None, gpus: int = 1, counts: Sequence[int] = (1, 2),
    batch: int = 128,
) -> Job:
    """A training job needing about ``slots_of_work`` slots on ``gpus`` GPUs at ``batch``."""
    return Job(
        job_id=job_id, kind="training", app="toy",
        arrival=START + timedelta(seconds=SLOT_S * arrival_slot), home=home,
        requested_gpus=gpus, gpu_counts=tuple(sorted(set(counts) | {gpus})), batch_size=batch,
        work_samples=slots_of_work * samples_per_slot(gpus, batch),
        deadline=None if deadline_slot is None
        else START + timedelta(seconds=SLOT_S * deadline_slot),
        checkpoint_gb=2.0,
    )


def inference(job_id: str, home: str = "a", first: int = 0, last: int = 4,
              gpus: int = 1, max_latency_ms: float = 50.0) -> Job:
    return Job(
        job_id=job_id, kind="inference", app="toy",
        arrival=START + timedelta(seconds=SLOT_S * first), home=home,
        requested_gpus=gpus, gpu_counts=(gpus,), batch_size=1,
        end=START + timedelta(seconds=SLOT_S * last), max_latency_ms=max_latency_ms,
    )


def tiny_scenario(
    jobs: Sequence[Job] = (),
    n_slots: int = 8,
    price_a: Sequence[float] | None = None,
    price_b: Sequence[float] | None = None,
    carbon_a: Sequence[float] | None = None,
    carbon_b: Sequence[float] | None = None,
    gpus_a: int = 4,
    gpus_b: int = 4,
    name: str = "tiny",
) -> Scenario:
    """Two datacenters ``a`` (region ``ra``) and ``b`` (region ``rb``), one A100 pool each,
    joined by a 10 Gbit/s link. Prices default to a = 1.0, b = 0.5 per kWh; carbon to
    a = 600, b = 300 g/kWh."""
    def col(values: Sequence[float] | None, default: float) -> np.ndarray:
        if values is None:
            return np.full(n_slots, default)
        arr = np.asarray(values, dtype=float)
        return np.resize(arr, n_slots)

    times = pd.date_range(START.replace(tzinfo=None), periods=n_slots, freq=f"{SLOT_S}s")
    cube = cubes.make_cube(
        times, ["ra", "rb"],
        np.column_stack([col(price_a, 1.0), col(price_b, 0.5)]),
        np.column_stack([col(carbon_a, 600.0), col(carbon_b, 300.0)]),
        currency="CNY", slot_s=SLOT_S, source="test",
    )
    return Scenario(
        name=name,
        datacenters=(
            Datacenter("a", "ra", "X-A", "UTC", pue=1.5),
            Datacenter("b", "rb", "X-B", "UTC", pue=1.2),
        ),
        pools=(
            GpuPool("a", "A100", gpus_a, idle_power_w=60.0, max_power_w=400.0),
            GpuPool("b", "A100", gpus_b, idle_power_w=60.0, max_power_w=400.0),
        ),
        links=(Link("a", "b", bandwidth_gbps=10.0, latency_ms=20.0,
                    transfer_energy_kwh_per_gb=0.01),),
        jobs=tuple(jobs),
        profiles=(profile(),),
        grid=cube,
        start=START,
        slot_s=SLOT_S,
        n_slots=n_slots,
    )
