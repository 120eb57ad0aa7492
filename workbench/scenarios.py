"""Built-in scenarios: the embedded ``seed3`` week, generated deterministically from
``data/seed3.toml`` and the fitted profiles in ``data/profiles.json``.

``build_seed3(seed)`` always returns the same scenario for the same seed: tariffs and carbon
shapes come from the TOML file, the day-to-day carbon noise and the job mix from
``numpy.random.default_rng(seed)``.

A built-in scenario is read without being written (:func:`stored_or_builtin`); it is saved
only where a command asks for it, and never over other stored data of its name
(:func:`save_checked`).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo

import numpy as np
import pandas as pd

from workbench import cubes, perf
from workbench.model import Datacenter, GpuPool, Job, Link, Scenario, ScenarioError, as_utc

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
BUILTIN = {"seed3": DATA_DIR / "seed3.toml"}


def builtin_names() -> list[str]:
    return sorted(BUILTIN)


def load_config(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(
            f"scenario file {path} not found; the embedded files live in {DATA_DIR}"
        )
    with path.open("rb") as fh:
        return tomllib.load(fh)


def _in_windows(hours: np.ndarray, windows: Sequence[Sequence[float]]) -> np.ndarray:
    mask = np.zeros(hours.shape, dtype=bool)
    for lo, hi in windows:
        mask |= (hours >= lo) & (hours < hi)
    return mask


def tou_prices(times_utc: pd.DatetimeIndex, tariff: Mapping[str, Any], timezone: str) -> np.ndarray:
    """Time-of-use price at each UTC timestamp (per kWh).

    ``flat`` everywhere, ``flat * peak_ratio`` in ``peak`` windows, ``flat * valley_ratio``
    in ``valley`` windows, and ``critical_factor * peak`` in ``critical`` windows during
    ``critical_months``; windows are local hours ``[start, end)``.
    """
    local = times_utc.tz_localize("UTC").tz_convert(timezone)
    hours = np.asarray(local.hour + local.minute / 60.0, dtype=float)
    flat = float(tariff["flat"])
    peak = flat * float(tariff["peak_ratio"])
    price = np.full(hours.shape, flat)
    price[_in_windows(hours, tariff["peak"])] = peak
    price[_in_windows(hours, tariff["valley"])] = flat * float(tariff["valley_ratio"])
    months = np.asarray(local.month)
    critical = _in_windows(hours, tariff.get("critical", [])) & np.isin(
        months, tariff.get("critical_months", []))
    price[critical] = peak * float(tariff.get("critical_factor", 1.0))
    return price


def carbon_profile(
    times_utc: pd.DatetimeIndex, params: Mapping[str, Any], timezone: str,
    rng: np.random.Generator,
) -> np.ndarray:
    """Hourly carbon intensity (gCO2/kWh) with a solar dip, an evening ramp and AR(1) noise.

    ``c(h) = mean * (1 - solar_dip * s(h) + evening_ramp * r(h)) * (1 + noise_day)`` with
    ``s`` a bump centred at 13:00 local (zero at night), ``r`` a bump centred at 20:00, and
    ``noise_day`` an AR(1) series per hour (coefficient 0.9, stationary sd ``noise``).
    """
    local = times_utc.tz_localize("UTC").tz_convert(timezone)
    h = np.asarray(local.hour + local.minute / 60.0, dtype=float)
    solar = np.clip(np.cos((h - 13.0) / 12.0 * np.pi * 2.0), 0.0, None) * ((h > 6) & (h < 20))
    ramp = np.exp(-0.5 * ((h - 20.0) / 2.0) ** 2)
    hour_index = np.asarray((times_utc - times_utc[0]).total_seconds() // 3600, dtype=int)
    n_hours = int(hour_index.max()) + 1
    sd = float(params["noise"])
    eps = rng.standard_normal(n_hours) * sd * np.sqrt(1 - 0.9**2)
    ar = np.zeros(n_hours)
    for i in range(1, n_hours):
        ar[i] = 0.9 * ar[i - 1] + eps[i]
    shape = 1.0 - float(params["solar_dip"]) * solar + float(params["evening_ramp"]) * ramp
    return float(params["mean"]) * shape * (1.0 + ar[hour_index])


def _grid_cube(cfg: Mapping[str, Any], start: datetime, n_slots: int, slot_s: int,
               rng: np.random.Generator) -> Any:
    dcs = cfg["datacenters"]
    regions = [d["region"] for d in dcs]
    tz_of = {d["region"]: d["timezone"] for d in dcs}
    times = pd.date_range(pd.Timestamp(start).tz_localize(None), periods=n_slots,
                          freq=pd.Timedelta(seconds=slot_s))
    # Carbon is hourly (step-held to the slot); prices follow the tariff windows exactly.
    hourly = times.floor("h")
    price = np.column_stack([tou_prices(times, cfg["tariffs"][r], tz_of[r]) for r in regions])
    carbon = np.column_stack(
        [carbon_profile(hourly, cfg["carbon"][r], tz_of[r], rng) for r in regions])
    source = "seed3 generator: TOU tariffs and carbon shapes of data/seed3.toml"
    cube = cubes.make_cube(times, regions, price, carbon, cfg["scenario"]["currency"], slot_s,
                           source=source)
    cube.attrs["timezones"] = tz_of
    cube.attrs["price_kind"] = "tariff"
    return cube


def _jobs(cfg: Mapping[str, Any], profiles: Sequence[perf.JobProfile], start: datetime,
          end: datetime, pools: Sequence[GpuPool], rng: np.random.Generator) -> list[Job]:
    jc = cfg["jobs"]
    prof = {(p.app, p.gpu_type): p for p in profiles}
    homes = list(jc["home_share"])
    home_p = np.asarray([jc["home_share"][h] for h in homes], dtype=float)
    counts = np.asarray(jc["gpu_counts"], dtype=int)
    count_p = np.asarray(jc["gpu_count_prob"], dtype=float)
    ref = jc["reference_gpu"]
    nvidia = sorted({p.gpu_type for p in pools if p.gpu_type in ("H800", "A100", "V100")})
    horizon_h = (end - start).total_seconds() / 3600.0
    jobs: list[Job] = []
    for i in range(int(jc["training"])):
        app = str(rng.choice(jc["apps"]))
        home = str(rng.choice(homes, p=home_p / home_p.sum()))
        n = int(rng.choice(counts, p=count_p / count_p.sum()))
        dur_h = float(np.clip(rng.lognormal(np.log(jc["duration_median_h"]), jc["duration_sigma"]),
                              jc["duration_min_h"], jc["duration_max_h"]))
        slack = float(rng.uniform(jc["slack_min"], jc["slack_max"]))
        extra_h = float(rng.uniform(jc["extra_min_h"], jc["extra_max_h"]))
        need_h = dur_h * slack + extra_h
        # Arrivals follow office hours (more submissions 09:00-21:00 local) and leave room
        # for the deadline inside the horizon.
        latest = max(horizon_h - need_h, 0.0)
        arrival_h = float(rng.uniform(0.0, latest))
        hour_local = (arrival_h + 8.0) % 24
        if hour_local < 9 and rng.random() < 0.5:
            arrival_h = min(arrival_h + (9 - hour_local), latest)
        arrival = start + timedelta(hours=round(arrival_h * 4) / 4)
        deadline = min(arrival + timedelta(hours=need_h), end)
        p_ref = prof[(app, ref)]
        lo, hi = perf.batch_bounds(p_ref, n)
        batch = int(np.clip(p_ref.efficiency.m0 * max(n // 2, 1), lo, hi))
        rate = float(perf.ecu(p_ref, n, batch, 0.0))
        work = rate * dur_h * 3600.0
        menu = tuple(sorted({c for c in (1, 2, 4, 8, 16, 32) if c <= max(2 * n, 2)} | {n}))
        cuda_only = bool(rng.random() < jc["cuda_only_share"])
        jobs.append(Job(
            job_id=f"{app}-{i:03d}", kind="training", app=app, arrival=arrival, home=home,
            requested_gpus=n, gpu_counts=menu, batch_size=batch, work_samples=work,
            deadline=deadline, checkpoint_gb=float(jc["checkpoint_gb"][app]),
            gpu_types=tuple(nvidia) if cuda_only else (),
            dataset_gb=float(jc.get("dataset_gb", {}).get(app, 0.0)),
        ))
    for svc in cfg.get("inference", []):
        jobs.append(Job(
            job_id=svc["job_id"], kind="inference", app=svc["app"], arrival=start,
            home=svc["home"], requested_gpus=int(svc["gpus"]), gpu_counts=(int(svc["gpus"]),),
            batch_size=1, end=end, max_latency_ms=float(svc["max_latency_ms"]),
            gpu_types=(svc["gpu_type"],), load_fraction=float(svc["load_fraction"]),
            checkpoint_gb=float(jc["checkpoint_gb"].get(svc["app"], 1.0)),
            dataset_gb=float(svc.get("dataset_gb", jc["checkpoint_gb"].get(svc["app"], 1.0))),
        ))
    return sorted(jobs, key=lambda j: (j.arrival, j.job_id))


def build_from_config(cfg: Mapping[str, Any], seed: int = 0,
                      profiles: Sequence[perf.JobProfile] | None = None) -> Scenario:
    """Build a scenario like ``seed3`` from a parsed TOML config (see data/seed3.toml)."""
    sc = cfg["scenario"]
    rng = np.random.default_rng(seed)
    tz = ZoneInfo(sc["timezone"])
    start = as_utc(datetime.fromisoformat(sc["start_local"]).replace(tzinfo=tz))
    slot_s = int(sc["slot_minutes"]) * 60
    n_slots = int(round(float(sc["days"]) * 86400 / slot_s))
    end = start + timedelta(seconds=slot_s * n_slots)
    dcs = [Datacenter(**d) for d in cfg["datacenters"]]
    pools = [GpuPool(**p) for p in cfg["pools"]]
    links = [Link(**lk) for lk in cfg["links"]]
    cube = _grid_cube(cfg, start, n_slots, slot_s, rng)
    profiles = list(profiles) if profiles is not None else perf.load_default_profiles()
    jobs = _jobs(cfg, profiles, start, end, pools, rng)
    apps = {j.app for j in jobs}
    return Scenario(
        name=str(sc["name"]), datacenters=tuple(dcs), pools=tuple(pools), links=tuple(links),
        jobs=tuple(jobs), profiles=tuple(p for p in profiles if p.app in apps), grid=cube,
        start=start, slot_s=slot_s, n_slots=n_slots, currency=str(sc["currency"]),
        description=str(sc.get("description", "")),
    )


def build_seed3(seed: int = 0) -> Scenario:
    """The embedded default scenario: three datacenters, one week of 15-minute slots."""
    return build_from_config(load_config(BUILTIN["seed3"]), seed=seed)


def build_builtin(name: str, seed: int = 0) -> Scenario:
    if name not in BUILTIN:
        raise KeyError(f"no built-in scenario {name!r}; built-in: {builtin_names()}")
    return build_from_config(load_config(BUILTIN[name]), seed=seed)


def stored_or_builtin(store: Any, name: str) -> Scenario:
    """The scenario ``name`` as the store holds it; else, for a built-in name, the built-in
    generated in memory (seed 0). Nothing is written: reading a scenario never replaces
    stored data (a job set of the same name stays). ``store`` may be None (no store file:
    built-in names only). Raises the store's error, naming the stored scenarios, otherwise.
    """
    if store is not None and store.has_scenario(name):
        return store.load_scenario(name)
    if name in BUILTIN:
        return build_builtin(name)
    if store is None:
        raise ScenarioError(f"no scenario {name!r}: there is no store, and the built-in "
                            f"scenarios are {', '.join(builtin_names())}")
    return store.load_scenario(name)  # raises with the known names


def differences(stored: Scenario, new: Scenario) -> list[str]:
    """What differs between two scenarios of one name, in words (empty: the same horizon,
    datacenters, pools, links, jobs and grid values; profiles are the store's, not the
    scenario's, and are not compared)."""
    out = []
    for what in ("start", "slot_s", "n_slots", "currency", "description"):
        if getattr(stored, what) != getattr(new, what):
            out.append(f"{what} {getattr(stored, what)} stored, {getattr(new, what)} new")
    for what in ("datacenters", "pools", "links"):
        if set(getattr(stored, what)) != set(getattr(new, what)):
            out.append(f"its {what} differ")
    old_jobs = {j.job_id: j for j in stored.jobs}
    new_jobs = {j.job_id: j for j in new.jobs}
    if old_jobs != new_jobs:
        changed = sum(old_jobs.get(k) != j for k, j in new_jobs.items())
        out.append(f"jobs: {len(old_jobs):,} stored, {len(new_jobs):,} new ({changed:,} of "
                   "the new ones not stored as they are)")
    if not out:
        regions = [str(r) for r in new.grid["region"].values]
        for var in cubes.VARIABLES:
            a = stored.grid[var].sel(region=regions).values[: new.n_slots]
            b = new.grid[var].values[: new.n_slots]
            if a.shape != b.shape or not np.array_equal(a, b, equal_nan=True):
                out.append(f"its {var} values differ")
    return out


SaveOutcome = Literal["saved", "unchanged", "replaced"]
"""What :func:`save_checked` did."""


def save_checked(store: Any, scenario: Scenario, *, replace: bool = False,
                 fix: str = "choose another name, or pass --replace") -> SaveOutcome:
    """Save ``scenario`` unless that would replace other stored data of its name.

    Returns ``"saved"`` (the name was free), ``"unchanged"`` (the store holds this very
    scenario: nothing is written) or ``"replaced"`` (``replace`` was given and the stored
    job set or differing scenario of that name was replaced).

    Raises
    ------
    ScenarioError
        Without ``replace``, when the store holds a job set of that name, or a scenario of
        that name that :func:`differences` tells from this one; the message says what is
        stored and ``fix``.
    """
    from workbench.cubes import CubeError
    from workbench.store import StoreError

    name = scenario.name
    sets = store.job_set_sizes()
    if name in sets:
        if not replace:
            raise ScenarioError(
                f"the store holds a job set {name!r} ({sets[name]:,} jobs); saving scenario "
                f"{name} would replace it: {fix}")
        store.save_scenario(scenario)
        return "replaced"
    if store.has_scenario(name):
        try:
            diff = differences(store.load_scenario(name), scenario)
        except (ScenarioError, CubeError, StoreError) as exc:
            diff = [f"the stored one cannot be loaded ({exc})"]
        if not diff:
            return "unchanged"
        if not replace:
            raise ScenarioError(
                f"the store holds another scenario {name!r} ({'; '.join(diff[:3])}); saving "
                f"this one would replace it: {fix}")
        store.save_scenario(scenario)
        return "replaced"
    store.save_scenario(scenario)
    return "saved"


def first_hours(scenario: Scenario, hours: float, arrivals_h: float | None = None,
                name: str | None = None) -> Scenario:
    """The scenario cut to its first ``hours``, keeping the jobs that arrive in the first
    ``arrivals_h`` (default: all that arrive within ``hours``); inference services end at
    the new horizon. For quick looks, tests and tutorials."""
    end = scenario.start + timedelta(hours=hours)
    cutoff = scenario.start + timedelta(hours=hours if arrivals_h is None else arrivals_h)
    jobs = [j for j in scenario.jobs if j.arrival < cutoff]
    jobs = [replace(j, end=min(j.end, end)) if j.end is not None else j for j in jobs]
    return replace(scenario, name=name or f"{scenario.name}-{hours:g}h", jobs=tuple(jobs),
                   n_slots=int(hours * 3600 // scenario.slot_s))


def describe(scenario: Scenario) -> dict[str, Any]:
    """A JSON-ready summary: regions, GPU pools, links, horizon, slot length, job counts."""
    return {
        "name": scenario.name,
        "description": scenario.description,
        "regions": [
            {"datacenter": d.name, "region": d.region, "grid_zone": d.grid_zone,
             "timezone": d.timezone, "pue": d.pue, "idle_power_kw": d.idle_power_kw}
            for d in scenario.datacenters
        ],
        "gpu_pools": [
            {"datacenter": p.datacenter, "gpu_type": p.gpu_type, "count": p.count,
             "idle_power_w": p.idle_power_w, "max_power_w": p.max_power_w}
            for p in scenario.pools
        ],
        "links": [
            {"src": lk.src, "dst": lk.dst, "bandwidth_gbps": lk.bandwidth_gbps,
             "latency_ms": lk.latency_ms}
            for lk in scenario.links
        ],
        "start": scenario.start.isoformat(),
        "end": scenario.end.isoformat(),
        "slots": scenario.n_slots,
        "slot_minutes": scenario.slot_s / 60,
        "currency": scenario.currency,
        "jobs": {
            "training": len(scenario.jobs_of_kind("training")),
            "inference": len(scenario.jobs_of_kind("inference")),
            "total": len(scenario.jobs),
        },
    }
