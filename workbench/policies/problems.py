"""What the policies hand the optim layer: a slot's options as a slot problem, a job's
configurations as block-LP columns, and the slot's prices.

:func:`build_slot_problem` turns a slot's enumerated options
(:func:`workbench.policies.base.slot_options`) and their weights into the arrays of the slot
MILP (:class:`workbench.optim.slot.SlotProblem`); :func:`job_configs` lists a job's
configurations with their trajectory-averaged rates for the block LP
(:mod:`workbench.optim.blocklp`) of the look-ahead and the hindsight plan;
:func:`current_prices` reads the slot's price and carbon from the forecast.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from numpy.typing import NDArray

from workbench import outcome
from workbench.caps import Caps
from workbench.forecast import Forecast
from workbench.meter import job_power_limits_kw
from workbench.model import Job, Scenario, ScenarioView
from workbench.optim.blocklp import BlockConfig
from workbench.optim.slot import SlotProblem
from workbench.policies.base import SlotOptions, SlotState
from workbench.policies.limits import most_efficient_limit
from workbench.units import J_PER_KWH

_QUAD = 8
"""Progress points over which :func:`job_configs` averages a training job's rates."""


def current_prices(
    scenario: ScenarioView, forecast: Forecast
) -> tuple[dict[str, float], dict[str, float]]:
    """The slot's price and carbon intensity per region: row 0 of the forecast (the truth)."""
    price = {r: float(forecast.price_per_kwh[0, i]) for i, r in enumerate(forecast.regions)}
    carbon = {r: float(forecast.carbon_g_per_kwh[0, i]) for i, r in enumerate(forecast.regions)}
    missing = sorted({dc.region for dc in scenario.datacenters} - set(price))
    if missing:
        raise ValueError(f"forecast lacks regions {missing}; build it from the scenario's cube")
    return price, carbon


def build_slot_problem(
    state: SlotState,
    opts: SlotOptions,
    coef: NDArray[np.float64],
    caps: Caps | None = None,
) -> SlotProblem:
    """Turn a slot's enumerated options and their weights into a :class:`SlotProblem`.

    ``power_kw`` is what the option adds to its datacenter's meter over the slot: its
    average facility power (``opts.power_kw``) and the destination half of its transfer
    energy; the sending half is metered at the datacenter the data leave
    (:func:`_sending_halves`: ``src_dc_index``, ``src_power_kw``), as the meter reads both
    (:class:`workbench.sim.truth.Truth`); each datacenter's cap is ``caps``'s in this slot,
    a grid event's included (``inf`` without one); the data an option moves in
    (``opts.transfer_gb``) use the link from where they come (``opts.transfer_from``).
    """
    sc = state.scenario
    dc_names = [dc.name for dc in sc.datacenters]
    dc_pos = {n: i for i, n in enumerate(dc_names)}
    pool_pos = {(p.datacenter, p.gpu_type): i for i, p in enumerate(sc.pools)}
    link_pos: dict[tuple[str, str], int] = {}
    for i, lk in enumerate(sc.links):
        link_pos[(lk.src, lk.dst)] = i
        link_pos[(lk.dst, lk.src)] = i
    n = len(opts)
    link_index = np.full(n, -1, dtype=np.int64)
    transfer_gb = np.zeros(n)
    for k in np.flatnonzero(opts.transfer_gb > 0):
        src = str(opts.transfer_from[k])
        key = (src, str(opts.datacenter[k]))
        if key in link_pos:
            link_index[k] = link_pos[key]
            lk = sc.links[link_pos[key]]
            # What crosses the link in this slot: a longer transfer spans several slots.
            transfer_gb[k] = min(float(opts.transfer_gb[k]),
                                 lk.bandwidth_gbps * sc.slot_s / 8.0)
    # opts.energy_kwh is the option's facility energy with its transfer at both ends.
    slot_h = sc.slot_s / 3600.0
    transfer_dst_kw = np.maximum(opts.energy_kwh / slot_h - opts.power_kw, 0.0) / 2.0
    src_dc_index, src_power_kw = _sending_halves(opts, dc_pos, sc)
    return SlotProblem(
        job_ids=tuple(js.job.job_id for js in state.jobs),
        job_index=opts.job_index,
        coef=np.asarray(coef, dtype=float),
        must_place=np.array([not js.job.is_training for js in state.jobs], dtype=bool),
        pool_labels=tuple(f"{p.datacenter}/{p.gpu_type}" for p in sc.pools),
        pool_index=np.array([pool_pos[(str(d), str(g))] for d, g in
                             zip(opts.datacenter, opts.gpu_type, strict=True)], dtype=np.int64),
        n_gpus=opts.n_gpus,
        pool_capacity=np.array([p.count for p in sc.pools], dtype=np.int64),
        dc_labels=tuple(dc_names),
        dc_index=np.array([dc_pos[str(d)] for d in opts.datacenter], dtype=np.int64),
        power_kw=opts.power_kw + transfer_dst_kw,
        power_cap_kw=job_power_limits_kw(sc, Caps() if caps is None else caps, state.t,
                                         state.t + 1, known_at=state.t)[0],
        link_labels=tuple(f"{lk.src}<->{lk.dst}" for lk in sc.links),
        link_index=link_index,
        transfer_gb=transfer_gb,
        link_capacity_gb=np.array([lk.bandwidth_gbps * sc.slot_s / 8.0 for lk in sc.links]),
        src_dc_index=src_dc_index,
        src_power_kw=src_power_kw,
    )


