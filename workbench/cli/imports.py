"""``workbench import grid|jobs|profiles``: bring real data into the store.

Every import is one transaction: on an error nothing is written. Errors name the file, the
line and column, and the fix, and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from workbench.cli._args import fail, number
from workbench.io.errors import InputError
from workbench.io.grid import GRID_FORMATS, read_grid, write_grid
from workbench.io.jobs import JOB_FORMATS, import_jobs, read_jobs
from workbench.store import Store, check_side_file

_GRID_HELP = """formats:
  electricitymaps-csv   hourly export, 'Datetime (UTC)' + 'Carbon Intensity ... (LCA|direct)'
                        (--intensity), or the wide export (carbon_intensity_avg)
  electricitymaps-json  API carbon-intensity/history response
  price-csv             'Datetime (UTC),Datetime (Local),Price (USD/MWh)', or local
                        'Datetime,Price (JPY/MWh)' with --timezone (and --currency)
  watttime-csv          MOER in lb/MWh; --column picks the value column
  avert                 hour-of-year lb/kWh; --year required, --column picks the region
  nyiso-lmp             NYISO real-time LBMP; --column picks the zone (default --region)
  urdb-json             OpenEI tariff expanded to hourly USD/kWh over --start..--end in
                        --timezone (first tier, rate + adj, weekends use the weekend table)
  csv                   generic: --time-column --value-column --kind --unit [--timezone
                        --time-format --currency --delimiter]; --kind generation (kW, MW,
                        W), irradiance (W/m2) or wind-speed (m/s, km/h, kn) store a series
                        for [[supply]] series = "NAME" (NAME = --region)
