"""Green power and the real bill: the targets of issue 23 measured on the final code.

Usage::

    python bench/green_power.py [--data ../shared/data] [--skip-seed3] [--json]

1. **The battery scenario** ``examples/green_power.toml`` (60 kW of clear-sky solar and a
   120 kWh battery in California, a URDB demand-charge tariff in Virginia, Texas on the grid
   alone; a week of July 2023, real prices and carbon), built the way a user builds it
   (``workbench import ...`` then ``workbench scenario build``) into a scratch store. The
   default policy runs with the power-limit menu (``--power-limits default``) and again with
   ``--ignore supply,demand-charges,power-limits`` (planned blind to the levers; the
   simulator still meters and bills them); asap-home, follow-renewables,
   power-limit-only and the hindsight plan (``offline``) beside them, every run on the
   product's honest default forecast::

       bill saving  = 1 - bill_total(default) / bill_total(default, ignoring the levers)
       green points = 100 (green_share(default) - green_share(asap-home))
       parts        = attribute_savings(default, ignoring): they add up to the bill saving

2. **Power limits**: leave-one-limit-out error of epoch time and average power on each Zeus
   GPU (``../shared/data/profiles/zeus/summary_power_<gpu>.csv``), median of ``|pred/meas -
   1|``.
3. **seed3** under the default policy with the power-limit menu and without it: energy,
   cost, misses.

Part 1 also writes ``docs/results/green_power_hours.{csv,md}``: per local hour of day at the
solar site, the sun it could take and, for asap-home, the look-ahead and the hindsight plan,
its busy GPUs, battery discharge and grid import, and the other sites' load.

Prints CPU seconds per run (the machine is shared: wall time says little) and the load
average; writes ``docs/results/green_power.{csv,md}``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from common import write_table

from workbench.cli import main as cli
from workbench.metrics import attribute_savings
from workbench.power_limits import DEFAULT_MENU, leave_one_limit_out, read_zeus_limits
from workbench.runner import RunSpec, fit_forecast, forecast_mode, simulate_spec
from workbench.scenarios import build_seed3
from workbench.schema import site_key
from workbench.store import Store

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "examples" / "green_power.toml"
ZONES = ("US-CAL-CISO", "US-TEX-ERCO", "US-MIDA-PJM")
LEVERS = frozenset({"supply", "demand-charges", "power-limits"})
ZEUS_GPUS = ("a40", "p100", "rtx6000", "v100")


def build(data: Path, db: Path) -> Any:
    """Import the series and jobs of ``examples/green_power.toml`` and build it (CLI)."""
    sc = data / "grid" / "sustain-cluster"
    argvs = []
    for z in ZONES:
        argvs += [["grid", "electricitymaps-csv", str(sc / "carbon" / z / f"{z}_2023_hourly.csv"),
                   "--region", z],
                  ["grid", "price-csv", str(sc / "prices" / z / f"{z}_electricity_prices_2023.csv"),
                   "--region", z]]
    argvs.append(["jobs", "pollux-workload",
                  str(data / "jobs" / "pollux" / "workloads" / "workload-6.csv"),
                  "--into", "pollux-w6", "--replace"])
    with contextlib.redirect_stdout(sys.stderr):
        for argv in argvs:
            if cli(["--db", str(db), "import", *argv]) != 0:
                sys.exit(f"import failed: workbench import {' '.join(argv)}")
        if cli(["--db", str(db), "scenario", "build", "green3", "--config", str(CONFIG)]) != 0:
            sys.exit(f"scenario build failed: {CONFIG}")
    with Store(db) as store:
        return store.load_scenario("green3")


def _run(sc: Any, policy: str, fitted: Any, **spec: Any) -> tuple[Any, float]:
    t0 = time.process_time()
    res, _ = simulate_spec(RunSpec(sc.name, policy, baseline=False, **spec), sc, fitted=fitted)
    return res, time.process_time() - t0


def _row(label: str, res: Any, cpu_s: float, sc: Any) -> dict[str, Any]:
    m = res.metrics
    row = {"run": label, "bill_total": m["bill_total"], "bill_energy": m["bill_energy"],
           "bill_ppa": m["bill_ppa"], "bill_export_credit": m["bill_export_credit"],
           "bill_demand": m["bill_demand"], "bill_capacity": m["bill_capacity"],
           "bill_no_jobs_total": m["bill_no_jobs_total"], "plans_part": m["cost"],
           "green_share": m["green_share"], "curtailed_kwh": m["curtailed_kwh"],
           "battery_throughput_kwh": m["battery_throughput_kwh"],
           "battery_soc_violations": m["battery_soc_violations"],
           "energy_kwh": m["energy_kwh"], "power_limited_share": m["power_limited_share"],
           "deadline_misses": m["deadline_misses"], "jobs_unfinished": m["jobs_unfinished"],
           "cpu_s": cpu_s}
    for d in sc.datacenters:
        row[f"peak_kw:{d.name}"] = m.get(f"peak_kw:{d.name}", np.nan)
    return row


HOUR_RUNS = ("asap-home", "lookahead", "offline")
"""The runs of the hour-of-day table."""


def by_hour(sc: Any, runs: dict[str, Any]) -> pd.DataFrame:
    """Per local hour of day at the site with renewables (summed over the horizon's days):
    the sun it could take (used + curtailed, kWh), and per run of :data:`HOUR_RUNS` its
    busy GPUs (mean over the hour's slots), its battery discharge and grid import (kWh),
    and the other sites' load (kWh)."""
    site = sc.supply.sources[0].datacenter
    tz = next(d.timezone for d in sc.datacenters if d.name == site)
    others = [d.name for d in sc.datacenters if d.name != site]
    out: pd.DataFrame | None = None
    for label in HOUR_RUNS:
        s = runs[label][0].slots
        frame = pd.DataFrame({
            "hour": pd.to_datetime(s["time"], utc=True).dt.tz_convert(tz).dt.hour,
            "sun_kwh": s[site_key("renewable_kwh", site)] + s[site_key("curtailed_kwh", site)],
            f"{label}: busy GPUs": sum(s[c] for c in s.columns
                                       if c.startswith(f"gpus_busy:{site}/")),
            f"{label}: battery kWh": s[site_key("discharge_kwh", site)],
            f"{label}: grid kWh": s[site_key("grid_kwh", site)],
            f"{label}: other sites kWh": sum(s[f"energy_kwh:{o}"] for o in others)})
        agg = frame.groupby("hour").agg({c: "mean" if c.endswith("GPUs") else "sum"
                                         for c in frame.columns if c != "hour"})
        out = agg if out is None else out.join(agg.drop(columns="sun_kwh"))
    assert out is not None
    out.index = [f"{h:02d}:00" for h in out.index]
    return out.rename_axis("hour").reset_index()


def battery_scenario(sc: Any) -> tuple[pd.DataFrame, dict[str, Any], pd.DataFrame]:
    """The runs of part 1, the targets' figures and the hour-of-day table."""
    fitted = fit_forecast(sc, forecast_mode(RunSpec(sc.name), sc))
    runs = {
        "asap-home": _run(sc, "asap-home", fitted),
        "follow-renewables": _run(sc, "follow-renewables", fitted),
        "power-limit-only": _run(sc, "power-limit-only", fitted, power_limits=DEFAULT_MENU),
        "lookahead": _run(sc, "lookahead", fitted, power_limits=DEFAULT_MENU),
        "lookahead --ignore all": _run(sc, "lookahead", fitted, power_limits=DEFAULT_MENU,
                                       ignore=LEVERS),
        # The hindsight plan under the same objective (true prices, arrivals and sun; it
        # owes only the share of a job's work whose window lies inside the horizon).
        "offline": _run(sc, "offline", fitted, power_limits=DEFAULT_MENU),
    }
    rows = [_row(k, r, c, sc) for k, (r, c) in runs.items()]
    best, blind, asap = (runs[k][0] for k in ("lookahead", "lookahead --ignore all",
                                              "asap-home"))
    att = attribute_savings(best, blind, sc)
    saving = blind.metrics["bill_total"] - best.metrics["bill_total"]
    figures = {
        "bill_saving_pct": 100.0 * saving / blind.metrics["bill_total"],
        "green_points_vs_asap": 100.0 * (best.metrics["green_share"]
                                         - asap.metrics["green_share"]),
        "misses": (int(best.metrics["deadline_misses"]), int(blind.metrics["deadline_misses"])),
        "unfinished": (int(best.metrics["jobs_unfinished"]),
                       int(blind.metrics["jobs_unfinished"])),
        "parts": {k: round(v, 4) for k, v in att["cost"].items()},
        "parts_sum": float(sum(att["cost"].values())), "saving": float(saving),
        "bill_note": str(best.metrics.get("bill_note") or ""),
    }
    return pd.DataFrame(rows), figures, by_hour(sc, runs)


def power_limit_cv(data: Path) -> pd.DataFrame:
    """Part 2: leave-one-limit-out median errors per Zeus GPU."""
    rows = []
    for gpu in ZEUS_GPUS:
        meas = read_zeus_limits(data / "profiles" / "zeus" / f"summary_power_{gpu}.csv")
        cv = leave_one_limit_out(meas)
        rt = np.concatenate([np.asarray(v) for v in cv["time_ratio"]])
        rp = np.concatenate([np.asarray(v) for v in cv["power_ratio"]])
        rows.append({"gpu": gpu, "limits": int(meas["limit_w"].nunique()),
                     "held_out_points": int(rt.size),
                     "time_median_err_pct": 100 * float(np.median(np.abs(rt - 1))),
                     "power_median_err_pct": 100 * float(np.median(np.abs(rp - 1))),
                     "time_max_err_pct": 100 * float(np.max(np.abs(rt - 1))),
                     "power_max_err_pct": 100 * float(np.max(np.abs(rp - 1)))})
    return pd.DataFrame(rows)


def seed3_menu() -> pd.DataFrame:
    """Part 3: seed3 under the default policy with and without the power-limit menu."""
    sc = build_seed3(seed=0)
    rows = []
    for label, menu in (("no menu", ()), ("menu 1,0.85,0.7,0.55", (1.0, 0.85, 0.7, 0.55)),
                        ("default menu " + ",".join(f"{f:g}" for f in DEFAULT_MENU),
                         DEFAULT_MENU)):
        res, cpu = _run(sc, "lookahead", None, power_limits=menu)
        m = res.metrics
        rows.append({"run": label, "energy_kwh": m["energy_kwh"], "cost": m["cost"],
                     "carbon_kg": m["carbon_kg"], "deadline_misses": m["deadline_misses"],
                     "jobs_unfinished": m["jobs_unfinished"],
                     "power_limited_share": m["power_limited_share"],
                     "limit_saved_kwh": m["limit_saved_kwh"], "cpu_s": cpu})
    out = pd.DataFrame(rows)
    out["energy_vs_no_menu"] = out["energy_kwh"] / out["energy_kwh"].iloc[0]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--skip-seed3", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="wb-green-") as tmp:
        sc = build(args.data, Path(tmp) / "green.duckdb")
        table, figures, hours = battery_scenario(sc)
    cv = power_limit_cv(args.data)
    s3 = None if args.skip_seed3 else seed3_menu()
    load1 = os.getloadavg()
    out = {"battery": table.to_dict(orient="records"), "figures": figures,
           "hours": hours.to_dict(orient="records"),
           "power_limit_cv": cv.to_dict(orient="records"),
           "seed3": None if s3 is None else s3.to_dict(orient="records"),
           "load_average": {"start": load0, "end": load1}}
    if args.json:
        print(json.dumps(out, default=float))
        return
    pd.set_option("display.width", 200)
    print(table.round(3).to_string(index=False))
    print(json.dumps(figures, indent=1, default=float))
    print(cv.round(2).to_string(index=False))
    if s3 is not None:
        print(s3.round(3).to_string(index=False))
    print(f"load average at start {load0[0]:.2f}, at end {load1[0]:.2f} (2 cores)")
    notes = [
        f"bill total {figures['bill_saving_pct']:.1f}% below the same policy with --ignore "
        f"supply,demand-charges,power-limits; green share {figures['green_points_vs_asap']:+.1f} "
        f"points against asap-home; misses {figures['misses'][0]} vs {figures['misses'][1]}, "
        f"unfinished {figures['unfinished'][0]} vs {figures['unfinished'][1]}",
        f"parts of the saving {figures['parts']} add up to {figures['parts_sum']:.4f} "
        f"(the saving {figures['saving']:.4f})",
        figures["bill_note"], "cpu_s: CPU seconds of the run (process time)",
        f"load average {load0[0]:.2f} at the start, {load1[0]:.2f} at the end (2 cores)"]
    write_table(table, "green_power", "Green power and the real bill (examples/green_power.toml)",
                notes)
    site = sc.supply.sources[0].datacenter
    write_table(hours.round(2), "green_power_hours",
                f"Green power by local hour of day at {site} (sums over the week)",
                [f"sun_kwh: the renewables {site} could take (used + curtailed); per run: busy "
                 "GPUs (mean over the hour's slots), battery discharge and grid import at "
                 f"{site}, and the other sites' load (kWh)"])
    write_table(cv, "power_limits_cv", "GPU power limits: leave-one-limit-out error on Zeus")
    if s3 is not None:
        write_table(s3, "power_limits_seed3", "seed3, default policy, with and without the "
                    "power-limit menu")


if __name__ == "__main__":
    main()
