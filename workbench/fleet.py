"""A fleet of many datacenters, built from the real grid series and job traces of the data folder.

:func:`build_fleet` makes a :class:`~workbench.model.Scenario` of ``n_datacenters`` sites
(50 by default) with job streams scaled to ``active_jobs`` concurrently active jobs (10,000
by default), from ``../shared/data`` alone and deterministically (no random numbers: the same
arguments give the same scenario, record for record). The rules:

**Zones** (:data:`FLEET_ZONES`): every full-year hourly carbon series in the data, 26 zones:

- the six SustainCluster zones (US-CAL-CISO, US-TEX-ERCO, US-MIDA-PJM, DE-LU, JP-TK, SG):
  2023 Electricity Maps carbon and 2023 day-ahead prices (USD);
- Electricity Maps ES, NO and BR: 2022 carbon, re-dated by 364 days onto 2023 (the same
  weekdays); no market prices in the data, so a URDB time-of-use tariff (USD) as the battery
  prices them (ES, BR: Virginia; NO: Ann Arbor);
- the 17 AVERT regions of the US: 2023 *marginal* CO2 (lb/kWh, converted to g/kWh; the few
  negative hours taken as 0), hours of the year in the region's standard time; priced at the
  2023 day-ahead market of the nearest of the three US markets in the data
  (:data:`AVERT_MARKET`).

**Datacenters.** Site ``i`` takes zone ``i mod 26``; a zone's ``k``-th repeat (``k = i // 26``)
has the zone's series shifted ``7 k`` days later (its value at time ``t`` is the zone's at
``t - 7k`` days, wrapped within 2023): the same diurnal and weekly shape, other weather.
PUE ``1.10 + 0.03 (7 i mod 10)``; GPU pools by ``i mod 3``: H800; A100; both.
Every pair is linked at 10 Gbit/s, 0.006 kWh/GB, with the round-trip latency of the GCP
latency matrix between the sites' zones (:data:`MATRIX_ZONE`; two sites of one zone: the
matrix's own value for that zone).

**Jobs.** Microsoft's Philly trace and Alibaba's v2023 GPU pods, mapped to training jobs as
``workbench import jobs`` maps them (one of the Pollux applications in turn, the trace's
duration on the requested A100s, deadline twice the duration and at least 4 hours). The
reference moment is the Philly trace's busiest (most jobs running as submitted); the
Alibaba pods are re-timed linearly onto the Philly jobs' span around it. ``copies`` streams
of both are laid over the fleet, copy ``c`` shifted ``11 c`` minutes later with its homes
rotated by ``c`` sites, as many copies as it takes to have ``active_jobs`` such jobs
(below) at the reference moment. The scenario starts there: each job running then (as
submitted) with at least an hour of its run left arrives at the start with the work it
had left and its deadline (the rest, minutes from their end, are left out); the jobs that
arrive in the following ``horizon_h`` follow. Pools are sized to 1.5 times the GPUs those
jobs ask for at the start, split evenly over the pools (multiples of 8).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

from workbench import cubes, perf
from workbench.io.grid import read_grid
from workbench.io.jobs import Trace, jobs_from_trace, read_jobs
from workbench.io.latency import latency_ms, read_latency_matrix
from workbench.model import Datacenter, GpuPool, Job, Link, Scenario, as_utc

log = logging.getLogger(__name__)

YEAR = 2023
START_DEFAULT = datetime(2023, 2, 1)
"""The fleet's first slot (UTC): a month of 2023 history precedes it (the model forecast)."""

_SC = ("US-CAL-CISO", "US-TEX-ERCO", "US-MIDA-PJM", "DE-LU", "JP-TK", "SG")
_TZ = {"US-CAL-CISO": "America/Los_Angeles", "US-TEX-ERCO": "America/Chicago",
       "US-MIDA-PJM": "America/New_York", "DE-LU": "Europe/Berlin", "JP-TK": "Asia/Tokyo",
       "SG": "Asia/Singapore", "ES": "Europe/Madrid", "NO": "Europe/Oslo",
       "BR": "America/Sao_Paulo"}
