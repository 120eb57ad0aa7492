"""The Philly-trace scale scenario of ``bench/scale.py``: a slice (or all) of Microsoft's
Philly trace over four real-grid datacenters.

Four SustainCluster 2023 zones (California, Texas, PJM, DE-LU: hourly day-ahead prices in
USD and Electricity Maps carbon), GCP latencies, 10 Gbit/s links, pools sized to the trace's
load (Philly's ~82k jobs ask for ~370 busy GPUs on average: 1,024 GPUs in all), 15-minute
slots. Jobs: every Philly job submitted in ``[first + offset_days, + days)`` mapped by
``workbench import jobs philly`` (one of the Pollux applications in turn, the trace's
duration on the requested A100s, deadline 2x the duration, at least 4 h), its first
arrival aligned to the same offset from the 2023-02-01 start as in the trace. The horizon
runs ``tail_days`` past the last arrival so that the jobs can finish.
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


def philly_config(days: float, offset_h: float, job_set: str, data: Path) -> dict[str, Any]:
    """The scenario config (the dict a TOML file would parse to)."""
    return {
        "scenario": {"name": "philly-scale", "start": START, "days": days,
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


def build_philly(db: str | Path, data: str | Path, days: float | None, offset_days: float = 25.0,
                 tail_days: float = 2.0) -> Any:
    """Import the grid and the Philly slice into store ``db`` and build the scenario.

    ``days`` None: the whole trace from its first job (``offset_days`` ignored).
    """
    from workbench.build import build_scenario
    from workbench.io.grid import import_grid
    from workbench.io.jobs import Trace, import_jobs, read_jobs
    from workbench.store import Store

    data = Path(data)
    sc_dir = data / "grid/sustain-cluster"
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
        for _, region, *_ in ZONES:
            import_grid(store, "electricitymaps-csv",
                        sc_dir / f"carbon/{region}/{region}_2023_hourly.csv", region)
            import_grid(store, "price-csv",
                        sc_dir / f"prices/{region}/{region}_electricity_prices_2023.csv", region)
        import_jobs(store, "philly", data / "jobs/pollux/philly.csv", "philly-jobs",
                    trace=Trace(trace.path, "philly", f, trace.skipped))
        cfg = philly_config(round(horizon * 96) / 96, offset_h, "philly-jobs", data)
        return build_scenario(store, cfg)

