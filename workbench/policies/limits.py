"""GPU power limits in a slot's options: every training option once more at the limit of
the scenario's menu (:attr:`workbench.model.ScenarioView.power_limits`) that does its work
on the least energy (the menu pruned per job and slot: the slot chooses between full speed
and the most efficient limit, not among every limit, which multiplied the slot's options
and its CPU by the menu's length; ``bench/power_limit_menu.py`` measures both).

For an option of job ``j`` on ``n`` GPUs of a pool whose GPUs draw at most ``P_max`` W, the
limit at fraction ``f`` of the menu is ``L = f P_max`` W per GPU; the job, drawing ``P_it / n``
per GPU at full power, runs at ``X / r_t`` and ``P_it r_P``
(:func:`workbench.power_limits.limit_factors`), through the one slot model
(:func:`workbench.outcome.slot_outcome` with ``time_factor`` and ``power_factor``). Its
transfers and restart are the full-power option's: a change of power limit alone restarts
nothing (``nvidia-smi -pl`` acts on a running job). Cost and carbon differ from the
full-power option's by the IT energy they no longer draw, at the option's own price and
carbon::

    energy' = E_it' + transfer_kwh       transfer_kwh = energy - E_it   (both ends)
    cost'   = cost + (E_it' - E_it) p_d,   carbon' = carbon + (E_it' - E_it) c_d / 1000

with ``E_it = power_kw * D / 3600`` the option's facility IT energy, and the steady rate
``rate_per_s / r_t``. The rows of one job stay
together (each full-power row followed by its limited rows).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import numpy as np

from workbench import outcome
from workbench.power_limits import limit_factors
from workbench.units import G_PER_KG

_COMPUTED = ("progress", "energy_kwh", "cost", "carbon_kg", "movement_kwh", "power_kw",
             "rate_per_s", "power_limit_w")
"""What a limited row has of its own; the rest it copies from its full-power row."""

_ARRAYS = ("job_index", "datacenter", "gpu_type", "n_gpus", "batch_size", "progress",
           "energy_kwh", "cost", "carbon_kg", "moves", "transfer_s", "lost_s", "transfer_gb",
           "transfer_from", "movement_kwh", "power_kw", "rate_per_s")


@lru_cache(maxsize=65536)
def most_efficient_limit(gpu_type: str, menu: tuple[float, ...], gpu_power_w: float,
                    max_power_w: float) -> tuple[float, float, float] | None:
    """The limit of ``menu`` with the least IT energy per unit of work, ``r_t r_P`` least
    (the higher limit among equals), with its factors; None when none draws less energy per
    unit of work than full power. Remembered: a job's draw per GPU repeats slot after slot."""
    best: tuple[float, float, float] | None = None
    for f in sorted(menu, reverse=True):
        r_t, r_p = limit_factors(gpu_type, f, gpu_power_w, max_power_w)
        if r_t * r_p < (1.0 if best is None else best[1] * best[2]) * (1.0 - 1e-9):
            best = (f, r_t, r_p)
    return best


def with_power_limits(opts: Any, state: Any, price_per_kwh: Mapping[str, float],
                      carbon_g_per_kwh: Mapping[str, float]) -> Any:
    """``opts`` (a :class:`workbench.policies.base.SlotOptions` of the slot ``state``, a
    :class:`~workbench.policies.base.SlotState`; typed loosely, as ``base`` calls this
    module) with each training option repeated at the menu's most efficient limit below
    full power (:func:`most_efficient_limit`; see the module docstring); unchanged when the menu
    is empty or full power only."""
    sc = state.scenario
    menu = tuple(f for f in sc.power_limits if f < 1.0)
    if not menu or not len(opts):
        return opts
    if opts.rate_per_s.size != len(opts):
        opts = dataclasses.replace(opts, rate_per_s=np.zeros(len(opts)))
    slot_s = float(sc.slot_s)
    dcs = {d.name: d for d in sc.datacenters}
    pools = {(p.datacenter, p.gpu_type): p for p in sc.pools}
    order: list[int] = []
    src: list[int] = []  # the full-power row each limited row repeats
    new: dict[str, list[float]] = {k: [] for k in _COMPUTED}
    for k in range(len(opts)):
        order.append(k)
        js = state.jobs[int(opts.job_index[k])]
        job = js.job
        if not job.is_training:
            continue
        dc = dcs[str(opts.datacenter[k])]
        pool = pools[(dc.name, str(opts.gpu_type[k]))]
        n, m = int(opts.n_gpus[k]), int(opts.batch_size[k])
        prof = sc.profile(job.app, pool.gpu_type)
        _, x_model = outcome.best_batch(prof, n, pool.gpus_per_node, js.phi)
        full_w = float(outcome.training_power_w(prof, n, x_model * js.throughput_scale))
        best = most_efficient_limit(pool.gpu_type, menu, full_w / n, float(pool.max_power_w))
        if best is None:
            continue
        f, r_t, r_p = best
        it_kwh = float(opts.power_kw[k]) * slot_s / 3600.0
        transfer = float(opts.energy_kwh[k]) - it_kwh
        o = outcome.slot_outcome(
            job, slot_s=slot_s, pue=dc.pue, lost_s=float(opts.lost_s[k]),
            remaining=js.remaining, profile=prof, n_gpus=n, batch_size=m,
            x_model_sps=x_model, speed=js.throughput_scale, phi=js.phi,
            gpus_per_node=pool.gpus_per_node, time_factor=r_t, power_factor=r_p)
        order.append(-1 - len(src))
        src.append(k)
        new["progress"].append(o.progress)
        new["energy_kwh"].append(o.energy_kwh + transfer)
        new["cost"].append(float(opts.cost[k]) + (o.energy_kwh - it_kwh)
                           * float(price_per_kwh[dc.region]))
        new["carbon_kg"].append(float(opts.carbon_kg[k]) + (o.energy_kwh - it_kwh)
                                * float(carbon_g_per_kwh[dc.region]) / G_PER_KG)
        new["movement_kwh"].append(o.movement_kwh + transfer)
        new["power_kw"].append(o.power_kw)
        new["rate_per_s"].append(float(opts.rate_per_s[k]) / r_t)
        new["power_limit_w"].append(f * pool.max_power_w)
    if not src:
        return opts
    idx = np.asarray(order, dtype=np.int64)
    base = idx >= 0
    pos = np.where(base, 0, -1 - idx)
    rows = np.asarray(src, dtype=np.int64)
    fields: dict[str, Any] = {}
    for name in (*_ARRAYS, "power_limit_w"):
        old = np.full(len(opts), np.nan) if name == "power_limit_w" else getattr(opts, name)
        added = (np.asarray(new[name], dtype=float) if name in new else old[rows])
        out = np.empty(idx.size, dtype=np.result_type(old.dtype, added.dtype))
        out[base] = old[idx[base]]
        out[~base] = added[pos[~base]]
        fields[name] = out
    return dataclasses.replace(opts, **fields)
