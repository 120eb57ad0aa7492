"""Compose a runnable scenario from a TOML config and what the store holds.

The config names datacenters and the imported grid series (``region``) they draw price and
carbon from, their GPU pools, the links between them (explicit, or every pair from a
latency matrix with an assumed bandwidth), the job set to take jobs from and how, inference
services, the horizon and the slot length. The complete schema, with an example, is in
``docs/importers.md``; ``examples/real_grid.toml`` is a working config.

Nothing is read from the environment and nothing is written until :func:`build_and_save`.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from workbench import cubes, perf, scenarios
from workbench.config import (
    ConfigError,
    DemandChargeEntry,
    ScenarioConfig,
    SupplyEntry,
    horizon,
    validate_config,
)
from workbench.events import GridEvent
from workbench.io.errors import InputError, quoted
from workbench.io.jobs import job_sets, load_job_set
from workbench.io.latency import latency_ms, read_latency_matrix
from workbench.io.urdb import read_urdb_demand
from workbench.model import (
    Datacenter,
    GpuPool,
    Job,
    Link,
    Scenario,
    ScenarioError,
)
from workbench.supply import Battery, DemandCharge, DemandStructure, Source, Supply

log = logging.getLogger(__name__)

class BuildError(ConfigError):
    """A scenario config cannot be built from the store; the message says what to fix."""


def load_config(path: str | Path) -> dict[str, Any]:
    """Parse a scenario TOML file; the result remembers its folder (for relative paths)."""
    p = Path(path)
    if p.is_dir():
        raise BuildError(f"scenario config {p} is a folder; pass the .toml file in it")
    if not p.is_file():
        raise BuildError(f"scenario config {p} not found; check the --config path")
    try:
        with p.open("rb") as fh:
            cfg = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise BuildError(f"{p}: not valid TOML ({exc}); fix the line it names") from None
    except UnicodeDecodeError:
        raise BuildError(f"{p}: not UTF-8 text (a binary file?); pass the scenario TOML "
                         "file") from None
    if not cfg:
        raise BuildError(f"{p} is empty; a config needs [scenario] (start and one of end, "
                         "days, hours) and [[datacenters]] (see the README)")
    cfg["_base_dir"] = str(p.resolve().parent)
    return cfg


def _check_names(store: Any, cfg: ScenarioConfig) -> None:
    """Every name a config gives is one the workbench knows: datacenters of ``[[pools]]``,
    ``[[links]]``, ``[jobs] homes`` and ``[[inference]]`` homes among the
    ``[[datacenters]]``; GPU types of pools among those with a profile (stored or shipped)
    or a device spec (``workbench devices list``); an inference service's application among
    the profiled ones and its GPU type among the pools'; an LLM job's home and GPU types
    likewise. (Regions, the job set and the
    latency matrix's zones are checked against the store and the matrix where they are
    read.)

    Raises
    ------
    BuildError
        At the first unknown name: the entry, the key, the known names and the fix.
    """
    from workbench.compute.devices import devices

    profiles = list(store.load_profiles()) + list(perf.load_default_profiles())
    sites = [d.name for d in cfg.datacenters]
    gpu_known = {p.gpu_type for p in profiles} | set(devices(store))
    apps = {p.app for p in profiles}
    pool_gpus = {p.gpu_type for p in cfg.pools}

    def check(where: str, key: str, value: str, known: Iterable[str],
              what: tuple[str, str]) -> None:
        """``what``: what a valid value is, and the fix."""
        names = sorted(set(known))
        if value not in names:
            raise BuildError(f"{where} {key}: {quoted(value)} is not {what[0]}; known: "
                             f"{', '.join(names) or 'none'}; {what[1]}")

    site = ("a [[datacenters]] name", "name one of them, or add that datacenter")
    for i, pool in enumerate(cfg.pools):
        check(f"[[pools]] entry {i}", "datacenter", pool.datacenter, sites, site)
        check(f"[[pools]] entry {i}", "gpu_type", pool.gpu_type, gpu_known,
              ("a GPU type with a profile or a device spec", "use one of them, or add its "
               "spec (`workbench devices add`) or profiles"))
    for i, lk in enumerate(cfg.links):
        for key in ("src", "dst"):
            check(f"[[links]] entry {i}", key, getattr(lk, key), sites, site)
    for home in (cfg.jobs.homes or []) if cfg.jobs is not None else []:
        check("[jobs]", "homes", home, sites, site)
    pool_type = ("a GPU type of the [[pools]]", "use one of them, or add a pool of that type")
    for i, svc in enumerate(cfg.inference):
        where = f"[[inference]] entry {i}"
        check(where, "app", svc.app, apps, ("a profiled application", "use one of them, or "
              "import its profiles (`workbench import profiles`)"))
        check(where, "home", svc.home, sites, site)
        check(where, "gpu_type", svc.gpu_type, pool_gpus, pool_type)
    for i, llm in enumerate(cfg.jobs.llm if cfg.jobs is not None else []):
        check(f"[[jobs.llm]] entry {i}", "home", llm.home, sites, site)
        for gpu in llm.gpu_types or []:
            check(f"[[jobs.llm]] entry {i}", "gpu_types", gpu, pool_gpus, pool_type)
    series = None
    for i, e in enumerate(cfg.supply):
        if e.turbine_type is not None:
            from workbench.renewables import turbine_types

            check(f"[[supply]] entry {i}", "turbine_type", e.turbine_type, turbine_types(),
                  ("a windpowerlib turbine type with a power curve", "use one of them"))
        if e.series is not None:
            series = store.energy_series_names() if series is None else series
            check(f"[[supply]] entry {i}", "series", e.series, series,
                  ("an imported energy series", "import it (`workbench import grid csv FILE "
                   "--kind generation|irradiance|wind-speed --region NAME ...`)"))


def _check_series(store: Any, regions: Sequence[str]) -> None:
    held = store.grid_value_counts()
    missing = []
    for region in sorted(set(regions)):
        n_price, n_carbon = held.get(region, (0, 0))
        lacks = [what for what, n in (("price", n_price), ("carbon", n_carbon)) if not n]
        if lacks:
            missing.append(f"{region} ({' and '.join(lacks)})")
    if missing:
        known = ", ".join(sorted(held)) or "none"
        raise BuildError(
            f"the store lacks grid series for: {', '.join(missing)} (it holds: {known}); "
            "import them with `workbench import grid FORMAT PATH --region NAME`"
        )


def _links(cfg: ScenarioConfig, dcs: Sequence[Datacenter]) -> list[Link]:
    net = cfg.network
    by_pair: dict[frozenset[str], Link] = {}
    if net.latency_matrix is not None:
        path = Path(net.latency_matrix)
        if not path.is_absolute():
            path = Path(cfg.base_dir) / path
        try:
            matrix = read_latency_matrix(path)
        except InputError as exc:
            raise BuildError(f"[network] latency_matrix: {exc}") from None
        if net.bandwidth_gbps is None:
            raise BuildError("[network] with a latency_matrix lacks 'bandwidth_gbps'; give "
                             "Gbit/s > 0, e.g. bandwidth_gbps = 10")
        absent = sorted({d.grid_zone for d in dcs} - set(matrix.index))
        if absent:
            raise BuildError(f"[network] latency_matrix {path.name} lacks zones {absent} "
                             "(datacenters' grid_zone); set grid_zone to a zone it lists or "
                             "give those links explicitly")
        for a, b in itertools.combinations(dcs, 2):
            ms = latency_ms(matrix, a.grid_zone, b.grid_zone)
            assert ms is not None
            by_pair[frozenset((a.name, b.name))] = Link(
                a.name, b.name, net.bandwidth_gbps, ms, net.transfer_energy_kwh_per_gb)
    for i, lk in enumerate(cfg.links):
        bw = lk.bandwidth_gbps if lk.bandwidth_gbps is not None else net.bandwidth_gbps
        if bw is None:
            raise BuildError(f"[[links]] entry {i} lacks 'bandwidth_gbps' (and [network] "
                             "gives none); give Gbit/s > 0")
        energy = (lk.transfer_energy_kwh_per_gb if lk.transfer_energy_kwh_per_gb is not None
                  else net.transfer_energy_kwh_per_gb)
        link = Link(src=lk.src, dst=lk.dst, bandwidth_gbps=bw, latency_ms=lk.latency_ms,
                    transfer_energy_kwh_per_gb=energy)
        by_pair[frozenset((link.src, link.dst))] = link
    return list(by_pair.values())


def _jobs(store: Any, cfg: ScenarioConfig, start: datetime, end: datetime,
          names: Sequence[str]) -> list[Job]:
    jc = cfg.jobs
    if jc is None:
        return []
    if jc.set is None:
        if not jc.llm:
            raise BuildError("[jobs] has neither set = \"NAME\" (an imported job set) nor "
                             "[[jobs.llm]] tables; give one of them")
        return []
    set_name = jc.set
    sets = job_sets(store)
    if set_name not in sets:
        raise BuildError(f"[jobs] set {set_name!r} is not in the store (job sets: "
                         f"{', '.join(sets) or 'none'}); import it with `workbench import jobs "
                         f"FORMAT PATH --into {set_name}`")
    jobs = load_job_set(store, set_name)
    if jc.align == "start":
        first = min(j.arrival for j in jobs)
        shift = start + timedelta(hours=jc.offset_hours) - first
        jobs = [replace(j, arrival=j.arrival + shift,
                        deadline=None if j.deadline is None else j.deadline + shift)
                for j in jobs]
    scale = jc.work_scale
    if scale != 1.0:
        # Longer work at the same speed: the deadline window stretches by the same factor.
        jobs = [replace(j, work_samples=j.work_samples * scale,
                        deadline=None if j.deadline is None
                        else j.arrival + (j.deadline - j.arrival) * scale)
                for j in jobs]
    if jc.min_deadline_h is not None:
        # Traces give short jobs windows of minutes; an operator's deadlines are hours away.
        window = timedelta(hours=jc.min_deadline_h)
        jobs = [j if j.deadline is None or j.deadline - j.arrival >= window
                else replace(j, deadline=j.arrival + window) for j in jobs]
    before = len(jobs)
    jobs = [j for j in jobs if start <= j.arrival < end]
    if jc.max_gpus is not None:
        jobs = [j for j in jobs if j.requested_gpus <= jc.max_gpus]
    jobs.sort(key=lambda j: (j.arrival, j.job_id))
    if jc.limit is not None:
        jobs = jobs[: jc.limit]
    log.info("job set %s: %d of %d jobs taken into the horizon", set_name, len(jobs), before)
    homes = jc.homes
    if homes:
        jobs = [replace(j, home=str(homes[i % len(homes)])) for i, j in enumerate(jobs)]
    unknown = sorted({j.home for j in jobs} - set(names))
    if unknown:
        raise BuildError(f"[jobs] homes {unknown} of job set {set_name!r} are not datacenters "
                         f"({sorted(names)}); set [jobs] homes = [...] to assign them")
    if not jobs:
        raise BuildError(f"[jobs] no job of set {set_name!r} arrives in the horizon "
                         f"{start.isoformat()} .. {end.isoformat()}; use align = 'start'")
    return jobs


def _inference(cfg: ScenarioConfig, start: datetime, end: datetime) -> list[Job]:
    return [Job(
        job_id=svc.job_id, kind="inference", app=svc.app, arrival=start, home=svc.home,
        requested_gpus=svc.gpus, gpu_counts=(svc.gpus,), batch_size=1, end=end,
        max_latency_ms=svc.max_latency_ms, gpu_types=(svc.gpu_type,),
        load_fraction=svc.load_fraction, checkpoint_gb=svc.checkpoint_gb,
        dataset_gb=svc.checkpoint_gb if svc.dataset_gb is None else svc.dataset_gb,
    ) for svc in cfg.inference]


def _llm_jobs(store: Any, cfg: ScenarioConfig, start: datetime, pools: Sequence[GpuPool],
              name: str) -> tuple[list[Job], list[perf.JobProfile]]:
    """``[[jobs.llm]]``: jobs and their predicted profiles on the pools' GPU types, named
    after scenario ``name`` (:func:`workbench.llm_jobs.jobs_from_entries`)."""
    entries = cfg.jobs.llm if cfg.jobs is not None else []
    if not entries:
        return [], []
    from workbench.compute.devices import devices_of
    from workbench.compute.transformer import ModelConfigError
    from workbench.llm_jobs import jobs_from_entries

    try:
        with devices_of(store):
            return jobs_from_entries(entries, cfg.base_dir, start,
                                     [p.gpu_type for p in pools], owner=name)
    except (ModelConfigError, ValueError) as exc:
        raise BuildError(f"[[jobs.llm]]: {exc}") from None


_SERIES_KINDS = {"solar": ("generation_kw", "irradiance_w_m2"),
                 "wind": ("wind_speed_m_s", "generation_kw"), "ppa": ("generation_kw",)}
"""The stored kinds of series each kind of source reads, in order of preference."""


def _series(store: Any, i: int, e: SupplyEntry, start: datetime, end: datetime
            ) -> tuple[str, pd.Series]:
    """The stored series a ``[[supply]]`` entry names: its kind and its values by UTC time
    (a day's margin either side of the horizon)."""
    assert e.series is not None
    rows = store.energy_series(e.series, start - timedelta(days=1), end + timedelta(days=1))
    wanted = _SERIES_KINDS[e.kind]
    kinds = [k for k in wanted if k in set(rows["kind"])] if len(rows) else []
    if not kinds:
        held = store.energy_series_names()
        shown = ", ".join(f"{n} ({'/'.join(k)})" for n, k in held.items()) or "none"
        flag = {"generation_kw": "generation --unit kW", "irradiance_w_m2": "irradiance "
                "--unit W/m2", "wind_speed_m_s": "wind-speed --unit m/s"}[wanted[0]]
        raise BuildError(f"[[supply]] entry {i} series: the store holds no "
                         f"{' or '.join(wanted)} series {e.series!r} around the horizon (it "
                         f"holds: {shown}); import it with `workbench import grid csv FILE "
                         f"--kind {flag} --region {e.series} --time-column ... --value-column "
                         f"...`")
    sel = rows[rows["kind"] == kinds[0]]
    return kinds[0], pd.Series(sel["value"].to_numpy(float),
                               index=pd.DatetimeIndex(sel["time_utc"]).tz_localize("UTC"))


def _source_output(store: Any, i: int, e: SupplyEntry, dc: Datacenter, start: datetime,
                   slot_s: int, n_slots: int, hold: bool) -> tuple[NDArray[np.float64], str]:
    """A source's output per slot (kW) and where it comes from, in words."""
    from workbench.renewables import SeriesError, series_at_slots, solar_kw, wind_kw

    end = start + timedelta(seconds=slot_s * n_slots)
    try:
        if e.kind == "ppa" and e.series is None:
            if e.volume_kw is not None:
                return np.full(n_slots, float(e.volume_kw)), f"PPA flat {e.volume_kw:g} kW"
            assert e.shape_kw is not None
            local = pd.date_range(pd.Timestamp(start), periods=n_slots,
                                  freq=pd.Timedelta(seconds=slot_s)).tz_convert(dc.timezone)
            shape = np.asarray(e.shape_kw, dtype=float)
            return shape[np.asarray(local.hour)], f"PPA shape by local hour ({dc.timezone})"
        if e.series is None:
            assert e.capacity_kw is not None and e.latitude is not None
            assert e.longitude is not None
            out = solar_kw(start, slot_s, n_slots, capacity_kw=e.capacity_kw,
                           latitude=e.latitude, longitude=e.longitude, tilt_deg=e.tilt_deg,
                           azimuth_deg=e.azimuth_deg, altitude_m=e.altitude_m,
                           losses=e.losses)
            return out, (f"pvlib clear sky (Ineichen) at {e.latitude:g}, {e.longitude:g}, "
                         f"tilt {e.tilt_deg:g}, azimuth {e.azimuth_deg:g}")
        kind, series = _series(store, i, e, start, end)
        # Checks the series covers the horizon (or holds values, with fill = 'hold').
        at_slots = series_at_slots(series, start, slot_s, n_slots, name=e.series, hold=hold)
        if kind == "generation_kw":
            cap = e.capacity_kw if e.capacity_kw is not None else float(at_slots.max())
            return np.clip(at_slots, 0.0, cap), f"imported generation series {e.series}"
        assert e.capacity_kw is not None
        if kind == "irradiance_w_m2":
            out = solar_kw(start, slot_s, n_slots, capacity_kw=e.capacity_kw,
                           latitude=float(e.latitude or 0.0), longitude=float(e.longitude or 0.0),
                           tilt_deg=e.tilt_deg, azimuth_deg=e.azimuth_deg,
                           altitude_m=e.altitude_m, losses=e.losses, ghi_w_m2=series)
            return out, f"pvlib on imported irradiance series {e.series}"
        out = wind_kw(start, slot_s, n_slots, capacity_kw=e.capacity_kw, wind_speed_m_s=series,
                      turbine_type=e.turbine_type, hub_height_m=e.hub_height_m or 100.0,
                      measurement_height_m=e.measurement_height_m,
                      roughness_length_m=e.roughness_length_m)
        return out, (f"windpowerlib power curve of {e.turbine_type or 'E-126/4200'} on "
                     f"imported wind speed series {e.series}")
    except SeriesError as exc:
        raise BuildError(f"[[supply]] entry {i}: {exc}") from None


def _supply(store: Any, cfg: ScenarioConfig, dcs: Sequence[Datacenter], start: datetime,
            slot_s: int, n_slots: int) -> Supply:
    """The scenario's supply from its ``[[supply]]`` and ``[[demand_charges]]`` tables."""
    by_name = {d.name: d for d in dcs}
    hold = cfg.scenario.fill == "hold"
    sources: list[Source] = []
    batteries: list[Battery] = []
    charges: list[DemandCharge] = []
    try:
        for i, e in enumerate(cfg.supply):
            name = e.name or f"{e.datacenter}-{e.kind}-{i}"
            if e.kind == "battery":
                assert e.energy_kwh is not None and e.power_kw is not None
                batteries.append(Battery(
                    name=name, datacenter=e.datacenter, energy_kwh=e.energy_kwh,
                    power_kw=e.power_kw, round_trip_efficiency=e.round_trip_efficiency,
                    soc_initial=e.soc_initial, soc_min=e.soc_min, soc_max=e.soc_max))
                continue
            out, origin = _source_output(store, i, e, by_name[e.datacenter], start, slot_s,
                                         n_slots, hold)
            cap = e.capacity_kw if e.capacity_kw is not None else max(float(out.max()), 1e-9)
            sources.append(Source(
                name=name, datacenter=e.datacenter, kind=e.kind, capacity_kw=cap,
                available_kw=out, price_per_kwh=e.price_per_kwh,
                carbon_g_per_kwh=e.carbon_g_per_kwh,
                take_or_pay=e.take_or_pay if e.kind == "ppa" else False,
                export_price_per_kwh=e.export_price_per_kwh,
                modelled=e.series is None, origin=origin))
        for i, d in enumerate(cfg.demand_charges):
            charges.append(_demand_charge(cfg, i, d))
    except ScenarioError as exc:
        raise BuildError(f"[[supply]]: {exc}") from None
    events: list[GridEvent] = []
    for i, ev in enumerate(cfg.grid_events):
        try:
            events.append(GridEvent.from_dict(ev.model_dump(exclude_none=True)))
        except ValueError as exc:
            raise BuildError(f"[[grid_events]] entry {i}: {exc}") from None
    return Supply(sources=tuple(sources), batteries=tuple(batteries),
                  demand_charges=tuple(charges), grid_events=tuple(events))


def _demand_charge(cfg: ScenarioConfig, i: int, d: DemandChargeEntry) -> DemandCharge:
    structures: tuple[DemandStructure, ...] = ()
    source = "scenario config"
    if d.price_per_kw_month is not None:
        structures = (DemandStructure.flat(d.price_per_kw_month),)
        source = f"{d.price_per_kw_month:g} per kW-month of the peak (scenario config)"
    elif d.urdb is not None:
        path = Path(d.urdb)
        if not path.is_absolute():
            path = Path(cfg.base_dir) / path
        try:
            structures, tariff = read_urdb_demand(path, d.item)
        except InputError as exc:
            raise BuildError(f"[[demand_charges]] entry {i} urdb: {exc}") from None
        source = f"URDB {tariff}: {path.name}"
    return DemandCharge(
        name=d.name or f"{d.datacenter}-demand-{i}", datacenter=d.datacenter,
        structures=structures, capacity_kva=d.capacity_kva or 0.0,
        price_per_kva_month=d.price_per_kva_month or 0.0, source=source)


def profiles_for(store: Any, apps: set[str], gpu_types: Sequence[str] = ()
                 ) -> list[perf.JobProfile]:
    """Profiles of ``apps``: the store's, the shipped ones for any (app, GPU type) the
    store lacks (a store that holds profiles of other apps only still builds), and for a
    GPU type of ``gpu_types`` neither has, one predicted on the device table's figures
    (:func:`workbench.profiles.predicted_profiles`: a pool of H100s needs no fit first)."""
    from workbench.compute.devices import devices_of
    from workbench.profiles import predicted_profiles

    known = [p for p in perf.with_shipped(list(store.load_profiles())) if p.app in apps]
    with devices_of(store):  # a device the operator added predicts as a shipped one
        return known + predicted_profiles(known, gpu_types, sorted(apps))


def build_scenario(store: Any, cfg: Mapping[str, Any] | ScenarioConfig,
                   name: str | None = None) -> Scenario:
    """Build (but do not save) the scenario a parsed config describes.

    Raises
    ------
    BuildError
        A key is missing or unknown, the store lacks a named grid series (all missing names
        are listed) or job set, the series do not cover the horizon, or a record is invalid.
    """
    try:
        config = cfg if isinstance(cfg, ScenarioConfig) else validate_config(cfg)
    except ConfigError as exc:
        raise BuildError(str(exc)) from None
    sc = config.scenario
    name = name or sc.name
    if not name:
        raise BuildError("no scenario name: pass NAME or set [scenario] name")
    if name in job_sets(store):
        raise BuildError(f"{name!r} names a job set in the store; pick another scenario name")
    try:
        start, slot_s, n_slots = horizon(sc)
    except ConfigError as exc:
        raise BuildError(str(exc)) from None
    _check_names(store, config)
    end = start + timedelta(seconds=slot_s * n_slots)
    dcs = [Datacenter(name=d.name, region=d.region, grid_zone=d.grid_zone or d.region,
                      timezone=d.timezone, pue=d.pue, idle_power_kw=d.idle_power_kw)
           for d in config.datacenters]
    pools = [GpuPool(**p.model_dump()) for p in config.pools]
    regions = sorted({d.region for d in dcs})
    _check_series(store, regions)
    fill = sc.fill
    series = store.grid_series(regions, start - timedelta(days=1), end + timedelta(days=1))
    try:
        cube = cubes.cube_from_series(
            series, slot_s=slot_s, start=start, end=end, regions=regions,
            timezones={d.region: d.timezone for d in dcs}, currency=sc.currency,
            fill=None if fill == "none" else "hold",
        )
    except cubes.CubeError as exc:
        # The cube's message is cause; fix: keep its cause, give the fix in the config's terms.
        cause = str(exc).split("; ", 1)[0]
        raise BuildError(f"grid series do not cover the horizon {start.isoformat()} .. "
                         f"{end.isoformat()}: {cause}; import that period, move the horizon, "
                         "or set [scenario] fill = 'hold'") from None
    currency = str(cube["price_per_kwh"].attrs["currency"])
    if sc.currency and sc.currency != currency:
        raise BuildError(f"[scenario] currency {sc.currency} differs from the series' "
                         f"{currency}; set currency = \"{currency}\" or import prices in "
                         f"{sc.currency}")
    held = sorted(series.loc[series["price_per_kwh"].notna(), "currency"].dropna().unique())
    if held and held != [currency]:
        raise BuildError(f"the series' prices are in {held}, not {currency}; import prices "
                         f"in one currency")
    history = cubes.history_cube(
        store.grid_series(regions, start - timedelta(days=cubes.HISTORY_DAYS), start), regions,
        start, timezones={d.region: d.timezone for d in dcs}, currency=currency)
    names = [d.name for d in dcs]
    llm_jobs, llm_profiles = _llm_jobs(store, config, start, pools, str(name))
    jobs = sorted(_jobs(store, config, start, end, names) + _inference(config, start, end)
                  + llm_jobs, key=lambda j: (j.arrival, j.job_id))
    apps = {j.app for j in jobs}
    profiles = profiles_for(store, apps, [p.gpu_type for p in pools]) + llm_profiles
    supply = _supply(store, config, dcs, start, slot_s, n_slots)
    built = Scenario(
        name=str(name), datacenters=tuple(dcs), pools=tuple(pools),
        links=tuple(_links(config, dcs)),
        jobs=tuple(jobs), profiles=tuple(profiles), grid=cube,
        start=start, slot_s=slot_s, n_slots=n_slots, currency=currency,
        description=sc.description, history=history, supply=supply,
    )
    if not supply.grid_events:
        return built
    from workbench.sim.results import check_scenario_events

    try:  # each start inside the horizon, each limit above what the site always draws
        events = check_scenario_events(built, supply.grid_events)
    except ValueError as exc:
        raise BuildError(f"[[grid_events]]: {exc}") from None
    return dataclasses.replace(built, supply=dataclasses.replace(supply, grid_events=events))


def save_built(store: Any, scenario: Scenario, *, replace: bool = False
               ) -> scenarios.SaveOutcome:
    """Save a built scenario (:func:`workbench.scenarios.save_checked`): a different
    scenario stored under its name is replaced only with ``replace``; the same one is left
    as it is.

    Raises
    ------
    BuildError
        Another scenario of that name is stored and ``replace`` is false.
    """
    try:
        done = scenarios.save_checked(store, scenario, replace=replace, fix=(
            "pass another NAME, or --replace to rebuild it (its stored runs keep their "
            "results)"))
    except ScenarioError as exc:
        raise BuildError(str(exc)) from None
    log.info("built scenario %s: %d datacenters, %d jobs, %d slots (%s)", scenario.name,
             len(scenario.datacenters), len(scenario.jobs), scenario.n_slots, done)
    return done


def build_and_save(store: Any, config: str | Path, name: str | None = None, *,
                   replace: bool = False) -> Scenario:
    """Build the scenario of a TOML config file and save it in ``store``
    (:func:`save_built`)."""
    scenario = build_scenario(store, load_config(config), name)
    save_built(store, scenario, replace=replace)
    return scenario
