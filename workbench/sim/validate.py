"""The simulator's check of a policy's allocation before it is applied to the truth: every
placement names an active job, a pool that exists and has the GPUs, a job's allowed GPU type,
a link where data must move, and batteries of the sites."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np

from workbench.model import GpuPool
from workbench.policies.base import Allocation, SlotState
from workbench.sim.truth import AllocationError


def validate_allocation(
    alloc: Allocation,
    state: SlotState,
    pools: Mapping[tuple[str, str], GpuPool],
    policy_name: str,
    batteries: tuple[Any, ...] = (),
) -> None:
    """Raise :class:`AllocationError` unless every placement is allowed and pools suffice
    (and battery decisions name batteries, power limits lie in the GPU's range)."""
    sc = state.scenario
    where = f"policy {policy_name!r}, slot {state.t} ({state.time.isoformat()})"
    active = {js.job.job_id: js for js in state.jobs}
    used: Counter[tuple[str, str]] = Counter()
    users: dict[tuple[str, str], list[str]] = {}
    for job_id, p in alloc.placements.items():
        js = active.get(job_id)
        if js is None:
            raise AllocationError(
                f"{where}: job {job_id!r} is placed but is not active (unknown, not yet "
                "arrived, finished, or past its service end)"
            )
        job = js.job
        key = (p.datacenter, p.gpu_type)
        pool = pools.get(key)
        if pool is None:
            raise AllocationError(
                f"{where}: job {job_id!r} is placed on {p.datacenter}/{p.gpu_type}, which is "
                "not a GPU pool of the scenario"
            )
        if not job.allows(p.gpu_type):
            raise AllocationError(
                f"{where}: job {job_id!r} may run only on {list(job.gpu_types)}, not on "
                f"{p.gpu_type}"
            )
        if not (isinstance(p.n_gpus, int | np.integer) and p.n_gpus >= 1):
            raise AllocationError(f"{where}: job {job_id!r} needs n_gpus >= 1, got {p.n_gpus!r}")
        if not (isinstance(p.batch_size, int | np.integer) and p.batch_size >= 1):
            raise AllocationError(
                f"{where}: job {job_id!r} needs batch_size >= 1, got {p.batch_size!r}"
            )
        if not job.is_training:
            bound = job.max_latency_ms if job.max_latency_ms is not None else math.inf
            latency = sc.latency_ms(job.home, p.datacenter)
            if latency > bound:
                raise AllocationError(
                    f"{where}: inference service {job_id!r} placed in {p.datacenter}, "
                    f"{latency} ms from its home {job.home} (bound {bound} ms)"
                )
        if js.last_datacenter is not None and js.last_datacenter != p.datacenter:
            if sc.link(js.last_datacenter, p.datacenter) is None:
                raise AllocationError(
                    f"{where}: job {job_id!r} moves {js.last_datacenter} -> {p.datacenter} but "
                    "no link joins them"
                )
        holders = set(js.data_at) | {job.home}
        if job.dataset_gb > 0 and p.datacenter not in holders and not any(
                sc.link(d, p.datacenter) is not None for d in holders):
            raise AllocationError(
                f"{where}: job {job_id!r} runs in {p.datacenter}, but its "
                f"{job.dataset_gb:g} GB dataset (in {sorted(holders)}) has no link to get there"
            )
        if p.power_limit_w is not None and not (
                math.isfinite(p.power_limit_w) and 0 < p.power_limit_w <= pool.max_power_w):
            raise AllocationError(
                f"{where}: job {job_id!r} has power limit {p.power_limit_w!r} W; give one in "
                f"(0, {pool.max_power_w:g}] W (the GPU's maximum) or None")
        used[key] += int(p.n_gpus)
        users.setdefault(key, []).append(f"{job_id}:{p.n_gpus}")
    for dc, kw in alloc.battery_kw.items():
        if not any(b.datacenter == dc for b in batteries):
            raise AllocationError(f"{where}: battery power given for {dc!r}, which has no "
                                  "battery")
        if not math.isfinite(kw):
            raise AllocationError(f"{where}: battery power of {dc!r} is {kw!r}, not a number")
    for key, n in used.items():
        cap = pools[key].count
        if n > cap:
            raise AllocationError(
                f"{where}: pool {key[0]}/{key[1]} is given {n} GPUs but has {cap} "
                f"({', '.join(users[key])})"
            )
