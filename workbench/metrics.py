"""Run metrics: energy, cost, carbon, where and when energy was used, completion, utilisation.

:func:`compute_metrics` turns a run's frames (see :class:`workbench.sim.RunResult`) into one
flat dict of numbers (plus ``currency``), so that runs compare column by column and the store
keeps each metric as one row.

Peak hours: a slot is *peak* in a grid region when that region's price in the slot is above
the median price of the region over the same local calendar day (the day in the timezone of
the region's datacenters). Everything else is off-peak (valley). This follows the shape of
Chinese time-of-use tariffs, whose peak blocks are the dearer half of the day.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from workbench.bill import bill_metrics, has_meter, site_array
from workbench.caps import Caps
from workbench.equal_work import EQUAL_WORK_KEYS, equal_work
from workbench.model import Scenario
from workbench.outcome import service_power_w
from workbench.units import G_PER_KG, J_PER_KWH

METRIC_KEYS: tuple[str, ...] = (
    "energy_kwh", "cost", "currency", "carbon_kg", "energy_moved_kwh", "energy_peak_kwh",
    "energy_offpeak_kwh", "mean_jct_h", "p95_jct_h", "deadline_misses", "jobs_finished",
    "jobs_total", "jobs_unfinished", "inference_services", "inference_unserved_slots",
    "migrations", "migration_gb", "round_trips", "gpu_utilisation", "jobs_waiting_mean",
    "decide_s_mean", "decide_s_max", "solve_s_mean", "solve_s_max", "fallbacks",
    "cost_at_grid_price", "carbon_kg_at_grid_intensity", "data_moves",
    "transfer_gb", "lost_s", "movement_kwh", "power_cap_violations", "power_cap_trims",
    *EQUAL_WORK_KEYS,
)
"""Keys every metrics dict has (the equal-work figures: :mod:`workbench.equal_work`); with
a carbon cap ``carbon_cap_kg`` and ``carbon_cap_met``, with a power cap ``power_cap_kw``;
per-pool ``gpu_utilisation:<dc>/<gpu>`` and per-queue ``queue_mean:<kind>`` /
``queue_max:<kind>`` keys follow them, and the bill's keys
(:data:`workbench.bill.BILL_KEYS`) when the run was metered (:mod:`workbench.meter`)."""




def round_trips(migrations: pd.DataFrame | None) -> int:
    """Moves that undo a job's previous move: ``a -> b`` followed, for the same job, by
    ``b -> a`` (the next move of that job). Rows with an empty ``from_region`` (a first
    placement away from home) start a job's sequence and are never the return leg."""
    if migrations is None or migrations.empty:
        return 0
    count = 0
    frame = migrations.sort_values("slot_start", kind="stable")
    for _, rows in frame.groupby("job_id", sort=False):
        src = rows["from_region"].tolist()
        dst = rows["to_region"].tolist()
        for i in range(1, len(src)):
            if src[i] == dst[i - 1] and dst[i] == src[i - 1] and src[i - 1]:
                count += 1
    return count


def peak_mask(scenario: Scenario) -> pd.DataFrame:
    """Whether each slot of the horizon is a peak slot in each grid region.

    A slot is peak when ``price[t, r] > median(price[s, r] for s in the local day of t)``.

    Returns
    -------
    DataFrame
        Boolean, indexed by slot number, one column per grid region.
    """
    grid = scenario.grid
    times, pos = _horizon(scenario)
    tz_of = {d.region: d.timezone for d in scenario.datacenters}
    tz_of.update(grid.attrs.get("timezones", {}) or {})
    out = {}
    for region in sorted({d.region for d in scenario.datacenters}):
        price = grid["price_per_kwh"].sel(region=region).values[pos:pos + scenario.n_slots]
        s = pd.Series(np.asarray(price, dtype=float))
        day = pd.Series(times.tz_convert(tz_of.get(region, "UTC")).date)
        median = s.groupby(day).transform("median")
        out[region] = (s > median).to_numpy()
    return pd.DataFrame(out, index=pd.RangeIndex(len(times), name="slot"))


def _horizon(scenario: Scenario) -> tuple[pd.DatetimeIndex, int]:
    """The horizon's slot start times (UTC) and the grid row of the first slot."""
    times = pd.DatetimeIndex(scenario.grid["time"].values).tz_localize("UTC")
    pos = int(times.get_indexer([pd.Timestamp(scenario.start)])[0])
    if pos < 0:
        raise ValueError(f"scenario {scenario.name!r}: grid has no step at its start")
    return times[pos:pos + scenario.n_slots], pos