_EM_TARIFF = {"ES": "virginia", "NO": "ann_arbor", "BR": "virginia"}
AVERT_REGIONS: tuple[tuple[str, str, str], ...] = (
    # AVERT region, standard-time zone of its hours, local zone of the site
    ("CA", "Etc/GMT+8", "America/Los_Angeles"), ("CENT", "Etc/GMT+6", "America/Chicago"),
    ("FL", "Etc/GMT+5", "America/New_York"), ("MIDA", "Etc/GMT+5", "America/New_York"),
    ("MIDW", "Etc/GMT+6", "America/Chicago"), ("NCSC", "Etc/GMT+5", "America/New_York"),
    ("NE", "Etc/GMT+5", "America/New_York"), ("NW", "Etc/GMT+8", "America/Los_Angeles"),
    ("NY", "Etc/GMT+5", "America/New_York"), ("RM", "Etc/GMT+7", "America/Denver"),
    ("SE", "Etc/GMT+6", "America/Chicago"), ("SW", "Etc/GMT+7", "America/Phoenix"),
    ("TE", "Etc/GMT+6", "America/Chicago"), ("TN", "Etc/GMT+6", "America/Chicago"),
    ("AKGD", "Etc/GMT+9", "America/Anchorage"), ("HIMS", "Etc/GMT+10", "Pacific/Honolulu"),
    ("HIOA", "Etc/GMT+10", "Pacific/Honolulu"),
)
AVERT_MARKET = {"CA": "US-CAL-CISO", "NW": "US-CAL-CISO", "SW": "US-CAL-CISO",
                "AKGD": "US-CAL-CISO", "HIMS": "US-CAL-CISO", "HIOA": "US-CAL-CISO",
                "TE": "US-TEX-ERCO", "CENT": "US-TEX-ERCO", "RM": "US-TEX-ERCO"}
"""AVERT region -> the US market whose prices it takes (the rest: US-MIDA-PJM)."""
MATRIX_ZONE = {"DE-LU": "DE", "NO": "FI", "BR": "BR-CS", "AVERT-CA": "US-CAL-CISO",
               "AVERT-CENT": "US-CENT-SWPP", "AVERT-FL": "US-CAR-SC",
               "AVERT-MIDA": "US-MIDA-PJM", "AVERT-MIDW": "US-CENT-SWPP",
               "AVERT-NCSC": "US-CAR-SC", "AVERT-NE": "US-MIDA-PJM",
               "AVERT-NW": "US-NW-PACW", "AVERT-NY": "US-MIDA-PJM", "AVERT-RM": "US-NW-PACE",
               "AVERT-SE": "US-CAR-SC", "AVERT-SW": "US-NW-NEVP",
               "AVERT-TE": "US-TEX-ERCO", "AVERT-TN": "US-CAR-SC",
               "AVERT-AKGD": "US-NW-PACW", "AVERT-HIMS": "US-CAL-CISO",
               "AVERT-HIOA": "US-CAL-CISO"}
"""Fleet zone -> its zone in ``gcp_latency_matrix.csv`` (absent: the same name)."""

POOL_TYPES: tuple[tuple[str, ...], ...] = (("H800",), ("A100",), ("A100", "H800"))
_POWER_W = {"A100": (60.0, 400.0), "H800": (90.0, 700.0)}
BANDWIDTH_GBPS = 10.0
TRANSFER_KWH_PER_GB = 0.006
SHIFT_MINUTES = 11
"""Minutes each copy of the job streams is shifted after the previous one."""
MIN_LEFT_S = 3600.0
"""A job running at the start is taken when at least this much of its run is left (s): the
trace's busiest moment is full of jobs a few minutes from their end."""


@dataclass(frozen=True)
class FleetZone:
    """One zone's grid series: ``(format, path under the data folder, reader options)`` for
    its carbon and for its price, its local time zone and its latency-matrix zone."""

    name: str
    carbon: tuple[str, str, tuple[tuple[str, object], ...]]
    price: tuple[str, str, tuple[tuple[str, object], ...]]
    timezone: str
    redate_days: int = 0

    @property
    def matrix_zone(self) -> str:
        return MATRIX_ZONE.get(self.name, self.name)


def _sc_price(zone: str) -> tuple[str, str, tuple[tuple[str, object], ...]]:
    return ("price-csv", f"grid/sustain-cluster/prices/{zone}/{zone}_electricity_prices_2023.csv",
            ())


