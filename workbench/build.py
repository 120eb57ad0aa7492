"""Compose a runnable scenario from a TOML config and what the store holds.

The config names datacenters and the imported grid series (``region``) they draw price and
carbon from, their GPU pools, the links between them (explicit, or every pair from a
latency matrix with an assumed bandwidth), the job set to take jobs from and how, inference
services, the horizon and the slot length. The complete schema, with an example, is in
``docs/importers.md``; ``examples/real_grid.toml`` is a working config.

Nothing is read from the environment and nothing is written until :func:`build_and_save`.
"""

from __future__ import annotations

import itertools
import logging
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from workbench import cubes, perf
from workbench.io.errors import InputError
from workbench.io.jobs import job_sets, load_job_set
from workbench.io.latency import latency_ms, read_latency_matrix
from workbench.model import (
    Datacenter,
    GpuPool,
    Job,
    Link,
    Scenario,
    ScenarioError,
    as_utc,
)

log = logging.getLogger(__name__)

_KEYS: dict[str, set[str]] = {
    "scenario": {"name", "description", "start", "end", "days", "hours", "slot_minutes",
                 "currency", "fill"},
    "datacenters": {"name", "region", "grid_zone", "timezone", "pue", "idle_power_kw"},
    "pools": {"datacenter", "gpu_type", "count", "idle_power_w", "max_power_w",
              "gpus_per_node"},
    "network": {"latency_matrix", "bandwidth_gbps", "transfer_energy_kwh_per_gb"},
    "links": {"src", "dst", "bandwidth_gbps", "latency_ms", "transfer_energy_kwh_per_gb"},
    "jobs": {"set", "align", "offset_hours", "homes", "limit", "max_gpus", "work_scale",
             "min_deadline_h"},
    "inference": {"job_id", "app", "home", "gpu_type", "gpus", "max_latency_ms",
                  "load_fraction", "checkpoint_gb", "dataset_gb"},
}
_TOP = {"scenario", "datacenters", "pools", "network", "links", "jobs", "inference"}


class BuildError(ScenarioError):
    """A scenario config cannot be built from the store; the message says what to fix."""


def load_config(path: str | Path) -> dict[str, Any]:
    """Parse a scenario TOML file; the result remembers its folder (for relative paths)."""
    p = Path(path)
    if not p.is_file():
        raise BuildError(f"scenario config {p} not found")
    try:
        with p.open("rb") as fh:
            cfg = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise BuildError(f"{p}: not valid TOML ({exc})") from None
    cfg["_base_dir"] = str(p.resolve().parent)
    return cfg


def _check_keys(cfg: Mapping[str, Any]) -> None:
    unknown = sorted(set(cfg) - _TOP - {"_base_dir"})
    if unknown:
        raise BuildError(f"unknown config sections {unknown}; known: {sorted(_TOP)}")
    for section, allowed in _KEYS.items():
        value = cfg.get(section)
        entries = value if isinstance(value, list) else [value] if value is not None else []
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict):
                raise BuildError(f"[{section}] entry {i} is not a table")
            extra = sorted(set(entry) - allowed)
            if extra:
                raise BuildError(f"[{section}] entry {i}: unknown keys {extra}; known: "
                                 f"{sorted(allowed)}")