def _sending_halves(opts: SlotOptions, dc_pos: Mapping[str, int], sc: ScenarioView
                    ) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Where each option's transfer draws its sending half, and that half as power, kW.

    The meter splits a transfer's energy ``E = gb x e_link`` between its two ends, ``E / 2``
    at each (:func:`workbench.outcome.transfer_charges`' ``source_kwh``, the same charges
    the truth meters); the sending half at datacenter ``s`` is ``sum E / 2`` over the data
    that leave ``s`` (a dataset and a checkpoint may leave two sites), over the slot's
    hours: ``Ps = source_kwh[s] / (slot_s / 3600)``.

    Returns
    -------
    src_dc_index : int array (K, M)
        The sending datacenters of each option (-1: none); ``M`` is the most any option
        has (0 when none moves data).
    src_power_kw : float array (K, M)
    """
    slot_h = sc.slot_s / 3600.0
    moving = np.flatnonzero(opts.transfer_gb > 0)
    pair_of: dict[tuple[int, str], int] = {}
    halves: list[tuple[tuple[str, float], ...]] = []
    row_pair = np.zeros(moving.size, dtype=np.int64)
    for i, k in enumerate(moving.tolist()):
        key = (int(opts.job_index[k]), str(opts.datacenter[k]))
        pair = pair_of.get(key)
        if pair is None:
            js = opts.jobs[key[0]]
            ch = outcome.transfer_charges(js.job, key[1], checkpoint_at=js.last_datacenter,
                                          data_at=js.data_at, pending_s=js.pending_s,
                                          link=sc.link)
            pair = pair_of[key] = len(halves)
            halves.append(() if ch is None else ch.source_kwh)
        row_pair[i] = pair
    m = max((len(h) for h in halves), default=0)
    pair_dc = np.full((len(halves), m), -1, dtype=np.int64)
    pair_kw = np.zeros((len(halves), m))
    for pair, h in enumerate(halves):
        for i, (dc, kwh) in enumerate(h):
            pair_dc[pair, i] = dc_pos[dc]
            pair_kw[pair, i] = kwh / slot_h
    src_dc_index = np.full((len(opts), m), -1, dtype=np.int64)
    src_power_kw = np.zeros((len(opts), m))
    src_dc_index[moving] = pair_dc[row_pair]
    src_power_kw[moving] = pair_kw[row_pair]
    return src_dc_index, src_power_kw


def _least_energy_factors(gpu_type: str, menu: tuple[float, ...],
                          gpu_power_w: NDArray[np.float64], max_power_w: float
                          ) -> NDArray[np.float64]:
    """``r_t r_P`` of the menu's most efficient limit at each per-GPU draw (1 where none
    draws less energy per unit of work than full power)."""
    below = tuple(f for f in menu if f < 1.0)
    out = np.ones(gpu_power_w.size)
    for i, w in enumerate(gpu_power_w.tolist()):
        best = most_efficient_limit(gpu_type, below, w, max_power_w) if below else None
        if best is not None:
            out[i] = best[1] * best[2]
    return out


def job_configs(sc: Scenario | ScenarioView, job: Job,
                gpu_counts: tuple[int, ...] | None = None,
                power_limits: tuple[float, ...] = ()) -> list[BlockConfig]:
    """Every (datacenter, pool, GPU count) the job may use, with trajectory-averaged rates.

    With a menu of GPU ``power_limits`` (the hindsight bounds' relaxation), a training
    configuration's energy per slot is its full-power energy times, at each progress point,
    the least IT energy per unit of work the menu allows (``r_t r_P`` of the slot's most
    efficient limit, :mod:`workbench.policies.limits`), at full speed: a column that does
    the work of full power on the energy of the limit, which no slot can beat (a limited
    slot does less work, a full-power slot draws more), so the LP on them stays a lower
    bound of a run that may choose either."""
    dc_pos = {d.name: i for i, d in enumerate(sc.datacenters)}
    pool_pos = {(p.datacenter, p.gpu_type): i for i, p in enumerate(sc.pools)}
    out: list[BlockConfig] = []
    limit = job.max_latency_ms if job.max_latency_ms is not None else math.inf
    menu = gpu_counts if gpu_counts is not None else job.gpu_counts
    qp = (np.arange(_QUAD) + 0.5) / _QUAD
    for dc in sc.datacenters:
        if not job.is_training and sc.latency_ms(job.home, dc.name) > limit:
            continue
        for pool in sc.pools_at(dc.name):
            if not job.allows(pool.gpu_type):
                continue
            if not job.is_training:
                if job.requested_gpus <= pool.count:
                    o = outcome.slot_outcome(job, slot_s=float(sc.slot_s), pue=dc.pue,
                                             inference_power_w=outcome.service_power_w(job, pool))
                    out.append(BlockConfig(dc.name, pool.gpu_type, job.requested_gpus,
                                       pool_pos[(dc.name, pool.gpu_type)], dc_pos[dc.name],
                                       0.0, o.energy_kwh))
                continue
            prof = sc.profile(job.app, pool.gpu_type)
            for n in menu:
                if n > pool.count:
                    continue
                # One loss-free full slot at each progress point, from the one slot model.
                prog_q, kwh_q = outcome.full_slot_rates(
                    prof, job, int(n), pool.gpus_per_node, float(sc.slot_s), dc.pue,
                    prof.efficiency.phi(qp))
                if power_limits:
                    kwh_q = kwh_q * _least_energy_factors(
                        pool.gpu_type, power_limits, kwh_q / (dc.pue * float(sc.slot_s))
                        * J_PER_KWH / int(n), float(pool.max_power_w))
                slots_q = (1.0 / _QUAD) / prog_q
                slots = float(slots_q.sum())
                energy = float((slots_q * kwh_q).sum())
                out.append(BlockConfig(dc.name, pool.gpu_type, int(n),
                                   pool_pos[(dc.name, pool.gpu_type)], dc_pos[dc.name],
                                   1.0 / slots, energy / slots))
    return out