def _zones() -> tuple[FleetZone, ...]:
    out = [FleetZone(z, ("electricitymaps-csv",
                         f"grid/sustain-cluster/carbon/{z}/{z}_2023_hourly.csv", ()),
                     _sc_price(z), _TZ[z]) for z in _SC]
    for z, tariff in _EM_TARIFF.items():
        out.append(FleetZone(
            z, ("electricitymaps-csv", f"grid/electricitymaps/{z}_2022_hourly.csv", ()),
            ("urdb-json", f"tariffs/{tariff}.json",
             (("start", f"{YEAR}-01-01T00:00:00Z"), ("end", f"{YEAR + 1}-01-01T00:00:00Z"),
              ("timezone", _TZ[z]))), _TZ[z], redate_days=364))
    for region, std_tz, local_tz in AVERT_REGIONS:
        out.append(FleetZone(
            f"AVERT-{region}", ("avert", "grid/avert/AVERT_2023_CO2_lb_per_kwh.csv",
                                (("year", YEAR), ("column", region), ("timezone", std_tz))),
            _sc_price(AVERT_MARKET.get(region, "US-MIDA-PJM")), local_tz))
    return tuple(out)


FLEET_ZONES: tuple[FleetZone, ...] = _zones()
"""The 26 zones of the fleet, in site order (see the module docstring)."""


def _series(data: Path, zone: FleetZone) -> pd.DataFrame:
    """The zone's long grid rows (the store's format: ``time_utc, region, price_per_kwh,
    currency, carbon_g_per_kwh, source``), carbon re-dated onto 2023 where it is not."""
    parts = []
    for kind, (fmt, rel, opts) in (("carbon", zone.carbon), ("price", zone.price)):
        frame = read_grid(fmt, data / rel, zone.name, **dict(opts))
        frame = frame[frame["price_per_kwh" if kind == "price" else "carbon_g_per_kwh"]
                      .notna()].copy()
        if kind == "carbon":
            # AVERT's marginal rates dip below zero in some hours; a site's intensity is not.
            frame["carbon_g_per_kwh"] = frame["carbon_g_per_kwh"].clip(lower=0.0)
        if kind == "carbon" and zone.redate_days:
            frame["time_utc"] = (pd.to_datetime(frame["time_utc"])
                                 + pd.Timedelta(days=zone.redate_days))
        keep = ["time_utc", "price_per_kwh", "currency"] if kind == "price" else [
            "time_utc", "carbon_g_per_kwh"]
        parts.append(frame[keep].assign(time_utc=lambda f: pd.to_datetime(
            f["time_utc"], utc=True).dt.tz_localize(None)).set_index("time_utc"))
    carbon, price = parts
    out = price.join(carbon, how="outer").reset_index()
    out["region"] = zone.name
    out["source"] = f"fleet {zone.name}"
    return out


def _shifted(rows: pd.DataFrame, days: int, region: str) -> pd.DataFrame:
    """``rows`` with the value at ``t`` taken from ``t - days`` (wrapped within the year)."""
    if days == 0:
        return rows.assign(region=region)
    t = pd.to_datetime(rows["time_utc"]) + pd.Timedelta(days=days)
    year_end = pd.Timestamp(datetime(YEAR + 1, 1, 1))
    t = t.where(t < year_end, t - pd.Timedelta(days=365))
    return rows.assign(time_utc=t, region=region).sort_values("time_utc").reset_index(drop=True)


@dataclass(frozen=True)
class FleetSites:
    """The fleet's sites before any job: datacenters, their grid rows (long format), the
    zone of each and the links."""

    datacenters: tuple[Datacenter, ...]
    series: pd.DataFrame
    links: tuple[Link, ...]