def _get(result: Any, key: str) -> Any:
    """``result[key]`` of a mapping, else the attribute (None where missing)."""
    if isinstance(result, Mapping):
        return result.get(key)
    return getattr(result, key, None)


def _frames(result: Any) -> dict[str, pd.DataFrame | None]:
    """The plan, migrations, slots and jobs frames of ``result``. Not its queues: a
    simulated run builds its wide queue table (slots x queues cells, 1.2 GB for a 30-day
    Philly look-ahead) only when read, and the metrics need only the per-kind totals."""
    frames = {k: _get(result, k) for k in ("plan", "migrations", "slots", "jobs")}
    if frames["plan"] is None:
        raise ValueError("compute_metrics needs at least a plan frame")
    return frames


def _knobs(result: Any) -> Mapping[str, Any]:
    meta = result.get("meta") if isinstance(result, Mapping) else getattr(result, "meta", None)
    return (meta or {}).get("knobs", {}) or {}


def _caps(result: Any, scenario: Scenario, slots: pd.DataFrame | None, carbon_kg: float
          ) -> dict[str, Any]:
    """Whether the run's caps (the :class:`~workbench.caps.Caps` its stored knobs hold,
    :meth:`~workbench.caps.Caps.from_stored`) held.

    ``power_cap_violations``: datacenter-slots whose grid import at the site meter
    (``grid_import_kw``, :data:`workbench.schema.SITE_SLOT`) exceeds the cap by more than
    1e-6 relative; ``power_cap_trims``: job-slots the simulator paused to
    keep an enforced cap (``power_trims`` of the slots frame). ``carbon_cap_met``: emitted
    carbon <= cap (per datacenter for a per-datacenter cap, from ``carbon_kg:<dc>``).
    """
    caps = Caps.from_stored(_knobs(result))
    out: dict[str, Any] = {"power_cap_violations": 0, "power_cap_trims": 0}
    if slots is not None and "power_trims" in slots:
        out["power_cap_trims"] = int(slots["power_trims"].astype(int).sum())
    names = [d.name for d in scenario.datacenters]
    if caps.has_power:
        limits = {n: caps.power_kw_of(n) for n in names}
        out["power_cap_kw"] = (float(caps.power_kw) if caps.power_kw is not None
                               else float(sum(caps.power_kw_by_dc.values())))
        if slots is not None and len(slots) and has_meter(slots, names):
            kw = site_array(slots, "grid_import_kw", names)
            limit = np.array([limits[n] for n in names], dtype=float)
            out["power_cap_violations"] = int((kw > limit[None, :] * (1 + 1e-6)).sum())
    scopes = caps.carbon_scopes()
    if scopes:
        out["carbon_cap_kg"] = float(sum(scopes.values()))
        if caps.carbon_kg_by_dc:
            met = True
            for dc, cap in scopes.items():
                col = f"carbon_kg:{dc}"
                if slots is not None and col in slots:
                    met &= float(slots[col].sum()) <= float(cap) * (1 + 1e-9)
            out["carbon_cap_met"] = bool(met)
        else:
            out["carbon_cap_met"] = bool(carbon_kg <= float(scopes["all"]) * (1 + 1e-9))
    return out


def inference_carbon_floor_kg(scenario: Scenario) -> float:
    """Least carbon the inference services can emit over the horizon, kg.

    Each service, every slot it is up, in its lowest-carbon allowed datacenter:
    ``sum_t min_d n * P_load * slot_s / 3.6e6 * PUE_d * c[d, t] / 1000``.
    """
    carbon = scenario.grid["carbon_g_per_kwh"].isel(time=slice(0, scenario.n_slots))
    total = 0.0
    for job in scenario.jobs_of_kind("inference"):
        a = max(scenario.slot_of(job.arrival), 0)
        assert job.end is not None
        b = min(scenario.slot_of(job.end), scenario.n_slots)
        if b <= a:
            continue
        best = np.full(b - a, np.inf)
        limit = job.max_latency_ms if job.max_latency_ms is not None else math.inf
        for dc in scenario.datacenters:
            if scenario.latency_ms(job.home, dc.name) > limit:
                continue
            for pool in scenario.pools_at(dc.name):
                if not job.allows(pool.gpu_type) or job.requested_gpus > pool.count:
                    continue
                kwh = service_power_w(job, pool) * scenario.slot_s / J_PER_KWH * dc.pue
                c = carbon.sel(region=dc.region).values[a:b]
                best = np.minimum(best, kwh * c / G_PER_KG)
        total += float(np.sum(best[np.isfinite(best)]))
    return total


