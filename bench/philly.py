"""The scale scenarios of ``bench/scale.py``: a slice (or all) of Microsoft's Philly trace,
or a year of Alibaba's v2023 GPU pods re-timed, over four real-grid datacenters.

Four SustainCluster 2023 zones (California, Texas, PJM, DE-LU: hourly day-ahead prices in
USD and Electricity Maps carbon), GCP latencies, 10 Gbit/s links, pools sized to the trace's
load (Philly's ~82k jobs ask for ~370 busy GPUs on average: 1,024 GPUs in all), 15-minute
slots. Jobs: every Philly job submitted in ``[first + offset_days, + days)`` mapped by
``workbench import jobs philly`` (one of the Pollux applications in turn, the trace's
duration on the requested A100s, deadline 2x the duration, at least 4 h), its first
arrival aligned to the same offset from the 2023-02-01 start as in the trace. The horizon
runs ``tail_days`` past the last arrival so that the jobs can finish.

:func:`build_alibaba_year`: the same datacenters from 1 January 2023 for ``days`` days (365:
the whole year of the grid data; no history precedes it, so the honest default forecast is
yesterday's prices), with Alibaba's 6,203 GPU pods (``workbench import jobs alibaba-pods``,
CPU-only and never-scheduled pods skipped) re-timed: their creation times, which span 25
days, stretched linearly over the first ``days - tail_days`` days; durations as in the trace.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

ZONES: tuple[tuple[str, str, str, str, float, float], ...] = (
    # name, grid region, grid zone (latency matrix), timezone, PUE, idle kW
    ("california", "US-CAL-CISO", "US-CAL-CISO", "America/Los_Angeles", 1.25, 30.0),
    ("texas", "US-TEX-ERCO", "US-TEX-ERCO", "America/Chicago", 1.35, 30.0),
    ("virginia", "US-MIDA-PJM", "US-MIDA-PJM", "America/New_York", 1.30, 40.0),
    ("frankfurt", "DE-LU", "DE", "Europe/Berlin", 1.20, 30.0),
)
POOLS: tuple[tuple[str, str, int, float, float], ...] = (
    ("california", "A100", 256, 60.0, 400.0),
    ("texas", "A100", 256, 60.0, 400.0),
    ("virginia", "H800", 128, 90.0, 700.0),
    ("virginia", "A100", 128, 60.0, 400.0),
    ("frankfurt", "H800", 256, 90.0, 700.0),
)
START = "2023-02-01T00:00:00Z"
"""Scenario start: 31 days of 2023 history precede it (the model forecast fits on them)."""


def philly_config(days: float, offset_h: float, job_set: str, data: Path,
                  start: str = START, name: str = "philly-scale") -> dict[str, Any]:
    """The scenario config (the dict a TOML file would parse to)."""
    return {
        "scenario": {"name": name, "start": start, "days": days,
                     "slot_minutes": 15, "currency": "USD", "fill": "hold",
                     "description": "Philly trace slice over four real-grid datacenters"},
        "datacenters": [{"name": n, "region": r, "grid_zone": z, "timezone": tz, "pue": pue,
                         "idle_power_kw": idle} for n, r, z, tz, pue, idle in ZONES],
        "pools": [{"datacenter": d, "gpu_type": g, "count": c, "idle_power_w": lo,
                   "max_power_w": hi} for d, g, c, lo, hi in POOLS],
        "network": {"latency_matrix": str(data / "grid/electricitymaps/gcp_latency_matrix.csv"),
                    "bandwidth_gbps": 10.0, "transfer_energy_kwh_per_gb": 0.006},
        "jobs": {"set": job_set, "align": "start", "offset_hours": offset_h,
                 "homes": [z[0] for z in ZONES], "max_gpus": 256, "min_deadline_h": 4.0},
        "_base_dir": str(data),
    }


def _import_grid(store: Any, data: Path) -> None:
    from workbench.io.grid import import_grid

    sc_dir = data / "grid/sustain-cluster"
    for _, region, *_ in ZONES:
        import_grid(store, "electricitymaps-csv",
                    sc_dir / f"carbon/{region}/{region}_2023_hourly.csv", region)
        import_grid(store, "price-csv",
                    sc_dir / f"prices/{region}/{region}_electricity_prices_2023.csv", region)


def build_alibaba_year(db: str | Path, data: str | Path, days: float = 365.0,
                       tail_days: float = 2.0) -> Any:
    """Import the grid and the re-timed Alibaba pods into store ``db``; build the scenario
    (module docstring)."""
    from workbench.build import build_scenario
    from workbench.io.jobs import Trace, import_jobs, read_jobs
    from workbench.store import Store

    data = Path(data)
    path = data / "jobs/alibaba-v2023/openb_pod_list_default.csv"
    trace = read_jobs("alibaba-pods", path)
    f = trace.frame
    a = f["arrival_s"].to_numpy(dtype=float)
    span = max(float(a.max() - a.min()), 1.0)
    f = f.assign(arrival_s=(a - a.min()) / span * (days - tail_days) * 86400.0)
    with Store(db) as store:
        _import_grid(store, data)
        import_jobs(store, "alibaba-pods", path, "alibaba-jobs",
                    trace=Trace(trace.path, "alibaba-pods", f, trace.skipped))
        cfg = philly_config(days, 0.0, "alibaba-jobs", data, start="2023-01-01T00:00:00Z",
                            name="alibaba-year")
        return build_scenario(store, cfg)


def build_philly(db: str | Path, data: str | Path, days: float | None, offset_days: float = 25.0,
                 tail_days: float = 2.0) -> Any:
    """Import the grid and the Philly slice into store ``db`` and build the scenario.

    ``days`` None: the whole trace from its first job (``offset_days`` ignored).
    """
    from workbench.build import build_scenario
    from workbench.io.jobs import Trace, import_jobs, read_jobs
    from workbench.store import Store

    data = Path(data)
    trace = read_jobs("philly", data / "jobs/pollux/philly.csv")
    f = trace.frame
    first = pd.Timestamp(f["arrival_utc"].min())
    lo = first + pd.Timedelta(days=offset_days if days is not None else 0.0)
    hi = lo + pd.Timedelta(days=days) if days is not None else pd.Timestamp.max
    f = f[(f["arrival_utc"] >= lo) & (f["arrival_utc"] < hi)].reset_index(drop=True)
    span_days = (pd.Timestamp(f["arrival_utc"].max()) - lo).total_seconds() / 86400
    offset_h = (pd.Timestamp(f["arrival_utc"].min()) - lo).total_seconds() / 3600
    horizon = (days if days is not None else span_days) + tail_days
    with Store(db) as store:
        _import_grid(store, data)
        import_jobs(store, "philly", data / "jobs/pollux/philly.csv", "philly-jobs",
                    trace=Trace(trace.path, "philly", f, trace.skipped))
        cfg = philly_config(round(horizon * 96) / 96, offset_h, "philly-jobs", data)
        return build_scenario(store, cfg)