def fleet_sites(data: str | Path, n_datacenters: int = 50) -> FleetSites:
    """Datacenters, grid rows and links of an ``n_datacenters`` fleet (module docstring)."""
    if not (isinstance(n_datacenters, int) and n_datacenters >= 1):
        raise ValueError(f"n_datacenters must be an integer >= 1, got {n_datacenters!r}")
    data = Path(data)
    zones = FLEET_ZONES
    base = {z.name: _series(data, z) for z in zones[:min(n_datacenters, len(zones))]}
    dcs: list[Datacenter] = []
    rows = []
    for i in range(n_datacenters):
        zone = zones[i % len(zones)]
        k = i // len(zones)
        region = zone.name if k == 0 else f"{zone.name}+{7 * k}d"
        dcs.append(Datacenter(
            name=f"dc{i:02d}-{zone.name.lower()}" + (f"-{k}" if k else ""), region=region,
            grid_zone=zone.matrix_zone, timezone=zone.timezone,
            pue=round(1.10 + 0.03 * ((7 * i) % 10), 2), idle_power_kw=30.0))
        rows.append(_shifted(base[zone.name], 7 * k, region))
    matrix = read_latency_matrix(data / "grid/electricitymaps/gcp_latency_matrix.csv")
    links = []
    for a in range(n_datacenters):
        for b in range(a + 1, n_datacenters):
            ms = latency_ms(matrix, dcs[a].grid_zone, dcs[b].grid_zone)
            if ms is None:
                raise ValueError(f"the latency matrix lacks zone {dcs[a].grid_zone!r} or "
                                 f"{dcs[b].grid_zone!r}")
            links.append(Link(dcs[a].name, dcs[b].name, BANDWIDTH_GBPS, ms,
                              TRANSFER_KWH_PER_GB))
    return FleetSites(tuple(dcs), pd.concat(rows, ignore_index=True), tuple(links))


def _running(arrival_s: np.ndarray, duration_s: np.ndarray, at_s: float) -> np.ndarray:
    return (arrival_s <= at_s) & (arrival_s + duration_s > at_s)


def _busiest(arrival_s: np.ndarray, duration_s: np.ndarray) -> float:
    """The arrival time (s) at which most jobs run as submitted (the first such)."""
    order = np.argsort(arrival_s, kind="stable")
    a, e = arrival_s[order], (arrival_s + duration_s)[order]
    ends = np.sort(e)
    running = np.arange(1, a.size + 1) - np.searchsorted(ends, a, side="right")
    return float(a[int(np.argmax(running))])


def _streams(data: Path) -> tuple[pd.DataFrame, pd.DataFrame, float]:
    """Philly's jobs and Alibaba's pods (seconds from Philly's first job), and the busiest
    moment of the Philly trace; the pods re-timed onto the Philly span around it."""
    philly = read_jobs("philly", data / "jobs/pollux/philly.csv").frame
    t0 = pd.Timestamp(philly["arrival_utc"].min())
    p_arr = (pd.to_datetime(philly["arrival_utc"]) - t0).dt.total_seconds().to_numpy()
    ref = _busiest(p_arr, philly["duration_s"].to_numpy(dtype=float))
    pods = read_jobs("alibaba-pods",
                     data / "jobs/alibaba-v2023/openb_pod_list_default.csv").frame
    a = pods["arrival_s"].to_numpy(dtype=float)
    lo, hi = ref - 3 * 86400.0, ref + 3 * 86400.0
    span = max(float(a.max() - a.min()), 1.0)
    pods = pods.assign(arrival_s=lo + (a - a.min()) / span * (hi - lo))
    philly = philly.assign(arrival_s=p_arr).drop(columns=["arrival_utc"])
    return philly, pods, ref