Stored as UTC, <currency>/kWh and gCO2/kWh (1 lb = 453.59237 g). Re-importing a file
updates the same (region, time) rows. Negative prices are kept."""

_JOBS_HELP = """formats:
  pollux-workload  name,time,application,num_replicas,batch_size (Pollux artifact)
  philly           timestamp,duration,num_gpus,gpu_time,cluster (Pollux's philly.csv)
  alibaba-pods     Alibaba v2023 openb_pod_list_*.csv
  gaia             arrival_time,length,cpus (GAIA); cpus are read as GPUs
Mapping assumptions (each row becomes a training job):
  arrival   the trace's time; relative traces start at --start (default 1970-01-01Z;
            `scenario build` realigns a set to its horizon)
  GPUs      as requested; a fractional Alibaba GPU counts as 1; CPU-only, never
            scheduled and zero-length Alibaba pods are skipped (and counted)
  app       Pollux: the trace's; others: --app (a name, or 'mix': the six Pollux apps
            in turn)
  work      Pollux: the app's completion target in the artifact; others: ECU on
            --reference-gpu at the requested GPUs and batch x the trace's duration
  batch     Pollux: the trace's, clipped to the profile's range; others: m0 x max(n//2,1)
  deadline  arrival + --slack x duration (0: none)
  home      --homes in turn (default 'unassigned'; `scenario build` can reassign)"""


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``import`` command group."""
    p = sub.add_parser("import", help="import grid signals, job traces and GPU profiles")
    isub = p.add_subparsers(dest="import_command", metavar="WHAT", required=True)

    g = isub.add_parser("grid", help="import a price or carbon-intensity series",
                        description="Import one grid signal file as a series of the store.",
                        epilog=_GRID_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    g.add_argument("format", choices=sorted(GRID_FORMATS), metavar="FORMAT")
    g.add_argument("path", type=Path, metavar="PATH")
    g.add_argument("--region", required=True,
                   help="name of the series in the store (datacenters name it in a scenario)")
    g.add_argument("--intensity", choices=("lca", "direct"),
                   help="electricitymaps-csv: lifecycle (default) or direct intensity")
    g.add_argument("--currency", help="price currency (ISO code) when the file names none")
    g.add_argument("--timezone", help="IANA zone of naive local times (e.g. Asia/Tokyo)")
    g.add_argument("--year", type=number(1900, 2199, integer=True),
                   help="avert: the calendar year of the hours")
    g.add_argument("--column", help="avert: AVERT region; nyiso-lmp: zone; watttime-csv: "
                   "value column")
    g.add_argument("--start", help="urdb-json: first hour (ISO, UTC unless offset given)")
    g.add_argument("--end", help="urdb-json: end of the span (exclusive)")
    g.add_argument("--tier", type=number(0, integer=True),
                   help="urdb-json: consumption tier (default 0)")
    g.add_argument("--time-column", help="csv: the time column")
    g.add_argument("--value-column", help="csv: the value column")
    g.add_argument("--kind", choices=("price", "carbon", "generation", "irradiance",
                                      "wind-speed"),
                   help="csv: what the values are (generation, irradiance and wind-speed: "
                   "series a [[supply]] entry reads, by --region name)")
    g.add_argument("--unit", help="csv: e.g. EUR/MWh, USD/kWh, gCO2/kWh, lb/MWh")
    g.add_argument("--time-format", help="csv: strftime codes, e.g. '%%d.%%m.%%Y %%H:%%M'")
    g.add_argument("--delimiter", help="csv: field delimiter (default ',')")
    g.add_argument("--drop-missing", action="store_true",
                   help="skip rows whose value is blank/NaN instead of failing")
    g.add_argument("--json", action="store_true", help="print a JSON summary")
    g.set_defaults(func=_grid)

    j = isub.add_parser("jobs", help="import a job trace as a job set",
                        description="Map a job trace to training jobs stored as a job set.",
                        epilog=_JOBS_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    j.add_argument("format", choices=sorted([*JOB_FORMATS, "llm-jobs"]), metavar="FORMAT")
    j.add_argument("path", type=Path, metavar="PATH")
    j.add_argument("--into", required=True, help="job set name (not a scenario name)")
    j.add_argument("--start", help="origin of relative arrival times (ISO; default 1970-01-01Z)")
    j.add_argument("--app", default="mix", help="application for traces without one "
                   "(default: mix)")
    j.add_argument("--homes", default="unassigned",
                   help="comma-separated home datacenters, assigned in turn")
    j.add_argument("--reference-gpu", default="A100",
                   help="GPU type whose profile turns durations into work (default A100)")
    j.add_argument("--slack", type=number(0, 1000), default=2.0,
                   help="deadline = arrival + slack x duration; 0: no deadline (default 2)")
    j.add_argument("--limit", type=number(1, integer=True),
                   help="keep only the first N jobs by arrival")
    j.add_argument("--timezone", default="UTC", help="philly: zone of the timestamps")
    j.add_argument("--replace", action="store_true", help="empty the job set first")
    j.add_argument("--json", action="store_true", help="print a JSON summary")
    j.set_defaults(func=_jobs)

    r = isub.add_parser("runs", help="copy the runs of a side file into the store",
                        description="Copy every run of another store file (the side file a "
                        "plan writes when the store stays locked) into the store, in one "
                        "transaction; runs already there are skipped.")
    r.add_argument("path", type=Path, metavar="FILE")
    r.set_defaults(func=_runs)

    pr = isub.add_parser("profiles", help="fit measured GPU profiles into the store")
    pr.add_argument("kind", choices=("pollux", "zeus"))
    pr.add_argument("directory", type=Path, metavar="DIR",
                    help="pollux: folder of <app>/placements.csv; zeus: folder with "
                    "summary_power_v100.csv")
    pr.set_defaults(func=_profiles)


def _fail(exc: Exception) -> int:
    return fail(exc)


def _grid(args: argparse.Namespace) -> int:
    options: dict[str, Any] = {
        "intensity": args.intensity, "currency": args.currency, "timezone": args.timezone,
        "year": args.year, "start": args.start, "end": args.end, "tier": args.tier,
        "time_column": args.time_column, "value_column": args.value_column, "kind": args.kind,
        "unit": args.unit, "time_format": args.time_format, "delimiter": args.delimiter,
        "drop_missing": args.drop_missing or None, "column": args.column,
    }
    try:
        # Parse and check the whole file before the store (and its lock) is opened.
        frame = read_grid(args.format, args.path, args.region, **options)
        with Store(args.db) as store:
            info = write_grid(store, frame, args.path)
    except InputError as exc:
        return _fail(exc)
    summary = {"path": info.path, "region": info.region, "kind": info.kind, "rows": info.rows,
               "start_utc": info.start.isoformat(), "end_utc": info.end.isoformat(),
               "min": info.minimum, "max": info.maximum, "unit": info.unit}
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"imported {info.rows} {info.kind} rows into region {info.region}: "
              f"{info.start} .. {info.end} UTC, {info.minimum:.4g} .. {info.maximum:.4g} "
              f"{info.unit}")
    return 0


def _jobs(args: argparse.Namespace) -> int:
    homes = [h.strip() for h in args.homes.split(",") if h.strip()]
    try:
        if args.format == "llm-jobs":  # jobs by model config: workbench.llm_jobs
            from workbench.llm_jobs import import_llm_jobs, read_llm_trace

            frame = read_llm_trace(args.path)
            with Store(args.db) as store:
                info = import_llm_jobs(store, frame, args.path, args.into, start=args.start,
                                       homes=homes, reference_gpu=args.reference_gpu,
                                       replace=args.replace)
        else:
            trace = read_jobs(args.format, args.path, timezone=args.timezone,
                              limit=args.limit)
            with Store(args.db) as store:
                info = import_jobs(
                    store, args.format, args.path, args.into, start=args.start,
                    app=args.app, homes=homes, reference_gpu=args.reference_gpu,
                    slack=args.slack, replace=args.replace, trace=trace,
                )
    except InputError as exc:
        return _fail(exc)
    summary = {"path": info.path, "job_set": info.job_set, "jobs": info.jobs,
               "skipped": info.skipped, "apps": info.apps,
               "first_arrival": info.first_arrival.isoformat() if info.first_arrival else None,
               "last_arrival": info.last_arrival.isoformat() if info.last_arrival else None,
               "gpus": [info.gpus_min, info.gpus_max]}
    if args.json:
        print(json.dumps(summary))
    else:
        skipped = ", ".join(f"{n} {why}" for why, n in info.skipped.items() if n) or "none"
        print(f"imported {info.jobs} jobs into job set {info.job_set} (skipped: {skipped}); "
              f"arrivals {arrival_span(info.first_arrival, info.last_arrival, args.start)}, "
              f"{info.gpus_min}-{info.gpus_max} GPUs")
    return 0


def _runs(args: argparse.Namespace) -> int:
    if not args.path.is_file():
        print(f"error: {args.path}: no such store file; pass the side file a plan named",
              file=sys.stderr)
        return 2
    if args.path.resolve() == Path(args.db).resolve():
        print(f"error: {args.path} is the store itself (--db); pass the side file a plan "
              "named", file=sys.stderr)
        return 2
    check_side_file(args.path)  # a damaged or foreign file fails here, before the lock
    with Store(args.db) as store:
        ids = store.copy_runs_from(args.path)
    print(f"copied {len(ids)} run(s) from {args.path} into {args.db}")
    return 0


class _StoreOnFirstUse:
    """A store opened on first use: the profile fits (seconds) run before the store's lock
    is taken, as the other imports parse before it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._store: Store | None = None

    def __getattr__(self, name: str) -> Any:
        if self._store is None:
            self._store = Store(self.path)
        return getattr(self._store, name)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
TRACE_ORIGIN = pd.Timestamp("1970-01-01", tz="UTC")
"""Where a relative trace's times sit when no ``--start`` placed them."""


def _utc(t: Any) -> pd.Timestamp:
    stamp = pd.Timestamp(t)
    return stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp


def trace_relative(first: Any, start: str | None = None) -> bool:
    """True when arrivals starting at ``first`` are a relative trace's offsets: no
    ``--start`` given and the first arrival within ten years of :data:`TRACE_ORIGIN`
    (1970-01-01 is no date anyone's jobs arrived on). Naive times are UTC (the store's)."""
    return start is None and first is not None \
        and _utc(first) < TRACE_ORIGIN + pd.Timedelta(days=365 * 10)


def hours_after_trace_start(t: Any) -> float:
    """A relative trace's time as hours after its start: ``(t - 1970-01-01Z) / 1 h``."""
    return (_utc(t) - TRACE_ORIGIN).total_seconds() / 3600.0


def arrival_span(first: Any, last: Any, start: str | None = None) -> str:
    """The arrival span: as offsets from the trace's origin when the trace is relative and
    no ``--start`` was given (its times sit at 1970-01-01, which is no date), else UTC."""
    if first is None or last is None:
        return "none"
    if trace_relative(first, start):
        def offset(t: Any) -> str:
            return f"+{hours_after_trace_start(t):,.1f} h"

        return (f"{offset(first)} .. {offset(last)} after the trace's start (relative "
                "times; pass --start to place them)")
    return f"{_utc(first):%Y-%m-%d %H:%M} .. {_utc(last):%Y-%m-%d %H:%M} UTC"


def _profiles(args: argparse.Namespace) -> int:
    from workbench.fit import ProfileDataError
    from workbench.profiles import import_profiles

    store = _StoreOnFirstUse(args.db)
    try:
        n = import_profiles(store, args.kind, args.directory)
    except (ProfileDataError, FileNotFoundError) as exc:
        return _fail(exc)
    finally:
        store.close()
    print(f"saved {n} profiles ({args.kind}) into {args.db}")
    return 0
