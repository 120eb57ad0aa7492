"""The slot options one :func:`workbench.outcome.slot_outcome` call at a time: the reference
that :func:`workbench.policies.base.slot_options` (the same options, computed for all jobs
at once in arrays) is tested against bit for bit (``tests/test_outcome_vector.py``) and
timed against (``bench/slot_options.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from workbench import outcome as _outcome
from workbench.model import Datacenter, GpuPool
from workbench.outcome import RESTART_S_DEFAULT
from workbench.policies.base import JobState, SlotOptions, SlotState
from workbench.policies.limits import with_power_limits
from workbench.units import G_PER_KG, W_PER_KW

_COLUMNS = ("job_index", "datacenter", "gpu_type", "n_gpus", "batch_size", "progress",
            "energy_kwh", "cost", "carbon_kg", "moves", "transfer_s", "lost_s", "transfer_gb",
            "transfer_from", "movement_kwh", "power_kw", "rate_per_s")
_DTYPES: dict[str, type] = {"job_index": np.int64, "datacenter": str, "gpu_type": str,
                            "n_gpus": np.int64, "batch_size": np.int64, "moves": bool,
                            "transfer_from": str}


def slot_options_scalar(
    state: SlotState,
    price_per_kwh: Mapping[str, float],
    carbon_g_per_kwh: Mapping[str, float],
    gpu_counts: Mapping[str, tuple[int, ...]] | None = None,
    restart_s: float = RESTART_S_DEFAULT,
    resize_s: float | None = None,
) -> SlotOptions:
    """Enumerate every feasible option of every active job for one slot, one
    :func:`workbench.outcome.slot_outcome` call per option (loops: job, datacenter, pool,
    GPU count); the parameters and the model are those of
    :func:`workbench.policies.base.slot_options`.

    An option's cost and carbon price each end's energy at its own region: ``cost = E p_d
    + sum_s E_s p_s`` over the sending ends ``s`` of its transfers (carbon likewise, kg).
    """
    sc = state.scenario
    resize_s = state.resize_s if resize_s is None else resize_s
    slot_s = float(sc.slot_s)
    region_of = {dc.name: dc.region for dc in sc.datacenters}
    cols: dict[str, list[object]] = {k: [] for k in _COLUMNS}
    t_end = state.time.timestamp() + slot_s
    for k, js in enumerate(state.jobs):
        job = js.job
        menu = tuple(gpu_counts.get(job.job_id, job.gpu_counts)) if gpu_counts else job.gpu_counts
        up_s = None
        if not job.is_training and job.end is not None:
            up_s = slot_s - max(t_end - job.end.timestamp(), 0.0)
        for dc in sc.datacenters:
            if not job.is_training and sc.latency_ms(job.home, dc.name) > (
                job.max_latency_ms if job.max_latency_ms is not None else np.inf
            ):
                continue
            moves = js.last_datacenter is not None and js.last_datacenter != dc.name
            if moves and js.last_datacenter is not None and sc.link(
                    js.last_datacenter, dc.name) is None:
                continue
            price = float(price_per_kwh[dc.region])
            carbon = float(carbon_g_per_kwh[dc.region])
            # What travels depends on the datacenter only; the restart on each option.
            ch = _outcome.transfer_charges(
                job, dc.name, checkpoint_at=js.last_datacenter, data_at=js.data_at,
                pending_s=js.pending_s, link=sc.link)
            if ch is None:
                continue
            src_cost = sum(kwh * float(price_per_kwh[region_of[d]]) for d, kwh in ch.source_kwh)
            src_carb = sum(kwh * float(carbon_g_per_kwh[region_of[d]]) / G_PER_KG
                           for d, kwh in ch.source_kwh)
            src_kwh = sum(kwh for _, kwh in ch.source_kwh)
            for pool in sc.pools_at(dc.name):
                if not job.allows(pool.gpu_type):
                    continue
                counts = [n for n in menu if n <= pool.count]
                if not job.is_training:
                    counts = [job.requested_gpus] if job.requested_gpus <= pool.count else []
                for n in counts:
                    out, m, rate = _option(state, js, dc, pool, n, ch, up_s, restart_s,
                                           resize_s)
                    row = {"job_index": k, "datacenter": dc.name, "gpu_type": pool.gpu_type,
                           "n_gpus": n, "batch_size": m, "progress": out.progress,
                           "energy_kwh": out.energy_kwh + src_kwh,
                           "cost": out.energy_kwh * price + src_cost,
                           "carbon_kg": out.energy_kwh * carbon / G_PER_KG + src_carb,
                           "moves": moves, "transfer_s": ch.transfer_s, "lost_s": out.lost_s,
                           "transfer_gb": ch.transfer_gb,
                           "transfer_from": ch.sources[0] if ch.sources else "",
                           "movement_kwh": out.movement_kwh, "power_kw": out.power_kw,
                           "rate_per_s": rate}
                    for c in _COLUMNS:
                        cols[c].append(row[c])
    arrays: dict[str, Any] = {c: np.asarray(cols[c], dtype=_DTYPES.get(c, float)) for c in _COLUMNS}
    # the scenario's menu of GPU power limits
    return with_power_limits(SlotOptions(jobs=state.jobs, **arrays), state, price_per_kwh,
                             carbon_g_per_kwh)


def _option(state: SlotState, js: JobState, dc: Datacenter, pool: GpuPool, n: int,
            ch: _outcome.Charges, up_s: float | None, restart_s: float, resize_s: float
            ) -> tuple[_outcome.SlotOutcome, int, float]:
    """One option's slot outcome, batch size and steady rate (fraction of the work per
    second, ``X(n, m) s_j E_phi(m) / W_j``; 0 for a service)."""
    sc = state.scenario
    job = js.job
    slot_s = float(sc.slot_s)
    if not job.is_training:
        return (_outcome.slot_outcome(job, slot_s=slot_s, pue=dc.pue, charges=ch,
                                      inference_power_w=_outcome.service_power_w(job, pool),
                                      up_s=up_s), job.batch_size, 0.0)
    prev = (None if js.placement is None else
            (js.placement.datacenter, js.placement.gpu_type, int(js.placement.n_gpus)))
    prof = sc.profile(job.app, pool.gpu_type)
    m, x = _outcome.best_batch(prof, n, pool.gpus_per_node, js.phi)
    out = _outcome.slot_outcome(
        job, slot_s=slot_s, pue=dc.pue, charges=ch,
        lost_s=ch.lost_s + _outcome.restart_seconds(
            prev, dc.name, pool.gpu_type, n, restart_s, resize_s),
        remaining=js.remaining, profile=prof, n_gpus=n, batch_size=m,
        x_model_sps=x, speed=js.throughput_scale, phi=js.phi,
        gpus_per_node=pool.gpus_per_node)
    rate = (float(x) * float(js.throughput_scale)
            * ((js.phi + prof.efficiency.m0) / (js.phi + m)) / job.work_samples)
    speed = js.power_scale
    if speed is not None and speed != js.throughput_scale:
        # Against a power cap the draw at the estimated speed, not at the planning
        # margin's slower one.
        p_w = float(_outcome.training_power_w(prof, n, x * speed))
        out = replace(out, power_kw=p_w * out.used_s / slot_s * dc.pue / W_PER_KW)
    return out, m, rate