def build_fleet(data: str | Path, *, n_datacenters: int = 50, active_jobs: int = 10_000,
                horizon_h: float = 48.0, slot_minutes: int = 15,
                start: datetime = START_DEFAULT, name: str | None = None) -> Scenario:
    """The fleet scenario of the module docstring.

    Parameters
    ----------
    data : path
        The shared data folder (``../shared/data``).
    n_datacenters : int
        Sites (zones repeat, shifted by weeks, past the 26 zones).
    active_jobs : int
        Jobs running at the start (at least; whole copies of the streams).
    horizon_h : float
        Hours planned from the start.

    Raises
    ------
    ValueError
        For a count below 1 or a horizon that is not a positive whole number of slots.
    """
    if not (isinstance(active_jobs, int) and active_jobs >= 1):
        raise ValueError(f"active_jobs must be an integer >= 1, got {active_jobs!r}")
    slot_s = int(slot_minutes) * 60
    n_slots = int(round(horizon_h * 3600 / slot_s))
    if n_slots < 1:
        raise ValueError(f"horizon_h must cover at least one slot, got {horizon_h!r}")
    data = Path(data)
    start = as_utc(start)
    sites = fleet_sites(data, n_datacenters)
    names = [d.name for d in sites.datacenters]
    philly, pods, ref = _streams(data)
    profiles = perf.load_default_profiles()
    end_s = ref + horizon_h * 3600.0
    epoch = start - timedelta(seconds=ref)
    jobs: list[Job] = []
    running = copies = 0
    while running < active_jobs:
        c = copies
        shift = SHIFT_MINUTES * 60.0 * c
        homes = names[c % len(names):] + names[:c % len(names)]
        for tag, frame in (("philly", philly), ("pods", pods)):
            a = frame["arrival_s"].to_numpy(float) + shift
            d = frame["duration_s"].to_numpy(float)
            # Running at the start with at least an hour of its run left (as submitted).
            now = _running(a, d, ref) & (a + d - ref >= MIN_LEFT_S)
            running += int(now.sum())
            keep = now | ((a >= ref) & (a < end_s))
            part = frame[keep].assign(arrival_s=a[keep],
                                      job_id=[f"c{c}:{j}" for j in frame["job_id"][keep]])
            trace = Trace(f"fleet {tag}", tag, part.reset_index(drop=True), {})
            mapped = jobs_from_trace(trace, profiles, start=epoch, homes=homes)
            jobs += [_at_start(j, start, float(s)) for j, s in
                     zip(mapped, part["duration_s"].to_numpy(float), strict=True)]
        copies += 1
    jobs.sort(key=lambda j: (j.arrival, j.job_id))
    pools = _pools(sites.datacenters, jobs, start)
    end = start + timedelta(seconds=slot_s * n_slots)
    regions = sorted({d.region for d in sites.datacenters})
    tz = {d.region: d.timezone for d in sites.datacenters}
    series = sites.series
    grid = cubes.cube_from_series(
        series[(series["time_utc"] >= pd.Timestamp(start.replace(tzinfo=None)) - pd.Timedelta(
            days=1)) & (series["time_utc"] < pd.Timestamp(end.replace(tzinfo=None))
                        + pd.Timedelta(days=1))],
        slot_s=slot_s, start=start, end=end, regions=regions, timezones=tz, currency="USD",
        fill="hold")
    history = cubes.history_cube(
        series[series["time_utc"] < pd.Timestamp(start.replace(tzinfo=None))], regions, start,
        timezones=tz, currency="USD")
    apps = {j.app for j in jobs}
    log.info("fleet: %d datacenters, %d pools, %d jobs (%d copies of the streams)",
             len(names), len(pools), len(jobs), copies)
    return Scenario(
        name=name or f"fleet-{n_datacenters}dc-{active_jobs}jobs",
        datacenters=sites.datacenters, pools=tuple(pools), links=sites.links,
        jobs=tuple(jobs), profiles=tuple(p for p in profiles if p.app in apps), grid=grid,
        start=start, slot_s=slot_s, n_slots=n_slots, currency="USD",
        description=f"{n_datacenters} datacenters on the real zones of the data folder, "
        f"{copies} copies of the Philly and Alibaba v2023 streams", history=history)


MIN_DEADLINE_H = 4.0
"""Hours a job's deadline lies at least after its arrival (as the Philly benches set it)."""


def _at_start(job: Job, start: datetime, duration_s: float) -> Job:
    """The job with its deadline at least :data:`MIN_DEADLINE_H` after its arrival; one
    running at the start (as submitted) arrives there with the work it has left."""
    floor = job.arrival + timedelta(hours=MIN_DEADLINE_H)
    if job.deadline is not None and job.deadline < floor:
        job = replace(job, deadline=floor)
    if job.arrival >= start:
        return job
    done = min((start - job.arrival).total_seconds() / max(duration_s, 1e-9), 0.95)
    return replace(job, arrival=start, work_samples=job.work_samples * (1.0 - done))


def _pools(dcs: Sequence[Datacenter], jobs: Sequence[Job], start: datetime) -> list[GpuPool]:
    """Pools by site (``POOL_TYPES[i mod 3]``), sized to 1.5 times the GPUs the jobs running
    at the start ask for, split evenly (multiples of 8, at least 8)."""
    asked = sum(j.requested_gpus for j in jobs if j.arrival <= start)
    kinds = [POOL_TYPES[i % len(POOL_TYPES)] for i in range(len(dcs))]
    n_pools = sum(len(k) for k in kinds)
    size = max(8, int(math.ceil(1.5 * asked / n_pools / 8.0)) * 8)
    return [GpuPool(datacenter=d.name, gpu_type=g, count=size, idle_power_w=_POWER_W[g][0],
                    max_power_w=_POWER_W[g][1]) for d, k in zip(dcs, kinds, strict=True)
            for g in k]