def _float(x: float) -> float:
    return float(x) if x is not None and math.isfinite(float(x)) else math.nan


def compute_metrics(result: Any, scenario: Scenario) -> dict[str, Any]:
    """Metrics of one run.

    Parameters
    ----------
    result : RunResult or mapping
        A :class:`workbench.sim.RunResult`, or a mapping with a ``plan`` frame and
        optionally ``migrations``, ``slots``, ``jobs`` and ``queues`` frames (e.g. read back
        from CSV or the store).
    scenario : Scenario
        The scenario the run used (pools, homes, prices for peak hours).

    Returns
    -------
    dict
        Flat: :data:`METRIC_KEYS`, then ``gpu_utilisation:<dc>/<gpu>``,
        ``queue_mean:<kind>`` and ``queue_max:<kind>``. Definitions:

        - ``energy_kwh``: the jobs' facility energy (IT x PUE, transfers included), the
          sites' idle load apart.
        - ``cost`` and ``carbon_kg``: the part of the bill (and of the carbon) the plan
          controls, ``bill_total - bill_no_jobs_total`` from the site meter
          (:func:`workbench.bill.bill_metrics`); the plan rows' ``cost`` and
          ``carbon_kg`` are each row's share of it. A run read back without its meter (a
          plan CSV) has the rows' sums.
        - ``cost_at_grid_price``, ``carbon_kg_at_grid_intensity``: the jobs' energy at the
          grid's price and carbon (the attribution's starting point).
        - ``energy_moved_kwh``: energy of rows run outside the job's home datacenter.
        - ``energy_peak_kwh`` / ``energy_offpeak_kwh``: split by :func:`peak_mask`.
        - ``mean_jct_h``, ``p95_jct_h``: completion time ``finish - arrival`` of finished
          training jobs, hours (NaN when none finished).
        - ``deadline_misses``: training jobs that finished after their deadline, or did not
          finish although their deadline fell inside the horizon.
        - ``jobs_finished`` / ``jobs_total``: training jobs only; inference services are
          counted in ``inference_services`` and their unserved slots separately.
        - ``gpu_utilisation``: busy GPU-slots / (GPUs x slots), overall and per pool.
        - ``jobs_waiting_mean``: mean number of active training jobs not running.
        - ``queue_mean:<kind>``, ``queue_max:<kind>``: mean and maximum over time of the
          policy's queue backlogs, summed over queues named ``<kind>:<key>`` (so
          ``queue_mean:Z`` is the mean total carbon backlog).
        - ``decide_s_*``: wall time of the policy's decision per slot; ``solve_s_*``: the
          solver time the policy reported (0 when it reports none); ``fallbacks``: slots
          answered by a fallback allocation.
        - ``equal_work_cost``, ``equal_work_carbon_kg``, ``unfinished_charge``,
          ``unfinished_carbon_kg``, ``unfinished_work_jobs``: the run on equal work, its
          undone training work charged at a stated price
          (:func:`workbench.equal_work.equal_work`).
    """
    f = _frames(result)
    plan = f["plan"]
    assert plan is not None
    running = plan["n_gpus"].fillna(0).astype(int) > 0
    out: dict[str, Any] = _energy_metrics(plan, scenario, running)
    out.update(cost_at_grid_price=out["cost"], carbon_kg_at_grid_intensity=out["carbon_kg"])
    slots = f["slots"]
    out.update(bill_metrics(plan, slots, scenario))
    out.update(equal_work(plan, scenario, out["cost"], out["carbon_kg"]))
    out.update(_job_metrics(f["jobs"], plan, scenario))
    out.update(_movement_metrics(f["migrations"], plan))
    per_pool = _utilisation(plan, scenario, running)
    out["gpu_utilisation"] = per_pool.pop("gpu_utilisation")
    out.update(_slot_metrics(slots))
    out.update(_caps(result, scenario, slots, out["carbon_kg"]))
    out.update(per_pool)
    out.update(_queue_metrics(result, slots))
    return out