def _need(table: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in table:
        raise BuildError(f"{where} lacks {key!r}")
    return table[key]


def _horizon(sc: Mapping[str, Any]) -> tuple[datetime, int, int]:
    try:
        start = as_utc(str(_need(sc, "start", "[scenario]")))
    except ValueError:
        raise BuildError(f"[scenario] start {sc['start']!r} is not an ISO time "
                         "(e.g. 2023-07-10T00:00:00Z)") from None
    slot_s = int(round(float(sc.get("slot_minutes", 60)) * 60))
    if slot_s <= 0:
        raise BuildError("[scenario] slot_minutes must be positive")
    given = [k for k in ("end", "days", "hours") if k in sc]
    if len(given) != 1:
        raise BuildError(f"[scenario] needs exactly one of end, days, hours (has {given})")
    if "end" in sc:
        try:
            end = as_utc(str(sc["end"]))
        except ValueError:
            raise BuildError(f"[scenario] end {sc['end']!r} is not an ISO time") from None
        span = (end - start).total_seconds()
    else:
        span = float(sc.get("days", 0)) * 86400 + float(sc.get("hours", 0)) * 3600
    if span <= 0 or span % slot_s:
        raise BuildError(f"[scenario] the horizon ({span:g} s) must be a positive multiple of "
                         f"the slot ({slot_s} s)")
    return start, slot_s, int(span // slot_s)


def _check_series(store: Any, regions: Sequence[str]) -> None:
    held = {r[0]: (r[1], r[2]) for r in store.con.execute(
        "SELECT region, count(price_per_kwh), count(carbon_g_per_kwh) FROM grid_series "
        "GROUP BY region").fetchall()}
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


def _links(cfg: Mapping[str, Any], dcs: Sequence[Datacenter]) -> list[Link]:
    net = cfg.get("network", {})
    by_pair: dict[frozenset[str], Link] = {}
    if "latency_matrix" in net:
        path = Path(str(net["latency_matrix"]))
        if not path.is_absolute():
            path = Path(cfg.get("_base_dir", ".")) / path
        try:
            matrix = read_latency_matrix(path)
        except InputError as exc:
            raise BuildError(f"[network] latency_matrix: {exc}") from None
        bw = float(_need(net, "bandwidth_gbps", "[network] with a latency_matrix"))
        energy = float(net.get("transfer_energy_kwh_per_gb", 0.0))
        absent = sorted({d.grid_zone for d in dcs} - set(matrix.index))
        if absent:
            raise BuildError(f"[network] latency_matrix {path.name} lacks zones {absent} "
                             "(datacenters' grid_zone); set grid_zone to a zone it lists or "
                             "give those links explicitly")
        for a, b in itertools.combinations(dcs, 2):
            ms = latency_ms(matrix, a.grid_zone, b.grid_zone)
            assert ms is not None
            by_pair[frozenset((a.name, b.name))] = Link(a.name, b.name, bw, ms, energy)
    for i, lk in enumerate(cfg.get("links", [])):
        where = f"[[links]] entry {i}"
        link = Link(
            src=str(_need(lk, "src", where)), dst=str(_need(lk, "dst", where)),
            bandwidth_gbps=float(lk.get("bandwidth_gbps", net.get("bandwidth_gbps", 0.0))),
            latency_ms=float(_need(lk, "latency_ms", where)),
            transfer_energy_kwh_per_gb=float(lk.get(
                "transfer_energy_kwh_per_gb", net.get("transfer_energy_kwh_per_gb", 0.0))),
        )
        by_pair[frozenset((link.src, link.dst))] = link
    return list(by_pair.values())


def _jobs(store: Any, cfg: Mapping[str, Any], start: datetime, end: datetime,
          names: Sequence[str]) -> list[Job]:
    jc = cfg.get("jobs")
    if not jc:
        return []
    set_name = str(_need(jc, "set", "[jobs]"))
    sets = job_sets(store)
    if set_name not in sets:
        raise BuildError(f"[jobs] set {set_name!r} is not in the store (job sets: "
                         f"{', '.join(sets) or 'none'}); import it with `workbench import jobs "
                         f"FORMAT PATH --into {set_name}`")
    jobs = load_job_set(store, set_name)
    align = str(jc.get("align", "start"))
    if align not in ("start", "none"):
        raise BuildError(f"[jobs] align {align!r}: use 'start' or 'none'")
    if align == "start":
        first = min(j.arrival for j in jobs)
        shift = start + timedelta(hours=float(jc.get("offset_hours", 0.0))) - first
        jobs = [replace(j, arrival=j.arrival + shift,
                        deadline=None if j.deadline is None else j.deadline + shift)
                for j in jobs]
    scale = float(jc.get("work_scale", 1.0))
    if not scale > 0:
        raise BuildError(f"[jobs] work_scale {scale} must be positive")
    if scale != 1.0:
        # Longer work at the same speed: the deadline window stretches by the same factor.
        jobs = [replace(j, work_samples=j.work_samples * scale,
                        deadline=None if j.deadline is None
                        else j.arrival + (j.deadline - j.arrival) * scale)
                for j in jobs]
    if "min_deadline_h" in jc:
        # Traces give short jobs windows of minutes; an operator's deadlines are hours away.
        window = timedelta(hours=float(jc["min_deadline_h"]))
        if window <= timedelta(0):
            raise BuildError(f"[jobs] min_deadline_h {jc['min_deadline_h']} must be positive")
        jobs = [j if j.deadline is None or j.deadline - j.arrival >= window
                else replace(j, deadline=j.arrival + window) for j in jobs]
    before = len(jobs)
    jobs = [j for j in jobs if start <= j.arrival < end]
    if "max_gpus" in jc:
        jobs = [j for j in jobs if j.requested_gpus <= int(jc["max_gpus"])]
    jobs.sort(key=lambda j: (j.arrival, j.job_id))
    if "limit" in jc:
        jobs = jobs[: int(jc["limit"])]
    log.info("job set %s: %d of %d jobs taken into the horizon", set_name, len(jobs), before)
    homes = jc.get("homes")
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


def _inference(cfg: Mapping[str, Any], start: datetime, end: datetime) -> list[Job]:
    out = []
    for i, svc in enumerate(cfg.get("inference", [])):
        where = f"[[inference]] entry {i}"
        gpus = int(_need(svc, "gpus", where))
        out.append(Job(
            job_id=str(_need(svc, "job_id", where)), kind="inference",
            app=str(_need(svc, "app", where)), arrival=start, home=str(_need(svc, "home", where)),
            requested_gpus=gpus, gpu_counts=(gpus,), batch_size=1, end=end,
            max_latency_ms=float(_need(svc, "max_latency_ms", where)),
            gpu_types=(str(_need(svc, "gpu_type", where)),),
            load_fraction=float(svc.get("load_fraction", 0.5)),
            checkpoint_gb=float(svc.get("checkpoint_gb", 1.0)),
            dataset_gb=float(svc.get("dataset_gb", svc.get("checkpoint_gb", 1.0))),
        ))
    return out


def build_scenario(store: Any, cfg: Mapping[str, Any], name: str | None = None) -> Scenario:
    """Build (but do not save) the scenario a parsed config describes.

    Raises
    ------
    BuildError
        A key is missing or unknown, the store lacks a named grid series (all missing names
        are listed) or job set, the series do not cover the horizon, or a record is invalid.
    """
    _check_keys(cfg)
    sc = cfg.get("scenario", {})
    name = name or sc.get("name")
    if not name:
        raise BuildError("no scenario name: pass NAME or set [scenario] name")
    if name in job_sets(store):
        raise BuildError(f"{name!r} names a job set in the store; pick another scenario name")
    start, slot_s, n_slots = _horizon(sc)
    end = start + timedelta(seconds=slot_s * n_slots)
    dc_cfg = cfg.get("datacenters") or []
    if not dc_cfg:
        raise BuildError("the config has no [[datacenters]]")
    dcs = []
    for i, d in enumerate(dc_cfg):
        where = f"[[datacenters]] entry {i}"
        region = str(_need(d, "region", where))
        dcs.append(Datacenter(
            name=str(_need(d, "name", where)), region=region,
            grid_zone=str(d.get("grid_zone", region)), timezone=str(d.get("timezone", "UTC")),
            pue=float(_need(d, "pue", where)), idle_power_kw=float(d.get("idle_power_kw", 0.0)),
        ))
    pools = []
    for i, p in enumerate(cfg.get("pools", [])):
        for key in ("datacenter", "gpu_type", "count", "idle_power_w", "max_power_w"):
            _need(p, key, f"[[pools]] entry {i}")
        pools.append(GpuPool(**p))
    regions = sorted({d.region for d in dcs})
    _check_series(store, regions)
    fill = sc.get("fill", "none")
    if fill not in ("none", "hold"):
        raise BuildError(f"[scenario] fill {fill!r}: use 'none' or 'hold'")
    series = store.grid_series(regions, start - timedelta(days=1), end + timedelta(days=1))
    try:
        cube = cubes.cube_from_series(
            series, slot_s=slot_s, start=start, end=end, regions=regions,
            timezones={d.region: d.timezone for d in dcs}, currency=sc.get("currency"),
            fill=None if fill == "none" else "hold",
        )
    except cubes.CubeError as exc:
        raise BuildError(f"grid series do not cover the horizon {start.isoformat()} .. "
                         f"{end.isoformat()}: {exc}; import that period, move the horizon, "
                         "or set [scenario] fill = 'hold'") from None
    currency = str(cube["price_per_kwh"].attrs["currency"])
    if sc.get("currency") and str(sc["currency"]) != currency:
        raise BuildError(f"[scenario] currency {sc['currency']} differs from the series' "
                         f"{currency}")
    held = sorted(series.loc[series["price_per_kwh"].notna(), "currency"].dropna().unique())
    if held and held != [currency]:
        raise BuildError(f"the series' prices are in {held}, not {currency}; import prices "
                         f"in one currency")
    names = [d.name for d in dcs]
    jobs = sorted(_jobs(store, cfg, start, end, names) + _inference(cfg, start, end),
                  key=lambda j: (j.arrival, j.job_id))
    profiles = store.load_profiles() or perf.load_default_profiles()
    apps = {j.app for j in jobs}
    return Scenario(
        name=str(name), datacenters=tuple(dcs), pools=tuple(pools), links=tuple(_links(cfg, dcs)),
        jobs=tuple(jobs), profiles=tuple(p for p in profiles if p.app in apps), grid=cube,
        start=start, slot_s=slot_s, n_slots=n_slots, currency=currency,
        description=str(sc.get("description", "")),
    )


def build_and_save(store: Any, config: str | Path, name: str | None = None) -> Scenario:
    """Build the scenario of a TOML config file and save it in ``store``."""
    scenario = build_scenario(store, load_config(config), name)
    store.save_scenario(scenario)
    log.info("built scenario %s: %d datacenters, %d jobs, %d slots", scenario.name,
             len(scenario.datacenters), len(scenario.jobs), scenario.n_slots)
    return scenario