def _energy_metrics(plan: pd.DataFrame, scenario: Scenario, running: pd.Series
                    ) -> dict[str, Any]:
    """Energy, cost and carbon of the plan; energy run away from home; peak and off-peak."""
    out: dict[str, Any] = {
        "energy_kwh": float(plan["energy_kwh"].sum()), "cost": float(plan["cost"].sum()),
        "currency": scenario.currency, "carbon_kg": float(plan["carbon_kg"].sum())}
    home = plan["home"] if "home" in plan else plan["job_id"].map(
        {j.job_id: j.home for j in scenario.jobs})
    out["energy_moved_kwh"] = float(plan.loc[running & (plan["region"] != home),
                                             "energy_kwh"].sum())
    peak = peak_mask(scenario)
    region_of = {d.name: d.region for d in scenario.datacenters}
    if "slot" in plan:
        slot = plan["slot"].astype(int).to_numpy()
    else:
        start = pd.Timestamp(scenario.start)
        slot = ((pd.to_datetime(plan["slot_start"], utc=True) - start).dt.total_seconds()
                // scenario.slot_s).astype(int).to_numpy()
    regs = plan["region"].map(region_of)
    is_peak = np.zeros(len(plan), dtype=bool)
    for region in peak.columns:
        rows = (regs == region).to_numpy() & (slot >= 0) & (slot < len(peak))
        is_peak[rows] = peak[region].to_numpy()[slot[rows]]
    out["energy_peak_kwh"] = float(plan.loc[is_peak, "energy_kwh"].sum())
    out["energy_offpeak_kwh"] = float(plan.loc[~is_peak, "energy_kwh"].sum())
    return out


def _job_metrics(jobs: pd.DataFrame | None, plan: pd.DataFrame, scenario: Scenario
                 ) -> dict[str, Any]:
    """Completion times, deadline misses, finished and unfinished jobs, inference service:
    from the run's job outcomes when it has them, else from the plan's finish rows."""
    training = [j for j in scenario.jobs if j.is_training]
    if jobs is not None and len(jobs):
        tr = jobs[jobs["kind"] == "training"]
        finished = tr[tr["finished"].astype(bool)]
        jct = finished["jct_h"].astype(float).to_numpy()
        met = tr["deadline_met"]
        misses = int(sum(1 for v in met if v is not None and v is not pd.NA
                         and not (isinstance(v, float) and math.isnan(v)) and not bool(v)))
        n_finished = len(finished)
    else:
        jct, misses, n_finished = _jobs_from_plan(plan, scenario, training)
    inf_ids = {j.job_id for j in scenario.jobs if not j.is_training}
    return {
        "mean_jct_h": _float(np.mean(jct)) if len(jct) else math.nan,
        "p95_jct_h": _float(np.percentile(jct, 95)) if len(jct) else math.nan,
        "deadline_misses": misses, "jobs_finished": int(n_finished),
        "jobs_total": len(training), "jobs_unfinished": len(training) - int(n_finished),
        "inference_services": len(scenario.jobs) - len(training),
        "inference_unserved_slots": int(
            ((plan["action"] == "pause") & plan["job_id"].isin(inf_ids)).sum()),
    }


def _jobs_from_plan(plan: pd.DataFrame, scenario: Scenario, training: list[Any]
                    ) -> tuple[np.ndarray, int, int]:
    """Completion times (h), deadline misses and finished count from a plan's finish rows
    (a plan read back without its job outcomes)."""
    fin = plan[plan["action"] == "finish"]
    fin = fin[fin["job_id"].isin({j.job_id for j in training})]
    end = pd.to_datetime(fin["slot_start"], utc=True) + pd.to_timedelta(
        fin["used_s"] if "used_s" in fin else scenario.slot_s, unit="s")
    arrival = pd.to_datetime(
        fin["job_id"].map({j.job_id: pd.Timestamp(j.arrival) for j in training}), utc=True)
    jct = ((end - arrival).dt.total_seconds() / 3600.0).to_numpy()
    done = dict(zip(fin["job_id"], end, strict=True))
    misses = 0
    horizon_end = pd.Timestamp(scenario.end)
    for j in training:
        if j.deadline is None:
            continue
        when = done.get(j.job_id)
        if (when is None and pd.Timestamp(j.deadline) <= horizon_end) or (
            when is not None and when > pd.Timestamp(j.deadline)
        ):
            misses += 1
    return jct, misses, len(fin)


def _movement_metrics(mig: pd.DataFrame | None, plan: pd.DataFrame) -> dict[str, Any]:
    """Migrations, data moves and their GB; data moved, seconds lost and movement energy
    over the plan; round trips."""
    out: dict[str, Any] = {}
    if mig is None:
        out.update(migrations=0, migration_gb=0.0, data_moves=0)
    else:
        moved = mig["moved"].astype(str) if "moved" in mig else pd.Series(
            "checkpoint", index=mig.index)
        out["migrations"] = int(moved.str.contains("checkpoint").sum())
        out["migration_gb"] = float(
            (mig["transfer_gb"] if "transfer_gb" in mig else mig["checkpoint_gb"]).sum())
        out["data_moves"] = len(mig)
    out["transfer_gb"] = float(plan["transfer_gb"].sum()) if "transfer_gb" in plan else 0.0
    out["lost_s"] = float(plan["lost_s"].sum()) if "lost_s" in plan else 0.0
    out["movement_kwh"] = float(plan["movement_kwh"].sum()) if "movement_kwh" in plan else 0.0
    out["round_trips"] = round_trips(mig)
    return out


def _utilisation(plan: pd.DataFrame, scenario: Scenario, running: pd.Series
                 ) -> dict[str, float]:
    """Busy GPU-slots over GPUs x slots: ``gpu_utilisation`` and per pool
    ``gpu_utilisation:<dc>/<gpu>``."""
    busy = plan.loc[running].groupby(["region", "gpu_type"])["n_gpus"].sum()
    out: dict[str, float] = {}
    total_busy = 0.0
    total_cap = 0.0
    for p in scenario.pools:
        b = float(busy.get((p.datacenter, p.gpu_type), 0.0))
        cap = float(p.count * scenario.n_slots)
        out[f"gpu_utilisation:{p.datacenter}/{p.gpu_type}"] = b / cap
        total_busy += b
        total_cap += cap
    out["gpu_utilisation"] = total_busy / total_cap if total_cap else 0.0
    return out


def _slot_metrics(slots: pd.DataFrame | None) -> dict[str, Any]:
    """Jobs waiting, decision and solver seconds per slot, fallbacks."""
    if slots is None or not len(slots):
        return dict(jobs_waiting_mean=math.nan, decide_s_mean=math.nan, decide_s_max=math.nan,
                    solve_s_mean=0.0, solve_s_max=0.0, fallbacks=0)
    solve = slots["solve_s"].astype(float).dropna() if "solve_s" in slots else pd.Series()
    return {
        "jobs_waiting_mean": float(slots["jobs_waiting"].mean()),
        "decide_s_mean": float(slots["decide_s"].mean()),
        "decide_s_max": float(slots["decide_s"].max()),
        "solve_s_mean": float(solve.mean()) if len(solve) else 0.0,
        "solve_s_max": float(solve.max()) if len(solve) else 0.0,
        "fallbacks": int(slots["fallback"].astype(bool).sum()) if "fallback" in slots else 0,
    }


def _queue_metrics(result: Any, slots: pd.DataFrame | None) -> dict[str, float]:
    """``queue_mean:<kind>`` and ``queue_max:<kind>`` of the policy's queue backlogs.

    Queues named ``<kind>:<key>`` (e.g. ``Z:guangzhou``, ``R:job-7``) are summed per kind,
    so the metric count stays small however many jobs a run has. A simulated run has the
    sums per slot already (``RunResult.queue_totals``, from its long-form queue trace).
    """
    totals = _get(result, "queue_totals")
    if totals is None:
        queues = _get(result, "queues")
        if queues is None and slots is not None and "queues" in slots:
            queues = pd.DataFrame([json.loads(q) for q in slots["queues"]])
        totals = None if queues is None else queue_kind_totals(queues)
    out: dict[str, float] = {}
    if totals is not None:
        for kind in totals.columns:
            q = totals[kind].astype(float)
            out[f"queue_mean:{kind}"] = float(q.mean())
            out[f"queue_max:{kind}"] = float(q.max())
    return out


def queue_kind_totals(queues: pd.DataFrame) -> pd.DataFrame:
    """Per row (slot), the sum of the queues of each kind (the name before ``:``)."""
    groups: dict[str, list[str]] = {}
    for name in queues.columns:
        groups.setdefault(str(name).split(":", 1)[0], []).append(name)
    return pd.DataFrame({kind: queues[names].astype(float).fillna(0.0).sum(axis=1)
                         for kind, names in sorted(groups.items())}, index=queues.index)


ATTRIBUTION_KEYS: tuple[str, ...] = ("efficiency", "temporal", "spatial", "movement")
"""The parts of a saving against a baseline (:func:`attribute_savings`) at the grid's price."""

LEVER_ATTRIBUTION_KEYS: tuple[str, ...] = ("power_limits", "supply", "demand")
"""The parts of the green levers (:func:`attribute_savings`): GPU power limits (split out of
efficiency), the sites' renewables and batteries, and demand charges (cost only)."""


def _own_and_home(plan: pd.DataFrame, scenario: Scenario, var: str
                  ) -> tuple[float, float, float, float]:
    """Jobs' own energy (kWh, without movement), its value at the row's own and at the
    job's home rate (sum kWh * rate), and the value of the row totals (cost or kg*1000)."""
    slot_h = scenario.slot_s
    times, pos = _horizon(scenario)
    if "slot" in plan:
        slot = plan["slot"].astype(int).to_numpy()
    else:
        start = pd.Timestamp(scenario.start)
        slot = ((pd.to_datetime(plan["slot_start"], utc=True) - start).dt.total_seconds()
                // slot_h).astype(int).to_numpy()
    home = plan["home"] if "home" in plan else plan["job_id"].map(
        {j.job_id: j.home for j in scenario.jobs})
    region_of = {d.name: d.region for d in scenario.datacenters}
    rate_col = "price_per_kwh" if var == "price_per_kwh" else "carbon_g_per_kwh"
    values = np.asarray(scenario.grid[rate_col].values[pos:pos + scenario.n_slots], dtype=float)
    r_index = {str(r): i for i, r in enumerate(scenario.grid["region"].values)}
    movement = plan["movement_kwh"].to_numpy(float) if "movement_kwh" in plan else np.zeros(
        len(plan))
    own = plan["energy_kwh"].to_numpy(float) - movement
    rate = plan[rate_col].to_numpy(float)
    hreg = home.map(region_of).map(r_index).to_numpy()
    ok = (slot >= 0) & (slot < values.shape[0])
    home_rate = np.where(ok, values[np.clip(slot, 0, values.shape[0] - 1),
                                    hreg.astype(int)], rate)
    total = (plan["cost"].to_numpy(float) if var == "price_per_kwh"
             else plan["carbon_kg"].to_numpy(float) * G_PER_KG)
    return float(own.sum()), float((own * rate).sum()), float((own * home_rate).sum()), \
        float(total.sum())


def _run_metrics(run: Any) -> Mapping[str, Any]:
    got = run.get("metrics") if isinstance(run, Mapping) else getattr(run, "metrics", None)
    return got or {}


def attribute_savings(result: Any, baseline: Any, scenario: Scenario
                      ) -> dict[str, dict[str, float]]:
    """Split a plan's saving against a baseline into where it comes from (exactly).

    With the baseline's energy ``E_b`` at its mean price ``P_b = cost_b / E_b``, the plan's
    own energy ``E_p`` (its jobs' energy without transfer and restart overhead) at its mean
    price ``P_p``, ``P_h`` the mean price that energy would have paid at each job's *home*
    datacenter in the same slots, and ``M`` the cost of the plan's transfer and restart
    energy (DESIGN.md, "Attribution of a saving"), all at the grid's price::

        cost_b - cost_p = (E_b - E_p) * P_b        efficiency (less energy, same work)
                        + E_p * (P_b - P_h)        temporal (cheaper hours at home)
                        + E_p * (P_h - P_p)        spatial (cheaper datacenters)
                        - M                        movement (transfers and restarts)

    The green levers add three parts (0 for runs without them), so that the parts add up to
    the saving on the bill (``cost``, the part of the bill the plan controls; the whole
    bill's saving is the same amount, :mod:`workbench.bill`)::

        power_limits = (S_p - S_b) * P_b     S: energy the GPU power limits saved (kWh), out
                                             of efficiency (efficiency becomes
                                             (E_b + S_b - E_p - S_p) P_b)
        supply       = (G_p - C_p) - (G_b - C_b)   G: the jobs' energy at the grid price,
                                             C: their energy charges through the meter
                                             (own supply, batteries, export)
        demand       = D_b - D_p             D: demand and capacity charges above the
                                             no-jobs meter's

    and, where a run had grid events, ``events = N_b - N_p`` (``N``: the events' penalties
    less their payments, :func:`workbench.events.settle`), with ``C = cost - D - N``. The
    same with carbon intensity for ``carbon_kg`` (without ``demand`` and ``events``). The
    parts add up to ``cost_b - cost_p`` (up to float rounding) when both
    runs carry their metrics, else to the saving at the grid's price; kg likewise.

    Parameters
    ----------
    result, baseline : RunResult or mapping with a ``plan`` frame (and ``metrics``)
    scenario : Scenario
        For the home datacenters' prices and carbon in each slot.

    Returns
    -------
    dict
        ``{"cost": {efficiency, temporal, spatial, movement, power_limits, supply, demand,
        events}, "carbon_kg": {... without demand and events}}``, in the scenario's currency
        and in kg; positive parts save, negative parts cost. The green levers' parts are
        there only when the scenario has supply or demand charges or a run drew under a
        power limit (without them the four parts are the whole split, as before the levers
        existed), ``events`` only where a run had grid events.
    """
    p_plan = _frames(result)["plan"]
    b_plan = _frames(baseline)["plan"]
    assert p_plan is not None and b_plan is not None
    m_p, m_b = _run_metrics(result), _run_metrics(baseline)
    out: dict[str, dict[str, float]] = {}
    for key, var, scale, at_grid in (
            ("cost", "price_per_kwh", 1.0, "cost_at_grid_price"),
            ("carbon_kg", "carbon_g_per_kwh", G_PER_KG, "carbon_kg_at_grid_intensity")):
        e_b = float(b_plan["energy_kwh"].sum())
        e_p, own_at_p, own_at_h, rows_p = _own_and_home(p_plan, scenario, var)
        rows_b = float((b_plan["cost"] if key == "cost" else b_plan["carbon_kg"] * G_PER_KG)
                       .sum())
        g_b = float(m_b[at_grid]) * scale if at_grid in m_b else rows_b
        g_p = float(m_p[at_grid]) * scale if at_grid in m_p else rows_p
        p_b = g_b / e_b if e_b else 0.0
        p_p = own_at_p / e_p if e_p else 0.0
        p_h = own_at_h / e_p if e_p else 0.0
        s_p, s_b = (float(plan["limit_saved_kwh"].fillna(0.0).sum())
                    if "limit_saved_kwh" in plan else 0.0 for plan in (p_plan, b_plan))
        parts = {
            "efficiency": (e_b + s_b - e_p - s_p) * p_b / scale,
            "temporal": e_p * (p_b - p_h) / scale,
            "spatial": e_p * (p_h - p_p) / scale,
            "movement": -(g_p - own_at_p) / scale,
        }
        if not scenario.supply.empty or s_p or s_b:
            parts["power_limits"] = (s_p - s_b) * p_b / scale
            demand_p = _controllable_demand(m_p) if key == "cost" else 0.0
            demand_b = _controllable_demand(m_b) if key == "cost" else 0.0

            def through_meter(m: Mapping[str, Any], g: float, d: float, k: str = key,
                              sc: float = scale) -> float:
                net = _event_net(m) if k == "cost" else 0.0
                return g / sc - (float(m[k]) - d - net) if k in m else 0.0

            parts["supply"] = (through_meter(m_p, g_p, demand_p)
                               - through_meter(m_b, g_b, demand_b))
            if key == "cost":
                parts["demand"] = demand_b - demand_p
        if key == "cost" and (m_p.get("grid_events") or m_b.get("grid_events")):
            parts["events"] = _event_net(m_b) - _event_net(m_p)
        out[key] = parts
    return out


def _event_net(m: Mapping[str, Any]) -> float:
    """A run's grid-event penalties less its payments (0 without events)."""
    return (float(m.get("bill_event_penalty", 0.0) or 0.0)
            - float(m.get("bill_event_payment", 0.0) or 0.0))


def _controllable_demand(m: Mapping[str, Any]) -> float:
    """A run's demand and capacity charges above the no-jobs meter's (0 without them)."""
    if "bill_total" not in m:
        return 0.0
    return (float(m.get("bill_demand", 0.0) or 0.0) + float(m.get("bill_capacity", 0.0) or 0.0)
            - float(m.get("bill_no_jobs_demand", 0.0) or 0.0))
